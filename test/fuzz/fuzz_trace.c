/* libFuzzer entry for the trace reader: `make fuzz FUZZ_SECONDS=600`.
 *
 * Beyond "no crash, no leak, no UB" (ASan/UBSan), it enforces the reader's
 * contract: a result is OK or TPU_ERR_INPUT (TPU_ERR_SYSTEM only for
 * memory), a refusal is one line that starts with the file name, and a
 * loaded graph is consistent (inputs first, every `in` earlier, shapes
 * within the documented limits). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "emu/graph.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    graph g;
    tpu_error e;
    tpu_status st;
    e.msg[0] = 0;
    st = graph_parse(&g, (const char *)data, size, "fuzz.json", &e);
    if (st == TPU_OK) {
        if (g.n_inputs < 1 || g.n_layers <= g.n_inputs)
            abort();
        for (int i = 0; i < g.n_layers; i++) {
            const glayer *L = &g.layers[i];
            if ((L->op == GOP_INPUT) != (i < g.n_inputs))
                abort();
            for (int j = 0; j < L->n_in; j++)
                if (L->in[j] < 0 || L->in[j] >= i)
                    abort();
            if (gshape_elems(&L->out) < 1 ||
                gshape_elems(&L->out) > GRAPH_ELEMS_MAX)
                abort();
        }
        (void)graph_forward_flops(&g);
        (void)graph_backward_flops(&g);
    } else if (st == TPU_ERR_INPUT) {
        if (strncmp(e.msg, "fuzz.json: ", 11) != 0 || strchr(e.msg, '\n'))
            abort();
    } else if (st != TPU_ERR_SYSTEM) {
        abort();
    }
    graph_free(&g);
    return 0;
}
