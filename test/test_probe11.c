/* Probe round 11 (grouped and depthwise convolutions as an adversary),
 * each failing before its fix:
 *
 *  - a share_weights pair that differs names what differs ("groups 8
 *    here, 4 there"); it compared input channels, equal, whatever
 *    differed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test/harness.h"

static void share_cases(th_ctx *t, th_cmd_result *c)
{
    static const struct {
        const char *b_extra; /* keys of layer b after "kernel":[3,3] */
        const char *want;
    } k[] = {
        {",\"groups\":8", "groups 8 here, 4 there"},
        {"", "groups 1 here, 4 there"},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        char path[512], text[1024];
        snprintf(path, sizeof path, "%s/p11-share%zu.json", th_tmpdir(), i);
        snprintf(text, sizeof text,
                 "{\"format\":\"tpuemu-trace/1\",\"system\":\"v3-8\",\"run\":{"
                 "\"mode\":\"train\",\"global_batch\":8},\"graph\":{\"inputs\":"
                 "[{\"name\":\"x\",\"shape\":[8,8,32]}],\"layers\":["
                 "{\"name\":\"a\",\"op\":\"conv\",\"in\":\"x\",\"filters\":32,"
                 "\"kernel\":[3,3],\"groups\":4},"
                 "{\"name\":\"b\",\"op\":\"conv\",\"in\":\"a\",\"filters\":32,"
                 "\"kernel\":[3,3]%s,\"share_weights\":\"a\"},"
                 "{\"name\":\"l\",\"op\":\"loss\",\"in\":\"b\",\"kind\":\"l2\"}"
                 "]}}",
                 k[i].b_extra);
        th_put(path, text);
        th_case(t, "share_weights between different groups names them");
        th_run(c, "%s run %s", th_bin(), path);
        TH_CHECKF(t, c->status == 2 && strstr(c->err, k[i].want) &&
                         strstr(c->err, "graph.layers[1].share_weights"),
                  "status %d: %s", c->status, c->err);
    }
}

void th_suite_probe11(th_ctx *t)
{
    th_cmd_result *c = malloc(sizeof *c);
    if (!c)
        return;
    share_cases(t, c);
    free(c);
}
