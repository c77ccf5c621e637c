/* trace — the `tpuemu-trace/1` reader (cJSON) behind graph_load and
 * graph_parse (emu/graph.h): the document's top level, graph, run and
 * reference.  Its helpers are prefixed trace_; emu/trace_internal.h lists
 * the other files of the reader.  docs/TRACE.md lists every key, default
 * and limit.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "emu/graph.h"
#include "emu/rfile.h"
#include "emu/trace_internal.h"

/* A trace of this size is already far larger than any real network
 * (ResNet-50 is ~30 KB); the cap keeps a wrong path (a disk image) from
 * being read into memory. */
#define TRACE_FILE_MAX ((long)256 << 20)

static const char *const trace_mode_words[] = {"infer", "train", NULL};

/* In graph_optimizer's order. */
static const char *const trace_opt_words[] = {"momentum", "sgd", "adam",
                                              "rmsprop", "lars", NULL};

const char *graph_optimizer_name(int k)
{
    return k >= 0 && k < GOPT_COUNT ? trace_opt_words[k] : NULL;
}

int graph_optimizer_find(const char *name)
{
    for (int k = 0; name && k < GOPT_COUNT; k++)
        if (strcmp(name, trace_opt_words[k]) == 0)
            return k;
    return -1;
}

const char *graph_optimizer_words(void)
{
    return "sgd, momentum, adam, rmsprop, lars";
}

int graph_optimizer_slots(const graph *g)
{
    switch (g->optimizer) {
    case GOPT_SGD:
        return 0;
    case GOPT_ADAM:
        return 2;
    case GOPT_RMSPROP:
        return g->opt_momentum > 0 ? 2 : 1;
    default:
        return 1;
    }
}

/* run.optimizer: a word, or {"name": WORD} with rmsprop's "momentum" (a
 * second slot when above 0, as Keras keeps one only then). */
static tpu_status trace_optimizer(trace_ctx *c, graph *g, const cJSON *v)
{
    static const char *const keys[] = {"name", "momentum", NULL};
    const char *p = "run.optimizer", *s;
    char q[64];
    tpu_status st;
    if (cJSON_IsObject(v)) {
        if ((st = trace_keys(c, v, p, keys, NULL)))
            return st;
        if ((st = trace_str(c, v, p, "name", 1, &s)))
            return st;
        p = "run.optimizer.name";
    } else if (cJSON_IsString(v)) {
        s = v->valuestring;
    } else {
        return trace_fail(c, p, "expected a name (%s) or an object with "
                          "\"name\", found %s",
                          graph_optimizer_words(), trace_type(v));
    }
    int k = graph_optimizer_find(s);
    if (k < 0)
        return trace_fail(c, p, "unknown optimizer '%s' (expected one of: %s)",
                          trace_q(q, sizeof q, s), graph_optimizer_words());
    g->optimizer = (graph_optimizer)k;
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(v, "momentum");
    if (!m)
        return TPU_OK;
    if (k != GOPT_RMSPROP)
        return trace_fail(c, "run.optimizer.momentum",
                          "only rmsprop takes a momentum here (momentum's "
                          "and lars's is the update's own)");
    if (!cJSON_IsNumber(m) || !(m->valuedouble >= 0) ||
        !(m->valuedouble < 1))
        return trace_fail(c, "run.optimizer.momentum",
                          "expected a number in [0, 1), %s",
                          trace_found(q, sizeof q, m));
    g->opt_momentum = m->valuedouble;
    return TPU_OK;
}

static tpu_status trace_run(trace_ctx *c, graph *g, const cJSON *run)
{
    static const char *const keys[] = {"mode",
                                       "global_batch",
                                       "num_cores_per_replica",
                                       "input_partition_dims",
                                       "optimizer",
                                       "batchnorm_group",
                                       "comment",
                                       NULL};
    const cJSON *ipd, *opt;
    const char *cm;
    int64_t n64 = 1;
    int mode = 1;
    tpu_status st;
    if (!cJSON_IsObject(run))
        return trace_fail(c, "run", "expected an object, found %s",
                          trace_type(run));
    if ((st = trace_keys(c, run, "run", keys, NULL)))
        return st;
    if ((st = trace_enum(c, run, "run", "mode", 1, trace_mode_words, &mode)))
        return st;
    g->train = mode;
    if ((st = trace_int(c, run, "run", "global_batch", 1, 1, GRAPH_DIM_MAX,
                        &g->global_batch)))
        return st;
    if ((st = trace_int(c, run, "run", "num_cores_per_replica", 0, 1, 2048,
                        &n64)))
        return st;
    g->cores_per_replica = (int)n64;
    n64 = 1;
    if ((st = trace_int(c, run, "run", "batchnorm_group", 0, 1, 65536, &n64)))
        return st;
    g->bn_group = (int)n64;
    if ((st = trace_str(c, run, "run", "comment", 0, &cm)))
        return st;
    opt = cJSON_GetObjectItemCaseSensitive(run, "optimizer");
    if (opt && (st = trace_optimizer(c, g, opt)))
        return st;

    /* Without input_partition_dims nothing is split: N, every spatial
     * axis and C by 1. */
    g->pdims_rank = 2 + g->layers[0].out.nsp;
    for (int d = 0; d < GRAPH_MAX_PDIMS; d++)
        g->pdims[d] = 1;
    ipd = cJSON_GetObjectItemCaseSensitive(run, "input_partition_dims");
    if (!ipd || cJSON_IsNull(ipd))
        return TPU_OK;
    return trace_partition(c, g, ipd);
}

static tpu_status trace_reference(trace_ctx *c, graph *g, const cJSON *ref)
{
    static const char *const keys[] = {"step_time_s", "source", "comment",
                                       "family", "baseline", NULL};
    const cJSON *v;
    const char *s;
    tpu_status st;
    if (!cJSON_IsObject(ref))
        return trace_fail(c, "reference", "expected an object, found %s",
                          trace_type(ref));
    if ((st = trace_keys(c, ref, "reference", keys, NULL)))
        return st;
    v = cJSON_GetObjectItemCaseSensitive(ref, "step_time_s");
    if (!v)
        return trace_fail(c, "reference", "missing key 'step_time_s'");
    if (!cJSON_IsNumber(v) || !(v->valuedouble > 0) ||
        !(v->valuedouble < 1e9))
    {
        char f[64];
        return trace_fail(c, "reference.step_time_s",
                          "expected a positive number of seconds, %s",
                          trace_found(f, sizeof f, v));
    }
    g->has_reference = 1;
    g->reference_step_s = v->valuedouble;
    if ((st = trace_str(c, ref, "reference", "source", 0, &s)))
        return st;
    if ((st = trace_str(c, ref, "reference", "comment", 0, &s)))
        return st;
    if ((st = trace_name(c, ref, "reference", "family", 0, g->reference_family,
                         sizeof g->reference_family)))
        return st;
    if ((st = trace_name(c, ref, "reference", "baseline", 0,
                         g->reference_baseline,
                         sizeof g->reference_baseline)))
        return st;
    s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ref, "source"));
    if (s) {
        /* Free text: kept as far as it fits, never refused for length. */
        size_t n = strlen(s);
        if (n >= sizeof g->reference_source) {
            n = sizeof g->reference_source - 1;
            /* not inside a UTF-8 character (validate prints it as JSON) */
            while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80)
                n--;
        }
        /* printed to the terminal: no escape sequences, one line (a
         * multi-byte control becomes one space) */
        size_t j = 0;
        for (size_t i = 0; i < n;) {
            size_t k = rfile_ctrl_len((const unsigned char *)s + i, NULL);
            if (k) {
                g->reference_source[j++] = ' ';
                i += k;
            } else {
                g->reference_source[j++] = s[i++];
            }
        }
        g->reference_source[j] = 0;
    }
    return TPU_OK;
}

/* Every string of the document, keys included, must be UTF-8 without NUL:
 * names are echoed in messages and reports (a report with invalid UTF-8
 * is not JSON), and a NUL would cut a name short.  `path` is a shared
 * buffer holding the JSON path of v; each level appends and restores. */
static tpu_status trace_text_ok(trace_ctx *c, const char *s, const char *path,
                                const char *what)
{
    char why[96];
    const char *bad = rfile_text_problem(s, 1, why, sizeof why);
    /* a mark without a \u0000 in the text was six 0xFF bytes there */
    if (bad && !c->nul_marked && strncmp(bad, "contains a NUL", 14) == 0)
        snprintf(why, sizeof why, "is not valid UTF-8 (byte 0xff)");
    if (bad)
        return trace_fail(c, path, "%s %s", what, why);
    return TPU_OK;
}

static tpu_status trace_strings(trace_ctx *c, const cJSON *v, char *path,
                                size_t cap)
{
    size_t at = strlen(path);
    int i = 0;
    tpu_status st;
    if (cJSON_IsString(v) && v->valuestring)
        return trace_text_ok(c, v->valuestring, path, "the string");
    if (!cJSON_IsArray(v) && !cJSON_IsObject(v))
        return TPU_OK;
    for (const cJSON *e = v->child; e; e = e->next, i++) {
        if (cJSON_IsObject(v)) {
            char q[64];
            const char *k = e->string ? e->string : "";
            if (at == 0)
                snprintf(path, cap, "%s", trace_q(q, sizeof q, k));
            else
                snprintf(path + at, cap - at, ".%s", trace_q(q, sizeof q, k));
            if ((st = trace_text_ok(c, k, path, "the key")))
                return st;
        } else {
            snprintf(path + at, cap - at, "[%d]", i);
        }
        if ((st = trace_strings(c, e, path, cap)))
            return st;
        path[at] = 0;
    }
    return TPU_OK;
}

/* The file name without directory and ".json".  A file name may hold any
 * byte, but the trace's name is printed by run and written to the report,
 * which check and view refuse unless it is UTF-8 without control
 * characters (the "name" key's rule): so a control character (as
 * rfile_ctrl_len counts them) or a byte that is not UTF-8 becomes '?',
 * and a long name is cut before a character that does not fit whole. */
static void trace_default_name(graph *g, const char *path)
{
    const char *b = strrchr(path, '/');
    size_t n, i = 0, j = 0;
    b = b ? b + 1 : path;
    n = strlen(b);
    if (n > 5 && strcmp(b + n - 5, ".json") == 0)
        n -= 5;
    while (i < n) {
        const unsigned char *u = (const unsigned char *)b + i;
        size_t k = rfile_utf8_len(u);
        int bad = k == 0 || i + k > n || rfile_ctrl_len(u, NULL) != 0;
        size_t w = bad ? 1 : k;
        if (j + w >= sizeof g->name)
            break;
        if (bad)
            g->name[j] = '?';
        else
            memcpy(g->name + j, b + i, k);
        i += k ? k : 1;
        j += w;
    }
    g->name[j] = 0;
}

/* graph.inputs or graph.layers: present, a list, not empty. */
static tpu_status trace_list_of(trace_ctx *c, const cJSON *v, const char *key)
{
    char p[32];
    if (!v)
        return trace_fail(c, "graph", "missing key '%s'", key);
    snprintf(p, sizeof p, "graph.%s", key);
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) < 1)
        return trace_fail(c, p, "expected a non-empty list of %s, found %s",
                          key,
                          cJSON_IsArray(v) ? "an empty list" : trace_type(v));
    return TPU_OK;
}

/* graph: the inputs, then the layers, each defined before it is used. */
static tpu_status trace_graph(trace_ctx *c, graph *g, const cJSON *gr)
{
    static const char *const keys[] = {"inputs", "layers", "comment", NULL};
    const cJSON *inputs, *layers, *v;
    const char *s;
    int n_in, n_layers, j;
    tpu_status st;
    if (!cJSON_IsObject(gr))
        return trace_fail(c, "graph", "expected an object, found %s",
                          trace_type(gr));
    if ((st = trace_keys(c, gr, "graph", keys, NULL)))
        return st;
    if ((st = trace_str(c, gr, "graph", "comment", 0, &s)))
        return st;
    inputs = cJSON_GetObjectItemCaseSensitive(gr, "inputs");
    layers = cJSON_GetObjectItemCaseSensitive(gr, "layers");
    if ((st = trace_list_of(c, inputs, "inputs")) ||
        (st = trace_list_of(c, layers, "layers")))
        return st;
    n_in = cJSON_GetArraySize(inputs);
    n_layers = cJSON_GetArraySize(layers);
    if (n_in > GRAPH_LAYERS_MAX)
        return trace_fail(c, "graph.inputs", "%d inputs, more than the limit "
                          "of %d", n_in, GRAPH_LAYERS_MAX);
    if (n_layers > GRAPH_LAYERS_MAX)
        return trace_fail(c, "graph.layers", "%d layers, more than the limit "
                          "of %d", n_layers, GRAPH_LAYERS_MAX);
    g->layers = calloc((size_t)n_in + (size_t)n_layers, sizeof *g->layers);
    if (!g->layers)
        return tpu_fail(c->err, TPU_ERR_SYSTEM,
                        "%s: out of memory for %d layers", c->file,
                        n_in + n_layers);
    if ((st = graph_index_reserve(g, n_in + n_layers, c->err)))
        return tpu_fail(c->err, st, "%s: out of memory for %d layers",
                        c->file, n_in + n_layers);
    j = 0;
    for (v = inputs->child; v; v = v->next, j++)
        if ((st = trace_input(c, g, v, j)))
            return st;
    g->n_inputs = n_in;
    j = 0;
    for (v = layers->child; v; v = v->next, j++)
        if ((st = trace_layer(c, g, layers, v, j)))
            return st;
    return TPU_OK;
}

/* format, name and system.  The format first: another tpuemu file's keys
 * would otherwise be reported as unknown trace keys. */
static tpu_status trace_head(trace_ctx *c, graph *g, const cJSON *root,
                             const char *path)
{
    static const char *const keys[] = {"format",    "name",  "system", "run",
                                       "reference", "graph", "comment",
                                       NULL};
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "format");
    const char *s;
    char q[64];
    tpu_status st;
    if (cJSON_IsString(v) && strcmp(v->valuestring, "tpuemu-report/1") == 0)
        return trace_fail(c, "format", "this is a tpuemu report (what run "
                          "--report writes; check and view read it), not a "
                          "trace");
    if (cJSON_IsString(v) && strcmp(v->valuestring, "tpuemu-sweep/1") == 0)
        return trace_fail(c, "format", "this is a sweep file (tpuemu sweep "
                          "reads it), not a trace");
    if ((st = trace_keys(c, root, "(top level)", keys, NULL)))
        return st;
    if ((st = trace_str(c, root, "(top level)", "format", 1, &s)))
        return st;
    if (strcmp(s, "tpuemu-trace/1") != 0)
        return trace_fail(c, "format", "'%s' is not a supported format "
                          "(expected \"tpuemu-trace/1\")",
                          trace_q(q, sizeof q, s));
    trace_default_name(g, path);
    if ((st = trace_name(c, root, "(top level)", "name", 0, g->name,
                         sizeof g->name)))
        return st;
    if ((st = trace_name(c, root, "(top level)", "system", 1, g->system,
                         sizeof g->system)))
        return st;
    return trace_str(c, root, "(top level)", "comment", 0, &s);
}

static tpu_status trace_root(trace_ctx *c, graph *g, const cJSON *root,
                             const char *path)
{
    const cJSON *v;
    tpu_status st;
    if (!cJSON_IsObject(root))
        return trace_fail(c, NULL, "expected a JSON object at the top level, "
                          "found %s", trace_type(root));
    if ((st = trace_head(c, g, root, path)))
        return st;
    v = cJSON_GetObjectItemCaseSensitive(root, "graph");
    if (!v)
        return trace_fail(c, "(top level)", "missing key 'graph'");
    if ((st = trace_graph(c, g, v)))
        return st;
    v = cJSON_GetObjectItemCaseSensitive(root, "run");
    if (!v)
        return trace_fail(c, "(top level)", "missing key 'run'");
    if ((st = trace_run(c, g, v)))
        return st;
    v = cJSON_GetObjectItemCaseSensitive(root, "reference");
    if (v && (st = trace_reference(c, g, v)))
        return st;
    if ((st = graph_finish(g, c->err)))
        return st;
    /* Whether the cores and batch fit the slice depends on --system and
     * --batch, so graph_check_run is the consumer's (sim_run, sim_lower)
     * with the effective values; the name itself must be a slice. */
    return graph_check_system(g->system, c->file, c->err);
}

static int trace_is_ws(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r';
}

static size_t trace_skip_ws(const char *text, size_t len, size_t pos)
{
    while (pos < len && trace_is_ws(text[pos]))
        pos++;
    return pos;
}

/* Why cJSON stopped at end (rfile_json_error tells a cut-off file from a
 * typo). */
static tpu_status trace_syntax_error(trace_ctx *c, const char *text,
                                     size_t len, const char *end)
{
    char why[200];
    size_t pos = (end >= text && end <= text + len) ? (size_t)(end - text)
                                                    : 0;
    rfile_json_error(text, len, pos, why, sizeof why);
    return trace_fail(c, NULL, "%s", why);
}

/* The text as one JSON value with nothing but blanks after it; NULL (with
 * *st) otherwise. */
static cJSON *trace_parse_json(trace_ctx *c, const char *text, size_t len,
                               tpu_status *st)
{
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        *st = trace_syntax_error(c, text, len, end);
        return NULL;
    }
    size_t pos = (end >= text && end <= text + len) ? (size_t)(end - text)
                                                    : len;
    pos = trace_skip_ws(text, len, pos);
    if (pos < len) {
        int line, col, depth;
        rfile_json_where(text, len, pos, &line, &col, &depth);
        cJSON_Delete(root);
        *st = trace_fail(c, NULL, "not valid JSON: unexpected text after "
                         "the top-level value at line %d, column %d",
                         line, col);
        return NULL;
    }
    *st = TPU_OK;
    return root;
}

tpu_status graph_parse(graph *g, const char *text, size_t len,
                       const char *path, tpu_error *err)
{
    trace_ctx c;
    cJSON *root;
    tpu_status st;
    char *marked = NULL;
    int oom;

    memset(g, 0, sizeof *g);
    if (!path)
        path = "(trace)";
    c.file = path;
    c.err = err;
    c.nul_marked = 0;
    if (trace_skip_ws(text, len, 0) == len)
        return trace_fail(&c, NULL, "empty file, expected a JSON object");
    marked = rfile_mark_nuls(text, len, &oom);
    if (oom)
        return tpu_fail(err, TPU_ERR_SYSTEM,
                        "%s: out of memory reading the trace", path);
    if (marked) {
        c.nul_marked = 1;
        text = marked;
    }
    root = trace_parse_json(&c, text, len, &st);
    free(marked);
    if (!root)
        return st;
    if (cJSON_IsObject(root)) {
        char jp[512] = "";
        st = trace_strings(&c, root, jp, sizeof jp);
    }
    if (!st)
        st = trace_root(&c, g, root, path);
    cJSON_Delete(root);
    if (st) {
        tpu_error keep;
        if (err)
            keep = *err;
        graph_free(g);
        if (err)
            *err = keep;
    }
    return st;
}

tpu_status graph_load(graph *g, const char *path, tpu_error *err)
{
    char *buf = NULL;
    size_t len = 0;
    tpu_status st;

    memset(g, 0, sizeof *g);
    st = rfile_read(path, (size_t)TRACE_FILE_MAX, RFILE_PIPE_IDLE_S, &buf,
                    &len, err);
    if (st)
        return st;
    st = graph_parse(g, buf, len, path, err);
    free(buf);
    return st;
}
