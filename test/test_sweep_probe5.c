/* tpuemu sweep, probe round 5 (/work/probe/r5/REPORT.md):
 *  - a sweep never overwrites its own inputs (sweep file, base trace,
 *    --bin) when they sit where it writes (commands.txt, results.csv,
 *    step_time.png, reports/, logs/, traces/): exit 2, nothing written,
 *    compared as files, so "./", "dir/" and symlinks are caught;
 *  - --print-commands names every file absolutely (the base trace and a
 *    relative --bin included), so a line runs from any directory;
 *  - a sweep that draws no chart leaves no earlier step_time.png, and
 *    says "no run fits" only when the runs said so (failures are "no run
 *    succeeded");
 *  - -j and --jobs are one option: the pair is a repeat, exit 2;
 *  - results.csv ends with global_batch (the batch each run was given);
 *  - an x value where nothing fits is named (the chart's axis spans every
 *    swept value: test chart).
 * The runs that are real use a tiny trace (a few ms each). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test/harness.h"

/* 6.5 MiB per core at batch 32 on v3-8: does not fit 1 MiB of HBM. */
static const char tiny_trace[] =
    "{\"format\": \"tpuemu-trace/1\", \"name\": \"tiny\", \"system\": "
    "\"v3-8\", \"run\": {\"mode\": \"train\", \"global_batch\": 32, "
    "\"num_cores_per_replica\": 1}, \"graph\": {\"inputs\": [{\"name\": "
    "\"image\", \"shape\": [64, 64, 3]}], \"layers\": [{\"name\": \"c\", "
    "\"op\": \"conv\", \"in\": \"image\", \"filters\": 32, \"kernel\": [3, "
    "3]}, {\"name\": \"r\", \"op\": \"relu\", \"in\": \"c\"}, {\"name\": "
    "\"loss\", \"op\": \"loss\", \"in\": \"r\", \"kind\": \"l2\"}]}}\n";

static void sweep_text(char *buf, size_t cap, const char *trace,
                       const char *rest)
{
    snprintf(buf, cap,
             "{\"format\": \"tpuemu-sweep/1\", \"name\": \"p5\", "
             "\"trace\": \"%s\", %s}\n",
             trace, rest);
}

static int same_text(const char *path, const char *want)
{
    char *got = th_slurp(path, NULL);
    int same = got && strcmp(got, want) == 0;
    free(got);
    return same;
}

static void clobber_cases(th_ctx *t, const char *d, const char *fail)
{
    th_cmd_result c;
    char dir[600], p[900], text[1024];

    th_case(t, "a sweep file at DIR/commands.txt: refused, not overwritten");
    snprintf(dir, sizeof dir, "%s/p5-clob1", d);
    th_run(&c, "rm -rf %s && mkdir -p %s", dir, dir);
    snprintf(p, sizeof p, "%s/tiny.json", dir);
    th_put(p, tiny_trace);
    sweep_text(text, sizeof text, "tiny.json",
               "\"grid\": {\"batch\": [8, 16]}");
    snprintf(p, sizeof p, "%s/commands.txt", dir);
    th_put(p, text);
    th_run(&c, "%s sweep %s --out %s --bin %s", th_bin(), p, dir, fail);
    TH_CHECKF(t, c.status == 2 && strstr(c.err, "commands.txt is the sweep "
                                                "file; refusing to overwrite"),
              "status %d: %s", c.status, c.err);
    TH_CHECKF(t, same_text(p, text), "the sweep file changed");
    th_run(&c, "test -e %s/reports || test -e %s/logs", dir, dir);
    TH_CHECKF(t, c.status != 0, "directories were created");
    /* the same file spelled "./DIR/" from its parent */
    th_run(&c, "cd %s && %s sweep ./p5-clob1/commands.txt --out ./p5-clob1/ "
               "--bin %s",
           d, th_bin_abs(), fail);
    TH_CHECKF(t, c.status == 2 && strstr(c.err, "is the sweep file"),
              "./ form: status %d: %s", c.status, c.err);
    TH_CHECK(t, same_text(p, text));

    th_case(t, "a base trace at DIR/reports/0000.json, through a symlink "
               "and a ./ path: refused, not overwritten");
    snprintf(dir, sizeof dir, "%s/p5-clob2", d);
    th_run(&c, "rm -rf %s && mkdir -p %s/out/reports", dir, dir);
    snprintf(p, sizeof p, "%s/out/reports/0000.json", dir);
    th_put(p, tiny_trace);
    th_run(&c, "ln -s out/reports/0000.json %s/base.json", dir);
    char sw[700];
    snprintf(sw, sizeof sw, "%s/s.json", dir);
    sweep_text(text, sizeof text, "./base.json",
               "\"grid\": {\"batch\": [8, 16]}");
    th_put(sw, text);
    th_run(&c, "%s sweep %s --out %s/out --bin %s", th_bin(), sw, dir, fail);
    TH_CHECKF(t, c.status == 2 && strstr(c.err, "reports/0000.json is the "
                                                "base trace; refusing"),
              "status %d: %s", c.status, c.err);
    TH_CHECKF(t, same_text(p, tiny_trace), "the base trace changed");
    th_run(&c, "test -e %s/out/logs || test -e %s/out/commands.txt", dir,
           dir);
    TH_CHECKF(t, c.status != 0, "something was written");
    /* with a partitioning axis the runs read variants, but the base trace
     * would still be overwritten by a report: refused the same way */
    sweep_text(text, sizeof text, "out/reports/0000.json",
               "\"grid\": {\"partition_dims\": [[1,2,1,1], [1,1,2,1]]}");
    th_put(sw, text);
    th_run(&c, "%s sweep %s --out %s/out --print-commands", th_bin(), sw,
           dir);
    TH_CHECKF(t, c.status == 2 && strstr(c.err, "is the base trace") &&
                     !c.out[0],
              "--print-commands: status %d: %s%s", c.status, c.out, c.err);
    TH_CHECK(t, same_text(p, tiny_trace));

    th_case(t, "a sweep file at DIR/results.csv, a base trace at "
               "DIR/step_time.png or DIR/logs/0001.log, --bin at "
               "DIR/traces/...: refused");
    snprintf(dir, sizeof dir, "%s/p5-clob3", d);
    th_run(&c, "rm -rf %s && mkdir -p %s/logs %s/traces", dir, dir, dir);
    snprintf(p, sizeof p, "%s/step_time.png", dir);
    th_put(p, tiny_trace);
    snprintf(p, sizeof p, "%s/logs/0001.log", dir);
    th_put(p, tiny_trace);
    snprintf(p, sizeof p, "%s/tiny.json", dir);
    th_put(p, tiny_trace);
    static const struct {
        const char *trace, *file, *want;
    } cases[] = {
        {"tiny.json", "results.csv", "results.csv is the sweep file"},
        {"step_time.png", "s.json", "step_time.png is the base trace"},
        {"logs/0001.log", "s.json", "logs/0001.log is the base trace"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(sw, sizeof sw, "%s/%s", dir, cases[i].file);
        sweep_text(text, sizeof text, cases[i].trace,
                   "\"grid\": {\"batch\": [8, 16]}");
        th_put(sw, text);
        th_run(&c, "%s sweep %s --out %s --bin %s", th_bin(), sw, dir, fail);
        TH_CHECKF(t, c.status == 2 && strstr(c.err, cases[i].want),
                  "case %zu: status %d: %s", i, c.status, c.err);
        TH_CHECKF(t, same_text(sw, text), "case %zu: sweep file changed", i);
    }
    /* the program the runs execute, at a variant trace's place */
    sweep_text(text, sizeof text, "tiny.json",
               "\"grid\": {\"partition_dims\": [[1,2,1,1]]}");
    snprintf(sw, sizeof sw, "%s/s.json", dir);
    th_put(sw, text);
    th_run(&c, "cp %s %s/traces/tiny-pd1x2x1x1.json && %s sweep %s --out %s "
               "--bin %s/traces/tiny-pd1x2x1x1.json",
           fail, dir, th_bin(), sw, dir, dir);
    TH_CHECKF(t, c.status == 2 && strstr(c.err, "tiny-pd1x2x1x1.json is the "
                                                "program"),
              "--bin: status %d: %s", c.status, c.err);
    snprintf(p, sizeof p, "%s/traces/tiny-pd1x2x1x1.json", dir);
    char *fa = th_slurp(fail, NULL);
    TH_CHECK(t, fa && same_text(p, fa));
    free(fa);
}

/* Every word of the command lines that names a file is absolute. */
static int all_absolute(const char *out, char *bad, size_t cap)
{
    const char *p = out;
    while (*p) {
        size_t n = strcspn(p, " \n");
        int line_start = p == out || p[-1] == '\n';
        int file = line_start || (n > 5 && strncmp(p + n - 5, ".json", 5) == 0);
        if (file && n && p[0] != '/') {
            snprintf(bad, cap, "%.*s", (int)n, p);
            return 0;
        }
        p += n;
        p += strspn(p, " \n");
    }
    return 1;
}

static void command_cases(th_ctx *t, const char *d)
{
    th_cmd_result c;
    char dir[600], p[900], text[1024], bad[300] = "";

    th_case(t, "--print-commands: the base trace and a relative --bin are "
               "absolute without a partition_dims axis; a line runs from /");
    snprintf(dir, sizeof dir, "%s/p5-cmds", d);
    th_run(&c, "rm -rf %s && mkdir -p %s/sw", dir, dir);
    snprintf(p, sizeof p, "%s/sw/base.json", dir);
    th_put(p, tiny_trace);
    sweep_text(text, sizeof text, "base.json",
               "\"grid\": {\"set\": {\"hbm.bandwidth_gbs\": [450, 900]}}");
    snprintf(p, sizeof p, "%s/sw/s.json", dir);
    th_put(p, text);
    th_run(&c, "cp %s %s/tpuemu-copy && cd %s && ./tpuemu-copy sweep "
               "sw/s.json --print-commands --out o --bin ./tpuemu-copy",
           th_bin(), dir, dir);
    TH_CHECKF(t, c.status == 0 && all_absolute(c.out, bad, sizeof bad),
              "status %d, relative word '%s': %s%s", c.status, bad, c.out,
              c.err);
    char want[1400];
    snprintf(want, sizeof want, "%s/tpuemu-copy run %s/sw/base.json ", dir,
             dir);
    TH_CHECKF(t, strncmp(c.out, want, strlen(want)) == 0, "want %s: %s", want,
              c.out);
    size_t n1 = strcspn(c.out, "\n");
    char line[2048];
    snprintf(line, sizeof line, "%.*s", (int)n1, c.out);
    th_run(&c, "cd / && %s && test -s %s/o/reports/0000.json", line, dir);
    TH_CHECKF(t, c.status == 0, "from /: status %d: %s", c.status, c.err);
    /* "./" and "dir/" spellings give clean paths */
    th_run(&c, "cd %s && %s sweep ./sw/s.json --print-commands --out ./o/",
           dir, th_bin_abs());
    snprintf(want, sizeof want, " %s/sw/base.json ", dir);
    char rep[1400];
    snprintf(rep, sizeof rep, " %s/o/reports/0000.json ", dir);
    TH_CHECKF(t, c.status == 0 && strstr(c.out, want) && strstr(c.out, rep),
              "status %d: %s", c.status, c.out);

    th_case(t, "-j and --jobs are one option: the pair is a repeat, exit 2");
    static const char *const pairs[] = {"-j 2 --jobs 3", "--jobs 2 -j 3",
                                        "-j 2 -j 3", "--jobs=2 -j 3"};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        th_run(&c, "cd %s && %s sweep sw/s.json --print-commands --out o %s",
               dir, th_bin_abs(), pairs[i]);
        TH_CHECKF(t, c.status == 2 && strstr(c.err, "given twice") &&
                         !c.out[0],
                  "%s: status %d: %s", pairs[i], c.status, c.err);
    }
    th_run(&c, "cd %s && %s sweep sw/s.json --print-commands --out o -j 2",
           dir, th_bin_abs());
    TH_CHECKF(t, c.status == 0, "-j once: status %d: %s", c.status, c.err);
}

static void outcome_cases(th_ctx *t, const char *d, const char *fail,
                          const char *nofit)
{
    th_cmd_result c;
    char dir[600], p[900], text[1024];

    th_case(t, "every run failed: no earlier chart is left, and it says "
               "\"no run succeeded\", not \"no run fits\"");
    snprintf(dir, sizeof dir, "%s/p5-stale", d);
    th_run(&c, "rm -rf %s && mkdir -p %s/out", dir, dir);
    snprintf(p, sizeof p, "%s/tiny.json", dir);
    th_put(p, tiny_trace);
    sweep_text(text, sizeof text, "tiny.json",
               "\"grid\": {\"batch\": [8, 16]}");
    snprintf(p, sizeof p, "%s/s.json", dir);
    th_put(p, text);
    char png[700];
    snprintf(png, sizeof png, "%s/out/step_time.png", dir);
    th_put(png, "an earlier sweep's chart");
    th_run(&c, "%s sweep %s --out %s/out --bin %s", th_bin(), p, dir, fail);
    TH_CHECKF(t, c.status == 2 && strstr(c.out, "no run succeeded (all 2 "
                                                "failed)") &&
                     !strstr(c.out, "no run fits"),
              "status %d: %s%s", c.status, c.out, c.err);
    th_run(&c, "test -e %s", png);
    TH_CHECKF(t, c.status != 0, "a stale step_time.png is left");
    /* the failed rows still say which batch they were given */
    char csv[700];
    snprintf(csv, sizeof csv, "%s/out/results.csv", dir);
    char *s = th_slurp(csv, NULL);
    TH_CHECKF(t, s && strstr(s, ",hbm_needed_bytes,global_batch\n") &&
                     strstr(s, "\n0000,8,2,") && strstr(s, ",8\n0001,16,2,") &&
                     strstr(s, ",16\n"),
              "csv: %s", s ? s : "(none)");
    free(s);

    th_case(t, "every run does not fit: \"no run fits\", no chart left");
    th_put(png, "an earlier sweep's chart");
    th_run(&c, "%s sweep %s --out %s/out --bin %s", th_bin(), p, dir, nofit);
    TH_CHECKF(t, c.status == 0 && strstr(c.out, "no run fits") &&
                     !strstr(c.out, "succeeded ("),
              "status %d: %s%s", c.status, c.out, c.err);
    th_run(&c, "test -e %s", png);
    TH_CHECKF(t, c.status != 0, "a stale step_time.png is left");

    th_case(t, "scale_batch: results.csv's global_batch is each run's "
               "batch; an x value where nothing fits is named");
    sweep_text(text, sizeof text, "tiny.json",
               "\"scale_batch\": true, \"grid\": {\"system\": [\"v3-2\", "
               "\"v3-8\"], \"set\": {\"hbm.capacity_gib\": [0.001, 16]}}, "
               "\"x\": \"hbm.capacity_gib\"");
    th_put(p, text);
    th_run(&c, "%s sweep %s --out %s/out -j 2", th_bin(), p, dir);
    TH_CHECKF(t, c.status == 0 && strstr(c.out, "2 done, 2 do not fit") &&
                     strstr(c.out, "chart: no point at hbm.capacity_gib "
                                   "0.001 (no run there fits"),
              "status %d: %s%s", c.status, c.out, c.err);
    s = th_slurp(csv, NULL);
    /* base: 32 examples on v3-8, so 8 on v3-2; the header keeps its
     * earlier columns in place */
    TH_CHECKF(t, s && strncmp(s, "run,system,hbm.capacity_gib,exit,fits,"
                                 "step_time_s,",
                              50) == 0 &&
                     strstr(s, ",hbm_needed_bytes,global_batch\n") &&
                     strstr(s, "\n0001,v3-2,16,0,1,") &&
                     strstr(s, "\n0003,v3-8,16,0,1,"),
              "csv: %s", s ? s : "(none)");
    /* the last field of each row */
    int ok = s != NULL;
    static const char *const rows[] = {"\n0000,", "\n0001,", "\n0002,",
                                       "\n0003,"};
    static const char *const gb[] = {"8", "8", "32", "32"};
    for (int i = 0; i < 4 && ok; i++) {
        const char *r = strstr(s, rows[i]);
        const char *e = r ? strchr(r + 1, '\n') : NULL;
        const char *comma = e ? e : NULL;
        while (comma && comma > r && comma[-1] != ',')
            comma--;
        ok = comma && (size_t)(e - comma) == strlen(gb[i]) &&
             strncmp(comma, gb[i], strlen(gb[i])) == 0;
        TH_CHECKF(t, ok, "row %d: %s", i, s);
    }
    free(s);
}

void th_suite_sweep_probe5(th_ctx *t)
{
    /* absolute: the commands also run from other directories */
    char d[400], cwd[300];
    const char *tmp = th_tmpdir();
    if (tmp[0] == '/' || !getcwd(cwd, sizeof cwd))
        snprintf(d, sizeof d, "%.300s", tmp);
    else
        snprintf(d, sizeof d, "%s/%.90s", cwd, tmp);
    char fail[600], nofit[600];
    snprintf(fail, sizeof fail, "%s/p5-fail.sh", d);
    th_put(fail, "#!/bin/sh\necho 'tpuemu: error: broken' >&2\nexit 2\n");
    snprintf(nofit, sizeof nofit, "%s/p5-nofit.sh", d);
    th_put(nofit, "#!/bin/sh\necho 'tpuemu: error: needs more HBM' >&2\n"
               "exit 3\n");
    th_cmd_result c;
    th_run(&c, "chmod +x %s %s", fail, nofit);
    clobber_cases(t, d, fail);
    command_cases(t, d);
    outcome_cases(t, d, fail, nofit);
}
