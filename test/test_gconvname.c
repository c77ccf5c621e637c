/* test_gconvname — which candidate each part of a grouped convolution took
 * is told, not only timed: the report's layers[].grouped (written, read
 * back, malformed values refused with their JSON path), `run --layers`'s
 * last column and `lower`'s block comments, each equal to what the
 * firmware's instructions carry (fw_insn.gconv). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/graph.h"
#include "emu/report.h"
#include "emu/result.h"
#include "emu/sim.h"
#include "firmware/isa.h"
#include "test/harness.h"

/* A trace of one input, a 1x1 convolution (so that "g" has an input
 * gradient), the grouped conv "g" and an l2 loss. */
static void gn_trace(char *buf, size_t cap, int ch, int groups, int batch)
{
    snprintf(buf, cap,
             "{\"format\":\"tpuemu-trace/1\",\"name\":\"gn\","
             "\"system\":\"v3-8\",\"run\":{\"mode\":\"train\","
             "\"global_batch\":%d},"
             "\"graph\":{\"inputs\":[{\"name\":\"image\",\"shape\":[14,14,%d]}],"
             "\"layers\":["
             "{\"name\":\"c\",\"op\":\"conv\",\"in\":\"image\","
             "\"filters\":%d,\"kernel\":[1,1]},"
             "{\"name\":\"g\",\"op\":\"conv\",\"in\":\"c\",\"filters\":%d,"
             "\"kernel\":[3,3],\"groups\":%d},"
             "{\"name\":\"loss\",\"op\":\"loss\",\"kind\":\"l2\",\"in\":\"g\"}]}}",
             batch, ch, ch, ch, groups);
}

/* The candidates core 0's program marks for layer l, part by part. */
static void gn_from_program(const fw_program *p, int l, uint8_t gc[3])
{
    gc[0] = gc[1] = gc[2] = 0;
    for (size_t i = 0; i < p->n; i++) {
        int k = fw_gconv_part(&p->code[i]);
        if (k >= 0 && p->code[i].layer == l)
            gc[k] = p->code[i].gconv;
    }
}

/* Runs g with xla.group_conv = gc; the result in r (free it). */
static int gn_run(th_ctx *t, const graph *g, const char *gc, emu_result *r,
                  uint8_t prog_gc[3])
{
    sim_opts o;
    sim_opts_default(&o);
    const char *keys[1] = {"xla.group_conv"}, *vals[1] = {gc};
    o.n_sets = 1;
    o.set_keys = keys;
    o.set_values = vals;
    tpu_error e = {0};
    if (!TH_CHECKF(t, sim_run(g, &o, r, &e) == TPU_OK, "%s", e.msg))
        return 0;
    fw_program prog;
    fw_memory mem;
    if (!TH_CHECKF(t, sim_lower(g, &o, 0, &prog, &mem, &e) == TPU_OK, "%s",
                   e.msg)) {
        emu_result_free(r);
        return 0;
    }
    gn_from_program(&prog, graph_find(g, "g"), prog_gc);
    fw_program_free(&prog);
    return 1;
}

static int gn_is(const uint8_t *gc, int a, int b, int c)
{
    return gc[0] == a && gc[1] == b && gc[2] == c;
}

/* A report text with layer "g"'s grouped object replaced by `grouped`. */
static char *gn_edit(const char *json, const char *grouped)
{
    const char *at = strstr(json, "\"grouped\": {");
    const char *end = at ? strchr(at, '}') : NULL;
    if (!end)
        return NULL;
    size_t head = (size_t)(at - json), n = strlen(json);
    char *s = malloc(n + strlen(grouped) + 1);
    if (!s)
        return NULL;
    memcpy(s, json, head);
    strcpy(s + head, grouped);
    strcat(s, end + 1);
    return s;
}

static void report_cases(th_ctx *t)
{
    char buf[4096];
    graph g;
    tpu_error e = {0};
    emu_result r;
    uint8_t pg[3];

    th_case(t, "layers[].grouped: the candidates the program carries, for "
               "the pick and for each forced one; none on other layers");
    gn_trace(buf, sizeof buf, 144, 144, 128);
    if (!TH_CHECKF(t, graph_parse(&g, buf, strlen(buf), "t", &e) == 0, "%s",
                   e.msg))
        return;
    int gl = graph_find(&g, "g");
    static const char *const forced[4] = {"0", "1", "2", "3"};
    char *json = NULL;
    for (int k = 0; k < 4; k++) {
        if (!gn_run(t, &g, forced[k], &r, pg))
            continue;
        /* depthwise: the pick is the vector pass (test groups); each
         * forced candidate applies to all three parts */
        int want = k == 0 ? FW_GC_VECTOR : k;
        TH_CHECKF(t, r.layer_gconv != NULL, "gc %s: no layer_gconv",
                  forced[k]);
        if (r.layer_gconv) {
            const uint8_t *gc = r.layer_gconv[gl];
            TH_CHECKF(t, gn_is(gc, want, want, want),
                      "gc %s: %d/%d/%d, want %d", forced[k], gc[0], gc[1],
                      gc[2], want);
            TH_CHECKF(t, memcmp(gc, pg, 3) == 0,
                      "gc %s: result %d/%d/%d, program %d/%d/%d", forced[k],
                      gc[0], gc[1], gc[2], pg[0], pg[1], pg[2]);
            for (int l = 0; l < g.n_layers; l++)
                if (l != gl)
                    TH_CHECKF(t, gn_is(r.layer_gconv[l], 0, 0, 0),
                              "layer %d marked grouped", l);
        }
        if (k == 2)
            json = report_to_json(&r);
        emu_result_free(&r);
    }
    graph_free(&g);

    th_case(t, "layers[].grouped: read back as written; a report without "
               "it reads as no grouped layer");
    if (!TH_CHECKF(t, json != NULL, "no report"))
        return;
    TH_CHECKF(t, strstr(json, "\"grouped\": {\"forward\": \"per_group\", "
                              "\"input_gradient\": \"per_group\"") != NULL,
              "report lacks the per_group parts");
    emu_result back;
    if (TH_CHECKF(t, report_parse(&back, json, strlen(json), "r.json", &e) ==
                         TPU_OK,
                  "%s", e.msg)) {
        TH_CHECKF(t, back.layer_gconv &&
                         gn_is(back.layer_gconv[gl], FW_GC_GROUPS,
                               FW_GC_GROUPS, FW_GC_GROUPS),
                  "read back wrong");
        char *again = report_to_json(&back);
        TH_CHECKF(t, again && strcmp(again, json) == 0,
                  "write-read-write differs");
        free(again);
        emu_result_free(&back);
    }
    char *plain = gn_edit(json, "\"x\": 0");
    if (TH_CHECKF(t, plain != NULL, "edit failed") &&
        TH_CHECKF(t, report_parse(&back, plain, strlen(plain), "r.json",
                                  &e) == TPU_OK,
                  "%s", e.msg)) {
        TH_CHECKF(t, back.layer_gconv == NULL, "layer_gconv without grouped");
        emu_result_free(&back);
    }
    free(plain);

    th_case(t, "layers[].grouped: a bad part or candidate is refused with "
               "its JSON path");
    static const struct {
        const char *grouped, *want;
    } bad[] = {
        {"\"grouped\": {\"forward\": \"mxu\"}",
         "r.json: layers[2].grouped.forward: expected \"dense\", "
         "\"per_group\" or \"vector\""},
        {"\"grouped\": {\"forward\": 2}",
         "r.json: layers[2].grouped.forward: expected \"dense\""},
        {"\"grouped\": {\"forward\": \"none\"}",
         "layers[2].grouped.forward: expected"},
        {"\"grouped\": {\"backward\": \"dense\"}",
         "r.json: layers[2].grouped.backward: unknown part"},
        {"\"grouped\": [\"dense\"]",
         "r.json: layers[2].grouped: expected an object, found a list"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        char *s = gn_edit(json, bad[k].grouped);
        if (!TH_CHECKF(t, s != NULL, "edit failed"))
            continue;
        tpu_status st = report_parse(&back, s, strlen(s), "r.json", &e);
        TH_CHECKF(t, st == TPU_ERR_INPUT && strstr(e.msg, bad[k].want),
                  "%s: status %d, '%s'", bad[k].grouped, (int)st, e.msg);
        if (st == TPU_OK)
            emu_result_free(&back);
        free(s);
    }
    free(json);
}

static void cli_cases(th_ctx *t)
{
    char buf[4096];
    th_cmd_result *c = malloc(sizeof *c);
    if (!TH_CHECKF(t, c != NULL, "out of memory"))
        return;
    th_case(t, "run --layers names each grouped layer's candidates; lower's "
               "block comments say the same");
    gn_trace(buf, sizeof buf, 144, 144, 128);
    const char *path = "build/test-gconvname.json";
    FILE *f = fopen(path, "w");
    if (TH_CHECKF(t, f != NULL, "cannot write %s", path)) {
        fputs(buf, f);
        fclose(f);
        th_run(c, "%s run %s --layers 5", th_bin(), path);
        TH_CHECKF(t, c->status == 0 && strstr(c->out, "grouped: fwd/dx/dw") &&
                         strstr(c->out, "vector/vector/vector"),
                  "status %d: %s", c->status, c->out);
        th_run(c, "%s run %s --layers 5 --set xla.group_conv=1", th_bin(),
               path);
        TH_CHECKF(t, c->status == 0 && strstr(c->out, "dense/dense/dense"),
                  "status %d: %s", c->status, c->out);
        th_run(c, "%s lower %s", th_bin(), path);
        TH_CHECKF(t, c->status == 0 &&
                         strstr(c->out, "; g forward (grouped: vector)\n") &&
                         strstr(c->out, "; g backward (grouped: input "
                                        "gradient vector, weight gradient "
                                        "vector)"),
                  "status %d: %.2000s", c->status, c->out);
        /* no grouped layer: no column, no comment */
        th_run(c, "%s run traces/small/tiny2d.json --layers 3", th_bin());
        TH_CHECKF(t, c->status == 0 && !strstr(c->out, "grouped"),
                  "status %d: %s", c->status, c->out);
        remove(path);
    }
    free(c);
}

void th_suite_gconvname(th_ctx *t)
{
    report_cases(t);
    cli_cases(t);
}
