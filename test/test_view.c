/* The viewer: `view --screenshot` works with no display (dummy video
 * driver), scripted keys change what is drawn, bad input fails cleanly,
 * and under Xvfb a real window takes key presses and a screenshot. */
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "emu/out/font.h"
#include "emu/view/layout.h"
#include "firmware/isa.h"
#include "test/harness.h"


/* Pixels of the given colour. */
static long count_rgb(const unsigned char *p, int w, int h, unsigned c)
{
    long n = 0;
    for (long i = 0; i < (long)w * h; i++)
        n += ((unsigned)p[3 * i] << 16 | (unsigned)p[3 * i + 1] << 8 | p[3 * i + 2]) == c;
    return n;
}

/* Is s drawn at (x, y) in colour c with the bitmap font?  Every glyph
 * pixel must be c and every other pixel of the cell must not be. */
static int has_text(const unsigned char *p, int w, int h, int x, int y, const char *s,
                    unsigned c)
{
    for (int i = 0; s[i]; i++)
        for (int gy = 0; gy < FONT_H; gy++)
            for (int gx = 0; gx < FONT_W; gx++) {
                int px = x + i * FONT_W + gx, py = y + gy;
                if (px < 0 || py < 0 || px >= w || py >= h)
                    return 0;
                const unsigned char *q = p + 3 * ((long)py * w + px);
                unsigned v = (unsigned)q[0] << 16 | (unsigned)q[1] << 8 | q[2];
                int bit = font_row((unsigned char)s[i], gy) >> gx & 1;
                if (bit != (v == c))
                    return 0;
            }
    return 1;
}

static long count_rgb_in(const unsigned char *p, int w, int x0, int y0, int x1, int y1,
                         unsigned c)
{
    long n = 0;
    for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++) {
            const unsigned char *q = p + 3 * ((long)y * w + x);
            n += ((unsigned)q[0] << 16 | (unsigned)q[1] << 8 | q[2]) == c;
        }
    return n;
}

/* The viewer's layout (emu/view/layout.h).  The layer lane sits between
 * the axis and the core rows: a timeline with events has its rows V_LANE
 * lower. */
enum { V_HEADER = VIEW_HEADER, V_AXIS = VIEW_AXIS, V_FOOTER = VIEW_FOOTER };
enum { V_LABELS = VIEW_LABELS, V_LANE = VIEW_LANE };
#define C_INK ((unsigned)VIEW_INK)
#define C_MUTED ((unsigned)VIEW_MUTED)

/* Takes a screenshot; returns the pixels (caller frees) or NULL. */
static unsigned char *shot(th_ctx *t, th_cmd_result *r, const char *args, int *w, int *h)
{
    char path[400];
    unsigned char *p = NULL;
    snprintf(path, sizeof path, "%s/view_reg.png", th_tmpdir());
    th_run(r, "env -u DISPLAY -u WAYLAND_DISPLAY -u SDL_VIDEODRIVER %s view %s --screenshot %s",
           th_bin(), args, path);
    if (!TH_CHECKF(t, r->status == 0, "view %s: status %d: %s", args, r->status, r->err))
        return NULL;
    if (!TH_CHECK(t, th_png_rgb(path, w, h, &p)))
        return NULL;
    return p;
}

/* What the viewer must get right (docs/VIEWER.md), each checked on a frame. */
static void regressions(th_ctx *t, th_cmd_result *r)
{
    int w, h;
    unsigned char *p;
    char args[600], rep[400];

    th_case(t, "v3-2048: identical cores are one row, labels never overlap");
    if (!th_asan()) {
        p = shot(t, r, "traces/resnet50-224-v3-2048.json --size 640x400", &w, &h);
        if (p) {
            int top = V_HEADER + V_AXIS + 2 + V_LANE;
            TH_CHECK(t, has_text(p, w, h, 6, top, "core 0", C_INK));
            TH_CHECK(t, has_text(p, w, h, 6, top + 16, "cores 1-2047", C_INK));
            /* nothing below the two rows */
            long below = 0;
            for (int y = top + 2 * 16 + 4; y < h - V_FOOTER - 2; y++)
                below += count_rgb_in(p, w, V_LABELS + 2, y, V_LABELS + 3, y + 1, 0x0072B2);
            TH_CHECKF(t, below == 0, "%ld MXU pixels below the two rows", below);
            TH_CHECK(t, has_text(p, w, h, 10, 21, "batch 65536, 2048 replicas x 1 core",
                                 0xB0BEC5));
            free(p);
        }
        p = shot(t, r, "traces/resnet50-224-v3-2048.json --size 640x400 --script u", &w, &h);
        if (p) {
            /* "same as 0" (red) and "chip ..." (grey) on lines of their own */
            int both = 0;
            for (int y = V_HEADER + V_AXIS; y < h - V_FOOTER; y++)
                both += count_rgb_in(p, w, 0, y, 84, y + 1, 0xA03000) > 0 &&
                        count_rgb_in(p, w, 0, y, 84, y + 1, C_MUTED) > 0;
            TH_CHECKF(t, both == 0, "%d pixel rows hold both labels", both);
            TH_CHECK(t, count_rgb_in(p, w, 0, 0, 84, h, 0xA03000) > 20);
            free(p);
        }
        p = shot(t, r, "traces/resnet50-224-v3-2048.json --script 3", &w, &h);
        if (p) {
            TH_CHECK(t, has_text(p, w, h, 20, V_HEADER + 14 + 26 + 6 + FONT_H + 4,
                                 "2048 cores drawn as 1 bar:", 0xA03000));
            free(p);
        }
    }

    th_case(t, "spatially partitioned: replicas copying replica 0 are one row");
    /* RetinaNet 2560 on v3-64: 8 replicas x 8 shards, torus block
     * placement (replica 0 is cores 0-3 and 16-19). */
    p = shot(t, r, "traces/reference/retinanet-2560-v3-64.json --script 'move:40,220'", &w, &h);
    if (p) {
        int top = V_HEADER + V_AXIS + 2 + V_LANE;
        static const int rep0[8] = {0, 1, 2, 3, 16, 17, 18, 19};
        for (int k = 0; k < 8; k++) {
            char lab[32];
            snprintf(lab, sizeof lab, "core %d", rep0[k]);
            TH_CHECKF(t, has_text(p, w, h, 6, top + 16 * k, lab, C_INK), "row %d: %s", k, lab);
        }
        TH_CHECK(t, has_text(p, w, h, 6, top + 16 * 8, "replicas 1-7", C_INK));
        TH_CHECK(t, has_text(p, w, h, 6 + 12 * FONT_W, top + 16 * 8, " = 0", 0xA03000));
        long below = 0;
        for (int y = top + 9 * 16 + 4; y < h - V_FOOTER - 2; y++)
            below += count_rgb_in(p, w, V_LABELS + 2, y, V_LABELS + 3, y + 1, 0x0072B2);
        TH_CHECKF(t, below == 0, "%ld MXU pixels below the nine rows", below);
        /* hovering the label says what the row stands for */
        TH_CHECK(t, has_text(p, w, h, 8, h - V_FOOTER + 6,
                             "replicas 1-7 (56 cores): same as replica 0", C_INK));
        TH_CHECK(t, has_text(p, w, h, 8, h - V_FOOTER + 22, "cores 4-15, 20-63", C_MUTED));
        free(p);
    }
    p = shot(t, r, "traces/reference/retinanet-2560-v3-64.json --script u", &w, &h);
    if (p) {
        int y8 = V_HEADER + V_AXIS + 2 + V_LANE + 8 * (14 + 4 * 12 + 6);
        TH_CHECK(t, has_text(p, w, h, 6, y8, "replicas 1-7", C_INK));
        TH_CHECK(t, has_text(p, w, h, 6, y8 + 13, "= replica 0", 0xA03000));
        TH_CHECK(t, has_text(p, w, h, 6, y8 + 25, "56 cores", C_MUTED));
        free(p);
    }
    p = shot(t, r, "traces/small/tiny3d-p4.json --size 640x400", &w, &h);
    if (p) {
        int top = V_HEADER + V_AXIS + 2 + V_LANE;
        TH_CHECK(t, has_text(p, w, h, 6, top + 16 * 3, "core 3", C_INK));
        TH_CHECK(t, has_text(p, w, h, 6, top + 16 * 4, "replica 1", C_INK));
        long below = 0;
        for (int y = top + 5 * 16 + 4; y < h - V_FOOTER - 2; y++)
            below += count_rgb_in(p, w, V_LABELS + 2, y, V_LABELS + 3, y + 1, 0x0072B2);
        TH_CHECKF(t, below == 0, "%ld MXU pixels below the five rows", below);
        free(p);
    }

    th_case(t, "time axis: unit from the window, last label inside, offsets deep in");
    p = shot(t, r, "traces/small/tiny2d.json --size 640x400", &w, &h);
    if (p) {
        TH_CHECK(t, has_text(p, w, h, 6, V_HEADER + 5, "time (us)", C_INK));
        TH_CHECK(t, count_rgb_in(p, w, w - 10, V_HEADER, w, V_HEADER + V_AXIS, C_INK) == 0);
        /* the last tick is labelled, inside the plot: the step's length
         * decides which tick is last (70 us of tiny2d's 76 us step),
         * so it is found by its grid line in the empty plot below the rows,
         * and must lie in the plot's right half */
        int yg = h - V_FOOTER - 10, xl = -1;
        for (int x = V_LABELS; x < w; x++)
            if (count_rgb_in(p, w, x, yg, x + 1, yg + 1, VIEW_GRID))
                xl = x;
        TH_CHECKF(t, xl > (V_LABELS + w - 10) / 2 && xl <= w - 10, "last grid line at x %d", xl);
        int lx0 = xl - 4 * FONT_W, lx1 = xl + 4 * FONT_W < w - 10 ? xl + 4 * FONT_W : w - 10;
        TH_CHECKF(t, xl > 0 && count_rgb_in(p, w, lx0, V_HEADER, lx1, V_HEADER + V_AXIS, C_INK) > 10,
                  "no label at the last tick, x %d", xl);
        free(p);
    }
    p = shot(t, r, "--demo --size 640x400 --script 'move:600,80 z z z z z z z z z z z z z z z z'",
             &w, &h);
    if (p) {
        TH_CHECK(t, has_text(p, w, h, 6, V_HEADER + 5, "us after 938.2 ms", C_INK));
        TH_CHECK(t, count_rgb_in(p, w, w - 10, V_HEADER, w, V_HEADER + V_AXIS, C_INK) == 0);
        free(p);
    }

    th_case(t, "deep zoom: an event far wider than the window still fills it");
    /* 34 zooms of the demo's 938 ms step: a window of tens of ps, whose
     * events start and end 1e10 pixels away, past an int (converted to
     * int, they would be drawn as one column at the plot's left edge) */
    {
        char zs[200] = "--demo --size 640x400 --script 'move:400,90";
        for (int k = 0; k < 34; k++)
            strcat(zs, " z");
        strcat(zs, "'");
        p = shot(t, r, zs, &w, &h);
        if (p) {
            /* the first core row: painted across the plot, not one column */
            long bg = 0, cols = 0;
            int y = V_HEADER + V_AXIS + 2 + V_LANE + 8;
            for (int x = V_LABELS + 2; x < w - 12; x++) {
                cols++;
                bg += count_rgb_in(p, w, x, y, x + 1, y + 1, 0xF7F7F7);
            }
            TH_CHECKF(t, bg == 0, "%ld of %ld columns of core 0's row are "
                                  "background", bg, cols);
            free(p);
        }
    }

    th_case(t, "footer: the opcode by name, never a bare number");
    p = shot(t, r, "--demo --size 1024x640 --script 'move:400,90'", &w, &h);
    if (p) {
        int named = 0;
        for (int op = 0; op < FW_OP_COUNT; op++)
            named |= has_text(p, w, h, 8, h - V_FOOTER + 22, fw_op_name((fw_op)op), C_MUTED);
        TH_CHECK(t, named);
        free(p);
    }

    th_case(t, "'?' (typed text) opens help; help fits 640x400; bars legend keeps mxu");
    p = shot(t, r, "--demo --size 640x400 --script '?'", &w, &h);
    if (p) {
        const unsigned char *q = p + 3 * (w / 2);
        TH_CHECK(t, !(q[0] == 255 && q[1] == 255 && q[2] == 255));
        TH_CHECK(t, count_rgb_in(p, w, 0, 0, w, h, 0xFFFFFF) > 150 * 300);
        free(p);
    }
    p = shot(t, r, "--demo --size 640x400 --script 3", &w, &h);
    if (p) {
        /* the legend column: six swatches including mxu */
        TH_CHECK(t, count_rgb_in(p, w, w - 185, V_HEADER, w, h - V_FOOTER, 0x0072B2) >= 14 * 14);
        free(p);
    }

    th_case(t, "a report opens on the bars; the torus outlines the hovered chip");
    snprintf(rep, sizeof rep, "%s/view_rep.json", th_tmpdir());
    th_run(r, "%s run traces/small/tiny2d.json --report %s", th_bin(), rep);
    if (TH_CHECKF(t, r->status == 0, "run: %s", r->err)) {
        snprintf(args, sizeof args, "%s --size 640x400", rep);
        p = shot(t, r, args, &w, &h);
        if (p) {
            TH_CHECK(t, count_rgb(p, w, h, 0x0072B2) > w * h / 50);
            TH_CHECK(t, !has_text(p, w, h, 6, V_HEADER + 5, "time (", C_INK));
            free(p);
        }
        long black[2] = {0, 0};
        for (int k = 0; k < 2; k++) {
            /* the pointer off the chips, then on chip 0 */
            snprintf(args, sizeof args, "%s --script '2 %s'", rep,
                     k ? "move:300,300" : "move:5,700");
            p = shot(t, r, args, &w, &h);
            if (p) {
                black[k] = count_rgb(p, w, h, 0x000000);
                free(p);
            }
        }
        TH_CHECKF(t, black[1] > black[0] + 40, "outline: %ld vs %ld black pixels", black[1],
                  black[0]);
    }

    th_case(t, "--frames times the scripted view");
    snprintf(rep, sizeof rep, "%s/view_frames.png", th_tmpdir());
    th_run(r, "env -u DISPLAY -u WAYLAND_DISPLAY -u SDL_VIDEODRIVER %s view --demo --frames 3 "
              "--script 'u z z' --screenshot %s", th_bin(), rep);
    TH_CHECKF(t, r->status == 0 && strstr(r->err, "with unit rows"), "status %d: %s", r->status,
              r->err);
}

void th_suite_view(th_ctx *t)
{
    th_cmd_result *r = malloc(sizeof *r);
    char a[400], b[400];
    int w = 0, h = 0, w2 = 0, h2 = 0;
    unsigned char *pa = NULL, *pb = NULL;
    const char *env = "env -u DISPLAY -u WAYLAND_DISPLAY -u SDL_VIDEODRIVER";

    th_case(t, "--screenshot with no display writes the frame as PNG");
    snprintf(a, sizeof a, "%s/view_demo.png", th_tmpdir());
    th_run(r, "%s %s view --demo --screenshot %s --size 1024x640", env, th_bin(), a);
    TH_CHECKF(t, r->status == 0, "status %d: %s", r->status, r->err);
    if (TH_CHECK(t, th_png_rgb(a, &w, &h, &pa))) {
        TH_CHECK(t, w == 1024 && h == 640);
        /* The timeline of a compute-bound demo is mostly MXU blue. */
        long blue = count_rgb(pa, w, h, 0x0072B2);
        TH_CHECKF(t, blue > w * h / 10, "MXU pixels %ld", blue);
    }

    th_case(t, "scripted keys: zoom and the torus panel change the frame");
    snprintf(b, sizeof b, "%s/view_zoom.png", th_tmpdir());
    th_run(r, "%s %s view --demo --screenshot %s --size 1024x640 --script 'u z z z right'",
           env, th_bin(), b);
    TH_CHECKF(t, r->status == 0, "status %d: %s", r->status, r->err);
    if (pa && TH_CHECK(t, th_png_rgb(b, &w2, &h2, &pb)) && w2 == w && h2 == h) {
        long d = th_rgb_diff(pa, pb, w, 0, 0, w, h);
        TH_CHECKF(t, d > w * h / 20, "zoomed frame differs in %ld pixels", d);
    }
    free(pb);
    pb = NULL;
    th_run(r, "%s %s view --demo --screenshot %s --size 1024x640 --script 'tab'", env,
           th_bin(), b);
    TH_CHECKF(t, r->status == 0, "status %d: %s", r->status, r->err);
    if (pa && TH_CHECK(t, th_png_rgb(b, &w2, &h2, &pb))) {
        /* Torus: chips are drawn in the chip colour and no MXU timeline. */
        TH_CHECK(t, count_rgb(pb, w2, h2, 0x455A64) > 1000);
        TH_CHECK(t, count_rgb(pb, w2, h2, 0x0072B2) < w * h / 100);
    }
    free(pb);
    pb = NULL;

    th_case(t, "help overlay and bar panel render; v3-2048 demo renders");
    th_run(r, "%s %s view --demo --screenshot %s --script '3 h'", env, th_bin(), b);
    TH_CHECKF(t, r->status == 0, "status %d: %s", r->status, r->err);
    if (!th_asan()) {
        th_run(r, "%s %s view --demo-2048 --screenshot %s --script 'u z right down'", env,
               th_bin(), b);
        TH_CHECKF(t, r->status == 0, "status %d: %s", r->status, r->err);
    }

    th_case(t, "bad input: missing file, unknown key, bad size, no partial PNG");
    snprintf(b, sizeof b, "%s/view_bad.png", th_tmpdir());
    th_run(r, "%s %s view %s/nonexistent.json --screenshot %s", env, th_bin(), th_tmpdir(), b);
    TH_CHECKF(t, r->status == 2 || r->status == 4, "status %d", r->status);
    TH_CHECK(t, strstr(r->err, "tpuemu: error:") != NULL);
    th_run(r, "%s %s view --demo --screenshot %s --script 'nosuchkey'", env, th_bin(), b);
    TH_CHECK(t, r->status == 2 && strstr(r->err, "nosuchkey"));
    th_run(r, "%s %s view --demo --size 10x10 --screenshot %s", env, th_bin(), b);
    TH_CHECK(t, r->status == 2);
    TH_CHECK(t, access(b, F_OK) != 0);
    th_run(r, "%s %s view", env, th_bin());
    TH_CHECK(t, r->status == 2);
    /* the screenshot path is checked before anything runs: never the
     * input itself, never a device */
    char in[600];
    snprintf(in, sizeof in, "%s/view_in.json", th_tmpdir());
    th_run(r, "cp traces/small/tiny2d.json %s", in);
    th_run(r, "%s %s view %s --screenshot %s", env, th_bin(), in, in);
    TH_CHECKF(t, r->status == 2 && strstr(r->err, "replace the input"),
              "screenshot onto the input: status %d: %s", r->status, r->err);
    th_run(r, "cmp -s traces/small/tiny2d.json %s", in);
    TH_CHECK(t, r->status == 0);
    th_run(r, "%s %s view %s --screenshot /dev/null", env, th_bin(), in);
    TH_CHECKF(t, r->status == 2, "screenshot onto /dev/null: status %d",
              r->status);
    th_run(r, "test -c /dev/null");
    TH_CHECK(t, r->status == 0);

    th_case(t, "under Xvfb: a real window takes key presses and a screenshot");
    th_run(r, "command -v xvfb-run && command -v Xvfb");
    if (r->status != 0) {
        printf("     skipped: xvfb-run/Xvfb not installed (apt-get install xvfb)\n");
    } else {
        snprintf(b, sizeof b, "%s/view_xvfb.png", th_tmpdir());
        /* Under ASan, SDL's X11 back end leaks inside libdbus (a system
         * library, not ours): leak checks stay on for every other test. */
        th_run(r,
               "env -u SDL_VIDEODRIVER %s xvfb-run -a -s '-screen 0 1280x1024x24' "
               "%s view --demo --size 1024x640 --screenshot %s --script 'z z right tab shift+tab'",
               th_asan() ? "ASAN_OPTIONS=detect_leaks=0" : "", th_bin(), b);
        TH_CHECKF(t, r->status == 0, "status %d: %s", r->status, r->err);
        if (TH_CHECK(t, th_png_rgb(b, &w2, &h2, &pb))) {
            TH_CHECK(t, w2 == 1024 && h2 == 640);
            /* tab then shift+tab: back on the timeline, zoomed in. */
            TH_CHECK(t, count_rgb(pb, w2, h2, 0x0072B2) > w2 * h2 / 10);
            if (pa && w2 == w && h2 == h)
                TH_CHECKF(t, th_rgb_diff(pa, pb, w, 0, 0, w, h) > w * h / 50,
                          "the zoomed frame looks like the unzoomed one");
        }
        free(pb);
        pb = NULL;
    }
    free(pa);
    regressions(t, r);
    free(r);
}
