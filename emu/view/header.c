/* The header: the four panel tabs, then two lines saying what ran and how
 * it fits, shortened to the window. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/out/chart.h"
#include "emu/out/font.h"
#include "emu/view/app.h"

/* Two lines: what ran, then how it fits (the figures `tpuemu run`
 * prints): batch, replicas x cores, HBM per core, remat, MXU use, and the
 * what-ifs (--freeze, --set).  When the second line is too long for the
 * window (640 pixels leave about 68 characters), it is shortened in
 * steps, the what-ifs kept longest: the HBM capacity dropped (the
 * generation's, unless --set), "2x4 cores", the MXU use dropped, then the
 * what-ifs cut with "...". */
void view_draw_header(view_app *a)
{
    view_fill(a, 0, 0, a->W, VIEW_HEADER, VIEW_HEAD);
    char buf[1024], tb[32]; /* room for every part of line 2 at full length */
    static const char *const names[VIEW_PANELS] = {"1 timeline", "2 torus", "3 bars",
                                                       "4 layers"};
    int x = a->W - 10;
    /* Four tabs: tighter below 800 pixels, so the second line keeps about
     * 64 characters at 640 ("batch 65536, 2048 replicas x 1 core  HBM
     * 1.96 GiB  MXU 19.0%" whole) */
    int pad = a->W < 800 ? 4 : 8, gap = a->W < 800 ? 2 : 4;
    for (int p = VIEW_PANELS - 1; p >= 0; p--) {
        int w = view_text_w(names[p]) + 2 * pad;
        x -= w + gap;
        view_fill(a, x, 8, w, VIEW_HEADER - 16, p == a->panel ? 0xFFFFFF : 0x37474F);
        view_text(a, x + pad, 14, names[p], 1, p == a->panel ? VIEW_HEAD : 0xCFD8DC);
    }
    if (x - 10 - view_text_w("h: help") > 400) {
        x -= 10 + view_text_w("h: help");
        view_text(a, x, 14, "h: help", 1, 0xCFD8DC);
    }
    int room = x - 20;
    chart_fmt_time(tb, sizeof tb, a->r.step_time_s, CHART_TIME_SIG, 0);
    snprintf(buf, sizeof buf, "%s on %s - %s%s", a->r.trace, a->r.system,
             a->r.fits ? "step " : "does not fit: no step timed",
             a->r.fits ? tb : "");
    view_text_fit(a, 10, 5, buf, room, 0xFFFFFF);
    double mxu = 0;
    for (int c = 0; c < a->r.cores; c++)
        mxu += a->r.per_core[c].mxu_utilization;
    mxu = a->r.cores ? mxu / a->r.cores : 0;
    const double gib = 1024.0 * 1024 * 1024;
    int big = a->r.hbm_needed_bytes >= gib;
    double need = big ? a->r.hbm_needed_bytes / gib : a->r.hbm_needed_bytes / (1024.0 * 1024);
    char cores[96], cores2[64], hb[160], hb2[96], flags[64] = "", mx[32], wi[400];
    snprintf(cores, sizeof cores, "batch %lld, %d replica%s x %d core%s",
             (long long)a->r.global_batch, a->r.replicas, a->r.replicas == 1 ? "" : "s",
             a->r.cores_per_replica, a->r.cores_per_replica == 1 ? "" : "s");
    snprintf(cores2, sizeof cores2, "batch %lld, %dx%d cores", (long long)a->r.global_batch,
             a->r.replicas, a->r.cores_per_replica);
    int fl = 0;
    if (!a->r.fits)
        fl += snprintf(flags + fl, sizeof flags - (size_t)fl, " DOES NOT FIT");
    if (a->r.hbm_remat_bytes > 0) {
        char rm[32];
        view_fmt_bytes(rm, sizeof rm, a->r.hbm_remat_bytes);
        snprintf(flags + fl, sizeof flags - (size_t)fl, " (remat %s)", rm);
    }
    hb[0] = hb2[0] = 0;
    if (a->r.hbm_capacity_bytes > 0) {
        snprintf(hb, sizeof hb, "  HBM %.3g %s of %.0f GiB/core%s", need, big ? "GiB" : "MiB",
                 a->r.hbm_capacity_bytes / gib, flags);
        snprintf(hb2, sizeof hb2, "  HBM %.3g %s%s", need, big ? "GiB" : "MiB", flags);
    } else if (flags[0]) {
        snprintf(hb, sizeof hb, " %s", flags);
        snprintf(hb2, sizeof hb2, " %s", flags);
    }
    mx[0] = 0;
    if (a->r.fits) /* a step that was not timed used no MXU */
        snprintf(mx, sizeof mx, "  MXU %.1f%%", 100 * mxu);
    view_whatif_text(&a->r, wi, sizeof wi);
    const char *sep = wi[0] ? "  " : "";
    int nchar = room / FONT_W;
    /* The longest form that fits, else the shortest with the what-ifs cut
     * (view_text_fit cuts whatever is still too long). */
    snprintf(buf, sizeof buf, "%s%s%s%s%s", cores, hb, mx, sep, wi);
    if (font_text_cells(buf) > nchar)
        snprintf(buf, sizeof buf, "%s%s%s%s%s", cores, hb2, mx, sep, wi);
    if (font_text_cells(buf) > nchar)
        snprintf(buf, sizeof buf, "%s%s%s%s%s", cores2, hb2, mx, sep, wi);
    if (font_text_cells(buf) > nchar && wi[0]) {
        int n = snprintf(buf, sizeof buf, "%s%s%s", cores2, hb2, sep);
        int nc = font_text_cells(buf);
        if (nc < nchar)
            view_put_cut(buf, sizeof buf, &n, wi, nchar - nc);
    }
    view_text_fit(a, 10, 21, buf, room, 0xB0BEC5);
}
