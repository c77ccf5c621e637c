/* tpuemu run: simulate one step of a trace and print each core's time. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "emu/out/chart.h"
#include "emu/out/chrome_trace.h"
#include "emu/out/npy.h"
#include "emu/cli/advise.h"
#include "emu/cli/cli.h"
#include "emu/cost.h"
#include "emu/graph.h"
#include "emu/out/outfile.h"
#include "emu/range.h"
#include "emu/report.h"
#include "emu/sim.h"
#include "firmware/isa.h"
#include "interconnect/ici.h"

static const char usage[] =
    "usage: tpuemu run TRACE.json [--system NAME] [--batch N]\n"
    "                 [--set KEY=VALUE ...] [--freeze LIST]\n"
    "                 [--report R.json]\n"
    "                 [--chrome-trace T.json] [--png P.png]\n"
    "                 [--functional [--seed S] [--steps N] [--lr X]\n"
    "                  [--output-npy O.npy] [--output-layer NAME]\n"
    "                  [--loss-png L.png]\n"
    "                  [--host-mem-gib G] [--mxu-model pe|fast]]\n"
    "                 [--layers N] [--no-dedup] [--quiet] [--no-range]\n"
    "\n"
    "Simulates one training (or inference) step of TRACE on the named pod\n"
    "slice and prints, per core, the step time and where it went, then the\n"
    "slowest core's step time with its range over the unconfirmed ([U])\n"
    "assumptions: each one at a time at both ends of its plausible range\n"
    "(the --set table below), the others at their defaults, and the one\n"
    "that moves it most.  Cores with identical figures are grouped.  A\n"
    "trace that carries a published step time (its reference), run\n"
    "without a what-if option, also prints that time and how far the\n"
    "prediction is from it.\n"
    "\n";

static void print_usage(FILE *f)
{
    fputs(usage, f);
    cli_whatif_usage(f);
    fputs("  --report R      write the tpuemu-report/1 JSON\n"
          "  --chrome-trace T  write a Trace Event Format timeline\n"
          "                  (Perfetto, chrome://tracing)\n"
          "  --png P         write a chart of every core's breakdown\n"
          "  --functional    also compute the values (bf16 MXU, fp32 sums) on\n"
          "                  synthetic data; small traces only\n"
          "  --seed S        seed of the functional inputs and weights\n"
          "  --steps N       functional: train N steps, print the loss curve\n"
          "  --lr X          functional: learning rate (momentum SGD 0.9)\n"
          "  --output-npy O  functional: the last non-loss layer's output as .npy\n"
          "  --mxu-model pe|fast  functional: the MXU model that computes the\n"
          "                  products (pe: cycle by cycle, slow; same bits)\n"
          "  --output-layer NAME  functional: report (and write) that layer's\n"
          "                  output instead (checksum and .npy)\n"
          "  --loss-png L    functional: the loss curve as a PNG chart\n"
          "  --host-mem-gib G  functional: refuse runs needing more host\n"
          "                  memory (default: half of MemAvailable)\n"
          "  --no-dedup      execute every core and every loop iteration\n"
          "                  (slow; for checking the engine's shortcuts):\n"
          "                  the same figures up to rounding (the sums run in\n"
          "                  another order, so a report's layers[].time_s may\n"
          "                  differ in the last digits)\n"
          "  --layers N      also list the N layers core 0 spends the\n"
          "                  most time in (critical path, forward and\n"
          "                  backward together), by category\n"
          "  --quiet         print only the slowest core's step time (s, 9\n"
          "                  significant digits); the range is computed only\n"
          "                  for a --report then\n"
          "  --no-range      skip the range over the unconfirmed assumptions\n"
          "                  (one step per end of each, in worker processes)\n"
          "\n"
          "Output files are written all-or-nothing: every output path is\n"
          "checked before the simulation (an existing directory, device, FIFO\n"
          "or socket, a missing directory, the input trace itself and two\n"
          "outputs naming one file are refused); each is written to a\n"
          "temporary beside it and renamed into place only when all are\n"
          "complete.  A symbolic link is followed (its target is replaced).\n"
          "exit status: 0 done, 2 bad input or usage (an output that cannot\n"
          "be written included), 3 does not fit in HBM (a --report is still\n"
          "written, fits: false; --png, --chrome-trace, --output-npy and\n"
          "--loss-png are not, and a line on stderr names them),\n"
          "4 out of host memory\n",
          f);
}

typedef struct {
    double t0;
    double last;
    int shown;
} progress_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void on_progress(void *ctx, double frac)
{
    progress_t *p = ctx;
    double t = now_s();
    if (t - p->t0 < 1.0 || t - p->last < 0.2)
        return;
    p->last = t;
    p->shown = 1;
    fprintf(stderr, "\rtpuemu: simulating... %3.0f%%", frac * 100);
    fflush(stderr);
}

static int same_figures(const emu_core_result *a, const emu_core_result *b)
{
    if (a->step_time_s != b->step_time_s ||
        a->hbm_peak_bytes != b->hbm_peak_bytes)
        return 0;
    for (int k = 0; k < CAT_COUNT; k++)
        if (a->breakdown_s[k] != b->breakdown_s[k])
            return 0;
    return 1;
}

/* What ran: trace, slice, mode, batch, replicas; overrides and frozen
 * layers. */
static void print_heading(const emu_result *r)
{
    printf("%s on %s: %d chip%s, %d core%s, %s, global batch %lld, %d "
           "replica%s x %d core%s\n",
           r->trace, r->system, r->chips, r->chips == 1 ? "" : "s", r->cores,
           r->cores == 1 ? "" : "s",
           r->train ? "training step" : "inference step",
           (long long)r->global_batch, r->replicas, r->replicas == 1 ? "" : "s",
           r->cores_per_replica, r->cores_per_replica == 1 ? "" : "s");
    for (int i = 0; i < r->n_overrides; i++)
        printf("override: %s = %s\n", r->overrides[i].key,
               r->overrides[i].value);
    if (r->freeze[0])
        printf("freeze: %s\n", r->freeze);
}

/* The row label of core c and the n cores alike it (the last of them
 * `last`): "5", "0-7", "0 +7 alike". */
static void group_label(char *buf, size_t cap, int c, int n, int last)
{
    if (n == 1)
        snprintf(buf, cap, "%d", c);
    else if (last - c + 1 == n)
        snprintf(buf, cap, "%d-%d", c, last);
    else
        snprintf(buf, cap, "%d +%d alike", c, n - 1);
}

/* One row per shard position; the replicas that mirror it are named with
 * it when their figures are identical. */
static void print_cores(const emu_result *r)
{
    printf("\n%-13s %10s", "cores", "step ms");
    for (int k = 0; k < CAT_COUNT; k++)
        printf(" %9s", emu_cat_name((emu_cat)k));
    printf(" %8s %9s\n", "mxu util", "HBM GiB");
    int *done = calloc((size_t)r->cores, sizeof(int));
    for (int c = 0; c < r->cores; c++) {
        if (done && done[c])
            continue;
        const emu_core_result *a = &r->per_core[c];
        int n = 0, last = c;
        for (int d = c; d < r->cores; d++) {
            if ((done && done[d]) || !same_figures(a, &r->per_core[d]))
                continue;
            if (done)
                done[d] = 1;
            n++;
            last = d;
        }
        char label[32];
        group_label(label, sizeof label, c, n, last);
        printf("%-13s %10.3f", label, a->step_time_s * 1e3);
        for (int k = 0; k < CAT_COUNT; k++)
            printf(" %9.3f", a->breakdown_s[k] * 1e3);
        printf(" %7.1f%% %9.2f\n", a->mxu_utilization * 100,
               a->hbm_peak_bytes / (1024.0 * 1024 * 1024));
    }
    free(done);
}

/* FLOPs against the slice's peak, and the profiler's memory-bandwidth
 * utilisation for the slowest core: near 100% the step is bound by HBM,
 * not by the MXU. */
static void print_rates(const emu_result *r, int slow)
{
    printf("\nFLOPs per step %.4g (%.1f%% of the slice's peak over the step)\n",
           r->flops_per_step,
           r->step_time_s > 0
               ? 100 * r->flops_per_step /
                     (r->step_time_s * r->cores * r->core_peak_flops)
               : 0);
    const emu_core_result *sc = &r->per_core[slow];
    double traffic = sc->hbm_read_bytes + sc->hbm_write_bytes;
    if (r->core_hbm_bps > 0 && sc->step_time_s > 0)
        printf("HBM traffic %.4g GB on core %d (%.1f%% of its %.0f GB/s over "
               "the step)\n",
               traffic / 1e9, slow,
               100 * traffic / (r->core_hbm_bps * sc->step_time_s),
               r->core_hbm_bps / 1e9);
}

/* How much padding costs is the first thing a user of a partitioned run
 * needs to know (the small-batch layout can set a V-Net's step 17x over
 * its folded time): the matrix units' executed FLOPs, padding included,
 * against the model's share of a core.  A ratio, not a time: the time
 * without the small-batch layout is a second run, which the line names
 * when that layout applies.  The line is printed with or without the
 * layout, since the MXU's own padding (whole 128-wide tiles: few
 * channels, small products) and halo rows remain whatever the switch. */
static void print_padding_share(const emu_result *r)
{
    int slow = cli_slowest_core(r);
    if (slow < 0 || r->cores <= 0 || r->flops_per_step <= 0)
        return;
    double share = r->flops_per_step / r->cores;
    double x = r->per_core[slow].flops / share;
    if (x < 1.5) /* ragged tiles, a few halo rows: not news */
        return;
    printf("the matrix units of core %d compute %.3g x the model's FLOPs "
           "per core: operands padded to whole MXU tiles%s%s\n",
           slow, x,
           r->cores_per_replica > 1 ? ", halo rows computed twice" : "",
           r->small_batch > 0
               ? " and the small-batch layout above (`--set xla.conv_pad=0` "
                 "times the step without that layout)"
               : " (few channels, small products)");
}

/* v bytes as "%.3g" in unit u, or with u 0 in the unit that reads best,
 * named ("96 KiB", "12 GiB"). */
static void part_bytes(char *buf, size_t cap, double v, double u)
{
    static const char *const names[] = {"B", "KiB", "MiB", "GiB"};
    if (u > 0) {
        snprintf(buf, cap, "%.3g", v / u);
        return;
    }
    int k = 0;
    while (k < 3 && v >= 1024)
        v /= 1024, k++;
    snprintf(buf, cap, "%.3g %s", v, names[k]);
}

/* "does my model fit": what the need is made of, for the core that needs
 * the most (as the exit-3 message says it when it does not); what
 * recomputation and the small-batch layout did to make it fit. */
static void print_memory(const emu_result *r)
{
    if (r->hbm_needed_bytes > 0 && r->hbm_capacity_bytes > 0) {
        /* in GiB from 1 GiB up, else MiB, as the remat line below */
        const double gib = 1073741824.0;
        double u = r->hbm_needed_bytes >= gib ? gib : gib / 1024;
        const char *un = u == gib ? "GiB" : "MiB";
        char t[3][32];
        int own = 0;
        const double v[3] = {r->hbm_state_bytes, r->hbm_saved_bytes,
                             r->hbm_workspace_bytes};
        for (int i = 0; i < 3; i++)
            own |= v[i] > 0 && v[i] / u < 0.01;
        /* a part far below the line's unit in its own ("96 KiB", not
         * "9.16e-05"), and then every part named, as the no-fit message
         * does */
        for (int i = 0; i < 3; i++)
            part_bytes(t[i], sizeof t[i], v[i], own ? 0 : u);
        /* the capacity in its own unit by the same rule: "519 MiB of
         * 532.5 MiB", "55.5 MiB of 16 GiB" (not "519 MiB of 0.52 GiB") */
        double uc = r->hbm_capacity_bytes >= gib ? gib : gib / 1024;
        /* inference keeps nothing for a backward pass: not named */
        char kept[64] = "";
        if (r->train)
            snprintf(kept, sizeof kept, "activations kept for backward %s, ",
                     t[1]);
        printf("HBM need %.3g %s of %.4g %s on core %d: %s %s, %sworkspace "
               "%s%s%s\n",
               r->hbm_needed_bytes / u, un, r->hbm_capacity_bytes / uc,
               uc == gib ? "GiB" : "MiB", r->hbm_need_core,
               r->train ? "weights+gradients+optimizer" : "weights", t[0],
               kept, t[2], own ? "" : " ", own ? "" : un);
    }
    if (r->hbm_remat_bytes > 0) {
        /* GiB from 1 GiB up, as the HBM column prints */
        double gib = r->hbm_remat_bytes / (1024.0 * 1024 * 1024);
        printf("fits by recomputing %.*f %s of activations in the backward "
               "pass (xla.remat)", gib >= 1 ? 2 : 1,
               gib >= 1 ? gib : gib * 1024, gib >= 1 ? "GiB" : "MiB");
        /* the core that recomputes most need not be the one that needs
         * most (an uneven split: the larger shards recompute, the small
         * last one does not, yet holds the largest workspace) */
        if (r->cores_per_replica > 1)
            printf(" on core %d, the most of its replica's cores",
                   r->hbm_remat_core);
        printf("\n");
    }
    if (r->small_batch > 0) {
        printf("small-batch convolution layout (xla.conv_pad): batch %.3g "
               "per convolution",
               r->small_batch);
        if (r->small_batch_padded > r->small_batch)
            printf(", padded to %.3g", r->small_batch_padded);
        printf("; each tap's channels padded to the lanes (docs/FIRMWARE.md; "
               "--set xla.conv_pad=0 for the folded alternative)\n");
    }
    print_padding_share(r);
}

typedef struct {
    int layer;
    double s;
} layer_time;

static int layer_time_cmp(const void *pa, const void *pb)
{
    const layer_time *a = pa, *b = pb;
    if (a->s != b->s)
        return a->s < b->s ? 1 : -1;
    return a->layer - b->layer; /* ties in graph order */
}

static int gconv_any(const uint8_t *gc)
{
    return gc[0] || gc[1] || gc[2];
}

/* "Where does each core's time go", one level down: the layers core 0
 * spends most of its critical path in (the report's layers[], forward
 * and backward together), what is left (the weight update, the gradient
 * all-reduce, waiting before the step's end) on a last line, so the
 * column sums to the core's step time. */
static void print_layers(const emu_result *r, int64_t n)
{
    if (!r->fits || r->n_layers <= 0 || !r->layer_time_s || r->cores <= 0)
        return;
    layer_time *lt = malloc(sizeof *lt * (size_t)r->n_layers);
    if (!lt)
        return;
    int m = 0;
    double sum = 0;
    for (int l = 0; l < r->n_layers; l++) {
        const double *t = r->layer_time_s + (size_t)l * CAT_COUNT;
        double s = 0;
        for (int k = 0; k < CAT_COUNT; k++)
            s += t[k];
        sum += s;
        if (s > 0)
            lt[m++] = (layer_time){l, s};
    }
    qsort(lt, (size_t)m, sizeof *lt, layer_time_cmp);
    int shown = n < m ? (int)n : m;
    const double step = r->per_core[0].step_time_s;
    printf("\ncore 0: the %d layer%s it spends the most time in (of %d with "
           "time; ms)\n%-28s %10s %6s",
           shown, shown == 1 ? "" : "s", m, "layer", "ms", "share");
    for (int k = 0; k < CAT_COUNT; k++)
        printf(" %9s", emu_cat_name((emu_cat)k));
    /* how a grouped convolution was lowered, when one is shown */
    int grouped = 0;
    for (int i = 0; i < shown && r->layer_gconv; i++)
        grouped |= gconv_any(r->layer_gconv[lt[i].layer]);
    printf(grouped ? "  grouped: fwd/dx/dw\n" : "\n");
    for (int i = 0; i < shown; i++) {
        const double *t = r->layer_time_s + (size_t)lt[i].layer * CAT_COUNT;
        char name[128];
        cli_fit_cols_mid(name, sizeof name, r->layer_names[lt[i].layer], 28);
        cli_put_cell(name, 28);
        printf(" %10.3f %5.1f%%", lt[i].s * 1e3,
               step > 0 ? 100 * lt[i].s / step : 0);
        for (int k = 0; k < CAT_COUNT; k++)
            printf(" %9.3f", t[k] * 1e3);
        if (grouped && gconv_any(r->layer_gconv[lt[i].layer])) {
            const uint8_t *gc = r->layer_gconv[lt[i].layer];
            printf("  ");
            for (int k = 0; k < 3; k++)
                printf("%s%s", k ? "/" : "",
                       gc[k] ? fw_gconv_name((fw_gconv)gc[k]) : "-");
        }
        printf("\n");
    }
    double shown_s = 0;
    for (int i = 0; i < shown; i++)
        shown_s += lt[i].s;
    if (m > shown)
        printf("%-28s %10.3f %5.1f%%\n", "(the other layers)",
               (sum - shown_s) * 1e3, step > 0 ? 100 * (sum - shown_s) / step
                                               : 0);
    if (step - sum > 1e-6 * step) /* not the sums' rounding */
        printf("%-28s %10.3f %5.1f%%\n",
               r->train ? "(update, end of step)" : "(end of step)",
               (step - sum) * 1e3, 100 * (step - sum) / step);
    free(lt);
}

/* Four decimals read well from 10 ms up; below, four significant digits
 * (0.0001 s said nothing of a 128 us step). */
static void fmt_step(char *buf, size_t cap, double s)
{
    if (s >= 0.01 || s <= 0)
        snprintf(buf, cap, "%.4f", s);
    else
        snprintf(buf, cap, "%.4g", s);
}

/* The assumption that moves the step most, with the step at both its
 * ends, then the step with its range over the unconfirmed assumptions
 * (the step time stays the last line, as without a range). */
static void print_range_lines(const emu_result *r, const range_result *rr,
                              int slow)
{
    int top = range_top(rr);
    if (top < 0) {
        printf("no unconfirmed assumption moves the step (%d varied, one "
               "at a time)\n",
               rr->n);
    } else {
        const range_item *it = &rr->items[top];
        char a[32] = "no time", b[32] = "no time";
        if (it->low_s >= 0)
            fmt_step(a, sizeof a, it->low_s);
        if (it->high_s >= 0)
            fmt_step(b, sizeof b, it->high_s);
        /* a value as --set takes it: whole numbers in full (800000000,
         * not 8e+08) */
        char lv[32], hv[32];
        for (int e = 0; e < 2; e++) {
            double v = e ? it->high_value : it->low_value;
            char *d = e ? hv : lv;
            if (v == (double)(long long)v && v < 1e15)
                snprintf(d, sizeof lv, "%lld", (long long)v);
            else
                snprintf(d, sizeof lv, "%.4g", v);
        }
        printf("the assumption that moves the step most: %s (%s%s at %s, "
               "%s%s at %s; --set %s=VALUE)\n",
               it->key, a, it->low_s >= 0 ? " s" : "", lv, b,
               it->high_s >= 0 ? " s" : "", hv, it->key);
    }
    char st[32], lo[32], hi[32];
    fmt_step(st, sizeof st, r->step_time_s);
    fmt_step(lo, sizeof lo, rr->low_s);
    fmt_step(hi, sizeof hi, rr->high_s);
    /* "2.7e-05-3.6e-05" would read as a subtraction */
    int sci = strchr(lo, 'e') || strchr(hi, 'e');
    printf("step time %s s (%s%s%s over the unconfirmed assumptions, "
           "docs/VALIDATION.md; slowest core %d)\n",
           st, lo, sci ? " to " : "-", hi, slow);
}

/* The published step time of the configuration the trace describes,
 * beside the prediction: where a model family misses the public record
 * (docs/VALIDATION.md), a run of it says so. */
static void print_published(const emu_result *r, double pub)
{
    if (pub <= 0 || r->step_time_s <= 0)
        return;
    char p[32];
    fmt_step(p, sizeof p, pub);
    double e = 100 * (r->step_time_s - pub) / pub;
    if (fabs(e) < 0.05)
        printf("published step time %s s for this configuration (the "
               "trace's reference): the prediction matches it "
               "(docs/VALIDATION.md)\n",
               p);
    else
        printf("published step time %s s for this configuration (the "
               "trace's reference): the prediction is %.1f%% %s it "
               "(docs/VALIDATION.md)\n",
               p, fabs(e), e < 0 ? "below" : "above");
}

static void print_table(const emu_result *r, const range_result *rr,
                        double published_s)
{
    int slow = cli_slowest_core(r);
    print_heading(r);
    print_cores(r);
    print_rates(r, slow);
    print_memory(r);
    print_published(r, published_s);
    if (rr) {
        print_range_lines(r, rr, slow);
        return;
    }
    char st[32];
    fmt_step(st, sizeof st, r->step_time_s);
    printf("step time %s s (slowest core %d)\n", st, slow);
}

/* Half of what the kernel says is available (/proc/meminfo MemAvailable),
 * so a functional run never pushes the machine into swap; 4 GiB when the
 * file cannot be read. */
static double host_mem_default(void)
{
    double gib = 4.0 * 1024 * 1024 * 1024;
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return gib;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        long long kb;
        if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) {
            gib = (double)kb * 1024.0 / 2.0;
            break;
        }
    }
    fclose(f);
    return gib;
}

static void print_values(const emu_result *r)
{
    const char *name = r->layer_names && r->output_layer >= 0 &&
                               r->output_layer < r->n_layers
                           ? r->layer_names[r->output_layer]
                           : "?";
    printf("\nfunctional: output of '%s' [", name);
    for (int i = 0; i < r->output_rank; i++)
        printf("%s%lld", i ? "," : "", (long long)r->output_shape[i]);
    printf("], output_checksum %016llx", (unsigned long long)r->output_checksum);
    if (r->train)
        printf(", loss %.6f", r->loss);
    printf("\n");
    if (r->n_losses > 1) {
        printf("step  loss\n");
        for (int i = 0; i < r->n_losses; i++)
            printf("%4d  %.6f\n", i, r->losses[i]);
    }
}

static tpu_status write_loss_png(const emu_result *r, const char *trace,
                                 outfile *o, tpu_error *err)
{
    double *xs = malloc(sizeof(double) * (size_t)(r->n_losses + 1));
    if (!xs)
        return tpu_fail(err, TPU_ERR_SYSTEM, "out of host memory");
    for (int i = 0; i < r->n_losses; i++)
        xs[i] = i;
    char title[200];
    snprintf(title, sizeof title, "%s on %s: training loss (functional)",
             r->trace[0] ? r->trace : trace, r->system);
    chart_series s = {"loss", xs, r->losses, r->n_losses};
    tpu_status rc = chart_lines_png_to(o, title, "step", "loss", &s, 1, err);
    free(xs);
    return rc;
}

enum { OUT_REPORT, OUT_CHROME, OUT_PNG, OUT_NPY, OUT_LOSS, N_OUTS };
/* The output options, in the order of their outputs. */
static const char *const out_flag[N_OUTS] = {
    "--report", "--chrome-trace", "--png", "--output-npy", "--loss-png"};

/* Refuses, before anything runs, an output that is the input trace, two
 * outputs naming one file, and a path outfile_check refuses. */
static int check_outputs(const char *trace, const char *const *path)
{
    const char *const *flag = out_flag;
    for (int i = 0; i < N_OUTS; i++) {
        if (!path[i])
            continue;
        if (!*path[i])
            return cli_error(2, "%s: empty path", flag[i]);
        if (outfile_same(path[i], trace))
            return cli_error(2, "%s %s: is the input trace; refusing to "
                                "overwrite it", flag[i], path[i]);
        for (int j = 0; j < i; j++)
            if (path[j] && outfile_same(path[i], path[j]))
                return cli_error(2, "%s %s and %s %s name the same file",
                                 flag[j], path[j], flag[i], path[i]);
    }
    for (int i = 0; i < N_OUTS; i++) {
        tpu_error err = {0};
        if (path[i] && outfile_check(path[i], &err))
            return cli_fail(&err);
    }
    return 0;
}

/* Writes every requested output all-or-nothing: each into its temporary,
 * then all renamed (emu/out/outfile.h); on a failure none is left behind. */
static tpu_status write_outputs(const emu_result *r, const char *trace,
                                const char *const *path, tpu_error *err)
{
    outfile os[N_OUTS];
    int n = 0;
    tpu_status st = TPU_OK;
    for (int i = 0; i < N_OUTS && st == TPU_OK; i++) {
        if (!path[i])
            continue;
        outfile *o = &os[n];
        if ((st = outfile_open(o, path[i], err)))
            break;
        n++;
        switch (i) {
        case OUT_REPORT: {
            char *text = report_to_json(r);
            if (!text)
                st = tpu_fail(err, TPU_ERR_SYSTEM, "%s: out of host memory",
                              path[i]);
            else if (fputs(text, o->f) == EOF)
                st = tpu_fail(err, TPU_ERR_INPUT, "%s: cannot write: %s",
                              path[i], strerror(errno));
            free(text);
            break;
        }
        case OUT_CHROME:
            st = chrome_trace_write_to(r, o, 0, NULL, err);
            break;
        case OUT_PNG:
            st = chart_breakdown_png_to(r, o, err);
            break;
        case OUT_NPY: {
            unsigned char *buf = NULL;
            size_t len = 0;
            st = npy_encode_f32(path[i], r->output, r->output_rank,
                                r->output_shape, &buf, &len, err);
            if (st == TPU_OK && fwrite(buf, 1, len, o->f) != len)
                st = tpu_fail(err, TPU_ERR_INPUT, "%s: cannot write: %s",
                              path[i], strerror(errno));
            free(buf);
            break;
        }
        case OUT_LOSS:
            st = write_loss_png(r, trace, o, err);
            break;
        }
    }
    if (st) {
        /* the last opened first: os[0] holds the signals (outfile.h) */
        outfile_discard_all(os, n);
        return st;
    }
    return outfile_commit_all(os, n, err);
}

/* The command line. */
typedef struct {
    const char *trace;
    const char *path[N_OUTS]; /* each output, NULL when not asked for */
    const char *fx_only;      /* the first option that needs --functional */
    int quiet;
    int no_range;   /* --no-range */
    int64_t layers; /* --layers N: 0 none */
    cli_whatif w;
    sim_opts o;
    double published_s; /* the trace's reference step time when it ran as
                           it is (no what-if), else 0 */
} run_args;

/* The --functional options at argv[*i]: 1 taken, 0 not one of them, -1
 * bad (error printed). */
static int take_functional(run_args *ra, int argc, char **argv, int *i)
{
    const char *a = argv[*i], *v;
    sim_opts *o = &ra->o;
    if (strcmp(a, "--functional") == 0) {
        o->functional = 1;
    } else if (strcmp(a, "--seed") == 0) {
        int64_t s;
        ra->fx_only = ra->fx_only ? ra->fx_only : "--seed";
        if (!(v = cli_value(argc, argv, i)) ||
            cli_int("--seed", v, 0, INT64_MAX, &s))
            return -1;
        o->seed = (uint64_t)s;
    } else if (strcmp(a, "--steps") == 0) {
        int64_t n;
        if (!(v = cli_value(argc, argv, i)) ||
            cli_int("--steps", v, 1, 1000000, &n))
            return -1;
        o->steps = (int)n;
    } else if (strcmp(a, "--lr") == 0) {
        ra->fx_only = ra->fx_only ? ra->fx_only : "--lr";
        if (!(v = cli_value(argc, argv, i)) ||
            cli_double("--lr", v, 0, 1e6, &o->learning_rate))
            return -1;
    } else if (strcmp(a, "--host-mem-gib") == 0) {
        double gb;
        ra->fx_only = ra->fx_only ? ra->fx_only : "--host-mem-gib";
        if (!(v = cli_value(argc, argv, i)) ||
            cli_double("--host-mem-gib", v, 1e-6, 1e9, &gb))
            return -1;
        o->host_mem_limit = gb * 1024.0 * 1024.0 * 1024.0;
    } else if (strcmp(a, "--mxu-model") == 0) {
        if (!(v = cli_value(argc, argv, i)))
            return -1;
        if (strcmp(v, "pe") != 0 && strcmp(v, "fast") != 0) {
            cli_error(2, "--mxu-model %s: expected pe or fast", v);
            return -1;
        }
        o->pe_model = strcmp(v, "pe") == 0;
    } else if (strcmp(a, "--output-layer") == 0) {
        if (!(o->output_layer = cli_value(argc, argv, i)))
            return -1;
    } else {
        return 0;
    }
    return 1;
}

/* Argument argv[*i] (advancing *i past its value); 0, or 2 with the error
 * printed. */
static int take_arg(run_args *ra, int argc, char **argv, int *i)
{
    const char *a = argv[*i];
    int took = cli_whatif_take(&ra->w, argc, argv, i);
    if (!took)
        took = take_functional(ra, argc, argv, i);
    for (int k = 0; !took && k < N_OUTS; k++)
        if (strcmp(a, out_flag[k]) == 0)
            took = (ra->path[k] = cli_value(argc, argv, i)) ? 1 : -1;
    if (took)
        return took < 0 ? 2 : 0;
    if (strcmp(a, "--no-dedup") == 0)
        ra->o.no_dedup = 1;
    else if (strcmp(a, "--quiet") == 0)
        ra->quiet = 1;
    else if (strcmp(a, "--no-range") == 0)
        ra->no_range = 1;
    else if (strcmp(a, "--layers") == 0) {
        const char *v = cli_value(argc, argv, i);
        if (!v || cli_int("--layers", v, 1, 1000000, &ra->layers))
            return 2;
    }
    else if (a[0] == '-' && a[1])
        return cli_error(2, "run: unknown option %s (see tpuemu run --help)",
                         a);
    else if (!ra->trace)
        ra->trace = a;
    else
        return cli_error(2, "run: more than one trace (%s, %s)", ra->trace,
                         a);
    return 0;
}

/* The options together: a trace, the functional ones only with
 * --functional, the what-if ones consistent. */
static int check_args(const run_args *ra)
{
    const sim_opts *o = &ra->o;
    if (!ra->trace)
        return cli_error(2, "run: no trace given (usage: tpuemu run "
                            "TRACE.json [OPTIONS]; see tpuemu run --help)");
    if (!o->functional && (ra->path[OUT_NPY] || ra->path[OUT_LOSS] ||
                           o->steps != 1 || o->output_layer || o->pe_model))
        return cli_error(2, "run: --steps, --output-npy, --output-layer and "
                            "--loss-png need --functional");
    if (!o->functional && ra->fx_only)
        return cli_error(2, "run: %s sets the values of a --functional run "
                            "and means nothing without it",
                         ra->fx_only);
    if (ra->quiet && ra->layers)
        return cli_error(2, "run: --layers prints a table, --quiet only the "
                            "step time: give one of them");
    return cli_whatif_check(&ra->w) ? 2 : 0;
}

static int parse_args(run_args *ra, int argc, char **argv)
{
    memset(ra, 0, sizeof *ra);
    cli_whatif_init(&ra->w);
    sim_opts_default(&ra->o);
    for (int i = 1; i < argc; i++) {
        int rc = take_arg(ra, argc, argv, &i);
        if (rc)
            return rc;
    }
    return check_args(ra);
}

/* The trace loaded, the what-if options applied, and one step simulated
 * into *r (emu_result_free it), its status in *st with the error in err;
 * or the exit status, error printed, when it fails before the
 * simulation (*r untouched). */
static int simulate(run_args *ra, emu_result *r, range_result *rr,
                    tpu_status *st, tpu_error *err)
{
    progress_t prog = {now_s(), 0, 0};
    if (isatty(2)) {
        ra->o.progress = on_progress;
        ra->o.progress_ctx = &prog;
    }
    graph g;
    if (graph_load(&g, ra->trace, err))
        return cli_fail(err);
    /* a published figure is for the configuration the trace describes,
     * not for a what-if of it */
    ra->published_s = !ra->w.first && g.has_reference ? g.reference_step_s : 0;
    int code = cli_whatif_apply(&ra->w, &g, ra->trace, &ra->o);
    if (!code && (ra->path[OUT_LOSS] || ra->o.steps > 1) && !g.train)
        code = cli_error(2, "run: --steps and --loss-png need a training "
                            "trace (%s is run.mode \"infer\")", ra->trace);
    if (code) {
        graph_free(&g);
        return code;
    }
    /* with a range to compute, the default step's collectives and DMA
     * costs serve its variants too */
    int want_range =
        rr && !ra->no_range && (!ra->quiet || ra->path[OUT_REPORT]);
    sim_caches cc = {0};
    if (want_range && !ra->o.functional)
        sim_caches_new(&g, &ra->o, &cc);
    sim_caches_lend(&cc, &ra->o);
    *st = sim_run(&g, &ra->o, r, err);
    if (prog.shown)
        fprintf(stderr, "\r%40s\r", "");
    /* prog lives in this frame: no pointer to it outlives the call */
    ra->o.progress = NULL;
    ra->o.progress_ctx = NULL;
    /* the range is printed, or carried by the report */
    if (*st == TPU_OK && want_range) {
        *st = range_compute(&g, &ra->o, r, 0, rr, err);
        if (*st == TPU_OK)
            *st = range_to_result(rr, r, err);
        if (*st) {
            range_free(rr);
            emu_result_free(r);
        } else {
            rr->step_s = r->step_time_s;
        }
    }
    sim_caches none = {0};
    sim_caches_lend(&none, &ra->o);
    sim_caches_free(&cc);
    graph_free(&g);
    return 0;
}

/* A run that does not fit still leaves a report (fits: false, no
 * timing), so a performance gate sees the change as a regression rather
 * than a crash of the run.  0, or 3 with the error printed when the
 * report could not be written. */
static int write_nofit_report(emu_result *r, const char *report,
                              const tpu_error *err)
{
    if (r->cores <= 0)
        return 0;
    /* the simulation placed the cores (replica, shard, each one's need);
     * without that, every core with the worst need */
    if (!r->per_core) {
        r->per_core = calloc((size_t)r->cores, sizeof *r->per_core);
        for (int c = 0; r->per_core && c < r->cores; c++) {
            r->per_core[c].core = c;
            r->per_core[c].chip = c / 2;
            r->per_core[c].hbm_peak_bytes = r->hbm_needed_bytes;
        }
    }
    tpu_error werr = {0};
    if (r->per_core && report_write(r, report, &werr))
        /* One line, one status: the step does not fit (3), and the
         * report that would say so could not be written. */
        return cli_error(3, "%s (and the report was not written: %s)",
                         err->msg, werr.msg);
    return 0;
}

/* No timing, nothing to draw or compute: says which requested files are
 * missing rather than leave the user to find out. */
static void note_unwritten(const run_args *ra)
{
    char names[1024] = "";
    size_t len = 0;
    for (int i = 0; i < N_OUTS; i++)
        if (i != OUT_REPORT && ra->path[i] && len < sizeof names) {
            int nw = snprintf(names + len, sizeof names - len, "%s%s %s",
                              len ? ", " : "", out_flag[i], ra->path[i]);
            if (nw > 0)
                len += (size_t)nw;
        }
    if (names[0])
        fprintf(stderr,
                "tpuemu: not written, a step that does not fit has no "
                "timing: %s%s\n",
                names,
                ra->path[OUT_REPORT] ? " (the --report was, with fits: false)"
                                     : "");
}

/* The simulation failed with err: for a step that does not fit, the
 * report that says so and the note on the other outputs. */
static int sim_failed(const run_args *ra, emu_result *r, tpu_status st,
                      const tpu_error *err)
{
    if (st == TPU_ERR_NOFIT && ra->path[OUT_REPORT]) {
        int code = write_nofit_report(r, ra->path[OUT_REPORT], err);
        if (code)
            return code;
    }
    int code = cli_fail(err);
    if (st == TPU_ERR_NOFIT) {
        note_unwritten(ra);
        /* what would fit, from the search `tpuemu advise` runs */
        advise_suggest(ra->trace, r->system, r->global_batch, ra->w.freeze,
                       ra->w.n_sets, ra->w.keys, ra->w.vals);
    }
    return code;
}

int cli_run(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        print_usage(stdout);
        return 0;
    }
    run_args ra;
    int code = parse_args(&ra, argc, argv);
    if (code)
        return code;
    if (ra.o.functional && ra.o.host_mem_limit <= 0)
        ra.o.host_mem_limit = host_mem_default();
    ra.o.trace_path = ra.trace;
    ra.o.record_timeline = ra.path[OUT_CHROME] != NULL;
    /* Every output checked before the (possibly long) simulation. */
    if ((code = check_outputs(ra.trace, ra.path)) != 0)
        return code;
    tpu_error err = {0};
    tpu_status st = TPU_OK;
    emu_result r;
    range_result rr = {0};
    if ((code = simulate(&ra, &r, &rr, &st, &err)) != 0)
        return code;
    if (st) {
        code = sim_failed(&ra, &r, st, &err);
        emu_result_free(&r);
        return code;
    }
    /* outputs first: a run that exits 2 on a full disk prints no result */
    code = write_outputs(&r, ra.trace, ra.path, &err) ? cli_fail(&err) : 0;
    if (!code && ra.quiet)
        printf("%.9g\n", r.step_time_s);
    else if (!code)
        print_table(&r, r.has_range ? &rr : NULL, ra.published_s);
    if (!code && !ra.quiet && ra.layers)
        print_layers(&r, ra.layers);
    if (!code && r.has_values && !ra.quiet)
        print_values(&r);
    range_free(&rr);
    emu_result_free(&r);
    return code;
}
