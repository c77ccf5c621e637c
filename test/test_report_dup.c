/* Duplicate keys in a report.  cJSON keeps both members of {"mxu": 1,
 * "mxu": 5} and returns the first; Python's json and jq take the last, so
 * a second "trace" would pass `check` against a report of another trace
 * and a second "mxu" in a breakdown would dodge the sum check.  The
 * reader refuses a repeated key at any depth, naming the file and JSON
 * path, through the same helper (rfile_json_find_dup) the sweep reader
 * and the trace reader use. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cJSON.h>

#include "emu/report.h"
#include "emu/rfile.h"
#include "test/harness.h"

/* Eight cores and one override: every kind of object a report has. */
static void make_result(emu_result *r)
{
    static const double cat[CAT_COUNT] = {[CAT_MXU] = 0.5, [CAT_VECTOR] = 0.25};
    static const char *const kv[1][2] = {{"hbm.bandwidth_gbs", "900"}};
    th_result_make(r, "tiny", "v3-8", 8, 1, 8, cat, NULL);
    th_result_overrides(r, 1, kv);
}

/* text with ins inserted right after the first occurrence of at (malloc'd). */
static char *insert_after(const char *text, const char *at, const char *ins)
{
    const char *p = strstr(text, at);
    if (!p)
        return NULL;
    size_t k = (size_t)(p - text) + strlen(at);
    size_t n = strlen(text) + strlen(ins) + 1;
    char *s = malloc(n);
    if (!s)
        return NULL;
    memcpy(s, text, k);
    strcpy(s + k, ins);
    strcat(s, text + k);
    return s;
}

static void write_text(th_ctx *t, const char *path, const char *s)
{
    FILE *f = fopen(path, "wb");
    TH_CHECKF(t, f != NULL, "cannot write %s", path);
    if (!f)
        return;
    fputs(s, f);
    fclose(f);
}

void th_suite_report_dup(th_ctx *t)
{
    emu_result r;
    make_result(&r);
    char *text = report_to_json(&r);
    emu_result_free(&r);
    if (!TH_CHECK(t, text != NULL))
        return;
    th_cmd_result *c = malloc(sizeof *c);
    if (!c) {
        free(text);
        return;
    }
    char base[512];
    snprintf(base, sizeof base, "%s/dup-base.json", th_tmpdir());
    write_text(t, base, text);

    /* {where to insert, what, the path the error must name} */
    static const char *const cases[][3] = {
        /* the second trace is the one jq sees */
        {"\"trace\": \"tiny\",", " \"trace\": \"other\",", "trace"},
        /* the sum check would see only the first */
        {"\"breakdown_s\": {\"mxu\": 0.5,", " \"mxu\": 5.0,",
         "per_core[0].breakdown_s.mxu"},
        {"\"format\": \"tpuemu-report/1\",",
         " \"format\": \"tpuemu-report/1\",", "format"},
        {"\"hbm.bandwidth_gbs\": \"900\"", ", \"hbm.bandwidth_gbs\": \"225\"",
         "overrides.hbm.bandwidth_gbs"},
        {"\"core\": 0,", " \"core\": 3,", "per_core[0].core"},
        /* an unknown key (accepted) given twice is still refused */
        {"\"fits\": true,", " \"x\": {\"y\": [1, {\"z\": 1, \"z\": 2}]},",
         "x.y[1].z"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        th_case(t, cases[i][2]);
        char *bad = insert_after(text, cases[i][0], cases[i][1]);
        if (!TH_CHECKF(t, bad != NULL, "no '%s' in the report", cases[i][0]))
            continue;
        tpu_error err = {0};
        emu_result got;
        char want[1024];
        snprintf(want, sizeof want, "R.json: %s: duplicate key", cases[i][2]);
        tpu_status st = report_parse(&got, bad, strlen(bad), "R.json", &err);
        TH_CHECKF(t, st == TPU_ERR_INPUT && strcmp(err.msg, want) == 0,
                  "status %d, '%s', want '%s'", (int)st, err.msg, want);
        if (st == TPU_OK)
            emu_result_free(&got);
        /* and through the binary, as `check` (exit 2) */
        char path[512];
        snprintf(path, sizeof path, "%s/dup-%zu.json", th_tmpdir(), i);
        write_text(t, path, bad);
        th_run(c, "%s check --baseline %s %s", th_bin(), base, path);
        snprintf(want, sizeof want, "%s: %s: duplicate key", path,
                 cases[i][2]);
        TH_CHECKF(t, c->status == 2 && strstr(c->err, want),
                  "check: status %d: %s%s", c->status, c->out, c->err);
        free(bad);
    }

    th_case(t, "a report with a second trace or a second breakdown "
               "category, as a file: check refuses it (exit 2)");
    {
        /* each file checked against itself: only the reader can refuse */
        static const char *const dup[][3] = {
            {"\"trace\": \"tiny\",", " \"trace\": \"other\",",
             ": trace: duplicate key"},
            {"\"breakdown_s\": {\"mxu\": 0.5,", " \"mxu\": 5.0,",
             ": per_core[0].breakdown_s.mxu: duplicate key"}};
        const char *tmp = getenv("TMPDIR");
        char dir[512], path[600];
        snprintf(dir, sizeof dir, "%s/tpuemu-dup-XXXXXX",
                 tmp && *tmp ? tmp : "/tmp");
        if (TH_CHECKF(t, mkdtemp(dir) != NULL, "mkdtemp %s", dir)) {
            for (int i = 0; i < 2; i++) {
                char *bad = insert_after(text, dup[i][0], dup[i][1]);
                if (!TH_CHECKF(t, bad != NULL, "no '%s'", dup[i][0]))
                    continue;
                snprintf(path, sizeof path, "%s/dup%d.json", dir, i);
                write_text(t, path, bad);
                free(bad);
                th_run(c, "%s check --baseline %s %s", th_bin(), path, path);
                TH_CHECKF(t, c->status == 2 && strstr(c->err, dup[i][2]),
                          "%s: status %d: %s%s", path, c->status, c->out,
                          c->err);
                remove(path);
            }
            rmdir(dir);
        }
    }

    th_case(t, "a report without duplicates still reads");
    {
        tpu_error err = {0};
        emu_result got;
        TH_CHECKF(t, report_parse(&got, text, strlen(text), "R.json",
                                  &err) == TPU_OK,
                  "%s", err.msg);
        emu_result_free(&got);
    }

    th_case(t, "a large object: the first repeat by position, found by "
               "sorting");
    {
        /* 5000 distinct keys, then k2500 again, then k10 again: the
         * first member that repeats an earlier key is the k2500 one. */
        size_t cap = 5000 * 16 + 256, n = 0;
        char *s = malloc(cap);
        if (TH_CHECK(t, s != NULL)) {
            n += (size_t)snprintf(s + n, cap - n, "{\"a\": {");
            for (int i = 0; i < 5000; i++)
                n += (size_t)snprintf(s + n, cap - n, "\"k%d\": %d, ", i, i);
            snprintf(s + n, cap - n, "\"k2500\": 1, \"k10\": 2}}");
            cJSON *doc = cJSON_Parse(s);
            TH_CHECK(t, doc != NULL);
            const cJSON *a = cJSON_GetObjectItemCaseSensitive(doc, "a");
            TH_CHECKF(t, rfile_json_dup(a) == 5000, "got %d",
                      rfile_json_dup(a));
            char jp[256] = "";
            int oom = 0;
            TH_CHECK(t, rfile_json_find_dup(doc, jp, sizeof jp, NULL, &oom) ==
                            1 &&
                        !oom && strcmp(jp, "a.k2500") == 0);
            cJSON_Delete(doc);
            free(s);
        }
    }

    th_case(t, "small objects, lists, keys shown safely");
    {
        static const struct {
            const char *json;
            const char *path; /* NULL: no duplicate */
        } k[] = {
            {"{\"a\": 1, \"b\": 2, \"a\": 3}", "a"},
            {"{\"a\": 1, \"b\": {\"c\": 1}, \"b\": 2}", "b"},
            /* an object's own keys before its members' */
            {"{\"b\": {\"c\": 1, \"c\": 2}, \"a\": 1, \"a\": 2}", "a"},
            {"[1, [2, {\"q\": 1}], {\"q\": 1, \"r\": 2, \"q\": 3}]", "[2].q"},
            {"{\"a\": [{\"x\": 1}, {\"x\": 1}], \"b\": {\"x\": 1}}", NULL},
            {"{\"\\u001b[31m\": 1, \"\\u001b[31m\": 2}", "\\x1b[31m"},
            {"{\"\": 1, \"\": 2}", ""},
            {"[]", NULL},
            {"7", NULL},
        };
        for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
            cJSON *doc = cJSON_Parse(k[i].json);
            if (!TH_CHECKF(t, doc != NULL, "%s", k[i].json))
                continue;
            char jp[128] = "";
            int oom = 0;
            int found = rfile_json_find_dup(doc, jp, sizeof jp, NULL, &oom);
            if (k[i].path)
                TH_CHECKF(t, found == 1 && !oom && strcmp(jp, k[i].path) == 0,
                          "%s: found %d at '%s', want '%s'", k[i].json, found,
                          jp, k[i].path);
            else
                TH_CHECKF(t, found == 0 && jp[0] == 0, "%s: found '%s'",
                          k[i].json, jp);
            cJSON_Delete(doc);
        }
    }

    th_case(t, "the trace reader and sweep files still refuse duplicates, "
               "with their messages");
    {
        char tr[512], sw[512];
        snprintf(tr, sizeof tr, "%s/dup-trace.json", th_tmpdir());
        write_text(t, tr,
                   "{\"format\": \"tpuemu-trace/1\", \"system\": \"v3-8\", "
                   "\"format\": \"tpuemu-trace/1\"}");
        th_run(c, "%s run %s --quiet", th_bin(), tr);
        TH_CHECKF(t, c->status == 2 && strstr(c->err, ": format: duplicate key"),
                  "trace: status %d: %s", c->status, c->err);
        th_run(c, "%s run test/bad_traces/07-duplicate-key.json --quiet",
               th_bin());
        TH_CHECKF(t, c->status == 2 &&
                         strstr(c->err, "graph.layers[0].filters: duplicate "
                                        "key"),
                  "trace 07: status %d: %s", c->status, c->err);
        snprintf(sw, sizeof sw, "%s/dup-sweep.json", th_tmpdir());
        write_text(t, sw,
                   "{\"format\": \"tpuemu-sweep/1\", \"name\": \"w\", "
                   "\"trace\": \"t.json\", \"grid\": {\"set\": "
                   "{\"mxu.rows\": [64], \"mxu.rows\": [128]}}}");
        th_run(c, "%s sweep %s --out %s/dup-sweep-out", th_bin(), sw, th_tmpdir());
        TH_CHECKF(t, c->status == 2 &&
                         strstr(c->err, ": grid.set.mxu.rows: duplicate key"),
                  "sweep: status %d: %s", c->status, c->err);
    }
    free(c);
    free(text);
}
