/* tpuemu summary: what Keras's model.summary() shows, for a trace (or a
 * model file, imported first as `tpuemu import` would): each layer's
 * output shape per example, parameters, multiply-adds and the bytes its
 * output keeps for the backward pass, then the totals. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/cli/cli.h"
#include "emu/graph.h"
#include "emu/imp/keras.h"

static const char usage[] =
    "usage: tpuemu summary TRACE.json|MODEL [import options]\n"
    "\n"
    "Lists every layer of a trace as Keras's model.summary() does: name and\n"
    "op, output shape per example (channels last), parameters, forward\n"
    "multiply-adds per example, and the bytes of its output the backward\n"
    "pass keeps per example (training only), then the totals.  Parameters\n"
    "count as Keras counts them: a batchnorm's moving mean and variance are\n"
    "non-trainable parameters, shared weights count once.\n"
    "\n"
    "A Keras or TensorFlow.js model file is imported first; the options of\n"
    "`tpuemu import` apply (--input, --batch, --system, --partition, --mode,\n"
    "--loss, --allow-identity).\n"
    "\n"
    "exit status: 0 done, 2 bad input or usage, 4 out of host memory\n";

/* emu/cli/import.c */
int cli_import_take(keras_opts *o, char *allow, size_t cap, int argc,
                    char **argv, int *i);

/* Keras's parameter count of layer i: the trace's weights, plus a
 * batchnorm's moving mean and variance (non-trainable; a sharer's are its
 * owner's). */
static int64_t keras_params(const graph *g, int i, int64_t *nontrain)
{
    const glayer *L = &g->layers[i];
    int64_t stats =
        L->op == GOP_BATCHNORM && L->share_from < 0 ? 2 * L->out.c : 0;
    *nontrain = stats + (L->frozen && L->share_from < 0 ? L->weights : 0);
    return L->weights + stats;
}

/* Whether layer l's output is kept for the backward pass, by the
 * lowering's rule (firmware/lower.c, saved_for_backward) before fusion:
 * the input of a matrix layer whose weights train, of a batchnorm with a
 * backward pass, a relu/sigmoid output (its mask) and a max pooling's
 * input and output where a gradient passes. */
static void mark_kept(const graph *g, unsigned char *kept)
{
    memset(kept, 0, (size_t)g->n_layers);
    if (!g->train)
        return;
    for (int j = 0; j < g->n_layers; j++) {
        const glayer *J = &g->layers[j];
        int trains = (J->op == GOP_CONV || J->op == GOP_CONV_T ||
                      J->op == GOP_DENSE) &&
                     graph_layer_trains(g, j);
        if (J->unused)
            continue;
        if ((J->op == GOP_RELU || J->op == GOP_SIGMOID) && J->needs_grad)
            kept[j] = 1;
        if (J->op == GOP_MAXPOOL && g->layers[J->in[0]].needs_grad)
            kept[j] = 1;
        for (int k = 0; k < J->n_in; k++) {
            int l = J->in[k];
            if (trains || (J->op == GOP_BATCHNORM && J->needs_grad) ||
                (J->op == GOP_MAXPOOL && g->layers[l].needs_grad))
                kept[l] = 1;
        }
    }
}

/* n with thousands separators, as Keras prints parameter counts. */
static void fmt_count(char *buf, size_t cap, int64_t n)
{
    char d[32];
    int len = snprintf(d, sizeof d, "%lld", (long long)n), o = 0;
    for (int k = 0; k < len && (size_t)o + 2 < cap; k++) {
        if (k > 0 && d[k - 1] != '-' && (len - k) % 3 == 0)
            buf[o++] = ',';
        buf[o++] = d[k];
    }
    buf[o] = 0;
}

/* x with a k/M/G suffix, 4 significant digits. */
static void fmt_si(char *buf, size_t cap, double x, const char *unit)
{
    static const char *const sfx[] = {"", "k", "M", "G", "T", "P"};
    int s = 0;
    while (x >= 999.95 && s < 5) {
        x /= 1000;
        s++;
    }
    if (s == 0)
        snprintf(buf, cap, "%.0f%s%s", x, *unit ? " " : "", unit);
    else
        snprintf(buf, cap, "%.4g %s%s", x, sfx[s], unit);
}

static void fmt_bytes(char *buf, size_t cap, double b)
{
    if (b < 1024)
        snprintf(buf, cap, "%.0f B", b);
    else if (b < 1024.0 * 1024)
        snprintf(buf, cap, "%.1f KiB", b / 1024);
    else if (b < 1024.0 * 1024 * 1024)
        snprintf(buf, cap, "%.1f MiB", b / (1024.0 * 1024));
    else
        snprintf(buf, cap, "%.2f GiB", b / (1024.0 * 1024 * 1024));
}

static void fmt_shape(char *buf, size_t cap, const gshape *s)
{
    int n = snprintf(buf, cap, "[");
    for (int d = 0; d < s->nsp && n > 0 && (size_t)n < cap; d++)
        n += snprintf(buf + n, cap - (size_t)n, "%lld, ", (long long)s->sp[d]);
    if (n > 0 && (size_t)n < cap)
        snprintf(buf + n, cap - (size_t)n, "%lld]", (long long)s->c);
}

static void put_table(const graph *g, const unsigned char *kept)
{
    const int wn = 40;
    int64_t total = 0, nontrain = 0;
    double macs = 0, kept_b = 0;
    char name[256], cell[64];
    printf("Trace: \"%s\"  (%s, %s, global batch %lld, %d core%s per "
           "replica)\n\n",
           g->name, g->system, g->train ? "train" : "infer",
           (long long)g->global_batch, g->cores_per_replica,
           g->cores_per_replica == 1 ? "" : "s");
    cli_put_cell("Layer (op)", wn);
    printf(" %-22s %14s %12s %12s\n", "Output shape", "Param #", "MACs",
           g->train ? "Kept" : "");
    for (int i = 0; i < wn + 64; i++)
        putchar('=');
    putchar('\n');
    for (int i = 0; i < g->n_layers; i++) {
        const glayer *L = &g->layers[i];
        int64_t nt, p = keras_params(g, i, &nt);
        double kb = kept[i] ? (double)graph_layer_out_bytes(g, i) : 0;
        char shape[64], pc[32], mc[32], kc[32], full[160];
        snprintf(full, sizeof full, "%s (%s%s)", L->name,
                 graph_op_name(L->op),
                 L->share_from >= 0 ? ", shared" : "");
        cli_fit_cols_mid(name, sizeof name, full, wn - 1);
        cli_put_cell(name, wn);
        fmt_shape(shape, sizeof shape, &L->out);
        fmt_count(pc, sizeof pc, p);
        if (L->macs > 0)
            fmt_si(mc, sizeof mc, L->macs, "");
        else
            snprintf(mc, sizeof mc, "0");
        if (!g->train)
            kc[0] = 0;
        else if (kb > 0)
            fmt_bytes(kc, sizeof kc, kb);
        else
            snprintf(kc, sizeof kc, "-");
        printf(" %-22s %14s %12s %12s\n", shape, pc, mc, kc);
        total += p;
        nontrain += nt;
        macs += L->macs;
        kept_b += kb;
    }
    for (int i = 0; i < wn + 64; i++)
        putchar('=');
    putchar('\n');
    fmt_count(cell, sizeof cell, total);
    printf("Total params: %s\n", cell);
    fmt_count(cell, sizeof cell, total - nontrain);
    printf("Trainable params: %s\n", cell);
    fmt_count(cell, sizeof cell, nontrain);
    printf("Non-trainable params: %s\n", cell);
    fmt_si(cell, sizeof cell, macs, "");
    printf("Multiply-adds per example (forward): %s\n", cell);
    fmt_si(cell, sizeof cell, graph_forward_flops(g), "FLOP");
    printf("Forward FLOPs per example: %s", cell);
    if (g->train) {
        fmt_si(cell, sizeof cell, graph_backward_flops(g), "FLOP");
        printf(", backward: %s", cell);
    }
    putchar('\n');
    if (g->train) {
        fmt_bytes(cell, sizeof cell, kept_b);
        printf("Kept for the backward pass per example: %s (before fusion "
               "and recomputation: tpuemu run reports what a core holds)\n",
               cell);
    }
}

int cli_summary(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        fputs(usage, stdout);
        return 0;
    }
    keras_opts o;
    char allow[1024] = "";
    const char *path = NULL;
    memset(&o, 0, sizeof o);
    for (int i = 1; i < argc; i++) {
        int r = cli_import_take(&o, allow, sizeof allow, argc, argv, &i);
        if (r < 0)
            return 2;
        if (r > 0)
            continue;
        if (argv[i][0] == '-' && argv[i][1])
            return cli_error(2, "summary: unknown option '%s' (see tpuemu "
                                "summary --help)", argv[i]);
        if (path)
            return cli_error(2, "summary: one file, got '%s' and '%s'", path,
                             argv[i]);
        path = argv[i];
    }
    if (!path)
        return cli_error(2, "summary: no file given (usage: tpuemu summary "
                            "TRACE.json|MODEL)");
    tpu_error err = {0};
    cJSON *doc = NULL;
    char shown[1100];
    graph g;
    memset(&g, 0, sizeof g);
    char *raw = NULL;
    size_t raw_len = 0;
    if (keras_read(path, &doc, &raw, &raw_len, shown, (int)sizeof shown,
                   &err))
        return cli_fail(&err);
    if (keras_is_trace(doc)) {
        cJSON_Delete(doc);
        tpu_status st = TPU_OK;
        if (o.input || o.batch || o.system || o.partition || o.loss ||
            o.allow_identity || o.infer)
            st = cli_error(2, "summary: %s is a trace: the import options "
                              "apply to model files", path);
        else if (graph_parse(&g, raw, raw_len, path, &err))
            st = cli_fail(&err);
        free(raw);
        if (st) {
            graph_free(&g);
            return st;
        }
    } else {
        char *text = NULL, *notes = NULL;
        cJSON *trace = NULL;
        tpu_status st = keras_to_trace(doc, shown, &o, &trace, &notes, &err);
        cJSON_Delete(doc);
        free(raw);
        if (!st)
            st = keras_trace_text(trace, shown, &text, &err);
        cJSON_Delete(trace);
        if (st) {
            free(notes);
            return cli_fail(&err);
        }
        for (char *l = notes; l && *l;) {
            char *nl = strchr(l, '\n');
            fprintf(stderr, "tpuemu: note: %.*s\n",
                    (int)(nl ? nl - l : (long)strlen(l)), l);
            l = nl ? nl + 1 : l + strlen(l);
        }
        free(notes);
        st = graph_parse(&g, text, strlen(text), path, &err);
        free(text);
        if (st)
            return cli_fail(&err);
    }
    unsigned char *kept = malloc((size_t)g.n_layers + 1);
    if (!kept) {
        graph_free(&g);
        return cli_error(4, "out of host memory");
    }
    mark_kept(&g, kept);
    put_table(&g, kept);
    free(kept);
    graph_free(&g);
    return 0;
}
