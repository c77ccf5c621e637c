/* tpuemu check, end to end through the binary: identical reports pass, a
 * grown category beyond the tolerance fails and is named, a change within
 * the tolerance passes, reports of different runs are refused (exit 2). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>

#include "emu/params.h"
#include "test/harness.h"
#include "emu/out/outfile.h"
#include "emu/graph.h"

/* Eight cores in two kinds (even and odd shards of 2-way replicas), so the
 * table's core grouping has something to group. */
static void make_result(emu_result *r, const char *trace, const char *system)
{
    static const double cat[2][CAT_COUNT] = {
        {0.50, 0.20, 0.10, 0.01, 0.05, 0.04},
        {0.50, 0.20, 0.10, 0.01, 0.05, 0.03}};
    th_result_make(r, trace, system, 8, 2, 64, cat[0], cat[1]);
}

static void grow(emu_result *r, int core_parity, emu_cat cat, double frac)
{
    for (int i = 0; i < r->cores; i++)
        if (core_parity < 0 || i % 2 == core_parity)
            r->per_core[i].breakdown_s[cat] +=
                r->per_core[i].breakdown_s[cat] * frac;
    th_result_retime(r);
}

/* A does-not-fit report as run --report leaves it: zero times. */
static void unfit(emu_result *r, double need_gib, double has_gib)
{
    r->fits = 0;
    r->step_time_s = 0;
    r->hbm_needed_bytes = need_gib * 1073741824.0;
    r->hbm_capacity_bytes = has_gib * 1073741824.0;
    for (int i = 0; i < r->cores; i++) {
        r->per_core[i].step_time_s = 0;
        for (int k = 0; k < CAT_COUNT; k++)
            r->per_core[i].breakdown_s[k] = 0;
    }
}

/* The line of out that contains what, or NULL. */
static const char *line_with(const char *out, const char *what, char *buf,
                             size_t cap)
{
    const char *p = strstr(out, what);
    if (!p)
        return NULL;
    while (p > out && p[-1] != '\n')
        p--;
    size_t n = strcspn(p, "\n");
    if (n >= cap)
        n = cap - 1;
    memcpy(buf, p, n);
    buf[n] = '\0';
    return buf;
}

/* v3-2048 (2048 one-core replicas), every even core slower by frac. */
static void make_big(emu_result *r, double frac)
{
    const double even[CAT_COUNT] = {[CAT_MXU] = 0.5 * (1 + frac),
                                    [CAT_VECTOR] = 0.1};
    const double odd[CAT_COUNT] = {[CAT_MXU] = 0.5, [CAT_VECTOR] = 0.1};
    th_result_make(r, "big", "v3-2048", 2048, 1, 2048, even, odd);
}


#define TINY "traces/small/tiny2d.json"

static void kind_cases(th_ctx *t)
{
    th_cmd_result *c = malloc(sizeof *c);
    if (!c)
        return;
    const char *d = th_tmpdir();
    char tr[512], inf[512], nodrop[512];
    snprintf(tr, sizeof tr, "%s/check-tiny2d.json", d);
    snprintf(inf, sizeof inf, "%s/check-tiny2d-infer.json", d);
    snprintf(nodrop, sizeof nodrop, "%s/check-tiny2d-layer.json", d);
    char *text = th_slurp(TINY, NULL);
    if (!TH_CHECKF(t, text && strstr(text, "\"mode\": \"train\""),
                   "%s has no train mode", TINY)) {
        free(text);
        free(c);
        return;
    }
    th_put(tr, text);
    char *m = strstr(text, "\"mode\": \"train\"");
    memcpy(m, "\"mode\": \"infer\"", strlen("\"mode\": \"infer\""));
    th_put(inf, text);
    free(text);
    th_run(c, "%s run %s --report %s/check-train.json --quiet && "
              "%s run %s --report %s/check-infer.json --quiet && "
              "%s run %s --report %s/check-whatif.json --quiet "
              "--set mxu.rows=256 --set mxu.cols=256",
           th_bin(), tr, d, th_bin(), inf, d, th_bin(), tr, d);
    TH_CHECKF(t, c->status == 0, "runs: %d %s", c->status, c->err);

    th_case(t, "check: a training step against an inference step: exit 2");
    th_run(c, "%s check --baseline %s/check-train.json %s/check-infer.json",
           th_bin(), d, d);
    TH_CHECKF(t, c->status == 2 && strstr(c->err, "different modes"),
              "status %d, stderr %s", c->status, c->err);

    th_case(t, "check: a what-if that is faster keeps the baseline");
    th_run(c, "%s check --baseline %s/check-train.json %s/check-whatif.json",
           th_bin(), d, d);
    TH_CHECKF(t, c->status == 0 && strstr(c->out, "what-if") &&
                     !strstr(c->out, "re-record"),
              "status %d, out %s", c->status, c->out);
    /* Without the override the same gain is a stale baseline. */
    th_run(c, "%s check --baseline %s/check-whatif.json %s/check-train.json "
              "--tolerance 0.5",
           th_bin(), d, d);
    TH_CHECKF(t, c->status == 0, "reverse: status %d, %s", c->status, c->err);

    th_case(t, "check: layers[] naming other layers is noted");
    text = th_slurp(TINY, NULL);
    char *rename = text ? strstr(text, "\"name\": \"conv1\"") : NULL;
    if (TH_CHECKF(t, rename != NULL, "%s has no layer conv1", TINY)) {
        /* The layer and every reference to it (same length, in place). */
        for (char *p = text; (p = strstr(p, "\"conv1\"")) != NULL; p++)
            p[5] = 'X';
        th_put(nodrop, text);
        th_run(c, "%s run %s --report %s/check-layer.json --quiet", th_bin(),
               nodrop, d);
        th_run(c, "%s check --baseline %s/check-train.json %s/check-layer.json",
               th_bin(), d, d);
        TH_CHECKF(t, strstr(c->out, "note: the layers differ: 1 only in BASE "
                                    "(conv1), 1 only in NEW (convX)") != NULL,
                  "status %d, out %s, err %s", c->status, c->out, c->err);
        th_run(c, "%s check --baseline %s/check-train.json %s/check-train.json",
               th_bin(), d, d);
        TH_CHECKF(t, c->status == 0 && !strstr(c->out, "layers differ"),
                  "same report: %s", c->out);
    }
    free(text);
    free(c);
}

#define TINY3D "traces/small/tiny3d-p4.json"

/* Writes TINY3D with its split 2 ways instead of 4 (same name, system,
 * batch): num_cores_per_replica 2. */
static int tiny_p2(th_ctx *t, const char *out)
{
    static char text[16384];
    FILE *f = fopen(TINY3D, "rb");
    if (!TH_CHECKF(t, f != NULL, "cannot open %s", TINY3D))
        return 0;
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    const char *a = "\"num_cores_per_replica\": 4";
    const char *b = "[[1, 4, 1, 1, 1], null]";
    char *pa = strstr(text, a), *pb = strstr(text, b);
    if (!TH_CHECKF(t, pa && pb && pa < pb, "%s: layout changed", TINY3D))
        return 0;
    f = fopen(out, "wb");
    if (!f)
        return 0;
    fprintf(f, "%.*s\"num_cores_per_replica\": 2%.*s[[1, 2, 1, 1, 1], null]%s",
            (int)(pa - text), text, (int)(pb - (pa + strlen(a))),
            pa + strlen(a), pb + strlen(b));
    fclose(f);
    return 1;
}

static void check_notes(th_ctx *t)
{
    th_case(t, "check: the 'runs differ' note lists only differing fields");
    static th_cmd_result c;
    char p4[512], p2[512], b8[512], tr2[512];
    const char *d = th_tmpdir();
    snprintf(p4, sizeof p4, "%s/fix-p4.json", d);
    snprintf(p2, sizeof p2, "%s/fix-p2.json", d);
    snprintf(b8, sizeof b8, "%s/fix-b8.json", d);
    snprintf(tr2, sizeof tr2, "%s/fix-tiny-p2.json", d);
    if (!tiny_p2(t, tr2))
        return;
    th_run(&c, "%s run %s --quiet --report %s", th_bin(), TINY3D, p4);
    TH_CHECKF(t, c.status == 0, "run: %d %s", c.status, c.err);
    th_run(&c, "%s run %s --quiet --report %s", th_bin(), tr2, p2);
    TH_CHECKF(t, c.status == 0, "run p2: %d %s", c.status, c.err);
    th_run(&c, "%s run %s --quiet --batch 8 --report %s", th_bin(), TINY3D, b8);
    TH_CHECKF(t, c.status == 0, "run --batch 8: %d %s", c.status, c.err);

    /* same batch, another split: only the cores per replica */
    th_run(&c, "%s check --tolerance 0.99 --baseline %s %s", th_bin(), p4, p2);
    TH_CHECKF(t,
              strstr(c.out, "note: the runs differ: cores per replica 4 vs "
                            "2\n") != NULL &&
                  strstr(c.out, "global batch") == NULL,
              "status %d: %s", c.status, c.out);
    /* same split, another batch: only the batch */
    th_run(&c, "%s check --tolerance 0.99 --baseline %s %s", th_bin(), p4, b8);
    TH_CHECKF(t,
              strstr(c.out, "note: the runs differ: global batch 4 vs 8\n") !=
                      NULL &&
                  strstr(c.out, "cores per replica") == NULL,
              "status %d: %s", c.status, c.out);
    /* both */
    th_run(&c, "%s check --tolerance 0.99 --baseline %s %s", th_bin(), b8, p2);
    TH_CHECKF(t,
              strstr(c.out, "note: the runs differ: global batch 8 vs 4, "
                            "cores per replica 4 vs 2\n") != NULL,
              "status %d: %s", c.status, c.out);
    /* neither: no note */
    th_run(&c, "%s check --baseline %s %s", th_bin(), p4, p4);
    TH_CHECKF(t, c.status == 0 && strstr(c.out, "runs differ") == NULL,
              "status %d: %s", c.status, c.out);
}

static void check_tolerance(th_ctx *t)
{
    th_case(t, "check: --tolerance is a fraction; 5, 1, 1e400 and 5% are "
               "refused (exit 2, saying so), 0.999 and 0 are taken");
    static th_cmd_result c;
    char rep[512];
    snprintf(rep, sizeof rep, "%s/fix-tol.json", th_tmpdir());
    th_run(&c, "%s run %s --quiet --report %s", th_bin(), TINY3D, rep);
    if (!TH_CHECKF(t, c.status == 0, "run: %d %s", c.status, c.err))
        return;
    static const char *const bad[] = {"5", "1", "1.0", "1e400", "5%",
                                      "0.05%", "-0.1"};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        th_run(&c, "%s check --tolerance '%s' --baseline %s %s", th_bin(),
               bad[k], rep, rep);
        int frac = strchr(bad[k], '-') == NULL;
        TH_CHECKF(t,
                  c.status == 2 &&
                      (!frac || strstr(c.err, "--tolerance is a fraction: "
                                              "0.05 means 5%") != NULL) &&
                      strstr(c.out, "ok:") == NULL,
                  "--tolerance %s: status %d: %s%s", bad[k], c.status, c.out,
                  c.err);
    }
    static const char *const good[] = {"0.999", "0", "0.05", "1e-400"};
    for (size_t k = 0; k < sizeof good / sizeof *good; k++) {
        th_run(&c, "%s check --tolerance %s --baseline %s %s", th_bin(),
               good[k], rep, rep);
        TH_CHECKF(t, c.status == 0, "--tolerance %s: status %d: %s", good[k],
                  c.status, c.err);
    }
    th_run(&c, "%s check --help", th_bin());
    TH_CHECKF(t, c.status == 0 && strstr(c.out, "0.05 means 5%"),
              "check --help: %s", c.out);
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
    save_result(t, b4, NULL, "check-b4.json", b, sizeof b);
    save_result(t, n308, NULL, "check-n308.json", n, sizeof n);
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
    save_result(t, tiny, NULL, "check-tiny.json", b, sizeof b);
    save_result(t, one, NULL, "check-one.json", n, sizeof n);
    th_run(c, "%s check --baseline %s %s", th_bin(), b, n);
    TH_CHECKF(t,
              c->status == 1 && strstr(c->out, "-> 1 s (+2.02e+325%)") &&
                  !strstr(c->out, "from 0"),
              "%d %s", c->status, c->out);

    th_case(t, "check: a layer whose categories sum past a double has no "
               "percentage (was nan or \"from 0\")");
    save_result(t, b4, lay_b, "check-lb.json", b, sizeof b);
    save_result(t, n308, lay_n, "check-ln.json", n, sizeof n);
    th_run(c, "%s check --baseline %s %s", th_bin(), b, n);
    TH_CHECKF(t,
              c->status == 1 && row_has(c->out, "  conv ", " inf   overflow") &&
                  !row_has(c->out, "  conv ", "nan") &&
                  !row_has(c->out, "  conv ", "from 0"),
              "%d %s", c->status, c->out);
}

void th_suite_check(th_ctx *t)
{
    char base[512], same[512], slow[512], bit[512], other[512], odd[512];
    emu_result r;
    th_cmd_result c;

    make_result(&r, "tiny", "v3-8");
    th_result_save(t, &r, "base.json", base, sizeof base);
    th_result_save(t, &r, "same.json", same, sizeof same);
    emu_result_free(&r);

    make_result(&r, "tiny", "v3-8");
    grow(&r, -1, CAT_MXU, 0.10); /* +0.05 s on 0.91: +5.5% */
    th_result_save(t, &r, "slow.json", slow, sizeof slow);
    emu_result_free(&r);

    make_result(&r, "tiny", "v3-8");
    grow(&r, -1, CAT_VECTOR, 0.05); /* +0.01 s: +1.1%, within 2% */
    th_result_save(t, &r, "bit.json", bit, sizeof bit);
    emu_result_free(&r);

    make_result(&r, "tiny", "v3-8");
    grow(&r, 1, CAT_HBM_STALL, 0.5); /* only odd cores: +5.6% on them */
    th_result_save(t, &r, "odd.json", odd, sizeof odd);
    emu_result_free(&r);

    make_result(&r, "other", "v3-8");
    th_result_save(t, &r, "other.json", other, sizeof other);
    emu_result_free(&r);

    th_case(t, "identical reports: exit 0 with a one-line OK");
    th_run(&c, "%s check --baseline %s %s", th_bin(), base, same);
    TH_CHECKF(t, c.status == 0, "status %d: %s%s", c.status, c.out, c.err);
    TH_CHECKF(t, strncmp(c.out, "ok:", 3) == 0 && strchr(c.out, '\n') ==
                                                       c.out + strlen(c.out) - 1,
              "out: %s", c.out);

    th_case(t, "a category grown 10% beyond tolerance: exit 1, named");
    th_run(&c, "%s check --baseline %s %s", th_bin(), base, slow);
    TH_CHECKF(t, c.status == 1, "status %d: %s%s", c.status, c.out, c.err);
    TH_CHECKF(t, strstr(c.out, "REGRESSION") != NULL, "out: %s", c.out);
    /* The mxu row of the core group is marked, no other category is. */
    const char *row = strstr(c.out, "\n  mxu ");
    TH_CHECKF(t, row && strstr(row, "grew") &&
                     strstr(row, "grew") < strchr(row + 1, '\n'),
              "out: %s", c.out);
    TH_CHECKF(t, !strstr(c.out, "  vector ") ||
                     !strstr(strstr(c.out, "  vector "), "grew") ||
                     strstr(strstr(c.out, "  vector "), "grew") >
                         strchr(strstr(c.out, "  vector ") + 1, '\n'),
              "vector marked: %s", c.out);
    TH_CHECKF(t, strstr(c.out, "cores 0,2,4,6") && strstr(c.out, "cores 1,3,5,7"),
              "groups: %s", c.out);

    th_case(t, "the same change with a larger tolerance passes");
    th_run(&c, "%s check --tolerance 0.06 --baseline %s %s", th_bin(), base,
           slow);
    TH_CHECKF(t, c.status == 0, "status %d: %s%s", c.status, c.out, c.err);

    th_case(t, "a change within the tolerance: exit 0");
    th_run(&c, "%s check --baseline %s %s", th_bin(), base, bit);
    TH_CHECKF(t, c.status == 0, "status %d: %s%s", c.status, c.out, c.err);
    TH_CHECK(t, strstr(c.out, "+1.1") != NULL);

    th_case(t, "one core group slower (step time too): only it is listed");
    th_run(&c, "%s check --baseline %s %s", th_bin(), base, odd);
    TH_CHECKF(t, c.status == 1, "status %d: %s%s", c.status, c.out, c.err);
    TH_CHECKF(t, strstr(c.out, "cores 1,3,5,7") && !strstr(c.out, "cores 0,"),
              "out: %s", c.out);
    row = strstr(c.out, "  hbm_stall ");
    TH_CHECKF(t, row && strstr(row, "grew"), "out: %s", c.out);

    th_case(t, "faster is not a regression");
    th_run(&c, "%s check --baseline %s %s", th_bin(), slow, base);
    TH_CHECKF(t, c.status == 0, "status %d: %s%s", c.status, c.out, c.err);

    th_case(t, "different traces: exit 2, says so");
    th_run(&c, "%s check --baseline %s %s", th_bin(), base, other);
    TH_CHECKF(t, c.status == 2 && strstr(c.err, "different traces"),
              "status %d: %s", c.status, c.err);

    th_case(t, "unreadable report and bad usage: exit 2");
    th_run(&c, "%s check --baseline %s/nope.json %s", th_bin(), th_tmpdir(),
           base);
    TH_CHECKF(t, c.status == 2 && strstr(c.err, "tpuemu: error:") &&
                     strstr(c.err, "nope.json"),
              "status %d: %s", c.status, c.err);
    th_run(&c, "%s check %s", th_bin(), base);
    TH_CHECK(t, c.status == 2);
    th_run(&c, "%s check --baseline %s %s --tolerance x", th_bin(), base, base);
    TH_CHECK(t, c.status == 2);

    th_case(t, "baseline did not fit, NEW fits: an improvement, exit 0, "
               "in GiB");
    {
        char nofit[512], line[512];
        make_result(&r, "tiny", "v3-8");
        unfit(&r, 20.5, 16);
        th_result_save(t, &r, "nofit.json", nofit, sizeof nofit);
        emu_result_free(&r);
        th_run(&c, "%s check --baseline %s %s", th_bin(), nofit, base);
        TH_CHECKF(t, c.status == 0, "status %d: %s%s", c.status, c.out,
                  c.err);
        TH_CHECKF(t, strstr(c.out, "baseline did not fit") &&
                         strstr(c.out, "now it does") &&
                         strstr(c.out, "20.5 GiB") &&
                         strstr(c.out, "16 GiB") &&
                         !strstr(c.out, "grew") &&
                         !strstr(c.out, "REGRESSION"),
                  "out: %s", c.out);

        th_case(t, "baseline fits, NEW does not: exit 1, 'no longer fits' "
                   "with the figures in GiB, the step row marked");
        th_run(&c, "%s check --baseline %s %s", th_bin(), base, nofit);
        TH_CHECKF(t, c.status == 1, "status %d: %s%s", c.status, c.out,
                  c.err);
        TH_CHECKF(t, line_with(c.out, "no longer fits", line, sizeof line) &&
                         strstr(line, "needs 20.5 GiB") &&
                         strstr(line, "core has 16 GiB"),
                  "out: %s", c.out);
        TH_CHECKF(t, line_with(c.out, "step time  ", line, sizeof line) &&
                         strstr(line, "DOES NOT FIT") &&
                         !strstr(line, "-100"),
                  "out: %s", c.out);
        TH_CHECKF(t, !strstr(c.out, "bytes"), "out: %s", c.out);

        th_case(t, "neither fits: nothing to compare, exit 0");
        th_run(&c, "%s check --baseline %s %s", th_bin(), nofit, nofit);
        TH_CHECKF(t, c.status == 0 && strstr(c.out, "neither run fits"),
                  "status %d: %s%s", c.status, c.out, c.err);
    }

    th_case(t, "a long core-group label ends in '...,LAST (N cores)'");
    {
        char bb[512], bs[512], line[512];
        make_big(&r, 0);
        th_result_save(t, &r, "big-base.json", bb, sizeof bb);
        emu_result_free(&r);
        make_big(&r, 0.05);
        th_result_save(t, &r, "big-slow.json", bs, sizeof bs);
        emu_result_free(&r);
        th_run(&c, "%s check --baseline %s %s", th_bin(), bb, bs);
        TH_CHECKF(t, c.status == 1, "status %d: %s%s", c.status, c.out,
                  c.err);
        TH_CHECKF(t, line_with(c.out, "cores 0,2,4,", line, sizeof line) &&
                         strstr(line, ",...,2046 (1024 cores)") &&
                         strstr(line, "SLOWER") &&
                         strstr(line, ",...,") - line < 80,
                  "out: %s", c.out);
    }

    th_case(t, "overrides that differ are notes, on exit 1 and on exit 0");
    {
        char ob[512], on[512], os[512];
        static const char *const kb[][2] = {{"hbm.bandwidth_gbs", "225"},
                                            {"mxu.rows", "64"},
                                            {"clock_hz", "700e6"}};
        static const char *const kn[][2] = {{"mxu.rows", "256"},
                                            {"clock_hz", "700e6"},
                                            {"ici.link_gbs", "31"}};
        make_result(&r, "tiny", "v3-8");
        th_result_overrides(&r, 3, kb);
        th_result_save(t, &r, "ov-base.json", ob, sizeof ob);
        emu_result_free(&r);
        make_result(&r, "tiny", "v3-8");
        th_result_overrides(&r, 3, kn);
        th_result_save(t, &r, "ov-same.json", os, sizeof os);
        grow(&r, -1, CAT_MXU, 0.10);
        th_result_save(t, &r, "ov-slow.json", on, sizeof on);
        emu_result_free(&r);
        for (int k = 0; k < 2; k++) {
            th_run(&c, "%s check --baseline %s %s", th_bin(), ob,
                   k ? os : on);
            TH_CHECKF(t, c.status == (k ? 0 : 1), "status %d: %s%s",
                      c.status, c.out, c.err);
            TH_CHECKF(t, strstr(c.out, "note: BASE sets hbm.bandwidth_gbs="
                                       "225\n") &&
                             strstr(c.out, "note: mxu.rows: BASE 64, NEW "
                                           "256\n") &&
                             strstr(c.out, "note: NEW sets ici.link_gbs=31"
                                           "\n") &&
                             !strstr(c.out, "clock_hz"),
                      "out: %s", c.out);
        }
    }

    th_case(t, "a slowdown just past the tolerance reads past it; "
               "--tolerance 1e-400 is 0");
    {
        char b1[512], b2[512];
        make_result(&r, "tiny", "v3-8");
        th_result_save(t, &r, "p-base.json", b1, sizeof b1);
        /* +2.004% of the step, all in mxu */
        grow(&r, -1, CAT_MXU, 0.02004 * 0.90 / 0.50);
        th_result_save(t, &r, "p-slow.json", b2, sizeof b2);
        emu_result_free(&r);
        th_run(&c, "%s check --baseline %s %s", th_bin(), b1, b2);
        double shown = 0, tolshown = 0;
        const char *p = strstr(c.out, "(+");
        const char *q = strstr(c.out, "tolerance ");
        TH_CHECKF(t, c.status == 1 && p && q &&
                         sscanf(p, "(+%lf", &shown) == 1 &&
                         sscanf(q, "tolerance %lf", &tolshown) == 1 &&
                         shown > tolshown,
                  "status %d: %s", c.status, c.out);
        th_run(&c, "%s check --baseline %s %s --tolerance 1e-400", th_bin(),
               b1, b1);
        TH_CHECKF(t, c.status == 0, "status %d: %s%s", c.status, c.out,
                  c.err);
        th_run(&c, "%s check --baseline %s %s --tolerance 1e-400", th_bin(),
               b1, b2);
        TH_CHECKF(t, c.status == 1, "status %d: %s%s", c.status, c.out,
                  c.err);
        th_run(&c, "%s check --baseline %s %s --tolerance 1e400", th_bin(),
               b1, b2);
        TH_CHECKF(t, c.status == 2 && strstr(c.err, "is a fraction"),
                  "status %d: %s", c.status, c.err);
    }

    th_case(t, "options: --opt=V and --opt V alike; one given twice is "
               "refused (exit 2), --set may repeat");
    th_run(&c, "%s check --baseline=%s --tolerance=0.06 %s", th_bin(), base,
           slow);
    TH_CHECKF(t, c.status == 0, "status %d: %s%s", c.status, c.out, c.err);
    th_run(&c, "%s check --baseline %s --baseline=%s %s", th_bin(), slow,
           base, base);
    TH_CHECKF(t, c.status == 2 && strstr(c.err, "--baseline: given twice") &&
                     c.out[0] == '\0',
              "status %d: %s", c.status, c.err);
    th_run(&c, "%s check --baseline %s %s --tolerance 0.5 --tolerance 0.01",
           th_bin(), base, slow);
    TH_CHECKF(t, c.status == 2 && strstr(c.err, "--tolerance: given twice"),
              "status %d: %s", c.status, c.err);
    th_run(&c, "%s validate --dir=%s/nope", th_bin(), th_tmpdir());
    TH_CHECKF(t, c.status == 2 && strstr(c.err, "/nope: cannot read"),
              "status %d: %s", c.status, c.err);
    th_run(&c, "%s validate --dir a --dir b", th_bin());
    TH_CHECKF(t, c.status == 2 && strstr(c.err, "--dir: given twice"),
              "status %d: %s", c.status, c.err);
    th_run(&c, "%s run traces/small/tiny2d.json --batch 16 --batch 32 "
               "--quiet", th_bin());
    TH_CHECKF(t, c.status == 2 && strstr(c.err, "--batch: given twice"),
              "status %d: %s", c.status, c.err);
    th_run(&c, "%s probe allreduce --system=v3-8 --bytes=1024 --set "
               "ici.link_gbs=35 --set=ici.hop_latency_s=1e-6", th_bin());
    TH_CHECKF(t, c.status == 0, "status %d: %s", c.status, c.err);
    /* every command: run's --name=VALUE and --set=KEY=VALUE (first '='
     * splits) reach the run as the spaced form does */
    th_run(&c, "%s run traces/small/tiny2d.json --batch=64 "
               "--set=hbm.bandwidth_gbs=225 --system=v3-32 --quiet",
           th_bin());
    {
        char eq[256];
        size_t n = strlen(c.out) < sizeof eq - 1 ? strlen(c.out) : sizeof eq - 1;
        memcpy(eq, c.out, n);
        eq[n] = 0;
        th_run(&c, "%s run traces/small/tiny2d.json --batch 64 --set "
                   "hbm.bandwidth_gbs=225 --system v3-32 --quiet",
               th_bin());
        TH_CHECKF(t, c.status == 0 && eq[0] && strcmp(eq, c.out) == 0,
                  "run --name=VALUE: '%s' vs '%s' (%s)", eq, c.out, c.err);
    }
    th_run(&c, "%s run traces/small/tiny2d.json --quiet=1", th_bin());
    TH_CHECKF(t, c.status == 2 && strstr(c.err, "--quiet takes no value"),
              "--quiet=1: status %d: %s", c.status, c.err);
    th_run(&c, "%s run traces/small/tiny2d.json --quiet --set mxu.rows=256 "
               "--set mxu.rows=64", th_bin());
    TH_CHECKF(t, c.status == 2 && strstr(c.err, "mxu.rows: given twice"),
              "--set twice: status %d: %s", c.status, c.err);
    th_run(&c, "%s lower traces/small/tiny3d-p4.json --core=1 | head -1",
           th_bin());
    TH_CHECKF(t, c.status == 0 && c.out[0], "lower --core=1: %s", c.err);

    th_case(t, "the engine: same run twice is byte-identical and passes");
    char r1[512], r2[512], r3[512];
    const char *trace = "traces/small/tiny2d.json";
    snprintf(r1, sizeof r1, "%s/gate1.json", th_tmpdir());
    snprintf(r2, sizeof r2, "%s/gate2.json", th_tmpdir());
    snprintf(r3, sizeof r3, "%s/gate3.json", th_tmpdir());
    th_run(&c, "%s run %s --report %s --quiet && %s run %s --report %s "
               "--quiet && cmp %s %s && %s check --baseline %s %s",
           th_bin(), trace, r1, th_bin(), trace, r2, r1, r2, th_bin(), r1, r2);
    /* cmp fails the chain if the two reports differ by one byte. */
    TH_CHECKF(t, c.status == 0 && strstr(c.out, "ok: "),
              "status %d: %s%s", c.status, c.out, c.err);

    th_case(t, "check_perf.sh: a baseline without its reference trace is "
               "an error (exit 1), named");
    {
        /* A copy of the gate's layout (scripts/, traces/reference/,
         * baselines/) with one small trace, so the shared baselines/ is
         * never touched. */
        char root[512];
        const char *bin = th_bin_abs();
        snprintf(root, sizeof root, "%s/perfgate", th_tmpdir());
        th_run(&c, "rm -rf %s && mkdir -p %s/scripts %s/traces/reference "
                   "%s/baselines && cp scripts/check_perf.sh %s/scripts/ && "
                   "cp %s %s/traces/reference/tiny2d.json && %s run %s "
                   "--report %s/baselines/tiny2d.json --quiet",
               root, root, root, root, root, trace, root, bin, trace, root);
        TH_CHECKF(t, c.status == 0, "setup: %d %s", c.status, c.err);
        th_run(&c, "TPUEMU=%s sh %s/scripts/check_perf.sh", bin, root);
        TH_CHECKF(t, c.status == 0 && strstr(c.out, "1 ok, 0 slower, 0 "
                                                    "errors"),
                  "status %d: %s%s", c.status, c.out, c.err);
        th_run(&c, "cp %s/baselines/tiny2d.json %s/baselines/gone.json && "
                   "TPUEMU=%s sh %s/scripts/check_perf.sh",
               root, root, bin, root);
        TH_CHECKF(t, c.status == 1 &&
                         strstr(c.err, "baseline gone has no reference "
                                       "trace: deleted or renamed?") &&
                         strstr(c.out, "1 errors"),
                  "status %d: %s%s", c.status, c.out, c.err);
    }

    th_case(t, "the gate fails on halved HBM bandwidth, naming hbm_stall");
    {
        tpu_params p;
        double bw = 0;
        tpu_error err = {0};
        tpu_params_default(&p, 3);
        TH_CHECK(t, tpu_params_get(&p, "hbm.bandwidth_gbs", &bw, &err) ==
                        TPU_OK && bw > 0);
        /* The tiles fixed in both runs (xla.tile_search=0): with the search
         * on, the lowering re-tiles for the slower HBM (smaller tiles, a
         * little more MXU fill), a real effect but not the one named here. */
        char r4[512];
        snprintf(r4, sizeof r4, "%s/gate4.json", th_tmpdir());
        th_run(&c, "%s run %s --set xla.tile_search=0 --report %s --quiet && "
                   "%s run %s --set xla.tile_search=0 --set "
                   "hbm.bandwidth_gbs=%g --report %s --quiet",
               th_bin(), trace, r4, th_bin(), trace, bw / 2, r3);
        TH_CHECKF(t, c.status == 0, "run: %d %s", c.status, c.err);
        th_run(&c, "%s check --baseline %s %s", th_bin(), r4, r3);
        TH_CHECKF(t, c.status == 1, "status %d: %s%s", c.status, c.out, c.err);
        row = strstr(c.out, "\n  hbm_stall ");
        TH_CHECKF(t, row && strstr(row, "grew") &&
                         strstr(row, "grew") < strchr(row + 1, '\n'),
                  "out: %s", c.out);
        row = strstr(c.out, "\n  mxu ");
        TH_CHECKF(t, row && (!strstr(row, "grew") ||
                             strstr(row, "grew") > strchr(row + 1, '\n')),
                  "mxu marked: %s", c.out);
        TH_CHECK(t, strstr(c.out, "hbm.bandwidth_gbs=") != NULL);
    }
    kind_cases(t);
    check_notes(t);
    check_tolerance(t);
    {
        th_cmd_result *hc = calloc(1, sizeof *hc);
        if (hc)
            huge_ratio_cases(t, hc);
        free(hc);
    }
}
