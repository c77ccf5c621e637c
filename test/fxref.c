/* fxref — plain C reference of the forward pass (see test/fxref.h).
 *
 * Deliberately naive: one loop nest per op, straight from the definitions,
 * in double, with the rounding to each layer's dtype as the only
 * concession to the emulator's arithmetic.  Spatial tensors are handled as
 * 3D with a leading extent of 1 for 2D, so one loop serves both.
 */
#include "test/fxref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "emu/fx/fxdata.h"
#include "mxu/bf16.h"

static double fxref_rb16(double x)
{
    return (double)bf16_to_f32(bf16_from_f32((float)x));
}

static double fxref_store(const glayer *L, double x)
{
    return L->dtype_bytes == 2 ? fxref_rb16(x) : (double)(float)x;
}

int fxref_ncls(const graph *g)
{
    for (int i = 0; i < g->n_layers; i++)
        if (g->layers[i].op == GOP_LOSS)
            return (int)g->layers[g->layers[i].in[0]].out.c;
    return 1;
}

int fxref_system_cores(const char *system)
{
    const char *p = system ? strchr(system, '-') : NULL;
    long n = 0;
    if (!p || !p[1])
        return 0;
    for (p++; *p; p++) {
        if (*p < '0' || *p > '9' || n > 1000000)
            return 0;
        n = n * 10 + (*p - '0');
    }
    return (int)n;
}

/* Spatial extents as 3 numbers (2D: a leading 1) and positions. */
typedef struct {
    int64_t sp[3];
    int64_t pos, c, elems;
} fxref_dims;

static fxref_dims fxref_dims_of(const gshape *s)
{
    fxref_dims d;
    int off = 3 - s->nsp;
    for (int i = 0; i < 3; i++)
        d.sp[i] = i < off ? 1 : s->sp[i - off];
    d.c = s->c;
    d.pos = d.sp[0] * d.sp[1] * d.sp[2];
    d.elems = d.pos * d.c;
    return d;
}

/* Per-dimension window parameters as 3 numbers (2D: a neutral leading
 * dimension of kernel 1, stride 1, no padding). */
typedef struct {
    int64_t k[3], s[3], dil[3], plo[3];
} fxref_win;

static fxref_win fxref_win_of(const glayer *L, int nsp)
{
    fxref_win w;
    int off = 3 - nsp;
    for (int i = 0; i < 3; i++) {
        int j = i - off;
        w.k[i] = j < 0 ? 1 : L->kernel[j];
        w.s[i] = j < 0 ? 1 : L->strides[j];
        w.dil[i] = j < 0 ? 1 : (L->op == GOP_CONV ? L->dilation[j] : 1);
        w.plo[i] = j < 0 ? 0 : L->pad_lo[j];
        if (w.dil[i] < 1)
            w.dil[i] = 1;
    }
    return w;
}

/* The layer's weights (kernel [taps][cin][cout]; a grouped conv's cin is
 * its input channels / groups, Keras's layout) as the layer multiplies
 * them: fp32 master copies, rounded to bf16 for a bf16 layer. */
static double *fxref_weights(const graph *g, int l, uint64_t seed,
                             int64_t taps, int64_t cin, int64_t cout)
{
    const glayer *L = &g->layers[l];
    int owner = L->share_from >= 0 ? L->share_from : l;
    int64_t n = taps * cin * cout;
    double *w = malloc((size_t)(n > 0 ? n : 1) * sizeof *w);
    if (!w)
        return NULL;
    for (int64_t i = 0; i < n; i++) {
        float f = fxd_weight(seed, owner, i, taps * cin, taps * cout);
        w[i] = L->dtype_bytes == 2 ? fxref_rb16((double)f) : (double)f;
    }
    return w;
}

/* conv and conv_transpose, in the global layout. */
static void fxref_conv(const glayer *L, const fxref_dims *id,
                       const fxref_dims *od, const fxref_win *w,
                       const double *x, const double *wt, int64_t batch,
                       double *y, double *acc)
{
    int transpose = L->op == GOP_CONV_T;
    int64_t cin = id->c, cout = od->c;
    /* groups: output channel co reads the input channels of its group
     * co / (cout / G), through kernel rows [t][ci - group's first] */
    int64_t G = graph_groups(L), cig = cin / G, cog = cout / G;
    for (int64_t b = 0; b < batch; b++)
        for (int64_t o0 = 0; o0 < od->sp[0]; o0++)
            for (int64_t o1 = 0; o1 < od->sp[1]; o1++)
                for (int64_t o2 = 0; o2 < od->sp[2]; o2++) {
                    int64_t o[3] = {o0, o1, o2};
                    int64_t t = 0;
                    for (int64_t co = 0; co < cout; co++)
                        acc[co] = 0; /* biases are 0 (fxdata.h) */
                    for (int64_t t0 = 0; t0 < w->k[0]; t0++)
                        for (int64_t t1 = 0; t1 < w->k[1]; t1++)
                            for (int64_t t2 = 0; t2 < w->k[2]; t2++, t++) {
                                int64_t tt[3] = {t0, t1, t2}, src[3];
                                int inside = 1;
                                for (int d = 0; d < 3 && inside; d++) {
                                    if (!transpose) {
                                        src[d] = o[d] * w->s[d] - w->plo[d] +
                                                 tt[d] * w->dil[d];
                                    } else {
                                        /* xd[j] = x[j/s] on multiples of s */
                                        int64_t j = o[d] - w->plo[d] + tt[d];
                                        if (j < 0 || j % w->s[d] != 0) {
                                            inside = 0;
                                            break;
                                        }
                                        src[d] = j / w->s[d];
                                    }
                                    inside = src[d] >= 0 && src[d] < id->sp[d];
                                }
                                if (!inside)
                                    continue;
                                const double *xp =
                                    x + (((b * id->sp[0] + src[0]) * id->sp[1] +
                                          src[1]) * id->sp[2] + src[2]) * cin;
                                const double *wp = wt + t * cig * cout;
                                for (int64_t ci = 0; ci < cin; ci++) {
                                    double xv = xp[ci];
                                    int64_t gi = ci / cig;
                                    const double *wr =
                                        wp + (ci - gi * cig) * cout;
                                    for (int64_t co = gi * cog;
                                         co < (gi + 1) * cog; co++)
                                        acc[co] += xv * wr[co];
                                }
                            }
                    double *yp =
                        y + (((b * od->sp[0] + o0) * od->sp[1] + o1) *
                                 od->sp[2] + o2) * cout;
                    for (int64_t co = 0; co < cout; co++)
                        yp[co] = acc[co];
                }
}

static void fxref_pool(const glayer *L, const fxref_dims *id,
                       const fxref_dims *od, const fxref_win *w,
                       const double *x, int64_t batch, double *y)
{
    int64_t c = id->c;
    for (int64_t b = 0; b < batch; b++)
        for (int64_t o0 = 0; o0 < od->sp[0]; o0++)
            for (int64_t o1 = 0; o1 < od->sp[1]; o1++)
                for (int64_t o2 = 0; o2 < od->sp[2]; o2++)
                    for (int64_t ch = 0; ch < c; ch++) {
                        int64_t o[3] = {o0, o1, o2};
                        double s = 0, m = -INFINITY;
                        int64_t n = 0;
                        for (int64_t t0 = 0; t0 < w->k[0]; t0++)
                            for (int64_t t1 = 0; t1 < w->k[1]; t1++)
                                for (int64_t t2 = 0; t2 < w->k[2]; t2++) {
                                    int64_t tt[3] = {t0, t1, t2}, src[3];
                                    int inside = 1;
                                    for (int d = 0; d < 3; d++) {
                                        src[d] = o[d] * w->s[d] - w->plo[d] + tt[d];
                                        inside &= src[d] >= 0 && src[d] < id->sp[d];
                                    }
                                    if (!inside)
                                        continue;
                                    double v = x[(((b * id->sp[0] + src[0]) *
                                                       id->sp[1] + src[1]) *
                                                      id->sp[2] + src[2]) * c + ch];
                                    s += v;
                                    if (v > m)
                                        m = v;
                                    n++;
                                }
                        double r = L->op == GOP_MAXPOOL ? m : (n ? s / (double)n : 0);
                        y[(((b * od->sp[0] + o0) * od->sp[1] + o1) * od->sp[2] + o2) *
                              c + ch] = n ? r : 0;
                    }
}

/* Computes layer i from its inputs' outputs act[...]; y has batch x elems. */
static tpu_status fxref_compute(const graph *g, int i, double *const *act,
                                uint64_t seed, int64_t step, int64_t batch,
                                int replicas, int train, int ncls, double *y,
                                tpu_error *err)
{
    const glayer *L = &g->layers[i];
    fxref_dims od = fxref_dims_of(&L->out);
    int64_t n = batch * od.elems;

    if (L->op == GOP_INPUT) {
        for (int64_t b = 0; b < batch; b++)
            for (int64_t e = 0; e < od.elems; e++)
                y[b * od.elems + e] = fxref_store(
                    L, fxd_input(seed, i, step, batch, b, e, od.elems, ncls));
        return TPU_OK;
    }

    const glayer *S = &g->layers[L->in[0]];
    fxref_dims id = fxref_dims_of(&S->out);
    const double *x = act[L->in[0]];

    switch (L->op) {
    case GOP_CONV:
    case GOP_CONV_T:
    case GOP_DENSE: {
        fxref_win w;
        int64_t taps = 1;
        double *xin, *wt, *acc;
        if (L->op == GOP_DENSE) {
            /* Flat: a 1x1 conv over one position; spatial: a 1x1 conv. */
            memset(&w, 0, sizeof w);
            for (int d = 0; d < 3; d++)
                w.k[d] = w.s[d] = w.dil[d] = 1;
        } else {
            w = fxref_win_of(L, S->out.nsp);
            taps = w.k[0] * w.k[1] * w.k[2];
        }
        xin = malloc((size_t)(batch * id.elems) * sizeof *xin);
        wt = fxref_weights(g, i, seed, taps, id.c / graph_groups(L), od.c);
        acc = malloc((size_t)od.c * sizeof *acc);
        if (!xin || !wt || !acc) {
            free(xin);
            free(wt);
            free(acc);
            return tpu_fail(err, TPU_ERR_SYSTEM, "fxref: out of memory");
        }
        for (int64_t e = 0; e < batch * id.elems; e++)
            xin[e] = L->dtype_bytes == 2 ? fxref_rb16(x[e]) : x[e];
        fxref_conv(L, &id, &od, &w, xin, wt, batch, y, acc);
        free(xin);
        free(wt);
        free(acc);
        break;
    }
    case GOP_BATCHNORM: {
        int64_t per;
        if (!train) {
            /* inference: the moving statistics of a new Keras layer (mean
             * 0, variance 1), gamma 1, beta 0 (docs/FUNCTIONAL.md) */
            for (int64_t k = 0; k < n; k++)
                y[k] = x[k] / sqrt(1 + 1e-3);
            break;
        }
        if (replicas < 1 || batch % replicas != 0)
            return tpu_fail(err, TPU_ERR_INPUT,
                            "fxref: batch %lld does not divide into %d replicas",
                            (long long)batch, replicas);
        per = batch / replicas;
        for (int64_t r = 0; r < replicas; r++)
            for (int64_t ch = 0; ch < id.c; ch++) {
                double s = 0, v = 0, cnt = (double)(per * id.pos), m, inv;
                for (int64_t b = r * per; b < (r + 1) * per; b++)
                    for (int64_t p = 0; p < id.pos; p++)
                        s += x[(b * id.pos + p) * id.c + ch];
                m = s / cnt;
                for (int64_t b = r * per; b < (r + 1) * per; b++)
                    for (int64_t p = 0; p < id.pos; p++) {
                        double dv = x[(b * id.pos + p) * id.c + ch] - m;
                        v += dv * dv;
                    }
                inv = 1.0 / sqrt(v / cnt + 1e-3);
                for (int64_t b = r * per; b < (r + 1) * per; b++)
                    for (int64_t p = 0; p < id.pos; p++) {
                        int64_t k = (b * id.pos + p) * id.c + ch;
                        y[k] = (x[k] - m) * inv; /* gamma 1, beta 0 */
                    }
            }
        break;
    }
    case GOP_RELU:
        for (int64_t k = 0; k < n; k++)
            y[k] = x[k] > 0 ? x[k] : 0;
        break;
    case GOP_SIGMOID:
        for (int64_t k = 0; k < n; k++)
            y[k] = 1.0 / (1.0 + exp(-x[k]));
        break;
    case GOP_FLATTEN:
        memcpy(y, x, (size_t)n * sizeof *y);
        break;
    case GOP_GAP:
        for (int64_t b = 0; b < batch; b++)
            for (int64_t ch = 0; ch < id.c; ch++) {
                double s = 0;
                for (int64_t p = 0; p < id.pos; p++)
                    s += x[(b * id.pos + p) * id.c + ch];
                y[b * id.c + ch] = s / (double)id.pos;
            }
        break;
    case GOP_ADD:
        for (int64_t k = 0; k < n; k++) {
            double s = 0;
            for (int j = 0; j < L->n_in; j++)
                s += act[L->in[j]][k];
            y[k] = s;
        }
        break;
    case GOP_CONCAT: {
        int64_t off = 0;
        for (int j = 0; j < L->n_in; j++) {
            int64_t cj = g->layers[L->in[j]].out.c;
            const double *xj = act[L->in[j]];
            for (int64_t q = 0; q < batch * od.pos; q++)
                memcpy(y + q * od.c + off, xj + q * cj,
                       (size_t)cj * sizeof *y);
            off += cj;
        }
        break;
    }
    case GOP_MAXPOOL:
    case GOP_AVGPOOL: {
        fxref_win w = fxref_win_of(L, S->out.nsp);
        fxref_pool(L, &id, &od, &w, x, batch, y);
        break;
    }
    case GOP_UPSAMPLE: {
        int64_t f[3];
        int off = 3 - S->out.nsp;
        for (int d = 0; d < 3; d++)
            f[d] = d < off ? 1 : L->factor[d - off];
        for (int64_t b = 0; b < batch; b++)
            for (int64_t o0 = 0; o0 < od.sp[0]; o0++)
                for (int64_t o1 = 0; o1 < od.sp[1]; o1++)
                    for (int64_t o2 = 0; o2 < od.sp[2]; o2++)
                        memcpy(y + (((b * od.sp[0] + o0) * od.sp[1] + o1) *
                                        od.sp[2] + o2) * od.c,
                               x + (((b * id.sp[0] + o0 / f[0]) * id.sp[1] +
                                     o1 / f[1]) * id.sp[2] + o2 / f[2]) * id.c,
                               (size_t)od.c * sizeof *y);
        break;
    }
    case GOP_DROPOUT:
        for (int64_t b = 0; b < batch; b++)
            for (int64_t e = 0; e < od.elems; e++) {
                int64_t k = b * od.elems + e;
                if (!train) {
                    y[k] = x[k];
                    continue;
                }
                double u = fxd_u(seed, FXD_TAG_DROPOUT + (uint64_t)i,
                                 (uint64_t)((step * batch + b) * od.elems + e));
                y[k] = u >= L->rate ? x[k] / (1.0 - L->rate) : 0;
            }
        break;
    default:
        return tpu_fail(err, TPU_ERR_INPUT, "fxref: layer '%s': op %s has no "
                        "forward value", L->name, graph_op_name(L->op));
    }
    for (int64_t k = 0; k < n; k++)
        y[k] = fxref_store(L, y[k]);
    return TPU_OK;
}

static void fxref_free_acts(double **act, int n)
{
    if (!act)
        return;
    for (int i = 0; i < n; i++)
        free(act[i]);
    free(act);
}

/* Forward through layer `upto`; act[i] holds every layer's output up to it
 * (loss layers get none). */
static tpu_status fxref_run(const graph *g, int upto, uint64_t seed,
                            int64_t step, int64_t batch, int replicas,
                            int train, double ***acts, tpu_error *err)
{
    int ncls = fxref_ncls(g);
    double **act;
    *acts = NULL;
    if (upto < 0 || upto >= g->n_layers || batch < 1)
        return tpu_fail(err, TPU_ERR_INPUT, "fxref: no layer %d or batch %lld",
                        upto, (long long)batch);
    act = calloc((size_t)g->n_layers, sizeof *act);
    if (!act)
        return tpu_fail(err, TPU_ERR_SYSTEM, "fxref: out of memory");
    for (int i = 0; i <= upto; i++) {
        tpu_status st;
        if (g->layers[i].op == GOP_LOSS)
            continue;
        act[i] = malloc((size_t)(batch * gshape_elems(&g->layers[i].out)) *
                        sizeof **act);
        if (!act[i]) {
            fxref_free_acts(act, g->n_layers);
            return tpu_fail(err, TPU_ERR_SYSTEM, "fxref: out of memory");
        }
        st = fxref_compute(g, i, act, seed, step, batch, replicas, train, ncls,
                           act[i], err);
        if (st) {
            fxref_free_acts(act, g->n_layers);
            return st;
        }
    }
    *acts = act;
    return TPU_OK;
}

tpu_status fxref_layer(const graph *g, int layer, uint64_t seed,
                       int64_t step, int64_t global_batch, int replicas,
                       int train, double **out, int64_t *n_out,
                       tpu_error *err)
{
    double **act;
    tpu_status st;
    *out = NULL;
    *n_out = 0;
    if (layer < 0 || layer >= g->n_layers || g->layers[layer].op == GOP_LOSS)
        return tpu_fail(err, TPU_ERR_INPUT, "fxref: layer %d has no output",
                        layer);
    st = fxref_run(g, layer, seed, step, global_batch, replicas, train, &act,
                   err);
    if (st)
        return st;
    *out = act[layer];
    *n_out = global_batch * gshape_elems(&g->layers[layer].out);
    act[layer] = NULL;
    fxref_free_acts(act, g->n_layers);
    return TPU_OK;
}

static int fxref_replicas(const graph *g)
{
    int cores = fxref_system_cores(g->system);
    int cpr = g->cores_per_replica > 0 ? g->cores_per_replica : 1;
    return cores > 0 ? cores / cpr : 1;
}

tpu_status fxref_forward(const graph *g, uint64_t seed, int64_t step,
                         int64_t global_batch, int train, double **out,
                         int64_t *n_out, tpu_error *err)
{
    int last = -1;
    for (int i = 0; i < g->n_layers; i++)
        if (g->layers[i].op != GOP_LOSS)
            last = i;
    return fxref_layer(g, last, seed, step, global_batch, fxref_replicas(g),
                       train, out, n_out, err);
}

tpu_status fxref_loss(const graph *g, uint64_t seed, int64_t step,
                      int64_t global_batch, int train, double *loss,
                      tpu_error *err)
{
    double **act;
    double total = 0;
    int ncls = fxref_ncls(g);
    tpu_status st;
    *loss = 0;
    st = fxref_run(g, g->n_layers - 1, seed, step, global_batch,
                   fxref_replicas(g), train, &act, err);
    if (st)
        return st;
    for (int i = 0; i < g->n_layers && !st; i++) {
        const glayer *L = &g->layers[i];
        if (L->op != GOP_LOSS)
            continue;
        if (L->loss != GLOSS_SOFTMAX_XENT && L->loss != GLOSS_SIGMOID_XENT) {
            st = tpu_fail(err, TPU_ERR_INPUT, "fxref: loss '%s': only "
                          "softmax_xent and sigmoid_xent", L->name);
            break;
        }
        for (int j = 0; j < L->n_in; j++) {
            const glayer *S = &g->layers[L->in[j]];
            const double *z = act[L->in[j]];
            int64_t c = S->out.c;
            double sum = 0;
            if (S->out.nsp != 0) {
                st = tpu_fail(err, TPU_ERR_INPUT, "fxref: loss '%s': "
                              "spatial logits", L->name);
                break;
            }
            for (int64_t b = 0; b < global_batch; b++) {
                const double *zb = z + b * c;
                double m = zb[0], se = 0;
                int y = fxd_class(seed, step, global_batch, b, ncls);
                if (L->loss == GLOSS_SIGMOID_XENT) {
                    /* mean over every logit of -t log s(z) - (1-t)
                     * log(1 - s(z)), t one-hot at y */
                    for (int64_t k = 0; k < c; k++)
                        sum += (-(k == y % c) * log(1 / (1 + exp(-zb[k]))) -
                                (k != y % c) * log(1 - 1 / (1 + exp(-zb[k])))) /
                               (double)c;
                    continue;
                }
                for (int64_t k = 1; k < c; k++)
                    if (zb[k] > m)
                        m = zb[k];
                for (int64_t k = 0; k < c; k++)
                    se += exp(zb[k] - m);
                sum += m + log(se) - zb[y % c];
            }
            total += sum / (double)global_batch;
        }
    }
    fxref_free_acts(act, g->n_layers);
    if (!st)
        *loss = total;
    return st;
}
