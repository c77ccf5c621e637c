/* allreduce — the flows of an all-reduce over a group of cores: the
 * group's layout on the torus (a rectangle of chips, or one ring), the
 * streams that share the data out over the links, and their ring phases
 * (reduce-scatter, then all-gather), built into interconnect/flow.c's
 * DAG.  docs/ICI.md describes the algorithm and what it reaches. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "interconnect/ici_internal.h"

/* The pieces an all-reduce stream is cut into (modelling choices, not
 * hardware; allreduce_build explains them). */
#define ICI_MIN_PIECE 65536.0
#define ICI_MAX_PIECES 16
#define ICI_MIN_CHUNKS 2
#define ICI_SPLIT 8

/* A group's chips laid out on a grid na x nb: the rectangle of distinct x
 * and y coordinates when the chips fill it (dims a = x, b = y), otherwise
 * one ring over the chips in the order the group lists them. */
typedef struct {
    int na, nb, rect;
    int close[2];    /* dimension's ring closes over wrap links */
    int *grid;       /* chip at (ia, ib) = grid[ia + na * ib] */
    int *has;        /* per grid cell: bit 0 even core, bit 1 odd core */
} allreduce_grp;

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

static int uniq_sorted(int *v, int m)
{
    qsort(v, (size_t)m, sizeof(int), cmp_int);
    int k = 0;
    for (int i = 0; i < m; i++)
        if (k == 0 || v[k - 1] != v[i])
            v[k++] = v[i];
    return k;
}

/* 1 when a ring over these sorted coordinates closes over wrap-around
 * links without doubling back: the dimension wraps and the coordinates
 * are spread evenly around all of it. */
static int ring_closes(const int *c, int m, int d, int wrap)
{
    if (m < 2 || !wrap || d % m != 0)
        return 0;
    for (int i = 0; i < m; i++)
        if (c[i] != c[0] + i * (d / m))
            return 0;
    return 1;
}

/* A ring on a line: out on the even places, back on the odd ones
 * (0 2 4 .. 5 3 1), so every ring edge is one or two hops and each link
 * direction carries one edge, instead of one edge crossing the whole line
 * back (same bandwidth, far less latency per step). */
static void line_order(ici_mem *mem, int *c, int m)
{
    int *t = ici_tmp_alloc(mem, (size_t)(unsigned)m * sizeof(int));
    int k = 0;
    for (int i = 0; i < m; i += 2)
        t[k++] = c[i];
    for (int i = (m - 1) % 2 == 1 ? m - 1 : m - 2; i >= 1; i -= 2)
        t[k++] = c[i];
    memcpy(c, t, (size_t)(unsigned)m * sizeof(int));
    ici_tmp_free(mem, t);
}

static void grp_free(ici_mem *m, allreduce_grp *g)
{
    ici_tmp_free(m, g->grid);
    ici_tmp_free(m, g->has);
}

/* The group's layout; its arrays are temporaries of the call (grp_free). */
static void grp_build(const ici *n, ici_mem *m, const int *cores, int ncores,
                      allreduce_grp *g)
{
    int *chips = ici_tmp_alloc(m, (size_t)ncores * sizeof(int));
    int *mask = ici_tmp_calloc(m, (size_t)n->nchips, sizeof(int));
    int *xs = ici_tmp_alloc(m, (size_t)ncores * sizeof(int));
    int *ys = ici_tmp_alloc(m, (size_t)ncores * sizeof(int));
    int nc = 0;
    for (int i = 0; i < ncores; i++) {
        int ch = cores[i] / 2;
        if (!mask[ch])
            chips[nc++] = ch;
        mask[ch] |= 1 << (cores[i] & 1);
    }
    for (int i = 0; i < nc; i++) {
        xs[i] = ici_chip_x(n, chips[i]);
        ys[i] = ici_chip_y(n, chips[i]);
    }
    int nx = uniq_sorted(xs, nc), ny = uniq_sorted(ys, nc);
    g->rect = nx * ny == nc;
    g->close[0] = g->rect && ring_closes(xs, nx, n->dx, n->wrapx);
    g->close[1] = g->rect && ring_closes(ys, ny, n->dy, n->wrapy);
    if (g->rect) {
        if (!g->close[0])
            line_order(m, xs, nx);
        if (!g->close[1])
            line_order(m, ys, ny);
    }
    g->na = g->rect ? nx : nc;
    g->nb = g->rect ? ny : 1;
    g->grid = ici_tmp_alloc(m, (size_t)nc * sizeof(int));
    g->has = ici_tmp_alloc(m, (size_t)nc * sizeof(int));
    if (g->rect) {
        for (int ib = 0; ib < ny; ib++)
            for (int ia = 0; ia < nx; ia++)
                g->grid[ia + nx * ib] = xs[ia] + ys[ib] * n->dx;
    } else {
        memcpy(g->grid, chips, (size_t)nc * sizeof(int));
    }
    for (int i = 0; i < nc; i++)
        g->has[i] = mask[g->grid[i]];
    ici_tmp_free(m, chips);
    ici_tmp_free(m, mask);
    ici_tmp_free(m, xs);
    ici_tmp_free(m, ys);
}

/* A stream is one share of the data with its own route through the
 * algorithm: reduce-scatter along dimension d1 then d2, all-gather along
 * d2 then d1, on rings running in direction dir, owned on each chip by
 * the core of parity `par`.  On a 2D group four streams of a quarter
 * each (x-then-y and y-then-x, both ways round) keep all four links of a
 * chip busy at once; on a ring two halves go opposite ways. */
typedef struct {
    int d1, dir, par;
} allreduce_stream;

static int grp_streams(const allreduce_grp *g, allreduce_stream *s)
{
    if (g->na > 1 && g->nb > 1) {
        s[0] = (allreduce_stream){0, 1, 0};
        s[1] = (allreduce_stream){0, -1, 0};
        s[2] = (allreduce_stream){1, 1, 1};
        s[3] = (allreduce_stream){1, -1, 1};
        return 4;
    }
    if (g->na > 1 || g->nb > 1) {
        int d = g->na > 1 ? 0 : 1;
        s[0] = (allreduce_stream){d, 1, 0};
        s[1] = (allreduce_stream){d, -1, 1};
        return 2;
    }
    return 0;
}

/* Position along a ring of n at rank r when the ring runs direction dir. */
static int ring_pos(int r, int dir, int n)
{
    r %= n;
    return dir > 0 ? r : (n - r) % n;
}

/* Grid cell of the chip at ranks (r1, r2) of stream s. */
static int stream_cell(const allreduce_grp *g, const allreduce_stream *s,
                       int r1, int r2)
{
    int n1 = s->d1 == 0 ? g->na : g->nb, n2 = s->d1 == 0 ? g->nb : g->na;
    int p1 = ring_pos(r1, s->dir, n1), p2 = ring_pos(r2, s->dir, n2);
    return s->d1 == 0 ? p1 + g->na * p2 : p2 + g->na * p1;
}

static int cell_owner(const allreduce_grp *g, int cell, int par)
{
    int has = g->has[cell], chip = g->grid[cell];
    if (has == 3)
        return 2 * chip + par;
    return 2 * chip + (has == 2 ? 1 : 0);
}

static int cell_other(const allreduce_grp *g, int cell, int par)
{
    return g->has[cell] == 3 ? 2 * g->grid[cell] + (1 - par) : -1;
}

/* ---- all-reduce --------------------------------------------------------- */

#define NDONE 4

typedef struct {
    int d[NDONE];
} allreduce_done;

static void done_add(allreduce_done *d, int id)
{
    if (id == NOFLOW)
        return;
    for (int i = 0; i < NDONE; i++)
        if (d->d[i] == NOFLOW) {
            d->d[i] = id;
            return;
        }
    TPU_ASSERT(0);
}

static void dep_done(ici *n, const allreduce_done *d, int after)
{
    for (int i = 0; i < NDONE; i++)
        flow_dep(n, d->d[i], after);
}

/* One ring phase of stream s along its first (which = 1) or second
 * (which = 2) dimension: n-1 steps, each chip sending `seg` bytes to the
 * next chip on the ring.  A send waits for the chip's own previous send
 * (a link queue delivers in order), for the previous step's arrival from
 * upstream, and, on the first step, for entry[cell].
 * rs_chain (phase 1 of a chip with two cores): before its step k the
 *   owner needs the other core's share of the segment it sends, so the
 *   other core sends its n pieces in that order, one after another.
 * ag_chain (last phase): every segment that arrives is passed on to the
 *   other core, in order.
 * split: the on-chip leg's head and tail.  With an rs_chain the first
 *   step's segment goes as `split` messages, each waiting only for its
 *   part of the other core's piece, so the link starts after 1/split of
 *   the piece instead of all of it; with an ag_chain the last step's
 *   segment goes as `split` messages and each part is passed on to the
 *   other core as it arrives, so the call ends 1/split of a segment's
 *   on-chip time after the last arrival, not a whole one.  (The DMA
 *   engines stream a message packet by packet; the parts are the fluid
 *   model's stand-in for that.)  sub[cell] holds the first part's id
 *   (the parts of one message are consecutive flows).
 * last_in[cell] receives the last arrival into each chip. */
static void ring_phase(ici *n, const allreduce_grp *g,
                       const allreduce_stream *s, int which, double seg,
                       const allreduce_done *entry, int *rs_chain,
                       int *ag_chain, int split, int *sub, int *prev, int *cur,
                       int *last_in)
{
    int n1 = s->d1 == 0 ? g->na : g->nb, n2 = s->d1 == 0 ? g->nb : g->na;
    int nr = which == 1 ? n1 : n2, other = which == 1 ? n2 : n1;
    int ncell = n1 * n2;
    TPU_ASSERT(split >= 1 && split <= ICI_SPLIT);
    for (int i = 0; i < ncell; i++)
        prev[i] = NOFLOW;
    for (int k = 0; k < nr; k++) {
        /* parts of this step's message, and of the one that arrived at
         * step k-1 (an all-gather's last) */
        int m = (rs_chain && k == 0) || (ag_chain && k == nr - 2) ? split : 1;
        int pm = ag_chain && k == nr - 1 ? split : 1;
        for (int o = 0; o < other; o++)
            for (int r = 0; r < nr; r++) {
                int r1 = which == 1 ? r : o, r2 = which == 1 ? o : r;
                int cell = stream_cell(g, s, r1, r2);
                int rk = r1 + n1 * r2;
                int up = which == 1 ? ((r1 + n1 - 1) % n1) + n1 * r2
                                    : r1 + n1 * ((r2 + n2 - 1) % n2);
                int owner = cell_owner(g, cell, s->par);
                int oth = cell_other(g, cell, s->par);
                int c[ICI_SPLIT];
                for (int j = 0; j < m; j++)
                    c[j] = NOFLOW;
                if (rs_chain && oth >= 0)
                    for (int j = 0; j < m; j++) {
                        c[j] = flow_add(n, oth, owner, seg / m, s->dir);
                        flow_dep_sent(n, rs_chain[rk], c[j]);
                        rs_chain[rk] = c[j];
                    }
                if (ag_chain && oth >= 0 && k > 0)
                    /* the segment that arrived at step k-1 */
                    for (int j = 0; j < pm; j++) {
                        int a = flow_add(n, owner, oth, seg / pm, s->dir);
                        flow_dep(n, pm > 1 ? sub[up] + j : prev[up], a);
                        flow_dep_sent(n, ag_chain[rk], a);
                        ag_chain[rk] = a;
                    }
                cur[rk] = NOFLOW;
                if (k < nr - 1) {
                    int nxt = which == 1 ? stream_cell(g, s, r1 + 1, r2)
                                         : stream_cell(g, s, r1, r2 + 1);
                    int dst = cell_owner(g, nxt, s->par);
                    int f = NOFLOW;
                    for (int j = 0; j < m; j++) {
                        int before = j > 0 ? f : prev[rk];
                        f = flow_add(n, owner, dst, seg / m, s->dir);
                        TPU_ASSERT(j == 0 || f == sub[rk] + j);
                        if (j == 0)
                            sub[rk] = f;
                        flow_dep(n, c[j], f);
                        if (k == 0)
                            dep_done(n, &entry[rk], f);
                        else
                            flow_dep(n, prev[up], f);
                        flow_dep_sent(n, before, f);
                    }
                    cur[rk] = f;
                }
            }
        if (k < nr - 1) {
            for (int i = 0; i < ncell; i++) {
                int r1 = i % n1, r2 = i / n1;
                int dn = which == 1 ? ((r1 + 1) % n1) + n1 * r2
                                    : r1 + n1 * ((r2 + 1) % n2);
                last_in[dn] = cur[i];
            }
            memcpy(prev, cur, (size_t)ncell * sizeof(int));
        }
    }
}

static allreduce_done done_none(void)
{
    allreduce_done d;
    for (int i = 0; i < NDONE; i++)
        d.d[i] = NOFLOW;
    return d;
}

/* Adds the flows of one group's all-reduce of `bytes` per core. */
void allreduce_build(ici *n, const int *cores, int ncores,
                     double bytes)
{
    if (ncores < 2)
        return;
    ici_mem *m = &n->mem;
    allreduce_grp g;
    grp_build(n, m, cores, ncores, &g);
    allreduce_stream st[4];
    int ns = grp_streams(&g, st);
    if (ns == 0) {
        /* one chip, two cores: each sends the other its whole buffer over
         * the on-chip path (one step beats reduce-scatter + all-gather:
         * same bytes per direction, one latency instead of two) */
        flow_add(n, cores[0], cores[1], bytes, 1);
        flow_add(n, cores[1], cores[0], bytes, 1);
        grp_free(m, &g);
        return;
    }
    int ncell = g.na * g.nb;
    size_t sz = (size_t)ncell * sizeof(int);
    int *prev = ici_tmp_alloc(m, sz), *cur = ici_tmp_alloc(m, sz);
    int *last = ici_tmp_alloc(m, sz), *rs = ici_tmp_alloc(m, sz);
    int *ag = ici_tmp_alloc(m, sz), *sub = ici_tmp_alloc(m, sz);
    int *own = ici_tmp_alloc(m, sz);
    allreduce_done *done =
        ici_tmp_alloc(m, (size_t)ncell * sizeof(allreduce_done));
    int two = 0;
    for (int i = 0; i < ncell; i++)
        two |= g.has[i] == 3;
    for (int si = 0; si < ns; si++) {
        const allreduce_stream *s = &st[si];
        int n1 = s->d1 == 0 ? g.na : g.nb, n2 = s->d1 == 0 ? g.nb : g.na;
        /* With two cores a chip the on-chip leg moves half the buffer each
         * way per phase: the other core's pieces before the reduce-scatter
         * steps that need them, the reduced segments after the all-gather
         * steps that bring them.  Between the two the chip only uses
         * links (the d2 phases), so with one pass the on-chip path idles
         * there and has to catch up at both ends.  The stream is cut into
         * chunks that run the whole algorithm each, so one chunk's on-chip
         * leg overlaps another's ring: segments of ICI_MIN_PIECE and one
         * shorter rest, at most ICI_MAX_PIECES per stream, then equal ones
         * (a modelling choice, not hardware).  Fixed-size pieces keep the
         * time monotone in the bytes (equal pieces cut finer at each
         * threshold would make a larger buffer up to 0.6% faster than a
         * smaller one).  Two cases take at least ICI_MIN_CHUNKS chunks
         * however long the ring.  Rectangles: the streams of both rings
         * are cut, so that the two kinds stay in step (16x8, 256 MiB, no
         * latency: 1.065 x the bound, the algorithm's own imbalance being
         * 1.063; 1.23 with the longer ring's streams whole).  Groups whose
         * rings both close over wrap links: the on-chip path carries as
         * much as the four links (bytes each way at 2 x a link against
         * 2(n-1)/n x bytes over 4 links), so it has to work during the d2
         * phases too (v3-2048: 1.016 x the bound, 1.031 with one chunk).
         * Elsewhere a second chunk costs 4x the host time for 0.2%. */
        int chunks = 1, most = (ICI_MAX_PIECES + n1 - 1) / n1;
        if (most < ICI_MIN_CHUNKS && (g.na != g.nb || (g.close[0] && g.close[1])))
            most = ICI_MIN_CHUNKS;
        double stream = bytes / ns, full = stream, rest = stream;
        if (two) {
            double piece = ICI_MIN_PIECE * n1;
            double need = ceil(stream / piece);
            if (need > most) {
                chunks = most;
                full = rest = stream / most;
            } else if (need > 1) {
                chunks = (int)need;
                full = piece;
                rest = stream - piece * (chunks - 1);
            }
        }
        for (int i = 0; i < ncell; i++)
            rs[i] = own[i] = NOFLOW;
        for (int ch = 0; ch < chunks; ch++) {
        double q = ch == chunks - 1 ? rest : full;
        double seg1 = q / n1, seg2 = seg1 / n2;
        /* head and tail of the on-chip leg in parts of ICI_MIN_PIECE or
         * more (ring_phase) */
        int split = 1;
        if (two)
            while (split < ICI_SPLIT && seg1 / (split + 1) >= ICI_MIN_PIECE)
                split++;
        /* The other core's pieces keep one queue across chunks (chunk c+1's
         * are needed after chunk c's), but the passes after the all-gather
         * start a queue per chunk.  Chained across chunks, chunk c+1's first
         * pass (its own reduced segment, ready after the d2 phases) would
         * wait for chunk c's last, which waits for chunk c's last
         * all-gather arrival; every chunk's on-chip leg would slide behind
         * the previous one's ring and the last ones run after the links
         * have finished (v3-8, 256 MiB, no latency: 11.8% above the
         * bound). */
        for (int i = 0; i < ncell; i++) {
            done[i] = done_none();
            ag[i] = NOFLOW;
        }
        /* reduce-scatter along d1 (with the on-chip reduction folded in) */
        ring_phase(n, &g, s, 1, seg1, done, rs, NULL, split, sub, prev, cur,
                   last);
        for (int i = 0; i < ncell; i++) {
            done_add(&done[i], last[i]);
            done_add(&done[i], rs[i]);
            /* The previous chunk's passes wait until this chunk's pieces
             * have crossed: the pieces gate a ring, the passes only the
             * end.  Where the on-chip path is what binds (four links a
             * chip, ici.wrap=1 on v3-8: the path carries the buffer each
             * way, the links 1.5/4 of it), the per-chunk queues would
             * otherwise share it with the pieces and starve the next
             * chunk's ring (256 MiB: 1.3385 x the link bound against the
             * path's own 1.3333). */
            flow_dep_sent(n, rs[i], own[i]);
        }
        if (n2 > 1) {
            /* reduce-scatter along d2, then all-gather along d2 */
            ring_phase(n, &g, s, 2, seg2, done, NULL, NULL, 1, sub, prev, cur,
                       last);
            for (int i = 0; i < ncell; i++)
                done_add(&done[i], last[i]);
            ring_phase(n, &g, s, 2, seg2, done, NULL, NULL, 1, sub, prev, cur,
                       last);
            for (int i = 0; i < ncell; i++)
                done_add(&done[i], last[i]);
        }
        /* the chip's own reduced segment goes to the other core first */
        for (int r2 = 0; r2 < n2; r2++)
            for (int r1 = 0; r1 < n1; r1++) {
                int rk = r1 + n1 * r2, cell = stream_cell(&g, s, r1, r2);
                int oth = cell_other(&g, cell, s->par);
                if (oth < 0)
                    continue;
                int a = flow_add(n, cell_owner(&g, cell, s->par), oth, seg1,
                                 s->dir);
                dep_done(n, &done[rk], a);
                flow_dep_sent(n, ag[rk], a);
                ag[rk] = a;
                own[rk] = a;
            }
        /* all-gather along d1 */
        ring_phase(n, &g, s, 1, seg1, done, NULL, ag, split, sub, prev, cur,
                   last);
        }
    }
    ici_tmp_free(m, prev);
    ici_tmp_free(m, cur);
    ici_tmp_free(m, last);
    ici_tmp_free(m, rs);
    ici_tmp_free(m, ag);
    ici_tmp_free(m, sub);
    ici_tmp_free(m, own);
    ici_tmp_free(m, done);
    grp_free(m, &g);
}

/* Links a dimension of the group drives per chip: both directions of a
 * ring that closes over wrap-around links, one of a line (out and back). */
static int dim_links(const allreduce_grp *g, int dim)
{
    int m = dim == 0 ? g->na : g->nb;
    return m < 2 ? 0 : g->close[dim] ? 2 : 1;
}

int allreduce_links(const ici *n, ici_mem *m, const int *cores, int ncores)
{
    ici_assert_group(n, m, cores, ncores);
    allreduce_grp g;
    grp_build(n, m, cores, ncores, &g);
    int links;
    if (!g.rect)
        links = g.na > 1 ? 2 : 0;
    else
        links = dim_links(&g, 0) + dim_links(&g, 1);
    grp_free(m, &g);
    return links;
}
