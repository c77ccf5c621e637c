/* Malformed traces: every file in test/bad_traces/ (NAME.json with the
 * expected message text in NAME.err) must be refused with TPU_ERR_INPUT
 * (exit status 2 in the CLI) and one line "FILE: JSON.path: ...", by the
 * reader or by the run check against the trace's own system and batch.  Then
 * truncations and deterministic byte mutations of a valid trace, which
 * must never crash and either load or be refused the same way. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/graph.h"
#include "test/harness.h"

#define BAD_DIR "test/bad_traces"

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* One line, starting with the file name, for a refused trace. */
static int well_formed(const tpu_error *e, const char *file)
{
    size_t n = strlen(file);
    return strncmp(e->msg, file, n) == 0 && e->msg[n] == ':' &&
           e->msg[n + 1] == ' ' && !strchr(e->msg, '\n') &&
           !strchr(e->msg, '\r');
}

void th_suite_trace_bad(th_ctx *t)
{
    DIR *dir;
    struct dirent *de;
    char *names[512];
    int n = 0;
    graph g;
    tpu_error e;
    tpu_status st;

    th_case(t, "every trace in test/bad_traces is refused with its message");
    dir = opendir(BAD_DIR);
    if (!TH_CHECKF(t, dir != NULL, "cannot open %s", BAD_DIR))
        return;
    while ((de = readdir(dir)) && n < 512) {
        size_t l = strlen(de->d_name);
        if (l > 5 && strcmp(de->d_name + l - 5, ".json") == 0)
            names[n++] = strdup(de->d_name);
    }
    closedir(dir);
    qsort(names, (size_t)n, sizeof names[0], cmp_str);
    TH_CHECKF(t, n >= 30, "only %d bad traces", n);
    for (int i = 0; i < n; i++) {
        char path[512], errp[512], want[512];
        size_t wl = 0;
        char *w;
        snprintf(path, sizeof path, "%s/%s", BAD_DIR, names[i]);
        snprintf(errp, sizeof errp, "%s/%.*s.err", BAD_DIR,
                 (int)strlen(names[i]) - 5, names[i]);
        w = th_slurp(errp, &wl);
        if (!TH_CHECKF(t, w != NULL, "%s: no .err file", path)) {
            free(names[i]);
            continue;
        }
        while (wl && (w[wl - 1] == '\n' || w[wl - 1] == '\r'))
            w[--wl] = 0;
        snprintf(want, sizeof want, "%s", w);
        free(w);
        e.msg[0] = 0;
        st = graph_load(&g, path, &e);
        /* A system/batch combination that does not work is refused by the
         * run check every consumer applies to the effective system and
         * batch (sim_run), not by the reader: --system or --batch may
         * rescue it.  Without overrides, that is the trace's own. */
        if (st == TPU_OK) {
            st = graph_check_run(&g, g.system, g.global_batch, path, &e);
            graph_free(&g);
        }
        TH_CHECKF(t, st == TPU_ERR_INPUT, "%s: status %d (%s)", path, st,
                  e.msg);
        TH_CHECKF(t, well_formed(&e, path), "%s: malformed message '%s'",
                  path, e.msg);
        TH_CHECKF(t, strstr(e.msg, want) != NULL,
                  "%s:\n       got  '%s'\n       want '%s'", path, e.msg,
                  want);
        TH_CHECK(t, g.layers == NULL && g.n_layers == 0);
        graph_free(&g);
        free(names[i]);
    }

    th_case(t, "missing file, directory: TPU_ERR_INPUT with the OS reason");
    st = graph_load(&g, "test/bad_traces/no-such-file.json", &e);
    TH_CHECKF(t, st == TPU_ERR_INPUT &&
                     strstr(e.msg, "test/bad_traces/no-such-file.json: "
                                   "cannot open: No such file"),
              "%d %s", st, e.msg);
    graph_free(&g);
    st = graph_load(&g, BAD_DIR, &e);
    TH_CHECKF(t, st == TPU_ERR_INPUT && well_formed(&e, BAD_DIR), "%d %s", st,
              e.msg);
    graph_free(&g);

    th_case(t, "text without a terminating NUL, and with one inside");
    {
        const char *full = "{\"format\": \"tpuemu-trace/1\"}";
        char buf[64];
        memcpy(buf, full, strlen(full));
        memset(buf + strlen(full), 'x', sizeof buf - strlen(full));
        st = graph_parse(&g, buf, strlen(full), "nul.json", &e);
        /* parses up to len only: the trace lacks `system`, nothing more */
        TH_CHECKF(t, st == TPU_ERR_INPUT && strstr(e.msg, "missing key "
                                                          "'system'"),
                  "%s", e.msg);
        graph_free(&g);
        buf[5] = 0;
        st = graph_parse(&g, buf, strlen(full), "nul.json", &e);
        TH_CHECKF(t, st == TPU_ERR_INPUT && well_formed(&e, "nul.json"),
                  "%s", e.msg);
        graph_free(&g);
        st = graph_parse(&g, NULL, 0, "nul.json", &e);
        TH_CHECK(t, st == TPU_ERR_INPUT);
        graph_free(&g);
    }

    th_case(t, "every truncation of a valid trace is refused cleanly");
    {
        size_t len = 0, step;
        char *text = th_slurp("traces/small/tiny2d.json", &len);
        int bad = 0;
        if (TH_CHECK(t, text != NULL)) {
            st = graph_parse(&g, text, len, "tiny2d.json", &e);
            TH_CHECKF(t, st == TPU_OK, "%s", e.msg);
            graph_free(&g);
            step = th_asan() ? 7 : 1;
            for (size_t k = 0; k + 2 < len; k += step) {
                /* the last bytes are "}\n": dropping only the newline is
                 * still a valid trace */
                st = graph_parse(&g, text, k, "cut.json", &e);
                if (st != TPU_ERR_INPUT || !well_formed(&e, "cut.json"))
                    bad++;
                graph_free(&g);
            }
            TH_CHECKF(t, bad == 0, "%d truncations not refused cleanly", bad);
        }
        free(text);
    }

    th_case(t, "byte mutations of a valid trace load or are refused "
               "cleanly");
    {
        size_t len = 0;
        char *text = th_slurp("traces/small/tiny3d-p4.json", &len);
        char *m;
        unsigned long long s = 0x9e3779b97f4a7c15ULL;
        int rounds = th_asan() ? 300 : 3000, bad = 0, ok = 0;
        static const char subst[] = "0123456789-.,:[]{}\"eE \nxnulltrue";
        if (TH_CHECK(t, text != NULL)) {
            m = malloc(len);
            for (int r = 0; r < rounds && m; r++) {
                memcpy(m, text, len);
                for (int k = 0; k < 1 + r % 4; k++) {
                    size_t at;
                    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
                    at = (size_t)(s >> 33) % len;
                    m[at] = subst[(s >> 20) % (sizeof subst - 1)];
                }
                st = graph_parse(&g, m, len, "mut.json", &e);
                if (st == TPU_OK)
                    ok++;
                else if (st != TPU_ERR_INPUT || !well_formed(&e, "mut.json"))
                    bad++;
                graph_free(&g);
            }
            free(m);
            TH_CHECKF(t, bad == 0, "%d mutations not refused cleanly", bad);
            TH_CHECKF(t, ok < rounds, "every mutation loaded: not a test");
        }
        free(text);
    }
}
