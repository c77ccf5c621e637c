/* The step's range over the unconfirmed assumptions (emu/range.h,
 * docs/RANGES.md): the plausible ranges of the --set table, the range
 * around the default step, what `run` prints and what the report
 * carries. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>

#include "emu/graph.h"
#include "emu/params.h"
#include "emu/range.h"
#include "emu/report.h"
#include "emu/sim.h"
#include "test/harness.h"

#define FAST "traces/reference/retinanet-1280-v3-8.json"

/* Every [U] key of the table has a plausible range inside what --set
 * accepts, and only those do. */
static void spans_cover_unconfirmed(th_ctx *t)
{
    th_case(t, "every [U] key has a plausible range, inside its --set "
               "range, on both generations; no other key has one");
    for (size_t i = 0; tpu_param_key(i); i++) {
        const tpu_param_info *k = tpu_param_key(i);
        int u = strstr(k->source, "[U]") != NULL;
        for (int gen = 2; gen <= 3; gen++) {
            tpu_param_span s;
            int has = tpu_param_span_get(k->key, gen, &s);
            TH_CHECKF(t, has == u, "%s (v%d): [U] %d, range %d", k->key, gen,
                      u, has);
            if (!has)
                continue;
            TH_CHECKF(t, s.lo <= s.hi && s.lo >= k->lo && s.hi <= k->hi,
                      "%s v%d: [%g, %g] against --set [%g, %g]", k->key, gen,
                      s.lo, s.hi, k->lo, k->hi);
            TH_CHECKF(t, s.why && strlen(s.why) > 10, "%s: no reason",
                      k->key);
            tpu_params p;
            tpu_params_default(&p, gen);
            double def = 0;
            tpu_params_get(&p, k->key, &def, NULL);
            TH_CHECKF(t, def >= s.lo && def <= s.hi,
                      "%s v%d: default %g outside [%g, %g]", k->key, gen, def,
                      s.lo, s.hi);
        }
        char help[1024];
        tpu_param_help_text(k, help, sizeof help);
        TH_CHECKF(t, !u || strstr(help, "range "), "%s: help '%s'", k->key,
                  help);
    }
}

/* The trace simulated with the given overrides, and its range. */
static int sim_and_range(const char *path, const char *const *keys,
                         const char *const *vals, int n, int jobs,
                         emu_result *r, range_result *rr)
{
    graph g;
    tpu_error err = {0};
    memset(r, 0, sizeof *r);
    memset(rr, 0, sizeof *rr);
    if (graph_load(&g, path, &err))
        return -1;
    sim_opts o;
    sim_opts_default(&o);
    o.trace_path = path;
    o.n_sets = n;
    o.set_keys = keys;
    o.set_values = vals;
    int rc = sim_run(&g, &o, r, &err);
    if (!rc)
        rc = range_compute(&g, &o, r, jobs, rr, &err);
    graph_free(&g);
    return rc;
}

static const range_item *item(const range_result *rr, const char *key)
{
    for (int i = 0; i < rr->n; i++)
        if (strcmp(rr->items[i].key, key) == 0)
            return &rr->items[i];
    return NULL;
}

static void range_contains_default(th_ctx *t)
{
    th_case(t, "the range contains the default step and every end; "
               "workers and one process agree; no worker is left behind");
    emu_result r1, r2;
    range_result a, b;
    int rc1 = sim_and_range(FAST, NULL, NULL, 0, 1, &r1, &a);
    int rc2 = sim_and_range(FAST, NULL, NULL, 0, 2, &r2, &b);
    /* every worker was waited for: no child of this process remains */
    errno = 0;
    pid_t w = waitpid(-1, NULL, WNOHANG);
    TH_CHECKF(t, w == -1 && errno == ECHILD, "waitpid %d errno %d", (int)w,
              errno);
    if (TH_CHECKF(t, rc1 == 0 && rc2 == 0, "rc %d %d", rc1, rc2)) {
        TH_CHECK(t, a.low_s <= r1.step_time_s && r1.step_time_s <= a.high_s);
        TH_CHECK(t, a.low_s < a.high_s);
        TH_CHECK(t, a.n > 5 && a.n_runs > 5);
        TH_CHECK(t, a.n == b.n && a.low_s == b.low_s && a.high_s == b.high_s);
        for (int i = 0; i < a.n && i < b.n; i++) {
            const range_item *x = &a.items[i], *y = &b.items[i];
            TH_CHECKF(t, !strcmp(x->key, y->key) && x->low_s == y->low_s &&
                             x->high_s == y->high_s,
                      "%s: %g %g against %g %g", x->key, x->low_s, x->high_s,
                      y->low_s, y->high_s);
            for (int e = 0; e < 2; e++) {
                double s = e ? x->high_s : x->low_s;
                TH_CHECKF(t, s < 0 || (s >= a.low_s && s <= a.high_s),
                          "%s end %d: %g outside [%g, %g]", x->key, e, s,
                          a.low_s, a.high_s);
            }
        }
        int top = range_top(&a);
        TH_CHECK(t, top >= 0 && top < a.n);
        /* v3-8 is a partial slice, one replica per core: no halos */
        TH_CHECK(t, item(&a, "xla.halo_copy") == NULL);
        TH_CHECK(t, item(&a, "ici.link_gbs") != NULL);
    }
    range_free(&a);
    range_free(&b);
    emu_result_free(&r1);
    emu_result_free(&r2);
}

static void switch_both_values(th_ctx *t)
{
    th_case(t, "a 0/1 switch is timed at both values: the default at one "
               "end, the --set run at the other");
    emu_result r;
    range_result rr;
    int rc = sim_and_range(FAST, NULL, NULL, 0, 0, &r, &rr);
    const range_item *it = rc ? NULL : item(&rr, "xla.bn_stats_fused");
    if (TH_CHECKF(t, it != NULL, "rc %d", rc)) {
        TH_CHECK(t, it->low_value == 0 && it->high_value == 1);
        TH_CHECK(t, it->high_s == r.step_time_s); /* the default is 1 */
        const char *k[] = {"xla.bn_stats_fused"}, *v[] = {"0"};
        emu_result r0;
        tpu_error err = {0};
        int rc0 = th_sim_trace(FAST, k, v, 1, 0, &r0, NULL, &err);
        TH_CHECKF(t, rc0 == 0 && r0.step_time_s == it->low_s &&
                         it->low_s != it->high_s,
                  "--set gives %g, the range %g (default %g)",
                  r0.step_time_s, it->low_s, r.step_time_s);
        if (rc0 == 0)
            emu_result_free(&r0);
    }
    range_free(&rr);
    emu_result_free(&r);
}

/* A small inference trace on one core per replica: no collective. */
static const char infer_trace[] =
    "{\"format\": \"tpuemu-trace/1\", \"name\": \"infer1\", \"system\": "
    "\"v3-8\", \"run\": {\"mode\": \"infer\", \"global_batch\": 8, "
    "\"num_cores_per_replica\": 1}, \"graph\": {\"inputs\": [{\"name\": "
    "\"image\", \"shape\": [32, 32, 8]}], \"layers\": [{\"name\": \"conv1\", "
    "\"op\": \"conv\", \"in\": \"image\", \"filters\": 16, \"kernel\": [3, "
    "3]}, {\"name\": \"relu\", \"op\": \"relu\", \"in\": \"conv1\"}]}}";

static void zero_width(th_ctx *t)
{
    th_case(t, "no collective: the interconnect keys are not varied; every "
               "[U] key pinned with --set: a zero-width range, no run");
    char path[1024];
    snprintf(path, sizeof path, "%s/infer1.json", th_tmpdir());
    th_put(path, infer_trace);
    emu_result r;
    range_result rr;
    int rc = sim_and_range(path, NULL, NULL, 0, 0, &r, &rr);
    if (TH_CHECKF(t, rc == 0, "rc %d", rc)) {
        static const char *const none[] = {
            "ici.link_gbs", "ici.hop_latency_s", "ici.onchip_gbs",
            "ici.onchip_latency_s", "ici.wrap", "xla.halo_copy",
            "xla.halo_fused", "xla.bn_stats_fused", "xla.bn_apply_fused",
            "xla.remat", "xla.group_conv", "vpu.madd_ops"};
        for (size_t i = 0; i < sizeof none / sizeof none[0]; i++)
            TH_CHECKF(t, item(&rr, none[i]) == NULL, "%s varied", none[i]);
        TH_CHECK(t, item(&rr, "clock_hz") != NULL);
    }
    range_free(&rr);
    emu_result_free(&r);

    /* every unconfirmed key at its default value, as the user's choice */
    const char *keys[64], *vals[64];
    char buf[64][40];
    int n = 0;
    tpu_params p;
    tpu_params_default(&p, 3);
    for (size_t i = 0; tpu_param_key(i) && n < 64; i++) {
        const char *k = tpu_param_key(i)->key;
        double v = 0;
        if (!tpu_param_span_get(k, 3, NULL))
            continue;
        tpu_params_get(&p, k, &v, NULL);
        snprintf(buf[n], sizeof buf[n], "%.17g", v);
        keys[n] = k;
        vals[n] = buf[n];
        n++;
    }
    rc = sim_and_range(path, keys, vals, n, 0, &r, &rr);
    if (TH_CHECKF(t, rc == 0, "rc %d", rc)) {
        TH_CHECK(t, rr.n == 0 && rr.n_runs == 0);
        TH_CHECK(t, rr.low_s == r.step_time_s && rr.high_s == r.step_time_s);
        TH_CHECK(t, range_top(&rr) == -1);
    }
    range_free(&rr);
    emu_result_free(&r);
}

static void run_prints(th_ctx *t)
{
    th_case(t, "run prints the range and the assumption that moves it most; "
               "--no-range and --quiet do not");
    th_cmd_result *c = malloc(sizeof *c);
    if (!c)
        return;
    th_run(c, "%s run " FAST, th_bin());
    TH_CHECKF(t, c->status == 0 &&
                     strstr(c->out, "over the unconfirmed assumptions, "
                                    "docs/VALIDATION.md") &&
                     strstr(c->out, "the assumption that moves the step most: "),
              "%d %s%s", c->status, c->out, c->err);
    th_run(c, "%s run " FAST " --no-range", th_bin());
    TH_CHECKF(t, c->status == 0 && !strstr(c->out, "unconfirmed") &&
                     strstr(c->out, " s (slowest core 0)\n"),
              "%s", c->out);
    th_run(c, "%s run " FAST " --quiet", th_bin());
    char *nl = strchr(c->out, '\n');
    TH_CHECKF(t, c->status == 0 && nl && nl[1] == 0 && atof(c->out) > 0,
              "%s", c->out);
    free(c);
}

static void report_round_trip(th_ctx *t)
{
    th_case(t, "the report carries the range and reads back; --no-range "
               "writes none");
    char rep[1024], rep2[1024];
    snprintf(rep, sizeof rep, "%s/range.json", th_tmpdir());
    snprintf(rep2, sizeof rep2, "%s/norange.json", th_tmpdir());
    th_cmd_result *c = malloc(sizeof *c);
    if (!c)
        return;
    th_run(c, "%s run " FAST " --quiet --report %s", th_bin(), rep);
    TH_CHECKF(t, c->status == 0, "%s", c->err);
    th_run(c, "%s run " FAST " --no-range --report %s", th_bin(), rep2);
    TH_CHECKF(t, c->status == 0, "%s", c->err);
    free(c);
    emu_result r;
    tpu_error err = {0};
    if (TH_CHECKF(t, report_read(&r, rep, &err) == TPU_OK, "%s", err.msg)) {
        TH_CHECK(t, r.has_range && r.n_range > 5);
        TH_CHECK(t, r.range_low_s <= r.step_time_s &&
                        r.step_time_s <= r.range_high_s);
        char *text = th_slurp(rep, NULL), *again = report_to_json(&r);
        TH_CHECKF(t, text && again && strcmp(text, again) == 0,
                  "write-read-write differs");
        free(text);
        free(again);
        emu_result_free(&r);
    }
    if (TH_CHECKF(t, report_read(&r, rep2, &err) == TPU_OK, "%s", err.msg)) {
        TH_CHECK(t, !r.has_range && r.n_range == 0);
        char *text = th_slurp(rep2, NULL);
        TH_CHECK(t, text && !strstr(text, "range"));
        free(text);
        emu_result_free(&r);
    }
}

/* The report at path with its first `from` replaced by `to`, read back:
 * the reader's message ("" when it accepts it). */
static void refused(th_ctx *t, const char *text, const char *from,
                    const char *to, const char *want)
{
    const char *at = strstr(text, from);
    if (!TH_CHECKF(t, at != NULL, "no '%s' in the report", from))
        return;
    size_t n = strlen(text) + strlen(to) + 1;
    char *s = malloc(n);
    if (!s)
        return;
    snprintf(s, n, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    emu_result r;
    tpu_error err = {0};
    tpu_status st = report_parse(&r, s, strlen(s), "r.json", &err);
    TH_CHECKF(t, st == TPU_ERR_INPUT && strstr(err.msg, want),
              "%s -> %s: status %d, '%s' (wanted '%s')", from, to, st,
              err.msg, want);
    if (st == TPU_OK)
        emu_result_free(&r);
    free(s);
}

static void report_bad_fields(th_ctx *t)
{
    th_case(t, "the reader refuses a bad range with its JSON path");
    emu_result r;
    static const double cat[CAT_COUNT] = {0.1, 0.02, 0.03};
    th_result_make(&r, "t", "v3-8", 8, 1, 8, cat, NULL);
    r.has_range = 1;
    r.range_low_s = r.step_time_s * 0.5;
    r.range_high_s = r.step_time_s * 2;
    r.n_range = 1;
    r.range = calloc(1, sizeof *r.range);
    if (!r.range) {
        emu_result_free(&r);
        return;
    }
    snprintf(r.range[0].key, sizeof r.range[0].key, "clock_hz");
    r.range[0].low_s = r.step_time_s * 1.5;
    r.range[0].high_s = r.step_time_s;
    char *text = report_to_json(&r);
    emu_result back;
    tpu_error err = {0};
    if (TH_CHECKF(t, text && report_parse(&back, text, strlen(text), "r.json",
                                          &err) == TPU_OK,
                  "%s", err.msg)) {
        TH_CHECK(t, back.has_range && back.n_range == 1 &&
                        back.range[0].low_s == r.range[0].low_s &&
                        !strcmp(back.range[0].key, "clock_hz"));
        emu_result_free(&back);
    }
    if (text) {
        refused(t, text, "\"step_time_range_s\": [",
                "\"step_time_range_s\": [1e9, 0], \"was\": [",
                "r.json: step_time_range_s: low");
        refused(t, text, "\"step_time_range_s\": [",
                "\"step_time_range_s\": [-1, 1], \"was\": [",
                "r.json: step_time_range_s[0]: expected a finite number");
        refused(t, text, "\"step_time_range_s\": [",
                "\"step_time_range_s\": \"x\", \"was\": [",
                "r.json: step_time_range_s: expected [low, high]");
        refused(t, text, "\"low_s\": ", "\"low_s\": \"a\", \"was\": ",
                "r.json: range_assumptions[0].low_s: expected a finite");
        refused(t, text, "\"high_s\": ", "\"high_s\": -2, \"was\": ",
                "r.json: range_assumptions[0].high_s: expected a finite");
        refused(t, text, "{\"key\": ", "7, {\"key\": ",
                "r.json: range_assumptions[0]: expected an object");
        refused(t, text, "\"key\": \"clock_hz\"", "\"key\": 3",
                "r.json: range_assumptions[0].key");
        refused(t, text, "\"high_s\": ", "\"high_s\": 1e6, \"was\": ",
                "range_assumptions[0].high_s: ");
        refused(t, text, "\"step_time_range_s\"", "\"other_range\"",
                "r.json: range_assumptions: given without");
    }
    free(text);
    emu_result_free(&r);
}

void th_suite_range(th_ctx *t)
{
    spans_cover_unconfirmed(t);
    range_contains_default(t);
    switch_both_values(t);
    zero_width(t);
    run_prints(t);
    report_round_trip(t);
    report_bad_fields(t);
}
