/* tpuemu import: a Keras or TensorFlow.js model's architecture as a trace
 * (emu/imp/keras*.c do the work; docs/IMPORT.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/cli/cli.h"
#include "emu/graph.h"
#include "emu/imp/keras.h"
#include "emu/out/outfile.h"

static const char usage[] =
    "usage: tpuemu import MODEL -o TRACE.json [--input SHAPE] [--batch N]\n"
    "                    [--system NAME] [--partition N,H,W,C]\n"
    "                    [--mode train|infer] [--loss KIND]\n"
    "                    [--optimizer NAME] [--allow-identity CLASS,...]\n"
    "\n"
    "Writes the trace of a Keras model: Keras 2 model.to_json(), Keras 3\n"
    "config.json or a .keras archive, or a TensorFlow.js model.json.\n"
    "\n"
    "  -o, --out TRACE.json  the trace to write (replaced whole or not at all)\n"
    "  --input SHAPE     one example's shape as Keras writes it, without the\n"
    "                    batch: 224x224x3, 16x112x112x3 (',' between the\n"
    "                    shapes of several inputs); default the model's,\n"
    "                    required when it has None dimensions\n"
    "  --batch N         global batch (default 8 per replica)\n"
    "  --system NAME     the slice (default v3-8)\n"
    "  --partition LIST  the first input's input_partition_dims in Keras\n"
    "                    order, e.g. 1,4,2,1 (N, H, W, C); the replica size\n"
    "                    is their product\n"
    "  --mode MODE       train (default: a loss on the model's outputs that\n"
    "                    no layer reads) or infer\n"
    "  --loss KIND       softmax_xent, sigmoid_xent, sigmoid_focal, dice,\n"
    "                    l2, smooth_l1; default the compiled model's loss\n"
    "                    when the trace has its kind, else softmax_xent\n"
    "  --optimizer NAME  sgd, momentum, adam, rmsprop or lars, written as\n"
    "                    run.optimizer; default the one a compiled model was\n"
    "                    saved with (a .keras archive's compile_config),\n"
    "                    else momentum\n"
    "  --allow-identity CLASS  pass layers of a Keras class (or an activation\n"
    "                    name) that has no trace op through unchanged, said\n"
    "                    on stderr and in the trace's comment; repeatable,\n"
    "                    or a comma-separated list\n"
    "\n"
    "exit status: 0 written, 2 bad input or usage (the model file and the\n"
    "JSON path named), 4 out of host memory\n";

/* --allow-identity may be given several times: the lists are joined. */
static int add_allowed(char *buf, size_t cap, const char *v)
{
    size_t n = strlen(buf);
    if (!*v)
        return cli_error(2, "--allow-identity: empty class name");
    if (n + strlen(v) + 2 > cap)
        return cli_error(2, "--allow-identity: the lists are longer than "
                            "%zu bytes", cap - 1);
    snprintf(buf + n, cap - n, "%s%s", n ? "," : "", v);
    return 0;
}

/* Shared with `summary`: the import options at argv[*i]; 1 taken, 0 not
 * one of them, -1 error printed. */
int cli_import_take(keras_opts *o, char *allow, size_t cap, int argc,
                    char **argv, int *i);

int cli_import_take(keras_opts *o, char *allow, size_t cap, int argc,
                    char **argv, int *i)
{
    const char *v = NULL;
    int r;
    if ((r = cli_take(argc, argv, i, "--input", &v)) != 0) {
        o->input = v;
        return r;
    }
    if ((r = cli_take(argc, argv, i, "--system", &v)) != 0) {
        tpu_error e;
        if (r < 0)
            return r;
        if (graph_check_system(v, "--system", &e)) {
            cli_fail(&e);
            return -1;
        }
        o->system = v;
        return 1;
    }
    if ((r = cli_take(argc, argv, i, "--batch", &v)) != 0) {
        if (r < 0 || cli_int("--batch", v, 1, 1 << 20, &o->batch))
            return -1;
        return 1;
    }
    if ((r = cli_take(argc, argv, i, "--partition", &v)) != 0) {
        o->partition = v;
        return r;
    }
    if ((r = cli_take(argc, argv, i, "--mode", &v)) != 0) {
        if (r < 0)
            return r;
        if (strcmp(v, "train") && strcmp(v, "infer")) {
            cli_error(2, "--mode: '%s' is not train or infer", v);
            return -1;
        }
        o->infer = strcmp(v, "infer") == 0;
        return 1;
    }
    if ((r = cli_take(argc, argv, i, "--loss", &v)) != 0) {
        o->loss = v;
        return r;
    }
    if (strcmp(argv[*i], "--allow-identity") == 0 ||
        strncmp(argv[*i], "--allow-identity=", 17) == 0) {
        const char *a = argv[*i][16] == '=' ? argv[*i] + 17 : NULL;
        if (!a) {
            if (*i + 1 >= argc) {
                cli_error(2, "--allow-identity: missing value");
                return -1;
            }
            a = argv[++*i];
        }
        if (add_allowed(allow, cap, a))
            return -1;
        o->allow_identity = allow;
        return 1;
    }
    return 0;
}

int cli_import(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        fputs(usage, stdout);
        return 0;
    }
    keras_opts o;
    char allow[1024] = "";
    const char *model = NULL, *out = NULL;
    memset(&o, 0, sizeof o);
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int r = cli_import_take(&o, allow, sizeof allow, argc, argv, &i);
        if (r < 0)
            return 2;
        if (r > 0)
            continue;
        if (strcmp(argv[i], "-o") == 0) {
            if (out)
                return cli_error(2, "-o: given twice ('%s', then '%s')", out,
                                 i + 1 < argc ? argv[i + 1] : "");
            if (i + 1 >= argc)
                return cli_error(2, "-o: missing value");
            out = argv[++i];
            continue;
        }
        if ((r = cli_take(argc, argv, &i, "--out", &v)) != 0) {
            if (r < 0)
                return 2;
            if (out)
                return cli_error(2, "--out: given twice ('%s', then '%s')",
                                 out, v);
            out = v;
            continue;
        }
        if ((r = cli_take(argc, argv, &i, "--optimizer", &v)) != 0) {
            if (r < 0)
                return 2;
            if (graph_optimizer_find(v) < 0)
                return cli_error(2, "--optimizer: '%s' is not one of %s", v,
                                 graph_optimizer_words());
            o.optimizer = v;
            continue;
        }
        if (argv[i][0] == '-' && argv[i][1])
            return cli_error(2, "import: unknown option '%s' (see tpuemu "
                                "import --help)", argv[i]);
        if (model)
            return cli_error(2, "import: one model file, got '%s' and '%s'",
                             model, argv[i]);
        model = argv[i];
    }
    if (!model)
        return cli_error(2, "import: no model file given (usage: tpuemu "
                            "import MODEL -o TRACE.json)");
    if (!out)
        return cli_error(2, "import: no output given: -o TRACE.json");
    if (strcmp(out, "-") == 0)
        return cli_error(2, "-o -: the trace is written to a file (renamed "
                            "into place when whole), not standard output");
    tpu_error err = {0};
    if (outfile_check(out, &err))
        return cli_fail(&err);
    char *text = NULL, *notes = NULL;
    if (keras_import(model, &o, &text, &notes, &err))
        return cli_fail(&err);
    for (char *l = notes; l && *l;) {
        char *nl = strchr(l, '\n');
        fprintf(stderr, "tpuemu: note: %.*s\n",
                (int)(nl ? nl - l : (long)strlen(l)), l);
        l = nl ? nl + 1 : l + strlen(l);
    }
    size_t len = strlen(text);
    text[len] = '\n';
    tpu_status st = outfile_write(out, text, len + 1, &err);
    free(text);
    free(notes);
    if (st)
        return cli_fail(&err);
    graph g;
    if (graph_load(&g, out, &err))
        return cli_fail(&err);
    printf("wrote %s: %d input%s, %d layers (tpuemu summary %s lists their "
           "shapes and parameters)\n", out, g.n_inputs,
           g.n_inputs == 1 ? "" : "s", g.n_layers - g.n_inputs, out);
    graph_free(&g);
    return 0;
}
