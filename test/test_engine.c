/* The pod engine end to end: accounting, determinism, the shortcuts it
 * takes (replica dedup, loop skipping) against full execution, the halo
 * formula, and the memory boundary of the seeds. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cJSON.h>

#include "emu/report.h"
#include "emu/sim.h"
#include "test/harness.h"
#include "emu/graph.h"
#include "emu/result.h"

/* A one-conv (+ optional second conv) 2D trace split `ways` along H. */
static int conv_trace(char *buf, size_t cap, const char *sys, int batch,
                      int cpr, int ph, int pw, int h, int w, int c, int k,
                      int stride)
{
    return snprintf(
        buf, cap,
        "{\"format\":\"tpuemu-trace/1\",\"name\":\"conv\",\"system\":\"%s\","
        "\"run\":{\"mode\":\"train\",\"global_batch\":%d,"
        "\"num_cores_per_replica\":%d,"
        "\"input_partition_dims\":[[1,%d,%d,1],null]},"
        "\"graph\":{\"inputs\":[{\"name\":\"x\",\"shape\":[%d,%d,%d]}],"
        "\"layers\":["
        "{\"name\":\"c0\",\"op\":\"conv\",\"in\":\"x\",\"filters\":%d,"
        "\"kernel\":[1,1]},"
        "{\"name\":\"c1\",\"op\":\"conv\",\"in\":\"c0\",\"filters\":%d,"
        "\"kernel\":[%d,%d],\"strides\":[%d,%d]},"
        "{\"name\":\"bn\",\"op\":\"batchnorm\",\"in\":\"c1\"},"
        "{\"name\":\"r\",\"op\":\"relu\",\"in\":\"bn\"},"
        "{\"name\":\"l\",\"op\":\"loss\",\"kind\":\"l2\",\"in\":\"r\"}]}}",
        sys, batch, cpr, ph, pw, h, w, c, c, c, k, k, stride, stride);
}

static int run_text(const char *text, const sim_opts *o, emu_result *r,
                    tpu_error *e)
{
    graph g;
    if (graph_parse(&g, text, strlen(text), "test.json", e))
        return -1;
    int rc = sim_run(&g, o, r, e);
    graph_free(&g);
    return rc;
}

static int run_file(const char *path, const sim_opts *o0, emu_result *r,
                    tpu_error *e)
{
    graph g;
    if (graph_load(&g, path, e))
        return -1;
    sim_opts o = *o0;
    o.trace_path = path;
    int rc = sim_run(&g, &o, r, e);
    graph_free(&g);
    return rc;
}

static int same_cores(const emu_result *a, const emu_result *b)
{
    if (a->cores != b->cores)
        return 0;
    for (int c = 0; c < a->cores; c++) {
        const emu_core_result *x = &a->per_core[c], *y = &b->per_core[c];
        if (x->step_time_s != y->step_time_s)
            return 0;
        for (int k = 0; k < CAT_COUNT; k++)
            if (x->breakdown_s[k] != y->breakdown_s[k])
                return 0;
        if (x->hbm_read_bytes != y->hbm_read_bytes ||
            x->hbm_write_bytes != y->hbm_write_bytes)
            return 0;
    }
    /* Core 0's per-layer time too (skipped loop iterations are added in
     * one step there, so allow the rounding of a double sum). */
    if (a->n_layers != b->n_layers || !a->layer_time_s || !b->layer_time_s)
        return 0;
    for (int i = 0; i < a->n_layers * CAT_COUNT; i++)
        if (fabs(a->layer_time_s[i] - b->layer_time_s[i]) >
            1e-9 * fabs(a->layer_time_s[i]) + 1e-15)
            return 0;
    return 1;
}

static void check_accounting(th_ctx *t, const emu_result *r, const char *what)
{
    for (int c = 0; c < r->cores; c++) {
        const emu_core_result *x = &r->per_core[c];
        double sum = 0;
        for (int k = 0; k < CAT_COUNT; k++) {
            TH_CHECKF(t, x->breakdown_s[k] >= 0, "%s core %d: negative %s",
                      what, c, emu_cat_name((emu_cat)k));
            sum += x->breakdown_s[k];
        }
        if (!TH_CHECKF(t, fabs(sum - x->step_time_s) <= 1e-9 * x->step_time_s + 1e-15,
                       "%s core %d: breakdown %.12g != step %.12g", what, c,
                       sum, x->step_time_s))
            return;
    }
}

static const emu_core_result *find_halo_core(const emu_result *r)
{
    return &r->per_core[0];
}

static int64_t halo_bytes(const graph *g, const sim_opts *o, int core,
                          int layer, int *nhalo)
{
    fw_program prog;
    fw_memory mem;
    tpu_error e = {0};
    int64_t total = 0;
    *nhalo = 0;
    if (sim_lower(g, o, core, &prog, &mem, &e))
        return -1;
    for (size_t i = 0; i < prog.n; i++)
        if (prog.code[i].op == FW_HALO && prog.code[i].layer == layer &&
            prog.code[i].phase == PHASE_FWD) {
            total += prog.code[i].b + prog.code[i].c;
            (*nhalo)++;
        }
    fw_program_free(&prog);
    return total;
}

static int sim_file(th_ctx *t, const char *path, int timeline, emu_result *r)
{
    graph g;
    tpu_error e;
    sim_opts o;
    sim_opts_default(&o);
    o.trace_path = path;
    o.record_timeline = timeline;
    memset(r, 0, sizeof *r);
    int ok = TH_CHECKF(t, graph_load(&g, path, &e) == TPU_OK, "%s", e.msg) &&
             TH_CHECKF(t, sim_run(&g, &o, r, &e) == TPU_OK, "%s", e.msg);
    graph_free(&g);
    return ok;
}

/* Seconds of [a0,a1) intervals' union that b's union also covers. */
static double overlap(const emu_core_result *k, int layer, emu_unit ua,
                      emu_unit ub)
{
    double both = 0;
    for (size_t i = 0; i < k->n_events; i++) {
        const emu_event *a = &k->events[i];
        if (a->unit != ua || a->layer != layer || a->phase != PHASE_BWD)
            continue;
        /* b's events of one unit do not overlap each other */
        for (size_t j = 0; j < k->n_events; j++) {
            const emu_event *b = &k->events[j];
            if (b->unit != ub || b->layer != layer || b->phase != PHASE_BWD)
                continue;
            double lo = a->t0 > b->t0 ? a->t0 : b->t0;
            double hi = a->t1 < b->t1 ? a->t1 : b->t1;
            if (hi > lo)
                both += hi - lo;
        }
    }
    return both;
}

static double unit_busy(const emu_core_result *k, int layer, emu_unit u)
{
    double s = 0;
    for (size_t i = 0; i < k->n_events; i++)
        if (k->events[i].unit == u && k->events[i].layer == layer &&
            k->events[i].phase == PHASE_BWD)
            s += k->events[i].t1 - k->events[i].t0;
    return s;
}

static void audit_cases(th_ctx *t)
{
    char path[512];
    emu_result r;
    th_case(t, "a 1x1 convolution's backward: the weight gradient's loads "
               "run beside its products (most of the MXU's busy time has "
               "a load under it), not after them");
    snprintf(path, sizeof path, "%s/engine-k1.json", th_tmpdir());
    th_put(path, "{\"format\":\"tpuemu-trace/1\",\"name\":\"k1\",\"system\":"
              "\"v3-8\",\"run\":{\"mode\":\"train\",\"global_batch\":64,"
              "\"num_cores_per_replica\":1},\"graph\":{\"inputs\":[{\"name\":"
              "\"x\",\"shape\":[64,64,256]}],\"layers\":[{\"name\":\"conv\","
              "\"op\":\"conv\",\"in\":\"x\",\"filters\":256,\"kernel\":"
              "[1,1]}]}}\n");
    if (sim_file(t, path, 1, &r)) {
        const emu_core_result *k = &r.per_core[0];
        double mxu = unit_busy(k, 1, UNIT_MXU);
        double both = overlap(k, 1, UNIT_MXU, UNIT_DMA);
        TH_CHECKF(t, mxu > 0 && both > 0.6 * mxu,
                  "MXU busy %.3g us in the backward, %.3g us of it beside a "
                  "load", mxu * 1e6, both * 1e6);
        emu_result_free(&r);
    }
}

void th_suite_engine(th_ctx *t)
{
    char buf[4096];
    tpu_error e = {0};
    sim_opts o;
    sim_opts_default(&o);

    th_case(t, "each core's breakdown sums to its step time; replicas agree");
    {
        const char *files[] = {"traces/reference/retinanet-1280-v3-8.json",
                               "traces/retinanet-2560-v3-8-p8.json",
                               "traces/small/tiny3d-p4.json",
                               "traces/cifar10-keras-v2-8.json"};
        for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
            emu_result r;
            if (!TH_CHECKF(t, run_file(files[i], &o, &r, &e) == 0, "%s: %s",
                           files[i], e.msg))
                continue;
            check_accounting(t, &r, files[i]);
            for (int c = 0; c < r.cores; c++) {
                const emu_core_result *x = &r.per_core[c];
                /* Every replica's shard k has the same figures. */
                for (int d = c + 1; d < r.cores; d++)
                    if (r.per_core[d].shard == x->shard)
                        TH_CHECKF(t, r.per_core[d].step_time_s ==
                                         x->step_time_s,
                                  "%s: cores %d and %d differ", files[i], c, d);
            }
            TH_CHECK(t, r.step_time_s > 0);
            emu_result_free(&r);
        }
    }

    th_case(t, "the engine's shortcuts give exactly what full execution gives");
    {
        /* Replica dedup and loop skipping off (--no-dedup) vs on: every
         * figure identical, on 2D and 3D, partitioned and not. */
        /* The two RetinaNet traces have loops whose state repeats every
         * second iteration (a product that streams behind its predecessor
         * every other iteration: end_iteration's period of two). */
        const char *files[] = {"traces/small/tiny2d.json",
                               "traces/small/tiny3d-p4.json",
                               "traces/cifar10-keras-v2-8.json",
                               "traces/retinanet-2560-v3-8-p8.json",
                               "traces/reference/retinanet-1280-v3-8.json"};
        for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
            emu_result a, b;
            sim_opts full = o;
            full.no_dedup = 1;
            if (!TH_CHECKF(t, run_file(files[i], &o, &a, &e) == 0, "%s",
                           e.msg))
                continue;
            if (!TH_CHECKF(t, run_file(files[i], &full, &b, &e) == 0, "%s",
                           e.msg)) {
                emu_result_free(&a);
                continue;
            }
            TH_CHECKF(t, same_cores(&a, &b), "%s: dedup changes the result",
                      files[i]);
            emu_result_free(&a);
            emu_result_free(&b);
        }
        /* A partitioned conv with many tiles: loops are skipped. */
        conv_trace(buf, sizeof buf, "v3-8", 8, 4, 1, 4, 256, 256, 128, 3, 1);
        emu_result a, b;
        sim_opts full = o;
        full.no_dedup = 1;
        if (TH_CHECKF(t, run_text(buf, &o, &a, &e) == 0, "%s", e.msg)) {
            if (TH_CHECKF(t, run_text(buf, &full, &b, &e) == 0, "%s", e.msg)) {
                TH_CHECK(t, same_cores(&a, &b));
                emu_result_free(&b);
            }
            emu_result_free(&a);
        }
    }

    th_case(t, "the critical-path timeline covers each step, no gap or "
               "overlap; the MXU row covers the mxu time");
    {
        emu_result r;
        sim_opts q = o;
        q.record_timeline = 1;
        if (TH_CHECKF(t, run_file("traces/retinanet-2560-v3-8-p8.json", &q, &r,
                                  &e) == 0, "%s", e.msg)) {
            for (int c = 0; c < r.cores; c++) {
                const emu_core_result *x = &r.per_core[c];
                double at = 0, cat[CAT_COUNT] = {0};
                int ok = x->n_events > 0;
                for (size_t i = 0; i < x->n_events && ok; i++) {
                    const emu_event *v = &x->events[i];
                    if (v->unit != UNIT_CORE)
                        continue;
                    ok = fabs(v->t0 - at) < 1e-9 && v->t1 >= v->t0;
                    cat[v->cat] += v->t1 - v->t0;
                    at = v->t1;
                }
                TH_CHECKF(t, ok && fabs(at - x->step_time_s) < 1e-9,
                          "core %d: timeline ends at %g of %g", c, at,
                          x->step_time_s);
                for (int k = 0; k < CAT_COUNT; k++)
                    TH_CHECKF(t, fabs(cat[k] - x->breakdown_s[k]) < 1e-9,
                              "core %d %s: events %g vs %g", c,
                              emu_cat_name((emu_cat)k), cat[k],
                              x->breakdown_s[k]);
                /* The MXU row holds every matrix product, skipped loop
                 * iterations included: at least the critical path's mxu
                 * time (leaving out an event merged across an
                 * iteration's start gives under half of it). */
                double mxu = 0;
                for (size_t i = 0; i < x->n_events; i++)
                    if (x->events[i].unit == UNIT_MXU)
                        mxu += x->events[i].t1 - x->events[i].t0;
                TH_CHECKF(t, mxu >= x->breakdown_s[CAT_MXU] * (1 - 1e-9),
                          "core %d: MXU row %g s, critical-path mxu %g s", c,
                          mxu, x->breakdown_s[CAT_MXU]);
            }
            emu_result_free(&r);
        }
    }

    th_case(t, "same run twice: byte-identical reports");
    {
        emu_result a, b;
        if (TH_CHECKF(t, run_file("traces/reference/retinanet-1280-v3-8.json",
                                  &o, &a, &e) == 0, "%s", e.msg) &&
            TH_CHECKF(t, run_file("traces/reference/retinanet-1280-v3-8.json",
                                  &o, &b, &e) == 0, "%s", e.msg)) {
            char *ja = report_to_json(&a), *jb = report_to_json(&b);
            TH_CHECK(t, ja && jb && strcmp(ja, jb) == 0);
            free(ja);
            free(jb);
            emu_result_free(&a);
            emu_result_free(&b);
        }
    }

    th_case(t, "halo bytes per conv equal the formula");
    {
        /* 3x3 stride-1 same conv on a 64x32x128 input split along H:
         * each neighbour sends one row of W x C bf16 per example. */
        int batch = 2;
        for (int ways = 2; ways <= 8; ways *= 2) {
            conv_trace(buf, sizeof buf, "v3-8", batch * 8 / ways, ways, ways,
                       1, 64, 32, 128, 3, 1);
            graph g;
            if (!TH_CHECKF(t, graph_parse(&g, buf, strlen(buf), "t", &e) == 0,
                           "%s", e.msg))
                continue;
            int layer = graph_find(&g, "c1"), n;
            int64_t row = (int64_t)batch * 32 * 128 * 2;
            /* Edge shard 0: one row from below; interior: one each side. */
            int64_t b0 = halo_bytes(&g, &o, 0, layer, &n);
            TH_CHECKF(t, b0 == row, "%d ways: shard 0 gets %lld, want %lld",
                      ways, (long long)b0, (long long)row);
            TH_CHECK(t, n == 1);
            if (ways > 2) {
                /* the core holding shard 1 of replica 0 */
                plan p;
                plan_build(&p, &g, tpu_system_find("v3-8"), g.global_batch,
                           &e);
                int core1 = p.core_of[1];
                plan_free(&p);
                int64_t b1 = halo_bytes(&g, &o, core1, layer, &n);
                TH_CHECKF(t, b1 == 2 * row, "%d ways: interior gets %lld",
                          ways, (long long)b1);
            }
            /* A 5x5 window needs two rows; stride 2 with a 3x3 window one
             * row below only (TF same padding puts the extra on the high
             * side). */
            graph_free(&g);
        }
        conv_trace(buf, sizeof buf, "v3-8", 2 * 8 / 2, 2, 2, 1, 64, 32, 128,
                   5, 1);
        graph g;
        if (TH_CHECKF(t, graph_parse(&g, buf, strlen(buf), "t", &e) == 0,
                      "%s", e.msg)) {
            int n;
            int64_t b0 = halo_bytes(&g, &o, 0, graph_find(&g, "c1"), &n);
            TH_CHECKF(t, b0 == 2 * 2 * 32 * 128 * 2, "5x5: %lld",
                      (long long)b0);
            graph_free(&g);
        }
    }

    th_case(t, "splitting a conv 1, 2, 4, 8 ways divides its MXU time");
    {
        double mxu1 = 0;
        for (int ways = 1; ways <= 8; ways *= 2) {
            conv_trace(buf, sizeof buf, "v3-8", 8 * 8 / ways, ways, ways, 1,
                       128, 64, 256, 3, 1);
            emu_result r;
            if (!TH_CHECKF(t, run_text(buf, &o, &r, &e) == 0, "%s", e.msg))
                continue;
            /* Same examples per core-pair of work: per replica batch is 8,
             * so a core's share of MACs falls as 1/ways. */
            double mxu = r.per_core[0].breakdown_s[CAT_MXU];
            double halo = 0;
            for (int c = 0; c < r.cores; c++)
                halo += r.per_core[c].breakdown_s[CAT_HALO];
            if (ways == 1) {
                mxu1 = mxu;
                TH_CHECK(t, halo == 0);
            } else {
                TH_CHECKF(t, fabs(mxu * ways / mxu1 - 1) < 0.15,
                          "%d ways: mxu %g vs %g / %d", ways, mxu, mxu1, ways);
                TH_CHECKF(t, halo > 0, "%d ways: no halo time", ways);
            }
            check_accounting(t, &r, "split conv");
            emu_result_free(&r);
        }
    }

    th_case(t, "memory boundary of the seeds: 1280 fits, 2560 needs 4-8 ways");
    {
        emu_result r;
        int rc = run_file("traces/retinanet-1280-v3-8.json", &o, &r, &e);
        TH_CHECKF(t, rc == 0, "1280 batch 8/core: %s", e.msg);
        if (rc == 0)
            emu_result_free(&r);
        rc = run_file("traces/retinanet-2560-v3-8.json", &o, &r, &e);
        TH_CHECKF(t, rc == TPU_ERR_NOFIT, "2560 batch 8/core: rc %d", rc);
        TH_CHECK(t, strstr(e.msg, "GiB of HBM per core") != NULL);
        if (rc == TPU_ERR_NOFIT) {
            TH_CHECK(t, r.fits == 0 && r.hbm_needed_bytes > r.hbm_capacity_bytes);
            emu_result_free(&r);
        }
        const char *ok[] = {"traces/retinanet-2560-v3-8-p4.json",
                            "traces/retinanet-2560-v3-8-p8.json"};
        for (int i = 0; i < 2; i++) {
            rc = run_file(ok[i], &o, &r, &e);
            TH_CHECKF(t, rc == 0, "%s: %s", ok[i], e.msg);
            if (rc == 0)
                emu_result_free(&r);
        }
    }

    th_case(t, "--system, --batch and --set reach the run; bad ones exit 2");
    {
        emu_result r;
        sim_opts q = o;
        q.system = "v3-32";
        q.global_batch = 32;
        const char *k[] = {"hbm.bandwidth_gbs"}, *v[] = {"900"};
        q.n_sets = 1;
        q.set_keys = k;
        q.set_values = v;
        if (TH_CHECKF(t, run_file("traces/small/tiny2d.json", &q, &r, &e) == 0,
                      "%s", e.msg)) {
            TH_CHECK(t, r.cores == 32 && r.global_batch == 32);
            TH_CHECK(t, r.n_overrides == 1);
            TH_CHECK(t, find_halo_core(&r) != NULL);
            emu_result_free(&r);
        }
        q.system = "v9-8";
        TH_CHECK(t, run_file("traces/small/tiny2d.json", &q, &r, &e) ==
                        TPU_ERR_INPUT);
        q.system = NULL;
        q.global_batch = 7;
        TH_CHECK(t, run_file("traces/small/tiny2d.json", &q, &r, &e) ==
                        TPU_ERR_INPUT);
        q.global_batch = 0;
        v[0] = "fast";
        TH_CHECK(t, run_file("traces/small/tiny2d.json", &q, &r, &e) ==
                        TPU_ERR_INPUT);
    }

    th_case(t, "tpuemu run prints the table; exit codes 2 and 3");
    {
        th_cmd_result *c = malloc(sizeof *c);
        if (c) {
            th_run(c, "%s run traces/reference/retinanet-1280-v3-8.json",
                   th_bin());
            TH_CHECKF(t, c->status == 0, "status %d: %s", c->status, c->err);
            TH_CHECK(t, strstr(c->out, "step time") != NULL);
            TH_CHECK(t, strstr(c->out, "hbm_stall") != NULL);
            th_run(c, "%s run traces/retinanet-2560-v3-8.json", th_bin());
            TH_CHECKF(t, c->status == 3, "status %d", c->status);
            TH_CHECK(t, strstr(c->err, "tpuemu: error:") == c->err);
            th_run(c, "%s run traces/nope.json", th_bin());
            TH_CHECK(t, c->status == 2);
            th_run(c, "%s run traces/small/tiny2d.json --set nope=1", th_bin());
            TH_CHECK(t, c->status == 2);
            th_run(c, "%s lower traces/small/tiny3d-p4.json --core 1",
                   th_bin());
            TH_CHECK(t, c->status == 0 && strstr(c->out, "mxu.matmul"));
            th_run(c, "%s lower traces/small/tiny3d-p4.json --core 99",
                   th_bin());
            TH_CHECK(t, c->status == 2);
            free(c);
        }
    }
    audit_cases(t);
}
