/* `tpuemu sweep`'s options: --print-commands names every file absolutely,
 * -j and --jobs, --trace's refusals, --out, and --gather. */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "emu/graph.h"
#include "emu/out/chart.h"
#include "emu/out/outfile.h"
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
    snprintf(dir, sizeof dir, "%s/sweep-cli-cmds", d);
    th_run(&c, "rm -rf %s && mkdir -p %s/sw", dir, dir);
    snprintf(p, sizeof p, "%s/sw/base.json", dir);
    th_put(p, tiny_trace);
    th_sweep_text(text, sizeof text, "base.json",
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

/* -j2 is -j 2, as make and GNU parallel spell it. */
static void jobs_cases(th_ctx *t)
{
    th_cmd_result *c = malloc(sizeof *c);
    if (!c)
        return;
    th_case(t, "sweep -j2 is -j 2");
    th_run(c, "%s sweep traces/sweeps/retinanet-partitioning.json -j2 "
              "--print-commands --out %s/sw-j2",
           th_bin(), th_tmpdir());
    TH_CHECKF(t, c->status == 0 && strstr(c->out, " run ") != NULL,
              "status %d, stderr %s", c->status, c->err);
    th_run(c, "%s sweep traces/sweeps/retinanet-partitioning.json -jx "
              "--print-commands --out %s/sw-jx",
           th_bin(), th_tmpdir());
    TH_CHECKF(t, c->status == 2, "-jx: status %d", c->status);
    free(c);
}

static void trace_option_cases(th_ctx *t, th_cmd_result *c)
{
    const char *tiny = "traces/small/tiny2d.json";
    char out[512];
    snprintf(out, sizeof out, "%s/sweep-cli-sweep", th_tmpdir());
    th_case(t, "sweep --trace from a pipe or standard input: exit 2, told "
               "to save it first; nothing written");
    th_run(c, "cat %s | %s sweep --trace - --out %s", tiny, th_bin(), out);
    TH_CHECKF(t, c->status == 2 && strstr(c->err, "regular file") &&
                     strstr(c->err, "standard input"),
              "status %d: %s", c->status, c->err);
    /* sweep refuses the FIFO without opening it, so the writer stays
     * blocked in open(): kill it and reap it, or it outlives the suite */
    th_run(c, "mkfifo %s.fifo && { cat %s > %s.fifo & w=$!; %s sweep --trace "
              "%s.fifo --out %s; s=$?; kill $w 2>/dev/null; wait $w; "
              "rm -f %s.fifo; exit $s; }",
           out, tiny, out, th_bin(), out, out, out);
    TH_CHECKF(t, c->status == 2 && strstr(c->err, "regular file"),
              "status %d: %s", c->status, c->err);
    TH_CHECKF(t, access(out, F_OK) != 0, "%s was created", out);

    th_case(t, "sweep --trace --batch 1e3: refused as run refuses it");
    th_run(c, "%s sweep --trace %s --batch 8,1e3 --out %s --print-commands",
           th_bin(), tiny, out);
    TH_CHECKF(t, c->status == 2 && strstr(c->err, "--batch") &&
                     strstr(c->err, "1e3"),
              "status %d: %s", c->status, c->err);

    th_case(t, "sweep --trace: the grid's advice in options, a leading "
               "space quoted");
    th_run(c, "%s sweep --trace %s --system v3-32 --batch 33 --out %s",
           th_bin(), tiny, out);
    TH_CHECKF(t, c->status == 2 && strstr(c->err, "--system or --batch") &&
                     !strstr(c->err, "grid") && !strstr(c->err, "\"all\""),
              "status %d: %s", c->status, c->err);
    th_run(c, "%s sweep --trace %s --system ' v3-8' --out %s", th_bin(), tiny,
           out);
    TH_CHECKF(t, c->status == 2 && strstr(c->err, "--system ' v3-8'"),
              "status %d: %s", c->status, c->err);
}

/* sweep --out: an existing directory or a new one in an existing
 * directory (exit 2 otherwise, nothing created); the printed command
 * lines name absolute paths so they run from any directory. */
static void sweep_out(th_ctx *t)
{
    th_case(t, "sweep --out: a file or a missing parent is bad usage (exit "
               "2, nothing created); --print-commands paths are absolute");
    const char *sw = "traces/sweeps/retinanet-partitioning.json";
    char f[1024], miss[1024], dir[1024];
    snprintf(f, sizeof f, "%s/sweep-out-file", th_tmpdir());
    snprintf(miss, sizeof miss, "%s/no-such-dir/x", th_tmpdir());
    snprintf(dir, sizeof dir, "%s/sweep-out-dir", th_tmpdir());
    FILE *fp = fopen(f, "w");
    if (fp)
        fclose(fp);
    th_cmd_result c;
    th_run(&c, "%s sweep %s --out %s --print-commands", th_bin(), sw, f);
    TH_CHECKF(t, c.status == 2 && strstr(c.err, "is not a directory"),
              "a file: status %d: %s", c.status, c.err);
    th_run(&c, "%s sweep %s --out %s --print-commands", th_bin(), sw, miss);
    struct stat st;
    TH_CHECKF(t, c.status == 2 && strstr(c.err, "not an existing directory") &&
                     stat(miss, &st) != 0,
              "missing parent: status %d: %s", c.status, c.err);
    /* relative --out, run from the tree: every path printed is absolute */
    th_run(&c, "cd %s && %s sweep %s/%s --out rel --print-commands",
           th_tmpdir(), th_bin_abs(), getcwd(dir, sizeof dir) ? dir : ".", sw);
    TH_CHECKF(t, c.status == 0 && strstr(c.out, " --report /") &&
                     !strstr(c.out, " rel/"),
              "status %d: %.300s %s", c.status, c.out, c.err);
}

#define TINY "traces/small/tiny2d.json"

static const char grid_pd[] =
    "\"grid\": {\"partition_dims\": [[1,1,1,1], [1,2,1,1]], \"set\": "
    "{\"hbm.bandwidth_gbs\": [450, 900]}}, \"x\": \"hbm.bandwidth_gbs\"";

static int same_file(const char *a, const char *b)
{
    size_t la = 0, lb = 0;
    char *x = th_slurp(a, &la), *y = th_slurp(b, &lb);
    int same = x && y && la == lb && memcmp(x, y, la) == 0;
    free(x);
    free(y);
    return same;
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
    th_put_sweep(sw, sizeof sw, d, "sp8g", grid_pd);
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

void th_suite_sweep_cli(th_ctx *t)
{
    th_cmd_result *c = malloc(sizeof *c);
    if (!c)
        return;
    /* absolute: the commands also run from other directories */
    const char *d = th_tmpdir_abs();
    command_cases(t, d);
    jobs_cases(t);
    trace_option_cases(t, c);
    sweep_out(t);
    gather_cases(t, c, d);
    free(c);
}
