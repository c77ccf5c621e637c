/* fx_ops: the values of the elementwise and activation layers in a
 * --functional run, forward and backward (docs/FUNCTIONAL.md).  Both are
 * position by position: an operand is taken in the output's box
 * (fxv_operand_box), except a broadcast one (one value per example and
 * channel), which every core holds whole. */
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

/* The operands as the output's box (a broadcast one whole); bc[k] says
 * which broadcast.  tmp[] holds slices of replicated operands. */
static tpu_status ew_operands(fx_state *x, int core, int l, const fxt_tens *o,
                              fxt_tens *tmp, const fxt_tens **ins, int *bc,
                              tpu_error *err)
{
    const glayer *L = &x->g->layers[l];
    for (int k = 0; k < L->n_in; k++) {
        tpu_status rc;
        bc[k] = graph_ew_broadcast(x->g, L, k);
        rc = bc[k] ? fx_act_of(x, core, L->in[k], &ins[k], err)
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
    return bc ? t->v[b * C + ch] : t->v[r * C + ch];
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

/* Adds the (group-summed) partials into each broadcast operand's gradient. */
static tpu_status ew_add_partials(fx_state *x, int core, int l,
                                  const float *part, int64_t B, tpu_error *err)
{
    const glayer *L = &x->g->layers[l];
    int64_t C = L->out.c;
    for (int k = 0; k < L->n_in; k++) {
        int i = L->in[k];
        fxt_tens *gk;
        if (!graph_ew_broadcast(x->g, L, k) || !x->g->layers[i].needs_grad)
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
        if (bc[k] || !x->g->layers[i].needs_grad)
            continue;
        rc = fx_grad_of(x, core, i, &gk[k], err);
        if (!rc && fxt_elems(gk[k]) != fxt_elems(gy))
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
                    if (bc[k])
                        part[(k * B + b) * C + ch] += g;
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
