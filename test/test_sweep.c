/* tpuemu sweep: a grid expands into the right runs, one deterministic
 * command line each; partitionings get their own traces; runs execute in
 * parallel and gather into a CSV where a run that does not fit is a row
 * with fits=0.  The runs here use a stand-in binary (--bin) that copies a
 * prepared report, so the machinery is tested without the pod engine.
 * A bad sweep (file, trace, --set, grid point, --bin) is refused with one
 * error line before anything is written or run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/report.h"
#include "test/harness.h"

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
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

/* The sweep file body: format, name, trace, then `rest`. */
static void write_sweep(const char *path, const char *trace, const char *rest)
{
    char text[8192];
    snprintf(text, sizeof text,
             "{\"format\": \"tpuemu-sweep/1\", \"name\": \"v\", "
             "\"trace\": \"%s\", %s}\n",
             trace, rest);
    write_text(path, text);
}

/* A consistent v3-8 report (the reader checks it as it checks any). */
static void make_report(const char *path)
{
    emu_result r;
    memset(&r, 0, sizeof r);
    snprintf(r.trace, sizeof r.trace, "tiny");
    snprintf(r.system, sizeof r.system, "v3-8");
    r.gen = 3;
    r.chips = 4;
    r.cores = 8;
    r.dim_x = 2;
    r.dim_y = 2;
    r.train = 1;
    r.global_batch = 32;
    r.cores_per_replica = 1;
    r.replicas = 8;
    r.fits = 1;
    r.step_time_s = 0.25;
    r.per_core = calloc(8, sizeof *r.per_core);
    for (int i = 0; r.per_core && i < 8; i++) {
        r.per_core[i].core = i;
        r.per_core[i].chip = i / 2;
        r.per_core[i].replica = i;
        r.per_core[i].step_time_s = 0.25 - 0.005 * i;
        r.per_core[i].breakdown_s[CAT_MXU] = 0.2;
        r.per_core[i].breakdown_s[CAT_IDLE] = 0.05 - 0.005 * i;
    }
    tpu_error err = {0};
    report_write(&r, path, &err);
    emu_result_free(&r);
}

/* The ranking's marks, on real runs of traces/small/tiny2d.json (16
 * examples, microseconds per step). */
static void rank_marks(th_ctx *t, th_cmd_result *c, const char *d)
{
    th_case(t, "the ranking marks a run whose step range overlaps the "
               "winner's with the --set that reorders them, and that --set "
               "does; runs far apart are not marked");
    /* one split on two slices: v3-32's interconnect is what separates
     * them, and it is unconfirmed */
    th_run(c, "%s sweep --trace traces/small/tiny2d.json --system "
              "v3-8,v3-32 --partition 1,2,1,1 --out %s/mk -j 2",
           th_bin(), d);
    const char *win = strstr(c->out, "\n0000 ");
    const char *mk = strstr(c->out, "\n0001 ");
    const char *set = mk ? strstr(mk, "~ not distinguishable: --set ") : NULL;
    const char *eol = mk ? strchr(mk + 1, '\n') : NULL;
    TH_CHECKF(t, c->status == 0 && strstr(c->out, "step range ms") && win &&
                     mk && win < mk && set && set < eol &&
                     strstr(set, " puts it first"),
              "status %d: %s%s", c->status, c->out, c->err);
    char kv[128] = "";
    if (set)
        sscanf(set + strlen("~ not distinguishable: --set "), "%127s", kv);
    /* the winner (v3-8) and the marked run (v3-32) with that one value:
     * the marked one is now the faster (the same 16 examples) */
    double step[2] = {0, 0};
    static const char *const sys[2] = {"v3-8", "v3-32"};
    for (int i = 0; i < 2 && kv[0]; i++) {
        th_run(c, "%s run traces/small/tiny2d.json --system %s --partition "
                  "1,2,1,1 --set %s --quiet --no-range",
               th_bin(), sys[i], kv);
        step[i] = c->status == 0 ? atof(c->out) : 0;
    }
    TH_CHECKF(t, step[0] > 0 && step[1] > 0 && step[1] < step[0],
              "--set %s: v3-8 %g s, v3-32 %g s", kv, step[0], step[1]);
    /* 16 and 512 examples: 512 is far ahead whatever the assumptions */
    th_run(c, "%s sweep --trace traces/small/tiny2d.json --batch 16,512 "
              "--partition 1,1,1,1 --out %s/far -j 2",
           th_bin(), d);
    TH_CHECKF(t, c->status == 0 && strstr(c->out, "step range ms") &&
                     strstr(c->out, "per chip first") &&
                     !strstr(c->out, "not distinguishable"),
              "status %d: %s%s", c->status, c->out, c->err);
    /* without ranges (--no-range, passed on to the runs): no column, no
     * mark */
    th_run(c, "%s sweep --trace traces/small/tiny2d.json --system "
              "v3-8,v3-32 --partition 1,2,1,1 --out %s/mk -j 2 --no-range "
              "&& cat %s/mk/commands.txt",
           th_bin(), d, d);
    TH_CHECKF(t, c->status == 0 && !strstr(c->out, "step range ms") &&
                     !strstr(c->out, "not distinguishable") &&
                     strstr(c->out, "--quiet --no-range\n"),
              "status %d: %s%s", c->status, c->out, c->err);
}

void th_suite_sweep(th_ctx *t)
{
    const char *d = th_tmpdir();
    char trace[512], sw[512], fake[512], rep[512], out[512];
    th_cmd_result c;

    snprintf(trace, sizeof trace, "%s/sweep-base.json", d);
    write_text(trace,
               "{\"format\": \"tpuemu-trace/1\", \"name\": \"tiny\", "
               "\"system\": \"v3-8\", \"run\": {\"mode\": \"train\", "
               "\"global_batch\": 32, \"num_cores_per_replica\": 1, "
               "\"input_partition_dims\": [[1, 1, 1, 1], null]}, "
               "\"reference\": {\"step_time_s\": 1, \"source\": \"x\"}, "
               "\"graph\": {\"inputs\": [{\"name\": \"image\", \"shape\": "
               "[64, 64, 3]}], \"layers\": [{\"name\": \"c\", \"op\": "
               "\"conv\", \"in\": \"image\", \"filters\": 8, \"kernel\": "
               "[3, 3]}]}}\n");
    snprintf(sw, sizeof sw, "%s/grid.json", d);
    /* 3 partitionings x 2 systems x 2 values of one key = 12 runs. */
    write_text(sw, "{\"format\": \"tpuemu-sweep/1\", \"name\": \"grid\", "
                   "\"trace\": \"sweep-base.json\", \"grid\": {"
                   "\"partition_dims\": [[1,1,1,1], [1,2,1,1], [1,2,2,1]],"
                   "\"system\": [\"v3-8\", \"v3-32\"], "
                   "\"set\": {\"hbm.bandwidth_gbs\": [900, 2.5]}}}\n");
    snprintf(out, sizeof out, "%s/grid-out", d);

    th_case(t, "--print-commands: one line per grid point, in order");
    th_run(&c, "%s sweep %s --print-commands --out %s", th_bin(), sw, out);
    TH_CHECKF(t, c.status == 0, "status %d: %s", c.status, c.err);
    TH_CHECKF(t, count_lines(c.out) == 12, "lines: %d\n%s", count_lines(c.out),
              c.out);
    /* Last axis fastest: run 1 differs from run 0 in the --set value. */
    char *l1 = strchr(c.out, '\n');
    TH_CHECK(t, strstr(c.out, "--set hbm.bandwidth_gbs=900 --report") &&
                    l1 && strstr(l1, "--set hbm.bandwidth_gbs=2.5 --report"));
    TH_CHECK(t, strstr(c.out, "/traces/sweep-base-pd1x2x2x1.json --system "
                              "v3-32") != NULL);
    TH_CHECK(t, strstr(c.out, "/reports/0011.json --quiet\n") != NULL);

    th_case(t, "--print-commands is deterministic");
    {
        char first[65536];
        memcpy(first, c.out, sizeof first);
        th_run(&c, "%s sweep %s --print-commands --out %s", th_bin(), sw, out);
        TH_CHECK(t, strcmp(first, c.out) == 0);
    }

    th_case(t, "partitionings get a trace with num_cores_per_replica");
    th_run(&c, "grep -c '\"num_cores_per_replica\":.4' "
               "%s/traces/sweep-base-pd1x2x2x1.json && "
               "grep -c reference %s/traces/sweep-base-pd1x2x2x1.json",
           out, out);
    TH_CHECKF(t, strncmp(c.out, "1\n0\n", 4) == 0, "grep: %s", c.out);

    th_case(t, "\"partition_dims\": \"all\": every split of 1-16 cores "
               "per replica, each where the grid's systems and batches "
               "accept it");
    {
        char aw[512];
        snprintf(aw, sizeof aw, "%s/all.json", d);
        /* 64x64 on v3-8: at most 8 cores per replica, so 1 + 2 + 3 + 4
         * splits of H and W, by cores then H first; v3-32 runs those and
         * the 5 of 16 cores */
        write_sweep(aw, "sweep-base.json",
                    "\"grid\": {\"partition_dims\": \"all\", "
                    "\"system\": [\"v3-8\", \"v3-32\"]}");
        th_run(&c, "%s sweep %s --print-commands --out %s/all-out", th_bin(),
               aw, d);
        TH_CHECKF(t, c.status == 0 && count_lines(c.out) == 25,
                  "status %d, %d lines: %s%s", c.status, count_lines(c.out),
                  c.out, c.err);
        static const char *const order[] = {"pd1x1x1x1", "pd1x2x1x1",
                                            "pd1x1x2x1", "pd1x4x1x1",
                                            "pd1x2x2x1", "pd1x1x4x1",
                                            "pd1x8x1x1", "pd1x1x8x1"};
        const char *at = c.out;
        for (size_t i = 0; i < sizeof order / sizeof order[0] && at; i++)
            at = strstr(at, order[i]);
        TH_CHECKF(t, at != NULL, "order: %s", c.out);
        /* batch 4 on v3-32: 32/P replicas must divide 4, so P >= 8 */
        write_sweep(aw, "sweep-base.json",
                    "\"grid\": {\"partition_dims\": \"all\", "
                    "\"system\": [\"v3-32\"], \"batch\": [4]}");
        th_run(&c, "%s sweep %s --print-commands --out %s/all-out", th_bin(),
               aw, d);
        TH_CHECKF(t, c.status == 0 && count_lines(c.out) == 9 &&
                         !strstr(c.out, "pd1x4x1x1"),
                  "status %d, %d lines: %s%s", c.status, count_lines(c.out),
                  c.out, c.err);
        write_sweep(aw, "sweep-base.json",
                    "\"grid\": {\"partition_dims\": \"some\"}");
        th_run(&c, "%s sweep %s --print-commands --out %s/all-out", th_bin(),
               aw, d);
        TH_CHECKF(t, c.status == 2 && strstr(c.err, "grid.partition_dims") &&
                         error_lines(c.err) == 1,
                  "status %d: %s", c.status, c.err);
        /* a bad system is named as without "all", not as "no split" */
        write_sweep(aw, "sweep-base.json",
                    "\"grid\": {\"partition_dims\": \"all\", "
                    "\"system\": [\"v3-8\", \"v9-8\"]}");
        th_run(&c, "%s sweep %s --print-commands --out %s/all-out", th_bin(),
               aw, d);
        TH_CHECKF(t, c.status == 2 && strstr(c.err, "grid.system[1]: unknown"),
                  "status %d: %s", c.status, c.err);
        /* two inputs, no input_partition_dims: the split applies to both,
         * and a split finer than the small second input is left out */
        {
            char t2[512], s2[512];
            snprintf(t2, sizeof t2, "%s/two-in.json", d);
            write_text(t2,
                       "{\"format\": \"tpuemu-trace/1\", \"name\": \"two\", "
                       "\"system\": \"v3-8\", \"run\": {\"mode\": \"infer\", "
                       "\"global_batch\": 32}, \"graph\": {\"inputs\": ["
                       "{\"name\": \"image\", \"shape\": [32, 32, 3]}, "
                       "{\"name\": \"mask\", \"shape\": [2, 32, 1]}], "
                       "\"layers\": [{\"name\": \"c\", \"op\": \"conv\", "
                       "\"in\": \"image\", \"filters\": 8, \"kernel\": [3, 3]}, "
                       "{\"name\": \"m\", \"op\": \"conv\", \"in\": \"mask\", "
                       "\"filters\": 8, \"kernel\": [1, 1]}]}}\n");
            snprintf(s2, sizeof s2, "%s/two-in-sweep.json", d);
            write_sweep(s2, "two-in.json",
                        "\"grid\": {\"partition_dims\": \"all\"}");
            th_run(&c, "%s sweep %s --print-commands --out %s/two-out",
                   th_bin(), s2, d);
            /* H of the mask is 2: H factors 1 and 2 only; W up to 8 */
            TH_CHECKF(t, c.status == 0 && count_lines(c.out) == 7 &&
                             !strstr(c.out, "pd1x4x1x1") &&
                             strstr(c.out, "pd1x1x8x1"),
                      "status %d, %d lines: %s%s", c.status,
                      count_lines(c.out), c.out, c.err);
        }
        /* nothing valid: batch 1 on v3-32 needs 32 cores per replica */
        write_sweep(aw, "sweep-base.json",
                    "\"grid\": {\"partition_dims\": \"all\", "
                    "\"system\": [\"v3-32\"], \"batch\": [1]}");
        th_run(&c, "%s sweep %s --print-commands --out %s/all-out", th_bin(),
               aw, d);
        TH_CHECKF(t, c.status == 2 && strstr(c.err, "no split") &&
                         strstr(c.err, "on v3-32 at batch 1"),
                  "status %d: %s", c.status, c.err);
        /* several systems: each split runs where it is valid, and a note
         * per system on stderr says which it does not run there, and why;
         * stdout stays one run a line.  Batch 8 on v3-32 needs 4 or more
         * cores per replica, v3-8 takes at most 8: of the 15 splits, v3-8
         * runs 10 and v3-32 12. */
        write_sweep(aw, "sweep-base.json",
                    "\"grid\": {\"partition_dims\": \"all\", "
                    "\"system\": [\"v3-8\", \"v3-32\"], \"batch\": [8]}");
        th_run(&c, "%s sweep %s --print-commands --out %s/all-out", th_bin(),
               aw, d);
        TH_CHECKF(t, c.status == 0 && count_lines(c.out) == 22 &&
                         strstr(c.err, "on v3-8 at batch 8, 5 of the 15 "
                                       "splits are not valid and not run: "
                                       "[1,16,1,1], ") &&
                         strstr(c.err, "on v3-32 at batch 8, 3 of the 15 "
                                       "splits are not valid and not run: "
                                       "[1,1,1,1], [1,2,1,1], [1,1,2,1] "
                                       "([1,1,1,1]: run.global_batch: 8 "
                                       "does not divide into 32 replicas)") &&
                         !strstr(c.out, "pd1x16x1x1.json --system v3-8 ") &&
                         !strstr(c.out, "pd1x1x1x1.json --system v3-32 ") &&
                         strstr(c.out, "pd1x1x1x1.json --system v3-8 ") &&
                         strstr(c.out, "pd1x16x1x1.json --system v3-32 "),
                  "status %d, %d lines: %s%s", c.status, count_lines(c.out),
                  c.out, c.err);
        /* each system has splits, none shared by all four pairs: 16 cores
         * per replica at batch 2 on v3-32, at most 8 on v3-8; each pair
         * runs its own (7 + 10 + 5 + 12) */
        write_sweep(aw, "sweep-base.json",
                    "\"grid\": {\"partition_dims\": \"all\", "
                    "\"system\": [\"v3-8\", \"v3-32\"], \"batch\": [2, 8]}");
        th_run(&c, "%s sweep %s --print-commands --out %s/all-out", th_bin(),
               aw, d);
        TH_CHECKF(t, c.status == 0 && count_lines(c.out) == 34 &&
                         strstr(c.err, "on v3-32 at batch 2, 10 of the 15 ") &&
                         error_lines(c.err) == 0,
                  "status %d, %d lines: %s", c.status, count_lines(c.out),
                  c.err);
    }

    th_case(t, "\"scale_batch\": true keeps the base trace's examples per "
               "core on every system (weak scaling); refused with a batch "
               "axis or where the batch would not be whole");
    {
        char sb[512];
        snprintf(sb, sizeof sb, "%s/scale.json", d);
        /* base: v3-8, global batch 32, so 4 per core */
        write_sweep(sb, "sweep-base.json",
                    "\"scale_batch\": true, \"grid\": {\"system\": "
                    "[\"v3-2\", \"v3-8\", \"v3-32\"]}");
        th_run(&c, "%s sweep %s --print-commands --out %s/scale-out", th_bin(),
               sb, d);
        TH_CHECKF(t, c.status == 0 && count_lines(c.out) == 3 &&
                         strstr(c.out, "--system v3-2 --batch 8 ") &&
                         strstr(c.out, "--system v3-8 --batch 32 ") &&
                         strstr(c.out, "--system v3-32 --batch 128 "),
                  "status %d: %s%s", c.status, c.out, c.err);
        write_sweep(sb, "sweep-base.json",
                    "\"scale_batch\": true, \"grid\": {\"system\": "
                    "[\"v3-8\"], \"batch\": [8]}");
        th_run(&c, "%s sweep %s --print-commands --out %s/scale-out", th_bin(),
               sb, d);
        TH_CHECKF(t, c.status == 2 && strstr(c.err, ": scale_batch: ") &&
                         error_lines(c.err) == 1,
                  "with a batch axis: status %d: %s", c.status, c.err);
        write_sweep(sb, "sweep-base.json",
                    "\"scale_batch\": 1, \"grid\": {\"system\": "
                    "[\"v3-8\"]}");
        th_run(&c, "%s sweep %s --print-commands --out %s/scale-out", th_bin(),
               sb, d);
        TH_CHECKF(t, c.status == 2 && strstr(c.err, "true or false"),
                  "not a boolean: status %d: %s", c.status, c.err);
        /* 2 examples on v3-8 are a quarter per core: on v3-2, half an
         * example */
        char tb[512];
        snprintf(tb, sizeof tb, "%s/two-ex.json", d);
        write_text(tb,
                   "{\"format\": \"tpuemu-trace/1\", \"name\": \"t2\", "
                   "\"system\": \"v3-8\", \"run\": {\"mode\": \"infer\", "
                   "\"global_batch\": 2, \"num_cores_per_replica\": 4, "
                   "\"input_partition_dims\": [[1, 2, 2, 1], null]}, "
                   "\"graph\": {\"inputs\": [{\"name\": \"image\", "
                   "\"shape\": [16, 16, 3]}], \"layers\": [{\"name\": "
                   "\"c\", \"op\": \"conv\", \"in\": \"image\", "
                   "\"filters\": 8, \"kernel\": [3, 3]}]}}\n");
        write_sweep(sb, "two-ex.json",
                    "\"scale_batch\": true, \"grid\": {\"system\": "
                    "[\"v3-8\", \"v3-2\"]}");
        th_run(&c, "%s sweep %s --print-commands --out %s/scale-out", th_bin(),
               sb, d);
        TH_CHECKF(t, c.status == 2 && strstr(c.err, "grid.system[1]") &&
                         strstr(c.err, "not a whole batch"),
                  "fractional: status %d: %s", c.status, c.err);
    }

    th_case(t, "bad sweep files: exit 2 naming the JSON path");
    static const char *const broken[][2] = {
        {"{\"format\": \"tpuemu-sweep/1\", \"name\": \"b\", \"trace\": "
         "\"sweep-base.json\", \"grid\": {\"partition_dims\": [[1,0,1,1]]}}",
         "grid.partition_dims[0]"},
        {"{\"format\": \"tpuemu-sweep/1\", \"name\": \"b\", \"trace\": "
         "\"sweep-base.json\", \"grid\": {\"system\": [\"v9-8\"]}}",
         "grid.system[0]"},
        {"{\"format\": \"tpuemu-sweep/1\", \"name\": \"b\", \"trace\": "
         "\"sweep-base.json\", \"grid\": {\"colour\": [1]}}",
         "grid.colour"},
        {"{\"format\": \"tpuemu-sweep/1\", \"name\": \"b\", \"trace\": "
         "\"sweep-base.json\", \"grid\": {\"batch\": [8]}, \"x\": \"y\"}",
         ": x:"},
        {"{\"format\": \"tpuemu-sweep/1\", \"name\": \"b/c\"}", "name"},
    };
    for (size_t i = 0; i < sizeof broken / sizeof broken[0]; i++) {
        char bp[512];
        snprintf(bp, sizeof bp, "%s/broken-sweep%zu.json", d, i);
        write_text(bp, broken[i][0]);
        th_run(&c, "%s sweep %s --print-commands --out %s/b", th_bin(), bp, d);
        TH_CHECKF(t, c.status == 2 && strstr(c.err, broken[i][1]),
                  "case %zu: status %d: %s", i, c.status, c.err);
    }

    th_case(t, "runs in parallel, gathers CSV; exit 3 is a fits=0 row");
    snprintf(rep, sizeof rep, "%s/sweep-report.json", d);
    make_report(rep);
    snprintf(fake, sizeof fake, "%s/fake-tpuemu.sh", d);
    {
        /* Writes the prepared report to --report; "does not fit" (exit 3,
         * no report) for the 2.5 GB/s points. */
        char script[2048];
        snprintf(script, sizeof script,
                 "#!/bin/sh\n"
                 "out=\n"
                 "while [ $# -gt 0 ]; do\n"
                 "  case \"$1\" in --report) out=$2; shift;; "
                 "hbm.bandwidth_gbs=2.5) nofit=1;; esac\n"
                 "  shift\n"
                 "done\n"
                 "[ -n \"$nofit\" ] && { echo 'tpuemu: error: needs more' >&2;"
                 " exit 3; }\n"
                 "cp '%s' \"$out\"\n",
                 rep);
        write_text(fake, script);
    }
    th_run(&c, "chmod +x %s && %s sweep %s --jobs 3 --bin %s --out %s", fake,
           th_bin(), sw, fake, out);
    TH_CHECKF(t, c.status == 0, "status %d: %s\n%s", c.status, c.out, c.err);
    TH_CHECKF(t, strstr(c.out, "12 runs: 6 done, 6 do not fit, 0 failed"),
              "out: %s", c.out);
    th_run(&c, "cat %s/results.csv", out);
    TH_CHECKF(t, count_lines(c.out) == 13, "csv: %s", c.out);
    TH_CHECKF(t, strncmp(c.out, "run,partition_dims,system,hbm.bandwidth_gbs,"
                                "exit,fits,step_time_s,",
                         60) == 0,
              "header: %s", c.out);
    TH_CHECKF(t, strstr(c.out, "\n0000,1x1x1x1,v3-8,900,0,1,0.25,1,8,0,0.2,"),
              "row 0: %s", c.out);
    TH_CHECKF(t, strstr(c.out, "\n0011,1x2x2x1,v3-32,2.5,3,0,"), "row 11: %s",
              c.out);
    th_run(&c, "chmod +x %s && %s sweep %s --jobs 3 --bin %s --out %s", fake,
           th_bin(), sw, fake, out);
    /* the ranking: the runs that fit, fastest first (ties in run order) */
    {
        const char *rk =
            strstr(c.out, "fastest first (examples per second; 6 of 12 "
                          "runs fit)");
        const char *row = rk ? strstr(rk, "\n0000 ") : NULL;
        TH_CHECKF(t, rk && row && strstr(row, "250.000") &&
                         strstr(row, "128.0"),
                  "ranking: %s", c.out);
    }
    th_run(&c, "test -s %s/step_time.png && test -s %s/commands.txt && "
               "test -s %s/logs/0001.log",
           out, out, out);
    TH_CHECK(t, c.status == 0);

    th_case(t, "a real run that does not fit: fits=0, its step and "
               "categories empty, its HBM need kept");
    {
        char cw[512];
        snprintf(cw, sizeof cw, "%s/cap.json", d);
        write_sweep(cw, "sweep-base.json",
                    "\"grid\": {\"set\": {\"hbm.capacity_gib\": "
                    "[0.001, 16]}}");
        th_run(&c, "%s sweep %s --jobs 2 --out %s/cap-out && "
                   "cat %s/cap-out/results.csv",
               th_bin(), cw, d, d);
        /* run,hbm.capacity_gib,exit,fits,step,cpr,replicas,slowest,6 cats,
         * hbm_needed,global_batch */
        static const char row0[] = "\n0000,0.001,3,0,,1,8,,,,,,,,";
        const char *r0 = strstr(c.out, row0);
        /* the step that fits: some tens of microseconds, which %.8g
         * may print as 5.8778696e-05 */
        static const char row1[] = "\n0001,16,0,1,";
        const char *r1 = strstr(c.out, row1);
        char *after = NULL;
        double step = r1 ? strtod(r1 + sizeof row1 - 1, &after) : 0;
        /* the need that did not fit follows the empty categories */
        TH_CHECKF(t, c.status == 0 && r0 && r1 && step > 0 && step < 1 &&
                         after && *after == ',' &&
                         r0[sizeof row0 - 1] >= '1' &&
                         r0[sizeof row0 - 1] <= '9',
                  "status %d: %s%s", c.status, c.out, c.err);
    }

    th_case(t, "the ranking's columns line up in characters, not bytes");
    {
        char ut[512], uw[512];
        snprintf(ut, sizeof ut, "%s/uni-base.json", d);
        write_text(ut,
                   "{\"format\": \"tpuemu-trace/1\", \"name\": \"u\", "
                   "\"system\": \"v3-8\", \"run\": {\"mode\": \"train\", "
                   "\"global_batch\": 8}, \"graph\": {\"inputs\": [{\"name\": "
                   "\"image\", \"shape\": [16, 16, 3]}], \"layers\": ["
                   "{\"name\": \"ç1\", \"op\": \"conv\", \"in\": \"image\", "
                   "\"filters\": 8, \"kernel\": [3, 3]}, {\"name\": \"c2\", "
                   "\"op\": \"conv\", \"in\": \"ç1\", \"filters\": 8, "
                   "\"kernel\": [3, 3]}]}}\n");
        snprintf(uw, sizeof uw, "%s/uni.json", d);
        write_sweep(uw, "uni-base.json",
                    "\"grid\": {\"freeze\": [\"none\", \"ç1\", \"ç1,c2\"]}");
        th_run(&c, "%s sweep %s --jobs 2 --no-range --out %s/uni-out",
               th_bin(), uw, d);
        /* the column after the label: where "step ms" ends in the
         * header, each row's number ends (in characters) */
        const char *hd = strstr(c.out, "\nrun ");
        int ok = c.status == 0 && hd != NULL, rows = 0, want = -1;
        for (const char *ln = hd ? hd + 1 : NULL; ok && ln && *ln;) {
            const char *nl = strchr(ln, '\n');
            if (!nl || (rows > 0 && strncmp(ln, "000", 3) != 0))
                break;
            /* characters up to the end of the step time: 6th word from
             * the end of a row, 9th of the header ("step ms", "per
             * core", "per chip" and "HBM GiB" are two words each) */
            int chars = 0, fields = 0, nth = rows == 0 ? 9 : 6;
            const char *q = nl;
            while (q > ln && fields < nth) {
                q--;
                if (*q != ' ' && (q == ln || q[-1] == ' '))
                    fields++;
            }
            while (q < nl && *q != ' ')
                q++;
            for (const char *r = ln; r < q; r++)
                chars += ((unsigned char)*r & 0xC0) != 0x80;
            if (want < 0)
                want = chars;
            ok &= chars == want;
            rows++;
            ln = nl + 1;
        }
        TH_CHECKF(t, ok && rows == 4 && !strstr(c.out, "step range"),
                  "%d rows: %s%s", rows, c.out, c.err);
    }

    th_case(t, "a failing run: its status and log are named");
    write_text(fake, "#!/bin/sh\necho broken >&2\nexit 2\n");
    th_run(&c, "%s sweep %s --jobs 2 --bin %s --out %s", th_bin(), sw, fake,
           out);
    TH_CHECKF(t, c.status == 2 && strstr(c.err, "logs/0000.log") &&
                     strstr(c.out, "12 failed"),
              "status %d: %s\n%s", c.status, c.out, c.err);
    /* Refused sweeps: a stand-in binary that leaves a marker if any run
     * starts; neither it nor the output directory may appear. */
    char mark[512], mbin[512], vout[512];
    snprintf(mark, sizeof mark, "%s/sweep-ran", d);
    snprintf(mbin, sizeof mbin, "%s/marker-tpuemu.sh", d);
    snprintf(vout, sizeof vout, "%s/refused-out", d);
    {
        char script[1024];
        snprintf(script, sizeof script, "#!/bin/sh\ntouch '%s'\nexit 2\n",
                 mark);
        write_text(mbin, script);
        th_run(&c, "chmod +x %s", mbin);
    }
    char badtrace[512], dirtrace[512];
    snprintf(badtrace, sizeof badtrace, "%s/sweep-badtrace.json", d);
    /* Valid JSON, an invalid trace: kernel [0, 3]. */
    write_text(badtrace,
               "{\"format\": \"tpuemu-trace/1\", \"name\": \"bad\", "
               "\"system\": \"v3-8\", \"run\": {\"mode\": \"train\", "
               "\"global_batch\": 8, \"num_cores_per_replica\": 1}, "
               "\"graph\": {\"inputs\": [{\"name\": \"image\", \"shape\": "
               "[64, 64, 3]}], \"layers\": [{\"name\": \"c\", \"op\": "
               "\"conv\", \"in\": \"image\", \"filters\": 8, \"kernel\": "
               "[0, 3]}]}}\n");
    snprintf(dirtrace, sizeof dirtrace, "%s/sweep-dirtrace", d);
    th_run(&c, "mkdir -p %s", dirtrace);
    char keys17[2048] = "";
    {
        size_t n = 0;
        for (int k = 1; k <= 17; k++)
            n += (size_t)snprintf(keys17 + n, sizeof keys17 - n,
                                  "%s\"xla.k%02d\": [1]", k > 1 ? ", " : "",
                                  k);
    }
    char grid17[2200], gridbig[2048];
    snprintf(grid17, sizeof grid17, "\"grid\": {\"set\": {%s}}", keys17);
    {
        /* 64 batches x 64 bandwidths = 4096 is the limit; 65 x 64 is not. */
        size_t n = (size_t)snprintf(gridbig, sizeof gridbig,
                                    "\"grid\": {\"batch\": [");
        for (int k = 1; k <= 65; k++)
            n += (size_t)snprintf(gridbig + n, sizeof gridbig - n, "%s%d",
                                  k > 1 ? "," : "", 8 * k);
        n += (size_t)snprintf(gridbig + n, sizeof gridbig - n,
                              "], \"set\": {\"hbm.bandwidth_gbs\": [");
        for (int k = 1; k <= 64; k++)
            n += (size_t)snprintf(gridbig + n, sizeof gridbig - n, "%s%d",
                                  k > 1 ? "," : "", 100 * k);
        snprintf(gridbig + n, sizeof gridbig - n, "]}}");
    }
    static const char *const G = "\"grid\": {\"batch\": [8]}";
    struct {
        const char *what, *trace, *rest, *expect;
    } refused[] = {
        {"refused, nothing run: 17 axes", "sweep-base.json", grid17,
         ": grid.set.xla.k17: more than 16 axes"},
        {"refused, nothing run: a grid of more than 4096 runs", "sweep-base.json", gridbig,
         ": grid: 4160 runs (the product of the axis lengths), more than "
         "the limit of 4096"},
        {"refused, nothing run: unknown --set key", "sweep-base.json",
         "\"grid\": {\"set\": {\"nokey\": [1]}}",
         ": grid.set.nokey: unknown parameter"},
        {"refused, nothing run: --set value out of range", "sweep-base.json",
         "\"grid\": {\"set\": {\"mxu.rows\": [128, 0]}}",
         ": grid.set.mxu.rows[1]: out of range"},
        {"refused, nothing run: --set value not a number", "sweep-base.json",
         "\"grid\": {\"set\": {\"mxu.rows\": [\"abc\"]}}",
         ": grid.set.mxu.rows[0]: expected"},
        {"refused, nothing run: missing trace", "nosuch.json", G,
         ": trace: "},
        {"refused, nothing run: trace is a directory", "sweep-dirtrace", G,
         ": trace: "},
        {"refused, nothing run: trace is not JSON", "/etc/passwd", G,
         ": trace: /etc/passwd: not valid JSON"},
        {"refused, nothing run: invalid trace", "sweep-badtrace.json", G,
         ": trace: "},
        {"refused, nothing run: partition_dims of the wrong rank", "sweep-base.json",
         "\"grid\": {\"partition_dims\": [[1, 2, 1, 1], [[1, 2, 1], null]]}",
         ": grid.partition_dims[1]: run.input_partition_dims[0]"},
        {"refused, nothing run: partition_dims not dividing the system", "sweep-base.json",
         "\"grid\": {\"partition_dims\": [[1, 4, 4, 1]], "
         "\"system\": [\"v3-32\", \"v3-8\"]}",
         ": grid.partition_dims[0]: run.num_cores_per_replica: 16 does not "
         "divide the 8 cores of v3-8"},
        {"refused, nothing run: partition factor above the extent", "sweep-base.json",
         "\"grid\": {\"partition_dims\": [[1, 128, 1, 1]], "
         "\"system\": [\"v3-128\"], \"batch\": [8]}",
         ": grid.partition_dims[0]: "},
        {"refused, nothing run: batch not dividing the replicas", "sweep-base.json",
         "\"grid\": {\"batch\": [8, 12]}",
         ": grid.batch[1]: run.global_batch: 12 does not divide into 8 "
         "replicas"},
        {"refused, nothing run: duplicate axis", "sweep-base.json",
         "\"grid\": {\"batch\": [8], \"batch\": [16]}",
         ": grid.batch: duplicate key"},
        {"refused, nothing run: duplicate --set key", "sweep-base.json",
         "\"grid\": {\"set\": {\"mxu.rows\": [128], \"mxu.rows\": [64]}}",
         ": grid.set.mxu.rows: duplicate key"},
        {"refused, nothing run: duplicate top-level key", "sweep-base.json",
         "\"name\": \"w\", \"grid\": {\"batch\": [8]}", ": name: duplicate key"},
        {"refused, nothing run: unknown top-level key", "sweep-base.json",
         "\"grdi\": {\"batch\": [8]}", ": grdi: unknown key"},
        {"refused, nothing run: text after the object", "sweep-base.json",
         "\"grid\": {\"batch\": [8]}} {", "not valid JSON"},
        {"refused, nothing run: a value listed twice", "sweep-base.json",
         "\"grid\": {\"batch\": [8, 8]}", ": grid.batch[1]: the same value"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        char bp[512];
        th_case(t, refused[i].what);
        snprintf(bp, sizeof bp, "%s/refused%zu.json", d, i);
        write_sweep(bp, refused[i].trace, refused[i].rest);
        th_run(&c, "rm -rf %s %s; %s sweep %s --bin %s --out %s", vout, mark,
               th_bin(), bp, mbin, vout);
        TH_CHECKF(t, c.status == 2 && strstr(c.err, bp) &&
                         strstr(c.err, refused[i].expect) &&
                         count_lines(c.err) == 1 &&
                         strncmp(c.err, "tpuemu: error: ", 15) == 0,
                  "status %d: %s", c.status, c.err);
        th_run(&c, "test -e %s || test -e %s", vout, mark);
        TH_CHECKF(t, c.status != 0, "%s or %s left behind", vout, mark);
    }

    th_case(t, "16 axes and 4096 runs are within the limits");
    {
        char grid16[2200], bp[512];
        /* partition_dims, system, batch and 13 --set keys. */
        size_t n = (size_t)snprintf(grid16, sizeof grid16,
                                    "\"grid\": {\"partition_dims\": "
                                    "[[1,1,1,1]], \"system\": [\"v3-8\"], "
                                    "\"batch\": [8], \"set\": {");
        static const char *const keys[13][2] = {
            {"xla.remat", "1"},         {"xla.halo_copy", "1"},
            {"xla.conv_pad", "1"},      {"xla.halo_fused", "1"},
            {"xla.dw_halo", "1"},       {"xla.bn_stats_fused", "1"},
            {"xla.dw_allreduce", "1"},  {"ici.wrap", "1"},
            {"xla.conv_pad_batch", "1"}, {"mxu.rows", "128"},
            {"mxu.cols", "128"},        {"clock_hz", "9.4e8"},
            {"hbm.bandwidth_gbs", "900"}};
        for (size_t k = 0; k < 13; k++)
            n += (size_t)snprintf(grid16 + n, sizeof grid16 - n,
                                  "%s\"%s\": [%s]", k ? ", " : "",
                                  keys[k][0], keys[k][1]);
        snprintf(grid16 + n, sizeof grid16 - n, "}}");
        snprintf(bp, sizeof bp, "%s/ok16.json", d);
        write_sweep(bp, "sweep-base.json", grid16);
        th_run(&c, "%s sweep %s --print-commands --out %s", th_bin(), bp,
               vout);
        TH_CHECKF(t, c.status == 0 && count_lines(c.out) == 1,
                  "status %d: %s", c.status, c.err);
        /* The 4096-run grid: refused only for its size, never here. */
        char *cut = strstr(gridbig, ",520]");
        if (cut)
            memcpy(cut, "]    ", 5);
        snprintf(bp, sizeof bp, "%s/ok4096.json", d);
        write_sweep(bp, "sweep-base.json", gridbig);
        th_run(&c, "%s sweep %s --print-commands --out %s | wc -l", th_bin(),
               bp, vout);
        TH_CHECKF(t, c.status == 0 && atoi(c.out) == 4096, "lines %s: %s",
                  c.out, c.err);
    }

    th_case(t, "--bin is checked up front: one line, exit 2, nothing run");
    {
        char okp[512], nox[512];
        snprintf(okp, sizeof okp, "%s/bin-ok.json", d);
        write_sweep(okp, "sweep-base.json", G);
        snprintf(nox, sizeof nox, "%s/not-executable.sh", d);
        write_text(nox, "#!/bin/sh\nexit 0\n");
        const char *bins[] = {"/nonexistent/tpuemu", d, nox};
        for (size_t i = 0; i < 3; i++) {
            th_run(&c, "rm -rf %s; %s sweep %s --bin %s --out %s", vout,
                   th_bin(), okp, bins[i], vout);
            TH_CHECKF(t, c.status == 2 && count_lines(c.err) == 1 &&
                             strstr(c.err, "--bin"),
                      "%s: status %d: %s", bins[i], c.status, c.err);
            th_run(&c, "test -e %s", vout);
            TH_CHECK(t, c.status != 0);
        }

        th_case(t, "a run that exits 0 without a report: one line, its log");
        th_run(&c, "%s sweep %s --bin /bin/true --out %s", th_bin(), okp,
               vout);
        TH_CHECKF(t, c.status == 2 && error_lines(c.err) == 1 &&
                         strstr(c.err, "run 0000 exited 0 but its report "
                                       "cannot be read") &&
                         strstr(c.err, "/logs/0000.log"),
                  "status %d: %s", c.status, c.err);
        th_run(&c, "test -s %s/results.csv && ls %s | grep -c tmp", vout,
               vout);
        TH_CHECKF(t, strncmp(c.out, "0\n", 2) == 0,
                  "results.csv missing or a temporary left: %s", c.out);
    }
    rank_marks(t, &c, d);
}

