/* ici_internal — what the files of the interconnect model share
 * (private to interconnect/; interconnect/ici.h is the public face).
 *
 *   interconnect/ici.c        topology, routing, statistics, the host
 *                             memory of a call, the cache of calls, the
 *                             public calls
 *   interconnect/flow.c       the DAG of flows and its fluid simulation
 *   interconnect/allreduce.c  the flows of an all-reduce
 *
 * Resources: 4 link directions per chip, r = 4 chip + dir (0 +x, 1 -x,
 * 2 +y, 3 -y), then 2 on-chip directions per chip, r = 4 nchips + 2 chip
 * + from (the core parity the data leaves).
 */
#ifndef INTERCONNECT_ICI_INTERNAL_H
#define INTERCONNECT_ICI_INTERNAL_H

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>

#include "interconnect/ici.h"

/* No flow: an empty list, a missing predecessor. */
#define NOFLOW (-1)

/* A flow: 32 bytes, a full-pod all-reduce builds 1.8 million.  Its
 * latency (hops x hop latency, or the on-chip latency) is computed when
 * it arrives; its rate and bytes left while it runs live in the active
 * arrays. */
typedef struct {
    double rem;   /* bytes to send */
    double ready; /* latest arrival among its predecessors */
    int r0, nr;   /* route: resources in n->route[r0 .. r0+nr) */
    int head;     /* successors: list n->edge[head], NOFLOW ends */
    int deps;     /* predecessors not yet arrived */
} flow_fl;

/* A dependency: flow `to2 >> 1` waits for the arrival (to2 even) or the
 * last byte sent (odd) of the flow whose list it is in. */
typedef struct {
    int to2, next;
} flow_edge;

/* The flows that become ready at time t, ids[pos .. n) in increasing
 * order. */
typedef struct {
    double t;
    int *ids;
    int n, cap, pos;
} flow_bucket;

/* A connected component of the active flows and their resources, solved
 * alone: (own share, share) of its rounds in n->shpool[off .. off+2 nsh),
 * its resources in n->rpool[roff .. roff+nres), and whether a share was
 * not positive. */
typedef struct {
    int off, nsh, bad, alive;
    int roff, nres;
    int split; /* a start or finish since its solve may have joined it to
                * another or cut it: its resources are found again */
    int ser;   /* serial number: ids are reused, serials are not */
} flow_comp;

/* A sorted table of distinct shares and how many rounds have each. */
typedef struct {
    double v;
    int cnt;
} flow_shv;

typedef struct {
    flow_shv *e;
    int n, cap;
} flow_tab;

typedef struct {
    int kind; /* 0 all-reduce groups, 1 permute */
    double bytes;
    int group_size, ngroups;
    int nkey;
    int *key;       /* cores, or (src, dst) pairs for a permute */
    double *kbytes; /* permute flow sizes */
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

/* A call's groups split into clusters that share no resource: the key
 * (canonical cores, ng groups of gs), each group's cluster, and the
 * number of clusters.  nkey 0: empty (or being filled). */
typedef struct {
    int *key, *of;
    int nkey, gs, ng, nc;
} ici_dec;

/* The flows of an all-reduce call (flow_begin .. flow_run) kept for the
 * interconnects that borrow them (ici_borrow_flows): the call's key as
 * in the cache of results, the DAG as built (every flow's deps at its
 * count of predecessors, ready 0), and the statistics its flows add
 * (acc lists in the order flow_add made them).  nkey 0: empty. */
typedef struct {
    double bytes;
    int gs, ng, nkey;
    int *key;
    flow_fl *fl;
    int nfl;
    int *route;
    int nroute;
    flow_edge *edge;
    int nedge;
    int nres, ncore;
    int *res, *core;
    double *res_bytes, *core_bytes;
} ici_dag;

/* DAGs kept, and the fewest flows a DAG must have to be kept (building
 * a small one costs less than the lookup is worth keeping). */
#define ICI_DAGS 4
#define ICI_DAG_MIN 65536

/* Splits kept: a step alternates between the layouts of a few kinds of
 * group (the batch-norm groups' statistics and the gradients' partition
 * groups), each split costing the flows of every group. */
#define ICI_DEC 8

/* Host memory of a call.  Every allocation a call makes goes through
 * ici_ralloc and ici_tmp_alloc (ici.c); when one fails, the call unwinds
 * (longjmp) to the jmp_buf its public entry point set, which frees the
 * call's temporaries (listed here, not only on the C stack, so that the
 * unwind leaks nothing), puts the run state back to idle and returns the
 * failure value ici.h documents.  Scratch the object owns keeps its old
 * block when growing it fails, so ici_free frees everything either way.
 * Only the slow paths (an allocation) look at any of this. */
#define ICI_NTMP 24

typedef struct {
    jmp_buf jb;
    int armed; /* jb is set: a call is running */
    int ntmp;
    void *tmp[ICI_NTMP]; /* the running call's temporaries */
    long fail_after;     /* test hook: allocations to let through
                          * before one fails (< 0: none fails) */
} ici_mem;

struct ici {
    ici_params p;
    int dx, dy, nchips, ncores, nres;
    int wrapx, wrapy;
    double link_bps, onchip_bps;

    /* statistics */
    double *stat_res;  /* bytes carried per resource */
    double *stat_core; /* bytes sent per core */

    /* the DAG under construction */
    flow_fl *fl;
    int nfl, capfl;
    int *route;
    int nroute, caproute;
    flow_edge *edge;
    int nedge, capedge;

    /* run scratch */
    flow_bucket *bk;
    int nbk, capbk;
    int *hash, hcap;     /* time bits -> bucket, open addressing */
    int *bh, nbh, capbh; /* heap of non-empty buckets by time */
    /* the active flows in start order, by slot: id (-1 for a slot whose
     * flow finished), bytes left, rate, finish time (run_heap: as of the
     * last rate change) */
    int *aid, *fin, *bfl;
    int *amark; /* per slot: visit stamp of rates_update */
    int *afrz;  /* per slot: fill_comp's stamp when the flow froze */
    int fzstamp;
    /* per slot: its route, copied to apool[aro .. aro+anr) when it starts
     * (a solve reads the slots' routes, not the flows': locality), and
     * act_compact's map from old slots to new */
    int *aro, *anr, *amap, *apool;
    int napool, capapool;
    uint64_t *sbits; /* per slot, one bit: sort_slots' scratch, all 0 */
    double *arem, *arate, *atf;
    int nact, capact; /* slots in use (holes included), allocated */
    int nlive;        /* slots with a flow */
    /* the finish-time heap: slots by atf, and each slot's place in it */
    int *heap, *hpos, nheap;
    int scan; /* test hook: the reference event loop (ici_set_scan) */
    int nbusy;       /* resources with an active flow */
    int invalid;     /* components forgotten (comps_reset) */
    long nglobal;    /* solves over all flows (components not apart) */
    int *res_cnt;    /* per resource: unfrozen flows through it */
    double *res_cap; /* per resource: capacity left */
    int *res_start;  /* CSR of active flows per touched resource */
    int *res_len;
    int *res_list;
    int caplist;
    int *touched;
    int ntouched;
    unsigned char *frozen;
    int capfrozen;
    /* per resource: the slots of active flows through it in start
     * order (increasing), component,
     * dirty (a flow started or finished on it) */
    int **rl, *rl_len, *rl_cap;
    int *res_comp, *res_ser, *res_mark, *dirty, *bres;
    int ser;
    unsigned char *res_isdirty;
    int ndirty, stamp;
    flow_comp *comp;
    int ncomp, capcomp, *comp_free, nfree, capfree, nbad;
    double *shpool;
    int nshpool, capshpool, shlive;
    int *rpool; /* the live components' resources, and dead ones' */
    int nrpool, caprpool, rlive;
    /* resources next on the routes of flows that finished since the last
     * update, in pairs */
    int *pairs, npairs, cappairs;
    flow_tab g, own; /* rounds' shares, and their own shares */
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
    /* the splits of the last ICI_DEC keys of all-reduce calls into
     * independent clusters of groups (decompose) */
    ici_dec dec[ICI_DEC];
    int dec_next;
    /* ici_keep_flows: the DAGs of the last large all-reduces */
    int keep;
    ici_dag dag[ICI_DAGS];
    int dag_next;
    /* ici_borrow_flows: an interconnect of the same topology whose kept
     * DAGs and splits this one uses instead of building its own */
    const ici *lender;

    ici_mem mem;
};

/* ---- interconnect/ici.c ---- */

static inline int ici_chip_x(const ici *n, int chip)
{
    return chip % n->dx;
}
static inline int ici_chip_y(const ici *n, int chip)
{
    return chip / n->dx;
}

/* The host memory of a call (ici_mem): realloc(p, size), or the call
 * unwinds (p is then left as it was). */
void *ici_ralloc(ici_mem *m, void *p, size_t size);
/* A block that lives within one call: freed by ici_tmp_free, by the
 * unwind, or handed to the object by ici_tmp_keep. */
void *ici_tmp_alloc(ici_mem *m, size_t size);
void *ici_tmp_calloc(ici_mem *m, size_t count, size_t size);
void ici_tmp_keep(ici_mem *m, const void *p);
void ici_tmp_free(ici_mem *m, void *p);
void ici_tmp_free_all(ici_mem *m);

void *ici_grow_slow(ici *n, void *p, int *cap, int need, size_t elem);
/* Scratch of the object at least `need` elements long (doubling). */
static inline void *ici_grow(ici *n, void *p, int *cap, int need, size_t elem)
{
    return need <= *cap ? p : ici_grow_slow(n, p, cap, need, elem);
}

/* Appends the resources of the route chip a -> chip b to n->route;
 * returns the hops.  pref breaks ties on a wrapped dimension. */
int ici_route_append(ici *n, int a, int b, int pref);

/* What ici_check_group checks, asserted, with scratch from the call's
 * memory m. */
void ici_assert_group(const ici *n, ici_mem *m, const int *cores, int ncores);

/* ---- interconnect/flow.c ---- */

/* Starts an empty DAG. */
void flow_begin(ici *n);
/* A transfer of `bytes` from core src to core dst (pref breaks routing
 * ties), counted in the call's statistics; returns its id. */
int flow_add(ici *n, int src, int dst, double bytes, int pref);
/* `after` may not start before `before` has arrived (flow_dep) or has
 * sent its last byte (flow_dep_sent: two messages queued on one engine).
 * NOFLOW on either side adds nothing. */
void flow_dep(ici *n, int before, int after);
void flow_dep_sent(ici *n, int before, int after);
/* Runs the DAG from idle links at time 0; returns the last arrival. */
double flow_run(ici *n);
/* The run state back to idle after a call unwound. */
void flow_abort(ici *n);

/* ---- interconnect/allreduce.c ---- */

/* Adds the flows of one group's all-reduce of `bytes` per core. */
void allreduce_build(ici *n, const int *cores, int ncores, double bytes);
/* ici_allreduce_links of a group, with scratch from m. */
int allreduce_links(const ici *n, ici_mem *m, const int *cores, int ncores);

#endif
