/* Reading the largest trace (RetinaNet 1280, ~320 layers): median of 21
 * loads, so the reader never shows up in a run's wall time. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "emu/graph.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void tb_bench_trace(void)
{
    const char *path = "traces/retinanet-1280-v3-8.json";
    double t[21];
    int layers = 0;
    for (int i = 0; i < 21; i++) {
        graph g;
        tpu_error e;
        double t0 = now_s();
        if (graph_load(&g, path, &e) != TPU_OK) {
            printf("trace load: failed: %s\n", e.msg);
            return;
        }
        t[i] = now_s() - t0;
        layers = g.n_layers;
        graph_free(&g);
    }
    qsort(t, 21, sizeof t[0], cmp_d);
    printf("trace load %s (%d layers): %.3f ms median of 21\n", path, layers,
           t[10] * 1e3);
}
