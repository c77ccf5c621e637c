/* The input readers' contract (docs/SPEC.md: every malformed input is refused
 * with "FILE: json.path: message", exit 2, and nothing hangs): run checks
 * against the effective --system/--batch, the name index and the layer
 * limit, FIFOs and devices, NUL and invalid UTF-8 in strings, and reports
 * with impossible values for `check` and `view`. */
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <cJSON.h>

#include "emu/graph.h"
#include "emu/report.h"
#include "emu/rfile.h"
#include "emu/sim.h"
#include "test/harness.h"

static double rd_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static char *rd_slurp(const char *path, size_t *len)
{
    char *text = NULL;
    tpu_error e;
    if (rfile_read(path, (size_t)64 << 20, 1.0, &text, len, &e))
        return NULL;
    return text;
}

static void rd_write(const char *path, const char *text, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return;
    fwrite(text, 1, len, f);
    fclose(f);
}

/* tiny2d.json with one run-section line replaced. */
static const char tiny_head[] =
    "{\"format\": \"tpuemu-trace/1\", \"name\": \"tiny\", \"system\": \"v3-8\",\n"
    " \"run\": {\"mode\": \"train\", %s},\n"
    " \"graph\": {\"inputs\": [{\"name\": \"image\", \"shape\": [16, 16, 3]}],\n"
    "  \"layers\": [\n"
    "   {\"name\": \"c1\", \"op\": \"conv\", \"in\": \"image\", \"filters\": 8, "
    "\"kernel\": [3, 3]},\n"
    "   {\"name\": \"r1\", \"op\": \"relu\", \"in\": \"c1\"},\n"
    "   {\"name\": \"gap\", \"op\": \"global_avgpool\", \"in\": \"r1\"},\n"
    "   {\"name\": \"out\", \"op\": \"dense\", \"in\": \"gap\", \"units\": 4},\n"
    "   {\"name\": \"loss\", \"op\": \"loss\", \"in\": \"out\", \"kind\": "
    "\"softmax_xent\"}]}}\n";

static tpu_status rd_parse_run(graph *g, const char *run, tpu_error *e)
{
    char text[2048];
    snprintf(text, sizeof text, tiny_head, run);
    return graph_parse(g, text, strlen(text), "t.json", e);
}

/* A chain of n relus after one input, as JSON text (malloc'd). */
static char *rd_chain(int n, const char *mode, size_t *len)
{
    size_t cap = (size_t)n * 64 + 512, k = 0;
    char *s = malloc(cap);
    if (!s)
        return NULL;
    k += (size_t)snprintf(s + k, cap - k,
                          "{\"format\": \"tpuemu-trace/1\", \"system\": "
                          "\"v3-8\", \"run\": {\"mode\": \"%s\", "
                          "\"global_batch\": 8}, \"graph\": {\"inputs\": "
                          "[{\"name\": \"x\", \"shape\": [4, 4, 2]}], "
                          "\"layers\": [\n",
                          mode);
    for (int i = 0; i < n; i++) {
        char prev[32];
        if (i == 0)
            snprintf(prev, sizeof prev, "x");
        else
            snprintf(prev, sizeof prev, "r%d", i - 1);
        k += (size_t)snprintf(s + k, cap - k,
                              "%s{\"name\": \"r%d\", \"op\": \"relu\", "
                              "\"in\": \"%s\"}\n",
                              i ? "," : "", i, prev);
    }
    k += (size_t)snprintf(s + k, cap - k, "]}}\n");
    *len = k;
    return s;
}

static void suite_run_checks(th_ctx *t)
{
    graph g;
    tpu_error e = {0};
    sim_opts o;
    emu_result r;
    tpu_status st;

    th_case(t, "--batch rescues a trace whose own batch does not divide "
               "into the slice's replicas (run checks after overrides)");
    st = rd_parse_run(&g, "\"global_batch\": 12", &e);
    if (TH_CHECKF(t, st == TPU_OK, "load: %s", e.msg)) {
        sim_opts_default(&o);
        o.trace_path = "t.json";
        st = sim_run(&g, &o, &r, &e);
        TH_CHECKF(t, st == TPU_ERR_INPUT &&
                         strcmp(e.msg, "t.json: run.global_batch: 12 does "
                                       "not divide into 8 replicas") == 0,
                  "%d %s", st, e.msg);
        emu_result_free(&r);
        o.global_batch = 16;
        st = sim_run(&g, &o, &r, &e);
        TH_CHECKF(t, st == TPU_OK && r.global_batch == 16 &&
                         r.step_time_s > 0,
                  "%d %s", st, e.msg);
        emu_result_free(&r);
        /* an override that is itself wrong names the trace key too */
        o.global_batch = 20;
        st = sim_run(&g, &o, &r, &e);
        TH_CHECKF(t, st == TPU_ERR_INPUT &&
                         strstr(e.msg, "t.json: run.global_batch: 20 does "
                                       "not divide into 8 replicas"),
                  "%d %s", st, e.msg);
        emu_result_free(&r);
        {
            fw_program prog;
            fw_memory mem;
            fw_program_init(&prog);
            o.global_batch = 0;
            st = sim_lower(&g, &o, 0, &prog, &mem, &e);
            TH_CHECKF(t, st == TPU_ERR_INPUT &&
                             strstr(e.msg, "run.global_batch: 12"),
                      "lower: %d %s", st, e.msg);
            fw_program_free(&prog);
            fw_program_init(&prog);
            o.global_batch = 8;
            st = sim_lower(&g, &o, 0, &prog, &mem, &e);
            TH_CHECKF(t, st == TPU_OK && prog.n > 0, "lower: %d %s", st,
                      e.msg);
            fw_program_free(&prog);
        }
        graph_free(&g);
    }

    th_case(t, "--system rescues num_cores_per_replica 16 on a v3-8 trace");
    st = rd_parse_run(&g, "\"global_batch\": 32, \"num_cores_per_replica\": "
                          "16",
                      &e);
    if (TH_CHECKF(t, st == TPU_OK, "load: %s", e.msg)) {
        sim_opts_default(&o);
        o.trace_path = "t.json";
        st = sim_run(&g, &o, &r, &e);
        TH_CHECKF(t, st == TPU_ERR_INPUT &&
                         strstr(e.msg, "t.json: run.num_cores_per_replica: "
                                       "16 does not divide the 8 cores of "
                                       "v3-8"),
                  "%d %s", st, e.msg);
        emu_result_free(&r);
        o.system = "v3-32";
        st = sim_run(&g, &o, &r, &e);
        TH_CHECKF(t, st == TPU_OK && r.cores == 32 && r.replicas == 2,
                  "%d %s", st, e.msg);
        emu_result_free(&r);
        TH_CHECK(t, graph_check_run(&g, "v3-8", 32, "t.json", &e) ==
                        TPU_ERR_INPUT);
        TH_CHECK(t, graph_check_run(&g, "v3-32", 32, "t.json", &e) ==
                        TPU_OK);
        graph_free(&g);
    }

    th_case(t, "an unknown system in the trace is still refused at load");
    {
        char text[2048];
        snprintf(text, sizeof text, tiny_head, "\"global_batch\": 8");
        char *v = strstr(text, "v3-8");
        memcpy(v, "v9-8", 4);
        st = graph_parse(&g, text, strlen(text), "t.json", &e);
        TH_CHECKF(t, st == TPU_ERR_INPUT &&
                         strstr(e.msg, "t.json: system: unknown slice "
                                       "'v9-8'"),
                  "%d %s", st, e.msg);
        graph_free(&g);
    }

    th_case(t, "CLI: run --batch / --system overrides, exit 0; without, "
               "exit 2 with the trace key");
    {
        char path[512], text[2048];
        th_cmd_result c;
        snprintf(path, sizeof path, "%s/gb12.json", th_tmpdir());
        snprintf(text, sizeof text, tiny_head, "\"global_batch\": 12");
        rd_write(path, text, strlen(text));
        th_run(&c, "%s run %s --quiet", th_bin(), path);
        TH_CHECKF(t, c.status == 2 &&
                         strstr(c.err, "run.global_batch: 12 does not "
                                       "divide into 8 replicas"),
                  "%d %s", c.status, c.err);
        th_run(&c, "%s run %s --batch 16 --quiet", th_bin(), path);
        TH_CHECKF(t, c.status == 0, "%d %s", c.status, c.err);
        th_run(&c, "%s lower %s --batch 16 | head -1", th_bin(), path);
        TH_CHECKF(t, c.status == 0 && strstr(c.out, "tpuemu firmware"),
                  "%d %s", c.status, c.err);
        snprintf(path, sizeof path, "%s/cpr16.json", th_tmpdir());
        snprintf(text, sizeof text, tiny_head,
                 "\"global_batch\": 32, \"num_cores_per_replica\": 16");
        rd_write(path, text, strlen(text));
        th_run(&c, "%s run %s --system v3-32 --quiet", th_bin(), path);
        TH_CHECKF(t, c.status == 0, "%d %s", c.status, c.err);
        th_run(&c, "%s run %s --quiet", th_bin(), path);
        TH_CHECKF(t, c.status == 2 &&
                         strstr(c.err, "run.num_cores_per_replica: 16"),
                  "%d %s", c.status, c.err);
    }
}

static void suite_index(th_ctx *t)
{
    graph g;
    tpu_error e = {0};
    tpu_status st;
    size_t len = 0;
    char *text;
    int n = th_asan() ? 2000 : 5000;

    th_case(t, "the name index finds every layer, and nothing else");
    text = rd_chain(n, "infer", &len);
    if (!TH_CHECK(t, text != NULL))
        return;
    st = graph_parse(&g, text, len, "chain.json", &e);
    free(text);
    if (TH_CHECKF(t, st == TPU_OK, "%s", e.msg)) {
        int bad = 0;
        char nm[32];
        TH_CHECK(t, g.n_layers == n + 1 && graph_find(&g, "x") == 0);
        for (int i = 0; i < n; i++) {
            snprintf(nm, sizeof nm, "r%d", i);
            bad += graph_find(&g, nm) != i + 1;
        }
        TH_CHECKF(t, bad == 0, "%d names not found at their index", bad);
        TH_CHECK(t, graph_find(&g, "r") == -1 &&
                        graph_find(&g, "nope") == -1 &&
                        graph_find(&g, "") == -1);
        snprintf(nm, sizeof nm, "r%d", n);
        TH_CHECK(t, graph_find(&g, nm) == -1);
        /* a layer added by hand after reading (not in the index) is still
         * found, by the fallback scan */
        {
            glayer *nl = realloc(g.layers, sizeof *nl * (size_t)(g.n_layers + 1));
            if (TH_CHECK(t, nl != NULL)) {
                g.layers = nl;
                memset(&nl[g.n_layers], 0, sizeof nl[0]);
                snprintf(nl[g.n_layers].name, GRAPH_NAME_MAX, "late");
                g.n_layers++;
                TH_CHECK(t, graph_find(&g, "late") == g.n_layers - 1);
            }
        }
    }
    graph_free(&g);

    th_case(t, "duplicate names are still refused, naming the first");
    {
        const char *dup =
            "{\"format\": \"tpuemu-trace/1\", \"system\": \"v3-8\", "
            "\"run\": {\"mode\": \"infer\", \"global_batch\": 8}, "
            "\"graph\": {\"inputs\": [{\"name\": \"x\", \"shape\": [4]}], "
            "\"layers\": [{\"name\": \"a\", \"op\": \"relu\", \"in\": \"x\"},"
            "{\"name\": \"b\", \"op\": \"relu\", \"in\": \"a\"},"
            "{\"name\": \"a\", \"op\": \"relu\", \"in\": \"b\"}]}}";
        st = graph_parse(&g, dup, strlen(dup), "d.json", &e);
        TH_CHECKF(t, st == TPU_ERR_INPUT &&
                         strstr(e.msg, "d.json: graph.layers[2].name: 'a' is "
                                       "already defined (graph.layers[0])"),
                  "%s", e.msg);
        graph_free(&g);
    }

    th_case(t, "a long chain loads in linear time (60,000 relus took 8 s "
               "with a linear name search)");
    {
        int m = th_asan() ? 20000 : 60000;
        double t0;
        text = rd_chain(m, "infer", &len);
        if (!TH_CHECK(t, text != NULL))
            return;
        t0 = rd_now();
        st = graph_parse(&g, text, len, "long.json", &e);
        t0 = rd_now() - t0;
        free(text);
        TH_CHECKF(t, st == TPU_OK, "%s", e.msg);
        TH_CHECKF(t, t0 < 2.0, "%d layers loaded in %.2f s", m, t0);
        graph_free(&g);
    }

    th_case(t, "a long inference chain runs end to end in linear time");
    {
        int m = th_asan() ? 5000 : 30000;
        double t0;
        emu_result r;
        sim_opts o;
        text = rd_chain(m, "infer", &len);
        if (!TH_CHECK(t, text != NULL))
            return;
        st = graph_parse(&g, text, len, "long.json", &e);
        free(text);
        if (TH_CHECKF(t, st == TPU_OK, "%s", e.msg)) {
            sim_opts_default(&o);
            t0 = rd_now();
            st = sim_run(&g, &o, &r, &e);
            t0 = rd_now() - t0;
            TH_CHECKF(t, st == TPU_OK && r.step_time_s > 0, "%s", e.msg);
            TH_CHECKF(t, t0 < 3.0, "%d layers simulated in %.2f s", m, t0);
            emu_result_free(&r);
        }
        graph_free(&g);
    }

    th_case(t, "more than GRAPH_LAYERS_MAX layers: refused, naming "
               "graph.layers");
    {
        char want[160];
        text = rd_chain(GRAPH_LAYERS_MAX + 1, "infer", &len);
        if (!TH_CHECK(t, text != NULL))
            return;
        st = graph_parse(&g, text, len, "huge.json", &e);
        snprintf(want, sizeof want,
                 "huge.json: graph.layers: %d layers, more than the limit "
                 "of %d",
                 GRAPH_LAYERS_MAX + 1, GRAPH_LAYERS_MAX);
        TH_CHECKF(t, st == TPU_ERR_INPUT && strcmp(e.msg, want) == 0, "%s",
                  e.msg);
        graph_free(&g);
        free(text);
        if (!th_asan()) {
            text = rd_chain(GRAPH_LAYERS_MAX, "infer", &len);
            if (!TH_CHECK(t, text != NULL))
                return;
            st = graph_parse(&g, text, len, "max.json", &e);
            TH_CHECKF(t, st == TPU_OK && g.n_layers == GRAPH_LAYERS_MAX + 1,
                      "%s", e.msg);
            graph_free(&g);
            free(text);
        }
    }
}

static void suite_files(th_ctx *t)
{
    char *text = NULL, path[512];
    size_t len = 0;
    tpu_error e = {0};
    tpu_status st;
    graph g;
    th_cmd_result c;

    th_case(t, "a directory and a device are refused, not read");
    st = rfile_read("test", 1 << 20, 0.2, &text, &len, &e);
    TH_CHECKF(t, st == TPU_ERR_INPUT && !text &&
                     strstr(e.msg, "test: a directory, not a file"),
              "%s", e.msg);
    st = rfile_read("/dev/zero", 1 << 20, 0.2, &text, &len, &e);
    TH_CHECKF(t, st == TPU_ERR_INPUT && !text &&
                     strstr(e.msg, "/dev/zero: a character device"),
              "%s", e.msg);
    st = graph_load(&g, "/dev/null", &e);
    TH_CHECKF(t, st == TPU_ERR_INPUT &&
                     strstr(e.msg, "/dev/null: a character device"),
              "%s", e.msg);
    graph_free(&g);

    th_case(t, "a FIFO nobody writes to gives up after the idle timeout");
    snprintf(path, sizeof path, "%s/fifo", th_tmpdir());
    unlink(path);
    if (TH_CHECK(t, mkfifo(path, 0600) == 0)) {
        double t0 = rd_now();
        st = rfile_read(path, 1 << 20, 0.2, &text, &len, &e);
        t0 = rd_now() - t0;
        TH_CHECKF(t, st == TPU_ERR_INPUT && !text &&
                         strstr(e.msg, "sent nothing for 0.2 s"),
                  "%s", e.msg);
        TH_CHECKF(t, t0 >= 0.15 && t0 < 2, "waited %.2f s", t0);

        th_case(t, "a FIFO whose writer comes late is read");
        th_run(&c, "(sleep 0.2; cat traces/small/tiny2d.json > %s) "
                   ">/dev/null 2>&1 &",
               path);
        st = rfile_read(path, 1 << 20, 5.0, &text, &len, &e);
        TH_CHECKF(t, st == TPU_OK && len > 100 && text &&
                         strstr(text, "tiny2d"),
                  "%s", e.msg);
        free(text);
        text = NULL;
        unlink(path);
    }

    th_case(t, "a pipe as /dev/fd/N (what <(cmd) passes) is read");
    {
        int fds[2];
        size_t tl = 0;
        char *want = rd_slurp("traces/small/tiny2d.json", &tl);
        if (TH_CHECK(t, want && pipe(fds) == 0)) {
            char fdp[64];
            /* fits the pipe buffer, so the write does not block */
            TH_CHECK(t, write(fds[1], want, tl) == (ssize_t)tl);
            close(fds[1]);
            snprintf(fdp, sizeof fdp, "/dev/fd/%d", fds[0]);
            st = graph_load(&g, fdp, &e);
            TH_CHECKF(t, st == TPU_OK && strcmp(g.name, "tiny2d") == 0,
                      "%s", e.msg);
            graph_free(&g);
            close(fds[0]);
        }
        free(want);
        th_run(&c, "bash -c '%s run <(cat traces/small/tiny2d.json) "
                   "--quiet'",
               th_bin());
        TH_CHECKF(t, c.status == 0, "%d %s", c.status, c.err);
    }

    th_case(t, "a file larger than the cap is refused");
    st = rfile_read("traces/small/tiny2d.json", 100, 0.2, &text, &len, &e);
    TH_CHECKF(t, st == TPU_ERR_INPUT && !text && strstr(e.msg, "larger than"),
              "%s", e.msg);
    st = rfile_read("traces/small/tiny2d.json", 1 << 20, 0.2, &text, &len,
                    &e);
    TH_CHECKF(t, st == TPU_OK && text && len > 100 && text[len] == 0, "%s",
              e.msg);
    free(text);
}

static void suite_strings(th_ctx *t)
{
    graph g;
    tpu_error e = {0};
    tpu_status st;
    static const struct {
        const char *from, *to, *want;
    } cases[] = {
        /* trace name with \u0000: cJSON alone would read "tiny" */
        {"\"name\": \"tiny\"", "\"name\": \"tiny\\u0000x\"",
         "t.json: name: the string contains a NUL character (\\u0000)"},
        {"\"name\": \"r1\"", "\"name\": \"r\\u00001\"",
         "t.json: graph.layers[1].name: the string contains a NUL "
         "character"},
        {"\"mode\": \"train\"", "\"mode\": \"train\", \"comment\": "
                                "\"a\\u0000\"",
         "t.json: run.comment: the string contains a NUL character"},
        {"\"name\": \"r1\"", "\"name\": \"r\xc3\"",
         "t.json: graph.layers[1].name: the string is not valid UTF-8 "
         "(byte 0xc3 at offset 1)"},
        {"\"name\": \"r1\"", "\"name\": \"r\xf8\x88\x80\x80\x80\"",
         "graph.layers[1].name: the string is not valid UTF-8"},
        {"\"name\": \"r1\"", "\"name\": \"r\\u001b[2J\"",
         "graph.layers[1].name: contains a control character"},
        {"\"kind\"", "\"k\xffind\"",
         "t.json: graph.layers[4].k?ind: the key is not valid UTF-8"},
    };
    char base[2048], text[2300];
    snprintf(base, sizeof base, tiny_head, "\"global_batch\": 8");

    th_case(t, "NUL, invalid UTF-8 and control characters in strings are "
               "refused with the JSON path");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *at = strstr(base, cases[i].from);
        size_t pre, fl = strlen(cases[i].from);
        if (!TH_CHECKF(t, at != NULL, "case %zu: no '%s'", i, cases[i].from))
            continue;
        pre = (size_t)(at - base);
        snprintf(text, sizeof text, "%.*s%s%s", (int)pre, base, cases[i].to,
                 at + fl);
        st = graph_parse(&g, text, strlen(text), "t.json", &e);
        TH_CHECKF(t, st == TPU_ERR_INPUT && strstr(e.msg, cases[i].want) &&
                         !strchr(e.msg, '\n'),
                  "case %zu: %d\n       got  '%s'\n       want '%s'", i, st,
                  e.msg, cases[i].want);
        graph_free(&g);
    }

    th_case(t, "UTF-8 names and an escaped backslash before u0000 are "
               "fine, and reach the report intact");
    {
        const char *at = strstr(base, "\"name\": \"r1\"");
        char *rep;
        emu_result r;
        sim_opts o;
        snprintf(text, sizeof text,
                 "%.*s\"name\": \"caf\xc3\xa9-\xe5\xb1\xa4\\\\u0000\"%s",
                 (int)(at - base), base, at + strlen("\"name\": \"r1\""));
        /* the relu's consumer names it */
        {
            char *use = strstr(text, "\"in\": \"r1\"");
            if (TH_CHECK(t, use != NULL)) {
                char tmp[2300];
                snprintf(tmp, sizeof tmp,
                         "%.*s\"in\": \"caf\xc3\xa9-\xe5\xb1\xa4\\\\u0000\"%s",
                         (int)(use - text), text,
                         use + strlen("\"in\": \"r1\""));
                memcpy(text, tmp, strlen(tmp) + 1);
            }
        }
        st = graph_parse(&g, text, strlen(text), "t.json", &e);
        if (TH_CHECKF(t, st == TPU_OK, "%s", e.msg)) {
            TH_CHECK(t, strcmp(g.layers[2].name,
                               "caf\xc3\xa9-\xe5\xb1\xa4\\u0000") == 0);
            sim_opts_default(&o);
            st = sim_run(&g, &o, &r, &e);
            if (TH_CHECKF(t, st == TPU_OK, "%s", e.msg)) {
                rep = report_to_json(&r);
                if (TH_CHECK(t, rep != NULL)) {
                    emu_result back;
                    cJSON *j = cJSON_Parse(rep);
                    TH_CHECK(t, j != NULL);
                    cJSON_Delete(j);
                    st = report_parse(&back, rep, strlen(rep), "r.json", &e);
                    TH_CHECKF(t, st == TPU_OK, "%s", e.msg);
                    emu_result_free(&back);
                }
                free(rep);
            }
            emu_result_free(&r);
        }
        graph_free(&g);
    }
}

/* A real report (tiny2d on v3-8), as cJSON, to mutate. */
static cJSON *rd_report(void)
{
    graph g;
    tpu_error e;
    emu_result r;
    sim_opts o;
    char *txt;
    cJSON *j = NULL;
    if (graph_load(&g, "traces/small/tiny2d.json", &e))
        return NULL;
    sim_opts_default(&o);
    if (sim_run(&g, &o, &r, &e) == TPU_OK) {
        txt = report_to_json(&r);
        if (txt)
            j = cJSON_Parse(txt);
        free(txt);
    }
    emu_result_free(&r);
    graph_free(&g);
    return j;
}

static cJSON *rd_core(cJSON *j, int i)
{
    return cJSON_GetArrayItem(cJSON_GetObjectItem(j, "per_core"), i);
}

static void rd_setnum(cJSON *o, const char *key, double v)
{
    cJSON_ReplaceItemInObject(o, key, cJSON_CreateNumber(v));
}

static void suite_reports(th_ctx *t)
{
    enum { N_CASES = 17 };
    static const char *const want[N_CASES] = {
        "r.json: step_time_s: expected a finite number >= 0, found -1",
        "r.json: step_time_s: 0, but the step ran",
        "r.json: per_core[3].step_time_s: expected a finite number >= 0, "
        "found -5",
        "r.json: per_core[3].core: core 0 appears twice",
        "r.json: per_core[3].core: expected an integer from 0 to 7, found 8",
        "r.json: step_time_s: expected a finite number >= 0, found null",
        "r.json: system: unknown slice 'v9-8'",
        "r.json: trace: the string contains a control character",
        "r.json: per_core[2].breakdown_s.mxu: expected a finite number >= 0",
        "r.json: step_time_s: 1 is not the slowest core's step time",
        "r.json: replicas: 3 replicas of 1 cores are not the report's 8 "
        "cores",
        "r.json: per_core[1].chip: expected an integer from 0 to 3, found 4",
        "r.json: trace: the string contains a NUL character",
        "r.json: per_core[0].mxu_utilization: expected a finite number >= 0",
        "r.json: layers[1].name: the string is not valid UTF-8",
        "r.json: gen: expected 3, the generation of v3-8, found 2",
        "r.json: per_core[5].step_time_s: 0, but the step ran",
    };
    cJSON *base = rd_report();
    tpu_error e = {0};
    tpu_status st;
    emu_result r;

    th_case(t, "a report written by run reads back, in core order");
    if (!TH_CHECK(t, base != NULL))
        return;
    {
        char *txt = cJSON_PrintUnformatted(base);
        st = report_parse(&r, txt, strlen(txt), "r.json", &e);
        TH_CHECKF(t, st == TPU_OK && r.cores == 8, "%s", e.msg);
        emu_result_free(&r);
        free(txt);
        /* reversed per_core: same result, cores in order */
        cJSON *j = cJSON_Duplicate(base, 1);
        cJSON *pc = cJSON_GetObjectItem(j, "per_core");
        cJSON *rev = cJSON_CreateArray();
        for (int i = cJSON_GetArraySize(pc) - 1; i >= 0; i--)
            cJSON_AddItemToArray(rev, cJSON_Duplicate(cJSON_GetArrayItem(pc, i), 1));
        cJSON_ReplaceItemInObject(j, "per_core", rev);
        txt = cJSON_PrintUnformatted(j);
        st = report_parse(&r, txt, strlen(txt), "r.json", &e);
        TH_CHECKF(t, st == TPU_OK, "%s", e.msg);
        for (int i = 0; st == TPU_OK && i < r.cores; i++)
            TH_CHECK(t, r.per_core[i].core == i);
        emu_result_free(&r);
        free(txt);
        cJSON_Delete(j);
    }

    th_case(t, "a does-not-fit report (fits false, zero times) reads");
    {
        cJSON *j = cJSON_Duplicate(base, 1);
        cJSON_ReplaceItemInObject(j, "fits", cJSON_CreateFalse());
        rd_setnum(j, "step_time_s", 0);
        for (int i = 0; i < 8; i++) {
            cJSON *k = rd_core(j, i);
            cJSON *bd = cJSON_GetObjectItem(k, "breakdown_s");
            rd_setnum(k, "step_time_s", 0);
            for (cJSON *x = bd->child; x; x = x->next)
                cJSON_SetNumberValue(x, 0);
        }
        char *txt = cJSON_PrintUnformatted(j);
        st = report_parse(&r, txt, strlen(txt), "r.json", &e);
        TH_CHECKF(t, st == TPU_OK && !r.fits && r.step_time_s == 0, "%s",
                  e.msg);
        emu_result_free(&r);
        free(txt);
        cJSON_Delete(j);
    }

    th_case(t, "impossible values are refused as FILE: json.path: message");
    for (int c = 0; c < N_CASES; c++) {
        cJSON *j = cJSON_Duplicate(base, 1);
        char *txt;
        switch (c) {
        case 0: rd_setnum(j, "step_time_s", -1); break;
        case 1: rd_setnum(j, "step_time_s", 0); break;
        case 2: rd_setnum(rd_core(j, 3), "step_time_s", -5); break;
        case 3: rd_setnum(rd_core(j, 3), "core", 0); break;
        case 4: rd_setnum(rd_core(j, 3), "core", 8); break;
        case 5:
            cJSON_ReplaceItemInObject(j, "step_time_s", cJSON_CreateNull());
            break;
        case 6:
            cJSON_ReplaceItemInObject(j, "system", cJSON_CreateString("v9-8"));
            break;
        case 7:
            cJSON_ReplaceItemInObject(j, "trace",
                                      cJSON_CreateString("a\x1b[2Jb"));
            break;
        case 8:
            rd_setnum(cJSON_GetObjectItem(rd_core(j, 2), "breakdown_s"),
                      "mxu", -0.5);
            break;
        case 9: rd_setnum(j, "step_time_s", 1); break;
        case 10: rd_setnum(j, "replicas", 3); break;
        case 11: rd_setnum(rd_core(j, 1), "chip", 4); break;
        case 12: break; /* below: \u0000 in the text */
        case 13: break; /* below: 1e400 in the text */
        case 14:
            cJSON_ReplaceItemInObject(
                cJSON_GetArrayItem(cJSON_GetObjectItem(j, "layers"), 1),
                "name", cJSON_CreateString("x\xc3"));
            break;
        case 15: rd_setnum(j, "gen", 2); break;
        case 16: rd_setnum(rd_core(j, 5), "step_time_s", 0); break;
        }
        txt = cJSON_PrintUnformatted(j);
        if (c == 12 || c == 13) {
            /* edit the text: cJSON cannot write these */
            const char *key = c == 12 ? "\"trace\":\"" : "\"mxu_utilization\":";
            char *at = strstr(txt, key);
            char *nt = malloc(strlen(txt) + 32);
            if (at && nt) {
                size_t pre = (size_t)(at - txt) + strlen(key);
                sprintf(nt, "%.*s%s%s", (int)pre, txt,
                        c == 12 ? "t\\u0000" : "1e400,\"x\":", at + strlen(key));
                free(txt);
                txt = nt;
            } else {
                free(nt);
            }
        }
        st = report_parse(&r, txt, strlen(txt), "r.json", &e);
        TH_CHECKF(t, st == TPU_ERR_INPUT && strstr(e.msg, want[c]) &&
                         !strchr(e.msg, '\n'),
                  "case %d: %d\n       got  '%s'\n       want '%s'", c, st,
                  e.msg, want[c]);
        TH_CHECK(t, r.per_core == NULL);
        emu_result_free(&r);
        free(txt);
        cJSON_Delete(j);
    }

    th_case(t, "check and view refuse them the same way (exit 2, no raw "
               "control characters on the terminal)");
    {
        char bp[512], np[512];
        th_cmd_result c;
        cJSON *j = cJSON_Duplicate(base, 1);
        char *txt = cJSON_PrintUnformatted(base);
        snprintf(bp, sizeof bp, "%s/base.json", th_tmpdir());
        rd_write(bp, txt, strlen(txt));
        free(txt);
        rd_setnum(rd_core(j, 3), "step_time_s", -5);
        txt = cJSON_PrintUnformatted(j);
        snprintf(np, sizeof np, "%s/neg.json", th_tmpdir());
        rd_write(np, txt, strlen(txt));
        free(txt);
        th_run(&c, "%s check --baseline %s %s", th_bin(), bp, np);
        TH_CHECKF(t, c.status == 2 &&
                         strstr(c.err, "tpuemu: error: ") &&
                         strstr(c.err, "neg.json: per_core[3].step_time_s: "
                                       "expected a finite number >= 0, "
                                       "found -5"),
                  "%d %s", c.status, c.err);
        th_run(&c, "SDL_VIDEODRIVER=dummy %s view %s --screenshot %s/v.png",
               th_bin(), np, th_tmpdir());
        TH_CHECKF(t, c.status == 2 &&
                         strstr(c.err, "neg.json: per_core[3].step_time_s"),
                  "%d %s", c.status, c.err);
        cJSON_ReplaceItemInObject(j, "trace", cJSON_CreateString("a\x1b[2Jb"));
        rd_setnum(rd_core(j, 3), "step_time_s",
                  cJSON_GetObjectItem(rd_core(base, 3), "step_time_s")
                      ->valuedouble);
        txt = cJSON_PrintUnformatted(j);
        rd_write(np, txt, strlen(txt));
        free(txt);
        th_run(&c, "%s check --baseline %s %s", th_bin(), bp, np);
        TH_CHECKF(t, c.status == 2 && !strchr(c.err, '\x1b') &&
                         !strchr(c.out, '\x1b') &&
                         strstr(c.err, "neg.json: trace: the string "
                                       "contains a control character"),
                  "%d %s", c.status, c.err);
        th_run(&c, "%s check --baseline %s %s", th_bin(), bp, bp);
        TH_CHECKF(t, c.status == 0, "%d %s", c.status, c.err);
        cJSON_Delete(j);
    }
    cJSON_Delete(base);
}

void th_suite_readers(th_ctx *t)
{
    suite_run_checks(t);
    suite_index(t);
    suite_files(t);
    suite_strings(t);
    suite_reports(t);
}
