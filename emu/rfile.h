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

/* JSON text helpers shared by the trace and report readers.
 *
 * cJSON decodes "\u0000" into a NUL byte and so silently cuts the string
 * there ("tiny\u0000x" would read as "tiny").  Before parsing, a reader
 * overwrites each such escape inside a string with RFILE_NUL_MARK -- six
 * 0xFF bytes, never valid UTF-8, the same length so line and column
 * numbers stay right -- and its UTF-8 check after parsing then names the
 * string that held it. */
#define RFILE_NUL_MARK "\xff\xff\xff\xff\xff\xff"

/* A copy of the JSON text with every \u0000 escape inside a string
 * overwritten by RFILE_NUL_MARK; NULL when there is none (nothing to do)
 * or when out of memory (*oom = 1). */
char *rfile_mark_nuls(const char *text, size_t len, int *oom);

/* Length of the valid UTF-8 sequence at s (1 for ASCII), 0 when the bytes
 * there are not one (overlong forms, surrogates and values beyond U+10FFFF
 * included, as RFC 3629 says).  s must be NUL-terminated. */
size_t rfile_utf8_len(const unsigned char *s);

/* Length of the character at s (valid UTF-8, not NUL) when a name must not
 * hold it, else 0.  Names and report strings are echoed on one terminal
 * line, so this is every character that can move or restyle what follows
 * it: C0 controls and DEL; C1 controls U+0080-U+009F (U+009B is CSI and
 * U+0085 a newline to an xterm in UTF-8 mode); the line and paragraph
 * separators U+2028/U+2029; and the bidirectional embeddings, overrides
 * and isolates U+202A-U+202E and U+2066-U+2069, which reorder the rest of
 * the line as displayed ("Trojan Source", CVE-2021-42574).  *what (when
 * not NULL) gets a phrase for a message. */
size_t rfile_ctrl_len(const unsigned char *s, const char **what);

/* Checks a decoded string: NULL when it is UTF-8 without NUL marks and,
 * unless ctrl_ok, without a character rfile_ctrl_len refuses; otherwise
 * what is wrong ("contains a NUL character (\u0000)", "is not valid UTF-8
 * (byte 0xff at offset 4)", "contains a control character", "contains a
 * control character (U+009B)", "contains a line separator (U+2028)"), in
 * buf. */
const char *rfile_text_problem(const char *s, int ctrl_ok, char *buf,
                               size_t cap);

/* Where byte `pos` of a JSON text is, for a parse error: its line and
 * column (from 1), and how many arrays and objects are open there (strings
 * skipped), which tells cJSON's nesting limit from a syntax error. */
void rfile_json_where(const char *text, size_t len, size_t pos, int *line,
                      int *col, int *depth);

/* A parse failure at byte `pos`, as "not valid JSON: ..." into buf: the
 * text ends too early, nesting deeper than cJSON's limit, or a syntax
 * error, with line and column; a hint for a UTF-16 or gzip file. */
void rfile_json_error(const char *text, size_t len, size_t pos, char *buf,
                      size_t cap);

/* Duplicate keys.  cJSON keeps both members of {"a": 1, "a": 2} and its
 * lookups return the first, while Python's json, jq and most other tools
 * take the last: a file with a repeated key would mean one thing to
 * tpuemu and another to everything else, so the readers refuse it (trace,
 * sweep file, report).  These are the one implementation they share. */
struct cJSON;

/* Position (from 0) among obj's members of the first member whose key an
 * earlier member already has ({"a", "b", "a"}: 2); -1 when there is none
 * or obj is not an object, -2 when out of memory.  Large objects are
 * sorted, so a million keys do not take quadratic time. */
int rfile_json_dup(const struct cJSON *obj);

/* Writes key into buf (cap bytes) as it may appear in a one-line message. */
typedef void (*rfile_key_fn)(char *buf, size_t cap, const char *key);

/* The first duplicate key at or under v, depth first in document order,
 * an object's own keys before its members': returns 1 with that key's
 * JSON path in jp, which holds v's path on entry ("" at the top: members
 * are appended as "key" there, as ".key" below, list entries as "[i]").
 * Returns 0 with jp unchanged when there is none, and 1 with *oom set
 * when out of memory.  quote writes each key into the path (at most 79
 * bytes); NULL shows control bytes and bytes that are not UTF-8 as \xNN
 * and cuts a long key with "...". */
int rfile_json_find_dup(const struct cJSON *v, char *jp, size_t cap,
                        rfile_key_fn quote, int *oom);

#endif
