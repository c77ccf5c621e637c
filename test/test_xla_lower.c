/* The XLA mechanisms of the lowering (docs/FIRMWARE.md): the small-batch
 * convolution padding of the Cloud TPU performance notes, the SPMD
 * partitioner's passes per split dimension, and the weight gradient's own
 * halo exchange.  Each case checks the firmware against the rule's
 * arithmetic, and that the rule's switch turns it off. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/sim.h"
#include "test/harness.h"

/* x [h, w, cin] -> c0 1x1 (cin) -> c1 k x k (cout) -> bn -> relu -> loss,
 * split [1, ph, pw, 1]. */
static int trace(char *buf, size_t cap, int batch, int cpr, int ph, int pw,
                 int h, int w, int cin, int cout, int k)
{
    return snprintf(
        buf, cap,
        "{\"format\":\"tpuemu-trace/1\",\"name\":\"x\",\"system\":\"v3-8\","
        "\"run\":{\"mode\":\"train\",\"global_batch\":%d,"
        "\"num_cores_per_replica\":%d,"
        "\"input_partition_dims\":[[1,%d,%d,1],null]},"
        "\"graph\":{\"inputs\":[{\"name\":\"x\",\"shape\":[%d,%d,%d]}],"
        "\"layers\":["
        "{\"name\":\"c0\",\"op\":\"conv\",\"in\":\"x\",\"filters\":%d,"
        "\"kernel\":[1,1]},"
        "{\"name\":\"c1\",\"op\":\"conv\",\"in\":\"c0\",\"filters\":%d,"
        "\"kernel\":[%d,%d]},"
        "{\"name\":\"bn\",\"op\":\"batchnorm\",\"in\":\"c1\"},"
        "{\"name\":\"r\",\"op\":\"relu\",\"in\":\"bn\"},"
        "{\"name\":\"l\",\"op\":\"loss\",\"kind\":\"l2\",\"in\":\"r\"}]}}",
        batch, cpr, ph, pw, h, w, cin, cin, cout, k, k);
}

typedef struct {
    double m_rows;  /* sum of M over the layer's products in the phase */
    int64_t k_max;  /* largest K */
    int64_t st;     /* bytes stored */
    int64_t ld;     /* bytes loaded */
    int halos;      /* FW_HALO instructions */
    int64_t halo_b; /* bytes received */
    int nmm;        /* FW_MATMUL instructions */
    int ar_part;    /* FW_ALLREDUCE over the partition group */
    int64_t ar_b;   /* their bytes */
    double vec_ops; /* vector element-operations beside the products */
    double dx_rows; /* input-gradient products' M */
    double dw_pos;  /* the other backward products' reduced positions (K) */
    int64_t dw_k;   /* and their largest M (the weight gradient's K rows) */
} tally;

/* Loop bodies count once per iteration. */
static int lower_tally_core(const char *text, const char *key,
                            const char *value, const char *layer, int phase,
                            int core, tally *out, tpu_error *e)
{
    graph g;
    memset(out, 0, sizeof *out);
    if (graph_parse(&g, text, strlen(text), "t.json", e))
        return -1;
    sim_opts o;
    sim_opts_default(&o);
    const char *k[1] = {key}, *v[1] = {value};
    if (key) {
        o.n_sets = 1;
        o.set_keys = k;
        o.set_values = v;
    }
    fw_program prog;
    fw_memory mem;
    int rc = sim_lower(&g, &o, core, &prog, &mem, e);
    int li = graph_find(&g, layer);
    graph_free(&g);
    if (rc)
        return -1;
    int64_t rep = 1;
    for (size_t i = 0; i < prog.n; i++) {
        const fw_insn *in = &prog.code[i];
        if (in->op == FW_LOOP) {
            rep = in->a;
            continue;
        }
        if (in->op == FW_ENDLOOP) {
            rep = 1;
            continue;
        }
        if (in->layer != li || in->phase != phase)
            continue;
        if (in->op == FW_MATMUL) {
            out->m_rows += (double)in->a * (double)rep;
            if (in->b > out->k_max)
                out->k_max = in->b;
            out->nmm++;
            out->vec_ops += (double)in->d * (double)rep;
            if (in->fx == FX_DX) {
                out->dx_rows += (double)in->a * (double)rep;
            } else if (phase == PHASE_BWD) {
                out->dw_pos += (double)in->b * (double)rep;
                if (in->a > out->dw_k)
                    out->dw_k = in->a;
            }
        } else if (in->op == FW_VEC) {
            out->vec_ops += (double)in->a * (double)in->b / 100 * (double)rep;
        } else if (in->op == FW_DMA_ST) {
            out->st += in->a * rep;
        } else if (in->op == FW_DMA_LD) {
            out->ld += in->a * rep;
        } else if (in->op == FW_HALO) {
            out->halos++;
            out->halo_b += in->b + in->c;
        } else if (in->op == FW_ALLREDUCE && in->b == FW_GROUP_PARTITION) {
            out->ar_part++;
            out->ar_b += in->a;
        }
    }
    fw_program_free(&prog);
    return 0;
}

static int lower_tally(const char *text, const char *key, const char *value,
                       const char *layer, int phase, tally *out, tpu_error *e)
{
    return lower_tally_core(text, key, value, layer, phase, 0, out, e);
}

void th_suite_xla_lower(th_ctx *t)
{
    char buf[4096];
    tpu_error e = {0};

    th_case(t, "small batch: conv M pads the batch to 8, K keeps taps x 128");
    {
        /* 4 examples per core (global 32 on v3-8), 3x3 conv on 32
         * channels, 16x16: the guide's rule gives M = 8 x 256 rows and K
         * = 9 x 128; tpuemu's im2col rule (xla.conv_pad=0) M = 4 x 256,
         * K = 9 x 32 = 288 (the MXU pads it to 384). */
        trace(buf, sizeof buf, 32, 1, 1, 1, 16, 16, 32, 32, 3);
        tally on, off;
        if (TH_CHECKF(
                t, lower_tally(buf, NULL, NULL, "c1", PHASE_FWD, &on, &e) == 0,
                "%s", e.msg) &&
            TH_CHECKF(t,
                      lower_tally(buf, "xla.conv_pad", "0", "c1", PHASE_FWD,
                                  &off, &e) == 0,
                      "%s", e.msg)) {
            TH_CHECKF(t, on.m_rows == 8 * 256, "M %g", on.m_rows);
            TH_CHECKF(t, on.k_max == 9 * 128, "K %lld", (long long)on.k_max);
            TH_CHECKF(t, off.m_rows == 4 * 256, "off: M %g", off.m_rows);
            TH_CHECKF(t, off.k_max == 288, "off: K %lld", (long long)off.k_max);
        }
        /* xla.conv_pad_batch=0: the features still pad (K = 9 x 128), the
         * 4 examples stream as 4 (M = 4 x 256). */
        tally fo;
        if (TH_CHECKF(t,
                      lower_tally(buf, "xla.conv_pad_batch", "0", "c1",
                                  PHASE_FWD, &fo, &e) == 0,
                      "%s", e.msg)) {
            TH_CHECKF(t, fo.m_rows == 4 * 256, "features only: M %g",
                      fo.m_rows);
            TH_CHECKF(t, fo.k_max == 9 * 128, "features only: K %lld",
                      (long long)fo.k_max);
        }
        /* 64 per core reaches the threshold: the small-batch rule is off
         * and tpuemu's fold rule applies. */
        trace(buf, sizeof buf, 512, 1, 1, 1, 16, 16, 32, 32, 3);
        if (TH_CHECKF(
                t, lower_tally(buf, NULL, NULL, "c1", PHASE_FWD, &on, &e) == 0,
                "%s", e.msg)) {
            TH_CHECKF(t, on.m_rows == 64 * 256, "64/core: M %g", on.m_rows);
            TH_CHECKF(t, on.k_max == 288, "64/core: K %lld",
                      (long long)on.k_max);
        }
    }

    th_case(t, "small batch: a 3D convolution with a kernel of 1 along its "
               "first dimension batches over it (a per-ROI 2D convolution)");
    {
        /* 4 examples per core of [4, 16, 16, 32]: [1,3,3] runs 4 x 4 = 16
         * 2D convolutions of 16x16 (M = 16 x 256, no padding); [3,3,3]
         * pads the 4 examples to 8 (M = 8 x 4 x 256) */
        static const char *const fmt =
            "{\"format\":\"tpuemu-trace/1\",\"name\":\"r\",\"system\":"
            "\"v3-8\",\"run\":{\"mode\":\"train\",\"global_batch\":32},"
            "\"graph\":{\"inputs\":[{\"name\":\"x\",\"shape\":[4,16,16,"
            "32]}],\"layers\":[{\"name\":\"c\",\"op\":\"conv\",\"in\":"
            "\"x\",\"filters\":32,\"kernel\":[%d,3,3]},{\"name\":\"l\","
            "\"op\":\"loss\",\"kind\":\"l2\",\"in\":\"c\"}]}}";
        tally roi, cube;
        snprintf(buf, sizeof buf, fmt, 1);
        if (TH_CHECKF(t,
                      lower_tally(buf, NULL, NULL, "c", PHASE_FWD, &roi,
                                  &e) == 0,
                      "%s", e.msg))
            TH_CHECKF(t, roi.m_rows == 16 * 256, "[1,3,3]: M %g",
                      roi.m_rows);
        snprintf(buf, sizeof buf, fmt, 3);
        if (TH_CHECKF(t,
                      lower_tally(buf, NULL, NULL, "c", PHASE_FWD, &cube,
                                  &e) == 0,
                      "%s", e.msg))
            TH_CHECKF(t, cube.m_rows == 8 * 4 * 256, "[3,3,3]: M %g",
                      cube.m_rows);
    }

    th_case(t, "a deeper array keeps the lanes' padding: K = taps x 128 on "
               "256 rows, and a 256x256 array is not slower");
    {
        /* 4 examples per core, 3x3 on 128 channels: K = 9 x 128 whatever
         * the array's depth, not padded to 9 x 256 */
        trace(buf, sizeof buf, 32, 1, 1, 1, 16, 16, 128, 128, 3);
        tally deep;
        if (TH_CHECKF(t,
                      lower_tally(buf, "mxu.rows", "256", "c1", PHASE_FWD,
                                  &deep, &e) == 0,
                      "%s", e.msg))
            TH_CHECKF(t, deep.k_max == 9 * 128, "K %lld",
                      (long long)deep.k_max);
        char path[512];
        snprintf(path, sizeof path, "%s/deep-array.json", th_tmpdir());
        FILE *f = fopen(path, "w");
        if (TH_CHECK(t, f != NULL)) {
            fputs(buf, f);
            fclose(f);
        }
        th_cmd_result a, b;
        th_run(&a, "%s run %s --quiet", th_bin(), path);
        th_run(&b, "%s run %s --quiet --set mxu.rows=256 --set mxu.cols=256",
               th_bin(), path);
        double ta = atof(a.out), tb = atof(b.out);
        TH_CHECKF(t, a.status == 0 && b.status == 0 && ta > 0 && tb > 0 &&
                         tb < ta,
                  "128x128 %g s, 256x256 %g s: %s%s", ta, tb, a.err, b.err);
    }

    th_case(t, "small batch: input and weight gradients are padded too");
    {
        trace(buf, sizeof buf, 32, 1, 1, 1, 16, 16, 32, 32, 3);
        tally on;
        if (TH_CHECKF(
                t, lower_tally(buf, NULL, NULL, "c1", PHASE_BWD, &on, &e) == 0,
                "%s", e.msg)) {
            /* dX streams 8 x 256 input rows; dW streams K = 9 x 128 rows
             * of X^T, reducing over 8 x 256 positions (in slabs the tile
             * search sizes: one of 2048 until products streamed). */
            TH_CHECKF(t, on.dx_rows == 8 * 256, "dX M %g", on.dx_rows);
            TH_CHECKF(t, on.dw_k == 9 * 128, "dW rows %lld",
                      (long long)on.dw_k);
            TH_CHECKF(t, on.dw_pos == 8 * 256, "dW positions %g", on.dw_pos);
        }
    }

    th_case(t, "SPMD: one concatenate pass per split dimension, masks apart");
    {
        /* [1,2,2,1] on 64x30x128, 4 examples per replica (each core
         * holds a quarter of every example).  Shard 0
         * receives one row below along H, then one column right along W:
         * buffers [33, 15] and [33, 16] positions, W minor padded to 16
         * (8-row sublane tiles of 128 channels), bf16. */
        int B = 4;
        trace(buf, sizeof buf, B * 2, 4, 2, 2, 64, 30, 128, 128, 3);
        tally base, none, unf;
        if (TH_CHECKF(
                t,
                lower_tally(buf, NULL, NULL, "c1", PHASE_FWD, &base, &e) == 0,
                "%s", e.msg) &&
            TH_CHECKF(t,
                      lower_tally(buf, "xla.halo_copy", "0", "c1", PHASE_FWD,
                                  &none, &e) == 0,
                      "%s", e.msg) &&
            TH_CHECKF(t,
                      lower_tally(buf, "xla.halo_fused", "0", "c1", PHASE_FWD,
                                  &unf, &e) == 0,
                      "%s", e.msg)) {
            int64_t per_dim = (int64_t)B * 33 * 16 * 128 * 2;
            TH_CHECK(t, base.halos == 2);
            TH_CHECKF(t, base.st - none.st == 2 * per_dim,
                      "concat bytes %lld, want %lld",
                      (long long)(base.st - none.st), (long long)(2 * per_dim));
            /* Unfused, each dimension's mask (same padding) is a second
             * pass over the same buffer. */
            TH_CHECKF(t, unf.st - none.st == 4 * per_dim,
                      "unfused bytes %lld, want %lld",
                      (long long)(unf.st - none.st), (long long)(4 * per_dim));
        }
    }

    th_case(t, "SPMD: the weight gradient exchanges the input's halo again");
    {
        trace(buf, sizeof buf, 8, 4, 2, 2, 64, 30, 128, 128, 3);
        tally fwd, bwd, bwd_off;
        if (TH_CHECKF(
                t, lower_tally(buf, NULL, NULL, "c1", PHASE_FWD, &fwd, &e) == 0,
                "%s", e.msg) &&
            TH_CHECKF(
                t, lower_tally(buf, NULL, NULL, "c1", PHASE_BWD, &bwd, &e) == 0,
                "%s", e.msg) &&
            TH_CHECKF(t,
                      lower_tally(buf, "xla.dw_halo", "0", "c1", PHASE_BWD,
                                  &bwd_off, &e) == 0,
                      "%s", e.msg)) {
            /* dX's exchange of dY (one per split dimension), plus the
             * same exchange of X as the forward one. */
            TH_CHECKF(t, bwd.halos == bwd_off.halos + fwd.halos,
                      "bwd halos %d, off %d, fwd %d", bwd.halos, bwd_off.halos,
                      fwd.halos);
            TH_CHECKF(t, bwd.halo_b == bwd_off.halo_b + fwd.halo_b,
                      "bwd halo bytes %lld", (long long)bwd.halo_b);
        }
        /* Unsplit: nothing to exchange. */
        trace(buf, sizeof buf, 32, 1, 1, 1, 16, 16, 32, 32, 3);
        if (TH_CHECKF(
                t, lower_tally(buf, NULL, NULL, "c1", PHASE_BWD, &bwd, &e) == 0,
                "%s", e.msg))
            TH_CHECK(t, bwd.halos == 0);
    }

    th_case(t, "batchnorm statistics unfused (xla.bn_stats_fused=0): one "
               "more read of the convolution's output, nothing stored");
    {
        /* bn reads c1's output: 4 examples x 16 x 16 x 32 bf16 in the
         * (8,128) layout the HBM keeps (4 x 16 rows of min(128 x 16,
         * 128 x 32) x 2 bytes); the statistics pass reads it once more. */
        trace(buf, sizeof buf, 32, 1, 1, 1, 16, 16, 32, 32, 3);
        tally fused, unfused;
        if (TH_CHECKF(t,
                      lower_tally(buf, NULL, NULL, "bn", PHASE_FWD, &fused,
                                  &e) == 0,
                      "%s", e.msg) &&
            TH_CHECKF(t,
                      lower_tally(buf, "xla.bn_stats_fused", "0", "bn",
                                  PHASE_FWD, &unfused, &e) == 0,
                      "%s", e.msg)) {
            int64_t x = 4 * 16 * 2048 * 2;
            TH_CHECKF(t, unfused.ld == fused.ld + x && unfused.st == fused.st,
                      "loads %lld -> %lld (expected +%lld), stores %lld -> "
                      "%lld",
                      (long long)fused.ld, (long long)unfused.ld, (long long)x,
                      (long long)fused.st, (long long)unfused.st);
        }
    }

    th_case(t, "SPMD: each split weight gradient is all-reduced over the "
               "partition group at once, in the product's type");
    {
        /* c1: 3x3, 128 -> 128, bf16: 9 x 128 x 128 weights x 2 bytes. */
        trace(buf, sizeof buf, 8, 4, 2, 2, 64, 30, 128, 128, 3);
        tally on, off, flat;
        if (TH_CHECKF(
                t, lower_tally(buf, NULL, NULL, "c1", PHASE_BWD, &on, &e) == 0,
                "%s", e.msg) &&
            TH_CHECKF(t,
                      lower_tally(buf, "xla.dw_allreduce", "0", "c1",
                                  PHASE_BWD, &off, &e) == 0,
                      "%s", e.msg)) {
            /* the batchnorm's all-reduces are another layer's */
            TH_CHECKF(t, on.ar_part == 1 && on.ar_b == 9 * 128 * 128 * 2,
                      "%d all-reduces, %lld bytes", on.ar_part,
                      (long long)on.ar_b);
            TH_CHECKF(t, off.ar_part == 0, "off: %d", off.ar_part);
        }
        /* Unsplit: each core has the whole partial sum already. */
        trace(buf, sizeof buf, 32, 1, 1, 1, 16, 16, 32, 32, 3);
        if (TH_CHECKF(t,
                      lower_tally(buf, NULL, NULL, "c1", PHASE_BWD, &flat,
                                  &e) == 0,
                      "%s", e.msg))
            TH_CHECKF(t, flat.ar_part == 0, "unsplit: %d", flat.ar_part);
    }
    th_case(t, "uneven split with empty trailing shards (100 rows 16 ways: "
               "TPUEstimator's chunks of 7, then 2 and 0): each core works "
               "on its chunk, nothing is replicated");
    {
        /* 1 example per replica, padded to 8; W = 4.  Core 0 holds rows
         * 0-6, core 14 rows 98-99, core 15 none.  Before, a split with an
         * empty shard was not split at all: every core computed 100 rows. */
        const char *tr =
            "{\"format\":\"tpuemu-trace/1\",\"name\":\"u\","
            "\"system\":\"v3-32\",\"run\":{\"mode\":\"train\","
            "\"global_batch\":2,\"num_cores_per_replica\":16,"
            "\"input_partition_dims\":[[1,16,1,1],null]},"
            "\"graph\":{\"inputs\":[{\"name\":\"x\",\"shape\":[100,4,8]}],"
            "\"layers\":[{\"name\":\"c1\",\"op\":\"conv\",\"in\":\"x\","
            "\"filters\":8,\"kernel\":[3,3]},"
            "{\"name\":\"l\",\"op\":\"loss\",\"kind\":\"l2\",\"in\":\"c1\"}]}}";
        static const struct {
            int core;
            double m;
        } want[] = {{0, 8 * 7 * 4}, {13, 8 * 7 * 4}, {14, 8 * 2 * 4},
                    {15, 0}};
        for (int k = 0; k < 4; k++) {
            tally f;
            if (!TH_CHECKF(t,
                           lower_tally_core(tr, NULL, NULL, "c1", PHASE_FWD,
                                            want[k].core, &f, &e) == 0,
                           "%s", e.msg))
                break;
            TH_CHECKF(t, f.m_rows == want[k].m, "core %d: M %g, want %g",
                      want[k].core, f.m_rows, want[k].m);
        }
    }
    th_case(t, "two empty trailing shards (40 rows 16 ways: 13 x 3, 1, 0, 0): "
               "the 3x3 conv exchanges halos, nothing is gathered; an empty "
               "shard does no backward matrix work");
    {
        const char *tr =
            "{\"format\":\"tpuemu-trace/1\",\"name\":\"g\","
            "\"system\":\"v3-32\",\"run\":{\"mode\":\"train\","
            "\"global_batch\":2,\"num_cores_per_replica\":16,"
            "\"input_partition_dims\":[[1,16,1,1],null]},"
            "\"graph\":{\"inputs\":[{\"name\":\"x\",\"shape\":[40,8,8]}],"
            "\"layers\":[{\"name\":\"c0\",\"op\":\"conv\",\"in\":\"x\","
            "\"filters\":8,\"kernel\":[3,3]},"
            "{\"name\":\"c1\",\"op\":\"conv\",\"in\":\"c0\","
            "\"filters\":8,\"kernel\":[3,3]},"
            "{\"name\":\"l\",\"op\":\"loss\",\"kind\":\"l2\",\"in\":\"c1\"}]}}";
        tally f0, b15;
        if (TH_CHECKF(t,
                      lower_tally_core(tr, NULL, NULL, "c1", PHASE_FWD, 0, &f0,
                                       &e) == 0,
                      "%s", e.msg))
            TH_CHECKF(t, f0.halos == 1 && f0.halo_b > 0,
                      "core 0: %d halo exchanges of %lld bytes (a gather "
                      "has none)", f0.halos, (long long)f0.halo_b);
        if (TH_CHECKF(t,
                      lower_tally_core(tr, NULL, NULL, "c1", PHASE_BWD, 15,
                                       &b15, &e) == 0,
                      "%s", e.msg))
            TH_CHECKF(t, b15.nmm == 0 && b15.st == 0,
                      "core 15 (no rows): %d products, %lld bytes stored",
                      b15.nmm, (long long)b15.st);
    }
    th_case(t, "pooling backward: about win/stride + 2 vector operations "
               "per input element (a whole-map window is not win per input)");
    {
        /* 64x64x256 -> avgpool 64 (one output) and maxpool 2 (stride 2),
         * each feeding a trained conv so the gradient reaches them. */
        static const char *pools[2] = {"\"op\":\"avgpool\",\"window\":[64,64]",
                                       "\"op\":\"maxpool\",\"window\":[2,2]"};
        static const double want[2] = {2.0, 2.25};
        for (int v = 0; v < 2; v++) {
            char tr[2048];
            snprintf(tr, sizeof tr,
                     "{\"format\":\"tpuemu-trace/1\",\"name\":\"p\","
                     "\"system\":\"v3-8\",\"run\":{\"mode\":\"train\","
                     "\"global_batch\":8},\"graph\":{\"inputs\":[{\"name\":"
                     "\"x\",\"shape\":[64,64,4]}],\"layers\":["
                     "{\"name\":\"c0\",\"op\":\"conv\",\"in\":\"x\","
                     "\"filters\":256,\"kernel\":[1,1]},"
                     "{\"name\":\"p\",%s,\"in\":\"c0\"},"
                     "{\"name\":\"c1\",\"op\":\"conv\",\"in\":\"p\","
                     "\"filters\":8,\"kernel\":[1,1]},"
                     "{\"name\":\"l\",\"op\":\"loss\",\"kind\":\"l2\","
                     "\"in\":\"c1\"}]}}", pools[v]);
            tally b;
            if (!TH_CHECKF(t, lower_tally(tr, NULL, NULL, "p", PHASE_BWD, &b,
                                          &e) == 0, "%s", e.msg))
                continue;
            double in_elems = 1.0 * 64 * 64 * 256; /* one example per core */
            double per = b.vec_ops / in_elems;
            TH_CHECKF(t, per > want[v] * 0.99 && per < want[v] * 1.01,
                      "%s: %.3f vector operations per input element, want %.2f",
                      v ? "maxpool 2x2" : "avgpool 64x64", per, want[v]);
        }
    }
    th_case(t, "xla.bn_apply_fused=1 (the default) against 0: batchnorm + "
               "relu feeding a conv make no pass and store nothing; values "
               "unchanged");
    {
        /* x -> c0 1x1 -> bn -> relu -> c1 3x3 -> loss, f32 so values are
         * exact: fused, the batchnorm's forward moves no bytes, the relu
         * output is not kept for the backward (c1's weight gradient reads
         * the batchnorm's input, kept anyway), and the values are the
         * same bits.  Each side sets its value: 1 is the default, 0 the
         * unfused step it is compared with. */
        const char *tr =
            "{\"format\":\"tpuemu-trace/1\",\"name\":\"f\","
            "\"system\":\"v3-8\",\"run\":{\"mode\":\"train\","
            "\"global_batch\":16,\"num_cores_per_replica\":2,"
            "\"input_partition_dims\":[[1,2,1,1],null]},"
            "\"graph\":{\"inputs\":[{\"name\":\"x\",\"shape\":[12,10,4],"
            "\"dtype\":\"f32\"}],\"layers\":["
            "{\"name\":\"c0\",\"op\":\"conv\",\"in\":\"x\",\"filters\":8,"
            "\"kernel\":[1,1],\"dtype\":\"f32\"},"
            "{\"name\":\"bn\",\"op\":\"batchnorm\",\"in\":\"c0\","
            "\"dtype\":\"f32\"},"
            "{\"name\":\"r\",\"op\":\"relu\",\"in\":\"bn\",\"dtype\":\"f32\"},"
            "{\"name\":\"c1\",\"op\":\"conv\",\"in\":\"r\",\"filters\":8,"
            "\"kernel\":[3,3],\"dtype\":\"f32\"},"
            "{\"name\":\"l\",\"op\":\"loss\",\"kind\":\"l2\",\"in\":\"c1\","
            "\"dtype\":\"f32\"}]}}";
        tally sep, fus;
        if (TH_CHECKF(t, lower_tally(tr, "xla.bn_apply_fused", "0", "bn",
                                     PHASE_FWD, &sep, &e) == 0, "%s", e.msg) &&
            TH_CHECKF(t, lower_tally(tr, "xla.bn_apply_fused", "1", "bn",
                                     PHASE_FWD, &fus, &e) == 0, "%s", e.msg)) {
            TH_CHECKF(t, sep.ld > 0 && sep.st > 0,
                      "own pass: %lld read, %lld written", (long long)sep.ld,
                      (long long)sep.st);
            TH_CHECKF(t, fus.ld == 0 && fus.st == 0,
                      "fused: %lld read, %lld written", (long long)fus.ld,
                      (long long)fus.st);
        }
        /* The reader applies the normalise + relu (5 operations) to each
         * operand element it streams, per tap: K x M more vector work in
         * its forward product and again in its weight gradient's. */
        tally f0;
        if (TH_CHECKF(t, lower_tally(tr, "xla.bn_apply_fused", "0", "c1",
                                     PHASE_FWD, &f0, &e) == 0, "%s", e.msg)) {
            double want = 5 * (double)f0.k_max * f0.m_rows;
            for (int ph = PHASE_FWD; ph <= PHASE_BWD; ph++) {
                tally r0, r1;
                if (!TH_CHECKF(t, lower_tally(tr, "xla.bn_apply_fused", "0",
                                              "c1", ph, &r0, &e) == 0,
                               "%s", e.msg) ||
                    !TH_CHECKF(t, lower_tally(tr, "xla.bn_apply_fused", "1",
                                              "c1", ph, &r1, &e) == 0,
                               "%s", e.msg))
                    break;
                double got = r1.vec_ops - r0.vec_ops;
                TH_CHECKF(t, got >= want && got <= want * 1.01 + 64,
                          "phase %d: the reader's vector work grew by %g, "
                          "want 5 x K %lld x M %g = %g", ph, got,
                          (long long)f0.k_max, f0.m_rows, want);
            }
        }
        double saved[2] = {0, 0};
        uint64_t ck[2] = {0, 0};
        double loss[2] = {0, 0};
        for (int v = 0; v < 2; v++) {
            graph g;
            if (!TH_CHECKF(t, graph_parse(&g, tr, strlen(tr), "f.json", &e) == 0,
                           "%s", e.msg))
                break;
            sim_opts o;
            sim_opts_default(&o);
            const char *k[1] = {"xla.bn_apply_fused"}, *val[1] = {v ? "1" : "0"};
            o.n_sets = 1;
            o.set_keys = k;
            o.set_values = val;
            fw_program prog;
            fw_memory mem;
            if (TH_CHECKF(t, sim_lower(&g, &o, 0, &prog, &mem, &e) == 0, "%s",
                          e.msg)) {
                saved[v] = mem.saved_bytes;
                fw_program_free(&prog);
            }
            o.functional = 1;
            emu_result r;
            if (TH_CHECKF(t, sim_run(&g, &o, &r, &e) == 0, "%s", e.msg)) {
                ck[v] = r.output_checksum;
                loss[v] = r.loss;
                emu_result_free(&r);
            }
            graph_free(&g);
        }
        TH_CHECKF(t, saved[1] < saved[0], "saved bytes %g fused, %g not",
                  saved[1], saved[0]);
        TH_CHECKF(t, ck[0] == ck[1] && loss[0] == loss[1],
                  "values differ: %016llx / %016llx, loss %.9g / %.9g",
                  (unsigned long long)ck[0], (unsigned long long)ck[1],
                  loss[0], loss[1]);
    }
}
