/* view_layout — the viewer's state and everything about it that needs no
 * SDL: the indexes a frame is drawn from (index.c), and where things go
 * on the screen, what is under the mouse and the text that says it
 * (layout.c).  Only the panel files (app.h) draw; these files are linked
 * into the test runner, so the tests check the viewer's own layout and
 * text instead of copies.  SDL's handles are incomplete struct pointers
 * here: nothing in these files dereferences them. */
#ifndef EMU_VIEW_LAYOUT_H
#define EMU_VIEW_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "emu/result.h"

struct SDL_Window;
struct SDL_Renderer;
struct SDL_Texture;

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

    struct SDL_Window *win;
    struct SDL_Renderer *ren;
    struct SDL_Texture *font;
    struct SDL_Texture *bars; /* the bar chart, rendered by chart.c */
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
 * the 13-pixel font), then the core rows.  A span's label is drawn when
 * it fits, cut with ".." when at least VIEW_LANE_MIN_CELLS cells fit. */
#define VIEW_LANE 20
#define VIEW_LANE_BAR 15
#define VIEW_LANE_TOP (VIEW_HEADER + VIEW_AXIS + 2)
#define VIEW_LANE_MIN_CELLS 6

/* The layers panel: a caption line, then rows VIEW_LROW_H apart. */
#define VIEW_LROW_TOP (VIEW_HEADER + 28)
#define VIEW_LROW_H 18

/* Colours (0xRRGGBB) the panels share.  The layer lane's two shades
 * alternate span by span so neighbours separate; they have no hue, so the
 * lane never reads as a category of the rows below. */
#define VIEW_BG 0xF7F7F7
#define VIEW_INK 0x202020
#define VIEW_MUTED 0x666666
#define VIEW_HEAD 0x263238
#define VIEW_GRID 0xDDDDDD
#define VIEW_SAME 0xA03000 /* "same as N": a row drawn from another core */
#define VIEW_LANE_SHADE(i) ((i) & 1 ? 0xAEBAC2u : 0xCFD8DCu)
#define VIEW_LANE_BG 0xE4E8EA

/* ---- demo.c ---------------------------------------------------------- */

/* A synthetic result shaped like a real run, for developing and
 * screenshotting without the engine (cores: 64 or 2048). */
int view_demo_build(emu_result *r, int cores);

/* ---- index.c --------------------------------------------------------- */

/* Index lanes, rows and core 0's layer order for a (after r changes);
 * 0 when out of memory. */
int view_index(view_app *a);
void view_unindex(view_app *a);
/* Builds the layer lane for the first shown row's core when it is not
 * built for it (after loading, scrolling); 0 when out of memory. */
int view_layers_sync(view_app *a);
/* Event i of core's lane on unit (i in the lane's start order). */
const emu_event *view_lane_ev(const view_app *a, int core, int unit, size_t i);
/* First index of lane L whose running-max end reaches t. */
size_t view_lane_first(const view_lane *L, double t);
/* A layer's critical-path time on core 0, all categories. */
double view_layer_s(const emu_result *r, int l);

/* ---- layout.c: the timeline ------------------------------------------ */

int view_row_height(const view_app *a);
/* The y of the first core row, under the axis and the layer lane. */
int view_rows_top(const view_app *a);
int view_rows_visible(const view_app *a);
/* Time at pixel column x of the plot, and back. */
double view_t_of_x(const view_app *a, int x);
double view_x_of_t(const view_app *a, double t);
/* The pixel columns [*x0, *x1) of the span [t0, t1) in the plot, its end
 * rounded up (ceil_end) or down, starting right of the last column
 * painted (drawn) and at least one column wide: each column is painted
 * once per lane.  0 when the span starts at or past the plot's right
 * edge xr. */
int view_span_cols(const view_app *a, double t0, double t1, int ceil_end, int drawn,
                   int xr, int *x0, int *x1);
/* The smallest 1-2-5 step that gives at most `want` intervals of range. */
double view_nice_step(double range, int want);
/* The event under pixel (x, y) in the timeline; returns 1 and fills core
 * (the row's first core), unit and event index when there is one. */
int view_pick(const view_app *a, int x, int y, int *core, int *unit, long *ev);
/* First span of the layer lane ending at or after t. */
size_t view_span_first(const view_app *a, double t);
/* The layer lane under pixel (x, y): 1 and the span's index. */
int view_pick_span(const view_app *a, int x, int y, long *span);
/* The span's label: "res3a_conv2 bwd", "update" for the step's update. */
void view_span_label(const emu_result *r, const view_span *sp, char *buf, size_t cap);
/* What a span room cells wide shows of its label: the whole label (1), the
 * label cut with ".." when at least VIEW_LANE_MIN_CELLS cells fit (2:
 * "conv2..", never "conv2 .."), or nothing (0): a label never runs past
 * its span. */
int view_span_fit(char *out, size_t cap, const char *label, int room);
/* FLOPs and bytes of core's unit events under a critical-path span,
 * each counted pro rata to its overlap (critical-path events carry none). */
void view_span_work(const view_app *a, int core, double t0, double t1, double *flops,
                    double *bytes);
/* "replicas 1-7"; "replica 3" for one (one, many: the words). */
void view_fmt_reps(char *buf, size_t cap, const view_row *rw, const char *one,
                   const char *many);

/* ---- layout.c: the torus --------------------------------------------- */

#define VIEW_TORUS_LEGEND 210
/* The chip grid's width and height (a square-ish grid when the result's
 * dimensions do not hold its chips). */
void view_torus_dims(const view_app *a, int *dx, int *dy);
/* A chip cell's size and the grid's top-left corner, in pixels. */
void view_torus_geom(const view_app *a, int *cell, int *ox, int *oy);
/* The chip under pixel (x, y), or -1. */
int view_torus_chip_at(const view_app *a, int x, int y);
/* 1 - idle / step: the core's share of the step doing anything. */
double view_busy_share(const emu_core_result *pc);
/* Link dir (+x, -x, +y, -y) of chip: busy time / step time. */
double view_link_util(const view_app *a, int chip, int dir);
/* Does the torus wrap around at its edges? */
int view_torus_wraps(const view_app *a);
/* Does chip ch have a link in direction dir (+x, -x, +y, -y)? */
int view_link_exists(const view_app *a, int ch, int dir, int wraps);
/* Where a chip's number goes, as an offset from the chip cell's left
 * edge, or -1 for none (chip: the chip square's size, lw: a link
 * stroke's width, pct: link % labels are on). */
int view_chip_label_dx(const view_app *a, int cell, int chip, int lw, int pct);

/* ---- layout.c: the layers panel -------------------------------------- */

/* The layers panel's rows as drawn (at most cap, the first layer shown
 * a->lrow0); returns their count.  *slots, when not NULL, gets how many
 * layer rows the window shows (a->lay_n when every layer fits). */
int view_layer_rows(const view_app *a, view_lrow *out, int cap, int *slots);
/* Rows the window has room for (at least 3). */
int view_layer_slots(const view_app *a);
/* Keeps a->lrow0 in range for the window's size. */
void view_layers_clamp(view_app *a);
/* The layers panel's row under pixel (x, y): 1 and the row. */
int view_layer_pick(const view_app *a, int x, int y, view_lrow *row);
/* Columns: the name (26 characters, 36 from 960 pixels), the bar, the
 * time and share right-aligned at num_r in 15 characters, then the
 * scroll bar. */
typedef struct {
    int name_x, name_w, bar_x, bar_w, num_r;
} view_lcols;
view_lcols view_layer_cols(const view_app *a);
/* A row's name: the layer's, "(other N layers)", "(update, end of step)". */
void view_lrow_label(const view_app *a, const view_lrow *w, char *buf, size_t cap);
/* The bars' scale: the largest layer or the end row, whichever is longer,
 * fixed while scrolling.  The "other" row can be longer: its bar is cut
 * at the full width (and says so). */
double view_layer_scale(const view_app *a);

/* ---- layout.c: text -------------------------------------------------- */

/* A string's width in pixels in the viewer's font (scale 1). */
int view_text_w(const char *s);
/* HBM bytes as the CLI prints them: GiB from 1 GiB up, MiB below. */
void view_fmt_bytes(char *buf, size_t cap, double b);
/* Appends s to buf (cap bytes, *n used), cut to at most max characters
 * (not bytes) with "..." at the end when longer, never inside one. */
void view_put_cut(char *buf, size_t cap, int *n, const char *s, int max);
/* What the run was told besides the trace: "freeze LIST  set K=V, K=V"
 * ("" without either), so two screenshots of one trace with different
 * what-ifs say so, not only in their numbers.  A long list ends in "...". */
void view_whatif_text(const emu_result *r, char *buf, size_t cap);

#endif
