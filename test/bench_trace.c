/* Reading the largest trace (RetinaNet 1280, ~320 layers): median of 21
 * loads, so the reader never shows up in a run's wall time. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "test/bench.h"
#include "emu/graph.h"

void tb_bench_trace(void)
{
    const char *path = "traces/retinanet-1280-v3-8.json";
    double t[21];
    int layers = 0;
    for (int i = 0; i < 21; i++) {
        graph g;
        tpu_error e;
        double t0 = tb_now();
        if (graph_load(&g, path, &e) != TPU_OK) {
            printf("trace load: failed: %s\n", e.msg);
            return;
        }
        t[i] = tb_now() - t0;
        layers = g.n_layers;
        graph_free(&g);
    }
    qsort(t, 21, sizeof t[0], tb_cmp_double);
    printf("trace load %s (%d layers): %.3f ms median of 21\n", path, layers,
           t[10] * 1e3);
}
