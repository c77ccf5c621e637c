/* The functional reference itself (test/fxref.h), on cases small enough to
 * work out by hand from fxdata.h's definitions: a 1x1 conv is a dot
 * product, a same conv at a corner sees only the in-bounds taps, a
 * transposed conv's size and one value, avgpool at a padded edge divides
 * by the in-bounds count, batchnorm normalises per replica, dropout, and
 * determinism.  The reference's implementation is compiled here (see
 * fxref.h's build note). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/fx/fxdata.h"
#include "mxu/bf16.h"
#include "test/fxref.c"
#include "test/harness.h"

/* A trace around one input and some layers (JSON fragments). */
static int fx_graph(th_ctx *t, graph *g, const char *sys, int64_t batch,
                    const char *mode, const char *input, const char *layers)
{
    char text[4096];
    tpu_error err;
    snprintf(text, sizeof text,
             "{\"format\":\"tpuemu-trace/1\",\"system\":\"%s\","
             "\"run\":{\"mode\":\"%s\",\"global_batch\":%lld},"
             "\"graph\":{\"inputs\":[%s],\"layers\":[%s]}}",
             sys, mode, (long long)batch, input, layers);
    memset(&err, 0, sizeof err);
    if (graph_parse(g, text, strlen(text), "fx.json", &err) != TPU_OK) {
        TH_FAIL(t, "graph_parse: %s", err.msg);
        return 0;
    }
    return 1;
}

static double *fx_fwd(th_ctx *t, const graph *g, uint64_t seed, int64_t batch,
                      int train, int64_t want)
{
    double *out = NULL;
    int64_t n = 0;
    tpu_error err;
    if (fxref_forward(g, seed, 0, batch, train, &out, &n, &err) != TPU_OK) {
        TH_FAIL(t, "fxref_forward: %s", err.msg);
        return NULL;
    }
    if (!TH_CHECKF(t, n == want, "%lld elements, expected %lld", (long long)n,
                   (long long)want)) {
        free(out);
        return NULL;
    }
    return out;
}

/* Input element as an f32 input stores it. */
static double fx_in(uint64_t seed, int64_t batch, int64_t b, int64_t e,
                    int64_t elems)
{
    return (double)(float)fxd_input(seed, 0, 0, batch, b, e, elems, 1);
}

static int fx_close(double a, double b)
{
    return fabs(a - b) <= 1e-6 * (1 + fabs(b));
}

void th_suite_fxref(th_ctx *t)
{
    graph g;
    double *y, *y2;
    const uint64_t seed = 7;

    th_case(t, "a 1x1 conv is a dot product over channels (f32 and bf16)");
    if (fx_graph(t, &g, "v3-8", 8, "infer",
                 "{\"name\":\"x\",\"shape\":[2,3,4],\"dtype\":\"f32\"}",
                 "{\"name\":\"c\",\"op\":\"conv\",\"in\":\"x\",\"filters\":3,"
                 "\"kernel\":[1,1],\"dtype\":\"f32\"}")) {
        if ((y = fx_fwd(t, &g, seed, 8, 0, 8 * 6 * 3))) {
            int bad = 0;
            for (int b = 0; b < 8; b++)
                for (int p = 0; p < 6; p++)
                    for (int co = 0; co < 3; co++) {
                        double s = 0;
                        for (int ci = 0; ci < 4; ci++)
                            s += fx_in(seed, 8, b, p * 4 + ci, 24) *
                                 (double)fxd_weight(seed, 1, ci * 3 + co, 4, 3);
                        bad += !fx_close(y[(b * 6 + p) * 3 + co], (double)(float)s);
                    }
            TH_CHECKF(t, bad == 0, "%d of 144 values differ", bad);
            free(y);
        }
        graph_free(&g);
    }
    if (fx_graph(t, &g, "v3-8", 8, "infer",
                 "{\"name\":\"x\",\"shape\":[1,1,4]}",
                 "{\"name\":\"c\",\"op\":\"conv\",\"in\":\"x\",\"filters\":2,"
                 "\"kernel\":[1,1]}")) {
        if ((y = fx_fwd(t, &g, seed, 8, 0, 16))) {
            /* bf16 input, bf16 weights, bf16 output */
            double s = 0;
            for (int ci = 0; ci < 4; ci++)
                s += (double)bf16_to_f32(bf16_from_f32(
                         (float)fxd_input(seed, 0, 0, 8, 3, ci, 4, 1))) *
                     (double)bf16_to_f32(
                         bf16_from_f32(fxd_weight(seed, 1, ci * 2 + 1, 4, 2)));
            TH_CHECKF(t, y[3 * 2 + 1] == (double)bf16_to_f32(bf16_from_f32((float)s)),
                      "got %.9g, expected bf16(%.9g)", y[7], s);
            free(y);
        }
        graph_free(&g);
    }

    th_case(t, "a 3x3 same conv at the corner sees the 2x2 in-bounds taps");
    if (fx_graph(t, &g, "v3-8", 8, "infer",
                 "{\"name\":\"x\",\"shape\":[5,5,2],\"dtype\":\"f32\"}",
                 "{\"name\":\"c\",\"op\":\"conv\",\"in\":\"x\",\"filters\":1,"
                 "\"kernel\":[3,3],\"dtype\":\"f32\"}")) {
        if ((y = fx_fwd(t, &g, seed, 8, 0, 8 * 25))) {
            /* pad_lo 1: output (0,0) reads x[th-1][tw-1] for th, tw >= 1;
             * output (4,4) reads x[3+th][3+tw] for th, tw <= 1. */
            double s = 0, s2 = 0;
            for (int th = 1; th < 3; th++)
                for (int tw = 1; tw < 3; tw++)
                    for (int ci = 0; ci < 2; ci++)
                        s += fx_in(seed, 8, 5, ((th - 1) * 5 + tw - 1) * 2 + ci, 50) *
                             (double)fxd_weight(seed, 1, (th * 3 + tw) * 2 + ci, 18, 9);
            for (int th = 0; th < 2; th++)
                for (int tw = 0; tw < 2; tw++)
                    for (int ci = 0; ci < 2; ci++)
                        s2 += fx_in(seed, 8, 5, ((3 + th) * 5 + 3 + tw) * 2 + ci, 50) *
                              (double)fxd_weight(seed, 1, (th * 3 + tw) * 2 + ci, 18, 9);
            TH_CHECKF(t, fx_close(y[5 * 25], s), "corner %.9g, expected %.9g",
                      y[5 * 25], s);
            TH_CHECKF(t, fx_close(y[5 * 25 + 24], s2), "far corner %.9g, expected %.9g",
                      y[5 * 25 + 24], s2);
            free(y);
        }
        graph_free(&g);
    }

    th_case(t, "strided dilated valid conv: output size and one value");
    if (fx_graph(t, &g, "v3-8", 8, "infer",
                 "{\"name\":\"x\",\"shape\":[9,7,1],\"dtype\":\"f32\"}",
                 "{\"name\":\"c\",\"op\":\"conv\",\"in\":\"x\",\"filters\":1,"
                 "\"kernel\":[2,2],\"strides\":[2,1],\"dilation\":[3,2],"
                 "\"padding\":\"valid\",\"dtype\":\"f32\"}")) {
        /* span 4 x 3: H (9-4+1)/2 -> 3, W 7-3+1 = 5 */
        if ((y = fx_fwd(t, &g, seed, 8, 0, 8 * 15))) {
            /* output (2,1) of example 0: rows 4 and 7, columns 1 and 3 */
            double s = 0;
            for (int th = 0; th < 2; th++)
                for (int tw = 0; tw < 2; tw++)
                    s += fx_in(seed, 8, 0, (4 + 3 * th) * 7 + 1 + 2 * tw, 63) *
                         (double)fxd_weight(seed, 1, th * 2 + tw, 4, 4);
            TH_CHECKF(t, fx_close(y[2 * 5 + 1], s), "%.9g, expected %.9g",
                      y[11], s);
            free(y);
        }
        graph_free(&g);
    }

    th_case(t, "conv_transpose stride 2: sizes (same 6, valid 7) and values");
    if (fx_graph(t, &g, "v3-8", 8, "infer",
                 "{\"name\":\"x\",\"shape\":[3,3,1],\"dtype\":\"f32\"}",
                 "{\"name\":\"d\",\"op\":\"conv_transpose\",\"in\":\"x\","
                 "\"filters\":1,\"kernel\":[3,3],\"strides\":[2,2],"
                 "\"dtype\":\"f32\"}")) {
        if ((y = fx_fwd(t, &g, seed, 8, 0, 8 * 36))) {
            /* same: pad_lo = 2 - floor(1/2) = 2.  out[o] sums x[j/2] w[t]
             * with j = o - 2 + t even and in range.  (1,1): j = t-1 -> t = 1
             * only; (2,2): t in {0, 2} -> x[0], x[1] in each dim. */
            double a = fx_in(seed, 8, 1, 0, 9) * (double)fxd_weight(seed, 1, 4, 9, 9);
            double b = 0;
            for (int th = 0; th < 2; th++)
                for (int tw = 0; tw < 2; tw++)
                    b += fx_in(seed, 8, 1, th * 3 + tw, 9) *
                         (double)fxd_weight(seed, 1, (2 * th) * 3 + 2 * tw, 9, 9);
            TH_CHECKF(t, fx_close(y[36 + 1 * 6 + 1], a), "(1,1) %.9g, expected %.9g",
                      y[36 + 7], a);
            TH_CHECKF(t, fx_close(y[36 + 2 * 6 + 2], b), "(2,2) %.9g, expected %.9g",
                      y[36 + 14], b);
            free(y);
        }
        graph_free(&g);
    }
    if (fx_graph(t, &g, "v3-8", 8, "infer",
                 "{\"name\":\"x\",\"shape\":[3,3,1],\"dtype\":\"f32\"}",
                 "{\"name\":\"d\",\"op\":\"conv_transpose\",\"in\":\"x\","
                 "\"filters\":1,\"kernel\":[3,3],\"strides\":[2,2],"
                 "\"padding\":\"valid\",\"dtype\":\"f32\"}")) {
        if ((y = fx_fwd(t, &g, seed, 8, 0, 8 * 49))) {
            /* valid: pad_lo 2; the last output (6,6) reads xd[4 + t], only
             * t = 0 in range: x[2][2] w[0][0] (the definition's taps are
             * not flipped). */
            double a = fx_in(seed, 8, 0, 8, 9) * (double)fxd_weight(seed, 1, 0, 9, 9);
            TH_CHECKF(t, fx_close(y[48], a), "(6,6) %.9g, expected %.9g", y[48], a);
            free(y);
        }
        graph_free(&g);
    }

    th_case(t, "avgpool same at the padded edge divides by the in-bounds count");
    if (fx_graph(t, &g, "v3-8", 8, "infer",
                 "{\"name\":\"x\",\"shape\":[4,4,1],\"dtype\":\"f32\"}",
                 "{\"name\":\"p\",\"op\":\"avgpool\",\"in\":\"x\",\"window\":3,"
                 "\"strides\":1,\"padding\":\"same\",\"dtype\":\"f32\"},"
                 "{\"name\":\"m\",\"op\":\"maxpool\",\"in\":\"x\",\"window\":3,"
                 "\"strides\":1,\"padding\":\"same\",\"dtype\":\"f32\"},"
                 "{\"name\":\"c\",\"op\":\"concat\",\"in\":[\"p\",\"m\"],"
                 "\"dtype\":\"f32\"}")) {
        if ((y = fx_fwd(t, &g, seed, 8, 0, 8 * 32))) {
            double s = 0, m = -1e9;
            for (int h = 0; h < 2; h++)
                for (int w = 0; w < 2; w++) {
                    double v = fx_in(seed, 8, 2, h * 4 + w, 16);
                    s += v;
                    m = v > m ? v : m;
                }
            TH_CHECKF(t, fx_close(y[2 * 32], s / 4), "avg %.9g, expected %.9g",
                      y[64], s / 4);
            TH_CHECKF(t, y[2 * 32 + 1] == m, "max %.9g, expected %.9g", y[65], m);
            free(y);
        }
        graph_free(&g);
    }

    th_case(t, "upsample, flatten, dense: out = x[o/f], flat dot product");
    if (fx_graph(t, &g, "v3-8", 8, "infer",
                 "{\"name\":\"x\",\"shape\":[2,3,2],\"dtype\":\"f32\"}",
                 "{\"name\":\"u\",\"op\":\"upsample\",\"in\":\"x\",\"factor\":[2,3],"
                 "\"dtype\":\"f32\"},"
                 "{\"name\":\"f\",\"op\":\"flatten\",\"in\":\"u\",\"dtype\":\"f32\"},"
                 "{\"name\":\"d\",\"op\":\"dense\",\"in\":\"f\",\"units\":2,"
                 "\"dtype\":\"f32\"}")) {
        double *u = NULL;
        int64_t n = 0;
        tpu_error err;
        TH_CHECK(t, fxref_layer(&g, 1, seed, 0, 8, 8, 0, &u, &n, &err) == TPU_OK);
        if (u && TH_CHECK(t, n == 8 * 4 * 9 * 2)) {
            /* example 1, output (3, 7), channel 1 <- x (1, 2) channel 1 */
            TH_CHECK(t, u[72 + (3 * 9 + 7) * 2 + 1] ==
                            fx_in(seed, 8, 1, (1 * 3 + 2) * 2 + 1, 12));
        }
        if (u && (y = fx_fwd(t, &g, seed, 8, 0, 16))) {
            double s = 0;
            for (int i = 0; i < 72; i++)
                s += u[72 * 5 + i] * (double)fxd_weight(seed, 3, i * 2 + 1, 72, 2);
            TH_CHECKF(t, fx_close(y[5 * 2 + 1], s), "%.9g, expected %.9g",
                      y[11], s);
            free(y);
        }
        free(u);
        graph_free(&g);
    }

    th_case(t, "batchnorm normalises each replica's examples; dropout masks");
    if (fx_graph(t, &g, "v3-8", 16, "train",
                 "{\"name\":\"x\",\"shape\":[3,3,2],\"dtype\":\"f32\"}",
                 "{\"name\":\"n\",\"op\":\"batchnorm\",\"in\":\"x\",\"dtype\":\"f32\"},"
                 "{\"name\":\"d\",\"op\":\"dropout\",\"in\":\"x\",\"rate\":0.5,"
                 "\"dtype\":\"f32\"}")) {
        double *bn = NULL, *x = NULL;
        int64_t n = 0;
        tpu_error err;
        /* 8 replicas of 2 examples: each pair of examples has mean 0 and
         * variance v/(v+1e-3) per channel. */
        TH_CHECK(t, fxref_layer(&g, 1, seed, 0, 16, 8, 1, &bn, &n, &err) == TPU_OK);
        TH_CHECK(t, fxref_layer(&g, 0, seed, 0, 16, 8, 1, &x, &n, &err) == TPU_OK);
        if (bn && x) {
            int bad = 0;
            for (int r = 0; r < 8; r++)
                for (int ch = 0; ch < 2; ch++) {
                    double s = 0, q = 0, xs = 0, xq = 0;
                    for (int k = 0; k < 18; k++) {
                        double v = bn[r * 36 + k * 2 + ch], w = x[r * 36 + k * 2 + ch];
                        s += v, q += v * v, xs += w, xq += w * w;
                    }
                    double xv = xq / 18 - (xs / 18) * (xs / 18);
                    bad += fabs(s / 18) > 1e-6 ||
                           fabs(q / 18 - xv / (xv + 1e-3)) > 1e-5;
                }
            TH_CHECKF(t, bad == 0, "%d of 16 (replica, channel) groups off", bad);
        }
        if (x && (y = fx_fwd(t, &g, seed, 16, 1, 16 * 18))) {
            int bad = 0, kept = 0;
            for (int k = 0; k < 16 * 18; k++) {
                int keep = fxd_u(seed, FXD_TAG_DROPOUT + 2, (uint64_t)k) >= 0.5;
                kept += keep;
                bad += y[k] != (keep ? x[k] * 2 : 0);
            }
            TH_CHECKF(t, bad == 0, "%d dropout values wrong", bad);
            TH_CHECKF(t, kept > 100 && kept < 188, "%d of 288 kept", kept);
            free(y);
        }
        free(bn);
        free(x);
        graph_free(&g);
    }

    th_case(t, "softmax_xent loss from the logits; deterministic per seed");
    if (fx_graph(t, &g, "v2-8", 8, "train",
                 "{\"name\":\"x\",\"shape\":[4,4,3],\"dtype\":\"f32\"}",
                 "{\"name\":\"c\",\"op\":\"conv\",\"in\":\"x\",\"filters\":4,"
                 "\"kernel\":[3,3],\"dtype\":\"f32\"},"
                 "{\"name\":\"r\",\"op\":\"relu\",\"in\":\"c\",\"dtype\":\"f32\"},"
                 "{\"name\":\"f\",\"op\":\"flatten\",\"in\":\"r\",\"dtype\":\"f32\"},"
                 "{\"name\":\"z\",\"op\":\"dense\",\"in\":\"f\",\"units\":5,"
                 "\"dtype\":\"f32\"},"
                 "{\"name\":\"l\",\"op\":\"loss\",\"in\":\"z\",\"kind\":\"softmax_xent\","
                 "\"dtype\":\"f32\"}")) {
        double loss = 0, loss2 = 0, want = 0;
        tpu_error err;
        TH_CHECK(t, fxref_ncls(&g) == 5);
        TH_CHECK(t, fxref_loss(&g, seed, 0, 8, 1, &loss, &err) == TPU_OK);
        TH_CHECK(t, fxref_loss(&g, seed, 0, 8, 1, &loss2, &err) == TPU_OK);
        TH_CHECKF(t, loss == loss2, "%.17g then %.17g", loss, loss2);
        if ((y = fx_fwd(t, &g, seed, 8, 1, 40))) {
            for (int b = 0; b < 8; b++) {
                double se = 0;
                for (int k = 0; k < 5; k++)
                    se += exp(y[b * 5 + k]);
                want += (log(se) - y[b * 5 + fxd_class(seed, 0, 8, b, 5)]) / 8;
            }
            TH_CHECKF(t, fx_close(loss, want) && loss > 0, "loss %.9g, expected %.9g",
                      loss, want);
            y2 = fx_fwd(t, &g, seed, 8, 1, 40);
            if (y2) {
                TH_CHECK(t, memcmp(y, y2, 40 * sizeof *y) == 0);
                free(y2);
            }
            y2 = fx_fwd(t, &g, seed + 1, 8, 1, 40);
            if (y2) {
                TH_CHECK(t, memcmp(y, y2, 40 * sizeof *y) != 0);
                free(y2);
            }
            free(y);
        }
        graph_free(&g);
    }

    th_case(t, "every trace in traces/functional/ runs through the reference");
    {
        static const char *const names[] = {
            "conv2d", "conv3d", "pool-up-concat", "deconv", "dense-heads",
            "resadd", "tiny-train", "cifar-small", NULL};
        for (int k = 0; names[k]; k++) {
            char path[256];
            tpu_error err;
            FILE *f;
            snprintf(path, sizeof path, "traces/functional/%s.json", names[k]);
            if (!(f = fopen(path, "r"))) {
                TH_FAIL(t, "%s: missing", path);
                continue;
            }
            fclose(f);
            if (graph_load(&g, path, &err) != TPU_OK) {
                TH_FAIL(t, "%s: %s", path, err.msg);
                graph_free(&g);
                continue;
            }
            double *o = NULL;
            int64_t n = 0;
            if (fxref_forward(&g, 1, 0, g.global_batch, g.train, &o, &n, &err)) {
                TH_FAIL(t, "%s: %s", path, err.msg);
            } else {
                int bad = 0;
                for (int64_t i = 0; i < n; i++)
                    bad += !isfinite(o[i]);
                TH_CHECKF(t, n > 0 && bad == 0, "%s: %lld values, %d not finite",
                          path, (long long)n, bad);
            }
            free(o);
            graph_free(&g);
        }
    }
}
