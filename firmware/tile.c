/* tile — tile loops: streaming vector passes, matrix products and weight
 * gradients cut into VMEM-sized tiles, each tile's DMA overlapping the
 * previous tile's compute, and the choice of the tile size.
 *
 * XLA's TPU backend chooses tile sizes with an analytical cost model ([C]
 * Kaufman et al., "A Learned Performance Model for Tensor Processing
 * Units", MLSys 2021: tile-size selection is one of the production cost
 * model's two tasks); what that model weighs is [U].  tpuemu's compiler
 * asks the machine it compiles for: each candidate's tile loop is priced
 * by the lowering's pricer (the pipeline hands it the engine's own
 * timing), so the choice is the one the engine then finds fastest, up to
 * the overlap with neighbouring layers that a single loop does not see.
 * The largest tile that fits is not always it: its first load and last
 * store are not hidden behind compute, and smaller tiles can balance the
 * loop's last iteration.  `xla.tile_search=0` takes the largest tile that
 * fits. */
#include <math.h>
#include <string.h>

#include "firmware/lower_internal.h"

/* One tile's work: loads, one compute instruction, stores. */
typedef struct {
    int64_t ld, st;      /* bytes */
    fw_op op;            /* FW_MATMUL or FW_VEC */
    int64_t a, b, cc, d; /* operands of the compute instruction */
    int64_t e;
    int passes;
    int64_t kparts;
} tile;

static void emit_compute(lower_ctx *c, int phase, int layer, const tile *t)
{
    lower_emit(c, t->op, phase, layer, t->a, t->b, t->cc, t->d);
    if (!c->prog->oom) {
        fw_insn *in = &c->prog->code[c->prog->n - 1];
        if (t->op == FW_MATMUL) {
            in->passes = (uint8_t)t->passes;
            in->e = t->e;
            in->kparts = t->kparts;
        }
        in->fx = (uint8_t)c->fx;
    }
}

static void emit_tile_body(lower_ctx *c, int phase, int layer, int64_t next_ld,
                           const tile *t)
{
    if (next_ld > 0) {
        lower_emit(c, FW_DMA_LD, phase, layer, next_ld, 0, 0, 0);
        lower_emit(c, FW_WAIT_LD, phase, layer, 1, 0, 0, 0);
    } else {
        lower_emit(c, FW_WAIT_LD, phase, layer, 0, 0, 0, 0);
    }
    emit_compute(c, phase, layer, t);
    if (t->st > 0)
        lower_emit(c, FW_DMA_ST, phase, layer, t->st, 0, 0, 0);
}

/* A loop of tiles: `nchunks` chunks (the N chunks of a product whose
 * weights do not fit VMEM; 1 otherwise), each of nt tiles, nt-1 of `full`
 * then `last`, after its w_chunk bytes of weights. */
typedef struct {
    int64_t nchunks, nt, w_chunk;
    tile full, last;
    int64_t cc_last; /* the last chunk's columns when narrower (0: same) */
    /* Only the first tile's compute carries the functional meaning (a
     * weight gradient's slabs: --functional sums every position at once);
     * the rest are timing only. */
    int first_only;
} tiling;

/* The next tile's load is issued before this tile's compute (double
 * buffering); a chunk's last tile also loads the next chunk's weights and
 * first tile, so only the first chunk's weights are exposed (matmul_plan
 * keeps two chunks' weights within half of VMEM).  The loop starts once
 * the previous layer's stores have landed. */
static void emit_tiling(lower_ctx *c, int phase, int layer, const tiling *t)
{
    int keep = c->fx;
    int64_t nt = t->nt < 1 ? 1 : t->nt;
    int64_t nch = t->nchunks < 1 ? 1 : t->nchunks;
    tile nfull = t->full, nlast = t->last;
    const tile *full = &t->full, *last = &t->last;
    int64_t first_ld = nt > 1 ? full->ld : last->ld;
    lower_emit(c, FW_WAIT_ST, phase, layer, 0, 0, 0, 0);
    if (t->w_chunk > 0)
        lower_emit(c, FW_DMA_LD, phase, layer, t->w_chunk, 0, 0, 0);
    if (first_ld > 0)
        lower_emit(c, FW_DMA_LD, phase, layer, first_ld, 0, 0, 0);
    for (int64_t j = 0; j < nch; j++) {
        int64_t after = j + 1 < nch ? t->w_chunk + first_ld : 0;
        if (j == nch - 1 && nch > 1 && t->cc_last > 0) {
            /* a ragged last chunk multiplies only its own columns */
            nfull.cc = nlast.cc = t->cc_last;
            full = &nfull;
            last = &nlast;
        }
        if (nt > 1) {
            int64_t loop = nt - 2;
            /* a loop body runs many times: the functional tile is peeled */
            if (loop > 0 && t->first_only && c->fx != FX_NONE) {
                emit_tile_body(c, phase, layer, full->ld, full);
                c->fx = FX_NONE;
                loop--;
            }
            if (loop > 0) {
                lower_emit(c, FW_LOOP, phase, layer, loop, 0, 0, 0);
                emit_tile_body(c, phase, layer, full->ld, full);
                lower_emit(c, FW_ENDLOOP, phase, layer, 0, 0, 0, 0);
            }
            emit_tile_body(c, phase, layer, last->ld, full);
            if (t->first_only)
                c->fx = FX_NONE;
        }
        emit_tile_body(c, phase, layer, after, last);
        if (t->first_only)
            c->fx = FX_NONE;
    }
    c->fx = keep;
}

/* The full and last tiles of a streaming pass cut into nt tiles. */
static void pass_tiles(int64_t nt, int64_t in_i, int64_t out_i, int64_t el_i,
                       double ops, tiling *t)
{
    memset(t, 0, sizeof *t);
    t->nchunks = 1;
    t->nt = nt;
    tile *full = &t->full, *last = &t->last;
    full->op = FW_VEC;
    full->ld = cdiv(in_i, nt);
    full->st = cdiv(out_i, nt);
    full->a = cdiv(el_i, nt);
    full->b = (int64_t)llround(ops * 100);
    *last = *full;
    last->ld = in_i - full->ld * (nt - 1);
    last->st = out_i - full->st * (nt - 1);
    last->a = el_i - full->a * (nt - 1);
    if (last->ld < 0)
        last->ld = 0;
    if (last->st < 0)
        last->st = 0;
    if (last->a < 0)
        last->a = 0;
}

static double tiling_ps(lower_ctx *c, const tiling *t);

/* The candidates: for each VMEM budget V, V/2, V/4 ... down to
 * TILE_SEARCH_VMEM_FLOOR, the largest tiles that fit that budget (the
 * choice a smaller VMEM would make), and between one budget's tile count
 * and the next, equal tiles in counts 2^j and 3 x 2^j (so the last tile is
 * not a sliver).  Every budget's candidates depend on that budget alone,
 * so doubling VMEM keeps every option and adds some: with the engine's own
 * costs the choice cannot get slower.  Below the floor, tiles stop paying
 * for their weight loads and fill. */
#define TILE_SEARCH_VMEM_FLOOR (256.0 * 1024)

/* Takes the candidate when the pricer finds it strictly faster than the
 * best so far: ties keep the earlier candidate, which has the larger
 * tiles. */
static void keep_faster(lower_ctx *c, double *best, const tiling *cand,
                        tiling *chosen)
{
    double t = tiling_ps(c, cand);
    if (t >= 0 && (*best < 0 || t < *best)) {
        *best = t;
        *chosen = *cand;
    }
}

/* The next VMEM budget whose largest tiles are candidates, below v: the
 * largest power of two under it (at least the floor).  Powers of two
 * rather than VMEM / 2^j, so that any VMEM offers every candidate of each
 * power-of-two VMEM below it: 40 MB keeps 32 MiB's tiles, so it is
 * never slower than 32 MiB. */
static double budget_below(double v)
{
    double p = TILE_SEARCH_VMEM_FLOOR;
    while (p * 2 < v)
        p *= 2;
    return p;
}

/* The equal-tile counts strictly between lo and hi. */
static int64_t next_tile_count(int64_t cnt, int64_t lo, int64_t hi)
{
    int64_t from = cnt + 1 > lo + 1 ? cnt + 1 : lo + 1;
    int64_t p2 = 1, p3 = 3;
    while (p2 < from)
        p2 *= 2;
    while (p3 < from)
        p3 *= 2;
    int64_t v = p2 < p3 ? p2 : p3;
    return v < hi ? v : 0;
}

/* Tiles of a pass over `big` bytes under a VMEM budget: four buffers (in
 * and out, double-buffered) share it. */
static int64_t pass_count(double vmem, double big)
{
    int64_t nt = (int64_t)ceil(big / (vmem / 4));
    return nt < 1 ? 1 : nt;
}

/* A streaming vector pass: read in_bytes, write out_b, `ops` vector
 * operations per element over `elems` elements. */
void tile_pass(lower_ctx *c, int phase, int layer, double in_bytes,
               double out_b, double elems, double ops)
{
    if (elems <= 0 && in_bytes <= 0 && out_b <= 0)
        return;
    double big = in_bytes > out_b ? in_bytes : out_b;
    int64_t nt = pass_count(c->hw->vmem_bytes, big);
    int64_t in_i = (int64_t)ceil(in_bytes), out_i = (int64_t)ceil(out_b);
    int64_t el_i = (int64_t)ceil(elems);
    tiling best_t;
    pass_tiles(nt, in_i, out_i, el_i, ops, &best_t);
    if (c->hw->xla_tile_search) {
        double best = tiling_ps(c, &best_t);
        int64_t here = nt;
        for (double v = c->hw->vmem_bytes, nb; v > TILE_SEARCH_VMEM_FLOOR;
             v = nb) {
            nb = budget_below(v);
            int64_t next = pass_count(nb, big);
            /* equal tiles between this budget's count and the next's, then
             * the next budget's own */
            for (int64_t g = next_tile_count(0, here, next);;
                 g = next_tile_count(g, here, next)) {
                int64_t cnt = g ? g : next;
                if (cnt != here) {
                    tiling cand;
                    pass_tiles(cnt, in_i, out_i, el_i, ops, &cand);
                    keep_faster(c, &best, &cand, &best_t);
                }
                if (!g)
                    break;
            }
            here = next;
        }
    }
    emit_tiling(c, phase, layer, &best_t);
}

/* The same, with the instructions' functional meaning. */
void tile_pass_fx(lower_ctx *c, int fx, int phase, int layer, double in_bytes,
                  double out_b, double elems, double ops)
{
    int keep = c->fx;
    c->fx = fx;
    tile_pass(c, phase, layer, in_bytes, out_b, elems, ops);
    c->fx = keep;
}

/* Duration (ps) of emit_tiling's instruction sequence run alone, as the
 * pricer gives it (the engine's unit costs, DMA pipe and loop rules),
 * until its stores have landed, which is where the next layer starts; a
 * negative value when host memory ran out. */
static double tiling_ps(lower_ctx *c, const tiling *t)
{
    fw_program *keep = c->prog;
    c->scratch.n = 0;
    c->prog = &c->scratch;
    emit_tiling(c, 0, -1, t);
    c->prog = keep;
    if (c->scratch.oom) {
        c->scratch.oom = 0;
        return -1;
    }
    return (double)c->pricer->price(c->pricer->ctx, &c->scratch);
}

/* The tiles of a matrix product cut into mt-row tiles in each of nchunks N
 * chunks: every chunk streams all m rows (re-reading the input) and
 * stores its columns' share of the output. */
static void matmul_tiles(int64_t m, int64_t mt, int64_t k, int64_t n_total,
                         int64_t n_chunk, int64_t nchunks, double ld_per_row,
                         double st_per_row, double epi_per_row, int passes,
                         double w_bytes, tiling *t)
{
    memset(t, 0, sizeof *t);
    t->nchunks = nchunks;
    t->nt = cdiv(m, mt);
    t->w_chunk = (int64_t)ceil(w_bytes / (double)nchunks);
    if (nchunks > 1 && n_total > n_chunk * (nchunks - 1))
        t->cc_last = n_total - n_chunk * (nchunks - 1);
    tile *full = &t->full, *last = &t->last;
    full->op = FW_MATMUL;
    full->passes = passes;
    full->a = mt;
    full->e = m;
    full->b = k;
    full->cc = n_chunk;
    full->ld = (int64_t)ceil(ld_per_row * (double)mt);
    full->st = (int64_t)ceil(st_per_row * (double)mt / (double)nchunks);
    full->d = (int64_t)ceil(epi_per_row * (double)mt / (double)nchunks);
    *last = *full;
    int64_t m_last = m - mt * (t->nt - 1);
    last->a = m_last;
    last->ld = (int64_t)ceil(ld_per_row * (double)m_last);
    last->st = (int64_t)ceil(st_per_row * (double)m_last / (double)nchunks);
    last->d = (int64_t)ceil(epi_per_row * (double)m_last / (double)nchunks);
}

/* How a matrix product is tiled under a VMEM budget: weights stay
 * resident in up to half of it.  When they do not fit, the product is cut
 * into N chunks of whole MXU tiles (a ragged chunk would leave columns of
 * every weight tile empty), each re-reading the input, and two chunks'
 * weights share that half: the next chunk's load while this one computes.
 * When one tile's column of weights is still too large, K is cut into
 * parts too, each part adding its partial sums to the previous part's in
 * fp32 through HBM.  M is cut into the largest tiles that fit the rest
 * (double-buffered input and output, fp32 accumulators). */
typedef struct {
    int64_t nchunks, n_chunk, kparts, mt;
} mm_plan;

static mm_plan matmul_plan(const lower_ctx *c, double vmem, int64_t m,
                           int64_t k, int64_t n, double ld_per_row,
                           double st_per_row, double w_bytes,
                           double acc_row_bytes)
{
    mm_plan pl;
    int64_t cols = c->hw->mxu.cols, rows = c->hw->mxu.rows;
    double budget = vmem / 2;
    pl.nchunks = 1;
    pl.n_chunk = n;
    pl.kparts = 1;
    if (w_bytes > budget) {
        double chunk = budget / 2; /* double-buffered */
        double per_col = w_bytes / (double)rup(n, c->hw->lane_pad);
        int64_t fit = (int64_t)(chunk / per_col) / cols * cols;
        if (fit >= cols) {
            pl.n_chunk = fit < n ? fit : n;
        } else {
            pl.n_chunk = cols < n ? cols : n;
            pl.kparts = (int64_t)ceil(
                per_col * (double)rup(pl.n_chunk, c->hw->lane_pad) / chunk);
            int64_t most = cdiv(k, rows); /* a part is one K tile at least */
            if (pl.kparts > most)
                pl.kparts = most;
        }
        pl.nchunks = cdiv(n, pl.n_chunk);
    }
    double parts = (double)(pl.nchunks * pl.kparts);
    double w_res = parts > 1 ? 2 * w_bytes / parts : w_bytes;
    /* a part's rows: its slice of the input, the partial sums it reads and
     * writes (or the output), the accumulators */
    double acc = acc_row_bytes / (double)pl.nchunks;
    double per_row = 2 * ld_per_row / (double)pl.kparts +
                     2 * (pl.kparts > 1 ? 2 * acc : st_per_row / pl.nchunks) +
                     acc;
    int64_t mt = per_row > 0 ? (int64_t)((vmem - w_res) / per_row) : m;
    mt = mt / 8 * 8;
    if (mt < 8)
        mt = 8;
    pl.mt = mt > m ? m : mt;
    return pl;
}

/* A product whose weights do not fit VMEM even one MXU tile wide: K parts
 * in turn, each with its slice of the weights resident chunk by chunk,
 * streaming its slice of every input row and adding to the fp32 partial
 * sums of the parts before it (read from and written back to HBM; the last
 * part writes the output and runs the epilogue).  The first part carries
 * the functional meaning of the whole product (--functional computes it at
 * once); the others are timing only. */
static void emit_matmul_kparts(lower_ctx *c, int phase, int layer, int64_t m,
                               int64_t k, int64_t n, double ld_per_row,
                               double st_per_row, double w_bytes,
                               double acc_row_bytes, double epi_per_row,
                               int passes, const mm_plan *pl)
{
    int keep = c->fx;
    int64_t kp = pl->kparts, ks = cdiv(k, kp);
    double acc = acc_row_bytes; /* fp32 partial sums of every column */
    for (int64_t p = 0; p < kp; p++) {
        int64_t kslice = p < kp - 1 ? ks : k - ks * (kp - 1);
        if (kslice <= 0)
            break;
        double ld = ld_per_row * (double)kslice / (double)k + (p > 0 ? acc : 0);
        double st = p < kp - 1 ? acc : st_per_row;
        tiling t;
        matmul_tiles(m, pl->mt, kslice, n, pl->n_chunk, pl->nchunks, ld, st,
                     p < kp - 1 ? 0 : epi_per_row, passes,
                     w_bytes * (double)kslice / (double)k, &t);
        t.full.kparts = t.last.kparts = kp;
        c->fx = p == 0 ? keep : FX_NONE;
        emit_tiling(c, phase, layer, &t);
    }
    c->fx = keep;
}

/* The pricer's time for a product cut into K parts by plan pl (alone,
 * from idle, as tiling_ps prices one tiling); -1 out of memory. */
static double kparts_ps(lower_ctx *c, int64_t m, int64_t k, int64_t n,
                        double ld_per_row, double st_per_row, double w_bytes,
                        double acc_row_bytes, double epi_per_row, int passes,
                        const mm_plan *pl)
{
    fw_program *keep = c->prog;
    int keep_fx = c->fx;
    c->scratch.n = 0;
    c->prog = &c->scratch;
    emit_matmul_kparts(c, 0, -1, m, k, n, ld_per_row, st_per_row, w_bytes,
                       acc_row_bytes, epi_per_row, passes, pl);
    c->prog = keep;
    c->fx = keep_fx;
    if (c->scratch.oom) {
        c->scratch.oom = 0;
        return -1;
    }
    return (double)c->pricer->price(c->pricer->ctx, &c->scratch);
}

/* A tiled matrix product over M rows: per tile, load ld_per_row bytes a
 * row (+ weights once per chunk), multiply [mt, k] x [k, n], store
 * st_per_row. */
void tile_matmul(lower_ctx *c, int phase, int layer, int64_t m, int64_t k,
                 int64_t n, double ld_per_row, double st_per_row,
                 double w_bytes, double acc_row_bytes, double epi_per_row,
                 int passes)
{
    if (m <= 0 || k <= 0 || n <= 0)
        return;
    mm_plan pl = matmul_plan(c, c->hw->vmem_bytes, m, k, n, ld_per_row,
                             st_per_row, w_bytes, acc_row_bytes);
    if (pl.kparts > 1) {
        /* K parts too are chosen by the pricer among the budgets' plans
         * (each budget's largest tiles, ties keeping the larger): with
         * the largest tile alone, 20 MB of VMEM is slower than 16 MiB
         * where back-to-back products pay no fill per tile (UNet 256's
         * dec2_a_conv). */
        mm_plan best_pl = pl;
        double best =
            c->hw->xla_tile_search
                ? kparts_ps(c, m, k, n, ld_per_row, st_per_row, w_bytes,
                            acc_row_bytes, epi_per_row, passes, &pl)
                : -1;
        for (double v = c->hw->vmem_bytes, nb;
             best >= 0 && v > TILE_SEARCH_VMEM_FLOOR; v = nb) {
            nb = budget_below(v);
            mm_plan nx = matmul_plan(c, nb, m, k, n, ld_per_row, st_per_row,
                                     w_bytes, acc_row_bytes);
            double t = kparts_ps(c, m, k, n, ld_per_row, st_per_row, w_bytes,
                                 acc_row_bytes, epi_per_row, passes, &nx);
            if (t >= 0 && t < best) {
                best = t;
                best_pl = nx;
            }
        }
        emit_matmul_kparts(c, phase, layer, m, k, n, ld_per_row, st_per_row,
                           w_bytes, acc_row_bytes, epi_per_row, passes,
                           &best_pl);
        return;
    }
    tiling best_t;
    matmul_tiles(m, pl.mt, k, n, pl.n_chunk, pl.nchunks, ld_per_row, st_per_row,
                 epi_per_row, passes, w_bytes, &best_t);
    if (c->hw->xla_tile_search) {
        double best = tiling_ps(c, &best_t);
        for (double v = c->hw->vmem_bytes, nb; v > TILE_SEARCH_VMEM_FLOOR;
             v = nb) {
            nb = budget_below(v);
            mm_plan nx = matmul_plan(c, nb, m, k, n, ld_per_row, st_per_row,
                                     w_bytes, acc_row_bytes);
            if (nx.kparts > 1)
                break; /* smaller budgets only cut K more */
            int64_t here = cdiv(m, pl.mt), next = cdiv(m, nx.mt);
            /* equal tiles between this budget's count and the next's, in
             * this budget's N chunks and, when the next budget cuts N
             * finer, in its chunks too (rows that fit this budget with
             * wider chunks fit it with narrower ones: fewer weights and
             * accumulators resident), then the next budget's plan */
            int finer = nx.nchunks != pl.nchunks;
            for (int64_t g = finer ? here : next_tile_count(0, here, next);;
                 g = next_tile_count(g, here, next)) {
                mm_plan cand[2];
                int nc = 0;
                if (!g) {
                    if (nx.mt != pl.mt || finer)
                        cand[nc++] = nx;
                } else {
                    int64_t mt = g == here ? pl.mt : rup(cdiv(m, g), 8);
                    if (g != here) {
                        cand[nc] = pl;
                        cand[nc++].mt = mt;
                    }
                    if (finer) {
                        cand[nc] = nx;
                        cand[nc++].mt = mt;
                    }
                }
                for (int j = 0; j < nc; j++) {
                    tiling ct;
                    matmul_tiles(m, cand[j].mt, k, n, cand[j].n_chunk,
                                 cand[j].nchunks, ld_per_row, st_per_row,
                                 epi_per_row, passes, w_bytes, &ct);
                    keep_faster(c, &best, &ct, &best_t);
                }
                if (!g)
                    break;
            }
            pl = nx;
        }
    }
    emit_tiling(c, phase, layer, &best_t);
}

/* The slabs of a weight gradient's block of `rows` K rows: s positions a
 * slab.  Each slab loads the block's rows of X and every column of dY for
 * its positions; the MXU takes the dY slab as weight tiles and streams the
 * block's rows against them; the vector unit adds each 128-deep slice of
 * the products into the fp32 accumulators (and, with xla.bn_apply_fused,
 * normalises the X it loads).  The block's sums are stored at the end. */
static void dw_tiles(const lower_ctx *c, int64_t rows, int64_t K, int64_t M,
                     int64_t n, int64_t s, double x_b, double dy_b, double npad,
                     double apply, int passes, tiling *t)
{
    memset(t, 0, sizeof *t);
    t->nchunks = 1;
    t->first_only = 1;
    t->nt = cdiv(M, s);
    double per_pos = (x_b * (double)rows / (double)K + dy_b) / (double)M;
    double depth = (double)c->hw->mxu.rows;
    tile *f = &t->full, *l = &t->last;
    f->op = FW_MATMUL;
    f->passes = passes;
    f->a = rows;
    f->e = K;
    f->cc = n;
    f->b = s;
    f->ld = (int64_t)ceil(per_pos * (double)s);
    f->d = (int64_t)ceil((double)rows *
                         (npad * ceil((double)s / depth) + apply * (double)s));
    *l = *f;
    int64_t sl = M - s * (t->nt - 1);
    l->b = sl;
    l->ld = (int64_t)ceil(per_pos * (double)sl);
    l->d = (int64_t)ceil(
        (double)rows * (npad * ceil((double)sl / depth) + apply * (double)sl));
    l->st = (int64_t)ceil((double)rows * npad * 4);
}

/* The largest slab that fits a VMEM budget beside a block's accumulators:
 * X and dY slabs double-buffered, in whole 128-deep MXU weight tiles. */
static int64_t dw_slab(const lower_ctx *c, double vmem, int64_t rows, int64_t K,
                       int64_t M, double x_b, double dy_b, double npad)
{
    int64_t depth = c->hw->mxu.rows;
    double per_pos = (x_b * (double)rows / (double)K + dy_b) / (double)M;
    double room = vmem - (double)rows * npad * 4;
    int64_t s = per_pos > 0 ? (int64_t)(room / (2 * per_pos)) : M;
    s = s / depth * depth;
    if (s < depth)
        s = depth;
    return s < M ? s : M;
}

/* dW[K, n] = X^T dY: the reduction runs over the M positions.  The fp32
 * accumulators of a block of K rows stay in VMEM (within half of it, as a
 * forward product's resident weights do) while the positions stream
 * through in slabs (dw_tiles), the next slab loading while this one
 * computes.  Beyond half of VMEM the rows are cut into blocks, each
 * streaming every position of dY again (X's rows are each block's own).
 * The slab is chosen as tile_pass chooses its tiles. */
void tile_dw(lower_ctx *c, int phase, int layer, int64_t K, int64_t M,
             int64_t n, double x_b, double dy_b, double npad, double apply,
             int passes)
{
    if (K <= 0 || M <= 0 || n <= 0)
        return;
    double vmem = c->hw->vmem_bytes;
    double acc = (double)K * npad * 4;
    int64_t blocks = (int64_t)ceil(acc / (vmem / 2));
    if (blocks < 1)
        blocks = 1;
    if (blocks > cdiv(K, 8))
        blocks = cdiv(K, 8);
    int64_t kb = rup(cdiv(K, blocks), 8);
    for (int64_t r0 = 0; r0 < K; r0 += kb) {
        int64_t rows = K - r0 < kb ? K - r0 : kb;
        int64_t s = dw_slab(c, vmem, rows, K, M, x_b, dy_b, npad);
        tiling best_t;
        dw_tiles(c, rows, K, M, n, s, x_b, dy_b, npad, apply, passes, &best_t);
        if (c->hw->xla_tile_search) {
            double best = tiling_ps(c, &best_t);
            for (double v = vmem, nb; v > TILE_SEARCH_VMEM_FLOOR; v = nb) {
                nb = budget_below(v);
                int64_t sn = dw_slab(c, nb, rows, K, M, x_b, dy_b, npad);
                if (sn == s)
                    continue;
                tiling cand;
                dw_tiles(c, rows, K, M, n, sn, x_b, dy_b, npad, apply, passes,
                         &cand);
                keep_faster(c, &best, &cand, &best_t);
                s = sn;
            }
        }
        emit_tiling(c, phase, layer, &best_t);
    }
}
