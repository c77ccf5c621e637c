/* fexec: the values of a --functional run (see fexec.h and
 * docs/FUNCTIONAL.md): state, allocation, inputs, the tensors' accessors,
 * dispatch, the weight update and the results.  The kernels, losses and
 * collectives are in emu/fx/fx_*.c; what they share, and how the tensors
 * are stored, is in emu/fx/fx_internal.h.
 */
#include "emu/fx/fexec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "emu/fx/fx_internal.h"
#include "emu/fx/fxdata.h"
#include "mxu/bf16.h"
#include "mxu/mxu.h"

#define SP GRAPH_MAX_SP

tpu_status fx_oom(tpu_error *err)
{
    return tpu_fail(err, TPU_ERR_SYSTEM, "out of host memory (functional)");
}

void *fx_scratch_raw(fx_state *x, int i, size_t bytes)
{
    if (bytes < 1)
        bytes = 1;
    if (bytes > x->scratch_cap[i]) {
        free(x->scratch[i]);
        x->scratch[i] = malloc(bytes);
        x->scratch_cap[i] = x->scratch[i] ? bytes : 0;
    }
    return x->scratch[i];
}

float *fx_scratch(fx_state *x, int i, int64_t n)
{
    size_t need = (size_t)(n > 0 ? n : 1) * sizeof(float);
    float *p = fx_scratch_raw(x, i, need);
    if (p)
        memset(p, 0, need);
    return p;
}

/* ---- small helpers ----------------------------------------------------- */

/* The shape of this core's shard of layer l's output. */
static void shard_shape(const fx_state *x, int core, int l, fxt_tens *t)
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

int fx_is_split(const fx_state *x, int l, int d)
{
    return x->p->split[l * SP + d] != 0;
}

int fx_contributes(const fx_state *x, int core, int l)
{
    int co[SP] = {0};
    int shard = x->p->shard_of[core];
    plan_coords(x->p, shard, co);
    /* Cores of a replica beyond the split's factors (num_cores_per_replica
     * above their product, e.g. no input_partition_dims) hold copies. */
    if (plan_shard_at(x->p, co) != shard)
        return 0;
    const glayer *L = &x->g->layers[l];
    /* a placed layer's values (partial sums, losses) exist on its core */
    if (graph_core(L) >= 0 && x->p->cpr > 1)
        return shard == graph_core(L);
    for (int d = 0; d < x->p->nsp && d < SP; d++) {
        int held = d < L->out.nsp && fx_is_split(x, l, d);
        if (!held && co[d] != 0)
            return 0;
    }
    return 1;
}

int fx_owner(const fx_state *x, int l)
{
    int s = x->g->layers[l].share_from;
    return s >= 0 ? s : l;
}

int64_t fx_gexample(const fx_state *x, int core, int64_t b)
{
    return (int64_t)x->p->replica_of[core] * x->p->batch + b;
}

int64_t fx_gpos_count(const glayer *L)
{
    int64_t n = 1;
    for (int d = 0; d < L->out.nsp; d++)
        n *= L->out.sp[d];
    return n;
}

tpu_status fx_missing(tpu_error *err, const fx_state *x, int core, int l,
                      const char *what, int dim)
{
    return tpu_fail(err, TPU_ERR_SYSTEM,
                    "internal: functional: core %d, layer '%s' (%s) reads "
                    "rows along spatial dim %d its firmware did not bring "
                    "(halo too small)",
                    core, x->g->layers[l].name, what, dim - 1);
}

/* ---- set-up ------------------------------------------------------------ */

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
 * otherwise (a halo is narrower than a shard); when training, a
 * weight-gradient partial per layer (a sharer's as large as its owner's).
 * Once: the weights and the optimizer's slots (the all-reduced totals reuse a
 * partial's buffer); the result's vectors, which live across steps (the
 * gradients, and an output the size of the largest layer, with a byte per
 * element while fx_end_step assembles it); and the matrix products'
 * scratch buffers (fx_mm.c: grown, never shrunk, so each at its own
 * largest over the instructions): the operands' rows x real K in fp32 and
 * bf16 parts, the weight operand likewise, the results, the bf16_3x
 * partial products and the per-tile temporaries. */
double fx_bytes_needed(const graph *g, const plan *p, const fw_program *progs)
{
    int n = g->n_layers;
    double part = 0, out = 0;
    for (int l = 0; l < n && g->train; l++) {
        int o = g->layers[l].share_from;
        part += (double)g->layers[o >= 0 ? o : l].weights * 4.0;
    }
    for (int l = 0; l < n; l++)
        if (g->layers[l].op != GOP_LOSS && !g->layers[l].unused)
            out = fmax(out, (double)gshape_elems(&g->layers[l].out));
    int ns = graph_optimizer_slots(g) > 1 ? 2 : 1;
    double total = (double)graph_weights(g) * 4.0 * (g->train ? 2 + ns : 2) +
                   out * (double)(p->batch * p->replicas) * 5.0;
    double ma = 0, mb = 0, mc = 0, mt = 0;
    uint8_t *gathered = malloc((size_t)n * 2 + 2);
    if (!gathered)
        return INFINITY;
    for (int k = 0; k < p->cpr; k++) {
        memset(gathered, 0, (size_t)n * 2 + 2);
        for (size_t i = 0; i < progs[k].n; i++) {
            const fw_insn *in = &progs[k].code[i];
            if (in->op == FW_ALLGATHER && in->layer >= 0)
                gathered[in->layer * 2 + (in->fx == FX_DX)] = 1;
        }
        double per = part;
        /* Sized as the first shard, which holds a full chunk everywhere:
         * a short or empty trailing shard still receives halos that big. */
        const int first[SP] = {0};
        for (int l = 0; l < n; l++) {
            const glayer *L = &g->layers[l];
            if (L->unused) /* never computed: no tensors */
                continue;
            double full, local, ifull = 0, ilocal = 0;
            tensor_elems(g, p, l, first, &full, &local);
            if (L->n_in > 0)
                tensor_elems(g, p, L->in[0], first, &ifull, &ilocal);
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
                double real = (double)fxt_kernel_taps(L) * (double)I->out.c;
                double e = in->e > 0 ? (double)in->e : 1;
                rows = fmin(rows, ceil(rows * real / e) + 1);
                /* the first slab sums every position at once (lower.c
                 * emit_dw): K is all of this core's dY rows */
                double fo, lo;
                tensor_elems(g, p, in->layer, first, &fo, &lo);
                kk = fmax((double)in->b,
                          lo / (double)(L->out.c > 0 ? L->out.c : 1));
            } else {
                kk = (double)fxt_kernel_taps(L) * (double)depth;
                /* a stride-phase product's row stands for s^d rows */
                rows *= (double)fxt_rows_per(L, in->fx == FX_DX);
            }
            double cols = (double)in->c;
            ma = fmax(ma, rows * kk);
            mb = fmax(mb, kk * cols);
            mc = fmax(mc, rows * cols);
            mt = fmax(mt, rows);
        }
        total += per * (double)p->replicas;
    }
    free(gathered);
    return total + (ma + mb) * (4.0 + 3 * 2.0) + mc * 4.0 * 3 + mt * 128 * 2.0;
}

/* Layer l's step tensors on core c: output, gradient, both windows. */
static void free_tensors(fx_core *c, int l)
{
    fxt_free(&c->act[l]);
    fxt_free(&c->grad[l]);
    fxt_free(&c->win[l]);
    fxt_free(&c->gwin[l]);
}

static void core_free(fx_core *c, int n)
{
    /* fx_new can fail between the arrays; values come in fx_begin_step */
    if (c->act && c->grad && c->win && c->gwin)
        for (int l = 0; l < n; l++)
            free_tensors(c, l);
    if (c->wg && c->bn)
        for (int l = 0; l < n; l++) {
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
    free(c->done_gv);
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
            core_free(&x->cs[k], x->g->n_layers);
    free(x->cs);
    if (x->w && x->mom && x->wsum)
        for (int l = 0; l < x->g->n_layers; l++) {
            free(x->w[l]);
            free(x->mom[l]);
            free(x->wsum[l]);
        }
    free(x->w);
    free(x->mom);
    free(x->wsum);
    free(x->has_bwd);
    for (int i = 0; i < FX_NSCRATCH; i++)
        free(x->scratch[i]);
    free(x);
}

/* Glorot-uniform kernels, zero biases, gamma 1 and beta 0 (fxdata.h). */
static void init_weights(const fx_state *x, int l, float *w)
{
    const glayer *L = &x->g->layers[l];
    if (L->op == GOP_NORMALIZE) { /* mean 0, variance 1, count 0 */
        for (int64_t c = 0; c < L->weights; c++)
            w[c] = c >= L->out.c && c < 2 * L->out.c ? 1.0f : 0.0f;
        return;
    }
    if (L->op == GOP_BATCHNORM || L->op == GOP_LAYERNORM ||
        L->op == GOP_GROUPNORM) {
        /* [gamma][beta], each only when present */
        int64_t ng = L->no_scale ? 0 : L->out.c;
        for (int64_t c = 0; c < L->weights; c++)
            w[c] = c < ng ? 1.0f : 0.0f;
        return;
    }
    if (L->op == GOP_ACT) { /* prelu's slopes: Keras's zeros */
        memset(w, 0, sizeof(float) * (size_t)L->weights);
        return;
    }
    const glayer *I = &x->g->layers[L->in[0]];
    /* a grouped conv's kernel is Keras's [taps][cin / groups][cout] */
    int64_t taps = fxt_kernel_taps(L), cin = I->out.c / graph_groups(L),
            cout = L->out.c;
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
        return fx_oom(err);
    x->g = g;
    x->p = p;
    x->hw = hw;
    x->cfg = *cfg;
    x->G = p->batch * p->replicas;
    int n = g->n_layers;
    x->out_layer = -1;
    x->ncls = 0;
    for (int l = 0; l < n; l++) {
        /* the network's output: in training, what a loss reads (not a
         * batchnorm kept only for its statistics, graph_finish) */
        if (g->layers[l].op != GOP_LOSS && !g->layers[l].unused &&
            !(g->train && g->layers[l].no_loss))
            x->out_layer = l;
        else if (g->layers[l].op == GOP_LOSS && x->ncls == 0)
            x->ncls = (int)g->layers[g->layers[l].in[0]].out.c;
    }
    if (x->ncls == 0)
        x->ncls = 1;
    if (cfg->output_layer >= 0 && cfg->output_layer < n &&
        g->layers[cfg->output_layer].op != GOP_LOSS)
        x->out_layer = cfg->output_layer;
    x->has_bwd = calloc((size_t)n + 1, 1);
    x->cs = calloc((size_t)p->cores, sizeof *x->cs);
    x->w = calloc((size_t)n + 1, sizeof(float *));
    x->mom = calloc((size_t)n + 1, sizeof(float *));
    x->wsum = calloc((size_t)n + 1, sizeof(float *));
    if (!x->has_bwd || !x->cs || !x->w || !x->mom || !x->wsum)
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
    for (int k = 0; k < p->cpr; k++) /* a placed layer's are on its core */
    for (size_t i = 0; i < progs[k].n; i++) {
        const fw_insn *in = &progs[k].code[i];
        /* collectives only move data: an add whose dY is gathered for a
         * replicated operand still forms its gradients lazily */
        if (in->phase == PHASE_BWD && in->layer >= 0 && in->fx != FX_NONE &&
            (in->op == FW_MATMUL || in->op == FW_VEC))
            x->has_bwd[in->layer] = 1;
    }
    int64_t o = 0;
    for (int l = 0; l < n; l++) {
        const glayer *L = &g->layers[l];
        if (L->weights <= 0 || L->share_from >= 0)
            continue;
        x->w[l] = malloc((size_t)L->weights * sizeof(float));
        /* the optimizer's slots, one after the other (at least one, so
         * the pointer is never a zero-size allocation) */
        int ns = graph_optimizer_slots(g) > 1 ? 2 : 1;
        x->mom[l] = calloc((size_t)L->weights * (size_t)ns, sizeof(float));
        if (!x->w[l] || !x->mom[l])
            goto oom;
        if (cfg->init_weights) {
            memcpy(x->w[l], cfg->init_weights + o,
                   (size_t)L->weights * sizeof(float));
            o += L->weights;
        } else {
            init_weights(x, l, x->w[l]);
        }
    }
    for (int k = 0; k < p->cores; k++) {
        fx_core *c = &x->cs[k];
        size_t nl = (size_t)n + 1;
        c->act = calloc(nl, sizeof(fxt_tens));
        c->grad = calloc(nl, sizeof(fxt_tens));
        c->win = calloc(nl, sizeof(fxt_tens));
        c->gwin = calloc(nl, sizeof(fxt_tens));
        c->have_act = calloc(nl, 1);
        c->have_win = calloc(nl, 1);
        c->have_gwin = calloc(nl, 1);
        c->done_fwd = calloc(nl, 1);
        c->done_bwd = calloc(nl, 1);
        c->stats_reduced = calloc(nl, 1);
        c->done_gv = calloc(nl, 1);
        c->wg = calloc(nl, sizeof(float *));
        c->bn = calloc(nl, sizeof(float *));
        c->loss_part = calloc(nl, sizeof(double));
        c->dice = calloc(nl * GRAPH_MAX_IN * 3, sizeof(double));
        c->cur = calloc(nl * 3, sizeof(int64_t));
        c->chunk = calloc(nl * 3, sizeof(int64_t));
        if (!c->act || !c->grad || !c->win || !c->gwin || !c->have_act ||
            !c->have_win || !c->have_gwin || !c->done_fwd || !c->done_bwd ||
            !c->stats_reduced || !c->done_gv || !c->wg || !c->bn ||
            !c->loss_part || !c->dice || !c->cur || !c->chunk)
            goto oom;
        for (int l = 0; l < n; l++) {
            const glayer *L = &g->layers[l];
            if (L->op == GOP_BATCHNORM) {
                c->bn[l] = calloc((size_t)L->out.c * 6, sizeof(float));
                if (!c->bn[l])
                    goto oom;
            }
        }
    }
    *out = x;
    return TPU_OK;
oom:
    fx_free(x);
    return fx_oom(err);
}

/* Input n's shard on core k: the synthetic learnable data of fxdata.h. */
static tpu_status make_input(fx_state *x, int core, int l, tpu_error *err)
{
    const glayer *L = &x->g->layers[l];
    fxt_tens *t;
    if (fx_new_act(x, core, l, &t, err))
        return TPU_ERR_SYSTEM;
    int64_t E = gshape_elems(&L->out), np = fxt_npos(t);
    for (int64_t b = 0; b < t->B; b++) {
        int64_t gb = fx_gexample(x, core, b);
        for (int64_t pos = 0; pos < np; pos++) {
            int64_t loc[SP], g[SP];
            fxt_global(t, pos, loc, g);
            for (int64_t ch = 0; ch < t->C; ch++) {
                double v = fxd_input(x->cfg.seed, l, x->step, x->G, gb,
                                     fxt_gflat(t, g, ch), E, x->ncls);
                t->v[fxt_at(t, b, loc, ch)] =
                    fxt_round((float)v, L->dtype_bytes);
            }
        }
    }
    return TPU_OK;
}

tpu_status fx_begin_step(fx_state *x, int64_t step, tpu_error *err)
{
    x->step = step;
    x->updated = 0;
    int n = x->g->n_layers;
    for (int l = 0; l < n; l++) {
        free(x->wsum[l]);
        x->wsum[l] = NULL;
    }
    for (int k = 0; k < x->p->cores; k++) {
        fx_core *c = &x->cs[k];
        for (int l = 0; l < n; l++) {
            free_tensors(c, l);
            free(c->wg[l]);
            c->wg[l] = NULL;
            /* batchnorm sums: a core whose shard is empty computes none
             * but still takes part in the all-reduce, so last step's
             * totals must not linger */
            if (c->bn[l])
                memset(c->bn[l], 0,
                       (size_t)x->g->layers[l].out.c * 6 * sizeof(float));
        }
        memset(c->have_act, 0, (size_t)n);
        memset(c->have_win, 0, (size_t)n);
        memset(c->have_gwin, 0, (size_t)n);
        memset(c->done_fwd, 0, (size_t)n + 1);
        memset(c->done_bwd, 0, (size_t)n);
        memset(c->stats_reduced, 0, (size_t)n);
        memset(c->done_gv, 0, (size_t)n);
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

/* ---- the tensors ------------------------------------------------------- */

/* Layer l's shard shape on this core, allocated (zeroed) into t. */
static tpu_status shard_alloc(fx_state *x, int core, int l, fxt_tens *t,
                              tpu_error *err)
{
    shard_shape(x, core, l, t);
    return fxt_alloc(t, err);
}

tpu_status fx_new_act(fx_state *x, int core, int l, fxt_tens **out,
                      tpu_error *err)
{
    fx_core *c = &x->cs[core];
    fxt_tens *t = &c->act[l];
    if (shard_alloc(x, core, l, t, err))
        return TPU_ERR_SYSTEM;
    c->have_act[l] = 1;
    *out = t;
    return TPU_OK;
}

tpu_status fx_act_of(fx_state *x, int core, int l, const fxt_tens **out,
                     tpu_error *err)
{
    fx_core *c = &x->cs[core];
    if (!c->have_act[l]) {
        /* A trailing shard of an uneven split can be empty: its firmware
         * computes nothing there, and there is nothing to read. */
        fxt_tens probe;
        shard_shape(x, core, l, &probe);
        if (fxt_npos(&probe) == 0) {
            fxt_tens *t = NULL;
            tpu_status rc = fx_new_act(x, core, l, &t, err);
            *out = t;
            return rc;
        }
        tpu_status rc = fxv_lazy_forward(x, core, l, err);
        if (rc)
            return rc;
    }
    *out = &c->act[l];
    return TPU_OK;
}

tpu_status fx_fwin_of(fx_state *x, int core, int l, const fxt_tens **out,
                      tpu_error *err)
{
    fx_core *c = &x->cs[core];
    if (c->have_win[l]) {
        *out = &c->win[l];
        return TPU_OK;
    }
    return fx_act_of(x, core, x->g->layers[l].in[0], out, err);
}

/* The weight gradient's window: with xla.dw_halo the forward's exchanged
 * window is gone (only the shard is saved), so the firmware must have
 * exchanged it again; reading the forward's would hide a missing
 * exchange (a gathered window's weight gradient, for one). */
tpu_status fx_dwin_of(fx_state *x, int core, int l, const fxt_tens **out,
                      tpu_error *err)
{
    uint8_t tag = x->cs[core].have_win[l];
    if (tag && tag != FX_DW && x->hw->xla_dw_halo)
        return tpu_fail(err, TPU_ERR_SYSTEM,
                        "internal: functional: core %d, layer '%s' (weight "
                        "gradient) reads the forward pass's exchanged window, "
                        "which its firmware did not exchange again",
                        core, x->g->layers[l].name);
    return fx_fwin_of(x, core, l, out, err);
}

int64_t fx_nweights(const fx_state *x, int l)
{
    return x->g->layers[fx_owner(x, l)].weights;
}

float *fx_wts(fx_state *x, int l)
{
    return x->w[fx_owner(x, l)];
}

float fx_gamma(const glayer *L, const float *W, int64_t ch)
{
    return L->no_scale ? 1.0f : W[ch];
}

float fx_beta(const glayer *L, const float *W, int64_t ch)
{
    return L->no_center ? 0.0f : W[(L->no_scale ? 0 : L->out.c) + ch];
}

float *fx_dgamma(const glayer *L, float *wg)
{
    return L->no_scale || !wg ? NULL : wg;
}

float *fx_dbeta(const glayer *L, float *wg)
{
    return L->no_center || !wg ? NULL : wg + (L->no_scale ? 0 : L->out.c);
}

/* Weight-gradient partials are kept per layer (a layer that shares
 * weights has its own partial until the all-reduce adds it in). */
tpu_status fx_wgrad_of(fx_state *x, int core, int l, float **out,
                       tpu_error *err)
{
    fx_core *c = &x->cs[core];
    if (!c->wg[l]) {
        c->wg[l] = calloc((size_t)fx_nweights(x, l) + 1, sizeof(float));
        if (!c->wg[l])
            return fx_oom(err);
    }
    *out = c->wg[l];
    return TPU_OK;
}

tpu_status fx_grad_of(fx_state *x, int core, int l, fxt_tens **out,
                      tpu_error *err)
{
    fxt_tens *t = &x->cs[core].grad[l];
    if (!t->v && shard_alloc(x, core, l, t, err))
        return TPU_ERR_SYSTEM;
    *out = t;
    return TPU_OK;
}

tpu_status fx_ensure_grad(fx_state *x, int core, int l, tpu_error *err)
{
    fx_core *c = &x->cs[core];
    while (c->swept > l + 1) {
        int j = --c->swept;
        if (x->has_bwd[j] || c->done_bwd[j] || !fx_runs(x, core, j))
            continue;
        c->done_bwd[j] = 1;
        tpu_status rc = fxv_lazy_backward(x, core, j, err);
        if (rc)
            return rc;
    }
    return TPU_OK;
}

tpu_status fx_dy_of(fx_state *x, int core, int l, fxt_tens **out,
                    tpu_error *err)
{
    tpu_status rc = fx_ensure_grad(x, core, l, err);
    return rc ? rc : fx_grad_of(x, core, l, out, err);
}

tpu_status fx_gwin_of(fx_state *x, int core, int l, const fxt_tens **out,
                      tpu_error *err)
{
    fx_core *c = &x->cs[core];
    if (c->have_gwin[l]) {
        tpu_status rc = fx_ensure_grad(x, core, l, err);
        *out = &c->gwin[l];
        return rc;
    }
    fxt_tens *g = NULL;
    tpu_status rc = fx_dy_of(x, core, l, &g, err);
    *out = g;
    return rc;
}

/* ---- dispatch ---------------------------------------------------------- */

/* ||v|| in double (the norm is one figure per variable: its rounding
 * order does not matter to the update's rate at fp32). */
static double norm2(const float *v, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (double)v[i] * (double)v[i];
    return sqrt(s);
}

/* The optimizer's update (run.optimizer), fp32, on the one copy of the
 * weights, once per step: every core would apply the same all-reduced
 * gradients.  lr is cfg.learning_rate; the other hyperparameters are the
 * defaults of the TensorFlow/Keras class (docs/FUNCTIONAL.md):
 *   sgd       w -= lr g
 *   momentum  m = mu m + g; w -= lr m (mu = cfg.momentum)
 *   adam      m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 *             w -= lr sqrt(1-b2^t)/(1-b1^t) m / (sqrt(v) + eps),
 *             b1 0.9, b2 0.999, eps 1e-7, t the step from 1
 *   rmsprop   v = rho v + (1-rho) g^2; d = lr g / (sqrt(v) + eps);
 *             w -= d, or with momentum mm: m = mm m + d; w -= m;
 *             rho 0.9, eps 1e-7
 *   lars      on a conv or dense kernel (its bias is in the skip list):
 *             r = eeta ||w|| / (||g|| + wd ||w||) when both norms are
 *             above 0, else 1; g' = g + wd w; m = mu m + lr r g'; w -= m;
 *             on a bias, gamma or beta: m = mu m + lr g; w -= m;
 *             eeta 0.001, wd 0.0001, mu = cfg.momentum.
 * Adam's v and rmsprop's momentum are the second half of mom[l]. */
static void do_update(fx_state *x)
{
    const graph *gr = x->g;
    float lr = (float)x->cfg.learning_rate, mu = (float)x->cfg.momentum;
    double t = (double)x->step + 1;
    for (int l = 0; l < gr->n_layers; l++) {
        const glayer *L = &gr->layers[l];
        if (!x->w[l] || !x->wsum[l] || L->frozen)
            continue;
        int64_t n = L->weights;
        float *w = x->w[l], *m = x->mom[l], *v = m + n;
        const float *g = x->wsum[l];
        switch (gr->optimizer) {
        case GOPT_SGD:
            for (int64_t i = 0; i < n; i++)
                w[i] -= lr * g[i];
            break;
        case GOPT_ADAM: {
            const float b1 = 0.9f, b2 = 0.999f, eps = 1e-7f;
            float a = (float)((double)lr * sqrt(1 - pow(0.999, t)) /
                              (1 - pow(0.9, t)));
            for (int64_t i = 0; i < n; i++) {
                m[i] = b1 * m[i] + (1 - b1) * g[i];
                v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
                w[i] -= a * m[i] / (sqrtf(v[i]) + eps);
            }
            break;
        }
        case GOPT_RMSPROP: {
            const float rho = 0.9f, eps = 1e-7f;
            float mm = (float)gr->opt_momentum;
            for (int64_t i = 0; i < n; i++) {
                m[i] = rho * m[i] + (1 - rho) * g[i] * g[i];
                float d = lr * g[i] / (sqrtf(m[i]) + eps);
                if (mm > 0) {
                    v[i] = mm * v[i] + d;
                    d = v[i];
                }
                w[i] -= d;
            }
            break;
        }
        case GOPT_LARS: {
            const double eeta = 0.001, wd = 0.0001;
            int64_t k = 0;
            if (L->op == GOP_CONV || L->op == GOP_CONV_T || L->op == GOP_DENSE)
                k = n - (L->use_bias ? L->filters : 0);
            double wn = norm2(w, k), gn = norm2(g, k);
            double r = wn > 0 && gn > 0 ? eeta * wn / (gn + wd * wn) : 1;
            float sl = (float)((double)lr * r), fwd = (float)wd;
            for (int64_t i = 0; i < n; i++) {
                float gi = i < k ? sl * (g[i] + fwd * w[i]) : lr * g[i];
                m[i] = mu * m[i] + gi;
                w[i] -= m[i];
            }
            break;
        }
        default:
            for (int64_t i = 0; i < n; i++) {
                m[i] = mu * m[i] + g[i];
                w[i] -= lr * m[i];
            }
            break;
        }
    }
}

/* Sums the weight-gradient partials: per layer over the cores that hold a
 * distinct part (in core order, fp32, from +0), then sharers into their
 * owner in layer order (an owner comes before its sharers).  One total per
 * owner layer, in wsum, for the update and the result (every core would
 * hold the same): the first contributing partial's buffer becomes it, the
 * other partials are freed.  A core without a partial adds nothing (a
 * partial is summed from +0 by +=, never -0, so adding zeros would be the
 * identity). */
tpu_status fx_reduce_grads(fx_state *x, tpu_error *err)
{
    int n = x->g->n_layers, ncores = x->p->cores;
    for (int l = 0; l < n; l++) {
        int64_t nw = fx_nweights(x, l);
        if (nw <= 0 || x->g->layers[l].op == GOP_INPUT ||
            !graph_layer_trains(x->g, l))
            continue;
        float *tot = NULL;
        for (int k = 0; k < ncores; k++) {
            float *p = x->cs[k].wg[l];
            if (!p || !fx_contributes(x, k, l))
                continue;
            if (!tot) {
                tot = p;
                x->cs[k].wg[l] = NULL;
                for (int64_t i = 0; i < nw; i++)
                    tot[i] = 0.0f + tot[i];
            } else {
                for (int64_t i = 0; i < nw; i++)
                    tot[i] += p[i];
            }
        }
        for (int k = 0; k < ncores; k++) {
            free(x->cs[k].wg[l]);
            x->cs[k].wg[l] = NULL;
        }
        if (!tot && !(tot = calloc((size_t)nw + 1, sizeof(float))))
            return fx_oom(err);
        int o = fx_owner(x, l);
        if (o == l) {
            free(x->wsum[l]);
            x->wsum[l] = tot;
            continue;
        }
        if (!x->wsum[o] &&
            !(x->wsum[o] = calloc((size_t)nw + 1, sizeof(float)))) {
            free(tot);
            return fx_oom(err);
        }
        for (int64_t i = 0; i < nw; i++)
            x->wsum[o][i] += tot[i];
        free(tot);
    }
    return TPU_OK;
}

/* Marks a pass done up to `level`: 0 when it already was (a vector pass
 * runs on its layer's first tile; the backward statistics are level 1,
 * the backward pass level 2). */
static int first_run(uint8_t *done, uint8_t level)
{
    if (*done >= level)
        return 0;
    *done = level;
    return 1;
}

tpu_status fx_exec(fx_state *x, int core, const fw_insn *in, tpu_error *err)
{
    fx_core *c = &x->cs[core];
    int l = in->layer;
    if (in->fx == FX_NONE)
        return TPU_OK;
    if (in->fx == FX_UPDATE) {
        /* The first core to reach it updates the one copy; the program
         * reads no weights after the final all-reduce (firmware/lower.c),
         * so no core sees them change within the step. */
        if (x->updated)
            return TPU_OK;
        x->updated = 1;
        if (x->p->cores == 1) {
            tpu_status rc = fx_reduce_grads(x, err);
            if (rc)
                return rc;
        }
        do_update(x);
        return TPU_OK;
    }
    if (l < 0 || l >= x->g->n_layers)
        return TPU_OK;
    if (graph_groups(&x->g->layers[l]) > 1)
        return fxg_exec(x, core, l, in, err);
    if (in->op == FW_MATMUL) {
        switch (in->fx) {
        case FX_FWD:
            return fxm_rows(x, core, l, in, 0, err);
        case FX_DX:
            return fxm_rows(x, core, l, in, 1, err);
        case FX_DW:
            return fxm_dw(x, core, l, in, err);
        default:
            return TPU_OK;
        }
    }
    /* Vector passes: the whole layer on its first tile. */
    if (in->fx == FX_FWD)
        return first_run(&c->done_fwd[l], 1) ? fxv_forward(x, core, l, err)
                                             : TPU_OK;
    if (in->fx == FX_BSTAT)
        return first_run(&c->done_bwd[l], 1) ? fxv_bn_stats(x, core, l, err)
                                             : TPU_OK;
    if (in->fx == FX_BWD)
        return first_run(&c->done_bwd[l], 2) ? fxv_backward(x, core, l, err)
                                             : TPU_OK;
    return TPU_OK;
}

/* ---- results ----------------------------------------------------------- */

tpu_status fx_end_step(fx_state *x, emu_result *r, tpu_error *err)
{
    int ol = x->out_layer;
    tpu_status rc = TPU_OK;
    for (int k = 0; k < x->p->cores && x->g->train; k++)
        if ((rc = fx_ensure_grad(x, k, -1, err)))
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
        return fx_oom(err);
    }
    for (int k = 0; k < x->p->cores && !rc; k++) {
        const fxt_tens *t;
        if (!fx_runs(x, k, ol))
            continue;
        if ((rc = fx_act_of(x, k, ol, &t, err)))
            break;
        int64_t npos = fxt_npos(t);
        for (int64_t b = 0; b < t->B && !rc; b++)
            for (int64_t pos = 0; pos < npos && !rc; pos++) {
                int64_t loc[SP], g[SP];
                fxt_global(t, pos, loc, g);
                for (int64_t ch = 0; ch < t->C; ch++) {
                    int64_t gi = fx_gexample(x, k, b) * E + fxt_gflat(t, g, ch);
                    float v = t->v[fxt_at(t, b, loc, ch)];
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
            return fx_oom(err);
        int64_t o = 0;
        for (int l = 0; l < x->g->n_layers; l++) {
            int64_t nw = x->g->layers[l].weights;
            if (x->g->layers[l].share_from >= 0 || nw <= 0)
                continue;
            /* A frozen layer's gradient is not computed: zeros. */
            if (x->wsum[l] && !x->g->layers[l].frozen)
                memcpy(&r->grads[o], x->wsum[l],
                       (size_t)nw * sizeof(float));
            o += nw;
        }
        r->n_grads = ng;
    }
    return TPU_OK;
}

int fx_bn_replicas(const fx_state *x)
{
    return x->g->bn_group > 1 ? x->g->bn_group : 1;
}
