/* hbm — one TensorCore's HBM2: channels and banks with JEDEC-style timing,
 * an address map that interleaves channels, an open-row policy and refresh.
 * CONTRACT header: the implementation owner completes the documentation
 * (parameter sources live in emu/params.c, next to each value).
 */
#ifndef HBM_HBM_H
#define HBM_HBM_H

#include <stdint.h>

#include "emu/status.h"

typedef struct {
    double capacity_bytes;   /* per core */
    int channels;            /* independent channels per core (all stacks) */
    int banks;               /* banks per channel */
    int bus_bytes;           /* data bus width of one channel, bytes */
    double data_rate_gtps;   /* transfers per second per pin, 1e9 */
    int burst_beats;         /* beats per burst (HBM2: BL2 or BL4) */
    int row_bytes;           /* page size of one bank row */
    int interleave_bytes;    /* channel interleave granularity */
    double t_rcd_ns;         /* activate to read/write */
    double t_rp_ns;          /* precharge */
    double t_cl_ns;          /* read latency (CAS) */
    double t_ras_ns;         /* activate to precharge, minimum */
    double t_rfc_ns;         /* refresh cycle time */
    double t_refi_ns;        /* refresh interval */
} hbm_params;

/* Peak bandwidth of the core's HBM, bytes per second. */
double hbm_peak_bps(const hbm_params *p);
/* Sets the data rate so that the peak becomes gbs (1e9 bytes/s): what
 * `--set hbm.bandwidth_gbs=X` does. */
void hbm_set_peak_gbs(hbm_params *p, double gbs);

typedef struct hbm hbm; /* per-core state: open rows, channel timelines */

hbm *hbm_new(const hbm_params *p);
void hbm_free(hbm *h);
void hbm_reset(hbm *h);

/* A block transfer: nchunks chunks of chunk_bytes, the chunk starts
 * stride bytes apart (stride == chunk_bytes: one contiguous block). */
typedef struct {
    uint64_t addr;
    uint64_t chunk_bytes;
    uint64_t nchunks;
    uint64_t stride;
    int is_write;
} hbm_xfer;

/* Starts x no earlier than t_start (seconds) and returns when its last
 * byte is done.  Advances h's channel and bank state.  The cost of a call
 * does not grow with the transfer's size (closed form over repeating row
 * and interleave patterns), so the pod engine can call it millions of
 * times. */
double hbm_access(hbm *h, double t_start, const hbm_xfer *x);

#endif
