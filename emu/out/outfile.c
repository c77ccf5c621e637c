/* realpath(3) is XSI: the Makefile's _POSIX_C_SOURCE alone hides it. */
#define _XOPEN_SOURCE 700

#include "emu/out/outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Short and fixed so that a target whose name is NAME_MAX bytes long still
 * gets a temporary; the leading dot keeps it out of `ls`. */
#define TMP_NAME "/.tpuemu.XXXXXX"

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

/* The directory part of path ("." when there is none); malloc'd. */
static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return dup_str(".");
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, path, n);
        d[n] = 0;
    }
    return d;
}

static tpu_status oom(tpu_error *err, const char *path)
{
    return tpu_fail(err, TPU_ERR_SYSTEM, "%s: out of host memory", path);
}

/* Why a path that is no regular file cannot be an output, and what to do
 * instead: every output is written to a temporary in the target's
 * directory and renamed over it (atomic, never half-written), which a pipe,
 * socket or device cannot take.  `anon` is set when the path is a link the
 * kernel resolves but no path names (/proc/self/fd/N -> pipe:[N]): an
 * anonymous pipe or socket, such as a shell's `| cmd` or `>(cmd)`. */
static tpu_status refuse_kind(tpu_error *err, const char *path, mode_t m,
                              int anon)
{
    const char *kind = S_ISFIFO(m)   ? (anon ? "a pipe" : "a FIFO")
                       : S_ISSOCK(m) ? "a socket"
                       : S_ISCHR(m)  ? "a character device"
                       : S_ISBLK(m)  ? "a block device"
                                     : "a special file";
    /* The usual way to get here: --report /dev/stdout piped into a
     * command, or a process substitution. */
    const char *hint = "";
    static const char *const out_names[] = {"/dev/stdout", "/dev/fd/1",
                                            "/proc/self/fd/1"};
    int is_stdout = 0;
    for (size_t i = 0; i < sizeof out_names / sizeof out_names[0]; i++)
        is_stdout |= strcmp(path, out_names[i]) == 0;
    if (is_stdout && S_ISCHR(m))
        hint = " (standard output on a terminal?)";
    else if (is_stdout && (S_ISFIFO(m) || S_ISSOCK(m)))
        hint = " (standard output into a pipe?)";
    else if (anon && (strncmp(path, "/dev/fd/", 8) == 0 ||
                      strncmp(path, "/proc/self/fd/", 14) == 0))
        hint = " (a process substitution such as >(cmd)?)";
    return tpu_fail(err, TPU_ERR_INPUT,
                    "%s: cannot create: is %s%s, not a regular file: outputs "
                    "are written to a temporary beside the file and renamed, "
                    "give a file path",
                    path, kind, hint);
}

/* Resolves path to the file a write replaces (*target, malloc'd), with
 * *existed and its mode; refuses what cannot be an output. */
static tpu_status resolve(const char *path, char **target, int *existed,
                          mode_t *mode, tpu_error *err)
{
    *target = NULL;
    *existed = 0;
    *mode = 0644;
    if (!path || !*path)
        return tpu_fail(err, TPU_ERR_INPUT, "output path is empty");
    /* Unix tools read '-' as standard output; a file named '-' in the
     * working directory would surprise. */
    if (strcmp(path, "-") == 0)
        return tpu_fail(err, TPU_ERR_INPUT,
                        "-: cannot create: '-' (standard output) is not an "
                        "output here: outputs are written to a temporary "
                        "beside the file and renamed, give a file path "
                        "(./- for a file of that name)");
    size_t n = strlen(path);
    if (path[n - 1] == '/')
        return tpu_fail(err, TPU_ERR_INPUT,
                        "%s: cannot create: names a directory, not a file",
                        path);
    struct stat st;
    char *t = NULL;
    if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) {
        /* Follow the link, as a shell's `>` does, so the link survives. */
        t = realpath(path, NULL);
        if (!t) {
            int e = errno;
            /* /dev/stdout -> /proc/self/fd/1 -> "pipe:[N]": the kernel
             * follows the link (stat works), realpath cannot name it. */
            int resolves = stat(path, &st) == 0;
            if (resolves && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
                return refuse_kind(err, path, st.st_mode, 1);
            if (resolves && S_ISREG(st.st_mode))
                return tpu_fail(err, TPU_ERR_INPUT,
                                "%s: cannot create: links to an open file "
                                "that has no name (deleted?): outputs are "
                                "written to a temporary beside the file and "
                                "renamed, give a file path",
                                path);
            return tpu_fail(err, TPU_ERR_INPUT,
                            "%s: cannot create: symbolic link does not "
                            "resolve to a file (%s)", path, strerror(e));
        }
    } else {
        t = dup_str(path);
        if (!t)
            return oom(err, path);
    }
    if (stat(t, &st) == 0) {
        *existed = 1;
        if (S_ISDIR(st.st_mode)) {
            free(t);
            return tpu_fail(err, TPU_ERR_INPUT,
                            "%s: cannot create: is a directory", path);
        }
        if (!S_ISREG(st.st_mode)) {
            free(t);
            return refuse_kind(err, path, st.st_mode, 0);
        }
        *mode = st.st_mode & 0777;
    } else if (errno != ENOENT) {
        int e = errno;
        free(t);
        return tpu_fail(err, TPU_ERR_INPUT, "%s: cannot create: %s", path,
                        strerror(e));
    }
    char *dir = dir_of(t);
    if (!dir) {
        free(t);
        return oom(err, path);
    }
    struct stat ds;
    tpu_status rc = TPU_OK;
    if (stat(dir, &ds) != 0)
        rc = tpu_fail(err, TPU_ERR_INPUT, "%s: cannot create: directory %s: %s",
                      path, dir, strerror(errno));
    else if (!S_ISDIR(ds.st_mode))
        rc = tpu_fail(err, TPU_ERR_INPUT,
                      "%s: cannot create: %s is not a directory", path, dir);
    free(dir);
    if (rc) {
        free(t);
        return rc;
    }
    *target = t;
    return TPU_OK;
}

/* Creates the temporary beside target; returns its descriptor or -1. */
static int make_tmp(const char *target, mode_t mode, char **tmp_out,
                    const char *path, tpu_error *err)
{
    *tmp_out = NULL;
    char *dir = dir_of(target);
    if (!dir) {
        oom(err, path);
        return -1;
    }
    size_t dn = strlen(dir);
    char *tmp = malloc(dn + sizeof TMP_NAME);
    if (!tmp) {
        free(dir);
        oom(err, path);
        return -1;
    }
    memcpy(tmp, dir, dn);
    memcpy(tmp + dn, TMP_NAME, sizeof TMP_NAME);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        tpu_fail(err, TPU_ERR_INPUT, "%s: cannot create: directory %s: %s",
                 path, dir, strerror(errno));
        free(dir);
        free(tmp);
        return -1;
    }
    free(dir);
    /* mkstemp creates 0600; an output is an ordinary file others read, and
     * a replaced file keeps its permission bits. */
    (void)fchmod(fd, mode);
    *tmp_out = tmp;
    return fd;
}

tpu_status outfile_check(const char *path, tpu_error *err)
{
    char *target;
    int existed;
    mode_t mode;
    tpu_status rc = resolve(path, &target, &existed, &mode, err);
    if (rc)
        return rc;
    /* The directory's permission bits do not tell (root, read-only file
     * systems, ACLs): creating the temporary does. */
    char *tmp;
    int fd = make_tmp(target, mode, &tmp, path, err);
    free(target);
    if (fd < 0)
        return err ? err->code : TPU_ERR_INPUT;
    close(fd);
    unlink(tmp);
    free(tmp);
    return TPU_OK;
}

/* Blocks the signals that end a command from outside (outfile.h,
 * Interruptions); o->holds when this call changed the mask. */
static void hold_signals(outfile *o)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    if (sigprocmask(SIG_BLOCK, &set, &o->saved) != 0)
        return;
    o->holds = !sigismember(&o->saved, SIGINT) ||
               !sigismember(&o->saved, SIGTERM) ||
               !sigismember(&o->saved, SIGHUP);
}

static void release_signals(outfile *o)
{
    if (o->holds) {
        o->holds = 0;
        /* A signal held meanwhile is delivered here, the temporary gone. */
        (void)sigprocmask(SIG_SETMASK, &o->saved, NULL);
    }
}

tpu_status outfile_open(outfile *o, const char *path, tpu_error *err)
{
    memset(o, 0, sizeof *o);
    mode_t mode;
    tpu_status rc = resolve(path, &o->target, &o->existed, &mode, err);
    if (rc)
        return rc;
    o->name = dup_str(path);
    if (!o->name) {
        outfile_discard(o);
        return oom(err, path);
    }
    hold_signals(o); /* before the temporary exists; discard releases */
    int fd = make_tmp(o->target, mode, &o->tmp, path, err);
    if (fd < 0) {
        outfile_discard(o);
        return err ? err->code : TPU_ERR_INPUT;
    }
    o->f = fdopen(fd, "wb");
    if (!o->f) {
        int e = errno;
        close(fd);
        outfile_discard(o);
        return tpu_fail(err, TPU_ERR_INPUT, "%s: cannot write: %s", path,
                        strerror(e));
    }
    return TPU_OK;
}

tpu_status outfile_close(outfile *o, tpu_error *err)
{
    if (!o->f)
        return TPU_OK;
    int e = 0;
    if (fflush(o->f) != 0 || ferror(o->f))
        e = errno ? errno : EIO;
    if (fclose(o->f) != 0 && !e)
        e = errno;
    o->f = NULL;
    if (e) {
        tpu_status rc = tpu_fail(err, TPU_ERR_INPUT, "%s: cannot write: %s",
                                 o->name ? o->name : "output", strerror(e));
        outfile_discard(o);
        return rc;
    }
    return TPU_OK;
}

tpu_status outfile_commit(outfile *o, tpu_error *err)
{
    tpu_status rc = outfile_close(o, err);
    if (rc)
        return rc;
    if (!o->tmp)
        return tpu_fail(err, TPU_ERR_INPUT, "%s: nothing staged",
                        o->name ? o->name : "output");
    if (rename(o->tmp, o->target) != 0) {
        rc = tpu_fail(err, TPU_ERR_INPUT, "%s: cannot write: %s", o->name,
                      strerror(errno));
        outfile_discard(o);
        return rc;
    }
    free(o->tmp);
    o->tmp = NULL;
    release_signals(o);
    return TPU_OK;
}

void outfile_discard(outfile *o)
{
    if (o->f)
        fclose(o->f);
    if (o->tmp)
        unlink(o->tmp);
    free(o->tmp);
    free(o->target);
    free(o->name);
    o->tmp = o->target = o->name = NULL;
    o->f = NULL;
    o->existed = 0;
    release_signals(o);
}

void outfile_discard_all(outfile *os, int n)
{
    for (int j = n - 1; j >= 0; j--)
        outfile_discard(&os[j]);
}

tpu_status outfile_commit_all(outfile *os, int n, tpu_error *err)
{
    tpu_status rc = TPU_OK;
    int k = 0;
    /* The signals stay held until every output is in place or taken back:
     * the outfile that holds them hands the hold over to this call. */
    outfile hold = {0};
    for (int j = 0; j < n; j++)
        if (os[j].holds) {
            hold.holds = 1;
            hold.saved = os[j].saved;
            os[j].holds = 0;
        }
    for (k = 0; k < n; k++)
        if ((rc = outfile_close(&os[k], err)))
            break;
    if (!rc)
        for (k = 0; k < n; k++)
            if ((rc = outfile_commit(&os[k], err)))
                break;
    if (rc)
        for (int j = 0; j < n; j++)
            /* Earlier ones are committed (tmp NULL): take back the new. */
            if (j < k && !os[j].tmp && !os[j].existed && os[j].target)
                unlink(os[j].target);
    outfile_discard_all(os, n);
    release_signals(&hold);
    return rc;
}

tpu_status outfile_write(const char *path, const void *data, size_t len,
                         tpu_error *err)
{
    outfile o;
    tpu_status rc = outfile_open(&o, path, err);
    if (rc)
        return rc;
    if (len && fwrite(data, 1, len, o.f) != len) {
        rc = tpu_fail(err, TPU_ERR_INPUT, "%s: cannot write: %s", path,
                      strerror(errno));
        outfile_discard(&o);
        return rc;
    }
    rc = outfile_commit(&o, err);
    outfile_discard(&o);
    return rc;
}

/* A normalised name for a path that does not exist (yet): its directory
 * resolved, then the last component.  NULL when the directory does not
 * resolve either. */
static char *norm_missing(const char *path)
{
    char *dir = dir_of(path);
    if (!dir)
        return NULL;
    char *rd = realpath(dir, NULL);
    free(dir);
    if (!rd)
        return NULL;
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    size_t a = strlen(rd), b = strlen(base);
    char *s = malloc(a + b + 2);
    if (s) {
        memcpy(s, rd, a);
        s[a] = '/';
        memcpy(s + a + 1, base, b + 1);
    }
    free(rd);
    return s;
}

int outfile_same(const char *a, const char *b)
{
    if (!a || !b)
        return 0;
    if (strcmp(a, b) == 0)
        return 1;
    struct stat sa, sb;
    int ea = stat(a, &sa) == 0, eb = stat(b, &sb) == 0;
    if (ea && eb)
        return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    if (ea || eb)
        return 0;
    char *na = norm_missing(a), *nb = norm_missing(b);
    int same = na && nb && strcmp(na, nb) == 0;
    free(na);
    free(nb);
    return same;
}
