/* The bars panel (key 3): chart.c's per-core breakdown chart, drawn into
 * an image at the window's size and uploaded as a texture (redrawn when
 * the size changes), so the viewer and the PNG chart are one drawing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/out/chart.h"
#include "emu/out/font.h"
#include "emu/view/app.h"

void view_draw_bars(view_app *a)
{
    int w = a->W, h = a->H - VIEW_HEADER - VIEW_FOOTER;
    if (w < 500 || h < 300) {
        view_text(a, 20, VIEW_HEADER + 20, "window too small for the bar chart", 1, VIEW_INK);
        return;
    }
    if (!a->bars || a->bars_w != w || a->bars_h != h) {
        if (a->bars)
            SDL_DestroyTexture(a->bars);
        a->bars = NULL;
        chart_image im = {0};
        tpu_error err = {0};
        if (chart_breakdown_image(&a->r, &im, w, h, &err) != TPU_OK) {
            view_text(a, 20, VIEW_HEADER + 20, err.msg, 1, VIEW_INK);
            return;
        }
        a->bars = SDL_CreateTexture(a->ren, SDL_PIXELFORMAT_RGB24,
                                    SDL_TEXTUREACCESS_STATIC, w, h);
        if (a->bars)
            SDL_UpdateTexture(a->bars, NULL, im.rgb, 3 * w);
        chart_image_free(&im);
        a->bars_w = w;
        a->bars_h = h;
    }
    if (a->bars) {
        SDL_Rect dst = {0, VIEW_HEADER, w, h};
        SDL_RenderCopy(a->ren, a->bars, NULL, &dst);
    }
}
