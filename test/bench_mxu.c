/* MXU speed: the PE model in PE updates per second, the fast model's
 * timing (one 128x128 weight tile, M = 1024, no values) in tiles per
 * second, its values in multiply-adds per second, and the fast/PE ratio.
 * Every figure is the median of several runs. */
#include "test/bench.h"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "mxu/mxu.h"

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, tb_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

enum { REPS = 5 };

void tb_bench_mxu(void)
{
    const mxu_params mp = {128, 128};
    const int64_t m = 1024, k = 256, n = 256;
    bf16 *a = malloc((size_t)(m * k) * sizeof *a);
    bf16 *b = malloc((size_t)(k * n) * sizeof *b);
    float *c = malloc((size_t)(m * n) * sizeof *c);
    if (!a || !b || !c) {
        printf("mxu bench: out of memory\n");
        free(a);
        free(b);
        free(c);
        return;
    }
    uint64_t s = 1;
    bf16_random_fill(a, (size_t)(m * k), &s);
    bf16_random_fill(b, (size_t)(k * n), &s);

    /* PE model: M = 1024 rows through 2x2 weight tiles of 128x128. */
    double t_pe[REPS];
    uint64_t cycles = 0;
    for (int r = 0; r < REPS; r++) {
        tpu_error e;
        double t0 = tb_now();
        mxu_pe_matmul(&mp, a, b, c, m, k, n, &cycles, &e);
        t_pe[r] = tb_now() - t0;
    }
    double pe_s = median(t_pe, REPS);
    double updates = (double)cycles * mp.rows * mp.cols;
    printf("pe model (128x128, M=1024 K=256 N=256): %.3g PE-updates/s\n",
           updates / pe_s);
    printf("pe model time for that product: %.1f ms\n", pe_s * 1e3);

    /* Fast timing: one tile per call; the sum keeps every call live. */
    double t_ft[REPS];
    const long calls = 20000000;
    uint64_t sink = 0;
    for (int r = 0; r < REPS; r++) {
        double t0 = tb_now();
        for (long i = 0; i < calls; i++)
            sink += mxu_fast_cycles(&mp, 1024 + (i & 1), 128, 128);
        t_ft[r] = tb_now() - t0;
    }
    double ft = median(t_ft, REPS) / (double)calls;
    printf("fast model timing (128x128 tile, M=1024): %.3g tiles/s\n",
           1.0 / ft);
    printf("fast model timing per call: %.2f ns\n", ft * 1e9);

    /* Fast values: the same product as the PE run. */
    double t_fv[REPS];
    for (int r = 0; r < REPS; r++) {
        double t0 = tb_now();
        mxu_fast_matmul(&mp, a, b, c, m, k, n, NULL);
        t_fv[r] = tb_now() - t0;
    }
    double fv_s = median(t_fv, REPS);
    printf("fast model values (M=1024 K=256 N=256): %.3g MACs/s\n",
           (double)(m * k * n) / fv_s);
    printf("fast/pe speed ratio (values, same product): %.1f x\n",
           pe_s / fv_s);
    printf("fast/pe speed ratio (timing only, same product): %.3g x\n",
           pe_s / (ft * (double)mxu_tiles(&mp, k, n)));
    if (sink == 42)
        printf("(sink)\n");
    free(a);
    free(b);
    free(c);
}
