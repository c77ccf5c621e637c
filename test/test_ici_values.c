/* The values of an all-reduce in the order the modelled algorithm sums
 * them (docs/ICI.md): a reference kept with the tests, since the library
 * needs only the time (functional mode sums its partials in core order,
 * emu/fx/fx_coll.c).  The group layout is rebuilt here from ici.h's
 * public topology, and checked against the library's through
 * ici_allreduce_links. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "emu/params.h"
#include "interconnect/ici.h"
#include "test/harness.h"

/* A group's chips on a grid na x nb: the rectangle of distinct x and y
 * when the chips fill it, else one ring in the order the group lists
 * them (interconnect/allreduce.c's layout). */
typedef struct {
    int na, nb, rect, close[2];
    int grid[4096], has[4096];
} ref_grp;

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

static int ring_closes(const int *c, int m, int d, int wrap)
{
    if (m < 2 || !wrap || d % m != 0)
        return 0;
    for (int i = 0; i < m; i++)
        if (c[i] != c[0] + i * (d / m))
            return 0;
    return 1;
}

/* A line's ring out on the even places and back on the odd ones. */
static void line_order(int *c, int m)
{
    int t[4096], k = 0;
    for (int i = 0; i < m; i += 2)
        t[k++] = c[i];
    for (int i = (m - 1) % 2 == 1 ? m - 1 : m - 2; i >= 1; i -= 2)
        t[k++] = c[i];
    memcpy(c, t, (size_t)m * sizeof(int));
}

static void grp_build(const ici *n, const int *cores, int ncores, ref_grp *g)
{
    int dx = ici_dim_x(n), nchips = ici_num_cores(n) / 2;
    int *mask = calloc((size_t)nchips, sizeof(int));
    int chips[4096], xs[4096], ys[4096], nc = 0;
    for (int i = 0; i < ncores; i++) {
        int ch = ici_chip_of_core(n, cores[i]);
        if (!mask[ch])
            chips[nc++] = ch;
        mask[ch] |= 1 << (cores[i] & 1);
    }
    for (int i = 0; i < nc; i++) {
        xs[i] = chips[i] % dx;
        ys[i] = chips[i] / dx;
    }
    int nx = uniq_sorted(xs, nc), ny = uniq_sorted(ys, nc);
    g->rect = nx * ny == nc;
    g->close[0] = g->rect && ring_closes(xs, nx, dx, ici_wraps(n, 0));
    g->close[1] =
        g->rect && ring_closes(ys, ny, ici_dim_y(n), ici_wraps(n, 1));
    if (g->rect) {
        if (!g->close[0])
            line_order(xs, nx);
        if (!g->close[1])
            line_order(ys, ny);
    }
    g->na = g->rect ? nx : nc;
    g->nb = g->rect ? ny : 1;
    for (int ib = 0; ib < g->nb; ib++)
        for (int ia = 0; ia < g->na; ia++)
            g->grid[ia + g->na * ib] =
                g->rect ? xs[ia] + ys[ib] * dx : chips[ia];
    for (int i = 0; i < nc; i++)
        g->has[i] = mask[g->grid[i]];
    free(mask);
}

/* ici_allreduce_links from the layout. */
static int grp_links(const ref_grp *g)
{
    if (!g->rect)
        return g->na > 1 ? 2 : 0;
    int l = 0;
    for (int d = 0; d < 2; d++) {
        int m = d == 0 ? g->na : g->nb;
        l += m < 2 ? 0 : g->close[d] ? 2 : 1;
    }
    return l;
}

/* Stream: reduce-scatter along d1 then d2, rings running direction dir. */
typedef struct {
    int d1, dir;
} ref_stream;

static int grp_streams(const ref_grp *g, ref_stream *s)
{
    if (g->na > 1 && g->nb > 1) {
        s[0] = (ref_stream){0, 1};
        s[1] = (ref_stream){0, -1};
        s[2] = (ref_stream){1, 1};
        s[3] = (ref_stream){1, -1};
        return 4;
    }
    if (g->na > 1 || g->nb > 1) {
        int d = g->na > 1 ? 0 : 1;
        s[0] = (ref_stream){d, 1};
        s[1] = (ref_stream){d, -1};
        return 2;
    }
    return 0;
}

static int ring_pos(int r, int dir, int n)
{
    r %= n;
    return dir > 0 ? r : (n - r) % n;
}

static int stream_cell(const ref_grp *g, const ref_stream *s, int r1, int r2)
{
    int n1 = s->d1 == 0 ? g->na : g->nb, n2 = s->d1 == 0 ? g->nb : g->na;
    int p1 = ring_pos(r1, s->dir, n1), p2 = ring_pos(r2, s->dir, n2);
    return s->d1 == 0 ? p1 + g->na * p2 : p2 + g->na * p1;
}

/* The chip's contribution: even core first, then the odd one's. */
static float cell_value(const ref_grp *g, int cell, const int *slot,
                        float **bufs, size_t e)
{
    int chip = g->grid[cell], first = 1;
    float v = 0;
    for (int c = 0; c < 2; c++) {
        if (!(g->has[cell] & (1 << c)))
            continue;
        float x = bufs[slot[2 * chip + c]][e];
        v = first ? x : v + x;
        first = 0;
    }
    return v;
}

/* Sums bufs[0..ncores) element-wise into every buffer.  Each element
 * belongs to one stream, one d1 segment g1 and one d2 sub-segment g2:
 * reduce-scatter along d1 starts segment g1 at ring rank g1 and adds
 * ranks g1+1, g1+2, ... in turn; along d2 the partial sums of g2 are
 * added from rank g2 on the same way; the all-gathers copy, so every
 * core ends with the same bits. */
static void ref_allreduce_values(const ici *n, const int *cores, int ncores,
                                 float **bufs, size_t len)
{
    if (ncores < 2 || len == 0)
        return;
    int *slot = calloc((size_t)ici_num_cores(n), sizeof(int));
    for (int i = 0; i < ncores; i++)
        slot[cores[i]] = i;
    ref_grp *g = malloc(sizeof *g);
    grp_build(n, cores, ncores, g);
    ref_stream st[4];
    int ns = grp_streams(g, st);
    if (ns == 0) {
        int chip = g->grid[0];
        float *a = bufs[slot[2 * chip]], *b = bufs[slot[2 * chip + 1]];
        for (size_t e = 0; e < len; e++)
            a[e] = b[e] = a[e] + b[e];
    }
    for (int si = 0; si < ns; si++) {
        const ref_stream *s = &st[si];
        int n1 = s->d1 == 0 ? g->na : g->nb, n2 = s->d1 == 0 ? g->nb : g->na;
        size_t s0 = len * (size_t)si / (size_t)ns;
        size_t s1 = len * (size_t)(si + 1) / (size_t)ns;
        for (int g1 = 0; g1 < n1; g1++) {
            size_t a0 = s0 + (s1 - s0) * (size_t)g1 / (size_t)n1;
            size_t a1 = s0 + (s1 - s0) * (size_t)(g1 + 1) / (size_t)n1;
            for (int g2 = 0; g2 < n2; g2++) {
                size_t b0 = a0 + (a1 - a0) * (size_t)g2 / (size_t)n2;
                size_t b1 = a0 + (a1 - a0) * (size_t)(g2 + 1) / (size_t)n2;
                for (size_t e = b0; e < b1; e++) {
                    float tot = 0;
                    for (int j = 0; j < n2; j++) {
                        int r2 = (g2 + j) % n2;
                        float part = 0;
                        for (int i = 0; i < n1; i++) {
                            int r1 = (g1 + i) % n1;
                            float v = cell_value(
                                g, stream_cell(g, s, r1, r2), slot, bufs, e);
                            part = i == 0 ? v : part + v;
                        }
                        tot = j == 0 ? part : tot + part;
                    }
                    for (int c = 0; c < ncores; c++)
                        bufs[c][e] = tot;
                }
            }
        }
    }
    free(g);
    free(slot);
}

static ici *mk(const char *name)
{
    tpu_params p;
    const tpu_system *s = tpu_system_find(name);
    tpu_params_default(&p, s->gen);
    return ici_new(&p.ici, s->dim_x, s->dim_y, s->full_pod);
}

void th_suite_ici_values(th_ctx *t)
{
    th_case(t, "the reference's layout drives the links ici_allreduce_links "
               "counts");
    const char *sys[] = {"v2-8", "v3-32", "v3-64", "v3-2048"};
    for (int si = 0; si < 4; si++) {
        ici *n = mk(sys[si]);
        int nc = ici_num_cores(n);
        int *c = malloc((size_t)nc * sizeof(int));
        for (int i = 0; i < nc; i++)
            c[i] = i;
        int sizes[] = {2, 3, 8, nc / 2, nc};
        for (int k = 0; k < 5; k++) {
            if (sizes[k] < 1 || sizes[k] > nc)
                continue;
            ref_grp *g = malloc(sizeof *g);
            grp_build(n, c, sizes[k], g);
            TH_CHECKF(t, grp_links(g) == ici_allreduce_links(n, c, sizes[k]),
                      "%s, %d cores: %d links, the library says %d", sys[si],
                      sizes[k], grp_links(g),
                      ici_allreduce_links(n, c, sizes[k]));
            free(g);
        }
        free(c);
        ici_free(n);
    }

    th_case(t, "the reference sums real buffers, identical on every core");
    const char *vs[] = {"v2-8", "v3-32", "v3-64"};
    for (int si = 0; si < 3; si++) {
        ici *n = mk(vs[si]);
        int nc = ici_num_cores(n);
        size_t len = 1000;
        float **bufs = malloc((size_t)nc * sizeof(float *));
        double *ref = calloc(len, sizeof(double));
        int *c = malloc((size_t)nc * sizeof(int));
        unsigned seed = 12345;
        for (int i = 0; i < nc; i++) {
            c[i] = i;
            bufs[i] = malloc(len * sizeof(float));
            for (size_t k = 0; k < len; k++) {
                seed = seed * 1103515245u + 12345u;
                bufs[i][k] = (float)((seed >> 8) % 2001) / 1000.0f - 1.0f;
                ref[k] += bufs[i][k];
            }
        }
        ref_allreduce_values(n, c, nc, bufs, len);
        int bad = 0, differ = 0;
        for (size_t k = 0; k < len; k++) {
            if (fabs(bufs[0][k] - ref[k]) > 1e-4 * (1 + fabs(ref[k])))
                bad++;
            for (int i = 1; i < nc; i++)
                if (memcmp(&bufs[i][k], &bufs[0][k], sizeof(float)))
                    differ++;
        }
        TH_CHECKF(t, bad == 0, "%s: %d wrong sums", vs[si], bad);
        TH_CHECKF(t, differ == 0, "%s: %d differing copies", vs[si], differ);
        /* a sub-group leaves the others alone */
        float keep = bufs[nc - 1][0];
        int sub[3] = {0, 1, 2};
        ref_allreduce_values(n, sub, 3, bufs, len);
        TH_CHECK(t, bufs[nc - 1][0] == keep);
        TH_CHECK(t, bufs[0][0] == bufs[2][0]);
        for (int i = 0; i < nc; i++)
            free(bufs[i]);
        free(bufs);
        free(ref);
        free(c);
        ici_free(n);
    }
}
