/* report — the `tpuemu-report/1` JSON of SPEC.md, written by hand so that
 * the key order and the number format are fixed (the performance gate and
 * a reviewer's `git diff` of baselines/ both rely on byte-identical output
 * for identical results), and read back with cJSON.
 *
 * Numbers are printed shortest-round-trip: the fewest of 15, 16 or 17
 * significant digits that strtod reads back to the same double, so
 * 0.91 stays "0.91" and nothing is lost.  Non-finite values cannot be
 * written in JSON; they are written as null and read back as NaN.
 *
 * Layout: one top-level key per line, one core per line, one layer per
 * line, one chip's four links per line, so a baseline diff shows which
 * core or layer moved. */
#include "emu/report.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "emu/outfile.h"
#include "emu/graph.h"
#include "emu/params.h"
#include "emu/rfile.h"

/* Sanity bounds on what a report may claim, so that a corrupt or hostile
 * file cannot make the reader allocate without limit.  A v3-2048 slice is
 * the largest system (SPEC.md). */
#define REPORT_MAX_CORES 65536
#define REPORT_MAX_LAYERS (2 * GRAPH_LAYERS_MAX) /* inputs + layers */
#define REPORT_MAX_OVERRIDES 4096

/* ---- a growable text buffer ------------------------------------------ */

typedef struct {
    char *p;
    size_t len, cap;
    int oom;
} sbuf;

static void sb_grow(sbuf *b, size_t need)
{
    if (b->oom || b->len + need + 1 <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + need + 1)
        cap *= 2;
    char *q = realloc(b->p, cap);
    if (!q) {
        b->oom = 1;
        return;
    }
    b->p = q;
    b->cap = cap;
}

static void sb_put(sbuf *b, const char *s, size_t n)
{
    sb_grow(b, n);
    if (b->oom)
        return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_printf(sbuf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void sb_printf(sbuf *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->oom = 1;
        return;
    }
    if ((size_t)n < sizeof tmp) {
        sb_put(b, tmp, (size_t)n);
        return;
    }
    sb_grow(b, (size_t)n);
    if (b->oom)
        return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* Shortest of %.15g/%.16g/%.17g that reads back to exactly v. */
static void sb_num(sbuf *b, double v)
{
    if (!isfinite(v)) {
        sb_str(b, "null");
        return;
    }
    if (v == 0) {
        sb_str(b, "0"); /* also folds -0, which JSON readers disagree on */
        return;
    }
    char tmp[40];
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*g", prec, v);
        if (strtod(tmp, NULL) == v)
            break;
    }
    sb_str(b, tmp);
}

static void sb_jstr(sbuf *b, const char *s)
{
    sb_put(b, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\') {
            char e[2] = {'\\', (char)*c};
            sb_put(b, e, 2);
        } else if (*c < 0x20) {
            sb_printf(b, "\\u%04x", *c);
        } else {
            sb_put(b, (const char *)c, 1);
        }
    }
    sb_put(b, "\"", 1);
}

static void sb_key(sbuf *b, const char *k)
{
    sb_jstr(b, k);
    sb_put(b, ": ", 2);
}

static void sb_kv_num(sbuf *b, const char *k, double v, const char *sep)
{
    sb_key(b, k);
    sb_num(b, v);
    sb_str(b, sep);
}

static void sb_kv_int(sbuf *b, const char *k, long long v, const char *sep)
{
    sb_key(b, k);
    sb_printf(b, "%lld", v);
    sb_str(b, sep);
}

static void sb_breakdown(sbuf *b, const double *cat)
{
    sb_put(b, "{", 1);
    for (int c = 0; c < CAT_COUNT; c++) {
        sb_key(b, emu_cat_name((emu_cat)c));
        sb_num(b, cat[c]);
        if (c + 1 < CAT_COUNT)
            sb_put(b, ", ", 2);
    }
    sb_put(b, "}", 1);
}

/* ---- writing --------------------------------------------------------- */

char *report_to_json(const emu_result *r)
{
    sbuf b = {0};
    sb_str(&b, "{\n");
    /* The SPEC.md keys in SPEC.md order; the extra keys sit next to the
     * ones they qualify. */
    sb_str(&b, "  \"format\": \"tpuemu-report/1\",\n  ");
    sb_key(&b, "trace");
    sb_jstr(&b, r->trace);
    sb_str(&b, ",\n  ");
    sb_key(&b, "system");
    sb_jstr(&b, r->system);
    sb_str(&b, ",\n  ");
    sb_kv_int(&b, "gen", r->gen, ",\n  ");
    sb_kv_int(&b, "chips", r->chips, ",\n  ");
    sb_kv_int(&b, "cores", r->cores, ",\n  ");
    sb_kv_int(&b, "dim_x", r->dim_x, ",\n  ");
    sb_kv_int(&b, "dim_y", r->dim_y, ",\n  ");
    sb_key(&b, "mode");
    sb_str(&b, r->train ? "\"train\"" : "\"infer\"");
    sb_str(&b, ",\n  ");
    sb_kv_int(&b, "global_batch", (long long)r->global_batch, ",\n  ");
    sb_kv_int(&b, "num_cores_per_replica", r->cores_per_replica, ",\n  ");
    sb_kv_int(&b, "replicas", r->replicas, ",\n  ");
    sb_key(&b, "fits");
    sb_str(&b, r->fits ? "true" : "false");
    sb_str(&b, ",\n  ");
    sb_kv_num(&b, "hbm_needed_bytes", r->hbm_needed_bytes, ",\n  ");
    if (r->hbm_remat_bytes > 0)
        sb_kv_num(&b, "hbm_remat_bytes", r->hbm_remat_bytes, ",\n  ");
    sb_kv_num(&b, "hbm_capacity_bytes", r->hbm_capacity_bytes, ",\n  ");
    sb_kv_num(&b, "step_time_s", r->step_time_s, ",\n  ");
    sb_kv_num(&b, "flops_per_step", r->flops_per_step, ",\n  ");

    sb_key(&b, "overrides");
    sb_put(&b, "{", 1);
    for (int i = 0; i < r->n_overrides; i++) {
        sb_key(&b, r->overrides[i].key);
        sb_jstr(&b, r->overrides[i].value);
        if (i + 1 < r->n_overrides)
            sb_put(&b, ", ", 2);
    }
    sb_str(&b, "},\n  ");
    /* Only with --freeze: every other report stays byte for byte as it
     * was (baselines/). */
    if (r->freeze[0]) {
        sb_key(&b, "freeze");
        sb_jstr(&b, r->freeze);
        sb_str(&b, ",\n  ");
    }

    sb_key(&b, "per_core");
    sb_str(&b, "[");
    for (int i = 0; i < r->cores && r->per_core; i++) {
        const emu_core_result *c = &r->per_core[i];
        sb_str(&b, "\n    {");
        sb_kv_int(&b, "core", c->core, ", ");
        sb_kv_int(&b, "chip", c->chip, ", ");
        sb_kv_int(&b, "replica", c->replica, ", ");
        sb_kv_int(&b, "shard", c->shard, ", ");
        sb_kv_num(&b, "step_time_s", c->step_time_s, ", ");
        sb_key(&b, "breakdown_s");
        sb_breakdown(&b, c->breakdown_s);
        sb_str(&b, ", ");
        sb_kv_num(&b, "mxu_utilization", c->mxu_utilization, ", ");
        sb_kv_num(&b, "hbm_peak_bytes", c->hbm_peak_bytes, ", ");
        sb_kv_num(&b, "hbm_read_bytes", c->hbm_read_bytes, ", ");
        sb_kv_num(&b, "hbm_write_bytes", c->hbm_write_bytes, ", ");
        sb_kv_num(&b, "ici_bytes_sent", c->ici_bytes_sent, ", ");
        sb_kv_num(&b, "flops", c->flops, "}");
        if (i + 1 < r->cores)
            sb_put(&b, ",", 1);
    }
    sb_str(&b, r->cores > 0 && r->per_core ? "\n  ]" : "]");

    if (r->has_values) {
        sb_str(&b, ",\n  ");
        sb_kv_num(&b, "loss", r->loss, ",\n  ");
        sb_key(&b, "output_checksum");
        sb_printf(&b, "\"%016llx\"", (unsigned long long)r->output_checksum);
        if (r->n_losses > 1) {
            sb_str(&b, ",\n  ");
            sb_key(&b, "losses");
            sb_str(&b, "[");
            for (int i = 0; i < r->n_losses; i++) {
                sb_num(&b, r->losses[i]);
                if (i + 1 < r->n_losses)
                    sb_str(&b, ", ");
            }
            sb_str(&b, "]");
        }
    }

    if (r->n_layers > 0 && r->layer_names && r->layer_time_s) {
        /* Core 0's critical path per layer: where the time goes, for
         * docs/VALIDATION.md and the viewer. */
        sb_str(&b, ",\n  ");
        sb_key(&b, "layers");
        sb_str(&b, "[");
        for (int l = 0; l < r->n_layers; l++) {
            sb_str(&b, "\n    {");
            sb_key(&b, "name");
            sb_jstr(&b, r->layer_names[l]);
            sb_str(&b, ", ");
            sb_key(&b, "time_s");
            sb_breakdown(&b, r->layer_time_s + (size_t)l * CAT_COUNT);
            sb_str(&b, l + 1 < r->n_layers ? "}," : "}");
        }
        sb_str(&b, "\n  ]");
    }

    if (r->link_busy_s && r->chips > 0) {
        sb_str(&b, ",\n  ");
        sb_key(&b, "link_busy_s");
        sb_str(&b, "[");
        for (int ch = 0; ch < r->chips; ch++) {
            sb_str(&b, "\n    [");
            for (int d = 0; d < 4; d++) {
                sb_num(&b, r->link_busy_s[(size_t)ch * 4 + (size_t)d]);
                if (d < 3)
                    sb_put(&b, ", ", 2);
            }
            sb_str(&b, ch + 1 < r->chips ? "]," : "]");
        }
        sb_str(&b, "\n  ]");
    }
    sb_str(&b, "\n}\n");
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

tpu_status report_write(const emu_result *r, const char *path,
                        tpu_error *err)
{
    char *text = report_to_json(r);
    if (!text)
        return tpu_fail(err, TPU_ERR_SYSTEM, "%s: out of memory", path);
    tpu_status st = outfile_write(path, text, strlen(text), err);
    free(text);
    return st;
}

/* ---- atomic write ----------------------------------------------------- */

tpu_status tpu_write_atomic(const char *path, const void *data, size_t len,
                            tpu_error *err)
{
    /* One implementation for every output: emu/outfile.c (temporary in the
     * target's directory, rename; devices and directories refused). */
    return outfile_write(path, data, len, err);
}

/* ---- reading ---------------------------------------------------------- */

/* The reader is the gate for `check` and `view`, so it refuses what no run
 * can produce (docs/CHECK.md lists the rules): a negative, infinite or
 * missing time, a step time of zero where the step ran (fits), a core
 * index outside 0..cores-1 or given twice, an unknown system, strings that
 * are not UTF-8 or hold control characters (they are echoed to the
 * terminal).  Every refusal is one line "FILE: json.path: what". */

typedef struct {
    const char *path;
    tpu_error *err;
} rd;

static tpu_status bad(rd *c, const char *jpath, const char *what)
{
    return tpu_fail(c->err, TPU_ERR_INPUT, "%s: %s: %s", c->path, jpath,
                    what);
}

static tpu_status badf(rd *c, const char *jpath, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static tpu_status badf(rd *c, const char *jpath, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return bad(c, jpath, msg);
}

/* "found -5", "found null", "found a string": what was there instead. */
static const char *found(char *buf, size_t n, const cJSON *v)
{
    if (!v)
        snprintf(buf, n, "found nothing");
    else if (cJSON_IsNumber(v))
        snprintf(buf, n, "found %.17g", v->valuedouble);
    else if (cJSON_IsNull(v))
        snprintf(buf, n, "found null");
    else if (cJSON_IsString(v))
        snprintf(buf, n, "found a string");
    else if (cJSON_IsBool(v))
        snprintf(buf, n, "found a boolean");
    else if (cJSON_IsArray(v))
        snprintf(buf, n, "found a list");
    else
        snprintf(buf, n, "found an object");
    return buf;
}

/* A finite number >= 0 (every time, byte count and rate in a report).
 * null -- the writer's form of a non-finite value -- only where null_ok,
 * read as NaN. */
static tpu_status get_num(rd *c, const cJSON *o, const char *key,
                          const char *jpath, int required, int null_ok,
                          double *out)
{
    char f[64];
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v) {
        if (required)
            return bad(c, jpath, "missing");
        return TPU_OK;
    }
    if (cJSON_IsNull(v) && null_ok) {
        *out = NAN;
        return TPU_OK;
    }
    /* cJSON reads 1e400 as inf */
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) ||
        v->valuedouble < 0)
        return badf(c, jpath, "expected a finite number >= 0, %s",
                    found(f, sizeof f, v));
    *out = v->valuedouble;
    return TPU_OK;
}

static tpu_status get_int(rd *c, const cJSON *o, const char *key,
                          const char *jpath, int required, double lo,
                          double hi, int64_t *out)
{
    char f[64];
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v) {
        if (required)
            return bad(c, jpath, "missing");
        return TPU_OK;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) ||
        v->valuedouble < lo || v->valuedouble > hi)
        return badf(c, jpath, "expected an integer from %.0f to %.0f, %s",
                    lo, hi, found(f, sizeof f, v));
    *out = (int64_t)v->valuedouble;
    return TPU_OK;
}

/* A string that fits cap (with its NUL), UTF-8, no control characters. */
static tpu_status check_text(rd *c, const char *s, const char *jpath,
                             size_t cap)
{
    char why[96];
    const char *p;
    if (strlen(s) >= cap)
        return badf(c, jpath, "longer than %zu bytes", cap - 1);
    if ((p = rfile_text_problem(s, 0, why, sizeof why)))
        return badf(c, jpath, "the string %s", p);
    return TPU_OK;
}

static tpu_status get_str(rd *c, const cJSON *o, const char *key,
                          const char *jpath, int required, char *dst,
                          size_t cap)
{
    char f[64];
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v) {
        if (required)
            return bad(c, jpath, "missing");
        return TPU_OK;
    }
    if (!cJSON_IsString(v) || !v->valuestring)
        return badf(c, jpath, "expected a string, %s", found(f, sizeof f, v));
    {
        tpu_status st = check_text(c, v->valuestring, jpath, cap);
        if (st)
            return st;
    }
    memcpy(dst, v->valuestring, strlen(v->valuestring) + 1);
    return TPU_OK;
}

static tpu_status get_breakdown(rd *c, const cJSON *o, const char *jpath,
                                double *cat)
{
    char f[64];
    if (!cJSON_IsObject(o))
        return badf(c, jpath, "expected an object, %s", found(f, sizeof f, o));
    char sub[160];
    for (int k = 0; k < CAT_COUNT; k++) {
        const char *name = emu_cat_name((emu_cat)k);
        snprintf(sub, sizeof sub, "%s.%s", jpath, name);
        tpu_status st = get_num(c, o, name, sub, 1, 0, &cat[k]);
        if (st)
            return st;
    }
    return TPU_OK;
}

#define TRY(x)                 \
    do {                       \
        tpu_status st_ = (x);  \
        if (st_)               \
            return st_;        \
    } while (0)

/* per_core[i] goes to r->per_core[its core index], so the array is in core
 * order whatever the file's order; seen[] catches a core given twice. */
static tpu_status read_core(rd *c, const cJSON *o, int i, emu_result *r,
                            unsigned char *seen)
{
    char jp[64], sub[128], f[64];
    int cpr = r->cores_per_replica;
    snprintf(jp, sizeof jp, "per_core[%d]", i);
    if (!cJSON_IsObject(o))
        return badf(c, jp, "expected an object, %s", found(f, sizeof f, o));
    int64_t v = i;
    snprintf(sub, sizeof sub, "%s.core", jp);
    TRY(get_int(c, o, "core", sub, 1, 0, r->cores - 1, &v));
    if (seen[v])
        return badf(c, sub, "core %lld appears twice", (long long)v);
    seen[v] = 1;
    emu_core_result *k = &r->per_core[v];
    k->core = (int)v;
    v = 0;
    snprintf(sub, sizeof sub, "%s.chip", jp);
    TRY(get_int(c, o, "chip", sub, 1, 0, r->chips - 1, &v));
    k->chip = (int)v;
    /* Reports with only the SPEC keys: cores are numbered replica-major
     * (DESIGN.md), so replica and shard follow from the core index. */
    v = k->core / cpr;
    snprintf(sub, sizeof sub, "%s.replica", jp);
    TRY(get_int(c, o, "replica", sub, 0, 0, r->replicas - 1, &v));
    k->replica = (int)v;
    v = k->core % cpr;
    snprintf(sub, sizeof sub, "%s.shard", jp);
    TRY(get_int(c, o, "shard", sub, 0, 0, cpr - 1, &v));
    k->shard = (int)v;
    snprintf(sub, sizeof sub, "%s.step_time_s", jp);
    TRY(get_num(c, o, "step_time_s", sub, 1, 0, &k->step_time_s));
    if (r->fits && !(k->step_time_s > 0))
        return bad(c, sub, "0, but the step ran (fits is true): a core's "
                           "step takes time");
    snprintf(sub, sizeof sub, "%s.breakdown_s", jp);
    const cJSON *bd = cJSON_GetObjectItemCaseSensitive(o, "breakdown_s");
    if (!bd)
        return bad(c, sub, "missing");
    TRY(get_breakdown(c, bd, sub, k->breakdown_s));
    /* SPEC: the categories are exclusive and sum to the core's step time;
     * the engine's do to the picosecond (printed exactly), so more than a
     * part in a million is an edited or foreign report that `check` would
     * compare category by category without noticing. */
    double sum = 0;
    for (int j = 0; j < CAT_COUNT; j++)
        sum += k->breakdown_s[j];
    if (fabs(sum - k->step_time_s) > 1e-6 * k->step_time_s + 1e-12)
        return badf(c, sub, "sums to %.9g s, not the core's step_time_s %.9g "
                    "(the categories are exclusive and sum to it)",
                    sum, k->step_time_s);
    static const char *const opt[] = {"mxu_utilization", "hbm_peak_bytes",
                                      "hbm_read_bytes", "hbm_write_bytes",
                                      "ici_bytes_sent", "flops"};
    double *dst[] = {&k->mxu_utilization, &k->hbm_peak_bytes,
                     &k->hbm_read_bytes, &k->hbm_write_bytes,
                     &k->ici_bytes_sent, &k->flops};
    for (size_t j = 0; j < sizeof opt / sizeof opt[0]; j++) {
        snprintf(sub, sizeof sub, "%s.%s", jp, opt[j]);
        /* The first five are SPEC keys; flops is ours. */
        TRY(get_num(c, o, opt[j], sub, j < 5, 0, dst[j]));
    }
    /* a fraction of the MXUs' peak over the step (probe round 5 gave 1e300) */
    if (k->mxu_utilization > 1 + 1e-9) {
        snprintf(sub, sizeof sub, "%s.mxu_utilization", jp);
        return badf(c, sub, "%.9g is above 1 (a fraction of the MXUs' peak)",
                    k->mxu_utilization);
    }
    return TPU_OK;
}

static tpu_status read_doc(rd *c, const cJSON *root, emu_result *r)
{
    char f[64];
    if (!cJSON_IsObject(root))
        return badf(c, "(top level)", "expected a JSON object, %s",
                    found(f, sizeof f, root));
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    if (!cJSON_IsString(fmt))
        return bad(c, "format", "missing (not a tpuemu report?)");
    if (strcmp(fmt->valuestring, "tpuemu-report/1") != 0)
        return bad(c, "format", "expected \"tpuemu-report/1\"");
    TRY(get_str(c, root, "trace", "trace", 1, r->trace, sizeof r->trace));
    TRY(get_str(c, root, "system", "system", 1, r->system,
                sizeof r->system));
    const tpu_system *sys = tpu_system_find(r->system);
    if (!sys)
        return badf(c, "system", "unknown slice '%s' (SPEC.md: v2-8 ... "
                                 "v2-512, v3-8 ... v3-2048)",
                    r->system);
    int64_t v = sys->gen;
    TRY(get_int(c, root, "gen", "gen", 0, sys->gen, sys->gen, &v));
    r->gen = (int)v;
    TRY(get_int(c, root, "cores", "cores", 1, 1, REPORT_MAX_CORES, &v));
    r->cores = (int)v;
    TRY(get_int(c, root, "chips", "chips", 1, 1, r->cores, &v));
    r->chips = (int)v;
    v = 0;
    TRY(get_int(c, root, "dim_x", "dim_x", 0, 0, REPORT_MAX_CORES, &v));
    r->dim_x = (int)v;
    v = 0;
    TRY(get_int(c, root, "dim_y", "dim_y", 0, 0, REPORT_MAX_CORES, &v));
    r->dim_y = (int)v;
    r->train = 1;
    const cJSON *mode = cJSON_GetObjectItemCaseSensitive(root, "mode");
    if (mode) {
        if (!cJSON_IsString(mode) || (strcmp(mode->valuestring, "train") &&
                                      strcmp(mode->valuestring, "infer")))
            return bad(c, "mode", "expected \"train\" or \"infer\"");
        r->train = strcmp(mode->valuestring, "train") == 0;
    }
    TRY(get_int(c, root, "global_batch", "global_batch", 1, 1, 9e15, &v));
    r->global_batch = v;
    TRY(get_int(c, root, "num_cores_per_replica", "num_cores_per_replica",
                1, 1, r->cores, &v));
    r->cores_per_replica = (int)v;
    if (r->cores % r->cores_per_replica != 0)
        return badf(c, "num_cores_per_replica", "%d does not divide the "
                                                "report's %d cores",
                    r->cores_per_replica, r->cores);
    TRY(get_int(c, root, "replicas", "replicas", 1, 1, REPORT_MAX_CORES,
                &v));
    r->replicas = (int)v;
    if ((int64_t)r->replicas * r->cores_per_replica != r->cores)
        return badf(c, "replicas", "%d replicas of %d cores are not the "
                                   "report's %d cores",
                    r->replicas, r->cores_per_replica, r->cores);
    const cJSON *fits = cJSON_GetObjectItemCaseSensitive(root, "fits");
    if (!cJSON_IsBool(fits))
        return bad(c, "fits", fits ? "expected true or false" : "missing");
    r->fits = cJSON_IsTrue(fits);
    TRY(get_num(c, root, "hbm_needed_bytes", "hbm_needed_bytes", 0, 0,
                &r->hbm_needed_bytes));
    TRY(get_num(c, root, "hbm_remat_bytes", "hbm_remat_bytes", 0, 0,
                &r->hbm_remat_bytes));
    TRY(get_num(c, root, "hbm_capacity_bytes", "hbm_capacity_bytes", 0, 0,
                &r->hbm_capacity_bytes));
    TRY(get_num(c, root, "step_time_s", "step_time_s", 1, 0,
                &r->step_time_s));
    /* A step that does not fit is not timed: fits false, zero times. */
    if (r->fits && !(r->step_time_s > 0))
        return bad(c, "step_time_s", "0, but the step ran (fits is true): "
                                     "a step takes time");
    TRY(get_num(c, root, "flops_per_step", "flops_per_step", 1, 0,
                &r->flops_per_step));

    const cJSON *ov = cJSON_GetObjectItemCaseSensitive(root, "overrides");
    if (ov) {
        if (!cJSON_IsObject(ov))
            return bad(c, "overrides", "expected an object");
        int n = cJSON_GetArraySize(ov);
        if (n > REPORT_MAX_OVERRIDES)
            return bad(c, "overrides", "too many entries");
        if (n > 0) {
            r->overrides = calloc((size_t)n, sizeof *r->overrides);
            if (!r->overrides)
                return tpu_fail(c->err, TPU_ERR_SYSTEM, "out of memory");
        }
        const cJSON *e;
        int i = 0;
        cJSON_ArrayForEach(e, ov)
        {
            char jp[128];
            snprintf(jp, sizeof jp, "overrides[%d]", i);
            TRY(check_text(c, e->string, jp, sizeof r->overrides[i].key));
            snprintf(jp, sizeof jp, "overrides.%s", e->string);
            memcpy(r->overrides[i].key, e->string, strlen(e->string) + 1);
            /* Values are written as strings (the --set text as given); a
             * hand-written report may use a number. */
            if (cJSON_IsString(e)) {
                TRY(check_text(c, e->valuestring, jp,
                               sizeof r->overrides[i].value));
                memcpy(r->overrides[i].value, e->valuestring,
                       strlen(e->valuestring) + 1);
            } else if (cJSON_IsNumber(e) && isfinite(e->valuedouble)) {
                snprintf(r->overrides[i].value, sizeof r->overrides[i].value,
                         "%.17g", e->valuedouble);
            } else {
                return bad(c, jp, "expected a short string or a number");
            }
            r->n_overrides = ++i;
        }
    }

    /* The --freeze list of the run (optional): a string as given, no
     * control characters. */
    TRY(get_str(c, root, "freeze", "freeze", 0, r->freeze, sizeof r->freeze));

    const cJSON *pc = cJSON_GetObjectItemCaseSensitive(root, "per_core");
    if (!cJSON_IsArray(pc))
        return bad(c, "per_core", pc ? "expected an array" : "missing");
    if (cJSON_GetArraySize(pc) != r->cores)
        return badf(c, "per_core", "expected one entry per core (%d), "
                                   "found %d",
                    r->cores, cJSON_GetArraySize(pc));
    r->per_core = calloc((size_t)r->cores, sizeof *r->per_core);
    unsigned char *seen = calloc((size_t)r->cores, 1);
    if (!r->per_core || !seen) {
        free(seen);
        return tpu_fail(c->err, TPU_ERR_SYSTEM, "out of memory");
    }
    const cJSON *e;
    int i = 0;
    double slowest = 0;
    cJSON_ArrayForEach(e, pc)
    {
        tpu_status st = read_core(c, e, i, r, seen);
        if (st) {
            free(seen);
            return st;
        }
        i++;
    }
    free(seen);
    for (i = 0; i < r->cores; i++)
        if (r->per_core[i].step_time_s > slowest)
            slowest = r->per_core[i].step_time_s;
    /* SPEC: the step time is the slowest core's (the writer prints both
     * from the same double, so they agree exactly; a hand edit need not
     * be more precise than a part in 10^9). */
    if (fabs(r->step_time_s - slowest) > 1e-9 * slowest)
        return badf(c, "step_time_s", "%.9g is not the slowest core's step "
                                      "time (%.9g)",
                    r->step_time_s, slowest);
    /* hbm_needed_bytes is the largest core's peak, and a step that fits
     * needs no more than the capacity the report names (probe round 5: an
     * edited report claimed both).  Either field may be absent (0). */
    if (r->hbm_needed_bytes > 0)
        for (i = 0; i < r->cores; i++)
            if (r->per_core[i].hbm_peak_bytes >
                r->hbm_needed_bytes * (1 + 1e-9)) {
                char sub[64];
                snprintf(sub, sizeof sub, "per_core[%d].hbm_peak_bytes", i);
                return badf(c, sub, "%.17g is above hbm_needed_bytes "
                                    "(%.17g), the largest core's peak",
                            r->per_core[i].hbm_peak_bytes,
                            r->hbm_needed_bytes);
            }
    if (r->fits && r->hbm_capacity_bytes > 0 &&
        r->hbm_needed_bytes > r->hbm_capacity_bytes * (1 + 1e-9))
        return badf(c, "fits", "true, but hbm_needed_bytes (%.17g) is above "
                               "hbm_capacity_bytes (%.17g)",
                    r->hbm_needed_bytes, r->hbm_capacity_bytes);

    const cJSON *cs = cJSON_GetObjectItemCaseSensitive(root,
                                                       "output_checksum");
    if (cs) {
        char *end = NULL;
        if (!cJSON_IsString(cs) || strlen(cs->valuestring) != 16)
            return bad(c, "output_checksum", "expected 16 hex digits");
        unsigned long long x = strtoull(cs->valuestring, &end, 16);
        if (*end || cs->valuestring[0] == '-' || cs->valuestring[0] == '+' ||
            cs->valuestring[0] == ' ')
            return bad(c, "output_checksum", "expected 16 hex digits");
        r->has_values = 1;
        r->output_checksum = x;
        /* a diverged run's loss is NaN, written as null */
        const cJSON *lv = cJSON_GetObjectItemCaseSensitive(root, "loss");
        if (lv && cJSON_IsNull(lv))
            r->loss = NAN;
        else if (lv && cJSON_IsNumber(lv))
            r->loss = lv->valuedouble;
        else if (lv)
            return badf(c, "loss", "expected a number or null, %s",
                        found(f, sizeof f, lv));
    }

    const cJSON *ly = cJSON_GetObjectItemCaseSensitive(root, "layers");
    if (ly) {
        if (!cJSON_IsArray(ly))
            return bad(c, "layers", "expected an array");
        int n = cJSON_GetArraySize(ly);
        if (n > REPORT_MAX_LAYERS)
            return badf(c, "layers", "%d entries, more than the limit of %d",
                        n, REPORT_MAX_LAYERS);
        if (n > 0) {
            r->layer_names = calloc((size_t)n, sizeof *r->layer_names);
            r->layer_time_s = calloc((size_t)n * CAT_COUNT, sizeof(double));
            if (!r->layer_names || !r->layer_time_s)
                return tpu_fail(c->err, TPU_ERR_SYSTEM, "out of memory");
            r->n_layers = n;
        }
        i = 0;
        cJSON_ArrayForEach(e, ly)
        {
            char jp[64], sub[96];
            snprintf(jp, sizeof jp, "layers[%d]", i);
            if (!cJSON_IsObject(e))
                return bad(c, jp, "expected an object");
            snprintf(sub, sizeof sub, "%s.name", jp);
            TRY(get_str(c, e, "name", sub, 1, r->layer_names[i],
                        sizeof r->layer_names[i]));
            snprintf(sub, sizeof sub, "%s.time_s", jp);
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(e, "time_s");
            if (!t)
                return bad(c, sub, "missing");
            TRY(get_breakdown(c, t, sub,
                              r->layer_time_s + (size_t)i * CAT_COUNT));
            i++;
        }
    }

    const cJSON *lk = cJSON_GetObjectItemCaseSensitive(root, "link_busy_s");
    if (lk) {
        if (!cJSON_IsArray(lk) || cJSON_GetArraySize(lk) != r->chips)
            return bad(c, "link_busy_s", "expected one entry per chip");
        r->link_busy_s = calloc((size_t)r->chips * 4, sizeof(double));
        if (!r->link_busy_s)
            return tpu_fail(c->err, TPU_ERR_SYSTEM, "out of memory");
        i = 0;
        cJSON_ArrayForEach(e, lk)
        {
            char jp[64];
            snprintf(jp, sizeof jp, "link_busy_s[%d]", i);
            if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) != 4)
                return bad(c, jp, "expected 4 numbers (+x, -x, +y, -y)");
            const cJSON *x;
            int d = 0;
            cJSON_ArrayForEach(x, e)
            {
                /* null: a link that does not exist (no wrap-around) */
                if (cJSON_IsNull(x))
                    r->link_busy_s[(size_t)i * 4 + (size_t)d] = NAN;
                else if (cJSON_IsNumber(x) && isfinite(x->valuedouble) &&
                         x->valuedouble >= 0)
                    r->link_busy_s[(size_t)i * 4 + (size_t)d] = x->valuedouble;
                else
                    return badf(c, jp, "expected 4 numbers >= 0 or null "
                                       "(+x, -x, +y, -y), %s",
                                found(f, sizeof f, x));
                d++;
            }
            i++;
        }
    }
    return TPU_OK;
}

/* Reports are small (a few MB for a 100,000-layer trace); the cap keeps a
 * wrong path from being read into memory. */
#define REPORT_FILE_MAX ((size_t)512 << 20)

tpu_status report_parse(emu_result *r, const char *text, size_t len,
                        const char *path, tpu_error *err)
{
    int oom = 0;
    memset(r, 0, sizeof *r);
    char *marked = rfile_mark_nuls(text, len, &oom);
    if (oom)
        return tpu_fail(err, TPU_ERR_SYSTEM, "%s: out of memory", path);
    const char *end = NULL;
    cJSON *root =
        cJSON_ParseWithLengthOpts(marked ? marked : text, len, &end, 0);
    if (!root) {
        const char *base = marked ? marked : text;
        size_t pos = end >= base && end <= base + len ? (size_t)(end - base)
                                                      : 0;
        char why[200];
        rfile_json_error(base, len, pos, why, sizeof why);
        free(marked);
        return tpu_fail(err, TPU_ERR_INPUT, "%s: %s", path, why);
    }
    free(marked);
    rd c = {path, err};
    tpu_status st = TPU_OK;
    /* A repeated key reads as its first value here and as its last in
     * Python's json or jq: a second "trace" would pass `check` against a
     * report of another trace, a second "mxu" dodge the breakdown's sum
     * check.  Refused at any depth, as traces and sweep files are; after
     * the format (a file that is no report is told so first). */
    const cJSON *fmt = cJSON_IsObject(root)
                           ? cJSON_GetObjectItemCaseSensitive(root, "format")
                           : NULL;
    if (cJSON_IsString(fmt) &&
        strcmp(fmt->valuestring, "tpuemu-report/1") == 0) {
        char jp[512] = "";
        int dup_oom = 0;
        if (rfile_json_find_dup(root, jp, sizeof jp, NULL, &dup_oom))
            st = dup_oom ? tpu_fail(err, TPU_ERR_SYSTEM, "%s: out of memory",
                                    path)
                         : bad(&c, jp, "duplicate key");
    }
    if (!st)
        st = read_doc(&c, root, r);
    cJSON_Delete(root);
    if (st)
        emu_result_free(r);
    return st;
}

tpu_status report_read(emu_result *r, const char *path, tpu_error *err)
{
    char *text = NULL;
    size_t len = 0;
    memset(r, 0, sizeof *r);
    tpu_status st = rfile_read(path, REPORT_FILE_MAX, RFILE_PIPE_IDLE_S,
                               &text, &len, err);
    if (st)
        return st;
    st = report_parse(r, text, len, path, err);
    free(text);
    return st;
}
