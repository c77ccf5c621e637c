/* The timeline panel (key 1): the time axis, the layer lane, one row per
 * core (or per run of identical cores or replicas), each the core's
 * critical path coloured by category, with unit rows under it (u). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/out/chart.h"
#include "emu/out/font.h"
#include "emu/view/app.h"

/* Draws one lane in a row band; each pixel column gets at most one
 * rectangle, and the search jumps over events hidden under a drawn pixel. */
static void draw_lane(view_app *a, int core, int unit, int y, int h)
{
    const view_lane *L = &a->lanes[core * UNIT_COUNT + unit];
    if (!L->n)
        return;
    int xr = a->W - 10;
    double px = (a->v1 - a->v0) / (xr - VIEW_LABELS);
    size_t i = view_lane_first(L, a->v0);
    int drawn = VIEW_LABELS - 1; /* last pixel column painted */
    while (i < L->n) {
        const emu_event *e = view_lane_ev(a, core, unit, i);
        if (e->t0 > a->v1)
            break;
        int x0, x1;
        if (view_span_cols(a, e->t0, e->t1, 1, drawn, xr, &x0, &x1)) {
            view_fill(a, x0, y, x1 - x0, h, chart_cat_color((emu_cat)e->cat));
            drawn = x1 - 1;
        }
        if (a->sel_ev >= 0 && a->sel_core == core && a->sel_unit == unit &&
            (long)L->idx[i] == a->sel_ev)
            view_frame_rect(a, x0 - 1, y - 1, x1 - x0 + 2, h + 2, 0x000000);
        /* Skip to the first event that ends right of the painted pixel. */
        double tnext = a->v0 + (drawn + 1 - VIEW_LABELS) * px;
        size_t j = view_lane_first(L, tnext);
        i = j > i ? j : i + 1;
        if (drawn >= xr - 1)
            break;
    }
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
    double origin = 0, st = view_nice_step(wu, 8);
    char buf[64], cap[64];
    snprintf(buf, sizeof buf, "%.*f", chart_time_decimals(st, 1), v1u);
    if (strlen(buf) > 5) {
        double p = pow(10, ceil(log10(wu)));
        origin = floor(v0u / p) * p;
    }
    /* Two passes: the step sets the label width, the width the step. */
    for (int pass = 0; pass < 2; pass++) {
        int d = chart_time_decimals(st, 1), l0, l1;
        l0 = snprintf(buf, sizeof buf, "%.*f", d, v0u - origin);
        l1 = snprintf(buf, sizeof buf, "%.*f", d, v1u - origin);
        int lw = FONT_W * ((l0 > l1 ? l0 : l1) + 3);
        int want = pw / lw;
        st = view_nice_step(wu, want < 2 ? 2 : want > 10 ? 10 : want);
    }
    /* The caption: deep in a long step the origin needs every digit, and
     * "ns after 1.149303140 s" is wider than the label column: it runs on
     * into the plot and the tick labels it would cover are left out. */
    if (origin != 0) {
        char ob[48];
        chart_fmt_time(ob, sizeof ob, origin / sc, CHART_TIME_RES, pow(10, ceil(log10(wu))) / sc);
        snprintf(cap, sizeof cap, "%s after %s", un, ob);
    } else
        snprintf(cap, sizeof cap, "time (%s)", un);
    view_text_fit(a, 6, VIEW_HEADER + 5, cap, xr - 6, VIEW_INK);
    int d = chart_time_decimals(st, 1), last_r = 6 + view_text_w(cap);
    if (last_r < VIEW_LABELS - 6)
        last_r = VIEW_LABELS - 6;
    for (double tu = ceil(v0u / st) * st; tu <= v1u + 1e-9 * st; tu += st) {
        int x = (int)view_x_of_t(a, tu / sc);
        if (x > xr)
            break;
        view_fill(a, x, top, 1, a->H - top - VIEW_FOOTER, VIEW_GRID);
        double v = tu - origin;
        if (fabs(v) < 0.5 * st * 1e-6)
            v = 0;
        snprintf(buf, sizeof buf, "%.*f", d, v);
        int tw = view_text_w(buf), lx = x - tw / 2;
        if (lx + tw > xr)
            lx = xr - tw; /* the last label stays inside the plot */
        if (lx < VIEW_LABELS)
            lx = VIEW_LABELS;
        if (lx < last_r + 6)
            continue;
        view_text(a, lx, VIEW_HEADER + 5, buf, 1, VIEW_INK);
        last_r = lx + tw;
    }
}

/* A replica group's label.  The full sentence, "replicas 1-7 (56 cores):
 * same as replica 0", is wider than the label column at any window size:
 * the row says "replicas 1-7 = 0" and hovering the label puts the
 * sentence and the cores in the footer. */
static void draw_group_label(view_app *a, const view_row *rw, int y)
{
    char reps[48], same[48], n[48];
    int room = VIEW_LABELS - 14;
    view_fmt_reps(reps, sizeof reps, rw, "replica", "replicas");
    if (a->units) {
        int r2 = room - view_text_w("vector") - 6;
        view_text_fit(a, 6, y, reps, room, VIEW_INK);
        snprintf(same, sizeof same, "= replica 0");
        if (view_text_w(same) > r2)
            snprintf(same, sizeof same, "= 0");
        view_text_fit(a, 6, y + 13, same, r2, VIEW_SAME);
        snprintf(n, sizeof n, "%d cores", rw->ncores);
        view_text_fit(a, 6, y + 25, n, r2, VIEW_MUTED);
        return;
    }
    snprintf(same, sizeof same, " = 0");
    if (view_text_w(reps) + view_text_w(same) > room)
        view_fmt_reps(reps, sizeof reps, rw, "rep", "reps");
    view_text_fit(a, 6, y, reps, room, VIEW_INK);
    int x = 6 + view_text_w(reps);
    view_text_fit(a, x, y, same, room + 6 - x, VIEW_SAME);
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
        view_text_fit(a, 6, y, core, room, VIEW_INK);
        int l = 1;
        if (same[0])
            view_text_fit(a, 6, y + 14 + (l++ - 1) * 12 - 1, same, room - view_text_w("vector") - 6,
                     VIEW_SAME);
        view_text_fit(a, 6, y + 14 + (l - 1) * 12 - 1, chip, room - view_text_w("vector") - 6, VIEW_MUTED);
        return;
    }
    /* One line: "cores 1-2047: same as 0", shortened until it fits. */
    if (!same[0]) {
        view_text_fit(a, 6, y, core, room, VIEW_INK);
        return;
    }
    snprintf(same, sizeof same, ": same as %d", rw->src);
    if (view_text_w(core) + view_text_w(same) > room)
        snprintf(same, sizeof same, " = %d", rw->src);
    if (view_text_w(core) + view_text_w(same) > room && rw->first != rw->last)
        snprintf(core, sizeof core, "%d-%d", rw->first, rw->last);
    view_text_fit(a, 6, y, core, room, VIEW_INK);
    int x = 6 + view_text_w(core);
    view_text_fit(a, x, y, same, room + 6 - x, VIEW_SAME);
}

/* The lane band at y: label column, then the spans, each pixel column
 * painted once (a column that several narrow spans share shows the first;
 * zooming in separates them).  A span's label is drawn inside it as
 * view_span_fit cuts it. */
static void draw_layer_lane(view_app *a, int y)
{
    char lab[48], buf[300], cut[300];
    int xr = a->W - 10, h = VIEW_LANE_BAR;
    view_fill(a, 0, y - 1, VIEW_LABELS - 4, h + 2, VIEW_LANE_BG);
    snprintf(lab, sizeof lab, "layers (core %d)", a->spans_core);
    view_text_fit(a, 6, y + 1, lab, VIEW_LABELS - 14, VIEW_INK);
    if (!a->n_spans) {
        view_text_fit(a, VIEW_LABELS + 4, y + 1, "no critical-path events on this core",
                      xr - VIEW_LABELS - 8, VIEW_MUTED);
        return;
    }
    double px = (a->v1 - a->v0) / (xr - VIEW_LABELS);
    int drawn = VIEW_LABELS - 1;
    SDL_Rect sel = {0, 0, 0, 0};
    size_t i = view_span_first(a, a->v0);
    while (i < a->n_spans) {
        const view_span *sp = &a->spans[i];
        if (sp->t0 > a->v1)
            break;
        int x0, x1;
        if (view_span_cols(a, sp->t0, sp->t1, 0, drawn, xr, &x0, &x1)) {
            view_fill(a, x0, y, x1 - x0, h, VIEW_LANE_SHADE(i));
            drawn = x1 - 1;
            int room = (x1 - x0 - 6) / FONT_W;
            if (room > 0) {
                view_span_label(&a->r, sp, buf, sizeof buf);
                if (view_span_fit(cut, sizeof cut, buf, room))
                    view_text(a, x0 + 3, y + 1, cut, 1, VIEW_INK);
            }
            if (a->sel_span == (long)i)
                sel = (SDL_Rect){x0 - 1, y - 1, x1 - x0 + 2, h + 2};
        }
        double tnext = a->v0 + (drawn + 1 - VIEW_LABELS) * px;
        size_t j = view_span_first(a, tnext);
        i = j > i ? j : i + 1;
        if (drawn >= xr - 1)
            break;
    }
    /* last, so the next span's fill does not cover its right edge */
    if (sel.w)
        view_frame_rect(a, sel.x, sel.y, sel.w, sel.h, 0x000000);
}

void view_draw_timeline(view_app *a)
{
    int top = VIEW_HEADER + VIEW_AXIS, xr = a->W - 10;
    if (!a->has_events) {
        /* A report stores no events: no axis, nothing to hover. */
        view_text_fit(a, 20, top + 10,
                      "This result has no recorded timeline (a report JSON stores none).",
                      a->W - 40, VIEW_INK);
        view_text_fit(a, 20, top + 28, "Press 2 for the torus, 3 for the bars, 4 for the layers.", a->W - 40, VIEW_INK);
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
            view_fill(a, 0, y - 1, VIEW_LABELS - 4, rh, 0xECEFF1);
        draw_row_label(a, rw, y);
        draw_lane(a, c, UNIT_CORE, y, 13);
        if (a->units)
            for (int u = 1; u < UNIT_COUNT; u++) {
                int yy = y + 14 + (u - 1) * 12;
                view_text(a, VIEW_LABELS - 8 - view_text_w(ul[u]), yy - 1, ul[u], 1, VIEW_MUTED);
                draw_lane(a, c, u, yy + 2, 8);
            }
        /* The step's end, where idle stops. */
        double xe = view_x_of_t(a, pc->step_time_s); /* int only when seen */
        if (xe >= VIEW_LABELS && xe < xr)
            view_fill(a, (int)xe, y - 1, 1, rh - 2, 0x000000);
    }
    /* Scroll position. */
    if (a->n_rows > nv) {
        int h = a->H - top - VIEW_FOOTER;
        int bh = h * nv / a->n_rows, by = top + h * a->row0 / a->n_rows;
        view_fill(a, a->W - 6, top, 4, h, 0xE0E0E0);
        view_fill(a, a->W - 6, by, 4, bh < 6 ? 6 : bh, 0x808080);
    }
}
