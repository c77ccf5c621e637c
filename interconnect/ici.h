/* ici — the inter-chip interconnect: chips on a 2D torus, four links per
 * chip, dimension-order routing, per-direction link queues, and the
 * collectives built from link transfers (docs/ICI.md).
 *
 * Core numbering: core c lives on chip c / 2 (two TensorCores per chip);
 * chip i sits at x = i % dim_x, y = i / dim_x.
 */
#ifndef INTERCONNECT_ICI_H
#define INTERCONNECT_ICI_H

#include <stddef.h>
#include <stdint.h>

#include "emu/status.h"

typedef struct {
    double link_gbs;          /* one-way bandwidth of one link, 1e9 B/s */
    double hop_latency_s;     /* per hop, router + wire */
    double onchip_gbs;        /* between the two cores of one chip */
    double onchip_latency_s;
    int wrap;                 /* 1: partial slices have wrap-around links */
} ici_params;

typedef struct ici ici;

/* A dim_x x dim_y torus of chips, 2 cores each.  full_pod selects whether
 * wrap-around links exist regardless of p->wrap (full pods always wrap).
 * NULL when the parameters are invalid or host memory runs out. */
ici *ici_new(const ici_params *p, int dim_x, int dim_y, int full_pod);
void ici_free(ici *n);
void ici_reset(ici *n);

int ici_num_cores(const ici *n);
int ici_chip_of_core(const ici *n, int core);

/* One point-to-point transfer. */
typedef struct {
    int src_core, dst_core;
    double bytes;
} ici_flow;

/* Out of host memory.  The calls that simulate (ici_permute,
 * ici_allreduce, ici_allreduce_groups) return ICI_NO_MEMORY instead of a
 * time when an allocation fails (with t_start >= 0 a time is never
 * negative: test `< 0`); ici_allreduce_links returns -1.  Such a call
 * changes nothing: statistics are as before it, the object stays usable
 * (a later call with memory to spare gives the same figures as on a
 * fresh object) and ici_free frees everything.  Callers report it as TPU_ERR_SYSTEM "out of
 * host memory (interconnect)". */
#define ICI_NO_MEMORY (-1.0)

/* Collective-permute: all flows start at t_start and share links
 * (contention modelled); returns when the last one arrives. */
double ici_permute(ici *n, const ici_flow *flows, int nflows, double t_start);

/* All-reduce of `bytes` per core over the group `cores[0..ncores)`,
 * starting at t_start; returns the completion time. */
double ici_allreduce(ici *n, const int *cores, int ncores, double bytes,
                     double t_start);

/* Model, in one paragraph (docs/ICI.md has the details): every link
 * direction (chip, dir) and each direction of a chip's on-chip core-to-core
 * path is a resource with a bandwidth; a transfer is a flow over the
 * resources of its dimension-order route (x then y, the shorter way round
 * when the dimension wraps); concurrent flows share each resource max-min
 * fairly (the fluid limit of per-direction queues served round robin); a
 * flow arrives hops x hop_latency after its last byte leaves.  Collectives
 * are DAGs of flows, each send waiting on the arrivals it needs.  Every
 * call is simulated from idle links (traffic of different calls does not
 * contend); statistics accumulate across calls. */

int ici_dim_x(const ici *n);
int ici_dim_y(const ici *n);
/* 1 when dimension dim (0 = x, 1 = y) has wrap-around links. */
int ici_wraps(const ici *n, int dim);
const ici_params *ici_get_params(const ici *n);
/* Inter-chip hops of the route from src_core to dst_core (0 on one chip). */
int ici_route_hops(const ici *n, int src_core, int dst_core);

/* TPU_ERR_INPUT with a message when cores[] is empty, has a core out of
 * range or a duplicate; the collectives assert what this checks. */
tpu_status ici_check_group(const ici *n, const int *cores, int ncores,
                           tpu_error *e);

/* ngroups disjoint all-reduces run at the same time (contending for
 * links), group g = cores[g*group_size .. (g+1)*group_size); returns when
 * the last finishes.  ici_allreduce is the case ngroups = 1. */
double ici_allreduce_groups(ici *n, const int *cores, int group_size,
                            int ngroups, double bytes, double t_start);

/* Links per chip the all-reduce of this group drives at once: 4 on a 2D
 * group whose dimensions both wrap, 2 on a ring or an unwrapped
 * dimension (a line ring crosses every link both ways), 0 on one chip.
 * This is the "links used" of the bandwidth lower bound.  -1 out of host
 * memory. */
int ici_allreduce_links(const ici *n, const int *cores, int ncores);

/* Busy seconds of the on-chip path of chip `chip` leaving core parity
 * `from` (0: even core to odd, 1: odd to even). */
double ici_onchip_busy_s(const ici *n, int chip, int from);

/* Results of identical calls (same cores, same bytes) are replayed from a
 * cache: the simulation always starts from idle links at time 0 and is
 * shifted by t_start, so a replay is bit-identical.  Hits since creation: */
long ici_cache_hits(const ici *n);

/* Accumulated statistics since the last reset.  Bytes a core sent,
 * on chip and over links.  Link busy seconds are bytes carried divided by
 * the link bandwidth (a shared link counts once per byte). */
double ici_core_bytes_sent(const ici *n, int core);
/* Busy seconds of the link leaving chip `chip` in direction dir
 * (0 = +x, 1 = -x, 2 = +y, 3 = -y). */
double ici_link_busy_s(const ici *n, int chip, int dir);

/* Interconnects of one slice whose parameters differ only in bandwidths
 * and latencies (not in ici.wrap) build the same flows for a call: the
 * routes, dependencies and sizes depend on the topology, the group and
 * the bytes; rates and latencies enter only when the flows run.
 * ici_keep_flows makes n keep the flows of its large all-reduces;
 * ici_borrow_flows makes n use the kept flows (and splits of groups into
 * clusters) of `lender` where it would build the same ones, when both
 * have the same torus and wrap-around links (otherwise it does nothing).
 * The results are the same doubles either way.  The lender must outlive
 * n and make no call while n runs (a forked process may borrow its
 * parent's copy). */
void ici_keep_flows(ici *n);
void ici_borrow_flows(ici *n, const ici *lender);

/* Testing: of the allocations the model makes from now on, the first k
 * succeed and the next one fails as if host memory had run out (then
 * none fails); k < 0 turns this off (the default).  Only the slow path of
 * an allocation looks at it. */
void ici_fail_alloc_after(ici *n, long k);

/* Testing: on (1), calls run the reference event loop, which finds the
 * next event and the flows that finish by a scan over every active flow;
 * off (0, the default), a heap of finish times.  Both give the same
 * doubles (test ici_host).  Empties the cache of calls, so that a call
 * is simulated again. */
void ici_set_scan(ici *n, int on);

#endif
