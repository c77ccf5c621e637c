/* fuse — the passes XLA's fusion removes: a relu fused into the pass of
 * the batchnorm or add that produces it, and (xla.bn_apply_fused) a
 * batchnorm's normalise applied by its readers, never stored. */
#include <stdlib.h>

#include "firmware/lower_internal.h"

/* xla.bn_apply_fused ([U], default 0): batchnorm l's normalise, and a
 * relu fused into it, is applied by whatever reads the result when every
 * reader is a matrix layer (the operand's way into the MXU) or an add
 * (whose pass reads it anyway).  No pass of its own and nothing stored:
 * readers read the batchnorm's input instead, of the same size, and pay
 * the normalise on the vector unit as they load it (fuse_apply_ops).
 * Returns the layer whose output is not materialised (the relu when
 * fused, else l), or -1.  fuse_plan decides it for every layer in one
 * pass over the readers. */
static int bn_apply_fused(const lower_ctx *c, int l)
{
    return c->apply_t ? c->apply_t[l] : -1;
}

/* Fills relu_fused and apply_t; TPU_ERR_SYSTEM when host memory runs
 * out. */
tpu_status fuse_plan(lower_ctx *c)
{
    const graph *g = c->g;
    int n = g->n_layers;
    /* relu right after batchnorm or add, its only consumer: fused into the
     * producer's pass (XLA loop fusion; the producer's output is never
     * written). */
    for (int l = 0; l < n; l++) {
        const glayer *L = &g->layers[l];
        if (L->op == GOP_RELU && L->n_in == 1) {
            int i = L->in[0];
            const glayer *I = &g->layers[i];
            if ((I->op == GOP_BATCHNORM || I->op == GOP_ADD) &&
                c->nconsumers[i] == 1)
                c->relu_fused[l] = 1;
        }
    }
    if (!c->hw->xla_bn_apply_fused)
        return TPU_OK;
    c->apply_t = malloc(sizeof(int) * ((size_t)n + 1));
    int *relu_of = malloc(sizeof(int) * ((size_t)n + 1));
    uint8_t *has = calloc((size_t)n + 1, 1), *bad = calloc((size_t)n + 1, 1);
    tpu_status st = TPU_ERR_SYSTEM;
    if (c->apply_t && relu_of && has && bad) {
        for (int l = 0; l < n; l++)
            relu_of[l] = -1;
        for (int j = 0; j < n; j++) {
            const glayer *J = &g->layers[j];
            if (J->unused) /* removed from the step: reads nothing */
                continue;
            if (c->relu_fused[j])
                relu_of[J->in[0]] = j;
            for (int k = 0; k < J->n_in; k++) {
                has[J->in[k]] = 1;
                bad[J->in[k]] |= J->op != GOP_CONV && J->op != GOP_CONV_T &&
                                 J->op != GOP_DENSE && J->op != GOP_ADD;
            }
        }
        for (int l = 0; l < n; l++) {
            int t = relu_of[l] >= 0 ? relu_of[l] : l;
            c->apply_t[l] =
                g->layers[l].op == GOP_BATCHNORM && has[t] && !bad[t] ? t : -1;
        }
        st = TPU_OK;
    }
    free(relu_of);
    free(has);
    free(bad);
    return st;
}

/* Whether layer l's output is written to HBM (xla.bn_apply_fused). */
int fuse_materialised(const lower_ctx *c, int l)
{
    const glayer *L = &c->g->layers[l];
    if (L->op == GOP_BATCHNORM)
        return bn_apply_fused(c, l) < 0;
    if (c->relu_fused[l] && c->g->layers[L->in[0]].op == GOP_BATCHNORM)
        return bn_apply_fused(c, L->in[0]) != l;
    return 1;
}

/* Vector operations per element a reader spends applying input i's
 * batchnorm normalise (4: subtract, scale, shift, convert; 5 with a fused
 * relu, as in the normalise pass) when xla.bn_apply_fused folds them into
 * it instead of a pass of their own; 0 when i is stored. */
double fuse_apply_ops(const lower_ctx *c, int i)
{
    if (fuse_materialised(c, i))
        return 0;
    return c->g->layers[i].op == GOP_RELU ? 5 : 4;
}
