/* fx_internal — what the parts of the --functional executor share
 * (internal: emu/fx/fexec.c and emu/fx/fx_*.c include it; everyone else
 * uses emu/fx/fexec.h).
 *
 *   fexec.c         state, allocation, inputs, the tensors' accessors
 *                   (values formed when first read), dispatch (fx_exec),
 *                   the weight update and gradient reduction, results
 *   fx_tensor.*     boxes of tensors, kernel-tap coordinates (fxt_)
 *   fx_mm.c         the matrix products on the MXU model (fxm_)
 *   fx_vec.c        the vector passes, forward and backward (fxv_)
 *   fx_loss.c       the losses and their gradients (fxl_)
 *   fx_coll.c       halo exchange, all-gather, all-reduce (fx_collective)
 *   fx_group.c      grouped and depthwise convolutions' candidates (fxg_)
 *   fx_ops.c        elementwise, activation, normalisation, pad, crop,
 *                   resize, reshape and global max pooling layers (fxo_)
 *   fx_roi.c        roi_align, and which core runs a placed layer (fxr_)
 *
 * Storage.  Every core holds, per layer, its shard of the layer's output
 * (`act`) and of the output's gradient (`grad`), and the windows its
 * firmware assembled: the forward input window (shard + halos, or the
 * gathered tensor) and the backward window of the output gradient, and
 * its weight-gradient partials until the all-reduce sums them.  The
 * weights and their momentum are one copy in fx_state: every core applies
 * the same all-reduced gradients with the same momentum SGD, so per-core
 * copies would stay equal (and cost cores x the weights of host memory).
 *
 * Reductions across cores (all-reduces) sum only the cores that hold a
 * distinct part: along a dimension a tensor is not split, the cores of a
 * partition group hold the same rows, so only coordinate 0 contributes
 * (otherwise replicated work would be counted twice).
 */
#ifndef EMU_FX_INTERNAL_H
#define EMU_FX_INTERNAL_H

#include <stdint.h>

#include "emu/fx/fexec.h"
#include "emu/fx/fx_tensor.h"

typedef struct {
    fxt_tens *act, *grad, *win, *gwin;
    uint8_t *have_act, *have_win, *have_gwin, *done_fwd, *done_bwd;
    uint8_t *stats_reduced; /* batchnorm: statistics came from the group */
    uint8_t *done_gv;  /* grouped conv on the vector unit: parts done (bits
                          1 fwd, 2 dx, 4 dw; a pass runs on its first tile) */
    /* Per layer (a layer that shares weights has its own): this core's
     * weight-gradient partial, from its first product to the all-reduce
     * (fx_reduce_grads), which frees it. */
    float **wg;
    float **bn;        /* per batchnorm: sum x, sum x^2, mean, invstd, sum dy,
                          sum dy*xhat (6C) */
    double *loss_part; /* per loss layer: sum of element losses */
    double *dice;      /* per loss layer and input: sum p*t, sum p, sum t */
    int64_t *cur, *chunk; /* matmul cursors per layer x {fwd, dx, dw} */
    int swept;            /* lazy backward propagation done down to here */
} fx_core;

/* Scratch buffers: the matrix products' operands in fp32 (A, B, C) and
 * their bf16 parts and partial sums (fx_mm.c). */
enum {
    FX_SCR_A,
    FX_SCR_B,
    FX_SCR_C,
    FX_SCR_AH,
    FX_SCR_BH,
    FX_SCR_AL,
    FX_SCR_BL,
    FX_SCR_T,
    FX_SCR_TILE_A,
    FX_SCR_TILE_T,
    FX_NSCRATCH
};

struct fx_state {
    const graph *g;
    const plan *p;
    const tpu_params *hw;
    fx_config cfg;
    int64_t step, G;
    int ncls;
    int out_layer;
    uint8_t *has_bwd; /* layer has backward compute instructions */
    fx_core *cs;
    /* Per owner layer, one copy for all cores: the weights, their
     * momentum, and the step's all-reduced weight gradient (NULL until
     * fx_reduce_grads). */
    float **w, **mom, **wsum;
    int updated; /* the step's momentum update has run */
    /* Operand buffers of the matrix products, grown and reused: one
     * instruction runs at a time, and fresh calloc'd megabytes per
     * instruction cost more in page faults than the products. */
    float *scratch[FX_NSCRATCH];
    size_t scratch_cap[FX_NSCRATCH]; /* bytes */
};

/* ---- emu/fx/fexec.c ----------------------------------------------------- */

tpu_status fx_oom(tpu_error *err);
/* Zeroed scratch buffer i of at least n floats (NULL: out of memory). */
float *fx_scratch(fx_state *x, int i, int64_t n);
/* Scratch buffer i of at least `bytes` bytes, as the last user left it. */
void *fx_scratch_raw(fx_state *x, int i, size_t bytes);
/* A read of rows along spatial dim dim - 1 the firmware did not bring. */
tpu_status fx_missing(tpu_error *err, const fx_state *x, int core, int l,
                      const char *what, int dim);

int fx_is_split(const fx_state *x, int l, int d);
/* Whether core's partial sums over layer l's positions count (see top). */
int fx_contributes(const fx_state *x, int core, int l);
/* The layer whose weights layer l uses (itself unless it shares). */
int fx_owner(const fx_state *x, int l);
int64_t fx_nweights(const fx_state *x, int l);
/* The weights layer l computes with (its owner's: one copy). */
float *fx_wts(fx_state *x, int l);
/* A normalisation's (batchnorm, layer_norm, group_norm) gamma and beta
 * of channel ch in its weights W: 1 and 0 when "scale" or "center" is
 * false (no such weight).  fx_dgamma/fx_dbeta: where their gradients
 * start in the layer's weight gradient wg, NULL when the weight is
 * missing (or wg is). */
float fx_gamma(const glayer *L, const float *W, int64_t ch);
float fx_beta(const glayer *L, const float *W, int64_t ch);
float *fx_dgamma(const glayer *L, float *wg);
float *fx_dbeta(const glayer *L, float *wg);
/* Global example index of core's local example b. */
int64_t fx_gexample(const fx_state *x, int core, int64_t b);
/* Spatial positions of the layer's whole output. */
int64_t fx_gpos_count(const glayer *L);
/* Replicas a batchnorm's statistics span (run.batchnorm_group, at least 1). */
int fx_bn_replicas(const fx_state *x);

/* Layer l's output shard, fresh (zeroed) on this core. */
tpu_status fx_new_act(fx_state *x, int core, int l, fxt_tens **out,
                      tpu_error *err);
/* Layer l's output shard, formed first when it has no instructions of its
 * own (fxv_lazy_forward). */
tpu_status fx_act_of(fx_state *x, int core, int l, const fxt_tens **out,
                     tpu_error *err);
/* The window layer l's forward reads for input 0: what the halos or the
 * gather assembled, or the core's own shard of the input. */
tpu_status fx_fwin_of(fx_state *x, int core, int l, const fxt_tens **out,
                      tpu_error *err);
/* The same for its weight gradient, which must have exchanged it again
 * when xla.dw_halo is on (an internal error otherwise). */
tpu_status fx_dwin_of(fx_state *x, int core, int l, const fxt_tens **out,
                      tpu_error *err);
/* Layer l's gradient shard (allocated, zeroed, when first asked for). */
tpu_status fx_grad_of(fx_state *x, int core, int l, fxt_tens **out,
                      tpu_error *err);
/* Layer l's gradient shard once every gradient into it has arrived
 * (fx_ensure_grad, then fx_grad_of): what a backward pass reads. */
tpu_status fx_dy_of(fx_state *x, int core, int l, fxt_tens **out,
                    tpu_error *err);
/* The output-gradient window layer l's backward reads. */
tpu_status fx_gwin_of(fx_state *x, int core, int l, const fxt_tens **out,
                      tpu_error *err);
/* Layer l's own weight-gradient partial on this core (allocated, zeroed,
 * when first asked for in a step). */
tpu_status fx_wgrad_of(fx_state *x, int core, int l, float **out,
                       tpu_error *err);
/* Before layer l's gradient is read: the instruction-less layers above it
 * pass their gradients down, in reverse layer order. */
tpu_status fx_ensure_grad(fx_state *x, int core, int l, tpu_error *err);
/* The all-reduce of every weight-gradient partial: the totals into
 * fx_state's wsum, the partials freed. */
tpu_status fx_reduce_grads(fx_state *x, tpu_error *err);

/* ---- emu/fx/fx_mm.c ----------------------------------------------------- */

/* One forward (dx = 0) or input-gradient (dx = 1) matmul instruction. */
tpu_status fxm_rows(fx_state *x, int core, int l, const fw_insn *in, int dx,
                    tpu_error *err);
/* One weight-gradient matmul instruction. */
tpu_status fxm_dw(fx_state *x, int core, int l, const fw_insn *in,
                  tpu_error *err);
/* C[m x n] = A[m x kc] B[kc x n] on the MXU model: the kc compact K rows
 * lie in slots sw wide, `depth` real rows from `off` on in each (the rest
 * zeros: lane padding, or another group's part of an expanded filter);
 * passes 3: bf16_3x. */
tpu_status fxm_mm(fx_state *x, const float *a, const float *b, float *cres,
                  int64_t m, int64_t kc, int64_t n, int64_t depth, int64_t sw,
                  int64_t off, int passes, tpu_error *err);
/* The rows and columns the next matmul instruction of this kind (0 fwd,
 * 1 dx, 2 dw) of layer l covers, of a product total_n columns wide. */
void fxm_next_tile(fx_core *c, int l, int kind, const fw_insn *in,
                   int64_t total_n, int64_t *r0, int64_t *r1, int64_t *n0,
                   int64_t *n1);
/* The tensors a row product of layer l reads and writes: the forward
 * window and the layer's activation (made when missing), or (dx) the
 * gradient window and the input's gradient. */
tpu_status fxm_row_operands(fx_state *x, int core, int l, int dx,
                            const fxt_tens **src, fxt_tens **dst,
                            tpu_error *err);

/* ---- emu/fx/fx_group.c -------------------------------------------------- */

/* A grouped convolution's instruction (fw_insn.gconv: dense expansion,
 * per-group products, or the depthwise vector pass), forward (fx FWD),
 * input gradient (DX) or weight gradient (DW). */
tpu_status fxg_exec(fx_state *x, int core, int l, const fw_insn *in,
                    tpu_error *err);

/* ---- emu/fx/fx_vec.c ---------------------------------------------------- */

/* Layer l's forward vector pass (the whole layer). */
tpu_status fxv_forward(fx_state *x, int core, int l, tpu_error *err);
/* Batchnorm's backward statistics pass (FX_BSTAT). */
tpu_status fxv_bn_stats(fx_state *x, int core, int l, tpu_error *err);
/* Layer l's backward vector pass. */
tpu_status fxv_backward(fx_state *x, int core, int l, tpu_error *err);
/* The values of a layer without instructions of its own. */
tpu_status fxv_lazy_forward(fx_state *x, int core, int l, tpu_error *err);
/* The gradient pass of a layer without backward instructions. */
tpu_status fxv_lazy_backward(fx_state *x, int core, int l, tpu_error *err);
/* Per-channel sums of x and x^2 over the shard: batchnorm's statistics
 * before any all-reduce. */
void fxv_bn_local_stats(const fxt_tens *in, float *sum, float *sq);

/* Input k of layer l in o's box (a replicated operand's slice copied into
 * tmp, which the caller frees with fxt_free). */
tpu_status fxv_operand_box(fx_state *x, int core, int l, int k,
                           const fxt_tens *o, fxt_tens *tmp,
                           const fxt_tens **out, tpu_error *err);

/* ---- emu/fx/fx_ops.c ---------------------------------------------------- */

/* Elementwise and activation layers' forward and backward passes. */
tpu_status fxo_forward(fx_state *x, int core, int l, tpu_error *err);
tpu_status fxo_backward(fx_state *x, int core, int l, tpu_error *err);
/* The partition group's all-reduce of an elementwise layer's broadcast
 * operand gradients, added into them on every core. */
tpu_status fxo_ew_reduce(fx_state *x, int l, tpu_error *err);

/* Normalisations, pad, crop, resize and global max pooling: forward and
 * backward passes; reshape's values and gradient (no instructions of its
 * own); the partition group's all-reduces of group_norm's sums and
 * global_maxpool's maxima and tie counts (backward: 1). */
tpu_status fxo_more_forward(fx_state *x, int core, int l, tpu_error *err);
tpu_status fxo_more_backward(fx_state *x, int core, int l, tpu_error *err);
tpu_status fxo_reshape_forward(fx_state *x, int core, int l, tpu_error *err);
tpu_status fxo_reshape_backward(fx_state *x, int core, int l,
                                tpu_error *err);
tpu_status fxo_reduce(fx_state *x, int l, int backward, tpu_error *err);

/* ---- emu/fx/fx_loss.c --------------------------------------------------- */

tpu_status fxl_forward(fx_state *x, int core, int l, tpu_error *err);
tpu_status fxl_backward(fx_state *x, int core, int l, tpu_error *err);

/* ---- emu/fx/fx_roi.c ---------------------------------------------------- */

/* Whether core runs layer l (a layer placed on another core of the
 * replica, "core", has no values there). */
int fx_runs(const fx_state *x, int core, int l);
/* roi_align's forward and backward passes, and its collectives (the
 * levels gathered; the placed core's level gradients handed out). */
tpu_status fxr_forward(fx_state *x, int core, int l, tpu_error *err);
tpu_status fxr_backward(fx_state *x, int core, int l, tpu_error *err);
tpu_status fxr_collective(fx_state *x, const fw_insn *const *ins,
                          tpu_error *err);

#endif
