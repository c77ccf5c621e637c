/* ICI: the all-reduce's on-chip leg (the exchange between a chip's two
 * cores) overlaps the ring instead of adding to it, without costing small
 * buffers anything. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "emu/params.h"
#include "interconnect/ici.h"
#include "test/harness.h"

/* The ICI figures of docs/ICI.md spelled out, so that a change of the
 * defaults in emu/params.c does not move these tests. */
static ici_params v3_ici(double lat)
{
    ici_params p = {82.0, lat, 164.0, lat / 2, 0};
    return p;
}

static ici *mk(const char *name, const ici_params *p)
{
    const tpu_system *s = tpu_system_find(name);
    return ici_new(p, s->dim_x, s->dim_y, s->full_pod);
}

static int *all_cores(int n)
{
    int *c = malloc((size_t)n * sizeof(int));
    for (int i = 0; i < n; i++)
        c[i] = i;
    return c;
}

/* What the 2D algorithm itself can reach on a whole slice: quarter
 * streams x-first and y-first load each x link direction with
 * (dx-1)/dx (1 + 1/dy) x bytes / (link bw x links per dimension) and the
 * y links with (dy-1)/dy (1 + 1/dx); the lower bound of docs/ICI.md
 * spreads the same bytes evenly.  1 on square slices, 1.063 on 16x8. */
static double algo_factor(int dx, int dy)
{
    double n = (double)dx * dy;
    double x = (dx - 1.0) / dx * (1 + 1.0 / dy);
    double y = (dy - 1.0) / dy * (1 + 1.0 / dx);
    return (x > y ? x : y) / ((n - 1) / n);
}

static double link_bound(const ici *n, const ici_params *p, const int *c,
                         int nc, double bytes)
{
    int chips = nc / 2, links = ici_allreduce_links(n, c, nc);
    return 2.0 * (chips - 1) / chips * bytes / (p->link_gbs * 1e9 * links);
}

void th_suite_ici_onchip(th_ctx *t)
{
    static char names[8][120]; /* th_case keeps the pointer */
    const double big = 256.0 * (1 << 20);

    /* Zero latency, 256 MiB: bandwidth alone.  An on-chip leg added to
     * the ring would take 1.118 (v3-8), 1.078 (v3-32), 1.260 (v3-256),
     * 1.031 (v3-2048) x the bound.  Tolerances: 1% on slices whose links carry twice what the on-chip
     * path does (unwrapped: 2 links a chip), 1% over the algorithm's own
     * imbalance on the rectangle; 2% on the full pod, where the four links
     * carry 2(n-1)/n x bytes / (4 x 82 GB/s) and the on-chip path bytes /
     * 164 GB/s: the same time, so the on-chip leg cannot hide and its
     * fill at the phase boundaries shows. */
    const char *sys[] = {"v3-8", "v3-32", "v3-256", "v3-2048"};
    const double tol[] = {1.01, 1.01, 1.01, 1.02};
    for (int si = 0; si < 4; si++) {
        const tpu_system *s = tpu_system_find(sys[si]);
        if (th_asan() && s->full_pod) /* 1.5 M flows: the plain build */
            continue;
        snprintf(names[si], sizeof names[0], "zero latency, 256 MiB on %s "
                 "(%dx%d): within %.0f%% of what the ring algorithm allows, "
                 "never below a bound", sys[si], s->dim_x, s->dim_y,
                 (tol[si] - 1) * 100);
        th_case(t, names[si]);
        ici_params p = v3_ici(0);
        ici *n = mk(sys[si], &p);
        int nc = ici_num_cores(n), *c = all_cores(nc);
        double tb = ici_allreduce(n, c, nc, big, 0);
        double lb = link_bound(n, &p, c, nc, big);
        double algo = s->full_pod ? 1.0 : algo_factor(s->dim_x, s->dim_y);
        /* the on-chip path moves the whole buffer each way (half before
         * the reduce-scatter steps, half after the all-gather ones) */
        double ob = big / (p.onchip_gbs * 1e9);
        TH_CHECKF(t, tb >= lb && tb >= ob, "%g s below a bound (links %g, "
                  "on chip %g)", tb, lb, ob);
        TH_CHECKF(t, tb <= tol[si] * algo * lb, "%.4f x the bound, the "
                  "algorithm allows %.4f", tb / lb, algo);
        /* bytes conserved: each on-chip direction carried the buffer */
        for (int ch = 0; ch < nc / 2; ch += nc / 2 > 8 ? nc / 16 : 1)
            for (int d = 0; d < 2; d++) {
                double moved = ici_onchip_busy_s(n, ch, d) * p.onchip_gbs * 1e9;
                TH_CHECKF(t, fabs(moved - big) < 1e-9 * big, "chip %d dir %d "
                          "on chip %.0f B, not %.0f", ch, d, moved, big);
            }
        free(c);
        ici_free(n);
    }

    /* With the default latencies: at large sizes the on-chip leg costs
     * (nearly) nothing against an infinitely fast on-chip path; added
     * after the ring it would cost 11% (v3-8) and 7% (v3-32) at 256 MiB,
     * 14% (v3-256) at 64 MiB. */
    th_case(t, "default latencies, 64 and 256 MiB: the on-chip leg adds "
               "under 1% to the time an infinitely fast one gives");
    const char *ov[] = {"v3-8", "v3-32", "v3-256"};
    for (int si = 0; si < (th_asan() ? 2 : 3); si++) {
        ici_params p = v3_ici(1e-6), fast = p;
        fast.onchip_gbs = 1e6;
        ici *n = mk(ov[si], &p), *f = mk(ov[si], &fast);
        int nc = ici_num_cores(n), *c = all_cores(nc);
        /* v3-256 at 64 MiB only: with latencies each call is 0.5 s */
        double top = si == 2 || th_asan() ? 64.0 * (1 << 20) : big;
        for (double b = 64.0 * (1 << 20); b <= top; b *= 4) {
            double ta = ici_allreduce(n, c, nc, b, 0);
            double tf = ici_allreduce(f, c, nc, b, 0);
            TH_CHECKF(t, ta <= 1.01 * tf, "%s %.0f B: %.4f x", ov[si], b,
                      ta / tf);
        }
        free(c);
        ici_free(n);
        ici_free(f);
    }

    /* Small buffers are latency bound; overlapping the on-chip leg must
     * not cost them.  Upper limits: the times of the schedule that adds
     * the leg after the ring (these parameters), plus 0.1%.  Whole v3-8 and v3-32, the
     * 8-core partition group of v3-64 (a row of 4 chips) and the 16-core
     * one of v3-128. */
    th_case(t, "default latencies, 4 KiB to 4 MiB: no slower than before the "
               "on-chip fix");
    {
        static const struct {
            const char *sys;
            int group;
            double bytes, before_s;
        } ref[] = {
            {"v3-8", 8, 4096, 5.04995122e-06},
            {"v3-8", 8, 65536, 5.79921951e-06},
            {"v3-8", 8, 262144, 8.19687805e-06},
            {"v3-8", 8, 1048576, 1.47875122e-05},
            {"v3-8", 8, 4194304, 4.45932851e-05},
            {"v3-32", 32, 4096, 1.90429268e-05},
            {"v3-32", 32, 65536, 1.96868293e-05},
            {"v3-32", 32, 262144, 2.17473171e-05},
            {"v3-32", 32, 1048576, 3.04257927e-05},
            {"v3-32", 32, 4194304, 5.81805044e-05},
            {"v3-64", 8, 65536, 1.11738537e-05},
            {"v3-64", 8, 1048576, 2.37894634e-05},
            {"v3-64", 8, 4194304, 8.32067648e-05},
            {"v3-128", 16, 262144, 3.12215610e-05},
            {"v3-128", 16, 1048576, 4.57207317e-05},
            {"v3-128", 16, 4194304, 1.04872737e-04},
        };
        ici_params p = v3_ici(1e-6);
        for (size_t i = 0; i < sizeof ref / sizeof ref[0]; i++) {
            ici *n = mk(ref[i].sys, &p);
            int *c = all_cores(ref[i].group);
            double d = ici_allreduce(n, c, ref[i].group, ref[i].bytes, 0);
            TH_CHECKF(t, d <= ref[i].before_s * 1.001, "%s group %d %.0f B: "
                      "%.6g s, was %.6g s", ref[i].sys, ref[i].group,
                      ref[i].bytes, d, ref[i].before_s);
            free(c);
            ici_free(n);
        }
    }

    th_case(t, "zero latency, v3-8 from 2 to 64 MiB: the time never steps "
               "down as the buffer grows (chunk counts change on the way)");
    {
        ici_params p = v3_ici(0);
        ici *n = mk("v3-8", &p);
        int nc = ici_num_cores(n), *c = all_cores(nc);
        double prev = 0, worst = 0, at = 0;
        for (double b = 2.0 * (1 << 20); b <= 64.0 * (1 << 20);
             b += 512.0 * 1024) {
            double d = ici_allreduce(n, c, nc, b, 0);
            if (prev > 0 && (prev - d) / prev > worst) {
                worst = (prev - d) / prev;
                at = b;
            }
            prev = d;
        }
        TH_CHECKF(t, worst < 1e-9, "%.3g%% faster at %.0f B", worst * 100, at);
        free(c);
        ici_free(n);
    }
}
