/* --set as a user sees it: the order of the options does
 * not matter, keys that over-determine a quantity are refused, the rules
 * between keys name the keys involved and are the ones the HBM model
 * enforces, --help shows ranges and rules, and numbers beyond a double
 * are out of range. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include "emu/params.h"
#include "test/harness.h"
#include "emu/out/outfile.h"
#include "emu/out/chart.h"
#include "emu/out/font.h"

/* Applies n overrides in the order given by perm; the status of the first
 * failure (message in e). */
static tpu_status apply(tpu_params *p, int gen, const char *const *k,
                        const char *const *v, const int *perm, int n,
                        tpu_error *e)
{
    tpu_params_default(p, gen);
    for (int i = 0; i < n; i++) {
        tpu_status st = tpu_params_set(p, k[perm[i]], v[perm[i]], e);
        if (st)
            return st;
    }
    return TPU_OK;
}

static int same_hw(const tpu_params *a, const tpu_params *b)
{
    return memcmp(&a->hbm.data_rate_gtps, &b->hbm.data_rate_gtps,
                  sizeof(double)) == 0 &&
           a->hbm.channels == b->hbm.channels &&
           a->hbm.bus_bytes == b->hbm.bus_bytes &&
           hbm_peak_bps(&a->hbm) == hbm_peak_bps(&b->hbm);
}

static void write_text(const char *path, const char *s)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(s, f);
        fclose(f);
    }
}

/* The step_time_s column of a sweep's results.csv for the row whose
 * swept values (the columns after "run", in file order) are a and b. */
static double csv_time(const char *csv, const char *a, const char *b)
{
    char want[128];
    snprintf(want, sizeof want, ",%s,%s,", a, b);
    const char *line = csv;
    while (line && *line) {
        const char *nl = strchr(line, '\n');
        const char *hit = strstr(line, want);
        if (hit && (!nl || hit < nl)) {
            /* run,A,B,exit,fits,step_time_s */
            const char *q = hit + strlen(want);
            for (int comma = 0; comma < 2 && q; comma++)
                q = strchr(q, ',') ? strchr(q, ',') + 1 : NULL;
            return q ? atof(q) : -1;
        }
        line = nl ? nl + 1 : NULL;
    }
    return -1;
}

#define TINY_TRACE "traces/small/tiny2d.json"

static void unknown_key_cases(th_ctx *t)
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
        th_run(c, "%s run %s --set %s=4", th_bin(), TINY_TRACE, cases[i][0]);
        TH_CHECKF(t, c->status == 2 && strstr(c->err, cases[i][1]),
                  "%s: status %d, stderr %s", cases[i][0], c->status, c->err);
    }
    th_case(t, "run --help explains the [C]/[D]/[U] source tags");
    th_run(c, "%s run --help", th_bin());
    TH_CHECKF(t, strstr(c->out, "[C] a published figure") &&
                     strstr(c->out, "[U] unconfirmed") &&
                     strstr(c->out, "does not follow") &&
                     strstr(c->out, "ici.link_gbs)"),
              "help: %.300s", c->out);
    free(c);
}

static void hbm_peak_help(th_ctx *t)
{
    th_case(t, "hbm.bandwidth_gbs's help says the row timings stay and the activate rate "
               "caps a stream at about 2 TB/s, as probe hbm measures");
    th_cmd_result *c = malloc(sizeof *c);
    if (!c)
        return;
    th_run(c, "%s run --help", th_bin());
    /* the help wraps its sources: join the lines before searching */
    char *flat = malloc(sizeof c->out);
    size_t m = 0;
    for (const char *q = c->out; flat && *q; q++) {
        if (*q == '\n') {
            while (q[1] == ' ')
                q++;
            flat[m++] = ' ';
        } else
            flat[m++] = *q;
    }
    if (flat) {
        flat[m] = 0;
        const char *k = strstr(flat, "hbm.bandwidth_gbs ");
        const char *next = k ? strstr(k, "hbm.capacity_gib ") : NULL;
        const char *cap = k ? strstr(k, "the activate rate caps") : NULL;
        TH_CHECKF(t, c->status == 0 && cap && next && cap < next, "%.400s", k ? k : flat);
        const char *a = k ? strstr(k, "about 2.2 TB/s") : NULL;
        const char *b = k ? strstr(k, "2.0 TB/s after refresh") : NULL;
        TH_CHECK(t, a && b && a < next && b < next);
    }
    free(flat);
    /* the figures the help gives: 16 x 1 KiB per 7.5 ns less refresh,
     * whatever the peak asked for past it */
    static const char *const bw[] = {"4500", "45000"};
    for (int i = 0; i < 2; i++) {
        th_run(c, "%s probe hbm --gen v3 --bytes 1073741824 --set hbm.bandwidth_gbs=%s",
               th_bin(), bw[i]);
        const char *g = strstr(c->out, "\"gbps\":");
        double gbps = g ? atof(g + 7) : 0;
        TH_CHECKF(t, c->status == 0 && gbps > 1950 && gbps < 2100, "%s GB/s asked: %s",
                  bw[i], c->out);
    }
    free(c);
}

void th_suite_params_set(th_ctx *t)
{
    tpu_error e = {0};
    tpu_params a, b;

    th_case(t, "--set order: hbm.bandwidth_gbs with hbm.channels and "
               "hbm.bus_bytes in all six orders gives the same bits, the "
               "bandwidth over the set geometry");
    {
        const char *k[] = {"hbm.bandwidth_gbs", "hbm.channels",
                           "hbm.bus_bytes"};
        const char *v[] = {"900", "32", "32"};
        static const int perms[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2},
                                        {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
        TH_CHECK(t, apply(&a, 3, k, v, perms[0], 3, &e) == TPU_OK);
        TH_CHECKF(t, fabs(hbm_peak_bps(&a.hbm) / 1e9 - 900) < 1e-9,
                  "peak %g", hbm_peak_bps(&a.hbm) / 1e9);
        TH_CHECK(t, a.hbm.channels == 32 && a.hbm.bus_bytes == 32);
        for (int i = 1; i < 6; i++) {
            TH_CHECK(t, apply(&b, 3, k, v, perms[i], 3, &e) == TPU_OK);
            TH_CHECKF(t, same_hw(&a, &b), "order %d%d%d: %.17g vs %.17g GT/s",
                      perms[i][0], perms[i][1], perms[i][2],
                      b.hbm.data_rate_gtps, a.hbm.data_rate_gtps);
        }
        /* two keys that over-determine one quantity, both ways, both
     * generations */
        for (int gen = 2; gen <= 3; gen++) {
            const int ab[2] = {0, 1}, ba[2] = {1, 0};
            const char *v2[] = {"450", "32"};
            apply(&a, gen, k, v2, ab, 2, &e);
            apply(&b, gen, k, v2, ba, 2, &e);
            TH_CHECKF(t, same_hw(&a, &b) &&
                             fabs(hbm_peak_bps(&a.hbm) / 1e9 - 450) < 1e-9,
                      "v%d: %g vs %g GB/s", gen, hbm_peak_bps(&a.hbm) / 1e9,
                      hbm_peak_bps(&b.hbm) / 1e9);
        }
        /* a structural key alone still scales the default peak: the pin
         * rate is the chip's, more channels carry more */
        tpu_params_default(&a, 3);
        TH_CHECK(t, tpu_params_set(&a, "hbm.channels", "32", &e) == TPU_OK);
        TH_CHECK(t, fabs(hbm_peak_bps(&a.hbm) / 1e9 - 900) < 1e-9);
    }

    th_case(t, "hbm.bandwidth_gbs with hbm.data_rate_gtps is refused in "
               "either order, naming both keys and their values");
    {
        const char *k[] = {"hbm.bandwidth_gbs", "hbm.data_rate_gtps"};
        const char *v[] = {"900", "1"};
        const int ab[2] = {0, 1}, ba[2] = {1, 0};
        TH_CHECK(t, apply(&a, 3, k, v, ab, 2, &e) == TPU_ERR_INPUT);
        TH_CHECKF(t, strstr(e.msg, "hbm.bandwidth_gbs=900") &&
                         strstr(e.msg, "hbm.data_rate_gtps=1"),
                  "%s", e.msg);
        TH_CHECK(t, apply(&a, 3, k, v, ba, 2, &e) == TPU_ERR_INPUT);
        TH_CHECKF(t, strstr(e.msg, "hbm.bandwidth_gbs=900") &&
                         strstr(e.msg, "hbm.data_rate_gtps=1"),
                  "%s", e.msg);
        /* a refused set leaves the parameters as they were */
        tpu_params_default(&a, 3);
        tpu_params_set(&a, "hbm.data_rate_gtps", "1", &e);
        b = a;
        TH_CHECK(t, tpu_params_set(&a, "hbm.bandwidth_gbs", "900", &e) ==
                        TPU_ERR_INPUT);
        TH_CHECK(t, same_hw(&a, &b) && a.set_mask == b.set_mask);
    }

    th_case(t, "every rule between keys: the defaults pass; a broken rule "
               "is refused naming each key it involves, '(default)' on the "
               "ones not set");
    {
        static const struct {
            const char *k[3], *v[3];
            const char *names[4];
        } cases[] = {
            {{"hbm.channels", "hbm.banks", "hbm.row_bytes"},
             {"1024", "256", "1048576"},
             {"hbm.row_bytes=1048576", "hbm.channels=1024", "hbm.banks=256",
              "hbm.capacity_gib=16 (default)"}},
            {{"hbm.bus_bytes"}, {"1024"},
             {"hbm.bus_bytes=1024", "hbm.burst_beats=4 (default)",
              "hbm.interleave_bytes=256 (default)"}},
            {{"hbm.row_bytes"}, {"32"},
             {"hbm.row_bytes=32", "hbm.interleave_bytes=256 (default)"}},
            {{"hbm.t_refi_ns"}, {"100"},
             {"hbm.t_refi_ns=100", "hbm.t_rfc_ns=260 (default)"}},
            {{"hbm.channels"}, {"12"}, {"hbm.channels=12", "power of two"}},
        };
        for (int gen = 2; gen <= 3; gen++) {
            tpu_params_default(&a, gen);
            TH_CHECKF(t, tpu_params_check(&a, &e) == TPU_OK, "v%d: %s", gen,
                      e.msg);
        }
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            tpu_params_default(&a, 3);
            for (int j = 0; j < 3 && cases[i].k[j]; j++)
                TH_CHECK(t, tpu_params_set(&a, cases[i].k[j], cases[i].v[j],
                                           &e) == TPU_OK);
            if (!TH_CHECKF(t, tpu_params_check(&a, &e) == TPU_ERR_INPUT,
                           "case %zu passed", i))
                continue;
            for (int j = 0; j < 4 && cases[i].names[j]; j++)
                TH_CHECKF(t, strstr(e.msg, cases[i].names[j]) != NULL,
                          "case %zu: '%s' not in: %s", i, cases[i].names[j],
                          e.msg);
        }
    }

    th_case(t, "the rules are the HBM model's: over varied geometries and "
               "timings, tpu_params_check refuses exactly what "
               "hbm_check_params refuses, and by a rule of the table");
    {
        static const char *const keys[] = {
            "hbm.channels",  "hbm.banks",            "hbm.bus_bytes",
            "hbm.burst_beats", "hbm.row_bytes",      "hbm.interleave_bytes",
            "hbm.capacity_gib", "hbm.t_rfc_ns",      "hbm.t_refi_ns"};
        static const char *const vals[][6] = {
            {"1", "12", "16", "64", "1024", "1023"},
            {"1", "3", "16", "256", "64", "128"},
            {"1", "16", "64", "1024", "24", "8"},
            {"1", "4", "64", "5", "8", "2"},
            {"32", "1024", "1048576", "48", "256", "4096"},
            {"32", "256", "4096", "16777216", "96", "1024"},
            {"0.0009765625", "16", "0.25", "1e6", "1", "0.001"},
            {"0", "260", "5000", "100000", "3899", "3900"},
            {"100", "3900", "300", "1e7", "261", "5000"}};
        enum { NK = sizeof keys / sizeof keys[0] };
        unsigned s = 12345u;
        int refused = 0, n = th_asan() ? 400 : 4000;
        for (int it = 0; it < n; it++) {
            tpu_params_default(&a, 3);
            for (int k = 0; k < NK; k++) {
                s = s * 1103515245u + 12345u;
                if ((s >> 16) % 3 == 0)
                    continue; /* keep the default */
                s = s * 1103515245u + 12345u;
                tpu_params_set(&a, keys[k], vals[k][(s >> 16) % 6], &e);
            }
            tpu_error eh = {0}, ea = {0};
            tpu_status sh = hbm_check_params(&a.hbm, &eh);
            tpu_status sa = tpu_params_check(&a, &ea);
            refused += sh != TPU_OK;
            if (!TH_CHECKF(t, (sh == TPU_OK) == (sa == TPU_OK),
                           "hbm %d (%s), params %d (%s)", sh, eh.msg, sa,
                           ea.msg))
                break;
            /* caught by the table, not left to the model's own guard */
            if (!TH_CHECKF(t, sh == TPU_OK || strcmp(eh.msg, ea.msg) != 0,
                           "no rule of the table caught: %s", eh.msg))
                break;
        }
        TH_CHECKF(t, refused > n / 4 && refused < n, "%d of %d refused",
                  refused, n);
    }

    th_case(t, "numbers beyond a double: out of range with the key's range; "
               "an underflow is 0 where 0 is in range");
    {
        tpu_params_default(&a, 3);
        TH_CHECK(t, tpu_params_set(&a, "hbm.data_rate_gtps", "1e-400", &e) ==
                        TPU_ERR_INPUT);
        TH_CHECKF(t, strstr(e.msg, "out of range [0.01, 100]") != NULL, "%s",
                  e.msg);
        TH_CHECK(t, tpu_params_set(&a, "clock_hz", "1e400", &e) ==
                        TPU_ERR_INPUT);
        TH_CHECKF(t, strstr(e.msg, "out of range [1e+06, 1e+11]") != NULL,
                  "%s", e.msg);
        TH_CHECK(t, tpu_params_set(&a, "mxu.rows", "-1e400", &e) ==
                        TPU_ERR_INPUT);
        TH_CHECKF(t, strstr(e.msg, "out of range [1, 4096]") != NULL, "%s",
                  e.msg);
        TH_CHECK(t, tpu_params_set(&a, "hbm.t_rcd_ns", "1e-400", &e) ==
                        TPU_OK);
        TH_CHECK(t, a.hbm.t_rcd_ns == 0 && !signbit(a.hbm.t_rcd_ns));
        TH_CHECK(t, tpu_params_set(&a, "hbm.t_rp_ns", "-1e-400", &e) ==
                        TPU_OK);
        TH_CHECK(t, a.hbm.t_rp_ns == 0 && !signbit(a.hbm.t_rp_ns));
        TH_CHECK(t, tpu_params_set(&a, "xla.halo_copy", "1e-400", &e) ==
                        TPU_ERR_INPUT);
        TH_CHECKF(t, strstr(e.msg, "integer") != NULL, "%s", e.msg);
        TH_CHECK(t, tpu_params_set(&a, "clock_hz", "1e", &e) ==
                        TPU_ERR_INPUT);
        TH_CHECKF(t, strstr(e.msg, "expected a decimal number") != NULL, "%s",
                  e.msg);
    }

    const char *d = th_tmpdir();
    char trace[512], r1[512], r2[512];
    th_cmd_result c;
    snprintf(trace, sizeof trace, "%s/pset-trace.json", d);
    snprintf(r1, sizeof r1, "%s/pset-r1.json", d);
    snprintf(r2, sizeof r2, "%s/pset-r2.json", d);
    /* small and memory-bound (3 input channels): the HBM keys show */
    write_text(trace,
               "{\"format\": \"tpuemu-trace/1\", \"name\": \"pset\", "
               "\"system\": \"v3-8\", \"run\": {\"mode\": \"train\", "
               "\"global_batch\": 32, \"num_cores_per_replica\": 1, "
               "\"input_partition_dims\": [[1, 1, 1, 1], null]}, "
               "\"graph\": {\"inputs\": [{\"name\": \"image\", \"shape\": "
               "[64, 64, 3]}], \"layers\": [{\"name\": \"c\", \"op\": "
               "\"conv\", \"in\": \"image\", \"filters\": 8, \"kernel\": "
               "[3, 3]}]}}\n");

    th_case(t, "run: both orders of --set give byte-identical reports; the "
               "conflicting pair is one error line, exit 2");
    th_run(&c, "%s run %s --quiet --set hbm.bandwidth_gbs=100 --set "
               "hbm.channels=8 --report %s && %s run %s --quiet --set "
               "hbm.channels=8 --set hbm.bandwidth_gbs=100 --report %s && "
               "cmp %s %s",
           th_bin(), trace, r1, th_bin(), trace, r2, r1, r2);
    TH_CHECKF(t, c.status == 0, "%d %s %s", c.status, c.out, c.err);
    th_run(&c, "%s run %s --quiet --set hbm.data_rate_gtps=1 --set "
               "hbm.bandwidth_gbs=900",
           th_bin(), trace);
    TH_CHECKF(t, c.status == 2 && strstr(c.err, "hbm.data_rate_gtps=1") &&
                     strstr(c.err, "hbm.bandwidth_gbs=900") &&
                     strchr(c.err, '\n') == c.err + strlen(c.err) - 1,
              "%d %s", c.status, c.err);
    th_run(&c, "%s run %s --quiet --set hbm.channels=1024 --set "
               "hbm.banks=256 --set hbm.row_bytes=1048576 --set "
               "hbm.interleave_bytes=1048576",
           th_bin(), trace);
    TH_CHECKF(t, c.status == 2 && strstr(c.err, "hbm.row_bytes=1048576") &&
                     strstr(c.err, "hbm.capacity_gib=16 (default)"),
              "%d %s", c.status, c.err);
    th_run(&c, "%s run %s --quiet --set hbm.data_rate_gtps=1e-400", th_bin(),
           trace);
    TH_CHECKF(t, c.status == 2 && strstr(c.err, "out of range [0.01, 100]"),
              "%d %s", c.status, c.err);

    th_case(t, "sweep: a grid's set keys in either order give the same step "
               "times; a grid combining conflicting keys is refused before "
               "anything runs or is written");
    {
        char sw[512], out[512];
        static const char *const grids[2] = {
            "\"hbm.bandwidth_gbs\": [100, 450], \"hbm.channels\": [8, 32]",
            "\"hbm.channels\": [8, 32], \"hbm.bandwidth_gbs\": [100, 450]"};
        char *csv[2] = {NULL, NULL};
        for (int g = 0; g < 2; g++) {
            char text[1024];
            snprintf(sw, sizeof sw, "%s/pset-sweep%d.json", d, g);
            snprintf(out, sizeof out, "%s/pset-sweep%d-out", d, g);
            snprintf(text, sizeof text,
                     "{\"format\": \"tpuemu-sweep/1\", \"name\": \"o%d\", "
                     "\"trace\": \"pset-trace.json\", \"grid\": {\"set\": "
                     "{%s}}}\n",
                     g, grids[g]);
            write_text(sw, text);
            th_run(&c, "rm -rf %s && %s sweep %s --jobs 2 --out %s", out,
                   th_bin(), sw, out);
            TH_CHECKF(t, c.status == 0, "%d %s", c.status, c.err);
            char path[600];
            snprintf(path, sizeof path, "%s/results.csv", out);
            csv[g] = th_slurp(path, NULL);
        }
        if (TH_CHECK(t, csv[0] && csv[1])) {
            static const char *const bw[2] = {"100", "450"}, *ch[2] = {"8",
                                                                     "32"};
            double t100_8 = csv_time(csv[0], "100", "8");
            for (int i = 0; i < 2; i++)
                for (int j = 0; j < 2; j++) {
                    double x = csv_time(csv[0], bw[i], ch[j]);
                    double y = csv_time(csv[1], ch[j], bw[i]);
                    TH_CHECKF(t, x > 0 && x == y,
                              "bw %s channels %s: %.9g vs %.9g", bw[i], ch[j],
                              x, y);
                }
            /* the bandwidth is the set one: 100 GB/s is slower than 450
             * whatever the channels */
            TH_CHECKF(t, t100_8 > csv_time(csv[0], "450", "8"), "%.9g",
                      t100_8);
        }
        free(csv[0]);
        free(csv[1]);
        snprintf(sw, sizeof sw, "%s/pset-conflict.json", d);
        snprintf(out, sizeof out, "%s/pset-conflict-out", d);
        write_text(sw, "{\"format\": \"tpuemu-sweep/1\", \"name\": \"c\", "
                       "\"trace\": \"pset-trace.json\", \"grid\": {\"set\": "
                       "{\"hbm.data_rate_gtps\": [1, 2], "
                       "\"hbm.bandwidth_gbs\": [100, 450]}}}\n");
        th_run(&c, "rm -rf %s; %s sweep %s --jobs 2 --out %s; echo $?; "
                   "test -e %s && echo exists",
               out, th_bin(), sw, out, out);
        TH_CHECKF(t, strcmp(c.out, "2\n") == 0 &&
                         strstr(c.err, "grid.set.hbm.bandwidth_gbs") &&
                         strstr(c.err, "hbm.data_rate_gtps=1"),
                  "%s %s", c.out, c.err);
    }

    th_case(t, "--help of run, lower and view: every key with its range, "
               "every rule, no line of 100 columns or more");
    static const char *const cmds[] = {"run", "lower", "view"};
    for (int k = 0; k < 3; k++) {
        th_run(&c, "%s %s --help", th_bin(), cmds[k]);
        if (!TH_CHECK(t, c.status == 0))
            continue;
        for (size_t i = 0; tpu_param_key(i); i++) {
            const tpu_param_info *p = tpu_param_key(i);
            char r[96], line[256];
            tpu_param_range_text(p, r, sizeof r);
            /* the key, then its range on the same line */
            const char *at = strstr(c.out, p->key);
            while (at && at[strlen(p->key)] != ' ')
                at = strstr(at + 1, p->key);
            const char *nl = at ? strchr(at, '\n') : NULL;
            snprintf(line, sizeof line, "%.*s", nl ? (int)(nl - at) : 0,
                     at ? at : "");
            TH_CHECKF(t, at && strstr(line, r), "%s: %s without %s (%s)",
                      cmds[k], p->key, r, line);
        }
        for (size_t i = 0; tpu_param_rule(i); i++) {
            /* wrapped: compare the rule's first words */
            char head[32];
            snprintf(head, sizeof head, "%s", tpu_param_rule(i));
            TH_CHECKF(t, strstr(c.out, head) != NULL, "%s: rule '%s'",
                      cmds[k], tpu_param_rule(i));
        }
        int longest = 0, len = 0;
        for (const char *q = c.out; *q; q++) {
            len = *q == '\n' ? 0 : len + 1;
            longest = len > longest ? len : longest;
        }
        TH_CHECKF(t, longest < 100, "%s --help: a line of %d columns", cmds[k],
                  longest);
    }
    unknown_key_cases(t);
    hbm_peak_help(t);
}
