/* view_app — state shared by the SDL viewer's files (emu/view_*.c).  The
 * viewer is a front end: it reads an emu_result through emu/result.h and
 * draws with emu/chart.h and emu/font.h; nothing in the core sees SDL. */
#ifndef EMU_VIEW_APP_H
#define EMU_VIEW_APP_H

#include <SDL.h>

#include "emu/result.h"

enum { VIEW_TIMELINE, VIEW_TORUS, VIEW_BARS, VIEW_LAYERS, VIEW_PANELS };

/* One core's events on one unit, sorted by start, with the running maximum
 * of the ends: a binary search then finds the first event visible at a
 * time even when events overlap, so a frame costs O(pixels x log events)
 * per row however many events a run has. */
typedef struct {
    uint32_t *idx;   /* indices into the core's events */
    double *pmax;    /* pmax[i] = max t1 of idx[0..i] */
    size_t n;
} view_lane;

/* One timeline row: cores first..last, all drawn from core src's events
 * (a run of identical cores the engine recorded once is one row).  A
 * replica group (rep0 >= 1) is replicas rep0..rep1 whose every core copies
 * the same-shard core of replica 0: ncores cores, not necessarily
 * consecutive (torus block placement); first is replica rep0's shard-0
 * core, the one the row is drawn from. */
typedef struct {
    int first, last, src;
    int rep0, rep1, ncores;   /* rep0 = -1: not a replica group */
} view_row;

/* One span of the layer lane: consecutive critical-path events of one
 * layer and phase (the step's update, layer -1, is one span of its own).
 * ev0..ev0+n-1 index the core's critical-path lane (sorted by start). */
typedef struct {
    double t0, t1;
    int32_t layer;
    uint8_t phase;
    size_t ev0, n;
} view_span;

/* One row of the layers panel: a layer of core 0 (kind VIEW_LROW_LAYER,
 * rank its place in the sorted list), the layers the panel leaves out
 * (VIEW_LROW_OTHER, n of them), or the part of the step no layer holds
 * (VIEW_LROW_END: the update, as `tpuemu run --layers` prints it). */
enum { VIEW_LROW_LAYER, VIEW_LROW_OTHER, VIEW_LROW_END };
typedef struct {
    int kind;
    int layer, rank, n;
    double s;               /* seconds */
    double cat[CAT_COUNT];  /* seconds by category */
} view_lrow;

typedef struct {
    emu_result r;
    int loaded;           /* r is filled */
    int has_events;
    view_lane *lanes;     /* cores x UNIT_COUNT */
    int *src;             /* src[c]: the core whose events row c draws: c,
                             or a twin with the same breakdown when the
                             engine recorded only one core of a group */
    view_row *rows;       /* the timeline's rows */
    int n_rows;
    char source[300];     /* file name or "demo" */
    int demo;             /* 0, or the demo's core count */

    SDL_Window *win;
    SDL_Renderer *ren;
    SDL_Texture *font;
    SDL_Texture *bars;    /* the bar chart, rendered by chart.c */
    int bars_w, bars_h;
    int W, H;

    int panel, help, units;
    double v0, v1;        /* visible time window, seconds */
    int row0;             /* first row shown in the timeline */
    int mx, my;           /* mouse */
    int dragging, drag_x;
    double drag_v0, drag_v1;
    int sel_core, sel_unit;
    long sel_ev;          /* selected event, -1: none */
    view_span *spans;     /* the layer lane of core spans_core's timeline */
    size_t n_spans;
    int spans_core;       /* the row's first core, -1: not built */
    long sel_span;        /* selected layer-lane span, -1: none */
    int *lay_order;       /* core 0's layers with time, largest first */
    int lay_n;
    double lay_sum;       /* all layers' time (what print_layers sums) */
    int lrow0;            /* first layer shown in the layers panel */
    int quit;
} view_app;

/* Layout, pixels. */
#define VIEW_HEADER 40
#define VIEW_FOOTER 40
#define VIEW_LABELS 130
#define VIEW_AXIS 24
/* The layer lane: a 15-pixel band under the axis (room for one line of
 * the 13-pixel font), then the core rows. */
#define VIEW_LANE 20
#define VIEW_LANE_BAR 15

/* The layers panel: a caption line, then rows VIEW_LROW_H apart. */
#define VIEW_LROW_TOP (VIEW_HEADER + 28)
#define VIEW_LROW_H 18

/* view_demo.c: a synthetic result shaped like a real run, for developing
 * and screenshotting without the engine (cores: 64 or 2048). */
int view_demo_build(emu_result *r, int cores);

/* view_draw.c */
int view_font_init(view_app *a);
void view_draw(view_app *a);
void view_text(view_app *a, int x, int y, const char *s, int scale,
               uint32_t rgb);
int view_rows_visible(const view_app *a);
int view_row_height(const view_app *a);
/* The event under pixel (x, y) in the timeline; returns 1 and fills core
 * (the row's first core), unit and event index when there is one. */
int view_pick(const view_app *a, int x, int y, int *core, int *unit,
              long *ev);
/* The layer lane under pixel (x, y): 1 and the span's index. */
int view_pick_span(const view_app *a, int x, int y, long *span);
/* Builds the layer lane for the first shown row's core when it is not
 * built for it (after loading, scrolling); 0 when out of memory. */
int view_layers_sync(view_app *a);
/* The y of the first core row, under the axis and the layer lane. */
int view_rows_top(const view_app *a);
/* The layers panel's rows as drawn (at most cap, the first layer shown
 * a->lrow0); returns their count.  *slots, when not NULL, gets how many
 * layer rows the window shows (a->lay_n when every layer fits). */
int view_layer_rows(const view_app *a, view_lrow *out, int cap, int *slots);
/* Keeps a->lrow0 in range for the window's size. */
void view_layers_clamp(view_app *a);
/* The layers panel's row under pixel (x, y): 1 and the row. */
int view_layer_pick(const view_app *a, int x, int y, view_lrow *row);
/* Index lanes for a (after r changes). */
int view_index(view_app *a);
void view_unindex(view_app *a);

#endif
