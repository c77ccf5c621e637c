/* gconv — a grouped convolution's candidate lowerings, and the choice.
 *
 * How the TPU compiler lowers feature_group_count > 1 is not public [U].
 * XLA's ConvolutionGroupConverter (openxla/xla
 * convolution_group_converter.cc) rewrites it into ordinary convolutions,
 * either by expanding the filter into a dense block-diagonal one (zeros
 * outside the groups: one convolution, G x the MACs) or by slicing the
 * operands into one convolution per group; a backend that handles
 * depthwise convolutions itself keeps them, and with a single channel per
 * group there is too little reuse for the MXU, so the vector unit is the
 * natural place.  tpuemu prices each candidate's instructions with the
 * lowering's pricer (the engine's timing, as the tile search does) and
 * keeps the fastest;
 * xla.group_conv forces one:
 *   FW_GC_DENSE (1) the expanded filter on the MXU: K = taps x Cin, N =
 *             filters, the block-diagonal filter built (and, for the
 *             weight gradient, the blocks taken back out) by a vector pass;
 *   FW_GC_GROUPS (2) one product per group, laid end to end on the MXU: K =
 *             taps x Cin/G, N = filters/G, each padded to whole MXU tiles
 *             (a group's M rows stream against its own weight tiles, whose
 *             load hides behind the previous group's rows);
 *   FW_GC_VECTOR (3) depthwise only (Cin/G = 1): a vector-unit pass of taps
 *             multiply-adds per output element (vpu.madd_ops each).
 * Forward, input gradient and weight gradient choose separately.  The
 * halo exchanges are the window's, as for any convolution, and are
 * emitted once, outside the candidates. */
#include "firmware/lower_internal.h"

/* One candidate's compute for one part (0 forward, 1 input gradient, 2
 * weight gradient) into c->prog, with the functional tag of the part. */
static void emit_part(lower_ctx *c, int phase, const gconv *q, int part,
                      int cand);

/* emit_part, its instructions marked with the candidate (fw_insn.gconv:
 * --functional reads the products' layout from it; the timing does not). */
void gconv_emit(lower_ctx *c, int phase, const gconv *q, int part, int cand)
{
    size_t from = c->prog->n;
    emit_part(c, phase, q, part, cand);
    if (!c->prog->oom)
        for (size_t k = from; k < c->prog->n; k++)
            c->prog->code[k].gconv = (uint8_t)cand;
}

static void emit_part(lower_ctx *c, int phase, const gconv *q, int part,
                      int cand)
{
    const glayer *L = &c->g->layers[q->l];
    int64_t lane = c->hw->lane_pad, rows = c->hw->mxu.rows;
    int fx = part == 0 ? FX_FWD : part == 1 ? FX_DX : FX_DW;
    /* the compact filter's elements: its owner's when it is shared (a
     * sharer counts none of its own, but reads and forms them all) */
    double nw = (double)(L->share_from >= 0
                             ? c->g->layers[L->share_from].weights
                             : L->weights);
    double wcompact = nw * q->wbytes_el;
    if (cand == FW_GC_VECTOR) {
        /* Elements the vector unit produces: the output (forward, weight
         * gradient's products) or the input gradient, counted as every
         * other vector pass counts them (layout_out_elems: the stored
         * layout's elements).  The small-batch rule pads a convolution's
         * MXU operands (batch to 8, each tap's features to the lanes) and
         * does not apply here: it would make a 3-channel depthwise stem at
         * one example per core 341x its elements, while the batchnorm
         * beside it pays for 3. */
        int64_t ch = part == 1 ? q->cin : q->cout;
        double rws = part == 1 ? q->in_rows : q->m_rows;
        double el = rws * (double)ch;
        double mult = (double)(q->cout / q->G); /* outputs per input channel */
        double madd = c->hw->vpu_madd_ops;
        if (part == 0)
            tile_pass_fx(c, fx, phase, q->l, q->in_b, q->o_b, el,
                         madd * (double)q->taps + 3 +
                             q->apply * (double)q->taps);
        else if (part == 1)
            /* an input element takes its stride phase's taps: taps / s^d
             * on average (a 1x1 stride-2 phase has one or none) */
            tile_pass_fx(c, fx, phase, q->l, q->o_b, q->in_nohalo, el,
                         madd * (double)q->taps / (double)q->sprod * mult + 1);
        else
            /* dW[t, c] += x(window) dY: taps multiply-adds per output
             * element into fp32 partial sums, reduced and stored once */
            tile_pass_fx(c, fx, phase, q->l, q->in_b + q->o_b,
                         nw * 4, el,
                         madd * (double)q->taps + q->apply * (double)q->taps);
        return;
    }
    int keep = c->fx;
    if (cand == FW_GC_DENSE) {
        int fold;
        double dense_w = (double)q->taps * (double)q->cin * (double)q->cout;
        if (part == 0) {
            int64_t K = layout_tap_k(c, L, q->k_taps, q->cin, &fold);
            double npad = (double)rup(q->cout, lane);
            double epi = npad * ((double)cdiv(K, rows) - 1 + 3) +
                         (fold ? (double)K : 0) + q->apply * (double)K;
            /* the block-diagonal filter: a select of the compact filter
             * against the group mask (timing only) */
            tile_pass_fx(c, FX_NONE, phase, q->l, wcompact,
                         dense_w * q->wbytes_el, dense_w, 1);
            c->fx = fx;
            tile_matmul(c, phase, q->l, q->M, K, q->cout,
                        q->in_b / (double)q->M, q->o_b / (double)q->M,
                        (double)q->taps * (double)q->cin * npad * q->wbytes_el,
                        npad * 4, epi, q->passes);
        } else if (part == 1) {
            /* stride phases as the ordinary input gradient's
             * (lower_matrix_layer) */
            int64_t Mdx = cdiv(q->Min, q->sprod);
            int64_t Kdx = layout_tap_k(c, L, q->taps, q->cout, &fold);
            double ep =
                (double)rup(q->cin, lane) * ((double)cdiv(Kdx, rows) + 1) +
                (fold ? (double)Kdx : 0);
            tile_pass_fx(c, FX_NONE, phase, q->l, wcompact,
                         dense_w * q->wbytes_el, dense_w, 1);
            c->fx = fx;
            tile_matmul(c, phase, q->l, Mdx, Kdx, q->cin, q->o_b / (double)Mdx,
                        q->in_nohalo / (double)Mdx,
                        (double)q->taps * (double)q->cin *
                            (double)rup(q->cout, lane) * q->wbytes_el,
                        (double)rup(q->cin, lane) * 4, ep, q->passes);
        } else {
            int64_t K = layout_tap_k(c, L, q->k_taps, q->cin, &fold);
            c->fx = fx;
            tile_dw(c, phase, q->l, K, q->M, q->cout, q->in_b, q->o_b,
                    (double)rup(q->cout, lane), q->apply, q->passes);
            c->fx = FX_NONE;
            /* the groups' blocks taken out of the dense fp32 gradient */
            tile_pass_fx(c, FX_NONE, phase, q->l, dense_w * 4,
                         nw * 4, dense_w, 1);
        }
        c->fx = keep;
        return;
    }
    /* FW_GC_GROUPS: G products of one group's shape, end to end: G x the
     * rows (at least the array's rows each: a shorter group leaves the
     * array's pipeline as idle as a full tile would).  One group's weights
     * are resident at a time; the others' stream in with the rows, each
     * group's while the previous group's rows go through.  (Counting every
     * group's weights as one resident block would make the VMEM planner
     * cut a 2^15-group product of N = 2 into 8-row tiles and K parts, 17x
     * the cost per channel of 2^14 groups.) */
    int fold;
    int64_t G = q->G;
    c->fx = fx;
    if (part == 0) {
        int64_t K = layout_tap_k(c, L, q->k_taps, q->cin_g, &fold);
        int64_t m = G * max64(q->M, rows);
        double npad = (double)rup(q->cout_g, lane);
        double epi = (double)q->M * G *
                     (npad * ((double)cdiv(K, rows) - 1 + 3) +
                      (fold ? (double)K : 0) + q->apply * (double)K);
        double gw = (double)q->taps * (double)q->cin_g * npad * q->wbytes_el;
        tile_matmul(c, phase, q->l, m, K, q->cout_g,
                    (q->in_b + (double)(G - 1) * gw) / (double)m,
                    q->o_b / (double)m, gw, npad * 4, epi / (double)m,
                    q->passes);
    } else if (part == 1) {
        int64_t Mdx = cdiv(q->Min, q->sprod);
        int64_t Kdx = layout_tap_k(c, L, q->taps, q->cout_g, &fold);
        int64_t m = G * max64(Mdx, rows);
        double ep =
            (double)Mdx * G *
            ((double)rup(q->cin_g, lane) * ((double)cdiv(Kdx, rows) + 1) +
             (fold ? (double)Kdx : 0));
        double gw = (double)q->taps * (double)q->cin_g *
                    (double)rup(q->cout_g, lane) * q->wbytes_el;
        tile_matmul(c, phase, q->l, m, Kdx, q->cin_g,
                    (q->o_b + (double)(G - 1) * gw) / (double)m,
                    q->in_nohalo / (double)m, gw,
                    (double)rup(q->cin_g, lane) * 4, ep / (double)m, q->passes);
    } else {
        int64_t K = layout_tap_k(c, L, q->k_taps, q->cin_g, &fold);
        tile_dw(c, phase, q->l, G * K, q->M, q->cout_g, q->in_b, q->o_b,
                (double)rup(q->cout_g, lane), q->apply, q->passes);
    }
    c->fx = keep;
}

/* The candidate a part takes: the forced one (xla.group_conv; the vector
 * pass only where a group has one channel, else the fastest of the MXU
 * ones), or the one the pricer finds fastest, ties to the lower number. */
int gconv_pick(lower_ctx *c, int phase, const gconv *q, int part)
{
    int forced = c->hw->xla_group_conv, vec_ok = q->cin_g == 1;
    if (forced == FW_GC_DENSE || forced == FW_GC_GROUPS ||
        (forced == FW_GC_VECTOR && vec_ok))
        return forced;
    int best = FW_GC_DENSE;
    double best_ps = -1;
    for (int cand = FW_GC_DENSE; cand <= FW_GC_VECTOR; cand++) {
        if (cand == FW_GC_VECTOR && !vec_ok)
            continue;
        fw_program *keep = c->prog;
        c->cand.n = 0;
        c->prog = &c->cand;
        gconv_emit(c, phase, q, part, cand);
        c->prog = keep;
        if (c->cand.oom) {
            c->cand.oom = 0;
            continue;
        }
        double ps = (double)c->pricer->price(c->pricer->ctx, &c->cand);
        if (best_ps < 0 || ps < best_ps) {
            best_ps = ps;
            best = cand;
        }
    }
    return best;
}
