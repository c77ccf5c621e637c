/* chrome_trace — a result's recorded timeline in the Trace Event Format
 * (chrome_trace.h has the layout): every core given a timeline, the
 * reduction to the event budget (emu/out/chrome_budget.c), then the
 * document, streamed into an outfile: otherData, process and thread
 * names, the events (emu/out/chrome_sink.c, chrome_bin.c). */
#include "emu/out/chrome_trace.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/out/chrome_internal.h"

void chrome_trace_tid(int tid, int *core, int *unit, int *lane)
{
    int base = tid, k = 0;
    if (tid >= CHROME_LANE_TID0) {
        base = (tid - CHROME_LANE_TID0) / CHROME_LANES;
        k = (tid - CHROME_LANE_TID0) % CHROME_LANES;
    }
    *core = base / UNIT_COUNT;
    *unit = base % UNIT_COUNT;
    *lane = k;
}

tpu_status chrome_trace_write(const emu_result *r, const char *path,
                              tpu_error *err)
{
    return chrome_trace_write_capped(r, path, 0, NULL, err);
}

tpu_status chrome_trace_write_capped(const emu_result *r, const char *path,
                                     size_t max_events, size_t *written,
                                     tpu_error *err)
{
    if (!path)
        return tpu_fail(err, TPU_ERR_INPUT, "chrome trace: no output path");
    outfile o;
    tpu_status st = outfile_open(&o, path, err);
    if (st == TPU_OK)
        st = chrome_trace_write_to(r, &o, max_events, written, err);
    if (st == TPU_OK)
        st = outfile_commit(&o, err);
    outfile_discard(&o);
    return st;
}

static void ct_free(chrome_doc *d)
{
    free(d->cores);
    free(d->from);
    free(d->synth);
    free(d->rep);
    free(d->seen);
    free(d->lanes);
    free(d->binmask);
    free(d->ucount);
    chrome_memo_free(&d->memo);
}

/* The first core with a recorded timeline and core c's breakdown, -1
 * when none. */
static int find_twin(const emu_result *r, int c)
{
    const emu_core_result *pc = &r->per_core[c];
    for (int q = 0; q < r->cores; q++) {
        const emu_core_result *pq = &r->per_core[q];
        if (!pq->n_events || pq->step_time_s != pc->step_time_s)
            continue;
        int same = 1;
        for (int k = 0; k < CAT_COUNT; k++)
            same &= fabs(pq->breakdown_s[k] - pc->breakdown_s[k]) <=
                    1e-12 * pc->step_time_s;
        if (same)
            return q;
    }
    return -1;
}

/* A core's breakdown as consecutive category spans (order not known). */
static size_t breakdown_spans(const emu_core_result *pc, emu_event *e)
{
    size_t n = 0;
    double t = 0;
    for (int k = 0; k < CAT_COUNT; k++)
        if (pc->breakdown_s[k] > 0) {
            e[n] = (emu_event){t, t + pc->breakdown_s[k], UNIT_CORE,
                               (uint8_t)k, PHASE_FWD, 0, -1, 1, 0, 0};
            t += pc->breakdown_s[k];
            n++;
        }
    return n;
}

/* The engine may simulate one core of a group of identical replicas and
 * record only its timeline.  A core without events takes the critical
 * path of the first core that has one and the same breakdown (stated in
 * its thread name and in otherData); with no such twin it gets its
 * breakdown as consecutive category spans, marked "order not recorded".
 * A result with no timeline at all is refused. */
static tpu_status ct_timelines(chrome_doc *d, const emu_result *r,
                               const char *path, tpu_error *err)
{
    int any = 0;
    d->cores = malloc(sizeof *d->cores * r->cores);
    d->from = malloc(sizeof(int) * r->cores);
    d->synth = calloc((size_t)r->cores * CAT_COUNT, sizeof *d->synth);
    if (!d->cores || !d->from || !d->synth)
        return tpu_fail(err, TPU_ERR_SYSTEM, "%s: out of memory", path);
    for (int c = 0; c < r->cores; c++) {
        const emu_core_result *pc = &r->per_core[c];
        d->cores[c] = *pc;
        d->from[c] = c;
        if (pc->n_events && !pc->events)
            return tpu_fail(err, TPU_ERR_INPUT, "%s: core %d: events missing",
                            path, c);
        any |= pc->n_events > 0;
    }
    if (!any)
        return tpu_fail(err, TPU_ERR_INPUT,
                        "%s: the result has no recorded timeline (the step "
                        "must be simulated with the timeline recorded)",
                        path);
    for (int c = 0; c < r->cores; c++) {
        const emu_core_result *pc = &r->per_core[c];
        if (pc->n_events || !(pc->step_time_s > 0))
            continue;
        int twin = find_twin(r, c);
        if (twin >= 0) {
            d->cores[c].events = r->per_core[twin].events;
            d->cores[c].n_events = r->per_core[twin].n_events;
            d->from[c] = twin;
            d->ncopied++;
        } else {
            emu_event *e = &d->synth[(size_t)c * CAT_COUNT];
            d->cores[c].events = e;
            d->cores[c].n_events = breakdown_spans(pc, e);
            d->from[c] = -1;
            d->nsynth++;
        }
    }
    d->r = *r;
    d->r.per_core = d->cores;
    return TPU_OK;
}

/* Ranges of reduced cores with their representative. */
static void put_reduced(FILE *f, const chrome_doc *d)
{
    const int *rep = d->rep;
    int n = d->r.cores, first = 1;
    for (int c = 0; c < n;) {
        if (rep[c] == c) {
            c++;
            continue;
        }
        int e = c;
        while (e + 1 < n && rep[e + 1] == rep[c])
            e++;
        fprintf(f, "%s{\"cores\":\"%d-%d\",\"detail_in_core\":%d}",
                first ? "" : ",", c, e, rep[c]);
        first = 0;
        c = e + 1;
    }
}

/* Which threads of the detailed cores were binned, and from how many
 * merged events. */
static void put_binned_threads(FILE *f, const chrome_doc *d)
{
    int first = 1;
    for (int c = 0; c < d->r.cores; c++)
        for (int k = 0; k < UNIT_COUNT; k++) {
            if (!(d->binmask[c] >> k & 1))
                continue;
            fprintf(f, "%s{\"core\":%d,\"unit\":\"%s\",\"merged_events\":%lu}",
                    first ? "" : ",", c, chrome_sink_unit(k),
                    (unsigned long)d->ucount[(size_t)c * UNIT_COUNT + k]);
            first = 0;
        }
}

/* The document's head: what was written and what the budget reduced. */
static void put_other_data(FILE *f, const chrome_doc *d)
{
    const emu_result *r = &d->r;
    fputs("{\"displayTimeUnit\":\"ms\",\n\"otherData\":{", f);
    fputs("\"format\":\"tpuemu-chrome-trace/1\",\"trace\":", f);
    chrome_sink_str(f, r->trace);
    fputs(",\"system\":", f);
    chrome_sink_str(f, r->system);
    fprintf(f, ",\"cores\":%d,\"chips\":%d,\"step_time_s\":%.17g", r->cores,
            r->chips, r->step_time_s);
    /* A --functional run of several steps records the first one: every
     * step runs the same firmware, so every step times the same. */
    int steps = r->has_values && r->n_losses > 1 ? r->n_losses : 1;
    fprintf(f, ",\"steps\":%d,\"timeline\":", steps);
    chrome_sink_str(f, steps > 1
                           ? "one step (the first) of the run's steps; every "
                             "step runs the same firmware and times the same"
                           : "one step");
    fprintf(f, ",\"event_budget\":%lu,\"events_recorded\":%lu,"
               "\"events_written\":%lu,\"over_budget\":%s,\"detail\":",
            (unsigned long)d->max_events, (unsigned long)d->total,
            (unsigned long)d->count,
            d->count > d->max_events ? "true" : "false");
    chrome_sink_str(f, chrome_budget_level_text(d->level));
    if (d->level >= LV_GROUP) {
        fprintf(f, ",\"core_groups\":%d,\"reduced_cores\":[", d->ngroups);
        put_reduced(f, d);
        fputs("]", f);
        if (d->level >= LV_BINNED)
            fprintf(f, ",\"bins_per_reduced_core\":%d", d->nbins);
    }
    if (d->level >= LV_TRACKS) {
        fprintf(f, ",\"bins_per_binned_thread\":%d,\"binned_threads\":[",
                d->tbins);
        put_binned_threads(f, d);
        fputs("]", f);
    }
    fprintf(f, ",\"cores_timeline_copied\":%d,\"cores_breakdown_only\":%d",
            d->ncopied, d->nsynth);
    fputs("},\n\"traceEvents\":[\n", f);
}

/* One process per chip, named by its place in the torus. */
static void put_process_names(chrome_sink *s, const chrome_doc *d)
{
    const emu_result *r = &d->r;
    char name[160];
    for (int c = 0; c < r->cores; c++) {
        const emu_core_result *pc = &r->per_core[c];
        if (c > 0 && r->per_core[c - 1].chip == pc->chip)
            continue;
        if (r->dim_x > 0)
            snprintf(name, sizeof name, "chip %d (x=%d, y=%d)", pc->chip,
                     pc->chip % r->dim_x, pc->chip / r->dim_x);
        else
            snprintf(name, sizeof name, "chip %d", pc->chip);
        chrome_sink_meta(s, "process_name", pc->chip, 0, 0, name, pc->chip);
    }
}

/* A core's thread for unit u, saying where its detail is when it is not
 * its own. */
static void thread_name(const chrome_doc *d, int c, int u, char *name, size_t n)
{
    int from = d->from[c];
    if (u == UNIT_CORE && from < 0)
        snprintf(name, n,
                 "core %d: breakdown only (timeline not recorded, "
                 "order of categories not known)", c);
    else if (u == UNIT_CORE && from != c)
        snprintf(name, n,
                 "core %d: critical path (not recorded: copied from "
                 "core %d, same breakdown)", c, from);
    else if (u == UNIT_CORE && d->level >= LV_GROUP && d->rep[c] != c)
        snprintf(name, n,
                 "core %d: critical path (units: see core %d, "
                 "identical)", c, d->rep[c]);
    else if (d->level >= LV_TRACKS && (d->binmask[c] >> u & 1))
        snprintf(name, n, "core %d: %s (binned: %d equal "
                 "time bins to fit the event budget)", c,
                 chrome_sink_unit(u), d->tbins);
    else
        snprintf(name, n, "core %d: %s", c, chrome_sink_unit(u));
}

/* Every written thread (the critical path always), its overflow lanes
 * sorted right after it. */
static void put_thread_names(chrome_sink *s, const chrome_doc *d)
{
    char name[160];
    for (int c = 0; c < d->r.cores; c++) {
        int chip = d->r.per_core[c].chip;
        for (int u = 0; u < UNIT_COUNT; u++) {
            if (u != UNIT_CORE && !(d->seen[c] >> u & 1))
                continue;
            thread_name(d, c, u, name, sizeof name);
            chrome_sink_meta(s, "thread_name", chip, c * UNIT_COUNT + u, 1,
                             name, c * UNIT_COUNT + u);
            for (int k = 1; k < CHROME_LANES; k++) {
                if (!(d->lanes[c * UNIT_COUNT + u] >> k & 1))
                    continue;
                snprintf(name, sizeof name, "core %d: %s (overlapping, %d)",
                         c, chrome_sink_unit(u), k + 1);
                chrome_sink_meta(s, "thread_name", chip,
                                 chrome_sink_tid(c, u, k), 1, name,
                                 c * UNIT_COUNT + u);
            }
        }
    }
}

/* Streamed into the outfile's temporary (renamed into place only when
 * complete): a buffer of the whole text could reach hundreds of MB. */
static tpu_status ct_write(chrome_doc *d, FILE *f, const char *path,
                           size_t *written, tpu_error *err)
{
    chrome_sink s = {.f = f, .r = &d->r, .first = 1, .from = d->from,
              .lanes = d->lanes, .memo = &d->memo};
    put_other_data(f, d);
    memset(d->seen, 0, sizeof(unsigned) * d->r.cores);
    put_process_names(&s, d);
    if (!d->oom)
        d->oom = !chrome_budget_events(d, &s);
    put_thread_names(&s, d);
    fputs("\n]}\n", f);
    if (d->oom)
        return tpu_fail(err, TPU_ERR_SYSTEM, "%s: out of memory", path);
    if (fflush(f) != 0 || ferror(f))
        return tpu_fail(err, TPU_ERR_INPUT, "%s: cannot write: %s", path,
                        strerror(errno));
    if (written)
        *written = s.n;
    return TPU_OK;
}

/* The steps: every core given a timeline, the full count, the reduction
 * to the budget, then the document. */
tpu_status chrome_trace_write_to(const emu_result *r, outfile *o,
                                 size_t max_events, size_t *written,
                                 tpu_error *err)
{
    if (!o || !o->f)
        return tpu_fail(err, TPU_ERR_INPUT, "chrome trace: no output file");
    const char *path = o->name;
    if (!r || !r->per_core || r->cores <= 0)
        return tpu_fail(err, TPU_ERR_INPUT, "%s: no per-core results", path);
    chrome_doc d;
    memset(&d, 0, sizeof d);
    tpu_status st = ct_timelines(&d, r, path, err);
    if (st) {
        ct_free(&d);
        return st;
    }
    int n = r->cores;
    d.max_events = max_events ? max_events : CHROME_TRACE_MAX_EVENTS;
    if (chrome_budget_count_full(&d)) {
        d.rep = malloc(sizeof(int) * n);
        d.seen = calloc((size_t)n, sizeof(unsigned));
        d.lanes = calloc((size_t)n * UNIT_COUNT, 1);
        d.binmask = calloc((size_t)n, 1);
        d.ucount = calloc((size_t)n * UNIT_COUNT, sizeof(size_t));
    }
    if (!d.rep || !d.seen || !d.lanes || !d.binmask || !d.ucount ||
        chrome_budget_reduce(&d) < 0) {
        ct_free(&d);
        return tpu_fail(err, TPU_ERR_SYSTEM, "%s: out of memory", path);
    }
    st = ct_write(&d, o->f, path, written, err);
    ct_free(&d);
    return st;
}
