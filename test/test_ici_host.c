/* ICI: the host-time work must not move the model's figures.  The
 * expected doubles were printed with %.17g by the build before that work
 * (commit e4db4be, the solve over all active flows at every event); any
 * change of the model itself has to re-record them on purpose.  Both
 * event loops give them: the reference one (ici_set_scan: a scan over
 * every active flow at every event) and the finish-time heap. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/params.h"
#include "interconnect/ici.h"
#include "test/harness.h"

static ici *mk(const char *name, const char *set1, const char *set2)
{
    const tpu_system *s = tpu_system_find(name);
    tpu_params p;
    tpu_params_default(&p, s->gen);
    const char *sets[2] = {set1, set2};
    for (int i = 0; i < 2; i++) {
        if (!sets[i])
            continue;
        char key[64];
        const char *eq = strchr(sets[i], '=');
        memcpy(key, sets[i], (size_t)(eq - sets[i]));
        key[eq - sets[i]] = '\0';
        tpu_error e = {0};
        if (tpu_params_set(&p, key, eq + 1, &e) != TPU_OK)
            return NULL;
    }
    return ici_new(&p.ici, s->dim_x, s->dim_y, s->full_pod);
}

static double whole(ici *n, double bytes)
{
    int nc = ici_num_cores(n);
    int *c = malloc((size_t)nc * sizeof(int));
    for (int i = 0; i < nc; i++)
        c[i] = i;
    double t = ici_allreduce(n, c, nc, bytes, 0);
    free(c);
    return t;
}

/* Bit for bit: a difference in the last place is a bug, not noise. */
static void same(th_ctx *t, const char *what, double got, double want)
{
    TH_CHECKF(t, memcmp(&got, &want, sizeof got) == 0,
              "%s: %.17g, expected %.17g", what, got, want);
}

void th_suite_ici_host(th_ctx *t)
{
    const double mib = 1 << 20;

    th_case(t, "all-reduce figures bit-identical to the full re-solve, "
               "both event loops");
    {
        struct {
            const char *sys, *s1, *s2;
            double bytes, want;
        } c[] = {
            /* v3-256: one link's rounds meet another's within the
             * solver's tolerance (41e9 and 41e9 + 8e-6 B/s) */
            {"v3-256", NULL, NULL, 256 * mib, 0.0035166560419668427},
            {"v3-256", "ici.hop_latency_s=0", "ici.onchip_latency_s=0",
             256 * mib, 0.0034590220487804818},
            {"v3-32", "ici.wrap=1", NULL, 16 * mib, 0.00010966108943089431},
            {"v3-8", "ici.wrap=1", NULL, 1 * mib, 1.1594536585365854e-05},
            {"v3-8", "ici.hop_latency_s=0", "ici.onchip_latency_s=0",
             1 * mib, 1.1189073170731707e-05},
        };
        for (int i = 0; i < (int)(sizeof c / sizeof c[0]); i++) {
            if (th_asan() && i < 2)
                continue; /* v3-256 is slow under ASan */
            ici *n = mk(c[i].sys, c[i].s1, c[i].s2);
            TH_CHECK(t, n != NULL);
            if (!n)
                continue;
            char what[96];
            snprintf(what, sizeof what, "%s %s %s %.0f B", c[i].sys,
                     c[i].s1 ? c[i].s1 : "", c[i].s2 ? c[i].s2 : "",
                     c[i].bytes);
            same(t, what, whole(n, c[i].bytes), c[i].want);
            ici_set_scan(n, 1); /* the cache is emptied: simulated again */
            same(t, what, whole(n, c[i].bytes), c[i].want);
            ici_free(n);
        }
    }

    th_case(t, "strided groups and a multi-hop permute bit-identical, "
               "both event loops");
    {
        ici *n = mk("v2-512", NULL, NULL);
        int nc = ici_num_cores(n), gs = nc / 8;
        int *cores = malloc((size_t)nc * sizeof(int));
        for (int g = 0; g < 8; g++)
            for (int j = 0; j < gs; j++)
                cores[g * gs + j] = g + 8 * j;
        same(t, "v2-512 8 strided groups 16 MiB",
             ici_allreduce_groups(n, cores, gs, 8, 16 * mib, 0),
             0.00097996025806451571);
        ici_set_scan(n, 1);
        same(t, "v2-512 8 strided groups 16 MiB",
             ici_allreduce_groups(n, cores, gs, 8, 16 * mib, 0),
             0.00097996025806451571);
        free(cores);
        ici_free(n);

        /* every core sends a third of the slice away, five sizes: long
         * routes share links, so components span many resources */
        n = mk("v3-128", NULL, NULL);
        nc = ici_num_cores(n);
        ici_flow *fl = malloc((size_t)nc * sizeof(ici_flow));
        for (int c = 0; c < nc; c++) {
            fl[c].src_core = c;
            fl[c].dst_core = (c + nc / 3 + 1) % nc;
            fl[c].bytes = 16 * mib * (1 + c % 5) / 3.0;
        }
        same(t, "v3-128 shift permute", ici_permute(n, fl, nc, 0),
             0.0015084014308943089);
        ici_set_scan(n, 1);
        same(t, "v3-128 shift permute", ici_permute(n, fl, nc, 0),
             0.0015084014308943089);
        free(fl);
        ici_free(n);
    }

    th_case(t, "a model's earlier calls leave no trace in a later one");
    {
        /* The incremental solver keeps per-resource lists, components and
         * share tables across calls; a used model must give what a fresh
         * one gives (distinct sizes defeat the result cache). */
        const char *sys = th_asan() ? "v3-32" : "v3-128";
        ici *fresh = mk(sys, NULL, NULL), *used = mk(sys, NULL, NULL);
        double want = whole(fresh, 64 * mib);
        int nc = ici_num_cores(used);
        int g8[8];
        for (int i = 0; i < 8; i++)
            g8[i] = 8 + i;
        ici_allreduce(used, g8, 8, 3 * mib + 1, 0);
        whole(used, 5 * mib + 3);
        ici_flow f[2] = {{0, nc - 1, 1e6}, {1, 2, 7e5}};
        ici_permute(used, f, 2, 0);
        same(t, "used model", whole(used, 64 * mib), want);
        ici_free(fresh);
        ici_free(used);
    }

    th_case(t, "v3-1024 all-reduce: the heap loop gives the scan's doubles");
    {
        /* 32x16 without wrap-around: open rings whose chips finish each
         * step at different times, tens of thousands of events, where
         * the heap loop replaces a scan over some 3000 active flows */
        if (!th_asan()) {
            ici *h = mk("v3-1024", NULL, NULL), *s = mk("v3-1024", NULL, NULL);
            ici_set_scan(s, 1);
            char what[64];
            for (int i = 0; i < 2; i++) {
                double b = i == 0 ? 1 * mib : 16 * mib;
                snprintf(what, sizeof what, "v3-1024 %.0f B", b);
                same(t, what, whole(h, b), whole(s, b));
            }
            ici_free(h);
            ici_free(s);
        }
    }
}
