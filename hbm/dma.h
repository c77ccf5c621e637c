/* dma — the DMA engine between a core's HBM and its VMEM.
 * Several transfers in flight; each returns a completion time the engine
 * can wait on; with values on, it also moves the bytes.
 * CONTRACT header: the implementation owner completes it. */
#ifndef HBM_DMA_H
#define HBM_DMA_H

#include <stddef.h>
#include <stdint.h>

#include "hbm/hbm.h"

#define DMA_MAX_INFLIGHT 16

typedef struct dma dma;

dma *dma_new(hbm *h, int max_inflight);
void dma_free(dma *d);
void dma_reset(dma *d);

/* Issues x at t_issue; returns its completion time.  When more than
 * max_inflight transfers are outstanding, the issue waits for the oldest.
 * When host_src and host_dst are both non-NULL the block's bytes are also
 * copied (chunk by chunk, honouring the stride on the HBM side). */
double dma_issue(dma *d, double t_issue, const hbm_xfer *x,
                 const void *host_src, void *host_dst);

#endif
