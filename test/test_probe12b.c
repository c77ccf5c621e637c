/* Probe round 12a's hostile names and reports (tests probe12b), each
 * failing before its fix:
 *
 *  - C1 controls (U+0080-U+009F: U+009B is CSI to a UTF-8 xterm), the line
 *    and paragraph separators and the bidi embeddings, overrides and
 *    isolates passed the "no control characters" rule of trace names and
 *    of the report's strings, and were printed raw;
 *  - a trace without "name" is named after its file, whose name may hold
 *    any byte: run printed an ESC raw and wrote invalid UTF-8 (a byte
 *    0xFF, or a character cut at the 127-byte limit) into the report,
 *    which check and view then refused;
 *  - check printed a change too large for a double (1e308 s against
 *    1e-4 s) as "from 0", and a layer whose categories sum past a double
 *    as "-nan%".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test/harness.h"

/* A report of tiny2d as run writes it, which the cases below edit. */
static int base_report(th_ctx *t, th_cmd_result *c, char *path, size_t cap)
{
    snprintf(path, cap, "%s/p12b-base.json", th_tmpdir());
    th_run(c, "%s run traces/small/tiny2d.json --quiet --report %s", th_bin(),
           path);
    return TH_CHECKF(t, c->status == 0, "run: %d %s", c->status, c->err);
}

/* src with every occurrence of `from` replaced by `to`, written to
 * th_tmpdir()/name (its path in path); 0 when `from` is not there. */
static int edited(const char *src, const char *from, const char *to,
                  const char *name, char *path, size_t cap)
{
    char *text = th_slurp(src, NULL);
    size_t nf = strlen(from), nt = strlen(to), hits = 0;
    if (!text)
        return 0;
    for (char *p = strstr(text, from); p; p = strstr(p + nf, from))
        hits++;
    char *out = malloc(strlen(text) + hits * nt + 1);
    if (!out || !hits) {
        free(out);
        free(text);
        return 0;
    }
    char *o = out;
    const char *p = text;
    for (const char *q; (q = strstr(p, from)); p = q + nf) {
        memcpy(o, p, (size_t)(q - p));
        o += q - p;
        memcpy(o, to, nt);
        o += nt;
    }
    strcpy(o, p);
    snprintf(path, cap, "%s/%s", th_tmpdir(), name);
    th_put(path, out);
    free(out);
    free(text);
    return 1;
}

/* `check` of the report against itself is refused with exit 2 and one
 * line "tpuemu: error: PATH: want". */
static void refused(th_ctx *t, th_cmd_result *c, const char *path,
                    const char *want)
{
    char line[1024];
    snprintf(line, sizeof line, "tpuemu: error: %s: %s", path, want);
    th_run(c, "%s check --baseline %s %s", th_bin(), path, path);
    TH_CHECKF(t, c->status == 2 && strstr(c->err, line) &&
                     strchr(c->err, '\n') == c->err + strlen(c->err) - 1,
              "status %d\n       got  '%s'\n       want '%s'", c->status,
              c->err, line);
}

/* No byte sequence on a terminal line that a terminal would act on: C0
 * (but the line's own newline), DEL, C1, U+2028/9 and the bidi controls. */
static int terminal_safe(const char *s)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; u[i]; i++) {
        if ((u[i] < 0x20 && u[i] != '\n') || u[i] == 0x7f)
            return 0;
        if (u[i] == 0xc2 && u[i + 1] >= 0x80 && u[i + 1] <= 0x9f)
            return 0;
        if (u[i] == 0xe2 && u[i + 1] == 0x80 && u[i + 2] >= 0xa8 &&
            u[i + 2] <= 0xae)
            return 0;
        if (u[i] == 0xe2 && u[i + 1] == 0x81 && u[i + 2] >= 0xa6 &&
            u[i + 2] <= 0xa9)
            return 0;
    }
    return 1;
}

static void c1_cases(th_ctx *t, th_cmd_result *c, const char *base)
{
    static const struct {
        const char *from, *to, *want;
    } k[] = {
        {"\"trace\": \"tiny2d\"", "\"trace\": \"evil\\u009b2J\"",
         "trace: the string contains a control character (U+009B)"},
        {"\"trace\": \"tiny2d\"", "\"trace\": \"a\xc2\x85x\"",
         "trace: the string contains a control character (U+0085)"},
        {"{\"name\": \"relu1\"", "{\"name\": \"r\\u2028y\"",
         "layers[3].name: the string contains a line separator (U+2028)"},
        {"{\"name\": \"relu1\"", "{\"name\": \"r\\u2029y\"",
         "layers[3].name: the string contains a paragraph separator "
         "(U+2029)"},
        {"\"overrides\": {}", "\"overrides\": {}, \"freeze\": \"a\\u202eb\"",
         "freeze: the string contains a bidirectional text control "
         "(U+202E)"},
        {"\"overrides\": {}", "\"overrides\": {\"clock_hz\": \"1e9\\u2069\"}",
         "overrides.clock_hz: the string contains a bidirectional text "
         "control (U+2069)"},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        char path[512], name[64];
        snprintf(name, sizeof name, "p12b-c1-%zu.json", i);
        th_case(t, "report: C1 controls, line separators and bidi controls "
                   "are refused in its strings (check)");
        if (!TH_CHECKF(t, edited(base, k[i].from, k[i].to, name, path,
                                 sizeof path),
                       "no '%s' in the base report", k[i].from))
            continue;
        refused(t, c, path, k[i].want);
        TH_CHECK(t, terminal_safe(c->out) && terminal_safe(c->err));
    }

    th_case(t, "report: view refuses them the same way");
    {
        char path[512];
        if (TH_CHECK(t, edited(base, "\"trace\": \"tiny2d\"",
                               "\"trace\": \"evil\\u009b2J\"", "p12b-c1v.json",
                               path, sizeof path))) {
            th_run(c, "SDL_VIDEODRIVER=dummy %s view %s --screenshot "
                      "%s/p12b.png",
                   th_bin(), path, th_tmpdir());
            TH_CHECKF(t, c->status == 2 &&
                             strstr(c->err, "p12b-c1v.json: trace: the string "
                                            "contains a control character "
                                            "(U+009B)"),
                      "%d %s", c->status, c->err);
        }
    }

    th_case(t, "run: a trace named with C1 controls is refused, and a "
               "message quoting one shows it escaped");
    {
        char path[512];
        if (TH_CHECK(t, edited("traces/small/tiny2d.json",
                               "\"name\": \"tiny2d\"",
                               "\"name\": \"evil\\u009b2J\\u0085x\"",
                               "p12b-c1t.json", path, sizeof path))) {
            th_run(c, "%s run %s --quiet", th_bin(), path);
            TH_CHECKF(t, c->status == 2 && terminal_safe(c->out) &&
                             terminal_safe(c->err) &&
                             strstr(c->err, "p12b-c1t.json: name: contains a "
                                            "control character (U+009B)"),
                      "%d %s", c->status, c->err);
        }
        /* --freeze echoes an entry that names no layer */
        th_run(c, "%s run traces/small/tiny2d.json --quiet --freeze "
                  "\"$(printf 'x\\302\\233y')\"",
               th_bin());
        TH_CHECKF(t, c->status == 2 && terminal_safe(c->err) &&
                         strstr(c->err, "x\\xc2\\x9by"),
                  "%d %s", c->status, c->err);
    }
}

/* A trace without "name" takes its file's name, which may hold any byte:
 * run printed it raw and wrote a report that check and view refused. */
static void filename_cases(th_ctx *t, th_cmd_result *c)
{
    char x126[160];
    memset(x126, 'x', 126);
    x126[126] = 0;
    const struct {
        const char *file, *name;
    } k[] = {
        {"a\nb\033[31m", "a?b?[31m"},
        {"bad\377", "bad?"},
        {"c1\302\233x\342\200\256y", "c1?x?y"},
        {"\303\251t\303\251", "\303\251t\303\251"}, /* été is kept */
        {NULL, x126}, /* 126 bytes and a 2-byte character: cut before it */
    };
    char *text = th_slurp("traces/small/tiny2d.json", NULL);
    char *named = text ? strstr(text, "\"name\": \"tiny2d\",") : NULL;
    th_case(t, "the base trace has a name to remove");
    if (!TH_CHECK(t, named != NULL)) {
        free(text);
        return;
    }
    memset(named, ' ', strlen("\"name\": \"tiny2d\","));
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        char file[512], rep[512], want[512];
        snprintf(file, sizeof file, "%s/%s%s.json", th_tmpdir(),
                 k[i].file ? k[i].file : x126, k[i].file ? "" : "\303\251");
        th_put(file, text);
        snprintf(rep, sizeof rep, "%s/p12b-fn%zu.json", th_tmpdir(), i);
        th_case(t, "run: a trace's default name from a hostile file name is "
                   "one line of UTF-8, and its report reads back");
        th_run(c, "%s run '%s' --report %s", th_bin(), file, rep);
        snprintf(want, sizeof want, "%s on v3-8: ", k[i].name);
        TH_CHECKF(t, c->status == 0 && strncmp(c->out, want, strlen(want)) == 0 &&
                         terminal_safe(c->out),
                  "%d '%.80s' %s", c->status, c->out, c->err);
        char *r = th_slurp(rep, NULL);
        snprintf(want, sizeof want, "\"trace\": \"%s\",", k[i].name);
        TH_CHECKF(t, r && strstr(r, want), "no %s in the report", want);
        free(r);
        th_run(c, "%s check --baseline %s %s", th_bin(), rep, rep);
        TH_CHECKF(t, c->status == 0 && terminal_safe(c->out), "check: %d %s",
                  c->status, c->err);
    }
    free(text);
}

/* A v3-8 result whose every core spends cat[k] in category k, and whose
 * one layer (when layer is not NULL) spent layer[k], saved as name. */
static void save_result(th_ctx *t, const double *cat, const double *layer,
                        const char *name, char *path, size_t cap)
{
    emu_result r;
    th_result_make(&r, "huge", "v3-8", 8, 1, 8, cat, NULL);
    if (layer) {
        r.layer_names = calloc(1, sizeof *r.layer_names);
        r.layer_time_s = calloc(CAT_COUNT, sizeof *r.layer_time_s);
        if (r.layer_names && r.layer_time_s) {
            r.n_layers = 1;
            snprintf(r.layer_names[0], sizeof r.layer_names[0], "conv");
            memcpy(r.layer_time_s, layer, CAT_COUNT * sizeof *layer);
        }
    }
    th_result_save(t, &r, name, path, cap);
    emu_result_free(&r);
}

/* Whether the line of out that starts with label holds needle. */
static int row_has(const char *out, const char *label, const char *needle)
{
    char head[64];
    snprintf(head, sizeof head, "\n%s", label);
    const char *row = strstr(out, head);
    if (!row)
        return 0;
    const char *end = strchr(row + 1, '\n');
    const char *hit = strstr(row, needle);
    return hit && (!end || hit < end);
}

/* check's percentage of a change too large for a double read "from 0",
 * which only a change from a zero base is. */
static void huge_ratio_cases(th_ctx *t, th_cmd_result *c)
{
    static const double b4[CAT_COUNT] = {1e-4, 0, 0, 0, 0, 0};
    static const double n308[CAT_COUNT] = {1e308, 0, 0, 1e-5, 0, 0};
    static const double tiny[CAT_COUNT] = {5e-324, 0, 0, 0, 0, 0};
    static const double one[CAT_COUNT] = {1, 0, 0, 0, 0, 0};
    static const double lay_b[CAT_COUNT] = {1e-5, 0, 0, 0, 0, 0};
    static const double lay_n[CAT_COUNT] = {1e308, 1e308, 0, 0, 0, 0};
    char b[512], n[512];

    th_case(t, "check: a ratio beyond a double is printed as its size, not "
               "\"from 0\"; a category from 0 still is");
    save_result(t, b4, NULL, "p12b-b4.json", b, sizeof b);
    save_result(t, n308, NULL, "p12b-n308.json", n, sizeof n);
    th_run(c, "%s check --baseline %s %s", th_bin(), b, n);
    TH_CHECKF(t, c->status == 1 && strstr(c->out, "1e+308 s (+1.00e+314%)"),
              "%d %s", c->status, c->out);
    /* "from 0" once: on the halo row, which did grow from 0 */
    TH_CHECKF(t, row_has(c->out, "step time", "+1.00e+314%  SLOWER") &&
                     row_has(c->out, "  mxu", "+1.00e+314%  grew") &&
                     row_has(c->out, "  halo", "from 0  grew") &&
                     !strstr(strstr(c->out, "from 0") + 1, "from 0"),
              "%s", c->out);

    th_case(t, "check: from a denormal base, the ratio overflows too");
    save_result(t, tiny, NULL, "p12b-tiny.json", b, sizeof b);
    save_result(t, one, NULL, "p12b-one.json", n, sizeof n);
    th_run(c, "%s check --baseline %s %s", th_bin(), b, n);
    TH_CHECKF(t, c->status == 1 && strstr(c->out, "-> 1 s (+2.02e+325%)") &&
                     !strstr(c->out, "from 0"),
              "%d %s", c->status, c->out);

    th_case(t, "check: a layer whose categories sum past a double has no "
               "percentage (was nan or \"from 0\")");
    save_result(t, b4, lay_b, "p12b-lb.json", b, sizeof b);
    save_result(t, n308, lay_n, "p12b-ln.json", n, sizeof n);
    th_run(c, "%s check --baseline %s %s", th_bin(), b, n);
    TH_CHECKF(t, c->status == 1 && row_has(c->out, "  conv ", " inf   overflow") &&
                     !row_has(c->out, "  conv ", "nan") &&
                     !row_has(c->out, "  conv ", "from 0"),
              "%d %s", c->status, c->out);
}

void th_suite_probe12b(th_ctx *t)
{
    th_cmd_result *c = calloc(1, sizeof *c);
    char base[512];
    th_case(t, "run writes the base report");
    if (!c || !base_report(t, c, base, sizeof base)) {
        free(c);
        return;
    }
    c1_cases(t, c, base);
    filename_cases(t, c);
    huge_ratio_cases(t, c);
    free(c);
}
