/* dma — the DMA engine between a core's HBM and its VMEM.
 * Several transfers in flight; each returns a completion time the engine
 * can wait on; with values on, it also moves the bytes.
 *
 * A block is an hbm_xfer: 1-D (nchunks == 1 or stride == chunk_bytes),
 * 2-D (nchunks rows of chunk_bytes, row pitch stride in HBM) or strided
 * (small chunks far apart: a gather).  The VMEM side is always packed
 * (nchunks x chunk_bytes, row after row), which is how a tile lands in
 * vector memory.  Direction: is_write == 0 reads HBM into VMEM, 1 writes
 * VMEM to HBM.  Timing is the HBM's (hbm_access); the VMEM side and the
 * descriptor issue are assumed never to be the bottleneck [U]. */
#ifndef HBM_DMA_H
#define HBM_DMA_H

#include <stddef.h>
#include <stdint.h>

#include "hbm/hbm.h"

#define DMA_MAX_INFLIGHT 16

typedef struct dma dma;

/* max_inflight is clamped to [1, DMA_MAX_INFLIGHT].  NULL on no memory.
 * The DMA does not own h. */
dma *dma_new(hbm *h, int max_inflight);
void dma_free(dma *d);
/* Forgets every outstanding transfer (does not reset the HBM). */
void dma_reset(dma *d);

/* Issues x at t_issue; returns its completion time.  When more than
 * max_inflight transfers are outstanding, the issue waits for the oldest.
 * When host_src and host_dst are both non-NULL the block's bytes are also
 * copied (chunk by chunk, honouring the stride on the HBM side): for a
 * read, host_src is the HBM image at x->addr (chunk i at host_src +
 * i * stride) and host_dst the packed VMEM buffer; for a write the other
 * way round. */
double dma_issue(dma *d, double t_issue, const hbm_xfer *x,
                 const void *host_src, void *host_dst);

/* Completion time of everything issued so far (a barrier's wait). */
double dma_drain(const dma *d);
/* Transfers still running at time t. */
int dma_outstanding(const dma *d, double t);

#endif
