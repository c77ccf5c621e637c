/* scripts/fx_reference.py on the activation and elementwise ops: every
 * activation kind (relu with alpha and max_value, relu6, leaky_relu, elu,
 * gelu, swish, hard_sigmoid, tanh, softmax, prelu) and every elementwise
 * kind (multiply, subtract, maximum, minimum, average, add) with the
 * per-channel ([C] and [1,1,C]) and per-position ([H,W,1]) broadcasts, in
 * f32 training (test/ops/ops-train.json, ops3-train.json) and bf16
 * inference (ops-act-infer.json), each split 2x2 as its file says, and
 * ops-act-infer unsplit.  The right seed passes end to end and with
 * --layerwise (each layer within its one-layer bound, most of them bit for
 * bit), a wrong seed fails.  Needs /usr/bin/python3 with numpy, as
 * test/test_functional.c does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test/harness.h"

#define PY "/usr/bin/python3 scripts/fx_reference.py "

static const struct {
    const char *trace;
    int tensors; /* stored tensors --layerwise checks */
} fxo_traces[] = {
    {"test/ops/ops-train.json", 21},
    {"test/ops/ops3-train.json", 13},
    {"test/ops/ops-act-infer.json", 34},
};

static void fxo_check(th_ctx *t, th_cmd_result *c, const char *trace,
                      int tensors, const char *right, const char *wrong)
{
    char want[64];
    th_run(c, "%s run %s --functional --seed 1 --output-npy %s --quiet",
           th_bin(), trace, right);
    TH_CHECKF(t, c->status == 0, "%s: %s", trace, c->err);
    th_run(c, "%s run %s --functional --seed 2 --output-npy %s --quiet",
           th_bin(), trace, wrong);
    TH_CHECKF(t, c->status == 0, "%s: %s", trace, c->err);
    th_run(c, PY "%s %s --seed 1", trace, right);
    TH_CHECKF(t, c->status == 0, "%s right seed: status %d: %s%s", trace,
              c->status, c->out, c->err);
    snprintf(want, sizeof want, "%d stored tensors checked", tensors);
    th_run(c, PY "%s %s --seed 1 --layerwise %s", trace, right, th_bin_abs());
    TH_CHECKF(t, c->status == 0 && strstr(c->out, want),
              "%s right seed, --layerwise: status %d: %s%s", trace, c->status,
              c->out, c->err);
    th_run(c, PY "%s %s --seed 1", trace, wrong);
    TH_CHECKF(t, c->status == 1, "%s wrong seed: status %d: %s%s", trace,
              c->status, c->out, c->err);
}

void th_suite_functional_ops(th_ctx *t)
{
    th_cmd_result *c = malloc(sizeof *c);
    char right[600], wrong[600], trace[600];
    const char *tmp = th_tmpdir();
    if (!c)
        return;
    snprintf(right, sizeof right, "%s/fxo-right.npy", tmp);
    snprintf(wrong, sizeof wrong, "%s/fxo-wrong.npy", tmp);

    th_case(t, "numpy is there (make deps installs python3-numpy)");
    if (!th_have_numpy(c)) {
        TH_FAIL(t, "python3-numpy is missing (make deps installs it)");
        free(c);
        return;
    }

    for (size_t i = 0; i < sizeof fxo_traces / sizeof *fxo_traces; i++) {
        th_case(t, fxo_traces[i].trace);
        fxo_check(t, c, fxo_traces[i].trace, fxo_traces[i].tensors, right,
                  wrong);
    }

    th_case(t, "ops-act-infer unsplit (one core per replica): the same "
               "checks");
    snprintf(trace, sizeof trace, "%s/fxo-unsplit.json", tmp);
    th_run(c,
           "sed -e 's/\"num_cores_per_replica\": 4/\"num_cores_per_replica\": 1/' "
           "-e 's/\\[1, 2, 2, 1\\]/[1, 1, 1, 1]/' test/ops/ops-act-infer.json > %s"
           " && grep -c '\\[1, 1, 1, 1\\]' %s",
           trace, trace);
    TH_CHECKF(t, c->status == 0, "%s", c->err);
    fxo_check(t, c, trace, 34, right, wrong);

    th_case(t, "an operand that does not broadcast, an unknown kind: "
               "exit 2, named");
    {
        static const char *const bad[] = {
            "{\"name\": \"e\", \"op\": \"elementwise\", \"kind\": \"add\", "
            "\"in\": [\"x\", \"p\"]}",
            "{\"name\": \"e\", \"op\": \"activation\", \"kind\": \"mish\", "
            "\"in\": \"x\"}",
        };
        for (int k = 0; k < 2; k++) {
            char text[1024];
            snprintf(text, sizeof text,
                     "{\"format\": \"tpuemu-trace/1\", \"name\": \"bad\", "
                     "\"system\": \"v3-8\", \"run\": {\"mode\": \"infer\", "
                     "\"global_batch\": 8}, \"graph\": {\"inputs\": "
                     "[{\"name\": \"x\", \"shape\": [4, 4, 3]}], \"layers\": "
                     "[{\"name\": \"p\", \"op\": \"maxpool\", \"in\": \"x\", "
                     "\"window\": [2, 2]}, %s]}}\n",
                     bad[k]);
            snprintf(trace, sizeof trace, "%s/fxo-bad.json", tmp);
            th_put(trace, text);
            th_run(c, PY "%s %s --seed 1", trace, right);
            TH_CHECKF(t, c->status == 2 && strstr(c->err, "'e'"),
                      "status %d: %s%s", c->status, c->out, c->err);
        }
    }
    free(c);
}
