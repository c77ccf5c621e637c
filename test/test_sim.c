/* sim_run's results on steps at the edges: a step with no work, and the
 * per-core placement of a step that does not fit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mxu/mxu.h"
#include "test/harness.h"

static const char *const trace_head =
    "{\"format\":\"tpuemu-trace/1\",\"system\":\"v3-8\",\"run\":{";

static void nowork_cases(th_ctx *t, th_cmd_result *c)
{
    char path[512], text[1024];
    snprintf(path, sizeof path, "%s/sim-nowork.json", th_tmpdir());
    snprintf(text, sizeof text,
             "%s\"mode\":\"train\",\"global_batch\":8},\"graph\":{"
             "\"inputs\":[{\"name\":\"x\",\"shape\":[16]}],\"layers\":["
             "{\"name\":\"f\",\"op\":\"flatten\",\"in\":\"x\"}]}}",
             trace_head);
    th_put(path, text);
    th_case(t, "a step with no work is refused, naming the graph, and "
               "writes no report");
    th_run(c,
           "rm -f %s/sim-nw.json; %s run %s --report %s/sim-nw.json; "
           "s=$?; test -e %s/sim-nw.json; echo made=$?; exit $s",
           th_tmpdir(), th_bin(), path, th_tmpdir(), th_tmpdir());
    TH_CHECKF(t,
              c->status == 2 &&
                  strstr(c->err, "graph.layers: the step "
                                 "does no work") &&
                  strstr(c->out, "made=1"),
              "status %d: %s", c->status, c->err);
}

static void nofit_placement_cases(th_ctx *t, th_cmd_result *c)
{
    /* RetinaNet 2560 split 4 ways on v3-8 at batch 64: 2 replicas of 4
     * cores, 29.9 GiB per core: no fit, but a report that places them */
    char rep[512];
    snprintf(rep, sizeof rep, "%s/sim-nofit.json", th_tmpdir());
    th_case(t, "a report of a step that does not fit places each core in "
               "its replica and shard (every core read replica 0, shard 0)");
    th_run(c,
           "%s run traces/retinanet-2560-v3-8-p4.json --batch 64 --report "
           "%s",
           th_bin(), rep);
    char *text = th_slurp(rep, NULL);
    TH_CHECKF(t,
              c->status == 3 && text &&
                  strstr(text, "{\"core\": 5, \"chip\": 2, \"replica\": 1, "
                               "\"shard\": 1,") &&
                  strstr(text, "\"fits\": false"),
              "status %d: %s", c->status, c->err);
    free(text);
}

void th_suite_sim(th_ctx *t)
{
    th_cmd_result *c = malloc(sizeof *c); /* 72 KiB: not on the stack */
    if (!c)
        return;
    nowork_cases(t, c);
    nofit_placement_cases(t, c);
    free(c);
}
