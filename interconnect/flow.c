/* flow — the DAG of flows a call builds and its fluid simulation (the
 * time model of interconnect/ici.c's calls).
 *
 * A flow-level (fluid) model, not flits.  Each link direction and each
 * direction of the on-chip path is a resource; all flows in flight share
 * every resource they cross max-min fairly, which is what per-direction
 * queues served round robin converge to once a packet is small against a
 * transfer.  Rates are recomputed whenever a flow starts or ends; a
 * flow's data arrives hops x hop_latency after its last byte leaves
 * (cut-through routers).  Collectives are DAGs of flows: a send starts
 * when every arrival it needs has happened, so pipelining and contention
 * come out of the simulation, not out of a formula.
 */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "interconnect/ici_internal.h"

/* Events closer than this are one event: a ring's chips finish the same
 * step at times that differ by rounding only, and merging them keeps the
 * number of rate recomputations proportional to steps, not to flows. */
#ifndef ICI_TOL_T
#define ICI_TOL_T 1e-12
#endif


static double res_bps(const ici *n, int r)
{
    return r < 4 * n->nchips ? n->link_bps : n->onchip_bps;
}

/* ---- building the DAG --------------------------------------------------- */

void flow_begin(ici *n)
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
int flow_add(ici *n, int src, int dst, double bytes, int pref)
{
    n->fl = ici_grow(n, n->fl, &n->capfl, n->nfl + 1, sizeof(flow_fl));
    int id = n->nfl++;
    flow_fl *f = &n->fl[id];
    memset(f, 0, sizeof *f);
    f->head = NOFLOW;
    f->rem = bytes > 0 ? bytes : 0;
    f->r0 = n->nroute;
    int a = src / 2, b = dst / 2;
    if (src == dst) {
        f->nr = 0;
    } else if (a == b) {
        n->route =
            ici_grow(n, n->route, &n->caproute, n->nroute + 1, sizeof(int));
        n->route[n->nroute++] = 4 * n->nchips + 2 * a + (src & 1);
        f->nr = 1;
    } else {
        f->nr = ici_route_append(n, a, b, pref);
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
    n->edge =
        ici_grow(n, n->edge, &n->capedge, n->nedge + 1, sizeof(flow_edge));
    n->edge[n->nedge].to2 = 2 * after + sent;
    n->edge[n->nedge].next = n->fl[before].head;
    n->fl[before].head = n->nedge++;
    n->fl[after].deps++;
}

void flow_dep(ici *n, int before, int after)
{
    add_dep_kind(n, before, after, 0);
}

void flow_dep_sent(ici *n, int before, int after)
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
    n->bh = ici_grow(n, n->bh, &n->capbh, n->nbh + 1, sizeof(int));
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
        int *slot = ici_tmp_alloc(&n->mem, (size_t)n->nbk * sizeof(int));
        for (int i = 0; i < n->nbk; i++)
            slot[i] = q_slot(n, n->bk[i].t);
        for (int i = 0; i < n->nbk; i++) {
            n->hash[slot[i]] = -1;
            n->bk[i].n = n->bk[i].pos = 0;
        }
        ici_tmp_free(&n->mem, slot);
    }
    n->nbk = n->nbh = 0;
}

static void q_rehash(ici *n, int cap)
{
    if (cap != n->hcap) {
        n->hash = ici_ralloc(&n->mem, n->hash, (size_t)cap * sizeof(int));
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
    flow_bucket *nb =
        ici_tmp_alloc(&n->mem, (size_t)n->capbk * sizeof(flow_bucket));
    unsigned char *used = ici_tmp_calloc(&n->mem, (size_t)n->capbk, 1);
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
    ici_tmp_free(&n->mem, used);
    ici_tmp_keep(&n->mem, nb);
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
        flow_bucket *nb =
            ici_ralloc(&n->mem, n->bk, (size_t)c * sizeof(flow_bucket));
        memset(nb + n->capbk, 0, (size_t)(c - n->capbk) * sizeof(flow_bucket));
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
    flow_bucket *k = &n->bk[b];
    if (k->n == k->pos) {
        /* empty: (back) in the heap of times */
        k->n = k->pos = 0;
        bh_push(n, b);
    }
    if (k->n == k->cap) {
        int c = k->cap ? 2 * k->cap : 8;
        int *ids = ici_ralloc(&n->mem, k->ids, (size_t)c * sizeof(int));
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
    flow_bucket *k = &n->bk[n->bh[0]];
    int id = k->ids[k->pos++];
    if (k->pos == k->n)
        bh_pop(n);
    return id;
}

/* A sorted table of distinct doubles, each with how many entries have
 * it. */
static int tab_find(const flow_tab *tb, double v)
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
static int tab_add(ici *n, flow_tab *tb, double v, int d)
{
    int lo = tab_find(tb, v);
    if (lo < tb->n && tb->e[lo].v == v) {
        tb->e[lo].cnt += d;
        TPU_ASSERT(tb->e[lo].cnt >= 0);
        if (tb->e[lo].cnt > 0)
            return 0;
        memmove(tb->e + lo, tb->e + lo + 1,
                (size_t)(tb->n - lo - 1) * sizeof(flow_shv));
        tb->n--;
        return 1;
    }
    TPU_ASSERT(d > 0);
    tb->e = ici_grow(n, tb->e, &tb->cap, tb->n + 1, sizeof(flow_shv));
    memmove(tb->e + lo + 1, tb->e + lo,
            (size_t)(tb->n - lo) * sizeof(flow_shv));
    tb->e[lo].v = v;
    tb->e[lo].cnt = d;
    tb->n++;
    return 1;
}

/* The share a round whose own share is l gets among other components,
 * after a round at prev: the first round of the solve over all flows that
 * reaches it, which is the smallest share s of the table g above prev
 * with s < l <= s (1 + 1e-12) (fill's tolerance), or l itself. */
static double snap_share(const flow_tab *g, double prev, double l)
{
    for (int i = tab_find(g, prev); i < g->n && g->e[i].v < l; i++) {
        double s = g->e[i].v;
        if (s > prev && !(l > s * (1 + 1e-12)))
            return s;
    }
    return l;
}

/* One round of progressive filling begins here: drops from n->touched
 * the resources with no unfrozen flow left (the others keep their
 * order) and returns the smallest share the rest offer, INFINITY when
 * none is left. */
static inline double round_share(ici *n)
{
    int *touched = n->touched, nt = n->ntouched, w = 0;
    const int *cnt = n->res_cnt;
    const double *cap = n->res_cap;
    double share = INFINITY;
    for (int k = 0; k < nt; k++) {
        int r = touched[k];
        if (cnt[r] > 0) {
            touched[w++] = r;
            double s = cap[r] / cnt[r];
            if (s < share)
                share = s;
        }
    }
    n->ntouched = w;
    return share;
}

/* A component's round share snapped to the others' rounds (snap_share),
 * recorded in sh[2 * nsh] (its own) and sh[2 * nsh + 1] (the one it
 * takes); *bad once a share is not positive, after which none is
 * snapped.  *prev is the last round's share. */
static inline double round_snap(const flow_tab *snap, double share, double *sh,
                                int nsh, int *bad, double *prev)
{
    sh[2 * nsh] = share;
    if (share > 0 && !*bad)
        share = snap_share(snap, *prev, share);
    else
        *bad = 1;
    sh[2 * nsh + 1] = share;
    *prev = share;
    return share;
}

/* Slot sl freezes at share: every resource on its route gives that much
 * capacity up and counts one unfrozen flow less. */
static inline void freeze_route(ici *n, int sl, double share)
{
    const int *rt = n->apool + n->aro[sl];
    int nr = n->anr[sl];
    for (int h = 0; h < nr; h++) {
        int q = rt[h];
        n->res_cap[q] -= share;
        n->res_cnt[q]--;
    }
}

/* Max-min fair rates by progressive filling: raise every unfrozen flow's
 * rate together until some resource is full; the flows through it keep
 * that rate; repeat with the capacity that is left.  sl[0..m): slots of
 * active flows in the order they started; rate[i] receives slot sl[i]'s
 * share.  With
 * snap, one connected component solved alone, each round's share is
 * snapped (snap_share) to the rounds of the others, and sh receives
 * (own share, share) per round; returns the number of rounds, or -1 when
 * a share is not positive (snapping not done). */
static int fill(ici *n, const int *sl, int m, double *rate, double *sh,
                const flow_tab *snap)
{
    n->ntouched = 0;
    int nlist = 0, nsh = 0;
    for (int i = 0; i < m; i++) {
        const int *rt = n->apool + n->aro[sl[i]];
        int nr = n->anr[sl[i]];
        for (int h = 0; h < nr; h++) {
            int r = rt[h];
            if (n->res_cnt[r]++ == 0) {
                n->touched[n->ntouched++] = r;
                n->res_cap[r] = res_bps(n, r);
            }
        }
        nlist += nr;
    }
    n->res_list = ici_grow(n, n->res_list, &n->caplist, nlist, sizeof(int));
    int acc = 0;
    for (int k = 0; k < n->ntouched; k++) {
        int r = n->touched[k];
        n->res_start[r] = acc;
        n->res_len[r] = 0;
        acc += n->res_cnt[r];
    }
    for (int i = 0; i < m; i++) {
        const int *rt = n->apool + n->aro[sl[i]];
        int nr = n->anr[sl[i]];
        for (int h = 0; h < nr; h++) {
            int r = rt[h];
            n->res_list[n->res_start[r] + n->res_len[r]++] = i;
        }
    }
    n->frozen = ici_grow(n, n->frozen, &n->capfrozen, m, 1);
    memset(n->frozen, 0, (size_t)(unsigned)m);
    int left = m, bad = 0;
    double prev = 0;
    while (left > 0) {
        double share = round_share(n);
        TPU_ASSERT(share < INFINITY);
        if (share < 0)
            share = 0;
        if (snap)
            share = round_snap(snap, share, sh, nsh, &bad, &prev);
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
                rate[i] = share;
                freeze_route(n, sl[i], share);
            }
        }
    }
    /* every flow froze: every count is back at 0 */
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
    n->chg = ici_grow(n, n->chg, &n->capchg, n->nchg + 1, sizeof(double));
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
    flow_comp *k = &n->comp[c];
    for (int i = 0; i < k->nsh; i++) {
        double own = n->shpool[k->off + 2 * i],
               s = n->shpool[k->off + 2 * i + 1];
        tab_add(n, &n->own, own, -1);
        if (own == s && tab_add(n, &n->g, s, -1))
            changed_add(n, s);
    }
    n->shlive -= k->nsh;
    n->rlive -= k->nres;
    n->nbad -= k->bad;
    k->alive = 0;
    n->comp_free =
        ici_grow(n, n->comp_free, &n->capfree, n->nfree + 1, sizeof(int));
    n->comp_free[n->nfree++] = c;
}

/* Appends cnt resources to the pool of components' resources; returns
 * their offset.  The pool keeps only live components' lists when it
 * would grow. */
static int rpool_append(ici *n, const int *src, int cnt)
{
    if (n->nrpool + cnt > n->caprpool && n->nrpool > 2 * n->rlive) {
        int *pool = ici_tmp_alloc(&n->mem, (size_t)n->caprpool * sizeof(int));
        int w = 0;
        for (int i = 0; i < n->ncomp; i++) {
            flow_comp *k = &n->comp[i];
            if (!k->alive)
                continue;
            memcpy(pool + w, n->rpool + k->roff, (size_t)k->nres * sizeof(int));
            k->roff = w;
            w += k->nres;
        }
        ici_tmp_keep(&n->mem, pool);
        free(n->rpool);
        n->rpool = pool;
        n->nrpool = w;
    }
    n->rpool =
        ici_grow(n, n->rpool, &n->caprpool, n->nrpool + cnt, sizeof(int));
    int off = n->nrpool;
    memcpy(n->rpool + off, src, (size_t)cnt * sizeof(int));
    n->nrpool += cnt;
    return off;
}

/* A live component with the rounds sh[0 .. 2 nsh) and the resources
 * n->rpool[roff .. roff+nres). */
static int comp_new(ici *n, const double *sh, int nsh, int bad, int roff,
                    int nres)
{
    int c;
    if (n->nfree > 0) {
        c = n->comp_free[--n->nfree];
    } else {
        n->comp =
            ici_grow(n, n->comp, &n->capcomp, n->ncomp + 1, sizeof(flow_comp));
        c = n->ncomp++;
        n->comp[c].alive = 0;
    }
    /* the pool keeps only live components' shares when it would grow */
    if (n->nshpool + 2 * nsh > n->capshpool && n->nshpool > 4 * n->shlive) {
        double *pool =
            ici_tmp_alloc(&n->mem, (size_t)n->capshpool * sizeof(double));
        int w = 0;
        for (int i = 0; i < n->ncomp; i++) {
            flow_comp *k = &n->comp[i];
            if (!k->alive)
                continue;
            memcpy(pool + w, n->shpool + k->off,
                   (size_t)(2 * k->nsh) * sizeof(double));
            k->off = w;
            w += 2 * k->nsh;
        }
        ici_tmp_keep(&n->mem, pool);
        free(n->shpool);
        n->shpool = pool;
        n->nshpool = w;
    }
    n->shpool = ici_grow(n, n->shpool, &n->capshpool, n->nshpool + 2 * nsh,
                     sizeof(double));
    flow_comp *k = &n->comp[c];
    k->off = n->nshpool;
    k->nsh = nsh;
    k->roff = roff;
    k->nres = nres;
    k->split = 0;
    k->bad = bad;
    k->alive = 1;
    k->ser = ++n->ser;
    for (int i = 0; i < nres; i++) {
        int r = n->rpool[roff + i];
        n->res_comp[r] = c;
        n->res_ser[r] = k->ser;
    }
    n->rlive += nres;
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

/* The finish-time heap: a binary heap of slots ordered by atf, with each
 * slot's place in hpos (-1: not in the heap).  An event pops the flows
 * that finish and re-keys the ones whose rate changed, instead of
 * advancing and scanning every active flow (3300 at a time over 190 000
 * events on v3-1024, whose open rings finish steps at many distinct
 * times). */

static void hp_place(ici *n, int i, int s)
{
    n->heap[i] = s;
    n->hpos[s] = i;
}

static void hp_up(ici *n, int i)
{
    int s = n->heap[i];
    double v = n->atf[s];
    while (i > 0) {
        int p = (i - 1) / 2;
        if (!(v < n->atf[n->heap[p]]))
            break;
        hp_place(n, i, n->heap[p]);
        i = p;
    }
    hp_place(n, i, s);
}

static void hp_down(ici *n, int i)
{
    int s = n->heap[i];
    double v = n->atf[s];
    for (;;) {
        int c = 2 * i + 1;
        if (c >= n->nheap)
            break;
        if (c + 1 < n->nheap && n->atf[n->heap[c + 1]] < n->atf[n->heap[c]])
            c++;
        if (!(n->atf[n->heap[c]] < v))
            break;
        hp_place(n, i, n->heap[c]);
        i = c;
    }
    hp_place(n, i, s);
}

static void hp_push(ici *n, int s)
{
    hp_place(n, n->nheap++, s);
    hp_up(n, n->nheap - 1);
}

/* Slot s's finish time changed. */
static void hp_fix(ici *n, int s)
{
    int i = n->hpos[s];
    if (i > 0 && n->atf[s] < n->atf[n->heap[(i - 1) / 2]])
        hp_up(n, i);
    else
        hp_down(n, i);
}

/* Slot s leaves the heap from wherever it is. */
static void hp_remove(ici *n, int s)
{
    int i = n->hpos[s], last = n->heap[--n->nheap];
    n->hpos[s] = -1;
    if (i < n->nheap) {
        hp_place(n, i, last);
        hp_fix(n, last);
    }
}

/* The slots keyed at or below lim into out[], in no particular order (the
 * caller takes their minimum and sorts the ones that finish), found by a
 * walk down from the root: a key at or below lim has its ancestors there
 * too, so the walk visits only them and their children.  They leave the
 * heap one by one when they are few; when they are many (a full pod's
 * step ends on every chip at once: half the heap) the heap is left as
 * it is and *rebuild set: the caller builds it again from the live slots
 * (hp_build), one pass instead of a sift from the root per slot. */
static int hp_take(ici *n, double lim, int *out, int *rebuild)
{
    int k = 0;
    *rebuild = 0;
    if (n->nheap == 0 || !(n->atf[n->heap[0]] <= lim))
        return 0;
    out[k++] = 0; /* positions first */
    for (int j = 0; j < k; j++) {
        int c = 2 * out[j] + 1;
        if (c < n->nheap && n->atf[n->heap[c]] <= lim)
            out[k++] = c;
        if (c + 1 < n->nheap && n->atf[n->heap[c + 1]] <= lim)
            out[k++] = c + 1;
    }
    for (int j = 0; j < k; j++)
        out[j] = n->heap[out[j]];
    if (4 * k >= n->nheap) {
        *rebuild = 1;
        for (int j = 0; j < k; j++)
            n->hpos[out[j]] = -1;
        n->nheap = 0;
    } else {
        for (int j = 0; j < k; j++)
            hp_remove(n, out[j]);
    }
    return k;
}

/* Every live slot in the heap again (after rates of all changed or slots
 * moved). */
static void hp_build(ici *n)
{
    n->nheap = 0;
    for (int s = 0; s < n->nact; s++)
        if (n->aid[s] >= 0)
            hp_place(n, n->nheap++, s);
    for (int i = n->nheap / 2 - 1; i >= 0; i--)
        hp_down(n, i);
}

/* The arrays indexed by slot hold as many slots as are in use at once,
 * not every flow of the call. */
static void act_grow(ici *n)
{
    int c = n->capact ? 2 * n->capact : 1024;
    size_t ci = (size_t)c * sizeof(int), cd = (size_t)c * sizeof(double);
    /* an array that grew before another failed stays longer than
     * capact, which is harmless */
    n->aid = ici_ralloc(&n->mem, n->aid, ci);
    n->fin = ici_ralloc(&n->mem, n->fin, ci);
    n->bfl = ici_ralloc(&n->mem, n->bfl, ci);
    n->amark = ici_ralloc(&n->mem, n->amark, ci);
    n->afrz = ici_ralloc(&n->mem, n->afrz, ci);
    n->aro = ici_ralloc(&n->mem, n->aro, ci);
    n->anr = ici_ralloc(&n->mem, n->anr, ci);
    n->amap = ici_ralloc(&n->mem, n->amap, ci);
    n->heap = ici_ralloc(&n->mem, n->heap, ci);
    n->hpos = ici_ralloc(&n->mem, n->hpos, ci);
    n->arem = ici_ralloc(&n->mem, n->arem, cd);
    n->arate = ici_ralloc(&n->mem, n->arate, cd);
    n->atf = ici_ralloc(&n->mem, n->atf, cd);
    n->sbits = ici_ralloc(&n->mem, n->sbits,
                          (size_t)(c / 64) * sizeof(uint64_t));
    memset(n->amark + n->capact, 0,
           (size_t)(c - n->capact) * sizeof(int));
    memset(n->afrz + n->capact, 0, (size_t)(c - n->capact) * sizeof(int));
    memset(n->sbits + n->capact / 64, 0,
           (size_t)((c - n->capact) / 64) * sizeof(uint64_t));
    n->capact = c;
}

/* Moves the live slots to the front, in the same (start) order, with
 * their routes, and renumbers the resources' lists. */
static void act_compact(ici *n)
{
    int w = 0, p = 0;
    for (int s = 0; s < n->nact; s++) {
        int id = n->aid[s];
        if (id < 0)
            continue;
        int nr = n->anr[s];
        /* w <= s and p <= aro[s]: nothing is overwritten before it is
         * read */
        memmove(n->apool + p, n->apool + n->aro[s], (size_t)nr * sizeof(int));
        n->amap[s] = w;
        n->aid[w] = id;
        n->arem[w] = n->arem[s];
        n->arate[w] = n->arate[s];
        n->atf[w] = n->atf[s];
        n->aro[w] = p;
        n->anr[w] = nr;
        p += nr;
        w++;
    }
    n->napool = p;
    for (int r = 0; r < n->nres; r++) {
        int *l = n->rl[r];
        for (int j = 0; j < n->rl_len[r]; j++)
            l[j] = n->amap[l[j]];
    }
    /* visit stamps are only compared for equality with the current one,
     * never 0 */
    memset(n->amark, 0, (size_t)n->nact * sizeof(int));
    n->nact = w;
    if (!n->scan)
        hp_build(n);
}

/* Flow id starts: it takes the next slot (start order) and joins its
 * resources' lists; it has no rate until rates_update. */
static void act_start(ici *n, int id)
{
    flow_fl *f = &n->fl[id];
    if (n->nact == n->capact) {
        if (2 * n->nlive < n->nact)
            act_compact(n);
        else
            act_grow(n);
    }
    n->apool = ici_grow(n, n->apool, &n->capapool, n->napool + f->nr,
                        sizeof(int));
    int s = n->nact++;
    n->nlive++;
    n->aid[s] = id;
    n->arem[s] = f->rem;
    n->arate[s] = 0;
    n->atf[s] = INFINITY;
    n->aro[s] = n->napool;
    n->anr[s] = f->nr;
    memcpy(n->apool + n->napool, n->route + f->r0,
           (size_t)f->nr * sizeof(int));
    n->napool += f->nr;
    if (!n->scan)
        hp_push(n, s);
    /* The flow joins the component of its resources when all are in one
     * and one of them carries a flow already (the others may have lost
     * theirs since the solve); otherwise it may join components or
     * stand alone, and theirs are found again.  (With the components
     * forgotten, comps_reset, there are none to keep.) */
    int c0 = n->invalid ? -1 : comp_of(n, n->route[f->r0]);
    int busy = 0, same = c0 >= 0;
    for (int h = 0; h < f->nr && same; h++) {
        int r = n->route[f->r0 + h];
        same &= comp_of(n, r) == c0;
        busy |= n->rl_len[r] > 0;
    }
    if (!n->invalid && (!same || !busy))
        for (int h = 0; h < f->nr; h++) {
            int c2 = comp_of(n, n->route[f->r0 + h]);
            if (c2 >= 0)
                n->comp[c2].split = 1;
        }
    for (int h = 0; h < f->nr; h++) {
        int r = n->route[f->r0 + h];
        if (n->rl_len[r] == n->rl_cap[r]) {
            int c = n->rl_cap[r] ? 2 * n->rl_cap[r] : 4;
            n->rl[r] = ici_ralloc(&n->mem, n->rl[r], (size_t)c * sizeof(int));
            n->rl_cap[r] = c;
        }
        if (n->rl_len[r] == 0)
            n->nbusy++;
        n->rl[r][n->rl_len[r]++] = s;
        res_dirty(n, r);
    }
}

/* 1 when an active flow crosses both resources a and b. */
static int linked(const ici *n, int a, int b)
{
    const int *l = n->rl[a];
    for (int j = 0; j < n->rl_len[a]; j++) {
        const int *rt = n->apool + n->aro[l[j]];
        for (int h = 0; h < n->anr[l[j]]; h++)
            if (rt[h] == b)
                return 1;
    }
    return 0;
}

/* The flow of slot s leaves its resources' lists.  Its component stays
 * whole when each two resources next on its route are still crossed by
 * one flow at the next solve (a resource left without flows leaves the
 * component): rates_update checks the pairs then, after the starts that
 * came meanwhile (often the next message on the same route). */
static void act_finish(ici *n, int s)
{
    const int *rt = n->apool + n->aro[s];
    for (int h = 0; h + 1 < n->anr[s] && !n->invalid; h++) {
        int c = comp_of(n, rt[h]);
        if (c >= 0 && !n->comp[c].split) {
            n->pairs = ici_grow(n, n->pairs, &n->cappairs, 2 * n->npairs + 2,
                                sizeof(int));
            n->pairs[2 * n->npairs] = rt[h];
            n->pairs[2 * n->npairs + 1] = rt[h + 1];
            n->npairs++;
        }
    }
    for (int h = 0; h < n->anr[s]; h++) {
        int r = rt[h];
        int *l = n->rl[r], len = n->rl_len[r], j = 0;
        while (j < len && l[j] != s)
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

/* Slot s runs at `rate` from time t (its bytes are up to date: every
 * event advances every flow).  The heap loop keys it by its finish time
 * now; the keys of flows whose rate stays drift from the finish time
 * run_scan would compute by rounding only, which run_heap allows for. */
static void rate_set(ici *n, int s, double rate, double t)
{
    if (n->scan) {
        n->arate[s] = rate;
        tf_set(n, s, t);
        return;
    }
    if (rate == n->arate[s])
        return;
    n->arate[s] = rate;
    tf_set(n, s, t);
    hp_fix(n, s);
}

/* Sorts v[0..m) ascending: distinct slots (each below capact).  Short
 * lists by insertion; longer ones through a bitmap of the slots, whose
 * scan costs a word per 64 slots between the least and the greatest: the
 * lists come from the finish-time heap in an order a quicksort's pivots
 * handle badly (a fifth of a v3-2048 all-reduce's host time). */
static void sort_slots(ici *n, int *v, int m)
{
    if (m <= 32) {
        for (int i = 1; i < m; i++) {
            int x = v[i], k = i;
            while (k > 0 && v[k - 1] > x) {
                v[k] = v[k - 1];
                k--;
            }
            v[k] = x;
        }
        return;
    }
    uint64_t *b = n->sbits;
    int lo = v[0], hi = v[0];
    for (int i = 0; i < m; i++) {
        int x = v[i];
        b[x >> 6] |= (uint64_t)1 << (x & 63);
        if (x < lo)
            lo = x;
        if (x > hi)
            hi = x;
    }
    int k = 0;
    for (int w = lo >> 6; w <= hi >> 6; w++) {
        uint64_t bits = b[w];
        b[w] = 0;
        while (bits) {
            int z = 0;
            uint64_t low = bits & (~bits + 1);
            /* the index of the lowest set bit, portably */
            if (!(low & 0xffffffffULL)) { z += 32; low >>= 32; }
            if (!(low & 0xffffULL)) { z += 16; low >>= 16; }
            if (!(low & 0xffULL)) { z += 8; low >>= 8; }
            if (!(low & 0xfULL)) { z += 4; low >>= 4; }
            if (!(low & 0x3ULL)) { z += 2; low >>= 2; }
            if (!(low & 0x1ULL)) { z += 1; }
            v[k++] = w * 64 + z;
            bits &= bits - 1;
        }
    }
    TPU_ASSERT(k == m); /* distinct slots */
}

/* fill for one connected component, over its resources res[0..nres);
 * its flows take their rates (rate_set at time t).  Every flow through a
 * resource of the component is in the component, so a resource's list of
 * slots (rl, in start order) is the list fill builds over the flows in
 * start order, and its length the count; the resources are taken in the
 * order fill meets them, by their first slot in start order, then by
 * place on that slot's route.  Same rounds, same order, same doubles as
 * fill over the slots in start order, without sorting or listing the
 * slots.  A slot froze when afrz holds this call's stamp. */
static int fill_comp(ici *n, const int *res, int nres, double *sh,
                     const flow_tab *snap, double t)
{
    n->res_list = ici_grow(n, n->res_list, &n->caplist, nres, sizeof(int));
    if (n->fzstamp == INT_MAX) {
        memset(n->afrz, 0, (size_t)n->capact * sizeof(int));
        n->fzstamp = 0;
    }
    int fz = ++n->fzstamp;
    int *afrz = n->afrz;
    /* the first slots, each once (marked as frozen meanwhile) */
    int *first = n->res_list, nfirst = 0;
    for (int i = 0; i < nres; i++) {
        int s0 = n->rl[res[i]][0];
        if (afrz[s0] != fz) {
            afrz[s0] = fz;
            first[nfirst++] = s0;
        }
    }
    fz = ++n->fzstamp;
    sort_slots(n, first, nfirst);
    n->ntouched = 0;
    for (int i = 0; i < nfirst; i++) {
        int s0 = first[i];
        const int *rt = n->apool + n->aro[s0];
        int nr = n->anr[s0];
        for (int h = 0; h < nr; h++) {
            int r = rt[h];
            if (n->rl[r][0] != s0 || n->res_cnt[r] != 0)
                continue;
            n->touched[n->ntouched++] = r;
            n->res_cnt[r] = n->rl_len[r];
            n->res_cap[r] = res_bps(n, r);
        }
    }
    TPU_ASSERT(n->ntouched == nres);
    int bad = 0, nsh = 0;
    double prev = 0;
    for (;;) {
        double share = round_share(n);
        if (n->ntouched == 0) /* every flow froze */
            break;
        if (share < 0)
            share = 0;
        share = round_snap(snap, share, sh, nsh, &bad, &prev);
        nsh++;
        double lim = share * (1 + 1e-12);
        for (int k = 0; k < n->ntouched; k++) {
            int r = n->touched[k];
            int cnt = n->res_cnt[r];
            if (cnt <= 0 || n->res_cap[r] / cnt > lim)
                continue;
            const int *lst = n->rl[r];
            for (int j = 0; j < n->rl_len[r]; j++) {
                int sl = lst[j];
                if (afrz[sl] == fz)
                    continue;
                afrz[sl] = fz;
                freeze_route(n, sl, share);
                rate_set(n, sl, share, t);
            }
        }
    }
    return bad ? -1 : nsh;
}

/* Solves the component of the resources n->rpool[roff .. roff+nres),
 * whose previous component has been killed; returns the new one. */
static int comp_solve(ici *n, int roff, int nres, double t)
{
    /* a round freezes every flow of a resource at least */
    n->cshares = ici_grow(n, n->cshares, &n->capcsh, 2 * nres, sizeof(double));
    int nsh = fill_comp(n, n->rpool + roff, nres, n->cshares, &n->g, t);
    int bad = nsh < 0;
    if (bad)
        nsh = 0;
    return comp_new(n, n->cshares, nsh, bad, roff, nres);
}

/* Finds the component of resource r0 (not yet visited under stamp) by
 * walking its flows, kills the components its resources had, and solves
 * it. */
static void solve_comp(ici *n, int r0, int stamp, double t)
{
    int nres = 0;
    n->res_mark[r0] = stamp;
    n->res_comp[r0] = -1;
    if (n->rl_len[r0] == 0)
        return;
    n->bres[nres++] = r0;
    for (int i = 0; i < nres; i++) {
        int q = n->bres[i];
        for (int j = 0; j < n->rl_len[q]; j++) {
            int sl = n->rl[q][j];
            if (n->amark[sl] == stamp)
                continue;
            n->amark[sl] = stamp;
            const int *rt = n->apool + n->aro[sl];
            for (int h = 0; h < n->anr[sl]; h++) {
                int q2 = rt[h];
                if (n->res_mark[q2] == stamp)
                    continue;
                n->res_mark[q2] = stamp;
                comp_kill(n, comp_of(n, q2));
                n->bres[nres++] = q2;
            }
        }
    }
    comp_solve(n, rpool_append(n, n->bres, nres), nres, t);
}

/* Solves live component c again with the resources it had (not split
 * since its solve), less those left without flows; returns the new
 * component, or -1 when none has a flow left. */
static int comp_resolve(ici *n, int c, int stamp, double t)
{
    flow_comp *k = &n->comp[c];
    int roff = k->roff, nr = k->nres, w = 0;
    comp_kill(n, c);
    int *lst = n->rpool + roff;
    for (int i = 0; i < nr; i++) {
        int r = lst[i];
        n->res_mark[r] = stamp;
        if (n->rl_len[r] > 0)
            lst[w++] = r;
        else
            n->res_comp[r] = -1;
    }
    return w > 0 ? comp_solve(n, roff, w, t) : -1;
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
    flow_comp *k = &n->comp[c];
    int nsh = k->nsh, mark = n->nchg;
    n->oldsh = ici_grow(n, n->oldsh, &n->capoldsh, 2 * nsh + 1, sizeof(double));
    memcpy(n->oldsh, n->shpool + k->off, (size_t)(2 * nsh) * sizeof(double));
    int c2 = comp_resolve(n, c, next_stamp(n), t);
    TPU_ASSERT(c2 >= 0);
    const flow_comp *k2 = &n->comp[c2];
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
    n->nrpool = n->rlive = 0;
    n->g.n = n->own.n = 0;
    n->invalid = 1;
}

static void fill_all(ici *n, double t)
{
    n->nglobal++;
    /* the reference loop has no holes; here the holes go first */
    if (n->nlive < n->nact)
        act_compact(n);
    n->cshares = ici_grow(n, n->cshares, &n->capcsh, n->nact, sizeof(double));
    for (int s = 0; s < n->nact; s++)
        n->bfl[s] = s;
    fill(n, n->bfl, n->nact, n->arate, n->cshares, NULL);
    for (int s = 0; s < n->nact; s++)
        tf_set(n, s, t);
    if (!n->scan)
        hp_build(n);
}

/* New rates after starts and finishes at time t (see above); each flow
 * whose rate may have changed gets its finish time t + rem / rate
 * again. */
static void rates_update(ici *n, double t)
{
    for (int i = 0; i < n->npairs; i++) {
        int a = n->pairs[2 * i], b = n->pairs[2 * i + 1];
        int c = comp_of(n, a);
        if (c >= 0 && !n->comp[c].split && !linked(n, a, b))
            n->comp[c].split = 1;
    }
    n->npairs = 0;
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
        int c = comp_of(n, r0);
        if (c >= 0 && !n->comp[c].split) {
            comp_resolve(n, c, stamp, t);
        } else {
            comp_kill(n, c);
            solve_comp(n, r0, stamp, t);
        }
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
        n->chg2 = ici_grow(n, n->chg2, &n->capchg2, nv, sizeof(double));
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
            flow_comp *k = &n->comp[c];
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
    const flow_fl *f = &n->fl[id];
    /* the same doubles flow_add stored before: hops x hop latency, the
     * on-chip latency, or 0 (a core to itself) */
    double lat = f->nr == 0 ? 0
                 : n->route[f->r0] >= 4 * n->nchips
                     ? n->p.onchip_latency_s
                     : f->nr * n->p.hop_latency_s;
    double arr = t + lat;
    if (arr > *t_end)
        *t_end = arr;
    for (int k = f->head; k != NOFLOW; k = n->edge[k].next) {
        int v = n->edge[k].to2, id2 = v >> 1;
        double when = (v & 1) ? t : arr;
        flow_fl *s = &n->fl[id2];
        if (when > s->ready)
            s->ready = when;
        if (--s->deps == 0)
            q_push(n, s->ready, id2);
    }
}

/* Starts everything ready by time t (within the tolerance); a flow with
 * nothing to send or no route arrives at once. */
static void start_ready(ici *n, double t, int *done, double *t_end)
{
    while (!q_empty(n) && q_top_t(n) <= t + ICI_TOL_T) {
        int id = q_pop(n);
        const flow_fl *f = &n->fl[id];
        if (f->nr == 0 || f->rem <= 0) {
            (*done)++;
            arrive(n, id, t, t_end);
        } else {
            act_start(n, id);
        }
    }
}

/* The reference event loop (ici_set_scan): at each event every active
 * flow's bytes are brought up to date and the next event is found by a
 * scan over them. */
static double run_scan(ici *n, int nf)
{
    double t = 0, t_end = 0;
    int done = 0;
    while (done < nf) {
        start_ready(n, t, &done, &t_end);
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
        int finished = 0;
        for (int i = 0; i < nact; i++) {
            double rate = n->arate[i];
            double rem = n->arem[i] - rate * dt;
            if (rem <= rate * ICI_TOL_T) {
                n->fin[finished++] = i;
            } else {
                n->arem[i] = rem;
                n->atf[i] = t + rem / rate;
            }
        }
        for (int i = 0; i < finished; i++) {
            int sl = n->fin[i];
            act_finish(n, sl);
            n->fin[i] = n->aid[sl];
            n->aid[sl] = -1;
        }
        n->nlive = nact - finished;
        if (finished > 0)
            act_compact(n);
        for (int i = 0; i < finished; i++) {
            done++;
            arrive(n, n->fin[i], t, &t_end);
        }
    }
    TPU_ASSERT(done == nf); /* a cycle in the DAG would stop short */
    return t_end;
}

/* rem[s] -= rate[s] x dt for every slot, two slots at a time (a multiply
 * and a subtract each, rounded as one at a time would round them): the
 * loop the heap loop runs at every event over some 3300 slots (v3-1024),
 * which the compiler pairs into vector operations only when told the
 * arrays do not overlap and the count is even. */
static void advance(double *restrict rem, const double *restrict rate, int m,
                    double dt)
{
    int m2 = m & ~1;
    for (int s = 0; s < m2; s += 2) {
        rem[s] -= rate[s] * dt;
        rem[s + 1] -= rate[s + 1] * dt;
    }
    if (m2 < m)
        rem[m2] -= rate[m2] * dt;
}

/* The event loop with the same arithmetic as run_scan, so the same
 * doubles: every event still advances every flow's bytes (a multiply and
 * a subtract a flow, no branch), but the next finish and the flows that
 * finish come from the heap, keyed by each flow's finish time as of its
 * last rate change, instead of a division and a test a flow.  A key
 * differs from the finish time run_scan computes at this event
 * (t + bytes left / rate) by the rounding of the events since, far below
 * the margin (the tolerance plus 1e-9 of the time to go); the flows keyed
 * within it of the first are the candidates, decided exactly as run_scan
 * decides them.  Finished flows leave holes in the slots (rate 0, so the
 * advance leaves them alone), compacted once they outnumber the flows. */
static double run_heap(ici *n, int nf)
{
    double t = 0, t_end = 0;
    int done = 0;
    while (done < nf) {
        start_ready(n, t, &done, &t_end);
        if (n->nlive == 0) {
            if (q_empty(n))
                break;
            t = q_top_t(n);
            continue;
        }
        if (n->ndirty > 0)
            rates_update(n, t);
        int nc = 0, rebuild = 0;
        double tn = INFINITY;
        if (n->nheap > 0) {
            double k0 = n->atf[n->heap[0]];
            double margin = ICI_TOL_T + 1e-9 * (k0 - t);
            double lim = k0 + ICI_TOL_T + 2 * margin;
            nc = hp_take(n, lim, n->bfl, &rebuild);
            for (int i = 0; i < nc; i++) {
                int sl = n->bfl[i];
                double tf = t + n->arem[sl] / n->arate[sl];
                if (tf < tn)
                    tn = tf;
            }
        }
        if (!q_empty(n) && q_top_t(n) < tn)
            tn = q_top_t(n);
        /* nothing would ever finish or start: a rate of 0 everywhere */
        TPU_ASSERT(tn < INFINITY);
        double dt = tn - t;
        t = tn;
        advance(n->arem, n->arate, n->nact, dt);
        int finished = 0;
        for (int i = 0; i < nc; i++) {
            int sl = n->bfl[i];
            double rate = n->arate[sl];
            if (n->arem[sl] <= rate * ICI_TOL_T) {
                n->fin[finished++] = sl;
            } else {
                tf_set(n, sl, t);
                if (!rebuild)
                    hp_push(n, sl);
            }
        }
        /* in start order, as run_scan finishes them: the order in which
         * resources turn dirty */
        sort_slots(n, n->fin, finished);
        for (int i = 0; i < finished; i++) {
            int sl = n->fin[i], id = n->aid[sl];
            act_finish(n, sl);
            n->aid[sl] = -1;
            n->arate[sl] = 0;
            n->arem[sl] = 0;
            n->fin[i] = id;
        }
        n->nlive -= finished;
        for (int i = 0; i < finished; i++) {
            done++;
            arrive(n, n->fin[i], t, &t_end);
        }
        if (n->nact - n->nlive > n->nlive / 8 + 64)
            act_compact(n); /* builds the heap */
        else if (rebuild)
            hp_build(n);
    }
    TPU_ASSERT(done == nf); /* a cycle in the DAG would stop short */
    return t_end;
}

/* Runs the DAG built since flow_begin from time 0; returns the last
 * arrival. */
double flow_run(ici *n)
{
    int nf = n->nfl;
    if (nf == 0)
        return 0;
    q_clear(n);
    for (int i = 0; i < nf; i++)
        if (n->fl[i].deps == 0)
            q_push(n, 0.0, i);
    n->nact = n->nlive = n->nheap = n->napool = n->npairs = 0;
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
    return n->scan ? run_scan(n, nf) : run_heap(n, nf);
}

/* Puts the run state back to idle after a call that unwound (out of host
 * memory): empty resource lists, no counts left by fill, no flows. */
void flow_abort(ici *n)
{
    for (int r = 0; r < n->nres; r++) {
        n->rl_len[r] = 0;
        n->res_cnt[r] = 0;
    }
    n->nact = n->nlive = n->nheap = n->nbusy = n->napool = n->npairs = 0;
    flow_begin(n);
}
