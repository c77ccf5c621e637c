/* tpuemu sweep: a grid expands into the right runs, one deterministic
 * command line each; partitionings get their own traces; runs execute in
 * parallel and gather into a CSV where a run that does not fit is a row
 * with fits=0.  The runs here use a stand-in binary (--bin) that copies a
 * prepared report, so the machinery is tested without the pod engine. */
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

static void make_report(const char *path)
{
    emu_result r;
    memset(&r, 0, sizeof r);
    snprintf(r.trace, sizeof r.trace, "tiny");
    snprintf(r.system, sizeof r.system, "v3-8");
    r.chips = 1;
    r.cores = 2;
    r.global_batch = 8;
    r.cores_per_replica = 1;
    r.replicas = 2;
    r.fits = 1;
    r.step_time_s = 0.25;
    r.per_core = calloc(2, sizeof *r.per_core);
    for (int i = 0; i < 2; i++) {
        r.per_core[i].core = i;
        r.per_core[i].step_time_s = 0.25 - 0.01 * i;
        r.per_core[i].breakdown_s[CAT_MXU] = 0.2;
        r.per_core[i].breakdown_s[CAT_IDLE] = 0.05 - 0.01 * i;
    }
    tpu_error err = {0};
    report_write(&r, path, &err);
    emu_result_free(&r);
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
               "\"global_batch\": 8, \"num_cores_per_replica\": 1, "
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
                   "\"set\": {\"hbm.bandwidth_gbs\": [900, 0.5]}}}\n");
    snprintf(out, sizeof out, "%s/grid-out", d);

    th_case(t, "--print-commands: one line per grid point, in order");
    th_run(&c, "%s sweep %s --print-commands --out %s", th_bin(), sw, out);
    TH_CHECKF(t, c.status == 0, "status %d: %s", c.status, c.err);
    TH_CHECKF(t, count_lines(c.out) == 12, "lines: %d\n%s", count_lines(c.out),
              c.out);
    /* Last axis fastest: run 1 differs from run 0 in the --set value. */
    char *l1 = strchr(c.out, '\n');
    TH_CHECK(t, strstr(c.out, "--set hbm.bandwidth_gbs=900 --report") &&
                    l1 && strstr(l1, "--set hbm.bandwidth_gbs=0.5 --report"));
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
         * no report) for the 0.5 GB/s points. */
        char script[2048];
        snprintf(script, sizeof script,
                 "#!/bin/sh\n"
                 "out=\n"
                 "while [ $# -gt 0 ]; do\n"
                 "  case \"$1\" in --report) out=$2; shift;; "
                 "hbm.bandwidth_gbs=0.5) nofit=1;; esac\n"
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
    TH_CHECKF(t, strstr(c.out, "\n0000,1x1x1x1,v3-8,900,0,1,0.25,1,2,0,0.2,"),
              "row 0: %s", c.out);
    TH_CHECKF(t, strstr(c.out, "\n0011,1x2x2x1,v3-32,0.5,3,0,"), "row 11: %s",
              c.out);
    th_run(&c, "test -s %s/step_time.png && test -s %s/commands.txt && "
               "test -s %s/logs/0001.log",
           out, out, out);
    TH_CHECK(t, c.status == 0);

    th_case(t, "a failing run: its status and log are named");
    write_text(fake, "#!/bin/sh\necho broken >&2\nexit 2\n");
    th_run(&c, "%s sweep %s --jobs 2 --bin %s --out %s", th_bin(), sw, fake,
           out);
    TH_CHECKF(t, c.status == 2 && strstr(c.err, "logs/0000.log") &&
                     strstr(c.out, "12 failed"),
              "status %d: %s\n%s", c.status, c.out, c.err);
}
