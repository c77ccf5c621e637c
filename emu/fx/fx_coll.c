/* fx_coll: the collectives of a --functional run (fx_internal.h): halo
 * exchanges and all-gathers build each core's windows from its
 * neighbours' values; all-reduces sum partial statistics, losses and
 * weight gradients across a partition group. */
#include <stdlib.h>
#include <string.h>

#include "emu/fx/fx_internal.h"

#define SP GRAPH_MAX_SP

static int group_core(const fx_state *x, int core, int shard)
{
    return x->p->core_of[x->p->replica_of[core] * x->p->cpr + shard];
}

/* The tensor a window chain starts from: the core's own shard of the
 * input (forward, weight gradient) or of the output gradient. */
static tpu_status chain_base(fx_state *x, int core, int l, int grad,
                             const fxt_tens **out, tpu_error *err)
{
    if (grad) {
        fxt_tens *g = NULL;
        tpu_status rc = fx_dy_of(x, core, l, &g, err);
        *out = g;
        return rc;
    }
    return fx_act_of(x, core, x->g->layers[l].in[0], out, err);
}

/* Copies every element of dst's box from whichever source holds it
 * (the first in srcs' order): a position's channels are one run, and runs
 * that follow on in both boxes are copied as one. */
static tpu_status fill_from(fx_state *x, int core, int l, fxt_tens *dst,
                            const fxt_tens *const *srcs, int nsrc,
                            tpu_error *err)
{
    int64_t npos = fxt_npos(dst), C = dst->C;
    float *run_d = NULL;
    const float *run_s = NULL;
    int64_t run_n = 0;
    for (int64_t b = 0; b < dst->B; b++)
        for (int64_t pos = 0; pos < npos; pos++) {
            int64_t loc[SP], g[SP], sl[SP];
            fxt_global(dst, pos, loc, g);
            int found = -1;
            for (int s = 0; s < nsrc && found < 0; s++) {
                int inside = srcs[s] != NULL;
                for (int d = 0; d < SP && inside; d++)
                    inside = g[d] >= srcs[s]->lo[d] &&
                             g[d] < srcs[s]->lo[d] + srcs[s]->ext[d];
                if (inside)
                    found = s;
            }
            if (found < 0) {
                if (run_n)
                    memcpy(run_d, run_s, sizeof(float) * (size_t)run_n);
                return fx_missing(err, x, core, l, "exchange", 1);
            }
            const fxt_tens *src = srcs[found];
            int miss = 0;
            float *d = &dst->v[fxt_at(dst, b, loc, 0)];
            if (fxt_locate(src, g, sl, &miss) <= 0)
                continue; /* padding: reads 0, and dst is zeroed */
            const float *sp = &src->v[fxt_at(src, b, sl, 0)];
            if (run_n && d == run_d + run_n && sp == run_s + run_n) {
                run_n += C;
                continue;
            }
            if (run_n)
                memcpy(run_d, run_s, sizeof(float) * (size_t)run_n);
            run_d = d;
            run_s = sp;
            run_n = C;
        }
    if (run_n)
        memcpy(run_d, run_s, sizeof(float) * (size_t)run_n);
    return TPU_OK;
}

/* Every core's new window replaces its old one (after all were built
 * from the old ones: an exchange reads the neighbours' previous state). */
static void install_windows(fx_state *x, const fw_insn *const *ins, int l,
                            int grad, fxt_tens *next)
{
    for (int k = 0; k < x->p->cores; k++) {
        fx_core *c = &x->cs[k];
        fxt_tens *w = grad ? &c->gwin[l] : &c->win[l];
        fxt_free(w);
        *w = next[k];
        next[k].v = NULL;
        (grad ? c->have_gwin : c->have_win)[l] = (uint8_t)ins[k]->fx;
    }
}

static void free_windows(fxt_tens *next, int n)
{
    if (next)
        for (int k = 0; k < n; k++)
            fxt_free(&next[k]);
    free(next);
}

/* One halo step along dim d for every core: the new window is the old one
 * grown by the rows its instruction names, taken from the neighbours' old
 * windows. */
static tpu_status coll_halo(fx_state *x, const fw_insn *const *ins,
                            tpu_error *err)
{
    int ncores = x->p->cores;
    int l = ins[0]->layer, grad = ins[0]->fx == FX_DX;
    int d = (int)ins[0]->a;
    fxt_tens *next = calloc((size_t)ncores, sizeof *next);
    const fxt_tens **cur = calloc((size_t)ncores, sizeof *cur);
    tpu_status rc = TPU_OK;
    if (!next || !cur) {
        rc = fx_oom(err);
        goto done;
    }
    for (int k = 0; k < ncores; k++) {
        fx_core *c = &x->cs[k];
        /* A chain restarts at its first exchange of the step (the weight
         * gradient's exchange re-sends the forward's halos). */
        uint8_t *have = grad ? c->have_gwin : c->have_win;
        fxt_tens *w = grad ? &c->gwin[l] : &c->win[l];
        uint8_t tag = (uint8_t)(ins[k]->fx);
        if (have[l] == tag)
            cur[k] = w;
        else if ((rc = chain_base(x, k, l, grad, &cur[k], err)))
            goto done;
    }
    for (int k = 0; k < ncores; k++) {
        const fw_insn *in = ins[k];
        int64_t rl = fw_halo_rows_lo(in), rh = fw_halo_rows_hi(in);
        fxt_copy_shape(&next[k], cur[k]);
        next[k].lo[d] -= rl;
        next[k].ext[d] += rl + rh;
        if ((rc = fxt_alloc(&next[k], err)))
            goto done;
        int co[SP] = {0};
        plan_coords(x->p, x->p->shard_of[k], co);
        const fxt_tens *srcs[3] = {cur[k], NULL, NULL};
        for (int side = 0; side < 2; side++) {
            int nc[SP];
            memcpy(nc, co, sizeof nc);
            nc[d] += side ? 1 : -1;
            int nb = plan_shard_at(x->p, nc);
            if (nb >= 0)
                srcs[1 + side] = cur[group_core(x, k, nb)];
        }
        if ((rc = fill_from(x, k, l, &next[k], srcs, 3, err)))
            goto done;
    }
    install_windows(x, ins, l, grad, next);
done:
    free_windows(next, ncores);
    free(cur);
    return rc;
}

/* All-gather: each core's window becomes the whole tensor, assembled from
 * its partition group's shards. */
static tpu_status coll_gather(fx_state *x, const fw_insn *const *ins,
                              tpu_error *err)
{
    int ncores = x->p->cores, cpr = x->p->cpr;
    int l = ins[0]->layer, grad = ins[0]->fx == FX_DX;
    const fxt_tens **base = calloc((size_t)ncores, sizeof *base);
    const fxt_tens **srcs = calloc((size_t)cpr, sizeof *srcs);
    fxt_tens *next = calloc((size_t)ncores, sizeof *next);
    tpu_status rc = TPU_OK;
    if (!base || !srcs || !next) {
        rc = fx_oom(err);
        goto done;
    }
    for (int k = 0; k < ncores; k++)
        if ((rc = chain_base(x, k, l, grad, &base[k], err)))
            goto done;
    for (int k = 0; k < ncores; k++) {
        fxt_copy_shape(&next[k], base[k]);
        for (int d = 0; d < SP; d++) {
            next[k].lo[d] = 0;
            next[k].ext[d] = next[k].gext[d];
        }
        if ((rc = fxt_alloc(&next[k], err)))
            goto done;
        for (int s = 0; s < cpr; s++)
            srcs[s] = base[group_core(x, k, s)];
        if ((rc = fill_from(x, k, l, &next[k], srcs, cpr, err)))
            goto done;
    }
    install_windows(x, ins, l, grad, next);
done:
    free_windows(next, ncores);
    free(srcs);
    free(base);
    return rc;
}

/* Sums n floats per core over each partition group's contributing cores
 * (shard order) and gives every member the total.  get returns the
 * core's array (NULL: none). */
typedef float *(*part_fn)(fx_state *x, int core, int l);

static float *part_bn_fwd(fx_state *x, int core, int l)
{
    return x->cs[core].bn[l];
}
static float *part_bn_bwd(fx_state *x, int core, int l)
{
    return x->cs[core].bn[l] + 4 * x->g->layers[l].out.c;
}
static float *part_gap(fx_state *x, int core, int l)
{
    return x->cs[core].act[l].v;
}

/* Sums every core's part over its group: `reps` consecutive replicas (1:
 * the replica's partition group; run.batchnorm_group for a distributed
 * batchnorm), and hands the sum back to each. */
static tpu_status group_sum(fx_state *x, int l, int contrib_layer, part_fn get,
                            int64_t n, int reps, tpu_error *err)
{
    int cpr = x->p->cpr, gsz = cpr * reps;
    float *tot = calloc((size_t)n + 1, sizeof(float));
    if (!tot)
        return fx_oom(err);
    for (int r0 = 0; r0 < x->p->replicas; r0 += reps) {
        memset(tot, 0, (size_t)n * sizeof(float));
        for (int s = 0; s < gsz; s++) {
            int k = x->p->core_of[r0 * cpr + s];
            const float *p = get(x, k, l);
            if (p && fx_contributes(x, k, contrib_layer))
                for (int64_t i = 0; i < n; i++)
                    tot[i] += p[i];
        }
        for (int s = 0; s < gsz; s++) {
            float *p = get(x, x->p->core_of[r0 * cpr + s], l);
            if (p)
                memcpy(p, tot, (size_t)n * sizeof(float));
        }
    }
    free(tot);
    return TPU_OK;
}

static tpu_status coll_allreduce(fx_state *x, const fw_insn *const *ins,
                                 tpu_error *err)
{
    const fw_insn *in = ins[0];
    int l = in->layer;
    if (in->b == FW_GROUP_ALL)
        return fx_reduce_grads(x, err);
    if (l < 0)
        return TPU_OK;
    const glayer *L = &x->g->layers[l];
    int64_t C = L->out.c;
    int reps = in->b == FW_GROUP_BN && x->g->bn_group > 1 ? x->g->bn_group : 1;
    switch (L->op) {
    case GOP_BATCHNORM:
        if (in->phase == PHASE_FWD) {
            for (int k = 0; k < x->p->cores; k++) {
                const fxt_tens *t;
                tpu_status rc = fx_act_of(x, k, L->in[0], &t, err);
                if (rc)
                    return rc;
                fxv_bn_local_stats(t, x->cs[k].bn[l], x->cs[k].bn[l] + C);
                x->cs[k].stats_reduced[l] = 1;
            }
            return group_sum(x, l, l, part_bn_fwd, 2 * C, reps, err);
        }
        return group_sum(x, l, l, part_bn_bwd, 2 * C, reps, err);
    case GOP_GAP: {
        tpu_status rc =
            group_sum(x, l, L->in[0], part_gap, x->p->batch * C, 1, err);
        for (int k = 0; k < x->p->cores && !rc; k++) {
            fxt_tens *t = &x->cs[k].act[l];
            for (int64_t i = 0; i < fxt_elems(t); i++)
                t->v[i] = fxt_round(t->v[i], L->dtype_bytes);
        }
        return rc;
    }
    case GOP_ELEMWISE:
        return fxo_ew_reduce(x, l, err);
    case GOP_GROUPNORM:
    case GOP_GMAXPOOL:
        return fxo_reduce(x, l, in->phase != PHASE_FWD, err);
    case GOP_LOSS: {
        /* the dice sums; the partial losses are added at the end */
        int cpr = x->p->cpr;
        for (int r = 0; r < x->p->replicas; r++)
            for (int kk = 0; kk < L->n_in; kk++) {
                double tot[3] = {0, 0, 0};
                for (int s = 0; s < cpr; s++) {
                    int k = x->p->core_of[r * cpr + s];
                    const double *p =
                        &x->cs[k].dice[(l * GRAPH_MAX_IN + kk) * 3];
                    if (fx_contributes(x, k, L->in[kk]))
                        for (int i = 0; i < 3; i++)
                            tot[i] += p[i];
                }
                for (int s = 0; s < cpr; s++)
                    memcpy(&x->cs[x->p->core_of[r * cpr + s]]
                                .dice[(l * GRAPH_MAX_IN + kk) * 3],
                           tot, sizeof tot);
            }
        return TPU_OK;
    }
    default:
        return TPU_OK;
    }
}

tpu_status fx_collective(fx_state *x, const fw_insn *const *ins, tpu_error *err)
{
    int l = ins[0]->layer;
    if (l >= 0 && x->g->layers[l].op == GOP_ROI_ALIGN &&
        ins[0]->op == FW_ALLGATHER)
        return fxr_collective(x, ins, err);
    switch ((fw_op)ins[0]->op) {
    case FW_HALO:
        return coll_halo(x, ins, err);
    case FW_ALLGATHER:
        return coll_gather(x, ins, err);
    case FW_ALLREDUCE:
        return coll_allreduce(x, ins, err);
    default:
        return TPU_OK;
    }
}
