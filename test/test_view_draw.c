/* What the viewer draws, read from its screenshots: the header's --freeze
 * and --set, the torus panel's chip numbers, the layers panel's cut bar. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "emu/out/chart.h"
#include "emu/out/font.h"
#include "emu/out/outfile.h"
#include "emu/report.h"
#include "emu/rfile.h"
#include "test/harness.h"

static unsigned char *header_shot(th_ctx *t, const char *report, const char *png,
                           int *w, int *h)
{
    th_cmd_result *c = malloc(sizeof *c);
    unsigned char *rgb = NULL;
    if (!c)
        return NULL;
    th_run(c, "env -u DISPLAY -u WAYLAND_DISPLAY -u SDL_VIDEODRIVER %s view "
              "%s --screenshot %s --size 640x400",
           th_bin(), report, png);
    TH_CHECKF(t, c->status == 0, "status %d: %s", c->status, c->err);
    if (c->status != 0 || !th_png_rgb(png, w, h, &rgb))
        rgb = NULL;
    free(c);
    return rgb;
}

static void header_cases(th_ctx *t)
{
    th_case(t, "view: --freeze and --set show in the header (only there), "
               "which still fits 640x400");
    static const char *const one[][2] = {{"ici.link_gbs", "10"}};
    static const char *const many[][2] = {
        {"ici.link_gbs", "10"},         {"hbm.bandwidth_gbs", "900"},
        {"mxu.rows", "64"},             {"mxu.cols", "64"},
        {"clock_hz", "700e6"},          {"ici.hop_latency_s", "1e-6"},
        {"hbm.t_rcd_ns", "20"},         {"vpu.alus", "4"}};
    char r0[512], r1[512], r2[512], p0[512], p1[512], p2[512];
    th_result_whatif(t, "v0.json", r0, sizeof r0, NULL, 0, NULL);
    th_result_whatif(t, "v1.json", r1, sizeof r1, one, 1, "none");
    th_result_whatif(t, "v2.json", r2, sizeof r2, many, 8,
                "conv1,bn_conv1,res2a*,res2b*,res2c*,res3a*,res3b*");
    snprintf(p0, sizeof p0, "%s/v0.png", th_tmpdir());
    snprintf(p1, sizeof p1, "%s/v1.png", th_tmpdir());
    snprintf(p2, sizeof p2, "%s/v2.png", th_tmpdir());
    int w0 = 0, h0 = 0, w1 = 0, h1 = 0, w2 = 0, h2 = 0;
    unsigned char *a = header_shot(t, r0, p0, &w0, &h0);
    unsigned char *b = header_shot(t, r1, p1, &w1, &h1);
    unsigned char *c = header_shot(t, r2, p2, &w2, &h2);
    TH_CHECK(t, a && b && c);
    if (a && b && c) {
        TH_CHECK(t, w0 == 640 && h0 == 400 && w1 == 640 && h1 == 400 &&
                        w2 == 640 && h2 == 400);
        /* The header is 40 pixels high; the second line's text starts at
         * y 21.  The panel tabs start at x 404 at this width (four since
         * the layers tab; 432 with three): the text
         * stays left of them. */
        long hd = th_rgb_diff(a, b, 640, 0, 0, 640, 40);
        long hd2 = th_rgb_diff(a, c, 640, 0, 0, 640, 40);
        TH_CHECKF(t, hd > 50 && hd2 > 50, "header differs by %ld, %ld px",
                  hd, hd2);
        TH_CHECK(t, th_rgb_diff(a, b, 640, 0, 0, 640, 20) == 0);
        TH_CHECK(t, th_rgb_diff(a, b, 640, 0, 40, 640, 400) == 0 &&
                        th_rgb_diff(a, c, 640, 0, 40, 640, 400) == 0);
        TH_CHECK(t, th_rgb_diff(a, b, 640, 425, 0, 640, 40) == 0 &&
                        th_rgb_diff(a, c, 640, 425, 0, 640, 40) == 0);
    }
    free(a);
    free(b);
    free(c);
}

/* The viewer's colours and layout (emu/view_draw.c, emu/view_app.h; the
 * test does not include SDL). */
#define V_BG 0xF7F7F7u
#define V_INK 0x202020u
#define V_MUTED 0x666666u
enum { V_HEADER = 40, V_FOOTER = 40, V_TORUS_LEGEND = 210 };

static unsigned char *shot(th_ctx *t, const char *args, int *w, int *h)
{
    return th_view_shot(t, args, "p12c.png", w, h);
}

static uint32_t px_at(const unsigned char *p, int w, int x, int y)
{
    const unsigned char *q = p + 3 * ((size_t)y * w + x);
    return (uint32_t)q[0] << 16 | (uint32_t)q[1] << 8 | q[2];
}

/* Is s drawn at (x, y) in the muted label colour on nothing but the
 * background: every glyph pixel muted, every other pixel of its cells the
 * background (a link stroke through the label fails)? */
static int readable_at(const unsigned char *p, int w, int h, int x, int y, const char *s)
{
    int n = (int)strlen(s);
    if (x < 0 || y < 0 || x + n * FONT_W > w || y + FONT_H > h)
        return 0;
    for (int i = 0; i < n; i++)
        for (int gy = 0; gy < FONT_H; gy++)
            for (int gx = 0; gx < FONT_W; gx++) {
                uint32_t v = px_at(p, w, x + i * FONT_W + gx, y + gy);
                int bit = font_row((unsigned char)s[i], gy) >> gx & 1;
                if (v != (bit ? V_MUTED : V_BG))
                    return 0;
            }
    return 1;
}

/* The torus panel's cells (view_draw.c torus_geom): the plot left of a
 * 210-pixel legend, 50 pixels of margins, 60 below the header. */
typedef struct {
    int cell, ox, oy, chip;
} torus_at;

static torus_at torus_geom(int w, int h, int dx, int dy)
{
    torus_at g;
    int aw = w - V_TORUS_LEGEND - 50, ah = h - V_HEADER - V_FOOTER - 60;
    g.cell = aw / dx < ah / dy ? aw / dx : ah / dy;
    g.ox = 30 + (aw - g.cell * dx) / 2;
    g.oy = V_HEADER + 44 + (ah - g.cell * dy) / 2;
    g.chip = g.cell * 55 / 100;
    return g;
}

/* Chip numbers that cannot be read anywhere below their chip, in its
 * cell; the first one in *first. */
static int unreadable_chips(const unsigned char *p, int w, int h, const torus_at *g, int dx,
                            int chips, int *first)
{
    int bad = 0;
    *first = -1;
    for (int ch = 0; ch < chips; ch++) {
        int px = g->ox + ch % dx * g->cell, py = g->oy + ch / dx * g->cell, found = 0;
        char s[16];
        snprintf(s, sizeof s, "%d", ch);
        for (int y = py + g->chip; y < py + g->cell && !found; y++)
            for (int x = px; x < px + g->cell && !found; x++)
                found = readable_at(p, w, h, x, y, s);
        if (!found && !bad++)
            *first = ch;
    }
    return bad;
}

static void torus_labels(th_ctx *t)
{
    int w, h, first;
    unsigned char *p;

    th_case(t, "torus: every chip number of a 16x16 torus (v2-512, 41-pixel cells) reads "
               "on the background, clear of the link strokes; v3-8 and v3-64 keep theirs");
    p = shot(t, "traces/resnet50-224-v3-8.json --system v2-512 --batch 4096 --script 2", &w, &h);
    if (p) {
        torus_at g = torus_geom(w, h, 16, 16);
        TH_CHECKF(t, g.cell == 41, "cell %d px (v2-512 at 1280x800 is 41)", g.cell);
        int bad = unreadable_chips(p, w, h, &g, 16, 256, &first);
        TH_CHECKF(t, bad == 0, "%d of 256 chip numbers unreadable, the first chip %d", bad,
                  first);
        free(p);
    }
    static const struct {
        const char *sys;
        int batch, dx, dy;
    } big[] = {{"v3-8", 1024, 2, 2}, {"v3-64", 512, 8, 4}};
    for (int i = 0; i < 2; i++) {
        char args[300];
        snprintf(args, sizeof args,
                 "traces/resnet50-224-v3-8.json --system %s --batch %d --script 2", big[i].sys,
                 big[i].batch);
        if (!(p = shot(t, args, &w, &h)))
            continue;
        torus_at g = torus_geom(w, h, big[i].dx, big[i].dy);
        int chips = big[i].dx * big[i].dy, bad = unreadable_chips(p, w, h, &g, big[i].dx,
                                                                  chips, &first);
        TH_CHECKF(t, bad == 0, "%s: %d chip numbers unreadable, the first chip %d",
                  big[i].sys, bad, first);
        /* clear of the strokes at the chip's left edge */
        TH_CHECK(t, readable_at(p, w, h, g.ox + 2, g.oy + g.chip + 2, "0"));
        free(p);
    }

    th_case(t, "torus: cells too small for a number (v3-2048) draw none, the legend says "
               "hovering a chip names it, and the footer does");
    p = shot(t, "traces/resnet50-224-v3-8.json --system v3-2048 --batch 16384 --script 2", &w,
             &h);
    if (p) {
        torus_at g = torus_geom(w, h, 32, 32);
        long muted = 0;
        for (int y = g.oy; y < g.oy + 32 * g.cell; y++)
            for (int x = g.ox; x < g.ox + 32 * g.cell; x++)
                muted += px_at(p, w, x, y) == V_MUTED;
        TH_CHECKF(t, muted == 0, "%ld label pixels on the torus", muted);
        int lx = w - V_TORUS_LEGEND, ly = V_HEADER + 50 + 58 + 62;
        TH_CHECK(t, th_text_at(p, w, h, lx, ly + 92, "hover a chip for its", V_MUTED));
        TH_CHECK(t, th_text_at(p, w, h, lx, ly + 108, "number, cores and links", V_MUTED));
        free(p);
        /* chip 1000 is x 8, y 31 */
        char args[300];
        snprintf(args, sizeof args,
                 "traces/resnet50-224-v3-8.json --system v3-2048 --batch 16384 "
                 "--script '2 move:%d,%d'",
                 g.ox + 8 * g.cell + 3, g.oy + 31 * g.cell + 3);
        if ((p = shot(t, args, &w, &h))) {
            TH_CHECK(t, th_text_at(p, w, h, 8, h - V_FOOTER + 6, "chip 1000 (x=8, y=31)", V_INK));
            free(p);
        }
    }
}

/* The layers panel (view_draw.c layer_cols) at 640x400: rows from y 68,
 * 18 apart; the bar from x 10 + 26 cells + 8 to W - 14 - 15 cells - 8. */
enum { L_TOP = 68, L_RH = 18 };

static void layers_cut_bar(th_ctx *t)
{
    th_case(t, "layers: a cut '(other N layers)' bar shows its categories in proportion, "
               "not the first one alone");
    /* 40 layers: one of 10 ms (all mxu), 39 of 1 ms each 20% mxu, 20%
     * vector, 60% HBM stall; 14 rows fit at 640x400, so the other 26
     * layers (26 ms) are 2.6x the scale. */
    emu_result r;
    double cat[CAT_COUNT] = {0};
    int n = 40;
    th_result_make(&r, "view-draw-layers", "v3-8", 8, 1, 8, cat, NULL);
    r.n_layers = n;
    r.layer_names = calloc((size_t)n, sizeof *r.layer_names);
    r.layer_time_s = calloc((size_t)n * CAT_COUNT, sizeof(double));
    if (!TH_CHECK(t, r.layer_names && r.layer_time_s)) {
        emu_result_free(&r);
        return;
    }
    for (int l = 0; l < n; l++) {
        double *c = r.layer_time_s + (size_t)l * CAT_COUNT;
        snprintf(r.layer_names[l], 64, "layer%d", l);
        if (l == 0) {
            c[CAT_MXU] = 10e-3;
            continue;
        }
        c[CAT_MXU] = 0.2e-3;
        c[CAT_VECTOR] = 0.2e-3;
        c[CAT_HBM_STALL] = 0.6e-3;
    }
    for (int k = 0; k < r.cores; k++) {
        double *b = r.per_core[k].breakdown_s;
        for (int q = 0; q < CAT_COUNT; q++) {
            b[q] = 0;
            for (int l = 0; l < n; l++)
                b[q] += r.layer_time_s[(size_t)l * CAT_COUNT + q];
        }
        b[CAT_ALLREDUCE] += 5e-6;
    }
    th_result_retime(&r);
    char rep[512], args[700];
    th_result_save(t, &r, "view-draw-layers.json", rep, sizeof rep);
    emu_result_free(&r);

    int w, h, slots = (400 - V_FOOTER - L_TOP - 4) / L_RH, ls = slots - 2;
    int bar_x = 10 + 26 * FONT_W + 8, bar_w = 640 - 14 - 15 * FONT_W - 8 - bar_x;
    int k = ls, y = L_TOP + k * L_RH + 2 + FONT_H / 2;
    snprintf(args, sizeof args, "%s --size 640x400 --script 4", rep);
    unsigned char *p = shot(t, args, &w, &h);
    if (p) {
        TH_CHECK(t, th_text_at(p, w, h, 10, L_TOP + k * L_RH + 2, "(other 26 layers)", V_MUTED));
        int got[CAT_COUNT] = {0};
        for (int x = bar_x; x < bar_x + bar_w; x++)
            for (int q = 0; q < CAT_COUNT; q++)
                got[q] += px_at(p, w, x, y) == chart_cat_color((emu_cat)q);
        /* 20%, 20% and 60% of the width; the break mark takes 4 pixels
         * of the last segment */
        int wm = (int)lround(0.2 * bar_w), wh = bar_w - 2 * wm - 4;
        TH_CHECKF(t, abs(got[CAT_MXU] - wm) <= 1 && abs(got[CAT_VECTOR] - wm) <= 1 &&
                         abs(got[CAT_HBM_STALL] - wh) <= 2,
                  "mxu %d, vector %d, hbm_stall %d px; want %d, %d, %d of %d", got[CAT_MXU],
                  got[CAT_VECTOR], got[CAT_HBM_STALL], wm, wm, wh, bar_w);
        /* the break mark still says the bar is cut */
        TH_CHECK(t, px_at(p, w, bar_x + bar_w - 9, y) == V_BG &&
                        px_at(p, w, bar_x + bar_w - 5, y) == V_BG);
        /* the rows that fit keep the common scale: layer0 fills it, the
         * 1 ms layers a tenth */
        int row1 = 0, y1 = L_TOP + L_RH + 2 + FONT_H / 2;
        for (int x = bar_x; x < bar_x + bar_w; x++)
            for (int q = 0; q < CAT_COUNT; q++)
                row1 += px_at(p, w, x, y1) == chart_cat_color((emu_cat)q);
        TH_CHECKF(t, abs(row1 - (int)lround(0.1 * bar_w)) <= 1, "row 2: %d px", row1);
        free(p);
    }
}

void th_suite_view_draw(th_ctx *t)
{
    header_cases(t);
    torus_labels(t);
    layers_cut_bar(t);
}
