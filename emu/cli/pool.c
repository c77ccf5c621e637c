/* pool — tasks in forked workers, output replayed in task order (pool.h).
 *
 * The parent hands each worker one task index at a time over the
 * worker's command socket and the next one when its result is back, so
 * long tasks spread over the workers and short ones fill in behind.  A
 * worker points its stdout and stderr at two temporary files, runs the
 * task, and writes back one message: a header, the task's stdout, its
 * stderr and its blob.  The parent keeps results until every earlier
 * task has been replayed.  A worker that dies loses the task it was
 * running (delivered with ok 0); tasks no worker is left to run are run
 * here, in order, as the caller would have run them. */
#include "emu/cli/pool.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "emu/fdio.h"

#define POOL_MAX_JOBS 64

enum { T_PENDING, T_RUNNING, T_DONE, T_LOST, T_DELIVERED };

typedef struct {
    int task, ok;
    uint64_t nout, nerr, nblob;
} pool_hdr;

typedef struct {
    int state;
    int ok;
    char *data; /* stdout, stderr, blob, back to back */
    size_t nout, nerr, nblob;
} pool_slot;

typedef struct {
    pid_t pid;
    int cmd, res; /* parent's ends: task indices out, results in */
    int task;     /* the task it runs, -1 when idle */
    int live;
    char *buf;
    size_t len, cap;
} pool_worker;

int pool_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > POOL_MAX_JOBS ? POOL_MAX_JOBS : (int)n;
}

/* The whole of file descriptor fd (from offset 0) into a new buffer;
 * NULL with *n 0 when empty or unreadable. */
static char *read_back(int fd, size_t *n)
{
    *n = 0;
    off_t end = lseek(fd, 0, SEEK_END);
    if (end <= 0)
        return NULL;
    char *b = malloc((size_t)end);
    if (!b)
        return NULL;
    size_t got = 0;
    while (got < (size_t)end) {
        ssize_t r = pread(fd, b + got, (size_t)end - got, (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    *n = got;
    return b;
}

/* Empties a capture file and puts its offset back at 0. */
static void rewind_fd(int fd)
{
    if (ftruncate(fd, 0) != 0) {
        /* nothing to do: the read-back then carries the old bytes too */
    }
    lseek(fd, 0, SEEK_SET);
}

/* A worker's life: tasks from cmd until it closes, one message each on
 * res, its stdout and stderr caught in out and err.  Never returns. */
static void worker_main(int cmd, int res, FILE *out, FILE *err,
                        pool_task_fn task, void *ctx)
{
    fflush(stdout);
    fflush(stderr);
    if (dup2(fileno(out), 1) < 0 || dup2(fileno(err), 2) < 0)
        _exit(3);
    int i;
    for (;;) {
        ssize_t r = read(cmd, &i, sizeof i);
        if (r < 0 && errno == EINTR)
            continue;
        if (r != (ssize_t)sizeof i)
            break;
        rewind_fd(1);
        rewind_fd(2);
        char *blob = NULL;
        size_t nblob = 0;
        int rc = task(ctx, i, &blob, &nblob);
        fflush(stdout);
        fflush(stderr);
        size_t nout, nerr;
        char *o = read_back(1, &nout), *e = read_back(2, &nerr);
        pool_hdr h = {i, rc == 0, nout, nerr, blob ? nblob : 0};
        int bad = fdio_write_all(res, &h, sizeof h) != 0 ||
                  (nout && fdio_write_all(res, o, nout) != 0) ||
                  (nerr && fdio_write_all(res, e, nerr) != 0) ||
                  (h.nblob && fdio_write_all(res, blob, nblob) != 0);
        free(o);
        free(e);
        free(blob);
        if (bad)
            _exit(1);
    }
    _exit(0);
}

/* Starts worker w; 0, or -1 (nothing left open). */
static int worker_start(pool_worker *ws, int w, pool_task_fn task, void *ctx)
{
    /* the command channel is a socket so that a write to a worker that
     * has died fails (MSG_NOSIGNAL) instead of raising SIGPIPE here */
    int c[2], r[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, c) != 0)
        return -1;
    if (pipe(r) != 0) {
        close(c[0]);
        close(c[1]);
        return -1;
    }
    /* the files that catch its output, made here: when they cannot be,
     * no worker starts and the caller runs the tasks itself */
    FILE *out = tmpfile(), *err = out ? tmpfile() : NULL;
    fflush(NULL); /* a worker must not write the parent's buffers again */
    pid_t pid = err ? fork() : -1;
    if (pid < 0) {
        close(c[0]);
        close(c[1]);
        close(r[0]);
        close(r[1]);
        if (out)
            fclose(out);
        if (err)
            fclose(err);
        return -1;
    }
    if (pid == 0) {
        close(c[1]);
        close(r[0]);
        for (int k = 0; k < w; k++)
            if (ws[k].live) {
                close(ws[k].cmd);
                close(ws[k].res);
            }
        worker_main(c[0], r[1], out, err, task, ctx);
    }
    fclose(out);
    fclose(err);
    close(c[0]);
    close(r[1]);
    ws[w] = (pool_worker){pid, c[1], r[0], -1, 1, NULL, 0, 0};
    return 0;
}

/* Gives worker wk the next pending task in start order, or closes its
 * command socket (it then finishes) when none is left. */
static void worker_feed(pool_worker *wk, pool_slot *s, const int *order, int n,
                        int *next)
{
    while (*next < n && s[order ? order[*next] : *next].state != T_PENDING)
        (*next)++;
    if (*next < n) {
        int i = order ? order[*next] : *next;
        ssize_t w;
        do
            w = send(wk->cmd, &i, sizeof i, MSG_NOSIGNAL);
        while (w < 0 && errno == EINTR);
        if (w == (ssize_t)sizeof i) {
            s[i].state = T_RUNNING;
            wk->task = i;
            (*next)++;
            return;
        }
    }
    wk->task = -1;
    if (wk->cmd >= 0) {
        close(wk->cmd);
        wk->cmd = -1;
    }
}

/* Takes the complete messages out of worker wk's buffer. */
static void worker_parse(pool_worker *wk, pool_slot *s, int n)
{
    size_t off = 0;
    while (wk->len - off >= sizeof(pool_hdr)) {
        pool_hdr h;
        memcpy(&h, wk->buf + off, sizeof h);
        size_t body = (size_t)(h.nout + h.nerr + h.nblob);
        if (wk->len - off - sizeof h < body)
            break;
        if (h.task >= 0 && h.task < n && s[h.task].state == T_RUNNING) {
            pool_slot *t = &s[h.task];
            t->data = body ? malloc(body) : NULL;
            if (body && !t->data) {
                t->state = T_LOST;
            } else {
                if (body)
                    memcpy(t->data, wk->buf + off + sizeof h, body);
                t->nout = (size_t)h.nout;
                t->nerr = (size_t)h.nerr;
                t->nblob = (size_t)h.nblob;
                t->ok = h.ok;
                t->state = T_DONE;
            }
            if (wk->task == h.task)
                wk->task = -1;
        }
        off += sizeof h + body;
    }
    memmove(wk->buf, wk->buf + off, wk->len - off);
    wk->len -= off;
}

/* Replays every task that is next in order and has its result (or has
 * nowhere left to run: run here when run_here). */
static void flush_ready(pool_slot *s, int n, int *done, int run_here,
                        pool_task_fn task, pool_deliver_fn deliver, void *ctx)
{
    while (*done < n) {
        pool_slot *t = &s[*done];
        if (t->state == T_PENDING && run_here) {
            char *blob = NULL;
            size_t len = 0;
            int rc = task(ctx, *done, &blob, &len);
            fflush(stdout);
            deliver(ctx, *done, blob, blob ? len : 0, rc == 0);
            free(blob);
        } else if (t->state == T_DONE) {
            if (t->nout) {
                fwrite(t->data, 1, t->nout, stdout);
                fflush(stdout);
            }
            if (t->nerr) {
                fwrite(t->data + t->nout, 1, t->nerr, stderr);
                fflush(stderr);
            }
            deliver(ctx, *done, t->nblob ? t->data + t->nout + t->nerr : NULL,
                    t->nblob, t->ok);
        } else if (t->state == T_LOST) {
            deliver(ctx, *done, NULL, 0, 0);
        } else {
            return;
        }
        free(t->data);
        t->data = NULL;
        t->state = T_DELIVERED;
        (*done)++;
    }
}

/* Reads what worker wk has sent; at its end, waits for it and marks the
 * task it was running lost. */
static void worker_read(pool_worker *wk, pool_slot *s, const int *order, int n,
                        int *next)
{
    if (wk->cap - wk->len < 65536) {
        size_t cap = wk->cap ? 2 * wk->cap : 131072;
        char *b = realloc(wk->buf, cap);
        if (b) {
            wk->buf = b;
            wk->cap = cap;
        }
    }
    ssize_t r = wk->cap > wk->len
                    ? read(wk->res, wk->buf + wk->len, wk->cap - wk->len)
                    : -1;
    if (r < 0 && errno == EINTR)
        return;
    if (r > 0) {
        wk->len += (size_t)r;
        int had = wk->task;
        worker_parse(wk, s, n);
        if (had >= 0 && wk->task < 0)
            worker_feed(wk, s, order, n, next);
        return;
    }
    /* end of its results (or no memory to read them into) */
    if (wk->task >= 0 && s[wk->task].state == T_RUNNING)
        s[wk->task].state = T_LOST;
    if (wk->cmd >= 0)
        close(wk->cmd);
    close(wk->res);
    int st;
    if (r < 0)
        kill(wk->pid, SIGKILL);
    while (waitpid(wk->pid, &st, 0) < 0 && errno == EINTR)
        ;
    free(wk->buf);
    wk->buf = NULL;
    wk->live = 0;
}

int pool_run(int n, int jobs, const int *order, pool_task_fn task,
             pool_deliver_fn deliver, void *ctx)
{
    if (n <= 0)
        return 0;
    if (jobs <= 0)
        jobs = pool_cpus();
    if (jobs > n)
        jobs = n;
    if (jobs > POOL_MAX_JOBS)
        jobs = POOL_MAX_JOBS;
    pool_slot *s = calloc((size_t)n, sizeof *s);
    pool_worker ws[POOL_MAX_JOBS];
    if (!s)
        return -1;
    int started = 0;
    for (int w = 0; w < jobs; w++) {
        if (worker_start(ws, w, task, ctx) != 0)
            break;
        started++;
    }
    if (started == 0) {
        free(s);
        return -1;
    }
    int next = 0, done = 0, live = started;
    for (int w = 0; w < started; w++)
        worker_feed(&ws[w], s, order, n, &next);
    struct pollfd pf[POOL_MAX_JOBS];
    int who[POOL_MAX_JOBS];
    while (live > 0) {
        int np = 0;
        for (int w = 0; w < started; w++)
            if (ws[w].live) {
                pf[np] = (struct pollfd){ws[w].res, POLLIN, 0};
                who[np++] = w;
            }
        int r = poll(pf, (nfds_t)np, -1);
        if (r < 0 && errno == EINTR)
            continue;
        for (int k = 0; k < np; k++)
            if (r < 0 || pf[k].revents)
                worker_read(&ws[who[k]], s, order, n, &next);
        live = 0;
        for (int w = 0; w < started; w++)
            live += ws[w].live;
        flush_ready(s, n, &done, 0, task, deliver, ctx);
    }
    /* every worker has gone: what none ran, run here */
    flush_ready(s, n, &done, 1, task, deliver, ctx);
    free(s);
    return 0;
}
