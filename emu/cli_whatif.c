/* The what-if options shared by every command that simulates a trace
 * (run, lower, view): one parser, one set of messages, one help text, so
 * `view` and `lower` answer the same questions `run` does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/cli.h"
#include "emu/params.h"

void cli_whatif_init(cli_whatif *w)
{
    memset(w, 0, sizeof *w);
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

int cli_whatif_check(const cli_whatif *w)
{
    for (int i = 0; i < w->n_sets; i++) {
        /* key i against the earlier ones, then key i known: the first
         * bad --set is the one named */
        if (cli_sets_once(w->sets, i + 1))
            return 2;
        if (tpu_param_find(w->keys[i]))
            continue;
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

int cli_whatif_apply(const cli_whatif *w, graph *g, const char *path,
                     sim_opts *o)
{
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
          "  --set K=V       override one hardware parameter (repeatable, once "
          "per key, in any\n"
          "                  order); keys, accepted range and unit, and where "
          "the default comes from:\n",
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
        put_wrapped(f, k->source, col, col, WIDTH);
    }
    fputs("                  Rules between keys, checked once every --set is "
          "in (exit 2):\n",
          f);
    for (size_t i = 0; tpu_param_rule(i); i++) {
        fputs("                  - ", f);
        put_wrapped(f, tpu_param_rule(i), 20, 20, WIDTH);
    }
}
