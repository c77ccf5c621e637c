/* ops — the lowering of the normalisations (layer_norm, group_norm,
 * normalize), pad and crop, bilinear resize, reshape and global max
 * pooling: their passes, HBM bytes and collectives, forward and backward
 * (docs/FIRMWARE.md rules; each op's price in docs/TRACE.md).
 *
 * Statistics follow batchnorm's: a reduction pass over x, then a
 * normalise pass; when the tensor is split, the partial sums a statistic
 * needs are all-reduced over the partition group between the two
 * (group_norm's per example and group; layer_norm's are per position,
 * whole on every core, so nothing crosses the split).  Windowed ops (pad,
 * crop, resize) exchange the rows their outputs reach on a neighbour:
 * halo.c's rules, which find no halo where the shards' boundaries allow
 * (a symmetric pad split two ways only adds rows to the outer shards). */
#include <math.h>

#include "emu/result.h"
#include "firmware/lower_internal.h"

/* Operations per element (docs/TRACE.md "Normalisations"): the
 * statistics add x and x*x (3, as batchnorm's reduction pass); the
 * normalise subtracts, scales by the inverse deviation, gamma and beta
 * (4, as batchnorm's); backward, the two gradient sums (5) and dx (6) as
 * batchnorm's. */
#define OPS_STATS 3
#define OPS_NORM 4
#define OPS_BSTATS 5
#define OPS_BDX 6

/* Bytes of the statistics' all-reduce: group_norm's two sums per
 * example and group, fp32. */
static int64_t gn_stat_bytes(const lower_ctx *c, const glayer *L)
{
    return (int64_t)(2 * c->B * L->groups * 4);
}

/* The input window a windowed op reads, exchanged first when its rows
 * lie on a neighbour; its bytes. */
static double window_in(lower_ctx *c, int ph, int l)
{
    const glayer *L = &c->g->layers[l], *I = &c->g->layers[L->in[0]];
    halo_t h;
    halo_fwd(c, l, L->in[0], &h);
    if (halo_needed(c, l, L->in[0]))
        halo_exchange(c, ph, l, L->in[0], &h, 0);
    return layout_bytes(c, I->out.nsp, h.in_ext, I->out.c, I->dtype_bytes);
}

void ops_forward(lower_ctx *c, int l)
{
    const glayer *L = &c->g->layers[l];
    const int ph = PHASE_FWD;
    double ob = layout_out_bytes(c, l), oe = layout_out_elems(c, l);
    double ib = layout_out_bytes(c, L->in[0]);
    double ie = layout_out_elems(c, L->in[0]);
    halo_t h;
    switch (L->op) {
    case GOP_LAYERNORM:
    case GOP_GROUPNORM:
        /* instance statistics in training and inference alike */
        tile_pass_fx(c, FX_NONE, ph, l, ib, 0, ie, OPS_STATS);
        if (L->op == GOP_GROUPNORM && layout_any_split(c, l))
            lower_emit(c, FW_ALLREDUCE, ph, l, gn_stat_bytes(c, L),
                       FW_GROUP_PARTITION, 0, 0);
        tile_pass(c, ph, l, ib + 8.0 * L->out.c, ob, oe, OPS_NORM);
        return;
    case GOP_NORMALIZE:
        /* (x - mean) * rsqrt(variance): the stored values read once */
        tile_pass(c, ph, l, ib + 8.0 * L->out.c, ob, oe, 3);
        return;
    case GOP_PAD:
        /* the window's rows copied, the new rows written as zeros */
        tile_pass(c, ph, l, window_in(c, ph, l), ob, oe, 1);
        return;
    case GOP_CROP:
        /* only the kept rows are read */
        window_in(c, ph, l);
        tile_pass(c, ph, l,
                  ob * c->g->layers[L->in[0]].dtype_bytes / L->dtype_bytes, ob,
                  oe, 1);
        return;
    case GOP_RESIZE:
        /* a lerp (2 operations) per dimension, and the store */
        tile_pass(c, ph, l, window_in(c, ph, l), ob, oe, 2.0 * L->out.nsp + 1);
        return;
    case GOP_RESHAPE:
        /* a relabelling; a split tensor is gathered first (halo.c) */
        halo_fwd(c, l, L->in[0], &h);
        if (h.gather)
            halo_exchange(c, ph, l, L->in[0], &h, 0);
        return;
    case GOP_GMAXPOOL:
        tile_pass(c, ph, l, ib, ob, ie, 2);
        if (layout_any_split(c, L->in[0]))
            lower_emit(c, FW_ALLREDUCE, ph, l, (int64_t)(c->B * L->out.c * 4),
                       FW_GROUP_PARTITION, 0, 0);
        return;
    default:
        return;
    }
}

/* layer_norm and group_norm backward: the sums of dY and dY x-hat (per
 * position or per group for dx, per channel for gamma and beta), then
 * dx.  Without an input gradient one pass forms gamma's and beta's (those
 * present). */
static void norm_backward(lower_ctx *c, int l, int input_is_data)
{
    const glayer *L = &c->g->layers[l];
    const int ph = PHASE_BWD;
    double ob = layout_out_bytes(c, l), oe = layout_out_elems(c, l);
    double ib = layout_out_bytes(c, L->in[0]);
    int dw = graph_layer_trains(c->g, l);
    if (input_is_data) {
        if (dw) /* beta alone ("scale": false) sums dY only */
            tile_pass(c, ph, l, L->no_scale ? ob : 2 * ob, 0, oe,
                      L->no_scale ? 1 : 3);
    } else {
        tile_pass_fx(c, FX_NONE, ph, l, 2 * ob, 0, oe, OPS_BSTATS);
        if (L->op == GOP_GROUPNORM && layout_any_split(c, l))
            lower_emit(c, FW_ALLREDUCE, ph, l, gn_stat_bytes(c, L),
                       FW_GROUP_PARTITION, 0, 0);
        tile_pass(c, ph, l, 2 * ob, ib, oe, OPS_BDX);
    }
    /* a sharer's partial gamma and beta are its owner's size */
    const glayer *O = L->share_from >= 0 ? &c->g->layers[L->share_from] : L;
    if (dw && c->hw->xla_dw_allreduce && layout_any_split(c, l))
        lower_emit(c, FW_ALLREDUCE, ph, l, O->weights * 4, FW_GROUP_PARTITION,
                   0, 0);
}

void ops_backward(lower_ctx *c, int l, int input_is_data)
{
    const glayer *L = &c->g->layers[l];
    const int ph = PHASE_BWD;
    double ob = layout_out_bytes(c, l), oe = layout_out_elems(c, l);
    double ib = layout_out_bytes(c, L->in[0]);
    halo_t h;
    switch (L->op) {
    case GOP_LAYERNORM:
    case GOP_GROUPNORM:
        norm_backward(c, l, input_is_data);
        return;
    case GOP_NORMALIZE:
        if (!input_is_data)
            tile_pass(c, ph, l, ob + 4.0 * L->out.c, ib, oe, 2);
        return;
    case GOP_PAD:
    case GOP_CROP:
    case GOP_RESIZE: {
        if (input_is_data)
            return;
        /* dx gathers the output rows that read each input row (a halo
         * of dY where they lie on a neighbour) */
        double gb = ob;
        if (halo_bwd(c, l, L->in[0], &h)) {
            halo_exchange(c, ph, l, L->in[0], &h, 1);
            gb =
                layout_bytes(c, L->out.nsp, h.in_ext, L->out.c, L->dtype_bytes);
        }
        double ie = layout_out_elems(c, L->in[0]);
        if (L->op == GOP_RESIZE) /* each output's lerp weights, added */
            tile_pass(c, ph, l, gb, ib, oe, 2.0 * L->out.nsp + 1);
        else
            tile_pass(c, ph, l, L->op == GOP_PAD ? ib : gb, ib, ie, 1);
        return;
    }
    case GOP_GMAXPOOL: {
        if (input_is_data)
            return;
        /* dY goes to the maxima (shared among ties, as TensorFlow's
         * reduce_max gradient): the ties counted, summed over the
         * split, then dx from x, y and dY */
        double ie = layout_out_elems(c, L->in[0]);
        tile_pass_fx(c, FX_NONE, ph, l, ib + ob, 0, ie, 2);
        if (layout_any_split(c, L->in[0]))
            lower_emit(c, FW_ALLREDUCE, ph, l, (int64_t)(c->B * L->out.c * 4),
                       FW_GROUP_PARTITION, 0, 0);
        tile_pass(c, ph, l, ib + 2 * ob, ib, ie, 3);
        return;
    }
    default: /* reshape: a relabelling, as flatten */
        return;
    }
}
