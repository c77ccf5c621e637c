/* keras_model — the Keras importer's models (keras_internal.h): the
 * trace being built (refs, trace layers and their JSON, names), the
 * layout a model's layers' data_format says, Sequential and Functional
 * models walked the way Keras's from_config does (inbound nodes, a layer
 * called twice, models nested as layers), and the scan that lists every
 * unmapped class at once.  Separate from keras_layers.c: this file knows
 * how layers connect, that one what each class becomes.
 */
#include "emu/imp/keras_internal.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the graph being built --------------------------------------------- */

tpu_status keras_new_ref(kx *x, int t, int *ref)
{
    if (x->n_refs == x->cap_refs) {
        int cap = x->cap_refs ? 2 * x->cap_refs : 64;
        keras_ref *r = realloc(x->refs, (size_t)cap * sizeof *r);
        if (!r)
            return keras_oom(x);
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
void keras_unique_name(const kx *x, const char *base, const char *suffix,
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
tpu_status keras_grow(kx *x)
{
    if (x->g.n_layers >= GRAPH_LAYERS_MAX)
        return keras_fail(x, NULL, "more than %d trace layers",
                          GRAPH_LAYERS_MAX);
    if (x->g.n_layers < x->cap_layers)
        return TPU_OK;
    int cap = x->cap_layers ? 2 * x->cap_layers : 256;
    glayer *l = realloc(x->g.layers, (size_t)cap * sizeof *l);
    if (!l)
        return keras_oom(x);
    x->g.layers = l;
    int *k = realloc(x->krank, (size_t)cap * sizeof *k);
    if (!k)
        return keras_oom(x);
    x->krank = k;
    k = realloc(x->kcf, (size_t)cap * sizeof *k);
    if (!k)
        return keras_oom(x);
    x->kcf = k;
    x->cap_layers = cap;
    tpu_error e;
    if (graph_index_reserve(&x->g, cap, &e))
        return keras_oom(x);
    return TPU_OK;
}

/* A new trace layer (not yet committed): name, op and inputs set, every
 * other field at the trace's defaults. */
glayer *keras_layer_begin(kx *x, const char *name, graph_op op, const int *in_t,
                          int n_in)
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
tpu_status keras_layer_commit(kx *x, const char *path, int krank, int *t)
{
    int i = x->g.n_layers;
    glayer *L = &x->g.layers[i];
    const char *key = NULL;
    tpu_error e;
    if (graph_infer_layer(&x->g, i, &key, &e))
        return keras_fail(x, path, "%s (as the trace's %s '%s')", e.msg,
                          graph_op_name(L->op), L->name);
    cJSON *j = layer_json(x, L);
    if (!j || !cJSON_AddItemToArray(x->layers, j)) {
        cJSON_Delete(j);
        return keras_oom(x);
    }
    x->krank[i] = krank;
    x->kcf[i] = 0;
    x->g.n_layers++;
    graph_index_add(&x->g, i);
    *t = i;
    return TPU_OK;
}

int keras_krank_of(const kx *x, int ref)
{
    return x->krank[x->refs[ref].t];
}

const gshape *keras_shape_of(const kx *x, int ref)
{
    return &x->g.layers[x->refs[ref].t].out;
}

/* Whether ref r is a channels-first tensor with a layout (rank 2 or more
 * per example: a flat one has none). */
int keras_is_cf(const kx *x, int r)
{
    return keras_krank_of(x, r) > 1 && x->refs[r].cf;
}

/* Emits one layer of the call c, committed; the layer must have been
 * filled by the caller through *L.  Its Keras tensor is channels-first
 * when one it reads is (the layer checked that they agree) and it keeps
 * a layout (rank 2 or more). */
tpu_status keras_emit(kx *x, kcall *c, int krank, int *t)
{
    tpu_status st = keras_layer_commit(x, c->path, krank, t);
    for (int k = 0; !st && krank > 1 && k < c->n_in; k++)
        if (keras_is_cf(x, c->in[k]))
            x->kcf[*t] = 1;
    return st;
}

const char *keras_layout_name(int cf)
{
    return cf ? "channels_first" : "channels_last";
}

/* The layer's data_format: *cf 1 for channels_first, 0 for
 * channels_last, -1 when the config does not say. */
tpu_status keras_cfg_format(kx *x, kcall *c, int *cf)
{
    const cJSON *j = keras_get(c->cfg, "data_format");
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
        keras_path(p, c->path, ".config.data_format");
        if (!cJSON_IsString(j))
            return keras_fail(x, p,
                              "expected \"channels_last\" or "
                              "\"channels_first\", found %s",
                              keras_jtype(j));
        return keras_fail(x, p,
                          "'%s' is not \"channels_last\" or "
                          "\"channels_first\"",
                          keras_shown(b, sizeof b, j->valuestring));
    }
    return TPU_OK;
}

/* A layer with a data_format (convolutions, pooling, padding, cropping,
 * upsampling, global pooling) reads its input in that layout: the input
 * tensor must be in it, as every layer before decided (the trace holds
 * one layout per tensor; a model that reads one tensor both ways has no
 * trace equivalent). */
tpu_status keras_check_format(kx *x, kcall *c)
{
    int cf;
    tpu_status st = keras_cfg_format(x, c, &cf);
    if (st || cf < 0 || keras_krank_of(x, c->in[0]) < 2 ||
        x->refs[c->in[0]].cf == cf)
        return st;
    char p[KERAS_PATH_MAX], b[64], b2[64];
    keras_path(p, c->path, ".config.data_format");
    return keras_fail(
        x, p,
        "'%s' (%s) is %s, but its input '%s' is a %s tensor "
        "(as the layers before it read it): one tensor read in both "
        "layouts has no trace equivalent",
        keras_shown(b, sizeof b, c->kname), c->cls, keras_layout_name(cf),
        keras_shown(b2, sizeof b2, x->g.layers[x->refs[c->in[0]].t].name),
        keras_layout_name(!cf));
}

/* ---- the unmapped classes, all at once --------------------------------- */


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
    keras_shown(u->key, sizeof u->key, key);
    /* a class name from the file may hold control characters: the
     * message is one line */
    snprintf(u->label, sizeof u->label, "%s", label);
    for (char *q = u->label; *q; q++)
        if ((unsigned char)*q < 0x20 || *q == 0x7f)
            *q = '?';
    snprintf(u->first, sizeof u->first, "%s", path);
    keras_shown(u->first_name, sizeof u->first_name, name);
    u->count = 1;
}

static const cJSON *model_layers(const cJSON *model, char *lpath,
                                 const char *path);

/* Walks every layer of the model (nested models included) and records
 * the ones that cannot be mapped and are not allowed through. */
void keras_scan_model(const kx *x, const cJSON *model, const char *path,
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
        const char *cls = keras_get_str(l, "class_name");
        const cJSON *cfg = keras_get(l, "config");
        const char *name = keras_get_str(l, "name");
        keras_path(p, lpath, "[%d]", i++);
        if (!name)
            name = keras_get_str(cfg, "name");
        if (!cls)
            continue; /* refused with its path when it is built */
        const keras_class *k = keras_class_find(cls);
        if (keras_is_model_class(cls)) {
            keras_scan_model(x, l, p, s, depth + 1);
            continue;
        }
        if (!k) {
            if (!keras_allowed(x, cls))
                scan_add(s, cls, cls, p, name);
            continue;
        }
        if (k->check && k->check(cfg, why, sizeof why) &&
            !keras_allowed(x, cls)) {
            snprintf(lab, sizeof lab, "%s(%s)", cls, why);
            scan_add(s, cls, lab, p, name);
        }
        const cJSON *aj = keras_get(cfg, "activation");
        if (aj) {
            const char *a = keras_act_name(aj);
            if (a && !keras_act_find(a) && !keras_allowed(x, a)) {
                char ap[KERAS_PATH_MAX];
                keras_path(ap, p, ".config.activation");
                snprintf(lab, sizeof lab, "activation '%.60s'", a);
                scan_add(s, a, lab, ap, name);
            }
        }
    }
}

tpu_status keras_scan_fail(kx *x, const keras_scan *s)
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
    return keras_fail(x, s->u[0].first,
                      "layer '%s' (%s) has no trace equivalent; the file's "
                      "unmapped classes: %s%s (--allow-identity %s passes a "
                      "class through unchanged)",
                      s->u[0].first_name, s->u[0].label, list,
                      s->more ? ", and more" : "",
                      keras_shown(b, sizeof b, s->u[0].key));
}

/* ---- models ------------------------------------------------------------ */

/* The list of layers of a model object ({"class_name", "config"}): its
 * config's "layers", or the config itself in old Keras 2 Sequential files
 * (a list); lpath gets its JSON path. */
static const cJSON *model_layers(const cJSON *model, char *lpath,
                                 const char *path)
{
    const cJSON *cfg = keras_get(model, "config");
    if (cJSON_IsArray(cfg)) {
        keras_path(lpath, path, ".config");
        return cfg;
    }
    keras_path(lpath, path, ".config.layers");
    const cJSON *l = keras_get(cfg, "layers");
    return cJSON_IsArray(l) ? l : NULL;
}

const char *keras_layer_name(const cJSON *l)
{
    const char *n = keras_get_str(l, "name");
    return n ? n : keras_get_str(keras_get(l, "config"), "name");
}

/* ---- layouts ----------------------------------------------------------- */

/* Counts the layers of model (nested models too) that say channels_first
 * and channels_last.  Flatten's data_format is left out: it only tells
 * Keras how to order a Dense's weights, and a channels-first model may
 * well keep Keras's default on it. */
void keras_count_formats(const cJSON *model, int depth, int *n_cf, int *n_cl)
{
    char lp[KERAS_PATH_MAX];
    const cJSON *layers = model_layers(model, lp, "");
    const cJSON *l;
    if (depth > KERAS_NEST_MAX || !layers)
        return;
    cJSON_ArrayForEach(l, layers)
    {
        const char *cls = keras_get_str(l, "class_name");
        const char *f = keras_get_str(keras_get(l, "config"), "data_format");
        if (cls && keras_is_model_class(cls)) {
            keras_count_formats(l, depth + 1, n_cf, n_cl);
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
    const char *cls = keras_get_str(l, "class_name");
    if (cls && keras_is_model_class(cls)) {
        int a = 0, b = 0;
        keras_count_formats(l, 1, &a, &b);
        return a && !b ? 1 : b && !a ? 0 : -1;
    }
    const char *f = keras_get_str(keras_get(l, "config"), "data_format");
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
            if (!seen[i] && mentions(keras_get(l, "inbound_nodes"), nm)) {
                const char *ln = keras_layer_name(l);
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
    const cJSON *cfg = keras_get(l, "config");
    for (int k = 0; k < 3; k++) {
        const cJSON *j = keras_get(cfg, keys[k]);
        if (j && !cJSON_IsNull(j)) {
            keras_path(spath, path, ".config.%s", keys[k]);
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
        return keras_fail(x, spath, "expected a list of dimensions, found %s",
                          keras_jtype(shape));
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
                return keras_fail(x, "--input",
                                  "'%.*s' is not a shape such as "
                                  "224x224x3 (1 to 4 positive integers joined "
                                  "by x, each at most %d)",
                                  (int)(len > 40 ? 40 : len), in,
                                  GRAPH_DIM_MAX);
            dims[n++] = v;
            p = end + (end < in + len);
        }
        if (fr >= 1 && n != fr)
            return keras_fail(
                x, "--input",
                "%d dimensions for input '%s', whose "
                "shape has %d per example (%s): give one example's "
                "shape, without the batch and %s",
                n, keras_shown(b, sizeof b, name), fr,
                cf ? "channels-first, as the model reads it" : "channels-last",
                n == fr + 1 ? "the batch seems included"
                            : "Keras "
                              "order");
        *rank = n;
        return TPU_OK;
    }
    if (!shape)
        return keras_fail(x, spath[0] ? spath : NULL,
                          "the model does not say "
                          "the shape of its input '%s': give --input, e.g. "
                          "--input 224x224x3",
                          keras_shown(b, sizeof b, name));
    if (fr < 1 || fr > 4)
        return keras_fail(
            x, spath,
            "an input of rank %d per example; tpuemu "
            "takes 1 (features) to 4 (depth, rows, cols, channels)",
            fr);
    for (int k = 0; k < fr; k++) {
        const cJSON *e = cJSON_GetArrayItem(shape, k + has_batch);
        if (cJSON_IsNull(e))
            return keras_fail(x, spath,
                              "dimension %d of input '%s' is not given "
                              "(None): the model runs at any size, so give one "
                              "with --input, e.g. --input %s",
                              k + 1, keras_shown(b, sizeof b, name),
                              fr == 3   ? "224x224x3"
                              : fr == 4 ? "16x112x112x3"
                                        : "1000x64");
        if (!keras_is_int(e, 1, GRAPH_DIM_MAX))
            return keras_fail(x, spath,
                              "dimension %d: expected a positive "
                              "integer (at most %d) or null, found %s",
                              k + 1, GRAPH_DIM_MAX, keras_jtype(e));
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
    if (st || (st = keras_grow(x)))
        return st;
    if (cf < 0 && rank > 1) {
        char b[64];
        return keras_fail(
            x, spath[0] ? spath : NULL,
            "no layer reading input "
            "'%s' says its data_format, and the model's layers are "
            "channels_first and channels_last: its layout is not "
            "clear",
            keras_shown(b, sizeof b, name));
    }
    cf = cf > 0 && rank > 1;
    if (cf) {
        int64_t ch = dims[0];
        for (int d = 0; d + 1 < rank; d++)
            dims[d] = dims[d + 1];
        dims[rank - 1] = ch;
    }
    keras_unique_name(x, name && *name ? name : "input", NULL, tname);
    int i = x->g.n_layers;
    glayer *L = keras_layer_begin(x, tname, GOP_INPUT, NULL, 0);
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
        return keras_fail(x, spath[0] ? spath : "--input", "%s", e.msg);
    cJSON *j = cJSON_CreateObject();
    cJSON *s = cJSON_CreateArray();
    if (!j || !s || !cJSON_AddItemToArray(x->inputs, j)) {
        cJSON_Delete(j);
        cJSON_Delete(s);
        return keras_oom(x);
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
    return keras_new_ref(x, i, ref);
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
    c.cls = keras_get_str(l, "class_name");
    c.cfg = keras_get(l, "config");
    c.kname = keras_layer_name(l);
    c.in = in;
    c.n_in = n_in;
    c.frozen = frozen;
    if (!cJSON_IsObject(l))
        return keras_fail(x, path, "expected a layer object, found %s",
                          keras_jtype(l));
    if (!c.cls) {
        keras_path(p, path, ".class_name");
        return keras_fail(x, p, "expected the layer's class name, found %s",
                          keras_jtype(keras_get(l, "class_name")));
    }
    if (!cJSON_IsObject(c.cfg) &&
        !(keras_is_model_class(c.cls) && cJSON_IsArray(c.cfg))) {
        keras_path(p, path, ".config");
        return keras_fail(x, p, "expected an object, found %s",
                          keras_jtype(c.cfg));
    }
    if (!c.kname)
        return keras_fail(x, path, "the layer has no name");
    if (!(c.seen = seen_of(x, l)))
        return keras_oom(x);
    c.seen->calls++;
    {
        char base[512];
        snprintf(base, sizeof base, "%s%s", prefix, c.kname);
        if (c.seen->calls > 1) {
            char sfx[16];
            snprintf(sfx, sizeof sfx, "@%d", c.seen->calls - 1);
            keras_unique_name(x, base, sfx, c.tname);
        } else {
            keras_unique_name(x, base, NULL, c.tname);
        }
    }
    const keras_class *k = keras_class_find(c.cls);
    char why[96];
    int pass = !k || (k->check && k->check(c.cfg, why, sizeof why));
    if (pass) {
        tpu_status st;
        if (!keras_allowed(x, c.cls))
            return keras_fail(x, path,
                              "layer '%s' (%s) has no trace equivalent",
                              keras_shown(b, sizeof b, c.kname), c.cls);
        if ((st = keras_single_input(x, &c)) ||
            (st = keras_passed_through(x, "layer", c.kname, c.cls, path)))
            return st;
        out[0] = in[0];
        *n_out = 1;
        return TPU_OK;
    }
    if (k->map == keras_map_model) {
        int tr = 1;
        tpu_status st = keras_cfg_bool(x, &c, "trainable", 1, &tr);
        char pre[512];
        if (st)
            return st;
        snprintf(pre, sizeof pre, "%s/", c.tname);
        return keras_instantiate(x, l, path, pre, in, n_in, frozen || !tr, out,
                                 n_out);
    }
    c.arg = k->arg;
    if (c.n_in < 1)
        return keras_fail(x, path, "'%s' (%s) has no input",
                          keras_shown(b, sizeof b, c.kname), c.cls);
    tpu_status st;
    for (int i = 0; i < c.n_in; i++)
        if (x->refs[c.in[i]].softmax && !keras_allowed(x, "softmax") &&
            (st = keras_softmax_read(x, c.in[i])))
            return st;
    st = k->map(x, &c);
    if (st)
        return st;
    out[0] = c.out;
    *n_out = 1;
    return TPU_OK;
}

tpu_status keras_map_model(kx *x, kcall *c)
{
    (void)c;
    return keras_fail(x, c->path,
                      "internal: a model is instantiated, not mapped");
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
            return keras_fail(x, path,
                              "a Sequential model called on %d tensors; "
                              "one expected",
                              n_in);
        cur = in[0];
    }
    cJSON_ArrayForEach(l, layers)
    {
        const char *cls = keras_get_str(l, "class_name");
        keras_path(p, lpath, "[%d]", i++);
        if (cur < 0) {
            /* the model's input: an InputLayer, the first layer's
             * declared shape, or the model's build_input_shape */
            char spath[KERAS_PATH_MAX] = "";
            int hb = 1;
            const cJSON *sh = declared_shape(l, p, spath, &hb);
            if (!sh && cls && keras_is_model_class(cls)) {
                char ilp[KERAS_PATH_MAX];
                const cJSON *il = model_layers(l, ilp, p);
                const cJSON *f = il ? cJSON_GetArrayItem(il, 0) : NULL;
                if (f) {
                    keras_path(p, ilp, "[0]");
                    sh = declared_shape(f, p, spath, &hb);
                    keras_path(p, lpath, "[%d]", i - 1);
                }
            }
            if (!sh) {
                const cJSON *bis =
                    keras_get(keras_get(model, "config"), "build_input_shape");
                if (bis && !cJSON_IsNull(bis)) {
                    sh = bis;
                    keras_path(spath, path, ".config.build_input_shape");
                }
            }
            const char *nm = cls && strcmp(cls, "InputLayer") == 0
                                 ? keras_layer_name(l)
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
            return keras_fail(x, p,
                              "a layer of a Sequential model gives %d "
                              "tensors; one expected",
                              n);
        cur = tmp[0];
    }
    if (cur < 0)
        return keras_fail(x, lpath, "the model has no layers");
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
    const char *c = keras_get_str(e, "class_name");
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
        e = keras_get(keras_get(e, "config"), "keras_history");
    if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) < 3 ||
        !cJSON_IsString(cJSON_GetArrayItem(e, 0)) ||
        !keras_is_int(cJSON_GetArrayItem(e, 1), 0, 1 << 20) ||
        !keras_is_int(cJSON_GetArrayItem(e, 2), 0, 1 << 20)) {
        *st = keras_fail(x, p, "expected a tensor reference [layer name, node "
                    "index, tensor index], found %s", keras_jtype(e));
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
            *st = keras_fail(x, p, "layer '%s' has no node %d",
                        keras_shown(b, sizeof b, name), node);
            return -1;
        }
        if (idx >= f->done)
            return -1;
        if (ti >= f->n_outs || f->outs[idx * f->n_outs + ti] < 0) {
            *st = keras_fail(x, p, "layer '%s' gives no tensor %d",
                        keras_shown(b, sizeof b, name), ti);
            return -1;
        }
        return f->outs[idx * f->n_outs + ti];
    }
    *st = keras_fail(x, p, "no layer named '%s' in this model",
                keras_shown(b, sizeof b, name));
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
        const cJSON *args = keras_get(node, "args");
        const cJSON *a;
        int i = 0;
        if (!cJSON_IsArray(args)) {
            keras_path(q, p, ".args");
            return keras_fail(x, q, "expected a list, found %s",
                              keras_jtype(args));
        }
        cJSON_ArrayForEach(a, args)
        {
            keras_path(q, p, ".args[%d]", i++);
            const cJSON *list = cJSON_IsArray(a) ? a : NULL;
            const cJSON *e = a;
            int j = 0;
            if (list)
                e = list->child;
            for (; e; e = list ? e->next : NULL) {
                char r[KERAS_PATH_MAX];
                if (list)
                    keras_path(r, q, "[%d]", j++);
                else
                    snprintf(r, sizeof r, "%s", q);
                if (!is_keras_tensor(e)) {
                    if (!list)
                        break;
                    continue;
                }
                if (*n_in == KERAS_OUTS_MAX)
                    return keras_fail(x, r, "more than %d inputs",
                                      KERAS_OUTS_MAX);
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
        return keras_fail(x, p,
                          "expected a list of tensor references, found %s",
                          keras_jtype(node));
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
        keras_path(q, p, "[%d]", j++);
        if (*n_in == KERAS_OUTS_MAX)
            return keras_fail(x, q, "more than %d inputs", KERAS_OUTS_MAX);
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
        return keras_oom(x);
    cJSON_ArrayForEach(l, layers)
    {
        kfl *f = &fl[i];
        const char *cls = keras_get_str(l, "class_name");
        keras_path(p, lpath, "[%d]", i++);
        f->obj = l;
        f->name = keras_layer_name(l);
        if (!cJSON_IsObject(l) || !f->name) {
            st = keras_fail(x, p,
                            "expected a layer object with a name, found %s",
                            keras_jtype(l));
            goto out;
        }
        f->is_input = cls && strcmp(cls, "InputLayer") == 0;
        f->nodes = keras_get(l, "inbound_nodes");
        if (f->nodes && !cJSON_IsArray(f->nodes)) {
            keras_path(q, p, ".inbound_nodes");
            st = keras_fail(x, q, "expected a list, found %s",
                            keras_jtype(f->nodes));
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
        if (cls && strcmp(cls, "Sequential") == 0 && !keras_get(l, "module")) {
            char ilp[KERAS_PATH_MAX];
            const cJSON *il = model_layers(l, ilp, p);
            const char *c0 =
                keras_get_str(cJSON_GetArrayItem(il, 0), "class_name");
            f->offset = c0 && strcmp(c0, "InputLayer") == 0;
        }
        f->n_outs = cls && keras_is_model_class(cls) ? KERAS_OUTS_MAX : 1;
        f->outs = malloc((size_t)(f->n_nodes ? f->n_nodes : 1) *
                         (size_t)f->n_outs * sizeof *f->outs);
        if (!f->outs) {
            st = keras_oom(x);
            goto out;
        }
        for (int k = 0; k < f->n_nodes * f->n_outs; k++)
            f->outs[k] = -1;
    }
    /* the inputs */
    const cJSON *il = keras_get(cfg, "input_layers");
    int nil = io_count(il);
    keras_path(q, path, ".config.input_layers");
    if (nil < 1) {
        st = keras_fail(x, q,
                        "expected a list of [layer name, node, tensor], "
                        "found %s",
                        keras_jtype(il));
        goto out;
    }
    if (in && n_in != nil) {
        st =
            keras_fail(x, path, "the model takes %d inputs and is called on %d",
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
        keras_path(r, q, "[%d]", k);
        for (j = 0; nm && j < n; j++)
            if (strcmp(fl[j].name, nm) == 0)
                break;
        if (!nm || j == n || !fl[j].is_input) {
            st = keras_fail(x, r,
                            "expected the name of one of the model's "
                            "InputLayers%s%s%s",
                            nm ? ", found '" : "",
                            nm ? keras_shown(b, sizeof b, nm) : "",
                            nm ? "'" : "");
            goto out;
        }
        if (fl[j].done)
            continue;
        if (in) {
            fl[j].outs[0] = in[k];
        } else {
            char lp[KERAS_PATH_MAX], spath[KERAS_PATH_MAX] = "";
            int hb = 1;
            keras_path(lp, lpath, "[%d]", j);
            const cJSON *sh = declared_shape(fl[j].obj, lp, spath, &hb);
            int said = x->any_cf ? reader_format(layers, fl[j].name) : -1;
            if (said == -2) {
                st = keras_oom(x);
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
                keras_path(lp, lpath, "[%d]", j);
                keras_path(q, lp, ".inbound_nodes[%d]", f->done);
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
            keras_path(lp, lpath, "[%d]", j);
            keras_path(q, lp, ".inbound_nodes[%d]", fl[j].done);
            if ((st = node_inputs(x, fl, n,
                                  cJSON_GetArrayItem(fl[j].nodes, fl[j].done),
                                  q, ins, &nins, &ready)))
                goto out;
            st = keras_fail(x, q,
                            "its inputs never appear (a cycle, or a layer "
                            "of another model)");
            goto out;
        }
    /* the outputs */
    const cJSON *ol = keras_get(cfg, "output_layers");
    int nol = io_count(ol);
    keras_path(q, path, ".config.output_layers");
    if (nol < 1 || nol > KERAS_OUTS_MAX) {
        st = keras_fail(x, q,
                        "expected 1 to %d [layer name, node, tensor], "
                        "found %s",
                        KERAS_OUTS_MAX, keras_jtype(ol));
        goto out;
    }
    for (int k = 0; k < nol; k++) {
        char r[KERAS_PATH_MAX];
        int ref;
        keras_path(r, q, "[%d]", k);
        ref = resolve(x, fl, n, io_entry(ol, k), r, &st);
        if (st)
            goto out;
        if (ref < 0) {
            st = keras_fail(x, r, "this output is never computed");
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
tpu_status keras_instantiate(kx *x, const cJSON *model, const char *path,
                             const char *prefix, const int *in, int n_in,
                             int frozen, int *out, int *n_out)
{
    const char *cls = keras_get_str(model, "class_name");
    char lpath[KERAS_PATH_MAX], p[KERAS_PATH_MAX], b[64];
    const cJSON *layers = model_layers(model, lpath, path);
    tpu_status st;
    if (!cls || !keras_is_model_class(cls)) {
        keras_path(p, path, ".class_name");
        return keras_fail(
            x, p,
            "expected a model class (Sequential, Functional "
            "or Model), found %s%s%s",
            cls ? "'" : keras_jtype(keras_get(model, "class_name")),
            cls ? keras_shown(b, sizeof b, cls) : "", cls ? "'" : "");
    }
    if (!layers)
        return keras_fail(
            x, lpath,
            "expected the model's list of layers, found "
            "%s",
            keras_jtype(keras_get(keras_get(model, "config"), "layers")));
    if (++x->depth > KERAS_NEST_MAX)
        return keras_fail(x, path, "models nested more than %d deep",
                          KERAS_NEST_MAX);
    if (strcmp(cls, "Sequential") == 0)
        st = run_sequential(x, layers, lpath, prefix, model, path, in, n_in,
                            frozen, out, n_out);
    else
        st = run_functional(x, keras_get(model, "config"), layers, lpath,
                            prefix, path, in, n_in, frozen, out, n_out);
    x->depth--;
    return st;
}
