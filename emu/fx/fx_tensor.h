/* fx_tensor — boxes of a --functional tensor and the coordinates a
 * kernel tap reaches (internal to emu/fx/fexec.c and its fx_*.c parts).
 *
 * A box is a core's part of a layer's tensor: the examples B, the channels
 * C (innermost), and per spatial dimension its global offset `lo`, its
 * extent `ext` and the whole tensor's extent `gext`.  A read names a global
 * coordinate: outside the tensor it is padding (0), inside the tensor but
 * outside the box it is a row the core does not hold.
 *
 * The per-element helpers are inline: the kernels call them in their
 * innermost loops, across the files of the executor.
 */
#ifndef EMU_FX_TENSOR_H
#define EMU_FX_TENSOR_H

#include <stdint.h>
#include <string.h>

#include "emu/graph.h"
#include "emu/status.h"
#include "mxu/bf16.h"

typedef struct {
    int nsp;
    int64_t B, C;
    int64_t lo[GRAPH_MAX_SP], ext[GRAPH_MAX_SP], gext[GRAPH_MAX_SP];
    float *v;
} fxt_tens;

/* (Re)allocates t's values for its shape, zeroed. */
tpu_status fxt_alloc(fxt_tens *t, tpu_error *err);
void fxt_free(fxt_tens *t);

/* A layer's value in its storage dtype (2 bytes: bf16). */
static inline float fxt_round(float v, int dtype)
{
    return dtype == 2 ? bf16_to_f32(bf16_from_f32(v)) : v;
}

/* Positions (spatial coordinates) of the box. */
static inline int64_t fxt_npos(const fxt_tens *t)
{
    int64_t e = 1;
    for (int d = 0; d < GRAPH_MAX_SP; d++)
        e *= t->ext[d];
    return e;
}

static inline int64_t fxt_elems(const fxt_tens *t)
{
    return t->B * t->C * fxt_npos(t);
}

/* The box's shape without its values. */
static inline void fxt_copy_shape(fxt_tens *dst, const fxt_tens *src)
{
    *dst = *src;
    dst->v = NULL;
}

/* Local position index -> local coordinates. */
static inline void fxt_decode(const fxt_tens *t, int64_t pos,
                              int64_t o[GRAPH_MAX_SP])
{
    for (int d = GRAPH_MAX_SP - 1; d >= 0; d--) {
        o[d] = pos % t->ext[d];
        pos /= t->ext[d];
    }
}

/* Local coordinates -> global ones. */
static inline void fxt_offset(const fxt_tens *t,
                              const int64_t loc[GRAPH_MAX_SP],
                              int64_t g[GRAPH_MAX_SP])
{
    for (int d = 0; d < GRAPH_MAX_SP; d++)
        g[d] = loc[d] + t->lo[d];
}

/* Local position index -> local and global coordinates. */
static inline void fxt_global(const fxt_tens *t, int64_t pos,
                              int64_t loc[GRAPH_MAX_SP],
                              int64_t g[GRAPH_MAX_SP])
{
    fxt_decode(t, pos, loc);
    fxt_offset(t, loc, g);
}

static inline int64_t fxt_at(const fxt_tens *t, int64_t b,
                             const int64_t loc[GRAPH_MAX_SP], int64_t c)
{
    int64_t i = b;
    for (int d = 0; d < GRAPH_MAX_SP; d++)
        i = i * t->ext[d] + loc[d];
    return i * t->C + c;
}

/* Row-major index of (global position, channel) within one example. */
static inline int64_t fxt_gflat(const fxt_tens *t,
                                const int64_t g[GRAPH_MAX_SP], int64_t c)
{
    int64_t i = 0;
    for (int d = 0; d < GRAPH_MAX_SP; d++)
        i = i * t->gext[d] + g[d];
    return i * t->C + c;
}

/* Global coordinate g -> local coordinates loc: 1 when the box holds it,
 * 0 when g is padding (outside the tensor), -1 with *miss set (the
 * dimension + 1) when the tensor has the row but the box does not. */
static inline int fxt_locate(const fxt_tens *t, const int64_t g[GRAPH_MAX_SP],
                             int64_t loc[GRAPH_MAX_SP], int *miss)
{
    for (int d = 0; d < GRAPH_MAX_SP; d++) {
        if (g[d] < 0 || g[d] >= t->gext[d])
            return 0;
        loc[d] = g[d] - t->lo[d];
        if (loc[d] < 0 || loc[d] >= t->ext[d]) {
            *miss = d + 1;
            return -1;
        }
    }
    return 1;
}

/* Reads global coordinate g of example b: 0 outside the tensor (padding);
 * sets *miss (with the dimension) when the tensor has the row but this
 * core does not. */
static inline float fxt_rd(const fxt_tens *t, int64_t b,
                           const int64_t g[GRAPH_MAX_SP], int64_t c, int *miss)
{
    int64_t loc[GRAPH_MAX_SP];
    if (fxt_locate(t, g, loc, miss) <= 0)
        return 0.0f;
    return t->v[fxt_at(t, b, loc, c)];
}

/* The channels [c0, c0 + n) at global coordinate g of example b into dst
 * (channels are innermost, so one copy): 0 when g is padding (dst left
 * as it is: the callers' buffers are zeroed), -1 with *miss set when the
 * core does not hold the row, 1 when copied. */
static inline int fxt_rd_row(const fxt_tens *t, int64_t b,
                             const int64_t g[GRAPH_MAX_SP], int64_t c0,
                             int64_t n, float *dst, int *miss)
{
    int64_t loc[GRAPH_MAX_SP];
    int got = fxt_locate(t, g, loc, miss);
    if (got > 0)
        memcpy(dst, &t->v[fxt_at(t, b, loc, c0)], sizeof(float) * (size_t)n);
    return got;
}

/* Whether g lies inside the extents along the first nsp dims. */
static inline int fxt_inside(const int64_t g[GRAPH_MAX_SP],
                             const int64_t gext[GRAPH_MAX_SP], int nsp)
{
    for (int d = 0; d < nsp; d++)
        if (g[d] < 0 || g[d] >= gext[d])
            return 0;
    return 1;
}

/* ---- kernel taps -------------------------------------------------------- */

static inline int64_t fxt_dflt(int v)
{
    return v > 0 ? v : 1;
}

/* s^d: the product of a layer's strides (a strided convolution's input
 * gradient runs in that many stride phases: lower.c) */
static inline int64_t fxt_stride_prod(const glayer *L)
{
    int64_t sprod = 1;
    for (int d = 0; d < L->out.nsp; d++)
        sprod *= fxt_dflt(L->strides[d]);
    return sprod;
}

static inline int64_t fxt_kernel_taps(const glayer *L)
{
    int64_t t = 1;
    if (L->op == GOP_DENSE)
        return 1;
    for (int d = 0; d < L->out.nsp; d++)
        t *= L->kernel[d];
    return t;
}

/* Rows of the layer's tensor one row of its product stands for: s^d for a
 * product lower.c runs as stride phases (a strided convolution's input
 * gradient, dx; a transposed convolution whose kernel does not split
 * evenly over its phases, forward), else 1. */
static inline int64_t fxt_rows_per(const glayer *L, int dx)
{
    int64_t sprod = fxt_stride_prod(L);
    if (dx && L->op == GOP_CONV)
        return sprod;
    if (!dx && L->op == GOP_CONV_T && fxt_kernel_taps(L) % sprod)
        return sprod;
    return 1;
}

/* Tap index -> kernel offsets (row-major over the kernel dims). */
static inline void fxt_tap_decode(const glayer *L, int64_t t,
                                  int64_t k[GRAPH_MAX_SP])
{
    for (int d = GRAPH_MAX_SP - 1; d >= 0; d--) {
        if (d >= L->out.nsp || L->op == GOP_DENSE) {
            k[d] = 0;
            continue;
        }
        k[d] = t % L->kernel[d];
        t /= L->kernel[d];
    }
}

/* Input coordinate that output coordinate o reads through tap offset kk
 * along dim d; returns 0 when the tap does not hit (a stride phase of a
 * transposed conv), *gi = -1 for padding. */
static inline int fxt_tap_hits(const glayer *L, int d, int64_t o, int64_t kk,
                               int64_t *gi)
{
    int64_t s = fxt_dflt(L->strides[d]), dil = fxt_dflt(L->dilation[d]);
    if (L->op == GOP_CONV_T) {
        int64_t j = o - L->pad_lo[d] + kk * dil;
        if (((j % s) + s) % s != 0)
            return 0;
        *gi = j < 0 ? -1 : j / s;
        return 1;
    }
    *gi = o * s - L->pad_lo[d] + kk * dil;
    return 1;
}

/* The input gradient's view: input coordinate p receives from output
 * coordinate *go through tap offset kk (0 when no output does). */
static inline int fxt_tap_hits_dx(const glayer *L, int d, int64_t p, int64_t kk,
                                  int64_t *go)
{
    int64_t s = fxt_dflt(L->strides[d]), dil = fxt_dflt(L->dilation[d]);
    if (L->op == GOP_CONV_T) {
        *go = p * s + L->pad_lo[d] - kk * dil;
        return 1;
    }
    int64_t num = p + L->pad_lo[d] - kk * dil;
    if (((num % s) + s) % s != 0)
        return 0;
    *go = num < 0 ? -1 : num / s;
    return 1;
}

/* The coordinates tap t of coordinate p reaches along the first nsp dims
 * (fxt_tap_hits, or fxt_tap_hits_dx when dx), p itself along the others;
 * 0 when the tap misses along some dim. */
static inline int fxt_tap_reach(const glayer *L, int nsp, int dx,
                                const int64_t p[GRAPH_MAX_SP], int64_t t,
                                int64_t out[GRAPH_MAX_SP])
{
    int64_t kk[GRAPH_MAX_SP];
    fxt_tap_decode(L, t, kk);
    int hit = 1;
    for (int d = 0; d < GRAPH_MAX_SP; d++) {
        out[d] = p[d];
        if (d < nsp &&
            !(dx ? fxt_tap_hits_dx : fxt_tap_hits)(L, d, p[d], kk[d], &out[d]))
            hit = 0;
    }
    return hit;
}

/* ---- a position's taps, all at once ------------------------------------ */

/* The taps of one coordinate into one source box, resolved once per
 * position instead of once per element: a kernel's innermost loops then
 * run over contiguous channels.  Each dim's kernel offsets are resolved on
 * their own (a tap's coordinate along d depends only on its offset along
 * d), and the taps combine them in fxt_tap_decode's row-major order, so
 * the list holds exactly what fxt_tap_reach + fxt_locate give tap by tap,
 * in the same order. */
typedef struct {
    const glayer *L;
    int nsp, dx;
    int64_t K[GRAPH_MAX_SP]; /* kernel offsets per dim (1 past the kernel) */
    int64_t taps;
    int64_t *st[GRAPH_MAX_SP]; /* per dim and offset: fxt_tap_st_ code, or
                                  the local coordinate times the stride */
    int64_t *tap, *off; /* the list: tap index, element offset of channel 0
                           within one example (-1: padding, reads 0) */
    int64_t n;
} fxt_taps;

enum { FXT_ST_NOHIT = -1, FXT_ST_PAD = -2, FXT_ST_MISS = -3 };

/* The tap lists of layer L's kernel along the first nsp dims (dx: the
 * input gradient's view, fxt_tap_hits_dx). */
tpu_status fxt_taps_init(fxt_taps *w, const glayer *L, int nsp, int dx,
                         tpu_error *err);
void fxt_taps_free(fxt_taps *w);

/* Elements per example of a box. */
static inline int64_t fxt_example(const fxt_tens *t)
{
    return fxt_npos(t) * t->C;
}

/* w's list for coordinate p into src, of the taps [t0, t1) that reach
 * (fxt_tap_reach), skipping those outside src's tensor along the first nsp
 * dims when skip_pad (fxt_inside); returns -1 with *miss set (fxt_locate's
 * dim) at the first listed tap whose row the box does not hold (the list
 * holds the taps before it), else 1. */
static inline int fxt_taps_range(fxt_taps *w, const int64_t p[GRAPH_MAX_SP],
                                 const fxt_tens *src, int skip_pad, int64_t t0,
                                 int64_t t1, int *miss)
{
    const glayer *L = w->L;
    int64_t stride = src->C;
    for (int d = GRAPH_MAX_SP - 1; d >= 0; d--) {
        for (int64_t k = 0; k < w->K[d]; k++) {
            int64_t g = p[d];
            if (d < w->nsp &&
                !(w->dx ? fxt_tap_hits_dx : fxt_tap_hits)(L, d, p[d], k, &g)) {
                w->st[d][k] = FXT_ST_NOHIT;
                continue;
            }
            int64_t loc = g - src->lo[d];
            w->st[d][k] = g < 0 || g >= src->gext[d] ? FXT_ST_PAD
                          : loc < 0 || loc >= src->ext[d]
                              ? FXT_ST_MISS
                              : loc * stride;
        }
        stride *= src->ext[d];
    }
    int64_t k[GRAPH_MAX_SP], q = t0;
    for (int d = GRAPH_MAX_SP - 1; d >= 0; d--) {
        k[d] = q % w->K[d];
        q /= w->K[d];
    }
    w->n = 0;
    for (int64_t t = t0; t < t1 && t < w->taps; t++) {
        if (t > t0)
            for (int d = GRAPH_MAX_SP - 1; d >= 0; d--) {
                if (++k[d] < w->K[d])
                    break;
                k[d] = 0;
            }
        int64_t s[GRAPH_MAX_SP], off = 0, any = 0;
        for (int d = 0; d < GRAPH_MAX_SP; d++) {
            s[d] = w->st[d][k[d]];
            any |= s[d];
            off += s[d];
        }
        if (any >= 0) { /* every dim holds its row: the common case */
            w->tap[w->n] = t;
            w->off[w->n++] = off;
            continue;
        }
        off = 0;
        int skip = 0;
        for (int d = 0; d < GRAPH_MAX_SP; d++) {
            s[d] = w->st[d][k[d]];
            if (s[d] == FXT_ST_NOHIT || (skip_pad && d < w->nsp &&
                                         s[d] == FXT_ST_PAD))
                skip = 1;
        }
        if (skip)
            continue;
        for (int d = 0; d < GRAPH_MAX_SP && off >= 0; d++) {
            if (s[d] == FXT_ST_PAD)
                off = -1;
            else if (s[d] == FXT_ST_MISS) {
                *miss = d + 1;
                return -1;
            } else
                off += s[d];
        }
        w->tap[w->n] = t;
        w->off[w->n++] = off;
    }
    return 1;
}

/* fxt_taps_range over every tap. */
static inline int fxt_taps_at(fxt_taps *w, const int64_t p[GRAPH_MAX_SP],
                              const fxt_tens *src, int skip_pad, int *miss)
{
    return fxt_taps_range(w, p, src, skip_pad, 0, w->taps, miss);
}

#endif
