/* bf16 — bfloat16 conversions (1 sign, 8 exponent, 7 mantissa bits).
 *
 * bf16 is the top half of an IEEE fp32: same sign, same 8-bit exponent
 * (so the same range, 2^-133 .. 3.39e38), 7 of fp32's 23 mantissa bits.
 *
 * fp32 -> bf16 (bf16_from_f32), round to nearest, ties to even:
 *   - finite values round on the 16 dropped bits; a carry out of the
 *     mantissa moves into the exponent (0x3fffffff -> 0x4000 = 2.0);
 *   - values that round above bf16's largest finite (0x7f7f, 3.39e38)
 *     become infinity with their sign (overflow to inf, as IEEE RNE does);
 *   - +-infinity stays +-infinity;
 *   - NaN stays NaN: the top 16 bits are kept (sign and high payload) and
 *     the quiet bit (0x0040) is set, so a signalling NaN whose payload
 *     lives only in the low 16 bits cannot turn into infinity;
 *   - subnormals are kept, not flushed: having fp32's exponent range, bf16
 *     represents fp32's subnormal range with 7 bits of mantissa, and the
 *     same rounding applies (a subnormal may round up into the smallest
 *     normal, 0x0080);
 *   - signed zero is kept (-0.0f -> 0x8000).
 * bf16 -> fp32 (bf16_to_f32) is exact: the 16 bits move to the top.
 *
 * The MXU does not flush subnormals either (docs/MXU.md): products and
 * sums are IEEE fp32 with round to nearest even, assuming the host runs
 * with FTZ/DAZ off (the C default).
 */
#ifndef MXU_BF16_H
#define MXU_BF16_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef uint16_t bf16;

/* Raw fp32 bit pattern helpers (memcpy, no aliasing tricks); inline so
 * the MXU's inner loops vectorize through them. */
static inline uint32_t bf16_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static inline float bf16_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Round to nearest, ties to even.  Inline: functional runs convert every
 * operand element, and the call cost 4-6% of their host time. */
static inline bf16 bf16_from_f32(float f)
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

/* Exact: the 16 bits move to the top. */
static inline float bf16_to_f32(bf16 b)
{
    return bf16_bits_f32((uint32_t)b << 16);
}

/* The project's random bf16 generator (tpuemu mxu, --functional runs):
 * for each element, x = splitmix64(state) (Steele et al. 2014, the
 * java.util.SplittableRandom step), u = (x >> 40) * 2^-24 in [0, 1),
 * v = 2u - 1 in [-1, 1) (exact in fp32), element = bf16_from_f32(v), so
 * values near 1 may round to exactly 1.0.  The state advances by one
 * step per element; seed it with the user's seed as is. */
uint64_t bf16_splitmix64(uint64_t *state);
void bf16_random_fill(bf16 *dst, size_t n, uint64_t *state);

#endif
