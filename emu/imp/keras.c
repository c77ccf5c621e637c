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
 *
 * This file holds the public entry points and the trace around the graph:
 * the loss, the optimizer, the partition.  The rest of the importer is in
 * keras_read.c, keras_model.c and keras_layers.c (keras_internal.h).
 */
#include "emu/imp/keras_internal.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    return keras_fail(x, "--loss",
                      "'%s' is not one of softmax_xent, "
                      "sigmoid_xent, sigmoid_focal, dice, l2, smooth_l1",
                      keras_shown(b, sizeof b, s));
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
    return cJSON_IsObject(e) ? keras_get_str(e, "class_name") : NULL;
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
    if ((lo = keras_get(keras_get(doc, "compile_config"), "loss")))
        path = "compile_config.loss";
    else if ((tc = keras_get(keras_get(doc, "modelTopology"),
                             "training_config")) &&
             (lo = keras_get(tc, "loss")))
        path = "modelTopology.training_config.loss";
    else if ((lo = keras_get(keras_get(doc, "training_config"), "loss")))
        path = "training_config.loss";
    if (!lo || cJSON_IsNull(lo))
        return TPU_OK;
    *found = 1;
    const cJSON *e, *one = lo;
    const char *first = NULL, *odd = NULL;
    int k = -2;
    if (cJSON_IsArray(lo) ||
        (cJSON_IsObject(lo) && !keras_get(lo, "class_name"))) {
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
        return keras_note(
            x,
            "the model was compiled with the loss '%s' (%s), "
            "which the trace has no loss kind for%s: trained with "
            "softmax_xent (--loss chooses another)",
            keras_shown(b, sizeof b,
                        odd     ? odd
                        : first ? first
                                : "?"),
            path, !one && !odd ? " (different losses per output)" : "");
    *kind = (graph_loss)k;
    return keras_note(
        x, "the loss is %s: the model was compiled with '%s' (%s)",
        graph_loss_name(*kind), keras_shown(b, sizeof b, first), path);
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
        const char *nm = keras_get_str(e, "name");
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
        return keras_oom(x);
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
            if ((st = keras_note(
                     x,
                     "the output '%s' ends in a softmax (%s), which "
                     "only softmax_xent includes: trained with "
                     "softmax_xent, not %s",
                     keras_shown(b, sizeof b, x->g.layers[r->t].name),
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
            if (r->softmax &&
                (st = keras_fail(x, r->sm_path,
                                 "activation "
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
                st = keras_note(x,
                                "the softmax after '%s' (%s) is left out: "
                                "inference ends at its input",
                                keras_shown(b, sizeof b, nm), r->sm_path);
            else if (kind == GLOSS_SOFTMAX_XENT)
                st = keras_note(x,
                                "the softmax after '%s' (%s) is part of the "
                                "softmax_xent loss",
                                keras_shown(b, sizeof b, nm), r->sm_path);
            else
                st = keras_fail(x, r->sm_path,
                                "activation 'softmax' on an "
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
            if ((st = keras_note(
                     x,
                     "the sigmoid '%s' is part of the %s loss, "
                     "which reads its input '%s' (the logits); the "
                     "sigmoid is left out of the trace",
                     keras_shown(b, sizeof b, O->name), graph_loss_name(kind),
                     keras_shown(b2, sizeof b2, x->g.layers[src].name)))) {
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
            return keras_fail(x, NULL,
                              "more than %d model outputs for one loss",
                              GRAPH_MAX_IN);
        }
        in_t[n++] = src;
        used[r->t] = 1;
    }
    free(used);
    if (x->o->infer)
        return TPU_OK;
    if (n == 0)
        return keras_fail(x, NULL,
                          "every output of the model feeds another "
                          "layer: nothing to attach the loss to");
    for (int j = 0; kind == GLOSS_SOFTMAX_XENT && j < n; j++)
        if (x->g.layers[in_t[j]].out.c == 1 &&
            (st = keras_note(
                 x,
                 "softmax_xent over the one channel of '%s' is 0 "
                 "whatever it holds (a one-channel softmax is 1): "
                 "choose --loss sigmoid_xent (Keras's "
                 "binary_crossentropy), dice or l2",
                 keras_shown(b, sizeof b, x->g.layers[in_t[j]].name))))
            return st;
    if ((st = keras_grow(x)))
        return st;
    char name[GRAPH_NAME_MAX];
    int t;
    keras_unique_name(x, "loss", NULL, name);
    glayer *L = keras_layer_begin(x, name, GOP_LOSS, in_t, n);
    L->loss = kind;
    L->dtype_bytes = 4;
    return keras_layer_commit(x, "--loss", 1, &t);
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
            return keras_fail(x, "--partition",
                              "'%.40s' is not a list such as "
                              "1,4,2,1 (N, spatial dimensions, C; each 1 to "
                              "4096)",
                              x->o->partition);
        v[n++] = (int)f;
        p = *end ? end + 1 : end;
    }
    if (n != kr + 1)
        return keras_fail(x, "--partition",
                          "%d factors for the input '%s' of "
                          "rank %d with the batch: give %d (N, ..., C)",
                          n, I->name, kr + 1, kr + 1);
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
        return keras_oom(x);
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
    if ((opt = keras_get(keras_get(doc, "compile_config"), "optimizer")))
        snprintf(path, cap, "compile_config.optimizer");
    else if ((tc = keras_get(keras_get(doc, "modelTopology"),
                             "training_config")) &&
             (opt = keras_get(tc, "optimizer_config")))
        snprintf(path, cap, "modelTopology.training_config.optimizer_config");
    else if ((opt = keras_get(keras_get(doc, "training_config"),
                              "optimizer_config")))
        snprintf(path, cap, "training_config.optimizer_config");
    if (!opt || cJSON_IsNull(opt))
        return TPU_OK;
    const char *cls = cJSON_IsString(opt) ? opt->valuestring
                                          : keras_get_str(opt, "class_name");
    if (!cls)
        return keras_fail(x, path,
                          "expected an optimizer's name or its "
                          "\"class_name\", found %s",
                          keras_jtype(opt));
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
        return keras_fail(
            x, path,
            "the model was compiled with '%s', which tpuemu "
            "does not model (it has sgd, momentum, adam, rmsprop, "
            "lars): choose one with --optimizer",
            cls);
    const cJSON *cfg = keras_get(opt, "config");
    const cJSON *m = keras_get(cfg, "momentum");
    double mv = cJSON_IsNumber(m) ? m->valuedouble : 0;
    if (strcmp(*word, "sgd") == 0 && mv > 0)
        *word = "momentum"; /* Keras's SGD keeps a momentum slot then */
    if (strcmp(*word, "rmsprop") == 0 && mv > 0 && mv < 1)
        *mom = mv;
    if (strcmp(low, *word) != 0 && strcmp(*word, "momentum") != 0)
        return keras_note(x,
                          "the model was compiled with %s: simulated as %s "
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
            (st = keras_note(x,
                             "--optimizer %s, not the %s the model was "
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
            return keras_oom(x);
        return TPU_OK;
    }
    return cJSON_AddStringToObject(run, "optimizer", word) ? TPU_OK
                                                           : keras_oom(x);
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
    const char *f = keras_get_str(doc, "format");
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
    const cJSON *model = keras_find_model(&x, doc, mpath, &st);
    if (!model)
        return st;
    {
        int n_cf = 0, n_cl = 0;
        keras_count_formats(model, 0, &n_cf, &n_cl);
        x.any_cf = n_cf > 0;
        x.fmt = !n_cf ? KERAS_CL : n_cl ? KERAS_MIXED : KERAS_CF;
    }
    memset(&scan, 0, sizeof scan);
    keras_scan_model(&x, model, mpath, &scan, 0);
    if (scan.n)
        return keras_scan_fail(&x, &scan);
    t = cJSON_CreateObject();
    if (!t)
        return keras_oom(&x);
    cJSON_AddStringToObject(t, "format", "tpuemu-trace/1");
    /* filled once the layers are known; first after the format, where a
     * reader looks */
    cJSON_AddStringToObject(t, "comment", "");
    {
        const char *nm = keras_layer_name(model);
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
        st = keras_oom(&x);
        goto fail;
    }
    if ((st = keras_instantiate(&x, model, mpath, "", NULL, 0, 0, outs,
                                &n_out)) ||
        (st = attach_loss(&x, doc, outs, n_out)))
        goto fail;
    if (o->input && x.n_inputs_given < x.g.n_inputs) {
        st = keras_fail(&x, "--input",
                        "%d shapes for the model's %d inputs "
                        "(separate them with ',')",
                        x.n_inputs_given, x.g.n_inputs);
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
            st = keras_fail(&x, "--input",
                            "%d shapes for the model's %d input%s", given,
                            x.g.n_inputs, x.g.n_inputs == 1 ? "" : "s");
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
            st = keras_oom(&x);
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
