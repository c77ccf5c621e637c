/* Probe round 4 (session 6), the CLI side: a tpuemu file of the wrong kind
 * is named as what it is, and '-' means standard input for an input and is
 * refused, not created, as an output. */
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
}
