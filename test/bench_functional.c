/* Speed of --functional (issue 5: MACs per second of host time), and the
 * loss curves of docs/FUNCTIONAL.md (build/functional-loss.png): the
 * CIFAR-style net on v2-8 [1,2,2,1] and unpartitioned on v2-2.  Median of
 * 3 runs, wall time; MACs are the graph's useful multiply-adds for the
 * global batch (forward, and x3 for a training step), not the padded work
 * the MXU model does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test/bench.h"
#include "emu/out/chart.h"
#include "emu/sim.h"

/* Median host seconds of one run; r keeps the last result. */
static double timed(const char *path, const char *sys, int functional,
                    int steps, int flat, emu_result *keep)
{
    double t[3];
    for (int i = 0; i < 3; i++) {
        graph g;
        tpu_error e = {0};
        if (graph_load(&g, path, &e)) {
            printf("%s: %s\n", path, e.msg);
            return -1;
        }
        if (flat) {
            g.cores_per_replica = 1;
            for (int d = 0; d < g.pdims_rank; d++)
                g.pdims[d] = 1;
        }
        sim_opts o;
        sim_opts_default(&o);
        o.trace_path = path;
        o.system = sys;
        o.functional = functional;
        o.steps = steps;
        emu_result r;
        double t0 = tb_now();
        if (sim_run(&g, &o, &r, &e)) {
            printf("%s: %s\n", path, e.msg);
            graph_free(&g);
            return -1;
        }
        t[i] = tb_now() - t0;
        if (keep && i == 2)
            *keep = r;
        else
            emu_result_free(&r);
        graph_free(&g);
    }
    qsort(t, 3, sizeof t[0], tb_cmp_double);
    return t[1];
}

static void speed(const char *name, int steps)
{
    char path[256];
    snprintf(path, sizeof path, "traces/functional/%s.json", name);
    emu_result r;
    double tf = timed(path, NULL, 1, steps, 0, &r);
    double tt = timed(path, NULL, 0, 1, 0, NULL);
    if (tf < 0 || tt < 0)
        return;
    double macs = r.flops_per_step / 2 * steps;
    printf("functional %s (%d step%s, %s, %d cores): host %.3f s, %.3g "
           "useful MACs/s (timing only: %.4f s per step)\n",
           name, steps, steps > 1 ? "s" : "", r.system, r.cores, tf, macs / tf,
           tt);
    emu_result_free(&r);
}

void tb_bench_functional(void)
{
    speed("conv2d", 1);
    speed("conv3d", 1);
    speed("deconv", 1);
    speed("tiny-train", 20);
    speed("cifar-small", 20);

    /* The two loss curves, for docs/FUNCTIONAL.md. */
    const char *path = "traces/functional/cifar-small.json";
    emu_result a, b;
    if (timed(path, NULL, 1, 20, 0, &a) < 0)
        return;
    if (timed(path, "v2-2", 1, 20, 1, &b) < 0) {
        emu_result_free(&a);
        return;
    }
    double xs[20];
    for (int i = 0; i < 20; i++)
        xs[i] = i;
    chart_series s[2] = {{"[1,2,2,1] v2-8", xs, a.losses, a.n_losses},
                         {"unsplit v2-2", xs, b.losses, b.n_losses}};
    tpu_error e = {0};
    if (chart_lines_png("build/functional-loss.png",
                        "cifar-small: training loss, --functional, seed 1",
                        "step", "loss (softmax cross-entropy)", s, 2, &e))
        printf("functional-loss.png: %s\n", e.msg);
    else
        printf("functional loss curves: build/functional-loss.png\n");
    printf("step  partitioned  unpartitioned\n");
    for (int i = 0; i < a.n_losses && i < b.n_losses; i++)
        printf("%4d  %11.6f  %13.6f\n", i, a.losses[i], b.losses[i]);
    emu_result_free(&a);
    emu_result_free(&b);
}
