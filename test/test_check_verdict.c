/* check's verdict and table: a change of any size printed bounded and in
 * aligned columns; a step faster than the tolerance passes but asks to
 * re-record the baseline; exactly at the tolerance is within it; --set
 * values compared as numbers; the tolerance's range and digits. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

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

static void table_cases(th_ctx *t)
{
    char tiny[512], one[512], slow[512], fast[512], edge[512], odd[512];
    char big[512], bigfast[512];
    emu_result r;
    th_cmd_result *c = malloc(sizeof *c);
    if (!c)
        return;

    make_flat(&r, 8, "v3-8", 1e-300, 1);
    save(t, &r, "check-verdict-tiny.json", tiny, sizeof tiny);
    make_flat(&r, 8, "v3-8", 1, 1);
    save(t, &r, "check-verdict-one.json", one, sizeof one);
    make_flat(&r, 8, "v3-8", 1.10, 1); /* NEW one.json is -9.09% */
    save(t, &r, "check-verdict-slow.json", slow, sizeof slow);
    make_flat(&r, 8, "v3-8", 0.99, 1); /* -1%: within */
    save(t, &r, "check-verdict-fast.json", fast, sizeof fast);
    make_flat(&r, 8, "v3-8", 0.98, 1); /* -2%: at the tolerance */
    save(t, &r, "check-verdict-edge.json", edge, sizeof edge);
    make_flat(&r, 8, "v3-8", 1, 0.7); /* odd cores -30%, step unchanged */
    save(t, &r, "check-verdict-odd.json", odd, sizeof odd);
    /* v3-2048, odd cores 10% slower: a long group label */
    make_flat(&r, 2048, "v3-2048", 1, 1);
    save(t, &r, "check-verdict-big.json", big, sizeof big);
    make_flat(&r, 2048, "v3-2048", 1, 1.1);
    save(t, &r, "check-verdict-bigslow.json", bigfast, sizeof bigfast);

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
    save(t, &r, "check-verdict-small.json", sm, sizeof sm);
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
        save(t, &a, "check-verdict-mix.json", mix, sizeof mix);
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

/* Eight identical cores on v3-8, every one stepping in step_s (all mxu). */
static void flat_result(emu_result *r, double step_s)
{
    const double cat[CAT_COUNT] = {[CAT_MXU] = step_s};
    th_result_make(r, "flat", "v3-8", 8, 1, 8, cat, NULL);
}

static void save_flat(th_ctx *t, double step_s, const char *name, char *path,
                      size_t cap)
{
    emu_result r;
    flat_result(&r, step_s);
    th_result_save(t, &r, name, path, cap);
    emu_result_free(&r);
}

static void tolerance_cases(th_ctx *t)
{
    char b[512], n[512];
    th_cmd_result *c = malloc(sizeof *c);
    if (!c)
        return;

    th_case(t, "check: a slowdown of exactly the tolerance passes whatever "
               "the magnitude (1 -> 1.02 s and 0.1 -> 0.102 s alike), "
               "printed as the tolerance");
    {
        static const double scales[] = {1e-5, 0.1, 1, 30};
        static const double tols[] = {0.02, 0.07, 0.1};
        for (size_t i = 0; i < sizeof scales / sizeof scales[0]; i++)
            for (size_t k = 0; k < sizeof tols / sizeof tols[0]; k++) {
                /* The decimal a user reads as exactly +tol: 1.02, 0.107 */
                char dec[64], tt[32];
                snprintf(dec, sizeof dec, "%.6g", scales[i] * (1 + tols[k]));
                save_flat(t, scales[i], "tb.json", b, sizeof b);
                save_flat(t, strtod(dec, NULL), "tn.json", n, sizeof n);
                snprintf(tt, sizeof tt, "%g", tols[k]);
                th_run(c, "%s check --baseline %s %s --tolerance %s",
                       th_bin(), b, n, tt);
                char want[64];
                snprintf(want, sizeof want, "within %.2f%%", 100 * tols[k]);
                TH_CHECKF(t, c->status == 0 && strstr(c->out, want) &&
                                 !strstr(c->out, "000000"),
                          "%g -> %s at %s: status %d: %s%s", scales[i], dec,
                          tt, c->status, c->out, c->err);
            }
        save_flat(t, 1.0, "tb.json", b, sizeof b);
        save_flat(t, 1.02, "tn.json", n, sizeof n);
        th_run(c, "%s check --baseline %s %s --tolerance 0.02", th_bin(), b,
               n);
        TH_CHECKF(t, c->status == 0 &&
                         strstr(c->out, "(+2.00%; slowest-changing core "
                                        "+2.00%), within 2.00%"),
                  "status %d: %s%s", c->status, c->out, c->err);
    }

    th_case(t, "check: just past the tolerance (+1e-7) is a regression and "
               "reads past it");
    {
        save_flat(t, 1.0, "tb.json", b, sizeof b);
        save_flat(t, 1.0200001, "tn.json", n, sizeof n);
        th_run(c, "%s check --baseline %s %s --tolerance 0.02", th_bin(), b,
               n);
        double shown = 0, tolshown = 0;
        const char *p = strstr(c->out, "(+");
        const char *q = strstr(c->out, "tolerance ");
        TH_CHECKF(t, c->status == 1 && p && q &&
                         sscanf(p, "(+%lf", &shown) == 1 &&
                         sscanf(q, "tolerance %lf", &tolshown) == 1 &&
                         shown > tolshown,
                  "status %d: %s", c->status, c->out);
    }

    th_case(t, "check: --set values compared as numbers (900, 900.0, 9e2), "
               "--freeze lists as sets (c1,bn = bn,c1)");
    {
        static const char *const v900[][2] = {{"hbm.bandwidth_gbs", "900"}};
        static const char *const v9000[][2] = {{"hbm.bandwidth_gbs", "900.0"}};
        static const char *const v9e2[][2] = {{"hbm.bandwidth_gbs", "9e2"}};
        static const char *const v901[][2] = {{"hbm.bandwidth_gbs", "901"}};
        char x[512], y[512];
        th_result_whatif(t, "w1.json", x, sizeof x, v900, 1, "c1,bn");
        th_result_whatif(t, "w2.json", y, sizeof y, v9000, 1, "bn,c1");
        th_run(c, "%s check --baseline %s %s", th_bin(), x, y);
        TH_CHECKF(t, c->status == 0 && !strstr(c->out, "note:"),
                  "status %d: %s%s", c->status, c->out, c->err);
        th_result_whatif(t, "w2.json", y, sizeof y, v9e2, 1, "bn,c1,c1");
        th_run(c, "%s check --baseline %s %s", th_bin(), x, y);
        TH_CHECKF(t, c->status == 0 && !strstr(c->out, "note:"),
                  "status %d: %s%s", c->status, c->out, c->err);
        /* a real difference is still a note, each kind */
        th_result_whatif(t, "w2.json", y, sizeof y, v901, 1, "c1");
        th_run(c, "%s check --baseline %s %s", th_bin(), x, y);
        TH_CHECKF(t, c->status == 0 &&
                         strstr(c->out, "note: hbm.bandwidth_gbs: BASE 900, "
                                        "NEW 901\n") &&
                         strstr(c->out, "note: --freeze: BASE c1,bn, NEW "
                                        "c1\n"),
                  "status %d: %s%s", c->status, c->out, c->err);
        th_result_whatif(t, "w2.json", y, sizeof y, v900, 1, "c1,bn,conv*");
        th_run(c, "%s check --baseline %s %s", th_bin(), x, y);
        TH_CHECKF(t, strstr(c->out, "note: --freeze: BASE c1,bn, NEW "
                                    "c1,bn,conv*\n") &&
                         !strstr(c->out, "hbm.bandwidth"),
                  "status %d: %s%s", c->status, c->out, c->err);
    }

    th_case(t, "check: --tolerance -0.1 says [0, 1); 0.999999999 is printed "
               "exactly, not as 100.00%");
    {
        save_flat(t, 1.0, "tb.json", b, sizeof b);
        save_flat(t, 1.02, "tn.json", n, sizeof n);
        th_run(c, "%s check --baseline %s %s --tolerance -0.1", th_bin(), b,
               n);
        TH_CHECKF(t, c->status == 2 && strstr(c->err, "[0, 1)") &&
                         !strstr(c->err, "[0, 1]"),
                  "status %d: %s", c->status, c->err);
        th_run(c, "%s check --baseline %s %s --tolerance 0.999999999",
               th_bin(), b, n);
        TH_CHECKF(t, c->status == 0 && strstr(c->out, "within 99.9999999%") &&
                         strstr(c->out, "(+2.00%;"),
                  "status %d: %s%s", c->status, c->out, c->err);
        th_run(c, "%s check --baseline %s %s --tolerance 0.0199999",
               th_bin(), b, n);
        TH_CHECKF(t, c->status == 1 && strstr(c->out, "tolerance 1.99999%"),
                  "status %d: %s%s", c->status, c->out, c->err);
    }
    free(c);
}

void th_suite_check_verdict(th_ctx *t)
{
    table_cases(t);
    tolerance_cases(t);
}
