#include "emu/cost.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hbm/hbm.h"
#include "mxu/mxu.h"

int64_t cost_cycles_ps(const tpu_params *hw, double cycles)
{
    return (int64_t)llround(cycles * COST_PS / hw->clock_hz);
}

static double vpu_rate(const tpu_params *hw)
{
    return (double)hw->vpu_lanes * hw->vpu_sublanes * hw->vpu_alus;
}

/* N weight tiles are shared out between the core's MXUs; with fewer N
 * tiles than MXUs the rows are. */
void cost_matmul_ps(const tpu_params *hw, const fw_insn *in, int stream,
                    int64_t *mxu, int64_t *vec)
{
    int nm = hw->mxus_per_core > 0 ? hw->mxus_per_core : 1;
    int64_t m = in->a, k = in->b, n = in->c;
    int64_t cols = hw->mxu.cols;
    int64_t ntiles = (n + cols - 1) / cols;
    uint64_t (*cycles)(const mxu_params *, int64_t, int64_t, int64_t) =
        stream ? mxu_stream_cycles : mxu_fast_cycles;
    uint64_t cyc;
    if (ntiles >= nm) {
        int64_t per = (ntiles + nm - 1) / nm * cols;
        cyc = cycles(&hw->mxu, m, k, per < n ? per : n);
    } else {
        int64_t per = (m + nm - 1) / nm;
        cyc = cycles(&hw->mxu, per, k, n);
    }
    double c = (double)cyc * (in->passes ? in->passes : 1) +
               hw->mxu_op_overhead_cycles;
    *mxu = cost_cycles_ps(hw, c);
    *vec = cost_cycles_ps(hw, (double)in->d / vpu_rate(hw));
}

int64_t cost_vec_ps(const tpu_params *hw, const fw_insn *in)
{
    double ops = (double)in->a * (double)in->b / 100.0;
    int64_t t = cost_cycles_ps(hw, ops / vpu_rate(hw) +
                                       hw->vpu_op_overhead_cycles);
    /* c: update windows of a scatter-add applied in order
     * (xla.scatter_update_ns each): the vector work hides under them or
     * they under it */
    if (in->c > 0) {
        int64_t s = (int64_t)llround((double)in->c * hw->scatter_update_ns *
                                     1e3);
        if (s > t)
            t = s;
    }
    return t;
}

/* ---- DMA blocks ---------------------------------------------------------- */

/* A block's duration is measured on a private HBM model as the average of
 * repeated back-to-back copies of it after the first (so open rows and the
 * refresh schedule are in their steady state), which makes it a pure
 * function of the transfer. */
typedef struct {
    int64_t key;
    int64_t ps;
} cost_ent;

struct cost_dma {
    cost_ent *tab; /* open addressing, keys bytes*2+write (never 0) */
    size_t cap, n;
    hbm *h;
    double refi_s;
    hbm_params hp; /* what it was made for */
};

cost_dma *cost_dma_new(const tpu_params *hw)
{
    cost_dma *d = calloc(1, sizeof *d);
    if (!d)
        return NULL;
    d->h = hbm_new(&hw->hbm);
    if (!d->h) {
        free(d);
        return NULL;
    }
    d->refi_s = hw->hbm.t_refi_ns * 1e-9;
    memcpy(&d->hp, &hw->hbm, sizeof d->hp);
    return d;
}

int cost_dma_matches(const cost_dma *d, const tpu_params *hw)
{
    /* a bytewise match is conservative: padding that differs only
     * refuses a cache that would have been right */
    return d && memcmp(&d->hp, &hw->hbm, sizeof d->hp) == 0;
}

void cost_dma_free(cost_dma *d)
{
    if (!d)
        return;
    free(d->tab);
    hbm_free(d->h);
    free(d);
}

static int64_t dma_measure(cost_dma *d, int64_t bytes, int write)
{
    hbm_xfer x = {0};
    x.addr = 0;
    x.chunk_bytes = (uint64_t)bytes;
    x.nchunks = 1;
    x.stride = (uint64_t)bytes;
    x.is_write = write;
    hbm_reset(d->h);
    double t = hbm_access(d->h, 0.0, &x);
    double t1 = t;
    int reps = 0;
    /* Enough repetitions to cover a few refresh intervals (or 64). */
    while (reps < 64 && (reps < 2 || t - t1 < 4 * d->refi_s)) {
        t = hbm_access(d->h, t, &x);
        reps++;
    }
    return (int64_t)llround((t - t1) / reps * COST_PS);
}

static size_t slot_of(int64_t key, size_t cap)
{
    return (size_t)((uint64_t)key * 0x9E3779B97F4A7C15ull >> 20) & (cap - 1);
}

int64_t cost_dma_ps(cost_dma *d, int64_t bytes, int write)
{
    if (bytes <= 0)
        return 0;
    int64_t key = bytes * 2 + (write ? 1 : 0);
    if (d->n * 2 >= d->cap) {
        size_t ncap = d->cap ? d->cap * 2 : 1024;
        cost_ent *nt = calloc(ncap, sizeof *nt);
        if (!nt) /* no room to remember it: measure every time */
            return dma_measure(d, bytes, write);
        for (size_t i = 0; i < d->cap; i++)
            if (d->tab[i].key) {
                size_t j = slot_of(d->tab[i].key, ncap);
                while (nt[j].key)
                    j = (j + 1) & (ncap - 1);
                nt[j] = d->tab[i];
            }
        free(d->tab);
        d->tab = nt;
        d->cap = ncap;
    }
    size_t j = slot_of(key, d->cap);
    while (d->tab[j].key) {
        if (d->tab[j].key == key)
            return d->tab[j].ps;
        j = (j + 1) & (d->cap - 1);
    }
    int64_t ps = dma_measure(d, bytes, write);
    d->tab[j].key = key;
    d->tab[j].ps = ps;
    d->n++;
    return ps;
}
