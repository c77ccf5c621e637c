/* trace — the `tpuemu-trace/1` reader (cJSON) behind graph_load and
 * graph_parse.  The public entry points keep the graph_ prefix of the
 * contract header; every helper here is static and prefixed trace_.
 *
 * A trace is written by hand as often as by a generator, so the reader is
 * strict: every key is known or refused (a typo must not silently become
 * a default), every number is range-checked before it reaches a product,
 * and each mistake becomes one line "FILE: JSON.path: what is wrong".
 * docs/TRACE.md lists every key, default and limit.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "emu/graph.h"
#include "emu/rfile.h"

/* A trace of this size is already far larger than any real network
 * (ResNet-50 is ~30 KB); the cap keeps a wrong path (a disk image) from
 * being read into memory. */
#define TRACE_FILE_MAX ((long)256 << 20)

typedef struct {
    const char *file;
    tpu_error *err;
    int nul_marked;   /* \u0000 escapes were replaced by RFILE_NUL_MARK
                         (emu/rfile.h) */
} trace_ctx;

/* Copies a user string for a message: at most 48 bytes, control
 * characters and bytes that are not UTF-8 shown as '?', so the message
 * stays one line of text. */
static const char *trace_q(char *buf, size_t n, const char *s)
{
    size_t i = 0, j = 0;
    if (!s)
        s = "";
    while (s[i] && j + 10 < n && i < 48) {
        unsigned char ch = (unsigned char)s[i];
        size_t u = rfile_utf8_len((const unsigned char *)s + i);
        if (u == 0 && strncmp(s + i, RFILE_NUL_MARK, 6) == 0) {
            /* what the trace wrote there */
            memcpy(buf + j, "\\u0000", 6);
            i += 6;
            j += 6;
            continue;
        }
        if (u > 1 && rfile_ctrl_len((const unsigned char *)s + i, NULL)) {
            /* a C1 control or a bidi override would act on the terminal */
            buf[j++] = '?';
            i += u;
            continue;
        }
        if (u > 1) {
            /* a whole character or nothing, so the message stays UTF-8 */
            memcpy(buf + j, s + i, u);
            i += u;
            j += u;
            continue;
        }
        buf[j++] = (u == 0 || ch < 0x20 || ch == 0x7f) ? '?' : (char)ch;
        i++;
    }
    if (s[i] && j + 4 <= n) {
        memcpy(buf + j, "...", 3);
        j += 3;
    }
    buf[j] = 0;
    return buf;
}

static tpu_status trace_fail(trace_ctx *c, const char *path, const char *fmt,
                             ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static tpu_status trace_fail(trace_ctx *c, const char *path, const char *fmt,
                             ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (path && path[0])
        return tpu_fail(c->err, TPU_ERR_INPUT, "%s: %s: %s", c->file, path,
                        msg);
    return tpu_fail(c->err, TPU_ERR_INPUT, "%s: %s", c->file, msg);
}

static const char *trace_type(const cJSON *v);

/* "found 0", "found 2.5" for numbers (the value is the useful part),
 * "found a string" otherwise.  From 2^53 on a double no longer holds
 * every integer (9007199254740993 reads as ...992): such a number is
 * shown as the approximation it is, not as another exact one. */
static const char *trace_found(char *buf, size_t n, const cJSON *v)
{
    if (cJSON_IsNumber(v) && fabs(v->valuedouble) >= 9007199254740992.0)
        snprintf(buf, n, "found about %.5g (beyond 2^53: not exact)",
                 v->valuedouble);
    else if (cJSON_IsNumber(v))
        snprintf(buf, n, "found %.17g", v->valuedouble);
    else
        snprintf(buf, n, "found %s", trace_type(v));
    return buf;
}

static const char *trace_type(const cJSON *v)
{
    if (!v)
        return "nothing";
    if (cJSON_IsNull(v))
        return "null";
    if (cJSON_IsBool(v))
        return "a boolean";
    if (cJSON_IsNumber(v))
        return "a number";
    if (cJSON_IsString(v))
        return "a string";
    if (cJSON_IsArray(v))
        return "a list";
    if (cJSON_IsObject(v))
        return "an object";
    return "an unknown value";
}

/* base.key; top-level keys are named bare ("system", "run"). */
static void trace_path(char *buf, size_t n, const char *base, const char *key)
{
    if (strcmp(base, "(top level)") == 0)
        snprintf(buf, n, "%s", key);
    else
        snprintf(buf, n, "%s.%s", base, key);
}

/* The index of s in a NULL-terminated word list, -1 when absent. */
static int trace_word(const char *const *words, const char *s)
{
    for (int i = 0; words[i]; i++)
        if (strcmp(s, words[i]) == 0)
            return i;
    return -1;
}

/* The words as a, b, c (quoted: "a", "b", "c") into buf; a word that
 * does not fit ends the list where it was cut. */
static const char *trace_join(char *buf, size_t cap,
                              const char *const *words, int quoted)
{
    size_t n = 0;
    buf[0] = 0;
    for (const char *const *a = words; *a; a++) {
        int w = snprintf(buf + n, cap - n, quoted ? "%s\"%s\"" : "%s%s",
                         n ? ", " : "", *a);
        if (w < 0 || (size_t)w >= cap - n)
            break;
        n += (size_t)w;
    }
    return buf;
}

/* An unknown key at p.  Keras's and XLA's other names for a grouped
 * convolution point at `groups` (probe round 6 wrote a MobileNet with
 * them); `groups` on a conv_transpose says that only conv takes it. */
static tpu_status trace_unknown_key(trace_ctx *c, const char *p,
                                   const char *key,
                                   const char *const *allowed,
                                   const char *where)
{
    static const char *const grouped[] = {"depth_multiplier",
                                          "feature_group_count", "depthwise",
                                          NULL};
    char list[512];
    if (trace_word(grouped, key) >= 0)
        return trace_fail(c, p, "not a trace key: a grouped or depthwise "
                                "convolution is a conv with \"groups\" "
                                "(depthwise: groups = input channels, filters "
                                "= channels x multiplier; docs/TRACE.md)");
    if (where && strcmp(where, "conv_transpose") == 0 &&
        strcmp(key, "groups") == 0)
        return trace_fail(c, p, "grouped conv_transpose is not modelled "
                                "(only conv takes groups; docs/TRACE.md)");
    return trace_fail(c, p, "unknown key%s%s (expected one of: %s)",
                      where ? " for " : "", where ? where : "",
                      trace_join(list, sizeof list, allowed, 0));
}

/* Refuses unknown and duplicate keys of an object. */
static tpu_status trace_keys(trace_ctx *c, const cJSON *obj, const char *path,
                             const char *const *allowed, const char *where)
{
    char q[64], p[320];
    /* the first member repeating an earlier key (emu/rfile.h) */
    int dup = rfile_json_dup(obj), i = 0;
    if (dup == -2)
        return tpu_fail(c->err, TPU_ERR_SYSTEM, "%s: out of memory",
                        c->file);
    for (const cJSON *it = obj->child; it; it = it->next, i++) {
        trace_path(p, sizeof p, path, trace_q(q, sizeof q, it->string));
        if (trace_word(allowed, it->string) < 0)
            return trace_unknown_key(c, p, it->string, allowed, where);
        if (i == dup)
            return trace_fail(c, p, "duplicate key");
    }
    return TPU_OK;
}

/* A number that is an integer in [lo, hi]. */
static int trace_is_int(const cJSON *v, double lo, double hi)
{
    return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble) &&
           v->valuedouble >= lo && v->valuedouble <= hi;
}

/* A positive integer in [lo, hi]; *out untouched when absent and !req. */
static tpu_status trace_int(trace_ctx *c, const cJSON *obj, const char *base,
                            const char *key, int req, int64_t lo, int64_t hi,
                            int64_t *out)
{
    char p[320], f[64];
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    trace_path(p, sizeof p, base, key);
    if (!v) {
        if (req)
            return trace_fail(c, base, "missing key '%s'", key);
        return TPU_OK;
    }
    if (!trace_is_int(v, (double)lo, (double)hi)) {
        if (lo == 1)
            return trace_fail(c, p,
                              "expected a positive integer (at most %lld), "
                              "%s",
                              (long long)hi, trace_found(f, sizeof f, v));
        return trace_fail(c, p, "expected an integer from %lld to %lld, %s",
                          (long long)lo, (long long)hi,
                          trace_found(f, sizeof f, v));
    }
    *out = (int64_t)v->valuedouble;
    return TPU_OK;
}

/* A string, at most cap-1 bytes; NULL result when absent and !req. */
static tpu_status trace_str(trace_ctx *c, const cJSON *obj, const char *base,
                            const char *key, int req, const char **out)
{
    char p[320];
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    trace_path(p, sizeof p, base, key);
    *out = NULL;
    if (!v) {
        if (req)
            return trace_fail(c, base, "missing key '%s'", key);
        return TPU_OK;
    }
    if (!cJSON_IsString(v) || !v->valuestring)
        return trace_fail(c, p, "expected a string, found %s",
                          trace_type(v));
    *out = v->valuestring;
    return TPU_OK;
}

/* A name for a layer, an input, the trace or a system: non-empty, short,
 * printable, so it can be echoed in messages and reports. */
static tpu_status trace_name(trace_ctx *c, const cJSON *obj, const char *base,
                             const char *key, int req, char *dst, size_t cap)
{
    const char *s;
    char p[320];
    tpu_status st = trace_str(c, obj, base, key, req, &s);
    if (st || !s)
        return st;
    trace_path(p, sizeof p, base, key);
    if (!s[0])
        return trace_fail(c, p, "empty string");
    if (strlen(s) >= cap)
        return trace_fail(c, p, "longer than %zu bytes", cap - 1);
    /* the reports' rule (rfile.h), so a name run accepts reads back */
    char why[96];
    if (rfile_text_problem(s, 0, why, sizeof why))
        return trace_fail(c, p, "%s", why);
    memcpy(dst, s, strlen(s) + 1);
    return TPU_OK;
}

static tpu_status trace_bool(trace_ctx *c, const cJSON *obj, const char *base,
                             const char *key, int *out)
{
    char p[320];
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v)
        return TPU_OK;
    trace_path(p, sizeof p, base, key);
    if (!cJSON_IsBool(v))
        return trace_fail(c, p, "expected true or false, found %s",
                          trace_type(v));
    *out = cJSON_IsTrue(v) ? 1 : 0;
    return TPU_OK;
}

/* One of several words; *out is the index, untouched when absent. */
static tpu_status trace_enum(trace_ctx *c, const cJSON *obj, const char *base,
                             const char *key, int req,
                             const char *const *words, int *out)
{
    const char *s;
    char p[320], q[64], list[256];
    tpu_status st = trace_str(c, obj, base, key, req, &s);
    if (st || !s)
        return st;
    int i = trace_word(words, s);
    if (i >= 0) {
        *out = i;
        return TPU_OK;
    }
    trace_path(p, sizeof p, base, key);
    return trace_fail(c, p, "'%s' is not one of %s",
                      trace_q(q, sizeof q, s),
                      trace_join(list, sizeof list, words, 1));
}

/* A per-dimension parameter: a list of 2 or 3 positive integers, or (when
 * number_ok) one positive integer meaning the same for every dimension.
 * *rank is the list's length, 0 for a number, -1 when absent. */
static tpu_status trace_dims(trace_ctx *c, const cJSON *obj, const char *base,
                             const char *key, int req, int number_ok,
                             int vals[GRAPH_MAX_SP], int *rank)
{
    char p[320];
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    int n = 0, ok;
    trace_path(p, sizeof p, base, key);
    *rank = -1;
    if (!v) {
        if (req)
            return trace_fail(c, base, "missing key '%s'", key);
        return TPU_OK;
    }
    if (number_ok && trace_is_int(v, 1, GRAPH_DIM_MAX)) {
        for (int d = 0; d < GRAPH_MAX_SP; d++)
            vals[d] = (int)v->valuedouble;
        *rank = 0;
        return TPU_OK;
    }
    ok = cJSON_IsArray(v);
    if (ok) {
        n = cJSON_GetArraySize(v);
        ok = n == 2 || n == 3;
    }
    int d = 0;
    for (const cJSON *e = ok ? v->child : NULL; e && ok; e = e->next, d++) {
        ok = trace_is_int(e, 1, GRAPH_DIM_MAX);
        if (ok)
            vals[d] = (int)e->valuedouble;
    }
    if (!ok)
        return trace_fail(c, p,
                          "expected %s2 or 3 positive integers (each at most "
                          "%d)",
                          number_ok ? "a positive integer or a list of " : "",
                          GRAPH_DIM_MAX);
    *rank = n;
    return TPU_OK;
}

/* Where a layer index lives in the trace, for "already defined" notes. */
static void trace_where(const graph *g, int idx, char *buf, size_t n)
{
    if (idx < g->n_inputs)
        snprintf(buf, n, "graph.inputs[%d]", idx);
    else
        snprintf(buf, n, "graph.layers[%d]", idx - g->n_inputs);
}

/* Where in graph.layers a name not defined yet stands: the first entry at
 * or after self with that name, -1 when there is none. */
static int trace_defined_at(const cJSON *all, const char *name, int self)
{
    int j = 0;
    for (const cJSON *l = all ? all->child : NULL; l; l = l->next, j++) {
        const cJSON *nm = cJSON_IsObject(l)
                              ? cJSON_GetObjectItemCaseSensitive(l, "name")
                              : NULL;
        if (j >= self && cJSON_IsString(nm) && nm->valuestring &&
            strcmp(nm->valuestring, name) == 0)
            return j;
    }
    return -1;
}

/* Resolves one name of `in` to an earlier layer; a name not defined yet
 * is told apart: itself, later in the list (out of order), or nowhere. */
static tpu_status trace_ref(trace_ctx *c, const graph *g, const cJSON *all,
                            const cJSON *v, const char *p, int self,
                            int *out)
{
    char q[64];
    if (!cJSON_IsString(v) || !v->valuestring)
        return trace_fail(c, p, "expected a layer or input name, found %s",
                          trace_type(v));
    int idx = graph_find(g, v->valuestring);
    if (idx >= 0) {
        *out = idx;
        return TPU_OK;
    }
    int at = trace_defined_at(all, v->valuestring, self);
    if (at == self)
        return trace_fail(c, p, "layer '%s' takes itself as input",
                          trace_q(q, sizeof q, v->valuestring));
    if (at > self)
        return trace_fail(c, p,
                          "'%s' is used before it is defined "
                          "(graph.layers[%d]); layers must come in order",
                          trace_q(q, sizeof q, v->valuestring), at);
    return trace_fail(c, p, "no input or layer named '%s'",
                      trace_q(q, sizeof q, v->valuestring));
}

static const char *const trace_op_words[] = {
    "input",   "conv",    "conv_transpose", "dense",   "batchnorm",
    "relu",    "sigmoid", "flatten",        "global_avgpool",
    "add",     "concat",  "maxpool",        "avgpool", "upsample",
    "dropout", "loss",    NULL};
static const char *const trace_loss_words[] = {
    "softmax_xent", "sigmoid_focal", "dice", "l2", "smooth_l1", NULL};
static const char *const trace_pad_words[] = {"valid", "same", NULL};
static const char *const trace_dtype_words[] = {"bf16", "f32", NULL};
static const char *const trace_mode_words[] = {"infer", "train", NULL};

/* Keys each op accepts beyond name, op, in, dtype, comment. */
static const char *const *trace_op_keys(graph_op op)
{
    static const char *const conv[] = {
        "name",    "op",       "in",       "dtype",        "comment", "filters",
        "kernel",  "strides",  "padding",  "dilation",     "use_bias",
        "share_weights", "trainable", "groups", NULL};
    static const char *const conv_t[] = {
        "name",    "op",      "in",       "dtype",        "comment",
        "filters", "kernel",  "strides",  "padding",      "use_bias",
        "share_weights", "trainable", NULL};
    static const char *const dense[] = {"name",     "op",    "in",
                                        "dtype",    "comment", "units",
                                        "use_bias", "trainable", NULL};
    static const char *const bn[] = {"name",    "op",        "in", "dtype",
                                     "comment", "trainable", NULL};
    static const char *const plain[] = {"name", "op", "in", "dtype",
                                        "comment", NULL};
    static const char *const pool[] = {"name",   "op",      "in",
                                       "dtype",  "comment", "window",
                                       "strides", "padding", NULL};
    static const char *const up[] = {"name",    "op",     "in", "dtype",
                                     "comment", "factor", NULL};
    static const char *const drop[] = {"name",    "op",   "in", "dtype",
                                       "comment", "rate", NULL};
    static const char *const loss[] = {"name",    "op",   "in", "dtype",
                                       "comment", "kind", NULL};
    switch (op) {
    case GOP_CONV: return conv;
    case GOP_CONV_T: return conv_t;
    case GOP_DENSE: return dense;
    case GOP_BATCHNORM: return bn;
    case GOP_MAXPOOL:
    case GOP_AVGPOOL: return pool;
    case GOP_UPSAMPLE: return up;
    case GOP_DROPOUT: return drop;
    case GOP_LOSS: return loss;
    default: return plain;
    }
}

/* A per-dimension list's length must match the input's spatial rank (a
 * flat input is refused by shape inference with its own message). */
static tpu_status trace_rank(trace_ctx *c, const glayer *src, const char *base,
                             const char *key, int rank)
{
    char p[320], q[64];
    if (rank <= 0 || src->out.nsp == 0 || rank == src->out.nsp)
        return TPU_OK;
    trace_path(p, sizeof p, base, key);
    return trace_fail(c, p, "%d numbers for the %dD input '%s'; expected %d",
                      rank, src->out.nsp, trace_q(q, sizeof q, src->name),
                      src->out.nsp);
}

/* A layer's or input's name must be new: names are how layers refer to
 * each other. */
static tpu_status trace_new_name(trace_ctx *c, const graph *g,
                                 const char *base, const char *name)
{
    char p[320], q[64], w[64];
    int prev = graph_find(g, name);
    if (prev < 0)
        return TPU_OK;
    trace_where(g, prev, w, sizeof w);
    trace_path(p, sizeof p, base, "name");
    return trace_fail(c, p, "'%s' is already defined (%s)",
                      trace_q(q, sizeof q, name), w);
}

/* Adds the layer read into g->layers[g->n_layers] and infers its shape; a
 * refusal is placed at base.at, or (at NULL) at the key the inference
 * names. */
static tpu_status trace_commit(trace_ctx *c, graph *g, const char *base,
                               const char *at)
{
    const char *key = "";
    char p[320];
    g->n_layers++;
    graph_index_add(g, g->n_layers - 1);
    tpu_status st = graph_infer_layer(g, g->n_layers - 1, at ? NULL : &key,
                                      c->err);
    if (!st)
        return TPU_OK;
    char why[sizeof c->err->msg];
    memcpy(why, c->err->msg, sizeof why);
    trace_path(p, sizeof p, base, at ? at : key);
    return trace_fail(c, p, "%s", why);
}

/* What every layer has: an object with a known op (which decides the
 * allowed keys), a new name, a dtype; and the defaults of the rest. */
static tpu_status trace_layer_head(trace_ctx *c, const graph *g,
                                   const cJSON *o, const char *base,
                                   glayer *L)
{
    char p[320];
    int op = -1, dt = 0;
    const char *cm;
    tpu_status st;
    if (!cJSON_IsObject(o))
        return trace_fail(c, base, "expected an object, found %s",
                          trace_type(o));
    if ((st = trace_enum(c, o, base, "op", 1, trace_op_words, &op)))
        return st;
    if (op == GOP_INPUT) {
        trace_path(p, sizeof p, base, "op");
        return trace_fail(c, p, "'input' is not a layer op; list inputs in "
                          "graph.inputs");
    }
    L->op = (graph_op)op;
    if ((st = trace_keys(c, o, base, trace_op_keys(L->op),
                         graph_op_name(L->op))))
        return st;
    if ((st = trace_name(c, o, base, "name", 1, L->name, sizeof L->name)))
        return st;
    if ((st = trace_new_name(c, g, base, L->name)))
        return st;
    L->dtype_bytes = 2;
    L->share_from = -1;
    L->pad_same = 1;
    for (int d = 0; d < GRAPH_MAX_SP; d++)
        L->kernel[d] = L->strides[d] = L->dilation[d] = L->factor[d] = 1;
    if ((st = trace_enum(c, o, base, "dtype", 0, trace_dtype_words, &dt)))
        return st;
    L->dtype_bytes = dt ? 4 : 2;
    return trace_str(c, o, base, "comment", 0, &cm);
}

/* in: one name, or a list for add, concat and loss. */
static tpu_status trace_layer_in(trace_ctx *c, const graph *g,
                                 const cJSON *all, const cJSON *o,
                                 const char *base, int j, glayer *L)
{
    char p[320], pe[340];
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(o, "in");
    tpu_status st;
    trace_path(p, sizeof p, base, "in");
    if (!in)
        return trace_fail(c, base, "missing key 'in'");
    if (!cJSON_IsArray(in)) {
        if (L->op == GOP_ADD || L->op == GOP_CONCAT)
            return trace_fail(c, p, "expected a list of 2 to %d names, "
                              "found %s", GRAPH_MAX_IN, trace_type(in));
        if ((st = trace_ref(c, g, all, in, p, j, &L->in[0])))
            return st;
        L->n_in = 1;
        return TPU_OK;
    }
    int n = cJSON_GetArraySize(in), k = 0;
    int min = L->op == GOP_LOSS ? 1 : 2;
    if (L->op != GOP_ADD && L->op != GOP_CONCAT && L->op != GOP_LOSS)
        return trace_fail(c, p, "expected one layer name (only add, "
                          "concat and loss take a list), found a list");
    if (n < min || n > GRAPH_MAX_IN)
        return trace_fail(c, p, "expected a list of %d to %d names, "
                          "found %d", min, GRAPH_MAX_IN, n);
    for (const cJSON *e = in->child; e; e = e->next, k++) {
        snprintf(pe, sizeof pe, "%s[%d]", p, k);
        if ((st = trace_ref(c, g, all, e, pe, j, &L->in[k])))
            return st;
    }
    L->n_in = n;
    return TPU_OK;
}

/* strides and dilation list one number per kernel dimension. */
static tpu_status trace_like_kernel(trace_ctx *c, const char *base,
                                    const char *key, int rank, int krank)
{
    char p[320];
    if (rank <= 0 || rank == krank)
        return TPU_OK;
    trace_path(p, sizeof p, base, key);
    return trace_fail(c, p, "%d numbers for a %d-number kernel", rank, krank);
}

/* share_weights: an earlier conv or conv_transpose; a chain of sharers
 * resolves to the owner. */
static tpu_status trace_share(trace_ctx *c, const graph *g, const cJSON *o,
                              const char *base, glayer *L)
{
    char p[320], q[64];
    const char *sh;
    tpu_status st;
    if ((st = trace_str(c, o, base, "share_weights", 0, &sh)) || !sh)
        return st;
    int t = graph_find(g, sh);
    trace_path(p, sizeof p, base, "share_weights");
    if (t < 0)
        return trace_fail(c, p, "no earlier layer named '%s'",
                          trace_q(q, sizeof q, sh));
    if (g->layers[t].op != GOP_CONV && g->layers[t].op != GOP_CONV_T)
        return trace_fail(c, p, "'%s' is a %s, not a conv",
                          trace_q(q, sizeof q, sh),
                          graph_op_name(g->layers[t].op));
    if (g->layers[t].share_from >= 0)
        t = g->layers[t].share_from;
    L->share_from = t;
    return TPU_OK;
}

static tpu_status trace_conv(trace_ctx *c, const graph *g, const cJSON *o,
                             const char *base, const glayer *src, glayer *L)
{
    int64_t n64;
    int pad = 1, rank, krank;
    tpu_status st;
    if ((st = trace_int(c, o, base, "filters", 1, 1, GRAPH_DIM_MAX, &n64)))
        return st;
    L->filters = (int)n64;
    if ((st = trace_dims(c, o, base, "kernel", 1, 0, L->kernel, &krank)))
        return st;
    if ((st = trace_rank(c, src, base, "kernel", krank)))
        return st;
    if ((st = trace_dims(c, o, base, "strides", 0, 1, L->strides, &rank)))
        return st;
    if ((st = trace_like_kernel(c, base, "strides", rank, krank)))
        return st;
    if (L->op == GOP_CONV) {
        /* whether it divides the channels is shape inference's check */
        n64 = 1;
        if ((st = trace_int(c, o, base, "groups", 0, 1, GRAPH_DIM_MAX,
                            &n64)))
            return st;
        L->groups = (int)n64;
        if ((st = trace_dims(c, o, base, "dilation", 0, 1, L->dilation,
                             &rank)))
            return st;
        if ((st = trace_like_kernel(c, base, "dilation", rank, krank)))
            return st;
    }
    if ((st = trace_enum(c, o, base, "padding", 0, trace_pad_words, &pad)))
        return st;
    L->pad_same = pad;
    L->use_bias = 0;
    if ((st = trace_bool(c, o, base, "use_bias", &L->use_bias)))
        return st;
    return trace_share(c, g, o, base, L);
}

static tpu_status trace_pool(trace_ctx *c, const cJSON *o, const char *base,
                             const glayer *src, glayer *L)
{
    int pad = 0, rank, krank;
    tpu_status st;
    if ((st = trace_dims(c, o, base, "window", 1, 1, L->kernel, &krank)))
        return st;
    if ((st = trace_rank(c, src, base, "window", krank)))
        return st;
    /* strides default to the window (Keras) */
    memcpy(L->strides, L->kernel, sizeof L->strides);
    if ((st = trace_dims(c, o, base, "strides", 0, 1, L->strides, &rank)))
        return st;
    if ((st = trace_rank(c, src, base, "strides", rank)))
        return st;
    if ((st = trace_enum(c, o, base, "padding", 0, trace_pad_words, &pad)))
        return st;
    L->pad_same = pad;
    return TPU_OK;
}

static tpu_status trace_dropout(trace_ctx *c, const cJSON *o,
                                const char *base, glayer *L)
{
    char p[320], f[64];
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "rate");
    trace_path(p, sizeof p, base, "rate");
    if (!v)
        return trace_fail(c, base, "missing key 'rate'");
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0) ||
        !(v->valuedouble < 1))
        return trace_fail(c, p, "expected a number in [0, 1), %s",
                          trace_found(f, sizeof f, v));
    L->rate = v->valuedouble;
    return TPU_OK;
}

/* The keys particular to the layer's op. */
static tpu_status trace_op_params(trace_ctx *c, const graph *g,
                                  const cJSON *o, const char *base,
                                  glayer *L)
{
    const glayer *src = &g->layers[L->in[0]];
    int64_t n64;
    int rank, k = 0;
    tpu_status st;
    switch (L->op) {
    case GOP_CONV:
    case GOP_CONV_T:
        return trace_conv(c, g, o, base, src, L);
    case GOP_DENSE:
        if ((st = trace_int(c, o, base, "units", 1, 1, GRAPH_DIM_MAX, &n64)))
            return st;
        L->filters = (int)n64;
        L->use_bias = 1;
        return trace_bool(c, o, base, "use_bias", &L->use_bias);
    case GOP_MAXPOOL:
    case GOP_AVGPOOL:
        return trace_pool(c, o, base, src, L);
    case GOP_UPSAMPLE:
        if ((st = trace_dims(c, o, base, "factor", 1, 1, L->factor, &rank)))
            return st;
        return trace_rank(c, src, base, "factor", rank);
    case GOP_DROPOUT:
        return trace_dropout(c, o, base, L);
    case GOP_LOSS:
        if ((st = trace_enum(c, o, base, "kind", 1, trace_loss_words, &k)))
            return st;
        L->loss = (graph_loss)k;
        return TPU_OK;
    default:
        return TPU_OK;
    }
}

/* trainable, on the layers with weights.  Shared weights are frozen or
 * trained together: a sharer takes its owner's setting and may only
 * repeat it. */
static tpu_status trace_trainable(trace_ctx *c, const graph *g,
                                  const cJSON *o, const char *base,
                                  glayer *L)
{
    char p[320], q[64];
    int tr = -1;
    tpu_status st;
    if (L->op != GOP_CONV && L->op != GOP_CONV_T && L->op != GOP_DENSE &&
        L->op != GOP_BATCHNORM)
        return TPU_OK;
    if ((st = trace_bool(c, o, base, "trainable", &tr)))
        return st;
    if (L->share_from < 0) {
        L->frozen = tr == 0;
        return TPU_OK;
    }
    const glayer *O = &g->layers[L->share_from];
    if (tr >= 0 && tr == O->frozen) {
        trace_path(p, sizeof p, base, "trainable");
        return trace_fail(c, p,
                          "%s, but the weights it shares with '%s' are %s",
                          tr ? "true" : "false",
                          trace_q(q, sizeof q, O->name),
                          O->frozen ? "frozen" : "trainable");
    }
    L->frozen = O->frozen;
    return TPU_OK;
}

/* graph.layers[j]: read into the next free slot, then added. */
static tpu_status trace_layer(trace_ctx *c, graph *g, const cJSON *all,
                              const cJSON *o, int j)
{
    char base[64];
    glayer *L = &g->layers[g->n_layers];
    tpu_status st;
    snprintf(base, sizeof base, "graph.layers[%d]", j);
    if ((st = trace_layer_head(c, g, o, base, L)) ||
        (st = trace_layer_in(c, g, all, o, base, j, L)) ||
        (st = trace_op_params(c, g, o, base, L)) ||
        (st = trace_trainable(c, g, o, base, L)))
        return st;
    return trace_commit(c, g, base, NULL);
}

/* shape: [C], [H,W,C] or [D,H,W,C], channels last. */
static tpu_status trace_shape(trace_ctx *c, const cJSON *o, const char *base,
                              glayer *L)
{
    char p[320];
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(o, "shape");
    int n = 0, ok;
    trace_path(p, sizeof p, base, "shape");
    if (!sh)
        return trace_fail(c, base, "missing key 'shape'");
    ok = cJSON_IsArray(sh);
    if (ok) {
        n = cJSON_GetArraySize(sh);
        ok = n == 1 || n == 3 || n == 4;
    }
    int d = 0;
    for (const cJSON *e = ok ? sh->child : NULL; e && ok; e = e->next, d++) {
        ok = trace_is_int(e, 1, GRAPH_DIM_MAX);
        if (ok && d == n - 1)
            L->out.c = (int64_t)e->valuedouble;
        else if (ok)
            L->out.sp[d] = (int64_t)e->valuedouble;
    }
    if (!ok)
        return trace_fail(c, p,
                          "expected 1, 3 or 4 positive integers ([C], "
                          "[H,W,C] or [D,H,W,C]), each at most %d",
                          GRAPH_DIM_MAX);
    L->out.nsp = n - 1;
    return TPU_OK;
}

static tpu_status trace_input(trace_ctx *c, graph *g, const cJSON *o, int j)
{
    static const char *const keys[] = {"name", "shape", "dtype", "comment",
                                       NULL};
    char base[64];
    glayer *L = &g->layers[g->n_layers];
    int dt = 0;
    tpu_status st;
    const char *cm;

    snprintf(base, sizeof base, "graph.inputs[%d]", j);
    if (!cJSON_IsObject(o))
        return trace_fail(c, base, "expected an object, found %s",
                          trace_type(o));
    if ((st = trace_keys(c, o, base, keys, "an input")))
        return st;
    if ((st = trace_name(c, o, base, "name", 1, L->name, sizeof L->name)))
        return st;
    if ((st = trace_new_name(c, g, base, L->name)))
        return st;
    if ((st = trace_enum(c, o, base, "dtype", 0, trace_dtype_words, &dt)))
        return st;
    if ((st = trace_str(c, o, base, "comment", 0, &cm)))
        return st;
    L->op = GOP_INPUT;
    L->dtype_bytes = dt ? 4 : 2;
    L->share_from = -1;
    if ((st = trace_shape(c, o, base, L)))
        return st;
    return trace_commit(c, g, base, "shape");
}

/* One entry of input_partition_dims: null, or a list of positive ints
 * whose product is num_cores_per_replica.  rank 0 = any length (labels). */
static tpu_status trace_pdims(trace_ctx *c, const graph *g, const cJSON *e,
                              int k, const glayer *input, int out[],
                              int *out_rank, int *listed)
{
    char p[96], q[64];
    int rank = input ? 2 + input->out.nsp : 0;
    int n, d = 0;
    int64_t prod = 1;
    snprintf(p, sizeof p, "run.input_partition_dims[%d]", k);
    *listed = 0;
    if (cJSON_IsNull(e)) {
        for (d = 0; d < rank; d++)
            out[d] = 1;
        *out_rank = rank;
        return TPU_OK;
    }
    if (!cJSON_IsArray(e))
        return trace_fail(c, p, "expected null or a list of positive "
                          "integers, found %s", trace_type(e));
    n = cJSON_GetArraySize(e);
    if (input && n != rank)
        return trace_fail(c, p,
                          "expected %d factors (N, %sC) for the %dD input "
                          "'%s', found %d",
                          rank,
                          input->out.nsp == 3   ? "D, H, W, "
                          : input->out.nsp == 2 ? "H, W, "
                                                : "",
                          input->out.nsp, trace_q(q, sizeof q, input->name),
                          n);
    if (!input && (n < 2 || n > GRAPH_MAX_PDIMS))
        return trace_fail(c, p, "expected 2 to %d factors, found %d",
                          GRAPH_MAX_PDIMS, n);
    for (const cJSON *v = e->child; v; v = v->next, d++) {
        char pv[112];
        snprintf(pv, sizeof pv, "%s[%d]", p, d);
        if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) ||
            v->valuedouble < 1 || v->valuedouble > 4096)
            return trace_fail(c, pv, "expected a positive integer (at most "
                              "4096), %s", trace_found(q, sizeof q, v));
        out[d] = (int)v->valuedouble;
        prod *= out[d];
    }
    if (prod != g->cores_per_replica)
        return trace_fail(c, p,
                          "product of the factors is %lld, not "
                          "num_cores_per_replica %d",
                          (long long)prod, g->cores_per_replica);
    if (input) {
        if (out[0] != 1 || out[rank - 1] != 1)
            return trace_fail(c, p,
                              "only spatial dimensions may be split: the N "
                              "and C factors must be 1, found %d and %d",
                              out[0], out[rank - 1]);
        for (d = 0; d < input->out.nsp; d++)
            if (out[d + 1] > input->out.sp[d]) {
                char pv[112];
                snprintf(pv, sizeof pv, "%s[%d]", p, d + 1);
                return trace_fail(c, pv,
                                  "factor %d splits a dimension of only "
                                  "%lld ('%s')",
                                  out[d + 1], (long long)input->out.sp[d],
                                  trace_q(q, sizeof q, input->name));
            }
    }
    *out_rank = n;
    *listed = 1;
    return TPU_OK;
}

/* "[1,2,1,1]" */
static void trace_list(char *buf, size_t n, const int dims[], int rank)
{
    size_t len = 0;
    buf[0] = 0;
    for (int d = 0; d < rank && len + 1 < n; d++) {
        int w = snprintf(buf + len, n - len, "%s%d%s", d ? "," : "[",
                         dims[d], d + 1 == rank ? "]" : "");
        if (w < 0)
            break;
        len += (size_t)w;
    }
}

/* Input k > 0 (its entry checked by trace_pdims): replicated when the
 * entry is null or all ones, else split exactly like the first input.
 * The plan has one set of factors over one spatial rank, the first
 * input's, so any other split cannot be honoured; refusing it is better
 * than splitting the input like the first without saying so. */
static tpu_status trace_pdims_like_first(trace_ctx *c, graph *g, int k,
                                         const glayer *input,
                                         const int dims[], int rank)
{
    char p[96], q[64], want[96], first[96];
    int ones = 1, first_ones = 1;
    for (int d = 0; d < rank; d++)
        ones &= dims[d] == 1;
    if (ones) {
        g->layers[k].whole = 1;
        return TPU_OK;
    }
    for (int d = 0; d < g->pdims_rank; d++)
        first_ones &= g->pdims[d] == 1;
    if (rank == g->pdims_rank &&
        input->out.nsp == g->layers[0].out.nsp &&
        memcmp(dims, g->pdims, sizeof(int) * (size_t)rank) == 0)
        return TPU_OK;
    snprintf(p, sizeof p, "run.input_partition_dims[%d]", k);
    trace_list(want, sizeof want, dims, rank);
    trace_list(first, sizeof first, g->pdims, g->pdims_rank);
    if (first_ones)
        return trace_fail(c, p,
                          "tpuemu splits every input like the first, and "
                          "the first ('%s') is not split; '%s' asks for %s: "
                          "give it null (replicated) too",
                          g->layers[0].name, trace_q(q, sizeof q, input->name),
                          want);
    if (input->out.nsp != g->layers[0].out.nsp)
        return trace_fail(c, p,
                          "tpuemu splits one spatial rank per trace, the "
                          "first input's (%dD, %s); '%s' (%s) asks for %s: "
                          "give it null (replicated)",
                          g->layers[0].out.nsp, first,
                          trace_q(q, sizeof q, input->name),
                          input->out.nsp ? (input->out.nsp == 3 ? "3D" : "2D")
                                         : "flat",
                          want);
    return trace_fail(c, p,
                      "tpuemu splits every input like the first (%s); '%s' "
                      "asks for %s: give it the same list or null "
                      "(replicated)",
                      first, trace_q(q, sizeof q, input->name), want);
}

/* run.input_partition_dims: one entry per input, then the labels'.  The
 * first input's entry is the plan's split; the others must match it or
 * be replicated. */
static tpu_status trace_partition(trace_ctx *c, graph *g, const cJSON *ipd)
{
    int k = 0;
    tpu_status st;
    if (!cJSON_IsArray(ipd))
        return trace_fail(c, "run.input_partition_dims",
                          "expected a list (one entry per input, then the "
                          "labels' entry), found %s",
                          trace_type(ipd));
    if (cJSON_GetArraySize(ipd) != g->n_inputs + 1)
        return trace_fail(c, "run.input_partition_dims",
                          "expected %d entries (one per input, then the "
                          "labels' entry), found %d",
                          g->n_inputs + 1, cJSON_GetArraySize(ipd));
    for (const cJSON *e = ipd->child; e; e = e->next, k++) {
        int dims[GRAPH_MAX_PDIMS], rank = 0, listed = 0;
        const glayer *input = k < g->n_inputs ? &g->layers[k] : NULL;
        if ((st = trace_pdims(c, g, e, k, input, dims, &rank, &listed)))
            return st;
        if (k == 0) {
            memcpy(g->pdims, dims, sizeof(int) * (size_t)rank);
            g->pdims_rank = rank;
            if (!listed)
                g->layers[0].whole = 1;
        } else if (input &&
                   (st = trace_pdims_like_first(c, g, k, input, dims,
                                                rank))) {
            return st;
        }
        if (!input)
            g->labels_partitioned = listed;
    }
    return TPU_OK;
}

static tpu_status trace_run(trace_ctx *c, graph *g, const cJSON *run)
{
    static const char *const keys[] = {"mode",
                                       "global_batch",
                                       "num_cores_per_replica",
                                       "input_partition_dims",
                                       "comment",
                                       NULL};
    const cJSON *ipd;
    const char *cm;
    int64_t n64 = 1;
    int mode = 1;
    tpu_status st;
    if (!cJSON_IsObject(run))
        return trace_fail(c, "run", "expected an object, found %s",
                          trace_type(run));
    if ((st = trace_keys(c, run, "run", keys, NULL)))
        return st;
    if ((st = trace_enum(c, run, "run", "mode", 1, trace_mode_words, &mode)))
        return st;
    g->train = mode;
    if ((st = trace_int(c, run, "run", "global_batch", 1, 1, GRAPH_DIM_MAX,
                        &g->global_batch)))
        return st;
    if ((st = trace_int(c, run, "run", "num_cores_per_replica", 0, 1, 2048,
                        &n64)))
        return st;
    g->cores_per_replica = (int)n64;
    if ((st = trace_str(c, run, "run", "comment", 0, &cm)))
        return st;

    /* Without input_partition_dims nothing is split: N, every spatial
     * axis and C by 1. */
    g->pdims_rank = 2 + g->layers[0].out.nsp;
    for (int d = 0; d < GRAPH_MAX_PDIMS; d++)
        g->pdims[d] = 1;
    ipd = cJSON_GetObjectItemCaseSensitive(run, "input_partition_dims");
    if (!ipd || cJSON_IsNull(ipd))
        return TPU_OK;
    return trace_partition(c, g, ipd);
}

static tpu_status trace_reference(trace_ctx *c, graph *g, const cJSON *ref)
{
    static const char *const keys[] = {"step_time_s", "source", "comment",
                                       NULL};
    const cJSON *v;
    const char *s;
    tpu_status st;
    if (!cJSON_IsObject(ref))
        return trace_fail(c, "reference", "expected an object, found %s",
                          trace_type(ref));
    if ((st = trace_keys(c, ref, "reference", keys, NULL)))
        return st;
    v = cJSON_GetObjectItemCaseSensitive(ref, "step_time_s");
    if (!v)
        return trace_fail(c, "reference", "missing key 'step_time_s'");
    if (!cJSON_IsNumber(v) || !(v->valuedouble > 0) ||
        !(v->valuedouble < 1e9))
    {
        char f[64];
        return trace_fail(c, "reference.step_time_s",
                          "expected a positive number of seconds, %s",
                          trace_found(f, sizeof f, v));
    }
    g->has_reference = 1;
    g->reference_step_s = v->valuedouble;
    if ((st = trace_str(c, ref, "reference", "source", 0, &s)))
        return st;
    if ((st = trace_str(c, ref, "reference", "comment", 0, &s)))
        return st;
    s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ref, "source"));
    if (s) {
        /* Free text: kept as far as it fits, never refused for length. */
        size_t n = strlen(s);
        if (n >= sizeof g->reference_source) {
            n = sizeof g->reference_source - 1;
            /* not inside a UTF-8 character (validate prints it as JSON) */
            while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80)
                n--;
        }
        /* printed to the terminal: no escape sequences, one line (a
         * multi-byte control becomes one space) */
        size_t j = 0;
        for (size_t i = 0; i < n;) {
            size_t k = rfile_ctrl_len((const unsigned char *)s + i, NULL);
            if (k) {
                g->reference_source[j++] = ' ';
                i += k;
            } else {
                g->reference_source[j++] = s[i++];
            }
        }
        g->reference_source[j] = 0;
    }
    return TPU_OK;
}

/* Every string of the document, keys included, must be UTF-8 without NUL:
 * names are echoed in messages and reports (a report with invalid UTF-8
 * is not JSON), and a NUL would cut a name short.  `path` is a shared
 * buffer holding the JSON path of v; each level appends and restores. */
static tpu_status trace_text_ok(trace_ctx *c, const char *s, const char *path,
                                const char *what)
{
    char why[96];
    const char *bad = rfile_text_problem(s, 1, why, sizeof why);
    /* a mark without a \u0000 in the text was six 0xFF bytes there */
    if (bad && !c->nul_marked && strncmp(bad, "contains a NUL", 14) == 0)
        snprintf(why, sizeof why, "is not valid UTF-8 (byte 0xff)");
    if (bad)
        return trace_fail(c, path, "%s %s", what, why);
    return TPU_OK;
}

static tpu_status trace_strings(trace_ctx *c, const cJSON *v, char *path,
                                size_t cap)
{
    size_t at = strlen(path);
    int i = 0;
    tpu_status st;
    if (cJSON_IsString(v) && v->valuestring)
        return trace_text_ok(c, v->valuestring, path, "the string");
    if (!cJSON_IsArray(v) && !cJSON_IsObject(v))
        return TPU_OK;
    for (const cJSON *e = v->child; e; e = e->next, i++) {
        if (cJSON_IsObject(v)) {
            char q[64];
            const char *k = e->string ? e->string : "";
            if (at == 0)
                snprintf(path, cap, "%s", trace_q(q, sizeof q, k));
            else
                snprintf(path + at, cap - at, ".%s", trace_q(q, sizeof q, k));
            if ((st = trace_text_ok(c, k, path, "the key")))
                return st;
        } else {
            snprintf(path + at, cap - at, "[%d]", i);
        }
        if ((st = trace_strings(c, e, path, cap)))
            return st;
        path[at] = 0;
    }
    return TPU_OK;
}

/* The file name without directory and ".json".  A file name may hold any
 * byte, but the trace's name is printed by run and written to the report,
 * which check and view refuse unless it is UTF-8 without control
 * characters (the "name" key's rule): so a control character (as
 * rfile_ctrl_len counts them) or a byte that is not UTF-8 becomes '?',
 * and a long name is cut before a character that does not fit whole. */
static void trace_default_name(graph *g, const char *path)
{
    const char *b = strrchr(path, '/');
    size_t n, i = 0, j = 0;
    b = b ? b + 1 : path;
    n = strlen(b);
    if (n > 5 && strcmp(b + n - 5, ".json") == 0)
        n -= 5;
    while (i < n) {
        const unsigned char *u = (const unsigned char *)b + i;
        size_t k = rfile_utf8_len(u);
        int bad = k == 0 || i + k > n || rfile_ctrl_len(u, NULL) != 0;
        size_t w = bad ? 1 : k;
        if (j + w >= sizeof g->name)
            break;
        if (bad)
            g->name[j] = '?';
        else
            memcpy(g->name + j, b + i, k);
        i += k ? k : 1;
        j += w;
    }
    g->name[j] = 0;
}

/* graph.inputs or graph.layers: present, a list, not empty. */
static tpu_status trace_list_of(trace_ctx *c, const cJSON *v, const char *key)
{
    char p[32];
    if (!v)
        return trace_fail(c, "graph", "missing key '%s'", key);
    snprintf(p, sizeof p, "graph.%s", key);
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) < 1)
        return trace_fail(c, p, "expected a non-empty list of %s, found %s",
                          key,
                          cJSON_IsArray(v) ? "an empty list" : trace_type(v));
    return TPU_OK;
}

/* graph: the inputs, then the layers, each defined before it is used. */
static tpu_status trace_graph(trace_ctx *c, graph *g, const cJSON *gr)
{
    static const char *const keys[] = {"inputs", "layers", "comment", NULL};
    const cJSON *inputs, *layers, *v;
    const char *s;
    int n_in, n_layers, j;
    tpu_status st;
    if (!cJSON_IsObject(gr))
        return trace_fail(c, "graph", "expected an object, found %s",
                          trace_type(gr));
    if ((st = trace_keys(c, gr, "graph", keys, NULL)))
        return st;
    if ((st = trace_str(c, gr, "graph", "comment", 0, &s)))
        return st;
    inputs = cJSON_GetObjectItemCaseSensitive(gr, "inputs");
    layers = cJSON_GetObjectItemCaseSensitive(gr, "layers");
    if ((st = trace_list_of(c, inputs, "inputs")) ||
        (st = trace_list_of(c, layers, "layers")))
        return st;
    n_in = cJSON_GetArraySize(inputs);
    n_layers = cJSON_GetArraySize(layers);
    if (n_in > GRAPH_LAYERS_MAX)
        return trace_fail(c, "graph.inputs", "%d inputs, more than the limit "
                          "of %d", n_in, GRAPH_LAYERS_MAX);
    if (n_layers > GRAPH_LAYERS_MAX)
        return trace_fail(c, "graph.layers", "%d layers, more than the limit "
                          "of %d", n_layers, GRAPH_LAYERS_MAX);
    g->layers = calloc((size_t)n_in + (size_t)n_layers, sizeof *g->layers);
    if (!g->layers)
        return tpu_fail(c->err, TPU_ERR_SYSTEM,
                        "%s: out of memory for %d layers", c->file,
                        n_in + n_layers);
    if ((st = graph_index_reserve(g, n_in + n_layers, c->err)))
        return tpu_fail(c->err, st, "%s: out of memory for %d layers",
                        c->file, n_in + n_layers);
    j = 0;
    for (v = inputs->child; v; v = v->next, j++)
        if ((st = trace_input(c, g, v, j)))
            return st;
    g->n_inputs = n_in;
    j = 0;
    for (v = layers->child; v; v = v->next, j++)
        if ((st = trace_layer(c, g, layers, v, j)))
            return st;
    return TPU_OK;
}

/* format, name and system.  The format first: another tpuemu file's keys
 * would otherwise be reported as unknown trace keys. */
static tpu_status trace_head(trace_ctx *c, graph *g, const cJSON *root,
                             const char *path)
{
    static const char *const keys[] = {"format",    "name",  "system", "run",
                                       "reference", "graph", "comment",
                                       NULL};
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "format");
    const char *s;
    char q[64];
    tpu_status st;
    if (cJSON_IsString(v) && strcmp(v->valuestring, "tpuemu-report/1") == 0)
        return trace_fail(c, "format", "this is a tpuemu report (what run "
                          "--report writes; check and view read it), not a "
                          "trace");
    if (cJSON_IsString(v) && strcmp(v->valuestring, "tpuemu-sweep/1") == 0)
        return trace_fail(c, "format", "this is a sweep file (tpuemu sweep "
                          "reads it), not a trace");
    if ((st = trace_keys(c, root, "(top level)", keys, NULL)))
        return st;
    if ((st = trace_str(c, root, "(top level)", "format", 1, &s)))
        return st;
    if (strcmp(s, "tpuemu-trace/1") != 0)
        return trace_fail(c, "format", "'%s' is not a supported format "
                          "(expected \"tpuemu-trace/1\")",
                          trace_q(q, sizeof q, s));
    trace_default_name(g, path);
    if ((st = trace_name(c, root, "(top level)", "name", 0, g->name,
                         sizeof g->name)))
        return st;
    if ((st = trace_name(c, root, "(top level)", "system", 1, g->system,
                         sizeof g->system)))
        return st;
    return trace_str(c, root, "(top level)", "comment", 0, &s);
}

static tpu_status trace_root(trace_ctx *c, graph *g, const cJSON *root,
                             const char *path)
{
    const cJSON *v;
    tpu_status st;
    if (!cJSON_IsObject(root))
        return trace_fail(c, NULL, "expected a JSON object at the top level, "
                          "found %s", trace_type(root));
    if ((st = trace_head(c, g, root, path)))
        return st;
    v = cJSON_GetObjectItemCaseSensitive(root, "graph");
    if (!v)
        return trace_fail(c, "(top level)", "missing key 'graph'");
    if ((st = trace_graph(c, g, v)))
        return st;
    v = cJSON_GetObjectItemCaseSensitive(root, "run");
    if (!v)
        return trace_fail(c, "(top level)", "missing key 'run'");
    if ((st = trace_run(c, g, v)))
        return st;
    v = cJSON_GetObjectItemCaseSensitive(root, "reference");
    if (v && (st = trace_reference(c, g, v)))
        return st;
    if ((st = graph_finish(g, c->err)))
        return st;
    /* Whether the cores and batch fit the slice depends on --system and
     * --batch, so graph_check_run is the consumer's (sim_run, sim_lower)
     * with the effective values; the name itself must be a slice. */
    return graph_check_system(g->system, c->file, c->err);
}

static int trace_is_ws(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r';
}

static size_t trace_skip_ws(const char *text, size_t len, size_t pos)
{
    while (pos < len && trace_is_ws(text[pos]))
        pos++;
    return pos;
}

/* Why cJSON stopped at end (rfile_json_error tells a cut-off file from a
 * typo). */
static tpu_status trace_syntax_error(trace_ctx *c, const char *text,
                                     size_t len, const char *end)
{
    char why[200];
    size_t pos = (end >= text && end <= text + len) ? (size_t)(end - text)
                                                    : 0;
    rfile_json_error(text, len, pos, why, sizeof why);
    return trace_fail(c, NULL, "%s", why);
}

/* The text as one JSON value with nothing but blanks after it; NULL (with
 * *st) otherwise. */
static cJSON *trace_parse_json(trace_ctx *c, const char *text, size_t len,
                               tpu_status *st)
{
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        *st = trace_syntax_error(c, text, len, end);
        return NULL;
    }
    size_t pos = (end >= text && end <= text + len) ? (size_t)(end - text)
                                                    : len;
    pos = trace_skip_ws(text, len, pos);
    if (pos < len) {
        int line, col, depth;
        rfile_json_where(text, len, pos, &line, &col, &depth);
        cJSON_Delete(root);
        *st = trace_fail(c, NULL, "not valid JSON: unexpected text after "
                         "the top-level value at line %d, column %d",
                         line, col);
        return NULL;
    }
    *st = TPU_OK;
    return root;
}

tpu_status graph_parse(graph *g, const char *text, size_t len,
                       const char *path, tpu_error *err)
{
    trace_ctx c;
    cJSON *root;
    tpu_status st;
    char *marked = NULL;
    int oom;

    memset(g, 0, sizeof *g);
    if (!path)
        path = "(trace)";
    c.file = path;
    c.err = err;
    c.nul_marked = 0;
    if (trace_skip_ws(text, len, 0) == len)
        return trace_fail(&c, NULL, "empty file, expected a JSON object");
    marked = rfile_mark_nuls(text, len, &oom);
    if (oom)
        return tpu_fail(err, TPU_ERR_SYSTEM,
                        "%s: out of memory reading the trace", path);
    if (marked) {
        c.nul_marked = 1;
        text = marked;
    }
    root = trace_parse_json(&c, text, len, &st);
    free(marked);
    if (!root)
        return st;
    if (cJSON_IsObject(root)) {
        char jp[512] = "";
        st = trace_strings(&c, root, jp, sizeof jp);
    }
    if (!st)
        st = trace_root(&c, g, root, path);
    cJSON_Delete(root);
    if (st) {
        tpu_error keep;
        if (err)
            keep = *err;
        graph_free(g);
        if (err)
            *err = keep;
    }
    return st;
}

tpu_status graph_load(graph *g, const char *path, tpu_error *err)
{
    char *buf = NULL;
    size_t len = 0;
    tpu_status st;

    memset(g, 0, sizeof *g);
    st = rfile_read(path, (size_t)TRACE_FILE_MAX, RFILE_PIPE_IDLE_S, &buf,
                    &len, err);
    if (st)
        return st;
    st = graph_parse(g, buf, len, path, err);
    free(buf);
    return st;
}
