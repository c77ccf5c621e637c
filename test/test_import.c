/* tpuemu import (emu/imp/keras*.c): the Keras schemas it reads (Keras 2
 * Sequential, Functional, a nested model, a shared layer; Keras 3
 * config.json and the same as a .keras zip; a TensorFlow.js model.json),
 * parameter totals against Keras's (the fixtures' by hand, VGG16 and
 * ResNet50 as Keras publishes them), and refusals with file and JSON path. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <time.h>

#include "emu/graph.h"
#include "emu/imp/keras.h"
#include "emu/sim.h"
#include "test/harness.h"

#define KDIR "test/keras/"

/* Keras's count: the trace's weights plus each batchnorm's moving mean
 * and variance. */
static int64_t keras_total(const graph *g, int64_t *nontrain)
{
    int64_t t = 0, nt = 0;
    for (int i = 0; i < g->n_layers; i++) {
        const glayer *L = &g->layers[i];
        int64_t s = L->op == GOP_BATCHNORM ? 2 * L->out.c : 0;
        t += L->weights + s;
        nt += s + (L->frozen && L->share_from < 0 ? L->weights : 0);
    }
    if (nontrain)
        *nontrain = nt;
    return t;
}

/* Imports path under o into g (a failed check when it fails). */
static int imp(th_ctx *t, const char *path, const keras_opts *o, graph *g,
               char **notes_out)
{
    char *text = NULL, *notes = NULL;
    tpu_error e;
    memset(g, 0, sizeof *g);
    if (keras_import(path, o, &text, &notes, &e)) {
        TH_FAIL(t, "import %s: %s", path, e.msg);
        return 0;
    }
    int ok = graph_parse(g, text, strlen(text), path, &e) == TPU_OK;
    TH_CHECKF(t, ok, "parse of the import of %s: %s", path, e.msg);
    free(text);
    if (notes_out)
        *notes_out = notes;
    else
        free(notes);
    return ok;
}

static int find(const graph *g, const char *name)
{
    return graph_find(g, name);
}

static void schemas(th_ctx *t)
{
    keras_opts o;
    graph g;
    char *notes = NULL;
    memset(&o, 0, sizeof o);

    th_case(t, "Keras 2 Sequential CNN: shapes, biases, BN, softmax in loss");
    if (imp(t, KDIR "seq_cnn.json", &o, &g, &notes)) {
        TH_CHECK(t, keras_total(&g, NULL) == 41930);
        int c = find(&g, "conv2d"), d = find(&g, "dense");
        TH_CHECK(t, c > 0 && g.layers[c].use_bias && g.layers[c].out.sp[0] == 26);
        TH_CHECK(t, find(&g, "conv2d/relu") > c);
        TH_CHECK(t, find(&g, "dropout_1") < 0); /* rate 0: identity */
        TH_CHECK(t, find(&g, "average_pooling2d") > 0 &&
                        g.layers[find(&g, "average_pooling2d")].out.sp[0] == 6);
        int l = find(&g, "loss");
        TH_CHECK(t, l > 0 && g.layers[l].n_in == 1 && g.layers[l].in[0] == d);
        TH_CHECK(t, notes && strstr(notes, "softmax_xent"));
        TH_CHECK(t, g.global_batch == 64 && g.train);
    }
    free(notes);
    notes = NULL;
    graph_free(&g);

    th_case(t, "functional block with Add; an intermediate output trains as one net");
    if (imp(t, KDIR "resblock.json", &o, &g, NULL)) {
        int a = find(&g, "add"), l = find(&g, "loss");
        TH_CHECK(t, a > 0 && g.layers[a].op == GOP_ADD && g.layers[a].n_in == 2);
        TH_CHECK(t, g.layers[g.layers[a].in[0]].op == GOP_INPUT);
        TH_CHECK(t, l > 0 && g.layers[l].n_in == 1 &&
                        g.layers[l].in[0] == find(&g, "logits"));
        TH_CHECK(t, keras_total(&g, NULL) == 4906);
    }
    graph_free(&g);

    th_case(t, "a model nested as a layer: prefixed names, frozen, node 1");
    if (imp(t, KDIR "nested.json", &o, &g, NULL)) {
        int64_t nt;
        int c = find(&g, "backbone/conv");
        TH_CHECK(t, c > 0 && g.layers[c].frozen);
        TH_CHECK(t, keras_total(&g, &nt) == 301 && nt == 256);
        TH_CHECK(t, g.layers[find(&g, "gap")].in[0] == find(&g, "backbone/pool"));
    }
    graph_free(&g);

    th_case(t, "a layer called twice shares its weights");
    if (imp(t, KDIR "shared.json", &o, &g, NULL)) {
        int a = find(&g, "tower"), b = find(&g, "tower@1");
        TH_CHECK(t, a > 0 && b > 0 && g.layers[b].share_from == a);
        TH_CHECK(t, g.n_inputs == 2 && keras_total(&g, NULL) == 481);
        TH_CHECK(t, graph_weights(&g) == 481);
    }
    graph_free(&g);

    th_case(t, "a shared Dense shares its weights: counted once");
    {
        char path[512];
        snprintf(path, sizeof path, "%s/shdense.json", th_tmpdir());
        th_put(path, "{\"class_name\": \"Functional\", \"config\": {\"name\": \"f\", \"layers\": ["
                     "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, 8], \"name\": \"a\"}, \"name\": \"a\", \"inbound_nodes\": []},"
                     "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 8}, \"name\": \"d\", \"inbound_nodes\": [[[\"a\", 0, 0, {}]], [[\"d\", 0, 0, {}]]]}],"
                     "\"input_layers\": [[\"a\", 0, 0]], \"output_layers\": [[\"d\", 1, 0]]}}");
        if (imp(t, path, &o, &g, NULL)) {
            int a = find(&g, "d"), b = find(&g, "d@1");
            TH_CHECK(t, a > 0 && b > a && g.layers[b].share_from == a);
            TH_CHECK(t, g.layers[b].weights == 0 && graph_weights(&g) == 72 &&
                            keras_total(&g, NULL) == 72);
        }
        graph_free(&g);
    }

    th_case(t, "Keras 3 config.json with --input, and the same as a .keras zip");
    o.input = "64x64x1";
    o.loss = "dice";
    if (imp(t, KDIR "k3_config.json", &o, &g, NULL)) {
        TH_CHECK(t, keras_total(&g, NULL) == 233);
        int s = find(&g, "skip");
        TH_CHECK(t, s > 0 && g.layers[s].op == GOP_CONCAT && g.layers[s].out.c == 9);
        TH_CHECK(t, g.layers[find(&g, "loss")].loss == GLOSS_DICE);
        graph_free(&g);
        char zip[512];
        th_cmd_result r;
        snprintf(zip, sizeof zip, "%s/m.keras", th_tmpdir());
        th_run(&r, "python3 -c 'import zipfile,sys; z=zipfile.ZipFile(sys.argv[1],\"w\"); "
                   "z.write(\"" KDIR "k3_config.json\",\"config.json\"); "
                   "z.writestr(\"metadata.json\",\"{}\"); z.close()' %s", zip);
        TH_CHECKF(t, r.status == 0, "python3 zipfile: %s", r.err);
        if (imp(t, zip, &o, &g, NULL)) {
            /* dice folds the output's sigmoid: 8 layers, none dead */
            TH_CHECK(t, keras_total(&g, NULL) == 233 && g.n_layers == 8 &&
                            find(&g, "mask/sigmoid") < 0);
        }
    }
    graph_free(&g);
    memset(&o, 0, sizeof o);

    th_case(t, "TensorFlow.js model.json: Conv1D as a row of height 1");
    if (imp(t, KDIR "tfjs_model.json", &o, &g, NULL)) {
        int c = find(&g, "conv1d_Conv1D1");
        TH_CHECK(t, c > 0 && g.layers[c].out.sp[0] == 1 &&
                        g.layers[c].out.sp[1] == 96 && g.layers[c].out.c == 16);
        TH_CHECK(t, keras_total(&g, NULL) == 387);
    }
    graph_free(&g);

    th_case(t, "infer mode: no loss; --partition sets the replica size");
    o.infer = 1;
    o.partition = "1,2,2,1";
    o.batch = 4;
    if (imp(t, KDIR "seq_cnn.json", &o, &g, NULL)) {
        TH_CHECK(t, find(&g, "loss") < 0 && !g.train);
        TH_CHECK(t, g.cores_per_replica == 4 && g.pdims[1] == 2 &&
                        g.pdims[2] == 2 && g.global_batch == 4);
    }
    graph_free(&g);
}

static void applications(th_ctx *t)
{
    keras_opts o;
    graph g;
    int64_t nt;
    memset(&o, 0, sizeof o);
    th_case(t, "VGG16: 138,357,544 parameters (Keras's published count)");
    if (imp(t, KDIR "vgg16.json", &o, &g, NULL))
        TH_CHECKF(t, keras_total(&g, NULL) == 138357544, "%lld",
                  (long long)keras_total(&g, NULL));
    graph_free(&g);

    th_case(t, "ResNet50 (ZeroPadding2D as pad, no --allow-identity): "
               "25,636,712 / 53,120, and it runs");
    if (imp(t, KDIR "resnet50.json", &o, &g, NULL)) {
        TH_CHECKF(t, keras_total(&g, &nt) == 25636712, "%lld",
                  (long long)keras_total(&g, NULL));
        TH_CHECK(t, nt == 53120);
        int p = find(&g, "conv1_pad");
        TH_CHECK(t, p >= 0 && g.layers[p].op == GOP_PAD &&
                        g.layers[p].out.sp[0] == 230);
    }
    graph_free(&g);
    {
        char out[512];
        th_cmd_result r;
        snprintf(out, sizeof out, "%s/resnet50.trace.json", th_tmpdir());
        th_run(&r, "%s import " KDIR "resnet50.json -o %s", th_bin(), out);
        TH_CHECKF(t, r.status == 0, "%s", r.err);
        th_run(&r, "%s run %s", th_bin(), out);
        TH_CHECKF(t, r.status == 0, "%s", r.err);
    }

    static const struct {
        const char *file, *what;
        int64_t total;
    } apps[] = {
        {"mobilenet.json", "MobileNet (Reshape to [1,1,1024] and back): "
                           "4,253,864", 4253864},
        {"efficientnetb0.json", "EfficientNetB0 (Normalization's 7, "
                                "squeeze-excite through Reshape, swish): "
                                "5,330,571", 5330571},
        {"densenet121.json", "DenseNet121: 8,062,504", 8062504},
    };
    for (size_t k = 0; k < sizeof apps / sizeof apps[0]; k++) {
        char path[256];
        th_case(t, apps[k].what);
        snprintf(path, sizeof path, KDIR "%s", apps[k].file);
        if (imp(t, path, &o, &g, NULL))
            TH_CHECKF(t, keras_total(&g, NULL) == apps[k].total, "%lld",
                      (long long)keras_total(&g, NULL));
        graph_free(&g);
    }
    th_case(t, "EfficientNetB0's input normalize (2C+1, not trained), "
               "its se_reshape a reshape to [1,1,C]");
    if (imp(t, KDIR "efficientnetb0.json", &o, &g, NULL)) {
        int n = find(&g, "normalization"), r = find(&g, "block1a_se_reshape");
        TH_CHECK(t, n >= 0 && g.layers[n].op == GOP_NORMALIZE &&
                        g.layers[n].weights == 7 && g.layers[n].frozen);
        TH_CHECK(t, r >= 0 && g.layers[r].op == GOP_RESHAPE &&
                        g.layers[r].out.nsp == 2 &&
                        g.layers[r].out.sp[0] == 1 && g.layers[r].out.c == 32);
    }
    graph_free(&g);

    th_case(t, "MobileNetV2 (ReLU(max_value=6) as relu6): 3,538,984");
    if (imp(t, KDIR "mobilenetv2.json", &o, &g, NULL)) {
        TH_CHECKF(t, keras_total(&g, NULL) == 3538984, "%lld",
                  (long long)keras_total(&g, NULL));
        int r6 = find(&g, "Conv1_relu");
        TH_CHECK(t, r6 >= 0 && g.layers[r6].op == GOP_ACT &&
                        g.layers[r6].kind == GACT_RELU6);
    }
    graph_free(&g);

    th_case(t, "every activation and merge class (ops_block.json): the "
               "trace's activation and elementwise ops, 1,612 parameters by "
               "hand, and the trace runs");
    o.allow_identity = NULL;
    if (imp(t, KDIR "ops_block.json", &o, &g, NULL)) {
        /* c1 3x3x8x16 + 16, prelu 16, se 8x4+4... : 1168 + 16 + 68 + 80 +
         * 170 (c2) + 110 (predictions) */
        TH_CHECKF(t, keras_total(&g, NULL) == 1612, "%lld",
                  (long long)keras_total(&g, NULL));
        static const struct {
            const char *name;
            int op, kind;
        } want[] = {
            {"c1/gelu", GOP_ACT, GACT_GELU},
            {"prelu", GOP_ACT, GACT_PRELU},
            {"se_expand/hard_sigmoid", GOP_ACT, GACT_HARD_SIGMOID},
            {"se_mul", GOP_ELEMWISE, GEW_MULTIPLY},
            {"relu6", GOP_ACT, GACT_RELU6},
            {"leaky", GOP_ACT, GACT_LEAKY_RELU},
            {"elu", GOP_ACT, GACT_ELU},
            {"sub", GOP_ELEMWISE, GEW_SUBTRACT},
            {"max", GOP_ELEMWISE, GEW_MAXIMUM},
            {"avg", GOP_ELEMWISE, GEW_AVERAGE},
            {"swish", GOP_ACT, GACT_SWISH},
            {"tanh", GOP_ACT, GACT_TANH},
            {"c2/silu", GOP_ACT, GACT_SWISH},
        };
        for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
            int l = find(&g, want[k].name);
            TH_CHECKF(t, l >= 0 && (int)g.layers[l].op == want[k].op &&
                             g.layers[l].kind == want[k].kind,
                      "%s", want[k].name);
        }
        int lk = find(&g, "leaky");
        TH_CHECK(t, lk >= 0 && g.layers[lk].alpha == 0.1);
        TH_CHECK(t, graph_ew_broadcast(&g, &g.layers[find(&g, "se_mul")], 1));
    }
    graph_free(&g);
    {
        char out[512];
        th_cmd_result r;
        snprintf(out, sizeof out, "%s/ops_block.trace.json", th_tmpdir());
        th_run(&r, "%s import " KDIR "ops_block.json -o %s", th_bin(), out);
        TH_CHECKF(t, r.status == 0, "%s", r.err);
        th_run(&r, "%s run %s --functional", th_bin(), out);
        TH_CHECKF(t, r.status == 0, "%s", r.err);
    }
}

/* `tpuemu import ARGS` must exit 2 with a message holding every string
 * of want (NULL-terminated), and leave out untouched. */
static void refuses(th_ctx *t, const char *args, const char *const *want)
{
    char out[512];
    th_cmd_result r;
    snprintf(out, sizeof out, "%s/keep.json", th_tmpdir());
    th_put(out, "keep\n");
    th_run(&r, "%s import %s -o %s", th_bin(), args, out);
    TH_CHECKF(t, r.status == 2, "exit %d for %s: %s", r.status, args, r.err);
    TH_CHECKF(t, strncmp(r.err, "tpuemu: error: ", 15) == 0 &&
                     strchr(r.err, '\n') == r.err + strlen(r.err) - 1,
              "not one error line: %s", r.err);
    for (; *want; want++)
        TH_CHECKF(t, strstr(r.err, *want), "'%s' not in: %s", *want, r.err);
    char *k = th_slurp(out, NULL);
    TH_CHECKF(t, k && strcmp(k, "keep\n") == 0, "the output was touched");
    free(k);
}

static void bad(th_ctx *t)
{
    char path[512], cmd[700];
    th_cmd_result r;

    th_case(t, "every unmapped class at once, with the layer's path");
    {
        static const char *const w[] = {
            "bad_unmapped.json: config.layers[1].config.activation:",
            "layer 'c'", "activation 'mish' x1", "Lambda x2",
            "ThresholdedReLU x1", "ReLU(threshold=0.5) x1", "--allow-identity",
            NULL};
        refuses(t, KDIR "bad_unmapped.json", w);
    }

    th_case(t, "--allow-identity passes them through, on stderr and in the trace");
    snprintf(path, sizeof path, "%s/allowed.json", th_tmpdir());
    th_run(&r, "%s import " KDIR "bad_unmapped.json -o %s --allow-identity "
               "Lambda,ThresholdedReLU --allow-identity ReLU --allow-identity mish",
           th_bin(), path);
    TH_CHECKF(t, r.status == 0, "%s", r.err);
    TH_CHECK(t, strstr(r.err, "note: layer 'lam' (Lambda) at config.layers[2] "
                              "passed through as an identity"));
    {
        char *txt = th_slurp(path, NULL);
        TH_CHECK(t, txt && strstr(txt, "passed through as identities: c (mish), "
                                       "lam (Lambda), leaky (ThresholdedReLU)"));
        free(txt);
    }

    th_case(t, "truncated JSON");
    {
        size_t n = 0;
        char *s = th_slurp(KDIR "seq_cnn.json", &n);
        snprintf(path, sizeof path, "%s/cut.json", th_tmpdir());
        if (s) {
            s[n / 2] = 0;
            th_put(path, s);
        }
        free(s);
        snprintf(cmd, sizeof cmd, "%s", path);
        static const char *const w[] = {"cut.json: not valid JSON: the text "
                                        "ends too early", NULL};
        refuses(t, cmd, w);
    }

    th_case(t, "wrong types name the key");
    snprintf(path, sizeof path, "%s/types.json", th_tmpdir());
    th_put(path, "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", "
                 "\"layers\": [{\"class_name\": \"Dense\", \"config\": {\"name\": "
                 "\"d\", \"units\": \"32\", \"batch_input_shape\": [null, 8]}}]}}");
    {
        static const char *const w[] = {"types.json: config.layers[0].config.units: "
                                        "expected an integer", "found a string", NULL};
        refuses(t, path, w);
    }
    th_put(path, "{\"class_name\": \"Functional\", \"config\": {\"name\": \"f\", "
                 "\"layers\": 3, \"input_layers\": [], \"output_layers\": []}}");
    {
        static const char *const w[] = {"types.json: config.layers: expected the "
                                        "model's list of layers, found a number",
                                        NULL};
        refuses(t, path, w);
    }
    th_put(path, "[1, 2]");
    {
        static const char *const w[] = {"types.json: (top level): not a Keras model",
                                        NULL};
        refuses(t, path, w);
    }

    th_case(t, "a PReLU called twice is refused: its slopes cannot be shared");
    {
        snprintf(path, sizeof path, "%s/shprelu.json", th_tmpdir());
        th_put(path, "{\"class_name\": \"Functional\", \"config\": {\"name\": \"f\", \"layers\": ["
                     "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, 8, 8, 4], \"name\": \"a\"}, \"name\": \"a\", \"inbound_nodes\": []},"
                     "{\"class_name\": \"PReLU\", \"config\": {\"name\": \"p\", \"shared_axes\": [1, 2]}, \"name\": \"p\", \"inbound_nodes\": [[[\"a\", 0, 0, {}]], [[\"p\", 0, 0, {}]]]}],"
                     "\"input_layers\": [[\"a\", 0, 0]], \"output_layers\": [[\"p\", 1, 0]]}}");
        static const char *const w[] = {"shprelu.json: config.layers[1]: 'p' (PReLU) is called 2 times",
                                        "share_weights", NULL};
        refuses(t, path, w);
    }

    th_case(t, "unknown input shape, and --input with the batch folded in");
    {
        static const char *const w[] = {
            "k3_config.json: config.layers[0].config.batch_shape: dimension 1 "
            "of input 'input_layer' is not given (None)", "--input", NULL};
        refuses(t, KDIR "k3_config.json", w);
        static const char *const w2[] = {"--input: 4 dimensions for input "
                                         "'input_1'", "the batch seems included",
                                         NULL};
        refuses(t, KDIR "vgg16.json --input 1x224x224x3", w2);
        static const char *const w3[] = {"--partition: 3 factors", NULL};
        refuses(t, KDIR "vgg16.json --partition 1,4,2", w3);
    }
}

/* Appends one Keras 2 functional layer reading `src` (NULL: none). */
static void klayer(FILE *f, int *first, const char *cls, const char *name,
                   const char *cfg, const char *src, const char *src2)
{
    fprintf(f, "%s{\"class_name\": \"%s\", \"name\": \"%s\", "
               "\"config\": {\"name\": \"%s\"%s%s}, \"inbound_nodes\": [",
            *first ? "" : ",\n", cls, name, name, *cfg ? ", " : "", cfg);
    if (src)
        fprintf(f, "[[\"%s\", 0, 0, {}]%s%s%s]", src, src2 ? ", [\"" : "",
                src2 ? src2 : "", src2 ? "\", 0, 0, {}]" : "");
    fprintf(f, "]}");
    *first = 0;
}

/* Keras's causal Conv1D (tfjs cannot write one it runs): (k - 1) d
 * zeros before the steps as a pad layer, then a valid convolution, so the
 * steps keep their count (strided: ceil(steps / s)); a Softmax layer read
 * by another layer is the trace's softmax activation, on the output it
 * is the loss's; a Softmax over another axis is refused. */
static void causal_softmax(th_ctx *t)
{
    th_case(t, "causal Conv1D as pad + valid; Softmax read by a layer");
    char path[512];
    snprintf(path, sizeof path, "%s/causal.json", th_tmpdir());
    FILE *f = fopen(path, "w");
    if (!TH_CHECK(t, f != NULL))
        return;
    int first = 1;
    fprintf(f, "{\"class_name\": \"Functional\", \"config\": {\"name\": "
               "\"tcn\", \"layers\": [\n");
    klayer(f, &first, "InputLayer", "x", "\"batch_input_shape\": [null, 20, 4]",
           NULL, NULL);
    klayer(f, &first, "Conv1D", "c",
           "\"filters\": 8, \"kernel_size\": [3], \"dilation_rate\": [2], "
           "\"padding\": \"causal\"",
           "x", NULL);
    klayer(f, &first, "Conv1D", "one",
           "\"filters\": 8, \"kernel_size\": 1, \"padding\": \"causal\"", "c",
           NULL);
    klayer(f, &first, "Conv1D", "s",
           "\"filters\": 8, \"kernel_size\": 4, \"strides\": 2, "
           "\"padding\": \"causal\"",
           "one", NULL);
    klayer(f, &first, "Softmax", "sm", "\"axis\": -1", "s", NULL);
    klayer(f, &first, "GlobalAveragePooling1D", "gap", "", "sm", NULL);
    klayer(f, &first, "Dense", "fc", "\"units\": 3", "gap", NULL);
    klayer(f, &first, "Softmax", "probs", "", "fc", NULL);
    fprintf(f, "], \"input_layers\": [[\"x\", 0, 0]], \"output_layers\": "
               "[[\"probs\", 0, 0]]}, \"keras_version\": \"2.12.0\"}\n");
    fclose(f);
    keras_opts o;
    memset(&o, 0, sizeof o);
    graph g;
    char *notes = NULL;
    if (!imp(t, path, &o, &g, &notes))
        return;
    int pad = find(&g, "c/pad"), c = find(&g, "c"), s = find(&g, "s"),
        sm = find(&g, "sm");
    TH_CHECK(t, pad >= 0 && c >= 0 && s >= 0 && sm >= 0);
    if (pad >= 0 && c >= 0 && s >= 0 && sm >= 0) {
        TH_CHECKF(t,
                  g.layers[pad].op == GOP_PAD && g.layers[pad].out.sp[1] == 24,
                  "pad: %lld steps", (long long)g.layers[pad].out.sp[1]);
        TH_CHECKF(t, g.layers[c].out.sp[1] == 20 && !g.layers[c].pad_same,
                  "c: %lld steps", (long long)g.layers[c].out.sp[1]);
        TH_CHECK(t, find(&g, "one/pad") < 0);
        TH_CHECKF(t, g.layers[s].out.sp[1] == 10, "s: %lld steps",
                  (long long)g.layers[s].out.sp[1]);
        TH_CHECK(t, g.layers[sm].op == GOP_ACT &&
                        g.layers[sm].kind == GACT_SOFTMAX);
    }
    TH_CHECK(t, find(&g, "probs") < 0 && notes &&
                    strstr(notes, "the softmax after 'fc'"));
    free(notes);
    graph_free(&g);

    th_put(path, "{\"class_name\": \"Functional\", \"config\": {\"name\": "
                 "\"f\", \"layers\": [{\"class_name\": \"InputLayer\", "
                 "\"config\": {\"batch_input_shape\": [null, 8, 8, 3], "
                 "\"name\": \"a\"}, \"name\": \"a\", \"inbound_nodes\": []}, "
                 "{\"class_name\": \"Softmax\", \"config\": {\"name\": \"sm\", "
                 "\"axis\": 1}, \"name\": \"sm\", \"inbound_nodes\": "
                 "[[[\"a\", 0, 0, {}]]]}], \"input_layers\": [[\"a\", 0, 0]], "
                 "\"output_layers\": [[\"sm\", 0, 0]]}}");
    static const char *const w[] = {
        "causal.json: config.layers[1].config.axis: "
        "axis 1 is not the channel axis",
        NULL};
    refuses(t, path, w);
}

/* The graph of the trace keras_import makes of path under o (NULL on
 * failure, a failed check). */
static cJSON *trace_graph(th_ctx *t, const char *path, const keras_opts *o)
{
    char *text = NULL, *notes = NULL;
    tpu_error e;
    cJSON *doc = NULL;
    if (!TH_CHECKF(t, keras_import(path, o, &text, &notes, &e) == TPU_OK,
                   "import %s: %s", path, e.msg))
        return NULL;
    doc = cJSON_Parse(text);
    free(text);
    free(notes);
    cJSON *g = cJSON_DetachItemFromObject(doc, "graph");
    cJSON_Delete(doc);
    return g;
}

/* A model and its channels_last twin import to one trace: every layer,
 * input, shape and parameter alike. */
static void same_trace(th_ctx *t, const char *cf, const char *cl,
                       const keras_opts *o)
{
    cJSON *a = trace_graph(t, cf, o), *b = trace_graph(t, cl, o);
    TH_CHECKF(t, a && b && cJSON_Compare(a, b, 1),
              "%s and %s import to different traces", cf, cl);
    cJSON_Delete(a);
    cJSON_Delete(b);
}

/* One layer of a Keras 2 Functional model kmodel writes (klayer's
 * arguments: class, name, config, up to two sources). */
typedef struct {
    const char *cls, *name, *cfg, *src, *src2;
} kspec;

/* Writes the model of n layers, its inputs and outputs given as JSON
 * lists of [name, 0, 0]. */
static int kmodel(th_ctx *t, const char *path, const kspec *l, int n,
                  const char *ins, const char *outs)
{
    FILE *f = fopen(path, "w");
    int first = 1;
    if (!TH_CHECK(t, f != NULL))
        return 0;
    fprintf(f, "{\"class_name\": \"Functional\", \"config\": {\"name\": "
               "\"m\", \"layers\": [\n");
    for (int k = 0; k < n; k++)
        klayer(f, &first, l[k].cls, l[k].name, l[k].cfg, l[k].src,
               l[k].src2);
    fprintf(f, "], \"input_layers\": %s, \"output_layers\": %s}, "
               "\"keras_version\": \"2.12.0\"}\n", ins, outs);
    fclose(f);
    return 1;
}

#define CF "\"data_format\": \"channels_first\""
#define CL "\"data_format\": \"channels_last\""

/* Channels-first models (Keras's 3D U-Nets for CT volumes, models ported
 * from PyTorch): the same network as their channels-last twin, Keras's
 * parameter counts, Keras's shapes with the channels moved last; a mix
 * of layouts through Permute; what has no trace equivalent refused. */
static void channels_first(th_ctx *t)
{
    keras_opts o;
    graph g;
    char path[512];
    th_cmd_result r;
    memset(&o, 0, sizeof o);

    th_case(t, "channels_first 3D U-Net: Keras's 254,889 parameters, its "
               "shapes channels last, the twin's trace");
    if (imp(t, KDIR "unet3d_cf.json", &o, &g, NULL)) {
        int64_t nt;
        /* convolutions without bias, 27 taps: 1x8, 8x16, 16x16, 16x32,
         * 32x32, 32x64, (64+32)x32, 32x32, (32+16)x16, 16x16 = 245,592;
         * up1 (Conv3DTranspose 2x2x2, 32 -> 32, bias) 8,224; the head
         * 16 + 1; batchnorm 4 per channel over 8+16+16+32+32+64+32+32+
         * 16+16 = 264 channels: 1,056 (528 moving, not trained) */
        TH_CHECKF(t, keras_total(&g, &nt) == 254889 && nt == 528,
                  "%lld / %lld", (long long)keras_total(&g, NULL),
                  (long long)nt);
        int in = find(&g, "volume"), e1 = find(&g, "enc1b_relu"),
            up = find(&g, "up2"), c2 = find(&g, "cat2"),
            u1 = find(&g, "up1"), m = find(&g, "mask");
        TH_CHECK(t, in == 0 && g.layers[in].out.nsp == 3 &&
                        g.layers[in].out.sp[0] == 128 &&
                        g.layers[in].out.c == 1);
        TH_CHECK(t, e1 > 0 && g.layers[e1].out.sp[2] == 128 &&
                        g.layers[e1].out.c == 16);
        /* Keras: up2 [64, 64, 64, 64] (C first) upsampled from 32^3 */
        TH_CHECK(t, up > 0 && g.layers[up].op == GOP_UPSAMPLE &&
                        g.layers[up].out.sp[0] == 64 &&
                        g.layers[up].out.c == 64);
        TH_CHECK(t, c2 > 0 && g.layers[c2].op == GOP_CONCAT &&
                        g.layers[c2].out.c == 96);
        TH_CHECK(t, u1 > 0 && g.layers[u1].op == GOP_CONV_T &&
                        g.layers[u1].out.sp[0] == 128 &&
                        g.layers[u1].out.c == 32);
        TH_CHECK(t, m > 0 && g.layers[m].out.c == 1);
    }
    graph_free(&g);
    same_trace(t, KDIR "unet3d_cf.json", KDIR "unet3d_cl.json", &o);

    th_case(t, "channels_first 2D CNN: Flatten + Dense, SE gate (C, 1, 1): "
               "137,490, the twin's trace");
    if (imp(t, KDIR "cnn2d_cf.json", &o, &g, NULL)) {
        /* conv1 3x3x3x16 + 16 = 448, bn1 64, conv2 3x3x16x32 + 32 = 4,640,
         * se 32x8 + 8 = 264 and 8x32 + 32 = 288, fc1 (8x8x32 = 2,048
         * flattened) x 64 + 64 = 131,136, predictions 650 */
        TH_CHECKF(t, keras_total(&g, NULL) == 137490, "%lld",
                  (long long)keras_total(&g, NULL));
        int f = find(&g, "flatten"), sr = find(&g, "se_reshape"),
            p = find(&g, "pad");
        TH_CHECK(t, f > 0 && g.layers[f].out.c == 2048);
        TH_CHECK(t, sr > 0 && g.layers[sr].out.nsp == 2 &&
                        g.layers[sr].out.sp[0] == 1 &&
                        g.layers[sr].out.sp[1] == 1 &&
                        g.layers[sr].out.c == 32);
        TH_CHECK(t, p > 0 && g.layers[p].out.sp[0] == 18 &&
                        g.layers[p].out.c == 16);
    }
    graph_free(&g);
    same_trace(t, KDIR "cnn2d_cf.json", KDIR "cnn2d_cl.json", &o);

    th_case(t, "--input and --partition in the input's Keras order "
               "(N, C, D, H, W)");
    o.input = "1x32x48x64";
    o.partition = "1,1,2,1,1";
    if (imp(t, KDIR "unet3d_cf.json", &o, &g, NULL)) {
        TH_CHECK(t, g.layers[0].out.sp[0] == 32 &&
                        g.layers[0].out.sp[2] == 64 &&
                        g.layers[0].out.c == 1);
        TH_CHECKF(t, g.cores_per_replica == 2 && g.pdims[1] == 2 &&
                         g.pdims[4] == 1,
                  "pdims %d %d %d %d %d", g.pdims[0], g.pdims[1],
                  g.pdims[2], g.pdims[3], g.pdims[4]);
    }
    graph_free(&g);
    memset(&o, 0, sizeof o);

    th_case(t, "the 3D U-Net runs on v3-8, and its values at 16^3 "
               "(--functional --steps 2)");
    {
        char out[512];
        snprintf(out, sizeof out, "%s/unet3d.trace.json", th_tmpdir());
        th_run(&r, "%s import " KDIR "unet3d_cf.json -o %s --loss dice",
               th_bin(), out);
        TH_CHECKF(t, r.status == 0, "%s", r.err);
        th_run(&r, "%s run %s", th_bin(), out);
        TH_CHECKF(t, r.status == 0 && strstr(r.out, "unet3d on v3-8"), "%s",
                  r.err);
        th_run(&r, "%s import " KDIR "unet3d_cf.json -o %s --loss dice "
                   "--input 1x16x16x16 --batch 8",
               th_bin(), out);
        TH_CHECKF(t, r.status == 0, "%s", r.err);
        th_run(&r, "%s run %s --functional --steps 2", th_bin(), out);
        TH_CHECKF(t, r.status == 0 && strstr(r.out, "[8,16,16,16,1]"),
                  "%s%s", r.out, r.err);
    }

    th_case(t, "a mix: channels_first convolutions, Permute to channels "
               "last for a Dense and a channels_last conv, Permute back");
    snprintf(path, sizeof path, "%s/mixed.json", th_tmpdir());
    {
        static const kspec l[] = {
            {"InputLayer", "x", "\"batch_input_shape\": [null, 3, 16, 12]",
             NULL, NULL},
            {"Dropout", "drop", "\"rate\": 0.1", "x", NULL},
            {"Conv2D", "a", "\"filters\": 8, \"kernel_size\": 3, " CF, "drop",
             NULL},
            {"BatchNormalization", "bn", "\"axis\": 1", "a", NULL},
            {"Permute", "to_last", "\"dims\": [2, 3, 1]", "bn", NULL},
            {"Dense", "mix", "\"units\": 6", "to_last", NULL},
            {"LayerNormalization", "ln", "\"axis\": -1", "mix", NULL},
            {"Conv2D", "b", "\"filters\": 4, \"kernel_size\": 1, " CL,
             "ln", NULL},
            {"Permute", "to_first", "\"dims\": [3, 1, 2]", "b", NULL},
            {"Reshape", "rows", "\"target_shape\": [4, 140]", "to_first",
             NULL},
            {"Conv1D", "c", "\"filters\": 5, \"kernel_size\": 3, " CF,
             "rows", NULL},
            {"Softmax", "sm", "\"axis\": 1", "c", NULL},
            {"GlobalAveragePooling1D", "gap", CF, "sm", NULL},
            {"Dense", "out", "\"units\": 2", "gap", NULL},
        };
        if (kmodel(t, path, l, (int)(sizeof l / sizeof l[0]),
                   "[[\"x\", 0, 0]]", "[[\"out\", 0, 0]]") &&
            imp(t, path, &o, &g, NULL)) {
            int a = find(&g, "a"), m = find(&g, "mix"), b = find(&g, "b"),
                rw = find(&g, "rows"), c = find(&g, "c");
            /* Keras: a [8, 14, 10], to_last [14, 10, 8], mix [14, 10, 6],
             * b [14, 10, 4], to_first [4, 14, 10], rows [4, 140],
             * c [5, 138] */
            TH_CHECK(t, a > 0 && g.layers[a].out.sp[0] == 14 &&
                            g.layers[a].out.sp[1] == 10 &&
                            g.layers[a].out.c == 8);
            TH_CHECK(t, m > 0 && g.layers[m].in[0] == find(&g, "bn") &&
                            g.layers[m].out.c == 6);
            TH_CHECK(t, b > 0 && g.layers[b].out.c == 4);
            TH_CHECK(t, rw > 0 && g.layers[rw].op == GOP_RESHAPE &&
                            g.layers[rw].out.sp[0] == 1 &&
                            g.layers[rw].out.sp[1] == 140 &&
                            g.layers[rw].out.c == 4);
            TH_CHECK(t, c > 0 && g.layers[c].out.sp[1] == 138 &&
                            g.layers[c].out.c == 5);
            TH_CHECK(t, find(&g, "to_last") < 0 && find(&g, "to_first") < 0);
            /* a 3x3x3x8 + 8, bn 32, mix 8x6 + 6, ln 12, b 6x4 + 4,
             * c 3x4x5 + 5, out 5x2 + 2 */
            TH_CHECKF(t, keras_total(&g, NULL) == 224 + 32 + 54 + 12 + 28 +
                                                     65 + 12,
                      "%lld", (long long)keras_total(&g, NULL));
        }
        graph_free(&g);
    }

    th_case(t, "channels_first layers that act on a spatial axis: refused "
               "with the path and why");
    {
        static const struct {
            kspec l[4];
            const char *want;
        } cases[] = {
            {{{"InputLayer", "x", "\"batch_input_shape\": [null, 3, 8, 8]",
               NULL, NULL},
              {"Conv2D", "a", "\"filters\": 4, \"kernel_size\": 1, " CL, "x",
               NULL},
              {"Conv2D", "b", "\"filters\": 4, \"kernel_size\": 1, " CF, "x",
               NULL},
              {"Add", "out", "", "a", "b"}},
             "mixed.json: config.layers[2].config.data_format: 'b' (Conv2D) "
             "is channels_first, but its input 'x' is a channels_last tensor"},
            {{{"InputLayer", "x", "\"batch_input_shape\": [null, 3, 8, 8]",
               NULL, NULL},
              {"Conv2D", "a", "\"filters\": 4, \"kernel_size\": 1, "
                              "\"activation\": \"softmax\", " CF,
               "x", NULL},
              {"Flatten", "f", "", "a", NULL},
              {"Dense", "out", "\"units\": 2", "f", NULL}},
             "mixed.json: config.layers[1].config.activation: activation "
             "'softmax' acts on the last axis, which on the channels_first "
             "tensor of 'a' is a spatial one"},
            {{{"InputLayer", "x", "\"batch_input_shape\": [null, 3, 8, 8]",
               NULL, NULL},
              {"Conv2D", "a", "\"filters\": 4, \"kernel_size\": 1, " CF, "x",
               NULL},
              {"BatchNormalization", "bn", "\"axis\": -1", "a", NULL},
              {"Flatten", "out", "", "bn", NULL}},
             "mixed.json: config.layers[2].config.axis: axis -1 is not the "
             "channel axis of this channels_first tensor (1 or -3)"},
            {{{"InputLayer", "x", "\"batch_input_shape\": [null, 3, 8, 8]",
               NULL, NULL},
              {"Conv2D", "a", "\"filters\": 4, \"kernel_size\": 1, " CF, "x",
               NULL},
              {"Reshape", "r", "\"target_shape\": [64, 4]", "a", NULL},
              {"Flatten", "out", "", "r", NULL}},
             "mixed.json: config.layers[2].config.target_shape: 'a' is "
             "channels_first with 4 channels; a target of 64 first moves "
             "elements across the channel axis"},
            {{{"InputLayer", "x", "\"batch_input_shape\": [null, 8, 8, 3]",
               NULL, NULL},
              {"Conv2D", "a", "\"filters\": 4, \"kernel_size\": 1, " CL, "x",
               NULL},
              {"Permute", "p", "\"dims\": [2, 3, 1]", "a", NULL},
              {"Conv2D", "out", "\"filters\": 4, \"kernel_size\": 1, " CF,
               "p", NULL}},
             "mixed.json: config.layers[2].config.dims: 'a' is channels_last: "
             "this permutation moves its first (spatial) axis"},
            {{{"InputLayer", "x", "\"batch_input_shape\": [null, 8, 8, 3]",
               NULL, NULL},
              {"Conv2D", "a", "\"filters\": 4, \"kernel_size\": 1, " CF, "x",
               NULL},
              {"Permute", "p", "\"dims\": [1, 3, 2]", "a", NULL},
              {"Flatten", "out", "", "p", NULL}},
             "the file's unmapped classes: Permute(dims=[1,3,2]) x1"},
            {{{"InputLayer", "x", "\"batch_input_shape\": [null, 4, 8, 8]",
               NULL, NULL},
              {"Conv2D", "a", "\"filters\": 4, \"kernel_size\": 1, " CF, "x",
               NULL},
              {"GlobalAveragePooling2D", "g", CF, "a", NULL},
              {"Multiply", "out", "", "a", "g"}},
             "mixed.json: config.layers[3]: 'out' (Multiply): the flat operand "
             "'g' broadcasts along the last axis of the channels_first tensor "
             "'a'"},
        };
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
            const char *w[] = {cases[k].want, NULL};
            if (kmodel(t, path, cases[k].l, 4, "[[\"x\", 0, 0]]",
                       "[[\"out\", 0, 0]]"))
                refuses(t, path, w);
        }
    }

    th_case(t, "an input's layout is its first reader's with a data_format, "
               "through layers without one; unclear in a mixed model");
    {
        static const kspec l[] = {
            {"InputLayer", "x", "\"batch_input_shape\": [null, 4, 8, 6]",
             NULL, NULL},
            {"Activation", "r", "\"activation\": \"relu\"", "x", NULL},
            {"Conv2D", "out", "\"filters\": 2, \"kernel_size\": 1, " CF,
             "r", NULL},
        };
        if (kmodel(t, path, l, 3, "[[\"x\", 0, 0]]", "[[\"out\", 0, 0]]") &&
            imp(t, path, &o, &g, NULL))
            TH_CHECK(t, g.layers[0].out.sp[0] == 8 &&
                            g.layers[0].out.sp[1] == 6 &&
                            g.layers[0].out.c == 4);
        graph_free(&g);
        static const kspec m[] = {
            {"InputLayer", "x", "\"batch_input_shape\": [null, 4, 8, 8]",
             NULL, NULL},
            {"InputLayer", "y", "\"batch_input_shape\": [null, 4, 8, 8]",
             NULL, NULL},
            {"Activation", "r", "\"activation\": \"relu\"", "x", NULL},
            {"Conv2D", "a", "\"filters\": 4, \"kernel_size\": 1, " CF, "y",
             NULL},
            {"Conv2D", "b", "\"filters\": 4, \"kernel_size\": 1, " CL, "a",
             NULL},
        };
        static const char *const w[] = {
            "mixed.json: config.layers[0].config.batch_input_shape: no layer "
            "reading input 'x' says its data_format, and the model's layers "
            "are channels_first and channels_last",
            NULL};
        if (kmodel(t, path, m, 5, "[[\"x\", 0, 0], [\"y\", 0, 0]]",
                   "[[\"r\", 0, 0], [\"b\", 0, 0]]"))
            refuses(t, path, w);
    }
}

/* A generated model of 500 layers (125 residual blocks of conv, batchnorm,
 * relu and add) imported and run: the bound of 1 s of host time
 * (CPU time, so a busy machine does not fail it; not under ASan). */
static void speed(th_ctx *t)
{
    th_case(t, "a 500-layer Keras model imports and runs in under 1 s of "
               "host time");
    char path[512], a[64], b[64], c[64], prev[64];
    snprintf(path, sizeof path, "%s/deep500.json", th_tmpdir());
    FILE *f = fopen(path, "w");
    if (!TH_CHECK(t, f != NULL))
        return;
    int first = 1;
    fprintf(f, "{\"class_name\": \"Functional\", \"config\": {\"name\": "
               "\"deep500\", \"layers\": [\n");
    klayer(f, &first, "InputLayer", "x",
           "\"batch_input_shape\": [null, 32, 32, 16]", NULL, NULL);
    snprintf(prev, sizeof prev, "x");
    for (int k = 0; k < 125; k++) {
        snprintf(a, sizeof a, "c%d", k);
        snprintf(b, sizeof b, "bn%d", k);
        snprintf(c, sizeof c, "r%d", k);
        klayer(f, &first, "Conv2D", a,
               "\"filters\": 16, \"kernel_size\": [3, 3], \"padding\": "
               "\"same\", \"use_bias\": false",
               prev, NULL);
        klayer(f, &first, "BatchNormalization", b, "\"axis\": -1", a, NULL);
        klayer(f, &first, "ReLU", c, "", b, NULL);
        snprintf(a, sizeof a, "add%d", k);
        klayer(f, &first, "Add", a, "", c, prev);
        snprintf(prev, sizeof prev, "%s", a);
    }
    klayer(f, &first, "GlobalAveragePooling2D", "gap", "", prev, NULL);
    klayer(f, &first, "Dense", "fc", "\"units\": 10, \"activation\": "
                                      "\"softmax\"", "gap", NULL);
    fprintf(f, "], \"input_layers\": [[\"x\", 0, 0]], \"output_layers\": "
               "[[\"fc\", 0, 0]]}, \"keras_version\": \"2.12.0\"}\n");
    fclose(f);

    clock_t t0 = clock();
    keras_opts o;
    memset(&o, 0, sizeof o);
    graph g;
    if (!imp(t, path, &o, &g, NULL))
        return;
    TH_CHECKF(t, g.n_layers >= 500, "%d layers", g.n_layers);
    sim_opts so;
    sim_opts_default(&so);
    emu_result r;
    tpu_error err = {0};
    int ran = sim_run(&g, &so, &r, &err) == 0;
    double s = (double)(clock() - t0) / CLOCKS_PER_SEC;
    TH_CHECKF(t, ran, "%s", err.msg);
    if (ran)
        emu_result_free(&r);
    graph_free(&g);
    TH_CHECKF(t, th_asan() || s < 1.0, "%.3f s of host time", s);
}

/* k3_config.json (a U-Net mask head: 1x1 conv, sigmoid) with its
 * compile_config.loss replaced by `loss` (JSON text), imported without
 * --loss (or with `flag`): the loss layer's kind and input, and the notes. */
/* Layers of g, not the loss, whose output no layer reads. */
static int dead_layers(const graph *g)
{
    int n = 0;
    for (int l = g->n_inputs; l < g->n_layers; l++) {
        int read = g->layers[l].op == GOP_LOSS;
        for (int j = l + 1; j < g->n_layers && !read; j++)
            for (int k = 0; k < g->layers[j].n_in; k++)
                read |= g->layers[j].in[k] == l;
        n += !read;
    }
    return n;
}

static int saved_loss_import(th_ctx *t, const char *loss, const char *flag,
                             graph_loss *kind, char *in, size_t cap,
                             char **notes, int *dead)
{
    static const char key[] = "\"loss\": \"binary_crossentropy\"";
    size_t len = 0;
    char *src = th_slurp(KDIR "k3_config.json", &len), *at = NULL;
    char path[512];
    keras_opts o;
    graph g;
    int ok = 0;
    *notes = NULL;
    if (!TH_CHECK(t, src && (at = strstr(src, key)) != NULL)) {
        free(src);
        return 0;
    }
    snprintf(path, sizeof path, "%s/loss.json", th_tmpdir());
    FILE *f = fopen(path, "w");
    if (f) {
        fprintf(f, "%.*s\"loss\": %s%s", (int)(at - src), src, loss,
                at + strlen(key));
        fclose(f);
    }
    free(src);
    memset(&o, 0, sizeof o);
    o.input = "64x64x1";
    o.loss = flag;
    if (f && imp(t, path, &o, &g, notes)) {
        int l = find(&g, "loss");
        ok = TH_CHECK(t, l > 0);
        if (ok) {
            *kind = g.layers[l].loss;
            snprintf(in, cap, "%s", g.layers[g.layers[l].in[0]].name);
            *dead = dead_layers(&g);
        }
        graph_free(&g);
    }
    if (!*notes)
        *notes = calloc(1, 1);
    return ok && *notes;
}

/* A compiled model's loss (compile_config.loss, training_config.loss):
 * mapped to the trace's kind when it has one, said in a note; otherwise a
 * note and softmax_xent.  --loss wins. */
static void saved_losses(th_ctx *t)
{
    static const struct {
        const char *loss, *flag;
        graph_loss kind;
        const char *in, *says;
    } cases[] = {
        {"\"binary_crossentropy\"", NULL, GLOSS_SIGMOID_XENT, "mask",
         "the sigmoid 'mask/sigmoid' is part of the sigmoid_xent loss"},
        {"\"mean_squared_error\"", NULL, GLOSS_L2, "mask/sigmoid",
         "the loss is l2: the model was compiled with 'mean_squared_error' "
         "(compile_config.loss)"},
        {"{\"module\": \"keras.losses\", \"class_name\": \"Huber\", "
         "\"config\": {\"delta\": 1.0}}",
         NULL, GLOSS_SMOOTH_L1, "mask/sigmoid", "the loss is smooth_l1"},
        {"\"dice_loss\"", NULL, GLOSS_DICE, "mask",
         "the sigmoid 'mask/sigmoid' is part of the dice loss, which reads "
         "its input 'mask' (the logits); the sigmoid is left out of the "
         "trace"},
        {"\"binary_focal_crossentropy\"", NULL, GLOSS_SIGMOID_FOCAL, "mask",
         "the sigmoid 'mask/sigmoid' is part of the sigmoid_focal loss"},
        {"[\"mse\"]", NULL, GLOSS_L2, "mask/sigmoid", "the loss is l2"},
        {"\"mae\"", NULL, GLOSS_SOFTMAX_XENT, "mask/sigmoid",
         "compiled with the loss 'mae' (compile_config.loss), which the "
         "trace has no loss kind for"},
        {"{\"mask\": \"mse\", \"aux\": \"binary_crossentropy\"}", NULL,
         GLOSS_SOFTMAX_XENT, "mask/sigmoid", "(different losses per output)"},
        {"\"mse\"", "dice", GLOSS_DICE, "mask", ""},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        char title[256], in[GRAPH_NAME_MAX] = "", *notes = NULL;
        graph_loss kind = GLOSS_SOFTMAX_XENT;
        int dead = -1;
        snprintf(title, sizeof title, "compiled with %s%s%s: %s on '%s'",
                 cases[k].loss, cases[k].flag ? ", --loss " : "",
                 cases[k].flag ? cases[k].flag : "",
                 graph_loss_name(cases[k].kind), cases[k].in);
        th_case(t, title);
        if (saved_loss_import(t, cases[k].loss, cases[k].flag, &kind, in,
                              sizeof in, &notes, &dead)) {
            TH_CHECKF(t, kind == cases[k].kind && strcmp(in, cases[k].in) == 0,
                      "%s on '%s'", graph_loss_name(kind), in);
            /* a folded sigmoid leaves the trace: no layer nothing reads */
            TH_CHECKF(t, dead == 0, "%d layers read by none", dead);
            TH_CHECKF(t, strstr(notes, cases[k].says) != NULL, "notes: %s",
                      notes);
            /* the default on a one-channel output says it is useless */
            TH_CHECKF(t, (kind == GLOSS_SOFTMAX_XENT) ==
                             (strstr(notes, "is 0 whatever it holds") != NULL),
                      "notes: %s", notes);
            if (cases[k].flag)
                TH_CHECKF(t, !strstr(notes, "the loss is"), "notes: %s",
                          notes);
        }
        free(notes);
    }
}

void th_suite_import(th_ctx *t)
{
    schemas(t);
    applications(t);
    bad(t);
    causal_softmax(t);
    channels_first(t);
    saved_losses(t);
    speed(t);
}
