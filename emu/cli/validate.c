/* tpuemu validate — predicted against published step times
 * (docs/SPEC.md).
 *
 * Runs every .json file in traces/reference (sorted by file name, so the table
 * and the --report summary are the same on every machine) through
 * graph_load + sim_run with the trace's own system and batch, and prints
 * each row's predicted and published step time and signed error; then the
 * error per family, the same-code ratios (the part of a prediction that
 * does not depend on getting one model's absolute speed right: how a
 * model's per-core rate changes with the per-core batch or the split),
 * whether the predictions order the traces as the published times do;
 * the last line is the mean absolute error over the traces that have a
 * published figure.  --fit is the tool for a calibrated parameter: one
 * value for the whole set, judged by leaving each family out.
 *
 * validate reports, it does not gate: a prediction far from its published
 * figure is a finding for docs/VALIDATION.md, not a failed build (the CI
 * gate against unintended change is `tpuemu check`, make check-perf).  A
 * trace that does not fit is a row saying so, with the figures, and is
 * left out of the mean and the pairs (a step time the memory model says
 * cannot run is no prediction).  The exit status is 0 when every trace
 * ran; 2 when any trace was unreadable; else that of the first failure
 * (3 does not fit, 4 system error); the other traces still run and are
 * listed.
 *
 * Without --dir, traces/reference is looked up in the working directory,
 * then next to the binary and up to two directories above it (an
 * installed or out-of-tree build run from elsewhere). */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "emu/cli/cli.h"
#include "emu/cli/pool.h"
#include "emu/cost.h"
#include "emu/graph.h"
#include "emu/params.h"
#include "emu/range.h"
#include "emu/out/outfile.h"
#include "emu/report.h"
#include "emu/sim.h"
#include "interconnect/ici.h"

#define VALIDATE_MAX_FILES 4096
#define VALIDATE_MAX_SETS 32
#define VALIDATE_MAX_FIT 64

static const char usage_text[] =
    "usage: tpuemu validate [--report R.json] [--dir DIR] [--sources]\n"
    "                       [--no-range] [--jobs|-j N]\n"
    "                       [--set KEY=VALUE ...] [--fit KEY=V1,V2,...]\n"
    "\n"
    "Runs every DIR/*.json (default traces/reference, sorted by name) with\n"
    "its own system and batch and prints, for each, the predicted and the\n"
    "published step time and the error in percent (--sources: where each\n"
    "published figure comes from, under its row); then the mean absolute\n"
    "error of each family (reference.family), the same-code ratios (a row\n"
    "against its reference.baseline: work per core per second, predicted\n"
    "and published), how many pairs the predictions order as the published\n"
    "times do (pairs within 5% order nothing), naming any the wrong way\n"
    "round, and how many published figures fall inside the range of their\n"
    "prediction over the unconfirmed assumptions (docs/RANGES.md; each row\n"
    "shows its range; --no-range skips them) with the ranges' median\n"
    "half-width; the last line is the mean absolute error over every row.\n"
    "--report writes all of it as JSON (tpuemu-validation/1).\n"
    "\n"
    "--set KEY=VALUE runs every trace under a what-if (as run --set).\n"
    "--fit KEY=V1,V2,... runs every trace at each value and prints the mean\n"
    "absolute error per value, over all rows and per family, then leaves\n"
    "each family out in turn: the value the other families choose and the\n"
    "error it gives on the family left out (leave-one-family-out\n"
    "cross-validation, docs/VALIDATION.md); --report writes tpuemu-fit/1.\n"
    "List the prior first: where the other families cannot tell the values\n"
    "apart, the first stands for them (and the line says so).\n"
    "\n"
    "--jobs N (-j N) runs the traces in at most N worker processes\n"
    "(default: one per CPU; 1: one after another in this process, each\n"
    "range too); the table, --report and exit status are the same byte\n"
    "for byte whatever N.\n"
    "\n"
    "Without --dir, traces/reference is looked for in the current\n"
    "directory, then next to the tpuemu binary and up to two directories\n"
    "above it.\n"
    "\n"
    "A trace that does not fit the simulated HBM is a row saying so (what\n"
    "it needs, what the core has) and is left out of the mean and the\n"
    "pairs.  validate reports, it does not gate: exit 0 when every trace\n"
    "ran; otherwise 2 if any trace was bad input, else the status of the\n"
    "first failure (3 does not fit, 4 out of host memory); the other\n"
    "traces are still run.  A --report path that cannot be written\n"
    "(missing directory, a directory, device or FIFO, one of the traces)\n"
    "is refused before any trace runs (exit 2).\n";

/* A trace with both a prediction and a published step time, and what
 * the family summaries and the same-code ratios need of it. */
typedef struct {
    char name[192]; /* graph name (128) and system (32), "%s (%s)" */
    char graph[128];
    char family[32];
    char baseline[128];
    double pred, pub;
    double work; /* forward MACs per core over the step: global batch x
                    MACs per example / cores (the ratios' numerator) */
    int has_range;
    double lo, hi; /* the step's range over the unconfirmed assumptions */
} vrow;

/* Published step times closer than this factor order nothing: the five
 * runs of one MLPerf configuration spread by 1-2% (up to 15% between
 * runs on the larger slices), so ResNet-50 at 128 per core on v3-32 and
 * v3-128 (131.1 and 130.9 ms) are the same step, not a trend. */
#define VALIDATE_ORDER_GAP 1.05

/* Whether the predictions order every pair as the published times do:
 * prints the count and each pair the wrong way round, and records them
 * in the report.  Pairs within VALIDATE_ORDER_GAP order nothing. */
static void check_order(const vrow *v, int nv, cJSON *doc)
{
    int pairs = 0, same = 0;
    cJSON *wrong = cJSON_CreateArray();
    for (int i = 0; i < nv; i++)
        for (int j = 0; j < nv; j++) {
            if (!(v[i].pub * VALIDATE_ORDER_GAP < v[j].pub))
                continue;
            pairs++;
            if (v[i].pred < v[j].pred) {
                same++;
                continue;
            }
            printf("order: %s is published faster than %s (%.4g < %.4g s) "
                   "but predicted not faster (%.4g >= %.4g s)\n",
                   v[i].name, v[j].name, v[i].pub, v[j].pub, v[i].pred,
                   v[j].pred);
            cJSON *w = cJSON_CreateObject();
            cJSON_AddStringToObject(w, "published_faster", v[i].name);
            cJSON_AddStringToObject(w, "published_slower", v[j].name);
            cJSON_AddItemToArray(wrong, w);
        }
    if (pairs > 0)
        printf("order: the predictions order %d of %d pairs of traces as the "
               "published step times do\n",
               same, pairs);
    cJSON_AddNumberToObject(doc, "pairs", pairs);
    cJSON_AddNumberToObject(doc, "pairs_in_published_order", same);
    cJSON_AddItemToObject(doc, "pairs_out_of_order", wrong);
}

/* The mean absolute error of each family, in the order families first
 * appear (rows without a family form the family "-"). */
static void family_errors(const vrow *v, int nv, cJSON *doc)
{
    cJSON *fam = cJSON_AddArrayToObject(doc, "families");
    for (int i = 0; i < nv; i++) {
        int seen = 0;
        for (int j = 0; j < i && !seen; j++)
            seen = !strcmp(v[j].family, v[i].family);
        if (seen)
            continue;
        double sum = 0;
        int n = 0;
        for (int j = i; j < nv; j++)
            if (!strcmp(v[j].family, v[i].family)) {
                sum += fabs(100 * (v[j].pred - v[j].pub) / v[j].pub);
                n++;
            }
        const char *name = v[i].family[0] ? v[i].family : "-";
        printf("family %-10s %2d row%s, mean absolute error %.1f%%\n", name, n,
               n == 1 ? " " : "s", sum / n);
        cJSON *f = cJSON_CreateObject();
        cJSON_AddStringToObject(f, "family", name);
        cJSON_AddNumberToObject(f, "rows", n);
        cJSON_AddNumberToObject(f, "mean_abs_error_pct", sum / n);
        cJSON_AddItemToArray(fam, f);
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* How many published figures fall inside their predicted range, and the
 * median half-width of the ranges ((high - low) / 2 over the predicted
 * step): what a user's "0.32 s (0.28-0.41)" is worth. */
static void range_summary(const vrow *v, int nv, cJSON *doc)
{
    int n = 0, inside = 0;
    double *w = malloc((size_t)(nv > 0 ? nv : 1) * sizeof *w);
    if (!w)
        return;
    for (int i = 0; i < nv; i++) {
        if (!v[i].has_range)
            continue;
        inside += v[i].pub >= v[i].lo && v[i].pub <= v[i].hi;
        w[n++] = 100 * (v[i].hi - v[i].lo) / 2 / v[i].pred;
    }
    if (n > 0) {
        qsort(w, (size_t)n, sizeof *w, cmp_double);
        double med = n % 2 ? w[n / 2] : (w[n / 2 - 1] + w[n / 2]) / 2;
        printf("ranges: %d of %d published figures inside the range over the "
               "unconfirmed assumptions; median half-width +/-%.1f%%\n",
               inside, n, med);
        cJSON_AddNumberToObject(doc, "published_in_range", inside);
        cJSON_AddNumberToObject(doc, "rows_with_range", n);
        cJSON_AddNumberToObject(doc, "median_range_half_width_pct", med);
    }
    free(w);
}

/* Same-code pairs: a row whose reference names a baseline is compared with
 * it by work per core per second (forward MACs x examples / cores / step),
 * which is the speed-up per core of one per-core batch or partitioning
 * over another, and needs no model of the published run.  A baseline
 * that names no row that ran is said so. */
static void same_code_ratios(const vrow *v, int nv, cJSON *doc)
{
    cJSON *arr = cJSON_AddArrayToObject(doc, "same_code_ratios");
    int head = 0;
    for (int i = 0; i < nv; i++) {
        if (!v[i].baseline[0])
            continue;
        if (!head++)
            printf("%-58s %9s %9s %8s\n",
                   "same-code ratio (work per core per second)", "predicted",
                   "published", "error %");
        int b = -1;
        for (int j = 0; j < nv && b < 0; j++)
            if (j != i && !strcmp(v[j].graph, v[i].baseline))
                b = j;
        if (b < 0) {
            printf("ratio: %s: its baseline '%s' is no trace that ran with a "
                   "published figure\n",
                   v[i].name, v[i].baseline);
            continue;
        }
        double rp = (v[i].work / v[i].pred) / (v[b].work / v[b].pred);
        double rq = (v[i].work / v[i].pub) / (v[b].work / v[b].pub);
        double e = 100 * (rp - rq) / rq;
        char pair[300];
        snprintf(pair, sizeof pair, "%s / %s", v[i].graph, v[b].graph);
        printf("ratio ");
        cli_put_cell(pair, 52);
        printf(" %9.3f %9.3f %+8.1f\n", rp, rq, e);
        cJSON *r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "trace", v[i].name);
        cJSON_AddStringToObject(r, "baseline", v[b].name);
        cJSON_AddNumberToObject(r, "predicted", rp);
        cJSON_AddNumberToObject(r, "published", rq);
        cJSON_AddNumberToObject(r, "error_pct", e);
        cJSON_AddItemToArray(arr, r);
    }
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The *.json names in dir, sorted; NULL with *n = -1 and *errnum set
 * when unreadable. */
static char **list_json(const char *dir, int *n, int *errnum)
{
    *n = -1;
    DIR *d = opendir(dir);
    if (!d) {
        *errnum = errno;
        return NULL;
    }
    char **names = NULL;
    int count = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) && count < VALIDATE_MAX_FILES) {
        size_t len = strlen(e->d_name);
        if (len < 6 || e->d_name[0] == '.' ||
            strcmp(e->d_name + len - 5, ".json") != 0)
            continue;
        if (count == cap) {
            cap = cap ? 2 * cap : 16;
            char **q = realloc(names, (size_t)cap * sizeof *q);
            if (!q)
                break;
            names = q;
        }
        names[count] = malloc(len + 1);
        if (!names[count])
            break;
        memcpy(names[count++], e->d_name, len + 1);
    }
    closedir(d);
    if (count > 1)
        qsort(names, (size_t)count, sizeof *names, cmp_str);
    *n = count;
    return names;
}

#define VALIDATE_DEFAULT_DIR "traces/reference"

/* Exit status over the rows: bad input (2) wins, otherwise the first
 * failure. */
static void note_fail(int *rc, int code)
{
    if (code == 2 || !*rc)
        *rc = code;
}

/* VALIDATE_DEFAULT_DIR in the directory `up` levels above the binary's
 * own (0: its own) into dir; 0 when there is no such directory (or the
 * binary's path is unknown). */
static int beside_binary(int up, char *dir, size_t cap)
{
    char exe[4096];
    ssize_t el = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[el > 0 ? el : 0] = '\0';
    for (int k = 0; k <= up; k++) {
        char *slash = strrchr(exe, '/');
        if (!slash || slash == exe)
            return 0;
        *slash = '\0';
    }
    snprintf(dir, cap, "%s/%s", exe, VALIDATE_DEFAULT_DIR);
    return 1;
}

/* The default reference directory: ./traces/reference, else the one next
 * to the binary (the directory of /proc/self/exe, then its parent and
 * grandparent).  On success *dir_out is malloc'd; on failure an error
 * naming every path tried and why it failed is printed, and 2 returned. */
static int find_default_dir(char **dir_out, char ***names, int *n)
{
    char tried[2048] = "";
    size_t tl = 0;
    for (int k = -1; k < 3; k++) {
        char dir[4096 + 32];
        if (k < 0)
            snprintf(dir, sizeof dir, "%s", VALIDATE_DEFAULT_DIR);
        else if (!beside_binary(k, dir, sizeof dir))
            break;
        int errnum = 0;
        *names = list_json(dir, n, &errnum);
        if (*n >= 0) {
            *dir_out = strdup(dir);
            if (*dir_out)
                return 0;
            for (int i = 0; i < *n; i++)
                free((*names)[i]);
            free(*names);
            return cli_error(4, "out of memory");
        }
        if (tl < sizeof tried)
            tl += (size_t)snprintf(tried + tl, sizeof tried - tl, "%s%s (%s)",
                                   tl ? ", " : "", dir, strerror(errnum));
    }
    char exe[8];
    if (readlink("/proc/self/exe", exe, sizeof exe) <= 0 && tl < sizeof tried)
        snprintf(tried + tl, sizeof tried - tl,
                 "; the binary's own directory is unknown "
                 "(/proc/self/exe unreadable)");
    return cli_error(2, "cannot find the reference traces directory: tried "
                        "%s; give it with --dir",
                     tried);
}

/* The traces to validate: their directory and sorted file names. */
typedef struct {
    const char *dir;
    char *found; /* the directory when looked up (owned), else NULL */
    char **names;
    int n;
} vfiles;

static void vfiles_free(vfiles *f)
{
    for (int i = 0; i < f->n; i++)
        free(f->names[i]);
    free(f->names);
    free(f->found);
}

/* The *.json files of --dir, or of the default directory; at least
 * one. */
static int find_traces(const char *dir, vfiles *f)
{
    memset(f, 0, sizeof *f);
    if (dir) {
        int errnum = 0;
        f->names = list_json(dir, &f->n, &errnum);
        if (f->n < 0)
            return cli_error(2, "%s: cannot read the traces directory: %s",
                             dir, strerror(errnum));
        f->dir = dir;
    } else {
        int rc = find_default_dir(&f->found, &f->names, &f->n);
        if (rc) {
            f->names = NULL; /* freed there, or never found */
            f->n = 0;
            return rc;
        }
        f->dir = f->found;
    }
    if (f->n == 0)
        return cli_error(2, "%s: no *.json traces", f->dir);
    return 0;
}

/* A --report path is refused before the (long) runs, and is never one of
 * the inputs. */
static int check_report_path(const char *out, const vfiles *f)
{
    tpu_error oerr = {0};
    if (outfile_check(out, &oerr))
        return cli_fail(&oerr);
    for (int i = 0; i < f->n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", f->dir, f->names[i]);
        if (outfile_same(out, path))
            return cli_error(2, "--report %s: is the input trace %s; "
                                "refusing to overwrite it", out, path);
    }
    return 0;
}

/* The table as it is built: the JSON report, the rows with a published
 * figure, and the exit status so far. */
typedef struct {
    cJSON *doc, *rows;
    vrow *ordered; /* traces with a prediction and a published time */
    int counted;   /* ... how many */
    int unfit;     /* traces with a published time that do not fit */
    double sum_abs;
    int rc;
    int sources; /* print each row's source under it */
    int quiet;   /* rows into `ordered` only: a --fit pass */
    int no_range; /* skip the ranges (--no-range, and every --fit pass) */
    int n_sets;  /* --set (and --fit's) overrides for every trace */
    const char *const *set_keys, *const *set_values;
    int range_jobs; /* range_compute's workers: 0 one per CPU, 1 in-process */
    int jobs;       /* --jobs: worker processes for the rows, 0 one per CPU */
} vtable;

/* A row that says what went wrong instead of figures. */
static void row_error(vtable *t, cJSON *row, const char *name,
                      const char *system, const tpu_error *err, int code)
{
    if (!t->quiet) {
        cli_put_cell(name, 32);
        printf(" %-8s error: %s\n", system, err->msg);
        cli_fail(err);
    }
    cJSON_AddStringToObject(row, "error", err->msg);
    note_fail(&t->rc, code);
}

static int has_published(const graph *g)
{
    return g->has_reference && g->reference_step_s > 0;
}

/* A trace that does not fit is not timed: a step the memory model says
 * cannot run has no prediction to compare (the published configuration
 * ran, so it is a finding about the model).  It is counted as left out
 * only where it had a figure to miss. */
static void row_nofit(vtable *t, cJSON *row, const graph *g,
                      const emu_result *r, const tpu_error *err)
{
    char pub[32] = "-";
    if (has_published(g)) {
        snprintf(pub, sizeof pub, "%.5g", g->reference_step_s);
        cJSON_AddNumberToObject(row, "published_s", g->reference_step_s);
        t->unfit++;
    }
    /* err->msg: "PATH: needs X GiB of HBM per core, vN core has Y GiB
     * (...)" */
    if (!t->quiet) {
        cli_put_cell(g->name, 32);
        printf(" %-8s %-8s %5s %6s %12s %12s %9s  does not fit: %s\n",
               g->reference_family[0] ? g->reference_family : "-", g->system,
               "-", "-", "-", pub, "-", err->msg);
        cli_fail(err);
    }
    cJSON_AddBoolToObject(row, "fits", 0);
    cJSON_AddNumberToObject(row, "hbm_needed_bytes", r->hbm_needed_bytes);
    cJSON_AddNumberToObject(row, "hbm_capacity_bytes", r->hbm_capacity_bytes);
    cJSON_AddStringToObject(row, "error", err->msg);
    note_fail(&t->rc, TPU_ERR_NOFIT);
}

/* A prediction against its published figure: the error into the mean and
 * the pairs; pe and pub as the table prints them. */
static void compare_published(vtable *t, cJSON *row, const graph *g,
                              const emu_result *r, char *pub, char *e,
                              size_t cap)
{
    double pe = 100 * (r->step_time_s - g->reference_step_s) /
                g->reference_step_s;
    snprintf(pub, cap, "%.5g", g->reference_step_s);
    snprintf(e, cap, "%+.1f", pe);
    t->sum_abs += fabs(pe);
    vrow *v = &t->ordered[t->counted++];
    snprintf(v->name, sizeof v->name, "%s (%s)", g->name, g->system);
    snprintf(v->graph, sizeof v->graph, "%s", g->name);
    snprintf(v->family, sizeof v->family, "%s", g->reference_family);
    snprintf(v->baseline, sizeof v->baseline, "%s", g->reference_baseline);
    v->pred = r->step_time_s;
    v->pub = g->reference_step_s;
    double macs = 0;
    for (int i = 0; i < g->n_layers; i++)
        macs += g->layers[i].macs;
    int cores = r->cores_per_replica * r->replicas;
    v->work = cores > 0 ? (double)r->global_batch * macs / cores : 0;
    v->has_range = r->has_range;
    v->lo = r->range_low_s;
    v->hi = r->range_high_s;
    cJSON_AddNumberToObject(row, "published_s", g->reference_step_s);
    cJSON_AddNumberToObject(row, "error_pct", pe);
    cJSON_AddStringToObject(row, "source", g->reference_source);
}

/* Where the slowest core's time goes: the first thing to look at when a
 * prediction misses. */
static void add_breakdown(cJSON *row, const emu_result *r)
{
    if (r->cores <= 0)
        return;
    const emu_core_result *w = &r->per_core[cli_slowest_core(r)];
    cJSON *bd = cJSON_AddObjectToObject(row, "breakdown_s");
    for (int c = 0; c < CAT_COUNT; c++)
        cJSON_AddNumberToObject(bd, emu_cat_name((emu_cat)c),
                                w->breakdown_s[c]);
    cJSON_AddNumberToObject(row, "slowest_core", w->core);
}

static void row_ok(vtable *t, cJSON *row, const graph *g, const emu_result *r)
{
    char pub[32] = "-", e[32] = "-";
    cJSON_AddNumberToObject(row, "predicted_s", r->step_time_s);
    if (has_published(g))
        compare_published(t, row, g, r, pub, e, sizeof pub);
    if (g->reference_family[0])
        cJSON_AddStringToObject(row, "family", g->reference_family);
    if (g->reference_baseline[0])
        cJSON_AddStringToObject(row, "baseline", g->reference_baseline);
    if (t->quiet)
        return;
    char range[48] = "-", in[8] = "";
    if (r->has_range) {
        snprintf(range, sizeof range, "%.4g-%.4g", r->range_low_s,
                 r->range_high_s);
        cJSON *a = cJSON_AddArrayToObject(row, "range_s");
        cJSON_AddItemToArray(a, cJSON_CreateNumber(r->range_low_s));
        cJSON_AddItemToArray(a, cJSON_CreateNumber(r->range_high_s));
        if (has_published(g)) {
            int inside = g->reference_step_s >= r->range_low_s &&
                         g->reference_step_s <= r->range_high_s;
            snprintf(in, sizeof in, "%s", inside ? "in" : "out");
            cJSON_AddBoolToObject(row, "published_in_range", inside);
        }
    }
    cli_put_cell(g->name, 32);
    printf(" %-8s %-8s %5d %6lld %12.5g %12s %9s  %-19s %s\n",
           g->reference_family[0] ? g->reference_family : "-", g->system,
           r->cores_per_replica,
           (long long)(r->replicas > 0 ? r->global_batch / r->replicas : 0),
           r->step_time_s, pub, e, range, in);
    if (t->sources)
        printf("  source: %s\n", g->has_reference ? g->reference_source
                                                  : "(no published figure)");
    cJSON_AddBoolToObject(row, "fits", r->fits);
    add_breakdown(row, r);
    cJSON_AddNumberToObject(row, "flops_per_step", r->flops_per_step);
}

/* One trace through graph_load + sim_run with its own system and batch:
 * its row printed and added to the report. */
static void validate_one(vtable *t, const char *path, const char *file)
{
    graph g;
    tpu_error err = {0};
    cJSON *row = cJSON_CreateObject();
    cJSON_AddItemToArray(t->rows, row);
    cJSON_AddStringToObject(row, "file", path);
    if (graph_load(&g, path, &err) != TPU_OK) {
        row_error(t, row, file, "-", &err, err.code ? (int)err.code : 2);
        return;
    }
    cJSON_AddStringToObject(row, "name", g.name);
    cJSON_AddStringToObject(row, "system", g.system);
    sim_opts o;
    sim_opts_default(&o);
    o.trace_path = path; /* messages name the file, as run's do */
    o.n_sets = t->n_sets;
    o.set_keys = t->set_keys;
    o.set_values = t->set_values;
    emu_result r;
    memset(&r, 0, sizeof r);
    /* the default step's collectives and DMA costs serve the range's
     * variants too */
    sim_caches cc = {0};
    if (!t->no_range)
        sim_caches_new(&g, &o, &cc);
    sim_caches_lend(&cc, &o);
    tpu_status st = sim_run(&g, &o, &r, &err);
    if (st == TPU_OK && !t->no_range) {
        range_result rr;
        tpu_status rs = range_compute(&g, &o, &r, t->range_jobs, &rr, &err);
        if (rs == TPU_OK) {
            rs = range_to_result(&rr, &r, &err);
            range_free(&rr);
        }
        if (rs != TPU_OK)
            st = rs;
    }
    if (st == TPU_ERR_NOFIT)
        row_nofit(t, row, &g, &r, &err);
    else if (st != TPU_OK)
        row_error(t, row, g.name, g.system, &err, (int)st);
    else
        row_ok(t, row, &g, &r);
    if (!t->quiet)
        fflush(stdout);
    sim_caches_free(&cc);
    emu_result_free(&r);
    graph_free(&g);
}

/* The last line: the mean absolute error over the traces that have a
 * published figure and ran. */
static void print_mean(const vtable *t)
{
    if (t->counted == 0) {
        printf("mean absolute error: n/a (no trace ran with a published "
               "figure)\n");
        cJSON_AddNullToObject(t->doc, "mean_abs_error_pct");
        return;
    }
    char left[80] = "";
    if (t->unfit)
        snprintf(left, sizeof left, " (%d trace%s with a published figure "
                                    "that do%s not fit left out)",
                 t->unfit, t->unfit == 1 ? "" : "s",
                 t->unfit == 1 ? "es" : "");
    printf("mean absolute error: %.1f%%%s\n", t->sum_abs / t->counted, left);
    cJSON_AddNumberToObject(t->doc, "mean_abs_error_pct",
                            t->sum_abs / t->counted);
}

/* The table as JSON into out; rc is the status so far, which an error
 * here does not replace. */
static int write_report(const char *out, const cJSON *doc, int rc)
{
    char *text = cli_json_text(doc);
    if (!text)
        return rc ? rc : cli_error(4, "out of memory");
    tpu_error err = {0};
    if (tpu_write_atomic(out, text, strlen(text), &err) != TPU_OK) {
        int code = cli_fail(&err);
        rc = rc ? rc : code;
    }
    free(text);
    return rc;
}

static void run_row(vtable *t, const vfiles *f, int i)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", f->dir, f->names[i]);
    validate_one(t, path, f->names[i]);
}

/* What a row run in a worker (pool.h) hands back: the totals it added
 * to its own table, its vrow when it counted, then its report row as
 * JSON text. */
typedef struct {
    int rc, counted, unfit;
    double sum_abs;
    vrow v;
} vrow_msg;

typedef struct {
    vtable *t;
    const vfiles *f;
} vpool;

/* In a worker: row i through a table of its own, packed for row_merge. */
static int row_task(void *ctx, int i, char **blob, size_t *len)
{
    const vpool *p = ctx;
    vtable w = *p->t;
    vrow v;
    memset(&v, 0, sizeof v);
    w.doc = cJSON_CreateObject();
    w.rows = w.doc ? cJSON_AddArrayToObject(w.doc, "traces") : NULL;
    if (!w.rows) {
        cJSON_Delete(w.doc);
        return 1;
    }
    w.ordered = &v;
    w.counted = w.unfit = w.rc = 0;
    w.sum_abs = 0;
    w.range_jobs = 1; /* the pool's workers fill the CPUs already */
    run_row(&w, p->f, i);
    char *row = cJSON_PrintUnformatted(cJSON_GetArrayItem(w.rows, 0));
    cJSON_Delete(w.doc);
    if (!row)
        return 1;
    size_t nrow = strlen(row) + 1;
    vrow_msg m;
    memset(&m, 0, sizeof m); /* its padding goes down the pipe too */
    m.rc = w.rc;
    m.counted = w.counted;
    m.unfit = w.unfit;
    m.sum_abs = w.sum_abs;
    m.v = v;
    *blob = malloc(sizeof m + nrow);
    if (!*blob) {
        free(row);
        return 1;
    }
    memcpy(*blob, &m, sizeof m);
    memcpy(*blob + sizeof m, row, nrow);
    *len = sizeof m + nrow;
    free(row);
    return 0;
}

/* In the parent, in row order: a worker's row into the table, as if it
 * had run here. */
static void row_merge(void *ctx, int i, const char *blob, size_t len, int ok)
{
    const vpool *p = ctx;
    vtable *t = p->t;
    vrow_msg m;
    cJSON *row = NULL;
    if (ok && blob && len > sizeof m && blob[len - 1] == '\0') {
        memcpy(&m, blob, sizeof m);
        row = cJSON_Parse(blob + sizeof m);
    }
    if (!row) {
        tpu_error err = {0};
        tpu_fail(&err, TPU_ERR_SYSTEM,
                 "%s: the worker process running it failed", p->f->names[i]);
        row = cJSON_CreateObject();
        cJSON_AddItemToArray(t->rows, row);
        row_error(t, row, p->f->names[i], "-", &err, 4);
        return;
    }
    cJSON_AddItemToArray(t->rows, row);
    if (m.counted)
        t->ordered[t->counted++] = m.v;
    t->unfit += m.unfit;
    t->sum_abs += m.sum_abs;
    if (m.rc)
        note_fail(&t->rc, m.rc);
}

typedef struct {
    int i, chips; /* chips: the slice's cores, a proxy of its cost */
} vcost;

static int cmp_cost(const void *a, const void *b)
{
    const vcost *x = a, *y = b;
    if (x->chips != y->chips)
        return (x->chips < y->chips) - (x->chips > y->chips);
    return (x->i > y->i) - (x->i < y->i);
}

/* The order to start the rows in: the largest slices first, since a
 * slice's gradient all-reduce is most of a large row's host time (its
 * range simulates it again per interconnect variant); then file order.
 * NULL when out of memory. */
static int *row_order(const vfiles *f)
{
    vcost *c = calloc((size_t)f->n, sizeof *c);
    int *order = malloc((size_t)f->n * sizeof *order);
    if (!c || !order) {
        free(c);
        free(order);
        return NULL;
    }
    for (int i = 0; i < f->n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", f->dir, f->names[i]);
        graph g;
        tpu_error err = {0};
        c[i].i = i;
        if (graph_load(&g, path, &err) == TPU_OK) {
            const tpu_system *sys = tpu_system_find(g.system);
            c[i].chips = sys ? sys->cores : 0;
            graph_free(&g);
        }
    }
    qsort(c, (size_t)f->n, sizeof *c, cmp_cost);
    for (int i = 0; i < f->n; i++)
        order[i] = c[i].i;
    free(c);
    return order;
}

/* Every trace of f through t (t->ordered holds f->n rows): over worker
 * processes where there is more than one CPU and row, each row's range
 * then run in its worker; the table, report and exit status are the
 * same as one row after another here. */
static void run_rows(vtable *t, const vfiles *f)
{
    vpool p = {t, f};
    int jobs = t->jobs > 0 ? t->jobs : pool_cpus();
    int *order = f->n > 1 && jobs > 1 ? row_order(f) : NULL;
    int pooled =
        order && pool_run(f->n, jobs, order, row_task, row_merge, &p) == 0;
    free(order);
    if (pooled)
        return;
    /* one after another here: each range over the CPUs --jobs allows */
    t->range_jobs = t->jobs;
    for (int i = 0; i < f->n; i++)
        run_row(t, f, i);
}

/* The what-ifs every trace runs under: --set pairs, and --fit's key with
 * one of its values (fit_value NULL: none). */
typedef struct {
    int n;
    const char *keys[VALIDATE_MAX_SETS + 1];
    const char *values[VALIDATE_MAX_SETS + 1];
    int no_range;
    int jobs; /* --jobs, 0 when not given */
    const char *fit_key;
    char *fit_values; /* "KEY=V1,V2,...", owned, cut in place */
    char *fit_list;   /* the values, within fit_values */
} vsets;

static void vtable_sets(vtable *t, vsets *w, const char *fit_value)
{
    int n = w->n;
    if (fit_value) {
        w->keys[n] = w->fit_key;
        w->values[n] = fit_value;
        n++;
    }
    t->n_sets = n;
    t->set_keys = w->keys;
    t->set_values = w->values;
}

/* Every trace of f, then the families, the ratios, the pairs and the
 * mean; the exit status. */
static int run_table(const vfiles *f, const char *out, int sources,
                     vsets *w)
{
    vtable t = {0};
    t.doc = cJSON_CreateObject();
    cJSON_AddStringToObject(t.doc, "format", "tpuemu-validation/1");
    t.rows = cJSON_AddArrayToObject(t.doc, "traces");
    t.sources = sources;
    t.no_range = w->no_range;
    t.jobs = w->jobs;
    vtable_sets(&t, w, NULL);
    if (w->n) {
        cJSON *sets = cJSON_AddObjectToObject(t.doc, "set");
        for (int i = 0; i < w->n; i++) {
            printf("%s%s=%s", i ? " " : "--set ", w->keys[i], w->values[i]);
            cJSON_AddStringToObject(sets, w->keys[i], w->values[i]);
        }
        printf("\n");
    }
    printf("%-32s %-8s %-8s %5s %6s %12s %12s %9s  %-19s %s\n", "name",
           "family", "system", "cores", "batch", "predicted s", "published s",
           "error %", w->no_range ? "" : "range s", "");
    fflush(stdout);
    t.ordered = calloc((size_t)f->n, sizeof *t.ordered);
    if (!t.ordered) {
        cJSON_Delete(t.doc);
        return cli_error(4, "out of memory");
    }
    run_rows(&t, f);
    family_errors(t.ordered, t.counted, t.doc);
    same_code_ratios(t.ordered, t.counted, t.doc);
    range_summary(t.ordered, t.counted, t.doc);
    check_order(t.ordered, t.counted, t.doc);
    free(t.ordered);
    print_mean(&t);
    if (out)
        t.rc = write_report(out, t.doc, t.rc);
    cJSON_Delete(t.doc);
    return t.rc;
}

/* Mean absolute error (%) of rows[i] for which in_family(i) == want
 * (want < 0: every row); -1 when there is none. */
static double fit_mae(const vrow *rows, int n, const char *family, int want)
{
    double sum = 0;
    int k = 0;
    for (int i = 0; i < n; i++) {
        int in = family && !strcmp(rows[i].family, family);
        if (want >= 0 && in != want)
            continue;
        sum += fabs(100 * (rows[i].pred - rows[i].pub) / rows[i].pub);
        k++;
    }
    return k ? sum / k : -1;
}

/* --fit KEY=V1,V2,...: every trace at every value; the mean absolute error
 * of each value over all rows and per family, then leave-one-family-out:
 * for each family, the value that fits the other families best and the
 * error it gives on the family left out.  A value is fitted once for the
 * whole set, never per model, and judged on rows it was not fitted to. */
static int run_fit(const vfiles *f, const char *out, vsets *w)
{
    int nv = 0;
    char *vals[VALIDATE_MAX_FIT];
    for (char *p = w->fit_list, *tok; (tok = strtok(p, ",")); p = NULL) {
        if (nv == VALIDATE_MAX_FIT)
            return cli_error(2, "--fit: at most %d values", VALIDATE_MAX_FIT);
        vals[nv++] = tok;
    }
    if (nv == 0)
        return cli_error(2, "--fit %s=: no values (expected KEY=V1,V2,...)",
                         w->fit_key);
    vrow *rows = calloc((size_t)nv * (size_t)f->n, sizeof *rows);
    int *counted = calloc((size_t)nv, sizeof *counted);
    if (!rows || !counted) {
        free(rows);
        free(counted);
        return cli_error(4, "out of memory");
    }
    int rc = 0;
    for (int v = 0; v < nv; v++) {
        vtable t = {0};
        t.quiet = 1;
        t.no_range = 1;
        t.jobs = w->jobs;
        t.doc = cJSON_CreateObject();
        t.rows = cJSON_AddArrayToObject(t.doc, "traces");
        t.ordered = rows + (size_t)v * (size_t)f->n;
        vtable_sets(&t, w, vals[v]);
        run_rows(&t, f);
        counted[v] = t.counted;
        cJSON_Delete(t.doc);
        if (t.rc && !rc)
            rc = t.rc;
        if (t.counted != counted[0]) {
            int c0 = counted[0];
            free(rows);
            free(counted);
            return cli_error(rc ? rc : 2,
                             "--fit %s=%s: %d of the traces ran, %d at %s "
                             "(a value under which a trace fails or does "
                             "not fit cannot be compared)",
                             w->fit_key, vals[v], t.counted, c0, vals[0]);
        }
    }
    int n = counted[0];
    const vrow *r0 = rows;
    /* the families, in order of first appearance */
    const char *fam[VALIDATE_MAX_FILES];
    int nf = 0;
    for (int i = 0; i < n; i++) {
        int seen = 0;
        for (int j = 0; j < nf && !seen; j++)
            seen = !strcmp(fam[j], r0[i].family);
        if (!seen)
            fam[nf++] = r0[i].family;
    }
    cJSON *doc = cJSON_CreateObject();
    cJSON_AddStringToObject(doc, "format", "tpuemu-fit/1");
    cJSON_AddStringToObject(doc, "key", w->fit_key);
    cJSON *jv = cJSON_AddArrayToObject(doc, "values");
    printf("fit %s over %d rows: mean absolute error %%\n", w->fit_key, n);
    printf("%-14s %8s", "value", "all");
    for (int j = 0; j < nf; j++)
        printf(" %8.8s", fam[j][0] ? fam[j] : "-");
    printf("\n");
    int best = 0;
    for (int v = 0; v < nv; v++) {
        const vrow *rv = rows + (size_t)v * (size_t)f->n;
        double all = fit_mae(rv, n, NULL, -1);
        if (all < fit_mae(rows + (size_t)best * (size_t)f->n, n, NULL, -1))
            best = v;
        printf("%-14s %8.1f", vals[v], all);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "value", vals[v]);
        cJSON_AddNumberToObject(o, "mean_abs_error_pct", all);
        for (int j = 0; j < nf; j++) {
            double e = fit_mae(rv, n, fam[j], 1);
            printf(" %8.1f", e);
            cJSON_AddNumberToObject(o, fam[j][0] ? fam[j] : "-", e);
        }
        printf("\n");
        cJSON_AddItemToArray(jv, o);
    }
    /* leave one family out */
    cJSON *lo = cJSON_AddArrayToObject(doc, "leave_one_family_out");
    double held_sum = 0;
    int held_n = 0;
    for (int j = 0; j < nf && nf > 1; j++) {
        /* ties keep the first value listed: the prior */
        int bv = 0;
        double lo_e = fit_mae(rows, n, fam[j], 0), hi_e = lo_e;
        for (int v = 1; v < nv; v++) {
            double ev = fit_mae(rows + (size_t)v * (size_t)f->n, n, fam[j], 0);
            if (ev < fit_mae(rows + (size_t)bv * (size_t)f->n, n, fam[j], 0))
                bv = v;
            lo_e = ev < lo_e ? ev : lo_e;
            hi_e = ev > hi_e ? ev : hi_e;
        }
        /* the other families cannot tell the values apart */
        int blind = hi_e - lo_e < 0.05;
        const vrow *rb = rows + (size_t)bv * (size_t)f->n;
        double e = fit_mae(rb, n, fam[j], 1);
        int k = 0;
        for (int i = 0; i < n; i++)
            if (!strcmp(rb[i].family, fam[j])) {
                held_sum += fabs(100 * (rb[i].pred - rb[i].pub) / rb[i].pub);
                k++;
            }
        held_n += k;
        if (blind)
            printf("without %-10s the others do not tell the values apart; "
                   "the first, %s=%s, gives %.1f%% on %s\n",
                   fam[j][0] ? fam[j] : "-", w->fit_key, vals[bv], e,
                   fam[j][0] ? fam[j] : "-");
        else
            printf("without %-10s the others choose %s=%s; on %s it gives "
                   "%.1f%%\n",
                   fam[j][0] ? fam[j] : "-", w->fit_key, vals[bv],
                   fam[j][0] ? fam[j] : "-", e);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "held_out", fam[j][0] ? fam[j] : "-");
        cJSON_AddStringToObject(o, "value", vals[bv]);
        cJSON_AddBoolToObject(o, "identified", !blind);
        cJSON_AddNumberToObject(o, "held_out_mean_abs_error_pct", e);
        cJSON_AddItemToArray(lo, o);
    }
    cJSON_AddStringToObject(doc, "best_value", vals[best]);
    if (held_n) {
        printf("leave-one-family-out mean absolute error: %.1f%%\n",
               held_sum / held_n);
        cJSON_AddNumberToObject(doc, "leave_one_family_out_mae_pct",
                                held_sum / held_n);
    }
    printf("best over all rows: %s=%s, mean absolute error %.1f%%\n",
           w->fit_key, vals[best],
           fit_mae(rows + (size_t)best * (size_t)f->n, n, NULL, -1));
    if (out)
        rc = write_report(out, doc, rc);
    cJSON_Delete(doc);
    free(rows);
    free(counted);
    return rc;
}

/* A --set or --fit KEY=VALUE: the key must be one of the table's and the
 * value in its range (checked on v3's defaults; the traces' own systems
 * check it again). */
static int check_set(const char *opt, const char *key, const char *value)
{
    tpu_params p;
    tpu_error err = {0};
    tpu_params_default(&p, 3);
    if (tpu_params_set(&p, key, value, &err) != TPU_OK)
        return cli_error(2, "validate: %s %s=%s: %s", opt, key, value,
                         err.msg);
    return 0;
}

/* Splits "KEY=VALUE" in place; 0 when there is no '='. */
static int split_kv(char *kv, char **key, char **value)
{
    char *eq = strchr(kv, '=');
    if (!eq || eq == kv)
        return 0;
    *eq = 0;
    *key = kv;
    *value = eq + 1;
    return 1;
}

int cli_validate(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        fputs(usage_text, stdout);
        return 0;
    }
    const char *out = NULL, *dir = NULL, *set = NULL, *fit = NULL;
    const char *jobs = NULL;
    int sources = 0;
    vsets w;
    memset(&w, 0, sizeof w);
    char setbuf[VALIDATE_MAX_SETS][256];
    for (int i = 1; i < argc; i++) {
        int r;
        if (!strcmp(argv[i], "--sources")) {
            sources = 1;
        } else if (!strcmp(argv[i], "--no-range")) {
            w.no_range = 1;
        } else if ((r = cli_take(argc, argv, &i, "--set", &set)) != 0) {
            if (r < 0)
                return 2;
            char *k, *v;
            if (w.n == VALIDATE_MAX_SETS)
                return cli_error(2, "validate: at most %d --set",
                                 VALIDATE_MAX_SETS);
            snprintf(setbuf[w.n], sizeof setbuf[w.n], "%s", set);
            if (!split_kv(setbuf[w.n], &k, &v))
                return cli_error(2, "validate: --set %s: expected KEY=VALUE",
                                 set);
            if (check_set("--set", k, v))
                return 2;
            w.keys[w.n] = k;
            w.values[w.n] = v;
            w.n++;
        } else if ((r = cli_take(argc, argv, &i, "--fit", &fit)) != 0) {
            if (r < 0)
                return 2;
        } else if ((r = cli_take(argc, argv, &i, "--jobs", &jobs)) != 0 ||
                   (r = cli_take(argc, argv, &i, "-j", &jobs)) != 0) {
            int64_t n;
            if (r < 0 || cli_int("--jobs", jobs, 1, 64, &n))
                return 2;
            w.jobs = (int)n;
        } else if ((r = cli_take(argc, argv, &i, "--report", &out)) != 0 ||
            (r = cli_take(argc, argv, &i, "--dir", &dir)) != 0) {
            if (r < 0)
                return 2;
        } else {
            return cli_error(2, "validate: unexpected argument '%s' (see "
                                "tpuemu validate --help)",
                             argv[i]);
        }
    }
    if (fit) {
        char *k, *v;
        free(w.fit_values);
        w.fit_values = strdup(fit);
        if (!w.fit_values)
            return cli_error(4, "out of memory");
        if (!split_kv(w.fit_values, &k, &v) || !*v) {
            free(w.fit_values);
            return cli_error(2, "validate: --fit %s: expected KEY=V1,V2,...",
                             fit);
        }
        w.fit_key = k;
        w.fit_list = v;
        char tmp[1024];
        snprintf(tmp, sizeof tmp, "%s", v);
        for (char *p = tmp, *tok; (tok = strtok(p, ",")); p = NULL)
            if (check_set("--fit", k, tok)) {
                free(w.fit_values);
                return 2;
            }
    }
    vfiles f;
    int rc = find_traces(dir, &f);
    if (!rc && out)
        rc = check_report_path(out, &f);
    if (!rc)
        rc = fit ? run_fit(&f, out, &w) : run_table(&f, out, sources, &w);
    vfiles_free(&f);
    free(w.fit_values);
    return rc;
}
