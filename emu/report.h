/* report — the `tpuemu-report/1` JSON (docs/CHECK.md lists its keys):
 * emu/report.c writes it, emu/report_read.c reads and checks it.
 * Writing goes to a temporary name and is renamed into place, so a failed
 * run never leaves a half-written report. */
#ifndef EMU_REPORT_H
#define EMU_REPORT_H

#include <stddef.h>

#include "emu/result.h"
#include "emu/status.h"

/* The report as text (malloc'd, NUL-terminated); NULL when out of memory.
 * Byte-identical for identical results: fixed key order, %.17g numbers. */
char *report_to_json(const emu_result *r);
tpu_status report_write(const emu_result *r, const char *path, tpu_error *err);
/* Reads a report written by report_write (events are not stored in it),
 * checking it as docs/CHECK.md says (finite non-negative times, a step
 * time where the step ran, every core once, a known system, printable
 * UTF-8 strings): TPU_ERR_INPUT with "FILE: json.path: what" otherwise.
 * per_core comes back in core order.  The file is read as rfile_read does
 * (FIFOs with a timeout, no devices). */
tpu_status report_read(emu_result *r, const char *path, tpu_error *err);
/* Same, from text in memory; path only names it in messages. */
tpu_status report_parse(emu_result *r, const char *text, size_t len,
                        const char *path, tpu_error *err);

/* The report's names of a grouped layer's three parts ("grouped":
 * {"forward": ..., "input_gradient": ..., "weight_gradient": ...}),
 * indexed like emu_result's layer_gconv. */
extern const char *const report_gconv_part[3];

/* Writes data to path atomically (temporary file in the same directory,
 * then rename).  Used by every output file. */
tpu_status tpu_write_atomic(const char *path, const void *data, size_t len,
                            tpu_error *err);

#endif
