/* test_groups — grouped and depthwise convolutions (conv "groups"):
 * the reader's checks with their JSON paths, weights and FLOPs by hand,
 * groups = 1 exactly an ordinary convolution, the lowering's candidate
 * pick a minimum, and --functional refusing what it does not compute. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/graph.h"
#include "emu/result.h"
#include "emu/sim.h"
#include "test/harness.h"

/* A trace: one input [H, W, C], four relus (so the layer under test is
 * graph.layers[4], as the messages below name it), then `layer` and an l2
 * loss on it. */
static void grp_trace(char *buf, size_t cap, const char *system,
                      int batch, int h, int w, int ch, const char *layer,
                      const char *run_extra)
{
    snprintf(buf, cap,
             "{\"format\":\"tpuemu-trace/1\",\"name\":\"grp\","
             "\"system\":\"%s\",\"run\":{\"mode\":\"train\","
             "\"global_batch\":%d%s},"
             "\"graph\":{\"inputs\":[{\"name\":\"image\",\"shape\":[%d,%d,%d]}],"
             "\"layers\":["
             "{\"name\":\"r1\",\"op\":\"relu\",\"in\":\"image\"},"
             "{\"name\":\"r2\",\"op\":\"relu\",\"in\":\"r1\"},"
             "{\"name\":\"r3\",\"op\":\"relu\",\"in\":\"r2\"},"
             "{\"name\":\"r4\",\"op\":\"relu\",\"in\":\"r3\"},"
             "%s,"
             "{\"name\":\"loss\",\"op\":\"loss\",\"kind\":\"l2\",\"in\":\"g\"}]}}",
             system, batch, run_extra, h, w, ch, layer);
}

static int grp_refused(th_ctx *t, const char *layer, int ch, const char *want)
{
    char buf[4096];
    graph g;
    tpu_error e = {0};
    grp_trace(buf, sizeof buf, "v3-8", 8, 8, 8, ch, layer, "");
    tpu_status st = graph_parse(&g, buf, strlen(buf), "t.json", &e);
    graph_free(&g);
    return TH_CHECKF(t, st == TPU_ERR_INPUT && strstr(e.msg, want) != NULL,
                     "status %d, '%s' (want '%s')", (int)st, e.msg, want);
}

static double grp_step(th_ctx *t, const graph *g, const char *gc,
                       int64_t batch)
{
    sim_opts o;
    sim_opts_default(&o);
    const char *keys[1] = {"xla.group_conv"}, *vals[1] = {gc};
    o.n_sets = 1;
    o.set_keys = keys;
    o.set_values = vals;
    o.global_batch = batch;
    emu_result r;
    tpu_error e = {0};
    if (!TH_CHECKF(t, sim_run(g, &o, &r, &e) == TPU_OK, "%s", e.msg))
        return -1;
    double s = r.step_time_s;
    emu_result_free(&r);
    return s;
}

void th_suite_groups(th_ctx *t)
{
    char buf[4096];
    tpu_error e = {0};
    graph g;

    th_case(t, "reader: groups is checked against the channels and filters, "
               "with the JSON path");
    grp_refused(t,
                "{\"name\":\"g\",\"op\":\"conv\",\"in\":\"r4\",\"filters\":32,"
                "\"kernel\":[3,3],\"groups\":3}",
                32,
                "t.json: graph.layers[4].groups: 3 does not divide the "
                "input's 32 channels");
    grp_refused(t,
                "{\"name\":\"g\",\"op\":\"conv\",\"in\":\"r4\",\"filters\":6,"
                "\"kernel\":[3,3],\"groups\":4}",
                32, "t.json: graph.layers[4].groups: 4 does not divide "
                    "filters 6");
    grp_refused(t,
                "{\"name\":\"g\",\"op\":\"conv\",\"in\":\"r4\",\"filters\":32,"
                "\"kernel\":[3,3],\"groups\":0}",
                32, "t.json: graph.layers[4].groups: expected a positive "
                    "integer");
    grp_refused(t,
                "{\"name\":\"g\",\"op\":\"conv\",\"in\":\"r4\",\"filters\":32,"
                "\"kernel\":[3,3],\"groups\":2.5}",
                32, "graph.layers[4].groups: expected a positive integer");
    /* another op: the usual unknown key */
    grp_refused(t,
                "{\"name\":\"g\",\"op\":\"relu\",\"in\":\"r4\",\"groups\":2}",
                32, "t.json: graph.layers[4].groups: unknown key for relu "
                    "(expected one of:");
    grp_refused(t,
                "{\"name\":\"g\",\"op\":\"dense\",\"in\":\"r4\",\"units\":4,"
                "\"groups\":2}",
                32, "graph.layers[4].groups: unknown key for dense");
    grp_refused(t,
                "{\"name\":\"g\",\"op\":\"conv_transpose\",\"in\":\"r4\","
                "\"filters\":32,\"kernel\":[3,3],\"groups\":2}",
                32, "graph.layers[4].groups: grouped conv_transpose is not "
                    "modelled");
    grp_refused(t,
                "{\"name\":\"g\",\"op\":\"conv\",\"in\":\"r4\",\"filters\":32,"
                "\"kernel\":[3,3],\"depth_multiplier\":1}",
                32, "graph.layers[4].depth_multiplier: not a trace key: a "
                    "grouped or depthwise convolution is a conv with "
                    "\"groups\"");
    /* weights shared with a layer of other groups */
    {
        const char *tr =
            "{\"format\":\"tpuemu-trace/1\",\"system\":\"v3-8\","
            "\"run\":{\"mode\":\"infer\",\"global_batch\":8},"
            "\"graph\":{\"inputs\":[{\"name\":\"x\",\"shape\":[8,8,16]}],"
            "\"layers\":[{\"name\":\"a\",\"op\":\"conv\",\"in\":\"x\","
            "\"filters\":16,\"kernel\":[3,3],\"groups\":16},"
            "{\"name\":\"b\",\"op\":\"conv\",\"in\":\"x\",\"filters\":16,"
            "\"kernel\":[3,3],\"groups\":4,\"share_weights\":\"a\"}]}}";
        tpu_status st = graph_parse(&g, tr, strlen(tr), "s.json", &e);
        TH_CHECKF(t, st == TPU_ERR_INPUT &&
                         strstr(e.msg, "graph.layers[1].share_weights: 'a' "
                                       "has different weights") != NULL,
                  "%s", e.msg);
        graph_free(&g);
    }

    th_case(t, "weights and FLOPs by hand: depthwise and grouped");
    {
        /* MobileNetV2-like depthwise 3x3 on [56,56,144], stride 1 */
        grp_trace(buf, sizeof buf, "v3-8", 128, 56, 56, 144,
                  "{\"name\":\"g\",\"op\":\"conv\",\"in\":\"r4\","
                  "\"filters\":144,\"kernel\":[3,3],\"groups\":144}",
                  "");
        if (TH_CHECKF(t, graph_parse(&g, buf, strlen(buf), "t", &e) == 0,
                      "%s", e.msg)) {
            const glayer *L = &g.layers[graph_find(&g, "g")];
            TH_CHECK(t, graph_groups(L) == 144);
            TH_CHECKF(t, L->weights == 9 * 1 * 144, "%lld",
                      (long long)L->weights);
            TH_CHECKF(t, L->macs == 56.0 * 56 * 144 * 9, "%.17g", L->macs);
            TH_CHECKF(t, graph_layer_flops(&g, graph_find(&g, "g")) ==
                             2.0 * 56 * 56 * 144 * 9,
                      "%.17g", graph_layer_flops(&g, graph_find(&g, "g")));
            TH_CHECK(t, graph_trainable_weights(&g) == 1296);
            /* backward: the weight gradient (2 x MACs) and relu chain's
             * nothing (the input is data and nothing below trains) */
            double bwd = graph_backward_flops(&g);
            double loss_b = 2.0 * (56.0 * 56 * 144); /* loss: 2 x 1/elem */
            TH_CHECKF(t, bwd == 2.0 * 56 * 56 * 144 * 9 + loss_b,
                      "backward %.17g", bwd);
        }
        graph_free(&g);
        /* ResNeXt-like: 3x3, 128 -> 128 in 32 groups of 4, stride 2, bias */
        grp_trace(buf, sizeof buf, "v3-8", 128, 28, 28, 128,
                  "{\"name\":\"g\",\"op\":\"conv\",\"in\":\"r4\","
                  "\"filters\":128,\"kernel\":[3,3],\"strides\":2,"
                  "\"groups\":32,\"use_bias\":true}",
                  "");
        if (TH_CHECKF(t, graph_parse(&g, buf, strlen(buf), "t", &e) == 0,
                      "%s", e.msg)) {
            const glayer *L = &g.layers[graph_find(&g, "g")];
            TH_CHECKF(t, L->weights == 9 * 4 * 128 + 128, "%lld",
                      (long long)L->weights);
            TH_CHECKF(t, L->macs == 14.0 * 14 * 128 * 9 * 4, "%.17g",
                      L->macs);
            TH_CHECK(t, graph_layer_flops(&g, graph_find(&g, "g")) ==
                            2.0 * 14 * 14 * 128 * 36 + 14.0 * 14 * 128);
        }
        graph_free(&g);
        /* depth multiplier 2: filters = 2 x channels */
        grp_trace(buf, sizeof buf, "v3-8", 8, 8, 8, 16,
                  "{\"name\":\"g\",\"op\":\"conv\",\"in\":\"r4\","
                  "\"filters\":32,\"kernel\":[5,5],\"groups\":16}",
                  "");
        if (TH_CHECKF(t, graph_parse(&g, buf, strlen(buf), "t", &e) == 0,
                      "%s", e.msg)) {
            const glayer *L = &g.layers[graph_find(&g, "g")];
            TH_CHECK(t, L->weights == 25 * 32);
            TH_CHECK(t, L->macs == 8.0 * 8 * 32 * 25);
            TH_CHECK(t, L->out.c == 32);
        }
        graph_free(&g);
    }

    th_case(t, "groups 1 is an ordinary convolution: byte-identical report");
    {
        char pa[512], pb[512], ra[512], rb[512];
        const char *layer = "{\"name\":\"g\",\"op\":\"conv\",\"in\":\"r4\","
                            "\"filters\":64,\"kernel\":[3,3]%s}";
        char l1[256], l2[256];
        snprintf(l1, sizeof l1, layer, "");
        snprintf(l2, sizeof l2, layer, ",\"groups\":1");
        snprintf(pa, sizeof pa, "%s/grp_a.json", th_tmpdir());
        snprintf(pb, sizeof pb, "%s/grp_b.json", th_tmpdir());
        snprintf(ra, sizeof ra, "%s/grp_a.report", th_tmpdir());
        snprintf(rb, sizeof rb, "%s/grp_b.report", th_tmpdir());
        grp_trace(buf, sizeof buf, "v3-8", 64, 32, 32, 32, l1, "");
        th_put(pa, buf);
        grp_trace(buf, sizeof buf, "v3-8", 64, 32, 32, 32, l2, "");
        th_put(pb, buf);
        th_cmd_result c1, c2;
        th_run(&c1, "%s run %s --quiet --report %s", th_bin(), pa, ra);
        th_run(&c2, "%s run %s --quiet --report %s", th_bin(), pb, rb);
        TH_CHECK(t, c1.status == 0 && c2.status == 0);
        size_t na = 0, nb = 0;
        char *a = th_slurp(ra, &na), *b = th_slurp(rb, &nb);
        TH_CHECKF(t, a && b && na == nb && memcmp(a, b, na) == 0,
                  "reports differ (%zu, %zu bytes)", na, nb);
        free(a);
        free(b);
    }

    th_case(t, "the lowering's pick is a minimum: never slower than any "
               "forced candidate; depthwise goes to the vector unit");
    {
        /* depthwise, small and large batch per core */
        grp_trace(buf, sizeof buf, "v3-8", 128, 28, 28, 144,
                  "{\"name\":\"g\",\"op\":\"conv\",\"in\":\"r4\","
                  "\"filters\":144,\"kernel\":[3,3],\"groups\":144}",
                  "");
        if (TH_CHECKF(t, graph_parse(&g, buf, strlen(buf), "t", &e) == 0,
                      "%s", e.msg)) {
            for (int k = 0; k < 2; k++) {
                int64_t batch = k ? 1024 : 128;
                double a = grp_step(t, &g, "0", batch),
                       d = grp_step(t, &g, "1", batch),
                       p = grp_step(t, &g, "2", batch),
                       v = grp_step(t, &g, "3", batch);
                TH_CHECKF(t, a > 0 && a <= d * (1 + 1e-12) &&
                                 a <= p * (1 + 1e-12) && a <= v * (1 + 1e-12),
                          "batch %lld: auto %.9g, dense %.9g, groups %.9g, "
                          "vector %.9g",
                          (long long)batch, a, d, p, v);
                /* one channel a group: the MXU candidates waste >= 100x
                 * the MACs; the vector pass wins */
                TH_CHECKF(t, v < d && a == v, "vector %.9g, dense %.9g",
                          v, d);
            }
            /* the listing: the depthwise layer's forward is a vector pass,
             * no matrix product */
            sim_opts o;
            sim_opts_default(&o);
            fw_program prog;
            fw_memory mem;
            int gl = graph_find(&g, "g"), mm = 0, vec = 0;
            if (TH_CHECKF(t, sim_lower(&g, &o, 0, &prog, &mem, &e) == 0, "%s",
                          e.msg)) {
                for (size_t i = 0; i < prog.n; i++)
                    if (prog.code[i].layer == gl && prog.code[i].fx == FX_FWD) {
                        mm += prog.code[i].op == FW_MATMUL;
                        vec += prog.code[i].op == FW_VEC;
                    }
                fw_program_free(&prog);
            }
            TH_CHECKF(t, mm == 0 && vec > 0, "matmul %d, vector %d", mm, vec);
        }
        graph_free(&g);
        /* ResNeXt-like, 1024 channels in 32 groups: per-group products beat
         * the dense expansion (32x the MACs); 128 in 32: the dense one
         * wins (a 128-deep pass holds all the groups) */
        static const int chans[2] = {1024, 128};
        for (int k = 0; k < 2; k++) {
            char layer[256];
            snprintf(layer, sizeof layer,
                     "{\"name\":\"g\",\"op\":\"conv\",\"in\":\"r4\","
                     "\"filters\":%d,\"kernel\":[3,3],\"groups\":32}",
                     chans[k]);
            grp_trace(buf, sizeof buf, "v3-8", 1024, 14, 14, chans[k], layer,
                      "");
            if (TH_CHECKF(t, graph_parse(&g, buf, strlen(buf), "t", &e) == 0,
                          "%s", e.msg)) {
                double a = grp_step(t, &g, "0", 0), d = grp_step(t, &g, "1", 0),
                       p = grp_step(t, &g, "2", 0), v = grp_step(t, &g, "3", 0);
                TH_CHECKF(t, a > 0 && a <= d * (1 + 1e-12) &&
                                 a <= p * (1 + 1e-12),
                          "auto %.9g, dense %.9g, groups %.9g", a, d, p);
                /* no vector candidate with 32 channels a group: forcing it
                 * takes the fastest MXU one */
                TH_CHECKF(t, v == a, "vector forced %.9g, auto %.9g", v, a);
                if (k == 0)
                    TH_CHECKF(t, p < d, "1024/32: groups %.9g, dense %.9g", p,
                              d);
                else
                    TH_CHECKF(t, d < p, "128/32: dense %.9g, groups %.9g", d,
                              p);
            }
            graph_free(&g);
        }
    }

    th_case(t, "a spatially split depthwise convolution exchanges halos and "
               "keeps the pick a minimum");
    {
        grp_trace(buf, sizeof buf, "v3-8", 16, 64, 64, 32,
                  "{\"name\":\"g\",\"op\":\"conv\",\"in\":\"r4\","
                  "\"filters\":32,\"kernel\":[5,5],\"groups\":32}",
                  ",\"num_cores_per_replica\":2,"
                  "\"input_partition_dims\":[[1,2,1,1],null]");
        if (TH_CHECKF(t, graph_parse(&g, buf, strlen(buf), "t", &e) == 0,
                      "%s", e.msg)) {
            double a = grp_step(t, &g, "0", 0), d = grp_step(t, &g, "1", 0);
            TH_CHECKF(t, a > 0 && a <= d, "auto %.9g, dense %.9g", a, d);
            sim_opts o;
            sim_opts_default(&o);
            fw_program prog;
            fw_memory mem;
            int gl = graph_find(&g, "g"), halo = 0;
            if (TH_CHECKF(t, sim_lower(&g, &o, 0, &prog, &mem, &e) == 0, "%s",
                          e.msg)) {
                for (size_t i = 0; i < prog.n; i++)
                    halo += prog.code[i].layer == gl &&
                            prog.code[i].op == FW_HALO;
                fw_program_free(&prog);
            }
            TH_CHECKF(t, halo >= 1, "%d halo exchanges", halo);
        }
        graph_free(&g);
    }

    th_case(t, "--functional refuses a grouped convolution, naming the layer "
               "(exit 2), rather than computing dense values");
    {
        char pa[512];
        snprintf(pa, sizeof pa, "%s/grp_fx.json", th_tmpdir());
        grp_trace(buf, sizeof buf, "v3-8", 8, 8, 8, 16,
                  "{\"name\":\"g\",\"op\":\"conv\",\"in\":\"r4\","
                  "\"filters\":16,\"kernel\":[3,3],\"groups\":16}",
                  "");
        th_put(pa, buf);
        th_cmd_result c;
        th_run(&c, "%s run %s --functional", th_bin(), pa);
        TH_CHECKF(t, c.status == 2 && strstr(c.err, "layer 'g'") &&
                         strstr(c.err, "grouped convolution"),
                  "status %d: %s", c.status, c.err);
        th_run(&c, "%s run %s --quiet", th_bin(), pa);
        TH_CHECKF(t, c.status == 0, "timing alone: status %d: %s", c.status,
                  c.err);
    }

    th_case(t, "traces/mobilenet-v2-224-v3-8.json: Keras's 3,504,872 trainable "
               "weights, 300.8 M MACs an image; every depthwise layer on the "
               "vector unit");
    if (TH_CHECKF(t, graph_load(&g, "traces/mobilenet-v2-224-v3-8.json", &e) ==
                         TPU_OK,
                  "%s", e.msg)) {
        double macs = 0;
        int ndw = 0;
        for (int l = 0; l < g.n_layers; l++) {
            macs += g.layers[l].macs;
            ndw += graph_groups(&g.layers[l]) > 1;
        }
        TH_CHECKF(t, graph_trainable_weights(&g) == 3504872, "%lld",
                  (long long)graph_trainable_weights(&g));
        TH_CHECKF(t, macs > 300.0e6 && macs < 301.5e6, "%.6g MACs", macs);
        TH_CHECKF(t, ndw == 17, "%d depthwise layers", ndw);
        sim_opts o;
        sim_opts_default(&o);
        fw_program prog;
        fw_memory mem;
        int on_mxu = 0, on_vec = 0;
        if (TH_CHECKF(t, sim_lower(&g, &o, 0, &prog, &mem, &e) == 0, "%s",
                      e.msg)) {
            for (size_t i = 0; i < prog.n; i++) {
                const fw_insn *in = &prog.code[i];
                if (in->layer < 0 || graph_groups(&g.layers[in->layer]) < 2 ||
                    in->fx == FX_NONE)
                    continue;
                on_mxu += in->op == FW_MATMUL;
                on_vec += in->op == FW_VEC;
            }
            fw_program_free(&prog);
        }
        TH_CHECKF(t, on_mxu == 0 && on_vec >= 3 * 17, "mxu %d, vector %d",
                  on_mxu, on_vec);
    }
    graph_free(&g);
}
