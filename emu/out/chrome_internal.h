/* chrome_internal — what the files of the chrome trace writer share
 * (private to them; emu/out/chrome_trace.h is the public face).
 *
 *   emu/out/chrome_trace.c   the document: timelines, otherData, names
 *   emu/out/chrome_budget.c  the event cap: reduction levels and counts
 *   emu/out/chrome_bin.c     threads cut into equal time bins
 *   emu/out/chrome_sink.c    the records: events, lanes, merging
 *   emu/out/chrome_memo.c    per shared timeline, what it gave
 */
#ifndef EMU_OUT_CHROME_INTERNAL_H
#define EMU_OUT_CHROME_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "emu/out/chrome_trace.h"
#include "emu/result.h"

/* The reduction levels, in the order the budget tries them (the steps
 * chrome_trace.h lists; LV_FULL: every recorded event). */
enum { LV_FULL, LV_MERGE, LV_GROUP, LV_COARSE, LV_BINNED, LV_TRACKS };

/* Where events go: written to f, or (f NULL) only counted. */
typedef struct {
    FILE *f; /* NULL: count only */
    const emu_result *r;
    size_t n;              /* X events emitted */
    size_t nu[UNIT_COUNT]; /* of which on each unit */
    int first;             /* no comma before the next record */
    const int *from;       /* from[c]: c, the core its timeline is copied from,
                              or -1 (breakdown only) */
    double lane_end[UNIT_COUNT][CHROME_LANES]; /* this core's, seconds */
    uint8_t *lanes; /* per core x unit: bit k = lane k written */
    struct chrome_memo_tab
        *memo; /* what a shared timeline gave (may be NULL) */
} chrome_sink;

/* What one event array gave written one way (emu/out/chrome_memo.c). */
typedef struct chrome_memo {
    const emu_event *ev;
    size_t nev;
    int kind, a, b; /* write_all's choice for the core */
    double step;
    size_t count;
    unsigned seen;
    uint64_t sig;
    double (*acc)[CAT_COUNT];
} chrome_memo_ent;

typedef struct chrome_memo_tab {
    chrome_memo_ent *e;
    size_t n, cap;
} chrome_memo_tab;

/* One write: the result as it is written (every core with a timeline),
 * and how far the event budget reduced it. */
typedef struct {
    emu_result r; /* the caller's, with per_core = cores */
    emu_core_result *cores;
    int *from;        /* from[c]: c, the core whose timeline core c
                         copies, or -1 (breakdown only) */
    emu_event *synth; /* breakdown-only cores' spans, CAT_COUNT each */
    int ncopied, nsynth;
    chrome_memo_tab memo;
    size_t max_events;
    size_t total; /* X events of every recorded event (LV_FULL) */
    size_t count; /* X events at the chosen level */
    int level, ngroups, nbins, tbins, oom;
    int *rep;         /* rep[c]: first core with core c's timeline */
    unsigned *seen;   /* per core: units that produced an event */
    uint8_t *lanes;   /* per core x unit: overflow lanes written */
    uint8_t *binmask; /* LV_TRACKS: per core, units cut into tbins */
    size_t *ucount;   /* LV_TRACKS: merged events per core x unit */
} chrome_doc;

/* ---- emu/out/chrome_memo.c ---- */

/* The entry for (events, way), added (*fresh = 1) when absent; NULL when
 * out of memory (the caller then computes without it). */
chrome_memo_ent *chrome_memo_find(chrome_memo_tab *t, const emu_core_result *pc,
                                  int kind, int a, int b, int *fresh);
void chrome_memo_free(chrome_memo_tab *t);

/* ---- emu/out/chrome_sink.c ---- */

/* The thread id of a core's unit lane (chrome_trace_tid decodes it). */
int chrome_sink_tid(int core, int unit, int lane);
void chrome_sink_str(FILE *f, const char *s);
const char *chrome_sink_layer(const emu_result *r, int32_t layer);
const char *chrome_sink_unit(int u);
int chrome_sink_count(chrome_sink *s, int unit);
void chrome_sink_x(chrome_sink *s, const char *name, const char *cat, int pid,
                   int tid, double t0, double t1);
void chrome_sink_cat_seconds(FILE *f, const double *cat_s);
void chrome_sink_work(FILE *f, double bytes, double flops);
int chrome_sink_dominant(const double *cat_s);
/* Writes (or counts) one core's events.  merge: 0 none, 1 same layer,
 * 2 same category only.  skip: a bit per unit not written here;
 * units_seen gets a bit per written unit that produced an event. */
void chrome_sink_core(chrome_sink *s, const emu_core_result *pc, int merge,
                      unsigned skip, unsigned *units_seen);
/* A name record and a sort-index record for a process (has_tid 0) or a
 * thread. */
void chrome_sink_meta(chrome_sink *s, const char *what, int pid, int tid,
                      int has_tid, const char *name, int sort);

/* ---- emu/out/chrome_bin.c ---- */

/* A reduced core's critical path in nbins bins. */
void chrome_bin_path(chrome_sink *s, const emu_core_result *pc, int nbins);
/* A unit's thread in nbins bins; 0 when out of memory (nothing
 * written). */
int chrome_bin_unit(chrome_sink *s, const emu_core_result *pc, int unit,
                    int nbins);

/* ---- emu/out/chrome_budget.c ---- */

const char *chrome_budget_level_text(int level);
/* d->total: every recorded event, as LV_FULL writes them; 0 when out of
 * memory. */
int chrome_budget_count_full(chrome_doc *d);
/* Writes (s->f set) or counts the events at d->level; 0 when out of
 * memory. */
int chrome_budget_events(chrome_doc *d, chrome_sink *s);
/* Steps through the levels until d->count fits d->max_events (or the
 * last level); -1 when grouping ran out of memory, d->oom when a later
 * step did. */
int chrome_budget_reduce(chrome_doc *d);

#endif
