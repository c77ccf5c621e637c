/* Sweep files (emu/cli/sweep/file.c): a grid.freeze entry that repeats an
 * earlier one, values a few ulps apart, a batch run refuses, a number too
 * large for a double; graph_freeze_check, which the sweep reader uses. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "emu/graph.h"
#include "mxu/mxu.h"
#include "test/harness.h"

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

static const char *const trace_head =
    "{\"format\":\"tpuemu-trace/1\",\"system\":\"v3-8\",\"run\":{";

static void grid_value_cases(th_ctx *t, th_cmd_result *c)
{
    const char *dir = th_tmpdir();
    char tr[512], sw[512], text[1024];
    snprintf(tr, sizeof tr, "%s/sweep-file-sw-trace.json", dir);
    snprintf(text, sizeof text,
             "%s\"mode\":\"infer\",\"global_batch\":8},\"graph\":{"
             "\"inputs\":[{\"name\":\"x\",\"shape\":[16,16,8]}],"
             "\"layers\":[{\"name\":\"c\",\"op\":\"conv\",\"in\":\"x\","
             "\"filters\":8,\"kernel\":[3,3]}]}}",
             trace_head);
    th_put(tr, text);
    static const struct {
        const char *grid, *what, *want; /* want NULL: the sweep runs */
    } k[] = {
        {"\"set\":{\"clock_hz\":[1000000000.0,1000000000.0000001]}",
         "a sweep of values one ulp apart draws its chart and ends", NULL},
        {"\"batch\":[2097152]",
         "a sweep refuses a batch run refuses, before it starts",
         "grid.batch[0]: expected a positive integer (at most 1048576"},
        {"\"set\":{\"clock_hz\":[1e400]}",
         "a sweep names a number too large for a double as one",
         "grid.set.clock_hz[0]: too large for a double"},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        snprintf(sw, sizeof sw, "%s/sweep-file-sw%zu.json", dir, i);
        snprintf(text, sizeof text,
                 "{\"format\":\"tpuemu-sweep/"
                 "1\",\"name\":\"p12\",\"trace\":\"sweep-file-sw-trace.json\","
                 "\"grid\":{%s}}",
                 k[i].grid);
        th_put(sw, text);
        th_case(t, k[i].what);
        th_run(c,
               "rm -rf %s/sweep-file-swout%zu; timeout 60 %s sweep %s --out "
               "%s/sweep-file-swout%zu; s=$?; test -e %s/sweep-file-swout%zu; "
               "echo made=$?; exit $s",
               dir, i, th_bin(), sw, dir, i, dir, i);
        if (!k[i].want)
            TH_CHECKF(t, c->status == 0 && strstr(c->out, "2 done"),
                      "status %d: %s", c->status, c->err);
        else
            TH_CHECKF(t,
                      c->status == 2 && strstr(c->err, k[i].want) &&
                          strstr(c->out, "made=1"),
                      "status %d: %s %s", c->status, c->err, c->out);
    }
}

void th_suite_sweep_file(th_ctx *t)
{
    th_cmd_result *c = malloc(sizeof *c);
    if (!c)
        return;
    freeze_check(t);
    grid_value_cases(t, c);
    free(c);
}
