/* halo — windows and halos: the rows of a neighbour's shard a layer's
 * window reaches (forward, and both gradients backward), whether the
 * partition group exchanges halos or gathers the tensor whole, and the
 * collectives and HBM passes of the exchange (XLA SPMD's
 * ExchangeHaloAndGetValidData, openxla/xla spmd/). */
#include <math.h>
#include <string.h>

#include "emu/result.h"
#include "firmware/lower_internal.h"

/* Layer L's window along dim d: kernel (or pooling window), stride and
 * dilation, 1 where unset. */
static void window_of(const glayer *L, int d, int64_t *k, int64_t *s,
                      int64_t *dil)
{
    *k = L->kernel[d] > 0 ? L->kernel[d] : 1;
    *s = L->strides[d] > 0 ? L->strides[d] : 1;
    *dil = L->dilation[d] > 0 ? L->dilation[d] : 1;
}

/* Clips [*lo, *hi) to [0, ext), empty rather than inverted. */
static void clip_range(int64_t ext, int64_t *lo, int64_t *hi)
{
    *lo = max64(*lo, 0);
    *hi = min64(*hi, ext);
    if (*hi < *lo)
        *hi = *lo;
}

/* The input rows [*lo, *hi) that output rows [o0, o1) of layer L need
 * along dim d (clipped to the input's extent). */
static void need_range(const glayer *L, const glayer *I, int d, int64_t o0,
                       int64_t o1, int64_t *lo, int64_t *hi)
{
    int64_t k, s, dil;
    window_of(L, d, &k, &s, &dil);
    switch (L->op) {
    case GOP_CONV:
    case GOP_MAXPOOL:
    case GOP_AVGPOOL:
        *lo = o0 * s - L->pad_lo[d];
        *hi = (o1 - 1) * s - L->pad_lo[d] + (k - 1) * dil + 1;
        break;
    case GOP_CONV_T:
        /* out[o] reads the stride-dilated input at o - pad_lo + t*dil. */
        *lo = ceildiv(o0 - L->pad_lo[d], s);
        *hi = floordiv(o1 - 1 - L->pad_lo[d] + (k - 1) * dil, s) + 1;
        break;
    case GOP_UPSAMPLE: {
        int64_t f = L->factor[d] > 0 ? L->factor[d] : 1;
        *lo = o0 / f;
        *hi = (o1 - 1) / f + 1;
        break;
    }
    case GOP_PAD:
    case GOP_CROP:
        *lo = o0 - L->pad_lo[d];
        *hi = o1 - L->pad_lo[d];
        break;
    case GOP_RESIZE: {
        /* half-pixel centres: out[o] lerps the inputs around
         * (o + 0.5) / f - 0.5, i.e. (2o + 1 - f) / 2f */
        int64_t f = L->factor[d] > 0 ? L->factor[d] : 1;
        *lo = floordiv(2 * o0 + 1 - f, 2 * f);
        *hi = ceildiv(2 * (o1 - 1) + 1 - f, 2 * f) + 1;
        break;
    }
    default:
        *lo = o0;
        *hi = o1;
    }
    clip_range(I->out.sp[d], lo, hi);
}

/* The output rows [*lo, *hi) of layer L whose windows touch input rows
 * [i0, i1) along dim d: what the input gradient of those rows reads. */
static void grad_need_range(const glayer *L, int d, int64_t i0, int64_t i1,
                            int64_t *lo, int64_t *hi)
{
    int64_t k, s, dil;
    window_of(L, d, &k, &s, &dil);
    switch (L->op) {
    case GOP_CONV:
    case GOP_MAXPOOL:
    case GOP_AVGPOOL:
        *lo = ceildiv(i0 + L->pad_lo[d] - (k - 1) * dil, s);
        *hi = floordiv(i1 - 1 + L->pad_lo[d], s) + 1;
        break;
    case GOP_CONV_T:
        *lo = i0 * s + L->pad_lo[d] - (k - 1) * dil;
        *hi = (i1 - 1) * s + L->pad_lo[d] + 1;
        break;
    case GOP_UPSAMPLE: {
        int64_t f = L->factor[d] > 0 ? L->factor[d] : 1;
        *lo = i0 * f;
        *hi = i1 * f;
        break;
    }
    case GOP_PAD:
    case GOP_CROP:
        *lo = i0 + L->pad_lo[d];
        *hi = i1 + L->pad_lo[d];
        break;
    case GOP_RESIZE: {
        /* the outputs whose upper neighbour is at or past i0 and whose
         * lower one is before i1 (need_range's centres) */
        int64_t f = L->factor[d] > 0 ? L->factor[d] : 1;
        *lo = f * (i0 - 1) + floordiv(f - 1, 2) + 1;
        *hi = f * i1 + ceildiv(f - 1, 2);
        break;
    }
    default:
        *lo = i0;
        *hi = i1;
    }
    clip_range(L->out.sp[d], lo, hi);
}

/* Whether rows [nlo, nhi) of `layer` along d lie within shard cd's rows
 * and its two neighbours': a halo exchange reaches no further, anything
 * else is gathered.  Ranges are contiguous, so the three shards hold
 * [lo(cd-1), hi(cd+1)); a short or empty trailing shard narrows it. */
static int neighbours_hold(const lower_ctx *c, int layer, int d, int cd,
                           int64_t nlo, int64_t nhi)
{
    int f = c->p->factor[d];
    int64_t lo, hi, unused;
    if (nhi <= nlo)
        return 1;
    plan_range(c->p, c->g, layer, d, cd > 0 ? cd - 1 : cd, &lo, &unused);
    plan_range(c->p, c->g, layer, d, cd + 1 < f ? cd + 1 : cd, &unused, &hi);
    return nlo >= lo && nhi <= hi;
}

static void halo_of_shard(const lower_ctx *c, int l, int i, const int *coords,
                          halo_t *h)
{
    const glayer *L = &c->g->layers[l], *I = &c->g->layers[i];
    memset(h, 0, sizeof *h);
    for (int d = 0; d < GRAPH_MAX_SP; d++)
        h->in_ext[d] = 1;
    if (I->out.nsp == 0)
        return;
    int same_rank = L->out.nsp == I->out.nsp;
    for (int d = 0; d < I->out.nsp; d++) {
        int64_t ilo, ihi, olo, ohi;
        plan_range(c->p, c->g, i, d, coords[d], &ilo, &ihi);
        h->in_ext[d] = ihi - ilo;
        if (!same_rank || L->op == GOP_RESHAPE) {
            /* flatten of a split tensor gathers it; global pooling and a
             * loss reduce their own shard and all-reduce the result */
            if (layout_is_split(c, i, d) && L->op != GOP_GAP &&
                L->op != GOP_LOSS)
                h->gather = 1;
            continue;
        }
        if (!layout_is_split(c, i, d))
            continue;
        if (!layout_is_split(c, l, d)) {
            h->gather = 1;
            continue;
        }
        plan_range(c->p, c->g, l, d, coords[d], &olo, &ohi);
        int64_t nlo = ilo, nhi = ilo; /* an empty output shard needs nothing */
        if (ohi > olo)
            need_range(L, I, d, olo, ohi, &nlo, &nhi);
        if (nhi <= nlo)
            nlo = nhi = ilo;
        h->from_lo[d] = max64(0, ilo - nlo);
        h->from_hi[d] = max64(0, nhi - ihi);
        if (!neighbours_hold(c, i, d, coords[d], nlo, nhi))
            h->gather = 1;
        h->in_ext[d] += h->from_lo[d] + h->from_hi[d];
    }
}

/* The shards' coordinates that decide a group-wide question, one at a
 * time (idx from 0 until it returns 0): every value along one axis with
 * the others at 0.  A shard's halo along dimension d depends on its
 * coordinate along d alone, so whether any shard gathers or exchanges is
 * decided by these sum-of-the-factors shards as by all product-of-the-
 * factors ones, and the lowering stays linear in the cores (asking every
 * shard is quadratic: 53 s a step at 1024 cores per replica). */
static int axis_coords(const lower_ctx *c, int idx, int co[GRAPH_MAX_SP])
{
    for (int d = 0; d < GRAPH_MAX_SP; d++)
        co[d] = 0;
    for (int d = 0; d < GRAPH_MAX_SP && d < c->p->nsp; d++) {
        int f = c->p->factor[d] > 0 ? c->p->factor[d] : 1;
        if (idx < f) {
            co[d] = idx;
            return 1;
        }
        idx -= f;
    }
    return idx == 0; /* no split dimension: the one shard */
}

/* The exchange is one collective for the whole partition group, so
 * whether it happens (and whether it is a gather) is decided over all
 * shards; the amounts are this shard's. */
void halo_fwd(const lower_ctx *c, int l, int i, halo_t *h)
{
    halo_of_shard(c, l, i, c->coords, h);
    int gather = h->gather;
    int co[GRAPH_MAX_SP];
    for (int k = 0; !gather && axis_coords(c, k, co); k++) {
        halo_t o;
        halo_of_shard(c, l, i, co, &o);
        gather |= o.gather;
    }
    if (gather && !h->gather) {
        const glayer *I = &c->g->layers[i];
        h->gather = 1;
        for (int d = 0; d < I->out.nsp; d++)
            h->from_lo[d] = h->from_hi[d] = 0;
    }
    if (h->gather) {
        const glayer *I = &c->g->layers[i];
        for (int d = 0; d < I->out.nsp; d++) {
            h->in_ext[d] = I->out.sp[d];
            h->from_lo[d] = h->from_hi[d] = 0;
        }
    }
}

/* Backward: the rows of layer l's output gradient this shard receives to
 * compute the gradient of its slice of input i; a gather when the input
 * is replicated along a dimension the output splits (every core then
 * needs every output row) or a halo is wider than a neighbour's shard. */
static void bwd_halo_of_shard(const lower_ctx *c, int l, int i,
                              const int *coords, halo_t *h)
{
    const glayer *L = &c->g->layers[l], *I = &c->g->layers[i];
    memset(h, 0, sizeof *h);
    for (int d = 0; d < GRAPH_MAX_SP; d++)
        h->in_ext[d] = 1;
    if (L->out.nsp == 0 || I->out.nsp != L->out.nsp)
        return;
    for (int d = 0; d < L->out.nsp; d++) {
        int64_t ilo, ihi, olo, ohi, nlo, nhi;
        plan_range(c->p, c->g, l, d, coords[d], &olo, &ohi);
        h->in_ext[d] = ohi - olo;
        if (!layout_is_split(c, l, d))
            continue;
        if (!layout_is_split(c, i, d)) {
            h->gather = 1;
            continue;
        }
        plan_range(c->p, c->g, i, d, coords[d], &ilo, &ihi);
        nlo = nhi = olo; /* an empty input shard needs no gradient */
        if (ihi > ilo)
            grad_need_range(L, d, ilo, ihi, &nlo, &nhi);
        if (nhi <= nlo)
            nlo = nhi = olo;
        h->from_lo[d] = max64(0, olo - nlo);
        h->from_hi[d] = max64(0, nhi - ohi);
        if (!neighbours_hold(c, l, d, coords[d], nlo, nhi))
            h->gather = 1;
        h->in_ext[d] += h->from_lo[d] + h->from_hi[d];
    }
}

/* Group-wide, as halo_fwd; returns whether anything is exchanged. */
int halo_bwd(const lower_ctx *c, int l, int i, halo_t *h)
{
    const glayer *L = &c->g->layers[l];
    int any = 0, gather = 0;
    bwd_halo_of_shard(c, l, i, c->coords, h);
    int co[GRAPH_MAX_SP];
    for (int k = 0; axis_coords(c, k, co); k++) {
        halo_t o;
        bwd_halo_of_shard(c, l, i, co, &o);
        gather |= o.gather;
        for (int d = 0; d < GRAPH_MAX_SP; d++)
            any |= o.from_lo[d] || o.from_hi[d];
    }
    if (gather) {
        h->gather = 1;
        for (int d = 0; d < L->out.nsp; d++) {
            h->in_ext[d] = L->out.sp[d];
            h->from_lo[d] = h->from_hi[d] = 0;
        }
    }
    return any || gather;
}

/* Max pooling's backward also needs the input rows of the windows of the
 * output rows it receives (to find each window's maximum): the input
 * exchanged again, as far as those windows reach. */
static void pool_bwd_shard(const lower_ctx *c, int l, int i, const int *co,
                           halo_t *h)
{
    const glayer *L = &c->g->layers[l], *I = &c->g->layers[i];
    memset(h, 0, sizeof *h);
    for (int d = 0; d < I->out.nsp; d++) {
        if (!layout_is_split(c, i, d))
            continue;
        if (!layout_is_split(c, l, d)) {
            h->gather = 1;
            continue;
        }
        int64_t ilo, ihi, nlo, nhi, alo, ahi;
        plan_range(c->p, c->g, i, d, co[d], &ilo, &ihi);
        alo = ahi = ilo; /* an empty shard needs nothing */
        if (ihi > ilo) {
            grad_need_range(L, d, ilo, ihi, &nlo, &nhi);
            if (nhi > nlo)
                need_range(L, I, d, nlo, nhi, &alo, &ahi);
        }
        if (ahi <= alo)
            alo = ahi = ilo;
        h->from_lo[d] = max64(0, ilo - alo);
        h->from_hi[d] = max64(0, ahi - ihi);
        if (!neighbours_hold(c, i, d, co[d], alo, ahi))
            h->gather = 1;
    }
}

int halo_pool_bwd(const lower_ctx *c, int l, int i, halo_t *out)
{
    int any = 0, gather = 0, co[GRAPH_MAX_SP];
    for (int k = 0; axis_coords(c, k, co); k++) {
        halo_t h;
        pool_bwd_shard(c, l, i, co, &h);
        gather |= h.gather;
        for (int d = 0; d < GRAPH_MAX_SP; d++)
            any |= h.from_lo[d] || h.from_hi[d];
    }
    pool_bwd_shard(c, l, i, c->coords, out);
    out->gather = gather;
    if (gather)
        for (int d = 0; d < GRAPH_MAX_SP; d++)
            out->from_lo[d] = out->from_hi[d] = 0;
    return any || gather;
}

/* Whether layer l exchanges anything for input i: any split dimension the
 * output keeps split and whose window reaches past a shard, on any shard. */
int halo_needed(const lower_ctx *c, int l, int i)
{
    int co[GRAPH_MAX_SP];
    for (int k = 0; axis_coords(c, k, co); k++) {
        halo_t o;
        halo_of_shard(c, l, i, co, &o);
        if (o.gather)
            return 1;
        for (int d = 0; d < GRAPH_MAX_SP; d++)
            if (o.from_lo[d] || o.from_hi[d])
                return 1;
    }
    return 0;
}

/* Whether XLA masks the haloed buffer along split dimension d
 * (ExchangeHaloAndGetValidData, mask_invalid_region): when the window pads
 * the full shape there, or the split is uneven.  The input gradient's
 * window is the transposed one, padded wherever the kernel is wider than
 * one.  The weight gradient's exchange is unmasked (backward == 2) except
 * for uneven shards (PadWithZero). */
static int halo_masked(const lower_ctx *c, const glayer *L, const glayer *I,
                       int d, int backward)
{
    if (I->out.sp[d] % c->p->factor[d] != 0)
        return 1;
    if (backward == 2)
        return 0;
    if (backward == 1)
        return L->kernel[d] > 1;
    return L->pad_lo[d] > 0 || L->pad_hi[d] > 0;
}

/* The HBM passes XLA's ExchangeHaloAndGetValidData makes for one split
 * dimension once its halos have arrived: a concatenate of the halos and
 * the shard (xla.halo_copy), and the select that masks the window's
 * padding.  Fused (xla.halo_fused, [U]) they are one pass; unfused, the
 * mask is a second read and write of the same buffer.  `ext` holds the
 * extents after this dimension's halos were added. */
static void emit_reshard_passes(lower_ctx *c, int phase, int l, const glayer *I,
                                const int64_t ext[], int64_t ch, int masked)
{
    if (!c->hw->xla_halo_copy)
        return;
    double bytes = layout_bytes(c, I->out.nsp, ext, ch, I->dtype_bytes);
    double elems = c->B * (double)ch;
    for (int d = 0; d < I->out.nsp; d++)
        elems *= (double)ext[d];
    int npass = 1 + (masked && !c->hw->xla_halo_fused);
    for (int k = 0; k < npass; k++)
        tile_pass_fx(c, FX_NONE, phase, l, bytes, bytes, elems, k == 0 ? 1 : 3);
}

/* Emits the exchange for input i of layer l: of the input itself
 * (forward, backward == 0), of layer l's output gradient (backward == 1;
 * h from halo_bwd), or of the input again for the weight gradient
 * (backward == 2).  Every shard of the group emits the same collectives;
 * they carry the fx tag of the product that reads what they bring. */
void halo_exchange(lower_ctx *c, int phase, int l, int i, const halo_t *h,
                   int backward)
{
    const glayer *L = &c->g->layers[l], *I = &c->g->layers[i];
    int t = backward == 1 ? l : i; /* the tensor that travels */
    const glayer *T = &c->g->layers[t];
    int fx = backward == 1 ? FX_DX : backward == 2 ? FX_DW : FX_FWD;
    if (h->gather) {
        double full =
            layout_bytes(c, T->out.nsp, T->out.sp, T->out.c, T->dtype_bytes);
        lower_emit_fx(c, fx, FW_ALLGATHER, phase, l, (int64_t)ceil(full), 0, 0,
                      0);
        return;
    }
    /* Dimension by dimension, each exchange carrying the halos of the
     * dimensions exchanged before it (corners travel in two hops, as in
     * XLA's ExchangeHalo). */
    int64_t ext[GRAPH_MAX_SP];
    layout_local_out(c, t, ext, NULL);
    for (int d = 0; d < T->out.nsp; d++) {
        if (!layout_is_split(c, i, d) || !layout_is_split(c, l, d))
            continue;
        int64_t rl = h->from_lo[d], rh = h->from_hi[d];
        int64_t row[GRAPH_MAX_SP];
        memcpy(row, ext, sizeof row);
        row[d] = 1;
        double rb = layout_bytes(c, T->out.nsp, row, T->out.c, T->dtype_bytes);
        lower_emit_fx(
            c, fx, FW_HALO, phase, l, d, (int64_t)ceil(rb * (double)rl),
            (int64_t)ceil(rb * (double)rh), rl * ((int64_t)1 << 32) + rh);
        ext[d] += rl + rh;
        int masked = halo_masked(c, L, I, d, backward);
        if (rl + rh > 0 || masked)
            emit_reshard_passes(c, phase, l, T, ext, T->out.c, masked);
    }
}

/* The weight gradient's own exchange of the layer's input: XLA partitions
 * the weight-gradient convolution (both operands split spatially) with
 * PartitionConvolutionWithSpatialDimensionHaloExchangeOnLHS, which sends
 * the activation's halos again, concatenated per dimension, unmasked
 * (openxla/xla spmd/convolution_handler.cc; xla.dw_halo).  A window too
 * wide for the neighbours is all-gathered again, as the forward pass did:
 * only the shard is saved for the backward pass, not the forward's
 * gathered window. */
void halo_dw_exchange(lower_ctx *c, int l, int i, const halo_t *h)
{
    if (!c->hw->xla_dw_halo || !halo_needed(c, l, i))
        return;
    halo_exchange(c, PHASE_BWD, l, i, h, 2);
}
