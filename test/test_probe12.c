/* Probe round 12 (a new user's own networks, checked by hand), each
 * failing before its fix:
 *
 *  - a loss on a spatially split tensor was counted in the HBM need as
 *    the whole unsplit tensor (treated like flatten, which gathers), 8x
 *    the workspace on an 8-way split and a false "does not fit";
 *  - inference counted only one layer's inputs and output as live: a
 *    tensor waiting for a later consumer (a skip connection) was not, so
 *    18 GiB live at once "fitted" in 16;
 *  - a convolution whose window reaches past the neighbours' rows gathers
 *    its input in the forward pass, and its weight gradient read that
 *    gathered window in the backward pass, which nothing kept and nothing
 *    gathered again (xla.dw_halo re-sends a halo; now a gather too).
 *    --functional now refuses a weight gradient that reads the forward's
 *    exchanged window, so a missing exchange shows as an error.
 *
 * and as an adversary (malformed and hostile input):
 *
 *  - a sweep whose values are a few ulps apart drew its chart forever
 *    (v += step did not move v), deaf to SIGTERM;
 *  - a step with no work wrote a report its own readers refuse (step
 *    time 0) and a Chrome trace refusal that blamed the internals;
 *  - a sweep accepted batches up to 2^40 (and scale_batch scaled past
 *    run's limit), so its runs failed after the directory was made;
 *  - 1e400 in a sweep's set was "expected a string or a number".
 *
 * and as an architect asking what-ifs, against hand calculations:
 *
 *  - a strided convolution's input gradient charged every input position
 *    ceil(taps / s^d) taps: 4x the useful work of a 1x1 stride-2 layer;
 *    and it never folded taps into K as the forward does (64 channels,
 *    3x3: 9 lane-padded passes, not 5);
 *    and a 3x3 stride-2 transposed convolution the same way (1.33x);
 *  - every matrix instruction paid a lone product's load, fill and drain,
 *    so a 256x256 array was slower than 128x128 on a 128-channel layer.
 *
 * and one the adversary's fixes showed: a no-fit report gave every core
 * replica 0, shard 0.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mxu/mxu.h"
#include "test/harness.h"

static const char *const trace_head =
    "{\"format\":\"tpuemu-trace/1\",\"system\":\"v3-8\",\"run\":{";

/* core 0's hbm_peak_bytes from a report, -1 when absent */
static double peak_of(const char *rep)
{
    char *text = th_slurp(rep, NULL);
    const char *k = text ? strstr(text, "\"hbm_peak_bytes\":") : NULL;
    double v = k ? atof(k + strlen("\"hbm_peak_bytes\":")) : -1;
    free(text);
    return v;
}

static double loss_need(th_ctx *t, th_cmd_result *c, int split)
{
    char path[512], rep[512], text[1024];
    snprintf(path, sizeof path, "%s/p12-loss%d.json", th_tmpdir(), split);
    snprintf(rep, sizeof rep, "%s/p12-loss%d.r.json", th_tmpdir(), split);
    /* the same bytes per core: one 512x512 example split 8 ways, or 1/8
     * of the rows as its own example on each core */
    snprintf(text, sizeof text,
             "%s\"mode\":\"train\",\"global_batch\":%d,"
             "\"num_cores_per_replica\":%d%s},\"graph\":{\"inputs\":[{"
             "\"name\":\"x\",\"shape\":[%d,512,8]}],\"layers\":["
             "{\"name\":\"c\",\"op\":\"conv\",\"in\":\"x\",\"filters\":128,"
             "\"kernel\":[3,3]},"
             "{\"name\":\"l\",\"op\":\"loss\",\"in\":\"c\",\"kind\":\"l2\"}"
             "]}}",
             trace_head, split ? 1 : 8, split ? 8 : 1,
             split ? ",\"input_partition_dims\":[[1,8,1,1],null]" : "",
             split ? 512 : 64);
    th_put(path, text);
    th_run(c, "%s run %s --quiet --report %s", th_bin(), path, rep);
    TH_CHECKF(t, c->status == 0, "status %d: %s", c->status, c->err);
    return peak_of(rep);
}

static void loss_cases(th_ctx *t, th_cmd_result *c)
{
    th_case(t, "a loss on a split tensor counts its shard, not the whole");
    double whole = loss_need(t, c, 0), split = loss_need(t, c, 1);
    /* the split shard holds the halo rows besides: a few percent */
    TH_CHECKF(t, whole > 0 && split > 0 && split < 1.1 * whole,
              "split %.4g B, unsplit %.4g B", split, whole);
}

static void skip_cases(th_ctx *t, th_cmd_result *c)
{
    /* a (3 GiB per core) waits for d while b (12 GiB) and c (3 GiB) are
     * computed: 18 GiB live at once */
    char path[512], text[1024];
    snprintf(path, sizeof path, "%s/p12-skip.json", th_tmpdir());
    for (int skip = 1; skip >= 0; skip--) {
        snprintf(text, sizeof text,
                 "%s\"mode\":\"infer\",\"global_batch\":8},\"graph\":{"
                 "\"inputs\":[{\"name\":\"x\",\"shape\":[2048,2048,8]}],"
                 "\"layers\":["
                 "{\"name\":\"a\",\"op\":\"conv\",\"in\":\"x\",\"filters\":"
                 "384,\"kernel\":[1,1]},"
                 "{\"name\":\"b\",\"op\":\"conv\",\"in\":\"a\",\"filters\":"
                 "1536,\"kernel\":[1,1]},"
                 "{\"name\":\"c\",\"op\":\"conv\",\"in\":\"b\",\"filters\":"
                 "384,\"kernel\":[1,1]},"
                 "{\"name\":\"d\",\"op\":\"add\",\"in\":[\"%s\",\"c\"]}]}}",
                 trace_head, skip ? "a" : "c");
        th_put(path, text);
        th_run(c, "%s run %s --quiet", th_bin(), path);
        if (skip) {
            th_case(t, "inference: a skip connection's tensor is live until "
                       "its consumer");
            TH_CHECKF(t,
                      c->status == 3 && strstr(c->err, "needs 18.0 GiB") &&
                          strstr(c->err, "workspace 18.0 GiB"),
                      "status %d: %s", c->status, c->err);
            th_case(t, "inference: the need names no backward pass");
            TH_CHECKF(t, !strstr(c->err, "backward"), "%s", c->err);
        } else {
            th_case(t, "inference: without the skip, 15 GiB fits");
            TH_CHECKF(t, c->status == 0, "status %d: %s", c->status, c->err);
        }
    }
}

/* whether a listing line holds both a and b */
static int line_with(const char *text, const char *a, const char *b)
{
    for (const char *p = text; p && *p;) {
        const char *e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        const char *x = strstr(p, a), *y = strstr(p, b);
        if (x && y && (size_t)(x - p) < n && (size_t)(y - p) < n)
            return 1;
        p = e ? e + 1 : NULL;
    }
    return 0;
}

static void gather_cases(th_ctx *t, th_cmd_result *c)
{
    /* 8 rows a core; dilation 12 reaches past the neighbours: gathered */
    char path[512], text[1024];
    snprintf(path, sizeof path, "%s/p12-gather.json", th_tmpdir());
    snprintf(text, sizeof text,
             "%s\"mode\":\"train\",\"global_batch\":1,"
             "\"num_cores_per_replica\":8,\"input_partition_dims\":"
             "[[1,8,1,1],null]},\"graph\":{\"inputs\":[{\"name\":\"x\","
             "\"shape\":[64,64,4]}],\"layers\":["
             "{\"name\":\"c0\",\"op\":\"conv\",\"in\":\"x\",\"filters\":8,"
             "\"kernel\":[3,3],\"dilation\":[12,12]},"
             "{\"name\":\"r0\",\"op\":\"relu\",\"in\":\"c0\"},"
             "{\"name\":\"c1\",\"op\":\"conv\",\"in\":\"r0\",\"filters\":8,"
             "\"kernel\":[3,3],\"strides\":[3,1],\"dilation\":[20,1]},"
             "{\"name\":\"l\",\"op\":\"loss\",\"in\":\"c1\",\"kind\":\"l2\"}"
             "]}}",
             trace_head);
    th_put(path, text);
    th_case(t, "a gathered window is gathered again for the weight gradient");
    th_run(c, "%s lower %s --core 3", th_bin(), path);
    TH_CHECKF(t, c->status == 0 && line_with(c->out, "ici.allgather", "fx=dw"),
              "status %d: %.300s", c->status, c->out);
    th_case(t, "without it the weight gradient has no window (xla.dw_halo=0 "
               "keeps the forward's)");
    th_run(c, "%s lower %s --core 3 --set xla.dw_halo=0", th_bin(), path);
    TH_CHECKF(t, c->status == 0 && !line_with(c->out, "ici.allgather", "fx=dw"),
              "status %d", c->status);
    th_case(t, "--functional: the weight gradient reads the window its "
               "firmware brought");
    th_run(c, "%s run %s --functional --quiet", th_bin(), path);
    TH_CHECKF(t, c->status == 0, "status %d: %s", c->status, c->err);
}

static void sweep_cases(th_ctx *t, th_cmd_result *c)
{
    const char *dir = th_tmpdir();
    char tr[512], sw[512], text[1024];
    snprintf(tr, sizeof tr, "%s/p12-sw-trace.json", dir);
    snprintf(text, sizeof text,
             "%s\"mode\":\"infer\",\"global_batch\":8},\"graph\":{"
             "\"inputs\":[{\"name\":\"x\",\"shape\":[16,16,8]}],"
             "\"layers\":[{\"name\":\"c\",\"op\":\"conv\",\"in\":\"x\","
             "\"filters\":8,\"kernel\":[3,3]}]}}",
             trace_head);
    th_put(tr, text);
    static const struct {
        const char *grid, *what, *want; /* want NULL: the sweep runs */
    } k[] = {
        {"\"set\":{\"clock_hz\":[1000000000.0,1000000000.0000001]}",
         "a sweep of values one ulp apart draws its chart and ends", NULL},
        {"\"batch\":[2097152]",
         "a sweep refuses a batch run refuses, before it starts",
         "grid.batch[0]: expected a positive integer (at most 1048576"},
        {"\"set\":{\"clock_hz\":[1e400]}",
         "a sweep names a number too large for a double as one",
         "grid.set.clock_hz[0]: too large for a double"},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        snprintf(sw, sizeof sw, "%s/p12-sw%zu.json", dir, i);
        snprintf(text, sizeof text,
                 "{\"format\":\"tpuemu-sweep/"
                 "1\",\"name\":\"p12\",\"trace\":\"p12-sw-trace.json\","
                 "\"grid\":{%s}}",
                 k[i].grid);
        th_put(sw, text);
        th_case(t, k[i].what);
        th_run(c,
               "rm -rf %s/p12-swout%zu; timeout 60 %s sweep %s --out "
               "%s/p12-swout%zu; s=$?; test -e %s/p12-swout%zu; "
               "echo made=$?; exit $s",
               dir, i, th_bin(), sw, dir, i, dir, i);
        if (!k[i].want)
            TH_CHECKF(t, c->status == 0 && strstr(c->out, "2 done"),
                      "status %d: %s", c->status, c->err);
        else
            TH_CHECKF(t,
                      c->status == 2 && strstr(c->err, k[i].want) &&
                          strstr(c->out, "made=1"),
                      "status %d: %s %s", c->status, c->err, c->out);
    }
}

static void nowork_cases(th_ctx *t, th_cmd_result *c)
{
    char path[512], text[1024];
    snprintf(path, sizeof path, "%s/p12-nowork.json", th_tmpdir());
    snprintf(text, sizeof text,
             "%s\"mode\":\"train\",\"global_batch\":8},\"graph\":{"
             "\"inputs\":[{\"name\":\"x\",\"shape\":[16]}],\"layers\":["
             "{\"name\":\"f\",\"op\":\"flatten\",\"in\":\"x\"}]}}",
             trace_head);
    th_put(path, text);
    th_case(t, "a step with no work is refused, naming the graph, and "
               "writes no report");
    th_run(c,
           "rm -f %s/p12-nw.json; %s run %s --report %s/p12-nw.json; "
           "s=$?; test -e %s/p12-nw.json; echo made=$?; exit $s",
           th_tmpdir(), th_bin(), path, th_tmpdir(), th_tmpdir());
    TH_CHECKF(t,
              c->status == 2 &&
                  strstr(c->err, "graph.layers: the step "
                                 "does no work") &&
                  strstr(c->out, "made=1"),
              "status %d: %s", c->status, c->err);
}

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
    snprintf(path, sizeof path, "%s/p12-stride.json", th_tmpdir());
    /* b: 1x1 stride 2, 256 -> 512 on 56x56, 128 examples per core: three
     * products of 128 x 28 x 28 x 256 x 512 = 1.315e10 MAC each, 1.28 ms
     * on 2 x 128 x 128 at 940 MHz (it read 2.67: the input gradient
     * charged all 56 x 56 positions a tap) */
    ab_trace(path, 256, 512, 1, ",\"strides\":[2,2]");
    th_case(t, "a 1x1 stride-2 convolution's input gradient costs the "
               "forward's MACs, not 4x");
    th_run(c, "%s run %s --layers 3", th_bin(), path);
    double b = layer_mxu_ms(c->out, "b");
    TH_CHECKF(t, c->status == 0 && b > 1.2 && b < 1.45, "status %d, b %g ms",
              c->status, b);
    /* b: 3x3 on 64 channels: forward, input gradient and weight gradient
     * each fold the taps into K = 576 (5 passes), 3.10 ms by hand (it read
     * 3.99 with the input gradient's 9 lane-padded taps) */
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
    snprintf(path, sizeof path, "%s/p12-convt.json", th_tmpdir());
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
    snprintf(path, sizeof path, "%s/p12-stream.json", th_tmpdir());
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

static void nofit_cases(th_ctx *t, th_cmd_result *c)
{
    /* RetinaNet 2560 split 4 ways on v3-8 at batch 64: 2 replicas of 4
     * cores, 29.9 GiB per core: no fit, but a report that places them */
    char rep[512];
    snprintf(rep, sizeof rep, "%s/p12-nofit.json", th_tmpdir());
    th_case(t, "a report of a step that does not fit places each core in "
               "its replica and shard (every core read replica 0, shard 0)");
    th_run(c,
           "%s run traces/retinanet-2560-v3-8-p4.json --batch 64 --report "
           "%s",
           th_bin(), rep);
    char *text = th_slurp(rep, NULL);
    TH_CHECKF(t,
              c->status == 3 && text &&
                  strstr(text, "{\"core\": 5, \"chip\": 2, \"replica\": 1, "
                               "\"shard\": 1,") &&
                  strstr(text, "\"fits\": false"),
              "status %d: %s", c->status, c->err);
    free(text);
}

void th_suite_probe12(th_ctx *t)
{
    th_cmd_result *c = malloc(sizeof *c); /* 72 KiB: not on the stack */
    if (!c)
        return;
    loss_cases(t, c);
    skip_cases(t, c);
    gather_cases(t, c);
    sweep_cases(t, c);
    nowork_cases(t, c);
    mxu_cases(t, c);
    nofit_cases(t, c);
    free(c);
}
