/* ici — the inter-chip interconnect of a TPU v2/v3 slice.
 *
 * Topology (REFERENCE.md "Interconnect"): chips on a dim_x x dim_y 2D
 * torus, four links per chip (+x, -x, +y, -y), each one-way with its own
 * bandwidth and latency; the two TensorCores of a chip share the chip's
 * router and links and reach each other over an on-chip path.  Full pods
 * wrap in both dimensions; whether a partial slice wraps is the [U]
 * parameter ici.wrap (default 0: a slice is a rectangle cut out of the
 * pod's torus, so its edge links lead out of the slice).
 *
 * Time: a flow-level (fluid) model, not flits.  Each link direction and
 * each direction of the on-chip path is a resource; all flows in flight
 * share every resource they cross max-min fairly, which is what per-
 * direction queues served round robin converge to once a packet is small
 * against a transfer.  Rates are recomputed whenever a flow starts or
 * ends; a flow's data arrives hops x hop_latency after its last byte
 * leaves (cut-through routers).  Collectives are DAGs of flows: a send
 * starts when every arrival it needs has happened, so pipelining and
 * contention come out of the simulation, not out of a formula.
 *
 * The simulation of one call always starts from idle links at time 0 and
 * is shifted by t_start at the end; that makes the result of a call a
 * pure function of (cores, bytes, params), which is what lets identical
 * calls be replayed from a cache bit for bit.
 */
#include "interconnect/ici.h"

#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

/* Events closer than this are one event: a ring's chips finish the same
 * step at times that differ by rounding only, and merging them keeps the
 * number of rate recomputations proportional to steps, not to flows. */
#define ICI_TOL_T 1e-12

#define NOFLOW (-1)

#define ICI_MIN_PIECE 65536.0
#define ICI_MAX_PIECES 16
#define ICI_MIN_CHUNKS 2
#define ICI_SPLIT 8

/* A flow: 32 bytes, a full-pod all-reduce builds 1.8 million.  Its
 * latency (hops x hop latency, or the on-chip latency) is computed when
 * it arrives; its rate and bytes left while it runs live in the active
 * arrays. */
typedef struct {
    double rem;      /* bytes to send */
    double ready;    /* latest arrival among its predecessors */
    int r0, nr;      /* route: resources in n->route[r0 .. r0+nr) */
    int head;        /* successors: list n->edge[head], NOFLOW ends */
    int deps;        /* predecessors not yet arrived; once the flow has
                      * started (deps 0), its slot in the active arrays */
} ici_fl;

/* A dependency: flow `to2 >> 1` waits for the arrival (to2 even) or the
 * last byte sent (odd) of the flow whose list it is in. */
typedef struct {
    int to2, next;
} ici_edge;

/* The flows that become ready at time t, ids[pos .. n) in increasing
 * order. */
typedef struct {
    double t;
    int *ids;
    int n, cap, pos;
} ici_bucket;



/* A connected component of the active flows and their resources, solved
 * alone: (own share, share) of its rounds in n->shpool[off .. off+2 nsh),
 * one of its resources, and whether a share was not positive. */
typedef struct {
    int off, nsh, rep, bad, alive;
    int ser;         /* serial number: ids are reused, serials are not */
} ici_comp;

/* A sorted table of distinct shares and how many rounds have each. */
typedef struct {
    double v;
    int cnt;
} ici_shv;

typedef struct {
    ici_shv *e;
    int n, cap;
} ici_tab;

typedef struct {
    int kind;        /* 0 all-reduce groups, 1 permute */
    double bytes;
    int group_size, ngroups;
    int nkey;
    int *key;        /* cores, or (src, dst) pairs for a permute */
    double *kbytes;  /* permute flow sizes */
    uint64_t hash;
    double dur;
    int nres;
    int *res;
    double *res_bytes;
    int ncore;
    int *core;
    double *core_bytes;
} ici_cache_ent;

#define ICI_CACHE 64

/* Host memory of a call.  Every allocation a call makes goes through
 * mem_ralloc and tmp_alloc below; when one fails, the call unwinds
 * (longjmp) to the jmp_buf its public entry point set, which frees the
 * call's temporaries (listed here, not only on the C stack, so that the
 * unwind leaks nothing), puts the run state back to idle and returns the
 * failure value ici.h documents.  Scratch the object owns keeps its old
 * block when growing it fails, so ici_free frees everything either way.
 * Only the slow paths (an allocation) look at any of this. */
#define ICI_NTMP 24

typedef struct {
    jmp_buf jb;
    int armed;               /* jb is set: a call is running */
    int ntmp;
    void *tmp[ICI_NTMP];     /* the running call's temporaries */
    long fail_after;         /* test hook: allocations to let through
                              * before one fails (< 0: none fails) */
} ici_mem;

struct ici {
    ici_params p;
    int dx, dy, nchips, ncores, nres;
    int wrapx, wrapy;
    double link_bps, onchip_bps;

    /* statistics */
    double *stat_res;   /* bytes carried per resource */
    double *stat_core;  /* bytes sent per core */

    /* the DAG under construction */
    ici_fl *fl;
    int nfl, capfl;
    int *route;
    int nroute, caproute;
    ici_edge *edge;
    int nedge, capedge;

    /* run scratch */
    ici_bucket *bk;
    int nbk, capbk;
    int *hash, hcap;    /* time bits -> bucket, open addressing */
    int *bh, nbh, capbh; /* heap of non-empty buckets by time */
    /* the active flows in start order (dense: id, bytes left, rate,
     * finish time) */
    int *aid, *fin, *bfl;
    int *amark;         /* per slot: visit stamp of rates_update */
    double *arem, *arate, *atf, *crate;
    int nact, capact;
    int nbusy;          /* resources with an active flow */
    int invalid;        /* components forgotten (comps_reset) */
    long nglobal;       /* solves over all flows (components not apart) */
    int *res_cnt;       /* per resource: unfrozen flows through it */
    double *res_cap;    /* per resource: capacity left */
    int *res_start;     /* CSR of active flows per touched resource */
    int *res_len;
    int *res_list;
    int caplist;
    int *touched;
    int ntouched;
    unsigned char *frozen;
    int capfrozen;
    /* per resource: active flows through it in start order, component,
     * dirty (a flow started or finished on it) */
    int **rl, *rl_len, *rl_cap;
    int *res_comp, *res_ser, *res_mark, *dirty, *bres;
    int ser;
    unsigned char *res_isdirty;
    int ndirty, stamp;
    ici_comp *comp;
    int ncomp, capcomp, *comp_free, nfree, capfree, nbad;
    double *shpool;
    int nshpool, capshpool, shlive;
    ici_tab g, own;     /* rounds' shares, and their own shares */
    double *chg, *chg2, *oldsh;
    int nchg, capchg, capchg2, capoldsh;
    long nredo;
    double *cshares;
    int capcsh;

    /* per-call statistics deltas */
    double *acc_res, *acc_core;
    int *acc_res_list, *acc_core_list;
    int nacc_res, nacc_core;

    ici_cache_ent cache[ICI_CACHE];
    int cache_next;
    long cache_hits;
    /* a call's key in the canonical frame (cores, or a permute's pairs
     * and sizes) */
    int *key;
    double *kbytes;
    int capkey, capkbytes;

    ici_mem mem;
};

/* ---- small helpers ------------------------------------------------------ */

/* Out of host memory: back to the entry point of the running call. */
static void mem_fail(ici_mem *m)
{
    TPU_ASSERT(m->armed); /* an allocation outside a guarded call */
    longjmp(m->jb, 1);
}

/* realloc(p, size), or unwinds the call (p is then left as it was). */
static void *mem_ralloc(ici_mem *m, void *p, size_t size)
{
    void *q = NULL;
    if (m->fail_after < 0 || m->fail_after-- > 0)
        q = realloc(p, size ? size : 1);
    if (!q)
        mem_fail(m);
    return q;
}

/* A block that lives within one call: freed by tmp_free, by the unwind,
 * or handed to the object by tmp_keep. */
static void *tmp_alloc(ici_mem *m, size_t size)
{
    TPU_ASSERT(m->ntmp < ICI_NTMP);
    void *p = mem_ralloc(m, NULL, size);
    m->tmp[m->ntmp++] = p;
    return p;
}

static void *tmp_calloc(ici_mem *m, size_t count, size_t size)
{
    void *p = tmp_alloc(m, count * size);
    memset(p, 0, count * size);
    return p;
}

static void tmp_keep(ici_mem *m, const void *p)
{
    for (int i = m->ntmp - 1; i >= 0; i--)
        if (m->tmp[i] == p) {
            m->tmp[i] = m->tmp[--m->ntmp];
            return;
        }
    TPU_ASSERT(0); /* not a temporary of this call */
}

static void tmp_free(ici_mem *m, void *p)
{
    tmp_keep(m, p);
    free(p);
}

static void tmp_free_all(ici_mem *m)
{
    while (m->ntmp > 0)
        free(m->tmp[--m->ntmp]);
}

/* Scratch of the object at least `need` elements long (doubling). */
static void *grow(ici *n, void *p, int *cap, int need, size_t elem)
{
    if (need <= *cap)
        return p;
    int c = *cap ? *cap : 256;
    while (c < need)
        c *= 2;
    void *q = mem_ralloc(&n->mem, p, (size_t)c * elem);
    *cap = c;
    return q;
}

static int chip_x(const ici *n, int chip) { return chip % n->dx; }
static int chip_y(const ici *n, int chip) { return chip / n->dx; }

static double res_bps(const ici *n, int r)
{
    return r < 4 * n->nchips ? n->link_bps : n->onchip_bps;
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

void ici_free(ici *n)
{
    if (!n)
        return;
    for (int i = 0; i < ICI_CACHE; i++)
        cache_clear(&n->cache[i]);
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
    free(n->arem);
    free(n->arate);
    free(n->atf);
    free(n->crate);
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
static int route_chips(ici *n, int a, int b, int pref)
{
    int sx, sy;
    int ax = chip_x(n, a), ay = chip_y(n, a);
    int hx = dim_steps(ax, chip_x(n, b), n->dx, n->wrapx, pref, &sx);
    int hy = dim_steps(ay, chip_y(n, b), n->dy, n->wrapy, pref, &sy);
    n->route =
        grow(n, n->route, &n->caproute, n->nroute + hx + hy, sizeof(int));
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
    return dim_steps(chip_x(n, a), chip_x(n, b), n->dx, n->wrapx, 1, &sx) +
           dim_steps(chip_y(n, a), chip_y(n, b), n->dy, n->wrapy, 1, &sy);
}

/* ---- building the DAG --------------------------------------------------- */

static void dag_begin(ici *n)
{
    n->nfl = 0;
    n->nroute = 0;
    n->nedge = 0;
}

static void acc_res_add(ici *n, int r, double b)
{
    if (n->acc_res[r] == 0)
        n->acc_res_list[n->nacc_res++] = r;
    n->acc_res[r] += b;
}

static void acc_core_add(ici *n, int c, double b)
{
    if (n->acc_core[c] == 0)
        n->acc_core_list[n->nacc_core++] = c;
    n->acc_core[c] += b;
}

/* A transfer of `bytes` from core src to core dst; pref breaks routing
 * ties.  Returns its id. */
static int add_flow(ici *n, int src, int dst, double bytes, int pref)
{
    n->fl = grow(n, n->fl, &n->capfl, n->nfl + 1, sizeof(ici_fl));
    int id = n->nfl++;
    ici_fl *f = &n->fl[id];
    memset(f, 0, sizeof *f);
    f->head = NOFLOW;
    f->rem = bytes > 0 ? bytes : 0;
    f->r0 = n->nroute;
    int a = src / 2, b = dst / 2;
    if (src == dst) {
        f->nr = 0;
    } else if (a == b) {
        n->route = grow(n, n->route, &n->caproute, n->nroute + 1, sizeof(int));
        n->route[n->nroute++] = 4 * n->nchips + 2 * a + (src & 1);
        f->nr = 1;
    } else {
        f->nr = route_chips(n, a, b, pref);
    }
    if (f->rem > 0 && f->nr > 0) {
        for (int i = 0; i < f->nr; i++)
            acc_res_add(n, n->route[f->r0 + i], f->rem);
        acc_core_add(n, src, f->rem);
    }
    return id;
}

/* `after` may not start before `before` has arrived (sent = 0) or has
 * sent its last byte (sent = 1: two messages queued on one engine). */
static void add_dep_kind(ici *n, int before, int after, int sent)
{
    if (before == NOFLOW || after == NOFLOW)
        return;
    /* A flow's successors are visited in no particular order: arrive
     * takes the latest of its predecessors and the event queue orders by
     * (time, id) whatever the order of pushes. */
    n->edge = grow(n, n->edge, &n->capedge, n->nedge + 1, sizeof(ici_edge));
    n->edge[n->nedge].to2 = 2 * after + sent;
    n->edge[n->nedge].next = n->fl[before].head;
    n->fl[before].head = n->nedge++;
    n->fl[after].deps++;
}

static void add_dep(ici *n, int before, int after)
{
    add_dep_kind(n, before, after, 0);
}

static void add_dep_sent(ici *n, int before, int after)
{
    add_dep_kind(n, before, after, 1);
}

/* ---- the fluid simulation ----------------------------------------------- */

/* The ready queue: flows in (time, id) order, the order fill's start
 * order and so every rate depends on.  Many flows become ready at the
 * same instant (a step ends on every chip at once), so the queue keeps
 * one bucket per distinct time, found by hashing the time's bits, with
 * its ids in increasing order (they mostly arrive so), and a small heap
 * of the buckets' times: a pop is O(1) instead of a sift through a heap
 * of every ready flow (16 k on v3-2048, a fifth of its host time). */

static uint64_t dbits(double t)
{
    uint64_t u;
    if (t == 0)
        t = 0; /* -0 and +0 are one time, as the comparisons see them */
    memcpy(&u, &t, sizeof u);
    return u;
}

static int bk_less(const ici *n, int a, int b)
{
    return n->bk[a].t < n->bk[b].t;
}

static void bh_push(ici *n, int b)
{
    n->bh = grow(n, n->bh, &n->capbh, n->nbh + 1, sizeof(int));
    int i = n->nbh++;
    while (i > 0) {
        int p = (i - 1) / 2;
        if (!bk_less(n, b, n->bh[p]))
            break;
        n->bh[i] = n->bh[p];
        i = p;
    }
    n->bh[i] = b;
}

static void bh_pop(ici *n)
{
    int last = n->bh[--n->nbh], i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= n->nbh)
            break;
        if (c + 1 < n->nbh && bk_less(n, n->bh[c + 1], n->bh[c]))
            c++;
        if (!bk_less(n, n->bh[c], last))
            break;
        n->bh[i] = n->bh[c];
        i = c;
    }
    if (n->nbh > 0)
        n->bh[i] = last;
}

static int q_slot(const ici *n, double t)
{
    uint64_t u = dbits(t), h = u * 0x9E3779B97F4A7C15ULL;
    int i = (int)(h >> 40) & (n->hcap - 1);
    while (n->hash[i] >= 0 && dbits(n->bk[n->hash[i]].t) != u)
        i = (i + 1) & (n->hcap - 1);
    return i;
}

/* Empties the queue; clears only the hash slots in use (a call after a
 * big one would otherwise clear a big table). */
static void q_clear(ici *n)
{
    if (n->nbk > 0) {
        /* all slots found before any is cleared: probes cross them */
        int *slot = tmp_alloc(&n->mem, (size_t)n->nbk * sizeof(int));
        for (int i = 0; i < n->nbk; i++)
            slot[i] = q_slot(n, n->bk[i].t);
        for (int i = 0; i < n->nbk; i++) {
            n->hash[slot[i]] = -1;
            n->bk[i].n = n->bk[i].pos = 0;
        }
        tmp_free(&n->mem, slot);
    }
    n->nbk = n->nbh = 0;
}

static void q_rehash(ici *n, int cap)
{
    if (cap != n->hcap) {
        n->hash = mem_ralloc(&n->mem, n->hash, (size_t)cap * sizeof(int));
        n->hcap = cap;
    }
    memset(n->hash, 0xff, (size_t)cap * sizeof(int));
    for (int b = 0; b < n->nbk; b++) {
        uint64_t h = dbits(n->bk[b].t) * 0x9E3779B97F4A7C15ULL;
        int i = (int)(h >> 40) & (cap - 1);
        while (n->hash[i] >= 0)
            i = (i + 1) & (cap - 1);
        n->hash[i] = b;
    }
}

/* Keeps only the non-empty buckets (a later flow ready at the time of an
 * emptied one gets a new bucket, which orders it the same), their heap
 * positions unchanged; the others' id arrays are kept for reuse. */
static void q_compact(ici *n)
{
    ici_bucket *nb = tmp_alloc(&n->mem, (size_t)n->capbk * sizeof(ici_bucket));
    unsigned char *used = tmp_calloc(&n->mem, (size_t)n->capbk, 1);
    for (int j = 0; j < n->nbh; j++) {
        nb[j] = n->bk[n->bh[j]];
        used[n->bh[j]] = 1;
        n->bh[j] = j;
    }
    int w = n->nbh;
    for (int b = 0; b < n->capbk; b++)
        if (!used[b]) {
            nb[w] = n->bk[b];
            nb[w].n = nb[w].pos = 0;
            w++;
        }
    tmp_free(&n->mem, used);
    tmp_keep(&n->mem, nb);
    free(n->bk);
    n->bk = nb;
    n->nbk = n->nbh;
    q_rehash(n, n->hcap);
}

/* The bucket of time t, created (empty) when there is none. */
static int q_bucket(ici *n, double t)
{
    if (n->nbk == n->capbk && 2 * n->nbh < n->capbk)
        q_compact(n);
    if (2 * (n->nbk + 1) > n->hcap) {
        q_rehash(n, n->hcap ? 2 * n->hcap : 1024);
    }
    uint64_t u = dbits(t), h = u * 0x9E3779B97F4A7C15ULL;
    int i = (int)(h >> 40) & (n->hcap - 1);
    while (n->hash[i] >= 0) {
        int b = n->hash[i];
        if (dbits(n->bk[b].t) == u)
            return b;
        i = (i + 1) & (n->hcap - 1);
    }
    if (n->nbk == n->capbk) {
        int c = n->capbk ? 2 * n->capbk : 256;
        ici_bucket *nb =
            mem_ralloc(&n->mem, n->bk, (size_t)c * sizeof(ici_bucket));
        memset(nb + n->capbk, 0, (size_t)(c - n->capbk) * sizeof(ici_bucket));
        n->bk = nb;
        n->capbk = c;
    }
    int b = n->nbk++;
    n->bk[b].t = t;
    n->bk[b].n = n->bk[b].pos = 0;
    n->hash[i] = b;
    return b;
}

static void q_push(ici *n, double t, int id)
{
    int b = q_bucket(n, t);
    ici_bucket *k = &n->bk[b];
    if (k->n == k->pos) {
        /* empty: (back) in the heap of times */
        k->n = k->pos = 0;
        bh_push(n, b);
    }
    if (k->n == k->cap) {
        int c = k->cap ? 2 * k->cap : 8;
        int *ids = mem_ralloc(&n->mem, k->ids, (size_t)c * sizeof(int));
        k->ids = ids;
        k->cap = c;
    }
    int i = k->n++;
    while (i > k->pos && k->ids[i - 1] > id) {
        k->ids[i] = k->ids[i - 1];
        i--;
    }
    k->ids[i] = id;
}

static int q_empty(const ici *n) { return n->nbh == 0; }

static double q_top_t(const ici *n) { return n->bk[n->bh[0]].t; }

static int q_pop(ici *n)
{
    ici_bucket *k = &n->bk[n->bh[0]];
    int id = k->ids[k->pos++];
    if (k->pos == k->n)
        bh_pop(n);
    return id;
}

/* A sorted table of distinct doubles, each with how many entries have
 * it. */
static int tab_find(const ici_tab *tb, double v)
{
    int lo = 0, hi = tb->n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (tb->e[mid].v < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Adds d (+1 or -1) to v's count; returns 1 when v appeared or
 * vanished. */
static int tab_add(ici *n, ici_tab *tb, double v, int d)
{
    int lo = tab_find(tb, v);
    if (lo < tb->n && tb->e[lo].v == v) {
        tb->e[lo].cnt += d;
        TPU_ASSERT(tb->e[lo].cnt >= 0);
        if (tb->e[lo].cnt > 0)
            return 0;
        memmove(tb->e + lo, tb->e + lo + 1,
                (size_t)(tb->n - lo - 1) * sizeof(ici_shv));
        tb->n--;
        return 1;
    }
    TPU_ASSERT(d > 0);
    tb->e = grow(n, tb->e, &tb->cap, tb->n + 1, sizeof(ici_shv));
    memmove(tb->e + lo + 1, tb->e + lo, (size_t)(tb->n - lo) * sizeof(ici_shv));
    tb->e[lo].v = v;
    tb->e[lo].cnt = d;
    tb->n++;
    return 1;
}

/* The share a round whose own share is l gets among other components,
 * after a round at prev: the first round of the solve over all flows that
 * reaches it, which is the smallest share s of the table g above prev
 * with s < l <= s (1 + 1e-12) (fill's tolerance), or l itself. */
static double snap_share(const ici_tab *g, double prev, double l)
{
    for (int i = tab_find(g, prev); i < g->n && g->e[i].v < l; i++) {
        double s = g->e[i].v;
        if (s > prev && !(l > s * (1 + 1e-12)))
            return s;
    }
    return l;
}

/* Max-min fair rates by progressive filling: raise every unfrozen flow's
 * rate together until some resource is full; the flows through it keep
 * that rate; repeat with the capacity that is left.  ids[0..m) in the
 * order the flows started; rate[i] receives flow ids[i]'s share.  With
 * snap, one connected component solved alone, each round's share is
 * snapped (snap_share) to the rounds of the others, and sh receives
 * (own share, share) per round; returns the number of rounds, or -1 when
 * a share is not positive (snapping not done). */
static int fill(ici *n, const int *ids, int m, double *rate, double *sh,
                const ici_tab *snap)
{
    n->ntouched = 0;
    int nlist = 0, nsh = 0;
    for (int i = 0; i < m; i++) {
        const ici_fl *f = &n->fl[ids[i]];
        for (int h = 0; h < f->nr; h++) {
            int r = n->route[f->r0 + h];
            if (n->res_cnt[r]++ == 0) {
                n->touched[n->ntouched++] = r;
                n->res_cap[r] = res_bps(n, r);
            }
        }
        nlist += f->nr;
    }
    n->res_list = grow(n, n->res_list, &n->caplist, nlist, sizeof(int));
    int acc = 0;
    for (int k = 0; k < n->ntouched; k++) {
        int r = n->touched[k];
        n->res_start[r] = acc;
        n->res_len[r] = 0;
        acc += n->res_cnt[r];
    }
    for (int i = 0; i < m; i++) {
        const ici_fl *f = &n->fl[ids[i]];
        for (int h = 0; h < f->nr; h++) {
            int r = n->route[f->r0 + h];
            n->res_list[n->res_start[r] + n->res_len[r]++] = i;
        }
    }
    n->frozen = grow(n, n->frozen, &n->capfrozen, m, 1);
    memset(n->frozen, 0, (size_t)(unsigned)m);
    int left = m, bad = 0;
    double prev = 0;
    while (left > 0) {
        double share = INFINITY;
        for (int k = 0; k < n->ntouched; k++) {
            int r = n->touched[k];
            if (n->res_cnt[r] > 0) {
                double s = n->res_cap[r] / n->res_cnt[r];
                if (s < share)
                    share = s;
            }
        }
        TPU_ASSERT(share < INFINITY);
        if (share < 0)
            share = 0;
        if (snap) {
            sh[2 * nsh] = share;
            if (share > 0 && !bad)
                share = snap_share(snap, prev, share);
            else
                bad = 1;
            sh[2 * nsh + 1] = share;
            prev = share;
        }
        nsh++;
        /* Resources within rounding of the bottleneck freeze together:
         * symmetric collectives then need one round, not one per link. */
        double lim = share * (1 + 1e-12);
        for (int k = 0; k < n->ntouched; k++) {
            int r = n->touched[k];
            int cnt = n->res_cnt[r];
            if (cnt <= 0 || n->res_cap[r] / cnt > lim)
                continue;
            const int *lst = n->res_list + n->res_start[r];
            for (int j = 0; j < n->res_len[r]; j++) {
                int i = lst[j];
                if (n->frozen[i])
                    continue;
                n->frozen[i] = 1;
                left--;
                const ici_fl *f = &n->fl[ids[i]];
                rate[i] = share;
                for (int h = 0; h < f->nr; h++) {
                    int q = n->route[f->r0 + h];
                    n->res_cap[q] -= share;
                    n->res_cnt[q]--;
                }
            }
        }
    }
    for (int k = 0; k < n->ntouched; k++)
        n->res_cnt[n->touched[k]] = 0;
    return bad ? -1 : nsh;
}

/* Incremental rates.  Max-min fairness decomposes over the connected
 * components of the flow-resource graph, and only the components a start
 * or a finish touched change.  The solve over all active flows (fill over
 * them in start order) runs its rounds in increasing share; a component
 * takes part in a round when its own smallest share is within fill's
 * 1e-12 tolerance above the round's, and its resources are visited in the
 * same relative order either way.  So each component is solved alone with
 * each round's share snapped to the smallest round share of the others
 * that would reach it (41e9 B/s where its own is 41e9 + 8e-6 by rounding,
 * v3-256), and gives the very doubles the solve over all gives.  The
 * rounds' shares of all components are kept in a table (g), their own
 * shares in another (own); when a share appears in or vanishes from g,
 * the components with an own share within the tolerance above it are
 * solved again, until nothing changes.  A share that is not positive
 * falls back to the solve over all flows, as does a chain of re-solves
 * that does not settle. */

static void res_dirty(ici *n, int r)
{
    if (n->res_isdirty[r])
        return;
    n->res_isdirty[r] = 1;
    n->dirty[n->ndirty++] = r;
}

static void changed_add(ici *n, double v)
{
    n->chg = grow(n, n->chg, &n->capchg, n->nchg + 1, sizeof(double));
    n->chg[n->nchg++] = v;
}

/* The live component of resource r, or -1 (a resource keeps the id of a
 * component that has ended until it is solved again, and ids are
 * reused). */
static int comp_of(const ici *n, int r)
{
    int c = n->res_comp[r];
    return c >= 0 && n->comp[c].alive && n->comp[c].ser == n->res_ser[r] ? c
                                                                        : -1;
}

static void comp_kill(ici *n, int c)
{
    if (c < 0 || !n->comp[c].alive)
        return;
    ici_comp *k = &n->comp[c];
    for (int i = 0; i < k->nsh; i++) {
        double own = n->shpool[k->off + 2 * i],
               s = n->shpool[k->off + 2 * i + 1];
        tab_add(n, &n->own, own, -1);
        if (own == s && tab_add(n, &n->g, s, -1))
            changed_add(n, s);
    }
    n->shlive -= k->nsh;
    n->nbad -= k->bad;
    k->alive = 0;
    n->comp_free =
        grow(n, n->comp_free, &n->capfree, n->nfree + 1, sizeof(int));
    n->comp_free[n->nfree++] = c;
}

static int comp_new(ici *n, const double *sh, int nsh, int bad, int rep)
{
    int c;
    if (n->nfree > 0) {
        c = n->comp_free[--n->nfree];
    } else {
        n->comp = grow(n, n->comp, &n->capcomp, n->ncomp + 1, sizeof(ici_comp));
        c = n->ncomp++;
        n->comp[c].alive = 0;
    }
    /* the pool keeps only live components' shares when it would grow */
    if (n->nshpool + 2 * nsh > n->capshpool && n->nshpool > 4 * n->shlive) {
        double *pool =
            tmp_alloc(&n->mem, (size_t)n->capshpool * sizeof(double));
        int w = 0;
        for (int i = 0; i < n->ncomp; i++) {
            ici_comp *k = &n->comp[i];
            if (!k->alive)
                continue;
            memcpy(pool + w, n->shpool + k->off,
                   (size_t)(2 * k->nsh) * sizeof(double));
            k->off = w;
            w += 2 * k->nsh;
        }
        tmp_keep(&n->mem, pool);
        free(n->shpool);
        n->shpool = pool;
        n->nshpool = w;
    }
    n->shpool = grow(n, n->shpool, &n->capshpool, n->nshpool + 2 * nsh,
                     sizeof(double));
    ici_comp *k = &n->comp[c];
    k->off = n->nshpool;
    k->nsh = nsh;
    k->rep = rep;
    k->bad = bad;
    k->alive = 1;
    k->ser = ++n->ser;
    memcpy(n->shpool + k->off, sh, (size_t)(2 * nsh) * sizeof(double));
    n->nshpool += 2 * nsh;
    n->shlive += nsh;
    n->nbad += bad;
    for (int i = 0; i < nsh; i++) {
        double own = sh[2 * i], s = sh[2 * i + 1];
        tab_add(n, &n->own, own, 1);
        if (own == s && tab_add(n, &n->g, s, 1))
            changed_add(n, s);
    }
    return c;
}

/* Flow id starts: it joins the active set (last) and its resources'
 * lists. */
/* The arrays indexed by slot hold as many flows as are active at once,
 * not every flow of the call. */
static void act_grow(ici *n)
{
    int c = n->capact ? 2 * n->capact : 1024;
    size_t ci = (size_t)c * sizeof(int), cd = (size_t)c * sizeof(double);
    /* an array that grew before another failed stays longer than
     * capact, which is harmless */
    n->aid = mem_ralloc(&n->mem, n->aid, ci);
    n->fin = mem_ralloc(&n->mem, n->fin, ci);
    n->bfl = mem_ralloc(&n->mem, n->bfl, ci);
    n->amark = mem_ralloc(&n->mem, n->amark, ci);
    n->arem = mem_ralloc(&n->mem, n->arem, cd);
    n->arate = mem_ralloc(&n->mem, n->arate, cd);
    n->atf = mem_ralloc(&n->mem, n->atf, cd);
    n->crate = mem_ralloc(&n->mem, n->crate, cd);
    memset(n->amark + n->capact, 0,
           (size_t)(c - n->capact) * sizeof(int));
    n->capact = c;
}

static void act_start(ici *n, int id)
{
    ici_fl *f = &n->fl[id];
    if (n->nact == n->capact)
        act_grow(n);
    int s = n->nact++;
    n->aid[s] = id;
    n->arem[s] = f->rem;
    n->arate[s] = 0;
    f->deps = s;
    for (int h = 0; h < f->nr; h++) {
        int r = n->route[f->r0 + h];
        if (n->rl_len[r] == n->rl_cap[r]) {
            int c = n->rl_cap[r] ? 2 * n->rl_cap[r] : 4;
            n->rl[r] = mem_ralloc(&n->mem, n->rl[r], (size_t)c * sizeof(int));
            n->rl_cap[r] = c;
        }
        if (n->rl_len[r] == 0)
            n->nbusy++;
        n->rl[r][n->rl_len[r]++] = id;
        res_dirty(n, r);
    }
}

static void act_finish(ici *n, int id)
{
    const ici_fl *f = &n->fl[id];
    for (int h = 0; h < f->nr; h++) {
        int r = n->route[f->r0 + h];
        int *l = n->rl[r], len = n->rl_len[r], j = 0;
        while (j < len && l[j] != id)
            j++;
        TPU_ASSERT(j < len);
        memmove(l + j, l + j + 1, (size_t)(len - j - 1) * sizeof(int));
        n->rl_len[r] = len - 1;
        if (len == 1)
            n->nbusy--;
        res_dirty(n, r);
    }
}

static void tf_set(ici *n, int s, double t)
{
    n->atf[s] = t + n->arem[s] / n->arate[s];
}

static int cmp_int_(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* Sorts ids[0..m) by start order, which is the order of their slots in
 * the active arrays. */
static void sort_start(ici *n, int *ids, int m)
{
    if (m <= 32) {
        for (int i = 1; i < m; i++) {
            int v = ids[i], sv = n->fl[v].deps, k = i;
            while (k > 0 && n->fl[ids[k - 1]].deps > sv) {
                ids[k] = ids[k - 1];
                k--;
            }
            ids[k] = v;
        }
        return;
    }
    for (int i = 0; i < m; i++)
        ids[i] = n->fl[ids[i]].deps;
    qsort(ids, (size_t)m, sizeof(int), cmp_int_);
    for (int i = 0; i < m; i++)
        ids[i] = n->aid[ids[i]];
}

/* Solves the component of resource r0 (not yet visited under stamp), whose
 * previous component has been killed, alone; its flows are appended to
 * n->bfl from *nsolved on and take their rate. */
static void solve_comp(ici *n, int r0, int stamp, double t)
{
    int nres = 0, m = 0;
    n->res_mark[r0] = stamp;
    n->res_comp[r0] = -1;
    if (n->rl_len[r0] == 0)
        return;
    n->bres[nres++] = r0;
    int *fl = n->bfl;
    for (int i = 0; i < nres; i++) {
        int q = n->bres[i];
        for (int j = 0; j < n->rl_len[q]; j++) {
            int id = n->rl[q][j];
            const ici_fl *f = &n->fl[id];
            if (n->amark[f->deps] == stamp)
                continue;
            n->amark[f->deps] = stamp;
            fl[m++] = id;
            for (int h = 0; h < f->nr; h++) {
                int q2 = n->route[f->r0 + h];
                if (n->res_mark[q2] == stamp)
                    continue;
                n->res_mark[q2] = stamp;
                comp_kill(n, comp_of(n, q2));
                n->bres[nres++] = q2;
            }
        }
    }
    sort_start(n, fl, m);
    n->cshares = grow(n, n->cshares, &n->capcsh, 2 * m, sizeof(double));
    int nsh = fill(n, fl, m, n->crate, n->cshares, &n->g);
    int bad = nsh < 0;
    if (bad)
        nsh = 0;
    int c = comp_new(n, n->cshares, nsh, bad, r0);
    for (int i = 0; i < nres; i++)
    {
        n->res_comp[n->bres[i]] = c;
        n->res_ser[n->bres[i]] = n->comp[c].ser;
    }
    for (int i = 0; i < m; i++) {
        int s = n->fl[fl[i]].deps;
        n->arate[s] = n->crate[i];
        tf_set(n, s, t);
    }
}

/* A visit stamp for res_mark and amark, never 0 (their initial value);
 * the marks are cleared before the counter would overflow. */
static int next_stamp(ici *n)
{
    if (n->stamp == INT_MAX) {
        memset(n->res_mark, 0, (size_t)n->nres * sizeof(int));
        memset(n->amark, 0, (size_t)n->capact * sizeof(int));
        n->stamp = 0;
    }
    return ++n->stamp;
}

/* Kills component c and solves it again (its structure is unchanged: a
 * share of g it depends on came or went); when its shares come out the
 * same, the appearances and vanishings of the two steps cancel. */
static void comp_redo(ici *n, int c, double t)
{
    ici_comp *k = &n->comp[c];
    int nsh = k->nsh, r0 = k->rep, mark = n->nchg;
    n->oldsh = grow(n, n->oldsh, &n->capoldsh, 2 * nsh + 1, sizeof(double));
    memcpy(n->oldsh, n->shpool + k->off, (size_t)(2 * nsh) * sizeof(double));
    comp_kill(n, c);
    solve_comp(n, r0, next_stamp(n), t);
    int c2 = comp_of(n, r0);
    TPU_ASSERT(c2 >= 0);
    const ici_comp *k2 = &n->comp[c2];
    if (k2->nsh == nsh && !k2->bad &&
        memcmp(n->shpool + k2->off, n->oldsh,
               (size_t)(2 * nsh) * sizeof(double)) == 0)
        n->nchg = mark;
}

/* Forgets every component: the next update that is not a solve over all
 * flows solves them all again. */
static void comps_reset(ici *n)
{
    for (int c = 0; c < n->ncomp; c++)
        n->comp[c].alive = 0;
    n->ncomp = n->nfree = n->nshpool = n->shlive = n->nbad = 0;
    n->g.n = n->own.n = 0;
    n->invalid = 1;
}

static void fill_all(ici *n, double t)
{
    n->cshares = grow(n, n->cshares, &n->capcsh, n->nact, sizeof(double));
    fill(n, n->aid, n->nact, n->arate, n->cshares, NULL);
    n->nglobal++;
    for (int s = 0; s < n->nact; s++)
        tf_set(n, s, t);
}

/* New rates after starts and finishes at time t (see above); each flow
 * whose rate may have changed gets its finish time t + rem / rate
 * again. */
static void rates_update(ici *n, double t)
{
    /* Where most resources changed (a symmetric collective's step ends on
     * every chip at once) the components would all be solved again one by
     * one: the solve over all flows is cheaper, and the components are
     * forgotten until an update touches few again (solving them all
     * anew costs more than a solve over all: a tighter limit then; v3-2048
     * alternates steps that end everywhere with ones that end on a third
     * of the chips). */
    if (2 * n->ndirty > n->nbusy || (n->invalid && 8 * n->ndirty > n->nbusy)) {
        for (int i = 0; i < n->ndirty; i++)
            n->res_isdirty[n->dirty[i]] = 0;
        n->ndirty = 0;
        if (!n->invalid)
            comps_reset(n);
        fill_all(n, t);
        return;
    }
    if (n->invalid) {
        n->invalid = 0;
        for (int r = 0; r < n->nres; r++)
            if (n->rl_len[r] > 0)
                res_dirty(n, r);
    }
    int stamp = next_stamp(n);
    n->nchg = 0;
    for (int di = 0; di < n->ndirty; di++) {
        int r0 = n->dirty[di];
        n->res_isdirty[r0] = 0;
        if (n->res_mark[r0] == stamp)
            continue;
        comp_kill(n, comp_of(n, r0));
        solve_comp(n, r0, stamp, t);
    }
    n->ndirty = 0;
    /* shares that appeared in or vanished from g: the components with an
     * own share within the tolerance above one are solved again */
    int rounds = 0, settled = 1;
    while (n->nchg > 0 && n->nbad == 0) {
        if (++rounds > 64) {
            settled = 0;
            break;
        }
        int nv = n->nchg, hit = 0;
        n->chg2 = grow(n, n->chg2, &n->capchg2, nv, sizeof(double));
        memcpy(n->chg2, n->chg, (size_t)nv * sizeof(double));
        n->nchg = 0;
        for (int i = 0; i < nv && !hit; i++) {
            double v = n->chg2[i], hi = v * (1 + 1e-12);
            int j = tab_find(&n->own, v);
            if (j < n->own.n && n->own.e[j].v == v)
                j++;
            hit = j < n->own.n && !(n->own.e[j].v > hi);
        }
        if (!hit)
            continue;
        for (int c = 0; c < n->ncomp; c++) {
            ici_comp *k = &n->comp[c];
            if (!k->alive)
                continue;
            int redo = 0;
            for (int j = 0; j < k->nsh && !redo; j++) {
                double own = n->shpool[k->off + 2 * j];
                for (int i = 0; i < nv && !redo; i++) {
                    double v = n->chg2[i];
                    redo = own > v && !(own > v * (1 + 1e-12));
                }
            }
            if (redo) {
                comp_redo(n, c, t);
                n->nredo++;
            }
        }
    }
    if (n->nbad > 0 || !settled) {
        comps_reset(n);
        fill_all(n, t);
    }
}

/* Arrival of flow id at time t: successors whose last predecessor this
 * was become ready. */
static void arrive(ici *n, int id, double t, double *t_end)
{
    const ici_fl *f = &n->fl[id];
    /* the same doubles add_flow stored before: hops x hop latency, the
     * on-chip latency, or 0 (a core to itself) */
    double lat = f->nr == 0 ? 0
                 : n->route[f->r0] >= 4 * n->nchips ? n->p.onchip_latency_s
                                                    : f->nr * n->p.hop_latency_s;
    double arr = t + lat;
    if (arr > *t_end)
        *t_end = arr;
    for (int k = f->head; k != NOFLOW; k = n->edge[k].next) {
        int v = n->edge[k].to2, id2 = v >> 1;
        double when = (v & 1) ? t : arr;
        ici_fl *s = &n->fl[id2];
        if (when > s->ready)
            s->ready = when;
        if (--s->deps == 0)
            q_push(n, s->ready, id2);
    }
}

/* Runs the DAG built since dag_begin from time 0; returns the last
 * arrival. */
static double dag_run(ici *n)
{
    int nf = n->nfl;
    if (nf == 0)
        return 0;
    q_clear(n);
    for (int i = 0; i < nf; i++)
        if (n->fl[i].deps == 0)
            q_push(n, 0.0, i);
    n->nact = 0;
    comps_reset(n);
    n->invalid = 0;
    n->nbusy = 0;
    /* the previous call's last finishes left resources marked dirty */
    for (int i = 0; i < n->ndirty; i++)
        n->res_isdirty[n->dirty[i]] = 0;
    n->ndirty = 0;
    /* every flow of the previous call finished: the resources' lists are
     * empty, and their component ids stale (comp_of refuses them by
     * serial number, which starts again only here, far from overflow) */
    if (n->ser > INT_MAX / 2) {
        for (int r = 0; r < n->nres; r++)
            n->res_comp[r] = -1;
        n->ser = 0;
    }
    double t = 0, t_end = 0;
    int done = 0;
    while (done < nf) {
        /* start everything ready by now */
        while (!q_empty(n) && q_top_t(n) <= t + ICI_TOL_T) {
            int id = q_pop(n);
            const ici_fl *f = &n->fl[id];
            if (f->nr == 0 || f->rem <= 0) {
                done++;
                arrive(n, id, t, &t_end);
            } else {
                act_start(n, id);
            }
        }
        int nact = n->nact;
        if (nact == 0) {
            if (q_empty(n))
                break;
            t = q_top_t(n);
            continue;
        }
        if (n->ndirty > 0)
            rates_update(n, t);
        double tn = INFINITY;
        for (int i = 0; i < nact; i++)
            if (n->atf[i] < tn)
                tn = n->atf[i];
        if (!q_empty(n) && q_top_t(n) < tn)
            tn = q_top_t(n);
        double dt = tn - t;
        t = tn;
        int keep = 0, finished = 0;
        for (int i = 0; i < nact; i++) {
            int id = n->aid[i];
            double rate = n->arate[i];
            double rem = n->arem[i] - rate * dt;
            if (rem <= rate * ICI_TOL_T) {
                n->fin[finished++] = id;
                act_finish(n, id);
            } else {
                n->aid[keep] = id;
                n->arem[keep] = rem;
                n->arate[keep] = rate;
                n->atf[keep] = t + rem / rate;
                n->fl[id].deps = keep;
                keep++;
            }
        }
        n->nact = keep;
        for (int i = 0; i < finished; i++) {
            done++;
            arrive(n, n->fin[i], t, &t_end);
        }
    }
    TPU_ASSERT(done == nf); /* a cycle in the DAG would stop short */
    return t_end;
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
        if (chip_x(n, ch) < mx)
            mx = chip_x(n, ch);
        if (chip_y(n, ch) < my)
            my = chip_y(n, ch);
    }
    for (int i = 0; i < m; i++) {
        int ch = cores[i] / 2;
        out[i] = 2 * (chip_x(n, ch) - mx + (chip_y(n, ch) - my) * n->dx) +
                 (cores[i] & 1);
    }
    *ox = mx;
    *oy = my;
}

static int shift_chip(const ici *n, int chip, int ox, int oy)
{
    int x = (chip_x(n, chip) + ox) % n->dx, y = (chip_y(n, chip) + oy) % n->dy;
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
    int *k = tmp_alloc(m, (size_t)(nkey + 1) * sizeof(int));
    double *kbs =
        kb ? tmp_alloc(m, (size_t)(nkey / 2 + 1) * sizeof(double)) : NULL;
    int *res = tmp_alloc(m, nr * sizeof(int));
    double *res_bytes = tmp_alloc(m, nr * sizeof(double));
    int *core = tmp_alloc(m, nc * sizeof(int));
    double *core_bytes = tmp_alloc(m, nc * sizeof(double));
    tmp_keep(m, k);
    if (kbs)
        tmp_keep(m, kbs);
    tmp_keep(m, res);
    tmp_keep(m, res_bytes);
    tmp_keep(m, core);
    tmp_keep(m, core_bytes);
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
 * freed, the run state idle (what dag_run expects of a finished call:
 * empty resource lists, no counts left by fill, no per-call statistics),
 * the totals and the cache untouched. */
static void call_failed(ici *n)
{
    tmp_free_all(&n->mem);
    n->mem.armed = 0;
    for (int r = 0; r < n->nres; r++) {
        n->rl_len[r] = 0;
        n->res_cnt[r] = 0;
    }
    n->nact = n->nbusy = 0;
    acc_drop(n);
    dag_begin(n);
}

/* ---- collective-permute ------------------------------------------------- */

/* The duration of a permute (simulated from idle links, or replayed). */
static double permute_run(ici *n, const ici_flow *flows, int nflows)
{
    n->key = grow(n, n->key, &n->capkey, 2 * nflows, sizeof(int));
    n->kbytes = grow(n, n->kbytes, &n->capkbytes, nflows, sizeof(double));
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
        dag_begin(n);
        for (int i = 0; i < nflows; i++)
            add_flow(n, key[2 * i], key[2 * i + 1], kb[i], 1);
        dur = dag_run(n);
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

/* A group's chips laid out on a grid na x nb: the rectangle of distinct x
 * and y coordinates when the chips fill it (dims a = x, b = y), otherwise
 * one ring over the chips in the order the group lists them. */
typedef struct {
    int na, nb, rect;
    int close[2];    /* dimension's ring closes over wrap links */
    int *grid;       /* chip at (ia, ib) = grid[ia + na * ib] */
    int *has;        /* per grid cell: bit 0 even core, bit 1 odd core */
} ici_grp;

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

static int uniq_sorted(int *v, int m)
{
    qsort(v, (size_t)m, sizeof(int), cmp_int);
    int k = 0;
    for (int i = 0; i < m; i++)
        if (k == 0 || v[k - 1] != v[i])
            v[k++] = v[i];
    return k;
}

/* 1 when a ring over these sorted coordinates closes over wrap-around
 * links without doubling back: the dimension wraps and the coordinates
 * are spread evenly around all of it. */
static int ring_closes(const int *c, int m, int d, int wrap)
{
    if (m < 2 || !wrap || d % m != 0)
        return 0;
    for (int i = 0; i < m; i++)
        if (c[i] != c[0] + i * (d / m))
            return 0;
    return 1;
}

/* A ring on a line: out on the even places, back on the odd ones
 * (0 2 4 .. 5 3 1), so every ring edge is one or two hops and each link
 * direction carries one edge, instead of one edge crossing the whole line
 * back (same bandwidth, far less latency per step). */
static void line_order(ici_mem *mem, int *c, int m)
{
    int *t = tmp_alloc(mem, (size_t)(unsigned)m * sizeof(int));
    int k = 0;
    for (int i = 0; i < m; i += 2)
        t[k++] = c[i];
    for (int i = (m - 1) % 2 == 1 ? m - 1 : m - 2; i >= 1; i -= 2)
        t[k++] = c[i];
    memcpy(c, t, (size_t)(unsigned)m * sizeof(int));
    tmp_free(mem, t);
}

static void grp_free(ici_mem *m, ici_grp *g)
{
    tmp_free(m, g->grid);
    tmp_free(m, g->has);
}

/* The group's layout; its arrays are temporaries of the call (grp_free). */
static void grp_build(const ici *n, ici_mem *m, const int *cores, int ncores,
                      ici_grp *g)
{
    int *chips = tmp_alloc(m, (size_t)ncores * sizeof(int));
    int *mask = tmp_calloc(m, (size_t)n->nchips, sizeof(int));
    int *xs = tmp_alloc(m, (size_t)ncores * sizeof(int));
    int *ys = tmp_alloc(m, (size_t)ncores * sizeof(int));
    int nc = 0;
    for (int i = 0; i < ncores; i++) {
        int ch = cores[i] / 2;
        if (!mask[ch])
            chips[nc++] = ch;
        mask[ch] |= 1 << (cores[i] & 1);
    }
    for (int i = 0; i < nc; i++) {
        xs[i] = chip_x(n, chips[i]);
        ys[i] = chip_y(n, chips[i]);
    }
    int nx = uniq_sorted(xs, nc), ny = uniq_sorted(ys, nc);
    g->rect = nx * ny == nc;
    g->close[0] = g->rect && ring_closes(xs, nx, n->dx, n->wrapx);
    g->close[1] = g->rect && ring_closes(ys, ny, n->dy, n->wrapy);
    if (g->rect) {
        if (!g->close[0])
            line_order(m, xs, nx);
        if (!g->close[1])
            line_order(m, ys, ny);
    }
    g->na = g->rect ? nx : nc;
    g->nb = g->rect ? ny : 1;
    g->grid = tmp_alloc(m, (size_t)nc * sizeof(int));
    g->has = tmp_alloc(m, (size_t)nc * sizeof(int));
    if (g->rect) {
        for (int ib = 0; ib < ny; ib++)
            for (int ia = 0; ia < nx; ia++)
                g->grid[ia + nx * ib] = xs[ia] + ys[ib] * n->dx;
    } else {
        memcpy(g->grid, chips, (size_t)nc * sizeof(int));
    }
    for (int i = 0; i < nc; i++)
        g->has[i] = mask[g->grid[i]];
    tmp_free(m, chips);
    tmp_free(m, mask);
    tmp_free(m, xs);
    tmp_free(m, ys);
}

/* A stream is one share of the data with its own route through the
 * algorithm: reduce-scatter along dimension d1 then d2, all-gather along
 * d2 then d1, on rings running in direction dir, owned on each chip by
 * the core of parity `par`.  On a 2D group four streams of a quarter
 * each (x-then-y and y-then-x, both ways round) keep all four links of a
 * chip busy at once; on a ring two halves go opposite ways. */
typedef struct {
    int d1, dir, par;
} ici_stream;

static int grp_streams(const ici_grp *g, ici_stream *s)
{
    if (g->na > 1 && g->nb > 1) {
        s[0] = (ici_stream){0, 1, 0};
        s[1] = (ici_stream){0, -1, 0};
        s[2] = (ici_stream){1, 1, 1};
        s[3] = (ici_stream){1, -1, 1};
        return 4;
    }
    if (g->na > 1 || g->nb > 1) {
        int d = g->na > 1 ? 0 : 1;
        s[0] = (ici_stream){d, 1, 0};
        s[1] = (ici_stream){d, -1, 1};
        return 2;
    }
    return 0;
}

/* Position along a ring of n at rank r when the ring runs direction dir. */
static int ring_pos(int r, int dir, int n)
{
    r %= n;
    return dir > 0 ? r : (n - r) % n;
}

/* Grid cell of the chip at ranks (r1, r2) of stream s. */
static int stream_cell(const ici_grp *g, const ici_stream *s, int r1, int r2)
{
    int n1 = s->d1 == 0 ? g->na : g->nb, n2 = s->d1 == 0 ? g->nb : g->na;
    int p1 = ring_pos(r1, s->dir, n1), p2 = ring_pos(r2, s->dir, n2);
    return s->d1 == 0 ? p1 + g->na * p2 : p2 + g->na * p1;
}

static int cell_owner(const ici_grp *g, int cell, int par)
{
    int has = g->has[cell], chip = g->grid[cell];
    if (has == 3)
        return 2 * chip + par;
    return 2 * chip + (has == 2 ? 1 : 0);
}

static int cell_other(const ici_grp *g, int cell, int par)
{
    return g->has[cell] == 3 ? 2 * g->grid[cell] + (1 - par) : -1;
}

/* ---- all-reduce --------------------------------------------------------- */

#define NDONE 4

typedef struct {
    int d[NDONE];
} ici_done;

static void done_add(ici_done *d, int id)
{
    if (id == NOFLOW)
        return;
    for (int i = 0; i < NDONE; i++)
        if (d->d[i] == NOFLOW) {
            d->d[i] = id;
            return;
        }
    TPU_ASSERT(0);
}

static void dep_done(ici *n, const ici_done *d, int after)
{
    for (int i = 0; i < NDONE; i++)
        add_dep(n, d->d[i], after);
}

/* One ring phase of stream s along its first (which = 1) or second
 * (which = 2) dimension: n-1 steps, each chip sending `seg` bytes to the
 * next chip on the ring.  A send waits for the chip's own previous send
 * (a link queue delivers in order), for the previous step's arrival from
 * upstream, and, on the first step, for entry[cell].
 * rs_chain (phase 1 of a chip with two cores): before its step k the
 *   owner needs the other core's share of the segment it sends, so the
 *   other core sends its n pieces in that order, one after another.
 * ag_chain (last phase): every segment that arrives is passed on to the
 *   other core, in order.
 * split: the on-chip leg's head and tail.  With an rs_chain the first
 *   step's segment goes as `split` messages, each waiting only for its
 *   part of the other core's piece, so the link starts after 1/split of
 *   the piece instead of all of it; with an ag_chain the last step's
 *   segment goes as `split` messages and each part is passed on to the
 *   other core as it arrives, so the call ends 1/split of a segment's
 *   on-chip time after the last arrival, not a whole one.  (The DMA
 *   engines stream a message packet by packet; the parts are the fluid
 *   model's stand-in for that.)  sub[cell] holds the first part's id
 *   (the parts of one message are consecutive flows).
 * last_in[cell] receives the last arrival into each chip. */
static void ring_phase(ici *n, const ici_grp *g, const ici_stream *s,
                       int which, double seg, const ici_done *entry,
                       int *rs_chain, int *ag_chain, int split, int *sub,
                       int *prev, int *cur, int *last_in)
{
    int n1 = s->d1 == 0 ? g->na : g->nb, n2 = s->d1 == 0 ? g->nb : g->na;
    int nr = which == 1 ? n1 : n2, other = which == 1 ? n2 : n1;
    int ncell = n1 * n2;
    TPU_ASSERT(split >= 1 && split <= ICI_SPLIT);
    for (int i = 0; i < ncell; i++)
        prev[i] = NOFLOW;
    for (int k = 0; k < nr; k++) {
        /* parts of this step's message, and of the one that arrived at
         * step k-1 (an all-gather's last) */
        int m = (rs_chain && k == 0) || (ag_chain && k == nr - 2) ? split : 1;
        int pm = ag_chain && k == nr - 1 ? split : 1;
        for (int o = 0; o < other; o++)
            for (int r = 0; r < nr; r++) {
                int r1 = which == 1 ? r : o, r2 = which == 1 ? o : r;
                int cell = stream_cell(g, s, r1, r2);
                int rk = r1 + n1 * r2;
                int up = which == 1 ? ((r1 + n1 - 1) % n1) + n1 * r2
                                    : r1 + n1 * ((r2 + n2 - 1) % n2);
                int owner = cell_owner(g, cell, s->par);
                int oth = cell_other(g, cell, s->par);
                int c[ICI_SPLIT];
                for (int j = 0; j < m; j++)
                    c[j] = NOFLOW;
                if (rs_chain && oth >= 0)
                    for (int j = 0; j < m; j++) {
                        c[j] = add_flow(n, oth, owner, seg / m, s->dir);
                        add_dep_sent(n, rs_chain[rk], c[j]);
                        rs_chain[rk] = c[j];
                    }
                if (ag_chain && oth >= 0 && k > 0)
                    /* the segment that arrived at step k-1 */
                    for (int j = 0; j < pm; j++) {
                        int a = add_flow(n, owner, oth, seg / pm, s->dir);
                        add_dep(n, pm > 1 ? sub[up] + j : prev[up], a);
                        add_dep_sent(n, ag_chain[rk], a);
                        ag_chain[rk] = a;
                    }
                cur[rk] = NOFLOW;
                if (k < nr - 1) {
                    int nxt = which == 1 ? stream_cell(g, s, r1 + 1, r2)
                                         : stream_cell(g, s, r1, r2 + 1);
                    int dst = cell_owner(g, nxt, s->par);
                    int f = NOFLOW;
                    for (int j = 0; j < m; j++) {
                        int before = j > 0 ? f : prev[rk];
                        f = add_flow(n, owner, dst, seg / m, s->dir);
                        TPU_ASSERT(j == 0 || f == sub[rk] + j);
                        if (j == 0)
                            sub[rk] = f;
                        add_dep(n, c[j], f);
                        if (k == 0)
                            dep_done(n, &entry[rk], f);
                        else
                            add_dep(n, prev[up], f);
                        add_dep_sent(n, before, f);
                    }
                    cur[rk] = f;
                }
            }
        if (k < nr - 1) {
            for (int i = 0; i < ncell; i++) {
                int r1 = i % n1, r2 = i / n1;
                int dn = which == 1 ? ((r1 + 1) % n1) + n1 * r2
                                    : r1 + n1 * ((r2 + 1) % n2);
                last_in[dn] = cur[i];
            }
            memcpy(prev, cur, (size_t)ncell * sizeof(int));
        }
    }
}

static ici_done done_none(void)
{
    ici_done d;
    for (int i = 0; i < NDONE; i++)
        d.d[i] = NOFLOW;
    return d;
}

/* Adds the flows of one group's all-reduce of `bytes` per core. */
static void build_allreduce(ici *n, const int *cores, int ncores,
                            double bytes)
{
    if (ncores < 2)
        return;
    ici_mem *m = &n->mem;
    ici_grp g;
    grp_build(n, m, cores, ncores, &g);
    ici_stream st[4];
    int ns = grp_streams(&g, st);
    if (ns == 0) {
        /* one chip, two cores: each sends the other its whole buffer over
         * the on-chip path (one step beats reduce-scatter + all-gather:
         * same bytes per direction, one latency instead of two) */
        add_flow(n, cores[0], cores[1], bytes, 1);
        add_flow(n, cores[1], cores[0], bytes, 1);
        grp_free(m, &g);
        return;
    }
    int ncell = g.na * g.nb;
    size_t sz = (size_t)ncell * sizeof(int);
    int *prev = tmp_alloc(m, sz), *cur = tmp_alloc(m, sz);
    int *last = tmp_alloc(m, sz), *rs = tmp_alloc(m, sz);
    int *ag = tmp_alloc(m, sz), *sub = tmp_alloc(m, sz);
    int *own = tmp_alloc(m, sz);
    ici_done *done = tmp_alloc(m, (size_t)ncell * sizeof(ici_done));
    int two = 0;
    for (int i = 0; i < ncell; i++)
        two |= g.has[i] == 3;
    for (int si = 0; si < ns; si++) {
        const ici_stream *s = &st[si];
        int n1 = s->d1 == 0 ? g.na : g.nb, n2 = s->d1 == 0 ? g.nb : g.na;
        /* With two cores a chip the on-chip leg moves half the buffer each
         * way per phase: the other core's pieces before the reduce-scatter
         * steps that need them, the reduced segments after the all-gather
         * steps that bring them.  Between the two the chip only uses
         * links (the d2 phases), so with one pass the on-chip path idles
         * there and has to catch up at both ends.  The stream is cut into
         * chunks that run the whole algorithm each, so one chunk's on-chip
         * leg overlaps another's ring: segments of ICI_MIN_PIECE and one
         * shorter rest, at most ICI_MAX_PIECES per stream, then equal ones
         * (a modelling choice, not hardware).  Fixed-size pieces keep the
         * time monotone in the bytes: equal pieces cut finer at each
         * threshold made a larger buffer up to 0.6% faster than a smaller
         * one.  Two cases take at least ICI_MIN_CHUNKS chunks however long
         * the ring.  Rectangles: the longer ring's streams were not cut
         * while the shorter ring's were, and the two kinds went out of
         * step (16x8: 1.23 x the bound at 256 MiB, no latency; 1.065 with
         * both cut, the algorithm's own imbalance being 1.063).  Groups
         * whose rings both close over wrap links: the on-chip path carries
         * as much as the four links (bytes each way at 2 x a link against
         * 2(n-1)/n x bytes over 4 links), so it has to work during the d2
         * phases too (v3-2048: 1.031 -> 1.016).  Elsewhere a second chunk
         * costs 4x the host time for 0.2%. */
        int chunks = 1, most = (ICI_MAX_PIECES + n1 - 1) / n1;
        if (most < ICI_MIN_CHUNKS && (g.na != g.nb || (g.close[0] && g.close[1])))
            most = ICI_MIN_CHUNKS;
        double stream = bytes / ns, full = stream, rest = stream;
        if (two) {
            double piece = ICI_MIN_PIECE * n1;
            double need = ceil(stream / piece);
            if (need > most) {
                chunks = most;
                full = rest = stream / most;
            } else if (need > 1) {
                chunks = (int)need;
                full = piece;
                rest = stream - piece * (chunks - 1);
            }
        }
        for (int i = 0; i < ncell; i++)
            rs[i] = own[i] = NOFLOW;
        for (int ch = 0; ch < chunks; ch++) {
        double q = ch == chunks - 1 ? rest : full;
        double seg1 = q / n1, seg2 = seg1 / n2;
        /* head and tail of the on-chip leg in parts of ICI_MIN_PIECE or
         * more (ring_phase) */
        int split = 1;
        if (two)
            while (split < ICI_SPLIT && seg1 / (split + 1) >= ICI_MIN_PIECE)
                split++;
        /* The other core's pieces keep one queue across chunks (chunk c+1's
         * are needed after chunk c's), but the passes after the all-gather
         * start a queue per chunk: chained across chunks, chunk c+1's first
         * pass (its own reduced segment, ready after the d2 phases) waited
         * for chunk c's last, which waits for chunk c's last all-gather
         * arrival; every chunk's on-chip leg then slid behind the previous
         * one's ring and the last ones ran after the links had finished
         * (v3-8, 256 MiB, no latency: 11.8% above the bound). */
        for (int i = 0; i < ncell; i++) {
            done[i] = done_none();
            ag[i] = NOFLOW;
        }
        /* reduce-scatter along d1 (with the on-chip reduction folded in) */
        ring_phase(n, &g, s, 1, seg1, done, rs, NULL, split, sub, prev, cur,
                   last);
        for (int i = 0; i < ncell; i++) {
            done_add(&done[i], last[i]);
            done_add(&done[i], rs[i]);
            /* The previous chunk's passes wait until this chunk's pieces
             * have crossed: the pieces gate a ring, the passes only the
             * end.  Where the on-chip path is what binds (four links a
             * chip, ici.wrap=1 on v3-8: the path carries the buffer each
             * way, the links 1.5/4 of it), the per-chunk queues would
             * otherwise share it with the pieces and starve the next
             * chunk's ring (256 MiB: 1.3385 x the link bound against the
             * path's own 1.3333). */
            add_dep_sent(n, rs[i], own[i]);
        }
        if (n2 > 1) {
            /* reduce-scatter along d2, then all-gather along d2 */
            ring_phase(n, &g, s, 2, seg2, done, NULL, NULL, 1, sub, prev, cur,
                       last);
            for (int i = 0; i < ncell; i++)
                done_add(&done[i], last[i]);
            ring_phase(n, &g, s, 2, seg2, done, NULL, NULL, 1, sub, prev, cur,
                       last);
            for (int i = 0; i < ncell; i++)
                done_add(&done[i], last[i]);
        }
        /* the chip's own reduced segment goes to the other core first */
        for (int r2 = 0; r2 < n2; r2++)
            for (int r1 = 0; r1 < n1; r1++) {
                int rk = r1 + n1 * r2, cell = stream_cell(&g, s, r1, r2);
                int oth = cell_other(&g, cell, s->par);
                if (oth < 0)
                    continue;
                int a = add_flow(n, cell_owner(&g, cell, s->par), oth, seg1,
                                 s->dir);
                dep_done(n, &done[rk], a);
                add_dep_sent(n, ag[rk], a);
                ag[rk] = a;
                own[rk] = a;
            }
        /* all-gather along d1 */
        ring_phase(n, &g, s, 1, seg1, done, NULL, ag, split, sub, prev, cur,
                   last);
        }
    }
    tmp_free(m, prev);
    tmp_free(m, cur);
    tmp_free(m, last);
    tmp_free(m, rs);
    tmp_free(m, ag);
    tmp_free(m, sub);
    tmp_free(m, own);
    tmp_free(m, done);
    grp_free(m, &g);
}

/* What ici_check_group checks, asserted (the collectives' callers
 * check their groups), with its scratch from the call's memory. */
static void assert_group(const ici *n, ici_mem *m, const int *cores,
                         int ncores)
{
    TPU_ASSERT(cores && ncores >= 1 && ncores <= n->ncores);
    unsigned char *seen = tmp_calloc(m, (size_t)n->ncores, 1);
    for (int i = 0; i < ncores; i++) {
        int c = cores[i];
        TPU_ASSERT(c >= 0 && c < n->ncores && !seen[c]);
        seen[c] = 1;
    }
    tmp_free(m, seen);
}

/* The duration of the groups' all-reduces (simulated or replayed). */
static double allreduce_run(ici *n, const int *cores, int group_size,
                            int ngroups, double bytes)
{
    int total = group_size * ngroups;
    assert_group(n, &n->mem, cores, total);
    if (!(bytes > 0) || group_size < 2)
        return 0;
    n->key = grow(n, n->key, &n->capkey, total, sizeof(int));
    int *key = n->key, ox, oy;
    canon(n, cores, total, key, &ox, &oy);
    uint64_t h = key_hash(0, bytes, group_size, ngroups, key, total, NULL);
    ici_cache_ent *e =
        cache_find(n, h, 0, bytes, group_size, ngroups, key, total, NULL);
    double dur;
    if (e) {
        dur = cache_replay(n, e, ox, oy);
    } else {
        dag_begin(n);
        for (int gi = 0; gi < ngroups; gi++)
            build_allreduce(n, key + gi * group_size, group_size, bytes);
        dur = dag_run(n);
        cache_store(n, h, 0, bytes, group_size, ngroups, key, total, NULL,
                    dur, ox, oy);
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

/* Links a dimension of the group drives per chip: both directions of a
 * ring that closes over wrap-around links, one of a line (out and back). */
static int dim_links(const ici_grp *g, int dim)
{
    int m = dim == 0 ? g->na : g->nb;
    return m < 2 ? 0 : g->close[dim] ? 2 : 1;
}

static int links_run(const ici *n, ici_mem *m, const int *cores, int ncores)
{
    assert_group(n, m, cores, ncores);
    ici_grp g;
    grp_build(n, m, cores, ncores, &g);
    int links;
    if (!g.rect)
        links = g.na > 1 ? 2 : 0;
    else
        links = dim_links(&g, 0) + dim_links(&g, 1);
    grp_free(m, &g);
    return links;
}

/* The object is const here: the call's memory lives in the caller's
 * frame (not in the function that calls setjmp). */
static int links_guarded(const ici *n, ici_mem *m, const int *cores,
                         int ncores)
{
    if (setjmp(m->jb)) {
        tmp_free_all(m);
        return -1;
    }
    m->armed = 1;
    return links_run(n, m, cores, ncores);
}

int ici_allreduce_links(const ici *n, const int *cores, int ncores)
{
    ici_mem m;
    m.armed = m.ntmp = 0;
    m.fail_after = n->mem.fail_after;
    return links_guarded(n, &m, cores, ncores);
}

/* ---- values ------------------------------------------------------------- */

/* The chip's contribution: its cores' values, even core first (the owner
 * adds the piece the other core sent). */
static float cell_value(const ici_grp *g, int cell, const int *slot,
                        float **bufs, size_t e)
{
    int chip = g->grid[cell];
    float v = 0;
    int first = 1;
    for (int c = 0; c < 2; c++) {
        if (!(g->has[cell] & (1 << c)))
            continue;
        float x = bufs[slot[2 * chip + c]][e];
        v = first ? x : v + x;
        first = 0;
    }
    return v;
}

static void values_run(ici *n, const int *cores, int ncores, float **bufs,
                       size_t len)
{
    ici_mem *m = &n->mem;
    assert_group(n, m, cores, ncores);
    if (ncores < 2 || len == 0)
        return;
    /* everything is allocated before a value changes */
    int *slot = tmp_alloc(m, (size_t)n->ncores * sizeof(int));
    for (int i = 0; i < ncores; i++)
        slot[cores[i]] = i;
    ici_grp g;
    grp_build(n, m, cores, ncores, &g);
    ici_stream st[4];
    int ns = grp_streams(&g, st);
    if (ns == 0) {
        int chip = g.grid[0];
        float *a = bufs[slot[2 * chip]], *b = bufs[slot[2 * chip + 1]];
        for (size_t e = 0; e < len; e++) {
            float v = a[e] + b[e];
            a[e] = b[e] = v;
        }
    }
    /* Each element belongs to one stream, one d1 segment g1 and one d2
     * sub-segment g2.  Reduce-scatter along d1 starts segment g1 at ring
     * rank g1 and adds ranks g1+1, g1+2, ... in turn; along d2 the partial
     * sums of sub-segment g2 are added from rank g2 on in the same way.
     * The all-gathers copy, so every core ends with the same bits. */
    for (int si = 0; si < ns; si++) {
        const ici_stream *s = &st[si];
        int n1 = s->d1 == 0 ? g.na : g.nb, n2 = s->d1 == 0 ? g.nb : g.na;
        size_t s0 = len * (size_t)si / (size_t)ns;
        size_t s1 = len * (size_t)(si + 1) / (size_t)ns;
        for (int g1 = 0; g1 < n1; g1++) {
            size_t a0 = s0 + (s1 - s0) * (size_t)g1 / (size_t)n1;
            size_t a1 = s0 + (s1 - s0) * (size_t)(g1 + 1) / (size_t)n1;
            for (int g2 = 0; g2 < n2; g2++) {
                size_t b0 = a0 + (a1 - a0) * (size_t)g2 / (size_t)n2;
                size_t b1 = a0 + (a1 - a0) * (size_t)(g2 + 1) / (size_t)n2;
                for (size_t e = b0; e < b1; e++) {
                    float tot = 0;
                    for (int j = 0; j < n2; j++) {
                        int r2 = (g2 + j) % n2;
                        float part = 0;
                        for (int i = 0; i < n1; i++) {
                            int r1 = (g1 + i) % n1;
                            float v = cell_value(&g, stream_cell(&g, s, r1, r2),
                                                 slot, bufs, e);
                            part = i == 0 ? v : part + v;
                        }
                        tot = j == 0 ? part : tot + part;
                    }
                    for (int c = 0; c < ncores; c++)
                        bufs[c][e] = tot;
                }
            }
        }
    }
    grp_free(m, &g);
    tmp_free(m, slot);
}

static int values_guarded(ici *n, const int *cores, int ncores, float **bufs,
                          size_t len)
{
    if (setjmp(n->mem.jb)) {
        call_failed(n);
        return -1;
    }
    n->mem.armed = 1;
    values_run(n, cores, ncores, bufs, len);
    n->mem.armed = 0;
    return 0;
}

int ici_allreduce_values(ici *n, const int *cores, int ncores, float **bufs,
                         size_t len)
{
    return values_guarded(n, cores, ncores, bufs, len);
}

void ici_fail_alloc_after(ici *n, long k)
{
    n->mem.fail_after = k;
}
