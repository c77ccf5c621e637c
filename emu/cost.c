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
 * function of the transfer's size: the model times a read and a write of
 * one block alike (hbm_access), so one measurement serves both
 * directions. */
typedef struct {
    int64_t key;
    int64_t ps;
} cost_ent;

struct cost_dma {
    cost_ent *tab; /* open addressing, keys bytes (never 0) */
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

static int64_t dma_measure(cost_dma *d, int64_t bytes)
{
    hbm_xfer x = {0};
    x.addr = 0;
    x.chunk_bytes = (uint64_t)bytes;
    x.nchunks = 1;
    x.stride = (uint64_t)bytes;
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
    int64_t key = bytes;
    if (d->n * 2 >= d->cap) {
        size_t ncap = d->cap ? d->cap * 2 : 1024;
        cost_ent *nt = calloc(ncap, sizeof *nt);
        if (!nt) /* no room to remember it: measure every time */
            return dma_measure(d, bytes);
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
    int64_t ps = dma_measure(d, bytes);
    d->tab[j].key = key;
    d->tab[j].ps = ps;
    d->n++;
    return ps;
}

/* ---- sequence prices ------------------------------------------------------ */

/* An instruction as the 8 integers its timing can depend on. */
enum { MEMO_W = 8 };

typedef struct {
    uint64_t hash;
    size_t off, n; /* in pool, n instructions */
    int64_t ps;
} memo_ent;

struct cost_memo {
    memo_ent *tab; /* open addressing; n == 0 marks an empty slot */
    size_t cap, used;
    uint64_t *pool; /* MEMO_W words per instruction (memo_words) */
    size_t npool, cappool;
    tpu_params hw; /* what it prices for (memo_params) */
};

/* The chip data a local sequence's price depends on: all but the
 * interconnect's and the record of what --set gave. */
static void memo_params(const tpu_params *hw, tpu_params *k)
{
    memcpy(k, hw, sizeof *k);
    memset(&k->ici, 0, sizeof k->ici);
    k->collective_overhead_ns = 0;
    k->set_mask = 0;
    k->hbm_peak_gbs_set = 0;
}

/* The first word: the small fields and the layer. */
static inline uint64_t memo_word0(const fw_insn *in)
{
    return (uint64_t)in->op | (uint64_t)in->phase << 8 |
           (uint64_t)in->passes << 16 | (uint64_t)in->fx << 24 |
           (uint64_t)(uint32_t)in->layer << 32;
}

/* The last word: the fields only the listings and --functional read. */
static inline uint64_t memo_word7(const fw_insn *in)
{
    return (uint64_t)in->recompute | (uint64_t)in->gconv << 8;
}

static void memo_words(const fw_insn *in, uint64_t w[MEMO_W])
{
    w[0] = memo_word0(in);
    w[1] = (uint64_t)in->a;
    w[2] = (uint64_t)in->b;
    w[3] = (uint64_t)in->c;
    w[4] = (uint64_t)in->d;
    w[5] = (uint64_t)in->e;
    w[6] = (uint64_t)in->kparts;
    w[7] = memo_word7(in);
}

/* Every lookup hashes the whole sequence, so an instruction's words are
 * mixed by independent multiplies (one per word, in parallel) and only
 * their sum goes through the serial chain; the finaliser (MurmurHash3's)
 * spreads every bit to the high ones that pick the slot.  The value only
 * places entries: memo_same decides. */
static uint64_t memo_hash(const fw_program *p)
{
    uint64_t h = 1469598103934665603ULL ^ (uint64_t)p->n;
    for (size_t i = 0; i < p->n; i++) {
        const fw_insn *in = &p->code[i];
        uint64_t s = memo_word0(in) * 0x9E3779B97F4A7C15ull +
                     (uint64_t)in->a * 0xC2B2AE3D27D4EB4Full +
                     (uint64_t)in->b * 0x165667B19E3779F9ull +
                     (uint64_t)in->c * 0xD6E8FEB86659FD93ull +
                     (uint64_t)in->d * 0xFF51AFD7ED558CCDull +
                     (uint64_t)in->e * 0xC4CEB9FE1A85EC53ull +
                     (uint64_t)in->kparts * 0x94D049BB133111EBull +
                     memo_word7(in) * 0xBF58476D1CE4E5B9ull;
        h = (h ^ s) * 1099511628211ULL;
    }
    h ^= h >> 33;
    h *= 0xFF51AFD7ED558CCDull;
    h ^= h >> 33;
    h *= 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 33;
    return h ? h : 1;
}

/* The stored words against the instructions' fields read in place: the
 * same comparison through memo_words' array makes a range-heavy validate
 * 6-8% slower (gcc 12, -O2), so the hash and this name the fields again. */
static int memo_same(const cost_memo *m, const memo_ent *e,
                     const fw_program *p)
{
    if (e->n != p->n)
        return 0;
    const uint64_t *q = m->pool + e->off;
    for (size_t i = 0; i < p->n; i++, q += MEMO_W) {
        const fw_insn *in = &p->code[i];
        uint64_t d = (q[0] ^ memo_word0(in)) | (q[1] ^ (uint64_t)in->a) |
                     (q[2] ^ (uint64_t)in->b) | (q[3] ^ (uint64_t)in->c) |
                     (q[4] ^ (uint64_t)in->d) | (q[5] ^ (uint64_t)in->e) |
                     (q[6] ^ (uint64_t)in->kparts) | (q[7] ^ memo_word7(in));
        if (d)
            return 0;
    }
    return 1;
}

cost_memo *cost_memo_new(const tpu_params *hw)
{
    cost_memo *m = calloc(1, sizeof *m);
    if (m)
        memo_params(hw, &m->hw);
    return m;
}

int cost_memo_matches(const cost_memo *m, const tpu_params *hw)
{
    if (!m)
        return 0;
    tpu_params k;
    memo_params(hw, &k);
    /* bytewise, so conservative: padding that differs only refuses */
    return memcmp(&k, &m->hw, sizeof k) == 0;
}

void cost_memo_free(cost_memo *m)
{
    if (!m)
        return;
    free(m->tab);
    free(m->pool);
    free(m);
}

int64_t cost_memo_get(const cost_memo *m, const fw_program *prog)
{
    if (!m || !m->cap || prog->n == 0)
        return -1;
    uint64_t h = memo_hash(prog);
    for (size_t j = (size_t)(h >> 20) & (m->cap - 1); m->tab[j].n;
         j = (j + 1) & (m->cap - 1))
        if (m->tab[j].hash == h && memo_same(m, &m->tab[j], prog))
            return m->tab[j].ps;
    return -1;
}

void cost_memo_put(cost_memo *m, const fw_program *prog, int64_t ps)
{
    if (!m || prog->n == 0 || ps < 0)
        return;
    if (2 * (m->used + 1) > m->cap) {
        size_t nc = m->cap ? 2 * m->cap : 1024;
        memo_ent *nt = calloc(nc, sizeof *nt);
        if (!nt)
            return;
        for (size_t i = 0; i < m->cap; i++)
            if (m->tab[i].n) {
                size_t j = (size_t)(m->tab[i].hash >> 20) & (nc - 1);
                while (nt[j].n)
                    j = (j + 1) & (nc - 1);
                nt[j] = m->tab[i];
            }
        free(m->tab);
        m->tab = nt;
        m->cap = nc;
    }
    size_t need = m->npool + prog->n * MEMO_W;
    if (need > m->cappool) {
        size_t nc = m->cappool ? m->cappool : 4096;
        while (nc < need)
            nc *= 2;
        uint64_t *np = realloc(m->pool, nc * sizeof *np);
        if (!np)
            return;
        m->pool = np;
        m->cappool = nc;
    }
    uint64_t h = memo_hash(prog);
    size_t j = (size_t)(h >> 20) & (m->cap - 1);
    while (m->tab[j].n) {
        if (m->tab[j].hash == h && memo_same(m, &m->tab[j], prog))
            return; /* already there */
        j = (j + 1) & (m->cap - 1);
    }
    memo_ent *e = &m->tab[j];
    e->hash = h;
    e->off = m->npool;
    e->n = prog->n;
    e->ps = ps;
    for (size_t i = 0; i < prog->n; i++)
        memo_words(&prog->code[i], m->pool + m->npool + i * MEMO_W);
    m->npool = need;
    m->used++;
}
