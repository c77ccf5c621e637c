/* tpuemu sweep --trace: the command-line form is the sweep file it writes
 * (DIR/sweep.json), run as a file is.  The runs here are real (a two-layer
 * convolution, microseconds per step), so a form that dropped or changed
 * an axis gives another results.csv than the hand-written file.  The
 * sweeps run with --no-range: the step ranges (15-30 more steps a run)
 * are not what these cases compare, and would triple the suite's time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test/harness.h"

static const char tiny_trace[] =
    "{\"format\": \"tpuemu-trace/1\", \"name\": \"tiny\", \"system\": "
    "\"v3-8\", \"run\": {\"mode\": \"train\", \"global_batch\": 32, "
    "\"num_cores_per_replica\": 1, \"input_partition_dims\": "
    "[[1, 1, 1, 1], null]}, \"graph\": {\"inputs\": [{\"name\": "
    "\"image\", \"shape\": [32, 32, 3]}], \"layers\": [{\"name\": \"c\", "
    "\"op\": \"conv\", \"in\": \"image\", \"filters\": 8, \"kernel\": "
    "[3, 3]}, {\"name\": \"c2\", \"op\": \"conv\", \"in\": \"c\", "
    "\"filters\": 8, \"kernel\": [3, 3]}]}}\n";

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; s && *s; s++)
        n += *s == '\n';
    return n;
}

static int error_lines(const char *s)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, "tpuemu: error:")); p++)
        n++;
    return n;
}

/* The same two files, byte for byte (both readable). */
static int same_file(const char *a, const char *b)
{
    size_t la = 0, lb = 0;
    char *ta = th_slurp(a, &la), *tb = th_slurp(b, &lb);
    int same = ta && tb && la == lb && memcmp(ta, tb, la) == 0;
    free(ta);
    free(tb);
    return same;
}

/* stdout from the ranking on ("fastest first" ... the summary line): what
 * does not name the sweep or its directory. */
static const char *ranking(const char *out)
{
    const char *r = strstr(out, "fastest first");
    return r ? r : "";
}

static void equivalence(th_ctx *t, th_cmd_result *c, const char *d,
                        const char *trace)
{
    /* Under ASan, one system (10 splits x 2 values); else 2 systems. */
    const char *systems = th_asan() ? "v3-32" : "v3-8,v3-32";
    const char *hand_systems = th_asan() ? "\"v3-32\""
                                         : "\"v3-8\", \"v3-32\"";
    char hand[1024], text[2000], p1[1024], p2[1024], p3[1024];
    th_case(t, "--trace and the equivalent sweep file: identical "
               "results.csv and ranking");
    th_run(c, "rm -rf %s/cli %s/file %s/again; %s sweep --trace %s "
              "--system %s --set hbm.bandwidth_gbs=900,450 --out %s/cli "
              "-j 2 --no-range",
           d, d, d, th_bin(), trace, systems, d);
    TH_CHECKF(t, c->status == 0, "cli: %d %s", c->status, c->err);
    char *cli_out = strdup(c->out);
    snprintf(hand, sizeof hand, "%s/hand.json", d);
    snprintf(text, sizeof text,
             "{\"format\": \"tpuemu-sweep/1\", \"name\": \"hand\", "
             "\"trace\": \"tiny.json\", \"grid\": {\"partition_dims\": "
             "\"all\", \"system\": [%s], \"set\": {\"hbm.bandwidth_gbs\": "
             "[900, 450]}}}\n",
             hand_systems);
    th_put(hand, text);
    th_run(c, "%s sweep %s --out %s/file -j 2 --no-range", th_bin(), hand,
           d);
    TH_CHECKF(t, c->status == 0, "file: %d %s", c->status, c->err);
    snprintf(p1, sizeof p1, "%s/cli/results.csv", d);
    snprintf(p2, sizeof p2, "%s/file/results.csv", d);
    TH_CHECKF(t, same_file(p1, p2), "%s and %s differ", p1, p2);
    TH_CHECKF(t, cli_out && strcmp(ranking(cli_out), ranking(c->out)) == 0,
              "rankings differ:\n%s\n--\n%s", cli_out ? ranking(cli_out) : "",
              ranking(c->out));
    /* the 15 splits of 32x32 over 1-16 cores, each on the systems it runs
     * on (v3-8 runs 10: 16 cores per replica do not divide its 8) x 2
     * bandwidths, and both bandwidths in it: a form that dropped the --set
     * axis has half the rows */
    char *csv = th_slurp(p1, NULL);
    int rows = count_lines(csv) - 1;
    TH_CHECKF(t, rows == (th_asan() ? 30 : 50), "%d rows", rows);
    TH_CHECK(t, csv && strstr(csv, ",v3-32,450,") && strstr(csv, "1x4x2x1"));
    free(csv);
    TH_CHECK(t, cli_out && strstr(cli_out, "sweep file: ") &&
                    strstr(cli_out, "/cli/sweep.json"));
    free(cli_out);

    th_case(t, "DIR/sweep.json re-runs the same sweep");
    snprintf(p3, sizeof p3, "%s/cli/sweep.json", d);
    char *sj = th_slurp(p3, NULL);
    TH_CHECKF(t, sj && strstr(sj, "\"partition_dims\":\t\"all\"") &&
                     strstr(sj, "\"tpuemu-sweep/1\"") &&
                     strstr(sj, "/tiny.json\""),
              "%s", sj ? sj : "(no sweep.json)");
    free(sj);
    th_run(c, "cd / && %s sweep %s --out %s/again -j 2 --no-range",
           th_bin_abs(), p3, d);
    TH_CHECKF(t, c->status == 0, "%d %s", c->status, c->err);
    snprintf(p2, sizeof p2, "%s/again/results.csv", d);
    TH_CHECKF(t, same_file(p1, p2), "%s and %s differ", p1, p2);
}

/* Exit 2, one error line that starts with `want`, nothing written. */
static void refused(th_ctx *t, th_cmd_result *c, const char *d,
                    const char *args, const char *want)
{
    th_run(c, "rm -rf %s/bad; %s sweep %s --out %s/bad", d, th_bin(), args,
           d);
    char line[300];
    snprintf(line, sizeof line, "tpuemu: error: %s", want);
    TH_CHECKF(t, c->status == 2 && error_lines(c->err) == 1 &&
                     strncmp(c->err, line, strlen(line)) == 0,
              "%s: %d %s", args, c->status, c->err);
    char p[1024];
    snprintf(p, sizeof p, "%s/bad", d);
    TH_CHECKF(t, !exists(p), "%s: %s was created", args, p);
    /* the in-memory file's name and JSON paths never show */
    TH_CHECKF(t, !strstr(c->err, "grid.") && !strstr(c->err, "(sweep"),
              "%s", c->err);
}

static void bad_options(th_ctx *t, th_cmd_result *c, const char *d,
                        const char *trace)
{
    char a[4096];
    th_case(t, "bad --system, --batch, --set values: exit 2 naming the "
               "option");
    snprintf(a, sizeof a, "--trace %s --system v3-8,v3-65", trace);
    refused(t, c, d, a, "--system v3-65: unknown system");
    snprintf(a, sizeof a, "--trace %s --system v3-8,", trace);
    refused(t, c, d, a, "--system: 'v3-8,': an empty entry");
    snprintf(a, sizeof a, "--trace %s --system v3-8,v3-8", trace);
    refused(t, c, d, a, "--system v3-8: the same value as an earlier entry");
    snprintf(a, sizeof a, "--trace %s --batch 32,0", trace);
    refused(t, c, d, a, "--batch 0: expected a positive integer");
    snprintf(a, sizeof a, "--trace %s --batch x", trace);
    refused(t, c, d, a, "--batch x: expected a positive integer");
    /* 33 examples split over no number of replicas of v3-32 (2 to 32) */
    snprintf(a, sizeof a, "--trace %s --system v3-32 --batch 33", trace);
    refused(t, c, d, a, "--trace: no split of the first input is "
                        "valid on v3-32 at batch 33 (give other --system or "
                        "--batch values)");
    snprintf(a, sizeof a, "--trace %s --set mxu.rows=128,0", trace);
    refused(t, c, d, a, "--set mxu.rows=0: out of range [1, 4096]");
    snprintf(a, sizeof a, "--trace %s --set nokey=1", trace);
    refused(t, c, d, a, "--set nokey: unknown parameter");
    snprintf(a, sizeof a, "--trace %s --set hbm.bandwidth_gbs=0x10", trace);
    refused(t, c, d, a, "--set hbm.bandwidth_gbs=0x10: expected a decimal "
                        "number");
    snprintf(a, sizeof a, "--trace %s --set mxu.rows", trace);
    refused(t, c, d, a, "--set mxu.rows: expected KEY=VALUE");
    snprintf(a, sizeof a, "--trace %s --set mxu.rows=64 --set mxu.rows=32",
             trace);
    refused(t, c, d, a, "--set mxu.rows: given twice");
    snprintf(a, sizeof a, "--trace %s --freeze 'zz*'", trace);
    refused(t, c, d, a, "--freeze: no layer named 'zz*'");
    snprintf(a, sizeof a, "--trace %s/nothere.json", d);
    refused(t, c, d, a, "--trace: ");

    th_case(t, "--trace and a sweep file are one or the other");
    char sw[600];
    snprintf(sw, sizeof sw, "%s/hand.json", d);
    snprintf(a, sizeof a, "%s --trace %s", sw, trace);
    refused(t, c, d, a, "sweep: --trace builds a sweep from the command "
                        "line");
    snprintf(a, sizeof a, "--trace %s %s", trace, sw);
    refused(t, c, d, a, "sweep: --trace builds a sweep from the command "
                        "line");
    snprintf(a, sizeof a, "%s --system v3-8", sw);
    refused(t, c, d, a, "sweep: --system: a sweep file sets its grid");
    refused(t, c, d, "--batch 8", "sweep: --batch needs --trace");
    snprintf(a, sizeof a, "--trace %s --system v3-8 --system v3-32", trace);
    refused(t, c, d, a, "--system: given twice");
}

static void outputs(th_ctx *t, th_cmd_result *c, const char *d,
                    const char *trace)
{
    th_case(t, "default --out: sweep-STEM, as the file form's sweep-NAME");
    th_run(c, "cd %s && rm -rf sweep-tiny && %s sweep --trace tiny.json "
              "--system v3-32 --print-commands",
           d, th_bin_abs());
    TH_CHECKF(t, c->status == 0 && count_lines(c->out) == 15, "%d %s %s",
              c->status, c->out, c->err);
    char p[1024];
    snprintf(p, sizeof p, "%s/sweep-tiny/sweep.json", d);
    TH_CHECK(t, exists(p));
    TH_CHECK(t, strstr(c->out, "/sweep-tiny/reports/0014.json"));
    /* --print-commands prints commands only */
    TH_CHECK(t, !strstr(c->out, "sweep file:"));

    th_case(t, "--gather with --trace reads the printed commands' reports");
    th_run(c, "cd %s && %s sweep --trace "
              "tiny.json --system v3-32 --no-range --print-commands > "
              "cmds.txt && "
              "sh -e cmds.txt > /dev/null && %s sweep --trace tiny.json --system v3-32 "
              "--gather",
           d, th_bin_abs(), th_bin_abs());
    TH_CHECKF(t, c->status == 0 && strstr(c->out, "15 runs: 15 done"),
              "%d %s %s", c->status, c->out, c->err);
    char *want = NULL;
    if (c->status == 0)
        want = strdup(ranking(c->out));
    th_run(c, "cd %s && %s sweep sweep-tiny/sweep.json --out sweep-tiny "
              "--gather",
           d, th_bin_abs());
    TH_CHECKF(t, c->status == 0 && want && strcmp(want, ranking(c->out)) == 0,
              "%d %s", c->status, c->err);
    free(want);

    th_case(t, "DIR/sweep.json is an output: a base trace there is refused");
    th_run(c, "rm -rf %s/cl && mkdir %s/cl && cp %s %s/cl/sweep.json", d, d,
           trace, d);
    th_run(c, "%s sweep --trace %s/cl/sweep.json --out %s/cl", th_bin(), d,
           d);
    TH_CHECKF(t, c->status == 2 && strstr(c->err, "is the base trace"),
              "%d %s", c->status, c->err);
    char cl[1024];
    snprintf(cl, sizeof cl, "%s/cl/sweep.json", d);
    TH_CHECK(t, same_file(trace, cl));
}

void th_suite_sweep_trace(th_ctx *t)
{
    char d[512], cwd[256] = "", trace[600];
    /* absolute: some commands run from another directory */
    const char *tmp = th_tmpdir();
    if (tmp[0] != '/' && !getcwd(cwd, sizeof cwd)) {
        TH_FAIL(t, "cannot read the working directory");
        return;
    }
    snprintf(d, sizeof d, "%s%s%s/sweep-trace", cwd, cwd[0] ? "/" : "", tmp);
    mkdir(d, 0755);
    snprintf(trace, sizeof trace, "%s/tiny.json", d);
    th_put(trace, tiny_trace);
    th_cmd_result *c = malloc(sizeof *c);
    if (!c) {
        TH_FAIL(t, "out of memory");
        return;
    }
    equivalence(t, c, d, trace);
    bad_options(t, c, d, trace);
    outputs(t, c, d, trace);
    free(c);
}
