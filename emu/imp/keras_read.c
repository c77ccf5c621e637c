/* keras_read — the Keras importer's reading side (keras_internal.h): the
 * model file read whole (a .keras archive's config.json through libzip),
 * parsed and checked as one JSON value, the model found in it (Keras
 * JSON, a TensorFlow.js model.json), and the messages and typed access to
 * the JSON that every other file of the importer reports through.  It is
 * the only file that touches libzip and the file system.
 */
#include "emu/imp/keras_internal.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zip.h>

#include "emu/rfile.h"

/* ---- messages ---------------------------------------------------------- */

tpu_status keras_fail(kx *x, const char *path, const char *fmt, ...)
{
    char why[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return tpu_fail(x->err, TPU_ERR_INPUT, "%s: %s: %s", x->file,
                    path && *path ? path : "(top level)", why);
}

tpu_status keras_oom(kx *x)
{
    return tpu_fail(x->err, TPU_ERR_SYSTEM, "out of host memory");
}

/* A user string as it may appear in a one-line message: at most 48
 * bytes, control bytes as '?'. */
const char *keras_shown(char *buf, size_t cap, const char *s)
{
    size_t n = 0;
    if (!s)
        s = "";
    for (; *s && n + 1 < cap && n < 48; s++)
        buf[n++] = ((unsigned char)*s < 0x20 || *s == 0x7f) ? '?' : *s;
    if (*s && n >= 48 && n + 4 < cap) {
        memcpy(buf + n, "...", 3);
        n += 3;
    }
    buf[n] = 0;
    return buf;
}

void keras_path(char *dst, const char *base, const char *fmt, ...)
{
    char tail[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tail, sizeof tail, fmt, ap);
    va_end(ap);
    if (!base || !*base)
        snprintf(dst, KERAS_PATH_MAX, "%s",
                 tail[0] == '.' ? tail + 1 : tail);
    else
        snprintf(dst, KERAS_PATH_MAX, "%s%s", base, tail);
}

tpu_status keras_append(kx *x, char **buf, size_t *len, const char *s)
{
    size_t n = strlen(s);
    char *p = realloc(*buf, *len + n + 1);
    if (!p)
        return keras_oom(x);
    memcpy(p + *len, s, n + 1);
    *buf = p;
    *len += n;
    return TPU_OK;
}

tpu_status keras_note(kx *x, const char *fmt, ...)
{
    char line[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    tpu_status st = keras_append(x, &x->notes, &x->notes_len, line);
    return st ? st : keras_append(x, &x->notes, &x->notes_len, "\n");
}

/* ---- typed access to the Keras JSON ------------------------------------ */

const char *keras_jtype(const cJSON *j)
{
    if (!j)
        return "nothing";
    if (cJSON_IsString(j))
        return "a string";
    if (cJSON_IsNumber(j))
        return "a number";
    if (cJSON_IsBool(j))
        return "a boolean";
    if (cJSON_IsNull(j))
        return "null";
    if (cJSON_IsArray(j))
        return "a list";
    return "an object";
}

const char *keras_get_str(const cJSON *o, const char *key)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(j) ? j->valuestring : NULL;
}

const cJSON *keras_get(const cJSON *o, const char *key)
{
    return cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, key)
                             : NULL;
}

/* A whole number in [lo, hi]. */
int keras_is_int(const cJSON *j, int64_t lo, int64_t hi)
{
    if (!cJSON_IsNumber(j))
        return 0;
    double v = j->valuedouble;
    return v >= (double)lo && v <= (double)hi && v == (double)(int64_t)v;
}

/* An optional positive integer key (default def when absent or null). */
tpu_status keras_cfg_int(kx *x, kcall *c, const char *key, int64_t lo,
                         int64_t hi, int64_t def, int64_t *out)
{
    const cJSON *j = keras_get(c->cfg, key);
    char p[KERAS_PATH_MAX];
    if (!j || cJSON_IsNull(j)) {
        if (def < lo) {
            keras_path(p, c->path, ".config.%s", key);
            return keras_fail(x, p,
                              "missing (expected an integer %lld ... %lld)",
                              (long long)lo, (long long)hi);
        }
        *out = def;
        return TPU_OK;
    }
    if (!keras_is_int(j, lo, hi)) {
        keras_path(p, c->path, ".config.%s", key);
        if (cJSON_IsNumber(j))
            return keras_fail(x, p,
                              "expected an integer %lld ... %lld, found %g",
                              (long long)lo, (long long)hi, j->valuedouble);
        return keras_fail(x, p, "expected an integer %lld ... %lld, found %s",
                          (long long)lo, (long long)hi, keras_jtype(j));
    }
    *out = (int64_t)j->valuedouble;
    return TPU_OK;
}

tpu_status keras_cfg_bool(kx *x, kcall *c, const char *key, int def, int *out)
{
    const cJSON *j = keras_get(c->cfg, key);
    if (!j || cJSON_IsNull(j)) {
        *out = def;
        return TPU_OK;
    }
    if (!cJSON_IsBool(j)) {
        char p[KERAS_PATH_MAX];
        keras_path(p, c->path, ".config.%s", key);
        return keras_fail(x, p, "expected true or false, found %s",
                          keras_jtype(j));
    }
    *out = cJSON_IsTrue(j);
    return TPU_OK;
}

/* A per-dimension key (kernel_size, strides, pool_size, ...): one number
 * for every dimension or a list of `dims`; out gets the trace's `nsp`
 * entries (a 1D layer's list is [1, n]). */
tpu_status keras_cfg_dims(kx *x, kcall *c, const char *key, int dims, int def,
                          int *out)
{
    const cJSON *j = keras_get(c->cfg, key);
    char p[KERAS_PATH_MAX];
    int v[3] = {def, def, def};
    keras_path(p, c->path, ".config.%s", key);
    if (j && !cJSON_IsNull(j)) {
        if (keras_is_int(j, 1, GRAPH_DIM_MAX)) {
            v[0] = v[1] = v[2] = (int)j->valuedouble;
        } else if (cJSON_IsArray(j) && cJSON_GetArraySize(j) == dims) {
            for (int d = 0; d < dims; d++) {
                const cJSON *e = cJSON_GetArrayItem(j, d);
                if (!keras_is_int(e, 1, GRAPH_DIM_MAX))
                    return keras_fail(x, p,
                                      "expected %d positive integers (each "
                                      "at most %d)",
                                      dims, GRAPH_DIM_MAX);
                v[d] = (int)e->valuedouble;
            }
        } else {
            return keras_fail(x, p,
                              "expected a positive integer or a list of %d, "
                              "found %s",
                              dims, keras_jtype(j));
        }
    } else if (def <= 0) {
        return keras_fail(x, p,
                          "missing (expected a list of %d positive "
                          "integers)",
                          dims);
    }
    if (dims == 1) {
        out[0] = 1;
        out[1] = v[0];
    } else {
        for (int d = 0; d < dims; d++)
            out[d] = v[d];
    }
    return TPU_OK;
}

tpu_status keras_cfg_padding(kx *x, kcall *c, const char *def, int *same)
{
    const cJSON *j = keras_get(c->cfg, "padding");
    const char *s = cJSON_IsString(j) ? j->valuestring : NULL;
    char p[KERAS_PATH_MAX], b[64];
    if (!j || cJSON_IsNull(j))
        s = def;
    keras_path(p, c->path, ".config.padding");
    if (!s)
        return keras_fail(x, p, "expected \"same\" or \"valid\", found %s",
                          keras_jtype(j));
    if (strcmp(s, "same") == 0)
        *same = 1;
    else if (strcmp(s, "valid") == 0)
        *same = 0;
    else
        return keras_fail(x, p,
                          "'%s' has no trace equivalent (expected \"same\" "
                          "or \"valid\")",
                          keras_shown(b, sizeof b, s));
    return TPU_OK;
}

const cJSON *keras_find_model(kx *x, const cJSON *doc, char *path,
                              tpu_status *st)
{
    const cJSON *mt = keras_get(doc, "modelTopology");
    *st = TPU_OK;
    if (keras_get_str(doc, "format") &&
        strcmp(keras_get_str(doc, "format"), "tpuemu-trace/1") == 0) {
        *st = keras_fail(x, "format", "this is a tpuemu trace already, not a "
                    "Keras model (tpuemu run reads it as it is)");
        return NULL;
    }
    if (mt) {
        /* TensorFlow.js: the Keras config, or the Python converter's
         * {"model_config": ..., "training_config": ...} */
        if (!cJSON_IsObject(mt)) {
            *st = keras_fail(x, "modelTopology", "expected an object, found %s",
                        keras_jtype(mt));
            return NULL;
        }
        if (keras_get(mt, "model_config")) {
            strcpy(path, "modelTopology.model_config");
            return keras_get(mt, "model_config");
        }
        strcpy(path, "modelTopology");
        return mt;
    }
    if (cJSON_IsObject(doc) && keras_get(doc, "class_name")) {
        path[0] = 0;
        return doc;
    }
    *st = keras_fail(x, NULL, "not a Keras model: expected \"class_name\" (Keras "
                "model.to_json(), a .keras archive's config.json) or "
                "\"modelTopology\" (a TensorFlow.js model.json)");
    return NULL;
}
/* ---- reading ----------------------------------------------------------- */

static tpu_status read_zip(const char *path, char *text, size_t len,
                           char **json, size_t *jlen, tpu_error *err)
{
    zip_error_t ze;
    zip_error_init(&ze);
    zip_source_t *src = zip_source_buffer_create(text, len, 0, &ze);
    zip_t *za = src ? zip_open_from_source(src, ZIP_RDONLY, &ze) : NULL;
    tpu_status st = TPU_OK;
    *json = NULL;
    if (!za) {
        st = tpu_fail(err, TPU_ERR_INPUT, "%s: not a readable zip archive "
                      "(%s)", path, zip_error_strerror(&ze));
        if (src)
            zip_source_free(src);
        zip_error_fini(&ze);
        return st;
    }
    zip_error_fini(&ze);
    zip_int64_t idx = zip_name_locate(za, "config.json", 0);
    zip_stat_t zs;
    zip_file_t *zf = NULL;
    if (idx < 0) {
        st = tpu_fail(err, TPU_ERR_INPUT, "%s: the archive holds no "
                      "config.json (a .keras file written by "
                      "model.save(\"m.keras\") has one)", path);
        goto out;
    }
    if (zip_stat_index(za, (zip_uint64_t)idx, 0, &zs) != 0 ||
        !(zs.valid & ZIP_STAT_SIZE) || zs.size > KERAS_FILE_MAX) {
        st = tpu_fail(err, TPU_ERR_INPUT, "%s (config.json): %s", path,
                      (zs.valid & ZIP_STAT_SIZE) && zs.size > KERAS_FILE_MAX
                          ? "larger than 256 MiB, the limit for this input"
                          : "cannot read its size");
        goto out;
    }
    *json = malloc((size_t)zs.size + 1);
    if (!*json) {
        st = tpu_fail(err, TPU_ERR_SYSTEM, "out of host memory");
        goto out;
    }
    zf = zip_fopen_index(za, (zip_uint64_t)idx, 0);
    zip_int64_t got = zf ? zip_fread(zf, *json, zs.size) : -1;
    if (!zf || got < 0 || (zip_uint64_t)got != zs.size) {
        st = tpu_fail(err, TPU_ERR_INPUT, "%s (config.json): cannot "
                      "extract: %s", path,
                      zf ? zip_error_strerror(zip_file_get_error(zf))
                         : zip_strerror(za));
        free(*json);
        *json = NULL;
        goto out;
    }
    (*json)[zs.size] = 0;
    *jlen = (size_t)zs.size;
out:
    if (zf)
        zip_fclose(zf);
    zip_discard(za);
    return st;
}

tpu_status keras_read(const char *path, cJSON **model, char **raw,
                      size_t *raw_len, char *shown, int cap, tpu_error *err)
{
    char *text = NULL, *json = NULL;
    size_t len = 0, jlen = 0;
    tpu_status st;
    *model = NULL;
    if (raw)
        *raw = NULL;
    snprintf(shown, (size_t)cap, "%s", path);
    st = rfile_read(path, KERAS_FILE_MAX, RFILE_PIPE_IDLE_S, &text, &len,
                    err);
    if (st)
        return st;
    if (len >= 4 && memcmp(text, "PK\x03\x04", 4) == 0) {
        st = read_zip(path, text, len, &json, &jlen, err);
        free(text);
        if (st)
            return st;
        text = json;
        len = jlen;
        snprintf(shown, (size_t)cap, "%s (config.json)", path);
    }
    const char *end = NULL;
    cJSON *doc = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!doc) {
        char why[200];
        size_t pos = (end >= text && end <= text + len) ? (size_t)(end - text)
                                                        : 0;
        rfile_json_error(text, len, pos, why, sizeof why);
        st = tpu_fail(err, TPU_ERR_INPUT, "%s: %s", shown, why);
        free(text);
        return st;
    }
    size_t pos = (size_t)(end - text);
    while (pos < len && (text[pos] == ' ' || text[pos] == '\n' ||
                         text[pos] == '\r' || text[pos] == '\t'))
        pos++;
    if (pos < len) {
        int line, col, depth;
        rfile_json_where(text, len, pos, &line, &col, &depth);
        cJSON_Delete(doc);
        free(text);
        return tpu_fail(err, TPU_ERR_INPUT, "%s: not valid JSON: unexpected "
                        "text after the top-level value at line %d, column %d",
                        shown, line, col);
    }
    if (raw) {
        *raw = text;
        *raw_len = len;
    } else {
        free(text);
    }
    *model = doc;
    return TPU_OK;
}
