/* Tiling of matrix products whose weights do not fit VMEM (firmware/tile.c,
 * matmul_plan): N is cut into chunks of whole MXU tiles, and K into parts
 * when one tile's column of weights is still too large.  Ragged N chunks
 * (342, 228 and 114 columns for a 1024-channel 3x3 convolution) would leave
 * a third of every weight tile empty; a 31x31 kernel's weights must not be
 * cut into 16-column chunks (12% of the MXU) nor loaded whole into VMEM
 * (126 MB into 16 MiB). */
#include <stdio.h>
#include <string.h>

#include "test/harness.h"

static int write_conv(const char *path, const char *mode, int64_t batch,
                      int64_t hw, int64_t cin, int64_t cout, int64_t k)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return 0;
    fprintf(f,
            "{\"format\": \"tpuemu-trace/1\", \"name\": \"tiles\", "
            "\"system\": \"v3-8\", \"run\": {\"mode\": \"%s\", "
            "\"global_batch\": %lld, \"num_cores_per_replica\": 1}, "
            "\"graph\": {\"inputs\": [{\"name\": \"x\", \"shape\": [%lld, "
            "%lld, %lld]}], \"layers\": [{\"name\": \"c\", \"op\": \"conv\", "
            "\"in\": \"x\", \"filters\": %lld, \"kernel\": [%lld, %lld]}]}}\n",
            mode, (long long)batch, (long long)hw, (long long)hw,
            (long long)cin, (long long)cout, (long long)k, (long long)k);
    return fclose(f) == 0;
}

void th_suite_tiles(th_ctx *t)
{
    tpu_error e = {0};
    char path[512];
    snprintf(path, sizeof path, "%s/tiles.json", th_tmpdir());

    th_case(t, "weights over half of VMEM: N chunks of whole MXU tiles, the "
               "MXU stays busy (3x3 convolutions of 768-2048 channels)");
    {
        static const int64_t ch[] = {768, 1024, 1536, 2048};
        for (size_t i = 0; i < sizeof ch / sizeof ch[0]; i++) {
            if (!TH_CHECK(t, write_conv(path, "infer", th_asan() ? 64 : 512, 32,
                                        ch[i], ch[i], 3)))
                break;
            emu_result r;
            fw_program p;
            fw_program_init(&p);
            if (!TH_CHECKF(t,
                           th_sim_trace(path, NULL, NULL, 0, 0, &r, &p, &e) ==
                               TPU_OK,
                           "%s", e.msg))
                continue;
            int ragged = 0;
            for (size_t j = 0; j < p.n; j++)
                if (p.code[j].op == FW_MATMUL && p.code[j].c % 128 != 0)
                    ragged = 1;
            TH_CHECKF(t, !ragged,
                      "%lld channels: an N chunk is not whole "
                      "MXU tiles",
                      (long long)ch[i]);
            /* 98% at batch 512; 88% at the sanitizer build's 64 (the
             * ragged chunks gave 66%) */
            TH_CHECKF(t, r.per_core[0].mxu_utilization > 0.85,
                      "%lld channels: MXU utilisation %.3f", (long long)ch[i],
                      r.per_core[0].mxu_utilization);
            emu_result_free(&r);
            fw_program_free(&p);
        }
    }

    th_case(t, "a kernel whose weights exceed VMEM one tile wide: K parts, no "
               "DMA larger than VMEM, utilisation near the MXU's (31x31, "
               "256 channels)");
    {
        if (TH_CHECK(t, write_conv(path, "infer", 64, 128, 256, 256, 31))) {
            emu_result r;
            fw_program p;
            fw_program_init(&p);
            if (TH_CHECKF(t,
                          th_sim_trace(path, NULL, NULL, 0, 0, &r, &p, &e) ==
                              TPU_OK,
                          "%s", e.msg)) {
                int64_t big = 0, kparts = 0, narrow = 0;
                for (size_t j = 0; j < p.n; j++) {
                    const fw_insn *in = &p.code[j];
                    if (in->op == FW_DMA_LD && in->a > big)
                        big = in->a;
                    if (in->op == FW_MATMUL) {
                        if (in->kparts > kparts)
                            kparts = in->kparts;
                        if (in->c < 128)
                            narrow = 1;
                    }
                }
                TH_CHECKF(t, big <= 16 * 1024 * 1024,
                          "a %lld-byte load into 16 MiB of VMEM",
                          (long long)big);
                TH_CHECKF(t, kparts > 1 && !narrow, "kparts %lld, narrow %lld",
                          (long long)kparts, (long long)narrow);
                TH_CHECKF(t, r.per_core[0].mxu_utilization > 0.9,
                          "MXU utilisation %.3f",
                          r.per_core[0].mxu_utilization);
                emu_result_free(&r);
                fw_program_free(&p);
            }
        }
    }

    th_case(t, "a weight gradient whose fp32 accumulators exceed half of "
               "VMEM is cut into K blocks, each streaming dY again (31x31, "
               "256 channels: 31 blocks at 16 MiB, 1 at 1 GiB)");
    if (TH_CHECK(t, write_conv(path, "train", 8, 32, 256, 256, 31))) {
        static const char *const key[] = {"vmem_bytes"};
        static const char *const val[] = {"16777216", "1073741824"};
        double ld[2] = {0, 0};
        for (int v = 0; v < 2; v++) {
            emu_result r;
            fw_program p;
            fw_program_init(&p);
            if (!TH_CHECKF(t,
                           th_sim_trace(path, key, &val[v], 1, 0, &r, &p,
                                        &e) == TPU_OK,
                           "%s", e.msg))
                continue;
            /* the loads of the weight gradient's slabs: from the store
             * wait that opens its first block, the layer's backward loads */
            size_t first = p.n, start = 0;
            for (size_t j = 0; j < p.n && first == p.n; j++)
                if (p.code[j].op == FW_MATMUL && p.code[j].fx == FX_DW)
                    first = j;
            for (size_t j = first; j > 0 && j < p.n; j--)
                if (p.code[j].op == FW_WAIT_ST) {
                    start = j;
                    break;
                }
            int64_t rep = 1;
            for (size_t j = start; first < p.n && j < p.n; j++) {
                const fw_insn *in = &p.code[j];
                if (in->op == FW_LOOP)
                    rep = in->a;
                else if (in->op == FW_ENDLOOP)
                    rep = 1;
                else if (in->op == FW_DMA_LD && in->phase == PHASE_BWD &&
                         in->layer == p.code[first].layer)
                    ld[v] += (double)in->a * (double)rep;
            }
            emu_result_free(&r);
            fw_program_free(&p);
        }
        /* X once and dY per block: 0.5 + 31 x 0.5 MiB against 0.5 + 0.5 */
        TH_CHECKF(t, ld[1] > 0 && ld[0] > 12 * ld[1],
                  "dW slabs load %.0f B at 16 MiB of VMEM, %.0f B at 1 GiB",
                  ld[0], ld[1]);
    }

    th_case(t, "more input channels in the same MXU tiles are not faster "
               "beyond 0.5% (257 and 384 channels both fill 3 tiles; the "
               "search finds 257's one-tile N chunks too)");
    {
        double ts[2] = {0, 0};
        static const int ch[2] = {257, 384};
        for (int v = 0; v < 2; v++) {
            FILE *f = fopen(path, "w");
            if (!TH_CHECK(t, f != NULL))
                break;
            fprintf(f,
                    "{\"format\": \"tpuemu-trace/1\", \"name\": \"ch\", "
                    "\"system\": \"v3-8\", \"run\": {\"mode\": \"train\", "
                    "\"global_batch\": 64}, \"graph\": {\"inputs\": "
                    "[{\"name\": \"x\", \"shape\": [32, 32, 32]}], "
                    "\"layers\": [{\"name\": \"c2\", \"op\": \"conv\", "
                    "\"in\": \"x\", \"filters\": %d, \"kernel\": [3, 3]}, "
                    "{\"name\": \"c3\", \"op\": \"conv\", \"in\": \"c2\", "
                    "\"filters\": 32, \"kernel\": [3, 3]}, {\"name\": \"l\", "
                    "\"op\": \"loss\", \"in\": \"c3\", \"kind\": \"l2\"}]}}\n",
                    ch[v]);
            fclose(f);
            emu_result r;
            if (TH_CHECKF(t,
                          th_sim_trace(path, NULL, NULL, 0, 0, &r, NULL, &e) ==
                              TPU_OK,
                          "%s", e.msg)) {
                ts[v] = r.step_time_s;
                emu_result_free(&r);
            }
        }
        /* 0.7892 against 0.7888 ms (whole-tile chunks; ragged ones gave
         * 0.8038, 1.9%).  The rest
         * is the search's: its candidate rows are the largest that fit each
         * budget, and 257 channels' smaller weights leave other rows than
         * 384's (a compiler's heuristic, not exact in the channels). */
        TH_CHECKF(t, ts[0] > 0 && ts[0] <= ts[1] * 1.005,
                  "257 channels %.9g s, 384 channels %.9g s", ts[0], ts[1]);
    }

    th_case(t, "K parts change timing, never values: tiny2d trained with 64 "
               "KiB of VMEM computes what it computes with 16 MiB");
    {
        const char *tiny = "traces/small/tiny2d.json";
        const char *k[1] = {"vmem_bytes"}, *v[1] = {"65536"};
        emu_result a, b;
        fw_program p;
        fw_program_init(&p);
        if (TH_CHECKF(t,
                      th_sim_trace(tiny, NULL, NULL, 0, 1, &a, NULL, &e) == 0,
                      "%s", e.msg)) {
            if (TH_CHECKF(t, th_sim_trace(tiny, k, v, 1, 1, &b, &p, &e) == 0,
                          "%s", e.msg)) {
                int kparts = 0;
                for (size_t j = 0; j < p.n; j++)
                    if (p.code[j].op == FW_MATMUL && p.code[j].kparts > 1)
                        kparts = 1;
                TH_CHECKF(t, kparts, "64 KiB of VMEM cut no K");
                TH_CHECK(t, b.output_checksum == a.output_checksum);
                TH_CHECK(t, b.loss == a.loss && b.n_grads == a.n_grads &&
                                memcmp(a.grads, b.grads,
                                       sizeof(float) * (size_t)a.n_grads) ==
                                    0);
                emu_result_free(&b);
                fw_program_free(&p);
            }
            emu_result_free(&a);
        }
    }
}
