/* chrome_sink — the Trace Event records of a chrome trace: a sink writes
 * them to a file or, without one, only counts them (the budget counts
 * each reduction before choosing one).  A core's events go on their
 * unit's thread, or on an overflow lane when they would overlap its
 * earlier ones; with merge, adjacent events of one unit become one. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/out/chrome_internal.h"
#include "emu/rfile.h"
#include "firmware/isa.h"

/* Two events one cycle (~1 ns at 940 MHz) apart or closer count as
 * adjacent: the engine's own rounding, not a real gap. */
#define ADJ_S 1e-9

int chrome_sink_tid(int core, int unit, int lane)
{
    int base = core * UNIT_COUNT + unit;
    return lane == 0 ? base : CHROME_LANE_TID0 + base * CHROME_LANES + lane;
}

/* The first lane of the unit whose last event ended by t0 (the last lane
 * when all are busy: it may then overlap). */
static int pick_lane(chrome_sink *s, int core, int unit, double t0, double t1)
{
    int k = 0;
    while (k < CHROME_LANES - 1 && s->lane_end[unit][k] > t0 + ADJ_S)
        k++;
    if (t1 > s->lane_end[unit][k])
        s->lane_end[unit][k] = t1;
    if (s->lanes)
        s->lanes[core * UNIT_COUNT + unit] |= (uint8_t)(1u << k);
    return k;
}

/* A JSON string: UTF-8 characters as they are (names are UTF-8: the trace
 * reader checks; escaping each byte as its own code point would make 'ü'
 * read back as 'Ã¼'), control characters escaped, and a byte that is not
 * part of a character as U+FFFD. */
void chrome_sink_str(FILE *f, const char *s)
{
    fputc('"', f);
    while (*s) {
        unsigned char c = (unsigned char)*s;
        size_t n = rfile_utf8_len((const unsigned char *)s);
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20 || c == 0x7f)
            fprintf(f, "\\u%04x", c);
        else if (n == 0)
            fputs("\\ufffd", f);
        else {
            fwrite(s, 1, n, f);
            s += n;
            continue;
        }
        s++;
    }
    fputc('"', f);
}

/* "ts" and "dur" in microseconds to 0.1 ns: both from the rounded ends,
 * so an event that starts where another ends does not overlap it by a
 * rounding step (which would break the nesting of a thread). */
static void put_span(FILE *f, double t0_s, double t1_s)
{
    double a = nearbyint(t0_s * 1e10) / 1e4, b = nearbyint(t1_s * 1e10) / 1e4;
    fprintf(f, ",\"ts\":%.4f,\"dur\":%.4f", a, b > a ? b - a : 0.0);
}

const char *chrome_sink_layer(const emu_result *r, int32_t layer)
{
    if (layer >= 0 && layer < r->n_layers && r->layer_names)
        return r->layer_names[layer];
    return NULL;
}

const char *chrome_sink_unit(int u)
{
    static const char *const l[UNIT_COUNT] = {"critical path", "MXU", "vector",
                                              "DMA", "ICI"};
    return (unsigned)u < UNIT_COUNT ? l[u] : "?";
}

static void sep(chrome_sink *s)
{
    if (!s->first)
        fputs(",\n", s->f);
    s->first = 0;
}

/* Counts one X event on unit; whether it is also to be written (a chrome_sink
 * without a file only counts). */
int chrome_sink_count(chrome_sink *s, int unit)
{
    s->n++;
    s->nu[unit]++;
    return s->f != NULL;
}

/* One X event up to the opening brace of its args. */
void chrome_sink_x(chrome_sink *s, const char *name, const char *cat, int pid,
           int tid, double t0, double t1)
{
    sep(s);
    fputs("{\"ph\":\"X\",\"name\":", s->f);
    chrome_sink_str(s->f, name);
    fputs(",\"cat\":", s->f);
    chrome_sink_str(s->f, cat);
    fprintf(s->f, ",\"pid\":%d,\"tid\":%d", pid, tid);
    put_span(s->f, t0, t1);
    fputs(",\"args\":{", s->f);
}

/* A binned event's exact seconds of each category present in it. */
void chrome_sink_cat_seconds(FILE *f, const double *cat_s)
{
    for (int c = 0; c < CAT_COUNT; c++)
        if (cat_s[c] > 0)
            fprintf(f, ",\"%s_s\":%.9g", emu_cat_name((emu_cat)c), cat_s[c]);
}

/* Bytes moved and FLOPs done, when there were any. */
void chrome_sink_work(FILE *f, double bytes, double flops)
{
    if (bytes != 0)
        fprintf(f, ",\"bytes\":%.17g", bytes);
    if (flops != 0)
        fprintf(f, ",\"flops\":%.17g", flops);
}

/* The category with the most seconds (the first of equals). */
int chrome_sink_dominant(const double *cat_s)
{
    int dom = 0;
    for (int c = 0; c < CAT_COUNT; c++)
        if (cat_s[c] > cat_s[dom])
            dom = c;
    return dom;
}

static void emit(chrome_sink *s, const emu_core_result *pc, const emu_event *e,
                 int coarse)
{
    if (!chrome_sink_count(s, e->unit))
        return;
    const char *ln = coarse ? NULL : chrome_sink_layer(s->r, e->layer);
    const char *cat = emu_cat_name((emu_cat)e->cat);
    int lane = pick_lane(s, pc->core, e->unit, e->t0, e->t1);
    chrome_sink_x(s, e->unit == UNIT_CORE || !ln ? cat : ln, cat, pc->chip,
          chrome_sink_tid(pc->core, e->unit, lane), e->t0, e->t1);
    if (coarse)
        fputs("\"layer\":\"(several: merged to fit the event budget)\"", s->f);
    else {
        fputs("\"layer\":", s->f);
        chrome_sink_str(s->f, ln ? ln : "");
        fputs(",\"phase\":", s->f);
        chrome_sink_str(s->f, emu_phase_name((emu_phase)e->phase));
        /* the mnemonic `tpuemu lower` prints, not the enum's number */
        fputs(",\"opcode\":", s->f);
        chrome_sink_str(s->f, fw_op_name((fw_op)e->opcode));
    }
    fprintf(s->f, ",\"count\":%lu", (unsigned long)e->count);
    chrome_sink_work(s->f, e->bytes, e->flops);
    fputs("}}", s->f);
}

static int mergeable(const emu_event *a, const emu_event *b, int coarse)
{
    if (a->unit != b->unit || a->cat != b->cat)
        return 0;
    if (!coarse && (a->layer != b->layer || a->phase != b->phase ||
                    a->opcode != b->opcode))
        return 0;
    return b->t0 <= a->t1 + ADJ_S && b->t0 >= a->t0;
}

/* Writes (or counts) one core's events.  merge: 0 none, 1 same layer,
 * 2 same category only.  skip: a bit per unit not written here.
 * units_seen gets a bit per written unit that produced an event. */
void chrome_sink_core(chrome_sink *s, const emu_core_result *pc, int merge,
               unsigned skip, unsigned *units_seen)
{
    emu_event pend[UNIT_COUNT];
    int have[UNIT_COUNT] = {0};
    for (int u = 0; u < UNIT_COUNT; u++)
        for (int k = 0; k < CHROME_LANES; k++)
            s->lane_end[u][k] = -1;
    for (size_t i = 0; i < pc->n_events; i++) {
        const emu_event *e = &pc->events[i];
        if (e->unit >= UNIT_COUNT || (skip >> e->unit & 1))
            continue;
        *units_seen |= 1u << e->unit;
        if (!merge) {
            emit(s, pc, e, 0);
            continue;
        }
        emu_event *p = &pend[e->unit];
        if (have[e->unit] && mergeable(p, e, merge == 2)) {
            p->t1 = fmax(p->t1, e->t1);
            p->count += e->count;
            p->bytes += e->bytes;
            p->flops += e->flops;
            continue;
        }
        if (have[e->unit])
            emit(s, pc, p, merge == 2);
        *p = *e;
        have[e->unit] = 1;
    }
    for (int u = 0; u < UNIT_COUNT; u++)
        if (have[u])
            emit(s, pc, &pend[u], merge == 2);
}

/* A name record and a sort-index record for a process (has_tid 0) or a
 * thread. */
void chrome_sink_meta(chrome_sink *s, const char *what, int pid, int tid,
                      int has_tid, const char *name, int sort)
{
    sep(s);
    fprintf(s->f, "{\"ph\":\"M\",\"name\":\"%s\",\"pid\":%d,", what, pid);
    if (has_tid)
        fprintf(s->f, "\"tid\":%d,", tid);
    fputs("\"args\":{\"name\":", s->f);
    chrome_sink_str(s->f, name);
    fputs("}}", s->f);
    sep(s);
    fprintf(s->f, "{\"ph\":\"M\",\"name\":\"%s_sort_index\",\"pid\":%d,",
            has_tid ? "thread" : "process", pid);
    if (has_tid)
        fprintf(s->f, "\"tid\":%d,", tid);
    fprintf(s->f, "\"args\":{\"sort_index\":%d}}", sort);
}
