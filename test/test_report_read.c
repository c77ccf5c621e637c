/* The report reader refuses what no run writes, naming the file and the
 * JSON path: values out of range, fields that disagree with each other or
 * with the system, strings a terminal would act on, files of another
 * kind; check and view refuse them alike. */
#include <cJSON.h>
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "emu/graph.h"
#include "emu/out/outfile.h"
#include "emu/result.h"
#include "emu/sim.h"
#include "test/harness.h"

#define TINY "traces/small/tiny2d.json"

/* A utilisation is a fraction: the reader refuses one above 1 before
 * check compares it. */
static void mxu_util_cases(th_ctx *t)
{
    static th_cmd_result c;
    char rep[512];
    snprintf(rep, sizeof rep, "%s/util-report.json", th_tmpdir());
    th_run(&c, "%s run %s --quiet --report %s", th_bin(), TINY, rep);
    th_case(t, "the report reader refuses an MXU utilisation above 1, "
               "naming its path");
    th_run(&c, "sed -i '0,/\"mxu_utilization\": [0-9.e+-]*/s//"
               "\"mxu_utilization\": 1e300/' %s && %s check --baseline %s %s",
           rep, th_bin(), rep, rep);
    TH_CHECKF(t, c.status == 2 &&
                     strstr(c.err, "per_core[0].mxu_utilization: 1e+300 is "
                                   "above 1"),
              "exit %d: %s", c.status, c.err);
}

static void report_cases(th_ctx *t)
{
    th_cmd_result c;
    char rep[512], bad[512];
    snprintf(rep, sizeof rep, "%s/report-read-report.json", th_tmpdir());
    snprintf(bad, sizeof bad, "%s/report-read-bad.json", th_tmpdir());
    th_run(&c, "%s run %s --quiet --report %s", th_bin(), TINY, rep);
    if (!TH_CHECKF(t, c.status == 0, "exit %d: %s", c.status, c.err))
        return;

    th_case(t, "the report reader refuses fits true with hbm_needed_bytes "
               "above hbm_capacity_bytes, naming fits");
    th_run(&c, "sed 's/\"hbm_capacity_bytes\": [0-9.e+]*/"
               "\"hbm_capacity_bytes\": 1000/' %s > %s && "
               "%s check --baseline %s %s",
           rep, bad, th_bin(), bad, rep);
    TH_CHECKF(t, c.status == 2 && strstr(c.err, ": fits: true, but "
                                                "hbm_needed_bytes"),
              "exit %d: %s", c.status, c.err);
    th_case(t, "... and reads a report that does not fit (needed above "
               "capacity, fits false) and one with the run's own capacity");
    th_run(&c, "%s run %s --quiet --set hbm.capacity_gib=0.001 --report %s; "
               "test $? = 3 && %s check --baseline %s %s",
           th_bin(), TINY, bad, th_bin(), bad, rep);
    TH_CHECKF(t, c.status == 0 && strstr(c.out, "the baseline did not fit"),
              "exit %d: %s%s", c.status, c.out, c.err);
    th_run(&c, "%s check --baseline %s %s", th_bin(), rep, rep);
    TH_CHECKF(t, c.status == 0, "exit %d: %s", c.status, c.err);

    th_case(t, "the report reader refuses a core peaking above "
               "hbm_needed_bytes, naming the core's path");
    th_run(&c, "sed 's/\"hbm_needed_bytes\": [0-9.e+]*/"
               "\"hbm_needed_bytes\": 1000/' %s > %s && "
               "%s check --baseline %s %s",
           rep, bad, th_bin(), bad, rep);
    TH_CHECKF(t, c.status == 2 && strstr(c.err, "per_core[0].hbm_peak_bytes"
                                                ": ") &&
                     strstr(c.err, "the largest core's peak"),
              "exit %d: %s", c.status, c.err);
}

/* The report reader on files that are not run reports, or reports a run
 * did not write: each named for what it is. */
static void reader_cases(th_ctx *t)
{
    th_cmd_result *c = malloc(sizeof *c);
    if (!c)
        return;
    const char *d = th_tmpdir();
    char base[512], path[512];
    snprintf(base, sizeof base, "%s/reader-base.json", d);
    th_run(c, "%s run %s --report %s --quiet", th_bin(), TINY, base);
    char *text = th_slurp(base, NULL);
    if (!TH_CHECKF(t, text != NULL, "no %s", base)) {
        free(c);
        return;
    }
    th_case(t, "check of a trace as a report says it is a trace");
    th_run(c, "%s check --baseline %s %s", th_bin(), TINY, base);
    TH_CHECKF(t, c->status == 2 && strstr(c->err, "this is a trace"),
              "status %d, stderr %s", c->status, c->err);

    th_case(t, "a truncated report: 'ends too early', as for a trace");
    snprintf(path, sizeof path, "%s/report-read-trunc.json", d);
    th_put(path, "{\"format\":\"tpuemu-report/1\"");
    th_run(c, "%s check --baseline %s %s", th_bin(), path, base);
    TH_CHECKF(t, c->status == 2 && strstr(c->err, "ends too early"),
              "status %d, stderr %s", c->status, c->err);

    th_case(t, "an unknown breakdown category is named, not a bad sum");
    char *at = strstr(text, "\"idle\":");
    if (TH_CHECKF(t, at != NULL, "no idle key")) {
        size_t k = (size_t)(at - text), n = strlen(text);
        char *ed = malloc(n + 32);
        if (ed) {
            memcpy(ed, text, k);
            strcpy(ed + k, "\"dma_wait\": 0, ");
            strcat(ed, text + k);
            snprintf(path, sizeof path, "%s/report-read-newcat.json", d);
            th_put(path, ed);
            free(ed);
            th_run(c, "%s check --baseline %s %s", th_bin(), base, path);
            TH_CHECKF(t, c->status == 2 &&
                             strstr(c->err, "breakdown_s.dma_wait: unknown "
                                            "category"),
                      "status %d, stderr %s", c->status, c->err);
        }
    }

    th_case(t, "a report without overrides is refused, as without "
               "flops_per_step");
    at = strstr(text, "\"overrides\": {}");
    if (TH_CHECKF(t, at != NULL, "no empty overrides")) {
        memcpy(at, "\"overridez\"", strlen("\"overridez\""));
        snprintf(path, sizeof path, "%s/report-read-noov.json", d);
        th_put(path, text);
        th_run(c, "%s check --baseline %s %s", th_bin(), base, path);
        TH_CHECKF(t, c->status == 2 && strstr(c->err, "overrides: missing"),
                  "status %d, stderr %s", c->status, c->err);
    }
    free(text);
    free(c);
}

/* A report of tiny2d as run writes it, which the cases below edit (when
 * run fails, there is no file, and each case says so). */
static void base_report(th_cmd_result *c, char *path, size_t cap)
{
    snprintf(path, cap, "%s/report-read-base.json", th_tmpdir());
    th_run(c, "%s run traces/small/tiny2d.json --quiet --report %s", th_bin(),
           path);
}

/* src with every occurrence of `from` replaced by `to`, written to
 * th_tmpdir()/name (its path in path); 0 when `from` is not there. */
static int edited(const char *src, const char *from, const char *to,
                  const char *name, char *path, size_t cap)
{
    char *text = th_slurp(src, NULL);
    size_t nf = strlen(from), nt = strlen(to), hits = 0;
    if (!text)
        return 0;
    for (char *p = strstr(text, from); p; p = strstr(p + nf, from))
        hits++;
    char *out = malloc(strlen(text) + hits * nt + 1);
    if (!out || !hits) {
        free(out);
        free(text);
        return 0;
    }
    char *o = out;
    const char *p = text;
    for (const char *q; (q = strstr(p, from)); p = q + nf) {
        memcpy(o, p, (size_t)(q - p));
        o += q - p;
        memcpy(o, to, nt);
        o += nt;
    }
    strcpy(o, p);
    snprintf(path, cap, "%s/%s", th_tmpdir(), name);
    th_put(path, out);
    free(out);
    free(text);
    return 1;
}

/* `check` of the report against itself is refused with exit 2 and one
 * line "tpuemu: error: PATH: want". */
static void refused(th_ctx *t, th_cmd_result *c, const char *path,
                    const char *want)
{
    char line[1024];
    snprintf(line, sizeof line, "tpuemu: error: %s: %s", path, want);
    th_run(c, "%s check --baseline %s %s", th_bin(), path, path);
    TH_CHECKF(t,
              c->status == 2 && strstr(c->err, line) &&
                  strchr(c->err, '\n') == c->err + strlen(c->err) - 1,
              "status %d\n       got  '%s'\n       want '%s'", c->status,
              c->err, line);
}

/* One edit of the base report given to view: refused (exit 2) with
 * `want` in its message. */
static void view_refuses(th_ctx *t, th_cmd_result *c, const char *base,
                         const char *from, const char *to, const char *name,
                         const char *want)
{
    char path[512];
    if (!TH_CHECK(t, edited(base, from, to, name, path, sizeof path)))
        return;
    th_run(c, "SDL_VIDEODRIVER=dummy %s view %s --screenshot %s/p12b.png",
           th_bin(), path, th_tmpdir());
    TH_CHECKF(t, c->status == 2 && strstr(c->err, want), "%d %s", c->status,
              c->err);
}

/* One edit of the base report and the message it must be refused with. */
typedef struct {
    const char *from, *to, *want;
} rep_edit;

/* Each edit as its own report (TMP/report-read-TAG-N.json), refused by check
 * with its message under the case `what`; the output terminal-safe too
 * when safe is set. */
static void refuse_edits(th_ctx *t, th_cmd_result *c, const char *base,
                         const rep_edit *k, size_t n, const char *tag,
                         const char *what, int safe)
{
    for (size_t i = 0; i < n; i++) {
        char path[512], name[64];
        snprintf(name, sizeof name, "report-read-%s-%zu.json", tag, i);
        th_case(t, what);
        if (!TH_CHECKF(
                t, edited(base, k[i].from, k[i].to, name, path, sizeof path),
                "no '%s' in the base report", k[i].from))
            continue;
        refused(t, c, path, k[i].want);
        if (safe)
            TH_CHECK(t, th_terminal_safe(c->out) && th_terminal_safe(c->err));
    }
}

static void c1_cases(th_ctx *t, th_cmd_result *c, const char *base)
{
    static const rep_edit k[] = {
        {"\"trace\": \"tiny2d\"", "\"trace\": \"evil\\u009b2J\"",
         "trace: the string contains a control character (U+009B)"},
        {"\"trace\": \"tiny2d\"", "\"trace\": \"a\xc2\x85x\"",
         "trace: the string contains a control character (U+0085)"},
        {"{\"name\": \"relu1\"", "{\"name\": \"r\\u2028y\"",
         "layers[3].name: the string contains a line separator (U+2028)"},
        {"{\"name\": \"relu1\"", "{\"name\": \"r\\u2029y\"",
         "layers[3].name: the string contains a paragraph separator "
         "(U+2029)"},
        {"\"overrides\": {}", "\"overrides\": {}, \"freeze\": \"a\\u202eb\"",
         "freeze: the string contains a bidirectional text control "
         "(U+202E)"},
        {"\"overrides\": {}", "\"overrides\": {\"clock_hz\": \"1e9\\u2069\"}",
         "overrides.clock_hz: the string contains a bidirectional text "
         "control (U+2069)"},
    };
    refuse_edits(t, c, base, k, sizeof k / sizeof k[0], "c1",
                 "report: C1 controls, line separators and bidi controls are "
                 "refused in its strings (check)",
                 1);

    th_case(t, "report: view refuses them the same way");
    view_refuses(t, c, base, "\"trace\": \"tiny2d\"",
                 "\"trace\": \"evil\\u009b2J\"", "report-read-c1v.json",
                 "report-read-c1v.json: trace: the string contains a control "
                 "character (U+009B)");

    th_case(t, "run: a trace named with C1 controls is refused, and a "
               "message quoting one shows it escaped");
    {
        char path[512];
        if (TH_CHECK(t,
                     edited("traces/small/tiny2d.json", "\"name\": \"tiny2d\"",
                            "\"name\": \"evil\\u009b2J\\u0085x\"",
                            "report-read-c1t.json", path, sizeof path))) {
            th_run(c, "%s run %s --quiet", th_bin(), path);
            TH_CHECKF(t,
                      c->status == 2 && th_terminal_safe(c->out) &&
                          th_terminal_safe(c->err) &&
                          strstr(c->err, "report-read-c1t.json: name: contains a "
                                         "control character (U+009B)"),
                      "%d %s", c->status, c->err);
        }
        /* --freeze echoes an entry that names no layer */
        th_run(c,
               "%s run traces/small/tiny2d.json --quiet --freeze "
               "\"$(printf 'x\\302\\233y')\"",
               th_bin());
        TH_CHECKF(t,
                  c->status == 2 && th_terminal_safe(c->err) &&
                      strstr(c->err, "x\\xc2\\x9by"),
                  "%d %s", c->status, c->err);
    }
}

/* Reports no run can write: each edit below of a report run wrote is
 * refused by check and view, naming its JSON path. */
static void consistency_cases(th_ctx *t, th_cmd_result *c, const char *base)
{
    static const rep_edit k[] = {
        /* 1129976: tiny2d's need per core as run writes it, batchnorm's
         * normalise fused (1261048 with xla.bn_apply_fused=0) */
        {"\"hbm_capacity_bytes\": 17179869184", "\"hbm_capacity_bytes\": 0",
         "fits: true, but hbm_needed_bytes (1129976) is above "
         "hbm_capacity_bytes (0)"},
        {"\"system\": \"v3-8\"", "\"system\": \"v3-32\"",
         "cores: 8, but v3-32 has 32 cores"},
        {"\"chips\": 4", "\"chips\": 3",
         "chips: 3, but v3-8 has 4 chips (2 cores a chip)"},
        {"\"dim_x\": 2", "\"dim_x\": 1000",
         "dim_x: 1000, but the chips of v3-8 are a 2x2 torus"},
        {"\"dim_y\": 2", "\"dim_y\": 4",
         "dim_y: 4, but the chips of v3-8 are a 2x2 torus"},
        {"{\"core\": 5, \"chip\": 2", "{\"core\": 5, \"chip\": 3",
         "per_core[5].chip: 3, but core 5 is on chip 2 (2 cores a chip"},
        {"{\"core\": 1, \"chip\": 0, \"replica\": 1",
         "{\"core\": 1, \"chip\": 0, \"replica\": 0",
         "per_core[1]: replica 0, shard 0 is core 0's too"},
        {"{\"name\": \"relu1\"", "{\"name\": \"\"", "layers[3].name: empty"},
        {"\"trace\": \"tiny2d\"", "\"trace\": \"\"", "trace: empty"},
        {"\"overrides\": {}", "\"overrides\": {}, \"freeze\": \"\"",
         "freeze: empty"},
    };
    refuse_edits(t, c, base, k, sizeof k / sizeof k[0], "rep",
                 "report: counts, torus, chips, replicas and names that no run "
                 "writes are refused (check)",
                 0);

    th_case(t, "report: view refuses them too");
    view_refuses(t, c, base, "\"chips\": 4", "\"chips\": 3", "report-read-repv.json",
                 "report-read-repv.json: chips: 3, but ");

    /* What run writes reads, and the same report with one figure edited
     * does not: one chip, v2, 4-core replicas, a step that does not fit
     * (every core replica 0, shard 0: run has no placement then), and
     * --functional. */
    static const struct {
        const char *run, *from, *to, *want;
    } rk[] = {
        {"traces/small/tiny2d.json --system v2-2", "\"chips\": 1",
         "\"chips\": 2", "chips: 2, but v2-2 has 1 chip (2 cores a chip)"},
        {"traces/small/tiny2d.json --system v2-8", "\"dim_y\": 2",
         "\"dim_y\": 1", "dim_y: 1, but the chips of v2-8 are a 2x2 torus"},
        {"traces/small/tiny3d-p4.json --system v3-32 --batch 8",
         "\"core\": 5, \"chip\": 2, \"replica\": 1, \"shard\": 1",
         "\"core\": 5, \"chip\": 2, \"replica\": 1, \"shard\": 0",
         "per_core[5]: replica 1, shard 0 is core 4's too"},
        {"traces/small/tiny3d-p4.json --system v3-32 --batch 8 --set "
         "hbm.capacity_gib=0.001",
         "\"cores\": 32", "\"cores\": 8", "cores: 8, but v3-32 has 32 cores"},
        {"traces/small/tiny2d.json --functional", "\"trace\": \"tiny2d\"",
         "\"trace\": \"\"", "trace: empty"},
    };
    for (size_t i = 0; i < sizeof rk / sizeof rk[0]; i++) {
        char rep[512], path[512], name[64];
        snprintf(rep, sizeof rep, "%s/report-read-ok%zu.json", th_tmpdir(), i);
        snprintf(name, sizeof name, "report-read-ok%zu-edit.json", i);
        th_case(t, "report: what run writes reads back (check), edited it "
                   "does not");
        th_run(c, "%s run %s --quiet --report %s", th_bin(), rk[i].run, rep);
        TH_CHECKF(t, c->status == 0 || c->status == 3, "run %s: %d %s",
                  rk[i].run, c->status, c->err);
        th_run(c, "%s check --baseline %s %s", th_bin(), rep, rep);
        TH_CHECKF(t, c->status == 0, "%s: %d %s", rk[i].run, c->status, c->err);
        if (TH_CHECKF(
                t, edited(rep, rk[i].from, rk[i].to, name, path, sizeof path),
                "no '%s' in the report of %s", rk[i].from, rk[i].run))
            refused(t, c, path, rk[i].want);
    }
    th_case(t, "report: a torus of 0 is unknown, as when absent, and reads; "
               "0 by a wrong one does not");
    {
        char path[512];
        if (TH_CHECK(t, edited(base, "\"dim_x\": 2,\n  \"dim_y\": 2",
                               "\"dim_x\": 0,\n  \"dim_y\": 0",
                               "report-read-dim0.json", path, sizeof path))) {
            th_run(c, "%s check --baseline %s %s", th_bin(), path, path);
            TH_CHECKF(t, c->status == 0, "%d %s", c->status, c->err);
        }
        if (TH_CHECK(t, edited(base, "\"dim_x\": 2,\n  \"dim_y\": 2",
                               "\"dim_x\": 0,\n  \"dim_y\": 3",
                               "report-read-dim03.json", path, sizeof path)))
            refused(t, c, path,
                    "dim_y: 3, but the chips of v3-8 are a 2x2 "
                    "torus (dim_x 2, dim_y 2)");
    }
}

/* Messages say what is so: a byte limit in bytes, a number as the file
 * holds it (beyond 2^53 too), gen's one allowed value, and a sweep file
 * given to check named as one. */
static void message_cases(th_ctx *t, th_cmd_result *c, const char *base)
{
    static const rep_edit k[] = {
        {"\"gen\": 3", "\"gen\": \"v9\"",
         "gen: expected 3, the generation of v3-8, found a string"},
        {"\"cores\": 8", "\"cores\": 9007199254740993",
         "cores: expected an integer from 1 to 65536, found about 9.0072e+15 "
         "(beyond 2^53: not exact)"},
        {"\"global_batch\": 16", "\"global_batch\": -18014398509481985",
         "global_batch: expected an integer from 1 to 9000000000000000, "
         "found about -1.8014e+16 (beyond 2^53: not exact)"},
    };
    refuse_edits(t, c, base, k, sizeof k / sizeof k[0], "msg",
                 "report: gen names the one value it may be; a number beyond "
                 "2^53 is not echoed as another number",
                 0);

    th_case(t, "check: a sweep file is named as one (with its format, and "
               "without, by its grid)");
    {
        char sw[512], nofmt[512];
        snprintf(sw, sizeof sw, "%s/report-read-sweep.json", th_tmpdir());
        th_put(sw, "{\"format\": \"tpuemu-sweep/1\", \"name\": \"s\", "
                   "\"trace\": \"tiny2d.json\", \"grid\": {\"batch\": [8]}}");
        refused(t, c, sw,
                "format: \"tpuemu-sweep/1\": this is a sweep file "
                "(what sweep reads), not a report: tpuemu sweep "
                "FILE --out DIR writes one per run");
        snprintf(nofmt, sizeof nofmt, "%s/report-read-sweep-nofmt.json", th_tmpdir());
        th_put(nofmt, "{\"name\": \"s\", \"trace\": \"tiny2d.json\", "
                      "\"grid\": {\"batch\": [8]}}");
        refused(t, c, nofmt,
                "format: missing: this looks like a sweep file "
                "(what sweep reads), not a report");
    }

    th_case(t, "run: a --freeze list over the limit is counted in bytes");
    {
        char list[1100];
        memset(list, 'a', 1024);
        list[1024] = 0;
        th_run(c, "%s run traces/small/tiny2d.json --quiet --freeze %s",
               th_bin(), list);
        TH_CHECKF(t,
                  c->status == 2 &&
                      strstr(c->err, "--freeze: the list is 1024 bytes "
                                     "long, more than 1023"),
                  "%d %s", c->status, c->err);
    }
}

void th_suite_report_read(th_ctx *t)
{
    th_cmd_result *c = calloc(1, sizeof *c);
    char base[512];
    if (!c)
        return;
    mxu_util_cases(t);
    report_cases(t);
    reader_cases(t);
    base_report(c, base, sizeof base);
    c1_cases(t, c, base);
    consistency_cases(t, c, base);
    message_cases(t, c, base);
    free(c);
}
