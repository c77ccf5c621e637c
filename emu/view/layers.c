/* The layers panel (key 4): core 0's layers by critical-path time,
 * largest first, one bar each stacked by category on a common scale, as
 * `tpuemu run --layers` prints them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/out/chart.h"
#include "emu/out/font.h"
#include "emu/view/app.h"

void view_draw_layers(view_app *a)
{
    const emu_result *r = &a->r;
    int x0 = 20, room = a->W - 40;
    if (r->n_layers <= 0 || !r->layer_time_s) {
        view_text_fit(a, x0, VIEW_HEADER + 24,
                      "This result has no per-layer times (a report without layers[]: an older or "
                      "edited one).", room, VIEW_INK);
        view_text_fit(a, x0, VIEW_HEADER + 42, "tpuemu run TRACE --report R.json writes them; "
                      "press 3 for the per-core bars.", room, VIEW_MUTED);
        return;
    }
    if (a->lay_n == 0) {
        view_text_fit(a, x0, VIEW_HEADER + 24, "No layer has time on core 0's critical path.",
                      room, VIEW_INK);
        return;
    }
    char buf[400], tb[48], sb[48];
    double step = r->per_core[0].step_time_s;
    chart_fmt_time(sb, sizeof sb, step, CHART_TIME_SIG, 0);
    snprintf(buf, sizeof buf, "core 0's critical path by layer, largest first: %d layer%s "
             "with time of %d, step %s", a->lay_n, a->lay_n == 1 ? "" : "s", r->n_layers, sb);
    view_text_fit(a, 10, VIEW_HEADER + 8, buf, a->W - 20, VIEW_MUTED);
    view_lrow rows[512], hov;
    int ls, n = view_layer_rows(a, rows, 512, &ls);
    int hk = view_layer_pick(a, a->mx, a->my, &hov) ? (a->my - VIEW_LROW_TOP) / VIEW_LROW_H : -1;
    view_lcols c = view_layer_cols(a);
    double scale = view_layer_scale(a);
    for (int k = 0; k < n; k++) {
        const view_lrow *w = &rows[k];
        int y = VIEW_LROW_TOP + k * VIEW_LROW_H;
        if (k == hk)
            view_fill(a, 0, y, a->W - 8, VIEW_LROW_H - 1, 0xDDE3E7);
        else if (k % 2 == 0)
            view_fill(a, 0, y, a->W - 8, VIEW_LROW_H - 1, 0xEEF1F3);
        char name[300];
        view_lrow_label(a, w, name, sizeof name);
        view_text_fit(a, c.name_x, y + 2, name, c.name_w,
                      w->kind == VIEW_LROW_LAYER ? VIEW_INK : VIEW_MUTED);
        /* Stacked by category, each edge at its rounded cumulative time,
         * so the bar's length is the row's time on the common scale.  A
         * row longer than the scale (the other layers) fills the width
         * with its categories in proportion (cut at the scale, stacked
         * mxu first, it would show only the first one or two). */
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
                view_fill(a, px, y + 2, xe - px, FONT_H, chart_cat_color((emu_cat)q));
            if (xe > px)
                px = xe;
        }
        if (cut) { /* a break mark: the bar goes on past the scale */
            view_fill(a, c.bar_x + c.bar_w - 9, y + 2, 2, FONT_H, VIEW_BG);
            view_fill(a, c.bar_x + c.bar_w - 5, y + 2, 2, FONT_H, VIEW_BG);
        }
        chart_fmt_time(tb, sizeof tb, w->s, CHART_TIME_SIG, 0);
        snprintf(buf, sizeof buf, "%s %5.1f%%", tb, step > 0 ? 100 * w->s / step : 0);
        view_text(a, c.num_r - view_text_w(buf), y + 2, buf, 1, VIEW_INK);
    }
    /* Scroll position over the layers. */
    if (ls < a->lay_n) {
        int top = VIEW_LROW_TOP, h = ls * VIEW_LROW_H;
        int bh = h * ls / a->lay_n, by = top + h * a->lrow0 / a->lay_n;
        view_fill(a, a->W - 6, top, 4, h, 0xE0E0E0);
        view_fill(a, a->W - 6, by, 4, bh < 6 ? 6 : bh, 0x808080);
    }
}
