/* bf16 — bfloat16 conversions (1 sign, 8 exponent, 7 mantissa bits).
 * CONTRACT header: the implementation owner documents NaN, infinity,
 * subnormal and signed-zero handling here. */
#ifndef MXU_BF16_H
#define MXU_BF16_H

#include <stdint.h>

typedef uint16_t bf16;

bf16 bf16_from_f32(float f); /* round to nearest, ties to even */
float bf16_to_f32(bf16 b);   /* exact */

#endif
