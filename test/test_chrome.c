/* Chrome trace: valid JSON (cJSON parses it back), the expected events and
 * threads, each core's critical path covers its step, and the event cap
 * reduces detail without ever dropping a core. */
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/out/chrome_trace.h"
#include "test/harness.h"
#include "emu/graph.h"
#include "emu/result.h"
#include "emu/sim.h"

static cJSON *load_json(const char *path)
{
    char *buf = th_slurp(path, NULL);
    if (!buf)
        return NULL;
    cJSON *j = cJSON_Parse(buf);
    free(buf);
    return j;
}

/* Per core: summed duration of its critical-path events, the earliest
 * start and latest end (us), and X events on other units. */
typedef struct {
    double path_us, first_us, last_us;
    int path_events, unit_events;
} core_cov;

static int check_cover(th_ctx *t, cJSON *doc, const emu_result *r,
                       int *unit_cores)
{
    cJSON *ev = cJSON_GetObjectItem(doc, "traceEvents");
    if (!TH_CHECK(t, cJSON_IsArray(ev)))
        return 0;
    core_cov *cov = calloc((size_t)r->cores, sizeof *cov);
    for (int c = 0; c < r->cores; c++)
        cov[c].first_us = 1e300;
    int bad = 0;
    cJSON *e;
    cJSON_ArrayForEach(e, ev)
    {
        const char *ph = cJSON_GetStringValue(cJSON_GetObjectItem(e, "ph"));
        if (!ph || strcmp(ph, "X") != 0)
            continue;
        int tid = cJSON_GetObjectItem(e, "tid")->valueint;
        int pid = cJSON_GetObjectItem(e, "pid")->valueint;
        int core, unit, lane;
        chrome_trace_tid(tid, &core, &unit, &lane);
        double ts = cJSON_GetObjectItem(e, "ts")->valuedouble;
        double dur = cJSON_GetObjectItem(e, "dur")->valuedouble;
        if (core < 0 || core >= r->cores || pid != r->per_core[core].chip ||
            !cJSON_GetObjectItem(e, "cat") || !cJSON_GetObjectItem(e, "args") ||
            dur < 0) {
            bad++;
            continue;
        }
        if (unit == UNIT_CORE) {
            cov[core].path_us += dur;
            cov[core].first_us = fmin(cov[core].first_us, ts);
            cov[core].last_us = fmax(cov[core].last_us, ts + dur);
            cov[core].path_events++;
        } else
            cov[core].unit_events++;
    }
    TH_CHECKF(t, bad == 0, "%d malformed events", bad);
    int ok = 1;
    *unit_cores = 0;
    for (int c = 0; c < r->cores; c++) {
        double step = r->per_core[c].step_time_s * 1e6;
        int good = cov[c].path_events > 0 && fabs(cov[c].path_us - step) < 1e-3 * step &&
                   cov[c].first_us < 1e-3 && fabs(cov[c].last_us - step) < 1e-3 * step;
        if (!good && ok)
            TH_FAIL(t, "core %d: critical path %g us in %d events over [%g, %g], step %g us",
                    c, cov[c].path_us, cov[c].path_events, cov[c].first_us,
                    cov[c].last_us, step);
        ok &= good;
        *unit_cores += cov[c].unit_events > 0;
    }
    free(cov);
    return ok;
}

typedef struct {
    int tid, pid;
    double ts, end;
} span;

static int by_track(const void *a, const void *b)
{
    const span *x = a, *y = b;
    if (x->pid != y->pid)
        return x->pid < y->pid ? -1 : 1;
    if (x->tid != y->tid)
        return x->tid < y->tid ? -1 : 1;
    return x->ts < y->ts ? -1 : x->ts > y->ts;
}

static void utf8_nesting_cases(th_ctx *t)
{
    char path[512], out[512];
    th_cmd_result c;
    th_case(t, "Chrome trace: a UTF-8 layer name reads back as itself, and "
               "events on one track nest or follow, never overlap partly");
    snprintf(path, sizeof path, "%s/chrome-uni.json", th_tmpdir());
    snprintf(out, sizeof out, "%s/chrome-uni-trace.json", th_tmpdir());
    th_put(path, "{\"format\": \"tpuemu-trace/1\", \"name\": \"tiny \xc3\xbc\","
              " \"system\": \"v3-8\", \"run\": {\"mode\": \"train\", "
              "\"global_batch\": 8}, \"graph\": {\"inputs\": [{\"name\": "
              "\"image\", \"shape\": [32, 32, 3]}], \"layers\": [{\"name\": "
              "\"conv_\xc3\xbc\xe9\x9b\xaa\", \"op\": \"conv\", \"in\": "
              "\"image\", \"filters\": 16, \"kernel\": [3, 3]}, {\"name\": "
              "\"relu\", \"op\": \"relu\", \"in\": \"conv_\xc3\xbc\xe9\x9b"
              "\xaa\"}, {\"name\": \"loss\", \"op\": \"loss\", \"kind\": "
              "\"l2\", \"in\": \"relu\"}]}}\n");
    th_run(&c, "%s run %s --quiet --chrome-trace %s", th_bin(), path, out);
    char *text = th_slurp(out, NULL);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    free(text);
    const cJSON *ev = cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
    int named = 0, n = 0, bad = 0;
    span *sp = calloc((size_t)cJSON_GetArraySize(ev) + 1, sizeof *sp);
    const cJSON *e;
    cJSON_ArrayForEach(e, ev)
    {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
        if (cJSON_IsString(nm) &&
            strcmp(nm->valuestring, "conv_\xc3\xbc\xe9\x9b\xaa") == 0)
            named++;
        const cJSON *ph = cJSON_GetObjectItemCaseSensitive(e, "ph");
        if (!sp || !cJSON_IsString(ph) || strcmp(ph->valuestring, "X"))
            continue;
        sp[n].pid = cJSON_GetObjectItemCaseSensitive(e, "pid")->valueint;
        sp[n].tid = cJSON_GetObjectItemCaseSensitive(e, "tid")->valueint;
        sp[n].ts = cJSON_GetObjectItemCaseSensitive(e, "ts")->valuedouble;
        sp[n].end = sp[n].ts +
                    cJSON_GetObjectItemCaseSensitive(e, "dur")->valuedouble;
        n++;
    }
    if (sp)
        qsort(sp, (size_t)n, sizeof *sp, by_track);
    for (int i = 0; i + 1 < n; i++)
        if (sp[i].pid == sp[i + 1].pid && sp[i].tid == sp[i + 1].tid &&
            sp[i + 1].ts < sp[i].end - 1e-7 && sp[i + 1].end > sp[i].end + 1e-7)
            bad++;
    TH_CHECKF(t, c.status == 0 && root && named > 0 && n > 10 && bad == 0,
              "exit %d, %d events named by the UTF-8 name, %d spans, %d "
              "partial overlaps: %s",
              c.status, named, n, bad, c.err);
    free(sp);
    cJSON_Delete(root);
}

void th_suite_chrome(th_ctx *t)
{
    char path[512];
    tpu_error err = {0};
    emu_result r;
    size_t written = 0;
    int unit_cores = 0;

    th_case(t, "small run: valid JSON, every event, names, args");
    tsynth_result(&r, 8, 2, 2, 5, 0);
    size_t total = 0;
    for (int c = 0; c < r.cores; c++)
        total += r.per_core[c].n_events;
    snprintf(path, sizeof path, "%s/small.json", th_tmpdir());
    tpu_status st = chrome_trace_write_capped(&r, path, 0, &written, &err);
    TH_CHECKF(t, st == TPU_OK, "%s", err.msg);
    TH_CHECKF(t, written == total, "written %zu of %zu", written, total);
    cJSON *doc = load_json(path);
    if (TH_CHECK(t, doc != NULL)) {
        check_cover(t, doc, &r, &unit_cores);
        TH_CHECK(t, unit_cores == 8);
        int procs = 0, threads = 0, conv3_mxu = 0;
        cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItem(doc, "traceEvents"))
        {
            const char *ph = cJSON_GetStringValue(cJSON_GetObjectItem(e, "ph"));
            const char *nm = cJSON_GetStringValue(cJSON_GetObjectItem(e, "name"));
            if (ph && nm && !strcmp(ph, "M") && !strcmp(nm, "process_name"))
                procs++;
            if (ph && nm && !strcmp(ph, "M") && !strcmp(nm, "thread_name"))
                threads++;
            if (ph && nm && !strcmp(ph, "X") && !strcmp(nm, "conv3") &&
                cJSON_GetObjectItem(e, "tid")->valueint == 2 * UNIT_COUNT + UNIT_MXU) {
                cJSON *a = cJSON_GetObjectItem(e, "args");
                conv3_mxu += cJSON_GetObjectItem(a, "flops")->valuedouble == 1e9 &&
                             cJSON_GetObjectItem(a, "count")->valueint == 4 &&
                             !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(a, "layer")), "conv3");
            }
        }
        TH_CHECK(t, procs == 4);        /* 4 chips */
        TH_CHECK(t, threads == 8 * 5);  /* core, mxu, vector, dma, ici per core */
        TH_CHECK(t, conv3_mxu == 1);
        cJSON *od = cJSON_GetObjectItem(doc, "otherData");
        TH_CHECK(t, cJSON_IsFalse(cJSON_GetObjectItem(od, "over_budget")));
        cJSON_Delete(doc);
    }
    emu_result_free(&r);

    th_case(t, "a real run's events nest on every thread (overlapping DMAs "
               "go to overflow lanes, each named)");
    {
        /* RetinaNet 1280: 5680 DMA events overlapped an earlier one on
         * their thread before the lanes (Perfetto draws those wrong). */
        char tp[600];
        snprintf(tp, sizeof tp, "%s/nest.json", th_tmpdir());
        th_cmd_result c;
        th_run(&c, "%s run traces/reference/retinanet-1280-v3-8.json "
                   "--chrome-trace %s --quiet", th_bin(), tp);
        cJSON *nd = c.status == 0 ? load_json(tp) : NULL;
        if (TH_CHECKF(t, nd != NULL, "status %d: %s", c.status, c.err)) {
            /* Events of one thread come in start order from the writer;
             * keep each thread's open ends as a stack. */
            enum { MAXT = 4096, DEPTH = 64 };
            static int tids[MAXT], depth[MAXT];
            static double ends[MAXT][DEPTH];
            int nt = 0, bad = 0, lanes = 0, named = 0;
            cJSON *e;
            cJSON_ArrayForEach(e, cJSON_GetObjectItem(nd, "traceEvents"))
            {
                const char *ph = cJSON_GetStringValue(cJSON_GetObjectItem(e, "ph"));
                int tid = cJSON_GetObjectItem(e, "tid")
                              ? cJSON_GetObjectItem(e, "tid")->valueint
                              : -1;
                if (ph && !strcmp(ph, "M") && tid >= CHROME_LANE_TID0)
                    named++;
                if (!ph || strcmp(ph, "X") != 0)
                    continue;
                int k = 0;
                while (k < nt && tids[k] != tid)
                    k++;
                if (k == nt && nt < MAXT) {
                    tids[nt] = tid;
                    depth[nt++] = 0;
                }
                if (k >= MAXT)
                    continue;
                lanes += tid >= CHROME_LANE_TID0;
                double ts = cJSON_GetObjectItem(e, "ts")->valuedouble;
                double te = ts + cJSON_GetObjectItem(e, "dur")->valuedouble;
                while (depth[k] > 0 && ends[k][depth[k] - 1] <= ts + 1e-3)
                    depth[k]--;
                if (depth[k] > 0 && te > ends[k][depth[k] - 1] + 1e-3)
                    bad++;
                if (depth[k] < DEPTH)
                    ends[k][depth[k]++] = te;
            }
            TH_CHECKF(t, bad == 0 && lanes > 0 && named > 0,
                      "%d events overlap an earlier one on their thread; %d "
                      "on overflow lanes, %d lane names", bad, lanes, named);
            cJSON_Delete(nd);
        }
    }

    th_case(t, "cap: merge, then representative cores, no core dropped");
    tsynth_result(&r, 64, 8, 4, 20, 1); /* all identical */
    /* Make merging possible: consecutive MXU spans of one layer. */
    total = 0;
    for (int c = 0; c < r.cores; c++)
        total += r.per_core[c].n_events;
    snprintf(path, sizeof path, "%s/capped.json", th_tmpdir());
    st = chrome_trace_write_capped(&r, path, total / 4, &written, &err);
    TH_CHECKF(t, st == TPU_OK, "%s", err.msg);
    TH_CHECKF(t, written <= total / 4, "written %zu budget %zu", written, total / 4);
    doc = load_json(path);
    if (TH_CHECK(t, doc != NULL)) {
        TH_CHECK(t, check_cover(t, doc, &r, &unit_cores));
        TH_CHECKF(t, unit_cores == 1, "cores with unit detail: %d", unit_cores);
        cJSON *od = cJSON_GetObjectItem(doc, "otherData");
        TH_CHECK(t, cJSON_GetObjectItem(od, "core_groups")->valueint == 1);
        cJSON *rc = cJSON_GetArrayItem(cJSON_GetObjectItem(od, "reduced_cores"), 0);
        TH_CHECK(t, rc && !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(rc, "cores")), "1-63"));
        cJSON_Delete(doc);
    }

    th_case(t, "a budget below one event per core still keeps every core");
    st = chrome_trace_write_capped(&r, path, 10, &written, &err);
    TH_CHECKF(t, st == TPU_OK, "%s", err.msg);
    doc = load_json(path);
    if (TH_CHECK(t, doc != NULL)) {
        TH_CHECK(t, check_cover(t, doc, &r, &unit_cores));
        TH_CHECK(t, cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "otherData"),
                                                     "over_budget")));
        cJSON_Delete(doc);
    }
    emu_result_free(&r);

    th_case(t, "adjacent events of one layer merge with summed counts");
    tsynth_result(&r, 2, 1, 1, 1, 1);
    /* Split core 0's first MXU span into two touching halves. */
    emu_core_result *pc = &r.per_core[0];
    emu_event *ne = realloc(pc->events, (pc->n_events + 1) * sizeof *ne);
    pc->events = ne;
    emu_event half = ne[1];
    double mid = 0.5 * (half.t0 + half.t1);
    ne[1].t1 = mid;
    half.t0 = mid;
    ne[pc->n_events++] = half;
    total = pc->n_events + r.per_core[1].n_events;
    st = chrome_trace_write_capped(&r, path, total - 1, &written, &err);
    TH_CHECKF(t, st == TPU_OK && written == total - 1, "written %zu total %zu", written, total);
    doc = load_json(path);
    if (TH_CHECK(t, doc != NULL)) {
        int found = 0;
        cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItem(doc, "traceEvents"))
        {
            cJSON *tid = cJSON_GetObjectItem(e, "tid");
            const char *ph = cJSON_GetStringValue(cJSON_GetObjectItem(e, "ph"));
            if (ph && !strcmp(ph, "X") && tid->valueint == UNIT_MXU)
                found += cJSON_GetObjectItem(cJSON_GetObjectItem(e, "args"), "count")->valueint == 8;
        }
        TH_CHECK(t, found == 1);
        cJSON_Delete(doc);
    }
    emu_result_free(&r);

    th_case(t, "cores the engine did not record: copied from a twin or breakdown only");
    tsynth_result(&r, 4, 2, 1, 3, 1); /* identical cores */
    free(r.per_core[1].events);
    r.per_core[1].events = NULL;
    r.per_core[1].n_events = 0;
    free(r.per_core[3].events);
    r.per_core[3].events = NULL;
    r.per_core[3].n_events = 0;
    r.per_core[3].breakdown_s[CAT_MXU] -= 1e-4; /* no twin any more */
    r.per_core[3].breakdown_s[CAT_IDLE] += 1e-4;
    snprintf(path, sizeof path, "%s/copied.json", th_tmpdir());
    st = chrome_trace_write(&r, path, &err);
    TH_CHECKF(t, st == TPU_OK, "%s", err.msg);
    doc = load_json(path);
    if (TH_CHECK(t, doc != NULL)) {
        TH_CHECK(t, check_cover(t, doc, &r, &unit_cores));
        TH_CHECK(t, unit_cores == 2); /* only cores 0 and 2 have unit rows */
        cJSON *od = cJSON_GetObjectItem(doc, "otherData");
        TH_CHECK(t, cJSON_GetObjectItem(od, "cores_timeline_copied")->valueint == 1);
        TH_CHECK(t, cJSON_GetObjectItem(od, "cores_breakdown_only")->valueint == 1);
        cJSON_Delete(doc);
    }
    emu_result_free(&r);

    th_case(t, "a result without any timeline is refused, nothing written");
    tsynth_result(&r, 2, 1, 1, 1, 1);
    for (int c = 0; c < 2; c++) {
        free(r.per_core[c].events);
        r.per_core[c].events = NULL;
        r.per_core[c].n_events = 0;
    }
    snprintf(path, sizeof path, "%s/none.json", th_tmpdir());
    st = chrome_trace_write(&r, path, &err);
    TH_CHECK(t, st == TPU_ERR_INPUT && strstr(err.msg, "no recorded timeline"));
    FILE *f = fopen(path, "r");
    TH_CHECK(t, f == NULL);
    if (f)
        fclose(f);
    emu_result_free(&r);
    utf8_nesting_cases(t);
}
