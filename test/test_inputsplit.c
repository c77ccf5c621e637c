/* input_partition_dims of every input (emu/trace.c, emu/plan.c):
 *
 *  - a second input whose entry is null is replicated: its input layer is
 *    not split, a positionwise chain on it stays whole, a convolution,
 *    pooling or upsampling of it is split again; the plan, the firmware
 *    (`tpuemu lower`) and the step time differ from the run where it is
 *    split like the first;
 *  - --functional values of such runs equal the unpartitioned run's
 *    (training: loss and gradients within fp32 reordering);
 *  - another split, a split of an input of another rank, a split of an
 *    input when the first is not split, and a replicated input meeting a
 *    split tensor at a concat are refused at load (exit 2, the JSON path).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/plan.h"
#include "emu/sim.h"
#include "test/harness.h"

#define PROBE "test/inputsplit/twostream-f32.json"

/* A small two-input f32 net: x splits, y's entry is `second`.  y goes
 * through a sigmoid and a batchnorm (positionwise: whole with y), then a
 * conv, a maxpool and an upsample of whole tensors (split again); the
 * branches meet at a concat and an add, which also take whole tensors
 * (b2, and bb: a concat of whole ones) beside split ones: sliced forward,
 * their gradients (b2 trains its batchnorm) all-gathered backward. */
static void two_input_trace(char *buf, size_t cap, int train,
                            const char *first, const char *second, int cpr)
{
    snprintf(
        buf, cap,
        "{\"format\":\"tpuemu-trace/1\",\"name\":\"two-%s\",\"system\":"
        "\"v3-8\",\"run\":{\"mode\":\"%s\",\"global_batch\":8,"
        "\"num_cores_per_replica\":%d,\"input_partition_dims\":[%s,%s,null]},"
        "\"graph\":{\"inputs\":[{\"name\":\"x\",\"shape\":[12,10,2],"
        "\"dtype\":\"f32\"},{\"name\":\"y\",\"shape\":[12,10,1],\"dtype\":"
        "\"f32\"}],\"layers\":["
        "{\"name\":\"a1\",\"op\":\"conv\",\"in\":\"x\",\"filters\":3,"
        "\"kernel\":[3,3],\"padding\":\"same\",\"dtype\":\"f32\"},"
        "{\"name\":\"a2\",\"op\":\"batchnorm\",\"in\":\"a1\",\"dtype\":\"f32\"},"
        "{\"name\":\"a3\",\"op\":\"relu\",\"in\":\"a2\",\"dtype\":\"f32\"},"
        "{\"name\":\"b1\",\"op\":\"sigmoid\",\"in\":\"y\",\"dtype\":\"f32\"},"
        "{\"name\":\"b2\",\"op\":\"batchnorm\",\"in\":\"b1\",\"dtype\":\"f32\"},"
        "{\"name\":\"b3\",\"op\":\"conv\",\"in\":\"b2\",\"filters\":2,"
        "\"kernel\":[3,3],\"padding\":\"same\",\"use_bias\":true,"
        "\"dtype\":\"f32\"},"
        "{\"name\":\"p1\",\"op\":\"maxpool\",\"in\":\"y\",\"window\":[2,2],"
        "\"strides\":[2,2],\"dtype\":\"f32\"},"
        "{\"name\":\"u1\",\"op\":\"upsample\",\"in\":\"p1\",\"factor\":[2,2],"
        "\"dtype\":\"f32\"},"
        "{\"name\":\"cat\",\"op\":\"concat\",\"in\":[\"a3\",\"b3\",\"u1\","
        "\"b2\"],\"dtype\":\"f32\"},"
        "{\"name\":\"bb\",\"op\":\"concat\",\"in\":[\"b2\",\"y\",\"b2\"],"
        "\"dtype\":\"f32\"},"
        "{\"name\":\"c1\",\"op\":\"conv\",\"in\":\"cat\",\"filters\":3,"
        "\"kernel\":[3,3],\"padding\":\"same\",\"dtype\":\"f32\"},"
        "{\"name\":\"ad\",\"op\":\"add\",\"in\":[\"c1\",\"a1\",\"bb\"],"
        "\"dtype\":\"f32\"},"
        "{\"name\":\"c2\",\"op\":\"conv\",\"in\":\"ad\",\"filters\":2,"
        "\"kernel\":[1,1],\"dtype\":\"f32\"}%s]}}",
        second, train ? "train" : "infer", cpr, first, second,
        train ? ",{\"name\":\"l\",\"op\":\"loss\",\"kind\":\"l2\",\"in\":"
                "\"c2\",\"dtype\":\"f32\"}"
              : "");
}

static int parse(th_ctx *t, graph *g, const char *text)
{
    tpu_error err = {0};
    return TH_CHECKF(t, graph_parse(g, text, strlen(text), "t.json", &err) == 0,
                     "%s", err.msg);
}

static int run_fx(th_ctx *t, const graph *g, emu_result *r)
{
    sim_opts o;
    sim_opts_default(&o);
    o.functional = 1;
    o.steps = 1;
    tpu_error err = {0};
    return TH_CHECKF(t, sim_run(g, &o, r, &err) == 0, "%s: %s", g->name,
                     err.msg);
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

static int split_of(const plan *p, const graph *g, const char *name, int d)
{
    int l = graph_find(g, name);
    return l >= 0 ? p->split[l * GRAPH_MAX_SP + d] : -1;
}

static void plan_cases(th_ctx *t)
{
    th_case(t, "plan: a null second input is replicated, a positionwise "
               "chain on it stays whole, a conv/pool/upsample of it splits; "
               "the same list splits it like the first");
    char buf[8192];
    const tpu_system *sys = tpu_system_find("v3-8");
    static const char *const second[] = {"[1,2,1,1]", "null"};
    for (int v = 0; v < 2; v++) {
        graph g;
        two_input_trace(buf, sizeof buf, 1, "[1,2,1,1]", second[v], 2);
        if (!parse(t, &g, buf))
            continue;
        plan p;
        tpu_error err = {0};
        if (TH_CHECKF(t, plan_build(&p, &g, sys, g.global_batch, &err) == 0,
                      "%s", err.msg)) {
            int whole = v == 1;
            TH_CHECK(t, plan_input_whole(&g, 1) == whole);
            TH_CHECK(t, plan_input_whole(&g, 0) == 0);
            TH_CHECK(t, split_of(&p, &g, "x", 0) == 1);
            TH_CHECKF(t, split_of(&p, &g, "y", 0) == !whole,
                      "second %s: y split %d", second[v],
                      split_of(&p, &g, "y", 0));
            TH_CHECK(t, split_of(&p, &g, "b1", 0) == !whole);
            TH_CHECK(t, split_of(&p, &g, "b2", 0) == !whole);
            /* split again (rows computed from the whole input) */
            TH_CHECK(t, split_of(&p, &g, "b3", 0) == 1);
            TH_CHECK(t, split_of(&p, &g, "p1", 0) == 1);
            TH_CHECK(t, split_of(&p, &g, "u1", 0) == 1);
            TH_CHECK(t, split_of(&p, &g, "cat", 0) == 1);
            for (int l = 0; l < g.n_layers; l++)
                TH_CHECK(t, p.split[l * GRAPH_MAX_SP + 1] == 0);
            plan_free(&p);
        }
        graph_free(&g);
    }

    th_case(t, "plan: a replicated input that meets a split tensor at a "
               "concat stays whole; the concat splits (the box is sliced)");
    {
        static const char early[] =
            "{\"format\":\"tpuemu-trace/1\",\"name\":\"e\",\"system\":\"v3-8\","
            "\"run\":{\"mode\":\"train\",\"global_batch\":8,"
            "\"num_cores_per_replica\":2,\"input_partition_dims\":"
            "[[1,2,1,1],[1,2,1,1],null]},\"graph\":{\"inputs\":["
            "{\"name\":\"rgb\",\"shape\":[16,16,3]},{\"name\":\"d\",\"shape\":"
            "[16,16,1]}],\"layers\":[{\"name\":\"cat\",\"op\":\"concat\","
            "\"in\":[\"rgb\",\"d\"]},{\"name\":\"c\",\"op\":\"conv\",\"in\":"
            "\"cat\",\"filters\":4,\"kernel\":[3,3]},{\"name\":\"gp\",\"op\":"
            "\"global_avgpool\",\"in\":\"c\"},{\"name\":\"l\",\"op\":\"loss\","
            "\"in\":\"gp\",\"kind\":\"softmax_xent\"}]}}";
        graph g;
        if (parse(t, &g, early)) {
            plan p;
            tpu_error err = {0};
            TH_CHECK(t, plan_build(&p, &g, sys, g.global_batch, &err) == 0);
            plan_free(&p);
            g.layers[1].whole = 1; /* as if d's entry had been null */
            tpu_status st = plan_build(&p, &g, sys, g.global_batch, &err);
            if (TH_CHECKF(t, st == TPU_OK, "status %d: %s", (int)st,
                          err.msg)) {
                TH_CHECK(t, split_of(&p, &g, "d", 0) == 0);
                TH_CHECK(t, split_of(&p, &g, "rgb", 0) == 1);
                TH_CHECK(t, split_of(&p, &g, "cat", 0) == 1);
                plan_free(&p);
            }
            graph_free(&g);
        }
    }
}

static void dead_case(th_ctx *t)
{
    th_case(t, "plan: a replicated input meeting a split one loads in "
               "training (where the layer is dead code) and in inference "
               "(where it is an output, split)");
    static const char dead[] =
        "{\"format\":\"tpuemu-trace/1\",\"name\":\"d\",\"system\":\"v3-8\","
        "\"run\":{\"mode\":\"%s\",\"global_batch\":8,"
        "\"num_cores_per_replica\":2,\"input_partition_dims\":"
        "[[1,2,1,1],null,null]},\"graph\":{\"inputs\":["
        "{\"name\":\"rgb\",\"shape\":[16,16,3]},{\"name\":\"d\",\"shape\":"
        "[16,16,1]}],\"layers\":[{\"name\":\"a\",\"op\":\"conv\",\"in\":"
        "\"rgb\",\"filters\":4,\"kernel\":[3,3]},{\"name\":\"b\",\"op\":"
        "\"conv\",\"in\":\"d\",\"filters\":4,\"kernel\":[3,3]},"
        "{\"name\":\"cat\",\"op\":\"concat\",\"in\":[\"a\",\"b\"]},"
        "{\"name\":\"dead\",\"op\":\"concat\",\"in\":[\"rgb\",\"d\"]},"
        "{\"name\":\"gp\",\"op\":\"global_avgpool\",\"in\":\"cat\"},"
        "{\"name\":\"l\",\"op\":\"loss\",\"in\":\"gp\",\"kind\":"
        "\"softmax_xent\"}]}}";
    static const char *const modes[] = {"train", "infer"};
    for (int m = 0; m < 2; m++) {
        char buf[4096];
        graph g;
        tpu_error err = {0};
        snprintf(buf, sizeof buf, dead, modes[m]);
        if (!TH_CHECKF(t, graph_parse(&g, buf, strlen(buf), "t.json", &err) == 0,
                       "%s: %s", modes[m], err.msg))
            continue;
        plan p;
        if (TH_CHECKF(t, plan_build(&p, &g, tpu_system_find("v3-8"),
                                    g.global_batch, &err) == 0,
                      "%s: %s", modes[m], err.msg)) {
            TH_CHECK(t, split_of(&p, &g, "dead", 0) == 1);
            TH_CHECK(t, split_of(&p, &g, "d", 0) == 0);
            plan_free(&p);
        }
        graph_free(&g);
    }
}

static void functional_cases(th_ctx *t)
{
    th_case(t, "functional: a replicated second input gives the "
               "unpartitioned run's output (inference) and loss and "
               "gradients (training), within fp32 reordering");
    static const char *const firsts[] = {"[1,2,1,1]", "[1,1,2,1]",
                                         "[1,2,2,1]", "[1,4,1,1]"};
    static const int cprs[] = {2, 2, 4, 4};
    char buf[8192], flat_first[32];
    int n = th_asan() ? 2 : 4, ok = 0;
    for (int train = 0; train < 2; train++)
        for (int k = 0; k < n; k++) {
            /* the unpartitioned run: the same replicas, nothing split */
            snprintf(flat_first, sizeof flat_first, "null");
            graph gf, gs, gn;
            two_input_trace(buf, sizeof buf, train, flat_first, "null",
                            cprs[k]);
            if (!parse(t, &gf, buf))
                continue;
            two_input_trace(buf, sizeof buf, train, firsts[k], "null",
                            cprs[k]);
            if (!parse(t, &gn, buf)) {
                graph_free(&gf);
                continue;
            }
            two_input_trace(buf, sizeof buf, train, firsts[k], firsts[k],
                            cprs[k]);
            if (!parse(t, &gs, buf)) {
                graph_free(&gf);
                graph_free(&gn);
                continue;
            }
            emu_result rf, rn, rs;
            if (run_fx(t, &gf, &rf)) {
                if (run_fx(t, &gn, &rn)) {
                    if (run_fx(t, &gs, &rs)) {
                        int good;
                        if (!train) {
                            /* batchnorm's statistics are sums in another
                             * order when split: fp32 reordering, ~2^-24 per
                             * term of a replica's 2-4 x 120 positions
                             * (a mis-split input is off by 0.5) */
                            int64_t ne = 1;
                            for (int i = 0; i < rf.output_rank; i++)
                                ne *= rf.output_shape[i];
                            double dn = max_rel(rn.output, rf.output, ne);
                            double ds = max_rel(rs.output, rf.output, ne);
                            good = rn.output_rank == rf.output_rank &&
                                   dn < 5e-5 && ds < 5e-5;
                            TH_CHECKF(t, good,
                                      "infer %s: outputs differ by %.3g "
                                      "(y null), %.3g (y split)",
                                      firsts[k], dn, ds);
                        } else {
                            double dn = max_rel(rn.grads, rf.grads, rf.n_grads);
                            double ds = max_rel(rs.grads, rf.grads, rf.n_grads);
                            good = rn.n_grads == rf.n_grads &&
                                   rs.n_grads == rf.n_grads && dn < 5e-5 &&
                                   ds < 5e-5 &&
                                   fabs(rn.loss - rf.loss) <=
                                       1e-6 * fabs(rf.loss) &&
                                   fabs(rs.loss - rf.loss) <=
                                       1e-6 * fabs(rf.loss);
                            TH_CHECKF(t, good,
                                      "train %s: gradients differ by %.3g "
                                      "(y null), %.3g (y split); loss %.9g, "
                                      "%.9g vs %.9g",
                                      firsts[k], dn, ds, rn.loss, rs.loss,
                                      rf.loss);
                        }
                        ok += good;
                        emu_result_free(&rs);
                    }
                    emu_result_free(&rn);
                }
                emu_result_free(&rf);
            }
            graph_free(&gf);
            graph_free(&gn);
            graph_free(&gs);
        }
    TH_CHECKF(t, ok == 2 * n, "%d of %d runs agree", ok, 2 * n);
}

/* Writes file `in` with its blanks removed and `from` replaced by `to`
 * (the traces here have no blank in a name). */
static int variant(th_ctx *t, const char *in, const char *from,
                   const char *to, const char *out)
{
    static char text[16384];
    FILE *f = fopen(in, "rb");
    if (!TH_CHECKF(t, f != NULL, "cannot open %s", in))
        return 0;
    size_t n = fread(text, 1, sizeof text - 1, f), j = 0;
    fclose(f);
    for (size_t i = 0; i < n; i++)
        if (text[i] != ' ' && text[i] != '\n')
            text[j++] = text[i];
    text[j] = 0;
    char *at = strstr(text, from);
    if (!TH_CHECKF(t, at != NULL, "%s: no %s", in, from))
        return 0;
    f = fopen(out, "wb");
    if (!TH_CHECKF(t, f != NULL, "cannot write %s", out))
        return 0;
    fprintf(f, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    fclose(f);
    return 1;
}

static int count(const char *s, const char *what)
{
    int n = 0;
    for (const char *p = strstr(s, what); p; p = strstr(p + 1, what))
        n++;
    return n;
}

static void cli_cases(th_ctx *t)
{
    th_case(t, "cli: the probe's two-stream trace with depth null runs a "
               "different program and step time than with depth split; "
               "another split is refused (exit 2, the JSON path)");
    char split[512], null_[512], other[512];
    snprintf(split, sizeof split, "%s/ts-split.json", th_tmpdir());
    snprintf(null_, sizeof null_, "%s/ts-null.json", th_tmpdir());
    snprintf(other, sizeof other, "%s/ts-other.json", th_tmpdir());
    static const char *const all = "[[1,2,1,1],[1,2,1,1],null]";
    if (!variant(t, PROBE, all, all, split) ||
        !variant(t, PROBE, all, "[[1,2,1,1],null,null]", null_) ||
        !variant(t, PROBE, all, "[[1,2,1,1],[1,1,2,1],null]", other))
        return;
    static th_cmd_result a, b;
    th_run(&a, "%s run %s --quiet", th_bin(), split);
    th_run(&b, "%s run %s --quiet", th_bin(), null_);
    TH_CHECKF(t, a.status == 0 && b.status == 0, "exit %d, %d: %s %s",
              a.status, b.status, a.err, b.err);
    TH_CHECKF(t, strcmp(a.out, b.out) != 0,
              "step time %s with depth split and null", a.out);
    th_run(&a, "%s lower %s", th_bin(), split);
    th_run(&b, "%s lower %s", th_bin(), null_);
    TH_CHECKF(t, a.status == 0 && b.status == 0 && strcmp(a.out, b.out) != 0,
              "lower: exit %d, %d; the programs are %s", a.status, b.status,
              strcmp(a.out, b.out) ? "different" : "identical");
    /* the replicated input's conv reads it whole: one halo less */
    TH_CHECKF(t, count(b.out, "ici.halo") < count(a.out, "ici.halo"),
              "halo exchanges: %d with depth null, %d with depth split",
              count(b.out, "ici.halo"), count(a.out, "ici.halo"));
    th_run(&a, "%s run %s --quiet", th_bin(), other);
    TH_CHECKF(t,
              a.status == 2 &&
                  strstr(a.err, "run.input_partition_dims[1]: tpuemu splits "
                                "every input like the first ([1,2,1,1]); "
                                "'depth' asks for [1,1,2,1]") != NULL,
              "exit %d: %s", a.status, a.err);
    th_run(&a, "%s lower %s", th_bin(), other);
    TH_CHECKF(t, a.status == 2 && strstr(a.err, "input_partition_dims[1]"),
              "lower: exit %d: %s", a.status, a.err);

    th_case(t, "cli: the valid forms of the refused traces load (a flat or "
               "3D second input null)");
    static const char *const bad[] = {"95-pdims-second-differs",
                                      "96-pdims-second-rank"};
    static const char *const from[] = {"[1,1,2,1]", "[1,2,1,1,1]"};
    for (int k = 0; k < 2; k++) {
        char in[256], out[512];
        snprintf(in, sizeof in, "test/bad_traces/%s.json", bad[k]);
        snprintf(out, sizeof out, "%s/fixed-%d.json", th_tmpdir(), k);
        char key[64];
        snprintf(key, sizeof key, "[[1,2,1,1],%s,null]", from[k]);
        if (!variant(t, in, key, "[[1,2,1,1],null,null]", out))
            continue;
        th_run(&a, "%s run %s --quiet", th_bin(), in);
        th_run(&b, "%s run %s --quiet", th_bin(), out);
        TH_CHECKF(t, a.status == 2 && b.status == 0,
                  "%s: exit %d (want 2); fixed: exit %d (want 0): %s", bad[k],
                  a.status, b.status, b.err);
    }

    th_case(t, "cli: RGB-D with depth null (concatenated with the split "
               "image at once) runs, slicing its box, with the same output "
               "as depth split and as no partitioning");
    static const char *const rgbd[] = {"[[1,2,1,1],null,null]",
                                       "[[1,2,1,1],[1,2,1,1],null]",
                                       "[null,null,null]"};
    char sum[3][64] = {{0}}, prog[2][96] = {{0}};
    for (int k = 0; k < 3; k++) {
        char tr[512], rep[512];
        snprintf(tr, sizeof tr, "%s/rgbd-%d.json", th_tmpdir(), k);
        snprintf(rep, sizeof rep, "%s/rgbd-%d-report.json", th_tmpdir(), k);
        if (!variant(t, "test/inputsplit/rgbd-depth-null.json",
                     "\"num_cores_per_replica\":2,\"input_partition_dims\":"
                     "[[1,2,1,1],null,null]",
                     k == 2 ? "\"num_cores_per_replica\":1,"
                              "\"input_partition_dims\":[null,null,null]"
                            : k == 1 ? "\"num_cores_per_replica\":2,"
                                       "\"input_partition_dims\":"
                                       "[[1,2,1,1],[1,2,1,1],null]"
                                     : "\"num_cores_per_replica\":2,"
                                       "\"input_partition_dims\":"
                                       "[[1,2,1,1],null,null]",
                     tr))
            return;
        th_run(&a, "%s run %s --functional --quiet --report %s >/dev/null && grep "
                   "output_checksum %s",
               th_bin(), tr, rep, rep);
        TH_CHECKF(t, a.status == 0, "%s: exit %d: %s", rgbd[k], a.status,
                  a.err);
        snprintf(sum[k], sizeof sum[k], "%.60s", a.out);
        if (k < 2) {
            th_run(&b, "%s lower %s | grep -c vpu.op", th_bin(), tr);
            snprintf(prog[k], sizeof prog[k], "%.90s", b.out);
        }
    }
    TH_CHECKF(t, strstr(sum[0], "output_checksum") &&
                     strcmp(sum[0], sum[1]) == 0 && strcmp(sum[0], sum[2]) == 0,
              "checksums: null %s, split %s, unpartitioned %s", sum[0],
              sum[1], sum[2]);
    /* the slice of the replicated depth is a pass of the concat's own */
    TH_CHECKF(t, atoi(prog[0]) > atoi(prog[1]),
              "concat passes: %s with depth null, %s with depth split",
              prog[0], prog[1]);
}

void th_suite_inputsplit(th_ctx *t)
{
    plan_cases(t);
    dead_case(t);
    functional_cases(t);
    cli_cases(t);
}
