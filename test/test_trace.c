/* The trace reader's view of its input file: a tpuemu file of another
 * kind is named as what it is, and a trace without "name" takes a safe
 * name from its file's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test/harness.h"

/* A tpuemu file of the wrong kind is named as what it is, not read as a
 * trace with unknown keys. */
static void file_kind_cases(th_ctx *t)
{
    static th_cmd_result c;
    char rep[512];
    snprintf(rep, sizeof rep, "%s/kind-report.json", th_tmpdir());

    th_case(t, "run on a report or a sweep file, sweep on a trace: exit 2 "
               "saying what the file is (not 'unknown key')");
    th_run(&c, "%s run traces/small/tiny2d.json --report %s --quiet", th_bin(),
           rep);
    TH_CHECKF(t, c.status == 0, "%d %s", c.status, c.err);
    th_run(&c, "%s run %s", th_bin(), rep);
    TH_CHECKF(t, c.status == 2 && strstr(c.err, "format: this is a tpuemu "
                                                "report") &&
                     !strstr(c.err, "unknown key"),
              "%d %s", c.status, c.err);
    th_run(&c, "%s run traces/sweeps/retinanet-all-splits.json", th_bin());
    TH_CHECKF(t, c.status == 2 && strstr(c.err, "this is a sweep file"),
              "%d %s", c.status, c.err);
    th_run(&c, "%s sweep traces/small/tiny2d.json", th_bin());
    TH_CHECKF(t, c.status == 2 && strstr(c.err, "this is a trace") &&
                     !strstr(c.err, "unknown key"),
              "%d %s", c.status, c.err);
}

/* A trace without "name" takes its file's name, which may hold any byte:
 * run must not print it raw, nor write a report check and view refuse. */
static void filename_cases(th_ctx *t, th_cmd_result *c)
{
    char x126[160];
    memset(x126, 'x', 126);
    x126[126] = 0;
    const struct {
        const char *file, *name;
    } k[] = {
        {"a\nb\033[31m", "a?b?[31m"},
        {"bad\377", "bad?"},
        {"c1\302\233x\342\200\256y", "c1?x?y"},
        {"\303\251t\303\251\302\205", "\303\251t\303\251?"}, /* é kept */
        {NULL, x126}, /* 126 bytes and a 2-byte character: cut before it */
    };
    char *text = th_slurp("traces/small/tiny2d.json", NULL);
    char *named = text ? strstr(text, "\"name\": \"tiny2d\",") : NULL;
    if (named)
        memset(named, ' ', strlen("\"name\": \"tiny2d\","));
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        char file[512], rep[512], want[512];
        snprintf(file, sizeof file, "%s/%s%s.json", th_tmpdir(),
                 k[i].file ? k[i].file : x126, k[i].file ? "" : "\303\251");
        snprintf(rep, sizeof rep, "%s/trace-fn%zu.json", th_tmpdir(), i);
        th_case(t, "run: a trace's default name from a hostile file name is "
                   "one line of UTF-8, and its report reads back");
        if (!TH_CHECKF(t, named != NULL, "tiny2d.json has no name to remove"))
            continue;
        th_put(file, text);
        th_run(c, "%s run '%s' --report %s", th_bin(), file, rep);
        snprintf(want, sizeof want, "%s on v3-8: ", k[i].name);
        TH_CHECKF(t,
                  c->status == 0 && strncmp(c->out, want, strlen(want)) == 0 &&
                      th_terminal_safe(c->out),
                  "%d '%.80s' %s", c->status, c->out, c->err);
        char *r = th_slurp(rep, NULL);
        snprintf(want, sizeof want, "\"trace\": \"%s\",", k[i].name);
        TH_CHECKF(t, r && strstr(r, want), "no %s in the report", want);
        free(r);
        th_run(c, "%s check --baseline %s %s", th_bin(), rep, rep);
        TH_CHECKF(t, c->status == 0 && th_terminal_safe(c->out), "check: %d %s",
                  c->status, c->err);
    }
    free(text);
}

void th_suite_trace(th_ctx *t)
{
    th_cmd_result *c = calloc(1, sizeof *c);
    if (!c)
        return;
    file_kind_cases(t);
    filename_cases(t, c);
    free(c);
}
