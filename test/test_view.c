/* The viewer: `view --screenshot` works with no display (dummy video
 * driver), scripted keys change what is drawn, bad input fails cleanly,
 * and under Xvfb a real window takes key presses and a screenshot. */
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test/harness.h"

static int png_rgb(const char *path, int *w, int *h, unsigned char **rgb)
{
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_file(&im, path))
        return 0;
    im.format = PNG_FORMAT_RGB;
    *w = (int)im.width;
    *h = (int)im.height;
    *rgb = malloc(PNG_IMAGE_SIZE(im));
    if (!*rgb || !png_image_finish_read(&im, NULL, *rgb, 0, NULL)) {
        free(*rgb);
        *rgb = NULL;
        png_image_free(&im);
        return 0;
    }
    return 1;
}

/* Pixels of the given colour. */
static long count_rgb(const unsigned char *p, int w, int h, unsigned c)
{
    long n = 0;
    for (long i = 0; i < (long)w * h; i++)
        n += ((unsigned)p[3 * i] << 16 | (unsigned)p[3 * i + 1] << 8 | p[3 * i + 2]) == c;
    return n;
}

static long diff_px(const unsigned char *a, const unsigned char *b, int w, int h)
{
    long n = 0;
    for (long i = 0; i < (long)w * h; i++)
        n += memcmp(a + 3 * i, b + 3 * i, 3) != 0;
    return n;
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
    if (TH_CHECK(t, png_rgb(a, &w, &h, &pa))) {
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
    if (pa && TH_CHECK(t, png_rgb(b, &w2, &h2, &pb)) && w2 == w && h2 == h) {
        long d = diff_px(pa, pb, w, h);
        TH_CHECKF(t, d > w * h / 20, "zoomed frame differs in %ld pixels", d);
    }
    free(pb);
    pb = NULL;
    th_run(r, "%s %s view --demo --screenshot %s --size 1024x640 --script 'tab'", env,
           th_bin(), b);
    TH_CHECKF(t, r->status == 0, "status %d: %s", r->status, r->err);
    if (pa && TH_CHECK(t, png_rgb(b, &w2, &h2, &pb))) {
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
        if (TH_CHECK(t, png_rgb(b, &w2, &h2, &pb))) {
            TH_CHECK(t, w2 == 1024 && h2 == 640);
            /* tab then shift+tab: back on the timeline, zoomed in. */
            TH_CHECK(t, count_rgb(pb, w2, h2, 0x0072B2) > w2 * h2 / 10);
            if (pa && w2 == w && h2 == h)
                TH_CHECKF(t, diff_px(pa, pb, w, h) > w * h / 50,
                          "the zoomed frame looks like the unzoomed one");
        }
        free(pb);
        pb = NULL;
    }
    free(pa);
    free(r);
}
