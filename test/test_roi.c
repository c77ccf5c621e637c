/* roi_align, per-ROI flatten, layer placement ("core") and batchnorm with
 * moving statistics (docs/TRACE.md, docs/FIRMWARE.md, docs/FUNCTIONAL.md):
 *
 *  - shapes: roi_align gives [rois, out_h, out_w, C], flatten keep 1 gives
 *    [rois, 1, 1, out_h x out_w x C];
 *  - --functional: a spatially partitioned run, its heads placed on cores 2
 *    and 1, gives the unpartitioned run's outputs bit for bit and its
 *    gradients within fp32 reordering, for both level layouts;
 *  - cost: the placed core computes the head, the replica's other cores
 *    idle for it; partitioned levels are all-gathered (padded ones cost
 *    more than concatenated ones), unpartitioned ones are not; more ROIs
 *    cost more;
 *  - a moving-statistics batchnorm exchanges no statistics.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/sim.h"
#include "firmware/isa.h"
#include "test/harness.h"

/* A two-level pyramid (24x16 and 12x8, 8 channels) with an RPN-like conv
 * on the coarse level and a head on roi_align: a [1,3,3] conv, a per-ROI
 * flatten and two dense layers, each with its loss. */
static void roi_trace(char *buf, size_t cap, int cpr, const char *pdims,
                      int place, int padded, int rois)
{
    char c2[32] = "", c1[32] = "";
    if (place) {
        snprintf(c2, sizeof c2, ",\"core\":2");
        snprintf(c1, sizeof c1, ",\"core\":1");
    }
    snprintf(
        buf, cap,
        "{\"format\":\"tpuemu-trace/1\",\"name\":\"roi\",\"system\":\"v3-8\","
        "\"run\":{\"mode\":\"train\",\"global_batch\":8,"
        "\"num_cores_per_replica\":%d,\"input_partition_dims\":[%s,null]},"
        "\"graph\":{\"inputs\":[{\"name\":\"image\",\"shape\":[24,16,3],"
        "\"dtype\":\"f32\"}],\"layers\":["
        "{\"name\":\"c1\",\"op\":\"conv\",\"in\":\"image\",\"filters\":8,"
        "\"kernel\":[3,3],\"dtype\":\"f32\"},"
        "{\"name\":\"c2\",\"op\":\"conv\",\"in\":\"c1\",\"filters\":8,"
        "\"kernel\":[3,3],\"strides\":2,\"dtype\":\"f32\"},"
        "{\"name\":\"bn2\",\"op\":\"batchnorm\",\"in\":\"c2\",\"trainable\":"
        "false,\"statistics\":\"moving\",\"dtype\":\"f32\"},"
        "{\"name\":\"roi\",\"op\":\"roi_align\",\"in\":[\"c1\",\"bn2\"],"
        "\"rois\":%d,\"output\":[4,4]%s,\"dtype\":\"f32\"%s},"
        "{\"name\":\"h1\",\"op\":\"conv\",\"in\":\"roi\",\"filters\":6,"
        "\"kernel\":[1,3,3],\"use_bias\":true,\"dtype\":\"f32\"%s},"
        "{\"name\":\"fl\",\"op\":\"flatten\",\"in\":\"h1\",\"keep\":1,"
        "\"dtype\":\"f32\"%s},"
        "{\"name\":\"fc\",\"op\":\"dense\",\"in\":\"fl\",\"units\":7,"
        "\"dtype\":\"f32\"%s},"
        "{\"name\":\"cls\",\"op\":\"dense\",\"in\":\"fc\",\"units\":5,"
        "\"dtype\":\"f32\"%s},"
        "{\"name\":\"l1\",\"op\":\"loss\",\"in\":\"cls\",\"kind\":"
        "\"softmax_xent\",\"dtype\":\"f32\"%s},"
        "{\"name\":\"m\",\"op\":\"roi_align\",\"in\":[\"c1\",\"bn2\"],"
        "\"rois\":3,\"output\":[2,2],\"dtype\":\"f32\"%s},"
        "{\"name\":\"ml\",\"op\":\"loss\",\"in\":\"m\",\"kind\":\"l2\","
        "\"dtype\":\"f32\"%s},"
        "{\"name\":\"rpn\",\"op\":\"conv\",\"in\":\"bn2\",\"filters\":3,"
        "\"kernel\":[1,1],\"dtype\":\"f32\"},"
        "{\"name\":\"l2\",\"op\":\"loss\",\"in\":\"rpn\",\"kind\":"
        "\"sigmoid_focal\",\"dtype\":\"f32\"}]}}",
        cpr, pdims, rois, padded ? ",\"levels\":\"padded\"" : "", c2, c2, c2,
        c2, c2, c2, c1, c1);
}

static int load(th_ctx *t, graph *g, const char *text)
{
    tpu_error err = {0};
    return TH_CHECKF(t, graph_parse(g, text, strlen(text), "t.json", &err) == 0,
                     "%s", err.msg);
}

static int run(th_ctx *t, const graph *g, int fx, const char *out,
               emu_result *r)
{
    sim_opts o;
    sim_opts_default(&o);
    o.functional = fx;
    o.steps = 1;
    o.output_layer = out;
    tpu_error err = {0};
    return TH_CHECKF(t, sim_run(g, &o, r, &err) == 0, "%s", err.msg);
}

static double max_rel(const float *a, const float *b, int64_t n)
{
    double m = 0, scale = 0;
    for (int64_t i = 0; i < n; i++)
        scale = fmax(scale, fabs((double)b[i]));
    if (scale == 0)
        scale = 1;
    for (int64_t i = 0; i < n; i++)
        m = fmax(m, fabs((double)a[i] - (double)b[i]) / scale);
    return m;
}

static void case_shapes(th_ctx *t)
{
    char buf[4096];
    graph g = {0};
    th_case(t, "shapes: roi_align [rois, h, w, C], flatten keep 1 per ROI");
    roi_trace(buf, sizeof buf, 1, "[1,1,1,1]", 0, 0, 5);
    if (load(t, &g, buf)) {
        const glayer *R = &g.layers[graph_find(&g, "roi")];
        const glayer *F = &g.layers[graph_find(&g, "fl")];
        const glayer *D = &g.layers[graph_find(&g, "fc")];
        TH_CHECK(t, R->out.nsp == 3 && R->out.sp[0] == 5 &&
                        R->out.sp[1] == 4 && R->out.sp[2] == 4 &&
                        R->out.c == 8);
        TH_CHECK(t, F->out.nsp == 3 && F->out.sp[0] == 5 &&
                        F->out.sp[1] == 1 && F->out.sp[2] == 1 &&
                        F->out.c == 96);
        TH_CHECK(t, D->macs == 5.0 * 96 * 7 && D->weights == 96 * 7 + 7);
        TH_CHECK(t, R->weights == 0 && R->needs_grad);
        TH_CHECK(t, graph_layer_flops(&g, graph_find(&g, "roi")) ==
                        7.0 * 5 * 4 * 4 * 8);
        TH_CHECK(t, graph_roi_level_elems(&g, R) == 24 * 16 * 8 + 12 * 8 * 8);
    }
    graph_free(&g);
}

/* Partitioned (placed or not, both level layouts) against unpartitioned. */
static void case_values(th_ctx *t)
{
    static const struct {
        int cpr, place, padded;
        const char *pd;
    } v[] = {{4, 1, 0, "[1,4,1,1]"}, {4, 1, 1, "[1,2,2,1]"},
             {4, 0, 0, "[1,4,1,1]"}, {2, 0, 1, "[1,1,2,1]"},
             {8, 1, 0, "[1,4,2,1]"}};
    static const char *const outs[] = {"roi", "cls", "m"};
    char buf[4096];
    th_case(t, "functional: partitioned and placed runs equal the "
               "unpartitioned one");
    for (int o = 0; o < 3; o++)
        for (int pad = 0; pad < 2; pad++) {
            graph g1 = {0};
            emu_result r1 = {0};
            roi_trace(buf, sizeof buf, 1, "[1,1,1,1]", 0, pad, 5);
            if (!load(t, &g1, buf) || !run(t, &g1, 1, outs[o], &r1)) {
                graph_free(&g1);
                continue;
            }
            for (size_t k = 0; k < sizeof v / sizeof v[0]; k++) {
                if (v[k].padded != pad)
                    continue;
                graph g = {0};
                emu_result r = {0};
                roi_trace(buf, sizeof buf, v[k].cpr, v[k].pd, v[k].place, pad,
                          5);
                if (load(t, &g, buf) && run(t, &g, 1, outs[o], &r)) {
                    TH_CHECKF(t, r.output_checksum == r1.output_checksum,
                              "%s %s place %d: output of %s differs", v[k].pd,
                              pad ? "padded" : "concat", v[k].place, outs[o]);
                    TH_CHECKF(t, fabs(r.loss - r1.loss) <= 1e-5 * fabs(r1.loss),
                              "%s: loss %.9g vs %.9g", v[k].pd, r.loss,
                              r1.loss);
                    double e = r.n_grads == r1.n_grads
                                   ? max_rel(r.grads, r1.grads, r.n_grads)
                                   : 1;
                    TH_CHECKF(t, e < 5e-5, "%s place %d: gradients off by %g",
                              v[k].pd, v[k].place, e);
                }
                emu_result_free(&r);
                graph_free(&g);
            }
            emu_result_free(&r1);
            graph_free(&g1);
        }
}

static double cat_of(const emu_result *r, int core, int cat)
{
    return r->per_core[core].breakdown_s[cat];
}

/* Instructions of layer `name` of op `op` in core `core`'s program. */
static int count_insns(th_ctx *t, const graph *g, int core, const char *name,
                       int op)
{
    sim_opts o;
    sim_opts_default(&o);
    fw_program prog;
    fw_memory mem;
    tpu_error err = {0};
    int n = 0, l = graph_find(g, name);
    if (!TH_CHECKF(t, sim_lower(g, &o, core, &prog, &mem, &err) == 0, "%s",
                   err.msg))
        return -1;
    for (size_t i = 0; i < prog.n; i++)
        n += prog.code[i].layer == l && prog.code[i].op == op;
    fw_program_free(&prog);
    return n;
}

static void case_cost(th_ctx *t)
{
    char buf[4096];
    graph g = {0}, gp = {0}, gu = {0}, gc = {0}, gb = {0};
    emu_result r = {0}, rp = {0}, ru = {0};
    th_case(t, "placement: core 2 computes the head, the others idle for it");
    roi_trace(buf, sizeof buf, 4, "[1,4,1,1]", 1, 0, 64);
    if (load(t, &g, buf) && run(t, &g, 0, NULL, &r)) {
        TH_CHECK(t, count_insns(t, &g, 0, "h1", FW_MATMUL) == 0);
        TH_CHECK(t, count_insns(t, &g, 2, "h1", FW_MATMUL) > 0);
        TH_CHECK(t, count_insns(t, &g, 1, "m", FW_VEC) > 0);
        TH_CHECK(t, count_insns(t, &g, 2, "m", FW_VEC) == 0);
        /* every core meets the gathers */
        TH_CHECK(t, count_insns(t, &g, 0, "roi", FW_ALLGATHER) == 2);
        TH_CHECK(t, count_insns(t, &g, 2, "roi", FW_ALLGATHER) == 2);
        TH_CHECKF(t, cat_of(&r, 0, CAT_MXU) < cat_of(&r, 2, CAT_MXU),
                  "mxu core 0 %g, core 2 %g", cat_of(&r, 0, CAT_MXU),
                  cat_of(&r, 2, CAT_MXU));
        TH_CHECKF(t, cat_of(&r, 0, CAT_IDLE) > cat_of(&r, 2, CAT_IDLE),
                  "idle core 0 %g, core 2 %g", cat_of(&r, 0, CAT_IDLE),
                  cat_of(&r, 2, CAT_IDLE));
        TH_CHECK(t, cat_of(&r, 0, CAT_HALO) > 0);
    }
    th_case(t, "roi_align: unpartitioned levels are not gathered; padded "
               "levels move more bytes; more ROIs cost more");
    roi_trace(buf, sizeof buf, 1, "[1,1,1,1]", 0, 0, 64);
    if (load(t, &gu, buf) && run(t, &gu, 0, NULL, &ru))
        TH_CHECK(t, count_insns(t, &gu, 0, "roi", FW_ALLGATHER) == 0);
    roi_trace(buf, sizeof buf, 4, "[1,4,1,1]", 1, 1, 64);
    if (load(t, &gp, buf) && run(t, &gp, 0, NULL, &rp) && r.per_core)
        TH_CHECKF(t, cat_of(&rp, 0, CAT_HALO) > cat_of(&r, 0, CAT_HALO),
                  "halo padded %g, concat %g", cat_of(&rp, 0, CAT_HALO),
                  cat_of(&r, 0, CAT_HALO));
    roi_trace(buf, sizeof buf, 1, "[1,1,1,1]", 0, 0, 8);
    if (load(t, &gc, buf) && ru.per_core) {
        roi_trace(buf, sizeof buf, 1, "[1,1,1,1]", 0, 0, 4096);
        emu_result a = {0}, b = {0};
        if (load(t, &gb, buf) && run(t, &gc, 0, NULL, &a) &&
            run(t, &gb, 0, NULL, &b))
            TH_CHECKF(t, b.step_time_s > a.step_time_s,
                      "4096 ROIs %g s, 8 ROIs %g s", b.step_time_s,
                      a.step_time_s);
        emu_result_free(&a);
        emu_result_free(&b);
    }
    th_case(t, "batchnorm statistics moving: no exchange when split");
    if (g.n_layers) {
        TH_CHECK(t, count_insns(t, &g, 0, "bn2", FW_ALLREDUCE) == 0);
        TH_CHECK(t, count_insns(t, &g, 0, "bn2", FW_VEC) > 0);
    }
    emu_result_free(&r);
    emu_result_free(&rp);
    emu_result_free(&ru);
    graph_free(&g);
    graph_free(&gp);
    graph_free(&gu);
    graph_free(&gc);
    graph_free(&gb);
}

/* The position in core `core`'s program of the first instruction of layer
 * `name`, op `op`, phase `ph` (and fx `fx` when >= 0), and its c operand;
 * -1 when there is none. */
static long find_insn(th_ctx *t, const graph *g, int core, const char *name,
                      int op, int ph, int fx, int64_t *c)
{
    sim_opts o;
    sim_opts_default(&o);
    fw_program prog;
    fw_memory mem;
    tpu_error err = {0};
    long at = -1;
    int l = graph_find(g, name);
    if (!TH_CHECKF(t, sim_lower(g, &o, core, &prog, &mem, &err) == 0, "%s",
                   err.msg))
        return -1;
    for (size_t i = 0; i < prog.n && at < 0; i++) {
        const fw_insn *in = &prog.code[i];
        if (in->layer == l && in->op == op && in->phase == ph &&
            (fx < 0 || in->fx == fx) && (op != FW_VEC || in->c > 0)) {
            at = (long)i;
            if (c)
                *c = in->c;
        }
    }
    fw_program_free(&prog);
    return at;
}

static void case_scatter(th_ctx *t)
{
    char buf[4096];
    graph g = {0};
    th_case(t, "roi_align backward: 4 scatter-add updates a bin, in order, "
               "xla.scatter_update_ns each; two placed heads overlap");
    roi_trace(buf, sizeof buf, 4, "[1,4,1,1]", 1, 0, 64);
    if (!load(t, &g, buf))
        return;
    /* 4 examples a replica: 64 ROIs x 4x4 bins (core 2), 3 x 2x2 (core 1) */
    int64_t cr = 0, cm = 0;
    TH_CHECK(t, find_insn(t, &g, 2, "roi", FW_VEC, PHASE_BWD, -1, &cr) >= 0 &&
                    cr == 4 * 4 * 64 * 16);
    TH_CHECK(t, find_insn(t, &g, 1, "m", FW_VEC, PHASE_BWD, -1, &cm) >= 0 &&
                    cm == 4 * 4 * 3 * 4);
    TH_CHECK(t, find_insn(t, &g, 1, "roi", FW_VEC, PHASE_BWD, -1, NULL) < 0);
    /* core 2 runs its head's backward before it meets the gather that
     * returns core 1's head's gradient, and receives both heads' levels
     * before its own head's forward */
    long h1 = find_insn(t, &g, 2, "h1", FW_MATMUL, PHASE_BWD, -1, NULL);
    long gm = find_insn(t, &g, 2, "m", FW_ALLGATHER, PHASE_BWD, FX_DX, NULL);
    TH_CHECKF(t, h1 >= 0 && gm > h1, "h1 backward at %ld, m's gather at %ld",
              h1, gm);
    long fm = find_insn(t, &g, 2, "m", FW_ALLGATHER, PHASE_FWD, FX_FWD, NULL);
    long f1 = find_insn(t, &g, 2, "h1", FW_MATMUL, PHASE_FWD, -1, NULL);
    TH_CHECKF(t, fm >= 0 && fm < f1, "m's gather at %ld, h1 forward at %ld",
              fm, f1);
    /* 10 us an update: the step grows by core 2's updates alone (core 1's
     * 192, 1.9 ms, run beside them) */
    static const char *const key[] = {"xla.scatter_update_ns"};
    static const char *const v0[] = {"0"}, *const v1[] = {"10000"};
    sim_opts o;
    sim_opts_default(&o);
    o.steps = 1;
    o.n_sets = 1;
    o.set_keys = key;
    o.set_values = v0;
    emu_result a = {0}, b = {0};
    tpu_error err = {0};
    int ok = sim_run(&g, &o, &a, &err) == 0;
    o.set_values = v1;
    ok = ok && sim_run(&g, &o, &b, &err) == 0;
    if (TH_CHECKF(t, ok, "%s", err.msg)) {
        double d = b.step_time_s - a.step_time_s, own = (double)cr * 1e-5;
        TH_CHECKF(t, d > 0.999 * own && d < own + 0.5 * (double)cm * 1e-5,
                  "step grew %.6g s; core 2's updates %.6g s", d, own);
    }
    emu_result_free(&a);
    emu_result_free(&b);
    graph_free(&g);
}

static void case_refused(th_ctx *t)
{
    char buf[4096];
    graph g = {0};
    tpu_error err = {0};
    th_case(t, "placement: a core outside the replica is refused by "
               "graph_check_run");
    roi_trace(buf, sizeof buf, 2, "[1,2,1,1]", 1, 0, 5);
    if (load(t, &g, buf)) {
        TH_CHECK(t, graph_check_run(&g, "v3-8", 8, "t.json", &err) ==
                        TPU_ERR_INPUT);
        TH_CHECKF(t, strstr(err.msg, "graph.layers[3].core: 2 is not a core") !=
                         NULL,
                  "%s", err.msg);
    }
    graph_free(&g);
}

void th_suite_roi(th_ctx *t)
{
    case_shapes(t);
    case_values(t);
    case_cost(t);
    case_scatter(t);
    case_refused(t);
}
