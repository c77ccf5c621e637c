/* trace_json — the trace reader's JSON helpers.  A trace is written by
 * hand as often as by a generator, so the reader is strict: every mistake
 * becomes one line "FILE: JSON.path: what is wrong", every key is known
 * or refused (a typo must not silently become a default), every number is
 * range-checked before it reaches a product.  emu/trace_internal.h lists
 * the files of the reader. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "emu/graph.h"
#include "emu/rfile.h"
#include "emu/trace_internal.h"

/* Copies a user string for a message: at most 48 bytes, control
 * characters and bytes that are not UTF-8 shown as '?', so the message
 * stays one line of text. */
const char *trace_q(char *buf, size_t n, const char *s)
{
    size_t i = 0, j = 0;
    if (!s)
        s = "";
    while (s[i] && j + 10 < n && i < 48) {
        unsigned char ch = (unsigned char)s[i];
        size_t u = rfile_utf8_len((const unsigned char *)s + i);
        if (u == 0 && strncmp(s + i, RFILE_NUL_MARK, 6) == 0) {
            /* what the trace wrote there */
            memcpy(buf + j, "\\u0000", 6);
            i += 6;
            j += 6;
            continue;
        }
        if (u > 1 && rfile_ctrl_len((const unsigned char *)s + i, NULL)) {
            /* a C1 control or a bidi override would act on the terminal */
            buf[j++] = '?';
            i += u;
            continue;
        }
        if (u > 1) {
            /* a whole character or nothing, so the message stays UTF-8 */
            memcpy(buf + j, s + i, u);
            i += u;
            j += u;
            continue;
        }
        buf[j++] = (u == 0 || ch < 0x20 || ch == 0x7f) ? '?' : (char)ch;
        i++;
    }
    if (s[i] && j + 4 <= n) {
        memcpy(buf + j, "...", 3);
        j += 3;
    }
    buf[j] = 0;
    return buf;
}

tpu_status trace_fail(trace_ctx *c, const char *path, const char *fmt,
                      ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (path && path[0])
        return tpu_fail(c->err, TPU_ERR_INPUT, "%s: %s: %s", c->file, path,
                        msg);
    return tpu_fail(c->err, TPU_ERR_INPUT, "%s: %s", c->file, msg);
}

/* "found 0", "found 2.5" for numbers (the value is the useful part),
 * "found a string" otherwise.  From 2^53 on a double no longer holds
 * every integer (9007199254740993 reads as ...992): such a number is
 * shown as the approximation it is, not as another exact one. */
const char *trace_found(char *buf, size_t n, const cJSON *v)
{
    if (cJSON_IsNumber(v) && fabs(v->valuedouble) >= 9007199254740992.0)
        snprintf(buf, n, "found about %.5g (beyond 2^53: not exact)",
                 v->valuedouble);
    else if (cJSON_IsNumber(v))
        snprintf(buf, n, "found %.17g", v->valuedouble);
    else
        snprintf(buf, n, "found %s", trace_type(v));
    return buf;
}

const char *trace_type(const cJSON *v)
{
    if (!v)
        return "nothing";
    if (cJSON_IsNull(v))
        return "null";
    if (cJSON_IsBool(v))
        return "a boolean";
    if (cJSON_IsNumber(v))
        return "a number";
    if (cJSON_IsString(v))
        return "a string";
    if (cJSON_IsArray(v))
        return "a list";
    if (cJSON_IsObject(v))
        return "an object";
    return "an unknown value";
}

/* base.key; top-level keys are named bare ("system", "run"). */
void trace_path(char *buf, size_t n, const char *base, const char *key)
{
    if (strcmp(base, "(top level)") == 0)
        snprintf(buf, n, "%s", key);
    else
        snprintf(buf, n, "%s.%s", base, key);
}

/* The index of s in a NULL-terminated word list, -1 when absent. */
static int trace_word(const char *const *words, const char *s)
{
    for (int i = 0; words[i]; i++)
        if (strcmp(s, words[i]) == 0)
            return i;
    return -1;
}

/* The words as a, b, c (quoted: "a", "b", "c") into buf; a word that
 * does not fit ends the list where it was cut. */
static const char *trace_join(char *buf, size_t cap,
                              const char *const *words, int quoted)
{
    size_t n = 0;
    buf[0] = 0;
    for (const char *const *a = words; *a; a++) {
        int w = snprintf(buf + n, cap - n, quoted ? "%s\"%s\"" : "%s%s",
                         n ? ", " : "", *a);
        if (w < 0 || (size_t)w >= cap - n)
            break;
        n += (size_t)w;
    }
    return buf;
}

/* An unknown key at p.  Keras's and XLA's other names for a grouped
 * convolution (depth_multiplier, feature_group_count) point at `groups`;
 * `groups` on a conv_transpose says that only conv takes it. */
static tpu_status trace_unknown_key(trace_ctx *c, const char *p,
                                   const char *key,
                                   const char *const *allowed,
                                   const char *where)
{
    static const char *const grouped[] = {"depth_multiplier",
                                          "feature_group_count", "depthwise",
                                          NULL};
    char list[512];
    if (trace_word(grouped, key) >= 0)
        return trace_fail(c, p, "not a trace key: a grouped or depthwise "
                                "convolution is a conv with \"groups\" "
                                "(depthwise: groups = input channels, filters "
                                "= channels x multiplier; docs/TRACE.md)");
    if (where && strcmp(where, "conv_transpose") == 0 &&
        strcmp(key, "groups") == 0)
        return trace_fail(c, p, "grouped conv_transpose is not modelled "
                                "(only conv takes groups; docs/TRACE.md)");
    return trace_fail(c, p, "unknown key%s%s (expected one of: %s)",
                      where ? " for " : "", where ? where : "",
                      trace_join(list, sizeof list, allowed, 0));
}

/* Refuses unknown and duplicate keys of an object. */
tpu_status trace_keys(trace_ctx *c, const cJSON *obj, const char *path,
                      const char *const *allowed, const char *where)
{
    char q[64], p[320];
    /* the first member repeating an earlier key (emu/rfile.h) */
    int dup = rfile_json_dup(obj), i = 0;
    if (dup == -2)
        return tpu_fail(c->err, TPU_ERR_SYSTEM, "%s: out of memory",
                        c->file);
    for (const cJSON *it = obj->child; it; it = it->next, i++) {
        trace_path(p, sizeof p, path, trace_q(q, sizeof q, it->string));
        if (trace_word(allowed, it->string) < 0)
            return trace_unknown_key(c, p, it->string, allowed, where);
        if (i == dup)
            return trace_fail(c, p, "duplicate key");
    }
    return TPU_OK;
}

/* A number that is an integer in [lo, hi]. */
int trace_is_int(const cJSON *v, double lo, double hi)
{
    return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble) &&
           v->valuedouble >= lo && v->valuedouble <= hi;
}

/* A positive integer in [lo, hi]; *out untouched when absent and !req. */
tpu_status trace_int(trace_ctx *c, const cJSON *obj, const char *base,
                     const char *key, int req, int64_t lo, int64_t hi,
                     int64_t *out)
{
    char p[320], f[64];
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    trace_path(p, sizeof p, base, key);
    if (!v) {
        if (req)
            return trace_fail(c, base, "missing key '%s'", key);
        return TPU_OK;
    }
    if (!trace_is_int(v, (double)lo, (double)hi)) {
        if (lo == 1)
            return trace_fail(c, p,
                              "expected a positive integer (at most %lld), "
                              "%s",
                              (long long)hi, trace_found(f, sizeof f, v));
        return trace_fail(c, p, "expected an integer from %lld to %lld, %s",
                          (long long)lo, (long long)hi,
                          trace_found(f, sizeof f, v));
    }
    *out = (int64_t)v->valuedouble;
    return TPU_OK;
}

/* A string, at most cap-1 bytes; NULL result when absent and !req. */
tpu_status trace_str(trace_ctx *c, const cJSON *obj, const char *base,
                     const char *key, int req, const char **out)
{
    char p[320];
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    trace_path(p, sizeof p, base, key);
    *out = NULL;
    if (!v) {
        if (req)
            return trace_fail(c, base, "missing key '%s'", key);
        return TPU_OK;
    }
    if (!cJSON_IsString(v) || !v->valuestring)
        return trace_fail(c, p, "expected a string, found %s",
                          trace_type(v));
    *out = v->valuestring;
    return TPU_OK;
}

/* A name for a layer, an input, the trace or a system: non-empty, short,
 * printable, so it can be echoed in messages and reports. */
tpu_status trace_name(trace_ctx *c, const cJSON *obj, const char *base,
                      const char *key, int req, char *dst, size_t cap)
{
    const char *s;
    char p[320];
    tpu_status st = trace_str(c, obj, base, key, req, &s);
    if (st || !s)
        return st;
    trace_path(p, sizeof p, base, key);
    if (!s[0])
        return trace_fail(c, p, "empty string");
    if (strlen(s) >= cap)
        return trace_fail(c, p, "longer than %zu bytes", cap - 1);
    /* the reports' rule (rfile.h), so a name run accepts reads back */
    char why[96];
    if (rfile_text_problem(s, 0, why, sizeof why))
        return trace_fail(c, p, "%s", why);
    memcpy(dst, s, strlen(s) + 1);
    return TPU_OK;
}

tpu_status trace_bool(trace_ctx *c, const cJSON *obj, const char *base,
                      const char *key, int *out)
{
    char p[320];
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v)
        return TPU_OK;
    trace_path(p, sizeof p, base, key);
    if (!cJSON_IsBool(v))
        return trace_fail(c, p, "expected true or false, found %s",
                          trace_type(v));
    *out = cJSON_IsTrue(v) ? 1 : 0;
    return TPU_OK;
}

/* One of several words; *out is the index, untouched when absent. */
tpu_status trace_enum(trace_ctx *c, const cJSON *obj, const char *base,
                      const char *key, int req,
                      const char *const *words, int *out)
{
    const char *s;
    char p[320], q[64], list[256];
    tpu_status st = trace_str(c, obj, base, key, req, &s);
    if (st || !s)
        return st;
    int i = trace_word(words, s);
    if (i >= 0) {
        *out = i;
        return TPU_OK;
    }
    trace_path(p, sizeof p, base, key);
    return trace_fail(c, p, "'%s' is not one of %s",
                      trace_q(q, sizeof q, s),
                      trace_join(list, sizeof list, words, 1));
}

/* A per-dimension parameter: a list of 2 or 3 positive integers, or (when
 * number_ok) one positive integer meaning the same for every dimension.
 * *rank is the list's length, 0 for a number, -1 when absent. */
tpu_status trace_dims(trace_ctx *c, const cJSON *obj, const char *base,
                      const char *key, int req, int number_ok,
                      int vals[GRAPH_MAX_SP], int *rank)
{
    char p[320];
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    int n = 0, ok;
    trace_path(p, sizeof p, base, key);
    *rank = -1;
    if (!v) {
        if (req)
            return trace_fail(c, base, "missing key '%s'", key);
        return TPU_OK;
    }
    if (number_ok && trace_is_int(v, 1, GRAPH_DIM_MAX)) {
        for (int d = 0; d < GRAPH_MAX_SP; d++)
            vals[d] = (int)v->valuedouble;
        *rank = 0;
        return TPU_OK;
    }
    ok = cJSON_IsArray(v);
    if (ok) {
        n = cJSON_GetArraySize(v);
        ok = n == 2 || n == 3;
    }
    int d = 0;
    for (const cJSON *e = ok ? v->child : NULL; e && ok; e = e->next, d++) {
        ok = trace_is_int(e, 1, GRAPH_DIM_MAX);
        if (ok)
            vals[d] = (int)e->valuedouble;
    }
    if (!ok)
        return trace_fail(c, p,
                          "expected %s2 or 3 positive integers (each at most "
                          "%d)",
                          number_ok ? "a positive integer or a list of " : "",
                          GRAPH_DIM_MAX);
    *rank = n;
    return TPU_OK;
}
