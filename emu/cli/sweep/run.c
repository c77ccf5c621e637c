/* tpuemu sweep: the runs (emu/cli/sweep/sweep.h).  Every grid point is one
 * `tpuemu run` command line, deterministic, so the same grid runs under
 * GNU parallel, make -j or a Slurm array from --print-commands (one line
 * per run, in run order).  Otherwise the runs execute here, N at a time
 * (fork/exec of the binary, its output in OUT/logs/NNNN.log), and their
 * reports are read back: a run that does not fit the hardware (exit 3) is
 * a finding, not a failure.
 *
 * Interruptions: SIGINT, SIGTERM or SIGHUP to the sweep alone (a CI
 * timeout, `kill PID`) must not orphan its runs, which would go on
 * writing into the output directory after the sweep ended.  While runs
 * are under way the sweep forwards the signal to each of them, waits for
 * them, gathers nothing and dies of the same signal (sweep.c).  The
 * handler only records the signal in a volatile sig_atomic_t; the loop
 * keeps the signals blocked and waits in sigsuspend, so one that arrives
 * between a check and the wait still ends the wait. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "emu/cli/cli.h"
#include "emu/cli/sweep/sweep.h"
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
    if (s->no_range)
        add_arg(c, "--no-range");
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
        if (sweep_skipped(s, i))
            continue;
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

/* ---- interruptions ------------------------------------------------------ */

static const int stop_sigs[] = {SIGINT, SIGTERM, SIGHUP};
#define N_STOP_SIGS 3

/* The first stop signal caught while sweep_catch_signals is in force. */
static volatile sig_atomic_t caught_sig;

static void on_stop_signal(int sig)
{
    if (!caught_sig)
        caught_sig = sig;
}

/* Only there to end sigsuspend when a run ends. */
static void on_child(int sig)
{
    (void)sig;
}

void sweep_catch_signals(sweep_sigs *g)
{
    memset(g, 0, sizeof *g);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    for (int k = 0; k < N_STOP_SIGS; k++) {
        /* A signal ignored when the sweep started (nohup, `cmd &` in a
         * script) stays ignored, for the sweep and its runs alike. */
        if (sigaction(stop_sigs[k], NULL, &g->old[k]) != 0 ||
            g->old[k].sa_handler == SIG_IGN)
            continue;
        g->installed[k] = sigaction(stop_sigs[k], &sa, NULL) == 0;
    }
}

void sweep_release_signals(sweep_sigs *g)
{
    for (int k = 0; k < N_STOP_SIGS; k++)
        if (g->installed[k])
            sigaction(stop_sigs[k], &g->old[k], NULL);
    memset(g, 0, sizeof *g);
}

int sweep_caught(void)
{
    return caught_sig;
}

const char *sweep_sig_name(int sig)
{
    return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM"
           : sig == SIGHUP ? "SIGHUP" : "a signal";
}

void sweep_die(int sig)
{
    fflush(stdout);
    fflush(stderr);
    signal(sig, SIG_DFL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    sigprocmask(SIG_UNBLOCK, &set, NULL);
    raise(sig);
    _exit(128 + sig); /* not reached: the default action ends the process */
}

/* ---- running ------------------------------------------------------------ */

/* The runs under way: which are started, running and done. */
typedef struct {
    const sweep *s;
    const char *bin, *out;
    long long nruns, jobs;
    long long ndo;    /* the runs of the grid that run (not skipped) */
    sweep_run *res;
    pid_t *pids;      /* per run, while it runs */
    sweep_cmd cmd;
    long long next, running, done;
    int spawn_errno;  /* why the first run that could not start did not */
    int stop;         /* the signal that stops the sweep, 0 while it runs */
    long long before_stop; /* runs that ended before it */
    sigset_t child_mask; /* the signal mask the sweep was started with */
} runner;

/* In the new process: the signal handling the sweep was started with
 * (a caught signal's handler would be reset by exec, but one arriving
 * before exec would run it here and be lost to the run). */
static void child_signals(const sigset_t *mask)
{
    struct sigaction sa;
    for (int k = 0; k < N_STOP_SIGS; k++)
        if (sigaction(stop_sigs[k], NULL, &sa) == 0 &&
            sa.sa_handler == on_stop_signal)
            signal(stop_sigs[k], SIG_DFL);
    signal(SIGCHLD, SIG_DFL);
    sigprocmask(SIG_SETMASK, mask, NULL);
}

static pid_t spawn(const sweep_cmd *c, const char *log, const sigset_t *mask)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    child_signals(mask);
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
        if (sweep_skipped(rn->s, i)) {
            rn->res[i].status = SWEEP_SKIPPED;
            continue;
        }
        sweep_build_cmd(rn->s, rn->bin, rn->out, i, &rn->cmd);
        /* A stale report of an earlier sweep must not stand in for a
         * run that fails before writing its own. */
        unlink(rn->cmd.report);
        char log[1100], name[32];
        snprintf(name, sizeof name, "logs/%04lld.log", i);
        sweep_out_path(log, sizeof log, rn->out, name);
        fflush(stdout);
        fflush(stderr);
        pid_t pid = spawn(&rn->cmd, log, &rn->child_mask);
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

/* Records how the run of pid ended. */
static void record_end(runner *rn, pid_t pid, int st)
{
    for (long long i = 0; i < rn->next; i++) {
        if (rn->pids[i] != pid)
            continue;
        sweep_run *r = &rn->res[i];
        rn->pids[i] = 0;
        r->status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        r->sig = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
        rn->running--;
        rn->done++;
        rn->before_stop += !rn->stop;
        fprintf(stderr, "[%lld/%lld] run %04lld: %s\n", rn->done, rn->ndo,
                i,
                rn->stop         ? "stopped"
                : r->status == 0 ? "done"
                : r->status == 3 ? "does not fit"
                                 : "FAILED");
        break;
    }
}

/* Records every run that has ended, without waiting; how many. */
static int reap_ended(runner *rn)
{
    int n = 0, st;
    pid_t pid;
    while (rn->running > 0 && (pid = waitpid(-1, &st, WNOHANG)) > 0) {
        record_end(rn, pid, st);
        n++;
    }
    return n;
}

/* The stop signal passed on to every run under way (they may not share
 * the sweep's process group: only the sweep was signalled). */
static void forward_stop(runner *rn, int sig)
{
    rn->stop = sig;
    fprintf(stderr, "sweep: %s: stopping the %lld run%s under way\n",
            sweep_sig_name(sig), rn->running, rn->running == 1 ? "" : "s");
    for (long long i = 0; i < rn->next; i++)
        if (rn->pids[i] > 0)
            kill(rn->pids[i], sig);
}

/* Starts and waits for the runs until all are done, or, once a stop
 * signal came, until those under way ended.  The stop signals and SIGCHLD
 * are blocked but for the sigsuspend, so none goes unseen. */
static void run_loop(runner *rn)
{
    sigset_t hold, wait_mask;
    sigemptyset(&hold);
    for (int k = 0; k < N_STOP_SIGS; k++)
        sigaddset(&hold, stop_sigs[k]);
    sigaddset(&hold, SIGCHLD);
    sigprocmask(SIG_BLOCK, &hold, &rn->child_mask);
    wait_mask = rn->child_mask;
    sigdelset(&wait_mask, SIGCHLD);
    struct sigaction sa, old_chld;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_child;
    sa.sa_flags = SA_NOCLDSTOP;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGCHLD, &sa, &old_chld);
    for (;;) {
        if (!rn->stop)
            start_runs(rn);
        int ended = reap_ended(rn);
        if (caught_sig && !rn->stop)
            forward_stop(rn, caught_sig);
        if (rn->running == 0 && (rn->stop || rn->done >= rn->ndo))
            break;
        if (!ended && rn->running > 0)
            sigsuspend(&wait_mask);
    }
    sigaction(SIGCHLD, &old_chld, NULL);
    sigprocmask(SIG_SETMASK, &rn->child_mask, NULL);
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
    if (r->status == SWEEP_SKIPPED) {
        t->skipped++;
        return;
    }
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
                   .ndo = nruns - s->nskipped, .jobs = jobs, .res = res,
                   .pids = pids};
    printf("sweep %s: %lld runs, %lld at a time, in %s\n", s->name,
           rn->ndo, jobs, out);
    fflush(stdout);
    run_loop(rn);
    memset(t, 0, sizeof *t);
    t->fail_run = -1;
    t->finished = rn->before_stop;
    for (long long i = 0; !rn->stop && !caught_sig && i < nruns; i++) {
        char why[600];
        read_back(rn, i, why, sizeof why);
        tally(t, i, &res[i], why, rn->spawn_errno);
    }
    free(pids);
    free(rn);
    return 0;
}

/* ---- gathering only (--gather) ------------------------------------------ */

/* How many runs without a readable report --gather names one by one (with
 * their command lines) before it only counts the rest. */
#define SWEEP_GATHER_SHOW 10

/* The batch run idx is given: its command line's, else the base trace's. */
static int64_t cmd_batch(const sweep *s, const int *idx)
{
    int abat = sweep_axis_of(s, AX_BATCH), asys = sweep_axis_of(s, AX_SYSTEM);
    if (abat >= 0)
        return strtoll(sweep_val_of(s, abat, idx)->arg, NULL, 10);
    if (asys >= 0 && sweep_val_of(s, asys, idx)->batch[0])
        return strtoll(sweep_val_of(s, asys, idx)->batch, NULL, 10);
    return s->g.global_batch;
}

/* Whether run i's --set values are the report's overrides, exactly; the
 * first that differs in why. */
static int same_overrides(const sweep *s, const int *idx, const emu_result *r,
                          char *why, size_t cap)
{
    int nset = 0;
    for (int a = 0; a < s->naxes; a++) {
        if (s->ax[a].kind != AX_SET)
            continue;
        nset++;
        const char *want = sweep_val_of(s, a, idx)->arg, *got = NULL;
        for (int k = 0; k < r->n_overrides && !got; k++)
            if (strcmp(r->overrides[k].key, s->ax[a].name) == 0)
                got = r->overrides[k].value;
        if (!got || strcmp(got, want) != 0) {
            snprintf(why, cap, "%.64s %.64s, its command's %.64s",
                     s->ax[a].name, got ? got : "not set", want);
            return 0;
        }
    }
    if (r->n_overrides != nset) {
        snprintf(why, cap, "%d --set overrides, its command's %d",
                 r->n_overrides, nset);
        return 0;
    }
    return 1;
}

/* Whether report r is what run i's command writes (trace, mode, system,
 * batch, cores per replica, --set values, --freeze list): a report left
 * by another grid in the same directory must not pass for this run's.
 * What differs in why. */
static int report_matches(const sweep *s, long long i, const emu_result *r,
                          char *why, size_t cap)
{
    int idx[SWEEP_MAX_AXES];
    sweep_run_index(s, i, idx);
    int asys = sweep_axis_of(s, AX_SYSTEM), apd = sweep_axis_of(s, AX_PD);
    int afr = sweep_axis_of(s, AX_FREEZE);
    const char *sys = asys >= 0 ? sweep_val_of(s, asys, idx)->arg
                                : s->g.system;
    int64_t batch = cmd_batch(s, idx);
    int cpr = apd >= 0 ? sweep_val_of(s, apd, idx)->cpr
                       : s->g.cores_per_replica;
    const char *fr = afr >= 0 ? sweep_val_of(s, afr, idx)->arg : "";
    char d[300] = "";
    if (strncmp(r->trace, s->g.name, sizeof r->trace - 1) != 0)
        snprintf(d, sizeof d, "trace '%.100s', its command's '%.100s'",
                 r->trace, s->g.name);
    else if (r->train != s->g.train)
        snprintf(d, sizeof d, "mode %s, its command's %s",
                 r->train ? "train" : "infer", s->g.train ? "train" : "infer");
    else if (strcmp(r->system, sys) != 0)
        snprintf(d, sizeof d, "system %s, its command's %s", r->system, sys);
    else if (r->global_batch != batch)
        snprintf(d, sizeof d, "global batch %lld, its command's %lld",
                 (long long)r->global_batch, (long long)batch);
    else if (r->cores_per_replica != cpr)
        snprintf(d, sizeof d, "%d cores per replica, its command's %d",
                 r->cores_per_replica, cpr);
    else if (strcmp(r->freeze, fr) != 0)
        snprintf(d, sizeof d, "--freeze '%.100s', its command's '%.100s'",
                 r->freeze, fr);
    else if (!same_overrides(s, idx, r, d, sizeof d))
        ;
    else
        return 1;
    snprintf(why, cap, "it is the report of another run: %s", d);
    return 0;
}

/* Run i's report into r: 0 read and matching, 1 not (why says why),
 * 4 out of memory (error printed). */
static int gather_one(const sweep *s, long long i, const sweep_cmd *c,
                      sweep_run *r, char *why, size_t cap)
{
    tpu_error err = {0};
    tpu_status st = report_read(&r->r, c->report, &err);
    if (st == TPU_ERR_SYSTEM)
        return cli_fail(&err);
    if (st == TPU_OK && report_matches(s, i, &r->r, why, cap)) {
        r->have = 1;
        /* `run` exits 3 exactly when the step does not fit, with the
         * report saying fits: false; else 0 */
        r->status = r->r.fits ? 0 : 3;
        return 0;
    }
    if (st != TPU_OK)
        cli_shown(why, cap, err.msg);
    emu_result_free(&r->r);
    r->status = -3;
    return 1;
}

int sweep_read_reports(const sweep *s, const char *bin, const char *out,
                       sweep_run *res, sweep_tally *t)
{
    sweep_cmd *c = malloc(sizeof *c);
    if (!c)
        return cli_error(4, "out of memory");
    long long nruns = sweep_count_runs(s);
    memset(t, 0, sizeof *t);
    t->fail_run = -1;
    printf("sweep %s: gathering the reports of %lld runs from %s/reports\n",
           s->name, nruns - s->nskipped, out);
    fflush(stdout);
    for (long long i = 0; i < nruns && !caught_sig; i++) {
        char why[600];
        if (sweep_skipped(s, i)) {
            res[i].status = SWEEP_SKIPPED;
            t->skipped++;
            continue;
        }
        sweep_build_cmd(s, bin, out, i, c);
        int rc = gather_one(s, i, c, &res[i], why, sizeof why);
        if (rc == 4) {
            free(c);
            return 4;
        }
        t->finished++;
        if (rc == 0) {
            t->nofit += res[i].status == 3;
            continue;
        }
        if (++t->failed == 1) {
            t->first_fail = 2;
            t->fail_run = i;
            snprintf(t->fail_why, sizeof t->fail_why, "%s", why);
        }
        if (t->failed <= SWEEP_GATHER_SHOW) {
            fprintf(stderr, "sweep: run %04lld: no readable report (%s); "
                            "its command:\n",
                    i, why);
            put_cmd(stderr, c);
        } else if (t->failed == SWEEP_GATHER_SHOW + 1) {
            fprintf(stderr, "sweep: (more runs without a readable report: "
                            "counted, not listed)\n");
        }
    }
    free(c);
    return 0;
}
