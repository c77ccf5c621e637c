/* mxu — the matrix unit: a weight-stationary systolic array of
 * rows x cols processing elements (TPU v2/v3: 128 x 128).
 *
 * C[M,N] = A[M,K] x B[K,N]: B (the weights, RHS) is cut into rows x cols
 * weight tiles that sit in the array; rows of A (activations, LHS) stream
 * through; bf16 products are accumulated in fp32.
 *
 * Two models of the same hardware:
 *   - mxu_pe_*   steps every PE every cycle (the ground truth),
 *   - mxu_fast_* gives the same cycle count (closed form) and the same
 *     result bits (a plain loop in the same accumulation order).
 * The full cycle semantics and a timing diagram are in docs/MXU.md.
 *
 * Timing, R = rows, C = cols, one product of M rows, T weight tiles
 * (T = ceil(K/R) * ceil(N/C), taken N-tile outer, K-tile inner):
 *   - cycle 0: the first weight row enters the top of column 0.  Weights
 *     shift down into the shadow registers, skewed one cycle per column;
 *     a weight load occupies the weight port R cycles (a partial tile is
 *     padded with zeros and still takes R), and column c holds the whole
 *     tile at the end of cycle L + c + R - 1 (L = start of the load).
 *   - the first row of A enters row 0 R cycles after its tile's load
 *     started; row r of the array sees it r cycles later (input skew);
 *     PE (r, c) uses it at cycle s + r + c and swaps shadow -> active at
 *     that moment (the swap travels with the data, so it costs no bubble).
 *   - result row i leaves the bottom of column c at cycle s + i + R-1 + c;
 *     a row is popped when its last column (C - 1) is out.
 *   - the next tile's load may start as soon as the current tile's first
 *     row is pushed (the shadow is free from then on, diagonal by
 *     diagonal), so back-to-back tiles issue every max(M, R) cycles.
 *   => cycles(M, K, N) = (T - 1) * max(M, R) + M + 2R + C - 2
 *      = mxu_fast_cycles(); 0 when M, K or N is 0.
 *   The fixed part 2R + C - 2 is the first load (R), the input skew plus
 *   the fall to the bottom (R - 1) and the output skew (C - 1), plus the
 *   one cycle in which the last result is latched.
 *
 * Numerics: products bf16 x bf16 are exact in fp32 (unless they fall
 * below fp32's normal range, where IEEE rounding applies: no flush to
 * zero); column sums are fp32, round to nearest even, starting from +0.0
 * at the top of the column and adding k = 0 .. R-1 in order:
 *   t = (((+0 + a0*b0) + a1*b1) + ... ) + a_{R-1}*b_{R-1}
 * (padded rows add +0, which changes no value since t is never -0).
 * Across K tiles the vector unit adds the partial sums in tile order:
 *   c = ((t0 + t1) + t2) + ...
 * NaN payloads follow the host's fp32 rules: compare NaNs as NaNs.
 */
#ifndef MXU_MXU_H
#define MXU_MXU_H

#include <stddef.h>
#include <stdint.h>

#include "emu/status.h"
#include "mxu/bf16.h"

typedef struct {
    int rows; /* PE rows: the K depth of one weight tile */
    int cols; /* PE columns: the N width of one weight tile */
} mxu_params;

/* Cycles for C[M,N] = A[M,K] x B[K,N] on one MXU, from the first weight
 * shifted in to the last result popped (formula above).  O(1); shapes
 * whose count does not fit 64 bits are the caller's problem. */
uint64_t mxu_fast_cycles(const mxu_params *p, int64_t m, int64_t k, int64_t n);

/* Cycles the same product adds when it follows another on the same MXU
 * back to back (pushed as the previous one's last tile computes): its
 * first weight load went into the shadow and its fill overlaps the
 * previous drain, so it costs its tiles' issue cycles alone, T x
 * max(M, rows).  Two products streamed cost what one product of their
 * tiles end to end costs: mxu_fast_cycles(m, k, n) + mxu_stream_cycles(m,
 * k, n) == mxu_fast_cycles(m, k, 2n) when n is a multiple of cols. */
uint64_t mxu_stream_cycles(const mxu_params *p, int64_t m, int64_t k,
                           int64_t n);

/* Building blocks of the formula, for an engine that streams tiles:
 * weight tiles of a K x N matrix; issue-to-issue cycles of one tile of
 * m rows in a back-to-back stream (max(m, rows)); the one-off latency of
 * a stream (first load + fill + drain = 2 rows + cols - 2).  For T >= 1
 * tiles of m rows: cycles = T*tile + (m - tile) + latency. */
uint64_t mxu_tiles(const mxu_params *p, int64_t k, int64_t n);
uint64_t mxu_tile_cycles(const mxu_params *p, int64_t m);
uint64_t mxu_latency_cycles(const mxu_params *p);

/* Values (and cycles, when cycles != NULL) with the fast model.
 * a: M x K row-major, b: K x N row-major, c: M x N row-major (written). */
void mxu_fast_matmul(const mxu_params *p, const bf16 *a, const bf16 *b,
                     float *c, int64_t m, int64_t k, int64_t n,
                     uint64_t *cycles);

/* The cycle-by-cycle PE model: same arguments, same results.  Fails with
 * TPU_ERR_SYSTEM when host memory runs out, TPU_ERR_INPUT for negative
 * sizes or more than 2^30 pushed rows (T * M: tags are 32-bit). */
tpu_status mxu_pe_matmul(const mxu_params *p, const bf16 *a, const bf16 *b,
                         float *c, int64_t m, int64_t k, int64_t n,
                         uint64_t *cycles, tpu_error *err);

/* FNV-1a 64 over the fp32 bit patterns of c[0..n), each pattern taken
 * as 4 bytes, least significant first (the `checksum` of tpuemu mxu). */
uint64_t mxu_checksum(const float *c, size_t n);

#endif
