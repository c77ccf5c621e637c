/* chrome_bin — threads cut into equal time bins to fit the event budget:
 * a reduced core's critical path (each bin named by its dominant
 * category, every category's seconds in args) and a representative's
 * unit thread (each bin one event from its first start to its last end,
 * named by the layer of the longest run of events). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/out/chrome_internal.h"

/* The seconds of each category of a core's critical path inside each of
 * nbins bins of width w over [0, step]. */
static void bin_path(const emu_core_result *pc, int nbins, double w,
                     double (*acc)[CAT_COUNT])
{
    double step = pc->step_time_s;
    for (size_t i = 0; i < pc->n_events; i++) {
        const emu_event *e = &pc->events[i];
        if (e->unit != UNIT_CORE || e->cat >= CAT_COUNT)
            continue;
        double a = fmax(e->t0, 0), b = fmin(e->t1, step);
        for (int k = (int)(a / w); k < nbins && k * w < b; k++) {
            double lo = fmax(a, k * w), hi = fmin(b, (k + 1) * w);
            if (hi > lo)
                acc[k][e->cat] += hi - lo;
        }
    }
}

/* The critical path of a reduced core cut into nbins equal time bins:
 * each bin is one event named by its dominant category, with the seconds
 * of every category inside the bin in args, so the breakdown stays exact
 * while the ordering is blurred to the bin width. */
void chrome_bin_path(chrome_sink *s, const emu_core_result *pc, int nbins)
{
    double step = pc->step_time_s;
    if (!(step > 0) || nbins < 1)
        return;
    double w = step / nbins;
    int fresh;
    chrome_memo_ent *m = chrome_memo_find(s->memo, pc, 1, nbins, 0, &fresh);
    double(*acc)[CAT_COUNT] = m && !fresh ? m->acc : NULL;
    int own = 0;
    if (!acc) {
        acc = calloc((size_t)nbins, sizeof *acc);
        if (!acc)
            return;
        own = 1;
        bin_path(pc, nbins, w, acc);
    }
    for (int k = 0; k < nbins; k++) {
        double tot = 0;
        for (int c = 0; c < CAT_COUNT; c++)
            tot += acc[k][c];
        if (!(tot > 0) || !chrome_sink_count(s, UNIT_CORE))
            continue;
        const char *cat = emu_cat_name((emu_cat)chrome_sink_dominant(acc[k]));
        chrome_sink_x(s, cat, cat, pc->chip, pc->core * UNIT_COUNT + UNIT_CORE,
              k * w, k + 1 == nbins ? step : (k + 1) * w);
        fputs("\"binned\":true", s->f);
        chrome_sink_cat_seconds(s->f, acc[k]);
        fputs("}}", s->f);
    }
    if (own && m && fresh)
        m->acc = acc; /* the memo owns it now */
    else if (own)
        free(acc);
}

/* One bin of a unit's thread (chrome_bin_unit). */
typedef struct {
    double lo, hi;              /* extent of the events inside the bin */
    double cat_s[CAT_COUNT];    /* event seconds inside the bin */
    double bytes, flops;        /* of the events starting in the bin */
    unsigned long count, events;
    double run_s, best_s;       /* dominant layer: see below */
    int32_t run_layer, best_layer;
    int used;
} ubin;

static void ubin_add(ubin *b, double lo, double hi, const emu_event *e)
{
    if (!b->used || lo < b->lo)
        b->lo = lo;
    if (!b->used || hi > b->hi)
        b->hi = hi;
    b->used = 1;
    b->cat_s[e->cat < CAT_COUNT ? e->cat : CAT_IDLE] += hi - lo;
    if (b->run_s > 0 && e->layer == b->run_layer)
        b->run_s += hi - lo;
    else {
        b->run_layer = e->layer;
        b->run_s = hi - lo;
    }
    if (b->run_s > b->best_s || b->best_layer < -1) {
        b->best_s = b->run_s;
        b->best_layer = b->run_layer;
    }
}

/* One event of the unit into the bins of width w over [0, end]: its
 * seconds into every bin it crosses, its totals into the bin it starts
 * in (a zero-length event too). */
static void ubin_event(ubin *bin, int nbins, double w, double end,
                       const emu_event *e)
{
    double a = fmin(fmax(e->t0, 0), end), b = fmin(fmax(e->t1, a), end);
    int k0 = (int)(a / w);
    if (k0 >= nbins)
        k0 = nbins - 1;
    for (int k = k0; k < nbins && k * w < b; k++) {
        double lo = fmax(a, k * w), hi = fmin(b, (k + 1) * w);
        if (hi > lo)
            ubin_add(&bin[k], lo, hi, e);
    }
    ubin *h = &bin[k0];
    if (!h->used) {
        double at = fmin(fmax(a, k0 * w), (k0 + 1) * w);
        ubin_add(h, at, at, e);
    }
    h->count += e->count;
    h->events++;
    h->bytes += e->bytes;
    h->flops += e->flops;
}

static void put_ubin(chrome_sink *s, const emu_core_result *pc, int tid,
                     const ubin *b)
{
    const char *cat = emu_cat_name((emu_cat)chrome_sink_dominant(b->cat_s));
    const char *ln = chrome_sink_layer(s->r, b->best_layer);
    chrome_sink_x(s, ln ? ln : cat, cat, pc->chip, tid, b->lo, b->hi);
    fputs("\"binned\":true,\"layer\":", s->f);
    chrome_sink_str(s->f, ln ? ln : "");
    fprintf(s->f, ",\"events\":%lu,\"count\":%lu", b->events, b->count);
    chrome_sink_cat_seconds(s->f, b->cat_s);
    chrome_sink_work(s->f, b->bytes, b->flops);
    fputs("}}", s->f);
}

/* A representative's unit thread cut into nbins equal time bins over the
 * step (LV_TRACKS): each bin with events is one event from the first start
 * to the last end inside it (events crossing a bin edge are cut there, so
 * bins never overlap and the thread nests), named by the layer of the
 * longest run of consecutive events in it (the layer busiest in the bin
 * where a unit's events of one layer come together, as they mostly do;
 * a bin's exact busiest layer would need a table per bin), with every
 * category's event seconds in args (overlapping DMAs add up) and the
 * count, bytes and FLOPs of the events that start in it.  Returns 0 when
 * out of memory (nothing written). */
int chrome_bin_unit(chrome_sink *s, const emu_core_result *pc, int unit,
                     int nbins)
{
    double end = pc->step_time_s;
    for (size_t i = 0; i < pc->n_events; i++)
        if (pc->events[i].unit == unit && pc->events[i].t1 > end)
            end = pc->events[i].t1;
    if (!(end > 0) || nbins < 1)
        return 1;
    ubin *bin = calloc((size_t)nbins, sizeof *bin);
    if (!bin)
        return 0;
    for (int k = 0; k < nbins; k++)
        bin[k].best_layer = bin[k].run_layer = -2;
    double w = end / nbins;
    for (size_t i = 0; i < pc->n_events; i++)
        if (pc->events[i].unit == unit)
            ubin_event(bin, nbins, w, end, &pc->events[i]);
    int tid = chrome_sink_tid(pc->core, unit, 0);
    for (int k = 0; k < nbins; k++)
        if (bin[k].used && chrome_sink_count(s, unit))
            put_ubin(s, pc, tid, &bin[k]);
    free(bin);
    return 1;
}
