/* tpuemu check — the performance gate (SPEC.md, issue 7).
 *
 * A regression is NEW slower than BASE by more than the tolerance in the
 * step time or in any core's step time, or NEW no longer fitting where
 * BASE did.  Exit 1 then, with a table of what got slower; exit 0 with a
 * one-line summary otherwise; exit 2 when a report cannot be read or the
 * two do not describe the same run (trace, system, core count).
 *
 * Cores with identical figures in both reports are shown as one group
 * ("cores 0-7"): data-parallel replicas usually are, so a v3-1024 report
 * reads as a handful of rows rather than two thousand. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/cli.h"
#include "emu/report.h"

#define CHECK_MAX_GROUPS_SHOWN 8

static const char usage_text[] =
    "usage: tpuemu check --baseline BASE.json NEW.json [--tolerance FRAC]\n"
    "\n"
    "Compares two reports of the same trace on the same system (written by\n"
    "`tpuemu run --report`).  A regression is NEW slower than BASE by more\n"
    "than FRAC (default 0.02 = 2%) in the step time or in any core's step\n"
    "time, or NEW not fitting the hardware where BASE did.\n"
    "\n"
    "exit status: 0 no regression (one summary line), 1 regression (a table\n"
    "of what got slower: step time, core groups, categories), 2 a report is\n"
    "unreadable or the two describe different runs.\n";

/* Relative change; +inf when growing from zero. */
static double rel(double base, double now)
{
    if (base == 0)
        return now == 0 ? 0 : (now > 0 ? INFINITY : -INFINITY);
    return (now - base) / base;
}

static void pct(char *buf, size_t cap, double r)
{
    if (isinf(r))
        snprintf(buf, cap, "%s", r > 0 ? "from 0" : "to 0");
    else
        snprintf(buf, cap, "%+.2f%%", 100 * r);
}

static int slower(double base, double now, double tol)
{
    return now - base > tol * base;
}

/* Two cores belong to one group when all their figures agree in both
 * reports. */
static int same_core(const emu_core_result *a, const emu_core_result *b)
{
    if (a->step_time_s != b->step_time_s)
        return 0;
    for (int c = 0; c < CAT_COUNT; c++)
        if (a->breakdown_s[c] != b->breakdown_s[c])
            return 0;
    return 1;
}

/* "cores 0-7,16-23" for the cores i with group[i] == g. */
static void group_label(const emu_result *r, const int *group, int g,
                        char *buf, size_t cap)
{
    size_t len = 0;
    int count = 0;
    for (int i = 0; i < r->cores; i++)
        count += group[i] == g;
    len += (size_t)snprintf(buf, cap, "%s ", count == 1 ? "core" : "cores");
    int first = 1;
    for (int i = 0; i < r->cores && len + 24 < cap; i++) {
        if (group[i] != g)
            continue;
        int j = i;
        while (j + 1 < r->cores && group[j + 1] == g &&
               r->per_core[j + 1].core == r->per_core[j].core + 1)
            j++;
        if (j == i)
            len += (size_t)snprintf(buf + len, cap - len, "%s%d",
                                    first ? "" : ",", r->per_core[i].core);
        else
            len += (size_t)snprintf(buf + len, cap - len, "%s%d-%d",
                                    first ? "" : ",", r->per_core[i].core,
                                    r->per_core[j].core);
        first = 0;
        i = j;
    }
    if (len + 24 >= cap)
        snprintf(buf + cap - 5, 5, "...");
}

static void row(const char *what, double base, double now, const char *mark)
{
    char p[32];
    pct(p, sizeof p, rel(base, now));
    printf("%-24s %12.6g %12.6g %10s%s%s\n", what, base, now, p,
           *mark ? "  " : "", mark);
}

static int compare(const emu_result *b, const emu_result *n, double tol,
                   const char *bpath, const char *npath)
{
    /* report_read has checked each report on its own (finite times >= 0,
     * every core once, in core order, a known system, printable names);
     * what is left is whether the two describe the same run. */
    if (strcmp(b->trace, n->trace) != 0)
        return cli_error(2, "%s: trace: '%s', but the baseline %s is of "
                            "'%s': reports of different traces",
                         npath, n->trace, bpath, b->trace);
    if (strcmp(b->system, n->system) != 0)
        return cli_error(2, "%s: system: %s, but the baseline %s is on %s: "
                            "reports on different systems",
                         npath, n->system, bpath, b->system);
    if (b->cores != n->cores)
        return cli_error(2, "%s: cores: %d, but the baseline %s has %d: "
                            "different core counts",
                         npath, n->cores, bpath, b->cores);

    int *group = malloc((size_t)b->cores * sizeof *group);
    int *rep = malloc((size_t)b->cores * sizeof *rep); /* first core */
    if (!group || !rep) {
        free(group);
        free(rep);
        return cli_error(4, "out of memory");
    }
    int ngroups = 0, core_regressed = 0;
    double worst_core = -INFINITY;
    for (int i = 0; i < b->cores; i++) {
        const emu_core_result *bc = &b->per_core[i], *nc = &n->per_core[i];
        int g = -1;
        for (int k = 0; k < ngroups && g < 0; k++)
            if (same_core(&b->per_core[rep[k]], bc) &&
                same_core(&n->per_core[rep[k]], nc))
                g = k;
        if (g < 0) {
            g = ngroups++;
            rep[g] = i;
        }
        group[i] = g;
        if (slower(bc->step_time_s, nc->step_time_s, tol))
            core_regressed = 1;
        double r = rel(bc->step_time_s, nc->step_time_s);
        if (r > worst_core)
            worst_core = r;
    }
    int step_regressed = slower(b->step_time_s, n->step_time_s, tol);
    int fit_lost = b->fits && !n->fits;
    char p[32], q[32];
    pct(p, sizeof p, rel(b->step_time_s, n->step_time_s));

    if (!step_regressed && !core_regressed && !fit_lost) {
        pct(q, sizeof q, worst_core);
        printf("ok: %s on %s: step time %.6g s -> %.6g s (%s; slowest-"
               "changing core %s), within %.2f%%\n",
               n->trace, n->system, b->step_time_s, n->step_time_s, p, q,
               100 * tol);
        free(group);
        free(rep);
        return 0;
    }

    printf("REGRESSION: %s on %s: step time %.6g s -> %.6g s (%s), "
           "tolerance %.2f%%\n",
           n->trace, n->system, b->step_time_s, n->step_time_s, p,
           100 * tol);
    if (b->global_batch != n->global_batch ||
        b->cores_per_replica != n->cores_per_replica)
        printf("note: the runs differ: global batch %lld vs %lld, cores per "
               "replica %d vs %d\n",
               (long long)b->global_batch, (long long)n->global_batch,
               b->cores_per_replica, n->cores_per_replica);
    for (int i = 0; i < n->n_overrides; i++)
        printf("note: NEW sets %s=%s\n", n->overrides[i].key,
               n->overrides[i].value);
    if (fit_lost)
        printf("NEW no longer fits: needs %.3g bytes of HBM per core, has "
               "%.3g\n",
               n->hbm_needed_bytes, n->hbm_capacity_bytes);
    printf("\n%-24s %12s %12s %10s\n", "what", "base s", "new s", "change");
    row("step time", b->step_time_s, n->step_time_s,
        step_regressed ? "SLOWER" : "");

    int shown = 0, hidden = 0;
    for (int g = 0; g < ngroups; g++) {
        const emu_core_result *bc = &b->per_core[rep[g]];
        const emu_core_result *nc = &n->per_core[rep[g]];
        if (!slower(bc->step_time_s, nc->step_time_s, tol))
            continue;
        if (shown >= CHECK_MAX_GROUPS_SHOWN) {
            hidden++;
            continue;
        }
        shown++;
        char label[128];
        group_label(b, group, g, label, sizeof label);
        row(label, bc->step_time_s, nc->step_time_s, "SLOWER");
        /* A category "grew" when its increase alone is a visible share of
         * the core's step (a quarter of the tolerance); if the slowdown is
         * spread thin, the largest increase is named. */
        int marked = 0, biggest = -1;
        double biggest_d = 0;
        for (int c = 0; c < CAT_COUNT; c++) {
            double d = nc->breakdown_s[c] - bc->breakdown_s[c];
            if (d > biggest_d) {
                biggest_d = d;
                biggest = c;
            }
            marked += d > 0 && d > 0.25 * tol * bc->step_time_s;
        }
        for (int c = 0; c < CAT_COUNT; c++) {
            double d = nc->breakdown_s[c] - bc->breakdown_s[c];
            int grew = d > 0 && (d > 0.25 * tol * bc->step_time_s ||
                                 (!marked && c == biggest));
            char what[40];
            snprintf(what, sizeof what, "  %s", emu_cat_name((emu_cat)c));
            row(what, bc->breakdown_s[c], nc->breakdown_s[c],
                grew ? "grew" : "");
        }
    }
    if (hidden)
        printf("... and %d more core group%s slower\n", hidden,
               hidden == 1 ? "" : "s");
    free(group);
    free(rep);
    return 1;
}

int cli_check(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        fputs(usage_text, stdout);
        return 0;
    }
    const char *base = NULL, *now = NULL;
    double tol = 0.02;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--baseline") == 0) {
            if (!(base = cli_value(argc, argv, &i)))
                return 2;
        } else if (strcmp(argv[i], "--tolerance") == 0) {
            const char *v = cli_value(argc, argv, &i);
            if (!v || cli_double("--tolerance", v, 0, 100, &tol))
                return 2;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return cli_error(2, "check: unknown option '%s' (see tpuemu "
                                "check --help)",
                             argv[i]);
        } else if (!now) {
            now = argv[i];
        } else {
            return cli_error(2, "check: one NEW report expected, got '%s' "
                                "and '%s'",
                             now, argv[i]);
        }
    }
    if (!base || !now)
        return cli_error(2, "check: usage: tpuemu check --baseline BASE.json "
                            "NEW.json [--tolerance FRAC]");
    emu_result b, n;
    tpu_error err = {0};
    if (report_read(&b, base, &err))
        return cli_error(2, "%s", err.msg);
    if (report_read(&n, now, &err)) {
        emu_result_free(&b);
        return cli_error(2, "%s", err.msg);
    }
    int rc = compare(&b, &n, tol, base, now);
    emu_result_free(&b);
    emu_result_free(&n);
    return rc;
}
