/* The viewer's layer lane (docs/VIEWER.md): one band above the core rows
 * whose spans are the layers of the first shown core, forward and backward
 * apart, the update its own span.  Checked against the engine's own
 * events (simulated here with the timeline recorded) and against the
 * pixels of screenshots: labels where a span is wide, cut with ".." when
 * nearly wide enough, nothing when narrow; the footer names a hovered or
 * clicked span; a report, with no events, draws no lane. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/out/font.h"
#include "emu/graph.h"
#include "emu/sim.h"
#include "emu/view/layout.h"
#include "test/harness.h"

/* The viewer's layout (emu/view/layout.h). */
enum { L_TOP = VIEW_LANE_TOP, L_BAR = VIEW_LANE_BAR, L_LABELS = VIEW_LABELS };
enum { L_FOOTER = VIEW_FOOTER };
#define L_INK ((unsigned)VIEW_INK)
#define L_MUTED ((unsigned)VIEW_MUTED)

typedef struct {
    double t0, t1;
    int layer, phase;
    size_t n;
} lspan;

typedef struct {
    double v0, v1;
    int w, h, core;
    size_t n;
    lspan *s;
} lane_dump;

static const char *const ENV = "env -u DISPLAY -u WAYLAND_DISPLAY -u SDL_VIDEODRIVER";

/* Screenshot with --lane-spans: the lane as the viewer drew it, and the
 * pixels.  1 on success. */
static int lane_shot(th_ctx *t, th_cmd_result *r, const char *args, lane_dump *d,
                     unsigned char **rgb, int *w, int *h)
{
    char png[400];
    snprintf(png, sizeof png, "%s/view_layers.png", th_tmpdir());
    memset(d, 0, sizeof *d);
    *rgb = NULL;
    th_run(r, "%s %s view %s --lane-spans --screenshot %s", ENV, th_bin(), args, png);
    if (!TH_CHECKF(t, r->status == 0, "view %s: status %d: %s", args, r->status, r->err))
        return 0;
    const char *p = r->out;
    char v0[64], v1[64];
    if (!TH_CHECKF(t, sscanf(p, "window %63s %63s size %d %d core %d spans %zu", v0, v1,
                             &d->w, &d->h, &d->core, &d->n) == 6,
                   "first line: %.200s", p))
        return 0;
    d->v0 = strtod(v0, NULL);
    d->v1 = strtod(v1, NULL);
    d->s = calloc(d->n ? d->n : 1, sizeof *d->s);
    for (size_t i = 0; i < d->n; i++) {
        p = strchr(p, '\n');
        size_t k;
        char a0[64], a1[64];
        if (!p || sscanf(p + 1, "span %zu %63s %63s %d %d %zu", &k, a0, a1, &d->s[i].layer,
                         &d->s[i].phase, &d->s[i].n) != 6 || k != i) {
            TH_FAIL(t, "span line %zu missing", i);
            return 0;
        }
        p++;
        d->s[i].t0 = strtod(a0, NULL);
        d->s[i].t1 = strtod(a1, NULL);
    }
    return TH_CHECK(t, th_png_rgb(png, w, h, rgb)) && TH_CHECK(t, *w == d->w && *h == d->h);
}

static int by_t0(const void *x, const void *y)
{
    const emu_event *a = *(const emu_event *const *)x, *b = *(const emu_event *const *)y;
    return a->t0 < b->t0 ? -1 : a->t0 > b->t0;
}

/* The engine's run of a trace, timeline recorded (as view simulates). */
static int simulate(th_ctx *t, const char *path, emu_result *r)
{
    graph g;
    tpu_error e = {0};
    memset(r, 0, sizeof *r);
    if (!TH_CHECKF(t, graph_load(&g, path, &e) == TPU_OK, "%s: %s", path, e.msg))
        return 0;
    sim_opts o;
    sim_opts_default(&o);
    o.trace_path = path;
    o.record_timeline = 1;
    int ok = TH_CHECKF(t, sim_run(&g, &o, r, &e) == TPU_OK, "%s: %s", path, e.msg);
    graph_free(&g);
    return ok;
}

/* Core c's critical path in time order (pointers into r; caller frees). */
static const emu_event **critical_path(const emu_result *r, int c, size_t *n)
{
    const emu_core_result *pc = &r->per_core[c];
    const emu_event **v = malloc(sizeof *v * (pc->n_events ? pc->n_events : 1));
    *n = 0;
    for (size_t i = 0; v && i < pc->n_events; i++)
        if (pc->events[i].unit == UNIT_CORE)
            v[(*n)++] = &pc->events[i];
    if (v)
        qsort(v, *n, sizeof *v, by_t0);
    return v;
}

/* The lane's spans are core c's layer runs: consecutive critical-path
 * events of one layer and phase, bit for bit. */
static void check_runs(th_ctx *t, const emu_result *r, int c, const lane_dump *d)
{
    size_t n, k = 0, bad = 0;
    const emu_event **v = critical_path(r, c, &n);
    if (!TH_CHECK(t, v != NULL && n > 0))
        return;
    for (size_t i = 0; i < n; k++) {
        size_t j = i;
        double t1 = v[i]->t1;
        while (j + 1 < n && v[j + 1]->layer == v[i]->layer && v[j + 1]->phase == v[i]->phase)
            t1 = fmax(t1, v[++j]->t1);
        if (k < d->n) {
            const lspan *s = &d->s[k];
            if (s->t0 != v[i]->t0 || s->t1 != t1 || s->layer != v[i]->layer ||
                s->phase != v[i]->phase || s->n != j - i + 1) {
                if (!bad++)
                    TH_FAIL(t, "span %zu: lane %g..%g layer %d phase %d (%zu events), "
                               "events %g..%g layer %d phase %d (%zu)",
                            k, s->t0, s->t1, s->layer, s->phase, s->n, v[i]->t0, t1,
                            v[i]->layer, v[i]->phase, j - i + 1);
            }
        }
        i = j + 1;
    }
    TH_CHECKF(t, k == d->n, "core %d: %zu layer runs, the lane has %zu spans", c, k, d->n);
    TH_CHECKF(t, bad == 0, "%zu spans differ", bad);
    free(v);
}

static unsigned px(const unsigned char *p, int w, int x, int y)
{
    const unsigned char *q = p + 3 * ((long)y * w + x);
    return (unsigned)q[0] << 16 | (unsigned)q[1] << 8 | q[2];
}

/* The label the viewer gives span s: "NAME fwd", "NAME bwd", "update". */
static void label_of(const emu_result *r, const lspan *s, char *buf, size_t cap)
{
    view_span sp = {s->t0, s->t1, s->layer, (uint8_t)s->phase, 0, s->n};
    view_span_label(r, &sp, buf, cap);
}

typedef struct {
    int full, cut, none;
} label_counts;

/* Every span whose pixels do not share a column with its neighbour's:
 * the whole label inside it when it fits, cut with ".." when at least 6
 * cells fit, no ink at all when fewer; and every span is painted in its
 * shade in the lane band. */
static label_counts check_labels(th_ctx *t, const emu_result *r, const lane_dump *d,
                                 const unsigned char *p, const char *what)
{
    label_counts n = {0, 0, 0};
    int xr = d->w - 10, bad = 0;
    double sc = (xr - L_LABELS) / (d->v1 - d->v0);
    for (size_t i = 0; i < d->n; i++) {
        const lspan *s = &d->s[i];
        int x0 = (int)floor(L_LABELS + (s->t0 - d->v0) * sc);
        int x1 = (int)floor(L_LABELS + (s->t1 - d->v0) * sc);
        /* a neighbour under two pixels may be pushed right into this
         * span's first column (each column is painted once): skip such */
        if (s->t1 < d->v0 || s->t0 > d->v1 || x0 < L_LABELS || x1 > xr || x1 - x0 < 2)
            continue;
        if (i > 0) {
            int p0 = (int)floor(L_LABELS + (d->s[i - 1].t0 - d->v0) * sc);
            if (p0 >= L_LABELS && x0 - p0 < 2)
                continue;
        }
        char lab[300], cut[300];
        label_of(r, s, lab, sizeof lab);
        int room = (x1 - x0 - 6) / FONT_W, fit = view_span_fit(cut, sizeof cut, lab, room);
        /* the span's shade at its first column, under any text */
        if (px(p, d->w, x0, L_TOP) != VIEW_LANE_SHADE(i) && !bad++)
            TH_FAIL(t, "%s: span %zu (%s) at x %d: colour %06x", what, i, lab, x0,
                    px(p, d->w, x0, L_TOP));
        if (fit == 1) {
            if (!th_text_at(p, d->w, d->h, x0 + 3, L_TOP + 1, lab, L_INK) && !bad++)
                TH_FAIL(t, "%s: span %zu x %d..%d: no label '%s'", what, i, x0, x1, lab);
            n.full++;
        } else if (fit == 2) {
            if (!th_text_at(p, d->w, d->h, x0 + 3, L_TOP + 1, cut, L_INK) && !bad++)
                TH_FAIL(t, "%s: span %zu x %d..%d: no cut label '%s'", what, i, x0, x1, cut);
            n.cut++;
        } else {
            long ink = 0;
            for (int y = L_TOP; y < L_TOP + L_BAR; y++)
                for (int x = x0; x < x1; x++)
                    ink += px(p, d->w, x, y) == L_INK;
            if (ink && !bad++)
                TH_FAIL(t, "%s: span %zu (%s) %d px wide: %ld ink pixels", what, i, lab, x1 - x0,
                        ink);
            n.none++;
        }
    }
    TH_CHECKF(t, bad == 0, "%s: %d label faults", what, bad);
    return n;
}

static void free_dump(lane_dump *d)
{
    free(d->s);
    d->s = NULL;
}

void th_suite_view_layers(th_ctx *t)
{
    th_cmd_result *r = malloc(sizeof *r);
    emu_result tiny, p4;
    lane_dump d;
    unsigned char *p = NULL;
    int w, h;
    int have_tiny = 0, have_p4 = 0;
    if (!r)
        return;

    th_case(t, "the lane's spans are core 0's layer runs (fwd, bwd apart; update its own)");
    have_tiny = simulate(t, "traces/small/tiny2d.json", &tiny);
    if (have_tiny && lane_shot(t, r, "traces/small/tiny2d.json --size 640x400", &d, &p, &w, &h)) {
        TH_CHECK(t, d.core == 0);
        check_runs(t, &tiny, 0, &d);
        /* a training step: forward spans, backward spans, the update last */
        int fwd = 0, bwd = 0;
        for (size_t i = 0; i < d.n; i++) {
            fwd += d.s[i].phase == 0;
            bwd += d.s[i].phase == 1;
        }
        TH_CHECK(t, fwd > 3 && bwd > 3);
        TH_CHECK(t, d.n > 0 && d.s[d.n - 1].phase == 2 && d.s[d.n - 1].layer == -1);
        TH_CHECK(t, th_text_at(p, w, h, 6, L_TOP + 1, "layers (core 0)", L_INK));
    }
    free(p);
    p = NULL;
    if (have_tiny)
        free_dump(&d);
    if (!th_asan()) {
        emu_result big;
        if (simulate(t, "traces/retinanet-1280-v3-8.json", &big)) {
            /* 1920 wide: the widest layer run, p3_class_out's backward (7%
             * of the step), is 121 px there, room for its whole label (102
             * px); 78 px at the default 1280 cuts it */
            if (lane_shot(t, r, "traces/retinanet-1280-v3-8.json --size 1920x800", &d, &p, &w,
                          &h)) {
                check_runs(t, &big, 0, &d);
                TH_CHECKF(t, d.n > 100, "%zu spans", d.n);
                label_counts n = check_labels(t, &big, &d, p, "retinanet 1280");
                TH_CHECKF(t, n.full >= 1 && n.none >= 10, "full %d, cut %d, none %d", n.full,
                          n.cut, n.none);
            }
            free(p);
            p = NULL;
            free_dump(&d);
            emu_result_free(&big);
        }
    }

    th_case(t, "labels: whole where wide, cut with '..' when nearly, none when narrow");
    label_counts tot = {0, 0, 0};
    static const char *const views[] = {
        "traces/small/tiny2d.json --size 640x400",
        "traces/small/tiny2d.json",
        "traces/small/tiny2d.json --size 640x400 --script 'move:400,72 z z z'",
        "traces/small/tiny2d.json --size 700x400 --script 'move:300,150 z z right right'",
    };
    for (size_t v = 0; have_tiny && v < sizeof views / sizeof *views; v++) {
        if (lane_shot(t, r, views[v], &d, &p, &w, &h)) {
            check_runs(t, &tiny, 0, &d);
            label_counts n = check_labels(t, &tiny, &d, p, views[v]);
            tot.full += n.full;
            tot.cut += n.cut;
            tot.none += n.none;
            if (v >= 2) /* zoomed: the window is not the whole step */
                TH_CHECKF(t, d.v1 - d.v0 < 0.3 * d.s[d.n - 1].t1, "window %g..%g", d.v0, d.v1);
        }
        free(p);
        p = NULL;
        free_dump(&d);
    }
    TH_CHECKF(t, tot.full >= 3 && tot.cut >= 1 && tot.none >= 3, "full %d, cut %d, none %d",
              tot.full, tot.cut, tot.none);

    th_case(t, "hover and click: the footer names the span, its phase and categories");
    if (have_tiny && lane_shot(t, r, "traces/small/tiny2d.json --size 640x400", &d, &p, &w, &h)) {
        /* the widest span, hovered at its middle, then clicked */
        size_t best = 0;
        for (size_t i = 1; i < d.n; i++)
            if (d.s[i].t1 - d.s[i].t0 > d.s[best].t1 - d.s[best].t0)
                best = i;
        const lspan *s = &d.s[best];
        double sc = (w - 10 - L_LABELS) / (d.v1 - d.v0);
        int x = (int)(L_LABELS + (0.5 * (s->t0 + s->t1) - d.v0) * sc);
        static const char *const phn[3] = {"forward", "backward", "update"};
        char want[400], args[200], cats[200];
        snprintf(want, sizeof want, "core 0 layer %s (%s)", tiny.layer_names[s->layer],
                 phn[s->phase]);
        /* the category the span's critical path spends most in */
        size_t n;
        const emu_event **v = critical_path(&tiny, 0, &n);
        double cat[CAT_COUNT] = {0};
        for (size_t i = 0; v && i < n; i++)
            if (v[i]->t0 >= s->t0 && v[i]->t1 <= s->t1)
                cat[v[i]->cat] += v[i]->t1 - v[i]->t0;
        free(v);
        int top = 0;
        for (int c = 1; c < CAT_COUNT; c++)
            if (cat[c] > cat[top])
                top = c;
        snprintf(cats, sizeof cats, "critical path: %s ", emu_cat_name((emu_cat)top));
        free(p);
        p = NULL;
        free_dump(&d);
        for (int k = 0; k < 2; k++) {
            char line[500];
            snprintf(args, sizeof args, "traces/small/tiny2d.json --size 640x400 --script '%s:%d,%d'",
                     k ? "click" : "move", x, L_TOP + 6);
            if (lane_shot(t, r, args, &d, &p, &w, &h)) {
                snprintf(line, sizeof line, "%s: %s", k ? "selected" : "hover", want);
                TH_CHECKF(t, th_text_at(p, w, h, 8, h - L_FOOTER + 6, line, L_INK), "no '%s'",
                          line);
                TH_CHECKF(t, th_text_at(p, w, h, 8, h - L_FOOTER + 22, cats, L_MUTED), "no '%s'",
                          cats);
                if (k) {
                    /* the selected span's outline, black, above the band */
                    long black = 0;
                    for (int xx = L_LABELS; xx < w - 10; xx++)
                        black += px(p, w, xx, L_TOP - 1) == 0;
                    TH_CHECKF(t, black > 10, "%ld outline pixels", black);
                }
            }
            free(p);
            p = NULL;
            free_dump(&d);
        }
        /* off the lane (the axis), the footer does not name a span */
        snprintf(args, sizeof args, "traces/small/tiny2d.json --size 640x400 --script 'move:%d,50'",
                 x);
        if (lane_shot(t, r, args, &d, &p, &w, &h))
            TH_CHECK(t, !th_text_at(p, w, h, 8, h - L_FOOTER + 6, "hover: core 0 layer", L_INK));
        free(p);
        p = NULL;
        free_dump(&d);
    }

    th_case(t, "the lane follows the first shown row");
    have_p4 = simulate(t, "traces/small/tiny3d-p4.json", &p4);
    if (have_p4 &&
        lane_shot(t, r, "traces/small/tiny3d-p4.json --size 640x400 --script 'u down'", &d, &p,
                  &w, &h)) {
        TH_CHECKF(t, d.core == 1, "lane of core %d", d.core);
        TH_CHECK(t, th_text_at(p, w, h, 6, L_TOP + 1, "layers (core 1)", L_INK));
        check_runs(t, &p4, 1, &d);
    }
    free(p);
    p = NULL;
    if (have_p4)
        free_dump(&d);

    th_case(t, "a report holds no events: no lane, no spans");
    char rep[400], args[500];
    snprintf(rep, sizeof rep, "%s/view_layers_rep.json", th_tmpdir());
    th_run(r, "%s run traces/small/tiny2d.json --report %s", th_bin(), rep);
    if (TH_CHECKF(t, r->status == 0, "run: %s", r->err)) {
        snprintf(args, sizeof args, "%s --size 640x400 --script 1", rep);
        if (lane_shot(t, r, args, &d, &p, &w, &h)) {
            TH_CHECK(t, d.n == 0 && d.core == -1);
            long shade = 0;
            /* the panel, between the header and the footer (the header's
             * tab text shares the light shade) */
            for (int y = 40; y < h - L_FOOTER; y++)
                for (int x = 0; x < w; x++) {
                    unsigned c = px(p, w, x, y);
                    shade += c == VIEW_LANE_SHADE(0) || c == VIEW_LANE_SHADE(1);
                }
            TH_CHECKF(t, shade == 0, "%ld lane-shade pixels", shade);
            TH_CHECK(t, !th_text_at(p, w, h, 6, L_TOP + 1, "layers (", L_INK));
            TH_CHECK(t, th_text_at(p, w, h, 20, 40 + 24 + 10, "This result has no recorded",
                                   L_INK));
        }
        free(p);
        p = NULL;
        free_dump(&d);
    }

    if (have_tiny)
        emu_result_free(&tiny);
    if (have_p4)
        emu_result_free(&p4);
    free(r);
}
