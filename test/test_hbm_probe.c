/* `tpuemu probe hbm`: one JSON object per run, the same bytes every run,
 * strided slower than sequential, and exit 2/3 on bad input. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test/harness.h"

static double field(const char *json, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(json, pat);
    return p ? strtod(p + strlen(pat), NULL) : -1;
}

void th_suite_hbm_probe(th_ctx *t)
{
    th_cmd_result r, r2;
    const char *bin = th_bin();

    th_case(t, "probe hbm prints one JSON object with the pinned keys");
    th_run(&r, "%s probe hbm --gen v3 --bytes 1073741824", bin);
    TH_CHECKF(t, r.status == 0, "status %d: %s", r.status, r.err);
    TH_CHECKF(t, strncmp(r.out, "{\"gen\":\"v3\",\"bytes\":1073741824,"
                                "\"seconds\":", 40) == 0, "%s", r.out);
    double g = field(r.out, "gbps"), s = field(r.out, "seconds");
    TH_CHECKF(t, g > 0.85 * 450 && g <= 450, "%s", r.out);
    TH_CHECKF(t, s > 0 && g * s * 1e9 > 1073741824 * 0.999 &&
                     g * s * 1e9 < 1073741824 * 1.001, "%s", r.out);
    int lines = 0;
    for (const char *p = r.out; *p; p++)
        lines += *p == '\n';
    TH_CHECK(t, lines == 1);

    th_case(t, "probe hbm is deterministic");
    th_run(&r2, "%s probe hbm --gen v3 --bytes 1073741824", bin);
    TH_CHECK(t, strcmp(r.out, r2.out) == 0);

    th_case(t, "probe hbm v2 and strided: keys, and slower than peak");
    th_run(&r, "%s probe hbm --gen v2 --bytes 1048576 --stride 4096 "
               "--chunk 64", bin);
    TH_CHECKF(t, r.status == 0, "status %d: %s", r.status, r.err);
    TH_CHECKF(t, strstr(r.out, "\"gen\":\"v2\"") &&
                     strstr(r.out, "\"stride\":4096") &&
                     strstr(r.out, "\"chunk\":64"), "%s", r.out);
    TH_CHECKF(t, field(r.out, "gbps") > 0 && field(r.out, "gbps") < 100,
              "%s", r.out);
    th_run(&r2, "%s probe hbm --gen v2 --bytes 1048576", bin);
    TH_CHECK(t, field(r2.out, "gbps") > 2 * field(r.out, "gbps"));

    th_case(t, "probe hbm: 1-byte chunks 2 bytes apart take no longer than "
               "the 2 MiB they lie in");
    th_run(&r, "%s probe hbm --gen v3 --bytes 1048576 --stride 2 --chunk 1",
           bin);
    th_run(&r2, "%s probe hbm --gen v3 --bytes 2097151", bin);
    TH_CHECKF(t, r.status == 0 && r2.status == 0 &&
                     field(r.out, "seconds") > 0 &&
                     field(r.out, "seconds") <=
                         field(r2.out, "seconds") * (1 + 1e-9),
              "%s / %s", r.out, r2.out);

    th_case(t, "probe hbm: 64 B reads cycling over 4 or 2 banks of one "
               "channel are bound by the row cycle");
    /* 1 MiB of 64 B reads, 16384 of them; a 64 KiB stride takes 4 banks of
     * channel 0 in turn, 128 KiB 2.  A bank opens one row per tRC = tRAS +
     * tRP = 34 + 14 ns, so 12 and 24 ns per read, and refresh keeps
     * 1 - tRFC / tREFI = 1 - 260 / 3900 of the time: 210.7 and 421.3 us
     * (both were 131.9 us, the tFAW / 4 activate rate of 16 banks). */
    static const struct {
        const char *stride;
        double want;
    } bk[] = {{"65536", 16384 * 12e-9 / (1 - 260.0 / 3900)},
              {"131072", 16384 * 24e-9 / (1 - 260.0 / 3900)}};
    for (int i = 0; i < 2; i++) {
        th_run(&r, "%s probe hbm --gen v3 --bytes 1048576 --chunk 64 "
                   "--stride %s", bin, bk[i].stride);
        double sec = field(r.out, "seconds");
        TH_CHECKF(t, r.status == 0 && sec > 0.98 * bk[i].want &&
                         sec < 1.02 * bk[i].want,
                  "stride %s: %s (by hand %.1f us)", bk[i].stride, r.out,
                  bk[i].want * 1e6);
    }

    th_case(t, "probe hbm --set changes the model (no refresh is faster)");
    th_run(&r, "%s probe hbm --bytes 268435456", bin);
    th_run(&r2, "%s probe hbm --bytes 268435456 --set hbm.t_rfc_ns=0", bin);
    TH_CHECKF(t, r2.status == 0 && field(r2.out, "seconds") <
                                       field(r.out, "seconds"),
              "%s / %s", r.out, r2.out);

    th_case(t, "probe hbm refuses bad input with exit 2");
    const char *bad[] = {
        "--gen v4 --bytes 1024",
        "--bytes 0",
        "--bytes -5",
        "--bytes abc",
        "--gen v3",
        "--bytes 1024 --stride 256",
        "--bytes 1024 --chunk 64",
        "--bytes 1024 --stride 32 --chunk 64",
        "--bytes 1000 --stride 256 --chunk 64",
        "--bytes 1024 --stride 256 --chunk 0",
        "--bytes 1024 --frobnicate",
        "--bytes 1024 --set hbm.nope=1",
        "--bytes 1024 --set hbm.channels=12",
        "--bytes 1024 --set ici.link_gbs=10",
        "--bytes 1024 --set clock_hz=1e9",
        "--bytes",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        th_run(&r, "%s probe hbm %s", bin, bad[i]);
        TH_CHECKF(t, r.status == 2 && strstr(r.err, "tpuemu: error:") &&
                         r.out[0] == '\0',
                  "'%s': status %d, err '%s'", bad[i], r.status, r.err);
    }

    th_case(t, "probe allreduce/permute: a buffer larger than the core's "
               "HBM exits 3; a --set key with no effect is refused");
    th_run(&r, "%s probe allreduce --system v3-8 --bytes 107374182400", bin);
    TH_CHECKF(t, r.status == 3 && strstr(r.err, "needs 100 GiB of HBM per "
                                                "core, v3 core has 16 GiB") &&
                     r.out[0] == '\0',
              "status %d: %s", r.status, r.err);
    th_run(&r, "%s probe permute --system v2-8 --bytes 8589934593", bin);
    TH_CHECKF(t, r.status == 3 && strstr(r.err, "v2 core has 8 GiB"),
              "status %d: %s", r.status, r.err);
    th_run(&r, "%s probe allreduce --system v3-8 --bytes 2097152 --set "
               "hbm.capacity_gib=0.0009765625", bin);
    TH_CHECKF(t, r.status == 3, "status %d: %s", r.status, r.err);
    th_run(&r, "%s probe allreduce --system v3-8 --bytes 1048576 --set "
               "hbm.bandwidth_gbs=41", bin);
    TH_CHECKF(t, r.status == 2 && strstr(r.err, "hbm.bandwidth_gbs: has no "
                                                "effect"),
              "status %d: %s", r.status, r.err);
    th_run(&r, "%s probe permute --system v3-8 --bytes 1048576 --set "
               "mxu.rows=64", bin);
    TH_CHECK(t, r.status == 2);
    th_run(&r, "%s probe allreduce --system v3-8 --bytes 1048576", bin);
    th_run(&r2, "%s probe allreduce --system v3-8 --bytes 1048576 --set "
                "ici.link_gbs=35", bin);
    TH_CHECKF(t, r.status == 0 && r2.status == 0 &&
                     field(r2.out, "seconds") > field(r.out, "seconds"),
              "%s / %s %s", r.out, r2.out, r2.err);

    th_case(t, "probe hbm: a block larger than the core's HBM exits 3");
    th_run(&r, "%s probe hbm --gen v2 --bytes 17179869184", bin);
    TH_CHECKF(t, r.status == 3 && strstr(r.err, "HBM"), "status %d: %s",
              r.status, r.err);
    th_run(&r, "%s probe hbm --gen v3 --bytes 17179869184", bin);
    TH_CHECKF(t, r.status == 0, "v3 has 16 GiB: status %d %s", r.status,
              r.err);
}
