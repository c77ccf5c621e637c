/* tpuemu sweep with several inputs: a swept split (an explicit
 * [N,H,W,C] entry or each split of "all") keeps the base trace's choice
 * for every input (docs/SWEEPS.md "Several inputs").  An input the base
 * trace replicates (null) stays null in every generated trace and the run
 * costs what `tpuemu run` says for a hand-written trace with that split;
 * without a list in the base trace every input of the first's rank takes
 * the split.  The runs are real (the pod engine on a tiny two-input
 * graph), since the point is that the sweep's number is the user's
 * program's number. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/report.h"
#include "test/harness.h"

/* Two 2D inputs: rgb through a conv, aux through a strided conv and an
 * upsample (added to rgb's branch) and through a pooling (concatenated
 * later), so a replicated aux is re-split at a conv/pool, never at the
 * add or concat.  cpr and pd give the run section's two keys. */
static void trace_text(char *buf, size_t cap, const char *name, int cpr,
                       const char *pd)
{
    snprintf(buf, cap,
             "{\"format\": \"tpuemu-trace/1\", \"name\": \"%s\", "
             "\"system\": \"v3-8\", \"run\": {\"mode\": \"train\", "
             "\"global_batch\": 8, \"num_cores_per_replica\": %d%s%s}, "
             "\"graph\": {\"inputs\": [{\"name\": \"rgb\", \"shape\": "
             "[12, 10, 3]}, {\"name\": \"aux\", \"shape\": [12, 10, 2]}], "
             "\"layers\": ["
             "{\"name\": \"a1\", \"op\": \"conv\", \"in\": \"rgb\", "
             "\"filters\": 4, \"kernel\": [3, 3]}, "
             "{\"name\": \"ar\", \"op\": \"relu\", \"in\": \"a1\"}, "
             "{\"name\": \"b1\", \"op\": \"conv\", \"in\": \"aux\", "
             "\"filters\": 4, \"kernel\": [5, 5], \"strides\": [2, 2]}, "
             "{\"name\": \"br\", \"op\": \"relu\", \"in\": \"b1\"}, "
             "{\"name\": \"b2\", \"op\": \"upsample\", \"in\": \"br\", "
             "\"factor\": [2, 2]}, "
             "{\"name\": \"s\", \"op\": \"add\", \"in\": [\"ar\", \"b2\"]}, "
             "{\"name\": \"bm\", \"op\": \"maxpool\", \"in\": \"aux\", "
             "\"window\": [3, 3], \"strides\": [2, 2], \"padding\": "
             "\"same\"}, "
             "{\"name\": \"bc\", \"op\": \"conv\", \"in\": \"bm\", "
             "\"filters\": 4, \"kernel\": [3, 3]}, "
             "{\"name\": \"o\", \"op\": \"conv\", \"in\": \"s\", "
             "\"filters\": 4, \"kernel\": [3, 3], \"strides\": [2, 2]}, "
             "{\"name\": \"cat\", \"op\": \"concat\", \"in\": [\"o\", "
             "\"bc\"]}, "
             "{\"name\": \"o2\", \"op\": \"conv\", \"in\": \"cat\", "
             "\"filters\": 3, \"kernel\": [1, 1]}, "
             "{\"name\": \"loss\", \"op\": \"loss\", \"in\": \"o2\", "
             "\"kind\": \"softmax_xent\"}]}}\n",
             name, cpr, pd ? ", \"input_partition_dims\": " : "",
             pd ? pd : "");
}

static void write_trace(const char *path, const char *name, int cpr,
                        const char *pd)
{
    char buf[4096];
    trace_text(buf, sizeof buf, name, cpr, pd);
    th_put(path, buf);
}

/* The step time of results.csv's row whose partition_dims column is
 * `label`; -1 when there is no such row. */
static double csv_step(const char *csv_path, const char *label)
{
    char *csv = th_slurp(csv_path, NULL);
    if (!csv)
        return -1;
    int col_pd = -1, col_st = -1, col = 0;
    const char *p = csv;
    for (const char *h = csv; *h && *h != '\n'; col++) {
        size_t n = strcspn(h, ",\n");
        if (n == 14 && strncmp(h, "partition_dims", n) == 0)
            col_pd = col;
        if (n == 11 && strncmp(h, "step_time_s", n) == 0)
            col_st = col;
        h += n;
        if (*h == ',')
            h++;
        p = h;
    }
    double v = -1;
    for (p = strchr(p, '\n'); p && p[1] && col_pd >= 0 && col_st >= 0;
         p = strchr(p + 1, '\n')) {
        const char *f = p + 1;
        const char *cells[32] = {0};
        int c = 0;
        while (c < 32 && *f && *f != '\n') {
            cells[c++] = f;
            f += strcspn(f, ",\n");
            if (*f == ',')
                f++;
        }
        if (c > col_st && c > col_pd &&
            strncmp(cells[col_pd], label, strlen(label)) == 0 &&
            (cells[col_pd][strlen(label)] == ',')) {
            v = strtod(cells[col_st], NULL);
            break;
        }
    }
    free(csv);
    return v;
}

/* `tpuemu run` on a trace: its report's step time, -1 on failure. */
static double run_step(const char *trace, const char *report)
{
    th_cmd_result c;
    th_run(&c, "%s run %s --report %s --quiet", th_bin(), trace, report);
    if (c.status != 0)
        return -1;
    emu_result r;
    tpu_error err = {0};
    memset(&r, 0, sizeof r);
    if (report_read(&r, report, &err))
        return -1;
    double s = r.step_time_s;
    emu_result_free(&r);
    return s;
}

static int same_time(double a, double b)
{
    /* results.csv prints 8 significant digits */
    return a > 0 && b > 0 && (a - b) / b < 1e-6 && (b - a) / b < 1e-6;
}

/* The generated trace's run.input_partition_dims, spaces removed. */
static void generated_pd(const char *path, char *buf, size_t cap)
{
    buf[0] = 0;
    char *t = th_slurp(path, NULL);
    if (!t)
        return;
    const char *p = strstr(t, "\"input_partition_dims\"");
    size_t n = 0;
    if (p) {
        p = strchr(p, ':');
        int depth = 0;
        for (p = p ? p + 1 : NULL; p && *p && n + 1 < cap; p++) {
            if (*p == ' ' || *p == '\n' || *p == '\t')
                continue;
            buf[n++] = *p;
            depth += *p == '[';
            depth -= *p == ']';
            if (depth == 0 && *p == ']')
                break;
            if (depth == 0 && *p == 'l' && n >= 4)
                break; /* a bare null */
        }
    }
    buf[n] = 0;
    free(t);
}

void th_suite_sweep_inputs(th_ctx *t)
{
    const char *d = th_tmpdir();
    char path[512], sw[512], out[512], gen[700], hand[600], rep[512];
    char pd[256];
    th_cmd_result c;

    /* Hand-written traces: the programs the sweep's runs must be. */
    char hand_rep[512], hand_both[512];
    snprintf(hand_rep, sizeof hand_rep, "%s/si-hand-rep.json", d);
    write_trace(hand_rep, "hand-rep", 4, "[[1,2,2,1], null, null]");
    snprintf(hand_both, sizeof hand_both, "%s/si-hand-both.json", d);
    write_trace(hand_both, "hand-both", 4, "[[1,2,2,1], [1,2,2,1], null]");
    snprintf(rep, sizeof rep, "%s/si-hand-rep.report.json", d);
    double t_rep = run_step(hand_rep, rep);
    snprintf(rep, sizeof rep, "%s/si-hand-both.report.json", d);
    double t_both = run_step(hand_both, rep);
    th_case(t, "the hand-written traces run, and replicating aux is "
               "another program than splitting it");
    TH_CHECKF(t, t_rep > 0 && t_both > 0 && !same_time(t_rep, t_both),
              "replicated %g s, split %g s", t_rep, t_both);

    /* base trace's input_partition_dims, sweep grid, expected list in the
     * 1x2x2x1 run's trace, expected step time */
    static const struct {
        const char *what, *base_pd, *grid, *want_pd;
        int cpr, both;
    } cases[] = {
        {"\"all\", base replicates aux and leaves the first unsplit "
         "([null, null, null]): aux stays null, the first takes the split",
         "[null, null, null]", "\"all\"", "[[1,2,2,1],null,null]", 4, 0},
        {"an explicit [1,2,2,1] entry treats the inputs as \"all\" does",
         "[null, null, null]", "[[1,1,1,1], [1,2,2,1]]",
         "[[1,2,2,1],null,null]", 4, 0},
        {"\"all\", base splits the first and replicates aux: aux stays null",
         "[[1,2,1,1], null, null]", "\"all\"", "[[1,2,2,1],null,null]", 2,
         0},
        {"\"all\", base splits both inputs: both take the split",
         "[[1,2,1,1], [1,2,1,1], null]", "\"all\"",
         "[[1,2,2,1],[1,2,2,1],null]", 2, 1},
        {"\"all\", base without input_partition_dims: every input of the "
         "first's rank takes the split",
         NULL, "\"all\"", "[[1,2,2,1],[1,2,2,1],null]", 1, 1},
        {"\"all\", one core per replica, aux all ones (as good as the "
         "first's list there): aux takes the split",
         "[[1,1,1,1], [1,1,1,1], null]", "\"all\"",
         "[[1,2,2,1],[1,2,2,1],null]", 1, 1},
        {"\"all\", one core per replica, aux null: aux stays null",
         "[[1,1,1,1], null, null]", "\"all\"", "[[1,2,2,1],null,null]", 1,
         0},
        {"a full-form entry is the run's list exactly as written",
         NULL, "[[[1,2,2,1], null, null]]", "[[1,2,2,1],null,null]", 1, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        th_case(t, cases[i].what);
        snprintf(path, sizeof path, "%s/si-base%zu.json", d, i);
        char nm[32];
        snprintf(nm, sizeof nm, "base%zu", i);
        write_trace(path, nm, cases[i].cpr, cases[i].base_pd);
        snprintf(sw, sizeof sw, "%s/si-sweep%zu.json", d, i);
        char body[1024];
        snprintf(body, sizeof body,
                 "{\"format\": \"tpuemu-sweep/1\", \"name\": \"si%zu\", "
                 "\"trace\": \"si-base%zu.json\", \"grid\": "
                 "{\"partition_dims\": %s, \"system\": [\"v3-8\"]}}\n",
                 i, i, cases[i].grid);
        th_put(sw, body);
        snprintf(out, sizeof out, "%s/si-out%zu", d, i);
        th_run(&c, "rm -rf %s && %s sweep %s --out %s -j 2 --no-range", out,
               th_bin(), sw, out);
        TH_CHECKF(t, c.status == 0, "status %d: %s", c.status, c.err);
        /* the full form's file name is the label, "-" for null */
        const char *label = strncmp(cases[i].grid, "[[[", 3) == 0
                                ? "1x2x2x1+-+-"
                                : "1x2x2x1";
        snprintf(gen, sizeof gen, "%s/traces/si-base%zu-pd%s.json", out, i,
                 label);
        generated_pd(gen, pd, sizeof pd);
        TH_CHECKF(t, strcmp(pd, cases[i].want_pd) == 0,
                  "%s: input_partition_dims %s, expected %s", gen, pd,
                  cases[i].want_pd);
        snprintf(hand, sizeof hand, "%s/results.csv", out);
        double st = csv_step(hand, label);
        double want = cases[i].both ? t_both : t_rep;
        TH_CHECKF(t, same_time(st, want),
                  "sweep's %s step %.9g s, `run` on the hand-written trace "
                  "%.9g s",
                  label, st, want);
    }

    th_case(t, "an explicit entry of another rank than the first input's "
               "is refused, not run unsplit");
    snprintf(path, sizeof path, "%s/si-rank.json", d);
    write_trace(path, "rank", 1, "[null, null, null]");
    snprintf(sw, sizeof sw, "%s/si-rank-sweep.json", d);
    th_put(sw, "{\"format\": \"tpuemu-sweep/1\", \"name\": \"rk\", "
            "\"trace\": \"si-rank.json\", \"grid\": "
            "{\"partition_dims\": [[1,2,1,1,1]]}}\n");
    th_run(&c, "%s sweep %s --print-commands --out %s/si-rank-out", th_bin(),
           sw, d);
    TH_CHECKF(t, c.status == 2 &&
                     strstr(c.err, "grid.partition_dims[0]: "
                                   "run.input_partition_dims[0]: expected 4 "
                                   "factors"),
              "status %d: %s", c.status, c.err);

    th_case(t, "a kept null that meets a split input at a concat: every "
               "split of the image runs, the mask replicated (sliced at the "
               "concat)");
    snprintf(path, sizeof path, "%s/si-clash.json", d);
    th_put(path,
        "{\"format\": \"tpuemu-trace/1\", \"name\": \"clash\", \"system\": "
        "\"v3-8\", \"run\": {\"mode\": \"infer\", \"global_batch\": 8, "
        "\"input_partition_dims\": [null, null, null]}, \"graph\": "
        "{\"inputs\": [{\"name\": \"image\", \"shape\": [16, 16, 3]}, "
        "{\"name\": \"mask\", \"shape\": [16, 16, 1]}], \"layers\": ["
        "{\"name\": \"cat\", \"op\": \"concat\", \"in\": [\"image\", "
        "\"mask\"]}, {\"name\": \"c\", \"op\": \"conv\", \"in\": \"cat\", "
        "\"filters\": 8, \"kernel\": [3, 3]}]}}\n");
    snprintf(sw, sizeof sw, "%s/si-clash-sweep.json", d);
    th_put(sw, "{\"format\": \"tpuemu-sweep/1\", \"name\": \"cl\", "
            "\"trace\": \"si-clash.json\", \"grid\": "
            "{\"partition_dims\": \"all\"}}\n");
    snprintf(out, sizeof out, "%s/si-clash-out", d);
    th_run(&c, "rm -rf %s; %s sweep %s --print-commands --out %s", out,
           th_bin(), sw, out);
    TH_CHECKF(t, c.status == 0 && c.err[0] == 0 &&
                     strstr(c.out, "si-clash-pd1x2x1x1.json") &&
                     strstr(c.out, "si-clash-pd1x1x8x1.json"),
              "status %d: %s%s", c.status, c.out, c.err);
    th_run(&c, "grep -c '\\[\\[1, 4, 2, 1\\], null, null\\]' "
               "%s/traces/si-clash-pd1x4x2x1.json && %s run "
               "%s/traces/si-clash-pd1x4x2x1.json --quiet",
           out, th_bin(), out);
    TH_CHECKF(t, c.status == 0, "the [1,4,2,1] point: status %d: %s%s",
              c.status, c.out, c.err);
}
