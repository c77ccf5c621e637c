/* lower — lowering of a partitioned graph into one core's firmware.
 *
 * Convolutions become sums of shifted matrix products over VMEM-sized
 * tiles: taps are folded into K (im2col) when the input has few channels,
 * otherwise each tap is its own 128-deep K slice; M (batch x output
 * positions) is tiled so that double-buffered input and output tiles, the
 * fp32 accumulators and the weights fit in VMEM; every tile loop overlaps
 * the next tile's DMA with this tile's compute.  Elementwise layers are
 * streaming passes HBM -> VPU -> HBM.  See docs/FIRMWARE.md for every rule.
 */
#ifndef FIRMWARE_LOWER_H
#define FIRMWARE_LOWER_H

#include <stdint.h>

#include "emu/graph.h"
#include "emu/params.h"
#include "emu/plan.h"
#include "firmware/isa.h"

/* What one core keeps in HBM during the step. */
typedef struct {
    double weights_bytes;   /* fp32 master weights (replicated) */
    double grads_bytes;     /* fp32 gradients */
    double opt_bytes;       /* optimizer state (run.optimizer's slots) */
    double saved_bytes;     /* activations kept for the backward pass */
    double workspace_bytes; /* largest set of transient tensors */
    double remat_bytes;     /* activations dropped and recomputed (xla.remat) */
    int remat_layers;
    double peak_bytes;  /* the sum: what must fit in the core's HBM */
    double useful_macs; /* unpadded multiply-adds this core executes */
    /* XLA's small-batch convolution layout (xla.conv_pad), when some
     * convolution took it: the examples per core and what they are padded
     * to; 0 when none did. */
    double small_batch, small_batch_padded;
} fw_memory;

/* Prices a core-local instruction sequence for the lowering's choices
 * (tile sizes, a grouped convolution's candidates): its duration in ps
 * run alone on one core from an idle start until its last store has
 * landed, collectives stepped over.  The pipeline hands it the engine's
 * (engine_local_ps), so the compiler's cost model is the machine it
 * compiles for. */
typedef struct {
    int64_t (*price)(void *ctx, const fw_program *prog);
    void *ctx;
} fw_pricer;

/* Lowers the step for shard `shard` of a replica (all replicas run the
 * same program), asking `pricer` (not NULL) for the durations its
 * choices compare.  TPU_ERR_SYSTEM only when host memory runs out. */
tpu_status fw_lower(const graph *g, const plan *p, const tpu_params *hw,
                    int shard, const fw_pricer *pricer, fw_program *out,
                    fw_memory *mem, tpu_error *err);

#endif
