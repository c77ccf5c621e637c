/* fx_roi: roi_align's values in a --functional run (fx_internal.h;
 * definitions in docs/FUNCTIONAL.md, "roi_align").
 *
 * Each ROI of an example is drawn from the seed (fxdata.h, FXD_TAG_ROI)
 * in the global layout, so every partitioning samples the same points.
 * Each output bin is one bilinear sample at the bin's centre (sampling
 * ratio 1, as the public Mask R-CNN code's multilevel_crop_and_resize).
 * The backward pass scatter-adds each bin's gradient into its 4 rows of
 * the level, in a whole-level buffer: every core that runs the layer takes
 * its part of it, or (a placed layer) the placed core keeps the buffer
 * until its collective hands each core of the replica its part. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "emu/fx/fx_internal.h"
#include "emu/fx/fxdata.h"

#define SP GRAPH_MAX_SP

static int group_core(const fx_state *x, int core, int shard)
{
    return x->p->core_of[x->p->replica_of[core] * x->p->cpr + shard];
}

int fx_runs(const fx_state *x, int core, int l)
{
    int k = graph_core(&x->g->layers[l]);
    return k < 0 || x->p->cpr < 2 || x->p->shard_of[core] == k;
}

/* One ROI: its level and its box in that level's coordinates. */
typedef struct {
    int lev;
    double y0, x0, y1, x1;
} roi_box;

static roi_box roi_of(const fx_state *x, const glayer *L, int64_t gb,
                      int64_t r)
{
    roi_box q;
    uint64_t base = ((uint64_t)(x->step * x->G + gb) * (uint64_t)L->rois +
                     (uint64_t)r) * 5u;
    uint64_t tag = FXD_TAG_ROI;
    q.lev = (int)(fxd_u(x->cfg.seed, tag, base) * L->n_in);
    const gshape *s = &x->g->layers[L->in[q.lev]].out;
    double h = (double)(s->sp[0] - 1), w = (double)(s->sp[1] - 1);
    double a = fxd_u(x->cfg.seed, tag, base + 1) * h;
    double b = fxd_u(x->cfg.seed, tag, base + 2) * h;
    double c = fxd_u(x->cfg.seed, tag, base + 3) * w;
    double d = fxd_u(x->cfg.seed, tag, base + 4) * w;
    q.y0 = a < b ? a : b;
    q.y1 = a < b ? b : a;
    q.x0 = c < d ? c : d;
    q.x1 = c < d ? d : c;
    return q;
}

/* The 4 rows a sample at (y, x) reads in a level of extent h x w, and
 * their weights, in the order both passes use. */
static void roi_taps(double y, double xx, int64_t h, int64_t w,
                     int64_t gy[4], int64_t gx[4], float wt[4])
{
    int64_t yl = (int64_t)floor(y), xl = (int64_t)floor(xx);
    int64_t yh = yl + 1 < h ? yl + 1 : h - 1, xh = xl + 1 < w ? xl + 1 : w - 1;
    float ly = (float)(y - (double)yl), lx = (float)(xx - (double)xl);
    float hy = 1.0f - ly, hx = 1.0f - lx;
    gy[0] = yl, gx[0] = xl, wt[0] = hy * hx;
    gy[1] = yl, gx[1] = xh, wt[1] = hy * lx;
    gy[2] = yh, gx[2] = xl, wt[2] = ly * hx;
    gy[3] = yh, gx[3] = xh, wt[3] = ly * lx;
}

/* Bin (i, j)'s centre in the box. */
static void roi_centre(const glayer *L, const roi_box *q, int64_t i, int64_t j,
                       double *y, double *xx)
{
    *y = q->y0 + ((double)i + 0.5) * (q->y1 - q->y0) / L->roi_out[0];
    *xx = q->x0 + ((double)j + 0.5) * (q->x1 - q->x0) / L->roi_out[1];
}

/* The C channels of level row (gy, gx) of example b: from this core's
 * shard, or, once the levels were gathered, from the group's shard that
 * holds it. */
static tpu_status roi_row(fx_state *x, int core, int l, int in, int64_t b,
                          int64_t gy, int64_t gx, const float **row,
                          tpu_error *err)
{
    int64_t g[SP] = {gy, gx, 0}, loc[SP];
    int miss = 0;
    const fxt_tens *t;
    tpu_status rc = fx_act_of(x, core, in, &t, err);
    if (rc)
        return rc;
    if (fxt_locate(t, g, loc, &miss) > 0) {
        *row = &t->v[fxt_at(t, b, loc, 0)];
        return TPU_OK;
    }
    if (!x->cs[core].have_win[l])
        return fx_missing(err, x, core, l, "roi_align levels", miss);
    for (int k = 0; k < x->p->cpr; k++) {
        int oc = group_core(x, core, k);
        if ((rc = fx_act_of(x, oc, in, &t, err)))
            return rc;
        if (fxt_locate(t, g, loc, &miss) > 0) {
            *row = &t->v[fxt_at(t, b, loc, 0)];
            return TPU_OK;
        }
    }
    return fx_missing(err, x, core, l, "roi_align levels", miss);
}

tpu_status fxr_forward(fx_state *x, int core, int l, tpu_error *err)
{
    const glayer *L = &x->g->layers[l];
    fxt_tens *o;
    tpu_status rc = fx_new_act(x, core, l, &o, err);
    if (rc)
        return rc;
    int64_t C = L->out.c;
    for (int64_t b = 0; b < o->B; b++)
        for (int64_t r = 0; r < L->rois; r++) {
            roi_box q = roi_of(x, L, fx_gexample(x, core, b), r);
            const gshape *s = &x->g->layers[L->in[q.lev]].out;
            for (int64_t i = 0; i < L->roi_out[0]; i++)
                for (int64_t j = 0; j < L->roi_out[1]; j++) {
                    double y, xx;
                    int64_t gy[4], gx[4];
                    float wt[4];
                    roi_centre(L, &q, i, j, &y, &xx);
                    roi_taps(y, xx, s->sp[0], s->sp[1], gy, gx, wt);
                    const float *row[4];
                    for (int t = 0; t < 4; t++)
                        if ((rc = roi_row(x, core, l, L->in[q.lev], b, gy[t],
                                          gx[t], &row[t], err)))
                            return rc;
                    int64_t loc[SP] = {r, i, j};
                    float *dst = &o->v[fxt_at(o, b, loc, 0)];
                    for (int64_t ch = 0; ch < C; ch++) {
                        float v = wt[0] * row[0][ch];
                        v += wt[1] * row[1][ch];
                        v += wt[2] * row[2][ch];
                        v += wt[3] * row[3][ch];
                        dst[ch] = fxt_round(v, L->dtype_bytes);
                    }
                }
        }
    return TPU_OK;
}

/* Offset of level k's example data in the whole-level buffer (per
 * example: every level's rows, in order). */
static int64_t level_off(const fx_state *x, const glayer *L, int k)
{
    int64_t off = 0;
    for (int q = 0; q < k; q++)
        off += gshape_elems(&x->g->layers[L->in[q]].out);
    return off;
}

/* Adds core's part of the whole-level gradient buffer into its gradient
 * shards of the levels that need one. */
static tpu_status roi_take(fx_state *x, int core, int l, const fxt_tens *buf,
                           tpu_error *err)
{
    const glayer *L = &x->g->layers[l];
    for (int k = 0; k < L->n_in; k++) {
        const glayer *I = &x->g->layers[L->in[k]];
        if (!I->needs_grad)
            continue;
        fxt_tens *gx;
        tpu_status rc = fx_grad_of(x, core, L->in[k], &gx, err);
        if (rc)
            return rc;
        int64_t off = level_off(x, L, k), npos = fxt_npos(gx);
        for (int64_t b = 0; b < gx->B; b++)
            for (int64_t pos = 0; pos < npos; pos++) {
                int64_t loc[SP], g[SP];
                fxt_global(gx, pos, loc, g);
                float *dst = &gx->v[fxt_at(gx, b, loc, 0)];
                const float *src =
                    &buf->v[b * buf->C + off + fxt_gflat(gx, g, 0)];
                for (int64_t ch = 0; ch < gx->C; ch++)
                    dst[ch] += src[ch];
            }
    }
    return TPU_OK;
}

tpu_status fxr_backward(fx_state *x, int core, int l, tpu_error *err)
{
    const glayer *L = &x->g->layers[l];
    fx_core *c = &x->cs[core];
    fxt_tens *gy;
    tpu_status rc = fx_dy_of(x, core, l, &gy, err);
    if (rc)
        return rc;
    fxt_tens *buf = &c->gwin[l];
    fxt_free(buf);
    memset(buf, 0, sizeof *buf);
    buf->B = gy->B;
    buf->C = level_off(x, L, L->n_in);
    for (int d = 0; d < SP; d++)
        buf->ext[d] = buf->gext[d] = 1;
    if ((rc = fxt_alloc(buf, err)))
        return rc;
    int64_t C = L->out.c;
    for (int64_t b = 0; b < gy->B; b++)
        for (int64_t r = 0; r < L->rois; r++) {
            roi_box q = roi_of(x, L, fx_gexample(x, core, b), r);
            const gshape *s = &x->g->layers[L->in[q.lev]].out;
            float *lev = &buf->v[b * buf->C + level_off(x, L, q.lev)];
            for (int64_t i = 0; i < L->roi_out[0]; i++)
                for (int64_t j = 0; j < L->roi_out[1]; j++) {
                    double y, xx;
                    int64_t gyy[4], gxx[4];
                    float wt[4];
                    roi_centre(L, &q, i, j, &y, &xx);
                    roi_taps(y, xx, s->sp[0], s->sp[1], gyy, gxx, wt);
                    int64_t loc[SP] = {r, i, j};
                    const float *dy = &gy->v[fxt_at(gy, b, loc, 0)];
                    for (int t = 0; t < 4; t++) {
                        float *dst = &lev[(gyy[t] * s->sp[1] + gxx[t]) * C];
                        for (int64_t ch = 0; ch < C; ch++)
                            dst[ch] += wt[t] * dy[ch];
                    }
                }
        }
    if (graph_core(L) >= 0 && x->p->cpr > 1)
        return TPU_OK; /* handed out by the collective */
    rc = roi_take(x, core, l, buf, err);
    fxt_free(buf);
    return rc;
}

tpu_status fxr_collective(fx_state *x, const fw_insn *const *ins,
                          tpu_error *err)
{
    int l = ins[0]->layer;
    const glayer *L = &x->g->layers[l];
    if (ins[0]->fx == FX_FWD) {
        /* the levels are now on every core of the group (fxr_forward reads
         * the group's shards only after this) */
        for (int k = 0; k < x->p->cores; k++)
            x->cs[k].have_win[l] = FX_FWD;
        return TPU_OK;
    }
    int pin = graph_core(L);
    for (int k = 0; k < x->p->cores; k++) {
        int from = group_core(x, k, pin);
        const fxt_tens *buf = &x->cs[from].gwin[l];
        if (!buf->v)
            return tpu_fail(err, TPU_ERR_SYSTEM,
                            "internal: functional: core %d, roi_align '%s' "
                            "hands out a gradient it did not compute",
                            from, L->name);
        tpu_status rc = roi_take(x, k, l, buf, err);
        if (rc)
            return rc;
    }
    for (int k = 0; k < x->p->cores; k++)
        if (x->p->shard_of[k] == pin)
            fxt_free(&x->cs[k].gwin[l]);
    return TPU_OK;
}
