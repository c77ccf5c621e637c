/* Which unconfirmed assumption could reorder two candidates whose step
 * ranges overlap (emu/cli/advise.h): shared by `tpuemu advise` and the
 * ranking of `tpuemu sweep`, which both mark a candidate that the
 * assumptions could put ahead of the winner. */
#include <stdio.h>
#include <string.h>

#include "emu/cli/advise.h"

/* The step with key at one end (high: its high end): the item's, or the
 * default step when the key does not move this candidate's step (it is
 * not in its list).  <= 0 when that end has no time. */
static double step_at(const emu_range_item *it, int n, double step,
                      const char *key, int high)
{
    for (int k = 0; k < n; k++)
        if (strcmp(it[k].key, key) == 0)
            return high ? it[k].high_s : it[k].low_s;
    return step;
}

/* How much faster b does its work than a with key at one end (> 1: b
 * ahead), 0 when either end has no time. */
static double gain_at(const advise_ranged *a, const advise_ranged *b,
                      const char *key, int high)
{
    double sa = step_at(a->items, a->n, a->step_s, key, high);
    double sb = step_at(b->items, b->n, b->step_s, key, high);
    if (!(sa > 0) || !(sb > 0))
        return 0;
    return (b->work / sb) / (a->work / sa);
}

/* The best end of key for b so far into *best (key, high, gain). */
static void try_key(const advise_ranged *a, const advise_ranged *b,
                    const char *key, const char **bkey, int *bhigh,
                    double *bgain)
{
    for (int high = 0; high < 2; high++) {
        double g = gain_at(a, b, key, high);
        if (g > *bgain) {
            *bgain = g;
            *bkey = key;
            *bhigh = high;
        }
    }
}

int advise_reorder(const advise_ranged *a, const advise_ranged *b, int gen,
                   char *set, size_t cap)
{
    const char *key = NULL;
    int high = 0;
    double gain = 1;
    for (int k = 0; k < b->n; k++)
        try_key(a, b, b->items[k].key, &key, &high, &gain);
    for (int k = 0; k < a->n; k++)
        try_key(a, b, a->items[k].key, &key, &high, &gain);
    if (!key)
        return 0;
    tpu_param_span sp;
    if (tpu_param_span_get(key, gen, &sp))
        snprintf(set, cap, "%s=%.15g", key, high ? sp.hi : sp.lo);
    else
        snprintf(set, cap, "%s at its %s end", key, high ? "high" : "low");
    return 1;
}
