/* rfile — reading an input file (a trace, a report) whole, safely.
 *
 * "No input may hang": a path naming a FIFO would block open() until a
 * writer appears and read() while it stays silent, and a character device
 * (/dev/zero, a terminal) never ends.  So the file is opened without
 * blocking and looked at first: a regular file is read to the end (up to
 * a size cap); a FIFO or pipe -- which is also what a shell's process
 * substitution `<(cmd)` passes, as /dev/fd/N -- is read while data keeps
 * coming, and given up when none arrives for idle_timeout_s; anything else
 * (directory, device, socket) is refused.  docs/TRACE.md states the rule.
 */
#ifndef EMU_RFILE_H
#define EMU_RFILE_H

#include <stddef.h>

#include "emu/status.h"

/* Default idle timeout for FIFOs and pipes, seconds. */
#define RFILE_PIPE_IDLE_S 5.0

/* Reads path into *text (malloc'd, NUL-terminated; *len excludes the NUL).
 * TPU_ERR_INPUT with "PATH: what" for a missing or unreadable file, a
 * non-regular one, one larger than max_bytes or a pipe that stays silent;
 * TPU_ERR_SYSTEM when out of memory.  *text is NULL on failure. */
tpu_status rfile_read(const char *path, size_t max_bytes,
                      double idle_timeout_s, char **text, size_t *len,
                      tpu_error *err);

#endif
