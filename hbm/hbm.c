/* hbm — the timing model of one core's HBM2 (see hbm/hbm.h for the map
 * and the rules, docs/HBM.md for the derivation and the curve).
 *
 * Why closed forms: the pod engine calls hbm_access ~1e5-1e6 times per
 * simulated step, for blocks up to gigabytes, so a call may not walk the
 * block burst by burst.  A contiguous block is exact per channel: its
 * visits (runs of bursts in one bank row) go bank after bank, so only the
 * first `banks` visits can meet a row left open by earlier calls and the
 * rest repeat one pattern, summed in one step.  A strided block of small
 * chunks is summarised by its repeating pattern (bursts per chunk, rows
 * per stripe, channels it can reach, how it comes back to the banks).
 * hbm_access_reference applies the same per-visit rules chunk by chunk;
 * the tests hold the two close.  Every bank keeps when it may activate
 * again (tRC after its last activate, tRP after its precharge), across
 * calls: a visit's time is a position on its channel's data timeline.
 */
#include "hbm/hbm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double hbm_peak_bps(const hbm_params *p)
{
    return (double)p->channels * p->bus_bytes * p->data_rate_gtps * 1e9;
}

void hbm_set_peak_gbs(hbm_params *p, double gbs)
{
    p->data_rate_gtps = gbs / ((double)p->channels * p->bus_bytes);
}

/* Plain max/min: libm's fmax/fmin carry NaN rules that keep them out of
 * line, and no NaN reaches here. */
static double dmax(double a, double b) { return a > b ? a : b; }
static double dmin(double a, double b) { return a < b ? a : b; }

static int is_pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

static int log2i(uint64_t v)
{
    int l = 0;
    while (v > 1) {
        v >>= 1;
        l++;
    }
    return l;
}

tpu_status hbm_check_params(const hbm_params *p, tpu_error *err)
{
    struct {
        const char *key;
        int v;
    } pw[] = {{"hbm.channels", p->channels},
              {"hbm.banks", p->banks},
              {"hbm.bus_bytes", p->bus_bytes},
              {"hbm.burst_beats", p->burst_beats},
              {"hbm.row_bytes", p->row_bytes},
              {"hbm.interleave_bytes", p->interleave_bytes}};
    for (size_t i = 0; i < sizeof pw / sizeof pw[0]; i++)
        if (!is_pow2(pw[i].v))
            return tpu_fail(err, TPU_ERR_INPUT,
                            "%s=%d: the address map needs a power of two",
                            pw[i].key, pw[i].v);
    int64_t burst = (int64_t)p->bus_bytes * p->burst_beats;
    if (burst > p->interleave_bytes)
        return tpu_fail(err, TPU_ERR_INPUT,
                        "one burst, hbm.bus_bytes=%d x hbm.burst_beats=%d "
                        "= %lld bytes, is larger than hbm.interleave_bytes=%d",
                        p->bus_bytes, p->burst_beats, (long long)burst,
                        p->interleave_bytes);
    if (p->interleave_bytes > p->row_bytes)
        return tpu_fail(err, TPU_ERR_INPUT,
                        "hbm.interleave_bytes=%d exceeds hbm.row_bytes=%d",
                        p->interleave_bytes, p->row_bytes);
    if (!(p->data_rate_gtps > 0) || !(p->capacity_bytes > 0))
        return tpu_fail(err, TPU_ERR_INPUT,
                        "hbm: data rate and capacity must be positive");
    if (p->capacity_bytes < (double)p->row_bytes * p->channels * p->banks)
        return tpu_fail(err, TPU_ERR_INPUT,
                        "hbm.capacity_gib: less than one row per bank");
    if (!(p->t_refi_ns > 0) || p->t_rfc_ns < 0 || p->t_rfc_ns >= p->t_refi_ns)
        return tpu_fail(err, TPU_ERR_INPUT,
                        "hbm.t_rfc_ns must be below hbm.t_refi_ns");
    if (p->t_rcd_ns < 0 || p->t_rp_ns < 0 || p->t_cl_ns < 0 ||
        p->t_ras_ns < 0 || p->t_rrd_ns < 0 || p->t_faw_ns < 0)
        return tpu_fail(err, TPU_ERR_INPUT, "hbm: negative timing");
    if (p->queue_depth < 1)
        return tpu_fail(err, TPU_ERR_INPUT, "hbm.queue_depth must be >= 1");
    return TPU_OK;
}

/* Per-channel work gathered during one call. */
typedef struct {
    double bursts;
    double exposed;  /* activate/precharge time not hidden behind data */
    double nact;
    double lat0;     /* latency before the first burst (idle channel) */
    int touched;
    int act_in_lat0; /* lat0 holds the call's first activate */
} chw;

/* The state one call changes, saved to try two ways of serving a strided
 * block (its pattern, and the contiguous span it lies in) and keep the
 * cheaper. */
typedef struct {
    int64_t *open_row, *last_row;
    double *act_ok; /* act_ok[ch * B + bank] */
    double *ok_max; /* per channel */
    double *last_d, *s0;
    int *last_bank, *touched;
    unsigned char *piped;
    chw *acc;
    int ntouched;
} hbm_snap;

struct hbm {
    hbm_params p;
    int C, B, lC, lB, lI, lR, lBB, lupr;
    uint64_t I, R, BB, upr, Z, cap;
    /* seconds */
    double t_burst, rcd, rp, cl, ras, rfc, refi, actrate;
    double rc; /* row cycle, activate to activate in one bank: tRAS + tRP */
    double Q;
    /* channel state */
    double *free_at, *last_d, *phase;
    int *last_bank;
    int64_t *last_row, *epoch, *open_row; /* open_row[ch * B + bank] */
    /* When each bank may be activated again (command time, seconds;
     * act_ok[ch * B + bank]): its last activate + tRC, and its precharge
     * (after the row's last data) + tRP.  ok_max[ch] is the latest of a
     * channel's (at least), so a call can see at once that no bank holds
     * it up. */
    double *act_ok, *ok_max;
    /* scratch for one call */
    chw *acc, *scratch;
    double *s0;
    /* scratch of strided_bank_cost: per channel and bank */
    double *sim_ok, *sim_pos;
    int64_t *sim_s;
    unsigned char *piped;
    int *touched;      /* channels touched by this call, in order */
    int ntouched;
    double t0;         /* this call's start */
    /* Cache of the refresh-free window [win_lo, win_hi) last looked up
     * (valid for every channel because all phases are equal)
     * (all channels refresh together), refresh count win_k inside it. */
    double win_lo, win_hi, win_k;
    hbm_stats st;
    hbm_snap snap[2];
};

static int snap_alloc(hbm_snap *s, size_t C, size_t CB)
{
    s->open_row = calloc(CB, sizeof *s->open_row);
    s->act_ok = calloc(CB, sizeof *s->act_ok);
    s->ok_max = calloc(C, sizeof *s->ok_max);
    s->last_row = calloc(C, sizeof *s->last_row);
    s->last_d = calloc(C, sizeof *s->last_d);
    s->s0 = calloc(C, sizeof *s->s0);
    s->last_bank = calloc(C, sizeof *s->last_bank);
    s->touched = calloc(C, sizeof *s->touched);
    s->piped = calloc(C, 1);
    s->acc = calloc(C, sizeof *s->acc);
    return s->open_row && s->act_ok && s->ok_max && s->last_row && s->last_d &&
           s->s0 && s->last_bank && s->touched && s->piped && s->acc;
}

static void snap_free(hbm_snap *s)
{
    free(s->open_row);
    free(s->act_ok);
    free(s->ok_max);
    free(s->last_row);
    free(s->last_d);
    free(s->s0);
    free(s->last_bank);
    free(s->touched);
    free(s->piped);
    free(s->acc);
}

static void snap_copy(hbm_snap *to, const hbm_snap *from, size_t C,
                      size_t CB)
{
    memcpy(to->open_row, from->open_row, CB * sizeof *to->open_row);
    memcpy(to->act_ok, from->act_ok, CB * sizeof *to->act_ok);
    memcpy(to->ok_max, from->ok_max, C * sizeof *to->ok_max);
    memcpy(to->last_row, from->last_row, C * sizeof *to->last_row);
    memcpy(to->last_d, from->last_d, C * sizeof *to->last_d);
    memcpy(to->s0, from->s0, C * sizeof *to->s0);
    memcpy(to->last_bank, from->last_bank, C * sizeof *to->last_bank);
    memcpy(to->touched, from->touched, C * sizeof *to->touched);
    memcpy(to->piped, from->piped, C);
    memcpy(to->acc, from->acc, C * sizeof *to->acc);
    to->ntouched = from->ntouched;
}

/* h's live state viewed as a snapshot (no copy). */
static hbm_snap live(hbm *h)
{
    hbm_snap s = {h->open_row, h->last_row, h->act_ok,    h->ok_max,
                  h->last_d,   h->s0,       h->last_bank, h->touched,
                  h->piped,    h->acc,      h->ntouched};
    return s;
}

static void snap_save(hbm *h, hbm_snap *s)
{
    hbm_snap l = live(h);
    snap_copy(s, &l, (size_t)h->C, (size_t)h->C * (size_t)h->B);
}

static void snap_load(hbm *h, const hbm_snap *s)
{
    hbm_snap l = live(h);
    snap_copy(&l, s, (size_t)h->C, (size_t)h->C * (size_t)h->B);
    h->ntouched = s->ntouched;
}

hbm *hbm_new(const hbm_params *p)
{
    if (hbm_check_params(p, NULL) != TPU_OK)
        return NULL;
    hbm *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    h->p = *p;
    h->C = p->channels;
    h->B = p->banks;
    h->I = (uint64_t)p->interleave_bytes;
    h->R = (uint64_t)p->row_bytes;
    h->BB = (uint64_t)p->bus_bytes * (uint64_t)p->burst_beats;
    h->upr = h->R / h->I;
    h->Z = h->R * (uint64_t)h->C;
    h->lC = log2i((uint64_t)h->C);
    h->lB = log2i((uint64_t)h->B);
    h->lI = log2i(h->I);
    h->lR = log2i(h->R);
    h->lBB = log2i(h->BB);
    h->lupr = log2i(h->upr);
    /* Whole stripes of all banks only: the map stays a bijection. */
    uint64_t unit = h->Z * (uint64_t)h->B;
    h->cap = (uint64_t)(p->capacity_bytes / (double)unit) * unit;
    h->t_burst = (double)p->burst_beats / (p->data_rate_gtps * 1e9);
    h->rcd = p->t_rcd_ns * 1e-9;
    h->rp = p->t_rp_ns * 1e-9;
    h->cl = p->t_cl_ns * 1e-9;
    h->ras = p->t_ras_ns * 1e-9;
    /* JESD235 allows a bank's next activate tRC after its last one; the
     * published HBM2 configurations derive tRC as tRAS + tRP (DRAMsim3
     * sets tRC = tRAS + tRP; Ramulator's HBM nRC 24 = nRAS 17 + nRP 7). */
    h->rc = h->ras + h->rp;
    h->rfc = p->t_rfc_ns * 1e-9;
    h->refi = p->t_refi_ns * 1e-9;
    h->actrate = dmax(p->t_rrd_ns, p->t_faw_ns / 4.0) * 1e-9;
    h->Q = p->queue_depth;
    size_t C = (size_t)h->C, CB = C * (size_t)h->B;
    h->free_at = calloc(C, sizeof *h->free_at);
    h->last_d = calloc(C, sizeof *h->last_d);
    h->phase = calloc(C, sizeof *h->phase);
    h->last_bank = calloc(C, sizeof *h->last_bank);
    h->last_row = calloc(C, sizeof *h->last_row);
    h->epoch = calloc(C, sizeof *h->epoch);
    h->open_row = calloc(CB, sizeof *h->open_row);
    h->act_ok = calloc(CB, sizeof *h->act_ok);
    h->ok_max = calloc(C, sizeof *h->ok_max);
    h->sim_ok = calloc(CB, sizeof *h->sim_ok);
    h->sim_pos = calloc(C, sizeof *h->sim_pos);
    h->sim_s = calloc(C, sizeof *h->sim_s);
    h->acc = calloc(C, sizeof *h->acc);
    h->scratch = calloc(C, sizeof *h->scratch);
    h->s0 = calloc(C, sizeof *h->s0);
    h->piped = calloc(C, 1);
    h->touched = calloc(C, sizeof *h->touched);
    int snaps = snap_alloc(&h->snap[0], C, CB) &&
                snap_alloc(&h->snap[1], C, CB);
    if (!snaps || !h->touched || !h->free_at || !h->last_d || !h->phase ||
        !h->last_bank || !h->last_row || !h->epoch || !h->open_row ||
        !h->act_ok || !h->ok_max || !h->sim_ok || !h->sim_pos || !h->sim_s ||
        !h->acc || !h->scratch || !h->s0 || !h->piped) {
        hbm_free(h);
        return NULL;
    }
    /* [U] every channel refreshes all its banks (REFab) on the same
     * tick, the first one tREFI after power-on.  Staggered channels would
     * make any block striped over all of them meet a refresh within
     * tREFI / channels, so a small probe's time would hang on the phase;
     * aligned, a block pays one tRFC per tREFI it lasts, which is the
     * long-run cost either way.  Kept per channel to allow staggering. */
    for (int c = 0; c < h->C; c++)
        h->phase[c] = h->refi;
    hbm_reset(h);
    return h;
}

void hbm_free(hbm *h)
{
    if (!h)
        return;
    free(h->free_at);
    free(h->last_d);
    free(h->phase);
    free(h->last_bank);
    free(h->last_row);
    free(h->epoch);
    free(h->open_row);
    free(h->act_ok);
    free(h->ok_max);
    free(h->sim_ok);
    free(h->sim_pos);
    free(h->sim_s);
    free(h->acc);
    free(h->scratch);
    free(h->s0);
    free(h->piped);
    free(h->touched);
    snap_free(&h->snap[0]);
    snap_free(&h->snap[1]);
    free(h);
}

void hbm_reset(hbm *h)
{
    for (int c = 0; c < h->C; c++) {
        h->free_at[c] = 0;
        h->last_d[c] = 0;
        h->last_bank[c] = -1;
        h->last_row[c] = -1;
        h->epoch[c] = 0;
        h->ok_max[c] = 0;
    }
    for (int i = 0; i < h->C * h->B; i++) {
        h->open_row[i] = -1;
        h->act_ok[i] = 0;
    }
    for (int c = 0; c < h->C; c++)
        h->acc[c] = (chw){0, 0, 0, 0, 0, 0};
    h->ntouched = 0;
    h->win_lo = h->win_hi = -1;
    h->win_k = 0;
    memset(&h->st, 0, sizeof h->st);
}

void hbm_get_stats(const hbm *h, hbm_stats *out) { *out = h->st; }

/* ---- refresh: channel c is blocked on [phase + k tREFI, + tRFC) ------- */

static double refresh_count_slow(const hbm *h, int c, double t)
{
    double y = t - h->phase[c];
    return y < 0 ? 0 : floor(y / h->refi) + 1;
}

/* Refreshes started at or before t.  Most calls fall in the same
 * refresh-free window as the last one: answered without a division. */
static double refresh_count(hbm *h, int c, double t)
{
    if (t >= h->win_lo && t < h->win_hi)
        return h->win_k;
    double k = refresh_count_slow(h, c, t);
    double lo = k == 0 ? 0 : h->phase[c] + (k - 1) * h->refi + h->rfc;
    double hi = h->phase[c] + k * h->refi;
    if (t >= lo && t < hi) {
        h->win_lo = lo;
        h->win_hi = hi;
        h->win_k = k;
    }
    return k;
}

/* Time the channel could work in [0, t). */
static double avail(const hbm *h, int c, double t)
{
    double y = t - h->phase[c];
    if (y <= 0)
        return t;
    double k = floor(y / h->refi);
    return t - (k * h->rfc + dmin(y - k * h->refi, h->rfc));
}

/* Smallest t with avail(t) >= f. */
static double avail_inv(const hbm *h, int c, double f)
{
    double ph = h->phase[c];
    if (f <= ph)
        return f;
    double a = h->refi - h->rfc, z = f - ph;
    double k = floor(z / a), rem = z - k * a;
    return ph + k * h->refi + (rem > 0 ? h->rfc + rem : 0);
}

/* ---- per-visit rules ----------------------------------------------------- */

/* First touch of channel c in this call: drop rows a refresh closed. */
static void touch(hbm *h, chw *acc, int c)
{
    if (acc[c].touched)
        return;
    acc[c].touched = 1;
    if (acc != h->acc)
        return;
    h->touched[h->ntouched++] = c;
    h->piped[c] = h->free_at[c] > h->t0;
    h->s0[c] = h->piped[c] ? h->free_at[c] : h->t0;
    double k = refresh_count(h, c, h->s0[c]);
    if ((double)h->epoch[c] != k) {
        /* The refresh precharged every bank and held the channel for
         * tRFC: no bank waits for an earlier activate any more. */
        for (int b = 0; b < h->B; b++) {
            h->open_row[c * h->B + b] = -1;
            h->act_ok[c * h->B + b] = 0;
        }
        h->ok_max[c] = 0;
        h->last_bank[c] = -1;
        h->last_row[c] = -1;
    }
}

/* Where channel c's data stands in this call: the time its next visit's
 * data could start (data time: a read's data comes CL after its command,
 * and a channel that was idle pays CL once, in lat0). */
static double chan_pos(const hbm *h, const chw *a, int c)
{
    return h->s0[c] + a->lat0 + a->bursts * h->t_burst + a->exposed;
}

/* How long a visit whose data could start at `start` waits for bank (c, b)
 * before its activate (JESD235: activate to activate in one bank tRC,
 * precharge to activate tRP): its data comes tRCD + CL after the
 * activate. */
static double bank_wait(const hbm *h, int c, int b, double start)
{
    return dmax(0.0, h->act_ok[c * h->B + b] + h->rcd + h->cl - start);
}

/* Bank (c, b) served data over [start, end) (data time), opening its row
 * first when act.  The row's activate came tRCD + CL before its data, so
 * the next may come tRC after it; a precharge may follow the row's last
 * data (tRAS after the activate is implied by tRC - tRP), and an activate
 * tRP after that. */
static inline void bank_served(hbm *h, int c, int b, double start,
                               double end, int act)
{
    double *ok = &h->act_ok[c * h->B + b];
    double t = end - h->cl + h->rp;
    if (act) /* a new row: the old one's times no longer count */
        *ok = dmax(t, start - h->cl - h->rcd + h->rc);
    else
        *ok = dmax(*ok, t);
    if (*ok > h->ok_max[c])
        h->ok_max[c] = *ok;
}

/* The row open in bank (c, b) delivered its last data so far at `end`.
 * visit() records this only when the channel leaves the bank (or the call
 * ends, finish): a run of visits to one bank costs nothing more. */
static void row_left(hbm *h, int c, int b, double end)
{
    bank_served(h, c, b, end, end, 0);
}

/* Activate cost of a miss on channel c following a visit of data d.
 * With queue_depth activates in flight, a run of misses to other banks
 * takes (tRP + tRCD) / Q per visit (Little's law); the visit's data covers
 * that much of it.  The bank's own cycle (bank_wait) comes on top of
 * this, whichever binds. */
static double miss_cost(const hbm *h, int c, double tact)
{
    return dmax(0.0, tact / h->Q - h->last_d[c]);
}

/* The exposure per activate of a run of misses, each with data d, cycling
 * over nb banks of a channel: Little's law, or the banks' cycle, a bank
 * serving one activate per max(tRC, d + tRP + tRCD) (its precharge waits
 * for the row's data), whichever binds.  nb = 1 is a run on one bank:
 * max(tRP + tRCD, tRAS + tRP - d). */
static double cycle_cost(const hbm *h, double d, double nb)
{
    double cyc = dmax(h->rc, d + h->rp + h->rcd);
    return dmax(dmax(0.0, (h->rp + h->rcd) / h->Q - d), cyc / nb - d);
}

/* One run of nb bursts in row `row` of bank b of channel c. */
static void visit(hbm *h, chw *acc, int c, int b, int64_t row, double nb)
{
    chw *a = &acc[c];
    int first = !a->touched;
    touch(h, acc, c);
    double d = nb * h->t_burst;
    int64_t *orow = &h->open_row[c * h->B + b];
    int lb = h->last_bank[c];
    if (*orow == row) {
        if (first && !h->piped[c])
            a->lat0 = h->cl;
        if (!first && lb >= 0 && lb != b)
            row_left(h, c, lb, chan_pos(h, a, c));
        if (b == lb && row == h->last_row[c])
            h->last_d[c] += d;
        else
            h->last_d[c] = d;
    } else {
        double tact = (*orow >= 0 ? h->rp : 0) + h->rcd;
        a->nact += 1;
        double start;
        if (first && !h->piped[c]) {
            a->lat0 = h->cl + tact;
            a->act_in_lat0 = 1;
            start = h->s0[c] + a->lat0;
            double w = bank_wait(h, c, b, start);
            a->lat0 += w;
            start += w;
        } else {
            start = chan_pos(h, a, c);
            if (!first && lb >= 0)
                row_left(h, c, lb, start);
            double e = dmax(miss_cost(h, c, tact), bank_wait(h, c, b, start));
            a->exposed += e;
            start += e;
        }
        /* This row's data end is recorded when the channel leaves it. */
        double *ok = &h->act_ok[c * h->B + b];
        *ok = start - h->cl - h->rcd + h->rc;
        if (*ok > h->ok_max[c])
            h->ok_max[c] = *ok;
        *orow = row;
        h->last_d[c] = d;
    }
    a->bursts += nb;
    h->last_bank[c] = b;
    h->last_row[c] = row;
}

/* Bursts touched by bytes [lo, hi) (hi > lo). */
static double bursts_in(const hbm *h, uint64_t lo, uint64_t hi)
{
    return (double)(((hi - 1) >> h->lBB) - (lo >> h->lBB) + 1);
}

/* A contiguous block [x, x + L) inside the capacity. */
static void seg_nowrap(hbm *h, chw *acc, uint64_t x, uint64_t L)
{
    uint64_t end = x + L, u0 = x >> h->lI, u1 = (end - 1) >> h->lI;
    uint64_t Cm = (uint64_t)h->C - 1, Bm = (uint64_t)h->B - 1;
    if (u1 - u0 < (uint64_t)h->C) { /* at most one unit per channel */
        for (uint64_t u = u0; u <= u1; u++) {
            uint64_t lo = u << h->lI, hi = lo + h->I;
            if (lo < x)
                lo = x;
            if (hi > end)
                hi = end;
            uint64_t w = (u >> h->lC) >> h->lupr;
            visit(h, acc, (int)(u & Cm), (int)(w & Bm), (int64_t)(w >> h->lB),
                  bursts_in(h, lo, hi));
        }
        return;
    }
    double bpu = (double)(h->I >> h->lBB);
    double head = (double)((x & (h->I - 1)) >> h->lBB);
    double tail = (double)((h->I - 1 - ((end - 1) & (h->I - 1))) >> h->lBB);
    double full = bpu * (double)h->upr, dfull = full * h->t_burst;
    /* A full row hides its activate whether or not the row was open, and
     * activates cannot bind: hits change nothing but the activate count,
     * so every visit counts as a miss (the stats' activates are an upper
     * bound here). */
    int hidden = h->rp + h->rcd <= h->Q * dfull && h->actrate <= dfull;
    /* ... and if a bank comes back only after its cycle (B - 1 full rows),
     * only banks left cycling by earlier calls can delay the visits. */
    int quick = hidden && dmax(h->rc, dfull + h->rp + h->rcd) <=
                              (double)(h->B - 1) * dfull;
    /* A full-row miss whose data starts at st lets its bank activate again
     * at st + okd (bank_served). */
    double okd = dmax(dfull - h->cl + h->rp, h->rc - h->cl - h->rcd);
    double tr = ceil((okd + h->rcd + h->cl) / dfull);
    uint64_t trail = tr < (double)h->B ? (uint64_t)tr : (uint64_t)h->B;
    /* Little's law for a full row after a full row, the bank's row open or
     * closed. */
    double el_open = (h->rp + h->rcd) / h->Q - dfull;
    double el_shut = h->rcd / h->Q - dfull;
    for (uint64_t j = 0; j < (uint64_t)h->C; j++) {
        int c = (int)((u0 + j) & Cm);
        uint64_t uf = u0 + j;
        uint64_t ul = u1 - ((u1 - (uint64_t)c) & Cm);
        uint64_t vf = uf >> h->lC, vl = ul >> h->lC;
        uint64_t wf = vf >> h->lupr, wl = vl >> h->lupr, nv = wl - wf + 1;
        double hs = j == 0 ? head : 0, ts = ul == u1 ? tail : 0;
        /* The latest time earlier calls left a bank of c busy to. */
        double okmax = h->ok_max[c];
        int fast = 0;
        /* First visit: may meet an open row, starts the channel. */
        uint64_t ub0 = nv == 1 ? vl : ((wf + 1) << h->lupr) - 1;
        visit(h, acc, c, (int)(wf & Bm), (int64_t)(wf >> h->lB),
              (double)(ub0 - vf + 1) * bpu - hs - (nv == 1 ? ts : 0));
        if (nv == 1)
            continue;
        /* The first visit's row ends here (needed unless a later visit
         * returns to its bank or its time can hold nothing up: below). */
        if (!quick || nv - 1 <= trail)
            row_left(h, c, (int)(wf & Bm), chan_pos(h, &acc[c], c));
        /* Full visits 1 .. kend-1, each to the next bank: only the first
         * `banks` of them can find their row still open from earlier
         * calls.  A miss hides its activate behind the queue's data. */
        uint64_t kend = nv - 1 < (uint64_t)h->B + 1 ? nv - 1
                                                    : (uint64_t)h->B + 1;
        int64_t *orows = &h->open_row[c * h->B];
        chw *a = &acc[c];
        if (h->B > 1) {
            /* Visit k's data starts at base + k dfull, later by what the
             * visits before it waited. */
            double base = chan_pos(h, a, c) - dfull;
            double *oks = &h->act_ok[c * h->B], gap = h->rcd + h->cl;
            /* These visits reach each bank once (visit B returns to the
             * first visit's bank), so their banks' times matter only for
             * the last B full visits: later ones overwrite the others'. */
            uint64_t klast = nv - 1 > (uint64_t)h->B ? nv - 1 - (uint64_t)h->B
                                                     : 0;
            uint64_t nmiss = 0;
            fast = quick && okmax + gap <= base + dfull;
            if (fast) {
                /* No bank can hold the full visits up and none exposes its
                 * activate: visit k starts at base + k dfull.  Their banks'
                 * times (bank_served, inline: a miss lets its bank activate
                 * again okd after its data starts, a hit dfull - CL + tRP
                 * after, at the latest) matter only for the last `trail`
                 * visits: any later access starts after this one's data,
                 * (nv - 1 - k) dfull after visit k, and the banks' earlier
                 * times, all below it, can hold none up either. */
                double okh = dfull - h->cl + h->rp;
                uint64_t kb = nv - 1 > trail ? nv - 1 - trail : 1;
                if (kb < klast)
                    kb = klast;
                if (kb < 1)
                    kb = 1;
                double pos = base + (double)(int64_t)kb * dfull;
                for (; kb < kend; kb++, pos += dfull) {
                    uint64_t w = wf + kb;
                    int b = (int)(w & Bm);
                    oks[b] = orows[b] == (int64_t)(w >> h->lB)
                                 ? dmax(oks[b], pos + okh)
                                 : pos + okd;
                }
                for (; kb < nv - 1; kb++, pos += dfull)
                    oks[(wf + kb) & Bm] = pos + okd;
                h->ok_max[c] = dmax(h->ok_max[c], pos - dfull + okd);
                for (uint64_t k = 1; k < kend; k++) {
                    uint64_t w = wf + k;
                    orows[w & Bm] = (int64_t)(w >> h->lB);
                }
            } else {
                for (uint64_t k = 1; k < kend; k++) {
                    uint64_t w = wf + k;
                    int b = (int)(w & Bm);
                    int64_t *o = &orows[b], r = (int64_t)(w >> h->lB);
                    int act = *o != r;
                    double pos = base + (double)k * dfull;
                    if (act) {
                        /* Little's law, or a bank this call or an earlier
                         * one left cycling. */
                        double e = dmax(*o >= 0 ? el_open : el_shut,
                                        oks[b] + gap - pos);
                        if (e > 0) {
                            a->exposed += e;
                            base += e;
                            pos += e;
                        }
                    }
                    *o = r;
                    nmiss += (uint64_t)act;
                    if (k >= klast)
                        bank_served(h, c, b, pos, pos + dfull, act);
                }
            }
            a->nact += (double)(hidden ? kend - 1 : nmiss);
            a->bursts += (double)(kend - 1) * full;
            if (kend > 1) {
                uint64_t w = wf + kend - 1;
                h->last_d[c] = dfull;
                h->last_bank[c] = (int)(w & Bm);
                h->last_row[c] = (int64_t)(w >> h->lB);
            }
        } else {
            for (uint64_t k = 1; k < kend; k++)
                visit(h, acc, c, 0, (int64_t)(wf + k), full);
        }
        /* Visits kend .. nv-2: full rows, each a miss in a bank this call
         * already moved to an earlier row, the banks taken in turn. */
        uint64_t m = nv - 1 - kend;
        if (m > 0) {
            double e = cycle_cost(h, dfull, (double)h->B);
            a->bursts += (double)m * full;
            a->nact += (double)m;
            a->exposed += (double)m * e;
            uint64_t wp = wl - 1;
            h->last_d[c] = dfull;
            h->last_bank[c] = (int)(wp & Bm);
            h->last_row[c] = (int64_t)(wp >> h->lB);
            /* The rows this call leaves open, its last visit per bank, and
             * when those banks may cycle again. */
            uint64_t k0 = nv - 1 > (uint64_t)h->B ? nv - 1 - (uint64_t)h->B
                                                  : kend;
            if (k0 < kend)
                k0 = kend;
            if (fast) { /* the banks' times are set */
                for (uint64_t k = k0; k < nv - 1; k++) {
                    uint64_t w = wf + k;
                    orows[w & Bm] = (int64_t)(w >> h->lB);
                }
            } else {
                double *oks = &h->act_ok[c * h->B];
                double ok = chan_pos(h, a, c) - dfull + okd -
                            (double)(nv - 2 - k0) * (dfull + e);
                for (uint64_t k = k0; k < nv - 1; k++) {
                    uint64_t w = wf + k;
                    orows[w & Bm] = (int64_t)(w >> h->lB);
                    oks[w & Bm] = ok + (double)(k - k0) * (dfull + e);
                }
                h->ok_max[c] = dmax(h->ok_max[c],
                                    ok + (double)(nv - 2 - k0) * (dfull + e));
            }
        }
        uint64_t lo = wl << h->lupr;
        visit(h, acc, c, (int)(wl & Bm), (int64_t)(wl >> h->lB),
              (double)(vl - lo + 1) * bpu - ts);
    }
}

static void seg(hbm *h, chw *acc, uint64_t x, uint64_t L)
{
    x %= h->cap;
    while (L > 0) {
        uint64_t n = h->cap - x < L ? h->cap - x : L;
        seg_nowrap(h, acc, x, n);
        L -= n;
        x = 0;
    }
}

/* ---- strided blocks of small chunks: the repeating pattern --------------- */

static uint64_t gcd_u(uint64_t a, uint64_t b)
{
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* Chunks of a strided block simulated to find how its visits come back to
 * the banks; enough for 16 visits per channel to a 16-channel pattern. */
enum { BANK_SIM_CHUNKS = 256 };

/* Exposure per activate of a strided block of small chunks whose channels
 * may come back to a bank before the others had their turn (a stride of
 * 64 KiB takes 4 banks of one channel in turn, 17008 B mostly the same
 * bank).  The first BANK_SIM_CHUNKS chunks are walked: each channel
 * activates a row when a chunk reaches it in another stripe, with data dv
 * per activate, and waits for Little's law or the bank's cycle as
 * visit() does.  Beyond them, the walk's second half stands for the rest
 * of the `nrest` activates after each channel's first. */
static double strided_bank_cost(hbm *h, const hbm_xfer *x, uint64_t a,
                                double dv, double nrest)
{
    uint64_t c = x->chunk_bytes, S = x->stride, C = (uint64_t)h->C;
    uint64_t K = x->nchunks < BANK_SIM_CHUNKS ? x->nchunks : BANK_SIM_CHUNKS;
    double el = dmax(0.0, (h->rp + h->rcd) / h->Q - dv);
    double cyc = dmax(h->rc, dv + h->rp + h->rcd);
    int lst = h->lC + h->lupr; /* unit -> stripe */
    for (size_t i = 0; i < (size_t)h->C * (size_t)h->B; i++)
        h->sim_ok[i] = -1; /* data times start at 0: never binds */
    for (int ch = 0; ch < h->C; ch++) {
        h->sim_s[ch] = -1;
        h->sim_pos[ch] = 0;
    }
    double x1 = 0, n1 = 0, x2 = 0, n2 = 0;
    uint64_t ad = a;
    for (uint64_t j = 0; j < K; j++, ad += S) {
        /* A chunk below a stripe meets a channel in at most two stripes:
         * its first and last unit there tell which. */
        uint64_t u0 = ad >> h->lI, u1 = (ad + c - 1) >> h->lI;
        uint64_t e1 = u1 - u0 < C ? u1 : u0 + C - 1;
        uint64_t r2 = u1 >= e1 + C ? u1 - C + 1 : e1 + 1;
        for (uint64_t u = u0; u <= u1; u = u == e1 ? r2 : u + 1) {
            int ch = (int)(u & (C - 1));
            int64_t s = (int64_t)(u >> lst);
            if (h->sim_s[ch] == s)
                continue; /* the row is open */
            double *ok = &h->sim_ok[ch * h->B + (int)(s & (h->B - 1))];
            double *pos = &h->sim_pos[ch];
            if (h->sim_s[ch] >= 0) {
                double ex = dmax(el, *ok - *pos);
                *pos += ex;
                x1 += ex;
                n1 += 1;
                if (2 * j >= K) {
                    x2 += ex;
                    n2 += 1;
                }
            }
            h->sim_s[ch] = s;
            *ok = *pos + cyc; /* data time of the bank's next row */
            *pos += dv;
        }
    }
    if (n1 == 0)
        return el;
    if (K == x->nchunks || nrest <= n1)
        return x1 / n1;
    return (x1 + (nrest - n1) * (n2 > 0 ? x2 / n2 : x1 / n1)) / nrest;
}

/* Chunks smaller than a stripe, stride > chunk.  Per chunk: its bursts and
 * the interleave units it spans (averaged over the alignment pattern,
 * exact when the pattern repeats within 64 chunks).  Rows: a stride below
 * one stripe (row_bytes x channels) opens one row per channel reached per
 * stripe; a larger stride opens a row for every unit of every chunk.
 * Channels: a stride that is a multiple of the interleave unit steps the
 * channel by (stride / unit) mod channels, reaching channels / gcd of them
 * (a 4 KiB stride with 16 x 256 B interleave camps on one channel). */
static void strided(hbm *h, chw *acc, const hbm_xfer *x)
{
    uint64_t a = x->addr % h->cap, c = x->chunk_bytes, S = x->stride;
    double n = (double)x->nchunks;
    uint64_t low = S & (~S + 1); /* lowest set bit of S */
    uint64_t qb = h->BB / (low < h->BB ? low : h->BB);
    uint64_t qu = h->I / (low < h->I ? low : h->I);
    if (qb > 64)
        qb = 64;
    if (qu > 64)
        qu = 64;
    double sb = 0, su = 0;
    for (uint64_t j = 0; j < qb; j++) {
        uint64_t o = (a + j * S) & (h->BB - 1);
        sb += (double)((o + c - 1) >> h->lBB) + 1;
    }
    for (uint64_t j = 0; j < qu; j++) {
        uint64_t o = (a + j * S) & (h->I - 1);
        double u = (double)((o + c - 1) >> h->lI) + 1;
        su += u < h->C ? u : h->C;
    }
    double bpc = sb / (double)qb, upc = su / (double)qu;
    int C = h->C;
    /* Channels reached. */
    int used = 0;
    uint64_t u0 = a >> h->lI;
    uint64_t cyc = (uint64_t)C, step = 1;
    if ((S & (h->I - 1)) == 0) {
        step = (S >> h->lI) & (uint64_t)(C - 1);
        cyc = (uint64_t)C / gcd_u(step, (uint64_t)C);
        if (cyc > (uint64_t)x->nchunks)
            cyc = x->nchunks;
    }
    int span = (int)ceil(upc);
    for (int ch = 0; ch < C; ch++)
        h->scratch[ch].touched = 0;
    for (uint64_t j = 0; j < cyc; j++)
        for (int t = 0; t < span; t++) {
            int ch = (int)((u0 + j * step + (uint64_t)t) & (uint64_t)(C - 1));
            if (!h->scratch[ch].touched) {
                h->scratch[ch].touched = 1;
                used++;
            }
        }
    /* Row activations. */
    double nact;
    if (S < h->Z) {
        uint64_t last = a + (x->nchunks - 1) * S + c - 1;
        double nstr = (double)((last / h->Z) - (a / h->Z) + 1);
        double k = ceil((double)h->Z / (double)S);
        double cps = dmin((double)used, k * upc);
        nact = dmin(nstr * cps, n * upc);
    } else {
        nact = n * upc;
    }
    double bch = n * bpc / used, ach = dmax(1.0, nact / used);
    double dv = bch / ach * h->t_burst;
    /* Banks: a channel whose visits are at most a stripe apart (every
     * unit touched, or the channel's chunks a whole number of units apart,
     * at most a stripe) opens a row in every stripe, the banks in turn;
     * any other stride may come back to a bank sooner. */
    double e;
    uint64_t st = (S >> h->lI) & (uint64_t)(C - 1);
    if (S <= h->I || ((S & (h->I - 1)) == 0 &&
                      (uint64_t)C / gcd_u(st, (uint64_t)C) * S <= h->Z))
        e = cycle_cost(h, dv, (double)h->B);
    else
        e = strided_bank_cost(h, x, a, dv, (double)used * (ach - 1));
    for (int ch = 0; ch < C; ch++) {
        if (!h->scratch[ch].touched)
            continue;
        int first = !acc[ch].touched;
        touch(h, acc, ch);
        chw *w = &acc[ch];
        double tact = (h->last_row[ch] >= 0 ? h->rp : 0) + h->rcd;
        if (first && !h->piped[ch]) {
            w->lat0 = h->cl + tact;
            w->act_in_lat0 = 1;
        } else {
            /* Earlier calls' bank cycles are not looked up for the first
             * chunk (hbm_access_reference applies them). */
            w->exposed += miss_cost(h, ch, tact);
        }
        w->bursts += bch;
        w->nact += ach;
        w->exposed += (ach - 1) * e;
        h->last_d[ch] = dv;
    }
    /* The rows the last chunks leave open. */
    uint64_t m = x->nchunks < 32 ? x->nchunks : 32;
    for (uint64_t j = x->nchunks - m; j < x->nchunks; j++) {
        uint64_t ad = (a + j * S) % h->cap, u = ad >> h->lI;
        uint64_t w = (u >> h->lC) >> h->lupr;
        int ch = (int)(u & (uint64_t)(C - 1)), b = (int)(w & (uint64_t)(h->B - 1));
        if (!acc[ch].touched)
            continue;
        h->open_row[ch * h->B + b] = (int64_t)(w >> h->lB);
        h->last_bank[ch] = b;
        h->last_row[ch] = (int64_t)(w >> h->lB);
    }
    /* When their banks may cycle again: back from each channel's end, one
     * activate of dv + e per chunk (the latest per bank counts). */
    for (int ch = 0; ch < C; ch++) {
        h->sim_pos[ch] = acc[ch].touched ? chan_pos(h, &acc[ch], ch) : 0;
        h->sim_s[ch] = 0;
    }
    double oka = dmax(dv - h->cl + h->rp, h->rc - h->cl - h->rcd);
    for (uint64_t i = 0; i < m; i++) {
        uint64_t j = x->nchunks - 1 - i;
        uint64_t ad = a + j * S, u;
        if (ad >= h->cap)
            ad %= h->cap;
        u = ad >> h->lI;
        uint64_t w = (u >> h->lC) >> h->lupr;
        int ch = (int)(u & (uint64_t)(C - 1));
        int b = (int)(w & (uint64_t)(h->B - 1));
        if (!acc[ch].touched)
            continue;
        double *ok = &h->act_ok[ch * h->B + b];
        double t = h->sim_pos[ch] - dv - (double)h->sim_s[ch]++ * (dv + e);
        *ok = dmax(*ok, t + oka); /* bank_served of a miss, the latest */
        h->ok_max[ch] = dmax(h->ok_max[ch], *ok);
    }
}

/* ---- one call --------------------------------------------------------------- */

/* How long a channel's gathered work takes: the data bursts with the
 * activate time they do not hide, or the activates at the rate tRRD and
 * tFAW allow, whichever binds.  An activate that lat0 already waits for
 * (the first on an idle channel) opens the rate window rather than
 * spending a slot of it: n activates are n - 1 intervals apart, and the
 * last one's row still delivers a burst (a lone 64 B read is CL + tRCD
 * + one burst, not CL + tRCD + tFAW/4). */
static double chan_work(const hbm *h, const chw *a)
{
    double acts = a->act_in_lat0 && a->nact >= 1
                      ? (a->nact - 1) * h->actrate + h->t_burst
                      : a->nact * h->actrate;
    return a->lat0 + dmax(a->bursts * h->t_burst + a->exposed, acts);
}

static void begin(hbm *h, double t0)
{
    h->t0 = t0;
    h->ntouched = 0;
}

static double finish(hbm *h, double t0, const hbm_xfer *x)
{
    double done = t0;
    for (int i = 0; i < h->ntouched; i++) {
        int c = h->touched[i];
        chw *a = &h->acc[c];
        double s = h->s0[c];
        if (h->last_bank[c] >= 0)
            row_left(h, c, h->last_bank[c], chan_pos(h, a, c));
        double work = chan_work(h, a);
        double end, nref = 0;
        if (s >= h->win_lo && s + work < h->win_hi) {
            end = s + work; /* no refresh inside: the common case */
        } else {
            double f0 = avail(h, c, s), k0 = refresh_count_slow(h, c, s);
            end = avail_inv(h, c, f0 + work);
            nref = refresh_count_slow(h, c, end) - k0;
            if (nref > 0) /* the refresh closed the streaming row */
                end = avail_inv(h, c, f0 + work + nref * h->rcd);
            nref = refresh_count_slow(h, c, end) - k0;
        }
        h->free_at[c] = end;
        h->epoch[c] = (int64_t)refresh_count(h, c, end);
        h->st.bursts += a->bursts;
        h->st.activates += a->nact;
        h->st.refreshes += nref;
        h->st.busy_s += end - s;
        if (end > done)
            done = end;
        *a = (chw){0, 0, 0, 0, 0, 0};
    }
    h->ntouched = 0;
    double bytes = (double)x->chunk_bytes * (double)x->nchunks;
    if (x->is_write)
        h->st.bytes_written += bytes;
    else
        h->st.bytes_read += bytes;
    return done;
}

static int empty(const hbm_xfer *x)
{
    return x->chunk_bytes == 0 || x->nchunks == 0;
}

/* When the call's gathered work would end, refresh aside: what
 * hbm_access compares to choose between two ways of serving a block. */
static double est_end(const hbm *h)
{
    double end = 0;
    for (int i = 0; i < h->ntouched; i++) {
        int c = h->touched[i];
        const chw *a = &h->acc[c];
        double e = h->s0[c] + chan_work(h, a);
        if (e > end)
            end = e;
    }
    return end;
}

/* The block's pattern, chunks apart (S > c). */
static void pattern(hbm *h, const hbm_xfer *x, uint64_t c, uint64_t S)
{
    if (c >= h->Z) {
        /* Chunks of a stripe or more: each is a contiguous block whose
         * channel loads are even; the third chunk stands for the rest. */
        uint64_t k = x->nchunks < 3 ? x->nchunks : 3;
        for (uint64_t i = 0; i + 1 < k; i++)
            seg(h, h->acc, x->addr + i * S, c);
        memcpy(h->scratch, h->acc, (size_t)h->C * sizeof *h->acc);
        seg(h, h->acc, x->addr + (k - 1) * S, c);
        double more = (double)(x->nchunks - k);
        for (int ch = 0; ch < h->C && more > 0; ch++) {
            chw *a = &h->acc[ch], *b = &h->scratch[ch];
            a->bursts += more * (a->bursts - b->bursts);
            a->nact += more * (a->nact - b->nact);
            a->exposed += more * (a->exposed - b->exposed);
        }
        if (more > 0) { /* leave the rows of the last chunk open */
            for (int ch = 0; ch < h->C; ch++)
                h->scratch[ch] = h->acc[ch];
            seg(h, h->scratch, x->addr + (x->nchunks - 1) * S, c);
        }
    } else {
        strided(h, h->acc, x);
    }
}

double hbm_access(hbm *h, double t_start, const hbm_xfer *x)
{
    if (empty(x))
        return t_start;
    begin(h, t_start);
    uint64_t c = x->chunk_bytes, S = x->stride < c ? c : x->stride;
    uint64_t span = (x->nchunks - 1) * S + c;
    if (S == c || x->nchunks == 1) {
        seg(h, h->acc, x->addr, c * x->nchunks);
    } else if (S - c < h->BB) {
        /* Gaps shorter than a burst: every burst of the span holds bytes
         * of some chunk, and the memory moves whole bursts, so the
         * transfer is the span read contiguously (chunks sharing a burst
         * share its cost). */
        seg(h, h->acc, x->addr, span);
    } else {
        /* A controller can always fetch the whole span and drop the gaps,
         * so the pattern's estimate is bounded by the span's (the closed
         * form can overcount row misses where small gaps keep chunks in
         * one open row). */
        snap_save(h, &h->snap[0]);
        pattern(h, x, c, S);
        double e_pat = est_end(h);
        /* The span cannot end before its bursts, spread evenly over all
         * channels, have moved: most patterns are cheaper than that and
         * the span need not be timed at all. */
        double span_min = t_start + (double)(span / h->BB) * h->t_burst /
                                        (double)h->C;
        if (e_pat <= span_min)
            return finish(h, t_start, x);
        snap_save(h, &h->snap[1]);
        snap_load(h, &h->snap[0]);
        seg(h, h->acc, x->addr, span);
        if (e_pat <= est_end(h))
            snap_load(h, &h->snap[1]);
    }
    return finish(h, t_start, x);
}

double hbm_access_reference(hbm *h, double t_start, const hbm_xfer *x)
{
    if (empty(x))
        return t_start;
    begin(h, t_start);
    uint64_t c = x->chunk_bytes, S = x->stride < c ? c : x->stride;
    if (S == c) {
        seg(h, h->acc, x->addr, c * x->nchunks);
        return finish(h, t_start, x);
    }
    /* Chunks that share a burst, or whose bursts follow on without one
     * skipped, move as one run: the memory transfers whole bursts, so a
     * burst is charged once however many chunks it holds. */
    uint64_t run = x->addr, end = x->addr + c; /* [run, end) */
    for (uint64_t i = 1; i < x->nchunks; i++) {
        uint64_t a = x->addr + i * S;
        if ((a >> h->lBB) <= ((end - 1) >> h->lBB) + 1) {
            end = a + c;
            continue;
        }
        seg(h, h->acc, run, end - run);
        run = a;
        end = a + c;
    }
    seg(h, h->acc, run, end - run);
    return finish(h, t_start, x);
}
