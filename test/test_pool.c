/* emu/cli/pool: tasks in forked workers, their output and results back
 * in task order as if they had run one after another, whatever order
 * they finish or start in, and what a worker that dies costs (its task
 * only).  The runner fails the suite if a worker is left behind. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "emu/cli/pool.h"
#include "test/harness.h"

#define NT 6

typedef struct {
    int die;     /* task that ends its worker (-1: none) */
    int fail;    /* task that returns nonzero (-1: none) */
    int got[NT]; /* delivery order */
    int ok[NT];
    char blob[NT][16];
    int n;
    int parent; /* pid of this process */
} pctx;

/* Task i finishes after task i+1 (it sleeps longer), prints a line on
 * each stream and hands back "blob i". */
static int ptask(void *ctx, int i, char **blob, size_t *len)
{
    const pctx *p = ctx;
    struct timespec d = {0, (long)(NT - i) * 15000000L};
    nanosleep(&d, NULL);
    printf("out %d\n", i);
    fprintf(stderr, "err %d\n", i);
    if (i == p->die && getpid() != p->parent)
        _exit(9);
    char b[16];
    int n = snprintf(b, sizeof b, "blob %d", i) + 1;
    *blob = malloc((size_t)n);
    if (!*blob)
        return 1;
    memcpy(*blob, b, (size_t)n);
    *len = (size_t)n;
    return i == p->fail;
}

static void pdeliver(void *ctx, int i, const char *blob, size_t len, int ok)
{
    pctx *p = ctx;
    if (p->n < NT) {
        p->got[p->n] = i;
        p->ok[p->n] = ok;
        snprintf(p->blob[p->n], sizeof p->blob[p->n], "%s",
                 blob && len && blob[len - 1] == '\0' ? blob : "-");
    }
    p->n++;
}

/* pool_run with this process's stdout and stderr caught in files: what
 * the pool wrote on each into out/err. */
static int run_caught(pctx *p, int jobs, const int *order, char **out,
                      char **err)
{
    char po[600], pe[600];
    snprintf(po, sizeof po, "%s/pool-out.txt", th_tmpdir());
    snprintf(pe, sizeof pe, "%s/pool-err.txt", th_tmpdir());
    fflush(stdout);
    fflush(stderr);
    int so = dup(1), se = dup(2);
    FILE *fo = fopen(po, "w"), *fe = fopen(pe, "w");
    int rc = -2;
    if (so >= 0 && se >= 0 && fo && fe && dup2(fileno(fo), 1) >= 0 &&
        dup2(fileno(fe), 2) >= 0) {
        p->parent = (int)getpid();
        rc = pool_run(NT, jobs, order, ptask, pdeliver, p);
        fflush(stdout);
        fflush(stderr);
    }
    if (so >= 0) {
        dup2(so, 1);
        close(so);
    }
    if (se >= 0) {
        dup2(se, 2);
        close(se);
    }
    if (fo)
        fclose(fo);
    if (fe)
        fclose(fe);
    *out = th_slurp(po, NULL);
    *err = th_slurp(pe, NULL);
    return rc;
}

/* "WORD 0\n" ... "WORD NT-1\n" into buf. */
static void lines(char *buf, size_t cap, const char *word)
{
    buf[0] = '\0';
    for (int i = 0; i < NT; i++) {
        size_t k = strlen(buf);
        snprintf(buf + k, cap - k, "%s %d\n", word, i);
    }
}

static int in_order(const pctx *p, int bad)
{
    if (p->n != NT)
        return 0;
    for (int i = 0; i < NT; i++) {
        char b[24];
        snprintf(b, sizeof b, "blob %d", i);
        if (p->got[i] != i || p->ok[i] != (i != bad) ||
            strcmp(p->blob[i], i == bad && bad == p->die ? "-" : b) != 0)
            return 0;
    }
    return 1;
}

void th_suite_pool(th_ctx *t)
{
    char want_out[128], want_err[128];
    lines(want_out, sizeof want_out, "out");
    lines(want_err, sizeof want_err, "err");
    char *out, *err;

    th_case(t, "output and results come back in task order, stdout then "
               "stderr, though later tasks finish first");
    {
        pctx p = {.die = -1, .fail = -1};
        int rc = run_caught(&p, 3, NULL, &out, &err);
        TH_CHECKF(t, rc == 0 && in_order(&p, -1), "rc %d, %d delivered", rc,
                  p.n);
        TH_CHECKF(
            t, out && err && !strcmp(out, want_out) && !strcmp(err, want_err),
            "stdout [%s] stderr [%s]", out ? out : "?", err ? err : "?");
        free(out);
        free(err);
    }

    th_case(t, "the start order changes nothing that comes back");
    {
        pctx p = {.die = -1, .fail = -1};
        int order[NT] = {5, 3, 1, 0, 2, 4};
        int rc = run_caught(&p, 2, order, &out, &err);
        TH_CHECKF(t,
                  rc == 0 && in_order(&p, -1) && out && err &&
                      !strcmp(out, want_out) && !strcmp(err, want_err),
                  "rc %d, %d delivered, stdout [%s]", rc, p.n, out ? out : "?");
        free(out);
        free(err);
    }

    th_case(t, "a task that fails is delivered not ok, its output kept");
    {
        pctx p = {.die = -1, .fail = 2};
        int rc = run_caught(&p, 2, NULL, &out, &err);
        TH_CHECKF(t,
                  rc == 0 && in_order(&p, 2) && out && !strcmp(out, want_out),
                  "rc %d, %d delivered, stdout [%s]", rc, p.n, out ? out : "?");
        free(out);
        free(err);
    }

    th_case(t, "a worker that dies loses its own task only; the others "
               "come back in order");
    {
        pctx p = {.die = 3, .fail = -1};
        int rc = run_caught(&p, 2, NULL, &out, &err);
        /* the lost task's lines died with its worker */
        char wo[128] = "", we[128] = "";
        for (int i = 0; i < NT; i++)
            if (i != 3) {
                size_t k = strlen(wo), l = strlen(we);
                snprintf(wo + k, sizeof wo - k, "out %d\n", i);
                snprintf(we + l, sizeof we - l, "err %d\n", i);
            }
        TH_CHECKF(t,
                  rc == 0 && in_order(&p, 3) && out && err &&
                      !strcmp(out, wo) && !strcmp(err, we),
                  "rc %d, %d delivered, stdout [%s] stderr [%s]", rc, p.n,
                  out ? out : "?", err ? err : "?");
        free(out);
        free(err);
    }

    th_case(t, "when the only worker dies, the tasks it never ran run here, "
               "in order");
    {
        pctx p = {.die = 0, .fail = -1};
        int rc = run_caught(&p, 1, NULL, &out, &err);
        int ok = rc == 0 && p.n == NT && p.got[0] == 0 && !p.ok[0];
        for (int i = 1; i < NT && ok; i++)
            ok = p.got[i] == i && p.ok[i];
        TH_CHECKF(t, ok && out && !strcmp(out, strchr(want_out, '\n') + 1),
                  "rc %d, %d delivered, stdout [%s]", rc, p.n, out ? out : "?");
        free(out);
        free(err);
    }

    th_case(t, "no task: nothing runs, nothing is delivered");
    {
        pctx p = {.die = -1, .fail = -1};
        TH_CHECK(t, pool_run(0, 2, NULL, ptask, pdeliver, &p) == 0 && p.n == 0);
    }
}
