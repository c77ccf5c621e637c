/* libFuzzer entry for the Keras importer: `make fuzz-import FUZZ_SECONDS=600`.
 *
 * The input is a model's JSON text (the seed corpus is test/keras/).  It
 * goes through keras_to_trace and keras_trace_text, training and
 * inference, as `tpuemu import` does after reading a file.  Beyond "no
 * crash, no leak, no UB" (ASan/UBSan) it checks the importer's contract:
 * a result is OK or TPU_ERR_INPUT (TPU_ERR_SYSTEM only for memory), a
 * refusal is one line naming the model, and an accepted model's trace
 * text loads in the trace reader. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "emu/graph.h"
#include "emu/imp/keras.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_refusal(tpu_status st, const tpu_error *e)
{
    if (st == TPU_ERR_SYSTEM)
        return;
    if (st != TPU_ERR_INPUT || strncmp(e->msg, "fuzz.json", 9) != 0 ||
        strchr(e->msg, '\n'))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = 0;
    cJSON *model = cJSON_ParseWithLength(text, size);
    free(text);
    if (!model)
        return 0;
    for (int infer = 0; infer < 2; infer++) {
        keras_opts o;
        cJSON *trace = NULL;
        char *notes = NULL, *out = NULL;
        tpu_error e;
        memset(&o, 0, sizeof o);
        o.infer = infer;
        e.msg[0] = 0;
        tpu_status st = keras_to_trace(model, "fuzz.json", &o, &trace,
                                       &notes, &e);
        if (st == TPU_OK) {
            st = keras_trace_text(trace, "fuzz.json", &out, &e);
            if (st == TPU_OK) {
                graph g;
                tpu_error e2;
                if (graph_parse(&g, out, strlen(out), "t.json", &e2) !=
                    TPU_OK)
                    abort();
                (void)graph_forward_flops(&g);
                graph_free(&g);
            } else {
                check_refusal(st, &e);
            }
        } else {
            check_refusal(st, &e);
        }
        cJSON_Delete(trace);
        free(notes);
        free(out);
    }
    cJSON_Delete(model);
    return 0;
}
