/* A synthetic result shaped like a ResNet-style training step, built in
 * memory so the viewer can be developed and screenshotted without the
 * engine.  Nothing here is a model of the hardware: the
 * durations are made up, only the structure (critical path, unit events,
 * halo and all-reduce traffic, link busy times) follows emu/result.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/params.h"
#include "firmware/isa.h"
#include "emu/view/layout.h"

typedef struct {
    emu_event *ev;
    size_t n, cap;
    double t;
    double cat[CAT_COUNT];
} builder;

static int push(builder *b, emu_event e)
{
    if (b->n == b->cap) {
        size_t nc = b->cap ? 2 * b->cap : 256;
        emu_event *p = realloc(b->ev, nc * sizeof *p);
        if (!p)
            return 0;
        b->ev = p;
        b->cap = nc;
    }
    b->ev[b->n++] = e;
    return 1;
}

/* One span on the critical path, with its unit events. */
static int span(builder *b, int cat, int phase, int layer, double dur,
                int unit, int pieces, double bytes, double flops)
{
    if (!(dur > 0))
        return 1;
    /* The opcode a span of this category would end on, as the engine
     * records it; critical-path spans carry no bytes or FLOPs. */
    static const uint8_t cat_op[CAT_COUNT] = {FW_MATMUL, FW_VEC, FW_WAIT_LD,
                                              FW_HALO, FW_ALLREDUCE, FW_BARRIER};
    static const uint8_t unit_op[UNIT_COUNT] = {0, FW_MATMUL, FW_VEC, FW_DMA_LD, FW_HALO};
    emu_event e = {b->t, b->t + dur, UNIT_CORE, (uint8_t)cat, (uint8_t)phase,
                   cat_op[cat], layer, (uint32_t)(pieces > 0 ? pieces : 1), 0, 0};
    int ok = push(b, e);
    for (int i = 0; ok && unit != UNIT_CORE && i < pieces; i++) {
        emu_event u = e;
        u.unit = (uint8_t)unit;
        u.opcode = unit == UNIT_ICI && cat == CAT_ALLREDUCE ? FW_ALLREDUCE : unit_op[unit];
        u.t0 = b->t + dur * i / pieces;
        u.t1 = b->t + dur * (i + 1) / pieces;
        u.count = 16;
        u.bytes = bytes / pieces;
        u.flops = flops / pieces;
        ok = push(b, u);
    }
    b->cat[cat] += dur;
    b->t += dur;
    return ok;
}

static double rnd(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) / 9007199254740992.0;
}

int view_demo_build(emu_result *r, int cores)
{
    const tpu_system *sys = tpu_system_find(cores >= 2048 ? "v3-2048" : "v3-64");
    if (!sys)
        return 0;
    memset(r, 0, sizeof *r);
    int big = sys->cores >= 2048;
    snprintf(r->trace, sizeof r->trace, "%s",
             big ? "demo-resnet50-224 (synthetic)" : "demo-retinanet-2560 (synthetic)");
    snprintf(r->system, sizeof r->system, "%s", sys->name);
    r->gen = 3;
    r->cores = sys->cores;
    r->chips = sys->cores / 2;
    r->dim_x = sys->dim_x;
    r->dim_y = sys->dim_y;
    r->cores_per_replica = big ? 1 : 8;
    r->replicas = r->cores / r->cores_per_replica;
    r->global_batch = big ? 32768 : 64;
    r->train = 1;
    r->fits = 1;
    r->hbm_capacity_bytes = 16.0 * (1 << 30);
    r->hbm_needed_bytes = 9.5e9;

    /* Layer names in ResNet's style: conv1, res2a_branch2a, ... */
    int stages = 4, blocks = big ? 2 : 3, nl = 2 + stages * blocks * 3;
    r->n_layers = nl;
    r->layer_names = calloc((size_t)nl, sizeof *r->layer_names);
    double *base = calloc((size_t)nl, sizeof(double));
    r->per_core = calloc((size_t)r->cores, sizeof *r->per_core);
    r->link_busy_s = calloc((size_t)r->chips * 4, sizeof(double));
    if (!r->layer_names || !base || !r->per_core || !r->link_busy_s) {
        free(base);
        emu_result_free(r);
        return 0;
    }
    uint64_t seed = 42;
    int l = 0;
    snprintf(r->layer_names[l], 64, "conv1");
    base[l++] = 0.012;
    for (int s = 0; s < stages; s++)
        for (int bl = 0; bl < blocks; bl++)
            for (int br = 0; br < 3; br++) {
                snprintf(r->layer_names[l], 64, "res%d%c_branch2%c", s + 2,
                         'a' + bl, 'a' + br);
                base[l++] = (br == 1 ? 0.010 : 0.005) * (0.7 + 0.6 * rnd(&seed));
            }
    snprintf(r->layer_names[l], 64, "%s", big ? "fc1000" : "class_net");
    base[l++] = 0.004;

    double slowest = 0;
    int tiles = big ? 1 : 4;
    for (int c = 0; c < r->cores; c++) {
        emu_core_result *pc = &r->per_core[c];
        pc->core = c;
        pc->chip = c / 2;
        pc->replica = c / r->cores_per_replica;
        pc->shard = c % r->cores_per_replica;
        int x = pc->chip % r->dim_x, y = pc->chip / r->dim_x;
        /* Spatial shards in the middle of a [1,4,2,1] split exchange halos
         * with two neighbours, the edge shards with one; in the big demo a
         * few chips sit on slower hosts and stall more on HBM. */
        int row = pc->shard / 2;
        double halo_k = big ? 0 : (row == 0 || row == 3) ? 1 : 2;
        double stall_k = big ? ((x * 7 + y * 3) % 11 == 0 ? 2.5 : 1) : 1;
        builder b = {0};
        int ok = 1;
        for (int ph = PHASE_FWD; ph <= PHASE_BWD && ok; ph++)
            for (int k = 0; k < nl && ok; k++) {
                int li = ph == PHASE_FWD ? k : nl - 1 - k;
                double m = base[li] * (ph == PHASE_BWD ? 2 : 1);
                if (halo_k > 0 && li < nl - 1)
                    ok &= span(&b, CAT_HALO, ph, li, 0.0004 * halo_k, UNIT_ICI,
                               1, 2e6 * halo_k, 0);
                ok &= span(&b, CAT_MXU, ph, li, m, UNIT_MXU, tiles, 0,
                           m * 2.2e13);
                if (li % 3 == 0)
                    ok &= span(&b, CAT_HBM_STALL, ph, li, 0.0006 * stall_k,
                               UNIT_DMA, 1, 3e8 * 0.0006 * stall_k, 0);
                ok &= span(&b, CAT_VECTOR, ph, li, m * 0.18, UNIT_VPU, 1, 0,
                           m * 1e12);
            }
        ok &= span(&b, CAT_ALLREDUCE, PHASE_UPDATE, -1, big ? 0.030 : 0.018,
                   UNIT_ICI, 8, 1e8, 0);
        ok &= span(&b, CAT_VECTOR, PHASE_UPDATE, -1, 0.004, UNIT_VPU, 1, 0, 1e9);
        /* DMA prefetch overlapping each MXU span (hidden, not stalled). */
        size_t n0 = b.n;
        for (size_t i = 0; i < n0 && ok; i++)
            if (b.ev[i].unit == UNIT_CORE && b.ev[i].cat == CAT_MXU) {
                emu_event d = b.ev[i];
                d.unit = UNIT_DMA;
                d.t1 = d.t0 + 0.7 * (d.t1 - d.t0);
                d.bytes = 1e8 * (d.t1 - d.t0) * 450;
                d.flops = 0;
                ok &= push(&b, d);
            }
        if (!ok) {
            free(b.ev);
            free(base);
            emu_result_free(r);
            return 0;
        }
        pc->events = b.ev;
        pc->n_events = b.n;
        pc->step_time_s = b.t;
        memcpy(pc->breakdown_s, b.cat, sizeof b.cat);
        slowest = fmax(slowest, b.t);
    }
    for (int c = 0; c < r->cores; c++) {
        emu_core_result *pc = &r->per_core[c];
        double idle = slowest - pc->step_time_s;
        if (idle > 1e-12) {
            emu_event e = {pc->step_time_s, slowest, UNIT_CORE, CAT_IDLE,
                           PHASE_UPDATE, 0, -1, 1, 0, 0};
            emu_event *p = realloc(pc->events, (pc->n_events + 1) * sizeof *p);
            if (p) {
                pc->events = p;
                pc->events[pc->n_events++] = e;
                pc->breakdown_s[CAT_IDLE] = idle;
            }
        }
        pc->step_time_s = slowest;
        pc->mxu_utilization = pc->breakdown_s[CAT_MXU] / slowest * 0.55;
        pc->flops = pc->breakdown_s[CAT_MXU] * 2.2e13;
        pc->hbm_peak_bytes = 9.5e9;
        r->flops_per_step += pc->flops;
    }
    /* Link busy: the 2D-ring all-reduce loads x links more than y links;
     * halo exchange loads the y links inside each partition group. */
    double ar = big ? 0.030 : 0.018;
    for (int ch = 0; ch < r->chips; ch++) {
        int x = ch % r->dim_x, y = ch / r->dim_x;
        double *lb = &r->link_busy_s[ch * 4];
        int wrap = sys->full_pod;
        lb[0] = (x + 1 < r->dim_x || wrap) ? ar * 0.85 : 0;
        lb[1] = (x > 0 || wrap) ? ar * 0.80 : 0;
        lb[2] = (y + 1 < r->dim_y || wrap) ? ar * 0.45 : 0;
        lb[3] = (y > 0 || wrap) ? ar * 0.40 : 0;
        if (!big) {
            double halo = 0.0004 * 2 * nl * 2;
            if (y % 2 == 0 && y + 1 < r->dim_y)
                lb[2] += halo;
            if (y % 2 == 1)
                lb[3] += halo;
        }
    }
    r->step_time_s = slowest;
    free(base);
    return 1;
}
