/* view_app — the SDL viewer's drawing: the files that include SDL (draw.c,
 * one file per panel, main.c).  The viewer is a front end: it reads an
 * emu_result through emu/result.h and draws with emu/out/chart.h and
 * emu/out/font.h; nothing in the core sees SDL.  Its state and everything
 * computed without SDL (layout, hit testing, text) is emu/view/layout.h. */
#ifndef EMU_VIEW_APP_H
#define EMU_VIEW_APP_H

#include <SDL.h>

#include "emu/view/layout.h"

/* draw.c: the frame, SDL's primitives and the font atlas. */
int view_font_init(view_app *a);
void view_draw(view_app *a);
void view_text(view_app *a, int x, int y, const char *s, int scale, uint32_t rgb);
/* Text cut to maxw pixels ("..": cut), counted in characters and cut
 * between them (emu/out/font.h), never inside a UTF-8 sequence. */
void view_text_fit(view_app *a, int x, int y, const char *s, int maxw, uint32_t rgb);
void view_fill(view_app *a, int x, int y, int w, int h, uint32_t rgb);
void view_frame_rect(view_app *a, int x, int y, int w, int h, uint32_t rgb);

/* One file each: what view_draw puts on the frame. */
void view_draw_timeline(view_app *a); /* timeline.c */
void view_draw_torus(view_app *a);    /* torus.c */
void view_draw_bars(view_app *a);     /* bars.c */
void view_draw_layers(view_app *a);   /* layers.c */
void view_draw_header(view_app *a);   /* header.c */
void view_draw_footer(view_app *a);   /* footer.c */
void view_draw_help(view_app *a);     /* help.c */

#endif
