/* hbm — one TensorCore's HBM2: channels and banks with JEDEC-style timing,
 * an address map that interleaves channels, an open-row policy and refresh.
 * Parameter values and their sources live in emu/params.c
 * next to each value; docs/HBM.md describes the model and its curve.
 *
 * Address map (low bits first), all sizes powers of two by default:
 *
 *   | byte in interleave unit | channel | unit in row | bank | row |
 *
 * so a sequential stream visits every channel every interleave_bytes x
 * channels bytes, fills one row per channel per "stripe" of row_bytes x
 * channels bytes, and moves to the next bank with the next stripe (the
 * next row activation goes to another bank, where it can overlap data).
 *
 * Timing per channel: a row hit costs only its bursts; a miss costs a
 * precharge (tRP, when another row is open) and an activate (tRCD); up to
 * queue_depth activates to other banks are in flight, so a run of misses
 * takes max(data, (tRP + tRCD) / queue_depth) per visit;
 * activates are rate-limited by tRRD and tFAW; each bank activates at most
 * once per tRC = tRAS + tRP, and tRP after its precharge, which follows its
 * row's last data (a stream that cycles over n banks of one channel opens
 * at most one row per tRC / n).  Every tREFI each channel stops for
 * tRFC (all-bank refresh) and loses its open rows; all channels refresh
 * on the same tick, the first tREFI after power-on (hbm_reset).
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
    /* Added by the hbm owner (compatible: appended fields). */
    double t_rrd_ns;         /* activate to activate, different banks */
    double t_faw_ns;         /* window holding at most four activates */
    int queue_depth;         /* visits the controller looks ahead to open
                                rows early (bank-level parallelism) */
} hbm_params;

/* Peak bandwidth of the core's HBM, bytes per second. */
double hbm_peak_bps(const hbm_params *p);
/* Sets the data rate so that the peak becomes gbs (1e9 bytes/s): what
 * `--set hbm.bandwidth_gbs=X` does. */
void hbm_set_peak_gbs(hbm_params *p, double gbs);
/* Checks that p describes a memory the model can map: positive sizes,
 * burst | interleave | row, powers of two for the address map fields.
 * TPU_ERR_INPUT with a message naming the hbm.* key otherwise. */
tpu_status hbm_check_params(const hbm_params *p, tpu_error *err);

typedef struct hbm hbm; /* per-core state: open rows, channel timelines */

/* NULL when p fails hbm_check_params or memory runs out. */
hbm *hbm_new(const hbm_params *p);
void hbm_free(hbm *h);
/* Back to power-on: all channels idle at t = 0, all banks precharged. */
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
 * times.  Each channel serves its share of x after the work already
 * queued on it (first come, first served).  Deterministic.  Addresses
 * wrap modulo the capacity; a stride smaller than the chunk is treated as
 * the chunk (no overlapping chunks).  A strided block never takes longer
 * than the contiguous span from its first byte to its last (the memory
 * moves whole bursts, and a controller can always read the span and drop
 * the gaps): gaps shorter than a burst make it that span, and a pattern
 * the closed form times slower than the span is timed as the span.  A
 * read and a write of one block take the same time (is_write sorts the
 * byte counters only): emu/cost.c measures a block size once for both. */
double hbm_access(hbm *h, double t_start, const hbm_xfer *x);

/* The same timing model applied chunk by chunk (cost grows with nchunks):
 * the reference the closed form is tested against.  Not for the engine.
 * Chunks that share a burst, or whose bursts follow on with none skipped,
 * are served as one run, so a burst is charged once. */
double hbm_access_reference(hbm *h, double t_start, const hbm_xfer *x);

/* Counters since the last reset (for reports and tests). */
typedef struct {
    double bytes_read, bytes_written;
    double bursts;       /* data bursts on all channels */
    double activates;    /* row misses (activate commands) */
    double refreshes;    /* refreshes that fell inside a channel's work */
    double busy_s;       /* sum over channels of busy time */
} hbm_stats;
void hbm_get_stats(const hbm *h, hbm_stats *out);

#endif
