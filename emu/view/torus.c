/* The torus panel (key 2): the chips on their grid, each core coloured by
 * its MXU utilization and each link by its busy time, with a legend. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/out/chart.h"
#include "emu/out/font.h"
#include "emu/view/app.h"

/* Colour ramps, ordered in lightness so they read in grey too: links on
 * a yellow-orange-red ramp (ColorBrewer YlOrRd, starting from a beige
 * that still shows on the background), cores on a single-hue blue ramp
 * (ColorBrewer Blues), so the two never look alike. */
static uint32_t ramp(const uint32_t *stops, double f)
{
    if (!(f > 0))
        f = 0;
    if (f > 1)
        f = 1;
    double p = f * 4;
    int i = (int)p;
    if (i >= 4)
        return stops[4];
    double u = p - i;
    uint32_t a = stops[i], b = stops[i + 1], o = 0;
    for (int sh = 0; sh <= 16; sh += 8) {
        double ca = (a >> sh) & 255, cb = (b >> sh) & 255;
        o |= (uint32_t)lround(ca + (cb - ca) * u) << sh;
    }
    return o;
}

static uint32_t link_color(double f)
{
    static const uint32_t st[] = {0xE8DFCC, 0xFED976, 0xFD8D3C, 0xE31A1C, 0x800026};
    return ramp(st, f);
}

static uint32_t core_color(double f)
{
    static const uint32_t st[] = {0xEFF3FF, 0xBDD7E7, 0x6BAED6, 0x2171B5, 0x08306B};
    return ramp(st, f);
}

/* Text wrapped at spaces into lines of at most maxw pixels; returns the
 * y below the last line. */
static int text_wrap(view_app *a, int x, int y, const char *s, int maxw, uint32_t rgb)
{
    int n = maxw / FONT_W;
    char line[512];
    if (n < 8)
        n = 8;
    while (*s) {
        /* Up to n characters (not bytes, and never half of one), ending
         * at the last space among them when the text goes on. */
        font_fit(line, sizeof line, s, n, NULL);
        size_t cut = strlen(line);
        if (s[cut] && s[cut] != ' ') {
            size_t sp = cut;
            while (sp > 0 && line[sp] != ' ')
                sp--;
            if (sp > 0)
                cut = sp;
        }
        line[cut] = 0;
        if (cut == 0)
            break;
        view_text(a, x, y, line, 1, rgb);
        y += FONT_H + 3;
        s += cut;
        while (*s == ' ')
            s++;
    }
    return y;
}

void view_draw_torus(view_app *a)
{
    int cell, ox, oy, dx, dy;
    view_torus_geom(a, &cell, &ox, &oy);
    view_torus_dims(a, &dx, &dy);
    int chip = cell * 55 / 100, gap = cell - chip;
    int lw = gap / 3 < cell / 10 ? gap / 3 : cell / 10; /* one stroke per direction */
    if (lw < 1)
        lw = 1;
    int wraps = view_torus_wraps(a), hover = view_torus_chip_at(a, a->mx, a->my);
    char buf[200];
    /* Link colours are scaled to the run's busiest link: a 1% all-reduce
     * would otherwise look like idle links. */
    double lsum = 0, lmax = 0, usum = 0, bsum = 0;
    int nl = 0;
    for (int ch = 0; ch < a->r.chips; ch++)
        for (int d = 0; d < 4; d++)
            if (view_link_exists(a, ch, d, wraps)) {
                double u = view_link_util(a, ch, d);
                lsum += u;
                lmax = fmax(lmax, u);
                nl++;
            }
    double lscale = lmax > 0 ? lmax : 1;
    snprintf(buf, sizeof buf,
             "%d x %d chips (x right, y down%s). Cores: MXU utilization. "
             "Links: busy time / step time, one stroke per direction, "
             "scaled to the busiest link.",
             dx, dy, wraps ? ", wrap-around links at the edges" : "");
    text_wrap(a, 30, VIEW_HEADER + 8, buf, a->W - VIEW_TORUS_LEGEND - 40, VIEW_INK);
    int labels = cell >= 90 && gap >= 30;
    for (int ch = 0; ch < a->r.chips; ch++) {
        int x = ch % dx, y = ch / dx;
        int px = ox + x * cell, py = oy + y * cell;
        /* +x: upper stroke to the right neighbour; -x of the neighbour:
         * lower stroke.  Same for y with left/right strokes.  Wrap links
         * (full pods) are drawn as stubs at the far edge. */
        int mid = py + chip / 2, midx = px + chip / 2;
        int nb = (x + 1 < dx) ? ch + 1 : ch - x;
        int nby = (y + 1 < dy) ? ch + dx : x;
        if (view_link_exists(a, ch, 0, wraps)) {
            double u0 = view_link_util(a, ch, 0), u1 = view_link_util(a, nb, 1);
            view_fill(a, px + chip, mid - lw - 1, gap, lw, link_color(u0 / lscale));
            view_fill(a, px + chip, mid + 1, gap, lw, link_color(u1 / lscale));
            if (labels) {
                snprintf(buf, sizeof buf, "%.1f%%", 100 * fmax(u0, u1));
                view_text(a, px + chip + (gap - view_text_w(buf)) / 2, mid - lw - FONT_H - 2, buf,
                          1, VIEW_MUTED);
            }
        }
        if (view_link_exists(a, ch, 2, wraps)) {
            double u0 = view_link_util(a, ch, 2), u1 = view_link_util(a, nby, 3);
            view_fill(a, midx - lw - 1, py + chip, lw, gap, link_color(u0 / lscale));
            view_fill(a, midx + 1, py + chip, lw, gap, link_color(u1 / lscale));
            if (labels) {
                snprintf(buf, sizeof buf, "%.1f%%", 100 * fmax(u0, u1));
                view_text(a, midx + lw + 4, py + chip + (gap - FONT_H) / 2, buf, 1, VIEW_MUTED);
            }
        }
        view_fill(a, px, py, chip, chip, 0x455A64);
        /* Two cores of the chip. */
        int cw = (chip - 3) / 2;
        for (int k = 0; k < 2; k++) {
            int core = ch * 2 + k;
            if (core >= a->r.cores)
                break;
            view_fill(a, px + 1 + k * (cw + 1), py + 1, cw, chip - 2,
                      core_color(a->r.per_core[core].mxu_utilization));
        }
        if (ch == hover) {
            view_frame_rect(a, px - 2, py - 2, chip + 4, chip + 4, 0x000000);
            view_frame_rect(a, px - 3, py - 3, chip + 6, chip + 6, 0x000000);
        }
    }
    /* Chip numbers, after the strokes and never over one (across the
     * vertical strokes "16" would read "1E" on a 16x16 torus), all in one
     * place for the frame, chosen for the widest number; none when no
     * place holds it: hovering a chip names it. */
    int lab_x = view_chip_label_dx(a, cell, chip, lw, labels);
    for (int ch = 0; lab_x >= 0 && ch < a->r.chips; ch++) {
        int px = ox + ch % dx * cell, py = oy + ch / dx * cell;
        snprintf(buf, sizeof buf, "%d", ch);
        view_text(a, px + lab_x, py + chip + 2, buf, 1, VIEW_MUTED);
    }
    for (int c = 0; c < a->r.cores; c++) {
        usum += a->r.per_core[c].mxu_utilization;
        bsum += view_busy_share(&a->r.per_core[c]);
    }
    /* Legend: the two colour scales and the means. */
    int lx = a->W - VIEW_TORUS_LEGEND, ly = VIEW_HEADER + 50, bw = VIEW_TORUS_LEGEND - 30;
    if (lx < ox + dx * cell + 10)
        lx = ox + dx * cell + 10;
    view_text(a, lx, ly, "cores: MXU utilization", 1, VIEW_INK);
    for (int i = 0; i < bw; i++)
        view_fill(a, lx + i, ly + 16, 1, 14, core_color(i / (bw - 1.0)));
    view_text(a, lx, ly + 34, "0%", 1, VIEW_INK);
    view_text(a, lx + bw - view_text_w("100%"), ly + 34, "100%", 1, VIEW_INK);
    ly += 58;
    view_text(a, lx, ly, "links: busy / step", 1, VIEW_INK);
    for (int i = 0; i < bw; i++)
        view_fill(a, lx + i, ly + 16, 1, 14, link_color(i / (bw - 1.0)));
    view_text(a, lx, ly + 34, "0%", 1, VIEW_INK);
    snprintf(buf, sizeof buf, "%.1f%% (max)", 100 * lmax);
    view_text(a, lx + bw - view_text_w(buf), ly + 34, buf, 1, VIEW_INK);
    ly += 62;
    snprintf(buf, sizeof buf, "links: mean %.1f%%", nl ? 100 * lsum / nl : 0);
    view_text(a, lx, ly, buf, 1, VIEW_INK);
    snprintf(buf, sizeof buf, "       max  %.1f%%", 100 * lmax);
    view_text(a, lx, ly + 16, buf, 1, VIEW_INK);
    snprintf(buf, sizeof buf, "       (%d links)", nl);
    view_text(a, lx, ly + 32, buf, 1, VIEW_MUTED);
    snprintf(buf, sizeof buf, "cores: MXU %.1f%%", a->r.cores ? 100 * usum / a->r.cores : 0);
    view_text(a, lx, ly + 52, buf, 1, VIEW_INK);
    snprintf(buf, sizeof buf, "       busy %.1f%%", a->r.cores ? 100 * bsum / a->r.cores : 0);
    view_text(a, lx, ly + 68, buf, 1, VIEW_INK);
    view_text(a, lx, ly + 92, lab_x >= 0 ? "hover a chip for" : "hover a chip for its", 1,
              VIEW_MUTED);
    view_text(a, lx, ly + 108, lab_x >= 0 ? "its cores and links" : "number, cores and links",
              1, VIEW_MUTED);
}
