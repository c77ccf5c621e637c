/* keras — a Keras architecture file as a tpuemu trace (see keras.h).
 *
 * A model is instantiated the way Keras's own from_config does it: the
 * layers of a Functional model are called node by node once their inputs
 * exist (a layer called twice has two inbound nodes), a Sequential one in
 * order, and a model used as a layer is instantiated in place with its
 * layers' names prefixed by its own.  Each call maps through
 * keras_classes, a table of Keras class -> function that emits the trace
 * layers; shapes come from the trace format's own inference
 * (graph_infer_layer) as each layer is emitted, so a mismatch is reported
 * at the Keras layer that causes it and the trace always agrees with what
 * `tpuemu run` infers.
 */
#include "emu/imp/keras.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zip.h>

#include "emu/graph.h"
#include "emu/rfile.h"

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
 * trace's softmax activation, named sm_name (softmax_read). */
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

/* ---- messages ---------------------------------------------------------- */

static tpu_status kfail(kx *x, const char *path, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static tpu_status kfail(kx *x, const char *path, const char *fmt, ...)
{
    char why[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return tpu_fail(x->err, TPU_ERR_INPUT, "%s: %s: %s", x->file,
                    path && *path ? path : "(top level)", why);
}

static tpu_status koom(kx *x)
{
    return tpu_fail(x->err, TPU_ERR_SYSTEM, "out of host memory");
}

/* A user string as it may appear in a one-line message: at most 48
 * bytes, control bytes as '?'. */
static const char *kshown(char *buf, size_t cap, const char *s)
{
    size_t n = 0;
    if (!s)
        s = "";
    for (; *s && n + 1 < cap && n < 48; s++)
        buf[n++] = ((unsigned char)*s < 0x20 || *s == 0x7f) ? '?' : *s;
    if (*s && n >= 48 && n + 4 < cap) {
        memcpy(buf + n, "...", 3);
        n += 3;
    }
    buf[n] = 0;
    return buf;
}

static void kpath(char *dst, const char *base, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static void kpath(char *dst, const char *base, const char *fmt, ...)
{
    char tail[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tail, sizeof tail, fmt, ap);
    va_end(ap);
    if (!base || !*base)
        snprintf(dst, KERAS_PATH_MAX, "%s",
                 tail[0] == '.' ? tail + 1 : tail);
    else
        snprintf(dst, KERAS_PATH_MAX, "%s%s", base, tail);
}

static tpu_status append(kx *x, char **buf, size_t *len, const char *s)
{
    size_t n = strlen(s);
    char *p = realloc(*buf, *len + n + 1);
    if (!p)
        return koom(x);
    memcpy(p + *len, s, n + 1);
    *buf = p;
    *len += n;
    return TPU_OK;
}

static tpu_status note(kx *x, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static tpu_status note(kx *x, const char *fmt, ...)
{
    char line[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    tpu_status st = append(x, &x->notes, &x->notes_len, line);
    return st ? st : append(x, &x->notes, &x->notes_len, "\n");
}

/* ---- typed access to the Keras JSON ------------------------------------ */

static const char *jtype(const cJSON *j)
{
    if (!j)
        return "nothing";
    if (cJSON_IsString(j))
        return "a string";
    if (cJSON_IsNumber(j))
        return "a number";
    if (cJSON_IsBool(j))
        return "a boolean";
    if (cJSON_IsNull(j))
        return "null";
    if (cJSON_IsArray(j))
        return "a list";
    return "an object";
}

static const char *get_str(const cJSON *o, const char *key)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(j) ? j->valuestring : NULL;
}

static const cJSON *get(const cJSON *o, const char *key)
{
    return cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, key)
                             : NULL;
}

/* A whole number in [lo, hi]. */
static int is_int(const cJSON *j, int64_t lo, int64_t hi)
{
    if (!cJSON_IsNumber(j))
        return 0;
    double v = j->valuedouble;
    return v >= (double)lo && v <= (double)hi && v == (double)(int64_t)v;
}

/* An optional positive integer key (default def when absent or null). */
static tpu_status cfg_int(kx *x, kcall *c, const char *key, int64_t lo,
                          int64_t hi, int64_t def, int64_t *out)
{
    const cJSON *j = get(c->cfg, key);
    char p[KERAS_PATH_MAX];
    if (!j || cJSON_IsNull(j)) {
        if (def < lo) {
            kpath(p, c->path, ".config.%s", key);
            return kfail(x, p, "missing (expected an integer %lld ... %lld)",
                         (long long)lo, (long long)hi);
        }
        *out = def;
        return TPU_OK;
    }
    if (!is_int(j, lo, hi)) {
        kpath(p, c->path, ".config.%s", key);
        if (cJSON_IsNumber(j))
            return kfail(x, p, "expected an integer %lld ... %lld, found %g",
                         (long long)lo, (long long)hi, j->valuedouble);
        return kfail(x, p, "expected an integer %lld ... %lld, found %s",
                     (long long)lo, (long long)hi, jtype(j));
    }
    *out = (int64_t)j->valuedouble;
    return TPU_OK;
}

static tpu_status cfg_bool(kx *x, kcall *c, const char *key, int def,
                           int *out)
{
    const cJSON *j = get(c->cfg, key);
    if (!j || cJSON_IsNull(j)) {
        *out = def;
        return TPU_OK;
    }
    if (!cJSON_IsBool(j)) {
        char p[KERAS_PATH_MAX];
        kpath(p, c->path, ".config.%s", key);
        return kfail(x, p, "expected true or false, found %s", jtype(j));
    }
    *out = cJSON_IsTrue(j);
    return TPU_OK;
}

/* A per-dimension key (kernel_size, strides, pool_size, ...): one number
 * for every dimension or a list of `dims`; out gets the trace's `nsp`
 * entries (a 1D layer's list is [1, n]). */
static tpu_status cfg_dims(kx *x, kcall *c, const char *key, int dims,
                           int def, int *out)
{
    const cJSON *j = get(c->cfg, key);
    char p[KERAS_PATH_MAX];
    int v[3] = {def, def, def};
    kpath(p, c->path, ".config.%s", key);
    if (j && !cJSON_IsNull(j)) {
        if (is_int(j, 1, GRAPH_DIM_MAX)) {
            v[0] = v[1] = v[2] = (int)j->valuedouble;
        } else if (cJSON_IsArray(j) && cJSON_GetArraySize(j) == dims) {
            for (int d = 0; d < dims; d++) {
                const cJSON *e = cJSON_GetArrayItem(j, d);
                if (!is_int(e, 1, GRAPH_DIM_MAX))
                    return kfail(x, p, "expected %d positive integers (each "
                                 "at most %d)", dims, GRAPH_DIM_MAX);
                v[d] = (int)e->valuedouble;
            }
        } else {
            return kfail(x, p, "expected a positive integer or a list of %d, "
                         "found %s", dims, jtype(j));
        }
    } else if (def <= 0) {
        return kfail(x, p, "missing (expected a list of %d positive "
                     "integers)", dims);
    }
    if (dims == 1) {
        out[0] = 1;
        out[1] = v[0];
    } else {
        for (int d = 0; d < dims; d++)
            out[d] = v[d];
    }
    return TPU_OK;
}

static tpu_status cfg_padding(kx *x, kcall *c, const char *def, int *same)
{
    const cJSON *j = get(c->cfg, "padding");
    const char *s = cJSON_IsString(j) ? j->valuestring : NULL;
    char p[KERAS_PATH_MAX], b[64];
    if (!j || cJSON_IsNull(j))
        s = def;
    kpath(p, c->path, ".config.padding");
    if (!s)
        return kfail(x, p, "expected \"same\" or \"valid\", found %s",
                     jtype(j));
    if (strcmp(s, "same") == 0)
        *same = 1;
    else if (strcmp(s, "valid") == 0)
        *same = 0;
    else
        return kfail(x, p, "'%s' has no trace equivalent (expected \"same\" "
                     "or \"valid\")", kshown(b, sizeof b, s));
    return TPU_OK;
}

/* ---- the graph being built --------------------------------------------- */

static tpu_status new_ref(kx *x, int t, int *ref)
{
    if (x->n_refs == x->cap_refs) {
        int cap = x->cap_refs ? 2 * x->cap_refs : 64;
        keras_ref *r = realloc(x->refs, (size_t)cap * sizeof *r);
        if (!r)
            return koom(x);
        x->refs = r;
        x->cap_refs = cap;
    }
    memset(&x->refs[x->n_refs], 0, sizeof x->refs[0]);
    x->refs[x->n_refs].t = t;
    x->refs[x->n_refs].cf = x->kcf[t];
    *ref = x->n_refs++;
    return TPU_OK;
}

static int name_taken(const kx *x, const char *name)
{
    return graph_find(&x->g, name) >= 0;
}

/* A trace name for base (+ suffix), unique and within GRAPH_NAME_MAX - 1
 * bytes: Keras names are unique within one model, but a nested model's
 * and its caller's need not be, and a prefix can make one too long. */
static void unique_name(const kx *x, const char *base, const char *suffix,
                        char *out)
{
    char want[512];
    snprintf(want, sizeof want, "%s%s", base, suffix ? suffix : "");
    if (strlen(want) < GRAPH_NAME_MAX && !name_taken(x, want)) {
        strcpy(out, want);
        return;
    }
    for (int k = 1;; k++) {
        char tail[16];
        int tl = snprintf(tail, sizeof tail, "~%d", k);
        size_t keep = strlen(want);
        if (keep + (size_t)tl >= GRAPH_NAME_MAX)
            keep = GRAPH_NAME_MAX - 1 - (size_t)tl;
        /* never cut inside a UTF-8 character */
        while (keep > 0 && ((unsigned char)want[keep] & 0xC0) == 0x80)
            keep--;
        memcpy(out, want, keep);
        memcpy(out + keep, tail, (size_t)tl + 1);
        if (!name_taken(x, out))
            return;
    }
}

/* Room for one more trace layer in x->g. */
static tpu_status grow(kx *x)
{
    if (x->g.n_layers >= GRAPH_LAYERS_MAX)
        return kfail(x, NULL, "more than %d trace layers", GRAPH_LAYERS_MAX);
    if (x->g.n_layers < x->cap_layers)
        return TPU_OK;
    int cap = x->cap_layers ? 2 * x->cap_layers : 256;
    glayer *l = realloc(x->g.layers, (size_t)cap * sizeof *l);
    if (!l)
        return koom(x);
    x->g.layers = l;
    int *k = realloc(x->krank, (size_t)cap * sizeof *k);
    if (!k)
        return koom(x);
    x->krank = k;
    k = realloc(x->kcf, (size_t)cap * sizeof *k);
    if (!k)
        return koom(x);
    x->kcf = k;
    x->cap_layers = cap;
    tpu_error e;
    if (graph_index_reserve(&x->g, cap, &e))
        return koom(x);
    return TPU_OK;
}

/* A new trace layer (not yet committed): name, op and inputs set, every
 * other field at the trace's defaults. */
static glayer *layer_begin(kx *x, const char *name, graph_op op,
                           const int *in_t, int n_in)
{
    glayer *L = &x->g.layers[x->g.n_layers];
    memset(L, 0, sizeof *L);
    snprintf(L->name, sizeof L->name, "%s", name);
    L->op = op;
    L->n_in = n_in;
    for (int k = 0; k < n_in; k++)
        L->in[k] = in_t[k];
    L->dtype_bytes = 2;
    L->share_from = -1;
    for (int d = 0; d < GRAPH_MAX_SP; d++)
        L->kernel[d] = L->strides[d] = L->dilation[d] = L->factor[d] = 1;
    return L;
}

static cJSON *int_list(const int *v, int n)
{
    return cJSON_CreateIntArray(v, n);
}

/* The layer's trace JSON from its glayer (only what differs from the
 * reader's defaults, plus use_bias and padding, which a reader of the
 * trace should not have to look up). */
static cJSON *layer_json(const kx *x, const glayer *L)
{
    const graph *g = &x->g;
    int nsp = g->layers[L->in[0]].out.nsp;
    cJSON *j = cJSON_CreateObject();
    if (!j)
        return NULL;
    cJSON_AddStringToObject(j, "name", L->name);
    cJSON_AddStringToObject(j, "op", graph_op_name(L->op));
    if (L->n_in == 1 && L->op != GOP_LOSS) {
        cJSON_AddStringToObject(j, "in", g->layers[L->in[0]].name);
    } else {
        cJSON *a = cJSON_AddArrayToObject(j, "in");
        for (int k = 0; a && k < L->n_in; k++)
            cJSON_AddItemToArray(
                a, cJSON_CreateString(g->layers[L->in[k]].name));
    }
    switch (L->op) {
    case GOP_CONV:
    case GOP_CONV_T: {
        int ones = 1;
        cJSON_AddNumberToObject(j, "filters", L->filters);
        cJSON_AddItemToObject(j, "kernel", int_list(L->kernel, nsp));
        for (int d = 0; d < nsp; d++)
            ones &= L->strides[d] == 1;
        if (!ones)
            cJSON_AddItemToObject(j, "strides", int_list(L->strides, nsp));
        cJSON_AddStringToObject(j, "padding", L->pad_same ? "same" : "valid");
        ones = 1;
        for (int d = 0; d < nsp; d++)
            ones &= L->dilation[d] == 1;
        if (!ones && L->op == GOP_CONV)
            cJSON_AddItemToObject(j, "dilation", int_list(L->dilation, nsp));
        cJSON_AddBoolToObject(j, "use_bias", L->use_bias);
        if (L->groups > 1)
            cJSON_AddNumberToObject(j, "groups", L->groups);
        if (L->share_from >= 0)
            cJSON_AddStringToObject(j, "share_weights",
                                    g->layers[L->share_from].name);
        break;
    }
    case GOP_DENSE:
        cJSON_AddNumberToObject(j, "units", L->filters);
        cJSON_AddBoolToObject(j, "use_bias", L->use_bias);
        break;
    case GOP_MAXPOOL:
    case GOP_AVGPOOL:
        cJSON_AddItemToObject(j, "window", int_list(L->kernel, nsp));
        cJSON_AddItemToObject(j, "strides", int_list(L->strides, nsp));
        cJSON_AddStringToObject(j, "padding", L->pad_same ? "same" : "valid");
        break;
    case GOP_UPSAMPLE:
        cJSON_AddItemToObject(j, "factor", int_list(L->factor, nsp));
        break;
    case GOP_DROPOUT:
        cJSON_AddNumberToObject(j, "rate", L->rate);
        break;
    case GOP_LOSS:
        cJSON_AddStringToObject(j, "kind", graph_loss_name(L->loss));
        cJSON_AddStringToObject(j, "dtype", "f32");
        break;
    case GOP_ELEMWISE:
        cJSON_AddStringToObject(j, "kind", graph_ew_name(L->kind));
        break;
    case GOP_ACT:
        cJSON_AddStringToObject(j, "kind", graph_act_name(L->kind));
        if (L->alpha != 0 || L->kind == GACT_LEAKY_RELU ||
            L->kind == GACT_ELU)
            cJSON_AddNumberToObject(j, "alpha", L->alpha);
        if (L->max_value > 0)
            cJSON_AddNumberToObject(j, "max_value", L->max_value);
        break;
    case GOP_GROUPNORM:
        cJSON_AddNumberToObject(j, "groups", L->groups);
        break;
    case GOP_PAD:
    case GOP_CROP: {
        cJSON *a = cJSON_AddArrayToObject(
            j, L->op == GOP_PAD ? "pads" : "crops");
        int sg = L->op == GOP_PAD ? 1 : -1;
        for (int d = 0; a && d < nsp; d++) {
            int v[2] = {(int)(sg * L->pad_lo[d]), (int)(sg * L->pad_hi[d])};
            cJSON_AddItemToArray(a, int_list(v, 2));
        }
        break;
    }
    case GOP_RESIZE:
        cJSON_AddItemToObject(j, "factor", int_list(L->factor, nsp));
        break;
    case GOP_RESHAPE: {
        int v[GRAPH_MAX_SP + 1], n = L->target.nsp;
        for (int d = 0; d < n; d++)
            v[d] = (int)L->target.sp[d];
        v[n] = (int)L->target.c;
        cJSON_AddItemToObject(j, "shape", int_list(v, n + 1));
        break;
    }
    default:
        break;
    }
    /* Keras's scale=False / center=False: no gamma / beta */
    if (L->op == GOP_BATCHNORM || L->op == GOP_LAYERNORM ||
        L->op == GOP_GROUPNORM) {
        if (L->no_scale)
            cJSON_AddBoolToObject(j, "scale", 0);
        if (L->no_center)
            cJSON_AddBoolToObject(j, "center", 0);
    }
    if (L->share_from >= 0 && L->op != GOP_CONV && L->op != GOP_CONV_T)
        cJSON_AddStringToObject(j, "share_weights",
                                g->layers[L->share_from].name);
    if (L->frozen && L->share_from < 0 && L->op != GOP_NORMALIZE)
        cJSON_AddBoolToObject(j, "trainable", 0);
    return j;
}

/* Infers the begun layer's shape (its Keras path in messages), adds it to
 * the trace and returns its index in *t. */
static tpu_status layer_commit(kx *x, const char *path, int krank, int *t)
{
    int i = x->g.n_layers;
    glayer *L = &x->g.layers[i];
    const char *key = NULL;
    tpu_error e;
    if (graph_infer_layer(&x->g, i, &key, &e))
        return kfail(x, path, "%s (as the trace's %s '%s')", e.msg,
                     graph_op_name(L->op), L->name);
    cJSON *j = layer_json(x, L);
    if (!j || !cJSON_AddItemToArray(x->layers, j)) {
        cJSON_Delete(j);
        return koom(x);
    }
    x->krank[i] = krank;
    x->kcf[i] = 0;
    x->g.n_layers++;
    graph_index_add(&x->g, i);
    *t = i;
    return TPU_OK;
}

static int krank_of(const kx *x, int ref)
{
    return x->krank[x->refs[ref].t];
}

static const gshape *shape_of(const kx *x, int ref)
{
    return &x->g.layers[x->refs[ref].t].out;
}

/* Whether ref r is a channels-first tensor with a layout (rank 2 or more
 * per example: a flat one has none). */
static int is_cf(const kx *x, int r)
{
    return krank_of(x, r) > 1 && x->refs[r].cf;
}

/* Emits one layer of the call c, committed; the layer must have been
 * filled by the caller through *L.  Its Keras tensor is channels-first
 * when one it reads is (the layer checked that they agree) and it keeps
 * a layout (rank 2 or more). */
static tpu_status emit(kx *x, kcall *c, int krank, int *t)
{
    tpu_status st = layer_commit(x, c->path, krank, t);
    for (int k = 0; !st && krank > 1 && k < c->n_in; k++)
        if (is_cf(x, c->in[k]))
            x->kcf[*t] = 1;
    return st;
}

static const char *layout_name(int cf)
{
    return cf ? "channels_first" : "channels_last";
}

/* The layer's data_format: *cf 1 for channels_first, 0 for
 * channels_last, -1 when the config does not say. */
static tpu_status cfg_format(kx *x, kcall *c, int *cf)
{
    const cJSON *j = get(c->cfg, "data_format");
    *cf = -1;
    if (!j || cJSON_IsNull(j))
        return TPU_OK;
    if (cJSON_IsString(j) && strcmp(j->valuestring, "channels_last") == 0)
        *cf = 0;
    else if (cJSON_IsString(j) &&
             strcmp(j->valuestring, "channels_first") == 0)
        *cf = 1;
    else {
        char p[KERAS_PATH_MAX], b[64];
        kpath(p, c->path, ".config.data_format");
        if (!cJSON_IsString(j))
            return kfail(x, p, "expected \"channels_last\" or "
                         "\"channels_first\", found %s", jtype(j));
        return kfail(x, p, "'%s' is not \"channels_last\" or "
                     "\"channels_first\"",
                     kshown(b, sizeof b, j->valuestring));
    }
    return TPU_OK;
}

/* A layer with a data_format (convolutions, pooling, padding, cropping,
 * upsampling, global pooling) reads its input in that layout: the input
 * tensor must be in it, as every layer before decided (the trace holds
 * one layout per tensor; a model that reads one tensor both ways has no
 * trace equivalent). */
static tpu_status check_format(kx *x, kcall *c)
{
    int cf;
    tpu_status st = cfg_format(x, c, &cf);
    if (st || cf < 0 || krank_of(x, c->in[0]) < 2 ||
        x->refs[c->in[0]].cf == cf)
        return st;
    char p[KERAS_PATH_MAX], b[64], b2[64];
    kpath(p, c->path, ".config.data_format");
    return kfail(x, p, "'%s' (%s) is %s, but its input '%s' is a %s tensor "
                 "(as the layers before it read it): one tensor read in both "
                 "layouts has no trace equivalent",
                 kshown(b, sizeof b, c->kname), c->cls, layout_name(cf),
                 kshown(b2, sizeof b2,
                        x->g.layers[x->refs[c->in[0]].t].name),
                 layout_name(!cf));
}

/* ---- activations ------------------------------------------------------- */

typedef struct {
    const char *name;
    int op;   /* GOP_RELU, GOP_SIGMOID, GOP_ACT, -1 identity, -2 softmax */
    int kind; /* GOP_ACT's graph_act */
} keras_act;

/* Keras activation names the trace can express (keras/activations.py;
 * hard_sigmoid is tf.keras 2's, 0.2 x + 0.5 clipped, and gelu the exact
 * erf form, Keras's default; hardSigmoid is TensorFlow.js's name for the
 * same function).  softmax at an output goes into the loss; read by
 * another layer it is the trace's softmax activation (softmax_read). */
static const keras_act keras_acts[] = {
    {"relu", GOP_RELU, 0},
    {"sigmoid", GOP_SIGMOID, 0},
    {"linear", -1, 0},
    {"softmax", -2, 0},
    {"relu6", GOP_ACT, GACT_RELU6},
    {"swish", GOP_ACT, GACT_SWISH},
    {"silu", GOP_ACT, GACT_SWISH},
    {"gelu", GOP_ACT, GACT_GELU},
    {"elu", GOP_ACT, GACT_ELU},
    {"tanh", GOP_ACT, GACT_TANH},
    {"hard_sigmoid", GOP_ACT, GACT_HARD_SIGMOID},
    {"hardSigmoid", GOP_ACT, GACT_HARD_SIGMOID},
    {"leaky_relu", GOP_ACT, GACT_LEAKY_RELU},
};

/* Adds an activation layer of kind `kind` after the ref in c->out (its
 * trace name the call's with `suffix`, or the call's own when suffix is
 * NULL); alpha and max_value as the trace reads them. */
static tpu_status activation_layer(kx *x, kcall *c, int kind, double alpha,
                                   double max_value, const char *suffix);

/* The activation's name: a string, or the config string of a serialized
 * function ({"class_name": "function", "config": "relu"}). */
static const char *act_name(const cJSON *j)
{
    if (!j || cJSON_IsNull(j))
        return "linear";
    if (cJSON_IsString(j))
        return j->valuestring;
    if (cJSON_IsObject(j)) {
        const char *s = get_str(j, "config");
        if (s)
            return s;
        s = get_str(j, "class_name");
        if (s)
            return s;
    }
    return NULL;
}

static const keras_act *act_find(const char *name)
{
    for (size_t i = 0; name && i < sizeof keras_acts / sizeof keras_acts[0];
         i++)
        if (strcmp(keras_acts[i].name, name) == 0)
            return &keras_acts[i];
    return NULL;
}

static int allowed(const kx *x, const char *key)
{
    const char *l = x->o->allow_identity;
    size_t n = strlen(key);
    while (l && *l) {
        size_t m = strcspn(l, ",");
        if (m == n && strncmp(l, key, n) == 0)
            return 1;
        l += m;
        if (*l == ',')
            l++;
    }
    return 0;
}

static tpu_status passed_through(kx *x, const char *what, const char *name,
                                 const char *cls, const char *path)
{
    char b1[64], b2[64], line[300];
    tpu_status st = note(x, "%s '%s' (%s) at %s passed through as an identity "
                         "(--allow-identity %s)", what,
                         kshown(b1, sizeof b1, name), cls, path,
                         kshown(b2, sizeof b2, cls));
    if (st)
        return st;
    snprintf(line, sizeof line, "%s%s (%s)", x->passed_len ? ", " : "", name,
             cls);
    return append(x, &x->passed, &x->passed_len, line);
}

/* Applies the layer's activation (key "activation" of its config) to the
 * ref in c->out; `path` is that key's. */
static tpu_status apply_act(kx *x, kcall *c, const cJSON *aj,
                            const char *path)
{
    const char *a = act_name(aj);
    const keras_act *ka = act_find(a);
    char b[64];
    if (!a)
        return kfail(x, path, "expected an activation name, found %s",
                     jtype(aj));
    if (!ka) {
        if (!allowed(x, a))
            return kfail(x, path, "activation '%s' has no trace op",
                         kshown(b, sizeof b, a));
        return passed_through(x, "activation of", c->kname, a, path);
    }
    if (ka->op == -1)
        return TPU_OK;
    if (ka->op == -2) {
        int r, cf = x->refs[c->out].cf;
        /* Keras's softmax is over the last axis; the Softmax layer has
         * checked its own axis */
        if (is_cf(x, c->out) && strcmp(c->cls, "Softmax") != 0)
            return kfail(x, path, "activation 'softmax' acts on the last "
                         "axis, which on the channels_first tensor of '%s' "
                         "is a spatial one: the trace's softmax is over the "
                         "channels (as Softmax(axis=1) is)",
                         kshown(b, sizeof b, c->kname));
        tpu_status st = new_ref(x, x->refs[c->out].t, &r);
        if (st)
            return st;
        x->refs[r].cf = cf;
        x->refs[r].softmax = 1;
        snprintf(x->refs[r].sm_path, sizeof x->refs[r].sm_path, "%s", path);
        /* the name the activation takes if another layer reads it: an
         * Activation or Softmax layer's own, else NAME/softmax */
        snprintf(x->refs[r].sm_name, sizeof x->refs[r].sm_name, "%s", c->tname);
        x->refs[r].sm_suffix =
            strcmp(c->cls, "Activation") != 0 && strcmp(c->cls, "Softmax") != 0;
        c->out = r;
        return TPU_OK;
    }
    if (ka->op == GOP_ACT) {
        char suf[32];
        snprintf(suf, sizeof suf, "/%s", ka->name);
        /* an Activation layer is the trace layer itself, another
         * layer's activation argument a layer after it */
        return activation_layer(x, c, ka->kind,
                                ka->kind == GACT_LEAKY_RELU ? 0.2
                                : ka->kind == GACT_ELU      ? 1.0
                                                            : 0.0,
                                0,
                                strcmp(c->cls, "Activation") == 0 ? NULL
                                                                  : suf);
    }
    if (grow(x))
        return x->err->code;
    char name[GRAPH_NAME_MAX];
    int in_t = x->refs[c->out].t, t;
    /* as above: an Activation layer keeps its own name, so that summary
     * rows line up with Keras's */
    unique_name(x, c->tname,
                strcmp(c->cls, "Activation") == 0 ? NULL
                : ka->op == GOP_RELU               ? "/relu"
                                                   : "/sigmoid",
                name);
    layer_begin(x, name, (graph_op)ka->op, &in_t, 1);
    tpu_status st = emit(x, c, krank_of(x, c->out), &t);
    return st ? st : new_ref(x, t, &c->out);
}

static tpu_status activation_layer(kx *x, kcall *c, int kind, double alpha,
                                   double max_value, const char *suffix)
{
    char name[GRAPH_NAME_MAX];
    int in_t = x->refs[c->out].t, t;
    if (grow(x))
        return x->err->code;
    if (suffix)
        unique_name(x, c->tname, suffix, name);
    else
        snprintf(name, sizeof name, "%s", c->tname);
    glayer *L = layer_begin(x, name, GOP_ACT, &in_t, 1);
    L->kind = kind;
    L->alpha = alpha;
    L->max_value = max_value;
    tpu_status st = emit(x, c, krank_of(x, c->out), &t);
    return st ? st : new_ref(x, t, &c->out);
}

/* A layer reads ref r, whose softmax is pending: the softmax becomes the
 * trace's activation (over the channels, as Keras's default axis), and
 * every later reader of r reads that. */
static tpu_status softmax_read(kx *x, int r)
{
    keras_ref *R = &x->refs[r];
    char name[GRAPH_NAME_MAX];
    int in_t = R->t, t;
    tpu_status st;
    if ((st = grow(x)))
        return st;
    unique_name(x, R->sm_name, R->sm_suffix ? "/softmax" : NULL, name);
    glayer *L = layer_begin(x, name, GOP_ACT, &in_t, 1);
    L->kind = GACT_SOFTMAX;
    if ((st = layer_commit(x, R->sm_path, x->krank[in_t], &t)))
        return st;
    R = &x->refs[r];
    x->kcf[t] = R->cf;
    R->t = t;
    R->softmax = 0;
    return TPU_OK;
}

static tpu_status cfg_act(kx *x, kcall *c)
{
    char p[KERAS_PATH_MAX];
    kpath(p, c->path, ".config.activation");
    return apply_act(x, c, get(c->cfg, "activation"), p);
}

/* ---- weights: trainable, shared ---------------------------------------- */

/* A layer with weights called again shares its first call's (the trace's
 * share_weights: convolutions, Dense, the normalisations; Keras counts
 * them once, and a shared BatchNormalization's calls each normalise with
 * their own batch's statistics, as the trace's sharer does). */
static tpu_status weights_of(kx *x, kcall *c, glayer *L, int slot)
{
    int tr = 1;
    tpu_status st = cfg_bool(x, c, "trainable", 1, &tr);
    if (st)
        return st;
    L->frozen = c->frozen || !tr;
    if (c->seen->calls > 1) {
        TPU_ASSERT(slot < c->seen->n_w);
        L->share_from = c->seen->w[slot];
        L->frozen = x->g.layers[L->share_from].frozen;
    }
    return TPU_OK;
}

static void weights_done(kcall *c, int slot, int t)
{
    if (c->seen->calls == 1 && slot < 2) {
        c->seen->w[slot] = t;
        if (c->seen->n_w <= slot)
            c->seen->n_w = slot + 1;
    }
}

/* The input must be `want` spatial dims in Keras's terms (1, 2 or 3). */
static tpu_status need_rank(kx *x, kcall *c, int want)
{
    int kr = krank_of(x, c->in[0]) - 1;
    if (kr != want) {
        char b[64];
        return kfail(x, c->path, "%s needs a %dD input (batch, %s, channels); "
                     "'%s' gives a tensor of rank %d", c->cls, want,
                     want == 1 ? "steps" : want == 2 ? "rows, cols"
                                                     : "depth, rows, cols",
                     kshown(b, sizeof b, x->g.layers[x->refs[c->in[0]].t].name),
                     kr + 2);
    }
    return TPU_OK;
}

static tpu_status single_input(kx *x, kcall *c)
{
    if (c->n_in != 1) {
        char b[64];
        return kfail(x, c->path, "'%s' (%s) has %d inputs; one expected",
                     kshown(b, sizeof b, c->kname), c->cls, c->n_in);
    }
    return TPU_OK;
}

/* ---- the layer classes ------------------------------------------------- */

static tpu_status map_identity(kx *x, kcall *c)
{
    (void)x;
    c->out = c->in[0];
    return TPU_OK;
}

/* A 1D convolution's `causal` padding (Keras's Conv1D: (k - 1) d zeros
 * before the steps, none after, then `valid`) as a pad layer NAME/pad
 * ahead of the convolution; *in_t becomes the pad's output. */
static tpu_status causal_pad(kx *x, kcall *c, int k, int d, int *in_t)
{
    char name[GRAPH_NAME_MAX];
    tpu_status st;
    if ((st = grow(x)))
        return st;
    unique_name(x, c->tname, "/pad", name);
    glayer *L = layer_begin(x, name, GOP_PAD, in_t, 1);
    L->pad_lo[1] = (int64_t)(k - 1) * d; /* the steps: [1, steps, C] */
    if ((st = layer_commit(x, c->path, 2, in_t)))
        return st;
    x->kcf[*in_t] = x->refs[c->in[0]].cf;
    return TPU_OK;
}

/* Conv1D/2D/3D (arg: dims); DepthwiseConv (arg: 10 + dims) as a conv with
 * groups = channels; SeparableConv (20 + dims) as that and a 1x1 conv.
 * A 1D one may be `causal` (causal_pad). */
static tpu_status map_conv(kx *x, kcall *c)
{
    int dims = c->arg % 10, kind = c->arg / 10;
    int kernel[3], strides[3], dil[3], same, bias, t, in_t, causal;
    int64_t filters = 0, dm = 1, groups = 1;
    tpu_status st;
    const char *ps = get_str(c->cfg, "padding");
    causal = dims == 1 && ps && strcmp(ps, "causal") == 0;
    if ((st = single_input(x, c)) || (st = need_rank(x, c, dims)) ||
        (st = check_format(x, c)) ||
        (st = cfg_dims(x, c, "kernel_size", dims, 0, kernel)) ||
        (st = cfg_dims(x, c, "strides", dims, 1, strides)) ||
        (st = cfg_dims(x, c, "dilation_rate", dims, 1, dil)) ||
        (!causal && (st = cfg_padding(x, c, "valid", &same))) ||
        (st = cfg_bool(x, c, "use_bias", 1, &bias)))
        return st;
    if (causal)
        same = 0;
    if (kind == 0) {
        if ((st = cfg_int(x, c, "filters", 1, GRAPH_DIM_MAX, 0, &filters)) ||
            (st = cfg_int(x, c, "groups", 1, GRAPH_DIM_MAX, 1, &groups)))
            return st;
    } else {
        if ((st = cfg_int(x, c, "depth_multiplier", 1, GRAPH_DIM_MAX, 1,
                          &dm)))
            return st;
        if (kind == 2 &&
            (st = cfg_int(x, c, "filters", 1, GRAPH_DIM_MAX, 0, &filters)))
            return st;
    }
    int nsp = dims == 1 ? 2 : dims;
    int64_t cin = shape_of(x, c->in[0])->c;
    in_t = x->refs[c->in[0]].t;
    if (causal && kernel[1] > 1 &&
        (st = causal_pad(x, c, kernel[1], dil[1], &in_t)))
        return st;
    if (kind > 0) {
        /* the depthwise part: one group per input channel */
        char name[GRAPH_NAME_MAX];
        if ((st = grow(x)))
            return st;
        if (kind == 2)
            unique_name(x, c->tname, "/depthwise", name);
        else
            snprintf(name, sizeof name, "%s", c->tname);
        glayer *L = layer_begin(x, name, GOP_CONV, &in_t, 1);
        L->filters = (int)(cin * dm > GRAPH_DIM_MAX ? GRAPH_DIM_MAX + 1
                                                    : cin * dm);
        L->groups = (int)cin;
        L->pad_same = same;
        L->use_bias = kind == 1 ? bias : 0;
        for (int d = 0; d < nsp; d++) {
            L->kernel[d] = kernel[d];
            L->strides[d] = strides[d];
            L->dilation[d] = dil[d];
        }
        if ((st = weights_of(x, c, L, 0)) ||
            (st = emit(x, c, dims + 1, &t)))
            return st;
        weights_done(c, 0, t);
        if (kind == 1)
            goto done;
        in_t = t;
    }
    if ((st = grow(x)))
        return st;
    glayer *L = layer_begin(x, c->tname, GOP_CONV, &in_t, 1);
    L->filters = (int)filters;
    L->use_bias = bias;
    if (kind == 2) {
        L->pad_same = 0;  /* the pointwise 1x1 */
    } else {
        L->pad_same = same;
        L->groups = (int)groups;
        for (int d = 0; d < nsp; d++) {
            L->kernel[d] = kernel[d];
            L->strides[d] = strides[d];
            L->dilation[d] = dil[d];
        }
    }
    if ((st = weights_of(x, c, L, kind == 2)) ||
        (st = emit(x, c, dims + 1, &t)))
        return st;
    weights_done(c, kind == 2, t);
done:
    if ((st = new_ref(x, t, &c->out)))
        return st;
    return cfg_act(x, c);
}

static tpu_status map_conv_t(kx *x, kcall *c)
{
    int dims = c->arg, kernel[3], strides[3], dil[3], same, bias, t;
    int64_t filters;
    tpu_status st;
    const cJSON *op = get(c->cfg, "output_padding");
    if ((st = single_input(x, c)) || (st = need_rank(x, c, dims)) ||
        (st = check_format(x, c)) ||
        (st = cfg_dims(x, c, "kernel_size", dims, 0, kernel)) ||
        (st = cfg_dims(x, c, "strides", dims, 1, strides)) ||
        (st = cfg_dims(x, c, "dilation_rate", dims, 1, dil)) ||
        (st = cfg_padding(x, c, "valid", &same)) ||
        (st = cfg_bool(x, c, "use_bias", 1, &bias)) ||
        (st = cfg_int(x, c, "filters", 1, GRAPH_DIM_MAX, 0, &filters)))
        return st;
    int nsp = dims == 1 ? 2 : dims;
    for (int d = 0; d < nsp; d++)
        if (dil[d] != 1) {
            char p[KERAS_PATH_MAX];
            kpath(p, c->path, ".config.dilation_rate");
            return kfail(x, p, "a dilated transposed convolution has no "
                         "trace equivalent");
        }
    if (op && !cJSON_IsNull(op)) {
        char p[KERAS_PATH_MAX];
        kpath(p, c->path, ".config.output_padding");
        return kfail(x, p, "output_padding has no trace equivalent (the "
                     "trace's conv_transpose follows Keras's default "
                     "output size)");
    }
    if ((st = grow(x)))
        return st;
    int in_t = x->refs[c->in[0]].t;
    glayer *L = layer_begin(x, c->tname, GOP_CONV_T, &in_t, 1);
    L->filters = (int)filters;
    L->use_bias = bias;
    L->pad_same = same;
    for (int d = 0; d < nsp; d++) {
        L->kernel[d] = kernel[d];
        L->strides[d] = strides[d];
    }
    if ((st = weights_of(x, c, L, 0)) || (st = emit(x, c, dims + 1, &t)))
        return st;
    weights_done(c, 0, t);
    if ((st = new_ref(x, t, &c->out)))
        return st;
    return cfg_act(x, c);
}

static tpu_status map_dense(kx *x, kcall *c)
{
    int64_t units;
    int bias, t;
    tpu_status st;
    if ((st = single_input(x, c)) ||
        (st = cfg_int(x, c, "units", 1, GRAPH_DIM_MAX, 0, &units)) ||
        (st = cfg_bool(x, c, "use_bias", 1, &bias)) || (st = grow(x)))
        return st;
    if (is_cf(x, c->in[0])) {
        char b[64], b2[64];
        return kfail(x, c->path, "'%s' (Dense) acts on the last axis, which "
                     "on its channels_first input '%s' is a spatial one: the "
                     "trace's dense acts on the channels (Flatten first, or "
                     "Permute the channels last)",
                     kshown(b, sizeof b, c->kname),
                     kshown(b2, sizeof b2,
                            x->g.layers[x->refs[c->in[0]].t].name));
    }
    int in_t = x->refs[c->in[0]].t;
    glayer *L = layer_begin(x, c->tname, GOP_DENSE, &in_t, 1);
    L->filters = (int)units;
    L->use_bias = bias;
    if ((st = weights_of(x, c, L, 0)) ||
        (st = emit(x, c, krank_of(x, c->in[0]), &t)))
        return st;
    weights_done(c, 0, t);
    if ((st = new_ref(x, t, &c->out)))
        return st;
    return cfg_act(x, c);
}

/* The axis key names the channel axis: on a channels-last tensor the last
 * one, -1 or rank (Keras counts the batch as axis 0), on a channels-first
 * one 1 or -rank; possibly as a one-entry list (Keras 2's
 * BatchNormalization writes [3]).  Absent, it is Keras's default, -1. */
static tpu_status channel_axis(kx *x, kcall *c, int def_ok)
{
    const cJSON *j = get(c->cfg, "axis");
    int kr = krank_of(x, c->in[0]), cf = is_cf(x, c->in[0]), a = -1;
    char p[KERAS_PATH_MAX];
    kpath(p, c->path, ".config.axis");
    if (!j || cJSON_IsNull(j)) {
        if (!def_ok)
            return kfail(x, p, "missing");
        if (!cf)
            return TPU_OK;
    } else {
        if (cJSON_IsArray(j) && cJSON_GetArraySize(j) == 1)
            j = cJSON_GetArrayItem(j, 0);
        if (!is_int(j, -64, 64))
            return kfail(x, p, "expected an integer axis, found %s",
                         jtype(j));
        a = (int)j->valuedouble;
    }
    if (cf && a != 1 && a != -kr)
        return kfail(x, p, "axis %d%s is not the channel axis of this "
                     "channels_first tensor (1 or %d): the trace's %s works "
                     "on the channels only", a,
                     j && !cJSON_IsNull(j) ? "" : " (Keras's default)", -kr,
                     c->cls);
    if (!cf && a != -1 && a != kr)
        return kfail(x, p, "axis %d is not the channel axis (-1 or %d): the "
                     "trace's %s works on the channels (the last axis) "
                     "only", a, kr, c->cls);
    return TPU_OK;
}

static tpu_status map_batchnorm(kx *x, kcall *c)
{
    int t, center = 1, scale = 1;
    tpu_status st;
    if ((st = single_input(x, c)) || (st = channel_axis(x, c, 1)) ||
        (st = cfg_bool(x, c, "center", 1, &center)) ||
        (st = cfg_bool(x, c, "scale", 1, &scale)) || (st = grow(x)))
        return st;
    int in_t = x->refs[c->in[0]].t;
    glayer *L = layer_begin(x, c->tname, GOP_BATCHNORM, &in_t, 1);
    L->no_scale = !scale;
    L->no_center = !center;
    if ((st = weights_of(x, c, L, 0)) ||
        (st = emit(x, c, krank_of(x, c->in[0]), &t)))
        return st;
    weights_done(c, 0, t);
    return new_ref(x, t, &c->out);
}

static tpu_status map_activation(kx *x, kcall *c)
{
    tpu_status st = single_input(x, c);
    if (st)
        return st;
    c->out = c->in[0];
    return cfg_act(x, c);
}

/* Softmax (the layer): over the channel axis only, as the activation;
 * on a model output part of the softmax_xent loss. */
static tpu_status map_softmax(kx *x, kcall *c)
{
    tpu_status st;
    cJSON *name = cJSON_CreateString("softmax");
    if (!name)
        return koom(x);
    if ((st = single_input(x, c)) || (st = channel_axis(x, c, 1))) {
        cJSON_Delete(name);
        return st;
    }
    c->out = c->in[0];
    st = apply_act(x, c, name, c->path);
    cJSON_Delete(name);
    return st;
}

/* ReLU with its defaults is the trace's relu, with max_value or
 * negative_slope its relu activation (relu6 for max_value 6); a threshold
 * has no trace op. */
static const char *check_relu(const cJSON *cfg, char *buf, size_t cap)
{
    static const char *const keys[] = {"threshold"};
    for (int k = 0; k < 1; k++) {
        const cJSON *j = get(cfg, keys[k]);
        if (j && !cJSON_IsNull(j) &&
            !(cJSON_IsNumber(j) && j->valuedouble == 0)) {
            if (cJSON_IsNumber(j))
                snprintf(buf, cap, "%s=%g", keys[k], j->valuedouble);
            else
                snprintf(buf, cap, "%s", keys[k]);
            return buf;
        }
    }
    return NULL;
}

/* An optional number of the config (null: absent), or def. */
static tpu_status cfg_num(kx *x, kcall *c, const char *key, double def,
                          double *out)
{
    const cJSON *j = get(c->cfg, key);
    char p[KERAS_PATH_MAX];
    *out = def;
    if (!j || cJSON_IsNull(j))
        return TPU_OK;
    snprintf(p, sizeof p, "%s.config.%s", c->path, key);
    if (!cJSON_IsNumber(j) ||
        !(j->valuedouble >= -1e6 && j->valuedouble <= 1e6))
        return kfail(x, p, "expected a number, found %s", jtype(j));
    *out = j->valuedouble;
    return TPU_OK;
}

static tpu_status map_relu(kx *x, kcall *c)
{
    int t;
    double mv = 0, slope = 0;
    tpu_status st = single_input(x, c);
    if (st || (st = cfg_num(x, c, "max_value", 0, &mv)) ||
        (st = cfg_num(x, c, "negative_slope", 0, &slope)))
        return st;
    if (mv < 0) {
        char p[KERAS_PATH_MAX];
        snprintf(p, sizeof p, "%s.config.max_value", c->path);
        return kfail(x, p, "expected a positive number, found %g", mv);
    }
    if (mv > 0 || slope != 0) {
        c->out = c->in[0];
        if (mv == 6 && slope == 0)
            return activation_layer(x, c, GACT_RELU6, 0, 0, NULL);
        return activation_layer(x, c, GACT_RELU, slope, mv, NULL);
    }
    if ((st = grow(x)))
        return st;
    int in_t = x->refs[c->in[0]].t;
    layer_begin(x, c->tname, GOP_RELU, &in_t, 1);
    if ((st = emit(x, c, krank_of(x, c->in[0]), &t)))
        return st;
    return new_ref(x, t, &c->out);
}

/* Max/AveragePooling (arg: dims, + 10 for average). */
static tpu_status map_pool(kx *x, kcall *c)
{
    int dims = c->arg % 10, win[3], str[3], same, t;
    tpu_status st;
    const cJSON *sj = get(c->cfg, "strides");
    if ((st = single_input(x, c)) || (st = need_rank(x, c, dims)) ||
        (st = check_format(x, c)) ||
        (st = cfg_dims(x, c, "pool_size", dims, 2, win)) ||
        (st = cfg_padding(x, c, "valid", &same)))
        return st;
    if (sj && !cJSON_IsNull(sj)) {
        if ((st = cfg_dims(x, c, "strides", dims, 1, str)))
            return st;
    } else {
        memcpy(str, win, sizeof str);
    }
    if ((st = grow(x)))
        return st;
    int nsp = dims == 1 ? 2 : dims, in_t = x->refs[c->in[0]].t;
    glayer *L = layer_begin(x, c->tname, c->arg >= 10 ? GOP_AVGPOOL
                                                      : GOP_MAXPOOL,
                            &in_t, 1);
    L->pad_same = same;
    for (int d = 0; d < nsp; d++) {
        L->kernel[d] = win[d];
        L->strides[d] = str[d];
    }
    if ((st = emit(x, c, dims + 1, &t)))
        return st;
    return new_ref(x, t, &c->out);
}

static const char *check_keepdims(const cJSON *cfg, char *buf, size_t cap)
{
    if (cJSON_IsTrue(get(cfg, "keepdims"))) {
        snprintf(buf, cap, "keepdims=true");
        return buf;
    }
    return NULL;
}

/* A global pooling layer (op GOP_GAP or GOP_GMAXPOOL) over c->arg
 * spatial dims. */
static tpu_status map_global_pool(kx *x, kcall *c, graph_op op)
{
    int t;
    tpu_status st;
    if ((st = single_input(x, c)) || (st = need_rank(x, c, c->arg)) ||
        (st = check_format(x, c)) || (st = grow(x)))
        return st;
    int in_t = x->refs[c->in[0]].t;
    layer_begin(x, c->tname, op, &in_t, 1);
    if ((st = emit(x, c, 1, &t)))
        return st;
    return new_ref(x, t, &c->out);
}

static tpu_status map_gap(kx *x, kcall *c)
{
    return map_global_pool(x, c, GOP_GAP);
}

/* Flatten: a channels-first tensor flattens in another order than the
 * trace's channels-last one, to the same size, which is all a reader
 * (Dense) counts; its data_format (Keras's hint for reordering weights)
 * changes nothing else. */
static tpu_status map_flatten(kx *x, kcall *c)
{
    int t, cf;
    tpu_status st;
    if ((st = single_input(x, c)) || (st = cfg_format(x, c, &cf)))
        return st;
    if (krank_of(x, c->in[0]) == 1) {
        c->out = c->in[0];
        return TPU_OK;
    }
    if ((st = grow(x)))
        return st;
    int in_t = x->refs[c->in[0]].t;
    layer_begin(x, c->tname, GOP_FLATTEN, &in_t, 1);
    if ((st = emit(x, c, 1, &t)))
        return st;
    return new_ref(x, t, &c->out);
}

static tpu_status map_dropout(kx *x, kcall *c)
{
    const cJSON *j = get(c->cfg, "rate");
    char p[KERAS_PATH_MAX];
    int t;
    tpu_status st = single_input(x, c);
    if (st)
        return st;
    if ((st = check_format(x, c)))
        return st;
    kpath(p, c->path, ".config.rate");
    if (!cJSON_IsNumber(j) || !(j->valuedouble >= 0 && j->valuedouble < 1))
        return kfail(x, p, "expected a rate in [0, 1), found %s",
                     cJSON_IsNumber(j) ? "a number out of range" : jtype(j));
    if (j->valuedouble == 0) {
        c->out = c->in[0];
        return TPU_OK;
    }
    if ((st = grow(x)))
        return st;
    int in_t = x->refs[c->in[0]].t;
    glayer *L = layer_begin(x, c->tname, GOP_DROPOUT, &in_t, 1);
    L->rate = j->valuedouble;
    if ((st = emit(x, c, krank_of(x, c->in[0]), &t)))
        return st;
    return new_ref(x, t, &c->out);
}

/* Whether call c's inputs all have one shape. */
static int same_shapes(const kx *x, const kcall *c)
{
    const gshape *a = shape_of(x, c->in[0]);
    for (int k = 1; k < c->n_in; k++) {
        const gshape *b = shape_of(x, c->in[k]);
        if (b->nsp != a->nsp || b->c != a->c)
            return 0;
        for (int d = 0; d < a->nsp; d++)
            if (b->sp[d] != a->sp[d])
                return 0;
    }
    return 1;
}

static tpu_status map_ew(kx *x, kcall *c);

/* A merge's inputs are in one layout.  A flat operand ([C]) broadcasts
 * along Keras's last axis, which on a channels-first tensor is a spatial
 * one (channels-first models reshape their gates to (C, 1, 1)). */
static tpu_status merge_layouts(kx *x, kcall *c)
{
    int lay = -1, first = -1, flat = -1;
    char b[64], b2[64], b3[64];
    for (int k = 0; k < c->n_in; k++) {
        int r = c->in[k];
        if (krank_of(x, r) < 2) {
            flat = flat < 0 ? k : flat;
            continue;
        }
        if (lay < 0) {
            lay = x->refs[r].cf;
            first = k;
        } else if (x->refs[r].cf != lay) {
            return kfail(x, c->path, "'%s' (%s) joins '%s', a %s tensor, "
                         "and '%s', a %s one: one of them is read in the "
                         "wrong layout",
                         kshown(b, sizeof b, c->kname), c->cls,
                         kshown(b2, sizeof b2,
                                x->g.layers[x->refs[c->in[first]].t].name),
                         layout_name(lay),
                         kshown(b3, sizeof b3, x->g.layers[x->refs[r].t].name),
                         layout_name(!lay));
        }
    }
    if (lay == 1 && flat >= 0)
        return kfail(x, c->path, "'%s' (%s): the flat operand '%s' broadcasts "
                     "along the last axis of the channels_first tensor '%s', "
                     "a spatial one, not its channels (Reshape it to (C, 1, "
                     "1) to scale the channels)",
                     kshown(b, sizeof b, c->kname), c->cls,
                     kshown(b2, sizeof b2,
                            x->g.layers[x->refs[c->in[flat]].t].name),
                     kshown(b3, sizeof b3,
                            x->g.layers[x->refs[c->in[first]].t].name));
    return TPU_OK;
}

/* Add (arg 0) and Concatenate (arg 1).  An Add whose operands broadcast
 * (a per-position gate [H,W,1], a per-channel [1,1,C]) is the trace's
 * elementwise add; the trace's add takes identical shapes. */
static tpu_status map_merge(kx *x, kcall *c)
{
    int t, in_t[GRAPH_MAX_IN];
    tpu_status st;
    char b[64];
    if (c->n_in < 2 || c->n_in > GRAPH_MAX_IN)
        return kfail(x, c->path, "'%s' (%s) has %d inputs; the trace's %s "
                     "takes 2 to %d", kshown(b, sizeof b, c->kname), c->cls,
                     c->n_in, c->arg ? "concat" : "add", GRAPH_MAX_IN);
    if ((st = merge_layouts(x, c)) || (c->arg && (st = channel_axis(x, c, 1))))
        return st;
    if (!c->arg && !same_shapes(x, c)) {
        c->arg = GEW_ADD;
        if ((st = map_ew(x, c)))
            return st;
        return cfg_act(x, c);
    }
    if ((st = grow(x)))
        return st;
    for (int k = 0; k < c->n_in; k++)
        in_t[k] = x->refs[c->in[k]].t;
    layer_begin(x, c->tname, c->arg ? GOP_CONCAT : GOP_ADD, in_t, c->n_in);
    if ((st = emit(x, c, krank_of(x, c->in[0]), &t)))
        return st;
    if ((st = new_ref(x, t, &c->out)))
        return st;
    return c->arg ? TPU_OK : cfg_act(x, c);
}

static const char *check_nearest(const cJSON *cfg, char *buf, size_t cap)
{
    const char *s = get_str(cfg, "interpolation");
    if (s && strcmp(s, "nearest") != 0 && strcmp(s, "bilinear") != 0) {
        snprintf(buf, cap, "interpolation '%.40s'", s);
        return buf;
    }
    return NULL;
}

static tpu_status map_upsample(kx *x, kcall *c)
{
    int dims = c->arg, f[3], t;
    tpu_status st;
    if ((st = single_input(x, c)) || (st = need_rank(x, c, dims)) ||
        (st = check_format(x, c)) ||
        (st = cfg_dims(x, c, dims == 1 ? "size" : "size", dims, 2, f)) ||
        (st = grow(x)))
        return st;
    int nsp = dims == 1 ? 2 : dims, in_t = x->refs[c->in[0]].t;
    const char *ip = get_str(c->cfg, "interpolation");
    int bilinear = ip && strcmp(ip, "bilinear") == 0;
    glayer *L = layer_begin(x, c->tname, bilinear ? GOP_RESIZE : GOP_UPSAMPLE,
                            &in_t, 1);
    for (int d = 0; d < nsp; d++)
        L->factor[d] = f[d];
    if ((st = emit(x, c, dims + 1, &t)))
        return st;
    return new_ref(x, t, &c->out);
}

/* LeakyReLU (arg 0: alpha, Keras 2's key, or negative_slope, Keras 3's;
 * 0.3 by default), ELU (arg 1: alpha, 1 by default). */
static tpu_status map_leaky_elu(kx *x, kcall *c)
{
    double a;
    tpu_status st = single_input(x, c);
    if (st)
        return st;
    if (c->arg == 0) {
        if ((st = cfg_num(x, c, "alpha", 0.3, &a)) ||
            (get(c->cfg, "negative_slope") &&
             (st = cfg_num(x, c, "negative_slope", 0.3, &a))))
            return st;
    } else if ((st = cfg_num(x, c, "alpha", 1.0, &a))) {
        return st;
    }
    c->out = c->in[0];
    return activation_layer(x, c, c->arg ? GACT_ELU : GACT_LEAKY_RELU, a, 0,
                            NULL);
}

/* PReLU: one slope per channel, so shared_axes must list every spatial
 * axis (Keras's default, none shared, gives a slope per element, which the
 * trace's prelu does not count). */
static tpu_status map_prelu(kx *x, kcall *c)
{
    tpu_status st = single_input(x, c);
    int kr = krank_of(x, c->in[0]) - 1, seen[4] = {0, 0, 0, 0}, n = 0;
    if (st)
        return st;
    char b[64];
    /* share_weights does not reach an activation: a second call would
     * count the slopes again */
    if (c->seen->calls > 1)
        return kfail(x, c->path, "'%s' (PReLU) is called %d times: the "
                     "trace shares weights between convolutions, dense and "
                     "normalisation layers only (share_weights), so its "
                     "slopes would be counted once a call",
                     kshown(b, sizeof b, c->kname), c->seen->calls);
    /* the spatial axes: 1 .. kr channels-last, 2 .. kr + 1 channels-first */
    int lo = is_cf(x, c->in[0]) ? 2 : 1;
    const cJSON *sa = get(c->cfg, "shared_axes");
    for (const cJSON *e = cJSON_IsArray(sa) ? sa->child : NULL; e;
         e = e->next)
        if (cJSON_IsNumber(e) && e->valuedouble >= lo &&
            e->valuedouble < lo + kr && !seen[(int)e->valuedouble - lo]++)
            n++;
    if (kr > 0 && n != kr) {
        char p[KERAS_PATH_MAX];
        snprintf(p, sizeof p, "%s.config.shared_axes", c->path);
        return kfail(x, p, "'%s' (PReLU) learns a slope per element; the "
                     "trace's prelu has one per channel: shared_axes must "
                     "list every spatial axis (%d to %d)",
                     kshown(b, sizeof b, c->kname), lo, lo + kr - 1);
    }
    c->out = c->in[0];
    int t0 = x->g.n_layers;
    if ((st = activation_layer(x, c, GACT_PRELU, 0, 0, NULL)))
        return st;
    int tr = 1;
    if ((st = cfg_bool(x, c, "trainable", 1, &tr)))
        return st;
    x->g.layers[t0].frozen = c->frozen || !tr;
    return TPU_OK;
}

/* Activation with a kind only the trace's activation op has: the name
 * is looked up in keras_acts (via cfg_act). */

/* Multiply, Subtract, Maximum, Minimum, Average (arg: graph_ew). */
static tpu_status map_ew(kx *x, kcall *c)
{
    int t, in_t[GRAPH_MAX_IN];
    tpu_status st;
    char b[64];
    if (c->n_in < 2 || c->n_in > GRAPH_MAX_IN)
        return kfail(x, c->path, "'%s' (%s) has %d inputs; the trace's "
                     "elementwise takes 2 to %d",
                     kshown(b, sizeof b, c->kname), c->cls, c->n_in,
                     GRAPH_MAX_IN);
    if ((st = merge_layouts(x, c)) || (st = grow(x)))
        return st;
    for (int k = 0; k < c->n_in; k++)
        in_t[k] = x->refs[c->in[k]].t;
    int kr = krank_of(x, c->in[0]);
    for (int k = 1; k < c->n_in; k++)
        if (gshape_elems(shape_of(x, c->in[k])) >
            gshape_elems(shape_of(x, c->in[0])))
            kr = krank_of(x, c->in[k]);
    glayer *L = layer_begin(x, c->tname, GOP_ELEMWISE, in_t, c->n_in);
    L->kind = c->arg;
    if ((st = emit(x, c, kr, &t)))
        return st;
    return new_ref(x, t, &c->out);
}

/* Rescaling (x * scale + offset) is folded into the reader of its
 * output, as XLA fuses it: no layer, no parameters (Keras counts none). */
static tpu_status map_folded(kx *x, kcall *c)
{
    tpu_status st = single_input(x, c);
    if (!st)
        c->out = c->in[0];
    return st;
}

/* LayerNormalization (arg GOP_LAYERNORM), GroupNormalization
 * (GOP_GROUPNORM: groups, 32 by default) and the Normalization
 * preprocessing layer (GOP_NORMALIZE), each on the channel axis. */
static tpu_status map_norm(kx *x, kcall *c)
{
    int t, center = 1, scale = 1;
    int64_t groups = 32;
    tpu_status st;
    if ((st = single_input(x, c)) || (st = channel_axis(x, c, 1)) ||
        (st = cfg_bool(x, c, "center", 1, &center)) ||
        (st = cfg_bool(x, c, "scale", 1, &scale)) || (st = grow(x)))
        return st;
    if (c->arg == GOP_GROUPNORM &&
        (st = cfg_int(x, c, "groups", 1, GRAPH_DIM_MAX, 32, &groups)))
        return st;
    int in_t = x->refs[c->in[0]].t;
    glayer *L = layer_begin(x, c->tname, (graph_op)c->arg, &in_t, 1);
    L->groups = (int)groups;
    if (c->arg != GOP_NORMALIZE) {
        L->no_scale = !scale;
        L->no_center = !center;
    }
    if ((st = weights_of(x, c, L, 0)))
        return st;
    if (c->arg == GOP_NORMALIZE) /* adapted, never trained */
        L->frozen = 1;
    if ((st = emit(x, c, krank_of(x, c->in[0]), &t)))
        return st;
    weights_done(c, 0, t);
    return new_ref(x, t, &c->out);
}

/* One entry of ZeroPadding's padding or Cropping's cropping: n for both
 * ends, or [lo, hi]. */
static int pad_entry(const cJSON *e, int *lo, int *hi)
{
    if (is_int(e, 0, GRAPH_DIM_MAX)) {
        *lo = *hi = (int)e->valuedouble;
        return 1;
    }
    if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) != 2 ||
        !is_int(cJSON_GetArrayItem(e, 0), 0, GRAPH_DIM_MAX) ||
        !is_int(cJSON_GetArrayItem(e, 1), 0, GRAPH_DIM_MAX))
        return 0;
    *lo = (int)cJSON_GetArrayItem(e, 0)->valuedouble;
    *hi = (int)cJSON_GetArrayItem(e, 1)->valuedouble;
    return 1;
}

/* ZeroPadding1D/2D/3D (arg: dims) and Cropping1D/2D/3D (10 + dims):
 * padding / cropping is n, a list of dims entries (each n or [lo, hi]),
 * or for 1D [lo, hi]. */
static tpu_status map_pad(kx *x, kcall *c)
{
    int dims = c->arg % 10, crop = c->arg >= 10, t;
    int lo[3] = {0, 0, 0}, hi[3] = {0, 0, 0}, ok = 1;
    const char *key = crop ? "cropping" : "padding";
    char p[KERAS_PATH_MAX];
    tpu_status st;
    if ((st = single_input(x, c)) || (st = need_rank(x, c, dims)) ||
        (st = check_format(x, c)) || (st = grow(x)))
        return st;
    const cJSON *j = get(c->cfg, key);
    kpath(p, c->path, ".config.%s", key);
    if (j && is_int(j, 0, GRAPH_DIM_MAX)) {
        for (int d = 0; d < dims; d++)
            lo[d] = hi[d] = (int)j->valuedouble;
    } else if (dims == 1 && j) {
        ok = pad_entry(j, &lo[0], &hi[0]);
    } else if (j && cJSON_IsArray(j) && cJSON_GetArraySize(j) == dims) {
        for (int d = 0; d < dims && ok; d++)
            ok = pad_entry(cJSON_GetArrayItem(j, d), &lo[d], &hi[d]);
    } else {
        ok = 0;
    }
    if (!ok)
        return kfail(x, p, "expected an integer or %d entries (each an "
                     "integer or [lo, hi]), found %s", dims, jtype(j));
    int in_t = x->refs[c->in[0]].t, sg = crop ? -1 : 1;
    glayer *L = layer_begin(x, c->tname, crop ? GOP_CROP : GOP_PAD, &in_t, 1);
    /* a 1D layer is the trace's 2D one of height 1 */
    for (int d = 0; d < dims; d++) {
        L->pad_lo[d + (dims == 1)] = sg * lo[d];
        L->pad_hi[d + (dims == 1)] = sg * hi[d];
    }
    if ((st = emit(x, c, dims + 1, &t)))
        return st;
    return new_ref(x, t, &c->out);
}

/* GlobalMaxPooling1D/2D/3D (arg: dims). */
static tpu_status map_gmax(kx *x, kcall *c)
{
    return map_global_pool(x, c, GOP_GMAXPOOL);
}

/* Reshape: target_shape (one -1 inferred) as the trace's shape; a flat
 * target is a flatten, the input's own shape nothing; a 2-entry target
 * (Keras's steps, channels) is the trace's [1, steps, channels]. */
static tpu_status map_reshape(kx *x, kcall *c)
{
    const cJSON *j = get(c->cfg, "target_shape");
    char p[KERAS_PATH_MAX];
    int64_t v[4], known = 1, elems;
    int n = 0, free_at = -1, t;
    tpu_status st;
    if ((st = single_input(x, c)) || (st = grow(x)))
        return st;
    kpath(p, c->path, ".config.target_shape");
    elems = gshape_elems(shape_of(x, c->in[0]));
    if (!j || !cJSON_IsArray(j) || cJSON_GetArraySize(j) < 1 ||
        cJSON_GetArraySize(j) > 4)
        return kfail(x, p, "expected a list of 1 to 4 integers, found %s",
                     jtype(j));
    for (const cJSON *e = j->child; e; e = e->next, n++) {
        if (is_int(e, -1, -1) && free_at < 0) {
            free_at = n;
            v[n] = 1;
            continue;
        }
        if (!is_int(e, 1, GRAPH_DIM_MAX))
            return kfail(x, p, "expected positive integers and at most one "
                         "-1");
        v[n] = (int64_t)e->valuedouble;
        known *= v[n];
    }
    if (free_at >= 0 && elems % known == 0)
        v[free_at] = elems / known;
    int in_t = x->refs[c->in[0]].t;
    if (n == 1) {
        if (krank_of(x, c->in[0]) == 1 && v[0] == elems) {
            c->out = c->in[0];
            return TPU_OK;
        }
        layer_begin(x, c->tname, GOP_FLATTEN, &in_t, 1);
        if (v[0] != elems)
            return kfail(x, p, "%lld elements, the input has %lld",
                         (long long)v[0], (long long)elems);
        if ((st = emit(x, c, 1, &t)))
            return st;
        return new_ref(x, t, &c->out);
    }
    /* A channels-first result ([C, spatial...]) is the trace's [spatial...,
     * C]: from a channels-first tensor when the channels stay the first
     * axis, from a flat one in a channels-first model (or, in a model of
     * both layouts, a (C, 1, 1) gate). */
    int out_cf = is_cf(x, c->in[0]);
    char b[64];
    if (krank_of(x, c->in[0]) < 2) {
        int ones_after = 1, ones_before = 1;
        for (int d = 1; d < n; d++)
            ones_after &= v[d] == 1;
        for (int d = 0; d < n - 1; d++)
            ones_before &= v[d] == 1;
        out_cf = x->fmt == KERAS_CF;
        if (x->fmt == KERAS_MIXED) {
            if (ones_after == ones_before)
                return kfail(x, p, "a flat tensor into %d axes in a model "
                             "whose layers are channels_first and "
                             "channels_last: which axis holds the channels "
                             "is not clear", n);
            out_cf = ones_after;
        }
    } else if (out_cf && v[0] != shape_of(x, c->in[0])->c) {
        return kfail(x, p, "'%s' is channels_first with %lld channels; a "
                     "target of %lld first moves elements across the channel "
                     "axis (the trace reshapes the positions and keeps the "
                     "channels)",
                     kshown(b, sizeof b,
                            x->g.layers[x->refs[c->in[0]].t].name),
                     (long long)shape_of(x, c->in[0])->c, (long long)v[0]);
    }
    if (out_cf) {
        int64_t ch = v[0];
        for (int d = 0; d + 1 < n; d++)
            v[d] = v[d + 1];
        v[n - 1] = ch;
    }
    glayer *L = layer_begin(x, c->tname, GOP_RESHAPE, &in_t, 1);
    gshape *s = &L->target;
    s->nsp = n == 2 ? 2 : n - 1;
    s->c = v[n - 1];
    if (n == 2) {
        s->sp[0] = 1;
        s->sp[1] = v[0];
    } else {
        for (int d = 0; d < n - 1; d++)
            s->sp[d] = v[d];
    }
    if ((st = emit(x, c, n, &t)))
        return st;
    x->kcf[t] = out_cf;
    return new_ref(x, t, &c->out);
}

/* Permute: the trace has no transpose, but a permutation that only moves
 * the channel axis (channels-first to channels-last, (2, 3, 1), or back,
 * (3, 1, 2); (2, 1) for a sequence) changes the layout Keras reads the
 * tensor in, not the tensor: no layer, the same trace tensor. */
static const char *check_permute(const cJSON *cfg, char *buf, size_t cap)
{
    const cJSON *j = get(cfg, "dims");
    int n = cJSON_GetArraySize(j), first = 1, last = 1, k = 0;
    const cJSON *e;
    for (e = cJSON_IsArray(j) ? j->child : NULL; e; e = e->next) {
        int v = cJSON_IsNumber(e) ? (int)e->valuedouble : 0;
        k++;
        first &= v == (k < n ? k + 1 : 1); /* 2, 3, ..., 1 */
        last &= v == (k == 1 ? n : k - 1); /* n, 1, ..., n - 1 */
    }
    if (cJSON_IsArray(j) && n >= 2 && n <= 4 && (first || last))
        return NULL;
    char *t = cJSON_PrintUnformatted(j);
    snprintf(buf, cap, "dims=%.40s", t ? t : "?");
    free(t);
    return buf;
}

static tpu_status map_permute(kx *x, kcall *c)
{
    const cJSON *j = get(c->cfg, "dims");
    int n = cJSON_GetArraySize(j), kr = krank_of(x, c->in[0]);
    char p[KERAS_PATH_MAX], b[64];
    tpu_status st = single_input(x, c);
    if (st)
        return st;
    kpath(p, c->path, ".config.dims");
    /* check_permute let through a move of the first or the last axis */
    int to_last = n == 2 ||
                  (int)cJSON_GetArrayItem(j, n - 1)->valuedouble == 1;
    int cf = x->refs[c->in[0]].cf;
    if (n != kr)
        return kfail(x, p, "%d axes for '%s', a tensor of rank %d", n,
                     kshown(b, sizeof b,
                            x->g.layers[x->refs[c->in[0]].t].name),
                     kr + 1);
    if (n > 2 && to_last != cf)
        return kfail(x, p, "'%s' is %s: this permutation moves its %s axis, "
                     "not the channels, and the trace has no transpose",
                     kshown(b, sizeof b,
                            x->g.layers[x->refs[c->in[0]].t].name),
                     layout_name(cf), to_last ? "first (spatial)" :
                                                "last (spatial)");
    if ((st = new_ref(x, x->refs[c->in[0]].t, &c->out)))
        return st;
    x->refs[c->out].cf = !cf;
    return TPU_OK;
}

static tpu_status map_model(kx *x, kcall *c);

/* Every Keras class the trace format can express.  Adding a class is
 * adding a row: the function emits its trace layers, the optional check
 * names the configurations it cannot express (listed with the unmapped
 * classes before anything is built). */
static const keras_class keras_classes[] = {
    {"InputLayer", map_identity, NULL, 0},
    {"Conv1D", map_conv, NULL, 1},
    {"Conv2D", map_conv, NULL, 2},
    {"Conv3D", map_conv, NULL, 3},
    {"Convolution1D", map_conv, NULL, 1},
    {"Convolution2D", map_conv, NULL, 2},
    {"Convolution3D", map_conv, NULL, 3},
    {"DepthwiseConv1D", map_conv, NULL, 11},
    {"DepthwiseConv2D", map_conv, NULL, 12},
    {"SeparableConv1D", map_conv, NULL, 21},
    {"SeparableConv2D", map_conv, NULL, 22},
    {"Conv1DTranspose", map_conv_t, NULL, 1},
    {"Conv2DTranspose", map_conv_t, NULL, 2},
    {"Conv3DTranspose", map_conv_t, NULL, 3},
    {"Dense", map_dense, NULL, 0},
    {"BatchNormalization", map_batchnorm, NULL, 0},
    {"Activation", map_activation, NULL, 0},
    {"ReLU", map_relu, check_relu, 0},
    {"Softmax", map_softmax, NULL, 0},
    {"MaxPooling1D", map_pool, NULL, 1},
    {"MaxPooling2D", map_pool, NULL, 2},
    {"MaxPooling3D", map_pool, NULL, 3},
    {"MaxPool1D", map_pool, NULL, 1},
    {"MaxPool2D", map_pool, NULL, 2},
    {"MaxPool3D", map_pool, NULL, 3},
    {"AveragePooling1D", map_pool, NULL, 11},
    {"AveragePooling2D", map_pool, NULL, 12},
    {"AveragePooling3D", map_pool, NULL, 13},
    {"AvgPool1D", map_pool, NULL, 11},
    {"AvgPool2D", map_pool, NULL, 12},
    {"AvgPool3D", map_pool, NULL, 13},
    {"GlobalAveragePooling1D", map_gap, check_keepdims, 1},
    {"GlobalAveragePooling2D", map_gap, check_keepdims, 2},
    {"GlobalAveragePooling3D", map_gap, check_keepdims, 3},
    {"GlobalAvgPool1D", map_gap, check_keepdims, 1},
    {"GlobalAvgPool2D", map_gap, check_keepdims, 2},
    {"GlobalAvgPool3D", map_gap, check_keepdims, 3},
    {"Flatten", map_flatten, NULL, 0},
    {"Dropout", map_dropout, NULL, 0},
    {"SpatialDropout1D", map_dropout, NULL, 0},
    {"SpatialDropout2D", map_dropout, NULL, 0},
    {"SpatialDropout3D", map_dropout, NULL, 0},
    {"Add", map_merge, NULL, 0},
    {"Concatenate", map_merge, NULL, 1},
    {"UpSampling1D", map_upsample, NULL, 1},
    {"UpSampling2D", map_upsample, check_nearest, 2},
    {"UpSampling3D", map_upsample, NULL, 3},
    {"LeakyReLU", map_leaky_elu, NULL, 0},
    {"ELU", map_leaky_elu, NULL, 1},
    {"PReLU", map_prelu, NULL, 0},
    {"Multiply", map_ew, NULL, GEW_MULTIPLY},
    {"Subtract", map_ew, NULL, GEW_SUBTRACT},
    {"Maximum", map_ew, NULL, GEW_MAXIMUM},
    {"Minimum", map_ew, NULL, GEW_MINIMUM},
    {"Average", map_ew, NULL, GEW_AVERAGE},
    {"Rescaling", map_folded, NULL, 0},
    {"LayerNormalization", map_norm, NULL, GOP_LAYERNORM},
    {"GroupNormalization", map_norm, NULL, GOP_GROUPNORM},
    {"Normalization", map_norm, NULL, GOP_NORMALIZE},
    {"ZeroPadding1D", map_pad, NULL, 1},
    {"ZeroPadding2D", map_pad, NULL, 2},
    {"ZeroPadding3D", map_pad, NULL, 3},
    {"Cropping1D", map_pad, NULL, 11},
    {"Cropping2D", map_pad, NULL, 12},
    {"Cropping3D", map_pad, NULL, 13},
    {"GlobalMaxPooling1D", map_gmax, check_keepdims, 1},
    {"GlobalMaxPooling2D", map_gmax, check_keepdims, 2},
    {"GlobalMaxPooling3D", map_gmax, check_keepdims, 3},
    {"GlobalMaxPool1D", map_gmax, check_keepdims, 1},
    {"GlobalMaxPool2D", map_gmax, check_keepdims, 2},
    {"GlobalMaxPool3D", map_gmax, check_keepdims, 3},
    {"Reshape", map_reshape, NULL, 0},
    {"Permute", map_permute, check_permute, 0},
    {"Sequential", map_model, NULL, 0},
    {"Functional", map_model, NULL, 0},
    {"Model", map_model, NULL, 0},
};

static const keras_class *class_find(const char *cls)
{
    for (size_t i = 0; cls && i < sizeof keras_classes /
                                      sizeof keras_classes[0];
         i++)
        if (strcmp(keras_classes[i].cls, cls) == 0)
            return &keras_classes[i];
    return NULL;
}

static int is_model_class(const char *cls)
{
    return cls && (strcmp(cls, "Sequential") == 0 ||
                   strcmp(cls, "Functional") == 0 ||
                   strcmp(cls, "Model") == 0);
}

/* ---- the unmapped classes, all at once --------------------------------- */

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

static void scan_add(keras_scan *s, const char *key, const char *label,
                     const char *path, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->u[i].key, key) == 0 &&
            strcmp(s->u[i].label, label) == 0) {
            s->u[i].count++;
            return;
        }
    if (s->n == KERAS_UNMAPPED_MAX) {
        s->more++;
        return;
    }
    keras_unmapped *u = &s->u[s->n++];
    kshown(u->key, sizeof u->key, key);
    /* a class name from the file may hold control characters: the
     * message is one line */
    snprintf(u->label, sizeof u->label, "%s", label);
    for (char *q = u->label; *q; q++)
        if ((unsigned char)*q < 0x20 || *q == 0x7f)
            *q = '?';
    snprintf(u->first, sizeof u->first, "%s", path);
    kshown(u->first_name, sizeof u->first_name, name);
    u->count = 1;
}

static const cJSON *model_layers(const cJSON *model, char *lpath,
                                 const char *path);

/* Walks every layer of the model (nested models included) and records
 * the ones that cannot be mapped and are not allowed through. */
static void scan_model(const kx *x, const cJSON *model, const char *path,
                       keras_scan *s, int depth)
{
    char lpath[KERAS_PATH_MAX];
    const cJSON *layers = model_layers(model, lpath, path);
    int i = 0;
    const cJSON *l;
    if (depth > KERAS_NEST_MAX || !layers)
        return;
    cJSON_ArrayForEach(l, layers)
    {
        char p[KERAS_PATH_MAX], lab[128], why[96];
        const char *cls = get_str(l, "class_name");
        const cJSON *cfg = get(l, "config");
        const char *name = get_str(l, "name");
        kpath(p, lpath, "[%d]", i++);
        if (!name)
            name = get_str(cfg, "name");
        if (!cls)
            continue; /* refused with its path when it is built */
        const keras_class *k = class_find(cls);
        if (is_model_class(cls)) {
            scan_model(x, l, p, s, depth + 1);
            continue;
        }
        if (!k) {
            if (!allowed(x, cls))
                scan_add(s, cls, cls, p, name);
            continue;
        }
        if (k->check && k->check(cfg, why, sizeof why) && !allowed(x, cls)) {
            snprintf(lab, sizeof lab, "%s(%s)", cls, why);
            scan_add(s, cls, lab, p, name);
        }
        const cJSON *aj = get(cfg, "activation");
        if (aj) {
            const char *a = act_name(aj);
            if (a && !act_find(a) && !allowed(x, a)) {
                char ap[KERAS_PATH_MAX];
                kpath(ap, p, ".config.activation");
                snprintf(lab, sizeof lab, "activation '%.60s'", a);
                scan_add(s, a, lab, ap, name);
            }
        }
    }
}

static tpu_status scan_fail(kx *x, const keras_scan *s)
{
    char list[700] = "";
    size_t n = 0;
    char b[64];
    for (int i = 0; i < s->n && n + 1 < sizeof list; i++) {
        int w = snprintf(list + n, sizeof list - n, "%s%s x%d", i ? ", " : "",
                         s->u[i].label, s->u[i].count);
        if (w < 0)
            break;
        n += (size_t)w;
    }
    if (n >= sizeof list)
        snprintf(list + sizeof list - 5, 5, "...");
    return kfail(x, s->u[0].first,
                 "layer '%s' (%s) has no trace equivalent; the file's "
                 "unmapped classes: %s%s (--allow-identity %s passes a "
                 "class through unchanged)",
                 s->u[0].first_name, s->u[0].label, list,
                 s->more ? ", and more" : "", kshown(b, sizeof b, s->u[0].key));
}

/* ---- models ------------------------------------------------------------ */

/* The list of layers of a model object ({"class_name", "config"}): its
 * config's "layers", or the config itself in old Keras 2 Sequential files
 * (a list); lpath gets its JSON path. */
static const cJSON *model_layers(const cJSON *model, char *lpath,
                                 const char *path)
{
    const cJSON *cfg = get(model, "config");
    if (cJSON_IsArray(cfg)) {
        kpath(lpath, path, ".config");
        return cfg;
    }
    kpath(lpath, path, ".config.layers");
    const cJSON *l = get(cfg, "layers");
    return cJSON_IsArray(l) ? l : NULL;
}

static const char *layer_name(const cJSON *l)
{
    const char *n = get_str(l, "name");
    return n ? n : get_str(get(l, "config"), "name");
}

/* ---- layouts ----------------------------------------------------------- */

/* Counts the layers of model (nested models too) that say channels_first
 * and channels_last.  Flatten's data_format is left out: it only tells
 * Keras how to order a Dense's weights, and a channels-first model may
 * well keep Keras's default on it. */
static void count_formats(const cJSON *model, int depth, int *n_cf,
                          int *n_cl)
{
    char lp[KERAS_PATH_MAX];
    const cJSON *layers = model_layers(model, lp, "");
    const cJSON *l;
    if (depth > KERAS_NEST_MAX || !layers)
        return;
    cJSON_ArrayForEach(l, layers)
    {
        const char *cls = get_str(l, "class_name");
        const char *f = get_str(get(l, "config"), "data_format");
        if (cls && is_model_class(cls)) {
            count_formats(l, depth + 1, n_cf, n_cl);
            continue;
        }
        if (!f || (cls && strcmp(cls, "Flatten") == 0))
            continue;
        if (strcmp(f, "channels_first") == 0)
            (*n_cf)++;
        else if (strcmp(f, "channels_last") == 0)
            (*n_cl)++;
    }
}

/* The layout layer l says it reads its input in: 1 channels_first, 0
 * channels_last, -1 when it says none (a nested model: its layers', when
 * they agree). */
static int layer_format(const cJSON *l)
{
    const char *cls = get_str(l, "class_name");
    if (cls && is_model_class(cls)) {
        int a = 0, b = 0;
        count_formats(l, 1, &a, &b);
        return a && !b ? 1 : b && !a ? 0 : -1;
    }
    const char *f = get_str(get(l, "config"), "data_format");
    if (!f || (cls && strcmp(cls, "Flatten") == 0))
        return -1;
    return strcmp(f, "channels_first") == 0  ? 1
           : strcmp(f, "channels_last") == 0 ? 0
                                             : -1;
}

/* Whether the inbound nodes j (any of Keras's forms) read layer `name`:
 * a reference is a list whose first entry is the layer's name (Keras 2's
 * [name, node, tensor, kwargs], Keras 3's keras_history). */
static int mentions(const cJSON *j, const char *name)
{
    if (cJSON_IsArray(j) && cJSON_IsString(j->child) &&
        strcmp(j->child->valuestring, name) == 0)
        return 1;
    for (const cJSON *e = cJSON_IsArray(j) || cJSON_IsObject(j) ? j->child
                                                                : NULL;
         e; e = e->next)
        if (mentions(e, name))
            return 1;
    return 0;
}

/* The layout a Functional model's layers read the output of layer `name`
 * in: the data_format of the first layer reading it, directly or through
 * layers that have none (breadth first, in file order); -1 when no such
 * layer says, -2 out of memory. */
static int reader_format(const cJSON *layers, const char *name)
{
    int n = cJSON_GetArraySize(layers), head = 0, tail = 0, res = -1;
    const char **q = malloc((size_t)(n + 1) * sizeof *q);
    char *seen = calloc((size_t)(n + 1), 1);
    if (!q || !seen) {
        free(q);
        free(seen);
        return -2;
    }
    q[tail++] = name;
    while (head < tail && res < 0) {
        const char *nm = q[head++];
        const cJSON *l;
        int i = 0;
        cJSON_ArrayForEach(l, layers)
        {
            if (!seen[i] && mentions(get(l, "inbound_nodes"), nm)) {
                const char *ln = layer_name(l);
                seen[i] = 1;
                res = layer_format(l);
                if (res >= 0)
                    break;
                if (ln && tail <= n)
                    q[tail++] = ln;
            }
            i++;
        }
    }
    free(q);
    free(seen);
    return res;
}

/* A Sequential model's input layout: the first of its layers that says
 * one; -1 when none does. */
static int seq_format(const cJSON *layers)
{
    const cJSON *l;
    cJSON_ArrayForEach(l, layers)
    {
        int f = layer_format(l);
        if (f >= 0)
            return f;
    }
    return -1;
}

/* A new model input's layout from what its readers say (`said`, -1
 * none): else the model's own; -1 when the model has both and nothing
 * tells (make_input refuses an input with a layout then). */
static int input_format(const kx *x, int said)
{
    if (!x->any_cf)
        return 0;
    if (said >= 0)
        return said;
    return x->fmt == KERAS_MIXED ? -1 : x->fmt == KERAS_CF;
}

/* The batch shape a layer declares (InputLayer's batch_input_shape or
 * Keras 3's batch_shape; a first Sequential layer's batch_input_shape),
 * with its key's path. */
static const cJSON *declared_shape(const cJSON *l, const char *path,
                                   char *spath, int *has_batch)
{
    static const char *const keys[] = {"batch_input_shape", "batch_shape",
                                       "shape"};
    const cJSON *cfg = get(l, "config");
    for (int k = 0; k < 3; k++) {
        const cJSON *j = get(cfg, keys[k]);
        if (j && !cJSON_IsNull(j)) {
            kpath(spath, path, ".config.%s", keys[k]);
            *has_batch = k < 2;
            return j;
        }
    }
    return NULL;
}

/* Parses the per-example shape (Keras order, no batch) of a new model
 * input: from --input when given, else the file's; both in the input's
 * layout (cf: channels first). */
static tpu_status input_shape(kx *x, const cJSON *shape, int has_batch,
                              const char *spath, const char *name, int cf,
                              int64_t *dims, int *rank)
{
    char b[64];
    int n = 0;
    if (shape && !cJSON_IsArray(shape))
        return kfail(x, spath, "expected a list of dimensions, found %s",
                     jtype(shape));
    int fr = shape ? cJSON_GetArraySize(shape) - has_batch : -1;
    /* the entry of --input for this input */
    const char *in = x->o->input;
    for (int k = 0; in && k < x->n_inputs_given; k++) {
        in = strchr(in, ',');
        if (in)
            in++;
    }
    if (in && *in) {
        size_t len = strcspn(in, ",");
        const char *p = in;
        x->n_inputs_given++;
        while (p < in + len) {
            char *end;
            long long v = strtoll(p, &end, 10);
            if (end == p || v < 1 || v > GRAPH_DIM_MAX || n == 4 ||
                (end < in + len && *end != 'x'))
                return kfail(x, "--input", "'%.*s' is not a shape such as "
                             "224x224x3 (1 to 4 positive integers joined "
                             "by x, each at most %d)", (int)(len > 40 ? 40 :
                                                              len), in,
                             GRAPH_DIM_MAX);
            dims[n++] = v;
            p = end + (end < in + len);
        }
        if (fr >= 1 && n != fr)
            return kfail(x, "--input", "%d dimensions for input '%s', whose "
                         "shape has %d per example (%s): give one example's "
                         "shape, without the batch and %s", n,
                         kshown(b, sizeof b, name), fr,
                         cf ? "channels-first, as the model reads it"
                            : "channels-last",
                         n == fr + 1 ? "the batch seems included" : "Keras "
                         "order");
        *rank = n;
        return TPU_OK;
    }
    if (!shape)
        return kfail(x, spath[0] ? spath : NULL, "the model does not say "
                     "the shape of its input '%s': give --input, e.g. "
                     "--input 224x224x3", kshown(b, sizeof b, name));
    if (fr < 1 || fr > 4)
        return kfail(x, spath, "an input of rank %d per example; tpuemu "
                     "takes 1 (features) to 4 (depth, rows, cols, channels)",
                     fr);
    for (int k = 0; k < fr; k++) {
        const cJSON *e = cJSON_GetArrayItem(shape, k + has_batch);
        if (cJSON_IsNull(e))
            return kfail(x, spath, "dimension %d of input '%s' is not given "
                         "(None): the model runs at any size, so give one "
                         "with --input, e.g. --input %s", k + 1,
                         kshown(b, sizeof b, name),
                         fr == 3 ? "224x224x3" : fr == 4 ? "16x112x112x3"
                                                         : "1000x64");
        if (!is_int(e, 1, GRAPH_DIM_MAX))
            return kfail(x, spath, "dimension %d: expected a positive "
                         "integer (at most %d) or null, found %s", k + 1,
                         GRAPH_DIM_MAX, jtype(e));
        dims[k] = (int64_t)e->valuedouble;
    }
    *rank = fr;
    return TPU_OK;
}

/* A trace input for a model input; cf: the model reads it channels-first
 * (its Keras shape [C, spatial...] is the trace's [spatial..., C]). */
static tpu_status make_input(kx *x, const char *name, const cJSON *shape,
                             int has_batch, const char *spath, int cf,
                             int *ref)
{
    int64_t dims[4];
    int rank = 0;
    char tname[GRAPH_NAME_MAX];
    tpu_status st = input_shape(x, shape, has_batch, spath, name, cf > 0,
                                dims, &rank);
    if (st || (st = grow(x)))
        return st;
    if (cf < 0 && rank > 1) {
        char b[64];
        return kfail(x, spath[0] ? spath : NULL, "no layer reading input "
                     "'%s' says its data_format, and the model's layers are "
                     "channels_first and channels_last: its layout is not "
                     "clear", kshown(b, sizeof b, name));
    }
    cf = cf > 0 && rank > 1;
    if (cf) {
        int64_t ch = dims[0];
        for (int d = 0; d + 1 < rank; d++)
            dims[d] = dims[d + 1];
        dims[rank - 1] = ch;
    }
    unique_name(x, name && *name ? name : "input", NULL, tname);
    int i = x->g.n_layers;
    glayer *L = layer_begin(x, tname, GOP_INPUT, NULL, 0);
    /* A sequence (steps, channels) is a 2D tensor one row high: the trace
     * has no 1D rank, and a 1D window is a 2D one of height 1. */
    if (rank == 1) {
        L->out.nsp = 0;
        L->out.c = dims[0];
    } else {
        L->out.nsp = rank == 2 ? 2 : rank - 1;
        if (rank == 2) {
            L->out.sp[0] = 1;
            L->out.sp[1] = dims[0];
        } else {
            for (int d = 0; d < rank - 1; d++)
                L->out.sp[d] = dims[d];
        }
        L->out.c = dims[rank - 1];
    }
    tpu_error e;
    const char *key;
    if (graph_infer_layer(&x->g, i, &key, &e))
        return kfail(x, spath[0] ? spath : "--input", "%s", e.msg);
    cJSON *j = cJSON_CreateObject();
    cJSON *s = cJSON_CreateArray();
    if (!j || !s || !cJSON_AddItemToArray(x->inputs, j)) {
        cJSON_Delete(j);
        cJSON_Delete(s);
        return koom(x);
    }
    cJSON_AddStringToObject(j, "name", tname);
    int n = L->out.nsp;
    for (int d = 0; d < n; d++)
        cJSON_AddItemToArray(s, cJSON_CreateNumber((double)L->out.sp[d]));
    cJSON_AddItemToArray(s, cJSON_CreateNumber((double)L->out.c));
    cJSON_AddItemToObject(j, "shape", s);
    x->krank[i] = rank;
    x->kcf[i] = cf;
    x->g.n_layers++;
    x->g.n_inputs++;
    graph_index_add(&x->g, i);
    return new_ref(x, i, ref);
}

static keras_seen *seen_of(kx *x, const cJSON *obj)
{
    for (int i = 0; i < x->n_seen; i++)
        if (x->seen[i].obj == obj)
            return &x->seen[i];
    if (x->n_seen == x->cap_seen) {
        int cap = x->cap_seen ? 2 * x->cap_seen : 64;
        keras_seen *s = realloc(x->seen, (size_t)cap * sizeof *s);
        if (!s)
            return NULL;
        x->seen = s;
        x->cap_seen = cap;
    }
    keras_seen *s = &x->seen[x->n_seen++];
    memset(s, 0, sizeof *s);
    s->obj = obj;
    return s;
}

static tpu_status instantiate(kx *x, const cJSON *model, const char *path,
                              const char *prefix, const int *in, int n_in,
                              int frozen, int *out, int *n_out);

/* Calls layer object l (at path) on refs in[0..n_in). */
static tpu_status call_layer(kx *x, const cJSON *l, const char *path,
                             const char *prefix, const int *in, int n_in,
                             int frozen, int *out, int *n_out)
{
    kcall c;
    char b[64], p[KERAS_PATH_MAX];
    memset(&c, 0, sizeof c);
    c.obj = l;
    c.path = path;
    c.cls = get_str(l, "class_name");
    c.cfg = get(l, "config");
    c.kname = layer_name(l);
    c.in = in;
    c.n_in = n_in;
    c.frozen = frozen;
    if (!cJSON_IsObject(l))
        return kfail(x, path, "expected a layer object, found %s", jtype(l));
    if (!c.cls) {
        kpath(p, path, ".class_name");
        return kfail(x, p, "expected the layer's class name, found %s",
                     jtype(get(l, "class_name")));
    }
    if (!cJSON_IsObject(c.cfg) &&
        !(is_model_class(c.cls) && cJSON_IsArray(c.cfg))) {
        kpath(p, path, ".config");
        return kfail(x, p, "expected an object, found %s", jtype(c.cfg));
    }
    if (!c.kname)
        return kfail(x, path, "the layer has no name");
    if (!(c.seen = seen_of(x, l)))
        return koom(x);
    c.seen->calls++;
    {
        char base[512];
        snprintf(base, sizeof base, "%s%s", prefix, c.kname);
        if (c.seen->calls > 1) {
            char sfx[16];
            snprintf(sfx, sizeof sfx, "@%d", c.seen->calls - 1);
            unique_name(x, base, sfx, c.tname);
        } else {
            unique_name(x, base, NULL, c.tname);
        }
    }
    const keras_class *k = class_find(c.cls);
    char why[96];
    int pass = !k || (k->check && k->check(c.cfg, why, sizeof why));
    if (pass) {
        tpu_status st;
        if (!allowed(x, c.cls))
            return kfail(x, path, "layer '%s' (%s) has no trace equivalent",
                         kshown(b, sizeof b, c.kname), c.cls);
        if ((st = single_input(x, &c)) ||
            (st = passed_through(x, "layer", c.kname, c.cls, path)))
            return st;
        out[0] = in[0];
        *n_out = 1;
        return TPU_OK;
    }
    if (k->map == map_model) {
        int tr = 1;
        tpu_status st = cfg_bool(x, &c, "trainable", 1, &tr);
        char pre[512];
        if (st)
            return st;
        snprintf(pre, sizeof pre, "%s/", c.tname);
        return instantiate(x, l, path, pre, in, n_in, frozen || !tr, out,
                           n_out);
    }
    c.arg = k->arg;
    if (c.n_in < 1)
        return kfail(x, path, "'%s' (%s) has no input",
                     kshown(b, sizeof b, c.kname), c.cls);
    tpu_status st;
    for (int i = 0; i < c.n_in; i++)
        if (x->refs[c.in[i]].softmax && !allowed(x, "softmax") &&
            (st = softmax_read(x, c.in[i])))
            return st;
    st = k->map(x, &c);
    if (st)
        return st;
    out[0] = c.out;
    *n_out = 1;
    return TPU_OK;
}

static tpu_status map_model(kx *x, kcall *c)
{
    (void)c;
    return kfail(x, c->path, "internal: a model is instantiated, not mapped");
}

/* A Sequential model: its layers in order. */
static tpu_status run_sequential(kx *x, const cJSON *layers,
                                 const char *lpath, const char *prefix,
                                 const cJSON *model, const char *path,
                                 const int *in, int n_in, int frozen,
                                 int *out, int *n_out)
{
    int cur = -1, i = 0, n = 0, tmp[KERAS_OUTS_MAX];
    const cJSON *l;
    tpu_status st;
    char p[KERAS_PATH_MAX];
    if (in) {
        if (n_in != 1)
            return kfail(x, path, "a Sequential model called on %d tensors; "
                         "one expected", n_in);
        cur = in[0];
    }
    cJSON_ArrayForEach(l, layers)
    {
        const char *cls = get_str(l, "class_name");
        kpath(p, lpath, "[%d]", i++);
        if (cur < 0) {
            /* the model's input: an InputLayer, the first layer's
             * declared shape, or the model's build_input_shape */
            char spath[KERAS_PATH_MAX] = "";
            int hb = 1;
            const cJSON *sh = declared_shape(l, p, spath, &hb);
            if (!sh && cls && is_model_class(cls)) {
                char ilp[KERAS_PATH_MAX];
                const cJSON *il = model_layers(l, ilp, p);
                const cJSON *f = il ? cJSON_GetArrayItem(il, 0) : NULL;
                if (f) {
                    kpath(p, ilp, "[0]");
                    sh = declared_shape(f, p, spath, &hb);
                    kpath(p, lpath, "[%d]", i - 1);
                }
            }
            if (!sh) {
                const cJSON *bis = get(get(model, "config"),
                                       "build_input_shape");
                if (bis && !cJSON_IsNull(bis)) {
                    sh = bis;
                    kpath(spath, path, ".config.build_input_shape");
                }
            }
            const char *nm = cls && strcmp(cls, "InputLayer") == 0
                                 ? layer_name(l)
                                 : "input";
            int cf = input_format(x, x->any_cf ? seq_format(layers) : -1);
            if ((st = make_input(x, nm, sh, hb, spath, cf, &cur)))
                return st;
            if (cls && strcmp(cls, "InputLayer") == 0)
                continue;
        } else if (cls && strcmp(cls, "InputLayer") == 0) {
            continue;
        }
        if ((st = call_layer(x, l, p, prefix, &cur, 1, frozen, tmp, &n)))
            return st;
        if (n != 1)
            return kfail(x, p, "a layer of a Sequential model gives %d "
                         "tensors; one expected", n);
        cur = tmp[0];
    }
    if (cur < 0)
        return kfail(x, lpath, "the model has no layers");
    out[0] = cur;
    *n_out = 1;
    return TPU_OK;
}

/* One layer of a Functional model while it is instantiated. */
typedef struct {
    const cJSON *obj;
    const char *name;
    const cJSON *nodes;          /* inbound_nodes (a list) */
    int n_nodes, done, offset;
    int n_outs;                  /* per node */
    int *outs;                   /* n_nodes x n_outs refs */
    int is_input;
} kfl;

static int is_keras_tensor(const cJSON *e)
{
    const char *c = get_str(e, "class_name");
    return c && strcmp(c, "__keras_tensor__") == 0;
}

/* One tensor reference [name, node, tensor(, kwargs)] or Keras 3's
 * {"class_name": "__keras_tensor__", "config": {"keras_history": [...]}}:
 * its ref, or -1 when its layer has not produced it yet (*st set on an
 * error). */
static int resolve(kx *x, kfl *fl, int n, const cJSON *e, const char *p,
                   tpu_status *st)
{
    char b[64];
    *st = TPU_OK;
    if (cJSON_IsObject(e))
        e = get(get(e, "config"), "keras_history");
    if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) < 3 ||
        !cJSON_IsString(cJSON_GetArrayItem(e, 0)) ||
        !is_int(cJSON_GetArrayItem(e, 1), 0, 1 << 20) ||
        !is_int(cJSON_GetArrayItem(e, 2), 0, 1 << 20)) {
        *st = kfail(x, p, "expected a tensor reference [layer name, node "
                    "index, tensor index], found %s", jtype(e));
        return -1;
    }
    const char *name = cJSON_GetArrayItem(e, 0)->valuestring;
    int node = (int)cJSON_GetArrayItem(e, 1)->valuedouble;
    int ti = (int)cJSON_GetArrayItem(e, 2)->valuedouble;
    for (int k = 0; k < n; k++) {
        kfl *f = &fl[k];
        if (strcmp(f->name, name) != 0)
            continue;
        int idx = node - f->offset;
        /* a model with one call is its node whichever way the writer
         * counted its own first node */
        if (f->n_nodes == 1 && (node == 0 || node == 1))
            idx = 0;
        if (idx < 0 || idx >= f->n_nodes) {
            *st = kfail(x, p, "layer '%s' has no node %d",
                        kshown(b, sizeof b, name), node);
            return -1;
        }
        if (idx >= f->done)
            return -1;
        if (ti >= f->n_outs || f->outs[idx * f->n_outs + ti] < 0) {
            *st = kfail(x, p, "layer '%s' gives no tensor %d",
                        kshown(b, sizeof b, name), ti);
            return -1;
        }
        return f->outs[idx * f->n_outs + ti];
    }
    *st = kfail(x, p, "no layer named '%s' in this model",
                kshown(b, sizeof b, name));
    return -1;
}

/* The tensors of one inbound node, in order: Keras 2's list of
 * references, or Keras 3's {"args": [...]} with __keras_tensor__ objects
 * (a list of them for a merge).  *ready = 0 when one is not produced yet. */
static tpu_status node_inputs(kx *x, kfl *fl, int n, const cJSON *node,
                              const char *p, int *in, int *n_in, int *ready)
{
    char q[KERAS_PATH_MAX];
    tpu_status st;
    *n_in = 0;
    *ready = 1;
    if (cJSON_IsObject(node)) {
        const cJSON *args = get(node, "args");
        const cJSON *a;
        int i = 0;
        if (!cJSON_IsArray(args)) {
            kpath(q, p, ".args");
            return kfail(x, q, "expected a list, found %s", jtype(args));
        }
        cJSON_ArrayForEach(a, args)
        {
            kpath(q, p, ".args[%d]", i++);
            const cJSON *list = cJSON_IsArray(a) ? a : NULL;
            const cJSON *e = a;
            int j = 0;
            if (list)
                e = list->child;
            for (; e; e = list ? e->next : NULL) {
                char r[KERAS_PATH_MAX];
                if (list)
                    kpath(r, q, "[%d]", j++);
                else
                    snprintf(r, sizeof r, "%s", q);
                if (!is_keras_tensor(e)) {
                    if (!list)
                        break;
                    continue;
                }
                if (*n_in == KERAS_OUTS_MAX)
                    return kfail(x, r, "more than %d inputs", KERAS_OUTS_MAX);
                int ref = resolve(x, fl, n, e, r, &st);
                if (st)
                    return st;
                if (ref < 0)
                    *ready = 0;
                in[(*n_in)++] = ref;
                if (!list)
                    break;
            }
        }
        return TPU_OK;
    }
    if (!cJSON_IsArray(node))
        return kfail(x, p, "expected a list of tensor references, found %s",
                     jtype(node));
    /* [name, node, tensor, kwargs] on its own (one input, as some writers
     * put it) or a list of them */
    if (cJSON_IsString(cJSON_GetArrayItem(node, 0))) {
        int ref = resolve(x, fl, n, node, p, &st);
        if (st)
            return st;
        *ready = ref >= 0;
        in[(*n_in)++] = ref;
        return TPU_OK;
    }
    const cJSON *e;
    int j = 0;
    cJSON_ArrayForEach(e, node)
    {
        kpath(q, p, "[%d]", j++);
        if (*n_in == KERAS_OUTS_MAX)
            return kfail(x, q, "more than %d inputs", KERAS_OUTS_MAX);
        int ref = resolve(x, fl, n, e, q, &st);
        if (st)
            return st;
        if (ref < 0)
            *ready = 0;
        in[(*n_in)++] = ref;
    }
    return TPU_OK;
}

/* The entries of input_layers / output_layers: a list of [name, node,
 * tensor], or one such entry on its own (Keras writes a single input so). */
static const cJSON *io_entry(const cJSON *list, int k)
{
    if (cJSON_IsString(cJSON_GetArrayItem(list, 0)))
        return k == 0 ? list : NULL;
    return cJSON_GetArrayItem(list, k);
}

static int io_count(const cJSON *list)
{
    if (!cJSON_IsArray(list))
        return 0;
    if (cJSON_IsString(cJSON_GetArrayItem(list, 0)))
        return 1;
    return cJSON_GetArraySize(list);
}

static void free_fl(kfl *fl, int n)
{
    for (int k = 0; fl && k < n; k++)
        free(fl[k].outs);
    free(fl);
}

/* A Functional model: every layer's nodes, each once its inputs exist
 * (Keras's from_config does the same), then the outputs. */
static tpu_status run_functional(kx *x, const cJSON *cfg, const cJSON *layers,
                                 const char *lpath, const char *prefix,
                                 const char *path, const int *in, int n_in,
                                 int frozen, int *out, int *n_out)
{
    int n = cJSON_GetArraySize(layers), i = 0;
    kfl *fl = calloc((size_t)(n ? n : 1), sizeof *fl);
    const cJSON *l;
    tpu_status st = TPU_OK;
    char p[KERAS_PATH_MAX], q[KERAS_PATH_MAX], b[64];
    if (!fl)
        return koom(x);
    cJSON_ArrayForEach(l, layers)
    {
        kfl *f = &fl[i];
        const char *cls = get_str(l, "class_name");
        kpath(p, lpath, "[%d]", i++);
        f->obj = l;
        f->name = layer_name(l);
        if (!cJSON_IsObject(l) || !f->name) {
            st = kfail(x, p, "expected a layer object with a name, found %s",
                       jtype(l));
            goto out;
        }
        f->is_input = cls && strcmp(cls, "InputLayer") == 0;
        f->nodes = get(l, "inbound_nodes");
        if (f->nodes && !cJSON_IsArray(f->nodes)) {
            kpath(q, p, ".inbound_nodes");
            st = kfail(x, q, "expected a list, found %s", jtype(f->nodes));
            goto out;
        }
        f->n_nodes = f->is_input ? 1 : cJSON_GetArraySize(f->nodes);
        /* Keras numbers a nested model's calls after the node linking its
         * own inputs to its outputs (Keras 2: a Functional, or a
         * Sequential that starts with an InputLayer; Keras 3: a
         * Functional) */
        f->offset = 0;
        if (cls && !f->is_input && (strcmp(cls, "Functional") == 0 ||
                                    strcmp(cls, "Model") == 0))
            f->offset = 1;
        if (cls && strcmp(cls, "Sequential") == 0 && !get(l, "module")) {
            char ilp[KERAS_PATH_MAX];
            const cJSON *il = model_layers(l, ilp, p);
            const char *c0 = get_str(cJSON_GetArrayItem(il, 0), "class_name");
            f->offset = c0 && strcmp(c0, "InputLayer") == 0;
        }
        f->n_outs = cls && is_model_class(cls) ? KERAS_OUTS_MAX : 1;
        f->outs = malloc((size_t)(f->n_nodes ? f->n_nodes : 1) *
                         (size_t)f->n_outs * sizeof *f->outs);
        if (!f->outs) {
            st = koom(x);
            goto out;
        }
        for (int k = 0; k < f->n_nodes * f->n_outs; k++)
            f->outs[k] = -1;
    }
    /* the inputs */
    const cJSON *il = get(cfg, "input_layers");
    int nil = io_count(il);
    kpath(q, path, ".config.input_layers");
    if (nil < 1) {
        st = kfail(x, q, "expected a list of [layer name, node, tensor], "
                   "found %s", jtype(il));
        goto out;
    }
    if (in && n_in != nil) {
        st = kfail(x, path, "the model takes %d inputs and is called on %d",
                   nil, n_in);
        goto out;
    }
    for (int k = 0; k < nil; k++) {
        const cJSON *e = io_entry(il, k);
        const char *nm = cJSON_IsString(cJSON_GetArrayItem(e, 0))
                             ? cJSON_GetArrayItem(e, 0)->valuestring
                             : NULL;
        int j;
        char r[KERAS_PATH_MAX];
        kpath(r, q, "[%d]", k);
        for (j = 0; nm && j < n; j++)
            if (strcmp(fl[j].name, nm) == 0)
                break;
        if (!nm || j == n || !fl[j].is_input) {
            st = kfail(x, r, "expected the name of one of the model's "
                       "InputLayers%s%s%s", nm ? ", found '" : "",
                       nm ? kshown(b, sizeof b, nm) : "", nm ? "'" : "");
            goto out;
        }
        if (fl[j].done)
            continue;
        if (in) {
            fl[j].outs[0] = in[k];
        } else {
            char lp[KERAS_PATH_MAX], spath[KERAS_PATH_MAX] = "";
            int hb = 1;
            kpath(lp, lpath, "[%d]", j);
            const cJSON *sh = declared_shape(fl[j].obj, lp, spath, &hb);
            int said = x->any_cf ? reader_format(layers, fl[j].name) : -1;
            if (said == -2) {
                st = koom(x);
                goto out;
            }
            if ((st = make_input(x, fl[j].name, sh, hb, spath,
                                 input_format(x, said), &fl[j].outs[0])))
                goto out;
        }
        fl[j].done = 1;
    }
    /* the layers, node by node, as their inputs appear */
    for (int progress = 1; progress;) {
        progress = 0;
        for (int j = 0; j < n; j++) {
            kfl *f = &fl[j];
            while (!f->is_input && f->done < f->n_nodes) {
                int ins[KERAS_OUTS_MAX], nins, ready, got = 0;
                char lp[KERAS_PATH_MAX];
                kpath(lp, lpath, "[%d]", j);
                kpath(q, lp, ".inbound_nodes[%d]", f->done);
                if ((st = node_inputs(x, fl, n, cJSON_GetArrayItem(f->nodes,
                                                                   f->done),
                                      q, ins, &nins, &ready)))
                    goto out;
                if (!ready)
                    break;
                if ((st = call_layer(x, f->obj, lp, prefix, ins, nins, frozen,
                                     f->outs + f->done * f->n_outs, &got)))
                    goto out;
                f->done++;
                progress = 1;
            }
        }
    }
    for (int j = 0; j < n; j++)
        if (!fl[j].is_input && fl[j].done < fl[j].n_nodes) {
            int ins[KERAS_OUTS_MAX], nins, ready;
            char lp[KERAS_PATH_MAX];
            kpath(lp, lpath, "[%d]", j);
            kpath(q, lp, ".inbound_nodes[%d]", fl[j].done);
            if ((st = node_inputs(x, fl, n,
                                  cJSON_GetArrayItem(fl[j].nodes, fl[j].done),
                                  q, ins, &nins, &ready)))
                goto out;
            st = kfail(x, q, "its inputs never appear (a cycle, or a layer "
                       "of another model)");
            goto out;
        }
    /* the outputs */
    const cJSON *ol = get(cfg, "output_layers");
    int nol = io_count(ol);
    kpath(q, path, ".config.output_layers");
    if (nol < 1 || nol > KERAS_OUTS_MAX) {
        st = kfail(x, q, "expected 1 to %d [layer name, node, tensor], "
                   "found %s", KERAS_OUTS_MAX, jtype(ol));
        goto out;
    }
    for (int k = 0; k < nol; k++) {
        char r[KERAS_PATH_MAX];
        int ref;
        kpath(r, q, "[%d]", k);
        ref = resolve(x, fl, n, io_entry(ol, k), r, &st);
        if (st)
            goto out;
        if (ref < 0) {
            st = kfail(x, r, "this output is never computed");
            goto out;
        }
        out[k] = ref;
    }
    *n_out = nol;
out:
    free_fl(fl, n);
    return st;
}

/* Instantiates model (an object with class_name and config) on refs in
 * (NULL: the model's own inputs become the trace's). */
static tpu_status instantiate(kx *x, const cJSON *model, const char *path,
                              const char *prefix, const int *in, int n_in,
                              int frozen, int *out, int *n_out)
{
    const char *cls = get_str(model, "class_name");
    char lpath[KERAS_PATH_MAX], p[KERAS_PATH_MAX], b[64];
    const cJSON *layers = model_layers(model, lpath, path);
    tpu_status st;
    if (!cls || !is_model_class(cls)) {
        kpath(p, path, ".class_name");
        return kfail(x, p, "expected a model class (Sequential, Functional "
                     "or Model), found %s%s%s", cls ? "'" : jtype(
                         get(model, "class_name")),
                     cls ? kshown(b, sizeof b, cls) : "", cls ? "'" : "");
    }
    if (!layers)
        return kfail(x, lpath, "expected the model's list of layers, found "
                     "%s", jtype(get(get(model, "config"), "layers")));
    if (++x->depth > KERAS_NEST_MAX)
        return kfail(x, path, "models nested more than %d deep",
                     KERAS_NEST_MAX);
    if (strcmp(cls, "Sequential") == 0)
        st = run_sequential(x, layers, lpath, prefix, model, path, in, n_in,
                            frozen, out, n_out);
    else
        st = run_functional(x, get(model, "config"), layers, lpath, prefix,
                            path, in, n_in, frozen, out, n_out);
    x->depth--;
    return st;
}

/* ---- the trace --------------------------------------------------------- */

static tpu_status loss_kind(kx *x, graph_loss *k)
{
    const char *s = x->o->loss ? x->o->loss : "softmax_xent";
    for (int i = 0; i <= GLOSS_SIGMOID_XENT; i++)
        if (strcmp(s, graph_loss_name((graph_loss)i)) == 0) {
            *k = (graph_loss)i;
            return TPU_OK;
        }
    char b[64];
    return kfail(x, "--loss", "'%s' is not one of softmax_xent, "
                 "sigmoid_xent, sigmoid_focal, dice, l2, smooth_l1",
                 kshown(b, sizeof b, s));
}

/* A Keras loss's name ("categorical_crossentropy", tfjs's
 * "categoricalCrossentropy", a class "keras.losses.Huber") as the trace's
 * loss kind, or -1 when the trace has none for it. */
static int keras_loss_kind(const char *name)
{
    static const struct {
        const char *name;
        graph_loss kind;
    } map[] = {
        {"categoricalcrossentropy", GLOSS_SOFTMAX_XENT},
        {"sparsecategoricalcrossentropy", GLOSS_SOFTMAX_XENT},
        {"binarycrossentropy", GLOSS_SIGMOID_XENT},
        {"binaryfocalcrossentropy", GLOSS_SIGMOID_FOCAL},
        {"sigmoidfocalcrossentropy", GLOSS_SIGMOID_FOCAL},
        {"mse", GLOSS_L2},
        {"meansquarederror", GLOSS_L2},
        {"huber", GLOSS_SMOOTH_L1},
        {"huberloss", GLOSS_SMOOTH_L1}};
    char low[64];
    size_t n = 0;
    /* the class is the last part of "keras.losses.Huber", "Custom>Dice" */
    for (const char *c = name; *c; c++)
        if (*c == '.' || *c == '>')
            name = c + 1;
    for (const char *c = name; *c && n + 1 < sizeof low; c++)
        if (*c != '_')
            low[n++] = (char)(*c >= 'A' && *c <= 'Z' ? *c + 32 : *c);
    low[n] = 0;
    for (size_t k = 0; k < sizeof map / sizeof map[0]; k++)
        if (strcmp(low, map[k].name) == 0)
            return (int)map[k].kind;
    if (strstr(low, "dice"))
        return GLOSS_DICE;
    return -1;
}

/* The name of one saved loss entry: a string, or a serialized class
 * ({"class_name": ...}); NULL otherwise. */
static const char *loss_entry_name(const cJSON *e)
{
    if (cJSON_IsString(e))
        return e->valuestring;
    return cJSON_IsObject(e) ? get_str(e, "class_name") : NULL;
}

/* The loss a compiled model was saved with: a Keras 3 archive's
 * compile_config.loss, a training_config's loss (Keras 2 HDF5, the
 * TensorFlow.js modelTopology): one name or class, or one per output (a
 * list, or an object by output name).  *kind is the trace's loss kind
 * when every entry maps to the same one; otherwise a note says what the
 * model was compiled with and *kind is untouched.  *found: whether the
 * file holds a loss. */
static tpu_status saved_loss(kx *x, const cJSON *doc, graph_loss *kind,
                             int *found)
{
    const cJSON *lo = NULL, *tc;
    const char *path = "";
    *found = 0;
    if ((lo = get(get(doc, "compile_config"), "loss")))
        path = "compile_config.loss";
    else if ((tc = get(get(doc, "modelTopology"), "training_config")) &&
             (lo = get(tc, "loss")))
        path = "modelTopology.training_config.loss";
    else if ((lo = get(get(doc, "training_config"), "loss")))
        path = "training_config.loss";
    if (!lo || cJSON_IsNull(lo))
        return TPU_OK;
    *found = 1;
    const cJSON *e, *one = lo;
    const char *first = NULL, *odd = NULL;
    int k = -2;
    if (cJSON_IsArray(lo) ||
        (cJSON_IsObject(lo) && !get(lo, "class_name"))) {
        one = NULL;
        cJSON_ArrayForEach(e, lo)
        {
            const char *nm = loss_entry_name(e);
            int ek = nm ? keras_loss_kind(nm) : -1;
            if (!first)
                first = nm ? nm : "?";
            if (k == -2)
                k = ek;
            else if (ek != k)
                k = -1;
            if (ek < 0 && !odd)
                odd = nm ? nm : "?";
        }
    } else {
        first = loss_entry_name(one);
        k = first ? keras_loss_kind(first) : -1;
        odd = k < 0 ? (first ? first : "?") : NULL;
    }
    char b[64];
    if (k < 0)
        return note(x, "the model was compiled with the loss '%s' (%s), "
                    "which the trace has no loss kind for%s: trained with "
                    "softmax_xent (--loss chooses another)",
                    kshown(b, sizeof b, odd ? odd : first ? first : "?"), path,
                    !one && !odd ? " (different losses per output)" : "");
    *kind = (graph_loss)k;
    return note(x, "the loss is %s: the model was compiled with '%s' (%s)",
                graph_loss_name(*kind), kshown(b, sizeof b, first), path);
}

/* Whether the loss kind applies its own sigmoid (docs/IMPORT.md): it reads
 * logits, so a sigmoid ending the output is folded into it. */
static int loss_reads_logits(graph_loss k)
{
    return k == GLOSS_SIGMOID_XENT || k == GLOSS_SIGMOID_FOCAL ||
           k == GLOSS_DICE;
}

/* Takes the layer named `name` out of the trace's layers (a sigmoid the
 * loss folded in, which nothing else reads). */
static void drop_layer_json(kx *x, const char *name)
{
    int i = 0;
    for (const cJSON *e = x->layers ? x->layers->child : NULL; e;
         e = e->next, i++) {
        const char *nm = get_str(e, "name");
        if (nm && strcmp(nm, name) == 0) {
            cJSON_DeleteItemFromArray(x->layers, i);
            return;
        }
    }
}

/* Training attaches one loss to the model's outputs that no other layer
 * consumes: an output that is also an intermediate layer (a model
 * exposing features) trains through the rest of the network. */
static tpu_status attach_loss(kx *x, const cJSON *doc, const int *outs,
                              int n_out)
{
    graph_loss kind = GLOSS_SOFTMAX_XENT;
    int saved = 0;
    tpu_status st;
    char *used = calloc((size_t)x->g.n_layers + 1, 1);
    int in_t[GRAPH_MAX_IN], n = 0;
    char b[64];
    if (!used)
        return koom(x);
    for (int i = 0; i < x->g.n_layers; i++)
        for (int k = 0; k < x->g.layers[i].n_in; k++)
            used[x->g.layers[i].in[k]] = 1;
    if (!x->o->infer) {
        if (x->o->loss)
            st = loss_kind(x, &kind);
        else
            st = saved_loss(x, doc, &kind, &saved);
        if (st) {
            free(used);
            return st;
        }
        saved = saved && kind != GLOSS_SOFTMAX_XENT;
    }
    /* A softmax output only softmax_xent includes: a saved loss of
     * another kind falls back to it (--loss KIND is refused below). */
    for (int k = 0; saved && k < n_out; k++) {
        const keras_ref *r = &x->refs[outs[k]];
        if (!used[r->t] && r->softmax) {
            if ((st = note(x, "the output '%s' ends in a softmax (%s), which "
                           "only softmax_xent includes: trained with "
                           "softmax_xent, not %s",
                           kshown(b, sizeof b, x->g.layers[r->t].name),
                           r->sm_path, graph_loss_name(kind)))) {
                free(used);
                return st;
            }
            kind = GLOSS_SOFTMAX_XENT;
            break;
        }
    }
    for (int k = 0; k < n_out; k++) {
        const keras_ref *r = &x->refs[outs[k]];
        int dup = 0;
        if (used[r->t]) {
            if (r->softmax && (st = kfail(x, r->sm_path, "activation "
                                          "'softmax' on an output that other "
                                          "layers read has no trace "
                                          "equivalent"))) {
                free(used);
                return st;
            }
            continue;
        }
        for (int j = 0; j < n; j++)
            dup |= in_t[j] == r->t;
        if (r->softmax) {
            const char *nm = x->g.layers[r->t].name;
            if (x->o->infer)
                st = note(x, "the softmax after '%s' (%s) is left out: "
                          "inference ends at its input",
                          kshown(b, sizeof b, nm), r->sm_path);
            else if (kind == GLOSS_SOFTMAX_XENT)
                st = note(x, "the softmax after '%s' (%s) is part of the "
                          "softmax_xent loss", kshown(b, sizeof b, nm),
                          r->sm_path);
            else
                st = kfail(x, r->sm_path, "activation 'softmax' on an "
                           "output trained with --loss %s has no trace "
                           "equivalent (softmax_xent includes it)",
                           graph_loss_name(kind));
            if (st) {
                free(used);
                return st;
            }
        }
        if (dup)
            continue;
        int src = r->t;
        const glayer *O = &x->g.layers[src];
        if (!x->o->infer && loss_reads_logits(kind) &&
            O->op == GOP_SIGMOID) {
            /* sigmoid_xent, sigmoid_focal and dice apply the sigmoid
             * themselves: Keras's loss on a sigmoid output is theirs on
             * the sigmoid's input, and the sigmoid, read by nothing
             * else, leaves the trace */
            char b2[64];
            src = O->in[0];
            if ((st = note(x, "the sigmoid '%s' is part of the %s loss, "
                           "which reads its input '%s' (the logits); the "
                           "sigmoid is left out of the trace",
                           kshown(b, sizeof b, O->name),
                           graph_loss_name(kind),
                           kshown(b2, sizeof b2, x->g.layers[src].name)))) {
                free(used);
                return st;
            }
            drop_layer_json(x, O->name);
            for (int j = 0; j < n; j++)
                if (in_t[j] == src)
                    src = -1;
            if (src < 0)
                continue;
        }
        if (n == GRAPH_MAX_IN) {
            free(used);
            return kfail(x, NULL, "more than %d model outputs for one loss",
                         GRAPH_MAX_IN);
        }
        in_t[n++] = src;
        used[r->t] = 1;
    }
    free(used);
    if (x->o->infer)
        return TPU_OK;
    if (n == 0)
        return kfail(x, NULL, "every output of the model feeds another "
                     "layer: nothing to attach the loss to");
    for (int j = 0; kind == GLOSS_SOFTMAX_XENT && j < n; j++)
        if (x->g.layers[in_t[j]].out.c == 1 &&
            (st = note(x, "softmax_xent over the one channel of '%s' is 0 "
                       "whatever it holds (a one-channel softmax is 1): "
                       "choose --loss sigmoid_xent (Keras's "
                       "binary_crossentropy), dice or l2",
                       kshown(b, sizeof b, x->g.layers[in_t[j]].name))))
            return st;
    if ((st = grow(x)))
        return st;
    char name[GRAPH_NAME_MAX];
    int t;
    unique_name(x, "loss", NULL, name);
    glayer *L = layer_begin(x, name, GOP_LOSS, in_t, n);
    L->loss = kind;
    L->dtype_bytes = 4;
    return layer_commit(x, "--loss", 1, &t);
}

static int64_t system_cores(const char *sys)
{
    const char *d = strchr(sys, '-');
    long long v = d ? strtoll(d + 1, NULL, 10) : 0;
    return v > 0 ? v : 1;
}

/* run.input_partition_dims from --partition (Keras order, N first; the
 * channels second for a channels-first input). */
static tpu_status partition(kx *x, cJSON *run, int64_t *cpr)
{
    int v[GRAPH_MAX_PDIMS + 1] = {0}, n = 0;
    const char *p = x->o->partition;
    const glayer *I = &x->g.layers[0];
    int kr = x->krank[0];
    *cpr = 1;
    if (!p)
        return TPU_OK;
    while (*p) {
        char *end;
        long long f = strtoll(p, &end, 10);
        if (end == p || f < 1 || f > 4096 || n == GRAPH_MAX_PDIMS ||
            (*end && *end != ','))
            return kfail(x, "--partition", "'%.40s' is not a list such as "
                         "1,4,2,1 (N, spatial dimensions, C; each 1 to "
                         "4096)", x->o->partition);
        v[n++] = (int)f;
        p = *end ? end + 1 : end;
    }
    if (n != kr + 1)
        return kfail(x, "--partition", "%d factors for the input '%s' of "
                     "rank %d with the batch: give %d (N, ..., C)", n,
                     I->name, kr + 1, kr + 1);
    if (x->kcf[0]) {
        /* Keras's order for a channels-first input: N, C, spatial... */
        int ch = v[1];
        for (int k = 1; k + 1 < n; k++)
            v[k] = v[k + 1];
        v[n - 1] = ch;
    }
    int d[GRAPH_MAX_PDIMS], m = 0;
    d[m++] = v[0];
    if (kr == 2)
        d[m++] = 1;  /* the row of height 1 a sequence becomes */
    for (int k = 1; k < n; k++)
        d[m++] = v[k];
    for (int k = 0; k < m; k++)
        *cpr *= d[k];
    cJSON *ipd = cJSON_AddArrayToObject(run, "input_partition_dims");
    if (!ipd)
        return koom(x);
    for (int i = 0; i < x->g.n_inputs; i++) {
        const glayer *J = &x->g.layers[i];
        if (i == 0 || (J->out.nsp == I->out.nsp && J->out.nsp > 0))
            cJSON_AddItemToArray(ipd, cJSON_CreateIntArray(d, m));
        else
            cJSON_AddItemToArray(ipd, cJSON_CreateNull());
    }
    cJSON_AddItemToArray(ipd, cJSON_CreateNull()); /* labels: replicated */
    return TPU_OK;
}

static const cJSON *find_model(kx *x, const cJSON *doc, char *path,
                               tpu_status *st)
{
    const cJSON *mt = get(doc, "modelTopology");
    *st = TPU_OK;
    if (get_str(doc, "format") &&
        strcmp(get_str(doc, "format"), "tpuemu-trace/1") == 0) {
        *st = kfail(x, "format", "this is a tpuemu trace already, not a "
                    "Keras model (tpuemu run reads it as it is)");
        return NULL;
    }
    if (mt) {
        /* TensorFlow.js: the Keras config, or the Python converter's
         * {"model_config": ..., "training_config": ...} */
        if (!cJSON_IsObject(mt)) {
            *st = kfail(x, "modelTopology", "expected an object, found %s",
                        jtype(mt));
            return NULL;
        }
        if (get(mt, "model_config")) {
            strcpy(path, "modelTopology.model_config");
            return get(mt, "model_config");
        }
        strcpy(path, "modelTopology");
        return mt;
    }
    if (cJSON_IsObject(doc) && get(doc, "class_name")) {
        path[0] = 0;
        return doc;
    }
    *st = kfail(x, NULL, "not a Keras model: expected \"class_name\" (Keras "
                "model.to_json(), a .keras archive's config.json) or "
                "\"modelTopology\" (a TensorFlow.js model.json)");
    return NULL;
}

/* The optimizer a compiled model was saved with: a Keras 3 archive's
 * compile_config.optimizer (a class's serialization, or the string given
 * to compile()), a training_config's optimizer_config (Keras 2 HDF5, the
 * TensorFlow.js converter's modelTopology).  Its run.optimizer word into
 * *word (NULL when the file has none) and rmsprop's momentum into *mom;
 * *path is the JSON path of what was read, for messages. */
static tpu_status saved_optimizer(kx *x, const cJSON *doc, const char **word,
                                  double *mom, char *path, size_t cap)
{
    static const struct {
        const char *cls, *word;
    } map[] = {{"sgd", "sgd"},         {"adam", "adam"},
               {"adamw", "adam"},      {"nadam", "adam"},
               {"adamax", "adam"},     {"rmsprop", "rmsprop"},
               {"lars", "lars"},       {"larsoptimizer", "lars"},
               {"momentum", "momentum"}};
    const cJSON *opt = NULL, *tc;
    *word = NULL;
    *mom = 0;
    if ((opt = get(get(doc, "compile_config"), "optimizer")))
        snprintf(path, cap, "compile_config.optimizer");
    else if ((tc = get(get(doc, "modelTopology"), "training_config")) &&
             (opt = get(tc, "optimizer_config")))
        snprintf(path, cap, "modelTopology.training_config.optimizer_config");
    else if ((opt = get(get(doc, "training_config"), "optimizer_config")))
        snprintf(path, cap, "training_config.optimizer_config");
    if (!opt || cJSON_IsNull(opt))
        return TPU_OK;
    const char *cls = cJSON_IsString(opt) ? opt->valuestring
                                          : get_str(opt, "class_name");
    if (!cls)
        return kfail(x, path, "expected an optimizer's name or its "
                     "\"class_name\", found %s", jtype(opt));
    /* "keras.optimizers.Adam", "Custom>LARS": the class is the last part */
    for (const char *c = cls; *c; c++)
        if (*c == '.' || *c == '>')
            cls = c + 1;
    char low[64];
    size_t n = 0;
    for (; cls[n] && n + 1 < sizeof low; n++)
        low[n] = (char)(cls[n] >= 'A' && cls[n] <= 'Z' ? cls[n] + 32 : cls[n]);
    low[n] = 0;
    for (size_t k = 0; k < sizeof map / sizeof map[0]; k++)
        if (strcmp(low, map[k].cls) == 0)
            *word = map[k].word;
    if (!*word)
        return kfail(x, path, "the model was compiled with '%s', which tpuemu "
                     "does not model (it has sgd, momentum, adam, rmsprop, "
                     "lars): choose one with --optimizer", cls);
    const cJSON *cfg = get(opt, "config");
    const cJSON *m = get(cfg, "momentum");
    double mv = cJSON_IsNumber(m) ? m->valuedouble : 0;
    if (strcmp(*word, "sgd") == 0 && mv > 0)
        *word = "momentum"; /* Keras's SGD keeps a momentum slot then */
    if (strcmp(*word, "rmsprop") == 0 && mv > 0 && mv < 1)
        *mom = mv;
    if (strcmp(low, *word) != 0 && strcmp(*word, "momentum") != 0)
        return note(x, "the model was compiled with %s: simulated as %s "
                    "(the same optimizer state and update traffic)",
                    cls, *word);
    return TPU_OK;
}

/* run.optimizer: --optimizer, else the model's own, else momentum. */
static tpu_status put_optimizer(kx *x, const cJSON *doc, cJSON *run)
{
    const char *word = NULL;
    double mom = 0;
    char path[96] = "";
    tpu_status st = saved_optimizer(x, doc, &word, &mom, path, sizeof path);
    if (st && !x->o->optimizer)
        return st;
    if (x->o->optimizer) {
        if (word && !st && strcmp(word, x->o->optimizer) != 0 &&
            (st = note(x, "--optimizer %s, not the %s the model was "
                       "compiled with (%s)",
                       x->o->optimizer, word, path)))
            return st;
        word = x->o->optimizer;
        mom = 0;
    }
    if (!word)
        word = "momentum";
    if (mom > 0) {
        cJSON *o = cJSON_AddObjectToObject(run, "optimizer");
        if (!o || !cJSON_AddStringToObject(o, "name", word) ||
            !cJSON_AddNumberToObject(o, "momentum", mom))
            return koom(x);
        return TPU_OK;
    }
    return cJSON_AddStringToObject(run, "optimizer", word) ? TPU_OK
                                                           : koom(x);
}

static void kx_free(kx *x)
{
    free(x->g.layers);
    free(x->g.name_slots);
    free(x->krank);
    free(x->kcf);
    free(x->refs);
    free(x->seen);
    free(x->notes);
    free(x->passed);
}

int keras_is_trace(const cJSON *doc)
{
    const char *f = get_str(doc, "format");
    return f && strcmp(f, "tpuemu-trace/1") == 0;
}

tpu_status keras_to_trace(const cJSON *doc, const char *shown,
                          const keras_opts *o, cJSON **trace, char **notes,
                          tpu_error *err)
{
    kx x;
    char mpath[KERAS_PATH_MAX];
    tpu_status st;
    int outs[KERAS_OUTS_MAX], n_out = 0;
    keras_scan scan;
    cJSON *t = NULL, *run, *gr;
    *trace = NULL;
    *notes = NULL;
    memset(&x, 0, sizeof x);
    x.file = shown;
    x.o = o;
    x.err = err;
    const cJSON *model = find_model(&x, doc, mpath, &st);
    if (!model)
        return st;
    {
        int n_cf = 0, n_cl = 0;
        count_formats(model, 0, &n_cf, &n_cl);
        x.any_cf = n_cf > 0;
        x.fmt = !n_cf ? KERAS_CL : n_cl ? KERAS_MIXED : KERAS_CF;
    }
    memset(&scan, 0, sizeof scan);
    scan_model(&x, model, mpath, &scan, 0);
    if (scan.n)
        return scan_fail(&x, &scan);
    t = cJSON_CreateObject();
    if (!t)
        return koom(&x);
    cJSON_AddStringToObject(t, "format", "tpuemu-trace/1");
    /* filled once the layers are known; first after the format, where a
     * reader looks */
    cJSON_AddStringToObject(t, "comment", "");
    {
        const char *nm = layer_name(model);
        char name[128];
        snprintf(name, sizeof name, "%s", nm && *nm ? nm : "keras-model");
        for (char *c = name; *c; c++)
            if ((unsigned char)*c < 0x20 || *c == 0x7f)
                *c = '?';
        cJSON_AddStringToObject(t, "name", name);
    }
    const char *sys = o->system ? o->system : KERAS_DEFAULT_SYSTEM;
    cJSON_AddStringToObject(t, "system", sys);
    run = cJSON_AddObjectToObject(t, "run");
    gr = cJSON_AddObjectToObject(t, "graph");
    x.inputs = gr ? cJSON_AddArrayToObject(gr, "inputs") : NULL;
    x.layers = gr ? cJSON_AddArrayToObject(gr, "layers") : NULL;
    if (!run || !x.layers) {
        st = koom(&x);
        goto fail;
    }
    if ((st = instantiate(&x, model, mpath, "", NULL, 0, 0, outs, &n_out)) ||
        (st = attach_loss(&x, doc, outs, n_out)))
        goto fail;
    if (o->input && x.n_inputs_given < x.g.n_inputs) {
        st = kfail(&x, "--input", "%d shapes for the model's %d inputs "
                   "(separate them with ',')", x.n_inputs_given,
                   x.g.n_inputs);
        goto fail;
    }
    {
        const char *in = o->input;
        int given = 0;
        while (in && *in) {
            given++;
            in = strchr(in, ',');
            in = in ? in + 1 : NULL;
        }
        if (given > x.g.n_inputs) {
            st = kfail(&x, "--input", "%d shapes for the model's %d input%s",
                       given, x.g.n_inputs, x.g.n_inputs == 1 ? "" : "s");
            goto fail;
        }
    }
    int64_t cpr = 1;
    cJSON_AddStringToObject(run, "mode", o->infer ? "infer" : "train");
    cJSON *gb = cJSON_AddNumberToObject(run, "global_batch", 0);
    cJSON *nc = cJSON_AddNumberToObject(run, "num_cores_per_replica", 1);
    if ((st = partition(&x, run, &cpr)))
        goto fail;
    int64_t cores = system_cores(sys), replicas = cores / cpr;
    if (replicas < 1)
        replicas = 1;
    int64_t batch = o->batch ? o->batch
                             : KERAS_DEFAULT_PER_REPLICA * replicas;
    cJSON_SetNumberValue(gb, (double)batch);
    cJSON_SetNumberValue(nc, (double)cpr);
    if (!o->infer && (st = put_optimizer(&x, doc, run)))
        goto fail;
    {
        char c[1024];
        snprintf(c, sizeof c, "imported from %s by tpuemu import%s%.900s",
                 shown, x.passed_len ? "; passed through as identities: " : "",
                 x.passed_len ? x.passed : "");
        if (x.passed_len > 900)
            snprintf(c + sizeof c - 5, 5, "...");
        cJSON *cj = cJSON_CreateString(c);
        if (!cj || !cJSON_ReplaceItemInObjectCaseSensitive(t, "comment",
                                                            cj)) {
            cJSON_Delete(cj);
            st = koom(&x);
            goto fail;
        }
    }
    *trace = t;
    *notes = x.notes;
    x.notes = NULL;
    kx_free(&x);
    return TPU_OK;
fail:
    cJSON_Delete(t);
    kx_free(&x);
    return st;
}

/* ---- reading ----------------------------------------------------------- */

static tpu_status read_zip(const char *path, char *text, size_t len,
                           char **json, size_t *jlen, tpu_error *err)
{
    zip_error_t ze;
    zip_error_init(&ze);
    zip_source_t *src = zip_source_buffer_create(text, len, 0, &ze);
    zip_t *za = src ? zip_open_from_source(src, ZIP_RDONLY, &ze) : NULL;
    tpu_status st = TPU_OK;
    *json = NULL;
    if (!za) {
        st = tpu_fail(err, TPU_ERR_INPUT, "%s: not a readable zip archive "
                      "(%s)", path, zip_error_strerror(&ze));
        if (src)
            zip_source_free(src);
        zip_error_fini(&ze);
        return st;
    }
    zip_error_fini(&ze);
    zip_int64_t idx = zip_name_locate(za, "config.json", 0);
    zip_stat_t zs;
    zip_file_t *zf = NULL;
    if (idx < 0) {
        st = tpu_fail(err, TPU_ERR_INPUT, "%s: the archive holds no "
                      "config.json (a .keras file written by "
                      "model.save(\"m.keras\") has one)", path);
        goto out;
    }
    if (zip_stat_index(za, (zip_uint64_t)idx, 0, &zs) != 0 ||
        !(zs.valid & ZIP_STAT_SIZE) || zs.size > KERAS_FILE_MAX) {
        st = tpu_fail(err, TPU_ERR_INPUT, "%s (config.json): %s", path,
                      (zs.valid & ZIP_STAT_SIZE) && zs.size > KERAS_FILE_MAX
                          ? "larger than 256 MiB, the limit for this input"
                          : "cannot read its size");
        goto out;
    }
    *json = malloc((size_t)zs.size + 1);
    if (!*json) {
        st = tpu_fail(err, TPU_ERR_SYSTEM, "out of host memory");
        goto out;
    }
    zf = zip_fopen_index(za, (zip_uint64_t)idx, 0);
    zip_int64_t got = zf ? zip_fread(zf, *json, zs.size) : -1;
    if (!zf || got < 0 || (zip_uint64_t)got != zs.size) {
        st = tpu_fail(err, TPU_ERR_INPUT, "%s (config.json): cannot "
                      "extract: %s", path,
                      zf ? zip_error_strerror(zip_file_get_error(zf))
                         : zip_strerror(za));
        free(*json);
        *json = NULL;
        goto out;
    }
    (*json)[zs.size] = 0;
    *jlen = (size_t)zs.size;
out:
    if (zf)
        zip_fclose(zf);
    zip_discard(za);
    return st;
}

tpu_status keras_read(const char *path, cJSON **model, char **raw,
                      size_t *raw_len, char *shown, int cap, tpu_error *err)
{
    char *text = NULL, *json = NULL;
    size_t len = 0, jlen = 0;
    tpu_status st;
    *model = NULL;
    if (raw)
        *raw = NULL;
    snprintf(shown, (size_t)cap, "%s", path);
    st = rfile_read(path, KERAS_FILE_MAX, RFILE_PIPE_IDLE_S, &text, &len,
                    err);
    if (st)
        return st;
    if (len >= 4 && memcmp(text, "PK\x03\x04", 4) == 0) {
        st = read_zip(path, text, len, &json, &jlen, err);
        free(text);
        if (st)
            return st;
        text = json;
        len = jlen;
        snprintf(shown, (size_t)cap, "%s (config.json)", path);
    }
    const char *end = NULL;
    cJSON *doc = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!doc) {
        char why[200];
        size_t pos = (end >= text && end <= text + len) ? (size_t)(end - text)
                                                        : 0;
        rfile_json_error(text, len, pos, why, sizeof why);
        st = tpu_fail(err, TPU_ERR_INPUT, "%s: %s", shown, why);
        free(text);
        return st;
    }
    size_t pos = (size_t)(end - text);
    while (pos < len && (text[pos] == ' ' || text[pos] == '\n' ||
                         text[pos] == '\r' || text[pos] == '\t'))
        pos++;
    if (pos < len) {
        int line, col, depth;
        rfile_json_where(text, len, pos, &line, &col, &depth);
        cJSON_Delete(doc);
        free(text);
        return tpu_fail(err, TPU_ERR_INPUT, "%s: not valid JSON: unexpected "
                        "text after the top-level value at line %d, column %d",
                        shown, line, col);
    }
    if (raw) {
        *raw = text;
        *raw_len = len;
    } else {
        free(text);
    }
    *model = doc;
    return TPU_OK;
}

tpu_status keras_trace_text(const cJSON *trace, const char *shown,
                            char **text, tpu_error *err)
{
    tpu_status st;
    *text = cJSON_Print(trace);
    if (!*text)
        return tpu_fail(err, TPU_ERR_SYSTEM, "out of host memory");
    /* the trace reader has the last word: what it refuses is not written */
    graph g;
    tpu_error e;
    memset(&g, 0, sizeof g);
    st = graph_parse(&g, *text, strlen(*text), "trace", &e);
    if (!st)
        st = graph_check_run(&g, g.system, g.global_batch, "trace", &e);
    graph_free(&g);
    if (!st)
        return TPU_OK;
    free(*text);
    *text = NULL;
    if (st == TPU_ERR_SYSTEM)
        return tpu_fail(err, st, "%s", e.msg);
    return tpu_fail(err, TPU_ERR_INPUT, "%s: the trace made from it is "
                    "refused: %s", shown, e.msg);
}

tpu_status keras_import(const char *path, const keras_opts *o, char **text,
                        char **notes, tpu_error *err)
{
    cJSON *doc = NULL, *trace = NULL;
    char shown[1100];
    tpu_status st;
    *text = NULL;
    *notes = NULL;
    if ((st = keras_read(path, &doc, NULL, NULL, shown, (int)sizeof shown,
                         err)))
        return st;
    st = keras_to_trace(doc, shown, o, &trace, notes, err);
    cJSON_Delete(doc);
    if (!st)
        st = keras_trace_text(trace, shown, text, err);
    cJSON_Delete(trace);
    if (st) {
        free(*notes);
        *notes = NULL;
    }
    return st;
}
