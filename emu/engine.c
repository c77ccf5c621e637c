#include "emu/engine.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "emu/cost.h"
#include "hbm/dma.h"
#include "interconnect/ici.h"

#define PS COST_PS
#define QMAX 64
#define ENGINE_TIMELINE_COPY_CORES 512

/* ---- unit costs: emu/cost.c ------------------------------------------- */

/* ---- per-core state ----------------------------------------------------- */

typedef struct {
    int64_t busy;      /* ps */
    double bytes, flops;
    uint32_t count;
    int cat, op;       /* of the last event */
} unit_tally;

typedef struct {
    int64_t now;
    int64_t cat[CAT_COUNT];
    int64_t pipe_free;            /* the HBM pipe: DMAs serialize on it */
    int64_t mxu_end;              /* when the last product's MXU work ended
                                     (-1: none yet): a product of the same
                                     kernel issued at that instant streams
                                     behind it */
    int64_t mxu_key;              /* that product's kernel (mxu_kernel) */
    int64_t kern_key;             /* the kernel of the last matrix or vector
                                     instruction (xla.kernel_overhead_ns
                                     is paid when it changes) */
    int64_t ld[QMAX], st[QMAX];   /* completion times, issue order */
    int nld, nst;
    size_t pc;
    int64_t loop_left;            /* iterations still to run */
    size_t loop_pc;               /* first instruction of the body */
    /* Relative state after the last two iterations ([0] the last): a
     * loop whose state repeats every iteration, or every second one (a
     * product that streams behind its predecessor every other iteration
     * and waits on HBM in between), is extrapolated (end_iteration). */
    int64_t it_rel[2][2 * QMAX + 4];
    int it_rel_n[2], have_rel[2];
    /* The core's counters at the start of the last two iterations. */
    struct it_snap {
        int64_t now, cat[CAT_COUNT];
        double rd, wr, fl;
        /* Per unit, what add_event recorded so far (merged or not): a
         * unit's event that began before the iteration and was extended
         * by it still counts its share. */
        unit_tally ut[UNIT_COUNT];
    } it_start[2];
    unit_tally ut[UNIT_COUNT];
    double rd, wr, flops;
    int done;
    emu_event *ev;
    size_t nev, capev;
    int oom;
} core_t;

typedef struct {
    const engine_input *in;
    const tpu_params *hw;
    int ncores_sim;               /* cores executed */
    int *sim_core;                /* executed index -> global core */
    int *sim_shard;
    core_t *cs;
    cost_dma *dc;
    cost_dma *own_dc;             /* when the caller gave none */
    ici *net;
    double *link_busy;            /* chips x 4 */
    double *bytes_sent;           /* per global core */
    int64_t *layer_ps;            /* n_layers x CAT_COUNT (executed core 0:
                                     replica 0, shard 0), in integer ps so
                                     that the sums do not depend on how
                                     loops were stepped (--no-dedup and
                                     --functional step every iteration) */
    int max_dma;
    tpu_status fx_rc;             /* first failure of the functional values */
    tpu_error fx_err;
} eng;

static void add_event(eng *e, core_t *c, emu_unit unit, emu_cat cat,
                      const fw_insn *in, int64_t t0, int64_t t1, double bytes,
                      double flops)
{
    if (!e->in->record_timeline || c->oom || t1 <= t0)
        return;
    int layer = in ? in->layer : -1;
    int phase = in ? in->phase : 0;
    int op = in ? in->op : 0;
    unit_tally *u = &c->ut[unit];
    u->busy += t1 - t0;
    u->bytes += bytes;
    u->flops += flops;
    u->count++;
    u->cat = cat;
    u->op = op;
    /* Merge with the unit's last event when it continues it. */
    for (size_t i = c->nev; i > 0 && i + 8 > c->nev; i--) {
        emu_event *p = &c->ev[i - 1];
        if (p->unit != unit)
            continue;
        if (p->cat == cat && p->layer == layer && p->opcode == op &&
            p->phase == phase && fabs((double)t0 / PS - p->t1) < 1e-12) {
            p->t1 = (double)t1 / PS;
            p->count++;
            p->bytes += bytes;
            p->flops += flops;
            return;
        }
        break;
    }
    if (c->nev == c->capev) {
        size_t cap = c->capev ? c->capev * 2 : 1024;
        emu_event *ne = realloc(c->ev, cap * sizeof *ne);
        if (!ne) {
            c->oom = 1;
            return;
        }
        c->ev = ne;
        c->capev = cap;
    }
    emu_event *v = &c->ev[c->nev++];
    v->t0 = (double)t0 / PS;
    v->t1 = (double)t1 / PS;
    v->unit = (uint8_t)unit;
    v->cat = (uint8_t)cat;
    v->phase = (uint8_t)phase;
    v->opcode = (uint8_t)op;
    v->layer = layer;
    v->count = 1;
    v->bytes = bytes;
    v->flops = flops;
}

/* Moves core c's clock to t, charging category cat. */
static void advance(eng *e, int ci, int64_t t, emu_cat cat, const fw_insn *in)
{
    core_t *c = &e->cs[ci];
    if (t <= c->now)
        return;
    add_event(e, c, UNIT_CORE, cat, in, c->now, t, 0, 0);
    c->cat[cat] += t - c->now;
    if (ci == 0 && e->layer_ps && in && in->layer >= 0)
        e->layer_ps[(size_t)in->layer * CAT_COUNT + cat] += t - c->now;
    c->now = t;
}

static void retire(core_t *c)
{
    int k = 0;
    while (k < c->nld && c->ld[k] <= c->now)
        k++;
    if (k) {
        memmove(c->ld, c->ld + k, (size_t)(c->nld - k) * sizeof c->ld[0]);
        c->nld -= k;
    }
    k = 0;
    while (k < c->nst && c->st[k] <= c->now)
        k++;
    if (k) {
        memmove(c->st, c->st + k, (size_t)(c->nst - k) * sizeof c->st[0]);
        c->nst -= k;
    }
}

static void eng_dma_issue(eng *e, int ci, const fw_insn *in, int write)
{
    core_t *c = &e->cs[ci];
    retire(c);
    /* A full queue stalls the issue until the oldest transfer is done. */
    while (c->nld + c->nst >= e->max_dma) {
        int64_t oldest = INT64_MAX;
        if (c->nld)
            oldest = c->ld[0];
        if (c->nst && c->st[0] < oldest)
            oldest = c->st[0];
        advance(e, ci, oldest, CAT_HBM_STALL, in);
        retire(c);
    }
    int64_t dur = cost_dma_ps(e->dc, in->a, write);
    int64_t start = c->pipe_free > c->now ? c->pipe_free : c->now;
    int64_t end = start + dur;
    c->pipe_free = end;
    if (write) {
        c->st[c->nst++] = end;
        c->wr += (double)in->a;
    } else {
        c->ld[c->nld++] = end;
        c->rd += (double)in->a;
    }
    add_event(e, c, UNIT_DMA, CAT_HBM_STALL, in, start, end, (double)in->a, 0);
}

static void eng_dma_wait(eng *e, int ci, const fw_insn *in, int stores)
{
    core_t *c = &e->cs[ci];
    int64_t *q = stores ? c->st : c->ld;
    int n = stores ? c->nst : c->nld;
    int64_t keep = in->a;
    if (n > keep)
        advance(e, ci, q[n - keep - 1], CAT_HBM_STALL, in);
    retire(c);
}

/* Relative state of a core: what must repeat for a loop to be skipped. */
static int rel_state(const core_t *c, int64_t *out)
{
    int n = 0;
    out[n++] = c->pipe_free > c->now ? c->pipe_free - c->now : 0;
    out[n++] = c->mxu_end == c->now;
    out[n++] = c->nld;
    out[n++] = c->nst;
    for (int i = 0; i < c->nld; i++)
        out[n++] = c->ld[i] - c->now;
    for (int i = 0; i < c->nst; i++)
        out[n++] = c->st[i] - c->now;
    return n;
}

static void mark_iteration(eng *e, core_t *c)
{
    (void)e;
    c->it_start[1] = c->it_start[0];
    struct it_snap *s = &c->it_start[0];
    s->now = c->now;
    memcpy(s->cat, c->cat, sizeof c->cat);
    s->rd = c->rd;
    s->wr = c->wr;
    s->fl = c->flops;
    memcpy(s->ut, c->ut, sizeof c->ut);
}

/* Appends the timeline of r skipped periods starting at t (ps), span ps
 * long, summarizing the events of the last period, which began at *from. */
static void skipped_events(eng *e, core_t *c, const fw_insn *loop, int64_t r,
                           int64_t t, int64_t span, const int64_t *dcat,
                           const struct it_snap *from)
{
    int64_t at = t;
    for (int k = 0; k < CAT_COUNT; k++) {
        int64_t dk = dcat[k] * r;
        if (dk > 0) {
            fw_insn x = *loop;
            x.op = FW_LOOP;
            size_t before = c->nev;
            add_event(e, c, UNIT_CORE, (emu_cat)k, &x, at, at + dk, 0, 0);
            if (c->nev > before) /* the iterations it stands for */
                c->ev[c->nev - 1].count = (uint32_t)(r < UINT32_MAX ? r : UINT32_MAX);
            at += dk;
        }
    }
    for (int u = UNIT_MXU; u < UNIT_COUNT; u++) {
        const unit_tally *now = &c->ut[u], *then = &from->ut[u];
        int64_t busy = now->busy - then->busy;
        uint32_t n = now->count - then->count;
        if (busy <= 0)
            continue;
        fw_insn x = *loop;
        x.op = (uint8_t)now->op;
        int64_t len = busy * r;
        if (len > span)
            len = span;
        size_t before = c->nev;
        add_event(e, c, (emu_unit)u, (emu_cat)now->cat, &x, t, t + len,
                  (now->bytes - then->bytes) * (double)r,
                  (now->flops - then->flops) * (double)r);
        if (c->nev > before)
            c->ev[c->nev - 1].count = n * (uint32_t)r;
    }
}

static int same_rel(const core_t *c, int h, const int64_t *rel, int n)
{
    return c->have_rel[h] && n == c->it_rel_n[h] &&
           memcmp(rel, c->it_rel[h], (size_t)n * sizeof rel[0]) == 0;
}

/* Advances core ci over r more periods of the loop like the last one,
 * which began at *from: every counter and pending completion moves by r
 * times the period's change. */
static void skip_periods(eng *e, int ci, const fw_insn *loop, int64_t r,
                         const struct it_snap *from)
{
    core_t *c = &e->cs[ci];
    int64_t dnow = c->now - from->now;
    int64_t dcat[CAT_COUNT];
    for (int k = 0; k < CAT_COUNT; k++) {
        int64_t dk = c->cat[k] - from->cat[k];
        dcat[k] = dk;
        c->cat[k] += r * dk;
        if (ci == 0 && e->layer_ps && loop->layer >= 0)
            e->layer_ps[(size_t)loop->layer * CAT_COUNT + k] += r * dk;
    }
    c->rd += (double)r * (c->rd - from->rd);
    c->wr += (double)r * (c->wr - from->wr);
    c->flops += (double)r * (c->flops - from->fl);
    /* Timeline: the skipped iterations as one span per category on the
     * critical path and one per unit (their busy time summed), so events
     * never overlap and the totals stay exact. */
    if (e->in->record_timeline && r > 0)
        skipped_events(e, c, loop, r, c->now, r * dnow, dcat, from);
    c->now += r * dnow;
    if (c->pipe_free > 0)
        c->pipe_free += r * dnow;
    if (c->mxu_end >= 0)
        c->mxu_end += r * dnow;
    for (int i = 0; i < c->nld; i++)
        c->ld[i] += r * dnow;
    for (int i = 0; i < c->nst; i++)
        c->st[i] += r * dnow;
}

/* At the end of one loop iteration: when the relative state repeats the
 * previous iteration's, all remaining iterations are this one again;
 * when it repeats the one before (a period of two iterations), the
 * remaining pairs are the last pair again and an odd one runs as usual.
 * Exact either way: a period's state at its end is its state at its
 * start, and the next period starts from it. */
static void end_iteration(eng *e, int ci, const fw_insn *loop)
{
    core_t *c = &e->cs[ci];
    int64_t rel[2 * QMAX + 4];
    retire(c);
    int n = rel_state(c, rel);
    if (!e->in->no_dedup && c->loop_left > 0) {
        if (same_rel(c, 0, rel, n)) {
            skip_periods(e, ci, loop, c->loop_left, &c->it_start[0]);
            c->loop_left = 0;
        } else if (c->loop_left >= 2 && same_rel(c, 1, rel, n)) {
            int64_t pairs = c->loop_left / 2;
            skip_periods(e, ci, loop, pairs, &c->it_start[1]);
            c->loop_left -= 2 * pairs;
        }
    }
    memcpy(c->it_rel[1], c->it_rel[0], sizeof c->it_rel[0]);
    c->it_rel_n[1] = c->it_rel_n[0];
    c->have_rel[1] = c->have_rel[0];
    memcpy(c->it_rel[0], rel, (size_t)n * sizeof rel[0]);
    c->it_rel_n[0] = n;
    c->have_rel[0] = 1;
}

static int is_collective(int op)
{
    return op == FW_HALO || op == FW_ALLREDUCE || op == FW_ALLGATHER ||
           op == FW_BARRIER;
}

/* The kernel a matrix instruction belongs to: its layer's product of one
 * kind (forward, input or weight gradient, a K part's) in one phase. */
static int64_t mxu_kernel(const fw_insn *in)
{
    /* a product of no layer (-1: the tile search's candidates) is a
     * kernel too: multiplied, not shifted (a negative left shift is
     * undefined) */
    return ((int64_t)in->layer * 256 + in->fx) * 256 + in->phase;
}

/* A matrix or vector instruction of another kernel than the core's last
 * one starts that kernel: its fixed cost (xla.kernel_overhead_ns) is the
 * instruction's unit's time. */
static void kernel_start(eng *e, int ci, const fw_insn *in, emu_cat cat)
{
    core_t *c = &e->cs[ci];
    int64_t key = mxu_kernel(in);
    if (key == c->kern_key)
        return;
    c->kern_key = key;
    int64_t ov = (int64_t)llround(e->hw->kernel_overhead_ns * 1e3);
    if (ov > 0)
        advance(e, ci, c->now + ov, cat, in);
}

/* Runs core ci until it reaches a collective or its end. */
static void run_core(eng *e, int ci)
{
    core_t *c = &e->cs[ci];
    const fw_program *prog = &e->in->progs[e->sim_shard[ci]];
    const tpu_params *hw = e->hw;
    while (c->pc < prog->n) {
        const fw_insn *in = &prog->code[c->pc];
        switch ((fw_op)in->op) {
        case FW_DMA_LD:
            eng_dma_issue(e, ci, in, 0);
            break;
        case FW_DMA_ST:
            eng_dma_issue(e, ci, in, 1);
            break;
        case FW_WAIT_LD:
            eng_dma_wait(e, ci, in, 0);
            break;
        case FW_WAIT_ST:
            eng_dma_wait(e, ci, in, 1);
            break;
        case FW_MATMUL: {
            int64_t m, v;
            if (e->in->fx && !e->fx_rc)
                e->fx_rc = fx_exec(e->in->fx, e->sim_core[ci], in, &e->fx_err);
            /* Back to back within one kernel (nothing stalled the core
             * since its previous product ended): the array never drains
             * between them, as between the tiles of one product
             * (docs/MXU.md: a load, fill and drain on every product would
             * make a 256x256 array slower than 128x128 on a 128-channel
             * layer).  Between kernels (another
             * layer, or another of its products) the array drains. */
            kernel_start(e, ci, in, CAT_MXU);
            int64_t key = mxu_kernel(in);
            cost_matmul_ps(hw, in, c->mxu_end == c->now && c->mxu_key == key,
                           &m, &v);
            int64_t t0 = c->now;
            c->mxu_end = t0 + m;
            c->mxu_key = key;
            double fl = 2.0 * (double)in->a * (double)in->b * (double)in->c;
            add_event(e, c, UNIT_MXU, CAT_MXU, in, t0, t0 + m, 0, fl);
            advance(e, ci, t0 + m, CAT_MXU, in);
            if (v > m) {
                add_event(e, c, UNIT_VPU, CAT_VECTOR, in, t0, t0 + v, 0, 0);
                advance(e, ci, t0 + v, CAT_VECTOR, in);
            }
            c->flops += fl;
            break;
        }
        case FW_VEC: {
            kernel_start(e, ci, in, CAT_VECTOR);
            int64_t v = cost_vec_ps(hw, in);
            if (e->in->fx && !e->fx_rc)
                e->fx_rc = fx_exec(e->in->fx, e->sim_core[ci], in, &e->fx_err);
            add_event(e, c, UNIT_VPU, CAT_VECTOR, in, c->now, c->now + v, 0,
                      (double)in->a * (double)in->b / 100.0);
            advance(e, ci, c->now + v, CAT_VECTOR, in);
            break;
        }
        case FW_LOOP:
            c->loop_left = in->a;
            c->loop_pc = c->pc + 1;
            c->have_rel[0] = c->have_rel[1] = 0;
            c->loop_left--;
            mark_iteration(e, c);
            break;
        case FW_ENDLOOP: {
            const fw_insn *loop = &prog->code[c->loop_pc - 1];
            end_iteration(e, ci, loop);
            if (c->loop_left > 0) {
                c->loop_left--;
                mark_iteration(e, c);
                c->pc = c->loop_pc;
                continue;
            }
            break;
        }
        default:
            if (is_collective(in->op)) {
                /* Collectives start after this core's stores have landed. */
                if (c->nst)
                    advance(e, ci, c->st[c->nst - 1], CAT_HBM_STALL, in);
                retire(c);
                return; /* blocked: the scheduler takes over */
            }
            break;
        }
        c->pc++;
    }
    c->done = 1;
}

/* ---- collectives ------------------------------------------------------- */

static void net_stats(eng *e)
{
    const tpu_system *s = e->in->p->sys;
    int chips = s->dim_x * s->dim_y;
    for (int ch = 0; ch < chips; ch++)
        for (int d = 0; d < 4; d++)
            e->link_busy[ch * 4 + d] += ici_link_busy_s(e->net, ch, d);
    for (int k = 0; k < s->cores; k++)
        e->bytes_sent[k] += ici_core_bytes_sent(e->net, k);
    ici_reset(e->net);
}

/* Duration of a halo exchange: the flows of every replica at once; -1
 * when the host is out of memory, here or in the interconnect model (a
 * zero would be a wrong figure). */
static int64_t halo_ps(eng *e, int dim)
{
    const plan *p = e->in->p;
    int nf = 0;
    ici_flow *f = malloc(sizeof *f * (size_t)p->cores * 2 + 1);
    if (!f)
        return -1;
    /* Each executed core's instruction names what it receives; replicas
     * mirror replica 0. */
    for (int ci = 0; ci < e->ncores_sim; ci++) {
        int shard = e->sim_shard[ci];
        int gcore = e->sim_core[ci];
        int rep = p->replica_of[gcore];
        const fw_insn *in = &e->in->progs[shard].code[e->cs[ci].pc];
        int co[GRAPH_MAX_SP];
        for (int side = 0; side < 2; side++) {
            int64_t bytes = side ? in->c : in->b;
            if (bytes <= 0)
                continue;
            plan_coords(p, shard, co);
            co[dim] += side ? 1 : -1;
            int nb = plan_shard_at(p, co);
            if (nb < 0)
                continue;
            int reps_lo = e->in->no_dedup ? rep : 0;
            int reps_hi = e->in->no_dedup ? rep + 1 : p->replicas;
            for (int r = reps_lo; r < reps_hi; r++) {
                f[nf].src_core = p->core_of[r * p->cpr + nb];
                f[nf].dst_core = p->core_of[r * p->cpr + shard];
                f[nf].bytes = (double)bytes;
                nf++;
            }
        }
    }
    double t = nf ? ici_permute(e->net, f, nf, 0.0) : 0.0;
    free(f);
    if (t < 0)
        return -1;
    net_stats(e);
    return (int64_t)llround(t * PS);
}

/* Duration of an all-reduce (or all-gather) of bytes per core over each
 * replica's group or all cores; -1 when the host is out of memory, here or
 * in the interconnect model. */
static int64_t group_allreduce_ps(eng *e, int64_t bytes, int group_all,
                                  int gather)
{
    const plan *p = e->in->p;
    double t = 0;
    int bng = e->in->g->bn_group;
    if (group_all == FW_GROUP_BN && bng > 1) {
        /* run.batchnorm_group consecutive replicas each, all groups at
         * once (core_of lists replicas in order). */
        t = ici_allreduce_groups(e->net, p->core_of, p->cpr * bng,
                                 p->replicas / bng, (double)bytes, 0.0);
        if (t < 0)
            return -1;
        net_stats(e);
    } else if (group_all) {
        int *cores = malloc(sizeof(int) * (size_t)p->cores);
        if (!cores)
            return -1;
        for (int k = 0; k < p->cores; k++)
            cores[k] = k;
        t = ici_allreduce(e->net, cores, p->cores, (double)bytes, 0.0);
        free(cores);
        if (t < 0)
            return -1;
        net_stats(e);
    } else if (p->cpr > 1) {
        /* Every replica's group at once, competing for links where their
         * rings meet. */
        t = ici_allreduce_groups(e->net, p->core_of, p->cpr, p->replicas,
                                 (double)bytes, 0.0);
        if (t < 0)
            return -1;
        net_stats(e);
    }
    /* An all-gather is the second half of a ring all-reduce. */
    if (gather)
        t /= 2;
    return (int64_t)llround(t * PS);
}

/* All executed cores are blocked at the same collective: run it. */
static tpu_status run_collective(eng *e, tpu_error *err)
{
    const plan *p = e->in->p;
    const fw_insn *in0 = &e->in->progs[e->sim_shard[0]].code[e->cs[0].pc];
    for (int ci = 1; ci < e->ncores_sim; ci++) {
        const fw_insn *x = &e->in->progs[e->sim_shard[ci]].code[e->cs[ci].pc];
        if (x->op != in0->op || x->layer != in0->layer)
            return tpu_fail(err, TPU_ERR_SYSTEM,
                            "internal: cores reached different collectives "
                            "(%s vs %s, layer %d)", fw_op_name((fw_op)in0->op),
                            fw_op_name((fw_op)x->op), (int)x->layer);
    }
    if (e->in->fx && !e->fx_rc) {
        /* Values move with the collective; all cores execute (no dedup). */
        const fw_insn **ins = calloc((size_t)p->cores, sizeof *ins);
        if (!ins)
            return tpu_fail(err, TPU_ERR_SYSTEM, "out of host memory");
        for (int ci = 0; ci < e->ncores_sim; ci++)
            ins[e->sim_core[ci]] =
                &e->in->progs[e->sim_shard[ci]].code[e->cs[ci].pc];
        e->fx_rc = fx_collective(e->in->fx, ins, &e->fx_err);
        free(ins);
    }
    int group_all = in0->op == FW_BARRIER ||
                    (in0->op == FW_ALLREDUCE && in0->b == FW_GROUP_ALL);
    /* A distributed batchnorm's group spans replicas: its members start
     * together, as a whole slice's do (replicas run one program). */
    int group_bn = in0->op == FW_ALLREDUCE && in0->b == FW_GROUP_BN;
    int64_t dur = 0;
    emu_cat cat = CAT_IDLE;
    switch ((fw_op)in0->op) {
    case FW_HALO:
        dur = halo_ps(e, (int)in0->a);
        cat = CAT_HALO;
        break;
    case FW_ALLGATHER:
        dur = group_allreduce_ps(e, in0->a, 0, 1);
        cat = CAT_HALO;
        break;
    case FW_ALLREDUCE:
        dur = group_allreduce_ps(e, in0->a,
                                 group_bn ? FW_GROUP_BN : group_all, 0);
        cat = CAT_ALLREDUCE;
        break;
    default:
        break;
    }
    if (dur < 0)
        return tpu_fail(err, TPU_ERR_SYSTEM,
                        "out of host memory (interconnect)");
    if (cat != CAT_IDLE)
        dur += (int64_t)llround(e->hw->collective_overhead_ns * 1e3);
    /* Start: when the group's last member arrives.  Executed cores form
     * whole replicas, so the group of a core is its replica (or all). */
    int64_t *st = malloc(sizeof(int64_t) * (size_t)e->ncores_sim);
    if (!st)
        return tpu_fail(err, TPU_ERR_SYSTEM, "out of host memory");
    for (int ci = 0; ci < e->ncores_sim; ci++) {
        int rep = p->replica_of[e->sim_core[ci]];
        int64_t start = 0;
        for (int cj = 0; cj < e->ncores_sim; cj++)
            if (group_all || group_bn ||
                p->replica_of[e->sim_core[cj]] == rep)
                if (e->cs[cj].now > start)
                    start = e->cs[cj].now;
        st[ci] = start;
    }
    for (int ci = 0; ci < e->ncores_sim; ci++) {
        core_t *c = &e->cs[ci];
        const fw_insn *in = &e->in->progs[e->sim_shard[ci]].code[c->pc];
        advance(e, ci, st[ci], CAT_IDLE, in);
        add_event(e, c, UNIT_ICI, cat, in, st[ci], st[ci] + dur, 0, 0);
        advance(e, ci, st[ci] + dur, cat, in);
        c->pc++;
    }
    free(st);
    return TPU_OK;
}

int64_t engine_local_ps(const tpu_params *hw, cost_dma *dc,
                        const fw_program *prog)
{
    engine_input in = {0};
    in.hw = hw;
    in.progs = prog;
    in.dma_costs = dc;
    core_t core;
    memset(&core, 0, sizeof core);
    core.mxu_end = -1;
    core.kern_key = INT64_MIN;
    int zero = 0;
    eng e = {0};
    e.in = &in;
    e.hw = hw;
    e.max_dma = DMA_MAX_INFLIGHT < QMAX ? DMA_MAX_INFLIGHT : QMAX;
    e.ncores_sim = 1;
    e.sim_core = &zero;
    e.sim_shard = &zero;
    e.cs = &core;
    e.dc = dc;
    while (!core.done) {
        run_core(&e, 0);
        if (!core.done) /* a collective: not local work, step over it */
            core.pc++;
    }
    /* its stores landed: the next sequence starts by waiting for them */
    int64_t end = core.now;
    for (int i = 0; i < core.nst; i++)
        if (core.st[i] > end)
            end = core.st[i];
    return end;
}

tpu_status engine_run(const engine_input *in, emu_result *out, tpu_error *err)
{
    const plan *p = in->p;
    eng e = {0};
    tpu_status rc = TPU_OK;
    e.in = in;
    e.hw = in->hw;
    e.max_dma = DMA_MAX_INFLIGHT < QMAX ? DMA_MAX_INFLIGHT : QMAX;
    e.ncores_sim = in->no_dedup ? p->cores : p->cpr;
    int chips = p->sys->dim_x * p->sys->dim_y;
    e.sim_core = calloc((size_t)e.ncores_sim, sizeof(int));
    e.sim_shard = calloc((size_t)e.ncores_sim, sizeof(int));
    e.cs = calloc((size_t)e.ncores_sim, sizeof(core_t));
    e.link_busy = calloc((size_t)chips * 4, sizeof(double));
    e.bytes_sent = calloc((size_t)p->cores, sizeof(double));
    e.layer_ps = calloc((size_t)in->g->n_layers * CAT_COUNT + 1,
                        sizeof(int64_t));
    e.dc = in->dma_costs;
    if (!e.dc)
        e.dc = e.own_dc = cost_dma_new(in->hw);
    e.net = in->net ? in->net
                    : ici_new(&in->hw->ici, p->sys->dim_x, p->sys->dim_y,
                              p->sys->full_pod);
    if (e.net && !in->net)
        ici_borrow_flows(e.net, in->net_flows);
    if (!e.sim_core || !e.sim_shard || !e.cs || !e.link_busy ||
        !e.bytes_sent || !e.layer_ps || !e.dc) {
        rc = tpu_fail(err, TPU_ERR_SYSTEM, "out of host memory (engine)");
        goto done;
    }
    /* the system's dimensions and ici.* are validated: NULL is memory */
    if (!e.net) {
        rc = tpu_fail(err, TPU_ERR_SYSTEM,
                      "out of host memory (interconnect)");
        goto done;
    }
    for (int ci = 0; ci < e.ncores_sim; ci++) {
        int rep = in->no_dedup ? ci / p->cpr : 0;
        int k = in->no_dedup ? ci % p->cpr : ci;
        e.sim_core[ci] = p->core_of[rep * p->cpr + k];
        e.sim_shard[ci] = k;
        e.cs[ci].mxu_end = -1;
        e.cs[ci].kern_key = INT64_MIN;
    }
    size_t total_insns = in->progs[0].n ? in->progs[0].n : 1;
    for (;;) {
        int all_done = 1, any_done = 0;
        for (int ci = 0; ci < e.ncores_sim; ci++) {
            run_core(&e, ci);
            all_done &= e.cs[ci].done;
            any_done |= e.cs[ci].done;
        }
        if (all_done)
            break;
        if (any_done) {
            rc = tpu_fail(err, TPU_ERR_SYSTEM,
                          "internal: a core ended while others wait at a "
                          "collective");
            goto done;
        }
        rc = run_collective(&e, err);
        if (rc)
            goto done;
        if (in->progress)
            in->progress(in->progress_ctx,
                         (double)e.cs[0].pc / (double)total_insns);
    }
    if (e.fx_rc) {
        *err = e.fx_err;
        rc = e.fx_rc;
        goto done;
    }
    for (int ci = 0; ci < e.ncores_sim; ci++)
        if (e.cs[ci].oom) {
            rc = tpu_fail(err, TPU_ERR_SYSTEM, "out of host memory (timeline)");
            goto done;
        }

    /* Results: executed cores, and the replicas that mirror them. */
    out->per_core = calloc((size_t)p->cores, sizeof(emu_core_result));
    if (!out->per_core) {
        rc = tpu_fail(err, TPU_ERR_SYSTEM, "out of host memory (results)");
        goto done;
    }
    for (int core = 0; core < p->cores; core++) {
        int rep = p->replica_of[core], shard = p->shard_of[core];
        int ci = in->no_dedup ? rep * p->cpr + shard : shard;
        core_t *c = &e.cs[ci];
        emu_core_result *r = &out->per_core[core];
        r->core = core;
        r->chip = core / 2;
        r->replica = rep;
        r->shard = shard;
        r->step_time_s = (double)c->now / PS;
        for (int k = 0; k < CAT_COUNT; k++)
            r->breakdown_s[k] = (double)c->cat[k] / PS;
        r->hbm_read_bytes = c->rd;
        r->hbm_write_bytes = c->wr;
        r->flops = c->flops;
        r->ici_bytes_sent = e.bytes_sent[core];
        /* Mirrored replicas get a copy of their twin's timeline, up to
         * ENGINE_TIMELINE_COPY_CORES cores (beyond, memory would grow with
         * the pod: their events are left out and their figures stay). */
        int copy = in->no_dedup || rep == 0 ||
                   p->cores <= ENGINE_TIMELINE_COPY_CORES;
        if (in->record_timeline && c->nev && copy) {
            r->events = malloc(c->nev * sizeof *r->events);
            if (!r->events) {
                rc = tpu_fail(err, TPU_ERR_SYSTEM,
                              "out of host memory (timeline)");
                goto done;
            }
            memcpy(r->events, c->ev, c->nev * sizeof *r->events);
            r->n_events = c->nev;
        }
    }
    out->link_busy_s = e.link_busy;
    e.link_busy = NULL;
    size_t nlt = (size_t)in->g->n_layers * CAT_COUNT + 1;
    out->layer_time_s = malloc(nlt * sizeof(double));
    if (!out->layer_time_s) {
        rc = tpu_fail(err, TPU_ERR_SYSTEM, "out of host memory (engine)");
        goto done;
    }
    for (size_t i = 0; i < nlt; i++)
        out->layer_time_s[i] = (double)e.layer_ps[i] / PS;
done:
    if (e.cs)
        for (int ci = 0; ci < e.ncores_sim; ci++)
            free(e.cs[ci].ev);
    free(e.cs);
    free(e.sim_core);
    free(e.sim_shard);
    free(e.link_busy);
    free(e.bytes_sent);
    free(e.layer_ps);
    cost_dma_free(e.own_dc);
    if (e.net && e.net != in->net)
        ici_free(e.net);
    return rc;
}
