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

/* Sanity bounds on what a report may claim, so that a corrupt or hostile
 * file cannot make the reader allocate without limit.  A v3-2048 slice is
 * the largest system (SPEC.md). */
#define REPORT_MAX_CORES 65536
#define REPORT_MAX_LAYERS 100000
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

typedef struct {
    const char *path;
    tpu_error *err;
} rd;

static tpu_status bad(rd *c, const char *jpath, const char *what)
{
    return tpu_fail(c->err, TPU_ERR_INPUT, "%s: %s: %s", c->path, jpath,
                    what);
}

/* A number (null reads as NaN: see the header comment). */
static tpu_status get_num(rd *c, const cJSON *o, const char *key,
                          const char *jpath, int required, double *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v) {
        if (required)
            return bad(c, jpath, "missing");
        return TPU_OK;
    }
    if (cJSON_IsNull(v)) {
        *out = NAN;
        return TPU_OK;
    }
    if (!cJSON_IsNumber(v))
        return bad(c, jpath, "expected a number");
    *out = v->valuedouble;
    return TPU_OK;
}

static tpu_status get_int(rd *c, const cJSON *o, const char *key,
                          const char *jpath, int required, double lo,
                          double hi, int64_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v) {
        if (required)
            return bad(c, jpath, "missing");
        return TPU_OK;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) ||
        v->valuedouble < lo || v->valuedouble > hi)
        return bad(c, jpath, "expected an integer in range");
    *out = (int64_t)v->valuedouble;
    return TPU_OK;
}

static tpu_status get_str(rd *c, const cJSON *o, const char *key,
                          const char *jpath, int required, char *dst,
                          size_t cap)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v) {
        if (required)
            return bad(c, jpath, "missing");
        return TPU_OK;
    }
    if (!cJSON_IsString(v) || strlen(v->valuestring) >= cap)
        return bad(c, jpath, "expected a (short enough) string");
    memcpy(dst, v->valuestring, strlen(v->valuestring) + 1);
    return TPU_OK;
}

static tpu_status get_breakdown(rd *c, const cJSON *o, const char *jpath,
                                double *cat)
{
    if (!cJSON_IsObject(o))
        return bad(c, jpath, "expected an object");
    char sub[128];
    for (int k = 0; k < CAT_COUNT; k++) {
        const char *name = emu_cat_name((emu_cat)k);
        snprintf(sub, sizeof sub, "%s.%s", jpath, name);
        tpu_status st = get_num(c, o, name, sub, 1, &cat[k]);
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

static tpu_status read_core(rd *c, const cJSON *o, int i, int cpr,
                            emu_core_result *k)
{
    char jp[64], sub[128];
    snprintf(jp, sizeof jp, "per_core[%d]", i);
    if (!cJSON_IsObject(o))
        return bad(c, jp, "expected an object");
    int64_t v = i;
    snprintf(sub, sizeof sub, "%s.core", jp);
    TRY(get_int(c, o, "core", sub, 1, 0, REPORT_MAX_CORES, &v));
    k->core = (int)v;
    v = 0;
    snprintf(sub, sizeof sub, "%s.chip", jp);
    TRY(get_int(c, o, "chip", sub, 1, 0, REPORT_MAX_CORES, &v));
    k->chip = (int)v;
    /* Reports with only the SPEC keys: cores are numbered replica-major
     * (DESIGN.md), so replica and shard follow from the core index. */
    v = cpr > 0 ? k->core / cpr : 0;
    snprintf(sub, sizeof sub, "%s.replica", jp);
    TRY(get_int(c, o, "replica", sub, 0, 0, REPORT_MAX_CORES, &v));
    k->replica = (int)v;
    v = cpr > 0 ? k->core % cpr : 0;
    snprintf(sub, sizeof sub, "%s.shard", jp);
    TRY(get_int(c, o, "shard", sub, 0, 0, REPORT_MAX_CORES, &v));
    k->shard = (int)v;
    snprintf(sub, sizeof sub, "%s.step_time_s", jp);
    TRY(get_num(c, o, "step_time_s", sub, 1, &k->step_time_s));
    snprintf(sub, sizeof sub, "%s.breakdown_s", jp);
    const cJSON *bd = cJSON_GetObjectItemCaseSensitive(o, "breakdown_s");
    if (!bd)
        return bad(c, sub, "missing");
    TRY(get_breakdown(c, bd, sub, k->breakdown_s));
    static const char *const opt[] = {"mxu_utilization", "hbm_peak_bytes",
                                      "hbm_read_bytes", "hbm_write_bytes",
                                      "ici_bytes_sent", "flops"};
    double *dst[] = {&k->mxu_utilization, &k->hbm_peak_bytes,
                     &k->hbm_read_bytes, &k->hbm_write_bytes,
                     &k->ici_bytes_sent, &k->flops};
    for (size_t j = 0; j < sizeof opt / sizeof opt[0]; j++) {
        snprintf(sub, sizeof sub, "%s.%s", jp, opt[j]);
        /* The first five are SPEC keys; flops is ours. */
        TRY(get_num(c, o, opt[j], sub, j < 5, dst[j]));
    }
    return TPU_OK;
}

static tpu_status read_doc(rd *c, const cJSON *root, emu_result *r)
{
    if (!cJSON_IsObject(root))
        return bad(c, "(top)", "expected a JSON object");
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    if (!cJSON_IsString(fmt))
        return bad(c, "format", "missing (not a tpuemu report?)");
    if (strcmp(fmt->valuestring, "tpuemu-report/1") != 0)
        return bad(c, "format", "expected \"tpuemu-report/1\"");
    TRY(get_str(c, root, "trace", "trace", 1, r->trace, sizeof r->trace));
    TRY(get_str(c, root, "system", "system", 1, r->system,
                sizeof r->system));
    int64_t v = 0;
    /* "v3-64" names its generation; reports with only the SPEC keys. */
    if (r->system[0] == 'v' && (r->system[1] == '2' || r->system[1] == '3'))
        v = r->system[1] - '0';
    TRY(get_int(c, root, "gen", "gen", 0, 0, 100, &v));
    r->gen = (int)v;
    TRY(get_int(c, root, "chips", "chips", 1, 0, REPORT_MAX_CORES, &v));
    r->chips = (int)v;
    TRY(get_int(c, root, "cores", "cores", 1, 1, REPORT_MAX_CORES, &v));
    r->cores = (int)v;
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
    TRY(get_int(c, root, "global_batch", "global_batch", 1, 0, 9e15, &v));
    r->global_batch = v;
    TRY(get_int(c, root, "num_cores_per_replica", "num_cores_per_replica",
                1, 1, REPORT_MAX_CORES, &v));
    r->cores_per_replica = (int)v;
    TRY(get_int(c, root, "replicas", "replicas", 1, 0, REPORT_MAX_CORES,
                &v));
    r->replicas = (int)v;
    const cJSON *fits = cJSON_GetObjectItemCaseSensitive(root, "fits");
    if (!cJSON_IsBool(fits))
        return bad(c, "fits", fits ? "expected true or false" : "missing");
    r->fits = cJSON_IsTrue(fits);
    TRY(get_num(c, root, "hbm_needed_bytes", "hbm_needed_bytes", 0,
                &r->hbm_needed_bytes));
    TRY(get_num(c, root, "hbm_remat_bytes", "hbm_remat_bytes", 0,
                &r->hbm_remat_bytes));
    TRY(get_num(c, root, "hbm_capacity_bytes", "hbm_capacity_bytes", 0,
                &r->hbm_capacity_bytes));
    TRY(get_num(c, root, "step_time_s", "step_time_s", 1, &r->step_time_s));
    TRY(get_num(c, root, "flops_per_step", "flops_per_step", 1,
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
            snprintf(jp, sizeof jp, "overrides.%.64s", e->string);
            if (strlen(e->string) >= sizeof r->overrides[i].key)
                return bad(c, jp, "key too long");
            memcpy(r->overrides[i].key, e->string, strlen(e->string) + 1);
            /* Values are written as strings (the --set text as given); a
             * hand-written report may use a number. */
            if (cJSON_IsString(e) &&
                strlen(e->valuestring) < sizeof r->overrides[i].value)
                memcpy(r->overrides[i].value, e->valuestring,
                       strlen(e->valuestring) + 1);
            else if (cJSON_IsNumber(e))
                snprintf(r->overrides[i].value, sizeof r->overrides[i].value,
                         "%.17g", e->valuedouble);
            else
                return bad(c, jp, "expected a short string or a number");
            r->n_overrides = ++i;
        }
    }

    const cJSON *pc = cJSON_GetObjectItemCaseSensitive(root, "per_core");
    if (!cJSON_IsArray(pc))
        return bad(c, "per_core", pc ? "expected an array" : "missing");
    if (cJSON_GetArraySize(pc) != r->cores)
        return bad(c, "per_core", "expected one entry per core");
    r->per_core = calloc((size_t)r->cores, sizeof *r->per_core);
    if (!r->per_core)
        return tpu_fail(c->err, TPU_ERR_SYSTEM, "out of memory");
    const cJSON *e;
    int i = 0;
    cJSON_ArrayForEach(e, pc)
    {
        TRY(read_core(c, e, i, r->cores_per_replica, &r->per_core[i]));
        i++;
    }

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
        TRY(get_num(c, root, "loss", "loss", 0, &r->loss));
    }

    const cJSON *ly = cJSON_GetObjectItemCaseSensitive(root, "layers");
    if (ly) {
        if (!cJSON_IsArray(ly))
            return bad(c, "layers", "expected an array");
        int n = cJSON_GetArraySize(ly);
        if (n > REPORT_MAX_LAYERS)
            return bad(c, "layers", "too many entries");
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
        if (r->chips > 0) {
            r->link_busy_s = calloc((size_t)r->chips * 4, sizeof(double));
            if (!r->link_busy_s)
                return tpu_fail(c->err, TPU_ERR_SYSTEM, "out of memory");
        }
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
                if (cJSON_IsNull(x))
                    r->link_busy_s[(size_t)i * 4 + (size_t)d] = NAN;
                else if (cJSON_IsNumber(x))
                    r->link_busy_s[(size_t)i * 4 + (size_t)d] = x->valuedouble;
                else
                    return bad(c, jp, "expected 4 numbers (+x, -x, +y, -y)");
                d++;
            }
            i++;
        }
    }
    return TPU_OK;
}

tpu_status report_read(emu_result *r, const char *path, tpu_error *err)
{
    memset(r, 0, sizeof *r);
    FILE *f = fopen(path, "rb");
    if (!f)
        return tpu_fail(err, TPU_ERR_INPUT, "%s: cannot open: %s", path,
                        strerror(errno));
    sbuf b = {0};
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        sb_put(&b, chunk, n);
    int rerr = ferror(f);
    fclose(f);
    if (rerr || b.oom) {
        free(b.p);
        return tpu_fail(err, rerr ? TPU_ERR_INPUT : TPU_ERR_SYSTEM,
                        "%s: cannot read", path);
    }
    cJSON *root = cJSON_ParseWithLength(b.p ? b.p : "", b.len);
    free(b.p);
    if (!root)
        return tpu_fail(err, TPU_ERR_INPUT, "%s: not valid JSON", path);
    rd c = {path, err};
    tpu_status st = read_doc(&c, root, r);
    cJSON_Delete(root);
    if (st)
        emu_result_free(r);
    return st;
}
