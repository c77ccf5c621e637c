/* run.optimizer (docs/TRACE.md): each optimizer's slots in the HBM need,
 * its update's bytes and LARS's norm passes in the lowering, the step time
 * they cost, the values --functional computes (against the formulas by
 * hand), --optimizer, the report's "optimizer", and bad input. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/fx/fexec.h"
#include "emu/fx/fx_internal.h"
#include "emu/plan.h"
#include "emu/report.h"
#include "emu/sim.h"
#include "test/harness.h"

/* conv 3x3x4 -> 8 with bias: 3*3*4*8 + 8 = 296 weights; batchnorm of 8
 * channels: gamma and beta, 16; dense 8 -> 10 with bias: 80 + 10 = 90.
 * 402 trainable weights, 1608 fp32 bytes. */
#define SMALL_W 402
#define SMALL_KERNELS (288 + 80)
static const char small_fmt[] =
    "{\"format\": \"tpuemu-trace/1\", \"name\": \"opt-small\", "
    "\"system\": \"v3-8\", \"run\": {\"mode\": \"train\", \"global_batch\": "
    "8, \"num_cores_per_replica\": 1%s}, \"graph\": {\"inputs\": [{\"name\": "
    "\"x\", \"shape\": [8, 8, 4], \"dtype\": \"f32\"}], \"layers\": ["
    "{\"name\": \"conv\", \"op\": \"conv\", \"in\": \"x\", \"filters\": 8, "
    "\"kernel\": [3, 3], \"use_bias\": true, \"dtype\": \"f32\"},"
    "{\"name\": \"bn\", \"op\": \"batchnorm\", \"in\": \"conv\", \"dtype\": "
    "\"f32\"},"
    "{\"name\": \"gap\", \"op\": \"global_avgpool\", \"in\": \"bn\", "
    "\"dtype\": \"f32\"},"
    "{\"name\": \"logits\", \"op\": \"dense\", \"in\": \"gap\", \"units\": "
    "10, \"use_bias\": true, \"dtype\": \"f32\"},"
    "{\"name\": \"loss\", \"op\": \"loss\", \"in\": \"logits\", \"kind\": "
    "\"softmax_xent\", \"dtype\": \"f32\"}]}}";

/* The small trace with `run_extra` appended to its run section. */
static int parse_small(th_ctx *t, graph *g, const char *run_extra, tpu_error *e)
{
    char text[4096];
    snprintf(text, sizeof text, small_fmt, run_extra);
    tpu_status st = graph_parse(g, text, strlen(text), "opt-small.json", e);
    if (t && st)
        TH_FAIL(t, "%s", e->msg);
    return st == TPU_OK;
}

static int lower(th_ctx *t, const graph *g, fw_program *prog, fw_memory *mem)
{
    sim_opts o;
    sim_opts_default(&o);
    tpu_error e = {0};
    if (sim_lower(g, &o, 0, prog, mem, &e)) {
        TH_FAIL(t, "%s", e.msg);
        return 0;
    }
    return 1;
}

/* The update phase's vector passes and bytes loaded and stored. */
typedef struct {
    int passes;
    double ld, st;
} upd_tally;

static void tally_update(const fw_program *p, upd_tally *u)
{
    memset(u, 0, sizeof *u);
    for (size_t i = 0; i < p->n; i++) {
        const fw_insn *in = &p->code[i];
        if (in->phase != PHASE_UPDATE)
            continue;
        u->passes += in->op == FW_VEC;
        if (in->op == FW_DMA_LD)
            u->ld += (double)in->a;
        if (in->op == FW_DMA_ST)
            u->st += (double)in->a;
    }
}

static const struct {
    const char *run; /* the run section's optimizer */
    int slots;       /* fp32 slots per weight */
    int rd, wr;      /* fp32 tensors the update reads and writes */
    int norms;       /* LARS's norm passes: two per kernel */
} cases[] = {
    {"", 1, 3, 2, 0},
    {", \"optimizer\": \"sgd\"", 0, 2, 1, 0},
    {", \"optimizer\": \"momentum\"", 1, 3, 2, 0},
    {", \"optimizer\": \"adam\"", 2, 4, 3, 0},
    {", \"optimizer\": \"rmsprop\"", 1, 3, 2, 0},
    {", \"optimizer\": {\"name\": \"rmsprop\", \"momentum\": 0.9}", 2, 4, 3, 0},
    {", \"optimizer\": {\"name\": \"lars\"}", 1, 3, 2, 4},
};

static void test_state_and_update(th_ctx *t)
{
    th_case(t, "HBM state and update bytes per optimizer, by hand");
    const double wb = SMALL_W * 4.0;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        graph g;
        tpu_error e = {0};
        if (!parse_small(t, &g, cases[k].run, &e))
            continue;
        TH_CHECKF(t, graph_trainable_weights(&g) == SMALL_W,
                  "the hand count: %lld weights",
                  (long long)graph_trainable_weights(&g));
        fw_program prog;
        fw_memory mem;
        if (lower(t, &g, &prog, &mem)) {
            TH_CHECKF(t,
                      mem.weights_bytes == wb && mem.grads_bytes == wb &&
                          mem.opt_bytes == cases[k].slots * wb,
                      "'%s': weights %g, gradients %g, optimizer %g bytes "
                      "(expected %g, %g, %g)",
                      cases[k].run, mem.weights_bytes, mem.grads_bytes,
                      mem.opt_bytes, wb, wb, cases[k].slots * wb);
            upd_tally u;
            tally_update(&prog, &u);
            /* every pass of this small step is one tile */
            double norm_ld = cases[k].norms ? 2.0 * SMALL_KERNELS * 4 : 0;
            TH_CHECKF(t,
                      u.passes == 1 + cases[k].norms &&
                          u.ld == cases[k].rd * wb + norm_ld &&
                          u.st == cases[k].wr * wb,
                      "'%s': %d update passes, %g bytes read, %g written "
                      "(expected %d, %g, %g)",
                      cases[k].run, u.passes, u.ld, u.st, 1 + cases[k].norms,
                      cases[k].rd * wb + norm_ld, cases[k].wr * wb);
            fw_program_free(&prog);
        }
        graph_free(&g);
    }
    graph g;
    tpu_error e = {0};
    fw_program prog;
    fw_memory mem;
    if (parse_small(t, &g, ", \"optimizer\": \"adam\"", &e)) {
        g.train = 0;
        if (lower(t, &g, &prog, &mem)) {
            TH_CHECKF(t, mem.opt_bytes == 0 && mem.grads_bytes == 0,
                      "inference keeps no optimizer state: %g bytes",
                      mem.opt_bytes);
            fw_program_free(&prog);
        }
        graph_free(&g);
    }
}

/* A weight-heavy step: one 4096 x 4096 dense layer (16.8 M weights) on a
 * batch of 8 per core, where the update's traffic is a visible part. */
static const char heavy[] =
    "{\"format\": \"tpuemu-trace/1\", \"name\": \"opt-heavy\", \"system\": "
    "\"v3-8\", \"run\": {\"mode\": \"train\", \"global_batch\": 64}, "
    "\"graph\": {\"inputs\": [{\"name\": \"x\", \"shape\": [4096]}], "
    "\"layers\": [{\"name\": \"fc\", \"op\": \"dense\", \"in\": \"x\", "
    "\"units\": 4096}, {\"name\": \"fc2\", \"op\": \"dense\", \"in\": \"fc\", "
    "\"units\": 1024}, {\"name\": \"loss\", \"op\": \"loss\", \"in\": \"fc2\","
    " \"kind\": \"l2\"}]}}";

static void test_step_order(th_ctx *t)
{
    th_case(t, "step time: sgd < momentum < adam, and lars > momentum, on a "
               "weight-heavy trace");
    graph g;
    tpu_error e = {0};
    if (graph_parse(&g, heavy, strlen(heavy), "opt-heavy.json", &e)) {
        TH_FAIL(t, "%s", e.msg);
        return;
    }
    const graph_optimizer ks[] = {GOPT_SGD, GOPT_MOMENTUM, GOPT_ADAM,
                                  GOPT_LARS};
    double s[4] = {0};
    for (int i = 0; i < 4; i++) {
        g.optimizer = ks[i];
        sim_opts o;
        sim_opts_default(&o);
        emu_result r;
        if (!TH_CHECKF(t, sim_run(&g, &o, &r, &e) == TPU_OK, "%s", e.msg))
            continue;
        s[i] = r.step_time_s;
        emu_result_free(&r);
    }
    TH_CHECKF(t, s[0] < s[1] && s[1] < s[2] && s[3] > s[1],
              "step times sgd %.6g, momentum %.6g, adam %.6g, lars %.6g s",
              s[0], s[1], s[2], s[3]);
    /* HBM-bound passes: Adam reads and writes 7 tensors to momentum's 5
     * and SGD's 3, so the two steps apart differ alike */
    double d1 = s[1] - s[0], d2 = s[2] - s[1];
    TH_CHECKF(t, d1 > 0 && fabs(d2 - d1) < 0.2 * d1,
              "momentum - sgd %.3g s, adam - momentum %.3g s", d1, d2);
    graph_free(&g);
}

/* ---- values ------------------------------------------------------------ */

typedef struct {
    graph g;
    plan p;
    fw_program prog;
    tpu_params hw;
    fx_state *x;
    int l;     /* the dense layer */
    int64_t n; /* its weights (kernel 80, then bias 10) */
    float *w0; /* its starting weights */
} fxt;

static int fx_open(th_ctx *t, fxt *f, const char *run_extra)
{
    tpu_error e = {0};
    fw_memory mem;
    memset(f, 0, sizeof *f);
    if (!parse_small(t, &f->g, run_extra, &e))
        return 0;
    const tpu_system *sys = tpu_system_find(f->g.system);
    tpu_params_default(&f->hw, sys->gen);
    if (plan_build(&f->p, &f->g, sys, f->g.global_batch, &e)) {
        TH_FAIL(t, "%s", e.msg);
        return 0;
    }
    if (!lower(t, &f->g, &f->prog, &mem))
        return 0;
    fx_config cfg = {1, 0.05, 0.9, NULL, 0, -1, 0};
    if (fx_new(&f->x, &f->g, &f->p, &f->hw, &f->prog, &cfg, &e)) {
        TH_FAIL(t, "%s", e.msg);
        return 0;
    }
    f->l = graph_find(&f->g, "logits");
    f->n = f->g.layers[f->l].weights;
    f->w0 = malloc(sizeof(float) * (size_t)f->n);
    memcpy(f->w0, f->x->w[f->l], sizeof(float) * (size_t)f->n);
    return 1;
}

static void fx_close(fxt *f)
{
    if (f->x)
        fx_free(f->x);
    free(f->w0);
    fw_program_free(&f->prog);
    plan_free(&f->p);
    graph_free(&f->g);
}

/* The step's update with gradient gi(i) = 0.01 (i mod 7 - 3) + 0.002 on
 * every trainable layer (v3-8's 8 cores: the update takes the
 * all-reduced sums as they are). */
static float grad_of(int64_t i)
{
    return 0.01f * (float)(i % 7 - 3) + 0.002f;
}

static int fx_step(th_ctx *t, fxt *f, int64_t step)
{
    tpu_error e = {0};
    for (int l = 0; l < f->g.n_layers; l++) {
        if (!f->x->w[l])
            continue;
        int64_t n = f->g.layers[l].weights;
        free(f->x->wsum[l]);
        f->x->wsum[l] = malloc(sizeof(float) * (size_t)n);
        for (int64_t i = 0; i < n; i++)
            f->x->wsum[l][i] = grad_of(i);
    }
    f->x->step = step;
    f->x->updated = 0;
    fw_insn in;
    memset(&in, 0, sizeof in);
    in.op = FW_VEC;
    in.phase = PHASE_UPDATE;
    in.layer = -1;
    in.fx = FX_UPDATE;
    return TH_CHECKF(t, fx_exec(f->x, 0, &in, &e) == TPU_OK, "%s", e.msg);
}

/* The dense layer's weights against want(i), to 1e-5 of their size. */
static void fx_compare(th_ctx *t, const fxt *f, const char *what,
                       const double *want)
{
    int bad = 0;
    for (int64_t i = 0; i < f->n && bad < 3; i++) {
        double got = f->x->w[f->l][i];
        /* fp32 steps from weights of order 0.1, and fp32 hyperparameters
         * (1 - 0.999f is 0.0010000467: 2.3e-5 of Adam's step of lr) */
        double scale = fmax(1e-3, fmax(fabs(want[i]), fabs(f->w0[i])));
        if (fabs(got - want[i]) > 1e-5 * scale + 5e-5 * 0.05) {
            bad++;
            TH_FAIL(t, "%s: weight %lld is %.9g, by hand %.9g (from %.9g)",
                    what, (long long)i, got, want[i], (double)f->w0[i]);
        }
    }
}

static void test_values(th_ctx *t)
{
    th_case(t, "--functional: each optimizer's update against the formulas "
               "by hand");
    const double lr = 0.05, mu = 0.9;
    double want[90], m[90], v[90];
    fxt f;

    if (fx_open(t, &f, ", \"optimizer\": \"sgd\"") && fx_step(t, &f, 0)) {
        for (int i = 0; i < f.n; i++)
            want[i] = f.w0[i] - lr * grad_of(i);
        fx_compare(t, &f, "sgd", want);
    }
    fx_close(&f);

    /* two steps: the momentum carries, 1.9 g the second time */
    if (fx_open(t, &f, "") && fx_step(t, &f, 0) && fx_step(t, &f, 1)) {
        for (int i = 0; i < f.n; i++)
            want[i] = f.w0[i] - lr * grad_of(i) - lr * (1 + mu) * grad_of(i);
        fx_compare(t, &f, "momentum, 2 steps", want);
    }
    fx_close(&f);

    /* Adam's first step moves every weight by about lr against its
     * gradient's sign: m = 0.1 g, sqrt(v) = sqrt(0.001) |g|, and the bias
     * correction sqrt(0.001) / 0.1 cancels both (eps 1e-7 aside) */
    if (fx_open(t, &f, ", \"optimizer\": \"adam\"") && fx_step(t, &f, 0)) {
        for (int i = 0; i < f.n; i++) {
            double g = grad_of(i);
            double a = lr * sqrt(0.001) / 0.1;
            want[i] = f.w0[i] - a * 0.1 * g / (sqrt(0.001) * fabs(g) + 1e-7);
            TH_CHECKF(t,
                      fabs(want[i] - (f.w0[i] - lr * (g > 0 ? 1 : -1))) <
                          1e-2 * lr,
                      "weight %d: Adam's first step is not lr", i);
        }
        fx_compare(t, &f, "adam, step 1", want);
        if (fx_step(t, &f, 1)) {
            for (int i = 0; i < f.n; i++) {
                double g = grad_of(i);
                m[i] = 0.9 * (0.1 * g) + 0.1 * g;
                v[i] = 0.999 * (0.001 * g * g) + 0.001 * g * g;
                double a = lr * sqrt(1 - 0.999 * 0.999) / (1 - 0.9 * 0.9);
                want[i] -= a * m[i] / (sqrt(v[i]) + 1e-7);
            }
            fx_compare(t, &f, "adam, step 2", want);
        }
    }
    fx_close(&f);

    /* RMSprop: v = 0.1 g^2 after one step, so w moves by lr / sqrt(0.1) */
    if (fx_open(t, &f, ", \"optimizer\": \"rmsprop\"") && fx_step(t, &f, 0)) {
        for (int i = 0; i < f.n; i++) {
            double g = grad_of(i);
            want[i] = f.w0[i] - lr * g / (sqrt(0.1 * g * g) + 1e-7);
        }
        fx_compare(t, &f, "rmsprop", want);
    }
    fx_close(&f);

    /* with momentum 0.5: the second step adds half the first's */
    if (fx_open(
            t, &f,
            ", \"optimizer\": {\"name\": \"rmsprop\", \"momentum\": 0.5}") &&
        fx_step(t, &f, 0) && fx_step(t, &f, 1)) {
        for (int i = 0; i < f.n; i++) {
            double g = grad_of(i), v1 = 0.1 * g * g;
            double v2 = 0.9 * v1 + 0.1 * g * g;
            double d1 = lr * g / (sqrt(v1) + 1e-7);
            double d2 = lr * g / (sqrt(v2) + 1e-7);
            want[i] = f.w0[i] - d1 - (0.5 * d1 + d2);
        }
        fx_compare(t, &f, "rmsprop with momentum, 2 steps", want);
    }
    fx_close(&f);

    /* LARS: the kernel (80 weights) at lr * 0.001 ||w|| / (||g|| + 1e-4
     * ||w||) with 1e-4 w added to g; the bias (10) is in the skip list:
     * plain momentum */
    if (fx_open(t, &f, ", \"optimizer\": \"lars\"") && fx_step(t, &f, 0)) {
        double wn = 0, gn = 0;
        for (int i = 0; i < 80; i++) {
            wn += (double)f.w0[i] * f.w0[i];
            gn += (double)grad_of(i) * grad_of(i);
        }
        wn = sqrt(wn);
        gn = sqrt(gn);
        double r = 0.001 * wn / (gn + 1e-4 * wn);
        for (int i = 0; i < f.n; i++)
            want[i] = i < 80 ? f.w0[i] - lr * r * (grad_of(i) + 1e-4 * f.w0[i])
                             : f.w0[i] - lr * grad_of(i);
        fx_compare(t, &f, "lars", want);
        TH_CHECKF(t, f.n == 90 && r > 0 && r < 1,
                  "dense weights %lld, trust ratio %g", (long long)f.n, r);
    }
    fx_close(&f);
}

/* ---- options, reports, bad input --------------------------------------- */

static void test_cli(th_ctx *t)
{
    th_case(t, "--optimizer overrides run.optimizer; the report records it");
    th_cmd_result *r = malloc(sizeof *r);
    char rep[1024];
    snprintf(rep, sizeof rep, "%s/optimizer-report.json", th_tmpdir());
    th_run(r,
           "%s run traces/functional/tiny-train.json --optimizer adam "
           "--report %s",
           th_bin(), rep);
    TH_CHECKF(t, r->status == 0, "exit %d: %s", r->status, r->err);
    emu_result er;
    tpu_error e = {0};
    if (TH_CHECKF(t, report_read(&er, rep, &e) == TPU_OK, "%s", e.msg)) {
        TH_CHECKF(t, er.optimizer == GOPT_ADAM, "report's optimizer %d",
                  er.optimizer);
        emu_result_free(&er);
    }
    char *text = th_slurp(rep, NULL);
    TH_CHECKF(t, text && strstr(text, "\"optimizer\": \"adam\""),
              "the report's text: %.200s", text ? text : "(none)");
    free(text);
    /* momentum, the default, writes no key: reports stay what they were */
    th_run(r,
           "%s run traces/functional/tiny-train.json --optimizer "
           "momentum --report %s",
           th_bin(), rep);
    text = th_slurp(rep, NULL);
    TH_CHECKF(t, r->status == 0 && text && !strstr(text, "optimizer"),
              "exit %d; a momentum report names an optimizer", r->status);
    free(text);

    th_case(t, "an unknown optimizer: exit 2 with the allowed values");
    th_run(r, "%s run traces/functional/tiny-train.json --optimizer adamw",
           th_bin());
    TH_CHECKF(t,
              r->status == 2 && strstr(r->err, "--optimizer adamw") &&
                  strstr(r->err, "sgd, momentum, adam, rmsprop, lars"),
              "exit %d: %s", r->status, r->err);
    th_run(r, "%s lower traces/functional/tiny-train.json --optimizer nope",
           th_bin());
    TH_CHECKF(t, r->status == 2, "lower: exit %d: %s", r->status, r->err);
    free(r);

    graph g;
    static const struct {
        const char *run, *msg;
    } bad[] = {
        {", \"optimizer\": \"adamw\"",
         "opt-small.json: run.optimizer: unknown optimizer 'adamw' (expected "
         "one of: sgd, momentum, adam, rmsprop, lars)"},
        {", \"optimizer\": 3", "run.optimizer: expected a name"},
        {", \"optimizer\": {\"name\": \"Adam\"}",
         "run.optimizer.name: unknown optimizer 'Adam'"},
        {", \"optimizer\": {\"momentum\": 0.9}",
         "run.optimizer: missing key 'name'"},
        {", \"optimizer\": {\"name\": \"adam\", \"momentum\": 0.9}",
         "run.optimizer.momentum: only rmsprop takes"},
        {", \"optimizer\": {\"name\": \"rmsprop\", \"momentum\": 1}",
         "run.optimizer.momentum: expected a number in [0, 1)"},
        {", \"optimizer\": {\"name\": \"sgd\", \"lr\": 1}",
         "run.optimizer.lr: unknown key"},
    };
    th_case(t, "bad run.optimizer values name the key");
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        e.msg[0] = 0;
        int ok = parse_small(NULL, &g, bad[k].run, &e);
        TH_CHECKF(t, !ok && strstr(e.msg, bad[k].msg), "'%s': %s", bad[k].run,
                  ok ? "accepted" : e.msg);
        graph_free(&g);
    }
}

void th_suite_optimizer(th_ctx *t)
{
    test_state_and_update(t);
    test_step_order(t);
    test_values(t);
    test_cli(t);
}
