/* tpuemu lower --timed, the listing's marks (recomputation, all-gathers
 * filed as halo) and the Chrome trace's opcode names: the timed figures are the report's, the marks appear
 * exactly when the step has what they mark. */
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/result.h"
#include "firmware/isa.h"
#include "test/harness.h"

#define MAXL 256

/* Per layer name (or "(step)"): the block times of a timed listing. */
typedef struct {
    char name[64];
    double t[CAT_COUNT];
    int blocks;
} lsum;

typedef struct {
    lsum l[MAXL];
    int n;
    int timed_blocks;   /* block comments with a [ ] */
    int bad;            /* lines that did not parse */
    double all[CAT_COUNT];
} timed_list;

static double unit_s(const char *u)
{
    if (strcmp(u, "s") == 0)
        return 1;
    if (strcmp(u, "ms") == 0)
        return 1e-3;
    if (strcmp(u, "us") == 0)
        return 1e-6;
    if (strcmp(u, "ns") == 0)
        return 1e-9;
    return -1;
}

static int cat_index(const char *name)
{
    for (int k = 0; k < CAT_COUNT; k++)
        if (strcmp(emu_cat_name((emu_cat)k), name) == 0)
            return k;
    return -1;
}

static lsum *find_layer(timed_list *tl, const char *name)
{
    for (int i = 0; i < tl->n; i++)
        if (strcmp(tl->l[i].name, name) == 0)
            return &tl->l[i];
    if (tl->n == MAXL)
        return NULL;
    lsum *s = &tl->l[tl->n++];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    return s;
}

/* One block comment "; NAME PHASE...  [T = P%: cat V u, cat V u]". */
static void parse_block(timed_list *tl, const char *line, size_t len)
{
    char buf[1024];
    if (len >= sizeof buf)
        len = sizeof buf - 1;
    memcpy(buf, line, len);
    buf[len] = 0;
    char *br = strstr(buf, "  [");
    if (!br || buf[len - 1] != ']')
        return;
    tl->timed_blocks++;
    char name[64];
    if (sscanf(buf, "; %63s", name) != 1) {
        tl->bad++;
        return;
    }
    lsum *s = find_layer(tl, name);
    if (!s) {
        tl->bad++;
        return;
    }
    s->blocks++;
    buf[len - 1] = 0;
    char *body = br + 3;
    if (strcmp(body, "0 s") == 0)
        return;
    char *cats = strchr(body, ':');
    if (!cats) {
        tl->bad++;
        return;
    }
    for (char *tok = strtok(cats + 1, ","); tok; tok = strtok(NULL, ",")) {
        char cn[32], un[8];
        double v;
        int k;
        if (sscanf(tok, " %31s %lf %7s", cn, &v, un) != 3 ||
            (k = cat_index(cn)) < 0 || unit_s(un) < 0) {
            tl->bad++;
            continue;
        }
        s->t[k] += v * unit_s(un);
        tl->all[k] += v * unit_s(un);
    }
}

static void parse_timed(timed_list *tl, const char *out)
{
    memset(tl, 0, sizeof *tl);
    for (const char *p = out; *p;) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len > 2 && p[0] == ';' && p[1] == ' ' && p[2] != ' ')
            parse_block(tl, p, len);
        p = e ? e + 1 : p + len;
    }
}

static cJSON *load_json(const char *path)
{
    char *buf = th_slurp(path, NULL);
    if (!buf)
        return NULL;
    cJSON *j = cJSON_Parse(buf);
    free(buf);
    return j;
}

/* Printed with 4 significant digits per block: a layer's sum is within
 * the blocks' rounding of the report's figure. */
static int close_to(double got, double want)
{
    return fabs(got - want) <= 6e-4 * fabs(want) + 1e-15;
}

static th_cmd_result c, d;

/* The timed listing of core 0 against the report's layers[]. */
static void layers_match(th_ctx *t, const char *trace, const char *opts)
{
    char rep[512];
    snprintf(rep, sizeof rep, "%s/lt_report.json", th_tmpdir());
    th_run(&c, "%s run %s %s --quiet --report %s", th_bin(), trace, opts, rep);
    if (!TH_CHECKF(t, c.status == 0, "run %s: exit %d %s", trace, c.status,
                   c.err))
        return;
    th_run(&c, "%s lower %s %s --timed", th_bin(), trace, opts);
    if (!TH_CHECKF(t, c.status == 0 && strlen(c.out) < sizeof c.out - 1,
                   "lower --timed %s: exit %d (%zu bytes) %s", trace, c.status,
                   strlen(c.out), c.err))
        return;
    static timed_list tl;
    parse_timed(&tl, c.out);
    TH_CHECKF(t, tl.bad == 0 && tl.timed_blocks > 5,
              "%s: %d timed blocks, %d unparsed", trace, tl.timed_blocks,
              tl.bad);
    cJSON *r = load_json(rep);
    if (!TH_CHECK(t, r != NULL))
        return;
    cJSON *layers = cJSON_GetObjectItem(r, "layers");
    int figures = 0, wrong = 0, nonzero = 0;
    cJSON *L;
    cJSON_ArrayForEach(L, layers)
    {
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(L, "name"));
        cJSON *ts = cJSON_GetObjectItem(L, "time_s");
        lsum *s = name ? find_layer(&tl, name) : NULL;
        for (int k = 0; k < CAT_COUNT && s; k++) {
            cJSON *v = cJSON_GetObjectItem(ts, emu_cat_name((emu_cat)k));
            double want = v ? v->valuedouble : -1;
            figures++;
            nonzero += want > 0;
            if (!close_to(s->t[k], want)) {
                if (wrong++ < 3)
                    TH_FAIL(t, "%s: %s %s: lower --timed %.6g s, report %.6g s",
                            trace, name, emu_cat_name((emu_cat)k), s->t[k],
                            want);
            }
        }
    }
    TH_CHECKF(t, figures > 20 && nonzero > 5 && wrong == 0,
              "%s: %d figures (%d non-zero), %d differ", trace, figures,
              nonzero, wrong);
    /* every block together is core 0's step, by category */
    cJSON *bd = cJSON_GetObjectItem(
        cJSON_GetArrayItem(cJSON_GetObjectItem(r, "per_core"), 0),
        "breakdown_s");
    for (int k = 0; k < CAT_COUNT; k++) {
        cJSON *v = cJSON_GetObjectItem(bd, emu_cat_name((emu_cat)k));
        TH_CHECKF(t, v && close_to(tl.all[k], v->valuedouble),
                  "%s core 0 %s: blocks %.6g s, report %.6g s", trace,
                  emu_cat_name((emu_cat)k), tl.all[k],
                  v ? v->valuedouble : -1);
    }
    cJSON_Delete(r);
}

/* The listing without --timed is the timed one less its timed header
 * lines and bracketed times. */
static void same_program(th_ctx *t, const char *trace, const char *opts)
{
    th_run(&c, "%s lower %s %s", th_bin(), trace, opts);
    th_run(&d, "%s lower %s %s --timed", th_bin(), trace, opts);
    if (!TH_CHECKF(t, c.status == d.status, "exit %d untimed, %d timed",
                   c.status, d.status))
        return;
    const char *bc = strstr(c.out, "\n\n"), *bd = strstr(d.out, "\n\n");
    if (!TH_CHECK(t, bc && bd))
        return;
    /* the untimed header opens the timed one */
    TH_CHECKF(t, strncmp(c.out, d.out, (size_t)(bc - c.out)) == 0,
              "%s: headers differ", trace);
    static char strip[65536];
    size_t o = 0;
    for (const char *p = bd; *p && o + 2 < sizeof strip;) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        const char *br = NULL;
        if (len && p[0] == ';' && p[len - 1] == ']') {
            for (const char *q = p; q + 3 <= p + len; q++)
                if (q[0] == ' ' && q[1] == ' ' && q[2] == '[')
                    br = q;
        }
        size_t keep = br ? (size_t)(br - p) : len;
        if (o + keep + 2 >= sizeof strip)
            break;
        memcpy(strip + o, p, keep);
        o += keep;
        if (e)
            strip[o++] = '\n';
        p = e ? e + 1 : p + len;
    }
    strip[o] = 0;
    TH_CHECKF(t, strcmp(strip, bc) == 0,
              "%s: the timed listing's program differs from lower's", trace);
}

static int count_lines_with(const char *out, const char *s)
{
    int n = 0;
    for (const char *p = out; (p = strstr(p, s)) != NULL; p += strlen(s))
        n++;
    return n;
}

static void remat_cases(th_ctx *t)
{
    static const char tr[] = "traces/small/tiny2d.json";
    /* 1.1 MiB: the step fits only by recomputing; default: it fits */
    static const char *const caps[] = {"--set hbm.capacity_gib=0.0011", ""};
    char rep[512];
    snprintf(rep, sizeof rep, "%s/lt_remat.json", th_tmpdir());
    for (int i = 0; i < 2; i++) {
        th_run(&c, "%s run %s %s --quiet --report %s", th_bin(), tr, caps[i],
               rep);
        cJSON *r = load_json(rep);
        cJSON *rb = r ? cJSON_GetObjectItem(r, "hbm_remat_bytes") : NULL;
        /* the report leaves the key out when nothing is recomputed */
        double remat = rb ? rb->valuedouble : r ? 0 : -1;
        cJSON_Delete(r);
        if (!TH_CHECKF(t, c.status == 0 && remat >= 0, "run %s: exit %d %s",
                       caps[i], c.status, c.err))
            continue;
        th_run(&d, "%s lower %s %s --timed", th_bin(), tr, caps[i]);
        int n = -1;
        const char *h = strstr(d.out, "; recomputed (xla.remat): ");
        if (h)
            sscanf(h, "; recomputed (xla.remat): %d", &n);
        int marked = count_lines_with(d.out, ": recompute (xla.remat dropped");
        TH_CHECKF(t, d.status == 0 && (remat > 0) == (h != NULL) &&
                         (remat > 0) == (marked > 0),
                  "%s: run recomputes %.0f B; lower: header %s, %d marked "
                  "passes", caps[i], remat, h ? "present" : "absent", marked);
        if (remat > 0) {
            TH_CHECKF(t, n == marked, "header says %d, %d passes marked", n,
                      marked);
            /* the recompute pass is timed (a vector pass is never free) */
            const char *m = strstr(d.out, ": recompute (xla.remat dropped");
            const char *e = m ? strchr(m, '\n') : NULL;
            TH_CHECKF(t, e && e[-1] == ']' && strncmp(e - 4, "0 s]", 4) != 0,
                      "the recompute block's time: %.60s", m ? m : "(none)");
        }
        /* nothing else mentions it without recomputation */
        if (remat == 0)
            TH_CHECKF(t, strstr(d.out, "recompute") == NULL,
                      "lower mentions a recompute the step does not do");
    }
    th_case(t, "lower --timed of a step that does not fit: listed, untimed, "
               "exit 3 as run");
    th_run(&c, "%s lower %s --set hbm.capacity_gib=0.0009765625 --timed",
           th_bin(), tr);
    TH_CHECKF(t, c.status == 3 && strstr(c.out, "; not timed: ") &&
                     count_lines_with(c.out, "  [") == 0 &&
                     strstr(c.out, "mxu.matmul"),
              "exit %d: %.200s", c.status, c.out);
}

static void chrome_cases(th_ctx *t)
{
    char path[512];
    snprintf(path, sizeof path, "%s/lt_chrome.json", th_tmpdir());
    for (int steps = 1; steps <= 3; steps += 2) {
        if (steps == 1)
            th_run(&c, "%s run traces/small/tiny2d.json --quiet "
                       "--chrome-trace %s", th_bin(), path);
        else
            th_run(&c, "%s run traces/small/tiny2d.json --quiet --functional "
                       "--steps 3 --chrome-trace %s", th_bin(), path);
        cJSON *doc = c.status == 0 ? load_json(path) : NULL;
        if (!TH_CHECKF(t, doc != NULL, "run --chrome-trace: exit %d %s",
                       c.status, c.err))
            continue;
        int strs = 0, other = 0, allreduce = 0, unknown = 0;
        cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItem(doc, "traceEvents"))
        {
            cJSON *op = cJSON_GetObjectItem(cJSON_GetObjectItem(e, "args"),
                                            "opcode");
            if (!op)
                continue;
            const char *s = cJSON_GetStringValue(op);
            if (!s) {
                other++;
                continue;
            }
            strs++;
            int known = 0;
            for (int k = 0; k < FW_OP_COUNT; k++)
                known |= strcmp(s, fw_op_name((fw_op)k)) == 0;
            unknown += !known;
            allreduce += strcmp(s, "ici.allreduce") == 0;
        }
        TH_CHECKF(t, strs > 50 && other == 0 && unknown == 0 && allreduce > 0,
                  "opcodes: %d strings (%d ici.allreduce, %d not a mnemonic), "
                  "%d not strings", strs, allreduce, unknown, other);
        cJSON *od = cJSON_GetObjectItem(doc, "otherData");
        cJSON *st = cJSON_GetObjectItem(od, "steps");
        const char *tl =
            cJSON_GetStringValue(cJSON_GetObjectItem(od, "timeline"));
        TH_CHECKF(t, st && st->valueint == steps && tl &&
                         strstr(tl, "one step") &&
                         (steps == 1) == (strstr(tl, "same") == NULL),
                  "otherData steps %d (want %d), timeline %s",
                  st ? st->valueint : -1, steps, tl ? tl : "(none)");
        cJSON_Delete(doc);
    }
}

void th_suite_lower_timed(th_ctx *t)
{
    th_case(t, "lower --timed: a layer's blocks sum to the report's layers[], "
               "all blocks to core 0's breakdown");
    layers_match(t, "traces/small/tiny2d.json", "");
    layers_match(t, "traces/small/tiny3d-p4.json", "");
    layers_match(t, "traces/small/tiny2d.json",
                 "--system v3-32 --batch 64 --set hbm.bandwidth_gbs=200");

    th_case(t, "lower --timed --core N: the blocks sum to core N's breakdown");
    {
        char rep[512];
        snprintf(rep, sizeof rep, "%s/lt_core.json", th_tmpdir());
        th_run(&c, "%s run traces/small/tiny3d-p4.json --quiet --report %s",
               th_bin(), rep);
        th_run(&d, "%s lower traces/small/tiny3d-p4.json --core 3 --timed",
               th_bin());
        cJSON *r = load_json(rep);
        static timed_list tl;
        parse_timed(&tl, d.out);
        cJSON *bd = cJSON_GetObjectItem(
            cJSON_GetArrayItem(cJSON_GetObjectItem(r, "per_core"), 3),
            "breakdown_s");
        int ok = r && bd && d.status == 0 && tl.bad == 0 &&
                 strstr(d.out, "; core 3: step ");
        for (int k = 0; ok && k < CAT_COUNT; k++) {
            cJSON *v = cJSON_GetObjectItem(bd, emu_cat_name((emu_cat)k));
            ok = v && close_to(tl.all[k], v->valuedouble);
            TH_CHECKF(t, ok, "core 3 %s: blocks %.6g s, report %.6g s",
                      emu_cat_name((emu_cat)k), tl.all[k],
                      v ? v->valuedouble : -1);
        }
        TH_CHECKF(t, ok || !r, "exit %d %s", d.status, d.err);
        cJSON_Delete(r);
    }

    th_case(t, "lower --timed lists the same program as lower (only the "
               "header and the [ ] times added)");
    same_program(t, "traces/small/tiny2d.json", "");
    same_program(t, "traces/small/tiny3d-p4.json", "--core 2");
    same_program(t, "traces/small/tiny2d.json", "--set hbm.capacity_gib=0.0011");

    th_case(t, "recompute (xla.remat) marked exactly when run reports it; "
               "the header counts the marked passes");
    remat_cases(t);

    th_case(t, "an all-gather says the report files it under halo; the "
               "header names the operands' units");
    th_run(&c, "%s lower traces/functional/chunks.json", th_bin());
    int g = count_lines_with(c.out, "ici.allgather"),
        h = count_lines_with(c.out, "the report files it under halo");
    TH_CHECKF(t, c.status == 0 && g > 0 && g == h,
              "%d all-gathers, %d say halo", g, h);
    TH_CHECK(t, strstr(c.out, "from_lo=, from_hi= are bytes") &&
                    strstr(c.out, "ops_x100= ops per element x100") &&
                    strstr(c.out, "group=0 partition group"));
    th_run(&c, "%s lower --help", th_bin());
    TH_CHECKF(t, c.status == 0 && strstr(c.out, "docs/FIRMWARE.md") &&
                     strstr(c.out, "--timed") && !strstr(c.out, "isa.h"),
              "lower --help: %.300s", c.out);

    th_case(t, "Chrome trace: args.opcode is the listing's mnemonic; "
               "otherData says how many steps the timeline stands for");
    chrome_cases(t);
}
