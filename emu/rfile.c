/* rfile — reading an input file whole without ever blocking for good
 * (see rfile.h for the rule and why). */
#include "emu/rfile.h"

#include <cJSON.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
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
    /* '-' is standard input, as for other Unix tools (a pipe or a
     * redirected file; a terminal is refused below like any device). */
    const char *name = strcmp(path, "-") == 0 ? "/dev/stdin" : path;
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
     * writer, forever if none comes. */
    fd = open(name, O_RDONLY | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        int oe = errno;
        /* A socket cannot be opened by name (ENXIO, "No such device or
         * address"), not even through /dev/stdin -> /proc/self/fd/0 ->
         * socket:[N]: say what it is rather than what open(2) says. */
        if (oe == ENXIO && stat(path, &sb) == 0 && S_ISSOCK(sb.st_mode))
            return tpu_fail(err, TPU_ERR_INPUT,
                            "%s: a socket%s, not a file (give a regular "
                            "file, a FIFO or a pipe such as <(cmd))",
                            path,
                            strcmp(path, "/dev/stdin") == 0 ||
                                    strcmp(path, "/dev/fd/0") == 0 ||
                                    strcmp(path, "/proc/self/fd/0") == 0
                                ? " (standard input from a socket?)"
                                : "");
        return tpu_fail(err, TPU_ERR_INPUT, "%s: cannot open: %s", path,
                        strerror(oe));
    }
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

size_t rfile_utf8_len(const unsigned char *s)
{
    unsigned char b = s[0];
    if (b < 0x80)
        return 1;
    if (b >= 0xc2 && b <= 0xdf)
        return (s[1] & 0xc0) == 0x80 ? 2 : 0;
    if (b >= 0xe0 && b <= 0xef) {
        unsigned char lo = b == 0xe0 ? 0xa0 : 0x80;
        unsigned char hi = b == 0xed ? 0x9f : 0xbf;
        return s[1] >= lo && s[1] <= hi && (s[2] & 0xc0) == 0x80 ? 3 : 0;
    }
    if (b >= 0xf0 && b <= 0xf4) {
        unsigned char lo = b == 0xf0 ? 0x90 : 0x80;
        unsigned char hi = b == 0xf4 ? 0x8f : 0xbf;
        return s[1] >= lo && s[1] <= hi && (s[2] & 0xc0) == 0x80 &&
                       (s[3] & 0xc0) == 0x80
                   ? 4
                   : 0;
    }
    return 0;
}


char *rfile_mark_nuls(const char *text, size_t len, int *oom)
{
    char *copy = NULL;
    int in_str = 0;
    *oom = 0;
    for (size_t i = 0; i < len; i++) {
        char ch = text[i];
        if (!in_str) {
            in_str = ch == '"';
            continue;
        }
        if (ch == '"') {
            in_str = 0;
        } else if (ch == '\\' && i + 1 < len) {
            if (text[i + 1] == 'u' && i + 5 < len &&
                memcmp(text + i + 2, "0000", 4) == 0) {
                if (!copy) {
                    copy = malloc(len ? len : 1);
                    if (!copy) {
                        *oom = 1;
                        return NULL;
                    }
                    memcpy(copy, text, len);
                }
                memcpy(copy + i, RFILE_NUL_MARK, 6);
                i += 5;
            } else {
                i++;
            }
        }
    }
    return copy;
}


/* The code point of the valid k-byte UTF-8 sequence at s (k 2 or 3). */
static unsigned long rfile_code_point(const unsigned char *s, size_t k)
{
    if (k == 2)
        return (unsigned long)(s[0] & 0x1f) << 6 | (s[1] & 0x3f);
    return (unsigned long)(s[0] & 0x0f) << 12 |
           (unsigned long)(s[1] & 0x3f) << 6 | (s[2] & 0x3f);
}

size_t rfile_ctrl_len(const unsigned char *s, const char **what)
{
    const char *w = "a control character";
    size_t n = 0;
    if (s[0] < 0x20 || s[0] == 0x7f) {
        n = 1;
    } else if (s[0] == 0xc2 && s[1] >= 0x80 && s[1] <= 0x9f) {
        n = 2;
    } else if (s[0] == 0xe2 && s[1] == 0x80 &&
               (s[2] == 0xa8 || s[2] == 0xa9)) {
        n = 3;
        w = s[2] == 0xa8 ? "a line separator" : "a paragraph separator";
    } else if (s[0] == 0xe2 &&
               ((s[1] == 0x80 && s[2] >= 0xaa && s[2] <= 0xae) ||
                (s[1] == 0x81 && s[2] >= 0xa6 && s[2] <= 0xa9))) {
        n = 3;
        w = "a bidirectional text control";
    }
    if (what)
        *what = w;
    return n;
}

const char *rfile_text_problem(const char *s, int ctrl_ok, char *buf,
                               size_t cap)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; u[i];) {
        size_t k = rfile_utf8_len(u + i);
        if (k == 0) {
            if (strncmp((const char *)u + i, RFILE_NUL_MARK, 6) == 0)
                snprintf(buf, cap, "contains a NUL character (\\u0000)");
            else
                snprintf(buf, cap,
                         "is not valid UTF-8 (byte 0x%02x at offset %zu)",
                         u[i], i);
            return buf;
        }
        const char *what;
        if (!ctrl_ok && rfile_ctrl_len(u + i, &what)) {
            /* C0 keeps the message it always had; the others name the
             * character, which no editor shows. */
            if (k == 1)
                snprintf(buf, cap, "contains %s", what);
            else
                snprintf(buf, cap, "contains %s (U+%04lX)", what,
                         rfile_code_point(u + i, k));
            return buf;
        }
        i += k;
    }
    return NULL;
}

void rfile_json_where(const char *text, size_t len, size_t pos, int *line,
                      int *col, int *depth)
{
    int in_str = 0, esc = 0;
    *line = 1;
    *col = 1;
    *depth = 0;
    for (size_t i = 0; i < pos && i < len; i++) {
        char ch = text[i];
        if (ch == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
        if (in_str) {
            if (esc)
                esc = 0;
            else if (ch == '\\')
                esc = 1;
            else if (ch == '"')
                in_str = 0;
        } else if (ch == '"') {
            in_str = 1;
        } else if (ch == '[' || ch == '{') {
            (*depth)++;
        } else if ((ch == ']' || ch == '}') && *depth > 0) {
            (*depth)--;
        }
    }
}

/* Where a file cut off inside its text would make cJSON stop: the opening
 * quote of a string left open, the last character when an object or array
 * is left open, else len (nothing open: a stop is a typo).  cJSON stops at
 * or just before the end of a cut-off file, which alone does not tell it
 * from a typo on the last line. */
static size_t json_open_at_end(const char *text, size_t len, size_t last)
{
    long depth = 0;
    size_t str_at = 0;
    int in_str = 0;
    for (size_t i = 0; i < len; i++) {
        char ch = text[i];
        if (in_str) {
            if (ch == '\\')
                i++;
            else if (ch == '"')
                in_str = 0;
        } else if (ch == '"') {
            in_str = 1;
            str_at = i;
        } else if (ch == '{' || ch == '[') {
            depth++;
        } else if (ch == '}' || ch == ']') {
            depth--;
        }
    }
    if (in_str)
        return str_at;
    if (depth > 0)
        return last ? last - 1 : 0;
    return len;
}

void rfile_json_error(const char *text, size_t len, size_t pos, char *buf,
                      size_t cap)
{
    int line, col, depth;
    size_t last = len;
    while (last > 0 && (text[last - 1] == ' ' || text[last - 1] == '\t' ||
                        text[last - 1] == '\n' || text[last - 1] == '\r'))
        last--;
    rfile_json_where(text, len, pos, &line, &col, &depth);
    const unsigned char *u = (const unsigned char *)text;
    if (len >= 2 && ((u[0] == 0xff && u[1] == 0xfe) ||
                     (u[0] == 0xfe && u[1] == 0xff) ||
                     (u[0] != 0 && u[1] == 0) || (u[0] == 0 && u[1] != 0)))
        snprintf(buf, cap, "not valid JSON: the file looks like UTF-16; "
                 "save it as UTF-8");
    else if (len >= 2 && u[0] == 0x1f && u[1] == 0x8b)
        snprintf(buf, cap, "not valid JSON: the file is gzip-compressed; "
                 "decompress it first (gunzip -c FILE | tpuemu run -)");
    else if (depth >= CJSON_NESTING_LIMIT)
        snprintf(buf, cap, "not valid JSON: arrays and objects nested deeper "
                 "than %d levels (the parser's limit) at line %d, column %d",
                 CJSON_NESTING_LIMIT, line, col);
    else if (pos >= last || pos >= json_open_at_end(text, len, last))
        snprintf(buf, cap, "not valid JSON: the text ends too early (line %d, "
                 "column %d)", line, col);
    else
        snprintf(buf, cap, "not valid JSON: syntax error at line %d, column "
                 "%d", line, col);
}

/* ---- duplicate keys ---------------------------------------------------- */

typedef struct {
    const char *key;
    int idx;
} rfile_key_at;

static int rfile_key_cmp(const void *pa, const void *pb)
{
    const rfile_key_at *a = pa, *b = pb;
    int c = strcmp(a->key, b->key);
    return c ? c : (a->idx > b->idx) - (a->idx < b->idx);
}

/* Below this many members a direct comparison is cheaper than sorting and
 * needs no memory (every object of a trace but a broken one). */
#define RFILE_DUP_SMALL 16

int rfile_json_dup(const cJSON *obj)
{
    if (!cJSON_IsObject(obj))
        return -1;
    int cnt = cJSON_GetArraySize(obj);
    if (cnt < 2)
        return -1;
    if (cnt <= RFILE_DUP_SMALL) {
        int i = 0;
        for (const cJSON *it = obj->child; it; it = it->next, i++)
            for (const cJSON *o = obj->child; o != it; o = o->next)
                if (strcmp(o->string ? o->string : "",
                           it->string ? it->string : "") == 0)
                    return i;
        return -1;
    }
    rfile_key_at *k = malloc((size_t)cnt * sizeof *k);
    if (!k)
        return -2;
    int i = 0;
    for (const cJSON *c = obj->child; c && i < cnt; c = c->next, i++) {
        k[i].key = c->string ? c->string : "";
        k[i].idx = i;
    }
    qsort(k, (size_t)i, sizeof *k, rfile_key_cmp);
    /* Sorted by key, then position: a member equal to its predecessor is
     * a later occurrence; the earliest such is the first repeat. */
    int first = -1;
    for (int j = 1; j < i; j++)
        if (strcmp(k[j].key, k[j - 1].key) == 0 &&
            (first < 0 || k[j].idx < first))
            first = k[j].idx;
    free(k);
    return first;
}

/* The default rfile_key_fn: a key from a file echoed in a message stays
 * one line of valid UTF-8 (control bytes and stray bytes as \xNN). */
static void rfile_key_shown(char *buf, size_t cap, const char *s)
{
    size_t n = 0;
    if (cap == 0)
        return;
    for (const unsigned char *u = (const unsigned char *)s; *u;) {
        char tmp[8];
        size_t w = rfile_utf8_len(u), adv = w;
        if (w == 0 || *u < 0x20 || *u == 0x7f) {
            snprintf(tmp, sizeof tmp, "\\x%02x", *u);
            w = 4;
            adv = 1;
        } else {
            memcpy(tmp, u, w);
        }
        if (n + w + 4 > cap) {
            if (cap >= 4) {
                size_t m = n;
                while (m + 4 > cap)
                    m--;
                /* never leave half a UTF-8 character before the dots */
                if (m < n)
                    while (m > 0 && ((unsigned char)buf[m] & 0xc0) == 0x80)
                        m--;
                n = m;
                memcpy(buf + n, "...", 3);
                n += 3;
            }
            break;
        }
        memcpy(buf + n, tmp, w);
        n += w;
        u += adv;
    }
    buf[n < cap ? n : cap - 1] = 0;
}

int rfile_json_find_dup(const cJSON *v, char *jp, size_t cap,
                        rfile_key_fn quote, int *oom)
{
    size_t len = strlen(jp);
    char q[80];
    if (!quote)
        quote = rfile_key_shown;
    int d = rfile_json_dup(v);
    if (d == -2) {
        *oom = 1;
        return 1;
    }
    if (d >= 0) {
        const cJSON *c = v->child;
        for (int i = 0; i < d; i++)
            c = c->next;
        quote(q, sizeof q, c->string ? c->string : "");
        snprintf(jp + len, cap - len, "%s%s", len ? "." : "", q);
        return 1;
    }
    if (!cJSON_IsObject(v) && !cJSON_IsArray(v))
        return 0;
    int i = 0;
    for (const cJSON *c = v->child; c; c = c->next, i++) {
        if (!cJSON_IsObject(c) && !cJSON_IsArray(c))
            continue;
        if (cJSON_IsObject(v)) {
            quote(q, sizeof q, c->string ? c->string : "");
            snprintf(jp + len, cap - len, "%s%s", len ? "." : "", q);
        } else {
            snprintf(jp + len, cap - len, "[%d]", i);
        }
        if (rfile_json_find_dup(c, jp, cap, quote, oom))
            return 1;
        jp[len] = 0;
    }
    return 0;
}
