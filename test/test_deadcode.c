/* Layers no loss depends on (docs/FIRMWARE.md "Dead code"): in a training
 * step XLA's dead code elimination removes them and TensorFlow gives their
 * weights no gradient, so they cost nothing, hold no gradient or optimizer
 * state and cannot be reported; a batchnorm among them still runs forward
 * (its moving statistics are an update op of the step).  In inference
 * every layer is an output and runs. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "emu/sim.h"
#include "test/harness.h"

/* x -> c1 3x3 -> bn -> relu -> c2 3x3 -> loss, optionally with a branch
 * off c1 that feeds nothing ("tail": its op and parameters). */
static void trace_text(char *buf, size_t n, const char *mode,
                       const char *tail)
{
    snprintf(buf, n,
             "{\"format\":\"tpuemu-trace/1\",\"name\":\"dc\",\"system\":\"v3-8\","
             "\"run\":{\"mode\":\"%s\",\"global_batch\":16,"
             "\"num_cores_per_replica\":2,"
             "\"input_partition_dims\":[[1,2,1,1],null]},"
             "\"graph\":{\"inputs\":[{\"name\":\"x\",\"shape\":[32,32,8]}],"
             "\"layers\":["
             "{\"name\":\"c1\",\"op\":\"conv\",\"in\":\"x\",\"filters\":32,"
             "\"kernel\":[3,3]},"
             "{\"name\":\"bn\",\"op\":\"batchnorm\",\"in\":\"c1\"},"
             "{\"name\":\"r\",\"op\":\"relu\",\"in\":\"bn\"},"
             "%s"
             "{\"name\":\"c2\",\"op\":\"conv\",\"in\":\"r\",\"filters\":16,"
             "\"kernel\":[3,3]},"
             "{\"name\":\"l\",\"op\":\"loss\",\"kind\":\"l2\",\"in\":\"c2\"}]}}",
             mode, tail);
}

#define DANGLING                                                            \
    "{\"name\":\"dead\",\"op\":\"conv\",\"in\":\"c1\",\"filters\":512,"     \
    "\"kernel\":[3,3]},"                                                    \
    "{\"name\":\"dead2\",\"op\":\"conv\",\"in\":\"dead\",\"filters\":64,"   \
    "\"kernel\":[1,1]},"
#define DANGLING_BN                                                         \
    "{\"name\":\"dead\",\"op\":\"conv\",\"in\":\"c1\",\"filters\":512,"     \
    "\"kernel\":[3,3]},"                                                    \
    "{\"name\":\"dead_bn\",\"op\":\"batchnorm\",\"in\":\"dead\"},"

typedef struct {
    double step, flops, peak;
    int fwd, bwd; /* instructions of layer "dead" per phase, core 0 */
} figures;

static int measure(th_ctx *t, const char *mode, const char *tail,
                   figures *f)
{
    char buf[4096];
    tpu_error e = {0};
    graph g;
    memset(f, 0, sizeof *f);
    trace_text(buf, sizeof buf, mode, tail);
    if (!TH_CHECKF(t, graph_parse(&g, buf, strlen(buf), "dc.json", &e) == 0,
                   "%s", e.msg))
        return 0;
    sim_opts o;
    sim_opts_default(&o);
    emu_result r;
    int ok = TH_CHECKF(t, sim_run(&g, &o, &r, &e) == 0, "%s", e.msg);
    if (ok) {
        f->step = r.step_time_s;
        f->flops = r.flops_per_step;
        f->peak = r.hbm_needed_bytes;
        emu_result_free(&r);
    }
    fw_program prog;
    fw_memory mem;
    int dead = graph_find(&g, "dead");
    if (ok && TH_CHECKF(t, sim_lower(&g, &o, 0, &prog, &mem, &e) == 0, "%s",
                        e.msg)) {
        for (size_t i = 0; i < prog.n; i++)
            if (dead >= 0 && prog.code[i].layer == dead) {
                f->fwd += prog.code[i].phase == PHASE_FWD;
                f->bwd += prog.code[i].phase == PHASE_BWD;
            }
        fw_program_free(&prog);
    } else {
        ok = 0;
    }
    graph_free(&g);
    return ok;
}

void th_suite_deadcode(th_ctx *t)
{
    figures base, dead, bn, inf0, inf1;
    th_case(t, "training: a branch no loss reads costs nothing (same step "
               "time and FLOPs, HBM only its weights; no instruction)");
    if (measure(t, "train", "", &base) && measure(t, "train", DANGLING, &dead)) {
        /* Its variables still exist on the device: fp32 weights only
         * (3x3x32x512 + 512x64), no gradient, no momentum. */
        double w = 4.0 * (3 * 3 * 32 * 512 + 512 * 64);
        TH_CHECKF(t, dead.step == base.step && dead.flops == base.flops &&
                         dead.peak - base.peak > w - 1 &&
                         dead.peak - base.peak < w + 1,
                  "with the branch %.9g s, %g FLOPs, %.0f B; without %.9g s, "
                  "%g FLOPs, %.0f B (+%.0f B of weights expected)", dead.step,
                  dead.flops, dead.peak, base.step, base.flops, base.peak, w);
        TH_CHECKF(t, dead.fwd == 0 && dead.bwd == 0,
                  "the dead conv has %d forward and %d backward instructions",
                  dead.fwd, dead.bwd);
    }
    th_case(t, "training: a batchnorm in the branch runs forward (moving "
               "statistics) and nothing runs backward");
    if (measure(t, "train", DANGLING_BN, &bn)) {
        TH_CHECKF(t, bn.step > base.step && bn.fwd > 0 && bn.bwd == 0,
                  "step %.9g s (without the branch %.9g), %d forward and %d "
                  "backward instructions", bn.step, base.step, bn.fwd, bn.bwd);
    }
    th_case(t, "inference: every layer is an output and runs");
    if (measure(t, "infer", "", &inf0) && measure(t, "infer", DANGLING, &inf1))
        TH_CHECKF(t, inf1.step > inf0.step && inf1.fwd > 0,
                  "with the branch %.9g s (%d instructions), without %.9g s",
                  inf1.step, inf1.fwd, inf0.step);

    th_case(t, "the branch's weights get no gradient or optimizer state; "
               "needs_grad and the flags as derived");
    {
        char a[4096], b[4096];
        tpu_error e = {0};
        graph ga, gb;
        trace_text(a, sizeof a, "train", "");
        trace_text(b, sizeof b, "train", DANGLING);
        if (TH_CHECKF(t, graph_parse(&ga, a, strlen(a), "a", &e) == 0, "%s",
                      e.msg)) {
            if (TH_CHECKF(t, graph_parse(&gb, b, strlen(b), "b", &e) == 0,
                          "%s", e.msg)) {
                int d = graph_find(&gb, "dead"), c1 = graph_find(&gb, "c1");
                TH_CHECKF(t, graph_trainable_weights(&ga) ==
                                 graph_trainable_weights(&gb),
                          "trainable weights %lld without, %lld with",
                          (long long)graph_trainable_weights(&ga),
                          (long long)graph_trainable_weights(&gb));
                TH_CHECK(t, gb.layers[d].unused && gb.layers[d].no_loss &&
                                !gb.layers[d].needs_grad &&
                                !graph_layer_trains(&gb, d));
                TH_CHECK(t, !gb.layers[c1].unused && !gb.layers[c1].no_loss &&
                                gb.layers[c1].needs_grad &&
                                graph_layer_trains(&gb, c1));
                graph_free(&gb);
            }
            graph_free(&ga);
        }
    }

    th_case(t, "shared weights whose owner no loss reads still train "
               "through a sharer that one does");
    {
        const char *tr =
            "{\"format\":\"tpuemu-trace/1\",\"name\":\"sh\",\"system\":"
            "\"v3-8\",\"run\":{\"mode\":\"train\",\"global_batch\":8},"
            "\"graph\":{\"inputs\":[{\"name\":\"x\",\"shape\":[8,8,4]}],"
            "\"layers\":[{\"name\":\"c1\",\"op\":\"conv\",\"in\":\"x\","
            "\"filters\":16,\"kernel\":[3,3]},{\"name\":\"owner\",\"op\":"
            "\"conv\",\"in\":\"c1\",\"filters\":16,\"kernel\":[3,3]},"
            "{\"name\":\"sharer\",\"op\":\"conv\",\"in\":\"c1\","
            "\"filters\":16,\"kernel\":[3,3],\"share_weights\":\"owner\"},"
            "{\"name\":\"l\",\"op\":\"loss\",\"kind\":\"l2\",\"in\":"
            "\"sharer\"}]}}";
        tpu_error e = {0};
        graph g;
        if (TH_CHECKF(t, graph_parse(&g, tr, strlen(tr), "sh", &e) == 0, "%s",
                      e.msg)) {
            int o = graph_find(&g, "owner"), c1 = graph_find(&g, "c1");
            TH_CHECKF(t, g.layers[o].unused && !g.layers[o].weights_no_grad &&
                             graph_trainable_weights(&g) ==
                                 g.layers[c1].weights + g.layers[o].weights,
                      "owner unused %d, no grad %d, trainable %lld of %lld",
                      g.layers[o].unused, g.layers[o].weights_no_grad,
                      (long long)graph_trainable_weights(&g),
                      (long long)graph_weights(&g));
            graph_free(&g);
        }
    }

    th_case(t, "a training graph without a loss layer counts its sinks as "
               "losses (everything computed and trained, as before)");
    {
        const char *tr =
            "{\"format\":\"tpuemu-trace/1\",\"name\":\"nl\",\"system\":\"v3-8\","
            "\"run\":{\"mode\":\"train\",\"global_batch\":8},"
            "\"graph\":{\"inputs\":[{\"name\":\"x\",\"shape\":[8,8,4]}],"
            "\"layers\":[{\"name\":\"c\",\"op\":\"conv\",\"in\":\"x\","
            "\"filters\":8,\"kernel\":[3,3]},{\"name\":\"d\",\"op\":\"conv\","
            "\"in\":\"c\",\"filters\":8,\"kernel\":[1,1]}]}}";
        tpu_error e = {0};
        graph g;
        if (TH_CHECKF(t, graph_parse(&g, tr, strlen(tr), "nl", &e) == 0, "%s",
                      e.msg)) {
            TH_CHECK(t, !g.layers[graph_find(&g, "c")].unused &&
                            g.layers[graph_find(&g, "c")].needs_grad &&
                            g.layers[graph_find(&g, "d")].needs_grad);
            graph_free(&g);
        }
    }

    th_case(t, "every layer frozen: the loss writes no gradient (nothing "
               "below it trains)");
    {
        char buf[4096];
        tpu_error e = {0};
        graph g;
        trace_text(buf, sizeof buf, "train", "");
        if (TH_CHECKF(t, graph_parse(&g, buf, strlen(buf), "dc.json", &e) == 0,
                      "%s", e.msg)) {
            int64_t st[2] = {0, 0};
            for (int v = 0; v < 2; v++) {
                if (v && !TH_CHECKF(t, graph_freeze(&g, "c1,bn,c2", NULL, &e) ==
                                           0, "%s", e.msg))
                    break;
                sim_opts o;
                sim_opts_default(&o);
                fw_program prog;
                fw_memory mem;
                int l = graph_find(&g, "l");
                if (!TH_CHECKF(t, sim_lower(&g, &o, 0, &prog, &mem, &e) == 0,
                               "%s", e.msg))
                    break;
                for (size_t i = 0; i < prog.n; i++)
                    if (prog.code[i].layer == l && prog.code[i].op == FW_DMA_ST)
                        st[v] += prog.code[i].a;
                fw_program_free(&prog);
            }
            TH_CHECKF(t, st[0] > 0 && st[1] == 0,
                      "loss stores %lld B trained, %lld B all frozen",
                      (long long)st[0], (long long)st[1]);
            graph_free(&g);
        }
    }

    th_case(t, "a dead layer before the loss changes no value (the classes "
               "come from the loss's input, not from a dead layer's)");
    {
        /* Same layer indices, the dead conv reading the 8-channel c0 or
         * the 4-channel input: the labels (10 classes) and every computed
         * value must be the same. */
        uint64_t ck[2] = {0, 0};
        double loss[2] = {0, 0};
        for (int v = 0; v < 2; v++) {
            char tr[2048];
            snprintf(tr, sizeof tr,
                     "{\"format\":\"tpuemu-trace/1\",\"name\":\"cls\","
                     "\"system\":\"v3-8\",\"run\":{\"mode\":\"train\","
                     "\"global_batch\":8},\"graph\":{\"inputs\":[{\"name\":"
                     "\"x\",\"shape\":[8,8,4]}],\"layers\":[{\"name\":\"c0\","
                     "\"op\":\"conv\",\"in\":\"x\",\"filters\":8,"
                     "\"kernel\":[3,3]},{\"name\":\"gp\",\"op\":"
                     "\"global_avgpool\",\"in\":\"c0\"},{\"name\":\"fc\","
                     "\"op\":\"dense\",\"in\":\"gp\",\"units\":10},"
                     "{\"name\":\"dead\",\"op\":\"conv\",\"in\":\"%s\","
                     "\"filters\":16,\"kernel\":[1,1]},{\"name\":\"l\","
                     "\"op\":\"loss\",\"kind\":\"softmax_xent\",\"in\":"
                     "\"fc\"}]}}", v ? "x" : "c0");
            graph g;
            tpu_error e = {0};
            if (!TH_CHECKF(t, graph_parse(&g, tr, strlen(tr), "cls", &e) == 0,
                           "%s", e.msg))
                break;
            sim_opts o;
            sim_opts_default(&o);
            o.functional = 1;
            emu_result r;
            if (TH_CHECKF(t, sim_run(&g, &o, &r, &e) == 0, "%s", e.msg)) {
                ck[v] = r.output_checksum;
                loss[v] = r.loss;
                emu_result_free(&r);
            }
            graph_free(&g);
        }
        TH_CHECKF(t, ck[0] == ck[1] && loss[0] == loss[1],
                  "dead conv on c0: %016llx, loss %.9g; on x: %016llx, "
                  "loss %.9g", (unsigned long long)ck[0], loss[0],
                  (unsigned long long)ck[1], loss[1]);
    }

    th_case(t, "--output-layer of a layer no loss reads: exit 2, says why");
    {
        char buf[4096], path[1024];
        trace_text(buf, sizeof buf, "train", DANGLING);
        snprintf(path, sizeof path, "%s/dead.json", th_tmpdir());
        FILE *f = fopen(path, "w");
        if (TH_CHECKF(t, f != NULL, "cannot write %s", path)) {
            fputs(buf, f);
            fclose(f);
            th_cmd_result r;
            th_run(&r, "%s run %s --functional --output-layer dead2", th_bin(),
                   path);
            TH_CHECKF(t, r.status == 2 && strstr(r.err, "feeds no loss"),
                      "exit %d: %s", r.status, r.err);
            th_run(&r, "%s run %s --functional", th_bin(), path);
            TH_CHECKF(t, r.status == 0 && strstr(r.out, "output of 'c2'"),
                      "exit %d (the default output is the last layer a "
                      "training step computes): %s %s", r.status, r.out,
                      r.err);
        }
        /* a batchnorm kept for its statistics after the head is not the
         * network's output either */
        const char *late =
            "{\"format\":\"tpuemu-trace/1\",\"name\":\"late\","
            "\"system\":\"v3-8\",\"run\":{\"mode\":\"train\","
            "\"global_batch\":8},\"graph\":{\"inputs\":[{\"name\":\"x\","
            "\"shape\":[8,8,4]}],\"layers\":[{\"name\":\"c1\",\"op\":"
            "\"conv\",\"in\":\"x\",\"filters\":8,\"kernel\":[3,3]},"
            "{\"name\":\"head\",\"op\":\"conv\",\"in\":\"c1\","
            "\"filters\":4,\"kernel\":[1,1]},{\"name\":\"side_bn\","
            "\"op\":\"batchnorm\",\"in\":\"c1\"},{\"name\":\"l\","
            "\"op\":\"loss\",\"kind\":\"l2\",\"in\":\"head\"}]}}";
        snprintf(path, sizeof path, "%s/late.json", th_tmpdir());
        f = fopen(path, "w");
        if (TH_CHECKF(t, f != NULL, "cannot write %s", path)) {
            fputs(late, f);
            fclose(f);
            th_cmd_result r;
            th_run(&r, "%s run %s --functional", th_bin(), path);
            TH_CHECKF(t, r.status == 0 && strstr(r.out, "output of 'head'"),
                      "exit %d (not the statistics-only batchnorm): %s %s",
                      r.status, r.out, r.err);
        }
    }
}
