/* tpuemu sweep over several systems: each split of "all" runs on the
 * systems it is valid on, a note per system says what it does not run
 * there, and the ranking has a second table by examples per second per
 * chip (results.csv the per-chip figure).  Real runs of
 * traces/small/tiny2d.json (16 examples, 32x32, microseconds per step),
 * with --no-range: the ranges are test_sweep's "marks" case. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "test/harness.h"

static int near(double a, double b, double rel)
{
    double d = a > b ? a - b : b - a;
    return d <= rel * (a > b ? a : b);
}

#define TINY "traces/small/tiny2d.json"

static int count_lines(const char *s)
{
    int n = 0;
    for (; s && *s; s++)
        n += *s == '\n';
    return n;
}

/* The CSV row of run `run` ("0012"), or NULL. */
static const char *csv_row(const char *csv, const char *run)
{
    char key[16];
    snprintf(key, sizeof key, "\n%s,", run);
    const char *r = csv ? strstr(csv, key) : NULL;
    return r ? r + 1 : NULL;
}

/* Field k (from 0) of the CSV line at row into buf. */
static void field(const char *row, int k, char *buf, size_t cap)
{
    buf[0] = 0;
    for (int i = 0; row && i < k; i++) {
        row = strpbrk(row, ",\n");
        if (!row || *row == '\n')
            return;
        row++;
    }
    size_t n = row ? strcspn(row, ",\n") : 0;
    if (n >= cap)
        n = cap - 1;
    if (row)
        memcpy(buf, row, n);
    buf[n] = 0;
}

/* The index of column name in the CSV header, or -1. */
static int column(const char *csv, const char *name)
{
    int k = 0;
    size_t n = strlen(name);
    for (const char *p = csv; p && *p && *p != '\n'; k++) {
        if (strncmp(p, name, n) == 0 && (p[n] == ',' || p[n] == '\n'))
            return k;
        p = strpbrk(p, ",\n");
        if (!p || *p == '\n')
            break;
        p++;
    }
    return -1;
}

/* The number in column `col` of the ranking row that starts with the
 * run number, in the table that starts at tab (columns: run, the swept
 * cells, then the figures; col counts from the first figure). */
static double rank_figure(const char *row, int swept, int col)
{
    const char *p = row;
    for (int w = 0; p && w < 1 + swept + col; w++) {
        while (*p && *p != ' ')
            p++;
        while (*p == ' ')
            p++;
    }
    return p ? atof(p) : 0;
}

static void per_system_splits(th_ctx *t, th_cmd_result *c, const char *d)
{
    th_case(t, "several systems: each split runs where it is valid, the "
               "rest named per system on stderr; the summary counts them");
    th_run(c, "rm -rf %s/sys && %s sweep --trace %s --system v3-8,v3-32 "
              "--no-range --out %s/sys -j 2",
           d, th_bin(), TINY, d);
    /* 15 splits of 32x32 over 1-16 cores: v3-8 takes none of 16 cores
     * (5), v3-32 at batch 16 none of 1 core (32 replicas of half an
     * example): 10 + 14 runs, 6 grid points not run */
    TH_CHECKF(t, c->status == 0 &&
                     strstr(c->err, "sweep: note: on v3-8 at batch 16, 5 of "
                                    "the 15 splits are not valid and not "
                                    "run: [1,16,1,1], [1,8,2,1], [1,4,4,1], "
                                    "[1,2,8,1], [1,1,16,1] ([1,16,1,1]: ") &&
                     strstr(c->err, "sweep: note: on v3-32 at batch 16, 1 of "
                                    "the 15 splits is not valid and not "
                                    "run: [1,1,1,1] ([1,1,1,1]: "
                                    "run.global_batch: 16 does not divide "
                                    "into 32 replicas)") &&
                     strstr(c->out, "sweep tiny2d: 24 runs, ") &&
                     strstr(c->out, "24 runs: 24 done, 0 do not fit, 0 "
                                    "failed; 6 grid points not run"),
              "status %d: %s%s", c->status, c->out, c->err);
    char p[1024];
    snprintf(p, sizeof p, "%s/sys/results.csv", d);
    char *csv = th_slurp(p, NULL);
    TH_CHECKF(t, csv && count_lines(csv) == 25 &&
                     !strstr(csv, ",1x16x1x1,v3-8,") &&
                     !strstr(csv, ",1x1x1x1,v3-32,") &&
                     strstr(csv, ",1x16x1x1,v3-32,") &&
                     strstr(csv, "\n0000,1x1x1x1,v3-8,"),
              "csv: %s", csv ? csv : "(none)");
    /* the grid keeps its numbering: run 0001 (1x1x1x1 on v3-32) has no
     * report, no log, no command */
    snprintf(p, sizeof p, "%s/sys/commands.txt", d);
    char *cmds = th_slurp(p, NULL);
    TH_CHECKF(t, cmds && count_lines(cmds) == 24 &&
                     !strstr(cmds, "reports/0001.json") &&
                     strstr(cmds, "reports/0003.json"),
              "commands: %s", cmds ? cmds : "(none)");
    free(cmds);

    th_case(t, "results.csv: examples per second per slice and per chip");
    {
        int ce = column(csv, "examples_per_s"),
            cc = column(csv, "examples_per_s_per_chip"),
            cs = column(csv, "step_time_s");
        char a[64], b[64], s[64];
        /* run 0000: v3-8, 4 chips; run 0003: 1x2x1x1 on v3-32, 16 chips */
        static const struct {
            const char *run;
            double chips;
        } rows[] = {{"0000", 4}, {"0003", 16}};
        int ok = csv && ce > 0 && cc > 0 && cs > 0;
        for (size_t i = 0; ok && i < sizeof rows / sizeof rows[0]; i++) {
            const char *r = csv_row(csv, rows[i].run);
            field(r, ce, a, sizeof a);
            field(r, cc, b, sizeof b);
            field(r, cs, s, sizeof s);
            double eps = atof(a), chip = atof(b), step = atof(s);
            ok = r && eps > 0 && step > 0 &&
                 near(eps, 16 / step, 1e-9) &&
                 near(chip, eps / rows[i].chips, 1e-9);
            TH_CHECKF(t, ok, "run %s: %s %s %s", rows[i].run, a, b, s);
        }
        /* no range asked for: its cells are empty */
        TH_CHECKF(t, csv && strstr(csv, ",step_time_low_s,step_time_high_s\n") &&
                         strstr(csv_row(csv, "0000"), ",,\n"),
                  "range cells: %s", csv ? csv : "");
    }
    free(csv);

    th_case(t, "the ranking: fastest first, then per chip first; the "
               "per-chip table is in order of its column");
    {
        const char *fast = strstr(c->out, "\nfastest first");
        const char *chip = strstr(c->out, "\nper chip first (examples per "
                                          "second per chip");
        TH_CHECKF(t, fast && chip && chip > fast, "%s", c->out);
        /* swept columns: partition_dims, system; figures: step ms,
         * examples/s, per core, per chip */
        double last = 1e300;
        int rows = 0, ok = chip != NULL, v38 = 0;
        const char *ln = chip ? strchr(chip + 1, '\n') : NULL;
        ln = ln ? strchr(ln + 1, '\n') : NULL; /* past the header */
        while (ok && ln && strncmp(ln + 1, "00", 2) == 0) {
            double pc = rank_figure(ln + 1, 2, 3);
            ok = pc > 0 && pc <= last;
            v38 += rows < 10 && strstr(ln + 1, " v3-8 ") != NULL &&
                   strstr(ln + 1, " v3-8 ") < strchr(ln + 1, '\n');
            last = pc;
            rows++;
            ln = strchr(ln + 1, '\n');
        }
        /* v3-8's runs have 4 times the examples per chip of v3-32's at a
         * similar step: its 10 come first */
        TH_CHECKF(t, ok && rows == 12 && v38 == 10, "%d rows, %d v3-8: %s",
                  rows, v38, chip ? chip : "");
    }
}

static void no_split_somewhere(th_ctx *t, th_cmd_result *c, const char *d)
{
    th_case(t, "a system on which no split is valid: named, nothing runs "
               "there, the others run; on none at all, exit 2");
    th_run(c, "%s sweep --trace %s --system v3-8,v3-2048 --print-commands "
              "--out %s/none",
           th_bin(), TINY, d);
    TH_CHECKF(t, c->status == 0 && count_lines(c->out) == 10 &&
                     !strstr(c->out, "v3-2048") &&
                     strstr(c->err, "on v3-2048 at batch 16 no split of the "
                                    "first input is valid") &&
                     strstr(c->err, "nothing runs there"),
              "status %d: %s%s", c->status, c->out, c->err);
    th_run(c, "%s sweep --trace %s --system v3-2048 --print-commands "
              "--out %s/none",
           th_bin(), TINY, d);
    TH_CHECKF(t, c->status == 2 && strstr(c->err, "no split") &&
                     strstr(c->err, "v3-2048"),
              "status %d: %s", c->status, c->err);

    th_case(t, "--gather over several systems reads only the runs of the "
               "grid that run");
    th_run(c, "rm -rf %s/g && %s sweep --trace %s --system v3-8,v3-32 "
              "--no-range --print-commands --out %s/g "
              "> %s/g.txt && sh -e %s/g.txt > /dev/null && %s sweep "
              "%s/g/sweep.json --gather --out %s/g",
           d, th_bin(), TINY, d, d, d, th_bin(), d, d);
    TH_CHECKF(t, c->status == 0 &&
                     strstr(c->out, "gathering the reports of 24 runs") &&
                     strstr(c->out, "24 runs: 24 done, 0 do not fit, 0 "
                                    "without a readable report; 6 grid "
                                    "points not run"),
              "status %d: %s%s", c->status, c->out, c->err);
}

void th_suite_sweep_systems(th_ctx *t)
{
    char d[512];
    snprintf(d, sizeof d, "%s/sweep-systems", th_tmpdir());
    mkdir(d, 0755);
    th_cmd_result *c = malloc(sizeof *c);
    if (!c) {
        TH_FAIL(t, "out of memory");
        return;
    }
    per_system_splits(t, c, d);
    no_split_somewhere(t, c, d);
    free(c);
}
