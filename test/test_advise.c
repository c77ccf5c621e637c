/* tpuemu advise: the search over slices x splits, the two rankings, the
 * outputs written all or nothing, the refusals, and the slices and splits
 * `run` names when a step does not fit (docs/ADVISE.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "emu/cli/advise.h"
#include "test/harness.h"

/* The fixed costs per kernel and per collective (0 by default, up to 5
 * and 20 us in the range) dwarf a 60 us step's own range: held at their
 * defaults so that the marks below are about the splits. */
#define TINY_FIXED_COSTS                                                      \
    "--set xla.kernel_overhead_ns=0 --set xla.collective_overhead_ns=0"

/* The text of the table row `rank` after `title` in out, or NULL. */
static const char *row_after(const char *out, const char *title, int rank)
{
    const char *p = strstr(out, title);
    char want[16];
    snprintf(want, sizeof want, "\n%4d  ", rank);
    return p ? strstr(p, want) : NULL;
}

/* The USD/1M column (the last number) of a row. */
static double row_cost(const char *row)
{
    const char *nl = strchr(row + 1, '\n');
    const char *p = nl ? nl : row + strlen(row);
    while (p > row && p[-1] == ' ')
        p--;
    while (p > row && p[-1] != ' ')
        p--;
    return strtod(p, NULL);
}

static double row_step(const char *row)
{
    /* #, slice, chips, split, cpr, ex/repl, then the step */
    const char *p = row + 1;
    for (int k = 0; k < 6; k++) {
        while (*p == ' ')
            p++;
        while (*p && *p != ' ')
            p++;
    }
    return strtod(p, NULL);
}

void th_suite_advise(th_ctx *t)
{
    th_cmd_result r;
    char dir[] = "/tmp/tpuemu-advise-XXXXXX";
    TH_CHECK(t, mkdtemp(dir) != NULL);

    th_case(t, "distinguishable: only ranges that do not overlap");
    TH_CHECK(t, advise_distinguishable(1.0, 1.1, 1.2, 1.3));
    TH_CHECK(t, advise_distinguishable(1.2, 1.3, 1.0, 1.1));
    TH_CHECK(t, !advise_distinguishable(1.0, 1.25, 1.2, 1.3));
    TH_CHECK(t, !advise_distinguishable(1.0, 1.0, 1.0, 1.0));
    TH_CHECK(t, !advise_distinguishable(1.0, 2.0, 1.2, 1.3));

    th_case(t, "the search: candidates, both tables, the closing line");
    th_run(&r,
           "%s advise traces/small/tiny2d.json --slices v3-8,v3-32 "
           "--top 0 --jobs 2 --ranges 0",
           th_bin());
    TH_CHECKF(t, r.status == 0, "%s", r.err);
    TH_CHECK(t, strstr(r.out, "global batch 16: 2 slices x "));
    TH_CHECK(t, strstr(r.out, "fastest first:"));
    TH_CHECK(t, strstr(r.out, "cheapest first (USD per 1M examples):"));
    TH_CHECK(t, strstr(r.out, "\nbest per chip: v3-8 with "));
    TH_CHECK(t, strstr(r.out, "$2 per chip-hour (Cloud TPU pricing"));
    /* --ranges 0: no range, nothing marked */
    TH_CHECK(t, !strstr(r.out, "not distinguishable"));
    TH_CHECK(t, !strstr(r.out, "step range s"));
    {
        /* fastest first: step times never decrease down the table */
        double prev = 0;
        int ok = 1, n = 0;
        for (int k = 1;; k++) {
            const char *row = row_after(r.out, "fastest first:", k);
            const char *stop = strstr(r.out, "cheapest first");
            if (!row || row > stop)
                break;
            double s = row_step(row);
            ok &= s >= prev && s > 0;
            prev = s;
            n++;
        }
        TH_CHECKF(t, ok && n > 10, "%d rows", n);
        /* cheapest first: the price never decreases */
        double pc = 0;
        ok = 1;
        n = 0;
        for (int k = 1;; k++) {
            const char *row = row_after(r.out, "cheapest first", k);
            if (!row)
                break;
            double c = row_cost(row);
            ok &= c >= pc;
            pc = c;
            n++;
        }
        TH_CHECKF(t, ok && n > 10, "%d rows", n);
    }
    /* every split of "all" over 1-16 cores on v3-32: 1x16x1x1 is one */
    TH_CHECK(t, strstr(r.out, "1x16x1x1"));

    th_case(t, "ranges: a row whose range overlaps the first's is marked "
               "with the --set that reorders them, and that --set does; "
               "rows far apart are not marked; the closing line compares "
               "the best per chip with the runner-up");
    th_run(&r,
           "%s advise traces/small/tiny2d.json --slices v3-8,v3-32 --top 3 "
           "--jobs 2 " TINY_FIXED_COSTS,
           th_bin());
    TH_CHECKF(t, r.status == 0 &&
                     strstr(r.out, "step ranges over the unconfirmed "
                                   "assumptions: the first 3 of each table") &&
                     strstr(r.out, "step range s"),
              "%s%s", r.out, r.err);
    {
        /* the first row with a named key, and the first row */
        const char *first = row_after(r.out, "fastest first:", 1);
        const char *marked = NULL;
        for (int k = 2; k <= 3 && !marked; k++) {
            const char *row = row_after(r.out, "fastest first:", k);
            const char *eol = row ? strchr(row + 1, '\n') : NULL;
            const char *m = row ? strstr(row, "not distinguishable: --set ")
                                : NULL;
            if (m && m < eol)
                marked = row;
        }
        TH_CHECKF(t, first && marked, "%s", r.out);
        char s1[16] = "", p1[32] = "", s2[16] = "", p2[32] = "", kv[128] = "";
        int k1, k2;
        int ok = first && marked &&
                 sscanf(first, "%d %15s %*d %31s", &k1, s1, p1) == 3 &&
                 sscanf(marked, "%d %15s %*d %31s", &k2, s2, p2) == 3 &&
                 sscanf(strstr(marked, "--set ") + 6, "%127s", kv) == 1;
        /* "1x2x1x1" as --partition 1,2,1,1 */
        for (char *q = p1; *q; q++)
            *q = *q == 'x' ? ',' : *q;
        for (char *q = p2; *q; q++)
            *q = *q == 'x' ? ',' : *q;
        double st[2] = {0, 0};
        for (int i = 0; ok && i < 2; i++) {
            th_run(&r,
                   "%s run traces/small/tiny2d.json --system %s --partition "
                   "%s --set %s --quiet --no-range",
                   th_bin(), i ? s2 : s1, i ? p2 : p1, kv);
            st[i] = r.status == 0 ? atof(r.out) : 0;
        }
        /* the same global batch: with that value the marked row is the
         * faster */
        TH_CHECKF(t, ok && st[0] > 0 && st[1] > 0 && st[1] < st[0],
                  "--set %s: %s %s %g s, %s %s %g s", kv, s1, p1, st[0], s2,
                  p2, st[1]);
    }
    th_run(&r,
           "%s advise traces/small/tiny2d.json --slices v3-8 --top 0 "
           "--ranges 64 --jobs 2 " TINY_FIXED_COSTS,
           th_bin());
    TH_CHECKF(t, r.status == 0, "%s", r.err);
    {
        /* every row has its range: marked exactly when it overlaps the
         * first row's (the same batch: step ranges compare directly) */
        double lo1 = 0, hi1 = 0;
        int ok = 1, apart = 0, marked = 0;
        const char *stop = strstr(r.out, "cheapest first");
        for (int k = 1;; k++) {
            const char *row = row_after(r.out, "fastest first:", k);
            if (!row || row > stop)
                break;
            const char *eol = strchr(row + 1, '\n');
            /* the range is the 12th word */
            const char *p = row + 1;
            for (int w = 0; w < 11 && p; w++) {
                while (*p == ' ')
                    p++;
                while (*p && *p != ' ')
                    p++;
            }
            double lo = 0, hi = 0;
            ok &= p && sscanf(p, " %lf-%lf", &lo, &hi) == 2 && lo <= hi;
            const char *m = strstr(row, "not distinguishable");
            int is_marked = m && m < eol;
            if (k == 1) {
                lo1 = lo;
                hi1 = hi;
                ok &= !is_marked;
                continue;
            }
            int over = !advise_distinguishable(lo1, hi1, lo, hi);
            ok &= over == is_marked;
            apart += !over;
            marked += is_marked;
        }
        TH_CHECKF(t, ok && apart > 0 && marked > 0,
                  "ok %d, %d apart, %d marked: %s", ok, apart, marked, r.out);
        TH_CHECKF(t, strstr(r.out, "\nbest per chip: v3-8 with ") &&
                         strstr(r.out, "from the runner-up (v3-8 "),
                  "%s", r.out);
    }

    th_case(t, "--price scales the cost, not the ranking by step time");
    th_run(&r,
           "%s advise traces/small/tiny2d.json --slices v3-8 --top 1 "
           "--price 4",
           th_bin());
    TH_CHECKF(t, r.status == 0, "%s", r.err);
    TH_CHECK(t, strstr(r.out, "price: $4 per chip-hour (--price)"));

    th_case(t, "--csv and --png: written together");
    th_run(&r,
           "%s advise traces/small/tiny2d.json --slices v3-8,v3-32 "
           "--csv %s/a.csv --png %s/a.png",
           th_bin(), dir, dir);
    TH_CHECKF(t, r.status == 0, "%s", r.err);
    {
        char p[256];
        snprintf(p, sizeof p, "%s/a.csv", dir);
        FILE *f = fopen(p, "r");
        char line[512] = "";
        TH_CHECK(t, f && fgets(line, sizeof line, f));
        TH_CHECK(t, strncmp(line,
                            "rank,slice,chips,cores,"
                            "input_partition_dims,",
                            42) == 0);
        TH_CHECK(t, strstr(line, "usd_per_1m_examples"));
        if (f)
            fclose(f);
        int w, h;
        unsigned char *rgb = NULL;
        snprintf(p, sizeof p, "%s/a.png", dir);
        TH_CHECK(t, th_png_rgb(p, &w, &h, &rgb) == 1 && w > 100);
        free(rgb);
        rgb = NULL;
        snprintf(p, sizeof p, "%s/a-cost.png", dir);
        TH_CHECK(t, th_png_rgb(p, &w, &h, &rgb) == 1 && w > 100);
        free(rgb);
    }

    th_case(t, "an output that cannot be written leaves none");
    th_run(&r,
           "%s advise traces/small/tiny2d.json --slices v3-8 "
           "--csv %s/b.csv --png %s/nodir/b.png",
           th_bin(), dir, dir);
    TH_CHECK(t, r.status == 2);
    {
        char p[256];
        snprintf(p, sizeof p, "%s/b.csv", dir);
        TH_CHECK(t, access(p, F_OK) != 0);
    }

    th_case(t, "--print-commands: one run line per candidate, traces "
               "written");
    th_run(&r,
           "%s advise traces/small/tiny2d.json --slices v3-8 "
           "--print-commands --out %s/cmds --top 1",
           th_bin(), dir);
    TH_CHECKF(t, r.status == 0, "%s", r.err);
    {
        const char *l = strstr(r.out, "tpuemu run ");
        TH_CHECK(t, l && strstr(l, "--system v3-8 --batch 16"));
        char p[256];
        snprintf(p, sizeof p, "%s/cmds/traces/tiny2d-pd1x2x1x1.json", dir);
        TH_CHECK(t, access(p, R_OK) == 0);
        /* the line runs, and gives the table's step time */
        th_cmd_result r2;
        th_run(&r2, "%s run %s --system v3-8 --batch 16 --quiet", th_bin(), p);
        TH_CHECKF(t, r2.status == 0, "%s", r2.err);
    }

    th_case(t, "bad options: exit 2, the option named");
    th_run(&r, "%s advise traces/small/tiny2d.json --slices v3-7", th_bin());
    TH_CHECK(t, r.status == 2 && strstr(r.err, "--slices: unknown slice "
                                               "'v3-7'"));
    th_run(&r, "%s advise traces/small/tiny2d.json --slices v3-8,v3-8",
           th_bin());
    TH_CHECK(t, r.status == 2 && strstr(r.err, "given twice"));
    th_run(&r, "%s advise traces/small/tiny2d.json --max-chips 2", th_bin());
    TH_CHECK(t, r.status == 2 && strstr(r.err, "--max-chips 2"));
    th_run(&r, "%s advise traces/small/tiny2d.json --max-cpr 3", th_bin());
    TH_CHECK(t, r.status == 2 && strstr(r.err, "not a power of two"));
    th_run(&r, "%s advise traces/small/tiny2d.json --price -1", th_bin());
    TH_CHECK(t, r.status == 2 && strstr(r.err, "--price"));
    th_run(&r, "%s advise traces/small/tiny2d.json --print-commands", th_bin());
    TH_CHECK(t, r.status == 2 && strstr(r.err, "--out"));
    th_run(&r, "%s advise traces/small/tiny2d.json --set no.such=1", th_bin());
    TH_CHECK(t, r.status == 2 && strstr(r.err, "no.such"));
    th_run(&r, "%s advise traces/small/tiny2d.json --input 8x8x3", th_bin());
    TH_CHECK(t, r.status == 2 && strstr(r.err, "is a trace"));
    th_run(&r, "%s advise", th_bin());
    TH_CHECK(t, r.status == 2 && strstr(r.err, "no trace or model"));
    th_run(&r, "%s advise test/keras/nope.json", th_bin());
    TH_CHECK(t, r.status == 2 && strstr(r.err, "nope.json"));

    th_case(t, "a Keras model, with the import options");
    th_run(&r,
           "%s advise test/keras/seq_cnn.json --slices v3-8 --batch 8 "
           "--top 2",
           th_bin());
    TH_CHECKF(t, r.status == 0, "%s", r.err);
    TH_CHECK(t, strstr(r.out, "global batch 8:"));

    th_case(t, "a run that does not fit names what does, within 2 s");
    th_run(&r, "%s run traces/retinanet-2560-v3-8.json", th_bin());
    TH_CHECK(t, r.status == 3);
    TH_CHECKF(t,
              strstr(r.err, "tpuemu: note: fits on v3-32 with "
                            "input_partition_dims [1,1,1,1]: 1 core per "
                            "replica, 2 examples per replica"),
              "%s", r.err);
    /* each suggestion fits when run */
    th_run(&r, "%s run traces/retinanet-2560-v3-8.json --system v3-32 --quiet",
           th_bin());
    TH_CHECK(t, r.status == 0);

    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    TH_CHECK(t, system(cmd) == 0);
}
