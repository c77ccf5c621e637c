/* dma — issue queue in front of the HBM model (see hbm/dma.h).
 *
 * The engine keeps the completion times of the transfers in flight in
 * issue order (a ring); a new transfer beyond max_inflight waits for the
 * oldest to finish, as a descriptor queue of fixed depth does.  Transfers
 * in flight share the HBM channels first come, first served (hbm_access
 * queues each behind the work already on its channels). */
#include "hbm/dma.h"

#include <stdlib.h>
#include <string.h>

struct dma {
    hbm *h;
    int max_inflight;
    int head, count;              /* ring of completion times, issue order */
    double done[DMA_MAX_INFLIGHT];
    double last;                  /* latest completion */
};

dma *dma_new(hbm *h, int max_inflight)
{
    if (!h)
        return NULL;
    dma *d = calloc(1, sizeof *d);
    if (!d)
        return NULL;
    d->h = h;
    d->max_inflight = max_inflight < 1 ? 1
                      : max_inflight > DMA_MAX_INFLIGHT ? DMA_MAX_INFLIGHT
                                                        : max_inflight;
    return d;
}

void dma_free(dma *d) { free(d); }

void dma_reset(dma *d)
{
    d->head = d->count = 0;
    d->last = 0;
}

static void retire(dma *d, double t)
{
    /* Completion is not monotone in issue order (a short transfer can
     * finish first), but a slot frees only when the oldest is done, as in
     * an in-order descriptor ring. */
    while (d->count > 0 && d->done[d->head] <= t) {
        d->head = (d->head + 1) % DMA_MAX_INFLIGHT;
        d->count--;
    }
}

static void copy_bytes(const hbm_xfer *x, const void *src, void *dst)
{
    const unsigned char *s = src;
    unsigned char *o = dst;
    size_t c = (size_t)x->chunk_bytes;
    size_t pitch = (size_t)(x->stride < x->chunk_bytes ? x->chunk_bytes
                                                       : x->stride);
    if (pitch == c) {
        memmove(o, s, c * (size_t)x->nchunks);
        return;
    }
    for (uint64_t i = 0; i < x->nchunks; i++) {
        if (x->is_write) /* packed VMEM -> strided HBM */
            memmove(o + (size_t)i * pitch, s + (size_t)i * c, c);
        else             /* strided HBM -> packed VMEM */
            memmove(o + (size_t)i * c, s + (size_t)i * pitch, c);
    }
}

double dma_issue(dma *d, double t_issue, const hbm_xfer *x,
                 const void *host_src, void *host_dst)
{
    double t = t_issue;
    retire(d, t);
    if (d->count >= d->max_inflight) {
        t = d->done[d->head];
        retire(d, t);
    }
    double end = hbm_access(d->h, t, x);
    int slot = (d->head + d->count) % DMA_MAX_INFLIGHT;
    d->done[slot] = end;
    d->count++;
    if (end > d->last)
        d->last = end;
    if (host_src && host_dst && x->chunk_bytes && x->nchunks)
        copy_bytes(x, host_src, host_dst);
    return end;
}

double dma_drain(const dma *d) { return d->last; }

int dma_outstanding(const dma *d, double t)
{
    int n = 0;
    for (int i = 0; i < d->count; i++)
        if (d->done[(d->head + i) % DMA_MAX_INFLIGHT] > t)
            n++;
    return n;
}
