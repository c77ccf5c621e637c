/* tpuemu advise: which slice and which split for a trace or a Keras model
 * (the search is emu/cli/advise_search.c; docs/ADVISE.md). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "emu/cli/advise.h"
#include "emu/cli/cli.h"
#include "emu/cli/sweep/sweep.h"
#include "emu/imp/keras.h"
#include "emu/out/chart.h"
#include "emu/out/outfile.h"

static const char usage[] =
    "usage: tpuemu advise TRACE.json|MODEL [--slices LIST|all|v2|v3]\n"
    "                    [--max-chips N] [--batch N] [--max-cpr N]\n"
    "                    [--price USD] [--top N] [--jobs N] [--ranges N]\n"
    "                    [--csv FILE] [--png FILE] [--print-commands --out "
    "DIR]\n"
    "                    [--set KEY=VALUE ...] [--freeze LIST]\n"
    "                    [import options of a model: --input, --mode, --loss,\n"
    "                    --allow-identity, --system]\n"
    "\n"
    "Searches slices x splits of the first input's spatial dimensions (1-16\n"
    "cores per replica, more where a slice needs them to give every replica\n"
    "an example) at one global batch, simulates every candidate that fits,\n"
    "and ranks them by step time and by the price of 1M examples.\n"
    "\n"
    "  --slices LIST   slices to search, comma-separated (v3-8,v3-32), or\n"
    "                  all (default: every slice of the trace's generation;\n"
    "                  v2 or v3: every slice of that generation)\n"
    "  --max-chips N   leave out slices of more than N chips\n"
    "  --batch N       global batch (default the trace's)\n"
    "  --max-cpr N     most cores per replica on every slice (power of two,\n"
    "                  default 16)\n"
    "  --price USD     on-demand price of a chip-hour (default the listed\n"
    "                  price of the generation: tpuemu advise --help-prices)\n"
    "  --top N         rows of each table (default 15; 0: all)\n"
    "  --jobs N        simulations at a time (default the processors, <= 8)\n"
    "  --ranges N      the step range over the unconfirmed assumptions\n"
    "                  (docs/RANGES.md) of the first N rows of each table\n"
    "                  and the two best per chip (default 3; 0: none); a\n"
    "                  row whose range overlaps the first row's is marked\n"
    "                  \"not distinguishable\" with the --set that would\n"
    "                  put it first\n"
    "  --keep-splits N on a slice larger than the smallest that holds a\n"
    "                  replica, simulate only the N splits of each size\n"
    "                  fastest on that smallest slice (default 2; 0: all)\n"
    "  --csv FILE      every candidate that fits, fastest first\n"
    "  --png FILE      the Pareto fronts: step time against chips in FILE,\n"
    "                  price against step time in FILE-cost.png\n"
    "  --print-commands  one `tpuemu run` line per candidate that fits; the\n"
    "                  split's trace is written to DIR/traces (--out DIR)\n"
    "  --set, --freeze as for tpuemu run\n"
    "\n"
    "exit status: 0 some candidate fits, 3 none fits, 2 bad input or usage,\n"
    "4 out of host memory\n";

#define ADVISE_TOP_DEFAULT 15
/* Candidates of each table whose step range is computed (--ranges): each
 * range is 15-30 more simulations, so only the rows a user reads first,
 * and the two best per chip the closing line compares. */
#define ADVISE_RANGES_DEFAULT 3
#define ADVISE_RANGES_MAX 64
#define ADVISE_MAX_SLICES 32
#define ADVISE_MAX_SETS 64

int cli_import_take(keras_opts *o, char *allow, size_t cap, int argc,
                    char **argv, int *i);

typedef struct {
    const char *input, *slices, *csv, *png, *out, *freeze;
    int64_t batch, max_chips, max_cpr, top, jobs, keep, ranges;
    double price;
    int print_commands;
    int n_sets;
    const char *keys[ADVISE_MAX_SETS], *vals[ADVISE_MAX_SETS];
    char setbuf[ADVISE_MAX_SETS][256];
    keras_opts ko;
    char allow[1024];
    int model_opts; /* an import option was given */
} advise_args;

static int take_set(advise_args *a, const char *v)
{
    const char *eq = strchr(v, '=');
    if (!eq || eq == v || !eq[1])
        return cli_error(2, "--set %s: expected KEY=VALUE", v);
    if (a->n_sets == ADVISE_MAX_SETS)
        return cli_error(2, "--set: at most %d", ADVISE_MAX_SETS);
    if (strlen(v) >= sizeof a->setbuf[0])
        return cli_error(2, "--set: '%.40s...' is too long", v);
    char *b = a->setbuf[a->n_sets];
    snprintf(b, sizeof a->setbuf[0], "%s", v);
    b[eq - v] = 0;
    for (int i = 0; i < a->n_sets; i++)
        if (strcmp(a->keys[i], b) == 0)
            return cli_error(2, "--set %s: given twice (%s, then %s)", b,
                             a->vals[i], b + (eq - v) + 1);
    if (!tpu_param_find(b))
        return cli_error(2,
                         "--set %s: unknown parameter (see tpuemu run "
                         "--help for the list)",
                         b);
    a->keys[a->n_sets] = b;
    a->vals[a->n_sets++] = b + (eq - v) + 1;
    return 0;
}

/* One option at argv[*i]: 0 taken, 2 error printed, -1 not an option of
 * advise's own. */
static int take_own(advise_args *a, int argc, char **argv, int *i)
{
    const char *v = NULL;
    int r;
    struct {
        const char *name;
        const char **dst;
    } strs[] = {{"--slices", &a->slices},
                {"--csv", &a->csv},
                {"--png", &a->png},
                {"--out", &a->out},
                {"--freeze", &a->freeze}};
    for (size_t k = 0; k < sizeof strs / sizeof strs[0]; k++)
        if ((r = cli_take(argc, argv, i, strs[k].name, &v)) != 0) {
            if (r < 0)
                return 2;
            if (!*v)
                return cli_error(2, "%s: empty value", strs[k].name);
            *strs[k].dst = v;
            return 0;
        }
    struct {
        const char *name;
        int64_t *dst, lo, hi;
    } ints[] = {{"--batch", &a->batch, 1, GRAPH_DIM_MAX},
                {"--max-chips", &a->max_chips, 1, 1 << 20},
                {"--max-cpr", &a->max_cpr, 1, ADVISE_CPR_LIMIT},
                {"--top", &a->top, 0, 1 << 20},
                {"--jobs", &a->jobs, 1, 64},
                {"--keep-splits", &a->keep, 0, 1 << 20},
                {"--ranges", &a->ranges, 0, ADVISE_RANGES_MAX}};
    for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++)
        if ((r = cli_take(argc, argv, i, ints[k].name, &v)) != 0) {
            if (r < 0 ||
                cli_int(ints[k].name, v, ints[k].lo, ints[k].hi, ints[k].dst))
                return 2;
            if (ints[k].dst == &a->max_cpr && (a->max_cpr & (a->max_cpr - 1)))
                return cli_error(2,
                                 "--max-cpr %s: not a power of two "
                                 "(every slice has 2^k cores)",
                                 v);
            return 0;
        }
    if ((r = cli_take(argc, argv, i, "--price", &v)) != 0) {
        if (r < 0 || cli_double("--price", v, 1e-6, 1e6, &a->price))
            return 2;
        return 0;
    }
    if (strcmp(argv[*i], "--print-commands") == 0) {
        a->print_commands = 1;
        return 0;
    }
    if (strcmp(argv[*i], "--set") == 0 || strncmp(argv[*i], "--set=", 6) == 0) {
        const char *s = argv[*i][5] == '=' ? argv[*i] + 6 : NULL;
        if (!s) {
            if (*i + 1 >= argc)
                return cli_error(2, "--set: missing value");
            s = argv[++*i];
        }
        return take_set(a, s);
    }
    return -1;
}

static int parse_args(advise_args *a, int argc, char **argv, const char **path)
{
    memset(a, 0, sizeof *a);
    a->top = -1;
    a->keep = -1;
    a->ranges = -1;
    *path = NULL;
    for (int i = 1; i < argc; i++) {
        int r = take_own(a, argc, argv, &i);
        if (r >= 0) {
            if (r)
                return r;
            continue;
        }
        r = cli_import_take(&a->ko, a->allow, sizeof a->allow, argc, argv, &i);
        if (r < 0)
            return 2;
        if (r > 0) {
            a->model_opts = 1;
            continue;
        }
        if (argv[i][0] == '-' && argv[i][1])
            return cli_error(2,
                             "advise: unknown option '%s' (see tpuemu "
                             "advise --help)",
                             argv[i]);
        if (*path)
            return cli_error(2,
                             "advise: one trace or model, got '%s' and "
                             "'%s'",
                             *path, argv[i]);
        *path = argv[i];
    }
    if (!*path)
        return cli_error(2, "advise: no trace or model given (usage: tpuemu "
                            "advise TRACE.json|MODEL)");
    if (a->print_commands && !a->out)
        return cli_error(2, "--print-commands: the commands read each "
                            "split's trace, written under --out DIR: give "
                            "--out");
    if (a->out && !a->print_commands)
        return cli_error(2, "--out: only --print-commands writes there");
    if (a->top < 0)
        a->top = ADVISE_TOP_DEFAULT;
    if (a->keep < 0)
        a->keep = ADVISE_KEEP_SPLITS;
    if (a->ranges < 0)
        a->ranges = ADVISE_RANGES_DEFAULT;
    a->ko.batch = a->batch;
    return 0;
}

/* The slices --slices names (default: every slice of gen but the
 * one-chip v?-2, which Cloud TPU does not offer), at most max_chips
 * chips. */
static int pick_slices(const advise_args *a, int gen, const tpu_system **out,
                       int *n)
{
    *n = 0;
    const char *l = a->slices ? a->slices : "all";
    int want_gen = 0;
    if (strcmp(l, "all") == 0)
        want_gen = gen;
    else if (strcmp(l, "v2") == 0 || strcmp(l, "v3") == 0)
        want_gen = l[1] - '0';
    if (want_gen) {
        for (const tpu_system *t = tpu_systems(); t->name; t++)
            if (t->gen == want_gen && t->cores > 2 &&
                (!a->max_chips || t->cores / 2 <= a->max_chips))
                out[(*n)++] = t;
    } else {
        char buf[1024];
        if (strlen(l) >= sizeof buf)
            return cli_error(2, "--slices: list too long");
        snprintf(buf, sizeof buf, "%s", l);
        for (char *s = buf, *e; s; s = e) {
            e = strchr(s, ',');
            if (e)
                *e++ = 0;
            const tpu_system *t = tpu_system_find(s);
            char q[128];
            cli_shown(q, sizeof q, s);
            if (!t)
                return cli_error(2,
                                 "--slices: unknown slice '%s' (v2-8 ... "
                                 "v2-512, v3-8 ... v3-2048, all, v2, "
                                 "v3)",
                                 q);
            for (int k = 0; k < *n; k++)
                if (out[k] == t)
                    return cli_error(2, "--slices: %s given twice", q);
            if (*n == ADVISE_MAX_SLICES)
                return cli_error(2, "--slices: at most %d", ADVISE_MAX_SLICES);
            if (!a->max_chips || (t->cores + 1) / 2 <= a->max_chips)
                out[(*n)++] = t;
        }
    }
    if (*n == 0)
        return cli_error(2,
                         "--max-chips %lld: no slice of %s is that "
                         "small",
                         (long long)a->max_chips, l);
    return 0;
}

/* The trace (or the model's trace) as JSON and as a graph. */
static int load(advise_args *a, const char *path, cJSON **base, graph *g)
{
    tpu_error err = {0};
    cJSON *doc = NULL;
    char *raw = NULL, shown[1100];
    size_t raw_len = 0;
    memset(g, 0, sizeof *g);
    *base = NULL;
    if (keras_read(path, &doc, &raw, &raw_len, shown, (int)sizeof shown, &err))
        return cli_fail(&err);
    if (keras_is_trace(doc)) {
        free(raw);
        if (a->model_opts) {
            cJSON_Delete(doc);
            return cli_error(2,
                             "advise: %s is a trace: the import options "
                             "apply to model files",
                             path);
        }
        char *text = cJSON_PrintUnformatted(doc);
        tpu_status st =
            text ? graph_parse(g, text, strlen(text), path, &err)
                 : tpu_fail(&err, TPU_ERR_SYSTEM, "out of host memory");
        free(text);
        if (st) {
            cJSON_Delete(doc);
            return cli_fail(&err);
        }
        *base = doc;
        return 0;
    }
    free(raw);
    char *text = NULL, *notes = NULL;
    cJSON *trace = NULL;
    tpu_status st = keras_to_trace(doc, shown, &a->ko, &trace, &notes, &err);
    cJSON_Delete(doc);
    if (!st)
        st = keras_trace_text(trace, shown, &text, &err);
    if (!st)
        st = graph_parse(g, text, strlen(text), path, &err);
    free(text);
    for (char *l = notes; l && *l;) {
        char *nl = strchr(l, '\n');
        fprintf(stderr, "tpuemu: note: %.*s\n",
                (int)(nl ? nl - l : (long)strlen(l)), l);
        l = nl ? nl + 1 : l + strlen(l);
    }
    free(notes);
    if (st) {
        cJSON_Delete(trace);
        return cli_fail(&err);
    }
    *base = trace;
    return 0;
}

/* ---- ranking and tables --------------------------------------------- */

typedef struct {
    const advise_cand *c;
    int idx;
} row;

static int by_step(const void *a, const void *b)
{
    const advise_cand *x = ((const row *)a)->c, *y = ((const row *)b)->c;
    if (x->step_s != y->step_s)
        return x->step_s < y->step_s ? -1 : 1;
    if (x->chips != y->chips)
        return x->chips < y->chips ? -1 : 1;
    return ((const row *)a)->idx - ((const row *)b)->idx;
}

static int by_cost(const void *a, const void *b)
{
    const advise_cand *x = ((const row *)a)->c, *y = ((const row *)b)->c;
    if (x->usd_per_mex != y->usd_per_mex)
        return x->usd_per_mex < y->usd_per_mex ? -1 : 1;
    return by_step(a, b);
}

/* What a table ranks by: the step (every candidate has the global
 * batch), the price of 1M examples, or examples per second per chip. */
typedef enum { UNIT_STEP, UNIT_COST, UNIT_CHIP } rank_unit;

/* The work of one step in the unit's terms: its rate is work / step
 * (larger is better). */
static double unit_work(const advise_cand *c, rank_unit u)
{
    if (u == UNIT_COST)
        return c->usd_per_mex > 0 ? c->step_s / c->usd_per_mex : 0;
    if (u == UNIT_CHIP)
        return (double)c->global_batch / c->chips;
    return (double)c->global_batch;
}

/* Whether b could be ranked before a (the better) under the unconfirmed
 * assumptions: 0 told apart (or no range to tell), 1 not, with the --set
 * that reorders them in set ("" when no one key does). */
static int overlaps(const advise_cand *a, const advise_cand *b, rank_unit u,
                    char *set, size_t cap)
{
    set[0] = 0;
    if (!a->has_range || !b->has_range)
        return 0;
    double wa = unit_work(a, u), wb = unit_work(b, u);
    if (advise_distinguishable(wa / a->step_hi_s, wa / a->step_lo_s,
                               wb / b->step_hi_s, wb / b->step_lo_s))
        return 0;
    advise_ranged ra = {a->step_s, wa, a->range, a->n_range};
    advise_ranged rb = {b->step_s, wb, b->range, b->n_range};
    advise_reorder(&ra, &rb, b->sys->gen, set, cap);
    return 1;
}

static void print_table(const advise_result *res, const row *r, int n, int top,
                        rank_unit u, const char *title)
{
    int ranged = n > 0 && r[0].c->has_range;
    printf("\n%s\n", title);
    printf("%4s  %-8s %5s  %-10s %4s %9s  %10s %10s %10s %8s %10s%s\n", "#",
           "slice", "chips", "split", "cpr", "ex/repl", "step s", "ex/s",
           "ex/s/chip", "HBM GiB", "USD/1M ex",
           ranged ? "  step range s          vs #1" : "");
    for (int i = 0; i < n && (top == 0 || i < top); i++) {
        const advise_cand *c = r[i].c;
        printf("%4d  %-8s %5d  %-10s %4d %9lld  %10.4g %10.4g %10.4g %8.2f "
               "%10.2f",
               i + 1, c->sys->name, c->chips, res->split[c->split].label,
               c->cpr, (long long)c->per_replica, c->step_s, c->ex_per_s,
               c->ex_per_s_chip, c->hbm_need_bytes / (1024.0 * 1024 * 1024),
               c->usd_per_mex);
        if (ranged && c->has_range) {
            char rg[48], set[128];
            snprintf(rg, sizeof rg, "%.4g-%.4g", c->step_lo_s, c->step_hi_s);
            printf("  %-21s", rg);
            /* a row that could be the first under the unconfirmed
             * assumptions, and the one that would put it there */
            if (i > 0 && overlaps(r[0].c, c, u, set, sizeof set))
                printf(" not distinguishable%s%s",
                       set[0] ? ": --set " : " (no one assumption reorders "
                                             "them)",
                       set);
        }
        printf("\n");
    }
    if (top && n > top)
        printf("(%d more: --top 0 lists every one, --csv writes them)\n",
               n - top);
}

/* The best and the runner-up by examples per second per chip (NULL when
 * fewer). */
static void best_per_chip(const row *r, int n, const advise_cand **best,
                          const advise_cand **second)
{
    *best = *second = NULL;
    for (int i = 0; i < n; i++) {
        const advise_cand *c = r[i].c;
        if (!*best || c->ex_per_s_chip > (*best)->ex_per_s_chip) {
            *second = *best;
            *best = c;
        } else if (!*second || c->ex_per_s_chip > (*second)->ex_per_s_chip) {
            *second = c;
        }
    }
}

/* The step ranges of the first k rows of each table and of the two best
 * per chip (advise_range, one candidate after the other, each over the
 * processors); the count and time said on stdout.  0, or the exit status
 * with the error printed. */
static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int compute_ranges(const advise_opts *o, advise_result *res,
                          const row *fast, const row *cheap, int n, int k)
{
    if (k <= 0 || n == 0)
        return 0;
    const advise_cand *want[2 * ADVISE_RANGES_MAX + 2];
    int nw = 0;
    for (int i = 0; i < k && i < n && i < ADVISE_RANGES_MAX; i++) {
        want[nw++] = fast[i].c;
        want[nw++] = cheap[i].c;
    }
    best_per_chip(fast, n, &want[nw], &want[nw + 1]);
    nw += 2;
    double t0 = wall_s();
    int done = 0;
    for (int i = 0; i < nw; i++) {
        if (!want[i] || want[i]->has_range)
            continue;
        tpu_error err = {0};
        if (advise_range(o, res, &res->c[want[i] - res->c], &err))
            return cli_fail(&err);
        done++;
    }
    printf("step ranges over the unconfirmed assumptions: the first %d of "
           "each table and the two best per chip (%d candidates, %.1f s; "
           "--ranges N)\n",
           k < ADVISE_RANGES_MAX ? k : ADVISE_RANGES_MAX, done,
           wall_s() - t0);
    return 0;
}

/* ---- outputs -------------------------------------------------------- */

static void csv_field_split(FILE *f, const advise_split *sp)
{
    fprintf(f, "\"[");
    for (int k = 0; k < sp->rank; k++)
        fprintf(f, "%s%d", k ? "," : "", sp->pd[k]);
    fprintf(f, "]\"");
}

static tpu_status write_csv(outfile *of, const advise_result *res, const row *r,
                            int n)
{
    FILE *f = of->f;
    int ranged = 0; /* the range columns when some row has a range */
    for (int i = 0; i < n; i++)
        ranged |= r[i].c->has_range;
    fprintf(f,
            "rank,slice,chips,cores,input_partition_dims,"
            "cores_per_replica,replicas,global_batch,examples_per_replica,"
            "step_time_s,%sexamples_per_s,examples_per_s_per_chip,"
            "hbm_per_core_bytes,usd_per_chip_hour,usd_per_1m_examples\n",
            ranged ? "step_time_low_s,step_time_high_s," : "");
    for (int i = 0; i < n; i++) {
        const advise_cand *c = r[i].c;
        double price = c->ex_per_s > 0 ? c->usd_per_mex * c->ex_per_s /
                                             (1e6 / 3600.0 * c->chips)
                                       : 0;
        fprintf(f, "%d,%s,%d,%d,", i + 1, c->sys->name, c->chips,
                c->sys->cores);
        csv_field_split(f, &res->split[c->split]);
        fprintf(f, ",%d,%d,%lld,%lld,%.9g,", c->cpr, c->replicas,
                (long long)c->global_batch, (long long)c->per_replica,
                c->step_s);
        if (ranged && c->has_range)
            fprintf(f, "%.9g,%.9g,", c->step_lo_s, c->step_hi_s);
        else if (ranged)
            fprintf(f, ",,");
        fprintf(f, "%.9g,%.9g,%.0f,%.6g,%.6g\n", c->ex_per_s, c->ex_per_s_chip,
                c->hbm_need_bytes, price, c->usd_per_mex);
    }
    return TPU_OK;
}

/* The second chart's name: FILE.png -> FILE-cost.png. */
static void cost_png_name(const char *png, char *buf, size_t cap)
{
    size_t n = strlen(png);
    if (n > 4 && strcmp(png + n - 4, ".png") == 0)
        snprintf(buf, cap, "%.*s-cost.png", (int)(n - 4), png);
    else
        snprintf(buf, cap, "%s-cost.png", png);
}

/* The candidates no other beats on both x and y (ties kept once), sorted
 * by x. */
static int pareto(const double *x, const double *y, int n, double *fx,
                  double *fy)
{
    int m = 0;
    for (int i = 0; i < n; i++) {
        int dominated = 0;
        for (int j = 0; j < n && !dominated; j++)
            dominated = j != i && x[j] <= x[i] && y[j] <= y[i] &&
                        (x[j] < x[i] || y[j] < y[i] || j < i);
        if (!dominated) {
            int k = m++;
            while (k > 0 && fx[k - 1] > x[i]) {
                fx[k] = fx[k - 1];
                fy[k] = fy[k - 1];
                k--;
            }
            fx[k] = x[i];
            fy[k] = y[i];
        }
    }
    return m;
}

#define ADVISE_CHART_SERIES 11

/* Step time against chips: one line per cores-per-replica (the fastest
 * split of that size on each slice), and the Pareto front. */
static tpu_status chart_chips(outfile *of, const char *title, const row *r,
                              int n, double *buf, tpu_error *err)
{
    chart_series s[ADVISE_CHART_SERIES + 1];
    char names[ADVISE_CHART_SERIES + 1][48];
    int ns = 0;
    double *px = buf, *py = buf + n, *fx = buf + 2 * n, *fy = buf + 3 * n;
    double *sx = buf + 4 * n, *sy = buf + 5 * n;
    int used = 0;
    for (int cpr = 1; cpr <= ADVISE_CPR_LIMIT && ns < ADVISE_CHART_SERIES;
         cpr <<= 1) {
        int m = 0;
        /* rows are fastest first: the first of each chip count wins */
        for (int i = 0; i < n; i++) {
            if (r[i].c->cpr != cpr)
                continue;
            int seen = 0;
            for (int k = 0; k < m; k++)
                seen |= sx[used + k] == r[i].c->chips;
            if (seen)
                continue;
            int k = m++;
            while (k > 0 && sx[used + k - 1] > r[i].c->chips) {
                sx[used + k] = sx[used + k - 1];
                sy[used + k] = sy[used + k - 1];
                k--;
            }
            sx[used + k] = r[i].c->chips;
            sy[used + k] = r[i].c->step_s;
        }
        if (!m)
            continue;
        snprintf(names[ns], sizeof names[ns], "%d core%s per replica", cpr,
                 cpr == 1 ? "" : "s");
        s[ns] = (chart_series){names[ns], sx + used, sy + used, m};
        ns++;
        used += m;
    }
    for (int i = 0; i < n; i++) {
        px[i] = r[i].c->chips;
        py[i] = r[i].c->step_s;
    }
    int m = pareto(px, py, n, fx, fy);
    snprintf(names[ns], sizeof names[ns], "Pareto front");
    s[ns++] = (chart_series){names[ns - 1], fx, fy, m};
    return chart_lines_png_to(of, title, "chips", "step time (s)", s, ns, err);
}

/* Price of 1M examples against step time: one line per slice, and the
 * Pareto front. */
static tpu_status chart_cost(outfile *of, const char *title,
                             const advise_opts *o, const row *r, int n,
                             double *buf, tpu_error *err)
{
    chart_series s[ADVISE_CHART_SERIES + 1];
    int ns = 0;
    double *px = buf, *py = buf + n, *fx = buf + 2 * n, *fy = buf + 3 * n;
    double *sx = buf + 4 * n, *sy = buf + 5 * n;
    int used = 0;
    for (int si = 0; si < o->nslices && ns < ADVISE_CHART_SERIES; si++) {
        int m = 0;
        /* rows are fastest first: x ascending */
        for (int i = 0; i < n; i++)
            if (r[i].c->sys == o->slices[si]) {
                sx[used + m] = r[i].c->step_s;
                sy[used + m] = r[i].c->usd_per_mex;
                m++;
            }
        if (!m)
            continue;
        s[ns++] = (chart_series){o->slices[si]->name, sx + used, sy + used, m};
        used += m;
    }
    for (int i = 0; i < n; i++) {
        px[i] = r[i].c->step_s;
        py[i] = r[i].c->usd_per_mex;
    }
    int m = pareto(px, py, n, fx, fy);
    s[ns++] = (chart_series){"Pareto front", fx, fy, m};
    return chart_lines_png_to(of, title, "step time (s)", "USD per 1M examples",
                              s, ns, err);
}

/* --csv and --png, all or nothing. */
static int write_outputs(const advise_args *a, const advise_opts *o,
                         const advise_result *res, const row *fast, int n,
                         const char *name)
{
    outfile of[3];
    int nof = 0;
    tpu_error err = {0};
    tpu_status st = TPU_OK;
    memset(of, 0, sizeof of);
    double *buf = calloc((size_t)(6 * n + 6), sizeof *buf);
    if (!buf)
        return cli_error(4, "out of host memory");
    char title[256], cost_name[1100];
    snprintf(title, sizeof title, "%.120s at global batch %lld", name,
             (long long)(o->global_batch));
    if (a->csv && !(st = outfile_open(&of[nof], a->csv, &err))) {
        nof++;
        st = write_csv(&of[nof - 1], res, fast, n);
        if (!st)
            st = outfile_close(&of[nof - 1], &err);
    }
    if (!st && a->png && !(st = outfile_open(&of[nof], a->png, &err))) {
        nof++;
        st = chart_chips(&of[nof - 1], title, fast, n, buf, &err);
        cost_png_name(a->png, cost_name, sizeof cost_name);
        if (!st && !(st = outfile_open(&of[nof], cost_name, &err))) {
            nof++;
            st = chart_cost(&of[nof - 1], title, o, fast, n, buf, &err);
        }
    }
    free(buf);
    if (!st)
        st = outfile_commit_all(of, nof, &err);
    else
        outfile_discard_all(of, nof);
    return st ? cli_fail(&err) : 0;
}

/* dir and its missing parents: 0, or 2 with the error printed. */
static int make_dirs(const char *dir)
{
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s", dir);
    for (char *p = tmp + 1;; p++) {
        int end = *p == 0;
        if (*p == '/' || end) {
            *p = 0;
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
                return cli_error(2, "--out: cannot make %s: %s", tmp,
                                 strerror(errno));
            if (end)
                return 0;
            *p = '/';
        }
    }
}

/* --print-commands: each split's trace under OUT/traces, then one `run`
 * line per candidate that fits, fastest first. */
static int print_commands(const advise_args *a, const advise_opts *o,
                          const advise_result *res, const row *fast, int n,
                          const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t stem = strlen(base);
    if (stem > 5 && strcmp(base + stem - 5, ".json") == 0)
        stem -= 5;
    if (stem > 200)
        stem = 200;
    char *written = calloc((size_t)res->nsplits + 1, 1);
    if (!written)
        return cli_error(4, "out of host memory");
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        const advise_cand *c = fast[i].c;
        const advise_split *sp = &res->split[c->split];
        char tp[1400];
        snprintf(tp, sizeof tp, "%.900s/traces/%.*s-pd%s.json", a->out,
                 (int)stem, base, sp->label);
        if (!written[c->split]) {
            written[c->split] = 1;
            cJSON *d = cJSON_CreateArray();
            for (int k = 0; d && k < sp->rank; k++)
                cJSON_AddItemToArray(d, cJSON_CreateNumber(sp->pd[k]));
            char why[64];
            cJSON *full =
                d ? sweep_pd_for(o->base, o->g, d, sp->rank, why, sizeof why)
                  : NULL;
            cJSON *doc =
                full ? sweep_variant_doc(o->base, full, sp->cpr) : NULL;
            char *text = doc ? cli_json_text(doc) : NULL;
            cJSON_Delete(d);
            cJSON_Delete(full);
            cJSON_Delete(doc);
            if (!text) {
                rc = cli_error(4, "out of host memory");
                break;
            }
            char dir[1100];
            snprintf(dir, sizeof dir, "%.900s/traces", a->out);
            if (make_dirs(dir)) {
                free(text);
                rc = 2;
                break;
            }
            tpu_error err = {0};
            if (outfile_write(tp, text, strlen(text), &err))
                rc = cli_fail(&err);
            free(text);
            if (rc)
                break;
        }
        printf("tpuemu run %s --system %s --batch %lld", tp, c->sys->name,
               (long long)c->global_batch);
        for (int k = 0; k < o->n_sets; k++)
            printf(" --set %s=%s", o->set_keys[k], o->set_values[k]);
        if (o->freeze)
            printf(" --freeze '%s'", o->freeze);
        printf("\n");
    }
    free(written);
    return rc;
}

/* ---- the command ---------------------------------------------------- */

int cli_advise(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        fputs(usage, stdout);
        return 0;
    }
    advise_args a;
    const char *path;
    int code = parse_args(&a, argc, argv, &path);
    if (code)
        return code;
    tpu_error err = {0};
    const char *outs[2] = {a.csv, a.png};
    for (int i = 0; i < 2; i++)
        if (outs[i] && outfile_check(outs[i], &err))
            return cli_fail(&err);
    char cost_name[1100];
    if (a.png) {
        cost_png_name(a.png, cost_name, sizeof cost_name);
        if (outfile_check(cost_name, &err))
            return cli_fail(&err);
    }
    cJSON *base;
    graph g;
    if ((code = load(&a, path, &base, &g)) != 0)
        return code;
    const tpu_system *own = tpu_system_find(g.system);
    const tpu_system *slices[ADVISE_MAX_SLICES];
    int ns = 0;
    advise_opts o;
    memset(&o, 0, sizeof o);
    code = pick_slices(&a, own ? own->gen : 3, slices, &ns);
    if (!code && a.freeze) {
        tpu_status st = graph_freeze_check(&g, a.freeze, path, &err);
        if (st)
            code = cli_fail(&err);
    }
    if (!code) {
        /* every --set value as `run` takes it, on each generation */
        for (int i = 0; i < ns && !code; i++) {
            tpu_params p;
            tpu_params_default(&p, slices[i]->gen);
            for (int k = 0; k < a.n_sets && !code; k++)
                if (tpu_params_set(&p, a.keys[k], a.vals[k], &err))
                    code = cli_fail(&err);
            if (!code && tpu_params_check(&p, &err))
                code = cli_fail(&err);
        }
    }
    advise_result res;
    memset(&res, 0, sizeof res);
    if (!code) {
        o.path = path;
        o.base = base;
        o.g = &g;
        o.slices = slices;
        o.nslices = ns;
        o.global_batch = a.batch ? a.batch : g.global_batch;
        o.max_cpr = (int)a.max_cpr;
        o.freeze = a.freeze;
        o.n_sets = a.n_sets;
        o.set_keys = a.keys;
        o.set_values = a.vals;
        o.jobs = (int)a.jobs;
        o.usd_chip_hour = a.price;
        o.keep_splits = (int)a.keep;
        if (advise_search(&o, &res, &err))
            code = cli_fail(&err);
    }
    row *fast = NULL, *cheap = NULL;
    int n = 0;
    if (!code) {
        fast = malloc((size_t)(res.n + 1) * sizeof *fast);
        cheap = malloc((size_t)(res.n + 1) * sizeof *cheap);
        if (!fast || !cheap)
            code = cli_error(4, "out of host memory");
    }
    if (!code) {
        int nofit = 0, invalid = 0, failed = 0, nsplits = 0, ranked = 0;
        for (int i = 0; i < res.n; i++) {
            const advise_cand *c = &res.c[i];
            if (c->state == ADV_FITS)
                fast[n++] = (row){c, i};
            nofit += c->state == ADV_NOFIT;
            invalid += c->state == ADV_INVALID;
            failed += c->state == ADV_FAILED;
            ranked += c->state == ADV_SKIPPED && c->pruned;
        }
        for (int k = 0; k < res.nsplits; k++)
            nsplits += res.split[k].ok;
        memcpy(cheap, fast, (size_t)n * sizeof *fast);
        qsort(fast, (size_t)n, sizeof *fast, by_step);
        qsort(cheap, (size_t)n, sizeof *cheap, by_cost);
        printf("%s (%s), global batch %lld: %d slice%s x %d split%s: %d "
               "candidates; %d fit, %d do not fit in HBM, %d refused "
               "(the batch does not split over the replicas)%s%.0d%s\n",
               g.name, path, (long long)o.global_batch, ns, ns == 1 ? "" : "s",
               nsplits, nsplits == 1 ? "" : "s", res.n, n, nofit, invalid,
               failed ? ", " : "", failed, failed ? " failed" : "");
        if (ranked)
            printf("%d slower splits not simulated on the larger slices: "
                   "ranked on the smallest slice that holds a replica "
                   "(--keep-splits %lld; 0 simulates every one)\n",
                   ranked, (long long)a.keep);
        printf("searched in %.1f s\n", res.elapsed_s);
        double price = a.price > 0 ? a.price : advise_price(slices[0]->gen);
        const tpu_price *tp = tpu_chip_price(slices[0]->gen);
        if (a.price > 0)
            printf("price: $%.4g per chip-hour (--price)\n", price);
        else if (tp)
            printf("price: $%.4g per chip-hour (%s)\n", price, tp->source);
        if (n == 0) {
            printf("nothing fits: try more chips, a smaller --batch, or "
                   "--max-cpr %d\n",
                   (a.max_cpr ? (int)a.max_cpr : ADVISE_MAX_CPR) * 2);
            code = 3;
        }
    }
    if (!code) {
        code = compute_ranges(&o, &res, fast, cheap, n, (int)a.ranges);
    }
    if (!code) {
        print_table(&res, fast, n, (int)a.top, UNIT_STEP, "fastest first:");
        print_table(&res, cheap, n, (int)a.top, UNIT_COST,
                    "cheapest first (USD per 1M examples):");
        const advise_cand *best, *second;
        best_per_chip(fast, n, &best, &second);
        printf("\nbest per chip: %s with input_partition_dims %s (%d "
               "core%s per replica): %.4g examples/s per chip, step %.4g s, "
               "$%.2f per 1M examples",
               best->sys->name, res.split[best->split].label, best->cpr,
               best->cpr == 1 ? "" : "s", best->ex_per_s_chip, best->step_s,
               best->usd_per_mex);
        char set[128];
        if (second && best->has_range && second->has_range) {
            int ov = overlaps(best, second, UNIT_CHIP, set, sizeof set);
            printf("; %s from the runner-up (%s %s, %.4g examples/s per "
                   "chip)%s%s",
                   ov ? "not distinguishable" : "distinguishable",
                   second->sys->name, res.split[second->split].label,
                   second->ex_per_s_chip, set[0] ? ": --set " : "",
                   set[0] ? set : "");
        }
        printf("\n");
        code = write_outputs(&a, &o, &res, fast, n, g.name);
        if (!code && a.print_commands)
            code = print_commands(&a, &o, &res, fast, n, path);
    }
    free(fast);
    free(cheap);
    advise_result_free(&res);
    cJSON_Delete(base);
    graph_free(&g);
    return code;
}
