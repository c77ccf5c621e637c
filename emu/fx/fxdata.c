#include "emu/fx/fxdata.h"

#include <math.h>

#define FXD_G 0x9E3779B97F4A7C15ull
#define FXD_M1 0xBF58476D1CE4E5B9ull
#define FXD_M2 0x94D049BB133111EBull

uint64_t fxd_hash(uint64_t seed, uint64_t tag, uint64_t idx)
{
    uint64_t z = seed * FXD_G + tag * FXD_M1 + idx * FXD_M2 + FXD_G;
    z ^= z >> 30;
    z *= FXD_M1;
    z ^= z >> 27;
    z *= FXD_M2;
    z ^= z >> 31;
    return z;
}

double fxd_u(uint64_t seed, uint64_t tag, uint64_t idx)
{
    return (double)(fxd_hash(seed, tag, idx) >> 40) * (1.0 / 16777216.0);
}

double fxd_v(uint64_t seed, uint64_t tag, uint64_t idx)
{
    return 2.0 * fxd_u(seed, tag, idx) - 1.0;
}

int fxd_class(uint64_t seed, int64_t step, int64_t global_batch, int64_t b,
              int ncls)
{
    if (ncls < 1)
        ncls = 1;
    int y =
        (int)(fxd_u(seed, FXD_TAG_LABEL, (uint64_t)(step * global_batch + b)) *
              ncls);
    return y < ncls ? y : ncls - 1;
}

double fxd_input(uint64_t seed, int n, int64_t step, int64_t global_batch,
                 int64_t b, int64_t e, int64_t elems_per_example, int ncls)
{
    int y = fxd_class(seed, step, global_batch, b, ncls);
    double t = fxd_v(seed, FXD_TAG_TEMPLATE + (uint64_t)n,
                     (uint64_t)((int64_t)y * elems_per_example + e));
    double x =
        fxd_v(seed, FXD_TAG_INPUT + (uint64_t)n,
              (uint64_t)((step * global_batch + b) * elems_per_example + e));
    return 0.5 * t + 0.5 * x;
}

float fxd_weight(uint64_t seed, int layer, int64_t i, int64_t fan_in,
                 int64_t fan_out)
{
    double lim =
        sqrt(6.0 / (double)(fan_in + fan_out > 0 ? fan_in + fan_out : 1));
    return (float)(fxd_v(seed, FXD_TAG_WEIGHT + (uint64_t)layer, (uint64_t)i) *
                   lim);
}
