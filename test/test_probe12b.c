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
 *    as "-nan%";
 *  - the report reader accepted reports no run writes: a capacity of 0
 *    that skipped the fit check (a need above it is refused as any is), cores
 * and chips that are not the system's, a torus that is not its, a core on
 * another core's chip, two cores as one shard of one replica, an empty trace,
 * layer or freeze name;
 *  - messages: byte limits said "characters", a number beyond 2^53 was
 *    echoed as another number (9007199254740993 as ...992), gen was
 *    "an integer from 3 to 3", and check took a sweep file for a file of
 *    an unknown format.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test/harness.h"

/* A report of tiny2d as run writes it, which the cases below edit (when
 * run fails, there is no file, and each case says so). */
static void base_report(th_cmd_result *c, char *path, size_t cap)
{
    snprintf(path, cap, "%s/p12b-base.json", th_tmpdir());
    th_run(c, "%s run traces/small/tiny2d.json --quiet --report %s", th_bin(),
           path);
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
    TH_CHECKF(t,
              c->status == 2 && strstr(c->err, line) &&
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

/* One edit of the base report given to view: refused (exit 2) with
 * `want` in its message. */
static void view_refuses(th_ctx *t, th_cmd_result *c, const char *base,
                         const char *from, const char *to, const char *name,
                         const char *want)
{
    char path[512];
    if (!TH_CHECK(t, edited(base, from, to, name, path, sizeof path)))
        return;
    th_run(c, "SDL_VIDEODRIVER=dummy %s view %s --screenshot %s/p12b.png",
           th_bin(), path, th_tmpdir());
    TH_CHECKF(t, c->status == 2 && strstr(c->err, want), "%d %s", c->status,
              c->err);
}

/* One edit of the base report and the message it must be refused with. */
typedef struct {
    const char *from, *to, *want;
} rep_edit;

/* Each edit as its own report (TMP/p12b-TAG-N.json), refused by check
 * with its message under the case `what`; the output terminal-safe too
 * when safe is set. */
static void refuse_edits(th_ctx *t, th_cmd_result *c, const char *base,
                         const rep_edit *k, size_t n, const char *tag,
                         const char *what, int safe)
{
    for (size_t i = 0; i < n; i++) {
        char path[512], name[64];
        snprintf(name, sizeof name, "p12b-%s-%zu.json", tag, i);
        th_case(t, what);
        if (!TH_CHECKF(
                t, edited(base, k[i].from, k[i].to, name, path, sizeof path),
                "no '%s' in the base report", k[i].from))
            continue;
        refused(t, c, path, k[i].want);
        if (safe)
            TH_CHECK(t, terminal_safe(c->out) && terminal_safe(c->err));
    }
}

static void c1_cases(th_ctx *t, th_cmd_result *c, const char *base)
{
    static const rep_edit k[] = {
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
    refuse_edits(t, c, base, k, sizeof k / sizeof k[0], "c1",
                 "report: C1 controls, line separators and bidi controls are "
                 "refused in its strings (check)",
                 1);

    th_case(t, "report: view refuses them the same way");
    view_refuses(t, c, base, "\"trace\": \"tiny2d\"",
                 "\"trace\": \"evil\\u009b2J\"", "p12b-c1v.json",
                 "p12b-c1v.json: trace: the string contains a control "
                 "character (U+009B)");

    th_case(t, "run: a trace named with C1 controls is refused, and a "
               "message quoting one shows it escaped");
    {
        char path[512];
        if (TH_CHECK(t,
                     edited("traces/small/tiny2d.json", "\"name\": \"tiny2d\"",
                            "\"name\": \"evil\\u009b2J\\u0085x\"",
                            "p12b-c1t.json", path, sizeof path))) {
            th_run(c, "%s run %s --quiet", th_bin(), path);
            TH_CHECKF(t,
                      c->status == 2 && terminal_safe(c->out) &&
                          terminal_safe(c->err) &&
                          strstr(c->err, "p12b-c1t.json: name: contains a "
                                         "control character (U+009B)"),
                      "%d %s", c->status, c->err);
        }
        /* --freeze echoes an entry that names no layer */
        th_run(c,
               "%s run traces/small/tiny2d.json --quiet --freeze "
               "\"$(printf 'x\\302\\233y')\"",
               th_bin());
        TH_CHECKF(t,
                  c->status == 2 && terminal_safe(c->err) &&
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
        {"\303\251t\303\251\302\205", "\303\251t\303\251?"}, /* é kept */
        {NULL, x126}, /* 126 bytes and a 2-byte character: cut before it */
    };
    char *text = th_slurp("traces/small/tiny2d.json", NULL);
    char *named = text ? strstr(text, "\"name\": \"tiny2d\",") : NULL;
    if (named)
        memset(named, ' ', strlen("\"name\": \"tiny2d\","));
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        char file[512], rep[512], want[512];
        snprintf(file, sizeof file, "%s/%s%s.json", th_tmpdir(),
                 k[i].file ? k[i].file : x126, k[i].file ? "" : "\303\251");
        snprintf(rep, sizeof rep, "%s/p12b-fn%zu.json", th_tmpdir(), i);
        th_case(t, "run: a trace's default name from a hostile file name is "
                   "one line of UTF-8, and its report reads back");
        if (!TH_CHECKF(t, named != NULL, "tiny2d.json has no name to remove"))
            continue;
        th_put(file, text);
        th_run(c, "%s run '%s' --report %s", th_bin(), file, rep);
        snprintf(want, sizeof want, "%s on v3-8: ", k[i].name);
        TH_CHECKF(t,
                  c->status == 0 && strncmp(c->out, want, strlen(want)) == 0 &&
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
    TH_CHECKF(t,
              row_has(c->out, "step time", "+1.00e+314%  SLOWER") &&
                  row_has(c->out, "  mxu", "+1.00e+314%  grew") &&
                  row_has(c->out, "  halo", "from 0  grew") &&
                  !strstr(strstr(c->out, "from 0") + 1, "from 0"),
              "%s", c->out);

    th_case(t, "check: from a denormal base, the ratio overflows too");
    save_result(t, tiny, NULL, "p12b-tiny.json", b, sizeof b);
    save_result(t, one, NULL, "p12b-one.json", n, sizeof n);
    th_run(c, "%s check --baseline %s %s", th_bin(), b, n);
    TH_CHECKF(t,
              c->status == 1 && strstr(c->out, "-> 1 s (+2.02e+325%)") &&
                  !strstr(c->out, "from 0"),
              "%d %s", c->status, c->out);

    th_case(t, "check: a layer whose categories sum past a double has no "
               "percentage (was nan or \"from 0\")");
    save_result(t, b4, lay_b, "p12b-lb.json", b, sizeof b);
    save_result(t, n308, lay_n, "p12b-ln.json", n, sizeof n);
    th_run(c, "%s check --baseline %s %s", th_bin(), b, n);
    TH_CHECKF(t,
              c->status == 1 && row_has(c->out, "  conv ", " inf   overflow") &&
                  !row_has(c->out, "  conv ", "nan") &&
                  !row_has(c->out, "  conv ", "from 0"),
              "%d %s", c->status, c->out);
}

/* Reports no run can write were read by check and view: each edit below
 * of a report run wrote is refused, naming its JSON path. */
static void consistency_cases(th_ctx *t, th_cmd_result *c, const char *base)
{
    static const rep_edit k[] = {
        {"\"hbm_capacity_bytes\": 17179869184", "\"hbm_capacity_bytes\": 0",
         "fits: true, but hbm_needed_bytes (1261048) is above "
         "hbm_capacity_bytes (0)"},
        {"\"system\": \"v3-8\"", "\"system\": \"v3-32\"",
         "cores: 8, but v3-32 has 32 cores"},
        {"\"chips\": 4", "\"chips\": 3",
         "chips: 3, but v3-8 has 4 chips (2 cores a chip)"},
        {"\"dim_x\": 2", "\"dim_x\": 1000",
         "dim_x: 1000, but the chips of v3-8 are a 2x2 torus"},
        {"\"dim_y\": 2", "\"dim_y\": 4",
         "dim_y: 4, but the chips of v3-8 are a 2x2 torus"},
        {"{\"core\": 5, \"chip\": 2", "{\"core\": 5, \"chip\": 3",
         "per_core[5].chip: 3, but core 5 is on chip 2 (2 cores a chip"},
        {"{\"core\": 1, \"chip\": 0, \"replica\": 1",
         "{\"core\": 1, \"chip\": 0, \"replica\": 0",
         "per_core[1]: replica 0, shard 0 is core 0's too"},
        {"{\"name\": \"relu1\"", "{\"name\": \"\"", "layers[3].name: empty"},
        {"\"trace\": \"tiny2d\"", "\"trace\": \"\"", "trace: empty"},
        {"\"overrides\": {}", "\"overrides\": {}, \"freeze\": \"\"",
         "freeze: empty"},
    };
    refuse_edits(t, c, base, k, sizeof k / sizeof k[0], "rep",
                 "report: counts, torus, chips, replicas and names that no run "
                 "writes are refused (check)",
                 0);

    th_case(t, "report: view refuses them too");
    view_refuses(t, c, base, "\"chips\": 4", "\"chips\": 3", "p12b-repv.json",
                 "p12b-repv.json: chips: 3, but ");

    /* What run writes reads, and the same report with one figure edited
     * does not: one chip, v2, 4-core replicas, a step that does not fit
     * (every core replica 0, shard 0: run has no placement then), and
     * --functional. */
    static const struct {
        const char *run, *from, *to, *want;
    } rk[] = {
        {"traces/small/tiny2d.json --system v2-2", "\"chips\": 1",
         "\"chips\": 2", "chips: 2, but v2-2 has 1 chip (2 cores a chip)"},
        {"traces/small/tiny2d.json --system v2-8", "\"dim_y\": 2",
         "\"dim_y\": 1", "dim_y: 1, but the chips of v2-8 are a 2x2 torus"},
        {"traces/small/tiny3d-p4.json --system v3-32 --batch 8",
         "\"core\": 5, \"chip\": 2, \"replica\": 1, \"shard\": 1",
         "\"core\": 5, \"chip\": 2, \"replica\": 1, \"shard\": 0",
         "per_core[5]: replica 1, shard 0 is core 4's too"},
        {"traces/small/tiny3d-p4.json --system v3-32 --batch 8 --set "
         "hbm.capacity_gib=0.001",
         "\"cores\": 32", "\"cores\": 8", "cores: 8, but v3-32 has 32 cores"},
        {"traces/small/tiny2d.json --functional", "\"trace\": \"tiny2d\"",
         "\"trace\": \"\"", "trace: empty"},
    };
    for (size_t i = 0; i < sizeof rk / sizeof rk[0]; i++) {
        char rep[512], path[512], name[64];
        snprintf(rep, sizeof rep, "%s/p12b-ok%zu.json", th_tmpdir(), i);
        snprintf(name, sizeof name, "p12b-ok%zu-edit.json", i);
        th_case(t, "report: what run writes reads back (check), edited it "
                   "does not");
        th_run(c, "%s run %s --quiet --report %s", th_bin(), rk[i].run, rep);
        TH_CHECKF(t, c->status == 0 || c->status == 3, "run %s: %d %s",
                  rk[i].run, c->status, c->err);
        th_run(c, "%s check --baseline %s %s", th_bin(), rep, rep);
        TH_CHECKF(t, c->status == 0, "%s: %d %s", rk[i].run, c->status, c->err);
        if (TH_CHECKF(
                t, edited(rep, rk[i].from, rk[i].to, name, path, sizeof path),
                "no '%s' in the report of %s", rk[i].from, rk[i].run))
            refused(t, c, path, rk[i].want);
    }
    th_case(t, "report: a torus of 0 is unknown, as when absent, and reads; "
               "0 by a wrong one does not");
    {
        char path[512];
        if (TH_CHECK(t, edited(base, "\"dim_x\": 2,\n  \"dim_y\": 2",
                               "\"dim_x\": 0,\n  \"dim_y\": 0",
                               "p12b-dim0.json", path, sizeof path))) {
            th_run(c, "%s check --baseline %s %s", th_bin(), path, path);
            TH_CHECKF(t, c->status == 0, "%d %s", c->status, c->err);
        }
        if (TH_CHECK(t, edited(base, "\"dim_x\": 2,\n  \"dim_y\": 2",
                               "\"dim_x\": 0,\n  \"dim_y\": 3",
                               "p12b-dim03.json", path, sizeof path)))
            refused(t, c, path,
                    "dim_y: 3, but the chips of v3-8 are a 2x2 "
                    "torus (dim_x 2, dim_y 2)");
    }
}

/* Messages that said what is not so: "63 characters" of a byte limit, a
 * number the file does not hold, "an integer from 3 to 3", and a sweep
 * file given to check taken for an unknown format. */
static void message_cases(th_ctx *t, th_cmd_result *c, const char *base)
{
    static const rep_edit k[] = {
        {"\"gen\": 3", "\"gen\": \"v9\"",
         "gen: expected 3, the generation of v3-8, found a string"},
        {"\"cores\": 8", "\"cores\": 9007199254740993",
         "cores: expected an integer from 1 to 65536, found about 9.0072e+15 "
         "(beyond 2^53: not exact)"},
        {"\"global_batch\": 16", "\"global_batch\": -18014398509481985",
         "global_batch: expected an integer from 1 to 9000000000000000, "
         "found about -1.8014e+16 (beyond 2^53: not exact)"},
    };
    refuse_edits(t, c, base, k, sizeof k / sizeof k[0], "msg",
                 "report: gen names the one value it may be; a number beyond "
                 "2^53 is not echoed as another number",
                 0);

    th_case(t, "check: a sweep file is named as one (with its format, and "
               "without, by its grid)");
    {
        char sw[512], nofmt[512];
        snprintf(sw, sizeof sw, "%s/p12b-sweep.json", th_tmpdir());
        th_put(sw, "{\"format\": \"tpuemu-sweep/1\", \"name\": \"s\", "
                   "\"trace\": \"tiny2d.json\", \"grid\": {\"batch\": [8]}}");
        refused(t, c, sw,
                "format: \"tpuemu-sweep/1\": this is a sweep file "
                "(what sweep reads), not a report: tpuemu sweep "
                "FILE --out DIR writes one per run");
        snprintf(nofmt, sizeof nofmt, "%s/p12b-sweep-nofmt.json", th_tmpdir());
        th_put(nofmt, "{\"name\": \"s\", \"trace\": \"tiny2d.json\", "
                      "\"grid\": {\"batch\": [8]}}");
        refused(t, c, nofmt,
                "format: missing: this looks like a sweep file "
                "(what sweep reads), not a report");
    }

    th_case(t, "run: a --freeze list over the limit is counted in bytes");
    {
        char list[1100];
        memset(list, 'a', 1024);
        list[1024] = 0;
        th_run(c, "%s run traces/small/tiny2d.json --quiet --freeze %s",
               th_bin(), list);
        TH_CHECKF(t,
                  c->status == 2 &&
                      strstr(c->err, "--freeze: the list is 1024 bytes "
                                     "long, more than 1023"),
                  "%d %s", c->status, c->err);
    }
}

void th_suite_probe12b(th_ctx *t)
{
    th_cmd_result *c = calloc(1, sizeof *c);
    char base[512];
    if (!c)
        return;
    base_report(c, base, sizeof base);
    c1_cases(t, c, base);
    filename_cases(t, c);
    huge_ratio_cases(t, c);
    consistency_cases(t, c, base);
    message_cases(t, c, base);
    free(c);
}
