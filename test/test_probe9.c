/* Probe round 9 (a new user's own networks), the run table's part:
 *
 *  - a step whose weights, gradients and optimizer state alone exceed a
 *    core's HBM says that spatial partitioning does not split weights
 *    (a user asking "how should I partition it" would sweep splits in
 *    vain), and a step whose activations are the problem does not;
 *  - where the small-batch layout (xla.conv_pad) multiplies the matrix
 *    units' work, the table says by how much, against the model's FLOPs
 *    per core (it set a V-Net's step 17x over its folded time and the
 *    run only said the rule applied);
 *  - `run --layers N` lists the layers core 0 spends most time in, as the
 *    report's layers[] has them, and the column sums to the step time
 *    (the user had to read the report's JSON to find a slow layer);
 *  - terminal tables count East Asian wide characters as two columns
 *    ("雪" is one character, two columns), so CJK names line up too.
 */
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test/harness.h"

/* A dense layer of 4096 x 524288 weights (2.1e9): 4 GiB of bf16 weights,
 * far more with gradients and momentum, on 4 cores per replica. */
static const char *const heavy =
    "{\"format\":\"tpuemu-trace/1\",\"name\":\"heavy\",\"system\":\"v3-8\","
    "\"run\":{\"mode\":\"train\",\"global_batch\":2,"
    "\"num_cores_per_replica\":4,\"input_partition_dims\":[[1,2,2,1],null]},"
    "\"graph\":{\"inputs\":[{\"name\":\"x\",\"shape\":[32,32,4]}],"
    "\"layers\":[{\"name\":\"c\",\"op\":\"conv\",\"in\":\"x\",\"filters\":4,"
    "\"kernel\":[3,3]},{\"name\":\"f\",\"op\":\"flatten\",\"in\":\"c\"},"
    "\"d\":null}}";

static void nofit_cases(th_ctx *t, th_cmd_result *c)
{
    char path[512];
    snprintf(path, sizeof path, "%s/heavy.json", th_tmpdir());
    /* the dense layer goes in place of the placeholder */
    char text[1024];
    const char *ph = strstr(heavy, "\"d\":null}");
    snprintf(text, sizeof text, "%.*s{\"name\":\"d\",\"op\":\"dense\","
             "\"in\":\"f\",\"units\":524288},{\"name\":\"l\",\"op\":\"loss\","
             "\"in\":\"d\",\"kind\":\"softmax_xent\",\"dtype\":\"f32\"}]}}",
             (int)(ph - heavy), heavy);
    th_put(path, text);

    th_case(t, "weights alone too large: the split cannot help, said so");
    th_run(c, "%s run %s", th_bin(), path);
    TH_CHECKF(t, c->status == 3, "status %d, stderr %s", c->status, c->err);
    TH_CHECKF(t, strstr(c->err, "spatial partitioning does not split "
                                "weights") != NULL,
              "stderr: %s", c->err);

    th_case(t, "activations too large: no word about weights");
    th_run(c, "%s run traces/retinanet-2560-v3-8.json", th_bin());
    TH_CHECKF(t, c->status == 3 && strstr(c->err, "needs 29.9 GiB"),
              "status %d, stderr %s", c->status, c->err);
    TH_CHECKF(t, strstr(c->err, "split weights") == NULL, "stderr: %s",
              c->err);
}

static void padding_cases(th_ctx *t, th_cmd_result *c)
{
    const char *unet = "traces/reference/unet3d-128-v3-8.json";
    th_case(t, "the layout's multiplier on the MXU's work is printed");
    th_run(c, "%s run %s", th_bin(), unet);
    const char *l = strstr(c->out, "the matrix units of core 0 compute ");
    double x = 0;
    TH_CHECKF(t, c->status == 0 && l &&
                     sscanf(l, "the matrix units of core 0 compute %lf", &x) ==
                         1,
              "status %d, stdout %s", c->status, c->out);
    /* 4 examples padded to 8 (2x) on 32- and 64-channel 3x3x3 layers whose
     * taps each fill 128 lanes: between 2x and the 1-channel stem's 128x */
    TH_CHECKF(t, x > 2 && x < 16, "multiplier %g", x);

    th_case(t, "no padding, no line; a full batch of 8, no line");
    th_run(c, "%s run %s --set xla.conv_pad=0", th_bin(), unet);
    TH_CHECKF(t, c->status == 0 && !strstr(c->out, "the matrix units of"),
              "status %d, stdout %s", c->status, c->out);
    th_run(c, "%s run traces/reference/retinanet-1280-v3-8.json", th_bin());
    TH_CHECKF(t, c->status == 0 && strstr(c->out, "xla.conv_pad") &&
                     !strstr(c->out, "the matrix units of"),
              "status %d, stdout %s", c->status, c->out);
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
    snprintf(rep, sizeof rep, "%s/p9-layers.json", th_tmpdir());
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
    const char *st = strstr(c->out, "step time ");
    double step = st ? atof(st + 10) * 1e3 : -1;
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
    snprintf(path, sizeof path, "%s/p9-cjk.json", th_tmpdir());
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

void th_suite_probe9(th_ctx *t)
{
    th_cmd_result *c = malloc(sizeof *c);
    if (!c)
        return;
    nofit_cases(t, c);
    padding_cases(t, c);
    layers_cases(t, c);
    cjk_cases(t, c);
    free(c);
}
