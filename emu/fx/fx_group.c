/* fx_group: the values of a grouped or depthwise convolution (conv with
 * "groups": G, docs/TRACE.md) in a --functional run (fx_internal.h).
 *
 * Definition: output channel f reads only the input channels of its group
 * g = f / (filters / G); the kernel is Keras's [taps][Cin / G][filters].
 * The lowering (firmware/lower.c gc_emit) emits one of three candidates
 * per part and marks its instructions (fw_insn.gconv); each is executed
 * as what it is:
 *
 *   1 dense: one product with the block-diagonal expanded filter, K =
 *     taps x Cin in the instruction's layout (folded or lane-padded per
 *     tap).  Only each group's real rows are multiplied, at the positions
 *     the expanded K gives them (fxm_mm's `off`): a zero of the expanded
 *     filter adds +0 to a sum that is never -0, which changes no value,
 *     while the 128-deep tiles group the fp32 sums where the expanded
 *     layout puts them.  The weight gradient is the dense X^T dY, of which
 *     the groups' blocks are kept (each entry is its own column of sums).
 *   2 per group: G products end to end along M (each group's rows padded
 *     to in->e / G), K = taps x Cin/G, N = filters/G.
 *   3 vector (depthwise, Cin/G = 1): the vector unit's multiply-adds, in
 *     tap order (input gradient: tap, then the group's outputs; weight
 *     gradient: positions in order), fp32 from +0, on the same bf16 (or,
 *     for an f32 layer, bf16_3x: (hi*hi + hi*lo) + lo*hi) operands as the
 *     MXU candidates, so that the candidates differ only in how fp32 sums
 *     are grouped.  Which order the hardware's lanes add in is [U].
 *
 * A row's value depends on the layer and the candidate, never on the
 * partitioning: forward products stay bit-identical across splits.
 */
#include <stdlib.h>
#include <string.h>

#include "emu/fx/fx_internal.h"
#include "mxu/bf16.h"

#define SP GRAPH_MAX_SP


typedef struct {
    const glayer *L;
    int64_t G, taps, cin, cout, cin_g, cout_g;
    int spatial;
} gq;

static void gq_of(const fx_state *x, int l, gq *q)
{
    const glayer *L = &x->g->layers[l];
    q->L = L;
    q->G = graph_groups(L);
    q->taps = fxt_kernel_taps(L);
    q->cin = x->g->layers[L->in[0]].out.c;
    q->cout = L->out.c;
    q->cin_g = q->cin / q->G;
    q->cout_g = q->cout / q->G;
    q->spatial = L->out.nsp;
}

/* Kernel element (tap t, channel j of the group, output co). */
static inline float gw(const gq *q, const float *W, int64_t t, int64_t j,
                       int64_t co)
{
    return W[(t * q->cin_g + j) * q->cout + co];
}

/* ---- the MXU candidates ------------------------------------------------ */

/* Forward (dx = 0) or input-gradient (dx = 1) rows of one instruction. */
static tpu_status g_rows(fx_state *x, int core, int l, const fw_insn *in,
                         int dx, tpu_error *err)
{
    fx_core *c = &x->cs[core];
    gq q;
    gq_of(x, l, &q);
    const glayer *L = q.L;
    int cand = in->gconv;
    if (cand != FW_GC_DENSE && cand != FW_GC_GROUPS)
        return tpu_fail(err, TPU_ERR_SYSTEM,
                        "internal: functional: layer '%s': a product of no "
                        "grouped-convolution candidate",
                        L->name);
    const fxt_tens *src;
    fxt_tens *dst;
    tpu_status rc;
    if ((rc = fxm_row_operands(x, core, l, dx, &src, &dst, err)))
        return rc;
    /* per group: K depth (gathered channels) and N width (produced ones) */
    int64_t dg = dx ? q.cout_g : q.cin_g, wg = dx ? q.cin_g : q.cout_g;
    int64_t dfull = dx ? q.cout : q.cin, width = dx ? q.cin : q.cout;
    int64_t depth = cand == FW_GC_DENSE ? dfull : dg;
    int64_t Rr = x->hw->mxu.rows;
    int64_t kp = in->kparts > 1 ? in->kparts : 1;
    /* the instruction's K: folded (slots = channels) or one lane-padded
     * slot per tap (as fx_mm.c's geom) */
    int64_t sw = (in->b == (q.taps * depth + kp - 1) / kp)
                     ? depth
                     : (depth + Rr - 1) / Rr * Rr;
    int64_t npos = fxt_npos(dst), real = dst->B * npos;
    int64_t r0, r1, n0, n1;
    fxm_next_tile(c, l, dx, in, cand == FW_GC_DENSE ? width : wg, &r0, &r1,
                  &n0, &n1);
    if (r0 >= r1 || n0 >= n1)
        return TPU_OK;
    /* the per-group candidate's rows: group g's at [g Mg, (g+1) Mg) */
    int64_t Mg = cand == FW_GC_GROUPS ? in->e / q.G : 0;
    if (cand == FW_GC_GROUPS && Mg < 1)
        return tpu_fail(err, TPU_ERR_SYSTEM,
                        "internal: functional: grouped rows");
    int64_t g0 = cand == FW_GC_DENSE ? n0 / wg : r0 / Mg;
    int64_t g1 = cand == FW_GC_DENSE ? (n1 - 1) / wg : (r1 - 1) / Mg;
    if (g1 >= q.G)
        g1 = q.G - 1;
    const float *W = fx_wts(x, l);
    int64_t kc = q.taps * dg, ex = fxt_example(src);
    fxt_taps tw;
    if ((rc = fxt_taps_init(&tw, L, q.spatial, dx, err)))
        return rc;
    for (int64_t g = g0; g <= g1 && !rc; g++) {
        /* local rows [ra, rb) and the group's columns [ca, cb) */
        int64_t ra, rb, ca, cb;
        if (cand == FW_GC_DENSE) {
            ra = r0;
            rb = r1;
            ca = n0 > g * wg ? n0 - g * wg : 0;
            cb = n1 < (g + 1) * wg ? n1 - g * wg : wg;
        } else {
            ra = r0 > g * Mg ? r0 - g * Mg : 0;
            rb = r1 < (g + 1) * Mg ? r1 - g * Mg : Mg;
            ca = n0;
            cb = n1;
        }
        /* a strided input gradient's row stands for s^d input rows (its
         * stride phases: lower.c) */
        int64_t per = fxt_rows_per(L, dx);
        ra *= per;
        rb *= per;
        if (rb > real)
            rb = real;
        if (ra >= rb || ca >= cb)
            continue;
        int64_t m = rb - ra, nn = cb - ca;
        float *A = fx_scratch(x, FX_SCR_A, m * kc);
        float *Bm = fx_scratch_raw(x, FX_SCR_B,
                                   sizeof(float) * (size_t)(kc * nn));
        float *C = fx_scratch_raw(x, FX_SCR_C, sizeof(float) * (size_t)(m * nn));
        if (!A || !Bm || !C) {
            rc = fx_oom(err);
            break;
        }
        for (int64_t t = 0; t < q.taps; t++)
            for (int64_t k = 0; k < dg; k++)
                for (int64_t j = 0; j < nn; j++)
                    Bm[(t * dg + k) * nn + j] =
                        dx ? gw(&q, W, t, ca + j, g * q.cout_g + k)
                           : gw(&q, W, t, k, g * q.cout_g + ca + j);
        for (int64_t r = ra; r < rb; r++) {
            int64_t b = r / npos, loc[SP], gp[SP];
            fxt_global(dst, r % npos, loc, gp);
            int miss = 0;
            if (fxt_taps_at(&tw, gp, src, 0, &miss) < 0) {
                rc = fx_missing(err, x, core, l,
                                dx ? "input gradient" : "forward", miss);
                break;
            }
            float *arow = &A[(r - ra) * kc];
            for (int64_t i = 0; i < tw.n; i++)
                if (tw.off[i] >= 0)
                    memcpy(&arow[tw.tap[i] * dg],
                           &src->v[b * ex + tw.off[i] + g * dg],
                           sizeof(float) * (size_t)dg);
        }
        if (rc ||
            (rc = fxm_mm(x, A, Bm, C, m, kc, nn, dg, sw,
                         cand == FW_GC_DENSE ? g * dg : 0, in->passes, err)))
            break;
        for (int64_t r = ra; r < rb; r++)
            for (int64_t j = 0; j < nn; j++) {
                int64_t ch = g * wg + ca + j;
                float v = C[(r - ra) * nn + j];
                float *o = &dst->v[r * width + ch];
                if (dx) {
                    *o += v;
                    continue;
                }
                if (L->use_bias)
                    v += W[q.taps * q.cin_g * q.cout + ch];
                *o = fxt_round(v, L->dtype_bytes);
            }
    }
    fxt_taps_free(&tw);
    return rc;
}

/* The weight gradient's rows of one instruction.  Dense: the instruction's
 * rows map in proportion onto the expanded kernel's taps x Cin rows (as
 * fxm_dw), columns are filters; per group: onto the groups' taps x Cin/G
 * rows laid end to end, columns are one group's filters. */
static tpu_status g_dw(fx_state *x, int core, int l, const fw_insn *in,
                       tpu_error *err)
{
    fx_core *c = &x->cs[core];
    gq q;
    gq_of(x, l, &q);
    const glayer *L = q.L;
    int cand = in->gconv;
    if (cand != FW_GC_DENSE && cand != FW_GC_GROUPS)
        return tpu_fail(err, TPU_ERR_SYSTEM,
                        "internal: functional: layer '%s': a weight gradient "
                        "of no grouped-convolution candidate",
                        L->name);
    const fxt_tens *win;
    fxt_tens *gy;
    float *wg;
    tpu_status rc;
    if ((rc = fx_dy_of(x, core, l, &gy, err)) ||
        (rc = fx_dwin_of(x, core, l, &win, err)) ||
        (rc = fx_wgrad_of(x, core, l, &wg, err)))
        return rc;
    int dense = cand == FW_GC_DENSE;
    int64_t R = q.taps * q.cin, npos = fxt_npos(gy), Mc = gy->B * npos;
    int64_t ntot = dense ? q.cout : q.cout_g;
    int64_t r0, r1, n0, n1;
    fxm_next_tile(c, l, 2, in, ntot, &r0, &r1, &n0, &n1);
    int64_t e = in->e > 0 ? in->e : 1;
    int64_t k0 = r0 * R / e, k1 = (r1 >= e ? R : r1 * R / e);
    if (n0 < n1 && r0 == 0 && L->use_bias) {
        /* the bias gradient: dY summed over rows, on the vector unit;
         * per group, every group's share of these columns */
        float *bg = &wg[q.taps * q.cin_g * q.cout];
        for (int64_t g = 0; g < (dense ? 1 : q.G); g++)
            for (int64_t j = n0; j < n1; j++) {
                int64_t co = dense ? j : g * q.cout_g + j;
                float s = 0.0f;
                for (int64_t mm = 0; mm < Mc; mm++)
                    s += gy->v[mm * q.cout + co];
                bg[co] += s;
            }
    }
    if (k0 >= k1 || n0 >= n1 || Mc == 0)
        return TPU_OK;
    /* K rows [k0, k1) as (group, tap, channel) runs: dense rows are
     * t x Cin + ci; per-group rows (g x taps + t) x Cin/G + j */
    int64_t run = dense ? q.cin : q.cin_g;
    int64_t nn = n1 - n0;
    int64_t G_lo = dense ? 0 : k0 / (q.taps * q.cin_g);
    int64_t G_hi = dense ? 0 : (k1 - 1) / (q.taps * q.cin_g);
    fxt_taps tw;
    if ((rc = fxt_taps_init(&tw, L, q.spatial, 0, err)))
        return rc;
    int64_t ex = fxt_example(win);
    for (int64_t g = G_lo; g <= G_hi && !rc; g++) {
        /* this pass's rows and the dY columns they meet */
        int64_t base = dense ? 0 : g * q.taps * q.cin_g;
        int64_t a0 = k0 > base ? k0 : base;
        int64_t a1 = dense ? k1
                           : (k1 < base + q.taps * q.cin_g
                                  ? k1
                                  : base + q.taps * q.cin_g);
        int64_t mrows = a1 - a0;
        if (mrows <= 0)
            continue;
        float *A = fx_scratch(x, FX_SCR_A, mrows * Mc);
        float *Bm = fx_scratch_raw(x, FX_SCR_B,
                                   sizeof(float) * (size_t)(Mc * nn));
        float *C = fx_scratch_raw(x, FX_SCR_C,
                                  sizeof(float) * (size_t)(mrows * nn));
        if (!A || !Bm || !C) {
            rc = fx_oom(err);
            break;
        }
        int64_t col0 = dense ? n0 : g * q.cout_g + n0;
        for (int64_t mm = 0; mm < Mc; mm++)
            for (int64_t j = 0; j < nn; j++)
                Bm[mm * nn + j] = gy->v[mm * q.cout + col0 + j];
        int64_t ta = (a0 - base) / run, tb = (a1 - base + run - 1) / run;
        for (int64_t mm = 0; mm < Mc && !rc; mm++) {
            int64_t b = mm / npos, loc[SP], og[SP];
            fxt_global(gy, mm % npos, loc, og);
            int miss = 0;
            if (fxt_taps_range(&tw, og, win, 0, ta, tb, &miss) < 0) {
                rc = fx_missing(err, x, core, l, "weight gradient", miss);
                break;
            }
            for (int64_t i = 0; i < tw.n; i++) {
                if (tw.off[i] < 0)
                    continue;
                int64_t t = tw.tap[i], rt = base + t * run;
                int64_t c0 = rt < a0 ? a0 - rt : 0;
                int64_t c1 = rt + run > a1 ? a1 - rt : run;
                const float *row =
                    &win->v[b * ex + tw.off[i] + (dense ? 0 : g * q.cin_g)];
                for (int64_t ci = c0; ci < c1; ci++)
                    A[(rt + ci - a0) * Mc + mm] = row[ci];
            }
        }
        if (rc ||
            (rc = fxm_mm(x, A, Bm, C, mrows, Mc, nn, Mc, Mc, 0, in->passes,
                         err)))
            break;
        for (int64_t k = a0; k < a1; k++) {
            int64_t t = (k - base) / run, ci = (k - base) % run;
            for (int64_t j = 0; j < nn; j++) {
                int64_t co = col0 + j, gg = dense ? ci / q.cin_g : g;
                /* dense: the expanded gradient's entries outside the
                 * groups' blocks are dropped */
                if (dense && co / q.cout_g != gg)
                    continue;
                int64_t jj = dense ? ci - gg * q.cin_g : ci;
                wg[(t * q.cin_g + jj) * q.cout + co] += C[(k - a0) * nn + j];
            }
        }
    }
    fxt_taps_free(&tw);
    return rc;
}

/* ---- the vector candidate (depthwise) ---------------------------------- */

/* bf16_3x parts of v (hi, lo); lo is 0 for bf16 operands. */
static inline void split3(float v, float *hi, float *lo)
{
    *hi = bf16_to_f32(bf16_from_f32(v));
    *lo = bf16_to_f32(bf16_from_f32(v - *hi));
}

/* A running multiply-add of bf16 operands (three of them for bf16_3x). */
typedef struct {
    float hh, hl, lh;
} acc3;

static inline void madd(acc3 *s, float a, float b, int passes)
{
    float ah, al, bh, bl;
    split3(a, &ah, &al);
    split3(b, &bh, &bl);
    s->hh += ah * bh;
    if (passes == 3) {
        s->hl += ah * bl;
        s->lh += al * bh;
    }
}

static inline float acc_val(const acc3 *s, int passes)
{
    return passes == 3 ? (s->hh + s->hl) + s->lh : s->hh;
}

static tpu_status v_forward(fx_state *x, int core, int l, tpu_error *err)
{
    gq q;
    gq_of(x, l, &q);
    const glayer *L = q.L;
    int passes = L->dtype_bytes == 4 ? 3 : 1;
    const fxt_tens *src;
    fxt_tens *dst;
    tpu_status rc;
    if ((rc = fx_new_act(x, core, l, &dst, err)) ||
        (rc = fx_fwin_of(x, core, l, &src, err)))
        return rc;
    const float *W = fx_wts(x, l);
    int64_t npos = fxt_npos(dst), ex = fxt_example(src);
    fxt_taps tw;
    if ((rc = fxt_taps_init(&tw, L, q.spatial, 0, err)))
        return rc;
    for (int64_t r = 0; r < dst->B * npos && !rc; r++) {
        int64_t b = r / npos, loc[SP], gp[SP];
        fxt_global(dst, r % npos, loc, gp);
        int miss = 0;
        if (fxt_taps_at(&tw, gp, src, 1, &miss) < 0) {
            rc = fx_missing(err, x, core, l, "forward", miss);
            break;
        }
        for (int64_t co = 0; co < q.cout; co++) {
            int64_t g = co / q.cout_g;
            acc3 s = {0.0f, 0.0f, 0.0f};
            for (int64_t i = 0; i < tw.n; i++)
                if (tw.off[i] >= 0)
                    madd(&s, src->v[b * ex + tw.off[i] + g],
                         gw(&q, W, tw.tap[i], 0, co), passes);
            float v = acc_val(&s, passes);
            if (L->use_bias)
                v += W[q.taps * q.cout + co];
            dst->v[r * q.cout + co] = fxt_round(v, L->dtype_bytes);
        }
    }
    fxt_taps_free(&tw);
    return rc;
}

static tpu_status v_dx(fx_state *x, int core, int l, tpu_error *err)
{
    gq q;
    gq_of(x, l, &q);
    const glayer *L = q.L;
    int passes = L->dtype_bytes == 4 ? 3 : 1;
    const fxt_tens *src;
    fxt_tens *dst;
    tpu_status rc;
    if ((rc = fx_gwin_of(x, core, l, &src, err)) ||
        (rc = fx_grad_of(x, core, L->in[0], &dst, err)))
        return rc;
    const float *W = fx_wts(x, l);
    int64_t npos = fxt_npos(dst), ex = fxt_example(src);
    fxt_taps tw;
    if ((rc = fxt_taps_init(&tw, L, q.spatial, 1, err)))
        return rc;
    for (int64_t r = 0; r < dst->B * npos && !rc; r++) {
        int64_t b = r / npos, loc[SP], gp[SP];
        fxt_global(dst, r % npos, loc, gp);
        int miss = 0;
        if (fxt_taps_at(&tw, gp, src, 1, &miss) < 0) {
            rc = fx_missing(err, x, core, l, "input gradient", miss);
            break;
        }
        for (int64_t ci = 0; ci < q.cin; ci++) {
            acc3 s = {0.0f, 0.0f, 0.0f};
            for (int64_t i = 0; i < tw.n; i++) {
                if (tw.off[i] < 0)
                    continue;
                for (int64_t k = 0; k < q.cout_g; k++) {
                    int64_t co = ci * q.cout_g + k;
                    madd(&s, src->v[b * ex + tw.off[i] + co],
                         gw(&q, W, tw.tap[i], 0, co), passes);
                }
            }
            dst->v[r * q.cin + ci] += acc_val(&s, passes);
        }
    }
    fxt_taps_free(&tw);
    return rc;
}

static tpu_status v_dw(fx_state *x, int core, int l, tpu_error *err)
{
    gq q;
    gq_of(x, l, &q);
    const glayer *L = q.L;
    int passes = L->dtype_bytes == 4 ? 3 : 1;
    const fxt_tens *win;
    fxt_tens *gy;
    float *wg;
    tpu_status rc;
    if ((rc = fx_dy_of(x, core, l, &gy, err)) ||
        (rc = fx_dwin_of(x, core, l, &win, err)) ||
        (rc = fx_wgrad_of(x, core, l, &wg, err)))
        return rc;
    int64_t npos = fxt_npos(gy), Mc = gy->B * npos, ex = fxt_example(win);
    int64_t nk = q.taps * q.cout;
    if (L->use_bias)
        for (int64_t co = 0; co < q.cout; co++) {
            float s = 0.0f;
            for (int64_t mm = 0; mm < Mc; mm++)
                s += gy->v[mm * q.cout + co];
            wg[nk + co] += s;
        }
    acc3 *s = calloc((size_t)nk + 1, sizeof *s);
    if (!s)
        return fx_oom(err);
    fxt_taps tw;
    if ((rc = fxt_taps_init(&tw, L, q.spatial, 0, err))) {
        free(s);
        return rc;
    }
    for (int64_t mm = 0; mm < Mc && !rc; mm++) {
        int64_t b = mm / npos, loc[SP], og[SP];
        fxt_global(gy, mm % npos, loc, og);
        int miss = 0;
        if (fxt_taps_at(&tw, og, win, 1, &miss) < 0) {
            rc = fx_missing(err, x, core, l, "weight gradient", miss);
            break;
        }
        for (int64_t i = 0; i < tw.n; i++) {
            if (tw.off[i] < 0)
                continue;
            int64_t t = tw.tap[i];
            for (int64_t co = 0; co < q.cout; co++)
                madd(&s[t * q.cout + co],
                     win->v[b * ex + tw.off[i] + co / q.cout_g],
                     gy->v[mm * q.cout + co], passes);
        }
    }
    fxt_taps_free(&tw);
    if (!rc && Mc > 0)
        for (int64_t i = 0; i < nk; i++)
            wg[i] += acc_val(&s[i], passes);
    free(s);
    return rc;
}

/* ---- dispatch ---------------------------------------------------------- */

tpu_status fxg_exec(fx_state *x, int core, int l, const fw_insn *in,
                    tpu_error *err)
{
    if (in->op == FW_MATMUL) {
        switch (in->fx) {
        case FX_FWD:
            return g_rows(x, core, l, in, 0, err);
        case FX_DX:
            return g_rows(x, core, l, in, 1, err);
        case FX_DW:
            return g_dw(x, core, l, in, err);
        default:
            return TPU_OK;
        }
    }
    if (in->op != FW_VEC || in->gconv != FW_GC_VECTOR)
        return TPU_OK;
    /* The vector pass: the whole part on the pass's first tile. */
    uint8_t bit = in->fx == FX_FWD ? 1 : in->fx == FX_DX ? 2
                                       : in->fx == FX_DW ? 4 : 0;
    uint8_t *done = &x->cs[core].done_gv[l];
    if (!bit || (*done & bit))
        return TPU_OK;
    *done |= bit;
    return bit == 1 ? v_forward(x, core, l, err)
           : bit == 2 ? v_dx(x, core, l, err)
                      : v_dw(x, core, l, err);
}
