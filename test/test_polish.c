/* Findings of probe s5b (issue 7): check's verdict at exactly the
 * tolerance, its notes comparing meaning rather than text, the tolerance's
 * range and digits; an output path that is a pipe says so; the viewer's
 * header shows --freeze and --set; sweep charts tick counts in whole
 * numbers and show seconds in a readable unit. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "emu/out/chart.h"
#include "emu/out/outfile.h"
#include "emu/rfile.h"
#include "test/harness.h"

/* Eight identical cores on v3-8, every one stepping in step_s (all mxu). */
static void make_flat(emu_result *r, double step_s)
{
    const double cat[CAT_COUNT] = {[CAT_MXU] = step_s};
    th_result_make(r, "flat", "v3-8", 8, 1, 8, cat, NULL);
}

static void save_flat(th_ctx *t, double step_s, const char *name, char *path,
                      size_t cap)
{
    emu_result r;
    make_flat(&r, step_s);
    th_result_save(t, &r, name, path, cap);
    emu_result_free(&r);
}

/* A report like make_flat's with overrides (n pairs) and a freeze list. */
static void save_whatif(th_ctx *t, const char *name, char *path, size_t cap,
                        const char *const kv[][2], int n, const char *freeze)
{
    emu_result r;
    make_flat(&r, 1e-3);
    th_result_overrides(&r, n, kv);
    snprintf(r.freeze, sizeof r.freeze, "%s", freeze ? freeze : "");
    th_result_save(t, &r, name, path, cap);
    emu_result_free(&r);
}

static void check_cases(th_ctx *t)
{
    char b[512], n[512];
    th_cmd_result *c = malloc(sizeof *c);
    if (!c)
        return;

    th_case(t, "check: a slowdown of exactly the tolerance passes whatever "
               "the magnitude (1 -> 1.02 s and 0.1 -> 0.102 s alike), "
               "printed as the tolerance");
    {
        static const double scales[] = {1e-5, 0.1, 1, 30};
        static const double tols[] = {0.02, 0.07, 0.1};
        for (size_t i = 0; i < sizeof scales / sizeof scales[0]; i++)
            for (size_t k = 0; k < sizeof tols / sizeof tols[0]; k++) {
                /* The decimal a user reads as exactly +tol: 1.02, 0.107 */
                char dec[64], tt[32];
                snprintf(dec, sizeof dec, "%.6g", scales[i] * (1 + tols[k]));
                save_flat(t, scales[i], "tb.json", b, sizeof b);
                save_flat(t, strtod(dec, NULL), "tn.json", n, sizeof n);
                snprintf(tt, sizeof tt, "%g", tols[k]);
                th_run(c, "%s check --baseline %s %s --tolerance %s",
                       th_bin(), b, n, tt);
                char want[64];
                snprintf(want, sizeof want, "within %.2f%%", 100 * tols[k]);
                TH_CHECKF(t, c->status == 0 && strstr(c->out, want) &&
                                 !strstr(c->out, "000000"),
                          "%g -> %s at %s: status %d: %s%s", scales[i], dec,
                          tt, c->status, c->out, c->err);
            }
        save_flat(t, 1.0, "tb.json", b, sizeof b);
        save_flat(t, 1.02, "tn.json", n, sizeof n);
        th_run(c, "%s check --baseline %s %s --tolerance 0.02", th_bin(), b,
               n);
        TH_CHECKF(t, c->status == 0 &&
                         strstr(c->out, "(+2.00%; slowest-changing core "
                                        "+2.00%), within 2.00%"),
                  "status %d: %s%s", c->status, c->out, c->err);
    }

    th_case(t, "check: just past the tolerance (+1e-7) is a regression and "
               "reads past it");
    {
        save_flat(t, 1.0, "tb.json", b, sizeof b);
        save_flat(t, 1.0200001, "tn.json", n, sizeof n);
        th_run(c, "%s check --baseline %s %s --tolerance 0.02", th_bin(), b,
               n);
        double shown = 0, tolshown = 0;
        const char *p = strstr(c->out, "(+");
        const char *q = strstr(c->out, "tolerance ");
        TH_CHECKF(t, c->status == 1 && p && q &&
                         sscanf(p, "(+%lf", &shown) == 1 &&
                         sscanf(q, "tolerance %lf", &tolshown) == 1 &&
                         shown > tolshown,
                  "status %d: %s", c->status, c->out);
    }

    th_case(t, "check: --set values compared as numbers (900, 900.0, 9e2), "
               "--freeze lists as sets (c1,bn = bn,c1)");
    {
        static const char *const v900[][2] = {{"hbm.bandwidth_gbs", "900"}};
        static const char *const v9000[][2] = {{"hbm.bandwidth_gbs", "900.0"}};
        static const char *const v9e2[][2] = {{"hbm.bandwidth_gbs", "9e2"}};
        static const char *const v901[][2] = {{"hbm.bandwidth_gbs", "901"}};
        char x[512], y[512];
        save_whatif(t, "w1.json", x, sizeof x, v900, 1, "c1,bn");
        save_whatif(t, "w2.json", y, sizeof y, v9000, 1, "bn,c1");
        th_run(c, "%s check --baseline %s %s", th_bin(), x, y);
        TH_CHECKF(t, c->status == 0 && !strstr(c->out, "note:"),
                  "status %d: %s%s", c->status, c->out, c->err);
        save_whatif(t, "w2.json", y, sizeof y, v9e2, 1, "bn,c1,c1");
        th_run(c, "%s check --baseline %s %s", th_bin(), x, y);
        TH_CHECKF(t, c->status == 0 && !strstr(c->out, "note:"),
                  "status %d: %s%s", c->status, c->out, c->err);
        /* a real difference is still a note, each kind */
        save_whatif(t, "w2.json", y, sizeof y, v901, 1, "c1");
        th_run(c, "%s check --baseline %s %s", th_bin(), x, y);
        TH_CHECKF(t, c->status == 0 &&
                         strstr(c->out, "note: hbm.bandwidth_gbs: BASE 900, "
                                        "NEW 901\n") &&
                         strstr(c->out, "note: --freeze: BASE c1,bn, NEW "
                                        "c1\n"),
                  "status %d: %s%s", c->status, c->out, c->err);
        save_whatif(t, "w2.json", y, sizeof y, v900, 1, "c1,bn,conv*");
        th_run(c, "%s check --baseline %s %s", th_bin(), x, y);
        TH_CHECKF(t, strstr(c->out, "note: --freeze: BASE c1,bn, NEW "
                                    "c1,bn,conv*\n") &&
                         !strstr(c->out, "hbm.bandwidth"),
                  "status %d: %s%s", c->status, c->out, c->err);
    }

    th_case(t, "check: --tolerance -0.1 says [0, 1); 0.999999999 is printed "
               "exactly, not as 100.00%");
    {
        save_flat(t, 1.0, "tb.json", b, sizeof b);
        save_flat(t, 1.02, "tn.json", n, sizeof n);
        th_run(c, "%s check --baseline %s %s --tolerance -0.1", th_bin(), b,
               n);
        TH_CHECKF(t, c->status == 2 && strstr(c->err, "[0, 1)") &&
                         !strstr(c->err, "[0, 1]"),
                  "status %d: %s", c->status, c->err);
        th_run(c, "%s check --baseline %s %s --tolerance 0.999999999",
               th_bin(), b, n);
        TH_CHECKF(t, c->status == 0 && strstr(c->out, "within 99.9999999%") &&
                         strstr(c->out, "(+2.00%;"),
                  "status %d: %s%s", c->status, c->out, c->err);
        th_run(c, "%s check --baseline %s %s --tolerance 0.0199999",
               th_bin(), b, n);
        TH_CHECKF(t, c->status == 1 && strstr(c->out, "tolerance 1.99999%"),
                  "status %d: %s%s", c->status, c->out, c->err);
    }
    free(c);
}

static void outfile_cases(th_ctx *t)
{
    th_cmd_result *c = malloc(sizeof *c);
    if (!c)
        return;
    th_case(t, "--report /dev/stdout into a pipe: refused, saying it is a "
               "pipe and what to do");
    th_run(c, "%s run traces/small/tiny2d.json --report /dev/stdout --quiet "
              "2>&1 | cat",
           th_bin());
    TH_CHECKF(t, strstr(c->out, "/dev/stdout: cannot create: is a pipe "
                                "(standard output into a pipe?)") &&
                     strstr(c->out, "give a file path") &&
                     !strstr(c->out, "does not resolve"),
              "out: %s", c->out);
    free(c);

    th_case(t, "outfile: a pipe by its /proc/self/fd link (a process "
               "substitution) is named as one");
    int fds[2];
    if (pipe(fds) == 0) {
        char p[64];
        tpu_error err = {0};
        snprintf(p, sizeof p, "/proc/self/fd/%d", fds[1]);
        TH_CHECK(t, outfile_check(p, &err) == TPU_ERR_INPUT);
        TH_CHECKF(t, strstr(err.msg, "is a pipe (a process substitution") &&
                         strstr(err.msg, "renamed"),
                  "%s", err.msg);
        close(fds[0]);
        close(fds[1]);
    }

    th_case(t, "rfile: a socket behind a /proc/self/fd link (stdin from a "
               "socket) is named as one, not 'No such device or address'");
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0) {
        char p[64], *text = NULL;
        size_t len = 0;
        tpu_error err = {0};
        snprintf(p, sizeof p, "/proc/self/fd/%d", sv[0]);
        TH_CHECK(t, rfile_read(p, 1 << 20, 0.1, &text, &len, &err) ==
                        TPU_ERR_INPUT);
        TH_CHECKF(t, strstr(err.msg, "a socket, not a file") &&
                         !strstr(err.msg, "No such device"),
                  "%s", err.msg);
        free(text);
        close(sv[0]);
        close(sv[1]);
    }
}

static unsigned char *shot(th_ctx *t, const char *report, const char *png,
                           int *w, int *h)
{
    th_cmd_result *c = malloc(sizeof *c);
    unsigned char *rgb = NULL;
    if (!c)
        return NULL;
    th_run(c, "env -u DISPLAY -u WAYLAND_DISPLAY -u SDL_VIDEODRIVER %s view "
              "%s --screenshot %s --size 640x400",
           th_bin(), report, png);
    TH_CHECKF(t, c->status == 0, "status %d: %s", c->status, c->err);
    if (c->status != 0 || !th_png_rgb(png, w, h, &rgb))
        rgb = NULL;
    free(c);
    return rgb;
}

static void view_cases(th_ctx *t)
{
    th_case(t, "view: --freeze and --set show in the header (only there), "
               "which still fits 640x400");
    static const char *const one[][2] = {{"ici.link_gbs", "10"}};
    static const char *const many[][2] = {
        {"ici.link_gbs", "10"},         {"hbm.bandwidth_gbs", "900"},
        {"mxu.rows", "64"},             {"mxu.cols", "64"},
        {"clock_hz", "700e6"},          {"ici.hop_latency_s", "1e-6"},
        {"hbm.t_rcd_ns", "20"},         {"vpu.alus", "4"}};
    char r0[512], r1[512], r2[512], p0[512], p1[512], p2[512];
    save_whatif(t, "v0.json", r0, sizeof r0, NULL, 0, NULL);
    save_whatif(t, "v1.json", r1, sizeof r1, one, 1, "none");
    save_whatif(t, "v2.json", r2, sizeof r2, many, 8,
                "conv1,bn_conv1,res2a*,res2b*,res2c*,res3a*,res3b*");
    snprintf(p0, sizeof p0, "%s/v0.png", th_tmpdir());
    snprintf(p1, sizeof p1, "%s/v1.png", th_tmpdir());
    snprintf(p2, sizeof p2, "%s/v2.png", th_tmpdir());
    int w0 = 0, h0 = 0, w1 = 0, h1 = 0, w2 = 0, h2 = 0;
    unsigned char *a = shot(t, r0, p0, &w0, &h0);
    unsigned char *b = shot(t, r1, p1, &w1, &h1);
    unsigned char *c = shot(t, r2, p2, &w2, &h2);
    TH_CHECK(t, a && b && c);
    if (a && b && c) {
        TH_CHECK(t, w0 == 640 && h0 == 400 && w1 == 640 && h1 == 400 &&
                        w2 == 640 && h2 == 400);
        /* The header is 40 pixels high; the second line's text starts at
         * y 21.  The panel tabs start at x 404 at this width (four since
         * the layers tab; 432 with three): the text
         * stays left of them. */
        long hd = th_rgb_diff(a, b, 640, 0, 0, 640, 40);
        long hd2 = th_rgb_diff(a, c, 640, 0, 0, 640, 40);
        TH_CHECKF(t, hd > 50 && hd2 > 50, "header differs by %ld, %ld px",
                  hd, hd2);
        TH_CHECK(t, th_rgb_diff(a, b, 640, 0, 0, 640, 20) == 0);
        TH_CHECK(t, th_rgb_diff(a, b, 640, 0, 40, 640, 400) == 0 &&
                        th_rgb_diff(a, c, 640, 0, 40, 640, 400) == 0);
        TH_CHECK(t, th_rgb_diff(a, b, 640, 425, 0, 640, 40) == 0 &&
                        th_rgb_diff(a, c, 640, 425, 0, 640, 40) == 0);
    }
    free(a);
    free(b);
    free(c);
}

/* Tick marks under the x axis: INK pixels in the row 2 below the axis,
 * counted as runs. */
static int x_ticks(const unsigned char *p, int w, int y)
{
    int n = 0, in = 0;
    for (int x = 87; x < w - 180; x++) { /* right of the y labels */
        const unsigned char *q = p + 3 * ((size_t)y * w + x);
        int ink = q[0] == 0x20 && q[1] == 0x20 && q[2] == 0x20;
        n += ink && !in;
        in = ink;
    }
    return n;
}

static void chart_cases(th_ctx *t)
{
    tpu_error err = {0};
    char a[512], b[512];
    snprintf(a, sizeof a, "%s/ch-s.png", th_tmpdir());
    snprintf(b, sizeof b, "%s/ch-us.png", th_tmpdir());

    th_case(t, "sweep chart: whole x values get whole ticks (4 .. 8: five "
               "ticks, not 4.5, 5.5)");
    const double x[2] = {4, 8}, ys[2] = {6e-5, 9e-5};
    const double yus[2] = {6e-5 * 1e6, 9e-5 * 1e6};
    chart_series s = {"step time", x, ys, 2};
    TH_CHECKF(t, chart_lines_png(a, "t", "cores per replica",
                                 "step time (s)", &s, 1, &err) == TPU_OK,
              "%s", err.msg);
    int w = 0, h = 0, w2 = 0, h2 = 0;
    unsigned char *p = NULL, *q = NULL;
    TH_CHECK(t, th_png_rgb(a, &w, &h, &p) && w == 1000 && h == 600);
    /* the plot's bottom edge is at y 540, ticks go 3 pixels below */
    if (p)
        TH_CHECKF(t, x_ticks(p, w, 542) == 5, "%d ticks",
                  x_ticks(p, w, 542));
    const double xf[2] = {4.25, 8};
    chart_series sf = {"step time", xf, ys, 2};
    TH_CHECK(t, chart_lines_png(b, "t", "x", "step time (s)", &sf, 1,
                                &err) == TPU_OK);
    TH_CHECK(t, th_png_rgb(b, &w2, &h2, &q));
    if (q)
        TH_CHECKF(t, x_ticks(q, w2, 542) > 5, "%d ticks",
                  x_ticks(q, w2, 542));
    free(q);
    q = NULL;

    th_case(t, "sweep chart: seconds of 60 .. 90 us are drawn in us (the "
               "same chart as the values given in us)");
    chart_series su = {"step time", x, yus, 2};
    TH_CHECK(t, chart_lines_png(b, "t", "cores per replica",
                                "step time (us)", &su, 1, &err) == TPU_OK);
    TH_CHECK(t, th_png_rgb(b, &w2, &h2, &q));
    if (p && q)
        TH_CHECK(t, w == w2 && h == h2 &&
                        memcmp(p, q, (size_t)w * h * 3) == 0);
    free(p);
    free(q);
}

void th_suite_polish(th_ctx *t)
{
    check_cases(t);
    outfile_cases(t);
    view_cases(t);
    chart_cases(t);
}
