/* fx_tensor: the boxes of --functional tensors (see fx_tensor.h). */
#include "emu/fx_tensor.h"

#include <stdlib.h>

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
