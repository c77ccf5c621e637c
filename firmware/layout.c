/* layout — this shard's tensors: their extents under the partition plan,
 * their bytes in HBM's tiled layout, and XLA's small-batch convolution
 * layout with the K it gives a product.
 *
 * HBM tensors are stored in (8, 128) tiles: the minor dimension is padded
 * to 128 lanes and the second-minor to 8 sublanes (Cloud TPU performance
 * guide).  Layout assignment picks channels or width as the minor
 * dimension, whichever pads less, so a 3-channel image is not inflated
 * 42x. */
#include <math.h>

#include "firmware/lower_internal.h"

/* This shard's slice of layer l's output: extents (and offsets). */
void layout_local_out(const lower_ctx *c, int l, int64_t ext[GRAPH_MAX_SP],
                      int64_t off[GRAPH_MAX_SP])
{
    const gshape *s = &c->g->layers[l].out;
    for (int d = 0; d < GRAPH_MAX_SP; d++) {
        int64_t lo = 0, hi = 1;
        if (d < s->nsp)
            plan_range(c->p, c->g, l, d, c->coords[d], &lo, &hi);
        ext[d] = hi - lo;
        if (off)
            off[d] = lo;
    }
}

int layout_is_split(const lower_ctx *c, int l, int d)
{
    return c->p->split[l * GRAPH_MAX_SP + d] != 0;
}

int layout_any_split(const lower_ctx *c, int l)
{
    for (int d = 0; d < c->g->layers[l].out.nsp; d++)
        if (layout_is_split(c, l, d))
            return 1;
    return 0;
}

/* Whether XLA's small-batch convolution layout applies (Cloud TPU TF
 * performance notes, tf.nn.conv_n_d; emu/params.c xla.conv_pad): the
 * module's most common convolution batch is below the threshold.  Forward
 * and input-gradient convolutions (two of every three) have the per-core
 * batch B as their batch, so B is the most common one. */
int layout_small_batch(const lower_ctx *c)
{
    return c->hw->xla_conv_pad && c->B < c->hw->xla_conv_batch_threshold;
}

/* Examples a small-batch convolution really processes: batch padded to
 * the sublanes (8).  1 otherwise. */
double layout_batch_scale(const lower_ctx *c)
{
    if (!layout_small_batch(c) || !c->hw->xla_conv_pad_batch || c->B <= 0)
        return 1;
    return (double)rup((int64_t)ceil(c->B), c->hw->sublane_pad) / c->B;
}

/* Bytes of a tensor of this shape in HBM, tiled layout, for B examples.
 * A spatial dimension of extent 1 takes no part in the (8, 128) tiling:
 * layout assignment is free to place a degenerate dimension major, so the
 * tiled pair is the channels and the innermost dimension longer than one
 * [U]: a 1-column halo along W is not shipped padded to 8 columns (8x
 * its bytes), as a 33-row one along H is not.  With xla.batch_lanes the
 * batch may be the lanes instead, over the channels on the sublanes,
 * where that pads least (128 examples per core: a 64-channel map is
 * stored unpadded, not at twice its size). */
double layout_bytes(const lower_ctx *c, int nsp, const int64_t ext[],
                    int64_t ch, int dtype)
{
    int64_t lane = c->hw->lane_pad, sub = c->hw->sublane_pad;
    int inner = nsp - 1;
    while (inner >= 0 && ext[inner] == 1)
        inner--;
    double rest = 1; /* the spatial extents but inner's */
    for (int d = 0; d < nsp; d++)
        if (d != inner)
            rest *= (double)ext[d];
    double bytes;
    if (inner < 0) /* [B, C]: the batch is the second-minor dimension */
        bytes = (double)rup((int64_t)c->B, sub) * (double)rup(ch, lane);
    else {
        int64_t w = ext[inner];
        double minor = (double)min64(rup(ch, lane) * rup(w, sub),
                                     rup(w, lane) * rup(ch, sub));
        bytes = c->B * rest * minor;
    }
    if (c->hw->xla_batch_lanes) {
        /* every position, whole integers: exact in either order */
        double pos = inner < 0 ? rest : rest * (double)ext[inner];
        double lanes = (double)rup((int64_t)ceil(c->B), lane) *
                       (double)rup(ch, sub) * pos;
        if (lanes < bytes)
            bytes = lanes;
    }
    return bytes * dtype;
}

double layout_out_bytes(const lower_ctx *c, int l)
{
    int64_t ext[GRAPH_MAX_SP];
    layout_local_out(c, l, ext, NULL);
    const glayer *L = &c->g->layers[l];
    return layout_bytes(c, L->out.nsp, ext, L->out.c, L->dtype_bytes);
}

double layout_out_elems(const lower_ctx *c, int l)
{
    int64_t ext[GRAPH_MAX_SP];
    layout_local_out(c, l, ext, NULL);
    const glayer *L = &c->g->layers[l];
    double e = c->B * (double)L->out.c;
    for (int d = 0; d < L->out.nsp; d++)
        e *= (double)ext[d];
    return e;
}

/* Whether layer l (an add or concat) takes a box out of input i: a
 * replicated operand meeting a split one (emu/plan.h), resharded by a
 * local slice. */
int layout_reshards(const lower_ctx *c, int l, int i)
{
    const glayer *L = &c->g->layers[l], *I = &c->g->layers[i];
    if ((L->op != GOP_ADD && L->op != GOP_CONCAT && L->op != GOP_ELEMWISE) ||
        I->out.nsp != L->out.nsp)
        return 0;
    for (int d = 0; L->op == GOP_ELEMWISE && d < L->out.nsp; d++)
        if (I->out.sp[d] != L->out.sp[d])
            return 0; /* a broadcast operand: read whole */
    for (int d = 0; d < L->out.nsp; d++)
        if (layout_is_split(c, l, d) && !layout_is_split(c, i, d))
            return 1;
    return 0;
}

/* Bytes of input i that layer l reads: its shard, or the slice of l's box
 * out of a replicated operand (the dynamic-slice fuses into the add). */
double layout_operand_bytes(const lower_ctx *c, int l, int i)
{
    const glayer *I = &c->g->layers[i];
    if (!layout_reshards(c, l, i))
        return layout_out_bytes(c, i);
    int64_t ext[GRAPH_MAX_SP];
    layout_local_out(c, l, ext, NULL);
    return layout_bytes(c, I->out.nsp, ext, I->out.c, I->dtype_bytes);
}

/* Fraction of layer l's output this core computes (1 when replicated). */
double layout_out_fraction(const lower_ctx *c, int l)
{
    const glayer *L = &c->g->layers[l];
    int64_t ext[GRAPH_MAX_SP];
    layout_local_out(c, l, ext, NULL);
    double f = 1;
    for (int d = 0; d < L->out.nsp; d++)
        f *= (double)ext[d] / (double)L->out.sp[d];
    return f;
}

/* A convolution in XLA's small-batch layout contracts each tap over the
 * input features padded to the lanes (128): the taps stay separate K
 * slices (no im2col folding; tpuemu's fold rule applies otherwise). */
int layout_keeps_taps(const lower_ctx *c, const glayer *L)
{
    return layout_small_batch(c) && (L->op == GOP_CONV || L->op == GOP_CONV_T);
}

/* The batch padding of convolution L: a 3D convolution whose kernel and
 * stride are 1 along its first dimension is a batch of 2D convolutions
 * over it (the trace's form of a per-ROI convolution: Mask R-CNN's heads
 * reshape [examples, ROIs] into one batch), so that dimension's local
 * extent joins the batch that is padded to the sublanes. */
double layout_conv_batch_scale(const lower_ctx *c, const glayer *L)
{
    double s = layout_batch_scale(c);
    if (s == 1 || L->out.nsp != 3 || L->kernel[0] != 1 ||
        (L->strides[0] > 1))
        return s;
    int64_t ext[GRAPH_MAX_SP];
    layout_local_out(c, (int)(L - c->g->layers), ext, NULL);
    double b = c->B * (double)ext[0];
    return (double)rup((int64_t)ceil(b), c->hw->sublane_pad) / b;
}

/* Rows (M) a matrix layer streams per real row: the padded batch of a
 * small-batch convolution. */
double layout_rows_scale(const lower_ctx *c, const glayer *L)
{
    return layout_keeps_taps(c, L) ? layout_conv_batch_scale(c, L) : 1;
}

/* A product's K over `taps` kernel taps of `ch` features each (the
 * input's for the forward product, dY's for the input gradient): each
 * tap's features padded to the lanes, or the taps folded into K (im2col)
 * when that needs fewer passes of the array's depth and the small-batch
 * layout does not keep them apart (it does not for inputs thinner than
 * xla.conv_pad_min_features).  *fold says which. */
int64_t layout_tap_k(const lower_ctx *c, const glayer *L, int64_t taps,
                     int64_t ch, int *fold)
{
    int64_t lane = c->hw->lane_pad, rows = c->hw->mxu.rows;
    int64_t unf = taps * rup(ch, lane);
    int keep = layout_keeps_taps(c, L) && ch >= c->hw->xla_conv_pad_min_features;
    *fold = cdiv(taps * ch, rows) < cdiv(unf, rows) && !keep;
    return *fold ? taps * ch : unf;
}
