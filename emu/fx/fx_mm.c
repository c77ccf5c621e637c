/* fx_mm: the matrix products of a --functional run (fx_internal.h):
 * im2col rows of a core's window times the weights, on the MXU model, one
 * matmul instruction's tile at a time. */
#include <stdlib.h>
#include <string.h>

#include "emu/fx/fx_internal.h"
#include "mxu/bf16.h"
#include "mxu/mxu.h"

#define SP GRAPH_MAX_SP

/* One MXU product: the fast model, or (fx_config.pe_model) the
 * cycle-by-cycle PE model, which gives the same bits (test_mxu proves it
 * on random shapes; test_functional on whole runs). */
static tpu_status mxu_product(const fx_state *x, const bf16 *a, const bf16 *b,
                              float *c, int64_t m, int64_t k, int64_t n,
                              tpu_error *err)
{
    if (x->cfg.pe_model)
        return mxu_pe_matmul(&x->hw->mxu, a, b, c, m, k, n, NULL, err);
    mxu_fast_matmul(&x->hw->mxu, a, b, c, m, k, n, NULL);
    return TPU_OK;
}

/* One bf16 product on the MXU model, C = A B with fp32 accumulation.  A
 * and B hold only the real rows of K (kc of them, compact); on the MXU, K
 * is laid out in slots `sw` wide of which the `depth` rows from `off` on
 * are real and the rest lane padding or, for a grouped convolution's
 * expanded filter, the other groups' zeros (fx_group.c).  A padded row adds +0 to a column sum,
 * which changes no value (the sum starts at +0 and is never -0), and a K
 * tile of padding adds a +0 partial; so each weight tile's real rows are
 * multiplied on their own (one tile: c = its partial sum) and the
 * partials are added in tile order, as the MXU does: the bits of the
 * padded product, without storing or multiplying the padding. */
static tpu_status mm_bf16(fx_state *x, const bf16 *a, const bf16 *b,
                          float *cres, int64_t m, int64_t kc, int64_t n,
                          int64_t depth, int64_t sw, int64_t off,
                          tpu_error *err)
{
    int64_t R = x->hw->mxu.rows;
    if (depth >= sw && off == 0)
        return mxu_product(x, a, b, cres, m, kc, n, err);
    bf16 *as = fx_scratch_raw(x, FX_SCR_TILE_A, sizeof(bf16) * (size_t)(m * R));
    float *t = fx_scratch_raw(x, FX_SCR_TILE_T, sizeof(float) * (size_t)(m * n));
    tpu_status rc = TPU_OK;
    int first = 1;
    if (!as || !t)
        return fx_oom(err);
    for (int64_t q0 = 0; q0 < kc;) {
        /* the compact rows [q0, q1) that share one padded K tile */
        int64_t tile = ((q0 / depth) * sw + off + q0 % depth) / R,
                q1 = q0 + 1;
        while (q1 < kc && ((q1 / depth) * sw + off + q1 % depth) / R == tile)
            q1++;
        int64_t nr = q1 - q0;
        for (int64_t i = 0; i < m; i++)
            memcpy(&as[i * nr], &a[i * kc + q0], sizeof(bf16) * (size_t)nr);
        if ((rc = mxu_product(x, as, &b[q0 * n], first ? cres : t, m, nr, n,
                              err)))
            return rc;
        if (!first)
            for (int64_t i = 0; i < m * n; i++)
                cres[i] += t[i];
        first = 0;
        q0 = q1;
    }
    if (first)
        memset(cres, 0, sizeof(float) * (size_t)(m * n));
    return rc;
}

/* C[m x n] = A[m x kc] B[kc x n] on the MXU (kc compact K rows, laid out
 * on the MXU as mm_bf16 says): operands rounded to bf16; with passes == 3
 * (f32 layers, bf16_3x) each operand is split into a bf16 high and low
 * part and the three significant products, each a whole MXU product, are
 * summed on the vector unit: (hi*hi + hi*lo) + lo*hi. */
tpu_status fxm_mm(fx_state *x, const float *a, const float *b, float *cres,
                  int64_t m, int64_t kc, int64_t n, int64_t depth, int64_t sw,
                  int64_t off, int passes, tpu_error *err)
{
    size_t na = (size_t)(m * kc), nb = (size_t)(kc * n), nc = (size_t)(m * n);
    /* The operands' bf16 parts live in scratch buffers: fresh megabytes
     * per instruction cost more in page faults than the conversions. */
    bf16 *ah = fx_scratch_raw(x, FX_SCR_AH, na * sizeof(bf16)),
         *bh = fx_scratch_raw(x, FX_SCR_BH, nb * sizeof(bf16));
    tpu_status rc;
    if (!ah || !bh)
        return fx_oom(err);
    for (size_t i = 0; i < na; i++)
        ah[i] = bf16_from_f32(a[i]);
    for (size_t i = 0; i < nb; i++)
        bh[i] = bf16_from_f32(b[i]);
    if ((rc = mm_bf16(x, ah, bh, cres, m, kc, n, depth, sw, off, err)))
        return rc;
    if (passes == 3) {
        bf16 *al = fx_scratch_raw(x, FX_SCR_AL, na * sizeof(bf16)),
             *bl = fx_scratch_raw(x, FX_SCR_BL, nb * sizeof(bf16));
        float *t = fx_scratch_raw(x, FX_SCR_T, nc * sizeof(float));
        if (!al || !bl || !t)
            return fx_oom(err);
        for (size_t i = 0; i < na; i++)
            al[i] = bf16_from_f32(a[i] - bf16_to_f32(ah[i]));
        for (size_t i = 0; i < nb; i++)
            bl[i] = bf16_from_f32(b[i] - bf16_to_f32(bh[i]));
        if ((rc = mm_bf16(x, ah, bl, t, m, kc, n, depth, sw, off, err)))
            return rc;
        for (size_t i = 0; i < nc; i++)
            cres[i] += t[i];
        if ((rc = mm_bf16(x, al, bh, t, m, kc, n, depth, sw, off, err)))
            return rc;
        for (size_t i = 0; i < nc; i++)
            cres[i] += t[i];
    }
    return TPU_OK;
}

/* The rows [*r0, *r1) and columns [*n0, *n1) the next matmul instruction
 * of this kind covers: tiles walk the product's M rows (in->e), then the
 * next N chunk (lower.c's emit_matmul).  Rows past the real ones are
 * padding (XLA's padded batch): they hold zeros and their results are
 * dropped. */
void fxm_next_tile(fx_core *c, int l, int kind, const fw_insn *in,
                   int64_t total_n, int64_t *r0, int64_t *r1, int64_t *n0,
                   int64_t *n1)
{
    int64_t *cur = &c->cur[l * 3 + kind], *ch = &c->chunk[l * 3 + kind];
    *r0 = *cur;
    *r1 = *cur + in->a;
    *n0 = *ch;
    *n1 = *n0 + in->c < total_n ? *n0 + in->c : total_n;
    *cur += in->a;
    if (*cur >= in->e) {
        /* the next N chunk starts after this one's columns (a ragged last
         * chunk is narrower) */
        *cur = 0;
        *ch += in->c;
    }
}

typedef struct {
    int64_t taps, cin, cout, sw, depth;
    int spatial; /* dims a tap offsets (0: dense) */
} mm_geom;

/* K layout of a product: one slot per kernel tap, `sw` wide (the input
 * features, or padded to the MXU depth when the lowering did not fold the
 * taps into K: the instruction's K says which).  A transposed conv keeps
 * every tap's slot and fills the taps a stride phase skips with zeros. */
static tpu_status geom(const fx_state *x, int l, const fw_insn *in, int dx,
                       mm_geom *gm, tpu_error *err)
{
    const glayer *L = &x->g->layers[l], *I = &x->g->layers[L->in[0]];
    int64_t rows = x->hw->mxu.rows;
    gm->taps = fxt_kernel_taps(L);
    gm->cin = I->out.c;
    gm->cout = L->out.c;
    gm->spatial = L->op == GOP_DENSE ? 0 : L->out.nsp;
    int64_t depth = dx ? gm->cout : gm->cin;
    int64_t kt = gm->taps;
    if (L->op == GOP_CONV_T && !dx && gm->taps % fxt_stride_prod(L) == 0)
        kt = gm->taps / fxt_stride_prod(L); /* even stride phases: lower.c */
    gm->depth = depth;
    /* with K cut into parts (lower.c), b is the first part's slice */
    int64_t kp = in->kparts > 1 ? in->kparts : 1;
    gm->sw = (in->b == (kt * depth + kp - 1) / kp)
                 ? depth
                 : (depth + rows - 1) / rows * rows;
    if (gm->sw < depth)
        return tpu_fail(err, TPU_ERR_SYSTEM, "internal: functional: K layout");
    return TPU_OK;
}

/* The forward product (dx = 0: rows are this core's output positions,
 * gathered from the input window, times W[t][ci][n]) and the input
 * gradient (dx = 1: rows are its input positions, gathered from the output
 * gradient's window, times W[t][n][co]).  One instruction's tile. */
tpu_status fxm_row_operands(fx_state *x, int core, int l, int dx,
                            const fxt_tens **src, fxt_tens **dst,
                            tpu_error *err)
{
    fx_core *c = &x->cs[core];
    const glayer *L = &x->g->layers[l];
    tpu_status rc;
    if (dx) {
        if ((rc = fx_gwin_of(x, core, l, src, err)) ||
            (rc = fx_grad_of(x, core, L->in[0], dst, err)))
            return rc;
        return TPU_OK;
    }
    *dst = &c->act[l];
    if ((!c->have_act[l] && (rc = fx_new_act(x, core, l, dst, err))) ||
        (rc = fx_fwin_of(x, core, l, src, err)))
        return rc;
    return TPU_OK;
}

tpu_status fxm_rows(fx_state *x, int core, int l, const fw_insn *in, int dx,
                    tpu_error *err)
{
    fx_core *c = &x->cs[core];
    const glayer *L = &x->g->layers[l];
    mm_geom gm;
    tpu_status rc = geom(x, l, in, dx, &gm, err);
    if (rc)
        return rc;
    const fxt_tens *src; /* what the rows gather from */
    fxt_tens *dst;       /* whose rows they are */
    if ((rc = fxm_row_operands(x, core, l, dx, &src, &dst, err)))
        return rc;
    int64_t depth = dx ? gm.cout : gm.cin, width = dx ? gm.cin : gm.cout;
    int64_t npos = fxt_npos(dst), real = dst->B * npos;
    int64_t r0, r1, n0, n1;
    fxm_next_tile(c, l, dx, in, width, &r0, &r1, &n0, &n1);
    /* a strided convolution's input gradient: each row of the product
     * stands for s^d input positions (lower.c, its stride phases) */
    int64_t per = fxt_rows_per(L, dx);
    r0 *= per;
    r1 *= per;
    if (r1 > real)
        r1 = real;
    if (r0 >= r1 || n0 >= n1)
        return TPU_OK;
    int64_t m = r1 - r0, nn = n1 - n0;
    int64_t kc = gm.taps * depth; /* compact K: the real rows only */
    /* A is zeroed (padding taps read 0); B and C are written whole. */
    float *A = fx_scratch(x, FX_SCR_A, m * kc);
    float *Bm = fx_scratch_raw(x, FX_SCR_B, sizeof(float) * (size_t)(kc * nn));
    float *C = fx_scratch_raw(x, FX_SCR_C, sizeof(float) * (size_t)(m * nn));
    if (!A || !Bm || !C)
        return fx_oom(err);
    const float *W = fx_wts(x, l);
    for (int64_t t = 0; t < gm.taps; t++)
        for (int64_t k = 0; k < depth; k++)
            for (int64_t j = 0; j < nn; j++)
                Bm[(t * depth + k) * nn + j] =
                    dx ? W[(t * gm.cin + n0 + j) * gm.cout + k]
                       : W[(t * gm.cin + k) * gm.cout + n0 + j];
    /* im2col: each row's taps resolved once, a run of channels each */
    fxt_taps tw;
    if ((rc = fxt_taps_init(&tw, L, gm.spatial, dx, err)))
        return rc;
    int64_t ex = fxt_example(src);
    for (int64_t r = r0; r < r1 && !rc; r++) {
        int64_t b = r / npos, loc[SP], gp[SP];
        fxt_global(dst, r % npos, loc, gp);
        int miss = 0;
        if (fxt_taps_at(&tw, gp, src, 0, &miss) < 0) {
            rc = fx_missing(err, x, core, l, dx ? "input gradient" : "forward",
                            miss);
            break;
        }
        float *arow = &A[(r - r0) * kc];
        for (int64_t i = 0; i < tw.n; i++)
            if (tw.off[i] >= 0)
                memcpy(&arow[tw.tap[i] * depth], &src->v[b * ex + tw.off[i]],
                       sizeof(float) * (size_t)depth);
    }
    fxt_taps_free(&tw);
    if (rc)
        return rc;
    if ((rc = fxm_mm(x, A, Bm, C, m, kc, nn, gm.depth, gm.sw, 0, in->passes,
                     err)))
        return rc;
    for (int64_t r = r0; r < r1; r++)
        for (int64_t j = 0; j < nn; j++) {
            float v = C[(r - r0) * nn + j];
            float *o = &dst->v[r * width + n0 + j];
            if (dx) {
                *o += v;
                continue;
            }
            if (L->use_bias)
                v += W[gm.taps * gm.cin * gm.cout + n0 + j];
            *o = fxt_round(v, L->dtype_bytes);
        }
    return TPU_OK;
}

/* dW[t, ci, co] = sum over this core's output rows of x(window) * dY.  The
 * instruction's rows are the product's K (in the lowering's layout); they
 * map in proportion onto the taps x cin weight rows, which changes no value:
 * each weight row is one independent column of sums. */
tpu_status fxm_dw(fx_state *x, int core, int l, const fw_insn *in,
                  tpu_error *err)
{
    fx_core *c = &x->cs[core];
    const glayer *L = &x->g->layers[l];
    mm_geom gm;
    tpu_status rc = geom(x, l, in, 0, &gm, err);
    if (rc)
        return rc;
    const fxt_tens *win;
    fxt_tens *gy;
    float *wg;
    if ((rc = fx_dy_of(x, core, l, &gy, err)) ||
        (rc = fx_dwin_of(x, core, l, &win, err)) ||
        (rc = fx_wgrad_of(x, core, l, &wg, err)))
        return rc;
    int64_t R = gm.taps * gm.cin, npos = fxt_npos(gy), Mc = gy->B * npos;
    int64_t r0, r1, n0, n1;
    fxm_next_tile(c, l, 2, in, gm.cout, &r0, &r1, &n0, &n1);
    int64_t e = in->e > 0 ? in->e : 1;
    int64_t k0 = r0 * R / e, k1 = (r1 >= e ? R : r1 * R / e);
    if (n0 < n1 && r0 == 0 && L->use_bias) {
        /* The bias gradient: dY summed over rows, on the vector unit. */
        float *bg = &wg[gm.taps * gm.cin * gm.cout];
        for (int64_t j = n0; j < n1; j++) {
            float s = 0.0f;
            for (int64_t mm = 0; mm < Mc; mm++)
                s += gy->v[mm * gm.cout + j];
            bg[j] += s;
        }
    }
    if (k0 >= k1 || n0 >= n1 || Mc == 0)
        return TPU_OK;
    int64_t m = k1 - k0, nn = n1 - n0;
    float *A = fx_scratch(x, FX_SCR_A, m * Mc);
    float *Bm = fx_scratch_raw(x, FX_SCR_B, sizeof(float) * (size_t)(Mc * nn));
    float *C = fx_scratch_raw(x, FX_SCR_C, sizeof(float) * (size_t)(m * nn));
    if (!A || !Bm || !C)
        return fx_oom(err);
    for (int64_t mm = 0; mm < Mc; mm++)
        for (int64_t j = 0; j < nn; j++)
            Bm[mm * nn + j] = gy->v[mm * gm.cout + n0 + j];
    /* Each position's window rows, tap by tap, a run of channels at a
     * time, into the columns of X^T; the taps of the instruction's K
     * range resolved once per position. */
    fxt_taps tw;
    if ((rc = fxt_taps_init(&tw, L, gm.spatial, 0, err)))
        return rc;
    int64_t ex = fxt_example(win);
    int64_t ta = k0 / gm.cin, tb = (k1 + gm.cin - 1) / gm.cin;
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
            int64_t t = tw.tap[i];
            int64_t c0 = t * gm.cin < k0 ? k0 - t * gm.cin : 0;
            int64_t c1 = (t + 1) * gm.cin > k1 ? k1 - t * gm.cin : gm.cin;
            const float *row = &win->v[b * ex + tw.off[i]];
            for (int64_t ci = c0; ci < c1; ci++)
                A[(t * gm.cin + ci - k0) * Mc + mm] = row[ci];
        }
    }
    fxt_taps_free(&tw);
    if (rc ||
        (rc = fxm_mm(x, A, Bm, C, m, Mc, nn, Mc, Mc, 0, in->passes, err)))
        return rc;
    for (int64_t k = k0; k < k1; k++)
        for (int64_t j = 0; j < nn; j++)
            wg[k * gm.cout + n0 + j] += C[(k - k0) * nn + j];
    return TPU_OK;
}
