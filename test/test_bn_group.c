/* run.batchnorm_group: a distributed batchnorm's statistics span a group
 * of replicas (MLPerf ResNet-50's --distributed_group_size).  Values: 8
 * one-core replicas whose batchnorm spans all 8 compute what one 8-core
 * replica computes with its batch split by rows (both normalise over the
 * same 8 examples), and not what 8 independent replicas compute.  Time:
 * two all-reduces per batchnorm that a per-replica batchnorm does not
 * pay.  Bad input: a group that does not divide the replicas. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test/harness.h"

/* A small f32 net with a batchnorm on v3-8, global batch 8: `run` is the
 * run section's extra keys. */
static void write_net(const char *path, const char *run)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return;
    fprintf(f,
            "{\"format\": \"tpuemu-trace/1\", \"name\": \"bn-group\", "
            "\"system\": \"v3-8\", \"run\": {\"mode\": \"train\", "
            "\"global_batch\": 8%s}, "
            "\"graph\": {\"inputs\": [{\"name\": \"image\", \"shape\": "
            "[8, 6, 3], \"dtype\": \"f32\"}], \"layers\": ["
            "{\"name\": \"conv\", \"op\": \"conv\", \"in\": \"image\", "
            "\"filters\": 4, \"kernel\": [3, 3], \"dtype\": \"f32\"}, "
            "{\"name\": \"bn\", \"op\": \"batchnorm\", \"in\": \"conv\", "
            "\"dtype\": \"f32\"}, "
            "{\"name\": \"relu\", \"op\": \"relu\", \"in\": \"bn\", "
            "\"dtype\": \"f32\"}, "
            "{\"name\": \"flat\", \"op\": \"flatten\", \"in\": \"relu\", "
            "\"dtype\": \"f32\"}, "
            "{\"name\": \"logits\", \"op\": \"dense\", \"in\": \"flat\", "
            "\"units\": 5, \"dtype\": \"f32\"}, "
            "{\"name\": \"loss\", \"op\": \"loss\", \"kind\": "
            "\"softmax_xent\", \"in\": \"logits\", \"dtype\": \"f32\"}]}}\n",
            run);
    fclose(f);
}

/* The loss --functional prints after `steps` steps; NAN when none. */
static double loss_of(const char *path, int steps)
{
    th_cmd_result c;
    th_run(&c, "%s run %s --functional --steps %d --no-range", th_bin(), path,
           steps);
    const char *l = c.status == 0 ? strstr(c.out, "functional: ") : NULL;
    const char *k = l ? strstr(l, " loss ") : NULL;
    return k ? atof(k + 6) : NAN;
}

void th_suite_bn_group(th_ctx *t)
{
    char grp[512], one[512], split[512];
    snprintf(grp, sizeof grp, "%s/bn-group.json", th_tmpdir());
    snprintf(one, sizeof one, "%s/bn-one.json", th_tmpdir());
    snprintf(split, sizeof split, "%s/bn-split.json", th_tmpdir());
    write_net(grp, ", \"num_cores_per_replica\": 1, \"batchnorm_group\": 8");
    write_net(one, ", \"num_cores_per_replica\": 1");
    write_net(split, ", \"num_cores_per_replica\": 8, "
                     "\"input_partition_dims\": [[1, 8, 1, 1], null]");

    th_case(t, "values: 8 replicas with one batchnorm group train as one "
               "8-core replica, not as 8 separate batchnorms");
    for (int steps = 1; steps <= 3; steps += 2) {
        double a = loss_of(grp, steps), b = loss_of(split, steps),
               c = loss_of(one, steps);
        TH_CHECKF(t, isfinite(a) && isfinite(b) && isfinite(c),
                  "steps %d: losses %g %g %g", steps, a, b, c);
        TH_CHECKF(t, fabs(a - b) <= 1e-5 * fabs(b),
                  "steps %d: grouped %.9g, one replica %.9g", steps, a, b);
        TH_CHECKF(t, fabs(a - c) > 1e-4 * fabs(c),
                  "steps %d: grouped %.9g equals per-replica %.9g", steps, a,
                  c);
    }

    th_case(t, "time: two all-reduces per batchnorm (forward statistics, "
               "backward sums), charged to allreduce");
    th_cmd_result c;
    th_run(&c, "%s lower %s", th_bin(), grp);
    int n = 0;
    for (const char *p = c.out; (p = strstr(p, "ici.allreduce")); p++)
        n += strstr(p, "group=2") && strstr(p, "group=2") < strchr(p, '\n');
    TH_CHECKF(t, c.status == 0 && n == 2, "status %d, %d group=2 all-reduces:\n%s",
              c.status, n, c.out);
    double tg = -1, t1 = -1;
    th_run(&c, "%s run %s --quiet", th_bin(), grp);
    tg = atof(c.out);
    th_run(&c, "%s run %s --quiet", th_bin(), one);
    t1 = atof(c.out);
    TH_CHECKF(t, tg > t1 && t1 > 0, "grouped %g s, per replica %g s", tg, t1);

    th_case(t, "a group that does not divide the replicas: exit 2, the key and "
               "the counts named");
    write_net(grp, ", \"num_cores_per_replica\": 1, \"batchnorm_group\": 3");
    th_run(&c, "%s run %s", th_bin(), grp);
    TH_CHECKF(t, c.status == 2 && strstr(c.err, "run.batchnorm_group: 3") &&
                     strstr(c.err, "8 replicas"),
              "status %d: %s", c.status, c.err);
    write_net(grp, ", \"num_cores_per_replica\": 1, \"batchnorm_group\": 0");
    th_run(&c, "%s run %s", th_bin(), grp);
    TH_CHECKF(t, c.status == 2 && strstr(c.err, "run.batchnorm_group"),
              "status %d: %s", c.status, c.err);
}
