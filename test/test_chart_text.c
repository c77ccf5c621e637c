/* Text in the PNG charts: accented names draw their accents, long names
 * are cut inside the image, and the breakdown chart's axis and legend use
 * the unit the step reads best in ("ü" is not "??"; an 89 us step gets an
 * axis in us, not 0.02 .. 0.08 ms, and no legend of "0.0000 ms"). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/out/chart.h"
#include "emu/out/font.h"
#include "test/harness.h"

typedef struct {
    int w, h;
    unsigned char *rgb;
} tpng;

static uint32_t px(const tpng *p, int x, int y)
{
    const unsigned char *q = p->rgb + 3 * ((size_t)y * p->w + x);
    return (uint32_t)q[0] << 16 | (uint32_t)q[1] << 8 | q[2];
}

/* 1 when s, drawn at (x, y) at scale 1 in colour c, is exactly what the
 * image holds there: every glyph pixel in c and no other pixel of the
 * text's cells in c. */
static int text_at(const tpng *p, int x, int y, const char *s,
                   uint32_t c)
{
    return th_text_at(p->rgb, p->w, p->h, x, y, s, c);
}

/* The row y in y0..y1 where s stands at x, or -1. */
static int find_text(const tpng *p, int x, int y0, int y1, const char *s,
                     uint32_t c)
{
    for (int y = y0; y <= y1; y++)
        if (text_at(p, x, y, s, c))
            return y;
    return -1;
}

/* Scales a synthetic result's times by f (the synthetic step is ~7 ms). */
static void scale_times(emu_result *r, double f)
{
    r->step_time_s *= f;
    for (int c = 0; c < r->cores; c++) {
        r->per_core[c].step_time_s *= f;
        for (int k = 0; k < CAT_COUNT; k++)
            r->per_core[c].breakdown_s[k] *= f;
    }
}

static int breakdown(emu_result *r, const char *name, tpng *p, th_ctx *t)
{
    char path[512];
    tpu_error err = {0};
    snprintf(path, sizeof path, "%s/%s", th_tmpdir(), name);
    tpu_status st = chart_breakdown_png(r, path, &err);
    if (!TH_CHECKF(t, st == TPU_OK, "%s", err.msg))
        return 0;
    return TH_CHECK(t, th_png_rgb(path, &p->w, &p->h, &p->rgb));
}

void th_suite_chart_text(th_ctx *t)
{
    emu_result r;
    tpng a = {0}, b = {0};
    const uint32_t ink = 0x202020;

    th_case(t, "an accented trace name draws its accent: José differs from Jose");
    tsynth_result(&r, 8, 2, 2, 2, 1);
    snprintf(r.trace, sizeof r.trace, "Jos\xC3\xA9");
    int ok = breakdown(&r, "jose-accent.png", &a, t);
    snprintf(r.trace, sizeof r.trace, "Jose");
    ok &= breakdown(&r, "jose-plain.png", &b, t);
    if (ok && TH_CHECK(t, a.w == b.w && a.h == b.h)) {
        /* The title "Step time per core: Jose" at (20, 14), scale 2: the
         * 24th cell is the e, 12 pixels wide; its accent sits above the
         * letter's x-height (rows 0..4 of the cell, 0..9 at scale 2). */
        int x0 = 20 + 23 * 2 * FONT_W, accent = 0, plain = 0, diff = 0;
        for (int y = 14; y < 14 + 10; y++)
            for (int x = x0; x < x0 + 2 * FONT_W; x++) {
                accent += px(&a, x, y) == ink;
                plain += px(&b, x, y) == ink;
            }
        for (int y = 0; y < a.h; y++)
            for (int x = 0; x < a.w; x++)
                diff += px(&a, x, y) != px(&b, x, y);
        TH_CHECKF(t, accent >= 8 && plain == 0 && diff == accent,
                  "accent pixels %d (plain e: %d), %d pixels differ", accent,
                  plain, diff);
        /* the rest of the title is the same text, one cell per letter */
        TH_CHECK(t, font_text_width("Step time per core: Jos\xC3\xA9", 2) ==
                        font_text_width("Step time per core: Jose", 2));
    }
    free(a.rgb);
    free(b.rgb);
    a.rgb = b.rgb = NULL;

    th_case(t, "CJK and emoji: one box per character, not one '?' per byte");
    snprintf(r.trace, sizeof r.trace, "tiny \xC3\xBC \xE9\x9B\xAA");
    if (breakdown(&r, "uni.png", &a, t)) {
        /* scale 2 title: "Step time per core: tiny " is 25 cells; then ü,
         * space, the box; nothing after it */
        int xb = 20 + 27 * 2 * FONT_W, after = 0, box = 0;
        for (int y = 14; y < 14 + 2 * FONT_H; y++) {
            for (int x = xb; x < xb + 2 * FONT_W; x++)
                box += px(&a, x, y) == ink;
            for (int x = xb + 2 * FONT_W; x < xb + 8 * FONT_W; x++)
                after += px(&a, x, y) == ink;
        }
        TH_CHECKF(t, box > 40 && after == 0, "box %d pixels, %d after it", box,
                  after);
        free(a.rgb);
        a.rgb = NULL;
    }

    th_case(t, "a name too long for the image is cut with '..' inside it");
    char longname[128];
    int n = 0;
    while (n + 2 < (int)sizeof longname) /* é x 63: 126 bytes, 63 characters */
        n += snprintf(longname + n, sizeof longname - (size_t)n, "\xC3\xA9");
    snprintf(r.trace, sizeof r.trace, "%s", longname);
    tpu_error err = {0};
    chart_image im = {0};
    if (TH_CHECKF(t, chart_breakdown_image(&r, &im, 500, 300, &err) == TPU_OK, "%s",
                  err.msg)) {
        tpng v = {im.w, im.h, im.rgb};
        /* 83 characters: scale 1 (2 does not fit), cut to the 460 pixels
         * the title has, 76 cells, the last two ".." */
        char title[512], want[512];
        snprintf(title, sizeof title, "Step time per core: %s", longname);
        TH_CHECK(t, font_text_cells(title) == 83);
        font_fit(want, sizeof want, title, 76, "..");
        TH_CHECK(t, font_text_cells(want) == 76 && strstr(want, "..") != NULL);
        TH_CHECK(t, text_at(&v, 20, 14, want, ink));
        chart_image_free(&im);
    }
    char huge[400];
    int m = 0;
    for (int i = 0; i < 120; i++)
        m += snprintf(huge + m, sizeof huge - (size_t)m, "\xC3\xA9");
    chart_series s1 = {huge, (const double[]){1, 2}, (const double[]){3, 4}, 2};
    char path[512];
    snprintf(path, sizeof path, "%s/longseries.png", th_tmpdir());
    if (TH_CHECK(t, chart_lines_png(path, huge, huge, "step time (s)", &s1, 1, &err) ==
                        TPU_OK) &&
        TH_CHECK(t, th_png_rgb(path, &a.w, &a.h, &a.rgb))) {
        /* the legend column (x 854 on): 140 pixels = 23 cells, 21 é and ".." */
        char want[64];
        font_fit(want, sizeof want, huge, (1000 - 854 - 6) / FONT_W, "..");
        TH_CHECK(t, font_text_cells(want) == 23);
        TH_CHECK(t, find_text(&a, 854, 70, 90, want, ink) >= 0);
        free(a.rgb);
        a.rgb = NULL;
    }
    emu_result_free(&r);

    th_case(t, "legend values: three significant figures, no exponent");
    static const struct {
        double v;
        const char *want;
    } sig[] = {{79.2049, "79.2"}, {5.0213, "5.02"}, {0.137, "0.137"},
               {0.0605, "0.0605"}, {0, "0"}, {1234.6, "1235"}, {9.996, "10.0"},
               {999.7, "1000"}, {100, "100"}, {-4.791, "-4.79"}};
    for (size_t i = 0; i < sizeof sig / sizeof sig[0]; i++) {
        char buf[32];
        chart_fmt_sig(buf, sizeof buf, sig[i].v, 3);
        TH_CHECKF(t, strcmp(buf, sig[i].want) == 0, "%g: \"%s\", want \"%s\"",
                  sig[i].v, buf, sig[i].want);
    }

    th_case(t, "breakdown of a microsecond step: axis and legend in us");
    tsynth_result(&r, 8, 2, 2, 6, 0);
    double ms_step = r.step_time_s;
    scale_times(&r, 89.1e-6 / ms_step); /* an 89.1 us step */
    if (breakdown(&r, "us.png", &a, t)) {
        /* y label above the plot's left edge (x 48, y 89) */
        TH_CHECK(t, text_at(&a, 48, 89, "step time (us)", ink));
        TH_CHECK(t, !text_at(&a, 48, 89, "step time (ms)", ink));
        /* ticks 0 .. 80 us by 20: "80" right-aligned at the plot's left */
        int y80 = find_text(&a, 90 - 6 - 2 * FONT_W, 110, 650, "80", ink);
        TH_CHECKF(t, y80 > 110 && y80 < 250, "tick 80 at row %d", y80);
        TH_CHECK(t, find_text(&a, 90 - 6 - 4 * FONT_W, 110, 650, "0.08", ink) < 0);
        /* legend (x 1020, values at 1040): the MXU mean, in us, 3 figures */
        double mxu = 0;
        for (int c = 0; c < r.cores; c++)
            mxu += r.per_core[c].breakdown_s[CAT_MXU];
        char want[48];
        chart_fmt_sig(want, sizeof want, mxu / r.cores * 1e6, 3);
        strcat(want, " us");
        TH_CHECKF(t, find_text(&a, 1040, 110, 700, want, 0x606060) > 0,
                  "legend \"%s\" not found", want);
        free(a.rgb);
        a.rgb = NULL;
    }
    emu_result_free(&r);

    th_case(t, "breakdown of a millisecond step keeps ms, of a 2 s step s");
    tsynth_result(&r, 8, 2, 2, 6, 0);
    scale_times(&r, 30e-3 / r.step_time_s);
    if (breakdown(&r, "ms.png", &a, t)) {
        TH_CHECK(t, text_at(&a, 48, 89, "step time (ms)", ink));
        free(a.rgb);
        a.rgb = NULL;
    }
    scale_times(&r, 2.0 / r.step_time_s);
    if (breakdown(&r, "s.png", &a, t)) {
        TH_CHECK(t, text_at(&a, 48, 89, "step time (s)", ink));
        free(a.rgb);
        a.rgb = NULL;
    }
    emu_result_free(&r);
}
