/* The lowering (firmware/lower.c) seen in its programs: N-chunked
 * products, the halo of a split along W, the window a weight gradient
 * gathers, and `tpuemu lower` on a step that does not fit. */
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "emu/graph.h"
#include "emu/result.h"
#include "emu/sim.h"
#include "mxu/mxu.h"
#include "test/harness.h"

/* Writes text as a trace named name in the test directory and lowers and
 * times it with key = val; 1 on success (r and p then the caller's to
 * free), 0 after a failed check. */
static int sim_text(th_ctx *t, const char *name, const char *text,
                    const char *key, const char *val, emu_result *r,
                    fw_program *p)
{
    char path[512];
    tpu_error e;
    snprintf(path, sizeof path, "%s/%s", th_tmpdir(), name);
    th_put(path, text);
    fw_program_init(p);
    return TH_CHECKF(t, th_sim_trace(path, &key, &val, 1, 0, r, p, &e) ==
                            TPU_OK,
                     "%s", e.msg);
}

/* A product whose weights exceed half of VMEM: no load larger than VMEM,
 * and each N chunk streams every row exactly once (its own last tile). */
static void chunk_cases(th_ctx *t)
{
    char name[64];
    th_case(t, "N-chunked products: every chunk covers the M rows exactly "
               "once and its own columns (a ragged last chunk is narrower), "
               "and no load exceeds VMEM (3x3 conv 1024 -> 1024, "
               "dense 4096 -> 4096; with and without the tile search)");
    static const char *const layer[] = {
        "[{\"name\":\"conv\",\"op\":\"conv\",\"in\":\"x\","
        "\"filters\":1024,\"kernel\":[3,3]}]",
        "[{\"name\":\"fc\",\"op\":\"dense\",\"in\":\"x\","
        "\"units\":4096,\"use_bias\":false}]"};
    static const char *const shape[] = {"[16,16,1024]", "[4096]"};
    static const int64_t rows[] = {64 * 16 * 16, 64}, cout[] = {1024, 4096};
    static const char *const key = "xla.tile_search";
    static const char *const val[] = {"1", "0"};
    char text[1024];
    for (int i = 0; i < 2; i++)
        for (int v = 0; v < 2; v++) {
            snprintf(name, sizeof name, "lower-chunk%d.json", i);
            snprintf(text, sizeof text,
                     "{\"format\":\"tpuemu-trace/1\",\"name\":\"w\","
                     "\"system\":\"v3-8\",\"run\":{\"mode\":\"infer\","
                     "\"global_batch\":512,\"num_cores_per_replica\":1},"
                     "\"graph\":{\"inputs\":[{\"name\":\"x\",\"shape\":"
                     "%s}],\"layers\":%s}}\n",
                     shape[i], layer[i]);
            emu_result r;
            fw_program p;
            if (!sim_text(t, name, text, key, val[v], &r, &p))
                continue;
            int64_t rep = 1, big = 0, covered = 0, cc = 0;
            for (size_t j = 0; j < p.n; j++) {
                const fw_insn *in = &p.code[j];
                if (in->op == FW_LOOP)
                    rep = in->a;
                else if (in->op == FW_ENDLOOP)
                    rep = 1;
                else if (in->op == FW_DMA_LD && in->a > big)
                    big = in->a;
                else if (in->op == FW_MATMUL) {
                    covered += in->a * rep * in->c;
                    if (in->c > cc)
                        cc = in->c;
                }
            }
            int64_t nch = cc > 0 ? (cout[i] + cc - 1) / cc : 0;
            TH_CHECKF(t, nch > 1 && covered == rows[i] * cout[i],
                      "%s, %s: %lld row x columns in %lld chunks of %lld, "
                      "want %lld",
                      shape[i], key[0], (long long)covered, (long long)nch,
                      (long long)cc, (long long)(rows[i] * cout[i]));
            TH_CHECKF(t, big <= 16 * 1024 * 1024,
                      "%s: a %lld-byte load into 16 MiB of VMEM", shape[i],
                      (long long)big);
            emu_result_free(&r);
            fw_program_free(&p);
        }
}

/* A halo one column wide is not padded to the sublanes' 8 columns. */
static void halo_layout_cases(th_ctx *t)
{
    char path[512];
    th_cmd_result c;
    th_case(t, "a [1,2,2,1] split's one-column halo along W moves about its "
               "data (4 x 33 x 1 x 256 x 2 B), not 8 padded columns");
    snprintf(path, sizeof path, "%s/lower-whalo.json", th_tmpdir());
    th_put(path, "{\"format\":\"tpuemu-trace/1\",\"name\":\"c4\",\"system\":"
              "\"v3-8\",\"run\":{\"mode\":\"infer\",\"global_batch\":8,"
              "\"num_cores_per_replica\":4,\"input_partition_dims\":[[1,2,2,"
              "1],null]},\"graph\":{\"inputs\":[{\"name\":\"x\",\"shape\":"
              "[64,64,256]}],\"layers\":[{\"name\":\"conv\",\"op\":\"conv\","
              "\"in\":\"x\",\"filters\":256,\"kernel\":[3,3]}]}}\n");
    th_run(&c, "%s lower %s", th_bin(), path);
    const char *h = strstr(c.out, "dim=1 from_lo=0 from_hi=");
    double bytes = h ? atof(h + strlen("dim=1 from_lo=0 from_hi=")) : -1;
    double data = 4.0 * 33 * 1 * 256 * 2;
    TH_CHECKF(t, c.status == 0 && bytes >= data && bytes <= 1.25 * data,
              "exit %d: W halo %g B for %g B of data", c.status, bytes, data);
}

/* Bytes a program loads from HBM (loops unrolled). */
static double loaded_bytes(const fw_program *p)
{
    double rep = 1, sum = 0;
    for (size_t j = 0; j < p->n; j++) {
        const fw_insn *in = &p->code[j];
        if (in->op == FW_LOOP)
            rep = (double)in->a;
        else if (in->op == FW_ENDLOOP)
            rep = 1;
        else if (in->op == FW_DMA_LD)
            sum += (double)in->a * rep;
    }
    return sum;
}

/* xla.batch_lanes: a 64-channel map is stored unpadded with the batch on
 * the lanes when the batch fills them, and at twice its size otherwise. */
static void batch_lane_cases(th_ctx *t)
{
    char text[768];
    th_case(t, "a 1x1 conv on a 56x56x64 map loads its input about once at "
               "128 examples per core (the batch on the lanes) and twice "
               "with xla.batch_lanes=0 or at 64 per core");
    static const char *const key = "xla.batch_lanes";
    static const char *const val[] = {"1", "0"};
    static const int batch[] = {1024, 512};
    double got[2][2] = {{0, 0}, {0, 0}};
    for (int b = 0; b < 2; b++)
        for (int v = 0; v < 2; v++) {
            snprintf(text, sizeof text,
                     "{\"format\":\"tpuemu-trace/1\",\"name\":\"b\","
                     "\"system\":\"v3-8\",\"run\":{\"mode\":\"infer\","
                     "\"global_batch\":%d,\"num_cores_per_replica\":1},"
                     "\"graph\":{\"inputs\":[{\"name\":\"x\",\"shape\":"
                     "[56,56,64]}],\"layers\":[{\"name\":\"c\",\"op\":"
                     "\"conv\",\"in\":\"x\",\"filters\":64,\"kernel\":"
                     "[1,1]}]}}\n",
                     batch[b]);
            emu_result r;
            fw_program p;
            if (!sim_text(t, "lower-blanes.json", text, key, val[v], &r, &p))
                continue;
            double data = batch[b] / 8.0 * 56 * 56 * 64 * 2;
            got[b][v] = loaded_bytes(&p) / data;
            emu_result_free(&r);
            fw_program_free(&p);
        }
    TH_CHECKF(t,
              got[0][0] >= 1 && got[0][0] < 1.05 && got[0][1] > 1.9 &&
                  got[1][0] > 1.9 && got[1][0] == got[1][1],
              "input loaded x data: 128 per core %.3f (batch lanes) %.3f "
              "(without); 64 per core %.3f, %.3f",
              got[0][0], got[0][1], got[1][0], got[1][1]);
}

static const char *const trace_head =
    "{\"format\":\"tpuemu-trace/1\",\"system\":\"v3-8\",\"run\":{";

/* whether a listing line holds both a and b */
static int line_with(const char *text, const char *a, const char *b)
{
    for (const char *p = text; p && *p;) {
        const char *e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        const char *x = strstr(p, a), *y = strstr(p, b);
        if (x && y && (size_t)(x - p) < n && (size_t)(y - p) < n)
            return 1;
        p = e ? e + 1 : NULL;
    }
    return 0;
}

static void gather_cases(th_ctx *t, th_cmd_result *c)
{
    /* 8 rows a core; dilation 12 reaches past the neighbours: gathered */
    char path[512], text[1024];
    snprintf(path, sizeof path, "%s/lower-gather.json", th_tmpdir());
    snprintf(text, sizeof text,
             "%s\"mode\":\"train\",\"global_batch\":1,"
             "\"num_cores_per_replica\":8,\"input_partition_dims\":"
             "[[1,8,1,1],null]},\"graph\":{\"inputs\":[{\"name\":\"x\","
             "\"shape\":[64,64,4]}],\"layers\":["
             "{\"name\":\"c0\",\"op\":\"conv\",\"in\":\"x\",\"filters\":8,"
             "\"kernel\":[3,3],\"dilation\":[12,12]},"
             "{\"name\":\"r0\",\"op\":\"relu\",\"in\":\"c0\"},"
             "{\"name\":\"c1\",\"op\":\"conv\",\"in\":\"r0\",\"filters\":8,"
             "\"kernel\":[3,3],\"strides\":[3,1],\"dilation\":[20,1]},"
             "{\"name\":\"l\",\"op\":\"loss\",\"in\":\"c1\",\"kind\":\"l2\"}"
             "]}}",
             trace_head);
    th_put(path, text);
    th_case(t, "a gathered window is gathered again for the weight gradient");
    th_run(c, "%s lower %s --core 3", th_bin(), path);
    TH_CHECKF(t, c->status == 0 && line_with(c->out, "ici.allgather", "fx=dw"),
              "status %d: %.300s", c->status, c->out);
    th_case(t, "without it the weight gradient has no window (xla.dw_halo=0 "
               "keeps the forward's)");
    th_run(c, "%s lower %s --core 3 --set xla.dw_halo=0", th_bin(), path);
    TH_CHECKF(t, c->status == 0 && !line_with(c->out, "ici.allgather", "fx=dw"),
              "status %d", c->status);
    th_case(t, "--functional: the weight gradient reads the window its "
               "firmware brought");
    th_run(c, "%s run %s --functional --quiet", th_bin(), path);
    TH_CHECKF(t, c->status == 0, "status %d: %s", c->status, c->err);
}

/* `lower` of a step that does not fit prints the program (what needs the
 * memory) and exits 3 with run's message, as its help says.  29.4 GiB is
 * run's figure for the default model, batchnorm's normalise fused into its
 * consumers (xla.bn_apply_fused=1); with xla.bn_apply_fused=0 it is
 * 29.9 GiB. */
static void lower_nofit(th_ctx *t)
{
    th_case(t, "lower: a step that does not fit prints its program and "
               "exits 3 with the memory figures");
    th_cmd_result c;
    th_run(&c, "%s lower traces/retinanet-2560-v3-8.json", th_bin());
    TH_CHECKF(t, c.status == 3 && strstr(c.out, "; tpuemu firmware:") &&
                     strstr(c.err, "needs 29.4 GiB of HBM per core"),
              "status %d: %.200s / %s", c.status, c.out, c.err);
    th_run(&c, "%s lower traces/retinanet-2560-v3-8.json --set "
               "hbm.capacity_gib=64", th_bin());
    TH_CHECKF(t, c.status == 0 && c.err[0] == 0, "status %d: %s", c.status,
              c.err);
}

void th_suite_lower(th_ctx *t)
{
    th_cmd_result *c = malloc(sizeof *c); /* 72 KiB: not on the stack */
    if (!c)
        return;
    chunk_cases(t);
    halo_layout_cases(t);
    batch_lane_cases(t);
    gather_cases(t, c);
    lower_nofit(t);
    free(c);
}
