/* report — the writer of the `tpuemu-report/1` JSON (docs/CHECK.md lists
 * its keys), written by hand so that the key order and the number format
 * are fixed (the performance gate and a reviewer's `git diff` of
 * baselines/ both rely on byte-identical output for identical results).
 * emu/report_read.c reads it back.
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

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/out/outfile.h"
#include "firmware/isa.h"

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

/* k: "s" with s escaped as a JSON string. */
static void sb_kv_jstr(sbuf *b, const char *k, const char *s, const char *sep)
{
    sb_key(b, k);
    sb_jstr(b, s);
    sb_str(b, sep);
}

/* k: raw, for the words true, false and the quoted mode. */
static void sb_kv_raw(sbuf *b, const char *k, const char *raw, const char *sep)
{
    sb_key(b, k);
    sb_str(b, raw);
    sb_str(b, sep);
}

/* The separator after element i of n, none after the last. */
static void sb_sep(sbuf *b, int i, int n, const char *sep)
{
    if (i + 1 < n)
        sb_str(b, sep);
}

static void sb_breakdown(sbuf *b, const double *cat)
{
    sb_put(b, "{", 1);
    for (int c = 0; c < CAT_COUNT; c++) {
        sb_key(b, emu_cat_name((emu_cat)c));
        sb_num(b, cat[c]);
        sb_sep(b, c, CAT_COUNT, ", ");
    }
    sb_put(b, "}", 1);
}

/* ---- writing --------------------------------------------------------- */

/* Between top-level keys: one key per line. */
#define TOP ",\n  "

/* The keys in the order docs/CHECK.md lists them; the optional ones
 * (hbm_remat_bytes, freeze) sit next to the ones they qualify. */
static void put_run(sbuf *b, const emu_result *r)
{
    sb_str(b, "  \"format\": \"tpuemu-report/1\"" TOP);
    sb_kv_jstr(b, "trace", r->trace, TOP);
    sb_kv_jstr(b, "system", r->system, TOP);
    sb_kv_int(b, "gen", r->gen, TOP);
    sb_kv_int(b, "chips", r->chips, TOP);
    sb_kv_int(b, "cores", r->cores, TOP);
    sb_kv_int(b, "dim_x", r->dim_x, TOP);
    sb_kv_int(b, "dim_y", r->dim_y, TOP);
    sb_kv_raw(b, "mode", r->train ? "\"train\"" : "\"infer\"", TOP);
    sb_kv_int(b, "global_batch", (long long)r->global_batch, TOP);
    sb_kv_int(b, "num_cores_per_replica", r->cores_per_replica, TOP);
    sb_kv_int(b, "replicas", r->replicas, TOP);
    sb_kv_raw(b, "fits", r->fits ? "true" : "false", TOP);
    sb_kv_num(b, "hbm_needed_bytes", r->hbm_needed_bytes, TOP);
    if (r->hbm_remat_bytes > 0)
        sb_kv_num(b, "hbm_remat_bytes", r->hbm_remat_bytes, TOP);
    sb_kv_num(b, "hbm_capacity_bytes", r->hbm_capacity_bytes, TOP);
    sb_kv_num(b, "step_time_s", r->step_time_s, TOP);
    /* Only when computed (run without --no-range), so that reports
     * without it match baselines/ byte for byte. */
    if (r->has_range) {
        sb_key(b, "step_time_range_s");
        sb_put(b, "[", 1);
        sb_num(b, r->range_low_s);
        sb_put(b, ", ", 2);
        sb_num(b, r->range_high_s);
        sb_str(b, "]" TOP);
        sb_key(b, "range_assumptions");
        sb_put(b, "[", 1);
        for (int i = 0; i < r->n_range; i++) {
            sb_str(b, "\n    {");
            sb_kv_jstr(b, "key", r->range[i].key, ", ");
            sb_kv_num(b, "low_s", r->range[i].low_s, ", ");
            sb_kv_num(b, "high_s", r->range[i].high_s, "}");
            sb_sep(b, i, r->n_range, ",");
        }
        sb_str(b, r->n_range ? "\n  ]" TOP : "]" TOP);
    }
    sb_kv_num(b, "flops_per_step", r->flops_per_step, TOP);

    sb_key(b, "overrides");
    sb_put(b, "{", 1);
    for (int i = 0; i < r->n_overrides; i++) {
        sb_kv_jstr(b, r->overrides[i].key, r->overrides[i].value, "");
        sb_sep(b, i, r->n_overrides, ", ");
    }
    sb_str(b, "}" TOP);
    /* Only with --freeze, so that reports without it match baselines/
     * byte for byte. */
    if (r->freeze[0])
        sb_kv_jstr(b, "freeze", r->freeze, TOP);
    /* Likewise only off the defaults: another optimizer than momentum, a
     * split --partition set. */
    if (graph_optimizer_name(r->optimizer) && r->optimizer != GOPT_MOMENTUM)
        sb_kv_jstr(b, "optimizer", graph_optimizer_name(r->optimizer), TOP);
    if (r->pdims_rank > 0) {
        sb_key(b, "input_partition_dims");
        for (int d = 0; d < r->pdims_rank; d++)
            sb_printf(b, "%s%d", d ? ", " : "[", r->pdims[d]);
        sb_str(b, "]" TOP);
    }
}

/* One core a line, so a baseline diff shows which core moved. */
static void put_core(sbuf *b, const emu_core_result *c)
{
    sb_str(b, "\n    {");
    sb_kv_int(b, "core", c->core, ", ");
    sb_kv_int(b, "chip", c->chip, ", ");
    sb_kv_int(b, "replica", c->replica, ", ");
    sb_kv_int(b, "shard", c->shard, ", ");
    sb_kv_num(b, "step_time_s", c->step_time_s, ", ");
    sb_key(b, "breakdown_s");
    sb_breakdown(b, c->breakdown_s);
    sb_str(b, ", ");
    sb_kv_num(b, "mxu_utilization", c->mxu_utilization, ", ");
    sb_kv_num(b, "hbm_peak_bytes", c->hbm_peak_bytes, ", ");
    sb_kv_num(b, "hbm_read_bytes", c->hbm_read_bytes, ", ");
    sb_kv_num(b, "hbm_write_bytes", c->hbm_write_bytes, ", ");
    sb_kv_num(b, "ici_bytes_sent", c->ici_bytes_sent, ", ");
    sb_kv_num(b, "flops", c->flops, "}");
}

static void put_per_core(sbuf *b, const emu_result *r)
{
    sb_key(b, "per_core");
    sb_str(b, "[");
    for (int i = 0; i < r->cores && r->per_core; i++) {
        put_core(b, &r->per_core[i]);
        sb_sep(b, i, r->cores, ",");
    }
    sb_str(b, r->cores > 0 && r->per_core ? "\n  ]" : "]");
}

/* --functional: the loss, the output's checksum, and the loss curve when
 * more than one step ran. */
static void put_values(sbuf *b, const emu_result *r)
{
    sb_str(b, TOP);
    sb_kv_num(b, "loss", r->loss, TOP);
    sb_key(b, "output_checksum");
    sb_printf(b, "\"%016llx\"", (unsigned long long)r->output_checksum);
    if (r->n_losses <= 1)
        return;
    sb_str(b, TOP);
    sb_key(b, "losses");
    sb_str(b, "[");
    for (int i = 0; i < r->n_losses; i++) {
        sb_num(b, r->losses[i]);
        sb_sep(b, i, r->n_losses, ", ");
    }
    sb_str(b, "]");
}

const char *const report_gconv_part[3] = {"forward", "input_gradient",
                                           "weight_gradient"};

/* A grouped layer's lowering, part by part ("grouped": {"forward":
 * "vector", ...}); nothing for a layer that is not grouped. */
static void put_gconv(sbuf *b, const uint8_t *gc)
{
    if (!gc[0] && !gc[1] && !gc[2])
        return;
    sb_str(b, ", ");
    sb_key(b, "grouped");
    sb_str(b, "{");
    const char *sep = "";
    for (int k = 0; k < 3; k++)
        if (gc[k]) {
            sb_str(b, sep);
            sb_key(b, report_gconv_part[k]);
            sb_jstr(b, fw_gconv_name((fw_gconv)gc[k]));
            sep = ", ";
        }
    sb_str(b, "}");
}

/* Core 0's critical path per layer, one layer a line: where the time
 * goes, for docs/VALIDATION.md and the viewer. */
static void put_layers(sbuf *b, const emu_result *r)
{
    sb_str(b, TOP);
    sb_key(b, "layers");
    sb_str(b, "[");
    for (int l = 0; l < r->n_layers; l++) {
        sb_str(b, "\n    {");
        sb_kv_jstr(b, "name", r->layer_names[l], ", ");
        sb_key(b, "time_s");
        sb_breakdown(b, r->layer_time_s + (size_t)l * CAT_COUNT);
        if (r->layer_gconv)
            put_gconv(b, r->layer_gconv[l]);
        sb_str(b, l + 1 < r->n_layers ? "}," : "}");
    }
    sb_str(b, "\n  ]");
}

/* One chip's four links (+x, -x, +y, -y) a line. */
static void put_links(sbuf *b, const emu_result *r)
{
    sb_str(b, TOP);
    sb_key(b, "link_busy_s");
    sb_str(b, "[");
    for (int ch = 0; ch < r->chips; ch++) {
        sb_str(b, "\n    [");
        for (int d = 0; d < 4; d++) {
            sb_num(b, r->link_busy_s[(size_t)ch * 4 + (size_t)d]);
            sb_sep(b, d, 4, ", ");
        }
        sb_str(b, ch + 1 < r->chips ? "]," : "]");
    }
    sb_str(b, "\n  ]");
}

char *report_to_json(const emu_result *r)
{
    sbuf b = {0};
    sb_str(&b, "{\n");
    put_run(&b, r);
    put_per_core(&b, r);
    if (r->has_values)
        put_values(&b, r);
    if (r->n_layers > 0 && r->layer_names && r->layer_time_s)
        put_layers(&b, r);
    if (r->link_busy_s && r->chips > 0)
        put_links(&b, r);
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
