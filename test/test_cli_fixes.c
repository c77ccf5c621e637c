/* Three CLI findings of a new user's probe (emu/cli_check.c, emu/cli_run.c):
 *
 *  - `check`'s "the runs differ" note lists only the fields that differ
 *    (it said "global batch 32 vs 32, cores per replica 4 vs 8");
 *  - `check --tolerance` is a fraction: 5 (once taken as 500%), 1 and 5%
 *    are refused with exit 2 and a message saying so;
 *  - `run` on a step that does not fit (exit 3) writes the --report but
 *    not --png / --chrome-trace, and says so on stderr; run --help says it.
 *
 * And of a review: graph_freeze_check validates a --freeze list as
 * graph_freeze does without changing the graph, and `sweep` refuses a
 * grid.freeze entry that freezes what an earlier one does ("bn1,conv1"
 * after "conv1,bn1"), as `check` compares the lists.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "emu/graph.h"
#include "test/harness.h"

#define TINY "traces/small/tiny3d-p4.json"

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* Writes TINY with its split 2 ways instead of 4 (same name, system,
 * batch): num_cores_per_replica 2. */
static int tiny_p2(th_ctx *t, const char *out)
{
    static char text[16384];
    FILE *f = fopen(TINY, "rb");
    if (!TH_CHECKF(t, f != NULL, "cannot open %s", TINY))
        return 0;
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    const char *a = "\"num_cores_per_replica\": 4";
    const char *b = "[[1, 4, 1, 1, 1], null]";
    char *pa = strstr(text, a), *pb = strstr(text, b);
    if (!TH_CHECKF(t, pa && pb && pa < pb, "%s: layout changed", TINY))
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
    th_run(&c, "%s run %s --quiet --report %s", th_bin(), TINY, p4);
    TH_CHECKF(t, c.status == 0, "run: %d %s", c.status, c.err);
    th_run(&c, "%s run %s --quiet --report %s", th_bin(), tr2, p2);
    TH_CHECKF(t, c.status == 0, "run p2: %d %s", c.status, c.err);
    th_run(&c, "%s run %s --quiet --batch 8 --report %s", th_bin(), TINY, b8);
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
    th_run(&c, "%s run %s --quiet --report %s", th_bin(), TINY, rep);
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

static void run_nofit(th_ctx *t)
{
    th_case(t, "run: a step that does not fit (exit 3) writes the report, "
               "not --png/--chrome-trace, and names them on stderr");
    static th_cmd_result c;
    char png[512], chrome[512], rep[512];
    const char *d = th_tmpdir();
    snprintf(png, sizeof png, "%s/nofit.png", d);
    snprintf(chrome, sizeof chrome, "%s/nofit-trace.json", d);
    snprintf(rep, sizeof rep, "%s/nofit-report.json", d);
    remove(png);
    remove(chrome);
    remove(rep);
    th_run(&c,
           "%s run %s --set hbm.capacity_gib=0.001 --png %s --chrome-trace "
           "%s --report %s",
           th_bin(), TINY, png, chrome, rep);
    TH_CHECKF(t, c.status == 3, "status %d: %s", c.status, c.err);
    TH_CHECK(t, exists(rep));
    TH_CHECK(t, !exists(png) && !exists(chrome));
    const char *line = strstr(c.err, "tpuemu: not written");
    TH_CHECKF(t,
              line && strstr(line, png) && strstr(line, chrome) &&
                  strstr(line, "--png") && strstr(line, "--chrome-trace") &&
                  strchr(line, '\n') == line + strlen(line) - 1,
              "stderr: %s", c.err);
    /* the error line comes first, the note is one line */
    TH_CHECKF(t, strncmp(c.err, "tpuemu: error: ", 15) == 0 && line > c.err,
              "stderr: %s", c.err);

    /* nothing but the report asked for: no note */
    th_run(&c, "%s run %s --set hbm.capacity_gib=0.001 --report %s", th_bin(),
           TINY, rep);
    TH_CHECKF(t, c.status == 3 && strstr(c.err, "not written") == NULL,
              "status %d: %s", c.status, c.err);
    /* a run that fits writes them all and says nothing of the kind */
    th_run(&c, "%s run %s --quiet --png %s --chrome-trace %s", th_bin(), TINY,
           png, chrome);
    TH_CHECKF(t,
              c.status == 0 && exists(png) && exists(chrome) &&
                  strstr(c.err, "not written") == NULL,
              "status %d: %s", c.status, c.err);

    th_run(&c, "%s run --help", th_bin());
    TH_CHECKF(t,
              c.status == 0 && strstr(c.out, "fits: false; --png, "
                                             "--chrome-trace") != NULL,
              "run --help: %s", c.out);
}

/* `run` says when XLA's small-batch convolution layout priced the step
 * (the largest single modelling rule for thin or few-example layers). */
static void run_small_batch_note(th_ctx *t)
{
    th_case(t, "run names the small-batch convolution layout when it "
               "applies, with the padded batch, and not otherwise");
    th_cmd_result c;
    th_run(&c, "%s run traces/reference/unet3d-256-v3-128.json", th_bin());
    TH_CHECKF(t, c.status == 0 &&
                     strstr(c.out, "small-batch convolution layout "
                                   "(xla.conv_pad): batch 4 per "
                                   "convolution, padded to 8;"),
              "status %d: %s", c.status, c.out);
    th_run(&c, "%s run traces/reference/unet3d-256-v3-128.json --set "
               "xla.conv_pad=0", th_bin());
    TH_CHECKF(t, c.status == 0 && !strstr(c.out, "small-batch"),
              "xla.conv_pad=0: status %d: %s", c.status, c.out);
    th_run(&c, "%s run traces/resnet50-224-v3-8.json --batch 1024", th_bin());
    TH_CHECKF(t, c.status == 0 && !strstr(c.out, "small-batch"),
              "128 examples per core: status %d: %s", c.status, c.out);
}

static void freeze_check(th_ctx *t)
{
    th_case(t, "graph_freeze_check: graph_freeze's verdicts and messages, "
               "the graph unchanged");
    size_t len = 0;
    char *text = th_slurp("traces/small/tiny2d.json", &len);
    graph g;
    tpu_error e1 = {0}, e2 = {0};
    if (!TH_CHECK(t, text != NULL) ||
        !TH_CHECKF(t, graph_parse(&g, text, len, "tiny2d.json", &e1) == 0,
                   "%s", e1.msg)) {
        free(text);
        return;
    }
    static const char *const lists[] = {"conv1,bn1", "none", "relu1",
                                        "nope*", "conv1,,bn1",
                                        "none,conv1"};
    for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++) {
        int frozen_before = 0, frozen_after = 0;
        for (int l = 0; l < g.n_layers; l++)
            frozen_before += g.layers[l].frozen;
        e1.msg[0] = e2.msg[0] = 0;
        tpu_status a = graph_freeze_check(&g, lists[i], "T", &e1);
        for (int l = 0; l < g.n_layers; l++)
            frozen_after += g.layers[l].frozen;
        TH_CHECKF(t, frozen_before == frozen_after && g.freeze[0] == 0,
                  "%s: check changed the graph", lists[i]);
        graph h;
        tpu_error e3 = {0};
        if (!TH_CHECK(t, graph_parse(&h, text, len, "tiny2d.json", &e3) == 0))
            break;
        tpu_status b = graph_freeze(&h, lists[i], "T", &e2);
        TH_CHECKF(t, a == b && strcmp(e1.msg, e2.msg) == 0,
                  "%s: check %d '%s', freeze %d '%s'", lists[i], a, e1.msg, b,
                  e2.msg);
        TH_CHECKF(t, (i < 2) == (a == TPU_OK), "%s: %d", lists[i], a);
        graph_free(&h);
    }
    graph_free(&g);
    free(text);

    th_case(t, "sweep: a grid.freeze entry holding an earlier one's layers in "
               "another order is refused (lists compared as sets)");
    char cwd[1024], sw[1200], out[1200];
    if (!TH_CHECK(t, getcwd(cwd, sizeof cwd) != NULL))
        return;
    snprintf(sw, sizeof sw, "%s/cf-freeze-sweep.json", th_tmpdir());
    snprintf(out, sizeof out, "%s/cf-freeze-out", th_tmpdir());
    FILE *f = fopen(sw, "wb");
    if (!TH_CHECK(t, f != NULL))
        return;
    fprintf(f, "{\"format\": \"tpuemu-sweep/1\", \"name\": \"fz\", "
               "\"trace\": \"%s/traces/small/tiny2d.json\", \"grid\": "
               "{\"freeze\": [\"conv1,bn1\", \"bn1,conv1\"]}}\n",
            cwd);
    fclose(f);
    th_cmd_result c;
    th_run(&c, "rm -rf %s; %s sweep %s --print-commands --out %s", out,
           th_bin(), sw, out);
    TH_CHECKF(t, c.status == 2 && strstr(c.err, "grid.freeze[1]") &&
                     strstr(c.err, "the same value as an earlier entry"),
              "status %d: %s", c.status, c.err);
    /* The two orders of different lists still both run. */
    f = fopen(sw, "wb");
    if (!TH_CHECK(t, f != NULL))
        return;
    fprintf(f, "{\"format\": \"tpuemu-sweep/1\", \"name\": \"fz\", "
               "\"trace\": \"%s/traces/small/tiny2d.json\", \"grid\": "
               "{\"freeze\": [\"conv1,bn1\", \"conv1\"]}}\n",
            cwd);
    fclose(f);
    th_run(&c, "rm -rf %s; %s sweep %s --print-commands --out %s", out,
           th_bin(), sw, out);
    TH_CHECKF(t, c.status == 0 && strstr(c.out, "--freeze conv1"),
              "status %d: %s%s", c.status, c.out, c.err);
}

/* `lower` of a step that does not fit prints the program (what needs the
 * memory) and exits 3 with run's message, as its help says. */
static void lower_nofit(th_ctx *t)
{
    th_case(t, "lower: a step that does not fit prints its program and "
               "exits 3 with the memory figures");
    th_cmd_result c;
    th_run(&c, "%s lower traces/retinanet-2560-v3-8.json", th_bin());
    TH_CHECKF(t, c.status == 3 && strstr(c.out, "; tpuemu firmware:") &&
                     strstr(c.err, "needs 29.9 GiB of HBM per core"),
              "status %d: %.200s / %s", c.status, c.out, c.err);
    th_run(&c, "%s lower traces/retinanet-2560-v3-8.json --set "
               "hbm.capacity_gib=64", th_bin());
    TH_CHECKF(t, c.status == 0 && c.err[0] == 0, "status %d: %s", c.status,
              c.err);
}

/* sweep --out: an existing directory or a new one in an existing
 * directory (exit 2 otherwise, nothing created); the printed command
 * lines name absolute paths so they run from any directory. */
static void sweep_out(th_ctx *t)
{
    th_case(t, "sweep --out: a file or a missing parent is bad usage (exit "
               "2, nothing created); --print-commands paths are absolute");
    const char *sw = "traces/sweeps/retinanet-partitioning.json";
    char f[1024], miss[1024], dir[1024];
    snprintf(f, sizeof f, "%s/sweep-out-file", th_tmpdir());
    snprintf(miss, sizeof miss, "%s/no-such-dir/x", th_tmpdir());
    snprintf(dir, sizeof dir, "%s/sweep-out-dir", th_tmpdir());
    FILE *fp = fopen(f, "w");
    if (fp)
        fclose(fp);
    th_cmd_result c;
    th_run(&c, "%s sweep %s --out %s --print-commands", th_bin(), sw, f);
    TH_CHECKF(t, c.status == 2 && strstr(c.err, "is not a directory"),
              "a file: status %d: %s", c.status, c.err);
    th_run(&c, "%s sweep %s --out %s --print-commands", th_bin(), sw, miss);
    struct stat st;
    TH_CHECKF(t, c.status == 2 && strstr(c.err, "not an existing directory") &&
                     stat(miss, &st) != 0,
              "missing parent: status %d: %s", c.status, c.err);
    /* relative --out, run from the tree: every path printed is absolute */
    th_run(&c, "cd %s && %s sweep %s/%s --out rel --print-commands",
           th_tmpdir(), th_bin_abs(), getcwd(dir, sizeof dir) ? dir : ".", sw);
    TH_CHECKF(t, c.status == 0 && strstr(c.out, " --report /") &&
                     !strstr(c.out, " rel/"),
              "status %d: %.300s %s", c.status, c.out, c.err);
}

/* A sub-10 ms step keeps four significant digits in run's last line. */
static void run_small_step(th_ctx *t)
{
    th_case(t, "run: a step of tens of microseconds prints four significant "
               "digits (0.0000 s said nothing)");
    char rep[1024];
    snprintf(rep, sizeof rep, "%s/small-step.json", th_tmpdir());
    th_cmd_result c;
    th_run(&c, "%s run traces/functional/conv2d.json --report %s", th_bin(),
           rep);
    const char *p = strstr(c.out, "step time ");
    double shown = p ? atof(p + 10) : 0;
    char *text = th_slurp(rep, NULL);
    const char *q = text ? strstr(text, "\"step_time_s\":") : NULL;
    double real = q ? atof(q + 14) : 0;
    TH_CHECKF(t, c.status == 0 && real > 0 && real < 0.01 &&
                     shown > real * 0.999 && shown < real * 1.001,
              "printed %g, report %g: %s", shown, real, p ? p : c.out);
    free(text);
}

void th_suite_cli_fixes(th_ctx *t)
{
    run_small_step(t);
    lower_nofit(t);
    sweep_out(t);
    check_notes(t);
    check_tolerance(t);
    run_nofit(t);
    run_small_batch_note(t);
    freeze_check(t);
}
