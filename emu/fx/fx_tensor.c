/* fx_tensor: the boxes of --functional tensors (see fx_tensor.h). */
#include "emu/fx/fx_tensor.h"

#include <stdlib.h>
#include <string.h>

void fxt_free(fxt_tens *t)
{
    free(t->v);
    t->v = NULL;
}

tpu_status fxt_alloc(fxt_tens *t, tpu_error *err)
{
    free(t->v);
    int64_t n = fxt_elems(t);
    t->v = calloc((size_t)(n > 0 ? n : 1), sizeof(float));
    if (!t->v)
        return tpu_fail(err, TPU_ERR_SYSTEM, "out of host memory (functional)");
    return TPU_OK;
}

tpu_status fxt_taps_init(fxt_taps *w, const glayer *L, int nsp, int dx,
                         tpu_error *err)
{
    memset(w, 0, sizeof *w);
    w->L = L;
    w->nsp = nsp;
    w->dx = dx;
    w->taps = 1;
    for (int d = 0; d < GRAPH_MAX_SP; d++) {
        w->K[d] = d < L->out.nsp && L->op != GOP_DENSE ? L->kernel[d] : 1;
        w->taps *= w->K[d];
    }
    int ok = 1;
    for (int d = 0; d < GRAPH_MAX_SP; d++)
        ok &= (w->st[d] = malloc(sizeof(int64_t) * (size_t)w->K[d])) != NULL;
    w->tap = malloc(sizeof(int64_t) * (size_t)w->taps);
    w->off = malloc(sizeof(int64_t) * (size_t)w->taps);
    if (!ok || !w->tap || !w->off) {
        fxt_taps_free(w);
        return tpu_fail(err, TPU_ERR_SYSTEM, "out of host memory (functional)");
    }
    return TPU_OK;
}

void fxt_taps_free(fxt_taps *w)
{
    for (int d = 0; d < GRAPH_MAX_SP; d++) {
        free(w->st[d]);
        w->st[d] = NULL;
    }
    free(w->tap);
    free(w->off);
    w->tap = w->off = NULL;
}
