/* tpuemu import against TensorFlow.js: models written by tfjs-layers
 * (test/keras/tfjs/, made by scripts/tfjs_fixtures/gen.js), each as its
 * model.toJSON() and as its model.json.  Each imports, `tpuemu summary`
 * gives tfjs's own countParams() and, per layer and per call, tfjs's
 * output shape, and the imported trace runs.  A model of classes with no
 * trace op is refused with every one of them listed. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test/harness.h"

#define TDIR "test/keras/tfjs/"

/* The number after `label` in the summary text, thousands separators
 * skipped; -1 when absent. */
static long long summary_count(const char *out, const char *label)
{
    const char *p = strstr(out, label);
    long long v = 0;
    int any = 0;
    if (!p)
        return -1;
    for (p += strlen(label); *p == ',' || (*p >= '0' && *p <= '9'); p++)
        if (*p != ',') {
            v = v * 10 + (*p - '0');
            any = 1;
        }
    return any ? v : -1;
}

/* The output shape of the summary row of layer `name` ("NAME (op) [..]"
 * at the start of a line) into dims; its rank, or -1 without such a row. */
static int summary_shape(const char *out, const char *name, long long *dims,
                         int cap)
{
    size_t n = strlen(name);
    for (const char *p = out; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : p) {
        if (strncmp(p, name, n) != 0 || strncmp(p + n, " (", 2) != 0)
            continue;
        const char *b = strchr(p, '['), *e = strchr(p, '\n');
        if (!b || (e && b > e))
            return -1;
        int k = 0;
        for (b++; k < cap && *b && *b != ']';) {
            char *end;
            dims[k++] = strtoll(b, &end, 10);
            b = end;
            while (*b == ',' || *b == ' ')
                b++;
        }
        return k;
    }
    return -1;
}

/* Whether the trace's dims equal tfjs's shape (batch first, null): the
 * batch is dropped, and a 1D layer's [steps, C] is the trace's
 * [1, steps, C].  cf: tfjs's shape is channels-first, [C, spatial...],
 * which is the trace's [spatial..., C]. */
static int same_shape(const cJSON *tf, const long long *dims, int rank,
                      int cf)
{
    int n = cJSON_GetArraySize(tf) - 1, off = 0;
    long long want[8];
    if (n < 1 || n > 8)
        return 0;
    for (int d = 0; d < n; d++) {
        const cJSON *v = cJSON_GetArrayItem(tf, d + 1);
        if (!cJSON_IsNumber(v))
            return 0;
        want[d] = (long long)v->valuedouble;
    }
    if (cf && n >= 2) {
        long long c = want[0];
        for (int d = 0; d + 1 < n; d++)
            want[d] = want[d + 1];
        want[n - 1] = c;
    }
    if (n == 2 && rank == 3 && dims[0] == 1)
        off = 1;
    if (n + off != rank)
        return 0;
    for (int d = 0; d < n; d++)
        if (want[d] != dims[d + off])
            return 0;
    return 1;
}

static void shape_text(const cJSON *tf, char *buf, size_t cap)
{
    char *s = cJSON_PrintUnformatted(tf);
    snprintf(buf, cap, "%s", s ? s : "?");
    free(s);
}

/* Whether err is one line (a refusal is). */
static int one_line(const char *err)
{
    const char *nl = strchr(err, '\n');
    return nl && nl[1] == 0;
}

/* Whether a tfjs layer of this class has no row of its own: a model used
 * as a layer is its layers (checked one by one, OUTER/INNER). */
static int is_model_class(const char *cls)
{
    return strcmp(cls, "Sequential") == 0 || strcmp(cls, "Model") == 0 ||
           strcmp(cls, "Functional") == 0;
}

/* The summary of `file` against tfjs's numbers in info; `folded` names a
 * layer (or NULL) whose softmax is the loss's, so it has no row. */
static void check_summary(th_ctx *t, const char *file, const cJSON *info,
                          const char *folded, int cf)
{
    static th_cmd_result r;
    th_run(&r, "%s summary " TDIR "%s", th_bin(), file);
    if (!TH_CHECKF(t, r.status == 0, "summary %s: %s", file, r.err))
        return;
    long long total = summary_count(r.out, "Total params: "),
              train = summary_count(r.out, "Trainable params: ");
    const cJSON *cp = cJSON_GetObjectItem(info, "count_params"),
                *tp = cJSON_GetObjectItem(info, "trainable_params");
    /* exactly tfjs's count: batchnorm's scale=false / center=false are the
     * trace's "scale" / "center", not a difference to note */
    TH_CHECKF(t, cJSON_IsNumber(cp) && total == (long long)cp->valuedouble,
              "%s: %lld parameters, tfjs counts %.0f", file, total,
              cJSON_IsNumber(cp) ? cp->valuedouble : -1.0);
    TH_CHECKF(t, cJSON_IsNumber(tp) && train == (long long)tp->valuedouble,
              "%s: %lld trainable, tfjs %.0f", file, train,
              cJSON_IsNumber(tp) ? tp->valuedouble : -1.0);
    TH_CHECKF(t, !strstr(r.err, "gamma and beta anyway"),
              "%s: a note on gamma or beta: %s", file, r.err);

    const cJSON *layers = cJSON_GetObjectItem(info, "layers"), *l;
    int rows = 0;
    cJSON_ArrayForEach(l, layers)
    {
        const cJSON *nm = cJSON_GetObjectItem(l, "name"),
                    *cls = cJSON_GetObjectItem(l, "class_name"),
                    *shapes = cJSON_GetObjectItem(l, "output_shapes"), *s;
        int call = 0;
        /* a nested model's InputLayer is its caller's tensor: no row */
        if (!cJSON_IsString(nm) ||
            (cJSON_IsString(cls) && is_model_class(cls->valuestring)) ||
            (cJSON_IsString(cls) &&
             strcmp(cls->valuestring, "InputLayer") == 0 &&
             strchr(nm->valuestring, '/')))
            continue;
        if (folded && strcmp(nm->valuestring, folded) == 0) {
            long long dims[8];
            TH_CHECKF(t,
                      summary_shape(r.out, folded, dims, 8) < 0 &&
                          strstr(r.err, "is part of the softmax_xent loss"),
                      "%s: '%s' is not folded into the loss", file, folded);
            continue;
        }
        cJSON_ArrayForEach(s, shapes)
        {
            char name[160], want[96];
            long long dims[8];
            /* a shared layer's later calls are NAME@1, ... */
            if (call == 0)
                snprintf(name, sizeof name, "%s", nm->valuestring);
            else
                snprintf(name, sizeof name, "%s@%d", nm->valuestring, call);
            call++;
            int rank = summary_shape(r.out, name, dims, 8);
            shape_text(s, want, sizeof want);
            if (TH_CHECKF(t, rank >= 0, "%s: no summary row '%s' (tfjs %s)",
                          file, name, want) &&
                TH_CHECKF(t, same_shape(s, dims, rank, cf),
                          "%s: '%s' has rank %d [%lld, %lld, ...], tfjs %s",
                          file, name, rank, dims[0], rank > 1 ? dims[1] : 0,
                          want))
                rows++;
        }
    }
    TH_CHECKF(t, rows > 3, "%s: %d layers compared", file, rows);
}

/* Imports file and runs the trace. */
static void check_runs(th_ctx *t, const char *file)
{
    static th_cmd_result r;
    char out[512];
    snprintf(out, sizeof out, "%s/tfjs_%s", th_tmpdir(), file);
    th_run(&r, "%s import " TDIR "%s -o %s", th_bin(), file, out);
    if (!TH_CHECKF(t, r.status == 0, "import %s: %s", file, r.err))
        return;
    th_run(&r, "%s run %s", th_bin(), out);
    TH_CHECKF(t, r.status == 0, "run of the import of %s: %s", file, r.err);
    remove(out);
}

void th_suite_import_tfjs(th_ctx *t)
{
    /* th_case keeps the title's pointer: literals */
    /* cf: a channels_first model, whose tfjs shapes have the channels
     * first */
    static const struct {
        const char *name, *title, *folded;
        int cf;
    } models[] = {
        {"seq_cnn", "tfjs Sequential CNN: countParams, layer shapes, runs",
         NULL, 0},
        {"res_block", "tfjs residual blocks, shared conv: the same", NULL, 0},
        {"ops_block", "tfjs depthwise, separable, SE, pad, crop, resize, LN",
         NULL, 0},
        {"conv1d", "tfjs Conv1D, 1D pooling, spatial dropout", NULL, 0},
        {"conv3d", "tfjs Conv3D, 3D pooling, Conv3DTranspose", NULL, 0},
        {"inception", "tfjs Inception blocks: 1x7/7x1, odd input, valid",
         NULL, 0},
        {"xception", "tfjs Xception entry: strided separable, projection",
         NULL, 0},
        {"unet", "tfjs U-Net: transposed convs, cropped skips", NULL, 0},
        {"convnext", "tfjs ConvNeXt: dw 7x7, LN, Dense on 4-D, gelu", NULL, 0},
        {"heads", "tfjs nested Sequential, dilation, two outputs", NULL, 0},
        {"seq_dense", "tfjs Dense on a sequence, dilated Conv1D", NULL, 0},
        {"patches", "tfjs patchify, Reshape to tokens, token MLP", NULL, 0},
        {"odd_sizes", "tfjs odd extents, transposed, Softmax layer", "probs",
         0},
        {"two_inputs", "tfjs three inputs, shared backbone, softmax gate",
         NULL, 0},
        {"shared_bn", "tfjs Siamese: shared batchnorm, Dense, "
                      "LayerNormalization counted once",
         NULL, 0},
        {"spatial_gate", "tfjs [H,W,1] gates: Multiply and Add broadcast",
         NULL, 0},
        {"chfirst_seq", "tfjs channels_first Sequential: Conv2D, Flatten, "
                        "Dense",
         NULL, 1},
        {"chfirst_cnn", "tfjs channels_first 2D layers, batchnorm axis 1, "
                        "SE gate (C, 1, 1)",
         NULL, 1},
        {"chfirst_unet3d", "tfjs channels_first 3D U-Net: Conv3D, "
                           "Concatenate axis 1, Conv3DTranspose",
         NULL, 1},
    };
    static th_cmd_result r;
    char file[128];

    for (size_t m = 0; m < sizeof models / sizeof *models; m++) {
        snprintf(file, sizeof file, TDIR "%s.tfjs.json", models[m].name);
        char *text = th_slurp(file, NULL);
        cJSON *info = text ? cJSON_Parse(text) : NULL;
        free(text);
        th_case(t, models[m].title);
        if (!TH_CHECKF(t, info != NULL, "cannot read %s", file))
            continue;
        /* the toJSON config and the model.json */
        for (int form = 0; form < 2; form++) {
            snprintf(file, sizeof file, "%s%s", models[m].name,
                     form ? ".model.json" : ".json");
            check_summary(t, file, info, models[m].folded, models[m].cf);
            check_runs(t, file);
        }
        cJSON_Delete(info);
    }

    th_case(t, "tfjs model.json compiled with binaryCrossentropy "
               "(modelTopology.training_config): sigmoid_xent on the mask "
               "logits, said in a note; the inception's scale=false is "
               "exact");
    {
        char *text = th_slurp(TDIR "unet.model.json", NULL), path[512];
        cJSON *doc = text ? cJSON_Parse(text) : NULL, *tc;
        free(text);
        tc = cJSON_CreateObject();
        cJSON_AddStringToObject(tc, "loss", "binaryCrossentropy");
        cJSON_AddItemToObject(cJSON_GetObjectItem(doc, "modelTopology"),
                              "training_config", tc);
        text = doc ? cJSON_PrintUnformatted(doc) : NULL;
        snprintf(path, sizeof path, "%s/unet_compiled.json", th_tmpdir());
        FILE *f = text ? fopen(path, "w") : NULL;
        if (TH_CHECK(t, f != NULL)) {
            fputs(text, f);
            fclose(f);
            th_run(&r, "%s import %s -o %s/unet_compiled.trace.json",
                   th_bin(), path, th_tmpdir());
            TH_CHECKF(t, r.status == 0, "%s", r.err);
            TH_CHECKF(t,
                      strstr(r.err, "the loss is sigmoid_xent: the model "
                                    "was compiled with 'binaryCrossentropy' "
                                    "(modelTopology.training_config.loss)") &&
                          !strstr(r.err, "is 0 whatever"),
                      "%s", r.err);
            snprintf(path, sizeof path, "%s/unet_compiled.trace.json",
                     th_tmpdir());
            char *tr = th_slurp(path, NULL);
            cJSON *tj = tr ? cJSON_Parse(tr) : NULL;
            cJSON *ls = cJSON_GetObjectItem(cJSON_GetObjectItem(tj, "graph"),
                                            "layers");
            cJSON *last = cJSON_GetArrayItem(ls, cJSON_GetArraySize(ls) - 1);
            cJSON *lin = cJSON_GetArrayItem(cJSON_GetObjectItem(last, "in"), 0);
            const char *lk = cJSON_GetStringValue(
                cJSON_GetObjectItem(last, "kind"));
            TH_CHECKF(t,
                      lk && strcmp(lk, "sigmoid_xent") == 0 &&
                          cJSON_IsString(lin) &&
                          strcmp(lin->valuestring, "mask") == 0,
                      "loss %s on %s", lk ? lk : "?",
                      cJSON_IsString(lin) ? lin->valuestring : "?");
            /* the folded sigmoid is gone: every layer but the loss is read */
            const cJSON *ly, *ry;
            cJSON_ArrayForEach(ly, ls)
            {
                const char *nm = cJSON_GetStringValue(
                    cJSON_GetObjectItem(ly, "name"));
                int read = ly == last;
                cJSON_ArrayForEach(ry, ls)
                {
                    const cJSON *in = cJSON_GetObjectItem(ry, "in");
                    const cJSON *e = cJSON_IsArray(in) ? in->child : in;
                    for (; e; e = cJSON_IsArray(in) ? e->next : NULL)
                        read |= nm && cJSON_IsString(e) &&
                                !strcmp(e->valuestring, nm);
                }
                TH_CHECKF(t, read, "layer '%s' is read by none",
                          nm ? nm : "?");
            }
            cJSON_Delete(tj);
            free(tr);
        }
        free(text);
        cJSON_Delete(doc);
        th_run(&r, "%s import " TDIR "unet.model.json -o %s/unet_plain.json",
               th_bin(), th_tmpdir());
        TH_CHECKF(t, r.status == 0 && strstr(r.err, "is 0 whatever it holds"),
                  "no note on softmax_xent over one channel: %s", r.err);
        th_run(&r, "%s import " TDIR "inception.model.json -o "
               "%s/inception.json", th_bin(), th_tmpdir());
        TH_CHECKF(t, r.status == 0 && !strstr(r.err, "gamma"), "%s", r.err);
    }

    th_case(t, "tfjs classes with no trace op: refused, each listed");
    th_run(&r, "%s import " TDIR "unmapped.json -o %s/tfjs_unmapped.json",
           th_bin(), th_tmpdir());
    TH_CHECKF(t, r.status == 2, "status %d: %s", r.status, r.err);
    TH_CHECK(t, strstr(r.err, "unmapped.json: config.layers[2]: layer 'thr' "
                              "(ThresholdedReLU)"));
    /* a Permute that swaps rows and columns: only moving the channel axis
     * maps (to no layer) */
    TH_CHECK(t, strstr(r.err, "the file's unmapped classes: ThresholdedReLU "
                              "x1, Permute(dims=[2,1,3]) x1, RepeatVector "
                              "x1, LSTM x1"));
    th_run(&r,
           "%s import " TDIR "unmapped.model.json -o "
           "%s/tfjs_unmapped.json",
           th_bin(), th_tmpdir());
    TH_CHECK(t, r.status == 2 &&
                    strstr(r.err, "unmapped.model.json: "
                                  "modelTopology.config.layers[2]") &&
                    strstr(r.err, "LSTM x1"));
    th_run(&r, "%s summary " TDIR "unmapped.model.json", th_bin());
    TH_CHECK(t, r.status == 2 && strstr(r.err, "RepeatVector x1"));

    /* What a CNN user writes that the trace cannot express: each refused
     * with the file, the JSON path and the reason, in both forms. */
    static const struct {
        const char *name, *path, *why;
    } refused[] = {
        {"refuse_concat_rows", "config.layers[3].config.axis: ",
         "axis 1 is not the channel axis (-1 or 3): the trace's Concatenate "
         "works on the channels"},
        {"refuse_noise", "config.layers[0]: ",
         "the file's unmapped classes: GaussianNoise x1, activation 'selu' "
         "x1, GaussianDropout x1, AlphaDropout x1"},
        {"refuse_cf_dense", "config.layers[1]: ",
         "'out' (Dense) acts on the last axis, which on its channels_first "
         "input 'c' is a spatial one"},
    };
    th_case(t, "tfjs models the trace cannot express: refused, path, why");
    for (size_t m = 0; m < sizeof refused / sizeof *refused; m++)
        for (int form = 0; form < 2; form++) {
            char want[256];
            snprintf(file, sizeof file, "%s%s", refused[m].name,
                     form ? ".model.json" : ".json");
            snprintf(want, sizeof want, "%s: %s%s", file,
                     form ? "modelTopology." : "", refused[m].path);
            th_run(&r, "%s import " TDIR "%s -o %s/tfjs_refused.json", th_bin(),
                   file, th_tmpdir());
            TH_CHECKF(t,
                      r.status == 2 && strstr(r.err, want) &&
                          strstr(r.err, refused[m].why) && one_line(r.err),
                      "%s: status %d: %s", file, r.status, r.err);
        }
}
