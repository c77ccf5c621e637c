/* keras_layers — the Keras importer's layer classes (keras_internal.h):
 * activations, weights shared between calls, and the keras_classes table
 * of Keras class -> map_* function that emits the trace layers for one
 * call.  Adding a class is a row and a function here (docs/IMPORT.md);
 * how the calls are ordered is keras_model.c's business.
 */
#include "emu/imp/keras_internal.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- activations ------------------------------------------------------- */

/* Keras activation names the trace can express (keras/activations.py;
 * hard_sigmoid is tf.keras 2's, 0.2 x + 0.5 clipped, and gelu the exact
 * erf form, Keras's default; hardSigmoid is TensorFlow.js's name for the
 * same function).  softmax at an output goes into the loss; read by
 * another layer it is the trace's softmax activation (keras_softmax_read). */
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
const char *keras_act_name(const cJSON *j)
{
    if (!j || cJSON_IsNull(j))
        return "linear";
    if (cJSON_IsString(j))
        return j->valuestring;
    if (cJSON_IsObject(j)) {
        const char *s = keras_get_str(j, "config");
        if (s)
            return s;
        s = keras_get_str(j, "class_name");
        if (s)
            return s;
    }
    return NULL;
}

const keras_act *keras_act_find(const char *name)
{
    for (size_t i = 0; name && i < sizeof keras_acts / sizeof keras_acts[0];
         i++)
        if (strcmp(keras_acts[i].name, name) == 0)
            return &keras_acts[i];
    return NULL;
}

int keras_allowed(const kx *x, const char *key)
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

tpu_status keras_passed_through(kx *x, const char *what, const char *name,
                                const char *cls, const char *path)
{
    char b1[64], b2[64], line[300];
    tpu_status st =
        keras_note(x,
                   "%s '%s' (%s) at %s passed through as an identity "
                   "(--allow-identity %s)",
                   what, keras_shown(b1, sizeof b1, name), cls, path,
                   keras_shown(b2, sizeof b2, cls));
    if (st)
        return st;
    snprintf(line, sizeof line, "%s%s (%s)", x->passed_len ? ", " : "", name,
             cls);
    return keras_append(x, &x->passed, &x->passed_len, line);
}

/* Applies the layer's activation (key "activation" of its config) to the
 * ref in c->out; `path` is that key's. */
static tpu_status apply_act(kx *x, kcall *c, const cJSON *aj,
                            const char *path)
{
    const char *a = keras_act_name(aj);
    const keras_act *ka = keras_act_find(a);
    char b[64];
    if (!a)
        return keras_fail(x, path, "expected an activation name, found %s",
                          keras_jtype(aj));
    if (!ka) {
        if (!keras_allowed(x, a))
            return keras_fail(x, path, "activation '%s' has no trace op",
                              keras_shown(b, sizeof b, a));
        return keras_passed_through(x, "activation of", c->kname, a, path);
    }
    if (ka->op == -1)
        return TPU_OK;
    if (ka->op == -2) {
        int r, cf = x->refs[c->out].cf;
        /* Keras's softmax is over the last axis; the Softmax layer has
         * checked its own axis */
        if (keras_is_cf(x, c->out) && strcmp(c->cls, "Softmax") != 0)
            return keras_fail(
                x, path,
                "activation 'softmax' acts on the last "
                "axis, which on the channels_first tensor of '%s' "
                "is a spatial one: the trace's softmax is over the "
                "channels (as Softmax(axis=1) is)",
                keras_shown(b, sizeof b, c->kname));
        tpu_status st = keras_new_ref(x, x->refs[c->out].t, &r);
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
    if (keras_grow(x))
        return x->err->code;
    char name[GRAPH_NAME_MAX];
    int in_t = x->refs[c->out].t, t;
    /* as above: an Activation layer keeps its own name, so that summary
     * rows line up with Keras's */
    keras_unique_name(x, c->tname,
                      strcmp(c->cls, "Activation") == 0 ? NULL
                      : ka->op == GOP_RELU              ? "/relu"
                                                        : "/sigmoid",
                      name);
    keras_layer_begin(x, name, (graph_op)ka->op, &in_t, 1);
    tpu_status st = keras_emit(x, c, keras_krank_of(x, c->out), &t);
    return st ? st : keras_new_ref(x, t, &c->out);
}

static tpu_status activation_layer(kx *x, kcall *c, int kind, double alpha,
                                   double max_value, const char *suffix)
{
    char name[GRAPH_NAME_MAX];
    int in_t = x->refs[c->out].t, t;
    if (keras_grow(x))
        return x->err->code;
    if (suffix)
        keras_unique_name(x, c->tname, suffix, name);
    else
        snprintf(name, sizeof name, "%s", c->tname);
    glayer *L = keras_layer_begin(x, name, GOP_ACT, &in_t, 1);
    L->kind = kind;
    L->alpha = alpha;
    L->max_value = max_value;
    tpu_status st = keras_emit(x, c, keras_krank_of(x, c->out), &t);
    return st ? st : keras_new_ref(x, t, &c->out);
}

/* A layer reads ref r, whose softmax is pending: the softmax becomes the
 * trace's activation (over the channels, as Keras's default axis), and
 * every later reader of r reads that. */
tpu_status keras_softmax_read(kx *x, int r)
{
    keras_ref *R = &x->refs[r];
    char name[GRAPH_NAME_MAX];
    int in_t = R->t, t;
    tpu_status st;
    if ((st = keras_grow(x)))
        return st;
    keras_unique_name(x, R->sm_name, R->sm_suffix ? "/softmax" : NULL, name);
    glayer *L = keras_layer_begin(x, name, GOP_ACT, &in_t, 1);
    L->kind = GACT_SOFTMAX;
    if ((st = keras_layer_commit(x, R->sm_path, x->krank[in_t], &t)))
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
    keras_path(p, c->path, ".config.activation");
    return apply_act(x, c, keras_get(c->cfg, "activation"), p);
}

/* ---- weights: trainable, shared ---------------------------------------- */

/* A layer with weights called again shares its first call's (the trace's
 * share_weights: convolutions, Dense, the normalisations; Keras counts
 * them once, and a shared BatchNormalization's calls each normalise with
 * their own batch's statistics, as the trace's sharer does). */
static tpu_status weights_of(kx *x, kcall *c, glayer *L, int slot)
{
    int tr = 1;
    tpu_status st = keras_cfg_bool(x, c, "trainable", 1, &tr);
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
    int kr = keras_krank_of(x, c->in[0]) - 1;
    if (kr != want) {
        char b[64];
        return keras_fail(
            x, c->path,
            "%s needs a %dD input (batch, %s, channels); "
            "'%s' gives a tensor of rank %d",
            c->cls, want,
            want == 1   ? "steps"
            : want == 2 ? "rows, cols"
                        : "depth, rows, cols",
            keras_shown(b, sizeof b, x->g.layers[x->refs[c->in[0]].t].name),
            kr + 2);
    }
    return TPU_OK;
}

tpu_status keras_single_input(kx *x, kcall *c)
{
    if (c->n_in != 1) {
        char b[64];
        return keras_fail(x, c->path, "'%s' (%s) has %d inputs; one expected",
                          keras_shown(b, sizeof b, c->kname), c->cls, c->n_in);
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
    if ((st = keras_grow(x)))
        return st;
    keras_unique_name(x, c->tname, "/pad", name);
    glayer *L = keras_layer_begin(x, name, GOP_PAD, in_t, 1);
    L->pad_lo[1] = (int64_t)(k - 1) * d; /* the steps: [1, steps, C] */
    if ((st = keras_layer_commit(x, c->path, 2, in_t)))
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
    const char *ps = keras_get_str(c->cfg, "padding");
    causal = dims == 1 && ps && strcmp(ps, "causal") == 0;
    if ((st = keras_single_input(x, c)) || (st = need_rank(x, c, dims)) ||
        (st = keras_check_format(x, c)) ||
        (st = keras_cfg_dims(x, c, "kernel_size", dims, 0, kernel)) ||
        (st = keras_cfg_dims(x, c, "strides", dims, 1, strides)) ||
        (st = keras_cfg_dims(x, c, "dilation_rate", dims, 1, dil)) ||
        (!causal && (st = keras_cfg_padding(x, c, "valid", &same))) ||
        (st = keras_cfg_bool(x, c, "use_bias", 1, &bias)))
        return st;
    if (causal)
        same = 0;
    if (kind == 0) {
        if ((st = keras_cfg_int(x, c, "filters", 1, GRAPH_DIM_MAX, 0,
                                &filters)) ||
            (st = keras_cfg_int(x, c, "groups", 1, GRAPH_DIM_MAX, 1, &groups)))
            return st;
    } else {
        if ((st = keras_cfg_int(x, c, "depth_multiplier", 1, GRAPH_DIM_MAX, 1,
                                &dm)))
            return st;
        if (kind == 2 && (st = keras_cfg_int(x, c, "filters", 1, GRAPH_DIM_MAX,
                                             0, &filters)))
            return st;
    }
    int nsp = dims == 1 ? 2 : dims;
    int64_t cin = keras_shape_of(x, c->in[0])->c;
    in_t = x->refs[c->in[0]].t;
    if (causal && kernel[1] > 1 &&
        (st = causal_pad(x, c, kernel[1], dil[1], &in_t)))
        return st;
    if (kind > 0) {
        /* the depthwise part: one group per input channel */
        char name[GRAPH_NAME_MAX];
        if ((st = keras_grow(x)))
            return st;
        if (kind == 2)
            keras_unique_name(x, c->tname, "/depthwise", name);
        else
            snprintf(name, sizeof name, "%s", c->tname);
        glayer *L = keras_layer_begin(x, name, GOP_CONV, &in_t, 1);
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
            (st = keras_emit(x, c, dims + 1, &t)))
            return st;
        weights_done(c, 0, t);
        if (kind == 1)
            goto done;
        in_t = t;
    }
    if ((st = keras_grow(x)))
        return st;
    glayer *L = keras_layer_begin(x, c->tname, GOP_CONV, &in_t, 1);
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
        (st = keras_emit(x, c, dims + 1, &t)))
        return st;
    weights_done(c, kind == 2, t);
done:
    if ((st = keras_new_ref(x, t, &c->out)))
        return st;
    return cfg_act(x, c);
}

static tpu_status map_conv_t(kx *x, kcall *c)
{
    int dims = c->arg, kernel[3], strides[3], dil[3], same, bias, t;
    int64_t filters;
    tpu_status st;
    const cJSON *op = keras_get(c->cfg, "output_padding");
    if ((st = keras_single_input(x, c)) || (st = need_rank(x, c, dims)) ||
        (st = keras_check_format(x, c)) ||
        (st = keras_cfg_dims(x, c, "kernel_size", dims, 0, kernel)) ||
        (st = keras_cfg_dims(x, c, "strides", dims, 1, strides)) ||
        (st = keras_cfg_dims(x, c, "dilation_rate", dims, 1, dil)) ||
        (st = keras_cfg_padding(x, c, "valid", &same)) ||
        (st = keras_cfg_bool(x, c, "use_bias", 1, &bias)) ||
        (st = keras_cfg_int(x, c, "filters", 1, GRAPH_DIM_MAX, 0, &filters)))
        return st;
    int nsp = dims == 1 ? 2 : dims;
    for (int d = 0; d < nsp; d++)
        if (dil[d] != 1) {
            char p[KERAS_PATH_MAX];
            keras_path(p, c->path, ".config.dilation_rate");
            return keras_fail(x, p,
                              "a dilated transposed convolution has no "
                              "trace equivalent");
        }
    if (op && !cJSON_IsNull(op)) {
        char p[KERAS_PATH_MAX];
        keras_path(p, c->path, ".config.output_padding");
        return keras_fail(x, p,
                          "output_padding has no trace equivalent (the "
                          "trace's conv_transpose follows Keras's default "
                          "output size)");
    }
    if ((st = keras_grow(x)))
        return st;
    int in_t = x->refs[c->in[0]].t;
    glayer *L = keras_layer_begin(x, c->tname, GOP_CONV_T, &in_t, 1);
    L->filters = (int)filters;
    L->use_bias = bias;
    L->pad_same = same;
    for (int d = 0; d < nsp; d++) {
        L->kernel[d] = kernel[d];
        L->strides[d] = strides[d];
    }
    if ((st = weights_of(x, c, L, 0)) || (st = keras_emit(x, c, dims + 1, &t)))
        return st;
    weights_done(c, 0, t);
    if ((st = keras_new_ref(x, t, &c->out)))
        return st;
    return cfg_act(x, c);
}

static tpu_status map_dense(kx *x, kcall *c)
{
    int64_t units;
    int bias, t;
    tpu_status st;
    if ((st = keras_single_input(x, c)) ||
        (st = keras_cfg_int(x, c, "units", 1, GRAPH_DIM_MAX, 0, &units)) ||
        (st = keras_cfg_bool(x, c, "use_bias", 1, &bias)) ||
        (st = keras_grow(x)))
        return st;
    if (keras_is_cf(x, c->in[0])) {
        char b[64], b2[64];
        return keras_fail(
            x, c->path,
            "'%s' (Dense) acts on the last axis, which "
            "on its channels_first input '%s' is a spatial one: the "
            "trace's dense acts on the channels (Flatten first, or "
            "Permute the channels last)",
            keras_shown(b, sizeof b, c->kname),
            keras_shown(b2, sizeof b2, x->g.layers[x->refs[c->in[0]].t].name));
    }
    int in_t = x->refs[c->in[0]].t;
    glayer *L = keras_layer_begin(x, c->tname, GOP_DENSE, &in_t, 1);
    L->filters = (int)units;
    L->use_bias = bias;
    if ((st = weights_of(x, c, L, 0)) ||
        (st = keras_emit(x, c, keras_krank_of(x, c->in[0]), &t)))
        return st;
    weights_done(c, 0, t);
    if ((st = keras_new_ref(x, t, &c->out)))
        return st;
    return cfg_act(x, c);
}

/* The axis key names the channel axis: on a channels-last tensor the last
 * one, -1 or rank (Keras counts the batch as axis 0), on a channels-first
 * one 1 or -rank; possibly as a one-entry list (Keras 2's
 * BatchNormalization writes [3]).  Absent, it is Keras's default, -1. */
static tpu_status channel_axis(kx *x, kcall *c, int def_ok)
{
    const cJSON *j = keras_get(c->cfg, "axis");
    int kr = keras_krank_of(x, c->in[0]), cf = keras_is_cf(x, c->in[0]), a = -1;
    char p[KERAS_PATH_MAX];
    keras_path(p, c->path, ".config.axis");
    if (!j || cJSON_IsNull(j)) {
        if (!def_ok)
            return keras_fail(x, p, "missing");
        if (!cf)
            return TPU_OK;
    } else {
        if (cJSON_IsArray(j) && cJSON_GetArraySize(j) == 1)
            j = cJSON_GetArrayItem(j, 0);
        if (!keras_is_int(j, -64, 64))
            return keras_fail(x, p, "expected an integer axis, found %s",
                              keras_jtype(j));
        a = (int)j->valuedouble;
    }
    if (cf && a != 1 && a != -kr)
        return keras_fail(
            x, p,
            "axis %d%s is not the channel axis of this "
            "channels_first tensor (1 or %d): the trace's %s works "
            "on the channels only",
            a, j && !cJSON_IsNull(j) ? "" : " (Keras's default)", -kr, c->cls);
    if (!cf && a != -1 && a != kr)
        return keras_fail(x, p,
                          "axis %d is not the channel axis (-1 or %d): the "
                          "trace's %s works on the channels (the last axis) "
                          "only",
                          a, kr, c->cls);
    return TPU_OK;
}

static tpu_status map_batchnorm(kx *x, kcall *c)
{
    int t, center = 1, scale = 1;
    tpu_status st;
    if ((st = keras_single_input(x, c)) || (st = channel_axis(x, c, 1)) ||
        (st = keras_cfg_bool(x, c, "center", 1, &center)) ||
        (st = keras_cfg_bool(x, c, "scale", 1, &scale)) || (st = keras_grow(x)))
        return st;
    int in_t = x->refs[c->in[0]].t;
    glayer *L = keras_layer_begin(x, c->tname, GOP_BATCHNORM, &in_t, 1);
    L->no_scale = !scale;
    L->no_center = !center;
    if ((st = weights_of(x, c, L, 0)) ||
        (st = keras_emit(x, c, keras_krank_of(x, c->in[0]), &t)))
        return st;
    weights_done(c, 0, t);
    return keras_new_ref(x, t, &c->out);
}

static tpu_status map_activation(kx *x, kcall *c)
{
    tpu_status st = keras_single_input(x, c);
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
        return keras_oom(x);
    if ((st = keras_single_input(x, c)) || (st = channel_axis(x, c, 1))) {
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
        const cJSON *j = keras_get(cfg, keys[k]);
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
    const cJSON *j = keras_get(c->cfg, key);
    char p[KERAS_PATH_MAX];
    *out = def;
    if (!j || cJSON_IsNull(j))
        return TPU_OK;
    snprintf(p, sizeof p, "%s.config.%s", c->path, key);
    if (!cJSON_IsNumber(j) ||
        !(j->valuedouble >= -1e6 && j->valuedouble <= 1e6))
        return keras_fail(x, p, "expected a number, found %s", keras_jtype(j));
    *out = j->valuedouble;
    return TPU_OK;
}

static tpu_status map_relu(kx *x, kcall *c)
{
    int t;
    double mv = 0, slope = 0;
    tpu_status st = keras_single_input(x, c);
    if (st || (st = cfg_num(x, c, "max_value", 0, &mv)) ||
        (st = cfg_num(x, c, "negative_slope", 0, &slope)))
        return st;
    if (mv < 0) {
        char p[KERAS_PATH_MAX];
        snprintf(p, sizeof p, "%s.config.max_value", c->path);
        return keras_fail(x, p, "expected a positive number, found %g", mv);
    }
    if (mv > 0 || slope != 0) {
        c->out = c->in[0];
        if (mv == 6 && slope == 0)
            return activation_layer(x, c, GACT_RELU6, 0, 0, NULL);
        return activation_layer(x, c, GACT_RELU, slope, mv, NULL);
    }
    if ((st = keras_grow(x)))
        return st;
    int in_t = x->refs[c->in[0]].t;
    keras_layer_begin(x, c->tname, GOP_RELU, &in_t, 1);
    if ((st = keras_emit(x, c, keras_krank_of(x, c->in[0]), &t)))
        return st;
    return keras_new_ref(x, t, &c->out);
}

/* Max/AveragePooling (arg: dims, + 10 for average). */
static tpu_status map_pool(kx *x, kcall *c)
{
    int dims = c->arg % 10, win[3], str[3], same, t;
    tpu_status st;
    const cJSON *sj = keras_get(c->cfg, "strides");
    if ((st = keras_single_input(x, c)) || (st = need_rank(x, c, dims)) ||
        (st = keras_check_format(x, c)) ||
        (st = keras_cfg_dims(x, c, "pool_size", dims, 2, win)) ||
        (st = keras_cfg_padding(x, c, "valid", &same)))
        return st;
    if (sj && !cJSON_IsNull(sj)) {
        if ((st = keras_cfg_dims(x, c, "strides", dims, 1, str)))
            return st;
    } else {
        memcpy(str, win, sizeof str);
    }
    if ((st = keras_grow(x)))
        return st;
    int nsp = dims == 1 ? 2 : dims, in_t = x->refs[c->in[0]].t;
    glayer *L = keras_layer_begin(
        x, c->tname, c->arg >= 10 ? GOP_AVGPOOL : GOP_MAXPOOL, &in_t, 1);
    L->pad_same = same;
    for (int d = 0; d < nsp; d++) {
        L->kernel[d] = win[d];
        L->strides[d] = str[d];
    }
    if ((st = keras_emit(x, c, dims + 1, &t)))
        return st;
    return keras_new_ref(x, t, &c->out);
}

static const char *check_keepdims(const cJSON *cfg, char *buf, size_t cap)
{
    if (cJSON_IsTrue(keras_get(cfg, "keepdims"))) {
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
    if ((st = keras_single_input(x, c)) || (st = need_rank(x, c, c->arg)) ||
        (st = keras_check_format(x, c)) || (st = keras_grow(x)))
        return st;
    int in_t = x->refs[c->in[0]].t;
    keras_layer_begin(x, c->tname, op, &in_t, 1);
    if ((st = keras_emit(x, c, 1, &t)))
        return st;
    return keras_new_ref(x, t, &c->out);
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
    if ((st = keras_single_input(x, c)) || (st = keras_cfg_format(x, c, &cf)))
        return st;
    if (keras_krank_of(x, c->in[0]) == 1) {
        c->out = c->in[0];
        return TPU_OK;
    }
    if ((st = keras_grow(x)))
        return st;
    int in_t = x->refs[c->in[0]].t;
    keras_layer_begin(x, c->tname, GOP_FLATTEN, &in_t, 1);
    if ((st = keras_emit(x, c, 1, &t)))
        return st;
    return keras_new_ref(x, t, &c->out);
}

static tpu_status map_dropout(kx *x, kcall *c)
{
    const cJSON *j = keras_get(c->cfg, "rate");
    char p[KERAS_PATH_MAX];
    int t;
    tpu_status st = keras_single_input(x, c);
    if (st)
        return st;
    if ((st = keras_check_format(x, c)))
        return st;
    keras_path(p, c->path, ".config.rate");
    if (!cJSON_IsNumber(j) || !(j->valuedouble >= 0 && j->valuedouble < 1))
        return keras_fail(x, p, "expected a rate in [0, 1), found %s",
                          cJSON_IsNumber(j) ? "a number out of range"
                                            : keras_jtype(j));
    if (j->valuedouble == 0) {
        c->out = c->in[0];
        return TPU_OK;
    }
    if ((st = keras_grow(x)))
        return st;
    int in_t = x->refs[c->in[0]].t;
    glayer *L = keras_layer_begin(x, c->tname, GOP_DROPOUT, &in_t, 1);
    L->rate = j->valuedouble;
    if ((st = keras_emit(x, c, keras_krank_of(x, c->in[0]), &t)))
        return st;
    return keras_new_ref(x, t, &c->out);
}

/* Whether call c's inputs all have one shape. */
static int same_shapes(const kx *x, const kcall *c)
{
    const gshape *a = keras_shape_of(x, c->in[0]);
    for (int k = 1; k < c->n_in; k++) {
        const gshape *b = keras_shape_of(x, c->in[k]);
        if (b->nsp != a->nsp || b->c != a->c)
            return 0;
        for (int d = 0; d < a->nsp; d++)
            if (b->sp[d] != a->sp[d])
                return 0;
    }
    return 1;
}

/* A merge's inputs are in one layout.  A flat operand ([C]) broadcasts
 * along Keras's last axis, which on a channels-first tensor is a spatial
 * one (channels-first models reshape their gates to (C, 1, 1)). */
static tpu_status merge_layouts(kx *x, kcall *c)
{
    int lay = -1, first = -1, flat = -1;
    char b[64], b2[64], b3[64];
    for (int k = 0; k < c->n_in; k++) {
        int r = c->in[k];
        if (keras_krank_of(x, r) < 2) {
            flat = flat < 0 ? k : flat;
            continue;
        }
        if (lay < 0) {
            lay = x->refs[r].cf;
            first = k;
        } else if (x->refs[r].cf != lay) {
            return keras_fail(
                x, c->path,
                "'%s' (%s) joins '%s', a %s tensor, "
                "and '%s', a %s one: one of them is read in the "
                "wrong layout",
                keras_shown(b, sizeof b, c->kname), c->cls,
                keras_shown(b2, sizeof b2,
                            x->g.layers[x->refs[c->in[first]].t].name),
                keras_layout_name(lay),
                keras_shown(b3, sizeof b3, x->g.layers[x->refs[r].t].name),
                keras_layout_name(!lay));
        }
    }
    if (lay == 1 && flat >= 0)
        return keras_fail(
            x, c->path,
            "'%s' (%s): the flat operand '%s' broadcasts "
            "along the last axis of the channels_first tensor '%s', "
            "a spatial one, not its channels (Reshape it to (C, 1, "
            "1) to scale the channels)",
            keras_shown(b, sizeof b, c->kname), c->cls,
            keras_shown(b2, sizeof b2,
                        x->g.layers[x->refs[c->in[flat]].t].name),
            keras_shown(b3, sizeof b3,
                        x->g.layers[x->refs[c->in[first]].t].name));
    return TPU_OK;
}

/* A merge's inputs: 2 to GRAPH_MAX_IN of them (the trace's op named
 * for the message), in layouts that agree (merge_layouts). */
static tpu_status merge_inputs(kx *x, kcall *c, const char *op)
{
    char b[64];
    if (c->n_in < 2 || c->n_in > GRAPH_MAX_IN)
        return keras_fail(x, c->path,
                          "'%s' (%s) has %d inputs; the trace's %s "
                          "takes 2 to %d",
                          keras_shown(b, sizeof b, c->kname), c->cls, c->n_in,
                          op, GRAPH_MAX_IN);
    return merge_layouts(x, c);
}

/* The trace's elementwise of kind c->arg over the merge's inputs, which
 * merge_inputs accepted; its rank is the largest operand's. */
static tpu_status emit_ew(kx *x, kcall *c)
{
    int t, in_t[GRAPH_MAX_IN];
    tpu_status st;
    if ((st = keras_grow(x)))
        return st;
    for (int k = 0; k < c->n_in; k++)
        in_t[k] = x->refs[c->in[k]].t;
    int kr = keras_krank_of(x, c->in[0]);
    for (int k = 1; k < c->n_in; k++)
        if (gshape_elems(keras_shape_of(x, c->in[k])) >
            gshape_elems(keras_shape_of(x, c->in[0])))
            kr = keras_krank_of(x, c->in[k]);
    glayer *L = keras_layer_begin(x, c->tname, GOP_ELEMWISE, in_t, c->n_in);
    L->kind = c->arg;
    if ((st = keras_emit(x, c, kr, &t)))
        return st;
    return keras_new_ref(x, t, &c->out);
}

/* Add (arg 0) and Concatenate (arg 1).  An Add whose operands broadcast
 * (a per-position gate [H,W,1], a per-channel [1,1,C]) is the trace's
 * elementwise add; the trace's add takes identical shapes. */
static tpu_status map_merge(kx *x, kcall *c)
{
    int t, in_t[GRAPH_MAX_IN];
    tpu_status st;
    if ((st = merge_inputs(x, c, c->arg ? "concat" : "add")) ||
        (c->arg && (st = channel_axis(x, c, 1))))
        return st;
    if (!c->arg && !same_shapes(x, c)) {
        c->arg = GEW_ADD;
        if ((st = emit_ew(x, c)))
            return st;
        return cfg_act(x, c);
    }
    if ((st = keras_grow(x)))
        return st;
    for (int k = 0; k < c->n_in; k++)
        in_t[k] = x->refs[c->in[k]].t;
    keras_layer_begin(x, c->tname, c->arg ? GOP_CONCAT : GOP_ADD, in_t,
                      c->n_in);
    if ((st = keras_emit(x, c, keras_krank_of(x, c->in[0]), &t)))
        return st;
    if ((st = keras_new_ref(x, t, &c->out)))
        return st;
    return c->arg ? TPU_OK : cfg_act(x, c);
}

static const char *check_nearest(const cJSON *cfg, char *buf, size_t cap)
{
    const char *s = keras_get_str(cfg, "interpolation");
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
    if ((st = keras_single_input(x, c)) || (st = need_rank(x, c, dims)) ||
        (st = keras_check_format(x, c)) ||
        (st = keras_cfg_dims(x, c, dims == 1 ? "size" : "size", dims, 2, f)) ||
        (st = keras_grow(x)))
        return st;
    int nsp = dims == 1 ? 2 : dims, in_t = x->refs[c->in[0]].t;
    const char *ip = keras_get_str(c->cfg, "interpolation");
    int bilinear = ip && strcmp(ip, "bilinear") == 0;
    glayer *L = keras_layer_begin(
        x, c->tname, bilinear ? GOP_RESIZE : GOP_UPSAMPLE, &in_t, 1);
    for (int d = 0; d < nsp; d++)
        L->factor[d] = f[d];
    if ((st = keras_emit(x, c, dims + 1, &t)))
        return st;
    return keras_new_ref(x, t, &c->out);
}

/* LeakyReLU (arg 0: alpha, Keras 2's key, or negative_slope, Keras 3's;
 * 0.3 by default), ELU (arg 1: alpha, 1 by default). */
static tpu_status map_leaky_elu(kx *x, kcall *c)
{
    double a;
    tpu_status st = keras_single_input(x, c);
    if (st)
        return st;
    if (c->arg == 0) {
        if ((st = cfg_num(x, c, "alpha", 0.3, &a)) ||
            (keras_get(c->cfg, "negative_slope") &&
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
    tpu_status st = keras_single_input(x, c);
    int kr = keras_krank_of(x, c->in[0]) - 1, seen[4] = {0, 0, 0, 0}, n = 0;
    if (st)
        return st;
    char b[64];
    /* share_weights does not reach an activation: a second call would
     * count the slopes again */
    if (c->seen->calls > 1)
        return keras_fail(
            x, c->path,
            "'%s' (PReLU) is called %d times: the "
            "trace shares weights between convolutions, dense and "
            "normalisation layers only (share_weights), so its "
            "slopes would be counted once a call",
            keras_shown(b, sizeof b, c->kname), c->seen->calls);
    /* the spatial axes: 1 .. kr channels-last, 2 .. kr + 1 channels-first */
    int lo = keras_is_cf(x, c->in[0]) ? 2 : 1;
    const cJSON *sa = keras_get(c->cfg, "shared_axes");
    for (const cJSON *e = cJSON_IsArray(sa) ? sa->child : NULL; e;
         e = e->next)
        if (cJSON_IsNumber(e) && e->valuedouble >= lo &&
            e->valuedouble < lo + kr && !seen[(int)e->valuedouble - lo]++)
            n++;
    if (kr > 0 && n != kr) {
        char p[KERAS_PATH_MAX];
        snprintf(p, sizeof p, "%s.config.shared_axes", c->path);
        return keras_fail(x, p,
                          "'%s' (PReLU) learns a slope per element; the "
                          "trace's prelu has one per channel: shared_axes must "
                          "list every spatial axis (%d to %d)",
                          keras_shown(b, sizeof b, c->kname), lo, lo + kr - 1);
    }
    c->out = c->in[0];
    int t0 = x->g.n_layers;
    if ((st = activation_layer(x, c, GACT_PRELU, 0, 0, NULL)))
        return st;
    int tr = 1;
    if ((st = keras_cfg_bool(x, c, "trainable", 1, &tr)))
        return st;
    x->g.layers[t0].frozen = c->frozen || !tr;
    return TPU_OK;
}

/* Multiply, Subtract, Maximum, Minimum, Average (arg: graph_ew). */
static tpu_status map_ew(kx *x, kcall *c)
{
    tpu_status st = merge_inputs(x, c, "elementwise");
    return st ? st : emit_ew(x, c);
}
/* Rescaling (x * scale + offset) is folded into the reader of its
 * output, as XLA fuses it: no layer, no parameters (Keras counts none). */
static tpu_status map_folded(kx *x, kcall *c)
{
    tpu_status st = keras_single_input(x, c);
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
    if ((st = keras_single_input(x, c)) || (st = channel_axis(x, c, 1)) ||
        (st = keras_cfg_bool(x, c, "center", 1, &center)) ||
        (st = keras_cfg_bool(x, c, "scale", 1, &scale)) || (st = keras_grow(x)))
        return st;
    if (c->arg == GOP_GROUPNORM &&
        (st = keras_cfg_int(x, c, "groups", 1, GRAPH_DIM_MAX, 32, &groups)))
        return st;
    int in_t = x->refs[c->in[0]].t;
    glayer *L = keras_layer_begin(x, c->tname, (graph_op)c->arg, &in_t, 1);
    L->groups = (int)groups;
    if (c->arg != GOP_NORMALIZE) {
        L->no_scale = !scale;
        L->no_center = !center;
    }
    if ((st = weights_of(x, c, L, 0)))
        return st;
    if (c->arg == GOP_NORMALIZE) /* adapted, never trained */
        L->frozen = 1;
    if ((st = keras_emit(x, c, keras_krank_of(x, c->in[0]), &t)))
        return st;
    weights_done(c, 0, t);
    return keras_new_ref(x, t, &c->out);
}

/* One entry of ZeroPadding's padding or Cropping's cropping: n for both
 * ends, or [lo, hi]. */
static int pad_entry(const cJSON *e, int *lo, int *hi)
{
    if (keras_is_int(e, 0, GRAPH_DIM_MAX)) {
        *lo = *hi = (int)e->valuedouble;
        return 1;
    }
    if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) != 2 ||
        !keras_is_int(cJSON_GetArrayItem(e, 0), 0, GRAPH_DIM_MAX) ||
        !keras_is_int(cJSON_GetArrayItem(e, 1), 0, GRAPH_DIM_MAX))
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
    if ((st = keras_single_input(x, c)) || (st = need_rank(x, c, dims)) ||
        (st = keras_check_format(x, c)) || (st = keras_grow(x)))
        return st;
    const cJSON *j = keras_get(c->cfg, key);
    keras_path(p, c->path, ".config.%s", key);
    if (j && keras_is_int(j, 0, GRAPH_DIM_MAX)) {
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
        return keras_fail(x, p,
                          "expected an integer or %d entries (each an "
                          "integer or [lo, hi]), found %s",
                          dims, keras_jtype(j));
    int in_t = x->refs[c->in[0]].t, sg = crop ? -1 : 1;
    glayer *L =
        keras_layer_begin(x, c->tname, crop ? GOP_CROP : GOP_PAD, &in_t, 1);
    /* a 1D layer is the trace's 2D one of height 1 */
    for (int d = 0; d < dims; d++) {
        L->pad_lo[d + (dims == 1)] = sg * lo[d];
        L->pad_hi[d + (dims == 1)] = sg * hi[d];
    }
    if ((st = keras_emit(x, c, dims + 1, &t)))
        return st;
    return keras_new_ref(x, t, &c->out);
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
    const cJSON *j = keras_get(c->cfg, "target_shape");
    char p[KERAS_PATH_MAX];
    int64_t v[4] = {0}, known = 1, elems;
    int n = 0, free_at = -1, t;
    tpu_status st;
    if ((st = keras_single_input(x, c)) || (st = keras_grow(x)))
        return st;
    keras_path(p, c->path, ".config.target_shape");
    elems = gshape_elems(keras_shape_of(x, c->in[0]));
    if (!j || !cJSON_IsArray(j) || cJSON_GetArraySize(j) < 1 ||
        cJSON_GetArraySize(j) > 4)
        return keras_fail(x, p, "expected a list of 1 to 4 integers, found %s",
                          keras_jtype(j));
    for (const cJSON *e = j->child; e; e = e->next, n++) {
        if (keras_is_int(e, -1, -1) && free_at < 0) {
            free_at = n;
            v[n] = 1;
            continue;
        }
        if (!keras_is_int(e, 1, GRAPH_DIM_MAX))
            return keras_fail(x, p,
                              "expected positive integers and at most one "
                              "-1");
        v[n] = (int64_t)e->valuedouble;
        known *= v[n];
    }
    if (free_at >= 0 && elems % known == 0)
        v[free_at] = elems / known;
    int in_t = x->refs[c->in[0]].t;
    if (n == 1) {
        if (keras_krank_of(x, c->in[0]) == 1 && v[0] == elems) {
            c->out = c->in[0];
            return TPU_OK;
        }
        keras_layer_begin(x, c->tname, GOP_FLATTEN, &in_t, 1);
        if (v[0] != elems)
            return keras_fail(x, p, "%lld elements, the input has %lld",
                              (long long)v[0], (long long)elems);
        if ((st = keras_emit(x, c, 1, &t)))
            return st;
        return keras_new_ref(x, t, &c->out);
    }
    /* A channels-first result ([C, spatial...]) is the trace's [spatial...,
     * C]: from a channels-first tensor when the channels stay the first
     * axis, from a flat one in a channels-first model (or, in a model of
     * both layouts, a (C, 1, 1) gate). */
    int out_cf = keras_is_cf(x, c->in[0]);
    char b[64];
    if (keras_krank_of(x, c->in[0]) < 2) {
        int ones_after = 1, ones_before = 1;
        for (int d = 1; d < n; d++)
            ones_after &= v[d] == 1;
        for (int d = 0; d < n - 1; d++)
            ones_before &= v[d] == 1;
        out_cf = x->fmt == KERAS_CF;
        if (x->fmt == KERAS_MIXED) {
            if (ones_after == ones_before)
                return keras_fail(
                    x, p,
                    "a flat tensor into %d axes in a model "
                    "whose layers are channels_first and "
                    "channels_last: which axis holds the channels "
                    "is not clear",
                    n);
            out_cf = ones_after;
        }
    } else if (out_cf && v[0] != keras_shape_of(x, c->in[0])->c) {
        return keras_fail(
            x, p,
            "'%s' is channels_first with %lld channels; a "
            "target of %lld first moves elements across the channel "
            "axis (the trace reshapes the positions and keeps the "
            "channels)",
            keras_shown(b, sizeof b, x->g.layers[x->refs[c->in[0]].t].name),
            (long long)keras_shape_of(x, c->in[0])->c, (long long)v[0]);
    }
    if (out_cf) {
        int64_t ch = v[0];
        for (int d = 0; d + 1 < n; d++)
            v[d] = v[d + 1];
        v[n - 1] = ch;
    }
    glayer *L = keras_layer_begin(x, c->tname, GOP_RESHAPE, &in_t, 1);
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
    if ((st = keras_emit(x, c, n, &t)))
        return st;
    x->kcf[t] = out_cf;
    return keras_new_ref(x, t, &c->out);
}

/* Permute: the trace has no transpose, but a permutation that only moves
 * the channel axis (channels-first to channels-last, (2, 3, 1), or back,
 * (3, 1, 2); (2, 1) for a sequence) changes the layout Keras reads the
 * tensor in, not the tensor: no layer, the same trace tensor. */
static const char *check_permute(const cJSON *cfg, char *buf, size_t cap)
{
    const cJSON *j = keras_get(cfg, "dims");
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
    const cJSON *j = keras_get(c->cfg, "dims");
    int n = cJSON_GetArraySize(j), kr = keras_krank_of(x, c->in[0]);
    char p[KERAS_PATH_MAX], b[64];
    tpu_status st = keras_single_input(x, c);
    if (st)
        return st;
    keras_path(p, c->path, ".config.dims");
    /* check_permute let through a move of the first or the last axis */
    int to_last = n == 2 ||
                  (int)cJSON_GetArrayItem(j, n - 1)->valuedouble == 1;
    int cf = x->refs[c->in[0]].cf;
    if (n != kr)
        return keras_fail(
            x, p, "%d axes for '%s', a tensor of rank %d", n,
            keras_shown(b, sizeof b, x->g.layers[x->refs[c->in[0]].t].name),
            kr + 1);
    if (n > 2 && to_last != cf)
        return keras_fail(
            x, p,
            "'%s' is %s: this permutation moves its %s axis, "
            "not the channels, and the trace has no transpose",
            keras_shown(b, sizeof b, x->g.layers[x->refs[c->in[0]].t].name),
            keras_layout_name(cf),
            to_last ? "first (spatial)" : "last (spatial)");
    if ((st = keras_new_ref(x, x->refs[c->in[0]].t, &c->out)))
        return st;
    x->refs[c->out].cf = !cf;
    return TPU_OK;
}


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
    {"Sequential", keras_map_model, NULL, 0},
    {"Functional", keras_map_model, NULL, 0},
    {"Model", keras_map_model, NULL, 0},
};

const keras_class *keras_class_find(const char *cls)
{
    for (size_t i = 0; cls && i < sizeof keras_classes /
                                      sizeof keras_classes[0];
         i++)
        if (strcmp(keras_classes[i].cls, cls) == 0)
            return &keras_classes[i];
    return NULL;
}

int keras_is_model_class(const char *cls)
{
    return cls && (strcmp(cls, "Sequential") == 0 ||
                   strcmp(cls, "Functional") == 0 ||
                   strcmp(cls, "Model") == 0);
}
