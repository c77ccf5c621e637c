/* keras — a Keras architecture file as a tpuemu trace (docs/IMPORT.md).
 *
 * Reads what Keras and TensorFlow.js write for a model's architecture:
 * Keras 2 `model.to_json()` (Sequential, Functional/Model, models nested as
 * layers, layers called more than once), a TensorFlow.js layers
 * `model.json` (the Keras config in `modelTopology`), a Keras 3
 * `config.json`, and a `.keras` archive (the zip holding config.json).
 * Every layer class the trace format can express maps to trace layers
 * through one table (keras_layers.c, keras_classes); a channels_first model is
 * read as the same network with its channel axis moved last (the trace
 * is channels-last in its shapes only); a layer that cannot be
 * mapped is an error naming it, listing every unmapped class of the file,
 * unless the options pass its class through as an identity.
 *
 * Like the rest of the core it never prints or exits: a refusal is
 * TPU_ERR_INPUT with "FILE: JSON.path: what is wrong" (FILE is
 * "m.keras (config.json)" for an archive), out of host memory
 * TPU_ERR_SYSTEM.  What the user should hear about a successful import
 * (identities passed through, a softmax folded into the loss) comes back
 * as notes, one line each, which the trace's comment repeats.
 */
#ifndef EMU_IMP_KERAS_H
#define EMU_IMP_KERAS_H

#include <stddef.h>
#include <stdint.h>

#include "emu/status.h"

struct cJSON;

typedef struct {
    /* One example's shape per model input as Keras writes it, without the
     * batch ("224x224x3"; channels first for an input the model reads
     * channels-first; inputs separated by ','); NULL: the model's own,
     * which must then be fully given. */
    const char *input;
    int64_t batch;              /* global batch; 0: 8 per replica */
    const char *system;         /* slice; NULL: "v3-8" */
    /* input_partition_dims of the first input as Keras orders a batch
     * ("1,4,2,1": N, H, W, C; N, C, H, W channels-first); NULL: not
     * partitioned.  The replica size is its product. */
    const char *partition;
    int infer;                  /* 1: mode infer (no loss), 0: train */
    const char *loss;           /* loss kind; NULL: softmax_xent */
    /* Comma-separated Keras classes (or activation names) passed through
     * as identities rather than refused; NULL: none. */
    const char *allow_identity;
    /* run.optimizer's word ("adam"); NULL: the one the model was
     * compiled with (a Keras 3 compile_config, a training_config), else
     * momentum. */
    const char *optimizer;
} keras_opts;

/* Reads the model file at path (JSON, or a .keras zip) into *model (free
 * with cJSON_Delete).  *shown receives the name messages use for it
 * (cap bytes); raw, when not NULL, the JSON text itself (free; its length
 * in *raw_len), which a trace is read from. */
tpu_status keras_read(const char *path, struct cJSON **model, char **raw,
                      size_t *raw_len, char *shown, int cap, tpu_error *err);

/* 1 when doc is a tpuemu trace (format "tpuemu-trace/1") rather than a
 * model: what `summary` reads as it is. */
int keras_is_trace(const struct cJSON *doc);

/* Builds the trace of model (as keras_read gives it; `shown` names it in
 * messages) under o.  On success *trace is the trace document (free with
 * cJSON_Delete) and *notes NULL or lines to tell the user (free). */
tpu_status keras_to_trace(const struct cJSON *model, const char *shown,
                          const keras_opts *o, struct cJSON **trace,
                          char **notes, tpu_error *err);

/* The trace as JSON text (free), checked by the trace reader first: what
 * it refuses is an error naming `shown`. */
tpu_status keras_trace_text(const struct cJSON *trace, const char *shown,
                            char **text, tpu_error *err);

/* keras_read and keras_to_trace, then the trace as JSON text (free), the
 * format `tpuemu run` reads; the text is checked by the trace reader
 * before it is returned, so it always loads. */
tpu_status keras_import(const char *path, const keras_opts *o, char **text,
                        char **notes, tpu_error *err);

#endif
