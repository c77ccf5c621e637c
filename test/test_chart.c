/* PNG charts: the files decode with libpng to the promised size, bars are
 * drawn where the data says, and many cores are aggregated, not dropped. */
#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/out/chart.h"
#include "emu/out/font.h"
#include "test/harness.h"

typedef struct {
    int w, h;
    uint8_t *rgb;
} tpng;

static int read_png(const char *path, tpng *out)
{
    return th_png_rgb(path, &out->w, &out->h, &out->rgb);
}

static uint32_t px(const tpng *p, int x, int y)
{
    const uint8_t *q = p->rgb + 3 * ((size_t)y * p->w + x);
    return (uint32_t)q[0] << 16 | (uint32_t)q[1] << 8 | q[2];
}

/* Pixels of colour c in the rectangle. */
static int count_color(const tpng *p, int x0, int y0, int x1, int y1,
                       uint32_t c)
{
    int n = 0;
    for (int y = y0; y < y1 && y < p->h; y++)
        for (int x = x0; x < x1 && x < p->w; x++)
            n += px(p, x, y) == c;
    return n;
}

void th_suite_chart(th_ctx *t)
{
    char path[512];
    tpu_error err = {0};
    emu_result r;

    th_case(t, "font: every printable glyph but space has pixels");
    int blank = 0;
    for (int c = 33; c < 127; c++) {
        int any = 0;
        for (int y = 0; y < FONT_H; y++)
            any |= font_row((unsigned char)c, y);
        blank += !any;
    }
    TH_CHECKF(t, blank == 0, "%d blank glyphs", blank);
    TH_CHECK(t, font_text_width("abc", 2) == 3 * FONT_W * 2);

    th_case(t, "breakdown PNG of 8 cores decodes at 1200x720 with bars");
    tsynth_result(&r, 8, 2, 2, 6, 0);
    snprintf(path, sizeof path, "%s/bars8.png", th_tmpdir());
    tpu_status st = chart_breakdown_png(&r, path, &err);
    TH_CHECKF(t, st == TPU_OK, "%s", err.msg);
    tpng p = {0};
    if (TH_CHECK(t, read_png(path, &p))) {
        TH_CHECK(t, p.w == 1200 && p.h == 720);
        /* The plot spans x 90..1000: each of 8 bar slots must hold the MXU
         * colour, and MXU is the biggest share so its pixels dominate. */
        double slot = (1000 - 90) / 8.0;
        for (int b = 0; b < 8; b++) {
            int x0 = 90 + (int)(b * slot), x1 = 90 + (int)((b + 1) * slot);
            int mxu = count_color(&p, x0, 110, x1, 650, chart_cat_color(CAT_MXU));
            int vec = count_color(&p, x0, 110, x1, 650, chart_cat_color(CAT_VECTOR));
            TH_CHECKF(t, mxu > 1000 && vec > 100 && mxu > vec,
                      "bar %d: mxu %d vector %d pixels", b, mxu, vec);
        }
        /* Nothing drawn right of the legend's column on the plot's rows
         * except the legend: the far right strip stays background. */
        TH_CHECK(t, count_color(&p, 1190, 0, 1200, 720, 0xFFFFFF) == 10 * 720);
        /* Idle exists only on the fast cores (0..7 differ by core/8: all
         * equal here) - a bar's height follows its step time: compare the
         * top of bar 0 with the plot's full height. */
        free(p.rgb);
    }
    emu_result_free(&r);

    th_case(t, "slower cores get taller busy bars and idle fills the rest");
    tsynth_result(&r, 32, 4, 4, 4, 0); /* cores 24..31 are 3% slower */
    r.cores = 32;
    snprintf(path, sizeof path, "%s/bars32.png", th_tmpdir());
    st = chart_breakdown_png(&r, path, &err);
    TH_CHECKF(t, st == TPU_OK, "%s", err.msg);
    if (TH_CHECK(t, read_png(path, &p))) {
        double slot = (1000 - 90) / 32.0;
        int idle0 = count_color(&p, 90, 100, 90 + (int)slot, 650, chart_cat_color(CAT_IDLE));
        int idle31 = count_color(&p, 90 + (int)(31 * slot), 100, 90 + (int)(32 * slot), 650,
                                 chart_cat_color(CAT_IDLE));
        TH_CHECKF(t, idle0 > 0 && idle31 == 0, "idle pixels core0 %d core31 %d",
                  idle0, idle31);
        free(p.rgb);
    }
    emu_result_free(&r);

    th_case(t, "2048 identical cores collapse into one group bar");
    tsynth_result(&r, 2048, 32, 32, 2, 1);
    int *cb = malloc(sizeof(int) * 2048), mode = -1;
    int nb = chart_bars(&r, cb, &mode);
    TH_CHECK(t, nb == 1 && mode == 1);
    snprintf(path, sizeof path, "%s/bars2048.png", th_tmpdir());
    st = chart_breakdown_png(&r, path, &err);
    TH_CHECKF(t, st == TPU_OK, "%s", err.msg);
    emu_result_free(&r);

    th_case(t, "2048 differing cores are binned, every core in a bin");
    tsynth_result(&r, 2048, 32, 32, 2, 0); /* 256 distinct groups */
    nb = chart_bars(&r, cb, &mode);
    TH_CHECKF(t, mode == 2 && nb == 128, "mode %d bars %d", mode, nb);
    int ok = 1;
    for (int c = 0; c < 2048; c++)
        ok &= cb[c] >= 0 && cb[c] < nb && (c == 0 || cb[c] >= cb[c - 1]);
    TH_CHECK(t, ok);
    st = chart_breakdown_png(&r, path, &err);
    TH_CHECKF(t, st == TPU_OK, "%s", err.msg);
    if (TH_CHECK(t, read_png(path, &p))) {
        TH_CHECK(t, count_color(&p, 90, 100, 1000, 650, chart_cat_color(CAT_MXU)) > 50000);
        free(p.rgb);
    }
    free(cb);
    emu_result_free(&r);

    th_case(t, "line chart: size, both series drawn, bad input refused");
    double x[20], y1[20], y2[20];
    for (int i = 0; i < 20; i++) {
        x[i] = i;
        y1[i] = 3.0 * exp(-i / 6.0);
        y2[i] = 1.0 + 0.05 * i;
    }
    chart_series s[2] = {{"loss", x, y1, 20}, {"other", x, y2, 20}};
    snprintf(path, sizeof path, "%s/lines.png", th_tmpdir());
    st = chart_lines_png(path, "Training loss", "step", "loss", s, 2, &err);
    TH_CHECKF(t, st == TPU_OK, "%s", err.msg);
    if (TH_CHECK(t, read_png(path, &p))) {
        TH_CHECK(t, p.w == 1000 && p.h == 600);
        TH_CHECK(t, count_color(&p, 90, 70, 810, 540, 0x0072B2) > 200);
        TH_CHECK(t, count_color(&p, 90, 70, 810, 540, 0xD55E00) > 200);
        free(p.rgb);
    }
    double nanv[2] = {NAN, NAN};
    chart_series bad = {"nan", nanv, nanv, 2};
    TH_CHECK(t, chart_lines_png(path, "t", "x", "y", &bad, 1, &err) == TPU_ERR_INPUT);
    double fx[2] = {1, 16};
    chart_series novalue = {"nan", fx, nanv, 2};
    TH_CHECK(t, chart_lines_png(path, "t", "x", "y", &novalue, 1, &err) ==
                    TPU_ERR_INPUT);

    th_case(t, "line chart: a point without a value keeps its place on the x "
               "axis (a sweep's value where nothing fits)");
    double gy[2] = {NAN, 5};
    chart_series gap = {"fits", fx, gy, 2};
    st = chart_lines_png(path, "t", "hbm.capacity_gib", "step time (s)", &gap,
                         1, &err);
    TH_CHECKF(t, st == TPU_OK, "%s", err.msg);
    if (TH_CHECK(t, read_png(path, &p))) {
        /* the plot spans x 90..810: 16 on an axis from 1 is at its right
         * end, not in the middle as a value alone on its axis would be */
        int right = count_color(&p, 790, 70, 830, 550, 0x0072B2);
        int middle = count_color(&p, 350, 70, 550, 550, 0x0072B2);
        TH_CHECKF(t, right > 0 && middle == 0,
                  "marker pixels: %d at the right end, %d mid-axis", right,
                  middle);
        free(p.rgb);
    }

    th_case(t, "line chart: series that meet at a point all stay visible "
               "(one x value, equal steps)");
    {
        double one_x[1] = {64}, same_y[1] = {0.25};
        chart_series meet[3] = {{"v3-32", one_x, same_y, 1},
                                {"v3-64", one_x, same_y, 1},
                                {"v3-128", one_x, same_y, 1}};
        st = chart_lines_png(path, "t", "system", "step time (s)", meet, 3,
                             &err);
        TH_CHECKF(t, st == TPU_OK, "%s", err.msg);
        if (TH_CHECK(t, read_png(path, &p))) {
            int a = count_color(&p, 90, 70, 810, 540, 0x0072B2);
            int b = count_color(&p, 90, 70, 810, 540, 0xD55E00);
            int c = count_color(&p, 90, 70, 810, 540, 0x009E73);
            TH_CHECKF(t, a > 0 && b > 0 && c > 0,
                      "marker pixels: %d %d %d", a, b, c);
            free(p.rgb);
        }
    }

    th_case(t, "unwritable path fails cleanly and leaves no file");
    tsynth_result(&r, 8, 2, 2, 2, 1);
    st = chart_breakdown_png(&r, "/nonexistent-dir/x.png", &err);
    TH_CHECK(t, st == TPU_ERR_INPUT && strstr(err.msg, "/nonexistent-dir/x.png"));
    emu_result_free(&r);
}
