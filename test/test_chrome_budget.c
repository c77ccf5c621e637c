/* Chrome trace budget: when the detailed cores alone exceed the event
 * budget, their threads are cut into time bins and the file stays within
 * it (RetinaNet's detailed cores alone make 1.57M events), every core's
 * critical path still sums to its step, every thread still nests, and
 * traces already under the budget are written in full detail, byte for byte
 * as pinned below. */
#include <cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/out/chrome_trace.h"
#include "test/harness.h"

static uint64_t fnv1a(const char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* What one written trace holds, checked against the result. */
typedef struct {
    int overlaps;         /* partial overlaps on one thread */
    int path_bad;         /* cores whose critical path misses its step */
    int binned_names;     /* thread names that say "binned" */
    double cat_err;       /* worst |category seconds - breakdown| */
    double mxu_flops;     /* summed over core 0's MXU thread */
    double mxu_count;
    int mxu_events;
} stats;

static int check_doc(th_ctx *t, cJSON *doc, const emu_result *r, stats *st)
{
    memset(st, 0, sizeof *st);
    cJSON *ev = cJSON_GetObjectItem(doc, "traceEvents");
    if (!TH_CHECK(t, cJSON_IsArray(ev)))
        return 0;
    enum { MAXT = 1024, DEPTH = 64 };
    static int tids[MAXT], depth[MAXT];
    static double ends[MAXT][DEPTH];
    int nt = 0;
    double *path = calloc((size_t)r->cores, sizeof(double));
    double *last = calloc((size_t)r->cores, sizeof(double));
    double(*cat)[CAT_COUNT] = calloc((size_t)r->cores, sizeof *cat);
    cJSON *e;
    cJSON_ArrayForEach(e, ev)
    {
        const char *ph = cJSON_GetStringValue(cJSON_GetObjectItem(e, "ph"));
        const char *nm = cJSON_GetStringValue(cJSON_GetObjectItem(e, "name"));
        if (ph && !strcmp(ph, "M") && nm && !strcmp(nm, "thread_name")) {
            const char *tn = cJSON_GetStringValue(
                cJSON_GetObjectItem(cJSON_GetObjectItem(e, "args"), "name"));
            st->binned_names += tn && strstr(tn, "(binned:") != NULL;
        }
        if (!ph || strcmp(ph, "X") != 0)
            continue;
        int tid = cJSON_GetObjectItem(e, "tid")->valueint;
        int core, unit, lane;
        chrome_trace_tid(tid, &core, &unit, &lane);
        if (core < 0 || core >= r->cores)
            continue;
        double ts = cJSON_GetObjectItem(e, "ts")->valuedouble;
        double te = ts + cJSON_GetObjectItem(e, "dur")->valuedouble;
        cJSON *a = cJSON_GetObjectItem(e, "args");
        /* The writer emits each thread's events in start order. */
        int k = 0;
        while (k < nt && tids[k] != tid)
            k++;
        if (k == nt && nt < MAXT) {
            tids[nt] = tid;
            depth[nt++] = 0;
        }
        if (k < MAXT) {
            while (depth[k] > 0 && ends[k][depth[k] - 1] <= ts + 1e-6)
                depth[k]--;
            if (depth[k] > 0 && te > ends[k][depth[k] - 1] + 1e-6)
                st->overlaps++;
            if (depth[k] < DEPTH)
                ends[k][depth[k]++] = te;
        }
        if (unit == UNIT_CORE) {
            path[core] += te - ts;
            last[core] = fmax(last[core], te);
            if (cJSON_IsTrue(cJSON_GetObjectItem(a, "binned"))) {
                for (int c = 0; c < CAT_COUNT; c++) {
                    char key[32];
                    snprintf(key, sizeof key, "%s_s", emu_cat_name((emu_cat)c));
                    cJSON *v = cJSON_GetObjectItem(a, key);
                    if (v)
                        cat[core][c] += v->valuedouble;
                }
            } else {
                const char *cn = cJSON_GetStringValue(cJSON_GetObjectItem(e, "cat"));
                for (int c = 0; c < CAT_COUNT; c++)
                    if (cn && !strcmp(cn, emu_cat_name((emu_cat)c)))
                        cat[core][c] += (te - ts) * 1e-6;
            }
        }
        if (core == 0 && unit == UNIT_MXU) {
            cJSON *fl = cJSON_GetObjectItem(a, "flops");
            st->mxu_flops += fl ? fl->valuedouble : 0;
            st->mxu_count += cJSON_GetObjectItem(a, "count")->valuedouble;
            st->mxu_events++;
        }
    }
    for (int c = 0; c < r->cores; c++) {
        double step = r->per_core[c].step_time_s * 1e6;
        st->path_bad += fabs(path[c] - step) > 1e-3 || fabs(last[c] - step) > 1e-3;
        for (int k = 0; k < CAT_COUNT; k++)
            st->cat_err = fmax(st->cat_err,
                               fabs(cat[c][k] - r->per_core[c].breakdown_s[k]));
    }
    free(path);
    free(last);
    free(cat);
    return 1;
}

void th_suite_chrome_budget(th_ctx *t)
{
    char path[512];
    tpu_error err = {0};
    emu_result r;
    size_t written = 0;
    stats st;

    th_case(t, "representatives alone over the budget: their threads are "
               "binned and the file fits");
    /* 64 identical cores: core 0 keeps the detail, 801 critical-path, 400
     * MXU, 400 vector, 400 DMA and 1 ICI events; 63 reduced cores. */
    tsynth_result(&r, 64, 8, 4, 400, 1);
    snprintf(path, sizeof path, "%s/binned.json", th_tmpdir());
    size_t budget = 600;
    tpu_status s = chrome_trace_write_capped(&r, path, budget, &written, &err);
    TH_CHECKF(t, s == TPU_OK, "%s", err.msg);
    TH_CHECKF(t, written <= budget && written > budget / 2,
              "written %zu, budget %zu", written, budget);
    char *txt = th_slurp(path, NULL);
    cJSON *doc = txt ? cJSON_Parse(txt) : NULL;
    if (TH_CHECK(t, doc != NULL)) {
        check_doc(t, doc, &r, &st);
        TH_CHECKF(t, st.overlaps == 0, "%d partial overlaps", st.overlaps);
        TH_CHECKF(t, st.path_bad == 0, "%d cores' critical paths miss the step",
                  st.path_bad);
        TH_CHECKF(t, st.cat_err < 1e-9, "category seconds off by %g s", st.cat_err);
        /* Binning keeps the unit's totals: 400 layers x 4 x 1e9 FLOPs. */
        TH_CHECKF(t, fabs(st.mxu_flops - 400e9) < 1 && st.mxu_count == 1600 &&
                         st.mxu_events < 400,
                  "MXU: %g FLOPs, count %g in %d events", st.mxu_flops,
                  st.mxu_count, st.mxu_events);
        cJSON *od = cJSON_GetObjectItem(doc, "otherData");
        TH_CHECK(t, cJSON_IsFalse(cJSON_GetObjectItem(od, "over_budget")));
        TH_CHECK(t, cJSON_GetObjectItem(od, "events_written")->valuedouble ==
                        (double)written);
        cJSON *bt = cJSON_GetObjectItem(od, "binned_threads");
        int nb = cJSON_GetArraySize(bt);
        /* Critical path, MXU, vector and DMA binned; the one ICI event not. */
        TH_CHECKF(t, nb == 4, "%d binned threads", nb);
        TH_CHECK(t, st.binned_names == nb);
        cJSON *b0 = cJSON_GetArrayItem(bt, 0);
        TH_CHECK(t, b0 && cJSON_GetObjectItem(b0, "merged_events")->valueint == 801);
        int share = cJSON_GetObjectItem(od, "bins_per_binned_thread")->valueint;
        TH_CHECKF(t, share > 1 && share < 400, "share %d", share);
        TH_CHECK(t, cJSON_GetObjectItem(od, "bins_per_reduced_core")->valueint == 1);
        TH_CHECK(t, strstr(cJSON_GetStringValue(cJSON_GetObjectItem(od, "detail")),
                           "equal time bins") != NULL);
        cJSON_Delete(doc);
    }
    free(txt);

    th_case(t, "the reduction is deterministic");
    {
        char p2[600];
        snprintf(p2, sizeof p2, "%s/binned2.json", th_tmpdir());
        s = chrome_trace_write_capped(&r, p2, budget, NULL, &err);
        size_t n1 = 0, n2 = 0;
        char *a = th_slurp(path, &n1), *b = th_slurp(p2, &n2);
        TH_CHECK(t, s == TPU_OK && a && b && n1 == n2 && !memcmp(a, b, n1));
        free(a);
        free(b);
    }

    th_case(t, "the budget is honoured down to one event per thread kept");
    /* 63 reduced cores + 5 threads of core 0 = 68 events at least. */
    for (size_t b = 68; b <= 1300; b += 123) {
        s = chrome_trace_write_capped(&r, path, b, &written, &err);
        if (!TH_CHECKF(t, s == TPU_OK && written <= b,
                       "budget %zu: written %zu (%s)", b, written, err.msg))
            break;
    }
    s = chrome_trace_write_capped(&r, path, 67, &written, &err);
    txt = s == TPU_OK ? th_slurp(path, NULL) : NULL;
    doc = txt ? cJSON_Parse(txt) : NULL;
    if (TH_CHECKF(t, doc != NULL, "%s", err.msg)) {
        /* Below that floor every core is still kept, and the file says so. */
        check_doc(t, doc, &r, &st);
        TH_CHECK(t, st.path_bad == 0 && st.overlaps == 0 && written == 68);
        TH_CHECK(t, cJSON_IsTrue(cJSON_GetObjectItem(
                        cJSON_GetObjectItem(doc, "otherData"), "over_budget")));
        cJSON_Delete(doc);
    }
    free(txt);
    emu_result_free(&r);

    th_case(t, "several representatives, no reduced core spare: binned too");
    /* identical = 0: cores 0-7 and 8-15 differ, two representatives. */
    tsynth_result(&r, 16, 4, 2, 300, 0);
    budget = 900;
    s = chrome_trace_write_capped(&r, path, budget, &written, &err);
    txt = s == TPU_OK ? th_slurp(path, NULL) : NULL;
    doc = txt ? cJSON_Parse(txt) : NULL;
    if (TH_CHECKF(t, doc != NULL && written <= budget, "written %zu: %s",
                  written, err.msg)) {
        check_doc(t, doc, &r, &st);
        TH_CHECK(t, st.path_bad == 0 && st.overlaps == 0 && st.cat_err < 1e-9);
        cJSON *od = cJSON_GetObjectItem(doc, "otherData");
        TH_CHECK(t, cJSON_GetObjectItem(od, "core_groups")->valueint == 2);
        TH_CHECK(t, cJSON_GetArraySize(cJSON_GetObjectItem(od, "binned_threads")) == 8);
        cJSON_Delete(doc);
    }
    free(txt);
    emu_result_free(&r);

    th_case(t, "traces within the budget: the same bytes as before binning "
               "existed");
    /* FNV-1a of the files the writer gives for these results under the
     * budget: full detail, and reduced cores' critical paths in bins
     * (with args.opcode as the listing's mnemonic and otherData's steps
     * and timeline).  A deliberate format change, or one to
     * tsynth_result, updates these. */
    static const struct {
        int cores, layers, identical;
        size_t budget;
        uint64_t hash;
    } gold[] = {
        {8, 5, 0, 0, 0xbead25fcf460f809ull},     /* 216 events, full */
        {64, 20, 1, 300, 0x50a5f24e23e2bb4eull}, /* 291, reduced cores binned */
    };
    for (size_t i = 0; i < sizeof gold / sizeof gold[0]; i++) {
        tsynth_result(&r, gold[i].cores, 4, 2, gold[i].layers, gold[i].identical);
        s = chrome_trace_write_capped(&r, path, gold[i].budget, &written, &err);
        size_t n = 0;
        txt = s == TPU_OK ? th_slurp(path, &n) : NULL;
        uint64_t h = txt ? fnv1a(txt, n) : 0;
        TH_CHECKF(t, h == gold[i].hash, "case %zu: hash 0x%016llx, %zu bytes, %zu events",
                  i, (unsigned long long)h, n, written);
        free(txt);
        emu_result_free(&r);
    }
}
