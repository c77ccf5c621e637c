/* Probe round 8 (a user scripting tpuemu in CI, outputs under stress, the
 * viewer without a display), each case failing before its fix:
 *
 *  - a command whose standard output cannot be written (a full disk, a
 *    closed descriptor) exits 2 naming standard output (it exited 0 with
 *    the data lost: mxu/probe JSON, lower's listing, sweep's commands);
 *  - `-j2` is `-j 2`, as make and GNU parallel spell it;
 *  - `view` with no display and no --screenshot exits 4 at once (it fell
 *    back to SDL's offscreen driver and waited for input forever);
 *    and names a sweep's CSV or a validate report for what it is;
 *  - `check` refuses a training report against an inference report, notes
 *    layers[] that name different layers, and does not ask to re-record
 *    the baseline when NEW is a what-if (an override BASE lacks);
 *  - `--set` of an unknown key suggests the keys it most likely meant
 *    (the whole list of 46 was one 1,000-character line), and says that
 *    cores per chip is fixed; run --help explains [C]/[D]/[U];
 *  - the report reader names a trace or a newer report's category for
 *    what it is, calls a cut-off report cut off (as the trace reader
 *    does), and wants `overrides` as it wants `flops_per_step`;
 *  - SIGTERM during an output's write leaves no temporary: the signal is
 *    held while a temporary exists and delivered once every output of the
 *    command is in place (emu/outfile.h, Interruptions).
 */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "emu/out/outfile.h"
#include "test/harness.h"

#define TINY "traces/small/tiny2d.json"

static void stdout_cases(th_ctx *t)
{
    th_cmd_result *c = malloc(sizeof *c);
    if (!c)
        return;
    th_case(t, "stdout on a full disk: exit 2, standard output named");
    th_run(c, "%s mxu --m 8 --k 8 --n 8 > /dev/full", th_bin());
    TH_CHECKF(t, c->status == 2, "status %d, stderr %s", c->status, c->err);
    TH_CHECKF(t, strstr(c->err, "standard output: No space left") != NULL,
              "stderr: %s", c->err);

    th_case(t, "stdout closed: exit 2; a failed command keeps its status");
    th_run(c, "%s lower %s >&-", th_bin(), TINY);
    TH_CHECKF(t, c->status == 2 && strstr(c->err, "standard output"),
              "status %d, stderr %s", c->status, c->err);
    th_run(c, "%s lower traces/retinanet-2560-v3-8.json > /dev/full",
           th_bin());
    TH_CHECKF(t, c->status == 3, "does not fit: status %d, stderr %s",
              c->status, c->err);

    th_case(t, "stdout fine: exit 0, no message");
    th_run(c, "%s mxu --m 8 --k 8 --n 8 > /dev/null", th_bin());
    TH_CHECKF(t, c->status == 0 && c->err[0] == 0, "status %d, stderr %s",
              c->status, c->err);

    th_case(t, "sweep -j2 is -j 2");
    th_run(c, "%s sweep traces/sweeps/retinanet-partitioning.json -j2 "
              "--print-commands --out %s/sw-j2",
           th_bin(), th_tmpdir());
    TH_CHECKF(t, c->status == 0 && strstr(c->out, " run ") != NULL,
              "status %d, stderr %s", c->status, c->err);
    th_run(c, "%s sweep traces/sweeps/retinanet-partitioning.json -jx "
              "--print-commands --out %s/sw-jx",
           th_bin(), th_tmpdir());
    TH_CHECKF(t, c->status == 2, "-jx: status %d", c->status);
    free(c);
}

static void view_cases(th_ctx *t)
{
    th_cmd_result *c = malloc(sizeof *c);
    if (!c)
        return;
    th_case(t, "view with no display and no --screenshot: exit 4 at once");
    th_run(c, "env -u DISPLAY -u WAYLAND_DISPLAY -u SDL_VIDEODRIVER "
              "timeout 20 %s view %s",
           th_bin(), TINY);
    TH_CHECKF(t, c->status == 4, "status %d (124: hung), stderr %s",
              c->status, c->err);
    TH_CHECKF(t, strstr(c->err, "--screenshot") != NULL, "stderr: %s",
              c->err);

    th_case(t, "view on SDL's dummy driver without --screenshot: exit 4");
    th_run(c, "SDL_VIDEODRIVER=dummy timeout 20 %s view %s", th_bin(),
           TINY);
    TH_CHECKF(t, c->status == 4 && strstr(c->err, "'dummy'"),
              "status %d, stderr %s", c->status, c->err);

    th_case(t, "view of a sweep's CSV or a validate report says what they are");
    char csv[512];
    snprintf(csv, sizeof csv, "%s/p8-results.csv", th_tmpdir());
    th_put(csv, "point,system,step_time_s\n0,v3-8,0.5\n");
    th_run(c, "%s view %s --screenshot %s/p8-x.png", th_bin(), csv,
           th_tmpdir());
    TH_CHECKF(t, c->status == 2 && strstr(c->err, "step_time.png"),
              "csv: status %d, stderr %s", c->status, c->err);
    snprintf(csv, sizeof csv, "%s/p8-val.json", th_tmpdir());
    th_put(csv, "{\"format\": \"tpuemu-validation/1\", \"traces\": []}");
    th_run(c, "%s view %s --screenshot %s/p8-x.png", th_bin(), csv,
           th_tmpdir());
    TH_CHECKF(t, c->status == 2 && strstr(c->err, "a validate report"),
              "validation: status %d, stderr %s", c->status, c->err);

    th_case(t, "view --screenshot with no display still works");
    th_run(c, "env -u DISPLAY -u WAYLAND_DISPLAY -u SDL_VIDEODRIVER "
              "timeout 60 %s view %s --screenshot %s/p8-view.png",
           th_bin(), TINY, th_tmpdir());
    TH_CHECKF(t, c->status == 0, "status %d, stderr %s", c->status, c->err);
    free(c);
}

static void check_cases(th_ctx *t)
{
    th_cmd_result *c = malloc(sizeof *c);
    if (!c)
        return;
    const char *d = th_tmpdir();
    char tr[512], inf[512], nodrop[512];
    snprintf(tr, sizeof tr, "%s/p8-tiny2d.json", d);
    snprintf(inf, sizeof inf, "%s/p8-tiny2d-infer.json", d);
    snprintf(nodrop, sizeof nodrop, "%s/p8-tiny2d-layer.json", d);
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
    th_run(c, "%s run %s --report %s/p8-train.json --quiet && "
              "%s run %s --report %s/p8-infer.json --quiet && "
              "%s run %s --report %s/p8-whatif.json --quiet "
              "--set mxu.rows=256 --set mxu.cols=256",
           th_bin(), tr, d, th_bin(), inf, d, th_bin(), tr, d);
    TH_CHECKF(t, c->status == 0, "runs: %d %s", c->status, c->err);

    th_case(t, "check: a training step against an inference step: exit 2");
    th_run(c, "%s check --baseline %s/p8-train.json %s/p8-infer.json",
           th_bin(), d, d);
    TH_CHECKF(t, c->status == 2 && strstr(c->err, "different modes"),
              "status %d, stderr %s", c->status, c->err);

    th_case(t, "check: a what-if that is faster keeps the baseline");
    th_run(c, "%s check --baseline %s/p8-train.json %s/p8-whatif.json",
           th_bin(), d, d);
    TH_CHECKF(t, c->status == 0 && strstr(c->out, "what-if") &&
                     !strstr(c->out, "re-record"),
              "status %d, out %s", c->status, c->out);
    /* Without the override the same gain is a stale baseline. */
    th_run(c, "%s check --baseline %s/p8-whatif.json %s/p8-train.json "
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
        th_run(c, "%s run %s --report %s/p8-layer.json --quiet", th_bin(),
               nodrop, d);
        th_run(c, "%s check --baseline %s/p8-train.json %s/p8-layer.json",
               th_bin(), d, d);
        TH_CHECKF(t, strstr(c->out, "note: the layers differ: 1 only in BASE "
                                    "(conv1), 1 only in NEW (convX)") != NULL,
                  "status %d, out %s, err %s", c->status, c->out, c->err);
        th_run(c, "%s check --baseline %s/p8-train.json %s/p8-train.json",
               th_bin(), d, d);
        TH_CHECKF(t, c->status == 0 && !strstr(c->out, "layers differ"),
                  "same report: %s", c->out);
    }
    free(text);
    free(c);
}

/* The report reader on files that are not run reports, or reports a run
 * did not write: each named for what it is. */
static void reader_cases(th_ctx *t)
{
    th_cmd_result *c = malloc(sizeof *c);
    if (!c)
        return;
    const char *d = th_tmpdir();
    char base[512], path[512];
    snprintf(base, sizeof base, "%s/p8-train.json", d); /* check_cases' */
    char *text = th_slurp(base, NULL);
    if (!TH_CHECKF(t, text != NULL, "no %s", base)) {
        free(c);
        return;
    }
    th_case(t, "check of a trace as a report says it is a trace");
    th_run(c, "%s check --baseline %s %s", th_bin(), TINY, base);
    TH_CHECKF(t, c->status == 2 && strstr(c->err, "this is a trace"),
              "status %d, stderr %s", c->status, c->err);

    th_case(t, "a truncated report: 'ends too early', as for a trace");
    snprintf(path, sizeof path, "%s/p8-trunc.json", d);
    th_put(path, "{\"format\":\"tpuemu-report/1\"");
    th_run(c, "%s check --baseline %s %s", th_bin(), path, base);
    TH_CHECKF(t, c->status == 2 && strstr(c->err, "ends too early"),
              "status %d, stderr %s", c->status, c->err);

    th_case(t, "an unknown breakdown category is named, not a bad sum");
    char *at = strstr(text, "\"idle\":");
    if (TH_CHECKF(t, at != NULL, "no idle key")) {
        size_t k = (size_t)(at - text), n = strlen(text);
        char *ed = malloc(n + 32);
        if (ed) {
            memcpy(ed, text, k);
            strcpy(ed + k, "\"dma_wait\": 0, ");
            strcat(ed, text + k);
            snprintf(path, sizeof path, "%s/p8-newcat.json", d);
            th_put(path, ed);
            free(ed);
            th_run(c, "%s check --baseline %s %s", th_bin(), base, path);
            TH_CHECKF(t, c->status == 2 &&
                             strstr(c->err, "breakdown_s.dma_wait: unknown "
                                            "category"),
                      "status %d, stderr %s", c->status, c->err);
        }
    }

    th_case(t, "a report without overrides is refused, as without "
               "flops_per_step");
    at = strstr(text, "\"overrides\": {}");
    if (TH_CHECKF(t, at != NULL, "no empty overrides")) {
        memcpy(at, "\"overridez\"", strlen("\"overridez\""));
        snprintf(path, sizeof path, "%s/p8-noov.json", d);
        th_put(path, text);
        th_run(c, "%s check --baseline %s %s", th_bin(), base, path);
        TH_CHECKF(t, c->status == 2 && strstr(c->err, "overrides: missing"),
                  "status %d, stderr %s", c->status, c->err);
    }
    free(text);
    free(c);
}

/* What the handler saw when the held SIGTERM arrived. */
static volatile sig_atomic_t got_term, outs_whole;
static char sig_a[512], sig_b[512];

static void on_term(int sig)
{
    (void)sig;
    got_term++;
    outs_whole = access(sig_a, F_OK) == 0 && access(sig_b, F_OK) == 0;
}

/* Entries of dir whose names start with ".tpuemu." (temporaries). */
static int temporaries(const char *dir)
{
    DIR *dp = opendir(dir);
    int n = 0;
    if (!dp)
        return -1;
    for (struct dirent *e; (e = readdir(dp)) != NULL;)
        if (strncmp(e->d_name, ".tpuemu.", 8) == 0)
            n++;
    closedir(dp);
    return n;
}

static void signal_cases(th_ctx *t)
{
    char dir[256];
    snprintf(dir, sizeof dir, "%s/p8-sig", th_tmpdir());
    char cmd[600];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    if (system(cmd) != 0)
        return;
    snprintf(sig_a, sizeof sig_a, "%s/a.txt", dir);
    snprintf(sig_b, sizeof sig_b, "%s/b.txt", dir);
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, &old);

    th_case(t, "SIGTERM during a write is held until every output is in place");
    got_term = outs_whole = 0;
    outfile os[2];
    tpu_error err = {0};
    int ok = outfile_open(&os[0], sig_a, &err) == TPU_OK &&
             outfile_open(&os[1], sig_b, &err) == TPU_OK;
    TH_CHECKF(t, ok, "open: %s", err.msg);
    if (ok) {
        fputs("a\n", os[0].f);
        raise(SIGTERM);
        fputs("b\n", os[1].f);
        TH_CHECKF(t, got_term == 0, "delivered while temporaries exist");
        TH_CHECKF(t, temporaries(dir) == 2, "%d temporaries staged",
                  temporaries(dir));
        TH_CHECK(t, outfile_commit_all(os, 2, &err) == TPU_OK);
        TH_CHECKF(t, got_term == 1 && outs_whole,
                  "delivered %d times, outputs whole %d", (int)got_term,
                  (int)outs_whole);
        TH_CHECKF(t, temporaries(dir) == 0, "%d temporaries left",
                  temporaries(dir));
    }

    th_case(t, "SIGTERM during a failed write: delivered after the discard");
    got_term = 0;
    remove(sig_a);
    remove(sig_b);
    ok = outfile_open(&os[0], sig_a, &err) == TPU_OK &&
         outfile_open(&os[1], sig_b, &err) == TPU_OK;
    if (TH_CHECKF(t, ok, "open: %s", err.msg)) {
        raise(SIGTERM);
        TH_CHECK(t, got_term == 0);
        outfile_discard_all(os, 2);
        TH_CHECKF(t, got_term == 1, "delivered %d times", (int)got_term);
        TH_CHECKF(t, temporaries(dir) == 0 && access(sig_a, F_OK) != 0,
                  "%d temporaries left", temporaries(dir));
    }

    th_case(t, "a refused output path holds nothing");
    got_term = 0;
    snprintf(cmd, sizeof cmd, "%s/no/such/dir/x", dir);
    TH_CHECK(t, outfile_open(&os[0], cmd, &err) != TPU_OK);
    raise(SIGTERM);
    TH_CHECKF(t, got_term == 1, "delivered %d times", (int)got_term);
    sigaction(SIGTERM, &old, NULL);
}

static void set_cases(th_ctx *t)
{
    th_cmd_result *c = malloc(sizeof *c);
    if (!c)
        return;
    static const char *const cases[][2] = {
        {"hbm.bandwidth", "did you mean hbm.bandwidth_gbs?"},
        {"ici.link", "did you mean ici.link_gbs?"},
        {"hbm.trcd_ns", "did you mean hbm.t_rcd_ns?"},
        {"cores_per_chip", "a chip's 2 cores are fixed"},
        {"nokey", "(known: clock_hz, "},
    };
    th_case(t, "--set of an unknown key names the keys it most likely meant");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        th_run(c, "%s run %s --set %s=4", th_bin(), TINY, cases[i][0]);
        TH_CHECKF(t, c->status == 2 && strstr(c->err, cases[i][1]),
                  "%s: status %d, stderr %s", cases[i][0], c->status, c->err);
    }
    th_case(t, "run --help explains the [C]/[D]/[U] source tags");
    th_run(c, "%s run --help", th_bin());
    TH_CHECKF(t, strstr(c->out, "[C] a published figure") &&
                     strstr(c->out, "[U] unconfirmed") &&
                     strstr(c->out, "does not follow ici.link_gbs"),
              "help: %.300s", c->out);
    free(c);
}

void th_suite_probe8(th_ctx *t)
{
    set_cases(t);
    stdout_cases(t);
    view_cases(t);
    check_cases(t);
    reader_cases(t);
    signal_cases(t);
}
