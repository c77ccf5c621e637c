/* trace_partition — run.input_partition_dims: how each input is split
 * across the cores of a replica (spatial dimensions only, the product of
 * the factors being num_cores_per_replica). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "emu/graph.h"
#include "emu/rfile.h"
#include "emu/trace_internal.h"

/* One entry of input_partition_dims: null, or a list of positive ints
 * whose product is num_cores_per_replica.  rank 0 = any length (labels). */
static tpu_status trace_pdims(trace_ctx *c, const graph *g, const cJSON *e,
                              int k, const glayer *input, int out[],
                              int *out_rank, int *listed)
{
    char p[96], q[64];
    int rank = input ? 2 + input->out.nsp : 0;
    int n, d = 0;
    int64_t prod = 1;
    snprintf(p, sizeof p, "run.input_partition_dims[%d]", k);
    *listed = 0;
    if (cJSON_IsNull(e)) {
        for (d = 0; d < rank; d++)
            out[d] = 1;
        *out_rank = rank;
        return TPU_OK;
    }
    if (!cJSON_IsArray(e))
        return trace_fail(c, p, "expected null or a list of positive "
                          "integers, found %s", trace_type(e));
    n = cJSON_GetArraySize(e);
    if (input && n != rank)
        return trace_fail(c, p,
                          "expected %d factors (N, %sC) for the %dD input "
                          "'%s', found %d",
                          rank,
                          input->out.nsp == 3   ? "D, H, W, "
                          : input->out.nsp == 2 ? "H, W, "
                                                : "",
                          input->out.nsp, trace_q(q, sizeof q, input->name),
                          n);
    if (!input && (n < 2 || n > GRAPH_MAX_PDIMS))
        return trace_fail(c, p, "expected 2 to %d factors, found %d",
                          GRAPH_MAX_PDIMS, n);
    for (const cJSON *v = e->child; v; v = v->next, d++) {
        char pv[112];
        snprintf(pv, sizeof pv, "%s[%d]", p, d);
        if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) ||
            v->valuedouble < 1 || v->valuedouble > 4096)
            return trace_fail(c, pv, "expected a positive integer (at most "
                              "4096), %s", trace_found(q, sizeof q, v));
        out[d] = (int)v->valuedouble;
        prod *= out[d];
    }
    if (prod != g->cores_per_replica)
        return trace_fail(c, p,
                          "product of the factors is %lld, not "
                          "num_cores_per_replica %d",
                          (long long)prod, g->cores_per_replica);
    if (input) {
        if (out[0] != 1 || out[rank - 1] != 1)
            return trace_fail(c, p,
                              "only spatial dimensions may be split: the N "
                              "and C factors must be 1, found %d and %d",
                              out[0], out[rank - 1]);
        for (d = 0; d < input->out.nsp; d++)
            if (out[d + 1] > input->out.sp[d]) {
                char pv[112];
                snprintf(pv, sizeof pv, "%s[%d]", p, d + 1);
                return trace_fail(c, pv,
                                  "factor %d splits a dimension of only "
                                  "%lld ('%s')",
                                  out[d + 1], (long long)input->out.sp[d],
                                  trace_q(q, sizeof q, input->name));
            }
    }
    *out_rank = n;
    *listed = 1;
    return TPU_OK;
}

/* "[1,2,1,1]" */
static void trace_list(char *buf, size_t n, const int dims[], int rank)
{
    size_t len = 0;
    buf[0] = 0;
    for (int d = 0; d < rank && len + 1 < n; d++) {
        int w = snprintf(buf + len, n - len, "%s%d%s", d ? "," : "[",
                         dims[d], d + 1 == rank ? "]" : "");
        if (w < 0)
            break;
        len += (size_t)w;
    }
}

/* Input k > 0 (its entry checked by trace_pdims): replicated when the
 * entry is null or all ones, else split exactly like the first input.
 * The plan has one set of factors over one spatial rank, the first
 * input's, so any other split cannot be honoured; refusing it is better
 * than splitting the input like the first without saying so. */
static tpu_status trace_pdims_like_first(trace_ctx *c, graph *g, int k,
                                         const glayer *input,
                                         const int dims[], int rank)
{
    char p[96], q[64], want[96], first[96];
    int ones = 1, first_ones = 1;
    for (int d = 0; d < rank; d++)
        ones &= dims[d] == 1;
    if (ones) {
        g->layers[k].whole = 1;
        return TPU_OK;
    }
    for (int d = 0; d < g->pdims_rank; d++)
        first_ones &= g->pdims[d] == 1;
    if (rank == g->pdims_rank &&
        input->out.nsp == g->layers[0].out.nsp &&
        memcmp(dims, g->pdims, sizeof(int) * (size_t)rank) == 0)
        return TPU_OK;
    snprintf(p, sizeof p, "run.input_partition_dims[%d]", k);
    trace_list(want, sizeof want, dims, rank);
    trace_list(first, sizeof first, g->pdims, g->pdims_rank);
    if (first_ones)
        return trace_fail(c, p,
                          "tpuemu splits every input like the first, and "
                          "the first ('%s') is not split; '%s' asks for %s: "
                          "give it null (replicated) too",
                          g->layers[0].name, trace_q(q, sizeof q, input->name),
                          want);
    if (input->out.nsp != g->layers[0].out.nsp)
        return trace_fail(c, p,
                          "tpuemu splits one spatial rank per trace, the "
                          "first input's (%dD, %s); '%s' (%s) asks for %s: "
                          "give it null (replicated)",
                          g->layers[0].out.nsp, first,
                          trace_q(q, sizeof q, input->name),
                          input->out.nsp ? (input->out.nsp == 3 ? "3D" : "2D")
                                         : "flat",
                          want);
    return trace_fail(c, p,
                      "tpuemu splits every input like the first (%s); '%s' "
                      "asks for %s: give it the same list or null "
                      "(replicated)",
                      first, trace_q(q, sizeof q, input->name), want);
}

/* run.input_partition_dims: one entry per input, then the labels'.  The
 * first input's entry is the plan's split; the others must match it or
 * be replicated. */
tpu_status trace_partition(trace_ctx *c, graph *g, const cJSON *ipd)
{
    int k = 0;
    tpu_status st;
    if (!cJSON_IsArray(ipd))
        return trace_fail(c, "run.input_partition_dims",
                          "expected a list (one entry per input, then the "
                          "labels' entry), found %s",
                          trace_type(ipd));
    if (cJSON_GetArraySize(ipd) != g->n_inputs + 1)
        return trace_fail(c, "run.input_partition_dims",
                          "expected %d entries (one per input, then the "
                          "labels' entry), found %d",
                          g->n_inputs + 1, cJSON_GetArraySize(ipd));
    for (const cJSON *e = ipd->child; e; e = e->next, k++) {
        int dims[GRAPH_MAX_PDIMS], rank = 0, listed = 0;
        const glayer *input = k < g->n_inputs ? &g->layers[k] : NULL;
        if ((st = trace_pdims(c, g, e, k, input, dims, &rank, &listed)))
            return st;
        if (k == 0) {
            memcpy(g->pdims, dims, sizeof(int) * (size_t)rank);
            g->pdims_rank = rank;
            if (!listed)
                g->layers[0].whole = 1;
        } else if (input &&
                   (st = trace_pdims_like_first(c, g, k, input, dims,
                                                rank))) {
            return st;
        }
        if (!input)
            g->labels_partitioned = listed;
    }
    return TPU_OK;
}
