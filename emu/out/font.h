/* font — the bitmap font used for text in PNG charts and in the viewer.
 *
 * One fixed-width face, 6x13 pixels, embedded as static const tables.  Why
 * a bitmap font rather than FreeType and a TrueType face: charts must be
 * byte-identical on every machine (no hinting or anti-aliasing that varies
 * with the FreeType build), the core library gets no extra dependency, and
 * a 6x13 cell stays readable at the small sizes a chart of 2048 cores
 * needs.  Bigger text (titles) is the same glyphs scaled by an integer
 * factor.
 *
 * Text is UTF-8 (trace, layer and series names are whatever the user
 * wrote).  Every character takes one cell:
 *   - printable ASCII as drawn by the face;
 *   - Latin-1 Supplement and Latin Extended-A letters as their base letter
 *     with the accent drawn above (grave, acute, circumflex, tilde,
 *     diaeresis, ring, macron, breve, dot, double acute, caron) or below
 *     (cedilla, ogonek); the letters that are no base+accent (ß, æ, ø, ð,
 *     þ, ł, đ, œ, ...), Latin-1's symbols (° ± µ × ...) and a few
 *     punctuation marks (dashes, curly quotes, ..., €) have glyphs of
 *     their own;
 *   - combining accents (U+0300..U+036F, decomposed text as macOS writes
 *     file names) go onto the character before them, in the same cell;
 *     variation selectors, emoji modifiers and zero-width joiners join
 *     their neighbours into the one cell: one character as a reader sees
 *     it, one cell;
 *   - everything else (CJK, emoji, ...) as a hollow box;
 *   - control characters and ill-formed UTF-8 as the replacement glyph,
 *     one per ill-formed sequence: a stray continuation byte, a byte that
 *     starts no sequence, or a lead byte with the continuation bytes that
 *     follow it (up to the length it announces: an overlong form, a
 *     surrogate, a value past U+10FFFF, a sequence cut short).  Decoding
 *     never reads past the terminating NUL.
 * Widths count cells, not bytes; cutting text never splits a character.
 */
#ifndef EMU_FONT_H
#define EMU_FONT_H

#include <stddef.h>
#include <stdint.h>

#define FONT_W 6   /* advance and cell width, pixels */
#define FONT_H 13  /* cell height, pixels (ascent 11, descent 2) */

#define FONT_REPLACEMENT 0xFFFDu

/* Row y (0 = top) of the glyph for ASCII character c: bit x set = pixel x
 * lit (bit 0 is the leftmost column).  Characters outside 32..126 draw as
 * '?'. */
uint8_t font_row(unsigned char c, int y);

/* Decodes the code point at s into *cp (FONT_REPLACEMENT for an
 * ill-formed sequence, see above); returns the bytes it took, 0 at the
 * terminating NUL. */
int font_utf8_next(const char *s, uint32_t *cp);

/* Glyphs are numbered 0 .. FONT_NGLYPHS-1 (0 is the space): a base shape
 * and an accent.  font_next reads one cell of s (one character with its
 * combining marks and joiners) into *glyph and returns the bytes it took,
 * 0 at the end; font_glyph gives a glyph's rows (bit x = pixel x). */
int font_next(const char *s, int *glyph);
void font_glyph(int glyph, uint8_t rows[FONT_H]);
int font_glyph_count(void);

/* Cells s takes (characters, not bytes). */
int font_text_cells(const char *s);
/* Width in pixels of s drawn at integer scale (newlines not handled). */
int font_text_width(const char *s, int scale);
/* Bytes of s that hold its first `cells` cells (all of s when shorter):
 * a cut there splits no character. */
size_t font_cells_bytes(const char *s, int cells);

/* Copies s into dst (cap >= 1 bytes) cut to at most `cells` cells and to
 * what cap holds, never inside a character.  When cut and cells leaves
 * room for more than `more` (e.g. ".." or "...", may be NULL), the last
 * cells are replaced by it.  Returns 1 when s was cut, 0 when whole. */
int font_fit(char *dst, size_t cap, const char *s, int cells,
             const char *more);

/* Draws s with its top-left corner at (x, y) into a packed 8-bit RGB
 * image of w x h pixels (stride 3*w), clipped to the image.  scale >= 1. */
void font_draw_rgb(uint8_t *rgb, int w, int h, int x, int y, const char *s,
                   int scale, uint32_t color /* 0xRRGGBB */);

#endif
