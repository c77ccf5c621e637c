/* mem — what one core keeps in HBM during the step (fw_memory): master
 * weights, gradients and optimizer state, the activations saved for the
 * backward pass, the largest set of live transients; and xla.remat, which
 * drops recomputable activations until the step fits. */
#include <string.h>

#include "emu/result.h"
#include "firmware/lower_internal.h"

/* Tensors the backward pass reads: inputs of matrix layers whose weights
 * train (the weight gradient), inputs of batchnorms with a backward,
 * outputs of relu/sigmoid (masks) and maxpool inputs and outputs where a
 * gradient passes.  A frozen prefix keeps none of them. */
static int saved_for_backward(const lower_ctx *c, int l)
{
    const graph *g = c->g;
    const glayer *L = &g->layers[l];
    /* a fused normalise is recomputed from the batchnorm's input, which
     * the batchnorm's backward keeps anyway */
    if (!fuse_materialised(c, l))
        return 0;
    if ((L->op == GOP_RELU || L->op == GOP_SIGMOID) && L->needs_grad)
        return 1;
    /* an activation's backward reads its output (gelu, swish and prelu
     * their input, marked by kept_for) */
    if (L->op == GOP_ACT && L->needs_grad && L->kind != GACT_GELU &&
        L->kind != GACT_SWISH && L->kind != GACT_PRELU)
        return 1;
    if ((L->op == GOP_MAXPOOL || L->op == GOP_GMAXPOOL) &&
        g->layers[L->in[0]].needs_grad)
        return 1;
    return c->kept_for[l];
}

/* kept_for: layers whose output a consumer's backward pass reads (a
 * trainable matrix layer's weight gradient, batchnorm's, max pooling's
 * window search). */
void mem_mark_kept_for(lower_ctx *c)
{
    const graph *g = c->g;
    for (int j = 0; j < g->n_layers; j++) {
        const glayer *J = &g->layers[j];
        int trains =
            (J->op == GOP_CONV || J->op == GOP_CONV_T || J->op == GOP_DENSE) &&
            graph_layer_trains(g, j);
        for (int k = 0; k < J->n_in; k++) {
            int l = J->in[k];
            if (trains || (J->op == GOP_BATCHNORM && J->needs_grad) ||
                (J->op == GOP_MAXPOOL && g->layers[l].needs_grad) ||
                (J->op == GOP_ACT && J->needs_grad &&
                 (J->kind == GACT_GELU || J->kind == GACT_SWISH ||
                  J->kind == GACT_PRELU)) ||
                (J->op == GOP_ELEMWISE && J->needs_grad &&
                 J->kind != GEW_SUBTRACT && J->kind != GEW_AVERAGE &&
                 J->kind != GEW_ADD) ||
                ((J->op == GOP_LAYERNORM || J->op == GOP_GROUPNORM) &&
                 J->needs_grad) ||
                (J->op == GOP_GMAXPOOL && g->layers[l].needs_grad))
                c->kept_for[l] = 1;
        }
    }
}

/* Whether layer l's output is held for the whole step (saved for the
 * backward pass and not recomputed): counted once in the saved set. */
static int held_for_step(const lower_ctx *c, int l)
{
    return c->g->train && saved_for_backward(c, l) && !c->remat[l];
}

/* Fills c->mem's state, saved, workspace and peak bytes from the
 * decisions so far (the remat figures are mem_choose_remat's). */
void mem_account(lower_ctx *c)
{
    const graph *g = c->g;
    fw_memory *m = c->mem;
    double saved = 0, ws = 0;
    /* Tensors not held for the step that wait for a later consumer (a
     * skip connection in inference, a recomputed activation that a later
     * forward layer still reads): live from their producer to their last
     * consumer, so an inference U-shaped net with 18 GiB live at once
     * does not fit.  `open` sums those produced so far and still
     * waiting; `ends[l]` those whose last consumer is l. */
    double open = 0, *ends = c->ends;
    memset(ends, 0, sizeof *ends * (size_t)g->n_layers);
    for (int t = 0; t < g->n_layers; t++)
        if (!g->layers[t].unused && !held_for_step(c, t) && c->last_use[t] > t)
            ends[c->last_use[t]] += layout_out_bytes(c, t);
    for (int l = 0; l < g->n_layers; l++) {
        const glayer *L = &g->layers[l];
        if (L->unused)
            continue;
        double ob = layout_out_bytes(c, l);
        if (held_for_step(c, l))
            saved += ob;
        double in = 0, across = open - ends[l];
        for (int k = 0; k < L->n_in; k++) {
            int i = L->in[k];
            halo_t h;
            halo_fwd(c, l, i, &h);
            const glayer *I = &g->layers[i];
            in +=
                layout_bytes(c, I->out.nsp, h.in_ext, I->out.c, I->dtype_bytes);
            /* an input that waits on for a later consumer too is counted
             * here, with its halos, not twice */
            int first = 1;
            for (int q = 0; q < k; q++)
                first &= L->in[q] != i;
            if (first && !held_for_step(c, i) && c->last_use[i] > l)
                across -= layout_out_bytes(c, i);
        }
        /* Live at once besides the saved set: the layer's input and output
         * (forward), or the gradients of both (backward), and the tensors
         * waiting across it. */
        double live = in + ob + (across > 0 ? across : 0);
        if (live > ws)
            ws = live;
        open -= ends[l];
        if (!held_for_step(c, l) && c->last_use[l] > l)
            open += ob;
    }
    /* fp32 master weights; gradients and the optimizer's slots (momentum's
     * one, Adam's two, ...) for the trainable ones only (a sharer counts no
     * weights of its own). */
    double wt = (double)graph_trainable_weights(g) * 4;
    m->weights_bytes = (double)graph_weights(g) * 4;
    m->grads_bytes = g->train ? wt : 0;
    m->opt_bytes = g->train ? wt * graph_optimizer_slots(g) : 0;
    m->saved_bytes = saved;
    m->workspace_bytes = ws;
    m->peak_bytes =
        m->weights_bytes + m->grads_bytes + m->opt_bytes + saved + ws;
}

/* An activation whose input the backward pass keeps anyway (a batchnorm,
 * whose input is saved for its own backward, or a saved tensor): dropping
 * its output costs one vector pass to recompute it. */
static int remat_candidate(const lower_ctx *c, int l)
{
    const glayer *L = &c->g->layers[l];
    if ((L->op != GOP_RELU && L->op != GOP_SIGMOID) || L->n_in != 1 ||
        !saved_for_backward(c, l))
        return 0;
    int i = L->in[0];
    return c->g->layers[i].op == GOP_BATCHNORM || saved_for_backward(c, i);
}

/* xla.remat: when the step does not fit, drop the largest recomputable
 * activations until it does (or none is left: then it does not fit). */
void mem_choose_remat(lower_ctx *c)
{
    const double cap = c->hw->hbm.capacity_bytes;
    mem_account(c);
    while (c->mem->peak_bytes > cap) {
        int best = -1;
        double bb = 0;
        for (int l = 0; l < c->g->n_layers; l++)
            if (!c->remat[l] && remat_candidate(c, l) &&
                layout_out_bytes(c, l) > bb) {
                bb = layout_out_bytes(c, l);
                best = l;
            }
        if (best < 0)
            break;
        c->remat[best] = 1;
        c->mem->remat_bytes += bb;
        c->mem->remat_layers++;
        mem_account(c);
    }
}

/* Recomputes a dropped activation just before the first backward layer
 * that reads it (its last consumer: backward runs in reverse order). */
void mem_emit_recompute(lower_ctx *c, int j, const int *head, const int *next)
{
    for (int l = head[j]; l >= 0; l = next[l]) {
        const glayer *L = &c->g->layers[l];
        const glayer *I = &c->g->layers[L->in[0]];
        double in_b = layout_out_bytes(c, L->in[0]);
        /* through the batchnorm (normalise + activation) or the activation */
        double ops = I->op == GOP_BATCHNORM ? 5 : (L->op == GOP_RELU ? 2 : 6);
        size_t from = c->prog->n;
        tile_pass_fx(c, FX_NONE, PHASE_BWD, l, in_b, layout_out_bytes(c, l),
                     layout_out_elems(c, l), ops);
        /* marked for the listing (`tpuemu lower`), which would otherwise
         * show this pass as one more block of the layer's backward */
        if (!c->prog->oom)
            for (size_t k = from; k < c->prog->n; k++)
                c->prog->code[k].recompute = 1;
    }
}
