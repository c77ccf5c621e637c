/* sim_run's results on steps at the edges: a step with no work, and the
 * per-core placement of a step that does not fit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/cost.h"
#include "emu/params.h"
#include "emu/sim.h"
#include "interconnect/ici.h"
#include "mxu/mxu.h"
#include "test/harness.h"

static const char *const trace_head =
    "{\"format\":\"tpuemu-trace/1\",\"system\":\"v3-8\",\"run\":{";

static void nowork_cases(th_ctx *t, th_cmd_result *c)
{
    char path[512], text[1024];
    snprintf(path, sizeof path, "%s/sim-nowork.json", th_tmpdir());
    snprintf(text, sizeof text,
             "%s\"mode\":\"train\",\"global_batch\":8},\"graph\":{"
             "\"inputs\":[{\"name\":\"x\",\"shape\":[16]}],\"layers\":["
             "{\"name\":\"f\",\"op\":\"flatten\",\"in\":\"x\"}]}}",
             trace_head);
    th_put(path, text);
    th_case(t, "a step with no work is refused, naming the graph, and "
               "writes no report");
    th_run(c,
           "rm -f %s/sim-nw.json; %s run %s --report %s/sim-nw.json; "
           "s=$?; test -e %s/sim-nw.json; echo made=$?; exit $s",
           th_tmpdir(), th_bin(), path, th_tmpdir(), th_tmpdir());
    TH_CHECKF(t,
              c->status == 2 &&
                  strstr(c->err, "graph.layers: the step "
                                 "does no work") &&
                  strstr(c->out, "made=1"),
              "status %d: %s", c->status, c->err);
}

static void nofit_placement_cases(th_ctx *t, th_cmd_result *c)
{
    /* RetinaNet 2560 split 4 ways on v3-8 at batch 64: 2 replicas of 4
     * cores, 29.9 GiB per core: no fit, but a report that places them */
    char rep[512];
    snprintf(rep, sizeof rep, "%s/sim-nofit.json", th_tmpdir());
    th_case(t, "a report of a step that does not fit places each core in "
               "its replica and shard (every core read replica 0, shard 0)");
    th_run(c,
           "%s run traces/retinanet-2560-v3-8-p4.json --batch 64 --report "
           "%s",
           th_bin(), rep);
    char *text = th_slurp(rep, NULL);
    TH_CHECKF(t,
              c->status == 3 && text &&
                  strstr(text, "{\"core\": 5, \"chip\": 2, \"replica\": 1, "
                               "\"shard\": 1,") &&
                  strstr(text, "\"fits\": false"),
              "status %d: %s", c->status, c->err);
    free(text);
}

/* Lent caches change no figure: a run that borrows the interconnect and
 * DMA costs of another run of the same trace gives the same step, and a
 * DMA cache made for another HBM is refused. */
static void cache_cases(th_ctx *t)
{
    th_case(t, "runs that borrow one trace's caches give the same doubles; "
               "a DMA cache of another HBM is not borrowed");
    graph g;
    tpu_error err = {0};
    if (!TH_CHECKF(t, graph_load(&g, "traces/retinanet-2560-v3-8-p8.json",
                                 &err) == 0,
                   "%s", err.msg))
        return;
    sim_opts o;
    sim_opts_default(&o);
    emu_result a = {0}, b = {0}, c = {0};
    sim_caches cc;
    int ok = sim_run(&g, &o, &a, &err) == 0;
    sim_caches_new(&g, &o, &cc);
    TH_CHECK(t, cc.net && cc.dma && cc.memo);
    sim_caches_lend(&cc, &o);
    cost_dma *dma = cc.dma;
    /* twice: the second run finds everything cached */
    ok = ok && sim_run(&g, &o, &b, &err) == 0;
    emu_result_free(&b);
    ok = ok && sim_run(&g, &o, &b, &err) == 0;
    if (TH_CHECKF(t, ok, "%s", err.msg))
        TH_CHECKF(t, a.step_time_s == b.step_time_s, "%.17g vs %.17g",
                  a.step_time_s, b.step_time_s);
    tpu_params hw;
    tpu_params_default(&hw, 3);
    TH_CHECK(t, cost_dma_matches(dma, &hw));
    /* the price memo: any chip data but the interconnect's tell apart */
    TH_CHECK(t, cost_memo_matches(cc.memo, &hw));
    tpu_params hi = hw, hc = hw;
    TH_CHECK(t, tpu_params_set(&hi, "ici.link_gbs", "100", &err) == 0 &&
                    cost_memo_matches(cc.memo, &hi));
    TH_CHECK(t, tpu_params_set(&hc, "clock_hz", "800e6", &err) == 0 &&
                    !cost_memo_matches(cc.memo, &hc));
    TH_CHECK(t, tpu_params_set(&hw, "hbm.bandwidth_gbs", "300", &err) == 0);
    TH_CHECK(t, !cost_dma_matches(dma, &hw));
    /* a what-if of the HBM with the default's cache lent: its own costs */
    static const char *const key[] = {"hbm.bandwidth_gbs"},
                             *const val[] = {"300"};
    sim_opts q;
    sim_opts_default(&q);
    q.n_sets = 1;
    q.set_keys = key;
    q.set_values = val;
    emu_result d = {0};
    ok = sim_run(&g, &q, &c, &err) == 0;
    q.dma_costs = dma;
    ok = ok && sim_run(&g, &q, &d, &err) == 0;
    if (TH_CHECKF(t, ok, "%s", err.msg))
        TH_CHECKF(t, c.step_time_s == d.step_time_s &&
                         c.step_time_s != a.step_time_s,
                  "%.17g vs %.17g (default %.17g)", c.step_time_s,
                  d.step_time_s, a.step_time_s);
    emu_result_free(&a);
    emu_result_free(&b);
    emu_result_free(&c);
    emu_result_free(&d);
    sim_caches_free(&cc);
    graph_free(&g);
}

void th_suite_sim(th_ctx *t)
{
    cache_cases(t);
    th_cmd_result *c = malloc(sizeof *c); /* 72 KiB: not on the stack */
    if (!c)
        return;
    nowork_cases(t, c);
    nofit_placement_cases(t, c);
    free(c);
}
