/* tpuemu validate — predicted against published step times
 * (docs/SPEC.md).
 *
 * Runs every .json file in traces/reference (sorted by file name, so the table
 * and the --report summary are the same on every machine) through
 * graph_load + sim_run with the trace's own system and batch, and prints
 * name, system, predicted and published step time, the signed error and
 * the source; then whether the predictions order the traces as the
 * published times do (every pair: the published trends, e.g. 2560x2560
 * on v3-64 faster per step than 1280x1280 on v3-8, are such pairs); the
 * last line is the mean absolute error over the traces that have a
 * published figure.
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
#include "emu/graph.h"
#include "emu/out/outfile.h"
#include "emu/report.h"
#include "emu/sim.h"

#define VALIDATE_MAX_FILES 4096

static const char usage_text[] =
    "usage: tpuemu validate [--report R.json] [--dir DIR]\n"
    "\n"
    "Runs every DIR/*.json (default traces/reference, sorted by name) and\n"
    "prints, for each, the predicted and the published step time, the\n"
    "error in percent and the source of the published figure; then how many\n"
    "pairs of traces the predictions order as the published times do (the\n"
    "published trends), naming any pair they get the wrong way round; the\n"
    "last line is the mean absolute error.  --report also writes the table\n"
    "as JSON (format tpuemu-validation/1).\n"
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

/* A trace with both a prediction and a published step time. */
typedef struct {
    char name[192]; /* graph name (128) and system (32), "%s (%s)" */
    double pred, pub;
} vrow;

/* Whether the predictions order every pair as the published times do:
 * prints the count and each pair the wrong way round, and records them
 * in the report.  Equal published times order nothing. */
static void check_order(const vrow *v, int nv, cJSON *doc)
{
    int pairs = 0, same = 0;
    cJSON *wrong = cJSON_CreateArray();
    for (int i = 0; i < nv; i++)
        for (int j = 0; j < nv; j++) {
            if (!(v[i].pub < v[j].pub))
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
} vtable;

/* A row that says what went wrong instead of figures. */
static void row_error(vtable *t, cJSON *row, const char *name,
                      const char *system, const tpu_error *err, int code)
{
    cli_put_cell(name, 32);
    printf(" %-8s error: %s\n", system, err->msg);
    cli_fail(err);
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
    cli_put_cell(g->name, 32);
    printf(" %-8s %12s %12s %9s  does not fit: %s\n", g->system, "-", pub,
           "-", err->msg);
    cli_fail(err);
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
    v->pred = r->step_time_s;
    v->pub = g->reference_step_s;
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
    cli_put_cell(g->name, 32);
    printf(" %-8s %12.5g %12s %9s  %s\n", g->system, r->step_time_s, pub, e,
           g->has_reference ? g->reference_source
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
    emu_result r;
    memset(&r, 0, sizeof r);
    tpu_status st = sim_run(&g, &o, &r, &err);
    if (st == TPU_ERR_NOFIT)
        row_nofit(t, row, &g, &r, &err);
    else if (st != TPU_OK)
        row_error(t, row, g.name, g.system, &err, (int)st);
    else
        row_ok(t, row, &g, &r);
    fflush(stdout);
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

/* Every trace of f, then the pairs and the mean; the exit status. */
static int run_table(const vfiles *f, const char *out)
{
    vtable t = {0};
    t.doc = cJSON_CreateObject();
    cJSON_AddStringToObject(t.doc, "format", "tpuemu-validation/1");
    t.rows = cJSON_AddArrayToObject(t.doc, "traces");
    printf("%-32s %-8s %12s %12s %9s  %s\n", "name", "system", "predicted s",
           "published s", "error %", "source");
    fflush(stdout);
    t.ordered = calloc((size_t)f->n, sizeof *t.ordered);
    if (!t.ordered) {
        cJSON_Delete(t.doc);
        return cli_error(4, "out of memory");
    }
    for (int i = 0; i < f->n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", f->dir, f->names[i]);
        validate_one(&t, path, f->names[i]);
    }
    check_order(t.ordered, t.counted, t.doc);
    free(t.ordered);
    print_mean(&t);
    if (out)
        t.rc = write_report(out, t.doc, t.rc);
    cJSON_Delete(t.doc);
    return t.rc;
}

int cli_validate(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        fputs(usage_text, stdout);
        return 0;
    }
    const char *out = NULL, *dir = NULL;
    for (int i = 1; i < argc; i++) {
        int r;
        if ((r = cli_take(argc, argv, &i, "--report", &out)) != 0 ||
            (r = cli_take(argc, argv, &i, "--dir", &dir)) != 0) {
            if (r < 0)
                return 2;
        } else {
            return cli_error(2, "validate: unexpected argument '%s' (see "
                                "tpuemu validate --help)",
                             argv[i]);
        }
    }
    vfiles f;
    int rc = find_traces(dir, &f);
    if (!rc && out)
        rc = check_report_path(out, &f);
    if (!rc)
        rc = run_table(&f, out);
    vfiles_free(&f);
    return rc;
}
