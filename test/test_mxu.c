/* The MXU: the cycle-by-cycle PE model and the fast model agree on cycles
 * and bits; both equal an independent reference matmul written here; the
 * values stay within the bf16 error bound of plain fp32 math; the timing
 * overheads are exactly those of docs/MXU.md; the CLI refuses bad input. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mxu/mxu.h"
#include "test/harness.h"
#include "emu/out/chart.h"
#include "emu/out/font.h"

static uint64_t rng(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float widen(bf16 b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Same value, NaNs compared as NaNs (their payloads follow the host). */
static int same_bits(float x, float y)
{
    if (isnan(x) || isnan(y))
        return isnan(x) && isnan(y);
    return bits(x) == bits(y);
}

/* The documented order, written independently of mxu/: per output, per
 * weight tile of `rows` K values, a column sum from +0.0 in k order; tile
 * sums added in tile order. */
static void ref_matmul(int rows, const bf16 *a, const bf16 *b, float *c,
                       int64_t m, int64_t k, int64_t n)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float acc = 0.0f;
            for (int64_t k0 = 0; k0 < k; k0 += rows) {
                float col = 0.0f;
                for (int64_t kk = k0; kk < k && kk < k0 + rows; kk++) {
                    float prod = widen(a[i * k + kk]) * widen(b[kk * n + j]);
                    col = col + prod;
                }
                acc = k0 == 0 ? col : acc + col;
            }
            c[i * n + j] = acc;
        }
}

/* Formula of docs/MXU.md, restated here from the timing diagram. */
static uint64_t doc_cycles(int R, int C, int64_t m, int64_t k, int64_t n)
{
    int64_t tiles = ((k + R - 1) / R) * ((n + C - 1) / C);
    int64_t per = m > R ? m : R;
    return (uint64_t)((tiles - 1) * per + m + 2 * R + C - 2);
}

typedef struct {
    int64_t m, k, n;
    bf16 *a, *b;
    float *c_pe, *c_fast, *c_ref;
} prob;

static int prob_make(prob *p, int64_t m, int64_t k, int64_t n, uint64_t *s)
{
    p->m = m;
    p->k = k;
    p->n = n;
    p->a = malloc((size_t)(m * k) * sizeof(bf16));
    p->b = malloc((size_t)(k * n) * sizeof(bf16));
    p->c_pe = malloc((size_t)(m * n) * sizeof(float));
    p->c_fast = malloc((size_t)(m * n) * sizeof(float));
    p->c_ref = malloc((size_t)(m * n) * sizeof(float));
    if (!p->a || !p->b || !p->c_pe || !p->c_fast || !p->c_ref)
        return -1;
    bf16_random_fill(p->a, (size_t)(m * k), s);
    bf16_random_fill(p->b, (size_t)(k * n), s);
    return 0;
}

static void prob_free(prob *p)
{
    free(p->a);
    free(p->b);
    free(p->c_pe);
    free(p->c_fast);
    free(p->c_ref);
}

/* Runs both models and the reference; returns 1 when all agree. */
static int run_all(th_ctx *t, const mxu_params *mp, prob *p)
{
    uint64_t cy_pe = 0, cy_fast = 0;
    tpu_error e;
    tpu_status st = mxu_pe_matmul(mp, p->a, p->b, p->c_pe, p->m, p->k, p->n,
                                  &cy_pe, &e);
    if (!TH_CHECKF(t, st == TPU_OK, "pe failed: %s", e.msg))
        return 0;
    mxu_fast_matmul(mp, p->a, p->b, p->c_fast, p->m, p->k, p->n, &cy_fast);
    ref_matmul(mp->rows, p->a, p->b, p->c_ref, p->m, p->k, p->n);
    int ok = 1;
    ok &= TH_CHECKF(t, cy_pe == cy_fast,
                    "%dx%d m=%lld k=%lld n=%lld: pe %llu cycles, fast %llu",
                    mp->rows, mp->cols, (long long)p->m, (long long)p->k,
                    (long long)p->n, (unsigned long long)cy_pe,
                    (unsigned long long)cy_fast);
    ok &= TH_CHECKF(t, cy_fast == doc_cycles(mp->rows, mp->cols, p->m, p->k,
                                             p->n),
                    "fast cycles %llu differ from the documented formula",
                    (unsigned long long)cy_fast);
    for (int64_t i = 0; i < p->m * p->n; i++) {
        if (!same_bits(p->c_pe[i], p->c_fast[i]) ||
            !same_bits(p->c_pe[i], p->c_ref[i])) {
            TH_FAIL(t, "%dx%d m=%lld k=%lld n=%lld: C[%lld] pe %08x fast %08x "
                       "ref %08x", mp->rows, mp->cols, (long long)p->m,
                    (long long)p->k, (long long)p->n, (long long)i,
                    (unsigned)bits(p->c_pe[i]), (unsigned)bits(p->c_fast[i]),
                    (unsigned)bits(p->c_ref[i]));
            return 0;
        }
    }
    return ok;
}

static int64_t pick_dim(uint64_t *s)
{
    static const int64_t special[] = {1, 2, 127, 128, 129, 256, 1000};
    if (rng(s) % 3 == 0)
        return special[rng(s) % (sizeof special / sizeof special[0])];
    return 1 + (int64_t)(rng(s) % 1000);
}

static void equiv_on(th_ctx *t, int R, int C, int shapes, double budget,
                     uint64_t seed, int *count)
{
    mxu_params mp = {R, C};
    uint64_t s = seed;
    int done = 0, tries = 0;
    while (done < shapes && tries < shapes * 1000) {
        tries++;
        int64_t m = pick_dim(&s), k = pick_dim(&s), n = pick_dim(&s);
        /* PE work plus the reference's multiply-adds, in PE updates. */
        double work = (double)mxu_fast_cycles(&mp, m, k, n) * (R * C + R + C) +
                      3.0 * (double)m * (double)k * (double)n;
        if (work > budget)
            continue;
        prob p;
        if (!TH_CHECK(t, prob_make(&p, m, k, n, &s) == 0)) {
            prob_free(&p);
            return;
        }
        int ok = run_all(t, &mp, &p);
        prob_free(&p);
        done++;
        if (!ok)
            break;
    }
    *count += done;
    TH_CHECKF(t, done == shapes, "%dx%d: only %d of %d shapes fit the budget",
              R, C, done, shapes);
}

void th_suite_mxu(th_ctx *t)
{
    int small = th_asan();

    th_case(t, "PE == fast == reference on fixed edge shapes (8x16, 4x4)");
    {
        static const int64_t shapes[][3] = {
            {1, 1, 1},   {1, 127, 1},   {127, 128, 129}, {128, 129, 127},
            {129, 1, 256}, {256, 256, 1}, {3, 1000, 5},  {1000, 7, 3},
            {5, 17, 33}, {8, 16, 16},   {9, 8, 15},     {2, 3, 1000}};
        int Rs[] = {8, 4}, Cs[] = {16, 4};
        uint64_t s = 99;
        for (int a = 0; a < 2; a++) {
            mxu_params mp = {Rs[a], Cs[a]};
            for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
                prob p;
                if (prob_make(&p, shapes[i][0], shapes[i][1], shapes[i][2],
                              &s) == 0)
                    run_all(t, &mp, &p);
                prob_free(&p);
            }
        }
    }

    th_case(t, "PE == fast == reference on >= 300 random shapes, 4 arrays");
    {
        int count = 0;
        double f = small ? 0.1 : 1.0;
        equiv_on(t, 1, 1, 90, 4e5 * f, 1, &count);
        equiv_on(t, 4, 4, 90, 2e6 * f, 2, &count);
        equiv_on(t, 8, 16, 90, 6e6 * f, 3, &count);
        equiv_on(t, 128, 128, small ? 12 : 40, 1.2e8 * f, 4, &count);
        TH_CHECKF(t, count >= (small ? 282 : 310), "only %d shapes", count);
    }

    th_case(t, "the PE model on the real 128x128 array, K and N over 128");
    {
        mxu_params mp = {128, 128};
        static const int64_t shapes[][3] = {
            {1, 129, 129}, {127, 256, 129}, {129, 128, 256}, {200, 300, 130}};
        uint64_t s = 5;
        for (size_t i = 0; i < (small ? 2u : 4u); i++) {
            prob p;
            if (prob_make(&p, shapes[i][0], shapes[i][1], shapes[i][2], &s) ==
                0)
                run_all(t, &mp, &p);
            prob_free(&p);
        }
    }

    th_case(t, "within the bf16 error bound of plain fp32 math");
    {
        mxu_params mp = {8, 16};
        int64_t m = 33, k = 300, n = 40;
        uint64_t s = 17;
        float *af = malloc((size_t)(m * k) * sizeof(float));
        float *bfp = malloc((size_t)(k * n) * sizeof(float));
        bf16 *a = malloc((size_t)(m * k) * sizeof(bf16));
        bf16 *b = malloc((size_t)(k * n) * sizeof(bf16));
        float *c = malloc((size_t)(m * n) * sizeof(float));
        float *c2 = malloc((size_t)(m * n) * sizeof(float));
        if (TH_CHECK(t, af && bfp && a && b && c && c2)) {
            for (int64_t i = 0; i < m * k; i++) {
                af[i] = (float)((double)(rng(&s) >> 11) * 0x1p-53 * 2 - 1);
                a[i] = bf16_from_f32(af[i]);
            }
            for (int64_t i = 0; i < k * n; i++) {
                bfp[i] = (float)((double)(rng(&s) >> 11) * 0x1p-53 * 2 - 1);
                b[i] = bf16_from_f32(bfp[i]);
            }
            mxu_fast_matmul(&mp, a, b, c, m, k, n, NULL);
            tpu_error e;
            TH_CHECK(t, mxu_pe_matmul(&mp, a, b, c2, m, k, n, NULL, &e) ==
                            TPU_OK);
            TH_CHECK(t, memcmp(c, c2, (size_t)(m * n) * sizeof(float)) == 0);
            /* Inputs rounded to bf16 carry a relative error <= 2^-9 each,
             * so a product <= 2^-8 + 2^-18; each fp32 sum of k terms adds
             * at most k * 2^-24 of sum |ab| (products exact). */
            double worst = 0;
            int bad = 0;
            for (int64_t i = 0; i < m && !bad; i++)
                for (int64_t j = 0; j < n && !bad; j++) {
                    float plain = 0.0f;
                    double mag = 0;
                    for (int64_t kk = 0; kk < k; kk++) {
                        plain += af[i * k + kk] * bfp[kk * n + j];
                        mag += fabs((double)af[i * k + kk] * bfp[kk * n + j]);
                    }
                    double bound = mag * (0x1p-8 + 0x1p-18) * 1.01 +
                                   2.0 * (double)(k + 2) * 0x1p-24 * mag * 1.01;
                    double d = fabs((double)c[i * n + j] - (double)plain);
                    if (d / bound > worst)
                        worst = d / bound;
                    bad = !TH_CHECKF(t, d <= bound,
                                     "C[%lld,%lld] %g vs fp32 %g: |d| %g > %g",
                                     (long long)i, (long long)j,
                                     (double)c[i * n + j], (double)plain, d,
                                     bound);
                }
            /* The bound must be tight enough to mean something. */
            TH_CHECKF(t, worst > 0.01, "error uses %.4f of the bound", worst);
        }
        free(af);
        free(bfp);
        free(a);
        free(b);
        free(c);
        free(c2);
    }

    th_case(t, "specials: inf, NaN, subnormal, signed zero, overflow");
    {
        /* A 4x4 array, K = 6 over two tiles, N = 5 over two tiles. */
        mxu_params mp = {4, 4};
        int64_t m = 5, k = 6, n = 5;
        bf16 a[30], b[30];
        float c_pe[25], c_fast[25], c_ref[25];
        uint64_t s = 3;
        bf16_random_fill(a, 30, &s);
        bf16_random_fill(b, 30, &s);
        a[0] = 0x7f80;          /* +inf */
        a[7] = 0x7fc1;          /* NaN */
        a[13] = 0x0001;         /* smallest bf16 subnormal */
        b[6] = 0x3f80;
        a[14] = 0x8000;         /* -0 */
        a[20] = 0x7f7f;         /* max finite: overflows when summed */
        a[21] = 0x7f7f;
        b[0 * n + 4] = 0x8000;  /* -0 weight meets the +inf -> NaN */
        b[1 * n + 0] = 0x7f00;
        b[1 * n + 1] = 0x7f00;
        tpu_error e;
        uint64_t c1, c2;
        TH_CHECK(t, mxu_pe_matmul(&mp, a, b, c_pe, m, k, n, &c1, &e) == TPU_OK);
        mxu_fast_matmul(&mp, a, b, c_fast, m, k, n, &c2);
        ref_matmul(mp.rows, a, b, c_ref, m, k, n);
        TH_CHECK(t, c1 == c2);
        int nan = 0, inf = 0, all = 1;
        for (int i = 0; i < 25; i++) {
            all &= same_bits(c_pe[i], c_fast[i]) && same_bits(c_pe[i], c_ref[i]);
            nan += isnan(c_pe[i]) != 0;
            inf += isinf(c_pe[i]) != 0;
        }
        TH_CHECK(t, all);
        TH_CHECKF(t, nan >= 6 && inf >= 1, "nan %d inf %d", nan, inf);
        /* A subnormal input is not flushed: 2^-133 * 1.0 survives. */
        bf16 sa = 0x0001, sb = 0x3f80;
        float sc = 0, sc2 = 0;
        mxu_params one = {1, 1};
        TH_CHECK(t, mxu_pe_matmul(&one, &sa, &sb, &sc, 1, 1, 1, NULL, &e) ==
                        TPU_OK);
        mxu_fast_matmul(&one, &sa, &sb, &sc2, 1, 1, 1, NULL);
        TH_CHECKF(t, bits(sc) == 0x00010000u && bits(sc2) == 0x00010000u,
                  "subnormal product %08x %08x", (unsigned)bits(sc),
                  (unsigned)bits(sc2));
        /* Column sums start at +0: (-0) x 1 gives +0, not -0. */
        sa = 0x8000;
        TH_CHECK(t, mxu_pe_matmul(&one, &sa, &sb, &sc, 1, 1, 1, NULL, &e) ==
                        TPU_OK);
        TH_CHECK(t, bits(sc) == 0);
    }

    th_case(t, "one tile: fill, drain and first load cost 2R + C - 2");
    {
        static const int arr[][2] = {{1, 1}, {4, 4}, {8, 16}, {16, 8},
                                     {128, 128}};
        uint64_t s = 11;
        for (size_t i = 0; i < sizeof arr / sizeof arr[0]; i++) {
            mxu_params mp = {arr[i][0], arr[i][1]};
            int64_t ms[] = {1, 2, 7, 300};
            for (int j = 0; j < 4; j++) {
                prob p;
                uint64_t cy = 0;
                tpu_error e;
                if (prob_make(&p, ms[j], mp.rows, mp.cols, &s) == 0 &&
                    mxu_pe_matmul(&mp, p.a, p.b, p.c_pe, p.m, p.k, p.n, &cy,
                                  &e) == TPU_OK)
                    TH_CHECKF(t, cy == (uint64_t)(ms[j] + 2 * mp.rows +
                                                  mp.cols - 2),
                              "%dx%d m=%lld: %llu cycles", mp.rows, mp.cols,
                              (long long)ms[j], (unsigned long long)cy);
                prob_free(&p);
            }
            TH_CHECK(t, mxu_latency_cycles(&mp) ==
                            (uint64_t)(2 * mp.rows + mp.cols - 2));
        }
    }

    th_case(t, "back to back: each extra tile costs max(M, R), no bubble");
    {
        static const int arr[][2] = {{4, 4}, {8, 16}, {128, 128}};
        uint64_t s = 13;
        for (size_t i = 0; i < sizeof arr / sizeof arr[0]; i++) {
            mxu_params mp = {arr[i][0], arr[i][1]};
            int64_t ms[] = {1, mp.rows - 1 > 0 ? mp.rows - 1 : 1, mp.rows,
                            mp.rows + 1, 3 * mp.rows};
            for (int j = 0; j < 5; j++) {
                uint64_t cy[3] = {0, 0, 0};
                for (int tiles = 1; tiles <= 3; tiles++) {
                    prob p;
                    tpu_error e;
                    /* tiles along K for 2, along N for 3: both stream */
                    int64_t k = tiles == 2 ? 2 * mp.rows : mp.rows;
                    int64_t n = tiles == 3 ? 3 * mp.cols : mp.cols;
                    if (prob_make(&p, ms[j], k, n, &s) == 0)
                        mxu_pe_matmul(&mp, p.a, p.b, p.c_pe, p.m, k, n,
                                      &cy[tiles - 1], &e);
                    prob_free(&p);
                }
                uint64_t per = mxu_tile_cycles(&mp, ms[j]);
                TH_CHECKF(t, per == (uint64_t)(ms[j] > mp.rows ? ms[j]
                                                               : mp.rows),
                          "tile cycles %llu", (unsigned long long)per);
                TH_CHECKF(t, cy[1] - cy[0] == per && cy[2] - cy[0] == 2 * per,
                          "%dx%d m=%lld: 1/2/3 tiles %llu/%llu/%llu",
                          mp.rows, mp.cols, (long long)ms[j],
                          (unsigned long long)cy[0], (unsigned long long)cy[1],
                          (unsigned long long)cy[2]);
            }
        }
    }

    th_case(t, "utilization: M=8192, K=N=128 streams one row per cycle");
    {
        mxu_params mp = {128, 128};
        prob p;
        uint64_t s = 21, cy = 0, cy1 = 0;
        tpu_error e;
        int64_t m = small ? 2048 : 8192;
        if (TH_CHECK(t, prob_make(&p, m, 128, 128, &s) == 0)) {
            TH_CHECK(t, mxu_pe_matmul(&mp, p.a, p.b, p.c_pe, m, 128, 128, &cy,
                                      &e) == TPU_OK);
            TH_CHECK(t, mxu_pe_matmul(&mp, p.a, p.b, p.c_pe, m - 1, 128, 128,
                                      &cy1, &e) == TPU_OK);
        }
        prob_free(&p);
        /* Steady state: one more row costs exactly one cycle. */
        TH_CHECKF(t, cy - cy1 == 1, "marginal row costs %llu cycles",
                  (unsigned long long)(cy - cy1));
        /* The whole product pays the fixed 2R + C - 2 = 382 once: 95.5% of
         * peak at M = 8192 (fill + drain alone are 3.1%, docs/MXU.md). */
        TH_CHECKF(t, cy == (uint64_t)m + 382, "%llu cycles",
                  (unsigned long long)cy);
        TH_CHECKF(t, m < 8192 || (double)m / (double)cy > 0.95,
                  "utilization %.4f", (double)m / (double)cy);
        /* In a back-to-back stream (what the engine issues) a product of
         * M = 8192 rows occupies the array within 2% of M cycles. */
        uint64_t stream = mxu_fast_cycles(&mp, 8192, 128, 128 * 64);
        double per = (double)stream / 64.0;
        TH_CHECKF(t, per <= 8192 * 1.02, "stream: %.1f cycles per product",
                  per);
        TH_CHECK(t, mxu_tile_cycles(&mp, 8192) == 8192);
    }

    th_case(t, "zero sizes, bad arrays and negative sizes");
    {
        mxu_params mp = {4, 4};
        float c[6] = {1, 1, 1, 1, 1, 1};
        bf16 x[6] = {0};
        tpu_error e;
        uint64_t cy = 99;
        TH_CHECK(t, mxu_fast_cycles(&mp, 0, 5, 5) == 0);
        TH_CHECK(t, mxu_fast_cycles(&mp, 5, 0, 5) == 0);
        TH_CHECK(t, mxu_pe_matmul(&mp, x, x, c, 2, 0, 3, &cy, &e) == TPU_OK);
        TH_CHECK(t, cy == 0 && c[0] == 0.0f && c[5] == 0.0f);
        TH_CHECK(t, mxu_pe_matmul(&mp, x, x, c, -1, 2, 3, &cy, &e) ==
                        TPU_ERR_INPUT);
        mxu_params bad = {0, 4};
        TH_CHECK(t, mxu_pe_matmul(&bad, x, x, c, 1, 1, 1, &cy, &e) ==
                        TPU_ERR_INPUT);
    }
}

static void copy_out(char *dst, size_t cap, const char *src)
{
    size_t len = strlen(src);
    if (len >= cap)
        len = cap - 1;
    memcpy(dst, src, len);
    dst[len] = '\0';
}

static void mxu_sets(th_ctx *t)
{
    th_case(t, "mxu --set: keys that cannot change one product's cycles on one MXU "
               "(clock_hz, mxus_per_core, ...) are refused, exit 2 on one line; "
               "mxu.rows and mxu.cols still work");
    th_cmd_result *c = malloc(sizeof *c);
    if (!c)
        return;
    static const char *const refused[] = {"clock_hz=2e9", "mxus_per_core=2",
                                          "mxu.op_overhead_cycles=100",
                                          "hbm.bandwidth_gbs=900", "mxu.row=8"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        char key[64];
        snprintf(key, sizeof key, "%.*s", (int)strcspn(refused[i], "="), refused[i]);
        th_run(c, "%s mxu --m 8 --k 8 --n 8 --set %s", th_bin(), refused[i]);
        const char *nl = strchr(c->err, '\n');
        TH_CHECKF(t, c->status == 2 && c->out[0] == 0 &&
                         strncmp(c->err, "tpuemu: error: mxu: --set ", 26) == 0 &&
                         strstr(c->err, key) && strstr(c->err, "mxu.rows and mxu.cols") &&
                         nl && nl[1] == 0,
                  "--set %s: exit %d, out '%s', err '%s'", refused[i], c->status, c->out,
                  c->err);
    }
    /* the array's size changes the cycles: 4 tiles of 4x4,
     * (T-1) max(M,R) + M + 2R + C - 2 = 24 + 8 + 8 + 4 - 2 */
    th_run(c, "%s mxu --m 8 --k 8 --n 8 --set mxu.rows=4 --set mxu.cols=4", th_bin());
    TH_CHECKF(t, c->status == 0 && strstr(c->out, "\"cycles\":42,"), "%d %s %s", c->status,
              c->out, c->err);
    th_run(c, "%s mxu --help", th_bin());
    TH_CHECK(t, strstr(c->out, "are refused") != NULL);
    free(c);
}

void th_suite_mxu_cli(th_ctx *t)
{
    th_cmd_result *r = malloc(sizeof *r);
    if (!TH_CHECK(t, r != NULL))
        return;
    const char *bin = th_bin();

    th_case(t, "pe and fast print the same cycles and checksum");
    {
        char pe_out[512], fast_out[512];
        th_run(r, "%s mxu --m 130 --k 257 --n 129 --model pe --seed 42", bin);
        TH_CHECKF(t, r->status == 0, "exit %d: %s", r->status, r->err);
        copy_out(pe_out, sizeof pe_out, r->out);
        th_run(r, "%s mxu --m 130 --k 257 --n 129 --model fast --seed 42", bin);
        TH_CHECKF(t, r->status == 0, "exit %d: %s", r->status, r->err);
        copy_out(fast_out, sizeof fast_out, r->out);
        /* Recompute the expected line from the library. */
        int64_t m = 130, k = 257, n = 129;
        bf16 *a = malloc((size_t)(m * k) * sizeof *a);
        bf16 *b = malloc((size_t)(k * n) * sizeof *b);
        float *c = malloc((size_t)(m * n) * sizeof *c);
        if (TH_CHECK(t, a && b && c)) {
            uint64_t s = 42, cy;
            bf16_random_fill(a, (size_t)(m * k), &s);
            bf16_random_fill(b, (size_t)(k * n), &s);
            mxu_params mp = {128, 128};
            mxu_fast_matmul(&mp, a, b, c, m, k, n, &cy);
            char want[512];
            snprintf(want, sizeof want,
                     "{\"m\":130,\"k\":257,\"n\":129,\"model\":\"%%s\","
                     "\"gen\":\"v3\",\"cycles\":%llu,\"checksum\":\"%016llx\"}\n",
                     (unsigned long long)cy,
                     (unsigned long long)mxu_checksum(c, (size_t)(m * n)));
            char w_pe[512], w_fast[512];
            snprintf(w_pe, sizeof w_pe, want, "pe");
            snprintf(w_fast, sizeof w_fast, want, "fast");
            TH_CHECKF(t, strcmp(pe_out, w_pe) == 0, "got %s want %s", pe_out,
                      w_pe);
            TH_CHECKF(t, strcmp(fast_out, w_fast) == 0, "got %s want %s",
                      fast_out, w_fast);
        }
        free(a);
        free(b);
        free(c);
        th_run(r, "%s mxu --m 5 --k 5 --n 5 --gen v2 --seed 1", bin);
        TH_CHECKF(t, r->status == 0 && strstr(r->out, "\"gen\":\"v2\""),
                  "v2: %s", r->out);
        th_run(r, "%s mxu --help", bin);
        TH_CHECK(t, r->status == 0 && strstr(r->out, "usage: tpuemu mxu"));
    }

    th_case(t, "bad input exits 2 with one clear error line");
    {
        static const char *bad[] = {
            "",
            "--k 4 --n 4",
            "--m 4 --n 4",
            "--m 4 --k 4",
            "--m 0 --k 4 --n 4",
            "--m 4 --k 0 --n 4",
            "--m 4 --k 4 --n -1",
            "--m abc --k 4 --n 4",
            "--m 4x --k 4 --n 4",
            "--m 4 --k 4 --n 4.5",
            "--m 99999999999999999999 --k 4 --n 4",
            "--m 2000000 --k 4 --n 4",
            "--m 1048576 --k 1048576 --n 1",
            "--m 100000 --k 100000 --n 100",
            "--m 1048576 --k 1024 --n 1024",
            "--m 4096 --k 4096 --n 16385", /* 2^38 + 2^24 multiply-adds */
            "--m 100000 --k 2048 --n 1024 --model pe",
            "--m 4 --k 4 --n 4 --model slow",
            "--m 4 --k 4 --n 4 --gen v5",
            "--m 4 --k 4 --n 4 --seed -1",
            "--m 4 --k 4 --n 4 --seed x",
            "--m 4 --k 4 --n",
            "--m 4 --k 4 --n 4 --frobnicate",
            "--m 4 --k 4 --n 4 --set mxu.rows=0",
            "--m 4 --k 4 --n 4 --set nonsense",
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            th_run(r, "%s mxu %s", bin, bad[i]);
            TH_CHECKF(t, r->status == 2, "'%s': exit %d", bad[i], r->status);
            TH_CHECKF(t, strncmp(r->err, "tpuemu: error: ", 15) == 0 &&
                             strchr(r->err, '\n') ==
                                 r->err + strlen(r->err) - 1,
                      "'%s': stderr '%s'", bad[i], r->err);
            TH_CHECKF(t, r->out[0] == '\0', "'%s': stdout '%s'", bad[i],
                      r->out);
        }
    }
    th_case(t, "--m=4 is --m 4; --m twice is refused");
    {
        char a[256];
        th_run(r, "%s mxu --m 4 --k 5 --n 6 --seed 3", bin);
        copy_out(a, sizeof a, r->out);
        th_run(r, "%s mxu --m=4 --k=5 --n 6 --seed=3", bin);
        TH_CHECKF(t, r->status == 0 && strcmp(a, r->out) == 0, "%s / %s", a,
                  r->out);
        th_run(r, "%s mxu --m 4 --k 5 --n 6 --m=8", bin);
        TH_CHECKF(t, r->status == 2 && strstr(r->err, "--m: given twice"),
                  "exit %d: %s", r->status, r->err);
    }

    th_case(t, "the fast model's limit is 2^38 multiply-adds, named");
    th_run(r, "%s mxu --m 4096 --k 4096 --n 16385", bin);
    TH_CHECKF(t, r->status == 2 && strstr(r->err, "limit of 2^38"),
              "exit %d: %s", r->status, r->err);
    th_run(r, "%s mxu --help", bin);
    TH_CHECK(t, strstr(r->out, "at most 2^38") != NULL);
    free(r);
    mxu_sets(t);
}
