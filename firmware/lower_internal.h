/* lower_internal — what the files of the lowering share; nothing outside
 * firmware/ includes it.
 *
 *   lower.c   the lowering's context, each op's instructions, fw_lower
 *   layout.c  this shard's tensors: extents under the plan, bytes in HBM's
 *             tiled layout, the small-batch convolution layout
 *   tile.c    tile loops and the search for their size
 *   halo.c    windows, halos and their exchanges
 *   gconv.c   a grouped convolution's candidate lowerings
 *   fuse.c    the passes XLA's fusion removes, and what is never stored
 *   mem.c     what one core keeps in HBM, and rematerialisation
 *   ops.c     normalisations, pad/crop, resize, reshape, global max pool
 */
#ifndef FIRMWARE_LOWER_INTERNAL_H
#define FIRMWARE_LOWER_INTERNAL_H

#include <stdint.h>

#include "emu/graph.h"
#include "emu/params.h"
#include "emu/plan.h"
#include "firmware/isa.h"
#include "firmware/lower.h"

/* One lowering: its inputs, the program being emitted and the per-layer
 * decisions the op lowerings read. */
typedef struct {
    const graph *g;
    const plan *p;
    const tpu_params *hw;
    int coords[GRAPH_MAX_SP];
    int shard;           /* this program's shard of the replica */
    fw_program *prog;
    double B;            /* examples per replica */
    int *nconsumers;     /* per layer */
    uint8_t *relu_fused; /* relu layer fused into its producer's pass */
    uint8_t *remat;      /* activation recomputed in the backward pass */
    int *last_use;       /* per layer: its last consumer, -1 for none */
    double *ends;        /* mem_account's scratch, per layer */
    uint8_t *kept_for;   /* per layer: a consumer's backward reads it
                            (saved_for_backward; marked once per
                            lowering: a scan of the consumers per layer
                            takes seconds at 14,000 layers) */
    int *apply_t;        /* xla.bn_apply_fused, per batchnorm: the layer
                            whose output is not stored (the batchnorm or
                            its fused relu), -1; NULL when the switch is
                            off (bn_apply_fused) */
    uint8_t *gathered;   /* per roi_align: its levels' forward gather was
                            emitted with an earlier roi_align's */
    int *pend;           /* placed roi_aligns whose gradient goes back to
                            the replica's cores at the next layer that is
                            not placed (npend of them) */
    int npend;
    fw_memory *mem;
    int fx;                  /* fx_kind stamped on compute instructions */
    const fw_pricer *pricer; /* prices candidate sequences (fw_lower) */
    fw_program scratch;      /* a candidate tile loop being priced */
    fw_program cand;         /* a grouped convolution's candidate lowering
                                being priced (its tile loops use scratch) */
} lower_ctx;

/* Rounding up to a multiple of m, and divisions rounding up and (for
 * negative operands too) down. */
static inline int64_t rup(int64_t x, int64_t m)
{
    return m > 0 ? (x + m - 1) / m * m : x;
}
static inline int64_t cdiv(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}
static inline int64_t floordiv(int64_t a, int64_t b)
{
    return a >= 0 ? a / b : -((-a + b - 1) / b);
}
static inline int64_t ceildiv(int64_t a, int64_t b)
{
    return -floordiv(-a, b);
}
static inline int64_t max64(int64_t a, int64_t b)
{
    return a > b ? a : b;
}
static inline int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* A grouped convolution's shapes, for its candidates (gconv.c), filled
 * by the matrix layer's lowering. */
typedef struct {
    int l;
    int64_t G, taps, k_taps, sprod, cin, cout, cin_g, cout_g;
    int64_t M, Min;         /* forward / input-gradient rows (padded batch) */
    double m_rows, in_rows; /* the same, per real row: elements of a channel */
    double in_b, o_b, in_nohalo, apply, wbytes_el;
    int passes;
} gconv;

/* For layer l reading input layer i: the halo rows this shard receives
 * along each split dimension, and whether the input must be gathered
 * whole instead (output replicated, or a window wider than a neighbour). */
typedef struct {
    int64_t from_lo[GRAPH_MAX_SP], from_hi[GRAPH_MAX_SP];
    int64_t in_ext[GRAPH_MAX_SP]; /* local input extents incl. halos */
    int gather;
} halo_t;

/* lower.c: one instruction into c->prog (with its functional tag). */
void lower_emit(lower_ctx *c, fw_op op, int phase, int layer, int64_t a,
                int64_t b, int64_t cc, int64_t d);
void lower_emit_fx(lower_ctx *c, int fx, fw_op op, int phase, int layer,
                   int64_t a, int64_t b, int64_t cc, int64_t d);

/* layout.c */
void layout_local_out(const lower_ctx *c, int l, int64_t ext[GRAPH_MAX_SP],
                      int64_t off[GRAPH_MAX_SP]);
int layout_is_split(const lower_ctx *c, int l, int d);
int layout_any_split(const lower_ctx *c, int l);
int layout_small_batch(const lower_ctx *c);
double layout_batch_scale(const lower_ctx *c);
double layout_bytes(const lower_ctx *c, int nsp, const int64_t ext[],
                    int64_t ch, int dtype);
double layout_out_bytes(const lower_ctx *c, int l);
double layout_out_elems(const lower_ctx *c, int l);
int layout_reshards(const lower_ctx *c, int l, int i);
double layout_operand_bytes(const lower_ctx *c, int l, int i);
double layout_out_fraction(const lower_ctx *c, int l);
int layout_keeps_taps(const lower_ctx *c, const glayer *L);
double layout_rows_scale(const lower_ctx *c, const glayer *L);
double layout_conv_batch_scale(const lower_ctx *c, const glayer *L);
int64_t layout_tap_k(const lower_ctx *c, const glayer *L, int64_t taps,
                     int64_t ch, int *fold);

/* tile.c: tile loops, their size chosen by the pricer */
void tile_pass(lower_ctx *c, int phase, int layer, double in_bytes,
               double out_b, double elems, double ops);
void tile_pass_fx(lower_ctx *c, int fx, int phase, int layer, double in_bytes,
                  double out_b, double elems, double ops);
void tile_matmul(lower_ctx *c, int phase, int layer, int64_t m, int64_t k,
                 int64_t n, double ld_per_row, double st_per_row,
                 double w_bytes, double acc_row_bytes, double epi_per_row,
                 int passes);
void tile_dw(lower_ctx *c, int phase, int layer, int64_t K, int64_t M,
             int64_t n, double x_b, double dy_b, double npad, double apply,
             int passes);

/* halo.c */
void halo_fwd(const lower_ctx *c, int l, int i, halo_t *h);
int halo_bwd(const lower_ctx *c, int l, int i, halo_t *h);
int halo_pool_bwd(const lower_ctx *c, int l, int i, halo_t *out);
int halo_needed(const lower_ctx *c, int l, int i);
void halo_exchange(lower_ctx *c, int phase, int l, int i, const halo_t *h,
                   int backward);
void halo_dw_exchange(lower_ctx *c, int l, int i, const halo_t *h);

/* gconv.c */
int gconv_pick(lower_ctx *c, int phase, const gconv *q, int part);
void gconv_emit(lower_ctx *c, int phase, const gconv *q, int part, int cand);

/* fuse.c */
tpu_status fuse_plan(lower_ctx *c);
int fuse_materialised(const lower_ctx *c, int l);
double fuse_apply_ops(const lower_ctx *c, int i);

/* ops.c: normalisations, pad, crop, resize, reshape, global max pooling */
void ops_forward(lower_ctx *c, int l);
void ops_backward(lower_ctx *c, int l, int input_is_data);

/* mem.c */
void mem_mark_kept_for(lower_ctx *c);
void mem_account(lower_ctx *c);
void mem_choose_remat(lower_ctx *c);
void mem_emit_recompute(lower_ctx *c, int j, const int *head, const int *next);

#endif
