/* plan — the partition plan of a trace on a slice: replicas, each core's
 * shard of every tensor, and where each replica's cores sit on the torus.
 *
 * Semantics follow TPUEstimator's input_partition_dims and XLA SPMD
 * (openxla/xla xla/service/spmd/convolution_handler.cc; Xu et al.,
 * "GSPMD", arXiv 2105.04663):
 *  - cores / num_cores_per_replica replicas, each with global_batch /
 *    replicas examples; the cores of a replica split each example.
 *  - A tensor is split along a spatial dimension with factor f when
 *    plan_splittable says so (ceil-sized chunks, a trailing one short or
 *    empty); otherwise it is replicated along that dimension (each core of
 *    the group holds all of it and the work on it is duplicated).  Flat
 *    tensors (after flatten or global pooling) and tensors of another
 *    rank than the first input's are replicated.
 *  - Every input splits like the first (the trace reader refuses other
 *    lists) or, when its input_partition_dims entry is null, is
 *    replicated.  A replicated tensor stays whole through the layers that
 *    pair positions (relu, sigmoid, dropout, batchnorm, add, concat); a
 *    convolution, pooling or upsampling of it is split again, each core
 *    computing its rows from the whole input (no halo).  Where a
 *    replicated tensor meets a split one (add, concat), the output splits
 *    and each core slices its box out of the replicated operand (XLA's
 *    reshard of a replicated operand to a tiled sharding: a local
 *    dynamic-slice); the gradient back to it is all-gathered.
 *  - A layer placed on core k of its replica ("core", as
 *    tf.contrib.tpu.core(k) pins ops) is whole on that core: its tensors
 *    are not split, and the other cores of the replica skip its work.
 *  - Shard index k of a replica has coordinates in row-major order over
 *    the split spatial dimensions (the last dimension varies fastest).
 *  - Placement: each replica takes a compact bx x by block of chips (two
 *    cores per chip, shard k on chip k/2 of the block, row-major), blocks
 *    tile the torus row-major; with one core per replica, replicas are
 *    consecutive cores.  [U] Cloud TPU's device assignment is not
 *    published; a compact block keeps halo neighbours one hop apart.
 */
#ifndef EMU_PLAN_H
#define EMU_PLAN_H

#include <stdint.h>

#include "emu/graph.h"
#include "emu/params.h"

typedef struct {
    const tpu_system *sys;
    int cores, replicas, cpr;          /* cpr: cores per replica */
    int64_t batch;                     /* examples per replica */
    int nsp;                           /* spatial rank of the first input */
    int factor[GRAPH_MAX_SP];          /* split factor per spatial dim */
    int n_layers;
    uint8_t *split;                    /* n_layers x GRAPH_MAX_SP: 1 = split */
    int *core_of;                      /* replicas x cpr -> global core */
    int *replica_of, *shard_of;        /* per global core */
    int block_x, block_y;              /* chips per replica block (0: linear) */
} plan;

tpu_status plan_build(plan *p, const graph *g, const tpu_system *sys,
                      int64_t global_batch, tpu_error *err);
void plan_free(plan *p);

/* Whether graph input k's input_partition_dims entry made it replicated
 * (null, or all ones; glayer.whole). */
int plan_input_whole(const graph *g, int k);
/* The split flags of every layer for the graph's own partition factors
 * (the rules above), into split[n_layers x GRAPH_MAX_SP]. */
void plan_layer_splits(const graph *g, uint8_t *split);

/* Shard coordinates of shard k along each spatial dimension. */
void plan_coords(const plan *p, int shard, int coords[GRAPH_MAX_SP]);
/* Shard index at coordinates (-1 when outside the group). */
int plan_shard_at(const plan *p, const int coords[GRAPH_MAX_SP]);
/* The [lo, hi) slice of layer L's output along spatial dim d held by the
 * shard at coordinate c of that dimension. */
void plan_range(const plan *p, const graph *g, int layer, int d, int c,
                int64_t *lo, int64_t *hi);
/* 1 when a tensor of extent ext is split f ways (ceil-sized chunks, the
 * last ones short or empty), 0 when it stays whole on every core. */
int plan_splittable(int64_t ext, int f);

#endif
