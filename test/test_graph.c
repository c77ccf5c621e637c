/* Shape inference, padding, weights, MACs and FLOPs of every op, on cases
 * worked out by hand from TensorFlow's padding rules (docs/TRACE.md), and
 * the ResNet-50 figures everyone knows (25.6M weights, 4.1 GMACs). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "emu/graph.h"
#include "test/harness.h"

static char g_text[16384];

/* Parses a trace made of the given inputs and layers (JSON fragments). */
static tpu_status parse(graph *g, tpu_error *e, const char *inputs,
                        const char *layers, const char *run)
{
    if (!run)
        run = "{\"mode\": \"train\", \"global_batch\": 8}";
    snprintf(g_text, sizeof g_text,
             "{\"format\": \"tpuemu-trace/1\", \"system\": \"v3-8\", "
             "\"run\": %s, \"graph\": {\"inputs\": [%s], \"layers\": [%s]}}",
             run, inputs, layers);
    e->msg[0] = 0;
    return graph_parse(g, g_text, strlen(g_text), "t.json", e);
}

static int shape_is(const gshape *s, int nsp, int64_t a, int64_t b, int64_t c,
                    int64_t ch)
{
    int64_t v[3] = {a, b, c};
    if (s->nsp != nsp || s->c != ch)
        return 0;
    for (int d = 0; d < nsp; d++)
        if (s->sp[d] != v[d])
            return 0;
    return 1;
}

static const glayer *layer(const graph *g, const char *name)
{
    int i = graph_find(g, name);
    return i >= 0 ? &g->layers[i] : NULL;
}

#define OK(t, st, e) TH_CHECKF((t), (st) == TPU_OK, "parse failed: %s", (e).msg)

void th_suite_graph(th_ctx *t)
{
    graph g;
    tpu_error e;
    tpu_status st;
    const glayer *L;

    th_case(t, "conv 7x7/2 same on 224x224x3: 112x112x64, pad 2/3, 9408 "
               "weights");
    st = parse(&g, &e, "{\"name\": \"x\", \"shape\": [224, 224, 3]}",
               "{\"name\": \"c\", \"op\": \"conv\", \"in\": \"x\", "
               "\"filters\": 64, \"kernel\": [7, 7], \"strides\": [2, 2]}",
               NULL);
    if (OK(t, st, e)) {
        L = layer(&g, "c");
        TH_CHECK(t, shape_is(&L->out, 2, 112, 112, 0, 64));
        TH_CHECK(t, L->pad_lo[0] == 2 && L->pad_hi[0] == 3);
        TH_CHECK(t, L->pad_lo[1] == 2 && L->pad_hi[1] == 3);
        TH_CHECK(t, L->weights == 9408);
        TH_CHECK(t, L->macs == 112.0 * 112 * 64 * 147);
        TH_CHECK(t, g.n_inputs == 1 && g.layers[0].op == GOP_INPUT);
    }
    graph_free(&g);

    th_case(t, "conv valid, strides and dilation (2D)");
    st = parse(&g, &e, "{\"name\": \"x\", \"shape\": [10, 7, 4]}",
               "{\"name\": \"v\", \"op\": \"conv\", \"in\": \"x\", "
               "\"filters\": 5, \"kernel\": [3, 3], \"padding\": \"valid\", "
               "\"strides\": [1, 2], \"use_bias\": true},"
               "{\"name\": \"d\", \"op\": \"conv\", \"in\": \"x\", "
               "\"filters\": 2, \"kernel\": [3, 3], \"padding\": \"valid\", "
               "\"dilation\": 2},"
               "{\"name\": \"ds\", \"op\": \"conv\", \"in\": \"x\", "
               "\"filters\": 2, \"kernel\": [3, 3], \"dilation\": [2, 2]},"
               "{\"name\": \"one\", \"op\": \"conv\", \"in\": \"x\", "
               "\"filters\": 2, \"kernel\": [1, 1], \"strides\": 2}",
               NULL);
    if (OK(t, st, e)) {
        L = layer(&g, "v"); /* (10-2)/1 = 8; ceil((7-2)/2) = 3 */
        TH_CHECK(t, shape_is(&L->out, 2, 8, 3, 0, 5));
        TH_CHECK(t, L->pad_lo[0] == 0 && L->pad_hi[1] == 0);
        TH_CHECK(t, L->weights == 3 * 3 * 4 * 5 + 5);
        TH_CHECK(t, L->macs == 8.0 * 3 * 5 * 9 * 4);
        L = layer(&g, "d"); /* span 5: 10-4 = 6, 7-4 = 3 */
        TH_CHECK(t, shape_is(&L->out, 2, 6, 3, 0, 2));
        L = layer(&g, "ds"); /* same: total (10-1)+5-10 = 4 -> 2/2 */
        TH_CHECK(t, shape_is(&L->out, 2, 10, 7, 0, 2));
        TH_CHECK(t, L->pad_lo[0] == 2 && L->pad_hi[0] == 2);
        L = layer(&g, "one"); /* 1x1/2 same: ceil(10/2), ceil(7/2), no pad */
        TH_CHECK(t, shape_is(&L->out, 2, 5, 4, 0, 2));
        TH_CHECK(t, L->pad_lo[0] == 0 && L->pad_hi[0] == 0 &&
                        L->pad_hi[1] == 0);
    }
    graph_free(&g);

    th_case(t, "conv 3D same stride 2: odd extents pad the high side");
    st = parse(&g, &e, "{\"name\": \"x\", \"shape\": [16, 15, 14, 8]}",
               "{\"name\": \"c\", \"op\": \"conv\", \"in\": \"x\", "
               "\"filters\": 4, \"kernel\": [3, 3, 3], \"strides\": [2, 2, 2]}",
               NULL);
    if (OK(t, st, e)) {
        L = layer(&g, "c");
        TH_CHECK(t, shape_is(&L->out, 3, 8, 8, 7, 4));
        /* D: 7*2+3-16 = 1; H: 7*2+3-15 = 2; W: 6*2+3-14 = 1 */
        TH_CHECK(t, L->pad_lo[0] == 0 && L->pad_hi[0] == 1);
        TH_CHECK(t, L->pad_lo[1] == 1 && L->pad_hi[1] == 1);
        TH_CHECK(t, L->pad_lo[2] == 0 && L->pad_hi[2] == 1);
        TH_CHECK(t, L->weights == 27 * 8 * 4);
        TH_CHECK(t, L->macs == 8.0 * 8 * 7 * 4 * 27 * 8);
    }
    graph_free(&g);

    th_case(t, "conv_transpose same and valid, 2D and 3D");
    st = parse(&g, &e, "{\"name\": \"x\", \"shape\": [8, 4, 16]},"
                       "{\"name\": \"v\", \"shape\": [4, 4, 4, 2]}",
               "{\"name\": \"s\", \"op\": \"conv_transpose\", \"in\": \"x\", "
               "\"filters\": 8, \"kernel\": [2, 2], \"strides\": [2, 2]},"
               "{\"name\": \"va\", \"op\": \"conv_transpose\", \"in\": \"x\", "
               "\"filters\": 8, \"kernel\": [3, 3], \"strides\": [2, 2], "
               "\"padding\": \"valid\"},"
               "{\"name\": \"k1\", \"op\": \"conv_transpose\", \"in\": \"x\", "
               "\"filters\": 8, \"kernel\": [1, 1], \"strides\": 2},"
               "{\"name\": \"t3\", \"op\": \"conv_transpose\", \"in\": \"v\", "
               "\"filters\": 3, \"kernel\": [2, 2, 2], \"strides\": [2, 2, 2]}",
               NULL);
    if (OK(t, st, e)) {
        L = layer(&g, "s"); /* same: in*s */
        TH_CHECK(t, shape_is(&L->out, 2, 16, 8, 0, 8));
        /* equivalent stride-1 conv over the dilated input (15 x 7):
         * 15 + 1 + 1 - 2 + 1 = 16 */
        TH_CHECK(t, L->pad_lo[0] == 1 && L->pad_hi[0] == 1);
        TH_CHECK(t, L->weights == 4 * 16 * 8);
        TH_CHECK(t, L->macs == 8.0 * 4 * 16 * 4 * 8);
        L = layer(&g, "va"); /* valid: (in-1)*s + k */
        TH_CHECK(t, shape_is(&L->out, 2, 17, 9, 0, 8));
        TH_CHECK(t, L->pad_lo[0] == 2 && L->pad_hi[0] == 2);
        L = layer(&g, "k1"); /* k < s: 7 + 0 + 1 - 1 + 1 = 8 */
        TH_CHECK(t, shape_is(&L->out, 2, 16, 8, 0, 8));
        TH_CHECK(t, L->pad_lo[0] == 0 && L->pad_hi[0] == 1);
        L = layer(&g, "t3");
        TH_CHECK(t, shape_is(&L->out, 3, 8, 8, 8, 3));
        TH_CHECK(t, L->weights == 8 * 2 * 3);
        /* the equivalent conv reproduces every output extent */
        for (int i = 0; i < g.n_layers; i++) {
            const glayer *T = &g.layers[i];
            const glayer *I;
            if (T->op != GOP_CONV_T)
                continue;
            I = &g.layers[T->in[0]];
            for (int d = 0; d < T->out.nsp; d++)
                TH_CHECKF(t, (I->out.sp[d] - 1) * T->strides[d] + 1 +
                                     T->pad_lo[d] + T->pad_hi[d] -
                                     T->kernel[d] + 1 ==
                                 T->out.sp[d],
                          "%s dim %d", T->name, d);
        }
    }
    graph_free(&g);

    th_case(t, "dense on the last dim, flatten, global_avgpool");
    st = parse(&g, &e, "{\"name\": \"x\", \"shape\": [4, 4, 16]}",
               "{\"name\": \"d\", \"op\": \"dense\", \"in\": \"x\", "
               "\"units\": 10},"
               "{\"name\": \"nb\", \"op\": \"dense\", \"in\": \"x\", "
               "\"units\": 10, \"use_bias\": false},"
               "{\"name\": \"f\", \"op\": \"flatten\", \"in\": \"x\"},"
               "{\"name\": \"fd\", \"op\": \"dense\", \"in\": \"f\", "
               "\"units\": 3},"
               "{\"name\": \"g\", \"op\": \"global_avgpool\", \"in\": \"x\"},"
               "{\"name\": \"bn\", \"op\": \"batchnorm\", \"in\": \"x\"}",
               NULL);
    if (OK(t, st, e)) {
        L = layer(&g, "d");
        TH_CHECK(t, shape_is(&L->out, 2, 4, 4, 0, 10));
        TH_CHECK(t, L->weights == 170 && L->macs == 2560);
        TH_CHECK(t, layer(&g, "nb")->weights == 160);
        TH_CHECK(t, shape_is(&layer(&g, "f")->out, 0, 0, 0, 0, 256));
        TH_CHECK(t, layer(&g, "fd")->weights == 256 * 3 + 3);
        TH_CHECK(t, shape_is(&layer(&g, "g")->out, 0, 0, 0, 0, 16));
        TH_CHECK(t, layer(&g, "bn")->weights == 32);
    }
    graph_free(&g);

    th_case(t, "pooling: numbers or lists, same and valid, 2D and 3D");
    st = parse(&g, &e, "{\"name\": \"x\", \"shape\": [112, 5, 8]},"
                       "{\"name\": \"v\", \"shape\": [8, 8, 9, 4]}",
               "{\"name\": \"p\", \"op\": \"maxpool\", \"in\": \"x\", "
               "\"window\": 3, \"strides\": 2, \"padding\": \"same\"},"
               "{\"name\": \"q\", \"op\": \"avgpool\", \"in\": \"x\", "
               "\"window\": [2, 2], \"strides\": [1, 1]},"
               "{\"name\": \"r\", \"op\": \"maxpool\", \"in\": \"x\", "
               "\"window\": 2},"
               "{\"name\": \"p3\", \"op\": \"maxpool\", \"in\": \"v\", "
               "\"window\": [2, 2, 2]}",
               NULL);
    if (OK(t, st, e)) {
        L = layer(&g, "p"); /* ceil(112/2) = 56, pad 55*2+3-112 = 1 */
        TH_CHECK(t, shape_is(&L->out, 2, 56, 3, 0, 8));
        TH_CHECK(t, L->pad_lo[0] == 0 && L->pad_hi[0] == 1);
        TH_CHECK(t, shape_is(&layer(&g, "q")->out, 2, 111, 4, 0, 8));
        /* strides default to the window; valid drops the odd column */
        TH_CHECK(t, shape_is(&layer(&g, "r")->out, 2, 56, 2, 0, 8));
        TH_CHECK(t, shape_is(&layer(&g, "p3")->out, 3, 4, 4, 4, 4));
        TH_CHECK(t, layer(&g, "p")->weights == 0);
    }
    graph_free(&g);

    th_case(t, "upsample, concat, add, dropout, loss");
    st = parse(&g, &e, "{\"name\": \"x\", \"shape\": [5, 6, 3]},"
                       "{\"name\": \"v\", \"shape\": [2, 3, 4, 1]}",
               "{\"name\": \"u\", \"op\": \"upsample\", \"in\": \"x\", "
               "\"factor\": 2},"
               "{\"name\": \"u3\", \"op\": \"upsample\", \"in\": \"v\", "
               "\"factor\": [1, 2, 3]},"
               "{\"name\": \"y\", \"op\": \"conv\", \"in\": \"x\", "
               "\"filters\": 5, \"kernel\": [3, 3]},"
               "{\"name\": \"cat\", \"op\": \"concat\", \"in\": [\"x\", \"y\", "
               "\"x\"]},"
               "{\"name\": \"sum\", \"op\": \"add\", \"in\": [\"x\", \"x\"]},"
               "{\"name\": \"dr\", \"op\": \"dropout\", \"in\": \"sum\", "
               "\"rate\": 0},"
               "{\"name\": \"l\", \"op\": \"loss\", \"in\": [\"cat\", \"dr\"], "
               "\"kind\": \"l2\"}",
               NULL);
    if (OK(t, st, e)) {
        TH_CHECK(t, shape_is(&layer(&g, "u")->out, 2, 10, 12, 0, 3));
        TH_CHECK(t, shape_is(&layer(&g, "u3")->out, 3, 2, 6, 12, 1));
        TH_CHECK(t, shape_is(&layer(&g, "cat")->out, 2, 5, 6, 0, 11));
        TH_CHECK(t, shape_is(&layer(&g, "sum")->out, 2, 5, 6, 0, 3));
        L = layer(&g, "l");
        TH_CHECK(t, L->n_in == 2 && L->loss == GLOSS_L2);
        TH_CHECK(t, shape_is(&L->out, 0, 0, 0, 0, 1));
        TH_CHECK(t, strcmp(graph_loss_name(L->loss), "l2") == 0);
    }
    graph_free(&g);

    th_case(t, "forward FLOPs: 2 x MACs plus one per elementwise output");
    /* conv 1x1 4x4x2 -> 3 with bias: 2*96 + 48; relu 48; add 48; gap 48
     * (its input); dense 3 -> 5 with bias: 2*15 + 5; loss 5 (its input). */
    st = parse(&g, &e, "{\"name\": \"x\", \"shape\": [4, 4, 2]}",
               "{\"name\": \"c\", \"op\": \"conv\", \"in\": \"x\", "
               "\"filters\": 3, \"kernel\": [1, 1], \"use_bias\": true},"
               "{\"name\": \"r\", \"op\": \"relu\", \"in\": \"c\"},"
               "{\"name\": \"a\", \"op\": \"add\", \"in\": [\"r\", \"c\"]},"
               "{\"name\": \"g\", \"op\": \"global_avgpool\", \"in\": \"a\"},"
               "{\"name\": \"d\", \"op\": \"dense\", \"in\": \"g\", "
               "\"units\": 5},"
               "{\"name\": \"l\", \"op\": \"loss\", \"in\": \"d\", "
               "\"kind\": \"softmax_xent\"}",
               NULL);
    if (OK(t, st, e)) {
        TH_CHECKF(t, graph_forward_flops(&g) == 424, "%g",
                  graph_forward_flops(&g));
        TH_CHECK(t, graph_layer_flops(&g, graph_find(&g, "c")) == 240);
        /* backward: conv reads the data input (weight gradient only):
         * 192 + 48; dense 4*15 + 5; elementwise 2 x (48+48+48+5) */
        TH_CHECKF(t, graph_backward_flops(&g) == 240 + 65 + 2 * 149, "%g",
                  graph_backward_flops(&g));
        TH_CHECK(t, graph_weights(&g) == 9 + 20);
        TH_CHECK(t, graph_layer_out_bytes(&g, graph_find(&g, "c")) == 96);
    }
    graph_free(&g);

    th_case(t, "share_weights: sharer counts no weights but all its MACs");
    st = parse(&g, &e, "{\"name\": \"x\", \"shape\": [8, 8, 4]}",
               "{\"name\": \"a\", \"op\": \"conv\", \"in\": \"x\", "
               "\"filters\": 4, \"kernel\": [3, 3]},"
               "{\"name\": \"b\", \"op\": \"conv\", \"in\": \"a\", "
               "\"filters\": 4, \"kernel\": [3, 3], \"share_weights\": "
               "\"a\"},"
               "{\"name\": \"c\", \"op\": \"conv\", \"in\": \"b\", "
               "\"filters\": 4, \"kernel\": [3, 3], \"share_weights\": "
               "\"b\"}",
               NULL);
    if (OK(t, st, e)) {
        TH_CHECK(t, layer(&g, "a")->weights == 144);
        TH_CHECK(t, layer(&g, "b")->weights == 0 &&
                        layer(&g, "b")->share_from == 1);
        TH_CHECK(t, layer(&g, "c")->share_from == 1); /* the root */
        TH_CHECK(t, layer(&g, "c")->macs == layer(&g, "a")->macs);
        TH_CHECK(t, layer(&g, "a")->share_from == -1);
    }
    graph_free(&g);

    th_case(t, "share_weights on dense and the normalisations: weights "
               "once, MACs and backward FLOPs per call, dense on another "
               "spatial extent");
    st = parse(&g, &e, "{\"name\": \"x\", \"shape\": [8, 8, 4]}",
               "{\"name\": \"bn\", \"op\": \"batchnorm\", \"in\": \"x\"},"
               "{\"name\": \"ln\", \"op\": \"layer_norm\", \"in\": \"bn\"},"
               "{\"name\": \"gn\", \"op\": \"group_norm\", \"in\": \"ln\", "
               "\"groups\": 2},"
               "{\"name\": \"nz\", \"op\": \"normalize\", \"in\": \"gn\"},"
               "{\"name\": \"d\", \"op\": \"dense\", \"in\": \"nz\", "
               "\"units\": 3},"
               "{\"name\": \"bn2\", \"op\": \"batchnorm\", \"in\": \"d\"},"
               "{\"name\": \"bn3\", \"op\": \"batchnorm\", \"in\": \"x\", "
               "\"share_weights\": \"bn\", \"statistics\": \"moving\"},"
               "{\"name\": \"ln3\", \"op\": \"layer_norm\", \"in\": \"bn3\", "
               "\"share_weights\": \"ln\"},"
               "{\"name\": \"gn3\", \"op\": \"group_norm\", \"in\": \"ln3\", "
               "\"groups\": 2, \"share_weights\": \"gn\"},"
               "{\"name\": \"nz3\", \"op\": \"normalize\", \"in\": \"gn3\", "
               "\"share_weights\": \"nz\"},"
               "{\"name\": \"f\", \"op\": \"flatten\", \"in\": \"nz3\", "
               "\"keep\": 1},"
               "{\"name\": \"p\", \"op\": \"global_avgpool\", \"in\": \"nz3\"},"
               "{\"name\": \"d3\", \"op\": \"dense\", \"in\": \"p\", "
               "\"units\": 3, \"share_weights\": \"d\"},"
               "{\"name\": \"d4\", \"op\": \"dense\", \"in\": \"nz3\", "
               "\"units\": 3, \"share_weights\": \"d3\"}",
               NULL);
    if (OK(t, st, e)) {
        /* bn 8, ln 8, gn 8, normalize 9 (never trained), dense 15 */
        TH_CHECKF(t, graph_weights(&g) == 8 + 8 + 8 + 9 + 15 + 6, "%lld",
                  (long long)graph_weights(&g));
        TH_CHECKF(t, graph_trainable_weights(&g) == 8 + 8 + 8 + 15 + 6,
                  "%lld", (long long)graph_trainable_weights(&g));
        static const char *const sh[] = {"bn3", "ln3", "gn3", "nz3", "d3",
                                         "d4"};
        static const char *const own[] = {"bn", "ln", "gn", "nz", "d", "d"};
        for (int k = 0; k < 6; k++)
            TH_CHECKF(t, layer(&g, sh[k])->weights == 0 &&
                             layer(&g, sh[k])->share_from ==
                                 graph_find(&g, own[k]),
                      "%s", sh[k]);
        TH_CHECK(t, layer(&g, "nz3")->frozen && !layer(&g, "d4")->frozen);
        /* d4 reads [8,8,4] like d: all of d's MACs; d3 one position's */
        TH_CHECK(t, layer(&g, "d4")->macs == layer(&g, "d")->macs &&
                        layer(&g, "d3")->macs == 4 * 3);
        /* the sharers train their owners' weights: a weight gradient */
        TH_CHECK(t, graph_layer_trains(&g, graph_find(&g, "d3")) &&
                        graph_layer_trains(&g, graph_find(&g, "bn3")) &&
                        !graph_layer_trains(&g, graph_find(&g, "nz3")));
    }
    graph_free(&g);

    th_case(t, "dtype, run section, partition dims, reference");
    st = parse(&g, &e, "{\"name\": \"x\", \"shape\": [64, 32, 3], "
                       "\"dtype\": \"f32\"}",
               "{\"name\": \"c\", \"op\": \"conv\", \"in\": \"x\", "
               "\"filters\": 4, \"kernel\": [3, 3], \"dtype\": \"f32\"},"
               "{\"name\": \"r\", \"op\": \"relu\", \"in\": \"c\"}",
               "{\"mode\": \"infer\", \"global_batch\": 4, "
               "\"num_cores_per_replica\": 8, "
               "\"input_partition_dims\": [[1, 4, 2, 1], [1, 8]]}");
    if (OK(t, st, e)) {
        TH_CHECK(t, g.layers[0].dtype_bytes == 4);
        TH_CHECK(t, layer(&g, "c")->dtype_bytes == 4);
        TH_CHECK(t, layer(&g, "r")->dtype_bytes == 2);
        TH_CHECK(t, g.train == 0 && g.global_batch == 4);
        TH_CHECK(t, g.cores_per_replica == 8 && g.pdims_rank == 4);
        TH_CHECK(t, g.pdims[0] == 1 && g.pdims[1] == 4 && g.pdims[2] == 2 &&
                        g.pdims[3] == 1);
        TH_CHECK(t, g.labels_partitioned == 1);
        TH_CHECK(t, strcmp(g.system, "v3-8") == 0);
        TH_CHECK(t, strcmp(g.name, "t") == 0); /* from the file name */
        /* --system / --batch overrides go through the same check */
        TH_CHECK(t, graph_check_run(&g, "v3-64", 8, "t.json", &e) == TPU_OK);
        st = graph_check_run(&g, "v3-32", 6, "t.json", &e);
        TH_CHECKF(t, st == TPU_ERR_INPUT &&
                         strstr(e.msg, "t.json: run.global_batch: 6 does "
                                       "not divide into 4 replicas"),
                  "%s", e.msg);
        st = graph_check_run(&g, "v3-7", 8, "t.json", &e);
        TH_CHECKF(t, st == TPU_ERR_INPUT &&
                         strstr(e.msg, "t.json: system: unknown slice"),
                  "%s", e.msg);
        st = graph_check_run(&g, "v2-8", 0, "t.json", &e);
        TH_CHECK(t, st == TPU_ERR_INPUT);
    }
    graph_free(&g);
    st = parse(&g, &e, "{\"name\": \"x\", \"shape\": [6, 6, 3]}",
               "{\"name\": \"r\", \"op\": \"relu\", \"in\": \"x\"}", NULL);
    if (OK(t, st, e)) {
        /* absent partition dims: all ones, rank N + spatial + C */
        TH_CHECK(t, g.pdims_rank == 4 && g.pdims[1] == 1 &&
                        g.cores_per_replica == 1 && g.train == 1);
        TH_CHECK(t, g.has_reference == 0 && g.labels_partitioned == 0);
    }
    graph_free(&g);

    th_case(t, "small test traces load with hand-counted weights");
    st = graph_load(&g, "traces/small/tiny2d.json", &e);
    if (OK(t, st, e)) {
        /* conv1 432 + bn 32 + conv2 2304 + deconv 1024 + dense 90 */
        TH_CHECKF(t, graph_weights(&g) == 3882, "%lld",
                  (long long)graph_weights(&g));
        TH_CHECK(t, shape_is(&layer(&g, "conv2")->out, 2, 16, 16, 0, 16));
        TH_CHECK(t, shape_is(&layer(&g, "cat")->out, 2, 16, 16, 0, 32));
        TH_CHECK(t, shape_is(&layer(&g, "deconv")->out, 2, 32, 32, 0, 8));
        TH_CHECK(t, strcmp(graph_op_name(layer(&g, "gap")->op),
                           "global_avgpool") == 0);
    }
    graph_free(&g);
    st = graph_load(&g, "traces/small/tiny3d-p4.json", &e);
    if (OK(t, st, e)) {
        TH_CHECKF(t, graph_weights(&g) == 10155, "%lld",
                  (long long)graph_weights(&g));
        TH_CHECK(t, g.pdims_rank == 5 && g.pdims[1] == 4);
        TH_CHECK(t, g.has_reference && g.reference_step_s == 0.01);
        TH_CHECK(t, shape_is(&layer(&g, "skip")->out, 3, 16, 16, 16, 16));
    }
    graph_free(&g);

    th_case(t, "ResNet-50 at 224: 25.6M weights, 4.1 GMACs forward (3%)");
    st = graph_load(&g, "traces/resnet50-224-v3-8.json", &e);
    if (OK(t, st, e)) {
        double macs = 0;
        for (int i = 0; i < g.n_layers; i++)
            macs += g.layers[i].macs;
        TH_CHECKF(t, fabs(graph_weights(&g) / 25.6e6 - 1) < 0.01, "%lld",
                  (long long)graph_weights(&g));
        TH_CHECKF(t, fabs(macs / 4.1e9 - 1) < 0.03, "%g GMACs", macs / 1e9);
        TH_CHECKF(t, graph_forward_flops(&g) > 2 * macs &&
                         graph_forward_flops(&g) < 2.05 * macs,
                  "%g", graph_forward_flops(&g));
        TH_CHECK(t, shape_is(&g.layers[g.n_layers - 1].out, 0, 0, 0, 0, 1));
    }
    graph_free(&g);

    th_case(t, "RetinaNet: the reference code's frozen stem and res2 (22 "
               "layers) need no gradient; the rest trains");
    st = graph_load(&g, "traces/reference/retinanet-1280-v3-8.json", &e);
    if (OK(t, st, e)) {
        int frozen = 0;
        for (int i = 0; i < g.n_layers; i++)
            frozen += g.layers[i].frozen;
        const glayer *c1 = layer(&g, "conv1"), *r2 = layer(&g, "res2c_relu");
        const glayer *r3 = layer(&g, "res3a_branch2a");
        TH_CHECKF(t, frozen == 22, "%d frozen layers", frozen);
        TH_CHECK(t, c1 && r2 && r3 && c1->frozen && !c1->needs_grad &&
                        !r2->needs_grad && !r3->frozen && r3->needs_grad);
        TH_CHECKF(t, graph_trainable_weights(&g) < graph_weights(&g),
                  "%lld of %lld", (long long)graph_trainable_weights(&g),
                  (long long)graph_weights(&g));
    }
    graph_free(&g);

    th_case(t, "the committed traces are what scripts/gen_traces.py writes");
    {
        th_cmd_result c;
        th_run(&c, "python3 scripts/gen_traces.py --check");
        TH_CHECKF(t, c.status == 0 && strstr(c.out, "up to date"),
                  "status %d: %s%s", c.status, c.out, c.err);
    }
}
