#include "emu/sim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/cost.h"
#include "emu/engine.h"
#include "emu/fx/fexec.h"
#include "emu/params.h"
#include "emu/plan.h"
#include "firmware/lower.h"
#include "interconnect/ici.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

/* The lowering's pricer: the engine's own timing of a core-local
 * sequence, with the DMA block costs the engine then uses. */
typedef struct {
    const tpu_params *hw;
    cost_dma *dc;
    cost_memo *memo; /* this run's prices (NULL: none remembered) */
} sim_pricing;

static int64_t price_local(void *ctx, const fw_program *prog)
{
    const sim_pricing *sp = ctx;
    int64_t ps = cost_memo_get(sp->memo, prog);
    if (ps >= 0)
        return ps;
    ps = engine_local_ps(sp->hw, sp->dc, prog);
    cost_memo_put(sp->memo, prog, ps);
    return ps;
}

void sim_opts_default(sim_opts *o)
{
    memset(o, 0, sizeof *o);
    o->seed = 1;
    o->steps = 1;
    /* Keras SGD-with-momentum style defaults for the small functional
     * traces; not hardware parameters. */
    o->learning_rate = 0.05;
    o->momentum = 0.9;
}

static tpu_status fill_header(const graph *g, const tpu_system *sys,
                              const tpu_params *hw, int64_t batch,
                              const sim_opts *o, emu_result *r,
                              tpu_error *err)
{
    snprintf(r->trace, sizeof r->trace, "%s", g->name);
    snprintf(r->system, sizeof r->system, "%s", sys->name);
    snprintf(r->freeze, sizeof r->freeze, "%s", g->freeze);
    r->optimizer = g->optimizer;
    r->pdims_rank = g->pdims_override ? g->pdims_rank : 0;
    memcpy(r->pdims, g->pdims, sizeof r->pdims);
    r->gen = sys->gen;
    r->cores = sys->cores;
    r->chips = sys->cores / hw->cores_per_chip;
    r->dim_x = sys->dim_x;
    r->dim_y = sys->dim_y;
    r->global_batch = batch;
    r->cores_per_replica = g->cores_per_replica;
    r->replicas = sys->cores / g->cores_per_replica;
    r->train = g->train;
    r->hbm_capacity_bytes = hw->hbm.capacity_bytes;
    r->core_peak_flops = tpu_core_peak_flops(hw);
    r->core_hbm_bps = hbm_peak_bps(&hw->hbm);
    /* The work the step really does: a frozen prefix has no backward. */
    r->flops_per_step =
        (graph_forward_flops(g) + (g->train ? graph_backward_flops(g) : 0)) *
        (double)batch;
    if (o->n_sets) {
        r->overrides = calloc((size_t)o->n_sets, sizeof *r->overrides);
        if (!r->overrides)
            return tpu_fail(err, TPU_ERR_SYSTEM, "out of host memory");
        /* In the parameter table's order, not the command line's: the
         * order of the --set options changes nothing (tpu_params_set), so
         * neither does it change the report. */
        int n = 0;
        for (size_t k = 0; tpu_param_key(k); k++)
            for (int i = 0; i < o->n_sets; i++)
                if (strcmp(o->set_keys[i], tpu_param_key(k)->key) == 0) {
                    snprintf(r->overrides[n].key, sizeof r->overrides[n].key,
                             "%s", o->set_keys[i]);
                    snprintf(r->overrides[n].value,
                             sizeof r->overrides[n].value, "%s",
                             o->set_values[i]);
                    n++;
                }
        r->n_overrides = n;
    }
    r->n_layers = g->n_layers;
    r->layer_names = calloc((size_t)g->n_layers + 1, sizeof *r->layer_names);
    if (!r->layer_names)
        return tpu_fail(err, TPU_ERR_SYSTEM, "out of host memory");
    for (int l = 0; l < g->n_layers; l++)
        snprintf(r->layer_names[l], sizeof r->layer_names[l], "%s",
                 g->layers[l].name);
    return TPU_OK;
}

/* How core 0 lowered each grouped convolution's parts (the report's
 * layers[].grouped, `run --layers`); the array only when some layer is
 * grouped. */
static tpu_status note_gconv(emu_result *r, const graph *g,
                             const fw_program *prog, tpu_error *err)
{
    for (size_t i = 0; i < prog->n; i++) {
        const fw_insn *in = &prog->code[i];
        int part = fw_gconv_part(in);
        if (part < 0 || in->layer < 0 || in->layer >= g->n_layers)
            continue;
        if (!r->layer_gconv) {
            r->layer_gconv =
                calloc((size_t)g->n_layers, sizeof *r->layer_gconv);
            if (!r->layer_gconv)
                return tpu_fail(err, TPU_ERR_SYSTEM, "out of host memory");
        }
        r->layer_gconv[in->layer][part] = in->gconv;
    }
    return TPU_OK;
}

/* What run and lower share: the slice (--system or the trace's), the
 * batch, the run checks, and the chip data with the --set overrides. */
static tpu_status sim_setup(const graph *g, const sim_opts *o,
                            const tpu_system **sys_out, int64_t *batch_out,
                            tpu_params *hw, tpu_error *err)
{
    const char *path = o->trace_path ? o->trace_path : g->name;
    const char *sysname = o->system ? o->system : g->system;
    const tpu_system *sys = tpu_system_find(sysname);
    if (!sys)
        return tpu_fail(err, TPU_ERR_INPUT,
                        "%s: unknown system '%s' (v2-2, v2-8 ... v2-512, v3-2, v3-8 ... "
                        "v3-2048)", o->system ? "--system" : path, sysname);
    int64_t batch = o->global_batch > 0 ? o->global_batch : g->global_batch;
    tpu_status rc = graph_check_run(g, sys->name, batch, path, err);
    if (rc)
        return rc;
    tpu_params_default(hw, sys->gen);
    for (int i = 0; i < o->n_sets; i++) {
        /* one value per key: a second would silently win */
        for (int j = 0; j < i; j++)
            if (strcmp(o->set_keys[j], o->set_keys[i]) == 0)
                return tpu_fail(err, TPU_ERR_INPUT,
                                "--set %s: given twice (%s, then %s)",
                                o->set_keys[i], o->set_values[j],
                                o->set_values[i]);
        rc = tpu_params_set(hw, o->set_keys[i], o->set_values[i], err);
        if (rc)
            return rc;
    }
    if (tpu_params_check(hw, err)) {
        err->code = TPU_ERR_INPUT;
        return TPU_ERR_INPUT;
    }
    *sys_out = sys;
    *batch_out = batch;
    return TPU_OK;
}

void sim_caches_new(const graph *g, const sim_opts *o, sim_caches *c)
{
    const tpu_system *sys;
    int64_t batch;
    tpu_params hw;
    tpu_error e = {0};
    memset(c, 0, sizeof *c);
    if (sim_setup(g, o, &sys, &batch, &hw, &e))
        return;
    c->net = ici_new(&hw.ici, sys->dim_x, sys->dim_y, sys->full_pod);
    if (c->net) /* for the variants of its bandwidths and latencies */
        ici_keep_flows(c->net);
    c->dma = cost_dma_new(&hw);
    c->memo = cost_memo_new(&hw);
}

void sim_caches_lend(const sim_caches *c, sim_opts *o)
{
    o->net = c->net;
    o->dma_costs = c->dma;
    o->price_memo = c->memo;
}

void sim_caches_free(sim_caches *c)
{
    if (c->net)
        ici_free(c->net);
    cost_dma_free(c->dma);
    cost_memo_free(c->memo);
    memset(c, 0, sizeof *c);
}

#define HOST_LIMIT_DEFAULT (4.0 * GIB)

/* --functional: the same engine run, with fexec computing the values on
 * every core (no replica dedup: each core's data differ), `steps` times
 * with the weights carried over.  The first step's timing is the report's;
 * every later step runs the same firmware, so its timing is the same. */
static tpu_status run_functional(const graph *g, const sim_opts *o,
                                 const plan *p, const tpu_params *hw,
                                 const fw_program *progs, engine_input *ei,
                                 emu_result *out, tpu_error *err)
{
    const char *path = o->trace_path ? o->trace_path : g->name;
    double limit = o->host_mem_limit > 0 ? o->host_mem_limit : HOST_LIMIT_DEFAULT;
    double need = fx_bytes_needed(g, p, progs);
    if (need > limit)
        return tpu_fail(err, TPU_ERR_INPUT,
                        "%s: --functional needs about %.3g GiB of host memory "
                        "for this trace on %s (batch %lld), more than the "
                        "limit of %.3g GiB (--host-mem-gib); functional mode "
                        "is meant for small traces: use a smaller input, "
                        "batch or slice",
                        path, need / GIB, p->sys->name,
                        (long long)(p->batch * p->replicas), limit / GIB);
    int steps = o->steps > 0 ? o->steps : 1;
    int out_layer = -1;
    if (o->output_layer) {
        out_layer = graph_find(g, o->output_layer);
        if (out_layer < 0 || g->layers[out_layer].op == GOP_LOSS ||
            g->layers[out_layer].unused)
            return tpu_fail(err, TPU_ERR_INPUT,
                            "--output-layer %s: %s", o->output_layer,
                            out_layer < 0 ? "no layer of that name in the trace"
                            : g->layers[out_layer].op == GOP_LOSS
                                ? "a loss has no tensor to report"
                                : "it feeds no loss, so a training step does "
                                  "not compute it (XLA removes dead code)");
    }
    fx_config cfg = {o->seed,         o->learning_rate,  o->momentum,
                     o->init_weights, o->n_init_weights, out_layer,
                     o->pe_model};
    fx_state *fx = NULL;
    tpu_status rc = fx_new(&fx, g, p, hw, progs, &cfg, err);
    if (rc)
        return rc;
    out->losses = calloc((size_t)steps, sizeof(double));
    if (!out->losses) {
        fx_free(fx);
        return tpu_fail(err, TPU_ERR_SYSTEM, "out of host memory");
    }
    ei->fx = fx;
    ei->no_dedup = 1;
    for (int s = 0; s < steps && !rc; s++) {
        rc = fx_begin_step(fx, s, err);
        if (rc)
            break;
        if (s == 0) {
            rc = engine_run(ei, out, err);
        } else {
            emu_result tmp = {0};
            engine_input e2 = *ei;
            e2.record_timeline = 0;
            e2.progress = NULL;
            rc = engine_run(&e2, &tmp, err);
            emu_result_free(&tmp);
        }
        if (!rc)
            rc = fx_end_step(fx, out, err);
        if (!rc) {
            out->losses[s] = out->loss;
            out->n_losses = s + 1;
        }
    }
    fx_free(fx);
    return rc;
}

/* v bytes in unit u ("%.1f", no unit name) when that reads above 0.0 or
 * v is 0; NULL then.  Else the unit that fits, named: "19.5 KiB" rather
 * than "0.0" on a core of a few MiB. */
static const char *nofit_part(char *buf, size_t cap, double v, double u)
{
    if (v <= 0 || v / u >= 0.05) {
        snprintf(buf, cap, "%.1f", v / u);
        return NULL;
    }
    if (v >= 0.05 * GIB / 1024)
        snprintf(buf, cap, "%.1f MiB", v / (GIB / 1024));
    else if (v >= 0.05 * 1024)
        snprintf(buf, cap, "%.1f KiB", v / 1024);
    else
        snprintf(buf, cap, "%.0f B", v);
    return buf;
}

/* The three parts of the need: "A, ... B, ... C UNIT" in the line's unit,
 * or every part with its own unit when one of them needs a smaller one
 * (a bare number would then read in the wrong unit). */
static void nofit_parts(char *buf, size_t cap, const fw_memory *m, double u,
                        const char *un)
{
    double v[3] = {m->weights_bytes + m->grads_bytes + m->opt_bytes,
                   m->saved_bytes, m->workspace_bytes};
    char t[3][32];
    int own = 0;
    for (int i = 0; i < 3; i++)
        own |= nofit_part(t[i], sizeof t[i], v[i], u) != NULL;
    for (int i = 0; own && i < 3; i++)
        if (strchr(t[i], ' ') == NULL) /* in the line's unit: name it */
            snprintf(t[i] + strlen(t[i]), sizeof t[i] - strlen(t[i]), " %s",
                     un);
    /* an inference step (or one with every layer frozen) holds weights
     * only: "weights+gradients+optimizer" would name what it has not, and
     * with no backward pass nothing is kept for one */
    int state = m->grads_bytes + m->opt_bytes > 0;
    char kept[64] = "";
    if (state || m->saved_bytes > 0)
        snprintf(kept, sizeof kept, "activations kept for backward %s, ",
                 t[1]);
    snprintf(buf, cap, "%s %s, %sworkspace %s%s%s",
             state ? "weights+gradients+optimizer" : "weights", t[0], kept,
             t[2], own ? "" : " ", own ? "" : un);
}

/* TPU_ERR_NOFIT with the figures of the core m that needs the most. */
static tpu_status nofit_fail(tpu_error *err, const char *path,
                             const tpu_system *sys, const tpu_params *hw,
                             const plan *p, const fw_memory *m)
{
    /* GiB for real chips; MiB when --set shrinks HBM to test a trace */
    double u = hw->hbm.capacity_bytes >= GIB ? GIB : GIB / 1024;
    const char *un = u == GIB ? "GiB" : "MiB";
    char remat[160] = "", rb[32], parts[256];
    if (m->remat_layers > 0) {
        if (!nofit_part(rb, sizeof rb, m->remat_bytes, u))
            snprintf(rb + strlen(rb), sizeof rb - strlen(rb), " %s", un);
        snprintf(remat, sizeof remat,
                 ", after recomputing %d activation%s (%s) in the "
                 "backward pass",
                 m->remat_layers, m->remat_layers == 1 ? "" : "s", rb);
    }
    nofit_parts(parts, sizeof parts, m, u, un);
    /* A split that cannot help is worth saying: spatial partitioning cuts
     * activations, never weights (every core of a replica holds them all,
     * with their gradients and optimizer state), so a user sweeping
     * input_partition_dims would search in vain. */
    const char *state_only =
        m->weights_bytes + m->grads_bytes + m->opt_bytes <=
                hw->hbm.capacity_bytes
            ? ""
        : m->grads_bytes + m->opt_bytes > 0
            ? "; the weights with their gradients and optimizer state "
              "alone exceed the core's HBM, and spatial partitioning does "
              "not split weights"
            : "; the weights alone exceed the core's HBM, and spatial "
              "partitioning does not split weights";
    /* as many decimals as it takes for the need to read above the
     * capacity, never "needs 16.0 GiB ... has 16 GiB" */
    double need = m->peak_bytes / u, cap = hw->hbm.capacity_bytes / u;
    int d = 1;
    while (d < 6 && nearbyint(need * pow(10, d)) / pow(10, d) <= cap)
        d++;
    return tpu_fail(err, TPU_ERR_NOFIT,
                    "%s: needs %.*f %s of HBM per core, v%d core has %.6g "
                    "%s (%s%s; %lld example%s per replica, %d core%s per "
                    "replica%s)",
                    path, d, need, un, sys->gen, cap, un, parts, remat,
                    (long long)p->batch, p->batch == 1 ? "" : "s", p->cpr,
                    p->cpr == 1 ? "" : "s", state_only);
}

tpu_status sim_run(const graph *g, const sim_opts *o, emu_result *out,
                   tpu_error *err)
{
    memset(out, 0, sizeof *out);
    const char *path = o->trace_path ? o->trace_path : g->name;
    const tpu_system *sys;
    int64_t batch;
    tpu_params hw;
    tpu_status rc = sim_setup(g, o, &sys, &batch, &hw, err);
    if (rc)
        return rc;
    rc = fill_header(g, sys, &hw, batch, o, out, err);
    if (rc)
        goto fail;

    plan p;
    rc = plan_build(&p, g, sys, batch, err);
    if (rc)
        goto fail;
    cost_dma *dc = NULL, *own_dc = NULL;
    fw_program *progs = calloc((size_t)p.cpr, sizeof *progs);
    fw_memory *mems = calloc((size_t)p.cpr, sizeof *mems);
    if (!progs || !mems) {
        rc = tpu_fail(err, TPU_ERR_SYSTEM, "out of host memory");
        goto fail_plan;
    }
    /* one cache of DMA costs for the lowering's tile search and the
     * engine: each block size is measured on the HBM model once (per
     * caller, when it lends one made for this HBM) */
    if (cost_dma_matches(o->dma_costs, &hw))
        dc = o->dma_costs;
    else
        dc = own_dc = cost_dma_new(&hw);
    if (!dc) {
        rc = tpu_fail(err, TPU_ERR_SYSTEM, "out of host memory");
        goto fail_plan;
    }
    /* the shards of a replica lower alike: one memo of prices for all
     * (the caller's, when it lends one made for this chip data) */
    cost_memo *own_memo = NULL;
    sim_pricing sp = {&hw, dc, o->price_memo};
    if (!cost_memo_matches(sp.memo, &hw))
        sp.memo = own_memo = cost_memo_new(&hw);
    fw_pricer pricer = {price_local, &sp};
    double need = 0;
    for (int k = 0; k < p.cpr; k++) {
        rc = fw_lower(g, &p, &hw, k, &pricer, &progs[k], &mems[k], err);
        if (rc) {
            cost_memo_free(own_memo);
            goto fail_plan;
        }
        if (mems[k].remat_bytes > out->hbm_remat_bytes) {
            out->hbm_remat_bytes = mems[k].remat_bytes;
            out->hbm_remat_core = k;
        }
        if (mems[k].peak_bytes > need) {
            const fw_memory *m = &mems[k];
            need = m->peak_bytes;
            out->hbm_state_bytes =
                m->weights_bytes + m->grads_bytes + m->opt_bytes;
            out->hbm_saved_bytes = m->saved_bytes;
            out->hbm_workspace_bytes = m->workspace_bytes;
            out->hbm_need_core = k;
        }
        if (mems[k].small_batch > 0) {
            out->small_batch = mems[k].small_batch;
            out->small_batch_padded = mems[k].small_batch_padded;
        }
    }
    cost_memo_free(own_memo);
    rc = note_gconv(out, g, &progs[0], err);
    if (rc)
        goto fail_plan;
    out->hbm_needed_bytes = need;
    out->fits = need <= hw.hbm.capacity_bytes;
    if (!out->fits && !o->time_unfit) {
        const fw_memory *m = &mems[0];
        for (int k = 1; k < p.cpr; k++)
            if (mems[k].peak_bytes > m->peak_bytes)
                m = &mems[k];
        /* The cores as the plan places them, with their own need, for the
         * report of a step that does not fit (no per_core: the caller
         * makes a plain one when this allocation fails). */
        out->per_core = calloc((size_t)p.cores, sizeof *out->per_core);
        for (int core = 0; out->per_core && core < p.cores; core++) {
            emu_core_result *r = &out->per_core[core];
            r->core = core;
            r->chip = core / 2;
            r->replica = p.replica_of[core];
            r->shard = p.shard_of[core];
            r->hbm_peak_bytes = mems[r->shard].peak_bytes;
        }
        rc = nofit_fail(err, path, sys, &hw, &p, m);
        goto fail_plan;
    }

    engine_input ei = {0};
    ei.g = g;
    ei.p = &p;
    ei.hw = &hw;
    ei.progs = progs;
    ei.dma_costs = dc;
    ei.net = o->net;
    ei.net_flows = o->net_flows;
    ei.record_timeline = o->record_timeline;
    ei.no_dedup = o->no_dedup;
    ei.progress = o->progress;
    ei.progress_ctx = o->progress_ctx;
    if (o->functional) {
        rc = run_functional(g, o, &p, &hw, progs, &ei, out, err);
        if (rc)
            goto fail_plan;
    } else {
        rc = engine_run(&ei, out, err);
        if (rc)
            goto fail_plan;
    }
    double peak_macs = tpu_core_peak_flops(&hw) / 2;
    for (int c = 0; c < out->cores; c++) {
        emu_core_result *r = &out->per_core[c];
        const fw_memory *m = &mems[r->shard];
        r->hbm_peak_bytes = m->peak_bytes;
        r->mxu_utilization = r->step_time_s > 0
                                 ? m->useful_macs /
                                       (peak_macs * r->step_time_s)
                                 : 0;
        if (r->step_time_s > out->step_time_s)
            out->step_time_s = r->step_time_s;
    }
    if (!(out->step_time_s > 0)) {
        /* Only relabellings (inputs, flatten, a concat of inputs): a
         * report of a step that takes no time reads as a broken one, and
         * has no timeline to draw. */
        rc = tpu_fail(err, TPU_ERR_INPUT,
                      "%s: graph.layers: the step does no work: no layer "
                      "computes anything (inputs, flatten and concatenations "
                      "of inputs only relabel data)",
                      path);
        goto fail_plan;
    }
    for (int k = 0; k < p.cpr; k++)
        fw_program_free(&progs[k]);
    free(progs);
    free(mems);
    cost_dma_free(own_dc);
    plan_free(&p);
    return TPU_OK;

fail_plan:
    if (progs)
        for (int k = 0; k < p.cpr; k++)
            fw_program_free(&progs[k]);
    free(progs);
    free(mems);
    cost_dma_free(own_dc);
    plan_free(&p);
fail:
    if (rc != TPU_ERR_NOFIT) {
        emu_result_free(out);
        memset(out, 0, sizeof *out);
    }
    return rc;
}

tpu_status sim_lower(const graph *g, const sim_opts *o, int core,
                     fw_program *prog, fw_memory *mem, tpu_error *err)
{
    const tpu_system *sys;
    int64_t batch;
    tpu_params hw;
    tpu_status rc = sim_setup(g, o, &sys, &batch, &hw, err);
    if (rc)
        return rc;
    if (core < 0 || core >= sys->cores)
        return tpu_fail(err, TPU_ERR_INPUT, "--core %d: %s has cores 0..%d",
                        core, sys->name, sys->cores - 1);
    plan p;
    rc = plan_build(&p, g, sys, batch, err);
    if (rc)
        return rc;
    cost_dma *dc = cost_dma_new(&hw);
    if (!dc) {
        plan_free(&p);
        return tpu_fail(err, TPU_ERR_SYSTEM, "out of host memory (lowering)");
    }
    sim_pricing sp = {&hw, dc, cost_memo_new(&hw)};
    fw_pricer pricer = {price_local, &sp};
    rc = fw_lower(g, &p, &hw, p.shard_of[core], &pricer, prog, mem, err);
    cost_memo_free(sp.memo);
    if (!rc && mem->peak_bytes > hw.hbm.capacity_bytes)
        rc = nofit_fail(err, o->trace_path ? o->trace_path : g->name, sys,
                        &hw, &p, mem);
    cost_dma_free(dc);
    plan_free(&p);
    return rc;
}
