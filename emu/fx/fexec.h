/* fexec — the values of a --functional run: every core's HBM holds real
 * tensors, and the pod engine hands each executed instruction to fexec,
 * which does what the instruction's fx tag says (firmware/isa.h):
 *
 *   mxu.matmul fx=fwd   the next M rows (and N chunk) of a conv / dense
 *                       output: im2col rows of the core's input window in
 *                       the instruction's K layout, bf16 x bf16 on the MXU
 *                       model (mxu_fast_matmul: fp32 accumulation in the
 *                       systolic order), bias, rounding to the layer's dtype
 *   mxu.matmul fx=dx/dw the input- and weight-gradient rows
 *   vpu.op fx=fwd/bwd   the layer's vector work (the whole layer on its
 *                       first tile: elementwise results do not depend on
 *                       the tiling)
 *   ici.halo            real rows copied from the neighbours' buffers, by
 *                       the row counts the instruction carries
 *   ici.allgather       the whole tensor assembled from the group
 *   ici.allreduce       partial sums (batchnorm statistics, pooling,
 *                       losses, weight gradients) summed across the group
 *
 * A core that reads a row its firmware never brought (a halo too small)
 * is an error, not a silent read of the global tensor: the values check
 * the lowering.  Definitions of every op: docs/FUNCTIONAL.md.
 */
#ifndef EMU_FEXEC_H
#define EMU_FEXEC_H

#include <stdint.h>

#include "emu/graph.h"
#include "emu/params.h"
#include "emu/plan.h"
#include "emu/result.h"
#include "firmware/isa.h"

typedef struct fx_state fx_state;

typedef struct {
    uint64_t seed;
    double learning_rate; /* momentum SGD */
    double momentum;
    /* Starting weights instead of the seed's (NULL: the seed's): every
     * trainable layer's weights in layer order, shared ones once, in the
     * layout of emu_result.grads; n_init_weights must match. */
    const float *init_weights;
    int64_t n_init_weights;
    int output_layer; /* the layer fx_end_step reports; -1: the last
                         non-loss layer */
    int pe_model;     /* 1: products on the PE-level MXU model (slow) */
} fx_config;

/* Host bytes fexec will allocate for this plan and these programs (one
 * per shard; all cores' tensors, windows, gradients, weights, the largest
 * matmul's operands), an upper estimate checked against the host limit
 * before anything is allocated. */
double fx_bytes_needed(const graph *g, const plan *p, const fw_program *progs);

/* progs: one program per shard (the instructions' fx tags tell fexec
 * which layers compute their input gradient themselves). */
tpu_status fx_new(fx_state **out, const graph *g, const plan *p,
                  const tpu_params *hw, const fw_program *progs,
                  const fx_config *cfg, tpu_error *err);
void fx_free(fx_state *x);

/* Draws step `step`'s inputs into every core and clears the step's
 * tensors (weights and momentum carry over). */
tpu_status fx_begin_step(fx_state *x, int64_t step, tpu_error *err);
/* A compute instruction (matmul or vector pass) on global core `core`. */
tpu_status fx_exec(fx_state *x, int core, const fw_insn *in, tpu_error *err);
/* A collective: every core is at it; ins[core] is each global core's
 * instruction. */
tpu_status fx_collective(fx_state *x, const fw_insn *const *ins,
                         tpu_error *err);
/* After the step: the output (global layout), its checksum, the loss and
 * core 0's all-reduced weight gradients into r (has_values = 1). */
tpu_status fx_end_step(fx_state *x, emu_result *r, tpu_error *err);

#endif
