/* tpuemu check, probe round 7 findings 3 and 4:
 *  - an extreme ratio (a baseline scaled by 1e-300) printed its change cut
 *    to 38 digits without a %; now a bounded e-notation, and every column
 *    of the table is as wide as its widest entry (a long core-group label
 *    no longer shifts its row);
 *  - an improvement beyond the tolerance said "within 2.00%"; now it says
 *    faster by more than the tolerance, asks to re-record the baseline and
 *    shows what got faster (categories marked "shrank"), exit still 0. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test/harness.h"

/* n cores (2 per chip, one-core replicas), every category of core i
 * cat[k] * scale * (odd core ? odd : 1). */
static void make_flat(emu_result *r, int n, const char *system, double scale,
                      double odd)
{
    static const double cat[CAT_COUNT] = {0.5, 0.2, 0.1, 0.01, 0.05, 0.04};
    double even_s[CAT_COUNT], odd_s[CAT_COUNT];
    for (int k = 0; k < CAT_COUNT; k++) {
        even_s[k] = cat[k] * scale;
        odd_s[k] = cat[k] * scale * odd;
    }
    th_result_make(r, "flat", system, n, 1, n, even_s, odd_s);
}

static void save(th_ctx *t, emu_result *r, const char *name, char *path,
                 size_t cap)
{
    th_result_save(t, r, name, path, cap);
    emu_result_free(r);
}

/* The table's rows are aligned: every line from the header on (to the
 * first blank line or "... and") ends its change cell where the header's
 * "change" ends, and that cell is a bounded percentage that reads back as
 * the true change (within 1%), "from 0", or "+0.00%"-like.  Returns the
 * number of rows checked, -1 on a failure (reported). */
static int check_table(th_ctx *t, const char *out)
{
    const char *h = strstr(out, "\nwhat ");
    if (!TH_CHECKF(t, h != NULL, "no table: %s", out))
        return -1;
    h++;
    const char *e = strstr(h, "change");
    if (!TH_CHECKF(t, e && e < strchr(h, '\n'), "no change header: %s", out))
        return -1;
    size_t end = (size_t)(e - h) + 6; /* column just past the cell */
    int rows = 0;
    for (const char *l = strchr(h, '\n') + 1; *l && *l != '\n';
         l = strchr(l, '\n') + 1) {
        if (strncmp(l, "...", 3) == 0)
            break;
        size_t len = strcspn(l, "\n");
        if (!TH_CHECKF(t, len >= end && (l[end] == ' ' || l[end] == '\n') &&
                              l[end - 1] != ' ',
                       "row not aligned with the header (change ends at "
                       "%zu): %.*s\n%s",
                       end, (int)len, l, out))
            return -1;
        /* the cells: what (may hold spaces), base, new, change */
        if (strncmp(l + end - 6, "from 0", 6) == 0 ||
            strncmp(l + end - 6, "no fit", 6) == 0) {
            rows++;
            continue;
        }
        size_t cs = end;
        while (cs > 0 && l[cs - 1] != ' ')
            cs--;
        char cell[64];
        size_t cl = end - cs;
        if (!TH_CHECKF(t, cl < 18, "change cell of %zu chars: %.*s", cl,
                       (int)len, l))
            return -1;
        memcpy(cell, l + cs, cl);
        cell[cl] = 0;
        size_t ns = cs - 1;
        while (ns > 0 && l[ns - 1] == ' ')
            ns--;
        size_t nb = ns;
        while (nb > 0 && l[nb - 1] != ' ')
            nb--;
        size_t bs = nb - 1;
        while (bs > 0 && l[bs - 1] == ' ')
            bs--;
        size_t bb = bs;
        while (bb > 0 && l[bb - 1] != ' ')
            bb--;
        double base = strtod(l + bb, NULL), now = strtod(l + nb, NULL);
        char *pe = NULL;
        double shown = strtod(cell, &pe);
        if (!TH_CHECKF(t, pe && *pe == '%' && pe[1] == 0,
                       "change cell '%s' is not a percentage: %.*s", cell,
                       (int)len, l))
            return -1;
        if (base > 0) {
            /* the table shows 6 digits of each time: compare loosely */
            double want = 100 * (now - base) / base;
            TH_CHECKF(t, fabs(shown - want) <= 0.01 * fabs(want) + 0.01,
                      "change %s but %g -> %g is %+g%%: %.*s", cell, base,
                      now, want, (int)len, l);
        }
        rows++;
    }
    return rows;
}

void th_suite_check_probe7(th_ctx *t)
{
    char tiny[512], one[512], slow[512], fast[512], edge[512], odd[512];
    char big[512], bigfast[512];
    emu_result r;
    th_cmd_result *c = malloc(sizeof *c);
    if (!c)
        return;

    make_flat(&r, 8, "v3-8", 1e-300, 1);
    save(t, &r, "p7-tiny.json", tiny, sizeof tiny);
    make_flat(&r, 8, "v3-8", 1, 1);
    save(t, &r, "p7-one.json", one, sizeof one);
    make_flat(&r, 8, "v3-8", 1.10, 1); /* NEW one.json is -9.09% */
    save(t, &r, "p7-slow.json", slow, sizeof slow);
    make_flat(&r, 8, "v3-8", 0.99, 1); /* -1%: within */
    save(t, &r, "p7-fast.json", fast, sizeof fast);
    make_flat(&r, 8, "v3-8", 0.98, 1); /* -2%: at the tolerance */
    save(t, &r, "p7-edge.json", edge, sizeof edge);
    make_flat(&r, 8, "v3-8", 1, 0.7); /* odd cores -30%, step unchanged */
    save(t, &r, "p7-odd.json", odd, sizeof odd);
    /* v3-2048, odd cores 10% slower: a long group label */
    make_flat(&r, 2048, "v3-2048", 1, 1);
    save(t, &r, "p7-big.json", big, sizeof big);
    make_flat(&r, 2048, "v3-2048", 1, 1.1);
    save(t, &r, "p7-bigslow.json", bigfast, sizeof bigfast);

    th_case(t, "a baseline scaled by 1e-300: the change is bounded "
               "(+1.00e+302%) and right in every row");
    th_run(c, "%s check --baseline %s %s", th_bin(), tiny, one);
    TH_CHECKF(t, c->status == 1, "status %d: %s%s", c->status, c->out,
              c->err);
    TH_CHECKF(t, strstr(c->out, "(+1.00e+302%), tolerance 2.00%"),
              "summary: %s", c->out);
    TH_CHECKF(t, check_table(t, c->out) == 1 + 1 + CAT_COUNT, "rows: %s",
              c->out);

    th_case(t, "the other way (-100.00%) and a 1e-4 baseline stay in plain "
               "decimals");
    th_run(c, "%s check --baseline %s %s", th_bin(), one, tiny);
    TH_CHECKF(t, c->status == 0 && strstr(c->out, "(-100.00%;"),
              "status %d: %s%s", c->status, c->out, c->err);
    TH_CHECKF(t, check_table(t, c->out) > 0, "%s", c->out);
    make_flat(&r, 8, "v3-8", 1e-4, 1);
    char sm[512];
    save(t, &r, "p7-small.json", sm, sizeof sm);
    th_run(c, "%s check --baseline %s %s", th_bin(), sm, one);
    TH_CHECKF(t, c->status == 1 && strstr(c->out, "(+999900.00%)"),
              "status %d: %s%s", c->status, c->out, c->err);
    TH_CHECKF(t, check_table(t, c->out) > 0, "%s", c->out);

    th_case(t, "a long core-group label widens its column; rows stay "
               "aligned");
    th_run(c, "%s check --baseline %s %s", th_bin(), big, bigfast);
    TH_CHECKF(t, c->status == 1 && strstr(c->out, "(1024 cores)"),
              "status %d: %s%s", c->status, c->out, c->err);
    TH_CHECKF(t, check_table(t, c->out) == 1 + 1 + CAT_COUNT, "rows: %s",
              c->out);

    th_case(t, "faster by more than the tolerance: exit 0, says so, asks "
               "to re-record the baseline, shows what shrank");
    th_run(c, "%s check --baseline %s %s", th_bin(), slow, one);
    TH_CHECKF(t, c->status == 0, "status %d: %s%s", c->status, c->out,
              c->err);
    TH_CHECKF(t, strncmp(c->out, "ok: ", 4) == 0 &&
                     strstr(c->out, "(-9.09%; slowest-changing core -9.09%), "
                                    "faster than the baseline by more than "
                                    "2.00%: re-record the baseline") &&
                     strstr(c->out, "make rebaseline") &&
                     !strstr(c->out, "within"),
              "out: %s", c->out);
    TH_CHECKF(t, check_table(t, c->out) == 1 + 1 + CAT_COUNT, "rows: %s",
              c->out);
    {
        const char *st = strstr(c->out, "\nstep time ");
        const char *mx = strstr(c->out, "\n  mxu ");
        const char *ha = strstr(c->out, "\n  halo ");
        TH_CHECKF(t, st && strstr(st, "FASTER") &&
                         strstr(st, "FASTER") < strchr(st + 1, '\n'),
                  "step row: %s", c->out);
        /* mxu -0.05 s of a 1.1 s step: well past a quarter of 2% */
        TH_CHECKF(t, mx && strstr(mx, "shrank") &&
                         strstr(mx, "shrank") < strchr(mx + 1, '\n'),
                  "mxu row: %s", c->out);
        /* halo -0.001 s: under a quarter of the tolerance, not marked */
        TH_CHECKF(t, ha && (!strstr(ha, "shrank") ||
                            strstr(ha, "shrank") > strchr(ha + 1, '\n')),
                  "halo row: %s", c->out);
    }

    th_case(t, "faster within the tolerance, or exactly at it: 'within', "
               "one line");
    th_run(c, "%s check --baseline %s %s", th_bin(), one, fast);
    TH_CHECKF(t, c->status == 0 && strstr(c->out, "), within 2.00%\n") &&
                     !strstr(c->out, "faster") && !strstr(c->out, "\nwhat"),
              "status %d: %s%s", c->status, c->out, c->err);
    th_run(c, "%s check --baseline %s %s", th_bin(), one, edge);
    TH_CHECKF(t, c->status == 0 &&
                     strstr(c->out, "(-2.00%; slowest-changing core -2.00%), "
                                    "within 2.00%\n") &&
                     !strstr(c->out, "faster"),
              "status %d: %s%s", c->status, c->out, c->err);
    th_run(c, "%s check --baseline %s %s --tolerance 0.2", th_bin(), slow,
           one);
    TH_CHECKF(t, c->status == 0 && strstr(c->out, "within 20.00%\n") &&
                     !strstr(c->out, "faster"),
              "status %d: %s%s", c->status, c->out, c->err);

    th_case(t, "step time unchanged, some cores faster beyond the "
               "tolerance: says so, lists them");
    th_run(c, "%s check --baseline %s %s", th_bin(), one, odd);
    TH_CHECKF(t, c->status == 0 &&
                     strstr(c->out, "fastest-changing core -30.00%), within "
                                    "2.00% for the step time, but a core is "
                                    "faster than the baseline by more than "
                                    "2.00%: re-record the baseline") &&
                     strstr(c->out, "\ncores 1,3,5,7 "),
              "status %d: %s%s", c->status, c->out, c->err);
    TH_CHECKF(t, check_table(t, c->out) == 1 + 1 + CAT_COUNT, "rows: %s",
              c->out);

    th_case(t, "a regression table marks categories that shrank past a "
               "quarter of the tolerance");
    {
        /* odd cores: mxu +0.2 s, vector -0.1 s: +10% net, SLOWER */
        emu_result a;
        make_flat(&a, 8, "v3-8", 1, 1);
        for (int i = 1; i < 8; i += 2) {
            a.per_core[i].breakdown_s[CAT_MXU] += 0.2;
            a.per_core[i].breakdown_s[CAT_VECTOR] -= 0.1;
            a.per_core[i].step_time_s += 0.1;
        }
        a.step_time_s += 0.1;
        char mix[512];
        save(t, &a, "p7-mix.json", mix, sizeof mix);
        th_run(c, "%s check --baseline %s %s", th_bin(), one, mix);
        const char *v = strstr(c->out, "\n  vector ");
        const char *m = strstr(c->out, "\n  mxu ");
        TH_CHECKF(t, c->status == 1 && v && m && strstr(v, "shrank") &&
                         strstr(v, "shrank") < strchr(v + 1, '\n') &&
                         strstr(m, "grew") < strchr(m + 1, '\n'),
                  "status %d: %s%s", c->status, c->out, c->err);
    }
    free(c);
}
