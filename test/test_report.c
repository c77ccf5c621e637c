/* The report: byte-identical round trip, docs/SPEC.md keys in its order,
 * tolerance of reports with only the SPEC keys, and atomic writes that
 * never leave a temporary or a partial file. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/report.h"
#include "test/harness.h"

/* A synthetic two-replica result with awkward numbers (non-terminating
 * binary fractions, tiny and huge magnitudes) and a name to escape. */
static void make_result(emu_result *r, int cores, int values)
{
    memset(r, 0, sizeof *r);
    snprintf(r->trace, sizeof r->trace, "tiny \"quoted\"\\trace");
    snprintf(r->system, sizeof r->system, "v3-8");
    r->gen = 3;
    r->chips = cores / 2;
    r->cores = cores;
    r->dim_x = 2;
    r->dim_y = cores / 4 > 0 ? cores / 4 : 1;
    r->global_batch = 64;
    r->cores_per_replica = 2;
    r->replicas = cores / 2;
    r->train = 1;
    r->fits = 1;
    r->hbm_needed_bytes = 1.2e10 / 3;
    r->hbm_capacity_bytes = 17179869184.0;
    r->flops_per_step = 1.0e15 / 7;
    r->n_overrides = 2;
    r->overrides = calloc(2, sizeof *r->overrides);
    snprintf(r->overrides[0].key, 64, "hbm.bandwidth_gbs");
    snprintf(r->overrides[0].value, 64, "1200");
    snprintf(r->overrides[1].key, 64, "mxu.rows");
    snprintf(r->overrides[1].value, 64, "256");
    r->per_core = calloc((size_t)cores, sizeof *r->per_core);
    double worst = 0;
    for (int i = 0; i < cores; i++) {
        emu_core_result *c = &r->per_core[i];
        c->core = i;
        c->chip = i / 2;
        c->replica = i / 2;
        c->shard = i % 2;
        double sum = 0;
        for (int k = 0; k < CAT_COUNT; k++)
            c->breakdown_s[k] = (k + 1) * 0.1 / 3 + i * 1e-9;
        c->breakdown_s[CAT_HALO] = i % 2 ? 0 : 1e-300;
        /* the categories sum to the step, as report_read checks */
        for (int k = 0; k < CAT_COUNT; k++)
            sum += c->breakdown_s[k];
        c->step_time_s = sum;
        c->mxu_utilization = 0.42 + i / 1000.0;
        c->hbm_peak_bytes = 1.2e10 / 3 - i; /* core 0 the largest */
        c->hbm_read_bytes = 3e11 / 7;
        c->hbm_write_bytes = 2e11;
        c->ici_bytes_sent = 1e9 * i;
        c->flops = 1.0e15 / 7 / cores;
        if (sum > worst)
            worst = sum;
    }
    r->step_time_s = worst;
    r->n_layers = 3;
    r->layer_names = calloc(3, sizeof *r->layer_names);
    r->layer_time_s = calloc(3 * CAT_COUNT, sizeof(double));
    for (int l = 0; l < 3; l++) {
        snprintf(r->layer_names[l], 64, "layer%d", l);
        for (int k = 0; k < CAT_COUNT; k++)
            r->layer_time_s[l * CAT_COUNT + k] = 0.001 * (l + 1) / (k + 3);
    }
    r->link_busy_s = calloc((size_t)r->chips * 4, sizeof(double));
    for (int i = 0; i < r->chips * 4; i++)
        r->link_busy_s[i] = 0.01 * i / 3;
    if (values) {
        r->has_values = 1;
        r->loss = 2.302585092994046;
        r->output_checksum = 0x00f1e2d3c4b5a697ull;
    }
}

static int write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    fputs(text, f);
    return fclose(f);
}

/* Files in dir whose name starts with prefix. */
static int count_prefixed(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return n;
}

void th_suite_report(th_ctx *t)
{
    char path[512], path2[512];
    tpu_error err = {0};

    th_case(t, "write, read, write again: identical bytes");
    for (int values = 0; values < 2; values++) {
        emu_result r, back;
        make_result(&r, 8, values);
        char *a = report_to_json(&r);
        snprintf(path, sizeof path, "%s/rt%d.json", th_tmpdir(), values);
        TH_CHECK(t, report_write(&r, path, &err) == TPU_OK);
        tpu_status st = report_read(&back, path, &err);
        TH_CHECKF(t, st == TPU_OK, "read: %s", err.msg);
        if (st == TPU_OK) {
            char *b = report_to_json(&back);
            TH_CHECKF(t, a && b && strcmp(a, b) == 0, "differs:\n%s\n%s", a,
                      b);
            TH_CHECK(t, back.per_core[5].step_time_s ==
                            r.per_core[5].step_time_s);
            TH_CHECK(t, back.per_core[0].breakdown_s[CAT_HALO] == 1e-300);
            TH_CHECK(t, back.has_values == values);
            TH_CHECK(t, back.output_checksum == r.output_checksum);
            TH_CHECK(t, strcmp(back.trace, r.trace) == 0);
            free(b);
        }
        emu_result_free(&back);
        free(a);
        emu_result_free(&r);
    }

    th_case(t, "a core whose breakdown does not sum to its step time is "
               "refused, naming it (check must not compare it)");
    {
        emu_result r, back;
        make_result(&r, 8, 0);
        r.per_core[2].breakdown_s[CAT_MXU] *= 0.9;
        snprintf(path, sizeof path, "%s/badsum.json", th_tmpdir());
        TH_CHECK(t, report_write(&r, path, &err) == TPU_OK);
        tpu_status st = report_read(&back, path, &err);
        TH_CHECKF(t, st == TPU_ERR_INPUT &&
                         strstr(err.msg, "per_core[2].breakdown_s: sums to"),
                  "status %d: %s", st, err.msg);
        if (st == TPU_OK)
            emu_result_free(&back);
        emu_result_free(&r);
    }

    th_case(t, "numbers print shortest round-trip (0.91 stays 0.91)");
    {
        emu_result r;
        make_result(&r, 2, 0);
        r.step_time_s = 0.91;
        r.per_core[0].step_time_s = 0.1 + 0.2; /* 0.30000000000000004 */
        char *a = report_to_json(&r);
        TH_CHECK(t, a && strstr(a, "\"step_time_s\": 0.91,"));
        TH_CHECK(t, a && strstr(a, "\"step_time_s\": 0.30000000000000004,"));
        free(a);
        emu_result_free(&r);
    }

    th_case(t, "docs/SPEC.md keys present, in its order");
    {
        emu_result r;
        make_result(&r, 4, 1);
        char *a = report_to_json(&r);
        static const char *const top[] = {
            "\"format\": \"tpuemu-report/1\"", "\"trace\":", "\"system\":",
            "\"chips\":", "\"cores\":", "\"global_batch\":",
            "\"num_cores_per_replica\":", "\"replicas\":", "\"fits\": true",
            "\"step_time_s\":", "\"flops_per_step\":", "\"overrides\": {",
            "\"per_core\": [", "\"core\": 0", "\"chip\": 0",
            "\"step_time_s\":", "\"breakdown_s\": {\"mxu\":", "\"vector\":",
            "\"hbm_stall\":", "\"halo\":", "\"allreduce\":", "\"idle\":",
            "\"mxu_utilization\":", "\"hbm_peak_bytes\":",
            "\"hbm_read_bytes\":", "\"hbm_write_bytes\":",
            "\"ici_bytes_sent\":", "\"core\": 1", "\"output_checksum\": "
                                                  "\"00f1e2d3c4b5a697\""};
        const char *at = a;
        for (size_t i = 0; a && i < sizeof top / sizeof top[0]; i++) {
            const char *p = strstr(at, top[i]);
            if (!TH_CHECKF(t, p != NULL, "'%s' missing or out of order",
                           top[i]))
                break;
            at = p + strlen(top[i]);
        }
        TH_CHECK(t, a && strstr(a, "\"hbm.bandwidth_gbs\": \"1200\""));
        /* Strictly valid JSON, escapes included. */
        TH_CHECK(t, a && strstr(a, "\"tiny \\\"quoted\\\"\\\\trace\""));
        free(a);
        emu_result_free(&r);
    }

    th_case(t, "reads a report with only the SPEC keys");
    {
        snprintf(path, sizeof path, "%s/spec_only.json", th_tmpdir());
        write_text(path,
                   "{\"format\": \"tpuemu-report/1\", \"trace\": \"x\", "
                   "\"system\": \"v3-2\", \"chips\": 1, \"cores\": 2,"
                   "\"global_batch\": 64, \"num_cores_per_replica\": 2, "
                   "\"replicas\": 1, \"fits\": true, \"step_time_s\": 0.91, "
                   "\"flops_per_step\": 1.0e15, \"overrides\": {\"a.b\": 3},"
                   "\"per_core\": [{\"core\": 0, \"chip\": 0, "
                   "\"step_time_s\": 0.91, \"breakdown_s\": {\"mxu\": 0.5, "
                   "\"vector\": 0.2, \"hbm_stall\": 0.1, \"halo\": 0.0, "
                   "\"allreduce\": 0.05, \"idle\": 0.06}, "
                   "\"mxu_utilization\": 0.42, \"hbm_peak_bytes\": 1.2e10, "
                   "\"hbm_read_bytes\": 3e11, \"hbm_write_bytes\": 2e11, "
                   "\"ici_bytes_sent\": 1e9},"
                   "{\"core\": 1, \"chip\": 0, "
                   "\"step_time_s\": 0.9, \"breakdown_s\": {\"mxu\": 0.5, "
                   "\"vector\": 0.2, \"hbm_stall\": 0.1, \"halo\": 0.0, "
                   "\"allreduce\": 0.05, \"idle\": 0.05}, "
                   "\"mxu_utilization\": 0.42, \"hbm_peak_bytes\": 1.2e10, "
                   "\"hbm_read_bytes\": 3e11, \"hbm_write_bytes\": 2e11, "
                   "\"ici_bytes_sent\": 1e9}]}");
        emu_result r;
        tpu_status st = report_read(&r, path, &err);
        TH_CHECKF(t, st == TPU_OK, "%s", err.msg);
        if (st == TPU_OK) {
            TH_CHECK(t, r.gen == 3 && r.train == 1 && r.cores == 2);
            TH_CHECK(t, r.per_core[1].shard == 1 && r.per_core[1].replica == 0);
            TH_CHECK(t, r.per_core[0].breakdown_s[CAT_IDLE] == 0.06);
            TH_CHECK(t, r.n_overrides == 1 &&
                            strcmp(r.overrides[0].value, "3") == 0);
            TH_CHECK(t, !r.has_values && r.n_layers == 0 && !r.link_busy_s);
        }
        emu_result_free(&r);
    }

    th_case(t, "refuses broken reports, naming the file and JSON path");
    {
        static const char *const broken[][2] = {
            {"", "not valid JSON"},
            {"[1]", "expected a JSON object"},
            {"{\"format\": \"tpuemu-trace/1\"}", "format"},
            {"{\"format\": \"tpuemu-report/1\", \"trace\": \"x\"}", "system"},
            {"{\"format\": \"tpuemu-report/1\", \"trace\": \"x\", \"system\":"
             " \"v3-2\", \"chips\": 1, \"cores\": 2, \"global_batch\": 8, "
             "\"num_cores_per_replica\": 1, \"replicas\": 2, \"fits\": true,"
             " \"step_time_s\": 1, \"flops_per_step\": 1, \"overrides\": {},"
             " \"per_core\": []}",
             "per_core"},
            {"{\"format\": \"tpuemu-report/1\", \"trace\": \"x\", \"system\":"
             " \"v3-8\", \"chips\": 1, \"cores\": 1e9}",
             "cores"},
        };
        for (size_t i = 0; i < sizeof broken / sizeof broken[0]; i++) {
            snprintf(path, sizeof path, "%s/broken%zu.json", th_tmpdir(), i);
            write_text(path, broken[i][0]);
            emu_result r;
            tpu_error e = {0};
            tpu_status st = report_read(&r, path, &e);
            TH_CHECKF(t, st == TPU_ERR_INPUT, "case %zu: status %d", i, st);
            TH_CHECKF(t, strstr(e.msg, path) && strstr(e.msg, broken[i][1]),
                      "case %zu: message '%s'", i, e.msg);
            emu_result_free(&r);
        }
        emu_result r;
        snprintf(path, sizeof path, "%s/does-not-exist.json", th_tmpdir());
        TH_CHECK(t, report_read(&r, path, &err) == TPU_ERR_INPUT);
    }

    th_case(t, "atomic write: replaces, leaves no temporary");
    {
        char dir[400];
        snprintf(dir, sizeof dir, "%s/atomic", th_tmpdir());
        th_cmd_result cr;
        th_run(&cr, "mkdir -p %s", dir);
        snprintf(path, sizeof path, "%s/out.json", dir);
        TH_CHECK(t, tpu_write_atomic(path, "first", 5, &err) == TPU_OK);
        TH_CHECK(t, tpu_write_atomic(path, "second", 6, &err) == TPU_OK);
        FILE *f = fopen(path, "rb");
        char buf[16] = {0};
        if (f) {
            TH_CHECK(t, fread(buf, 1, sizeof buf - 1, f) == 6);
            fclose(f);
        }
        TH_CHECK(t, strcmp(buf, "second") == 0);
        TH_CHECK(t, count_prefixed(dir, ".tpuemu.") == 0);
        TH_CHECK(t, count_prefixed(dir, "out.json") == 1);
    }

    th_case(t, "atomic write: failure leaves no file and says why");
    {
        snprintf(path, sizeof path, "%s/no/such/dir/out.json", th_tmpdir());
        tpu_error e = {0};
        TH_CHECK(t, tpu_write_atomic(path, "x", 1, &e) == TPU_ERR_INPUT);
        TH_CHECK(t, strstr(e.msg, path) != NULL);
        FILE *f = fopen(path, "rb");
        TH_CHECK(t, f == NULL);
        if (f)
            fclose(f);
        /* Destination is a directory: refused (emu/outfile.h), and no
         * temporary is left behind. */
        char dir[400];
        snprintf(dir, sizeof dir, "%s/atomic2", th_tmpdir());
        th_cmd_result cr;
        th_run(&cr, "mkdir -p %s/target", dir);
        snprintf(path2, sizeof path2, "%s/target", dir);
        emu_result r;
        make_result(&r, 2, 0);
        TH_CHECK(t, report_write(&r, path2, &e) == TPU_ERR_INPUT);
        TH_CHECK(t, count_prefixed(dir, ".tpuemu.") == 0);
        emu_result_free(&r);
    }
}
