/* `tpuemu run`'s front end: the --quiet figure, options refused where
 * they mean nothing, the table's headings, --layers, the no-fit message
 * and what a run that does not fit writes, and --help. */
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "emu/graph.h"
#include "emu/out/chart.h"
#include "test/harness.h"

#define TINY "traces/small/tiny2d.json"

/* run --quiet prints the step time with the report's precision, so a
 * script reading it gets the same number as one reading the report. */
static void quiet_cases(th_ctx *t)
{
    static th_cmd_result c;
    char rep[512];
    snprintf(rep, sizeof rep, "%s/quiet-report.json", th_tmpdir());

    th_case(t, "run --quiet prints the step time to 9 significant digits, "
               "the report's value");
    th_run(&c, "%s run %s --quiet --report %s", th_bin(), TINY, rep);
    double quiet = atof(c.out);
    TH_CHECKF(t, c.status == 0 && quiet > 0, "exit %d: %s%s", c.status,
              c.out, c.err);
    th_run(&c, "grep -o '\"step_time_s\": [0-9.e+-]*' %s | head -1 | "
               "cut -d' ' -f2",
           rep);
    double in_report = atof(c.out);
    TH_CHECKF(t, in_report > 0 && fabs(quiet - in_report) <= 1e-8 * in_report,
              "--quiet %.12g, report %.12g", quiet, in_report);
}

/* Options that only mean something with --functional are refused without
 * it rather than ignored, and --version takes no argument. */
static void option_cases(th_ctx *t)
{
    static th_cmd_result c;
    th_case(t, "functional-only options without --functional, and "
               "--version with an argument, are refused (exit 2)");
    static const char *const opts[] = {"--seed 3", "--lr 0.1",
                                       "--host-mem-gib 2"};
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++) {
        th_run(&c, "%s run %s %s", th_bin(), TINY, opts[i]);
        TH_CHECKF(t, c.status == 2 && strstr(c.err, "--functional") &&
                         c.out[0] == 0,
                  "%s: exit %d: %s", opts[i], c.status, c.err);
    }
    th_run(&c, "%s run %s --functional --seed 3 --quiet", th_bin(), TINY);
    TH_CHECKF(t, c.status == 0, "with --functional: exit %d: %s", c.status,
              c.err);
    th_run(&c, "%s --version extra", th_bin());
    TH_CHECKF(t, c.status == 2 && strstr(c.err, "'extra'") && c.out[0] == 0,
              "--version extra: exit %d: %s%s", c.status, c.out, c.err);
    th_run(&c, "%s --version", th_bin());
    TH_CHECKF(t, c.status == 0 && strncmp(c.out, "tpuemu ", 7) == 0,
              "--version: exit %d: %s", c.status, c.out);
}

static void host_mem_cases(th_ctx *t)
{
    static th_cmd_result c;
    th_case(t, "the functional host-memory refusal prints a small limit "
               "as given");
    th_run(&c, "%s run %s --functional --host-mem-gib 0.0001", th_bin(), TINY);
    TH_CHECKF(t, c.status == 2 && strstr(c.err, "limit of 0.0001 GiB"),
              "exit %d: %s", c.status, c.err);
}

/* The report's layers[] sorted by total time, largest first: the n
 * largest totals (ms) into top. */
static int report_top(const char *path, int n, double *top, char (*names)[64])
{
    char *text = th_slurp(path, NULL);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    free(text);
    const cJSON *ly = cJSON_GetObjectItemCaseSensitive(root, "layers");
    int got = 0;
    for (int i = 0; i < n; i++)
        top[i] = -1;
    const cJSON *e;
    cJSON_ArrayForEach(e, ly)
    {
        double s = 0;
        const cJSON *v;
        cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(e, "time_s"))
            s += v->valuedouble;
        s *= 1e3;
        for (int i = 0; i < n; i++) {
            if (s > top[i]) { /* insert, shifting the rest down */
                memmove(top + i + 1, top + i, sizeof *top * (size_t)(n - i - 1));
                memmove(names + i + 1, names + i,
                        sizeof *names * (size_t)(n - i - 1));
                top[i] = s;
                snprintf(names[i], 64, "%s",
                         cJSON_GetObjectItemCaseSensitive(e, "name")->valuestring);
                got++;
                break;
            }
        }
    }
    cJSON_Delete(root);
    return got < n ? got : n;
}

static void layers_cases(th_ctx *t, th_cmd_result *c)
{
    enum { N = 5 };
    char rep[512];
    snprintf(rep, sizeof rep, "%s/run-layers.json", th_tmpdir());
    th_case(t, "run --layers 5: the report's five largest layers of core 0, "
               "in order; the column sums to the step");
    th_run(c, "%s run traces/reference/retinanet-1280-v3-8.json --layers %d "
              "--report %s",
           th_bin(), N, rep);
    double top[N];
    char names[N][64];
    int nt = report_top(rep, N, top, names);
    const char *h = strstr(c->out, "\ncore 0: the 5 layers");
    const char *line = h ? strchr(h + 1, '\n') : NULL;
    line = line ? strchr(line + 1, '\n') : NULL; /* past the column names */
    double sum = 0;
    int rows = 0;
    while (line && line[1] && line[1] != '\n') {
        char name[64];
        double ms;
        if (line[1] == '(') { /* "(the other layers)": several words */
            const char *q = strchr(line + 1, ')');
            sum += q ? atof(q + 1) : 0;
            rows++;
            line = strchr(line + 1, '\n');
            continue;
        }
        if (sscanf(line + 1, "%63s %lf", name, &ms) != 2)
            break;
        if (rows < N && rows < nt)
            TH_CHECKF(t, strcmp(name, names[rows]) == 0 &&
                             fabs(ms - top[rows]) <= 0.0005 + 1e-9 * ms,
                      "row %d: %s %.3f, report %s %.3f", rows, name, ms,
                      names[rows], top[rows]);
        sum += ms;
        rows++;
        line = strchr(line + 1, '\n');
    }
    const char *st = strstr(c->out, "\nstep time ");
    double step = st ? atof(st + 11) * 1e3 : -1;
    TH_CHECKF(t, c->status == 0 && nt == N && rows >= N + 1 &&
                     /* "step time 0.5537 s": to 0.05 ms; each row to
                        0.0005 ms */
                     fabs(sum - step) < 0.05 + 0.0005 * rows,
              "status %d, %d report layers, %d rows summing to %.3f ms, step "
              "%.3f ms: %s",
              c->status, nt, rows, sum, step, c->out);

    th_case(t, "--layers with --quiet, or 0: exit 2");
    th_run(c, "%s run traces/small/tiny2d.json --layers 3 --quiet", th_bin());
    TH_CHECKF(t, c->status == 2 && strstr(c->err, "--layers"), "status %d: %s",
              c->status, c->err);
    th_run(c, "%s run traces/small/tiny2d.json --layers 0", th_bin());
    TH_CHECKF(t, c->status == 2, "status %d: %s", c->status, c->err);
}

/* Terminal columns of a UTF-8 line, for the cases below: CJK ideographs
 * (U+4E00-9FFF, three bytes from 0xE4 to 0xE9) are two, other characters
 * one. */
static int cols_of(const char *s, size_t n)
{
    int c = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char b = (unsigned char)s[i];
        if ((b & 0xC0) == 0x80)
            continue;
        c += (b >= 0xE4 && b <= 0xE9) ? 2 : 1;
    }
    return c;
}

static void cjk_cases(th_ctx *t, th_cmd_result *c)
{
    char path[512];
    snprintf(path, sizeof path, "%s/run-cjk.json", th_tmpdir());
    th_put(path,
           "{\"format\":\"tpuemu-trace/1\",\"name\":\"cjk\",\"system\":\"v3-8\","
           "\"run\":{\"mode\":\"train\",\"global_batch\":8},"
           "\"graph\":{\"inputs\":[{\"name\":\"x\",\"shape\":[32,32,8]}],"
           "\"layers\":[{\"name\":\"雪雪雪\",\"op\":\"conv\",\"in\":\"x\","
           "\"filters\":16,\"kernel\":[3,3]},"
           "{\"name\":\"ab\",\"op\":\"conv\",\"in\":\"雪雪雪\","
           "\"filters\":16,\"kernel\":[3,3]},"
           "{\"name\":\"雪雪雪雪雪雪雪雪雪雪雪雪雪雪雪雪雪雪\",\"op\":\"conv\","
           "\"in\":\"ab\",\"filters\":16,\"kernel\":[3,3]},"
           "{\"name\":\"l\",\"op\":\"loss\",\"in\":\"雪雪雪雪雪雪雪雪雪雪雪雪雪雪雪雪雪雪\","
           "\"kind\":\"l2\"}]}}");
    th_case(t, "run --layers: CJK names take two columns each, and the "
               "columns line up");
    th_run(c, "%s run %s --layers 3", th_bin(), path);
    const char *h = strstr(c->out, "\nlayer ");
    int rows = 0, bad = 0, cut = 0;
    for (const char *l = h ? strchr(h + 1, '\n') : NULL; l && l[1] != '(' &&
                                                       l[1] && l[1] != '\n';
         l = strchr(l + 1, '\n')) {
        /* the name cell (28 columns), a space, "%10.3f": 39 columns to the
         * ms value's last digit */
        const char *eol = strchr(l + 1, '\n');
        size_t len = eol ? (size_t)(eol - l - 1) : strlen(l + 1);
        char line[512];
        snprintf(line, sizeof line, "%.*s", (int)len, l + 1);
        /* the ms value's decimal point: the first '.' before a digit
         * (a cut name ends in "..") */
        const char *dot = line;
        while ((dot = strchr(dot, '.')) && !(dot[1] >= '0' && dot[1] <= '9'))
            dot++;
        if (!dot || cols_of(line, (size_t)(dot + 4 - line)) != 39)
            bad++;
        if (strstr(line, "..") && strstr(line, "雪"))
            cut++;
        rows++;
    }
    TH_CHECKF(t, c->status == 0 && rows == 3 && bad == 0 && cut == 1,
              "status %d, %d rows, %d misaligned, %d cut: %s%s", c->status,
              rows, bad, cut, c->out, c->err);
}

static void name_cases(th_ctx *t, th_cmd_result *c)
{
    char path[512];
    snprintf(path, sizeof path, "%s/run-names.json", th_tmpdir());
    th_put(path,
           "{\"format\":\"tpuemu-trace/1\",\"system\":\"v3-8\",\"run\":{"
           "\"mode\":\"infer\",\"global_batch\":8},\"graph\":{\"inputs\":[{"
           "\"name\":\"x\",\"shape\":[16,16,8]}],\"layers\":[{\"name\":"
           "\"decoder_stage1_upsample_conv_a\",\"op\":\"conv\",\"in\":\"x\","
           "\"filters\":8,\"kernel\":[3,3]},{\"name\":"
           "\"decoder_stage1_upsample_conv_b\",\"op\":\"conv\",\"in\":"
           "\"decoder_stage1_upsample_conv_a\",\"filters\":8,\"kernel\":[3,3]"
           "}]}}");
    th_case(t, "--layers: long names that differ at the end stay apart");
    th_run(c, "%s run %s --layers 2", th_bin(), path);
    const char *a = strstr(c->out, "..e_conv_a"), *b = strstr(c->out,
                                                             "..e_conv_b");
    TH_CHECKF(t, c->status == 0 && a && b, "status %d: %s%s", c->status,
              c->out, c->err);
}

#define TINY3D "traces/small/tiny3d-p4.json"

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static void run_nofit(th_ctx *t)
{
    th_case(t, "run: a step that does not fit (exit 3) writes the report, "
               "not --png/--chrome-trace, and names them on stderr");
    static th_cmd_result c;
    char png[512], chrome[512], rep[512];
    const char *d = th_tmpdir();
    snprintf(png, sizeof png, "%s/nofit.png", d);
    snprintf(chrome, sizeof chrome, "%s/nofit-trace.json", d);
    snprintf(rep, sizeof rep, "%s/nofit-report.json", d);
    remove(png);
    remove(chrome);
    remove(rep);
    th_run(&c,
           "%s run %s --set hbm.capacity_gib=0.001 --png %s --chrome-trace "
           "%s --report %s",
           th_bin(), TINY3D, png, chrome, rep);
    TH_CHECKF(t, c.status == 3, "status %d: %s", c.status, c.err);
    TH_CHECK(t, exists(rep));
    TH_CHECK(t, !exists(png) && !exists(chrome));
    const char *line = strstr(c.err, "tpuemu: not written");
    const char *end = line ? strchr(line, '\n') : NULL;
    TH_CHECKF(t,
              line && end && strstr(line, png) && strstr(line, chrome) &&
                  strstr(line, "--png") && strstr(line, "--chrome-trace") &&
                  strstr(line, png) < end && strstr(line, chrome) < end,
              "stderr: %s", c.err);
    /* the error line comes first, the note is one line, the second; after
     * it only the splits that would fit (2 examples on 4 cores of
     * 1.024 MiB each do not; 1 example on 8 cores of v3-32 does) */
    const char *nl = strchr(c.err, '\n');
    TH_CHECKF(t, strncmp(c.err, "tpuemu: error: ", 15) == 0 && nl &&
                     line == nl + 1 && end && th_fit_notes(end + 1) >= 1,
              "stderr: %s", c.err);

    /* nothing but the report asked for: no note */
    th_run(&c, "%s run %s --set hbm.capacity_gib=0.001 --report %s", th_bin(),
           TINY3D, rep);
    TH_CHECKF(t, c.status == 3 && strstr(c.err, "not written") == NULL,
              "status %d: %s", c.status, c.err);
    /* a run that fits writes them all and says nothing of the kind */
    th_run(&c, "%s run %s --quiet --png %s --chrome-trace %s", th_bin(), TINY3D,
           png, chrome);
    TH_CHECKF(t,
              c.status == 0 && exists(png) && exists(chrome) &&
                  strstr(c.err, "not written") == NULL,
              "status %d: %s", c.status, c.err);

    th_run(&c, "%s run --help", th_bin());
    TH_CHECKF(t,
              c.status == 0 && strstr(c.out, "fits: false; --png, "
                                             "--chrome-trace") != NULL,
              "run --help: %s", c.out);
}

/* A sub-10 ms step keeps four significant digits in run's last line. */
static void run_small_step(th_ctx *t)
{
    th_case(t, "run: a step of tens of microseconds prints four significant "
               "digits (0.0000 s said nothing)");
    char rep[1024];
    snprintf(rep, sizeof rep, "%s/small-step.json", th_tmpdir());
    th_cmd_result c;
    th_run(&c, "%s run traces/functional/conv2d.json --report %s", th_bin(),
           rep);
    const char *p = strstr(c.out, "\nstep time ");
    double shown = p ? atof(p + 11) : 0;
    char *text = th_slurp(rep, NULL);
    const char *q = text ? strstr(text, "\"step_time_s\":") : NULL;
    double real = q ? atof(q + 14) : 0;
    TH_CHECKF(t, c.status == 0 && real > 0 && real < 0.01 &&
                     shown > real * 0.999 && shown < real * 1.001,
              "printed %g, report %g: %s", shown, real, p ? p : c.out);
    free(text);
}

/* 1 when s, drawn at (x, y) at scale 1 in colour col, is what the image
 * holds there (test_chart_text's check). */
static int text_at(const chart_image *im, int x, int y, const char *s,
                   uint32_t col)
{
    return th_text_at(im->rgb, im->w, im->h, x, y, s, col);
}

static void run_text_cases(th_ctx *t, th_cmd_result *c)
{
    th_case(t, "run on v3-2: '1 chip, 2 cores'");
    th_run(c, "%s run %s --system v3-2", th_bin(), TINY);
    TH_CHECKF(t, c->status == 0 && strstr(c->out, ": 1 chip, 2 cores, "),
              "%s", c->out);

    th_case(t, "the breakdown chart's subtitle: '2 cores on 1 chip'");
    static const double cat[CAT_COUNT] = {1e-3, 2e-4, 3e-4, 0, 1e-4, 0};
    emu_result r;
    th_result_make(&r, "sp8", "v3-2", 2, 1, 2, cat, NULL);
    chart_image im = {0};
    tpu_error err = {0};
    if (TH_CHECKF(t, chart_breakdown_image(&r, &im, 1000, 400, &err) ==
                         TPU_OK,
                  "%s", err.msg)) {
        int found = 0;
        for (int y = 14; y < 60 && !found; y++)
            found = text_at(&im, 20, y, "v3-2, 2 cores on 1 chip,",
                            0x606060);
        TH_CHECK(t, found);
        chart_image_free(&im);
    }
    emu_result_free(&r);

    th_case(t, "no-fit message on a 1 MiB core (batchnorm unfused): '1 "
               "activation', no 0.0 part");
    /* unfused, the step recomputes one activation and still does not fit;
     * fused (the default) it recomputes none */
    th_run(c, "%s run %s --set hbm.capacity_gib=0.001 --set "
              "xla.bn_apply_fused=0", th_bin(), TINY);
    TH_CHECKF(t, c->status == 3 &&
                     strstr(c->err, "after recomputing 1 activation (") &&
                     strstr(c->err, "weights+gradients+optimizer ") &&
                     !strstr(c->err, "optimizer 0.0,") &&
                     strstr(c->err, " KiB, activations kept for backward ") &&
                     strstr(c->err, " MiB, workspace "),
              "status %d: %s", c->status, c->err);

    th_case(t, "a no-fit message of GiB figures is as it was (batchnorm "
               "unfused)");
    /* the figures of the unfused step; fused (the default) it needs 29.4
     * GiB after recomputing 1 activation */
    th_run(c, "%s run traces/retinanet-2560-v3-8.json --set "
              "xla.bn_apply_fused=0", th_bin());
    TH_CHECKF(t, c->status == 3 &&
                     strstr(c->err, "(weights+gradients+optimizer 0.4, "
                                    "activations kept for backward 24.8, "
                                    "workspace 4.7 GiB, after recomputing "
                                    "67 activations (8.2 GiB)"),
              "status %d: %s", c->status, c->err);

    th_case(t, "run --help: --no-dedup gives the same figures up to "
               "rounding");
    th_run(c, "%s run --help", th_bin());
    TH_CHECK(t, strstr(c->out, "same figures up to rounding") &&
                    strstr(c->out, "layers[].time_s"));
}

/* A trace's published step time is printed beside the prediction when
 * the trace runs as it is, and not for a what-if of it (another batch
 * is another configuration) nor with --quiet. */
static void published_cases(th_ctx *t, th_cmd_result *c)
{
    const char *tr = "traces/reference/ssd-v3-256.json";
    th_case(t, "a trace's published step time, run as it is: printed with "
               "the prediction's error, before the step time line");
    th_run(c, "%s run %s --no-range", th_bin(), tr);
    const char *p = strstr(c->out, "published step time 0.0232 s for this "
                                   "configuration");
    const char *st = strstr(c->out, "\nstep time ");
    double pred = 0, err = -1;
    char dir[8] = "";
    if (st)
        pred = atof(st + 11);
    if (p)
        sscanf(strstr(p, "the prediction is ") ? strstr(p, "the prediction "
                                                           "is ")
                                               : "",
               "the prediction is %lf%% %7s", &err, dir);
    double want = 100 * (pred - 0.02316) / 0.02316;
    TH_CHECKF(t, c->status == 0 && p && st && p < st && err >= 0 &&
                     fabs((strcmp(dir, "below") ? err : -err) - want) < 0.06,
              "status %d, error %g %s against %g: %s", c->status, err, dir,
              want, c->out);
    th_case(t, "a what-if of the trace, or --quiet: no published time");
    th_run(c, "%s run %s --no-range --batch 512", th_bin(), tr);
    TH_CHECKF(t, c->status == 0 && strstr(c->out, "\nstep time ") &&
                     !strstr(c->out, "published"),
              "%s", c->out);
    th_run(c, "%s run %s --quiet", th_bin(), tr);
    TH_CHECKF(t, c->status == 0 && !strstr(c->out, "published"), "%s",
              c->out);
}

void th_suite_run(th_ctx *t)
{
    th_cmd_result *c = malloc(sizeof *c); /* 72 KiB: not on the stack */
    if (!c)
        return;
    quiet_cases(t);
    option_cases(t);
    host_mem_cases(t);
    run_small_step(t);
    layers_cases(t, c);
    cjk_cases(t, c);
    name_cases(t, c);
    run_nofit(t);
    run_text_cases(t, c);
    published_cases(t, c);
    free(c);
}
