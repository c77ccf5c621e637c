/* ici — the inter-chip interconnect: chips on a 2D torus, four links per
 * chip, dimension-order routing, per-direction link queues, and the
 * collectives built from link transfers.
 * CONTRACT header: the implementation owner completes it.
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
 * wrap-around links exist regardless of p->wrap (full pods always wrap). */
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

/* Collective-permute: all flows start at t_start and share links
 * (contention modelled); returns when the last one arrives. */
double ici_permute(ici *n, const ici_flow *flows, int nflows, double t_start);

/* All-reduce of `bytes` per core over the group `cores[0..ncores)`,
 * starting at t_start; returns the completion time. */
double ici_allreduce(ici *n, const int *cores, int ncores, double bytes,
                     double t_start);

/* Values: sums bufs[0..ncores) element-wise into every buffer, in the
 * order the all-reduce algorithm above sums them (deterministic). */
void ici_allreduce_values(ici *n, const int *cores, int ncores, float **bufs,
                          size_t len);

/* Accumulated statistics since the last reset. */
double ici_core_bytes_sent(const ici *n, int core);
/* Busy seconds of the link leaving chip `chip` in direction dir
 * (0 = +x, 1 = -x, 2 = +y, 3 = -y). */
double ici_link_busy_s(const ici *n, int chip, int dir);

#endif
