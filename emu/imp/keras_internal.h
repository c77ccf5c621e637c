/* keras_internal — what the Keras importer's files share (keras.h is its
 * public side).
 *
 * The importer is one module, prefix keras_, in four files: keras_read.c
 * (reading the file, messages, typed access to the JSON, finding the model
 * in it), keras_model.c (the trace being built, layouts, models and their
 * inbound nodes), keras_layers.c (activations, weights, the keras_classes
 * table and its map_* functions) and keras.c (the entry points and the
 * trace's loss, optimizer and partition).  This header holds the context
 * they all pass around (kx, a layer call kcall) and the functions one file
 * calls in another; everything else stays static in its file.
 */
#ifndef EMU_IMP_KERAS_INTERNAL_H
#define EMU_IMP_KERAS_INTERNAL_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "emu/graph.h"
#include "emu/imp/keras.h"


#define KERAS_FILE_MAX ((size_t)256 << 20)
#define KERAS_PATH_MAX 384
#define KERAS_NEST_MAX 32   /* models nested in models */
#define KERAS_OUTS_MAX 64   /* outputs of one nested model */
#define KERAS_DEFAULT_SYSTEM "v3-8"
#define KERAS_DEFAULT_PER_REPLICA 8

/* A model's layout as its layers' data_format say it (kx.fmt). */
#define KERAS_CL 0
#define KERAS_CF 1
#define KERAS_MIXED 2

/* A tensor as the Keras side sees it: a trace layer's output, and whether
 * a softmax activation is pending after it.  On a model output it becomes
 * part of the softmax_xent loss; a layer that reads it first gets the
 * trace's softmax activation, named sm_name (keras_softmax_read). */
typedef struct {
    int t;                       /* index into the graph being built */
    /* 1: the Keras tensor is channels-first ([C, spatial...]); its trace
     * shape is channels-last all the same.  Per ref, not per trace layer:
     * a Permute that only moves the channel axis is the same trace tensor
     * read in the other layout. */
    int cf;
    int softmax;
    char sm_path[KERAS_PATH_MAX];
    char sm_name[GRAPH_NAME_MAX];
    int sm_suffix; /* 1: the activation is sm_name/softmax */
} keras_ref;

/* A layer object seen before: how many times it was called, and the trace
 * layers holding its weights (a later call shares them). */
typedef struct {
    const cJSON *obj;
    int calls;
    int n_w;
    int w[2];                    /* trace layer indices */
} keras_seen;

typedef struct {
    const char *file;            /* for messages */
    const keras_opts *o;
    graph g;                     /* the trace as built, shapes inferred */
    int cap_layers;
    int *krank;                  /* per trace layer: its Keras rank (no batch) */
    int *kcf;                    /* per trace layer: channels-first in Keras */
    /* The model's layers' data_format: any channels_first at all, and the
     * model's own layout (KERAS_CL, KERAS_CF, or KERAS_MIXED when its
     * layers say both). */
    int any_cf, fmt;
    keras_ref *refs;
    int n_refs, cap_refs;
    keras_seen *seen;
    int n_seen, cap_seen;
    cJSON *inputs, *layers;      /* the trace's graph arrays */
    int *input_krank;            /* Keras rank of each trace input */
    char *notes;
    size_t notes_len;
    char *passed;                /* "name (Class), ..." for the comment */
    size_t passed_len;
    int n_inputs_given;          /* entries of o->input used */
    int depth;
    tpu_error *err;
} kx;

/* A layer call being mapped. */
typedef struct {
    const cJSON *obj;            /* the layer object */
    const cJSON *cfg;            /* its "config" (an object) */
    const char *path;            /* JSON path of the layer object */
    const char *cls;
    const char *kname;           /* the Keras name */
    char tname[GRAPH_NAME_MAX];  /* the trace name of its main layer */
    const int *in;               /* refs */
    int n_in;
    int frozen;
    int arg;                     /* the table row's argument */
    int out;                     /* the resulting ref */
    keras_seen *seen;
} kcall;

typedef tpu_status (*keras_map_fn)(kx *x, kcall *c);
/* NULL when the layer maps, else what keeps it from mapping ("max_value
 * 6"), in buf. */
typedef const char *(*keras_check_fn)(const cJSON *cfg, char *buf,
                                      size_t cap);

typedef struct {
    const char *cls;
    keras_map_fn map;
    keras_check_fn check;
    int arg;
} keras_class;

/* The unmapped classes of a file, all at once (keras_scan_model). */
typedef struct {
    char key[64];                /* what --allow-identity takes */
    char label[128];             /* "ReLU(max_value=6)" */
    char first[KERAS_PATH_MAX];  /* path of the first layer */
    char first_name[64];
    int count;
} keras_unmapped;

#define KERAS_UNMAPPED_MAX 32

typedef struct {
    keras_unmapped u[KERAS_UNMAPPED_MAX];
    int n, more;
} keras_scan;

/* An activation name the trace can express (keras_acts). */
typedef struct {
    const char *name;
    int op;   /* GOP_RELU, GOP_SIGMOID, GOP_ACT, -1 identity, -2 softmax */
    int kind; /* GOP_ACT's graph_act */
} keras_act;

/* ---- keras_read.c: messages, typed access to the JSON ----------------- */

tpu_status keras_fail(kx *x, const char *path, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
tpu_status keras_oom(kx *x);
const char *keras_shown(char *buf, size_t cap, const char *s);
void keras_path(char *dst, const char *base, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
tpu_status keras_append(kx *x, char **buf, size_t *len, const char *s);
tpu_status keras_note(kx *x, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
const char *keras_jtype(const cJSON *j);
const char *keras_get_str(const cJSON *o, const char *key);
const cJSON *keras_get(const cJSON *o, const char *key);
int keras_is_int(const cJSON *j, int64_t lo, int64_t hi);
tpu_status keras_cfg_int(kx *x, kcall *c, const char *key, int64_t lo,
                         int64_t hi, int64_t def, int64_t *out);
tpu_status keras_cfg_bool(kx *x, kcall *c, const char *key, int def, int *out);
tpu_status keras_cfg_dims(kx *x, kcall *c, const char *key, int dims, int def,
                          int *out);
tpu_status keras_cfg_padding(kx *x, kcall *c, const char *def, int *same);
const cJSON *keras_find_model(kx *x, const cJSON *doc, char *path,
                              tpu_status *st);

/* ---- keras_model.c: the trace being built, layouts, models ------------- */

tpu_status keras_new_ref(kx *x, int t, int *ref);
void keras_unique_name(const kx *x, const char *base, const char *suffix,
                       char *out);
tpu_status keras_grow(kx *x);
glayer *keras_layer_begin(kx *x, const char *name, graph_op op, const int *in_t,
                          int n_in);
tpu_status keras_layer_commit(kx *x, const char *path, int krank, int *t);
int keras_krank_of(const kx *x, int ref);
const gshape *keras_shape_of(const kx *x, int ref);
int keras_is_cf(const kx *x, int r);
tpu_status keras_emit(kx *x, kcall *c, int krank, int *t);
const char *keras_layout_name(int cf);
tpu_status keras_cfg_format(kx *x, kcall *c, int *cf);
tpu_status keras_check_format(kx *x, kcall *c);
void keras_scan_model(const kx *x, const cJSON *model, const char *path,
                      keras_scan *s, int depth);
tpu_status keras_scan_fail(kx *x, const keras_scan *s);
const char *keras_layer_name(const cJSON *l);
void keras_count_formats(const cJSON *model, int depth, int *n_cf, int *n_cl);
tpu_status keras_map_model(kx *x, kcall *c);
tpu_status keras_instantiate(kx *x, const cJSON *model, const char *path,
                             const char *prefix, const int *in, int n_in,
                             int frozen, int *out, int *n_out);

/* ---- keras_layers.c: activations, layer classes ------------------------ */

const char *keras_act_name(const cJSON *j);
const keras_act *keras_act_find(const char *name);
int keras_allowed(const kx *x, const char *key);
tpu_status keras_passed_through(kx *x, const char *what, const char *name,
                                const char *cls, const char *path);
tpu_status keras_softmax_read(kx *x, int r);
tpu_status keras_single_input(kx *x, kcall *c);
const keras_class *keras_class_find(const char *cls);
int keras_is_model_class(const char *cls);

#endif
