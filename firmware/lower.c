/* lower — the lowering of one core's step: the context, each op's
 * instructions, and fw_lower, which runs the passes in order.  The files
 * beside it (firmware/lower_internal.h lists them) hold the layout, the
 * tile loops, the halos, grouped convolutions, fusion and memory.
 *
 * Lowering rules (docs/FIRMWARE.md has them all with the reasons; the
 * tiled layout's is in firmware/layout.c):
 *
 * Fusion (XLA "convolution fusion" / "loop fusion"; how much is fused on a
 * real TPU is [U]): bias and the batchnorm statistics are computed in the
 * producing convolution's epilogue; batchnorm's normalize is one streaming
 * pass, with a following relu fused into it; add + relu is one pass;
 * concat and flatten cost nothing (producers write into place).
 *
 * Training: forward; backward in reverse layer order (input gradient with
 * its own halo exchange, weight gradient accumulated in VMEM over M
 * tiles); the gradient all-reduce over all cores (weight gradients are
 * partial sums within a partition group and replicas' contributions across
 * groups: one all-reduce sums both); the optimizer's update.  XLA does not
 * overlap the all-reduce with the backward pass in TPUEstimator's
 * CrossShardOptimizer, so neither does tpuemu.
 */
#include "firmware/lower.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "emu/result.h"
#include "firmware/lower_internal.h"

/* A layer placed on another core of the replica ("core"): this core
 * skips its work and takes part only in its collectives (every core of
 * the group meets at them), so it idles until the placed core is done. */
static int lower_elsewhere(const lower_ctx *c, int layer, fw_op op)
{
    if (layer < 0 || layer >= c->g->n_layers || c->p->cpr < 2)
        return 0;
    int k = graph_core(&c->g->layers[layer]);
    return k >= 0 && k != c->shard && op != FW_HALO && op != FW_ALLREDUCE &&
           op != FW_ALLGATHER && op != FW_BARRIER;
}

/* Every instruction of the lowering goes through these two: c->prog is
 * the step's program, or a candidate's being priced. */
void lower_emit(lower_ctx *c, fw_op op, int phase, int layer, int64_t a,
                int64_t b, int64_t cc, int64_t d)
{
    if (lower_elsewhere(c, layer, op))
        return;
    fw_emit(c->prog, op, phase, layer, a, b, cc, d);
}

void lower_emit_fx(lower_ctx *c, int fx, fw_op op, int phase, int layer,
                   int64_t a, int64_t b, int64_t cc, int64_t d)
{
    if (lower_elsewhere(c, layer, op))
        return;
    fw_emit(c->prog, op, phase, layer, a, b, cc, d);
    if (!c->prog->oom)
        c->prog->code[c->prog->n - 1].fx = (uint8_t)fx;
}

static int passes_of(const glayer *L)
{
    /* [U] an f32 matrix product runs as 3 bf16 passes (bf16_3x, as XLA's
     * default precision for f32 on TPU v2/v3 "HIGH"). */
    return L->dtype_bytes == 4 ? 3 : 1;
}

/* Conv, conv_transpose and dense: forward (phase FWD) or the two backward
 * products. */
static void lower_matrix_layer(lower_ctx *c, int l, int phase)
{
    const glayer *L = &c->g->layers[l];
    int i = L->in[0];
    const glayer *I = &c->g->layers[i];
    int rows = c->hw->mxu.rows;
    int64_t taps = 1, sprod = 1;
    int nsp = L->op == GOP_DENSE ? 0 : L->out.nsp;
    for (int d = 0; d < nsp; d++) {
        taps *= L->kernel[d];
        sprod *= L->strides[d] > 0 ? L->strides[d] : 1;
    }
    int64_t cin = I->out.c, cout = L->out.c;
    halo_t h;
    halo_fwd(c, l, i, &h);
    double m_out =
        layout_out_elems(c, l) / (double)cout; /* B x local positions */
    double in_b = layout_bytes(c, I->out.nsp, h.in_ext, cin, I->dtype_bytes);
    double o_b = layout_out_bytes(c, l);
    int passes = passes_of(L);
    /* Dense on a flat tensor: positions = 1. */
    if (L->op == GOP_DENSE && I->out.nsp > 0 && L->out.nsp > 0)
        nsp = 0; /* Keras Dense on the channel dim: a 1x1 conv */
    /* K: each tap's features padded to the lanes (the layout's minor
     * dimension: 128 on v2/v3, the performance guide's "features to 128"),
     * or taps folded into K (im2col) when that needs fewer passes of the
     * array's depth.  The padding is the layout's, not the array's: with a
     * deeper array (--set mxu.rows=256) a 128-channel tap stays 128 deep
     * and two taps share a pass (padding to the depth would make a 256x256
     * array slower than 128x128 on a 3x3 convolution). */
    int64_t lane = c->hw->lane_pad;
    int64_t k_taps = L->op == GOP_CONV_T ? cdiv(taps, sprod) : taps;
    int fold;
    int64_t K = layout_tap_k(c, L, k_taps, cin, &fold);
    /* Weights as the MXU reads them: bf16, or for an f32 layer the fp32
     * values its three bf16 passes split (4 bytes a weight, not 2). */
    double w_bytes = (double)taps * (double)cin * (double)rup(cout, lane) *
                     (L->dtype_bytes == 4 ? 4 : 2);
    int64_t M = (int64_t)llround(m_out * layout_rows_scale(c, L));
    if (layout_keeps_taps(c, L)) {
        c->mem->small_batch = c->B;
        c->mem->small_batch_padded = c->B * layout_batch_scale(c);
    }
    double ktiles = (double)cdiv(K, rows);
    /* output columns the vector unit and the accumulators hold: the
     * lanes', not the array's (a wider array's extra columns are idle) */
    double npad = (double)rup(cout, lane);
    double epi = npad * (ktiles - 1 + 3); /* K-slice sums, bias, BN stats */
    if (fold)
        epi += (double)K; /* im2col shuffle on the vector unit */
    /* xla.bn_apply_fused: the operand's normalise is applied as each K
     * slice is loaded, once per tap (the taps are separate loads of
     * overlapping windows): vector work beside the MXU's, not a pass. */
    double apply = fuse_apply_ops(c, i);
    epi += apply * (double)K;

    /* A grouped convolution's candidates (gconv_emit) */
    int64_t G = graph_groups(L);
    gconv q;
    memset(&q, 0, sizeof q);
    if (G > 1) {
        q.l = l;
        q.G = G;
        q.taps = taps;
        q.k_taps = k_taps;
        q.sprod = L->op == GOP_CONV ? sprod : 1;
        q.cin = cin;
        q.cout = cout;
        q.cin_g = cin / G;
        q.cout_g = cout / G;
        q.M = M;
        q.m_rows = m_out;
        q.in_b = in_b;
        q.o_b = o_b;
        q.apply = apply;
        q.wbytes_el = L->dtype_bytes == 4 ? 4 : 2;
        q.passes = passes;
    }

    if (phase == PHASE_FWD) {
        if (halo_needed(c, l, i))
            halo_exchange(c, phase, l, i, &h, 0);
        if (G > 1) {
            int cand = M > 0 ? gconv_pick(c, phase, &q, 0) : FW_GC_DENSE;
            if (M > 0)
                gconv_emit(c, phase, &q, 0, cand);
            /* MXU utilization counts the matrix unit's useful MACs: a
             * depthwise part on the vector unit has none there, and an
             * MXU idle all step reads 0% */
            if (cand != FW_GC_VECTOR)
                c->mem->useful_macs +=
                    L->macs * c->B * layout_out_fraction(c, l);
            return;
        }
        c->fx = FX_FWD;
        if (L->op == GOP_CONV_T && taps % sprod) {
            /* A transposed convolution whose kernel does not split evenly
             * over its stride phases (3x3 at stride 2: 4, 2, 2 and 1 taps)
             * runs as s^d sub-convolutions, timed as the strided input
             * gradient is: rows / s^d rows by every tap (ceil(taps / s^d)
             * taps at every output position would charge 1.33x the work,
             * 4x for 1x1).  An even split keeps taps / s^d per output
             * row. */
            int fold_t;
            int64_t Mt = cdiv(M, sprod),
                    Kt = layout_tap_k(c, L, taps, cin, &fold_t);
            double epi_t = npad * ((double)cdiv(Kt, rows) - 1 + 3) +
                           (fold_t ? (double)Kt : 0) + apply * (double)Kt;
            tile_matmul(c, phase, l, Mt, Kt, cout, in_b / (double)Mt,
                        o_b / (double)Mt, w_bytes, npad * 4, epi_t, passes);
        } else
            tile_matmul(c, phase, l, M, K, cout, in_b / (double)M,
                        o_b / (double)M, w_bytes, npad * 4, epi, passes);
        c->fx = FX_NONE;
        c->mem->useful_macs += L->macs * c->B * layout_out_fraction(c, l);
        return;
    }
    /* Backward.  dW[K, cout] = X^T dY: the reduction runs over M, so the
     * MXU streams K rows against dY weight tiles of depth `rows`. */
    double dy_b = o_b;
    double in_nohalo = 0;
    int64_t Min = (int64_t)c->B; /* examples x local input positions */
    {
        int64_t e[GRAPH_MAX_SP];
        layout_local_out(c, i, e, NULL);
        in_nohalo = layout_bytes(c, I->out.nsp, e, cin, I->dtype_bytes);
        for (int d = 0; d < I->out.nsp; d++)
            Min *= e[d];
    }
    /* The input gradient only when something below trains, the weight
     * gradient only when these weights do (tf.gradients differentiates
     * towards the trainable variables alone). */
    /* A short trailing shard can be empty (docs/FIRMWARE.md, uneven
     * splits): no matrix work for rows it does not hold.  Its exchanges
     * and all-reduces stay: they are collectives of the whole group. */
    int need_dx = I->needs_grad;
    if (need_dx) {
        halo_t hb;
        if (halo_bwd(c, l, i, &hb))
            halo_exchange(c, phase, l, i, &hb, 1);
        /* dX = dY (*) W^T: same MACs as the forward product.  A strided
         * convolution's input gradient reads the stride-dilated dY, which
         * runs as s^d sub-convolutions, one per stride phase, whose taps
         * add up to the kernel's: timed as one product of (input rows /
         * s^d) rows by every tap, each row standing for one group of s^d
         * input positions (emu/fx/fx_mm.c walks them so), not
         * ceil(taps / s^d) taps at every input position: that is 4x the
         * useful work of a 1x1 stride-2 convolution, whose other phases
         * have no tap.  Taps fold into K as the forward's do (with dY's
         * features), unless the small-batch layout keeps them apart. */
        if (layout_keeps_taps(c, L))
            Min = (int64_t)llround((double)Min *
                                   layout_conv_batch_scale(c, L));
        int64_t Mdx = L->op == GOP_CONV ? cdiv(Min, sprod) : Min;
        int fold_dx;
        int64_t Kdx =
            layout_tap_k(c, L, L->op == GOP_DENSE ? 1 : taps, cout, &fold_dx);
        double ep = (double)rup(cin, lane) * ((double)cdiv(Kdx, rows) + 1);
        if (fold_dx)
            ep += (double)Kdx; /* im2col shuffle, as the forward's */
        c->fx = FX_DX;
        int on_mxu = 1;
        if (G > 1 && Min > 0) {
            c->fx = FX_NONE;
            q.Min = Min;
            q.in_rows = (double)Min / layout_rows_scale(c, L);
            q.in_nohalo = in_nohalo;
            int cand = gconv_pick(c, phase, &q, 1);
            gconv_emit(c, phase, &q, 1, cand);
            on_mxu = cand != FW_GC_VECTOR;
        } else if (Mdx > 0)
            tile_matmul(c, phase, l, Mdx, Kdx, cin, dy_b / (double)Mdx,
                        in_nohalo / (double)Mdx, w_bytes,
                        (double)rup(cin, lane) * 4, ep, passes);
        c->fx = FX_NONE;
        if (on_mxu)
            c->mem->useful_macs += L->macs * c->B * layout_out_fraction(c, l);
    }
    if (!graph_layer_trains(c->g, l))
        return;
    halo_dw_exchange(c, l, i, &h);
    /* dW: m = K rows of X^T, k = M positions, n = cout; accumulated in
     * fp32 in VMEM over slabs of M, stored once (tile_dw; the slabs'
     * loads overlap the products).  In the small-batch layout the guide
     * pads the weight-gradient convolution's batch (the input features:
     * K, unfolded) to 128 and its feature (the examples, in M) to 8. */
    c->fx = FX_DW;
    int dw_on_mxu = 1;
    if (G > 1 && M > 0) {
        c->fx = FX_NONE;
        int cand = gconv_pick(c, phase, &q, 2);
        gconv_emit(c, phase, &q, 2, cand);
        dw_on_mxu = cand != FW_GC_VECTOR;
    } else
        tile_dw(c, phase, l, K, M, cout, in_b, dy_b, npad, apply, passes);
    c->fx = FX_NONE;
    if (dw_on_mxu)
        c->mem->useful_macs += L->macs * c->B * layout_out_fraction(c, l);
    /* Each shard summed its own positions: XLA SPMD all-reduces the
     * partial kernel over the partition group at once, in the product's
     * type (xla.dw_allreduce).  Its values stay partial until the final
     * all-reduce (docs/FUNCTIONAL.md), which sums the same terms. */
    if (c->hw->xla_dw_allreduce && layout_any_split(c, l)) {
        const glayer *O = L->share_from >= 0 ? &c->g->layers[L->share_from] : L;
        lower_emit(c, FW_ALLREDUCE, phase, l, O->weights * L->dtype_bytes,
                   FW_GROUP_PARTITION, 0, 0);
    }
}

/* roi_align's levels for the replica's examples, whole: as they lie, or
 * padded to the first level's extent and stacked ("levels": "padded"). */
static double roi_levels_bytes(const lower_ctx *c, const glayer *L,
                               int padded)
{
    double b = 0;
    for (int k = 0; k < L->n_in; k++) {
        const glayer *I = &c->g->layers[L->in[padded ? 0 : k]];
        b += layout_bytes(c, I->out.nsp, I->out.sp, I->out.c, I->dtype_bytes);
    }
    return b;
}

/* Whether roi_align l reads levels the plan split (they are gathered
 * whole first). */
static int roi_split(const lower_ctx *c, const glayer *L)
{
    int split = 0;
    for (int k = 0; k < L->n_in; k++)
        split |= layout_any_split(c, L->in[k]);
    return split;
}

/* roi_align l's forward gather of its levels. */
static void roi_gather(lower_ctx *c, int l)
{
    const glayer *L = &c->g->layers[l];
    lower_emit_fx(c, FX_FWD, FW_ALLGATHER, PHASE_FWD, l,
                  (int64_t)ceil(roi_levels_bytes(c, L, L->roi_padded)), 0, 0,
                  0);
}

/* The gradients of placed roi_aligns back to the replica's cores, emitted
 * when the backward pass reaches a layer that is not placed: until then
 * each head's core runs its own backward while the others run theirs
 * (the code assigns the heads to cores so that they overlap), instead of
 * meeting at every head's gather. */
static void roi_flush(lower_ctx *c)
{
    for (int i = 0; i < c->npend; i++) {
        const glayer *L = &c->g->layers[c->pend[i]];
        lower_emit_fx(c, FX_DX, FW_ALLGATHER, PHASE_BWD, c->pend[i],
                      (int64_t)ceil(roi_levels_bytes(c, L, L->roi_padded)),
                      0, 0, 0);
    }
    c->npend = 0;
}

/* roi_align (docs/FIRMWARE.md, "roi_align"): the levels are gathered
 * whole to the core that runs it when the plan split them (the ROIs fall
 * anywhere); each output bin is one bilinear sample at its centre, 4 rows
 * of C channels read from HBM and combined on the vector unit.  Its
 * backward zeroes the levels' gradient and scatter-adds 4 weighted rows
 * per sample into it, streamed and then one update after another (two
 * samples may add to one row); a placed roi_align then sends each core
 * its part of that gradient (the same bytes back, roi_flush).  A placed
 * roi_align's gather also brings the levels of every later placed
 * roi_align that reads no layer after it: XLA starts a transfer once its
 * data is ready, so one head's core does not wait for another head's
 * forward to receive its levels. */
static void lower_roi(lower_ctx *c, int l, int ph)
{
    const glayer *L = &c->g->layers[l];
    double ob = layout_out_bytes(c, l), oe = layout_out_elems(c, l);
    double whole = roi_levels_bytes(c, L, 0);
    double moved = roi_levels_bytes(c, L, L->roi_padded);
    int split = roi_split(c, L);
    if (ph == PHASE_FWD) {
        if (split && !c->gathered[l]) {
            roi_gather(c, l);
            for (int j = l + 1; graph_core(L) >= 0 && j < c->g->n_layers;
                 j++) {
                const glayer *J = &c->g->layers[j];
                int ready = J->op == GOP_ROI_ALIGN && !J->unused &&
                            graph_core(J) >= 0 && roi_split(c, J);
                for (int k = 0; ready && k < J->n_in; k++)
                    ready = J->in[k] <= l;
                if (ready) {
                    roi_gather(c, j);
                    c->gathered[j] = 1;
                }
            }
        }
        if (L->roi_padded) /* the padded stack, written once */
            tile_pass_fx(c, FX_NONE, ph, l, whole, moved,
                         moved / L->dtype_bytes, 1);
        tile_pass(c, ph, l, 4 * ob, ob, oe, 7);
        return;
    }
    int need = 0;
    for (int k = 0; k < L->n_in; k++)
        need |= c->g->layers[L->in[k]].needs_grad;
    if (!need)
        return;
    tile_pass(c, ph, l, 5 * ob, 4 * ob + moved, oe, 8);
    /* the scatter-add's update windows (4 rows of C a bin) applied in
     * order, xla.scatter_update_ns each */
    lower_emit(c, FW_VEC, ph, l, 0, 0,
               (int64_t)ceil(4 * oe / (double)L->out.c), 0);
    if (L->roi_padded) /* the stack's gradient back into the levels' */
        tile_pass_fx(c, FX_NONE, ph, l, moved, whole,
                     moved / L->dtype_bytes, 1);
    if (graph_core(L) >= 0 && c->p->cpr > 1)
        c->pend[c->npend++] = l;
}

static int consumer_is(const lower_ctx *c, int l, graph_op op)
{
    for (int j = l + 1; j < c->g->n_layers; j++) {
        const glayer *J = &c->g->layers[j];
        for (int k = 0; k < J->n_in; k++)
            if (J->in[k] == l && J->op == op)
                return 1;
    }
    return 0;
}

static void lower_forward_ops(lower_ctx *c, int l);

/* Every compute instruction of the forward pass computes the layer's
 * values, except those that say otherwise (FX_NONE). */
static void lower_forward(lower_ctx *c, int l)
{
    if (c->g->layers[l].unused)
        return; /* feeds no loss: XLA's dead code elimination drops it */
    double macs = c->mem->useful_macs;
    c->fx = FX_FWD;
    lower_forward_ops(c, l);
    c->fx = FX_NONE;
    if (lower_elsewhere(c, l, FW_MATMUL)) /* another core's products */
        c->mem->useful_macs = macs;
}

static void lower_forward_ops(lower_ctx *c, int l)
{
    const glayer *L = &c->g->layers[l];
    const int ph = PHASE_FWD;
    double ob = layout_out_bytes(c, l), oe = layout_out_elems(c, l);
    double ib = L->n_in ? layout_out_bytes(c, L->in[0]) : 0;
    double ie = L->n_in ? layout_out_elems(c, L->in[0]) : 0;
    halo_t h;
    switch (L->op) {
    case GOP_INPUT:
    case GOP_FLATTEN:
    case GOP_CONCAT:
        /* Free: producers write into the concatenated buffer; flatten is a
         * relabelling.  A split tensor that flattens is gathered first.  A
         * replicated operand of a split concat is its own buffer: the
         * slice of the box is copied in (values come when read). */
        if (L->op == GOP_FLATTEN) {
            halo_fwd(c, l, L->in[0], &h);
            if (h.gather)
                halo_exchange(c, ph, l, L->in[0], &h, 0);
        }
        for (int k = 0; L->op == GOP_CONCAT && k < L->n_in; k++)
            if (layout_reshards(c, l, L->in[k])) {
                double b = layout_operand_bytes(c, l, L->in[k]);
                tile_pass_fx(c, FX_NONE, ph, l, b, b,
                             oe * (double)c->g->layers[L->in[k]].out.c /
                                 (double)L->out.c,
                             1);
            }
        return;
    case GOP_CONV:
    case GOP_CONV_T:
    case GOP_DENSE:
        lower_matrix_layer(c, l, ph);
        return;
    case GOP_BATCHNORM: {
        /* Training normalises with the batch's statistics: they come from
         * the producer's epilogue unless the producer is not a matrix layer
         * (then a reduction pass reads x), summed over the replica's shards
         * when the tensor is split.
         * Inference (Keras training=False) normalises with the stored
         * moving mean and variance: no statistics, nothing to exchange. */
        const glayer *I = &c->g->layers[L->in[0]];
        int batch_stats = c->g->train && !L->bn_moving;
        if (batch_stats &&
            ((I->op != GOP_CONV && I->op != GOP_CONV_T && I->op != GOP_DENSE) ||
             !c->hw->xla_bn_stats_fused))
            tile_pass_fx(c, FX_NONE, ph, l, ib, 0, ie, 3);
        if (batch_stats && (layout_any_split(c, l) || c->g->bn_group > 1))
            lower_emit(c, FW_ALLREDUCE, ph, l, 2 * L->out.c * 4,
                       c->g->bn_group > 1 ? FW_GROUP_BN : FW_GROUP_PARTITION,
                       0, 0);
        if (!fuse_materialised(c, l)) {
            /* values only (the functional executor): no time, no bytes */
            tile_pass(c, ph, l, 0, 0, oe, 0);
            return;
        }
        int fuse = consumer_is(c, l, GOP_RELU);
        tile_pass(c, ph, l, ib, ob, oe, fuse ? 5 : 4);
        return;
    }
    case GOP_RELU:
    case GOP_SIGMOID:
        if (c->relu_fused[l])
            return;
        tile_pass(c, ph, l, ib, ob, oe, L->op == GOP_RELU ? 2 : 6);
        return;
    case GOP_ADD: {
        double in_all = 0, apply = 0;
        for (int k = 0; k < L->n_in; k++) {
            in_all += layout_operand_bytes(c, l, L->in[k]);
            apply += fuse_apply_ops(c, L->in[k]);
        }
        tile_pass(c, ph, l, in_all, ob, oe,
                  L->n_in + 1 + consumer_is(c, l, GOP_RELU) + apply);
        return;
    }
    case GOP_MAXPOOL:
    case GOP_AVGPOOL: {
        halo_fwd(c, l, L->in[0], &h);
        if (halo_needed(c, l, L->in[0]))
            halo_exchange(c, ph, l, L->in[0], &h, 0);
        double win = 1;
        for (int d = 0; d < L->out.nsp; d++)
            win *= L->kernel[d];
        const glayer *I = &c->g->layers[L->in[0]];
        double inb =
            layout_bytes(c, I->out.nsp, h.in_ext, I->out.c, I->dtype_bytes);
        tile_pass(c, ph, l, inb, ob, oe, win + 2);
        return;
    }
    case GOP_UPSAMPLE:
        /* Uneven shards: an output shard may start inside the previous
         * input shard (e.g. 5 rows x2 in two shards: 0-2 and 3-4 feed
         * outputs 0-4 and 5-9, and output 5 reads row 2). */
        halo_fwd(c, l, L->in[0], &h);
        if (halo_needed(c, l, L->in[0]))
            halo_exchange(c, ph, l, L->in[0], &h, 0);
        tile_pass(c, ph, l, ib, ob, oe, 1);
        return;
    case GOP_DROPOUT:
        tile_pass(c, ph, l, ib, ob + oe / 8, oe, 4); /* RNG + mask bits */
        return;
    case GOP_GAP:
        tile_pass(c, ph, l, ib, ob, ie, 2);
        if (layout_any_split(c, L->in[0]))
            lower_emit(c, FW_ALLREDUCE, ph, l, (int64_t)(c->B * L->out.c * 4),
                       FW_GROUP_PARTITION, 0, 0);
        return;
    case GOP_LOSS: {
        /* Loss and its gradient in one pass over the logits; a gradient
         * is written only for an input something below it trains through
         * (none when every layer is frozen). */
        /* per element, in graph_loss order; sigmoid_xent: the sigmoid
         * (3), log1p(exp(-|z|)) + max(z, 0) - t z (3), p - t scaled (2) */
        static const double ops[] = {8, 14, 6, 3, 5, 8};
        double in_all = 0, grad = 0, el = 0;
        for (int k = 0; k < L->n_in; k++) {
            in_all += layout_out_bytes(c, L->in[k]);
            el += layout_out_elems(c, L->in[k]);
            if (c->g->train && c->g->layers[L->in[k]].needs_grad)
                grad += layout_out_bytes(c, L->in[k]);
        }
        tile_pass(c, ph, l, in_all, grad, el, ops[L->loss]);
        int split = 0;
        for (int k = 0; k < L->n_in; k++)
            split |= layout_any_split(c, L->in[k]);
        if (split)
            lower_emit(c, FW_ALLREDUCE, ph, l, L->loss == GLOSS_DICE ? 12 : 4,
                       FW_GROUP_PARTITION, 0, 0);
        return;
    }
    case GOP_ELEMWISE: {
        /* One streaming pass: a per-channel operand (one value per
         * example and channel) is read once and held in VMEM, a
         * per-position one ([H,W,1]) streams with the map (its shard, C
         * = 1); no halo (position by position). */
        double in_all = 0;
        for (int k = 0; k < L->n_in; k++)
            in_all += graph_ew_broadcast(c->g, L, k) == GEW_BC_CHANNEL
                          ? layout_out_bytes(c, L->in[k])
                          : layout_operand_bytes(c, l, L->in[k]);
        tile_pass(c, ph, l, in_all, ob, oe,
                  L->n_in + 1 + (L->kind == GEW_AVERAGE));
        return;
    }
    case GOP_ACT:
        /* prelu's slopes are read once (fp32, one per channel) */
        tile_pass(c, ph, l, ib + (L->kind == GACT_PRELU ? 4.0 * L->out.c : 0),
                  ob, oe, graph_act_ops(L, 0));
        return;
    case GOP_ROI_ALIGN:
        lower_roi(c, l, ph);
        return;
    case GOP_LAYERNORM:
    case GOP_GROUPNORM:
    case GOP_NORMALIZE:
    case GOP_PAD:
    case GOP_CROP:
    case GOP_RESIZE:
    case GOP_RESHAPE:
    case GOP_GMAXPOOL:
        ops_forward(c, l);
        return;
    case GOP_COUNT:
        return;
    }
}

static void lower_backward_ops(lower_ctx *c, int l);

/* elementwise's backward: one pass reads dY (and, for multiply, maximum
 * and minimum, every operand) and writes each operand's gradient that is
 * needed; subtract's first operand takes dY itself (aliased), as does
 * every operand of an add with the output's shape.  A per-channel operand's
 * gradient is a sum over the positions (one more operation an element),
 * all-reduced over the partition group when the output is split; a per-position
 * one's is a sum over the channels of each position (one more operation an
 * element too), local: its shard is the map's. */
static void lower_elemwise_bwd(lower_ctx *c, int l)
{
    const glayer *L = &c->g->layers[l];
    const int ph = PHASE_BWD;
    double ob = layout_out_bytes(c, l), oe = layout_out_elems(c, l);
    int reads_x = L->kind == GEW_MULTIPLY || L->kind == GEW_MAXIMUM ||
                  L->kind == GEW_MINIMUM;
    double in_b = ob, out_b = 0, ops = 1, bc_b = 0;
    for (int k = 0; k < L->n_in; k++) {
        int i = L->in[k];
        graph_ew_bc bc = graph_ew_broadcast(c->g, L, k);
        if (reads_x)
            in_b += bc == GEW_BC_CHANNEL ? layout_out_bytes(c, i)
                                         : layout_operand_bytes(c, l, i);
        if (!c->g->layers[i].needs_grad)
            continue;
        if (bc == GEW_BC_CHANNEL) {
            bc_b += layout_out_bytes(c, i);
            ops += 1;
        } else if (bc == GEW_BC_POSITION) {
            out_b += layout_operand_bytes(c, l, i);
            ops += 1;
        } else if (L->kind != GEW_ADD && !(L->kind == GEW_SUBTRACT && k == 0)) {
            out_b += layout_operand_bytes(c, l, i);
        }
        ops += L->kind == GEW_MULTIPLY   ? L->n_in - 1
               : L->kind == GEW_SUBTRACT ? (k > 0)
               : L->kind == GEW_ADD      ? 0
               : L->kind == GEW_AVERAGE  ? 1
                                         : 2; /* compare, select */
    }
    tile_pass(c, ph, l, in_b, out_b + bc_b, oe, ops);
    if (bc_b > 0 && layout_any_split(c, l))
        lower_emit(c, FW_ALLREDUCE, ph, l, (int64_t)(c->B * L->out.c * 4),
                   FW_GROUP_PARTITION, 0, 0);
}

static void lower_backward(lower_ctx *c, int l)
{
    double macs = c->mem->useful_macs;
    c->fx = FX_BWD;
    lower_backward_ops(c, l);
    c->fx = FX_NONE;
    if (lower_elsewhere(c, l, FW_MATMUL))
        c->mem->useful_macs = macs;
}

static void lower_backward_ops(lower_ctx *c, int l)
{
    const glayer *L = &c->g->layers[l];
    const int ph = PHASE_BWD;
    if (L->op == GOP_INPUT || !L->needs_grad)
        return; /* nothing at or below it trains: no gradient flows here */
    double ob = layout_out_bytes(c, l), oe = layout_out_elems(c, l);
    double ib = L->n_in ? layout_out_bytes(c, L->in[0]) : 0;
    /* Gradients from several consumers are summed first. */
    for (int k = 1; k < c->nconsumers[l]; k++)
        tile_pass_fx(c, FX_NONE, ph, l, 2 * ob, ob, oe, 1);
    /* The input needs no gradient: data, or a frozen prefix. */
    int input_is_data = L->n_in && !c->g->layers[L->in[0]].needs_grad;
    switch (L->op) {
    case GOP_CONV:
    case GOP_CONV_T:
    case GOP_DENSE:
        lower_matrix_layer(c, l, ph);
        return;
    case GOP_BATCHNORM:
        if (L->bn_moving) {
            /* Fixed statistics: dx = dy gamma / sigma, one pass; gamma
             * and beta, when they train, sum dy and dy xhat (partial sums
             * that join the weight gradients' all-reduce); beta alone
             * ("scale": false) sums dy only. */
            if (graph_layer_trains(c->g, l))
                tile_pass_fx(c, FX_BSTAT, ph, l, L->no_scale ? ob : 2 * ob, 0,
                             oe, L->no_scale ? 1 : 3);
            if (!input_is_data)
                tile_pass(c, ph, l, ob, ib, oe, 2);
            return;
        }
        /* Two reductions (sum dy, sum dy*xhat), all-reduced across the
         * partition group, then dx; a fused relu's mask is read too.
         * Without an input gradient only beta's sum of dy is needed when
         * there is no gamma ("scale": false), and nothing is exchanged. */
        if (input_is_data && L->no_scale) {
            tile_pass_fx(c, FX_BSTAT, ph, l, ob, 0, oe, 1);
            return;
        }
        /* reads dY and x; a fused relu's mask is read too, unless the
         * normalise was fused into its readers (then it is recomputed
         * from x) */
        tile_pass_fx(c, FX_BSTAT, ph, l,
                     2 * ob +
                         (c->relu_fused[l + 1 < c->g->n_layers ? l + 1 : l] &&
                                  fuse_materialised(c, l)
                              ? ob
                              : 0),
                     0, oe, 5);
        if (layout_any_split(c, l) || c->g->bn_group > 1)
            lower_emit(c, FW_ALLREDUCE, ph, l, 2 * L->out.c * 4,
                       c->g->bn_group > 1 ? FW_GROUP_BN : FW_GROUP_PARTITION,
                       0, 0);
        if (!input_is_data)
            tile_pass(c, ph, l, 2 * ob, ib, oe, 6);
        return;
    case GOP_RELU:
    case GOP_SIGMOID:
        if (c->relu_fused[l])
            return;
        tile_pass(c, ph, l, 2 * ob, ib, oe, 2);
        return;
    case GOP_ADD:
    case GOP_CONCAT:
        /* Each input's gradient is dY itself (aliased, no pass), or its
         * channels of dY.  A replicated operand that was sliced needs the
         * whole gradient: the group all-gathers dY (its channels). */
        for (int k = 0; k < L->n_in; k++) {
            const glayer *I = &c->g->layers[L->in[k]];
            if (!I->needs_grad || !layout_reshards(c, l, L->in[k]))
                continue;
            double full = layout_bytes(c, I->out.nsp, L->out.sp, I->out.c,
                                       L->dtype_bytes);
            lower_emit_fx(c, FX_DX, FW_ALLGATHER, ph, l, (int64_t)ceil(full), 0,
                          0, 0);
            if (L->op == GOP_ADD)
                break; /* one dY serves every operand */
        }
        return;
    case GOP_MAXPOOL:
    case GOP_AVGPOOL: {
        if (input_is_data)
            return;
        halo_t h;
        double win = 1;
        for (int d = 0; d < L->out.nsp; d++)
            win *= L->kernel[d];
        if (halo_bwd(c, l, L->in[0], &h))
            halo_exchange(c, ph, l, L->in[0], &h, 1);
        if (L->op == GOP_MAXPOOL && halo_pool_bwd(c, l, L->in[0], &h))
            halo_exchange(c, ph, l, L->in[0], &h, 2);
        /* Each window (output element) compares its inputs again for the
         * maximum, or scales dY, and adds into its inputs (win + 1); each
         * input element is zeroed or summed once.  Per input element that
         * is (win + 1) / (stride product) + 1 for a pooling without
         * overlap (2.25 for 2x2 stride 2), not win + 2: a 64x64 window's
         * gradient is ~2 operations an input, not 4098. */
        double ie_in = layout_out_elems(c, L->in[0]);
        tile_pass(c, ph, l, ob + (L->op == GOP_MAXPOOL ? ib + ob : 0), ib,
                  ie_in, ie_in > 0 ? oe * (win + 1) / ie_in + 1 : 0);
        return;
    }
    case GOP_UPSAMPLE:
        if (!input_is_data) {
            halo_t h;
            if (halo_bwd(c, l, L->in[0], &h))
                halo_exchange(c, ph, l, L->in[0], &h, 1);
            tile_pass(c, ph, l, ob, ib, oe, 1);
        }
        return;
    case GOP_DROPOUT:
        if (!input_is_data)
            tile_pass(c, ph, l, ob + oe / 8, ib, oe, 2);
        return;
    case GOP_GAP:
        if (!input_is_data)
            tile_pass(c, ph, l, ob, ib, layout_out_elems(c, L->in[0]), 1);
        return;
    case GOP_ELEMWISE:
        lower_elemwise_bwd(c, l);
        return;
    case GOP_ACT: {
        /* dX from dY and the saved output (gelu, swish, prelu: input);
         * prelu's slope gradient is a sum over the positions in the same
         * pass, a weight gradient like a convolution's (all-reduced with
         * the others; within the partition group too when
         * xla.dw_allreduce is on) */
        int dw = L->kind == GACT_PRELU && graph_layer_trains(c->g, l);
        if (input_is_data && !dw)
            return;
        tile_pass(c, ph, l, 2 * ob, input_is_data ? 0 : ib, oe,
                  (input_is_data ? 0 : graph_act_ops(L, 1)) + (dw ? 3 : 0));
        if (dw && c->hw->xla_dw_allreduce && layout_any_split(c, l))
            lower_emit(c, FW_ALLREDUCE, ph, l, L->weights * 4,
                       FW_GROUP_PARTITION, 0, 0);
        return;
    }
    case GOP_ROI_ALIGN:
        lower_roi(c, l, ph);
        return;
    case GOP_LAYERNORM:
    case GOP_GROUPNORM:
    case GOP_NORMALIZE:
    case GOP_PAD:
    case GOP_CROP:
    case GOP_RESIZE:
    case GOP_RESHAPE:
    case GOP_GMAXPOOL:
        ops_backward(c, l, input_is_data);
        return;
    case GOP_INPUT:
    case GOP_FLATTEN:
    case GOP_LOSS: /* its gradient came out of the forward pass */
    case GOP_COUNT:
        return;
    }
}

static void ctx_free(lower_ctx *c)
{
    free(c->nconsumers);
    free(c->relu_fused);
    free(c->remat);
    free(c->last_use);
    free(c->ends);
    free(c->kept_for);
    free(c->apply_t);
    free(c->gathered);
    free(c->pend);
    fw_program_free(&c->scratch);
    fw_program_free(&c->cand);
}

/* The optimizer's update (run.optimizer) after the gradient all-reduce,
 * over the wb bytes of fp32 trainable weights: one vector pass reading
 * the weights, their slots and the gradients and writing the weights and
 * slots back, as TensorFlow's fused apply ops do (ResourceApplyMomentum,
 * ResourceApplyAdam, ...).  LARS (tf.contrib.opt.LARSOptimizer, the MLPerf
 * ResNet-50 code) first takes ||w|| and ||g|| of each variable not in its
 * skip list (batch_normalization, bias: the conv and dense kernels), two
 * reductions each, then momentum's update with the scaled rate. */
static void lower_update(lower_ctx *c, double wb)
{
    const graph *g = c->g;
    /* per weight: fp32 tensors read (w, g and the slots), written (w and
     * the slots), vector operations */
    double rd = 3, wr = 2, ops = 4;
    switch (g->optimizer) {
    case GOPT_SGD: /* w -= lr g */
        rd = 2, wr = 1, ops = 2;
        break;
    case GOPT_ADAM: /* m, v; w -= lr' m / (sqrt(v) + eps) */
        rd = 4, wr = 3, ops = 12;
        break;
    case GOPT_RMSPROP: /* v (and m); w -= lr g / (sqrt(v) + eps) */
        rd = 3, wr = 2, ops = 9;
        if (g->opt_momentum > 0)
            rd = 4, wr = 3, ops = 11;
        break;
    case GOPT_LARS: /* g + wd w, times the scaled rate, then momentum's */
        ops = 7;
        for (int l = 0; l < g->n_layers; l++) {
            const glayer *L = &g->layers[l];
            if ((L->op != GOP_CONV && L->op != GOP_CONV_T &&
                 L->op != GOP_DENSE) ||
                L->share_from >= 0 || L->frozen || L->weights_no_grad)
                continue;
            double kb =
                (double)(L->weights - (L->use_bias ? L->filters : 0)) * 4;
            for (int t = 0; t < 2; t++) /* ||w||, then ||g|| */
                tile_pass_fx(c, FX_NONE, PHASE_UPDATE, -1, kb, 0, kb / 4, 2);
        }
        break;
    default:
        break;
    }
    tile_pass_fx(c, FX_UPDATE, PHASE_UPDATE, -1, rd * wb, wr * wb, wb / 4, ops);
}

tpu_status fw_lower(const graph *g, const plan *p, const tpu_params *hw,
                    int shard, const fw_pricer *pricer, fw_program *out,
                    fw_memory *mem, tpu_error *err)
{
    lower_ctx c = {0};
    c.g = g;
    c.p = p;
    c.hw = hw;
    TPU_ASSERT(pricer && pricer->price);
    c.pricer = pricer;
    plan_coords(p, shard, c.coords);
    c.shard = shard;
    c.prog = out;
    c.B = (double)p->batch;
    c.mem = mem;
    memset(mem, 0, sizeof *mem);
    fw_program_init(out);
    c.nconsumers = calloc((size_t)g->n_layers + 1, sizeof(int));
    c.relu_fused = calloc((size_t)g->n_layers + 1, 1);
    c.remat = calloc((size_t)g->n_layers + 1, 1);
    c.last_use = malloc(sizeof(int) * ((size_t)g->n_layers + 1));
    c.ends = malloc(sizeof(double) * ((size_t)g->n_layers + 1));
    c.kept_for = calloc((size_t)g->n_layers + 1, 1);
    c.gathered = calloc((size_t)g->n_layers + 1, 1);
    c.pend = malloc(sizeof(int) * ((size_t)g->n_layers + 1));
    if (!c.nconsumers || !c.relu_fused || !c.remat || !c.last_use || !c.ends ||
        !c.kept_for || !c.gathered || !c.pend) {
        ctx_free(&c);
        return tpu_fail(err, TPU_ERR_SYSTEM, "out of host memory (lowering)");
    }
    mem_mark_kept_for(&c);
    for (int l = 0; l < g->n_layers; l++)
        c.last_use[l] = -1;
    for (int l = 0; l < g->n_layers; l++) {
        const glayer *L = &g->layers[l];
        if (L->unused) /* removed from the step: reads nothing */
            continue;
        for (int k = 0; k < L->n_in; k++) {
            c.nconsumers[L->in[k]]++;
            c.last_use[L->in[k]] = l;
        }
    }
    if (fuse_plan(&c)) {
        ctx_free(&c);
        return tpu_fail(err, TPU_ERR_SYSTEM, "out of host memory (lowering)");
    }
    for (int l = 0; l < g->n_layers; l++)
        lower_forward(&c, l);
    if (g->train && hw->xla_remat)
        mem_choose_remat(&c);
    if (g->train) {
        /* The dropped activations listed by the backward layer that
         * recomputes them, in layer order: one pass, not one per layer. */
        int *head = malloc(sizeof(int) * ((size_t)g->n_layers + 1));
        int *next = malloc(sizeof(int) * ((size_t)g->n_layers + 1));
        if (!head || !next) {
            free(head);
            free(next);
            ctx_free(&c);
            fw_program_free(out);
            return tpu_fail(err, TPU_ERR_SYSTEM,
                            "out of host memory (lowering)");
        }
        for (int l = 0; l < g->n_layers; l++)
            head[l] = next[l] = -1;
        for (int l = g->n_layers - 1; l >= 0; l--)
            if (c.remat[l] && c.last_use[l] > l) {
                next[l] = head[c.last_use[l]];
                head[c.last_use[l]] = l;
            }
        for (int l = g->n_layers - 1; l >= 0; l--) {
            if (graph_core(&g->layers[l]) < 0)
                roi_flush(&c);
            mem_emit_recompute(&c, l, head, next);
            lower_backward(&c, l);
        }
        roi_flush(&c);
        free(head);
        free(next);
    }
    mem_account(&c);
    if (g->train && mem->grads_bytes > 0) {
        /* Only the trainable weights' gradients are all-reduced and
         * applied. */
        double wb = mem->grads_bytes;
        if (p->cores > 1)
            lower_emit(&c, FW_ALLREDUCE, PHASE_UPDATE, -1, (int64_t)wb,
                       FW_GROUP_ALL, 0, 0);
        lower_update(&c, wb);
    }
    lower_emit(&c, FW_WAIT_ST, g->train ? PHASE_UPDATE : PHASE_FWD, -1, 0, 0, 0,
               0);
    lower_emit(&c, FW_BARRIER, g->train ? PHASE_UPDATE : PHASE_FWD, -1, 0, 0, 0,
               0);
    ctx_free(&c);
    if (out->oom) {
        fw_program_free(out);
        return tpu_fail(err, TPU_ERR_SYSTEM, "out of host memory (firmware)");
    }
    return fw_validate(out, err);
}
