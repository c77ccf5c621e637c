/* range — a step time's range over the unconfirmed assumptions
 * (docs/RANGES.md).
 *
 * Every [U] key of the --set table has a plausible range (emu/params.h,
 * tpu_param_span_get).  The step is simulated with every other assumption
 * at its default and one at a time at its low and at its high end
 * (one-at-a-time: interactions between assumptions are not explored); the
 * range is the minimum and maximum over those steps and the default one.
 * A key that cannot move this trace's step is not simulated (the
 * interconnect keys without a collective, the halo keys without spatial
 * partitioning, batchnorm keys without batchnorm, ...), nor is one the
 * caller set with --set (the user has chosen its value).  An end whose
 * step does not fit in HBM, or that a rule between keys refuses, has no
 * time and is left out of the range.
 *
 * The variants run in forked worker processes (jobs of them), each
 * writing its steps back through a pipe; every worker is waited for
 * before range_compute returns, so none outlives the call.  The core
 * stays free of output: a worker writes only to its pipe.
 */
#ifndef EMU_RANGE_H
#define EMU_RANGE_H

#include "emu/graph.h"
#include "emu/result.h"
#include "emu/sim.h"
#include "emu/status.h"

typedef struct {
    char key[64];
    double low_value, high_value; /* the key's plausible range */
    /* The step with the key at each end (the default step at an end that
     * is the key's default); < 0 when that end has no time (it does not
     * fit, or a rule between keys refuses it). */
    double low_s, high_s;
} range_item;

typedef struct {
    double step_s;         /* the default step (given) */
    double low_s, high_s;  /* min and max over step_s and every timed end */
    int n;                 /* the keys varied, in the --set table's order */
    range_item *items;
    int n_runs;            /* steps simulated */
} range_result;

/* The range of base's step (a finished sim_run of g with o) over the
 * unconfirmed assumptions.  jobs: worker processes (0: one per online
 * CPU; 1: in this process, no fork).  TPU_ERR_SYSTEM when host memory or
 * a worker fails. */
tpu_status range_compute(const graph *g, const sim_opts *o,
                         const emu_result *base, int jobs, range_result *out,
                         tpu_error *err);
void range_free(range_result *r);

/* The item that moves the step most (the widest span of its two ends and
 * the default step); -1 when none moves it. */
int range_top(const range_result *r);

/* Copies the range into r (has_range, range_low_s/high_s, range[]: the
 * items whose two ends were timed).  TPU_ERR_SYSTEM when host memory
 * runs out. */
tpu_status range_to_result(const range_result *rr, emu_result *r,
                           tpu_error *err);

#endif
