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
 * The cycle semantics and the timing diagram are in mxu/README.md.
 * (CONTRACT header: the implementation owner documents the timing here.)
 */
#ifndef MXU_MXU_H
#define MXU_MXU_H

#include <stdint.h>

#include "emu/status.h"
#include "mxu/bf16.h"

typedef struct {
    int rows; /* PE rows: the K depth of one weight tile */
    int cols; /* PE columns: the N width of one weight tile */
} mxu_params;

/* Cycles for C[M,N] = A[M,K] x B[K,N] on one MXU, from the first weight
 * shifted in to the last result popped.  O(1). */
uint64_t mxu_fast_cycles(const mxu_params *p, int64_t m, int64_t k, int64_t n);

/* Values (and cycles, when cycles != NULL) with the fast model.
 * a: M x K row-major, b: K x N row-major, c: M x N row-major (written). */
void mxu_fast_matmul(const mxu_params *p, const bf16 *a, const bf16 *b,
                     float *c, int64_t m, int64_t k, int64_t n,
                     uint64_t *cycles);

/* The cycle-by-cycle PE model: same arguments, same results.  Fails only
 * when host memory runs out (TPU_ERR_SYSTEM). */
tpu_status mxu_pe_matmul(const mxu_params *p, const bf16 *a, const bf16 *b,
                         float *c, int64_t m, int64_t k, int64_t n,
                         uint64_t *cycles, tpu_error *err);

#endif
