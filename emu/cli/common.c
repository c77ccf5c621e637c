#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "emu/cli/cli.h"
#include "emu/out/font.h"
#include "emu/rfile.h"

int cli_error(int code, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* One line whatever the message quotes (a path or key given with a
     * newline in it): room for every byte as \xNN, so nothing is cut. */
    char line[4 * sizeof msg + 4];
    cli_shown(line, sizeof line, msg);
    fprintf(stderr, "tpuemu: error: %s\n", line);
    return code;
}

void cli_shown(char *buf, size_t cap, const char *text)
{
    size_t n = 0, esc = 0;
    for (; *text; text++) {
        unsigned char c = (unsigned char)*text;
        char tmp[8];
        /* every byte of a C1 control or a bidi override too: the terminal
         * would act on them as on ESC (emu/rfile.h) */
        if (!esc)
            esc = rfile_ctrl_len((const unsigned char *)text, NULL);
        if (esc) {
            esc--;
            snprintf(tmp, sizeof tmp, "\\x%02x", c);
        } else {
            snprintf(tmp, sizeof tmp, "%c", c);
        }
        size_t w = strlen(tmp);
        if (n + w + 4 > cap) {
            if (cap >= 4) {
                while (n + 4 > cap)
                    n--;
                memcpy(buf + n, "...", 3);
                n += 3;
            }
            break;
        }
        memcpy(buf + n, tmp, w);
        n += w;
    }
    buf[cap ? (n < cap ? n : cap - 1) : 0] = 0;
}

int cli_fail(const tpu_error *e)
{
    int code = e->code ? (int)e->code : 2;
    return cli_error(code, "%s", e->msg[0] ? e->msg : "failed");
}

/* Plain decimal or scientific notation only: strtod also takes hex
 * ("0x10"), "inf", "nan" and leading blanks, none of which a user means. */
static int plain_number(const char *s)
{
    if (!*s)
        return 0;
    for (const char *p = s; *p; p++)
        if (!strchr("0123456789+-.eE", *p))
            return 0;
    return 1;
}

void cli_fmt_num(char *buf, size_t cap, double v)
{
    /* The shortest %g that reads back as v, so a bound is shown exactly
     * ("0.0009765625", not "0.000976562") without %.17g's noise. */
    if (v == floor(v) && fabs(v) < 1e15) { /* "100", not "1e+02" */
        snprintf(buf, cap, "%.0f", v == 0 ? 0.0 : v);
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, cap, "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            return;
    }
}

void cli_fmt_gib2(char *a, char *b, size_t cap, double x, double y)
{
    const double gib = 1024.0 * 1024.0 * 1024.0;
    for (int d = 3; d <= 12; d++) {
        snprintf(a, cap, "%.*g", d, x / gib);
        snprintf(b, cap, "%.*g", d, y / gib);
        if (x == y || strcmp(a, b) != 0)
            return;
    }
}

int cli_int(const char *opt, const char *s, int64_t lo, int64_t hi,
            int64_t *out)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!plain_number(s) || *end)
        return cli_error(2, "%s: expected an integer, got '%s'", opt, s);
    if (errno == ERANGE || v < lo || v > hi)
        return cli_error(2, "%s: %s is out of range [%lld, %lld]", opt, s,
                         (long long)lo, (long long)hi);
    *out = v;
    return 0;
}

int cli_number(const char *s, double *out)
{
    char *end = NULL;
    double v = strtod(s, &end);
    if (!plain_number(s) || *end)
        return 0;
    *out = v;
    return 1;
}

int cli_double(const char *opt, const char *s, double lo, double hi,
               double *out)
{
    double v = 0;
    errno = 0; /* cli_number's strtod sets ERANGE */
    if (!cli_number(s, &v))
        return cli_error(2, "%s: expected a number, got '%s'", opt, s);
    /* ERANGE is overflow (v is +-HUGE_VAL) or underflow (v is 0 or
     * subnormal): a figure too small for a double is that close to 0 and
     * is taken as the double it rounds to; one too large is out of
     * range. */
    int overflow = errno == ERANGE && !(fabs(v) < 1);
    if (overflow || !isfinite(v) || v < lo || v > hi) {
        char a[32], b[32];
        cli_fmt_num(a, sizeof a, lo);
        cli_fmt_num(b, sizeof b, hi);
        return cli_error(2, "%s: %s is out of range [%s, %s]", opt, s, a, b);
    }
    *out = v == 0 ? 0.0 : v; /* "-1e-400" is 0, not -0 */
    return 0;
}

/* The one option every command lets repeat: each --set adds an override.
 * Every other option takes one value, and a second one is refused rather
 * than silently replacing the first. */
static const char *const repeatable[] = {"--set"};

/* 2 (error printed) when option `name`, at argv[i], was already given
 * before i as "NAME VALUE" or "NAME=VALUE"; else 0. */
static int given_twice(int argc, char **argv, int i, const char *name)
{
    for (size_t r = 0; r < sizeof repeatable / sizeof repeatable[0]; r++)
        if (strcmp(name, repeatable[r]) == 0)
            return 0;
    size_t len = strlen(name);
    for (int j = 1; j < i && j < argc; j++) {
        if (strncmp(argv[j], name, len) != 0 ||
            (argv[j][len] != '\0' && argv[j][len] != '='))
            continue;
        const char *was = argv[j][len] == '=' ? argv[j] + len + 1
                          : j + 1 < argc      ? argv[j + 1]
                                              : "";
        return cli_error(2, "%s: given twice ('%s' before); it takes one "
                            "value",
                         name, was);
    }
    return 0;
}

const char *cli_value(int argc, char **argv, int *i)
{
    if (given_twice(argc, argv, *i, argv[*i]))
        return NULL;
    if (*i + 1 >= argc) {
        cli_error(2, "%s: missing value", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

int cli_wants_help(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0)
            return 1;
    return 0;
}

int cli_take(int argc, char **argv, int *i, const char *name,
             const char **val)
{
    const char *arg = argv[*i];
    size_t len = strlen(name);
    if (strncmp(arg, name, len) != 0)
        return 0;
    if (arg[len] != '=' && arg[len] != '\0')
        return 0;
    if (given_twice(argc, argv, *i, name))
        return -1;
    if (arg[len] == '=') {
        *val = arg + len + 1;
        return 1;
    }
    *val = cli_value(argc, argv, i);
    return *val ? 1 : -1;
}

int cli_sets_once(const char *const *sets, int n)
{
    for (int i = 0; i < n; i++) {
        const char *ei = strchr(sets[i], '=');
        size_t li = ei ? (size_t)(ei - sets[i]) : strlen(sets[i]);
        for (int j = 0; j < i; j++) {
            const char *ej = strchr(sets[j], '=');
            size_t lj = ej ? (size_t)(ej - sets[j]) : strlen(sets[j]);
            if (li == lj && strncmp(sets[i], sets[j], li) == 0)
                return cli_error(2, "--set %.*s: given twice (%s, then %s)",
                                 (int)li, sets[i], ej ? ej + 1 : "",
                                 ei ? ei + 1 : "");
        }
    }
    return 0;
}

/* Entry e (length n) of a comma-separated list is in list. */
static int list_has(const char *list, const char *e, size_t n)
{
    for (const char *p = list;;) {
        size_t m = strcspn(p, ",");
        if (m == n && strncmp(p, e, n) == 0)
            return 1;
        if (!p[m])
            return 0;
        p += m + 1;
    }
}

/* Every entry of a is in b. */
static int list_within(const char *a, const char *b)
{
    for (const char *p = a;;) {
        size_t m = strcspn(p, ",");
        if (!list_has(b, p, m))
            return 0;
        if (!p[m])
            return 1;
        p += m + 1;
    }
}

int cli_freeze_same(const char *a, const char *b)
{
    if (strcmp(a, b) == 0)
        return 1;
    if (!*a || !*b)
        return 0;
    return list_within(a, b) && list_within(b, a);
}

/* Terminal columns of one code point, after Unicode's East Asian Width
 * (W and F ranges of UAX #11) and its combining and zero-width
 * characters, in the shape of Markus Kuhn's wcwidth: a table of its own
 * rather than wcwidth(3), whose answer depends on the locale, so a table
 * lines up the same under LC_ALL=C in CI as in a UTF-8 terminal. */
static int cp_cols(uint32_t c)
{
    static const uint32_t zero[][2] = {
        {0x0300, 0x036F}, {0x0483, 0x0489}, {0x0591, 0x05BD},
        {0x0610, 0x061A}, {0x064B, 0x065F}, {0x0E31, 0x0E31},
        {0x0E34, 0x0E3A}, {0x0E47, 0x0E4E}, {0x1AB0, 0x1AFF},
        {0x1DC0, 0x1DFF}, {0x200B, 0x200F}, {0x202A, 0x202E},
        {0x2060, 0x2064}, {0x20D0, 0x20FF}, {0xFE00, 0xFE0F},
        {0xFE20, 0xFE2F}, {0xFEFF, 0xFEFF}, {0xE0100, 0xE01EF}};
    static const uint32_t wide[][2] = {
        {0x1100, 0x115F}, {0x231A, 0x231B}, {0x2329, 0x232A},
        {0x23E9, 0x23EC}, {0x2614, 0x2615}, {0x2E80, 0x303E},
        {0x3041, 0x33FF}, {0x3400, 0x4DBF}, {0x4E00, 0x9FFF},
        {0xA000, 0xA4CF}, {0xA960, 0xA97F}, {0xAC00, 0xD7A3},
        {0xF900, 0xFAFF}, {0xFE10, 0xFE19}, {0xFE30, 0xFE6F},
        {0xFF00, 0xFF60}, {0xFFE0, 0xFFE6}, {0x1F300, 0x1F64F},
        {0x1F900, 0x1F9FF}, {0x20000, 0x2FFFD}, {0x30000, 0x3FFFD}};
    for (size_t i = 0; i < sizeof zero / sizeof zero[0]; i++)
        if (c >= zero[i][0] && c <= zero[i][1])
            return 0;
    for (size_t i = 0; i < sizeof wide / sizeof wide[0]; i++)
        if (c >= wide[i][0] && c <= wide[i][1])
            return 2;
    return 1;
}

int cli_text_cols(const char *text)
{
    int cols = 0, n;
    uint32_t c;
    while ((n = font_utf8_next(text, &c)) > 0) {
        cols += cp_cols(c);
        text += n;
    }
    return cols;
}

void cli_fit_cols(char *dst, size_t cap, const char *text, int cols,
                  const char *more)
{
    int mc = more ? cli_text_cols(more) : 0;
    if (cli_text_cols(text) <= cols || mc > cols)
        more = NULL, mc = 0;
    int budget = more ? cols - mc : cols, used = 0, n;
    size_t len = 0;
    uint32_t c;
    const char *s = text;
    while ((n = font_utf8_next(s, &c)) > 0 && used + cp_cols(c) <= budget &&
           len + (size_t)n < cap) {
        used += cp_cols(c);
        len += (size_t)n;
        s += n;
    }
    snprintf(dst, cap, "%.*s%s", (int)len, text,
             more && *s ? more : "");
}

void cli_fit_cols_mid(char *dst, size_t cap, const char *text, int cols)
{
    int total = cli_text_cols(text);
    if (total <= cols || cols < 5) {
        cli_fit_cols(dst, cap, text, cols, "..");
        return;
    }
    int tail = (cols - 2) / 3, head = cols - 2 - tail;
    /* the tail: the shortest suffix of at most `tail` columns that starts
     * on a character */
    const char *s = text, *from = NULL;
    int before = 0, n;
    uint32_t c;
    while (*s) {
        if (total - before <= tail) {
            from = s;
            break;
        }
        n = font_utf8_next(s, &c);
        before += cp_cols(c);
        s += n;
    }
    char h[256];
    cli_fit_cols(h, sizeof h, text, head, NULL);
    snprintf(dst, cap, "%s..%s", h, from ? from : "");
}

void cli_put_cell(const char *text, int cells)
{
    int pad = cells - cli_text_cols(text);
    printf("%s%*s", text, pad > 0 ? pad : 0, "");
}

int cli_slowest_core(const emu_result *r)
{
    int w = 0;
    for (int k = 1; k < r->cores; k++)
        if (r->per_core[k].step_time_s > r->per_core[w].step_time_s)
            w = k;
    return w;
}

char *cli_json_text(const struct cJSON *doc)
{
    char *text = cJSON_Print(doc);
    if (!text)
        return NULL;
    size_t len = strlen(text);
    char *q = realloc(text, len + 2);
    if (!q) {
        free(text);
        return NULL;
    }
    memcpy(q + len, "\n", 2);
    return q;
}
