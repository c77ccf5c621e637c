/* The fast MXU model: the PE model's cycle count in closed form and its
 * result bits from a plain loop in the same accumulation order (see
 * mxu/mxu.h and docs/MXU.md for the timing and the order). */
#include <string.h>

#include "mxu/mxu.h"

static uint64_t ceil_div(int64_t a, int64_t b)
{
    return (uint64_t)((a + b - 1) / b);
}

uint64_t mxu_tiles(const mxu_params *p, int64_t k, int64_t n)
{
    TPU_ASSERT(p->rows > 0 && p->cols > 0);
    if (k <= 0 || n <= 0)
        return 0;
    return ceil_div(k, p->rows) * ceil_div(n, p->cols);
}

uint64_t mxu_tile_cycles(const mxu_params *p, int64_t m)
{
    /* The shadow of the next tile loads while this one computes; the load
     * takes `rows` cycles, so a tile shorter than that waits for it. */
    return (uint64_t)(m > p->rows ? m : p->rows);
}

uint64_t mxu_latency_cycles(const mxu_params *p)
{
    return 2 * (uint64_t)p->rows + (uint64_t)p->cols - 2;
}

uint64_t mxu_fast_cycles(const mxu_params *p, int64_t m, int64_t k, int64_t n)
{
    if (m <= 0 || k <= 0 || n <= 0)
        return 0;
    uint64_t t = mxu_tiles(p, k, n);
    return (t - 1) * mxu_tile_cycles(p, m) + (uint64_t)m +
           mxu_latency_cycles(p);
}

uint64_t mxu_stream_cycles(const mxu_params *p, int64_t m, int64_t k,
                           int64_t n)
{
    if (m <= 0 || k <= 0 || n <= 0)
        return 0;
    return mxu_tiles(p, k, n) * mxu_tile_cycles(p, m);
}

uint64_t mxu_checksum(const float *c, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        uint32_t u = bf16_f32_bits(c[i]);
        for (int b = 0; b < 4; b++) {
            h ^= (u >> (8 * b)) & 0xffu;
            h *= 0x100000001b3ull;
        }
    }
    return h;
}

/* Column chunk of the fast loop: outputs are independent, so chunking
 * columns changes no accumulation order. */
enum { FAST_CHUNK = 256, FAST_LANES = 8 };

static float bf(bf16 b)
{
    return bf16_bits_f32((uint32_t)b << 16);
}

/* acc[j] += av * b[j] for j < n.  Written in blocks of FAST_LANES so that
 * GCC's -O2 (very-cheap cost model) vectorizes the block body. */
static void axpy(float *restrict acc, float av, const bf16 *restrict b,
                 int n)
{
    int j = 0;
    for (; j + FAST_LANES <= n; j += FAST_LANES)
        for (int u = 0; u < FAST_LANES; u++)
            acc[j + u] = acc[j + u] + av * bf(b[j + u]);
    for (; j < n; j++)
        acc[j] = acc[j] + av * bf(b[j]);
}

void mxu_fast_matmul(const mxu_params *p, const bf16 *a, const bf16 *b,
                     float *c, int64_t m, int64_t k, int64_t n,
                     uint64_t *cycles)
{
    if (cycles)
        *cycles = mxu_fast_cycles(p, m, k, n);
    if (m <= 0 || n <= 0)
        return;
    if (k <= 0) {
        for (int64_t i = 0; i < m * n; i++)
            c[i] = 0.0f;
        return;
    }
    float acc[FAST_CHUNK];
    int64_t R = p->rows;
    for (int64_t i = 0; i < m; i++) {
        const bf16 *arow = a + i * k;
        float *crow = c + i * n;
        for (int64_t j0 = 0; j0 < n; j0 += FAST_CHUNK) {
            int w = (int)(n - j0 < FAST_CHUNK ? n - j0 : FAST_CHUNK);
            for (int64_t k0 = 0; k0 < k; k0 += R) {
                int64_t k1 = k0 + R < k ? k0 + R : k;
                /* One weight tile's column sums start from +0 at the top
                 * of the array; padded rows would add +0 and are skipped. */
                for (int j = 0; j < w; j++)
                    acc[j] = 0.0f;
                for (int64_t kk = k0; kk < k1; kk++)
                    axpy(acc, bf(arow[kk]), b + kk * n + j0, w);
                if (k0 == 0)
                    memcpy(crow + j0, acc, (size_t)w * sizeof *acc);
                else
                    for (int j = 0; j < w; j++)
                        crow[j0 + j] = crow[j0 + j] + acc[j];
            }
        }
    }
}
