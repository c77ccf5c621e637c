/* The cycle-by-cycle MXU: every PE's registers latch every cycle.
 *
 * Per PE (r, c) the registers are: the activation it passes right (a),
 * the tag travelling with that activation (t), the partial sum it passes
 * down (p), the active weight (w) and the shadow weight (sh) that the
 * next tile shifts into.  They are kept as separate arrays, row-major
 * (struct of arrays), so that one row's update is a straight loop over
 * columns that the compiler vectorizes.
 *
 * One cycle, for each PE, from the values latched at the end of the
 * previous cycle:
 *   a_in, t_in = left neighbour's a, t     (row r's edge input at c = 0)
 *   p_in       = upper neighbour's p       (+0.0 at the top of the array)
 *   if t_in is the first row of a tile: w = sh   (the swap rides the data)
 *   p = p_in + w * a_in;  a = a_in;  t = t_in
 *   sh = upper neighbour's sh when the column is shifting a weight load
 *        into this row (the weight port's input at the top).
 * Timing rules of the controller (the hardware's interlocks) are those of
 * mxu/mxu.h; the count this model returns is when the last result
 * actually leaves the array, so the closed form is checked, not assumed.
 */
#include <stdlib.h>
#include <string.h>

#include "mxu/mxu.h"

/* Tag: (push index << 1) | first-row-of-tile; a bubble is TAG_NONE (even,
 * so it never triggers a swap, and negative so it is never popped). */
#define TAG_NONE (-2)
enum { LANES = 8 };

typedef struct {
    int R, C;     /* array */
    int Cp;       /* columns padded to LANES */
    int W;        /* stride of a/t rows: slot 0 is the edge input */
    float *a[2];  /* R x W, double-buffered (values move right) */
    int32_t *t[2];
    uint32_t *w;  /* R x Cp, stationary (fp32 bit patterns) */
    uint32_t *sh; /* (R+1) x Cp: row 0 is the weight port's input */
    float *p;     /* (R+1) x Cp: row 0 is the +0.0 at the top */
} pe_array;

static float bfv(bf16 b)
{
    return bf16_bits_f32((uint32_t)b << 16);
}

/* One row of PEs for one cycle.  Blocks of LANES so that -O2's SLP
 * vectorizer turns each block into vector operations; Cp is a multiple
 * of LANES so there is no scalar tail. */
static void pe_row(int n, const float *restrict ain,
                   const int32_t *restrict tin, float *restrict aout,
                   int32_t *restrict tout, uint32_t *restrict w,
                   const uint32_t *restrict sh, const float *restrict pin,
                   float *restrict pout)
{
    for (int c = 0; c < n; c += LANES) {
        for (int u = 0; u < LANES; u++) {
            int32_t t = tin[c + u];
            float a = ain[c + u];
            /* all ones when this activation opens a new tile */
            uint32_t m = (uint32_t)0 - (uint32_t)(t & 1);
            uint32_t wb = (sh[c + u] & m) | (w[c + u] & ~m);
            w[c + u] = wb;
            pout[c + u] = pin[c + u] + bf16_bits_f32(wb) * a;
            aout[c + u] = a;
            tout[c + u] = t;
        }
    }
}

static void pe_free(pe_array *s)
{
    free(s->a[0]);
    free(s->a[1]);
    free(s->t[0]);
    free(s->t[1]);
    free(s->w);
    free(s->sh);
    free(s->p);
}

static int pe_alloc(pe_array *s, int R, int C)
{
    memset(s, 0, sizeof *s);
    s->R = R;
    s->C = C;
    s->Cp = (C + LANES - 1) / LANES * LANES;
    s->W = s->Cp + LANES;
    size_t na = (size_t)R * (size_t)s->W;
    size_t nw = (size_t)R * (size_t)s->Cp;
    size_t ns = (size_t)(R + 1) * (size_t)s->Cp;
    for (int i = 0; i < 2; i++) {
        s->a[i] = calloc(na, sizeof(float));
        s->t[i] = malloc(na * sizeof(int32_t));
        if (s->t[i])
            for (size_t j = 0; j < na; j++)
                s->t[i][j] = TAG_NONE;
    }
    s->w = calloc(nw, sizeof(uint32_t));
    s->sh = calloc(ns, sizeof(uint32_t));
    s->p = calloc(ns, sizeof(float));
    if (!s->a[0] || !s->a[1] || !s->t[0] || !s->t[1] || !s->w || !s->sh ||
        !s->p) {
        pe_free(s);
        return -1;
    }
    return 0;
}

tpu_status mxu_pe_matmul(const mxu_params *p, const bf16 *a, const bf16 *b,
                         float *c, int64_t m, int64_t k, int64_t n,
                         uint64_t *cycles, tpu_error *err)
{
    if (cycles)
        *cycles = 0;
    if (p->rows < 1 || p->cols < 1)
        return tpu_fail(err, TPU_ERR_INPUT, "mxu: array %dx%d: need >= 1x1",
                        p->rows, p->cols);
    if (m < 0 || k < 0 || n < 0)
        return tpu_fail(err, TPU_ERR_INPUT,
                        "mxu: negative size m=%lld k=%lld n=%lld",
                        (long long)m, (long long)k, (long long)n);
    if (m == 0 || n == 0)
        return TPU_OK;
    if (k == 0) {
        for (int64_t i = 0; i < m * n; i++)
            c[i] = 0.0f;
        return TPU_OK;
    }
    const int R = p->rows, C = p->cols;
    const int64_t KT = (k + R - 1) / R, NT = (n + C - 1) / C;
    if (KT > (1 << 30) / NT || KT * NT > ((int64_t)1 << 30) / m)
        return tpu_fail(err, TPU_ERR_INPUT,
                        "mxu: %lld pushed rows exceed the PE model's 2^30",
                        (long long)(KT * NT) * (long long)m);
    const int64_t T = KT * NT, last = T * m - 1;

    pe_array s;
    int64_t *L = malloc((size_t)T * sizeof *L);        /* load start */
    int64_t *ring = malloc((size_t)R * sizeof *ring);   /* skew FIFO */
    if (!L || !ring || pe_alloc(&s, R, C) != 0) {
        free(L);
        free(ring);
        return tpu_fail(err, TPU_ERR_SYSTEM, "mxu: out of memory for the "
                        "%dx%d PE array", R, C);
    }
    for (int i = 0; i < R; i++)
        ring[i] = -1;
    const int Cp = s.Cp, W = s.W;
    const uint64_t guard = 4 * mxu_fast_cycles(p, m, k, n) + 1000;

    int64_t nload = 0;   /* tiles whose load has been issued */
    int64_t lo_load = 0; /* oldest load still shifting in some column */
    int64_t pj = 0, pi = 0, started = 0; /* push: tile, row; tiles begun */
    int cur = 0;
    uint64_t t = 0;
    for (;; t++) {
        const int64_t tt = (int64_t)t;
        /* Push issue: a tile's first row needs its weights complete in
         * column 0 (load start + R); rows of a tile go one per cycle. */
        int64_t g = -1;
        if (pj < T && (pi > 0 || (pj < nload && tt >= L[pj] + R))) {
            g = pj * m + pi;
            if (pi == 0)
                started = pj + 1;
            if (++pi == m) {
                pi = 0;
                pj++;
            }
        }
        ring[tt % R] = g;
        /* Load issue: the weight port is free (previous load started R
         * cycles ago) and the shadow is free (the tile it holds has
         * started pushing, so the swap wave is ahead of the new load). */
        if (nload < T && (nload == 0 || (tt >= L[nload - 1] + R &&
                                         started >= nload)))
            L[nload++] = tt;
        while (lo_load < nload && tt > L[lo_load] + R + C - 2)
            lo_load++;

        /* Edge inputs: row r gets the row pushed r cycles ago. */
        float *acur = s.a[cur], *anxt = s.a[cur ^ 1];
        int32_t *tcur = s.t[cur], *tnxt = s.t[cur ^ 1];
        for (int r = 0; r < R; r++) {
            int64_t gr = tt >= r ? ring[(tt - r) % R] : -1;
            float av = 0.0f;
            int32_t tag = TAG_NONE;
            if (gr >= 0) {
                int64_t j = gr / m, i = gr % m;
                int64_t kt = j % KT, kk = kt * R + r;
                if (kk < k)
                    av = bfv(a[i * k + kk]);
                tag = (int32_t)((gr << 1) | (i == 0));
            }
            acur[(size_t)r * W] = av;
            tcur[(size_t)r * W] = tag;
        }
        /* Weight port: column c of load j is fed at cycles L+c .. L+c+R-1,
         * bottom row first (it has the farthest to fall). */
        for (int64_t j = lo_load; j < nload; j++) {
            int64_t q0 = tt - L[j];
            int64_t k0 = (j % KT) * R, n0 = (j / KT) * C;
            for (int64_t cc = q0 - R + 1 < 0 ? 0 : q0 - R + 1;
                 cc <= q0 && cc < C; cc++) {
                int64_t row = R - 1 - (q0 - cc);
                uint32_t wv = 0;
                if (k0 + row < k && n0 + cc < n)
                    wv = (uint32_t)b[(k0 + row) * n + n0 + cc] << 16;
                s.sh[cc] = wv;
            }
        }
        /* Bottom row first, so p and sh can be updated in place: row r
         * reads row r-1's values before row r-1 is updated. */
        for (int r = R - 1; r >= 0; r--) {
            pe_row(Cp, acur + (size_t)r * W, tcur + (size_t)r * W,
                   anxt + (size_t)r * W + 1, tnxt + (size_t)r * W + 1,
                   s.w + (size_t)r * Cp, s.sh + (size_t)(r + 1) * Cp,
                   s.p + (size_t)r * Cp, s.p + (size_t)(r + 1) * Cp);
            /* Shadow shift: in column c of load j at step q = t - L - c,
             * rows 0..q shift (a row shifts from the cycle the tile's
             * first weight row reaches it). */
            for (int64_t j = lo_load; j < nload; j++) {
                int64_t q0 = tt - L[j];
                int64_t c0 = q0 - R + 1 < 0 ? 0 : q0 - R + 1;
                int64_t c1 = q0 - r < C - 1 ? q0 - r : C - 1;
                uint32_t *dst = s.sh + (size_t)(r + 1) * Cp;
                const uint32_t *src = s.sh + (size_t)r * Cp;
                for (int64_t cc = c0; cc <= c1; cc++)
                    dst[cc] = src[cc];
            }
        }
        /* Pop: the bottom row's sums, deskewed into C-wide rows. */
        const int32_t *tb = tnxt + (size_t)(R - 1) * W + 1;
        const float *pb = s.p + (size_t)R * Cp;
        int done = 0;
        for (int cc = 0; cc < C; cc++) {
            if (tb[cc] < 0)
                continue;
            int64_t gg = tb[cc] >> 1, j = gg / m, i = gg % m;
            int64_t kt = j % KT, col = (j / KT) * C + cc;
            if (col < n) {
                float *dst = c + i * n + col;
                *dst = kt == 0 ? pb[cc] : *dst + pb[cc];
            }
            if (gg == last && cc == C - 1)
                done = 1;
        }
        cur ^= 1;
        if (done)
            break;
        /* The interlocks always make progress; a run this long is a bug. */
        TPU_ASSERT(t < guard);
    }
    if (cycles)
        *cycles = t + 1;
    pe_free(&s);
    free(L);
    free(ring);
    return TPU_OK;
}
