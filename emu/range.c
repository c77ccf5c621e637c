#include "emu/range.h"

#include "interconnect/ici.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "emu/cost.h"
#include "emu/fdio.h"
#include "emu/params.h"

/* What a variant needs to know of the trace to tell whether a key can
 * move its step at all. */
typedef struct {
    int collectives; /* any halo, statistics exchange or all-reduce */
    int chips;
    int full_pod;
    int cpr;
    int batchnorm, train;
    int conv3d_small; /* a 3D convolution under the small-batch layout */
    int grouped;      /* a grouped convolution */
    int remat;        /* the default step fits by recomputing */
    int scatter;      /* a backward scatter-add (roi_align's) */
} trace_facts;

static void facts_of(const graph *g, const sim_opts *o, const emu_result *b,
                     const tpu_params *hw, trace_facts *f)
{
    memset(f, 0, sizeof *f);
    const tpu_system *sys = tpu_system_find(b->system);
    f->chips = b->chips;
    f->full_pod = sys ? sys->full_pod : 0;
    f->cpr = b->cores_per_replica;
    f->train = g->train;
    /* Partitioned replicas exchange halos, statistics and gathers; a
     * training step on more than one core all-reduces its gradients (on
     * one chip too: over the on-chip path).  Nothing else talks. */
    f->collectives = b->cores_per_replica > 1 || (g->train && b->cores > 1);
    f->remat = b->hbm_remat_bytes > 0;
    double per_replica =
        b->replicas > 0 ? (double)b->global_batch / b->replicas : 0;
    int small = hw->xla_conv_pad && per_replica < hw->xla_conv_batch_threshold;
    for (int l = 0; l < g->n_layers; l++) {
        const glayer *L = &g->layers[l];
        if (L->unused)
            continue;
        f->batchnorm |= L->op == GOP_BATCHNORM;
        f->scatter |= g->train && L->op == GOP_ROI_ALIGN;
        int conv = L->op == GOP_CONV || L->op == GOP_CONV_T;
        f->grouped |= conv && graph_groups(L) > 1;
        f->conv3d_small |= conv && small && L->out.nsp == 3;
    }
    (void)o;
}

/* 0 when key provably cannot move this trace's step (docs/RANGES.md
 * lists why each is skipped). */
static int key_matters(const char *key, const trace_facts *f)
{
    if (strcmp(key, "ici.onchip_gbs") == 0 ||
        strcmp(key, "ici.onchip_latency_s") == 0 ||
        strcmp(key, "xla.collective_overhead_ns") == 0)
        return f->collectives;
    if (strcmp(key, "ici.link_gbs") == 0 ||
        strcmp(key, "ici.hop_latency_s") == 0)
        return f->collectives && f->chips > 1;
    if (strcmp(key, "ici.wrap") == 0) /* full pods wrap whatever it says */
        return f->collectives && f->chips > 1 && !f->full_pod;
    if (strcmp(key, "xla.halo_copy") == 0 || strcmp(key, "xla.halo_fused") == 0)
        return f->cpr > 1;
    if (strcmp(key, "xla.bn_stats_fused") == 0)
        return f->batchnorm && f->train;
    if (strcmp(key, "xla.bn_apply_fused") == 0)
        return f->batchnorm;
    if (strcmp(key, "xla.scatter_update_ns") == 0)
        return f->scatter;
    /* [C] for 2D convolutions (the Cloud TPU guide): unconfirmed for 3D
     * layouts only */
    if (strcmp(key, "xla.conv_pad_batch") == 0)
        return f->conv3d_small;
    /* recomputation is chosen only when the step would not fit */
    if (strcmp(key, "xla.remat") == 0)
        return f->remat;
    if (strcmp(key, "xla.group_conv") == 0 || strcmp(key, "vpu.madd_ops") == 0)
        return f->grouped;
    return 1;
}

/* One simulation to run: item i at end e (0 low, 1 high). */
typedef struct {
    int item, end;
    double value;
} task;

/* What a worker writes back per task. */
typedef struct {
    int task;
    int ok;
    double step_s;
} task_out;

static int user_set(const sim_opts *o, const char *key)
{
    for (int i = 0; i < o->n_sets; i++)
        if (strcmp(o->set_keys[i], key) == 0)
            return 1;
    return 0;
}

/* The step with key = value (and the span's hold key at its default) on
 * top of the caller's overrides; ok 0 when it has no time. */
static void run_task(const graph *g, const sim_opts *o, const tpu_params *hw,
                     const range_item *it, const task *t, task_out *res)
{
    tpu_param_span sp;
    tpu_param_span_get(it->key, hw->gen, &sp);
    int n = o->n_sets;
    const char **keys = malloc(sizeof *keys * ((size_t)n + 2));
    const char **vals = malloc(sizeof *vals * ((size_t)n + 2));
    char vbuf[2][40];
    res->ok = 0;
    res->step_s = 0;
    if (!keys || !vals) {
        free(keys);
        free(vals);
        return;
    }
    for (int i = 0; i < n; i++) {
        keys[i] = o->set_keys[i];
        vals[i] = o->set_values[i];
    }
    snprintf(vbuf[0], sizeof vbuf[0], "%.17g", t->value);
    keys[n] = it->key;
    vals[n++] = vbuf[0];
    double hv = 0;
    if (sp.hold && !user_set(o, sp.hold) &&
        tpu_params_get(hw, sp.hold, &hv, NULL) == TPU_OK) {
        snprintf(vbuf[1], sizeof vbuf[1], "%.17g", hv);
        keys[n] = sp.hold;
        vals[n++] = vbuf[1];
    }
    sim_opts v = *o;
    /* A variant of the interconnect's keys needs its own interconnect,
     * which borrows the flows the slice's (o->net) kept where the
     * topology is the same (ici_borrow_flows).  The others share the
     * slice's, its collectives cached. */
    if (!strncmp(it->key, "ici.", 4)) {
        v.net_flows = o->net;
        v.net = NULL;
    }
    v.n_sets = n;
    v.set_keys = keys;
    v.set_values = vals;
    v.functional = 0; /* the timing is the same with or without values */
    v.record_timeline = 0;
    v.no_dedup = 0; /* the same figures by construction, faster */
    v.time_unfit = 0;
    v.progress = NULL;
    v.progress_ctx = NULL;
    emu_result r;
    tpu_error err = {0};
    if (sim_run(g, &v, &r, &err) == TPU_OK && r.step_time_s > 0) {
        res->ok = 1;
        res->step_s = r.step_time_s;
    }
    emu_result_free(&r);
    free(keys);
    free(vals);
}

/* The order the tasks are handed out: the interconnect's variants first
 * (each simulates the step's collectives again, most of a large slice's
 * range: 0.5-0.8 s each against some 0.02 s for the others), then the
 * rest as listed. */
static int task_rank(const range_item *items, const task *t)
{
    return strncmp(items[t->item].key, "ici.", 4) != 0;
}

/* Reads one task index from the shared queue; 0 at its end. */
static int next_task(int fd, int *t)
{
    for (;;) {
        ssize_t n = read(fd, t, sizeof *t);
        if (n < 0 && errno == EINTR)
            continue;
        return n == (ssize_t)sizeof *t;
    }
}

/* The tasks in worker processes (but `done`, run already); outs[] filled
 * by task index.  The task indices wait in one pipe, written whole before
 * the workers start (a few hundred bytes: less than a pipe holds), in
 * task_rank order; a worker takes the next one when it has finished one
 * (reads of one index, which the pipe serves whole), so the long ones
 * spread over the workers and the short ones fill in behind.  Every child
 * is waited for. */
static tpu_status run_forked(const graph *g, const sim_opts *o,
                             const tpu_params *hw, const range_item *items,
                             const task *tasks, int nt, int jobs, int done,
                             task_out *outs, tpu_error *err)
{
    pid_t pid[64];
    int fd[64];
    int started = 0;
    tpu_status rc = TPU_OK;
    int q[2];
    if (pipe(q) != 0)
        return tpu_fail(err, TPU_ERR_SYSTEM, "range: pipe: %s",
                        strerror(errno));
    for (int rank = 0; rank < 2 && !rc; rank++)
        for (int t = 0; t < nt && !rc; t++)
            if (t != done && task_rank(items, &tasks[t]) == rank &&
                fdio_write_all(q[1], &t, sizeof t) != 0)
                rc = tpu_fail(err, TPU_ERR_SYSTEM, "range: pipe: %s",
                              strerror(errno));
    close(q[1]);
    /* Output buffered in the caller's stdio would be written twice if a
     * worker flushed it; workers leave through _exit, which does not. */
    for (int w = 0; w < jobs && !rc; w++) {
        int p[2];
        if (pipe(p) != 0) {
            rc = tpu_fail(err, TPU_ERR_SYSTEM, "range: pipe: %s",
                          strerror(errno));
            break;
        }
        pid_t c = fork();
        if (c < 0) {
            close(p[0]);
            close(p[1]);
            rc = tpu_fail(err, TPU_ERR_SYSTEM, "range: fork: %s",
                          strerror(errno));
            break;
        }
        if (c == 0) {
            close(p[0]);
            for (int k = 0; k < started; k++)
                close(fd[k]);
            int bad = 0, t;
            while (!bad && next_task(q[0], &t)) {
                if (t < 0 || t >= nt)
                    break;
                task_out r = {t, 0, 0};
                run_task(g, o, hw, &items[tasks[t].item], &tasks[t], &r);
                bad = fdio_write_all(p[1], &r, sizeof r) != 0;
            }
            close(p[1]);
            _exit(bad ? 1 : 0);
        }
        close(p[1]);
        pid[started] = c;
        fd[started] = p[0];
        started++;
    }
    close(q[0]);
    int got = 0;
    for (int w = 0; w < started; w++) {
        task_out r;
        size_t have = 0;
        for (;;) {
            ssize_t n = read(fd[w], (char *)&r + have, sizeof r - have);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                break;
            have += (size_t)n;
            if (have == sizeof r) {
                if (r.task >= 0 && r.task < nt) {
                    outs[r.task] = r;
                    got++;
                }
                have = 0;
            }
        }
        close(fd[w]);
    }
    for (int w = 0; w < started; w++) {
        int status = 0;
        while (waitpid(pid[w], &status, 0) < 0 && errno == EINTR)
            ;
        if (!rc && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
            rc = tpu_fail(
                err, TPU_ERR_SYSTEM, "range: a worker process failed (%s %d)",
                WIFSIGNALED(status) ? "signal" : "status",
                WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    }
    if (!rc && got != nt - (done >= 0 && done < nt))
        rc = tpu_fail(err, TPU_ERR_SYSTEM,
                      "range: %d of %d steps came back from the workers", got,
                      nt);
    return rc;
}

static int online_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 64 ? 64 : (int)n;
}

tpu_status range_compute(const graph *g, const sim_opts *o,
                         const emu_result *base, int jobs, range_result *out,
                         tpu_error *err)
{
    memset(out, 0, sizeof *out);
    out->step_s = out->low_s = out->high_s = base->step_time_s;
    /* the chip data the default step ran with: the caller's overrides were
     * accepted by that run */
    tpu_params hw;
    tpu_params_default(&hw, base->gen);
    for (int i = 0; i < o->n_sets; i++)
        if (tpu_params_set(&hw, o->set_keys[i], o->set_values[i], err))
            return err->code;
    trace_facts f;
    facts_of(g, o, base, &hw, &f);

    size_t nkeys = 0;
    while (tpu_param_key(nkeys))
        nkeys++;
    out->items = calloc(nkeys + 1, sizeof *out->items);
    task *tasks = calloc(2 * nkeys + 1, sizeof *tasks);
    task_out *outs = calloc(2 * nkeys + 1, sizeof *outs);
    if (!out->items || !tasks || !outs) {
        free(tasks);
        free(outs);
        range_free(out);
        return tpu_fail(err, TPU_ERR_SYSTEM, "out of host memory (range)");
    }
    int nt = 0;
    for (size_t k = 0; k < nkeys; k++) {
        const char *key = tpu_param_key(k)->key;
        tpu_param_span sp;
        if (!tpu_param_span_get(key, hw.gen, &sp) || user_set(o, key) ||
            !key_matters(key, &f))
            continue;
        double def = 0;
        tpu_params_get(&hw, key, &def, NULL);
        range_item *it = &out->items[out->n];
        snprintf(it->key, sizeof it->key, "%s", key);
        it->low_value = sp.lo;
        it->high_value = sp.hi;
        it->low_s = it->high_s = base->step_time_s;
        for (int e = 0; e < 2; e++) {
            double v = e ? sp.hi : sp.lo;
            if (v == def)
                continue; /* the default step */
            tasks[nt++] = (task){out->n, e, v};
        }
        out->n++;
    }
    tpu_status rc = TPU_OK;
    /* One interconnect for every variant that keeps the ici.* values: its
     * cache of collective results (the gradient all-reduce of a large
     * slice is most of a step's host time) is the default step's when the
     * caller lent it one (sim_caches_new), or else filled by the first
     * such variant, run here; the workers inherit it. */
    sim_opts so = *o;
    const tpu_system *sys = tpu_system_find(base->system);
    ici *own_net = NULL;
    if (!so.net) {
        so.net = own_net =
            sys ? ici_new(&hw.ici, sys->dim_x, sys->dim_y, sys->full_pod)
                : NULL;
        if (own_net)
            ici_keep_flows(own_net);
    }
    /* and one cache of DMA costs for every variant that keeps the hbm.*
     * values (sim_run lends it only to those) */
    cost_dma *own_dma = NULL;
    if (!so.dma_costs)
        so.dma_costs = own_dma = cost_dma_new(&hw);
    /* and one memo of the tile search's prices, which the variants of
     * interconnect keys (the lowering does not read them) share */
    cost_memo *own_memo = NULL;
    if (!so.price_memo)
        so.price_memo = own_memo = cost_memo_new(&hw);
    int primed = -1;
    for (int t = 0; own_net && t < nt && primed < 0; t++)
        if (strncmp(out->items[tasks[t].item].key, "ici.", 4)) {
            primed = t;
            outs[t].task = t;
            run_task(g, &so, &hw, &out->items[tasks[t].item], &tasks[t],
                     &outs[t]);
        }
    o = &so;
    if (jobs <= 0)
        jobs = online_cpus();
    if (jobs > nt)
        jobs = nt;
    if (jobs > 64)
        jobs = 64;
    if (jobs <= 1) {
        for (int t = 0; t < nt; t++) {
            if (t == primed)
                continue;
            outs[t].task = t;
            run_task(g, o, &hw, &out->items[tasks[t].item], &tasks[t],
                     &outs[t]);
        }
    } else {
        rc = run_forked(g, o, &hw, out->items, tasks, nt, jobs, primed, outs,
                        err);
    }
    if (own_net)
        ici_free(own_net);
    cost_dma_free(own_dma);
    cost_memo_free(own_memo);
    for (int t = 0; rc == TPU_OK && t < nt; t++) {
        range_item *it = &out->items[tasks[t].item];
        double s = outs[t].ok ? outs[t].step_s : -1;
        if (tasks[t].end)
            it->high_s = s;
        else
            it->low_s = s;
        if (s >= 0) {
            out->low_s = s < out->low_s ? s : out->low_s;
            out->high_s = s > out->high_s ? s : out->high_s;
        }
    }
    out->n_runs = nt;
    free(tasks);
    free(outs);
    if (rc)
        range_free(out);
    return rc;
}

void range_free(range_result *r)
{
    if (!r)
        return;
    free(r->items);
    memset(r, 0, sizeof *r);
}

int range_top(const range_result *r)
{
    int best = -1;
    double bw = 0;
    for (int i = 0; i < r->n; i++) {
        const range_item *it = &r->items[i];
        double lo = r->step_s, hi = r->step_s;
        for (int e = 0; e < 2; e++) {
            double s = e ? it->high_s : it->low_s;
            if (s < 0)
                continue;
            lo = s < lo ? s : lo;
            hi = s > hi ? s : hi;
        }
        if (hi - lo > bw) {
            bw = hi - lo;
            best = i;
        }
    }
    return best;
}

tpu_status range_to_result(const range_result *rr, emu_result *r,
                           tpu_error *err)
{
    free(r->range);
    r->range = NULL;
    r->n_range = 0;
    r->range = calloc((size_t)rr->n + 1, sizeof *r->range);
    if (!r->range)
        return tpu_fail(err, TPU_ERR_SYSTEM, "out of host memory (range)");
    for (int i = 0; i < rr->n; i++) {
        const range_item *it = &rr->items[i];
        if (it->low_s < 0 || it->high_s < 0)
            continue;
        emu_range_item *d = &r->range[r->n_range++];
        snprintf(d->key, sizeof d->key, "%s", it->key);
        d->low_s = it->low_s;
        d->high_s = it->high_s;
    }
    r->has_range = 1;
    r->range_low_s = rr->low_s;
    r->range_high_s = rr->high_s;
    return TPU_OK;
}
