/* The search of `tpuemu advise` and of run's suggestions (advise.h):
 * slices x splits x the batch per replica, each candidate simulated
 * in-process by a pool of threads. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "emu/cli/advise.h"
#include "emu/cli/sweep/sweep.h"
#include "emu/cost.h"
#include "emu/imp/keras.h"
#include "emu/range.h"
#include "emu/sim.h"
#include "firmware/lower.h"
#include "interconnect/ici.h"

/* Threads at most: each simulation holds a replica's programs, and the
 * machines this runs on have few cores. */
#define ADVISE_MAX_JOBS 8

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double advise_price(int gen)
{
    const tpu_price *p = tpu_chip_price(gen);
    return p ? p->usd_per_chip_hour : 0;
}

double advise_usd_per_mex(double ex_per_s, int chips, double usd_chip_hour)
{
    if (!(ex_per_s > 0))
        return 0;
    return 1e6 / ex_per_s / 3600.0 * chips * usd_chip_hour;
}

void advise_result_free(advise_result *res)
{
    for (int i = 0; i < res->n; i++)
        free(res->c[i].range);
    free(res->split);
    free(res->c);
    memset(res, 0, sizeof *res);
}

/* ---- splits --------------------------------------------------------- */

/* The smallest power of two at least v (v >= 1). */
static int pow2_at_least(int64_t v)
{
    int p = 1;
    while (p < v && p < ADVISE_CPR_LIMIT)
        p <<= 1;
    return p;
}

/* The cores per replica searched on a slice: from the fewest that leave
 * every replica an example, to max_cpr (or that fewest, when larger). */
static void cpr_range(const tpu_system *s, int64_t batch, int max_cpr, int *lo,
                      int *hi)
{
    *lo = s->cores > batch ? pow2_at_least((s->cores + batch - 1) / batch) : 1;
    *hi = max_cpr > *lo ? max_cpr : *lo;
    if (*hi > s->cores)
        *hi = s->cores;
}

/* The next composition of e's sum into nsp parts, e[0] descending
 * (sweep's "all" order); 0 after the last. */
static int next_composition(int *e, int nsp)
{
    int k = nsp - 2;
    while (k >= 0 && e[k] == 0)
        k--;
    if (k < 0)
        return 0;
    e[k]--;
    int rest = 0;
    for (int j = k + 1; j < nsp; j++) {
        rest += e[j];
        e[j] = 0;
    }
    e[k + 1] = rest + 1;
    return 1;
}

/* Every split of the first input's spatial dimensions by powers of two
 * up to max_cpr cores, each factor within its extent, in sweep's "all"
 * order (cores per replica, then the outer factor largest first). */
static int list_splits(const graph *g, int max_cpr, advise_split **out)
{
    const gshape *sh = &g->layers[0].out;
    int nsp = sh->nsp, cap = 16, n = 0;
    advise_split *v = malloc((size_t)cap * sizeof *v);
    if (!v)
        return -1;
    for (int sum = 0; (1 << sum) <= max_cpr; sum++) {
        int e[GRAPH_MAX_SP] = {0};
        e[0] = sum;
        if (nsp == 0 && sum > 0)
            break;
        do {
            advise_split sp;
            memset(&sp, 0, sizeof sp);
            sp.rank = nsp + 2;
            sp.cpr = 1 << sum;
            int ok = 1;
            for (int k = 0; k < sp.rank; k++)
                sp.pd[k] = 1;
            for (int d = 0; d < nsp; d++) {
                sp.pd[1 + d] = 1 << e[d];
                ok &= sp.pd[1 + d] <= sh->sp[d];
            }
            if (!ok)
                continue;
            size_t len = 0;
            for (int k = 0; k < sp.rank; k++)
                len += (size_t)snprintf(sp.label + len, sizeof sp.label - len,
                                        "%s%d", k ? "x" : "", sp.pd[k]);
            if (n == cap) {
                advise_split *w = realloc(v, (size_t)(cap *= 2) * sizeof *v);
                if (!w) {
                    free(v);
                    return -1;
                }
                v = w;
            }
            v[n++] = sp;
        } while (nsp > 0 && next_composition(e, nsp));
    }
    *out = v;
    return n;
}

/* The variant trace of split sp (sweep's variant: the first input takes
 * the split, every other input keeps the trace's choice), read as `run`
 * would read it, with --freeze applied.  TPU_ERR_INPUT: the split is not
 * one the trace can take (the reason in err). */
static tpu_status variant_graph(const advise_opts *o, const advise_split *sp,
                                graph *vg, tpu_error *err)
{
    memset(vg, 0, sizeof *vg);
    cJSON *d = cJSON_CreateArray();
    for (int k = 0; d && k < sp->rank; k++)
        cJSON_AddItemToArray(d, cJSON_CreateNumber(sp->pd[k]));
    char why[64] = "out of memory";
    cJSON *full =
        d ? sweep_pd_for(o->base, o->g, d, sp->rank, why, sizeof why) : NULL;
    cJSON *doc = full ? sweep_variant_doc(o->base, full, sp->cpr) : NULL;
    char *text = doc ? cJSON_PrintUnformatted(doc) : NULL;
    cJSON_Delete(d);
    cJSON_Delete(full);
    cJSON_Delete(doc);
    if (!text)
        return tpu_fail(err, TPU_ERR_SYSTEM, "out of memory");
    tpu_status st = graph_parse(vg, text, strlen(text), o->path, err);
    free(text);
    if (!st && o->freeze)
        st = graph_freeze(vg, o->freeze, o->path, err);
    return st;
}

/* ---- the pool ------------------------------------------------------- */

typedef struct {
    const advise_opts *o;
    advise_result *res;
    graph *vg;  /* one per split */
    int *order; /* candidates in the order they are taken */
    int next;
    /* per split: the smallest batch per replica known not to fit, and
     * (fit_only) the largest known to fit */
    int64_t *nofit_min, *fit_max;
    int *slice_cpr; /* first_fits: per slice, the fewest cores
                       per replica that fit there (0: none yet) */
    int slices_found;
    double t0;
    pthread_mutex_t mu;
} pool;

/* The chip data of candidate c's slice with the user's --set values. */
static tpu_status cand_params(const advise_opts *o, const advise_cand *c,
                              tpu_params *hw, tpu_error *err)
{
    tpu_params_default(hw, c->sys->gen);
    for (int i = 0; i < o->n_sets; i++) {
        tpu_status st =
            tpu_params_set(hw, o->set_keys[i], o->set_values[i], err);
        if (st)
            return st;
    }
    return TPU_OK;
}

/* The simulation options of candidate c: its slice and batch, the
 * user's --set values. */
static void cand_opts(const advise_opts *o, const advise_cand *c,
                      sim_opts *so)
{
    sim_opts_default(so);
    so->trace_path = o->path;
    so->system = c->sys->name;
    so->global_batch = c->global_batch;
    so->n_sets = o->n_sets;
    so->set_keys = o->set_keys;
    so->set_values = o->set_values;
}

/* Whether the candidate fits, from the lowering alone (no engine): what
 * sim_run checks before it times the step, through sim_lower on every
 * core of one replica (replicas run the same programs). */
static advise_state fit_check(const advise_opts *o, const graph *g,
                              advise_cand *c)
{
    tpu_error err = {0};
    if (graph_check_run(g, c->sys->name, c->global_batch, o->path, &err))
        return ADV_INVALID;
    tpu_params hw;
    if (cand_params(o, c, &hw, &err) || tpu_params_check(&hw, &err))
        return ADV_INVALID;
    sim_opts so;
    cand_opts(o, c, &so);
    advise_state st = ADV_FITS;
    double need = 0;
    for (int k = 0; st == ADV_FITS && k < g->cores_per_replica; k++) {
        fw_program prog;
        fw_memory mem;
        memset(&prog, 0, sizeof prog);
        memset(&mem, 0, sizeof mem);
        tpu_status ls = sim_lower(g, &so, k, &prog, &mem, &err);
        if (ls != TPU_OK && ls != TPU_ERR_NOFIT)
            st = ADV_FAILED;
        else {
            if (mem.peak_bytes > need)
                need = mem.peak_bytes;
            if (ls == TPU_ERR_NOFIT || need > hw.hbm.capacity_bytes)
                st = ADV_NOFIT;
        }
        fw_program_free(&prog);
    }
    c->hbm_need_bytes = need;
    c->hbm_cap_bytes = hw.hbm.capacity_bytes;
    return st;
}

/* The search times the point figure only (has_range 0: the range is
 * that point); advise_range adds the range for the candidates the tables
 * show first. */
static void take_timing(advise_cand *c, const emu_result *r)
{
    c->step_s = r->step_time_s;
    c->step_lo_s = c->step_hi_s = r->step_time_s;
    c->has_range = 0;
}

/* nets: this worker's interconnect per slice (made on first use), so
 * that the candidates of one slice share its cache of collective results:
 * the gradient all-reduce over the whole slice is the same call for every
 * split, and on v3-1024 it is most of a step's host time.  Every
 * candidate of a slice runs with the same ici.* values (--set applies to
 * all), which sim_opts.net requires. */
typedef struct {
    const tpu_system *sys;
    ici *net;
} slice_net;

/* A worker's caches: an interconnect per slice, and DMA costs per
 * generation (every candidate of a generation runs with the same hbm.*
 * values, and the tile search measures most block sizes again for each
 * split otherwise). */
typedef struct {
    slice_net *nets;
    cost_dma *dma[4];
    cost_memo *memo[4]; /* prices of the tile search's candidates: one
                           split and batch lowers alike on every slice */
} worker_cache;

#define ADVISE_NETS 32

/* The worker's interconnect of c's slice, made on first use; NULL when
 * the table is full or memory runs out (the run then makes its own). */
static ici *net_of(const advise_opts *o, const advise_cand *c,
                   slice_net *nets)
{
    int k = 0;
    for (; k < ADVISE_NETS && nets[k].sys; k++)
        if (nets[k].sys == c->sys)
            return nets[k].net;
    if (k == ADVISE_NETS)
        return NULL;
    tpu_params hw;
    tpu_error e2 = {0};
    if (cand_params(o, c, &hw, &e2))
        return NULL;
    nets[k].net = ici_new(&hw.ici, c->sys->dim_x, c->sys->dim_y,
                          c->sys->full_pod);
    nets[k].sys = nets[k].net ? c->sys : NULL;
    return nets[k].net;
}

/* Lends so the worker's DMA costs and prices for c's generation, made on
 * first use (left NULL when they cannot be: the run makes its own). */
static void lend_gen(const advise_opts *o, const advise_cand *c,
                     worker_cache *wc, sim_opts *so)
{
    int gen = c->sys->gen;
    if (gen < 0 || gen >= 4)
        return;
    if (!wc->dma[gen] && !wc->memo[gen]) {
        tpu_params hw;
        tpu_error e2 = {0};
        if (cand_params(o, c, &hw, &e2))
            return;
        wc->dma[gen] = cost_dma_new(&hw);
        wc->memo[gen] = cost_memo_new(&hw);
    }
    so->dma_costs = wc->dma[gen];
    so->price_memo = wc->memo[gen];
}

static void simulate(const advise_opts *o, const graph *g, advise_cand *c,
                     worker_cache *wc)
{
    sim_opts so;
    cand_opts(o, c, &so);
    so.net = wc && wc->nets ? net_of(o, c, wc->nets) : NULL;
    if (wc)
        lend_gen(o, c, wc, &so);
    emu_result r;
    tpu_error err = {0};
    tpu_status st = sim_run(g, &so, &r, &err);
    if (st == TPU_OK) {
        c->state = ADV_FITS;
        take_timing(c, &r);
        c->hbm_need_bytes = r.hbm_needed_bytes;
        c->hbm_cap_bytes = r.hbm_capacity_bytes;
    } else if (st == TPU_ERR_NOFIT) {
        c->state = ADV_NOFIT;
        c->hbm_need_bytes = r.hbm_needed_bytes;
        c->hbm_cap_bytes = r.hbm_capacity_bytes;
    } else {
        c->state = st == TPU_ERR_INPUT ? ADV_INVALID : ADV_FAILED;
        snprintf(c->why, sizeof c->why, "%s", err.msg);
    }
    emu_result_free(&r);
}

static void run_one(pool *pl, advise_cand *c, worker_cache *wc)
{
    const advise_opts *o = pl->o;
    pthread_mutex_lock(&pl->mu);
    int64_t nofit = pl->nofit_min[c->split], fit = pl->fit_max[c->split];
    int done = o->first_fits &&
               (pl->slice_cpr[c->slice] ? c->cpr > pl->slice_cpr[c->slice]
                                        : pl->slices_found >= o->first_fits);
    pthread_mutex_unlock(&pl->mu);
    if (done) {
        c->state = ADV_SKIPPED;
        c->pruned = 1;
        return;
    }
    /* HBM need grows with the examples per replica: a miss at a smaller
     * batch of the same split is a miss here too, whatever the slice */
    if (c->per_replica >= nofit) {
        c->state = ADV_NOFIT;
        c->pruned = 1;
        return;
    }
    const graph *g = &pl->vg[c->split];
    if (o->fit_only && c->per_replica <= fit) {
        c->state = ADV_FITS;
        c->pruned = 1;
    } else if (o->fit_only) {
        c->state = fit_check(o, g, c);
    } else {
        simulate(o, g, c, wc);
    }
    pthread_mutex_lock(&pl->mu);
    if (c->state == ADV_NOFIT && c->per_replica < pl->nofit_min[c->split])
        pl->nofit_min[c->split] = c->per_replica;
    if (c->state == ADV_FITS && c->per_replica > pl->fit_max[c->split])
        pl->fit_max[c->split] = c->per_replica;
    if (o->first_fits && c->state == ADV_FITS &&
        (!pl->slice_cpr[c->slice] || c->cpr < pl->slice_cpr[c->slice])) {
        pl->slices_found += !pl->slice_cpr[c->slice];
        pl->slice_cpr[c->slice] = c->cpr;
    }
    pthread_mutex_unlock(&pl->mu);
}

static void *worker(void *arg)
{
    pool *pl = arg;
    worker_cache wc = {calloc(ADVISE_NETS, sizeof(slice_net)), {NULL},
                       {NULL}};
    for (;;) {
        pthread_mutex_lock(&pl->mu);
        int i = pl->next < pl->res->n ? pl->order[pl->next++] : -1;
        pthread_mutex_unlock(&pl->mu);
        if (i < 0) {
            for (int k = 0; wc.nets && k < ADVISE_NETS && wc.nets[k].sys;
                 k++)
                ici_free(wc.nets[k].net);
            free(wc.nets);
            for (int k = 0; k < 4; k++) {
                cost_dma_free(wc.dma[k]);
                cost_memo_free(wc.memo[k]);
            }
            return NULL;
        }
        advise_cand *c = &pl->res->c[i];
        if (pl->o->deadline_s > 0 && now_s() - pl->t0 > pl->o->deadline_s) {
            c->state = ADV_SKIPPED;
            continue;
        }
        run_one(pl, c, &wc);
    }
}

/* Candidates are taken split by split, the fewest examples per replica
 * first, so that a miss prunes the larger batches of its split before
 * they are tried; the slices of one batch follow each other (the same
 * HBM need). */
typedef struct {
    int split, cores, idx;
    int64_t per_replica;
} order_key;

/* first_fits: the smallest slices first, on each the fewest cores per
 * replica first (split order breaks ties). */
static int by_slice_cpr(const void *a, const void *b)
{
    const order_key *x = a, *y = b;
    if (x->cores != y->cores)
        return x->cores < y->cores ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static int by_split_batch(const void *a, const void *b)
{
    const order_key *x = a, *y = b;
    if (x->split != y->split)
        return x->split < y->split ? -1 : 1;
    if (x->per_replica != y->per_replica)
        return x->per_replica < y->per_replica ? -1 : 1;
    if (x->cores != y->cores)
        return x->cores < y->cores ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static int default_jobs(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > ADVISE_MAX_JOBS ? ADVISE_MAX_JOBS : (int)n;
}

/* Every candidate of the slices and splits, in res->c. */
static int make_candidates(const advise_opts *o, advise_result *res,
                           int64_t batch, int max_cpr)
{
    int cap = 64;
    res->c = malloc((size_t)cap * sizeof *res->c);
    if (!res->c)
        return -1;
    for (int si = 0; si < o->nslices; si++) {
        const tpu_system *sys = o->slices[si];
        int lo, hi;
        cpr_range(sys, batch, max_cpr, &lo, &hi);
        for (int k = 0; k < res->nsplits; k++) {
            const advise_split *sp = &res->split[k];
            if (!sp->ok || sp->cpr < lo || sp->cpr > hi ||
                sys->cores % sp->cpr != 0)
                continue;
            if (res->n == cap) {
                advise_cand *w =
                    realloc(res->c, (size_t)(cap *= 2) * sizeof *res->c);
                if (!w)
                    return -1;
                res->c = w;
            }
            advise_cand *c = &res->c[res->n++];
            memset(c, 0, sizeof *c);
            c->sys = sys;
            c->slice = si;
            c->split = k;
            c->cpr = sp->cpr;
            c->replicas = sys->cores / sp->cpr;
            c->chips = (sys->cores + 1) / 2;
            c->global_batch = batch;
            c->per_replica = batch / c->replicas;
            /* a batch the replicas cannot share is `run`'s refusal, not
             * worth a simulation to hear */
            c->state = batch % c->replicas ? ADV_INVALID : ADV_SKIPPED;
        }
    }
    return 0;
}

/* Throughput and cost of the candidates that fit. */
static void derive(const advise_opts *o, advise_result *res)
{
    for (int i = 0; i < res->n; i++) {
        advise_cand *c = &res->c[i];
        if (c->state != ADV_FITS || !(c->step_s > 0))
            continue;
        double price =
            o->usd_chip_hour > 0 ? o->usd_chip_hour : advise_price(c->sys->gen);
        c->ex_per_s = (double)c->global_batch / c->step_s;
        c->ex_per_s_chip = c->ex_per_s / c->chips;
        c->usd_per_mex = advise_usd_per_mex(c->ex_per_s, c->chips, price);
    }
}

static int run_pool(const advise_opts *o, advise_result *res, graph *vg)
{
    pool pl;
    memset(&pl, 0, sizeof pl);
    pl.o = o;
    pl.res = res;
    pl.vg = vg;
    pl.t0 = now_s();
    pl.order = malloc((size_t)(res->n ? res->n : 1) * sizeof *pl.order);
    order_key *keys = malloc((size_t)(res->n ? res->n : 1) * sizeof *keys);
    pl.nofit_min = malloc((size_t)res->nsplits * sizeof *pl.nofit_min);
    pl.fit_max = malloc((size_t)res->nsplits * sizeof *pl.fit_max);
    pl.slice_cpr =
        calloc((size_t)(o->nslices ? o->nslices : 1), sizeof *pl.slice_cpr);
    int rc = -1;
    if (!pl.order || !keys || !pl.nofit_min || !pl.fit_max || !pl.slice_cpr)
        goto done;
    for (int k = 0; k < res->nsplits; k++) {
        pl.nofit_min[k] = INT64_MAX;
        pl.fit_max[k] = 0;
    }
    int n = 0;
    for (int i = 0; i < res->n; i++)
        if (res->c[i].state == ADV_SKIPPED && !res->c[i].pruned)
            keys[n++] = (order_key){res->c[i].split, res->c[i].sys->cores, i,
                                    res->c[i].per_replica};
    qsort(keys, (size_t)n, sizeof *keys,
          o->first_fits ? by_slice_cpr : by_split_batch);
    for (int i = 0; i < n; i++)
        pl.order[i] = keys[i].idx;
    /* the pool takes order[0..n); the invalid ones stay as they are */
    advise_result view = *res;
    view.n = n;
    pl.res = &view;
    pthread_mutex_init(&pl.mu, NULL);
    int jobs = o->jobs > 0 ? o->jobs : default_jobs();
    if (jobs > n)
        jobs = n > 0 ? n : 1;
    pthread_t th[ADVISE_MAX_JOBS];
    int started = 0;
    for (int j = 1; j < jobs && j < ADVISE_MAX_JOBS; j++) {
        if (pthread_create(&th[started], NULL, worker, &pl) != 0)
            break;
        started++;
    }
    worker(&pl);
    for (int j = 0; j < started; j++)
        pthread_join(th[j], NULL);
    pthread_mutex_destroy(&pl.mu);
    rc = 0;
done:
    free(pl.order);
    free(keys);
    free(pl.nofit_min);
    free(pl.fit_max);
    free(pl.slice_cpr);
    return rc;
}

/* The slice a split of cpr cores per replica is ranked on before a
 * larger slice simulates it: the smallest of gen holding one replica (and
 * not the one-chip v?-2). */
static const tpu_system *proxy_slice(int gen, int cpr)
{
    const tpu_system *best = NULL;
    for (const tpu_system *t = tpu_systems(); t->name; t++)
        if (t->gen == gen && t->cores > 2 && t->cores >= cpr &&
            (!best || t->cores < best->cores))
            best = t;
    return best;
}

/* Same cores per replica and examples per replica. */
static int same_group(const advise_cand *a, const advise_cand *b)
{
    return a->cpr == b->cpr && a->per_replica == b->per_replica &&
           a->sys->gen == b->sys->gen;
}

/* On a slice larger than the proxy, the splits of one cores-per-replica
 * and batch per replica differ in their replica's work, halos and HBM
 * need, which the proxy slice has the same; what the larger slice adds,
 * the gradient all-reduce over more replicas, is the same for every
 * split (the same weights).  So each group's splits are simulated on the
 * proxy first and only its keep_splits fastest on the larger slice (the
 * ICI model's cost grows with the slice: a v3-1024 step takes seconds to
 * simulate, a v3-32 one a tenth of that).  -1 when out of memory. */
static int rank_on_proxies(const advise_opts *o, advise_result *res, graph *vg)
{
    advise_result px = *res;
    px.c = malloc((size_t)(res->n ? res->n : 1) * sizeof *px.c);
    int *of = malloc((size_t)(res->n ? res->n : 1) * sizeof *of);
    if (!px.c || !of) {
        free(px.c);
        free(of);
        return -1;
    }
    px.n = 0;
    for (int i = 0; i < res->n; i++) {
        advise_cand *c = &res->c[i];
        const tpu_system *p = proxy_slice(c->sys->gen, c->cpr);
        of[i] = -1;
        if (c->state == ADV_INVALID || !p || p->cores >= c->sys->cores)
            continue;
        int many = 0;
        for (int j = 0; j < res->n; j++)
            many |=
                j != i && res->c[j].sys == c->sys && same_group(&res->c[j], c);
        if (!many)
            continue;
        /* one proxy per group and split */
        for (int k = 0; k < px.n && of[i] < 0; k++)
            if (px.c[k].split == c->split && same_group(&px.c[k], c))
                of[i] = k;
        if (of[i] >= 0)
            continue;
        advise_cand *q = &px.c[px.n];
        *q = *c;
        q->sys = p;
        q->slice = 0;
        q->replicas = p->cores / c->cpr;
        q->chips = (p->cores + 1) / 2;
        q->global_batch = c->per_replica * q->replicas;
        q->state = ADV_SKIPPED;
        of[i] = px.n++;
    }
    int rc = px.n ? run_pool(o, &px, vg) : 0;
    for (int i = 0; !rc && i < res->n; i++) {
        if (of[i] < 0)
            continue;
        advise_cand *c = &res->c[i];
        const advise_cand *q = &px.c[of[i]];
        if (q->state == ADV_NOFIT) {
            c->state = ADV_NOFIT;
            c->pruned = 1;
            c->hbm_need_bytes = q->hbm_need_bytes;
            c->hbm_cap_bytes = q->hbm_cap_bytes;
            continue;
        }
        if (q->state != ADV_FITS || o->keep_splits <= 0)
            continue;
        int faster = 0;
        for (int k = 0; k < px.n; k++)
            faster += same_group(&px.c[k], q) && px.c[k].state == ADV_FITS &&
                      (px.c[k].step_s < q->step_s ||
                       (px.c[k].step_s == q->step_s && k < of[i]));
        if (faster >= o->keep_splits) {
            c->state = ADV_SKIPPED;
            c->pruned = 1;
            c->step_s = q->step_s; /* the proxy's, for the count only */
        }
    }
    free(px.c);
    free(of);
    return rc;
}

tpu_status advise_search(const advise_opts *o, advise_result *res,
                         tpu_error *err)
{
    memset(res, 0, sizeof *res);
    double t0 = now_s();
    int64_t batch = o->global_batch > 0 ? o->global_batch : o->g->global_batch;
    int max_cpr = o->max_cpr > 0 ? o->max_cpr : ADVISE_MAX_CPR;
    int top = max_cpr;
    for (int si = 0; si < o->nslices; si++) {
        int lo, hi;
        cpr_range(o->slices[si], batch, max_cpr, &lo, &hi);
        if (hi > top)
            top = hi;
    }
    int n = list_splits(o->g, top, &res->split);
    if (n < 0)
        return tpu_fail(err, TPU_ERR_SYSTEM, "out of memory");
    res->nsplits = n;
    graph *vg = calloc((size_t)(n ? n : 1), sizeof *vg);
    if (!vg)
        return tpu_fail(err, TPU_ERR_SYSTEM, "out of memory");
    tpu_status st = TPU_OK;
    for (int k = 0; k < n && !st; k++) {
        tpu_error e = {0};
        tpu_status vs = variant_graph(o, &res->split[k], &vg[k], &e);
        res->split[k].ok = vs == TPU_OK;
        if (vs == TPU_ERR_SYSTEM)
            st = tpu_fail(err, TPU_ERR_SYSTEM, "%s", e.msg);
        else if (vs)
            snprintf(res->split[k].why, sizeof res->split[k].why, "%s", e.msg);
    }
    if (!st && make_candidates(o, res, batch, max_cpr))
        st = tpu_fail(err, TPU_ERR_SYSTEM, "out of memory");
    if (!st && !o->fit_only && rank_on_proxies(o, res, vg))
        st = tpu_fail(err, TPU_ERR_SYSTEM, "out of memory");
    if (!st && run_pool(o, res, vg))
        st = tpu_fail(err, TPU_ERR_SYSTEM, "out of memory");
    for (int k = 0; k < n; k++)
        graph_free(&vg[k]);
    free(vg);
    for (int i = 0; !st && i < res->n; i++)
        res->skipped += res->c[i].state == ADV_SKIPPED && !res->c[i].pruned;
    if (!st)
        derive(o, res);
    res->elapsed_s = now_s() - t0;
    return st;
}

/* ---- ranges ----------------------------------------------------------- */

tpu_status advise_range(const advise_opts *o, const advise_result *res,
                        advise_cand *c, tpu_error *err)
{
    if (c->state != ADV_FITS || c->has_range)
        return TPU_OK;
    graph g;
    tpu_status st = variant_graph(o, &res->split[c->split], &g, err);
    if (st) {
        graph_free(&g);
        return st;
    }
    sim_opts so;
    cand_opts(o, c, &so);
    emu_result r;
    memset(&r, 0, sizeof r);
    st = sim_run(&g, &so, &r, err);
    range_result rr;
    memset(&rr, 0, sizeof rr);
    if (!st)
        st = range_compute(&g, &so, &r, 0, &rr, err);
    emu_result_free(&r);
    memset(&r, 0, sizeof r);
    if (!st)
        st = range_to_result(&rr, &r, err);
    if (!st) {
        c->has_range = 1;
        c->step_lo_s = rr.low_s;
        c->step_hi_s = rr.high_s;
        c->range = r.range; /* taken from r */
        c->n_range = r.n_range;
        r.range = NULL;
        r.n_range = 0;
    }
    range_free(&rr);
    emu_result_free(&r);
    graph_free(&g);
    return st;
}

/* ---- run's suggestions ---------------------------------------------- */

/* How long run's search may take: the answer to a step that does not fit
 * is worth a moment, not a wait. */
#define ADVISE_SUGGEST_S 1.5
/* Lines of each kind. */
#define ADVISE_SUGGEST_LINES 3

static void suggest_line(const advise_result *res, const advise_cand *c)
{
    const advise_split *sp = &res->split[c->split];
    char pd[64] = "";
    size_t len = 0;
    for (int k = 0; k < sp->rank; k++)
        len += (size_t)snprintf(pd + len, sizeof pd - len, "%s%d", k ? "," : "",
                                sp->pd[k]);
    fprintf(stderr,
            "tpuemu: note: fits on %s with input_partition_dims [%s]: %d "
            "core%s per replica, %lld example%s per replica\n",
            c->sys->name, pd, c->cpr, c->cpr == 1 ? "" : "s",
            (long long)c->per_replica, c->per_replica == 1 ? "" : "s");
}

void advise_suggest(const char *trace_path, const char *system,
                    int64_t global_batch, const char *freeze, int n_sets,
                    const char *const *set_keys, const char *const *set_values)
{
    const tpu_system *own = tpu_system_find(system);
    cJSON *doc = NULL;
    char *raw = NULL, shown[1100];
    size_t raw_len = 0;
    tpu_error err = {0};
    graph g;
    memset(&g, 0, sizeof g);
    if (!own ||
        keras_read(trace_path, &doc, &raw, &raw_len, shown, (int)sizeof shown,
                   &err) ||
        !keras_is_trace(doc) ||
        graph_parse(&g, raw, raw_len, trace_path, &err)) {
        cJSON_Delete(doc);
        free(raw);
        graph_free(&g);
        return;
    }
    free(raw);
    const tpu_system *slices[32];
    int ns = 0;
    for (const tpu_system *t = tpu_systems(); t->name && ns < 32; t++)
        if (t->gen == own->gen && (t->cores > own->cores || t == own))
            slices[ns++] = t;
    advise_opts o;
    memset(&o, 0, sizeof o);
    o.path = trace_path;
    o.base = doc;
    o.g = &g;
    o.slices = slices;
    o.nslices = ns;
    o.global_batch = global_batch;
    o.freeze = freeze;
    o.n_sets = n_sets;
    o.set_keys = set_keys;
    o.set_values = set_values;
    o.fit_only = 1;
    o.first_fits = 1 + ADVISE_SUGGEST_LINES;
    o.deadline_s = ADVISE_SUGGEST_S;
    advise_result res;
    if (advise_search(&o, &res, &err) == TPU_OK) {
        /* on the run's own slice: the fits with the fewest cores per
         * replica, in split order */
        int shown_n = 0, best_cpr = 0;
        for (int i = 0; i < res.n && shown_n < ADVISE_SUGGEST_LINES; i++) {
            const advise_cand *c = &res.c[i];
            if (c->sys != own || c->state != ADV_FITS ||
                (best_cpr && c->cpr > best_cpr))
                continue;
            best_cpr = c->cpr;
            suggest_line(&res, c);
            shown_n++;
        }
        /* the smallest other slices on which some split fits, each with
         * its split of fewest cores per replica */
        int more = 0;
        for (int si = 0; si < ns && more < ADVISE_SUGGEST_LINES; si++) {
            if (slices[si] == own || slices[si]->cores < own->cores)
                continue;
            for (int i = 0; i < res.n; i++)
                if (res.c[i].sys == slices[si] && res.c[i].state == ADV_FITS) {
                    suggest_line(&res, &res.c[i]);
                    more++;
                    break;
                }
        }
        if (shown_n + more == 0 && res.skipped == 0)
            fprintf(stderr,
                    "tpuemu: note: no split of up to %d cores per "
                    "replica fits on any v%d slice at global batch "
                    "%lld\n",
                    ADVISE_MAX_CPR, own->gen, (long long)global_batch);
        if (res.skipped)
            fprintf(stderr,
                    "tpuemu: note: %d of %d candidates not tried "
                    "in %.1f s (tpuemu advise %s searches them "
                    "all)\n",
                    res.skipped, res.n, ADVISE_SUGGEST_S, trace_path);
    }
    advise_result_free(&res);
    cJSON_Delete(doc);
    graph_free(&g);
}
