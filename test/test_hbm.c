/* HBM2 timing model and DMA engine: bandwidth near peak for long streams,
 * well below it for 64-byte strided reads, refresh and row-hit costs,
 * determinism, the closed form against the chunk-by-chunk reference, DMA
 * byte copies and in-flight limits, and the `probe hbm` command. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/params.h"
#include "hbm/dma.h"
#include "hbm/hbm.h"
#include "test/harness.h"

#define KIB 1024ull
#define MIB (1024ull * 1024ull)
#define GIB (1024ull * MIB)

static double gbps_of(const tpu_params *p, const hbm_xfer *x)
{
    hbm *h = hbm_new(&p->hbm);
    if (!h)
        return -1;
    double t = hbm_access(h, 0.0, x);
    hbm_free(h);
    return (double)x->chunk_bytes * (double)x->nchunks / t / 1e9;
}

static hbm_xfer block(uint64_t addr, uint64_t bytes)
{
    hbm_xfer x = {addr, bytes, 1, bytes, 0};
    return x;
}

static hbm_xfer gather(uint64_t addr, uint64_t chunk, uint64_t n,
                       uint64_t stride)
{
    hbm_xfer x = {addr, chunk, n, stride, 0};
    return x;
}

static void test_bandwidth(th_ctx *t)
{
    uint64_t big = th_asan() ? 256 * MIB : GIB;
    for (int gen = 2; gen <= 3; gen++) {
        tpu_params p;
        tpu_params_default(&p, gen);
        double peak = hbm_peak_bps(&p.hbm) / 1e9;
        th_case(t, gen == 2 ? "v2: a large sequential read reaches 85-100% "
                              "of the per-core peak"
                            : "v3: a large sequential read reaches 85-100% "
                              "of the per-core peak");
        hbm_xfer x = block(0, big);
        double g = gbps_of(&p, &x);
        TH_CHECKF(t, g >= 0.85 * peak && g <= peak,
                  "v%d: %.1f GB/s of %.0f", gen, g, peak);
        x.is_write = 1;
        double gw = gbps_of(&p, &x);
        TH_CHECKF(t, gw >= 0.85 * peak && gw <= peak, "write %.1f", gw);

        th_case(t, "64-byte strided reads reach visibly less than peak");
        const uint64_t strides[] = {1024, 4096, 65536, 262144};
        for (size_t i = 0; i < 4; i++) {
            hbm_xfer s = gather(0, 64, 16384, strides[i]);
            double gs = gbps_of(&p, &s);
            TH_CHECKF(t, gs > 0 && gs < 0.5 * peak,
                      "stride %llu: %.1f GB/s of %.0f",
                      (unsigned long long)strides[i], gs, peak);
        }
        th_case(t, gen == 2 ? "v2: a lone 64 B read is CL + tRCD + one "
                              "burst (the first activate spends no tFAW slot)"
                            : "v3: a lone 64 B read is CL + tRCD + one burst");
        {
            const hbm_params *hp = &p.hbm;
            double burst = hp->burst_beats / (hp->data_rate_gtps * 1e9);
            double want = (hp->t_cl_ns + hp->t_rcd_ns) * 1e-9 + burst;
            hbm *h = hbm_new(hp);
            hbm_xfer one = block(0, 64);
            double got = h ? hbm_access(h, 0.0, &one) : -1;
            hbm_free(h);
            TH_CHECKF(t, got > 0 && fabs(got - want) < 1e-12,
                      "%.3f ns, by hand %.3f", got * 1e9, want * 1e9);
        }
        /* Short transfers pay the activate and CAS latency. */
        hbm_xfer small = block(0, 1 * KIB);
        TH_CHECKF(t, gbps_of(&p, &small) < 0.25 * peak, "1 KiB: %.1f",
                  gbps_of(&p, &small));
    }

    th_case(t, "bandwidth grows with size until refresh, never passes peak");
    tpu_params p;
    tpu_params_default(&p, 3);
    double prev = 0, peak = hbm_peak_bps(&p.hbm) / 1e9;
    for (uint64_t b = KIB; b <= (th_asan() ? 64 * MIB : GIB); b *= 4) {
        hbm_xfer x = block(0, b);
        double g = gbps_of(&p, &x);
        /* Below one tREFI of streaming no refresh falls inside the block
         * (the first comes tREFI after power-on); beyond, one tRFC per
         * tREFI is lost and the curve settles near 93%. */
        if (b <= MIB)
            TH_CHECKF(t, g > prev, "%llu B: %.2f after %.2f",
                      (unsigned long long)b, g, prev);
        else
            TH_CHECKF(t, g >= 0.85 * peak, "%llu B: %.2f",
                      (unsigned long long)b, g);
        TH_CHECKF(t, g <= peak, "%llu B: %.2f", (unsigned long long)b, g);
        prev = g;
    }
}

/* A 16 MiB read never gets slower as the bandwidth grows, past 12 TB/s
 * per core too.  With Q activates in flight a visit takes max(its data,
 * tACT / Q) (Little's law), which never grows as bursts shrink; charging
 * each row miss its activate less the data of Q queued visits would
 * expose more as bursts shrink (2032 GB/s at 12000, 669 at 50000). */
static void test_faster_never_slower(th_ctx *t)
{
    th_case(t, "a faster data rate never makes a transfer slower (sequential "
               "and 64 B gathers, 450 GB/s to 100 TB/s per core)");
    static const double gbs[] = {450,   900,   2000,  4000,  8000,
                                 12000, 15000, 20000, 50000, 100000};
    const hbm_xfer xs[3] = {block(0, 16 * MIB), gather(0, 64, 16384, 256),
                            gather(0, 64, 16384, 1024)};
    for (int k = 0; k < 3; k++) {
        double prev = -1;
        for (size_t i = 0; i < sizeof gbs / sizeof gbs[0]; i++) {
            tpu_params p;
            tpu_params_default(&p, 3);
            hbm_set_peak_gbs(&p.hbm, gbs[i]);
            double g = gbps_of(&p, &xs[k]);
            TH_CHECKF(t, g >= prev * (1 - 1e-12),
                      "pattern %d: %.0f GB/s peak gives %.1f GB/s, %.0f gave "
                      "%.1f", k, gbs[i], g, i ? gbs[i - 1] : 0, prev);
            prev = g;
        }
    }
}

static void test_refresh_rows(th_ctx *t)
{
    tpu_params p;
    tpu_params_default(&p, 3);

    th_case(t, "refresh costs about tRFC / tREFI of a long stream");
    hbm_xfer x = block(0, 256 * MIB);
    tpu_params q = p;
    q.hbm.t_rfc_ns = 0;
    double with = gbps_of(&p, &x), without = gbps_of(&q, &x);
    double loss = 1 - with / without;
    double expect = p.hbm.t_rfc_ns / p.hbm.t_refi_ns;
    TH_CHECKF(t, loss > 0.7 * expect && loss < 1.5 * expect,
              "loss %.4f, tRFC/tREFI %.4f", loss, expect);
    hbm *h = hbm_new(&p.hbm);
    TH_CHECK(t, h != NULL);
    if (!h)
        return;
    hbm_access(h, 0, &x);
    hbm_stats st;
    hbm_get_stats(h, &st);
    TH_CHECKF(t, st.refreshes > 16, "%g refreshes", st.refreshes);
    TH_CHECK(t, st.bytes_read == 256.0 * MIB);

    th_case(t, "a refresh closes the rows: a re-read after it misses");
    hbm_reset(h);
    hbm_xfer tile = block(4 * KIB, 4 * KIB);
    double t1 = hbm_access(h, 0, &tile);
    double t2 = hbm_access(h, t1 + 1e-6, &tile) - (t1 + 1e-6);
    TH_CHECKF(t, t2 < t1, "row hits: second read %.3g s, first %.3g s", t2,
              t1);
    double later = t1 + 10.5 * p.hbm.t_refi_ns * 1e-9;
    double t3 = hbm_access(h, later, &tile) - later;
    TH_CHECKF(t, t3 > t2, "after refresh %.3g s, hit %.3g s", t3, t2);
    hbm_get_stats(h, &st);
    TH_CHECKF(t, st.activates > 0, "%g activates", st.activates);

    th_case(t, "transfers queue on shared channels, not on idle ones");
    hbm_reset(h);
    hbm_xfer a = block(0, 16 * MIB);
    double ta = hbm_access(h, 0, &a);
    double tb = hbm_access(h, 0, &a);
    TH_CHECKF(t, tb > 1.8 * ta, "second %.3g first %.3g", tb, ta);
    hbm_reset(h);
    /* 4 KiB stride, 256 B chunks: one channel only; another channel's
     * block started at the same time does not wait for it. */
    hbm_xfer one = gather(0, 256, 4096, 4096);
    hbm_xfer other = gather(256, 256, 64, 4096);
    double to = hbm_access(h, 0, &one);
    double tt = hbm_access(h, 0, &other);
    TH_CHECKF(t, tt < 0.1 * to, "other channel %.3g vs %.3g", tt, to);
    hbm_free(h);
}

static uint64_t lcg(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 17;
}

static void test_determinism(th_ctx *t)
{
    th_case(t, "same call sequence gives the same times, bit for bit");
    tpu_params p;
    tpu_params_default(&p, 3);
    hbm *a = hbm_new(&p.hbm), *b = hbm_new(&p.hbm);
    TH_CHECK(t, a && b);
    if (!a || !b) {
        hbm_free(a);
        hbm_free(b);
        return;
    }
    int n = th_asan() ? 500 : 5000, same = 1;
    for (int round = 0; round < 2; round++) {
        uint64_t s = 42;
        double ta = 0, tb = 0;
        for (int i = 0; i < n; i++) {
            hbm_xfer x;
            x.addr = lcg(&s) % (8 * GIB);
            x.chunk_bytes = 1 + lcg(&s) % 8192;
            x.nchunks = 1 + lcg(&s) % 64;
            x.stride = x.chunk_bytes + (lcg(&s) % 3) * (lcg(&s) % 70000);
            x.is_write = (int)(lcg(&s) & 1);
            double t0 = (double)(lcg(&s) % 1000) * 1e-8 + ta * 0.5;
            ta = hbm_access(a, t0, &x);
            tb = hbm_access(b, t0, &x);
            if (memcmp(&ta, &tb, sizeof ta) != 0 || !(ta >= t0))
                same = 0;
        }
        TH_CHECKF(t, same, "round %d diverged", round);
        hbm_reset(a); /* the replay after a reset equals a fresh model */
        hbm_free(b);
        b = hbm_new(&p.hbm);
        if (!b)
            break;
    }
    hbm_free(a);
    hbm_free(b);
}

/* emu/cost.c measures a DMA block size once for both directions. */
static void test_direction(th_ctx *t)
{
    th_case(t, "a write takes as long as the read of the same block");
    tpu_params p;
    tpu_params_default(&p, 3);
    hbm *r = hbm_new(&p.hbm), *w = hbm_new(&p.hbm);
    TH_CHECK(t, r && w);
    if (!r || !w) {
        hbm_free(r);
        hbm_free(w);
        return;
    }
    int n = th_asan() ? 500 : 5000, same = 1;
    uint64_t s = 7;
    double tr = 0;
    for (int i = 0; i < n; i++) {
        hbm_xfer x;
        x.addr = lcg(&s) % (8 * GIB);
        x.chunk_bytes = 1 + lcg(&s) % (i % 4 ? 8192 : 4 * MIB);
        x.nchunks = 1 + lcg(&s) % 64;
        x.stride = x.chunk_bytes + (lcg(&s) % 3) * (lcg(&s) % 70000);
        x.is_write = 0;
        double t0 = (double)(lcg(&s) % 1000) * 1e-8 + tr * 0.5;
        tr = hbm_access(r, t0, &x);
        x.is_write = 1;
        double tw = hbm_access(w, t0, &x);
        if (memcmp(&tr, &tw, sizeof tr) != 0)
            same = 0;
    }
    TH_CHECK(t, same);
    hbm_free(r);
    hbm_free(w);
}

static void test_reference(th_ctx *t)
{
    th_case(t, "closed form agrees with the chunk-by-chunk reference");
    tpu_params p;
    tpu_params_default(&p, 3);
    struct {
        uint64_t addr, chunk, n, stride;
    } cs[] = {
        {0, 64, 4096, 128},        {0, 64, 4096, 256},
        {0, 64, 4096, 1024},       {64, 64, 4096, 4096},
        {0, 64, 2048, 65536},      {0, 64, 1024, 262144},
        {100, 100, 4096, 300},     {0, 512, 2048, 768},
        {0, 4096, 1024, 8192},     {0, 3000, 1024, 12000},
        {0, 32768, 256, 65536},    {5, 20000, 200, 50000},
        {0, 16 * KIB, 64, 1 * MIB}, {0, 1 * MIB, 16, 1 * MIB},
        {0, 1, 4096, 2},           {3, 24, 4096, 40},
        {0, 17005, 100, 17086},
        /* banks taken in turn on one channel (4, 2), and strides that come
         * back to the same bank most times: where a closed form that
         * ignores tRC would be 80% fast */
        {0, 64, 16384, 65536},     {0, 64, 16384, 131072},
        {0, 4096, 1024, 65536},    {0, 64, 16384, 16640},
        {0, 64, 8192, 16128},      {0, 128, 8192, 65664},
    };
    hbm *h = hbm_new(&p.hbm);
    TH_CHECK(t, h != NULL);
    if (!h)
        return;
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        hbm_xfer x = gather(cs[i].addr, cs[i].chunk, cs[i].n, cs[i].stride);
        hbm_reset(h);
        double fast = hbm_access(h, 0, &x);
        hbm_reset(h);
        double ref = hbm_access_reference(h, 0, &x);
        double err = fabs(fast - ref) / ref;
        TH_CHECKF(t, err < 0.15,
                  "chunk %llu stride %llu: closed %.4g s, reference %.4g s "
                  "(%.1f%%)",
                  (unsigned long long)cs[i].chunk,
                  (unsigned long long)cs[i].stride, fast, ref, 100 * err);
    }
    hbm_free(h);
}

/* A strided block never costs more than reading the contiguous span it
 * lies in: chunks that share a burst share its cost (the memory moves
 * whole bursts), and a controller may always fetch the span and drop the
 * gaps.  Both the closed form and the reference, from power-on and after
 * other traffic left rows open. */
static void test_span_bound(th_ctx *t)
{
    th_case(t, "a strided block costs at most its contiguous span");
    static const struct {
        uint64_t addr, chunk, n, stride;
    } cs[] = {
        {0, 1, 1 << 20, 2},     {0, 1, 1 << 20, 64},  {7, 1, 100000, 65},
        {0, 4, 65536, 6},       {0, 32, 16384, 96},   {0, 64, 8192, 128},
        {0, 100, 4096, 300},    {0, 17005, 143, 17086},
        {5, 17029, 100, 17258}, {0, 3000, 1024, 3100}, {0, 8192, 64, 8300},
        {0, 64, 4096, 4096},    {64, 48, 3000, 1000},
    };
    for (int gen = 2; gen <= 3; gen++) {
        tpu_params p;
        tpu_params_default(&p, gen);
        hbm *h = hbm_new(&p.hbm);
        TH_CHECK(t, h != NULL);
        if (!h)
            return;
        for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
            uint64_t span = (cs[i].n - 1) * cs[i].stride + cs[i].chunk;
            hbm_xfer x = gather(cs[i].addr, cs[i].chunk, cs[i].n,
                                cs[i].stride);
            hbm_xfer y = block(cs[i].addr, span);
            hbm_xfer warm = block(cs[i].addr + 3 * KIB, 64 * KIB);
            for (int w = 0; w < 2; w++) {
                double ts, tr, tc;
                hbm_reset(h);
                if (w)
                    hbm_access(h, 0, &warm);
                ts = hbm_access(h, 0, &x);
                hbm_reset(h);
                if (w)
                    hbm_access(h, 0, &warm);
                tc = hbm_access(h, 0, &y);
                hbm_reset(h);
                if (w)
                    hbm_access(h, 0, &warm);
                tr = cs[i].n <= 200000 ? hbm_access_reference(h, 0, &x) : 0;
                TH_CHECKF(t, ts <= tc * (1 + 1e-9) && tr <= tc * (1 + 1e-9),
                          "v%d chunk %llu stride %llu%s: closed %.4g s, "
                          "reference %.4g s, span %.4g s",
                          gen, (unsigned long long)cs[i].chunk,
                          (unsigned long long)cs[i].stride,
                          w ? " (warm)" : "", ts, tr, tc);
            }
        }
        hbm_free(h);
    }
}

/* The row cycle tRC = tRAS + tRP holds for every bank, not only against the
 * bank used just before on the channel: 64 B reads cycling over 4 or 2
 * banks of one channel cannot run at the tFAW / 4 activate rate of 16 banks
 * (131.9 us for 1 MiB on v3), faster than the banks can cycle.  By hand:
 * each bank opens a row once per tRC, so n banks in turn take tRC / n per
 * read, and refresh stops the channel tRFC of every tREFI. */
static void test_bank_cycle(th_ctx *t)
{
    for (int gen = 2; gen <= 3; gen++) {
        tpu_params p;
        tpu_params_default(&p, gen);
        const hbm_params *hp = &p.hbm;
        double trc = (hp->t_ras_ns + hp->t_rp_ns) * 1e-9;
        double act = fmax(hp->t_rrd_ns, hp->t_faw_ns / 4) * 1e-9;
        double keep = 1 - hp->t_rfc_ns / hp->t_refi_ns;
        double burst = hp->burst_beats / (hp->data_rate_gtps * 1e9);
        th_case(t, gen == 2 ? "v2: 64 B reads over n banks of one channel "
                              "take max(tRC / n, tFAW / 4) each"
                            : "v3: 64 B reads over n banks of one channel "
                              "take max(tRC / n, tFAW / 4) each");
        /* A 16 KiB stride moves one bank on the same channel. */
        static const struct {
            uint64_t stride;
            int banks;
        } cs[] = {{16384, 16}, {32768, 8}, {65536, 4}, {131072, 2},
                  {262144, 1}};
        hbm *h = hbm_new(hp);
        TH_CHECK(t, h != NULL);
        if (!h)
            return;
        for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
            uint64_t n = 16384;
            double per = fmax(trc / cs[i].banks, act);
            double want = (double)n * per / keep;
            hbm_xfer x = gather(0, 64, n, cs[i].stride);
            hbm_reset(h);
            double fast = hbm_access(h, 0, &x);
            hbm_reset(h);
            double ref = hbm_access_reference(h, 0, &x);
            TH_CHECKF(t, fabs(fast / want - 1) < 0.02 &&
                             fabs(ref / want - 1) < 0.02,
                      "v%d stride %llu (%d banks): closed %.1f us, reference "
                      "%.1f us, by hand %.1f us",
                      gen, (unsigned long long)cs[i].stride, cs[i].banks,
                      fast * 1e6, ref * 1e6, want * 1e6);
        }

        th_case(t, gen == 2 ? "v2: a bank opens its next row tRC after the "
                              "last, even across calls"
                            : "v3: a bank opens its next row tRC after the "
                              "last, even across calls");
        /* Address map: byte 8 bits | channel 4 | unit in row 2 | bank 4 |
         * row: 1 << 18 is row 1 of bank 0 on channel 0, 1 << 14 bank 1. */
        double cl = hp->t_cl_ns * 1e-9, rcd = hp->t_rcd_ns * 1e-9;
        hbm_xfer a = block(0, 64), same = block(1 << 18, 64),
                 other = block(1 << 14, 64);
        hbm_reset(h);
        double t1 = hbm_access(h, 0, &a);
        double t2 = hbm_access(h, t1, &same);
        /* The first activate at 0, the second at tRC; data tRCD + CL later. */
        TH_CHECKF(t, fabs(t2 - (trc + rcd + cl + burst)) < 1e-12,
                  "v%d same bank: ends %.3f ns, by hand %.3f ns", gen,
                  t2 * 1e9, (trc + rcd + cl + burst) * 1e9);
        hbm_reset(h);
        t1 = hbm_access(h, 0, &a);
        t2 = hbm_access(h, t1, &other);
        TH_CHECKF(t, fabs(t2 - (t1 + cl + rcd + burst)) < 1e-12,
                  "v%d other bank: ends %.3f ns, by hand %.3f ns", gen,
                  t2 * 1e9, (t1 + cl + rcd + burst) * 1e9);
        hbm_free(h);
    }
}

static void test_dma(th_ctx *t)
{
    tpu_params p;
    tpu_params_default(&p, 3);
    hbm *h = hbm_new(&p.hbm);
    dma *d = h ? dma_new(h, 4) : NULL;
    TH_CHECK(t, h && d);
    if (!h || !d) {
        dma_free(d);
        hbm_free(h);
        return;
    }

    th_case(t, "DMA copies a strided 2-D block into packed VMEM and back");
    enum { ROWS = 37, COLS = 300, PITCH = 1024 };
    unsigned char *img = malloc(ROWS * PITCH), *vm = malloc(ROWS * COLS);
    unsigned char *back = calloc(ROWS * PITCH, 1);
    TH_CHECK(t, img && vm && back);
    if (img && vm && back) {
        for (int i = 0; i < ROWS * PITCH; i++)
            img[i] = (unsigned char)(i * 7 + i / 251);
        hbm_xfer x = gather(1 * MIB, COLS, ROWS, PITCH);
        double t1 = dma_issue(d, 0, &x, img, vm);
        int ok = t1 > 0;
        for (int r = 0; r < ROWS; r++)
            ok &= memcmp(vm + r * COLS, img + r * PITCH, COLS) == 0;
        TH_CHECK(t, ok);
        x.is_write = 1;
        double t2 = dma_issue(d, t1, &x, vm, back);
        TH_CHECK(t, t2 > t1);
        ok = 1;
        for (int r = 0; r < ROWS; r++)
            for (int c = 0; c < PITCH; c++) {
                unsigned char want = c < COLS ? img[r * PITCH + c] : 0;
                ok &= back[r * PITCH + c] == want;
            }
        TH_CHECKF(t, ok, "write-back differs (gaps must stay untouched)");

        th_case(t, "DMA 1-D block and 4-byte gather copy the right bytes");
        hbm_xfer one = block(0, 4000);
        dma_issue(d, t2, &one, img, vm);
        TH_CHECK(t, memcmp(vm, img, 4000) == 0);
        hbm_xfer g = gather(0, 4, 500, 36);
        dma_issue(d, t2, &g, img, vm);
        ok = 1;
        for (int i = 0; i < 500; i++)
            ok &= memcmp(vm + 4 * i, img + 36 * i, 4) == 0;
        TH_CHECK(t, ok);
    }
    free(img);
    free(vm);
    free(back);

    th_case(t, "at most max_inflight transfers in flight; the next waits");
    hbm_reset(h);
    dma_reset(d);
    double done[5];
    for (int i = 0; i < 5; i++) {
        hbm_xfer x = block((uint64_t)i * 64 * MIB, 4 * MIB);
        done[i] = dma_issue(d, 0, &x, NULL, NULL);
    }
    TH_CHECKF(t, dma_outstanding(d, 0) == 4, "%d outstanding at t=0",
              dma_outstanding(d, 0));
    /* The fifth issues only when the first completes, behind the others
     * on the shared channels; four in flight share the channels, so the
     * fourth ends about four single-transfer times after t=0. */
    TH_CHECKF(t, done[4] > done[3], "fifth %.4g fourth %.4g", done[4],
              done[3]);
    TH_CHECKF(t, done[3] > 3.5 * done[0], "fourth %.4g first %.4g", done[3],
              done[0]);
    TH_CHECK(t, dma_drain(d) >= done[4] && dma_drain(d) >= done[3]);
    TH_CHECK(t, dma_outstanding(d, dma_drain(d)) == 0);
    dma_free(d);
    hbm_free(h);
}

static void test_params_check(th_ctx *t)
{
    th_case(t, "hbm_check_params refuses maps the model cannot build");
    tpu_params p;
    tpu_params_default(&p, 3);
    tpu_error e = {TPU_OK, ""};
    TH_CHECK(t, hbm_check_params(&p.hbm, &e) == TPU_OK);
    hbm_params q = p.hbm;
    q.channels = 12;
    TH_CHECK(t, hbm_check_params(&q, &e) == TPU_ERR_INPUT);
    TH_CHECK(t, strstr(e.msg, "hbm.channels") != NULL);
    TH_CHECK(t, hbm_new(&q) == NULL);
    q = p.hbm;
    q.interleave_bytes = 4096;
    TH_CHECK(t, hbm_check_params(&q, &e) == TPU_ERR_INPUT);
    q = p.hbm;
    q.t_rfc_ns = q.t_refi_ns;
    TH_CHECK(t, hbm_check_params(&q, &e) == TPU_ERR_INPUT);
    q = p.hbm;
    q.queue_depth = 0;
    TH_CHECK(t, hbm_check_params(&q, &e) == TPU_ERR_INPUT);
}

void th_suite_hbm(th_ctx *t)
{
    test_bandwidth(t);
    test_faster_never_slower(t);
    test_refresh_rows(t);
    test_determinism(t);
    test_direction(t);
    test_reference(t);
    test_bank_cycle(t);
    test_span_bound(t);
    test_dma(t);
    test_params_check(t);
}
