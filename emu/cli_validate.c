/* tpuemu validate — predicted against published step times (SPEC.md,
 * issue 7).
 *
 * Runs every .json file in traces/reference (sorted by file name, so the table
 * and the --report summary are the same on every machine) through
 * graph_load + sim_run with the trace's own system and batch, and prints
 * name, system, predicted and published step time, the signed error and
 * the source; then whether the predictions order the traces as the
 * published times do (every pair: the trends, e.g. 2560x2560 on
 * v3-64 faster per step than 1280x1280 on v3-8, are such pairs); the last
 * line is the mean absolute error over the traces that have a published
 * figure.
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

#include "emu/cli.h"
#include "emu/graph.h"
#include "emu/outfile.h"
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

/* The default reference directory: ./traces/reference, else the one next
 * to the binary (the directory of /proc/self/exe, then its parent and
 * grandparent).  On success *dir_out is malloc'd; on failure an error
 * naming every path tried and why it failed is printed, and 2 returned. */
static int find_default_dir(char **dir_out, char ***names, int *n)
{
    char tried[2048] = "";
    size_t tl = 0;
    char exe[4096];
    ssize_t el = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[el > 0 ? el : 0] = '\0';
    for (int k = -1; k < 3; k++) {
        char dir[4096 + 32];
        if (k < 0) {
            snprintf(dir, sizeof dir, "%s", VALIDATE_DEFAULT_DIR);
        } else {
            /* Strip k + 1 trailing components off the binary's path. */
            char *slash = NULL;
            for (int up = 0; up <= k; up++) {
                slash = strrchr(exe, '/');
                if (!slash || slash == exe)
                    break;
                *slash = '\0';
            }
            if (!slash || slash == exe || !exe[0])
                break;
            snprintf(dir, sizeof dir, "%s/%s", exe, VALIDATE_DEFAULT_DIR);
            /* Restore for the next k (components were cut in place). */
            el = readlink("/proc/self/exe", exe, sizeof exe - 1);
            exe[el > 0 ? el : 0] = '\0';
        }
        int errnum = 0;
        *names = list_json(dir, n, &errnum);
        if (*n >= 0) {
            *dir_out = malloc(strlen(dir) + 1);
            if (!*dir_out) {
                for (int i = 0; i < *n; i++)
                    free((*names)[i]);
                free(*names);
                return cli_error(4, "out of memory");
            }
            memcpy(*dir_out, dir, strlen(dir) + 1);
            return 0;
        }
        if (tl < sizeof tried)
            tl += (size_t)snprintf(tried + tl, sizeof tried - tl, "%s%s (%s)",
                                   tl ? ", " : "", dir, strerror(errnum));
    }
    if (el <= 0 && tl < sizeof tried)
        snprintf(tried + tl, sizeof tried - tl,
                 "; the binary's own directory is unknown "
                 "(/proc/self/exe unreadable)");
    return cli_error(2, "cannot find the reference traces directory: tried "
                        "%s; give it with --dir",
                     tried);
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
        if ((r = cli_take(argc, argv, &i, "--report", &out)) != 0) {
            if (r < 0)
                return 2;
        } else if ((r = cli_take(argc, argv, &i, "--dir", &dir)) != 0) {
            if (r < 0)
                return 2;
        } else {
            return cli_error(2, "validate: unexpected argument '%s' (see "
                                "tpuemu validate --help)",
                             argv[i]);
        }
    }
    int n, errnum = 0;
    char **names = NULL, *found = NULL;
    if (dir) {
        names = list_json(dir, &n, &errnum);
        if (n < 0)
            return cli_error(2, "%s: cannot read the traces directory: %s",
                             dir, strerror(errnum));
    } else {
        int rc = find_default_dir(&found, &names, &n);
        if (rc)
            return rc;
        dir = found;
    }
    if (n == 0) {
        free(names);
        int rc = cli_error(2, "%s: no *.json traces", dir);
        free(found);
        return rc;
    }
    if (out) {
        /* Refused before the (long) runs, and never one of the inputs. */
        tpu_error oerr = {0};
        int bad = outfile_check(out, &oerr) ? cli_fail(&oerr) : 0;
        for (int i = 0; i < n && !bad; i++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", dir, names[i]);
            if (outfile_same(out, path))
                bad = cli_error(2, "--report %s: is the input trace %s; "
                                   "refusing to overwrite it", out, path);
        }
        if (bad) {
            for (int i = 0; i < n; i++)
                free(names[i]);
            free(names);
            free(found);
            return bad;
        }
    }

    cJSON *doc = cJSON_CreateObject();
    cJSON_AddStringToObject(doc, "format", "tpuemu-validation/1");
    cJSON *rows = cJSON_AddArrayToObject(doc, "traces");

    printf("%-32s %-8s %12s %12s %9s  %s\n", "name", "system", "predicted s",
           "published s", "error %", "source");
    fflush(stdout);
    int rc = 0, counted = 0, unfit = 0;
    double sum_abs = 0;
    vrow *ordered = calloc((size_t)n, sizeof *ordered);
    if (!ordered) {
        for (int i = 0; i < n; i++)
            free(names[i]);
        free(names);
        free(found);
        cJSON_Delete(doc);
        return cli_error(4, "out of memory");
    }
    for (int i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        graph g;
        tpu_error err = {0};
        cJSON *row = cJSON_CreateObject();
        cJSON_AddItemToArray(rows, row);
        cJSON_AddStringToObject(row, "file", path);
        if (graph_load(&g, path, &err) != TPU_OK) {
            cli_put_cell(names[i], 32);
            printf(" %-8s error: %s\n", "-", err.msg);
            cli_fail(&err);
            cJSON_AddStringToObject(row, "error", err.msg);
            note_fail(&rc, err.code ? (int)err.code : 2);
            continue;
        }
        cJSON_AddStringToObject(row, "name", g.name);
        cJSON_AddStringToObject(row, "system", g.system);
        sim_opts o;
        sim_opts_default(&o);
        o.trace_path = path; /* messages name the file, as run's do */
        /* A trace that does not fit is not timed: a step the memory model
         * says cannot run has no prediction to compare (the published
         * configuration ran, so it is a finding about the model). */
        emu_result r;
        memset(&r, 0, sizeof r);
        tpu_status st = sim_run(&g, &o, &r, &err);
        if (st == TPU_ERR_NOFIT) {
            char pub[32] = "-";
            if (g.has_reference && g.reference_step_s > 0) {
                snprintf(pub, sizeof pub, "%.5g", g.reference_step_s);
                cJSON_AddNumberToObject(row, "published_s",
                                        g.reference_step_s);
            }
            /* err.msg: "PATH: needs X GiB of HBM per core, vN core has
             * Y GiB (...)" */
            cli_put_cell(g.name, 32);
            printf(" %-8s %12s %12s %9s  does not fit: %s\n", g.system, "-",
                   pub, "-", err.msg);
            cli_fail(&err);
            cJSON_AddBoolToObject(row, "fits", 0);
            cJSON_AddNumberToObject(row, "hbm_needed_bytes",
                                    r.hbm_needed_bytes);
            cJSON_AddNumberToObject(row, "hbm_capacity_bytes",
                                    r.hbm_capacity_bytes);
            cJSON_AddStringToObject(row, "error", err.msg);
            note_fail(&rc, (int)st);
            /* counted as left out only where it had a figure to miss */
            if (g.has_reference && g.reference_step_s > 0)
                unfit++;
        } else if (st != TPU_OK) {
            cli_put_cell(g.name, 32);
            printf(" %-8s error: %s\n", g.system, err.msg);
            cli_fail(&err);
            cJSON_AddStringToObject(row, "error", err.msg);
            note_fail(&rc, (int)st);
        } else {
            char pub[32] = "-", e[32] = "-";
            cJSON_AddNumberToObject(row, "predicted_s", r.step_time_s);
            if (g.has_reference && g.reference_step_s > 0) {
                double pe = 100 * (r.step_time_s - g.reference_step_s) /
                            g.reference_step_s;
                snprintf(pub, sizeof pub, "%.5g", g.reference_step_s);
                snprintf(e, sizeof e, "%+.1f", pe);
                sum_abs += fabs(pe);
                snprintf(ordered[counted].name, sizeof ordered[counted].name,
                         "%s (%s)", g.name, g.system);
                ordered[counted].pred = r.step_time_s;
                ordered[counted].pub = g.reference_step_s;
                counted++;
                cJSON_AddNumberToObject(row, "published_s",
                                        g.reference_step_s);
                cJSON_AddNumberToObject(row, "error_pct", pe);
                cJSON_AddStringToObject(row, "source", g.reference_source);
            }
            cli_put_cell(g.name, 32);
            printf(" %-8s %12.5g %12s %9s  %s\n", g.system, r.step_time_s,
                   pub, e,
                   g.has_reference ? g.reference_source : "(no published "
                                                          "figure)");
            cJSON_AddBoolToObject(row, "fits", r.fits);
            /* Where the slowest core's time goes: the first thing to look
             * at when a prediction misses. */
            int worst = 0;
            for (int k = 1; k < r.cores; k++)
                if (r.per_core[k].step_time_s >
                    r.per_core[worst].step_time_s)
                    worst = k;
            if (r.cores > 0) {
                cJSON *bd = cJSON_AddObjectToObject(row, "breakdown_s");
                for (int c = 0; c < CAT_COUNT; c++)
                    cJSON_AddNumberToObject(bd, emu_cat_name((emu_cat)c),
                                            r.per_core[worst]
                                                .breakdown_s[c]);
                cJSON_AddNumberToObject(row, "slowest_core",
                                        r.per_core[worst].core);
            }
            cJSON_AddNumberToObject(row, "flops_per_step", r.flops_per_step);
        }
        fflush(stdout);
        emu_result_free(&r);
        graph_free(&g);
    }
    check_order(ordered, counted, doc);
    free(ordered);
    if (counted > 0) {
        char left[80] = "";
        if (unfit)
            snprintf(left, sizeof left, " (%d trace%s with a published figure "
                                        "that do%s not fit left out)",
                     unfit, unfit == 1 ? "" : "s", unfit == 1 ? "es" : "");
        printf("mean absolute error: %.1f%%%s\n", sum_abs / counted, left);
        cJSON_AddNumberToObject(doc, "mean_abs_error_pct", sum_abs / counted);
    } else {
        printf("mean absolute error: n/a (no trace ran with a published "
               "figure)\n");
        cJSON_AddNullToObject(doc, "mean_abs_error_pct");
    }
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
    free(found);
    if (out) {
        char *text = cJSON_Print(doc);
        tpu_error err = {0};
        if (!text) {
            if (!rc)
                rc = cli_error(4, "out of memory");
        } else {
            size_t len = strlen(text);
            char *nl = realloc(text, len + 2);
            if (nl) {
                text = nl;
                memcpy(text + len, "\n", 2);
                len++;
            }
            if (tpu_write_atomic(out, text, len, &err) != TPU_OK) {
                int code = cli_fail(&err);
                if (!rc)
                    rc = code;
            }
            free(text);
        }
    }
    cJSON_Delete(doc);
    return rc;
}
