/* Whole-step simulation speed (issue 4 targets: RetinaNet 2560x2560 on
 * v3-64 in < 10 s, ResNet-50 data-parallel on v3-2048 in < 30 s, each on
 * one host core with < 2 GiB; and a 2D UNet split over 1024 cores).  Median of 5 runs, wall time; peak RSS of
 * the process so far. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "test/bench.h"
#include "emu/sim.h"

static void one(const char *path)
{
    double t[5];
    double step = 0;
    for (int i = 0; i < 5; i++) {
        graph g;
        tpu_error e = {0};
        double t0 = tb_now();
        if (graph_load(&g, path, &e)) {
            printf("%s: %s\n", path, e.msg);
            return;
        }
        sim_opts o;
        sim_opts_default(&o);
        o.trace_path = path;
        emu_result r;
        if (sim_run(&g, &o, &r, &e)) {
            printf("%s: %s\n", path, e.msg);
            graph_free(&g);
            return;
        }
        t[i] = tb_now() - t0;
        step = r.step_time_s;
        emu_result_free(&r);
        graph_free(&g);
    }
    qsort(t, 5, sizeof t[0], tb_cmp_double);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("%s: simulated step %.4f s, host time median %.3f s (min %.3f, "
           "max %.3f), peak RSS %.0f MiB\n",
           path, step, t[2], t[0], t[4], (double)ru.ru_maxrss / 1024);
}

void tb_bench_engine(void)
{
    one("traces/reference/retinanet-2560-v3-64.json");
    one("traces/resnet50-224-v3-2048.json");
    one("traces/reference/unet3d-256-v3-128.json");
    /* 1024 cores per replica ([1,32,32,1]): the lowering decides
     * group-wide halos per axis, not per shard (per shard it takes
     * 13.4 s, 43.5 s for 2048 cores) */
    one("test/bench/unet2d-8192-v3-2048-p1024.json");
}
