/* font — the bitmap font used for text in PNG charts and in the viewer.
 *
 * One fixed-width face, 6x13 pixels, printable ASCII (32..126), embedded
 * as a static const table.  Why a bitmap font rather than FreeType and a
 * TrueType face: charts must be byte-identical on every machine (no
 * hinting or anti-aliasing that varies with the FreeType build), the core
 * library gets no extra dependency, and a 6x13 cell stays readable at the
 * small sizes a chart of 2048 cores needs.  Bigger text (titles) is the
 * same glyphs scaled by an integer factor.
 */
#ifndef EMU_FONT_H
#define EMU_FONT_H

#include <stdint.h>

#define FONT_W 6   /* advance and cell width, pixels */
#define FONT_H 13  /* cell height, pixels (ascent 11, descent 2) */

/* Row y (0 = top) of the glyph for character c: bit x set = pixel x lit
 * (bit 0 is the leftmost column).  Characters outside 32..126 draw as '?'. */
uint8_t font_row(unsigned char c, int y);

/* Width in pixels of s drawn at integer scale (newlines not handled). */
int font_text_width(const char *s, int scale);

/* Draws s with its top-left corner at (x, y) into a packed 8-bit RGB
 * image of w x h pixels (stride 3*w), clipped to the image.  scale >= 1. */
void font_draw_rgb(uint8_t *rgb, int w, int h, int x, int y, const char *s,
                   int scale, uint32_t color /* 0xRRGGBB */);

#endif
