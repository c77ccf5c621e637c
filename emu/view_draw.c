/* Drawing the viewer's panels with SDL's renderer.  Text comes from the
 * same bitmap font as the PNG charts (one texture atlas, tinted per draw);
 * the bar panel is chart.c's breakdown chart uploaded as a texture. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/chart.h"
#include "emu/font.h"
#include "emu/view_app.h"

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

int view_font_init(view_app *a)
{
    int w = 95 * FONT_W, h = FONT_H;
    SDL_Surface *s = SDL_CreateRGBSurfaceWithFormat(0, w, h, 32,
                                                    SDL_PIXELFORMAT_ARGB8888);
    if (!s)
        return 0;
    SDL_LockSurface(s);
    for (int g = 0; g < 95; g++)
        for (int y = 0; y < FONT_H; y++) {
            uint8_t row = font_row((unsigned char)(32 + g), y);
            uint32_t *p = (uint32_t *)((uint8_t *)s->pixels + y * s->pitch);
            for (int x = 0; x < FONT_W; x++)
                p[g * FONT_W + x] = (row >> x & 1) ? 0xFFFFFFFFu : 0x00FFFFFFu;
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
    for (; *s; s++, x += FONT_W * scale) {
        unsigned char c = (unsigned char)*s;
        if (c < 32 || c > 126)
            c = '?';
        if (c == ' ')
            continue;
        SDL_Rect src = {(c - 32) * FONT_W, 0, FONT_W, FONT_H};
        SDL_Rect dst = {x, y, FONT_W * scale, FONT_H * scale};
        SDL_RenderCopy(a->ren, a->font, &src, &dst);
    }
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
    for (int c = 0; c < a->r.cores; c++) {
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
            if (!L->idx || !L->pmax)
                return 0;
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
            if (!tmp)
                return 0;
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
    /* Cores the engine did not record borrow the rows of the first
     * recorded core with the same step time and breakdown. */
    for (int c = 0; c < a->r.cores; c++) {
        const emu_core_result *pc = &a->r.per_core[c];
        if (pc->n_events)
            continue;
        for (int q = 0; q < a->r.cores; q++) {
            const emu_core_result *pq = &a->r.per_core[q];
            if (!pq->n_events || pq->step_time_s != pc->step_time_s)
                continue;
            int same = 1;
            for (int k = 0; k < CAT_COUNT; k++)
                same &= fabs(pq->breakdown_s[k] - pc->breakdown_s[k]) <=
                        1e-12 * pc->step_time_s;
            if (same) {
                a->src[c] = q;
                for (int u = 0; u < UNIT_COUNT; u++)
                    a->lanes[c * UNIT_COUNT + u] = a->lanes[q * UNIT_COUNT + u];
                break;
            }
        }
    }
    return 1;
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
    a->lanes = NULL;
    a->src = NULL;
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

int view_rows_visible(const view_app *a)
{
    int h = a->H - VIEW_HEADER - VIEW_AXIS - VIEW_FOOTER;
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
        int x0 = (int)floor(x_of_t(a, e->t0)), x1 = (int)ceil(x_of_t(a, e->t1));
        if (x0 < VIEW_LABELS)
            x0 = VIEW_LABELS;
        if (x1 > xr)
            x1 = xr;
        if (x0 <= drawn)
            x0 = drawn + 1;
        if (x1 <= x0)
            x1 = x0 + 1;
        if (x0 < xr) {
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
    double raw = range / want, p = pow(10, floor(log10(raw))), m = raw / p;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

static void draw_timeline(view_app *a)
{
    int top = VIEW_HEADER + VIEW_AXIS, xr = a->W - 10;
    char buf[200];
    /* Time axis in ms. */
    double step = nice((a->v1 - a->v0) * 1e3, 8) / 1e3;
    for (double t = ceil(a->v0 / step) * step; t <= a->v1; t += step) {
        int x = (int)x_of_t(a, t);
        fill(a, x, top, 1, a->H - top - VIEW_FOOTER, C_GRID);
        snprintf(buf, sizeof buf, "%.*f", step * 1e3 >= 1 ? 0 : (int)ceil(-log10(step * 1e3)) , t * 1e3);
        view_text(a, x - (int)strlen(buf) * FONT_W / 2, VIEW_HEADER + 5, buf, 1, C_INK);
    }
    view_text(a, 8, VIEW_HEADER + 5, "time (ms)", 1, C_INK);
    if (!a->has_events) {
        view_text(a, VIEW_LABELS, top + 30,
                  "This result has no recorded timeline (a report JSON stores "
                  "none): press 2 for the torus, 3 for the bars.", 1, C_INK);
        return;
    }
    int rh = view_row_height(a), nv = view_rows_visible(a);
    static const char *const ul[UNIT_COUNT] = {"", "MXU", "vector", "DMA", "ICI"};
    for (int k = 0; k < nv && a->row0 + k < a->r.cores; k++) {
        int c = a->row0 + k, y = top + 2 + k * rh;
        const emu_core_result *pc = &a->r.per_core[c];
        if (k % 2 == 0)
            fill(a, 0, y - 1, VIEW_LABELS - 4, rh, 0xECEFF1);
        snprintf(buf, sizeof buf, "core %d", c);
        view_text(a, 6, y, buf, 1, C_INK);
        if (a->src[c] != c) {
            /* Not recorded by the engine: drawn from an identical core. */
            snprintf(buf, sizeof buf, "same as %d", a->src[c]);
            view_text(a, VIEW_LABELS - 8 - 6 * (int)strlen(buf), y, buf, 1, 0xA03000);
        }
        if (a->units) {
            snprintf(buf, sizeof buf, "chip %d", pc->chip);
            view_text(a, 66, y, buf, 1, C_MUTED);
        }
        draw_lane(a, c, UNIT_CORE, y, 13);
        if (a->units)
            for (int u = 1; u < UNIT_COUNT; u++) {
                int yy = y + 14 + (u - 1) * 12;
                view_text(a, VIEW_LABELS - 8 - 6 * (int)strlen(ul[u]), yy - 1, ul[u], 1, C_MUTED);
                draw_lane(a, c, u, yy + 2, 8);
            }
        /* The step's end, where idle stops. */
        int xe = (int)x_of_t(a, pc->step_time_s);
        if (xe >= VIEW_LABELS && xe < xr)
            fill(a, xe, y - 1, 1, rh - 2, 0x000000);
    }
    /* Scroll position. */
    if (a->r.cores > nv) {
        int h = a->H - top - VIEW_FOOTER;
        int bh = h * nv / a->r.cores, by = top + h * a->row0 / a->r.cores;
        fill(a, a->W - 6, top, 4, h, 0xE0E0E0);
        fill(a, a->W - 6, by, 4, bh < 6 ? 6 : bh, 0x808080);
    }
}

int view_pick(const view_app *a, int x, int y, int *core, int *unit, long *ev)
{
    if (a->panel != VIEW_TIMELINE || !a->has_events || x < VIEW_LABELS ||
        x >= a->W - 10)
        return 0;
    int top = VIEW_HEADER + VIEW_AXIS + 2, rh = view_row_height(a);
    if (y < top || y >= a->H - VIEW_FOOTER)
        return 0;
    int k = (y - top) / rh, c = a->row0 + k, dy = (y - top) % rh, u = UNIT_CORE;
    if (c >= a->r.cores)
        return 0;
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

/* Utilization colour map: pale blue-grey (idle) through yellow to dark red
 * (saturated), ordered in lightness so it reads in grey too. */
static uint32_t heat(double f)
{
    static const uint32_t stops[] = {0xDCE3EA, 0x9ECAE1, 0xFEE08B, 0xF46D43, 0xA50026};
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

static void torus_dims(const view_app *a, int *dx, int *dy)
{
    *dx = a->r.dim_x;
    *dy = a->r.dim_y;
    if (*dx <= 0 || *dy <= 0 || *dx * *dy < a->r.chips) {
        *dx = (int)ceil(sqrt((double)a->r.chips));
        *dy = (a->r.chips + *dx - 1) / *dx;
    }
}

static void torus_geom(const view_app *a, int *cell, int *ox, int *oy)
{
    int dx, dy;
    torus_dims(a, &dx, &dy);
    int aw = a->W - 260, ah = a->H - VIEW_HEADER - VIEW_FOOTER - 60;
    int c = aw / dx < ah / dy ? aw / dx : ah / dy;
    if (c < 4)
        c = 4;
    *cell = c;
    *ox = 40 + (aw - c * dx) / 2;
    *oy = VIEW_HEADER + 40 + (ah - c * dy) / 2;
}

static double busy_share(const emu_core_result *pc)
{
    return pc->step_time_s > 0 ? 1 - pc->breakdown_s[CAT_IDLE] / pc->step_time_s : 0;
}

static double link_util(const view_app *a, int chip, int dir)
{
    if (!a->r.link_busy_s || a->r.step_time_s <= 0)
        return 0;
    return a->r.link_busy_s[chip * 4 + dir] / a->r.step_time_s;
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

static void draw_torus(view_app *a)
{
    int cell, ox, oy, dx, dy;
    torus_geom(a, &cell, &ox, &oy);
    torus_dims(a, &dx, &dy);
    int chip = cell * 55 / 100, gap = cell - chip;
    int lw = gap / 3 < cell / 10 ? gap / 3 : cell / 10; /* one stroke per direction */
    if (lw < 1)
        lw = 1;
    char buf[200];
    snprintf(buf, sizeof buf,
             "%d x %d chips (x right, y down); links coloured by utilization "
             "(busy time / step time), cores by busy share (1 - idle / step)",
             dx, dy);
    view_text(a, 40, VIEW_HEADER + 10, buf, 1, C_INK);
    for (int ch = 0; ch < a->r.chips; ch++) {
        int x = ch % dx, y = ch / dx;
        int px = ox + x * cell, py = oy + y * cell;
        /* +x: upper stroke to the right neighbour; -x of the neighbour:
         * lower stroke.  Same for y with left/right strokes.  Wrap links
         * (full pods) are drawn as stubs at the far edge. */
        int mid = py + chip / 2, midx = px + chip / 2;
        int nb = (x + 1 < dx) ? ch + 1 : ch - x;
        int nby = (y + 1 < dy) ? ch + dx : x;
        double ux0 = link_util(a, ch, 0), ux1 = nb < a->r.chips ? link_util(a, nb, 1) : 0;
        double uy0 = link_util(a, ch, 2), uy1 = nby < a->r.chips ? link_util(a, nby, 3) : 0;
        /* Edge links exist only with wrap-around (full pods): drawn when
         * the result says they carried traffic. */
        if (x + 1 < dx || ux0 > 0 || ux1 > 0) {
            fill(a, px + chip, mid - lw - 1, gap, lw, heat(ux0));
            fill(a, px + chip, mid + 1, gap, lw, heat(ux1));
        }
        if (y + 1 < dy || uy0 > 0 || uy1 > 0) {
            fill(a, midx - lw - 1, py + chip, lw, gap, heat(uy0));
            fill(a, midx + 1, py + chip, lw, gap, heat(uy1));
        }
        fill(a, px, py, chip, chip, 0x455A64);
        /* Two cores of the chip. */
        int cw = (chip - 3) / 2;
        for (int k = 0; k < 2; k++) {
            int core = ch * 2 + k;
            if (core >= a->r.cores)
                break;
            fill(a, px + 1 + k * (cw + 1), py + 1, cw, chip - 2,
                 heat(busy_share(&a->r.per_core[core])));
        }
        if (cell >= 40) {
            snprintf(buf, sizeof buf, "%d", ch);
            view_text(a, px + 2, py + chip + 2, buf, 1, C_MUTED);
        }
    }
    /* Legend: the colour scale. */
    int lx = a->W - 200, ly = VIEW_HEADER + 50;
    view_text(a, lx, ly, "utilization / busy", 1, C_INK);
    for (int i = 0; i < 180; i++)
        fill(a, lx + i, ly + 20, 1, 16, heat(i / 179.0));
    view_text(a, lx, ly + 40, "0%", 1, C_INK);
    view_text(a, lx + 180 - 24, ly + 40, "100%", 1, C_INK);
    /* Mean figures. */
    double lsum = 0, lmax = 0, bsum = 0;
    int nl = 0;
    for (int ch = 0; ch < a->r.chips; ch++)
        for (int d = 0; d < 4; d++) {
            double u = link_util(a, ch, d);
            lsum += u;
            lmax = fmax(lmax, u);
            nl++;
        }
    for (int c = 0; c < a->r.cores; c++)
        bsum += busy_share(&a->r.per_core[c]);
    snprintf(buf, sizeof buf, "links: mean %.0f%%", nl ? 100 * lsum / nl : 0);
    view_text(a, lx, ly + 70, buf, 1, C_INK);
    snprintf(buf, sizeof buf, "       max  %.0f%%", 100 * lmax);
    view_text(a, lx, ly + 86, buf, 1, C_INK);
    snprintf(buf, sizeof buf, "cores: mean busy %.0f%%", a->r.cores ? 100 * bsum / a->r.cores : 0);
    view_text(a, lx, ly + 106, buf, 1, C_INK);
    view_text(a, lx, ly + 136, "hover a chip for", 1, C_MUTED);
    view_text(a, lx, ly + 152, "its cores and links", 1, C_MUTED);
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

/* ---- frame ----------------------------------------------------------- */

static const char *const help_lines[] = {
    "tpuemu view - keys",
    "",
    "1  2  3, Tab      timeline / torus / per-core bars (Tab cycles)",
    "z or +, x or -    zoom in / out (timeline; around the mouse)",
    "mouse wheel       zoom at the mouse",
    "left right, a d   pan the time window (Shift: faster)",
    "drag              pan with the mouse",
    "up down, w s      scroll cores; PgUp PgDn a page; Home first",
    "0                 whole step (reset zoom)",
    "u                 show / hide unit rows (MXU, vector, DMA, ICI)",
    "click             select an event (its details stay in the footer)",
    "Esc               clear selection, close this help",
    "h, F1, ?          this help",
    "q                 quit",
    "",
    "\"same as N\" by a core: not recorded by the engine (identical",
    "replica), drawn from core N's timeline.",
    "",
    "Colours: category of the critical path (the report's categories):",
};

static void draw_help(view_app *a)
{
    int n = (int)(sizeof help_lines / sizeof help_lines[0]);
    int w = 560, h = 40 + n * 18 + 40, x = (a->W - w) / 2, y = (a->H - h) / 2;
    SDL_SetRenderDrawBlendMode(a->ren, SDL_BLENDMODE_BLEND);
    SDL_Rect shade = {0, 0, a->W, a->H};
    SDL_SetRenderDrawColor(a->ren, 0, 0, 0, 110);
    SDL_RenderFillRect(a->ren, &shade);
    SDL_SetRenderDrawBlendMode(a->ren, SDL_BLENDMODE_NONE);
    fill(a, x, y, w, h, 0xFFFFFF);
    frame_rect(a, x, y, w, h, C_HEAD);
    for (int i = 0; i < n; i++)
        view_text(a, x + 20, y + 20 + i * 18, help_lines[i], i == 0 ? 1 : 1,
                  i == 0 ? 0x0072B2 : C_INK);
    int lx = x + 20, ly = y + 20 + n * 18 + 4;
    for (int c = 0; c < CAT_COUNT; c++) {
        fill(a, lx, ly, 12, 12, chart_cat_color((emu_cat)c));
        view_text(a, lx + 16, ly, emu_cat_name((emu_cat)c), 1, C_INK);
        lx += 16 + 6 * (int)strlen(emu_cat_name((emu_cat)c)) + 14;
    }
}

static void draw_footer(view_app *a)
{
    int y = a->H - VIEW_FOOTER;
    fill(a, 0, y, a->W, VIEW_FOOTER, 0xECEFF1);
    fill(a, 0, y, a->W, 1, 0xB0BEC5);
    char buf[400], t0[32], t1[32], du[32];
    if (a->panel == VIEW_TIMELINE) {
        /* Category legend and where the window is, on the right. */
        int lx = a->W - 10;
        for (int c = CAT_COUNT - 1; c >= 0; c--) {
            const char *n = emu_cat_name((emu_cat)c);
            lx -= 16 + 6 * (int)strlen(n) + 10;
            fill(a, lx, y + 7, 11, 11, chart_cat_color((emu_cat)c));
            view_text(a, lx + 15, y + 6, n, 1, C_INK);
        }
        int nv = view_rows_visible(a), last = a->row0 + nv - 1;
        if (last > a->r.cores - 1)
            last = a->r.cores - 1;
        fmt_t(du, sizeof du, a->v1 - a->v0);
        fmt_t(t0, sizeof t0, a->v0);
        snprintf(buf, sizeof buf, "cores %d-%d of %d   window %s from %s", a->row0,
                 last, a->r.cores, du, t0);
        view_text(a, a->W - 10 - 6 * (int)strlen(buf), y + 22, buf, 1, C_MUTED);
    }
    int core, unit, shown = 0;
    long ev;
    const char *who = "hover";
    if (a->sel_ev >= 0) {
        core = a->sel_core;
        unit = a->sel_unit;
        ev = a->sel_ev;
        who = "selected";
        shown = 1;
    } else
        shown = view_pick(a, a->mx, a->my, &core, &unit, &ev);
    if (shown) {
        const emu_event *e = &a->r.per_core[a->src[core]].events[ev];
        const char *ln = (e->layer >= 0 && e->layer < a->r.n_layers && a->r.layer_names)
                             ? a->r.layer_names[e->layer] : "(no layer)";
        fmt_t(t0, sizeof t0, e->t0);
        fmt_t(t1, sizeof t1, e->t1);
        fmt_t(du, sizeof du, e->t1 - e->t0);
        snprintf(buf, sizeof buf, "%s: core %d %s  layer %s (%s)  %s  %s .. %s (%s)",
                 who, core, unit == UNIT_CORE ? "critical path" : emu_unit_name((emu_unit)unit),
                 ln, emu_phase_name((emu_phase)e->phase),
                 emu_cat_name((emu_cat)e->cat), t0, t1, du);
        view_text(a, 8, y + 6, buf, 1, C_INK);
        snprintf(buf, sizeof buf, "count %lu   bytes %.4g   FLOPs %.4g   opcode %u",
                 (unsigned long)e->count, e->bytes, e->flops, (unsigned)e->opcode);
        view_text(a, 8, y + 22, buf, 1, C_MUTED);
        return;
    }
    if (a->panel == VIEW_TORUS) {
        int ch = view_torus_chip_at(a, a->mx, a->my);
        if (ch >= 0) {
            int dx, dy;
            torus_dims(a, &dx, &dy);
            snprintf(buf, sizeof buf, "chip %d (x=%d, y=%d)", ch, ch % dx, ch / dx);
            for (int k = 0; k < 2 && ch * 2 + k < a->r.cores; k++) {
                size_t l = strlen(buf);
                snprintf(buf + l, sizeof buf - l, "   core %d busy %.1f%%", ch * 2 + k,
                         100 * busy_share(&a->r.per_core[ch * 2 + k]));
            }
            view_text(a, 8, y + 6, buf, 1, C_INK);
            snprintf(buf, sizeof buf, "links out: +x %.1f%%  -x %.1f%%  +y %.1f%%  -y %.1f%%",
                     100 * link_util(a, ch, 0), 100 * link_util(a, ch, 1),
                     100 * link_util(a, ch, 2), 100 * link_util(a, ch, 3));
            view_text(a, 8, y + 22, buf, 1, C_MUTED);
            return;
        }
    }
    view_text(a, 8, y + 6,
              a->panel == VIEW_TIMELINE ? "hover or click an event for its layer, time, bytes and FLOPs"
                                        : "1 timeline   2 torus   3 bars",
              1, C_MUTED);
    view_text(a, 8, y + 22, "h: help and keys   q: quit", 1, C_MUTED);
}

static void draw_header(view_app *a)
{
    fill(a, 0, 0, a->W, VIEW_HEADER, C_HEAD);
    char buf[400], tb[32];
    fmt_t(tb, sizeof tb, a->r.step_time_s);
    snprintf(buf, sizeof buf, "%s on %s - step %s", a->r.trace, a->r.system, tb);
    view_text(a, 10, 8, buf, 1, 0xFFFFFF);
    static const char *const names[VIEW_PANELS] = {"1 timeline", "2 torus", "3 bars"};
    int x = a->W - 10;
    for (int p = VIEW_PANELS - 1; p >= 0; p--) {
        int w = 6 * (int)strlen(names[p]) + 16;
        x -= w + 4;
        fill(a, x, 4, w, VIEW_HEADER - 8, p == a->panel ? 0xFFFFFF : 0x37474F);
        view_text(a, x + 8, 8, names[p], 1, p == a->panel ? C_HEAD : 0xCFD8DC);
    }
    view_text(a, x - 80, 8, "h: help", 1, 0xCFD8DC);
}

void view_draw(view_app *a)
{
    fill(a, 0, 0, a->W, a->H, C_BG);
    if (a->panel == VIEW_TIMELINE)
        draw_timeline(a);
    else if (a->panel == VIEW_TORUS)
        draw_torus(a);
    else
        draw_bars(a);
    draw_header(a);
    draw_footer(a);
    if (a->help)
        draw_help(a);
}
