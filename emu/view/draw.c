/* The viewer's frame with SDL's renderer: the primitives the panel files
 * draw with, the text (the same bitmap font as the PNG charts, one texture
 * atlas tinted per draw), and view_draw, which puts the panel of the
 * moment, the header, the footer and the help on a frame. */
#include <stdio.h>

#include "emu/out/font.h"
#include "emu/view/app.h"

static void color(view_app *a, uint32_t rgb, uint8_t alpha)
{
    SDL_SetRenderDrawColor(a->ren, (uint8_t)(rgb >> 16), (uint8_t)(rgb >> 8),
                           (uint8_t)rgb, alpha);
}

void view_fill(view_app *a, int x, int y, int w, int h, uint32_t rgb)
{
    SDL_Rect rc = {x, y, w, h};
    color(a, rgb, 255);
    SDL_RenderFillRect(a->ren, &rc);
}

void view_frame_rect(view_app *a, int x, int y, int w, int h, uint32_t rgb)
{
    SDL_Rect rc = {x, y, w, h};
    color(a, rgb, 255);
    SDL_RenderDrawRect(a->ren, &rc);
}

/* Glyphs per row of the font atlas: every glyph of emu/out/font.h (each
 * letter with each accent, about 2400) in a 384 x 481 texture, built once,
 * so drawing text stays one texture copy per character. */
#define ATLAS_COLS 64

int view_font_init(view_app *a)
{
    int n = font_glyph_count();
    int w = ATLAS_COLS * FONT_W, h = (n + ATLAS_COLS - 1) / ATLAS_COLS * FONT_H;
    SDL_Surface *s = SDL_CreateRGBSurfaceWithFormat(0, w, h, 32,
                                                    SDL_PIXELFORMAT_ARGB8888);
    if (!s)
        return 0;
    SDL_LockSurface(s);
    for (int y = 0; y < h; y++) {
        uint32_t *p = (uint32_t *)((uint8_t *)s->pixels + y * s->pitch);
        for (int x = 0; x < w; x++)
            p[x] = 0x00FFFFFFu;
    }
    for (int g = 0; g < n; g++) {
        uint8_t rows[FONT_H];
        font_glyph(g, rows);
        int gx = g % ATLAS_COLS * FONT_W, gy = g / ATLAS_COLS * FONT_H;
        for (int y = 0; y < FONT_H; y++) {
            uint32_t *p = (uint32_t *)((uint8_t *)s->pixels + (gy + y) * s->pitch);
            for (int x = 0; x < FONT_W; x++)
                if (rows[y] >> x & 1)
                    p[gx + x] = 0xFFFFFFFFu;
        }
    }
    SDL_UnlockSurface(s);
    a->font = SDL_CreateTextureFromSurface(a->ren, s);
    SDL_FreeSurface(s);
    if (!a->font)
        return 0;
    SDL_SetTextureBlendMode(a->font, SDL_BLENDMODE_BLEND);
    return 1;
}

void view_text(view_app *a, int x, int y, const char *s, int scale,
               uint32_t rgb)
{
    SDL_SetTextureColorMod(a->font, (uint8_t)(rgb >> 16), (uint8_t)(rgb >> 8),
                           (uint8_t)rgb);
    int g, k;
    for (; (k = font_next(s, &g)) > 0; s += k, x += FONT_W * scale) {
        if (g == 0) /* space */
            continue;
        SDL_Rect src = {g % ATLAS_COLS * FONT_W, g / ATLAS_COLS * FONT_H, FONT_W, FONT_H};
        SDL_Rect dst = {x, y, FONT_W * scale, FONT_H * scale};
        SDL_RenderCopy(a->ren, a->font, &src, &dst);
    }
}

/* Text cut to maxw pixels ("..": cut), counted in characters and cut
 * between them (emu/out/font.h), never inside a UTF-8 sequence. */
void view_text_fit(view_app *a, int x, int y, const char *s, int maxw,
                   uint32_t rgb)
{
    char buf[1024];
    int n = maxw / FONT_W;
    if (n <= 0)
        return;
    font_fit(buf, sizeof buf, s, n, "..");
    view_text(a, x, y, buf, 1, rgb);
}

/* A report of a step that does not fit has no timed step: its timeline and
 * bars would be an empty 0-1 ms chart.  Say what the run found instead. */
static void draw_nofit(view_app *a)
{
    char need[32], has[32], line[256];
    view_fmt_bytes(need, sizeof need, a->r.hbm_needed_bytes);
    view_fmt_bytes(has, sizeof has, a->r.hbm_capacity_bytes);
    int x = 20, y = VIEW_HEADER + 24, room = a->W - 40;
    snprintf(line, sizeof line, "The step does not fit: a core needs %s of HBM "
             "and has %s.", need, has);
    view_text_fit(a, x, y, line, room, VIEW_INK);
    if (a->r.hbm_remat_bytes > 0) {
        char rm[32];
        view_fmt_bytes(rm, sizeof rm, a->r.hbm_remat_bytes);
        snprintf(line, sizeof line, "(after recomputing %s of activations "
                 "in the backward pass)", rm);
        view_text_fit(a, x, y + 18, line, room, VIEW_INK);
        y += 18;
    }
    view_text_fit(a, x, y + 36, "No step was timed, so there is no timeline or "
                  "breakdown to draw.", room, VIEW_MUTED);
    view_text_fit(a, x, y + 54, "tpuemu run on the trace says what the need is "
                  "made of; a larger slice or more", room, VIEW_MUTED);
    view_text_fit(a, x, y + 72, "ways of spatial partitioning (tpuemu sweep) "
                  "splits it.", room, VIEW_MUTED);
}

void view_draw(view_app *a)
{
    view_fill(a, 0, 0, a->W, a->H, VIEW_BG);
    view_layers_sync(a); /* the lane follows the first shown row */
    if (!a->r.fits && a->panel != VIEW_TORUS)
        draw_nofit(a);
    else if (a->panel == VIEW_TIMELINE)
        view_draw_timeline(a);
    else if (a->panel == VIEW_TORUS)
        view_draw_torus(a);
    else if (a->panel == VIEW_LAYERS)
        view_draw_layers(a);
    else
        view_draw_bars(a);
    view_draw_header(a);
    view_draw_footer(a);
    if (a->help)
        view_draw_help(a);
}
