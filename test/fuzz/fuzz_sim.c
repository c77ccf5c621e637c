/* libFuzzer entry for the whole pipeline: `make fuzz-sim FUZZ_SECONDS=600`.
 *
 * fuzz_trace.c stops at the reader; this one takes every trace the reader
 * accepts on through the partition plan, the lowering, the pod engine and
 * the --functional executor, where a valid but odd trace (a prime-sized
 * shard, a window wider than its input, a replicated operand meeting a
 * split one) could still trip an assertion the reader cannot see.
 *
 * Besides "no crash, no leak, no UB, no hang" (ASan/UBSan, -timeout) it
 * enforces:
 *  - sim_run returns OK, NOFIT or INPUT (a run-section refusal), with a
 *    one-line message starting with the file name, and a result whose
 *    per-core categories sum to the core's step time;
 *  - the functional executor's output does not depend on the split: for an
 *    inference graph whose layers all compute each output from a window
 *    of their input (no cross-core reduction), the partitioned run's
 *    output checksum equals the unpartitioned run's bit for bit, as
 *    docs/FUNCTIONAL.md promises.
 * Graphs too large to execute quickly are only timed (work caps below), so
 * the fuzzer keeps its speed; the caps are about the fuzzer, not limits of
 * tpuemu. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "emu/graph.h"
#include "emu/result.h"
#include "emu/sim.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Forward FLOPs of the whole global batch above which the functional
 * executor is skipped (about a tenth of a second of host time). */
#define FUZZ_FX_FLOPS 2e7
/* Host memory the functional executor may take per run. */
#define FUZZ_FX_BYTES (64.0 * 1024 * 1024)

static int message_ok(const tpu_error *e)
{
    return strncmp(e->msg, "fuzz.json", 9) == 0 && !strchr(e->msg, '\n');
}

static void check_result(const emu_result *r)
{
    for (int c = 0; c < r->cores; c++) {
        const emu_core_result *cr = &r->per_core[c];
        double sum = 0;
        for (int k = 0; k < CAT_COUNT; k++) {
            if (!(cr->breakdown_s[k] >= 0))
                abort();
            sum += cr->breakdown_s[k];
        }
        if (!(fabs(sum - cr->step_time_s) <= 1e-9 * cr->step_time_s + 1e-15))
            abort();
        if (!(cr->step_time_s <= r->step_time_s * (1 + 1e-12)))
            abort();
    }
}

/* Whether every computing layer maps a window of its input to its output,
 * so that splitting changes no sum's order: then the partitioned output is
 * bit-identical to the unpartitioned one. */
static int split_invariant(const graph *g)
{
    if (g->train)
        return 0;
    for (int i = 0; i < g->n_layers; i++)
        switch (g->layers[i].op) {
        case GOP_DENSE:
        case GOP_FLATTEN:
        case GOP_GAP:
        case GOP_LOSS:
        case GOP_DROPOUT:
            return 0;
        default:
            break;
        }
    return 1;
}

static int split_at_all(const graph *g)
{
    for (int d = 0; d < g->pdims_rank; d++)
        if (g->pdims[d] > 1)
            return 1;
    return 0;
}

static tpu_status run(const graph *g, int functional, emu_result *r)
{
    sim_opts o;
    tpu_error e;
    sim_opts_default(&o);
    o.trace_path = "fuzz.json";
    o.functional = functional;
    o.host_mem_limit = FUZZ_FX_BYTES;
    e.msg[0] = 0;
    memset(r, 0, sizeof *r);
    tpu_status st = sim_run(g, &o, r, &e);
    if (st == TPU_OK)
        check_result(r);
    else if (st == TPU_ERR_INPUT || st == TPU_ERR_NOFIT) {
        if (!message_ok(&e))
            abort();
    } else if (st != TPU_ERR_SYSTEM) {
        abort();
    }
    return st;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    graph g;
    tpu_error e;
    e.msg[0] = 0;
    if (graph_parse(&g, (const char *)data, size, "fuzz.json", &e) !=
            TPU_OK ||
        g.n_layers > 64) {
        graph_free(&g);
        return 0;
    }
    emu_result r;
    tpu_status st = run(&g, 0, &r);
    emu_result_free(&r);
    double work = graph_forward_flops(&g) * (double)g.global_batch;
    if (st != TPU_OK || !(work <= FUZZ_FX_FLOPS)) {
        graph_free(&g);
        return 0;
    }
    emu_result split, whole;
    tpu_status s1 = run(&g, 1, &split);
    if (s1 == TPU_OK && split_invariant(&g) && split_at_all(&g)) {
        graph flat = g;
        for (int d = 0; d < flat.pdims_rank; d++)
            flat.pdims[d] = 1;
        if (run(&flat, 1, &whole) == TPU_OK && split.has_values &&
            whole.has_values && split.output_checksum != whole.output_checksum)
            abort();
        emu_result_free(&whole);
    }
    emu_result_free(&split);
    graph_free(&g);
    return 0;
}
