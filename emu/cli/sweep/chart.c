/* tpuemu sweep: OUT/step_time.png (emu/cli/sweep/sweep.h), the step time
 * against the x axis, one line per combination of the other axes (at
 * most SWEEP_MAX_SERIES, the first in run order); runs that do not fit or
 * failed are gaps, and the stdout lines say which x values have no point
 * and how many lines were left out. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "emu/out/chart.h"
#include "emu/cli/cli.h"
#include "emu/cli/sweep/sweep.h"

/* The lines being drawn: series k's points at xs/ys + k * per. */
typedef struct {
    int xa;                   /* the x axis */
    int per;                  /* its values: points per line at most */
    int nser, used;           /* lines allowed, lines started */
    long long all_series;     /* lines the grid has */
    long long key_of[SWEEP_MAX_SERIES]; /* the other axes' values, coded */
    chart_series ser[SWEEP_MAX_SERIES];
    char names[SWEEP_MAX_SERIES][48];
    double *xs, *ys;
} lines;

/* The axis named by "x", else the first with more than one value. */
static int pick_x_axis(const sweep *s)
{
    for (int a = 0; a < s->naxes; a++)
        if (s->x[0] ? strcmp(s->ax[a].name, s->x) == 0 : s->ax[a].n > 1)
            return a;
    return 0;
}

/* A line's legend: the other swept axes' values; --set values carry
 * their key's last part, so it reads "bandwidth_gbs=450", not "450". */
static void series_name(const sweep *s, int xa, const int *idx, char *buf,
                        size_t cap)
{
    size_t len = 0;
    buf[0] = 0;
    for (int a = 0; a < s->naxes; a++) {
        if (a == xa || s->ax[a].n < 2)
            continue;
        const char *kp = "";
        if (s->ax[a].kind == AX_SET) {
            kp = strrchr(s->ax[a].name, '.');
            kp = kp ? kp + 1 : s->ax[a].name;
        } else if (s->ax[a].kind == AX_FREEZE) {
            kp = "freeze";
        }
        int wr = snprintf(buf + len, cap - len, "%s%s%s%s", len ? " " : "",
                          kp, *kp ? "=" : "", sweep_val_of(s, a, idx)->label);
        if (wr > 0 && (size_t)wr < cap - len)
            len += (size_t)wr;
    }
    if (!buf[0])
        snprintf(buf, cap, "step time");
}

/* The line run idx belongs to (grouped by the other axes' values, in run
 * order), started when new; -1 when it is past the lines drawn. */
static int line_of(const sweep *s, lines *L, const int *idx)
{
    long long key = 0;
    for (int a = 0; a < s->naxes; a++)
        if (a != L->xa)
            key = key * s->ax[a].n + idx[a];
    for (int j = 0; j < L->used; j++)
        if (L->key_of[j] == key)
            return j;
    if (L->used >= L->nser)
        return -1;
    int k = L->used++;
    L->key_of[k] = key;
    series_name(s, L->xa, idx, L->names[k], sizeof L->names[k]);
    L->ser[k].name = L->names[k];
    L->ser[k].x = L->xs + (size_t)k * (size_t)L->per;
    L->ser[k].y = L->ys + (size_t)k * (size_t)L->per;
    L->ser[k].n = 0;
    return k;
}

/* Adds (x, y) to line k, keeping it sorted by x (insertion). */
static void add_point(lines *L, int k, double x, double y)
{
    double *sx = L->xs + (size_t)k * (size_t)L->per;
    double *sy = L->ys + (size_t)k * (size_t)L->per;
    int n = L->ser[k].n++;
    sx[n] = x;
    sy[n] = y;
    for (int j = n; j > 0 && sx[j - 1] > sx[j]; j--) {
        double tx = sx[j], ty = sy[j];
        sx[j] = sx[j - 1];
        sy[j] = sy[j - 1];
        sx[j - 1] = tx;
        sy[j - 1] = ty;
    }
}

/* Several values at one x (partitionings with the same cores per
 * replica, as "all" gives): the line keeps the fastest of them.  1 when
 * any line had such values. */
static int keep_fastest(lines *L)
{
    int collapsed = 0;
    for (int k = 0; k < L->used; k++) {
        double *sx = L->xs + (size_t)k * (size_t)L->per;
        double *sy = L->ys + (size_t)k * (size_t)L->per;
        int m = 0;
        for (int j = 0; j < L->ser[k].n; j++) {
            if (m > 0 && sx[m - 1] == sx[j]) {
                collapsed = 1;
                if (isnan(sy[m - 1]) || sy[j] < sy[m - 1])
                    sy[m - 1] = sy[j];
                continue;
            }
            sx[m] = sx[j];
            sy[m] = sy[j];
            m++;
        }
        L->ser[k].n = m;
    }
    return collapsed;
}

/* Every run's step time (NaN where it has none) on its line. */
static void fill_lines(const sweep *s, lines *L, long long nruns,
                       const sweep_run *res)
{
    for (long long i = 0; i < nruns; i++) {
        int idx[SWEEP_MAX_AXES];
        sweep_run_index(s, i, idx);
        int k = line_of(s, L, idx);
        if (k < 0)
            continue;
        double y = res[i].have && res[i].status == 0 && res[i].r.fits
                       ? res[i].r.step_time_s
                       : NAN;
        add_point(L, k, sweep_val_of(s, L->xa, idx)->x, y);
    }
}

static void x_label(const sweep *s, int xa, char *buf, size_t cap)
{
    static const char *const xlabels[] = {
        "cores per replica (partition_dims)", "cores (system)",
        "global batch", NULL, "--freeze list (index in grid.freeze)"};
    if (s->ax[xa].kind == AX_SET)
        snprintf(buf, cap, "%s", s->ax[xa].name);
    else
        snprintf(buf, cap, "%s", xlabels[s->ax[xa].kind]);
}

/* Whether a drawn line has a value at x. */
static int plotted_at(const lines *L, double x)
{
    for (int k = 0; k < L->used; k++)
        for (int j = 0; j < L->ser[k].n; j++)
            if (L->ser[k].x[j] == x && isfinite(L->ser[k].y[j]))
                return 1;
    return 0;
}

/* The x axis spans every swept value (emu/out/chart.c keeps the place of a
 * point without a value); those where no drawn line has a point are
 * named, so an empty stretch of the axis is explained. */
static void note_missing(const sweep *s, const lines *L)
{
    const sweep_axis *ax = &s->ax[L->xa];
    char list[512] = "";
    size_t len = 0;
    int missing = 0;
    for (int v = 0; v < L->per; v++) {
        double x = ax->v[v].x;
        int dup = 0; /* splits sharing an x are one point */
        for (int u = 0; u < v && !dup; u++)
            dup = ax->v[u].x == x;
        if (plotted_at(L, x) || dup)
            continue;
        missing++;
        char lab[120];
        if (ax->kind == AX_PD)
            snprintf(lab, sizeof lab, "%d", ax->v[v].cpr);
        else
            snprintf(lab, sizeof lab, "%s", ax->v[v].label);
        int wr = snprintf(list + len, sizeof list - len, "%s%s",
                          len ? ", " : "", lab);
        if (wr > 0 && (size_t)wr < sizeof list - len)
            len += (size_t)wr;
    }
    if (missing)
        printf("chart: no point at %s %s (no run there fits or "
               "succeeded%s)\n",
               ax->kind == AX_PD ? "cores per replica" : ax->name, list,
               L->used < L->all_series ? " among the lines drawn" : "");
}

/* Draws the lines into path; 0, or the exit status with the error
 * printed.  No run to plot is not an error of the sweep. */
static int draw(const sweep *s, lines *L, const char *path)
{
    int collapsed = keep_fastest(L);
    char title[256], xl[128];
    snprintf(title, sizeof title, "sweep %s: step time%s", s->name,
             collapsed ? " (fastest at each x)" : "");
    x_label(s, L->xa, xl, sizeof xl);
    tpu_error err = {0};
    tpu_status st = chart_lines_png(path, title, xl, "step time (s)", L->ser,
                                    L->used, &err);
    if (st == TPU_ERR_INPUT) {
        /* No run fitted or succeeded.  A chart an earlier sweep drew here
         * would pass for this one's: it goes (cli_sweep removed it before
         * the runs; a file that appeared meanwhile is the sweep's name all
         * the same). */
        unlink(path);
        printf("chart: none (no run to plot)\n");
        return 0;
    }
    if (st)
        return cli_fail(&err);
    printf("chart: %s\n", path);
    note_missing(s, L);
    if (L->all_series > L->used)
        printf("chart: %d of %lld lines drawn (at most %d: the first in run "
               "order); every run is in results.csv and the ranking\n",
               L->used, L->all_series, SWEEP_MAX_SERIES);
    return 0;
}

int sweep_chart(const sweep *s, const char *out, long long nruns,
                const sweep_run *res)
{
    lines *L = calloc(1, sizeof *L);
    if (!L)
        return cli_error(4, "out of memory");
    L->xa = pick_x_axis(s);
    L->per = s->ax[L->xa].n;
    L->all_series = nruns / L->per;
    L->nser = (int)(L->all_series < SWEEP_MAX_SERIES ? L->all_series
                                                     : SWEEP_MAX_SERIES);
    L->xs = calloc((size_t)L->nser * (size_t)L->per, sizeof *L->xs);
    L->ys = calloc((size_t)L->nser * (size_t)L->per, sizeof *L->ys);
    int rc;
    if (!L->xs || !L->ys) {
        rc = cli_error(4, "out of memory");
    } else {
        char path[1100];
        sweep_out_path(path, sizeof path, out, "step_time.png");
        fill_lines(s, L, nruns, res);
        rc = draw(s, L, path);
    }
    free(L->xs);
    free(L->ys);
    free(L);
    return rc;
}
