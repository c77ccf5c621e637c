#include "emu/out/chart.h"

#include <errno.h>
#include <math.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "emu/out/font.h"
#include "emu/out/outfile.h"

/* Okabe & Ito (2008), "Color Universal Design": eight colours that stay
 * distinct for deuteranopes and protanopes.  Idle is a neutral grey so the
 * eye goes to the busy categories first. */
static const uint32_t cat_colors[CAT_COUNT] = {
    0x0072B2, /* mxu: blue */
    0x009E73, /* vector: bluish green */
    0xE69F00, /* hbm_stall: orange */
    0xCC79A7, /* halo: reddish purple */
    0x56B4E9, /* allreduce: sky blue (not vermillion: next to orange
                 hbm_stall a 1-2 px all-reduce slice read as a stall) */
    0xBBBBBB, /* idle: grey */
};
static const uint32_t series_colors[] = {0x0072B2, 0xD55E00, 0x009E73,
                                         0xCC79A7, 0xE69F00, 0x56B4E9,
                                         0x000000, 0xF0E442};

#define BG 0xFFFFFF
#define INK 0x202020
#define GRID 0xE4E4E4
#define MUTED 0x606060

uint32_t chart_cat_color(emu_cat c)
{
    return (unsigned)c < CAT_COUNT ? cat_colors[c] : 0x000000;
}

/* ---- raster ---------------------------------------------------------- */

tpu_status chart_image_init(chart_image *im, int w, int h, uint32_t bg,
                            tpu_error *err)
{
    im->w = w;
    im->h = h;
    im->rgb = NULL;
    if (w <= 0 || h <= 0 || w > 16384 || h > 16384)
        return tpu_fail(err, TPU_ERR_INPUT, "chart: bad image size %dx%d", w,
                        h);
    im->rgb = malloc((size_t)w * h * 3);
    if (!im->rgb)
        return tpu_fail(err, TPU_ERR_SYSTEM, "chart: out of memory");
    chart_fill(im, 0, 0, w, h, bg);
    return TPU_OK;
}

void chart_image_free(chart_image *im)
{
    free(im->rgb);
    im->rgb = NULL;
}

static void put(chart_image *im, int x, int y, uint32_t c)
{
    if (x < 0 || y < 0 || x >= im->w || y >= im->h)
        return;
    uint8_t *p = im->rgb + 3 * ((size_t)y * im->w + x);
    p[0] = (uint8_t)(c >> 16);
    p[1] = (uint8_t)(c >> 8);
    p[2] = (uint8_t)c;
}

void chart_fill(chart_image *im, int x, int y, int w, int h, uint32_t c)
{
    int x0 = x < 0 ? 0 : x, y0 = y < 0 ? 0 : y;
    int x1 = x + w > im->w ? im->w : x + w;
    int y1 = y + h > im->h ? im->h : y + h;
    for (int yy = y0; yy < y1; yy++)
        for (int xx = x0; xx < x1; xx++)
            put(im, xx, yy, c);
}

void chart_line(chart_image *im, int x0, int y0, int x1, int y1, uint32_t c)
{
    /* Bresenham; callers pass clipped-enough coordinates (charts only). */
    int dx = abs(x1 - x0), sx = x0 < x1 ? 1 : -1;
    int dy = -abs(y1 - y0), sy = y0 < y1 ? 1 : -1;
    int e = dx + dy;
    for (int guard = 0; guard < 100000; guard++) {
        put(im, x0, y0, c);
        if (x0 == x1 && y0 == y1)
            break;
        int e2 = 2 * e;
        if (e2 >= dy) {
            e += dy;
            x0 += sx;
        }
        if (e2 <= dx) {
            e += dx;
            y0 += sy;
        }
    }
}

static void thick_line(chart_image *im, int x0, int y0, int x1, int y1,
                       uint32_t c)
{
    chart_line(im, x0, y0, x1, y1, c);
    chart_line(im, x0, y0 + 1, x1, y1 + 1, c);
    chart_line(im, x0 + 1, y0, x1 + 1, y1, c);
}

void chart_text(chart_image *im, int x, int y, const char *s, int scale,
                uint32_t c)
{
    font_draw_rgb(im->rgb, im->w, im->h, x, y, s, scale, c);
}

/* s cut to maxw pixels, ".." marking the cut: a user's name (trace,
 * series, swept key) never runs off the image or into the plot, and is
 * cut between characters, not inside one. */
static void text_fit(chart_image *im, int x, int y, const char *s, int maxw,
                     int scale, uint32_t c)
{
    char buf[1024];
    int cells = maxw / (FONT_W * (scale < 1 ? 1 : scale));
    if (!s || cells <= 0)
        return;
    font_fit(buf, sizeof buf, s, cells, "..");
    chart_text(im, x, y, buf, scale, c);
}

/* ---- PNG ------------------------------------------------------------- */

static void png_fail_fn(png_structp png, png_const_charp msg)
{
    (void)msg;
    longjmp(png_jmpbuf(png), 1);
}

static void png_warn_fn(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg;
}

tpu_status chart_png_put(outfile *o, const uint8_t *pix, int w, int h,
                         int channels, tpu_error *err)
{
    if (!o || !o->f || !pix || w <= 0 || h <= 0 ||
        (channels != 3 && channels != 4))
        return tpu_fail(err, TPU_ERR_INPUT, "chart: bad PNG arguments");
    errno = 0;
    png_structp png =
        png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, png_fail_fn,
                                png_warn_fn);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    /* volatile: read after longjmp back from libpng's error handler */
    volatile int ok = 0;
    if (png && info && !setjmp(png_jmpbuf(png))) {
        png_init_io(png, o->f);
        png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, 8,
                     channels == 4 ? PNG_COLOR_TYPE_RGBA : PNG_COLOR_TYPE_RGB,
                     PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                     PNG_FILTER_TYPE_DEFAULT);
        png_write_info(png, info);
        for (int y = 0; y < h; y++)
            png_write_row(png, (png_const_bytep)(pix + (size_t)y * w *
                                                     channels));
        png_write_end(png, info);
        ok = 1;
    }
    png_destroy_write_struct(png ? &png : NULL, info ? &info : NULL);
    if (!ok || ferror(o->f))
        return tpu_fail(err, TPU_ERR_INPUT, "%s: cannot write PNG: %s",
                        o->name, errno ? strerror(errno) : "libpng failed");
    return TPU_OK;
}

tpu_status chart_png_write(const char *path, const uint8_t *pix, int w, int h,
                           int channels, tpu_error *err)
{
    if (!path || !pix || w <= 0 || h <= 0 || (channels != 3 && channels != 4))
        return tpu_fail(err, TPU_ERR_INPUT, "chart: bad PNG arguments");
    outfile o;
    tpu_status st = outfile_open(&o, path, err);
    if (st == TPU_OK)
        st = chart_png_put(&o, pix, w, h, channels, err);
    if (st == TPU_OK)
        st = outfile_commit(&o, err);
    outfile_discard(&o);
    return st;
}

/* ---- axes ------------------------------------------------------------ */

/* A "nice" tick step (1, 2 or 5 x 10^k) giving about `want` ticks. */
static double nice_step(double range, int want)
{
    if (!(range > 0) || !isfinite(range))
        return 1;
    double raw = range / want, p = pow(10, floor(log10(raw)));
    double m = raw / p;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

/* The ticks of [lo, hi] at multiples of step: the first multiple's index
 * in *k0 and how many, counted by index so that the loop ends whatever
 * the doubles do (over a range of a few ulps, v += step is a no-op and a
 * loop on v would never end), at most 100. */
static int tick_span(double lo, double hi, double step, double *k0)
{
    double a = ceil(lo / step), b = floor(hi / step + 1e-6);
    *k0 = a;
    if (!isfinite(a) || !isfinite(b) || b < a)
        return 0;
    return b - a >= 99 ? 100 : (int)(b - a) + 1;
}

/* A range too narrow to draw at its magnitude (equal ends, or ends a few
 * ulps apart) widened around its middle by half, or by a millionth of
 * the middle where half a unit cannot be told from it. */
static void widen_flat(double *lo, double *hi, double half)
{
    double mid = *lo / 2 + *hi / 2;
    if (*hi - *lo > fabs(mid) * 1e-9)
        return;
    half = fmax(half, fabs(mid) * 1e-6);
    *lo = mid - half;
    *hi = mid + half;
}

static void fmt_tick(char *buf, size_t cap, double v, double step)
{
    if (fabs(v) < step * 1e-9)
        v = 0;
    int dec = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
    if (dec > 6)
        snprintf(buf, cap, "%.3g", v);
    else if (fabs(v) >= 1e6) {
        /* enough digits that neighbouring ticks read apart (1e9 +- 200
         * read "1e+09" at every tick) */
        double r = fabs(v) / step;
        int sig = r > 1e3 ? (int)ceil(log10(r)) + 1 : 3;
        snprintf(buf, cap, "%.*g", sig < 17 ? sig : 17, v);
    }
    else
        snprintf(buf, cap, "%.*f", dec, v);
}

typedef struct {
    int x0, y0, x1, y1; /* plot area, pixels: left, top, right, bottom */
    double xmin, xmax, ymin, ymax;
} frame;

static int fx(const frame *f, double x)
{
    return f->x0 + (int)lround((x - f->xmin) / (f->xmax - f->xmin) *
                               (f->x1 - f->x0));
}

static int fy(const frame *f, double y)
{
    return f->y1 - (int)lround((y - f->ymin) / (f->ymax - f->ymin) *
                               (f->y1 - f->y0));
}

/* Horizontal grid and y tick labels; returns the step. */
static double y_axis(chart_image *im, const frame *f, const char *label)
{
    double step = nice_step(f->ymax - f->ymin, 6);
    char buf[64];
    double k0;
    int n = tick_span(f->ymin, f->ymax, step, &k0);
    for (int k = 0; k < n; k++) {
        double v = (k0 + k) * step;
        int y = fy(f, v);
        chart_line(im, f->x0, y, f->x1, y, GRID);
        fmt_tick(buf, sizeof buf, v, step);
        chart_text(im, f->x0 - 6 - font_text_width(buf, 1), y - FONT_H / 2,
                   buf, 1, INK);
    }
    if (label)
        text_fit(im, f->x0 - 6 - 6 * FONT_W, f->y0 - FONT_H - 8, label,
                 im->w - (f->x0 - 6 - 6 * FONT_W) - 6, 1, INK);
    return step;
}

static void axes_box(chart_image *im, const frame *f)
{
    chart_line(im, f->x0, f->y0, f->x0, f->y1, INK);
    chart_line(im, f->x0, f->y1, f->x1, f->y1, INK);
}

int chart_time_decimals(double res, double sc)
{
    double r = res * sc;
    if (!(r > 0) || r >= 1)
        return 0;
    int d = (int)ceil(-log10(r) - 1e-9);
    return d > 9 ? 9 : d;
}

void chart_fmt_time(char *buf, size_t cap, double s, chart_time_style st,
                    double res)
{
    if (st == CHART_TIME_CAPTION) {
        /* a caption's step time: no ns, a step is never that short */
        if (s == 0)
            snprintf(buf, cap, "0");
        else if (s >= 1)
            snprintf(buf, cap, "%.3f s", s);
        else if (s >= 1e-3)
            snprintf(buf, cap, "%.1f ms", s * 1e3);
        else
            snprintf(buf, cap, "%.1f us", s * 1e6);
        return;
    }
    if (s == 0) {
        snprintf(buf, cap, st == CHART_TIME_SIG_UNIT ? "0 s" : "0");
        return;
    }
    if (st == CHART_TIME_RES) {
        const char *un;
        double sc = chart_time_unit(s, &un);
        snprintf(buf, cap, "%.*f %s", chart_time_decimals(res, sc), s * sc,
                 un);
        return;
    }
    double a = fabs(s);
    if (a >= 1)
        snprintf(buf, cap, "%.4g s", s);
    else if (a >= 1e-3)
        snprintf(buf, cap, "%.4g ms", s * 1e3);
    else if (a >= 1e-6)
        snprintf(buf, cap, "%.4g us", s * 1e6);
    else
        snprintf(buf, cap, "%.4g ns", s * 1e9);
}

void chart_fmt_sig(char *buf, size_t cap, double v, int sig)
{
    if (sig < 1)
        sig = 1;
    if (v == 0 || !isfinite(v)) {
        snprintf(buf, cap, v == 0 ? "0" : "%g", v);
        return;
    }
    /* Decimals for `sig` significant figures, none past the point for
     * big values (1234 s, not 1.23e+03 s), at most 9 (a rounding error
     * next to a real value reads 0.000000001, not 1e-17). */
    int dec = sig - 1 - (int)floor(log10(fabs(v)));
    dec = dec < 0 ? 0 : dec > 9 ? 9 : dec;
    snprintf(buf, cap, "%.*f", dec, v);
    /* 9.995 rounds up to "10.00": one figure too many. */
    if (dec > 0 && fabs(atof(buf)) >= pow(10, sig - dec))
        snprintf(buf, cap, "%.*f", dec - 1, v);
}

/* ---- breakdown ------------------------------------------------------- */

static int same_breakdown(const emu_core_result *a, const emu_core_result *b)
{
    for (int c = 0; c < CAT_COUNT; c++) {
        double x = a->breakdown_s[c], y = b->breakdown_s[c];
        if (fabs(x - y) > 1e-12 * (fabs(x) + fabs(y)) + 1e-15)
            return 0;
    }
    return 1;
}

int chart_bars(const emu_result *r, int *core_bar, int *mode)
{
    int n = r->cores;
    if (n <= CHART_MAX_BARS) {
        for (int c = 0; c < n; c++)
            core_bar[c] = c;
        *mode = 0;
        return n;
    }
    /* Groups of identical cores: data-parallel replicas usually collapse
     * into one or a few groups, which says more than 2048 equal bars. */
    int *rep = malloc(sizeof(int) * CHART_MAX_GROUPS);
    if (!rep)
        return -1;
    int ng = 0;
    for (int c = 0; c < n && ng <= CHART_MAX_GROUPS; c++) {
        int g = 0;
        while (g < ng && !same_breakdown(&r->per_core[rep[g]], &r->per_core[c]))
            g++;
        if (g == ng) {
            if (ng == CHART_MAX_GROUPS) {
                ng++;
                break;
            }
            rep[ng++] = c;
        }
        core_bar[c] = g;
    }
    free(rep);
    if (ng <= CHART_MAX_GROUPS) {
        *mode = 1;
        return ng;
    }
    int per = (n + CHART_MAX_BARS - 1) / CHART_MAX_BARS;
    for (int c = 0; c < n; c++)
        core_bar[c] = c / per;
    *mode = 2;
    return (n + per - 1) / per;
}

tpu_status chart_breakdown_png_to(const emu_result *r, outfile *o,
                                  tpu_error *err)
{
    chart_image im = {0};
    tpu_status st = chart_breakdown_image(r, &im, 1200, 720, err);
    if (st == TPU_OK)
        st = chart_png_put(o, im.rgb, im.w, im.h, 3, err);
    chart_image_free(&im);
    return st;
}

tpu_status chart_breakdown_png(const emu_result *r, const char *path,
                               tpu_error *err)
{
    outfile o;
    tpu_status st = outfile_open(&o, path, err);
    if (st == TPU_OK)
        st = chart_breakdown_png_to(r, &o, err);
    if (st == TPU_OK)
        st = outfile_commit(&o, err);
    outfile_discard(&o);
    return st;
}

/* The bars of a breakdown chart: per bar the mean breakdown, min/max
 * step time, member count and first core; over all cores the category
 * sums and the longest step. */
typedef struct {
    int nb, mode;        /* chart_bars */
    int *core_bar;
    double (*mean)[CAT_COUNT];
    double *tmin, *tmax;
    int *cnt, *first;
    double catsum[CAT_COUNT];
    double top;
} bar_set;

static void bars_free(bar_set *b)
{
    free(b->mean);
    free(b->tmin);
    free(b->tmax);
    free(b->cnt);
    free(b->first);
    free(b->core_bar);
}

/* r's cores grouped into bars (chart_bars) and summed per bar. */
static tpu_status bars_make(const emu_result *r, bar_set *b, tpu_error *err)
{
    memset(b, 0, sizeof *b);
    int n = r->cores;
    b->core_bar = malloc(sizeof(int) * n);
    if (!b->core_bar)
        return tpu_fail(err, TPU_ERR_SYSTEM, "chart: out of memory");
    b->nb = chart_bars(r, b->core_bar, &b->mode);
    if (b->nb <= 0)
        return tpu_fail(err, TPU_ERR_SYSTEM, "chart: out of memory");
    int nb = b->nb;
    b->mean = calloc((size_t)nb, sizeof *b->mean);
    b->tmin = malloc(sizeof(double) * nb);
    b->tmax = malloc(sizeof(double) * nb);
    b->cnt = calloc((size_t)nb, sizeof(int));
    b->first = malloc(sizeof(int) * nb);
    if (!b->mean || !b->tmin || !b->tmax || !b->cnt || !b->first)
        return tpu_fail(err, TPU_ERR_SYSTEM, "chart: out of memory");
    for (int c = 0; c < n; c++) {
        const emu_core_result *pc = &r->per_core[c];
        int k = b->core_bar[c];
        if (!b->cnt[k]) {
            b->first[k] = c;
            b->tmin[k] = b->tmax[k] = pc->step_time_s;
        }
        b->cnt[k]++;
        b->tmin[k] = fmin(b->tmin[k], pc->step_time_s);
        b->tmax[k] = fmax(b->tmax[k], pc->step_time_s);
        for (int j = 0; j < CAT_COUNT; j++) {
            b->mean[k][j] += pc->breakdown_s[j];
            b->catsum[j] += pc->breakdown_s[j];
        }
        b->top = fmax(b->top, pc->step_time_s);
    }
    for (int k = 0; k < nb; k++)
        for (int j = 0; j < CAT_COUNT; j++)
            b->mean[k][j] /= b->cnt[k] ? b->cnt[k] : 1;
    b->top = fmax(b->top, r->step_time_s);
    if (!(b->top > 0) || !isfinite(b->top))
        b->top = 1e-3;
    return TPU_OK;
}

/* Title: what, where, how long; and a note on how cores became bars.
 * Returns the x axis's name. */
static const char *breakdown_titles(chart_image *im, const emu_result *r,
                                    const bar_set *b)
{
    int W = im->w;
    char buf[512], tbuf[64];
    chart_fmt_time(tbuf, sizeof tbuf, r->step_time_s, CHART_TIME_CAPTION, 0);
    snprintf(buf, sizeof buf, "Step time per core: %s",
             r->trace[0] ? r->trace : "(unnamed trace)");
    int ts = font_text_width(buf, 2) <= W - 40 ? 2 : 1;
    text_fit(im, 20, 14, buf, W - 40, ts, INK);
    snprintf(buf, sizeof buf,
             "%s, %d core%s on %d chip%s, global batch %lld - step time %s "
             "(slowest core)%s",
             r->system[0] ? r->system : "?", r->cores,
             r->cores == 1 ? "" : "s", r->chips, r->chips == 1 ? "" : "s",
             (long long)r->global_batch, tbuf,
             r->fits ? "" : " - DOES NOT FIT in HBM");
    text_fit(im, 20, 14 + FONT_H * ts + 6, buf, W - 40, 1, MUTED);
    const char *xname = "core";
    if (b->mode == 1) {
        snprintf(buf, sizeof buf,
                 "%d cores drawn as %d bar%s: each bar is a group of cores with "
                 "identical breakdowns (x count under the bar)",
                 r->cores, b->nb, b->nb == 1 ? "" : "s");
        xname = "group of identical cores (first core, x count)";
    } else if (b->mode == 2) {
        snprintf(buf, sizeof buf,
                 "%d cores drawn as %d bins of %d consecutive cores: bar = mean "
                 "breakdown, black whisker = min..max step time in the bin",
                 r->cores, b->nb, b->cnt[0]);
        xname = "first core of bin";
    } else {
        buf[0] = 0;
    }
    if (buf[0])
        text_fit(im, 20, 14 + FONT_H * ts + 6 + FONT_H + 4, buf, W - 40, 1,
                 0xA03000);
    return xname;
}

/* Stacked bars of mean breakdowns (sc: seconds to the axis unit), with a
 * min..max whisker on bins of cores whose step times differ. */
static void breakdown_bars(chart_image *im, const frame *f, const bar_set *b,
                           double sc)
{
    double slot = (double)(f->x1 - f->x0) / b->nb;
    int bw = (int)(slot * 0.8);
    if (bw < 1)
        bw = 1;
    if (bw > 120)
        bw = 120;
    for (int k = 0; k < b->nb; k++) {
        int cx = f->x0 + (int)((k + 0.5) * slot);
        int bx = cx - bw / 2;
        double acc = 0;
        for (int j = 0; j < CAT_COUNT; j++) {
            double v = b->mean[k][j] * sc;
            if (!(v > 0))
                continue;
            int ya = fy(f, acc), yb = fy(f, acc + v);
            chart_fill(im, bx, yb, bw, ya - yb, cat_colors[j]);
            acc += v;
        }
        if (b->mode == 2 && b->tmax[k] > b->tmin[k]) {
            int ya = fy(f, b->tmin[k] * sc), yb = fy(f, b->tmax[k] * sc);
            chart_line(im, cx, ya, cx, yb, INK);
            chart_line(im, cx - 2, yb, cx + 2, yb, INK);
            chart_line(im, cx - 2, ya, cx + 2, ya, INK);
        }
    }
}

/* Bar k's label: its first core, and with groups its count. */
static void bar_label(char *buf, size_t cap, const bar_set *b, int k)
{
    if (b->mode == 1)
        snprintf(buf, cap, "%d x%d", b->first[k], b->cnt[k]);
    else
        snprintf(buf, cap, "%d", b->first[k]);
}

/* x labels, as many as fit without overlap, and the axis's name. */
static void breakdown_x_axis(chart_image *im, const frame *f, const bar_set *b,
                             const char *xname)
{
    char buf[64];
    double slot = (double)(f->x1 - f->x0) / b->nb;
    int maxw = 0;
    for (int k = 0; k < b->nb; k++) {
        bar_label(buf, sizeof buf, b, k);
        int tw = font_text_width(buf, 1);
        maxw = tw > maxw ? tw : maxw;
    }
    int every = 1;
    while (every * slot < maxw + 6)
        every++;
    for (int k = 0; k < b->nb; k += every) {
        bar_label(buf, sizeof buf, b, k);
        int cx = f->x0 + (int)((k + 0.5) * slot);
        chart_line(im, cx, f->y1, cx, f->y1 + 3, INK);
        chart_text(im, cx - font_text_width(buf, 1) / 2, f->y1 + 6, buf, 1,
                   INK);
    }
    chart_text(im, (f->x0 + f->x1 - font_text_width(xname, 1)) / 2,
               f->y1 + 8 + FONT_H + 6, xname, 1, INK);
}

/* A red dashed line from x0 to x1 at y: the step time. */
static void dashed_line(chart_image *im, int x0, int x1, int y)
{
    for (int x = x0; x < x1; x += 8)
        chart_line(im, x, y, x + 3 < x1 ? x + 3 : x1, y, 0xC00000);
}

/* Legend: category, colour, mean over cores, in the y axis's unit (sc,
 * un) with three significant figures.  When the chart is too short for
 * two lines per entry (a 400 px window), one line each. */
static void breakdown_legend(chart_image *im, const frame *f,
                             const bar_set *b, int ncores, double sc,
                             const char *un)
{
    int lx = f->x1 + 20, ly = f->y0;
    int need = 2 * FONT_H + 12 + CAT_COUNT * (2 * FONT_H + 10) + 6 +
               2 * FONT_H + 2;
    int compact = ly + need > im->h - 4;
    char tbuf[64];
    chart_text(im, lx, ly, "category", 1, INK);
    chart_text(im, lx, ly + FONT_H + 2, "(mean per core)", 1, MUTED);
    ly += 2 * FONT_H + 12;
    for (int k = CAT_COUNT - 1; k >= 0; k--) {
        const char *cn = emu_cat_name((emu_cat)k);
        chart_fill(im, lx, ly, 14, 14, cat_colors[k]);
        chart_text(im, lx + 20, ly, cn, 1, INK);
        chart_fmt_sig(tbuf, sizeof tbuf, b->catsum[k] / ncores * sc, 3);
        snprintf(tbuf + strlen(tbuf), sizeof tbuf - strlen(tbuf), " %s", un);
        if (compact) {
            chart_text(im, lx + 20 + font_text_width(cn, 1) + 6, ly, tbuf, 1,
                       MUTED);
            ly += FONT_H + 6;
        } else {
            chart_text(im, lx + 20, ly + FONT_H + 1, tbuf, 1, MUTED);
            ly += 2 * FONT_H + 10;
        }
    }
    ly += 6;
    dashed_line(im, lx, lx + 14, ly + 6);
    chart_text(im, lx + 20, ly, "step time", 1, INK);
    chart_text(im, lx + 20, ly + FONT_H + 1, "(slowest core)", 1, MUTED);
}

/* The whole chart into im (W x H, initialised here). */
static tpu_status breakdown_draw(const emu_result *r, const bar_set *b,
                                 chart_image *im, int W, int H,
                                 tpu_error *err)
{
    if (W < 500 || H < 300)
        return tpu_fail(err, TPU_ERR_INPUT, "chart: image too small");
    tpu_status st = chart_image_init(im, W, H, BG, err);
    if (st != TPU_OK)
        return st;
    const char *xname = breakdown_titles(im, r, b);
    /* Axis, whiskers, step line and legend in the unit the step reads
     * best in (the sweep charts' and the viewer's rule): a 89 us step is
     * drawn in us, not as 0.02 .. 0.08 ms. */
    const char *un;
    double sc = chart_time_unit(b->top, &un);
    char ylab[32];
    snprintf(ylab, sizeof ylab, "step time (%s)", un);
    frame f = {90, 110, W - 200, H - 70, 0, (double)b->nb, 0,
               b->top * sc * 1.08};
    y_axis(im, &f, ylab);
    breakdown_bars(im, &f, b, sc);
    breakdown_x_axis(im, &f, b, xname);
    /* The step time (slowest core) as a dashed line. */
    dashed_line(im, f.x0, f.x1, fy(&f, r->step_time_s * sc));
    axes_box(im, &f);
    breakdown_legend(im, &f, b, r->cores, sc, un);
    return TPU_OK;
}

tpu_status chart_breakdown_image(const emu_result *r, chart_image *out, int W,
                                 int H, tpu_error *err)
{
    if (!r || !r->per_core || r->cores <= 0)
        return tpu_fail(err, TPU_ERR_INPUT, "chart: no per-core results");
    bar_set b;
    chart_image im = {0};
    tpu_status st = bars_make(r, &b, err);
    if (st == TPU_OK)
        st = breakdown_draw(r, &b, &im, W, H, err);
    if (st == TPU_OK) {
        *out = im;
        im.rgb = NULL;
    }
    chart_image_free(&im);
    bars_free(&b);
    return st;
}

/* ---- line chart ------------------------------------------------------ */

/* The unit for seconds spanning `range`, as the viewer picks it (its time
 * axis): s, ms, us or ns, so ticks read "20, 40, 60 us", not "0.00002". */
double chart_time_unit(double range, const char **name)
{
    range = fabs(range);
    if (range >= 1 || !(range > 0)) {
        *name = "s";
        return 1;
    }
    if (range >= 1e-3) {
        *name = "ms";
        return 1e3;
    }
    if (range >= 1e-6) {
        *name = "us";
        return 1e6;
    }
    *name = "ns";
    return 1e9;
}

/* The label's length without a trailing " (s)" / "(s)" unit, or -1 when
 * it has none. */
static int sec_label(const char *label)
{
    size_t n = label ? strlen(label) : 0;
    if (n < 3 || strcmp(label + n - 3, "(s)") != 0)
        return -1;
    return (int)(n - 3);
}

/* How many series after i have a marker at the same pixel as series i's
 * point (x, y) (y already scaled by ysc, s[k].y not). */
static int covered_by_later(const frame *f, const chart_series *s,
                            int nseries, int i, double x, double y,
                            double ysc)
{
    int X = fx(f, x), Y = fy(f, y), n = 0;
    for (int k = i + 1; k < nseries; k++) {
        if (s[k].n > 40)
            continue;
        for (int j = 0; j < s[k].n; j++) {
            double xk = s[k].x[j], yk = s[k].y[j] * ysc;
            if (isfinite(xk) && isfinite(yk) && abs(fx(f, xk) - X) <= 2 &&
                abs(fy(f, yk) - Y) <= 2) {
                n++;
                break;
            }
        }
    }
    return n;
}

/* The span of a line chart's data, and whether every x is whole. */
typedef struct {
    double xmin, xmax, ymin, ymax;
    int xint;
} span;

/* The span of the series' points.  A point without a value (a sweep's
 * run that did not fit) still holds its place on the x axis: the axis
 * spans every swept value, not only the drawn ones.  Counts (cores per
 * replica, batch, system size, steps) get whole ticks: a tick at 4.5
 * cores is no configuration. */
static tpu_status data_span(const chart_series *s, int nseries,
                            const char *path, span *sp, tpu_error *err)
{
    *sp = (span){INFINITY, -INFINITY, INFINITY, -INFINITY, 1};
    for (int i = 0; i < nseries; i++)
        for (int j = 0; j < s[i].n; j++) {
            if (!s[i].x || !s[i].y)
                return tpu_fail(err, TPU_ERR_INPUT,
                                "%s: series %d has no data", path, i);
            double x = s[i].x[j], y = s[i].y[j];
            if (!isfinite(x))
                continue;
            sp->xint &= x == floor(x) && fabs(x) < 9007199254740992.0;
            sp->xmin = fmin(sp->xmin, x);
            sp->xmax = fmax(sp->xmax, x);
            if (!isfinite(y))
                continue;
            sp->ymin = fmin(sp->ymin, y);
            sp->ymax = fmax(sp->ymax, y);
        }
    if (!isfinite(sp->ymin))
        return tpu_fail(err, TPU_ERR_INPUT, "%s: no finite points to plot",
                        path);
    return TPU_OK;
}

/* The axes' ranges from the data's span: a lone x widened, positive data
 * from zero (a 15% difference looks like 15%, not like a factor), seconds
 * (a y label ending in "(s)") in the unit their range reads best in, the
 * label rewritten in ylab to say which; the y scale in *ysc. */
static void plot_range(span *sp, const char **ylabel, char *ylab,
                       size_t cap, double *ysc)
{
    widen_flat(&sp->xmin, &sp->xmax, 0.5);
    if (sp->ymin > 0)
        sp->ymin = 0;
    *ysc = 1;
    int yl = sec_label(*ylabel);
    if (yl >= 0) {
        const char *un;
        *ysc = chart_time_unit(fmax(fabs(sp->ymax), fabs(sp->ymin)), &un);
        snprintf(ylab, cap, "%.*s(%s)", yl, *ylabel, un);
        *ylabel = ylab;
        sp->ymin *= *ysc;
        sp->ymax *= *ysc;
    }
    if (sp->ymax == sp->ymin) {
        sp->ymin -= fabs(sp->ymin) * 0.1 + 0.5;
        sp->ymax += fabs(sp->ymax) * 0.1 + 0.5;
    }
    widen_flat(&sp->ymin, &sp->ymax, 0.5);
    double pad = (sp->ymax - sp->ymin) * 0.06;
    sp->ymax += pad;
    if (sp->ymin != 0)
        sp->ymin -= pad;
}

/* x ticks (whole numbers only when xint) and the x label. */
static void x_axis(chart_image *im, const frame *f, int xint,
                   const char *xlabel)
{
    double step = nice_step(f->xmax - f->xmin, 8);
    if (xint && step < 1)
        step = 1;
    char buf[64];
    double k0;
    int n = tick_span(f->xmin, f->xmax, step, &k0);
    /* labels that would run into each other: fewer ticks */
    for (int tries = 0; n > 1 && tries < 8; tries++) {
        int w = 0;
        for (int k = 0; k < n; k += n - 1) {
            fmt_tick(buf, sizeof buf, (k0 + k) * step, step);
            int bw = font_text_width(buf, 1);
            w = bw > w ? bw : w;
        }
        if ((double)n * (w + FONT_W) <= f->x1 - f->x0)
            break;
        step *= 2;
        n = tick_span(f->xmin, f->xmax, step, &k0);
    }
    for (int k = 0; k < n; k++) {
        double v = (k0 + k) * step;
        int x = fx(f, v);
        chart_line(im, x, f->y1, x, f->y1 + 3, INK);
        fmt_tick(buf, sizeof buf, v, step);
        chart_text(im, x - font_text_width(buf, 1) / 2, f->y1 + 6, buf, 1,
                   INK);
    }
    if (xlabel) {
        int xw = font_text_width(xlabel, 1), pw = f->x1 - f->x0;
        text_fit(im, xw < pw ? (f->x0 + f->x1 - xw) / 2 : f->x0,
                 f->y1 + 8 + FONT_H + 6, xlabel, pw, 1, INK);
    }
}

/* A point's marker of half-size r: a filled square, or an x for a thin
 * series. */
static void marker(chart_image *im, int X, int Y, int r, int thin,
                   uint32_t c)
{
    if (thin) {
        chart_line(im, X - r - 1, Y - r - 1, X + r + 1, Y + r + 1, c);
        chart_line(im, X - r - 1, Y + r + 1, X + r + 1, Y - r - 1, c);
    } else {
        chart_fill(im, X - r, Y - r, 2 * r + 1, 2 * r + 1, c);
    }
}

/* Series i: its points joined (a gap at a point without a value) and,
 * for up to 40 points, marked. */
static void draw_series(chart_image *im, const frame *f,
                        const chart_series *s, int nseries, int i, int thin,
                        uint32_t c, double ysc)
{
    int px = 0, py = 0, have = 0;
    for (int j = 0; j < s[i].n; j++) {
        double x = s[i].x[j], y = s[i].y[j] * ysc;
        if (!isfinite(x) || !isfinite(y)) {
            have = 0;
            continue;
        }
        int X = fx(f, x), Y = fy(f, y);
        if (have && thin)
            chart_line(im, px, py, X, Y, c);
        else if (have)
            thick_line(im, px, py, X, Y, c);
        /* Series that meet at a point (two systems with the same step,
         * or a sweep with one x value) would hide each other's markers:
         * each one grows by the markers drawn over it later, so all show
         * as nested rings. */
        if (s[i].n <= 40)
            marker(im, X, Y,
                   2 + 2 * covered_by_later(f, s, nseries, i, x, y, ysc),
                   thin, c);
        px = X;
        py = Y;
        have = 1;
    }
}

/* Series i's legend entry: its line style and name. */
static void legend_entry(chart_image *im, const frame *f, int i, int thin,
                         uint32_t c, const char *name)
{
    int ly = f->y0 + i * (FONT_H + 8);
    if (thin) {
        chart_line(im, f->x1 + 20, ly + 6, f->x1 + 38, ly + 6, c);
        chart_line(im, f->x1 + 26, ly + 3, f->x1 + 32, ly + 9, c);
        chart_line(im, f->x1 + 26, ly + 9, f->x1 + 32, ly + 3, c);
    } else {
        chart_fill(im, f->x1 + 20, ly + 5, 18, 3, c);
    }
    text_fit(im, f->x1 + 44, ly, name ? name : "", im->w - (f->x1 + 44) - 6,
             1, INK);
}

tpu_status chart_lines_png_to(outfile *o, const char *title,
                              const char *xlabel, const char *ylabel,
                              const chart_series *s, int nseries,
                              tpu_error *err)
{
    const char *path = o ? o->name : NULL;
    if (!path || (nseries > 0 && !s) || nseries < 0)
        return tpu_fail(err, TPU_ERR_INPUT, "chart: bad line chart arguments");
    span sp;
    tpu_status st = data_span(s, nseries, path, &sp, err);
    if (st != TPU_OK)
        return st;
    char ylab[256];
    double ysc;
    plot_range(&sp, &ylabel, ylab, sizeof ylab, &ysc);
    const int W = 1000, H = 600;
    chart_image im;
    if ((st = chart_image_init(&im, W, H, BG, err)) != TPU_OK)
        return st;
    const char *t = title ? title : "";
    int ts = font_text_width(t, 2) <= W - 40 ? 2 : 1;
    text_fit(&im, 20, 14, t, W - 40, ts, INK);
    frame f = {90, 70, W - 190, H - 60, sp.xmin, sp.xmax, sp.ymin, sp.ymax};
    y_axis(&im, &f, ylabel);
    x_axis(&im, &f, sp.xint, xlabel);
    axes_box(&im, &f);
    int nc = (int)(sizeof series_colors / sizeof series_colors[0]);
    for (int i = 0; i < nseries; i++) {
        uint32_t c = series_colors[i % nc];
        /* Past the palette's 8 colours a series keeps its colour's
         * neighbour apart by style: a thin line and x markers. */
        int thin = (i / nc) % 2;
        draw_series(&im, &f, s, nseries, i, thin, c, ysc);
        legend_entry(&im, &f, i, thin, c, s[i].name);
    }
    st = chart_png_put(o, im.rgb, im.w, im.h, 3, err);
    chart_image_free(&im);
    return st;
}

tpu_status chart_lines_png(const char *path, const char *title,
                           const char *xlabel, const char *ylabel,
                           const chart_series *s, int nseries, tpu_error *err)
{
    if (!path || (nseries > 0 && !s) || nseries < 0)
        return tpu_fail(err, TPU_ERR_INPUT, "chart: bad line chart arguments");
    outfile o;
    tpu_status st = outfile_open(&o, path, err);
    if (st == TPU_OK)
        st = chart_lines_png_to(&o, title, xlabel, ylabel, s, nseries, err);
    if (st == TPU_OK)
        st = outfile_commit(&o, err);
    outfile_discard(&o);
    return st;
}
