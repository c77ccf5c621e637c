/* tpuemu check — the performance gate (docs/SPEC.md).
 *
 * A regression is NEW slower than BASE by more than the tolerance in the
 * step time or in any core's step time, or NEW no longer fitting where
 * BASE did.  Exit 1 then, with a table of what got slower; exit 0 with a
 * one-line summary otherwise (BASE not fitting and NEW fitting is an
 * improvement: a does-not-fit report has zero times, nothing to compare);
 * exit 2 when a report cannot be read or the two do not describe the
 * same run (trace, system, core count).
 *
 * Cores with identical figures in both reports are shown as one group
 * ("cores 0-7"): data-parallel replicas usually are, so a v3-1024 report
 * reads as a handful of rows rather than two thousand. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/cli/cli.h"
#include "emu/report.h"

#define CHECK_MAX_GROUPS_SHOWN 8

/* What an improvement beyond the tolerance asks for.  The project's own
 * baselines/ are refreshed by `make rebaseline` (docs/CHECK.md). */
#define CHECK_STALE                                                        \
    "re-record the baseline so that it guards the new figures (tpuemu's " \
    "baselines/: make rebaseline)"

/* The same, when NEW sets what BASE does not (a what-if comparison). */
#define CHECK_WHATIF                                                       \
    "NEW is a what-if of BASE (the notes say what differs), so keep the "  \
    "baseline"

static const char usage_text[] =
    "usage: tpuemu check --baseline BASE.json NEW.json [--tolerance FRAC]\n"
    "\n"
    "Compares two reports of the same trace on the same system (written by\n"
    "`tpuemu run --report`).  A regression is NEW slower than BASE by more\n"
    "than FRAC (default 0.02 = 2%) in the step time or in any core's step\n"
    "time, or NEW not fitting the hardware where BASE did.  FRAC is a\n"
    "fraction in [0, 1): 0.05 means 5% (5 and 5% are refused).\n"
    "A relative change within 1e-9 of FRAC (an absolute margin: 2% means\n"
    "2% +- 0.0000001%) counts as FRAC (no regression), so 1 -> 1.02 s and\n"
    "0.1 -> 0.102 s both pass --tolerance 0.02.\n"
    "\n"
    "A does-not-fit report (fits: false) has no step times: BASE not\n"
    "fitting and NEW fitting is an improvement (exit 0); BASE fitting and\n"
    "NEW not is a regression (\"no longer fits: needs X GiB of HBM per core,\n"
    "core has Y GiB\"); neither fitting compares nothing (exit 0).  Every\n"
    "--set override that differs between the two is printed as a note\n"
    "(\"BASE sets K=V\", \"NEW sets K=V\", \"K: BASE V1, NEW V2\"; numbers\n"
    "compared as numbers: 900 is 9e2), and so is a differing --freeze list\n"
    "(\"NEW sets --freeze LIST\", ...; entries compared as a set).\n"
    "\n"
    "exit status: 0 no regression (one summary line, then the notes; NEW\n"
    "faster than BASE by more than FRAC says so, asks to re-record the\n"
    "baseline -- `make rebaseline` for tpuemu's baselines/ -- and adds a\n"
    "table of what got faster), 1 regression (a table of what got slower:\n"
    "step time, core groups, categories; under either table, core 0's\n"
    "layers that moved most), 2 a report is unreadable or the\n"
    "two describe different runs (trace, system, core count, or a training\n"
    "step against an inference step).  When NEW sets an override or a\n"
    "--freeze list BASE does not, a gain is the what-if's answer and the\n"
    "baseline is kept; layers[] naming different layers is noted.\n";

/* Relative change; +inf when growing from zero. */
static double rel(double base, double now)
{
    if (base == 0)
        return now == 0 ? 0 : (now > 0 ? INFINITY : -INFINITY);
    return (now - base) / base;
}

/* The rule is "slower by more than the tolerance", and it must not depend
 * on the magnitude of the times.  Reports hold decimals (the shortest form
 * that reads back), so 1 -> 1.02 s and 0.1 -> 0.102 s are both exactly +2%
 * in decimal, but in binary (1.02 - 1) / 1 = 0.020000000000000018 and
 * (0.102 - 0.1) / 0.1 = 0.019999999999999879: one would fail at 2% and the
 * other pass.  A relative change within 1e-9 of the tolerance (an
 * absolute margin on the fraction, the same whatever the tolerance: 2% is
 * 2% +- 1e-7%) is taken as the tolerance itself (not slower, and printed
 * as equal): far above double rounding of a fraction near 1 (1e-16) and
 * far below any change a model refinement makes.  (The report reader's
 * check of step_time_s against the slowest core is relative instead: to a
 * part in 10^9 of that time.) */
#define CHECK_EPS 1e-9

/* r (a relative change) is the tolerance to within CHECK_EPS. */
static int at_tol(double r, double tol)
{
    return isfinite(r) && fabs(fabs(r) - tol) <= CHECK_EPS;
}

static int slower_rel(double r, double tol)
{
    return r > tol + CHECK_EPS;
}

static int slower(double base, double now, double tol)
{
    return slower_rel(rel(base, now), tol);
}

/* Decimals of 100 * tol written exactly (the shortest decimal that reads
 * back as tol, cli_fmt_num's, the decimal point moved by two): 0.02 -> 0,
 * 0.025 -> 1, 0.999999999 -> 7.  *sig gets that decimal's significant
 * digits. */
static int tol_decimals(double tol, int *sig)
{
    char b[48];
    cli_fmt_num(b, sizeof b, tol);
    int n = 0, lead = 1;
    for (const char *p = b; *p && *p != 'e'; p++) {
        if (*p < '0' || *p > '9' || (lead && *p == '0'))
            continue;
        lead = 0;
        n++;
    }
    *sig = n ? n : 1;
    snprintf(b, sizeof b, "%.*e", *sig - 1, tol);
    const char *e = strchr(b, 'e');
    int dec = *sig - 1 - (e ? atoi(e + 1) : 0) - 2;
    return dec < 0 ? 0 : dec;
}

/* More decimals than this and the tolerance is printed as %g ("1e-18%"). */
#define CHECK_MAX_DEC 12

/* The tolerance as a percentage, with at least `digits` decimals and as
 * many more as it takes to be exact: 0.999999999 is 99.9999999%, never a
 * rounded 100.00% that a change could not be "within". */
static void tol_text(char *buf, size_t cap, double tol, int digits)
{
    int sig, dec = tol_decimals(tol, &sig);
    if (dec > CHECK_MAX_DEC)
        snprintf(buf, cap, "%.*g%%", sig, 100 * tol);
    else
        snprintf(buf, cap, "%.*f%%", dec > digits ? dec : digits, 100 * tol);
}

/* Decimals for a percentage shown next to the tolerance: two, or as many
 * more (up to eight) as it takes for the two to print differently, so a
 * 2.004% slowdown against 2% reads "+2.004%", not "+2.00%".  A change at
 * the tolerance (at_tol) is printed with the tolerance's own decimals, and
 * reads equal to it. */
static int pct_digits(double r, double tol)
{
    if (isinf(r) || isnan(r))
        return 2;
    if (at_tol(r, tol)) {
        int sig, dec = tol_decimals(tol, &sig);
        return dec > CHECK_MAX_DEC ? 2 : dec > 2 ? dec : 2;
    }
    /* Beyond CHECK_EPS the two differ by more than 1e-7 percent: eight
     * decimals always tell them apart. */
    for (int d = 2; d < 8; d++) {
        char a[64], b[64];
        snprintf(a, sizeof a, "%.*f", d, 100 * fabs(r));
        snprintf(b, sizeof b, "%.*f", d, 100 * tol);
        if (strcmp(a, b) != 0)
            return d;
    }
    return 8;
}

/* From this percentage on a change is printed in e-notation: only an
 * edited report gets there (a baseline scaled by 1e-300 is +1e302%), and
 * %f would print 300 digits. */
#define CHECK_PCT_EFORM 1e6

/* How many powers of ten now/base is: for changes whose percentage a
 * double cannot hold. */
static double growth_log10(double base, double now)
{
    return log10(now) - log10(base);
}

/* The change from base to now as a percentage; one at the tolerance
 * (at_tol) is printed as the tolerance, so the figure never contradicts
 * the verdict.  At most 17 characters ("+999999.99999999%",
 * "+1.00e+302%"). */
static void pct(char *buf, size_t cap, double base, double now, int digits,
                double tol)
{
    double r = rel(base, now);
    if (!isfinite(base) || !isfinite(now)) {
        /* a layer's categories can sum past a double in an edited
         * report; no percentage of that is true */
        snprintf(buf, cap, "overflow");
    } else if (base == 0 && now != 0) {
        snprintf(buf, cap, "%s", now > 0 ? "from 0" : "to 0");
    } else if (!isfinite(100 * r)) {
        /* An edited report (1e308 s against 1e-4 s): the ratio overflows
         * a double, so it is printed from its logarithm; now - base is
         * now to every digit shown. */
        double l = growth_log10(base, now) + 2, e = floor(l);
        double m = pow(10, l - e);
        if (m >= 9.995) {
            m /= 10;
            e += 1;
        }
        snprintf(buf, cap, "+%.2fe+%.0f%%", m, e);
    } else if (at_tol(r, tol) && tol > 0)
        snprintf(buf, cap, "%c%.*f%%", r < 0 ? '-' : '+', digits, 100 * tol);
    else if (fabs(100 * r) >= CHECK_PCT_EFORM)
        snprintf(buf, cap, "%+.2e%%", 100 * r);
    else
        snprintf(buf, cap, "%+.*f%%", digits, 100 * r);
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

/* "cores 0-7,16-23" for the cores i with group[i] == g; when that does not
 * fit in cap, the first runs, "...", the last run and the group's size:
 * "cores 0,2,4,...,68,...,2046 (1024 cores)". */
static void group_label(const emu_result *r, const int *group, int g,
                        char *buf, size_t cap)
{
    int count = 0;
    for (int i = 0; i < r->cores; i++)
        count += group[i] == g;
    size_t len = (size_t)snprintf(buf, cap, "%s ",
                                  count == 1 ? "core" : "cores");
    /* The runs of consecutive cores, as text: a first pass finds the last
     * one, which the truncated form keeps. */
    char last[32] = "", tail[64] = "";
    size_t full = len; /* the untruncated label's length */
    for (int pass = 0, first = 1, truncated = 0; pass < 2; pass++) {
        for (int i = 0; i < r->cores; i++) {
            if (group[i] != g)
                continue;
            int j = i;
            while (j + 1 < r->cores && group[j + 1] == g &&
                   r->per_core[j + 1].core == r->per_core[j].core + 1)
                j++;
            char piece[32];
            if (j == i)
                snprintf(piece, sizeof piece, "%d", r->per_core[i].core);
            else
                snprintf(piece, sizeof piece, "%d-%d", r->per_core[i].core,
                         r->per_core[j].core);
            i = j;
            if (pass == 0) {
                snprintf(last, sizeof last, "%s", piece);
                full += strlen(piece) + 1;
                continue;
            }
            if (truncated)
                continue;
            /* Room for this piece and, should a later one not fit, the
             * tail ",...,LAST (N cores)". */
            if (full >= cap &&
                len + 1 + strlen(piece) + strlen(tail) >= cap) {
                truncated = 1;
                snprintf(buf + len, cap - len, "%s", tail);
                continue;
            }
            len += (size_t)snprintf(buf + len, cap - len, "%s%s",
                                    first ? "" : ",", piece);
            first = 0;
        }
        if (pass == 0)
            snprintf(tail, sizeof tail, ",...,%s (%d cores)", last, count);
    }
}

/* The table of `check`: rows are gathered first and printed with each
 * column as wide as its widest entry, so a long core-group label or an
 * extreme change widens its column rather than shifting the row or being
 * cut (a change of 38 digits keeps its %). */
#define CHECK_MAX_ROWS (1 + CHECK_MAX_GROUPS_SHOWN * (1 + CAT_COUNT))

/* cells: what, base s, new s, change; then the mark, unpadded */
typedef struct {
    char cell[4][96];
    const char *mark;
} check_row;

typedef struct {
    check_row r[CHECK_MAX_ROWS];
    int n;
} check_table;

static void add_text(check_table *t, const char *what, const char *base,
                     const char *now, const char *change, const char *mark)
{
    if (t->n >= CHECK_MAX_ROWS)
        return; /* cannot happen: at most CHECK_MAX_GROUPS_SHOWN groups */
    check_row *w = &t->r[t->n++];
    const char *v[4] = {what, base, now, change};
    for (int k = 0; k < 4; k++)
        snprintf(w->cell[k], sizeof w->cell[k], "%s", v[k]);
    w->mark = mark;
}

/* tol snaps a change at the tolerance to it (pct); -1 for rows that are
 * not compared with the tolerance (categories). */
static void add_row(check_table *t, const char *what, double base,
                    double now, int digits, double tol, const char *mark)
{
    char b[32], n[32], p[40];
    snprintf(b, sizeof b, "%.6g", base);
    snprintf(n, sizeof n, "%.6g", now);
    pct(p, sizeof p, base, now, digits, tol);
    add_text(t, what, b, n, p, mark);
}

static void print_table(const check_table *t)
{
    static const char *const head[4] = {"what", "base s", "new s", "change"};
    static const int least[4] = {24, 12, 12, 10};
    int w[4];
    for (int k = 0; k < 4; k++) {
        w[k] = least[k];
        for (int i = 0; i < t->n; i++)
            if ((int)strlen(t->r[i].cell[k]) > w[k])
                w[k] = (int)strlen(t->r[i].cell[k]);
    }
    printf("\n%-*s %*s %*s %*s\n", w[0], head[0], w[1], head[1], w[2],
           head[2], w[3], head[3]);
    for (int i = 0; i < t->n; i++) {
        const check_row *r = &t->r[i];
        printf("%-*s %*s %*s %*s%s%s\n", w[0], r->cell[0], w[1], r->cell[1],
               w[2], r->cell[2], w[3], r->cell[3], *r->mark ? "  " : "",
               r->mark);
    }
}

/* A core group's row and its categories'.  dir > 0: the group is slower
 * (a regression table), dir < 0: faster (an improvement beyond the
 * tolerance).  A category is marked when its change alone is a visible
 * share of the core's step (a quarter of the tolerance): "grew" or
 * "shrank"; if the group's change is spread thin, the category that moved
 * most its way is named.  The same margin as the verdict's (CHECK_EPS)
 * keeps "a quarter of the tolerance" independent of the magnitude of the
 * times. */
static void add_group(check_table *t, const char *label,
                      const emu_core_result *bc, const emu_core_result *nc,
                      double tol, int dir)
{
    add_row(t, label, bc->step_time_s, nc->step_time_s,
            pct_digits(rel(bc->step_time_s, nc->step_time_s), tol), tol,
            dir > 0 ? "SLOWER" : "FASTER");
    int up = 0, down = 0, big_up = -1, big_down = -1;
    double bu = 0, bd = 0;
    for (int c = 0; c < CAT_COUNT; c++) {
        double dd = nc->breakdown_s[c] - bc->breakdown_s[c];
        if (dd > bu) {
            bu = dd;
            big_up = c;
        }
        if (-dd > bd) {
            bd = -dd;
            big_down = c;
        }
        up += dd > 0 && slower_rel(dd / bc->step_time_s, 0.25 * tol);
        down += dd < 0 && slower_rel(-dd / bc->step_time_s, 0.25 * tol);
    }
    for (int c = 0; c < CAT_COUNT; c++) {
        double dd = nc->breakdown_s[c] - bc->breakdown_s[c];
        int grew = dd > 0 &&
                   (slower_rel(dd / bc->step_time_s, 0.25 * tol) ||
                    (dir > 0 && !up && c == big_up));
        int shrank = dd < 0 &&
                     (slower_rel(-dd / bc->step_time_s, 0.25 * tol) ||
                      (dir < 0 && !down && c == big_down));
        char what[40];
        snprintf(what, sizeof what, "  %s", emu_cat_name((emu_cat)c));
        add_row(t, what, bc->breakdown_s[c], nc->breakdown_s[c], 2, -1,
                grew ? "grew" : shrank ? "shrank" : "");
    }
}

/* The core groups that moved past the tolerance in one direction (dir as
 * add_group), at most CHECK_MAX_GROUPS_SHOWN; how many more did, in
 * *hidden. */
static void add_groups(check_table *t, const emu_result *b,
                       const emu_result *n, const int *group,
                       const int *rep, int ngroups, double tol, int dir,
                       int *hidden)
{
    int shown = 0;
    *hidden = 0;
    for (int g = 0; g < ngroups; g++) {
        const emu_core_result *bc = &b->per_core[rep[g]];
        const emu_core_result *nc = &n->per_core[rep[g]];
        if (!slower_rel(dir * rel(bc->step_time_s, nc->step_time_s), tol))
            continue;
        if (shown >= CHECK_MAX_GROUPS_SHOWN) {
            (*hidden)++;
            continue;
        }
        shown++;
        char label[80];
        group_label(b, group, g, label, sizeof label);
        add_group(t, label, bc, nc, tol, dir);
    }
}

/* Two --set values mean the same when both are numbers and equal: the
 * report keeps the text as given, and 900, 900.0 and 9e2 are one
 * bandwidth. */
static int same_value(const char *a, const char *b)
{
    if (strcmp(a, b) == 0)
        return 1;
    char *ea = NULL, *eb = NULL;
    double x = strtod(a, &ea), y = strtod(b, &eb);
    return ea != a && !*ea && eb != b && !*eb && x == y;
}

static const emu_override *find_override(const emu_result *r,
                                         const char *key)
{
    for (int i = 0; i < r->n_overrides; i++)
        if (strcmp(r->overrides[i].key, key) == 0)
            return &r->overrides[i];
    return NULL;
}

static int cmp_name(const void *x, const void *y)
{
    return strcmp(*(const char *const *)x, *(const char *const *)y);
}

/* The layer names of one report, sorted (NULL when it lists none or the
 * host is out of memory: then no note is printed). */
static const char **sorted_names(const emu_result *r)
{
    if (r->n_layers <= 0 || !r->layer_names)
        return NULL;
    const char **v = malloc((size_t)r->n_layers * sizeof *v);
    if (!v)
        return NULL;
    for (int i = 0; i < r->n_layers; i++)
        v[i] = r->layer_names[i];
    qsort(v, (size_t)r->n_layers, sizeof *v, cmp_name);
    return v;
}

/* Reports of the same trace name whose layers[] name different layers are
 * of different graphs (a layer added, removed or renamed): the comparison
 * is then of two models, which the summary line alone would not say. */
static void print_layer_note(const emu_result *b, const emu_result *n)
{
    const char **vb = sorted_names(b), **vn = sorted_names(n);
    if (vb && vn) {
        int i = 0, j = 0, only_b = 0, only_n = 0;
        const char *first_b = NULL, *first_n = NULL;
        while (i < b->n_layers || j < n->n_layers) {
            int c = i == b->n_layers   ? 1
                    : j == n->n_layers ? -1
                                       : strcmp(vb[i], vn[j]);
            if (c < 0) {
                if (!only_b++)
                    first_b = vb[i];
                i++;
            } else if (c > 0) {
                if (!only_n++)
                    first_n = vn[j];
                j++;
            } else {
                i++;
                j++;
            }
        }
        if (only_b || only_n) {
            printf("note: the layers differ:");
            if (only_b)
                printf(" %d only in BASE (%s%s)", only_b, first_b,
                       only_b > 1 ? ", ..." : "");
            if (only_b && only_n)
                printf(",");
            if (only_n)
                printf(" %d only in NEW (%s%s)", only_n, first_n,
                       only_n > 1 ? ", ..." : "");
            printf(": the reports are of different graphs\n");
        }
    }
    free((void *)vb);
    free((void *)vn);
}

/* The what-if notes: every --set override one report has and the other
 * has not (or has with another value) and a differing --freeze list,
 * printed when print; their count either way (NEW is a what-if of BASE
 * when it is not 0: a gain is then the what-if's answer, not a reason to
 * re-record the baseline). */
static int whatif_notes(const emu_result *b, const emu_result *n, int print)
{
    int count = 0;
    for (int i = 0; i < b->n_overrides; i++) {
        const emu_override *o = &b->overrides[i];
        const emu_override *m = find_override(n, o->key);
        if (m && same_value(o->value, m->value))
            continue;
        count++;
        if (print && !m)
            printf("note: BASE sets %s=%s\n", o->key, o->value);
        else if (print)
            printf("note: %s: BASE %s, NEW %s\n", o->key, o->value,
                   m->value);
    }
    for (int i = 0; i < n->n_overrides; i++)
        if (!find_override(b, n->overrides[i].key)) {
            count++;
            if (print)
                printf("note: NEW sets %s=%s\n", n->overrides[i].key,
                       n->overrides[i].value);
        }
    /* --freeze changes which layers train: a frozen backbone is faster
     * by design, not by a change of the emulated hardware. */
    if (!cli_freeze_same(b->freeze, n->freeze)) {
        count++;
        if (print && !n->freeze[0])
            printf("note: BASE sets --freeze %s\n", b->freeze);
        else if (print && !b->freeze[0])
            printf("note: NEW sets --freeze %s\n", n->freeze);
        else if (print)
            printf("note: --freeze: BASE %s, NEW %s\n", b->freeze,
                   n->freeze);
    }
    return count;
}

/* How the two runs differ besides the build: batch, partitioning, the
 * what-ifs and the graph's layers, so a comparison says what it compares. */
static void print_notes(const emu_result *b, const emu_result *n)
{
    /* Only what differs: "global batch 32 vs 32" reads as a difference. */
    if (b->global_batch != n->global_batch &&
        b->cores_per_replica != n->cores_per_replica)
        printf("note: the runs differ: global batch %lld vs %lld, cores per "
               "replica %d vs %d\n",
               (long long)b->global_batch, (long long)n->global_batch,
               b->cores_per_replica, n->cores_per_replica);
    else if (b->global_batch != n->global_batch)
        printf("note: the runs differ: global batch %lld vs %lld\n",
               (long long)b->global_batch, (long long)n->global_batch);
    else if (b->cores_per_replica != n->cores_per_replica)
        printf("note: the runs differ: cores per replica %d vs %d\n",
               b->cores_per_replica, n->cores_per_replica);
    (void)whatif_notes(b, n, 1);
    print_layer_note(b, n);
}

/* Exit status and output when one report or both did not fit (no step
 * times to compare: a does-not-fit report has zero times). */
static int compare_fit(const emu_result *b, const emu_result *n)
{
    char need[32], has[32], need2[32], has2[32];
    if (!b->fits && !n->fits) {
        cli_fmt_gib2(need, has, sizeof need, b->hbm_needed_bytes,
             b->hbm_capacity_bytes);
        cli_fmt_gib2(need2, has2, sizeof need2, n->hbm_needed_bytes,
             n->hbm_capacity_bytes);
        printf("ok: %s on %s: neither run fits, no step times to compare "
               "(BASE needs %s GiB of HBM per core, core has %s GiB; NEW "
               "needs %s GiB, core has %s GiB)\n",
               n->trace, n->system, need, has, need2, has2);
        print_notes(b, n);
        return 0;
    }
    if (!b->fits) {
        cli_fmt_gib2(need, has, sizeof need, b->hbm_needed_bytes,
             b->hbm_capacity_bytes);
        printf("ok: %s on %s: the baseline did not fit (needs %s GiB of HBM "
               "per core, core has %s GiB) and now it does: step time "
               "%.6g s\n",
               n->trace, n->system, need, has, n->step_time_s);
        print_notes(b, n);
        return 0;
    }
    cli_fmt_gib2(need, has, sizeof need, n->hbm_needed_bytes, n->hbm_capacity_bytes);
    cli_fmt_gib2(need2, has2, sizeof need2, b->hbm_needed_bytes,
         b->hbm_capacity_bytes);
    printf("REGRESSION: %s on %s: no longer fits: needs %s GiB of HBM per "
           "core, core has %s GiB (the baseline needed %s GiB of its %s "
           "GiB and ran in %.6g s)\n",
           n->trace, n->system, need, has, need2, has2, b->step_time_s);
    print_notes(b, n);
    check_table *t = calloc(1, sizeof *t);
    if (!t)
        return cli_error(4, "out of memory");
    char bs[32];
    snprintf(bs, sizeof bs, "%.6g", b->step_time_s);
    add_text(t, "step time", bs, "-", "no fit", "DOES NOT FIT");
    print_table(t);
    free(t);
    return 1;
}

/* Which layers moved, for a table that says a core got slower or faster:
 * the report's layers[] (core 0's critical path per layer) of both, when
 * they name the same layers in the same order (else the layer note above
 * has said they differ), the CHECK_LAYERS_SHOWN largest changes in
 * seconds, each with the category that moved most.  What CI wants next
 * after "cores 0-7 SLOWER, hbm_stall grew": where. */
#define CHECK_LAYERS_SHOWN 5

typedef struct {
    int layer;
    double d; /* new - base, s */
} layer_move;

static int move_cmp(const void *pa, const void *pb)
{
    const layer_move *a = pa, *b = pb;
    double x = fabs(a->d), y = fabs(b->d);
    if (x != y)
        return x < y ? 1 : -1;
    return a->layer - b->layer;
}

static double layer_sum(const emu_result *r, int l)
{
    double s = 0;
    for (int k = 0; k < CAT_COUNT; k++)
        s += r->layer_time_s[(size_t)l * CAT_COUNT + k];
    return s;
}

static void print_layer_moves(const emu_result *b, const emu_result *n)
{
    if (b->n_layers <= 0 || b->n_layers != n->n_layers || !b->layer_time_s ||
        !n->layer_time_s)
        return;
    for (int l = 0; l < b->n_layers; l++)
        if (strcmp(b->layer_names[l], n->layer_names[l]) != 0)
            return;
    layer_move *m = malloc(sizeof *m * (size_t)b->n_layers);
    if (!m)
        return;
    int k = 0;
    for (int l = 0; l < b->n_layers; l++) {
        double d = layer_sum(n, l) - layer_sum(b, l);
        if (d != 0)
            m[k++] = (layer_move){l, d};
    }
    qsort(m, (size_t)k, sizeof *m, move_cmp);
    int shown = k < CHECK_LAYERS_SHOWN ? k : CHECK_LAYERS_SHOWN;
    if (shown > 0)
        printf("\ncore 0's layers that moved most (%d of %d; base s, new "
               "s, change, the category that moved most):\n",
               shown, k);
    for (int i = 0; i < shown; i++) {
        int l = m[i].layer, big = 0;
        double bd = 0;
        for (int c = 0; c < CAT_COUNT; c++) {
            double dc = n->layer_time_s[(size_t)l * CAT_COUNT + c] -
                        b->layer_time_s[(size_t)l * CAT_COUNT + c];
            if (fabs(dc) > fabs(bd))
                bd = dc, big = c;
        }
        char name[128], p[40];
        cli_fit_cols_mid(name, sizeof name, b->layer_names[l], 28);
        double sb = layer_sum(b, l), sn = layer_sum(n, l);
        pct(p, sizeof p, sb, sn, 2, -1); /* not a verdict: 2 decimals */
        printf("  ");
        cli_put_cell(name, 28);
        printf(" %12.6g %12.6g %10s  %s %s%.3g s\n", sb, sn, p,
               emu_cat_name((emu_cat)big), bd > 0 ? "+" : "", bd);
    }
    free(m);
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
    if (b->train != n->train)
        return cli_error(2, "%s: mode: %s, but the baseline %s is %s: "
                            "reports of different modes (a training step "
                            "and an inference step)",
                         npath, n->train ? "train" : "infer", bpath,
                         b->train ? "train" : "infer");
    if (!b->fits || !n->fits)
        return compare_fit(b, n);

    int *group = malloc((size_t)b->cores * sizeof *group);
    int *rep = malloc((size_t)b->cores * sizeof *rep); /* first core */
    if (!group || !rep) {
        free(group);
        free(rep);
        return cli_error(4, "out of memory");
    }
    int ngroups = 0, core_regressed = 0, core_faster = 0, wi = 0, bi = 0;
    double worst_core = -INFINITY, best_core = INFINITY;
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
        /* two overflowing changes (pct) differ in their logarithms */
        if (r > worst_core ||
            (isinf(r) && r == worst_core && bc->step_time_s > 0 &&
             b->per_core[wi].step_time_s > 0 &&
             growth_log10(bc->step_time_s, nc->step_time_s) >
                 growth_log10(b->per_core[wi].step_time_s,
                              n->per_core[wi].step_time_s))) {
            worst_core = r;
            wi = i;
        }
        if (r < best_core) {
            best_core = r;
            bi = i;
        }
        if (slower_rel(-r, tol))
            core_faster = 1;
    }
    int step_regressed = slower(b->step_time_s, n->step_time_s, tol);
    double step_rel = rel(b->step_time_s, n->step_time_s);
    /* Faster by more than the tolerance passes, but the baseline is then
     * stale: a later slowdown back towards it would pass unseen. */
    int step_faster = slower_rel(-step_rel, tol);
    int rc = step_regressed || core_regressed;
    char p[40], q[40], f[40], tt[48];
    check_table *t = calloc(1, sizeof *t);
    if (!t) {
        free(group);
        free(rep);
        return cli_error(4, "out of memory");
    }
    int hidden = 0;

    if (!rc) {
        /* Digits enough that no change shown reads as the tolerance. */
        int d = pct_digits(step_rel, tol), dc = pct_digits(worst_core, tol);
        if (dc > d)
            d = dc;
        if (core_faster && !step_faster &&
            (dc = pct_digits(best_core, tol)) > d)
            d = dc;
        pct(p, sizeof p, b->step_time_s, n->step_time_s, d, tol);
        pct(q, sizeof q, b->per_core[wi].step_time_s,
            n->per_core[wi].step_time_s, d, tol);
        pct(f, sizeof f, b->per_core[bi].step_time_s,
            n->per_core[bi].step_time_s, d, tol);
        tol_text(tt, sizeof tt, tol, d);
        printf("ok: %s on %s: step time %.6g s -> %.6g s (%s; slowest-"
               "changing core %s",
               n->trace, n->system, b->step_time_s, n->step_time_s, p, q);
        /* A what-if's gain is its answer: re-recording the baseline then
         * would bake the hypothetical hardware into the gate. */
        const char *advice = whatif_notes(b, n, 0) ? CHECK_WHATIF : CHECK_STALE;
        if (step_faster)
            printf("), faster than the baseline by more than %s: %s\n", tt,
                   advice);
        else if (core_faster)
            printf("; fastest-changing core %s), within %s for the step "
                   "time, but a core is faster than the baseline by more "
                   "than %s: %s\n",
                   f, tt, tt, advice);
        else
            printf("), within %s\n", tt);
        print_notes(b, n);
        if (step_faster || core_faster) {
            add_row(t, "step time", b->step_time_s, n->step_time_s, d, tol,
                    step_faster ? "FASTER" : "");
            add_groups(t, b, n, group, rep, ngroups, tol, -1, &hidden);
            print_table(t);
            if (hidden)
                printf("... and %d more core group%s faster\n", hidden,
                       hidden == 1 ? "" : "s");
            print_layer_moves(b, n);
        }
    } else {
        int d = pct_digits(step_rel, tol);
        pct(p, sizeof p, b->step_time_s, n->step_time_s, d, tol);
        tol_text(tt, sizeof tt, tol, d);
        printf("REGRESSION: %s on %s: step time %.6g s -> %.6g s (%s), "
               "tolerance %s\n",
               n->trace, n->system, b->step_time_s, n->step_time_s, p, tt);
        print_notes(b, n);
        add_row(t, "step time", b->step_time_s, n->step_time_s, d, tol,
                step_regressed ? "SLOWER" : "");
        add_groups(t, b, n, group, rep, ngroups, tol, 1, &hidden);
        print_table(t);
        if (hidden)
            printf("... and %d more core group%s slower\n", hidden,
                   hidden == 1 ? "" : "s");
        print_layer_moves(b, n);
    }
    free(t);
    free(group);
    free(rep);
    return rc;
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
        const char *v;
        int r;
        if ((r = cli_take(argc, argv, &i, "--baseline", &v)) != 0) {
            if (r < 0)
                return 2;
            base = v;
        } else if ((r = cli_take(argc, argv, &i, "--tolerance", &v)) != 0) {
            if (r < 0)
                return 2;
            /* "5" meaning 5% would silently allow a 500% slowdown, and
             * "5%" is not a number: both are refused, saying why. */
            size_t len = strlen(v);
            if (len > 0 && v[len - 1] == '%')
                return cli_error(2, "--tolerance: '%s': --tolerance is a "
                                    "fraction: 0.05 means 5%%",
                                 v);
            /* cli_double would say "out of range [0, 1]", but the range
             * is half open, and a value of 1 or more is most likely a
             * percentage. */
            double x = 0;
            int num = cli_number(v, &x);
            if (num && !(x < 1))
                return cli_error(2, "--tolerance: %s is not below 1: "
                                    "--tolerance is a fraction: 0.05 means "
                                    "5%%",
                                 v);
            if (num && x < 0)
                return cli_error(2, "--tolerance: %s is out of range [0, 1): "
                                    "--tolerance is a fraction: 0.05 means "
                                    "5%%",
                                 v);
            if (cli_double("--tolerance", v, 0, 1, &tol))
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
