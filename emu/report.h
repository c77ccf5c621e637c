/* report — the `tpuemu-report/1` JSON (SPEC.md): write and read.
 * Writing goes to a temporary name and is renamed into place, so a failed
 * run never leaves a half-written report. */
#ifndef EMU_REPORT_H
#define EMU_REPORT_H

#include "emu/result.h"
#include "emu/status.h"

/* The report as text (malloc'd, NUL-terminated); NULL when out of memory.
 * Byte-identical for identical results: fixed key order, %.17g numbers. */
char *report_to_json(const emu_result *r);
tpu_status report_write(const emu_result *r, const char *path, tpu_error *err);
/* Reads a report written by report_write (events are not stored in it). */
tpu_status report_read(emu_result *r, const char *path, tpu_error *err);

/* Writes data to path atomically (temporary file in the same directory,
 * then rename).  Used by every output file. */
tpu_status tpu_write_atomic(const char *path, const void *data, size_t len,
                            tpu_error *err);

#endif
