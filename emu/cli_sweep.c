/* tpuemu sweep — a grid of configurations as independent `tpuemu run`
 * processes (issue 7, DESIGN.md "Beyond one machine").
 *
 * A sweep file names a base trace and a grid:
 *
 *   {"format": "tpuemu-sweep/1", "name": "retinanet-partitioning",
 *    "trace": "../reference/retinanet-2560-v3-64.json",
 *    "grid": {"partition_dims": [[1,1,1,1], [1,2,1,1], [1,4,2,1]],
 *             "system": ["v3-64"], "batch": [64],
 *             "set": {"hbm.bandwidth_gbs": [900, 450]}},
 *    "x": "partition_dims"}
 *
 * The trace path is relative to the sweep file.  Runs are the Cartesian
 * product of the axes in the order partition_dims, system, batch, then the
 * --set keys in file order, the last axis varying fastest; run i writes
 * OUT/reports/NNNN.json and OUT/logs/NNNN.log.  Partitionings need a
 * modified trace (run.input_partition_dims, num_cores_per_replica = the
 * product): each is written once to OUT/traces/STEM-pdAxBxCxD.json.
 *
 * Every run is one deterministic process, so the same grid runs under GNU
 * parallel, make -j or a Slurm array from --print-commands (one command
 * line per run, in run order).  Without it, the runs execute here, N at a
 * time (fork/exec of this very binary, /proc/self/exe), and the reports
 * are gathered into OUT/results.csv and OUT/step_time.png.  A run that
 * does not fit the hardware (exit 3) is a row with fits=0, not a failure. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "emu/chart.h"
#include "emu/cli.h"
#include "emu/params.h"
#include "emu/report.h"

#define SWEEP_MAX_AXES 16
#define SWEEP_MAX_VALUES 1024
#define SWEEP_MAX_RUNS 100000
#define SWEEP_MAX_SERIES 12
#define SWEEP_MAX_ARGS (16 + 2 * SWEEP_MAX_AXES)

static const char usage_text[] =
    "usage: tpuemu sweep SWEEP.json [--jobs N] [--print-commands] [--out DIR]\n"
    "                    [--bin TPUEMU]\n"
    "\n"
    "Expands the grid of SWEEP.json (partition_dims x system x batch x --set\n"
    "values) into independent `tpuemu run` processes and runs them N at a\n"
    "time (default: every online CPU).  Writes into DIR (default\n"
    "sweep-NAME): traces/ (one trace per partitioning), reports/NNNN.json,\n"
    "logs/NNNN.log, commands.txt, results.csv (one row per run: swept\n"
    "values, exit, fits, step time, the slowest core's categories) and\n"
    "step_time.png (step time against the x axis of the sweep file).\n"
    "\n"
    "--print-commands writes the traces and prints one command line per run\n"
    "instead of running them (for GNU parallel, make -j, a Slurm array).\n"
    "--bin runs another tpuemu build (default: this one).\n"
    "\n"
    "exit status: 0 every run finished (a run that does not fit counts as\n"
    "finished, fits=0), 2 bad sweep file, otherwise the exit status of the\n"
    "first failed run (its log is named).\n";

typedef enum { AX_PD, AX_SYSTEM, AX_BATCH, AX_SET } axis_kind;

typedef struct {
    char label[96];   /* CSV and chart text: "1x4x2x1", "v3-64", "450" */
    char arg[96];     /* the command-line value */
    double x;         /* numeric position on the chart */
    cJSON *pd;        /* AX_PD: the full input_partition_dims value (owned) */
    int cpr;          /* AX_PD: cores per replica */
    char trace[2048]; /* AX_PD: the variant trace's path */
} axis_val;

typedef struct {
    axis_kind kind;
    char name[64];    /* CSV column: partition_dims, system, batch, KEY */
    int n;
    axis_val *v;
} axis;

typedef struct {
    const char *path; /* the sweep file, for messages */
    char name[128];
    char trace[1024]; /* resolved base trace path */
    char x[64];       /* x axis name ("" = first with > 1 value) */
    int naxes;
    axis ax[SWEEP_MAX_AXES];
    cJSON *base;      /* the base trace, for variants */
} sweep;

static void sweep_free(sweep *s)
{
    for (int a = 0; a < s->naxes; a++) {
        for (int i = 0; i < s->ax[a].n; i++)
            cJSON_Delete(s->ax[a].v[i].pd);
        free(s->ax[a].v);
    }
    cJSON_Delete(s->base);
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (n + 1 < cap)
            break;
        char *q = realloc(buf, cap * 2);
        if (!q) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = q;
        cap *= 2;
    }
    if (buf && ferror(f)) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = 0;
        *len = n;
    }
    return buf;
}

/* Shortest of %.15g/%.16g/%.17g that reads back exactly: "450", "0.1". */
static void num_text(char *buf, size_t cap, double v)
{
    for (int p = 15; p <= 17; p++) {
        snprintf(buf, cap, "%.*g", p, v);
        if (strtod(buf, NULL) == v)
            return;
    }
}

static int mkdir_p(const char *dir)
{
    char tmp[1024];
    if (snprintf(tmp, sizeof tmp, "%s", dir) >= (int)sizeof tmp)
        return -1;
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
        return -1;
    return 0;
}

static axis *add_axis(sweep *s, axis_kind k, const char *name, int n)
{
    if (s->naxes >= SWEEP_MAX_AXES)
        return NULL;
    axis *a = &s->ax[s->naxes++];
    a->kind = k;
    snprintf(a->name, sizeof a->name, "%s", name);
    a->n = n;
    a->v = calloc((size_t)n, sizeof *a->v);
    return a->v ? a : NULL;
}

/* A list of positive integers, or NULL: its product in *prod (0 = bad). */
static int dims_product(const cJSON *d, int *rank)
{
    if (!cJSON_IsArray(d))
        return 0;
    int n = cJSON_GetArraySize(d);
    if (n < 1 || n > 8)
        return 0;
    long long p = 1;
    const cJSON *e;
    cJSON_ArrayForEach(e, d)
    {
        if (!cJSON_IsNumber(e) || e->valuedouble < 1 ||
            e->valuedouble > 65536 || e->valuedouble != floor(e->valuedouble))
            return 0;
        p *= (long long)e->valuedouble;
        if (p > 65536)
            return 0;
    }
    *rank = n;
    return (int)p;
}

static void dims_label(const cJSON *d, char *buf, size_t cap)
{
    size_t len = 0;
    const cJSON *e;
    buf[0] = 0;
    cJSON_ArrayForEach(e, d)
    {
        int w = snprintf(buf + len, cap - len, "%s%d", len ? "x" : "",
                         (int)e->valuedouble);
        if (w < 0 || (size_t)w >= cap - len)
            break;
        len += (size_t)w;
    }
}

/* The full input_partition_dims for simple dims d: every entry of the
 * base trace's list with d's rank (inputs and partitioned labels) becomes
 * d, null entries stay null.  NULL with a message when that is ambiguous. */
static cJSON *pd_from_simple(const sweep *s, const cJSON *d, int rank,
                             char *why, size_t cap)
{
    const cJSON *run = cJSON_GetObjectItemCaseSensitive(s->base, "run");
    const cJSON *old = cJSON_GetObjectItemCaseSensitive(run,
                                                        "input_partition_dims");
    cJSON *out = cJSON_CreateArray();
    if (!cJSON_IsArray(old) || cJSON_GetArraySize(old) == 0) {
        /* One input, replicated labels. */
        cJSON_AddItemToArray(out, cJSON_Duplicate(d, 1));
        cJSON_AddItemToArray(out, cJSON_CreateNull());
        return out;
    }
    const cJSON *e;
    int i = 0;
    cJSON_ArrayForEach(e, old)
    {
        if (cJSON_IsNull(e)) {
            cJSON_AddItemToArray(out, cJSON_CreateNull());
        } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == rank) {
            cJSON_AddItemToArray(out, cJSON_Duplicate(d, 1));
        } else {
            snprintf(why, cap,
                     "the trace's input_partition_dims[%d] has another rank; "
                     "give the full input_partition_dims list instead",
                     i);
            cJSON_Delete(out);
            return NULL;
        }
        i++;
    }
    return out;
}

static int bad(const sweep *s, const char *jpath, const char *what)
{
    return cli_error(2, "%s: %s: %s", s->path, jpath, what);
}

static int parse_pd(sweep *s, const cJSON *list)
{
    int n = cJSON_GetArraySize(list);
    if (!cJSON_IsArray(list) || n < 1 || n > SWEEP_MAX_VALUES)
        return bad(s, "grid.partition_dims", "expected a non-empty list");
    axis *a = add_axis(s, AX_PD, "partition_dims", n);
    if (!a)
        return cli_error(4, "out of memory");
    const cJSON *e;
    int i = 0;
    cJSON_ArrayForEach(e, list)
    {
        char jp[64], why[256] = "";
        snprintf(jp, sizeof jp, "grid.partition_dims[%d]", i);
        axis_val *v = &a->v[i];
        int rank = 0, prod;
        const cJSON *first = cJSON_GetArrayItem(e, 0);
        if (cJSON_IsNumber(first)) {
            /* Simple form: the first input's dims. */
            if (!(prod = dims_product(e, &rank)))
                return bad(s, jp, "expected a list of positive integers");
            v->pd = pd_from_simple(s, e, rank, why, sizeof why);
            if (!v->pd)
                return bad(s, jp, why);
            dims_label(e, v->label, sizeof v->label);
        } else {
            /* Full form: the whole input_partition_dims value. */
            if (!cJSON_IsArray(e) || !(prod = dims_product(first, &rank)))
                return bad(s, jp, "expected [N,H,W,C] or a full "
                                  "input_partition_dims list");
            const cJSON *x;
            size_t len = 0;
            cJSON_ArrayForEach(x, e)
            {
                int r2;
                char part[48] = "-";
                if (!cJSON_IsNull(x)) {
                    if (dims_product(x, &r2) != prod)
                        return bad(s, jp, "every entry must be null or have "
                                          "the same product");
                    dims_label(x, part, sizeof part);
                }
                int w = snprintf(v->label + len, sizeof v->label - len,
                                 "%s%s", len ? "+" : "", part);
                if (w > 0 && (size_t)w < sizeof v->label - len)
                    len += (size_t)w;
            }
            v->pd = cJSON_Duplicate(e, 1);
        }
        v->cpr = prod;
        v->x = prod;
        snprintf(v->arg, sizeof v->arg, "%s", v->label);
        i++;
    }
    for (int j = 0; j < n; j++)
        for (int k = 0; k < j; k++)
            if (strcmp(a->v[j].label, a->v[k].label) == 0)
                return bad(s, "grid.partition_dims", "a partitioning is "
                                                      "listed twice");
    return 0;
}

static int parse_strings(sweep *s, axis_kind kind, const char *name,
                         const char *jbase, const cJSON *list)
{
    int n = cJSON_GetArraySize(list);
    char jp[160];
    snprintf(jp, sizeof jp, "%s", jbase);
    if (!cJSON_IsArray(list) || n < 1 || n > SWEEP_MAX_VALUES)
        return bad(s, jp, "expected a non-empty list");
    axis *a = add_axis(s, kind, name, n);
    if (!a)
        return cli_error(4, "out of memory");
    const cJSON *e;
    int i = 0;
    cJSON_ArrayForEach(e, list)
    {
        axis_val *v = &a->v[i];
        snprintf(jp, sizeof jp, "%s[%d]", jbase, i);
        if (cJSON_IsString(e)) {
            if (strlen(e->valuestring) >= sizeof v->arg ||
                !e->valuestring[0])
                return bad(s, jp, "expected a short non-empty string");
            snprintf(v->arg, sizeof v->arg, "%s", e->valuestring);
        } else if (cJSON_IsNumber(e) && isfinite(e->valuedouble)) {
            num_text(v->arg, sizeof v->arg, e->valuedouble);
        } else {
            return bad(s, jp, "expected a string or a number");
        }
        snprintf(v->label, sizeof v->label, "%s", v->arg);
        char *end;
        v->x = strtod(v->arg, &end);
        if (*end || end == v->arg)
            v->x = i; /* not numeric: spaced evenly in file order */
        if (kind == AX_SYSTEM) {
            const tpu_system *sy = tpu_system_find(v->arg);
            if (!sy)
                return bad(s, jp, "unknown system (see SPEC.md: v2-8 .. "
                                  "v3-2048)");
            v->x = sy->cores;
        } else if (kind == AX_BATCH) {
            if (!cJSON_IsNumber(e) || e->valuedouble < 1 ||
                e->valuedouble != floor(e->valuedouble) || e->valuedouble > 1e12)
                return bad(s, jp, "expected a positive integer");
        } else if (strchr(v->arg, '\'') || strchr(v->arg, '\n')) {
            return bad(s, jp, "quotes and newlines are not allowed");
        }
        i++;
    }
    return 0;
}

static int parse_sweep(sweep *s, const char *path)
{
    memset(s, 0, sizeof *s);
    s->path = path;
    size_t len;
    char *text = slurp(path, &len);
    if (!text)
        return cli_error(2, "%s: cannot read: %s", path, strerror(errno));
    cJSON *doc = cJSON_ParseWithLength(text, len);
    free(text);
    if (!doc)
        return cli_error(2, "%s: not valid JSON", path);
    int rc = 0;
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(doc, "format");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(doc, "name");
    const cJSON *trace = cJSON_GetObjectItemCaseSensitive(doc, "trace");
    const cJSON *grid = cJSON_GetObjectItemCaseSensitive(doc, "grid");
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(doc, "x");
    if (!cJSON_IsObject(doc)) {
        rc = bad(s, "(top)", "expected a JSON object");
    } else if (!cJSON_IsString(fmt) ||
               strcmp(fmt->valuestring, "tpuemu-sweep/1") != 0) {
        rc = bad(s, "format", "expected \"tpuemu-sweep/1\"");
    } else if (!cJSON_IsString(name) || !name->valuestring[0] ||
               strlen(name->valuestring) >= sizeof s->name ||
               strspn(name->valuestring, "abcdefghijklmnopqrstuvwxyz"
                                         "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                         "0123456789._-") !=
                   strlen(name->valuestring)) {
        rc = bad(s, "name", "expected a short name of letters, digits, "
                            "'.', '_', '-'");
    } else if (!cJSON_IsString(trace) || !trace->valuestring[0]) {
        rc = bad(s, "trace", "expected the path of the base trace");
    } else if (!cJSON_IsObject(grid)) {
        rc = bad(s, "grid", grid ? "expected an object" : "missing");
    } else if (x && (!cJSON_IsString(x) ||
                     strlen(x->valuestring) >= sizeof s->x)) {
        rc = bad(s, "x", "expected the name of a grid axis");
    }
    if (rc) {
        cJSON_Delete(doc);
        return rc;
    }
    snprintf(s->name, sizeof s->name, "%s", name->valuestring);
    if (x)
        snprintf(s->x, sizeof s->x, "%s", x->valuestring);
    /* The trace is relative to the sweep file's directory. */
    const char *slash = strrchr(path, '/');
    if (trace->valuestring[0] == '/' || !slash)
        snprintf(s->trace, sizeof s->trace, "%s", trace->valuestring);
    else
        snprintf(s->trace, sizeof s->trace, "%.*s/%s",
                 (int)(slash - path), path, trace->valuestring);
    if (strchr(s->trace, '\'') || strchr(s->trace, '\n')) {
        cJSON_Delete(doc);
        return bad(s, "trace", "quotes and newlines are not allowed");
    }

    const cJSON *e;
    cJSON_ArrayForEach(e, grid)
    {
        if (strcmp(e->string, "partition_dims") && strcmp(e->string, "system") &&
            strcmp(e->string, "batch") && strcmp(e->string, "set")) {
            char jp[128];
            snprintf(jp, sizeof jp, "grid.%.64s", e->string);
            cJSON_Delete(doc);
            return bad(s, jp, "unknown axis (partition_dims, system, batch, "
                              "set)");
        }
    }
    const cJSON *pd = cJSON_GetObjectItemCaseSensitive(grid, "partition_dims");
    if (pd) {
        size_t tlen;
        char *ttext = slurp(s->trace, &tlen);
        if (!ttext) {
            rc = cli_error(2, "%s: trace: %s: cannot read: %s", path,
                           s->trace, strerror(errno));
        } else {
            s->base = cJSON_ParseWithLength(ttext, tlen);
            free(ttext);
            if (!cJSON_IsObject(s->base) ||
                !cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(s->base,
                                                                 "run")))
                rc = cli_error(2, "%s: not a trace (no run section)",
                               s->trace);
            else
                rc = parse_pd(s, pd);
        }
    }
    const cJSON *sys = cJSON_GetObjectItemCaseSensitive(grid, "system");
    if (!rc && sys)
        rc = parse_strings(s, AX_SYSTEM, "system", "grid.system", sys);
    const cJSON *batch = cJSON_GetObjectItemCaseSensitive(grid, "batch");
    if (!rc && batch)
        rc = parse_strings(s, AX_BATCH, "batch", "grid.batch", batch);
    const cJSON *set = cJSON_GetObjectItemCaseSensitive(grid, "set");
    if (!rc && set) {
        if (!cJSON_IsObject(set))
            rc = bad(s, "grid.set", "expected an object of KEY: [values]");
        cJSON_ArrayForEach(e, set)
        {
            if (rc)
                break;
            char jp[128];
            snprintf(jp, sizeof jp, "grid.set.%.64s", e->string);
            if (strlen(e->string) >= 64 || !e->string[0] ||
                strspn(e->string, "abcdefghijklmnopqrstuvwxyz0123456789._") !=
                    strlen(e->string))
                rc = bad(s, jp, "expected a parameter key like "
                                "hbm.bandwidth_gbs");
            else
                rc = parse_strings(s, AX_SET, e->string, jp, e);
        }
    }
    if (!rc && s->naxes == 0)
        rc = bad(s, "grid", "no axis to sweep");
    if (!rc && s->x[0]) {
        int found = 0;
        for (int a = 0; a < s->naxes; a++)
            found |= strcmp(s->ax[a].name, s->x) == 0;
        if (!found)
            rc = bad(s, "x", "not an axis of the grid");
    }
    cJSON_Delete(doc);
    return rc;
}

static long long count_runs(const sweep *s)
{
    long long n = 1;
    for (int a = 0; a < s->naxes && n <= SWEEP_MAX_RUNS; a++)
        n *= s->ax[a].n;
    return n;
}

/* Axis values of run i: last axis fastest. */
static void run_index(const sweep *s, long long i, int *idx)
{
    for (int a = s->naxes - 1; a >= 0; a--) {
        idx[a] = (int)(i % s->ax[a].n);
        i /= s->ax[a].n;
    }
}

static int write_variants(sweep *s, const char *out)
{
    for (int a = 0; a < s->naxes; a++) {
        if (s->ax[a].kind != AX_PD)
            continue;
        const char *base = strrchr(s->trace, '/');
        base = base ? base + 1 : s->trace;
        size_t stem = strlen(base);
        if (stem > 5 && strcmp(base + stem - 5, ".json") == 0)
            stem -= 5;
        const cJSON *tn = cJSON_GetObjectItemCaseSensitive(s->base, "name");
        for (int i = 0; i < s->ax[a].n; i++) {
            axis_val *v = &s->ax[a].v[i];
            if (stem > 200)
                stem = 200;
            snprintf(v->trace, sizeof v->trace, "%.900s/traces/%.*s-pd%s.json",
                     out, (int)stem, base, v->label);
            cJSON *t = cJSON_Duplicate(s->base, 1);
            if (!t)
                return cli_error(4, "out of memory");
            cJSON *run = cJSON_GetObjectItemCaseSensitive(t, "run");
            cJSON_DeleteItemFromObjectCaseSensitive(run, "num_cores_per_replica");
            cJSON_DeleteItemFromObjectCaseSensitive(run, "input_partition_dims");
            cJSON_AddNumberToObject(run, "num_cores_per_replica", v->cpr);
            cJSON_AddItemToObject(run, "input_partition_dims",
                                  cJSON_Duplicate(v->pd, 1));
            /* The published figure belongs to the base partitioning only. */
            cJSON_DeleteItemFromObjectCaseSensitive(t, "reference");
            if (cJSON_IsString(tn)) {
                char nm[256];
                snprintf(nm, sizeof nm, "%.120s-pd%s", tn->valuestring,
                         v->label);
                cJSON_ReplaceItemInObjectCaseSensitive(t, "name",
                                                       cJSON_CreateString(nm));
            }
            char *text = cJSON_Print(t);
            cJSON_Delete(t);
            if (!text)
                return cli_error(4, "out of memory");
            size_t len = strlen(text);
            char *q = realloc(text, len + 2);
            if (!q) {
                free(text);
                return cli_error(4, "out of memory");
            }
            text = q;
            memcpy(text + len, "\n", 2);
            tpu_error err = {0};
            tpu_status st = tpu_write_atomic(v->trace, text, len + 1, &err);
            free(text);
            if (st)
                return cli_fail(&err);
        }
    }
    return 0;
}

/* The argv of run i (pointers into s, bufs and bin). */
typedef struct {
    char *argv[SWEEP_MAX_ARGS];
    char setbuf[SWEEP_MAX_AXES][192];
    char report[1100];
    int argc;
} run_cmd;

static void build_cmd(const sweep *s, const char *bin, const char *out,
                      long long i, run_cmd *c)
{
    int idx[SWEEP_MAX_AXES];
    run_index(s, i, idx);
    c->argc = 0;
    c->argv[c->argc++] = (char *)bin;
    c->argv[c->argc++] = "run";
    const char *trace = s->trace;
    for (int a = 0; a < s->naxes; a++)
        if (s->ax[a].kind == AX_PD)
            trace = s->ax[a].v[idx[a]].trace;
    c->argv[c->argc++] = (char *)trace;
    for (int a = 0; a < s->naxes; a++) {
        const axis_val *v = &s->ax[a].v[idx[a]];
        if (s->ax[a].kind == AX_SYSTEM) {
            c->argv[c->argc++] = "--system";
            c->argv[c->argc++] = (char *)v->arg;
        } else if (s->ax[a].kind == AX_BATCH) {
            c->argv[c->argc++] = "--batch";
            c->argv[c->argc++] = (char *)v->arg;
        } else if (s->ax[a].kind == AX_SET) {
            snprintf(c->setbuf[a], sizeof c->setbuf[a], "%s=%s",
                     s->ax[a].name, v->arg);
            c->argv[c->argc++] = "--set";
            c->argv[c->argc++] = c->setbuf[a];
        }
    }
    snprintf(c->report, sizeof c->report, "%.900s/reports/%04lld.json", out,
             i);
    c->argv[c->argc++] = "--report";
    c->argv[c->argc++] = c->report;
    c->argv[c->argc++] = "--quiet";
    c->argv[c->argc] = NULL;
}

/* One shell word: quoted unless it is plainly safe. */
static void put_word(FILE *f, const char *w)
{
    if (*w && strspn(w, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                        "0123456789_./=:,+-@%") == strlen(w)) {
        fputs(w, f);
        return;
    }
    fputc('\'', f);
    for (; *w; w++) {
        if (*w == '\'')
            fputs("'\\''", f);
        else
            fputc(*w, f);
    }
    fputc('\'', f);
}

static void put_cmd(FILE *f, const run_cmd *c)
{
    for (int k = 0; k < c->argc; k++) {
        if (k)
            fputc(' ', f);
        put_word(f, c->argv[k]);
    }
    fputc('\n', f);
}

static pid_t spawn(const run_cmd *c, const char *log)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
    }
    execv(c->argv[0], c->argv);
    fprintf(stderr, "tpuemu: error: sweep: cannot run %s: %s\n", c->argv[0],
            strerror(errno));
    _exit(127);
}

static void csv_field(FILE *f, const char *s)
{
    if (strpbrk(s, ",\"\n")) {
        fputc('"', f);
        for (; *s; s++) {
            if (*s == '"')
                fputc('"', f);
            fputc(*s, f);
        }
        fputc('"', f);
    } else {
        fputs(s, f);
    }
}

/* Numbers in the CSV read back exactly, in as few digits as that takes. */
static void csv_num(FILE *f, double v)
{
    char buf[40];
    num_text(buf, sizeof buf, v);
    fprintf(f, ",%s", buf);
}

typedef struct {
    int status;        /* exit status, -1 signal, -2 not run */
    int have;          /* report read */
    emu_result r;
} run_out;

static int gather(const sweep *s, const char *out, long long nruns,
                  run_out *res)
{
    char path[1100];
    snprintf(path, sizeof path, "%.900s/results.csv", out);
    char *buf = NULL;
    size_t blen = 0;
    FILE *f = open_memstream(&buf, &blen);
    if (!f)
        return cli_error(4, "out of memory");
    fputs("run", f);
    for (int a = 0; a < s->naxes; a++) {
        fputc(',', f);
        csv_field(f, s->ax[a].name);
    }
    fputs(",exit,fits,step_time_s,num_cores_per_replica,replicas,"
          "slowest_core",
          f);
    for (int c = 0; c < CAT_COUNT; c++)
        fprintf(f, ",%s_s", emu_cat_name((emu_cat)c));
    fputs(",hbm_needed_bytes\n", f);
    for (long long i = 0; i < nruns; i++) {
        int idx[SWEEP_MAX_AXES];
        run_index(s, i, idx);
        fprintf(f, "%04lld", i);
        for (int a = 0; a < s->naxes; a++) {
            fputc(',', f);
            csv_field(f, s->ax[a].v[idx[a]].label);
        }
        const run_out *o = &res[i];
        fprintf(f, ",%d", o->status);
        if (!o->have) {
            fprintf(f, ",%s,,,,", o->status == 3 ? "0" : "");
            for (int c = 0; c < CAT_COUNT; c++)
                fputc(',', f);
            fputs(",\n", f);
            continue;
        }
        const emu_result *r = &o->r;
        int w = 0;
        for (int k = 1; k < r->cores; k++)
            if (r->per_core[k].step_time_s > r->per_core[w].step_time_s)
                w = k;
        fprintf(f, ",%d", r->fits && o->status == 0);
        csv_num(f, r->step_time_s);
        fprintf(f, ",%d,%d,%d", r->cores_per_replica, r->replicas,
                r->per_core[w].core);
        for (int c = 0; c < CAT_COUNT; c++)
            csv_num(f, r->per_core[w].breakdown_s[c]);
        csv_num(f, r->hbm_needed_bytes);
        fputc('\n', f);
    }
    if (fclose(f) != 0 || !buf) {
        free(buf);
        return cli_error(4, "out of memory");
    }
    tpu_error err = {0};
    tpu_status st = tpu_write_atomic(path, buf, blen, &err);
    free(buf);
    if (st)
        return cli_fail(&err);
    printf("results: %s\n", path);
    return 0;
}

/* Step time against the x axis, one line per combination of the other
 * axes (runs that do not fit or failed are gaps). */
static int chart(const sweep *s, const char *out, long long nruns,
                 const run_out *res)
{
    int xa = -1;
    for (int a = 0; a < s->naxes && xa < 0; a++)
        if (s->x[0] ? strcmp(s->ax[a].name, s->x) == 0 : s->ax[a].n > 1)
            xa = a;
    if (xa < 0)
        xa = 0;
    int per = s->ax[xa].n;
    int nser = (int)(nruns / per);
    if (nser > SWEEP_MAX_SERIES)
        nser = SWEEP_MAX_SERIES;
    chart_series ser[SWEEP_MAX_SERIES];
    char names[SWEEP_MAX_SERIES][48];
    double *xs = calloc((size_t)nser * (size_t)per, sizeof *xs);
    double *ys = calloc((size_t)nser * (size_t)per, sizeof *ys);
    if (!xs || !ys) {
        free(xs);
        free(ys);
        return cli_error(4, "out of memory");
    }
    int used = 0;
    /* Runs grouped by the other axes' values, in run order. */
    long long key_of[SWEEP_MAX_SERIES];
    for (long long i = 0; i < nruns; i++) {
        int idx[SWEEP_MAX_AXES];
        run_index(s, i, idx);
        long long key = 0;
        for (int a = 0; a < s->naxes; a++)
            if (a != xa)
                key = key * s->ax[a].n + idx[a];
        int k = -1;
        for (int j = 0; j < used && k < 0; j++)
            if (key_of[j] == key)
                k = j;
        if (k < 0) {
            if (used >= nser)
                continue;
            k = used++;
            key_of[k] = key;
            size_t len = 0;
            names[k][0] = 0;
            for (int a = 0; a < s->naxes; a++) {
                if (a == xa || s->ax[a].n < 2)
                    continue;
                /* --set values carry their key's last part, so the
                 * legend reads "bandwidth_gbs=450", not "450". */
                const char *kp = "";
                if (s->ax[a].kind == AX_SET) {
                    kp = strrchr(s->ax[a].name, '.');
                    kp = kp ? kp + 1 : s->ax[a].name;
                }
                int wr = snprintf(names[k] + len, sizeof names[k] - len,
                                  "%s%s%s%s", len ? " " : "", kp,
                                  *kp ? "=" : "", s->ax[a].v[idx[a]].label);
                if (wr > 0 && (size_t)wr < sizeof names[k] - len)
                    len += (size_t)wr;
            }
            if (!names[k][0])
                snprintf(names[k], sizeof names[k], "step time");
            ser[k].name = names[k];
            ser[k].x = xs + (size_t)k * (size_t)per;
            ser[k].y = ys + (size_t)k * (size_t)per;
            ser[k].n = 0;
        }
        double *sx = xs + (size_t)k * (size_t)per;
        double *sy = ys + (size_t)k * (size_t)per;
        int n = ser[k].n++;
        sx[n] = s->ax[xa].v[idx[xa]].x;
        sy[n] = res[i].have && res[i].status == 0 && res[i].r.fits
                    ? res[i].r.step_time_s
                    : NAN;
        /* Keep each line sorted by x (insertion). */
        for (int j = n; j > 0 && sx[j - 1] > sx[j]; j--) {
            double tx = sx[j], ty = sy[j];
            sx[j] = sx[j - 1];
            sy[j] = sy[j - 1];
            sx[j - 1] = tx;
            sy[j - 1] = ty;
        }
    }
    char path[1100], title[256], xl[128];
    snprintf(path, sizeof path, "%.900s/step_time.png", out);
    snprintf(title, sizeof title, "sweep %s: step time", s->name);
    static const char *const xlabels[] = {
        "cores per replica (partition_dims)", "cores (system)",
        "global batch", NULL};
    if (s->ax[xa].kind == AX_SET)
        snprintf(xl, sizeof xl, "%s", s->ax[xa].name);
    else
        snprintf(xl, sizeof xl, "%s", xlabels[s->ax[xa].kind]);
    tpu_error err = {0};
    tpu_status st = chart_lines_png(path, title, xl, "step time (s)", ser,
                                    used, &err);
    free(xs);
    free(ys);
    if (st == TPU_ERR_INPUT) {
        /* No run fitted: nothing to draw is not an error of the sweep. */
        printf("chart: none (%s)\n", err.msg);
        return 0;
    }
    if (st)
        return cli_fail(&err);
    printf("chart: %s\n", path);
    return 0;
}

int cli_sweep(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        fputs(usage_text, stdout);
        return 0;
    }
    const char *file = NULL, *out_opt = NULL, *bin_opt = NULL;
    int print_only = 0;
    int64_t jobs = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--jobs") == 0 || strcmp(argv[i], "-j") == 0) {
            const char *v = cli_value(argc, argv, &i);
            if (!v || cli_int("--jobs", v, 1, 4096, &jobs))
                return 2;
        } else if (strcmp(argv[i], "--out") == 0) {
            if (!(out_opt = cli_value(argc, argv, &i)))
                return 2;
        } else if (strcmp(argv[i], "--bin") == 0) {
            if (!(bin_opt = cli_value(argc, argv, &i)))
                return 2;
        } else if (strcmp(argv[i], "--print-commands") == 0) {
            print_only = 1;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return cli_error(2, "sweep: unknown option '%s' (see tpuemu sweep "
                                "--help)",
                             argv[i]);
        } else if (!file) {
            file = argv[i];
        } else {
            return cli_error(2, "sweep: one sweep file expected");
        }
    }
    if (!file)
        return cli_error(2, "sweep: usage: tpuemu sweep SWEEP.json [--jobs N] "
                            "[--print-commands] [--out DIR]");
    if (jobs == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        jobs = n > 0 ? n : 1;
    }
    sweep s;
    int rc = parse_sweep(&s, file);
    if (rc) {
        sweep_free(&s);
        return rc;
    }
    long long nruns = count_runs(&s);
    if (nruns > SWEEP_MAX_RUNS) {
        sweep_free(&s);
        return cli_error(2, "%s: the grid has more than %d runs", file,
                         SWEEP_MAX_RUNS);
    }
    char out[1024], bin[1024];
    if (out_opt)
        snprintf(out, sizeof out, "%s", out_opt);
    else
        snprintf(out, sizeof out, "sweep-%s", s.name);
    if (strlen(out) > 900 || strchr(out, '\'') || strchr(out, '\n')) {
        sweep_free(&s);
        return cli_error(2, "--out: unusable directory name");
    }
    if (bin_opt) {
        snprintf(bin, sizeof bin, "%s", bin_opt);
    } else {
        ssize_t n = readlink("/proc/self/exe", bin, sizeof bin - 1);
        if (n <= 0) {
            sweep_free(&s);
            return cli_error(4, "sweep: cannot find this binary "
                                "(/proc/self/exe); use --bin");
        }
        bin[n] = 0;
    }
    char sub[1100];
    static const char *const dirs[] = {"traces", "reports", "logs"};
    for (size_t d = 0; d < 3; d++) {
        snprintf(sub, sizeof sub, "%.900s/%s", out, dirs[d]);
        if (mkdir_p(sub) != 0) {
            sweep_free(&s);
            return cli_error(4, "%s: cannot create: %s", sub, strerror(errno));
        }
    }
    rc = write_variants(&s, out);
    if (rc) {
        sweep_free(&s);
        return rc;
    }
    run_cmd *cmd = malloc(sizeof *cmd);
    char *cbuf = NULL;
    size_t clen = 0;
    FILE *cf = open_memstream(&cbuf, &clen);
    if (!cmd || !cf) {
        free(cmd);
        if (cf)
            fclose(cf);
        free(cbuf);
        sweep_free(&s);
        return cli_error(4, "out of memory");
    }
    for (long long i = 0; i < nruns; i++) {
        build_cmd(&s, bin, out, i, cmd);
        put_cmd(print_only ? stdout : cf, cmd);
    }
    fclose(cf);
    if (print_only) {
        free(cbuf);
        free(cmd);
        sweep_free(&s);
        return 0;
    }
    tpu_error err = {0};
    snprintf(sub, sizeof sub, "%.900s/commands.txt", out);
    if (tpu_write_atomic(sub, cbuf ? cbuf : "", clen, &err)) {
        free(cbuf);
        free(cmd);
        sweep_free(&s);
        return cli_fail(&err);
    }
    free(cbuf);

    run_out *res = calloc((size_t)nruns, sizeof *res);
    pid_t *pids = calloc((size_t)nruns, sizeof *pids);
    if (!res || !pids) {
        free(res);
        free(pids);
        free(cmd);
        sweep_free(&s);
        return cli_error(4, "out of memory");
    }
    printf("sweep %s: %lld runs, %lld at a time, in %s\n", s.name, nruns,
           (long long)jobs, out);
    fflush(stdout);
    long long next = 0, running = 0, done = 0;
    while (done < nruns) {
        while (running < jobs && next < nruns) {
            build_cmd(&s, bin, out, next, cmd);
            /* A stale report of an earlier sweep must not stand in for a
             * run that fails before writing its own. */
            unlink(cmd->report);
            snprintf(sub, sizeof sub, "%.900s/logs/%04lld.log", out, next);
            fflush(stdout);
            pid_t pid = spawn(cmd, sub);
            if (pid < 0) {
                res[next].status = -2;
                done++;
            } else {
                pids[next] = pid;
                running++;
            }
            next++;
        }
        if (running == 0)
            continue;
        int st;
        pid_t pid = waitpid(-1, &st, 0);
        if (pid < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        for (long long i = 0; i < next; i++)
            if (pids[i] == pid) {
                pids[i] = 0;
                res[i].status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
                running--;
                done++;
                fprintf(stderr, "[%lld/%lld] run %04lld: %s\n", done, nruns,
                        i,
                        res[i].status == 0   ? "done"
                        : res[i].status == 3 ? "does not fit"
                                             : "FAILED");
                break;
            }
    }
    int first_fail = 0, nofit = 0, failed = 0;
    long long fail_run = -1;
    for (long long i = 0; i < nruns; i++) {
        build_cmd(&s, bin, out, i, cmd);
        if (res[i].status == 0 || res[i].status == 3) {
            tpu_error e2 = {0};
            res[i].have = report_read(&res[i].r, cmd->report, &e2) == TPU_OK;
            if (!res[i].have && res[i].status == 0) {
                res[i].status = 2;
                fprintf(stderr, "tpuemu: error: run %04lld: %s\n", i, e2.msg);
            }
        }
        if (res[i].status == 3)
            nofit++;
        else if (res[i].status != 0) {
            failed++;
            if (!first_fail) {
                first_fail = res[i].status > 0 ? res[i].status : 4;
                fail_run = i;
            }
        }
    }
    rc = gather(&s, out, nruns, res);
    if (!rc)
        rc = chart(&s, out, nruns, res);
    printf("%lld runs: %lld done, %d do not fit, %d failed\n", nruns,
           nruns - nofit - failed, nofit, failed);
    if (fail_run >= 0) {
        cli_error(first_fail, "sweep: run %04lld failed (exit %d): see "
                              "%s/logs/%04lld.log",
                  fail_run, res[fail_run].status, out, fail_run);
        if (!rc)
            rc = first_fail;
    }
    for (long long i = 0; i < nruns; i++)
        emu_result_free(&res[i].r);
    free(res);
    free(pids);
    free(cmd);
    sweep_free(&s);
    return rc;
}
