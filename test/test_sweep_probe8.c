/* tpuemu sweep and run, probe round 8 (/work/probe/r8/REPORT.md findings
 * 6, 7, 8's last bullet, 10), each case failing before its fix:
 *
 *  - SIGTERM or SIGHUP to the sweep alone passes the signal on to the runs
 *    under way, waits for them, writes no results.csv or chart and dies
 *    of the same signal (the runs went on, orphaned, writing into the
 *    output directory after the sweep ended);
 *  - an output directory that cannot be created is exit 2 naming that
 *    directory (it was 4, naming DIR/traces);
 *  - a partitioning's trace keeps the base trace's name, so `check` of a
 *    sweep report against a plain `run` is a comparison with a note (it
 *    was refused: "reports of different traces");
 *  - --gather reads DIR/reports after the printed commands ran elsewhere
 *    and writes results.csv and the chart byte for byte as the sweep
 *    does; a missing, unreadable or foreign report is a failed run named
 *    with its command line, exit 2;
 *  - "1 chip" (run's heading, the breakdown chart's subtitle), the no-fit
 *    message's "1 activation" and a part too small for the line's unit
 *    in its own unit (it read "weights+gradients+optimizer 0.0"), and run
 *    --help's word on --no-dedup's rounding.
 * The runs are of a tiny trace (a few ms each); the signalled ones are
 * `exec sleep` stand-ins for tpuemu (--bin), so they last until
 * signalled. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "emu/out/chart.h"
#include "test/harness.h"

#define TINY "traces/small/tiny2d.json"

static const char grid_pd[] =
    "\"grid\": {\"partition_dims\": [[1,1,1,1], [1,2,1,1]], \"set\": "
    "{\"hbm.bandwidth_gbs\": [450, 900]}}, \"x\": \"hbm.bandwidth_gbs\"";

/* DIR/NAME.json, a sweep of the tiny trace (absolute path) over rest. */
static void put_sweep(char *path, size_t cap, const char *dir,
                      const char *name, const char *rest)
{
    char text[2048], cwd[1024];
    if (!getcwd(cwd, sizeof cwd))
        snprintf(cwd, sizeof cwd, ".");
    snprintf(text, sizeof text,
             "{\"format\": \"tpuemu-sweep/1\", \"name\": \"%s\", "
             "\"trace\": \"%s/" TINY "\", %s}\n",
             name, cwd, rest);
    snprintf(path, cap, "%s/%s.json", dir, name);
    th_put(path, text);
}

static int same_file(const char *a, const char *b)
{
    size_t la = 0, lb = 0;
    char *x = th_slurp(a, &la), *y = th_slurp(b, &lb);
    int same = x && y && la == lb && memcmp(x, y, la) == 0;
    free(x);
    free(y);
    return same;
}

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
    put_sweep(sw, sizeof sw, dir, "sig", grid_pd);
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
    put_sweep(sw, sizeof sw, d, "sp8ro", "\"grid\": {\"batch\": [8, 16]}");
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

static void name_cases(th_ctx *t, th_cmd_result *c, const char *d)
{
    char sw[700];
    put_sweep(sw, sizeof sw, d, "sp8name", grid_pd);
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

/* The sweep's stdout without its first line, the lines that name its
 * directory ("results: DIR/...", "chart: DIR/...") and the summary line
 * (the gather counts its failures in other words). */
static void body(const char *out, char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = 0;
    const char *line = strchr(out, '\n');
    while (line && *++line) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) + 1 : strlen(line);
        const char *sum = strstr(line, " runs: ");
        if (strncmp(line, "results: ", 9) != 0 &&
            strncmp(line, "chart: /", 8) != 0 &&
            !(sum && sum < line + len) && n + len < cap) {
            memcpy(buf + n, line, len);
            n += len;
            buf[n] = 0;
        }
        line = end;
    }
}

static void gather_cases(th_ctx *t, th_cmd_result *c, const char *d)
{
    char sw[700], a[4096], b[4096];
    put_sweep(sw, sizeof sw, d, "sp8g", grid_pd);
    th_case(t, "--gather after the printed commands ran: results.csv, chart "
               "and ranking as the sweep's own");
    th_run(c, "rm -rf %s/sp8-full %s/sp8-ext && %s sweep %s --out "
              "%s/sp8-full -j 2",
           d, d, th_bin(), sw, d);
    TH_CHECKF(t, c->status == 0, "sweep: %d %s", c->status, c->err);
    body(c->out, a, sizeof a);
    th_run(c, "%s sweep %s --out %s/sp8-ext --print-commands > "
              "%s/sp8-cmds.txt && xargs -P 2 -I{} sh -c '{} > /dev/null' "
              "< %s/sp8-cmds.txt && test ! -e %s/sp8-ext/results.csv",
           th_bin(), sw, d, d, d, d);
    TH_CHECKF(t, c->status == 0, "external runs: %d %s", c->status, c->err);
    th_run(c, "%s sweep %s --out %s/sp8-ext --gather", th_bin(), sw, d);
    TH_CHECKF(t, c->status == 0 && c->err[0] == 0 &&
                     strstr(c->out, "gathering the reports of 4 runs"),
              "gather: %d %s%s", c->status, c->out, c->err);
    char p1[700], p2[700];
    snprintf(p1, sizeof p1, "%s/sp8-full/results.csv", d);
    snprintf(p2, sizeof p2, "%s/sp8-ext/results.csv", d);
    TH_CHECK(t, same_file(p1, p2));
    snprintf(p1, sizeof p1, "%s/sp8-full/step_time.png", d);
    snprintf(p2, sizeof p2, "%s/sp8-ext/step_time.png", d);
    TH_CHECK(t, same_file(p1, p2));
    body(c->out, b, sizeof b);
    TH_CHECKF(t, strstr(a, "fastest first") && strcmp(a, b) == 0,
              "ranking differs:\n%s\n---\n%s", a, b);

    th_case(t, "--gather: a missing, a broken and a foreign report are "
               "failed runs named with their commands, exit 2");
    th_run(c, "cd %s/sp8-ext/reports && rm 0001.json && echo '{' > "
              "0002.json && cp 0000.json 0003.json && %s sweep %s --out "
              "%s/sp8-ext --gather",
           d, th_bin_abs(), sw, d);
    TH_CHECKF(t, c->status == 2, "status %d: %s", c->status, c->err);
    TH_CHECKF(t, strstr(c->err, "run 0001: no readable report") &&
                     strstr(c->err, "run 0002: no readable report") &&
                     strstr(c->err, "run 0003: no readable report (it is "
                                    "the report of another run") &&
                     strstr(c->err, "--report ") &&
                     strstr(c->err, "sp8-ext/reports/0001.json --quiet\n") &&
                     strstr(c->err, "3 of 4 runs have no readable report"),
              "stderr: %s", c->err);
    snprintf(p2, sizeof p2, "%s/sp8-ext/results.csv", d);
    char *csv = th_slurp(p2, NULL);
    TH_CHECKF(t, csv && strstr(csv, "\n0001,1x1x1x1,900,,,") &&
                     strstr(csv, "\n0000,1x1x1x1,450,0,1,"),
              "csv: %s", csv ? csv : "(none)");
    free(csv);

    th_case(t, "--gather takes no --jobs or --print-commands, needs "
               "DIR/reports");
    th_run(c, "%s sweep %s --out %s/sp8-ext --gather -j 2", th_bin(), sw, d);
    TH_CHECKF(t, c->status == 2, "-j: %d", c->status);
    th_run(c, "%s sweep %s --out %s/sp8-ext --gather --print-commands",
           th_bin(), sw, d);
    TH_CHECKF(t, c->status == 2, "--print-commands: %d", c->status);
    th_run(c, "%s sweep %s --out %s/sp8-none --gather", th_bin(), sw, d);
    TH_CHECKF(t, c->status == 2 && strstr(c->err, "sp8-none/reports"),
              "no reports: %d %s", c->status, c->err);
    th_run(c, "%s sweep --help", th_bin());
    TH_CHECK(t, strstr(c->out, "--gather") != NULL);
}

/* 1 when s, drawn at (x, y) at scale 1 in colour col, is what the image
 * holds there (test_chart_text's check). */
static int text_at(const chart_image *im, int x, int y, const char *s,
                   uint32_t col)
{
    return th_text_at(im->rgb, im->w, im->h, x, y, s, col);
}

static void run_text_cases(th_ctx *t, th_cmd_result *c)
{
    th_case(t, "run on v3-2: '1 chip, 2 cores'");
    th_run(c, "%s run %s --system v3-2", th_bin(), TINY);
    TH_CHECKF(t, c->status == 0 && strstr(c->out, ": 1 chip, 2 cores, "),
              "%s", c->out);

    th_case(t, "the breakdown chart's subtitle: '2 cores on 1 chip'");
    static const double cat[CAT_COUNT] = {1e-3, 2e-4, 3e-4, 0, 1e-4, 0};
    emu_result r;
    th_result_make(&r, "sp8", "v3-2", 2, 1, 2, cat, NULL);
    chart_image im = {0};
    tpu_error err = {0};
    if (TH_CHECKF(t, chart_breakdown_image(&r, &im, 1000, 400, &err) ==
                         TPU_OK,
                  "%s", err.msg)) {
        int found = 0;
        for (int y = 14; y < 60 && !found; y++)
            found = text_at(&im, 20, y, "v3-2, 2 cores on 1 chip,",
                            0x606060);
        TH_CHECK(t, found);
        chart_image_free(&im);
    }
    emu_result_free(&r);

    th_case(t, "no-fit message on a 1 MiB core: '1 activation', no 0.0 "
               "part");
    th_run(c, "%s run %s --set hbm.capacity_gib=0.001", th_bin(), TINY);
    TH_CHECKF(t, c->status == 3 &&
                     strstr(c->err, "after recomputing 1 activation (") &&
                     strstr(c->err, "weights+gradients+optimizer ") &&
                     !strstr(c->err, "optimizer 0.0,") &&
                     strstr(c->err, " KiB, activations kept for backward ") &&
                     strstr(c->err, " MiB, workspace "),
              "status %d: %s", c->status, c->err);

    th_case(t, "a no-fit message of GiB figures is as it was");
    th_run(c, "%s run traces/retinanet-2560-v3-8.json", th_bin());
    TH_CHECKF(t, c->status == 3 &&
                     strstr(c->err, "(weights+gradients+optimizer 0.4, "
                                    "activations kept for backward 24.8, "
                                    "workspace 4.7 GiB, after recomputing "
                                    "67 activations (8.2 GiB)"),
              "status %d: %s", c->status, c->err);

    th_case(t, "run --help: --no-dedup gives the same figures up to "
               "rounding");
    th_run(c, "%s run --help", th_bin());
    TH_CHECK(t, strstr(c->out, "same figures up to rounding") &&
                    strstr(c->out, "layers[].time_s"));
}

void th_suite_sweep_probe8(th_ctx *t)
{
    th_cmd_result *c = malloc(sizeof *c);
    if (!c)
        return;
    char d[400], cwd[300];
    const char *tmp = th_tmpdir();
    if (tmp[0] != '/' && getcwd(cwd, sizeof cwd))
        snprintf(d, sizeof d, "%s/%s", cwd, tmp);
    else
        snprintf(d, sizeof d, "%s", tmp);
    signal_cases(t, c, d);
    ro_cases(t, c, d);
    name_cases(t, c, d);
    gather_cases(t, c, d);
    run_text_cases(t, c);
    free(c);
}
