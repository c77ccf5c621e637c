/* Drawing the viewer's panels with SDL's renderer.  Text comes from the
 * same bitmap font as the PNG charts (one texture atlas, tinted per draw);
 * the bar panel is chart.c's breakdown chart uploaded as a texture. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/out/chart.h"
#include "emu/out/font.h"
#include "emu/params.h"
#include "firmware/isa.h"
#include "emu/view/app.h"

#define C_BG 0xF7F7F7
#define C_INK 0x202020
#define C_MUTED 0x666666
#define C_HEAD 0x263238
#define C_GRID 0xDDDDDD

static void color(view_app *a, uint32_t rgb, uint8_t alpha)
{
    SDL_SetRenderDrawColor(a->ren, (uint8_t)(rgb >> 16), (uint8_t)(rgb >> 8),
                           (uint8_t)rgb, alpha);
}

static void fill(view_app *a, int x, int y, int w, int h, uint32_t rgb)
{
    SDL_Rect rc = {x, y, w, h};
    color(a, rgb, 255);
    SDL_RenderFillRect(a->ren, &rc);
}

static void frame_rect(view_app *a, int x, int y, int w, int h, uint32_t rgb)
{
    SDL_Rect rc = {x, y, w, h};
    color(a, rgb, 255);
    SDL_RenderDrawRect(a->ren, &rc);
}

/* Glyphs per row of the font atlas: every glyph of emu/font.h (each
 * letter with each accent, about 2400) in a 384 x 481 texture, built once,
 * so drawing text stays one texture copy per character. */
#define ATLAS_COLS 64

int view_font_init(view_app *a)
{
    int n = font_glyph_count();
    int w = ATLAS_COLS * FONT_W, h = (n + ATLAS_COLS - 1) / ATLAS_COLS * FONT_H;
    SDL_Surface *s = SDL_CreateRGBSurfaceWithFormat(0, w, h, 32,
                                                    SDL_PIXELFORMAT_ARGB8888);
    if (!s)
        return 0;
    SDL_LockSurface(s);
    for (int y = 0; y < h; y++) {
        uint32_t *p = (uint32_t *)((uint8_t *)s->pixels + y * s->pitch);
        for (int x = 0; x < w; x++)
            p[x] = 0x00FFFFFFu;
    }
    for (int g = 0; g < n; g++) {
        uint8_t rows[FONT_H];
        font_glyph(g, rows);
        int gx = g % ATLAS_COLS * FONT_W, gy = g / ATLAS_COLS * FONT_H;
        for (int y = 0; y < FONT_H; y++) {
            uint32_t *p = (uint32_t *)((uint8_t *)s->pixels + (gy + y) * s->pitch);
            for (int x = 0; x < FONT_W; x++)
                if (rows[y] >> x & 1)
                    p[gx + x] = 0xFFFFFFFFu;
        }
    }
    SDL_UnlockSurface(s);
    a->font = SDL_CreateTextureFromSurface(a->ren, s);
    SDL_FreeSurface(s);
    if (!a->font)
        return 0;
    SDL_SetTextureBlendMode(a->font, SDL_BLENDMODE_BLEND);
    return 1;
}

void view_text(view_app *a, int x, int y, const char *s, int scale,
               uint32_t rgb)
{
    SDL_SetTextureColorMod(a->font, (uint8_t)(rgb >> 16), (uint8_t)(rgb >> 8),
                           (uint8_t)rgb);
    int g, k;
    for (; (k = font_next(s, &g)) > 0; s += k, x += FONT_W * scale) {
        if (g == 0) /* space */
            continue;
        SDL_Rect src = {g % ATLAS_COLS * FONT_W, g / ATLAS_COLS * FONT_H, FONT_W, FONT_H};
        SDL_Rect dst = {x, y, FONT_W * scale, FONT_H * scale};
        SDL_RenderCopy(a->ren, a->font, &src, &dst);
    }
}

/* HBM bytes as the CLI prints them: GiB from 1 GiB up, MiB below. */
static void fmt_bytes(char *buf, size_t cap, double b)
{
    const double gib = 1024.0 * 1024 * 1024;
    if (b >= gib)
        snprintf(buf, cap, "%.3g GiB", b / gib);
    else
        snprintf(buf, cap, "%.3g MiB", b / (1024.0 * 1024));
}

static void fmt_t(char *buf, size_t cap, double s)
{
    double a = fabs(s);
    if (a == 0)
        snprintf(buf, cap, "0");
    else if (a >= 1)
        snprintf(buf, cap, "%.4g s", s);
    else if (a >= 1e-3)
        snprintf(buf, cap, "%.4g ms", s * 1e3);
    else if (a >= 1e-6)
        snprintf(buf, cap, "%.4g us", s * 1e6);
    else
        snprintf(buf, cap, "%.4g ns", s * 1e9);
}

/* Decimals that resolve res in a unit of scale sc. */
static int t_decimals(double res, double sc)
{
    double r = res * sc;
    if (!(r > 0) || r >= 1)
        return 0;
    int d = (int)ceil(-log10(r) - 1e-9);
    return d > 9 ? 9 : d;
}

/* s in its own unit, with enough decimals to resolve res seconds: a
 * position deep in a long step keeps the digits the zoom needs. */
static void fmt_tp(char *buf, size_t cap, double s, double res)
{
    const char *un;
    if (s == 0) {
        snprintf(buf, cap, "0");
        return;
    }
    double sc = chart_time_unit(s, &un);
    snprintf(buf, cap, "%.*f %s", t_decimals(res, sc), s * sc, un);
}

/* Text cut to maxw pixels ("..": cut), counted in characters and cut
 * between them (emu/font.h), never inside a UTF-8 sequence. */
static void text_fit(view_app *a, int x, int y, const char *s, int maxw,
                     uint32_t rgb)
{
    char buf[1024];
    int n = maxw / FONT_W;
    if (n <= 0)
        return;
    font_fit(buf, sizeof buf, s, n, "..");
    view_text(a, x, y, buf, 1, rgb);
}

static int text_w(const char *s)
{
    return font_text_width(s, 1);
}

/* ---- lanes ----------------------------------------------------------- */

static const emu_event *lane_ev(const view_app *a, int core, int unit,
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

static int layers_index(view_app *a);

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
static size_t lane_first(const view_lane *L, double t)
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

/* ---- timeline -------------------------------------------------------- */

int view_row_height(const view_app *a)
{
    return a->units ? 14 + 4 * 12 + 6 : 16;
}

int view_rows_top(const view_app *a)
{
    return VIEW_HEADER + VIEW_AXIS + 2 + (a->has_events ? VIEW_LANE : 0);
}

int view_rows_visible(const view_app *a)
{
    int h = a->H - view_rows_top(a) + 2 - VIEW_FOOTER;
    int n = h / view_row_height(a);
    return n < 1 ? 1 : n;
}

static double t_of_x(const view_app *a, int x)
{
    int x0 = VIEW_LABELS, x1 = a->W - 10;
    return a->v0 + (a->v1 - a->v0) * (x - x0) / (double)(x1 - x0);
}

static double x_of_t(const view_app *a, double t)
{
    int x0 = VIEW_LABELS, x1 = a->W - 10;
    return x0 + (t - a->v0) / (a->v1 - a->v0) * (x1 - x0);
}

/* The pixel columns [*x0, *x1) of the span [t0, t1) in the plot, its end
 * rounded up (ceil_end) or down, starting right of the last column
 * painted (drawn) and at least one column wide: each column is painted
 * once per lane.  0 when the span starts at or past the plot's right
 * edge xr. */
static int span_cols(const view_app *a, double t0, double t1, int ceil_end,
                     int drawn, int xr, int *x0, int *x1)
{
    /* Clamped as doubles: deep in a long step a span's ends lie 1e11
     * pixels and more outside the plot, past what an int holds (the
     * conversion would be undefined: x86 gives INT_MIN, and a span
     * covering the whole window was drawn as one column). */
    double f0 = floor(x_of_t(a, t0)),
           f1 = ceil_end ? ceil(x_of_t(a, t1)) : floor(x_of_t(a, t1));
    *x0 = f0 < VIEW_LABELS ? VIEW_LABELS : f0 > xr ? xr : (int)f0;
    *x1 = f1 > xr ? xr : f1 < VIEW_LABELS ? VIEW_LABELS : (int)f1;
    if (*x0 <= drawn)
        *x0 = drawn + 1;
    if (*x1 <= *x0)
        *x1 = *x0 + 1;
    return *x0 < xr;
}

/* Draws one lane in a row band; each pixel column gets at most one
 * rectangle, and the search jumps over events hidden under a drawn pixel. */
static void draw_lane(view_app *a, int core, int unit, int y, int h)
{
    const view_lane *L = &a->lanes[core * UNIT_COUNT + unit];
    if (!L->n)
        return;
    int xr = a->W - 10;
    double px = (a->v1 - a->v0) / (xr - VIEW_LABELS);
    size_t i = lane_first(L, a->v0);
    int drawn = VIEW_LABELS - 1; /* last pixel column painted */
    while (i < L->n) {
        const emu_event *e = lane_ev(a, core, unit, i);
        if (e->t0 > a->v1)
            break;
        int x0, x1;
        if (span_cols(a, e->t0, e->t1, 1, drawn, xr, &x0, &x1)) {
            fill(a, x0, y, x1 - x0, h, chart_cat_color((emu_cat)e->cat));
            drawn = x1 - 1;
        }
        if (a->sel_ev >= 0 && a->sel_core == core && a->sel_unit == unit &&
            (long)L->idx[i] == a->sel_ev)
            frame_rect(a, x0 - 1, y - 1, x1 - x0 + 2, h + 2, 0x000000);
        /* Skip to the first event that ends right of the painted pixel. */
        double tnext = a->v0 + (drawn + 1 - VIEW_LABELS) * px;
        size_t j = lane_first(L, tnext);
        i = j > i ? j : i + 1;
        if (drawn >= xr - 1)
            break;
    }
}

static double nice(double range, int want)
{
    /* the smallest 1-2-5 step that gives at most `want` intervals */
    double raw = range / want, p = pow(10, floor(log10(raw))), m = raw / p;
    return (m <= 1.0001 ? 1 : m <= 2.0001 ? 2 : m <= 5.0001 ? 5 : 10) * p;
}

/* The time axis: ticks in the unit the visible window reads best in
 * (s, ms, us, ns), as many as fit their labels; deep in a long step the
 * labels are offsets from an origin printed once in the caption. */
static void draw_axis(view_app *a, int top)
{
    int xr = a->W - 10, pw = xr - VIEW_LABELS;
    double w = a->v1 - a->v0;
    const char *un;
    double sc = chart_time_unit(w, &un), wu = w * sc, v0u = a->v0 * sc, v1u = a->v1 * sc;
    double origin = 0, st = nice(wu, 8);
    char buf[64], cap[64];
    snprintf(buf, sizeof buf, "%.*f", t_decimals(st, 1), v1u);
    if (strlen(buf) > 5) {
        double p = pow(10, ceil(log10(wu)));
        origin = floor(v0u / p) * p;
    }
    /* Two passes: the step sets the label width, the width the step. */
    for (int pass = 0; pass < 2; pass++) {
        int d = t_decimals(st, 1), l0, l1;
        l0 = snprintf(buf, sizeof buf, "%.*f", d, v0u - origin);
        l1 = snprintf(buf, sizeof buf, "%.*f", d, v1u - origin);
        int lw = FONT_W * ((l0 > l1 ? l0 : l1) + 3);
        int want = pw / lw;
        st = nice(wu, want < 2 ? 2 : want > 10 ? 10 : want);
    }
    /* The caption: deep in a long step the origin needs every digit, and
     * "ns after 1.149303140 s" is wider than the label column: it runs on
     * into the plot and the tick labels it would cover are left out. */
    if (origin != 0) {
        char ob[48];
        fmt_tp(ob, sizeof ob, origin / sc, pow(10, ceil(log10(wu))) / sc);
        snprintf(cap, sizeof cap, "%s after %s", un, ob);
    } else
        snprintf(cap, sizeof cap, "time (%s)", un);
    text_fit(a, 6, VIEW_HEADER + 5, cap, xr - 6, C_INK);
    int d = t_decimals(st, 1), last_r = 6 + text_w(cap);
    if (last_r < VIEW_LABELS - 6)
        last_r = VIEW_LABELS - 6;
    for (double tu = ceil(v0u / st) * st; tu <= v1u + 1e-9 * st; tu += st) {
        int x = (int)x_of_t(a, tu / sc);
        if (x > xr)
            break;
        fill(a, x, top, 1, a->H - top - VIEW_FOOTER, C_GRID);
        double v = tu - origin;
        if (fabs(v) < 0.5 * st * 1e-6)
            v = 0;
        snprintf(buf, sizeof buf, "%.*f", d, v);
        int tw = text_w(buf), lx = x - tw / 2;
        if (lx + tw > xr)
            lx = xr - tw; /* the last label stays inside the plot */
        if (lx < VIEW_LABELS)
            lx = VIEW_LABELS;
        if (lx < last_r + 6)
            continue;
        view_text(a, lx, VIEW_HEADER + 5, buf, 1, C_INK);
        last_r = lx + tw;
    }
}

/* "replicas 1-7"; "replica 3" for one. */
static void fmt_reps(char *buf, size_t cap, const view_row *rw, const char *one,
                     const char *many)
{
    if (rw->rep0 == rw->rep1)
        snprintf(buf, cap, "%s %d", one, rw->rep0);
    else
        snprintf(buf, cap, "%s %d-%d", many, rw->rep0, rw->rep1);
}

/* A replica group's label.  The full sentence, "replicas 1-7 (56 cores):
 * same as replica 0", is wider than the label column at any window size:
 * the row says "replicas 1-7 = 0" and hovering the label puts the
 * sentence and the cores in the footer. */
static void draw_group_label(view_app *a, const view_row *rw, int y)
{
    char reps[48], same[48], n[48];
    int room = VIEW_LABELS - 14;
    fmt_reps(reps, sizeof reps, rw, "replica", "replicas");
    if (a->units) {
        int r2 = room - text_w("vector") - 6;
        text_fit(a, 6, y, reps, room, C_INK);
        snprintf(same, sizeof same, "= replica 0");
        if (text_w(same) > r2)
            snprintf(same, sizeof same, "= 0");
        text_fit(a, 6, y + 13, same, r2, 0xA03000);
        snprintf(n, sizeof n, "%d cores", rw->ncores);
        text_fit(a, 6, y + 25, n, r2, C_MUTED);
        return;
    }
    snprintf(same, sizeof same, " = 0");
    if (text_w(reps) + text_w(same) > room)
        fmt_reps(reps, sizeof reps, rw, "rep", "reps");
    text_fit(a, 6, y, reps, room, C_INK);
    int x = 6 + text_w(reps);
    text_fit(a, x, y, same, room + 6 - x, 0xA03000);
}

/* A row's label in the label column: the cores, which recorded core the
 * row is drawn from, the chip(s).  With unit rows the unit names are
 * right-aligned on lines 2-5, so the other lines stay left of them. */
static void draw_row_label(view_app *a, const view_row *rw, int y)
{
    char core[48], same[48], chip[48];
    int room = VIEW_LABELS - 14;
    if (rw->rep0 >= 1) {
        draw_group_label(a, rw, y);
        return;
    }
    const emu_core_result *p0 = &a->r.per_core[rw->first],
                          *p1 = &a->r.per_core[rw->last];
    if (rw->first == rw->last)
        snprintf(core, sizeof core, "core %d", rw->first);
    else
        snprintf(core, sizeof core, "cores %d-%d", rw->first, rw->last);
    same[0] = 0;
    if (rw->src != rw->first)
        snprintf(same, sizeof same, "same as %d", rw->src);
    if (p0->chip == p1->chip)
        snprintf(chip, sizeof chip, "chip %d", p0->chip);
    else
        snprintf(chip, sizeof chip, "chips %d-%d", p0->chip, p1->chip);
    if (a->units) {
        text_fit(a, 6, y, core, room, C_INK);
        int l = 1;
        if (same[0])
            text_fit(a, 6, y + 14 + (l++ - 1) * 12 - 1, same, room - text_w("vector") - 6,
                     0xA03000);
        text_fit(a, 6, y + 14 + (l - 1) * 12 - 1, chip, room - text_w("vector") - 6, C_MUTED);
        return;
    }
    /* One line: "cores 1-2047: same as 0", shortened until it fits. */
    if (!same[0]) {
        text_fit(a, 6, y, core, room, C_INK);
        return;
    }
    snprintf(same, sizeof same, ": same as %d", rw->src);
    if (text_w(core) + text_w(same) > room)
        snprintf(same, sizeof same, " = %d", rw->src);
    if (text_w(core) + text_w(same) > room && rw->first != rw->last)
        snprintf(core, sizeof core, "%d-%d", rw->first, rw->last);
    text_fit(a, 6, y, core, room, C_INK);
    int x = 6 + text_w(core);
    text_fit(a, x, y, same, room + 6 - x, 0xA03000);
}


/* ---- layer lane ------------------------------------------------------ */

/* Two neutral shades, alternating span by span so neighbours separate;
 * no hue, so the lane never reads as a category of the rows below. */
static const uint32_t lane_shade[2] = {0xCFD8DC, 0xAEBAC2};
#define C_LANE_BG 0xE4E8EA

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
        const emu_event *e = lane_ev(a, core, UNIT_CORE, i);
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

/* The span's label: "res3a_conv2 bwd", "update" for the step's update. */
static void span_label(const view_app *a, const view_span *sp, char *buf, size_t cap)
{
    static const char *const ph[PHASE_COUNT] = {"fwd", "bwd", "update"};
    const char *p = sp->phase < PHASE_COUNT ? ph[sp->phase] : "?";
    if (sp->layer >= 0 && sp->layer < a->r.n_layers && a->r.layer_names)
        snprintf(buf, cap, "%s %s", a->r.layer_names[sp->layer], p);
    else
        snprintf(buf, cap, "%s", sp->phase == PHASE_UPDATE ? "update" : p);
}

/* First span ending at or after t (spans are in time order and do not
 * overlap, so their ends increase). */
static size_t span_first(const view_app *a, double t)
{
    size_t lo = 0, hi = a->n_spans;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (a->spans[mid].t1 < t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The lane band at y: label column, then the spans, each pixel column
 * painted once (a column that several narrow spans share shows the first;
 * zooming in separates them).  A span's label is drawn inside it when it
 * fits, cut with ".." when at least LANE_MIN_CELLS cells fit, else not
 * at all: a label never runs past its span. */
#define LANE_MIN_CELLS 6
static void draw_layer_lane(view_app *a, int y)
{
    char lab[48], buf[300], cut[300];
    int xr = a->W - 10, h = VIEW_LANE_BAR;
    fill(a, 0, y - 1, VIEW_LABELS - 4, h + 2, C_LANE_BG);
    snprintf(lab, sizeof lab, "layers (core %d)", a->spans_core);
    text_fit(a, 6, y + 1, lab, VIEW_LABELS - 14, C_INK);
    if (!a->n_spans) {
        text_fit(a, VIEW_LABELS + 4, y + 1, "no critical-path events on this core",
                 xr - VIEW_LABELS - 8, C_MUTED);
        return;
    }
    double px = (a->v1 - a->v0) / (xr - VIEW_LABELS);
    int drawn = VIEW_LABELS - 1;
    SDL_Rect sel = {0, 0, 0, 0};
    size_t i = span_first(a, a->v0);
    while (i < a->n_spans) {
        const view_span *sp = &a->spans[i];
        if (sp->t0 > a->v1)
            break;
        int x0, x1;
        if (span_cols(a, sp->t0, sp->t1, 0, drawn, xr, &x0, &x1)) {
            fill(a, x0, y, x1 - x0, h, lane_shade[i & 1]);
            drawn = x1 - 1;
            int room = (x1 - x0 - 6) / FONT_W;
            if (room > 0) {
                span_label(a, sp, buf, sizeof buf);
                int n = font_text_cells(buf);
                if (n <= room)
                    view_text(a, x0 + 3, y + 1, buf, 1, C_INK);
                else if (room >= LANE_MIN_CELLS) {
                    font_fit(cut, sizeof cut, buf, room, "..");
                    size_t l = strlen(cut);
                    if (l >= 3 && cut[l - 3] == ' ') /* "conv2..", not "conv2 .." */
                        memcpy(cut + l - 3, "..", 3);
                    view_text(a, x0 + 3, y + 1, cut, 1, C_INK);
                }
            }
            if (a->sel_span == (long)i)
                sel = (SDL_Rect){x0 - 1, y - 1, x1 - x0 + 2, h + 2};
        }
        double tnext = a->v0 + (drawn + 1 - VIEW_LABELS) * px;
        size_t j = span_first(a, tnext);
        i = j > i ? j : i + 1;
        if (drawn >= xr - 1)
            break;
    }
    /* last, so the next span's fill does not cover its right edge */
    if (sel.w)
        frame_rect(a, sel.x, sel.y, sel.w, sel.h, 0x000000);
}

int view_pick_span(const view_app *a, int x, int y, long *span)
{
    int top = VIEW_HEADER + VIEW_AXIS + 2;
    if (a->panel != VIEW_TIMELINE || !a->has_events || !a->r.fits || !a->n_spans ||
        x < VIEW_LABELS || x >= a->W - 10 || y < top - 1 || y >= top + VIEW_LANE_BAR + 1)
        return 0;
    /* The span whose pixels hold x: the one drawn there (see
     * draw_layer_lane), or the nearest within a pixel. */
    double px = (a->v1 - a->v0) / (a->W - 10 - VIEW_LABELS), t = t_of_x(a, x);
    size_t i = span_first(a, t - px);
    long best = -1;
    double bestd = INFINITY;
    for (; i < a->n_spans && a->spans[i].t0 <= t + px; i++) {
        const view_span *sp = &a->spans[i];
        double d = (t >= sp->t0 && t < sp->t1) ? 0 : fmin(fabs(t - sp->t0), fabs(t - sp->t1));
        if (d < bestd) {
            bestd = d;
            best = (long)i;
        }
        if (d == 0)
            break;
    }
    if (best < 0)
        return 0;
    *span = best;
    return 1;
}

static void draw_timeline(view_app *a)
{
    int top = VIEW_HEADER + VIEW_AXIS, xr = a->W - 10;
    if (!a->has_events) {
        /* A report stores no events: no axis, nothing to hover. */
        text_fit(a, 20, top + 10,
                 "This result has no recorded timeline (a report JSON stores none).",
                 a->W - 40, C_INK);
        text_fit(a, 20, top + 28, "Press 2 for the torus, 3 for the bars, 4 for the layers.", a->W - 40, C_INK);
        return;
    }
    draw_axis(a, top);
    draw_layer_lane(a, top + 2);
    int rh = view_row_height(a), nv = view_rows_visible(a);
    static const char *const ul[UNIT_COUNT] = {"", "MXU", "vector", "DMA", "ICI"};
    for (int k = 0; k < nv && a->row0 + k < a->n_rows; k++) {
        const view_row *rw = &a->rows[a->row0 + k];
        int c = rw->first, y = view_rows_top(a) + k * rh;
        const emu_core_result *pc = &a->r.per_core[c];
        if (k % 2 == 0)
            fill(a, 0, y - 1, VIEW_LABELS - 4, rh, 0xECEFF1);
        draw_row_label(a, rw, y);
        draw_lane(a, c, UNIT_CORE, y, 13);
        if (a->units)
            for (int u = 1; u < UNIT_COUNT; u++) {
                int yy = y + 14 + (u - 1) * 12;
                view_text(a, VIEW_LABELS - 8 - text_w(ul[u]), yy - 1, ul[u], 1, C_MUTED);
                draw_lane(a, c, u, yy + 2, 8);
            }
        /* The step's end, where idle stops. */
        double xe = x_of_t(a, pc->step_time_s); /* int only when seen */
        if (xe >= VIEW_LABELS && xe < xr)
            fill(a, (int)xe, y - 1, 1, rh - 2, 0x000000);
    }
    /* Scroll position. */
    if (a->n_rows > nv) {
        int h = a->H - top - VIEW_FOOTER;
        int bh = h * nv / a->n_rows, by = top + h * a->row0 / a->n_rows;
        fill(a, a->W - 6, top, 4, h, 0xE0E0E0);
        fill(a, a->W - 6, by, 4, bh < 6 ? 6 : bh, 0x808080);
    }
}

int view_pick(const view_app *a, int x, int y, int *core, int *unit, long *ev)
{
    if (a->panel != VIEW_TIMELINE || !a->has_events || x < VIEW_LABELS ||
        x >= a->W - 10)
        return 0;
    int top = view_rows_top(a), rh = view_row_height(a);
    if (y < top || y >= a->H - VIEW_FOOTER)
        return 0;
    int k = (y - top) / rh, dy = (y - top) % rh, u = UNIT_CORE;
    if (a->row0 + k >= a->n_rows)
        return 0;
    int c = a->rows[a->row0 + k].first;
    if (dy >= 14) {
        if (!a->units)
            return 0;
        u = 1 + (dy - 14) / 12;
        if (u >= UNIT_COUNT)
            return 0;
    }
    const view_lane *L = &a->lanes[c * UNIT_COUNT + u];
    double px = (a->v1 - a->v0) / (a->W - 10 - VIEW_LABELS);
    double t = t_of_x(a, x), lo = t - px, hi = t + px;
    long best = -1;
    double bestd = INFINITY;
    for (size_t i = lane_first(L, lo); i < L->n; i++) {
        const emu_event *e = lane_ev(a, c, u, i);
        if (e->t0 > hi)
            break;
        if (e->t1 < lo)
            continue;
        double d = (t >= e->t0 && t <= e->t1) ? 0 : fmin(fabs(t - e->t0), fabs(t - e->t1));
        if (d < bestd) {
            bestd = d;
            best = (long)L->idx[i];
        }
    }
    if (best < 0)
        return 0;
    *core = c;
    *unit = u;
    *ev = best;
    return 1;
}

/* ---- torus ----------------------------------------------------------- */

/* Colour ramps, ordered in lightness so they read in grey too: links on
 * a yellow-orange-red ramp (ColorBrewer YlOrRd, starting from a beige
 * that still shows on the background), cores on a single-hue blue ramp
 * (ColorBrewer Blues), so the two never look alike. */
static uint32_t ramp(const uint32_t *stops, double f)
{
    if (!(f > 0))
        f = 0;
    if (f > 1)
        f = 1;
    double p = f * 4;
    int i = (int)p;
    if (i >= 4)
        return stops[4];
    double u = p - i;
    uint32_t a = stops[i], b = stops[i + 1], o = 0;
    for (int sh = 0; sh <= 16; sh += 8) {
        double ca = (a >> sh) & 255, cb = (b >> sh) & 255;
        o |= (uint32_t)lround(ca + (cb - ca) * u) << sh;
    }
    return o;
}

static uint32_t link_color(double f)
{
    static const uint32_t st[] = {0xE8DFCC, 0xFED976, 0xFD8D3C, 0xE31A1C, 0x800026};
    return ramp(st, f);
}

static uint32_t core_color(double f)
{
    static const uint32_t st[] = {0xEFF3FF, 0xBDD7E7, 0x6BAED6, 0x2171B5, 0x08306B};
    return ramp(st, f);
}

static void torus_dims(const view_app *a, int *dx, int *dy)
{
    *dx = a->r.dim_x;
    *dy = a->r.dim_y;
    if (*dx <= 0 || *dy <= 0 || *dx * *dy < a->r.chips) {
        *dx = (int)ceil(sqrt((double)a->r.chips));
        *dy = (a->r.chips + *dx - 1) / *dx;
    }
}

#define TORUS_LEGEND 210

static void torus_geom(const view_app *a, int *cell, int *ox, int *oy)
{
    int dx, dy;
    torus_dims(a, &dx, &dy);
    int aw = a->W - TORUS_LEGEND - 50, ah = a->H - VIEW_HEADER - VIEW_FOOTER - 60;
    int c = aw / dx < ah / dy ? aw / dx : ah / dy;
    if (c < 4)
        c = 4;
    *cell = c;
    *ox = 30 + (aw - c * dx) / 2;
    *oy = VIEW_HEADER + 44 + (ah - c * dy) / 2;
}

static double busy_share(const emu_core_result *pc)
{
    return pc->step_time_s > 0 ? 1 - pc->breakdown_s[CAT_IDLE] / pc->step_time_s : 0;
}

static double link_util(const view_app *a, int chip, int dir)
{
    if (!a->r.link_busy_s || a->r.step_time_s <= 0 || chip < 0 || chip >= a->r.chips)
        return 0;
    return a->r.link_busy_s[chip * 4 + dir] / a->r.step_time_s;
}

/* Wrap-around links exist on full pods only (params.c); a system the
 * table does not know has them when an edge link carried traffic. */
static int torus_wraps(const view_app *a)
{
    const tpu_system *sys = tpu_system_find(a->r.system);
    if (sys)
        return sys->full_pod;
    int dx, dy;
    torus_dims(a, &dx, &dy);
    for (int ch = 0; ch < a->r.chips; ch++) {
        int x = ch % dx, y = ch / dx;
        if ((x == 0 && link_util(a, ch, 1) > 0) || (x == dx - 1 && link_util(a, ch, 0) > 0) ||
            (y == 0 && link_util(a, ch, 3) > 0) || (y == dy - 1 && link_util(a, ch, 2) > 0))
            return 1;
    }
    return 0;
}

/* Does chip ch have a link in direction dir (+x, -x, +y, -y)? */
static int link_exists(const view_app *a, int ch, int dir, int wraps)
{
    int dx, dy;
    torus_dims(a, &dx, &dy);
    int x = ch % dx, y = ch / dx, n = dir < 2 ? dx : dy, p = dir < 2 ? x : y;
    if (n < 2)
        return 0;
    int nb = (dir & 1) ? p - 1 : p + 1;
    if (nb < 0 || nb >= n)
        return wraps;
    return (dir < 2 ? y * dx + nb : nb * dx + x) < a->r.chips;
}

int view_torus_chip_at(const view_app *a, int x, int y);
int view_torus_chip_at(const view_app *a, int x, int y)
{
    int cell, ox, oy, dx, dy;
    torus_geom(a, &cell, &ox, &oy);
    torus_dims(a, &dx, &dy);
    if (x < ox || y < oy)
        return -1;
    int cx = (x - ox) / cell, cy = (y - oy) / cell;
    if (cx >= dx || cy >= dy)
        return -1;
    int ch = cy * dx + cx;
    return ch < a->r.chips ? ch : -1;
}

/* Text wrapped at spaces into lines of at most maxw pixels; returns the
 * y below the last line. */
static int text_wrap(view_app *a, int x, int y, const char *s, int maxw, uint32_t rgb)
{
    int n = maxw / FONT_W;
    char line[512];
    if (n < 8)
        n = 8;
    while (*s) {
        /* Up to n characters (not bytes, and never half of one), ending
         * at the last space among them when the text goes on. */
        font_fit(line, sizeof line, s, n, NULL);
        size_t cut = strlen(line);
        if (s[cut] && s[cut] != ' ') {
            size_t sp = cut;
            while (sp > 0 && line[sp] != ' ')
                sp--;
            if (sp > 0)
                cut = sp;
        }
        line[cut] = 0;
        if (cut == 0)
            break;
        view_text(a, x, y, line, 1, rgb);
        y += FONT_H + 3;
        s += cut;
        while (*s == ' ')
            s++;
    }
    return y;
}

/* Where a chip's number goes, as an offset from the chip's left edge;
 * -1 for none.  Its line starts 2 pixels below the chip and ends above
 * the next row's hover outline (3 pixels out).  Left of the chip's two
 * vertical strokes (they span its middle less lw + 1 to its middle plus
 * lw) with a pixel clear, else 2 pixels right of them and 4 short of the
 * next chip, a place the link % labels (pct) take when they are on. */
static int chip_label_dx(const view_app *a, int cell, int chip, int lw, int pct)
{
    char widest[16];
    snprintf(widest, sizeof widest, "%d", a->r.chips > 0 ? a->r.chips - 1 : 0);
    int tw = text_w(widest), mid = chip / 2;
    if (cell - chip < 2 + FONT_H + 3)
        return -1;
    if (2 + tw <= mid - lw - 2)
        return 2;
    if (!pct && mid + lw + 3 + tw <= cell - 4)
        return mid + lw + 3;
    return -1;
}

static void draw_torus(view_app *a)
{
    int cell, ox, oy, dx, dy;
    torus_geom(a, &cell, &ox, &oy);
    torus_dims(a, &dx, &dy);
    int chip = cell * 55 / 100, gap = cell - chip;
    int lw = gap / 3 < cell / 10 ? gap / 3 : cell / 10; /* one stroke per direction */
    if (lw < 1)
        lw = 1;
    int wraps = torus_wraps(a), hover = view_torus_chip_at(a, a->mx, a->my);
    char buf[200];
    /* Link colours are scaled to the run's busiest link: a 1% all-reduce
     * would otherwise look like idle links. */
    double lsum = 0, lmax = 0, usum = 0, bsum = 0;
    int nl = 0;
    for (int ch = 0; ch < a->r.chips; ch++)
        for (int d = 0; d < 4; d++)
            if (link_exists(a, ch, d, wraps)) {
                double u = link_util(a, ch, d);
                lsum += u;
                lmax = fmax(lmax, u);
                nl++;
            }
    double lscale = lmax > 0 ? lmax : 1;
    snprintf(buf, sizeof buf,
             "%d x %d chips (x right, y down%s). Cores: MXU utilization. "
             "Links: busy time / step time, one stroke per direction, "
             "scaled to the busiest link.",
             dx, dy, wraps ? ", wrap-around links at the edges" : "");
    text_wrap(a, 30, VIEW_HEADER + 8, buf, a->W - TORUS_LEGEND - 40, C_INK);
    int labels = cell >= 90 && gap >= 30;
    for (int ch = 0; ch < a->r.chips; ch++) {
        int x = ch % dx, y = ch / dx;
        int px = ox + x * cell, py = oy + y * cell;
        /* +x: upper stroke to the right neighbour; -x of the neighbour:
         * lower stroke.  Same for y with left/right strokes.  Wrap links
         * (full pods) are drawn as stubs at the far edge. */
        int mid = py + chip / 2, midx = px + chip / 2;
        int nb = (x + 1 < dx) ? ch + 1 : ch - x;
        int nby = (y + 1 < dy) ? ch + dx : x;
        if (link_exists(a, ch, 0, wraps)) {
            double u0 = link_util(a, ch, 0), u1 = link_util(a, nb, 1);
            fill(a, px + chip, mid - lw - 1, gap, lw, link_color(u0 / lscale));
            fill(a, px + chip, mid + 1, gap, lw, link_color(u1 / lscale));
            if (labels) {
                snprintf(buf, sizeof buf, "%.1f%%", 100 * fmax(u0, u1));
                view_text(a, px + chip + (gap - text_w(buf)) / 2, mid - lw - FONT_H - 2, buf,
                          1, C_MUTED);
            }
        }
        if (link_exists(a, ch, 2, wraps)) {
            double u0 = link_util(a, ch, 2), u1 = link_util(a, nby, 3);
            fill(a, midx - lw - 1, py + chip, lw, gap, link_color(u0 / lscale));
            fill(a, midx + 1, py + chip, lw, gap, link_color(u1 / lscale));
            if (labels) {
                snprintf(buf, sizeof buf, "%.1f%%", 100 * fmax(u0, u1));
                view_text(a, midx + lw + 4, py + chip + (gap - FONT_H) / 2, buf, 1, C_MUTED);
            }
        }
        fill(a, px, py, chip, chip, 0x455A64);
        /* Two cores of the chip. */
        int cw = (chip - 3) / 2;
        for (int k = 0; k < 2; k++) {
            int core = ch * 2 + k;
            if (core >= a->r.cores)
                break;
            fill(a, px + 1 + k * (cw + 1), py + 1, cw, chip - 2,
                 core_color(a->r.per_core[core].mxu_utilization));
        }
        if (ch == hover) {
            frame_rect(a, px - 2, py - 2, chip + 4, chip + 4, 0x000000);
            frame_rect(a, px - 3, py - 3, chip + 6, chip + 6, 0x000000);
        }
    }
    /* Chip numbers, after the strokes and never over one (drawn at the
     * chip's left edge, across its vertical strokes, "16" read "1E" on a
     * 16x16 torus), all in one place for the frame, chosen for the widest
     * number; none when no place holds it: hovering a chip names it. */
    int lab_x = chip_label_dx(a, cell, chip, lw, labels);
    for (int ch = 0; lab_x >= 0 && ch < a->r.chips; ch++) {
        int px = ox + ch % dx * cell, py = oy + ch / dx * cell;
        snprintf(buf, sizeof buf, "%d", ch);
        view_text(a, px + lab_x, py + chip + 2, buf, 1, C_MUTED);
    }
    for (int c = 0; c < a->r.cores; c++) {
        usum += a->r.per_core[c].mxu_utilization;
        bsum += busy_share(&a->r.per_core[c]);
    }
    /* Legend: the two colour scales and the means. */
    int lx = a->W - TORUS_LEGEND, ly = VIEW_HEADER + 50, bw = TORUS_LEGEND - 30;
    if (lx < ox + dx * cell + 10)
        lx = ox + dx * cell + 10;
    view_text(a, lx, ly, "cores: MXU utilization", 1, C_INK);
    for (int i = 0; i < bw; i++)
        fill(a, lx + i, ly + 16, 1, 14, core_color(i / (bw - 1.0)));
    view_text(a, lx, ly + 34, "0%", 1, C_INK);
    view_text(a, lx + bw - text_w("100%"), ly + 34, "100%", 1, C_INK);
    ly += 58;
    view_text(a, lx, ly, "links: busy / step", 1, C_INK);
    for (int i = 0; i < bw; i++)
        fill(a, lx + i, ly + 16, 1, 14, link_color(i / (bw - 1.0)));
    view_text(a, lx, ly + 34, "0%", 1, C_INK);
    snprintf(buf, sizeof buf, "%.1f%% (max)", 100 * lmax);
    view_text(a, lx + bw - text_w(buf), ly + 34, buf, 1, C_INK);
    ly += 62;
    snprintf(buf, sizeof buf, "links: mean %.1f%%", nl ? 100 * lsum / nl : 0);
    view_text(a, lx, ly, buf, 1, C_INK);
    snprintf(buf, sizeof buf, "       max  %.1f%%", 100 * lmax);
    view_text(a, lx, ly + 16, buf, 1, C_INK);
    snprintf(buf, sizeof buf, "       (%d links)", nl);
    view_text(a, lx, ly + 32, buf, 1, C_MUTED);
    snprintf(buf, sizeof buf, "cores: MXU %.1f%%", a->r.cores ? 100 * usum / a->r.cores : 0);
    view_text(a, lx, ly + 52, buf, 1, C_INK);
    snprintf(buf, sizeof buf, "       busy %.1f%%", a->r.cores ? 100 * bsum / a->r.cores : 0);
    view_text(a, lx, ly + 68, buf, 1, C_INK);
    view_text(a, lx, ly + 92, lab_x >= 0 ? "hover a chip for" : "hover a chip for its", 1,
              C_MUTED);
    view_text(a, lx, ly + 108, lab_x >= 0 ? "its cores and links" : "number, cores and links",
              1, C_MUTED);
}

/* ---- bars ------------------------------------------------------------ */

static void draw_bars(view_app *a)
{
    int w = a->W, h = a->H - VIEW_HEADER - VIEW_FOOTER;
    if (w < 500 || h < 300) {
        view_text(a, 20, VIEW_HEADER + 20, "window too small for the bar chart", 1, C_INK);
        return;
    }
    if (!a->bars || a->bars_w != w || a->bars_h != h) {
        if (a->bars)
            SDL_DestroyTexture(a->bars);
        a->bars = NULL;
        chart_image im = {0};
        tpu_error err = {0};
        if (chart_breakdown_image(&a->r, &im, w, h, &err) != TPU_OK) {
            view_text(a, 20, VIEW_HEADER + 20, err.msg, 1, C_INK);
            return;
        }
        a->bars = SDL_CreateTexture(a->ren, SDL_PIXELFORMAT_RGB24,
                                    SDL_TEXTUREACCESS_STATIC, w, h);
        if (a->bars)
            SDL_UpdateTexture(a->bars, NULL, im.rgb, 3 * w);
        chart_image_free(&im);
        a->bars_w = w;
        a->bars_h = h;
    }
    if (a->bars) {
        SDL_Rect dst = {0, VIEW_HEADER, w, h};
        SDL_RenderCopy(a->ren, a->bars, NULL, &dst);
    }
}

/* ---- layers panel ---------------------------------------------------- */

/* A layer's critical-path time on core 0, all categories. */
static double layer_s(const emu_result *r, int l)
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
 * (emu/cli_run.c print_layers), so the panel and the table agree. */
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
        double s = layer_s(r, l);
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

/* The part of core 0's step no layer holds (the gradient all-reduce, the
 * update, waiting before the step's end): a row when it is more than the
 * sums' rounding, as print_layers decides.  Its categories are the
 * core's breakdown less the layers'. */
static int end_row(const view_app *a, view_lrow *row)
{
    const emu_result *r = &a->r;
    double step = r->per_core[0].step_time_s;
    if (!(step - a->lay_sum > 1e-6 * step))
        return 0;
    memset(row, 0, sizeof *row);
    row->kind = VIEW_LROW_END;
    row->layer = -1;
    row->s = step - a->lay_sum;
    for (int k = 0; k < CAT_COUNT; k++) {
        double c = r->per_core[0].breakdown_s[k];
        for (int l = 0; l < r->n_layers; l++)
            c -= r->layer_time_s[(size_t)l * CAT_COUNT + k];
        /* below the sums' rounding: not a category's time */
        row->cat[k] = c > 1e-6 * step ? c : 0;
    }
    return 1;
}

static int layer_slots_fit(const view_app *a)
{
    int n = (a->H - VIEW_FOOTER - VIEW_LROW_TOP - 4) / VIEW_LROW_H;
    return n < 3 ? 3 : n;
}

int view_layer_rows(const view_app *a, view_lrow *out, int cap, int *slots)
{
    const emu_result *r = &a->r;
    view_lrow end;
    int has_end = a->lay_n > 0 && end_row(a, &end);
    int fit = layer_slots_fit(a), m = a->lay_n;
    int ls = m + has_end <= fit ? m : fit - 1 - has_end;
    if (ls < 1)
        ls = 1;
    if (slots)
        *slots = ls;
    if (m == 0)
        return 0;
    int r0 = a->lrow0;
    if (r0 > m - ls)
        r0 = m - ls;
    if (r0 < 0)
        r0 = 0;
    int n = 0;
    double shown = 0;
    for (int i = r0; i < r0 + ls && i < m && n < cap; i++) {
        view_lrow *w = &out[n++];
        int l = a->lay_order[i];
        memset(w, 0, sizeof *w);
        w->kind = VIEW_LROW_LAYER;
        w->layer = l;
        w->rank = i;
        w->n = 1;
        memcpy(w->cat, r->layer_time_s + (size_t)l * CAT_COUNT, sizeof w->cat);
        w->s = layer_s(r, l);
        shown += w->s;
    }
    if (ls < m && n < cap) {
        view_lrow *w = &out[n++];
        memset(w, 0, sizeof *w);
        w->kind = VIEW_LROW_OTHER;
        w->layer = -1;
        w->rank = -1;
        w->n = m - ls;
        /* what print_layers prints: all layers less the shown ones */
        w->s = a->lay_sum - shown;
        for (int i = 0; i < m; i++)
            if (i < r0 || i >= r0 + ls)
                for (int k = 0; k < CAT_COUNT; k++)
                    w->cat[k] += r->layer_time_s[(size_t)a->lay_order[i] * CAT_COUNT + k];
    }
    if (has_end && n < cap)
        out[n++] = end;
    return n;
}

void view_layers_clamp(view_app *a)
{
    int ls;
    view_lrow dummy;
    view_layer_rows(a, &dummy, 0, &ls);
    if (a->lrow0 > a->lay_n - ls)
        a->lrow0 = a->lay_n - ls;
    if (a->lrow0 < 0)
        a->lrow0 = 0;
}

/* Columns: the name (26 characters, 36 from 960 pixels), the bar, the
 * time and share right-aligned in 15 characters, then the scroll bar. */
typedef struct {
    int name_x, name_w, bar_x, bar_w, num_r;
} lay_cols;

static lay_cols layer_cols(const view_app *a)
{
    lay_cols c;
    c.name_x = 10;
    c.name_w = (a->W >= 960 ? 36 : 26) * FONT_W;
    c.bar_x = c.name_x + c.name_w + 8;
    c.num_r = a->W - 14;
    c.bar_w = c.num_r - 15 * FONT_W - 8 - c.bar_x;
    return c;
}

static void lrow_label(const view_app *a, const view_lrow *w, char *buf, size_t cap)
{
    if (w->kind == VIEW_LROW_LAYER)
        snprintf(buf, cap, "%s", a->r.layer_names ? a->r.layer_names[w->layer] : "?");
    else if (w->kind == VIEW_LROW_OTHER)
        snprintf(buf, cap, "(other %d layer%s)", w->n, w->n == 1 ? "" : "s");
    else
        snprintf(buf, cap, "%s", a->r.train ? "(update, end of step)" : "(end of step)");
}

/* The bars' scale: the largest layer or the end row, whichever is longer,
 * fixed while scrolling.  The "other" row can be longer: its bar is cut
 * at the full width (and says so). */
static double layer_scale(const view_app *a)
{
    double s = a->lay_n > 0 ? layer_s(&a->r, a->lay_order[0]) : 0;
    view_lrow end;
    if (a->lay_n > 0 && end_row(a, &end) && end.s > s)
        s = end.s;
    return s;
}

int view_layer_pick(const view_app *a, int x, int y, view_lrow *row)
{
    if (a->panel != VIEW_LAYERS || !a->r.fits || x < 0 || x >= a->W - 8 ||
        y < VIEW_LROW_TOP || y >= a->H - VIEW_FOOTER)
        return 0;
    view_lrow rows[512];
    int n = view_layer_rows(a, rows, 512, NULL), k = (y - VIEW_LROW_TOP) / VIEW_LROW_H;
    if (k >= n)
        return 0;
    *row = rows[k];
    return 1;
}

static void draw_layers(view_app *a)
{
    const emu_result *r = &a->r;
    int x0 = 20, room = a->W - 40;
    if (r->n_layers <= 0 || !r->layer_time_s) {
        text_fit(a, x0, VIEW_HEADER + 24,
                 "This result has no per-layer times (a report without layers[]: an older or "
                 "edited one).", room, C_INK);
        text_fit(a, x0, VIEW_HEADER + 42, "tpuemu run TRACE --report R.json writes them; "
                 "press 3 for the per-core bars.", room, C_MUTED);
        return;
    }
    if (a->lay_n == 0) {
        text_fit(a, x0, VIEW_HEADER + 24, "No layer has time on core 0's critical path.",
                 room, C_INK);
        return;
    }
    char buf[400], tb[48], sb[48];
    double step = r->per_core[0].step_time_s;
    fmt_t(sb, sizeof sb, step);
    snprintf(buf, sizeof buf, "core 0's critical path by layer, largest first: %d layer%s "
             "with time of %d, step %s", a->lay_n, a->lay_n == 1 ? "" : "s", r->n_layers, sb);
    text_fit(a, 10, VIEW_HEADER + 8, buf, a->W - 20, C_MUTED);
    view_lrow rows[512], hov;
    int ls, n = view_layer_rows(a, rows, 512, &ls);
    int hk = view_layer_pick(a, a->mx, a->my, &hov) ? (a->my - VIEW_LROW_TOP) / VIEW_LROW_H : -1;
    lay_cols c = layer_cols(a);
    double scale = layer_scale(a);
    for (int k = 0; k < n; k++) {
        const view_lrow *w = &rows[k];
        int y = VIEW_LROW_TOP + k * VIEW_LROW_H;
        if (k == hk)
            fill(a, 0, y, a->W - 8, VIEW_LROW_H - 1, 0xDDE3E7);
        else if (k % 2 == 0)
            fill(a, 0, y, a->W - 8, VIEW_LROW_H - 1, 0xEEF1F3);
        char name[300];
        lrow_label(a, w, name, sizeof name);
        text_fit(a, c.name_x, y + 2, name, c.name_w,
                 w->kind == VIEW_LROW_LAYER ? C_INK : C_MUTED);
        /* Stacked by category, each edge at its rounded cumulative time,
         * so the bar's length is the row's time on the common scale.  A
         * row longer than the scale (the other layers) fills the width
         * with its categories in proportion: cut at the scale, stacked
         * mxu first, it showed only the first one or two. */
        double csum = 0;
        for (int q = 0; q < CAT_COUNT; q++)
            csum += w->cat[q];
        double f = csum > 0 ? w->s / csum : 0, cum = 0;
        int cut = scale > 0 && w->s > scale, px = c.bar_x;
        double rs = cut ? w->s : scale;
        for (int q = 0; q < CAT_COUNT && scale > 0; q++) {
            cum += w->cat[q] * f;
            int xe = c.bar_x + (int)lround(fmin(cum, rs) / rs * c.bar_w);
            if (xe > px)
                fill(a, px, y + 2, xe - px, FONT_H, chart_cat_color((emu_cat)q));
            if (xe > px)
                px = xe;
        }
        if (cut) { /* a break mark: the bar goes on past the scale */
            fill(a, c.bar_x + c.bar_w - 9, y + 2, 2, FONT_H, C_BG);
            fill(a, c.bar_x + c.bar_w - 5, y + 2, 2, FONT_H, C_BG);
        }
        fmt_t(tb, sizeof tb, w->s);
        snprintf(buf, sizeof buf, "%s %5.1f%%", tb, step > 0 ? 100 * w->s / step : 0);
        view_text(a, c.num_r - text_w(buf), y + 2, buf, 1, C_INK);
    }
    /* Scroll position over the layers. */
    if (ls < a->lay_n) {
        int top = VIEW_LROW_TOP, h = ls * VIEW_LROW_H;
        int bh = h * ls / a->lay_n, by = top + h * a->lrow0 / a->lay_n;
        fill(a, a->W - 6, top, 4, h, 0xE0E0E0);
        fill(a, a->W - 6, by, 4, bh < 6 ? 6 : bh, 0x808080);
    }
}

/* A layers-panel row in the footer: its name, time, share and rank; on
 * the second line each category's time, longest first. */
static int draw_layer_info(view_app *a, int y)
{
    view_lrow w;
    if (!view_layer_pick(a, a->mx, a->my, &w))
        return 0;
    char buf[600], name[300], tb[48], sb[48];
    double step = a->r.per_core[0].step_time_s;
    fmt_t(tb, sizeof tb, w.s);
    fmt_t(sb, sizeof sb, step);
    if (w.kind == VIEW_LROW_LAYER)
        snprintf(name, sizeof name, "layer %s", a->r.layer_names[w.layer]);
    else
        lrow_label(a, &w, name, sizeof name);
    int n = snprintf(buf, sizeof buf, "hover: core 0 %s  %s (%.1f%% of the %s step)", name, tb,
                     step > 0 ? 100 * w.s / step : 0, sb);
    if (w.kind == VIEW_LROW_LAYER)
        snprintf(buf + n, sizeof buf - (size_t)n, "  #%d of %d", w.rank + 1, a->lay_n);
    else if (w.kind == VIEW_LROW_END)
        snprintf(buf + n, sizeof buf - (size_t)n, "  in no layer");
    else if (w.s > layer_scale(a))
        snprintf(buf + n, sizeof buf - (size_t)n,
                 "  (bar cut at the scale, its categories in proportion)");
    text_fit(a, 8, y + 6, buf, a->W - 16, C_INK);
    n = snprintf(buf, sizeof buf, "critical path:");
    int done[CAT_COUNT] = {0}, any = 0;
    for (int k = 0; k < CAT_COUNT; k++) {
        int best = -1;
        for (int q = 0; q < CAT_COUNT; q++)
            if (!done[q] && w.cat[q] > 0 && (best < 0 || w.cat[q] > w.cat[best]))
                best = q;
        if (best < 0)
            break;
        done[best] = any = 1;
        fmt_t(tb, sizeof tb, w.cat[best]);
        n += snprintf(buf + n, sizeof buf - (size_t)n, "%s %s %s", k ? "," : "",
                      emu_cat_name((emu_cat)best), tb);
        if (n >= (int)sizeof buf - 1)
            break;
    }
    if (!any)
        snprintf(buf + n, sizeof buf - (size_t)n, " none");
    text_fit(a, 8, y + 22, buf, a->W - 16, C_MUTED);
    return 1;
}

/* ---- frame ----------------------------------------------------------- */

static const char *const help_lines[] = {
    "tpuemu view - keys",
    "",
    "1 2 3 4, Tab      timeline / torus / per-core bars / layers (Shift+Tab)",
    "z or +, x or -    zoom in / out (timeline; around the mouse)",
    "mouse wheel       zoom at the mouse",
    "left right, a d   pan the time window (Shift: faster)",
    "drag              pan with the mouse",
    "up down, w s      scroll rows; PgUp PgDn a page; Home End",
    "0                 whole step (reset zoom)",
    "u                 show / hide unit rows (MXU, vector, DMA, ICI)",
    "click             select an event or a layer span (details in the footer)",
    "Esc               clear selection, close this help",
    "h, F1, ?          this help",
    "q                 quit",
    "",
    "\"same as N\" by a core: an identical replica the engine simulated",
    "once, drawn from core N's timeline; a run of such cores is",
    "one row (\"cores 1-2047: same as 0\"). Replicas that copy",
    "replica 0 shard by shard are one row (\"replicas 1-7 = 0\");",
    "hover its label for the cores it stands for.",
    "",
    "Colours: category of the critical path (the report's categories):",
};

static void draw_help(view_app *a)
{
    int n = (int)(sizeof help_lines / sizeof help_lines[0]);
    int extra = a->demo ? 1 : 0;
    /* Line pitch shrinks (down to the font's height) so the box fits the
     * smallest window, 640x400. */
    int lh = (a->H - 20 - 40 - 26) / (n + extra);
    if (lh > 18)
        lh = 18;
    if (lh < FONT_H)
        lh = FONT_H;
    int pad = lh < 16 ? 10 : 20;
    int w = 580, h = 2 * pad + (n + extra) * lh + 22;
    int lx0 = a->W < w ? 0 : (a->W - w) / 2, y = (a->H - h) / 2;
    if (y < 0)
        y = 0;
    SDL_SetRenderDrawBlendMode(a->ren, SDL_BLENDMODE_BLEND);
    SDL_Rect shade = {0, 0, a->W, a->H};
    SDL_SetRenderDrawColor(a->ren, 0, 0, 0, 110);
    SDL_RenderFillRect(a->ren, &shade);
    SDL_SetRenderDrawBlendMode(a->ren, SDL_BLENDMODE_NONE);
    fill(a, lx0, y, w, h, 0xFFFFFF);
    frame_rect(a, lx0, y, w, h, C_HEAD);
    int ty = y + pad;
    for (int i = 0; i < n; i++, ty += lh) {
        view_text(a, lx0 + 20, ty, help_lines[i], 1, i == 0 ? 0x0072B2 : C_INK);
        if (i == 13 && extra) {
            ty += lh;
            view_text(a, lx0 + 20, ty, "d                 demo: switch v3-64 / v3-2048", 1,
                      C_INK);
        }
    }
    int lx = lx0 + 20, ly = ty + 4;
    for (int c = 0; c < CAT_COUNT; c++) {
        fill(a, lx, ly, 12, 12, chart_cat_color((emu_cat)c));
        view_text(a, lx + 16, ly, emu_cat_name((emu_cat)c), 1, C_INK);
        lx += 16 + text_w(emu_cat_name((emu_cat)c)) + 14;
    }
}

/* FLOPs and bytes of the unit events under a critical-path span, each
 * counted pro rata to its overlap (critical-path events carry none). */
static void span_work(const view_app *a, int core, double t0, double t1,
                      double *flops, double *bytes)
{
    *flops = *bytes = 0;
    for (int u = 1; u < UNIT_COUNT; u++) {
        const view_lane *L = &a->lanes[core * UNIT_COUNT + u];
        for (size_t i = lane_first(L, t0); i < L->n; i++) {
            const emu_event *e = lane_ev(a, core, u, i);
            if (e->t0 >= t1)
                break;
            double ov = fmin(t1, e->t1) - fmax(t0, e->t0), d = e->t1 - e->t0;
            if (ov <= 0 || d <= 0)
                continue;
            *flops += e->flops * ov / d;
            *bytes += e->bytes * ov / d;
        }
    }
}

static void draw_event_info(view_app *a, int y, const char *who, int core, int unit,
                            long ev)
{
    char buf[512], t0[48], t1[48], du[48];
    const emu_event *e = &a->r.per_core[a->src[core]].events[ev];
    const char *ln = (e->layer >= 0 && e->layer < a->r.n_layers && a->r.layer_names)
                         ? a->r.layer_names[e->layer] : "(no layer)";
    double res = fmin(e->t1 - e->t0, a->v1 - a->v0) / 10;
    fmt_tp(t0, sizeof t0, e->t0, res);
    fmt_tp(t1, sizeof t1, e->t1, res);
    fmt_t(du, sizeof du, e->t1 - e->t0);
    snprintf(buf, sizeof buf, "%s: core %d %s  layer %s (%s)  %s  %s .. %s (%s)",
             who, core, unit == UNIT_CORE ? "critical path" : emu_unit_name((emu_unit)unit),
             ln, emu_phase_name((emu_phase)e->phase),
             emu_cat_name((emu_cat)e->cat), t0, t1, du);
    text_fit(a, 8, y + 6, buf, a->W - 16, C_INK);
    const char *op = fw_op_name((fw_op)e->opcode);
    char what[96], work[160];
    if (e->opcode == FW_LOOP) {
        if (e->count > 1)
            snprintf(what, sizeof what, "loop, %lu iterations summarised",
                     (unsigned long)e->count);
        else
            snprintf(what, sizeof what, "loop, iterations summarised");
    } else if (e->count > 1)
        snprintf(what, sizeof what, "%s x %lu", op, (unsigned long)e->count);
    else
        snprintf(what, sizeof what, "%s", op);
    double fl = e->flops, by = e->bytes;
    int approx = 0;
    if (unit == UNIT_CORE && fl == 0 && by == 0) {
        span_work(a, a->src[core], e->t0, e->t1, &fl, &by);
        approx = 1;
    }
    if (fl == 0 && by == 0)
        snprintf(work, sizeof work, "FLOPs, bytes: %s",
                 unit == UNIT_CORE ? "none recorded, see unit rows (u)" : "0");
    else
        snprintf(work, sizeof work, "%sFLOPs %.4g   bytes %.4g", approx ? "unit work in span: " : "",
                 fl, by);
    snprintf(buf, sizeof buf, "%s   %s", what, work);
    text_fit(a, 8, y + 22, buf, a->W - 16, C_MUTED);
}

/* A layer-lane span in the footer, as an event is: the layer, phase and
 * times on the first line; on the second, the categories of the core's
 * critical path inside the span, longest first. */
static void draw_span_info(view_app *a, int y, const char *who, long si)
{
    char buf[600], t0[48], t1[48], du[48], name[300];
    const view_span *sp = &a->spans[si];
    double res = fmin(sp->t1 - sp->t0, a->v1 - a->v0) / 10;
    fmt_tp(t0, sizeof t0, sp->t0, res);
    fmt_tp(t1, sizeof t1, sp->t1, res);
    fmt_t(du, sizeof du, sp->t1 - sp->t0);
    if (sp->layer >= 0 && sp->layer < a->r.n_layers && a->r.layer_names)
        snprintf(name, sizeof name, "layer %s (%s)", a->r.layer_names[sp->layer],
                 emu_phase_name((emu_phase)sp->phase));
    else
        snprintf(name, sizeof name, "%s (no layer)", emu_phase_name((emu_phase)sp->phase));
    snprintf(buf, sizeof buf, "%s: core %d %s  %s .. %s (%s)", who, a->spans_core, name, t0,
             t1, du);
    text_fit(a, 8, y + 6, buf, a->W - 16, C_INK);
    double cat[CAT_COUNT] = {0}, tot = 0;
    for (size_t i = sp->ev0; i < sp->ev0 + sp->n; i++) {
        const emu_event *e = lane_ev(a, a->spans_core, UNIT_CORE, i);
        if (e->cat < CAT_COUNT)
            cat[e->cat] += e->t1 - e->t0;
        tot += e->t1 - e->t0;
    }
    int n = snprintf(buf, sizeof buf, "critical path:");
    int done[CAT_COUNT] = {0};
    for (int k = 0; k < CAT_COUNT; k++) {
        int best = -1;
        for (int c = 0; c < CAT_COUNT; c++)
            if (!done[c] && cat[c] > 0 && (best < 0 || cat[c] > cat[best]))
                best = c;
        if (best < 0)
            break;
        done[best] = 1;
        fmt_t(du, sizeof du, cat[best]);
        n += snprintf(buf + n, sizeof buf - (size_t)n, "%s %s %s (%.0f%%)", k ? "," : "",
                      emu_cat_name((emu_cat)best), du, tot > 0 ? 100 * cat[best] / tot : 0);
        if (n >= (int)sizeof buf - 1)
            break;
    }
    if (n < (int)sizeof buf - 1)
        snprintf(buf + n, sizeof buf - (size_t)n, "   %zu event%s", sp->n, sp->n == 1 ? "" : "s");
    text_fit(a, 8, y + 22, buf, a->W - 16, C_MUTED);
}

/* Hovering the lane's label: what the lane is. */
static int draw_lane_info(view_app *a, int y)
{
    int top = VIEW_HEADER + VIEW_AXIS + 2;
    if (a->panel != VIEW_TIMELINE || !a->has_events || a->mx < 0 || a->mx >= VIEW_LABELS ||
        a->my < top - 1 || a->my >= top + VIEW_LANE_BAR + 1)
        return 0;
    char buf[300];
    snprintf(buf, sizeof buf, "layer lane: core %d's critical path by layer and phase, %zu spans",
             a->spans_core, a->n_spans);
    text_fit(a, 8, y + 6, buf, a->W - 16, C_INK);
    text_fit(a, 8, y + 22, "hover or click a span for its times and categories; "
             "it follows the first row shown", a->W - 16, C_MUTED);
    return 1;
}

/* Hovering a replica group's label: what the row stands for, and its
 * cores as ranges (with torus block placement they are not one run). */
static int draw_group_info(view_app *a, int y)
{
    if (a->panel != VIEW_TIMELINE || !a->has_events || a->mx < 0 || a->mx >= VIEW_LABELS)
        return 0;
    int top = view_rows_top(a), rh = view_row_height(a);
    if (a->my < top || a->my >= a->H - VIEW_FOOTER)
        return 0;
    int k = a->row0 + (a->my - top) / rh;
    if (k >= a->n_rows || a->rows[k].rep0 < 1)
        return 0;
    const view_row *rw = &a->rows[k];
    char buf[1024], reps[48];
    fmt_reps(reps, sizeof reps, rw, "replica", "replicas");
    snprintf(buf, sizeof buf,
             "%s (%d cores): same as replica 0, shard by shard; drawn from core %d (= core %d)",
             reps, rw->ncores, rw->first, rw->src);
    text_fit(a, 8, y + 6, buf, a->W - 16, C_INK);
    int n = snprintf(buf, sizeof buf, "cores");
    for (int c = 0; c < a->r.cores && n < (int)sizeof buf - 32; c++) {
        int q = a->r.per_core[c].replica;
        if (q < rw->rep0 || q > rw->rep1)
            continue;
        int e = c;
        while (e + 1 < a->r.cores && a->r.per_core[e + 1].replica >= rw->rep0 &&
               a->r.per_core[e + 1].replica <= rw->rep1)
            e++;
        if (e > c)
            n += snprintf(buf + n, sizeof buf - (size_t)n, "%s %d-%d", n > 5 ? "," : "", c, e);
        else
            n += snprintf(buf + n, sizeof buf - (size_t)n, "%s %d", n > 5 ? "," : "", c);
        c = e;
    }
    text_fit(a, 8, y + 22, buf, a->W - 16, C_MUTED);
    return 1;
}

static void draw_footer(view_app *a)
{
    int y = a->H - VIEW_FOOTER;
    fill(a, 0, y, a->W, VIEW_FOOTER, 0xECEFF1);
    fill(a, 0, y, a->W, 1, 0xB0BEC5);
    char buf[400], t0[48], du[48];
    int core, unit, shown = 0;
    long ev, si;
    const char *who = "hover";
    if (a->sel_span >= 0 && (size_t)a->sel_span < a->n_spans) {
        draw_span_info(a, y, "selected", a->sel_span);
        return;
    }
    if (a->sel_ev >= 0) {
        core = a->sel_core;
        unit = a->sel_unit;
        ev = a->sel_ev;
        who = "selected";
        shown = 1;
    } else
        shown = view_pick(a, a->mx, a->my, &core, &unit, &ev);
    if (shown) {
        /* The event takes the whole footer: nothing to overlap. */
        draw_event_info(a, y, who, core, unit, ev);
        return;
    }
    if (view_pick_span(a, a->mx, a->my, &si)) {
        draw_span_info(a, y, "hover", si);
        return;
    }
    if (draw_group_info(a, y) || draw_lane_info(a, y) || draw_layer_info(a, y))
        return;
    int right1 = a->W - 10, right2 = a->W - 10;
    int legend = (a->panel == VIEW_TIMELINE && a->has_events) ||
                 (a->panel == VIEW_LAYERS && a->lay_n > 0 && a->r.fits);
    if (legend) {
        /* Category legend and where the window is, on the right. */
        int lx = a->W - 10;
        for (int c = CAT_COUNT - 1; c >= 0; c--) {
            const char *n = emu_cat_name((emu_cat)c);
            lx -= 16 + text_w(n) + 10;
            fill(a, lx, y + 7, 11, 11, chart_cat_color((emu_cat)c));
            view_text(a, lx + 15, y + 6, n, 1, C_INK);
        }
        right1 = lx - 10;
    }
    if (legend && a->panel == VIEW_LAYERS) {
        int ls;
        view_lrow dummy;
        view_layer_rows(a, &dummy, 0, &ls);
        if (ls < a->lay_n)
            snprintf(buf, sizeof buf, "layers %d-%d of %d (up down, wheel: scroll)",
                     a->lrow0 + 1, a->lrow0 + ls, a->lay_n);
        else
            snprintf(buf, sizeof buf, "layers 1-%d of %d", a->lay_n, a->lay_n);
        right2 = a->W - 10 - text_w(buf);
        view_text(a, right2, y + 22, buf, 1, C_MUTED);
        right2 -= 10;
    } else if (legend) {
        int nv = view_rows_visible(a), last = a->row0 + nv - 1;
        if (last > a->n_rows - 1)
            last = a->n_rows - 1;
        double w = a->v1 - a->v0;
        fmt_t(du, sizeof du, w);
        fmt_tp(t0, sizeof t0, a->v0, w / 100);
        if (a->n_rows == a->r.cores)
            snprintf(buf, sizeof buf, "cores %d-%d of %d   window %s from %s",
                     a->rows[a->row0].first, a->rows[last].last, a->r.cores, du, t0);
        else
            snprintf(buf, sizeof buf, "rows %d-%d of %d (%d cores)   window %s from %s",
                     a->row0 + 1, last + 1, a->n_rows, a->r.cores, du, t0);
        right2 = a->W - 10 - text_w(buf);
        view_text(a, right2, y + 22, buf, 1, C_MUTED);
        right2 -= 10;
    }
    if (a->panel == VIEW_TORUS) {
        int ch = view_torus_chip_at(a, a->mx, a->my);
        if (ch >= 0) {
            int dx, dy, wraps = torus_wraps(a);
            torus_dims(a, &dx, &dy);
            snprintf(buf, sizeof buf, "chip %d (x=%d, y=%d)", ch, ch % dx, ch / dx);
            for (int k = 0; k < 2 && ch * 2 + k < a->r.cores; k++) {
                size_t l = strlen(buf);
                const emu_core_result *pc = &a->r.per_core[ch * 2 + k];
                snprintf(buf + l, sizeof buf - l, "   core %d: MXU %.1f%%, busy %.1f%%",
                         ch * 2 + k, 100 * pc->mxu_utilization, 100 * busy_share(pc));
            }
            text_fit(a, 8, y + 6, buf, a->W - 16, C_INK);
            static const char *const dn[4] = {"+x", "-x", "+y", "-y"};
            snprintf(buf, sizeof buf, "links out:");
            for (int d = 0; d < 4; d++) {
                size_t l = strlen(buf);
                if (link_exists(a, ch, d, wraps))
                    snprintf(buf + l, sizeof buf - l, "  %s %.2f%%", dn[d],
                             100 * link_util(a, ch, d));
                else
                    snprintf(buf + l, sizeof buf - l, "  %s none", dn[d]);
            }
            text_fit(a, 8, y + 22, buf, a->W - 16, C_MUTED);
            return;
        }
    }
    const char *hint = a->panel == VIEW_TIMELINE && a->has_events
                           ? "hover or click an event for its layer, time, bytes and FLOPs"
                       : legend ? "hover a layer for its time by category"
                                : "1 timeline   2 torus   3 bars   4 layers";
    text_fit(a, 8, y + 6, hint, right1 - 8, C_MUTED);
    const char *keys = "h: help and keys   q: quit";
    if (8 + text_w(keys) <= right2)
        view_text(a, 8, y + 22, keys, 1, C_MUTED);
}

/* Appends s to buf (cap bytes, *n used), cut to at most max characters
 * (not bytes) with "..." at the end when longer, never inside one. */
static void put_cut(char *buf, size_t cap, int *n, const char *s, int max)
{
    if (*n >= (int)cap - 1)
        return;
    if (font_text_cells(s) > max && max < 3)
        return;
    font_fit(buf + *n, cap - (size_t)*n, s, max, "...");
    *n += (int)strlen(buf + *n);
}

/* What the run was told besides the trace: "freeze LIST  set K=V, K=V"
 * ("" without either), so two screenshots of one trace with different
 * what-ifs say so, not only in their numbers.  A long list ends in "...". */
static void whatif_text(const emu_result *r, char *buf, size_t cap)
{
    int n = 0;
    buf[0] = 0;
    if (r->freeze[0]) {
        put_cut(buf, cap, &n, "freeze ", 7);
        put_cut(buf, cap, &n, r->freeze, 32);
    }
    if (r->n_overrides > 0) {
        char set[512];
        int m = snprintf(set, sizeof set, "set ");
        for (int i = 0; i < r->n_overrides && m < (int)sizeof set - 1; i++)
            m += snprintf(set + m, sizeof set - (size_t)m, "%s%s=%s",
                          i ? ", " : "", r->overrides[i].key,
                          r->overrides[i].value);
        if (n)
            put_cut(buf, cap, &n, "  ", 2);
        put_cut(buf, cap, &n, set, 96);
    }
}

/* Two lines: what ran, then how it fits (the figures `tpuemu run`
 * prints): batch, replicas x cores, HBM per core, remat, MXU use, and the
 * what-ifs (--freeze, --set).  When the second line is too long for the
 * window (640 pixels leave about 68 characters), it is shortened in
 * steps, the what-ifs kept longest: the HBM capacity dropped (the
 * generation's, unless --set), "2x4 cores", the MXU use dropped, then the
 * what-ifs cut with "...". */
static void draw_header(view_app *a)
{
    fill(a, 0, 0, a->W, VIEW_HEADER, C_HEAD);
    char buf[1024], tb[32]; /* room for every part of line 2 at full length */
    static const char *const names[VIEW_PANELS] = {"1 timeline", "2 torus", "3 bars",
                                                       "4 layers"};
    int x = a->W - 10;
    /* Four tabs: tighter below 800 pixels, so the second line keeps about
     * 64 characters at 640 ("batch 65536, 2048 replicas x 1 core  HBM
     * 1.96 GiB  MXU 19.0%" whole) */
    int pad = a->W < 800 ? 4 : 8, gap = a->W < 800 ? 2 : 4;
    for (int p = VIEW_PANELS - 1; p >= 0; p--) {
        int w = text_w(names[p]) + 2 * pad;
        x -= w + gap;
        fill(a, x, 8, w, VIEW_HEADER - 16, p == a->panel ? 0xFFFFFF : 0x37474F);
        view_text(a, x + pad, 14, names[p], 1, p == a->panel ? C_HEAD : 0xCFD8DC);
    }
    if (x - 10 - text_w("h: help") > 400) {
        x -= 10 + text_w("h: help");
        view_text(a, x, 14, "h: help", 1, 0xCFD8DC);
    }
    int room = x - 20;
    fmt_t(tb, sizeof tb, a->r.step_time_s);
    snprintf(buf, sizeof buf, "%s on %s - %s%s", a->r.trace, a->r.system,
             a->r.fits ? "step " : "does not fit: no step timed",
             a->r.fits ? tb : "");
    text_fit(a, 10, 5, buf, room, 0xFFFFFF);
    double mxu = 0;
    for (int c = 0; c < a->r.cores; c++)
        mxu += a->r.per_core[c].mxu_utilization;
    mxu = a->r.cores ? mxu / a->r.cores : 0;
    const double gib = 1024.0 * 1024 * 1024;
    int big = a->r.hbm_needed_bytes >= gib;
    double need = big ? a->r.hbm_needed_bytes / gib : a->r.hbm_needed_bytes / (1024.0 * 1024);
    char cores[96], cores2[64], hb[160], hb2[96], flags[64] = "", mx[32], wi[400];
    snprintf(cores, sizeof cores, "batch %lld, %d replica%s x %d core%s",
             (long long)a->r.global_batch, a->r.replicas, a->r.replicas == 1 ? "" : "s",
             a->r.cores_per_replica, a->r.cores_per_replica == 1 ? "" : "s");
    snprintf(cores2, sizeof cores2, "batch %lld, %dx%d cores", (long long)a->r.global_batch,
             a->r.replicas, a->r.cores_per_replica);
    int fl = 0;
    if (!a->r.fits)
        fl += snprintf(flags + fl, sizeof flags - (size_t)fl, " DOES NOT FIT");
    if (a->r.hbm_remat_bytes > 0) {
        char rm[32];
        fmt_bytes(rm, sizeof rm, a->r.hbm_remat_bytes);
        snprintf(flags + fl, sizeof flags - (size_t)fl, " (remat %s)", rm);
    }
    hb[0] = hb2[0] = 0;
    if (a->r.hbm_capacity_bytes > 0) {
        snprintf(hb, sizeof hb, "  HBM %.3g %s of %.0f GiB/core%s", need, big ? "GiB" : "MiB",
                 a->r.hbm_capacity_bytes / gib, flags);
        snprintf(hb2, sizeof hb2, "  HBM %.3g %s%s", need, big ? "GiB" : "MiB", flags);
    } else if (flags[0]) {
        snprintf(hb, sizeof hb, " %s", flags);
        snprintf(hb2, sizeof hb2, " %s", flags);
    }
    mx[0] = 0;
    if (a->r.fits) /* a step that was not timed used no MXU */
        snprintf(mx, sizeof mx, "  MXU %.1f%%", 100 * mxu);
    whatif_text(&a->r, wi, sizeof wi);
    const char *sep = wi[0] ? "  " : "";
    int nchar = room / FONT_W;
    /* The longest form that fits, else the shortest with the what-ifs cut
     * (text_fit cuts whatever is still too long). */
    snprintf(buf, sizeof buf, "%s%s%s%s%s", cores, hb, mx, sep, wi);
    if (font_text_cells(buf) > nchar)
        snprintf(buf, sizeof buf, "%s%s%s%s%s", cores, hb2, mx, sep, wi);
    if (font_text_cells(buf) > nchar)
        snprintf(buf, sizeof buf, "%s%s%s%s%s", cores2, hb2, mx, sep, wi);
    if (font_text_cells(buf) > nchar && wi[0]) {
        int n = snprintf(buf, sizeof buf, "%s%s%s", cores2, hb2, sep);
        int nc = font_text_cells(buf);
        if (nc < nchar)
            put_cut(buf, sizeof buf, &n, wi, nchar - nc);
    }
    text_fit(a, 10, 21, buf, room, 0xB0BEC5);
}

/* A report of a step that does not fit has no timed step: its timeline and
 * bars would be an empty 0-1 ms chart.  Say what the run found instead. */
static void draw_nofit(view_app *a)
{
    char need[32], has[32], line[256];
    fmt_bytes(need, sizeof need, a->r.hbm_needed_bytes);
    fmt_bytes(has, sizeof has, a->r.hbm_capacity_bytes);
    int x = 20, y = VIEW_HEADER + 24, room = a->W - 40;
    snprintf(line, sizeof line, "The step does not fit: a core needs %s of HBM "
             "and has %s.", need, has);
    text_fit(a, x, y, line, room, C_INK);
    if (a->r.hbm_remat_bytes > 0) {
        char rm[32];
        fmt_bytes(rm, sizeof rm, a->r.hbm_remat_bytes);
        snprintf(line, sizeof line, "(after recomputing %s of activations "
                 "in the backward pass)", rm);
        text_fit(a, x, y + 18, line, room, C_INK);
        y += 18;
    }
    text_fit(a, x, y + 36, "No step was timed, so there is no timeline or "
             "breakdown to draw.", room, C_MUTED);
    text_fit(a, x, y + 54, "tpuemu run on the trace says what the need is "
             "made of; a larger slice or more", room, C_MUTED);
    text_fit(a, x, y + 72, "ways of spatial partitioning (tpuemu sweep) "
             "splits it.", room, C_MUTED);
}

void view_draw(view_app *a)
{
    fill(a, 0, 0, a->W, a->H, C_BG);
    view_layers_sync(a); /* the lane follows the first shown row */
    if (!a->r.fits && a->panel != VIEW_TORUS)
        draw_nofit(a);
    else if (a->panel == VIEW_TIMELINE)
        draw_timeline(a);
    else if (a->panel == VIEW_TORUS)
        draw_torus(a);
    else if (a->panel == VIEW_LAYERS)
        draw_layers(a);
    else
        draw_bars(a);
    draw_header(a);
    draw_footer(a);
    if (a->help)
        draw_help(a);
}
