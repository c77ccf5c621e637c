/* Status codes and error messages shared by every module.
 *
 * The core never prints or exits: a function that can fail returns a
 * tpu_status and, on failure, fills a tpu_error with one line of text.
 * The status values are the CLI's exit codes (docs/SPEC.md), so a front end can
 * print "tpuemu: error: <msg>" and exit with the code as it is.
 */
#ifndef EMU_STATUS_H
#define EMU_STATUS_H

typedef enum {
    TPU_OK = 0,
    TPU_ERR_CHECK = 1,   /* a check failed: regression, mismatch */
    TPU_ERR_INPUT = 2,   /* bad input or usage (file and JSON path named) */
    TPU_ERR_NOFIT = 3,   /* workload does not fit HBM or VMEM */
    TPU_ERR_SYSTEM = 4   /* out of host memory, I/O error */
} tpu_status;

typedef struct {
    tpu_status code;
    char msg[1024];
} tpu_error;

/* Records code and a printf-style message in e (may be NULL); returns code. */
tpu_status tpu_fail(tpu_error *e, tpu_status code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Broken invariants are programming errors, not input errors: they abort
 * with file:line even in release builds (the core's only way to stop). */
#define TPU_ASSERT(cond) \
    ((cond) ? (void)0 : tpu_assert_fail(#cond, __FILE__, __LINE__))
void tpu_assert_fail(const char *expr, const char *file, int line);

#endif
