/* trace_internal — what the files of the `tpuemu-trace/1` reader share
 * (private to them: graph_load and graph_parse in emu/graph.h are the
 * public entry points).
 *
 *   emu/trace.c            the document: format, name, system, graph, run,
 *                          reference; graph_parse and graph_load
 *   emu/trace_json.c       one-line messages with the JSON path, typed
 *                          members with their ranges, known keys
 *   emu/trace_layer.c      graph.inputs and graph.layers: each op's keys,
 *                          references by name, shape inference per layer
 *   emu/trace_partition.c  run.input_partition_dims
 */
#ifndef EMU_TRACE_INTERNAL_H
#define EMU_TRACE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <cJSON.h>

#include "emu/graph.h"
#include "emu/status.h"

typedef struct {
    const char *file;
    tpu_error *err;
    int nul_marked; /* \u0000 escapes were replaced by RFILE_NUL_MARK
                       (emu/rfile.h) */
} trace_ctx;

/* ---- emu/trace_json.c ---- */

/* A user string made safe for a message (at most 48 bytes, one line). */
const char *trace_q(char *buf, size_t n, const char *s);
/* TPU_ERR_INPUT "FILE: path: message" (path may be NULL or empty). */
tpu_status trace_fail(trace_ctx *c, const char *path, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* "found 2.5", "found a string": what stood where a value was expected. */
const char *trace_found(char *buf, size_t n, const cJSON *v);
/* "a number", "a list", "nothing", ... */
const char *trace_type(const cJSON *v);
/* base.key into buf; top-level keys are named bare. */
void trace_path(char *buf, size_t n, const char *base, const char *key);
/* Refuses unknown and duplicate keys of an object; where names the op or
 * the object in the message (may be NULL). */
tpu_status trace_keys(trace_ctx *c, const cJSON *obj, const char *path,
                      const char *const *allowed, const char *where);
/* A number that is an integer in [lo, hi]. */
int trace_is_int(const cJSON *v, double lo, double hi);
/* Typed members of obj (at base.key): absent is refused when req, else
 * leaves *out untouched (trace_str sets NULL). */
tpu_status trace_int(trace_ctx *c, const cJSON *obj, const char *base,
                     const char *key, int req, int64_t lo, int64_t hi,
                     int64_t *out);
tpu_status trace_str(trace_ctx *c, const cJSON *obj, const char *base,
                     const char *key, int req, const char **out);
tpu_status trace_name(trace_ctx *c, const cJSON *obj, const char *base,
                      const char *key, int req, char *dst, size_t cap);
tpu_status trace_bool(trace_ctx *c, const cJSON *obj, const char *base,
                      const char *key, int *out);
tpu_status trace_enum(trace_ctx *c, const cJSON *obj, const char *base,
                      const char *key, int req, const char *const *words,
                      int *out);
/* A per-dimension list of 2 or 3 positive integers, or (number_ok) one;
 * *rank: its length, 0 for a number, -1 when absent. */
tpu_status trace_dims(trace_ctx *c, const cJSON *obj, const char *base,
                      const char *key, int req, int number_ok,
                      int vals[GRAPH_MAX_SP], int *rank);

/* ---- emu/trace_layer.c ---- */

/* graph.layers[j] and graph.inputs[j], read, added to g and shape-inferred. */
tpu_status trace_layer(trace_ctx *c, graph *g, const cJSON *all, const cJSON *o,
                       int j);
tpu_status trace_input(trace_ctx *c, graph *g, const cJSON *o, int j);

/* ---- emu/trace_partition.c ---- */

/* run.input_partition_dims (not null) into g->pdims and the inputs' whole
 * flags; the first input's split is the plan's. */
tpu_status trace_partition(trace_ctx *c, graph *g, const cJSON *ipd);

#endif
