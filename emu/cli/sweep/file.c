/* tpuemu sweep: the sweep file (emu/cli/sweep/sweep.h).  Read whole as JSON
 * with no duplicate key, its top level and the shape of its grid checked
 * (axes, their lengths, the number of runs) before the base trace is read;
 * then each axis parsed into values with their command-line arguments,
 * labels and chart positions, and every value checked as `run` checks
 * it.  A bad sweep is one `tpuemu: error: SWEEP.json: json.path: ...`
 * line and exit 2. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "emu/cli/cli.h"
#include "emu/cli/sweep/sweep.h"
#include "emu/params.h"
#include "emu/rfile.h"

const char sweep_bad_batch_msg[] = "expected a positive integer (at most "
                                   "1048576, as run --batch takes)";
const char sweep_bad_system_msg[] = "unknown system (v2-2, v2-8 ... v2-512, "
                                    "v3-2, v3-8 ... v3-2048)";

void sweep_free(sweep *s)
{
    for (int a = 0; a < s->naxes; a++) {
        for (int i = 0; i < s->ax[a].n; i++)
            cJSON_Delete(s->ax[a].v[i].pd);
        free(s->ax[a].v);
    }
    s->naxes = 0;
    free(s->pd_valid);
    s->pd_valid = NULL;
    cJSON_Delete(s->base);
    s->base = NULL;
    if (s->have_g)
        graph_free(&s->g);
    s->have_g = 0;
}

/* The one place the parser's errors are worded: the form's namer says
 * where, or a file's "SWEEP.json: jpath: what". */
static int vfail(const sweep *s, int code, const char *jpath,
                 const char *fmt, va_list ap)
{
    char what[2048], line[4096];
    vsnprintf(what, sizeof what, fmt, ap);
    if (s->namer)
        s->namer->say(s->namer, jpath, what, line, sizeof line);
    else if (jpath)
        snprintf(line, sizeof line, "%s: %s: %s", s->path, jpath, what);
    else
        snprintf(line, sizeof line, "%s: %s", s->path, what);
    return cli_error(code, "%s", line);
}

int sweep_fail(const sweep *s, int code, const char *jpath,
               const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = vfail(s, code, jpath, fmt, ap);
    va_end(ap);
    return rc;
}

int sweep_bad(const sweep *s, const char *jpath, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = vfail(s, 2, jpath, fmt, ap);
    va_end(ap);
    return rc;
}

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

void sweep_num_text(char *buf, size_t cap, double v)
{
    for (int p = 15; p <= 17; p++) {
        snprintf(buf, cap, "%.*g", p, v);
        if (strtod(buf, NULL) == v)
            return;
    }
}

int sweep_has_ctrl(const char *str)
{
    for (; *str; str++)
        if ((unsigned char)*str < 0x20 || *str == 0x7f)
            return 1;
    return 0;
}

void sweep_out_path(char *buf, size_t cap, const char *out, const char *rest)
{
    snprintf(buf, cap, "%.*s/%s", SWEEP_OUT_MAX, out, rest);
}

long long sweep_count_runs(const sweep *s)
{
    long long n = 1;
    for (int a = 0; a < s->naxes && n <= SWEEP_MAX_RUNS; a++)
        n *= s->ax[a].n;
    return n;
}

void sweep_run_index(const sweep *s, long long i, int *idx)
{
    for (int a = s->naxes - 1; a >= 0; a--) {
        idx[a] = (int)(i % s->ax[a].n);
        i /= s->ax[a].n;
    }
}

int sweep_skipped(const sweep *s, long long i)
{
    int apd = sweep_axis_of(s, AX_PD);
    if (!s->pd_valid || apd < 0)
        return 0;
    int idx[SWEEP_MAX_AXES];
    sweep_run_index(s, i, idx);
    int asys = sweep_axis_of(s, AX_SYSTEM), abat = sweep_axis_of(s, AX_BATCH);
    int nb = abat >= 0 ? s->ax[abat].n : 1;
    long long c = (long long)(asys >= 0 ? idx[asys] : 0) * nb +
                  (abat >= 0 ? idx[abat] : 0);
    return !s->pd_valid[(long long)idx[apd] * s->pd_ncombo + c];
}

int sweep_axis_of(const sweep *s, sweep_kind k)
{
    for (int a = 0; a < s->naxes; a++)
        if (s->ax[a].kind == k)
            return a;
    return -1;
}

const sweep_val *sweep_val_of(const sweep *s, int a, const int *idx)
{
    return &s->ax[a].v[idx[a]];
}

int64_t sweep_batch_for(const sweep *s, const char *sys)
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

int sweep_scaled_ok(const sweep *s, const char *jp, const char *sys)
{
    const tpu_system *sy = tpu_system_find(sys);
    int64_t b = sweep_batch_for(s, sys);
    if (!s->scale_batch || !sy || (b > 0 && b <= SWEEP_MAX_BATCH))
        return 0;
    char m[200];
    if (b > 0) /* checked here, not by the run it would start */
        snprintf(m, sizeof m,
                 "scale_batch: %lld examples on %s, scaled to %d cores, is "
                 "%lld, above run --batch's 1048576",
                 (long long)s->g.global_batch, s->g.system, sy->cores,
                 (long long)b);
    else
        snprintf(m, sizeof m,
                 "scale_batch: %lld examples on %s, scaled to %d cores, is "
                 "not a whole batch",
                 (long long)s->g.global_batch, s->g.system, sy->cores);
    return sweep_bad(s, jp, "%s", m);
}

int sweep_batch_ok(const cJSON *e)
{
    return cJSON_IsNumber(e) && isfinite(e->valuedouble) &&
           e->valuedouble >= 1 && e->valuedouble == floor(e->valuedouble) &&
           e->valuedouble <= SWEEP_MAX_BATCH;
}

/* ---- the file and its shape ------------------------------------------- */

/* A key from the file as a message names it (one line, cli_shown): as
 * written when plain (letters, digits, '.', '_', '-', UTF-8), else in
 * double quotes, so that an empty key ("" or "\u0000...", which cJSON
 * reads as "") or one holding ": " still reads as one JSON path
 * (fuzz_sweep found "SWEEP.json: : unknown key"). */
static void key_shown(char *buf, size_t cap, const char *key)
{
    int plain = key[0] != 0;
    for (const unsigned char *u = (const unsigned char *)key; *u; u++)
        if (*u < 0x80 && !strchr("abcdefghijklmnopqrstuvwxyz"
                                 "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                 "0123456789._-", *u))
            plain = 0;
    if (plain || cap < 8) {
        cli_shown(buf, cap, key);
        return;
    }
    buf[0] = '"';
    cli_shown(buf + 1, cap - 2, key);
    size_t n = strlen(buf);
    buf[n] = '"';
    buf[n + 1] = 0;
}

/* Where the JSON white space from text[pos] ends, within len bytes: the
 * text is len bytes, not a C string (fuzz_sweep found strspn reading past
 * the end of text that has no NUL after it). */
static size_t skip_ws(const char *text, size_t pos, size_t len)
{
    while (pos < len && (text[pos] == ' ' || text[pos] == '\t' ||
                         text[pos] == '\r' || text[pos] == '\n'))
        pos++;
    return pos;
}

/* The sweep's text as JSON: the whole text one value, no duplicate keys
 * (text is the file's, or the command-line form's, emu/cli/sweep/cli.c). */
static int parse_doc(sweep *s, const char *text, size_t len, cJSON **out)
{
    size_t pos = skip_ws(text, 0, len);
    if (pos == len)
        return sweep_bad(s, NULL, "empty file, expected a JSON object");
    const char *end = NULL;
    cJSON *doc = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    pos = (end >= text && end <= text + len) ? (size_t)(end - text) : 0;
    if (doc)
        pos = skip_ws(text, pos, len);
    if (!doc || pos < len) {
        int line, col, depth;
        char why[200];
        rfile_json_where(text, len, pos, &line, &col, &depth);
        if (doc)
            snprintf(why, sizeof why, "not valid JSON: unexpected text after "
                     "the top-level value at line %d, column %d", line, col);
        else
            rfile_json_error(text, len, pos, why, sizeof why);
        cJSON_Delete(doc);
        return sweep_bad(s, NULL, "%s", why);
    }
    char jp[512] = "";
    int oom = 0;
    if (rfile_json_find_dup(doc, jp, sizeof jp, key_shown, &oom)) {
        cJSON_Delete(doc);
        if (oom)
            return cli_error(4, "out of memory");
        return sweep_bad(s, jp, "duplicate key");
    }
    *out = doc;
    return 0;
}

/* The sweep file as JSON. */
static int read_doc(sweep *s, cJSON **out)
{
    tpu_error err = {0};
    size_t len = 0;
    char *text = slurp(s->path, &len, &err);
    if (!text)
        return cli_fail(&err);
    int rc = parse_doc(s, text, len, out);
    free(text);
    return rc;
}

static int in_list(const char *name, const char *const *list)
{
    for (const char *const *k = list; *k; k++)
        if (strcmp(name, *k) == 0)
            return 1;
    return 0;
}

static int is_format(const cJSON *f, const char *want)
{
    return cJSON_IsString(f) && strcmp(f->valuestring, want) == 0;
}

/* A JSON object, not a trace or report given by mistake, with only the
 * sweep file's keys.  The format is looked at first: a trace's or
 * report's keys would otherwise be reported as unknown sweep keys. */
static int check_top_keys(const sweep *s, const cJSON *doc)
{
    static const char *const top[] = {"format", "name", "description",
                                      "trace",  "grid", "x",
                                      "scale_batch", NULL};
    if (!cJSON_IsObject(doc))
        return sweep_bad(s, "(top level)", "expected a JSON object");
    const cJSON *f0 = cJSON_GetObjectItemCaseSensitive(doc, "format");
    if (is_format(f0, "tpuemu-trace/1"))
        return sweep_bad(s, "format", "this is a trace (tpuemu run reads "
                                      "it), not a sweep file; a sweep file "
                                      "names its trace in \"trace\" "
                                      "(docs/SWEEPS.md)");
    if (is_format(f0, "tpuemu-report/1"))
        return sweep_bad(s, "format",
                         "this is a tpuemu report, not a sweep file");
    const cJSON *e;
    cJSON_ArrayForEach(e, doc)
    {
        if (in_list(e->string, top))
            continue;
        char q[80];
        key_shown(q, sizeof q, e->string);
        return sweep_bad(s, q, "unknown key (expected one of: format, name, "
                               "description, trace, grid, x, scale_batch)");
    }
    return 0;
}

static int good_name(const char *n, size_t cap)
{
    return n[0] && strlen(n) < cap && n[0] != '.' &&
           strspn(n, "abcdefghijklmnopqrstuvwxyz"
                     "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                     "0123456789._-") == strlen(n);
}

/* The top-level values' types, in the order a reader meets them. */
static int check_top_values(sweep *s, const cJSON *doc)
{
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(doc, "format");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(doc, "name");
    const cJSON *desc = cJSON_GetObjectItemCaseSensitive(doc, "description");
    const cJSON *trace = cJSON_GetObjectItemCaseSensitive(doc, "trace");
    const cJSON *grid = cJSON_GetObjectItemCaseSensitive(doc, "grid");
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(doc, "x");
    const cJSON *sb = cJSON_GetObjectItemCaseSensitive(doc, "scale_batch");
    if (!is_format(fmt, "tpuemu-sweep/1"))
        return sweep_bad(s, "format",
                         fmt ? "expected \"tpuemu-sweep/1\""
                             : "missing (expected \"tpuemu-sweep/1\")");
    if (!cJSON_IsString(name) || !good_name(name->valuestring, sizeof s->name))
        return sweep_bad(s, "name", "expected a short name of letters, "
                                    "digits, '.', '_', '-' (not starting "
                                    "with '.')");
    if (desc && !cJSON_IsString(desc))
        return sweep_bad(s, "description", "expected a string");
    if (!cJSON_IsString(trace) || !trace->valuestring[0])
        return sweep_bad(s, "trace",
                         trace ? "expected the path of the base trace"
                               : "missing (the path of the base trace)");
    if (sweep_has_ctrl(trace->valuestring))
        return sweep_bad(s, "trace", "control characters are not allowed");
    if (!cJSON_IsObject(grid))
        return sweep_bad(s, "grid", grid ? "expected an object of axes"
                                         : "missing (an object of axes)");
    if (x && (!cJSON_IsString(x) || !x->valuestring[0] ||
              strlen(x->valuestring) >= sizeof s->x))
        return sweep_bad(s, "x", "expected the name of a grid axis");
    if (sb && !cJSON_IsBool(sb))
        return sweep_bad(s, "scale_batch", "expected true or false");
    s->scale_batch = cJSON_IsTrue(sb);
    if (s->scale_batch && cJSON_GetObjectItemCaseSensitive(grid, "batch"))
        return sweep_bad(s, "scale_batch", "a batch axis sets the batch "
                                           "itself: use one or the other");
    snprintf(s->name, sizeof s->name, "%s", name->valuestring);
    if (x)
        snprintf(s->x, sizeof s->x, "%s", x->valuestring);
    return 0;
}

/* The trace is relative to the sweep file's directory. */
static int resolve_trace(sweep *s, const char *trace)
{
    const char *slash = strrchr(s->path, '/');
    int w;
    if (trace[0] == '/' || !slash)
        w = snprintf(s->trace, sizeof s->trace, "%s", trace);
    else
        w = snprintf(s->trace, sizeof s->trace, "%.*s/%s",
                     (int)(slash - s->path), s->path, trace);
    if (w < 0 || (size_t)w >= sizeof s->trace)
        return sweep_bad(s, "trace", "path too long");
    if (sweep_has_ctrl(s->trace))
        return sweep_bad(s, "trace", "the sweep file's directory has "
                                     "control characters");
    return 0;
}

/* One axis's list of values at jp, counted into *naxes and *runs. */
static int count_list(const sweep *s, const cJSON *l, const char *jp,
                      int *naxes, double *runs)
{
    if (++*naxes > SWEEP_MAX_AXES)
        return sweep_bad(s, jp, "more than %d axes (partition_dims, system, "
                                "batch and each set key count one)",
                         SWEEP_MAX_AXES);
    int n = cJSON_GetArraySize(l);
    if (!cJSON_IsArray(l) || n < 1)
        return sweep_bad(s, jp, "expected a non-empty list of values");
    if (n > SWEEP_MAX_VALUES)
        return sweep_bad(s, jp, "%d values, more than the limit of %d", n,
                         SWEEP_MAX_VALUES);
    *runs *= n;
    return 0;
}

/* Grid entry e: a known axis (set: one axis per key), its lists of
 * 1..SWEEP_MAX_VALUES values counted into *naxes and *runs. */
static int count_axis(const sweep *s, const cJSON *e, int *naxes,
                      double *runs)
{
    static const char *const axes[] = {"partition_dims", "system", "batch",
                                       "set", "freeze", NULL};
    char jp[128], q[80];
    key_shown(q, sizeof q, e->string);
    snprintf(jp, sizeof jp, "grid.%s", q);
    if (!in_list(e->string, axes))
        return sweep_bad(s, jp, "unknown axis (expected partition_dims, "
                                "system, batch, set or freeze)");
    if (strcmp(e->string, "partition_dims") == 0 && cJSON_IsString(e)) {
        if (strcmp(e->valuestring, "all") != 0)
            return sweep_bad(s, jp, "expected a list of partitionings or "
                                    "\"all\"");
        /* at most 35 splits (3 spatial dimensions, 16 cores) */
        ++*naxes;
        *runs *= 35;
        return 0;
    }
    if (strcmp(e->string, "set") != 0)
        return count_list(s, e, jp, naxes, runs);
    if (!cJSON_IsObject(e))
        return sweep_bad(s, jp, "expected an object of KEY: [values]");
    if (!e->child)
        return sweep_bad(s, jp, "no key to sweep");
    for (const cJSON *l = e->child; l; l = l->next) {
        key_shown(q, sizeof q, l->string);
        snprintf(jp, sizeof jp, "grid.set.%s", q);
        int rc = count_list(s, l, jp, naxes, runs);
        if (rc)
            return rc;
    }
    return 0;
}

/* Known axes, at most SWEEP_MAX_AXES of them, at most SWEEP_MAX_RUNS
 * points. */
static int check_grid_shape(const sweep *s, const cJSON *grid)
{
    int naxes = 0;
    double runs = 1;
    const cJSON *e;
    cJSON_ArrayForEach(e, grid)
    {
        int rc = count_axis(s, e, &naxes, &runs);
        if (rc)
            return rc;
    }
    if (naxes == 0)
        return sweep_bad(s, "grid", "no axis to sweep");
    if (runs > SWEEP_MAX_RUNS)
        return sweep_bad(s, "grid", "%.0f runs (the product of the axis "
                                    "lengths), more than the limit of %d",
                         runs, SWEEP_MAX_RUNS);
    return 0;
}

/* The top level, the shape of the grid, the number of axes and runs:
 * everything that needs neither the trace nor the parameter table. */
static int check_shape(sweep *s, const cJSON *doc)
{
    int rc = check_top_keys(s, doc);
    if (!rc)
        rc = check_top_values(s, doc);
    if (!rc) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(doc, "trace");
        rc = resolve_trace(s, t->valuestring);
    }
    if (!rc)
        rc = check_grid_shape(s,
                              cJSON_GetObjectItemCaseSensitive(doc, "grid"));
    return rc;
}

/* The base trace, read by the library as `run` reads it; with need_json
 * also as JSON, for the partitionings' variants. */
static int load_trace(sweep *s, int need_json)
{
    tpu_error err = {0};
    struct stat st;
    if (stat(s->trace, &st) == 0 && !S_ISREG(st.st_mode))
        return sweep_bad(s, "trace", "%s: cannot read: %s", s->trace,
                         S_ISDIR(st.st_mode) ? "is a directory"
                                             : "not a regular file");
    tpu_status rc = graph_load(&s->g, s->trace, &err);
    s->have_g = 1;
    if (rc) {
        char msg[sizeof err.msg];
        cli_shown(msg, sizeof msg, err.msg);
        return sweep_fail(s, rc == TPU_ERR_SYSTEM ? 4 : 2, "trace", "%s",
                          msg);
    }
    if (!need_json)
        return 0;
    size_t len;
    char *text = slurp(s->trace, &len, &err);
    if (!text)
        return sweep_bad(s, "trace", "%s", err.msg);
    s->base = cJSON_ParseWithLength(text, len);
    free(text);
    if (!cJSON_IsObject(s->base) ||
        !cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(s->base, "run")))
        return sweep_bad(s, "trace", "%s: changed while being read",
                         s->trace);
    return 0;
}

/* ---- the axes ----------------------------------------------------------- */

/* The axis count is checked against SWEEP_MAX_AXES before any is added;
 * NULL here means out of memory. */
static sweep_axis *add_axis(sweep *s, sweep_kind k, const char *name,
                            const char *jpath, int n)
{
    if (s->naxes >= SWEEP_MAX_AXES)
        return NULL;
    sweep_axis *a = &s->ax[s->naxes];
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

/* Appends "SEPtext" to buf (holding *len bytes) when it fits whole. */
static void append(char *buf, size_t cap, size_t *len, const char *sep,
                   const char *text)
{
    int w = snprintf(buf + *len, cap - *len, "%s%s", *len ? sep : "", text);
    if (w > 0 && (size_t)w < cap - *len)
        *len += (size_t)w;
}

/* "1x4x2x1". */
static void dims_label(const cJSON *d, char *buf, size_t cap)
{
    size_t len = 0;
    const cJSON *e;
    buf[0] = 0;
    cJSON_ArrayForEach(e, d)
    {
        char num[16];
        snprintf(num, sizeof num, "%d", (int)e->valuedouble);
        size_t was = len;
        append(buf, cap, &len, "x", num);
        if (len == was)
            break;
    }
}

/* Simple form: the first input's dims, the other inputs as
 * sweep_pd_from_simple gives them. */
static int parse_pd_simple(const sweep *s, const cJSON *e, const char *jp,
                           sweep_val *v, int *prod)
{
    char why[256] = "";
    int rank = 0;
    if (!(*prod = dims_product(e, &rank)))
        return sweep_bad(s, jp, "expected a list of positive integers");
    v->pd = sweep_pd_from_simple(s, e, rank, why, sizeof why);
    if (!v->pd)
        return sweep_bad(s, jp, "%s", why);
    dims_label(e, v->label, sizeof v->label);
    return 0;
}

/* Full form: the whole input_partition_dims value, labelled
 * "1x2x1x1+-" (one part per input, "-" for null). */
static int parse_pd_full(const sweep *s, const cJSON *e, const char *jp,
                         sweep_val *v, int *prod)
{
    int rank = 0;
    if (!cJSON_IsArray(e) ||
        !(*prod = dims_product(cJSON_GetArrayItem(e, 0), &rank)))
        return sweep_bad(s, jp, "expected [N,H,W,C] or a full "
                                "input_partition_dims list");
    const cJSON *x;
    size_t len = 0;
    cJSON_ArrayForEach(x, e)
    {
        char part[48] = "-";
        if (!cJSON_IsNull(x)) {
            if (dims_product(x, &rank) != *prod)
                return sweep_bad(s, jp, "every entry must be null or have "
                                        "the same product");
            dims_label(x, part, sizeof part);
        }
        append(v->label, sizeof v->label, &len, "+", part);
    }
    v->pd = cJSON_Duplicate(e, 1);
    return v->pd ? 0 : cli_error(4, "out of memory");
}

static int parse_pd(sweep *s, const cJSON *list)
{
    int n = cJSON_GetArraySize(list);
    sweep_axis *a = add_axis(s, AX_PD, "partition_dims",
                             "grid.partition_dims", n);
    if (!a)
        return cli_error(4, "out of memory");
    char jp[64];
    const cJSON *e;
    int i = 0;
    cJSON_ArrayForEach(e, list)
    {
        snprintf(jp, sizeof jp, "grid.partition_dims[%d]", i);
        sweep_val *v = &a->v[i];
        int prod = 0;
        int rc = cJSON_IsNumber(cJSON_GetArrayItem(e, 0))
                     ? parse_pd_simple(s, e, jp, v, &prod)
                     : parse_pd_full(s, e, jp, v, &prod);
        if (rc)
            return rc;
        v->cpr = prod;
        v->x = prod;
        snprintf(v->arg, sizeof v->arg, "%s", v->label);
        i++;
    }
    for (int j = 0; j < n; j++)
        for (int k = 0; k < j; k++)
            if (strcmp(a->v[j].label, a->v[k].label) == 0) {
                snprintf(jp, sizeof jp, "grid.partition_dims[%d]", j);
                return sweep_bad(s, jp, "the same partitioning as an "
                                        "earlier entry");
            }
    return 0;
}

/* A freeze axis value is checked as `run --freeze` would check it
 * (graph_freeze_check: the base graph keeps the trace's flags). */
static int freeze_ok(const sweep *s, const char *jp, const char *list)
{
    tpu_error err = {0};
    tpu_status st = graph_freeze_check(&s->g, list, s->trace, &err);
    if (st == TPU_ERR_SYSTEM)
        return cli_fail(&err);
    return st ? sweep_bad(s, jp, "%s", err.msg) : 0;
}

/* The command-line text of value e: a short string, or a finite number
 * in as few digits as read back exactly. */
static int value_arg(const sweep *s, sweep_kind kind, const cJSON *e,
                     const char *jp, sweep_val *v)
{
    if (kind == AX_BATCH && !sweep_batch_ok(e))
        return sweep_bad(s, jp, "%s", sweep_bad_batch_msg);
    if (kind == AX_FREEZE && !cJSON_IsString(e))
        return sweep_bad(s, jp, "expected a --freeze list: \"none\", "
                                "\"conv1,bn_conv1\", \"res2*\"");
    if (cJSON_IsNumber(e) && isfinite(e->valuedouble)) {
        sweep_num_text(v->arg, sizeof v->arg, e->valuedouble);
        return 0;
    }
    if (cJSON_IsNumber(e)) /* 1e400: a number, as --set K=1e400 says */
        return sweep_bad(s, jp, "too large for a double");
    if (!cJSON_IsString(e))
        return sweep_bad(s, jp, "expected a string or a number");
    if (strlen(e->valuestring) >= sizeof v->arg || !e->valuestring[0])
        return sweep_bad(s, jp, "expected a short non-empty string");
    /* runs are exec'd, and --print-commands quotes every word,
     * apostrophes included (O'Brien is a fine value): only control
     * characters would break a command line */
    if (sweep_has_ctrl(e->valuestring))
        return sweep_bad(s, jp, "control characters are not allowed");
    snprintf(v->arg, sizeof v->arg, "%s", e->valuestring);
    return 0;
}

/* A system value: known, placed at its cores on the chart, and with
 * scale_batch the batch it scales to. */
static int system_value(const sweep *s, const char *jp, sweep_val *v)
{
    const tpu_system *sy = tpu_system_find(v->arg);
    if (!sy)
        return sweep_bad(s, jp, "%s", sweep_bad_system_msg);
    v->x = sy->cores;
    if (!s->scale_batch)
        return 0;
    int rc = sweep_scaled_ok(s, jp, v->arg);
    if (!rc)
        snprintf(v->batch, sizeof v->batch, "%lld",
                 (long long)sweep_batch_for(s, v->arg));
    return rc;
}

/* Value i of a system, batch, freeze or --set axis. */
static int parse_value(const sweep *s, sweep_axis *a, int i, const cJSON *e,
                       const char *jp)
{
    sweep_val *v = &a->v[i];
    int rc = value_arg(s, a->kind, e, jp, v);
    if (rc)
        return rc;
    snprintf(v->label, sizeof v->label, "%s", v->arg);
    char *end;
    v->x = strtod(v->arg, &end);
    if (*end || end == v->arg || !isfinite(v->x) || a->kind == AX_FREEZE)
        v->x = i; /* not numeric (a --freeze list never is, even "1",
                     a layer's name): spaced evenly in file order */
    if (a->kind == AX_SYSTEM && (rc = system_value(s, jp, v)) != 0)
        return rc;
    if (a->kind == AX_FREEZE && (rc = freeze_ok(s, jp, v->arg)) != 0)
        return rc;
    /* --freeze lists as `check` compares them: "c1,bn" is "bn,c1" */
    for (int k = 0; k < i; k++)
        if (a->kind == AX_FREEZE ? cli_freeze_same(a->v[k].arg, v->arg)
                                 : strcmp(a->v[k].arg, v->arg) == 0)
            return sweep_bad(s, jp, "the same value as an earlier entry");
    return 0;
}

static int parse_strings(sweep *s, sweep_kind kind, const char *name,
                         const char *jbase, const cJSON *list)
{
    sweep_axis *a = add_axis(s, kind, name, jbase, cJSON_GetArraySize(list));
    if (!a)
        return cli_error(4, "out of memory");
    const cJSON *e;
    int i = 0;
    cJSON_ArrayForEach(e, list)
    {
        char jp[160];
        snprintf(jp, sizeof jp, "%s[%d]", jbase, i);
        int rc = parse_value(s, a, i, e, jp);
        if (rc)
            return rc;
        i++;
    }
    return 0;
}

/* One axis per --set key, in file order. */
static int parse_sets(sweep *s, const cJSON *set)
{
    const cJSON *e;
    cJSON_ArrayForEach(e, set)
    {
        char jp[128];
        snprintf(jp, sizeof jp, "grid.set.%.64s", e->string);
        if (strlen(e->string) >= 64 || !e->string[0] ||
            strspn(e->string, "abcdefghijklmnopqrstuvwxyz0123456789._") !=
                strlen(e->string)) {
            char q[80];
            key_shown(q, sizeof q, e->string);
            snprintf(jp, sizeof jp, "grid.set.%s", q);
            return sweep_bad(s, jp, "expected a parameter key like "
                                    "hbm.bandwidth_gbs");
        }
        int rc = parse_strings(s, AX_SET, e->string, jp, e);
        if (rc)
            return rc;
    }
    return 0;
}

/* The partition_dims axis: a list, or "all" expanded into one. */
static int parse_pd_axis(sweep *s, const cJSON *grid, const cJSON *pd)
{
    if (!cJSON_IsString(pd))
        return parse_pd(s, pd);
    cJSON *all = NULL;
    int rc = sweep_expand_all(s, grid, &all);
    if (!rc)
        rc = parse_pd(s, all);
    cJSON_Delete(all);
    return rc;
}

/* The axes in run order: partition_dims, system, batch, freeze, then the
 * --set keys. */
static int parse_axes(sweep *s, const cJSON *grid)
{
    static const struct {
        sweep_kind kind;
        const char *name, *jpath;
    } lists[] = {{AX_SYSTEM, "system", "grid.system"},
                 {AX_BATCH, "batch", "grid.batch"},
                 {AX_FREEZE, "freeze", "grid.freeze"}};
    const cJSON *pd = cJSON_GetObjectItemCaseSensitive(grid, "partition_dims");
    int rc = pd ? parse_pd_axis(s, grid, pd) : 0;
    for (size_t k = 0; !rc && k < sizeof lists / sizeof lists[0]; k++) {
        const cJSON *l = cJSON_GetObjectItemCaseSensitive(grid,
                                                          lists[k].name);
        if (l)
            rc = parse_strings(s, lists[k].kind, lists[k].name,
                               lists[k].jpath, l);
    }
    const cJSON *set = cJSON_GetObjectItemCaseSensitive(grid, "set");
    if (!rc && set)
        rc = parse_sets(s, set);
    return rc;
}

/* "x" names an axis of the grid. */
static int check_x(const sweep *s)
{
    if (!s->x[0])
        return 0;
    for (int a = 0; a < s->naxes; a++)
        if (strcmp(s->ax[a].name, s->x) == 0)
            return 0;
    return sweep_bad(s, "x", "not an axis of the grid");
}

/* Everything after the JSON (rc: how reading it went). */
static int parse_rest(sweep *s, cJSON *doc, int rc)
{
    if (!rc)
        rc = check_shape(s, doc);
    const cJSON *grid = cJSON_GetObjectItemCaseSensitive(doc, "grid");
    if (!rc)
        rc = load_trace(s, cJSON_GetObjectItemCaseSensitive(
                               grid, "partition_dims") != NULL);
    if (!rc)
        rc = parse_axes(s, grid);
    if (!rc)
        rc = check_x(s);
    if (!rc)
        rc = sweep_check_sets(s);
    if (!rc)
        rc = sweep_check_points(s);
    for (long long i = 0, n = rc ? 0 : sweep_count_runs(s); i < n; i++)
        s->nskipped += sweep_skipped(s, i);
    cJSON_Delete(doc);
    return rc;
}

int sweep_parse(sweep *s, const char *path)
{
    memset(s, 0, sizeof *s);
    s->path = path;
    cJSON *doc = NULL;
    int rc = read_doc(s, &doc);
    return parse_rest(s, doc, rc);
}

int sweep_parse_text(sweep *s, const char *name, const sweep_namer *namer,
                     const char *text, size_t len)
{
    memset(s, 0, sizeof *s);
    s->path = name;
    s->namer = namer;
    cJSON *doc = NULL;
    int rc = parse_doc(s, text, len, &doc);
    return parse_rest(s, doc, rc);
}
