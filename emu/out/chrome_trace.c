#include "emu/out/chrome_trace.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "emu/rfile.h"
#include "firmware/isa.h"

/* Two events one cycle (~1 ns at 940 MHz) apart or closer count as
 * adjacent: the engine's own rounding, not a real gap. */
#define ADJ_S 1e-9

enum { LV_FULL, LV_MERGE, LV_GROUP, LV_COARSE, LV_BINNED, LV_TRACKS };

/* How one core is written. */
enum { CORE_FULL, CORE_PATH, CORE_PATH_COARSE };

typedef struct {
    FILE *f;          /* NULL: count only */
    const emu_result *r;
    size_t n;         /* X events emitted */
    size_t nu[UNIT_COUNT]; /* of which on each unit */
    int first;        /* no comma before the next record */
    const int *from;  /* from[c]: c, the core its timeline is copied from,
                         or -1 (breakdown only) */
    double lane_end[UNIT_COUNT][CHROME_LANES]; /* this core's, seconds */
    uint8_t *lanes;   /* per core x unit: bit k = lane k written */
    struct memo_tab *memo; /* what a shared timeline gave (may be NULL) */
} sink;

/* Cores that copy one twin's timeline share its event array (a v3-2048
 * pod of 16-core replicas has 2048 cores and 16 arrays), and a core's
 * count, signature and bins are functions of its array and how it is
 * written: computed once per (array, way), not once per core (probe round
 * 6: counting 418M events per pass took 40 s). */
typedef struct memo {
    const emu_event *ev;
    size_t nev;
    int kind, a, b;    /* write_all's choice for the core */
    double step;
    size_t count;
    unsigned seen;
    uint64_t sig;
    double (*acc)[CAT_COUNT];
} memo_ent;

typedef struct memo_tab {
    memo_ent *e;
    size_t n, cap;
} memo_tab;

/* The entry for (events, way), added when absent; NULL when out of
 * memory (the caller then computes without it). */
static memo_ent *memo_find(memo_tab *t, const emu_core_result *pc, int kind,
                           int a, int b, int *fresh)
{
    *fresh = 0;
    if (!t)
        return NULL;
    for (size_t i = 0; i < t->n; i++) {
        memo_ent *m = &t->e[i];
        if (m->ev == pc->events && m->nev == pc->n_events && m->kind == kind &&
            m->a == a && m->b == b && m->step == pc->step_time_s)
            return m;
    }
    if (t->n == t->cap) {
        size_t nc = t->cap ? t->cap * 2 : 64;
        memo_ent *ne = realloc(t->e, nc * sizeof *ne);
        if (!ne)
            return NULL;
        t->e = ne;
        t->cap = nc;
    }
    memo_ent *m = &t->e[t->n++];
    memset(m, 0, sizeof *m);
    m->ev = pc->events;
    m->nev = pc->n_events;
    m->kind = kind;
    m->a = a;
    m->b = b;
    m->step = pc->step_time_s;
    *fresh = 1;
    return m;
}

static void memo_free(memo_tab *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n; i++)
        free(t->e[i].acc);
    free(t->e);
    t->e = NULL;
    t->n = t->cap = 0;
}

void chrome_trace_tid(int tid, int *core, int *unit, int *lane)
{
    int base = tid, k = 0;
    if (tid >= CHROME_LANE_TID0) {
        base = (tid - CHROME_LANE_TID0) / CHROME_LANES;
        k = (tid - CHROME_LANE_TID0) % CHROME_LANES;
    }
    *core = base / UNIT_COUNT;
    *unit = base % UNIT_COUNT;
    *lane = k;
}

static int lane_tid(int core, int unit, int lane)
{
    int base = core * UNIT_COUNT + unit;
    return lane == 0 ? base : CHROME_LANE_TID0 + base * CHROME_LANES + lane;
}

/* The first lane of the unit whose last event ended by t0 (the last lane
 * when all are busy: it may then overlap, as before lanes existed). */
static int pick_lane(sink *s, int core, int unit, double t0, double t1)
{
    int k = 0;
    while (k < CHROME_LANES - 1 && s->lane_end[unit][k] > t0 + ADJ_S)
        k++;
    if (t1 > s->lane_end[unit][k])
        s->lane_end[unit][k] = t1;
    if (s->lanes)
        s->lanes[core * UNIT_COUNT + unit] |= (uint8_t)(1u << k);
    return k;
}

/* A JSON string: UTF-8 characters as they are (names are UTF-8: the trace
 * reader checks; probe round 6 found each byte of a non-ASCII name escaped
 * as its own code point, so 'ü' read back as 'Ã¼'), control characters
 * escaped, and a byte that is not part of a character as U+FFFD. */
static void put_str(FILE *f, const char *s)
{
    fputc('"', f);
    while (*s) {
        unsigned char c = (unsigned char)*s;
        size_t n = rfile_utf8_len((const unsigned char *)s);
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20 || c == 0x7f)
            fprintf(f, "\\u%04x", c);
        else if (n == 0)
            fputs("\\ufffd", f);
        else {
            fwrite(s, 1, n, f);
            s += n;
            continue;
        }
        s++;
    }
    fputc('"', f);
}

/* "ts" and "dur" in microseconds to 0.1 ns: both from the rounded ends,
 * so an event that starts where another ends does not overlap it by a
 * rounding step (probe round 6 found 26,432 such 0.1 ns overlaps). */
static void put_span(FILE *f, double t0_s, double t1_s)
{
    double a = nearbyint(t0_s * 1e10) / 1e4, b = nearbyint(t1_s * 1e10) / 1e4;
    fprintf(f, ",\"ts\":%.4f,\"dur\":%.4f", a, b > a ? b - a : 0.0);
}

static const char *layer_name(const emu_result *r, int32_t layer)
{
    if (layer >= 0 && layer < r->n_layers && r->layer_names)
        return r->layer_names[layer];
    return NULL;
}

static const char *unit_label(int u)
{
    static const char *const l[UNIT_COUNT] = {"critical path", "MXU", "vector",
                                              "DMA", "ICI"};
    return (unsigned)u < UNIT_COUNT ? l[u] : "?";
}

static void sep(sink *s)
{
    if (!s->first)
        fputs(",\n", s->f);
    s->first = 0;
}

/* Counts one X event on unit; whether it is also to be written (a sink
 * without a file only counts). */
static int count_x(sink *s, int unit)
{
    s->n++;
    s->nu[unit]++;
    return s->f != NULL;
}

/* One X event up to the opening brace of its args. */
static void put_x(sink *s, const char *name, const char *cat, int pid,
                  int tid, double t0, double t1)
{
    sep(s);
    fputs("{\"ph\":\"X\",\"name\":", s->f);
    put_str(s->f, name);
    fputs(",\"cat\":", s->f);
    put_str(s->f, cat);
    fprintf(s->f, ",\"pid\":%d,\"tid\":%d", pid, tid);
    put_span(s->f, t0, t1);
    fputs(",\"args\":{", s->f);
}

/* A binned event's exact seconds of each category present in it. */
static void put_cat_seconds(FILE *f, const double *cat_s)
{
    for (int c = 0; c < CAT_COUNT; c++)
        if (cat_s[c] > 0)
            fprintf(f, ",\"%s_s\":%.9g", emu_cat_name((emu_cat)c), cat_s[c]);
}

/* Bytes moved and FLOPs done, when there were any. */
static void put_work(FILE *f, double bytes, double flops)
{
    if (bytes != 0)
        fprintf(f, ",\"bytes\":%.17g", bytes);
    if (flops != 0)
        fprintf(f, ",\"flops\":%.17g", flops);
}

/* The category with the most seconds (the first of equals). */
static int dominant(const double *cat_s)
{
    int dom = 0;
    for (int c = 0; c < CAT_COUNT; c++)
        if (cat_s[c] > cat_s[dom])
            dom = c;
    return dom;
}

static void emit(sink *s, const emu_core_result *pc, const emu_event *e,
                 int coarse)
{
    if (!count_x(s, e->unit))
        return;
    const char *ln = coarse ? NULL : layer_name(s->r, e->layer);
    const char *cat = emu_cat_name((emu_cat)e->cat);
    int lane = pick_lane(s, pc->core, e->unit, e->t0, e->t1);
    put_x(s, e->unit == UNIT_CORE || !ln ? cat : ln, cat, pc->chip,
          lane_tid(pc->core, e->unit, lane), e->t0, e->t1);
    if (coarse)
        fputs("\"layer\":\"(several: merged to fit the event budget)\"", s->f);
    else {
        fputs("\"layer\":", s->f);
        put_str(s->f, ln ? ln : "");
        fputs(",\"phase\":", s->f);
        put_str(s->f, emu_phase_name((emu_phase)e->phase));
        /* the mnemonic `tpuemu lower` prints, not the enum's number
         * (probe round 9: Perfetto showed "opcode 7") */
        fputs(",\"opcode\":", s->f);
        put_str(s->f, fw_op_name((fw_op)e->opcode));
    }
    fprintf(s->f, ",\"count\":%lu", (unsigned long)e->count);
    put_work(s->f, e->bytes, e->flops);
    fputs("}}", s->f);
}

static int mergeable(const emu_event *a, const emu_event *b, int coarse)
{
    if (a->unit != b->unit || a->cat != b->cat)
        return 0;
    if (!coarse && (a->layer != b->layer || a->phase != b->phase ||
                    a->opcode != b->opcode))
        return 0;
    return b->t0 <= a->t1 + ADJ_S && b->t0 >= a->t0;
}

/* Writes (or counts) one core's events.  merge: 0 none, 1 same layer,
 * 2 same category only.  skip: a bit per unit not written here.
 * units_seen gets a bit per written unit that produced an event. */
static void emit_core(sink *s, const emu_core_result *pc, int merge,
                      unsigned skip, unsigned *units_seen)
{
    emu_event pend[UNIT_COUNT];
    int have[UNIT_COUNT] = {0};
    for (int u = 0; u < UNIT_COUNT; u++)
        for (int k = 0; k < CHROME_LANES; k++)
            s->lane_end[u][k] = -1;
    for (size_t i = 0; i < pc->n_events; i++) {
        const emu_event *e = &pc->events[i];
        if (e->unit >= UNIT_COUNT || (skip >> e->unit & 1))
            continue;
        *units_seen |= 1u << e->unit;
        if (!merge) {
            emit(s, pc, e, 0);
            continue;
        }
        emu_event *p = &pend[e->unit];
        if (have[e->unit] && mergeable(p, e, merge == 2)) {
            p->t1 = fmax(p->t1, e->t1);
            p->count += e->count;
            p->bytes += e->bytes;
            p->flops += e->flops;
            continue;
        }
        if (have[e->unit])
            emit(s, pc, p, merge == 2);
        *p = *e;
        have[e->unit] = 1;
    }
    for (int u = 0; u < UNIT_COUNT; u++)
        if (have[u])
            emit(s, pc, &pend[u], merge == 2);
}

/* The seconds of each category of a core's critical path inside each of
 * nbins bins of width w over [0, step]. */
static void bin_path(const emu_core_result *pc, int nbins, double w,
                     double (*acc)[CAT_COUNT])
{
    double step = pc->step_time_s;
    for (size_t i = 0; i < pc->n_events; i++) {
        const emu_event *e = &pc->events[i];
        if (e->unit != UNIT_CORE || e->cat >= CAT_COUNT)
            continue;
        double a = fmax(e->t0, 0), b = fmin(e->t1, step);
        for (int k = (int)(a / w); k < nbins && k * w < b; k++) {
            double lo = fmax(a, k * w), hi = fmin(b, (k + 1) * w);
            if (hi > lo)
                acc[k][e->cat] += hi - lo;
        }
    }
}

/* The critical path of a reduced core cut into nbins equal time bins:
 * each bin is one event named by its dominant category, with the seconds
 * of every category inside the bin in args, so the breakdown stays exact
 * while the ordering is blurred to the bin width. */
static void emit_binned(sink *s, const emu_core_result *pc, int nbins)
{
    double step = pc->step_time_s;
    if (!(step > 0) || nbins < 1)
        return;
    double w = step / nbins;
    int fresh;
    memo_ent *m = memo_find(s->memo, pc, 1, nbins, 0, &fresh);
    double(*acc)[CAT_COUNT] = m && !fresh ? m->acc : NULL;
    int own = 0;
    if (!acc) {
        acc = calloc((size_t)nbins, sizeof *acc);
        if (!acc)
            return;
        own = 1;
        bin_path(pc, nbins, w, acc);
    }
    for (int k = 0; k < nbins; k++) {
        double tot = 0;
        for (int c = 0; c < CAT_COUNT; c++)
            tot += acc[k][c];
        if (!(tot > 0) || !count_x(s, UNIT_CORE))
            continue;
        const char *cat = emu_cat_name((emu_cat)dominant(acc[k]));
        put_x(s, cat, cat, pc->chip, pc->core * UNIT_COUNT + UNIT_CORE,
              k * w, k + 1 == nbins ? step : (k + 1) * w);
        fputs("\"binned\":true", s->f);
        put_cat_seconds(s->f, acc[k]);
        fputs("}}", s->f);
    }
    if (own && m && fresh)
        m->acc = acc; /* the memo owns it now */
    else if (own)
        free(acc);
}

/* One bin of a unit's thread (emit_unit_binned). */
typedef struct {
    double lo, hi;              /* extent of the events inside the bin */
    double cat_s[CAT_COUNT];    /* event seconds inside the bin */
    double bytes, flops;        /* of the events starting in the bin */
    unsigned long count, events;
    double run_s, best_s;       /* dominant layer: see below */
    int32_t run_layer, best_layer;
    int used;
} ubin;

static void ubin_add(ubin *b, double lo, double hi, const emu_event *e)
{
    if (!b->used || lo < b->lo)
        b->lo = lo;
    if (!b->used || hi > b->hi)
        b->hi = hi;
    b->used = 1;
    b->cat_s[e->cat < CAT_COUNT ? e->cat : CAT_IDLE] += hi - lo;
    if (b->run_s > 0 && e->layer == b->run_layer)
        b->run_s += hi - lo;
    else {
        b->run_layer = e->layer;
        b->run_s = hi - lo;
    }
    if (b->run_s > b->best_s || b->best_layer < -1) {
        b->best_s = b->run_s;
        b->best_layer = b->run_layer;
    }
}

/* One event of the unit into the bins of width w over [0, end]: its
 * seconds into every bin it crosses, its totals into the bin it starts
 * in (a zero-length event too). */
static void ubin_event(ubin *bin, int nbins, double w, double end,
                       const emu_event *e)
{
    double a = fmin(fmax(e->t0, 0), end), b = fmin(fmax(e->t1, a), end);
    int k0 = (int)(a / w);
    if (k0 >= nbins)
        k0 = nbins - 1;
    for (int k = k0; k < nbins && k * w < b; k++) {
        double lo = fmax(a, k * w), hi = fmin(b, (k + 1) * w);
        if (hi > lo)
            ubin_add(&bin[k], lo, hi, e);
    }
    ubin *h = &bin[k0];
    if (!h->used) {
        double at = fmin(fmax(a, k0 * w), (k0 + 1) * w);
        ubin_add(h, at, at, e);
    }
    h->count += e->count;
    h->events++;
    h->bytes += e->bytes;
    h->flops += e->flops;
}

static void put_ubin(sink *s, const emu_core_result *pc, int tid,
                     const ubin *b)
{
    const char *cat = emu_cat_name((emu_cat)dominant(b->cat_s));
    const char *ln = layer_name(s->r, b->best_layer);
    put_x(s, ln ? ln : cat, cat, pc->chip, tid, b->lo, b->hi);
    fputs("\"binned\":true,\"layer\":", s->f);
    put_str(s->f, ln ? ln : "");
    fprintf(s->f, ",\"events\":%lu,\"count\":%lu", b->events, b->count);
    put_cat_seconds(s->f, b->cat_s);
    put_work(s->f, b->bytes, b->flops);
    fputs("}}", s->f);
}

/* A representative's unit thread cut into nbins equal time bins over the
 * step (LV_TRACKS): each bin with events is one event from the first start
 * to the last end inside it (events crossing a bin edge are cut there, so
 * bins never overlap and the thread nests), named by the layer of the
 * longest run of consecutive events in it (the layer busiest in the bin
 * where a unit's events of one layer come together, as they mostly do;
 * a bin's exact busiest layer would need a table per bin), with every
 * category's event seconds in args (overlapping DMAs add up) and the
 * count, bytes and FLOPs of the events that start in it.  Returns 0 when
 * out of memory (nothing written). */
static int emit_unit_binned(sink *s, const emu_core_result *pc, int unit,
                            int nbins)
{
    double end = pc->step_time_s;
    for (size_t i = 0; i < pc->n_events; i++)
        if (pc->events[i].unit == unit && pc->events[i].t1 > end)
            end = pc->events[i].t1;
    if (!(end > 0) || nbins < 1)
        return 1;
    ubin *bin = calloc((size_t)nbins, sizeof *bin);
    if (!bin)
        return 0;
    for (int k = 0; k < nbins; k++)
        bin[k].best_layer = bin[k].run_layer = -2;
    double w = end / nbins;
    for (size_t i = 0; i < pc->n_events; i++)
        if (pc->events[i].unit == unit)
            ubin_event(bin, nbins, w, end, &pc->events[i]);
    int tid = lane_tid(pc->core, unit, 0);
    for (int k = 0; k < nbins; k++)
        if (bin[k].used && count_x(s, unit))
            put_ubin(s, pc, tid, &bin[k]);
    free(bin);
    return 1;
}

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
static int group_cores(const emu_result *r, int *rep, memo_tab *memo)
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
        memo_ent *m = memo_find(memo, pc, 2, 0, 0, &fresh);
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
            sink one = {.r = r, .first = 1};
            if (k == UNIT_CORE)
                emit_binned(&one, &r->per_core[c], share);
            else if (!emit_unit_binned(&one, &r->per_core[c], k, share))
                *oom = 1;
            need += one.n;
        }
    return need;
}

/* How write_all writes one core at a level. */
typedef struct {
    int reduced;   /* a copy of another core, or grouped under one */
    int binned;    /* its critical path cut into nbins bins */
    int merge;     /* emit_core's merge */
    int path_only; /* its critical path only */
    unsigned bm;   /* LV_TRACKS: units cut into tbins bins */
} core_way;

static core_way way_of(const sink *s, int level, const int *rep,
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
static int write_core(sink *s, const emu_core_result *pc, core_way w,
                      int nbins, int tbins, unsigned *u)
{
    if (w.binned) {
        *u = 1u << UNIT_CORE;
        emit_binned(s, pc, nbins);
        return 1;
    }
    emit_core(s, pc, w.merge, w.path_only ? ~(1u << UNIT_CORE) : w.bm, u);
    for (int k = 0; k < UNIT_COUNT; k++) {
        if (!(w.bm >> k & 1))
            continue;
        size_t n0k = s->nu[k];
        if (k == UNIT_CORE)
            emit_binned(s, pc, tbins);
        else if (!emit_unit_binned(s, pc, k, tbins))
            return 0;
        if (s->nu[k] > n0k)
            *u |= 1u << k;
    }
    return 1;
}

/* Writes the whole document (or counts its X events when s->f is NULL).
 * LV_TRACKS: binmask[c] has a bit per unit of core c cut into tbins bins.
 * Returns 0 when out of memory. */
static int write_all(sink *s, int level, const int *rep, unsigned *seen,
                     int nbins, const uint8_t *binmask, int tbins)
{
    const emu_result *r = s->r;
    for (int c = 0; c < r->cores; c++) {
        const emu_core_result *pc = &r->per_core[c];
        core_way w = way_of(s, level, rep, binmask, c);
        /* counting: a timeline shared with an earlier core counts as it */
        int fresh = 1;
        memo_ent *m = s->f ? NULL
                      : w.bm ? memo_find(s->memo, pc, 4, tbins, (int)w.bm,
                                         &fresh)
                             : memo_find(s->memo, pc, 3,
                                         w.binned ? -nbins : w.merge,
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

/* A name record and a sort-index record for a process (has_tid 0) or a
 * thread. */
static void meta(sink *s, const char *what, int pid, int tid, int has_tid,
                 const char *name, int sort)
{
    sep(s);
    fprintf(s->f, "{\"ph\":\"M\",\"name\":\"%s\",\"pid\":%d,", what, pid);
    if (has_tid)
        fprintf(s->f, "\"tid\":%d,", tid);
    fputs("\"args\":{\"name\":", s->f);
    put_str(s->f, name);
    fputs("}}", s->f);
    sep(s);
    fprintf(s->f, "{\"ph\":\"M\",\"name\":\"%s_sort_index\",\"pid\":%d,",
            has_tid ? "thread" : "process", pid);
    if (has_tid)
        fprintf(s->f, "\"tid\":%d,", tid);
    fprintf(s->f, "\"args\":{\"sort_index\":%d}}", sort);
}

tpu_status chrome_trace_write(const emu_result *r, const char *path,
                              tpu_error *err)
{
    return chrome_trace_write_capped(r, path, 0, NULL, err);
}

static const char *level_text(int level)
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

tpu_status chrome_trace_write_capped(const emu_result *r, const char *path,
                                     size_t max_events, size_t *written,
                                     tpu_error *err)
{
    if (!path)
        return tpu_fail(err, TPU_ERR_INPUT, "chrome trace: no output path");
    outfile o;
    tpu_status st = outfile_open(&o, path, err);
    if (st == TPU_OK)
        st = chrome_trace_write_to(r, &o, max_events, written, err);
    if (st == TPU_OK)
        st = outfile_commit(&o, err);
    outfile_discard(&o);
    return st;
}

/* One write: the result as it is written (every core with a timeline),
 * and how far the event budget reduced it. */
typedef struct {
    emu_result r;          /* the caller's, with per_core = cores */
    emu_core_result *cores;
    int *from;             /* from[c]: c, the core whose timeline core c
                              copies, or -1 (breakdown only) */
    emu_event *synth;      /* breakdown-only cores' spans, CAT_COUNT each */
    int ncopied, nsynth;
    memo_tab memo;
    size_t max_events;
    size_t total;          /* X events of every recorded event (LV_FULL) */
    size_t count;          /* X events at the chosen level */
    int level, ngroups, nbins, tbins, oom;
    int *rep;              /* rep[c]: first core with core c's timeline */
    unsigned *seen;        /* per core: units that produced an event */
    uint8_t *lanes;        /* per core x unit: overflow lanes written */
    uint8_t *binmask;      /* LV_TRACKS: per core, units cut into tbins */
    size_t *ucount;        /* LV_TRACKS: merged events per core x unit */
} ct_doc;

static void ct_free(ct_doc *d)
{
    free(d->cores);
    free(d->from);
    free(d->synth);
    free(d->rep);
    free(d->seen);
    free(d->lanes);
    free(d->binmask);
    free(d->ucount);
    memo_free(&d->memo);
}

/* A sink that counts the document's events (no file). */
static sink ct_counter(ct_doc *d)
{
    sink s = {.r = &d->r, .first = 1, .from = d->from, .memo = &d->memo};
    return s;
}

/* The first core with a recorded timeline and core c's breakdown, -1
 * when none. */
static int find_twin(const emu_result *r, int c)
{
    const emu_core_result *pc = &r->per_core[c];
    for (int q = 0; q < r->cores; q++) {
        const emu_core_result *pq = &r->per_core[q];
        if (!pq->n_events || pq->step_time_s != pc->step_time_s)
            continue;
        int same = 1;
        for (int k = 0; k < CAT_COUNT; k++)
            same &= fabs(pq->breakdown_s[k] - pc->breakdown_s[k]) <=
                    1e-12 * pc->step_time_s;
        if (same)
            return q;
    }
    return -1;
}

/* A core's breakdown as consecutive category spans (order not known). */
static size_t breakdown_spans(const emu_core_result *pc, emu_event *e)
{
    size_t n = 0;
    double t = 0;
    for (int k = 0; k < CAT_COUNT; k++)
        if (pc->breakdown_s[k] > 0) {
            e[n] = (emu_event){t, t + pc->breakdown_s[k], UNIT_CORE,
                               (uint8_t)k, PHASE_FWD, 0, -1, 1, 0, 0};
            t += pc->breakdown_s[k];
            n++;
        }
    return n;
}

/* The engine may simulate one core of a group of identical replicas and
 * record only its timeline.  A core without events takes the critical
 * path of the first core that has one and the same breakdown (stated in
 * its thread name and in otherData); with no such twin it gets its
 * breakdown as consecutive category spans, marked "order not recorded".
 * A result with no timeline at all is refused. */
static tpu_status ct_timelines(ct_doc *d, const emu_result *r,
                               const char *path, tpu_error *err)
{
    int any = 0;
    d->cores = malloc(sizeof *d->cores * r->cores);
    d->from = malloc(sizeof(int) * r->cores);
    d->synth = calloc((size_t)r->cores * CAT_COUNT, sizeof *d->synth);
    if (!d->cores || !d->from || !d->synth)
        return tpu_fail(err, TPU_ERR_SYSTEM, "%s: out of memory", path);
    for (int c = 0; c < r->cores; c++) {
        const emu_core_result *pc = &r->per_core[c];
        d->cores[c] = *pc;
        d->from[c] = c;
        if (pc->n_events && !pc->events)
            return tpu_fail(err, TPU_ERR_INPUT, "%s: core %d: events missing",
                            path, c);
        any |= pc->n_events > 0;
    }
    if (!any)
        return tpu_fail(err, TPU_ERR_INPUT,
                        "%s: the result has no recorded timeline (the step "
                        "must be simulated with the timeline recorded)",
                        path);
    for (int c = 0; c < r->cores; c++) {
        const emu_core_result *pc = &r->per_core[c];
        if (pc->n_events || !(pc->step_time_s > 0))
            continue;
        int twin = find_twin(r, c);
        if (twin >= 0) {
            d->cores[c].events = r->per_core[twin].events;
            d->cores[c].n_events = r->per_core[twin].n_events;
            d->from[c] = twin;
            d->ncopied++;
        } else {
            emu_event *e = &d->synth[(size_t)c * CAT_COUNT];
            d->cores[c].events = e;
            d->cores[c].n_events = breakdown_spans(pc, e);
            d->from[c] = -1;
            d->nsynth++;
        }
    }
    d->r = *r;
    d->r.per_core = d->cores;
    return TPU_OK;
}

/* Every recorded event, counted as LV_FULL writes them.  0 when out of
 * memory. */
static int ct_count_full(ct_doc *d)
{
    int n = d->r.cores;
    unsigned *u0 = calloc((size_t)n, sizeof(unsigned));
    int *id = malloc(sizeof(int) * n);
    sink cnt = ct_counter(d);
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
static void ct_plan_bins(ct_doc *d)
{
    size_t keep = 0;
    int nred = 0;
    for (int c = 0; c < d->r.cores; c++) {
        if (d->rep[c] != c) {
            nred++;
            continue;
        }
        sink one = ct_counter(d);
        unsigned u = 0;
        emit_core(&one, &d->r.per_core[c], 1, 0, &u);
        keep += one.n;
    }
    size_t per = nred && d->max_events > keep
                     ? (d->max_events - keep) / nred
                     : 1;
    d->nbins = per < 1 ? 1 : per > 100000 ? 100000 : (int)per;
}

/* LV_TRACKS: the representatives alone exceed the budget (probe round 6:
 * 14,006 layers on 4 representatives, 1.57M events against 1M).  Each
 * reduced core keeps one bin, and the rest is shared among the
 * representatives' threads: a thread with more merged events than a
 * share L is cut into L equal time bins, the others keep their merged
 * events, and L is bisected on the exact count (empty bins are not
 * written), keeping only shares that fit: a thread with few events leaves
 * its unused share to the others. */
static void ct_plan_tracks(ct_doc *d)
{
    const emu_result *r = &d->r;
    size_t red = 0, most = 0;
    d->nbins = 1;
    for (int c = 0; c < r->cores; c++) {
        sink one = ct_counter(d);
        unsigned u = 0;
        if (d->rep[c] != c || d->from[c] != c) {
            emit_binned(&one, &r->per_core[c], 1);
            red += one.n;
            continue;
        }
        emit_core(&one, &r->per_core[c], 1, 0, &u);
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
static int ct_events(ct_doc *d, sink *s)
{
    return write_all(s, d->level, d->rep, d->seen, d->nbins,
                     d->level == LV_TRACKS ? d->binmask : NULL, d->tbins);
}

/* Steps through the levels until the count fits the budget (or the last
 * level is reached).  -1 when grouping ran out of memory; d->oom when a
 * later step did. */
static int ct_reduce(ct_doc *d)
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
        sink cs = ct_counter(d);
        memset(d->seen, 0, sizeof(unsigned) * n);
        d->oom = !ct_events(d, &cs);
        d->count = cs.n;
    }
    return 0;
}

/* Ranges of reduced cores with their representative. */
static void put_reduced(FILE *f, const ct_doc *d)
{
    const int *rep = d->rep;
    int n = d->r.cores, first = 1;
    for (int c = 0; c < n;) {
        if (rep[c] == c) {
            c++;
            continue;
        }
        int e = c;
        while (e + 1 < n && rep[e + 1] == rep[c])
            e++;
        fprintf(f, "%s{\"cores\":\"%d-%d\",\"detail_in_core\":%d}",
                first ? "" : ",", c, e, rep[c]);
        first = 0;
        c = e + 1;
    }
}

/* Which threads of the detailed cores were binned, and from how many
 * merged events. */
static void put_binned_threads(FILE *f, const ct_doc *d)
{
    int first = 1;
    for (int c = 0; c < d->r.cores; c++)
        for (int k = 0; k < UNIT_COUNT; k++) {
            if (!(d->binmask[c] >> k & 1))
                continue;
            fprintf(f, "%s{\"core\":%d,\"unit\":\"%s\",\"merged_events\":%lu}",
                    first ? "" : ",", c, unit_label(k),
                    (unsigned long)d->ucount[(size_t)c * UNIT_COUNT + k]);
            first = 0;
        }
}

/* The document's head: what was written and what the budget reduced. */
static void put_other_data(FILE *f, const ct_doc *d)
{
    const emu_result *r = &d->r;
    fputs("{\"displayTimeUnit\":\"ms\",\n\"otherData\":{", f);
    fputs("\"format\":\"tpuemu-chrome-trace/1\",\"trace\":", f);
    put_str(f, r->trace);
    fputs(",\"system\":", f);
    put_str(f, r->system);
    fprintf(f, ",\"cores\":%d,\"chips\":%d,\"step_time_s\":%.17g", r->cores,
            r->chips, r->step_time_s);
    /* A --functional run of several steps records the first one: every
     * step runs the same firmware, so every step times the same. */
    int steps = r->has_values && r->n_losses > 1 ? r->n_losses : 1;
    fprintf(f, ",\"steps\":%d,\"timeline\":", steps);
    put_str(f, steps > 1 ? "one step (the first) of the run's steps; every "
                           "step runs the same firmware and times the same"
                         : "one step");
    fprintf(f, ",\"event_budget\":%lu,\"events_recorded\":%lu,"
               "\"events_written\":%lu,\"over_budget\":%s,\"detail\":",
            (unsigned long)d->max_events, (unsigned long)d->total,
            (unsigned long)d->count,
            d->count > d->max_events ? "true" : "false");
    put_str(f, level_text(d->level));
    if (d->level >= LV_GROUP) {
        fprintf(f, ",\"core_groups\":%d,\"reduced_cores\":[", d->ngroups);
        put_reduced(f, d);
        fputs("]", f);
        if (d->level >= LV_BINNED)
            fprintf(f, ",\"bins_per_reduced_core\":%d", d->nbins);
    }
    if (d->level >= LV_TRACKS) {
        fprintf(f, ",\"bins_per_binned_thread\":%d,\"binned_threads\":[",
                d->tbins);
        put_binned_threads(f, d);
        fputs("]", f);
    }
    fprintf(f, ",\"cores_timeline_copied\":%d,\"cores_breakdown_only\":%d",
            d->ncopied, d->nsynth);
    fputs("},\n\"traceEvents\":[\n", f);
}

/* One process per chip, named by its place in the torus. */
static void put_process_names(sink *s, const ct_doc *d)
{
    const emu_result *r = &d->r;
    char name[160];
    for (int c = 0; c < r->cores; c++) {
        const emu_core_result *pc = &r->per_core[c];
        if (c > 0 && r->per_core[c - 1].chip == pc->chip)
            continue;
        if (r->dim_x > 0)
            snprintf(name, sizeof name, "chip %d (x=%d, y=%d)", pc->chip,
                     pc->chip % r->dim_x, pc->chip / r->dim_x);
        else
            snprintf(name, sizeof name, "chip %d", pc->chip);
        meta(s, "process_name", pc->chip, 0, 0, name, pc->chip);
    }
}

/* A core's thread for unit u, saying where its detail is when it is not
 * its own. */
static void thread_name(const ct_doc *d, int c, int u, char *name, size_t n)
{
    int from = d->from[c];
    if (u == UNIT_CORE && from < 0)
        snprintf(name, n,
                 "core %d: breakdown only (timeline not recorded, "
                 "order of categories not known)", c);
    else if (u == UNIT_CORE && from != c)
        snprintf(name, n,
                 "core %d: critical path (not recorded: copied from "
                 "core %d, same breakdown)", c, from);
    else if (u == UNIT_CORE && d->level >= LV_GROUP && d->rep[c] != c)
        snprintf(name, n,
                 "core %d: critical path (units: see core %d, "
                 "identical)", c, d->rep[c]);
    else if (d->level >= LV_TRACKS && (d->binmask[c] >> u & 1))
        snprintf(name, n, "core %d: %s (binned: %d equal "
                 "time bins to fit the event budget)", c,
                 unit_label(u), d->tbins);
    else
        snprintf(name, n, "core %d: %s", c, unit_label(u));
}

/* Every written thread (the critical path always), its overflow lanes
 * sorted right after it. */
static void put_thread_names(sink *s, const ct_doc *d)
{
    char name[160];
    for (int c = 0; c < d->r.cores; c++) {
        int chip = d->r.per_core[c].chip;
        for (int u = 0; u < UNIT_COUNT; u++) {
            if (u != UNIT_CORE && !(d->seen[c] >> u & 1))
                continue;
            thread_name(d, c, u, name, sizeof name);
            meta(s, "thread_name", chip, c * UNIT_COUNT + u, 1, name,
                 c * UNIT_COUNT + u);
            for (int k = 1; k < CHROME_LANES; k++) {
                if (!(d->lanes[c * UNIT_COUNT + u] >> k & 1))
                    continue;
                snprintf(name, sizeof name, "core %d: %s (overlapping, %d)",
                         c, unit_label(u), k + 1);
                meta(s, "thread_name", chip, lane_tid(c, u, k), 1, name,
                     c * UNIT_COUNT + u);
            }
        }
    }
}

/* Streamed into the outfile's temporary (SPEC.md: no partial output): a
 * buffer of the whole text could reach hundreds of MB here. */
static tpu_status ct_write(ct_doc *d, FILE *f, const char *path,
                           size_t *written, tpu_error *err)
{
    sink s = {.f = f, .r = &d->r, .first = 1, .from = d->from,
              .lanes = d->lanes, .memo = &d->memo};
    put_other_data(f, d);
    memset(d->seen, 0, sizeof(unsigned) * d->r.cores);
    put_process_names(&s, d);
    if (!d->oom)
        d->oom = !ct_events(d, &s);
    put_thread_names(&s, d);
    fputs("\n]}\n", f);
    if (d->oom)
        return tpu_fail(err, TPU_ERR_SYSTEM, "%s: out of memory", path);
    if (fflush(f) != 0 || ferror(f))
        return tpu_fail(err, TPU_ERR_INPUT, "%s: cannot write: %s", path,
                        strerror(errno));
    if (written)
        *written = s.n;
    return TPU_OK;
}

/* The steps: every core given a timeline, the full count, the reduction
 * to the budget, then the document. */
tpu_status chrome_trace_write_to(const emu_result *r, outfile *o,
                                 size_t max_events, size_t *written,
                                 tpu_error *err)
{
    if (!o || !o->f)
        return tpu_fail(err, TPU_ERR_INPUT, "chrome trace: no output file");
    const char *path = o->name;
    if (!r || !r->per_core || r->cores <= 0)
        return tpu_fail(err, TPU_ERR_INPUT, "%s: no per-core results", path);
    ct_doc d;
    memset(&d, 0, sizeof d);
    tpu_status st = ct_timelines(&d, r, path, err);
    if (st) {
        ct_free(&d);
        return st;
    }
    int n = r->cores;
    d.max_events = max_events ? max_events : CHROME_TRACE_MAX_EVENTS;
    if (ct_count_full(&d)) {
        d.rep = malloc(sizeof(int) * n);
        d.seen = calloc((size_t)n, sizeof(unsigned));
        d.lanes = calloc((size_t)n * UNIT_COUNT, 1);
        d.binmask = calloc((size_t)n, 1);
        d.ucount = calloc((size_t)n * UNIT_COUNT, sizeof(size_t));
    }
    if (!d.rep || !d.seen || !d.lanes || !d.binmask || !d.ucount ||
        ct_reduce(&d) < 0) {
        ct_free(&d);
        return tpu_fail(err, TPU_ERR_SYSTEM, "%s: out of memory", path);
    }
    st = ct_write(&d, o->f, path, written, err);
    ct_free(&d);
    return st;
}
