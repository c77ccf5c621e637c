/* tpuemu validate over a directory of traces written here: sorted rows,
 * a broken trace is a row with its error (exit 2) while the others still
 * run, the printed error matches predicted vs published, and the last
 * line is the mean absolute error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test/harness.h"

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static const char *last_line(const char *s)
{
    size_t n = strlen(s);
    while (n > 0 && s[n - 1] == '\n')
        n--;
    while (n > 0 && s[n - 1] != '\n')
        n--;
    return s + n;
}

void th_suite_check_validate(th_ctx *t)
{
    char dir[512], path[600], rep[600];
    th_cmd_result c;
    snprintf(dir, sizeof dir, "%s/validate", th_tmpdir());
    th_run(&c, "mkdir -p %s", dir);
    snprintf(path, sizeof path, "%s/b-tiny.json", dir);
    write_text(path,
               "{\"format\": \"tpuemu-trace/1\", \"name\": \"tiny-conv\", "
               "\"system\": \"v3-8\", \"run\": {\"mode\": \"train\", "
               "\"global_batch\": 8, \"num_cores_per_replica\": 1}, "
               "\"reference\": {\"step_time_s\": 0.001, \"source\": "
               "\"made up for the test\"}, "
               "\"graph\": {\"inputs\": [{\"name\": \"image\", \"shape\": "
               "[32, 32, 8]}], \"layers\": [{\"name\": \"c\", \"op\": "
               "\"conv\", \"in\": \"image\", \"filters\": 8, \"kernel\": "
               "[3, 3]}, {\"name\": \"l\", \"op\": \"loss\", \"kind\": "
               "\"l2\", \"in\": \"c\"}]}}\n");
    snprintf(path, sizeof path, "%s/a-broken.json", dir);
    write_text(path, "{\"format\": \"tpuemu-trace/1\"");
    snprintf(rep, sizeof rep, "%s/validation.json", th_tmpdir());

    th_case(t, "rows in file order, broken trace listed, exit 2");
    th_run(&c, "%s validate --dir %s --report %s", th_bin(), dir, rep);
    TH_CHECKF(t, c.status == 2, "status %d: %s", c.status, c.err);
    const char *a = strstr(c.out, "a-broken.json");
    const char *b = strstr(c.out, "tiny-conv");
    TH_CHECKF(t, a && b && a < b, "out: %s", c.out);
    TH_CHECKF(t, strncmp(last_line(c.out), "mean absolute error: ", 21) == 0,
              "last line: %s", last_line(c.out));
    th_run(&c, "grep -c tpuemu-validation/1 %s", rep);
    TH_CHECKF(t, c.status == 0, "no JSON summary");

    th_case(t, "a running trace: error % is predicted vs published");
    remove(path);
    th_run(&c, "%s validate --dir %s", th_bin(), dir);
    {
        TH_CHECKF(t, c.status == 0, "status %d: %s", c.status, c.err);
        double pred = 0, pub = 0, err = 0;
        const char *row = strstr(c.out, "tiny-conv");
        TH_CHECKF(t, row && sscanf(row, "tiny-conv - v3-8 %*d %*d %lf %lf %lf", &pred,
                                   &pub, &err) == 3,
                  "row: %s", c.out);
        TH_CHECK(t, pub == 0.001 && pred > 0);
        TH_CHECKF(t, err > 100 * (pred - pub) / pub - 0.06 &&
                         err < 100 * (pred - pub) / pub + 0.06,
                  "error %g for %g vs %g", err, pred, pub);
        double mae = -1;
        TH_CHECK(t, sscanf(last_line(c.out), "mean absolute error: %lf%%",
                           &mae) == 1 &&
                        mae > (err < 0 ? -err : err) - 0.06 &&
                        mae < (err < 0 ? -err : err) + 0.06);
    }

    th_case(t, "the published order of every pair: kept, and a pair the "
               "wrong way round named");
    {
        /* The same conv on a bigger input is slower: published faster
         * (made up) it is a pair out of order; published slower, in order. */
        char odir[400];
        snprintf(odir, sizeof odir, "%s/order", th_tmpdir());
        th_run(&c, "mkdir -p %s", odir);
        for (int k = 0; k < 2; k++) {
            for (int big = 0; big < 2; big++) {
                snprintf(path, sizeof path, "%s/%s.json", odir,
                         big ? "big" : "small");
                char text[1024];
                snprintf(text, sizeof text,
                         "{\"format\": \"tpuemu-trace/1\", \"name\": "
                         "\"%s\", \"system\": \"v3-8\", \"run\": "
                         "{\"mode\": \"train\", \"global_batch\": 8}, "
                         "\"reference\": {\"step_time_s\": %s, \"source\": "
                         "\"made up\"}, \"graph\": {\"inputs\": [{\"name\": "
                         "\"x\", \"shape\": [%d, %d, 8]}], \"layers\": "
                         "[{\"name\": \"c\", \"op\": \"conv\", \"in\": "
                         "\"x\", \"filters\": 8, \"kernel\": [3, 3]}, "
                         "{\"name\": \"l\", \"op\": \"loss\", \"kind\": "
                         "\"l2\", \"in\": \"c\"}]}}\n",
                         big ? "big" : "small",
                         big == k ? "0.001" : "0.002", big ? 128 : 16,
                         big ? 128 : 16);
                write_text(path, text);
            }
            th_run(&c, "%s validate --dir %s", th_bin(), odir);
            TH_CHECKF(t, c.status == 0, "status %d: %s", c.status, c.err);
            if (k == 1) /* big published faster: the wrong way round */
                TH_CHECKF(t,
                          strstr(c.out, "order: big (v3-8) is published "
                                        "faster than small (v3-8)") &&
                              strstr(c.out, "order 0 of 1 pairs"),
                          "out: %s", c.out);
            else
                TH_CHECKF(t,
                          !strstr(c.out, "published faster") &&
                              strstr(c.out, "order 1 of 1 pairs"),
                          "out: %s", c.out);
            TH_CHECKF(t,
                      strncmp(last_line(c.out), "mean absolute error: ",
                              21) == 0,
                      "last line: %s", last_line(c.out));
        }
    }

    th_case(t, "the seeds keep their published trends (every pair in the "
               "published order: 2560 faster than 1280, 256^3 on 128 cores "
               "faster than 128^3 on v3-8)");
    {
        char seeds[600];
        snprintf(seeds, sizeof seeds, "%s/seeds", th_tmpdir());
        th_run(&c,
               "mkdir -p %s && grep -l '\"family\": \"seed\"' "
               "traces/reference/*.json | xargs -I F cp F %s/",
               seeds, seeds);
        th_run(&c, "%s validate --dir %s", th_bin(), seeds);
        int in = -1, of = -2;
        const char *o = strstr(c.out, "order: the predictions order ");
        TH_CHECKF(t, c.status == 0 && o &&
                         sscanf(o, "order: the predictions order %d of %d",
                                &in, &of) == 2 &&
                         in == of && of >= 5 &&
                         !strstr(c.out, "published faster than"),
                  "status %d: %s", c.status, c.out);
    }

    th_case(t, "an empty or missing directory: exit 2");
    th_run(&c, "%s validate --dir %s/nope", th_bin(), dir);
    TH_CHECK(t, c.status == 2 && strstr(c.err, "tpuemu: error:") &&
                    strstr(c.err, "No such file"));

    th_case(t, "a trace that does not fit: a row saying so with the "
               "figures, left out of the mean and the pairs, exit 3; a bad "
               "trace beside it makes it 2");
    {
        char ndir[400], tiny[600];
        snprintf(ndir, sizeof ndir, "%s/nofit", th_tmpdir());
        th_run(&c, "mkdir -p %s", ndir);
        snprintf(tiny, sizeof tiny, "%s/b-tiny.json", dir);
        th_run(&c, "cp %s %s/", tiny, ndir);
        /* 64Ki x 64Ki dense: 8 GiB of bf16 weights, 48 GiB with gradients
         * and optimizer state: no v3 core holds it. */
        snprintf(path, sizeof path, "%s/a-huge.json", ndir);
        write_text(path,
                   "{\"format\": \"tpuemu-trace/1\", \"name\": \"huge\", "
                   "\"system\": \"v3-8\", \"run\": {\"mode\": \"train\", "
                   "\"global_batch\": 8}, \"reference\": {\"step_time_s\": "
                   "0.0001, \"source\": \"made up\"}, \"graph\": "
                   "{\"inputs\": [{\"name\": \"x\", \"shape\": [65536]}], "
                   "\"layers\": [{\"name\": \"d\", \"op\": \"dense\", "
                   "\"in\": \"x\", \"units\": 65536}, {\"name\": \"l\", "
                   "\"op\": \"loss\", \"kind\": \"l2\", \"in\": "
                   "\"d\"}]}}\n");
        th_run(&c, "%s validate --dir %s", th_bin(), ndir);
        TH_CHECKF(t, c.status == 3, "status %d: %s%s", c.status, c.out,
                  c.err);
        const char *row = strstr(c.out, "\nhuge ");
        TH_CHECKF(t, row && strstr(row, "does not fit") &&
                         strstr(row, "a-huge.json: needs 48.0 GiB") &&
                         strstr(row, "core has 16 GiB") &&
                         strstr(row, "does not fit") <
                             strchr(row + 1, '\n'),
                  "out: %s", c.out);
        /* The mean is tiny-conv's alone; no pair (the other has no
         * prediction). */
        double err = 0, mae = -1;
        row = strstr(c.out, "tiny-conv");
        TH_CHECKF(t, row && sscanf(row, "tiny-conv - v3-8 %*d %*d %*f %*f %lf",
                                   &err) == 1,
                  "out: %s", c.out);
        TH_CHECKF(t, sscanf(last_line(c.out), "mean absolute error: %lf%%",
                            &mae) == 1 &&
                         mae > (err < 0 ? -err : err) - 0.06 &&
                         mae < (err < 0 ? -err : err) + 0.06 &&
                         strstr(last_line(c.out),
                                "1 trace with a published figure that does "
                                "not fit left out"),
                  "mae %g, error %g: %s", mae, err, c.out);
        TH_CHECKF(t, !strstr(c.out, "pairs"), "out: %s", c.out);
        snprintf(path, sizeof path, "%s/c-broken.json", ndir);
        write_text(path, "{");
        th_run(&c, "%s validate --dir %s", th_bin(), ndir);
        TH_CHECKF(t, c.status == 2 && strstr(c.out, "tiny-conv"),
                  "status %d: %s%s", c.status, c.out, c.err);
    }

    th_case(t, "without --dir, from another directory: the reference "
               "traces next to the binary; none there: every path tried, "
               "with the reason");
    {
        char other[512];
        const char *bin = th_bin_abs();
        snprintf(other, sizeof other, "%s/elsewhere", th_tmpdir());
        th_run(&c, "mkdir -p %s && cd %s && %s validate --no-range", other, other,
               bin);
        TH_CHECKF(t, c.status == 0 && strstr(c.out, "unet3d-256"),
                  "status %d: %s%s", c.status, c.out, c.err);
        th_run(&c, "cp %s %s/tpuemu && cd %s && ./tpuemu validate", bin,
               other, other);
        TH_CHECKF(t, c.status == 2 &&
                         strstr(c.err, "tried traces/reference (No such "
                                       "file or directory)") &&
                         strstr(c.err, "/elsewhere/traces/reference (") &&
                         strstr(c.err, "--dir"),
                  "status %d: %s", c.status, c.err);
    }
}
