/* pool — independent tasks of one command in forked worker processes,
 * their output as if they had run one after another in this process.
 *
 * Each task runs in a worker (a fork of the caller, so it sees the
 * caller's memory as it was), prints what it likes on stdout and stderr,
 * and hands back a blob of bytes.  The caller gets, in task order, that
 * task's stdout and then its stderr written to its own, followed by its
 * blob: a command whose rows are independent (validate's traces) keeps
 * its table, messages and totals byte for byte, and uses every core. */
#ifndef TPUEMU_CLI_POOL_H
#define TPUEMU_CLI_POOL_H

#include <stddef.h>

/* Runs task i in a worker; *blob (malloc'd, or NULL) and *len are what
 * reaches the caller's deliver.  Returns 0, or nonzero when it could not
 * produce its blob (the caller's deliver then sees ok 0). */
typedef int (*pool_task_fn)(void *ctx, int i, char **blob, size_t *len);

/* Task i's result in this process, in task order; ok 0 when the task or
 * its worker failed (blob NULL). */
typedef void (*pool_deliver_fn)(void *ctx, int i, const char *blob, size_t len,
                                int ok);

/* Tasks 0 .. n-1 over at most jobs workers (jobs <= 0: one per online
 * CPU), started in the order order[0..n) lists them (NULL: 0, 1, ...;
 * the longest first keeps the last worker from finishing alone), their
 * output replayed in task order whatever the order they ran in.  Returns
 * 0 when every task was delivered (some perhaps with ok 0), -1 when no
 * worker could be started (nothing was delivered: the caller runs the
 * tasks itself). */
int pool_run(int n, int jobs, const int *order, pool_task_fn task,
             pool_deliver_fn deliver, void *ctx);

/* Online CPUs, at least 1 and at most 64. */
int pool_cpus(void);

#endif
