/* check names the layers that moved: after "cores 0-7 SLOWER, hbm_stall
 * grew" a CI user's next question is where.  The reports' layers[] (core
 * 0's critical path per layer) of BASE and NEW, when they name the same
 * layers, give the largest changes in seconds, each with the category that
 * moved most; nothing when the layers differ (the note says so) or when
 * no table is printed (within the tolerance). */
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test/harness.h"

/* The layer whose total time moved most between two reports' layers[],
 * and its change; -1 when the reports cannot be read. */
static int largest_move(const char *pb, const char *pn, char *name,
                        size_t cap, double *d)
{
    char *tb = th_slurp(pb, NULL), *tn = th_slurp(pn, NULL);
    cJSON *b = tb ? cJSON_Parse(tb) : NULL, *n = tn ? cJSON_Parse(tn) : NULL;
    free(tb);
    free(tn);
    const cJSON *lb = cJSON_GetObjectItemCaseSensitive(b, "layers");
    const cJSON *ln = cJSON_GetObjectItemCaseSensitive(n, "layers");
    int best = -1, i = 0;
    double bd = 0;
    const cJSON *eb, *en = ln ? ln->child : NULL;
    cJSON_ArrayForEach(eb, lb)
    {
        if (!en)
            break;
        double sb = 0, sn = 0;
        const cJSON *v;
        cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(eb, "time_s"))
            sb += v->valuedouble;
        cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(en, "time_s"))
            sn += v->valuedouble;
        if (fabs(sn - sb) > fabs(bd)) {
            bd = sn - sb;
            best = i;
            snprintf(name, cap, "%s",
                     cJSON_GetObjectItemCaseSensitive(eb, "name")->valuestring);
        }
        en = en->next;
        i++;
    }
    cJSON_Delete(b);
    cJSON_Delete(n);
    *d = bd;
    return best;
}

void th_suite_check_layers(th_ctx *t)
{
    th_cmd_result *c = malloc(sizeof *c);
    if (!c)
        return;
    /* BASE is run here, not read from baselines/: a committed report of
     * another version of the model differs from NEW in more than the one
     * setting the cases change.  xla.conv_pad_min_features alone moves the
     * stem conv1 (3 channels) between 0.0035 s folded and 0.085 s padded
     * tap by tap, an MXU move that would outweigh every layer's HBM stall
     * here. */
    char base[512], slow[512], ren[512];
    snprintf(base, sizeof base, "%s/cl-base.json", th_tmpdir());
    snprintf(slow, sizeof slow, "%s/cl-slow.json", th_tmpdir());
    snprintf(ren, sizeof ren, "%s/cl-renamed.json", th_tmpdir());

    th_case(t, "a regression names the layer that moved most first, with "
               "its largest category");
    th_run(c, "%s run traces/reference/retinanet-1280-v3-8.json --report %s "
              "--quiet",
           th_bin(), base);
    TH_CHECKF(t, c->status == 0, "base: status %d: %s", c->status, c->err);
    th_run(c, "%s run traces/reference/retinanet-1280-v3-8.json --set "
              "hbm.bandwidth_gbs=225 --report %s --quiet",
           th_bin(), slow);
    th_run(c, "%s check --baseline %s %s", th_bin(), base, slow);
    char name[64] = "";
    double d = 0;
    int best = largest_move(base, slow, name, sizeof name, &d);
    const char *h = strstr(c->out, "\ncore 0's layers that moved most (5 of ");
    const char *row = h ? strchr(h + 1, '\n') : NULL;
    char got[64] = "", cat[32] = "";
    double sb = 0, sn = 0, dc = 0;
    char pc[32];
    int n = row ? sscanf(row + 1, " %63s %lf %lf %31s %31s %lf", got, &sb, &sn,
                         pc, cat, &dc)
                : 0;
    TH_CHECKF(t, c->status == 1 && best >= 0 && n == 6 &&
                     strcmp(got, name) == 0 &&
                     fabs((sn - sb) - d) <= 1e-5 * fabs(d) + 1e-9,
              "status %d, report says %s %+g s, check's first row %d fields "
              "%s %g -> %g: %s",
              c->status, name, d, n, got, sb, sn, c->out);
    /* halving HBM bandwidth and nothing else: the largest category move
     * is hbm_stall (res3a_branch1's, +0.003 s, its stall doubled) */
    TH_CHECKF(t, strcmp(cat, "hbm_stall") == 0 && dc > 0, "category %s %g",
              cat, dc);

    th_case(t, "the same the other way round: FASTER, the layers too");
    th_run(c, "%s check --baseline %s %s", th_bin(), slow, base);
    TH_CHECKF(t, c->status == 0 &&
                     strstr(c->out, "core 0's layers that moved most") &&
                     strstr(c->out, name),
              "status %d: %s", c->status, c->out);

    th_case(t, "within the tolerance: no table, no layers");
    th_run(c, "%s check --baseline %s %s", th_bin(), base, base);
    TH_CHECKF(t, c->status == 0 && !strstr(c->out, "layers that moved"),
              "status %d: %s", c->status, c->out);

    th_case(t, "layers that differ: the note, no layer rows");
    th_run(c, "sed 's/\"name\": \"conv1\"/\"name\": \"convX\"/' %s > %s && "
              "%s check --baseline %s %s",
           slow, ren, th_bin(), base, ren);
    TH_CHECKF(t, c->status == 1 && strstr(c->out, "the layers differ") &&
                     !strstr(c->out, "layers that moved"),
              "status %d: %s%s", c->status, c->out, c->err);
    free(c);
}
