/* result — what one simulated step produced: per-core step time and its
 * exclusive breakdown, memory and traffic counters, and (optionally) the
 * recorded timeline that the Chrome trace, the PNG chart and the viewer
 * draw.  Front ends read results through this header only.
 */
#ifndef EMU_RESULT_H
#define EMU_RESULT_H

#include <stddef.h>
#include <stdint.h>

#include "emu/graph.h" /* GRAPH_FREEZE_MAX */

/* The report's exclusive categories, in report order (docs/SPEC.md). */
typedef enum {
    CAT_MXU,        /* critical path in matrix work */
    CAT_VECTOR,     /* vector unit work */
    CAT_HBM_STALL,  /* waiting on HBM transfers not hidden by compute */
    CAT_HALO,       /* waiting on spatial-partition halo exchange */
    CAT_ALLREDUCE,  /* waiting on gradient / partial-sum all-reduce */
    CAT_IDLE,       /* waiting on other cores */
    CAT_COUNT
} emu_cat;

/* The units a core's timeline is drawn in. */
typedef enum {
    UNIT_CORE,  /* the critical path: one event per category span */
    UNIT_MXU,
    UNIT_VPU,
    UNIT_DMA,
    UNIT_ICI,
    UNIT_COUNT
} emu_unit;

typedef enum { PHASE_FWD, PHASE_BWD, PHASE_UPDATE, PHASE_COUNT } emu_phase;

const char *emu_cat_name(emu_cat c);    /* "mxu", "hbm_stall", ... */
const char *emu_unit_name(emu_unit u);  /* "core", "mxu", ... */
const char *emu_phase_name(emu_phase p);

/* One span on one unit.  Consecutive identical instructions of a loop may
 * be merged into one event (count > 1). */
typedef struct {
    double t0, t1;      /* seconds from the start of the step */
    uint8_t unit;       /* emu_unit */
    uint8_t cat;        /* emu_cat */
    uint8_t phase;      /* emu_phase */
    uint8_t opcode;     /* firmware opcode (fw_op) */
    int32_t layer;      /* index into emu_result.layer_names, -1: none */
    uint32_t count;     /* instructions merged into this event */
    double bytes;       /* bytes moved (DMA, ICI) */
    double flops;       /* FLOPs done (MXU, VPU) */
} emu_event;

typedef struct {
    int core, chip;
    int replica;        /* data-parallel replica this core belongs to */
    int shard;          /* index within its partition group */
    double step_time_s;
    double breakdown_s[CAT_COUNT]; /* exclusive; sums to step_time_s */
    double mxu_utilization;        /* useful MACs / (peak MACs x step time) */
    double hbm_peak_bytes;
    double hbm_read_bytes, hbm_write_bytes;
    double ici_bytes_sent;
    double flops;                  /* FLOPs this core executed */
    emu_event *events;             /* NULL unless the timeline was recorded */
    size_t n_events;
} emu_core_result;

typedef struct {
    char key[64];
    char value[64];
} emu_override;

/* One unconfirmed assumption of a step's range (emu/range.h): the step
 * with that key at the low and at the high end of its plausible range. */
typedef struct {
    char key[64];
    double low_s, high_s;
} emu_range_item;

typedef struct {
    char trace[128];
    char system[32];
    int gen;
    int chips, cores, dim_x, dim_y;
    int64_t global_batch;
    int cores_per_replica, replicas;
    int train;
    int fits;
    double hbm_needed_bytes;       /* the largest core's peak */
    /* XLA's small-batch convolution layout (fw_memory): examples per core
     * and their padded count, 0 when no convolution took it. */
    double small_batch, small_batch_padded;
    double hbm_remat_bytes;        /* activations recomputed in the
                                      backward pass to fit (xla.remat) by
                                      the core that recomputes most */
    int hbm_remat_core;            /* that core's index in its replica */
    /* What the largest core's need is made of (fw_memory): its weights,
     * gradients and optimizer state, the activations it keeps for the
     * backward pass, and the largest layer's workspace. */
    double hbm_state_bytes, hbm_saved_bytes, hbm_workspace_bytes;
    int hbm_need_core;             /* that core's index in its replica */
    double hbm_capacity_bytes;
    double step_time_s;            /* the slowest core's */
    double flops_per_step;         /* all cores, useful work */
    double core_peak_flops;        /* bf16 peak of one core, FLOP/s */
    double core_hbm_bps;           /* one core's HBM peak bandwidth, B/s */
    int n_overrides;
    emu_override *overrides;
    /* The step's range over the unconfirmed assumptions (emu/range.h;
     * the report's step_time_range_s and range_assumptions): has_range 0
     * when it was not computed. */
    int has_range;
    double range_low_s, range_high_s;
    int n_range;
    emu_range_item *range; /* n_range entries (owned) */
    /* The --freeze list the graph was given (graph_freeze), "" without
     * one; the report's optional "freeze". */
    char freeze[GRAPH_FREEZE_MAX];
    /* run.optimizer (graph_optimizer); the report's optional "optimizer",
     * written when not momentum. */
    int optimizer;
    /* The first input's split when --partition set it, the report's
     * optional "input_partition_dims"; rank 0 when the trace's stands. */
    int pdims_rank, pdims[GRAPH_MAX_PDIMS];
    emu_core_result *per_core;     /* cores entries */
    /* ICI link busy time: chips x 4 (dirs +x, -x, +y, -y), seconds. */
    double *link_busy_s;
    /* Names of the graph's layers, for event labels (n_layers entries). */
    int n_layers;
    char (*layer_names)[64];
    /* Per-layer critical-path time of core 0, by category (n_layers x CAT_COUNT). */
    double *layer_time_s;
    /* Per layer, how core 0's grouped convolution lowered each part
     * (forward, input gradient, weight gradient): fw_gconv values,
     * FW_GC_NONE for a part it lacks or a layer that is not grouped; NULL
     * when no layer is grouped or a report read back lacks it). */
    uint8_t (*layer_gconv)[3];
    /* --functional */
    int has_values;
    uint64_t output_checksum;      /* FNV-1a 64 over `output`'s fp32 bits */
    double loss;                   /* mean over the global batch (train) */
    /* The last non-loss layer's output in the global layout
     * [global_batch, spatial..., channels], row-major (owned). */
    float *output;
    int output_layer;              /* index into layer_names */
    int output_rank;
    int64_t output_shape[5];
    /* Weight gradients after the all-reduce, before the update: every
     * trainable layer's kernel ([taps][cin][cout]) then bias, in layer order
     * (shared weights once), as core 0 holds them (owned; train only). */
    float *grads;
    int64_t n_grads;
    /* The loss of every functional step (n_losses = --steps; owned). */
    double *losses;
    int n_losses;
} emu_result;

void emu_result_free(emu_result *r);

#endif
