/* rfile — reading an input file whole without ever blocking for good
 * (see rfile.h for the rule and why). */
#include "emu/rfile.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *rfile_kind(mode_t m)
{
    if (S_ISDIR(m))
        return "a directory";
    if (S_ISCHR(m))
        return "a character device";
    if (S_ISBLK(m))
        return "a block device";
    if (S_ISSOCK(m))
        return "a socket";
    return "not a regular file";
}

/* Grows *buf to hold at least need+1 bytes; 0 when out of memory. */
static int rfile_grow(char **buf, size_t *cap, size_t need)
{
    size_t c = *cap ? *cap : 65536;
    char *nb;
    while (c < need + 1)
        c *= 2;
    if (c == *cap)
        return 1;
    nb = realloc(*buf, c);
    if (!nb)
        return 0;
    *buf = nb;
    *cap = c;
    return 1;
}

tpu_status rfile_read(const char *path, size_t max_bytes,
                      double idle_timeout_s, char **text, size_t *len,
                      tpu_error *err)
{
    struct stat sb;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    int fd, pipe_like, e = 0;
    tpu_status st = TPU_OK;
    int idle_ms = idle_timeout_s > 0 ? (int)(idle_timeout_s * 1000 + 0.5) : 0;

    *text = NULL;
    *len = 0;
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
     * writer, forever if none comes. */
    fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return tpu_fail(err, TPU_ERR_INPUT, "%s: cannot open: %s", path,
                        strerror(errno));
    if (fstat(fd, &sb) != 0) {
        e = errno;
        close(fd);
        return tpu_fail(err, TPU_ERR_INPUT, "%s: cannot read: %s", path,
                        strerror(e));
    }
    pipe_like = S_ISFIFO(sb.st_mode);
    if (!S_ISREG(sb.st_mode) && !pipe_like) {
        close(fd);
        return tpu_fail(err, TPU_ERR_INPUT,
                        "%s: %s, not a file (give a regular file, a FIFO or "
                        "a pipe such as <(cmd))",
                        path, rfile_kind(sb.st_mode));
    }
    if (!pipe_like) {
        int fl = fcntl(fd, F_GETFL);
        if (fl >= 0)
            (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
        if (sb.st_size > 0 && (unsigned long long)sb.st_size > max_bytes) {
            close(fd);
            return tpu_fail(err, TPU_ERR_INPUT,
                            "%s: larger than %zu MiB, the limit for this "
                            "input",
                            path, max_bytes >> 20);
        }
    }
    for (;;) {
        ssize_t got;
        size_t room;
        if (pipe_like) {
            /* Wait for data (or the writer's end) before each read, but
             * only so long: a FIFO nobody writes to must not hang the run.
             * Linux does not report a hang-up on a FIFO that never had a
             * writer, so this also waits for a late writer. */
            struct pollfd p = {fd, POLLIN, 0};
            int r = poll(&p, 1, idle_ms);
            if (r < 0 && errno == EINTR)
                continue;
            if (r < 0) {
                e = errno;
                break;
            }
            if (r == 0) {
                st = tpu_fail(err, TPU_ERR_INPUT,
                              "%s: a FIFO or pipe that sent nothing for "
                              "%.3g s (no writer?); gave up",
                              path, idle_timeout_s);
                break;
            }
        }
        /* Room for one byte beyond the cap tells "too large" from
         * "exactly the cap". */
        if (cap == 0 || cap - n - 1 < 4096) {
            size_t want = n + 65536 > max_bytes + 1 ? max_bytes + 1
                                                    : n + 65536;
            if (want < n + 1)
                want = n + 1;
            if (!rfile_grow(&buf, &cap, want)) {
                st = tpu_fail(err, TPU_ERR_SYSTEM,
                              "%s: out of memory reading the file", path);
                break;
            }
        }
        room = cap - n - 1;
        if (room > max_bytes + 1 - n)
            room = max_bytes + 1 - n;
        got = read(fd, buf + n, room);
        if (got > 0) {
            n += (size_t)got;
            if (n > max_bytes) {
                st = tpu_fail(err, TPU_ERR_INPUT,
                              "%s: larger than %zu MiB, the limit for this "
                              "input",
                              path, max_bytes >> 20);
                break;
            }
            continue;
        }
        if (got == 0)
            break;
        if (errno == EINTR ||
            (pipe_like && (errno == EAGAIN || errno == EWOULDBLOCK)))
            continue;
        e = errno;
        break;
    }
    close(fd);
    if (!st && e)
        st = tpu_fail(err, TPU_ERR_INPUT, "%s: cannot read: %s", path,
                      strerror(e));
    if (!st && !buf) {
        buf = malloc(1);
        if (!buf)
            st = tpu_fail(err, TPU_ERR_SYSTEM,
                          "%s: out of memory reading the file", path);
    }
    if (st) {
        free(buf);
        return st;
    }
    buf[n] = 0;
    *text = buf;
    *len = n;
    return TPU_OK;
}
