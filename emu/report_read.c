/* report_read — the reader of the `tpuemu-report/1` JSON that
 * emu/report.c writes, with cJSON.  It is the gate for `check` and
 * `view`, so it refuses what no run can produce (docs/CHECK.md lists the
 * rules): a negative, infinite or missing time, a step time of zero where
 * the step ran (fits), a core index outside 0..cores-1 or given twice, an
 * unknown system or counts, torus and chips that are not its, two cores
 * as one shard, strings that are not UTF-8 or hold control characters
 * (they are echoed to the terminal).  Every refusal is one line
 * "FILE: json.path: what". */
#include "emu/report.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "emu/graph.h"
#include "emu/params.h"
#include "emu/rfile.h"
#include "firmware/isa.h"

/* Sanity bounds on what a report may claim, so that a corrupt or hostile
 * file cannot make the reader allocate without limit.  A v3-2048 slice is
 * the largest system (emu/params.c lists the slices). */
#define REPORT_MAX_CORES 65536
#define REPORT_MAX_LAYERS (2 * GRAPH_LAYERS_MAX) /* inputs + layers */
#define REPORT_MAX_OVERRIDES 4096

typedef struct {
    const char *path;
    tpu_error *err;
    int has_capacity; /* hbm_capacity_bytes is given (0 included) */
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

/* "found -5", "found null", "found a string": what was there instead.
 * A number of 2^53 or more is shown as the approximation it is (the
 * double of 9007199254740993 is ...992, another exact number). */
static const char *found(char *buf, size_t n, const cJSON *v)
{
    if (!v)
        snprintf(buf, n, "found nothing");
    else if (cJSON_IsNumber(v) && fabs(v->valuedouble) >= 9007199254740992.0)
        snprintf(buf, n, "found about %.5g (beyond 2^53: not exact)",
                 v->valuedouble);
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

#define TRY(x)                 \
    do {                       \
        tpu_status st_ = (x);  \
        if (st_)               \
            return st_;        \
    } while (0)

/* The JSON path of key inside base ("per_core[3]" + "chip"); a top-level
 * key (base NULL) is named bare. */
static const char *jp_key(char *buf, size_t n, const char *base,
                          const char *key)
{
    if (base)
        snprintf(buf, n, "%s.%s", base, key);
    else
        snprintf(buf, n, "%s", key);
    return buf;
}

/* *v = o's member key, NULL when absent, which is refused ("missing") only
 * when required; jp receives its path for the caller's messages. */
static tpu_status member(rd *c, const cJSON *o, const char *base,
                         const char *key, int required, const cJSON **v,
                         char *jp, size_t n)
{
    *v = cJSON_GetObjectItemCaseSensitive(o, key);
    jp_key(jp, n, base, key);
    if (!*v && required)
        return bad(c, jp, "missing");
    return TPU_OK;
}

/* A finite number >= 0 (every time, byte count and rate in a report).
 * null -- the writer's form of a non-finite value -- only where null_ok,
 * read as NaN.  *out untouched when absent. */
static tpu_status get_num(rd *c, const cJSON *o, const char *base,
                          const char *key, int required, int null_ok,
                          double *out)
{
    char jp[160], f[64];
    const cJSON *v;
    TRY(member(c, o, base, key, required, &v, jp, sizeof jp));
    if (!v)
        return TPU_OK;
    if (cJSON_IsNull(v) && null_ok) {
        *out = NAN;
        return TPU_OK;
    }
    /* cJSON reads 1e400 as inf */
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) ||
        v->valuedouble < 0)
        return badf(c, jp, "expected a finite number >= 0, %s",
                    found(f, sizeof f, v));
    *out = v->valuedouble;
    return TPU_OK;
}

/* An integer in [lo, hi]; *out untouched when absent. */
static tpu_status get_int(rd *c, const cJSON *o, const char *base,
                          const char *key, int required, double lo,
                          double hi, int64_t *out)
{
    char jp[160], f[64];
    const cJSON *v;
    TRY(member(c, o, base, key, required, &v, jp, sizeof jp));
    if (!v)
        return TPU_OK;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) ||
        v->valuedouble < lo || v->valuedouble > hi)
        return badf(c, jp, "expected an integer from %.0f to %.0f, %s",
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

/* A string as check_text accepts it, copied to dst; untouched when
 * absent. */
static tpu_status get_str(rd *c, const cJSON *o, const char *base,
                          const char *key, int required, char *dst,
                          size_t cap)
{
    char jp[160], f[64];
    const cJSON *v;
    TRY(member(c, o, base, key, required, &v, jp, sizeof jp));
    if (!v)
        return TPU_OK;
    if (!cJSON_IsString(v) || !v->valuestring)
        return badf(c, jp, "expected a string, %s", found(f, sizeof f, v));
    TRY(check_text(c, v->valuestring, jp, cap));
    memcpy(dst, v->valuestring, strlen(v->valuestring) + 1);
    return TPU_OK;
}

/* A required object of one time per category (emu_cat_name's keys). */
static tpu_status get_breakdown(rd *c, const cJSON *o, const char *base,
                                const char *key, double *cat)
{
    char jp[160], f[64];
    const cJSON *v;
    TRY(member(c, o, base, key, 1, &v, jp, sizeof jp));
    if (!cJSON_IsObject(v))
        return badf(c, jp, "expected an object, %s", found(f, sizeof f, v));
    for (int k = 0; k < CAT_COUNT; k++)
        TRY(get_num(c, v, jp, emu_cat_name((emu_cat)k), 1, 0, &cat[k]));
    /* Another key would be time the sum check below counts as missing: a
     * category of a newer tpuemu is told as such, not as a bad sum. */
    for (const cJSON *e = v->child; e; e = e->next) {
        int known = 0;
        for (int k = 0; k < CAT_COUNT && !known; k++)
            known = e->string && strcmp(e->string, emu_cat_name((emu_cat)k)) == 0;
        if (!known) {
            char sub[200];
            return badf(c, jp_key(sub, sizeof sub, jp, e->string ? e->string : "?"),
                        "unknown category (this tpuemu knows mxu, vector, "
                        "hbm_stall, halo, allreduce and idle: a report of a "
                        "newer tpuemu?)");
        }
    }
    return TPU_OK;
}

/* The categories are exclusive and sum to the core's step time;
 * the engine's do to the picosecond (printed exactly), so more than a
 * part in a million is an edited or foreign report that `check` would
 * compare category by category without noticing. */
static tpu_status check_core_sum(rd *c, const emu_core_result *k,
                                 const char *jp)
{
    char sub[160];
    double sum = 0;
    for (int j = 0; j < CAT_COUNT; j++)
        sum += k->breakdown_s[j];
    if (fabs(sum - k->step_time_s) > 1e-6 * k->step_time_s + 1e-12)
        return badf(c, jp_key(sub, sizeof sub, jp, "breakdown_s"),
                    "sums to %.9g s, not the core's step_time_s %.9g "
                    "(the categories are exclusive and sum to it)",
                    sum, k->step_time_s);
    return TPU_OK;
}

/* The per-core figures after the breakdown: the first five are required,
 * flops is optional. */
static tpu_status read_core_figures(rd *c, const cJSON *o, const char *jp,
                                    emu_core_result *k)
{
    static const char *const key[] = {"mxu_utilization", "hbm_peak_bytes",
                                      "hbm_read_bytes", "hbm_write_bytes",
                                      "ici_bytes_sent", "flops"};
    double *dst[] = {&k->mxu_utilization, &k->hbm_peak_bytes,
                     &k->hbm_read_bytes, &k->hbm_write_bytes,
                     &k->ici_bytes_sent, &k->flops};
    char sub[160];
    for (size_t j = 0; j < sizeof key / sizeof key[0]; j++)
        TRY(get_num(c, o, jp, key[j], j < 5, 0, dst[j]));
    /* a fraction of the MXUs' peak over the step: never above 1 */
    if (k->mxu_utilization > 1 + 1e-9)
        return badf(c, jp_key(sub, sizeof sub, jp, "mxu_utilization"),
                    "%.9g is above 1 (a fraction of the MXUs' peak)",
                    k->mxu_utilization);
    return TPU_OK;
}

/* per_core[i] goes to r->per_core[its core index], so the array is in core
 * order whatever the file's order; seen[] catches a core given twice. */
static tpu_status read_core(rd *c, const cJSON *o, int i, emu_result *r,
                            unsigned char *seen, int *pair_of)
{
    char jp[64], sub[160], f[64];
    int cpr = r->cores_per_replica;
    snprintf(jp, sizeof jp, "per_core[%d]", i);
    if (!cJSON_IsObject(o))
        return badf(c, jp, "expected an object, %s", found(f, sizeof f, o));
    int64_t v = i;
    TRY(get_int(c, o, jp, "core", 1, 0, r->cores - 1, &v));
    if (seen[v])
        return badf(c, jp_key(sub, sizeof sub, jp, "core"),
                    "core %lld appears twice", (long long)v);
    seen[v] = 1;
    emu_core_result *k = &r->per_core[v];
    k->core = (int)v;
    v = 0;
    TRY(get_int(c, o, jp, "chip", 1, 0, r->chips - 1, &v));
    k->chip = (int)v;
    /* cores are numbered chip by chip (engine.c; read_slice checked
     * chips = cores / cores per chip) */
    int per_chip = r->cores / r->chips;
    if (k->chip != k->core / per_chip)
        return badf(c, jp_key(sub, sizeof sub, jp, "chip"),
                    "%d, but core %d is on chip %d (%d cores a chip, in "
                    "core order)",
                    k->chip, k->core, k->core / per_chip, per_chip);
    /* Reports with only the required keys: cores are numbered
     * replica-major, so replica and shard follow from the core index. */
    v = k->core / cpr;
    TRY(get_int(c, o, jp, "replica", 0, 0, r->replicas - 1, &v));
    k->replica = (int)v;
    v = k->core % cpr;
    TRY(get_int(c, o, jp, "shard", 0, 0, cpr - 1, &v));
    k->shard = (int)v;
    /* Each core is one shard of one replica: the placement may put a
     * replica's shards on any cores (plan.c's 2D blocks), but never two
     * on one pair.  A does-not-fit report is exempt: no step ran, so
     * there is no placement to check. */
    if (r->fits) {
        int *owner = &pair_of[k->replica * cpr + k->shard];
        if (*owner)
            return badf(c, jp, "replica %d, shard %d is core %d's too "
                               "(each core is one shard of one replica)",
                        k->replica, k->shard, *owner - 1);
        *owner = k->core + 1;
    }
    TRY(get_num(c, o, jp, "step_time_s", 1, 0, &k->step_time_s));
    if (r->fits && !(k->step_time_s > 0))
        return bad(c, jp_key(sub, sizeof sub, jp, "step_time_s"),
                   "0, but the step ran (fits is true): a core's step takes "
                   "time");
    TRY(get_breakdown(c, o, jp, "breakdown_s", k->breakdown_s));
    TRY(check_core_sum(c, k, jp));
    return read_core_figures(c, o, jp, k);
}

/* The top level is an object whose format is ours. */
static tpu_status read_format(rd *c, const cJSON *root)
{
    char f[64];
    if (!cJSON_IsObject(root))
        return badf(c, "(top level)", "expected a JSON object, %s",
                    found(f, sizeof f, root));
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    if (!cJSON_IsString(fmt) &&
        (cJSON_GetObjectItemCaseSensitive(root, "graph") ||
         cJSON_GetObjectItemCaseSensitive(root, "layers")))
        return bad(c, "format", "missing: this looks like a trace (what run "
                                "reads), not a report: tpuemu run TRACE "
                                "--report R.json writes one");
    if (!cJSON_IsString(fmt) && cJSON_GetObjectItemCaseSensitive(root, "grid"))
        return bad(c, "format", "missing: this looks like a sweep file (what "
                                "sweep reads), not a report: tpuemu sweep "
                                "FILE --out DIR writes one per run, in "
                                "DIR/reports/");
    if (!cJSON_IsString(fmt))
        return bad(c, "format", "missing (not a tpuemu report?)");
    if (strncmp(fmt->valuestring, "tpuemu-trace/", 13) == 0)
        return badf(c, "format", "\"%s\": this is a trace (what run reads), "
                                 "not a report: tpuemu run TRACE --report "
                                 "R.json writes one", fmt->valuestring);
    if (strncmp(fmt->valuestring, "tpuemu-sweep/", 13) == 0)
        return badf(c, "format", "\"%s\": this is a sweep file (what sweep "
                                 "reads), not a report: tpuemu sweep FILE "
                                 "--out DIR writes one per run, in "
                                 "DIR/reports/",
                    fmt->valuestring);
    if (strncmp(fmt->valuestring, "tpuemu-validation/", 18) == 0)
        return badf(c, "format", "\"%s\": this is a validate report, not a "
                                 "run report (tpuemu run TRACE --report "
                                 "R.json writes one)", fmt->valuestring);
    if (strcmp(fmt->valuestring, "tpuemu-report/1") != 0)
        return bad(c, "format", "expected \"tpuemu-report/1\"");
    return TPU_OK;
}

/* What ran where: trace, a known slice, its generation, cores, chips and
 * torus dimensions, and the mode. */
static tpu_status read_slice(rd *c, const cJSON *root, emu_result *r)
{
    TRY(get_str(c, root, NULL, "trace", 1, r->trace, sizeof r->trace));
    if (!r->trace[0])
        return bad(c, "trace", "empty (a trace always has a name: its "
                               "\"name\" or its file's)");
    TRY(get_str(c, root, NULL, "system", 1, r->system, sizeof r->system));
    const tpu_system *sys = tpu_system_find(r->system);
    if (!sys)
        return badf(c, "system", "unknown slice '%s' (v2-8 ... "
                                 "v2-512, v3-8 ... v3-2048)",
                    r->system);
    /* One value fits: "an integer from 3 to 3" said it badly. */
    const cJSON *gen = cJSON_GetObjectItemCaseSensitive(root, "gen");
    char f[96];
    if (gen && !(cJSON_IsNumber(gen) && gen->valuedouble == sys->gen))
        return badf(c, "gen", "expected %d, the generation of %s, %s",
                    sys->gen, sys->name, found(f, sizeof f, gen));
    r->gen = sys->gen;
    int64_t v;
    TRY(get_int(c, root, NULL, "cores", 1, 1, REPORT_MAX_CORES, &v));
    r->cores = (int)v;
    /* run writes the slice's own figures (sim.c), which view draws and
     * check compares: a report whose counts disagree with its system is an
     * edit, and would be drawn as a machine that does not exist */
    if (r->cores != sys->cores)
        return badf(c, "cores", "%d, but %s has %d cores", r->cores,
                    sys->name, sys->cores);
    tpu_params hw;
    tpu_params_default(&hw, sys->gen);
    TRY(get_int(c, root, NULL, "chips", 1, 1, r->cores, &v));
    r->chips = (int)v;
    if (r->chips != sys->cores / hw.cores_per_chip)
        return badf(c, "chips", "%d, but %s has %d chip%s (%d cores a chip)",
                    r->chips, sys->name, sys->cores / hw.cores_per_chip,
                    sys->cores / hw.cores_per_chip == 1 ? "" : "s",
                    hw.cores_per_chip);
    /* 0, as when absent: not known (the torus is the slice's) */
    v = 0;
    TRY(get_int(c, root, NULL, "dim_x", 0, 0, REPORT_MAX_CORES, &v));
    r->dim_x = (int)v;
    v = 0;
    TRY(get_int(c, root, NULL, "dim_y", 0, 0, REPORT_MAX_CORES, &v));
    r->dim_y = (int)v;
    if ((r->dim_x && r->dim_x != sys->dim_x) ||
        (r->dim_y && r->dim_y != sys->dim_y))
        return badf(c, r->dim_x && r->dim_x != sys->dim_x ? "dim_x" : "dim_y",
                    "%d, but the chips of %s are a %dx%d torus (dim_x %d, "
                    "dim_y %d)",
                    r->dim_x && r->dim_x != sys->dim_x ? r->dim_x : r->dim_y,
                    sys->name, sys->dim_x, sys->dim_y, sys->dim_x,
                    sys->dim_y);
    r->train = 1;
    const cJSON *mode = cJSON_GetObjectItemCaseSensitive(root, "mode");
    if (!mode)
        return TPU_OK;
    if (!cJSON_IsString(mode) || (strcmp(mode->valuestring, "train") &&
                                  strcmp(mode->valuestring, "infer")))
        return bad(c, "mode", "expected \"train\" or \"infer\"");
    r->train = strcmp(mode->valuestring, "train") == 0;
    return TPU_OK;
}

/* The batch and how it is spread: replicas x cores per replica must be
 * the report's cores. */
static tpu_status read_batch(rd *c, const cJSON *root, emu_result *r)
{
    int64_t v = 0;
    TRY(get_int(c, root, NULL, "global_batch", 1, 1, 9e15, &v));
    r->global_batch = v;
    TRY(get_int(c, root, NULL, "num_cores_per_replica", 1, 1, r->cores, &v));
    r->cores_per_replica = (int)v;
    if (r->cores % r->cores_per_replica != 0)
        return badf(c, "num_cores_per_replica", "%d does not divide the "
                                                "report's %d cores",
                    r->cores_per_replica, r->cores);
    TRY(get_int(c, root, NULL, "replicas", 1, 1, REPORT_MAX_CORES, &v));
    r->replicas = (int)v;
    if ((int64_t)r->replicas * r->cores_per_replica != r->cores)
        return badf(c, "replicas", "%d replicas of %d cores are not the "
                                   "report's %d cores",
                    r->replicas, r->cores_per_replica, r->cores);
    return TPU_OK;
}

/* Whether the step fitted, what it needed, and the whole step's time and
 * work. */
static tpu_status read_step(rd *c, const cJSON *root, emu_result *r)
{
    const cJSON *fits = cJSON_GetObjectItemCaseSensitive(root, "fits");
    if (!cJSON_IsBool(fits))
        return bad(c, "fits", fits ? "expected true or false" : "missing");
    r->fits = cJSON_IsTrue(fits);
    TRY(get_num(c, root, NULL, "hbm_needed_bytes", 0, 0,
                &r->hbm_needed_bytes));
    TRY(get_num(c, root, NULL, "hbm_remat_bytes", 0, 0,
                &r->hbm_remat_bytes));
    TRY(get_num(c, root, NULL, "hbm_capacity_bytes", 0, 0,
                &r->hbm_capacity_bytes));
    c->has_capacity =
        cJSON_GetObjectItemCaseSensitive(root, "hbm_capacity_bytes") != NULL;
    TRY(get_num(c, root, NULL, "step_time_s", 1, 0, &r->step_time_s));
    /* A step that does not fit is not timed: fits false, zero times. */
    if (r->fits && !(r->step_time_s > 0))
        return bad(c, "step_time_s", "0, but the step ran (fits is true): "
                                     "a step takes time");
    return get_num(c, root, NULL, "flops_per_step", 1, 0, &r->flops_per_step);
}

#define REPORT_MAX_RANGE 4096

/* One entry of range_assumptions: a key and the step at both its ends,
 * inside the step's range. */
static tpu_status read_range_item(rd *c, const cJSON *e, int i,
                                  emu_result *r)
{
    char jp[64], sub[96], f[64];
    snprintf(jp, sizeof jp, "range_assumptions[%d]", i);
    if (!cJSON_IsObject(e))
        return badf(c, jp, "expected an object {\"key\", \"low_s\", "
                           "\"high_s\"}, %s",
                    found(f, sizeof f, e));
    emu_range_item *it = &r->range[i];
    TRY(get_str(c, e, jp, "key", 1, it->key, sizeof it->key));
    TRY(get_num(c, e, jp, "low_s", 1, 0, &it->low_s));
    TRY(get_num(c, e, jp, "high_s", 1, 0, &it->high_s));
    double tol = 1e-9 * r->range_high_s;
    for (int k = 0; k < 2; k++) {
        double v = k ? it->high_s : it->low_s;
        if (v < r->range_low_s - tol || v > r->range_high_s + tol)
            return badf(c, jp_key(sub, sizeof sub, jp, k ? "high_s" : "low_s"),
                        "%.9g s is outside step_time_range_s [%.9g, %.9g]",
                        v, r->range_low_s, r->range_high_s);
    }
    return TPU_OK;
}

/* The step's range over the unconfirmed assumptions (optional: a run with
 * --no-range, and older reports, have none): [low, high] around the
 * step, and the assumptions' steps. */
static tpu_status read_range(rd *c, const cJSON *root, emu_result *r)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "step_time_range_s");
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(root, "range_assumptions");
    char f[64];
    if (!v) {
        if (a)
            return bad(c, "range_assumptions",
                       "given without step_time_range_s");
        return TPU_OK;
    }
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 2)
        return badf(c, "step_time_range_s",
                    "expected [low, high] in seconds, %s",
                    found(f, sizeof f, v));
    double lh[2];
    for (int k = 0; k < 2; k++) {
        const cJSON *e = cJSON_GetArrayItem(v, k);
        char jp[40];
        snprintf(jp, sizeof jp, "step_time_range_s[%d]", k);
        if (!cJSON_IsNumber(e) || !isfinite(e->valuedouble) ||
            e->valuedouble < 0)
            return badf(c, jp, "expected a finite number >= 0, %s",
                        found(f, sizeof f, e));
        lh[k] = e->valuedouble;
    }
    if (lh[0] > lh[1])
        return badf(c, "step_time_range_s",
                    "low %.9g s is above high %.9g s", lh[0], lh[1]);
    /* the range is over the default step and the varied ones */
    double tol = 1e-9 * lh[1];
    if (r->step_time_s < lh[0] - tol || r->step_time_s > lh[1] + tol)
        return badf(c, "step_time_range_s",
                    "[%.9g, %.9g] does not contain step_time_s %.9g", lh[0],
                    lh[1], r->step_time_s);
    r->has_range = 1;
    r->range_low_s = lh[0];
    r->range_high_s = lh[1];
    if (!a)
        return TPU_OK;
    if (!cJSON_IsArray(a))
        return badf(c, "range_assumptions", "expected a list, %s",
                    found(f, sizeof f, a));
    int n = cJSON_GetArraySize(a);
    if (n > REPORT_MAX_RANGE)
        return bad(c, "range_assumptions", "too many entries");
    r->range = calloc((size_t)n + 1, sizeof *r->range);
    if (!r->range)
        return tpu_fail(c->err, TPU_ERR_SYSTEM, "out of memory");
    const cJSON *e;
    int i = 0;
    cJSON_ArrayForEach(e, a)
    {
        TRY(read_range_item(c, e, i, r));
        r->n_range = ++i;
    }
    return TPU_OK;
}

/* One --set override: the key as given, and its value, written as the
 * --set text (a hand-written report may use a number). */
static tpu_status read_override(rd *c, const cJSON *e, int i,
                                emu_override *o)
{
    char jp[128];
    snprintf(jp, sizeof jp, "overrides[%d]", i);
    TRY(check_text(c, e->string, jp, sizeof o->key));
    snprintf(jp, sizeof jp, "overrides.%s", e->string);
    memcpy(o->key, e->string, strlen(e->string) + 1);
    if (cJSON_IsString(e)) {
        TRY(check_text(c, e->valuestring, jp, sizeof o->value));
        memcpy(o->value, e->valuestring, strlen(e->valuestring) + 1);
    } else if (cJSON_IsNumber(e) && isfinite(e->valuedouble)) {
        snprintf(o->value, sizeof o->value, "%.17g", e->valuedouble);
    } else {
        return bad(c, jp, "expected a short string or a number");
    }
    return TPU_OK;
}

static tpu_status read_overrides(rd *c, const cJSON *root, emu_result *r)
{
    const cJSON *ov = cJSON_GetObjectItemCaseSensitive(root, "overrides");
    /* Required, as flops_per_step is: a report without it is not one a
     * run wrote ("{}" when nothing was overridden). */
    if (!ov)
        return bad(c, "overrides", "missing (a run writes {} when nothing "
                                   "was overridden)");
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
        TRY(read_override(c, e, i, &r->overrides[i]));
        r->n_overrides = ++i;
    }
    return TPU_OK;
}

static tpu_status read_per_core(rd *c, const cJSON *root, emu_result *r)
{
    const cJSON *pc = cJSON_GetObjectItemCaseSensitive(root, "per_core");
    if (!cJSON_IsArray(pc))
        return bad(c, "per_core", pc ? "expected an array" : "missing");
    if (cJSON_GetArraySize(pc) != r->cores)
        return badf(c, "per_core", "expected one entry per core (%d), "
                                   "found %d",
                    r->cores, cJSON_GetArraySize(pc));
    r->per_core = calloc((size_t)r->cores, sizeof *r->per_core);
    unsigned char *seen = calloc((size_t)r->cores, 1);
    /* the core + 1 that is each (replica, shard), 0 for none yet */
    int *pair_of = calloc((size_t)r->cores, sizeof *pair_of);
    if (!r->per_core || !seen || !pair_of) {
        free(seen);
        free(pair_of);
        return tpu_fail(c->err, TPU_ERR_SYSTEM, "out of memory");
    }
    const cJSON *e;
    int i = 0;
    tpu_status st = TPU_OK;
    cJSON_ArrayForEach(e, pc)
    {
        if ((st = read_core(c, e, i++, r, seen, pair_of)))
            break;
    }
    free(seen);
    free(pair_of);
    return st;
}

/* What the whole-step figures must agree with per core. */
static tpu_status check_totals(rd *c, const emu_result *r)
{
    double slowest = 0;
    for (int i = 0; i < r->cores; i++)
        if (r->per_core[i].step_time_s > slowest)
            slowest = r->per_core[i].step_time_s;
    /* The step time is the slowest core's (the writer prints both
     * from the same double, so they agree exactly; a hand edit need not
     * be more precise than a part in 10^9). */
    if (fabs(r->step_time_s - slowest) > 1e-9 * slowest)
        return badf(c, "step_time_s", "%.9g is not the slowest core's step "
                                      "time (%.9g)",
                    r->step_time_s, slowest);
    /* hbm_needed_bytes is the largest core's peak, and a step that fits
     * needs no more than the capacity the report names (an edited report
     * can claim both).  Either field may be absent; a capacity of 0 is a
     * capacity, a need of 0 is none. */
    for (int i = 0; r->hbm_needed_bytes > 0 && i < r->cores; i++) {
        const emu_core_result *k = &r->per_core[i];
        if (k->hbm_peak_bytes > r->hbm_needed_bytes * (1 + 1e-9)) {
            char sub[64];
            snprintf(sub, sizeof sub, "per_core[%d].hbm_peak_bytes", i);
            return badf(c, sub, "%.17g is above hbm_needed_bytes "
                                "(%.17g), the largest core's peak",
                        k->hbm_peak_bytes, r->hbm_needed_bytes);
        }
    }
    if (r->fits && c->has_capacity &&
        r->hbm_needed_bytes > r->hbm_capacity_bytes * (1 + 1e-9))
        return badf(c, "fits", "true, but hbm_needed_bytes (%.17g) is above "
                               "hbm_capacity_bytes (%.17g)",
                    r->hbm_needed_bytes, r->hbm_capacity_bytes);
    return TPU_OK;
}

/* --functional's figures: the output's checksum and the loss. */
static tpu_status read_values(rd *c, const cJSON *root, emu_result *r)
{
    char f[64];
    const cJSON *cs = cJSON_GetObjectItemCaseSensitive(root,
                                                       "output_checksum");
    if (!cs)
        return TPU_OK;
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
    return TPU_OK;
}

/* A layer's optional "grouped": each part's candidate by its name. */
static tpu_status read_gconv(rd *c, const cJSON *e, const char *base,
                             emu_result *r, int l, int n)
{
    char jp[160], f[64];
    const cJSON *v;
    TRY(member(c, e, base, "grouped", 0, &v, jp, sizeof jp));
    if (!v)
        return TPU_OK;
    if (!cJSON_IsObject(v))
        return badf(c, jp, "expected an object, %s", found(f, sizeof f, v));
    for (const cJSON *p = v->child; p; p = p->next) {
        int k = 0;
        while (k < 3 && strcmp(p->string, report_gconv_part[k]) != 0)
            k++;
        char pj[240];
        snprintf(pj, sizeof pj, "%s.%.60s", jp, p->string);
        if (k == 3)
            return bad(c, pj, "unknown part (forward, input_gradient, "
                              "weight_gradient)");
        int g = FW_GC_DENSE;
        while (g < FW_GC_COUNT && !(cJSON_IsString(p) &&
                                    strcmp(p->valuestring,
                                           fw_gconv_name((fw_gconv)g)) == 0))
            g++;
        if (g == FW_GC_COUNT)
            return bad(c, pj, "expected \"dense\", \"per_group\" or "
                              "\"vector\"");
        if (!r->layer_gconv) {
            r->layer_gconv = calloc((size_t)n, sizeof *r->layer_gconv);
            if (!r->layer_gconv)
                return tpu_fail(c->err, TPU_ERR_SYSTEM, "out of memory");
        }
        r->layer_gconv[l][k] = (uint8_t)g;
    }
    return TPU_OK;
}

static tpu_status read_layers(rd *c, const cJSON *root, emu_result *r)
{
    const cJSON *ly = cJSON_GetObjectItemCaseSensitive(root, "layers");
    if (!ly)
        return TPU_OK;
    if (!cJSON_IsArray(ly))
        return bad(c, "layers", "expected an array");
    int n = cJSON_GetArraySize(ly);
    if (n > REPORT_MAX_LAYERS)
        return badf(c, "layers", "%d entries, more than the limit of %d", n,
                    REPORT_MAX_LAYERS);
    if (n > 0) {
        r->layer_names = calloc((size_t)n, sizeof *r->layer_names);
        r->layer_time_s = calloc((size_t)n * CAT_COUNT, sizeof(double));
        if (!r->layer_names || !r->layer_time_s)
            return tpu_fail(c->err, TPU_ERR_SYSTEM, "out of memory");
        r->n_layers = n;
    }
    const cJSON *e;
    int i = 0;
    cJSON_ArrayForEach(e, ly)
    {
        char jp[64];
        snprintf(jp, sizeof jp, "layers[%d]", i);
        if (!cJSON_IsObject(e))
            return bad(c, jp, "expected an object");
        TRY(get_str(c, e, jp, "name", 1, r->layer_names[i],
                    sizeof r->layer_names[i]));
        if (!r->layer_names[i][0]) {
            char sub[80];
            return bad(c, jp_key(sub, sizeof sub, jp, "name"),
                       "empty (every input and layer of a trace is named)");
        }
        TRY(get_breakdown(c, e, jp, "time_s",
                          r->layer_time_s + (size_t)i * CAT_COUNT));
        TRY(read_gconv(c, e, jp, r, i, n));
        i++;
    }
    return TPU_OK;
}

/* One chip's busy time on its four links; null for a link that does not
 * exist (no wrap-around). */
static tpu_status read_link_row(rd *c, const cJSON *e, int i, double *busy)
{
    char jp[64], f[64];
    snprintf(jp, sizeof jp, "link_busy_s[%d]", i);
    if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) != 4)
        return bad(c, jp, "expected 4 numbers (+x, -x, +y, -y)");
    const cJSON *x;
    int d = 0;
    cJSON_ArrayForEach(x, e)
    {
        if (cJSON_IsNull(x))
            busy[d] = NAN;
        else if (cJSON_IsNumber(x) && isfinite(x->valuedouble) &&
                 x->valuedouble >= 0)
            busy[d] = x->valuedouble;
        else
            return badf(c, jp, "expected 4 numbers >= 0 or null "
                               "(+x, -x, +y, -y), %s",
                        found(f, sizeof f, x));
        d++;
    }
    return TPU_OK;
}

static tpu_status read_links(rd *c, const cJSON *root, emu_result *r)
{
    const cJSON *lk = cJSON_GetObjectItemCaseSensitive(root, "link_busy_s");
    if (!lk)
        return TPU_OK;
    if (!cJSON_IsArray(lk) || cJSON_GetArraySize(lk) != r->chips)
        return bad(c, "link_busy_s", "expected one entry per chip");
    r->link_busy_s = calloc((size_t)r->chips * 4, sizeof(double));
    if (!r->link_busy_s)
        return tpu_fail(c->err, TPU_ERR_SYSTEM, "out of memory");
    const cJSON *e;
    int i = 0;
    cJSON_ArrayForEach(e, lk)
    {
        TRY(read_link_row(c, e, i, r->link_busy_s + (size_t)i * 4));
        i++;
    }
    return TPU_OK;
}

/* The optional "optimizer" (a run.optimizer word other than momentum,
 * which a report leaves unsaid) and "input_partition_dims" (the
 * first input's split when --partition set it: 2 to 5 factors whose
 * product is num_cores_per_replica). */
static tpu_status read_step_setup(rd *c, const cJSON *root, emu_result *r)
{
    char s[32], f[64];
    s[0] = 0;
    r->optimizer = GOPT_MOMENTUM;
    TRY(get_str(c, root, NULL, "optimizer", 0, s, sizeof s));
    if (cJSON_GetObjectItemCaseSensitive(root, "optimizer")) {
        int k = graph_optimizer_find(s);
        if (k < 0 || k == GOPT_MOMENTUM)
            return badf(c, "optimizer", "expected one of %s other than "
                        "momentum (a momentum run writes no optimizer key)",
                        graph_optimizer_words());
        r->optimizer = k;
    }
    const cJSON *pd =
        cJSON_GetObjectItemCaseSensitive(root, "input_partition_dims");
    r->pdims_rank = 0;
    if (!pd)
        return TPU_OK;
    int n = cJSON_GetArraySize(pd);
    if (!cJSON_IsArray(pd) || n < 2 || n > GRAPH_MAX_PDIMS)
        return badf(c, "input_partition_dims", "expected 2 to %d factors, %s",
                    GRAPH_MAX_PDIMS, found(f, sizeof f, pd));
    long long prod = 1;
    const cJSON *x;
    cJSON_ArrayForEach(x, pd)
    {
        if (!cJSON_IsNumber(x) || x->valuedouble != floor(x->valuedouble) ||
            x->valuedouble < 1 || x->valuedouble > 4096)
            return badf(c, "input_partition_dims",
                        "expected positive integers (at most 4096), %s",
                        found(f, sizeof f, x));
        r->pdims[r->pdims_rank++] = (int)x->valuedouble;
        prod *= (long long)x->valuedouble;
    }
    if (prod != r->cores_per_replica)
        return badf(c, "input_partition_dims",
                    "product %lld is not num_cores_per_replica %d", prod,
                    r->cores_per_replica);
    return TPU_OK;
}

/* The sections in file order; each refusal names the first bad path. */
static tpu_status read_doc(rd *c, const cJSON *root, emu_result *r)
{
    TRY(read_format(c, root));
    TRY(read_slice(c, root, r));
    TRY(read_batch(c, root, r));
    TRY(read_step(c, root, r));
    TRY(read_range(c, root, r));
    TRY(read_overrides(c, root, r));
    /* The --freeze list of the run (optional): a string as given, no
     * control characters. */
    TRY(get_str(c, root, NULL, "freeze", 0, r->freeze, sizeof r->freeze));
    if (cJSON_GetObjectItemCaseSensitive(root, "freeze") && !r->freeze[0])
        return bad(c, "freeze", "empty (a run without --freeze writes no "
                                "freeze key)");
    TRY(read_step_setup(c, root, r));
    TRY(read_per_core(c, root, r));
    TRY(check_totals(c, r));
    TRY(read_values(c, root, r));
    TRY(read_layers(c, root, r));
    return read_links(c, root, r);
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
    rd c = {path, err, 0};
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
