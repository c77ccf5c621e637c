/* chrome_memo — what a shared timeline gave: cores that copy one twin's
 * timeline share its event array (a v3-2048 pod of 16-core replicas has
 * 2048 cores and 16 arrays), and a core's count, signature and bins are
 * functions of its array and how it is written, so they are computed
 * once per (array, way), not once per core. */
#include <stdlib.h>
#include <string.h>

#include "emu/out/chrome_internal.h"

/* The entry for (events, way), added when absent; NULL when out of
 * memory (the caller then computes without it). */
chrome_memo_ent *chrome_memo_find(chrome_memo_tab *t, const emu_core_result *pc,
                                  int kind, int a, int b, int *fresh)
{
    *fresh = 0;
    if (!t)
        return NULL;
    for (size_t i = 0; i < t->n; i++) {
        chrome_memo_ent *m = &t->e[i];
        if (m->ev == pc->events && m->nev == pc->n_events && m->kind == kind &&
            m->a == a && m->b == b && m->step == pc->step_time_s)
            return m;
    }
    if (t->n == t->cap) {
        size_t nc = t->cap ? t->cap * 2 : 64;
        chrome_memo_ent *ne = realloc(t->e, nc * sizeof *ne);
        if (!ne)
            return NULL;
        t->e = ne;
        t->cap = nc;
    }
    chrome_memo_ent *m = &t->e[t->n++];
    memset(m, 0, sizeof *m);
    m->ev = pc->events;
    m->nev = pc->n_events;
    m->kind = kind;
    m->a = a;
    m->b = b;
    m->step = pc->step_time_s;
    *fresh = 1;
    return m;
}

void chrome_memo_free(chrome_memo_tab *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n; i++)
        free(t->e[i].acc);
    free(t->e);
    t->e = NULL;
    t->n = t->cap = 0;
}
