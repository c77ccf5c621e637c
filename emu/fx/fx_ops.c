/* fx_ops: the values of the elementwise and activation layers in a
 * --functional run, forward and backward (docs/FUNCTIONAL.md).  Both are
 * position by position: an operand is taken in the output's box
 * (fxv_operand_box; a per-position gate [H,W,1] too, with its one
 * channel), except a per-channel one (one value per example and channel),
 * which every core holds whole. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "emu/fx/fx_internal.h"

#define SP GRAPH_MAX_SP
#define INV_SQRT2 0.70710678118654752f
#define INV_SQRT2PI 0.39894228040143268f

/* ---- activations ------------------------------------------------------ */

static float sigm(float v)
{
    return 1.0f / (1.0f + expf(-v));
}

/* The activation of v; a is prelu's slope for v's channel. */
static float act_f(const glayer *L, float v, float a)
{
    float r;
    switch ((graph_act)L->kind) {
    case GACT_RELU:
        r = v > 0.0f ? v : (float)L->alpha * v;
        if (L->max_value > 0 && r > (float)L->max_value)
            r = (float)L->max_value;
        return r;
    case GACT_RELU6:
        return v < 0.0f ? 0.0f : v > 6.0f ? 6.0f : v;
    case GACT_LEAKY_RELU:
        return v > 0.0f ? v : (float)L->alpha * v;
    case GACT_ELU:
        return v > 0.0f ? v : (float)L->alpha * (expf(v) - 1.0f);
    case GACT_GELU:
        return 0.5f * v * (1.0f + erff(v * INV_SQRT2));
    case GACT_SWISH:
        return v * sigm(v);
    case GACT_HARD_SIGMOID:
        r = 0.2f * v + 0.5f;
        return r < 0.0f ? 0.0f : r > 1.0f ? 1.0f : r;
    case GACT_TANH:
        return tanhf(v);
    case GACT_PRELU:
        return v > 0.0f ? v : a * v;
    case GACT_SOFTMAX:
    case GACT_COUNT:
        break;
    }
    return v;
}

/* d act / d x at x (Keras's choices at the kinks: relu's gradient is 0
 * at 0 and at max_value). */
static float act_d(const glayer *L, float v, float a)
{
    float s;
    switch ((graph_act)L->kind) {
    case GACT_RELU:
        if (L->max_value > 0 && v >= (float)L->max_value)
            return 0.0f;
        return v > 0.0f ? 1.0f : (float)L->alpha;
    case GACT_RELU6:
        return v > 0.0f && v < 6.0f ? 1.0f : 0.0f;
    case GACT_LEAKY_RELU:
        return v > 0.0f ? 1.0f : (float)L->alpha;
    case GACT_ELU:
        return v > 0.0f ? 1.0f : (float)L->alpha * expf(v);
    case GACT_GELU:
        return 0.5f * (1.0f + erff(v * INV_SQRT2)) +
               v * INV_SQRT2PI * expf(-0.5f * v * v);
    case GACT_SWISH:
        s = sigm(v);
        return s + v * s * (1.0f - s);
    case GACT_HARD_SIGMOID:
        return v > -2.5f && v < 2.5f ? 0.2f : 0.0f;
    case GACT_TANH:
        s = tanhf(v);
        return 1.0f - s * s;
    case GACT_PRELU:
        return v > 0.0f ? 1.0f : a;
    case GACT_SOFTMAX:
    case GACT_COUNT:
        break;
    }
    return 1.0f;
}

static tpu_status act_forward(fx_state *x, int core, int l, tpu_error *err)
{
    const glayer *L = &x->g->layers[l];
    const fxt_tens *in;
    fxt_tens *o, tmp = {0};
    tpu_status rc;
    if ((rc = fx_new_act(x, core, l, &o, err)) ||
        (rc = fxv_operand_box(x, core, l, 0, o, &tmp, &in, err))) {
        fxt_free(&tmp);
        return rc;
    }
    const float *W = L->kind == GACT_PRELU ? fx_wts(x, l) : NULL;
    int64_t C = o->C, rows = o->B * fxt_npos(o);
    int dt = L->dtype_bytes;
    for (int64_t r = 0; r < rows; r++) {
        const float *v = &in->v[r * C];
        float *y = &o->v[r * C];
        if (L->kind != GACT_SOFTMAX) {
            for (int64_t ch = 0; ch < C; ch++)
                y[ch] = fxt_round(act_f(L, v[ch], W ? W[ch] : 0.0f), dt);
            continue;
        }
        /* softmax over the channels, shifted by their maximum */
        float m = -INFINITY, sum = 0.0f;
        for (int64_t ch = 0; ch < C; ch++)
            m = v[ch] > m ? v[ch] : m;
        for (int64_t ch = 0; ch < C; ch++)
            sum += expf(v[ch] - m);
        for (int64_t ch = 0; ch < C; ch++)
            y[ch] = fxt_round(expf(v[ch] - m) / sum, dt);
    }
    fxt_free(&tmp);
    return TPU_OK;
}

/* dX += dY act'(x); prelu's slopes gather sum dY min(x, 0) into this
 * core's weight-gradient partial (all-reduced with the others). */
static tpu_status act_backward(fx_state *x, int core, int l, tpu_error *err)
{
    const glayer *L = &x->g->layers[l];
    int dx = x->g->layers[L->in[0]].needs_grad;
    int dw = L->kind == GACT_PRELU && graph_layer_trains(x->g, l);
    const fxt_tens *in, *y;
    fxt_tens *gy, *gx = NULL, tmp = {0};
    float *wg = NULL;
    tpu_status rc;
    if ((rc = fx_dy_of(x, core, l, &gy, err)) ||
        (rc = fx_act_of(x, core, l, &y, err)) ||
        (rc = fxv_operand_box(x, core, l, 0, y, &tmp, &in, err)) ||
        (dx && (rc = fx_grad_of(x, core, L->in[0], &gx, err))) ||
        (dw && (rc = fx_wgrad_of(x, core, l, &wg, err)))) {
        fxt_free(&tmp);
        return rc;
    }
    if (gx && (fxt_elems(gx) != fxt_elems(gy) || gx->B != gy->B)) {
        fxt_free(&tmp);
        return tpu_fail(err, TPU_ERR_INPUT,
                        "functional mode: activation '%s' backward into a "
                        "replicated input of a split output: not modelled "
                        "yet",
                        L->name);
    }
    const float *W = L->kind == GACT_PRELU ? fx_wts(x, l) : NULL;
    int64_t C = gy->C, rows = gy->B * fxt_npos(gy);
    for (int64_t r = 0; r < rows; r++) {
        const float *v = &in->v[r * C], *yy = &y->v[r * C],
                    *d = &gy->v[r * C];
        if (L->kind == GACT_SOFTMAX) {
            float s = 0.0f;
            for (int64_t ch = 0; ch < C; ch++)
                s += d[ch] * yy[ch];
            for (int64_t ch = 0; gx && ch < C; ch++)
                gx->v[r * C + ch] += yy[ch] * (d[ch] - s);
            continue;
        }
        for (int64_t ch = 0; ch < C; ch++) {
            float a = W ? W[ch] : 0.0f;
            if (gx)
                gx->v[r * C + ch] += d[ch] * act_d(L, v[ch], a);
            if (wg)
                wg[ch] += d[ch] * (v[ch] < 0.0f ? v[ch] : 0.0f);
        }
    }
    fxt_free(&tmp);
    return TPU_OK;
}

/* ---- elementwise ------------------------------------------------------ */

/* The operands as the output's box (a per-channel one whole, a
 * per-position one the output's positions); bc[k] says how each
 * broadcasts (graph_ew_bc).  tmp[] holds slices of replicated operands. */
static tpu_status ew_operands(fx_state *x, int core, int l, const fxt_tens *o,
                              fxt_tens *tmp, const fxt_tens **ins, int *bc,
                              tpu_error *err)
{
    const glayer *L = &x->g->layers[l];
    for (int k = 0; k < L->n_in; k++) {
        tpu_status rc;
        bc[k] = graph_ew_broadcast(x->g, L, k);
        rc = bc[k] == GEW_BC_CHANNEL
                 ? fx_act_of(x, core, L->in[k], &ins[k], err)
                 : fxv_operand_box(x, core, l, k, o, &tmp[k], &ins[k], err);
        if (rc)
            return rc;
    }
    return TPU_OK;
}

/* Operand k's value at element r * C + ch of the output (example b). */
static float ew_at(const fxt_tens *t, int bc, int64_t b, int64_t r,
                   int64_t C, int64_t ch)
{
    return bc == GEW_BC_CHANNEL    ? t->v[b * C + ch]
           : bc == GEW_BC_POSITION ? t->v[r]
                                   : t->v[r * C + ch];
}

/* The combination of the n operand values v[] (fp32). */
static float ew_f(int kind, const float *v, int n)
{
    float r = v[0];
    for (int k = 1; k < n; k++)
        switch ((graph_ew)kind) {
        case GEW_MULTIPLY: r *= v[k]; break;
        case GEW_SUBTRACT: r -= v[k]; break;
        case GEW_MAXIMUM: r = v[k] > r ? v[k] : r; break;
        case GEW_MINIMUM: r = v[k] < r ? v[k] : r; break;
        case GEW_AVERAGE:
        case GEW_ADD:
        case GEW_COUNT: r += v[k]; break;
        }
    return kind == GEW_AVERAGE ? r / (float)n : r;
}

/* d out / d v[k]: maximum and minimum pass dY to the first operand that
 * holds the extreme (Keras chains tf.maximum pairwise, whose gradient
 * goes to x where x >= y). */
static float ew_d(int kind, const float *v, int n, int k)
{
    float p = 1.0f, r;
    switch ((graph_ew)kind) {
    case GEW_MULTIPLY:
        for (int j = 0; j < n; j++)
            if (j != k)
                p *= v[j];
        return p;
    case GEW_SUBTRACT:
        return k ? -1.0f : 1.0f;
    case GEW_AVERAGE:
        return 1.0f / (float)n;
    case GEW_MAXIMUM:
    case GEW_MINIMUM:
        r = ew_f(kind, v, n);
        for (int j = 0; j < n; j++)
            if (v[j] == r)
                return j == k ? 1.0f : 0.0f;
        return 0.0f;
    case GEW_ADD:
    case GEW_COUNT:
        break;
    }
    return 1.0f;
}

static void free_tmp(fxt_tens *tmp, int n)
{
    for (int k = 0; k < n; k++)
        fxt_free(&tmp[k]);
}

static tpu_status ew_forward(fx_state *x, int core, int l, tpu_error *err)
{
    const glayer *L = &x->g->layers[l];
    const fxt_tens *ins[GRAPH_MAX_IN];
    fxt_tens *o, tmp[GRAPH_MAX_IN];
    int bc[GRAPH_MAX_IN];
    float v[GRAPH_MAX_IN];
    tpu_status rc;
    memset(tmp, 0, sizeof tmp);
    if ((rc = fx_new_act(x, core, l, &o, err)) ||
        (rc = ew_operands(x, core, l, o, tmp, ins, bc, err))) {
        free_tmp(tmp, L->n_in);
        return rc;
    }
    int64_t C = o->C, npos = fxt_npos(o);
    for (int64_t b = 0; b < o->B; b++)
        for (int64_t p = 0; p < npos; p++) {
            int64_t r = b * npos + p;
            for (int64_t ch = 0; ch < C; ch++) {
                for (int k = 0; k < L->n_in; k++)
                    v[k] = ew_at(ins[k], bc[k], b, r, C, ch);
                o->v[r * C + ch] =
                    fxt_round(ew_f(L->kind, v, L->n_in), L->dtype_bytes);
            }
        }
    free_tmp(tmp, L->n_in);
    return TPU_OK;
}

/* A broadcast operand's partial gradients, n_in x B x C floats in the
 * core's per-layer statistics buffer (which the step start zeroes in
 * part: this pass clears its own). */
static float *ew_partials(fx_state *x, int core, int l, int64_t n)
{
    fx_core *c = &x->cs[core];
    const glayer *L = &x->g->layers[l];
    if (!c->bn[l]) {
        int64_t cap = n > 6 * L->out.c ? n : 6 * L->out.c;
        c->bn[l] = calloc((size_t)cap + 1, sizeof(float));
    }
    return c->bn[l];
}

static int ew_split(const fx_state *x, int l)
{
    for (int d = 0; d < SP; d++)
        if (fx_is_split(x, l, d))
            return 1;
    return 0;
}

/* Adds the (group-summed) partials into each per-channel operand's
 * gradient. */
static tpu_status ew_add_partials(fx_state *x, int core, int l,
                                  const float *part, int64_t B, tpu_error *err)
{
    const glayer *L = &x->g->layers[l];
    int64_t C = L->out.c;
    for (int k = 0; k < L->n_in; k++) {
        int i = L->in[k];
        fxt_tens *gk;
        if (graph_ew_broadcast(x->g, L, k) != GEW_BC_CHANNEL ||
            !x->g->layers[i].needs_grad)
            continue;
        tpu_status rc = fx_grad_of(x, core, i, &gk, err);
        if (rc)
            return rc;
        for (int64_t j = 0; j < B * C; j++)
            gk->v[j] += part[k * B * C + j];
    }
    return TPU_OK;
}

static tpu_status ew_backward(fx_state *x, int core, int l, tpu_error *err)
{
    const glayer *L = &x->g->layers[l];
    const fxt_tens *ins[GRAPH_MAX_IN];
    fxt_tens *gy, *gk[GRAPH_MAX_IN], tmp[GRAPH_MAX_IN];
    int bc[GRAPH_MAX_IN];
    float v[GRAPH_MAX_IN];
    tpu_status rc;
    memset(tmp, 0, sizeof tmp);
    memset(gk, 0, sizeof gk);
    if ((rc = fx_dy_of(x, core, l, &gy, err)) ||
        (rc = ew_operands(x, core, l, gy, tmp, ins, bc, err))) {
        free_tmp(tmp, L->n_in);
        return rc;
    }
    int64_t C = gy->C, npos = fxt_npos(gy), B = gy->B;
    float *part = ew_partials(x, core, l, L->n_in * B * C);
    if (!part) {
        free_tmp(tmp, L->n_in);
        return fx_oom(err);
    }
    memset(part, 0, sizeof(float) * (size_t)(L->n_in * B * C));
    for (int k = 0; k < L->n_in && !rc; k++) {
        int i = L->in[k];
        if (bc[k] == GEW_BC_CHANNEL || !x->g->layers[i].needs_grad)
            continue;
        rc = fx_grad_of(x, core, i, &gk[k], err);
        if (!rc && fxt_elems(gk[k]) !=
                       fxt_elems(gy) / C * (bc[k] == GEW_BC_POSITION ? 1 : C))
            rc = tpu_fail(err, TPU_ERR_INPUT,
                          "functional mode: elementwise '%s' backward into "
                          "a replicated operand of a split output: not "
                          "modelled yet",
                          L->name);
    }
    for (int64_t b = 0; b < B && !rc; b++)
        for (int64_t p = 0; p < npos; p++) {
            int64_t r = b * npos + p;
            for (int64_t ch = 0; ch < C; ch++) {
                float d = gy->v[r * C + ch];
                for (int k = 0; k < L->n_in; k++)
                    v[k] = ew_at(ins[k], bc[k], b, r, C, ch);
                for (int k = 0; k < L->n_in; k++) {
                    if (!x->g->layers[L->in[k]].needs_grad)
                        continue;
                    float g = d * ew_d(L->kind, v, L->n_in, k);
                    if (bc[k] == GEW_BC_CHANNEL)
                        part[(k * B + b) * C + ch] += g;
                    else if (bc[k] == GEW_BC_POSITION)
                        gk[k]->v[r] += g; /* the sum over the channels */
                    else
                        gk[k]->v[r * C + ch] += g;
                }
            }
        }
    free_tmp(tmp, L->n_in);
    /* split: the partition group's all-reduce (fxo_ew_reduce) sums them */
    if (!rc && !ew_split(x, l))
        rc = ew_add_partials(x, core, l, part, B, err);
    return rc;
}

tpu_status fxo_ew_reduce(fx_state *x, int l, tpu_error *err)
{
    const glayer *L = &x->g->layers[l];
    int cpr = x->p->cpr;
    int64_t B = x->p->batch, n = L->n_in * B * L->out.c;
    float *tot = calloc((size_t)n + 1, sizeof(float));
    tpu_status rc = TPU_OK;
    if (!tot)
        return fx_oom(err);
    for (int r = 0; r < x->p->replicas && !rc; r++) {
        memset(tot, 0, (size_t)n * sizeof(float));
        for (int s = 0; s < cpr; s++) {
            int k = x->p->core_of[r * cpr + s];
            const float *p = x->cs[k].bn[l];
            if (p && fx_contributes(x, k, l))
                for (int64_t i = 0; i < n; i++)
                    tot[i] += p[i];
        }
        for (int s = 0; s < cpr && !rc; s++)
            rc = ew_add_partials(x, x->p->core_of[r * cpr + s], l, tot, B,
                                 err);
    }
    free(tot);
    return rc;
}

tpu_status fxo_forward(fx_state *x, int core, int l, tpu_error *err)
{
    return x->g->layers[l].op == GOP_ACT ? act_forward(x, core, l, err)
                                         : ew_forward(x, core, l, err);
}

tpu_status fxo_backward(fx_state *x, int core, int l, tpu_error *err)
{
    return x->g->layers[l].op == GOP_ACT ? act_backward(x, core, l, err)
                                         : ew_backward(x, core, l, err);
}

/* ---- normalisations ---------------------------------------------------- */

/* Keras's LayerNormalization and GroupNormalization epsilon, and the one
 * Normalization divides by at least (backend.epsilon()). */
#define NORM_EPS 1e-3f
#define STD_EPS 1e-7f

/* Bits of fx_core.stats_reduced for these ops: the forward statistics,
 * and the backward sums, came from the partition group's all-reduce. */
#define RED_FWD 1
#define RED_BWD 2

/* group_norm's per example and group buffer in fx_core.bn: sums of x and
 * x^2, mean, 1 / deviation, sums of g and g x-hat (g = dY gamma), 6 n
 * floats for n = B groups; at least 6 C (the step start clears that). */
static float *gn_buf(fx_state *x, int core, int l, int64_t n)
{
    fx_core *c = &x->cs[core];
    int64_t C = x->g->layers[l].out.c;
    if (!c->bn[l]) {
        int64_t cap = 6 * n > 6 * C ? 6 * n : 6 * C;
        c->bn[l] = calloc((size_t)cap + 1, sizeof(float));
    }
    return c->bn[l];
}

/* Channels of one group_norm group (all of them for layer_norm). */
static int64_t norm_cg(const glayer *L)
{
    return L->op == GOP_GROUPNORM ? L->out.c / L->groups : L->out.c;
}

/* This core's sums of x and x^2 per example and group into s[0..2n). */
static void gn_local_sums(const glayer *L, const fxt_tens *in, float *s,
                          int64_t n)
{
    int64_t C = in->C, cg = norm_cg(L), npos = fxt_npos(in);
    memset(s, 0, sizeof(float) * (size_t)(2 * n));
    for (int64_t b = 0; b < in->B; b++)
        for (int64_t p = 0; p < npos; p++)
            for (int64_t ch = 0; ch < C; ch++) {
                float v = in->v[(b * npos + p) * C + ch];
                int64_t j = b * L->groups + ch / cg;
                s[j] += v;
                s[n + j] += v * v;
            }
}

/* Mean and 1 / deviation of each group from the sums over m values. */
static void gn_stats(float *s, int64_t n, float m)
{
    for (int64_t j = 0; j < n; j++) {
        float mean = s[j] / m, var = s[n + j] / m - mean * mean;
        s[2 * n + j] = mean;
        s[3 * n + j] = 1.0f / sqrtf((var > 0.0f ? var : 0.0f) + NORM_EPS);
    }
}

/* This core's sums of g and g x-hat per example and group into
 * s[4n..6n) (the forward statistics at s[2n..4n)). */
static void gn_local_bsums(fx_state *x, int l, const fxt_tens *in,
                           const fxt_tens *gy, float *s, int64_t n)
{
    const glayer *L = &x->g->layers[l];
    const float *W = fx_wts(x, l);
    int64_t C = in->C, cg = norm_cg(L), npos = fxt_npos(in);
    memset(s + 4 * n, 0, sizeof(float) * (size_t)(2 * n));
    for (int64_t b = 0; b < in->B; b++)
        for (int64_t p = 0; p < npos; p++)
            for (int64_t ch = 0; ch < C; ch++) {
                int64_t i = (b * npos + p) * C + ch;
                int64_t j = b * L->groups + ch / cg;
                float xh = (in->v[i] - s[2 * n + j]) * s[3 * n + j];
                float g = gy->v[i] * fx_gamma(L, W, ch);
                s[4 * n + j] += g;
                s[5 * n + j] += g * xh;
            }
}

/* The norm's input in its output's box (o), or an error for a backward
 * into a replicated input of a split output. */
static tpu_status norm_input(fx_state *x, int core, int l, const fxt_tens *o,
                             fxt_tens *tmp, const fxt_tens **in,
                             tpu_error *err)
{
    return fxv_operand_box(x, core, l, 0, o, tmp, in, err);
}

static tpu_status norm_forward(fx_state *x, int core, int l, tpu_error *err)
{
    const glayer *L = &x->g->layers[l];
    const fxt_tens *in;
    fxt_tens *o, tmp = {0};
    tpu_status rc;
    if ((rc = fx_new_act(x, core, l, &o, err)) ||
        (rc = norm_input(x, core, l, o, &tmp, &in, err))) {
        fxt_free(&tmp);
        return rc;
    }
    const float *W = fx_wts(x, l);
    int64_t C = o->C, npos = fxt_npos(o), rows = o->B * npos;
    int dt = L->dtype_bytes;
    if (L->op == GOP_NORMALIZE) {
        for (int64_t r = 0; r < rows; r++)
            for (int64_t ch = 0; ch < C; ch++) {
                float sd = sqrtf(W[C + ch]);
                o->v[r * C + ch] = fxt_round(
                    (in->v[r * C + ch] - W[ch]) / (sd > STD_EPS ? sd : STD_EPS),
                    dt);
            }
    } else if (L->op == GOP_LAYERNORM) {
        for (int64_t r = 0; r < rows; r++) {
            const float *v = &in->v[r * C];
            float s = 0.0f, q = 0.0f;
            for (int64_t ch = 0; ch < C; ch++) {
                s += v[ch];
                q += v[ch] * v[ch];
            }
            float mean = s / (float)C, var = q / (float)C - mean * mean;
            float inv = 1.0f / sqrtf((var > 0.0f ? var : 0.0f) + NORM_EPS);
            for (int64_t ch = 0; ch < C; ch++)
                o->v[r * C + ch] =
                    fxt_round((v[ch] - mean) * inv * fx_gamma(L, W, ch) +
                                  fx_beta(L, W, ch),
                              dt);
        }
    } else {
        int64_t n = o->B * L->groups, cg = norm_cg(L);
        float *s = gn_buf(x, core, l, n);
        if (!s) {
            fxt_free(&tmp);
            return fx_oom(err);
        }
        if (!(x->cs[core].stats_reduced[l] & RED_FWD))
            gn_local_sums(L, in, s, n);
        gn_stats(s, n, (float)(fx_gpos_count(L) * cg));
        for (int64_t b = 0; b < o->B; b++)
            for (int64_t p = 0; p < npos; p++)
                for (int64_t ch = 0; ch < C; ch++) {
                    int64_t i = (b * npos + p) * C + ch;
                    int64_t j = b * L->groups + ch / cg;
                    float xh = (in->v[i] - s[2 * n + j]) * s[3 * n + j];
                    o->v[i] = fxt_round(
                        xh * fx_gamma(L, W, ch) + fx_beta(L, W, ch), dt);
                }
    }
    fxt_free(&tmp);
    return TPU_OK;
}

/* dx = inv / m (m g - sum g - x-hat sum g x-hat), g = dY gamma, over a
 * position's channels (layer_norm) or an example's group (group_norm);
 * gamma's and beta's gradients are this core's sums of dY x-hat and dY,
 * all-reduced with the other weight gradients. */
static tpu_status norm_backward(fx_state *x, int core, int l, tpu_error *err)
{
    const glayer *L = &x->g->layers[l];
    int dx = x->g->layers[L->in[0]].needs_grad;
    int dw = graph_layer_trains(x->g, l);
    const fxt_tens *in;
    fxt_tens *gy, *gx = NULL, tmp = {0};
    float *wg = NULL;
    tpu_status rc;
    if ((rc = fx_dy_of(x, core, l, &gy, err)) ||
        (rc = norm_input(x, core, l, gy, &tmp, &in, err)) ||
        (dx && (rc = fx_grad_of(x, core, L->in[0], &gx, err))) ||
        (dw && (rc = fx_wgrad_of(x, core, l, &wg, err)))) {
        fxt_free(&tmp);
        return rc;
    }
    if (gx && (fxt_elems(gx) != fxt_elems(gy) || gx->B != gy->B)) {
        fxt_free(&tmp);
        return tpu_fail(err, TPU_ERR_INPUT,
                        "functional mode: '%s' backward into a replicated "
                        "input of a split output: not modelled yet",
                        L->name);
    }
    const float *W = fx_wts(x, l);
    float *dg = fx_dgamma(L, wg), *db = fx_dbeta(L, wg);
    int64_t C = gy->C, npos = fxt_npos(gy), rows = gy->B * npos;
    if (L->op == GOP_NORMALIZE) {
        for (int64_t r = 0; gx && r < rows; r++)
            for (int64_t ch = 0; ch < C; ch++) {
                float sd = sqrtf(W[C + ch]);
                gx->v[r * C + ch] +=
                    gy->v[r * C + ch] / (sd > STD_EPS ? sd : STD_EPS);
            }
        fxt_free(&tmp);
        return TPU_OK;
    }
    float *s = NULL;
    int64_t n = gy->B * L->groups, cg = norm_cg(L);
    if (L->op == GOP_GROUPNORM) {
        if (!(s = gn_buf(x, core, l, n))) {
            fxt_free(&tmp);
            return fx_oom(err);
        }
        if (dx && !(x->cs[core].stats_reduced[l] & RED_BWD))
            gn_local_bsums(x, l, in, gy, s, n);
    }
    for (int64_t r = 0; r < rows; r++) {
        const float *v = &in->v[r * C], *d = &gy->v[r * C];
        float mean, inv, s1 = 0.0f, s2 = 0.0f, m = (float)C;
        int64_t j0 = (r / npos) * L->groups;
        if (L->op == GOP_LAYERNORM) {
            float a = 0.0f, q = 0.0f;
            for (int64_t ch = 0; ch < C; ch++) {
                a += v[ch];
                q += v[ch] * v[ch];
            }
            mean = a / m;
            float var = q / m - mean * mean;
            inv = 1.0f / sqrtf((var > 0.0f ? var : 0.0f) + NORM_EPS);
            for (int64_t ch = 0; ch < C; ch++) {
                float g = d[ch] * fx_gamma(L, W, ch);
                s1 += g;
                s2 += g * (v[ch] - mean) * inv;
            }
        } else {
            mean = inv = 0.0f;
        }
        for (int64_t ch = 0; ch < C; ch++) {
            if (L->op == GOP_GROUPNORM) {
                int64_t j = j0 + ch / cg;
                mean = s[2 * n + j];
                inv = s[3 * n + j];
                s1 = s[4 * n + j];
                s2 = s[5 * n + j];
                m = (float)(fx_gpos_count(L) * cg);
            }
            float xh = (v[ch] - mean) * inv, g = d[ch] * fx_gamma(L, W, ch);
            if (gx)
                gx->v[r * C + ch] += inv / m * (m * g - s1 - xh * s2);
            if (dg)
                dg[ch] += d[ch] * xh;
            if (db)
                db[ch] += d[ch];
        }
    }
    fxt_free(&tmp);
    return TPU_OK;
}

/* ---- pad, crop, resize ------------------------------------------------- */

/* Bilinear resize along one dimension (TensorFlow's half-pixel centres,
 * as Keras's UpSampling2D(interpolation="bilinear") calls tf.image.resize):
 * output o lerps inputs lo and hi (clamped to [0, n)) by w. */
static void lerp_of(int64_t o, int64_t f, int64_t n, int64_t *lo, int64_t *hi,
                    float *w)
{
    double src = ((double)o + 0.5) / (double)f - 0.5, fl = floor(src);
    *lo = fl < 0 ? 0 : (int64_t)fl;
    *hi = (int64_t)ceil(src) > n - 1 ? n - 1 : (int64_t)ceil(src);
    if (*hi < 0)
        *hi = 0;
    *w = (float)(src - fl);
}

static int64_t rs_factor(const glayer *L, int d)
{
    return d < L->out.nsp ? fxt_dflt(L->factor[d]) : 1;
}

static tpu_status window_forward(fx_state *x, int core, int l, tpu_error *err)
{
    const glayer *L = &x->g->layers[l];
    const fxt_tens *in;
    fxt_tens *o;
    tpu_status rc;
    if ((rc = fx_fwin_of(x, core, l, &in, err)) ||
        (rc = fx_new_act(x, core, l, &o, err)))
        return rc;
    int64_t C = o->C, npos = fxt_npos(o);
    int dt = L->dtype_bytes;
    for (int64_t b = 0; b < o->B; b++)
        for (int64_t pos = 0; pos < npos; pos++) {
            int64_t loc[SP], go[SP], li[SP];
            fxt_global(o, pos, loc, go);
            float *dst = &o->v[fxt_at(o, b, loc, 0)];
            int miss = 0;
            if (L->op != GOP_RESIZE) {
                int64_t gi[SP];
                for (int d = 0; d < SP; d++)
                    gi[d] = go[d] - (d < L->out.nsp ? L->pad_lo[d] : 0);
                int got = fxt_locate(in, gi, li, &miss);
                if (got < 0)
                    return fx_missing(err, x, core, l, "pad", miss);
                for (int64_t ch = 0; ch < C; ch++)
                    dst[ch] = fxt_round(
                        got ? in->v[fxt_at(in, b, li, ch)] : 0.0f, dt);
                continue;
            }
            /* resize: the 2^nsp corners, lo/hi per dimension */
            int64_t lo[SP], hi[SP];
            float w[SP];
            for (int d = 0; d < SP; d++) {
                lo[d] = hi[d] = go[d];
                w[d] = 0.0f;
                if (d < L->out.nsp)
                    lerp_of(go[d], rs_factor(L, d), in->gext[d], &lo[d],
                            &hi[d], &w[d]);
            }
            for (int64_t ch = 0; ch < C; ch++)
                dst[ch] = 0.0f;
            for (int k = 0; k < (1 << SP); k++) {
                int64_t gi[SP];
                float wt = 1.0f;
                for (int d = 0; d < SP; d++) {
                    int up = (k >> d) & 1;
                    gi[d] = up ? hi[d] : lo[d];
                    wt *= up ? w[d] : 1.0f - w[d];
                }
                if (wt == 0.0f)
                    continue;
                if (fxt_locate(in, gi, li, &miss) < 0)
                    return fx_missing(err, x, core, l, "resize", miss);
                const float *v = &in->v[fxt_at(in, b, li, 0)];
                for (int64_t ch = 0; ch < C; ch++)
                    dst[ch] += wt * v[ch];
            }
            for (int64_t ch = 0; ch < C; ch++)
                dst[ch] = fxt_round(dst[ch], dt);
        }
    return TPU_OK;
}

/* Resize's gradient along one dimension: the outputs that read input p
 * and their weights (at most 2f + 2), in output order. */
static int rs_sources(int64_t p, int64_t f, int64_t n, int64_t nout,
                      int64_t *os, float *ws)
{
    int k = 0;
    int64_t a = f * (p - 1) - 1, z = f * (p + 2) + 1;
    for (int64_t o = a < 0 ? 0 : a; o < z && o < nout; o++) {
        int64_t lo, hi;
        float w, t = 0.0f;
        lerp_of(o, f, n, &lo, &hi, &w);
        if (lo == p)
            t += 1.0f - w;
        if (hi == p)
            t += w;
        if (t != 0.0f) {
            os[k] = o;
            ws[k++] = t;
        }
    }
    return k;
}

static tpu_status window_backward(fx_state *x, int core, int l, tpu_error *err)
{
    const glayer *L = &x->g->layers[l];
    if (!x->g->layers[L->in[0]].needs_grad)
        return TPU_OK;
    const fxt_tens *gw;
    fxt_tens *gx;
    tpu_status rc;
    if ((rc = fx_gwin_of(x, core, l, &gw, err)) ||
        (rc = fx_grad_of(x, core, L->in[0], &gx, err)))
        return rc;
    int64_t C = gx->C, npos = fxt_npos(gx);
    enum { MAXS = 64 };
    for (int64_t b = 0; b < gx->B; b++)
        for (int64_t pos = 0; pos < npos; pos++) {
            int64_t loc[SP], gp[SP], lo_[SP];
            fxt_global(gx, pos, loc, gp);
            float *dst = &gx->v[fxt_at(gx, b, loc, 0)];
            int miss = 0;
            if (L->op != GOP_RESIZE) {
                int64_t go[SP];
                for (int d = 0; d < SP; d++)
                    go[d] = gp[d] + (d < L->out.nsp ? L->pad_lo[d] : 0);
                int got = fxt_locate(gw, go, lo_, &miss);
                if (got < 0)
                    return fx_missing(err, x, core, l, "pad gradient", miss);
                for (int64_t ch = 0; got && ch < C; ch++)
                    dst[ch] += gw->v[fxt_at(gw, b, lo_, ch)];
                continue;
            }
            int64_t os[SP][MAXS];
            float ws[SP][MAXS];
            int ns[SP];
            for (int d = 0; d < SP; d++) {
                if (d >= L->out.nsp || rs_factor(L, d) * 2 + 4 > MAXS) {
                    os[d][0] = gp[d];
                    ws[d][0] = 1.0f;
                    ns[d] = 1;
                    if (d < L->out.nsp)
                        return tpu_fail(err, TPU_ERR_INPUT,
                                        "functional mode: resize '%s': "
                                        "factor %d above %d not modelled",
                                        L->name, L->factor[d], MAXS / 2 - 2);
                    continue;
                }
                ns[d] = rs_sources(gp[d], rs_factor(L, d), gx->gext[d],
                                   gw->gext[d], os[d], ws[d]);
            }
            int64_t tot = (int64_t)ns[0] * ns[1] * ns[2];
            for (int64_t q = 0; q < tot; q++) {
                int64_t go[SP], qq = q;
                float wt = 1.0f;
                for (int d = SP - 1; d >= 0; d--) {
                    int k = (int)(qq % ns[d]);
                    qq /= ns[d];
                    go[d] = os[d][k];
                    wt *= ws[d][k];
                }
                if (fxt_locate(gw, go, lo_, &miss) < 0)
                    return fx_missing(err, x, core, l, "resize gradient",
                                      miss);
                const float *v = &gw->v[fxt_at(gw, b, lo_, 0)];
                for (int64_t ch = 0; ch < C; ch++)
                    dst[ch] += wt * v[ch];
            }
        }
    return TPU_OK;
}

/* ---- reshape ----------------------------------------------------------- */

/* Element e (row-major within one example) of a tensor of global extents
 * gext and C channels: its coordinates and channel. */
static void flat_coords(int64_t e, const int64_t gext[SP], int64_t C,
                        int64_t g[SP], int64_t *ch)
{
    *ch = e % C;
    e /= C;
    for (int d = SP - 1; d >= 0; d--) {
        g[d] = e % gext[d];
        e /= gext[d];
    }
}

/* A reshape's values: each element of this core's box from the same
 * row-major element of its input's window (gathered when split). */
tpu_status fxo_reshape_forward(fx_state *x, int core, int l, tpu_error *err)
{
    const glayer *L = &x->g->layers[l];
    const fxt_tens *in;
    fxt_tens *o;
    tpu_status rc;
    if ((rc = fx_fwin_of(x, core, l, &in, err)) ||
        (rc = fx_new_act(x, core, l, &o, err)))
        return rc;
    int64_t npos = fxt_npos(o);
    for (int64_t b = 0; b < o->B; b++)
        for (int64_t pos = 0; pos < npos; pos++) {
            int64_t loc[SP], go[SP];
            fxt_global(o, pos, loc, go);
            int64_t e0 = fxt_gflat(o, go, 0);
            for (int64_t ch = 0; ch < o->C; ch++) {
                int64_t gi[SP], li[SP], ci;
                int miss = 0;
                flat_coords(e0 + ch, in->gext, in->C, gi, &ci);
                if (fxt_locate(in, gi, li, &miss) <= 0)
                    return fx_missing(err, x, core, l, "reshape", miss);
                o->v[fxt_at(o, b, loc, ch)] =
                    fxt_round(in->v[fxt_at(in, b, li, ci)], L->dtype_bytes);
            }
        }
    return TPU_OK;
}

/* Its gradient: each element of the input's box from the output
 * gradient, which a split output would hold only in part. */
tpu_status fxo_reshape_backward(fx_state *x, int core, int l, tpu_error *err)
{
    const glayer *L = &x->g->layers[l];
    fxt_tens *gy, *gx;
    tpu_status rc;
    if (!x->g->layers[L->in[0]].needs_grad)
        return TPU_OK;
    if ((rc = fx_grad_of(x, core, l, &gy, err)) ||
        (rc = fx_grad_of(x, core, L->in[0], &gx, err)))
        return rc;
    int64_t npos = fxt_npos(gx);
    for (int64_t b = 0; b < gx->B; b++)
        for (int64_t pos = 0; pos < npos; pos++) {
            int64_t loc[SP], gi[SP];
            fxt_global(gx, pos, loc, gi);
            int64_t e0 = fxt_gflat(gx, gi, 0);
            for (int64_t ch = 0; ch < gx->C; ch++) {
                int64_t go[SP], lo[SP], co;
                int miss = 0;
                flat_coords(e0 + ch, gy->gext, gy->C, go, &co);
                if (fxt_locate(gy, go, lo, &miss) <= 0)
                    return tpu_fail(err, TPU_ERR_INPUT,
                                    "functional mode: reshape '%s' backward "
                                    "from a split output: not modelled yet",
                                    L->name);
                gx->v[fxt_at(gx, b, loc, ch)] += gy->v[fxt_at(gy, b, lo, co)];
            }
        }
    return TPU_OK;
}

/* ---- global max pooling ------------------------------------------------ */

/* This core's maxima of its input box per example and channel into m
 * (-inf where it holds no position). */
static void gmax_local(const fxt_tens *in, float *m)
{
    int64_t C = in->C, npos = fxt_npos(in);
    for (int64_t i = 0; i < in->B * C; i++)
        m[i] = -INFINITY;
    for (int64_t b = 0; b < in->B; b++)
        for (int64_t p = 0; p < npos; p++)
            for (int64_t ch = 0; ch < C; ch++) {
                float v = in->v[(b * npos + p) * C + ch];
                if (v > m[b * C + ch])
                    m[b * C + ch] = v;
            }
}

/* The positions holding each maximum (y), counted into n. */
static void gmax_ties(const fxt_tens *in, const float *y, float *n)
{
    int64_t C = in->C, npos = fxt_npos(in);
    memset(n, 0, sizeof(float) * (size_t)(in->B * C));
    for (int64_t b = 0; b < in->B; b++)
        for (int64_t p = 0; p < npos; p++)
            for (int64_t ch = 0; ch < C; ch++)
                n[b * C + ch] += in->v[(b * npos + p) * C + ch] == y[b * C + ch];
}

static tpu_status gmax_forward(fx_state *x, int core, int l, tpu_error *err)
{
    const glayer *L = &x->g->layers[l];
    const fxt_tens *in;
    fxt_tens *o;
    tpu_status rc;
    if ((rc = fx_act_of(x, core, L->in[0], &in, err)) ||
        (rc = fx_new_act(x, core, l, &o, err)))
        return rc;
    gmax_local(in, o->v);
    for (int64_t i = 0; i < o->B * o->C; i++)
        o->v[i] = fxt_round(o->v[i], L->dtype_bytes);
    return TPU_OK;
}

/* dY to the maxima, shared among ties (TensorFlow's reduce_max gradient);
 * the counts summed over the split by the all-reduce when there is one. */
static tpu_status gmax_backward(fx_state *x, int core, int l, tpu_error *err)
{
    const glayer *L = &x->g->layers[l];
    const fxt_tens *in, *y;
    fxt_tens *gy, *gx;
    tpu_status rc;
    if (!x->g->layers[L->in[0]].needs_grad)
        return TPU_OK;
    if ((rc = fx_dy_of(x, core, l, &gy, err)) ||
        (rc = fx_act_of(x, core, l, &y, err)) ||
        (rc = fx_act_of(x, core, L->in[0], &in, err)) ||
        (rc = fx_grad_of(x, core, L->in[0], &gx, err)))
        return rc;
    int64_t C = in->C, npos = fxt_npos(in);
    float *n = gn_buf(x, core, l, in->B * C);
    if (!n)
        return fx_oom(err);
    if (!(x->cs[core].stats_reduced[l] & RED_BWD))
        gmax_ties(in, y->v, n);
    for (int64_t b = 0; b < in->B; b++)
        for (int64_t p = 0; p < npos; p++)
            for (int64_t ch = 0; ch < C; ch++) {
                int64_t i = (b * npos + p) * C + ch, j = b * C + ch;
                if (in->v[i] == y->v[j] && n[j] > 0)
                    gx->v[i] += gy->v[j] / n[j];
            }
    return TPU_OK;
}

/* The partition group's all-reduces: group_norm's sums (forward: x and
 * x^2; backward: g and g x-hat), global_maxpool's maxima and tie counts.
 * Each core's partials are formed here from its own shard, as batchnorm's
 * are (fx_coll.c), and the contributing cores' are combined. */
tpu_status fxo_reduce(fx_state *x, int l, int backward, tpu_error *err)
{
    const glayer *L = &x->g->layers[l];
    int cpr = x->p->cpr, gmax = L->op == GOP_GMAXPOOL;
    int64_t B = x->p->batch;
    int64_t n = gmax ? B * L->out.c : B * L->groups;
    int64_t off = gmax ? 0 : backward ? 4 * n : 0, len = gmax ? n : 2 * n;
    float *tot = calloc((size_t)len + 1, sizeof(float));
    tpu_status rc = TPU_OK;
    if (!tot)
        return fx_oom(err);
    for (int r = 0; r < x->p->replicas && !rc; r++) {
        for (int64_t i = 0; i < len; i++)
            tot[i] = gmax && !backward ? -INFINITY : 0.0f;
        for (int s = 0; s < cpr && !rc; s++) {
            int k = x->p->core_of[r * cpr + s];
            /* the sums run over the distinct shards of what they read: the
             * input forward, dY (the output's boxes) backward */
            int in_l = gmax || !backward ? L->in[0] : l;
            const fxt_tens *in, *y;
            fxt_tens *gy, tmp = {0};
            float *buf = gn_buf(x, k, l, n);
            if (!buf) {
                rc = fx_oom(err);
                break;
            }
            if (!fx_contributes(x, k, in_l))
                continue;
            if (gmax || !backward) {
                if ((rc = fx_act_of(x, k, L->in[0], &in, err)))
                    break;
                if (!gmax)
                    gn_local_sums(L, in, buf, n);
                else if (!backward)
                    gmax_local(in, buf);
                else if (!(rc = fx_act_of(x, k, l, &y, err)))
                    gmax_ties(in, y->v, buf);
            } else if (!(rc = fx_dy_of(x, k, l, &gy, err)) &&
                       !(rc = norm_input(x, k, l, gy, &tmp, &in, err))) {
                gn_local_bsums(x, l, in, gy, buf, n);
            }
            fxt_free(&tmp);
            for (int64_t i = 0; !rc && i < len; i++) {
                float v = buf[off + i];
                if (gmax && !backward)
                    tot[i] = v > tot[i] ? v : tot[i];
                else
                    tot[i] += v;
            }
        }
        for (int s = 0; s < cpr && !rc; s++) {
            int k = x->p->core_of[r * cpr + s];
            float *buf = gn_buf(x, k, l, n);
            if (gmax && !backward) {
                /* a core whose shard is empty ran no pass */
                fxt_tens *o;
                if (!x->cs[k].have_act[l] &&
                    (rc = fx_new_act(x, k, l, &o, err)))
                    break;
                for (int64_t i = 0; i < len; i++)
                    x->cs[k].act[l].v[i] = fxt_round(tot[i], L->dtype_bytes);
                continue;
            }
            memcpy(buf + off, tot, sizeof(float) * (size_t)len);
            x->cs[k].stats_reduced[l] |= backward ? RED_BWD : RED_FWD;
        }
    }
    free(tot);
    return rc;
}

tpu_status fxo_more_forward(fx_state *x, int core, int l, tpu_error *err)
{
    switch (x->g->layers[l].op) {
    case GOP_LAYERNORM:
    case GOP_GROUPNORM:
    case GOP_NORMALIZE:
        return norm_forward(x, core, l, err);
    case GOP_GMAXPOOL:
        return gmax_forward(x, core, l, err);
    default:
        return window_forward(x, core, l, err);
    }
}

tpu_status fxo_more_backward(fx_state *x, int core, int l, tpu_error *err)
{
    switch (x->g->layers[l].op) {
    case GOP_LAYERNORM:
    case GOP_GROUPNORM:
    case GOP_NORMALIZE:
        return norm_backward(x, core, l, err);
    case GOP_GMAXPOOL:
        return gmax_backward(x, core, l, err);
    default:
        return window_backward(x, core, l, err);
    }
}
