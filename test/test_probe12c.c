/* Probe round 12c (what-if hardware, v2 against v3), the display and
 * usability findings, each failing before its fix:
 *
 *  - the torus panel drew each chip's number at the chip's left edge,
 *    right where its vertical link strokes leave it: on a 16x16 torus
 *    (v2-512 at 1280x800, cells of 41 pixels) "16" read "1E" and the
 *    numbers of 3 digits were lost in the strokes.  A number now goes
 *    where no stroke is, or is not drawn (and the legend says hovering
 *    a chip names it);
 *  - the layers panel cut an "(other N layers)" bar longer than the scale
 *    at the full width, stacked mxu-first: it showed only its first
 *    category or two (RetinaNet's 209 other layers, half of them HBM
 *    stalls, were all blue).  It now shows its categories in proportion;
 *  - hbm.bandwidth_gbs's help called it the peak, but the row timings
 *    stay, so the activate rate caps a stream at about 2 TB/s per core;
 *  - `tpuemu mxu --set clock_hz=2e9` (or mxus_per_core) was accepted and
 *    changed nothing: the command prints one product's cycles on one MXU.
 *    Keys that cannot change them are refused, as probe hbm and probe
 *    allreduce refuse theirs.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/out/chart.h"
#include "emu/out/font.h"
#include "test/harness.h"


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
        TH_CHECKF(t, g.cell == 41, "cell %d px (the probe's case is 41)", g.cell);
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
        /* where they were: under the chip's left edge */
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
    th_result_make(&r, "p12c-layers", "v3-8", 8, 1, 8, cat, NULL);
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
    th_result_save(t, &r, "p12c-layers.json", rep, sizeof rep);
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

static void hbm_peak_help(th_ctx *t)
{
    th_case(t, "hbm.bandwidth_gbs's help says the row timings stay and the activate rate "
               "caps a stream at about 2 TB/s, as probe hbm measures");
    th_cmd_result *c = malloc(sizeof *c);
    if (!c)
        return;
    th_run(c, "%s run --help", th_bin());
    /* the help wraps its sources: join the lines before searching */
    char *flat = malloc(sizeof c->out);
    size_t m = 0;
    for (const char *q = c->out; flat && *q; q++) {
        if (*q == '\n') {
            while (q[1] == ' ')
                q++;
            flat[m++] = ' ';
        } else
            flat[m++] = *q;
    }
    if (flat) {
        flat[m] = 0;
        const char *k = strstr(flat, "hbm.bandwidth_gbs ");
        const char *next = k ? strstr(k, "hbm.capacity_gib ") : NULL;
        const char *cap = k ? strstr(k, "the activate rate caps") : NULL;
        TH_CHECKF(t, c->status == 0 && cap && next && cap < next, "%.400s", k ? k : flat);
        const char *a = k ? strstr(k, "about 2.2 TB/s") : NULL;
        const char *b = k ? strstr(k, "2.0 TB/s after refresh") : NULL;
        TH_CHECK(t, a && b && a < next && b < next);
    }
    free(flat);
    /* the figures the help gives: 16 x 1 KiB per 7.5 ns less refresh,
     * whatever the peak asked for past it */
    static const char *const bw[] = {"4500", "45000"};
    for (int i = 0; i < 2; i++) {
        th_run(c, "%s probe hbm --gen v3 --bytes 1073741824 --set hbm.bandwidth_gbs=%s",
               th_bin(), bw[i]);
        const char *g = strstr(c->out, "\"gbps\":");
        double gbps = g ? atof(g + 7) : 0;
        TH_CHECKF(t, c->status == 0 && gbps > 1950 && gbps < 2100, "%s GB/s asked: %s",
                  bw[i], c->out);
    }
    free(c);
}

static void mxu_sets(th_ctx *t)
{
    th_case(t, "mxu --set: keys that cannot change one product's cycles on one MXU "
               "(clock_hz, mxus_per_core, ...) are refused, exit 2 on one line; "
               "mxu.rows and mxu.cols still work");
    th_cmd_result *c = malloc(sizeof *c);
    if (!c)
        return;
    static const char *const refused[] = {"clock_hz=2e9", "mxus_per_core=2",
                                          "mxu.op_overhead_cycles=100",
                                          "hbm.bandwidth_gbs=900", "mxu.row=8"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        char key[64];
        snprintf(key, sizeof key, "%.*s", (int)strcspn(refused[i], "="), refused[i]);
        th_run(c, "%s mxu --m 8 --k 8 --n 8 --set %s", th_bin(), refused[i]);
        const char *nl = strchr(c->err, '\n');
        TH_CHECKF(t, c->status == 2 && c->out[0] == 0 &&
                         strncmp(c->err, "tpuemu: error: mxu: --set ", 26) == 0 &&
                         strstr(c->err, key) && strstr(c->err, "mxu.rows and mxu.cols") &&
                         nl && nl[1] == 0,
                  "--set %s: exit %d, out '%s', err '%s'", refused[i], c->status, c->out,
                  c->err);
    }
    /* the array's size changes the cycles: 4 tiles of 4x4,
     * (T-1) max(M,R) + M + 2R + C - 2 = 24 + 8 + 8 + 4 - 2 */
    th_run(c, "%s mxu --m 8 --k 8 --n 8 --set mxu.rows=4 --set mxu.cols=4", th_bin());
    TH_CHECKF(t, c->status == 0 && strstr(c->out, "\"cycles\":42,"), "%d %s %s", c->status,
              c->out, c->err);
    th_run(c, "%s mxu --help", th_bin());
    TH_CHECK(t, strstr(c->out, "are refused") != NULL);
    free(c);
}

void th_suite_probe12c(th_ctx *t)
{
    torus_labels(t);
    layers_cut_bar(t);
    hbm_peak_help(t);
    mxu_sets(t);
}
