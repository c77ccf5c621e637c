#include "emu/result.h"

#include <stdlib.h>

static const char *const cat_names[CAT_COUNT] = {
    "mxu", "vector", "hbm_stall", "halo", "allreduce", "idle"};
static const char *const unit_names[UNIT_COUNT] = {"core", "mxu", "vector",
                                                   "dma", "ici"};
static const char *const phase_names[PHASE_COUNT] = {"forward", "backward",
                                                     "update"};

const char *emu_cat_name(emu_cat c)
{
    return (unsigned)c < CAT_COUNT ? cat_names[c] : "?";
}

const char *emu_unit_name(emu_unit u)
{
    return (unsigned)u < UNIT_COUNT ? unit_names[u] : "?";
}

const char *emu_phase_name(emu_phase p)
{
    return (unsigned)p < PHASE_COUNT ? phase_names[p] : "?";
}

void emu_result_free(emu_result *r)
{
    if (!r)
        return;
    if (r->per_core)
        for (int i = 0; i < r->cores; i++)
            free(r->per_core[i].events);
    free(r->per_core);
    free(r->overrides);
    free(r->range);
    free(r->link_busy_s);
    free(r->layer_names);
    free(r->layer_time_s);
    free(r->layer_gconv);
    free(r->output);
    free(r->grads);
    free(r->losses);
    *r = (emu_result){0};
}
