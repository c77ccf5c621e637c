/* Probe round 10 (today's features as a user and an adversary), the run
 * table's part, each failing before its fix:
 *
 *  - the core that recomputes activations (xla.remat) need not be the one
 *    that needs most HBM: an uneven split's larger shards recompute while
 *    the last one holds the peak, and run said nothing of recomputation;
 *  - "519 MiB of 0.52 GiB": the capacity is in its own unit;
 *  - an inference step holds weights, not "weights+gradients+optimizer",
 *    and has no update at its end;
 *  - the padding multiplier is printed wherever the matrix units work 1.5x
 *    the model's FLOPs or more, not only under the small-batch layout,
 *    and names that layout's switch only where the layout applies;
 *  - --layers cuts long names in the middle, so names that differ at the
 *    end stay apart;
 *  - sweep --trace: a pipe or standard input as the trace is refused with
 *    what to do (it said "changed while being read"), --batch takes whole
 *    numbers as run does ("1e3" ran batch 1000), the grid's advice speaks
 *    of options, and a value with a leading space is quoted.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test/harness.h"

static void remat_cases(th_ctx *t, th_cmd_result *c)
{
    th_case(t, "an uneven split: the recomputing cores are named, not "
               "hidden behind the core that needs most");
    th_run(c, "%s run traces/small/remat-uneven.json --set "
              "hbm.capacity_gib=0.52", th_bin());
    const char *l = strstr(c->out, "fits by recomputing ");
    int core = -1;
    const char *on = l ? strstr(l, " on core ") : NULL;
    if (on)
        core = atoi(on + 9);
    TH_CHECKF(t, c->status == 0 && l && core >= 0 && core < 15,
              "status %d, core %d: %s%s", c->status, core, c->out, c->err);
    TH_CHECKF(t, strstr(c->out, "on core 15:") != NULL,
              "the need is core 15's: %s", c->out);

    th_case(t, "the capacity in its own unit, MiB below 1 GiB");
    TH_CHECKF(t, strstr(c->out, " of 532.5 MiB on core") != NULL, "%s",
              c->out);
    th_run(c, "%s run traces/small/tiny2d.json", th_bin());
    TH_CHECKF(t, strstr(c->out, " MiB of 16 GiB on core") != NULL, "%s",
              c->out);
}

static void infer_cases(th_ctx *t, th_cmd_result *c)
{
    const char *tr = "traces/functional/conv2d.json"; /* infer */
    th_case(t, "inference: weights, no update");
    th_run(c, "%s run %s --layers 50", th_bin(), tr);
    TH_CHECKF(t, c->status == 0 && strstr(c->out, "on core 0: weights ") &&
                     !strstr(c->out, "gradients") &&
                     !strstr(c->out, "update"),
              "status %d: %s%s", c->status, c->out, c->err);
    th_run(c, "%s lower %s --timed", th_bin(), tr);
    TH_CHECKF(t, c->status == 0 && !strstr(c->out, "all-reduce and the "
                                                   "update"),
              "status %d", c->status);
}

static void padding_cases(th_ctx *t, th_cmd_result *c)
{
    th_case(t, "the multiplier without the small-batch layout: printed, "
               "without that layout's switch");
    th_run(c, "%s run traces/small/tiny2d.json --set xla.conv_pad=0",
           th_bin());
    const char *l = strstr(c->out, "the matrix units of core 0 compute ");
    double x = 0;
    TH_CHECKF(t, c->status == 0 && l &&
                     sscanf(l, "the matrix units of core 0 compute %lf",
                            &x) == 1 && x >= 1.5,
              "status %d: %s", c->status, c->out);
    TH_CHECKF(t, l && !strstr(l, "xla.conv_pad=0` times"), "%s", c->out);
}

static void name_cases(th_ctx *t, th_cmd_result *c)
{
    char path[512];
    snprintf(path, sizeof path, "%s/p10-names.json", th_tmpdir());
    th_put(path,
           "{\"format\":\"tpuemu-trace/1\",\"system\":\"v3-8\",\"run\":{"
           "\"mode\":\"infer\",\"global_batch\":8},\"graph\":{\"inputs\":[{"
           "\"name\":\"x\",\"shape\":[16,16,8]}],\"layers\":[{\"name\":"
           "\"decoder_stage1_upsample_conv_a\",\"op\":\"conv\",\"in\":\"x\","
           "\"filters\":8,\"kernel\":[3,3]},{\"name\":"
           "\"decoder_stage1_upsample_conv_b\",\"op\":\"conv\",\"in\":"
           "\"decoder_stage1_upsample_conv_a\",\"filters\":8,\"kernel\":[3,3]"
           "}]}}");
    th_case(t, "--layers: long names that differ at the end stay apart");
    th_run(c, "%s run %s --layers 2", th_bin(), path);
    const char *a = strstr(c->out, "..e_conv_a"), *b = strstr(c->out,
                                                             "..e_conv_b");
    TH_CHECKF(t, c->status == 0 && a && b, "status %d: %s%s", c->status,
              c->out, c->err);
}

static void sweep_cases(th_ctx *t, th_cmd_result *c)
{
    const char *tiny = "traces/small/tiny2d.json";
    char out[512];
    snprintf(out, sizeof out, "%s/p10-sweep", th_tmpdir());
    th_case(t, "sweep --trace from a pipe or standard input: exit 2, told "
               "to save it first; nothing written");
    th_run(c, "cat %s | %s sweep --trace - --out %s", tiny, th_bin(), out);
    TH_CHECKF(t, c->status == 2 && strstr(c->err, "regular file") &&
                     strstr(c->err, "standard input"),
              "status %d: %s", c->status, c->err);
    th_run(c, "mkfifo %s.fifo && (cat %s > %s.fifo &) && %s sweep --trace "
              "%s.fifo --out %s; s=$?; rm -f %s.fifo; exit $s",
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

void th_suite_probe10(th_ctx *t)
{
    th_cmd_result *c = malloc(sizeof *c);
    if (!c)
        return;
    remat_cases(t, c);
    infer_cases(t, c);
    padding_cases(t, c);
    name_cases(t, c);
    sweep_cases(t, c);
    free(c);
}
