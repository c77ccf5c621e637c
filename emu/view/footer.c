/* The footer: what is under the mouse or selected (an event, a layer-lane
 * span, a replica group's label, a layers-panel row, a chip), else the
 * category legend, where the window is, and a hint. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/out/chart.h"
#include "emu/out/font.h"
#include "emu/view/app.h"

#include "firmware/isa.h"

static void draw_event_info(view_app *a, int y, const char *who, int core, int unit,
                            long ev)
{
    char buf[512], t0[48], t1[48], du[48];
    const emu_event *e = &a->r.per_core[a->src[core]].events[ev];
    const char *ln = (e->layer >= 0 && e->layer < a->r.n_layers && a->r.layer_names)
                         ? a->r.layer_names[e->layer] : "(no layer)";
    double res = fmin(e->t1 - e->t0, a->v1 - a->v0) / 10;
    chart_fmt_time(t0, sizeof t0, e->t0, CHART_TIME_RES, res);
    chart_fmt_time(t1, sizeof t1, e->t1, CHART_TIME_RES, res);
    chart_fmt_time(du, sizeof du, e->t1 - e->t0, CHART_TIME_SIG, 0);
    snprintf(buf, sizeof buf, "%s: core %d %s  layer %s (%s)  %s  %s .. %s (%s)",
             who, core, unit == UNIT_CORE ? "critical path" : emu_unit_name((emu_unit)unit),
             ln, emu_phase_name((emu_phase)e->phase),
             emu_cat_name((emu_cat)e->cat), t0, t1, du);
    view_text_fit(a, 8, y + 6, buf, a->W - 16, VIEW_INK);
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
        view_span_work(a, a->src[core], e->t0, e->t1, &fl, &by);
        approx = 1;
    }
    if (fl == 0 && by == 0)
        snprintf(work, sizeof work, "FLOPs, bytes: %s",
                 unit == UNIT_CORE ? "none recorded, see unit rows (u)" : "0");
    else
        snprintf(work, sizeof work, "%sFLOPs %.4g   bytes %.4g", approx ? "unit work in span: " : "",
                 fl, by);
    snprintf(buf, sizeof buf, "%s   %s", what, work);
    view_text_fit(a, 8, y + 22, buf, a->W - 16, VIEW_MUTED);
}

/* A layer-lane span in the footer, as an event is: the layer, phase and
 * times on the first line; on the second, the categories of the core's
 * critical path inside the span, longest first. */
static void draw_span_info(view_app *a, int y, const char *who, long si)
{
    char buf[600], t0[48], t1[48], du[48], name[300];
    const view_span *sp = &a->spans[si];
    double res = fmin(sp->t1 - sp->t0, a->v1 - a->v0) / 10;
    chart_fmt_time(t0, sizeof t0, sp->t0, CHART_TIME_RES, res);
    chart_fmt_time(t1, sizeof t1, sp->t1, CHART_TIME_RES, res);
    chart_fmt_time(du, sizeof du, sp->t1 - sp->t0, CHART_TIME_SIG, 0);
    if (sp->layer >= 0 && sp->layer < a->r.n_layers && a->r.layer_names)
        snprintf(name, sizeof name, "layer %s (%s)", a->r.layer_names[sp->layer],
                 emu_phase_name((emu_phase)sp->phase));
    else
        snprintf(name, sizeof name, "%s (no layer)", emu_phase_name((emu_phase)sp->phase));
    snprintf(buf, sizeof buf, "%s: core %d %s  %s .. %s (%s)", who, a->spans_core, name, t0,
             t1, du);
    view_text_fit(a, 8, y + 6, buf, a->W - 16, VIEW_INK);
    double cat[CAT_COUNT] = {0}, tot = 0;
    for (size_t i = sp->ev0; i < sp->ev0 + sp->n; i++) {
        const emu_event *e = view_lane_ev(a, a->spans_core, UNIT_CORE, i);
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
        chart_fmt_time(du, sizeof du, cat[best], CHART_TIME_SIG, 0);
        n += snprintf(buf + n, sizeof buf - (size_t)n, "%s %s %s (%.0f%%)", k ? "," : "",
                      emu_cat_name((emu_cat)best), du, tot > 0 ? 100 * cat[best] / tot : 0);
        if (n >= (int)sizeof buf - 1)
            break;
    }
    if (n < (int)sizeof buf - 1)
        snprintf(buf + n, sizeof buf - (size_t)n, "   %zu event%s", sp->n, sp->n == 1 ? "" : "s");
    view_text_fit(a, 8, y + 22, buf, a->W - 16, VIEW_MUTED);
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
    view_text_fit(a, 8, y + 6, buf, a->W - 16, VIEW_INK);
    view_text_fit(a, 8, y + 22, "hover or click a span for its times and categories; "
                  "it follows the first row shown", a->W - 16, VIEW_MUTED);
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
    view_fmt_reps(reps, sizeof reps, rw, "replica", "replicas");
    snprintf(buf, sizeof buf,
             "%s (%d cores): same as replica 0, shard by shard; drawn from core %d (= core %d)",
             reps, rw->ncores, rw->first, rw->src);
    view_text_fit(a, 8, y + 6, buf, a->W - 16, VIEW_INK);
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
    view_text_fit(a, 8, y + 22, buf, a->W - 16, VIEW_MUTED);
    return 1;
}

/* A layers-panel row in the footer: its name, time, share and rank; on
 * the second line each category's time, longest first. */
static int view_draw_layer_info(view_app *a, int y)
{
    view_lrow w;
    if (!view_layer_pick(a, a->mx, a->my, &w))
        return 0;
    char buf[600], name[300], tb[48], sb[48];
    double step = a->r.per_core[0].step_time_s;
    chart_fmt_time(tb, sizeof tb, w.s, CHART_TIME_SIG, 0);
    chart_fmt_time(sb, sizeof sb, step, CHART_TIME_SIG, 0);
    if (w.kind == VIEW_LROW_LAYER)
        snprintf(name, sizeof name, "layer %s", a->r.layer_names[w.layer]);
    else
        view_lrow_label(a, &w, name, sizeof name);
    int n = snprintf(buf, sizeof buf, "hover: core 0 %s  %s (%.1f%% of the %s step)", name, tb,
                     step > 0 ? 100 * w.s / step : 0, sb);
    if (w.kind == VIEW_LROW_LAYER)
        snprintf(buf + n, sizeof buf - (size_t)n, "  #%d of %d", w.rank + 1, a->lay_n);
    else if (w.kind == VIEW_LROW_END)
        snprintf(buf + n, sizeof buf - (size_t)n, "  in no layer");
    else if (w.s > view_layer_scale(a))
        snprintf(buf + n, sizeof buf - (size_t)n,
                 "  (bar cut at the scale, its categories in proportion)");
    view_text_fit(a, 8, y + 6, buf, a->W - 16, VIEW_INK);
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
        chart_fmt_time(tb, sizeof tb, w.cat[best], CHART_TIME_SIG, 0);
        n += snprintf(buf + n, sizeof buf - (size_t)n, "%s %s %s", k ? "," : "",
                      emu_cat_name((emu_cat)best), tb);
        if (n >= (int)sizeof buf - 1)
            break;
    }
    if (!any)
        snprintf(buf + n, sizeof buf - (size_t)n, " none");
    view_text_fit(a, 8, y + 22, buf, a->W - 16, VIEW_MUTED);
    return 1;
}

void view_draw_footer(view_app *a)
{
    int y = a->H - VIEW_FOOTER;
    view_fill(a, 0, y, a->W, VIEW_FOOTER, 0xECEFF1);
    view_fill(a, 0, y, a->W, 1, 0xB0BEC5);
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
    if (draw_group_info(a, y) || draw_lane_info(a, y) || view_draw_layer_info(a, y))
        return;
    int right1 = a->W - 10, right2 = a->W - 10;
    int legend = (a->panel == VIEW_TIMELINE && a->has_events) ||
                 (a->panel == VIEW_LAYERS && a->lay_n > 0 && a->r.fits);
    if (legend) {
        /* Category legend and where the window is, on the right. */
        int lx = a->W - 10;
        for (int c = CAT_COUNT - 1; c >= 0; c--) {
            const char *n = emu_cat_name((emu_cat)c);
            lx -= 16 + view_text_w(n) + 10;
            view_fill(a, lx, y + 7, 11, 11, chart_cat_color((emu_cat)c));
            view_text(a, lx + 15, y + 6, n, 1, VIEW_INK);
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
        right2 = a->W - 10 - view_text_w(buf);
        view_text(a, right2, y + 22, buf, 1, VIEW_MUTED);
        right2 -= 10;
    } else if (legend) {
        int nv = view_rows_visible(a), last = a->row0 + nv - 1;
        if (last > a->n_rows - 1)
            last = a->n_rows - 1;
        double w = a->v1 - a->v0;
        chart_fmt_time(du, sizeof du, w, CHART_TIME_SIG, 0);
        chart_fmt_time(t0, sizeof t0, a->v0, CHART_TIME_RES, w / 100);
        if (a->n_rows == a->r.cores)
            snprintf(buf, sizeof buf, "cores %d-%d of %d   window %s from %s",
                     a->rows[a->row0].first, a->rows[last].last, a->r.cores, du, t0);
        else
            snprintf(buf, sizeof buf, "rows %d-%d of %d (%d cores)   window %s from %s",
                     a->row0 + 1, last + 1, a->n_rows, a->r.cores, du, t0);
        right2 = a->W - 10 - view_text_w(buf);
        view_text(a, right2, y + 22, buf, 1, VIEW_MUTED);
        right2 -= 10;
    }
    if (a->panel == VIEW_TORUS) {
        int ch = view_torus_chip_at(a, a->mx, a->my);
        if (ch >= 0) {
            int dx, dy, wraps = view_torus_wraps(a);
            view_torus_dims(a, &dx, &dy);
            snprintf(buf, sizeof buf, "chip %d (x=%d, y=%d)", ch, ch % dx, ch / dx);
            for (int k = 0; k < 2 && ch * 2 + k < a->r.cores; k++) {
                size_t l = strlen(buf);
                const emu_core_result *pc = &a->r.per_core[ch * 2 + k];
                snprintf(buf + l, sizeof buf - l, "   core %d: MXU %.1f%%, busy %.1f%%",
                         ch * 2 + k, 100 * pc->mxu_utilization, 100 * view_busy_share(pc));
            }
            view_text_fit(a, 8, y + 6, buf, a->W - 16, VIEW_INK);
            static const char *const dn[4] = {"+x", "-x", "+y", "-y"};
            snprintf(buf, sizeof buf, "links out:");
            for (int d = 0; d < 4; d++) {
                size_t l = strlen(buf);
                if (view_link_exists(a, ch, d, wraps))
                    snprintf(buf + l, sizeof buf - l, "  %s %.2f%%", dn[d],
                             100 * view_link_util(a, ch, d));
                else
                    snprintf(buf + l, sizeof buf - l, "  %s none", dn[d]);
            }
            view_text_fit(a, 8, y + 22, buf, a->W - 16, VIEW_MUTED);
            return;
        }
    }
    const char *hint = a->panel == VIEW_TIMELINE && a->has_events
                           ? "hover or click an event for its layer, time, bytes and FLOPs"
                       : legend ? "hover a layer for its time by category"
                                : "1 timeline   2 torus   3 bars   4 layers";
    view_text_fit(a, 8, y + 6, hint, right1 - 8, VIEW_MUTED);
    const char *keys = "h: help and keys   q: quit";
    if (8 + view_text_w(keys) <= right2)
        view_text(a, 8, y + 22, keys, 1, VIEW_MUTED);
}
