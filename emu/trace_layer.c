/* trace_layer — graph.inputs and graph.layers of a trace: each op's keys
 * (docs/TRACE.md), the names a layer takes as input (defined earlier),
 * and the layer's shape, inferred as it is added (graph_infer_layer) so a
 * refusal names the key at fault. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "emu/graph.h"
#include "emu/rfile.h"
#include "emu/trace_internal.h"

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
    "dropout", "loss",    "elementwise",    "activation",
    "roi_align", "layer_norm", "group_norm", "normalize", "pad", "crop",
    "resize", "reshape", "global_maxpool", NULL};
static const char *const trace_ew_words[] = {
    "multiply", "subtract", "maximum", "minimum", "average", "add", NULL};
static const char *const trace_act_words[] = {
    "relu",  "relu6",        "leaky_relu", "elu",     "gelu",
    "swish", "hard_sigmoid", "tanh",       "softmax", "prelu", NULL};
static const char *const trace_loss_words[] = {
    "softmax_xent", "sigmoid_focal", "dice", "l2", "smooth_l1",
    "sigmoid_xent", NULL};
static const char *const trace_pad_words[] = {"valid", "same", NULL};
static const char *const trace_dtype_words[] = {"bf16", "f32", NULL};
static const char *const trace_stats_words[] = {"batch", "moving", NULL};
static const char *const trace_levels_words[] = {"concat", "padded", NULL};

/* Keys each op accepts beyond name, op, in, dtype, comment. */
static const char *const *trace_op_keys(graph_op op)
{
    static const char *const conv[] = {
        "name",    "op",       "in",       "dtype",        "comment", "filters",
        "kernel",  "strides",  "padding",  "dilation",     "use_bias",
        "share_weights", "trainable", "groups", "core", NULL};
    static const char *const conv_t[] = {
        "name",    "op",      "in",       "dtype",        "comment",
        "filters", "kernel",  "strides",  "padding",      "use_bias",
        "share_weights", "trainable", "core", NULL};
    static const char *const dense[] = {
        "name",     "op",        "in",   "dtype",         "comment", "units",
        "use_bias", "trainable", "core", "share_weights", NULL};
    static const char *const bn[] = {"name",    "op",        "in",
                                     "dtype",   "comment",   "trainable",
                                     "statistics", "core",   "scale",
                                     "center",  "share_weights", NULL};
    static const char *const plain[] = {"name",    "op",   "in", "dtype",
                                        "comment", "core", NULL};
    static const char *const flat[] = {"name",    "op",   "in", "dtype",
                                       "comment", "keep", "core", NULL};
    static const char *const roi[] = {"name",    "op",   "in",     "dtype",
                                      "comment", "rois", "output", "levels",
                                      "core",    NULL};
    static const char *const pool[] = {"name",   "op",      "in",
                                       "dtype",  "comment", "window",
                                       "strides", "padding", "core", NULL};
    static const char *const up[] = {"name",    "op",     "in", "dtype",
                                     "comment", "factor", "core", NULL};
    static const char *const drop[] = {"name",    "op",   "in", "dtype",
                                       "comment", "rate", "core", NULL};
    static const char *const loss[] = {"name",    "op",   "in", "dtype",
                                       "comment", "kind", "core", NULL};
    static const char *const act[] = {"name",  "op",        "in",
                                      "dtype", "comment",   "kind",
                                      "alpha", "max_value", "trainable",
                                      "core",  NULL};
    static const char *const ln[] = {"name",    "op",        "in",
                                     "dtype",   "comment",   "trainable",
                                     "core",    "scale",     "center",
                                     "share_weights", NULL};
    static const char *const gn[] = {"name",    "op",        "in",
                                     "dtype",   "comment",   "trainable",
                                     "groups",  "core",      "scale",
                                     "center",  "share_weights", NULL};
    static const char *const nz[] = {"name",    "op",   "in", "dtype",
                                     "comment", "core", "share_weights",
                                     NULL};
    static const char *const pad[] = {"name",    "op",   "in", "dtype",
                                      "comment", "pads", "core", NULL};
    static const char *const crop[] = {"name",    "op",    "in", "dtype",
                                       "comment", "crops", "core", NULL};
    static const char *const rs[] = {"name",    "op",    "in", "dtype",
                                     "comment", "shape", "core", NULL};
    switch (op) {
    case GOP_LAYERNORM: return ln;
    case GOP_GROUPNORM: return gn;
    case GOP_NORMALIZE: return nz;
    case GOP_PAD: return pad;
    case GOP_CROP: return crop;
    case GOP_RESIZE: return up;
    case GOP_RESHAPE: return rs;
    case GOP_CONV: return conv;
    case GOP_CONV_T: return conv_t;
    case GOP_DENSE: return dense;
    case GOP_BATCHNORM: return bn;
    case GOP_MAXPOOL:
    case GOP_AVGPOOL: return pool;
    case GOP_UPSAMPLE: return up;
    case GOP_DROPOUT: return drop;
    case GOP_LOSS: return loss;
    case GOP_ELEMWISE: return loss; /* kind */
    case GOP_ACT: return act;
    case GOP_ROI_ALIGN: return roi;
    case GOP_FLATTEN: return flat;
    default: return plain;
    }
}

/* When a layer's shape is refused, the cause is often the input's shape
 * written as another framework writes it: channels first ([3,224,224] for
 * [224,224,3]) or with the batch folded in ([8,224,224,3]).  Says so in
 * the user's terms (traces are per example and channels-last); "" when no
 * input looks like either. */
static void trace_shape_hint(const graph *g, char *out, size_t cap)
{
    out[0] = 0;
    for (int i = 0; i < g->n_inputs && i < g->n_layers; i++) {
        const gshape *s = &g->layers[i].out;
        if (s->nsp < 2)
            continue;
        char shp[96];
        size_t n = 0;
        for (int d = 0; d < s->nsp && n < sizeof shp; d++)
            n += (size_t)snprintf(shp + n, sizeof shp - n, "%s%lld",
                                  d ? "," : "[", (long long)s->sp[d]);
        if (n < sizeof shp)
            snprintf(shp + n, sizeof shp - n, ",%lld]", (long long)s->c);
        if (s->sp[0] <= 4 && s->c >= 16 && s->sp[1] >= 16) {
            char cl[96];
            size_t m = 0;
            for (int d = 1; d < s->nsp && m < sizeof cl; d++)
                m += (size_t)snprintf(cl + m, sizeof cl - m, "%s%lld",
                                      d > 1 ? "," : "[", (long long)s->sp[d]);
            if (m < sizeof cl)
                snprintf(cl + m, sizeof cl - m, ",%lld,%lld]",
                         (long long)s->c, (long long)s->sp[0]);
            snprintf(out, cap,
                     " (shapes are per example and channels-last: input "
                     "'%.64s' %.96s looks channels-first, %.96s)",
                     g->layers[i].name, shp, cl);
            return;
        }
        if (s->nsp == 3 && s->sp[0] <= 64 && s->sp[0] * 4 < s->sp[1] &&
            s->sp[0] * 4 < s->sp[2]) {
            snprintf(out, cap,
                     " (shapes are per example: if input '%.64s' %.96s holds "
                     "a batch of %lld, drop it; the batch is "
                     "run.global_batch)",
                     g->layers[i].name, shp, (long long)s->sp[0]);
            return;
        }
    }
}

/* A per-dimension list's length must match the input's spatial rank (a
 * flat input is refused by shape inference with its own message). */
static tpu_status trace_rank(trace_ctx *c, const graph *g, const glayer *src,
                             const char *base, const char *key, int rank)
{
    char p[320], q[64], hint[512];
    if (rank <= 0 || src->out.nsp == 0 || rank == src->out.nsp)
        return TPU_OK;
    trace_path(p, sizeof p, base, key);
    trace_shape_hint(g, hint, sizeof hint);
    return trace_fail(c, p, "%d numbers for the %dD input '%s'; expected %d%s",
                      rank, src->out.nsp, trace_q(q, sizeof q, src->name),
                      src->out.nsp, hint);
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
    char why[sizeof c->err->msg], hint[512];
    memcpy(why, c->err->msg, sizeof why);
    trace_path(p, sizeof p, base, at ? at : key);
    trace_shape_hint(g, hint, sizeof hint);
    return trace_fail(c, p, "%s%s", why, hint);
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
    int lists = L->op == GOP_ADD || L->op == GOP_CONCAT ||
                L->op == GOP_LOSS || L->op == GOP_ROI_ALIGN ||
                L->op == GOP_ELEMWISE;
    if (!cJSON_IsArray(in)) {
        if (L->op == GOP_ADD || L->op == GOP_CONCAT || L->op == GOP_ELEMWISE)
            return trace_fail(c, p, "expected a list of 2 to %d names, "
                              "found %s", GRAPH_MAX_IN, trace_type(in));
        if ((st = trace_ref(c, g, all, in, p, j, &L->in[0])))
            return st;
        L->n_in = 1;
        return TPU_OK;
    }
    int n = cJSON_GetArraySize(in), k = 0;
    int min = L->op == GOP_LOSS || L->op == GOP_ROI_ALIGN ? 1 : 2;
    if (!lists)
        return trace_fail(c, p, "expected one layer name (only add, "
                          "concat, elementwise, loss and roi_align take a "
                          "list), found "
                          "a list");
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

/* share_weights: an earlier layer whose weights this one uses, a conv or
 * conv_transpose for either, otherwise one of the same op (dense,
 * batchnorm, layer_norm, group_norm, normalize); a chain of sharers
 * resolves to the owner.  That the weights look the same is shape
 * inference's check (graph.c, check_share). */
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
    int conv = L->op == GOP_CONV || L->op == GOP_CONV_T;
    graph_op top = g->layers[t].op;
    if (conv ? top != GOP_CONV && top != GOP_CONV_T : top != L->op)
        return trace_fail(c, p, "'%s' is a %s, not a %s",
                          trace_q(q, sizeof q, sh), graph_op_name(top),
                          conv ? "conv" : graph_op_name(L->op));
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
    if ((st = trace_rank(c, g, src, base, "kernel", krank)))
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

static tpu_status trace_pool(trace_ctx *c, const graph *g, const cJSON *o,
                             const char *base,
                             const glayer *src, glayer *L)
{
    int pad = 0, rank, krank;
    tpu_status st;
    if ((st = trace_dims(c, o, base, "window", 1, 1, L->kernel, &krank)))
        return st;
    if ((st = trace_rank(c, g, src, base, "window", krank)))
        return st;
    /* strides default to the window (Keras) */
    memcpy(L->strides, L->kernel, sizeof L->strides);
    if ((st = trace_dims(c, o, base, "strides", 0, 1, L->strides, &rank)))
        return st;
    if ((st = trace_rank(c, g, src, base, "strides", rank)))
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

static tpu_status trace_shape(trace_ctx *c, const cJSON *o, const char *base,
                              gshape *out);

/* One entry of pads/crops: rows at both ends (a number) or [lo, hi]. */
static int trace_pad_pair(const cJSON *e, int64_t *lo, int64_t *hi)
{
    if (trace_is_int(e, 0, GRAPH_DIM_MAX)) {
        *lo = *hi = (int64_t)e->valuedouble;
        return 1;
    }
    if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) != 2 ||
        !trace_is_int(e->child, 0, GRAPH_DIM_MAX) ||
        !trace_is_int(e->child->next, 0, GRAPH_DIM_MAX))
        return 0;
    *lo = (int64_t)e->child->valuedouble;
    *hi = (int64_t)e->child->next->valuedouble;
    return 1;
}

/* pad's pads and crop's crops: one number for every side of every
 * spatial dimension, or one entry per spatial dimension (a number for
 * both ends, or [lo, hi]).  A crop is kept as a negative pad. */
static tpu_status trace_pads(trace_ctx *c, const cJSON *o, const char *base,
                             const glayer *src, glayer *L)
{
    const char *key = L->op == GOP_PAD ? "pads" : "crops";
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    char p[320];
    int64_t lo[GRAPH_MAX_SP] = {0}, hi[GRAPH_MAX_SP] = {0};
    int n = src->out.nsp, ok = 1;
    if (!v)
        return trace_fail(c, base, "missing key '%s'", key);
    trace_path(p, sizeof p, base, key);
    if (trace_is_int(v, 0, GRAPH_DIM_MAX)) {
        for (int d = 0; d < GRAPH_MAX_SP; d++)
            lo[d] = hi[d] = (int64_t)v->valuedouble;
    } else if (cJSON_IsArray(v) && (n == 0 || cJSON_GetArraySize(v) == n)) {
        int d = 0;
        for (const cJSON *e = v->child; e && ok; e = e->next, d++)
            ok = trace_pad_pair(e, &lo[d], &hi[d]);
    } else {
        ok = 0;
    }
    if (!ok)
        return trace_fail(c, p,
                          "expected a number or one entry per spatial "
                          "dimension (%d), each a number or [lo, hi] of "
                          "integers from 0 to %d",
                          n, GRAPH_DIM_MAX);
    for (int d = 0; d < GRAPH_MAX_SP; d++) {
        L->pad_lo[d] = L->op == GOP_PAD ? lo[d] : -lo[d];
        L->pad_hi[d] = L->op == GOP_PAD ? hi[d] : -hi[d];
    }
    return TPU_OK;
}

/* An optional finite number within [lo, hi] (alpha, max_value). */
static tpu_status trace_real(trace_ctx *c, const cJSON *o, const char *base,
                             const char *key, double lo, double hi,
                             double *out)
{
    char p[320], f[64];
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v)
        return TPU_OK;
    trace_path(p, sizeof p, base, key);
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo) ||
        !(v->valuedouble <= hi))
        return trace_fail(c, p, "expected a number in [%g, %g], %s", lo, hi,
                          trace_found(f, sizeof f, v));
    *out = v->valuedouble;
    return TPU_OK;
}

/* activation: kind, and alpha / max_value where the kind has them
 * (Keras's defaults: LeakyReLU 0.3, ELU 1). */
static tpu_status trace_act(trace_ctx *c, const cJSON *o, const char *base,
                            glayer *L)
{
    char p[320];
    int k = 0;
    tpu_status st;
    if ((st = trace_enum(c, o, base, "kind", 1, trace_act_words, &k)))
        return st;
    L->kind = k;
    L->alpha = k == GACT_LEAKY_RELU ? 0.3 : k == GACT_ELU ? 1.0 : 0.0;
    L->max_value = 0;
    int has_a = k == GACT_RELU || k == GACT_LEAKY_RELU || k == GACT_ELU;
    const char *no = !has_a && cJSON_GetObjectItemCaseSensitive(o, "alpha")
                         ? "alpha"
                     : k != GACT_RELU &&
                             cJSON_GetObjectItemCaseSensitive(o, "max_value")
                         ? "max_value"
                         : NULL;
    if (no) {
        trace_path(p, sizeof p, base, no);
        return trace_fail(c, p, "not a key of activation '%s' (alpha: relu, "
                          "leaky_relu, elu; max_value: relu)",
                          trace_act_words[k]);
    }
    /* relu's slope is Keras's ReLU negative_slope, which Keras keeps at
     * or above 0: a negative one would make clip(x, 0, max_value) +
     * alpha min(x, 0) and max_value applied after the slope differ */
    if ((st = trace_real(c, o, base, "alpha", k == GACT_RELU ? 0 : -1e6, 1e6,
                         &L->alpha)))
        return st;
    if ((st = trace_real(c, o, base, "max_value", 0, 1e30, &L->max_value)))
        return st;
    if (cJSON_GetObjectItemCaseSensitive(o, "max_value") &&
        !(L->max_value > 0)) {
        trace_path(p, sizeof p, base, "max_value");
        return trace_fail(c, p, "expected a positive number, found 0");
    }
    return TPU_OK;
}

/* roi_align: rois, output [h, w], levels. */
static tpu_status trace_roi(trace_ctx *c, const cJSON *o, const char *base,
                            glayer *L)
{
    char p[320];
    int64_t n64;
    int rank, lv = 0, out[GRAPH_MAX_SP];
    tpu_status st;
    if ((st = trace_int(c, o, base, "rois", 1, 1, GRAPH_DIM_MAX, &n64)))
        return st;
    L->rois = (int)n64;
    if ((st = trace_dims(c, o, base, "output", 1, 0, out, &rank)))
        return st;
    if (rank != 2) {
        trace_path(p, sizeof p, base, "output");
        return trace_fail(c, p, "expected 2 positive integers [out_h, "
                          "out_w], found %d", rank);
    }
    L->roi_out[0] = out[0];
    L->roi_out[1] = out[1];
    if ((st = trace_enum(c, o, base, "levels", 0, trace_levels_words, &lv)))
        return st;
    L->roi_padded = lv == 1;
    return TPU_OK;
}

/* "core": where the layer runs in its replica.  A placed layer's
 * consumers run on its core (they read what only that core holds), and a
 * placed layer reads only layers placed on its core, except roi_align,
 * which gathers its levels from wherever they lie. */
static tpu_status trace_core(trace_ctx *c, const graph *g, const cJSON *o,
                             const char *base, glayer *L)
{
    char p[320], q[64];
    int64_t n64 = -1;
    tpu_status st;
    if ((st = trace_int(c, o, base, "core", 0, 0, 4095, &n64)))
        return st;
    L->place = (int)(n64 + 1);
    for (int k = 0; k < L->n_in; k++) {
        const glayer *I = &g->layers[L->in[k]];
        int ic = graph_core(I), lc = graph_core(L);
        if (ic == lc || (ic < 0 && (L->op == GOP_ROI_ALIGN ||
                                    I->op == GOP_INPUT)))
            continue;
        trace_path(p, sizeof p, base, ic >= 0 ? "in" : "core");
        if (ic >= 0 && lc < 0)
            return trace_fail(c, p,
                              "'%s' runs on core %d: a layer reading it "
                              "must run there too (\"core\": %d)",
                              trace_q(q, sizeof q, I->name), ic, ic);
        if (ic >= 0)
            return trace_fail(c, p,
                              "'%s' runs on core %d, this layer on core %d",
                              trace_q(q, sizeof q, I->name), ic, lc);
        return trace_fail(c, p,
                          "a layer placed on a core reads layers placed "
                          "there (only roi_align gathers its inputs), "
                          "'%s' has no placement",
                          trace_q(q, sizeof q, I->name));
    }
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
        if ((st = trace_bool(c, o, base, "use_bias", &L->use_bias)))
            return st;
        return trace_share(c, g, o, base, L);
    case GOP_MAXPOOL:
    case GOP_AVGPOOL:
        return trace_pool(c, g, o, base, src, L);
    case GOP_UPSAMPLE:
        if ((st = trace_dims(c, o, base, "factor", 1, 1, L->factor, &rank)))
            return st;
        return trace_rank(c, g, src, base, "factor", rank);
    case GOP_DROPOUT:
        return trace_dropout(c, o, base, L);
    case GOP_LOSS:
        if ((st = trace_enum(c, o, base, "kind", 1, trace_loss_words, &k)))
            return st;
        L->loss = (graph_loss)k;
        return TPU_OK;
    case GOP_ELEMWISE:
        if ((st = trace_enum(c, o, base, "kind", 1, trace_ew_words, &k)))
            return st;
        L->kind = k;
        return TPU_OK;
    case GOP_ACT:
        return trace_act(c, o, base, L);
    case GOP_BATCHNORM:
        if ((st = trace_enum(c, o, base, "statistics", 0, trace_stats_words,
                             &k)))
            return st;
        L->bn_moving = k == 1;
        return trace_share(c, g, o, base, L);
    case GOP_ROI_ALIGN:
        return trace_roi(c, o, base, L);
    case GOP_FLATTEN:
        n64 = 0;
        if ((st = trace_int(c, o, base, "keep", 0, 1, GRAPH_MAX_SP - 1,
                            &n64)))
            return st;
        L->flat_keep = (int)n64;
        return TPU_OK;
    case GOP_GROUPNORM:
        if ((st = trace_int(c, o, base, "groups", 1, 1, GRAPH_DIM_MAX, &n64)))
            return st;
        L->groups = (int)n64;
        return trace_share(c, g, o, base, L);
    case GOP_LAYERNORM:
        return trace_share(c, g, o, base, L);
    case GOP_PAD:
    case GOP_CROP:
        return trace_pads(c, o, base, src, L);
    case GOP_RESIZE:
        if ((st = trace_dims(c, o, base, "factor", 1, 1, L->factor, &rank)))
            return st;
        return trace_rank(c, g, src, base, "factor", rank);
    case GOP_RESHAPE:
        return trace_shape(c, o, base, &L->target);
    case GOP_NORMALIZE:
        L->frozen = 1; /* statistics adapted before training, not trained */
        return trace_share(c, g, o, base, L);
    default:
        return TPU_OK;
    }
}

/* "scale" and "center" of a normalisation (Keras's BatchNormalization,
 * LayerNormalization, GroupNormalization): false drops gamma or beta. */
static tpu_status trace_norm_params(trace_ctx *c, const cJSON *o,
                                    const char *base, glayer *L)
{
    int scale = 1, center = 1;
    tpu_status st;
    if ((st = trace_bool(c, o, base, "scale", &scale)) ||
        (st = trace_bool(c, o, base, "center", &center)))
        return st;
    L->no_scale = !scale;
    L->no_center = !center;
    return TPU_OK;
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
    if (L->op == GOP_ACT && L->kind != GACT_PRELU &&
        cJSON_GetObjectItemCaseSensitive(o, "trainable")) {
        trace_path(p, sizeof p, base, "trainable");
        return trace_fail(c, p, "activation '%s' has no weights (only prelu "
                          "does)", trace_act_words[L->kind]);
    }
    if (L->op != GOP_CONV && L->op != GOP_CONV_T && L->op != GOP_DENSE &&
        L->op != GOP_BATCHNORM && !(L->op == GOP_ACT) &&
        L->op != GOP_LAYERNORM && L->op != GOP_GROUPNORM)
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
tpu_status trace_layer(trace_ctx *c, graph *g, const cJSON *all,
                       const cJSON *o, int j)
{
    char base[64];
    glayer *L = &g->layers[g->n_layers];
    tpu_status st;
    snprintf(base, sizeof base, "graph.layers[%d]", j);
    if ((st = trace_layer_head(c, g, o, base, L)) ||
        (st = trace_layer_in(c, g, all, o, base, j, L)) ||
        (st = trace_op_params(c, g, o, base, L)) ||
        ((L->op == GOP_BATCHNORM || L->op == GOP_LAYERNORM ||
          L->op == GOP_GROUPNORM) &&
         (st = trace_norm_params(c, o, base, L))) ||
        (st = trace_trainable(c, g, o, base, L)) ||
        (st = trace_core(c, g, o, base, L)))
        return st;
    return trace_commit(c, g, base, NULL);
}

/* shape: [C], [H,W,C] or [D,H,W,C], channels last. */
static tpu_status trace_shape(trace_ctx *c, const cJSON *o, const char *base,
                              gshape *out)
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
            out->c = (int64_t)e->valuedouble;
        else if (ok)
            out->sp[d] = (int64_t)e->valuedouble;
    }
    if (!ok)
        return trace_fail(c, p,
                          "expected 1, 3 or 4 positive integers ([C], "
                          "[H,W,C] or [D,H,W,C]), each at most %d",
                          GRAPH_DIM_MAX);
    out->nsp = n - 1;
    return TPU_OK;
}

tpu_status trace_input(trace_ctx *c, graph *g, const cJSON *o, int j)
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
    if ((st = trace_shape(c, o, base, &L->out)))
        return st;
    return trace_commit(c, g, base, "shape");
}
