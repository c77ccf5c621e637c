#include "emu/chrome_trace.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "emu/rfile.h"

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

static void emit(sink *s, const emu_core_result *pc, const emu_event *e,
                 int coarse)
{
    s->n++;
    s->nu[e->unit]++;
    if (!s->f)
        return;
    const emu_result *r = s->r;
    const char *ln = coarse ? NULL : layer_name(r, e->layer);
    const char *cat = emu_cat_name((emu_cat)e->cat);
    sep(s);
    fputs("{\"ph\":\"X\",\"name\":", s->f);
    if (e->unit == UNIT_CORE || !ln)
        put_str(s->f, cat);
    else
        put_str(s->f, ln);
    fputs(",\"cat\":", s->f);
    put_str(s->f, cat);
    int lane = pick_lane(s, pc->core, e->unit, e->t0, e->t1);
    fprintf(s->f, ",\"pid\":%d,\"tid\":%d", pc->chip,
            lane_tid(pc->core, e->unit, lane));
    put_span(s->f, e->t0, e->t1);
    fputs(",\"args\":{", s->f);
    if (coarse)
        fputs("\"layer\":\"(several: merged to fit the event budget)\"", s->f);
    else {
        fputs("\"layer\":", s->f);
        put_str(s->f, ln ? ln : "");
        fputs(",\"phase\":", s->f);
        put_str(s->f, emu_phase_name((emu_phase)e->phase));
        fprintf(s->f, ",\"opcode\":%u", (unsigned)e->opcode);
    }
    fprintf(s->f, ",\"count\":%lu", (unsigned long)e->count);
    if (e->bytes != 0)
        fprintf(s->f, ",\"bytes\":%.17g", e->bytes);
    if (e->flops != 0)
        fprintf(s->f, ",\"flops\":%.17g", e->flops);
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
    }
    for (size_t i = 0; own && i < pc->n_events; i++) {
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
    for (int k = 0; k < nbins; k++) {
        int dom = 0;
        double tot = 0;
        for (int c = 0; c < CAT_COUNT; c++) {
            tot += acc[k][c];
            if (acc[k][c] > acc[k][dom])
                dom = c;
        }
        if (!(tot > 0))
            continue;
        s->n++;
        s->nu[UNIT_CORE]++;
        if (!s->f)
            continue;
        sep(s);
        fputs("{\"ph\":\"X\",\"name\":", s->f);
        put_str(s->f, emu_cat_name((emu_cat)dom));
        fputs(",\"cat\":", s->f);
        put_str(s->f, emu_cat_name((emu_cat)dom));
        fprintf(s->f, ",\"pid\":%d,\"tid\":%d", pc->chip,
                pc->core * UNIT_COUNT + UNIT_CORE);
        put_span(s->f, k * w, k + 1 == nbins ? step : (k + 1) * w);
        fputs(",\"args\":{\"binned\":true", s->f);
        for (int c = 0; c < CAT_COUNT; c++)
            if (acc[k][c] > 0)
                fprintf(s->f, ",\"%s_s\":%.9g", emu_cat_name((emu_cat)c),
                        acc[k][c]);
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
    for (size_t i = 0; i < pc->n_events; i++) {
        const emu_event *e = &pc->events[i];
        if (e->unit != unit)
            continue;
        double a = fmin(fmax(e->t0, 0), end), b = fmin(fmax(e->t1, a), end);
        int k0 = (int)(a / w);
        if (k0 >= nbins)
            k0 = nbins - 1;
        for (int k = k0; k < nbins && k * w < b; k++) {
            double lo = fmax(a, k * w), hi = fmin(b, (k + 1) * w);
            if (hi > lo)
                ubin_add(&bin[k], lo, hi, e);
        }
        /* The start's bin takes the totals (a zero-length event too). */
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
    int tid = lane_tid(pc->core, unit, 0);
    for (int k = 0; k < nbins; k++) {
        const ubin *b = &bin[k];
        if (!b->used)
            continue;
        s->n++;
        s->nu[unit]++;
        if (!s->f)
            continue;
        int dom = 0;
        for (int c = 0; c < CAT_COUNT; c++)
            if (b->cat_s[c] > b->cat_s[dom])
                dom = c;
        const char *cat = emu_cat_name((emu_cat)dom);
        const char *ln = layer_name(s->r, b->best_layer);
        sep(s);
        fputs("{\"ph\":\"X\",\"name\":", s->f);
        put_str(s->f, ln ? ln : cat);
        fputs(",\"cat\":", s->f);
        put_str(s->f, cat);
        fprintf(s->f, ",\"pid\":%d,\"tid\":%d", pc->chip, tid);
        put_span(s->f, b->lo, b->hi);
        fputs(",\"args\":{\"binned\":true,\"layer\":", s->f);
        put_str(s->f, ln ? ln : "");
        fprintf(s->f, ",\"events\":%lu,\"count\":%lu", b->events, b->count);
        for (int c = 0; c < CAT_COUNT; c++)
            if (b->cat_s[c] > 0)
                fprintf(s->f, ",\"%s_s\":%.9g", emu_cat_name((emu_cat)c),
                        b->cat_s[c]);
        if (b->bytes != 0)
            fprintf(s->f, ",\"bytes\":%.17g", b->bytes);
        if (b->flops != 0)
            fprintf(s->f, ",\"flops\":%.17g", b->flops);
        fputs("}}", s->f);
    }
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

/* Writes the whole document (or counts its X events when s->f is NULL).
 * LV_TRACKS: binmask[c] has a bit per unit of core c cut into tbins bins.
 * Returns 0 when out of memory. */
static int write_all(sink *s, int level, const int *rep, unsigned *seen,
                     int nbins, const uint8_t *binmask, int tbins)
{
    const emu_result *r = s->r;
    for (int c = 0; c < r->cores; c++) {
        const emu_core_result *pc = &r->per_core[c];
        int copied = s->from && s->from[c] != c;
        int reduced = (level >= LV_GROUP && rep[c] != c) || copied;
        int binned = reduced && level >= LV_BINNED;
        int merge = copied && level < LV_MERGE ? 0
                    : level == LV_FULL         ? 0
                    : (reduced && level >= LV_COARSE) ? 2
                                                      : 1;
        int path_only = (copied && level < LV_MERGE) || reduced;
        unsigned bm = binmask && !reduced ? binmask[c] : 0;
        /* counting: a timeline shared with an earlier core counts as it */
        int fresh = 1;
        memo_ent *m = s->f ? NULL
                      : bm ? memo_find(s->memo, pc, 4, tbins, (int)bm, &fresh)
                           : memo_find(s->memo, pc, 3, binned ? -nbins : merge,
                                       path_only, &fresh);
        if (m && !fresh) {
            s->n += m->count;
            seen[c] |= m->seen;
            continue;
        }
        size_t n0 = s->n;
        unsigned u = 0;
        if (binned) {
            u = 1u << UNIT_CORE;
            emit_binned(s, pc, nbins);
        } else {
            unsigned skip = path_only ? ~(1u << UNIT_CORE) : bm;
            emit_core(s, pc, merge, skip, &u);
            for (int k = 0; k < UNIT_COUNT; k++) {
                if (!(bm >> k & 1))
                    continue;
                size_t n0k = s->nu[k];
                if (k == UNIT_CORE)
                    emit_binned(s, pc, tbins);
                else if (!emit_unit_binned(s, pc, k, tbins))
                    return 0;
                if (s->nu[k] > n0k)
                    u |= 1u << k;
            }
        }
        seen[c] |= u;
        if (m) {
            m->count = s->n - n0;
            m->seen = u;
        }
    }
    return 1;
}

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

tpu_status chrome_trace_write_to(const emu_result *r, outfile *o,
                                 size_t max_events, size_t *written,
                                 tpu_error *err)
{
    if (!o || !o->f)
        return tpu_fail(err, TPU_ERR_INPUT, "chrome trace: no output file");
    const char *path = o->name;
    if (!r || !r->per_core || r->cores <= 0)
        return tpu_fail(err, TPU_ERR_INPUT, "%s: no per-core results", path);
    /* The engine may simulate one core of a group of identical replicas
     * and record only its timeline.  A core without events takes the
     * critical path of the first core that has one and the same breakdown
     * (stated in its thread name and in otherData); with no such twin it
     * gets its breakdown as consecutive category spans, marked "order not
     * recorded".  A result with no timeline at all is refused. */
    emu_core_result *cores = malloc(sizeof *cores * r->cores);
    int *from = malloc(sizeof(int) * r->cores);
    emu_event *synth = calloc((size_t)r->cores * CAT_COUNT, sizeof *synth);
    if (!cores || !from || !synth) {
        free(cores);
        free(from);
        free(synth);
        return tpu_fail(err, TPU_ERR_SYSTEM, "%s: out of memory", path);
    }
    int any = 0, ncopied = 0, nsynth = 0;
    for (int c = 0; c < r->cores; c++) {
        const emu_core_result *pc = &r->per_core[c];
        cores[c] = *pc;
        from[c] = c;
        if (pc->n_events && !pc->events) {
            free(cores);
            free(from);
            free(synth);
            return tpu_fail(err, TPU_ERR_INPUT, "%s: core %d: events missing", path, c);
        }
        any |= pc->n_events > 0;
    }
    if (!any) {
        free(cores);
        free(from);
        free(synth);
        return tpu_fail(err, TPU_ERR_INPUT,
                        "%s: the result has no recorded timeline (the step "
                        "must be simulated with the timeline recorded)",
                        path);
    }
    for (int c = 0; c < r->cores; c++) {
        const emu_core_result *pc = &r->per_core[c];
        if (pc->n_events || !(pc->step_time_s > 0))
            continue;
        int twin = -1;
        for (int q = 0; q < r->cores && twin < 0; q++) {
            const emu_core_result *pq = &r->per_core[q];
            if (!pq->n_events || pq->step_time_s != pc->step_time_s)
                continue;
            int same = 1;
            for (int k = 0; k < CAT_COUNT; k++)
                same &= fabs(pq->breakdown_s[k] - pc->breakdown_s[k]) <=
                        1e-12 * pc->step_time_s;
            if (same)
                twin = q;
        }
        if (twin >= 0) {
            cores[c].events = r->per_core[twin].events;
            cores[c].n_events = r->per_core[twin].n_events;
            from[c] = twin;
            ncopied++;
        } else {
            emu_event *e = &synth[(size_t)c * CAT_COUNT];
            size_t n = 0;
            double t = 0;
            for (int k = 0; k < CAT_COUNT; k++)
                if (pc->breakdown_s[k] > 0) {
                    e[n] = (emu_event){t, t + pc->breakdown_s[k], UNIT_CORE,
                                       (uint8_t)k, PHASE_FWD, 0, -1, 1, 0, 0};
                    t += pc->breakdown_s[k];
                    n++;
                }
            cores[c].events = e;
            cores[c].n_events = n;
            from[c] = -1;
            nsynth++;
        }
    }
    emu_result rcopy = *r;
    rcopy.per_core = cores;
    r = &rcopy;
    memo_tab memo = {NULL, 0, 0};
    size_t total = 0;
    {
        unsigned *u0 = calloc((size_t)r->cores, sizeof(unsigned));
        sink cnt = {.r = r, .first = 1, .from = from, .memo = &memo};
        int *id = malloc(sizeof(int) * r->cores);
        if (!u0 || !id) {
            free(u0);
            free(id);
            free(cores);
            free(from);
            free(synth);
            memo_free(&memo);
            return tpu_fail(err, TPU_ERR_SYSTEM, "%s: out of memory", path);
        }
        for (int c = 0; c < r->cores; c++)
            id[c] = c;
        write_all(&cnt, LV_FULL, id, u0, 0, NULL, 0);
        total = cnt.n;
        free(u0);
        free(id);
    }
    if (!max_events)
        max_events = CHROME_TRACE_MAX_EVENTS;

    int *rep = malloc(sizeof(int) * r->cores);
    unsigned *seen = calloc((size_t)r->cores, sizeof(unsigned));
    uint8_t *lanes = calloc((size_t)r->cores * UNIT_COUNT, 1);
    uint8_t *binmask = calloc((size_t)r->cores, 1);
    size_t *ucount = calloc((size_t)r->cores * UNIT_COUNT, sizeof(size_t));
    if (!rep || !seen || !lanes || !binmask || !ucount) {
        free(rep);
        free(seen);
        free(lanes);
        free(binmask);
        free(ucount);
        free(cores);
        free(from);
        free(synth);
        memo_free(&memo);
        return tpu_fail(err, TPU_ERR_SYSTEM, "%s: out of memory", path);
    }
    for (int c = 0; c < r->cores; c++)
        rep[c] = c;
    int level = LV_FULL, ngroups = r->cores;
    size_t count = total;
    int nbins = 0, tbins = 0, oom = 0;
    while (count > max_events && level < LV_TRACKS && !oom) {
        level++;
        if (level == LV_GROUP) {
            ngroups = group_cores(r, rep, &memo);
            if (ngroups < 0) {
                free(rep);
                free(seen);
                free(lanes);
                free(binmask);
                free(ucount);
                free(cores);
                free(from);
                free(synth);
                memo_free(&memo);
                return tpu_fail(err, TPU_ERR_SYSTEM, "%s: out of memory", path);
            }
        }
        if (level == LV_BINNED) {
            /* What the representatives keep, then an equal share of the
             * rest per reduced core (at least one bin: never drop a core). */
            size_t keep = 0;
            int nred = 0;
            for (int c = 0; c < r->cores; c++) {
                if (rep[c] != c) {
                    nred++;
                    continue;
                }
                sink one = {.r = r, .first = 1, .from = from, .memo = &memo};
                unsigned u = 0;
                emit_core(&one, &r->per_core[c], 1, 0, &u);
                keep += one.n;
            }
            size_t per = nred && max_events > keep ? (max_events - keep) / nred : 1;
            nbins = per < 1 ? 1 : per > 100000 ? 100000 : (int)per;
        }
        if (level == LV_TRACKS) {
            /* The representatives alone exceed the budget (probe round 6:
             * 14,006 layers on 4 representatives, 1.57M events against
             * 1M).  Each reduced core keeps one bin, and the rest is
             * shared among the representatives' threads: a thread with
             * more merged events than a share L is cut into L equal time
             * bins, the others keep their merged events, and L is
             * bisected on the exact count (empty bins are not written),
             * keeping only shares that fit: a thread with few events
             * leaves its unused share to the others. */
            nbins = 1;
            size_t red = 0, most = 0;
            for (int c = 0; c < r->cores; c++) {
                sink one = {.r = r, .first = 1, .from = from, .memo = &memo};
                unsigned u = 0;
                if (rep[c] != c || from[c] != c) {
                    emit_binned(&one, &r->per_core[c], 1);
                    red += one.n;
                    continue;
                }
                emit_core(&one, &r->per_core[c], 1, 0, &u);
                for (int k = 0; k < UNIT_COUNT; k++) {
                    ucount[(size_t)c * UNIT_COUNT + k] = one.nu[k];
                    if (one.nu[k] > most)
                        most = one.nu[k];
                }
            }
            size_t left = max_events > red ? max_events - red : 0;
            int lo = 1, hi = most > 100000000 ? 100000000 : (int)most;
            while (lo < hi && !oom) {
                int mid = lo + (hi - lo + 1) / 2;
                if (tracks_need(r, ucount, mid, left, &oom) <= left)
                    lo = mid;
                else
                    hi = mid - 1;
            }
            tbins = lo;
            for (int c = 0; c < r->cores; c++)
                for (int k = 0; k < UNIT_COUNT; k++)
                    if (ucount[(size_t)c * UNIT_COUNT + k] > (size_t)tbins)
                        binmask[c] |= (uint8_t)(1u << k);
        }
        sink cs = {.r = r, .first = 1, .from = from, .memo = &memo};
        memset(seen, 0, sizeof(unsigned) * r->cores);
        oom = !write_all(&cs, level, rep, seen, nbins,
                         level == LV_TRACKS ? binmask : NULL, tbins);
        count = cs.n;
    }

    /* Streamed into the outfile's temporary (SPEC.md: no partial output):
     * a buffer of the whole text could reach hundreds of MB here. */
    FILE *f = o->f;
    sink s = {.f = f, .r = r, .first = 1, .from = from, .lanes = lanes, .memo = &memo};
    fputs("{\"displayTimeUnit\":\"ms\",\n\"otherData\":{", f);
    fputs("\"format\":\"tpuemu-chrome-trace/1\",\"trace\":", f);
    put_str(f, r->trace);
    fputs(",\"system\":", f);
    put_str(f, r->system);
    fprintf(f, ",\"cores\":%d,\"chips\":%d,\"step_time_s\":%.17g", r->cores,
            r->chips, r->step_time_s);
    fprintf(f, ",\"event_budget\":%lu,\"events_recorded\":%lu,"
               "\"events_written\":%lu,\"over_budget\":%s,\"detail\":",
            (unsigned long)max_events, (unsigned long)total,
            (unsigned long)count, count > max_events ? "true" : "false");
    put_str(f, level_text(level));
    if (level >= LV_GROUP) {
        fprintf(f, ",\"core_groups\":%d,\"reduced_cores\":[", ngroups);
        /* Ranges of reduced cores with their representative. */
        int firstr = 1;
        for (int c = 0; c < r->cores;) {
            if (rep[c] == c) {
                c++;
                continue;
            }
            int e = c;
            while (e + 1 < r->cores && rep[e + 1] == rep[c])
                e++;
            fprintf(f, "%s{\"cores\":\"%d-%d\",\"detail_in_core\":%d}",
                    firstr ? "" : ",", c, e, rep[c]);
            firstr = 0;
            c = e + 1;
        }
        fputs("]", f);
        if (level >= LV_BINNED)
            fprintf(f, ",\"bins_per_reduced_core\":%d", nbins);
    }
    if (level >= LV_TRACKS) {
        /* Which threads of the detailed cores were binned, and from how
         * many merged events. */
        fprintf(f, ",\"bins_per_binned_thread\":%d,\"binned_threads\":[",
                tbins);
        int firstb = 1;
        for (int c = 0; c < r->cores; c++)
            for (int k = 0; k < UNIT_COUNT; k++) {
                if (!(binmask[c] >> k & 1))
                    continue;
                fprintf(f, "%s{\"core\":%d,\"unit\":\"%s\",\"merged_events\":%lu}",
                        firstb ? "" : ",", c, unit_label(k),
                        (unsigned long)ucount[(size_t)c * UNIT_COUNT + k]);
                firstb = 0;
            }
        fputs("]", f);
    }
    fprintf(f, ",\"cores_timeline_copied\":%d,\"cores_breakdown_only\":%d",
            ncopied, nsynth);
    fputs("},\n\"traceEvents\":[\n", f);

    /* Metadata: names and order of chips and threads. */
    char name[160];
    memset(seen, 0, sizeof(unsigned) * r->cores);
    for (int c = 0; c < r->cores; c++) {
        const emu_core_result *pc = &r->per_core[c];
        int chip_first = c == 0 || r->per_core[c - 1].chip != pc->chip;
        if (chip_first) {
            if (r->dim_x > 0)
                snprintf(name, sizeof name, "chip %d (x=%d, y=%d)", pc->chip,
                         pc->chip % r->dim_x, pc->chip / r->dim_x);
            else
                snprintf(name, sizeof name, "chip %d", pc->chip);
            meta(&s, "process_name", pc->chip, 0, 0, name, pc->chip);
        }
    }
    if (!oom)
        oom = !write_all(&s, level, rep, seen, nbins,
                         level == LV_TRACKS ? binmask : NULL, tbins);
    for (int c = 0; c < r->cores; c++) {
        const emu_core_result *pc = &r->per_core[c];
        for (int u = 0; u < UNIT_COUNT; u++) {
            if (u != UNIT_CORE && !(seen[c] >> u & 1))
                continue;
            if (u == UNIT_CORE && from[c] < 0)
                snprintf(name, sizeof name,
                         "core %d: breakdown only (timeline not recorded, "
                         "order of categories not known)", c);
            else if (u == UNIT_CORE && from[c] != c)
                snprintf(name, sizeof name,
                         "core %d: critical path (not recorded: copied from "
                         "core %d, same breakdown)", c, from[c]);
            else if (u == UNIT_CORE && level >= LV_GROUP && rep[c] != c)
                snprintf(name, sizeof name,
                         "core %d: critical path (units: see core %d, "
                         "identical)", c, rep[c]);
            else if (level >= LV_TRACKS && (binmask[c] >> u & 1))
                snprintf(name, sizeof name, "core %d: %s (binned: %d equal "
                         "time bins to fit the event budget)", c,
                         unit_label(u), tbins);
            else
                snprintf(name, sizeof name, "core %d: %s", c, unit_label(u));
            meta(&s, "thread_name", pc->chip, c * UNIT_COUNT + u, 1, name,
                 c * UNIT_COUNT + u);
            /* overflow lanes of this unit, sorted right after it */
            for (int k = 1; k < CHROME_LANES; k++) {
                if (!(s.lanes[c * UNIT_COUNT + u] >> k & 1))
                    continue;
                snprintf(name, sizeof name, "core %d: %s (overlapping, %d)", c,
                         unit_label(u), k + 1);
                meta(&s, "thread_name", pc->chip, lane_tid(c, u, k), 1, name,
                     c * UNIT_COUNT + u);
            }
        }
    }
    free(lanes);
    fputs("\n]}\n", f);
    tpu_status st = TPU_OK;
    if (oom)
        st = tpu_fail(err, TPU_ERR_SYSTEM, "%s: out of memory", path);
    else if (fflush(f) != 0 || ferror(f))
        st = tpu_fail(err, TPU_ERR_INPUT, "%s: cannot write: %s", path,
                      strerror(errno));
    else if (written)
        *written = s.n;
    free(rep);
    free(seen);
    free(binmask);
    free(ucount);
    free(cores);
    free(from);
    free(synth);
    memo_free(&memo);
    return st;
}
