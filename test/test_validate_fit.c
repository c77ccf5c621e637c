/* tpuemu validate's summaries and its fitting tool, on traces written
 * here: the mean absolute error per family, the same-code ratio of a row
 * against its baseline, --set, and --fit with leave-one-family-out
 * cross-validation (a family whose published figures were made at one
 * value must be predicted at that value by the other families' choice
 * only when they agree with it). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test/harness.h"

#define FIT_KEY "mxu.op_overhead_cycles"
#define FIT_HIGH "200000"

/* A one-conv trace of `batch` examples on v3-8; reference fields appended
 * when pub > 0. */
static void write_trace(const char *path, const char *name, int batch,
                        double pub, const char *family, const char *base)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return;
    fprintf(f,
            "{\"format\": \"tpuemu-trace/1\", \"name\": \"%s\", "
            "\"system\": \"v3-8\", \"run\": {\"mode\": \"train\", "
            "\"global_batch\": %d, \"num_cores_per_replica\": 1}, ",
            name, batch);
    if (pub > 0) {
        fprintf(f, "\"reference\": {\"step_time_s\": %.9g, \"source\": \"t\"",
                pub);
        if (family)
            fprintf(f, ", \"family\": \"%s\"", family);
        if (base)
            fprintf(f, ", \"baseline\": \"%s\"", base);
        fprintf(f, "}, ");
    }
    fprintf(f, "\"graph\": {\"inputs\": [{\"name\": \"image\", \"shape\": "
               "[32, 32, 64]}], \"layers\": [{\"name\": \"c\", \"op\": "
               "\"conv\", \"in\": \"image\", \"filters\": 64, \"kernel\": "
               "[3, 3]}, {\"name\": \"l\", \"op\": \"loss\", \"kind\": "
               "\"l2\", \"in\": \"c\"}]}}\n");
    fclose(f);
}

/* The step `run --quiet` prints for path, with an optional --set. */
static double step_of(const char *path, const char *set)
{
    th_cmd_result c;
    th_run(&c, "%s run %s --quiet%s%s", th_bin(), path, set ? " --set " : "",
           set ? set : "");
    return c.status == 0 ? atof(c.out) : -1;
}

/* The row of `name`: its predicted and published step and error. */
static int row_of(const char *out, const char *name, double *pred,
                  double *pub, double *err)
{
    char key[80];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *r = strstr(out, key);
    return r && sscanf(r + 1, "%*s %*s %*s %*d %*d %lf %lf %lf", pred, pub,
                       err) == 3;
}

void th_suite_validate_fit(th_ctx *t)
{
    char dir[512], a1[600], a2[600], b1[600];
    th_cmd_result c;
    snprintf(dir, sizeof dir, "%s/validate-fit", th_tmpdir());
    th_run(&c, "rm -rf %s && mkdir -p %s", dir, dir);
    snprintf(a1, sizeof a1, "%s/a1.json", dir);
    snprintf(a2, sizeof a2, "%s/a2.json", dir);
    snprintf(b1, sizeof b1, "%s/b1.json", dir);

    /* Family "a" was "published" at the default (0 cycles), family "b"
     * at FIT_HIGH; a2 runs twice a1's batch. */
    write_trace(a1, "a-one", 8, 0, NULL, NULL);
    write_trace(a2, "a-two", 16, 0, NULL, NULL);
    write_trace(b1, "b-one", 8, 0, NULL, NULL);
    double ta1 = step_of(a1, NULL), ta2 = step_of(a2, NULL);
    double tb1 = step_of(b1, FIT_KEY "=" FIT_HIGH);
    th_case(t, "the what-if moves the step (the fit below has something to "
               "tell apart)");
    TH_CHECKF(t, ta1 > 0 && tb1 > ta1 * 1.05, "%g %g", ta1, tb1);
    /* a1's figure 10% above its prediction, a2's exact: the ratio of a2
     * over a1 is then predicted 1.1x the published one's inverse... */
    write_trace(a1, "a-one", 8, ta1 * 1.1, "a", NULL);
    write_trace(a2, "a-two", 16, ta2, "a", "a-one");
    write_trace(b1, "b-one", 8, tb1, "b", NULL);

    th_case(t, "per family: the mean of its rows' absolute errors");
    th_run(&c, "%s validate --dir %s", th_bin(), dir);
    {
        double p1, q1, e1, p2, q2, e2, pb, qb, eb, fa = -1, fb = -1;
        TH_CHECKF(t, c.status == 0 && row_of(c.out, "a-one", &p1, &q1, &e1) &&
                         row_of(c.out, "a-two", &p2, &q2, &e2) &&
                         row_of(c.out, "b-one", &pb, &qb, &eb),
                  "status %d: %s%s", c.status, c.out, c.err);
        const char *fl = strstr(c.out, "family a ");
        const char *gl = strstr(c.out, "family b ");
        TH_CHECKF(t, fl && gl &&
                         sscanf(fl, "family a %*d rows, mean absolute "
                                    "error %lf",
                                &fa) == 1 &&
                         sscanf(gl, "family b %*d row , mean absolute "
                                    "error %lf",
                                &fb) == 1,
                  "out: %s", c.out);
        TH_CHECKF(t, fabs(fa - (fabs(e1) + fabs(e2)) / 2) < 0.1 &&
                         fabs(fb - fabs(eb)) < 0.1 && fabs(e1 + 9.1) < 0.1,
                  "family a %g (rows %g %g), b %g (row %g)", fa, e1, e2, fb,
                  eb);

        th_case(t, "same-code ratio: work per core per second against the "
                   "baseline, predicted and published");
        const char *rl = strstr(c.out, "ratio a-two / a-one");
        double rp = 0, rq = 0, re = 0;
        TH_CHECKF(t, rl && sscanf(rl, "ratio a-two / a-one %lf %lf %lf", &rp,
                                  &rq, &re) == 3,
                  "out: %s", c.out);
        /* a2 does twice a1's work per core per step */
        TH_CHECKF(t, fabs(rp - 2 * p1 / p2) < 2e-3 &&
                         fabs(rq - 2 * q1 / q2) < 2e-3 &&
                         fabs(re - 100 * (rp - rq) / rq) < 0.2,
                  "ratio %g %g %g from %g %g %g %g", rp, rq, re, p1, p2, q1,
                  q2);
    }

    th_case(t, "--set runs every trace under the what-if");
    th_run(&c, "%s validate --dir %s --set " FIT_KEY "=" FIT_HIGH, th_bin(),
           dir);
    {
        double p, q, e;
        TH_CHECKF(t, c.status == 0 && row_of(c.out, "b-one", &p, &q, &e) &&
                         fabs(e) < 0.05,
                  "status %d: %s%s", c.status, c.out, c.err);
    }

    th_case(t, "--fit: per value, and each family left out chooses by the "
               "others");
    th_run(&c, "%s validate --dir %s --fit " FIT_KEY "=0," FIT_HIGH,
           th_bin(), dir);
    TH_CHECKF(t, c.status == 0 &&
                     strstr(c.out, "without a          the others choose " FIT_KEY
                                   "=" FIT_HIGH) &&
                     strstr(c.out, "without b          the others choose " FIT_KEY
                                   "=0") &&
                     strstr(c.out, "leave-one-family-out mean absolute error"),
              "status %d: %s%s", c.status, c.out, c.err);

    th_case(t, "--fit and --set refuse what run --set refuses, exit 2");
    th_run(&c, "%s validate --dir %s --fit " FIT_KEY, th_bin(), dir);
    TH_CHECKF(t, c.status == 2 && strstr(c.err, "expected KEY=V1,V2"),
              "status %d: %s", c.status, c.err);
    th_run(&c, "%s validate --dir %s --fit no.such.key=1,2", th_bin(), dir);
    TH_CHECKF(t, c.status == 2 && strstr(c.err, "no.such.key"),
              "status %d: %s", c.status, c.err);
    th_run(&c, "%s validate --dir %s --fit " FIT_KEY "=0,-5", th_bin(), dir);
    TH_CHECKF(t, c.status == 2 && strstr(c.err, "-5"), "status %d: %s",
              c.status, c.err);
    th_run(&c, "%s validate --dir %s --set " FIT_KEY, th_bin(), dir);
    TH_CHECKF(t, c.status == 2 && strstr(c.err, "expected KEY=VALUE"),
              "status %d: %s", c.status, c.err);

    th_case(t, "a baseline that names no trace is said so, not a crash");
    write_trace(a2, "a-two", 16, ta2, "a", "nobody");
    th_run(&c, "%s validate --dir %s", th_bin(), dir);
    TH_CHECKF(t, c.status == 0 &&
                     strstr(c.out, "its baseline 'nobody' is no trace"),
              "status %d: %s", c.status, c.out);

    th_case(t, "--jobs 1 and worker processes print, report and exit the "
               "same, byte for byte, with a bad and a too-large trace among "
               "the rows");
    {
        char bad[600], big[600], r1[600], r3[600];
        snprintf(bad, sizeof bad, "%s/c-bad.json", dir);
        snprintf(big, sizeof big, "%s/d-big.json", dir);
        snprintf(r1, sizeof r1, "%s/../validate-jobs1.json", dir);
        snprintf(r3, sizeof r3, "%s/../validate-jobs3.json", dir);
        th_put(bad, "{\"format\": \"tpuemu-trace/1\", \"graph\": [}\n");
        th_put(big, "{\"format\": \"tpuemu-trace/1\", \"name\": \"big\", "
                    "\"system\": \"v3-8\", \"run\": {\"mode\": \"train\", "
                    "\"global_batch\": 64}, \"reference\": {\"step_time_s\": "
                    "1, \"source\": \"t\", \"family\": \"b\"}, \"graph\": "
                    "{\"inputs\": [{\"name\": \"x\", \"shape\": [4096, "
                    "4096, 64]}], \"layers\": [{\"name\": \"c\", \"op\": "
                    "\"conv\", \"in\": \"x\", \"filters\": 256, \"kernel\": "
                    "[3, 3]}, {\"name\": \"l\", \"op\": \"loss\", \"kind\": "
                    "\"l2\", \"in\": \"c\"}]}}\n");
        th_cmd_result c1, c3;
        th_run(&c1, "%s validate --dir %s --jobs 1 --report %s", th_bin(), dir,
               r1);
        th_run(&c3, "%s validate --dir %s --jobs 3 --report %s", th_bin(), dir,
               r3);
        char *j1 = th_slurp(r1, NULL), *j3 = th_slurp(r3, NULL);
        TH_CHECKF(t, c1.status == 2 && strstr(c1.out, "does not fit") &&
                         strstr(c1.err, "c-bad.json"),
                  "status %d: %s%s", c1.status, c1.out, c1.err);
        TH_CHECKF(t, c3.status == c1.status && !strcmp(c1.out, c3.out) &&
                         !strcmp(c1.err, c3.err) && j1 && j3 &&
                         !strcmp(j1, j3),
                  "--jobs 1 [%s%s] against --jobs 3 [%s%s]", c1.out, c1.err,
                  c3.out, c3.err);
        free(j1);
        free(j3);
    }
    th_run(&c, "rm -rf %s", dir);
}
