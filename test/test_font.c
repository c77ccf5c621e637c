/* The font's UTF-8 handling: one cell per character, one replacement per
 * ill-formed sequence, no read past the end, cuts between characters,
 * accents drawn ("ü" is one accented glyph, not "??"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/out/font.h"
#include "test/harness.h"

/* s in a heap block of exactly strlen + 1 bytes: under `make asan` a read
 * past the NUL is a heap overflow, not a read into the next literal. */
static char *exact(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p)
        memcpy(p, s, n);
    return p;
}

/* Glyph of the first cell of s. */
static int glyph(const char *s)
{
    int g = -1;
    font_next(s, &g);
    return g;
}

static int same_rows(int g1, int g2)
{
    uint8_t a[FONT_H], b[FONT_H];
    font_glyph(g1, a);
    font_glyph(g2, b);
    return memcmp(a, b, FONT_H) == 0;
}

/* Lit pixels of glyph g in rows y0..y1. */
static int ink(int g, int y0, int y1)
{
    uint8_t r[FONT_H];
    font_glyph(g, r);
    int n = 0;
    for (int y = y0; y <= y1; y++)
        for (int x = 0; x < 8; x++)
            n += r[y] >> x & 1;
    return n;
}

/* Every code point of s, decoded; returns their number (at most cap). */
static int decode_all(const char *s, uint32_t *cp, int cap)
{
    int n = 0, k;
    uint32_t c;
    while ((k = font_utf8_next(s, &c)) > 0) {
        if (n < cap)
            cp[n] = c;
        n++;
        s += k;
    }
    return n;
}

void th_suite_font(th_ctx *t)
{
    th_case(t, "width counts characters: \"ü雪\" is 2 cells, 12 pixels");
    TH_CHECK(t, font_text_cells("\xC3\xBC\xE9\x9B\xAA") == 2);
    TH_CHECK(t, font_text_width("\xC3\xBC\xE9\x9B\xAA", 1) == 2 * FONT_W);
    TH_CHECK(t, font_text_width("\xC3\xBC\xE9\x9B\xAA", 2) == 4 * FONT_W);
    TH_CHECK(t, font_text_cells("tiny \xC3\xBC \xE9\x9B\xAA") == 8);
    TH_CHECK(t, font_text_cells("") == 0 && font_text_cells(NULL) == 0);
    TH_CHECK(t, font_text_width("abc", 2) == 3 * FONT_W * 2);

    th_case(t, "UTF-8 decodes to code points (2, 3 and 4 bytes)");
    uint32_t cp[16];
    int n = decode_all("\xC3\xA9\xE9\x9B\xAA\xF0\x9F\x99\x82x", cp, 16);
    TH_CHECKF(t, n == 4 && cp[0] == 0xE9 && cp[1] == 0x96EA && cp[2] == 0x1F642 &&
                     cp[3] == 'x',
              "%d code points: %x %x %x %x", n, cp[0], cp[1], cp[2], cp[3]);

    th_case(t, "ill-formed UTF-8: one replacement each, no read past the end");
    static const struct {
        const char *s;
        int cells; /* characters drawn, each replacement one */
        int repl;  /* of which replacements */
    } bad[] = {
        {"\x80", 1, 1},                 /* lone continuation byte */
        {"a\x80\x80z", 4, 2},           /* two stray continuation bytes */
        {"\xC0\xAF", 1, 1},             /* overlong '/' */
        {"\xC1\xBF", 1, 1},             /* overlong DEL */
        {"\xE0\x80\xAF", 1, 1},         /* overlong, 3 bytes */
        {"\xF0\x80\x80\xAF", 1, 1},     /* overlong, 4 bytes */
        {"\xED\xA0\x80", 1, 1},         /* a UTF-16 surrogate */
        {"\xF4\x90\x80\x80", 1, 1},     /* past U+10FFFF */
        {"\xFF\xFE", 2, 2},             /* bytes that start nothing */
        {"ab\xE2\x82", 3, 1},           /* cut short at the end */
        {"ab\xF0\x9F\x99", 3, 1},       /* cut short at the end */
        {"\xC3", 1, 1},                 /* a lead byte and the end */
        {"\xE9\x9Bz", 2, 1},            /* cut short before an ASCII letter */
        {"x\x80\xC0\xAFy\xE2\x82", 5, 3},
    };
    int repl_glyph = glyph("\xEF\xBF\xBD");
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *s = exact(bad[i].s);
        if (!TH_CHECK(t, s != NULL))
            break;
        int cells = 0, repl = 0, g, k;
        for (const char *p = s; (k = font_next(p, &g)) > 0; p += k) {
            cells++;
            repl += g == repl_glyph;
        }
        TH_CHECKF(t, cells == bad[i].cells && repl == bad[i].repl,
                  "case %zu: %d cells (want %d), %d replacements (want %d)", i,
                  cells, bad[i].cells, repl, bad[i].repl);
        TH_CHECK(t, font_text_cells(s) == bad[i].cells);
        uint32_t c;
        int total = 0, step;
        for (const char *p = s; (step = font_utf8_next(p, &c)) > 0; p += step)
            total += step;
        TH_CHECKF(t, total == (int)strlen(s), "case %zu: decoded %d of %zu bytes",
                  i, total, strlen(s));
        /* drawing and cutting it touch nothing past the end either */
        uint8_t img[3 * 64 * 13];
        font_draw_rgb(img, 64, 13, 0, 0, s, 1, 0x123456);
        char out[8];
        for (int c2 = 0; c2 < 4; c2++)
            font_fit(out, sizeof out, s, c2, "..");
        free(s);
    }
    TH_CHECK(t, repl_glyph != glyph("?") && !same_rows(repl_glyph, glyph("\xE9\x9B\xAA")));
    TH_CHECK(t, glyph("\x01") == repl_glyph && glyph("\x7F") == repl_glyph);

    th_case(t, "cutting never splits a character; the marker replaces the last cells");
    /* 1-, 2-, 3- and 4-byte characters and a decomposed u-umlaut */
    const char *mix = "a\xC3\xA9\xE9\x9B\xAA\xF0\x9F\x99\x82u\xCC\x88z\xC5\x82\xE2\x80\x94!";
    int mc = font_text_cells(mix);
    TH_CHECK(t, mc == 9);
    int broken = 0, toolong = 0, notprefix = 0;
    for (int cells = 0; cells <= mc + 1; cells++)
        for (size_t cap = 1; cap <= strlen(mix) + 2; cap++)
            for (int m = 0; m < 3; m++) {
                const char *more = m == 0 ? NULL : m == 1 ? ".." : "...";
                char out[64];
                int cut = font_fit(out, cap, mix, cells, more);
                size_t ol = strlen(out);
                toolong += ol >= cap || font_text_cells(out) > cells;
                /* every cut lands on a character boundary of mix */
                size_t keep = ol;
                if (cut && more && ol >= strlen(more) &&
                    strcmp(out + ol - strlen(more), more) == 0)
                    keep = ol - strlen(more);
                notprefix += memcmp(out, mix, keep) != 0;
                int ok = 0;
                for (int c = 0; c <= mc; c++)
                    ok |= font_cells_bytes(mix, c) == keep;
                broken += !ok;
                int g, k;
                for (const char *p = out; (k = font_next(p, &g)) > 0; p += k)
                    broken += g == repl_glyph;
                if (!cut)
                    notprefix += strcmp(out, mix) != 0;
            }
    TH_CHECKF(t, !broken && !toolong && !notprefix,
              "%d split or ill-formed, %d too long, %d not a prefix", broken,
              toolong, notprefix);
    char out[64];
    TH_CHECK(t, font_fit(out, sizeof out, mix, 5, "..") == 1 &&
                    strcmp(out, "a\xC3\xA9\xE9\x9B\xAA..") == 0);
    TH_CHECK(t, font_fit(out, sizeof out, mix, 9, "..") == 0 && strcmp(out, mix) == 0);
    TH_CHECK(t, font_fit(out, sizeof out, mix, 2, "...") == 1 && strcmp(out, "a\xC3\xA9") == 0);
    /* 4 bytes of room: "a" and "é" (3 bytes), not half of 雪 */
    TH_CHECK(t, font_fit(out, 5, mix, 9, NULL) == 1 && strcmp(out, "a\xC3\xA9") == 0);
    TH_CHECK(t, font_cells_bytes(mix, 3) == 6 && font_cells_bytes(mix, 100) == strlen(mix));

    th_case(t, "accented letters: base letter plus accent, above or below");
    static const struct {
        const char *acc, *base;
        int below;
    } acc[] = {
        {"\xC3\xA0", "a", 0}, {"\xC3\xA9", "e", 0}, {"\xC3\xB4", "o", 0},
        {"\xC3\xB1", "n", 0}, {"\xC3\xBC", "u", 0}, {"\xC3\xA5", "a", 0},
        {"\xC3\xA7", "c", 1}, {"\xC3\x89", "E", 0}, {"\xC3\x9C", "U", 0},
        {"\xC3\x85", "A", 0}, {"\xC3\x87", "C", 1}, {"\xC4\x8D", "c", 0},
        {"\xC5\x91", "o", 0}, {"\xC4\x85", "a", 1}, {"\xC3\xAD", "i", 0},
        {"\xC4\x81", "a", 0}, {"\xC4\x9F", "g", 0}, {"\xC5\xBB", "Z", 0},
    };
    for (size_t i = 0; i < sizeof acc / sizeof acc[0]; i++) {
        /* above: pixels over the base letter's top row, where the base
         * letter has none (a capital is pressed down to make room) */
        int ga = glyph(acc[i].acc), gb = glyph(acc[i].base), top = 0;
        while (top < FONT_H && !ink(gb, top, top))
            top++;
        int extra = acc[i].below ? ink(ga, 11, 12) - ink(gb, 11, 12)
                                 : top > 0 ? ink(ga, 0, top - 1) : 0;
        TH_CHECKF(t, !same_rows(ga, gb) && extra > 0,
                  "%s: %d more pixels than %s where the accent goes",
                  acc[i].acc, extra, acc[i].base);
    }
    /* i loses its dot under an accent: one mark, not a dot and a mark */
    TH_CHECK(t, ink(glyph("\xC3\xAD"), 0, 4) == 2 && ink(glyph("i"), 0, 4) == 1);
    int box = glyph("\xE9\x9B\xAA"), blanks = 0, boxes = 0;
    for (uint32_t c = 0xC0; c < 0x180; c++) {
        char s[3] = {(char)(0xC0 | c >> 6), (char)(0x80 | (c & 0x3F)), 0};
        int g = glyph(s);
        blanks += ink(g, 0, FONT_H - 1) == 0;
        boxes += same_rows(g, box) || g == repl_glyph;
    }
    TH_CHECKF(t, blanks == 0 && boxes == 0,
              "U+00C0..U+017F: %d blank, %d box or replacement", blanks, boxes);
    TH_CHECK(t, !same_rows(glyph("\xC3\x9F"), glyph("B")) &&   /* ß */
                    !same_rows(glyph("\xC3\xB8"), glyph("o")) && /* ø */
                    !same_rows(glyph("\xC3\xA6"), box));         /* æ */

    th_case(t, "combining accents, joiners and flags: one cell per character");
    TH_CHECK(t, font_text_cells("u\xCC\x88") == 1);
    TH_CHECK(t, glyph("u\xCC\x88") == glyph("\xC3\xBC"));
    TH_CHECK(t, font_text_cells("\xCC\x81") == 1); /* an accent alone */
    /* man, ZWJ, woman, ZWJ, girl: one family, one box */
    TH_CHECK(t, font_text_cells("\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9"
                                "\xE2\x80\x8D\xF0\x9F\x91\xA7") == 1);
    TH_CHECK(t, font_text_cells("\xF0\x9F\x87\xA9\xF0\x9F\x87\xAA") == 1); /* DE flag */
    TH_CHECK(t, font_text_cells("\xE2\x9D\xA4\xEF\xB8\x8F") == 1);         /* heart + VS16 */
    TH_CHECK(t, glyph("\xF0\x9F\x99\x82") == box && glyph("\xE9\x9B\xAA") == box);
    TH_CHECK(t, glyph(" ") == 0 && font_glyph_count() > 95);
}
