/* A sweep's runs and what it writes: it never overwrites its inputs,
 * leaves no stale chart, says why no chart was drawn, passes SIGTERM and
 * SIGHUP on to its runs, names a directory it cannot create, keeps the
 * base trace's name in its traces, and quotes paths holding
 * apostrophes.  Real runs are of a tiny trace (a few ms each); failing
 * and signalled runs are shell stand-ins given as --bin. */
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "emu/graph.h"
#include "emu/out/chart.h"
#include "emu/result.h"
#include "emu/sim.h"
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
    snprintf(dir, sizeof dir, "%s/sweep-run-clob1", d);
    th_run(&c, "rm -rf %s && mkdir -p %s", dir, dir);
    snprintf(p, sizeof p, "%s/tiny.json", dir);
    th_put(p, tiny_trace);
    th_sweep_text(text, sizeof text, "tiny.json",
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
    th_run(&c, "cd %s && %s sweep ./sweep-run-clob1/commands.txt --out ./sweep-run-clob1/ "
               "--bin %s",
           d, th_bin_abs(), fail);
    TH_CHECKF(t, c.status == 2 && strstr(c.err, "is the sweep file"),
              "./ form: status %d: %s", c.status, c.err);
    TH_CHECK(t, same_text(p, text));

    th_case(t, "a base trace at DIR/reports/0000.json, through a symlink "
               "and a ./ path: refused, not overwritten");
    snprintf(dir, sizeof dir, "%s/sweep-run-clob2", d);
    th_run(&c, "rm -rf %s && mkdir -p %s/out/reports", dir, dir);
    snprintf(p, sizeof p, "%s/out/reports/0000.json", dir);
    th_put(p, tiny_trace);
    th_run(&c, "ln -s out/reports/0000.json %s/base.json", dir);
    char sw[700];
    snprintf(sw, sizeof sw, "%s/s.json", dir);
    th_sweep_text(text, sizeof text, "./base.json",
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
    th_sweep_text(text, sizeof text, "out/reports/0000.json",
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
    snprintf(dir, sizeof dir, "%s/sweep-run-clob3", d);
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
        th_sweep_text(text, sizeof text, cases[i].trace,
                   "\"grid\": {\"batch\": [8, 16]}");
        th_put(sw, text);
        th_run(&c, "%s sweep %s --out %s --bin %s", th_bin(), sw, dir, fail);
        TH_CHECKF(t, c.status == 2 && strstr(c.err, cases[i].want),
                  "case %zu: status %d: %s", i, c.status, c.err);
        TH_CHECKF(t, same_text(sw, text), "case %zu: sweep file changed", i);
    }
    /* the program the runs execute, at a variant trace's place */
    th_sweep_text(text, sizeof text, "tiny.json",
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

static void outcome_cases(th_ctx *t, const char *d, const char *fail,
                          const char *nofit)
{
    th_cmd_result c;
    char dir[600], p[900], text[1024];

    th_case(t, "every run failed: no earlier chart is left, and it says "
               "\"no run succeeded\", not \"no run fits\"");
    snprintf(dir, sizeof dir, "%s/sweep-run-stale", d);
    th_run(&c, "rm -rf %s && mkdir -p %s/out", dir, dir);
    snprintf(p, sizeof p, "%s/tiny.json", dir);
    th_put(p, tiny_trace);
    th_sweep_text(text, sizeof text, "tiny.json",
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
    TH_CHECKF(t, s && strstr(s, ",hbm_needed_bytes,global_batch,examples_per_s,"
                               "examples_per_s_per_chip,step_time_low_s,"
                               "step_time_high_s\n") &&
                     strstr(s, "\n0000,8,2,") &&
                     strstr(s, ",8,,,,\n0001,16,2,") && strstr(s, ",16,,,,\n"),
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
    th_sweep_text(text, sizeof text, "tiny.json",
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
                     strstr(s, ",hbm_needed_bytes,global_batch,") &&
                     strstr(s, "\n0001,v3-2,16,0,1,") &&
                     strstr(s, "\n0003,v3-8,16,0,1,"),
              "csv: %s", s ? s : "(none)");
    /* global_batch: the field before the last four (examples per second,
     * per chip, the step range's two ends) */
    int ok = s != NULL;
    static const char *const rows[] = {"\n0000,", "\n0001,", "\n0002,",
                                       "\n0003,"};
    static const char *const gb[] = {"8", "8", "32", "32"};
    for (int i = 0; i < 4 && ok; i++) {
        const char *r = strstr(s, rows[i]);
        const char *e = r ? strchr(r + 1, '\n') : NULL;
        const char *comma = e;
        for (int k = 0; comma && k < 5 && comma > r;)
            k += *--comma == ',';
        ok = comma && comma > r &&
             strncmp(comma + 1, gb[i], strlen(gb[i])) == 0 &&
             comma[1 + strlen(gb[i])] == ',';
        TH_CHECKF(t, ok, "row %d: %s", i, s);
    }
    free(s);
}

#define TINY "traces/small/tiny2d.json"

static const char grid_pd[] =
    "\"grid\": {\"partition_dims\": [[1,1,1,1], [1,2,1,1]], \"set\": "
    "{\"hbm.bandwidth_gbs\": [450, 900]}}, \"x\": \"hbm.bandwidth_gbs\"";

/* The sweep signalled (not its group) once both stand-in runs started:
 * its exit status as the shell sees it, whether a run outlived it, and
 * what it left. */
static void signal_case(th_ctx *t, th_cmd_result *c, const char *d,
                        const char *sig, int want)
{
    char dir[600], bin[700], sw[700];
    snprintf(dir, sizeof dir, "%s/sp8-sig-%s", d, sig);
    th_run(c, "rm -rf %s && mkdir -p %s", dir, dir);
    snprintf(bin, sizeof bin, "%s/sleeper.sh", dir);
    /* each run records its pid, then is the sleep itself */
    char script[900];
    snprintf(script, sizeof script,
             "#!/bin/sh\necho $$ >> %s/pids\nexec sleep 30\n", dir);
    th_put(bin, script);
    th_put_sweep(sw, sizeof sw, dir, "sig", grid_pd);
    th_run(c,
           "chmod +x %s && (%s sweep %s --out %s/o --bin %s -j 2 "
           "> %s/out 2> %s/err & p=$!; "
           "for i in $(seq 100); do [ $(cat %s/pids 2>/dev/null | wc -l) "
           "-ge 2 ] && break; sleep 0.05; done; "
           "kill -%s $p; wait $p; echo rc=$?; sleep 0.3; "
           "for q in $(cat %s/pids); do kill -0 $q 2>/dev/null && "
           "echo alive $q && kill -KILL $q; done; "
           "ls %s/o; cat %s/err)",
           bin, th_bin(), sw, dir, bin, dir, dir, dir, sig, dir, dir, dir);
    char rc[16];
    snprintf(rc, sizeof rc, "rc=%d\n", want);
    TH_CHECKF(t, strstr(c->out, rc) != NULL, "%s: want %s: %s", sig, rc,
              c->out);
    TH_CHECKF(t, strstr(c->out, "alive") == NULL,
              "%s: runs outlived the sweep: %s", sig, c->out);
    TH_CHECKF(t, strstr(c->out, "\nresults.csv\n") == NULL &&
                     strstr(c->out, "\nstep_time.png\n") == NULL,
              "%s: gathered after all: %s", sig, c->out);
    TH_CHECKF(t, strstr(c->out, "stopping the 2 runs under way") &&
                     strstr(c->out, "results.csv and the chart not written"),
              "%s: stderr: %s", sig, c->out);
}

static void signal_cases(th_ctx *t, th_cmd_result *c, const char *d)
{
    th_case(t, "SIGTERM to the sweep alone: runs stopped, nothing gathered, "
               "exit 143");
    signal_case(t, c, d, "TERM", 143);
    th_case(t, "SIGHUP likewise: exit 129");
    signal_case(t, c, d, "HUP", 129);
}

static void ro_cases(th_ctx *t, th_cmd_result *c, const char *d)
{
    char sw[700];
    th_put_sweep(sw, sizeof sw, d, "sp8ro", "\"grid\": {\"batch\": [8, 16]}");
    th_case(t, "an output directory that cannot be created: exit 2, named");
    /* procfs refuses every mkdir, whoever runs the test */
    th_run(c, "%s sweep %s --out /proc/tpuemu-sp8", th_bin(), sw);
    TH_CHECKF(t, c->status == 2 &&
                     strstr(c->err, "/proc/tpuemu-sp8: cannot create") &&
                     !strstr(c->err, "/traces"),
              "status %d: %s", c->status, c->err);
    th_run(c, "test -e /proc/tpuemu-sp8");
    TH_CHECK(t, c->status != 0);
    if (geteuid() != 0) { /* root writes into a read-only directory */
        th_run(c, "rm -rf %s/sp8-ro && mkdir -p %s/sp8-ro && chmod 555 "
                  "%s/sp8-ro && %s sweep %s --out %s/sp8-ro/o",
               d, d, d, th_bin(), sw, d);
        TH_CHECKF(t, c->status == 2 && strstr(c->err, "sp8-ro/o: cannot "
                                                      "create"),
                  "read-only directory: status %d: %s", c->status, c->err);
    }
}

static void trace_name_cases(th_ctx *t, th_cmd_result *c, const char *d)
{
    char sw[700];
    th_put_sweep(sw, sizeof sw, d, "sp8name", grid_pd);
    th_case(t, "a partitioning's trace keeps the trace's name; check "
               "against a plain run compares with a note");
    th_run(c, "%s sweep %s --out %s/sp8-name -j 2", th_bin(), sw, d);
    TH_CHECKF(t, c->status == 0, "sweep: status %d: %s", c->status, c->err);
    /* the top-level name: one tab in (cJSON's layout) */
    th_run(c, "cat %s/sp8-name/traces/*.json | grep -c '^\t\"name\":\t"
              "\"tiny2d\",$'; grep -c tiny2d-pd %s/sp8-name/traces/*.json "
              "%s/sp8-name/reports/*.json | grep -v ':0$'",
           d, d, d);
    TH_CHECKF(t, strcmp(c->out, "2\n") == 0, "variant names: %s", c->out);
    /* run 0001: [1,1,1,1] at 900; run 0003: [1,2,1,1] at 900 */
    th_run(c, "%s run %s --set hbm.bandwidth_gbs=900 --report "
              "%s/sp8-plain.json --quiet && %s check --baseline "
              "%s/sp8-plain.json %s/sp8-name/reports/0001.json",
           th_bin(), TINY, d, th_bin(), d, d);
    TH_CHECKF(t, c->status == 0 && strstr(c->out, "within"),
              "same split: status %d: %s%s", c->status, c->out, c->err);
    th_run(c, "%s check --baseline %s/sp8-plain.json "
              "%s/sp8-name/reports/0003.json",
           th_bin(), d, d);
    TH_CHECKF(t, c->status == 0 && strstr(c->out, "note: the runs differ") &&
                     !strstr(c->err, "different traces"),
              "other split: status %d: %s%s", c->status, c->out, c->err);
}

static void sweep_quote_cases(th_ctx *t)
{
    char dir[512], p[700];
    th_cmd_result c;
    th_case(t, "sweep: apostrophes in the sweep's directory, the trace and "
               "--out run, and the printed commands run as printed");
    snprintf(dir, sizeof dir, "%s/sweep-run-O'Brien", th_tmpdir());
    th_run(&c, "rm -rf \"%s\" && mkdir -p \"%s\" && cp %s \"%s/t'iny.json\"",
           dir, dir, TINY, dir);
    snprintf(p, sizeof p, "%s/s.json", dir);
    th_put(p, "{\"format\": \"tpuemu-sweep/1\", \"name\": \"ob\", \"trace\": "
           "\"t'iny.json\", \"grid\": {\"batch\": [8, 16]}}\n");
    th_run(&c, "%s sweep \"%s\" --out \"%s/o'ut\"", th_bin(), p, dir);
    TH_CHECKF(t, c.status == 0 && strstr(c.out, "2 done"), "exit %d: %s%s",
              c.status, c.out, c.err);
    th_run(&c, "%s sweep \"%s\" --out \"%s/o'ut2\" --print-commands > "
               "\"%s/cmds\" && sh \"%s/cmds\" && test -s \"%s/o'ut2/reports/"
               "0001.json\"",
           th_bin(), p, dir, dir, dir, dir);
    TH_CHECKF(t, c.status == 0, "exit %d: %s", c.status, c.err);
}

void th_suite_sweep_run(th_ctx *t)
{
    th_cmd_result *c = malloc(sizeof *c);
    if (!c)
        return;
    /* absolute: the commands also run from other directories */
    const char *d = th_tmpdir_abs();
    char fail[600], nofit[600];
    snprintf(fail, sizeof fail, "%s/run-fail.sh", d);
    th_put(fail, "#!/bin/sh\necho 'tpuemu: error: broken' >&2\nexit 2\n");
    snprintf(nofit, sizeof nofit, "%s/run-nofit.sh", d);
    th_put(nofit, "#!/bin/sh\necho 'tpuemu: error: needs more HBM' >&2\n"
                  "exit 3\n");
    th_run(c, "chmod +x %s %s", fail, nofit);
    clobber_cases(t, d, fail);
    outcome_cases(t, d, fail, nofit);
    signal_cases(t, c, d);
    ro_cases(t, c, d);
    trace_name_cases(t, c, d);
    sweep_quote_cases(t);
    free(c);
}
