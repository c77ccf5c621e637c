/* Probe round 4 (session 6): a tpuemu file of the wrong kind is named as
 * what it is; '-' means standard input for an input and is refused, not
 * created, as an output; a valid conv_transpose with a kernel narrower than
 * its stride has Keras's output size. */
#include <stdio.h>
#include <string.h>

#include "test/harness.h"

void th_suite_probe4(th_ctx *t)
{
    static th_cmd_result c;
    char rep[512];
    snprintf(rep, sizeof rep, "%s/p4report.json", th_tmpdir());

    th_case(t, "run on a report or a sweep file, sweep on a trace: exit 2 "
               "saying what the file is (not 'unknown key')");
    th_run(&c, "%s run traces/small/tiny2d.json --report %s --quiet", th_bin(),
           rep);
    TH_CHECKF(t, c.status == 0, "%d %s", c.status, c.err);
    th_run(&c, "%s run %s", th_bin(), rep);
    TH_CHECKF(t, c.status == 2 && strstr(c.err, "format: this is a tpuemu "
                                                "report") &&
                     !strstr(c.err, "unknown key"),
              "%d %s", c.status, c.err);
    th_run(&c, "%s run traces/sweeps/retinanet-all-splits.json", th_bin());
    TH_CHECKF(t, c.status == 2 && strstr(c.err, "this is a sweep file"),
              "%d %s", c.status, c.err);
    th_run(&c, "%s sweep traces/small/tiny2d.json", th_bin());
    TH_CHECKF(t, c.status == 2 && strstr(c.err, "this is a trace") &&
                     !strstr(c.err, "unknown key"),
              "%d %s", c.status, c.err);

    th_case(t, "'-' reads the trace from standard input; as an output it is "
               "refused and no file named '-' appears");
    th_run(&c, "%s run - < traces/small/tiny2d.json | tail -1", th_bin());
    TH_CHECKF(t, c.status == 0 && strstr(c.out, "step time"), "%d %s%s",
              c.status, c.out, c.err);
    th_run(&c, "cp traces/small/tiny2d.json %s/p4.json && cd %s && %s run "
               "p4.json --report - --quiet; s=$?; test ! -e ./- && exit $s",
           th_tmpdir(), th_tmpdir(), th_bin_abs());
    TH_CHECKF(t, c.status == 2 && strstr(c.err, "'-' (standard output) is "
                                                "not an output"),
              "%d %s", c.status, c.err);

    th_case(t, "conv_transpose, valid, kernel 2 < stride 3 on 5 rows: 15 "
               "outputs as Keras (in-1) s + max(k, s), not 14; split 4 ways "
               "it computes the same bits");
    {
        static const char *const fmt =
            "{\"format\": \"tpuemu-trace/1\", \"name\": \"ct\", "
            "\"system\": \"v3-8\", \"run\": {\"mode\": \"infer\", "
            "\"global_batch\": 8, \"num_cores_per_replica\": %d%s}, "
            "\"graph\": {\"inputs\": [{\"name\": \"x\", \"shape\": "
            "[10, 5, 2]}], \"layers\": [{\"name\": \"t\", \"op\": "
            "\"conv_transpose\", \"in\": \"x\", \"filters\": 3, "
            "\"kernel\": [2, 2], \"strides\": [3, 3], \"padding\": "
            "\"valid\", \"use_bias\": true}]}}\n";
        char p1[512], p4[512];
        snprintf(p1, sizeof p1, "%s/ct1.json", th_tmpdir());
        snprintf(p4, sizeof p4, "%s/ct4.json", th_tmpdir());
        FILE *f1 = fopen(p1, "w"), *f4 = fopen(p4, "w");
        if (f1) {
            fprintf(f1, fmt, 1, "");
            fclose(f1);
        }
        if (f4) {
            fprintf(f4, fmt, 4, ", \"input_partition_dims\": [[1, 4, 1, 1], "
                                "null]");
            fclose(f4);
        }
        TH_CHECK(t, f1 && f4);
        th_run(&c, "%s run %s --functional --output-npy %s/ct1.npy && %s run "
                   "%s --functional --output-npy %s/ct4.npy && cmp %s/ct1.npy "
                   "%s/ct4.npy",
               th_bin(), p1, th_tmpdir(), th_bin(), p4, th_tmpdir(),
               th_tmpdir(), th_tmpdir());
        TH_CHECKF(t, c.status == 0 && strstr(c.out, "output of 't' "
                                                    "[8,30,15,3]"),
                  "%d %s%s", c.status, c.out, c.err);
    }
}
