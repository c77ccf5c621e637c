/* A small synthetic result for the chart, Chrome-trace and viewer tests:
 * built by hand so the tests know exactly what must appear. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test/harness.h"

/* Core c runs `layers` layers; each layer is an MXU span then a vector span
 * on the critical path (with matching MXU/VPU unit events, and a DMA event
 * overlapping the MXU span), then an all-reduce span with an ICI event and
 * idle up to the slowest core.  identical = 0 makes core c's MXU spans
 * (1 + c/8)% longer, so cores differ. */
void tsynth_result(emu_result *r, int cores, int dim_x, int dim_y,
                   int layers, int identical)
{
    static const double none[CAT_COUNT];
    th_result_make(r, "synthetic-test", "v3-test", cores, 1, cores, none,
                   NULL);
    r->dim_x = dim_x;
    r->dim_y = dim_y;
    r->n_layers = layers;
    r->layer_names = calloc((size_t)layers, sizeof *r->layer_names);
    for (int l = 0; l < layers; l++)
        snprintf(r->layer_names[l], 64, "conv%d", l);
    r->link_busy_s = calloc((size_t)r->chips * 4, sizeof(double));
    double slowest = 0;
    for (int c = 0; c < cores; c++) {
        emu_core_result *pc = &r->per_core[c];
        pc->events = calloc((size_t)layers * 5 + 3, sizeof(emu_event));
        double t = 0, mx = 1e-3 * (identical ? 1 : 1 + (c / 8) * 0.01);
        size_t k = 0;
        for (int l = 0; l < layers; l++) {
            emu_event e = {t, t + mx, UNIT_CORE, CAT_MXU, PHASE_FWD, 1, l, 4, 0, 1e9};
            pc->events[k++] = e;
            e.unit = UNIT_MXU;
            pc->events[k++] = e;
            emu_event d = {t, t + mx * 0.5, UNIT_DMA, CAT_HBM_STALL, PHASE_FWD, 2, l, 1, 1e6, 0};
            pc->events[k++] = d;
            t += mx;
            emu_event v = {t, t + 2e-4, UNIT_CORE, CAT_VECTOR, PHASE_FWD, 3, l, 1, 0, 1e6};
            pc->events[k++] = v;
            v.unit = UNIT_VPU;
            pc->events[k++] = v;
            t += 2e-4;
            pc->breakdown_s[CAT_MXU] += mx;
            pc->breakdown_s[CAT_VECTOR] += 2e-4;
        }
        emu_event a = {t, t + 5e-4, UNIT_CORE, CAT_ALLREDUCE, PHASE_UPDATE, 4, -1, 1, 0, 0};
        pc->events[k++] = a;
        a.unit = UNIT_ICI;
        a.bytes = 4e6;
        pc->events[k++] = a;
        t += 5e-4;
        pc->breakdown_s[CAT_ALLREDUCE] += 5e-4;
        pc->step_time_s = t;
        pc->n_events = k;
        if (t > slowest)
            slowest = t;
        pc->flops = 1e9 * layers;
    }
    for (int c = 0; c < cores; c++) {
        emu_core_result *pc = &r->per_core[c];
        double idle = slowest - pc->step_time_s;
        if (idle > 0) {
            emu_event e = {pc->step_time_s, slowest, UNIT_CORE, CAT_IDLE, PHASE_UPDATE, 0, -1, 1, 0, 0};
            pc->events[pc->n_events++] = e;
            pc->breakdown_s[CAT_IDLE] = idle;
        }
        pc->step_time_s = slowest;
        pc->mxu_utilization = pc->breakdown_s[CAT_MXU] / slowest;
    }
    for (int i = 0; i < r->chips * 4; i++)
        r->link_busy_s[i] = slowest * (0.1 + 0.2 * (i % 4));
    r->step_time_s = slowest;
    r->flops_per_step = 1e9 * layers * cores;
}
