#include "emu/plan.h"

#include <stdlib.h>
#include <string.h>

int plan_splittable(int64_t ext, int f)
{
    if (f <= 1)
        return 0;
    /* TPUEstimator splits a dimension XLA-style into ceil-sized chunks and
     * leaves the last shards short or empty (tpu_feed.py,
     * partition_or_replicate_on_host: 100 rows 16 ways are 14 x 7, 2 and
     * 0); XLA pads each shard to the chunk.  One row stays replicated:
     * a single shard would hold it all. */
    return ext >= 2;
}

void plan_coords(const plan *p, int shard, int coords[GRAPH_MAX_SP])
{
    for (int d = GRAPH_MAX_SP - 1; d >= 0; d--) {
        int f = d < p->nsp ? p->factor[d] : 1;
        coords[d] = shard % f;
        shard /= f;
    }
}

int plan_shard_at(const plan *p, const int coords[GRAPH_MAX_SP])
{
    int k = 0;
    for (int d = 0; d < GRAPH_MAX_SP; d++) {
        int f = d < p->nsp ? p->factor[d] : 1;
        if (coords[d] < 0 || coords[d] >= f)
            return -1;
        k = k * f + coords[d];
    }
    return k;
}

void plan_range(const plan *p, const graph *g, int layer, int d, int c,
                int64_t *lo, int64_t *hi)
{
    const gshape *s = &g->layers[layer].out;
    int64_t ext = d < s->nsp ? s->sp[d] : 1;
    if (d >= s->nsp || !p->split[layer * GRAPH_MAX_SP + d]) {
        *lo = 0;
        *hi = ext;
        return;
    }
    int f = p->factor[d];
    int64_t chunk = (ext + f - 1) / f;
    *lo = chunk * c < ext ? chunk * c : ext; /* a trailing shard may be empty */
    *hi = *lo + chunk < ext ? *lo + chunk : ext;
}

/* Chooses a bx x by chip block per replica that tiles the torus. */
static void choose_block(plan *p)
{
    int chips = p->cpr / 2, best = -1;
    p->block_x = p->block_y = 0;
    if (p->cpr < 2 || p->cpr % 2)
        return;
    for (int bx = 1; bx <= chips; bx++) {
        if (chips % bx)
            continue;
        int by = chips / bx;
        if (p->sys->dim_x % bx || p->sys->dim_y % by || bx < by)
            continue;
        int score = bx - by; /* squarest block first */
        if (best < 0 || score < best) {
            best = score;
            p->block_x = bx;
            p->block_y = by;
        }
    }
}

int plan_input_whole(const graph *g, int k)
{
    if (k < 0 || k >= g->n_inputs)
        return 0;
    return g->layers[k].whole;
}

/* The first input's spatial rank and its factors (1 past it). */
static int graph_factors(const graph *g, int factor[GRAPH_MAX_SP])
{
    int nsp = 0;
    for (int i = 0; i < g->n_layers; i++)
        if (g->layers[i].op == GOP_INPUT) {
            nsp = g->layers[i].out.nsp;
            break;
        }
    for (int d = 0; d < GRAPH_MAX_SP; d++)
        factor[d] = 1;
    if (g->pdims_rank == nsp + 2)
        for (int d = 0; d < nsp; d++)
            factor[d] = g->pdims[1 + d];
    return nsp;
}

/* Layers that pair their inputs' elements with the output's position by
 * position, in the same box on every core (the lowering streams them, the
 * functional executor indexes them alike): they can only be split where
 * their inputs are. */
static int positionwise(graph_op op)
{
    return op == GOP_ADD || op == GOP_CONCAT || op == GOP_RELU ||
           op == GOP_SIGMOID || op == GOP_DROPOUT || op == GOP_BATCHNORM;
}

void plan_layer_splits(const graph *g, uint8_t *split)
{
    int factor[GRAPH_MAX_SP];
    int nsp = graph_factors(g, factor);
    memset(split, 0, (size_t)g->n_layers * GRAPH_MAX_SP);
    for (int l = 0; l < g->n_layers; l++) {
        const glayer *L = &g->layers[l];
        const gshape *s = &L->out;
        if (s->nsp != nsp || graph_core(L) >= 0 || L->op == GOP_FLATTEN)
            continue; /* flat (a per-ROI flatten too), another input's
                         rank, or placed on one core ("core"): whole */
        for (int d = 0; d < nsp; d++) {
            uint8_t *f = &split[l * GRAPH_MAX_SP + d];
            *f = (uint8_t)plan_splittable(s->sp[d], factor[d]);
            if (L->op == GOP_INPUT && plan_input_whole(g, l))
                *f = 0;
            if (!positionwise(L->op) || !*f)
                continue;
            /* A replicated tensor stays whole through such layers; a
             * convolution, pooling or upsampling (which read by position
             * and so take their rows from a whole input) splits it again.
             * Where a whole and a split input meet (add, concat) the
             * output splits: each core slices its box out of the whole
             * operand locally, as XLA reshards a replicated operand to a
             * tiled one (a pad, when uneven, and a dynamic-slice; no
             * communication: openxla/xla spmd_partitioner.cc,
             * PartitionedHlo::ReshardNoCache). */
            int part = 0;
            for (int k = 0; k < L->n_in; k++) {
                int i = L->in[k];
                if (g->layers[i].out.nsp == nsp && split[i * GRAPH_MAX_SP + d])
                    part = 1;
            }
            *f = (uint8_t)part;
        }
    }
}

tpu_status plan_build(plan *p, const graph *g, const tpu_system *sys,
                      int64_t global_batch, tpu_error *err)
{
    memset(p, 0, sizeof *p);
    p->sys = sys;
    p->cores = sys->cores;
    p->cpr = g->cores_per_replica > 0 ? g->cores_per_replica : 1;
    p->replicas = p->cores / p->cpr;
    p->batch = global_batch / p->replicas;
    p->n_layers = g->n_layers;
    p->nsp = graph_factors(g, p->factor);

    p->split = calloc((size_t)g->n_layers * GRAPH_MAX_SP + 1, 1);
    p->core_of = calloc((size_t)p->cores, sizeof(int));
    p->replica_of = calloc((size_t)p->cores, sizeof(int));
    p->shard_of = calloc((size_t)p->cores, sizeof(int));
    if (!p->split || !p->core_of || !p->replica_of || !p->shard_of) {
        plan_free(p);
        return tpu_fail(err, TPU_ERR_SYSTEM, "out of host memory (plan)");
    }
    plan_layer_splits(g, p->split);

    choose_block(p);
    for (int r = 0; r < p->replicas; r++)
        for (int k = 0; k < p->cpr; k++) {
            int core;
            if (p->block_x) {
                int bpr = sys->dim_x / p->block_x; /* blocks per row */
                int bx0 = (r % bpr) * p->block_x;
                int by0 = (r / bpr) * p->block_y;
                int chip_in = k / 2;
                int cx = bx0 + chip_in % p->block_x;
                int cy = by0 + chip_in / p->block_x;
                core = (cy * sys->dim_x + cx) * 2 + k % 2;
            } else {
                core = r * p->cpr + k;
            }
            p->core_of[r * p->cpr + k] = core;
            p->replica_of[core] = r;
            p->shard_of[core] = k;
        }
    return TPU_OK;
}

void plan_free(plan *p)
{
    free(p->split);
    free(p->core_of);
    free(p->replica_of);
    free(p->shard_of);
    memset(p, 0, sizeof *p);
}
