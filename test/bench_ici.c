/* ICI: host time of the simulations the pod engine calls, and the
 * bandwidth the model reaches (docs/ICI.md quotes these). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "test/bench.h"
#include "emu/params.h"
#include "interconnect/ici.h"

static ici *mk(const char *name, tpu_params *p)
{
    const tpu_system *s = tpu_system_find(name);
    tpu_params_default(p, s->gen);
    return ici_new(&p->ici, s->dim_x, s->dim_y, s->full_pod);
}

void tb_bench_ici(void)
{
    enum { REPS = 5 };
    double h[REPS], sim = 0;
    tpu_params p;
    const double big = 256.0 * (1 << 20);

    /* full-pod all-reduce: a fresh model each time, so no cache hit */
    for (int r = 0; r < REPS; r++) {
        ici *n = mk("v3-2048", &p);
        int nc = ici_num_cores(n);
        int *c = malloc((size_t)nc * sizeof(int));
        for (int i = 0; i < nc; i++)
            c[i] = i;
        double t0 = tb_now();
        sim = ici_allreduce(n, c, nc, big, 0);
        h[r] = tb_now() - t0;
        free(c);
        ici_free(n);
    }
    qsort(h, REPS, sizeof h[0], tb_cmp_double);
    double bus = big / sim * 2.0 * 2047 / 2048;
    printf("v3-2048 allreduce 256 MiB host time (median of %d): %.3f s\n",
           REPS, h[REPS / 2]);
    printf("v3-2048 allreduce 256 MiB simulated: %.6f s\n", sim);
    printf("v3-2048 allreduce 256 MiB busbw: %.1f GB/s (%.2f x link)\n",
           bus / 1e9, bus / 1e9 / p.ici.link_gbs);
    printf("v3-2048 allreduce pod bandwidth (busbw x 1024 chips): %.1f TB/s "
           "(%.2f of the published 340)\n", bus * 1024 / 1e12,
           bus * 1024 / 340e12);

    /* host seconds of the slowest whole-slice all-reduces, median of 5
     * fresh models each (issue: the ICI model's host time); v3-1024's
     * open rings give the most events (the finish-time heap) */
    const char *big2[] = {"v3-256", "v3-1024", "v3-2048"};
    for (int s = 0; s < 3; s++) {
        for (int r = 0; r < REPS; r++) {
            ici *n = mk(big2[s], &p);
            int nc = ici_num_cores(n);
            int *c = malloc((size_t)nc * sizeof(int));
            for (int i = 0; i < nc; i++)
                c[i] = i;
            double t0 = tb_now();
            ici_allreduce(n, c, nc, big, 0);
            h[r] = tb_now() - t0;
            free(c);
            ici_free(n);
        }
        printf("%s allreduce 256 MiB host seconds (median of %d): %.3f s\n",
               big2[s], REPS, tb_median(h, REPS));
    }

    const char *sys[] = {"v2-8", "v3-32", "v3-512"};
    for (int s = 0; s < 3; s++) {
        ici *n = mk(sys[s], &p);
        int nc = ici_num_cores(n);
        int *c = malloc((size_t)nc * sizeof(int));
        for (int i = 0; i < nc; i++)
            c[i] = i;
        double t0 = tb_now();
        double t = ici_allreduce(n, c, nc, big, 0);
        double host = tb_now() - t0;
        double b = big / t * 2.0 * (nc - 1) / nc;
        printf("%s allreduce 256 MiB: %.6f s simulated, busbw %.1f GB/s "
               "(%.2f x link), host %.3f s\n", sys[s], t, b / 1e9,
               b / 1e9 / p.ici.link_gbs, host);
        free(c);
        ici_free(n);
    }

    /* the calls the pod engine makes thousands of times per step */
    enum { N = 2000 };
    double *lat = malloc(N * sizeof(double));
    ici *n = mk("v3-64", &p);
    ici_flow fl[64];
    int nf = 0;
    for (int c = 0; c < 64; c++) {
        int x = (c / 2) % 8, nx = x + ((c & 1) ? -1 : 1);
        if (nx >= 0 && nx < 8)
            fl[nf++] = (ici_flow){c, c + 2 * (nx - x), 65536.0 * (1 + c % 3)};
    }
    double t0 = tb_now();
    ici_permute(n, fl, nf, 0);
    printf("v3-64 halo permute, first call (simulated): %.1f us\n",
           (tb_now() - t0) * 1e6);
    for (int i = 0; i < N; i++) {
        t0 = tb_now();
        ici_permute(n, fl, nf, i * 1e-3);
        lat[i] = tb_now() - t0;
    }
    qsort(lat, N, sizeof lat[0], tb_cmp_double);
    printf("v3-64 halo permute, repeated (cache): %.2f us median\n",
           lat[N / 2] * 1e6);
    int g16[16];
    for (int i = 0; i < 16; i++)
        g16[i] = 16 + i;
    t0 = tb_now();
    double t16 = ici_allreduce(n, g16, 16, 4e6, 0);
    printf("v3-64 16-core group allreduce 4 MB, first call (simulated): "
           "%.1f us (model %.1f us)\n", (tb_now() - t0) * 1e6, t16 * 1e6);
    for (int i = 0; i < N; i++) {
        t0 = tb_now();
        ici_allreduce(n, g16, 16, 4e6, i * 1e-3);
        lat[i] = tb_now() - t0;
    }
    qsort(lat, N, sizeof lat[0], tb_cmp_double);
    printf("v3-64 16-core group allreduce, repeated (cache): %.2f us median\n",
           lat[N / 2] * 1e6);
    /* distinct sizes defeat the cache: the simulation itself */
    for (int i = 0; i < 200; i++) {
        t0 = tb_now();
        ici_allreduce(n, g16, 16, 4e6 + i, 0);
        lat[i] = tb_now() - t0;
    }
    qsort(lat, 200, sizeof lat[0], tb_cmp_double);
    printf("v3-64 16-core group allreduce, uncached: %.1f us median\n",
           lat[100] * 1e6);
    free(lat);
    ici_free(n);
}
