/* sim — run one step of a trace on an emulated pod slice: the whole
 * pipeline, graph -> partition plan -> firmware -> pod engine -> step
 * accounting (docs/ARCHITECTURE.md draws it). */
#ifndef EMU_SIM_H
#define EMU_SIM_H

#include <stdint.h>

#include "emu/graph.h"
#include "emu/result.h"
#include "emu/status.h"
#include "firmware/lower.h"

typedef struct {
    const char *trace_path;    /* names the trace in messages */
    const char *system;        /* NULL: the trace's */
    int64_t global_batch;      /* 0: the trace's */
    int n_sets;
    const char *const *set_keys;   /* --set KEY=VALUE overrides */
    const char *const *set_values;
    int functional;            /* compute values too (emu/fexec.h) */
    uint64_t seed;
    int steps;                 /* functional: training steps (weights carry
                                  over; timing is the same every step) */
    double learning_rate;      /* functional: momentum SGD */
    double momentum;
    const float *init_weights; /* functional: starting weights (fexec.h) */
    const char *output_layer;  /* functional: the layer whose values are
                                  reported (NULL: the last non-loss one) */
    int pe_model;              /* functional: products on the PE-level MXU
                                  model instead of the fast one (same bits) */
    int64_t n_init_weights;
    double host_mem_limit;     /* functional: refuse (TPU_ERR_INPUT) a run
                                  needing more host bytes; 0: 4 GiB */
    int record_timeline;       /* fill per-core events */
    int no_dedup;              /* simulate every core, skip no shortcut */
    /* The slice's interconnect to borrow (NULL: each run makes its own),
     * so that runs of one slice share its cache of collective results
     * (emu/range.c's variants); made with ici_new for the effective
     * system and the run's ici.* values, which the caller guarantees. */
    ici *net;
    /* Without net: an interconnect of the slice (other bandwidths and
     * latencies allowed) whose kept large all-reduces the run's own
     * interconnect borrows instead of building them (ici_borrow_flows). */
    const ici *net_flows;
    /* A cache of DMA costs to borrow (NULL: each run makes its own); used
     * only when made for the run's hbm.* values (cost_dma_matches), so
     * that runs of one HBM share their measurements: the tile search
     * prices every candidate's blocks on the HBM model. */
    struct cost_dma *dma_costs;
    /* Prices of the tile search's candidates to borrow the same way (used
     * only when made for the run's chip data, cost_memo_matches). */
    struct cost_memo *price_memo;
    int time_unfit;            /* time the step even when it does not fit
                                  (fits = 0, TPU_OK): for validation */
    /* Called now and then with the fraction done; may be NULL. */
    void (*progress)(void *ctx, double fraction);
    void *progress_ctx;
} sim_opts;

void sim_opts_default(sim_opts *o);

/* The caches a caller may lend to several runs of one trace: the
 * interconnect of the run's effective system and ici.* values (which
 * keeps its large all-reduces' flows for interconnects that differ in
 * bandwidths and latencies only: ici_borrow_flows), the DMA
 * costs of its hbm.* values and the prices of its chip data.  Each is
 * NULL when the options are invalid (sim_run says why) or memory runs
 * out. */
typedef struct {
    ici *net;
    struct cost_dma *dma;
    struct cost_memo *memo;
} sim_caches;

void sim_caches_new(const graph *g, const sim_opts *o, sim_caches *c);
/* Sets o's borrowed caches to c's (all NULL for a zeroed c). */
void sim_caches_lend(const sim_caches *c, sim_opts *o);
void sim_caches_free(sim_caches *c);

/* Simulates one step.  TPU_ERR_NOFIT (with the figures in err) when the
 * workload does not fit; the result is still filled then (fits = 0, the
 * header, and per_core with each core's placement and HBM need, no
 * timing): emu_result_free it as any other. */
tpu_status sim_run(const graph *g, const sim_opts *o, emu_result *out,
                   tpu_error *err);

/* The firmware of one core (for `tpuemu lower`).  TPU_ERR_NOFIT, with prog
 * and mem filled, when that core's step does not fit in HBM. */
tpu_status sim_lower(const graph *g, const sim_opts *o, int core,
                     fw_program *prog, fw_memory *mem, tpu_error *err);

#endif
