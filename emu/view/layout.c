/* view_layout — where the viewer puts things, what is under the mouse,
 * and the text that says it, computed from view_app alone: the panel
 * files draw what these functions lay out, and the tests read the same
 * functions.  No SDL. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/out/chart.h"
#include "emu/out/font.h"
#include "emu/params.h"
#include "emu/view/layout.h"

/* ---- the timeline ---------------------------------------------------- */

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

double view_t_of_x(const view_app *a, int x)
{
    int x0 = VIEW_LABELS, x1 = a->W - 10;
    return a->v0 + (a->v1 - a->v0) * (x - x0) / (double)(x1 - x0);
}

double view_x_of_t(const view_app *a, double t)
{
    int x0 = VIEW_LABELS, x1 = a->W - 10;
    return x0 + (t - a->v0) / (a->v1 - a->v0) * (x1 - x0);
}

/* The pixel columns [*x0, *x1) of the span [t0, t1) in the plot, its end
 * rounded up (ceil_end) or down, starting right of the last column
 * painted (drawn) and at least one column wide: each column is painted
 * once per lane.  0 when the span starts at or past the plot's right
 * edge xr. */
int view_span_cols(const view_app *a, double t0, double t1, int ceil_end,
                   int drawn, int xr, int *x0, int *x1)
{
    /* Clamped as doubles: deep in a long step a span's ends lie 1e11
     * pixels and more outside the plot, past what an int holds (the
     * conversion is undefined: x86 gives INT_MIN, which would draw a span
     * covering the whole window as one column). */
    double f0 = floor(view_x_of_t(a, t0)),
           f1 = ceil_end ? ceil(view_x_of_t(a, t1)) : floor(view_x_of_t(a, t1));
    *x0 = f0 < VIEW_LABELS ? VIEW_LABELS : f0 > xr ? xr : (int)f0;
    *x1 = f1 > xr ? xr : f1 < VIEW_LABELS ? VIEW_LABELS : (int)f1;
    if (*x0 <= drawn)
        *x0 = drawn + 1;
    if (*x1 <= *x0)
        *x1 = *x0 + 1;
    return *x0 < xr;
}

double view_nice_step(double range, int want)
{
    /* the smallest 1-2-5 step that gives at most `want` intervals */
    double raw = range / want, p = pow(10, floor(log10(raw))), m = raw / p;
    return (m <= 1.0001 ? 1 : m <= 2.0001 ? 2 : m <= 5.0001 ? 5 : 10) * p;
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
    double t = view_t_of_x(a, x), lo = t - px, hi = t + px;
    long best = -1;
    double bestd = INFINITY;
    for (size_t i = view_lane_first(L, lo); i < L->n; i++) {
        const emu_event *e = view_lane_ev(a, c, u, i);
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

/* First span ending at or after t (spans are in time order and do not
 * overlap, so their ends increase). */
size_t view_span_first(const view_app *a, double t)
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

void view_span_label(const emu_result *r, const view_span *sp, char *buf, size_t cap)
{
    static const char *const ph[PHASE_COUNT] = {"fwd", "bwd", "update"};
    const char *p = sp->phase < PHASE_COUNT ? ph[sp->phase] : "?";
    if (sp->layer >= 0 && sp->layer < r->n_layers && r->layer_names)
        snprintf(buf, cap, "%s %s", r->layer_names[sp->layer], p);
    else
        snprintf(buf, cap, "%s", sp->phase == PHASE_UPDATE ? "update" : p);
}

int view_span_fit(char *out, size_t cap, const char *label, int room)
{
    out[0] = 0;
    if (room <= 0)
        return 0;
    if (font_text_cells(label) <= room) {
        snprintf(out, cap, "%s", label);
        return 1;
    }
    if (room < VIEW_LANE_MIN_CELLS)
        return 0;
    font_fit(out, cap, label, room, "..");
    size_t l = strlen(out);
    if (l >= 3 && out[l - 3] == ' ') /* "conv2..", not "conv2 .." */
        memcpy(out + l - 3, "..", 3);
    return 2;
}
int view_pick_span(const view_app *a, int x, int y, long *span)
{
    int top = VIEW_HEADER + VIEW_AXIS + 2;
    if (a->panel != VIEW_TIMELINE || !a->has_events || !a->r.fits || !a->n_spans ||
        x < VIEW_LABELS || x >= a->W - 10 || y < top - 1 || y >= top + VIEW_LANE_BAR + 1)
        return 0;
    /* The span whose pixels hold x: the one drawn there (see
     * draw_layer_lane), or the nearest within a pixel. */
    double px = (a->v1 - a->v0) / (a->W - 10 - VIEW_LABELS), t = view_t_of_x(a, x);
    size_t i = view_span_first(a, t - px);
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

/* FLOPs and bytes of the unit events under a critical-path span, each
 * counted pro rata to its overlap (critical-path events carry none). */
void view_span_work(const view_app *a, int core, double t0, double t1,
                    double *flops, double *bytes)
{
    *flops = *bytes = 0;
    for (int u = 1; u < UNIT_COUNT; u++) {
        const view_lane *L = &a->lanes[core * UNIT_COUNT + u];
        for (size_t i = view_lane_first(L, t0); i < L->n; i++) {
            const emu_event *e = view_lane_ev(a, core, u, i);
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

/* "replicas 1-7"; "replica 3" for one. */
void view_fmt_reps(char *buf, size_t cap, const view_row *rw, const char *one,
                   const char *many)
{
    if (rw->rep0 == rw->rep1)
        snprintf(buf, cap, "%s %d", one, rw->rep0);
    else
        snprintf(buf, cap, "%s %d-%d", many, rw->rep0, rw->rep1);
}

/* ---- the torus ------------------------------------------------------- */

void view_torus_dims(const view_app *a, int *dx, int *dy)
{
    *dx = a->r.dim_x;
    *dy = a->r.dim_y;
    if (*dx <= 0 || *dy <= 0 || *dx * *dy < a->r.chips) {
        *dx = (int)ceil(sqrt((double)a->r.chips));
        *dy = (a->r.chips + *dx - 1) / *dx;
    }
}

void view_torus_geom(const view_app *a, int *cell, int *ox, int *oy)
{
    int dx, dy;
    view_torus_dims(a, &dx, &dy);
    int aw = a->W - VIEW_TORUS_LEGEND - 50, ah = a->H - VIEW_HEADER - VIEW_FOOTER - 60;
    int c = aw / dx < ah / dy ? aw / dx : ah / dy;
    if (c < 4)
        c = 4;
    *cell = c;
    *ox = 30 + (aw - c * dx) / 2;
    *oy = VIEW_HEADER + 44 + (ah - c * dy) / 2;
}

double view_busy_share(const emu_core_result *pc)
{
    return pc->step_time_s > 0 ? 1 - pc->breakdown_s[CAT_IDLE] / pc->step_time_s : 0;
}

double view_link_util(const view_app *a, int chip, int dir)
{
    if (!a->r.link_busy_s || a->r.step_time_s <= 0 || chip < 0 || chip >= a->r.chips)
        return 0;
    return a->r.link_busy_s[chip * 4 + dir] / a->r.step_time_s;
}

/* Wrap-around links exist on full pods only (params.c); a system the
 * table does not know has them when an edge link carried traffic. */
int view_torus_wraps(const view_app *a)
{
    const tpu_system *sys = tpu_system_find(a->r.system);
    if (sys)
        return sys->full_pod;
    int dx, dy;
    view_torus_dims(a, &dx, &dy);
    for (int ch = 0; ch < a->r.chips; ch++) {
        int x = ch % dx, y = ch / dx;
        if ((x == 0 && view_link_util(a, ch, 1) > 0) || (x == dx - 1 && view_link_util(a, ch, 0) > 0) ||
            (y == 0 && view_link_util(a, ch, 3) > 0) || (y == dy - 1 && view_link_util(a, ch, 2) > 0))
            return 1;
    }
    return 0;
}

/* Does chip ch have a link in direction dir (+x, -x, +y, -y)? */
int view_link_exists(const view_app *a, int ch, int dir, int wraps)
{
    int dx, dy;
    view_torus_dims(a, &dx, &dy);
    int x = ch % dx, y = ch / dx, n = dir < 2 ? dx : dy, p = dir < 2 ? x : y;
    if (n < 2)
        return 0;
    int nb = (dir & 1) ? p - 1 : p + 1;
    if (nb < 0 || nb >= n)
        return wraps;
    return (dir < 2 ? y * dx + nb : nb * dx + x) < a->r.chips;
}

int view_torus_chip_at(const view_app *a, int x, int y)
{
    int cell, ox, oy, dx, dy;
    view_torus_geom(a, &cell, &ox, &oy);
    view_torus_dims(a, &dx, &dy);
    if (x < ox || y < oy)
        return -1;
    int cx = (x - ox) / cell, cy = (y - oy) / cell;
    if (cx >= dx || cy >= dy)
        return -1;
    int ch = cy * dx + cx;
    return ch < a->r.chips ? ch : -1;
}

/* Where a chip's number goes, as an offset from the chip's left edge;
 * -1 for none.  Its line starts 2 pixels below the chip and ends above
 * the next row's hover outline (3 pixels out).  Left of the chip's two
 * vertical strokes (they span its middle less lw + 1 to its middle plus
 * lw) with a pixel clear, else 2 pixels right of them and 4 short of the
 * next chip, a place the link % labels (pct) take when they are on. */
int view_chip_label_dx(const view_app *a, int cell, int chip, int lw, int pct)
{
    char widest[16];
    snprintf(widest, sizeof widest, "%d", a->r.chips > 0 ? a->r.chips - 1 : 0);
    int tw = view_text_w(widest), mid = chip / 2;
    if (cell - chip < 2 + FONT_H + 3)
        return -1;
    if (2 + tw <= mid - lw - 2)
        return 2;
    if (!pct && mid + lw + 3 + tw <= cell - 4)
        return mid + lw + 3;
    return -1;
}

/* ---- the layers panel ------------------------------------------------ */

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

int view_layer_slots(const view_app *a)
{
    int n = (a->H - VIEW_FOOTER - VIEW_LROW_TOP - 4) / VIEW_LROW_H;
    return n < 3 ? 3 : n;
}

int view_layer_rows(const view_app *a, view_lrow *out, int cap, int *slots)
{
    const emu_result *r = &a->r;
    view_lrow end;
    int has_end = a->lay_n > 0 && end_row(a, &end);
    int fit = view_layer_slots(a), m = a->lay_n;
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
        w->s = view_layer_s(r, l);
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

view_lcols view_layer_cols(const view_app *a)
{
    view_lcols c;
    c.name_x = 10;
    c.name_w = (a->W >= 960 ? 36 : 26) * FONT_W;
    c.bar_x = c.name_x + c.name_w + 8;
    c.num_r = a->W - 14;
    c.bar_w = c.num_r - 15 * FONT_W - 8 - c.bar_x;
    return c;
}

void view_lrow_label(const view_app *a, const view_lrow *w, char *buf, size_t cap)
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
double view_layer_scale(const view_app *a)
{
    double s = a->lay_n > 0 ? view_layer_s(&a->r, a->lay_order[0]) : 0;
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

/* ---- text ------------------------------------------------------------ */

int view_text_w(const char *s)
{
    return font_text_width(s, 1);
}

/* HBM bytes as the CLI prints them: GiB from 1 GiB up, MiB below. */
void view_fmt_bytes(char *buf, size_t cap, double b)
{
    const double gib = 1024.0 * 1024 * 1024;
    if (b >= gib)
        snprintf(buf, cap, "%.3g GiB", b / gib);
    else
        snprintf(buf, cap, "%.3g MiB", b / (1024.0 * 1024));
}

/* Appends s to buf (cap bytes, *n used), cut to at most max characters
 * (not bytes) with "..." at the end when longer, never inside one. */
void view_put_cut(char *buf, size_t cap, int *n, const char *s, int max)
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
void view_whatif_text(const emu_result *r, char *buf, size_t cap)
{
    int n = 0;
    buf[0] = 0;
    if (r->freeze[0]) {
        view_put_cut(buf, cap, &n, "freeze ", 7);
        view_put_cut(buf, cap, &n, r->freeze, 32);
    }
    if (r->n_overrides > 0) {
        char set[512];
        int m = snprintf(set, sizeof set, "set ");
        for (int i = 0; i < r->n_overrides && m < (int)sizeof set - 1; i++)
            m += snprintf(set + m, sizeof set - (size_t)m, "%s%s=%s",
                          i ? ", " : "", r->overrides[i].key,
                          r->overrides[i].value);
        if (n)
            view_put_cut(buf, cap, &n, "  ", 2);
        view_put_cut(buf, cap, &n, set, 96);
    }
}
