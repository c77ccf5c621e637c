/* test_groups — grouped and depthwise convolutions (conv "groups"):
 * the reader's checks with their JSON paths, weights and FLOPs by hand,
 * groups = 1 exactly an ordinary convolution, the lowering's candidate
 * pick a minimum, and --functional's values for each candidate
 * (traces/functional/groups.json): the C reference, the expanded dense
 * convolution bit for bit, splits, central differences, the numpy
 * reference. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/fx/fxdata.h"
#include "emu/graph.h"
#include "emu/result.h"
#include "emu/sim.h"
#include "mxu/bf16.h"
#include "test/fxref.h"
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

/* Where g's grouped layers run with xla.bn_apply_fused=fused: the number
 * of (layer, part) pairs computed on the vector unit, and in mxu[cap] the
 * pairs computed on the MXU, each " NAME:PART" (fwd, dx, dw); -1 when g
 * does not lower. */
static int dw_placement(th_ctx *t, const graph *g, const char *fused,
                        char *mxu, size_t cap)
{
    sim_opts o;
    sim_opts_default(&o);
    /* the activations stored channel- or width-minor, as the hair-thin
     * choice below was measured (with the batch on the lanes, at 128
     * examples per core, every part stays on the vector unit) */
    const char *keys[2] = {"xla.bn_apply_fused", "xla.batch_lanes"};
    const char *vals[2] = {fused, "0"};
    o.n_sets = 2;
    o.set_keys = keys;
    o.set_values = vals;
    fw_program prog;
    fw_memory mem;
    tpu_error e = {0};
    mxu[0] = 0;
    if (!TH_CHECKF(t, sim_lower(g, &o, 0, &prog, &mem, &e) == 0, "%s", e.msg))
        return -1;
    /* per layer and part (FX_FWD, FX_DX, FX_DW): bit 0 vector, bit 1 MXU */
    unsigned char *on = calloc((size_t)g->n_layers * 3, 1);
    if (!on) {
        fw_program_free(&prog);
        return -1;
    }
    for (size_t i = 0; i < prog.n; i++) {
        const fw_insn *in = &prog.code[i];
        if (in->layer < 0 || graph_groups(&g->layers[in->layer]) < 2 ||
            in->fx < FX_FWD || in->fx > FX_DW)
            continue;
        unsigned char *b = &on[(size_t)in->layer * 3 + (in->fx - FX_FWD)];
        *b |= in->op == FW_VEC ? 1 : in->op == FW_MATMUL ? 2 : 0;
    }
    fw_program_free(&prog);
    static const char *const part[3] = {"fwd", "dx", "dw"};
    int n_vec = 0;
    size_t len = 0;
    for (int l = 0; l < g->n_layers; l++)
        for (int k = 0; k < 3; k++) {
            n_vec += on[l * 3 + k] & 1;
            if ((on[l * 3 + k] & 2) && len < cap)
                len += (size_t)snprintf(mxu + len, cap - len, " %s:%s",
                                        g->layers[l].name, part[k]);
        }
    free(on);
    return n_vec;
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

/* ---- --functional values ------------------------------------------------ */

#define GFX_TRACE "traces/functional/groups.json"

/* A functional run of g: candidate gc ("1" dense, "2" per group, "3"
 * vector, NULL the pick), on sys (NULL: the trace's), reporting `layer`
 * (NULL: the output), from starting weights w0 (NULL: fxdata.h's);
 * conv_pad "0" or "1" (xla.conv_pad: folded or per-tap K), NULL default. */
static int gfx_run(th_ctx *t, const graph *g, const char *gc,
                   const char *conv_pad, const char *sys, const char *layer,
                   const float *w0, int64_t nw, emu_result *r)
{
    sim_opts o;
    sim_opts_default(&o);
    const char *keys[2], *vals[2];
    int n = 0;
    if (gc) {
        keys[n] = "xla.group_conv";
        vals[n++] = gc;
    }
    if (conv_pad) {
        keys[n] = "xla.conv_pad";
        vals[n++] = conv_pad;
    }
    o.n_sets = n;
    o.set_keys = keys;
    o.set_values = vals;
    o.functional = 1;
    o.system = sys;
    o.output_layer = layer;
    o.init_weights = w0;
    o.n_init_weights = nw;
    tpu_error e = {0};
    return TH_CHECKF(t, sim_run(g, &o, r, &e) == TPU_OK, "%s gc %s: %s",
                     g->name, gc ? gc : "-", e.msg);
}

static int64_t gfx_taps(const glayer *L)
{
    int64_t t = 1;
    for (int d = 0; d < L->out.nsp && L->op == GOP_CONV; d++)
        t *= L->kernel[d];
    return t;
}

static int gfx_layer(const graph *g, const char *name)
{
    for (int l = 0; l < g->n_layers; l++)
        if (strcmp(g->layers[l].name, name) == 0)
            return l;
    return -1;
}

static int64_t gfx_elems(const emu_result *r)
{
    int64_t n = 1;
    for (int i = 0; i < r->output_rank; i++)
        n *= r->output_shape[i];
    return n;
}

/* groups.json as text: as it is (0), all bf16 and in inference (1), or
 * with sigmoids for its relus (2: a smooth loss, whose central differences
 * no relu kink disturbs). */
static char *gfx_text(int variant)
{
    char *s = th_slurp(GFX_TRACE, NULL);
    if (!s || !variant)
        return s;
    char *o = malloc(strlen(s) + 16), *w = o;
    const char *dt = ", \"dtype\": \"f32\"", *md = "\"mode\": \"train\"";
    const char *re = "\"op\": \"relu\"";
    if (!o) {
        free(s);
        return NULL;
    }
    for (const char *p = s; *p;) {
        if (variant == 2) {
            if (strncmp(p, re, strlen(re)) == 0) {
                memcpy(w, "\"op\": \"sigmoid\"", 15);
                w += 15;
                p += strlen(re);
            } else {
                *w++ = *p++;
            }
        } else if (strncmp(p, dt, strlen(dt)) == 0) {
            p += strlen(dt);
        } else if (strncmp(p, md, strlen(md)) == 0) {
            memcpy(w, "\"mode\": \"infer\"", 15);
            w += 15;
            p += strlen(md);
        } else {
            *w++ = *p++;
        }
    }
    *w = 0;
    free(s);
    return o;
}

static int gfx_parse(th_ctx *t, graph *g, int variant)
{
    char *s = gfx_text(variant);
    tpu_error e = {0};
    int ok = s && TH_CHECKF(t, graph_parse(g, s, strlen(s), GFX_TRACE, &e) ==
                                   TPU_OK,
                            "%s", e.msg);
    free(s);
    return ok;
}

/* One chip, no partitioning (graph's [1,1,1,1]). */
static void gfx_parts(graph *g, int a, int b)
{
    g->pdims_rank = 4;
    g->pdims[0] = g->pdims[3] = 1;
    g->pdims[1] = a;
    g->pdims[2] = b;
    g->cores_per_replica = a * b;
}

/* Whether every grouped layer's computing instructions belong to
 * candidate want (3 only where a group has one channel: the others take
 * an MXU candidate). */
static int gfx_lowered_as(th_ctx *t, const graph *g, const char *gc, int want)
{
    sim_opts o;
    sim_opts_default(&o);
    const char *keys[1] = {"xla.group_conv"}, *vals[1] = {gc};
    o.n_sets = 1;
    o.set_keys = keys;
    o.set_values = vals;
    fw_program prog;
    fw_memory mem;
    tpu_error e = {0};
    int seen = 0, bad = 0;
    if (!TH_CHECKF(t, sim_lower(g, &o, 0, &prog, &mem, &e) == 0, "%s", e.msg))
        return 0;
    for (size_t i = 0; i < prog.n; i++) {
        const fw_insn *in = &prog.code[i];
        if (in->layer < 0 || graph_groups(&g->layers[in->layer]) < 2 ||
            in->fx == FX_NONE)
            continue;
        if (in->op != FW_MATMUL && in->op != FW_VEC)
            continue;
        const glayer *L = &g->layers[in->layer];
        int depthwise = g->layers[L->in[0]].out.c == graph_groups(L);
        int w = want == 3 && !depthwise ? -1 : want;
        seen++;
        bad += w < 0 ? in->gconv == 3 || in->gconv == 0 : in->gconv != w;
    }
    fw_program_free(&prog);
    return TH_CHECKF(t, seen >= (g->train ? 6 : 2) && bad == 0,
                     "gc %s: %d of %d grouped instructions not candidate %d",
                     gc, bad, seen, want);
}

/* The starting weights of g (fxdata.h, Keras's [taps][cin/G][cout]), or,
 * with `expand` set, those of the same graph with every grouped conv
 * made ordinary and its kernel the block-diagonal expansion. */
static float *gfx_weights(const graph *g, int expand, int64_t *nw)
{
    int64_t n = 0;
    for (int l = 0; l < g->n_layers; l++) {
        const glayer *L = &g->layers[l];
        if (L->weights <= 0)
            continue;
        int64_t G = graph_groups(L);
        n += expand && G > 1 ? L->weights + gfx_taps(L) *
                                                 (g->layers[L->in[0]].out.c -
                                                  g->layers[L->in[0]].out.c /
                                                      G) *
                                                 L->out.c
                             : L->weights;
    }
    float *w = calloc((size_t)n + 1, sizeof *w);
    if (!w)
        return NULL;
    int64_t o = 0;
    for (int l = 0; l < g->n_layers; l++) {
        const glayer *L = &g->layers[l];
        if (L->weights <= 0)
            continue;
        int64_t G = graph_groups(L), taps = gfx_taps(L);
        int64_t cin = g->layers[L->in[0]].out.c, cout = L->out.c;
        int64_t cig = cin / G, cog = cout / G;
        int64_t nk = taps * cig * cout;
        int64_t rows = expand ? cin : cig;
        for (int64_t i = 0; i < nk; i++) {
            int64_t tp = i / (cig * cout), j = i / cout % cig, co = i % cout;
            int64_t ci = expand ? co / cog * cig + j : j;
            w[o + (tp * rows + ci) * cout + co] =
                fxd_weight(1, l, i, taps * cig, taps * cout);
        }
        o += taps * rows * cout + (L->weights - nk); /* biases: 0 */
    }
    *nw = n;
    return w;
}

/* The expanded graph's gradient entry of the grouped one's weight i. */
static int64_t gfx_expanded_index(const graph *g, int64_t i)
{
    int64_t o = 0, oe = 0;
    for (int l = 0; l < g->n_layers; l++) {
        const glayer *L = &g->layers[l];
        if (L->weights <= 0)
            continue;
        int64_t G = graph_groups(L), taps = gfx_taps(L);
        int64_t cin = g->layers[L->in[0]].out.c, cout = L->out.c;
        int64_t cig = cin / G, cog = cout / G, nk = taps * cig * cout;
        if (i < o + L->weights) {
            int64_t k = i - o;
            if (k >= nk)
                return oe + taps * cin * cout + (k - nk);
            int64_t tp = k / (cig * cout), j = k / cout % cig, co = k % cout;
            return oe + (tp * cin + co / cog * cig + j) * cout + co;
        }
        o += L->weights;
        oe += taps * cin * cout + (L->weights - nk);
    }
    return -1;
}

static double gfx_maxdiff(const float *a, const float *b, int64_t n,
                          double *scale)
{
    double d = 0;
    *scale = 0;
    for (int64_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - (double)b[i]));
        *scale = fmax(*scale, fabs((double)b[i]));
    }
    return d;
}

static void fx_cases(th_ctx *t)
{
    static const char *const gcs[] = {"1", "2", "3"};
    static const char *const lnames[] = {"dw", "gconv", "logits"};
    int fast = th_asan();

    th_case(t, "--functional: each forced candidate (dense, per group, "
               "vector) gives every layer the C reference's values "
               "(bf16 inference and f32 training)");
    for (int v = 0; v < 2; v++) {
        graph g;
        if (!gfx_parse(t, &g, v == 0))
            continue;
        for (int k = 0; k < 3; k++) {
            gfx_lowered_as(t, &g, gcs[k], k + 1);
            for (int j = 0; j < 3; j++) {
                int l = gfx_layer(&g, lnames[j]);
                emu_result r;
                if (!gfx_run(t, &g, gcs[k], NULL, NULL, lnames[j], NULL, 0,
                             &r))
                    continue;
                double *ref = NULL;
                int64_t n = 0;
                tpu_error e = {0};
                if (TH_CHECKF(t, fxref_layer(&g, l, 1, 0, g.global_batch, 2,
                                             g.train, &ref, &n, &e) == 0,
                              "%s", e.msg) &&
                    TH_CHECK(t, n == gfx_elems(&r))) {
                    double scale = 0, worst = 0;
                    for (int64_t i = 0; i < n; i++)
                        scale = fmax(scale, fabs(ref[i]));
                    for (int64_t i = 0; i < n; i++)
                        worst = fmax(worst, fabs(r.output[i] - ref[i]));
                    /* test_functional.c's bound: depth x 2^-8 of the scale */
                    double bound = (l + 1) * ldexp(1.0, -8) * scale;
                    TH_CHECKF(t, worst <= bound && scale > 0,
                              "%s gc %s %s: |emu - ref| %.3g > %.3g",
                              v ? "f32" : "bf16", gcs[k], lnames[j], worst,
                              bound);
                }
                free(ref);
                emu_result_free(&r);
            }
        }
        graph_free(&g);
    }

    th_case(t, "--functional: the dense candidate is bit for bit an ordinary "
               "convolution with the block-diagonal expanded filter (output, "
               "gradients), folded and per-tap K: its zeros change no sum");
    {
        graph g, ge;
        char *s = gfx_text(0);
        /* the same net with "groups" dropped: ordinary convolutions */
        char *se = s ? malloc(strlen(s) + 1) : NULL;
        if (se) {
            char *w = se;
            for (const char *p = s; *p;) {
                if (strncmp(p, "\"groups\": ", 10) == 0) {
                    p += 10;
                    while (*p >= '0' && *p <= '9')
                        p++;
                    if (*p == ',')
                        p++;
                    if (*p == ' ')
                        p++;
                } else {
                    *w++ = *p++;
                }
            }
            *w = 0;
        }
        tpu_error e = {0};
        if (TH_CHECK(t, se != NULL) &&
            TH_CHECKF(t, graph_parse(&g, s, strlen(s), "g.json", &e) == 0,
                      "%s", e.msg) &&
            TH_CHECKF(t, graph_parse(&ge, se, strlen(se), "ge.json", &e) == 0,
                      "%s", e.msg)) {
            int64_t nw = 0, nwe = 0;
            float *w = gfx_weights(&g, 0, &nw), *we = gfx_weights(&g, 1, &nwe);
            for (int pad = 0; pad < 2 && w && we; pad++) {
                emu_result a, b;
                const char *cp = pad ? "1" : "0";
                if (!gfx_run(t, &g, "1", cp, NULL, NULL, w, nw, &a))
                    continue;
                if (gfx_run(t, &ge, NULL, cp, NULL, NULL, we, nwe, &b)) {
                    TH_CHECKF(t, a.output_checksum == b.output_checksum,
                              "conv_pad %s: output %016llx, expanded %016llx",
                              cp, (unsigned long long)a.output_checksum,
                              (unsigned long long)b.output_checksum);
                    int64_t diff = 0;
                    for (int64_t i = 0; i < a.n_grads; i++) {
                        int64_t k = gfx_expanded_index(&g, i);
                        diff += k < 0 || k >= b.n_grads ||
                                bf16_f32_bits(a.grads[i]) !=
                                    bf16_f32_bits(b.grads[k]);
                    }
                    TH_CHECKF(t, a.n_grads == nw && b.n_grads == nwe &&
                                     diff == 0,
                              "conv_pad %s: %lld of %lld gradients differ",
                              cp, (long long)diff, (long long)a.n_grads);
                    emu_result_free(&b);
                }
                emu_result_free(&a);
            }
            /* and the starting weights are the ones fexec draws */
            emu_result a, b;
            if (w && gfx_run(t, &g, "1", NULL, NULL, NULL, w, nw, &a)) {
                if (gfx_run(t, &g, "1", NULL, NULL, NULL, NULL, 0, &b)) {
                    TH_CHECK(t, a.output_checksum == b.output_checksum);
                    emu_result_free(&b);
                }
                emu_result_free(&a);
            }
            free(w);
            free(we);
            graph_free(&g);
            graph_free(&ge);
        }
        free(s);
        free(se);
    }

    th_case(t, "--functional: splits are bit-identical to one chip for each "
               "candidate (dw and gconv outputs, logits), gradients within "
               "fp32 reordering");
    {
        /* uneven: 30 rows 4 ways are 8,8,8,6 and 8 ways 4 x 7 + 2; 22
         * columns 4 ways 6,6,6,4 */
        static const int parts[][2] = {{1, 2}, {4, 1}, {2, 4}, {8, 1}};
        graph g;
        int same = 0, runs = 0;
        if (gfx_parse(t, &g, 0)) {
            for (int k = 0; k < 3; k++) {
                emu_result base[3];
                int ok = 1;
                gfx_parts(&g, 1, 1);
                for (int j = 0; j < 3; j++)
                    ok &= gfx_run(t, &g, gcs[k], NULL, NULL,
                                  j < 2 ? lnames[j] : NULL, NULL, 0, &base[j]);
                int np = fast ? 2 : 4;
                for (int p = 0; p < np && ok; p++) {
                    gfx_parts(&g, parts[p][0], parts[p][1]);
                    for (int j = 0; j < 3; j++) {
                        emu_result r;
                        if (!gfx_run(t, &g, gcs[k], NULL, NULL,
                                     j < 2 ? lnames[j] : NULL, NULL, 0, &r))
                            continue;
                        runs++;
                        int eq = r.output_checksum == base[j].output_checksum;
                        same += eq;
                        TH_CHECKF(t, eq, "gc %s [%d,%d] %s differs", gcs[k],
                                  parts[p][0], parts[p][1],
                                  j < 2 ? lnames[j] : "logits");
                        if (j == 2) {
                            double sc, d = gfx_maxdiff(r.grads, base[2].grads,
                                                       r.n_grads, &sc);
                            /* each weight gradient sums a replica's
                             * 4 x 30 x 22 positions at most, per core then
                             * across cores (test_functional's tolerance) */
                            double tol = 1e-5 + 2640 * ldexp(1.0, -24);
                            TH_CHECKF(t, r.n_grads == base[2].n_grads &&
                                             d <= tol * sc,
                                      "gc %s [%d,%d]: gradients differ by "
                                      "%.3g of %.3g",
                                      gcs[k], parts[p][0], parts[p][1], d, sc);
                        }
                        emu_result_free(&r);
                    }
                }
                for (int j = 0; j < 3; j++)
                    if (ok)
                        emu_result_free(&base[j]);
            }
            graph_free(&g);
        }
        TH_CHECKF(t, runs >= (fast ? 18 : 36) && same == runs,
                  "%d of %d split runs identical", same, runs);
    }

    th_case(t, "--functional: gradients of the grouped layers (and of the "
               "stem, through both input gradients) agree with central "
               "differences of the loss, each candidate (relus made "
               "sigmoids: no kinks)");
    {
        graph g;
        if (gfx_parse(t, &g, 2)) {
            int64_t nw = 0;
            float *w0 = gfx_weights(&g, 0, &nw);
            /* per layer: its first weight and count */
            int64_t first[8] = {0}, count[8] = {0};
            int nl = 0;
            int64_t o = 0;
            for (int l = 0; l < g.n_layers && nl < 8; l++) {
                if (g.layers[l].weights <= 0)
                    continue;
                first[nl] = o;
                count[nl++] = g.layers[l].weights;
                o += g.layers[l].weights;
            }
            int per = fast ? 2 : 3, checked = 0, bad = 0;
            for (int k = 0; k < 3 && w0 && nl >= 3; k++) {
                emu_result base;
                if (!gfx_run(t, &g, gcs[k], NULL, NULL, NULL, w0, nw, &base))
                    continue;
                /* stem, dw, gconv: kernels and (the last ones) biases */
                for (int q = 0; q < 3; q++) {
                    double gmax = 0;
                    for (int64_t i = 0; i < count[q]; i++)
                        gmax = fmax(gmax, fabs(base.grads[first[q] + i]));
                    for (int s = 0; s < per; s++) {
                        int64_t i = first[q] + (count[q] - 1) * s / (per - 1);
                        if (s == 1)
                            i = first[q] + count[q] / 3 + 7 * k;
                        const double eps = 1e-2;
                        double lo = 0, hi = 0;
                        float keep = w0[i];
                        emu_result r;
                        w0[i] = (float)(keep - eps);
                        if (gfx_run(t, &g, gcs[k], NULL, NULL, NULL, w0, nw,
                                    &r)) {
                            lo = r.loss;
                            emu_result_free(&r);
                        }
                        w0[i] = (float)(keep + eps);
                        if (gfx_run(t, &g, gcs[k], NULL, NULL, NULL, w0, nw,
                                    &r)) {
                            hi = r.loss;
                            emu_result_free(&r);
                        }
                        w0[i] = keep;
                        double num = (hi - lo) / (2 * eps), ana = base.grads[i];
                        checked++;
                        if (fabs(num - ana) > 5e-3 * gmax + 2e-2 * fabs(ana)) {
                            bad++;
                            TH_FAIL(t, "gc %s weight %lld: numerical %.6g, "
                                       "gradient %.6g (layer max %.3g)",
                                    gcs[k], (long long)i, num, ana, gmax);
                        }
                    }
                }
                emu_result_free(&base);
            }
            TH_CHECKF(t, checked == 9 * per && bad == 0,
                      "%d of %d gradients disagree", bad, checked);
            free(w0);
            graph_free(&g);
        }
    }

    th_case(t, "--functional: scripts/fx_reference.py passes each "
               "candidate's output on the right seed (0) and fails a wrong "
               "seed's");
    {
        th_cmd_result *c = malloc(sizeof *c);
        char npy[600];
        snprintf(npy, sizeof npy, "%s/grp_fx.npy", th_tmpdir());
        for (int k = 0; k < 3 && c; k++) {
            th_run(c,
                   "%s run " GFX_TRACE " --functional --seed 1 --set "
                   "xla.group_conv=%s --output-npy %s --quiet",
                   th_bin(), gcs[k], npy);
            if (!TH_CHECKF(t, c->status == 0, "%s", c->err))
                continue;
            th_run(c, "/usr/bin/python3 scripts/fx_reference.py " GFX_TRACE
                      " %s --seed 1",
                   npy);
            TH_CHECKF(t, c->status == 0, "gc %s right seed: status %d: %s%s",
                      gcs[k], c->status, c->out, c->err);
            th_run(c, "/usr/bin/python3 scripts/fx_reference.py " GFX_TRACE
                      " %s --seed 2",
                   npy);
            TH_CHECKF(t, c->status == 1, "gc %s wrong seed: status %d: %s%s",
                      gcs[k], c->status, c->out, c->err);
        }
        free(c);
    }
}

static void share_groups_cases(th_ctx *t, th_cmd_result *c)
{
    static const struct {
        const char *b_extra; /* keys of layer b after "kernel":[3,3] */
        const char *want;
    } k[] = {
        {",\"groups\":8", "groups 8 here, 4 there"},
        {"", "groups 1 here, 4 there"},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        char path[512], text[1024];
        snprintf(path, sizeof path, "%s/groups-share%zu.json", th_tmpdir(), i);
        snprintf(text, sizeof text,
                 "{\"format\":\"tpuemu-trace/1\",\"system\":\"v3-8\",\"run\":{"
                 "\"mode\":\"train\",\"global_batch\":8},\"graph\":{\"inputs\":"
                 "[{\"name\":\"x\",\"shape\":[8,8,32]}],\"layers\":["
                 "{\"name\":\"a\",\"op\":\"conv\",\"in\":\"x\",\"filters\":32,"
                 "\"kernel\":[3,3],\"groups\":4},"
                 "{\"name\":\"b\",\"op\":\"conv\",\"in\":\"a\",\"filters\":32,"
                 "\"kernel\":[3,3]%s,\"share_weights\":\"a\"},"
                 "{\"name\":\"l\",\"op\":\"loss\",\"in\":\"b\",\"kind\":\"l2\"}"
                 "]}}",
                 k[i].b_extra);
        th_put(path, text);
        th_case(t, "share_weights between different groups names them");
        th_run(c, "%s run %s", th_bin(), path);
        TH_CHECKF(t, c->status == 2 && strstr(c->err, k[i].want) &&
                         strstr(c->err, "graph.layers[1].share_weights"),
                  "status %d: %s", c->status, c->err);
    }
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

    fx_cases(t);

    th_case(t, "traces/mobilenet-v2-224-v3-8.json: Keras's 3,504,872 trainable "
               "weights, 300.8 M MACs an image; every depthwise layer on the "
               "vector unit, but block_3's weight gradient with batchnorm "
               "fused (xla.batch_lanes=0)");
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
        /* Unfused batchnorm: all three parts of every depthwise layer on
         * the vector unit. */
        char mxu[256];
        int on_vec = dw_placement(t, &g, "0", mxu, sizeof mxu);
        TH_CHECKF(t, on_vec == 3 * 17 && mxu[0] == 0,
                  "unfused: %d parts on the vector unit, on the MXU: %s",
                  on_vec, mxu);
        /* Fused (the default), each tap's input is normalised and
         * rectified as the vector pass reads it: 5 more operations per tap
         * for every output element of the weight gradient.  For
         * block_3_depthwise (56x56x144 in, stride 2) that makes one
         * product per group on the MXU the faster weight gradient, by a
         * hair (the layer takes 1.922 ms so, 1.926 with
         * xla.group_conv=3); its forward and input gradient, and the other
         * layers, stay on the vector unit. */
        on_vec = dw_placement(t, &g, "1", mxu, sizeof mxu);
        TH_CHECKF(t, on_vec == 3 * 17 - 1 &&
                         strcmp(mxu, " block_3_depthwise:dw") == 0,
                  "fused: %d parts on the vector unit, on the MXU:%s", on_vec,
                  mxu);
    }
    graph_free(&g);
    {
        th_cmd_result *c = malloc(sizeof *c);
        if (c)
            share_groups_cases(t, c);
        free(c);
    }
}
