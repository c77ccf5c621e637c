/* fexec: the values of a --functional run (see fexec.h and
 * docs/FUNCTIONAL.md).
 *
 * Storage.  Every core holds, per layer, its shard of the layer's output
 * (`act`) and of the output's gradient (`grad`), and the windows its
 * firmware assembled: the forward input window (shard + halos, or the
 * gathered tensor) and the backward window of the output gradient.  A
 * tensor knows its global offset and extents, so a read names a global
 * coordinate: outside the tensor it is padding (0), inside the tensor but
 * outside what the core holds it is an error.
 *
 * Reductions across cores (all-reduces) sum only the cores that hold a
 * distinct part: along a dimension a tensor is not split, the cores of a
 * partition group hold the same rows, so only coordinate 0 contributes
 * (otherwise replicated work would be counted twice).
 */
#include "emu/fexec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "emu/fxdata.h"
#include "mxu/bf16.h"
#include "mxu/mxu.h"

#define SP GRAPH_MAX_SP
#define BN_EPS 1e-3f     /* Keras BatchNormalization's default epsilon */
#define FOCAL_ALPHA 0.25 /* RetinaNet's focal loss (Lin et al. 2017) */
#define FOCAL_GAMMA 2.0

typedef struct {
    int nsp;
    int64_t B, C;
    int64_t lo[SP], ext[SP], gext[SP];
    float *v;
} tens;

typedef struct {
    tens *act, *grad, *win, *gwin;
    uint8_t *have_act, *have_win, *have_gwin, *done_fwd, *done_bwd;
    uint8_t *stats_reduced; /* batchnorm: statistics came from the group */
    float **w, **mom, **wg; /* per owner layer: weights, momentum, gradient */
    float **bn; /* per batchnorm: mean, invstd, sum dy, sum dy*xhat (4C) */
    double *loss_part;    /* per loss layer: sum of element losses */
    double *dice;         /* per loss layer and input: sum p*t, sum p, sum t */
    int64_t *cur, *chunk; /* matmul cursors per layer x {fwd, dx, dw} */
    int swept;            /* lazy backward propagation done down to here */
} fcore;

struct fx_state {
    const graph *g;
    const plan *p;
    const tpu_params *hw;
    fx_config cfg;
    int64_t step, G;
    int ncls;
    int out_layer;
    uint8_t *has_bwd; /* layer has backward compute instructions */
    fcore *cs;
    /* Operand buffers of the matrix products, grown and reused: one
     * instruction runs at a time, and fresh calloc'd megabytes per
     * instruction cost more in page faults than the products. */
    float *scratch[3];
    size_t scratch_cap[3];
};

/* Zeroed scratch buffer i of at least n floats (NULL: out of memory). */
static float *scratch(fx_state *x, int i, int64_t n)
{
    size_t need = (size_t)(n > 0 ? n : 1);
    if (need > x->scratch_cap[i]) {
        free(x->scratch[i]);
        x->scratch[i] = malloc(need * sizeof(float));
        x->scratch_cap[i] = x->scratch[i] ? need : 0;
        if (!x->scratch[i])
            return NULL;
    }
    memset(x->scratch[i], 0, need * sizeof(float));
    return x->scratch[i];
}

/* ---- small helpers ----------------------------------------------------- */

static float rnd(float v, int dtype)
{
    return dtype == 2 ? bf16_to_f32(bf16_from_f32(v)) : v;
}

static int64_t tens_elems(const tens *t)
{
    int64_t e = t->B * t->C;
    for (int d = 0; d < SP; d++)
        e *= t->ext[d];
    return e;
}

static int64_t tens_pos(const tens *t)
{
    int64_t e = 1;
    for (int d = 0; d < SP; d++)
        e *= t->ext[d];
    return e;
}

static void tens_free(tens *t)
{
    free(t->v);
    t->v = NULL;
}

static tpu_status tens_alloc(tens *t, tpu_error *err)
{
    free(t->v);
    int64_t n = tens_elems(t);
    t->v = calloc((size_t)(n > 0 ? n : 1), sizeof(float));
    if (!t->v)
        return tpu_fail(err, TPU_ERR_SYSTEM, "out of host memory (functional)");
    return TPU_OK;
}

/* Local position index -> local coordinates. */
static void pos_decode(const tens *t, int64_t pos, int64_t o[SP])
{
    for (int d = SP - 1; d >= 0; d--) {
        o[d] = pos % t->ext[d];
        pos /= t->ext[d];
    }
}

static int64_t at(const tens *t, int64_t b, const int64_t loc[SP], int64_t c)
{
    int64_t i = b;
    for (int d = 0; d < SP; d++)
        i = i * t->ext[d] + loc[d];
    return i * t->C + c;
}

/* Reads global coordinate g of example b: 0 outside the tensor (padding);
 * sets *miss (with the dimension) when the tensor has the row but this
 * core does not. */
static float rd(const tens *t, int64_t b, const int64_t g[SP], int64_t c,
                int *miss)
{
    int64_t loc[SP];
    for (int d = 0; d < SP; d++) {
        if (g[d] < 0 || g[d] >= t->gext[d])
            return 0.0f;
        loc[d] = g[d] - t->lo[d];
        if (loc[d] < 0 || loc[d] >= t->ext[d]) {
            *miss = d + 1;
            return 0.0f;
        }
    }
    return t->v[at(t, b, loc, c)];
}

/* The channels [c0, c0 + n) at global coordinate g of example b into dst
 * (channels are innermost, so one copy): 0 when g is padding (dst left
 * as it is: the callers' buffers are zeroed), -1 with *miss set when the
 * core does not hold the row, 1 when copied. */
static int rd_row(const tens *t, int64_t b, const int64_t g[SP], int64_t c0,
                  int64_t n, float *dst, int *miss)
{
    int64_t loc[SP];
    for (int d = 0; d < SP; d++) {
        if (g[d] < 0 || g[d] >= t->gext[d])
            return 0;
        loc[d] = g[d] - t->lo[d];
        if (loc[d] < 0 || loc[d] >= t->ext[d]) {
            *miss = d + 1;
            return -1;
        }
    }
    memcpy(dst, &t->v[at(t, b, loc, c0)], sizeof(float) * (size_t)n);
    return 1;
}

/* The shape of this core's shard of layer l's output. */
static void shard_shape(const fx_state *x, int core, int l, tens *t)
{
    const glayer *L = &x->g->layers[l];
    int co[SP] = {0};
    plan_coords(x->p, x->p->shard_of[core], co);
    memset(t, 0, sizeof *t);
    t->nsp = L->out.nsp;
    t->B = x->p->batch;
    t->C = L->out.c;
    for (int d = 0; d < SP; d++) {
        t->lo[d] = 0;
        t->ext[d] = t->gext[d] = 1;
        if (d < L->out.nsp) {
            int64_t lo, hi;
            plan_range(x->p, x->g, l, d, co[d], &lo, &hi);
            t->lo[d] = lo;
            t->ext[d] = hi - lo;
            t->gext[d] = L->out.sp[d];
        }
    }
}

static int is_split(const fx_state *x, int l, int d)
{
    return x->p->split[l * SP + d] != 0;
}

/* Whether core's partial sums over layer l's positions count (see top). */
static int contributes(const fx_state *x, int core, int l)
{
    int co[SP] = {0};
    plan_coords(x->p, x->p->shard_of[core], co);
    const glayer *L = &x->g->layers[l];
    for (int d = 0; d < x->p->nsp && d < SP; d++) {
        int held = d < L->out.nsp && is_split(x, l, d);
        if (!held && co[d] != 0)
            return 0;
    }
    return 1;
}

static int owner(const fx_state *x, int l)
{
    int s = x->g->layers[l].share_from;
    return s >= 0 ? s : l;
}

static int64_t gexample(const fx_state *x, int core, int64_t b)
{
    return (int64_t)x->p->replica_of[core] * x->p->batch + b;
}

/* Row-major index of (global position, channel) within one example. */
static int64_t gflat(const tens *t, const int64_t g[SP], int64_t c)
{
    int64_t i = 0;
    for (int d = 0; d < SP; d++)
        i = i * t->gext[d] + g[d];
    return i * t->C + c;
}

static int64_t gpos_count(const glayer *L)
{
    int64_t n = 1;
    for (int d = 0; d < L->out.nsp; d++)
        n *= L->out.sp[d];
    return n;
}

static tpu_status missing(tpu_error *err, const fx_state *x, int core, int l,
                          const char *what, int dim)
{
    return tpu_fail(err, TPU_ERR_SYSTEM,
                    "internal: functional: core %d, layer '%s' (%s) reads "
                    "rows along spatial dim %d its firmware did not bring "
                    "(halo too small)",
                    core, x->g->layers[l].name, what, dim - 1);
}

/* ---- set-up ------------------------------------------------------------ */

static int64_t kernel_taps(const glayer *L)
{
    int64_t t = 1;
    if (L->op == GOP_DENSE)
        return 1;
    for (int d = 0; d < L->out.nsp; d++)
        t *= L->kernel[d];
    return t;
}

/* Elements of layer l's tensor for a replica's batch: whole, and the part
 * the shard at coordinates co holds. */
static void tensor_elems(const graph *g, const plan *p, int l, const int *co,
                         double *full, double *local)
{
    const glayer *L = &g->layers[l];
    *full = *local = (double)p->batch * (double)L->out.c;
    for (int d = 0; d < L->out.nsp; d++) {
        int64_t lo, hi;
        plan_range(p, g, l, d, co[d], &lo, &hi);
        *full *= (double)L->out.sp[d];
        *local *= (double)(hi - lo);
    }
}

/* Upper estimate, fp32 throughout.  Per core: each layer's output and
 * gradient shards; its input window and its gradient window, each the
 * whole tensor where the program gathers it and at most twice the shard
 * otherwise (a halo is narrower than a shard); the weights three times
 * (value, momentum, gradient).  Plus, once (instructions run one at a
 * time), the largest matrix instruction's operands: its rows x real K
 * rows in fp32 and two bf16 copies, the weight operand likewise, the
 * results and the per-tile temporaries. */
double fx_bytes_needed(const graph *g, const plan *p, const fw_program *progs)
{
    double w = (double)graph_weights(g) * 4.0 * 3.0;
    double total = 0, tmp = 0;
    int n = g->n_layers;
    uint8_t *gathered = malloc((size_t)n * 2 + 2);
    if (!gathered)
        return INFINITY;
    for (int k = 0; k < p->cpr; k++) {
        int co[SP] = {0};
        plan_coords(p, k, co);
        memset(gathered, 0, (size_t)n * 2 + 2);
        for (size_t i = 0; i < progs[k].n; i++) {
            const fw_insn *in = &progs[k].code[i];
            if (in->op == FW_ALLGATHER && in->layer >= 0)
                gathered[in->layer * 2 + (in->fx == FX_DX)] = 1;
        }
        double per = w;
        for (int l = 0; l < n; l++) {
            const glayer *L = &g->layers[l];
            double full, local, ifull = 0, ilocal = 0;
            tensor_elems(g, p, l, co, &full, &local);
            if (L->n_in > 0)
                tensor_elems(g, p, L->in[0], co, &ifull, &ilocal);
            double win = gathered[l * 2] ? ifull : fmin(ifull, 2 * ilocal);
            double gwin = gathered[l * 2 + 1] ? full : fmin(full, 2 * local);
            per += 4.0 * (2 * local + win + gwin);
        }
        for (size_t i = 0; i < progs[k].n; i++) {
            const fw_insn *in = &progs[k].code[i];
            if (in->op != FW_MATMUL || in->layer < 0)
                continue;
            const glayer *L = &g->layers[in->layer];
            const glayer *I = &g->layers[L->in[0]];
            /* operands hold the real K rows only (mm_bf16); a weight
             * gradient's K is the core's positions, at most the
             * instruction's */
            int64_t depth = I->out.c > L->out.c ? I->out.c : L->out.c;
            double rows = (double)in->a, kk;
            if (in->fx == FX_DW) {
                /* rows of the padded K map onto the real taps x cin */
                double real = (double)kernel_taps(L) * (double)I->out.c;
                double e = in->e > 0 ? (double)in->e : 1;
                rows = fmin(rows, ceil(rows * real / e) + 1);
                kk = (double)in->b;
            } else {
                kk = (double)kernel_taps(L) * (double)depth;
            }
            double cols = (double)in->c, R = (double)128;
            double t = (rows * kk + kk * cols) * (4.0 + 3 * 2.0) +
                       rows * cols * 4.0 * 3 + rows * R * 2.0;
            if (t > tmp)
                tmp = t;
        }
        total += per * (double)p->replicas;
    }
    free(gathered);
    return total + tmp;
}

static void fcore_free(fcore *c, int n)
{
    if (c->act)
        for (int l = 0; l < n; l++) {
            tens_free(&c->act[l]);
            tens_free(&c->grad[l]);
            tens_free(&c->win[l]);
            tens_free(&c->gwin[l]);
        }
    if (c->w)
        for (int l = 0; l < n; l++) {
            free(c->w[l]);
            free(c->mom[l]);
            free(c->wg[l]);
            free(c->bn[l]);
        }
    free(c->act);
    free(c->grad);
    free(c->win);
    free(c->gwin);
    free(c->have_act);
    free(c->have_win);
    free(c->have_gwin);
    free(c->done_fwd);
    free(c->done_bwd);
    free(c->stats_reduced);
    free(c->w);
    free(c->mom);
    free(c->wg);
    free(c->bn);
    free(c->loss_part);
    free(c->dice);
    free(c->cur);
    free(c->chunk);
}

void fx_free(fx_state *x)
{
    if (!x)
        return;
    if (x->cs)
        for (int k = 0; k < x->p->cores; k++)
            fcore_free(&x->cs[k], x->g->n_layers);
    free(x->cs);
    free(x->has_bwd);
    for (int i = 0; i < 3; i++)
        free(x->scratch[i]);
    free(x);
}

/* Glorot-uniform kernels, zero biases, gamma 1 and beta 0 (fxdata.h). */
static void init_weights(const fx_state *x, int l, float *w)
{
    const glayer *L = &x->g->layers[l];
    if (L->op == GOP_BATCHNORM) {
        for (int64_t c = 0; c < L->out.c; c++) {
            w[c] = 1.0f;
            w[L->out.c + c] = 0.0f;
        }
        return;
    }
    const glayer *I = &x->g->layers[L->in[0]];
    int64_t taps = kernel_taps(L), cin = I->out.c, cout = L->out.c;
    int64_t nk = taps * cin * cout;
    for (int64_t i = 0; i < nk; i++)
        w[i] = fxd_weight(x->cfg.seed, l, i, taps * cin, taps * cout);
    for (int64_t i = nk; i < L->weights; i++)
        w[i] = 0.0f;
}

tpu_status fx_new(fx_state **out, const graph *g, const plan *p,
                  const tpu_params *hw, const fw_program *progs,
                  const fx_config *cfg, tpu_error *err)
{
    *out = NULL;
    fx_state *x = calloc(1, sizeof *x);
    if (!x)
        return tpu_fail(err, TPU_ERR_SYSTEM, "out of host memory (functional)");
    x->g = g;
    x->p = p;
    x->hw = hw;
    x->cfg = *cfg;
    x->G = p->batch * p->replicas;
    int n = g->n_layers;
    x->out_layer = -1;
    x->ncls = 0;
    for (int l = 0; l < n; l++) {
        if (g->layers[l].op != GOP_LOSS)
            x->out_layer = l;
        else if (x->ncls == 0)
            x->ncls = (int)g->layers[g->layers[l].in[0]].out.c;
    }
    if (x->ncls == 0)
        x->ncls = 1;
    if (cfg->output_layer >= 0 && cfg->output_layer < n &&
        g->layers[cfg->output_layer].op != GOP_LOSS)
        x->out_layer = cfg->output_layer;
    x->has_bwd = calloc((size_t)n + 1, 1);
    x->cs = calloc((size_t)p->cores, sizeof *x->cs);
    if (!x->has_bwd || !x->cs)
        goto oom;
    if (cfg->init_weights) {
        int64_t nw = 0;
        for (int l = 0; l < n; l++)
            if (g->layers[l].share_from < 0)
                nw += g->layers[l].weights;
        if (nw != cfg->n_init_weights) {
            fx_free(x);
            return tpu_fail(err, TPU_ERR_INPUT,
                            "functional: %lld starting weights given, the "
                            "graph has %lld",
                            (long long)cfg->n_init_weights, (long long)nw);
        }
    }
    for (size_t i = 0; i < progs[0].n; i++) {
        const fw_insn *in = &progs[0].code[i];
        if (in->phase == PHASE_BWD && in->layer >= 0 && in->fx != FX_NONE)
            x->has_bwd[in->layer] = 1;
    }
    for (int k = 0; k < p->cores; k++) {
        fcore *c = &x->cs[k];
        size_t nl = (size_t)n + 1;
        c->act = calloc(nl, sizeof(tens));
        c->grad = calloc(nl, sizeof(tens));
        c->win = calloc(nl, sizeof(tens));
        c->gwin = calloc(nl, sizeof(tens));
        c->have_act = calloc(nl, 1);
        c->have_win = calloc(nl, 1);
        c->have_gwin = calloc(nl, 1);
        c->done_fwd = calloc(nl, 1);
        c->done_bwd = calloc(nl, 1);
        c->stats_reduced = calloc(nl, 1);
        c->w = calloc(nl, sizeof(float *));
        c->mom = calloc(nl, sizeof(float *));
        c->wg = calloc(nl, sizeof(float *));
        c->bn = calloc(nl, sizeof(float *));
        c->loss_part = calloc(nl, sizeof(double));
        c->dice = calloc(nl * GRAPH_MAX_IN * 3, sizeof(double));
        c->cur = calloc(nl * 3, sizeof(int64_t));
        c->chunk = calloc(nl * 3, sizeof(int64_t));
        if (!c->act || !c->grad || !c->win || !c->gwin || !c->have_act ||
            !c->have_win || !c->have_gwin || !c->done_fwd || !c->done_bwd ||
            !c->stats_reduced || !c->w || !c->mom || !c->wg || !c->bn ||
            !c->loss_part || !c->dice || !c->cur || !c->chunk)
            goto oom;
        for (int l = 0; l < n; l++) {
            const glayer *L = &g->layers[l];
            if (L->op == GOP_BATCHNORM) {
                c->bn[l] = calloc((size_t)L->out.c * 6, sizeof(float));
                if (!c->bn[l])
                    goto oom;
            }
            if (L->weights <= 0 || L->share_from >= 0)
                continue;
            c->w[l] = malloc((size_t)L->weights * sizeof(float));
            c->mom[l] = calloc((size_t)L->weights, sizeof(float));
            c->wg[l] = calloc((size_t)L->weights, sizeof(float));
            if (!c->w[l] || !c->mom[l] || !c->wg[l])
                goto oom;
            init_weights(x, l, c->w[l]);
        }
        if (cfg->init_weights) {
            int64_t o = 0;
            for (int l = 0; l < n; l++) {
                if (!c->w[l])
                    continue;
                memcpy(c->w[l], cfg->init_weights + o,
                       (size_t)g->layers[l].weights * sizeof(float));
                o += g->layers[l].weights;
            }
        }
    }
    *out = x;
    return TPU_OK;
oom:
    fx_free(x);
    return tpu_fail(err, TPU_ERR_SYSTEM, "out of host memory (functional)");
}

/* Input n's shard on core k: the synthetic learnable data of fxdata.h. */
static tpu_status make_input(fx_state *x, int core, int l, tpu_error *err)
{
    fcore *c = &x->cs[core];
    const glayer *L = &x->g->layers[l];
    tens *t = &c->act[l];
    shard_shape(x, core, l, t);
    if (tens_alloc(t, err))
        return TPU_ERR_SYSTEM;
    int64_t E = gshape_elems(&L->out), np = tens_pos(t);
    for (int64_t b = 0; b < t->B; b++) {
        int64_t gb = gexample(x, core, b);
        for (int64_t pos = 0; pos < np; pos++) {
            int64_t loc[SP], g[SP];
            pos_decode(t, pos, loc);
            for (int d = 0; d < SP; d++)
                g[d] = loc[d] + t->lo[d];
            for (int64_t ch = 0; ch < t->C; ch++) {
                double v = fxd_input(x->cfg.seed, l, x->step, x->G, gb,
                                     gflat(t, g, ch), E, x->ncls);
                t->v[at(t, b, loc, ch)] = rnd((float)v, L->dtype_bytes);
            }
        }
    }
    c->have_act[l] = 1;
    return TPU_OK;
}

tpu_status fx_begin_step(fx_state *x, int64_t step, tpu_error *err)
{
    x->step = step;
    int n = x->g->n_layers;
    for (int k = 0; k < x->p->cores; k++) {
        fcore *c = &x->cs[k];
        for (int l = 0; l < n; l++) {
            tens_free(&c->act[l]);
            tens_free(&c->grad[l]);
            tens_free(&c->win[l]);
            tens_free(&c->gwin[l]);
            if (c->wg[l])
                memset(c->wg[l], 0,
                       (size_t)x->g->layers[owner(x, l)].weights *
                           sizeof(float));
        }
        memset(c->have_act, 0, (size_t)n);
        memset(c->have_win, 0, (size_t)n);
        memset(c->have_gwin, 0, (size_t)n);
        memset(c->done_fwd, 0, (size_t)n + 1);
        memset(c->done_bwd, 0, (size_t)n);
        memset(c->stats_reduced, 0, (size_t)n);
        memset(c->loss_part, 0, (size_t)n * sizeof(double));
        memset(c->dice, 0, (size_t)n * GRAPH_MAX_IN * 3 * sizeof(double));
        memset(c->cur, 0, (size_t)n * 3 * sizeof(int64_t));
        memset(c->chunk, 0, (size_t)n * 3 * sizeof(int64_t));
        c->swept = n;
        for (int l = 0; l < x->g->n_inputs; l++)
            if (make_input(x, k, l, err))
                return TPU_ERR_SYSTEM;
    }
    return TPU_OK;
}

/* ---- forward values ---------------------------------------------------- */

static tpu_status fwd_elementwise(fx_state *x, int core, int l, tpu_error *err);

static tpu_status act_of(fx_state *x, int core, int l, const tens **out,
                         tpu_error *err);

static tpu_status new_act(fx_state *x, int core, int l, tens **out,
                          tpu_error *err)
{
    fcore *c = &x->cs[core];
    tens *t = &c->act[l];
    shard_shape(x, core, l, t);
    if (tens_alloc(t, err))
        return TPU_ERR_SYSTEM;
    c->have_act[l] = 1;
    *out = t;
    return TPU_OK;
}

/* The window layer l's forward reads for input 0: what the halos or the
 * gather assembled, or the core's own shard of the input. */
static tpu_status fwin_of(fx_state *x, int core, int l, const tens **out,
                          tpu_error *err)
{
    fcore *c = &x->cs[core];
    if (c->have_win[l]) {
        *out = &c->win[l];
        return TPU_OK;
    }
    return act_of(x, core, x->g->layers[l].in[0], out, err);
}

/* Layers without instructions of their own (flatten, concat, a relu fused
 * into its producer's pass) are written in place by their producers: their
 * values are formed when first read, in their own dtype (an f32 producer
 * writing into a bf16 concat buffer rounds). */
static tpu_status lazy_forward(fx_state *x, int core, int l, tpu_error *err)
{
    const glayer *L = &x->g->layers[l];
    tens *o;
    const tens *in;
    tpu_status rc;
    switch (L->op) {
    case GOP_FLATTEN: {
        if ((rc = fwin_of(x, core, l, &in, err)))
            return rc;
        if ((rc = new_act(x, core, l, &o, err)))
            return rc;
        int64_t np = 1;
        for (int d = 0; d < SP; d++)
            np *= in->gext[d];
        for (int64_t b = 0; b < o->B; b++)
            for (int64_t pos = 0; pos < np; pos++) {
                int64_t g[SP], q = pos;
                for (int d = SP - 1; d >= 0; d--) {
                    g[d] = q % in->gext[d];
                    q /= in->gext[d];
                }
                for (int64_t ch = 0; ch < in->C; ch++) {
                    int miss = 0;
                    float v = rd(in, b, g, ch, &miss);
                    if (miss)
                        return missing(err, x, core, l, "flatten", miss);
                    o->v[b * o->C + pos * in->C + ch] = rnd(v, L->dtype_bytes);
                }
            }
        return TPU_OK;
    }
    case GOP_CONCAT: {
        if ((rc = new_act(x, core, l, &o, err)))
            return rc;
        int64_t off = 0;
        for (int k = 0; k < L->n_in; k++) {
            if ((rc = act_of(x, core, L->in[k], &in, err)))
                return rc;
            int64_t n = o->B * tens_pos(o);
            for (int64_t r = 0; r < n; r++)
                for (int64_t ch = 0; ch < in->C; ch++)
                    o->v[r * o->C + off + ch] =
                        rnd(in->v[r * in->C + ch], L->dtype_bytes);
            off += in->C;
        }
        return TPU_OK;
    }
    case GOP_RELU:
    case GOP_SIGMOID:
        return fwd_elementwise(x, core, l, err);
    default:
        return tpu_fail(err, TPU_ERR_SYSTEM,
                        "internal: functional: core %d reads layer '%s' "
                        "before its firmware computed it",
                        core, L->name);
    }
}

static tpu_status act_of(fx_state *x, int core, int l, const tens **out,
                         tpu_error *err)
{
    fcore *c = &x->cs[core];
    if (!c->have_act[l]) {
        tpu_status rc = lazy_forward(x, core, l, err);
        if (rc)
            return rc;
    }
    *out = &c->act[l];
    return TPU_OK;
}

/* ---- matrix products --------------------------------------------------- */

/* Tap index -> kernel offsets (row-major over the kernel dims). */
static void tap_decode(const glayer *L, int64_t t, int64_t k[SP])
{
    for (int d = SP - 1; d >= 0; d--) {
        if (d >= L->out.nsp || L->op == GOP_DENSE) {
            k[d] = 0;
            continue;
        }
        k[d] = t % L->kernel[d];
        t /= L->kernel[d];
    }
}

static int64_t dflt(int v)
{
    return v > 0 ? v : 1;
}

/* Input coordinate that output coordinate o reads through tap offset kk
 * along dim d; returns 0 when the tap does not hit (a stride phase of a
 * transposed conv), *gi = -1 for padding. */
static int tap_hits(const glayer *L, int d, int64_t o, int64_t kk, int64_t *gi)
{
    int64_t s = dflt(L->strides[d]), dil = dflt(L->dilation[d]);
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
static int tap_hits_dx(const glayer *L, int d, int64_t p, int64_t kk,
                       int64_t *go)
{
    int64_t s = dflt(L->strides[d]), dil = dflt(L->dilation[d]);
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
 * is laid out in slots `sw` wide of which the first `depth` rows are real
 * and the rest lane padding (zeros).  A padded row adds +0 to a column sum,
 * which changes no value (the sum starts at +0 and is never -0), and a K
 * tile of padding adds a +0 partial; so each weight tile's real rows are
 * multiplied on their own (one tile: c = its partial sum) and the
 * partials are added in tile order, as the MXU does: the bits of the
 * padded product, without storing or multiplying the padding. */
static tpu_status mm_bf16(const fx_state *x, const bf16 *a, const bf16 *b,
                          float *cres, int64_t m, int64_t kc, int64_t n,
                          int64_t depth, int64_t sw, tpu_error *err)
{
    int64_t R = x->hw->mxu.rows;
    if (depth >= sw)
        return mxu_product(x, a, b, cres, m, kc, n, err);
    bf16 *as = malloc(sizeof(bf16) * (size_t)(m * R + 1));
    float *t = malloc(sizeof(float) * (size_t)(m * n + 1));
    tpu_status rc = TPU_OK;
    int first = 1;
    if (!as || !t) {
        rc = tpu_fail(err, TPU_ERR_SYSTEM, "out of host memory (functional)");
        goto done;
    }
    for (int64_t q0 = 0; q0 < kc;) {
        /* the compact rows [q0, q1) that share one padded K tile */
        int64_t tile = ((q0 / depth) * sw + q0 % depth) / R, q1 = q0 + 1;
        while (q1 < kc && ((q1 / depth) * sw + q1 % depth) / R == tile)
            q1++;
        int64_t nr = q1 - q0;
        for (int64_t i = 0; i < m; i++)
            memcpy(&as[i * nr], &a[i * kc + q0], sizeof(bf16) * (size_t)nr);
        if ((rc = mxu_product(x, as, &b[q0 * n], first ? cres : t, m, nr, n,
                              err)))
            goto done;
        if (!first)
            for (int64_t i = 0; i < m * n; i++)
                cres[i] += t[i];
        first = 0;
        q0 = q1;
    }
    if (first)
        memset(cres, 0, sizeof(float) * (size_t)(m * n));
done:
    free(as);
    free(t);
    return rc;
}

/* C[m x n] = A[m x kc] B[kc x n] on the MXU (kc compact K rows, laid out
 * on the MXU as mm_bf16 says): operands rounded to bf16; with passes == 3
 * (f32 layers, bf16_3x) each operand is split into a bf16 high and low
 * part and the three significant products, each a whole MXU product, are
 * summed on the vector unit: (hi*hi + hi*lo) + lo*hi. */
static tpu_status mxu_mm(const fx_state *x, const float *a, const float *b,
                         float *cres, int64_t m, int64_t kc, int64_t n,
                         int64_t depth, int64_t sw, int passes, tpu_error *err)
{
    size_t na = (size_t)(m * kc), nb = (size_t)(kc * n), nc = (size_t)(m * n);
    bf16 *ah = malloc((na + 1) * sizeof(bf16)),
         *bh = malloc((nb + 1) * sizeof(bf16));
    bf16 *al = NULL, *bl = NULL;
    float *t = NULL;
    tpu_status rc = TPU_OK;
    if (!ah || !bh)
        goto oom;
    for (size_t i = 0; i < na; i++)
        ah[i] = bf16_from_f32(a[i]);
    for (size_t i = 0; i < nb; i++)
        bh[i] = bf16_from_f32(b[i]);
    if ((rc = mm_bf16(x, ah, bh, cres, m, kc, n, depth, sw, err)))
        goto done;
    if (passes == 3) {
        al = malloc((na + 1) * sizeof(bf16));
        bl = malloc((nb + 1) * sizeof(bf16));
        t = malloc((nc + 1) * sizeof(float));
        if (!al || !bl || !t)
            goto oom;
        for (size_t i = 0; i < na; i++)
            al[i] = bf16_from_f32(a[i] - bf16_to_f32(ah[i]));
        for (size_t i = 0; i < nb; i++)
            bl[i] = bf16_from_f32(b[i] - bf16_to_f32(bh[i]));
        if ((rc = mm_bf16(x, ah, bl, t, m, kc, n, depth, sw, err)))
            goto done;
        for (size_t i = 0; i < nc; i++)
            cres[i] += t[i];
        if ((rc = mm_bf16(x, al, bh, t, m, kc, n, depth, sw, err)))
            goto done;
        for (size_t i = 0; i < nc; i++)
            cres[i] += t[i];
    }
    goto done;
oom:
    rc = tpu_fail(err, TPU_ERR_SYSTEM, "out of host memory (functional)");
done:
    free(ah);
    free(bh);
    free(al);
    free(bl);
    free(t);
    return rc;
}

/* The rows [*r0, *r1) and columns [*n0, *n1) the next matmul instruction
 * of this kind covers: tiles walk the product's M rows (in->e), then the
 * next N chunk (lower.c's emit_matmul).  Rows past the real ones are
 * padding (XLA's padded batch): they hold zeros and their results are
 * dropped. */
static void next_tile(fcore *c, int l, int kind, const fw_insn *in,
                      int64_t total_n, int64_t *r0, int64_t *r1, int64_t *n0,
                      int64_t *n1)
{
    int64_t *cur = &c->cur[l * 3 + kind], *ch = &c->chunk[l * 3 + kind];
    *r0 = *cur;
    *r1 = *cur + in->a;
    *n0 = *ch * in->c;
    *n1 = *n0 + in->c < total_n ? *n0 + in->c : total_n;
    *cur += in->a;
    if (*cur >= in->e) {
        *cur = 0;
        (*ch)++;
    }
}

static int64_t nweights(const fx_state *x, int l)
{
    return x->g->layers[owner(x, l)].weights;
}

static float *wts(fx_state *x, int core, int l)
{
    return x->cs[core].w[owner(x, l)];
}

/* Weight-gradient partials are kept per layer (a layer that shares
 * weights has its own partial until the all-reduce adds it in). */
static tpu_status wgrad_of(fx_state *x, int core, int l, float **out,
                           tpu_error *err)
{
    fcore *c = &x->cs[core];
    if (!c->wg[l]) {
        c->wg[l] = calloc((size_t)nweights(x, l) + 1, sizeof(float));
        if (!c->wg[l])
            return tpu_fail(err, TPU_ERR_SYSTEM,
                            "out of host memory (functional)");
    }
    *out = c->wg[l];
    return TPU_OK;
}

static tpu_status grad_of(fx_state *x, int core, int l, tens **out,
                          tpu_error *err)
{
    fcore *c = &x->cs[core];
    tens *t = &c->grad[l];
    if (!t->v) {
        shard_shape(x, core, l, t);
        if (tens_alloc(t, err))
            return TPU_ERR_SYSTEM;
    }
    *out = t;
    return TPU_OK;
}

static tpu_status ensure_grad(fx_state *x, int core, int l, tpu_error *err);

/* The output-gradient window layer l's backward reads. */
static tpu_status gwin_of(fx_state *x, int core, int l, const tens **out,
                          tpu_error *err)
{
    fcore *c = &x->cs[core];
    tpu_status rc = ensure_grad(x, core, l, err);
    if (rc)
        return rc;
    if (c->have_gwin[l]) {
        *out = &c->gwin[l];
        return TPU_OK;
    }
    tens *g = NULL;
    rc = grad_of(x, core, l, &g, err);
    *out = g;
    return rc;
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
    gm->taps = kernel_taps(L);
    gm->cin = I->out.c;
    gm->cout = L->out.c;
    gm->spatial = L->op == GOP_DENSE ? 0 : L->out.nsp;
    int64_t depth = dx ? gm->cout : gm->cin;
    int64_t kt = gm->taps;
    if (L->op == GOP_CONV_T && !dx) {
        int64_t sprod = 1;
        for (int d = 0; d < L->out.nsp; d++)
            sprod *= dflt(L->strides[d]);
        kt = (gm->taps + sprod - 1) / sprod;
    }
    gm->depth = depth;
    gm->sw =
        (!dx && in->b == kt * depth) ? depth : (depth + rows - 1) / rows * rows;
    if (gm->sw < depth)
        return tpu_fail(err, TPU_ERR_SYSTEM, "internal: functional: K layout");
    return TPU_OK;
}

/* The forward product (dx = 0: rows are this core's output positions,
 * gathered from the input window, times W[t][ci][n]) and the input
 * gradient (dx = 1: rows are its input positions, gathered from the output
 * gradient's window, times W[t][n][co]).  One instruction's tile. */
static tpu_status mm_rows(fx_state *x, int core, int l, const fw_insn *in,
                          int dx, tpu_error *err)
{
    fcore *c = &x->cs[core];
    const glayer *L = &x->g->layers[l];
    mm_geom gm;
    tpu_status rc = geom(x, l, in, dx, &gm, err);
    if (rc)
        return rc;
    const tens *src; /* what the rows gather from */
    tens *dst;       /* whose rows they are */
    if (dx) {
        if ((rc = gwin_of(x, core, l, &src, err)) ||
            (rc = grad_of(x, core, L->in[0], &dst, err)))
            return rc;
    } else {
        dst = &c->act[l];
        if ((!c->have_act[l] && (rc = new_act(x, core, l, &dst, err))) ||
            (rc = fwin_of(x, core, l, &src, err)))
            return rc;
    }
    int64_t depth = dx ? gm.cout : gm.cin, width = dx ? gm.cin : gm.cout;
    int64_t npos = tens_pos(dst), real = dst->B * npos;
    int64_t r0, r1, n0, n1;
    next_tile(c, l, dx, in, width, &r0, &r1, &n0, &n1);
    if (r1 > real)
        r1 = real;
    if (r0 >= r1 || n0 >= n1)
        return TPU_OK;
    int64_t m = r1 - r0, nn = n1 - n0;
    int64_t kc = gm.taps * depth; /* compact K: the real rows only */
    float *A = scratch(x, 0, m * kc);
    float *Bm = scratch(x, 1, kc * nn);
    float *C = scratch(x, 2, m * nn);
    if (!A || !Bm || !C) {
        rc = tpu_fail(err, TPU_ERR_SYSTEM, "out of host memory (functional)");
        goto done;
    }
    const float *W = wts(x, core, l);
    for (int64_t t = 0; t < gm.taps; t++)
        for (int64_t k = 0; k < depth; k++)
            for (int64_t j = 0; j < nn; j++)
                Bm[(t * depth + k) * nn + j] =
                    dx ? W[(t * gm.cin + n0 + j) * gm.cout + k]
                       : W[(t * gm.cin + k) * gm.cout + n0 + j];
    for (int64_t r = r0; r < r1; r++) {
        int64_t b = r / npos, loc[SP], gp[SP];
        pos_decode(dst, r % npos, loc);
        for (int d = 0; d < SP; d++)
            gp[d] = loc[d] + dst->lo[d];
        for (int64_t t = 0; t < gm.taps; t++) {
            int64_t kk[SP], gs[SP];
            tap_decode(L, t, kk);
            int hit = 1;
            for (int d = 0; d < SP; d++) {
                gs[d] = gp[d];
                if (d < gm.spatial &&
                    !(dx ? tap_hits_dx : tap_hits)(L, d, gp[d], kk[d], &gs[d]))
                    hit = 0;
            }
            if (!hit)
                continue;
            int miss = 0;
            if (rd_row(src, b, gs, 0, depth, &A[(r - r0) * kc + t * depth],
                       &miss) < 0) {
                rc = missing(err, x, core, l, dx ? "input gradient" : "forward",
                             miss);
                goto done;
            }
        }
    }
    if ((rc = mxu_mm(x, A, Bm, C, m, kc, nn, gm.depth, gm.sw, in->passes, err)))
        goto done;
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
            *o = rnd(v, L->dtype_bytes);
        }
done:
    return rc;
}

/* dW[t, ci, co] = sum over this core's output rows of x(window) * dY.  The
 * instruction's rows are the product's K (in the lowering's layout); they
 * map in proportion onto the taps x cin weight rows, which changes no value:
 * each weight row is one independent column of sums. */
static tpu_status mm_dw(fx_state *x, int core, int l, const fw_insn *in,
                        tpu_error *err)
{
    fcore *c = &x->cs[core];
    const glayer *L = &x->g->layers[l];
    mm_geom gm;
    tpu_status rc = geom(x, l, in, 0, &gm, err);
    if (rc)
        return rc;
    const tens *win;
    tens *gy;
    float *wg;
    if ((rc = ensure_grad(x, core, l, err)) ||
        (rc = grad_of(x, core, l, &gy, err)) ||
        (rc = fwin_of(x, core, l, &win, err)) ||
        (rc = wgrad_of(x, core, l, &wg, err)))
        return rc;
    int64_t R = gm.taps * gm.cin, npos = tens_pos(gy), Mc = gy->B * npos;
    int64_t r0, r1, n0, n1;
    next_tile(c, l, 2, in, gm.cout, &r0, &r1, &n0, &n1);
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
    float *A = scratch(x, 0, m * Mc);
    float *Bm = scratch(x, 1, Mc * nn);
    float *C = scratch(x, 2, m * nn);
    if (!A || !Bm || !C) {
        rc = tpu_fail(err, TPU_ERR_SYSTEM, "out of host memory (functional)");
        goto done;
    }
    for (int64_t mm = 0; mm < Mc; mm++)
        for (int64_t j = 0; j < nn; j++)
            Bm[mm * nn + j] = gy->v[mm * gm.cout + n0 + j];
    /* Each position's window rows, tap by tap, a run of channels at a
     * time, into the columns of X^T. */
    float *row = malloc(sizeof(float) * (size_t)(gm.cin + 1));
    if (!row) {
        rc = tpu_fail(err, TPU_ERR_SYSTEM, "out of host memory (functional)");
        goto done;
    }
    for (int64_t mm = 0; mm < Mc && !rc; mm++) {
        int64_t b = mm / npos, loc[SP], og[SP];
        pos_decode(gy, mm % npos, loc);
        for (int d = 0; d < SP; d++)
            og[d] = loc[d] + gy->lo[d];
        for (int64_t t = k0 / gm.cin; t * gm.cin < k1; t++) {
            int64_t kk[SP], gi[SP];
            tap_decode(L, t, kk);
            int hit = 1;
            for (int d = 0; d < SP; d++) {
                gi[d] = og[d];
                if (d < gm.spatial && !tap_hits(L, d, og[d], kk[d], &gi[d]))
                    hit = 0;
            }
            if (!hit)
                continue;
            int64_t c0 = t * gm.cin < k0 ? k0 - t * gm.cin : 0;
            int64_t c1 = (t + 1) * gm.cin > k1 ? k1 - t * gm.cin : gm.cin;
            int miss = 0, got = rd_row(win, b, gi, c0, c1 - c0, row, &miss);
            if (got < 0) {
                rc = missing(err, x, core, l, "weight gradient", miss);
                break;
            }
            if (got)
                for (int64_t ci = c0; ci < c1; ci++)
                    A[(t * gm.cin + ci - k0) * Mc + mm] = row[ci - c0];
        }
    }
    free(row);
    if (rc)
        goto done;
    if ((rc = mxu_mm(x, A, Bm, C, m, Mc, nn, Mc, Mc, in->passes, err)))
        goto done;
    for (int64_t k = k0; k < k1; k++)
        for (int64_t j = 0; j < nn; j++)
            wg[k * gm.cout + n0 + j] += C[(k - k0) * nn + j];
done:
    return rc;
}

/* ---- vector passes: forward -------------------------------------------- */

/* Per-channel sums of x and x^2 over this core's shard (fp32, in storage
 * order): batchnorm's statistics before any all-reduce. */
static void bn_local_stats(const tens *in, float *sum, float *sq)
{
    int64_t rows = in->B * tens_pos(in);
    for (int64_t ch = 0; ch < in->C; ch++)
        sum[ch] = sq[ch] = 0.0f;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t ch = 0; ch < in->C; ch++) {
            float v = in->v[r * in->C + ch];
            sum[ch] += v;
            sq[ch] += v * v;
        }
}

static tpu_status fwd_batchnorm(fx_state *x, int core, int l, tpu_error *err)
{
    fcore *c = &x->cs[core];
    const glayer *L = &x->g->layers[l];
    const tens *in;
    tens *o;
    tpu_status rc;
    if ((rc = act_of(x, core, L->in[0], &in, err)) ||
        (rc = new_act(x, core, l, &o, err)))
        return rc;
    int64_t C = L->out.c;
    float *bn = c->bn[l];
    if (!c->stats_reduced[l])
        bn_local_stats(in, bn, bn + C);
    float n = (float)(x->p->batch * gpos_count(L));
    const float *W = wts(x, core, l);
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
    int64_t rows = o->B * tens_pos(o);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t ch = 0; ch < C; ch++) {
            float xh = (in->v[r * C + ch] - bn[2 * C + ch]) * bn[3 * C + ch];
            o->v[r * C + ch] = rnd(xh * W[ch] + W[C + ch], L->dtype_bytes);
        }
    return TPU_OK;
}

/* Dropout's mask: kept when u >= rate (fxdata.h), by global coordinates. */
static int drop_keep(const fx_state *x, int core, int l, const tens *t,
                     int64_t b, const int64_t loc[SP], int64_t ch)
{
    const glayer *L = &x->g->layers[l];
    int64_t g[SP];
    for (int d = 0; d < SP; d++)
        g[d] = loc[d] + t->lo[d];
    int64_t E = gshape_elems(&L->out);
    int64_t idx = (x->step * x->G + gexample(x, core, b)) * E + gflat(t, g, ch);
    return fxd_u(x->cfg.seed, FXD_TAG_DROPOUT + (uint64_t)l, (uint64_t)idx) >=
           L->rate;
}

/* Pooling window of output coordinate og: in-bounds input coordinates. */
static tpu_status fwd_pool(fx_state *x, int core, int l, tpu_error *err)
{
    const glayer *L = &x->g->layers[l];
    const tens *in;
    tens *o;
    tpu_status rc;
    if ((rc = fwin_of(x, core, l, &in, err)) ||
        (rc = new_act(x, core, l, &o, err)))
        return rc;
    int64_t win = 1;
    for (int d = 0; d < L->out.nsp; d++)
        win *= L->kernel[d];
    int64_t npos = tens_pos(o);
    for (int64_t b = 0; b < o->B; b++)
        for (int64_t pos = 0; pos < npos; pos++) {
            int64_t loc[SP];
            pos_decode(o, pos, loc);
            for (int64_t ch = 0; ch < o->C; ch++) {
                float best = -INFINITY, sum = 0.0f;
                int64_t cnt = 0;
                for (int64_t t = 0; t < win; t++) {
                    int64_t kk[SP], gi[SP];
                    tap_decode(L, t, kk);
                    int inb = 1;
                    for (int d = 0; d < SP; d++) {
                        gi[d] = loc[d] + o->lo[d];
                        if (d < L->out.nsp) {
                            tap_hits(L, d, gi[d], kk[d], &gi[d]);
                            if (gi[d] < 0 || gi[d] >= in->gext[d])
                                inb = 0;
                        }
                    }
                    if (!inb)
                        continue;
                    int miss = 0;
                    float v = rd(in, b, gi, ch, &miss);
                    if (miss)
                        return missing(err, x, core, l, "pooling", miss);
                    if (v > best)
                        best = v;
                    sum += v;
                    cnt++;
                }
                float r = L->op == GOP_MAXPOOL
                              ? best
                              : (cnt ? sum / (float)cnt : 0.0f);
                o->v[at(o, b, loc, ch)] = rnd(r, L->dtype_bytes);
            }
        }
    return TPU_OK;
}

static tpu_status fwd_upsample(fx_state *x, int core, int l, tpu_error *err)
{
    const glayer *L = &x->g->layers[l];
    const tens *in;
    tens *o;
    tpu_status rc;
    if ((rc = fwin_of(x, core, l, &in, err)) ||
        (rc = new_act(x, core, l, &o, err)))
        return rc;
    int64_t npos = tens_pos(o);
    for (int64_t b = 0; b < o->B; b++)
        for (int64_t pos = 0; pos < npos; pos++) {
            int64_t loc[SP], gi[SP];
            pos_decode(o, pos, loc);
            for (int d = 0; d < SP; d++)
                gi[d] = (loc[d] + o->lo[d]) /
                        (d < L->out.nsp ? dflt(L->factor[d]) : 1);
            for (int64_t ch = 0; ch < o->C; ch++) {
                int miss = 0;
                float v = rd(in, b, gi, ch, &miss);
                if (miss)
                    return missing(err, x, core, l, "upsample", miss);
                o->v[at(o, b, loc, ch)] = rnd(v, L->dtype_bytes);
            }
        }
    return TPU_OK;
}

/* Elementwise layers with a pass of their own. */
static tpu_status fwd_elementwise(fx_state *x, int core, int l, tpu_error *err)
{
    const glayer *L = &x->g->layers[l];
    const tens *ins[GRAPH_MAX_IN];
    tens *o;
    tpu_status rc;
    for (int k = 0; k < L->n_in; k++)
        if ((rc = act_of(x, core, L->in[k], &ins[k], err)))
            return rc;
    if ((rc = new_act(x, core, l, &o, err)))
        return rc;
    int64_t npos = tens_pos(o);
    for (int64_t b = 0; b < o->B; b++)
        for (int64_t pos = 0; pos < npos; pos++) {
            int64_t loc[SP];
            pos_decode(o, pos, loc);
            for (int64_t ch = 0; ch < o->C; ch++) {
                int64_t i = at(o, b, loc, ch);
                float v = ins[0]->v[i], r = v;
                if (L->op == GOP_RELU)
                    r = v > 0.0f ? v : 0.0f;
                else if (L->op == GOP_SIGMOID)
                    r = 1.0f / (1.0f + expf(-v));
                else if (L->op == GOP_DROPOUT && x->g->train)
                    r = drop_keep(x, core, l, o, b, loc, ch)
                            ? v / (1.0f - (float)L->rate)
                            : 0.0f;
                else if (L->op == GOP_ADD)
                    for (int k = 1; k < L->n_in; k++)
                        r += ins[k]->v[i];
                o->v[i] = rnd(r, L->dtype_bytes);
            }
        }
    /* A relu fused into this add's pass is formed when read. */
    return TPU_OK;
}

/* Global average pooling: this core's positions, divided by all of them;
 * the all-reduce adds the other shards' parts. */
static tpu_status fwd_gap(fx_state *x, int core, int l, tpu_error *err)
{
    const glayer *L = &x->g->layers[l];
    const tens *in;
    tens *o;
    tpu_status rc;
    if ((rc = act_of(x, core, L->in[0], &in, err)) ||
        (rc = new_act(x, core, l, &o, err)))
        return rc;
    float P = (float)gpos_count(&x->g->layers[L->in[0]]);
    int64_t npos = tens_pos(in);
    /* A split input's partial means are summed by the all-reduce, which
     * rounds the total to the layer's dtype. */
    int split = 0;
    for (int d = 0; d < SP; d++)
        split |= is_split(x, L->in[0], d);
    for (int64_t b = 0; b < o->B; b++)
        for (int64_t ch = 0; ch < o->C; ch++) {
            float s = 0.0f;
            for (int64_t pos = 0; pos < npos; pos++)
                s += in->v[(b * npos + pos) * in->C + ch];
            o->v[b * o->C + ch] = split ? s / P : rnd(s / P, L->dtype_bytes);
        }
    return TPU_OK;
}

/* ---- losses ------------------------------------------------------------ */

/* The channel that is 1 in the one-hot target of example b (fxdata.h). */
static int64_t target_channel(const fx_state *x, int core, int64_t b, int64_t C)
{
    int y =
        fxd_class(x->cfg.seed, x->step, x->G, gexample(x, core, b), x->ncls);
    return (int64_t)y % C;
}

static double sigm(double v)
{
    return 1.0 / (1.0 + exp(-v));
}

/* Elements the mean of input k runs over (global batch x positions, x
 * channels for elementwise losses). */
static double loss_norm(const fx_state *x, const glayer *L, int k)
{
    const glayer *I = &x->g->layers[L->in[k]];
    double n = (double)x->G * (double)gpos_count(I);
    if (L->loss != GLOSS_SOFTMAX_XENT)
        n *= (double)I->out.c;
    return n;
}

/* The loss pass: this core's partial loss (cores holding a distinct part
 * only) and the dice sums; the gradients follow once the sums are whole. */
static tpu_status fwd_loss(fx_state *x, int core, int l, tpu_error *err)
{
    fcore *c = &x->cs[core];
    const glayer *L = &x->g->layers[l];
    double total = 0;
    for (int k = 0; k < L->n_in; k++) {
        const tens *z;
        tpu_status rc = act_of(x, core, L->in[k], &z, err);
        if (rc)
            return rc;
        int keep = contributes(x, core, L->in[k]);
        double s = 0, *dz = &c->dice[(l * GRAPH_MAX_IN + k) * 3];
        int64_t rows = z->B * tens_pos(z), C = z->C, npos = tens_pos(z);
        for (int64_t r = 0; r < rows; r++) {
            const float *v = &z->v[r * C];
            int64_t tc = target_channel(x, core, r / npos, C);
            if (L->loss == GLOSS_SOFTMAX_XENT) {
                double mx = v[0], se = 0;
                for (int64_t ch = 1; ch < C; ch++)
                    mx = v[ch] > mx ? v[ch] : mx;
                for (int64_t ch = 0; ch < C; ch++)
                    se += exp(v[ch] - mx);
                s += -(v[tc] - mx - log(se));
                continue;
            }
            for (int64_t ch = 0; ch < C; ch++) {
                double t = ch == tc, zz = v[ch];
                double p = sigm(zz), dd = zz - t;
                switch (L->loss) {
                case GLOSS_SIGMOID_FOCAL: {
                    double pt = t > 0 ? p : 1 - p;
                    double a = t > 0 ? FOCAL_ALPHA : 1 - FOCAL_ALPHA;
                    s += -a * pow(1 - pt, FOCAL_GAMMA) *
                         log(pt > 1e-30 ? pt : 1e-30);
                    break;
                }
                case GLOSS_L2:
                    s += 0.5 * dd * dd;
                    break;
                case GLOSS_SMOOTH_L1:
                    s += fabs(dd) < 1 ? 0.5 * dd * dd : fabs(dd) - 0.5;
                    break;
                case GLOSS_DICE:
                    dz[0] += p * t;
                    dz[1] += p;
                    dz[2] += t;
                    break;
                default:
                    break;
                }
            }
        }
        /* The dice sums stay on every core: with an unsplit input they are
         * already whole (no all-reduce follows); the all-reduce counts the
         * distinct parts only.  The loss itself is counted once. */
        if (!keep)
            s = 0;
        if (L->loss != GLOSS_DICE)
            total += s / loss_norm(x, L, k);
    }
    c->loss_part[l] = total;
    return TPU_OK;
}

/* The loss's gradient into its inputs (the dice sums are whole by now). */
static tpu_status bwd_loss(fx_state *x, int core, int l, tpu_error *err)
{
    fcore *c = &x->cs[core];
    const glayer *L = &x->g->layers[l];
    int R = x->p->replicas;
    for (int k = 0; k < L->n_in; k++) {
        const tens *z;
        tens *gz;
        tpu_status rc;
        if ((rc = act_of(x, core, L->in[k], &z, err)) ||
            (rc = grad_of(x, core, L->in[k], &gz, err)))
            return rc;
        const double *dz = &c->dice[(l * GRAPH_MAX_IN + k) * 3];
        double N = loss_norm(x, L, k);
        int64_t rows = z->B * tens_pos(z), C = z->C, npos = tens_pos(z);
        for (int64_t r = 0; r < rows; r++) {
            const float *v = &z->v[r * C];
            float *gv = &gz->v[r * C];
            int64_t tc = target_channel(x, core, r / npos, C);
            if (L->loss == GLOSS_SOFTMAX_XENT) {
                double mx = v[0], se = 0;
                for (int64_t ch = 1; ch < C; ch++)
                    mx = v[ch] > mx ? v[ch] : mx;
                for (int64_t ch = 0; ch < C; ch++)
                    se += exp(v[ch] - mx);
                for (int64_t ch = 0; ch < C; ch++)
                    gv[ch] += (float)((exp(v[ch] - mx) / se - (ch == tc)) / N);
                continue;
            }
            for (int64_t ch = 0; ch < C; ch++) {
                double t = ch == tc, zz = v[ch];
                double p = sigm(zz), dd = zz - t, gr = 0;
                switch (L->loss) {
                case GLOSS_SIGMOID_FOCAL: {
                    double a = t > 0 ? FOCAL_ALPHA : 1 - FOCAL_ALPHA;
                    double pt = t > 0 ? p : 1 - p;
                    pt = pt > 1e-30 ? pt : 1e-30;
                    /* d/dpt of -a (1-pt)^g log pt, times dpt/dz = +-p(1-p). */
                    double dpt =
                        a *
                        (FOCAL_GAMMA * pow(1 - pt, FOCAL_GAMMA - 1) * log(pt) -
                         pow(1 - pt, FOCAL_GAMMA) / pt);
                    gr = dpt * p * (1 - p) * (t > 0 ? 1 : -1) / N;
                    break;
                }
                case GLOSS_L2:
                    gr = dd / N;
                    break;
                case GLOSS_SMOOTH_L1:
                    gr = (dd > 1 ? 1 : dd < -1 ? -1 : dd) / N;
                    break;
                case GLOSS_DICE: {
                    double S = dz[1] + dz[2] + 1, I2 = 2 * dz[0] + 1;
                    gr = -(2 * t * S - I2) / (S * S) * p * (1 - p) / R;
                    break;
                }
                default:
                    break;
                }
                gv[ch] += (float)gr;
            }
        }
    }
    return TPU_OK;
}

/* ---- vector passes: backward ------------------------------------------- */

/* Adds src (a shard of layer `from`'s gradient) into layer `to`'s gradient
 * element by element, times mask where given. */
static tpu_status add_grad(fx_state *x, int core, int to, const tens *src,
                           const float *scale, tpu_error *err)
{
    if (!x->g->layers[to].needs_grad)
        return TPU_OK;
    tens *gt;
    tpu_status rc = grad_of(x, core, to, &gt, err);
    if (rc)
        return rc;
    int64_t n = tens_elems(gt);
    if (tens_elems(src) != n)
        return tpu_fail(err, TPU_ERR_SYSTEM,
                        "internal: functional: gradient shapes differ");
    for (int64_t i = 0; i < n; i++)
        gt->v[i] += scale ? src->v[i] * scale[i] : src->v[i];
    return TPU_OK;
}

static tpu_status bwd_act(fx_state *x, int core, int l, tpu_error *err)
{
    const glayer *L = &x->g->layers[l];
    const tens *y;
    tens *gy;
    tpu_status rc;
    if ((rc = ensure_grad(x, core, l, err)) ||
        (rc = grad_of(x, core, l, &gy, err)) ||
        (rc = act_of(x, core, l, &y, err)))
        return rc;
    int64_t n = tens_elems(gy);
    float *m = malloc((size_t)n * sizeof(float) + 1);
    if (!m)
        return tpu_fail(err, TPU_ERR_SYSTEM, "out of host memory (functional)");
    int64_t npos = tens_pos(gy);
    for (int64_t i = 0; i < n; i++) {
        float v = y->v[i];
        switch (L->op) {
        case GOP_RELU:
            m[i] = v > 0.0f ? 1.0f : 0.0f;
            break;
        case GOP_SIGMOID:
            m[i] = v * (1.0f - v);
            break;
        case GOP_DROPOUT: {
            int64_t r = i / gy->C, loc[SP];
            pos_decode(gy, r % npos, loc);
            m[i] = !x->g->train ? 1.0f
                   : drop_keep(x, core, l, gy, r / npos, loc, i % gy->C)
                       ? 1.0f / (1.0f - (float)L->rate)
                       : 0.0f;
            break;
        }
        default:
            m[i] = 1.0f;
        }
    }
    rc = add_grad(x, core, L->in[0], gy, m, err);
    free(m);
    return rc;
}

static tpu_status bwd_bn_stats(fx_state *x, int core, int l, tpu_error *err)
{
    fcore *c = &x->cs[core];
    const glayer *L = &x->g->layers[l];
    const tens *in;
    tens *gy;
    float *wg;
    tpu_status rc;
    if ((rc = ensure_grad(x, core, l, err)) ||
        (rc = grad_of(x, core, l, &gy, err)) ||
        (rc = act_of(x, core, L->in[0], &in, err)) ||
        (rc = wgrad_of(x, core, l, &wg, err)))
        return rc;
    int64_t C = L->out.c, rows = gy->B * tens_pos(gy);
    float *bn = c->bn[l];
    for (int64_t ch = 0; ch < C; ch++)
        bn[4 * C + ch] = bn[5 * C + ch] = 0.0f;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t ch = 0; ch < C; ch++) {
            float dy = gy->v[r * C + ch];
            float xh = (in->v[r * C + ch] - bn[2 * C + ch]) * bn[3 * C + ch];
            bn[4 * C + ch] += dy;
            bn[5 * C + ch] += dy * xh;
        }
    /* gamma and beta: this core's partial sums, all-reduced with the other
     * weight gradients. */
    for (int64_t ch = 0; ch < C; ch++) {
        wg[ch] += bn[5 * C + ch];
        wg[C + ch] += bn[4 * C + ch];
    }
    return TPU_OK;
}

static tpu_status bwd_bn(fx_state *x, int core, int l, tpu_error *err)
{
    fcore *c = &x->cs[core];
    const glayer *L = &x->g->layers[l];
    const tens *in;
    tens *gy, *gx;
    tpu_status rc;
    if (!x->g->layers[L->in[0]].needs_grad)
        return TPU_OK;
    if ((rc = grad_of(x, core, l, &gy, err)) ||
        (rc = act_of(x, core, L->in[0], &in, err)) ||
        (rc = grad_of(x, core, L->in[0], &gx, err)))
        return rc;
    int64_t C = L->out.c, rows = gy->B * tens_pos(gy);
    const float *bn = c->bn[l], *W = wts(x, core, l);
    float n = (float)(x->p->batch * gpos_count(L));
    for (int64_t r = 0; r < rows; r++)
        for (int64_t ch = 0; ch < C; ch++) {
            float dy = gy->v[r * C + ch];
            float xh = (in->v[r * C + ch] - bn[2 * C + ch]) * bn[3 * C + ch];
            gx->v[r * C + ch] +=
                W[ch] * bn[3 * C + ch] / n *
                (n * dy - bn[4 * C + ch] - xh * bn[5 * C + ch]);
        }
    return TPU_OK;
}

/* Pooling and upsampling: each input row of this core's shard collects
 * from the output rows whose windows hold it (the gradient window). */
static tpu_status bwd_window(fx_state *x, int core, int l, tpu_error *err)
{
    const glayer *L = &x->g->layers[l];
    if (!x->g->layers[L->in[0]].needs_grad)
        return TPU_OK;
    const tens *gw, *xin = NULL;
    tens *gx;
    tpu_status rc;
    if ((rc = gwin_of(x, core, l, &gw, err)) ||
        (rc = grad_of(x, core, L->in[0], &gx, err)))
        return rc;
    if (L->op == GOP_MAXPOOL && (rc = fwin_of(x, core, l, &xin, err)))
        return rc;
    int64_t win = 1;
    if (L->op != GOP_UPSAMPLE)
        for (int d = 0; d < L->out.nsp; d++)
            win *= L->kernel[d];
    int64_t npos = tens_pos(gx);
    for (int64_t b = 0; b < gx->B; b++)
        for (int64_t pos = 0; pos < npos; pos++) {
            int64_t loc[SP], gp[SP];
            pos_decode(gx, pos, loc);
            for (int d = 0; d < SP; d++)
                gp[d] = loc[d] + gx->lo[d];
            for (int64_t ch = 0; ch < gx->C; ch++) {
                float acc = 0.0f;
                if (L->op == GOP_UPSAMPLE) {
                    /* outputs gp*f .. gp*f + f-1 along every dim */
                    int64_t nf = 1, f[SP];
                    for (int d = 0; d < SP; d++) {
                        f[d] = d < L->out.nsp ? dflt(L->factor[d]) : 1;
                        nf *= f[d];
                    }
                    for (int64_t q = 0; q < nf; q++) {
                        int64_t go[SP], qq = q;
                        for (int d = SP - 1; d >= 0; d--) {
                            go[d] = gp[d] * f[d] + qq % f[d];
                            qq /= f[d];
                        }
                        int miss = 0;
                        acc += rd(gw, b, go, ch, &miss);
                        if (miss)
                            return missing(err, x, core, l, "upsample gradient",
                                           miss);
                    }
                    gx->v[at(gx, b, loc, ch)] += acc;
                    continue;
                }
                for (int64_t t = 0; t < win; t++) {
                    int64_t kk[SP], go[SP];
                    tap_decode(L, t, kk);
                    int hit = 1;
                    for (int d = 0; d < SP; d++) {
                        go[d] = gp[d];
                        if (d < L->out.nsp &&
                            (!tap_hits_dx(L, d, gp[d], kk[d], &go[d]) ||
                             go[d] < 0 || go[d] >= gw->gext[d]))
                            hit = 0;
                    }
                    if (!hit)
                        continue;
                    int miss = 0;
                    float dy = rd(gw, b, go, ch, &miss);
                    if (miss)
                        return missing(err, x, core, l, "pooling gradient",
                                       miss);
                    /* The output's window: its in-bounds inputs. */
                    int64_t cnt = 0, arg = -1;
                    float best = -INFINITY;
                    for (int64_t u = 0; u < win; u++) {
                        int64_t ku[SP], gi[SP];
                        tap_decode(L, u, ku);
                        int inb = 1;
                        for (int d = 0; d < SP; d++) {
                            gi[d] = go[d];
                            if (d < L->out.nsp) {
                                tap_hits(L, d, go[d], ku[d], &gi[d]);
                                if (gi[d] < 0 || gi[d] >= gx->gext[d])
                                    inb = 0;
                            }
                        }
                        if (!inb)
                            continue;
                        cnt++;
                        if (L->op == GOP_MAXPOOL) {
                            int m2 = 0;
                            float v = rd(xin, b, gi, ch, &m2);
                            if (m2)
                                return tpu_fail(
                                    err, TPU_ERR_INPUT,
                                    "functional mode: maxpool '%s' backward "
                                    "needs input rows of a neighbour's window "
                                    "(a pooling window across an uneven shard "
                                    "boundary); not modelled yet",
                                    L->name);
                            if (v > best) {
                                best = v;
                                arg = u;
                            }
                        }
                    }
                    if (L->op == GOP_MAXPOOL)
                        acc += arg == t ? dy : 0.0f;
                    else
                        acc += cnt ? dy / (float)cnt : 0.0f;
                }
                gx->v[at(gx, b, loc, ch)] += acc;
            }
        }
    return TPU_OK;
}

static tpu_status bwd_gap(fx_state *x, int core, int l, tpu_error *err)
{
    const glayer *L = &x->g->layers[l];
    if (!x->g->layers[L->in[0]].needs_grad)
        return TPU_OK;
    tens *gy, *gx;
    tpu_status rc;
    if ((rc = ensure_grad(x, core, l, err)) ||
        (rc = grad_of(x, core, l, &gy, err)) ||
        (rc = grad_of(x, core, L->in[0], &gx, err)))
        return rc;
    float P = (float)gpos_count(&x->g->layers[L->in[0]]);
    int64_t npos = tens_pos(gx);
    for (int64_t b = 0; b < gx->B; b++)
        for (int64_t pos = 0; pos < npos; pos++)
            for (int64_t ch = 0; ch < gx->C; ch++)
                gx->v[(b * npos + pos) * gx->C + ch] +=
                    gy->v[b * gy->C + ch] / P;
    return TPU_OK;
}

/* Layers whose backward has no instructions: add (its inputs' gradients
 * alias dY), concat and flatten (views), a relu fused into its producer's
 * pass (the producer's backward reads its mask), and the loss (whose
 * gradient came out of the forward pass). */
static tpu_status lazy_backward(fx_state *x, int core, int l, tpu_error *err)
{
    const glayer *L = &x->g->layers[l];
    tens *gy;
    tpu_status rc;
    if (L->op == GOP_INPUT)
        return TPU_OK;
    if (L->op == GOP_LOSS)
        return bwd_loss(x, core, l, err);
    if (!L->needs_grad)
        return TPU_OK; /* nothing at or below it trains */
    int data_only = 1;
    for (int k = 0; k < L->n_in; k++)
        data_only &= x->g->layers[L->in[k]].op == GOP_INPUT;
    if (data_only)
        return TPU_OK; /* no gradient to pass (the lowering emits none) */
    if ((rc = grad_of(x, core, l, &gy, err)))
        return rc;
    switch (L->op) {
    case GOP_ADD:
        for (int k = 0; k < L->n_in; k++)
            if ((rc = add_grad(x, core, L->in[k], gy, NULL, err)))
                return rc;
        return TPU_OK;
    case GOP_RELU:
    case GOP_SIGMOID:
    case GOP_DROPOUT:
        return bwd_act(x, core, l, err);
    case GOP_CONCAT: {
        int64_t off = 0, rows = gy->B * tens_pos(gy);
        for (int k = 0; k < L->n_in; k++) {
            tens *gk;
            int in = L->in[k];
            int64_t ck = x->g->layers[in].out.c;
            if (x->g->layers[in].op != GOP_INPUT) {
                if ((rc = grad_of(x, core, in, &gk, err)))
                    return rc;
                for (int64_t r = 0; r < rows; r++)
                    for (int64_t ch = 0; ch < ck; ch++)
                        gk->v[r * ck + ch] += gy->v[r * gy->C + off + ch];
            }
            off += ck;
        }
        return TPU_OK;
    }
    case GOP_FLATTEN: {
        int in = L->in[0];
        if (x->g->layers[in].op == GOP_INPUT)
            return TPU_OK;
        tens *gx;
        if ((rc = grad_of(x, core, in, &gx, err)))
            return rc;
        int64_t npos = tens_pos(gx);
        for (int64_t b = 0; b < gx->B; b++)
            for (int64_t pos = 0; pos < npos; pos++) {
                int64_t loc[SP], g[SP];
                pos_decode(gx, pos, loc);
                for (int d = 0; d < SP; d++)
                    g[d] = loc[d] + gx->lo[d];
                for (int64_t ch = 0; ch < gx->C; ch++)
                    gx->v[at(gx, b, loc, ch)] +=
                        gy->v[b * gy->C + gflat(gx, g, ch)];
            }
        return TPU_OK;
    }
    default:
        return tpu_fail(err, TPU_ERR_SYSTEM,
                        "internal: functional: layer '%s' has no backward "
                        "instructions",
                        L->name);
    }
}

/* Before layer l's gradient is read: the instruction-less layers above it
 * pass their gradients down, in reverse layer order. */
static tpu_status ensure_grad(fx_state *x, int core, int l, tpu_error *err)
{
    fcore *c = &x->cs[core];
    while (c->swept > l + 1) {
        int j = --c->swept;
        if (x->has_bwd[j] || c->done_bwd[j])
            continue;
        c->done_bwd[j] = 1;
        tpu_status rc = lazy_backward(x, core, j, err);
        if (rc)
            return rc;
    }
    return TPU_OK;
}

/* ---- dispatch ---------------------------------------------------------- */

/* Momentum SGD, fp32, on the core's own copy (every core applies the
 * same all-reduced gradients, so the copies stay equal). */
static void do_update(fx_state *x, int core)
{
    fcore *c = &x->cs[core];
    float lr = (float)x->cfg.learning_rate, mu = (float)x->cfg.momentum;
    for (int l = 0; l < x->g->n_layers; l++) {
        if (!c->w[l] || !c->wg[l] || x->g->layers[l].frozen)
            continue;
        int64_t n = x->g->layers[l].weights;
        for (int64_t i = 0; i < n; i++) {
            c->mom[l][i] = mu * c->mom[l][i] + c->wg[l][i];
            c->w[l][i] -= lr * c->mom[l][i];
        }
    }
}

/* Sums the weight-gradient partials: per layer over the cores that hold a
 * distinct part (in core order, fp32), then sharers into their owner in
 * layer order; every core gets the totals. */
static tpu_status reduce_grads(fx_state *x, tpu_error *err)
{
    int n = x->g->n_layers, ncores = x->p->cores;
    for (int l = 0; l < n; l++) {
        int64_t nw = nweights(x, l);
        if (nw <= 0 || x->g->layers[l].op == GOP_INPUT ||
            !graph_layer_trains(x->g, l))
            continue;
        float *tot = calloc((size_t)nw + 1, sizeof(float));
        if (!tot)
            return tpu_fail(err, TPU_ERR_SYSTEM,
                            "out of host memory (functional)");
        for (int k = 0; k < ncores; k++) {
            const float *p = x->cs[k].wg[l];
            if (p && contributes(x, k, l))
                for (int64_t i = 0; i < nw; i++)
                    tot[i] += p[i];
        }
        int o = owner(x, l);
        for (int k = 0; k < ncores; k++) {
            float *dst;
            if (o != l) {
                tpu_status rc = wgrad_of(x, k, o, &dst, err);
                if (rc) {
                    free(tot);
                    return rc;
                }
                for (int64_t i = 0; i < nw; i++)
                    dst[i] += tot[i];
                memset(x->cs[k].wg[l], 0, (size_t)nw * sizeof(float));
            } else if (x->cs[k].wg[l]) {
                memcpy(x->cs[k].wg[l], tot, (size_t)nw * sizeof(float));
            }
        }
        free(tot);
    }
    return TPU_OK;
}

tpu_status fx_exec(fx_state *x, int core, const fw_insn *in, tpu_error *err)
{
    fcore *c = &x->cs[core];
    int l = in->layer;
    if (in->fx == FX_NONE)
        return TPU_OK;
    if (in->fx == FX_UPDATE) {
        if (c->done_fwd[x->g->n_layers])
            return TPU_OK;
        c->done_fwd[x->g->n_layers] = 1;
        if (x->p->cores == 1) {
            tpu_status rc = reduce_grads(x, err);
            if (rc)
                return rc;
        }
        do_update(x, core);
        return TPU_OK;
    }
    if (l < 0 || l >= x->g->n_layers)
        return TPU_OK;
    const glayer *L = &x->g->layers[l];
    if (in->op == FW_MATMUL) {
        switch (in->fx) {
        case FX_FWD:
            return mm_rows(x, core, l, in, 0, err);
        case FX_DX:
            return mm_rows(x, core, l, in, 1, err);
        case FX_DW:
            return mm_dw(x, core, l, in, err);
        default:
            return TPU_OK;
        }
    }
    /* Vector passes: the whole layer on its first tile. */
    if (in->fx == FX_FWD) {
        if (c->done_fwd[l])
            return TPU_OK;
        c->done_fwd[l] = 1;
        switch (L->op) {
        case GOP_BATCHNORM:
            return fwd_batchnorm(x, core, l, err);
        case GOP_MAXPOOL:
        case GOP_AVGPOOL:
            return fwd_pool(x, core, l, err);
        case GOP_UPSAMPLE:
            return fwd_upsample(x, core, l, err);
        case GOP_GAP:
            return fwd_gap(x, core, l, err);
        case GOP_LOSS:
            return fwd_loss(x, core, l, err);
        default:
            return fwd_elementwise(x, core, l, err);
        }
    }
    if (in->fx == FX_BSTAT) {
        if (c->done_bwd[l])
            return TPU_OK;
        c->done_bwd[l] = 1;
        return bwd_bn_stats(x, core, l, err);
    }
    if (in->fx == FX_BWD) {
        if (c->done_bwd[l] == 2)
            return TPU_OK;
        c->done_bwd[l] = 2;
        switch (L->op) {
        case GOP_BATCHNORM:
            return bwd_bn(x, core, l, err);
        case GOP_MAXPOOL:
        case GOP_AVGPOOL:
        case GOP_UPSAMPLE:
            return bwd_window(x, core, l, err);
        case GOP_GAP:
            return bwd_gap(x, core, l, err);
        default:
            return bwd_act(x, core, l, err);
        }
    }
    return TPU_OK;
}

/* ---- collectives ------------------------------------------------------- */

static int group_core(const fx_state *x, int core, int shard)
{
    return x->p->core_of[x->p->replica_of[core] * x->p->cpr + shard];
}

/* The tensor a window chain starts from: the core's own shard of the
 * input (forward, weight gradient) or of the output gradient. */
static tpu_status chain_base(fx_state *x, int core, int l, int grad,
                             const tens **out, tpu_error *err)
{
    if (grad) {
        tens *g = NULL;
        tpu_status rc = ensure_grad(x, core, l, err);
        if (rc)
            return rc;
        rc = grad_of(x, core, l, &g, err);
        *out = g;
        return rc;
    }
    return act_of(x, core, x->g->layers[l].in[0], out, err);
}

static void copy_shape(tens *dst, const tens *src)
{
    *dst = *src;
    dst->v = NULL;
}

/* Copies every element of dst's box from whichever source holds it. */
static tpu_status fill_from(fx_state *x, int core, int l, tens *dst,
                            const tens *const *srcs, int nsrc, tpu_error *err)
{
    int64_t npos = tens_pos(dst);
    for (int64_t b = 0; b < dst->B; b++)
        for (int64_t pos = 0; pos < npos; pos++) {
            int64_t loc[SP], g[SP];
            pos_decode(dst, pos, loc);
            for (int d = 0; d < SP; d++)
                g[d] = loc[d] + dst->lo[d];
            int found = -1;
            for (int s = 0; s < nsrc && found < 0; s++) {
                int inside = srcs[s] != NULL;
                for (int d = 0; d < SP && inside; d++)
                    inside = g[d] >= srcs[s]->lo[d] &&
                             g[d] < srcs[s]->lo[d] + srcs[s]->ext[d];
                if (inside)
                    found = s;
            }
            if (found < 0)
                return missing(err, x, core, l, "exchange", 1);
            for (int64_t ch = 0; ch < dst->C; ch++) {
                int miss = 0;
                dst->v[at(dst, b, loc, ch)] = rd(srcs[found], b, g, ch, &miss);
            }
        }
    return TPU_OK;
}

/* Every core's new window replaces its old one (after all were built
 * from the old ones: an exchange reads the neighbours' previous state). */
static void install_windows(fx_state *x, const fw_insn *const *ins, int l,
                            int grad, tens *next)
{
    for (int k = 0; k < x->p->cores; k++) {
        fcore *c = &x->cs[k];
        tens *w = grad ? &c->gwin[l] : &c->win[l];
        tens_free(w);
        *w = next[k];
        next[k].v = NULL;
        (grad ? c->have_gwin : c->have_win)[l] = (uint8_t)ins[k]->fx;
    }
}

static void free_windows(tens *next, int n)
{
    if (next)
        for (int k = 0; k < n; k++)
            tens_free(&next[k]);
    free(next);
}

/* One halo step along dim d for every core: the new window is the old one
 * grown by the rows its instruction names, taken from the neighbours' old
 * windows. */
static tpu_status coll_halo(fx_state *x, const fw_insn *const *ins,
                            tpu_error *err)
{
    int ncores = x->p->cores;
    int l = ins[0]->layer, grad = ins[0]->fx == FX_DX;
    int d = (int)ins[0]->a;
    tens *next = calloc((size_t)ncores, sizeof *next);
    const tens **cur = calloc((size_t)ncores, sizeof *cur);
    tpu_status rc = TPU_OK;
    if (!next || !cur) {
        rc = tpu_fail(err, TPU_ERR_SYSTEM, "out of host memory (functional)");
        goto done;
    }
    for (int k = 0; k < ncores; k++) {
        fcore *c = &x->cs[k];
        /* A chain restarts at its first exchange of the step (the weight
         * gradient's exchange re-sends the forward's halos). */
        uint8_t *have = grad ? c->have_gwin : c->have_win;
        tens *w = grad ? &c->gwin[l] : &c->win[l];
        uint8_t tag = (uint8_t)(ins[k]->fx);
        if (have[l] == tag)
            cur[k] = w;
        else if ((rc = chain_base(x, k, l, grad, &cur[k], err)))
            goto done;
    }
    for (int k = 0; k < ncores; k++) {
        const fw_insn *in = ins[k];
        int64_t rl = fw_halo_rows_lo(in), rh = fw_halo_rows_hi(in);
        copy_shape(&next[k], cur[k]);
        next[k].lo[d] -= rl;
        next[k].ext[d] += rl + rh;
        if ((rc = tens_alloc(&next[k], err)))
            goto done;
        int co[SP] = {0};
        plan_coords(x->p, x->p->shard_of[k], co);
        const tens *srcs[3] = {cur[k], NULL, NULL};
        for (int side = 0; side < 2; side++) {
            int nc[SP];
            memcpy(nc, co, sizeof nc);
            nc[d] += side ? 1 : -1;
            int nb = plan_shard_at(x->p, nc);
            if (nb >= 0)
                srcs[1 + side] = cur[group_core(x, k, nb)];
        }
        if ((rc = fill_from(x, k, l, &next[k], srcs, 3, err)))
            goto done;
    }
    install_windows(x, ins, l, grad, next);
done:
    free_windows(next, ncores);
    free(cur);
    return rc;
}

/* All-gather: each core's window becomes the whole tensor, assembled from
 * its partition group's shards. */
static tpu_status coll_gather(fx_state *x, const fw_insn *const *ins,
                              tpu_error *err)
{
    int ncores = x->p->cores, cpr = x->p->cpr;
    int l = ins[0]->layer, grad = ins[0]->fx == FX_DX;
    const tens **base = calloc((size_t)ncores, sizeof *base);
    const tens **srcs = calloc((size_t)cpr, sizeof *srcs);
    tens *next = calloc((size_t)ncores, sizeof *next);
    tpu_status rc = TPU_OK;
    if (!base || !srcs || !next) {
        rc = tpu_fail(err, TPU_ERR_SYSTEM, "out of host memory (functional)");
        goto done;
    }
    for (int k = 0; k < ncores; k++)
        if ((rc = chain_base(x, k, l, grad, &base[k], err)))
            goto done;
    for (int k = 0; k < ncores; k++) {
        copy_shape(&next[k], base[k]);
        for (int d = 0; d < SP; d++) {
            next[k].lo[d] = 0;
            next[k].ext[d] = next[k].gext[d];
        }
        if ((rc = tens_alloc(&next[k], err)))
            goto done;
        for (int s = 0; s < cpr; s++)
            srcs[s] = base[group_core(x, k, s)];
        if ((rc = fill_from(x, k, l, &next[k], srcs, cpr, err)))
            goto done;
    }
    install_windows(x, ins, l, grad, next);
done:
    free_windows(next, ncores);
    free(srcs);
    free(base);
    return rc;
}

/* Sums n floats per core over each partition group's contributing cores
 * (shard order) and gives every member the total.  get returns the
 * core's array (NULL: none). */
typedef float *(*part_fn)(fx_state *x, int core, int l);

static float *part_bn_fwd(fx_state *x, int core, int l)
{
    return x->cs[core].bn[l];
}
static float *part_bn_bwd(fx_state *x, int core, int l)
{
    return x->cs[core].bn[l] + 4 * x->g->layers[l].out.c;
}
static float *part_gap(fx_state *x, int core, int l)
{
    return x->cs[core].act[l].v;
}

static tpu_status group_sum(fx_state *x, int l, int contrib_layer, part_fn get,
                            int64_t n, tpu_error *err)
{
    int cpr = x->p->cpr;
    float *tot = calloc((size_t)n + 1, sizeof(float));
    if (!tot)
        return tpu_fail(err, TPU_ERR_SYSTEM, "out of host memory (functional)");
    for (int r = 0; r < x->p->replicas; r++) {
        memset(tot, 0, (size_t)n * sizeof(float));
        for (int s = 0; s < cpr; s++) {
            int k = x->p->core_of[r * cpr + s];
            const float *p = get(x, k, l);
            if (p && contributes(x, k, contrib_layer))
                for (int64_t i = 0; i < n; i++)
                    tot[i] += p[i];
        }
        for (int s = 0; s < cpr; s++) {
            float *p = get(x, x->p->core_of[r * cpr + s], l);
            if (p)
                memcpy(p, tot, (size_t)n * sizeof(float));
        }
    }
    free(tot);
    return TPU_OK;
}

static tpu_status coll_allreduce(fx_state *x, const fw_insn *const *ins,
                                 tpu_error *err)
{
    const fw_insn *in = ins[0];
    int l = in->layer;
    if (in->b == FW_GROUP_ALL)
        return reduce_grads(x, err);
    if (l < 0)
        return TPU_OK;
    const glayer *L = &x->g->layers[l];
    int64_t C = L->out.c;
    switch (L->op) {
    case GOP_BATCHNORM:
        if (in->phase == PHASE_FWD) {
            for (int k = 0; k < x->p->cores; k++) {
                const tens *t;
                tpu_status rc = act_of(x, k, L->in[0], &t, err);
                if (rc)
                    return rc;
                bn_local_stats(t, x->cs[k].bn[l], x->cs[k].bn[l] + C);
                x->cs[k].stats_reduced[l] = 1;
            }
            return group_sum(x, l, l, part_bn_fwd, 2 * C, err);
        }
        return group_sum(x, l, l, part_bn_bwd, 2 * C, err);
    case GOP_GAP: {
        tpu_status rc =
            group_sum(x, l, L->in[0], part_gap, x->p->batch * C, err);
        for (int k = 0; k < x->p->cores && !rc; k++) {
            tens *t = &x->cs[k].act[l];
            for (int64_t i = 0; i < tens_elems(t); i++)
                t->v[i] = rnd(t->v[i], L->dtype_bytes);
        }
        return rc;
    }
    case GOP_LOSS: {
        /* the dice sums; the partial losses are added at the end */
        int cpr = x->p->cpr;
        for (int r = 0; r < x->p->replicas; r++)
            for (int kk = 0; kk < L->n_in; kk++) {
                double tot[3] = {0, 0, 0};
                for (int s = 0; s < cpr; s++) {
                    int k = x->p->core_of[r * cpr + s];
                    const double *p =
                        &x->cs[k].dice[(l * GRAPH_MAX_IN + kk) * 3];
                    if (contributes(x, k, L->in[kk]))
                        for (int i = 0; i < 3; i++)
                            tot[i] += p[i];
                }
                for (int s = 0; s < cpr; s++)
                    memcpy(&x->cs[x->p->core_of[r * cpr + s]]
                                .dice[(l * GRAPH_MAX_IN + kk) * 3],
                           tot, sizeof tot);
            }
        return TPU_OK;
    }
    default:
        return TPU_OK;
    }
}

tpu_status fx_collective(fx_state *x, const fw_insn *const *ins, tpu_error *err)
{
    switch ((fw_op)ins[0]->op) {
    case FW_HALO:
        return coll_halo(x, ins, err);
    case FW_ALLGATHER:
        return coll_gather(x, ins, err);
    case FW_ALLREDUCE:
        return coll_allreduce(x, ins, err);
    default:
        return TPU_OK;
    }
}

/* ---- results ----------------------------------------------------------- */

tpu_status fx_end_step(fx_state *x, emu_result *r, tpu_error *err)
{
    int ol = x->out_layer;
    tpu_status rc = TPU_OK;
    for (int k = 0; k < x->p->cores && x->g->train; k++)
        if ((rc = ensure_grad(x, k, -1, err)))
            return rc;
    free(r->output);
    free(r->grads);
    r->output = NULL;
    r->grads = NULL;
    r->n_grads = 0;
    if (ol < 0)
        return tpu_fail(err, TPU_ERR_INPUT,
                        "functional: the graph has no output");
    const glayer *L = &x->g->layers[ol];
    int64_t E = gshape_elems(&L->out), n = x->G * E;
    float *out = calloc((size_t)n + 1, sizeof(float));
    uint8_t *seen = calloc((size_t)n + 1, 1);
    if (!out || !seen) {
        free(out);
        free(seen);
        return tpu_fail(err, TPU_ERR_SYSTEM, "out of host memory (functional)");
    }
    for (int k = 0; k < x->p->cores && !rc; k++) {
        const tens *t;
        if ((rc = act_of(x, k, ol, &t, err)))
            break;
        int64_t npos = tens_pos(t);
        for (int64_t b = 0; b < t->B && !rc; b++)
            for (int64_t pos = 0; pos < npos && !rc; pos++) {
                int64_t loc[SP], g[SP];
                pos_decode(t, pos, loc);
                for (int d = 0; d < SP; d++)
                    g[d] = loc[d] + t->lo[d];
                for (int64_t ch = 0; ch < t->C; ch++) {
                    int64_t gi = gexample(x, k, b) * E + gflat(t, g, ch);
                    float v = t->v[at(t, b, loc, ch)];
                    /* Replicated work must agree bit for bit. */
                    if (seen[gi] &&
                        bf16_f32_bits(out[gi]) != bf16_f32_bits(v) &&
                        !(v != v && out[gi] != out[gi])) {
                        rc = tpu_fail(err, TPU_ERR_SYSTEM,
                                      "internal: functional: cores disagree on "
                                      "a replicated value of '%s'",
                                      L->name);
                        break;
                    }
                    out[gi] = v;
                    seen[gi] = 1;
                }
            }
    }
    free(seen);
    if (rc) {
        free(out);
        return rc;
    }
    r->output = out;
    r->output_layer = ol;
    r->output_rank = 2 + L->out.nsp;
    r->output_shape[0] = x->G;
    for (int d = 0; d < L->out.nsp; d++)
        r->output_shape[1 + d] = L->out.sp[d];
    r->output_shape[1 + L->out.nsp] = L->out.c;
    r->output_checksum = mxu_checksum(out, (size_t)n);
    double loss = 0;
    for (int k = 0; k < x->p->cores; k++)
        for (int l = 0; l < x->g->n_layers; l++) {
            const glayer *Ll = &x->g->layers[l];
            loss += x->cs[k].loss_part[l];
            if (Ll->op != GOP_LOSS || Ll->loss != GLOSS_DICE ||
                x->p->shard_of[k] != 0)
                continue;
            /* Dice is one value per replica (its sums are whole after the
             * all-reduce), counted on the replica's first core. */
            for (int q = 0; q < Ll->n_in; q++) {
                const double *dz = &x->cs[k].dice[(l * GRAPH_MAX_IN + q) * 3];
                loss += (1.0 - (2 * dz[0] + 1) / (dz[1] + dz[2] + 1)) /
                        x->p->replicas;
            }
        }
    r->loss = loss;
    r->has_values = 1;
    if (x->g->train) {
        int64_t ng = 0;
        for (int l = 0; l < x->g->n_layers; l++)
            if (x->g->layers[l].share_from < 0)
                ng += x->g->layers[l].weights;
        r->grads = calloc((size_t)ng + 1, sizeof(float));
        if (!r->grads)
            return tpu_fail(err, TPU_ERR_SYSTEM,
                            "out of host memory (functional)");
        int64_t o = 0;
        for (int l = 0; l < x->g->n_layers; l++) {
            int64_t nw = x->g->layers[l].weights;
            if (x->g->layers[l].share_from >= 0 || nw <= 0)
                continue;
            /* A frozen layer's gradient is not computed: zeros. */
            if (x->cs[0].wg[l] && !x->g->layers[l].frozen)
                memcpy(&r->grads[o], x->cs[0].wg[l],
                       (size_t)nw * sizeof(float));
            o += nw;
        }
        r->n_grads = ng;
    }
    return TPU_OK;
}
