/* tpuemu sweep: the runs that fit, fastest first by examples per second
 * (the step time when every run has the same batch), then again by
 * examples per second per chip, what a user pays for in chip-hours
 * (emu/cli/sweep/sweep.h).  The first SWEEP_RANK_ROWS rows of each; all
 * of them are in results.csv.
 *
 * Where the reports carry the step's range over the unconfirmed
 * assumptions (emu/range.h), a row whose range overlaps the winner's, in
 * the table's own unit, is marked as not distinguishable from it, with
 * the assumption that would put it ahead (advise_reorder).  Without
 * ranges (`--no-range`) nothing is marked and the range column is left
 * out. */
#include <stdio.h>
#include <stdlib.h>

#include "emu/cli/advise.h"
#include "emu/cli/cli.h"
#include "emu/cli/sweep/sweep.h"

#define SWEEP_RANK_ROWS 12

typedef struct {
    long long run;
    double eps;   /* examples per second */
    double key;   /* what the table ranks by: eps, or eps per chip */
} ranked;

static int ranked_cmp(const void *pa, const void *pb)
{
    const ranked *a = pa, *b = pb;
    if (a->key != b->key)
        return a->key < b->key ? 1 : -1;
    return a->run < b->run ? -1 : a->run > b->run;
}

/* The runs that fit into rk (their count returned); the finished runs
 * that do not fit counted in *nofit. */
static long long collect(long long nruns, const sweep_run *res, ranked *rk,
                         long long *nofit, long long *ran)
{
    long long n = 0;
    *nofit = 0;
    *ran = 0;
    for (long long i = 0; i < nruns; i++) {
        if (res[i].status == SWEEP_SKIPPED)
            continue;
        ++*ran;
        const sweep_run *o = &res[i];
        if (o->have && o->status == 0 && o->r.fits && o->r.step_time_s > 0) {
            rk[n].run = i;
            rk[n].eps = (double)o->r.global_batch / o->r.step_time_s;
            rk[n].key = rk[n].eps;
            n++;
        } else if (o->status == 3 || (o->status == 0 && o->have)) {
            ++*nofit; /* finished, and does not fit */
        }
    }
    return n;
}

/* "no run fits" only when that is what every run said: failed runs are
 * no finding about the hardware. */
static void print_none(long long nruns, long long nofit)
{
    if (nofit == nruns)
        printf("no run fits\n");
    else if (nofit == 0)
        printf("no run succeeded (all %lld failed)\n", nruns);
    else
        printf("no run succeeded: %lld do not fit, %lld failed\n", nofit,
               nruns - nofit);
}

/* Each swept column as wide as its name and its values in terminal
 * columns (a label is UTF-8: "ü" is two bytes and one column, "雪" two
 * columns), so nothing is cut and the columns line up. */
static void column_widths(const sweep *s, int *w)
{
    for (int a = 0; a < s->naxes; a++) {
        w[a] = cli_text_cols(s->ax[a].name);
        for (int v = 0; v < s->ax[a].n; v++)
            if (cli_text_cols(s->ax[a].v[v].label) > w[a])
                w[a] = cli_text_cols(s->ax[a].v[v].label);
    }
}

/* The swept columns (those with more than one value) of run idx, or
 * their names when idx is NULL. */
static void swept_cells(const sweep *s, const int *w, const int *idx)
{
    for (int a = 0; a < s->naxes; a++) {
        if (s->ax[a].n < 2)
            continue;
        putchar(' ');
        cli_put_cell(idx ? sweep_val_of(s, a, idx)->label : s->ax[a].name,
                     w[a]);
    }
}

static int chips_of(const emu_result *r)
{
    return r->chips > 0 ? r->chips : 1;
}

/* Whether every ranked run's report carries a range (then the table has
 * the range column and the marks). */
static int all_ranged(const ranked *rk, long long n, const sweep_run *res)
{
    for (long long k = 0; k < n; k++)
        if (!res[rk[k].run].r.has_range)
            return 0;
    return n > 0;
}

/* The range of run k in the table's unit (examples per second, per chip
 * or not): [lo, hi]. */
static void unit_range(const ranked *k, const emu_result *r, double *lo,
                       double *hi)
{
    double per = k->key * r->step_time_s; /* the work of one step */
    *lo = per / r->range_high_s;
    *hi = per / r->range_low_s;
}

/* Row k against the winner w: "" when told apart, else the mark with
 * the assumption that would put k ahead. */
static void mark_of(const ranked *w, const ranked *k, const sweep_run *res,
                    char *buf, size_t cap)
{
    const emu_result *rw = &res[w->run].r, *rk = &res[k->run].r;
    buf[0] = 0;
    if (w == k)
        return;
    double wlo, whi, klo, khi;
    unit_range(w, rw, &wlo, &whi);
    unit_range(k, rk, &klo, &khi);
    if (advise_distinguishable(wlo, whi, klo, khi))
        return;
    advise_ranged a = {rw->step_time_s, w->key * rw->step_time_s, rw->range,
                       rw->n_range};
    advise_ranged b = {rk->step_time_s, k->key * rk->step_time_s, rk->range,
                       rk->n_range};
    char set[128];
    if (advise_reorder(&a, &b, rk->gen, set, sizeof set))
        snprintf(buf, cap, "  ~ not distinguishable: --set %s puts it "
                           "first", set);
    else
        snprintf(buf, cap, "  ~ not distinguishable (no one assumption "
                           "reorders them)");
}

static void print_row(const sweep *s, const int *w, const ranked *k,
                      const ranked *win, const sweep_run *res, int ranges)
{
    const emu_result *r = &res[k->run].r;
    int idx[SWEEP_MAX_AXES];
    sweep_run_index(s, k->run, idx);
    printf("%04lld  ", k->run);
    swept_cells(s, w, idx);
    printf(" %10.3f %12.1f %10.2f %10.2f %8d %9.2f", r->step_time_s * 1e3,
           k->eps, k->eps / (r->cores > 0 ? r->cores : 1),
           k->eps / chips_of(r), r->cores_per_replica,
           r->hbm_needed_bytes / 1073741824.0);
    if (ranges) {
        char rg[64], mark[200];
        snprintf(rg, sizeof rg, "%.3f-%.3f", r->range_low_s * 1e3,
                 r->range_high_s * 1e3);
        mark_of(win, k, res, mark, sizeof mark);
        printf(" %17s%s", rg, mark);
    }
    printf("\n");
}

/* One table of the n runs that fit, best first by rk[].key. */
static void print_table(const sweep *s, ranked *rk, long long n,
                        const sweep_run *res, const char *title)
{
    qsort(rk, (size_t)n, sizeof *rk, ranked_cmp);
    int ranges = all_ranged(rk, n, res);
    printf("\n%s\n", title);
    int w[SWEEP_MAX_AXES];
    column_widths(s, w);
    printf("%-6s", "run");
    swept_cells(s, w, NULL);
    printf(" %10s %12s %10s %10s %8s %9s", "step ms", "examples/s",
           "per core", "per chip", "cores/r", "HBM GiB");
    if (ranges)
        printf(" %17s", "step range ms");
    printf("\n");
    for (long long k = 0; k < n && k < SWEEP_RANK_ROWS; k++)
        print_row(s, w, &rk[k], &rk[0], res, ranges);
    if (n > SWEEP_RANK_ROWS)
        printf("(%lld more in results.csv)\n", n - SWEEP_RANK_ROWS);
}

int sweep_print_ranking(const sweep *s, long long nruns, const sweep_run *res)
{
    ranked *rk = malloc(sizeof *rk * (size_t)(nruns + 1));
    if (!rk)
        return cli_error(4, "out of memory");
    long long nofit, ran, n = collect(nruns, res, rk, &nofit, &ran);
    if (n == 0) {
        free(rk);
        print_none(ran, nofit);
        return 0;
    }
    char title[160];
    snprintf(title, sizeof title,
             "fastest first (examples per second; %lld of %lld runs fit):", n,
             ran);
    print_table(s, rk, n, res, title);
    for (long long k = 0; k < n; k++)
        rk[k].key = rk[k].eps / chips_of(&res[rk[k].run].r);
    snprintf(title, sizeof title,
             "per chip first (examples per second per chip, what chip-hours "
             "buy):");
    print_table(s, rk, n, res, title);
    free(rk);
    return 0;
}
