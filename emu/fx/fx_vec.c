/* fx_vec: the vector passes of a --functional run (fx_internal.h):
 * batchnorm, pooling, upsampling, elementwise layers, global average
 * pooling, and their gradients; the views (flatten, concat) and fused
 * activations that have no instructions of their own. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "emu/fx/fx_internal.h"
#include "emu/fx/fxdata.h"

#define SP GRAPH_MAX_SP
#define BN_EPS 1e-3f /* Keras BatchNormalization's default epsilon */

static tpu_status fwd_elementwise(fx_state *x, int core, int l, tpu_error *err);
static tpu_status elementwise_values(fx_state *x, int core, int l,
                                     const fxt_tens *const *ins, fxt_tens *o);

/* A forward pass's operands: what it reads (its input window when `win`,
 * else input 0's shard) and its fresh output. */
static tpu_status fwd_io(fx_state *x, int core, int l, int win,
                         const fxt_tens **in, fxt_tens **o, tpu_error *err)
{
    tpu_status rc = win ? fx_fwin_of(x, core, l, in, err)
                        : fx_act_of(x, core, x->g->layers[l].in[0], in, err);
    return rc ? rc : fx_new_act(x, core, l, o, err);
}

/* Whether a and b hold the same examples and positions (an add's or
 * concat's operand that does not holds more: a replicated operand the
 * layer slices, emu/plan.h). */
static int same_box(const fxt_tens *a, const fxt_tens *b)
{
    for (int d = 0; d < SP; d++)
        if (a->lo[d] != b->lo[d] || a->ext[d] != b->ext[d])
            return 0;
    return a->B == b->B;
}

/* Copies the channels [off, off + dst->C) of src at every position of
 * dst's box into dst (added when `add`): the slice of a replicated
 * operand, or a gathered gradient's part for it.  src must hold the box. */
static tpu_status box_copy(fx_state *x, int core, int l, fxt_tens *dst,
                           const fxt_tens *src, int64_t off, int add,
                           tpu_error *err)
{
    int64_t npos = fxt_npos(dst);
    for (int64_t b = 0; b < dst->B; b++)
        for (int64_t pos = 0; pos < npos; pos++) {
            int64_t loc[SP], g[SP], sl[SP];
            int miss = 0;
            fxt_global(dst, pos, loc, g);
            if (fxt_locate(src, g, sl, &miss) <= 0)
                return fx_missing(err, x, core, l, "reshard", miss);
            float *d = &dst->v[fxt_at(dst, b, loc, 0)];
            const float *v = &src->v[fxt_at(src, b, sl, off)];
            for (int64_t ch = 0; ch < dst->C; ch++)
                d[ch] = add ? d[ch] + v[ch] : v[ch];
        }
    return TPU_OK;
}

/* Input k of layer l as l's box on this core (o: l's output): the input's
 * own shard, or a copy of the box sliced out of a replicated operand into
 * tmp (freed by the caller with fxt_free). */
tpu_status fxv_operand_box(fx_state *x, int core, int l, int k,
                           const fxt_tens *o, fxt_tens *tmp,
                           const fxt_tens **out, tpu_error *err)
{
    const fxt_tens *in;
    tpu_status rc = fx_act_of(x, core, x->g->layers[l].in[k], &in, err);
    if (rc || same_box(in, o)) {
        *out = in;
        return rc;
    }
    fxt_copy_shape(tmp, o);
    tmp->C = in->C;
    if ((rc = fxt_alloc(tmp, err)) ||
        (rc = box_copy(x, core, l, tmp, in, 0, 0, err)))
        return rc;
    *out = tmp;
    return TPU_OK;
}

/* Batchnorm's normalized x of element i (channel ch): the statistics are
 * bn[2C..3C) (mean) and bn[3C..4C) (1 / stddev). */
static float bn_xhat(const float *x, const float *bn, int64_t C, int64_t i,
                     int64_t ch)
{
    return (x[i] - bn[2 * C + ch]) * bn[3 * C + ch];
}

/* Upsampling's factor along dim d (1 past the layer's spatial dims). */
static int64_t up_factor(const glayer *L, int d)
{
    return d < L->out.nsp ? fxt_dflt(L->factor[d]) : 1;
}

/* Layers without instructions of their own (flatten, concat, a relu fused
 * into its producer's pass) are written in place by their producers: their
 * values are formed when first read, in their own dtype (an f32 producer
 * writing into a bf16 concat buffer rounds). */
tpu_status fxv_lazy_forward(fx_state *x, int core, int l, tpu_error *err)
{
    const glayer *L = &x->g->layers[l];
    fxt_tens *o;
    const fxt_tens *in;
    tpu_status rc;
    switch (L->op) {
    case GOP_FLATTEN: {
        if ((rc = fwd_io(x, core, l, 1, &in, &o, err)))
            return rc;
        int64_t np = 1;
        for (int d = 0; d < SP; d++)
            np *= in->gext[d];
        for (int64_t b = 0; b < o->B; b++)
            for (int64_t pos = 0; pos < np; pos++) {
                int64_t g[SP], li[SP], q = pos;
                for (int d = SP - 1; d >= 0; d--) {
                    g[d] = q % in->gext[d];
                    q /= in->gext[d];
                }
                int miss = 0, got = fxt_locate(in, g, li, &miss);
                if (got < 0)
                    return fx_missing(err, x, core, l, "flatten", miss);
                /* the output is whole: a per-ROI flatten's rows follow
                 * on in the same order */
                float *dst = &o->v[b * fxt_example(o) + pos * in->C];
                const float *src = got ? &in->v[fxt_at(in, b, li, 0)] : NULL;
                for (int64_t ch = 0; ch < in->C; ch++)
                    dst[ch] = fxt_round(src ? src[ch] : 0.0f, L->dtype_bytes);
            }
        return TPU_OK;
    }
    case GOP_CONCAT: {
        if ((rc = fx_new_act(x, core, l, &o, err)))
            return rc;
        int64_t off = 0;
        for (int k = 0; k < L->n_in; k++) {
            fxt_tens tmp = {0};
            if ((rc = fxv_operand_box(x, core, l, k, o, &tmp, &in, err))) {
                fxt_free(&tmp);
                return rc;
            }
            int64_t n = o->B * fxt_npos(o);
            for (int64_t r = 0; r < n; r++)
                for (int64_t ch = 0; ch < in->C; ch++)
                    o->v[r * o->C + off + ch] =
                        fxt_round(in->v[r * in->C + ch], L->dtype_bytes);
            off += in->C;
            fxt_free(&tmp);
        }
        return TPU_OK;
    }
    case GOP_RELU:
    case GOP_SIGMOID:
        return fwd_elementwise(x, core, l, err);
    case GOP_RESHAPE:
        return fxo_reshape_forward(x, core, l, err);
    default:
        return tpu_fail(err, TPU_ERR_SYSTEM,
                        "internal: functional: core %d reads layer '%s' "
                        "before its firmware computed it",
                        core, L->name);
    }
}

/* ---- forward ------------------------------------------------------------ */

/* Per-channel sums of x and x^2 over this core's shard (fp32, in storage
 * order): batchnorm's statistics before any all-reduce. */
void fxv_bn_local_stats(const fxt_tens *in, float *sum, float *sq)
{
    int64_t rows = in->B * fxt_npos(in);
    for (int64_t ch = 0; ch < in->C; ch++)
        sum[ch] = sq[ch] = 0.0f;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t ch = 0; ch < in->C; ch++) {
            float v = in->v[r * in->C + ch];
            sum[ch] += v;
            sq[ch] += v * v;
        }
}

/* Training's batch statistics from the sums bn[0..C) and bn[C..2C) over
 * n values: the mean into bn[2C..3C), 1 / stddev into bn[3C..4C). */
static void bn_batch_stats(float *bn, int64_t C, float n)
{
    for (int64_t ch = 0; ch < C; ch++) {
        float mean = bn[ch] / n;
        /* E[x^2] - E[x]^2 in one pass, so one all-reduce carries both
         * sums: the identity XLA's BatchNormExpander and tensorflow/tpu's
         * cross-replica TpuBatchNormalization use for the same reason */
        float var = bn[C + ch] / n - mean * mean;
        if (var < 0.0f)
            var = 0.0f;
        bn[2 * C + ch] = mean;
        bn[3 * C + ch] = 1.0f / sqrtf(var + BN_EPS);
    }
}

static tpu_status fwd_batchnorm(fx_state *x, int core, int l,
                                const fxt_tens *in, fxt_tens *o, tpu_error *err)
{
    fx_core *c = &x->cs[core];
    const glayer *L = &x->g->layers[l];
    int64_t C = L->out.c;
    float *bn = c->bn[l];
    const float *W = fx_wts(x, l);
    if (!x->g->train || L->bn_moving) {
        /* Inference (Keras training=False), or "statistics": "moving"
         * in training, normalises with the moving
         * mean and variance.  tpuemu keeps no trained state: they are a
         * freshly built BatchNormalization's, 0 and 1 (its
         * moving_mean_initializer zeros, moving_variance_initializer
         * ones), so y = gamma x / sqrt(1 + eps) + beta. */
        for (int64_t ch = 0; ch < C; ch++) {
            bn[2 * C + ch] = 0.0f;
            bn[3 * C + ch] = 1.0f / sqrtf(1.0f + BN_EPS);
        }
    } else {
        if (!c->stats_reduced[l])
            fxv_bn_local_stats(in, bn, bn + C);
        bn_batch_stats(bn, C,
                       (float)(x->p->batch * fx_bn_replicas(x) *
                               fx_gpos_count(L)));
    }
    int64_t rows = o->B * fxt_npos(o);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t ch = 0; ch < C; ch++) {
            float xh = bn_xhat(in->v, bn, C, r * C + ch, ch);
            o->v[r * C + ch] = fxt_round(
                xh * fx_gamma(L, W, ch) + fx_beta(L, W, ch), L->dtype_bytes);
        }
    return TPU_OK;
}

/* Dropout's mask: element ch of a position is kept when u >= rate
 * (fxdata.h), by global coordinates; drop_base gives the position's index
 * of channel 0. */
static int64_t drop_base(const fx_state *x, int core, int l, const fxt_tens *t,
                         int64_t b, const int64_t loc[SP])
{
    const glayer *L = &x->g->layers[l];
    int64_t g[SP];
    fxt_offset(t, loc, g);
    int64_t E = gshape_elems(&L->out);
    return (x->step * x->G + fx_gexample(x, core, b)) * E + fxt_gflat(t, g, 0);
}

static int drop_keep(const fx_state *x, int l, int64_t idx)
{
    return fxd_u(x->cfg.seed, FXD_TAG_DROPOUT + (uint64_t)l, (uint64_t)idx) >=
           x->g->layers[l].rate;
}

/* Pooling window of output coordinate og: in-bounds input coordinates.
 * Each position's taps are resolved once (fxt_taps_at); every channel
 * then takes its max and sum over them in tap order. */
static tpu_status fwd_pool(fx_state *x, int core, int l, const fxt_tens *in,
                           fxt_tens *o, tpu_error *err)
{
    const glayer *L = &x->g->layers[l];
    int64_t npos = fxt_npos(o), C = o->C, ex = fxt_example(in);
    fxt_taps tw;
    tpu_status rc = fxt_taps_init(&tw, L, L->out.nsp, 0, err);
    if (rc)
        return rc;
    float *best = malloc(sizeof(float) * (size_t)(2 * C + 1));
    if (!best) {
        fxt_taps_free(&tw);
        return fx_oom(err);
    }
    float *sum = best + C;
    for (int64_t b = 0; b < o->B && !rc; b++)
        for (int64_t pos = 0; pos < npos; pos++) {
            int64_t loc[SP], og[SP];
            int miss = 0;
            fxt_global(o, pos, loc, og);
            if (fxt_taps_at(&tw, og, in, 1, &miss) < 0) {
                rc = fx_missing(err, x, core, l, "pooling", miss);
                break;
            }
            for (int64_t ch = 0; ch < C; ch++) {
                best[ch] = -INFINITY;
                sum[ch] = 0.0f;
            }
            for (int64_t i = 0; i < tw.n; i++) {
                if (tw.off[i] < 0) {
                    for (int64_t ch = 0; ch < C; ch++) {
                        if (0.0f > best[ch])
                            best[ch] = 0.0f;
                        sum[ch] += 0.0f;
                    }
                    continue;
                }
                const float *v = &in->v[b * ex + tw.off[i]];
                for (int64_t ch = 0; ch < C; ch++) {
                    if (v[ch] > best[ch])
                        best[ch] = v[ch];
                    sum[ch] += v[ch];
                }
            }
            float *dst = &o->v[fxt_at(o, b, loc, 0)];
            for (int64_t ch = 0; ch < C; ch++) {
                float r = L->op == GOP_MAXPOOL
                              ? best[ch]
                              : (tw.n ? sum[ch] / (float)tw.n : 0.0f);
                dst[ch] = fxt_round(r, L->dtype_bytes);
            }
        }
    free(best);
    fxt_taps_free(&tw);
    return rc;
}

static tpu_status fwd_upsample(fx_state *x, int core, int l, const fxt_tens *in,
                               fxt_tens *o, tpu_error *err)
{
    const glayer *L = &x->g->layers[l];
    int64_t npos = fxt_npos(o);
    for (int64_t b = 0; b < o->B; b++)
        for (int64_t pos = 0; pos < npos; pos++) {
            int64_t loc[SP], gi[SP], li[SP];
            fxt_global(o, pos, loc, gi);
            for (int d = 0; d < SP; d++)
                gi[d] /= up_factor(L, d);
            int miss = 0, got = fxt_locate(in, gi, li, &miss);
            if (got < 0)
                return fx_missing(err, x, core, l, "upsample", miss);
            float *dst = &o->v[fxt_at(o, b, loc, 0)];
            if (got == 0) {
                for (int64_t ch = 0; ch < o->C; ch++)
                    dst[ch] = fxt_round(0.0f, L->dtype_bytes);
                continue;
            }
            const float *src = &in->v[fxt_at(in, b, li, 0)];
            for (int64_t ch = 0; ch < o->C; ch++)
                dst[ch] = fxt_round(src[ch], L->dtype_bytes);
        }
    return TPU_OK;
}

/* Elementwise layers with a pass of their own: every input is taken in
 * the output's box (operand_box), so element i is element i of each. */
static tpu_status fwd_elementwise(fx_state *x, int core, int l, tpu_error *err)
{
    const glayer *L = &x->g->layers[l];
    const fxt_tens *ins[GRAPH_MAX_IN];
    fxt_tens *o, tmp[GRAPH_MAX_IN];
    tpu_status rc;
    memset(tmp, 0, sizeof tmp);
    if ((rc = fx_new_act(x, core, l, &o, err)))
        return rc;
    for (int k = 0; k < L->n_in; k++)
        if ((rc = fxv_operand_box(x, core, l, k, o, &tmp[k], &ins[k], err))) {
            for (int j = 0; j <= k; j++)
                fxt_free(&tmp[j]);
            return rc;
        }
    rc = elementwise_values(x, core, l, ins, o);
    for (int k = 0; k < L->n_in; k++)
        fxt_free(&tmp[k]);
    return rc;
}

static tpu_status elementwise_values(fx_state *x, int core, int l,
                                     const fxt_tens *const *ins, fxt_tens *o)
{
    const glayer *L = &x->g->layers[l];
    int64_t n = fxt_elems(o);
    const float *v = ins[0]->v;
    int dt = L->dtype_bytes;
    switch (L->op) {
    case GOP_RELU:
        for (int64_t i = 0; i < n; i++)
            o->v[i] = fxt_round(v[i] > 0.0f ? v[i] : 0.0f, dt);
        break;
    case GOP_SIGMOID:
        for (int64_t i = 0; i < n; i++)
            o->v[i] = fxt_round(1.0f / (1.0f + expf(-v[i])), dt);
        break;
    case GOP_DROPOUT:
        if (x->g->train) {
            int64_t npos = fxt_npos(o), C = o->C;
            for (int64_t b = 0, i = 0; b < o->B; b++)
                for (int64_t pos = 0; pos < npos; pos++) {
                    int64_t loc[SP];
                    fxt_decode(o, pos, loc);
                    int64_t base = drop_base(x, core, l, o, b, loc);
                    for (int64_t ch = 0; ch < C; ch++, i++)
                        o->v[i] = fxt_round(
                            drop_keep(x, l, base + ch)
                                ? v[i] / (1.0f - (float)L->rate)
                                : 0.0f,
                            dt);
                }
            break;
        }
        for (int64_t i = 0; i < n; i++)
            o->v[i] = fxt_round(v[i], dt);
        break;
    case GOP_ADD:
        for (int64_t i = 0; i < n; i++) {
            float r = v[i];
            for (int k = 1; k < L->n_in; k++)
                r += ins[k]->v[i];
            o->v[i] = fxt_round(r, dt);
        }
        break;
    default:
        for (int64_t i = 0; i < n; i++)
            o->v[i] = fxt_round(v[i], dt);
    }
    /* A relu fused into this add's pass is formed when read. */
    return TPU_OK;
}

/* Global average pooling: this core's positions, divided by all of them;
 * the all-reduce adds the other shards' parts. */
static tpu_status fwd_gap(fx_state *x, int core, int l, const fxt_tens *in,
                          fxt_tens *o, tpu_error *err)
{
    const glayer *L = &x->g->layers[l];
    float P = (float)fx_gpos_count(&x->g->layers[L->in[0]]);
    int64_t npos = fxt_npos(in);
    /* A split input's partial means are summed by the all-reduce, which
     * rounds the total to the layer's dtype. */
    int split = 0;
    for (int d = 0; d < SP; d++)
        split |= fx_is_split(x, L->in[0], d);
    for (int64_t b = 0; b < o->B; b++)
        for (int64_t ch = 0; ch < o->C; ch++) {
            float s = 0.0f;
            for (int64_t pos = 0; pos < npos; pos++)
                s += in->v[(b * npos + pos) * in->C + ch];
            o->v[b * o->C + ch] =
                split ? s / P : fxt_round(s / P, L->dtype_bytes);
        }
    return TPU_OK;
}

/* ---- backward ----------------------------------------------------------- */

/* Adds src (a shard of layer `from`'s gradient) into layer `to`'s gradient
 * element by element, times mask where given. */
static tpu_status add_grad(fx_state *x, int core, int to, const fxt_tens *src,
                           const float *scale, tpu_error *err)
{
    if (!x->g->layers[to].needs_grad)
        return TPU_OK;
    fxt_tens *gt;
    tpu_status rc = fx_grad_of(x, core, to, &gt, err);
    if (rc)
        return rc;
    int64_t n = fxt_elems(gt);
    if (fxt_elems(src) != n)
        return tpu_fail(err, TPU_ERR_SYSTEM,
                        "internal: functional: gradient shapes differ");
    for (int64_t i = 0; i < n; i++)
        gt->v[i] += scale ? src->v[i] * scale[i] : src->v[i];
    return TPU_OK;
}

/* dX += dY times the activation's derivative, formed from its output
 * element by element (add_grad's sum with the mask computed in place). */
static tpu_status bwd_act(fx_state *x, int core, int l, tpu_error *err)
{
    const glayer *L = &x->g->layers[l];
    const fxt_tens *y;
    fxt_tens *gy, *gt;
    tpu_status rc;
    if ((rc = fx_dy_of(x, core, l, &gy, err)) ||
        (rc = fx_act_of(x, core, l, &y, err)))
        return rc;
    if (!x->g->layers[L->in[0]].needs_grad)
        return TPU_OK;
    if ((rc = fx_grad_of(x, core, L->in[0], &gt, err)))
        return rc;
    int64_t n = fxt_elems(gt);
    if (fxt_elems(gy) != n)
        return tpu_fail(err, TPU_ERR_SYSTEM,
                        "internal: functional: gradient shapes differ");
    const float *v = y->v, *dy = gy->v;
    float *dx = gt->v;
    switch (L->op) {
    case GOP_RELU:
        for (int64_t i = 0; i < n; i++)
            dx[i] += dy[i] * (v[i] > 0.0f ? 1.0f : 0.0f);
        break;
    case GOP_SIGMOID:
        for (int64_t i = 0; i < n; i++)
            dx[i] += dy[i] * (v[i] * (1.0f - v[i]));
        break;
    case GOP_DROPOUT:
        if (x->g->train) {
            int64_t npos = fxt_npos(gy), C = gy->C;
            float keep = 1.0f / (1.0f - (float)L->rate);
            for (int64_t b = 0, i = 0; b < gy->B; b++)
                for (int64_t pos = 0; pos < npos; pos++) {
                    int64_t loc[SP];
                    fxt_decode(gy, pos, loc);
                    int64_t base = drop_base(x, core, l, gy, b, loc);
                    for (int64_t ch = 0; ch < C; ch++, i++)
                        dx[i] += dy[i] *
                                 (drop_keep(x, l, base + ch) ? keep : 0.0f);
                }
            break;
        }
        for (int64_t i = 0; i < n; i++)
            dx[i] += dy[i] * 1.0f;
        break;
    default:
        for (int64_t i = 0; i < n; i++)
            dx[i] += dy[i] * 1.0f;
    }
    return TPU_OK;
}

tpu_status fxv_bn_stats(fx_state *x, int core, int l, tpu_error *err)
{
    fx_core *c = &x->cs[core];
    const glayer *L = &x->g->layers[l];
    const fxt_tens *in;
    fxt_tens *gy;
    float *wg;
    tpu_status rc;
    if ((rc = fx_dy_of(x, core, l, &gy, err)) ||
        (rc = fx_act_of(x, core, L->in[0], &in, err)) ||
        (rc = fx_wgrad_of(x, core, l, &wg, err)))
        return rc;
    int64_t C = L->out.c, rows = gy->B * fxt_npos(gy);
    float *bn = c->bn[l];
    for (int64_t ch = 0; ch < C; ch++)
        bn[4 * C + ch] = bn[5 * C + ch] = 0.0f;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t ch = 0; ch < C; ch++) {
            float dy = gy->v[r * C + ch];
            float xh = bn_xhat(in->v, bn, C, r * C + ch, ch);
            bn[4 * C + ch] += dy;
            bn[5 * C + ch] += dy * xh;
        }
    /* gamma and beta (those present): this core's partial sums,
     * all-reduced with the other weight gradients. */
    float *dg = fx_dgamma(L, wg), *db = fx_dbeta(L, wg);
    for (int64_t ch = 0; ch < C; ch++) {
        if (dg)
            dg[ch] += bn[5 * C + ch];
        if (db)
            db[ch] += bn[4 * C + ch];
    }
    return TPU_OK;
}

static tpu_status bwd_bn(fx_state *x, int core, int l, tpu_error *err)
{
    fx_core *c = &x->cs[core];
    const glayer *L = &x->g->layers[l];
    const fxt_tens *in;
    fxt_tens *gy, *gx;
    tpu_status rc;
    if (!x->g->layers[L->in[0]].needs_grad)
        return TPU_OK;
    if ((rc = fx_grad_of(x, core, l, &gy, err)) ||
        (rc = fx_act_of(x, core, L->in[0], &in, err)) ||
        (rc = fx_grad_of(x, core, L->in[0], &gx, err)))
        return rc;
    int64_t C = L->out.c, rows = gy->B * fxt_npos(gy);
    const float *bn = c->bn[l], *W = fx_wts(x, l);
    if (L->bn_moving) { /* constant statistics: a per-channel scale */
        for (int64_t r = 0; r < rows; r++)
            for (int64_t ch = 0; ch < C; ch++)
                gx->v[r * C + ch] +=
                    gy->v[r * C + ch] * (fx_gamma(L, W, ch) * bn[3 * C + ch]);
        return TPU_OK;
    }
    float n = (float)(x->p->batch * fx_bn_replicas(x) * fx_gpos_count(L));
    for (int64_t r = 0; r < rows; r++)
        for (int64_t ch = 0; ch < C; ch++) {
            float dy = gy->v[r * C + ch];
            float xh = bn_xhat(in->v, bn, C, r * C + ch, ch);
            gx->v[r * C + ch] +=
                fx_gamma(L, W, ch) * bn[3 * C + ch] / n *
                (n * dy - bn[4 * C + ch] - xh * bn[5 * C + ch]);
        }
    return TPU_OK;
}

/* Upsampling's gradient at input coordinate gp: the sum over the outputs
 * gp*f .. gp*f + f-1 along every dim, in that order, of each channel. */
static tpu_status bwd_up_pos(fx_state *x, int core, int l, const fxt_tens *gw,
                             int64_t b, const int64_t gp[SP], float *acc,
                             tpu_error *err)
{
    const glayer *L = &x->g->layers[l];
    int64_t nf = 1, f[SP];
    for (int d = 0; d < SP; d++) {
        f[d] = up_factor(L, d);
        nf *= f[d];
    }
    for (int64_t q = 0; q < nf; q++) {
        int64_t go[SP], lo[SP], qq = q;
        for (int d = SP - 1; d >= 0; d--) {
            go[d] = gp[d] * f[d] + qq % f[d];
            qq /= f[d];
        }
        int miss = 0, got = fxt_locate(gw, go, lo, &miss);
        if (got < 0)
            return fx_missing(err, x, core, l, "upsample gradient", miss);
        if (got == 0) {
            for (int64_t ch = 0; ch < gw->C; ch++)
                acc[ch] += 0.0f;
            continue;
        }
        const float *dy = &gw->v[fxt_at(gw, b, lo, 0)];
        for (int64_t ch = 0; ch < gw->C; ch++)
            acc[ch] += dy[ch];
    }
    return TPU_OK;
}

/* Pooling's gradient at input coordinate gp: over the outputs whose
 * windows hold it (tw), in tap order, each channel's share of dY (its
 * argmax's, or 1/count of it).  tin and best/arg are workspaces. */
static tpu_status bwd_pool_pos(fx_state *x, int core, int l, fxt_taps *tw,
                               fxt_taps *tin, const fxt_tens *gw,
                               const fxt_tens *gx, const fxt_tens *xin,
                               int64_t b, const int64_t gp[SP], float *acc,
                               float *best, int64_t *arg, tpu_error *err)
{
    const glayer *L = &x->g->layers[l];
    int nsp = L->out.nsp;
    int64_t C = gx->C, win = fxt_kernel_taps(L);
    int dmiss = 0;
    /* The taps before a missing row of dY are still taken (their window
     * reads may fail first, as element by element they did). */
    int dgot = fxt_taps_at(tw, gp, gw, 1, &dmiss);
    for (int64_t i = 0; i < tw->n; i++) {
        int64_t t = tw->tap[i], go[SP];
        fxt_tap_reach(L, nsp, 1, gp, t, go);
        const float *dy = tw->off[i] < 0 ? NULL
                                         : &gw->v[b * fxt_example(gw) +
                                                  tw->off[i]];
        if (L->op == GOP_MAXPOOL) {
            int m2 = 0;
            if (fxt_taps_at(tin, go, xin, 1, &m2) < 0)
                return tpu_fail(err, TPU_ERR_INPUT,
                                "functional mode: maxpool '%s' backward "
                                "needs input rows of a neighbour's window "
                                "(a pooling window across an uneven shard "
                                "boundary); not modelled yet",
                                L->name);
            for (int64_t ch = 0; ch < C; ch++) {
                best[ch] = -INFINITY;
                arg[ch] = -1;
            }
            for (int64_t j = 0; j < tin->n; j++) {
                const float *v = tin->off[j] < 0
                                     ? NULL
                                     : &xin->v[b * fxt_example(xin) +
                                               tin->off[j]];
                for (int64_t ch = 0; ch < C; ch++) {
                    float vv = v ? v[ch] : 0.0f;
                    if (vv > best[ch]) {
                        best[ch] = vv;
                        arg[ch] = tin->tap[j];
                    }
                }
            }
            for (int64_t ch = 0; ch < C; ch++)
                acc[ch] += arg[ch] == t ? (dy ? dy[ch] : 0.0f) : 0.0f;
            continue;
        }
        int64_t cnt = 0;
        for (int64_t u = 0; u < win; u++) {
            int64_t gi[SP];
            if (fxt_tap_reach(L, nsp, 0, go, u, gi) &&
                fxt_inside(gi, gx->gext, nsp))
                cnt++;
        }
        for (int64_t ch = 0; ch < C; ch++)
            acc[ch] += cnt ? (dy ? dy[ch] : 0.0f) / (float)cnt : 0.0f;
    }
    if (dgot < 0)
        return fx_missing(err, x, core, l, "pooling gradient", dmiss);
    return TPU_OK;
}

/* Pooling and upsampling: each input row of this core's shard collects
 * from the output rows whose windows hold it (the gradient window). */
static tpu_status bwd_window(fx_state *x, int core, int l, tpu_error *err)
{
    const glayer *L = &x->g->layers[l];
    if (!x->g->layers[L->in[0]].needs_grad)
        return TPU_OK;
    const fxt_tens *gw, *xin = NULL;
    fxt_tens *gx;
    tpu_status rc;
    if ((rc = fx_gwin_of(x, core, l, &gw, err)) ||
        (rc = fx_grad_of(x, core, L->in[0], &gx, err)))
        return rc;
    if (L->op == GOP_MAXPOOL && (rc = fx_fwin_of(x, core, l, &xin, err)))
        return rc;
    int64_t npos = fxt_npos(gx), C = gx->C;
    fxt_taps tw, tin;
    memset(&tw, 0, sizeof tw);
    memset(&tin, 0, sizeof tin);
    float *acc = malloc(sizeof(float) * (size_t)(2 * C + 1));
    float *best = acc ? acc + C : NULL; /* no arithmetic on NULL */
    int64_t *arg = malloc(sizeof(int64_t) * (size_t)(C + 1));
    if (!acc || !arg)
        rc = fx_oom(err);
    else if (L->op != GOP_UPSAMPLE &&
             (!(rc = fxt_taps_init(&tw, L, L->out.nsp, 1, err))))
        rc = fxt_taps_init(&tin, L, L->out.nsp, 0, err);
    for (int64_t b = 0; b < gx->B && !rc; b++)
        for (int64_t pos = 0; pos < npos && !rc; pos++) {
            int64_t loc[SP], gp[SP];
            fxt_global(gx, pos, loc, gp);
            for (int64_t ch = 0; ch < C; ch++)
                acc[ch] = 0.0f;
            rc = L->op == GOP_UPSAMPLE
                     ? bwd_up_pos(x, core, l, gw, b, gp, acc, err)
                     : bwd_pool_pos(x, core, l, &tw, &tin, gw, gx, xin, b, gp,
                                    acc, best, arg, err);
            float *dst = &gx->v[fxt_at(gx, b, loc, 0)];
            for (int64_t ch = 0; ch < C && !rc; ch++)
                dst[ch] += acc[ch];
        }
    fxt_taps_free(&tw);
    fxt_taps_free(&tin);
    free(acc);
    free(arg);
    return rc;
}

static tpu_status bwd_gap(fx_state *x, int core, int l, tpu_error *err)
{
    const glayer *L = &x->g->layers[l];
    if (!x->g->layers[L->in[0]].needs_grad)
        return TPU_OK;
    fxt_tens *gy, *gx;
    tpu_status rc;
    if ((rc = fx_dy_of(x, core, l, &gy, err)) ||
        (rc = fx_grad_of(x, core, L->in[0], &gx, err)))
        return rc;
    float P = (float)fx_gpos_count(&x->g->layers[L->in[0]]);
    int64_t npos = fxt_npos(gx);
    for (int64_t b = 0; b < gx->B; b++)
        for (int64_t pos = 0; pos < npos; pos++)
            for (int64_t ch = 0; ch < gx->C; ch++)
                gx->v[(b * npos + pos) * gx->C + ch] +=
                    gy->v[b * gy->C + ch] / P;
    return TPU_OK;
}

/* Input k's part of an add's or concat's output gradient gy (its channels
 * from off): added into the input's gradient box by box, or, for a
 * replicated operand the layer sliced, from dY as the group gathered it
 * (firmware/lower.c emits the all-gather). */
static tpu_status operand_grad(fx_state *x, int core, int l, int k,
                               const fxt_tens *gy, int64_t off,
                               tpu_error *err)
{
    int in = x->g->layers[l].in[k];
    if (!x->g->layers[in].needs_grad)
        return TPU_OK;
    fxt_tens *gk;
    const fxt_tens *src = gy;
    tpu_status rc = fx_grad_of(x, core, in, &gk, err);
    if (!rc && !same_box(gk, gy))
        rc = fx_gwin_of(x, core, l, &src, err);
    if (!rc && x->g->layers[l].op == GOP_ADD && same_box(gk, src))
        return add_grad(x, core, in, src, NULL, err);
    return rc ? rc : box_copy(x, core, l, gk, src, off, 1, err);
}

/* Layers whose backward has no instructions: add (its inputs' gradients
 * alias dY), concat and flatten (views), a relu fused into its producer's
 * pass (the producer's backward reads its mask), and the loss (whose
 * gradient came out of the forward pass). */
tpu_status fxv_lazy_backward(fx_state *x, int core, int l, tpu_error *err)
{
    const glayer *L = &x->g->layers[l];
    fxt_tens *gy;
    tpu_status rc;
    if (L->op == GOP_INPUT)
        return TPU_OK;
    if (L->op == GOP_LOSS)
        return fxl_backward(x, core, l, err);
    if (!L->needs_grad)
        return TPU_OK; /* nothing at or below it trains */
    int data_only = 1;
    for (int k = 0; k < L->n_in; k++)
        data_only &= x->g->layers[L->in[k]].op == GOP_INPUT;
    if (data_only)
        return TPU_OK; /* no gradient to pass (the lowering emits none) */
    if ((rc = fx_grad_of(x, core, l, &gy, err)))
        return rc;
    switch (L->op) {
    case GOP_ADD:
        for (int k = 0; k < L->n_in; k++)
            if ((rc = operand_grad(x, core, l, k, gy, 0, err)))
                return rc;
        return TPU_OK;
    case GOP_RELU:
    case GOP_SIGMOID:
    case GOP_DROPOUT:
        return bwd_act(x, core, l, err);
    case GOP_CONCAT: {
        int64_t off = 0;
        for (int k = 0; k < L->n_in; k++) {
            if ((rc = operand_grad(x, core, l, k, gy, off, err)))
                return rc;
            off += x->g->layers[L->in[k]].out.c;
        }
        return TPU_OK;
    }
    case GOP_FLATTEN: {
        int in = L->in[0];
        if (x->g->layers[in].op == GOP_INPUT)
            return TPU_OK;
        fxt_tens *gx;
        if ((rc = fx_grad_of(x, core, in, &gx, err)))
            return rc;
        int64_t npos = fxt_npos(gx);
        for (int64_t b = 0; b < gx->B; b++)
            for (int64_t pos = 0; pos < npos; pos++) {
                int64_t loc[SP], g[SP];
                fxt_global(gx, pos, loc, g);
                float *dst = &gx->v[fxt_at(gx, b, loc, 0)];
                const float *src =
                    &gy->v[b * fxt_example(gy) + fxt_gflat(gx, g, 0)];
                for (int64_t ch = 0; ch < gx->C; ch++)
                    dst[ch] += src[ch];
            }
        return TPU_OK;
    }
    case GOP_RESHAPE:
        return fxo_reshape_backward(x, core, l, err);
    default:
        return tpu_fail(err, TPU_ERR_SYSTEM,
                        "internal: functional: layer '%s' has no backward "
                        "instructions",
                        L->name);
    }
}

/* ---- dispatch ----------------------------------------------------------- */

/* A one-input forward pass, given its operands (fwd_io). */
typedef tpu_status (*fwd_pass)(fx_state *x, int core, int l, const fxt_tens *in,
                               fxt_tens *o, tpu_error *err);

static tpu_status run_fwd(fx_state *x, int core, int l, int win, fwd_pass fn,
                          tpu_error *err)
{
    const fxt_tens *in;
    fxt_tens *o;
    tpu_status rc = fwd_io(x, core, l, win, &in, &o, err);
    return rc ? rc : fn(x, core, l, in, o, err);
}

tpu_status fxv_forward(fx_state *x, int core, int l, tpu_error *err)
{
    switch (x->g->layers[l].op) {
    case GOP_BATCHNORM:
        return run_fwd(x, core, l, 0, fwd_batchnorm, err);
    case GOP_MAXPOOL:
    case GOP_AVGPOOL:
        return run_fwd(x, core, l, 1, fwd_pool, err);
    case GOP_UPSAMPLE:
        return run_fwd(x, core, l, 1, fwd_upsample, err);
    case GOP_GAP:
        return run_fwd(x, core, l, 0, fwd_gap, err);
    case GOP_LOSS:
        return fxl_forward(x, core, l, err);
    case GOP_ELEMWISE:
    case GOP_ACT:
        return fxo_forward(x, core, l, err);
    case GOP_ROI_ALIGN:
        return fxr_forward(x, core, l, err);
    case GOP_LAYERNORM:
    case GOP_GROUPNORM:
    case GOP_NORMALIZE:
    case GOP_PAD:
    case GOP_CROP:
    case GOP_RESIZE:
    case GOP_GMAXPOOL:
        return fxo_more_forward(x, core, l, err);
    default:
        return fwd_elementwise(x, core, l, err);
    }
}

tpu_status fxv_backward(fx_state *x, int core, int l, tpu_error *err)
{
    switch (x->g->layers[l].op) {
    case GOP_BATCHNORM:
        return bwd_bn(x, core, l, err);
    case GOP_MAXPOOL:
    case GOP_AVGPOOL:
    case GOP_UPSAMPLE:
        return bwd_window(x, core, l, err);
    case GOP_GAP:
        return bwd_gap(x, core, l, err);
    case GOP_ELEMWISE:
    case GOP_ACT:
        return fxo_backward(x, core, l, err);
    case GOP_ROI_ALIGN:
        return fxr_backward(x, core, l, err);
    case GOP_LAYERNORM:
    case GOP_GROUPNORM:
    case GOP_NORMALIZE:
    case GOP_PAD:
    case GOP_CROP:
    case GOP_RESIZE:
    case GOP_GMAXPOOL:
        return fxo_more_backward(x, core, l, err);
    default:
        return bwd_act(x, core, l, err);
    }
}
