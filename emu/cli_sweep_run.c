/* tpuemu sweep: the runs (emu/cli_sweep.h).  Every grid point is one
 * `tpuemu run` command line, deterministic, so the same grid runs under
 * GNU parallel, make -j or a Slurm array from --print-commands (one line
 * per run, in run order).  Otherwise the runs execute here, N at a time
 * (fork/exec of the binary, its output in OUT/logs/NNNN.log), and their
 * reports are read back: a run that does not fit the hardware (exit 3) is
 * a finding, not a failure. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "emu/cli.h"
#include "emu/cli_sweep.h"
#include "emu/report.h"

static void add_arg(sweep_cmd *c, const char *a)
{
    c->argv[c->argc++] = (char *)a;
}

static void add_opt(sweep_cmd *c, const char *opt, const char *val)
{
    add_arg(c, opt);
    add_arg(c, val);
}

void sweep_build_cmd(const sweep *s, const char *bin, const char *out,
                     long long i, sweep_cmd *c)
{
    int idx[SWEEP_MAX_AXES];
    sweep_run_index(s, i, idx);
    int apd = sweep_axis_of(s, AX_PD);
    c->argc = 0;
    add_arg(c, bin);
    add_arg(c, "run");
    add_arg(c, apd >= 0 ? sweep_val_of(s, apd, idx)->trace : s->trace);
    for (int a = 0; a < s->naxes; a++) {
        const sweep_val *v = sweep_val_of(s, a, idx);
        switch (s->ax[a].kind) {
        case AX_SYSTEM:
            add_opt(c, "--system", v->arg);
            if (v->batch[0])
                add_opt(c, "--batch", v->batch);
            break;
        case AX_BATCH:
            add_opt(c, "--batch", v->arg);
            break;
        case AX_FREEZE:
            add_opt(c, "--freeze", v->arg);
            break;
        case AX_SET:
            snprintf(c->setbuf[a], sizeof c->setbuf[a], "%s=%s",
                     s->ax[a].name, v->arg);
            add_opt(c, "--set", c->setbuf[a]);
            break;
        case AX_PD:
            break;
        }
    }
    snprintf(c->report, sizeof c->report, "%.*s/reports/%04lld.json",
             SWEEP_OUT_MAX, out, i);
    add_opt(c, "--report", c->report);
    add_arg(c, "--quiet");
    c->argv[c->argc] = NULL;
}

/* One shell word: quoted unless it is plainly safe. */
static void put_word(FILE *f, const char *w)
{
    if (*w && strspn(w, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                        "0123456789_./=:,+-@%") == strlen(w)) {
        fputs(w, f);
        return;
    }
    fputc('\'', f);
    for (; *w; w++) {
        if (*w == '\'')
            fputs("'\\''", f);
        else
            fputc(*w, f);
    }
    fputc('\'', f);
}

static void put_cmd(FILE *f, const sweep_cmd *c)
{
    for (int k = 0; k < c->argc; k++) {
        if (k)
            fputc(' ', f);
        put_word(f, c->argv[k]);
    }
    fputc('\n', f);
}

int sweep_write_commands(const sweep *s, const char *bin, const char *out,
                         int print_only)
{
    sweep_cmd *cmd = malloc(sizeof *cmd);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!cmd || !f) {
        free(cmd);
        if (f)
            fclose(f);
        free(buf);
        return cli_error(4, "out of memory");
    }
    long long nruns = sweep_count_runs(s);
    for (long long i = 0; i < nruns; i++) {
        sweep_build_cmd(s, bin, out, i, cmd);
        put_cmd(print_only ? stdout : f, cmd);
    }
    fclose(f);
    free(cmd);
    int rc = 0;
    if (!print_only) {
        char path[1100];
        tpu_error err = {0};
        sweep_out_path(path, sizeof path, out, "commands.txt");
        if (tpu_write_atomic(path, buf ? buf : "", len, &err))
            rc = cli_fail(&err);
    }
    free(buf);
    return rc;
}

/* ---- running ------------------------------------------------------------ */

/* The runs under way: which are started, running and done. */
typedef struct {
    const sweep *s;
    const char *bin, *out;
    long long nruns, jobs;
    sweep_run *res;
    pid_t *pids;      /* per run, while it runs */
    sweep_cmd cmd;
    long long next, running, done;
    int spawn_errno;  /* why the first run that could not start did not */
} runner;

static pid_t spawn(const sweep_cmd *c, const char *log)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
    }
    execv(c->argv[0], c->argv);
    fprintf(stderr, "tpuemu: error: sweep: cannot run %s: %s\n", c->argv[0],
            strerror(errno));
    _exit(127);
}

/* Starts runs until `jobs` run at once or none is left. */
static void start_runs(runner *rn)
{
    while (rn->running < rn->jobs && rn->next < rn->nruns) {
        long long i = rn->next++;
        sweep_build_cmd(rn->s, rn->bin, rn->out, i, &rn->cmd);
        /* A stale report of an earlier sweep must not stand in for a
         * run that fails before writing its own. */
        unlink(rn->cmd.report);
        char log[1100], name[32];
        snprintf(name, sizeof name, "logs/%04lld.log", i);
        sweep_out_path(log, sizeof log, rn->out, name);
        fflush(stdout);
        fflush(stderr);
        pid_t pid = spawn(&rn->cmd, log);
        if (pid < 0) {
            if (!rn->spawn_errno)
                rn->spawn_errno = errno;
            rn->res[i].status = -2;
            rn->done++;
        } else {
            rn->pids[i] = pid;
            rn->running++;
        }
    }
}

/* Waits for one run to end and records how it ended; 0 when there is
 * nothing (more) to wait for. */
static int reap_one(runner *rn)
{
    int st;
    pid_t pid = waitpid(-1, &st, 0);
    if (pid < 0)
        return errno == EINTR;
    for (long long i = 0; i < rn->next; i++) {
        if (rn->pids[i] != pid)
            continue;
        sweep_run *r = &rn->res[i];
        rn->pids[i] = 0;
        r->status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        r->sig = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
        rn->running--;
        rn->done++;
        fprintf(stderr, "[%lld/%lld] run %04lld: %s\n", rn->done, rn->nruns,
                i,
                r->status == 0   ? "done"
                : r->status == 3 ? "does not fit"
                                 : "FAILED");
        break;
    }
    return 1;
}

/* Run i's report read back (a run that finished, fitting or not); a run
 * that exited 0 without a report it could read failed after all, with
 * the reason in why. */
static void read_back(runner *rn, long long i, char *why, size_t cap)
{
    sweep_run *r = &rn->res[i];
    why[0] = 0;
    if (r->status != 0 && r->status != 3)
        return;
    sweep_build_cmd(rn->s, rn->bin, rn->out, i, &rn->cmd);
    tpu_error err = {0};
    r->have = report_read(&r->r, rn->cmd.report, &err) == TPU_OK;
    if (r->have || r->status != 0)
        return;
    /* Exit 0 without a report it could read: not a tpuemu run (a wrong
     * --bin) or a broken one. */
    char m[400];
    cli_shown(m, sizeof m, err.msg);
    r->status = 2;
    snprintf(why, cap, "exited 0 but its report cannot be read (%s)", m);
}

/* Counts run i into t; the first failure's exit status and reason kept. */
static void tally(sweep_tally *t, long long i, const sweep_run *r,
                  const char *why, int spawn_errno)
{
    if (r->status == 3)
        t->nofit++;
    if (r->status == 3 || r->status == 0)
        return;
    t->failed++;
    if (t->first_fail)
        return;
    t->first_fail = r->status > 0 ? r->status : 4;
    t->fail_run = i;
    if (why[0])
        snprintf(t->fail_why, sizeof t->fail_why, "%s", why);
    else if (r->status == -1)
        snprintf(t->fail_why, sizeof t->fail_why, "was killed by signal %d",
                 r->sig);
    else if (r->status == -2)
        snprintf(t->fail_why, sizeof t->fail_why,
                 "could not be started (%s)",
                 strerror(spawn_errno ? spawn_errno : EAGAIN));
    else
        snprintf(t->fail_why, sizeof t->fail_why, "failed (exit %d)",
                 r->status);
}

int sweep_run_all(const sweep *s, const char *bin, const char *out,
                  long long jobs, sweep_run *res, sweep_tally *t)
{
    runner *rn = calloc(1, sizeof *rn);
    long long nruns = sweep_count_runs(s);
    pid_t *pids = calloc((size_t)nruns, sizeof *pids);
    if (!rn || !pids) {
        free(rn);
        free(pids);
        return cli_error(4, "out of memory");
    }
    *rn = (runner){.s = s, .bin = bin, .out = out, .nruns = nruns,
                   .jobs = jobs, .res = res, .pids = pids};
    printf("sweep %s: %lld runs, %lld at a time, in %s\n", s->name, nruns,
           jobs, out);
    fflush(stdout);
    while (rn->done < nruns) {
        start_runs(rn);
        if (rn->running > 0 && !reap_one(rn))
            break;
    }
    memset(t, 0, sizeof *t);
    t->fail_run = -1;
    for (long long i = 0; i < nruns; i++) {
        char why[600];
        read_back(rn, i, why, sizeof why);
        tally(t, i, &res[i], why, rn->spawn_errno);
    }
    free(pids);
    free(rn);
    return 0;
}
