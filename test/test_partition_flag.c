/* --partition N,H,W,C (emu/cli/whatif.c) on run, lower and sweep --trace:
 * the same step as the trace that says it in input_partition_dims, the
 * report recording the split, and errors in the option's words. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/report.h"
#include "test/harness.h"

#define TINY "traces/small/tiny2d.json"

/* tiny2d.json with its run section split [1,2,2,1] over 4 cores. */
static void write_split(char *path, size_t cap)
{
    snprintf(path, cap, "%s/tiny2d-p4.json", th_tmpdir());
    char *text = th_slurp(TINY, NULL);
    if (!text)
        return;
    const char *from = "\"num_cores_per_replica\": 1}";
    char *at = strstr(text, from);
    if (at) {
        char *out = malloc(strlen(text) + 200);
        sprintf(out,
                "%.*s\"num_cores_per_replica\": 4, "
                "\"input_partition_dims\": [[1, 2, 2, 1], null]}%s",
                (int)(at - text), text, at + strlen(from));
        th_put(path, out);
        free(out);
    }
    free(text);
}

/* The run's table without its first line (which names the trace). */
static const char *body(const char *out)
{
    const char *nl = strchr(out, '\n');
    return nl ? nl : out;
}

void th_suite_partition_flag(th_ctx *t)
{
    th_cmd_result *a = malloc(sizeof *a), *b = malloc(sizeof *b);
    char split[1024], rep[1024];
    write_split(split, sizeof split);
    snprintf(rep, sizeof rep, "%s/partition-report.json", th_tmpdir());

    th_case(t, "run --partition is the trace that says it");
    th_run(a, "%s run %s --partition 1,2,2,1 --report %s", th_bin(), TINY, rep);
    th_run(b, "%s run %s", th_bin(), split);
    TH_CHECKF(t, a->status == 0 && b->status == 0, "exit %d, %d: %s%s",
              a->status, b->status, a->err, b->err);
    TH_CHECKF(t, strcmp(body(a->out), body(b->out)) == 0,
              "--partition:\n%s\nthe trace:\n%s", a->out, b->out);
    /* the x form advise and sweep print */
    th_run(b, "%s run %s --partition 1x2x2x1", th_bin(), TINY);
    TH_CHECKF(t, b->status == 0 && strcmp(body(a->out), body(b->out)) == 0,
              "1x2x2x1 (exit %d):\n%s", b->status, b->out);

    th_case(t, "the report records the split and the replica size");
    emu_result r;
    tpu_error e = {0};
    if (TH_CHECKF(t, report_read(&r, rep, &e) == TPU_OK, "%s", e.msg)) {
        TH_CHECKF(
            t,
            r.cores_per_replica == 4 && r.pdims_rank == 4 && r.pdims[0] == 1 &&
                r.pdims[1] == 2 && r.pdims[2] == 2 && r.pdims[3] == 1,
            "cores per replica %d, %d dims [%d,%d,%d,%d]", r.cores_per_replica,
            r.pdims_rank, r.pdims[0], r.pdims[1], r.pdims[2], r.pdims[3]);
        emu_result_free(&r);
    }
    char *text = th_slurp(rep, NULL);
    TH_CHECKF(t, text && strstr(text, "\"input_partition_dims\": [1, 2, 2, 1]"),
              "report: %.300s", text ? text : "(none)");
    free(text);
    /* without the option the key stays out: reports are what they were */
    th_run(a, "%s run %s --report %s", th_bin(), split, rep);
    text = th_slurp(rep, NULL);
    TH_CHECKF(t, a->status == 0 && text && !strstr(text, "input_partition"),
              "a report without --partition has input_partition_dims");
    free(text);

    th_case(t, "lower --partition lowers the split step");
    th_run(a, "%s lower %s --partition 1,2,2,1", th_bin(), TINY);
    th_run(b, "%s lower %s", th_bin(), split);
    TH_CHECKF(t, a->status == 0 && strcmp(body(a->out), body(b->out)) == 0,
              "exit %d: %s", a->status, a->err);

    th_case(t, "errors name the option, the input and its shape: exit 2");
    static const struct {
        const char *arg, *msg;
    } bad[] = {
        {"1,2,2", "--partition 1,2,2: the first input 'image' is 32x32x3 per "
                  "example, so its split has 4 factors (N, H, W, C), not 3"},
        {"1,64,1,1", "--partition 1,64,1,1: splits H of input 'image' "
                     "(32x32x3 per example) 64 ways, but it is only 32 long"},
        {"2,2,1,1", "only spatial dimensions are split"},
        {"1,4,4,1", "16 cores per replica do not divide the 8 cores of v3-8"},
        {"1,x,2,1", "--partition 1,x,2,1: expected 2 to 5 factors"},
        {"1,,2,1", "--partition 1,,2,1: expected"},
        {"1x2,2x1", "--partition 1x2,2x1: expected 2 to 5 factors"},
        {"1x2x2x", "--partition 1x2x2x: expected"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        th_run(a, "%s run %s --partition %s", th_bin(), TINY, bad[k].arg);
        TH_CHECKF(t, a->status == 2 && strstr(a->err, bad[k].msg),
                  "--partition %s: exit %d: %s", bad[k].arg, a->status, a->err);
    }

    th_case(t, "sweep --trace --partition runs that one split");
    char out[1024];
    snprintf(out, sizeof out, "%s/sweep-part", th_tmpdir());
    th_run(a, "%s sweep --trace %s --partition 1,2,2,1 --out %s -j 1", th_bin(),
           TINY, out);
    TH_CHECKF(t, a->status == 0, "exit %d: %s", a->status, a->err);
    char sj[1100];
    snprintf(sj, sizeof sj, "%s/sweep.json", out);
    text = th_slurp(sj, NULL);
    TH_CHECKF(t, text && strstr(text, "[[1, 2, 2, 1]]"), "sweep.json: %.400s",
              text ? text : "(none)");
    free(text);
    th_run(a, "%s sweep --trace %s --partition 1,2 --out %s", th_bin(), TINY,
           out);
    TH_CHECKF(t, a->status == 2 && strstr(a->err, "--partition 1,2"),
              "exit %d: %s", a->status, a->err);
    free(a);
    free(b);
}
