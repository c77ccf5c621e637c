/* Findings of probe round 5 (a helper as new user and adversary) in the
 * run, check and view front ends, each case failing before its fix:
 *  - `run --quiet` printed %.6f: a 98 us step kept two digits, a 64 ns
 *    one printed 0.000000;
 *  - --seed, --lr and --host-mem-gib without --functional were ignored
 *    (--steps was refused); `--version extra` was accepted;
 *  - `view --size` named only the lower limit of a size it refused above
 *    8192;
 *  - the report reader took mxu_utilization 1e300 (check then compared it);
 *  - the host-memory refusal printed "limit of 0.00 GiB" for 0.0001.
 * The model findings of the round are in test_tiles and test_metamorphic,
 * the sweep's in test_sweep*.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test/harness.h"

#define TINY "traces/small/tiny2d.json"

void th_suite_probe5(th_ctx *t)
{
    static th_cmd_result c;
    char rep[512];
    snprintf(rep, sizeof rep, "%s/p5-report.json", th_tmpdir());

    th_case(t, "run --quiet prints the step time to 9 significant digits, "
               "the report's value");
    th_run(&c, "%s run %s --quiet --report %s", th_bin(), TINY, rep);
    double quiet = atof(c.out);
    TH_CHECKF(t, c.status == 0 && quiet > 0, "exit %d: %s%s", c.status,
              c.out, c.err);
    th_run(&c, "grep -o '\"step_time_s\": [0-9.e+-]*' %s | head -1 | "
               "cut -d' ' -f2",
           rep);
    double in_report = atof(c.out);
    TH_CHECKF(t, in_report > 0 && fabs(quiet - in_report) <= 1e-8 * in_report,
              "--quiet %.12g, report %.12g", quiet, in_report);

    th_case(t, "functional-only options without --functional, and "
               "--version with an argument, are refused (exit 2)");
    static const char *const opts[] = {"--seed 3", "--lr 0.1",
                                       "--host-mem-gib 2"};
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++) {
        th_run(&c, "%s run %s %s", th_bin(), TINY, opts[i]);
        TH_CHECKF(t, c.status == 2 && strstr(c.err, "--functional") &&
                         c.out[0] == 0,
                  "%s: exit %d: %s", opts[i], c.status, c.err);
    }
    th_run(&c, "%s run %s --functional --seed 3 --quiet", th_bin(), TINY);
    TH_CHECKF(t, c.status == 0, "with --functional: exit %d: %s", c.status,
              c.err);
    th_run(&c, "%s --version extra", th_bin());
    TH_CHECKF(t, c.status == 2 && strstr(c.err, "'extra'") && c.out[0] == 0,
              "--version extra: exit %d: %s%s", c.status, c.out, c.err);
    th_run(&c, "%s --version", th_bin());
    TH_CHECKF(t, c.status == 0 && strncmp(c.out, "tpuemu ", 7) == 0,
              "--version: exit %d: %s", c.status, c.out);

    th_case(t, "view --size names both limits when it refuses a size");
    th_run(&c, "SDL_VIDEODRIVER=dummy %s view %s --size 16384x400 "
               "--screenshot %s/p5.png",
           th_bin(), TINY, th_tmpdir());
    TH_CHECKF(t, c.status == 2 && strstr(c.err, "8192x8192") &&
                     strstr(c.err, "640x400"),
              "exit %d: %s", c.status, c.err);

    th_case(t, "the report reader refuses an MXU utilisation above 1, "
               "naming its path");
    th_run(&c, "sed -i '0,/\"mxu_utilization\": [0-9.e+-]*/s//"
               "\"mxu_utilization\": 1e300/' %s && %s check --baseline %s %s",
           rep, th_bin(), rep, rep);
    TH_CHECKF(t, c.status == 2 &&
                     strstr(c.err, "per_core[0].mxu_utilization: 1e+300 is "
                                   "above 1"),
              "exit %d: %s", c.status, c.err);

    th_case(t, "the functional host-memory refusal prints a small limit "
               "as given");
    th_run(&c, "%s run %s --functional --host-mem-gib 0.0001", th_bin(), TINY);
    TH_CHECKF(t, c.status == 2 && strstr(c.err, "limit of 0.0001 GiB"),
              "exit %d: %s", c.status, c.err);
}
