/* HBM model: host cost of one hbm_access call (the pod engine makes
 * 1e5-1e6 per simulated step), and the modelled bandwidth against
 * transfer size (docs/HBM.md records the table). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "test/bench.h"
#include "emu/params.h"
#include "hbm/hbm.h"

/* Median over 5 runs of ns per call; each call moves to a new address and
 * starts when the previous one ends, so the state really changes. */
static double ns_per_call(const tpu_params *p, uint64_t chunk, uint64_t n,
                          uint64_t stride, int calls)
{
    double runs[5];
    hbm *h = hbm_new(&p->hbm);
    if (!h)
        return -1;
    double sink = 0;
    for (int r = 0; r < 5; r++) {
        hbm_reset(h);
        double t = 0, t0 = tb_now();
        for (int i = 0; i < calls; i++) {
            hbm_xfer x = {(uint64_t)i * 3 * 1024 * 1024 % (4ull << 30), chunk,
                          n, stride, i & 1};
            t = hbm_access(h, t, &x);
        }
        runs[r] = (tb_now() - t0) / calls * 1e9;
        sink += t;
    }
    hbm_free(h);
    qsort(runs, 5, sizeof runs[0], tb_cmp_double);
    return sink > 0 ? runs[2] : -1;
}

static double gbps(const tpu_params *p, uint64_t chunk, uint64_t n,
                   uint64_t stride)
{
    hbm *h = hbm_new(&p->hbm);
    if (!h)
        return -1;
    hbm_xfer x = {0, chunk, n, stride, 0};
    double t = hbm_access(h, 0, &x);
    hbm_free(h);
    return (double)chunk * (double)n / t / 1e9;
}

void tb_bench_hbm(void)
{
    tpu_params p;
    tpu_params_default(&p, 3);
    printf("hbm_access 1 MiB sequential: %.0f ns/call\n",
           ns_per_call(&p, 1 << 20, 1, 1 << 20, 200000));
    printf("hbm_access 1 GiB sequential: %.0f ns/call\n",
           ns_per_call(&p, 1ull << 30, 1, 1ull << 30, 200000));
    printf("hbm_access 1 MiB as 64 B every 1 KiB: %.0f ns/call\n",
           ns_per_call(&p, 64, 16384, 1024, 200000));
    printf("hbm_access 1 MiB as 2-D 512 B rows, 4 KiB pitch: %.0f ns/call\n",
           ns_per_call(&p, 512, 2048, 4096, 200000));
    printf("hbm_access 1 MiB as 2-D 32 KiB rows, 64 KiB pitch: %.0f ns/call\n",
           ns_per_call(&p, 32768, 32, 65536, 200000));
    printf("hbm_access 4 KiB tile: %.0f ns/call\n",
           ns_per_call(&p, 4096, 1, 4096, 200000));

    for (int gen = 2; gen <= 3; gen++) {
        tpu_params_default(&p, gen);
        printf("v%d bandwidth curve (GB/s; peak %.0f): size sequential "
               "64B/256B 64B/1KiB 64B/4KiB\n",
               gen, hbm_peak_bps(&p.hbm) / 1e9);
        for (uint64_t b = 1024; b <= (1ull << 30); b *= 4) {
            printf("v%d %10llu B: %7.1f %7.1f %7.1f %7.1f GB/s\n", gen,
                   (unsigned long long)b, gbps(&p, b, 1, b),
                   gbps(&p, 64, b / 64, 256), gbps(&p, 64, b / 64, 1024),
                   gbps(&p, 64, b / 64, 4096));
        }
    }
}
