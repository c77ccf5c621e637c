/* bf16 conversions on known bit patterns, against an independent
 * round-to-nearest-even written with double arithmetic, and the project's
 * random generator against splitmix64's published first output. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "mxu/bf16.h"
#include "test/harness.h"

static float f_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t u_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Reference: pick the nearer of the two bf16 neighbours of a finite f by
 * exact double arithmetic; ties go to the even pattern. */
static uint16_t ref_round(uint32_t u)
{
    uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
    double x = (double)f_of(u);
    double dlo = fabs(x - (double)f_of((uint32_t)lo << 16));
    /* hi may be the pattern past the largest finite (infinity): its
     * distance is that of the next power of two, 2^128 for magnitude. */
    double vhi = ((hi & 0x7fff) == 0x7f80)
                     ? ((hi & 0x8000) ? -ldexp(1.0, 128) : ldexp(1.0, 128))
                     : (double)f_of((uint32_t)hi << 16);
    double dhi = fabs(vhi - x);
    if (dlo < dhi)
        return lo;
    if (dhi < dlo)
        return hi;
    return (lo & 1) ? hi : lo;
}

static uint64_t ref_splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void th_suite_bf16(th_ctx *t)
{
    static const struct {
        uint32_t in;
        uint16_t out;
        const char *what;
    } known[] = {
        {0x3f800000u, 0x3f80, "1.0 exact"},
        {0x3f808000u, 0x3f80, "tie, even LSB stays"},
        {0x3f818000u, 0x3f82, "tie, odd LSB rounds up to even"},
        {0x3f808001u, 0x3f81, "just above the tie rounds up"},
        {0x3f807fffu, 0x3f80, "just below the tie rounds down"},
        {0xbf818000u, 0xbf82, "negative tie to even"},
        {0x3fffffffu, 0x4000, "carry into the exponent"},
        {0x3fff8000u, 0x4000, "tie with odd LSB carries into the exponent"},
        {0x7f7f7fffu, 0x7f7f, "largest finite stays finite"},
        {0x7f7f8000u, 0x7f80, "tie above max finite overflows to inf"},
        {0x7f7fffffu, 0x7f80, "FLT_MAX overflows to inf"},
        {0xff7fffffu, 0xff80, "-FLT_MAX overflows to -inf"},
        {0x7f800000u, 0x7f80, "+inf"},
        {0xff800000u, 0xff80, "-inf"},
        {0x7fc00000u, 0x7fc0, "quiet NaN"},
        {0x7f800001u, 0x7fc0, "signalling NaN with low payload stays NaN"},
        {0xff812345u, 0xffc1, "negative NaN keeps sign and high payload"},
        {0x00000000u, 0x0000, "+0"},
        {0x80000000u, 0x8000, "-0 keeps its sign"},
        {0x00000001u, 0x0000, "smallest subnormal rounds to +0"},
        {0x80000001u, 0x8000, "negative tiny subnormal rounds to -0"},
        {0x00010000u, 0x0001, "subnormal kept, not flushed"},
        {0x00008000u, 0x0000, "subnormal tie to even (down)"},
        {0x00018000u, 0x0002, "subnormal tie to even (up)"},
        {0x007fffffu, 0x0080, "largest subnormal rounds up to min normal"},
        {0x00800000u, 0x0080, "smallest normal"},
    };
    th_case(t, "fp32 -> bf16 on known bit patterns");
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        uint16_t got = bf16_from_f32(f_of(known[i].in));
        TH_CHECKF(t, got == known[i].out, "%s: %08x -> %04x, want %04x",
                  known[i].what, (unsigned)known[i].in, (unsigned)got,
                  (unsigned)known[i].out);
    }

    th_case(t, "bf16 -> fp32 is exact and round-trips every pattern");
    for (uint32_t b = 0; b < 65536; b++) {
        float f = bf16_to_f32((bf16)b);
        if (!TH_CHECKF(t, u_of(f) == b << 16, "%04x widened to %08x",
                       (unsigned)b, (unsigned)u_of(f)))
            break;
        uint16_t back = bf16_from_f32(f);
        int nan = (b & 0x7fff) > 0x7f80;
        uint16_t want = nan ? (uint16_t)(b | 0x0040) : (uint16_t)b;
        if (!TH_CHECKF(t, back == want, "%04x round trip gave %04x",
                       (unsigned)b, (unsigned)back))
            break;
    }

    th_case(t, "random fp32 patterns match a double-precision RNE reference");
    uint64_t s = 12345;
    int n = th_asan() ? 200000 : 2000000, bad = 0;
    for (int i = 0; i < n && bad < 5; i++) {
        uint32_t u = (uint32_t)ref_splitmix(&s);
        if ((u & 0x7f800000u) == 0x7f800000u) {
            uint16_t got = bf16_from_f32(f_of(u));
            int isnan_in = (u & 0x007fffffu) != 0;
            if (!TH_CHECKF(t, isnan_in ? (got & 0x7fff) > 0x7f80
                                       : got == (uint16_t)(u >> 16),
                           "special %08x -> %04x", (unsigned)u, (unsigned)got))
                bad++;
            continue;
        }
        uint16_t want = ref_round(u), got = bf16_from_f32(f_of(u));
        if (!TH_CHECKF(t, got == want, "%08x -> %04x, want %04x", (unsigned)u,
                       (unsigned)got, (unsigned)want))
            bad++;
    }

    th_case(t, "random fill: splitmix64 stream, values in [-1, 1]");
    uint64_t st = 0, rs = 0;
    TH_CHECK(t, bf16_splitmix64(&st) == 0xe220a8397b1dcdafull);
    st = 7;
    rs = 7;
    bf16 v[4096];
    bf16_random_fill(v, 4096, &st);
    int in_range = 1, same = 1, neg = 0, pos = 0;
    for (int i = 0; i < 4096; i++) {
        float f = bf16_to_f32(v[i]);
        uint64_t x = ref_splitmix(&rs);
        float want = (float)((double)(x >> 40) / 16777216.0 * 2.0 - 1.0);
        same &= v[i] == ref_round(u_of(want));
        in_range &= f >= -1.0f && f <= 1.0f;
        neg += f < 0;
        pos += f > 0;
    }
    TH_CHECK(t, same);
    TH_CHECK(t, in_range);
    TH_CHECKF(t, neg > 1800 && pos > 1800, "signs %d/%d", neg, pos);
    TH_CHECK(t, st == rs);
}
