/* bf16 conversions: see mxu/bf16.h for the rounding rules. */
#include "mxu/bf16.h"

bf16 bf16_from_f32(float f)
{
    uint32_t u = bf16_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        /* NaN: keep sign and the high payload, force quiet so the result
         * cannot collapse to the infinity pattern 0x7f80. */
        return (bf16)((u >> 16) | 0x0040u);
    /* Adding 0x7fff plus the kept LSB rounds ties to even; the carry
     * propagates into the exponent and, past 0x7f7f, gives infinity. */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (bf16)(u >> 16);
}

float bf16_to_f32(bf16 b)
{
    return bf16_bits_f32((uint32_t)b << 16);
}

uint64_t bf16_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void bf16_random_fill(bf16 *dst, size_t n, uint64_t *state)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t x = bf16_splitmix64(state);
        float u = (float)(x >> 40) * (1.0f / 16777216.0f);
        dst[i] = bf16_from_f32(2.0f * u - 1.0f);
    }
}
