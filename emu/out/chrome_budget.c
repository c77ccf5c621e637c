/* chrome_budget — the event cap: the reduction levels of chrome_trace.h
 * (merge, group identical cores, coarse, binned, tracks), each counted
 * before it is chosen, stepped through until the count fits. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/out/chrome_internal.h"

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static uint64_t core_sig(const emu_core_result *pc)
{
    uint64_t h = 0xcbf29ce484222325ull;
    h = fnv(h, &pc->n_events, sizeof pc->n_events);
    for (size_t i = 0; i < pc->n_events; i++) {
        const emu_event *e = &pc->events[i];
        h = fnv(h, &e->t0, sizeof e->t0);
        h = fnv(h, &e->t1, sizeof e->t1);
        uint8_t k[4] = {e->unit, e->cat, e->phase, e->opcode};
        h = fnv(h, k, 4);
        h = fnv(h, &e->layer, sizeof e->layer);
    }
    return h;
}

static int same_timeline(const emu_core_result *a, const emu_core_result *b)
{
    if (a->n_events != b->n_events)
        return 0;
    for (size_t i = 0; i < a->n_events; i++) {
        const emu_event *x = &a->events[i], *y = &b->events[i];
        if (x->t0 != y->t0 || x->t1 != y->t1 || x->unit != y->unit ||
            x->cat != y->cat || x->phase != y->phase ||
            x->opcode != y->opcode || x->layer != y->layer ||
            x->count != y->count || x->bytes != y->bytes ||
            x->flops != y->flops)
            return 0;
    }
    return 1;
}

/* rep[c] = first core with a timeline identical to core c's. */
static int group_cores(const emu_result *r, int *rep, chrome_memo_tab *memo)
{
    int n = r->cores;
    uint64_t *sig = malloc(sizeof(uint64_t) * n);
    int *reps = malloc(sizeof(int) * n);
    if (!sig || !reps) {
        free(sig);
        free(reps);
        return -1;
    }
    int nrep = 0;
    for (int c = 0; c < n; c++) {
        const emu_core_result *pc = &r->per_core[c];
        int fresh;
        chrome_memo_ent *m = chrome_memo_find(memo, pc, 2, 0, 0, &fresh);
        if (m && !fresh)
            sig[c] = m->sig;
        else {
            sig[c] = core_sig(pc);
            if (m)
                m->sig = sig[c];
        }
        rep[c] = c;
        for (int g = 0; g < nrep; g++) {
            int q = reps[g];
            const emu_core_result *pq = &r->per_core[q];
            if (sig[q] == sig[c] &&
                ((pq->events == pc->events && pq->n_events == pc->n_events) ||
                 same_timeline(pq, pc))) {
                rep[c] = q;
                break;
            }
        }
        if (rep[c] == c)
            reps[nrep++] = c;
    }
    free(sig);
    free(reps);
    return nrep;
}

/* Events the detailed cores' threads take when each thread with more
 * than share merged events (ucount: per core x unit, 0 for reduced cores)
 * is cut into share bins: the emitters' own count (an empty bin is not
 * written, so a binned thread can take fewer than share), stopping once
 * past limit.  *oom set when out of memory. */
static size_t tracks_need(const emu_result *r, const size_t *ucount,
                          int share, size_t limit, int *oom)
{
    size_t need = 0;
    for (int c = 0; c < r->cores && need <= limit; c++)
        for (int k = 0; k < UNIT_COUNT; k++) {
            size_t n = ucount[(size_t)c * UNIT_COUNT + k];
            if (n <= (size_t)share) {
                need += n;
                continue;
            }
            chrome_sink one = {.r = r, .first = 1};
            if (k == UNIT_CORE)
                chrome_bin_path(&one, &r->per_core[c], share);
            else if (!chrome_bin_unit(&one, &r->per_core[c], k, share))
                *oom = 1;
            need += one.n;
        }
    return need;
}

/* How write_all writes one core at a level. */
typedef struct {
    int reduced;   /* a copy of another core, or grouped under one */
    int binned;    /* its critical path cut into nbins bins */
    int merge;     /* chrome_sink_core's merge */
    int path_only; /* its critical path only */
    unsigned bm;   /* LV_TRACKS: units cut into tbins bins */
} core_way;

static core_way way_of(const chrome_sink *s, int level, const int *rep,
                       const uint8_t *binmask, int c)
{
    core_way w;
    int copied = s->from && s->from[c] != c;
    w.reduced = (level >= LV_GROUP && rep[c] != c) || copied;
    w.binned = w.reduced && level >= LV_BINNED;
    w.merge = copied && level < LV_MERGE       ? 0
              : level == LV_FULL               ? 0
              : (w.reduced && level >= LV_COARSE) ? 2
                                                  : 1;
    w.path_only = (copied && level < LV_MERGE) || w.reduced;
    w.bm = binmask && !w.reduced ? binmask[c] : 0;
    return w;
}

/* Writes (or counts) core pc the way w says; *u gets a bit per unit that
 * produced an event.  Returns 0 when out of memory. */
static int write_core(chrome_sink *s, const emu_core_result *pc, core_way w,
                      int nbins, int tbins, unsigned *u)
{
    if (w.binned) {
        *u = 1u << UNIT_CORE;
        chrome_bin_path(s, pc, nbins);
        return 1;
    }
    chrome_sink_core(s, pc, w.merge, w.path_only ? ~(1u << UNIT_CORE) : w.bm,
                     u);
    for (int k = 0; k < UNIT_COUNT; k++) {
        if (!(w.bm >> k & 1))
            continue;
        size_t n0k = s->nu[k];
        if (k == UNIT_CORE)
            chrome_bin_path(s, pc, tbins);
        else if (!chrome_bin_unit(s, pc, k, tbins))
            return 0;
        if (s->nu[k] > n0k)
            *u |= 1u << k;
    }
    return 1;
}

/* Writes the whole document (or counts its X events when s->f is NULL).
 * LV_TRACKS: binmask[c] has a bit per unit of core c cut into tbins bins.
 * Returns 0 when out of memory. */
static int write_all(chrome_sink *s, int level, const int *rep, unsigned *seen,
                     int nbins, const uint8_t *binmask, int tbins)
{
    const emu_result *r = s->r;
    for (int c = 0; c < r->cores; c++) {
        const emu_core_result *pc = &r->per_core[c];
        core_way w = way_of(s, level, rep, binmask, c);
        /* counting: a timeline shared with an earlier core counts as it */
        int fresh = 1;
        chrome_memo_ent *m =
            s->f ? NULL
            : w.bm
                ? chrome_memo_find(s->memo, pc, 4, tbins, (int)w.bm, &fresh)
                : chrome_memo_find(s->memo, pc, 3, w.binned ? -nbins : w.merge,
                                   w.path_only, &fresh);
        if (m && !fresh) {
            s->n += m->count;
            seen[c] |= m->seen;
            continue;
        }
        size_t n0 = s->n;
        unsigned u = 0;
        if (!write_core(s, pc, w, nbins, tbins, &u))
            return 0;
        seen[c] |= u;
        if (m) {
            m->count = s->n - n0;
            m->seen = u;
        }
    }
    return 1;
}

const char *chrome_budget_level_text(int level)
{
    switch (level) {
    case LV_FULL:
        return "full: every recorded event";
    case LV_MERGE:
        return "merged: adjacent events of the same unit, category, layer, "
               "phase and opcode are one event (count, bytes, flops summed)";
    case LV_GROUP:
        return "merged, and cores with identical timelines keep only their "
               "critical path; the first core of each group keeps every unit";
    case LV_COARSE:
        return "merged, grouped, and the critical paths of reduced cores "
               "merge adjacent spans of one category across layers";
    case LV_BINNED:
        return "merged, grouped, and the critical path of each reduced core "
               "is cut into equal time bins, each named by its dominant "
               "category with every category's seconds in args";
    default:
        return "merged, grouped, each reduced core's critical path is one "
               "bin, and the detailed cores' threads share the rest of the "
               "budget: a thread with more merged events than its share "
               "(bins_per_binned_thread) is cut into that many equal time "
               "bins, each one event from the first start to the last end "
               "inside it (critical path: named by the dominant category; "
               "units: by the layer of the longest run of events), every "
               "category's seconds in args";
    }
}

/* A sink that counts the document's events (no file). */
static chrome_sink ct_counter(chrome_doc *d)
{
    chrome_sink s = {.r = &d->r, .first = 1, .from = d->from, .memo = &d->memo};
    return s;
}

/* Every recorded event, counted as LV_FULL writes them.  0 when out of
 * memory. */
int chrome_budget_count_full(chrome_doc *d)
{
    int n = d->r.cores;
    unsigned *u0 = calloc((size_t)n, sizeof(unsigned));
    int *id = malloc(sizeof(int) * n);
    chrome_sink cnt = ct_counter(d);
    if (!u0 || !id) {
        free(u0);
        free(id);
        return 0;
    }
    for (int c = 0; c < n; c++)
        id[c] = c;
    write_all(&cnt, LV_FULL, id, u0, 0, NULL, 0);
    d->total = cnt.n;
    free(u0);
    free(id);
    return 1;
}

/* LV_BINNED: what the representatives keep, then an equal share of the
 * rest per reduced core (at least one bin: never drop a core). */
static void ct_plan_bins(chrome_doc *d)
{
    size_t keep = 0;
    int nred = 0;
    for (int c = 0; c < d->r.cores; c++) {
        if (d->rep[c] != c) {
            nred++;
            continue;
        }
        chrome_sink one = ct_counter(d);
        unsigned u = 0;
        chrome_sink_core(&one, &d->r.per_core[c], 1, 0, &u);
        keep += one.n;
    }
    size_t per = nred && d->max_events > keep
                     ? (d->max_events - keep) / nred
                     : 1;
    d->nbins = per < 1 ? 1 : per > 100000 ? 100000 : (int)per;
}

/* LV_TRACKS: the representatives alone exceed the budget (a trace of
 * 14,006 layers on 4 representatives gives 1.57M events against 1M).  Each
 * reduced core keeps one bin, and the rest is shared among the
 * representatives' threads: a thread with more merged events than a
 * share L is cut into L equal time bins, the others keep their merged
 * events, and L is bisected on the exact count (empty bins are not
 * written), keeping only shares that fit: a thread with few events leaves
 * its unused share to the others. */
static void ct_plan_tracks(chrome_doc *d)
{
    const emu_result *r = &d->r;
    size_t red = 0, most = 0;
    d->nbins = 1;
    for (int c = 0; c < r->cores; c++) {
        chrome_sink one = ct_counter(d);
        unsigned u = 0;
        if (d->rep[c] != c || d->from[c] != c) {
            chrome_bin_path(&one, &r->per_core[c], 1);
            red += one.n;
            continue;
        }
        chrome_sink_core(&one, &r->per_core[c], 1, 0, &u);
        for (int k = 0; k < UNIT_COUNT; k++) {
            d->ucount[(size_t)c * UNIT_COUNT + k] = one.nu[k];
            if (one.nu[k] > most)
                most = one.nu[k];
        }
    }
    size_t left = d->max_events > red ? d->max_events - red : 0;
    int lo = 1, hi = most > 100000000 ? 100000000 : (int)most;
    while (lo < hi && !d->oom) {
        int mid = lo + (hi - lo + 1) / 2;
        if (tracks_need(r, d->ucount, mid, left, &d->oom) <= left)
            lo = mid;
        else
            hi = mid - 1;
    }
    d->tbins = lo;
    for (int c = 0; c < r->cores; c++)
        for (int k = 0; k < UNIT_COUNT; k++)
            if (d->ucount[(size_t)c * UNIT_COUNT + k] > (size_t)d->tbins)
                d->binmask[c] |= (uint8_t)(1u << k);
}

/* Writes (s->f set) or counts the document's events at the chosen level.
 * Returns 0 when out of memory. */
int chrome_budget_events(chrome_doc *d, chrome_sink *s)
{
    return write_all(s, d->level, d->rep, d->seen, d->nbins,
                     d->level == LV_TRACKS ? d->binmask : NULL, d->tbins);
}

/* Steps through the levels until the count fits the budget (or the last
 * level is reached).  -1 when grouping ran out of memory; d->oom when a
 * later step did. */
int chrome_budget_reduce(chrome_doc *d)
{
    int n = d->r.cores;
    for (int c = 0; c < n; c++)
        d->rep[c] = c;
    d->level = LV_FULL;
    d->ngroups = n;
    d->count = d->total;
    while (d->count > d->max_events && d->level < LV_TRACKS && !d->oom) {
        d->level++;
        if (d->level == LV_GROUP) {
            d->ngroups = group_cores(&d->r, d->rep, &d->memo);
            if (d->ngroups < 0)
                return -1;
        }
        if (d->level == LV_BINNED)
            ct_plan_bins(d);
        if (d->level == LV_TRACKS)
            ct_plan_tracks(d);
        chrome_sink cs = ct_counter(d);
        memset(d->seen, 0, sizeof(unsigned) * n);
        d->oom = !chrome_budget_events(d, &cs);
        d->count = cs.n;
    }
    return 0;
}
