/* The sweep chart's axes: whole x values get whole ticks, and seconds are
 * drawn in a readable unit. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "emu/out/chart.h"
#include "emu/out/outfile.h"
#include "emu/report.h"
#include "emu/rfile.h"
#include "test/harness.h"

/* Tick marks under the x axis: INK pixels in the row 2 below the axis,
 * counted as runs. */
static int x_ticks(const unsigned char *p, int w, int y)
{
    int n = 0, in = 0;
    for (int x = 87; x < w - 180; x++) { /* right of the y labels */
        const unsigned char *q = p + 3 * ((size_t)y * w + x);
        int ink = q[0] == 0x20 && q[1] == 0x20 && q[2] == 0x20;
        n += ink && !in;
        in = ink;
    }
    return n;
}

static void chart_cases(th_ctx *t)
{
    tpu_error err = {0};
    char a[512], b[512];
    snprintf(a, sizeof a, "%s/ch-s.png", th_tmpdir());
    snprintf(b, sizeof b, "%s/ch-us.png", th_tmpdir());

    th_case(t, "sweep chart: whole x values get whole ticks (4 .. 8: five "
               "ticks, not 4.5, 5.5)");
    const double x[2] = {4, 8}, ys[2] = {6e-5, 9e-5};
    const double yus[2] = {6e-5 * 1e6, 9e-5 * 1e6};
    chart_series s = {"step time", x, ys, 2};
    TH_CHECKF(t, chart_lines_png(a, "t", "cores per replica",
                                 "step time (s)", &s, 1, &err) == TPU_OK,
              "%s", err.msg);
    int w = 0, h = 0, w2 = 0, h2 = 0;
    unsigned char *p = NULL, *q = NULL;
    TH_CHECK(t, th_png_rgb(a, &w, &h, &p) && w == 1000 && h == 600);
    /* the plot's bottom edge is at y 540, ticks go 3 pixels below */
    if (p)
        TH_CHECKF(t, x_ticks(p, w, 542) == 5, "%d ticks",
                  x_ticks(p, w, 542));
    const double xf[2] = {4.25, 8};
    chart_series sf = {"step time", xf, ys, 2};
    TH_CHECK(t, chart_lines_png(b, "t", "x", "step time (s)", &sf, 1,
                                &err) == TPU_OK);
    TH_CHECK(t, th_png_rgb(b, &w2, &h2, &q));
    if (q)
        TH_CHECKF(t, x_ticks(q, w2, 542) > 5, "%d ticks",
                  x_ticks(q, w2, 542));
    free(q);
    q = NULL;

    th_case(t, "sweep chart: seconds of 60 .. 90 us are drawn in us (the "
               "same chart as the values given in us)");
    chart_series su = {"step time", x, yus, 2};
    TH_CHECK(t, chart_lines_png(b, "t", "cores per replica",
                                "step time (us)", &su, 1, &err) == TPU_OK);
    TH_CHECK(t, th_png_rgb(b, &w2, &h2, &q));
    if (p && q)
        TH_CHECK(t, w == w2 && h == h2 &&
                        memcmp(p, q, (size_t)w * h * 3) == 0);
    free(p);
    free(q);
}

void th_suite_sweep_chart(th_ctx *t)
{
    chart_cases(t);
}
