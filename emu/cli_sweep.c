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
 * product of the axes in the order partition_dims, system, batch, freeze
 * (--freeze lists), then the --set keys in file order, the last axis varying fastest; run i writes
 * OUT/reports/NNNN.json and OUT/logs/NNNN.log.  Partitionings need a
 * modified trace (run.input_partition_dims, num_cores_per_replica = the
 * product): each is written once to OUT/traces/STEM-pdAxBxCxD.json.
 *
 * Every run is one deterministic process, so the same grid runs under GNU
 * parallel, make -j or a Slurm array from --print-commands (one command
 * line per run, in run order).  Without it, the runs execute here, N at a
 * time (fork/exec of this very binary, /proc/self/exe), and the reports
 * are gathered into OUT/results.csv and OUT/step_time.png.  A run that
 * does not fit the hardware (exit 3) is a row with fits=0, not a failure.
 *
 * Everything that can be checked in this process is checked before the
 * output directory is created or any run starts: the sweep file (no
 * duplicate or unknown keys), the base trace (graph_load), every --set
 * key and value (tpu_params_set, as `run --set` does), and every grid
 * point's system, batch and partitioning (graph_check_run, as `run`
 * does), and that no file the sweep or its commands write is one of its
 * inputs (check_clobber).  A bad sweep is one `tpuemu: error: SWEEP.json:
 * json.path: ...` line and exit 2, leaving nothing behind. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
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
#include "emu/font.h"
#include "emu/graph.h"
#include "emu/outfile.h"
#include "emu/params.h"
#include "emu/plan.h"
#include "emu/report.h"
#include "emu/rfile.h"
#include "hbm/hbm.h"

/* Axes in all: partition_dims, system, batch and one per --set key. */
#define SWEEP_MAX_AXES 16
#define SWEEP_MAX_VALUES 1024
/* Runs in one grid (the product of the axis lengths): a sweep is a study
 * of a few dimensions, and each run is a process with its own report;
 * a larger grid is more likely a typo than a plan, and is refused before
 * anything starts. */
#define SWEEP_MAX_RUNS 4096
#define SWEEP_FILE_MAX (16L << 20)
#define SWEEP_MAX_SERIES 12
#define SWEEP_MAX_ARGS (16 + 2 * SWEEP_MAX_AXES)
/* "partition_dims": "all" splits into at most this many cores per
 * replica: the 2-16 of spatial partitioning's published runs. */
/* How many dropped splits "all" names one by one before it counts the
 * rest. */
#define SWEEP_ALL_SHOW_DROPPED 4
#define SWEEP_ALL_MAX_CPR 16
/* Same bound as `run --batch`. */
#define SWEEP_MAX_BATCH ((double)((int64_t)1 << 40))

static const char usage_text[] =
    "usage: tpuemu sweep SWEEP.json [--jobs|-j N] [--print-commands] [--out DIR]\n"
    "                    [--bin TPUEMU]\n"
    "\n"
    "Expands the grid of SWEEP.json (partition_dims x system x batch x\n"
    "freeze x --set values) into independent `tpuemu run` processes and\n"
    "runs them N at a time (default: every online CPU).  Writes into DIR\n"
    "(default sweep-NAME): traces/ (one trace per partitioning),\n"
    "reports/NNNN.json, logs/NNNN.log, commands.txt, results.csv (one row\n"
    "per run: swept values, exit, fits, step time, the slowest core's\n"
    "categories, HBM needed, global batch) and step_time.png (step time\n"
    "against the x axis of the sweep file).  An output that is one of the\n"
    "inputs (sweep file, base trace, --bin) is refused before anything is\n"
    "written.\n"
    "\n"
    "The sweep file, the base trace and every grid point are checked before\n"
    "anything is written or run (at most 16 axes and 4096 runs).\n"
    "--print-commands writes the traces and prints one command line per run\n"
    "instead of running them (for GNU parallel, make -j, a Slurm array),\n"
    "every path in it absolute.\n"
    "--bin runs another tpuemu build (default: this one).\n"
    "\n"
    "exit status: 0 every run finished (a run that does not fit counts as\n"
    "finished, fits=0), 2 bad sweep file or --bin, otherwise the exit status\n"
    "of the first failed run (its log is named).\n";

typedef enum { AX_PD, AX_SYSTEM, AX_BATCH, AX_SET, AX_FREEZE } axis_kind;

typedef struct {
    char label[96];   /* CSV and chart text: "1x4x2x1", "v3-64", "450" */
    char arg[96];     /* the command-line value */
    double x;         /* numeric position on the chart */
    cJSON *pd;        /* AX_PD: the full input_partition_dims value (owned) */
    int cpr;          /* AX_PD: cores per replica */
    char trace[2048]; /* AX_PD: the variant trace's path */
    char batch[32];   /* AX_SYSTEM with scale_batch: its --batch value */
} axis_val;

typedef struct {
    axis_kind kind;
    char name[64];    /* CSV column: partition_dims, system, batch, KEY */
    char jpath[96];   /* where it is in the sweep file: grid.set.KEY */
    int n;
    axis_val *v;
} axis;

typedef struct {
    const char *path; /* the sweep file, for messages */
    char name[128];
    char trace[2048]; /* resolved base trace path (absolute once the output
                         directory is checked: commands run from anywhere) */
    char x[64];       /* x axis name ("" = first with > 1 value) */
    int scale_batch;  /* the global batch scales with the slice's cores */
    int naxes;
    axis ax[SWEEP_MAX_AXES];
    cJSON *base;      /* the base trace's JSON, for variants */
    graph g;          /* the base trace as the library reads it */
    int have_g;
} sweep;

static void sweep_free(sweep *s)
{
    for (int a = 0; a < s->naxes; a++) {
        for (int i = 0; i < s->ax[a].n; i++)
            cJSON_Delete(s->ax[a].v[i].pd);
        free(s->ax[a].v);
    }
    s->naxes = 0;
    cJSON_Delete(s->base);
    s->base = NULL;
    if (s->have_g)
        graph_free(&s->g);
    s->have_g = 0;
}

/* A regular file of at most SWEEP_FILE_MAX bytes (a FIFO or a device
 * would hang or never end); NULL with *why set otherwise. */
/* The file whole, read as traces are (emu/rfile.h: regular files, pipes
 * with an idle timeout; devices and directories refused).  NULL with
 * "PATH: what" in err. */
static char *slurp(const char *path, size_t *len, tpu_error *err)
{
    char *text = NULL;
    if (rfile_read(path, SWEEP_FILE_MAX, RFILE_PIPE_IDLE_S, &text, len, err))
        return NULL;
    return text;
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

/* Text from the file as it may appear in a one-line message: control
 * bytes as \xNN, at most cap-1 bytes, "..." when cut. */
static void shown(char *buf, size_t cap, const char *s)
{
    size_t n = 0;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char tmp[8];
        if (c < 0x20 || c == 0x7f)
            snprintf(tmp, sizeof tmp, "\\x%02x", c);
        else
            snprintf(tmp, sizeof tmp, "%c", c);
        size_t w = strlen(tmp);
        if (n + w + 4 > cap) {
            if (cap >= 4) {
                while (n + 4 > cap)
                    n--;
                memcpy(buf + n, "...", 3);
                n += 3;
            }
            break;
        }
        memcpy(buf + n, tmp, w);
        n += w;
    }
    buf[cap ? (n < cap ? n : cap - 1) : 0] = 0;
}

static int has_ctrl(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return 1;
    return 0;
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

/* The axis count is checked against SWEEP_MAX_AXES before any is added;
 * NULL here means out of memory. */
static axis *add_axis(sweep *s, axis_kind k, const char *name,
                      const char *jpath, int n)
{
    if (s->naxes >= SWEEP_MAX_AXES)
        return NULL;
    axis *a = &s->ax[s->naxes];
    memset(a, 0, sizeof *a);
    a->v = calloc((size_t)n, sizeof *a->v);
    if (!a->v)
        return NULL;
    s->naxes++;
    a->kind = k;
    snprintf(a->name, sizeof a->name, "%s", name);
    snprintf(a->jpath, sizeof a->jpath, "%s", jpath);
    a->n = n;
    return a;
}

/* A list of positive integers: its product (0 = bad), its length in
 * *rank. */
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

/* The full input_partition_dims for simple dims d (the first input's
 * split): each input keeps the base trace's choice (docs/SWEEPS.md).
 * The first input takes d whatever its entry (null included: it is the
 * input being swept; a d of the wrong rank is then refused by the reader
 * with its own message instead of silently running unsplit).  With a list
 * in the base trace, another input's null (replicated) stays null and a
 * list (the reader accepts only the first's list there, or all ones at one
 * core per replica) takes d when of d's rank.  Without a list (absent or
 * null), the base trace chose nothing per input: every input of d's rank
 * takes d, as the reader's pre-replication behaviour did (a null there
 * would change the base trace's work, not only its partitioning).
 * Inputs of another rank (nothing of d to split) stay null; the labels
 * take d if the base trace lists them with d's rank, else null.  NULL
 * with a message when out of memory. */
static cJSON *pd_from_simple(const sweep *s, const cJSON *d, int rank,
                             char *why, size_t cap)
{
    const cJSON *run = cJSON_GetObjectItemCaseSensitive(s->base, "run");
    const cJSON *old = cJSON_GetObjectItemCaseSensitive(run,
                                                        "input_partition_dims");
    cJSON *out = cJSON_CreateArray();
    if (!out) {
        snprintf(why, cap, "out of memory");
        return NULL;
    }
    if (!cJSON_IsArray(old) || cJSON_GetArraySize(old) == 0) {
        int k = 0;
        for (int l = 0; l < s->g.n_layers; l++) {
            const glayer *L = &s->g.layers[l];
            if (L->op != GOP_INPUT)
                continue;
            cJSON_AddItemToArray(out, k++ == 0 || L->out.nsp + 2 == rank
                                          ? cJSON_Duplicate(d, 1)
                                          : cJSON_CreateNull());
        }
        cJSON_AddItemToArray(out, cJSON_CreateNull()); /* the labels */
        return out;
    }
    const cJSON *e;
    int k = 0;
    cJSON_ArrayForEach(e, old)
    {
        if (k++ == 0 ||
            (cJSON_IsArray(e) && cJSON_GetArraySize(e) == rank))
            cJSON_AddItemToArray(out, cJSON_Duplicate(d, 1));
        else
            cJSON_AddItemToArray(out, cJSON_CreateNull());
    }
    return out;
}

/* Whether the full partition dims pd split every input no finer than its
 * extents (the check the trace reader applies to the variant). */
static int pd_fits_inputs(const sweep *s, const cJSON *pd)
{
    int k = 0;
    for (int l = 0; l < s->g.n_layers; l++) {
        const glayer *L = &s->g.layers[l];
        if (L->op != GOP_INPUT)
            continue;
        const cJSON *e = cJSON_GetArrayItem(pd, k++);
        if (!cJSON_IsArray(e))
            continue;
        for (int dd = 0; dd < L->out.nsp; dd++) {
            const cJSON *f = cJSON_GetArrayItem(e, 1 + dd);
            if (cJSON_IsNumber(f) && f->valuedouble > (double)L->out.sp[dd])
                return 0;
        }
    }
    return 1;
}

static int bad(const sweep *s, const char *jpath, const char *what)
{
    return cli_error(2, "%s: %s: %s", s->path, jpath, what);
}

/* The global batch a run on system `sys` gets when no batch axis sets it:
 * the base trace's, or with scale_batch the base trace's examples per
 * core times the slice's cores.  0 when that is not a whole number. */
static int64_t batch_for(const sweep *s, const char *sys)
{
    if (!s->scale_batch)
        return s->g.global_batch;
    const tpu_system *base = tpu_system_find(s->g.system);
    const tpu_system *t = tpu_system_find(sys);
    if (!base || !t)
        return s->g.global_batch;
    int64_t num = s->g.global_batch * (int64_t)t->cores;
    return num % base->cores ? 0 : num / base->cores;
}

static int parse_pd(sweep *s, const cJSON *list)
{
    int n = cJSON_GetArraySize(list);
    axis *a = add_axis(s, AX_PD, "partition_dims", "grid.partition_dims", n);
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
            if (!v->pd)
                return cli_error(4, "out of memory");
        }
        v->cpr = prod;
        v->x = prod;
        snprintf(v->arg, sizeof v->arg, "%s", v->label);
        i++;
    }
    for (int j = 0; j < n; j++)
        for (int k = 0; k < j; k++)
            if (strcmp(a->v[j].label, a->v[k].label) == 0) {
                char jp[64];
                snprintf(jp, sizeof jp, "grid.partition_dims[%d]", j);
                return bad(s, jp, "the same partitioning as an earlier "
                                  "entry");
            }
    return 0;
}

/* A batch axis value, and the messages for the values the axes refuse
 * (parse_strings, and expand_all, which checks them first). */
static int batch_value_ok(const cJSON *e)
{
    return cJSON_IsNumber(e) && isfinite(e->valuedouble) &&
           e->valuedouble >= 1 && e->valuedouble == floor(e->valuedouble) &&
           e->valuedouble <= SWEEP_MAX_BATCH;
}
static const char bad_batch_msg[] = "expected a positive integer (at most "
                                    "2^40)";
static const char bad_system_msg[] = "unknown system (v2-2, v2-8 ... v2-512, "
                                     "v3-2, v3-8 ... v3-2048)";

/* A freeze axis value is checked as `run --freeze` would check it
 * (graph_freeze_check: the base graph keeps the trace's flags). */
static int freeze_ok(const sweep *s, const char *jp, const char *list)
{
    tpu_error err = {0};
    tpu_status st = graph_freeze_check(&s->g, list, s->trace, &err);
    if (st == TPU_ERR_SYSTEM)
        return cli_fail(&err);
    return st ? bad(s, jp, err.msg) : 0;
}

static int parse_strings(sweep *s, axis_kind kind, const char *name,
                         const char *jbase, const cJSON *list)
{
    int n = cJSON_GetArraySize(list);
    char jp[160];
    axis *a = add_axis(s, kind, name, jbase, n);
    if (!a)
        return cli_error(4, "out of memory");
    const cJSON *e;
    int i = 0;
    cJSON_ArrayForEach(e, list)
    {
        axis_val *v = &a->v[i];
        snprintf(jp, sizeof jp, "%s[%d]", jbase, i);
        if (kind == AX_BATCH && !batch_value_ok(e))
            return bad(s, jp, bad_batch_msg);
        if (kind == AX_FREEZE && !cJSON_IsString(e))
            return bad(s, jp, "expected a --freeze list: \"none\", "
                              "\"conv1,bn_conv1\", \"res2*\"");
        if (cJSON_IsString(e)) {
            if (strlen(e->valuestring) >= sizeof v->arg ||
                !e->valuestring[0])
                return bad(s, jp, "expected a short non-empty string");
            /* runs are exec'd, and --print-commands quotes every word,
             * apostrophes included: only control characters would break
             * a command line (probe round 6 found O'Brien refused) */
            if (has_ctrl(e->valuestring))
                return bad(s, jp, "control characters are not allowed");
            snprintf(v->arg, sizeof v->arg, "%s", e->valuestring);
        } else if (cJSON_IsNumber(e) && isfinite(e->valuedouble)) {
            num_text(v->arg, sizeof v->arg, e->valuedouble);
        } else {
            return bad(s, jp, "expected a string or a number");
        }
        snprintf(v->label, sizeof v->label, "%s", v->arg);
        char *end;
        v->x = strtod(v->arg, &end);
        if (*end || end == v->arg || !isfinite(v->x) || kind == AX_FREEZE)
            v->x = i; /* not numeric (a --freeze list never is, even "1",
                         a layer's name): spaced evenly in file order */
        if (kind == AX_SYSTEM) {
            const tpu_system *sy = tpu_system_find(v->arg);
            if (!sy)
                return bad(s, jp, bad_system_msg);
            v->x = sy->cores;
            if (s->scale_batch) {
                int64_t b = batch_for(s, v->arg);
                if (b <= 0) {
                    char m[200];
                    snprintf(m, sizeof m,
                             "scale_batch: %lld examples on %s, scaled to "
                             "%d cores, is not a whole batch",
                             (long long)s->g.global_batch, s->g.system,
                             sy->cores);
                    return bad(s, jp, m);
                }
                snprintf(v->batch, sizeof v->batch, "%lld", (long long)b);
            }
        }
        if (kind == AX_FREEZE) {
            int rc = freeze_ok(s, jp, v->arg);
            if (rc)
                return rc;
        }
        /* --freeze lists as `check` compares them: "c1,bn" is "bn,c1" */
        for (int k = 0; k < i; k++)
            if (kind == AX_FREEZE ? cli_freeze_same(a->v[k].arg, v->arg)
                                  : strcmp(a->v[k].arg, v->arg) == 0)
                return bad(s, jp, "the same value as an earlier entry");
        i++;
    }
    return 0;
}

/* The sweep file as JSON: the whole text one value, no duplicate keys. */
static int read_doc(sweep *s, cJSON **out)
{
    tpu_error err = {0};
    size_t len = 0;
    char *text = slurp(s->path, &len, &err);
    if (!text)
        return cli_fail(&err);
    size_t pos = strspn(text, " \t\r\n");
    if (pos == len) {
        free(text);
        return cli_error(2, "%s: empty file, expected a JSON object",
                         s->path);
    }
    const char *end = NULL;
    cJSON *doc = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    pos = (end >= text && end <= text + len) ? (size_t)(end - text) : 0;
    if (doc)
        pos += strspn(text + pos, " \t\r\n");
    if (!doc || pos < len) {
        int line, col, depth;
        char why[200];
        rfile_json_where(text, len, pos, &line, &col, &depth);
        if (doc)
            snprintf(why, sizeof why, "not valid JSON: unexpected text after "
                     "the top-level value at line %d, column %d", line, col);
        else
            rfile_json_error(text, len, pos, why, sizeof why);
        free(text);
        cJSON_Delete(doc);
        return cli_error(2, "%s: %s", s->path, why);
    }
    free(text);
    char jp[512] = "";
    int oom = 0;
    if (rfile_json_find_dup(doc, jp, sizeof jp, shown, &oom)) {
        cJSON_Delete(doc);
        if (oom)
            return cli_error(4, "out of memory");
        return bad(s, jp, "duplicate key");
    }
    *out = doc;
    return 0;
}

/* The top level, the shape of the grid, the number of axes and runs:
 * everything that needs neither the trace nor the parameter table. */
static int check_shape(sweep *s, const cJSON *doc)
{
    static const char *const top[] = {"format", "name", "description",
                                      "trace",  "grid", "x",
                                      "scale_batch", NULL};
    static const char *const axes[] = {"partition_dims", "system", "batch",
                                       "set", "freeze", NULL};
    if (!cJSON_IsObject(doc))
        return bad(s, "(top level)", "expected a JSON object");
    /* The format first: a trace's or report's keys would otherwise be
     * reported as unknown sweep keys. */
    const cJSON *f0 = cJSON_GetObjectItemCaseSensitive(doc, "format");
    if (cJSON_IsString(f0) && strcmp(f0->valuestring, "tpuemu-trace/1") == 0)
        return bad(s, "format", "this is a trace (tpuemu run reads it), not a "
                                "sweep file; a sweep file names its trace in "
                                "\"trace\" (docs/SWEEPS.md)");
    if (cJSON_IsString(f0) && strcmp(f0->valuestring, "tpuemu-report/1") == 0)
        return bad(s, "format", "this is a tpuemu report, not a sweep file");
    const cJSON *e;
    cJSON_ArrayForEach(e, doc)
    {
        int known = 0;
        for (const char *const *k = top; *k; k++)
            known |= strcmp(e->string, *k) == 0;
        if (!known) {
            char q[80];
            shown(q, sizeof q, e->string);
            return bad(s, q, "unknown key (expected one of: format, name, "
                             "description, trace, grid, x, scale_batch)");
        }
    }
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(doc, "format");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(doc, "name");
    const cJSON *desc = cJSON_GetObjectItemCaseSensitive(doc, "description");
    const cJSON *trace = cJSON_GetObjectItemCaseSensitive(doc, "trace");
    const cJSON *grid = cJSON_GetObjectItemCaseSensitive(doc, "grid");
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(doc, "x");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "tpuemu-sweep/1") != 0)
        return bad(s, "format", fmt ? "expected \"tpuemu-sweep/1\""
                                    : "missing (expected \"tpuemu-sweep/1\")");
    if (!cJSON_IsString(name) || !name->valuestring[0] ||
        strlen(name->valuestring) >= sizeof s->name ||
        strspn(name->valuestring, "abcdefghijklmnopqrstuvwxyz"
                                  "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                  "0123456789._-") !=
            strlen(name->valuestring) ||
        name->valuestring[0] == '.')
        return bad(s, "name", "expected a short name of letters, digits, "
                              "'.', '_', '-' (not starting with '.')");
    if (desc && !cJSON_IsString(desc))
        return bad(s, "description", "expected a string");
    if (!cJSON_IsString(trace) || !trace->valuestring[0])
        return bad(s, "trace", trace ? "expected the path of the base trace"
                                     : "missing (the path of the base trace)");
    if (has_ctrl(trace->valuestring))
        return bad(s, "trace", "control characters are not allowed");
    if (!cJSON_IsObject(grid))
        return bad(s, "grid", grid ? "expected an object of axes"
                                   : "missing (an object of axes)");
    if (x && (!cJSON_IsString(x) || strlen(x->valuestring) >= sizeof s->x))
        return bad(s, "x", "expected the name of a grid axis");
    const cJSON *sb = cJSON_GetObjectItemCaseSensitive(doc, "scale_batch");
    if (sb && !cJSON_IsBool(sb))
        return bad(s, "scale_batch", "expected true or false");
    s->scale_batch = cJSON_IsTrue(sb);
    if (s->scale_batch && cJSON_GetObjectItemCaseSensitive(grid, "batch"))
        return bad(s, "scale_batch", "a batch axis sets the batch itself: "
                                     "use one or the other");

    snprintf(s->name, sizeof s->name, "%s", name->valuestring);
    if (x)
        snprintf(s->x, sizeof s->x, "%s", x->valuestring);
    /* The trace is relative to the sweep file's directory. */
    const char *slash = strrchr(s->path, '/');
    int w;
    if (trace->valuestring[0] == '/' || !slash)
        w = snprintf(s->trace, sizeof s->trace, "%s", trace->valuestring);
    else
        w = snprintf(s->trace, sizeof s->trace, "%.*s/%s",
                     (int)(slash - s->path), s->path, trace->valuestring);
    if (w < 0 || (size_t)w >= sizeof s->trace)
        return bad(s, "trace", "path too long");
    if (has_ctrl(s->trace))
        return bad(s, "trace", "the sweep file's directory has control "
                               "characters");

    /* Axes: known names, lists of 1..SWEEP_MAX_VALUES, at most
     * SWEEP_MAX_AXES of them, at most SWEEP_MAX_RUNS points. */
    int naxes = 0;
    double runs = 1;
    cJSON_ArrayForEach(e, grid)
    {
        int known = 0;
        for (const char *const *k = axes; *k; k++)
            known |= strcmp(e->string, *k) == 0;
        char jp[128], q[80];
        shown(q, sizeof q, e->string);
        snprintf(jp, sizeof jp, "grid.%s", q);
        if (!known)
            return bad(s, jp, "unknown axis (expected partition_dims, "
                              "system, batch, set or freeze)");
        const cJSON *lists = e;
        if (strcmp(e->string, "partition_dims") == 0 && cJSON_IsString(e)) {
            if (strcmp(e->valuestring, "all") != 0)
                return bad(s, jp, "expected a list of partitionings or "
                                  "\"all\"");
            /* at most 35 splits (3 spatial dimensions, 16 cores) */
            naxes++;
            runs *= 35;
            continue;
        }
        if (strcmp(e->string, "set") == 0) {
            if (!cJSON_IsObject(e))
                return bad(s, jp, "expected an object of KEY: [values]");
            if (!e->child)
                return bad(s, jp, "no key to sweep");
            lists = e->child;
        }
        for (const cJSON *l = lists; l; l = l == e ? NULL : l->next) {
            if (l != e) {
                shown(q, sizeof q, l->string);
                snprintf(jp, sizeof jp, "grid.set.%s", q);
            }
            if (++naxes > SWEEP_MAX_AXES)
                return cli_error(2, "%s: %s: more than %d axes (partition_dims, "
                                    "system, batch and each set key count "
                                    "one)",
                                 s->path, jp, SWEEP_MAX_AXES);
            int n = cJSON_GetArraySize(l);
            if (!cJSON_IsArray(l) || n < 1)
                return bad(s, jp, "expected a non-empty list of values");
            if (n > SWEEP_MAX_VALUES)
                return cli_error(2, "%s: %s: %d values, more than the limit "
                                    "of %d",
                                 s->path, jp, n, SWEEP_MAX_VALUES);
            runs *= n;
        }
    }
    if (naxes == 0)
        return bad(s, "grid", "no axis to sweep");
    if (runs > SWEEP_MAX_RUNS)
        return cli_error(2, "%s: grid: %.0f runs (the product of the axis "
                            "lengths), more than the limit of %d",
                         s->path, runs, SWEEP_MAX_RUNS);
    return 0;
}

/* The base trace, read by the library as `run` reads it. */
static int load_trace(sweep *s, int need_json)
{
    tpu_error err = {0};
    struct stat st;
    if (stat(s->trace, &st) == 0 && !S_ISREG(st.st_mode))
        return cli_error(2, "%s: trace: %s: cannot read: %s", s->path,
                         s->trace,
                         S_ISDIR(st.st_mode) ? "is a directory"
                                             : "not a regular file");
    tpu_status rc = graph_load(&s->g, s->trace, &err);
    s->have_g = 1;
    if (rc) {
        char msg[sizeof err.msg];
        shown(msg, sizeof msg, err.msg);
        return cli_error(rc == TPU_ERR_SYSTEM ? 4 : 2, "%s: trace: %s",
                         s->path, msg);
    }
    if (!need_json)
        return 0;
    size_t len;
    char *text = slurp(s->trace, &len, &err);
    if (!text)
        return cli_error(2, "%s: trace: %s", s->path, err.msg);
    s->base = cJSON_ParseWithLength(text, len);
    free(text);
    if (!cJSON_IsObject(s->base) ||
        !cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(s->base, "run")))
        return cli_error(2, "%s: trace: %s: changed while being read", s->path,
                         s->trace);
    return 0;
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

static int axis_of(const sweep *s, axis_kind k)
{
    for (int a = 0; a < s->naxes; a++)
        if (s->ax[a].kind == k)
            return a;
    return -1;
}

/* Every --set key is one of the table's and every value is accepted by
 * tpu_params_set for each generation the grid runs; then each grid
 * point's overrides together are accepted by tpu_params_set and pass the
 * rules between keys (tpu_params_check), as they must in `run`. */
static int check_sets(const sweep *s)
{
    int gens[2] = {0, 0};
    int as = axis_of(s, AX_SYSTEM);
    if (as >= 0) {
        for (int i = 0; i < s->ax[as].n; i++) {
            const tpu_system *sy = tpu_system_find(s->ax[as].v[i].arg);
            if (sy)
                gens[sy->gen == 2 ? 0 : 1] = 1;
        }
    } else {
        const tpu_system *sy = tpu_system_find(s->g.system);
        gens[sy && sy->gen == 2 ? 0 : 1] = 1;
    }
    int any = 0;
    for (int a = 0; a < s->naxes; a++) {
        const axis *ax = &s->ax[a];
        if (ax->kind != AX_SET)
            continue;
        any = 1;
        if (!tpu_param_find(ax->name))
            return bad(s, ax->jpath, "unknown parameter (see tpuemu run "
                                     "--help for the list)");
        for (int i = 0; i < ax->n; i++)
            for (int gi = 0; gi < 2; gi++) {
                if (!gens[gi])
                    continue;
                tpu_params p;
                tpu_error err = {0};
                tpu_params_default(&p, gi + 2);
                if (tpu_params_set(&p, ax->name, ax->v[i].arg, &err)) {
                    /* "--set K=V: out of range ..." -> "out of range ..." */
                    const char *m = err.msg;
                    if (strncmp(m, "--set ", 6) == 0 && strstr(m, ": "))
                        m = strstr(m, ": ") + 2;
                    return cli_error(2, "%s: %s[%d]: %s (value %s)", s->path,
                                     ax->jpath, i, m, ax->v[i].arg);
                }
            }
    }
    if (!any)
        return 0;
    long long nruns = count_runs(s);
    for (long long r = 0; r < nruns; r++) {
        int idx[SWEEP_MAX_AXES];
        run_index(s, r, idx);
        const tpu_system *sy =
            tpu_system_find(as >= 0 ? s->ax[as].v[idx[as]].arg : s->g.system);
        tpu_params p;
        tpu_error err = {0};
        tpu_params_default(&p, sy ? sy->gen : 3);
        int last = -1;
        tpu_status st = TPU_OK;
        /* a key that over-determines a quantity with another (hbm.bandwidth_gbs
         * with hbm.data_rate_gtps) fails here, at the first grid point */
        for (int a = 0; a < s->naxes && !st; a++)
            if (s->ax[a].kind == AX_SET) {
                st = tpu_params_set(&p, s->ax[a].name,
                                    s->ax[a].v[idx[a]].arg, &err);
                last = a;
            }
        if (st || tpu_params_check(&p, &err)) {
            char msg[sizeof err.msg];
            shown(msg, sizeof msg, err.msg);
            return cli_error(2, "%s: %s[%d]: %s (run %04lld)", s->path,
                             s->ax[last].jpath, idx[last], msg, r);
        }
    }
    return 0;
}

/* The base trace with partitioning v: the new run section, the name
 * suffixed, no reference (the published figure belongs to the base
 * partitioning only).  NULL when out of memory. */
static cJSON *make_variant(const sweep *s, const axis_val *v)
{
    cJSON *t = cJSON_Duplicate(s->base, 1);
    if (!t)
        return NULL;
    cJSON *run = cJSON_GetObjectItemCaseSensitive(t, "run");
    cJSON_DeleteItemFromObjectCaseSensitive(run, "num_cores_per_replica");
    cJSON_DeleteItemFromObjectCaseSensitive(run, "input_partition_dims");
    cJSON *pd = cJSON_Duplicate(v->pd, 1);
    if (!pd || !cJSON_AddNumberToObject(run, "num_cores_per_replica", v->cpr)) {
        cJSON_Delete(pd);
        cJSON_Delete(t);
        return NULL;
    }
    cJSON_AddItemToObject(run, "input_partition_dims", pd);
    cJSON_DeleteItemFromObjectCaseSensitive(t, "reference");
    const cJSON *tn = cJSON_GetObjectItemCaseSensitive(s->base, "name");
    if (cJSON_IsString(tn)) {
        char nm[256];
        snprintf(nm, sizeof nm, "%.120s-pd%s", tn->valuestring, v->label);
        cJSON_ReplaceItemInObjectCaseSensitive(t, "name",
                                               cJSON_CreateString(nm));
    }
    return t;
}

/* The trace that partitioning v's runs read (make_variant with pd as its
 * input_partition_dims), on the largest slice with a batch that splits
 * over it, parsed into *g (free it either way). */
static tpu_status parse_variant(const sweep *s, const axis_val *v,
                                const cJSON *pd, const tpu_system *big,
                                const char *where, graph *g, tpu_error *err)
{
    axis_val w = *v;
    w.pd = (cJSON *)pd;
    cJSON *t = make_variant(s, &w);
    cJSON *run = cJSON_GetObjectItemCaseSensitive(t, "run");
    if (t) {
        cJSON_ReplaceItemInObjectCaseSensitive(
            t, "system", cJSON_CreateString(big->name));
        cJSON_ReplaceItemInObjectCaseSensitive(
            run, "global_batch", cJSON_CreateNumber(big->cores));
    }
    char *text = t ? cJSON_PrintUnformatted(t) : NULL;
    cJSON_Delete(t);
    if (!text) {
        memset(g, 0, sizeof *g);
        return tpu_fail(err, TPU_ERR_SYSTEM, "out of memory");
    }
    tpu_status rc = graph_parse(g, text, strlen(text), where, err);
    free(text);
    return rc;
}

/* One grid point's system, batch and partitioning, checked as `run`
 * checks them (graph_check_run on the trace `run` would read).  The
 * message names the axis that the failed check is about. */
static int check_point(const sweep *s, const graph *g, int ipd, int isys,
                       int ibat)
{
    int apd = axis_of(s, AX_PD), asys = axis_of(s, AX_SYSTEM),
        abat = axis_of(s, AX_BATCH);
    const char *sys = asys >= 0 ? s->ax[asys].v[isys].arg : s->g.system;
    int64_t batch = abat >= 0 ? (int64_t)strtod(s->ax[abat].v[ibat].arg, NULL)
                              : batch_for(s, sys);
    tpu_error err = {0};
    if (!graph_check_run(g, sys, batch, "", &err))
        return 0;
    /* err.msg is ": key: what" (the path given was empty). */
    const char *m = err.msg;
    if (strncmp(m, ": ", 2) == 0)
        m += 2;
    int blame = -1, ib = 0;
    if (strstr(m, "global_batch")) {
        if (abat >= 0)
            blame = abat, ib = ibat;
        else if (asys >= 0)
            blame = asys, ib = isys;
        else if (apd >= 0)
            blame = apd, ib = ipd;
    } else if (strstr(m, "partition_dims") ||
               strstr(m, "cores_per_replica")) {
        if (apd >= 0)
            blame = apd, ib = ipd;
        else if (asys >= 0)
            blame = asys, ib = isys;
    } else if (strncmp(m, "system", 6) == 0 && asys >= 0) {
        blame = asys, ib = isys;
    }
    char where[160], ctx[300] = "";
    if (blame >= 0)
        snprintf(where, sizeof where, "%s[%d]", s->ax[blame].jpath, ib);
    else
        snprintf(where, sizeof where, "trace");
    snprintf(ctx, sizeof ctx, " (grid point: %s%s, system %s, batch %lld)",
             apd >= 0 ? "partition_dims " : "",
             apd >= 0 ? s->ax[apd].v[ipd].label : "trace's partitioning",
             sys, (long long)batch);
    char msg[sizeof err.msg];
    shown(msg, sizeof msg, m);
    return cli_error(2, "%s: %s: %s%s", s->path, where, msg, ctx);
}

/* Every (partitioning, system, batch) of the grid.  Each partitioning's
 * trace is parsed as the file the runs will read, with the largest slice
 * and a batch that splits over it, so only the partitioning itself can
 * fail there (rank, labels, N and C factors, factors vs extents); the
 * real systems and batches are then checked point by point. */
static int check_points(const sweep *s)
{
    int apd = axis_of(s, AX_PD), asys = axis_of(s, AX_SYSTEM),
        abat = axis_of(s, AX_BATCH);
    int npd = apd >= 0 ? s->ax[apd].n : 1;
    int nsys = asys >= 0 ? s->ax[asys].n : 1;
    int nbat = abat >= 0 ? s->ax[abat].n : 1;
    const tpu_system *big = NULL;
    for (const tpu_system *t = tpu_systems(); t->name; t++)
        if (!big || t->cores > big->cores)
            big = t;
    for (int ip = 0; ip < npd; ip++) {
        graph vg, *g = (graph *)&s->g;
        int own = 0;
        if (apd >= 0) {
            const axis_val *v = &s->ax[apd].v[ip];
            char jp[64];
            snprintf(jp, sizeof jp, "grid.partition_dims[%d]", ip);
            if (big->cores % v->cpr != 0) {
                char m[160];
                snprintf(m, sizeof m, "%d cores per replica divide no slice "
                                      "(slices have a power of two cores, "
                                      "at most %d)",
                         v->cpr, big->cores);
                return bad(s, jp, m);
            }
            char where[300];
            snprintf(where, sizeof where, "%s: %s", s->path, jp);
            tpu_error err = {0};
            tpu_status rc = parse_variant(s, v, v->pd, big, where, &vg, &err);
            if (rc) {
                graph_free(&vg);
                char msg[sizeof err.msg];
                shown(msg, sizeof msg, err.msg);
                return cli_error(rc == TPU_ERR_SYSTEM ? 4 : 2, "%s", msg);
            }
            g = &vg;
            own = 1;
        }
        int rc = 0;
        for (int is = 0; is < nsys && !rc; is++)
            for (int ib = 0; ib < nbat && !rc; ib++)
                rc = check_point(s, g, ip, is, ib);
        if (own)
            graph_free(&vg);
        if (rc)
            return rc;
    }
    return 0;
}

/* The c-th system x batch pair of the grid, batch fastest: the grid's
 * values, or the base trace's where an axis is absent. */
static void combo_at(const sweep *s, const cJSON *sys, const cJSON *bat,
                     int c, const char **sname, int64_t *b)
{
    int nb = cJSON_IsArray(bat) ? cJSON_GetArraySize(bat) : 1;
    const cJSON *sv = cJSON_IsArray(sys) ? cJSON_GetArrayItem(sys, c / nb)
                                         : NULL;
    const cJSON *bv = cJSON_IsArray(bat) ? cJSON_GetArrayItem(bat, c % nb)
                                         : NULL;
    *sname = cJSON_IsString(sv) ? sv->valuestring : s->g.system;
    *b = cJSON_IsNumber(bv) ? (int64_t)bv->valuedouble
                            : batch_for(s, *sname);
}

/* graph_check_run's message without the empty file name it starts with
 * (the file is the sweep's variant trace, which is not written yet). */
static const char *strip_where(const char *msg)
{
    while (*msg == ':' || *msg == ' ')
        msg++;
    return msg;
}

/* "[1,4,2,1]" for the split expand_all has put into g. */
static void pd_label_now(const graph *g, int nsp, char *buf, size_t cap)
{
    size_t len = 0;
    for (int k = 0; k < nsp + 2 && len + 1 < cap; k++) {
        int w = snprintf(buf + len, cap - len, "%s%d", k ? "," : "[",
                         g->pdims[k]);
        if (w < 0)
            break;
        len += (size_t)w < cap - len ? (size_t)w : cap - len - 1;
    }
    if (len + 1 < cap)
        snprintf(buf + len, cap - len, "]");
}

/* "partition_dims": "all": every split of the first input's spatial
 * dimensions over 1 to SWEEP_ALL_MAX_CPR cores per replica (powers of two,
 * as every Cloud TPU slice has 2^k cores), each factor at most its
 * extent, that `run` accepts on every system and batch of the grid
 * (graph_check_run, on the base trace with the split in place).  Listed by
 * cores per replica, then the outer dimension's factor largest first:
 * [1,1,1,1], [1,2,1,1], [1,1,2,1], [1,4,1,1], [1,2,2,1], ... */
static int expand_all(sweep *s, const cJSON *grid, cJSON **out)
{
    graph *g = &s->g;
    int in = -1;
    for (int l = 0; l < g->n_layers && in < 0; l++)
        if (g->layers[l].op == GOP_INPUT)
            in = l;
    const gshape *sh = &g->layers[in].out;
    int nsp = sh->nsp;
    if (nsp < 1)
        return bad(s, "grid.partition_dims",
                   "\"all\": the first input has no spatial dimension");
    const cJSON *sys = cJSON_GetObjectItemCaseSensitive(grid, "system");
    const cJSON *bat = cJSON_GetObjectItemCaseSensitive(grid, "batch");
    /* The splits are chosen against these values, so they are checked
     * first, with the messages their axes give (parse_strings). */
    {
        const cJSON *e;
        int i = 0;
        char jp[64];
        cJSON_ArrayForEach(e, sys)
        {
            snprintf(jp, sizeof jp, "grid.system[%d]", i++);
            if (!cJSON_IsString(e) || !tpu_system_find(e->valuestring))
                return bad(s, jp, bad_system_msg);
        }
        i = 0;
        cJSON_ArrayForEach(e, bat)
        {
            snprintf(jp, sizeof jp, "grid.batch[%d]", i++);
            if (!batch_value_ok(e))
                return bad(s, jp, bad_batch_msg);
        }
    }
    int keep_rank = g->pdims_rank, keep_cpr = g->cores_per_replica;
    int keep_pd[sizeof g->pdims / sizeof g->pdims[0]];
    memcpy(keep_pd, g->pdims, sizeof keep_pd);
    cJSON *list = cJSON_CreateArray();
    if (!list)
        return cli_error(4, "out of memory");
    int maxe = 0;
    while ((2 << maxe) <= SWEEP_ALL_MAX_CPR)
        maxe++;
    int ns = cJSON_IsArray(sys) ? cJSON_GetArraySize(sys) : 1;
    int nb = cJSON_IsArray(bat) ? cJSON_GetArraySize(bat) : 1;
    int ncombo = ns * nb, ndropped = 0;
    int *combo_ok = calloc((size_t)ncombo, sizeof *combo_ok);
    if (!combo_ok) {
        cJSON_Delete(list);
        return cli_error(4, "out of memory");
    }
    for (int sum = 0; sum <= maxe; sum++) {
        /* exponents e[0..nsp-1] with this sum, outer dimension first */
        int e[GRAPH_MAX_SP] = {0};
        e[0] = sum;
        for (;;) {
            int ok = 1, f[GRAPH_MAX_SP];
            for (int d = 0; d < nsp; d++) {
                f[d] = 1 << e[d];
                ok &= f[d] <= sh->sp[d];
            }
            g->pdims_rank = nsp + 2;
            g->pdims[0] = g->pdims[nsp + 1] = 1;
            for (int d = 0; d < nsp; d++)
                g->pdims[1 + d] = f[d];
            g->cores_per_replica = 1 << sum;
            /* valid on every system x batch of the grid; a split that
             * is valid on some only is counted, so that the user hears
             * what the intersection dropped and which system rules a
             * split out (the first that refuses it, with its reason). */
            int valid_on = 0, refused = -1;
            tpu_error why_not = {0};
            for (int c = 0; ok && c < ncombo; c++) {
                const char *sname;
                int64_t b;
                combo_at(s, sys, bat, c, &sname, &b);
                tpu_error err = {0};
                if (graph_check_run(g, sname, b, "", &err) == TPU_OK) {
                    valid_on++;
                    combo_ok[c]++;
                } else if (refused < 0) {
                    refused = c;
                    why_not = err;
                }
            }
            if (ok && valid_on < ncombo) {
                if (valid_on > 0) {
                    if (ndropped < SWEEP_ALL_SHOW_DROPPED) {
                        char lbl[96];
                        pd_label_now(g, nsp, lbl, sizeof lbl);
                        const char *sname;
                        int64_t b;
                        combo_at(s, sys, bat, refused, &sname, &b);
                        fprintf(stderr,
                                "sweep: note: \"all\" drops %s: not valid "
                                "on %s at batch %lld (%s)\n",
                                lbl, sname, (long long)b,
                                strip_where(why_not.msg));
                    }
                    ndropped++;
                }
                ok = 0;
            }
            if (ok) {
                cJSON *d = cJSON_CreateArray();
                if (!d) {
                    cJSON_Delete(list);
                    list = NULL;
                    break;
                }
                for (int k = 0; k < nsp + 2; k++)
                    cJSON_AddItemToArray(d, cJSON_CreateNumber(g->pdims[k]));
                /* every other input the split applies to must take it */
                char why[64];
                cJSON *full = pd_from_simple(s, d, nsp + 2, why, sizeof why);
                if (full && pd_fits_inputs(s, full))
                    cJSON_AddItemToArray(list, d);
                else
                    cJSON_Delete(d);
                cJSON_Delete(full);
            }
            /* next composition of sum into nsp parts, e[0] descending */
            int k = nsp - 2;
            while (k >= 0 && e[k] == 0)
                k--;
            if (k < 0)
                break;
            e[k]--;
            int rest = 0;
            for (int j = k + 1; j < nsp; j++)
                rest += e[j];
            for (int j = k + 1; j < nsp; j++)
                e[j] = 0;
            e[k + 1] = rest + 1;
        }
        if (!list)
            break;
    }
    g->pdims_rank = keep_rank;
    g->cores_per_replica = keep_cpr;
    memcpy(g->pdims, keep_pd, sizeof keep_pd);
    if (!list) {
        free(combo_ok);
        return cli_error(4, "out of memory");
    }
    if (ndropped > SWEEP_ALL_SHOW_DROPPED)
        fprintf(stderr, "sweep: note: \"all\" drops %d more splits valid "
                        "on some systems or batches of the grid only\n",
                ndropped - SWEEP_ALL_SHOW_DROPPED);
    if (cJSON_GetArraySize(list) == 0) {
        /* Name what rules everything out: a system and batch on which no
         * split at all is valid, else say that the valid sets are
         * disjoint. */
        char msg[320] = "";
        for (int c = 0; c < ncombo && !msg[0]; c++)
            if (combo_ok[c] == 0) {
                const char *sname;
                int64_t b;
                combo_at(s, sys, bat, c, &sname, &b);
                snprintf(msg, sizeof msg,
                         "\"all\": no split of the first input is valid on "
                         "%s at batch %lld (remove it from the grid or "
                         "change the batch)",
                         sname, (long long)b);
            }
        if (!msg[0])
            snprintf(msg, sizeof msg,
                     "\"all\": every split of the first input is valid on "
                     "some system and batch of the grid but none on all "
                     "(%d dropped; sweep the systems separately)",
                     ndropped);
        free(combo_ok);
        cJSON_Delete(list);
        return bad(s, "grid.partition_dims", msg);
    }
    free(combo_ok);
    *out = list;
    return 0;
}

static int parse_sweep(sweep *s, const char *path)
{
    memset(s, 0, sizeof *s);
    s->path = path;
    cJSON *doc = NULL;
    int rc = read_doc(s, &doc);
    if (!rc)
        rc = check_shape(s, doc);
    const cJSON *grid = cJSON_GetObjectItemCaseSensitive(doc, "grid");
    const cJSON *pd = cJSON_GetObjectItemCaseSensitive(grid, "partition_dims");
    if (!rc)
        rc = load_trace(s, pd != NULL);
    if (!rc && cJSON_IsString(pd)) {
        cJSON *all = NULL;
        rc = expand_all(s, grid, &all);
        if (!rc)
            rc = parse_pd(s, all);
        cJSON_Delete(all);
    } else if (!rc && pd) {
        rc = parse_pd(s, pd);
    }
    const cJSON *sys = cJSON_GetObjectItemCaseSensitive(grid, "system");
    if (!rc && sys)
        rc = parse_strings(s, AX_SYSTEM, "system", "grid.system", sys);
    const cJSON *batch = cJSON_GetObjectItemCaseSensitive(grid, "batch");
    if (!rc && batch)
        rc = parse_strings(s, AX_BATCH, "batch", "grid.batch", batch);
    const cJSON *frz = cJSON_GetObjectItemCaseSensitive(grid, "freeze");
    if (!rc && frz)
        rc = parse_strings(s, AX_FREEZE, "freeze", "grid.freeze", frz);
    const cJSON *set = cJSON_GetObjectItemCaseSensitive(grid, "set");
    if (!rc && set) {
        const cJSON *e;
        cJSON_ArrayForEach(e, set)
        {
            char jp[128];
            snprintf(jp, sizeof jp, "grid.set.%.64s", e->string);
            if (strlen(e->string) >= 64 || !e->string[0] ||
                strspn(e->string, "abcdefghijklmnopqrstuvwxyz0123456789._") !=
                    strlen(e->string)) {
                char q[80];
                shown(q, sizeof q, e->string);
                snprintf(jp, sizeof jp, "grid.set.%s", q);
                rc = bad(s, jp, "expected a parameter key like "
                                "hbm.bandwidth_gbs");
            } else {
                rc = parse_strings(s, AX_SET, e->string, jp, e);
            }
            if (rc)
                break;
        }
    }
    if (!rc && s->x[0]) {
        int found = 0;
        for (int a = 0; a < s->naxes; a++)
            found |= strcmp(s->ax[a].name, s->x) == 0;
        if (!found)
            rc = bad(s, "x", "not an axis of the grid");
    }
    if (!rc)
        rc = check_sets(s);
    if (!rc)
        rc = check_points(s);
    cJSON_Delete(doc);
    return rc;
}

/* Where partitioning v's trace goes: OUT/traces/STEM-pdLABEL.json. */
static void variant_path(const sweep *s, const axis_val *v, const char *out,
                         char *buf, size_t cap)
{
    const char *base = strrchr(s->trace, '/');
    base = base ? base + 1 : s->trace;
    size_t stem = strlen(base);
    if (stem > 5 && strcmp(base + stem - 5, ".json") == 0)
        stem -= 5;
    if (stem > 200)
        stem = 200;
    snprintf(buf, cap, "%.900s/traces/%.*s-pd%s.json", out, (int)stem, base,
             v->label);
}

static int write_variants(sweep *s, const char *out)
{
    for (int a = 0; a < s->naxes; a++) {
        if (s->ax[a].kind != AX_PD)
            continue;
        for (int i = 0; i < s->ax[a].n; i++) {
            axis_val *v = &s->ax[a].v[i];
            variant_path(s, v, out, v->trace, sizeof v->trace);
            cJSON *t = make_variant(s, v);
            char *text = t ? cJSON_Print(t) : NULL;
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
            if (v->batch[0]) {
                c->argv[c->argc++] = "--batch";
                c->argv[c->argc++] = (char *)v->batch;
            }
        } else if (s->ax[a].kind == AX_BATCH) {
            c->argv[c->argc++] = "--batch";
            c->argv[c->argc++] = (char *)v->arg;
        } else if (s->ax[a].kind == AX_FREEZE) {
            c->argv[c->argc++] = "--freeze";
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
    int sig;           /* the signal that ended it (status -1) */
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
    /* global_batch last, so the earlier columns keep their places: with
     * a batch axis or scale_batch it differs from run to run. */
    fputs(",hbm_needed_bytes,global_batch\n", f);
    for (long long i = 0; i < nruns; i++) {
        int idx[SWEEP_MAX_AXES];
        run_index(s, i, idx);
        fprintf(f, "%04lld", i);
        for (int a = 0; a < s->naxes; a++) {
            fputc(',', f);
            csv_field(f, s->ax[a].v[idx[a]].label);
        }
        const run_out *o = &res[i];
        /* The batch the run was given (its command line, else the base
         * trace's); the report's, which is the same, when there is one. */
        int abat = axis_of(s, AX_BATCH), asys = axis_of(s, AX_SYSTEM);
        long long gb = s->g.global_batch;
        if (abat >= 0)
            gb = strtoll(s->ax[abat].v[idx[abat]].arg, NULL, 10);
        else if (asys >= 0 && s->ax[asys].v[idx[asys]].batch[0])
            gb = strtoll(s->ax[asys].v[idx[asys]].batch, NULL, 10);
        if (o->have)
            gb = (long long)o->r.global_batch;
        fprintf(f, ",%d", o->status);
        if (!o->have) {
            fprintf(f, ",%s,,,,", o->status == 3 ? "0" : "");
            for (int c = 0; c < CAT_COUNT; c++)
                fputc(',', f);
            fprintf(f, ",,%lld\n", gb);
            continue;
        }
        const emu_result *r = &o->r;
        int fits = r->fits && o->status == 0;
        int w = 0;
        for (int k = 1; k < r->cores; k++)
            if (r->per_core[k].step_time_s > r->per_core[w].step_time_s)
                w = k;
        fprintf(f, ",%d", fits);
        /* A step that does not fit was never timed: its report says 0,
         * which a spreadsheet would average in; an empty cell it skips. */
        if (fits)
            csv_num(f, r->step_time_s);
        else
            fputc(',', f);
        fprintf(f, ",%d,%d,", r->cores_per_replica, r->replicas);
        if (fits)
            fprintf(f, "%d", r->per_core[w].core);
        for (int c = 0; c < CAT_COUNT; c++) {
            if (fits)
                csv_num(f, r->per_core[w].breakdown_s[c]);
            else
                fputc(',', f);
        }
        csv_num(f, r->hbm_needed_bytes);
        fprintf(f, ",%lld\n", gb);
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
    long long all_series = nruns / per;
    int nser = (int)(all_series < SWEEP_MAX_SERIES ? all_series
                                                   : SWEEP_MAX_SERIES);
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
                } else if (s->ax[a].kind == AX_FREEZE) {
                    kp = "freeze";
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
    /* Several values at one x (partitionings with the same cores per
     * replica, as "all" gives): the line shows the fastest of them. */
    int collapsed = 0;
    for (int k = 0; k < used; k++) {
        double *sx = xs + (size_t)k * (size_t)per;
        double *sy = ys + (size_t)k * (size_t)per;
        int m = 0;
        for (int j = 0; j < ser[k].n; j++) {
            if (m > 0 && sx[m - 1] == sx[j]) {
                collapsed = 1;
                if (isnan(sy[m - 1]) || sy[j] < sy[m - 1])
                    sy[m - 1] = sy[j];
                continue;
            }
            sx[m] = sx[j];
            sy[m] = sy[j];
            m++;
        }
        ser[k].n = m;
    }
    char path[1100], title[256], xl[128];
    snprintf(path, sizeof path, "%.900s/step_time.png", out);
    snprintf(title, sizeof title, "sweep %s: step time%s", s->name,
             collapsed ? " (fastest at each x)" : "");
    static const char *const xlabels[] = {
        "cores per replica (partition_dims)", "cores (system)",
        "global batch", NULL, "--freeze list (index in grid.freeze)"};
    if (s->ax[xa].kind == AX_SET)
        snprintf(xl, sizeof xl, "%s", s->ax[xa].name);
    else
        snprintf(xl, sizeof xl, "%s", xlabels[s->ax[xa].kind]);
    tpu_error err = {0};
    tpu_status st = chart_lines_png(path, title, xl, "step time (s)", ser,
                                    used, &err);
    if (st != TPU_OK) {
        free(xs);
        free(ys);
    }
    if (st == TPU_ERR_INPUT) {
        /* No run fitted or succeeded: nothing to draw is not an error of
         * the sweep.  A chart an earlier sweep drew here would pass for
         * this one's: it goes (cli_sweep removed it before the runs; a
         * file that appeared meanwhile is the sweep's name all the same). */
        unlink(path);
        printf("chart: none (no run to plot)\n");
        return 0;
    }
    if (st)
        return cli_fail(&err);
    printf("chart: %s\n", path);
    /* The x axis spans every swept value (emu/chart.c keeps the place of
     * a point without a value); those where no drawn line has a point are
     * named here, so an empty stretch of the axis is explained. */
    {
        char list[512] = "";
        size_t len = 0;
        int missing = 0;
        for (int v = 0; v < per; v++) {
            double x = s->ax[xa].v[v].x;
            int plotted = 0;
            for (int k = 0; k < used && !plotted; k++)
                for (int j = 0; j < ser[k].n && !plotted; j++)
                    plotted = ser[k].x[j] == x && isfinite(ser[k].y[j]);
            if (plotted)
                continue;
            int dup = 0; /* splits sharing an x are one point */
            for (int u = 0; u < v && !dup; u++)
                dup = s->ax[xa].v[u].x == x;
            if (dup)
                continue;
            missing++;
            char lab[120];
            if (s->ax[xa].kind == AX_PD)
                snprintf(lab, sizeof lab, "%d", s->ax[xa].v[v].cpr);
            else
                snprintf(lab, sizeof lab, "%s", s->ax[xa].v[v].label);
            int wr = snprintf(list + len, sizeof list - len, "%s%s",
                              len ? ", " : "", lab);
            if (wr > 0 && (size_t)wr < sizeof list - len)
                len += (size_t)wr;
        }
        if (missing)
            printf("chart: no point at %s %s (no run there fits or "
                   "succeeded%s)\n",
                   s->ax[xa].kind == AX_PD ? "cores per replica" : s->ax[xa].name,
                   list, used < all_series ? " among the lines drawn" : "");
    }
    free(xs);
    free(ys);
    if (all_series > used)
        printf("chart: %d of %lld lines drawn (at most %d: the first in run "
               "order); every run is in results.csv and the ranking\n",
               used, all_series, SWEEP_MAX_SERIES);
    return 0;
}
/* The runs that fit, fastest first by examples per second (the step
 * time when every run has the same batch): what a user of the sweep
 * wants to read first.  The first SWEEP_RANK_ROWS rows; all of them are
 * in results.csv. */
#define SWEEP_RANK_ROWS 12

typedef struct {
    long long run;
    double eps; /* examples per second */
} ranked;

static int ranked_cmp(const void *pa, const void *pb)
{
    const ranked *a = pa, *b = pb;
    if (a->eps != b->eps)
        return a->eps < b->eps ? 1 : -1;
    return a->run < b->run ? -1 : a->run > b->run;
}

static int print_ranking(const sweep *s, long long nruns, const run_out *res)
{
    ranked *rk = malloc(sizeof *rk * (size_t)(nruns + 1));
    if (!rk)
        return cli_error(4, "out of memory");
    long long n = 0, nofit = 0;
    for (long long i = 0; i < nruns; i++) {
        const run_out *o = &res[i];
        if (o->have && o->status == 0 && o->r.fits && o->r.step_time_s > 0) {
            rk[n].run = i;
            rk[n].eps = (double)o->r.global_batch / o->r.step_time_s;
            n++;
        } else if (o->status == 3 || (o->status == 0 && o->have)) {
            nofit++; /* finished, and does not fit */
        }
    }
    if (n == 0) {
        free(rk);
        /* "no run fits" only when that is what every run said: failed
         * runs are no finding about the hardware. */
        if (nofit == nruns)
            printf("no run fits\n");
        else if (nofit == 0)
            printf("no run succeeded (all %lld failed)\n", nruns);
        else
            printf("no run succeeded: %lld do not fit, %lld failed\n", nofit,
                   nruns - nofit);
        return 0;
    }
    qsort(rk, (size_t)n, sizeof *rk, ranked_cmp);
    printf("\nfastest first (examples per second; %lld of %lld runs fit):\n",
           n, nruns);
    /* each swept column as wide as its name and its values in
     * characters (a label is UTF-8: "ü" is two bytes and one column), so
     * nothing is cut and the columns line up */
    int w[SWEEP_MAX_AXES];
    for (int a = 0; a < s->naxes; a++) {
        w[a] = font_text_cells(s->ax[a].name);
        for (int v = 0; v < s->ax[a].n; v++)
            if (font_text_cells(s->ax[a].v[v].label) > w[a])
                w[a] = font_text_cells(s->ax[a].v[v].label);
    }
    printf("%-6s", "run");
    for (int a = 0; a < s->naxes; a++)
        if (s->ax[a].n > 1)
        {
            putchar(' ');
            cli_put_cell(s->ax[a].name, w[a]);
        }
    printf(" %10s %12s %10s %8s %9s\n", "step ms", "examples/s", "per core",
           "cores/r", "HBM GiB");
    for (long long k = 0; k < n && k < SWEEP_RANK_ROWS; k++) {
        long long i = rk[k].run;
        const emu_result *r = &res[i].r;
        int idx[SWEEP_MAX_AXES];
        run_index(s, i, idx);
        printf("%04lld  ", i);
        for (int a = 0; a < s->naxes; a++)
            if (s->ax[a].n > 1)
            {
                putchar(' ');
                cli_put_cell(s->ax[a].v[idx[a]].label, w[a]);
            }
        printf(" %10.3f %12.1f %10.2f %8d %9.2f\n", r->step_time_s * 1e3,
               rk[k].eps, rk[k].eps / (r->cores > 0 ? r->cores : 1),
               r->cores_per_replica, r->hbm_needed_bytes / 1073741824.0);
    }
    if (n > SWEEP_RANK_ROWS)
        printf("(%lld more in results.csv)\n", n - SWEEP_RANK_ROWS);
    free(rk);
    return 0;
}

/* --bin must be a program this process can start: a missing or
 * non-executable one would otherwise fail every run, one log at a time. */
static int check_bin(const char *bin)
{
    char q[300];
    shown(q, sizeof q, bin);
    struct stat st;
    if (!bin[0] || has_ctrl(bin) || strlen(bin) >= 1000)
        return cli_error(2, "sweep: --bin %s: unusable path", q);
    if (stat(bin, &st) != 0)
        return cli_error(2, "sweep: --bin %s: %s", q, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return cli_error(2, "sweep: --bin %s: not a regular file", q);
    if (access(bin, X_OK) != 0)
        return cli_error(2, "sweep: --bin %s: not executable", q);
    return 0;
}

/* Every file the sweep (or, with --print-commands, its commands) writes
 * in out: refused, before anything is written, when it is one of the
 * sweep's own inputs (the sweep file, the base trace, the program the runs
 * execute).  outfile_same compares inodes, so a symlink, a hard link or a
 * "./" spelling of the same file is caught too: otherwise the sweep file
 * named DIR/commands.txt or a base trace at DIR/reports/0000.json is
 * silently replaced while the runs still read it. */
static int check_clobber(const sweep *s, const char *out, const char *bin,
                         long long nruns)
{
    const struct {
        const char *path, *what;
    } in[] = {{s->path, "the sweep file"},
              {s->trace, "the base trace"},
              {bin, "the program the runs execute (--bin)"}};
    const int nin = (int)(sizeof in / sizeof in[0]);
    char p[2200];
    for (long long k = -3; k < 2 * nruns + SWEEP_MAX_VALUES; k++) {
        if (k == -3)
            snprintf(p, sizeof p, "%.900s/commands.txt", out);
        else if (k == -2)
            snprintf(p, sizeof p, "%.900s/results.csv", out);
        else if (k == -1)
            snprintf(p, sizeof p, "%.900s/step_time.png", out);
        else if (k < nruns)
            snprintf(p, sizeof p, "%.900s/reports/%04lld.json", out, k);
        else if (k < 2 * nruns)
            snprintf(p, sizeof p, "%.900s/logs/%04lld.log", out, k - nruns);
        else {
            /* the partitionings' traces, when there is such an axis */
            int apd = axis_of(s, AX_PD);
            long long v = k - 2 * nruns;
            if (apd < 0 || v >= s->ax[apd].n)
                break;
            variant_path(s, &s->ax[apd].v[v], out, p, sizeof p);
        }
        for (int i = 0; i < nin; i++)
            if (outfile_same(p, in[i].path)) {
                char q[1000];
                shown(q, sizeof q, p);
                return cli_error(2, "sweep --out: %s is %s; refusing to "
                                    "overwrite it (give the sweep another "
                                    "--out directory)",
                                 q, in[i].what);
            }
    }
    return 0;
}

/* path made absolute against the working directory (a leading "./"
 * dropped), in place; 0, or the exit status with the error printed. */
static int make_absolute(char *path, size_t cap, const char *what)
{
    char cwd[PATH_MAX] = ""; /* stays empty for an absolute path */
    if (path[0] != '/' && !getcwd(cwd, sizeof cwd))
        return cli_error(4, "sweep: cannot read the working directory (%s), "
                            "needed to make %s absolute",
                         strerror(errno), what);
    const char *rel = path;
    while (cwd[0] && rel[0] == '.' && rel[1] == '/') {
        rel += 2;
        while (*rel == '/')
            rel++;
    }
    char abs_p[PATH_MAX + 2200];
    int w = cwd[0] ? snprintf(abs_p, sizeof abs_p, "%s/%s", cwd, rel)
                   : snprintf(abs_p, sizeof abs_p, "%s", path);
    if (w < 0 || (size_t)w >= cap || (size_t)w >= sizeof abs_p)
        return cli_error(2, "sweep: %s: the absolute path is too long", what);
    /* "DIR/" names DIR: no "DIR//reports/0000.json" in the commands */
    while (w > 1 && abs_p[w - 1] == '/')
        abs_p[--w] = 0;
    memcpy(path, abs_p, (size_t)w + 1);
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
    const char *jobs_as = NULL, *jobs_was = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--jobs") == 0 || strcmp(argv[i], "-j") == 0) {
            /* -j and --jobs are one option: given twice in any spelling
             * is refused, as every repeated option is (emu/cli.h). */
            if (jobs_as) {
                char q[80];
                shown(q, sizeof q, jobs_was);
                return cli_error(2, "%s: given twice ('%s %s' before; -j "
                                    "and --jobs are the same option); it "
                                    "takes one value",
                                 argv[i], jobs_as, q);
            }
            jobs_as = argv[i];
            const char *v = cli_value(argc, argv, &i);
            if (!v || cli_int("--jobs", v, 1, 4096, &jobs))
                return 2;
            jobs_was = v;
        } else if (strcmp(argv[i], "--out") == 0) {
            if (!(out_opt = cli_value(argc, argv, &i)))
                return 2;
        } else if (strcmp(argv[i], "--bin") == 0) {
            if (!(bin_opt = cli_value(argc, argv, &i)))
                return 2;
        } else if (strcmp(argv[i], "--print-commands") == 0) {
            print_only = 1;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            char q[80];
            shown(q, sizeof q, argv[i]);
            return cli_error(2, "sweep: unknown option '%s' (see tpuemu sweep "
                                "--help)",
                             q);
        } else if (!file) {
            file = argv[i];
        } else {
            return cli_error(2, "sweep: one sweep file expected");
        }
    }
    if (!file)
        return cli_error(2, "sweep: usage: tpuemu sweep SWEEP.json [--jobs N] "
                            "[--print-commands] [--out DIR] [--bin TPUEMU]");
    if (has_ctrl(file))
        return cli_error(2, "sweep: the sweep file's name has control "
                            "characters");
    if (jobs == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        jobs = n > 0 ? n : 1;
    }
    if (out_opt && (!out_opt[0] || strlen(out_opt) > 900 ||
                    has_ctrl(out_opt)))
        return cli_error(2, "sweep: --out: unusable directory name (empty, "
                            "too long or control characters)");
    char out[1024], bin[1024];
    if (bin_opt) {
        if (check_bin(bin_opt))
            return 2;
        snprintf(bin, sizeof bin, "%s", bin_opt);
    } else {
        ssize_t n = readlink("/proc/self/exe", bin, sizeof bin - 1);
        if (n <= 0)
            return cli_error(4, "sweep: cannot find this binary "
                                "(/proc/self/exe); use --bin");
        bin[n] = 0;
    }
    sweep s;
    int rc = parse_sweep(&s, file);
    if (rc) {
        sweep_free(&s);
        return rc;
    }
    long long nruns = count_runs(&s);
    if (out_opt)
        snprintf(out, sizeof out, "%s", out_opt);
    else
        snprintf(out, sizeof out, "sweep-%s", s.name);
    /* The output directory itself: an existing directory, or a new one in
     * an existing directory (as every output path: a missing directory is
     * bad usage, exit 2, not created). */
    {
        struct stat st;
        if (stat(out, &st) == 0) {
            if (!S_ISDIR(st.st_mode)) {
                sweep_free(&s);
                return cli_error(2, "sweep --out %s: exists and is not a "
                                    "directory", out);
            }
        } else {
            char parent[1024];
            snprintf(parent, sizeof parent, "%s", out);
            char *slash = strrchr(parent, '/');
            while (slash && slash > parent && slash[1] == 0) {
                *slash = 0; /* "dir/" names dir */
                slash = strrchr(parent, '/');
            }
            if (slash)
                *(slash == parent ? slash + 1 : slash) = 0;
            else
                snprintf(parent, sizeof parent, ".");
            if (stat(parent, &st) != 0 || !S_ISDIR(st.st_mode)) {
                sweep_free(&s);
                return cli_error(2, "sweep --out %s: %s is not an existing "
                                    "directory", out, parent);
            }
        }
    }
    /* Absolute from here on: --print-commands lines run from anywhere, and
     * every path the runs get (the binary, the base trace, the reports)
     * is one. */
    rc = make_absolute(out, 901, "--out");
    if (!rc)
        rc = make_absolute(s.trace, sizeof s.trace, "the base trace");
    if (!rc)
        rc = make_absolute(bin, sizeof bin, "--bin");
    /* No output may be one of the inputs. */
    if (!rc)
        rc = check_clobber(&s, out, bin, nruns);
    if (rc) {
        sweep_free(&s);
        return rc;
    }
    /* Only now, with everything checked, does anything get written. */
    char sub[1100];
    static const char *const dirs[] = {"traces", "reports", "logs"};
    for (size_t d = 0; d < 3; d++) {
        snprintf(sub, sizeof sub, "%.900s/%s", out, dirs[d]);
        if (mkdir_p(sub) != 0) {
            int e = errno;
            sweep_free(&s);
            return cli_error(e == ENOTDIR || e == EEXIST ? 2 : 4,
                             "%s: cannot create: %s", sub, strerror(e));
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
    /* results.csv and the chart of an earlier sweep into the same
     * directory must not stand for this one if it stops before gathering
     * or draws no chart (no run fits or succeeds). */
    snprintf(sub, sizeof sub, "%.900s/results.csv", out);
    unlink(sub);
    snprintf(sub, sizeof sub, "%.900s/step_time.png", out);
    unlink(sub);

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
    int spawn_errno = 0;
    while (done < nruns) {
        while (running < jobs && next < nruns) {
            build_cmd(&s, bin, out, next, cmd);
            /* A stale report of an earlier sweep must not stand in for a
             * run that fails before writing its own. */
            unlink(cmd->report);
            snprintf(sub, sizeof sub, "%.900s/logs/%04lld.log", out, next);
            fflush(stdout);
            fflush(stderr);
            pid_t pid = spawn(cmd, sub);
            if (pid < 0) {
                if (!spawn_errno)
                    spawn_errno = errno;
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
                res[i].sig = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
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
    char fail_why[600] = "";
    for (long long i = 0; i < nruns; i++) {
        build_cmd(&s, bin, out, i, cmd);
        char why[600] = "";
        if (res[i].status == 0 || res[i].status == 3) {
            tpu_error e2 = {0};
            res[i].have = report_read(&res[i].r, cmd->report, &e2) == TPU_OK;
            if (!res[i].have && res[i].status == 0) {
                /* Exit 0 without a report it could read: not a tpuemu
                 * run (a wrong --bin) or a broken one. */
                char m[400];
                shown(m, sizeof m, e2.msg);
                res[i].status = 2;
                snprintf(why, sizeof why, "exited 0 but its report cannot "
                                          "be read (%s)",
                         m);
            }
        }
        if (res[i].status == 3)
            nofit++;
        else if (res[i].status != 0) {
            failed++;
            if (!first_fail) {
                first_fail = res[i].status > 0 ? res[i].status : 4;
                fail_run = i;
                if (why[0])
                    snprintf(fail_why, sizeof fail_why, "%s", why);
                else if (res[i].status == -1)
                    snprintf(fail_why, sizeof fail_why,
                             "was killed by signal %d", res[i].sig);
                else if (res[i].status == -2)
                    snprintf(fail_why, sizeof fail_why,
                             "could not be started (%s)",
                             strerror(spawn_errno ? spawn_errno : EAGAIN));
                else
                    snprintf(fail_why, sizeof fail_why, "failed (exit %d)",
                             res[i].status);
            }
        }
    }
    rc = gather(&s, out, nruns, res);
    if (!rc)
        rc = chart(&s, out, nruns, res);
    if (!rc)
        rc = print_ranking(&s, nruns, res);
    printf("%lld runs: %lld done, %d do not fit, %d failed\n", nruns,
           nruns - nofit - failed, nofit, failed);
    fflush(stdout);
    if (fail_run >= 0 && !rc) {
        char q[1000];
        shown(q, sizeof q, out);
        rc = cli_error(first_fail, "sweep: run %04lld %s: see "
                                   "%s/logs/%04lld.log",
                       fail_run, fail_why, q, fail_run);
    }
    for (long long i = 0; i < nruns; i++)
        emu_result_free(&res[i].r);
    free(res);
    free(pids);
    free(cmd);
    sweep_free(&s);
    return rc;
}
