/* The search of `tpuemu advise` (emu/cli/advise_search.c), shared by the
 * command (emu/cli/advise.c) and by `run`, whose step that does not fit
 * ends with the smallest splits and slices that do (emu/cli/run.c).
 *
 * A candidate is a slice, a split of the first input's spatial
 * dimensions over a power of two cores per replica (as sweep's "all"
 * splits, emu/cli/sweep/grid.c), and the examples per replica the global
 * batch gives on that slice.  Each one is simulated in-process through
 * sim_run, by a small pool of threads (the core library has no mutable
 * globals). */
#ifndef EMU_CLI_ADVISE_H
#define EMU_CLI_ADVISE_H

#include <stddef.h>
#include <stdint.h>

#include "emu/graph.h"
#include "emu/params.h"
#include "emu/result.h"
#include "emu/status.h"

struct cJSON;

/* Cores per replica searched on every slice: the 1-16 of spatial
 * partitioning's published runs.  A slice with more replicas than the
 * global batch has examples is searched from the smallest split that
 * leaves each replica an example (v3-2048 at batch 64: 32 cores per
 * replica), and --max-cpr raises the bound. */
#define ADVISE_MAX_CPR 16
/* advise_opts.keep_splits of `tpuemu advise` (--keep-splits). */
#define ADVISE_KEEP_SPLITS 2
/* The largest replica the search builds (the trace reader's bound). */
#define ADVISE_CPR_LIMIT 2048

typedef enum {
    ADV_FITS,    /* simulated: step time and HBM known */
    ADV_NOFIT,   /* simulated (or pruned): needs more HBM than a core has */
    ADV_INVALID, /* refused by the run checks (batch does not split...) */
    ADV_FAILED,  /* the simulation failed otherwise (why) */
    ADV_SKIPPED  /* not reached: the search's time ran out */
} advise_state;

/* One slice x split x batch. */
typedef struct {
    const tpu_system *sys;
    int slice; /* index into advise_opts.slices */
    int split; /* index into advise_result.split */
    int cpr, replicas, chips;
    int64_t global_batch, per_replica;
    advise_state state;
    int pruned; /* decided without a simulation: ADV_NOFIT
                   from a smaller batch's miss, ADV_FITS
                   from a larger one's fit (fit_only),
                   ADV_SKIPPED as not needed (first_fits) */
    double hbm_need_bytes, hbm_cap_bytes;
    double step_s;
    /* The step time's range under the unconfirmed ([U]) assumptions,
     * [low, high], when the simulation gives one (has_range); without it
     * the candidates are ranked on step_s alone and none is marked. */
    int has_range;
    double step_lo_s, step_hi_s;
    /* With the range: the step with each varied key at each end (the
     * report's range_assumptions; owned, n_range entries). */
    emu_range_item *range;
    int n_range;
    double ex_per_s, ex_per_s_chip;
    double usd_per_mex; /* 1M examples at the chip-hour price */
    char why[1024];     /* ADV_FAILED, ADV_INVALID: the message */
} advise_cand;

/* One split of the first input: N, the spatial factors, C. */
typedef struct {
    int rank, cpr;
    int pd[GRAPH_MAX_PDIMS];
    char label[48]; /* "1x4x2x1" */
    int ok;         /* the variant trace reads */
    char why[1024]; /* !ok: the reader's message */
} advise_split;

typedef struct {
    const char *path;         /* names the trace in messages */
    const struct cJSON *base; /* the trace's JSON (variants are built
                                 from it) */
    const graph *g;           /* the trace as read */
    const tpu_system *const *slices;
    int nslices;
    int64_t global_batch; /* 0: the trace's */
    int max_cpr;          /* 0: ADVISE_MAX_CPR */
    const char *freeze;   /* --freeze, or NULL */
    int n_sets;
    const char *const *set_keys, *const *set_values;
    int jobs; /* threads; 0: the online processors, at
                 most 8 */
    /* Only whether each candidate fits (the lowering, not the engine):
     * run's suggestions.  A fit at one batch per replica stands for every
     * smaller one of the same split, a miss for every larger one. */
    int fit_only;
    /* With fit_only: slices smallest first, and on each only the splits
     * of the fewest cores per replica that fit; the search stops once
     * this many slices have a fit.  0: every candidate. */
    int first_fits;
    double deadline_s;    /* wall time after which the rest is
                             ADV_SKIPPED; 0: none */
    double usd_chip_hour; /* 0: the generation's (tpu_chip_price) */
    /* On a slice larger than the smallest holding a replica, simulate
     * only this many of the splits of one cores-per-replica, the fastest
     * there (advise_search); 0: every split. */
    int keep_splits;
} advise_opts;

typedef struct {
    advise_split *split;
    int nsplits;
    advise_cand *c;
    int n;
    int skipped; /* candidates the deadline left out */
    double elapsed_s;
} advise_result;

/* Runs the search: every slice of o x every split x the batch per
 * replica the global batch gives.  TPU_OK with every candidate's state
 * in res (advise_result_free it whatever the result); TPU_ERR_INPUT for a
 * trace whose variants cannot be built, TPU_ERR_SYSTEM out of memory. */
tpu_status advise_search(const advise_opts *o, advise_result *res,
                         tpu_error *err);
void advise_result_free(advise_result *res);

/* The step range of candidate c over the unconfirmed assumptions
 * (emu/range.h: 15-30 more simulations, in worker processes): has_range,
 * step_lo_s, step_hi_s and range set.  Only for a candidate that fits;
 * nothing to do when it has its range already.  Call it after
 * advise_search, outside its threads (range_compute forks). */
tpu_status advise_range(const advise_opts *o, const advise_result *res,
                        advise_cand *c, tpu_error *err);

/* Two step times known only within [lo, hi] each are told apart when
 * the ranges do not overlap: 1 then, 0 when either could be the
 * faster. */
static inline int advise_distinguishable(double lo_a, double hi_a, double lo_b,
                                         double hi_b)
{
    return hi_a < lo_b || hi_b < lo_a;
}

/* A candidate's step and its range over the unconfirmed assumptions, for
 * advise_reorder: the step with each varied key at each end (the items
 * of a report's range_assumptions), and the work one step does in the
 * unit the table ranks by (examples, or examples per chip). */
typedef struct {
    double step_s, work;
    const emu_range_item *items;
    int n;
} advise_ranged;

/* Whether some unconfirmed assumption puts b ahead of a (the ranking's
 * winner): a key under which b's work per second at one end of the key's
 * range beats a's at the same end (a key that does not move a step leaves
 * it at its default).  1 with "KEY=VALUE" (the end that gains b most, the
 * value from the key's plausible range on generation gen) in set; 0 when
 * no key reorders them one at a time. */
int advise_reorder(const advise_ranged *a, const advise_ranged *b, int gen,
                   char *set, size_t cap);

/* The on-demand price of one chip-hour of generation gen in USD
 * (emu/params.c, tpu_chip_price). */
double advise_price(int gen);

/* The cost of 1M examples for a candidate, from its throughput. */
double advise_usd_per_mex(double ex_per_s, int chips, double usd_chip_hour);

/* For `run` when a step does not fit: searches the slices of sys's
 * generation at the same global batch (fit only, under 2 s) and prints
 * to stderr, one line each, the smallest splits that fit on sys and the
 * smallest slices on which some split fits.  Prints nothing when the
 * trace cannot be read again or nothing fits. */
void advise_suggest(const char *trace_path, const char *system,
                    int64_t global_batch, const char *freeze, int n_sets,
                    const char *const *set_keys, const char *const *set_values);

#endif
