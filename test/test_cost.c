/* The cost model (emu/cost.c) against hand calculations: the small-batch
 * layout's multiplier on the matrix units' work, grouped and depthwise
 * convolutions, the gradients of strided and transposed convolutions, and
 * streamed products on arrays of different sizes. */
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "emu/cost.h"
#include "emu/graph.h"
#include "emu/params.h"
#include "mxu/mxu.h"
#include "test/harness.h"

static void layout_factor_cases(th_ctx *t, th_cmd_result *c)
{
    const char *unet = "traces/reference/unet3d-128-v3-8.json";
    th_case(t, "the layout's multiplier on the MXU's work is printed");
    th_run(c, "%s run %s", th_bin(), unet);
    const char *l = strstr(c->out, "the matrix units of core 0 compute ");
    double x = 0;
    TH_CHECKF(t, c->status == 0 && l &&
                     sscanf(l, "the matrix units of core 0 compute %lf", &x) ==
                         1,
              "status %d, stdout %s", c->status, c->out);
    /* 4 examples padded to 8 (2x) on 32- and 64-channel 3x3x3 layers whose
     * taps each fill 128 lanes: between 2x and the 1-channel stem's 128x */
    TH_CHECKF(t, x > 2 && x < 16, "multiplier %g", x);

    th_case(t, "no padding, no line; a full batch of 8, no line");
    th_run(c, "%s run %s --set xla.conv_pad=0", th_bin(), unet);
    TH_CHECKF(t, c->status == 0 && !strstr(c->out, "the matrix units of"),
              "status %d, stdout %s", c->status, c->out);
    th_run(c, "%s run traces/reference/retinanet-1280-v3-8.json", th_bin());
    TH_CHECKF(t, c->status == 0 && strstr(c->out, "xla.conv_pad") &&
                     !strstr(c->out, "the matrix units of"),
              "status %d, stdout %s", c->status, c->out);
}

static void factor_without_layout_cases(th_ctx *t, th_cmd_result *c)
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

/* `run` says when XLA's small-batch convolution layout priced the step
 * (the largest single modelling rule for thin or few-example layers). */
static void run_small_batch_note(th_ctx *t)
{
    th_case(t, "run names the small-batch convolution layout when it "
               "applies, with the padded batch, and not otherwise");
    th_cmd_result c;
    th_run(&c, "%s run traces/reference/unet3d-256-v3-128.json", th_bin());
    TH_CHECKF(t, c.status == 0 &&
                     strstr(c.out, "small-batch convolution layout "
                                   "(xla.conv_pad): batch 4 per "
                                   "convolution, padded to 8;"),
              "status %d: %s", c.status, c.out);
    th_run(&c, "%s run traces/reference/unet3d-256-v3-128.json --set "
               "xla.conv_pad=0", th_bin());
    TH_CHECKF(t, c.status == 0 && !strstr(c.out, "small-batch"),
              "xla.conv_pad=0: status %d: %s", c.status, c.out);
    th_run(&c, "%s run traces/resnet50-224-v3-8.json --batch 1024", th_bin());
    TH_CHECKF(t, c.status == 0 && !strstr(c.out, "small-batch"),
              "128 examples per core: status %d: %s", c.status, c.out);
}

/* A one-layer grouped conv on v3-8 at 1 example per core: C channels in
 * groups of cg, its step time with the candidate forced (0 the pick). */
static double grouped(th_ctx *t, th_cmd_result *c, int hw, long ch, long cg,
                      int cand, const char *more)
{
    char path[512], text[1024];
    snprintf(path, sizeof path, "%s/cost-g%ld-%ld.json", th_tmpdir(), ch, cg);
    snprintf(text, sizeof text,
             "{\"format\":\"tpuemu-trace/1\",\"system\":\"v3-8\",\"run\":{"
             "\"mode\":\"train\",\"global_batch\":8},\"graph\":{\"inputs\":"
             "[{\"name\":\"x\",\"shape\":[%d,%d,%ld]}],\"layers\":["
             "{\"name\":\"c\",\"op\":\"conv\",\"in\":\"x\",\"filters\":%ld,"
             "\"kernel\":[3,3],\"groups\":%ld},"
             "{\"name\":\"l\",\"op\":\"loss\",\"in\":\"c\",\"kind\":\"l2\"}"
             "]}}",
             hw, hw, ch, ch, ch / cg);
    th_put(path, text);
    th_run(c, "%s run %s --quiet --set xla.group_conv=%d %s", th_bin(), path,
           cand, more);
    TH_CHECKF(t, c->status == 0, "status %d: %s", c->status, c->err);
    return atof(c->out);
}

static void grouped_cases(th_ctx *t, th_cmd_result *c)
{
    th_case(t, "per-group products: the cost per channel does not jump "
               "with the group count (one group's weights resident)");
    double a = grouped(t, c, 8, 16384, 2, 2, "");
    double b = grouped(t, c, 8, 32768, 2, 2, "");
    /* twice the channels, twice the groups, the same work per group */
    TH_CHECKF(t, a > 0 && b > 1.5 * a && b < 2.5 * a,
              "2^14 channels %g s, 2^15 %g s (ratio %g)", a, b, b / a);

    th_case(t, "depthwise on the vector unit: the small-batch layout does "
               "not pad its elements");
    double p1 = grouped(t, c, 224, 3, 1, 3, "--set xla.conv_pad=1");
    double p0 = grouped(t, c, 224, 3, 1, 3, "--set xla.conv_pad=0");
    TH_CHECKF(t, p1 > 0 && p1 == p0, "conv_pad=1 %g s, conv_pad=0 %g s", p1,
              p0);

    th_case(t, "a depthwise-only net on the vector unit: MXU utilization 0");
    char rep[512];
    snprintf(rep, sizeof rep, "%s/cost-dw.json", th_tmpdir());
    char more[600];
    snprintf(more, sizeof more, "--report %s", rep);
    grouped(t, c, 224, 3, 1, 3, more);
    char *text = th_slurp(rep, NULL);
    const char *u = text ? strstr(text, "\"mxu_utilization\": ") : NULL;
    TH_CHECKF(t, u && atof(u + 19) == 0, "%s", u ? u : "(no report)");
    free(text);
}

static const char *const trace_head =
    "{\"format\":\"tpuemu-trace/1\",\"system\":\"v3-8\",\"run\":{";

/* core 0's MXU milliseconds in layer `name` (run --layers), -1 if absent */
static double layer_mxu_ms(const char *out, const char *name)
{
    char key[64];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *p = strstr(out, key);
    double total = -1, mxu = -1;
    if (p && sscanf(p + strlen(key), "%lf %*f%% %lf", &total, &mxu) == 2)
        return mxu;
    return -1;
}

/* 56x56 examples, 1024 on v3-8 (128 per core): a = 1x1 conv to ch
 * channels, b = k x k conv to cout (extra: more of b's keys), l2 loss */
static void ab_trace(const char *path, int ch, int cout, int k,
                     const char *extra)
{
    char text[1024];
    snprintf(text, sizeof text,
             "%s\"mode\":\"train\",\"global_batch\":1024},\"graph\":{"
             "\"inputs\":[{\"name\":\"x\",\"shape\":[56,56,%d]}],"
             "\"layers\":["
             "{\"name\":\"a\",\"op\":\"conv\",\"in\":\"x\",\"filters\":"
             "%d,\"kernel\":[1,1]},"
             "{\"name\":\"b\",\"op\":\"conv\",\"in\":\"a\",\"filters\":"
             "%d,\"kernel\":[%d,%d]%s},"
             "{\"name\":\"l\",\"op\":\"loss\",\"in\":\"b\",\"kind\":"
             "\"l2\"}]}}",
             trace_head, ch, ch, cout, k, k, extra);
    th_put(path, text);
}

static void mxu_cases(th_ctx *t, th_cmd_result *c)
{
    char path[512], text[1024];
    snprintf(path, sizeof path, "%s/cost-stride.json", th_tmpdir());
    /* b: 1x1 stride 2, 256 -> 512 on 56x56, 128 examples per core: three
     * products of 128 x 28 x 28 x 256 x 512 = 1.315e10 MAC each, 1.28 ms
     * on 2 x 128 x 128 at 940 MHz (charging all 56 x 56 positions a tap
     * would read 2.67) */
    ab_trace(path, 256, 512, 1, ",\"strides\":[2,2]");
    th_case(t, "a 1x1 stride-2 convolution's input gradient costs the "
               "forward's MACs, not 4x");
    th_run(c, "%s run %s --layers 3", th_bin(), path);
    double b = layer_mxu_ms(c->out, "b");
    TH_CHECKF(t, c->status == 0 && b > 1.2 && b < 1.45, "status %d, b %g ms",
              c->status, b);
    /* b: 3x3 on 64 channels: forward, input gradient and weight gradient
     * each fold the taps into K = 576 (5 passes), 3.10 ms by hand (the
     * input gradient's 9 lane-padded taps unfolded would read 3.99) */
    ab_trace(path, 64, 64, 3, "");
    th_case(t, "the input gradient folds taps into K as the forward does");
    th_run(c, "%s run %s --layers 3", th_bin(), path);
    b = layer_mxu_ms(c->out, "b");
    TH_CHECKF(t, c->status == 0 && b > 3.0 && b < 3.3, "status %d, b %g ms",
              c->status, b);

    /* a 3x3 stride-2 transposed convolution, 256 -> 256 on 56x56 (out
     * 112x112), 128 examples per core: every input position meets 9 taps,
     * 9 x 256 x 256 x 56 x 56 x 128 = 2.37e11 MAC, 7.69 ms on 2 MXUs (it
     * read 10.35: ceil(9/4) = 3 taps at every output position) */
    snprintf(path, sizeof path, "%s/cost-convt.json", th_tmpdir());
    snprintf(text, sizeof text,
             "%s\"mode\":\"infer\",\"global_batch\":1024},\"graph\":{"
             "\"inputs\":[{\"name\":\"x\",\"shape\":[56,56,256]}],"
             "\"layers\":[{\"name\":\"t\",\"op\":\"conv_transpose\","
             "\"in\":\"x\",\"filters\":256,\"kernel\":[3,3],"
             "\"strides\":[2,2]}]}}",
             trace_head);
    th_put(path, text);
    th_case(t, "a 3x3 stride-2 transposed convolution costs its MACs (stride "
               "phases), not ceil(9/4) taps at every output");
    th_run(c, "%s run %s --quiet --set hbm.bandwidth_gbs=1000000", th_bin(),
           path);
    double ct = c->status == 0 ? atof(c->out) * 1e3 : -1;
    TH_CHECKF(t, ct > 7.6 && ct < 7.9, "status %d, %g ms: %s", c->status, ct,
              c->err);

    th_case(t, "two streamed products cost one product of their tiles");
    mxu_params mp = {128, 128};
    TH_CHECK(t, mxu_fast_cycles(&mp, 5448, 128, 256) +
                        mxu_stream_cycles(&mp, 5448, 128, 256) ==
                    mxu_fast_cycles(&mp, 5448, 128, 512));
    TH_CHECK(t, mxu_stream_cycles(&mp, 100, 300, 129) == 3 * 2 * 128);

    /* one 1x1 128 -> 128 layer in 49 tiles, HBM out of the way: 262,144
     * rows per core on 2 MXUs, 0.279 ms streamed on either array */
    snprintf(path, sizeof path, "%s/cost-stream.json", th_tmpdir());
    snprintf(text, sizeof text,
             "%s\"mode\":\"infer\",\"global_batch\":1024},\"graph\":{"
             "\"inputs\":[{\"name\":\"x\",\"shape\":[64,64,128]}],"
             "\"layers\":[{\"name\":\"c\",\"op\":\"conv\",\"in\":"
             "\"x\",\"filters\":128,\"kernel\":[1,1]}]}}",
             trace_head);
    th_put(path, text);
    th_case(t, "a 256x256 array is not slower than 128x128 on a 128-channel "
               "layer (products stream within a kernel)");
    double ms[2];
    for (int big = 0; big < 2; big++) {
        th_run(c, "%s run %s --quiet --set hbm.bandwidth_gbs=1000000%s",
               th_bin(), path,
               big ? " --set mxu.rows=256 --set mxu.cols=256" : "");
        ms[big] = c->status == 0 ? atof(c->out) * 1e3 : -1;
    }
    TH_CHECKF(t,
              ms[0] > 0.278 && ms[0] < 0.281 && ms[1] > 0.278 && ms[1] < 0.281,
              "128x128 %g ms, 256x256 %g ms", ms[0], ms[1]);
}

/* Program k of the memo cases: k % 13 instructions after the first,
 * k / 13 + 120 (no field's value in the others) set into field k % 12 of
 * the last: no two alike. */
static void memo_prog(fw_program *p, int k)
{
    fw_program_init(p);
    for (int i = 0; i <= k % 13; i++)
        fw_emit(p, FW_MATMUL, 0, 3, 128, 256, 512, 1024);
    if (p->oom || p->n == 0)
        return;
    fw_insn *in = &p->code[p->n - 1];
    uint8_t v = (uint8_t)(k / 13 + 120);
    switch (k % 12) {
    case 0: in->op = v; break;
    case 1: in->phase = v; break;
    case 2: in->passes = v; break;
    case 3: in->fx = v; break;
    case 4: in->layer = -v; break;
    case 5: in->a = (int64_t)v << 40; break;
    case 6: in->b = -v; break;
    case 7: in->c = v; break;
    case 8: in->d = v; break;
    case 9: in->e = v; break;
    case 10: in->kparts = v; break;
    default: in->recompute = v; in->gconv = v; break;
    }
}

static void memo_cases(th_ctx *t)
{
    th_case(t, "the memo of sequence prices returns each price for its "
               "sequence only, across table growth");
    tpu_params hw;
    tpu_params_default(&hw, 3);
    cost_memo *m = cost_memo_new(&hw);
    TH_CHECK(t, m != NULL);
    if (!m)
        return;
    enum { N = 1500 }; /* the table grows twice */
    int bad = 0;
    fw_program p;
    for (int k = 0; k < N; k++) {
        memo_prog(&p, k);
        if (cost_memo_get(m, &p) != -1)
            bad++;
        cost_memo_put(m, &p, 1000 + k);
        fw_program_free(&p);
    }
    TH_CHECKF(t, bad == 0, "%d found before they were put", bad);
    for (int k = 0; k < N; k++) { /* fresh copies, other buffers */
        memo_prog(&p, k);
        if (cost_memo_get(m, &p) != 1000 + k)
            bad++;
        cost_memo_put(m, &p, 7); /* already there: keeps its price */
        if (cost_memo_get(m, &p) != 1000 + k)
            bad++;
        fw_program_free(&p);
    }
    TH_CHECKF(t, bad == 0, "%d prices wrong", bad);
    memo_prog(&p, N); /* never put */
    TH_CHECK(t, cost_memo_get(m, &p) == -1);
    fw_program_free(&p);
    cost_memo_free(m);
}

void th_suite_cost(th_ctx *t)
{
    th_cmd_result *c = malloc(sizeof *c); /* 72 KiB: not on the stack */
    if (!c)
        return;
    layout_factor_cases(t, c);
    factor_without_layout_cases(t, c);
    run_small_batch_note(t);
    grouped_cases(t, c);
    mxu_cases(t, c);
    memo_cases(t);
    free(c);
}
