/* PLACEHOLDER until the pod engine lands (issue 4). */
#include "emu/sim.h"

#include <string.h>

void sim_opts_default(sim_opts *o)
{
    memset(o, 0, sizeof *o);
    o->seed = 1;
}

tpu_status sim_run(const graph *g, const sim_opts *o, emu_result *out,
                   tpu_error *err)
{
    (void)o;
    memset(out, 0, sizeof *out);
    return tpu_fail(err, TPU_ERR_INPUT, "%s: pod engine not built yet",
                    g->name);
}
