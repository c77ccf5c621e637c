/* Lowering rules (docs/FIRMWARE.md has the same with the reasons):
 *
 * Layout.  HBM tensors are stored in (8, 128) tiles: the minor dimension is
 * padded to 128 lanes and the second-minor to 8 sublanes (Cloud TPU
 * performance guide).  Layout assignment picks channels or width as the
 * minor dimension, whichever pads less, so a 3-channel image is not
 * inflated 42x.
 *
 * Fusion (XLA "convolution fusion" / "loop fusion"; how much is fused on a
 * real TPU is [U]): bias and the batchnorm statistics are computed in the
 * producing convolution's epilogue; batchnorm's normalize is one streaming
 * pass, with a following relu fused into it; add + relu is one pass;
 * concat and flatten cost nothing (producers write into place).
 *
 * Training: forward; backward in reverse layer order (input gradient with
 * its own halo exchange, weight gradient accumulated in VMEM over M
 * tiles); the gradient all-reduce over all cores (weight gradients are
 * partial sums within a partition group and replicas' contributions across
 * groups: one all-reduce sums both); momentum-SGD update.  XLA does not
 * overlap the all-reduce with the backward pass in TPUEstimator's
 * CrossShardOptimizer, so neither does tpuemu.
 */
#include "firmware/lower.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "emu/result.h"

typedef struct {
    const graph *g;
    const plan *p;
    const tpu_params *hw;
    int shard;
    int coords[GRAPH_MAX_SP];
    fw_program *prog;
    double B;              /* examples per replica */
    int *nconsumers;       /* per layer */
    uint8_t *relu_fused;   /* relu layer fused into its producer's pass */
    uint8_t *remat;        /* activation recomputed in the backward pass */
    int *last_use;         /* per layer: its last consumer, -1 for none */
    double *ends;          /* account_memory's scratch, per layer */
    uint8_t *kept_for;     /* per layer: a consumer's backward reads it
                              (saved_for_backward; once per lowering, not
                              a scan per layer: 14,000 layers took
                              seconds, probe round 6) */
    int *apply_t;          /* xla.bn_apply_fused, per batchnorm: the layer
                              whose output is not stored (the batchnorm or
                              its fused relu), -1; NULL when the switch is
                              off (bn_apply_fused) */
    fw_memory *mem;
    int fx;                /* fx_kind stamped on compute instructions */
    const fw_pricer *pricer; /* prices candidate sequences (fw_lower) */
    fw_program scratch;    /* a candidate tile loop being priced */
    fw_program cand;       /* a grouped convolution's candidate lowering
                              being priced (its tile loops use scratch) */
} lc;

static int64_t rup(int64_t x, int64_t m) { return m > 0 ? (x + m - 1) / m * m : x; }
static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t floordiv(int64_t a, int64_t b)
{
    return a >= 0 ? a / b : -((-a + b - 1) / b);
}
static int64_t ceildiv(int64_t a, int64_t b) { return -floordiv(-a, b); }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* This shard's slice of layer l's output: extents (and offsets). */
static void local_out(const lc *c, int l, int64_t ext[GRAPH_MAX_SP],
                      int64_t off[GRAPH_MAX_SP])
{
    const gshape *s = &c->g->layers[l].out;
    for (int d = 0; d < GRAPH_MAX_SP; d++) {
        int64_t lo = 0, hi = 1;
        if (d < s->nsp)
            plan_range(c->p, c->g, l, d, c->coords[d], &lo, &hi);
        ext[d] = hi - lo;
        if (off)
            off[d] = lo;
    }
}

static int is_split(const lc *c, int l, int d)
{
    return c->p->split[l * GRAPH_MAX_SP + d] != 0;
}

static int any_split(const lc *c, int l)
{
    for (int d = 0; d < c->g->layers[l].out.nsp; d++)
        if (is_split(c, l, d))
            return 1;
    return 0;
}

/* Whether XLA's small-batch convolution layout applies (Cloud TPU TF
 * performance notes, tf.nn.conv_n_d; emu/params.c xla.conv_pad): the
 * module's most common convolution batch is below the threshold.  Forward
 * and input-gradient convolutions (two of every three) have the per-core
 * batch B as their batch, so B is the most common one. */
static int conv_small_batch(const lc *c)
{
    return c->hw->xla_conv_pad && c->B < c->hw->xla_conv_batch_threshold;
}

/* Examples a small-batch convolution really processes: batch padded to
 * the sublanes (8).  1 otherwise. */
static double conv_batch_scale(const lc *c)
{
    if (!conv_small_batch(c) || !c->hw->xla_conv_pad_batch || c->B <= 0)
        return 1;
    return (double)rup((int64_t)ceil(c->B), c->hw->sublane_pad) / c->B;
}

/* Bytes of a tensor of this shape in HBM, tiled layout, for B examples.
 * A spatial dimension of extent 1 takes no part in the (8, 128) tiling:
 * layout assignment is free to place a degenerate dimension major, so the
 * tiled pair is the channels and the innermost dimension longer than one
 * [U] (the hardware audit found a 1-column halo along W shipped padded to
 * 8 columns, 8x its bytes; a 33-row one along H is not). */
static double layout_bytes(const lc *c, int nsp, const int64_t ext[],
                           int64_t ch, int dtype)
{
    int64_t lane = c->hw->lane_pad, sub = c->hw->sublane_pad;
    int inner = nsp - 1;
    while (inner >= 0 && ext[inner] == 1)
        inner--;
    if (inner < 0) /* [B, C]: the batch is the second-minor dimension */
        return (double)rup((int64_t)c->B, sub) * (double)rup(ch, lane) * dtype;
    int64_t w = ext[inner];
    double minor = (double)min64(rup(ch, lane) * rup(w, sub),
                                 rup(w, lane) * rup(ch, sub));
    double rest = 1;
    for (int d = 0; d < nsp; d++)
        if (d != inner)
            rest *= (double)ext[d];
    return c->B * rest * minor * dtype;
}

static double out_bytes(const lc *c, int l)
{
    int64_t ext[GRAPH_MAX_SP];
    local_out(c, l, ext, NULL);
    const glayer *L = &c->g->layers[l];
    return layout_bytes(c, L->out.nsp, ext, L->out.c, L->dtype_bytes);
}

static double out_elems(const lc *c, int l)
{
    int64_t ext[GRAPH_MAX_SP];
    local_out(c, l, ext, NULL);
    const glayer *L = &c->g->layers[l];
    double e = c->B * (double)L->out.c;
    for (int d = 0; d < L->out.nsp; d++)
        e *= (double)ext[d];
    return e;
}

/* Whether layer l (an add or concat) takes a box out of input i: a
 * replicated operand meeting a split one (emu/plan.h), resharded by a
 * local slice. */
static int reshards(const lc *c, int l, int i)
{
    const glayer *L = &c->g->layers[l], *I = &c->g->layers[i];
    if ((L->op != GOP_ADD && L->op != GOP_CONCAT) || I->out.nsp != L->out.nsp)
        return 0;
    for (int d = 0; d < L->out.nsp; d++)
        if (is_split(c, l, d) && !is_split(c, i, d))
            return 1;
    return 0;
}

/* Bytes of input i that layer l reads: its shard, or the slice of l's box
 * out of a replicated operand (the dynamic-slice fuses into the add). */
static double operand_bytes(const lc *c, int l, int i)
{
    const glayer *I = &c->g->layers[i];
    if (!reshards(c, l, i))
        return out_bytes(c, i);
    int64_t ext[GRAPH_MAX_SP];
    local_out(c, l, ext, NULL);
    return layout_bytes(c, I->out.nsp, ext, I->out.c, I->dtype_bytes);
}

/* Fraction of layer l's output this core computes (1 when replicated). */
static double out_fraction(const lc *c, int l)
{
    const glayer *L = &c->g->layers[l];
    int64_t ext[GRAPH_MAX_SP];
    local_out(c, l, ext, NULL);
    double f = 1;
    for (int d = 0; d < L->out.nsp; d++)
        f *= (double)ext[d] / (double)L->out.sp[d];
    return f;
}

/* ---- emission helpers -------------------------------------------------- */

static void emit(lc *c, fw_op op, int phase, int layer, int64_t a, int64_t b,
                 int64_t cc, int64_t d)
{
    fw_emit(c->prog, op, phase, layer, a, b, cc, d);
}

static void emit_fx(lc *c, int fx, fw_op op, int phase, int layer, int64_t a,
                    int64_t b, int64_t cc, int64_t d)
{
    fw_emit(c->prog, op, phase, layer, a, b, cc, d);
    if (!c->prog->oom)
        c->prog->code[c->prog->n - 1].fx = (uint8_t)fx;
}

/* One tile's work: loads, one compute instruction, stores. */
typedef struct {
    int64_t ld, st;      /* bytes */
    fw_op op;            /* FW_MATMUL or FW_VEC */
    int64_t a, b, cc, d; /* operands of the compute instruction */
    int64_t e;
    int passes;
    int64_t kparts;
} tile;

static void emit_compute(lc *c, int phase, int layer, const tile *t)
{
    emit(c, t->op, phase, layer, t->a, t->b, t->cc, t->d);
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

static void emit_tile_body(lc *c, int phase, int layer, int64_t next_ld,
                           const tile *t)
{
    if (next_ld > 0) {
        emit(c, FW_DMA_LD, phase, layer, next_ld, 0, 0, 0);
        emit(c, FW_WAIT_LD, phase, layer, 1, 0, 0, 0);
    } else {
        emit(c, FW_WAIT_LD, phase, layer, 0, 0, 0, 0);
    }
    emit_compute(c, phase, layer, t);
    if (t->st > 0)
        emit(c, FW_DMA_ST, phase, layer, t->st, 0, 0, 0);
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
static void emit_tiling(lc *c, int phase, int layer, const tiling *t)
{
    int keep = c->fx;
    int64_t nt = t->nt < 1 ? 1 : t->nt;
    int64_t nch = t->nchunks < 1 ? 1 : t->nchunks;
    tile nfull = t->full, nlast = t->last;
    const tile *full = &t->full, *last = &t->last;
    int64_t first_ld = nt > 1 ? full->ld : last->ld;
    emit(c, FW_WAIT_ST, phase, layer, 0, 0, 0, 0);
    if (t->w_chunk > 0)
        emit(c, FW_DMA_LD, phase, layer, t->w_chunk, 0, 0, 0);
    if (first_ld > 0)
        emit(c, FW_DMA_LD, phase, layer, first_ld, 0, 0, 0);
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
                emit(c, FW_LOOP, phase, layer, loop, 0, 0, 0);
                emit_tile_body(c, phase, layer, full->ld, full);
                emit(c, FW_ENDLOOP, phase, layer, 0, 0, 0, 0);
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

static double tiling_ps(lc *c, const tiling *t);

/* The candidates: for each VMEM budget V, V/2, V/4 ... down to
 * TILE_SEARCH_VMEM_FLOOR, the largest tiles that fit that budget (the
 * choice a smaller VMEM would make), and between one budget's tile count
 * and the next, equal tiles in counts 2^j and 3 x 2^j (so the last tile is
 * not a sliver).  Every budget's candidates depend on that budget alone,
 * so doubling VMEM keeps every option and adds some: with the engine's own
 * costs the choice cannot get slower.  Below the floor, tiles stop paying
 * for their weight loads and fill. */
#define TILE_SEARCH_VMEM_FLOOR (256.0 * 1024)

/* Takes the candidate when the engine runs it strictly faster than the
 * best so far: ties keep the earlier candidate, which has the larger
 * tiles. */
static void keep_faster(lc *c, double *best, const tiling *cand,
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
 * power-of-two VMEM below it (40 MB keeps 32 MiB's tiles: probe round 5
 * found 40 MB slower than 32 MiB). */
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

/* A streaming vector pass: read in_bytes, write out_bytes, `ops` vector
 * operations per element over `elems` elements. */
static void emit_pass(lc *c, int phase, int layer, double in_bytes,
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
static void emit_pass_fx(lc *c, int fx, int phase, int layer, double in_bytes,
                         double out_b, double elems, double ops)
{
    int keep = c->fx;
    c->fx = fx;
    emit_pass(c, phase, layer, in_bytes, out_b, elems, ops);
    c->fx = keep;
}

/* ---- tile size ----------------------------------------------------------
 *
 * XLA's TPU backend chooses tile sizes with an analytical cost model ([C]
 * Kaufman et al., "A Learned Performance Model for Tensor Processing
 * Units", MLSys 2021: tile-size selection is one of the production cost
 * model's two tasks); what that model weighs is [U].  tpuemu's compiler
 * asks the machine it compiles for: each candidate's tile loop is priced
 * with the engine's own unit costs (emu/cost.h), so the choice is the one
 * the engine then finds fastest, up to the overlap with neighbouring
 * layers that a single loop does not see.  The largest tile that fits is
 * not always it: its first load and last store are not hidden behind
 * compute, and smaller tiles can balance the loop's last iteration.
 * `xla.tile_search=0` takes the largest tile (tpuemu before session 6). */

/* Duration (ps) of emit_tiling's instruction sequence run alone, as the
 * engine runs it (engine_local_ps: the same unit costs, DMA pipe and loop
 * rules), until its stores have landed, which is where the next layer
 * starts; a negative value when host memory ran out. */
static double tiling_ps(lc *c, const tiling *t)
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
                         double st_per_row,
                         double epi_per_row, int passes, double w_bytes,
                         tiling *t)
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

static mm_plan matmul_plan(const lc *c, double vmem, int64_t m, int64_t k,
                           int64_t n, double ld_per_row, double st_per_row,
                           double w_bytes, double acc_row_bytes)
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
            pl.kparts = (int64_t)ceil(per_col *
                                      (double)rup(pl.n_chunk, c->hw->lane_pad) /
                                      chunk);
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
static void emit_matmul_kparts(lc *c, int phase, int layer, int64_t m,
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
        double ld = ld_per_row * (double)kslice / (double)k +
                    (p > 0 ? acc : 0);
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

/* The engine's time for a product cut into K parts by plan pl (alone,
 * from idle, as tiling_ps prices one tiling); -1 out of memory. */
static double kparts_ps(lc *c, int64_t m, int64_t k, int64_t n,
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
static void emit_matmul(lc *c, int phase, int layer, int64_t m, int64_t k,
                        int64_t n, double ld_per_row, double st_per_row,
                        double w_bytes, double acc_row_bytes, double epi_per_row,
                        int passes)
{
    if (m <= 0 || k <= 0 || n <= 0)
        return;
    mm_plan pl = matmul_plan(c, c->hw->vmem_bytes, m, k, n, ld_per_row,
                             st_per_row, w_bytes, acc_row_bytes);
    if (pl.kparts > 1) {
        /* K parts too are chosen by the engine among the budgets' plans
         * (each budget's largest tiles, ties keeping the larger): the
         * largest tile alone made 20 MB of VMEM slower than 16 MiB once
         * back-to-back products stopped paying a fill per tile (probe
         * round 12, UNet 256's dec2_a_conv). */
        mm_plan best_pl = pl;
        double best = c->hw->xla_tile_search
                          ? kparts_ps(c, m, k, n, ld_per_row, st_per_row,
                                      w_bytes, acc_row_bytes, epi_per_row,
                                      passes, &pl)
                          : -1;
        for (double v = c->hw->vmem_bytes, nb; best >= 0 &&
                                               v > TILE_SEARCH_VMEM_FLOOR;
             v = nb) {
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
static void dw_tiles(const lc *c, int64_t rows, int64_t K, int64_t M,
                     int64_t n, int64_t s, double x_b, double dy_b,
                     double npad, double apply, int passes, tiling *t)
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
    f->d = (int64_t)ceil((double)rows * (npad * ceil((double)s / depth) +
                                         apply * (double)s));
    *l = *f;
    int64_t sl = M - s * (t->nt - 1);
    l->b = sl;
    l->ld = (int64_t)ceil(per_pos * (double)sl);
    l->d = (int64_t)ceil((double)rows * (npad * ceil((double)sl / depth) +
                                         apply * (double)sl));
    l->st = (int64_t)ceil((double)rows * npad * 4);
}

/* The largest slab that fits a VMEM budget beside a block's accumulators:
 * X and dY slabs double-buffered, in whole 128-deep MXU weight tiles. */
static int64_t dw_slab(const lc *c, double vmem, int64_t rows, int64_t K,
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
 * The slab is chosen as emit_pass chooses its tiles. */
static void emit_dw(lc *c, int phase, int layer, int64_t K, int64_t M,
                    int64_t n, double x_b, double dy_b, double npad,
                    double apply, int passes)
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

/* ---- windows and halos ------------------------------------------------- */

/* Layer L's window along dim d: kernel (or pooling window), stride and
 * dilation, 1 where unset. */
static void window_of(const glayer *L, int d, int64_t *k, int64_t *s,
                      int64_t *dil)
{
    *k = L->kernel[d] > 0 ? L->kernel[d] : 1;
    *s = L->strides[d] > 0 ? L->strides[d] : 1;
    *dil = L->dilation[d] > 0 ? L->dilation[d] : 1;
}

/* Clips [*lo, *hi) to [0, ext), empty rather than inverted. */
static void clip_range(int64_t ext, int64_t *lo, int64_t *hi)
{
    *lo = max64(*lo, 0);
    *hi = min64(*hi, ext);
    if (*hi < *lo)
        *hi = *lo;
}

/* The input rows [*lo, *hi) that output rows [o0, o1) of layer L need
 * along dim d (clipped to the input's extent). */
static void need_range(const glayer *L, const glayer *I, int d, int64_t o0,
                       int64_t o1, int64_t *lo, int64_t *hi)
{
    int64_t k, s, dil;
    window_of(L, d, &k, &s, &dil);
    switch (L->op) {
    case GOP_CONV:
    case GOP_MAXPOOL:
    case GOP_AVGPOOL:
        *lo = o0 * s - L->pad_lo[d];
        *hi = (o1 - 1) * s - L->pad_lo[d] + (k - 1) * dil + 1;
        break;
    case GOP_CONV_T:
        /* out[o] reads the stride-dilated input at o - pad_lo + t*dil. */
        *lo = ceildiv(o0 - L->pad_lo[d], s);
        *hi = floordiv(o1 - 1 - L->pad_lo[d] + (k - 1) * dil, s) + 1;
        break;
    case GOP_UPSAMPLE: {
        int64_t f = L->factor[d] > 0 ? L->factor[d] : 1;
        *lo = o0 / f;
        *hi = (o1 - 1) / f + 1;
        break;
    }
    default:
        *lo = o0;
        *hi = o1;
    }
    clip_range(I->out.sp[d], lo, hi);
}

/* The output rows [*lo, *hi) of layer L whose windows touch input rows
 * [i0, i1) along dim d: what the input gradient of those rows reads. */
static void grad_need_range(const glayer *L, int d, int64_t i0, int64_t i1,
                            int64_t *lo, int64_t *hi)
{
    int64_t k, s, dil;
    window_of(L, d, &k, &s, &dil);
    switch (L->op) {
    case GOP_CONV:
    case GOP_MAXPOOL:
    case GOP_AVGPOOL:
        *lo = ceildiv(i0 + L->pad_lo[d] - (k - 1) * dil, s);
        *hi = floordiv(i1 - 1 + L->pad_lo[d], s) + 1;
        break;
    case GOP_CONV_T:
        *lo = i0 * s + L->pad_lo[d] - (k - 1) * dil;
        *hi = (i1 - 1) * s + L->pad_lo[d] + 1;
        break;
    case GOP_UPSAMPLE: {
        int64_t f = L->factor[d] > 0 ? L->factor[d] : 1;
        *lo = i0 * f;
        *hi = i1 * f;
        break;
    }
    default:
        *lo = i0;
        *hi = i1;
    }
    clip_range(L->out.sp[d], lo, hi);
}

/* For layer l reading input layer i: the halo rows this shard receives
 * along each split dimension, and whether the input must be gathered
 * whole instead (output replicated, or a window wider than a neighbour). */
typedef struct {
    int64_t from_lo[GRAPH_MAX_SP], from_hi[GRAPH_MAX_SP];
    int64_t in_ext[GRAPH_MAX_SP]; /* local input extents incl. halos */
    int gather;
} halo_t;

/* Whether rows [nlo, nhi) of `layer` along d lie within shard cd's rows
 * and its two neighbours': a halo exchange reaches no further, anything
 * else is gathered.  Ranges are contiguous, so the three shards hold
 * [lo(cd-1), hi(cd+1)); a short or empty trailing shard narrows it. */
static int neighbours_hold(const lc *c, int layer, int d, int cd,
                           int64_t nlo, int64_t nhi)
{
    int f = c->p->factor[d];
    int64_t lo, hi, unused;
    if (nhi <= nlo)
        return 1;
    plan_range(c->p, c->g, layer, d, cd > 0 ? cd - 1 : cd, &lo, &unused);
    plan_range(c->p, c->g, layer, d, cd + 1 < f ? cd + 1 : cd, &unused, &hi);
    return nlo >= lo && nhi <= hi;
}

static void halo_of_shard(const lc *c, int l, int i, const int *coords,
                          halo_t *h)
{
    const glayer *L = &c->g->layers[l], *I = &c->g->layers[i];
    memset(h, 0, sizeof *h);
    for (int d = 0; d < GRAPH_MAX_SP; d++)
        h->in_ext[d] = 1;
    if (I->out.nsp == 0)
        return;
    int same_rank = L->out.nsp == I->out.nsp;
    for (int d = 0; d < I->out.nsp; d++) {
        int64_t ilo, ihi, olo, ohi;
        plan_range(c->p, c->g, i, d, coords[d], &ilo, &ihi);
        h->in_ext[d] = ihi - ilo;
        if (!same_rank) {
            /* flatten of a split tensor gathers it; global pooling and a
             * loss reduce their own shard and all-reduce the result */
            if (is_split(c, i, d) && L->op != GOP_GAP && L->op != GOP_LOSS)
                h->gather = 1;
            continue;
        }
        if (!is_split(c, i, d))
            continue;
        if (!is_split(c, l, d)) {
            h->gather = 1;
            continue;
        }
        plan_range(c->p, c->g, l, d, coords[d], &olo, &ohi);
        int64_t nlo = ilo, nhi = ilo; /* an empty output shard needs nothing */
        if (ohi > olo)
            need_range(L, I, d, olo, ohi, &nlo, &nhi);
        if (nhi <= nlo)
            nlo = nhi = ilo;
        h->from_lo[d] = max64(0, ilo - nlo);
        h->from_hi[d] = max64(0, nhi - ihi);
        if (!neighbours_hold(c, i, d, coords[d], nlo, nhi))
            h->gather = 1;
        h->in_ext[d] += h->from_lo[d] + h->from_hi[d];
    }
}

/* The shards' coordinates that decide a group-wide question, one at a
 * time (idx from 0 until it returns 0): every value along one axis with
 * the others at 0.  A shard's halo along dimension d depends on its
 * coordinate along d alone, so whether any shard gathers or exchanges is
 * decided by these sum-of-the-factors shards as by all product-of-the-
 * factors ones (probe round 6: 1024 cores per replica made the lowering
 * quadratic in the cores, 53 s a step). */
static int axis_coords(const lc *c, int idx, int co[GRAPH_MAX_SP])
{
    for (int d = 0; d < GRAPH_MAX_SP; d++)
        co[d] = 0;
    for (int d = 0; d < GRAPH_MAX_SP && d < c->p->nsp; d++) {
        int f = c->p->factor[d] > 0 ? c->p->factor[d] : 1;
        if (idx < f) {
            co[d] = idx;
            return 1;
        }
        idx -= f;
    }
    return idx == 0; /* no split dimension: the one shard */
}

/* The exchange is one collective for the whole partition group, so
 * whether it happens (and whether it is a gather) is decided over all
 * shards; the amounts are this shard's. */
static void halo_of(const lc *c, int l, int i, halo_t *h)
{
    halo_of_shard(c, l, i, c->coords, h);
    int gather = h->gather;
    int co[GRAPH_MAX_SP];
    for (int k = 0; !gather && axis_coords(c, k, co); k++) {
        halo_t o;
        halo_of_shard(c, l, i, co, &o);
        gather |= o.gather;
    }
    if (gather && !h->gather) {
        const glayer *I = &c->g->layers[i];
        h->gather = 1;
        for (int d = 0; d < I->out.nsp; d++)
            h->from_lo[d] = h->from_hi[d] = 0;
    }
    if (h->gather) {
        const glayer *I = &c->g->layers[i];
        for (int d = 0; d < I->out.nsp; d++) {
            h->in_ext[d] = I->out.sp[d];
            h->from_lo[d] = h->from_hi[d] = 0;
        }
    }
}

/* Backward: the rows of layer l's output gradient this shard receives to
 * compute the gradient of its slice of input i; a gather when the input
 * is replicated along a dimension the output splits (every core then
 * needs every output row) or a halo is wider than a neighbour's shard. */
static void bwd_halo_of_shard(const lc *c, int l, int i, const int *coords,
                              halo_t *h)
{
    const glayer *L = &c->g->layers[l], *I = &c->g->layers[i];
    memset(h, 0, sizeof *h);
    for (int d = 0; d < GRAPH_MAX_SP; d++)
        h->in_ext[d] = 1;
    if (L->out.nsp == 0 || I->out.nsp != L->out.nsp)
        return;
    for (int d = 0; d < L->out.nsp; d++) {
        int64_t ilo, ihi, olo, ohi, nlo, nhi;
        plan_range(c->p, c->g, l, d, coords[d], &olo, &ohi);
        h->in_ext[d] = ohi - olo;
        if (!is_split(c, l, d))
            continue;
        if (!is_split(c, i, d)) {
            h->gather = 1;
            continue;
        }
        plan_range(c->p, c->g, i, d, coords[d], &ilo, &ihi);
        nlo = nhi = olo; /* an empty input shard needs no gradient */
        if (ihi > ilo)
            grad_need_range(L, d, ilo, ihi, &nlo, &nhi);
        if (nhi <= nlo)
            nlo = nhi = olo;
        h->from_lo[d] = max64(0, olo - nlo);
        h->from_hi[d] = max64(0, nhi - ohi);
        if (!neighbours_hold(c, l, d, coords[d], nlo, nhi))
            h->gather = 1;
        h->in_ext[d] += h->from_lo[d] + h->from_hi[d];
    }
}

/* Group-wide, as halo_of; returns whether anything is exchanged. */
static int bwd_halo_of(const lc *c, int l, int i, halo_t *h)
{
    const glayer *L = &c->g->layers[l];
    int any = 0, gather = 0;
    bwd_halo_of_shard(c, l, i, c->coords, h);
    int co[GRAPH_MAX_SP];
    for (int k = 0; axis_coords(c, k, co); k++) {
        halo_t o;
        bwd_halo_of_shard(c, l, i, co, &o);
        gather |= o.gather;
        for (int d = 0; d < GRAPH_MAX_SP; d++)
            any |= o.from_lo[d] || o.from_hi[d];
    }
    if (gather) {
        h->gather = 1;
        for (int d = 0; d < L->out.nsp; d++) {
            h->in_ext[d] = L->out.sp[d];
            h->from_lo[d] = h->from_hi[d] = 0;
        }
    }
    return any || gather;
}

/* Max pooling's backward also needs the input rows of the windows of the
 * output rows it receives (to find each window's maximum): the input
 * exchanged again, as far as those windows reach. */
static void pool_bwd_shard(const lc *c, int l, int i, const int *co,
                           halo_t *h)
{
    const glayer *L = &c->g->layers[l], *I = &c->g->layers[i];
    memset(h, 0, sizeof *h);
    for (int d = 0; d < I->out.nsp; d++) {
        if (!is_split(c, i, d))
            continue;
        if (!is_split(c, l, d)) {
            h->gather = 1;
            continue;
        }
        int64_t ilo, ihi, nlo, nhi, alo, ahi;
        plan_range(c->p, c->g, i, d, co[d], &ilo, &ihi);
        alo = ahi = ilo; /* an empty shard needs nothing */
        if (ihi > ilo) {
            grad_need_range(L, d, ilo, ihi, &nlo, &nhi);
            if (nhi > nlo)
                need_range(L, I, d, nlo, nhi, &alo, &ahi);
        }
        if (ahi <= alo)
            alo = ahi = ilo;
        h->from_lo[d] = max64(0, ilo - alo);
        h->from_hi[d] = max64(0, ahi - ihi);
        if (!neighbours_hold(c, i, d, co[d], alo, ahi))
            h->gather = 1;
    }
}

static int pool_bwd_input_halo_of(const lc *c, int l, int i, halo_t *out)
{
    int any = 0, gather = 0, co[GRAPH_MAX_SP];
    for (int k = 0; axis_coords(c, k, co); k++) {
        halo_t h;
        pool_bwd_shard(c, l, i, co, &h);
        gather |= h.gather;
        for (int d = 0; d < GRAPH_MAX_SP; d++)
            any |= h.from_lo[d] || h.from_hi[d];
    }
    pool_bwd_shard(c, l, i, c->coords, out);
    out->gather = gather;
    if (gather)
        for (int d = 0; d < GRAPH_MAX_SP; d++)
            out->from_lo[d] = out->from_hi[d] = 0;
    return any || gather;
}

/* Whether layer l exchanges anything for input i: any split dimension the
 * output keeps split and whose window reaches past a shard, on any shard. */
static int halo_needed(const lc *c, int l, int i)
{
    int co[GRAPH_MAX_SP];
    for (int k = 0; axis_coords(c, k, co); k++) {
        halo_t o;
        halo_of_shard(c, l, i, co, &o);
        if (o.gather)
            return 1;
        for (int d = 0; d < GRAPH_MAX_SP; d++)
            if (o.from_lo[d] || o.from_hi[d])
                return 1;
    }
    return 0;
}

/* Whether XLA masks the haloed buffer along split dimension d
 * (ExchangeHaloAndGetValidData, mask_invalid_region): when the window pads
 * the full shape there, or the split is uneven.  The input gradient's
 * window is the transposed one, padded wherever the kernel is wider than
 * one.  The weight gradient's exchange is unmasked (backward == 2) except
 * for uneven shards (PadWithZero). */
static int halo_masked(const lc *c, const glayer *L, const glayer *I, int d,
                       int backward)
{
    if (I->out.sp[d] % c->p->factor[d] != 0)
        return 1;
    if (backward == 2)
        return 0;
    if (backward == 1)
        return L->kernel[d] > 1;
    return L->pad_lo[d] > 0 || L->pad_hi[d] > 0;
}

/* The HBM passes XLA's ExchangeHaloAndGetValidData makes for one split
 * dimension once its halos have arrived: a concatenate of the halos and
 * the shard (xla.halo_copy), and the select that masks the window's
 * padding.  Fused (xla.halo_fused, [U]) they are one pass; unfused, the
 * mask is a second read and write of the same buffer.  `ext` holds the
 * extents after this dimension's halos were added. */
static void emit_reshard_passes(lc *c, int phase, int l, const glayer *I,
                                const int64_t ext[], int64_t ch, int masked)
{
    if (!c->hw->xla_halo_copy)
        return;
    double bytes = layout_bytes(c, I->out.nsp, ext, ch, I->dtype_bytes);
    double elems = c->B * (double)ch;
    for (int d = 0; d < I->out.nsp; d++)
        elems *= (double)ext[d];
    int npass = 1 + (masked && !c->hw->xla_halo_fused);
    for (int k = 0; k < npass; k++)
        emit_pass_fx(c, FX_NONE, phase, l, bytes, bytes, elems, k == 0 ? 1 : 3);
}

/* Emits the exchange for input i of layer l: of the input itself
 * (forward, backward == 0), of layer l's output gradient (backward == 1;
 * h from bwd_halo_of), or of the input again for the weight gradient
 * (backward == 2).  Every shard of the group emits the same collectives;
 * they carry the fx tag of the product that reads what they bring. */
static void emit_exchange(lc *c, int phase, int l, int i, const halo_t *h,
                          int backward)
{
    const glayer *L = &c->g->layers[l], *I = &c->g->layers[i];
    int t = backward == 1 ? l : i; /* the tensor that travels */
    const glayer *T = &c->g->layers[t];
    int fx = backward == 1 ? FX_DX : backward == 2 ? FX_DW : FX_FWD;
    if (h->gather) {
        double full = layout_bytes(c, T->out.nsp, T->out.sp, T->out.c,
                                   T->dtype_bytes);
        emit_fx(c, fx, FW_ALLGATHER, phase, l, (int64_t)ceil(full), 0, 0, 0);
        return;
    }
    /* Dimension by dimension, each exchange carrying the halos of the
     * dimensions exchanged before it (corners travel in two hops, as in
     * XLA's ExchangeHalo). */
    int64_t ext[GRAPH_MAX_SP];
    local_out(c, t, ext, NULL);
    for (int d = 0; d < T->out.nsp; d++) {
        if (!is_split(c, i, d) || !is_split(c, l, d))
            continue;
        int64_t rl = h->from_lo[d], rh = h->from_hi[d];
        int64_t row[GRAPH_MAX_SP];
        memcpy(row, ext, sizeof row);
        row[d] = 1;
        double rb = layout_bytes(c, T->out.nsp, row, T->out.c, T->dtype_bytes);
        emit_fx(c, fx, FW_HALO, phase, l, d, (int64_t)ceil(rb * (double)rl),
                (int64_t)ceil(rb * (double)rh), rl * ((int64_t)1 << 32) + rh);
        ext[d] += rl + rh;
        int masked = halo_masked(c, L, I, d, backward);
        if (rl + rh > 0 || masked)
            emit_reshard_passes(c, phase, l, T, ext, T->out.c, masked);
    }
}

/* The weight gradient's own exchange of the layer's input: XLA partitions
 * the weight-gradient convolution (both operands split spatially) with
 * PartitionConvolutionWithSpatialDimensionHaloExchangeOnLHS, which sends
 * the activation's halos again, concatenated per dimension, unmasked
 * (openxla/xla spmd/convolution_handler.cc; xla.dw_halo).  A window too
 * wide for the neighbours is all-gathered again, as the forward pass did:
 * only the shard is saved for the backward pass (probe round 12: the
 * product read the forward's gathered window, which nothing kept). */
static void emit_dw_exchange(lc *c, int l, int i, const halo_t *h)
{
    if (!c->hw->xla_dw_halo || !halo_needed(c, l, i))
        return;
    emit_exchange(c, PHASE_BWD, l, i, h, 2);
}


/* ---- per-op lowering --------------------------------------------------- */

/* A convolution in XLA's small-batch layout contracts each tap over the
 * input features padded to the lanes (128): the taps stay separate K
 * slices (no im2col folding; tpuemu's fold rule applies otherwise). */
static int conv_keeps_taps(const lc *c, const glayer *L)
{
    return conv_small_batch(c) && (L->op == GOP_CONV || L->op == GOP_CONV_T);
}

/* Rows (M) a matrix layer streams per real row: the padded batch of a
 * small-batch convolution. */
static double conv_rows_scale(const lc *c, const glayer *L)
{
    return conv_keeps_taps(c, L) ? conv_batch_scale(c) : 1;
}

static int passes_of(const glayer *L)
{
    /* [U] an f32 matrix product runs as 3 bf16 passes (bf16_3x, as XLA's
     * default precision for f32 on TPU v2/v3 "HIGH"). */
    return L->dtype_bytes == 4 ? 3 : 1;
}

static double fused_apply_ops(const lc *c, int i);

/* ---- grouped convolutions ----------------------------------------------
 *
 * How the TPU compiler lowers feature_group_count > 1 is not public [U].
 * XLA's ConvolutionGroupConverter (openxla/xla
 * convolution_group_converter.cc) rewrites it into ordinary convolutions,
 * either by expanding the filter into a dense block-diagonal one (zeros
 * outside the groups: one convolution, G x the MACs) or by slicing the
 * operands into one convolution per group; a backend that handles
 * depthwise convolutions itself keeps them, and with a single channel per
 * group there is too little reuse for the MXU, so the vector unit is the
 * natural place.  tpuemu prices each candidate's instructions with the
 * engine (engine_local_ps, as the tile search does) and keeps the fastest;
 * xla.group_conv forces one:
 *   FW_GC_DENSE (1) the expanded filter on the MXU: K = taps x Cin, N =
 *             filters, the block-diagonal filter built (and, for the
 *             weight gradient, the blocks taken back out) by a vector pass;
 *   FW_GC_GROUPS (2) one product per group, laid end to end on the MXU: K =
 *             taps x Cin/G, N = filters/G, each padded to whole MXU tiles
 *             (a group's M rows stream against its own weight tiles, whose
 *             load hides behind the previous group's rows);
 *   FW_GC_VECTOR (3) depthwise only (Cin/G = 1): a vector-unit pass of taps
 *             multiply-adds per output element (vpu.madd_ops each).
 * Forward, input gradient and weight gradient choose separately.  The
 * halo exchanges are the window's, as for any convolution, and are
 * emitted once, outside the candidates. */

typedef struct {
    int l, i;
    int64_t G, taps, k_taps, sprod, cin, cout, cin_g, cout_g;
    int64_t M, Min;        /* forward / input-gradient rows (padded batch) */
    double m_rows, in_rows;/* the same, per real row: elements of a channel */
    double in_b, o_b, in_nohalo, apply, wbytes_el, scale;
    int passes;
} gconv;

/* A product's K over `taps` kernel taps of `ch` features each (the
 * input's for the forward product, dY's for the input gradient): each
 * tap's features padded to the lanes, or the taps folded into K (im2col)
 * when that needs fewer passes of the array's depth and the small-batch
 * layout does not keep them apart.  *fold says which. */
static int64_t tap_k(const lc *c, const glayer *L, int64_t taps, int64_t ch,
                     int *fold)
{
    int64_t lane = c->hw->lane_pad, rows = c->hw->mxu.rows;
    int64_t unf = taps * rup(ch, lane);
    *fold = cdiv(taps * ch, rows) < cdiv(unf, rows) && !conv_keeps_taps(c, L);
    return *fold ? taps * ch : unf;
}

/* One candidate's compute for one part (0 forward, 1 input gradient, 2
 * weight gradient) into c->prog, with the functional tag of the part. */
static void gc_emit_body(lc *c, int phase, const gconv *q, int part, int cand);

/* gc_emit_body, its instructions marked with the candidate (fw_insn.gconv:
 * --functional reads the products' layout from it; the timing does not). */
static void gc_emit(lc *c, int phase, const gconv *q, int part, int cand)
{
    size_t from = c->prog->n;
    gc_emit_body(c, phase, q, part, cand);
    if (!c->prog->oom)
        for (size_t k = from; k < c->prog->n; k++)
            c->prog->code[k].gconv = (uint8_t)cand;
}

static void gc_emit_body(lc *c, int phase, const gconv *q, int part, int cand)
{
    const glayer *L = &c->g->layers[q->l];
    int64_t lane = c->hw->lane_pad, rows = c->hw->mxu.rows;
    int fx = part == 0 ? FX_FWD : part == 1 ? FX_DX : FX_DW;
    double wcompact = (double)L->weights * q->wbytes_el;
    if (cand == FW_GC_VECTOR) {
        /* Elements the vector unit produces: the output (forward, weight
         * gradient's products) or the input gradient, counted as every
         * other vector pass counts them (out_elems: the stored layout's
         * elements).  The small-batch rule pads a convolution's MXU
         * operands (batch to 8, each tap's features to the lanes); applied
         * here it made a 3-channel depthwise stem at one example per core
         * 341x its elements, while the batchnorm beside it paid for 3
         * (probe round 11). */
        int64_t ch = part == 1 ? q->cin : q->cout;
        double rws = part == 1 ? q->in_rows : q->m_rows;
        double el = rws * (double)ch;
        double mult = (double)(q->cout / q->G); /* outputs per input channel */
        double madd = c->hw->vpu_madd_ops;
        if (part == 0)
            emit_pass_fx(c, fx, phase, q->l, q->in_b, q->o_b, el,
                         madd * (double)q->taps + 3 +
                             q->apply * (double)q->taps);
        else if (part == 1)
            /* an input element takes its stride phase's taps: taps / s^d
             * on average (a 1x1 stride-2 phase has one or none) */
            emit_pass_fx(c, fx, phase, q->l, q->o_b, q->in_nohalo, el,
                         madd * (double)q->taps / (double)q->sprod * mult +
                             1);
        else
            /* dW[t, c] += x(window) dY: taps multiply-adds per output
             * element into fp32 partial sums, reduced and stored once */
            emit_pass_fx(c, fx, phase, q->l, q->in_b + q->o_b,
                         (double)L->weights * 4, el,
                         madd * (double)q->taps + q->apply * (double)q->taps);
        return;
    }
    int keep = c->fx;
    if (cand == FW_GC_DENSE) {
        int fold;
        double dense_w = (double)q->taps * (double)q->cin * (double)q->cout;
        if (part == 0) {
            int64_t K = tap_k(c, L, q->k_taps, q->cin, &fold);
            double npad = (double)rup(q->cout, lane);
            double epi = npad * ((double)cdiv(K, rows) - 1 + 3) +
                         (fold ? (double)K : 0) + q->apply * (double)K;
            /* the block-diagonal filter: a select of the compact filter
             * against the group mask (timing only) */
            emit_pass_fx(c, FX_NONE, phase, q->l, wcompact,
                         dense_w * q->wbytes_el, dense_w, 1);
            c->fx = fx;
            emit_matmul(c, phase, q->l, q->M, K, q->cout, q->in_b / (double)q->M,
                        q->o_b / (double)q->M,
                        (double)q->taps * (double)q->cin * npad * q->wbytes_el,
                        npad * 4, epi, q->passes);
        } else if (part == 1) {
            /* stride phases as the ordinary input gradient's
             * (lower_matrix_layer) */
            int64_t Mdx = cdiv(q->Min, q->sprod);
            int64_t Kdx = tap_k(c, L, q->taps, q->cout, &fold);
            double ep = (double)rup(q->cin, lane) * ((double)cdiv(Kdx, rows) + 1) +
                        (fold ? (double)Kdx : 0);
            emit_pass_fx(c, FX_NONE, phase, q->l, wcompact,
                         dense_w * q->wbytes_el, dense_w, 1);
            c->fx = fx;
            emit_matmul(c, phase, q->l, Mdx, Kdx, q->cin,
                        q->o_b / (double)Mdx, q->in_nohalo / (double)Mdx,
                        (double)q->taps * (double)q->cin *
                            (double)rup(q->cout, lane) * q->wbytes_el,
                        (double)rup(q->cin, lane) * 4, ep, q->passes);
        } else {
            int64_t K = tap_k(c, L, q->k_taps, q->cin, &fold);
            c->fx = fx;
            emit_dw(c, phase, q->l, K, q->M, q->cout, q->in_b, q->o_b,
                    (double)rup(q->cout, lane), q->apply, q->passes);
            c->fx = FX_NONE;
            /* the groups' blocks taken out of the dense fp32 gradient */
            emit_pass_fx(c, FX_NONE, phase, q->l, dense_w * 4,
                         (double)L->weights * 4, dense_w, 1);
        }
        c->fx = keep;
        return;
    }
    /* FW_GC_GROUPS: G products of one group's shape, end to end: G x the
     * rows (at least the array's rows each: a shorter group leaves the
     * array's pipeline as idle as a full tile would).  One group's weights
     * are resident at a time; the others' stream in with the rows, each
     * group's while the previous group's rows go through.  (With every
     * group's weights counted as one resident block, the VMEM planner cut
     * a 2^15-group product of N = 2 into 8-row tiles and K parts, 17x the
     * cost per channel of 2^14 groups: probe round 11.) */
    int fold;
    int64_t G = q->G;
    c->fx = fx;
    if (part == 0) {
        int64_t K = tap_k(c, L, q->k_taps, q->cin_g, &fold);
        int64_t m = G * max64(q->M, rows);
        double npad = (double)rup(q->cout_g, lane);
        double epi = (double)q->M * G *
                     (npad * ((double)cdiv(K, rows) - 1 + 3) +
                      (fold ? (double)K : 0) + q->apply * (double)K);
        double gw = (double)q->taps * (double)q->cin_g * npad * q->wbytes_el;
        emit_matmul(c, phase, q->l, m, K, q->cout_g,
                    (q->in_b + (double)(G - 1) * gw) / (double)m,
                    q->o_b / (double)m, gw, npad * 4, epi / (double)m,
                    q->passes);
    } else if (part == 1) {
        int64_t Mdx = cdiv(q->Min, q->sprod);
        int64_t Kdx = tap_k(c, L, q->taps, q->cout_g, &fold);
        int64_t m = G * max64(Mdx, rows);
        double ep = (double)Mdx * G *
                    ((double)rup(q->cin_g, lane) * ((double)cdiv(Kdx, rows) + 1) +
                     (fold ? (double)Kdx : 0));
        double gw = (double)q->taps * (double)q->cin_g *
                    (double)rup(q->cout_g, lane) * q->wbytes_el;
        emit_matmul(c, phase, q->l, m, Kdx, q->cin_g,
                    (q->o_b + (double)(G - 1) * gw) / (double)m,
                    q->in_nohalo / (double)m, gw,
                    (double)rup(q->cin_g, lane) * 4, ep / (double)m, q->passes);
    } else {
        int64_t K = tap_k(c, L, q->k_taps, q->cin_g, &fold);
        emit_dw(c, phase, q->l, G * K, q->M, q->cout_g, q->in_b, q->o_b,
                (double)rup(q->cout_g, lane), q->apply, q->passes);
    }
    c->fx = keep;
}

/* The candidate a part takes: the forced one (xla.group_conv; the vector
 * pass only where a group has one channel, else the fastest of the MXU
 * ones), or the one the engine runs fastest, ties to the lower number. */
static int gc_pick(lc *c, int phase, const gconv *q, int part)
{
    int forced = c->hw->xla_group_conv, vec_ok = q->cin_g == 1;
    if (forced == FW_GC_DENSE || forced == FW_GC_GROUPS ||
        (forced == FW_GC_VECTOR && vec_ok))
        return forced;
    int best = FW_GC_DENSE;
    double best_ps = -1;
    for (int cand = FW_GC_DENSE; cand <= FW_GC_VECTOR; cand++) {
        if (cand == FW_GC_VECTOR && !vec_ok)
            continue;
        fw_program *keep = c->prog;
        c->cand.n = 0;
        c->prog = &c->cand;
        gc_emit(c, phase, q, part, cand);
        c->prog = keep;
        if (c->cand.oom) {
            c->cand.oom = 0;
            continue;
        }
        double ps = (double)c->pricer->price(c->pricer->ctx, &c->cand);
        if (best_ps < 0 || ps < best_ps) {
            best_ps = ps;
            best = cand;
        }
    }
    return best;
}

/* Conv, conv_transpose and dense: forward (phase FWD) or the two backward
 * products. */
static void lower_matrix_layer(lc *c, int l, int phase)
{
    const glayer *L = &c->g->layers[l];
    int i = L->in[0];
    const glayer *I = &c->g->layers[i];
    int rows = c->hw->mxu.rows;
    int64_t taps = 1, sprod = 1;
    int nsp = L->op == GOP_DENSE ? 0 : L->out.nsp;
    for (int d = 0; d < nsp; d++) {
        taps *= L->kernel[d];
        sprod *= L->strides[d] > 0 ? L->strides[d] : 1;
    }
    int64_t cin = I->out.c, cout = L->out.c;
    halo_t h;
    halo_of(c, l, i, &h);
    double m_out = out_elems(c, l) / (double)cout; /* B x local positions */
    double in_b = layout_bytes(c, I->out.nsp, h.in_ext, cin, I->dtype_bytes);
    double o_b = out_bytes(c, l);
    int passes = passes_of(L);
    /* Dense on a flat tensor: positions = 1. */
    if (L->op == GOP_DENSE && I->out.nsp > 0 && L->out.nsp > 0)
        nsp = 0; /* Keras Dense on the channel dim: a 1x1 conv */
    /* K: each tap's features padded to the lanes (the layout's minor
     * dimension: 128 on v2/v3, the performance guide's "features to 128"),
     * or taps folded into K (im2col) when that needs fewer passes of the
     * array's depth.  The padding is the layout's, not the array's: with a
     * deeper array (--set mxu.rows=256) a 128-channel tap stays 128 deep
     * and two taps share a pass (probe round 7: padding to the depth made
     * a 256x256 array slower than 128x128 on a 3x3 convolution). */
    int64_t lane = c->hw->lane_pad;
    int64_t k_taps = L->op == GOP_CONV_T ? cdiv(taps, sprod) : taps;
    int fold;
    int64_t K = tap_k(c, L, k_taps, cin, &fold);
    /* Weights as the MXU reads them: bf16, or for an f32 layer the fp32
     * values its three bf16 passes split (audit: an f32 convolution read
     * 2 bytes a weight). */
    double w_bytes = (double)taps * (double)cin * (double)rup(cout, lane) *
                     (L->dtype_bytes == 4 ? 4 : 2);
    int64_t M = (int64_t)llround(m_out * conv_rows_scale(c, L));
    if (conv_keeps_taps(c, L)) {
        c->mem->small_batch = c->B;
        c->mem->small_batch_padded = c->B * conv_batch_scale(c);
    }
    double ktiles = (double)cdiv(K, rows);
    /* output columns the vector unit and the accumulators hold: the
     * lanes', not the array's (a wider array's extra columns are idle) */
    double npad = (double)rup(cout, lane);
    double epi = npad * (ktiles - 1 + 3); /* K-slice sums, bias, BN stats */
    if (fold)
        epi += (double)K; /* im2col shuffle on the vector unit */
    /* xla.bn_apply_fused: the operand's normalise is applied as each K
     * slice is loaded, once per tap (the taps are separate loads of
     * overlapping windows): vector work beside the MXU's, not a pass. */
    double apply = fused_apply_ops(c, i);
    epi += apply * (double)K;

    /* A grouped convolution's candidates (gc_emit) */
    int64_t G = graph_groups(L);
    gconv q;
    memset(&q, 0, sizeof q);
    if (G > 1) {
        q.l = l;
        q.i = i;
        q.G = G;
        q.taps = taps;
        q.k_taps = k_taps;
        q.sprod = L->op == GOP_CONV ? sprod : 1;
        q.cin = cin;
        q.cout = cout;
        q.cin_g = cin / G;
        q.cout_g = cout / G;
        q.M = M;
        q.m_rows = m_out;
        q.scale = conv_rows_scale(c, L);
        q.in_b = in_b;
        q.o_b = o_b;
        q.apply = apply;
        q.wbytes_el = L->dtype_bytes == 4 ? 4 : 2;
        q.passes = passes;
    }

    if (phase == PHASE_FWD) {
        if (halo_needed(c, l, i))
            emit_exchange(c, phase, l, i, &h, 0);
        if (G > 1) {
            int cand = M > 0 ? gc_pick(c, phase, &q, 0) : FW_GC_DENSE;
            if (M > 0)
                gc_emit(c, phase, &q, 0, cand);
            /* MXU utilization counts the matrix unit's useful MACs: a
             * depthwise part on the vector unit has none there (probe
             * round 11: an MXU idle all step read 0.07%) */
            if (cand != FW_GC_VECTOR)
                c->mem->useful_macs += L->macs * c->B * out_fraction(c, l);
            return;
        }
        c->fx = FX_FWD;
        if (L->op == GOP_CONV_T && taps % sprod) {
            /* A transposed convolution whose kernel does not split evenly
             * over its stride phases (3x3 at stride 2: 4, 2, 2 and 1 taps)
             * runs as s^d sub-convolutions, timed as the strided input
             * gradient is: rows / s^d rows by every tap (ceil(taps / s^d)
             * taps at every output position charged 1.33x the work, 4x
             * for 1x1; probe round 12).  An even split keeps taps / s^d
             * per output row. */
            int fold_t;
            int64_t Mt = cdiv(M, sprod), Kt = tap_k(c, L, taps, cin, &fold_t);
            double epi_t = npad * ((double)cdiv(Kt, rows) - 1 + 3) +
                           (fold_t ? (double)Kt : 0) + apply * (double)Kt;
            emit_matmul(c, phase, l, Mt, Kt, cout, in_b / (double)Mt,
                        o_b / (double)Mt, w_bytes, npad * 4, epi_t, passes);
        } else
            emit_matmul(c, phase, l, M, K, cout, in_b / (double)M,
                        o_b / (double)M, w_bytes, npad * 4, epi, passes);
        c->fx = FX_NONE;
        c->mem->useful_macs += L->macs * c->B * out_fraction(c, l);
        return;
    }
    /* Backward.  dW[K, cout] = X^T dY: the reduction runs over M, so the
     * MXU streams K rows against dY weight tiles of depth `rows`. */
    double dy_b = o_b;
    double in_nohalo = 0;
    int64_t Min = (int64_t)c->B; /* examples x local input positions */
    {
        int64_t e[GRAPH_MAX_SP];
        local_out(c, i, e, NULL);
        in_nohalo = layout_bytes(c, I->out.nsp, e, cin, I->dtype_bytes);
        for (int d = 0; d < I->out.nsp; d++)
            Min *= e[d];
    }
    /* The input gradient only when something below trains, the weight
     * gradient only when these weights do (tf.gradients differentiates
     * towards the trainable variables alone). */
    /* A short trailing shard can be empty (docs/FIRMWARE.md, uneven
     * splits): no matrix work for rows it does not hold.  Its exchanges
     * and all-reduces stay: they are collectives of the whole group. */
    int need_dx = I->needs_grad;
    if (need_dx) {
        halo_t hb;
        if (bwd_halo_of(c, l, i, &hb))
            emit_exchange(c, phase, l, i, &hb, 1);
        /* dX = dY (*) W^T: same MACs as the forward product.  A strided
         * convolution's input gradient reads the stride-dilated dY, which
         * runs as s^d sub-convolutions, one per stride phase, whose taps
         * add up to the kernel's: timed as one product of (input rows /
         * s^d) rows by every tap, each row standing for one group of s^d
         * input positions (fx_mm.c walks them so).  It charged every
         * input position ceil(taps / s^d) taps: 4x the useful work of a
         * 1x1 stride-2 convolution, whose other phases have no tap (probe
         * round 12).  Taps fold into K as the forward's do (with dY's
         * features), unless the small-batch layout keeps them apart. */
        if (conv_keeps_taps(c, L))
            Min = (int64_t)llround((double)Min * conv_batch_scale(c));
        int64_t Mdx = L->op == GOP_CONV ? cdiv(Min, sprod) : Min;
        int fold_dx;
        int64_t Kdx = tap_k(c, L, L->op == GOP_DENSE ? 1 : taps, cout, &fold_dx);
        double ep = (double)rup(cin, lane) * ((double)cdiv(Kdx, rows) + 1);
        if (fold_dx)
            ep += (double)Kdx; /* im2col shuffle, as the forward's */
        c->fx = FX_DX;
        int on_mxu = 1;
        if (G > 1 && Min > 0) {
            c->fx = FX_NONE;
            q.Min = Min;
            q.in_rows = (double)Min / conv_rows_scale(c, L);
            q.in_nohalo = in_nohalo;
            int cand = gc_pick(c, phase, &q, 1);
            gc_emit(c, phase, &q, 1, cand);
            on_mxu = cand != FW_GC_VECTOR;
        } else if (Mdx > 0)
            emit_matmul(c, phase, l, Mdx, Kdx, cin, dy_b / (double)Mdx,
                        in_nohalo / (double)Mdx, w_bytes,
                        (double)rup(cin, lane) * 4, ep, passes);
        c->fx = FX_NONE;
        if (on_mxu)
            c->mem->useful_macs += L->macs * c->B * out_fraction(c, l);
    }
    if (!graph_layer_trains(c->g, l))
        return;
    emit_dw_exchange(c, l, i, &h);
    /* dW: m = K rows of X^T, k = M positions, n = cout; accumulated in
     * fp32 in VMEM over slabs of M, stored once (emit_dw; the slabs'
     * loads overlap the products: probe round 6's audit found them timed
     * after the product, 50% too long for a 1x1 convolution).  In the
     * small-batch layout
     * the guide pads the weight-gradient convolution's batch (the input
     * features: K, unfolded) to 128 and its feature (the examples, in M)
     * to 8. */
    c->fx = FX_DW;
    int dw_on_mxu = 1;
    if (G > 1 && M > 0) {
        c->fx = FX_NONE;
        int cand = gc_pick(c, phase, &q, 2);
        gc_emit(c, phase, &q, 2, cand);
        dw_on_mxu = cand != FW_GC_VECTOR;
    } else
        emit_dw(c, phase, l, K, M, cout, in_b, dy_b, npad, apply, passes);
    c->fx = FX_NONE;
    if (dw_on_mxu)
        c->mem->useful_macs += L->macs * c->B * out_fraction(c, l);
    /* Each shard summed its own positions: XLA SPMD all-reduces the
     * partial kernel over the partition group at once, in the product's
     * type (xla.dw_allreduce).  Its values stay partial until the final
     * all-reduce (docs/FUNCTIONAL.md), which sums the same terms. */
    if (c->hw->xla_dw_allreduce && any_split(c, l)) {
        const glayer *O = L->share_from >= 0 ? &c->g->layers[L->share_from] : L;
        emit(c, FW_ALLREDUCE, phase, l, O->weights * L->dtype_bytes,
             FW_GROUP_PARTITION, 0, 0);
    }
}

static int consumer_is(const lc *c, int l, graph_op op)
{
    for (int j = l + 1; j < c->g->n_layers; j++) {
        const glayer *J = &c->g->layers[j];
        for (int k = 0; k < J->n_in; k++)
            if (J->in[k] == l && J->op == op)
                return 1;
    }
    return 0;
}

/* xla.bn_apply_fused ([U], default 0): batchnorm l's normalise, and a
 * relu fused into it, is applied by whatever reads the result when every
 * reader is a matrix layer (the operand's way into the MXU) or an add
 * (whose pass reads it anyway).  No pass of its own and nothing stored:
 * readers read the batchnorm's input instead, of the same size, and pay
 * the normalise on the vector unit as they load it (fused_apply_ops).
 * Returns the layer whose output is not materialised (the relu when
 * fused, else l), or -1.  plan_bn_apply decides it for every layer in one
 * pass over the readers. */
static int bn_apply_fused(const lc *c, int l)
{
    return c->apply_t ? c->apply_t[l] : -1;
}

static tpu_status plan_bn_apply(lc *c)
{
    const graph *g = c->g;
    int n = g->n_layers;
    if (!c->hw->xla_bn_apply_fused)
        return TPU_OK;
    c->apply_t = malloc(sizeof(int) * ((size_t)n + 1));
    int *relu_of = malloc(sizeof(int) * ((size_t)n + 1));
    uint8_t *has = calloc((size_t)n + 1, 1), *bad = calloc((size_t)n + 1, 1);
    tpu_status st = TPU_ERR_SYSTEM;
    if (c->apply_t && relu_of && has && bad) {
        for (int l = 0; l < n; l++)
            relu_of[l] = -1;
        for (int j = 0; j < n; j++) {
            const glayer *J = &g->layers[j];
            if (J->unused) /* removed from the step: reads nothing */
                continue;
            if (c->relu_fused[j])
                relu_of[J->in[0]] = j;
            for (int k = 0; k < J->n_in; k++) {
                has[J->in[k]] = 1;
                bad[J->in[k]] |= J->op != GOP_CONV && J->op != GOP_CONV_T &&
                                 J->op != GOP_DENSE && J->op != GOP_ADD;
            }
        }
        for (int l = 0; l < n; l++) {
            int t = relu_of[l] >= 0 ? relu_of[l] : l;
            c->apply_t[l] = g->layers[l].op == GOP_BATCHNORM && has[t] &&
                                    !bad[t]
                                ? t
                                : -1;
        }
        st = TPU_OK;
    }
    free(relu_of);
    free(has);
    free(bad);
    return st;
}

/* Whether layer l's output is written to HBM (xla.bn_apply_fused). */
static int materialised(const lc *c, int l)
{
    const glayer *L = &c->g->layers[l];
    if (L->op == GOP_BATCHNORM)
        return bn_apply_fused(c, l) < 0;
    if (c->relu_fused[l] && c->g->layers[L->in[0]].op == GOP_BATCHNORM)
        return bn_apply_fused(c, L->in[0]) != l;
    return 1;
}

/* Vector operations per element a reader spends applying input i's
 * batchnorm normalise (4: subtract, scale, shift, convert; 5 with a fused
 * relu, as in the normalise pass) when xla.bn_apply_fused folds them into
 * it instead of a pass of their own; 0 when i is stored. */
static double fused_apply_ops(const lc *c, int i)
{
    if (materialised(c, i))
        return 0;
    return c->g->layers[i].op == GOP_RELU ? 5 : 4;
}

static void lower_forward_ops(lc *c, int l);

/* Every compute instruction of the forward pass computes the layer's
 * values, except those that say otherwise (FX_NONE). */
static void lower_forward(lc *c, int l)
{
    if (c->g->layers[l].unused)
        return; /* feeds no loss: XLA's dead code elimination drops it */
    c->fx = FX_FWD;
    lower_forward_ops(c, l);
    c->fx = FX_NONE;
}

static void lower_forward_ops(lc *c, int l)
{
    const glayer *L = &c->g->layers[l];
    const int ph = PHASE_FWD;
    double ob = out_bytes(c, l), oe = out_elems(c, l);
    double ib = L->n_in ? out_bytes(c, L->in[0]) : 0;
    double ie = L->n_in ? out_elems(c, L->in[0]) : 0;
    halo_t h;
    switch (L->op) {
    case GOP_INPUT:
    case GOP_FLATTEN:
    case GOP_CONCAT:
        /* Free: producers write into the concatenated buffer; flatten is a
         * relabelling.  A split tensor that flattens is gathered first.  A
         * replicated operand of a split concat is its own buffer: the
         * slice of the box is copied in (values come when read). */
        if (L->op == GOP_FLATTEN) {
            halo_of(c, l, L->in[0], &h);
            if (h.gather)
                emit_exchange(c, ph, l, L->in[0], &h, 0);
        }
        for (int k = 0; L->op == GOP_CONCAT && k < L->n_in; k++)
            if (reshards(c, l, L->in[k])) {
                double b = operand_bytes(c, l, L->in[k]);
                emit_pass_fx(c, FX_NONE, ph, l, b, b,
                             oe * (double)c->g->layers[L->in[k]].out.c /
                                 (double)L->out.c,
                             1);
            }
        return;
    case GOP_CONV:
    case GOP_CONV_T:
    case GOP_DENSE:
        lower_matrix_layer(c, l, ph);
        return;
    case GOP_BATCHNORM: {
        /* Training normalises with the batch's statistics: they come from
         * the producer's epilogue unless the producer is not a matrix layer
         * (then a reduction pass reads x), summed over the replica's shards
         * when the tensor is split.
         * Inference (Keras training=False) normalises with the stored
         * moving mean and variance: no statistics, nothing to exchange. */
        const glayer *I = &c->g->layers[L->in[0]];
        if (c->g->train &&
            ((I->op != GOP_CONV && I->op != GOP_CONV_T &&
              I->op != GOP_DENSE) ||
             !c->hw->xla_bn_stats_fused))
            emit_pass_fx(c, FX_NONE, ph, l, ib, 0, ie, 3);
        if (c->g->train && any_split(c, l))
            emit(c, FW_ALLREDUCE, ph, l, 2 * L->out.c * 4, FW_GROUP_PARTITION,
                 0, 0);
        if (!materialised(c, l)) {
            /* values only (the functional executor): no time, no bytes */
            emit_pass(c, ph, l, 0, 0, oe, 0);
            return;
        }
        int fuse = consumer_is(c, l, GOP_RELU);
        emit_pass(c, ph, l, ib, ob, oe, fuse ? 5 : 4);
        return;
    }
    case GOP_RELU:
    case GOP_SIGMOID:
        if (c->relu_fused[l])
            return;
        emit_pass(c, ph, l, ib, ob, oe, L->op == GOP_RELU ? 2 : 6);
        return;
    case GOP_ADD: {
        double in_all = 0, apply = 0;
        for (int k = 0; k < L->n_in; k++) {
            in_all += operand_bytes(c, l, L->in[k]);
            apply += fused_apply_ops(c, L->in[k]);
        }
        emit_pass(c, ph, l, in_all, ob, oe,
                  L->n_in + 1 + consumer_is(c, l, GOP_RELU) + apply);
        return;
    }
    case GOP_MAXPOOL:
    case GOP_AVGPOOL: {
        halo_of(c, l, L->in[0], &h);
        if (halo_needed(c, l, L->in[0]))
            emit_exchange(c, ph, l, L->in[0], &h, 0);
        double win = 1;
        for (int d = 0; d < L->out.nsp; d++)
            win *= L->kernel[d];
        const glayer *I = &c->g->layers[L->in[0]];
        double inb = layout_bytes(c, I->out.nsp, h.in_ext, I->out.c,
                                  I->dtype_bytes);
        emit_pass(c, ph, l, inb, ob, oe, win + 2);
        return;
    }
    case GOP_UPSAMPLE:
        /* Uneven shards: an output shard may start inside the previous
         * input shard (e.g. 5 rows x2 in two shards: 0-2 and 3-4 feed
         * outputs 0-4 and 5-9, and output 5 reads row 2). */
        halo_of(c, l, L->in[0], &h);
        if (halo_needed(c, l, L->in[0]))
            emit_exchange(c, ph, l, L->in[0], &h, 0);
        emit_pass(c, ph, l, ib, ob, oe, 1);
        return;
    case GOP_DROPOUT:
        emit_pass(c, ph, l, ib, ob + oe / 8, oe, 4); /* RNG + mask bits */
        return;
    case GOP_GAP:
        emit_pass(c, ph, l, ib, ob, ie, 2);
        if (any_split(c, L->in[0]))
            emit(c, FW_ALLREDUCE, ph, l, (int64_t)(c->B * L->out.c * 4),
                 FW_GROUP_PARTITION, 0, 0);
        return;
    case GOP_LOSS: {
        /* Loss and its gradient in one pass over the logits; a gradient
         * is written only for an input something below it trains through
         * (none when every layer is frozen). */
        static const double ops[] = {8, 14, 6, 3, 5}; /* per element */
        double in_all = 0, grad = 0, el = 0;
        for (int k = 0; k < L->n_in; k++) {
            in_all += out_bytes(c, L->in[k]);
            el += out_elems(c, L->in[k]);
            if (c->g->train && c->g->layers[L->in[k]].needs_grad)
                grad += out_bytes(c, L->in[k]);
        }
        emit_pass(c, ph, l, in_all, grad, el, ops[L->loss]);
        int split = 0;
        for (int k = 0; k < L->n_in; k++)
            split |= any_split(c, L->in[k]);
        if (split)
            emit(c, FW_ALLREDUCE, ph, l, L->loss == GLOSS_DICE ? 12 : 4,
                 FW_GROUP_PARTITION, 0, 0);
        return;
    }
    case GOP_COUNT:
        return;
    }
}

static void lower_backward_ops(lc *c, int l);

static void lower_backward(lc *c, int l)
{
    c->fx = FX_BWD;
    lower_backward_ops(c, l);
    c->fx = FX_NONE;
}

static void lower_backward_ops(lc *c, int l)
{
    const glayer *L = &c->g->layers[l];
    const int ph = PHASE_BWD;
    if (L->op == GOP_INPUT || !L->needs_grad)
        return; /* nothing at or below it trains: no gradient flows here */
    double ob = out_bytes(c, l), oe = out_elems(c, l);
    double ib = L->n_in ? out_bytes(c, L->in[0]) : 0;
    /* Gradients from several consumers are summed first. */
    for (int k = 1; k < c->nconsumers[l]; k++)
        emit_pass_fx(c, FX_NONE, ph, l, 2 * ob, ob, oe, 1);
    /* The input needs no gradient: data, or a frozen prefix. */
    int input_is_data = L->n_in && !c->g->layers[L->in[0]].needs_grad;
    switch (L->op) {
    case GOP_CONV:
    case GOP_CONV_T:
    case GOP_DENSE:
        lower_matrix_layer(c, l, ph);
        return;
    case GOP_BATCHNORM:
        /* Two reductions (sum dy, sum dy*xhat), all-reduced across the
         * partition group, then dx; a fused relu's mask is read too. */
        /* reads dY and x; a fused relu's mask is read too, unless the
         * normalise was fused into its readers (then it is recomputed
         * from x) */
        emit_pass_fx(c, FX_BSTAT, ph, l,
                     2 * ob + (c->relu_fused[l + 1 < c->g->n_layers ? l + 1 : l] &&
                                       materialised(c, l)
                                   ? ob
                                   : 0),
                     0, oe, 5);
        if (any_split(c, l))
            emit(c, FW_ALLREDUCE, ph, l, 2 * L->out.c * 4, FW_GROUP_PARTITION,
                 0, 0);
        if (!input_is_data)
            emit_pass(c, ph, l, 2 * ob, ib, oe, 6);
        return;
    case GOP_RELU:
    case GOP_SIGMOID:
        if (c->relu_fused[l])
            return;
        emit_pass(c, ph, l, 2 * ob, ib, oe, 2);
        return;
    case GOP_ADD:
    case GOP_CONCAT:
        /* Each input's gradient is dY itself (aliased, no pass), or its
         * channels of dY.  A replicated operand that was sliced needs the
         * whole gradient: the group all-gathers dY (its channels). */
        for (int k = 0; k < L->n_in; k++) {
            const glayer *I = &c->g->layers[L->in[k]];
            if (!I->needs_grad || !reshards(c, l, L->in[k]))
                continue;
            double full = layout_bytes(c, I->out.nsp, L->out.sp, I->out.c,
                                       L->dtype_bytes);
            emit_fx(c, FX_DX, FW_ALLGATHER, ph, l, (int64_t)ceil(full), 0, 0,
                    0);
            if (L->op == GOP_ADD)
                break; /* one dY serves every operand */
        }
        return;
    case GOP_MAXPOOL:
    case GOP_AVGPOOL: {
        if (input_is_data)
            return;
        halo_t h;
        double win = 1;
        for (int d = 0; d < L->out.nsp; d++)
            win *= L->kernel[d];
        if (bwd_halo_of(c, l, L->in[0], &h))
            emit_exchange(c, ph, l, L->in[0], &h, 1);
        if (L->op == GOP_MAXPOOL &&
            pool_bwd_input_halo_of(c, l, L->in[0], &h))
            emit_exchange(c, ph, l, L->in[0], &h, 2);
        /* Each window (output element) compares its inputs again for the
         * maximum, or scales dY, and adds into its inputs (win + 1); each
         * input element is zeroed or summed once.  Per input element that
         * is (win + 1) / (stride product) + 1 for a pooling without
         * overlap (2.25 for 2x2 stride 2), not win + 2: a 64x64 window's
         * gradient is ~2 operations an input, not 4098. */
        double ie_in = out_elems(c, L->in[0]);
        emit_pass(c, ph, l, ob + (L->op == GOP_MAXPOOL ? ib + ob : 0), ib,
                  ie_in, ie_in > 0 ? oe * (win + 1) / ie_in + 1 : 0);
        return;
    }
    case GOP_UPSAMPLE:
        if (!input_is_data) {
            halo_t h;
            if (bwd_halo_of(c, l, L->in[0], &h))
                emit_exchange(c, ph, l, L->in[0], &h, 1);
            emit_pass(c, ph, l, ob, ib, oe, 1);
        }
        return;
    case GOP_DROPOUT:
        if (!input_is_data)
            emit_pass(c, ph, l, ob + oe / 8, ib, oe, 2);
        return;
    case GOP_GAP:
        if (!input_is_data)
            emit_pass(c, ph, l, ob, ib, out_elems(c, L->in[0]), 1);
        return;
    case GOP_INPUT:
    case GOP_FLATTEN:
    case GOP_LOSS: /* its gradient came out of the forward pass */
    case GOP_COUNT:
        return;
    }
}

/* Tensors the backward pass reads: inputs of matrix layers whose weights
 * train (the weight gradient), inputs of batchnorms with a backward,
 * outputs of relu/sigmoid (masks) and maxpool inputs and outputs where a
 * gradient passes.  A frozen prefix keeps none of them. */
static int saved_for_backward(const lc *c, int l)
{
    const graph *g = c->g;
    const glayer *L = &g->layers[l];
    /* a fused normalise is recomputed from the batchnorm's input, which
     * the batchnorm's backward keeps anyway */
    if (!materialised(c, l))
        return 0;
    if ((L->op == GOP_RELU || L->op == GOP_SIGMOID) && L->needs_grad)
        return 1;
    if (L->op == GOP_MAXPOOL && g->layers[L->in[0]].needs_grad)
        return 1;
    return c->kept_for[l];
}

/* kept_for: layers whose output a consumer's backward pass reads (a
 * trainable matrix layer's weight gradient, batchnorm's, max pooling's
 * window search). */
static void mark_kept_for(lc *c)
{
    const graph *g = c->g;
    for (int j = 0; j < g->n_layers; j++) {
        const glayer *J = &g->layers[j];
        int trains = (J->op == GOP_CONV || J->op == GOP_CONV_T ||
                      J->op == GOP_DENSE) &&
                     graph_layer_trains(g, j);
        for (int k = 0; k < J->n_in; k++) {
            int l = J->in[k];
            if (trains || (J->op == GOP_BATCHNORM && J->needs_grad) ||
                (J->op == GOP_MAXPOOL && g->layers[l].needs_grad))
                c->kept_for[l] = 1;
        }
    }
}

/* Whether layer l's output is held for the whole step (saved for the
 * backward pass and not recomputed): counted once in the saved set. */
static int held_for_step(const lc *c, int l)
{
    return c->g->train && saved_for_backward(c, l) && !c->remat[l];
}

static void account_memory(lc *c)
{
    const graph *g = c->g;
    fw_memory *m = c->mem;
    double saved = 0, ws = 0;
    /* Tensors not held for the step that wait for a later consumer (a
     * skip connection in inference, a recomputed activation that a later
     * forward layer still reads): live from their producer to their last
     * consumer (probe round 12: an inference U-shaped net fitted with 18
     * GiB live at once).  `open` sums those produced so far and still
     * waiting; `ends[l]` those whose last consumer is l. */
    double open = 0, *ends = c->ends;
    memset(ends, 0, sizeof *ends * (size_t)g->n_layers);
    for (int t = 0; t < g->n_layers; t++)
        if (!g->layers[t].unused && !held_for_step(c, t) &&
            c->last_use[t] > t)
            ends[c->last_use[t]] += out_bytes(c, t);
    for (int l = 0; l < g->n_layers; l++) {
        const glayer *L = &g->layers[l];
        if (L->unused)
            continue;
        double ob = out_bytes(c, l);
        if (held_for_step(c, l))
            saved += ob;
        double in = 0, across = open - ends[l];
        for (int k = 0; k < L->n_in; k++) {
            int i = L->in[k];
            halo_t h;
            halo_of(c, l, i, &h);
            const glayer *I = &g->layers[i];
            in += layout_bytes(c, I->out.nsp, h.in_ext, I->out.c,
                               I->dtype_bytes);
            /* an input that waits on for a later consumer too is counted
             * here, with its halos, not twice */
            int first = 1;
            for (int q = 0; q < k; q++)
                first &= L->in[q] != i;
            if (first && !held_for_step(c, i) && c->last_use[i] > l)
                across -= out_bytes(c, i);
        }
        /* Live at once besides the saved set: the layer's input and output
         * (forward), or the gradients of both (backward), and the tensors
         * waiting across it. */
        double live = in + ob + (across > 0 ? across : 0);
        if (live > ws)
            ws = live;
        open -= ends[l];
        if (!held_for_step(c, l) && c->last_use[l] > l)
            open += ob;
    }
    /* fp32 master weights; gradients and momentum for the trainable ones
     * only (a sharer counts no weights of its own). */
    double wt = (double)graph_trainable_weights(g) * 4;
    m->weights_bytes = (double)graph_weights(g) * 4;
    m->grads_bytes = g->train ? wt : 0;
    m->opt_bytes = g->train ? wt : 0;
    m->saved_bytes = saved;
    m->workspace_bytes = ws;
    m->peak_bytes = m->weights_bytes + m->grads_bytes + m->opt_bytes + saved + ws;
}

/* An activation whose input the backward pass keeps anyway (a batchnorm,
 * whose input is saved for its own backward, or a saved tensor): dropping
 * its output costs one vector pass to recompute it. */
static int remat_candidate(const lc *c, int l)
{
    const glayer *L = &c->g->layers[l];
    if ((L->op != GOP_RELU && L->op != GOP_SIGMOID) || L->n_in != 1 ||
        !saved_for_backward(c, l))
        return 0;
    int i = L->in[0];
    return c->g->layers[i].op == GOP_BATCHNORM || saved_for_backward(c, i);
}

/* xla.remat: when the step does not fit, drop the largest recomputable
 * activations until it does (or none is left: then it does not fit). */
static void choose_remat(lc *c)
{
    const double cap = c->hw->hbm.capacity_bytes;
    account_memory(c);
    while (c->mem->peak_bytes > cap) {
        int best = -1;
        double bb = 0;
        for (int l = 0; l < c->g->n_layers; l++)
            if (!c->remat[l] && remat_candidate(c, l) && out_bytes(c, l) > bb) {
                bb = out_bytes(c, l);
                best = l;
            }
        if (best < 0)
            break;
        c->remat[best] = 1;
        c->mem->remat_bytes += bb;
        c->mem->remat_layers++;
        double keep_b = c->mem->remat_bytes;
        int keep_n = c->mem->remat_layers;
        account_memory(c);
        c->mem->remat_bytes = keep_b;
        c->mem->remat_layers = keep_n;
    }
}

/* Recomputes a dropped activation just before the first backward layer
 * that reads it (its last consumer: backward runs in reverse order). */
static void emit_recompute(lc *c, int j, const int *head, const int *next)
{
    for (int l = head[j]; l >= 0; l = next[l]) {
        const glayer *L = &c->g->layers[l];
        const glayer *I = &c->g->layers[L->in[0]];
        double in_b = out_bytes(c, L->in[0]);
        /* through the batchnorm (normalise + activation) or the activation */
        double ops = I->op == GOP_BATCHNORM ? 5 : (L->op == GOP_RELU ? 2 : 6);
        size_t from = c->prog->n;
        emit_pass_fx(c, FX_NONE, PHASE_BWD, l, in_b, out_bytes(c, l),
                     out_elems(c, l), ops);
        /* marked for the listing (`tpuemu lower`), which would otherwise
         * show this pass as one more block of the layer's backward */
        if (!c->prog->oom)
            for (size_t k = from; k < c->prog->n; k++)
                c->prog->code[k].recompute = 1;
    }
}

static void lc_free(lc *c)
{
    free(c->nconsumers);
    free(c->relu_fused);
    free(c->remat);
    free(c->last_use);
    free(c->ends);
    free(c->kept_for);
    free(c->apply_t);
    fw_program_free(&c->scratch);
    fw_program_free(&c->cand);
}

tpu_status fw_lower(const graph *g, const plan *p, const tpu_params *hw,
                    int shard, const fw_pricer *pricer, fw_program *out,
                    fw_memory *mem, tpu_error *err)
{
    lc c = {0};
    c.g = g;
    c.p = p;
    c.hw = hw;
    TPU_ASSERT(pricer && pricer->price);
    c.pricer = pricer;
    c.shard = shard;
    plan_coords(p, shard, c.coords);
    c.prog = out;
    c.B = (double)p->batch;
    c.mem = mem;
    memset(mem, 0, sizeof *mem);
    fw_program_init(out);
    c.nconsumers = calloc((size_t)g->n_layers + 1, sizeof(int));
    c.relu_fused = calloc((size_t)g->n_layers + 1, 1);
    c.remat = calloc((size_t)g->n_layers + 1, 1);
    c.last_use = malloc(sizeof(int) * ((size_t)g->n_layers + 1));
    c.ends = malloc(sizeof(double) * ((size_t)g->n_layers + 1));
    c.kept_for = calloc((size_t)g->n_layers + 1, 1);
    if (!c.nconsumers || !c.relu_fused || !c.remat || !c.last_use ||
        !c.ends || !c.kept_for) {
        lc_free(&c);
        return tpu_fail(err, TPU_ERR_SYSTEM, "out of host memory (lowering)");
    }
    mark_kept_for(&c);
    for (int l = 0; l < g->n_layers; l++)
        c.last_use[l] = -1;
    for (int l = 0; l < g->n_layers; l++) {
        const glayer *L = &g->layers[l];
        if (L->unused) /* removed from the step: reads nothing */
            continue;
        for (int k = 0; k < L->n_in; k++) {
            c.nconsumers[L->in[k]]++;
            c.last_use[L->in[k]] = l;
        }
    }
    /* relu right after batchnorm or add, its only consumer: fused into the
     * producer's pass (XLA loop fusion; the producer's output is never
     * written). */
    for (int l = 0; l < g->n_layers; l++) {
        const glayer *L = &g->layers[l];
        if (L->op == GOP_RELU && L->n_in == 1) {
            int i = L->in[0];
            const glayer *I = &g->layers[i];
            if ((I->op == GOP_BATCHNORM || I->op == GOP_ADD) &&
                c.nconsumers[i] == 1)
                c.relu_fused[l] = 1;
        }
    }
    if (plan_bn_apply(&c)) {
        lc_free(&c);
        return tpu_fail(err, TPU_ERR_SYSTEM, "out of host memory (lowering)");
    }
    for (int l = 0; l < g->n_layers; l++)
        lower_forward(&c, l);
    if (g->train && hw->xla_remat)
        choose_remat(&c);
    if (g->train) {
        /* The dropped activations listed by the backward layer that
         * recomputes them, in layer order: one pass, not one per layer. */
        int *head = malloc(sizeof(int) * ((size_t)g->n_layers + 1));
        int *next = malloc(sizeof(int) * ((size_t)g->n_layers + 1));
        if (!head || !next) {
            free(head);
            free(next);
            lc_free(&c);
            fw_program_free(out);
            return tpu_fail(err, TPU_ERR_SYSTEM,
                            "out of host memory (lowering)");
        }
        for (int l = 0; l < g->n_layers; l++)
            head[l] = next[l] = -1;
        for (int l = g->n_layers - 1; l >= 0; l--)
            if (c.remat[l] && c.last_use[l] > l) {
                next[l] = head[c.last_use[l]];
                head[c.last_use[l]] = l;
            }
        for (int l = g->n_layers - 1; l >= 0; l--) {
            emit_recompute(&c, l, head, next);
            lower_backward(&c, l);
        }
        free(head);
        free(next);
    }
    {
        double rb = mem->remat_bytes;
        int rn = mem->remat_layers;
        account_memory(&c);
        mem->remat_bytes = rb;
        mem->remat_layers = rn;
    }
    if (g->train && mem->grads_bytes > 0) {
        /* Only the trainable weights' gradients are all-reduced and
         * applied. */
        double wb = mem->grads_bytes;
        if (p->cores > 1)
            emit(&c, FW_ALLREDUCE, PHASE_UPDATE, -1, (int64_t)wb, FW_GROUP_ALL,
                 0, 0);
        /* Momentum SGD in fp32: read w, m, g; write w, m. */
        emit_pass_fx(&c, FX_UPDATE, PHASE_UPDATE, -1, 3 * wb, 2 * wb, wb / 4, 4);
    }
    emit(&c, FW_WAIT_ST, g->train ? PHASE_UPDATE : PHASE_FWD, -1, 0, 0, 0, 0);
    emit(&c, FW_BARRIER, g->train ? PHASE_UPDATE : PHASE_FWD, -1, 0, 0, 0, 0);
    lc_free(&c);
    if (out->oom) {
        fw_program_free(out);
        return tpu_fail(err, TPU_ERR_SYSTEM, "out of host memory (firmware)");
    }
    return fw_validate(out, err);
}
