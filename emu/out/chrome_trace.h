/* chrome_trace — a result's recorded timeline in the Trace Event Format
 * (the JSON that Perfetto and chrome://tracing open).
 *
 * Layout: one process per chip (pid = chip index), one thread per core and
 * unit (tid = core * UNIT_COUNT + unit): the core's critical path (named
 * by category, so the colours group categories), then MXU, vector, DMA and
 * ICI (named by layer, category in "cat").  Complete events on one thread
 * must nest, and a unit's events can overlap (DMAs in flight together):
 * an event that would overlap its unit's earlier one goes to an overflow
 * lane of that unit, tid CHROME_LANE_TID0 + (core * UNIT_COUNT + unit) *
 * CHROME_LANES + lane (chrome_trace_tid decodes either form).  Every event
 * is a complete ("X") event, times in microseconds from the start of the
 * step, with args layer, phase, opcode (the listing's mnemonic,
 * "ici.allreduce"), count and (when non-zero) bytes and flops.
 *
 * Size cap (so a v3-2048 trace still loads): when the result holds more
 * events than the budget, these steps apply in order until it fits:
 *   1. merge adjacent events of the same unit with the same category,
 *      layer, phase and opcode (gap under 1 ns): counts, bytes and FLOPs
 *      add up;
 *   2. cores whose timelines are identical form a group: the first core
 *      of each group keeps every unit, the others keep their critical
 *      path only (their thread name says which core has the detail);
 *   3. those reduced cores' critical paths also merge adjacent spans of the
 *      same category across layers;
 *   4. the reduced cores' critical paths are cut into equal time bins (the
 *      budget left after the representatives, shared equally, at least
 *      one bin), each one event named by its dominant category with the
 *      exact seconds of every category inside the bin in args;
 *   5. when the representatives alone exceed the budget: each reduced
 *      core keeps one bin, and the representatives' threads share the
 *      rest: the largest share L such that the threads fit when each
 *      with more than L merged events is cut into L equal time bins (one
 *      event per non-empty bin, from its first start to its last end
 *      inside the bin, so a thread still nests; critical-path bins as in
 *      4, unit bins named by the layer of the longest run of events, with
 *      each category's seconds, count, bytes and FLOPs in args).
 * Every core always keeps a critical path covering its whole step; what
 * was reduced is written in the trace's "otherData".  The budget holds
 * down to one event per kept thread (every core's critical path and each
 * representative's units); below that it is exceeded, "over_budget",
 * rather than a core dropped.
 */
#ifndef EMU_CHROME_TRACE_H
#define EMU_CHROME_TRACE_H

#include <stddef.h>

#include "emu/out/outfile.h"
#include "emu/result.h"
#include "emu/status.h"

/* Default event budget: Perfetto's UI loads this many in a few seconds
 * and chrome://tracing (which keeps the JSON in memory) still copes. */
#define CHROME_TRACE_MAX_EVENTS 1000000

/* Lanes per unit (lane 0 is the unit's own thread) and the first tid of
 * the overflow lanes: beyond every core's unit threads on any slice. */
#define CHROME_LANES 4
#define CHROME_LANE_TID0 1000000

/* The core, unit and lane of a thread id this writer used. */
void chrome_trace_tid(int tid, int *core, int *unit, int *lane);

tpu_status chrome_trace_write(const emu_result *r, const char *path,
                              tpu_error *err);
/* Same with an explicit budget (0: the default); *written (may be NULL)
 * receives the number of "X" events written. */
tpu_status chrome_trace_write_capped(const emu_result *r, const char *path,
                                     size_t max_events, size_t *written,
                                     tpu_error *err);
/* Same into an open outfile (emu/outfile.h) that the caller commits or
 * discards: several outputs written all-or-nothing. */
tpu_status chrome_trace_write_to(const emu_result *r, outfile *o,
                                 size_t max_events, size_t *written,
                                 tpu_error *err);

#endif
