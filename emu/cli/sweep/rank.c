/* tpuemu sweep: the runs that fit, fastest first by examples per second
 * (the step time when every run has the same batch): what a user of the
 * sweep wants to read first (emu/cli/sweep/sweep.h).  The first
 * SWEEP_RANK_ROWS rows; all of them are in results.csv. */
#include <stdio.h>
#include <stdlib.h>

#include "emu/cli/cli.h"
#include "emu/cli/sweep/sweep.h"

#define SWEEP_RANK_ROWS 12

typedef struct {
    long long run;
    double eps; /* examples per second */
} ranked;

static int ranked_cmp(const void *pa, const void *pb)
{
    const ranked *a = pa, *b = pb;
    if (a->eps != b->eps)
        return a->eps < b->eps ? 1 : -1;
    return a->run < b->run ? -1 : a->run > b->run;
}

/* The runs that fit into rk (their count returned); the finished runs
 * that do not fit counted in *nofit. */
static long long collect(long long nruns, const sweep_run *res, ranked *rk,
                         long long *nofit)
{
    long long n = 0;
    *nofit = 0;
    for (long long i = 0; i < nruns; i++) {
        const sweep_run *o = &res[i];
        if (o->have && o->status == 0 && o->r.fits && o->r.step_time_s > 0) {
            rk[n].run = i;
            rk[n].eps = (double)o->r.global_batch / o->r.step_time_s;
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

static void print_row(const sweep *s, const int *w, const ranked *k,
                      const sweep_run *res)
{
    const emu_result *r = &res[k->run].r;
    int idx[SWEEP_MAX_AXES];
    sweep_run_index(s, k->run, idx);
    printf("%04lld  ", k->run);
    swept_cells(s, w, idx);
    printf(" %10.3f %12.1f %10.2f %8d %9.2f\n", r->step_time_s * 1e3,
           k->eps, k->eps / (r->cores > 0 ? r->cores : 1),
           r->cores_per_replica, r->hbm_needed_bytes / 1073741824.0);
}

int sweep_print_ranking(const sweep *s, long long nruns, const sweep_run *res)
{
    ranked *rk = malloc(sizeof *rk * (size_t)(nruns + 1));
    if (!rk)
        return cli_error(4, "out of memory");
    long long nofit, n = collect(nruns, res, rk, &nofit);
    if (n == 0) {
        free(rk);
        print_none(nruns, nofit);
        return 0;
    }
    qsort(rk, (size_t)n, sizeof *rk, ranked_cmp);
    printf("\nfastest first (examples per second; %lld of %lld runs fit):\n",
           n, nruns);
    int w[SWEEP_MAX_AXES];
    column_widths(s, w);
    printf("%-6s", "run");
    swept_cells(s, w, NULL);
    printf(" %10s %12s %10s %8s %9s\n", "step ms", "examples/s", "per core",
           "cores/r", "HBM GiB");
    for (long long k = 0; k < n && k < SWEEP_RANK_ROWS; k++)
        print_row(s, w, &rk[k], res);
    if (n > SWEEP_RANK_ROWS)
        printf("(%lld more in results.csv)\n", n - SWEEP_RANK_ROWS);
    free(rk);
    return 0;
}
