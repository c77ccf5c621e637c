/* tpuemu sweep: OUT/results.csv (emu/cli/sweep/sweep.h), one row per run: the
 * swept values, exit status, fits, step time, the slowest core's
 * categories, HBM needed, the global batch, examples per second (per
 * slice and per chip) and the step's range over the unconfirmed
 * assumptions.  A grid point that is not run (its split is not valid on
 * its system and batch) has no row.  Numbers read back
 * exactly; a step that was never timed (does not fit, failed) leaves its
 * cells empty, which a spreadsheet skips where it would average a 0. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/cli/cli.h"
#include "emu/cli/sweep/sweep.h"
#include "emu/report.h"

static void csv_field(FILE *f, const char *s)
{
    if (!strpbrk(s, ",\"\n")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

/* ",V": numbers in as few digits as read back exactly. */
static void csv_num(FILE *f, double v)
{
    char buf[40];
    sweep_num_text(buf, sizeof buf, v);
    fprintf(f, ",%s", buf);
}

/* n empty cells. */
static void csv_empty(FILE *f, int n)
{
    for (int k = 0; k < n; k++)
        fputc(',', f);
}

static void csv_header(FILE *f, const sweep *s)
{
    fputs("run", f);
    for (int a = 0; a < s->naxes; a++) {
        fputc(',', f);
        csv_field(f, s->ax[a].name);
    }
    fputs(",exit,fits,step_time_s,num_cores_per_replica,replicas,"
          "slowest_core",
          f);
    for (int c = 0; c < CAT_COUNT; c++)
        fprintf(f, ",%s_s", emu_cat_name((emu_cat)c));
    /* global_batch last, so the earlier columns keep their places: with
     * a batch axis or scale_batch it differs from run to run. */
    fputs(",hbm_needed_bytes,global_batch,examples_per_s,"
          "examples_per_s_per_chip,step_time_low_s,step_time_high_s\n",
          f);
}

/* The batch run idx was given (its command line, else the base trace's);
 * the report's, which is the same, when there is one. */
static long long run_batch(const sweep *s, const int *idx, const sweep_run *o)
{
    int abat = sweep_axis_of(s, AX_BATCH), asys = sweep_axis_of(s, AX_SYSTEM);
    if (o->have)
        return (long long)o->r.global_batch;
    if (abat >= 0)
        return strtoll(sweep_val_of(s, abat, idx)->arg, NULL, 10);
    if (asys >= 0 && sweep_val_of(s, asys, idx)->batch[0])
        return strtoll(sweep_val_of(s, asys, idx)->batch, NULL, 10);
    return s->g.global_batch;
}

/* The result columns of a run with a report. */
static void csv_result(FILE *f, const sweep_run *o)
{
    const emu_result *r = &o->r;
    int fits = r->fits && o->status == 0;
    int w = cli_slowest_core(r);
    fprintf(f, ",%d", fits);
    if (fits)
        csv_num(f, r->step_time_s);
    else
        csv_empty(f, 1);
    fprintf(f, ",%d,%d,", r->cores_per_replica, r->replicas);
    if (fits)
        fprintf(f, "%d", r->per_core[w].core);
    for (int c = 0; c < CAT_COUNT; c++) {
        if (fits)
            csv_num(f, r->per_core[w].breakdown_s[c]);
        else
            csv_empty(f, 1);
    }
    csv_num(f, r->hbm_needed_bytes);
}

/* Throughput per slice and per chip, and the step's range: empty cells
 * for a run without a timed step (or, for the range, without one in its
 * report). */
static void csv_rates(FILE *f, const sweep_run *o)
{
    const emu_result *r = &o->r;
    if (!(o->have && o->status == 0 && r->fits && r->step_time_s > 0)) {
        csv_empty(f, 4);
        return;
    }
    double eps = (double)r->global_batch / r->step_time_s;
    csv_num(f, eps);
    csv_num(f, eps / (r->chips > 0 ? r->chips : 1));
    if (r->has_range) {
        csv_num(f, r->range_low_s);
        csv_num(f, r->range_high_s);
    } else {
        csv_empty(f, 2);
    }
}

static void csv_row(FILE *f, const sweep *s, long long i, const sweep_run *o)
{
    int idx[SWEEP_MAX_AXES];
    sweep_run_index(s, i, idx);
    fprintf(f, "%04lld", i);
    for (int a = 0; a < s->naxes; a++) {
        fputc(',', f);
        csv_field(f, sweep_val_of(s, a, idx)->label);
    }
    if (o->status == -3)
        fputc(',', f); /* --gather without its report: exit not known */
    else
        fprintf(f, ",%d", o->status);
    if (o->have) {
        csv_result(f, o);
    } else {
        /* no report: fits 0 when the run said it does not fit */
        fprintf(f, ",%s,,,,", o->status == 3 ? "0" : "");
        csv_empty(f, CAT_COUNT + 1);
    }
    fprintf(f, ",%lld", run_batch(s, idx, o));
    csv_rates(f, o);
    fputc('\n', f);
}

int sweep_write_csv(const sweep *s, const char *out, long long nruns,
                    const sweep_run *res)
{
    char *buf = NULL;
    size_t blen = 0;
    FILE *f = open_memstream(&buf, &blen);
    if (!f)
        return cli_error(4, "out of memory");
    csv_header(f, s);
    for (long long i = 0; i < nruns; i++)
        if (res[i].status != SWEEP_SKIPPED)
            csv_row(f, s, i, &res[i]);
    if (fclose(f) != 0 || !buf) {
        free(buf);
        return cli_error(4, "out of memory");
    }
    char path[1100];
    sweep_out_path(path, sizeof path, out, "results.csv");
    tpu_error err = {0};
    tpu_status st = tpu_write_atomic(path, buf, blen, &err);
    free(buf);
    if (st)
        return cli_fail(&err);
    printf("results: %s\n", path);
    return 0;
}
