/* The chip data's headline figures, so every bench log names its hardware. */
#include <stdio.h>

#include "emu/params.h"

void tb_bench_params(void)
{
    for (int gen = 2; gen <= 3; gen++) {
        tpu_params p;
        tpu_params_default(&p, gen);
        printf("v%d core peak: %.2f TFLOP/s bf16, HBM %.0f GB/s\n", gen,
               tpu_core_peak_flops(&p) / 1e12, hbm_peak_bps(&p.hbm) / 1e9);
    }
}
