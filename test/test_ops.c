/* The elementwise and activation ops, and the normalisations, pad, crop,
 * resize, reshape and global max pooling (docs/TRACE.md): shape inference and
 * refusals, the lowering's cost against a hand count, --functional values
 * against the formulas computed here in double, partitioned runs equal to
 * one core, and gradients against central differences
 * (test/ops/ops-train.json; ops3-train.json for the per-position gates). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/fx/fxdata.h"
#include "emu/sim.h"
#include "firmware/lower.h"
#include "test/harness.h"

#define TRAIN "test/ops/ops-train.json"
#define TRAIN2 "test/ops/ops2-train.json"
#define TRAIN3 "test/ops/ops3-train.json"

static int parse(th_ctx *t, graph *g, const char *layers, const char *inputs,
                 const char *mode, tpu_error *err)
{
    char text[4096];
    snprintf(text, sizeof text,
             "{\"format\": \"tpuemu-trace/1\", \"name\": \"t\", \"system\": "
             "\"v3-8\", \"run\": {\"mode\": \"%s\", \"global_batch\": 8}, "
             "\"graph\": {\"inputs\": [%s], \"layers\": [%s]}}",
             mode, inputs, layers);
    memset(g, 0, sizeof *g);
    (void)t;
    return graph_parse(g, text, strlen(text), "t.json", err) == TPU_OK;
}

static const char *const SE_IN =
    "{\"name\": \"x\", \"shape\": [8, 8, 16]}";

static void shape_cases(th_ctx *t)
{
    th_case(t, "elementwise broadcasts [C] and [1,1,C]; activations keep "
               "the shape; prelu has one weight per channel");
    graph g;
    tpu_error err = {0};
    int ok = parse(t, &g,
                   "{\"name\": \"g\", \"op\": \"global_avgpool\", \"in\": "
                   "\"x\"},"
                   "{\"name\": \"m\", \"op\": \"elementwise\", \"kind\": "
                   "\"multiply\", \"in\": [\"g\", \"x\"]},"
                   "{\"name\": \"p\", \"op\": \"activation\", \"kind\": "
                   "\"prelu\", \"in\": \"m\"},"
                   "{\"name\": \"s\", \"op\": \"activation\", \"kind\": "
                   "\"softmax\", \"in\": \"p\"},"
                   "{\"name\": \"a\", \"op\": \"elementwise\", \"kind\": "
                   "\"average\", \"in\": [\"s\", \"p\", \"x\"]}",
                   SE_IN, "infer", &err);
    if (!TH_CHECKF(t, ok, "%s", err.msg))
        return;
    const glayer *m = &g.layers[2], *p = &g.layers[3], *a = &g.layers[5];
    TH_CHECK(t, m->out.nsp == 2 && m->out.sp[0] == 8 && m->out.c == 16);
    TH_CHECK(t, graph_ew_broadcast(&g, m, 0) && !graph_ew_broadcast(&g, m, 1));
    TH_CHECK(t, p->weights == 16 && graph_weights(&g) == 16);
    TH_CHECK(t, a->out.c == 16 && a->n_in == 3);
    /* FLOPs: one per element (prelu); multiply 1 per element, average of 3
     * 3 per element */
    TH_CHECK(t, graph_layer_flops(&g, 3) == 8 * 8 * 16);
    TH_CHECK(t, graph_layer_flops(&g, 5) == 3 * 8 * 8 * 16);
    graph_free(&g);

    th_case(t, "elementwise broadcasts one value per position ([H,W,1], "
               "C = 1) over the channels, whichever operand it is, for "
               "multiply and add; [C] and [1,1,C] stay per channel");
    ok = parse(t, &g,
               "{\"name\": \"q\", \"op\": \"conv\", \"in\": \"x\", "
               "\"filters\": 1, \"kernel\": [1, 1]},"
               "{\"name\": \"m\", \"op\": \"elementwise\", \"kind\": "
               "\"multiply\", \"in\": [\"q\", \"x\"]},"
               "{\"name\": \"a\", \"op\": \"elementwise\", \"kind\": "
               "\"add\", \"in\": [\"m\", \"q\"]},"
               "{\"name\": \"g\", \"op\": \"global_avgpool\", \"in\": "
               "\"a\"},"
               "{\"name\": \"s\", \"op\": \"elementwise\", \"kind\": "
               "\"add\", \"in\": [\"a\", \"g\"]}",
               SE_IN, "infer", &err);
    if (!TH_CHECKF(t, ok, "%s", err.msg))
        return;
    m = &g.layers[2];
    a = &g.layers[3];
    const glayer *sl = &g.layers[5];
    TH_CHECK(t, m->out.nsp == 2 && m->out.sp[1] == 8 && m->out.c == 16);
    TH_CHECK(t, graph_ew_broadcast(&g, m, 0) == GEW_BC_POSITION &&
                    graph_ew_broadcast(&g, m, 1) == GEW_BC_NONE);
    TH_CHECK(t,
             a->out.c == 16 && graph_ew_broadcast(&g, a, 1) == GEW_BC_POSITION);
    TH_CHECK(t, sl->out.c == 16 &&
                    graph_ew_broadcast(&g, sl, 1) == GEW_BC_CHANNEL);
    TH_CHECK(t, graph_layer_flops(&g, 3) == 8 * 8 * 16);
    graph_free(&g);

    th_case(t, "refusals name the key: shapes that do not broadcast, "
               "subtract of 3, alpha where the kind has none");
    static const struct {
        const char *layers, *want;
    } bad[] = {
        {"{\"name\": \"d\", \"op\": \"dense\", \"in\": \"x\", \"units\": 4},"
         "{\"name\": \"m\", \"op\": \"elementwise\", \"kind\": \"multiply\", "
         "\"in\": [\"x\", \"d\"]}",
         "graph.layers[1].in: multiply needs identical shapes, one value "
         "per channel ([C] or [1,1,C]) or one per position ([H,W,1]) to "
         "broadcast: 'x' is [8,8,16], 'd' is [8,8,4]"},
        {"{\"name\": \"q\", \"op\": \"conv\", \"in\": \"x\", "
         "\"filters\": 1, \"kernel\": [1, 1], \"strides\": [2, 2]},"
         "{\"name\": \"m\", \"op\": \"elementwise\", \"kind\": \"add\", "
         "\"in\": [\"x\", \"q\"]}",
         "graph.layers[1].in: add needs identical shapes, one value per "
         "channel ([C] or [1,1,C]) or one per position ([H,W,1]) to "
         "broadcast: 'x' is [8,8,16], 'q' is [4,4,1]"},
        {"{\"name\": \"m\", \"op\": \"elementwise\", \"kind\": \"subtract\", "
         "\"in\": [\"x\", \"x\", \"x\"]}",
         "graph.layers[0].in: subtract takes exactly 2 inputs, found 3"},
        {"{\"name\": \"m\", \"op\": \"activation\", \"kind\": \"tanh\", "
         "\"in\": \"x\", \"alpha\": 0.2}",
         "graph.layers[0].alpha: not a key of activation 'tanh'"},
        {"{\"name\": \"m\", \"op\": \"activation\", \"kind\": \"swish2\", "
         "\"in\": \"x\"}",
         "graph.layers[0].kind"},
        {"{\"name\": \"m\", \"op\": \"elementwise\", \"kind\": \"multiply\", "
         "\"in\": \"x\"}",
         "graph.layers[0].in: expected a list of 2 to 16 names"},
        {"{\"name\": \"m\", \"op\": \"activation\", \"kind\": \"relu\", "
         "\"in\": \"x\", \"trainable\": false}",
         "graph.layers[0].trainable: activation 'relu' has no weights"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        tpu_error e = {0};
        int got = parse(t, &g, bad[k].layers, SE_IN, "infer", &e);
        TH_CHECKF(t, !got && strstr(e.msg, bad[k].want), "case %zu: %s", k,
                  e.msg);
        graph_free(&g);
    }
}

/* Sum over layer l's vector passes of one phase: elements (loops
 * unrolled) and the ops per element they use (the last seen). */
static void vec_sum(const fw_program *p, int l, int phase, double *elems,
                    double *ops)
{
    int64_t mult[8] = {1}, depth = 0;
    *elems = 0;
    *ops = 0;
    for (size_t i = 0; i < p->n; i++) {
        const fw_insn *in = &p->code[i];
        if (in->op == FW_LOOP && depth < 7) {
            depth++;
            mult[depth] = mult[depth - 1] * in->a;
        } else if (in->op == FW_ENDLOOP && depth > 0) {
            depth--;
        } else if (in->op == FW_VEC && in->layer == l &&
                   in->phase == phase && !in->recompute &&
                   in->fx != FX_NONE) { /* not the sums of gradients */
            *elems += (double)in->a * (double)mult[depth];
            *ops = (double)in->b / 100.0;
        }
    }
}

/* A layer's vector passes: elements ('o' its output's, 'i' its input's,
 * '-' no pass) and operations per element, forward and backward. */
typedef struct {
    const char *name;
    char fe, be;
    double fwd, bwd;
} vec_want;

/* Lowers the trace at path on one core (v3-2, no split) and checks each
 * listed layer's vector passes. */
static void check_vec(th_ctx *t, const char *path, const vec_want *want,
                      size_t n)
{
    graph g;
    tpu_error err = {0};
    if (!TH_CHECKF(t, graph_load(&g, path, &err) == 0, "%s", err.msg))
        return;
    g.pdims_rank = 0;
    g.cores_per_replica = 1;
    sim_opts o;
    sim_opts_default(&o);
    o.system = "v3-2";
    fw_program prog;
    fw_memory mem;
    if (!TH_CHECKF(t, sim_lower(&g, &o, 0, &prog, &mem, &err) == 0, "%s",
                   err.msg)) {
        graph_free(&g);
        return;
    }
    int64_t B = g.global_batch / 2;
    for (size_t k = 0; k < n; k++) {
        int l = graph_find(&g, want[k].name);
        double oe = (double)(B * gshape_elems(&g.layers[l].out));
        const glayer *in = &g.layers[g.layers[l].in[0]];
        double ie = (double)(B * gshape_elems(&in->out));
        for (int ph = 0; ph < 2; ph++) {
            char w = ph ? want[k].be : want[k].fe;
            double e, ops, we = w == 'o' ? oe : w == 'i' ? ie : 0;
            double wo = ph ? want[k].bwd : want[k].fwd;
            vec_sum(&prog, l, ph ? PHASE_BWD : PHASE_FWD, &e, &ops);
            TH_CHECKF(t, e == we && ops == wo,
                      "%s %s: %g elements at %g ops (want %g at %g)",
                      want[k].name, ph ? "backward" : "forward", e, ops, we,
                      wo);
        }
    }
    fw_program_free(&prog);
    graph_free(&g);
}

static void cost_cases(th_ctx *t)
{
    th_case(t, "cost: each activation's pass is its elements at the "
               "documented operations per element, forward and backward; "
               "multiply's at 3, its backward with the broadcast sum");
    /* one core: every pass covers the layer's whole output */
    static const vec_want want[] = {
        {"a1", 'o', 'o', 7, 9},  /* swish */
        {"s", 'o', 'o', 5, 4},   /* hard_sigmoid */
        {"a2", 'o', 'o', 7, 4},  /* elu */
        {"a3", 'o', 'o', 5, 6},  /* prelu: dx 3 + slope gradient 3 */
        {"a4", 'o', 'o', 7, 9},  /* gelu */
        {"a5", 'o', 'o', 5, 4},  /* relu, max_value and alpha: 2+1+2, 2+1+1 */
        {"a6", 'o', 'o', 3, 3},  /* tanh */
        {"a7", 'o', 'o', 7, 4},  /* softmax */
        {"a8", 'o', 'o', 3, 3},  /* leaky_relu */
        {"a9", 'o', 'o', 3, 3},  /* relu6 */
        {"m", 'o', 'o', 3, 4},   /* multiply of 2: dx of both + 1 + sum */
        {"sub", 'o', 'o', 3, 2}, /* subtract: second operand negated */
        {"mx", 'o', 'o', 4, 7},  /* maximum of 3: compare + select each */
        {"av", 'o', 'o', 4, 4},  /* average: 1/n scale; broadcast sum */
    };
    check_vec(t, TRAIN, want, sizeof want / sizeof want[0]);
}

/* Layer l's collectives of one phase. */
static int collectives(const fw_program *p, int l, int phase, int op)
{
    int n = 0;
    for (size_t i = 0; i < p->n; i++)
        n += p->code[i].op == op && p->code[i].layer == l &&
             p->code[i].phase == phase;
    return n;
}

static void cost3_cases(th_ctx *t)
{
    th_case(t, "cost (ops3-train.json): a per-position operand streams with "
               "the map; its gradient is one more operation an element (the "
               "sum over the channels), local: no all-reduce where a "
               "per-channel operand's has one");
    graph g;
    tpu_error err = {0};
    if (!TH_CHECKF(t, graph_load(&g, TRAIN3, &err) == 0, "%s", err.msg))
        return;
    sim_opts o;
    sim_opts_default(&o);
    fw_program prog;
    fw_memory mem;
    /* the trace's 4-way split: no collective of any gate's own */
    if (!TH_CHECKF(t, sim_lower(&g, &o, 0, &prog, &mem, &err) == 0, "%s",
                   err.msg)) {
        graph_free(&g);
        return;
    }
    static const char *const gates[] = {"gm", "ga", "gs", "gx", "gv"};
    for (size_t k = 0; k < sizeof gates / sizeof gates[0]; k++) {
        int l = graph_find(&g, gates[k]);
        TH_CHECKF(t,
                  collectives(&prog, l, PHASE_BWD, FW_ALLREDUCE) == 0 &&
                      collectives(&prog, l, PHASE_FWD, FW_ALLREDUCE) == 0,
                  "%s: an all-reduce", gates[k]);
    }
    fw_program_free(&prog);
    graph_free(&g);
    graph g1;
    if (TH_CHECKF(t, graph_load(&g1, TRAIN, &err) == 0, "%s", err.msg)) {
        if (TH_CHECKF(t, sim_lower(&g1, &o, 0, &prog, &mem, &err) == 0, "%s",
                      err.msg)) {
            TH_CHECK(t, collectives(&prog, graph_find(&g1, "m"), PHASE_BWD,
                                    FW_ALLREDUCE) == 1);
            fw_program_free(&prog);
        }
        graph_free(&g1);
    }
    /* multiply: 1 + dx 1 + the gate's 1 and its sum; add: 1 + the gate's
     * sum (the map's dY aliased); subtract: 1 + negate + sum; maximum of
     * 3: compare + select each, + sum; average: 1 + 1/n each + sum */
    static const vec_want want[] = {
        {"gm", 'o', 'o', 3, 4}, {"ga", 'o', 'o', 3, 2}, {"gs", 'o', 'o', 3, 3},
        {"gx", 'o', 'o', 4, 8}, {"gv", 'o', 'o', 4, 4},
    };
    check_vec(t, TRAIN3, want, sizeof want / sizeof want[0]);
}

static void cost2_cases(th_ctx *t)
{
    th_case(t, "cost (ops2-train.json, one core): normalise passes at 4 "
               "operations an element and dx at 6, normalize 3, pad and "
               "crop 1 (backward over the input), resize 5 each way, "
               "global_maxpool 2 and 3 over its input");
    /* elements: 'o' the output's, 'i' the input's, '-' no pass */
    static const vec_want want[] = {
        {"nz", 'o', '-', 3, 0}, {"gn", 'o', 'o', 4, 6}, {"ln", 'o', 'o', 4, 6},
        {"in", 'o', 'o', 4, 6}, {"p", 'o', 'i', 1, 1},  {"cr", 'o', 'i', 1, 1},
        {"r", 'o', 'o', 5, 5},  {"gm", 'i', 'i', 2, 3},
    };
    check_vec(t, TRAIN2, want, sizeof want / sizeof want[0]);
}

/* Layer `name`'s output (and the layer `src`'s) of one step. */
static float *output_of(th_ctx *t, const graph *g, const char *name,
                        int64_t *n)
{
    sim_opts o;
    sim_opts_default(&o);
    o.functional = 1;
    o.output_layer = name;
    emu_result r;
    tpu_error err = {0};
    if (!TH_CHECKF(t, sim_run(g, &o, &r, &err) == 0, "%s: %s", name, err.msg))
        return NULL;
    *n = 1;
    for (int i = 0; i < r.output_rank; i++)
        *n *= r.output_shape[i];
    float *v = malloc(sizeof(float) * (size_t)(*n + 1));
    if (v)
        memcpy(v, r.output, sizeof(float) * (size_t)*n);
    emu_result_free(&r);
    return v;
}

static double ref_act(const char *kind, double v)
{
    if (!strcmp(kind, "swish"))
        return v / (1 + exp(-v));
    if (!strcmp(kind, "gelu"))
        return 0.5 * v * (1 + erf(v / sqrt(2.0)));
    if (!strcmp(kind, "elu"))
        return v > 0 ? v : exp(v) - 1;
    if (!strcmp(kind, "hard_sigmoid"))
        return fmin(1, fmax(0, 0.2 * v + 0.5));
    if (!strcmp(kind, "tanh"))
        return tanh(v);
    if (!strcmp(kind, "relu6"))
        return fmin(6, fmax(0, v));
    if (!strcmp(kind, "leaky_relu"))
        return v > 0 ? v : 0.3 * v;
    return v;
}

static void value_cases(th_ctx *t)
{
    th_case(t, "values: each activation of the input, multiply by a "
               "broadcast [C], softmax over the channels, against the "
               "formulas in double (f32 layers: within 1e-5)");
    static const char *const kinds[] = {"swish", "gelu", "elu",
                                        "hard_sigmoid", "tanh", "relu6",
                                        "leaky_relu"};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        char layers[512];
        snprintf(layers, sizeof layers,
                 "{\"name\": \"c\", \"op\": \"conv\", \"in\": \"x\", "
                 "\"filters\": 4, \"kernel\": [3, 3], \"dtype\": \"f32\"},"
                 "{\"name\": \"a\", \"op\": \"activation\", \"kind\": \"%s\", "
                 "\"in\": \"c\", \"dtype\": \"f32\"}",
                 kinds[k]);
        graph g;
        tpu_error err = {0};
        if (!TH_CHECKF(t,
                       parse(t, &g, layers,
                             "{\"name\": \"x\", \"shape\": [6, 5, 3], "
                             "\"dtype\": \"f32\"}",
                             "infer", &err),
                       "%s", err.msg))
            continue;
        int64_t n = 0, n2 = 0;
        float *x = output_of(t, &g, "c", &n), *y = output_of(t, &g, "a", &n2);
        double worst = 0;
        for (int64_t i = 0; x && y && n == n2 && i < n; i++)
            worst = fmax(worst, fabs(y[i] - ref_act(kinds[k], x[i])));
        TH_CHECKF(t, x && y && n == n2 && n > 0 && worst < 1e-5,
                  "%s: off by %g", kinds[k], worst);
        free(x);
        free(y);
        graph_free(&g);
    }

    graph g;
    tpu_error err = {0};
    if (!TH_CHECKF(t,
                   parse(t, &g,
                         "{\"name\": \"c\", \"op\": \"conv\", \"in\": \"x\", "
                         "\"filters\": 4, \"kernel\": [3, 3], \"dtype\": "
                         "\"f32\"},"
                         "{\"name\": \"g\", \"op\": \"global_avgpool\", "
                         "\"in\": \"c\", \"dtype\": \"f32\"},"
                         "{\"name\": \"m\", \"op\": \"elementwise\", "
                         "\"kind\": \"multiply\", \"in\": [\"c\", \"g\"], "
                         "\"dtype\": \"f32\"},"
                         "{\"name\": \"s\", \"op\": \"activation\", "
                         "\"kind\": \"softmax\", \"in\": \"m\", \"dtype\": "
                         "\"f32\"}",
                         "{\"name\": \"x\", \"shape\": [6, 5, 3], "
                         "\"dtype\": \"f32\"}",
                         "infer", &err),
                   "%s", err.msg))
        return;
    int64_t nc = 0, ng = 0, nm = 0, ns = 0;
    float *c = output_of(t, &g, "c", &nc), *gp = output_of(t, &g, "g", &ng),
          *m = output_of(t, &g, "m", &nm), *s = output_of(t, &g, "s", &ns);
    if (c && gp && m && s && nc == nm && nm == ns) {
        int64_t C = 4, per = nc / 8; /* 8 examples */
        double wm = 0, ws = 0;
        for (int64_t i = 0; i < nc; i++) {
            int64_t b = i / per, ch = i % C;
            wm = fmax(wm, fabs(m[i] - (double)c[i] * gp[b * C + ch]));
        }
        for (int64_t r = 0; r < nc / C; r++) {
            double mx = -INFINITY, sum = 0;
            for (int64_t ch = 0; ch < C; ch++)
                mx = fmax(mx, m[r * C + ch]);
            for (int64_t ch = 0; ch < C; ch++)
                sum += exp(m[r * C + ch] - mx);
            for (int64_t ch = 0; ch < C; ch++)
                ws = fmax(ws, fabs(s[r * C + ch] -
                                   exp(m[r * C + ch] - mx) / sum));
        }
        TH_CHECKF(t, wm < 1e-5 && ws < 1e-6, "multiply off by %g, softmax %g",
                  wm, ws);
    } else {
        TH_FAIL(t, "outputs missing or of other sizes");
    }
    free(c);
    free(gp);
    free(m);
    free(s);
    graph_free(&g);
}

static void gate_value_cases(th_ctx *t)
{
    th_case(t, "values: a [H,W,1] gate multiplies and adds to each "
               "position's channels, against the formulas in double (f32: "
               "within 1e-6 of the scale)");
    graph g;
    tpu_error err = {0};
    if (!TH_CHECKF(t,
                   parse(t, &g,
                         "{\"name\": \"c\", \"op\": \"conv\", \"in\": \"x\", "
                         "\"filters\": 4, \"kernel\": [3, 3], \"dtype\": "
                         "\"f32\"},"
                         "{\"name\": \"q\", \"op\": \"conv\", \"in\": \"c\", "
                         "\"filters\": 1, \"kernel\": [1, 1], \"dtype\": "
                         "\"f32\"},"
                         "{\"name\": \"m\", \"op\": \"elementwise\", "
                         "\"kind\": \"multiply\", \"in\": [\"c\", \"q\"], "
                         "\"dtype\": \"f32\"},"
                         "{\"name\": \"a\", \"op\": \"elementwise\", "
                         "\"kind\": \"add\", \"in\": [\"q\", \"m\"], "
                         "\"dtype\": \"f32\"}",
                         "{\"name\": \"x\", \"shape\": [6, 5, 3], "
                         "\"dtype\": \"f32\"}",
                         "infer", &err),
                   "%s", err.msg))
        return;
    int64_t nc = 0, nq = 0, nm = 0, na = 0;
    float *c = output_of(t, &g, "c", &nc), *q = output_of(t, &g, "q", &nq),
          *m = output_of(t, &g, "m", &nm), *a = output_of(t, &g, "a", &na);
    if (c && q && m && a && nc == nm && nm == na && nq * 4 == nc) {
        double wm = 0, wa = 0, sc = 0;
        for (int64_t i = 0; i < nc; i++) {
            double gq = q[i / 4];
            sc = fmax(sc, fabs(c[i]) * (1 + fabs(gq)) + fabs(gq));
            wm = fmax(wm, fabs(m[i] - (double)c[i] * gq));
            wa = fmax(wa, fabs(a[i] - (gq + m[i])));
        }
        TH_CHECKF(t, sc > 0 && wm <= 1e-6 * sc && wa <= 1e-6 * sc,
                  "multiply off by %g, add %g (scale %g)", wm, wa, sc);
    } else {
        TH_FAIL(t, "outputs missing or of other sizes");
    }
    free(c);
    free(q);
    free(m);
    free(a);
    graph_free(&g);
}

static void norm_value_cases(th_ctx *t)
{
    th_case(t, "values: layer_norm over each position's channels and "
               "group_norm over each example's groups (fresh gamma 1, beta "
               "0, eps 1e-3), against the formulas in double");
    static const char *const ops[] = {"layer_norm", "group_norm"};
    for (int k = 0; k < 2; k++) {
        char layers[512];
        snprintf(layers, sizeof layers,
                 "{\"name\": \"c\", \"op\": \"conv\", \"in\": \"x\", "
                 "\"filters\": 4, \"kernel\": [3, 3], \"dtype\": \"f32\"},"
                 "{\"name\": \"n\", \"op\": \"%s\", \"in\": \"c\", "
                 "%s\"dtype\": \"f32\"}",
                 ops[k], k ? "\"groups\": 2, " : "");
        graph g;
        tpu_error err = {0};
        if (!TH_CHECKF(t,
                       parse(t, &g, layers,
                             "{\"name\": \"x\", \"shape\": [6, 5, 3], "
                             "\"dtype\": \"f32\"}",
                             "infer", &err),
                       "%s", err.msg))
            continue;
        int64_t n = 0, n2 = 0;
        float *x = output_of(t, &g, "c", &n), *y = output_of(t, &g, "n", &n2);
        double worst = 0;
        int64_t C = 4, per = n / 8, npos = per / C, cg = k ? 2 : C;
        /* sets: layer_norm one per example and position (its C channels),
         * group_norm one per example and group (npos x cg elements) */
        int64_t nsets = k ? 8 * (C / cg) : 8 * npos;
        for (int64_t st = 0; x && y && n == n2 && st < nsets; st++) {
            int64_t b = k ? st / (C / cg) : st / npos;
            int64_t p0 = k ? 0 : st % npos, p1 = k ? npos : p0 + 1;
            int64_t c0 = k ? (st % (C / cg)) * cg : 0;
            double m = 0, q = 0, cnt = 0;
            for (int64_t p = p0; p < p1; p++)
                for (int64_t ch = c0; ch < c0 + cg; ch++) {
                    double v = x[b * per + p * C + ch];
                    m += v;
                    q += v * v;
                    cnt++;
                }
            m /= cnt;
            double inv = 1 / sqrt(q / cnt - m * m + 1e-3);
            for (int64_t p = p0; p < p1; p++)
                for (int64_t ch = c0; ch < c0 + cg; ch++) {
                    int64_t e = b * per + p * C + ch;
                    worst = fmax(worst, fabs(y[e] - (x[e] - m) * inv));
                }
        }
        TH_CHECKF(t, x && y && n == n2 && n > 0 && worst < 1e-4,
                  "%s: off by %g", ops[k], worst);
        free(x);
        free(y);
        graph_free(&g);
    }
}

static int run(th_ctx *t, const graph *g, const char *sys, emu_result *r,
               const float *w0, int64_t nw)
{
    sim_opts o;
    sim_opts_default(&o);
    o.functional = 1;
    o.system = sys;
    o.init_weights = w0;
    o.n_init_weights = nw;
    tpu_error err = {0};
    return TH_CHECKF(t, sim_run(g, &o, r, &err) == 0, "%s", err.msg);
}

static void set_parts(graph *g, int a, int b)
{
    g->pdims_rank = 4;
    g->pdims[0] = g->pdims[3] = 1;
    g->pdims[1] = a;
    g->pdims[2] = b;
    g->cores_per_replica = a * b;
}

static double max_rel(const float *a, const float *b, int64_t n)
{
    double m = 0, s = 0;
    for (int64_t i = 0; i < n; i++)
        s = fmax(s, fabs(b[i]));
    for (int64_t i = 0; i < n; i++)
        m = fmax(m, fabs(a[i] - b[i]));
    return s > 0 ? m / s : m;
}

/* The starting weights as fexec.c draws them (Glorot kernels, zero
 * biases, zero prelu slopes), so one can be moved. */
static int start_weights(const graph *g, float *w, int64_t nw)
{
    int64_t o = 0;
    for (int l = 0; l < g->n_layers; l++) {
        const glayer *L = &g->layers[l];
        if (L->share_from >= 0 || L->weights <= 0)
            continue;
        if (o + L->weights > nw)
            return -1;
        int64_t taps = 1, cin = g->layers[L->in[0]].out.c;
        if (L->op == GOP_CONV)
            for (int d = 0; d < L->out.nsp; d++)
                taps *= L->kernel[d];
        int norm = L->op == GOP_LAYERNORM || L->op == GOP_GROUPNORM;
        int64_t nk = L->op == GOP_ACT || norm || L->op == GOP_NORMALIZE
                         ? 0
                         : taps * cin * L->out.c;
        for (int64_t i = 0; i < L->weights; i++)
            w[o + i] = i < nk ? fxd_weight(1, l, i, taps * cin,
                                           taps * L->out.c)
                              : 0.0f;
        /* gamma 1 (beta 0); normalize's variance 1 (mean and count 0) */
        for (int64_t i = 0; (norm || L->op == GOP_NORMALIZE) && i < L->out.c;
             i++)
            w[o + i + (norm ? 0 : L->out.c)] = 1.0f;
        o += L->weights;
    }
    return o == nw ? 0 : -1;
}

/* Whether weight i (in start_weights' order) belongs to a frozen layer
 * (normalize's statistics): no gradient, so no difference to compare. */
static int frozen_weight(const graph *g, int64_t i)
{
    int64_t o = 0;
    for (int l = 0; l < g->n_layers; l++) {
        const glayer *L = &g->layers[l];
        if (L->share_from >= 0 || L->weights <= 0)
            continue;
        if (i < o + L->weights)
            return L->frozen;
        o += L->weights;
    }
    return 0;
}

static void train_cases(th_ctx *t, const char *path, const char *what)
{
    th_case(t, what);
    graph g;
    tpu_error err = {0};
    if (!TH_CHECKF(t, graph_load(&g, path, &err) == 0, "%s", err.msg))
        return;
    set_parts(&g, 1, 1);
    emu_result flat;
    if (!run(t, &g, "v3-2", &flat, NULL, 0)) {
        graph_free(&g);
        return;
    }
    static const int parts[][2] = {{2, 2}, {4, 1}, {1, 4}};
    for (int k = 0; k < 3; k++) {
        set_parts(&g, parts[k][0], parts[k][1]);
        emu_result r;
        if (!run(t, &g, NULL, &r, NULL, 0))
            continue;
        double d = r.n_grads == flat.n_grads
                       ? max_rel(r.grads, flat.grads, r.n_grads)
                       : 1;
        TH_CHECKF(t,
                  d < 1e-5 && fabs(r.loss - flat.loss) <= 1e-6 * fabs(flat.loss),
                  "[%d,%d]: gradients differ by %.3g, loss %.9g vs %.9g",
                  parts[k][0], parts[k][1], d, r.loss, flat.loss);
        emu_result_free(&r);
    }
    /* central differences on one core, every 7th weight */
    set_parts(&g, 1, 1);
    int64_t nw = flat.n_grads;
    float *w0 = calloc((size_t)nw + 1, sizeof(float));
    double gmax = 0;
    for (int64_t i = 0; i < nw; i++)
        gmax = fmax(gmax, fabs(flat.grads[i]));
    int bad = 0, checked = 0;
    if (w0 && start_weights(&g, w0, nw) == 0) {
        for (int64_t i = 0; i < nw; i += th_asan() ? 41 : 7) {
            const double eps = 1e-2;
            if (frozen_weight(&g, i))
                continue;
            double l[2] = {0, 0};
            for (int s = 0; s < 2; s++) {
                float keep = w0[i];
                w0[i] = (float)(keep + (s ? eps : -eps));
                emu_result r;
                if (run(t, &g, "v3-2", &r, w0, nw)) {
                    l[s] = r.loss;
                    emu_result_free(&r);
                }
                w0[i] = keep;
            }
            double num = (l[1] - l[0]) / (2 * eps), ana = flat.grads[i];
            checked++;
            if (fabs(num - ana) > 5e-3 * gmax + 2e-2 * fabs(ana)) {
                bad++;
                TH_FAIL(t, "weight %lld: numerical %.6g, gradient %.6g",
                        (long long)i, num, ana);
            }
        }
    } else {
        TH_FAIL(t, "could not form the starting weights");
    }
    TH_CHECKF(t, checked > 10 && bad == 0, "%d of %d weights disagree", bad,
              checked);
    free(w0);
    emu_result_free(&flat);
    graph_free(&g);
}

/* Layer `name`'s output checksum in a --functional training step. */
static int layer_sum(th_ctx *t, const graph *g, const char *sys,
                     const char *name, uint64_t *sum)
{
    sim_opts o;
    sim_opts_default(&o);
    o.functional = 1;
    o.system = sys;
    o.output_layer = name;
    emu_result r;
    tpu_error err = {0};
    if (!TH_CHECKF(t, sim_run(g, &o, &r, &err) == 0, "%s: %s", name, err.msg))
        return 0;
    *sum = r.output_checksum;
    emu_result_free(&r);
    return 1;
}

static void gate_forward_cases(th_ctx *t)
{
    th_case(t, "ops3-train.json: every gate's values, partitioned 2x2, 4x1 "
               "and 1x4, are bit-identical to one core's (the gate is split "
               "with the map)");
    graph g;
    tpu_error err = {0};
    if (!TH_CHECKF(t, graph_load(&g, TRAIN3, &err) == 0, "%s", err.msg))
        return;
    static const char *const names[] = {"sg", "gm", "ga", "gs", "gx", "gv"};
    static const int parts[][2] = {{2, 2}, {4, 1}, {1, 4}};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        uint64_t flat = 0, got = 0;
        set_parts(&g, 1, 1);
        if (!layer_sum(t, &g, "v3-2", names[k], &flat))
            continue;
        for (int p = 0; p < 3; p++) {
            set_parts(&g, parts[p][0], parts[p][1]);
            if (layer_sum(t, &g, NULL, names[k], &got))
                TH_CHECKF(t, got == flat,
                          "%s [%d,%d]: checksum %016llx, one core %016llx",
                          names[k], parts[p][0], parts[p][1],
                          (unsigned long long)got, (unsigned long long)flat);
        }
    }
    graph_free(&g);
}

void th_suite_ops(th_ctx *t)
{
    shape_cases(t);
    cost_cases(t);
    cost2_cases(t);
    cost3_cases(t);
    value_cases(t);
    gate_value_cases(t);
    norm_value_cases(t);
    train_cases(t, TRAIN,
                "training (ops-train.json): 4-way partitionings give one "
                "core's loss and gradients (fp32 reordering), and the "
                "gradients agree with central differences");
    train_cases(t, TRAIN2,
                "training (ops2-train.json: normalize, group_norm, "
                "layer_norm, pad, crop, resize, global_maxpool, reshape): "
                "the same");
    gate_forward_cases(t);
    train_cases(t, TRAIN3,
                "training (ops3-train.json: [H,W,1] gates into multiply, "
                "add, subtract, maximum, average): the same");
}
