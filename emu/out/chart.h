/* chart — PNG charts drawn from a result: the per-core step-time breakdown
 * as stacked bars, and line charts (training loss, sweeps).  Core library:
 * libpng and the bitmap font only, no SDL.  The viewer reuses the palette,
 * the raster helpers and chart_png_write for its screenshots.
 */
#ifndef EMU_CHART_H
#define EMU_CHART_H

#include <stddef.h>
#include <stdint.h>

#include "emu/out/outfile.h"
#include "emu/result.h"
#include "emu/status.h"

/* Every core's step time as stacked bars in the report's categories, axis
 * and legend in the unit the step reads best in (chart_time_unit: ms for
 * a 30 ms step, us for an 89 us one), title with trace, system and step time, legend.  Up to
 * CHART_MAX_BARS cores get one bar each; beyond that, cores with identical
 * breakdowns share one bar when there are few such groups, otherwise
 * consecutive cores are binned (mean breakdown, whisker = min..max step
 * time); the chart says which in a note under the title. */
tpu_status chart_breakdown_png(const emu_result *r, const char *path,
                               tpu_error *err);

/* An 8-bit RGB raster (stride 3*w). */
typedef struct {
    int w, h;
    uint8_t *rgb;
} chart_image;

/* The same chart drawn into a new w x h image (w >= 500, h >= 300) that
 * the caller frees with chart_image_free (the viewer's bar panel). */
tpu_status chart_breakdown_image(const emu_result *r, chart_image *im, int w,
                                 int h, tpu_error *err);

typedef struct {
    const char *name;
    const double *x, *y;
    int n;
} chart_series;

/* A line chart of nseries series (points with a non-finite y are not
 * drawn, but their x still spans the x axis).  When
 * every x is a whole number (cores, batch, system size, steps) the x axis
 * is ticked at whole numbers only.  A ylabel ending in "(s)" marks the
 * values as seconds: they are drawn in s, ms, us or ns, whichever the
 * axis's range reads best in (the viewer's rule), and the label's unit is
 * rewritten to match ("step time (us)"). */
tpu_status chart_lines_png(const char *path, const char *title,
                           const char *xlabel, const char *ylabel,
                           const chart_series *s, int nseries, tpu_error *err);

#define CHART_MAX_BARS 128
#define CHART_MAX_GROUPS 32

/* Colour of a category (0xRRGGBB), the same in charts and the viewer:
 * the Okabe-Ito palette, distinguishable with the common colour-vision
 * deficiencies. */
uint32_t chart_cat_color(emu_cat c);
/* The unit a span of seconds reads best in (s, ms, us or ns, the largest
 * that keeps it at 1 or more; s for 0): its name in *name, and the factor
 * that converts seconds into it.  The chart's y axis and the viewer's time
 * axis share it. */
double chart_time_unit(double range, const char **name);
/* How chart_fmt_time writes a time.  One formatter for every time a
 * person reads (charts, the viewer, `tpuemu lower`); the styles differ on
 * purpose: a caption keeps fixed decimals, a column four significant
 * digits, a position on a zoomed axis the digits its zoom resolves. */
typedef enum {
    CHART_TIME_SIG,      /* 4 significant digits in s, ms, us or ns, by
                            |s|: "1.287 s", "26.41 us"; 0 is "0" */
    CHART_TIME_SIG_UNIT, /* the same, 0 is "0 s" */
    CHART_TIME_CAPTION,  /* "1.287 s", "30.5 ms", "89.2 us" (no ns): the
                            breakdown chart's step time; 0 is "0" */
    CHART_TIME_RES       /* in chart_time_unit(s)'s unit with the decimals
                            that resolve res seconds ("938.213 ms" deep
                            in a zoom); 0 is "0" */
} chart_time_style;
/* s seconds for people, in style st (res: CHART_TIME_RES's resolution in
 * seconds, ignored by the other styles). */
void chart_fmt_time(char *buf, size_t cap, double s, chart_time_style st,
                    double res);
/* Decimals that resolve res seconds in a unit of scale sc (seconds times
 * sc: chart_time_unit's factor), at most 9: a tick step's or a zoom's. */
int chart_time_decimals(double res, double sc);
/* v with `sig` significant figures and no exponent ("79.2", "0.137",
 * "1235", "0"): the breakdown legend's values. */
void chart_fmt_sig(char *buf, size_t cap, double v, int sig);

/* How chart_breakdown_png lays out bars for r (the viewer draws the same
 * bars).  bar_first[i] .. first core of bar i; core_bar[c] = bar of core c.
 * Returns the number of bars (<= CHART_MAX_BARS), or -1 when out of memory;
 * *mode is 0 (one bar per core), 1 (groups of identical cores) or 2
 * (bins of consecutive cores).  core_bar must hold r->cores ints. */
int chart_bars(const emu_result *r, int *core_bar, int *mode);

tpu_status chart_image_init(chart_image *im, int w, int h, uint32_t bg,
                            tpu_error *err);
void chart_image_free(chart_image *im);
void chart_fill(chart_image *im, int x, int y, int w, int h, uint32_t c);
void chart_line(chart_image *im, int x0, int y0, int x1, int y1, uint32_t c);
void chart_text(chart_image *im, int x, int y, const char *s, int scale,
                uint32_t c);

/* Writes a packed RGB (stride 3*w) or RGBA (channels 4) image as PNG,
 * atomically through emu/out/outfile.h (temporary beside the target, renamed
 * into place; devices, FIFOs and directories refused). */
tpu_status chart_png_write(const char *path, const uint8_t *pix, int w, int h,
                           int channels, tpu_error *err);

/* The same three writers into an open outfile (emu/out/outfile.h), which the
 * caller commits or discards: several outputs written all-or-nothing. */
tpu_status chart_png_put(outfile *o, const uint8_t *pix, int w, int h,
                         int channels, tpu_error *err);
tpu_status chart_breakdown_png_to(const emu_result *r, outfile *o,
                                  tpu_error *err);
tpu_status chart_lines_png_to(outfile *o, const char *title,
                              const char *xlabel, const char *ylabel,
                              const chart_series *s, int nseries,
                              tpu_error *err);

#endif
