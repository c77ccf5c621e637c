/* ici — the inter-chip interconnect of a TPU v2/v3 slice: topology,
 * routing, statistics, and the public calls (ici.h), each simulated by
 * interconnect/flow.c over the flows interconnect/allreduce.c (or the
 * permute here) builds.
 *
 * Topology (docs/ICI.md; Jouppi et al., CACM 2020; Norrie et al., IEEE
 * Micro 2021): chips on a dim_x x dim_y 2D torus, four links per chip
 * (+x, -x, +y, -y), each one-way with its own bandwidth and latency; the
 * two TensorCores of a chip share the chip's router and links and reach
 * each other over an on-chip path.  Full pods wrap in both dimensions;
 * whether a partial slice wraps is the [U] parameter ici.wrap (default 0:
 * a slice is a rectangle cut out of the pod's torus, so its edge links
 * lead out of the slice).
 *
 * The simulation of one call always starts from idle links at time 0 and
 * is shifted by t_start at the end; that makes the result of a call a
 * pure function of (cores, bytes, params), which is what lets identical
 * calls be replayed from a cache bit for bit.
 */
#include "interconnect/ici.h"

#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

#include "interconnect/ici_internal.h"

/* ---- host memory of a call ---------------------------------------------- */

/* Out of host memory: back to the entry point of the running call. */
static void mem_fail(ici_mem *m)
{
    TPU_ASSERT(m->armed); /* an allocation outside a guarded call */
    longjmp(m->jb, 1);
}

/* realloc(p, size), or unwinds the call (p is then left as it was). */
void *ici_ralloc(ici_mem *m, void *p, size_t size)
{
    void *q = NULL;
    if (m->fail_after < 0 || m->fail_after-- > 0)
        q = realloc(p, size ? size : 1);
    if (!q)
        mem_fail(m);
    return q;
}

/* A block that lives within one call: freed by ici_tmp_free, by the unwind,
 * or handed to the object by ici_tmp_keep. */
void *ici_tmp_alloc(ici_mem *m, size_t size)
{
    TPU_ASSERT(m->ntmp < ICI_NTMP);
    void *p = ici_ralloc(m, NULL, size);
    m->tmp[m->ntmp++] = p;
    return p;
}

void *ici_tmp_calloc(ici_mem *m, size_t count, size_t size)
{
    void *p = ici_tmp_alloc(m, count * size);
    memset(p, 0, count * size);
    return p;
}

void ici_tmp_keep(ici_mem *m, const void *p)
{
    for (int i = m->ntmp - 1; i >= 0; i--)
        if (m->tmp[i] == p) {
            m->tmp[i] = m->tmp[--m->ntmp];
            return;
        }
    TPU_ASSERT(0); /* not a temporary of this call */
}

void ici_tmp_free(ici_mem *m, void *p)
{
    ici_tmp_keep(m, p);
    free(p);
}

void ici_tmp_free_all(ici_mem *m)
{
    while (m->ntmp > 0)
        free(m->tmp[--m->ntmp]);
}

/* ici_grow's slow path: the capacity doubled until need fits. */
void *ici_grow_slow(ici *n, void *p, int *cap, int need, size_t elem)
{
    int c = *cap ? *cap : 256;
    while (c < need)
        c *= 2;
    void *q = ici_ralloc(&n->mem, p, (size_t)c * elem);
    *cap = c;
    return q;
}

/* ---- lifetime ----------------------------------------------------------- */

ici *ici_new(const ici_params *p, int dim_x, int dim_y, int full_pod)
{
    if (!p || dim_x < 1 || dim_y < 1 || dim_x > 4096 || dim_y > 4096 ||
        !(p->link_gbs > 0) || !(p->onchip_gbs > 0) ||
        !(p->hop_latency_s >= 0) || !(p->onchip_latency_s >= 0))
        return NULL;
    ici *n = calloc(1, sizeof *n);
    if (!n)
        return NULL;
    n->p = *p;
    n->dx = dim_x;
    n->dy = dim_y;
    n->nchips = dim_x * dim_y;
    n->ncores = 2 * n->nchips;
    n->nres = 6 * n->nchips; /* 4 link directions + 2 on-chip directions */
    int wrap = full_pod || p->wrap;
    n->wrapx = wrap && dim_x > 1;
    n->wrapy = wrap && dim_y > 1;
    n->link_bps = p->link_gbs * 1e9;
    n->onchip_bps = p->onchip_gbs * 1e9;
    size_t r = (size_t)n->nres, c = (size_t)n->ncores;
    n->stat_res = calloc(r, sizeof(double));
    n->stat_core = calloc(c, sizeof(double));
    n->res_cnt = calloc(r, sizeof(int));
    n->res_cap = calloc(r, sizeof(double));
    n->res_start = calloc(r, sizeof(int));
    n->res_len = calloc(r, sizeof(int));

    n->touched = calloc(r, sizeof(int));
    n->rl = calloc(r, sizeof(int *));
    n->rl_len = calloc(r, sizeof(int));
    n->rl_cap = calloc(r, sizeof(int));
    n->res_comp = calloc(r, sizeof(int));
    n->res_ser = calloc(r, sizeof(int));
    n->res_mark = calloc(r, sizeof(int));
    n->dirty = calloc(2 * r, sizeof(int));
    n->bres = calloc(r, sizeof(int));
    n->res_isdirty = calloc(r, 1);
    n->acc_res = calloc(r, sizeof(double));
    n->acc_core = calloc(c, sizeof(double));
    n->acc_res_list = calloc(r, sizeof(int));
    n->acc_core_list = calloc(c, sizeof(int));
    if (!n->stat_res || !n->stat_core || !n->res_cnt || !n->res_cap ||
        !n->res_start || !n->res_len || !n->touched || !n->acc_res ||
        !n->acc_core || !n->rl || !n->rl_len || !n->rl_cap || !n->res_comp ||
        !n->res_ser ||
        !n->res_mark || !n->dirty || !n->bres || !n->res_isdirty ||
        !n->acc_res_list || !n->acc_core_list) {
        ici_free(n);
        return NULL;
    }
    for (size_t i = 0; i < r; i++)
        n->res_comp[i] = -1;
    n->mem.fail_after = -1;
    return n;
}

static void cache_clear(ici_cache_ent *e)
{
    free(e->key);
    free(e->kbytes);
    free(e->res);
    free(e->res_bytes);
    free(e->core);
    free(e->core_bytes);
    memset(e, 0, sizeof *e);
}

static void dag_clear(ici_dag *d)
{
    free(d->key);
    free(d->fl);
    free(d->route);
    free(d->edge);
    free(d->res);
    free(d->core);
    free(d->res_bytes);
    free(d->core_bytes);
    memset(d, 0, sizeof *d);
}

void ici_free(ici *n)
{
    if (!n)
        return;
    for (int i = 0; i < ICI_CACHE; i++)
        cache_clear(&n->cache[i]);
    for (int i = 0; i < ICI_DAGS; i++)
        dag_clear(&n->dag[i]);
    free(n->stat_res);
    free(n->stat_core);
    free(n->fl);
    free(n->route);
    free(n->edge);
    if (n->bk)
        for (int i = 0; i < n->capbk; i++)
            free(n->bk[i].ids);
    free(n->bk);
    free(n->hash);
    free(n->bh);
    free(n->aid);
    free(n->fin);
    free(n->bfl);
    free(n->amark);
    free(n->afrz);
    free(n->aro);
    free(n->anr);
    free(n->amap);
    free(n->apool);
    free(n->sbits);
    free(n->arem);
    free(n->arate);
    free(n->atf);
    free(n->heap);
    free(n->hpos);
    if (n->rl)
        for (int i = 0; i < n->nres; i++)
            free(n->rl[i]);
    free(n->rl);
    free(n->rl_len);
    free(n->rl_cap);
    free(n->res_comp);
    free(n->res_ser);
    free(n->res_mark);
    free(n->dirty);
    free(n->bres);
    free(n->res_isdirty);
    free(n->comp);
    free(n->comp_free);
    free(n->shpool);
    free(n->rpool);
    free(n->pairs);
    free(n->g.e);
    free(n->own.e);
    free(n->chg);
    free(n->chg2);
    free(n->oldsh);
    free(n->cshares);
    free(n->res_cnt);
    free(n->res_cap);
    free(n->res_start);
    free(n->res_len);

    free(n->res_list);
    free(n->touched);
    free(n->frozen);
    free(n->acc_res);
    free(n->acc_core);
    free(n->acc_res_list);
    free(n->acc_core_list);
    free(n->key);
    free(n->kbytes);
    for (int i = 0; i < ICI_DEC; i++) {
        free(n->dec[i].key);
        free(n->dec[i].of);
    }
    free(n);
}

void ici_reset(ici *n)
{
    memset(n->stat_res, 0, (size_t)n->nres * sizeof(double));
    memset(n->stat_core, 0, (size_t)n->ncores * sizeof(double));
}

int ici_num_cores(const ici *n) { return n->ncores; }
int ici_chip_of_core(const ici *n, int core)
{
    TPU_ASSERT(core >= 0 && core < n->ncores);
    return core / 2;
}
int ici_dim_x(const ici *n) { return n->dx; }
int ici_dim_y(const ici *n) { return n->dy; }
int ici_wraps(const ici *n, int dim) { return dim == 0 ? n->wrapx : n->wrapy; }
const ici_params *ici_get_params(const ici *n) { return &n->p; }
long ici_cache_hits(const ici *n) { return n->cache_hits; }

double ici_core_bytes_sent(const ici *n, int core)
{
    TPU_ASSERT(core >= 0 && core < n->ncores);
    return n->stat_core[core];
}

double ici_link_busy_s(const ici *n, int chip, int dir)
{
    TPU_ASSERT(chip >= 0 && chip < n->nchips && dir >= 0 && dir < 4);
    return n->stat_res[4 * chip + dir] / n->link_bps;
}

double ici_onchip_busy_s(const ici *n, int chip, int from)
{
    TPU_ASSERT(chip >= 0 && chip < n->nchips && (from == 0 || from == 1));
    return n->stat_res[4 * n->nchips + 2 * chip + from] / n->onchip_bps;
}

/* ---- routing ------------------------------------------------------------ */

/* Steps and direction along one dimension from a to b (size d).  With
 * wrap links the shorter way round; a tie goes the way `pref` says, so
 * that the two rings of a bidirectional pair use opposite links. */
static int dim_steps(int a, int b, int d, int wrap, int pref, int *sign)
{
    if (a == b) {
        *sign = 1;
        return 0;
    }
    if (!wrap) {
        *sign = b > a ? 1 : -1;
        return b > a ? b - a : a - b;
    }
    int fwd = ((b - a) % d + d) % d, back = d - fwd;
    if (fwd < back || (fwd == back && pref > 0)) {
        *sign = 1;
        return fwd;
    }
    *sign = -1;
    return back;
}

/* Appends the resources of the route chip a -> chip b (x first, then y:
 * dimension-order routing, deadlock free on a torus with the usual
 * dateline virtual channels, which a fluid model need not represent). */
int ici_route_append(ici *n, int a, int b, int pref)
{
    int sx, sy;
    int ax = ici_chip_x(n, a), ay = ici_chip_y(n, a);
    int hx = dim_steps(ax, ici_chip_x(n, b), n->dx, n->wrapx, pref, &sx);
    int hy = dim_steps(ay, ici_chip_y(n, b), n->dy, n->wrapy, pref, &sy);
    n->route =
        ici_grow(n, n->route, &n->caproute, n->nroute + hx + hy, sizeof(int));
    int x = ax, y = ay;
    for (int i = 0; i < hx; i++) {
        n->route[n->nroute++] = 4 * (x + y * n->dx) + (sx > 0 ? 0 : 1);
        x = ((x + sx) % n->dx + n->dx) % n->dx;
    }
    for (int i = 0; i < hy; i++) {
        n->route[n->nroute++] = 4 * (x + y * n->dx) + (sy > 0 ? 2 : 3);
        y = ((y + sy) % n->dy + n->dy) % n->dy;
    }
    return hx + hy;
}

int ici_route_hops(const ici *n, int src_core, int dst_core)
{
    TPU_ASSERT(src_core >= 0 && src_core < n->ncores && dst_core >= 0 &&
               dst_core < n->ncores);
    int a = src_core / 2, b = dst_core / 2, sx, sy;
    return dim_steps(ici_chip_x(n, a), ici_chip_x(n, b), n->dx, n->wrapx, 1,
                     &sx) +
           dim_steps(ici_chip_y(n, a), ici_chip_y(n, b), n->dy, n->wrapy, 1,
                     &sy);
}

/* Canonical frame: the call's chips shifted so that their smallest x and
 * y are 0.  Dimension-order routes depend only on coordinate differences
 * (modulo the size of a wrapped dimension) and the group layout only on
 * the order of coordinates, which the shift keeps; so a call and its
 * shifted copy build the same DAG over relabelled links, and their
 * results are bit-identical.  This lets every partition group of a slice
 * share one cache entry. */
static void canon(const ici *n, const int *cores, int m, int *out, int *ox,
                  int *oy)
{
    int mx = n->dx, my = n->dy;
    for (int i = 0; i < m; i++) {
        int ch = cores[i] / 2;
        if (ici_chip_x(n, ch) < mx)
            mx = ici_chip_x(n, ch);
        if (ici_chip_y(n, ch) < my)
            my = ici_chip_y(n, ch);
    }
    for (int i = 0; i < m; i++) {
        int ch = cores[i] / 2;
        out[i] =
            2 * (ici_chip_x(n, ch) - mx + (ici_chip_y(n, ch) - my) * n->dx) +
            (cores[i] & 1);
    }
    *ox = mx;
    *oy = my;
}

static int shift_chip(const ici *n, int chip, int ox, int oy)
{
    int x = (ici_chip_x(n, chip) + ox) % n->dx,
        y = (ici_chip_y(n, chip) + oy) % n->dy;
    return x + y * n->dx;
}

static int shift_res(const ici *n, int r, int ox, int oy)
{
    if (r < 4 * n->nchips)
        return 4 * shift_chip(n, r / 4, ox, oy) + r % 4;
    int k = r - 4 * n->nchips;
    return 4 * n->nchips + 2 * shift_chip(n, k / 2, ox, oy) + k % 2;
}

static int shift_core(const ici *n, int c, int ox, int oy)
{
    return 2 * shift_chip(n, c / 2, ox, oy) + (c & 1);
}

/* Moves the per-call statistics into the totals and into the cache entry
 * ent, whose arrays cache_store allocated. */
static void acc_commit(ici *n, ici_cache_ent *ent, int ox, int oy)
{
    ent->nres = n->nacc_res;
    ent->ncore = n->nacc_core;
    for (int i = 0; i < n->nacc_res; i++) {
        int r = n->acc_res_list[i];
        n->stat_res[shift_res(n, r, ox, oy)] += n->acc_res[r];
        ent->res[i] = r;
        ent->res_bytes[i] = n->acc_res[r];
        n->acc_res[r] = 0;
    }
    for (int i = 0; i < n->nacc_core; i++) {
        int c = n->acc_core_list[i];
        n->stat_core[shift_core(n, c, ox, oy)] += n->acc_core[c];
        ent->core[i] = c;
        ent->core_bytes[i] = n->acc_core[c];
        n->acc_core[c] = 0;
    }
    n->nacc_res = n->nacc_core = 0;
}

/* Drops the statistics of a call that did not complete. */
static void acc_drop(ici *n)
{
    for (int i = 0; i < n->nacc_res; i++)
        n->acc_res[n->acc_res_list[i]] = 0;
    for (int i = 0; i < n->nacc_core; i++)
        n->acc_core[n->acc_core_list[i]] = 0;
    n->nacc_res = n->nacc_core = 0;
}

/* ---- the cache ---------------------------------------------------------- */

static uint64_t fnv(uint64_t h, const void *p, size_t len)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < len; i++) {
        h ^= b[i];
        h *= 1099511628211ULL;
    }
    return h;
}

static uint64_t key_hash(int kind, double bytes, int gs, int ng,
                         const int *key, int nkey, const double *kb)
{
    uint64_t h = 1469598103934665603ULL;
    h = fnv(h, &kind, sizeof kind);
    h = fnv(h, &bytes, sizeof bytes);
    h = fnv(h, &gs, sizeof gs);
    h = fnv(h, &ng, sizeof ng);
    h = fnv(h, key, (size_t)nkey * sizeof(int));
    if (kb)
        h = fnv(h, kb, (size_t)(nkey / 2) * sizeof(double));
    return h;
}

static ici_cache_ent *cache_find(ici *n, uint64_t h, int kind, double bytes,
                                 int gs, int ng, const int *key, int nkey,
                                 const double *kb)
{
    for (int i = 0; i < ICI_CACHE; i++) {
        ici_cache_ent *e = &n->cache[i];
        if (!e->key || e->hash != h || e->kind != kind || e->nkey != nkey ||
            e->group_size != gs || e->ngroups != ng ||
            memcmp(&e->bytes, &bytes, sizeof bytes) != 0 ||
            memcmp(e->key, key, (size_t)nkey * sizeof(int)) != 0)
            continue;
        if (kb && memcmp(e->kbytes, kb, (size_t)(nkey / 2) * sizeof(double)))
            continue;
        return e;
    }
    return NULL;
}

static double cache_replay(ici *n, const ici_cache_ent *e, int ox, int oy)
{
    for (int i = 0; i < e->nres; i++)
        n->stat_res[shift_res(n, e->res[i], ox, oy)] += e->res_bytes[i];
    for (int i = 0; i < e->ncore; i++)
        n->stat_core[shift_core(n, e->core[i], ox, oy)] += e->core_bytes[i];
    n->cache_hits++;
    return e->dur;
}

/* Stores a simulated call's result in the next cache slot and moves its
 * statistics into the totals.  Everything is allocated before the slot is
 * overwritten or a statistic moves: a call that runs out of memory here
 * leaves the cache and the totals as they were. */
static void cache_store(ici *n, uint64_t h, int kind, double bytes, int gs,
                        int ng, const int *key, int nkey, const double *kb,
                        double dur, int ox, int oy)
{
    ici_mem *m = &n->mem;
    size_t nr = (size_t)n->nacc_res + 1, nc = (size_t)n->nacc_core + 1;
    int *k = ici_tmp_alloc(m, (size_t)(nkey + 1) * sizeof(int));
    double *kbs =
        kb ? ici_tmp_alloc(m, (size_t)(nkey / 2 + 1) * sizeof(double)) : NULL;
    int *res = ici_tmp_alloc(m, nr * sizeof(int));
    double *res_bytes = ici_tmp_alloc(m, nr * sizeof(double));
    int *core = ici_tmp_alloc(m, nc * sizeof(int));
    double *core_bytes = ici_tmp_alloc(m, nc * sizeof(double));
    ici_tmp_keep(m, k);
    if (kbs)
        ici_tmp_keep(m, kbs);
    ici_tmp_keep(m, res);
    ici_tmp_keep(m, res_bytes);
    ici_tmp_keep(m, core);
    ici_tmp_keep(m, core_bytes);
    ici_cache_ent *e = &n->cache[n->cache_next];
    n->cache_next = (n->cache_next + 1) % ICI_CACHE;
    cache_clear(e);
    e->key = k;
    memcpy(e->key, key, (size_t)nkey * sizeof(int));
    if (kbs) {
        e->kbytes = kbs;
        memcpy(e->kbytes, kb, (size_t)(nkey / 2) * sizeof(double));
    }
    e->hash = h;
    e->kind = kind;
    e->bytes = bytes;
    e->group_size = gs;
    e->ngroups = ng;
    e->nkey = nkey;
    e->dur = dur;
    e->res = res;
    e->res_bytes = res_bytes;
    e->core = core;
    e->core_bytes = core_bytes;
    acc_commit(n, e, ox, oy);
}

/* Unwinding from a call that ran out of host memory: its temporaries
 * freed, the run state idle (what flow_run expects of a finished call:
 * empty resource lists, no counts left by fill, no per-call statistics),
 * the totals and the cache untouched. */
static void call_failed(ici *n)
{
    ici_tmp_free_all(&n->mem);
    n->mem.armed = 0;
    flow_abort(n);
    acc_drop(n);
}

/* ---- collective-permute ------------------------------------------------- */

/* The duration of a permute (simulated from idle links, or replayed). */
static double permute_run(ici *n, const ici_flow *flows, int nflows)
{
    n->key = ici_grow(n, n->key, &n->capkey, 2 * nflows, sizeof(int));
    n->kbytes = ici_grow(n, n->kbytes, &n->capkbytes, nflows, sizeof(double));
    int *key = n->key;
    double *kb = n->kbytes;
    for (int i = 0; i < nflows; i++) {
        TPU_ASSERT(flows[i].src_core >= 0 && flows[i].src_core < n->ncores);
        TPU_ASSERT(flows[i].dst_core >= 0 && flows[i].dst_core < n->ncores);
        key[2 * i] = flows[i].src_core;
        key[2 * i + 1] = flows[i].dst_core;
        kb[i] = flows[i].bytes;
    }
    int ox, oy;
    canon(n, key, 2 * nflows, key, &ox, &oy);
    uint64_t h = key_hash(1, 0, 0, 0, key, 2 * nflows, kb);
    ici_cache_ent *e = cache_find(n, h, 1, 0, 0, 0, key, 2 * nflows, kb);
    double dur;
    if (e) {
        dur = cache_replay(n, e, ox, oy);
    } else {
        flow_begin(n);
        for (int i = 0; i < nflows; i++)
            flow_add(n, key[2 * i], key[2 * i + 1], kb[i], 1);
        dur = flow_run(n);
        cache_store(n, h, 1, 0, 0, 0, key, 2 * nflows, kb, dur, ox, oy);
    }
    return dur;
}

/* The public calls do their work in a *_guarded function that sets the
 * jmp_buf an allocation failure unwinds to (see ici_mem) and calls the
 * *_run function that does it: nothing of the function that called setjmp
 * changes before a longjmp, and nothing but its arguments is live across
 * setjmp (GCC's -Wclobbered, under ASan, counts the caller's t_start). */
static double permute_guarded(ici *n, const ici_flow *flows, int nflows)
{
    if (setjmp(n->mem.jb)) {
        call_failed(n);
        return ICI_NO_MEMORY;
    }
    n->mem.armed = 1;
    double dur = permute_run(n, flows, nflows);
    n->mem.armed = 0;
    return dur;
}

double ici_permute(ici *n, const ici_flow *flows, int nflows, double t_start)
{
    TPU_ASSERT(nflows >= 0 && (nflows == 0 || flows));
    if (nflows == 0)
        return t_start;
    double dur = permute_guarded(n, flows, nflows);
    return dur < 0 ? ICI_NO_MEMORY : t_start + dur;
}

/* ---- group structure ---------------------------------------------------- */

tpu_status ici_check_group(const ici *n, const int *cores, int ncores,
                           tpu_error *e)
{
    if (ncores < 1 || !cores)
        return tpu_fail(e, TPU_ERR_INPUT, "empty group of cores");
    if (ncores > n->ncores)
        return tpu_fail(e, TPU_ERR_INPUT, "group of %d cores on a %d-core "
                        "slice", ncores, n->ncores);
    unsigned char *seen = calloc((size_t)n->ncores, 1);
    if (!seen)
        return tpu_fail(e, TPU_ERR_SYSTEM, "out of memory");
    tpu_status st = TPU_OK;
    for (int i = 0; i < ncores && st == TPU_OK; i++) {
        int c = cores[i];
        if (c < 0 || c >= n->ncores)
            st = tpu_fail(e, TPU_ERR_INPUT, "core %d is not on this %d-core "
                          "slice", c, n->ncores);
        else if (seen[c]++)
            st = tpu_fail(e, TPU_ERR_INPUT, "core %d is twice in the group",
                          c);
    }
    free(seen);
    return st;
}

/* What ici_check_group checks, asserted (the collectives' callers
 * check their groups), with its scratch from the call's memory. */
void ici_assert_group(const ici *n, ici_mem *m, const int *cores,
                  int ncores)
{
    TPU_ASSERT(cores && ncores >= 1 && ncores <= n->ncores);
    unsigned char *seen = ici_tmp_calloc(m, (size_t)n->ncores, 1);
    for (int i = 0; i < ncores; i++) {
        int c = cores[i];
        TPU_ASSERT(c >= 0 && c < n->ncores && !seen[c]);
        seen[c] = 1;
    }
    ici_tmp_free(m, seen);
}

/* ---- all-reduce --------------------------------------------------------- */

/* Union-find over groups: the root of group g. */
static int dec_root(int *up, int g)
{
    while (up[g] != g) {
        up[g] = up[up[g]];
        g = up[g];
    }
    return g;
}

/* Splits the groups of a call (key: canonical cores, ngroups of gs) into
 * clusters whose flows share no resource: each group's flows are built
 * (routes do not depend on the bytes, so one byte each) and groups that
 * meet on a link or an on-chip path are joined.  *of receives each
 * group's cluster, numbered in the order of their first groups; returns
 * the number of clusters.  The splits of the last ICI_DEC keys are kept:
 * every all-reduce of one partition layout has the same key. */
static int decompose(ici *n, const int *key, int gs, int ng, const int **of)
{
    int total = gs * ng;
    /* its own splits, then the lender's (the same topology) */
    for (int i = 0; i < 2 * ICI_DEC; i++) {
        const ici *src = i < ICI_DEC ? n : n->lender;
        if (!src)
            break;
        const ici_dec *d = &src->dec[i % ICI_DEC];
        if (d->nkey == total && d->gs == gs && d->ng == ng &&
            memcmp(d->key, key, (size_t)total * sizeof(int)) == 0) {
            *of = d->of;
            return d->nc;
        }
    }
    ici_dec *d = &n->dec[n->dec_next];
    d->nkey = 0; /* invalid until complete (an unwind may come) */
    d->key = ici_ralloc(&n->mem, d->key, (size_t)total * sizeof(int));
    d->of = ici_ralloc(&n->mem, d->of, (size_t)ng * sizeof(int));
    /* per resource: the first group whose flows cross it */
    int *own = ici_tmp_alloc(&n->mem, (size_t)n->nres * sizeof(int));
    for (int r = 0; r < n->nres; r++)
        own[r] = -1;
    int *up = d->of;
    for (int g = 0; g < ng; g++)
        up[g] = g;
    flow_begin(n);
    for (int g = 0; g < ng; g++) {
        int f0 = n->nfl;
        allreduce_build(n, key + g * gs, gs, 1.0);
        for (int f = f0; f < n->nfl; f++)
            for (int h = 0; h < n->fl[f].nr; h++) {
                int r = n->route[n->fl[f].r0 + h];
                if (own[r] < 0) {
                    own[r] = g;
                } else {
                    int a = dec_root(up, own[r]), b = dec_root(up, g);
                    if (a != b)
                        up[a > b ? a : b] = a < b ? a : b;
                }
            }
    }
    ici_tmp_free(&n->mem, own);
    flow_begin(n);
    acc_drop(n);
    /* a cluster's root is its smallest group (unions keep the smaller
     * root): the clusters numbered in the order of their roots */
    int *lab = ici_tmp_alloc(&n->mem, (size_t)ng * sizeof(int));
    int nc = 0;
    for (int g = 0; g < ng; g++) {
        int r = dec_root(up, g);
        lab[g] = r == g ? nc++ : lab[r];
    }
    memcpy(up, lab, (size_t)ng * sizeof(int));
    ici_tmp_free(&n->mem, lab);
    memcpy(d->key, key, (size_t)total * sizeof(int));
    d->gs = gs;
    d->ng = ng;
    d->nc = nc;
    d->nkey = total;
    n->dec_next = (n->dec_next + 1) % ICI_DEC;
    *of = d->of;
    return nc;
}

/* ---- flows kept and borrowed ------------------------------------------- */

void ici_keep_flows(ici *n)
{
    n->keep = 1;
}

void ici_borrow_flows(ici *n, const ici *lender)
{
    if (lender && lender != n && lender->dx == n->dx && lender->dy == n->dy &&
        lender->wrapx == n->wrapx && lender->wrapy == n->wrapy)
        n->lender = lender;
}

/* The lender's DAG of this call, or NULL. */
static const ici_dag *dag_find(const ici *n, const int *key, int gs, int ng,
                               double bytes)
{
    if (!n->lender)
        return NULL;
    for (int i = 0; i < ICI_DAGS; i++) {
        const ici_dag *d = &n->lender->dag[i];
        if (d->nkey == gs * ng && d->gs == gs && d->ng == ng &&
            memcmp(&d->bytes, &bytes, sizeof bytes) == 0 &&
            memcmp(d->key, key, (size_t)d->nkey * sizeof(int)) == 0)
            return d;
    }
    return NULL;
}

/* The flows of ng groups of gs cores (key, canonical) all-reducing bytes
 * each, with the statistics they add, as allreduce_build makes them:
 * copied from the lender's DAG when it has this call's, else built. */
static void allreduce_flows(ici *n, const int *key, int gs, int ng,
                            double bytes)
{
    const ici_dag *d = dag_find(n, key, gs, ng, bytes);
    flow_begin(n);
    if (!d) {
        for (int g = 0; g < ng; g++)
            allreduce_build(n, key + g * gs, gs, bytes);
        return;
    }
    n->fl = ici_grow(n, n->fl, &n->capfl, d->nfl, sizeof(flow_fl));
    n->route = ici_grow(n, n->route, &n->caproute, d->nroute, sizeof(int));
    n->edge = ici_grow(n, n->edge, &n->capedge, d->nedge, sizeof(flow_edge));
    memcpy(n->fl, d->fl, (size_t)d->nfl * sizeof(flow_fl));
    memcpy(n->route, d->route, (size_t)d->nroute * sizeof(int));
    memcpy(n->edge, d->edge, (size_t)d->nedge * sizeof(flow_edge));
    n->nfl = d->nfl;
    n->nroute = d->nroute;
    n->nedge = d->nedge;
    for (int i = 0; i < d->nres; i++) {
        n->acc_res_list[n->nacc_res++] = d->res[i];
        n->acc_res[d->res[i]] = d->res_bytes[i];
    }
    for (int i = 0; i < d->ncore; i++) {
        n->acc_core_list[n->nacc_core++] = d->core[i];
        n->acc_core[d->core[i]] = d->core_bytes[i];
    }
}

/* After a call that built and ran its flows and stored its result in the
 * cache entry e (whose statistics are the flows'): an interconnect that
 * keeps flows takes the DAG over (the run changed only its flows' deps
 * and ready, put back here).  Best effort: out of memory it keeps
 * nothing, and the call is not failed for it. */
static void dag_keep(ici *n, const ici_cache_ent *e, const int *key, int gs,
                     int ng, double bytes)
{
    if (!n->keep || n->nfl < ICI_DAG_MIN)
        return;
    ici_dag nd = {0};
    size_t nk = (size_t)(gs * ng), nr = (size_t)e->nres + 1,
           nc = (size_t)e->ncore + 1;
    nd.key = malloc(nk * sizeof(int));
    nd.res = malloc(nr * sizeof(int));
    nd.core = malloc(nc * sizeof(int));
    nd.res_bytes = malloc(nr * sizeof(double));
    nd.core_bytes = malloc(nc * sizeof(double));
    if (!nd.key || !nd.res || !nd.core || !nd.res_bytes || !nd.core_bytes) {
        dag_clear(&nd);
        return;
    }
    memcpy(nd.key, key, nk * sizeof(int));
    memcpy(nd.res, e->res, (size_t)e->nres * sizeof(int));
    memcpy(nd.res_bytes, e->res_bytes, (size_t)e->nres * sizeof(double));
    memcpy(nd.core, e->core, (size_t)e->ncore * sizeof(int));
    memcpy(nd.core_bytes, e->core_bytes, (size_t)e->ncore * sizeof(double));
    nd.bytes = bytes;
    nd.gs = gs;
    nd.ng = ng;
    nd.nkey = (int)nk;
    nd.nres = e->nres;
    nd.ncore = e->ncore;
    nd.fl = n->fl;
    nd.nfl = n->nfl;
    nd.route = n->route;
    nd.nroute = n->nroute;
    nd.edge = n->edge;
    nd.nedge = n->nedge;
    n->fl = NULL;
    n->route = NULL;
    n->edge = NULL;
    n->capfl = n->caproute = n->capedge = 0;
    flow_begin(n);
    for (int f = 0; f < nd.nfl; f++) {
        nd.fl[f].ready = 0;
        nd.fl[f].deps = 0;
    }
    for (int k = 0; k < nd.nedge; k++)
        nd.fl[nd.edge[k].to2 >> 1].deps++;
    ici_dag *d = &n->dag[n->dag_next];
    n->dag_next = (n->dag_next + 1) % ICI_DAGS;
    dag_clear(d);
    *d = nd;
}

/* The cache entry cache_store filled last. */
static const ici_cache_ent *cache_last(const ici *n)
{
    return &n->cache[(n->cache_next + ICI_CACHE - 1) % ICI_CACHE];
}

/* The groups' all-reduces of a call whose groups fall into nc > 1
 * independent clusters (decompose): max-min rates decompose over
 * resources no flow shares, so each cluster runs alone, in its own
 * canonical frame, and clusters that are shifted copies of one another
 * replay one cache entry.  The call lasts as long as its slowest
 * cluster. */
static double allreduce_clusters(ici *n, const int *key, int gs, int ng, int nc,
                                 const int *of, double bytes, int ox, int oy)
{
    int *ck = ici_tmp_alloc(&n->mem, (size_t)(gs * ng) * sizeof(int));
    double dur = 0;
    for (int c = 0; c < nc; c++) {
        int m = 0, ngc = 0, cox, coy;
        for (int g = 0; g < ng; g++)
            if (of[g] == c) {
                memcpy(ck + m, key + g * gs, (size_t)gs * sizeof(int));
                m += gs;
                ngc++;
            }
        canon(n, ck, m, ck, &cox, &coy);
        uint64_t h = key_hash(0, bytes, gs, ngc, ck, m, NULL);
        ici_cache_ent *e = cache_find(n, h, 0, bytes, gs, ngc, ck, m, NULL);
        double d;
        if (e) {
            d = cache_replay(n, e, ox + cox, oy + coy);
        } else {
            allreduce_flows(n, ck, gs, ngc, bytes);
            d = flow_run(n);
            cache_store(n, h, 0, bytes, gs, ngc, ck, m, NULL, d, ox + cox,
                        oy + coy);
            dag_keep(n, cache_last(n), ck, gs, ngc, bytes);
        }
        if (d > dur)
            dur = d;
    }
    ici_tmp_free(&n->mem, ck);
    return dur;
}

/* The duration of the groups' all-reduces (simulated or replayed). */
static double allreduce_run(ici *n, const int *cores, int group_size,
                            int ngroups, double bytes)
{
    int total = group_size * ngroups;
    ici_assert_group(n, &n->mem, cores, total);
    if (!(bytes > 0) || group_size < 2)
        return 0;
    n->key = ici_grow(n, n->key, &n->capkey, total, sizeof(int));
    int *key = n->key, ox, oy;
    canon(n, cores, total, key, &ox, &oy);
    if (ngroups > 1) {
        const int *of;
        int nc = decompose(n, key, group_size, ngroups, &of);
        if (nc > 1)
            return allreduce_clusters(n, key, group_size, ngroups, nc, of,
                                      bytes, ox, oy);
    }
    uint64_t h = key_hash(0, bytes, group_size, ngroups, key, total, NULL);
    ici_cache_ent *e =
        cache_find(n, h, 0, bytes, group_size, ngroups, key, total, NULL);
    double dur;
    if (e) {
        dur = cache_replay(n, e, ox, oy);
    } else {
        allreduce_flows(n, key, group_size, ngroups, bytes);
        dur = flow_run(n);
        cache_store(n, h, 0, bytes, group_size, ngroups, key, total, NULL,
                    dur, ox, oy);
        dag_keep(n, cache_last(n), key, group_size, ngroups, bytes);
    }
    return dur;
}

static double allreduce_guarded(ici *n, const int *cores, int group_size,
                                int ngroups, double bytes)
{
    if (setjmp(n->mem.jb)) {
        call_failed(n);
        return ICI_NO_MEMORY;
    }
    n->mem.armed = 1;
    double dur = allreduce_run(n, cores, group_size, ngroups, bytes);
    n->mem.armed = 0;
    return dur;
}

double ici_allreduce_groups(ici *n, const int *cores, int group_size,
                            int ngroups, double bytes, double t_start)
{
    TPU_ASSERT(group_size >= 1 && ngroups >= 1 && cores);
    double dur = allreduce_guarded(n, cores, group_size, ngroups, bytes);
    return dur < 0 ? ICI_NO_MEMORY : dur > 0 ? t_start + dur : t_start;
}

double ici_allreduce(ici *n, const int *cores, int ncores, double bytes,
                     double t_start)
{
    return ici_allreduce_groups(n, cores, ncores, 1, bytes, t_start);
}

/* The object is const here: the call's memory lives in the caller's
 * frame (not in the function that calls setjmp). */
static int links_guarded(const ici *n, ici_mem *m, const int *cores,
                         int ncores)
{
    if (setjmp(m->jb)) {
        ici_tmp_free_all(m);
        return -1;
    }
    m->armed = 1;
    return allreduce_links(n, m, cores, ncores);
}

int ici_allreduce_links(const ici *n, const int *cores, int ncores)
{
    ici_mem m;
    m.armed = m.ntmp = 0;
    m.fail_after = n->mem.fail_after;
    return links_guarded(n, &m, cores, ncores);
}

void ici_fail_alloc_after(ici *n, long k)
{
    n->mem.fail_after = k;
}

void ici_set_scan(ici *n, int on)
{
    n->scan = on != 0;
    for (int i = 0; i < ICI_CACHE; i++)
        cache_clear(&n->cache[i]);
}
