/* fxdata — the data a --functional run computes on, drawn from the seed in
 * the global (unpartitioned) layout, so that every partitioning of a trace
 * sees the same numbers (docs/FUNCTIONAL.md has the definitions; the numpy
 * reference in scripts/fx_reference.py re-implements them independently).
 *
 * Every value comes from one counter-based generator (mod 2^64):
 *   z = seed*G + tag*M1 + idx*M2 + G
 *   z ^= z >> 30; z *= M1; z ^= z >> 27; z *= M2; z ^= z >> 31
 *   u = (z >> 40) * 2^-24 in [0, 1);  v = 2u - 1 in [-1, 1)
 * with G = 0x9E3779B97F4A7C15, M1 = 0xBF58476D1CE4E5B9,
 * M2 = 0x94D049BB133111EB (splitmix64's constants and finalizer), so a
 * value depends only on (seed, tag, idx), never on which core asks.
 *
 * Synthetic learnable data (step s, global batch G, example b in 0..G-1):
 *   class  y = floor(u(seed, FXD_TAG_LABEL, s*G + b) * ncls)
 *   input  x[b][e] = bf16( 0.5 * v(seed, FXD_TAG_TEMPLATE + n, y*E + e)
 *                        + 0.5 * v(seed, FXD_TAG_INPUT + n, (s*G + b)*E + e) )
 *          for input n with E elements per example, e the row-major index of
 *          (spatial..., channel) in the global shape;
 *   target of a loss: one-hot of y over the loss input's channels at every
 *          position (channel y mod C is 1, the others 0).
 * Weights (fp32 master copies): layer l's kernel in the layout
 *   [taps (row-major over the kernel dims)][cin][cout] (dense: [in][units]),
 *   w[i] = v(seed, FXD_TAG_WEIGHT + l, i) * sqrt(6 / (fan_in + fan_out))
 *   (Keras' glorot_uniform; fan_in = taps * cin, fan_out = taps * cout),
 *   computed in double and rounded once to fp32; biases 0; batchnorm
 *   gamma 1, beta 0 (Keras' defaults).
 * Dropout keeps element e of example b of layer l at step s when
 *   u(seed, FXD_TAG_DROPOUT + l, (s*G + b)*E + e) >= rate,
 * and scales the kept ones by 1/(1-rate).
 * roi_align layer's ROI r of example b at step s, with idx0 =
 *   ((s*G + b)*rois + r)*5: level floor(u(seed, FXD_TAG_ROI, idx0) * levels),
 *   box rows between u(.., idx0+1) and u(.., idx0+2) times (H-1), columns
 *   between u(.., idx0+3) and u(.., idx0+4) times (W-1) of that level.
 */
#ifndef EMU_FXDATA_H
#define EMU_FXDATA_H

#include <stdint.h>

enum {
    FXD_TAG_LABEL = 1,
    FXD_TAG_TEMPLATE = 1000,
    FXD_TAG_INPUT = 2000,
    FXD_TAG_WEIGHT = 100000,
    FXD_TAG_DROPOUT = 200000,
    FXD_TAG_ROI = 300000
};

uint64_t fxd_hash(uint64_t seed, uint64_t tag, uint64_t idx);
/* u in [0, 1) with 24 random bits (exact in fp32 and double). */
double fxd_u(uint64_t seed, uint64_t tag, uint64_t idx);
/* v = 2u - 1 in [-1, 1). */
double fxd_v(uint64_t seed, uint64_t tag, uint64_t idx);
/* Class of global example b at step s. */
int fxd_class(uint64_t seed, int64_t step, int64_t global_batch, int64_t b,
              int ncls);
/* Input n's element e (of E per example) of global example b, before the
 * rounding to the input's dtype. */
double fxd_input(uint64_t seed, int n, int64_t step, int64_t global_batch,
                 int64_t b, int64_t e, int64_t elems_per_example, int ncls);
/* Glorot-uniform weight i of layer l. */
float fxd_weight(uint64_t seed, int layer, int64_t i, int64_t fan_in,
                 int64_t fan_out);

#endif
