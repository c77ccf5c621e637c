/* The help overlay (h, F1, ?): the keys, what "same as N" means and the
 * category colours, in a box that fits the smallest window. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/out/chart.h"
#include "emu/out/font.h"
#include "emu/view/app.h"

static const char *const help_lines[] = {
    "tpuemu view - keys",
    "",
    "1 2 3 4, Tab      timeline / torus / per-core bars / layers (Shift+Tab)",
    "z or +, x or -    zoom in / out (timeline; around the mouse)",
    "mouse wheel       zoom at the mouse",
    "left right, a d   pan the time window (Shift: faster)",
    "drag              pan with the mouse",
    "up down, w s      scroll rows; PgUp PgDn a page; Home End",
    "0                 whole step (reset zoom)",
    "u                 show / hide unit rows (MXU, vector, DMA, ICI)",
    "click             select an event or a layer span (details in the footer)",
    "Esc               clear selection, close this help",
    "h, F1, ?          this help",
    "q                 quit",
    "",
    "\"same as N\" by a core: an identical replica the engine simulated",
    "once, drawn from core N's timeline; a run of such cores is",
    "one row (\"cores 1-2047: same as 0\"). Replicas that copy",
    "replica 0 shard by shard are one row (\"replicas 1-7 = 0\");",
    "hover its label for the cores it stands for.",
    "",
    "Colours: category of the critical path (the report's categories):",
};

void view_draw_help(view_app *a)
{
    int n = (int)(sizeof help_lines / sizeof help_lines[0]);
    int extra = a->demo ? 1 : 0;
    /* Line pitch shrinks (down to the font's height) so the box fits the
     * smallest window, 640x400. */
    int lh = (a->H - 20 - 40 - 26) / (n + extra);
    if (lh > 18)
        lh = 18;
    if (lh < FONT_H)
        lh = FONT_H;
    int pad = lh < 16 ? 10 : 20;
    int w = 580, h = 2 * pad + (n + extra) * lh + 22;
    int lx0 = a->W < w ? 0 : (a->W - w) / 2, y = (a->H - h) / 2;
    if (y < 0)
        y = 0;
    SDL_SetRenderDrawBlendMode(a->ren, SDL_BLENDMODE_BLEND);
    SDL_Rect shade = {0, 0, a->W, a->H};
    SDL_SetRenderDrawColor(a->ren, 0, 0, 0, 110);
    SDL_RenderFillRect(a->ren, &shade);
    SDL_SetRenderDrawBlendMode(a->ren, SDL_BLENDMODE_NONE);
    view_fill(a, lx0, y, w, h, 0xFFFFFF);
    view_frame_rect(a, lx0, y, w, h, VIEW_HEAD);
    int ty = y + pad;
    for (int i = 0; i < n; i++, ty += lh) {
        view_text(a, lx0 + 20, ty, help_lines[i], 1, i == 0 ? 0x0072B2 : VIEW_INK);
        if (i == 13 && extra) {
            ty += lh;
            view_text(a, lx0 + 20, ty, "d                 demo: switch v3-64 / v3-2048", 1,
                      VIEW_INK);
        }
    }
    int lx = lx0 + 20, ly = ty + 4;
    for (int c = 0; c < CAT_COUNT; c++) {
        view_fill(a, lx, ly, 12, 12, chart_cat_color((emu_cat)c));
        view_text(a, lx + 16, ly, emu_cat_name((emu_cat)c), 1, VIEW_INK);
        lx += 16 + view_text_w(emu_cat_name((emu_cat)c)) + 14;
    }
}
