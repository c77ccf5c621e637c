/* Frozen layers ("trainable": false, docs/TRACE.md): TF differentiates only
 * towards the trainable variables, so a frozen prefix has no backward pass
 * at all, a frozen layer above a trainable one passes its input gradient
 * on but computes no weight gradient, and neither keeps gradients or
 * optimizer state.  Checked on traces/functional/frozen-stem.json (a frozen
 * conv + batchnorm stem under trainable layers) against the same graph
 * with everything trainable ("thawed"). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "emu/sim.h"
#include "test/harness.h"

#define FROZEN "traces/functional/frozen-stem.json"

static int load(th_ctx *t, graph *g)
{
    tpu_error e = {0};
    if (graph_load(g, FROZEN, &e)) {
        TH_FAIL(t, "%s", e.msg);
        return 0;
    }
    return 1;
}

/* The same graph with every layer trainable (needs_grad re-derived). */
static void thaw(graph *g)
{
    tpu_error e = {0};
    for (int l = 0; l < g->n_layers; l++) {
        g->layers[l].frozen = 0;
        (void)graph_infer_layer(g, l, NULL, &e);
    }
}

static int layer(const graph *g, const char *name)
{
    return graph_find(g, name);
}

/* Offset of layer l's gradient in emu_result.grads (owners in order). */
static int64_t grad_off(const graph *g, int l)
{
    int64_t o = 0;
    for (int j = 0; j < l; j++)
        if (g->layers[j].share_from < 0)
            o += g->layers[j].weights;
    return o;
}

typedef struct {
    int bwd_insns;  /* PHASE_BWD instructions of the layer */
    int dw, dx;     /* matrix products tagged FX_DW / FX_DX */
} bwd_tally;

static int tally(th_ctx *t, const graph *g, const char *name, bwd_tally *out,
                 fw_memory *mem)
{
    sim_opts o;
    sim_opts_default(&o);
    fw_program prog;
    tpu_error e = {0};
    memset(out, 0, sizeof *out);
    if (sim_lower(g, &o, 0, &prog, mem, &e)) {
        TH_FAIL(t, "%s", e.msg);
        return 0;
    }
    int li = layer(g, name);
    for (size_t i = 0; i < prog.n; i++) {
        const fw_insn *in = &prog.code[i];
        if (in->layer != li || in->phase != PHASE_BWD)
            continue;
        out->bwd_insns++;
        if (in->op == FW_MATMUL) {
            out->dw += in->fx == FX_DW;
            out->dx += in->fx == FX_DX;
        }
    }
    fw_program_free(&prog);
    return 1;
}

static void structure_cases(th_ctx *t)
{
    graph g;
    th_case(t, "frozen prefix: no gradient is needed below the first "
               "trainable layer, and the step's FLOPs drop by its backward");
    if (!load(t, &g))
        return;
    static const char *const none[] = {"image", "stem", "stem_bn", "stem_relu",
                                       "pool"};
    for (size_t k = 0; k < sizeof none / sizeof *none; k++)
        TH_CHECKF(t, !g.layers[layer(&g, none[k])].needs_grad,
                  "%s needs a gradient", none[k]);
    TH_CHECK(t, g.layers[layer(&g, "conv2")].needs_grad &&
                    g.layers[layer(&g, "logits")].needs_grad);
    TH_CHECK(t, graph_layer_trains(&g, layer(&g, "conv2")) &&
                    !graph_layer_trains(&g, layer(&g, "stem")) &&
                    !graph_layer_trains(&g, layer(&g, "stem_bn")));
    int64_t stem_w = g.layers[layer(&g, "stem")].weights +
                     g.layers[layer(&g, "stem_bn")].weights;
    TH_CHECKF(t, graph_trainable_weights(&g) == graph_weights(&g) - stem_w,
              "%lld trainable of %lld", (long long)graph_trainable_weights(&g),
              (long long)graph_weights(&g));
    double bwd_frozen = graph_backward_flops(&g);

    th_case(t, "frozen prefix: its layers have no backward instructions; "
               "the first trainable conv computes its weight gradient but no "
               "input gradient");
    bwd_tally a;
    fw_memory mf, mt;
    if (tally(t, &g, "stem", &a, &mf))
        TH_CHECKF(t, a.bwd_insns == 0, "stem: %d backward instructions",
                  a.bwd_insns);
    if (tally(t, &g, "stem_bn", &a, &mf))
        TH_CHECKF(t, a.bwd_insns == 0, "stem_bn: %d", a.bwd_insns);
    if (tally(t, &g, "pool", &a, &mf))
        TH_CHECKF(t, a.bwd_insns == 0, "pool: %d", a.bwd_insns);
    if (tally(t, &g, "conv2", &a, &mf))
        TH_CHECKF(t, a.dw > 0 && a.dx == 0, "conv2: %d dW, %d dX products",
                  a.dw, a.dx);

    th_case(t, "frozen prefix: gradients and optimizer state only for the "
               "trainable weights; fewer saved activations; a shorter step");
    graph h;
    if (!load(t, &h)) {
        graph_free(&g);
        return;
    }
    thaw(&h);
    TH_CHECKF(t, graph_backward_flops(&h) > bwd_frozen,
              "backward FLOPs %g thawed, %g frozen", graph_backward_flops(&h),
              bwd_frozen);
    if (tally(t, &h, "stem", &a, &mt))
        TH_CHECKF(t, a.dw > 0 && a.dx == 0,
                  "thawed stem: %d dW, %d dX products", a.dw, a.dx);
    if (tally(t, &h, "conv2", &a, &mt))
        TH_CHECKF(t, a.dw > 0 && a.dx > 0, "thawed conv2: %d dW, %d dX",
                  a.dw, a.dx);
    (void)tally(t, &g, "conv2", &a, &mf);
    TH_CHECKF(t, fabs(mf.grads_bytes - 4.0 * (double)graph_trainable_weights(&g)) < 1 &&
                  mf.opt_bytes == mf.grads_bytes &&
                  mt.grads_bytes == mt.weights_bytes &&
                  mf.weights_bytes == mt.weights_bytes,
              "grads %.0f opt %.0f weights %.0f (thawed grads %.0f)",
              mf.grads_bytes, mf.opt_bytes, mf.weights_bytes, mt.grads_bytes);
    TH_CHECKF(t, mf.saved_bytes < mt.saved_bytes, "saved %.0f vs %.0f",
              mf.saved_bytes, mt.saved_bytes);
    sim_opts o;
    sim_opts_default(&o);
    emu_result rf, rt;
    tpu_error e = {0};
    if (TH_CHECKF(t, sim_run(&g, &o, &rf, &e) == 0, "%s", e.msg)) {
        if (TH_CHECKF(t, sim_run(&h, &o, &rt, &e) == 0, "%s", e.msg)) {
            TH_CHECKF(t, rf.step_time_s < rt.step_time_s &&
                             rf.flops_per_step < rt.flops_per_step,
                      "step %.3g s frozen, %.3g s thawed", rf.step_time_s,
                      rt.step_time_s);
            emu_result_free(&rt);
        }
        emu_result_free(&rf);
    }

    th_case(t, "everything frozen in training: no backward, no gradient "
               "all-reduce, no update");
    for (int l = 0; l < h.n_layers; l++)
        h.layers[l].frozen = 1;
    for (int l = 0; l < h.n_layers; l++)
        (void)graph_infer_layer(&h, l, NULL, &e);
    {
        fw_program prog;
        fw_memory m;
        if (TH_CHECKF(t, sim_lower(&h, &o, 0, &prog, &m, &e) == 0, "%s",
                      e.msg)) {
            int bwd = 0, upd = 0;
            for (size_t i = 0; i < prog.n; i++) {
                bwd += prog.code[i].phase == PHASE_BWD;
                upd += prog.code[i].phase == PHASE_UPDATE &&
                       (prog.code[i].op == FW_ALLREDUCE ||
                        prog.code[i].fx == FX_UPDATE);
            }
            TH_CHECKF(t, bwd == 0 && upd == 0 && m.grads_bytes == 0,
                      "%d backward, %d update instructions, %.0f gradient "
                      "bytes",
                      bwd, upd, m.grads_bytes);
            fw_program_free(&prog);
        }
    }
    graph_free(&h);
    graph_free(&g);
}

static int frun(th_ctx *t, const graph *g, const char *sys, int steps,
                double lr, const char *out_layer, emu_result *r)
{
    sim_opts o;
    sim_opts_default(&o);
    o.system = sys;
    o.functional = 1;
    o.steps = steps;
    if (lr >= 0)
        o.learning_rate = lr;
    o.output_layer = out_layer;
    tpu_error e = {0};
    if (sim_run(g, &o, r, &e)) {
        TH_FAIL(t, "%s: %s", g->name, e.msg);
        return 0;
    }
    return 1;
}

static void functional_cases(th_ctx *t)
{
    graph g, h;
    if (!load(t, &g))
        return;
    if (!load(t, &h)) {
        graph_free(&g);
        return;
    }
    thaw(&h);
    th_case(t, "functional: a frozen layer's gradient is zero, the "
               "trainable layers' gradients are the thawed run's bit for "
               "bit");
    emu_result rf, rt;
    if (!frun(t, &g, NULL, 1, -1, NULL, &rf)) {
        graph_free(&g);
        graph_free(&h);
        return;
    }
    if (frun(t, &h, NULL, 1, -1, NULL, &rt)) {
        TH_CHECK(t, rf.n_grads == rt.n_grads && rf.loss == rt.loss);
        int frozen_zero = 1, thawed_nonzero = 0, same = 1;
        for (int l = 0; l < g.n_layers && rf.n_grads == rt.n_grads; l++) {
            const glayer *L = &g.layers[l];
            if (L->share_from >= 0 || L->weights <= 0)
                continue;
            int64_t o = grad_off(&g, l);
            for (int64_t i = 0; i < L->weights; i++) {
                if (L->frozen) {
                    frozen_zero &= rf.grads[o + i] == 0;
                    thawed_nonzero |= rt.grads[o + i] != 0;
                } else {
                    same &= rf.grads[o + i] == rt.grads[o + i];
                }
            }
        }
        TH_CHECK(t, frozen_zero);
        TH_CHECKF(t, thawed_nonzero, "the thawed stem's gradient is zero");
        TH_CHECK(t, same);
        emu_result_free(&rt);
    }

    th_case(t, "functional: partitioned [4,1] and [2,2] frozen runs give "
               "the unpartitioned run's loss and gradients (2 replicas of 4 "
               "examples each: batchnorm sees the same batch)");
    {
        static const int parts[][3] = {{1, 1, 1}, {4, 1, 4}, {2, 2, 4}};
        static const char *const sys[] = {"v3-2", "v3-8", "v3-8"};
        emu_result base = {0};
        for (int k = 0; k < 3; k++) {
            g.pdims[1] = parts[k][0];
            g.pdims[2] = parts[k][1];
            g.cores_per_replica = parts[k][2];
            emu_result r;
            if (!frun(t, &g, sys[k], 1, -1, NULL, k ? &r : &base))
                break;
            if (!k)
                continue;
            double d = 0, m = 0;
            for (int64_t i = 0; i < r.n_grads && r.n_grads == base.n_grads;
                 i++) {
                d = fmax(d, fabs(r.grads[i] - base.grads[i]));
                m = fmax(m, fabs(base.grads[i]));
            }
            TH_CHECKF(t, r.n_grads == base.n_grads && d <= 1e-5 * m &&
                             fabs(r.loss - base.loss) <= 1e-6 * fabs(base.loss),
                      "[%d,%d]: gradients differ by %.3g of %.3g, loss %.9g "
                      "vs %.9g",
                      parts[k][0], parts[k][1], d, m, r.loss, base.loss);
            emu_result_free(&r);
        }
        if (base.n_grads)
            emu_result_free(&base);
        g.pdims[1] = 2;
        g.pdims[2] = 1;
        g.cores_per_replica = 2;
    }

    th_case(t, "functional: training leaves frozen weights alone: after two "
               "steps the stem's output is the one of a run with learning "
               "rate 0 (and a thawed stem's is not)");
    emu_result a, b, c;
    if (frun(t, &g, NULL, 2, -1, "stem_relu", &a)) {
        if (frun(t, &g, NULL, 2, 0, "stem_relu", &b)) {
            TH_CHECKF(t, a.output_checksum == b.output_checksum,
                      "%016llx vs %016llx",
                      (unsigned long long)a.output_checksum,
                      (unsigned long long)b.output_checksum);
            if (frun(t, &h, NULL, 2, -1, "stem_relu", &c)) {
                TH_CHECK(t, c.output_checksum != b.output_checksum);
                emu_result_free(&c);
            }
            emu_result_free(&b);
        }
        emu_result_free(&a);
    }
    emu_result_free(&rf);
    graph_free(&g);
    graph_free(&h);
}

void th_suite_frozen(th_ctx *t)
{
    structure_cases(t);
    functional_cases(t);
}
