#include "emu/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

tpu_status tpu_fail(tpu_error *e, tpu_status code, const char *fmt, ...)
{
    if (e) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
        e->code = code;
    }
    return code;
}

void tpu_assert_fail(const char *expr, const char *file, int line)
{
    /* The one place the core writes to stderr: an invariant is broken and
     * continuing would produce wrong figures. */
    fprintf(stderr, "tpuemu: internal error: %s:%d: assertion failed: %s\n",
            file, line, expr);
    abort();
}
