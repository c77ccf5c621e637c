/* engine — the pod engine: executes every core's firmware on the unit
 * models (MXU, vector unit, DMA/HBM, ICI) and accounts each core's time.
 *
 * Time is integer picoseconds, so that skipping work is exact:
 *  - Replicas run identical programs on translated chip blocks, so only
 *    replica 0's cores are executed; the others copy its timing.  (All
 *    replicas' flows still go through the ICI model together, so link
 *    contention between replicas is modelled, not assumed away.)
 *  - A tile loop whose state relative to the core's clock (HBM pipe,
 *    in-flight DMAs) repeats from one iteration to the next will repeat
 *    forever: its remaining iterations are added in one step.
 * Unit durations are pure functions of an instruction's operands (DMA
 * costs come from the HBM model in steady state, see engine.c), so both
 * shortcuts give exactly what full execution gives; `no_dedup` turns both
 * off and test_engine checks the equality.
 *
 * Accounting (docs/SPEC.md): the core's clock only moves forward on its
 * critical path, and every advance is charged to one category: a matrix
 * instruction to mxu (its overlapped vector epilogue only where it is
 * longer), a vector pass to vector, a DMA wait or a full DMA queue to
 * hbm_stall, the wait for the slowest group member before a collective to
 * idle and the collective itself to halo or allreduce.
 */
#ifndef EMU_ENGINE_H
#define EMU_ENGINE_H

#include "emu/cost.h"
#include "emu/graph.h"
#include "emu/params.h"
#include "emu/fx/fexec.h"
#include "emu/plan.h"
#include "emu/result.h"
#include "firmware/isa.h"

typedef struct {
    const graph *g;
    const plan *p;
    const tpu_params *hw;
    const fw_program *progs;   /* one per shard of a replica (p->cpr) */
    int record_timeline;
    int no_dedup;
    /* --functional: the values executor (NULL: timing only); needs
     * no_dedup, since every core's values differ. */
    fx_state *fx;
    /* DMA block costs to share with the lowering (NULL: the engine
     * measures its own; either way the same numbers). */
    cost_dma *dma_costs;
    /* The slice's interconnect to borrow (NULL: the engine makes its own):
     * its cache of collective results is reused.  It must have been made
     * for this slice with these ici.* values. */
    ici *net;
    /* Without net, an interconnect of this slice whose kept flows the
     * engine's own may borrow (ici_borrow_flows: only where the torus and
     * wrap-around links are the same; the same doubles either way). */
    const ici *net_flows;
    void (*progress)(void *ctx, double fraction);
    void *progress_ctx;
} engine_input;

/* Runs the step and fills out->per_core (cores entries, allocated),
 * out->link_busy_s and out->layer_time_s. */
tpu_status engine_run(const engine_input *in, emu_result *out, tpu_error *err);

/* Duration (ps) of a core-local instruction sequence (DMAs, matrix and
 * vector instructions, loops; collectives are stepped over) run alone on
 * one core from an idle start, until its last store has landed: what the
 * lowering's tile search asks.  Same unit costs and rules as engine_run;
 * `dc` must not be NULL. */
int64_t engine_local_ps(const tpu_params *hw, cost_dma *dc,
                        const fw_program *prog);

#endif
