/* Metamorphic properties of the timing model on every trace the project
 * ships: faster hardware never makes a step slower.  Each property doubles
 * one resource (HBM bandwidth, clock, ICI links, MXUs per core, vector
 * ALUs) and checks every trace's step time, and every core's, does not
 * grow.  These hold for any correct event model without scheduling
 * anomalies, so they check the engine, the lowering and the unit models
 * on shapes nobody wrote a golden figure for.
 *
 * Doubling VMEM must not slow a trace either.  Taking the largest tile that
 * fits would: its first load and last store are what double buffering
 * cannot hide (cifar10-keras-v2-8: 25.53, 25.17, 24.99, 25.06, 25.25 ms at
 * 4 ... 64 MiB).  The tile search (firmware/lower.c, xla.tile_search)
 * prices every candidate with the engine and keeps a smaller VMEM's
 * options, so it holds (25.53, 25.16, 24.98, 24.98, 24.98).  Its budgets
 * are powers of two below VMEM, so a VMEM that is not one (20 MB) keeps
 * them too.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/sim.h"
#include "test/harness.h"

static const char *const dirs[] = {"traces", "traces/reference",
                                   "traces/functional", "test/inputsplit"};

typedef struct {
    const char *label;
    const char *key, *value;
} prop;

/* v3 defaults doubled (emu/params.c); v2 traces see their own doubling
 * except for the fixed values, which are at least as large as v2's. */
static const prop props[] = {
    {"HBM bandwidth x2", "hbm.bandwidth_gbs", "900"},
    {"clock x2", "clock_hz", "1.88e9"},
    {"ICI links x2", "ici.link_gbs", "164"},
    {"4 MXUs per core", "mxus_per_core", "4"},
    {"vector ALUs x2", "vpu.alus", "4"},
    {"VMEM x2", "vmem_bytes", "33554432"},
    /* not a power of two: the search's budgets below it are (20 MB must
     * not be slower than 16 MiB on RetinaNet 1280) */
    {"VMEM 20 MB", "vmem_bytes", "20000000"},
};

static int run(const graph *g, const char *key, const char *value,
               emu_result *r, tpu_error *e)
{
    sim_opts o;
    sim_opts_default(&o);
    /* Capacity never changes timing; 64 GiB lets every trace fit. */
    const char *k[2] = {"hbm.capacity_gib", key};
    const char *v[2] = {"64", value};
    o.n_sets = key ? 2 : 1;
    o.set_keys = k;
    o.set_values = v;
    return sim_run(g, &o, r, e) == 0;
}

static int is_json(const char *name)
{
    size_t n = strlen(name);
    return n > 5 && strcmp(name + n - 5, ".json") == 0;
}

void th_suite_metamorphic(th_ctx *t)
{
    th_case(t, "doubling a resource (HBM bandwidth, clock, ICI, MXUs, "
               "vector ALUs, VMEM) never slows a shipped trace or any core");
    int traces = 0, checks = 0;
    for (size_t d = 0; d < sizeof dirs / sizeof dirs[0]; d++) {
        DIR *dir = opendir(dirs[d]);
        if (!TH_CHECKF(t, dir != NULL, "cannot list %s", dirs[d]))
            continue;
        struct dirent *de;
        while ((de = readdir(dir))) {
            if (!is_json(de->d_name))
                continue;
            char path[1024];
            snprintf(path, sizeof path, "%s/%s", dirs[d], de->d_name);
            graph g;
            tpu_error e = {0};
            if (graph_load(&g, path, &e))
                continue; /* a sweep file or another kind of JSON */
            /* the long ones once under ASan: the plain build covers all */
            if (th_asan() && strstr(path, "2048")) {
                graph_free(&g);
                continue;
            }
            emu_result base;
            if (!run(&g, NULL, NULL, &base, &e)) {
                graph_free(&g); /* does not run on its own slice */
                continue;
            }
            traces++;
            for (size_t p = 0; p < sizeof props / sizeof props[0]; p++) {
                emu_result r;
                if (!TH_CHECKF(t, run(&g, props[p].key, props[p].value, &r,
                                      &e), "%s with %s: %s", path,
                               props[p].label, e.msg))
                    continue;
                checks++;
                /* a relative 1e-9 for the engine's picosecond rounding */
                double tol = base.step_time_s * 1e-9 + 1e-12;
                TH_CHECKF(t, r.step_time_s <= base.step_time_s + tol,
                          "%s: %s makes the step slower: %.9g s -> %.9g s",
                          path, props[p].label, base.step_time_s,
                          r.step_time_s);
                for (int c = 0; c < r.cores && c < base.cores; c++) {
                    double b = base.per_core[c].step_time_s;
                    if (r.per_core[c].step_time_s > b + b * 1e-9 + 1e-12) {
                        TH_FAIL(t, "%s: %s makes core %d slower: %.9g s -> "
                                   "%.9g s", path, props[p].label, c, b,
                                r.per_core[c].step_time_s);
                        break;
                    }
                }
                emu_result_free(&r);
            }
            emu_result_free(&base);
            graph_free(&g);
        }
        closedir(dir);
    }
    TH_CHECKF(t, traces >= 20 && checks == traces * (int)(sizeof props / sizeof props[0]),
              "%d traces, %d checks", traces, checks);
}
