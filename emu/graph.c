/* graph — shape inference, weights, MACs and FLOPs of a trace's layers,
 * and the run-section checks against a pod slice.
 *
 * Shapes are per example, channels last.  Padding follows TensorFlow
 * (tf.nn.convolution / conv2d_transpose), because the seeds' reference
 * code is TensorFlow: `same` keeps ceil(in/s), `valid` drops the border.
 * docs/TRACE.md states every rule implemented here.
 */
#include "emu/graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/params.h"

static const char *const op_names[GOP_COUNT] = {
    "input",   "conv",    "conv_transpose", "dense",   "batchnorm",
    "relu",    "sigmoid", "flatten",        "global_avgpool",
    "add",     "concat",  "maxpool",        "avgpool", "upsample",
    "dropout", "loss",    "elementwise",    "activation",
    "roi_align", "layer_norm", "group_norm", "normalize", "pad", "crop",
    "resize", "reshape", "global_maxpool"};

static const char *const ew_names[GEW_COUNT] = {"multiply", "subtract",
                                                "maximum", "minimum",
                                                "average", "add"};
static const char *const act_names[GACT_COUNT] = {
    "relu", "relu6",        "leaky_relu", "elu",     "gelu",
    "swish", "hard_sigmoid", "tanh",       "softmax", "prelu"};

static const char *const loss_names[] = {"softmax_xent", "sigmoid_focal",
                                         "dice",         "l2",
                                         "smooth_l1",    "sigmoid_xent"};

const char *graph_op_name(graph_op op)
{
    if ((int)op < 0 || op >= GOP_COUNT)
        return "?";
    return op_names[op];
}

const char *graph_loss_name(graph_loss k)
{
    if ((int)k < 0 || (size_t)k >= sizeof loss_names / sizeof loss_names[0])
        return "?";
    return loss_names[k];
}

const char *graph_ew_name(int kind)
{
    return kind >= 0 && kind < GEW_COUNT ? ew_names[kind] : "?";
}

const char *graph_act_name(int kind)
{
    return kind >= 0 && kind < GACT_COUNT ? act_names[kind] : "?";
}

/* Per element, from each formula: + - * max min compare select 1, exp
 * tanh erf 2 (the transcendental unit's push and pop), a reciprocal 1,
 * and 1 for the rounding store every pass has (relu: max + store = 2,
 * sigmoid: neg, exp, add, reciprocal + store = 6, as their ops price). */
double graph_act_ops(const glayer *L, int backward)
{
    static const double fwd[GACT_COUNT] = {2, 3, 3, 7, 7, 7, 5, 3, 7, 5};
    static const double bwd[GACT_COUNT] = {2, 3, 3, 4, 9, 9, 4, 3, 4, 3};
    if (L->kind < 0 || L->kind >= GACT_COUNT)
        return 1;
    double n = backward ? bwd[L->kind] : fwd[L->kind];
    if (L->kind == GACT_RELU) /* min with max_value; the negative slope */
        n += (L->max_value > 0) + (L->alpha != 0) * (backward ? 1 : 2);
    return n;
}

void graph_free(graph *g)
{
    free(g->layers);
    free(g->name_slots);
    memset(g, 0, sizeof *g);
}

int64_t gshape_elems(const gshape *s)
{
    int64_t n = s->c;
    for (int i = 0; i < s->nsp; i++)
        n *= s->sp[i];
    return n;
}

int graph_core(const glayer *L)
{
    return L->place > 0 ? L->place - 1 : -1;
}

int64_t graph_roi_level_elems(const graph *g, const glayer *L)
{
    int64_t n = 0;
    const gshape *first = &g->layers[L->in[0]].out;
    for (int k = 0; k < L->n_in; k++)
        n += gshape_elems(L->roi_padded ? first : &g->layers[L->in[k]].out);
    return n;
}

int graph_groups(const glayer *L)
{
    return L->op == GOP_CONV && L->groups > 1 ? L->groups : 1;
}

/* FNV-1a 32: names are short and distinct; any spread will do. */
static uint32_t name_hash(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

/* Every name reference of a trace is looked up here, so a linear scan made
 * reading quadratic (a 60,000-layer chain took 8 s). */
int graph_find(const graph *g, const char *name)
{
    int from = 0;
    if (g->name_cap > 0 && g->name_slots) {
        uint32_t mask = (uint32_t)g->name_cap - 1;
        for (uint32_t s = name_hash(name) & mask;; s = (s + 1) & mask) {
            int v = g->name_slots[s];
            if (v == 0)
                break;
            if (v - 1 < g->n_layers &&
                strcmp(g->layers[v - 1].name, name) == 0)
                return v - 1;
        }
        from = g->n_indexed;
    }
    for (int i = from; i < g->n_layers; i++)
        if (strcmp(g->layers[i].name, name) == 0)
            return i;
    return -1;
}

tpu_status graph_index_reserve(graph *g, int n, tpu_error *err)
{
    int cap = 16;
    while (cap < 2 * n && cap < (1 << 29))
        cap *= 2;
    if (cap <= g->name_cap)
        return TPU_OK;
    free(g->name_slots);
    g->name_slots = calloc((size_t)cap, sizeof *g->name_slots);
    g->name_cap = g->name_slots ? cap : 0;
    g->n_indexed = 0;
    if (!g->name_slots)
        return tpu_fail(err, TPU_ERR_SYSTEM,
                        "out of memory for a name index of %d layers", n);
    /* re-index what is already there (a reserve after layers were added) */
    for (int i = 0; i < g->n_layers && 2 * (i + 1) <= cap; i++)
        graph_index_add(g, i);
    return TPU_OK;
}

void graph_index_add(graph *g, int i)
{
    uint32_t mask;
    uint32_t s;
    /* Out of order or over half full: leave it to graph_find's scan. */
    if (!g->name_slots || i != g->n_indexed || 2 * (i + 1) > g->name_cap)
        return;
    mask = (uint32_t)g->name_cap - 1;
    s = name_hash(g->layers[i].name) & mask;
    while (g->name_slots[s] != 0)
        s = (s + 1) & mask;
    g->name_slots[s] = i + 1;
    g->n_indexed = i + 1;
}

/* Spatial dimension names for messages, channels-last order. */
static const char *dim_name(int nsp, int d)
{
    static const char *const n2[] = {"H", "W"};
    static const char *const n3[] = {"D", "H", "W"};
    return nsp == 3 ? n3[d] : n2[d];
}

/* a*b when both are positive and the product stays within GRAPH_ELEMS_MAX. */
static int mul_capped(int64_t a, int64_t b, int64_t *out)
{
    if (a < 0 || b < 0 || (a != 0 && b > GRAPH_ELEMS_MAX / a))
        return 0;
    *out = a * b;
    return 1;
}

/* Checks an inferred shape against the limits; message without path. */
static tpu_status check_shape(const gshape *s, tpu_error *err)
{
    int64_t n = s->c;
    int ok = s->c >= 1 && s->c <= GRAPH_ELEMS_MAX;
    for (int d = 0; ok && d < s->nsp; d++)
        ok = s->sp[d] >= 1 && mul_capped(n, s->sp[d], &n);
    if (!ok)
        return tpu_fail(err, TPU_ERR_INPUT,
                        "a tensor of more than %lld elements per example "
                        "(the limit, 2^40)",
                        (long long)GRAPH_ELEMS_MAX);
    return TPU_OK;
}

static int64_t ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

/* Forward windowed op (conv, pooling) along one dimension, TF rules. */
static tpu_status window_dim(glayer *L, const gshape *in, int d,
                             const char *what, tpu_error *err)
{
    int64_t x = in->sp[d], k = L->kernel[d], s = L->strides[d];
    int64_t dil = L->dilation[d];
    int64_t eff = (k - 1) * dil + 1;
    if (L->pad_same) {
        int64_t out = ceil_div(x, s);
        int64_t total = (out - 1) * s + eff - x;
        if (total < 0)
            total = 0;
        L->out.sp[d] = out;
        L->pad_lo[d] = total / 2;
        L->pad_hi[d] = total - total / 2;
        return TPU_OK;
    }
    if (eff > x) {
        if (dil > 1)
            return tpu_fail(err, TPU_ERR_INPUT,
                            "%s %lld with dilation %lld spans %lld, larger "
                            "than the valid-padded input's %s of %lld",
                            what, (long long)k, (long long)dil,
                            (long long)eff, dim_name(in->nsp, d),
                            (long long)x);
        return tpu_fail(err, TPU_ERR_INPUT,
                        "%s %lld is larger than the valid-padded input's %s "
                        "of %lld",
                        what, (long long)k, dim_name(in->nsp, d),
                        (long long)x);
    }
    L->out.sp[d] = ceil_div(x - (eff - 1), s);
    L->pad_lo[d] = L->pad_hi[d] = 0;
    return TPU_OK;
}

/* The reader checks list lengths against the input's rank; a flat input
 * is refused here so every windowed op says the same thing. */
static tpu_status need_spatial(const glayer *L, const glayer *src,
                               const char **key, tpu_error *err)
{
    if (src->out.nsp == 0) {
        *key = "in";
        return tpu_fail(err, TPU_ERR_INPUT,
                        "%s needs a 2D or 3D input, '%s' is flat (%lld "
                        "features)",
                        graph_op_name(L->op), src->name,
                        (long long)src->out.c);
    }
    return TPU_OK;
}

static double kernel_volume(const glayer *L, int nsp)
{
    double v = 1;
    for (int d = 0; d < nsp; d++)
        v *= L->kernel[d];
    return v;
}

static tpu_status set_weights(glayer *L, double w, const char **key,
                              tpu_error *err)
{
    if (w > (double)GRAPH_ELEMS_MAX) {
        *key = L->op == GOP_DENSE ? "units" : "filters";
        return tpu_fail(err, TPU_ERR_INPUT,
                        "%.4g weights exceed the limit of %lld", w,
                        (long long)GRAPH_ELEMS_MAX);
    }
    L->weights = (int64_t)w;
    return TPU_OK;
}

/* What a conv or conv_transpose sharer and its owner differ in, the
 * first thing found (groups 8 against 4 with 32 input channels each
 * differ in groups, not in channels); 0 when they look the same. */
static int share_diff_conv(const glayer *S, const glayer *L,
                           const glayer *sin, const glayer *lin, char *what,
                           size_t cap)
{
    int same = S->op == L->op && S->filters == L->filters &&
               S->use_bias == L->use_bias &&
               graph_groups(S) == graph_groups(L) &&
               sin->out.nsp == lin->out.nsp && sin->out.c == lin->out.c;
    for (int d = 0; same && d < lin->out.nsp; d++)
        same = S->kernel[d] == L->kernel[d];
    if (same)
        return 0;
    if (S->op != L->op)
        snprintf(what, cap, "%s here, %s there", graph_op_name(L->op),
                 graph_op_name(S->op));
    else if (S->filters != L->filters)
        snprintf(what, cap, "filters %lld here, %lld there",
                 (long long)L->filters, (long long)S->filters);
    else if (graph_groups(S) != graph_groups(L))
        snprintf(what, cap, "groups %lld here, %lld there",
                 (long long)graph_groups(L), (long long)graph_groups(S));
    else if (S->use_bias != L->use_bias)
        snprintf(what, cap, "use_bias %s here, %s there",
                 L->use_bias ? "true" : "false",
                 S->use_bias ? "true" : "false");
    else if (sin->out.c != lin->out.c)
        snprintf(what, cap, "%lld input channels here, %lld there",
                 (long long)lin->out.c, (long long)sin->out.c);
    else if (sin->out.nsp != lin->out.nsp)
        snprintf(what, cap, "a %dD input here, %dD there", lin->out.nsp,
                 sin->out.nsp);
    else
        snprintf(what, cap, "kernels of other extents");
    return 1;
}

/* The same for the other layers with weights: dense (units, bias and
 * input features: its kernel is [in, units] whatever the spatial extent)
 * and the normalisations (channels, gamma and beta present; group_norm's
 * groups, which a call of one Keras layer cannot change). */
static int share_diff_other(const glayer *S, const glayer *L,
                            const glayer *sin, const glayer *lin, char *what,
                            size_t cap)
{
    const char *chan = L->op == GOP_DENSE ? "input features" : "channels";
    if (S->op != L->op)
        snprintf(what, cap, "%s here, %s there", graph_op_name(L->op),
                 graph_op_name(S->op));
    else if (L->op == GOP_DENSE && S->filters != L->filters)
        snprintf(what, cap, "units %lld here, %lld there",
                 (long long)L->filters, (long long)S->filters);
    else if (sin->out.c != lin->out.c)
        snprintf(what, cap, "%lld %s here, %lld there", (long long)lin->out.c,
                 chan, (long long)sin->out.c);
    else if (L->op == GOP_DENSE && S->use_bias != L->use_bias)
        snprintf(what, cap, "use_bias %s here, %s there",
                 L->use_bias ? "true" : "false",
                 S->use_bias ? "true" : "false");
    else if (L->op == GOP_GROUPNORM && S->groups != L->groups)
        snprintf(what, cap, "groups %d here, %d there", L->groups,
                 S->groups);
    else if (L->op != GOP_DENSE && !S->no_scale != !L->no_scale)
        snprintf(what, cap, "scale %s here, %s there",
                 L->no_scale ? "false" : "true",
                 S->no_scale ? "false" : "true");
    else if (L->op != GOP_DENSE && !S->no_center != !L->no_center)
        snprintf(what, cap, "center %s here, %s there",
                 L->no_center ? "false" : "true",
                 S->no_center ? "false" : "true");
    else
        return 0;
    return 1;
}

/* What must match for a share, as the refusal lists it. */
static const char *share_keys(graph_op op)
{
    switch (op) {
    case GOP_CONV:
    case GOP_CONV_T:
        return "op, kernel, filters, groups, use_bias and input channels";
    case GOP_DENSE:
        return "op, units, use_bias and input features";
    case GOP_GROUPNORM:
        return "op, channels, groups, scale and center";
    case GOP_NORMALIZE:
        return "op and channels";
    default:
        return "op, channels, scale and center";
    }
}

/* Weight sharing: the sharer must look exactly like the layer it reuses
 * (the same weights, so the same shapes).  The sharer keeps no weights of
 * its own: the caller leaves L->weights at 0. */
static tpu_status check_share(const graph *g, const glayer *L,
                              const char **key, tpu_error *err)
{
    const glayer *S = &g->layers[L->share_from];
    const glayer *sin = &g->layers[S->in[0]];
    const glayer *lin = &g->layers[L->in[0]];
    char what[160];
    int differs = L->op == GOP_CONV || L->op == GOP_CONV_T
                      ? share_diff_conv(S, L, sin, lin, what, sizeof what)
                      : share_diff_other(S, L, sin, lin, what, sizeof what);
    if (!differs)
        return TPU_OK;
    *key = "share_weights";
    return tpu_fail(err, TPU_ERR_INPUT,
                    "'%s' has different weights (%s must match: %s)", S->name,
                    share_keys(L->op), what);
}

/* A conv's or conv_transpose's kernel (+ bias): its own, or none when it
 * shares an earlier layer's (which must then look the same).  A grouped
 * conv's filters each see Cin/groups channels. */
static tpu_status conv_weights(const graph *g, glayer *L, const glayer *src,
                               int nsp, const char **key, tpu_error *err)
{
    if (L->share_from >= 0)
        return check_share(g, L, key, err);
    return set_weights(L,
                       kernel_volume(L, nsp) *
                               (double)(src->out.c / graph_groups(L)) *
                               L->filters +
                           (L->use_bias ? L->filters : 0),
                       key, err);
}

/* A layer's output gradient is needed when the loss reaches it and a
 * trainable layer is at or below it. */
static void derive_needs_grad(graph *g, int i)
{
    glayer *L = &g->layers[i];
    L->needs_grad = 0;
    if (L->op == GOP_INPUT || L->no_loss)
        return;
    L->needs_grad = graph_layer_trains(g, i);
    for (int k = 0; k < L->n_in; k++)
        L->needs_grad |= g->layers[L->in[k]].needs_grad;
}

int graph_layer_trains(const graph *g, int i)
{
    const glayer *L = &g->layers[i];
    const glayer *O = L->share_from >= 0 ? &g->layers[L->share_from] : L;
    return O->weights > 0 && !O->frozen && !L->no_loss;
}

tpu_status graph_finish(graph *g, tpu_error *err)
{
    int n = g->n_layers, any_loss = 0;
    unsigned char *consumed = calloc((size_t)n + 1, 1);
    if (!consumed)
        return tpu_fail(err, TPU_ERR_SYSTEM, "out of host memory (graph)");
    for (int i = 0; i < n; i++) {
        const glayer *L = &g->layers[i];
        any_loss |= L->op == GOP_LOSS;
        for (int k = 0; k < L->n_in; k++)
            consumed[L->in[k]] = 1;
    }
    /* Consumers come after their inputs: one reverse sweep carries both
     * flags down (reached = 1 - flag). */
    for (int i = 0; i < n; i++) {
        glayer *L = &g->layers[i];
        int root = any_loss ? L->op == GOP_LOSS : !consumed[i];
        L->no_loss = !root;
        L->unused = g->train && !root && L->op != GOP_BATCHNORM;
    }
    for (int i = n - 1; i >= 0; i--) {
        const glayer *L = &g->layers[i];
        for (int k = 0; k < L->n_in; k++) {
            glayer *I = &g->layers[L->in[k]];
            I->no_loss &= L->no_loss;
            if (!L->unused)
                I->unused = 0;
        }
    }
    free(consumed);
    /* Owners come before their sharers: a reached sharer clears it. */
    for (int i = 0; i < n; i++) {
        glayer *L = &g->layers[i];
        L->weights_no_grad = L->share_from < 0 && L->no_loss;
        if (L->share_from >= 0 && !L->no_loss)
            g->layers[L->share_from].weights_no_grad = 0;
    }
    for (int i = 0; i < n; i++)
        derive_needs_grad(g, i);
    return TPU_OK;
}

/* A flat shape of c features (flatten, global_avgpool, loss). */
static void set_flat(gshape *s, int64_t c)
{
    s->nsp = 0;
    memset(s->sp, 0, sizeof s->sp);
    s->c = c;
}

/* "[H,W,C]" for a shape mismatch message. */
static const char *shape_text(char *buf, size_t cap, const gshape *s)
{
    size_t n = 0;
    buf[n++] = '[';
    for (int d = 0; d < s->nsp; d++)
        n += (size_t)snprintf(buf + n, cap - n, "%lld,", (long long)s->sp[d]);
    snprintf(buf + n, cap - n, "%lld]", (long long)s->c);
    return buf;
}

/* A windowed op's output along every spatial dimension (window_dim); key
 * names the list (kernel or window).  Pooling has no dilation. */
static tpu_status window_dims(glayer *L, const glayer *src, const char *what,
                              int undilated, const char **key,
                              tpu_error *err)
{
    tpu_status st;
    if ((st = need_spatial(L, src, key, err)))
        return st;
    for (int d = 0; d < src->out.nsp; d++) {
        *key = what;
        if (undilated)
            L->dilation[d] = 1;
        if ((st = window_dim(L, &src->out, d, what, err)))
            return st;
    }
    return TPU_OK;
}

static tpu_status infer_conv(const graph *g, glayer *L, const glayer *src,
                             const char **key, tpu_error *err)
{
    tpu_status st;
    int nsp = src->out.nsp;
    if ((st = window_dims(L, src, "kernel", 0, key, err)))
        return st;
    L->out.c = L->filters;
    *key = "filters";
    if ((st = check_shape(&L->out, err)))
        return st;
    /* groups (XLA feature_group_count): each of the G groups convolves
     * its Cin/G input channels into its filters/G outputs, so both must
     * divide (XLA's shape inference refuses the rest). */
    int64_t G = L->groups > 1 ? L->groups : 1;
    if (G > 1 && src->out.c % G) {
        *key = "groups";
        return tpu_fail(err, TPU_ERR_INPUT,
                        "%lld does not divide the input's %lld channels",
                        (long long)G, (long long)src->out.c);
    }
    if (G > 1 && L->filters % G) {
        *key = "groups";
        return tpu_fail(err, TPU_ERR_INPUT,
                        "%lld does not divide filters %d (each group has "
                        "filters / groups outputs)",
                        (long long)G, L->filters);
    }
    L->macs = (double)gshape_elems(&L->out) * kernel_volume(L, nsp) *
              (double)(src->out.c / G);
    return conv_weights(g, L, src, nsp, key, err);
}

/* One dimension of a transposed convolution: the output extent and the
 * padding of the equivalent stride-1 convolution over the dilated input. */
static void conv_t_dim(glayer *L, int64_t x, int d)
{
    int64_t k = L->kernel[d], s = L->strides[d];
    if (L->pad_same) {
        int64_t fwd = k > s ? k - s : 0; /* the forward conv's pad */
        L->out.sp[d] = x * s;
        L->pad_lo[d] = k - 1 - fwd / 2;
        L->pad_hi[d] = s + k - 2 - L->pad_lo[d];
        return;
    }
    /* Keras (deconv_output_length): (in-1) s + max(k, s); a kernel
     * narrower than the stride leaves s-k outputs of the last step that
     * no tap reaches (bias only). */
    int64_t span = k > s ? k : s;
    L->out.sp[d] = (x - 1) * s + span;
    L->pad_lo[d] = k - 1;
    L->pad_hi[d] = span - 1;
}

static tpu_status infer_conv_t(const graph *g, glayer *L, const glayer *src,
                               const char **key, tpu_error *err)
{
    tpu_status st;
    int nsp = src->out.nsp;
    if ((st = need_spatial(L, src, key, err)))
        return st;
    for (int d = 0; d < nsp; d++)
        conv_t_dim(L, src->out.sp[d], d);
    L->out.c = L->filters;
    *key = "strides";
    if ((st = check_shape(&L->out, err)))
        return st;
    /* Every input element is scattered over the whole kernel. */
    L->macs = (double)gshape_elems(&src->out) * kernel_volume(L, nsp) *
              (double)L->filters;
    return conv_weights(g, L, src, nsp, key, err);
}

/* Keras Dense: a matrix product on the last axis, spatial kept; a sharer
 * counts all its MACs but no weights. */
static tpu_status infer_dense(const graph *g, glayer *L, const glayer *src,
                              const char **key, tpu_error *err)
{
    tpu_status st;
    L->out.c = L->filters;
    *key = "units";
    if ((st = check_shape(&L->out, err)))
        return st;
    L->macs = (double)gshape_elems(&L->out) * (double)src->out.c;
    if (L->share_from >= 0)
        return check_share(g, L, key, err);
    return set_weights(L,
                       (double)src->out.c * L->filters +
                           (L->use_bias ? L->filters : 0),
                       key, err);
}

/* add takes identical shapes, concat the same spatial shape (channels
 * add up). */
static tpu_status infer_merge(const graph *g, glayer *L, const glayer *src,
                              const char **key, tpu_error *err)
{
    *key = "in";
    for (int j = 1; j < L->n_in; j++) {
        const glayer *o = &g->layers[L->in[j]];
        int same = o->out.nsp == src->out.nsp;
        for (int d = 0; same && d < src->out.nsp; d++)
            same = o->out.sp[d] == src->out.sp[d];
        if (L->op == GOP_ADD && o->out.c != src->out.c)
            same = 0;
        if (!same) {
            char a[96], b[96];
            return tpu_fail(err, TPU_ERR_INPUT,
                            "%s needs %s: '%s' is %s, '%s' is %s",
                            graph_op_name(L->op),
                            L->op == GOP_ADD ? "identical shapes"
                                             : "the same spatial shape",
                            src->name, shape_text(a, sizeof a, &src->out),
                            o->name, shape_text(b, sizeof b, &o->out));
        }
        if (L->op == GOP_CONCAT)
            L->out.c += o->out.c;
    }
    return check_shape(&L->out, err);
}

static tpu_status infer_pool(glayer *L, const glayer *src, const char **key,
                             tpu_error *err)
{
    tpu_status st;
    if ((st = window_dims(L, src, "window", 1, key, err)))
        return st;
    return check_shape(&L->out, err);
}

static int same_shape(const gshape *a, const gshape *b)
{
    int same = a->nsp == b->nsp && a->c == b->c;
    for (int d = 0; same && d < a->nsp; d++)
        same = a->sp[d] == b->sp[d];
    return same;
}

/* One value per channel: flat, or every spatial extent 1. */
static int per_channel(const gshape *s)
{
    for (int d = 0; d < s->nsp; d++)
        if (s->sp[d] != 1)
            return 0;
    return 1;
}

/* One value per position: the output's spatial extent, one channel. */
static int per_position(const gshape *s, const gshape *out)
{
    int same = s->nsp == out->nsp && s->nsp > 0 && s->c == 1;
    for (int d = 0; same && d < s->nsp; d++)
        same = s->sp[d] == out->sp[d];
    return same;
}

graph_ew_bc graph_ew_broadcast(const graph *g, const glayer *L, int k)
{
    const gshape *s = &g->layers[L->in[k]].out;
    if (same_shape(s, &L->out))
        return GEW_BC_NONE;
    return per_position(s, &L->out) ? GEW_BC_POSITION : GEW_BC_CHANNEL;
}

/* elementwise: the output takes the largest operand's shape (the first
 * of equals); every other operand has that shape or broadcasts: one value
 * per channel over the positions (Keras multiply([x, se]) in
 * squeeze-excite, with se [1,1,C] or [C]), or one value per position over
 * the channels (an attention gate [H,W,1], Attention U-Net, CBAM). */
static tpu_status infer_elemwise(const graph *g, glayer *L, const char **key,
                                 tpu_error *err)
{
    int big = 0;
    *key = "in";
    if (L->kind == GEW_SUBTRACT && L->n_in != 2)
        return tpu_fail(err, TPU_ERR_INPUT,
                        "subtract takes exactly 2 inputs, found %d", L->n_in);
    for (int k = 1; k < L->n_in; k++)
        if (gshape_elems(&g->layers[L->in[k]].out) >
            gshape_elems(&g->layers[L->in[big]].out))
            big = k;
    L->out = g->layers[L->in[big]].out;
    for (int k = 0; k < L->n_in; k++) {
        const glayer *o = &g->layers[L->in[k]];
        if (same_shape(&o->out, &L->out) ||
            (o->out.c == L->out.c && per_channel(&o->out) &&
             L->out.nsp > 0) ||
            per_position(&o->out, &L->out))
            continue;
        char a[96], b[96];
        return tpu_fail(err, TPU_ERR_INPUT,
                        "%s needs identical shapes, one value per channel "
                        "([C] or [1,1,C]) or one per position ([H,W,1]) to "
                        "broadcast: '%s' is %s, '%s' is %s",
                        graph_ew_name(L->kind), g->layers[L->in[big]].name,
                        shape_text(a, sizeof a, &L->out), o->name,
                        shape_text(b, sizeof b, &o->out));
    }
    return check_shape(&L->out, err);
}

static tpu_status infer_upsample(glayer *L, const glayer *src,
                                 const char **key, tpu_error *err)
{
    tpu_status st;
    if ((st = need_spatial(L, src, key, err)))
        return st;
    for (int d = 0; d < src->out.nsp; d++)
        L->out.sp[d] = src->out.sp[d] * L->factor[d];
    *key = "factor";
    return check_shape(&L->out, err);
}

/* roi_align: 2D levels with one channel count; the output carries the
 * ROIs as a leading spatial dimension, [rois, out_h, out_w, C], so a
 * head's convolutions are 3D ones with kernel [1, k, k] and its fully
 * connected layers dense layers (the first one a [1, out_h, out_w] valid
 * convolution: the per-ROI flatten and matrix product in one). */
static tpu_status infer_roi(const graph *g, glayer *L, const glayer *src,
                            const char **key, tpu_error *err)
{
    *key = "in";
    for (int k = 0; k < L->n_in; k++) {
        const glayer *I = &g->layers[L->in[k]];
        if (I->out.nsp != 2)
            return tpu_fail(err, TPU_ERR_INPUT,
                            "roi_align reads 2D feature levels, '%s' is %s",
                            I->name, I->out.nsp ? "3D" : "flat");
        if (I->out.c != src->out.c) {
            char a[96], b[96];
            return tpu_fail(err, TPU_ERR_INPUT,
                            "roi_align needs one channel count on every "
                            "level: '%s' is %s, '%s' is %s",
                            src->name, shape_text(a, sizeof a, &src->out),
                            I->name, shape_text(b, sizeof b, &I->out));
        }
    }
    L->out.nsp = 3;
    L->out.sp[0] = L->rois;
    L->out.sp[1] = L->roi_out[0];
    L->out.sp[2] = L->roi_out[1];
    L->out.c = src->out.c;
    *key = "rois";
    return check_shape(&L->out, err);
}

/* The normalisations, pad and crop, resize, reshape and global max
 * pooling (docs/TRACE.md). */
static tpu_status infer_more(const graph *g, glayer *L, const glayer *src,
                             const char **key, tpu_error *err)
{
    tpu_status st;
    char a[96], b[96];
    switch (L->op) {
    case GOP_LAYERNORM: /* gamma and beta (Keras's center and scale) */
        if (L->share_from >= 0)
            return check_share(g, L, key, err);
        L->weights = graph_norm_params(L) * src->out.c;
        return TPU_OK;
    case GOP_GROUPNORM:
        *key = "groups";
        if (src->out.c % L->groups)
            return tpu_fail(err, TPU_ERR_INPUT,
                            "%d does not divide the input's %lld channels",
                            L->groups, (long long)src->out.c);
        if (L->share_from >= 0)
            return check_share(g, L, key, err);
        L->weights = graph_norm_params(L) * src->out.c;
        return TPU_OK;
    case GOP_NORMALIZE: /* mean, variance and Keras's count */
        if (L->share_from >= 0)
            return check_share(g, L, key, err);
        L->weights = 2 * src->out.c + 1;
        return TPU_OK;
    case GOP_PAD:
    case GOP_CROP:
        if ((st = need_spatial(L, src, key, err)))
            return st;
        *key = L->op == GOP_PAD ? "pads" : "crops";
        for (int d = 0; d < src->out.nsp; d++) {
            L->out.sp[d] = src->out.sp[d] + L->pad_lo[d] + L->pad_hi[d];
            if (L->out.sp[d] < 1)
                return tpu_fail(err, TPU_ERR_INPUT,
                                "crops %lld + %lld leave nothing of "
                                "dimension %d (%lld)",
                                (long long)-L->pad_lo[d],
                                (long long)-L->pad_hi[d], d,
                                (long long)src->out.sp[d]);
        }
        return check_shape(&L->out, err);
    case GOP_RESIZE:
        if ((st = need_spatial(L, src, key, err)))
            return st;
        for (int d = 0; d < src->out.nsp; d++)
            L->out.sp[d] = src->out.sp[d] * L->factor[d];
        *key = "factor";
        return check_shape(&L->out, err);
    case GOP_RESHAPE:
        *key = "shape";
        if (gshape_elems(&L->target) != gshape_elems(&src->out))
            return tpu_fail(err, TPU_ERR_INPUT,
                            "%s has %lld elements, the input %s %lld",
                            shape_text(a, sizeof a, &L->target),
                            (long long)gshape_elems(&L->target),
                            shape_text(b, sizeof b, &src->out),
                            (long long)gshape_elems(&src->out));
        L->out = L->target;
        return TPU_OK;
    case GOP_GMAXPOOL:
        if ((st = need_spatial(L, src, key, err)))
            return st;
        set_flat(&L->out, src->out.c);
        return TPU_OK;
    default:
        return tpu_fail(err, TPU_ERR_INPUT, "unknown op");
    }
}

/* The layer's output shape, MACs and weights from its inputs (inferred
 * before it); *key names the trace key a refusal is about. */
static tpu_status infer_layer(graph *g, int i, const char **key,
                              tpu_error *err)
{
    const char *unused = "";
    glayer *L = &g->layers[i];
    const glayer *src;
    tpu_status st;
    if (!key)
        key = &unused;
    *key = "op";
    L->weights = 0;
    L->macs = 0;
    if (L->op == GOP_INPUT)
        return check_shape(&L->out, err);
    TPU_ASSERT(L->n_in >= 1 && L->n_in <= GRAPH_MAX_IN);
    for (int j = 0; j < L->n_in; j++)
        TPU_ASSERT(L->in[j] >= 0 && L->in[j] < i);
    src = &g->layers[L->in[0]];
    L->out = src->out;

    switch (L->op) {
    case GOP_CONV:
        return infer_conv(g, L, src, key, err);
    case GOP_CONV_T:
        return infer_conv_t(g, L, src, key, err);
    case GOP_DENSE:
        return infer_dense(g, L, src, key, err);
    case GOP_BATCHNORM:
        if (L->share_from >= 0)
            return check_share(g, L, key, err);
        L->weights = graph_norm_params(L) * src->out.c; /* gamma, beta */
        return TPU_OK;
    case GOP_RELU:
    case GOP_SIGMOID:
    case GOP_DROPOUT:
        return TPU_OK;
    case GOP_FLATTEN:
        if (L->flat_keep > 0) {
            *key = "keep";
            if (L->flat_keep >= src->out.nsp)
                return tpu_fail(err, TPU_ERR_INPUT,
                                "keeps %d spatial dimensions of '%s', which "
                                "has %d: at least one must fold",
                                L->flat_keep, src->name, src->out.nsp);
            for (int d = L->flat_keep; d < src->out.nsp; d++) {
                L->out.c *= src->out.sp[d];
                L->out.sp[d] = 1;
            }
            return check_shape(&L->out, err);
        }
        set_flat(&L->out, gshape_elems(&src->out));
        return TPU_OK;
    case GOP_GAP:
        if ((st = need_spatial(L, src, key, err)))
            return st;
        set_flat(&L->out, src->out.c);
        return TPU_OK;
    case GOP_ADD:
    case GOP_CONCAT:
        return infer_merge(g, L, src, key, err);
    case GOP_MAXPOOL:
    case GOP_AVGPOOL:
        return infer_pool(L, src, key, err);
    case GOP_UPSAMPLE:
        return infer_upsample(L, src, key, err);
    case GOP_LOSS:
        /* The step's loss: one scalar per example. */
        set_flat(&L->out, 1);
        return TPU_OK;
    case GOP_ELEMWISE:
        return infer_elemwise(g, L, key, err);
    case GOP_ACT:
        if (L->kind == GACT_PRELU) /* one slope per channel */
            L->weights = src->out.c;
        return TPU_OK;
    case GOP_ROI_ALIGN:
        return infer_roi(g, L, src, key, err);
    case GOP_LAYERNORM:
    case GOP_GROUPNORM:
    case GOP_NORMALIZE:
    case GOP_PAD:
    case GOP_CROP:
    case GOP_RESIZE:
    case GOP_RESHAPE:
    case GOP_GMAXPOOL:
        return infer_more(g, L, src, key, err);
    default:
        break;
    }
    return tpu_fail(err, TPU_ERR_INPUT, "unknown op");
}

tpu_status graph_infer_layer(graph *g, int i, const char **key,
                             tpu_error *err)
{
    tpu_status st = infer_layer(g, i, key, err);
    g->layers[i].needs_grad = 0;
    if (st)
        return st;
    derive_needs_grad(g, i);
    return TPU_OK;
}

double graph_layer_flops(const graph *g, int i)
{
    const glayer *L = &g->layers[i];
    double out = (double)gshape_elems(&L->out);
    double f = 2 * L->macs;
    switch (L->op) {
    case GOP_CONV:
    case GOP_CONV_T:
    case GOP_DENSE:
        return f + (L->use_bias ? out : 0);
    case GOP_BATCHNORM:
    case GOP_RELU:
    case GOP_SIGMOID:
    case GOP_DROPOUT:
        return out;
    case GOP_ADD:
        return out * (L->n_in - 1);
    case GOP_MAXPOOL:
    case GOP_AVGPOOL:
        return out * kernel_volume(L, L->out.nsp);
    case GOP_GAP:
        return (double)gshape_elems(&g->layers[L->in[0]].out);
    case GOP_ACT:
        return out;
    case GOP_LAYERNORM:
    case GOP_GROUPNORM: /* statistics (x, x^2) and the normalise */
        return 3 * out;
    case GOP_NORMALIZE:
        return 2 * out;
    case GOP_RESIZE: /* two multiply-adds a dimension */
        return 2 * out * L->out.nsp;
    case GOP_GMAXPOOL:
        return (double)gshape_elems(&g->layers[L->in[0]].out);
    case GOP_ELEMWISE:
        return out * (L->n_in - 1 + (L->kind == GEW_AVERAGE));
    case GOP_LOSS: {
        double n = 0;
        for (int j = 0; j < L->n_in; j++)
            n += (double)gshape_elems(&g->layers[L->in[j]].out);
        return n;
    }
    case GOP_ROI_ALIGN:
        return 7 * out; /* 4 products and 3 sums per bilinear sample */
    default:
        return 0;
    }
}

double graph_forward_flops(const graph *g)
{
    double f = 0;
    for (int i = 0; i < g->n_layers; i++)
        if (!g->layers[i].unused)
            f += graph_layer_flops(g, i);
    return f;
}

double graph_backward_flops(const graph *g)
{
    double f = 0;
    for (int i = 0; i < g->n_layers; i++) {
        const glayer *L = &g->layers[i];
        if (!L->needs_grad)
            continue;
        double fwd = graph_layer_flops(g, i);
        if (L->op == GOP_CONV || L->op == GOP_CONV_T || L->op == GOP_DENSE) {
            int dx = g->layers[L->in[0]].needs_grad;
            int dw = graph_layer_trains(g, i);
            /* the weight gradient when the weights train, the input
             * gradient when something below trains; the elementwise
             * epilogue's backward either way. */
            f += 2 * L->macs * (dx + dw) + (fwd - 2 * L->macs);
        } else {
            f += 2 * fwd;
        }
    }
    return f;
}

int64_t graph_layer_out_bytes(const graph *g, int i)
{
    const glayer *L = &g->layers[i];
    return gshape_elems(&L->out) * L->dtype_bytes;
}

int graph_norm_params(const glayer *L)
{
    return 2 - (L->no_scale != 0) - (L->no_center != 0);
}

int64_t graph_weights(const graph *g)
{
    int64_t w = 0;
    for (int i = 0; i < g->n_layers; i++)
        w += g->layers[i].weights;
    return w;
}

int64_t graph_trainable_weights(const graph *g)
{
    int64_t w = 0;
    for (int i = 0; i < g->n_layers; i++) {
        const glayer *L = &g->layers[i];
        if (!L->frozen && !L->weights_no_grad)
            w += L->weights;
    }
    return w;
}

tpu_status graph_check_system(const char *system, const char *path,
                              tpu_error *err)
{
    if (!tpu_system_find(system)) {
        char known[256];
        size_t n = 0;
        known[0] = 0;
        for (const tpu_system *s = tpu_systems(); s->name; s++) {
            int w = snprintf(known + n, sizeof known - n, "%s%s",
                             n ? ", " : "", s->name);
            if (w < 0 || (size_t)w >= sizeof known - n)
                break;
            n += (size_t)w;
        }
        return tpu_fail(err, TPU_ERR_INPUT,
                        "%s: system: unknown slice '%s' (known: %s)", path,
                        system, known);
    }
    return TPU_OK;
}

tpu_status graph_check_run(const graph *g, const char *system,
                           int64_t global_batch, const char *path,
                           tpu_error *err)
{
    const tpu_system *sys = tpu_system_find(system);
    int replicas;
    if (!sys)
        return graph_check_system(system, path, err);
    if (g->cores_per_replica < 1 || sys->cores % g->cores_per_replica != 0)
        return tpu_fail(err, TPU_ERR_INPUT,
                        "%s: run.num_cores_per_replica: %d does not divide "
                        "the %d cores of %s",
                        path, g->cores_per_replica, sys->cores, sys->name);
    replicas = sys->cores / g->cores_per_replica;
    if (global_batch < 1)
        return tpu_fail(err, TPU_ERR_INPUT,
                        "%s: run.global_batch: %lld is not a positive batch",
                        path, (long long)global_batch);
    if (global_batch % replicas != 0)
        return tpu_fail(err, TPU_ERR_INPUT,
                        "%s: run.global_batch: %lld does not divide into %d "
                        "replicas",
                        path, (long long)global_batch, replicas);
    if (g->bn_group > 1 && replicas % g->bn_group != 0)
        return tpu_fail(err, TPU_ERR_INPUT,
                        "%s: run.batchnorm_group: %d does not divide the %d "
                        "replicas of %s (a group is that many whole "
                        "replicas)",
                        path, g->bn_group, replicas, sys->name);
    for (int i = 0; i < g->n_layers; i++) {
        int k = graph_core(&g->layers[i]);
        if (k >= g->cores_per_replica)
            return tpu_fail(err, TPU_ERR_INPUT,
                            "%s: graph.layers[%d].core: %d is not a core of "
                            "a replica of %d (run.num_cores_per_replica)",
                            path, i - g->n_inputs, k, g->cores_per_replica);
    }
    if (g->n_inputs > 0 && g->pdims_rank > 0) {
        const glayer *in = &g->layers[0];
        int64_t prod = 1;
        for (int d = 0; d < g->pdims_rank; d++)
            prod *= g->pdims[d];
        if (prod != 1 && prod != g->cores_per_replica)
            return tpu_fail(err, TPU_ERR_INPUT,
                            "%s: run.input_partition_dims[0]: product %lld "
                            "is not num_cores_per_replica %d",
                            path, (long long)prod, g->cores_per_replica);
        if (g->pdims[0] != 1 || g->pdims[g->pdims_rank - 1] != 1)
            return tpu_fail(err, TPU_ERR_INPUT,
                            "%s: run.input_partition_dims[0]: only spatial "
                            "dimensions may be split (N and C factors must "
                            "be 1)",
                            path);
        for (int d = 0; d < in->out.nsp && d + 1 < g->pdims_rank; d++)
            if (g->pdims[d + 1] > in->out.sp[d])
                return tpu_fail(err, TPU_ERR_INPUT,
                                "%s: run.input_partition_dims[0][%d]: "
                                "dimension %s of '%s' is %lld, smaller than "
                                "its factor %d",
                                path, d + 1, dim_name(in->out.nsp, d),
                                in->name, (long long)in->out.sp[d],
                                g->pdims[d + 1]);
    }
    return TPU_OK;
}

/* Weight layers the trace's `trainable` key applies to (docs/TRACE.md). */
static int has_weight_op(const glayer *L)
{
    graph_op op = L->op;
    return op == GOP_CONV || op == GOP_CONV_T || op == GOP_DENSE ||
           op == GOP_BATCHNORM || (op == GOP_ACT && L->kind == GACT_PRELU) ||
           op == GOP_LAYERNORM || op == GOP_GROUPNORM;
}

/* Marks in want[] the owners an entry names; a matched sharer goes into
 * sharer[] (its owner must be named too).  Returns the layers the entry
 * matched with weights, or -1 (err set) when it matched none. */
static int freeze_entry(const graph *g, const char *e, size_t len,
                        const char *path, unsigned char *want,
                        unsigned char *sharer, tpu_error *err)
{
    int prefix = e[len - 1] == '*';
    size_t n = prefix ? len - 1 : len;
    int named = 0, weighted = 0, first = -1;
    for (int i = 0; i < g->n_layers; i++) {
        const glayer *L = &g->layers[i];
        if (strncmp(L->name, e, n) != 0 || (!prefix && L->name[n] != 0))
            continue;
        named++;
        if (!has_weight_op(L)) {
            if (first < 0)
                first = i;
            continue;
        }
        weighted++;
        if (L->share_from >= 0)
            sharer[i] = 1;
        else
            want[i] = 1;
    }
    if (!named) {
        tpu_fail(err, TPU_ERR_INPUT, "--freeze: no layer named '%.*s' in %s",
                 (int)len, e, path);
        return -1;
    }
    if (!weighted) {
        const glayer *L = &g->layers[first];
        if (prefix)
            tpu_fail(err, TPU_ERR_INPUT,
                     "--freeze: '%.*s' matches no layer with weights in %s "
                     "(only conv, conv_transpose, dense and batchnorm "
                     "layers train; '%s' is %s)",
                     (int)len, e, path, L->name, graph_op_name(L->op));
        else
            tpu_fail(err, TPU_ERR_INPUT,
                     "--freeze: '%s' in %s is a %s layer: it has no weights "
                     "to freeze (only conv, conv_transpose, dense and "
                     "batchnorm layers train)",
                     L->name, path, graph_op_name(L->op));
        return -1;
    }
    return weighted;
}

/* The entry of a comma-separated list that starts at e: its length, and
 * in *next where the one after it starts (NULL after the last). */
static size_t list_entry(const char *e, const char **next)
{
    const char *comma = strchr(e, ',');
    *next = comma ? comma + 1 : NULL;
    return comma ? (size_t)(comma - e) : strlen(e);
}

/* The list's form, before what its entries match: no empty entry, and
 * "none" alone.  *none says whether it was "none". */
static tpu_status freeze_form(const char *list, int *none_out, tpu_error *err)
{
    int none = 0, names = 0;
    for (const char *e = list, *next; e; e = next) {
        size_t len = list_entry(e, &next);
        if (len == 0)
            return tpu_fail(err, TPU_ERR_INPUT,
                            "--freeze '%s': empty entry (expected LAYER,"
                            "PREFIX*,... or none)",
                            list);
        if (len == 4 && strncmp(e, "none", 4) == 0)
            none = 1;
        else
            names = 1;
    }
    if (none && names)
        return tpu_fail(err, TPU_ERR_INPUT,
                        "--freeze '%s': none (every layer trainable) cannot "
                        "be combined with layer names",
                        list);
    *none_out = none;
    return TPU_OK;
}

/* A sharer named without its owner (which is not frozen already): shared
 * weights freeze or train together. */
static tpu_status freeze_sharers(const graph *g, const unsigned char *want,
                                 const unsigned char *sharer,
                                 const char *path, tpu_error *err)
{
    for (int i = 0; i < g->n_layers; i++) {
        const glayer *L = &g->layers[i];
        if (sharer[i] && !want[L->share_from] &&
            !g->layers[L->share_from].frozen)
            return tpu_fail(
                err, TPU_ERR_INPUT,
                "--freeze: '%s' shares the weights of '%s' in %s: name that "
                "layer (shared weights freeze or train together)",
                L->name, g->layers[L->share_from].name, path);
    }
    return TPU_OK;
}

/* Everything graph_freeze checks, before it changes anything: on success
 * *want (owned by the caller) marks the owners LIST names, and *none says
 * whether it was "none". */
static tpu_status freeze_validate(const graph *g, const char *list,
                                  const char *path, unsigned char **want_out,
                                  int *none_out, tpu_error *err)
{
    if (!path)
        path = g->name;
    size_t total = strlen(list);
    if (total >= GRAPH_FREEZE_MAX)
        return tpu_fail(err, TPU_ERR_INPUT,
                        "--freeze: the list is %zu bytes long, more "
                        "than %d (use prefixes: 'res2*')",
                        total, GRAPH_FREEZE_MAX - 1);
    int none = 0;
    tpu_status st = freeze_form(list, &none, err);
    if (st)
        return st;
    unsigned char *want = calloc((size_t)g->n_layers + 1, 2);
    if (!want)
        return tpu_fail(err, TPU_ERR_SYSTEM, "out of host memory");
    unsigned char *sharer = want + g->n_layers + 1;
    for (const char *e = none ? NULL : list, *next; e; e = next) {
        size_t len = list_entry(e, &next);
        if (freeze_entry(g, e, len, path, want, sharer, err) < 0) {
            free(want);
            return TPU_ERR_INPUT;
        }
    }
    if ((st = freeze_sharers(g, want, sharer, path, err))) {
        free(want);
        return st;
    }
    *want_out = want;
    *none_out = none;
    return TPU_OK;
}

tpu_status graph_freeze_check(const graph *g, const char *list,
                              const char *path, tpu_error *err)
{
    unsigned char *want = NULL;
    int none = 0;
    tpu_status st = freeze_validate(g, list, path, &want, &none, err);
    free(want);
    return st;
}

tpu_status graph_freeze(graph *g, const char *list, const char *path,
                        tpu_error *err)
{
    unsigned char *want = NULL;
    int none = 0;
    tpu_status st = freeze_validate(g, list, path, &want, &none, err);
    if (st)
        return st;
    /* As the reader does: owners first, each sharer with its owner's
     * setting (an owner comes before its sharers). */
    for (int i = 0; i < g->n_layers; i++) {
        glayer *L = &g->layers[i];
        if (L->share_from >= 0)
            L->frozen = g->layers[L->share_from].frozen;
        else if (none)
            L->frozen = L->op == GOP_NORMALIZE; /* never trained */
        else if (want[i])
            L->frozen = 1;
    }
    free(want);
    /* What depends on the flags, in layer order as the reader derives it
     * (every layer inferred before, so this cannot fail). */
    for (int i = 0; i < g->n_layers; i++) {
        st = graph_infer_layer(g, i, NULL, err);
        if (st)
            return st;
    }
    memcpy(g->freeze, list, strlen(list) + 1);
    return TPU_OK;
}
