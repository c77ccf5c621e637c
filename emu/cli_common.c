#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/cli.h"

int cli_error(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("tpuemu: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return code;
}

int cli_fail(const tpu_error *e)
{
    int code = e->code ? (int)e->code : 2;
    return cli_error(code, "%s", e->msg[0] ? e->msg : "failed");
}

int cli_int(const char *opt, const char *s, int64_t lo, int64_t hi,
            int64_t *out)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end)
        return cli_error(2, "%s: expected an integer, got '%s'", opt, s);
    if (errno == ERANGE || v < lo || v > hi)
        return cli_error(2, "%s: %s is out of range [%lld, %lld]", opt, s,
                         (long long)lo, (long long)hi);
    *out = v;
    return 0;
}

int cli_double(const char *opt, const char *s, double lo, double hi,
               double *out)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || !isfinite(v))
        return cli_error(2, "%s: expected a number, got '%s'", opt, s);
    if (errno == ERANGE || v < lo || v > hi)
        return cli_error(2, "%s: %s is out of range [%g, %g]", opt, s, lo, hi);
    *out = v;
    return 0;
}

const char *cli_value(int argc, char **argv, int *i)
{
    if (*i + 1 >= argc) {
        cli_error(2, "%s: missing value", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

int cli_wants_help(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0)
            return 1;
    return 0;
}

int cli_take(int argc, char **argv, int *i, const char *name,
             const char **val)
{
    const char *arg = argv[*i];
    size_t len = strlen(name);
    if (strncmp(arg, name, len) != 0)
        return 0;
    if (arg[len] == '=') {
        *val = arg + len + 1;
        return 1;
    }
    if (arg[len] != '\0')
        return 0;
    *val = cli_value(argc, argv, i);
    return *val ? 1 : -1;
}
