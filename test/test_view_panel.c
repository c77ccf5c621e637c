/* The viewer's layers panel (docs/VIEWER.md, key 4): core 0's layers from
 * the result's per-layer times (a report's layers[]), largest first, one
 * stacked bar each on a common scale, the layers left out as one
 * "(other N layers)" row and the part of the step no layer holds as
 * "(update, end of step)", as `tpuemu run --layers` prints them.  Checked
 * on the pixels of screenshots: names read back where the rows are, bar
 * lengths against the times, the right-hand figures, scrolling, the
 * footer on hover, a report without layers[], a trace against its own
 * report, and the four tabs at 640 pixels. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/out/chart.h"
#include "emu/out/font.h"
#include "emu/report.h"
#include "emu/view/layout.h"
#include "test/harness.h"

/* The panel's layout is the viewer's own (emu/view/layout.h): rows from
 * VIEW_LROW_TOP, VIEW_LROW_H apart, in view_layer_cols' columns. */
enum { P_TOP = VIEW_LROW_TOP, P_RH = VIEW_LROW_H, P_FOOTER = VIEW_FOOTER };
#define P_INK ((uint32_t)VIEW_INK)
#define P_MUTED ((uint32_t)VIEW_MUTED)

typedef struct {
    int name_x, name_cells, bar_x, bar_w, num_r, slots;
} geom;

static geom geom_of(int w, int h)
{
    view_app a;
    memset(&a, 0, sizeof a);
    a.W = w;
    a.H = h;
    view_lcols c = view_layer_cols(&a);
    geom g = {c.name_x, c.name_w / FONT_W, c.bar_x, c.bar_w, c.num_r, view_layer_slots(&a)};
    return g;
}

static unsigned char *shot(th_ctx *t, const char *args, int *w, int *h)
{
    return th_view_shot(t, args, "view_panel.png", w, h);
}

static int is_cat(const unsigned char *p, int w, int x, int y)
{
    const unsigned char *q = p + 3 * ((size_t)y * w + x);
    uint32_t c = (uint32_t)q[0] << 16 | (uint32_t)q[1] << 8 | q[2];
    for (int k = 0; k < CAT_COUNT; k++)
        if (c == chart_cat_color((emu_cat)k))
            return 1;
    return 0;
}

/* Pixels of row k's bar in category colours, along the bar's middle. */
static int bar_px(const unsigned char *p, int w, const geom *g, int k)
{
    int y = P_TOP + k * P_RH + 2 + FONT_H / 2, n = 0;
    for (int x = g->bar_x; x < g->bar_x + g->bar_w; x++)
        n += is_cat(p, w, x, y);
    return n;
}

/* The figures on the right of a row: time and share of core 0's step. */
static int figures_at(const unsigned char *p, int w, int h, const geom *g, int k, double s,
                      double step)
{
    char tb[48], buf[96];
    chart_fmt_time(tb, sizeof tb, s, CHART_TIME_SIG, 0);
    snprintf(buf, sizeof buf, "%s %5.1f%%", tb, 100 * s / step);
    return th_text_at(p, w, h, g->num_r - font_text_width(buf, 1), P_TOP + k * P_RH + 2, buf,
                      P_INK);
}

static int name_at(const unsigned char *p, int w, int h, const geom *g, int k, const char *name,
                   uint32_t col)
{
    char cut[300];
    font_fit(cut, sizeof cut, name, g->name_cells, "..");
    return th_text_at(p, w, h, g->name_x, P_TOP + k * P_RH + 2, cut, col);
}

typedef struct {
    int layer;
    double s;
} lt;

static int lt_cmp(const void *x, const void *y)
{
    const lt *a = x, *b = y;
    if (a->s != b->s)
        return a->s < b->s ? 1 : -1;
    return a->layer - b->layer;
}

/* Core 0's layers with time, largest first (print_layers' order); returns
 * the count and the sum of all layers' time in *sum. */
static int sorted_layers(const emu_result *r, lt *out, double *sum)
{
    int m = 0;
    *sum = 0;
    for (int l = 0; l < r->n_layers; l++) {
        double s = 0;
        for (int k = 0; k < CAT_COUNT; k++)
            s += r->layer_time_s[(size_t)l * CAT_COUNT + k];
        *sum += s;
        if (s > 0)
            out[m++] = (lt){l, s};
    }
    qsort(out, (size_t)m, sizeof *out, lt_cmp);
    return m;
}

/* A report of n layers in a scrambled time order (layer `zero` with none),
 * a UTF-8 name and one too long for the name column; every core's
 * breakdown the layers' plus an update of 5 us all-reduce and 1 us HBM
 * stall. */
static void make_layers(emu_result *r, int n, int zero)
{
    double cat[CAT_COUNT] = {0};
    th_result_make(r, "panel-test", "v3-8", 8, 1, 8, cat, NULL);
    r->n_layers = n;
    r->layer_names = calloc((size_t)n, sizeof *r->layer_names);
    r->layer_time_s = calloc((size_t)n * CAT_COUNT, sizeof(double));
    if (!r->layer_names || !r->layer_time_s)
        return;
    for (int l = 0; l < n; l++) {
        double *t = r->layer_time_s + (size_t)l * CAT_COUNT;
        if (l == 1)
            snprintf(r->layer_names[l], 64, "größe_conv%d", l);
        else if (l == 2)
            snprintf(r->layer_names[l], 64, "a_very_long_layer_name_that_is_cut_%d", l);
        else
            snprintf(r->layer_names[l], 64, "layer%d", l);
        if (l == zero)
            continue;
        double base = (1 + (l * 7) % (n + 3)) * 1e-6;
        t[CAT_MXU] = base;
        t[CAT_HBM_STALL] = 0.3 * base;
        t[CAT_VECTOR] = l % 3 ? 0.1 * base : 0;
    }
    for (int c = 0; c < r->cores; c++) {
        double *b = r->per_core[c].breakdown_s;
        for (int k = 0; k < CAT_COUNT; k++) {
            b[k] = 0;
            for (int l = 0; l < n; l++)
                b[k] += r->layer_time_s[(size_t)l * CAT_COUNT + k];
        }
        b[CAT_ALLREDUCE] += 5e-6;
        b[CAT_HBM_STALL] += 1e-6;
    }
    th_result_retime(r);
}

/* Every row of a panel that is not cut: names, bars, figures, end row. */
static void check_all_rows(th_ctx *t, const emu_result *r, const unsigned char *p, int w, int h)
{
    geom g = geom_of(w, h);
    lt *ord = calloc((size_t)r->n_layers + 1, sizeof *ord);
    if (!ord)
        return;
    double sum, step = r->per_core[0].step_time_s;
    int m = sorted_layers(r, ord, &sum);
    double end = step - sum, scale = fmax(ord[0].s, end);
    TH_CHECKF(t, m + 1 <= g.slots, "%d layers do not fit %d rows", m, g.slots);
    int bad_name = 0, bad_bar = 0, bad_fig = 0;
    for (int k = 0; k < m; k++) {
        if (!name_at(p, w, h, &g, k, r->layer_names[ord[k].layer], P_INK) && !bad_name++)
            TH_FAIL(t, "row %d: not '%s'", k, r->layer_names[ord[k].layer]);
        int px = bar_px(p, w, &g, k), want = (int)lround(ord[k].s / scale * g.bar_w);
        if (abs(px - want) > 1 && !bad_bar++)
            TH_FAIL(t, "row %d: bar %d px, want %d (%g of %g s)", k, px, want, ord[k].s, scale);
        if (!figures_at(p, w, h, &g, k, ord[k].s, step) && !bad_fig++)
            TH_FAIL(t, "row %d: figures of %g s", k, ord[k].s);
    }
    TH_CHECK(t, bad_name == 0 && bad_bar == 0 && bad_fig == 0);
    /* the update: step - sum, its own row after the layers */
    TH_CHECK(t, end > 1e-6 * step);
    TH_CHECK(t, name_at(p, w, h, &g, m, r->train ? "(update, end of step)" : "(end of step)",
                        P_MUTED));
    TH_CHECK(t, figures_at(p, w, h, &g, m, end, step));
    int px = bar_px(p, w, &g, m), want = (int)lround(end / scale * g.bar_w);
    TH_CHECKF(t, abs(px - want) <= 1, "update bar %d px, want %d", px, want);
    /* nothing after it */
    TH_CHECK(t, bar_px(p, w, &g, m + 1) == 0);
    free(ord);
}

void th_suite_view_panel(th_ctx *t)
{
    emu_result r;
    char rep[512], args[700];
    int w = 0, h = 0;
    unsigned char *p;

    th_case(t, "a report's layers[]: sorted by time, names (UTF-8, cut with ..), bars "
               "proportional to time, figures, the update row = step - sum (640 and 1280)");
    make_layers(&r, 12, 5);
    th_result_save(t, &r, "vp12.json", rep, sizeof rep);
    snprintf(args, sizeof args, "%s --size 640x400 --script 4", rep);
    if ((p = shot(t, args, &w, &h))) {
        check_all_rows(t, &r, p, w, h);
        /* the long name (36 characters) is cut at 640 pixels (26), whole at 1280 */
        TH_CHECK(t, !th_text_at(p, w, h, 10, P_TOP + 2, /* the longest layer */
                                "a_very_long_layer_name_that_is_cut_2", P_INK));
        free(p);
    }
    snprintf(args, sizeof args, "%s --size 1280x800 --script 4", rep);
    if ((p = shot(t, args, &w, &h))) {
        check_all_rows(t, &r, p, w, h);
        free(p);
    }

    th_case(t, "the tabs: 4 layers fits 640 pixels, key 4 and Tab reach it");
    snprintf(args, sizeof args, "%s --size 640x400 --script tab", rep); /* a report opens on bars */
    if ((p = shot(t, args, &w, &h))) {
        /* from x 630 leftwards, 2 px apart, each its text + 8 px: "4 layers"
         * at 572, "3 bars" 526, "2 torus" 474, "1 timeline" 404 (text 4 in) */
        TH_CHECK(t, th_text_at(p, w, h, 576, 14, "4 layers", 0x263238));
        TH_CHECK(t, th_text_at(p, w, h, 408, 14, "1 timeline", 0xCFD8DC));
        lt ord[12];
        double sum;
        sorted_layers(&r, ord, &sum);
        geom g = geom_of(w, h);
        TH_CHECK(t, name_at(p, w, h, &g, 0, r.layer_names[ord[0].layer], P_INK));
        free(p);
    }
    snprintf(args, sizeof args, "%s --size 640x400 --script 'tab shift+tab'", rep);
    if ((p = shot(t, args, &w, &h))) {
        TH_CHECK(t, !th_text_at(p, w, h, 576, 14, "4 layers", 0x263238));
        TH_CHECK(t, th_text_at(p, w, h, 530, 14, "3 bars", 0x263238));
        free(p);
    }

    th_case(t, "hover a row: the footer names the layer and each category's time");
    {
        lt ord[12];
        double sum, step = r.per_core[0].step_time_s;
        sorted_layers(&r, ord, &sum);
        snprintf(args, sizeof args, "%s --size 640x400 --script '4 move:300,%d'", rep,
                 P_TOP + P_RH + 5);
        if ((p = shot(t, args, &w, &h))) {
            const double *c = r.layer_time_s + (size_t)ord[1].layer * CAT_COUNT;
            char tb[48], sb[48], line[300], m1[48], m2[48], m3[48];
            chart_fmt_time(tb, sizeof tb, ord[1].s, CHART_TIME_SIG, 0);
            chart_fmt_time(sb, sizeof sb, step, CHART_TIME_SIG, 0);
            snprintf(line, sizeof line, "hover: core 0 layer %s  %s (%.1f%% of the %s step)  #2 of 11",
                     r.layer_names[ord[1].layer], tb, 100 * ord[1].s / step, sb);
            TH_CHECKF(t, th_text_at(p, w, h, 8, h - P_FOOTER + 6, line, P_INK), "no '%s'", line);
            chart_fmt_time(m1, sizeof m1, c[CAT_MXU], CHART_TIME_SIG, 0);
            chart_fmt_time(m2, sizeof m2, c[CAT_HBM_STALL], CHART_TIME_SIG, 0);
            chart_fmt_time(m3, sizeof m3, c[CAT_VECTOR], CHART_TIME_SIG, 0);
            if (c[CAT_VECTOR] > 0)
                snprintf(line, sizeof line, "critical path: mxu %s, hbm_stall %s, vector %s", m1,
                         m2, m3);
            else
                snprintf(line, sizeof line, "critical path: mxu %s, hbm_stall %s", m1, m2);
            TH_CHECKF(t, th_text_at(p, w, h, 8, h - P_FOOTER + 22, line, P_MUTED), "no '%s'",
                      line);
            free(p);
        }
    }
    emu_result_free(&r);

    th_case(t, "more layers than rows: '(other N layers)' holds the rest; arrows, End and "
               "the wheel scroll");
    make_layers(&r, 40, 7);
    th_result_save(t, &r, "vp40.json", rep, sizeof rep);
    {
        lt ord[40];
        double sum, step = r.per_core[0].step_time_s;
        int m = sorted_layers(&r, ord, &sum);
        geom g = geom_of(640, 400);
        int ls = g.slots - 2; /* the other row and the update row */
        static const struct {
            const char *keys;
            int first;
        } sc[] = {{"4", 0}, {"4 down down", 2}, {"4 wheeldown", 3}, {"4 end", -1},
                  {"4 end up", -2}, {"4 pagedown home", 0}};
        for (size_t i = 0; i < sizeof sc / sizeof sc[0]; i++) {
            int first = sc[i].first >= 0 ? sc[i].first : m - ls + 1 + sc[i].first;
            snprintf(args, sizeof args, "%s --size 640x400 --script '%s'", rep, sc[i].keys);
            if (!(p = shot(t, args, &w, &h)))
                continue;
            int ok = 1;
            double shown = 0;
            for (int k = 0; k < ls; k++) {
                ok &= name_at(p, w, h, &g, k, r.layer_names[ord[first + k].layer], P_INK);
                shown += ord[first + k].s;
            }
            TH_CHECKF(t, ok, "'%s': rows from #%d", sc[i].keys, first + 1);
            char other[64];
            snprintf(other, sizeof other, "(other %d layers)", m - ls);
            TH_CHECKF(t, name_at(p, w, h, &g, ls, other, P_MUTED), "'%s': no '%s'", sc[i].keys,
                      other);
            TH_CHECK(t, figures_at(p, w, h, &g, ls, sum - shown, step));
            TH_CHECK(t, name_at(p, w, h, &g, ls + 1, "(update, end of step)", P_MUTED));
            TH_CHECK(t, figures_at(p, w, h, &g, ls + 1, step - sum, step));
            free(p);
        }
    }
    emu_result_free(&r);

    th_case(t, "a report without layers[] says so");
    {
        double cat[CAT_COUNT] = {1e-3, 2e-4, 1e-4, 0, 5e-5, 0};
        th_result_make(&r, "old-report", "v3-8", 8, 1, 8, cat, NULL);
        th_result_save(t, &r, "vp0.json", rep, sizeof rep);
        emu_result_free(&r);
        char *text = th_slurp(rep, NULL);
        TH_CHECK(t, text && !strstr(text, "\"layers\""));
        free(text);
        snprintf(args, sizeof args, "%s --size 640x400 --script 4", rep);
        if ((p = shot(t, args, &w, &h))) {
            TH_CHECK(t, th_text_at(p, w, h, 20, 40 + 24, "This result has no per-layer times",
                                   P_INK));
            geom g = geom_of(w, h);
            TH_CHECK(t, bar_px(p, w, &g, 0) == 0 && bar_px(p, w, &g, 1) == 0);
            free(p);
        }
    }

    th_case(t, "a trace and its report: the same panel, the rows the report's layers[]");
    snprintf(rep, sizeof rep, "%s/vp-tiny.json", th_tmpdir());
    th_cmd_result *c = malloc(sizeof *c);
    if (c) {
        th_run(c, "%s run traces/small/tiny2d.json --report %s", th_bin(), rep);
        TH_CHECKF(t, c->status == 0, "run: %s", c->err);
        free(c);
    }
    tpu_error err = {0};
    memset(&r, 0, sizeof r);
    if (TH_CHECKF(t, report_read(&r, rep, &err) == TPU_OK, "%s", err.msg)) {
        int w2 = 0, h2 = 0;
        unsigned char *q;
        snprintf(args, sizeof args, "%s --size 640x400 --script 4", rep);
        p = shot(t, args, &w, &h);
        q = shot(t, "traces/small/tiny2d.json --size 640x400 --script 4", &w2, &h2);
        if (p && q) {
            check_all_rows(t, &r, p, w, h);
            TH_CHECK(t, w == w2 && h == h2);
            long d = th_rgb_diff(p, q, w, 0, 40, w, h - P_FOOTER);
            TH_CHECKF(t, d == 0, "panels differ by %ld px", d);
        }
        free(p);
        free(q);
    }
    emu_result_free(&r);
}
