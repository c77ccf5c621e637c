/* bf16's random generator (the conversions are inline in mxu/bf16.h). */
#include "mxu/bf16.h"

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
