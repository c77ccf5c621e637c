/* PLACEHOLDER until the report writer lands (issue 7). */
#include "emu/report.h"

#include <stdio.h>
#include <stdlib.h>

char *report_to_json(const emu_result *r)
{
    (void)r;
    return NULL;
}

tpu_status report_write(const emu_result *r, const char *path,
                        tpu_error *err)
{
    (void)r;
    return tpu_fail(err, TPU_ERR_SYSTEM, "%s: report writer not built yet",
                    path);
}

tpu_status report_read(emu_result *r, const char *path, tpu_error *err)
{
    (void)r;
    return tpu_fail(err, TPU_ERR_INPUT, "%s: report reader not built yet",
                    path);
}

tpu_status tpu_write_atomic(const char *path, const void *data, size_t len,
                            tpu_error *err)
{
    (void)data;
    (void)len;
    return tpu_fail(err, TPU_ERR_SYSTEM, "%s: not built yet", path);
}
