/* Probe round 11 (grouped and depthwise convolutions as an adversary),
 * each failing before its fix:
 *
 *  - a share_weights pair that differs names what differs ("groups 8
 *    here, 4 there"); it compared input channels, equal, whatever
 *    differed;
 *  - the per-group candidate holds one group's weights at a time: with
 *    every group's weights counted as one resident block, 2^15 channels in
 *    groups of 2 cost 17x per channel what 2^14 did (8-row tiles, K parts);
 *  - the depthwise vector pass counts elements as every vector pass does:
 *    the small-batch layout's padding (an MXU operand's) made a 3-channel
 *    depthwise layer at one example per core 56x slower;
 *  - MXU utilization counts the matrix unit's MACs: a depthwise-only net
 *    on the vector unit reads 0, not the vector unit's MACs over the
 *    MXU's peak.
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

/* A one-layer grouped conv on v3-8 at 1 example per core: C channels in
 * groups of cg, its step time with the candidate forced (0 the pick). */
static double grouped(th_ctx *t, th_cmd_result *c, int hw, long ch, long cg,
                      int cand, const char *more)
{
    char path[512], text[1024];
    snprintf(path, sizeof path, "%s/p11-g%ld-%ld.json", th_tmpdir(), ch, cg);
    snprintf(text, sizeof text,
             "{\"format\":\"tpuemu-trace/1\",\"system\":\"v3-8\",\"run\":{"
             "\"mode\":\"train\",\"global_batch\":8},\"graph\":{\"inputs\":"
             "[{\"name\":\"x\",\"shape\":[%d,%d,%ld]}],\"layers\":["
             "{\"name\":\"c\",\"op\":\"conv\",\"in\":\"x\",\"filters\":%ld,"
             "\"kernel\":[3,3],\"groups\":%ld},"
             "{\"name\":\"l\",\"op\":\"loss\",\"in\":\"c\",\"kind\":\"l2\"}"
             "]}}",
             hw, hw, ch, ch, ch / cg);
    th_put(path, text);
    th_run(c, "%s run %s --quiet --set xla.group_conv=%d %s", th_bin(), path,
           cand, more);
    TH_CHECKF(t, c->status == 0, "status %d: %s", c->status, c->err);
    return atof(c->out);
}

static void cost_cases(th_ctx *t, th_cmd_result *c)
{
    th_case(t, "per-group products: the cost per channel does not jump "
               "with the group count (one group's weights resident)");
    double a = grouped(t, c, 8, 16384, 2, 2, "");
    double b = grouped(t, c, 8, 32768, 2, 2, "");
    /* twice the channels, twice the groups, the same work per group */
    TH_CHECKF(t, a > 0 && b > 1.5 * a && b < 2.5 * a,
              "2^14 channels %g s, 2^15 %g s (ratio %g)", a, b, b / a);

    th_case(t, "depthwise on the vector unit: the small-batch layout does "
               "not pad its elements");
    double p1 = grouped(t, c, 224, 3, 1, 3, "--set xla.conv_pad=1");
    double p0 = grouped(t, c, 224, 3, 1, 3, "--set xla.conv_pad=0");
    TH_CHECKF(t, p1 > 0 && p1 == p0, "conv_pad=1 %g s, conv_pad=0 %g s", p1,
              p0);

    th_case(t, "a depthwise-only net on the vector unit: MXU utilization 0");
    char rep[512];
    snprintf(rep, sizeof rep, "%s/p11-dw.json", th_tmpdir());
    char more[600];
    snprintf(more, sizeof more, "--report %s", rep);
    grouped(t, c, 224, 3, 1, 3, more);
    char *text = th_slurp(rep, NULL);
    const char *u = text ? strstr(text, "\"mxu_utilization\": ") : NULL;
    TH_CHECKF(t, u && atof(u + 19) == 0, "%s", u ? u : "(no report)");
    free(text);
}

void th_suite_probe11(th_ctx *t)
{
    th_cmd_result *c = malloc(sizeof *c);
    if (!c)
        return;
    share_cases(t, c);
    cost_cases(t, c);
    free(c);
}
