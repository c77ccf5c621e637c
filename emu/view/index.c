/* view_index — the indexes a frame is drawn from, built once per result:
 * each core's events by unit in start order (view_lane), the timeline's
 * rows (identical cores and replicas folded into one), core 0's layers by
 * time (the layers panel) and the layer lane's spans.  No SDL. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/view/layout.h"

const emu_event *view_lane_ev(const view_app *a, int core, int unit,
                              size_t i)
{
    return &a->r.per_core[a->src[core]].events[a->lanes[core * UNIT_COUNT + unit].idx[i]];
}

typedef struct {
    double t0;
    uint32_t i;
} t0_idx;

static int by_t0(const void *x, const void *y)
{
    const t0_idx *a = x, *b = y;
    if (a->t0 != b->t0)
        return a->t0 < b->t0 ? -1 : 1;
    return a->i < b->i ? -1 : a->i > b->i;
}

/* Same step time and breakdown: the engine's figures for a mirrored
 * replica are its twin's. */
static int same_figures(const emu_core_result *c, const emu_core_result *q)
{
    if (q->step_time_s != c->step_time_s)
        return 0;
    for (int k = 0; k < CAT_COUNT; k++)
        if (fabs(q->breakdown_s[k] - c->breakdown_s[k]) > 1e-12 * c->step_time_s)
            return 0;
    return 1;
}

/* Does core c copy recorded core q?  Either c has no events of its own
 * (the engine left a mirrored replica's timeline out) and q's figures, or
 * c holds event for event the same timeline (the engine copies a mirrored
 * replica's timeline on small systems).  Compared field by field: struct
 * padding is not data. */
static int core_copies(const emu_core_result *c, const emu_core_result *q)
{
    if (!q->n_events || !same_figures(c, q))
        return 0;
    if (!c->n_events)
        return 1;
    if (c->n_events != q->n_events)
        return 0;
    for (size_t i = 0; i < c->n_events; i++) {
        const emu_event *x = &c->events[i], *y = &q->events[i];
        if (x->t0 != y->t0 || x->t1 != y->t1 || x->unit != y->unit || x->cat != y->cat ||
            x->phase != y->phase || x->opcode != y->opcode || x->layer != y->layer ||
            x->count != y->count || x->bytes != y->bytes || x->flops != y->flops)
            return 0;
    }
    return 1;
}

/* rep0_core[s]: replica 0's core of shard s, or NULL when the result's
 * replica/shard fields do not describe cpr shards per replica. */
static int *shard_map(const emu_result *r)
{
    int cpr = r->cores_per_replica;
    if (cpr < 1 || r->replicas < 1 || (long)cpr * r->replicas != r->cores)
        return NULL;
    int *m = malloc(sizeof(int) * (size_t)cpr);
    if (!m)
        return NULL;
    for (int s = 0; s < cpr; s++)
        m[s] = -1;
    for (int c = 0; c < r->cores; c++) {
        const emu_core_result *pc = &r->per_core[c];
        if (pc->replica < 0 || pc->replica >= r->replicas || pc->shard < 0 ||
            pc->shard >= cpr || (pc->replica == 0 && m[pc->shard] >= 0)) {
            free(m);
            return NULL;
        }
        if (pc->replica == 0)
            m[pc->shard] = c;
    }
    for (int s = 0; s < cpr; s++)
        if (m[s] < 0) {
            free(m);
            return NULL;
        }
    return m;
}

/* Rows: replica 0's cores (and any core that copies none) one row each,
 * a run of consecutive cores drawn from the same recorded core one row
 * (a v3-2048 data-parallel step is two rows, not 2048), then one row per
 * run of replicas that copy replica 0 shard by shard (a spatially
 * partitioned v3-2048 step is replica 0's cores plus one row). */
static int build_rows(view_app *a, const int *map)
{
    const emu_result *r = &a->r;
    int nrep = map ? r->replicas : 0;
    char *grouped = calloc((size_t)(nrep > 0 ? nrep : 1), 1);
    a->rows = malloc(sizeof *a->rows * (r->cores > 0 ? r->cores : 1));
    if (!a->rows || !grouped) {
        free(grouped);
        return 0;
    }
    /* Data-parallel runs (one core per replica) keep the core-run rows. */
    if (map && r->cores_per_replica > 1) {
        for (int q = 1; q < nrep; q++)
            grouped[q] = 1;
        for (int c = 0; c < r->cores; c++) {
            const emu_core_result *pc = &r->per_core[c];
            if (pc->replica > 0 && (a->src[c] != map[pc->shard] || c == map[pc->shard]))
                grouped[pc->replica] = 0;
        }
    }
    a->n_rows = 0;
    for (int c = 0; c < r->cores; c++) {
        if (nrep && grouped[r->per_core[c].replica])
            continue;
        view_row *p = a->n_rows ? &a->rows[a->n_rows - 1] : NULL;
        if (p && a->src[c] != c && p->src == a->src[c] && p->first != p->src &&
            p->last == c - 1) {
            p->last = c;
            p->ncores++;
            continue;
        }
        a->rows[a->n_rows++] = (view_row){c, c, a->src[c], -1, -1, 1};
    }
    for (int q = 1; q < nrep; q++) {
        if (!grouped[q])
            continue;
        view_row g = {-1, -1, -1, q, q, 0};
        while (g.rep1 + 1 < nrep && grouped[g.rep1 + 1])
            g.rep1++;
        for (int c = 0; c < r->cores; c++) {
            const emu_core_result *pc = &r->per_core[c];
            if (pc->replica < g.rep0 || pc->replica > g.rep1)
                continue;
            if (g.first < 0 || (pc->replica == g.rep0 && pc->shard == 0 &&
                                r->per_core[g.first].shard != 0))
                g.first = c;
            g.last = c;
            g.ncores++;
        }
        g.src = a->src[g.first];
        a->rows[a->n_rows++] = g;
        q = g.rep1;
    }
    free(grouped);
    return 1;
}

/* A layer's critical-path time on core 0, all categories. */
double view_layer_s(const emu_result *r, int l)
{
    const double *t = r->layer_time_s + (size_t)l * CAT_COUNT;
    double s = 0;
    for (int k = 0; k < CAT_COUNT; k++)
        s += t[k];
    return s;
}

typedef struct {
    int layer;
    double s;
} lay_time;

/* Largest first, ties in graph order: the order of `tpuemu run --layers`
 * (emu/cli/run.c print_layers), so the panel and the table agree. */
static int by_time(const void *x, const void *y)
{
    const lay_time *a = x, *b = y;
    if (a->s != b->s)
        return a->s < b->s ? 1 : -1;
    return a->layer - b->layer;
}

/* Sorts core 0's layers with time (a report's layers[]); 0 when out of
 * memory.  A result without per-layer times leaves the list empty. */
static int layers_index(view_app *a)
{
    const emu_result *r = &a->r;
    a->lay_n = 0;
    a->lay_sum = 0;
    a->lrow0 = 0;
    if (r->n_layers <= 0 || !r->layer_time_s)
        return 1;
    lay_time *lt = malloc(sizeof *lt * (size_t)r->n_layers);
    a->lay_order = malloc(sizeof(int) * (size_t)r->n_layers);
    if (!lt || !a->lay_order) {
        free(lt);
        return 0;
    }
    int m = 0;
    for (int l = 0; l < r->n_layers; l++) {
        double s = view_layer_s(r, l);
        a->lay_sum += s;
        if (s > 0)
            lt[m++] = (lay_time){l, s};
    }
    qsort(lt, (size_t)m, sizeof *lt, by_time);
    for (int i = 0; i < m; i++)
        a->lay_order[i] = lt[i].layer;
    a->lay_n = m;
    free(lt);
    return 1;
}

int view_index(view_app *a)
{
    view_unindex(a);
    a->has_events = 0;
    a->lanes = calloc((size_t)a->r.cores * UNIT_COUNT, sizeof *a->lanes);
    a->src = malloc(sizeof(int) * (a->r.cores > 0 ? a->r.cores : 1));
    if (!a->lanes || !a->src)
        return 0;
    for (int c = 0; c < a->r.cores; c++)
        a->src[c] = c;
    if (!layers_index(a))
        return 0;
    /* A replica's core that copies the same-shard core of replica 0 is
     * drawn from it (and not indexed twice). */
    int *map = shard_map(&a->r);
    if (map)
        for (int c = 0; c < a->r.cores; c++) {
            const emu_core_result *pc = &a->r.per_core[c];
            int q = map[pc->shard];
            if (pc->replica > 0 && core_copies(pc, &a->r.per_core[q]))
                a->src[c] = q;
        }
    for (int c = 0; c < a->r.cores; c++) {
        if (a->src[c] != c)
            continue;
        const emu_core_result *pc = &a->r.per_core[c];
        size_t cnt[UNIT_COUNT] = {0};
        for (size_t i = 0; i < pc->n_events; i++)
            if (pc->events[i].unit < UNIT_COUNT)
                cnt[pc->events[i].unit]++;
        for (int u = 0; u < UNIT_COUNT; u++) {
            view_lane *L = &a->lanes[c * UNIT_COUNT + u];
            if (!cnt[u])
                continue;
            L->idx = malloc(cnt[u] * sizeof *L->idx);
            L->pmax = malloc(cnt[u] * sizeof *L->pmax);
            if (!L->idx || !L->pmax) {
                free(map);
                return 0;
            }
        }
        for (size_t i = 0; i < pc->n_events; i++) {
            int u = pc->events[i].unit;
            if (u < UNIT_COUNT) {
                view_lane *L = &a->lanes[c * UNIT_COUNT + u];
                L->idx[L->n++] = (uint32_t)i;
            }
        }
        for (int u = 0; u < UNIT_COUNT; u++) {
            view_lane *L = &a->lanes[c * UNIT_COUNT + u];
            if (!L->n)
                continue;
            t0_idx *tmp = malloc(L->n * sizeof *tmp);
            if (!tmp) {
                free(map);
                return 0;
            }
            for (size_t i = 0; i < L->n; i++)
                tmp[i] = (t0_idx){pc->events[L->idx[i]].t0, L->idx[i]};
            qsort(tmp, L->n, sizeof *tmp, by_t0);
            for (size_t i = 0; i < L->n; i++)
                L->idx[i] = tmp[i].i;
            free(tmp);
            double m = -INFINITY;
            for (size_t i = 0; i < L->n; i++) {
                m = fmax(m, pc->events[L->idx[i]].t1);
                L->pmax[i] = m;
            }
            a->has_events = 1;
        }
    }
    /* Other cores the engine did not record borrow the rows of the first
     * recorded core with the same step time and breakdown. */
    for (int c = 0; c < a->r.cores; c++) {
        const emu_core_result *pc = &a->r.per_core[c];
        if (pc->n_events || a->src[c] != c)
            continue;
        for (int q = 0; q < a->r.cores; q++) {
            const emu_core_result *pq = &a->r.per_core[q];
            if (pq->n_events && same_figures(pc, pq)) {
                a->src[c] = a->src[q];
                break;
            }
        }
    }
    for (int c = 0; c < a->r.cores; c++)
        if (a->src[c] != c)
            for (int u = 0; u < UNIT_COUNT; u++)
                a->lanes[c * UNIT_COUNT + u] = a->lanes[a->src[c] * UNIT_COUNT + u];
    int ok = build_rows(a, map);
    free(map);
    return ok;
}

void view_unindex(view_app *a)
{
    if (a->lanes)
        for (int i = 0; i < a->r.cores * UNIT_COUNT; i++) {
            if (a->src && a->src[i / UNIT_COUNT] != i / UNIT_COUNT)
                continue; /* borrowed from a twin */
            free(a->lanes[i].idx);
            free(a->lanes[i].pmax);
        }
    free(a->lanes);
    free(a->src);
    free(a->rows);
    free(a->lay_order);
    a->lay_order = NULL;
    a->lay_n = 0;
    free(a->spans);
    a->spans = NULL;
    a->n_spans = 0;
    a->spans_core = -1;
    a->sel_span = -1;
    a->lanes = NULL;
    a->src = NULL;
    a->rows = NULL;
    a->n_rows = 0;
}

/* First index whose running-max end reaches t. */
size_t view_lane_first(const view_lane *L, double t)
{
    size_t lo = 0, hi = L->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (L->pmax[mid] < t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The lane's core: the first shown row's (drawn from its src core). */
static int lane_core(const view_app *a)
{
    if (!a->has_events || a->n_rows <= 0)
        return -1;
    int k = a->row0 < a->n_rows ? a->row0 : a->n_rows - 1;
    return a->rows[k < 0 ? 0 : k].first;
}

int view_layers_sync(view_app *a)
{
    int core = lane_core(a);
    if (core == a->spans_core && (a->spans || core < 0))
        return 1;
    free(a->spans);
    a->spans = NULL;
    a->n_spans = 0;
    a->sel_span = -1;
    a->spans_core = core;
    if (core < 0)
        return 1;
    const view_lane *L = &a->lanes[core * UNIT_COUNT + UNIT_CORE];
    a->spans = malloc(sizeof *a->spans * (L->n ? L->n : 1));
    if (!a->spans)
        return 0;
    /* The critical path is in time order: a change of layer or phase
     * starts a span (a layer that comes back later is a span again). */
    for (size_t i = 0; i < L->n; i++) {
        const emu_event *e = view_lane_ev(a, core, UNIT_CORE, i);
        view_span *p = a->n_spans ? &a->spans[a->n_spans - 1] : NULL;
        if (p && p->layer == e->layer && p->phase == e->phase) {
            p->t1 = fmax(p->t1, e->t1);
            p->n++;
            continue;
        }
        a->spans[a->n_spans++] = (view_span){e->t0, e->t1, e->layer, e->phase, i, 1};
    }
    return 1;
}
