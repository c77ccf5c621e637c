/* The what-if options shared by every command that simulates a trace
 * (run, lower, view): one parser, one set of messages, one help text, so
 * `view` and `lower` answer the same questions `run` does.  `sweep
 * --trace` takes --optimizer and --partition too (emu/cli/sweep/cli.c
 * builds them into its sweep file) and checks them with
 * cli_partition_parse. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/cli/cli.h"
#include "emu/params.h"

void cli_whatif_init(cli_whatif *w)
{
    memset(w, 0, sizeof *w);
    w->optimizer = -1;
}

/* Commas, or an x between factors as advise and sweep print a split
 * (1x4x2x1): one separator throughout. */
int cli_partition_parse(const char *v, int dims[GRAPH_MAX_PDIMS], int *n)
{
    char q[300];
    const char *p = v;
    char sep = 0;
    *n = 0;
    for (;;) {
        size_t len = strspn(p, "0123456789");
        long f = len > 0 && len <= 4 ? atol(p) : 0;
        if (!sep && (p[len] == ',' || p[len] == 'x'))
            sep = p[len];
        if (f < 1 || f > 4096 || *n == GRAPH_MAX_PDIMS ||
            (p[len] != sep && p[len] != 0))
            break;
        dims[(*n)++] = (int)f;
        if (!p[len])
            return *n >= 2 ? 0 : (*n = 0, -1);
        p += len + 1;
    }
    cli_shown(q, sizeof q, v);
    cli_error(2, "--partition %s: expected 2 to %d factors of the first "
                 "input's dimensions, each 1 to 4096, separated by commas "
                 "or x (N,H,W,C for an image: 1,4,2,1 or 1x4x2x1 splits H "
                 "in 4 and W in 2)",
              q, GRAPH_MAX_PDIMS);
    *n = 0;
    return -1;
}

static int note_first(cli_whatif *w, const char *name)
{
    if (!w->first)
        w->first = name;
    return 1;
}

int cli_whatif_take(cli_whatif *w, int argc, char **argv, int *i)
{
    const char *a = argv[*i], *v;
    if (strcmp(a, "--system") == 0) {
        if (!(w->system = cli_value(argc, argv, i)))
            return -1;
        return note_first(w, "--system");
    }
    if (strcmp(a, "--batch") == 0) {
        if (!(v = cli_value(argc, argv, i)) ||
            cli_int("--batch", v, 1, GRAPH_DIM_MAX, &w->batch))
            return -1;
        return note_first(w, "--batch");
    }
    if (strcmp(a, "--optimizer") == 0) {
        if (!(v = cli_value(argc, argv, i)))
            return -1;
        if ((w->optimizer = graph_optimizer_find(v)) < 0) {
            char q[300];
            cli_shown(q, sizeof q, v);
            cli_error(2, "--optimizer %s: unknown optimizer (expected one "
                         "of: %s)",
                      q, graph_optimizer_words());
            return -1;
        }
        return note_first(w, "--optimizer");
    }
    if (strcmp(a, "--partition") == 0) {
        if (!(w->partition = cli_value(argc, argv, i)) ||
            cli_partition_parse(w->partition, w->pdims, &w->pdims_n))
            return -1;
        return note_first(w, "--partition");
    }
    if (strcmp(a, "--freeze") == 0) {
        if (!(w->freeze = cli_value(argc, argv, i)))
            return -1;
        return note_first(w, "--freeze");
    }
    if (strcmp(a, "--set") == 0) {
        if (!(v = cli_value(argc, argv, i)))
            return -1;
        const char *eq = strchr(v, '=');
        if (!eq || eq == v || !eq[1] || strlen(v) >= sizeof w->buf[0]) {
            cli_error(2, "--set %s: expected KEY=VALUE", v);
            return -1;
        }
        if (w->n_sets == CLI_WHATIF_MAX_SETS) {
            cli_error(2, "--set: at most %d overrides", CLI_WHATIF_MAX_SETS);
            return -1;
        }
        char *b = w->buf[w->n_sets];
        memcpy(b, v, strlen(v) + 1);
        b[eq - v] = 0;
        w->keys[w->n_sets] = b;
        w->vals[w->n_sets] = b + (eq - v) + 1;
        w->sets[w->n_sets] = v;
        w->n_sets++;
        return note_first(w, "--set");
    }
    return 0;
}

/* Edits (insert, delete, substitute) between a and b, at most 63 chars
 * each compared (keys are shorter). */
static int edit_distance(const char *a, const char *b)
{
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la > 63)
        la = 63;
    if (lb > 63)
        lb = 63;
    int row[64];
    for (int j = 0; j <= lb; j++)
        row[j] = j;
    for (int i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = i;
        for (int j = 1; j <= lb; j++) {
            int up = row[j];
            int best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/* The keys a mistyped one most likely meant: those that contain it (or
 * its part after the dot), else those within a few edits; "" when none
 * is close, then the caller lists every key. */
static void close_keys(const char *key, char *out, size_t cap)
{
    const char *tail = strrchr(key, '.');
    tail = tail ? tail + 1 : key;
    int best = 1 << 30;
    for (int pass = 0; pass < 2; pass++) {
        size_t n = 0;
        out[0] = 0;
        for (size_t k = 0; tpu_param_key(k); k++) {
            const char *name = tpu_param_key(k)->key;
            int d = edit_distance(key, name);
            int hit = strlen(tail) >= 3 && strstr(name, tail) != NULL;
            if (pass == 0) {
                if (!hit && d < best)
                    best = d;
                continue;
            }
            int limit = (int)strlen(key) / 3 > 2 ? (int)strlen(key) / 3 : 2;
            if (!hit && !(d == best && d <= limit))
                continue;
            int w = snprintf(out + n, cap - n, "%s%s", n ? " or " : "", name);
            if (w < 0 || (size_t)w >= cap - n) {
                out[n] = 0;
                return;
            }
            n += (size_t)w;
        }
    }
}

int cli_whatif_check(const cli_whatif *w)
{
    for (int i = 0; i < w->n_sets; i++) {
        /* key i against the earlier ones, then key i known: the first
         * bad --set is the one named */
        if (cli_sets_once(w->sets, i + 1))
            return 2;
        if (tpu_param_find(w->keys[i]))
            continue;
        if (strstr(w->keys[i], "cores_per_chip") ||
            strstr(w->keys[i], "cores"))
            return cli_error(2, "--set %s: unknown parameter: a chip's 2 "
                                "cores are fixed (TPU v2 and v3); for more "
                                "compute per chip set mxus_per_core, "
                                "mxu.rows/cols or clock_hz (every key: "
                                "tpuemu run --help)",
                             w->keys[i]);
        char near[256];
        close_keys(w->keys[i], near, sizeof near);
        if (near[0])
            return cli_error(2, "--set %s: unknown parameter; did you mean "
                                "%s? (every key with its range: tpuemu run "
                                "--help)",
                             w->keys[i], near);
        size_t need = 1;
        for (size_t k = 0; tpu_param_key(k); k++)
            need += strlen(tpu_param_key(k)->key) + 2;
        /* The keys by name on the one error line; --help adds units and
         * sources. */
        char *list = malloc(need);
        if (!list)
            return cli_error(4, "out of host memory");
        list[0] = 0;
        for (size_t k = 0; tpu_param_key(k); k++) {
            if (k)
                strcat(list, ", ");
            strcat(list, tpu_param_key(k)->key);
        }
        int rc = cli_error(2, "--set %s: unknown parameter (known: %s)",
                           w->keys[i], list);
        free(list);
        return rc;
    }
    return 0;
}

/* The first input's per-example shape ("224x224x3") and its dimensions'
 * names in split order ("N, H, W, C"). */
static void input_words(const glayer *in, char *shape, size_t scap,
                        char *names, size_t ncap)
{
    static const char *const sp2[] = {"H", "W"}, *const sp3[] = {"D", "H",
                                                                "W"};
    size_t k = 0, j;
    shape[0] = 0;
    for (int d = 0; d < in->out.nsp && k < scap; d++)
        k += (size_t)snprintf(shape + k, scap - k, "%lldx",
                              (long long)in->out.sp[d]);
    if (k < scap)
        snprintf(shape + k, scap - k, "%lld", (long long)in->out.c);
    j = (size_t)snprintf(names, ncap, "N, ");
    for (int d = 0; d < in->out.nsp && j < ncap; d++)
        j += (size_t)snprintf(names + j, ncap - j, "%s, ",
                              in->out.nsp == 3 ? sp3[d] : sp2[d]);
    if (j < ncap)
        snprintf(names + j, ncap - j, "C");
}

/* --partition: the first input's input_partition_dims, checked in the
 * option's words; num_cores_per_replica becomes their product.  The
 * other inputs keep the trace's choice: a replicated one stays whole, one
 * split like the first follows the new split (when it has the first's
 * spatial rank; another rank cannot be split like it and stays whole). */
static int apply_partition(const cli_whatif *w, graph *g)
{
    const glayer *in = &g->layers[0];
    int nsp = in->out.nsp, rank = 2 + nsp;
    char q[300], shape[96], names[32];
    cli_shown(q, sizeof q, w->partition);
    input_words(in, shape, sizeof shape, names, sizeof names);
    if (w->pdims_n != rank)
        return cli_error(2, "--partition %s: the first input '%s' is %s "
                            "per example, so its split has %d factors (%s), "
                            "not %d",
                         q, in->name, shape, rank, names, w->pdims_n);
    if (w->pdims[0] != 1 || w->pdims[rank - 1] != 1)
        return cli_error(2, "--partition %s: only spatial dimensions are "
                            "split (the replicas share N; C is never "
                            "split): the first and last factors must be 1",
                         q);
    int64_t prod = 1;
    for (int d = 0; d < rank; d++)
        prod *= w->pdims[d];
    for (int k = 0; k < g->n_inputs; k++) {
        const glayer *I = &g->layers[k];
        if (k > 0 && (I->whole || I->out.nsp != nsp))
            continue;
        char is[96], in_names[32];
        input_words(I, is, sizeof is, in_names, sizeof in_names);
        for (int d = 0; d < nsp; d++)
            if (w->pdims[d + 1] > I->out.sp[d])
                return cli_error(
                    2, "--partition %s: splits %s of input '%s' (%s per "
                       "example) %d ways, but it is only %lld long",
                    q, nsp == 3 ? (d == 0 ? "D" : d == 1 ? "H" : "W")
                                : (d == 0 ? "H" : "W"),
                    I->name, is, w->pdims[d + 1], (long long)I->out.sp[d]);
    }
    const char *sname = w->system ? w->system : g->system;
    const tpu_system *sys = tpu_system_find(sname);
    if (sys && (prod > sys->cores || sys->cores % prod != 0))
        return cli_error(2, "--partition %s: %lld cores per replica do not "
                            "divide the %d cores of %s",
                         q, (long long)prod, sys->cores, sys->name);
    memcpy(g->pdims, w->pdims, sizeof(int) * (size_t)rank);
    g->pdims_rank = rank;
    g->cores_per_replica = (int)prod;
    g->pdims_override = 1;
    g->layers[0].whole = 0;
    for (int k = 1; k < g->n_inputs; k++)
        if (g->layers[k].out.nsp != nsp)
            g->layers[k].whole = 1;
    return 0;
}

int cli_whatif_apply(const cli_whatif *w, graph *g, const char *path,
                     sim_opts *o)
{
    if (w->optimizer >= 0 && w->optimizer != (int)g->optimizer) {
        /* the option names the class alone: its defaults (rmsprop
         * without momentum) */
        g->optimizer = (graph_optimizer)w->optimizer;
        g->opt_momentum = 0;
    }
    if (w->partition && g->n_inputs > 0) {
        int rc = apply_partition(w, g);
        if (rc)
            return rc;
    }
    if (w->freeze) {
        tpu_error err = {0};
        if (graph_freeze(g, w->freeze, path, &err))
            return cli_fail(&err);
    }
    o->system = w->system;
    o->global_batch = w->batch;
    o->n_sets = w->n_sets;
    o->set_keys = w->keys;
    o->set_values = w->vals;
    return 0;
}

/* Words of text from column col on, lines broken before column `width`,
 * continuation lines indented to column `indent`. */
static void put_wrapped(FILE *f, const char *text, int col, int indent,
                        int width)
{
    const char *w = text;
    while (*w) {
        while (*w == ' ')
            w++;
        int n = 0;
        while (w[n] && w[n] != ' ')
            n++;
        if (!n)
            break;
        if (col > indent && col + 1 + n > width) {
            fprintf(f, "\n%*s", indent, "");
            col = indent;
        } else if (col > indent) {
            fputc(' ', f);
            col++;
        }
        fprintf(f, "%.*s", n, w);
        col += n;
        w += n;
    }
    fputc('\n', f);
}

void cli_whatif_usage(FILE *f)
{
    fputs("  --system NAME   slice (v2-2, v2-8 ... v2-512, v3-2, v3-8 ... "
          "v3-2048)\n"
          "  --batch N       global batch (overrides the trace's)\n"
          "  --freeze LIST   freeze layers' weights as \"trainable\": false "
          "would:\n"
          "                  comma-separated names, NAME* for a prefix "
          "('conv1,res2*');\n"
          "                  none: every layer trains\n"
          "  --optimizer NAME the update at the end of a training step, "
          "overriding run.optimizer:\n"
          "                  sgd, momentum (the default), adam, rmsprop, "
          "lars (docs/TRACE.md)\n"
          "  --partition N,H,W,C  split the first input as "
          "input_partition_dims would\n"
          "                  (1,4,2,1 or 1x4x2x1: H in 4, W in 2); "
          "num_cores_per_replica is their product\n"
          "  --set K=V       override one hardware parameter (repeatable, once "
          "per key, in any\n"
          "                  order); keys, accepted range and unit, and where "
          "the default comes from\n"
          "                  ([C] a published figure, [D] derived from "
          "published ones, [U] unconfirmed:\n"
          "                  no public figure, the what-ifs most worth "
          "trying):\n",
          f);
    /* Lines stay under 100 columns: the source wraps under itself. */
    enum { WIDTH = 99, INDENT = 4 };
    int kw = 0, rw = 0;
    char r[96];
    for (size_t i = 0; tpu_param_key(i); i++) {
        const tpu_param_info *k = tpu_param_key(i);
        tpu_param_range_text(k, r, sizeof r);
        int kl = (int)strlen(k->key);
        int rl = (int)(strlen(r) + 1 + strlen(k->unit));
        kw = kl > kw ? kl : kw;
        rw = rl > rw ? rl : rw;
    }
    for (size_t i = 0; tpu_param_key(i); i++) {
        const tpu_param_info *k = tpu_param_key(i);
        char ru[160];
        tpu_param_range_text(k, r, sizeof r);
        snprintf(ru, sizeof ru, "%s%s%s", r, *k->unit ? " " : "", k->unit);
        fprintf(f, "%*s%-*s %-*s ", INDENT, "", kw, k->key, rw, ru);
        int col = INDENT + kw + 1 + rw + 1;
        char src[1024];
        tpu_param_help_text(k, src, sizeof src);
        put_wrapped(f, src, col, col, WIDTH);
    }
    fputs("                  Rules between keys, checked once every --set is "
          "in (exit 2):\n",
          f);
    for (size_t i = 0; tpu_param_rule(i); i++) {
        fputs("                  - ", f);
        put_wrapped(f, tpu_param_rule(i), 20, 20, WIDTH);
    }
    fputs("                  Not keys: 2 cores per chip and the slice's torus "
          "(--system picks both);\n"
          "                  more compute per chip is mxus_per_core, "
          "mxu.rows/cols or clock_hz.\n",
          f);
}
