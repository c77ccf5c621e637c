/* outfile — the one way tpuemu writes an output file (docs/SPEC.md: no input
 * may crash, hang or leave a partial output file).
 *
 * Every output is written to a temporary `.tpuemu.XXXXXX` in the target's
 * own directory (rename(2) is atomic only within one file system; the
 * short fixed name keeps the temporary within NAME_MAX whatever the
 * target's name) and renamed over the target once complete.
 *
 * Targets:
 *   - a regular file is replaced (its permission bits are kept);
 *   - a missing file is created (mode 0644);
 *   - a symbolic link is followed: the file it points to is replaced and
 *     the link stays a link (what `>` in a shell does); a link that does
 *     not resolve is refused;
 *   - anything else (directory, device such as /dev/null or /dev/full,
 *     FIFO, socket) is refused: renaming over it would replace a device
 *     node with a regular file, and writing into it is not what an output
 *     path means.
 * Every refusal and every I/O failure is TPU_ERR_INPUT ("PATH: cannot
 * create: ..." / "PATH: cannot write: ..."): the output path is part of
 * the command line.  Out of host memory is TPU_ERR_SYSTEM.
 *
 * Several outputs of one command are all-or-nothing: open and fill each
 * (outfile_open ... outfile_close), then outfile_commit_all; any failure
 * before the commit discards every temporary (outfile_discard_all).
 *
 * Interruptions: while a temporary exists, SIGINT, SIGTERM and SIGHUP are
 * held (blocked, not lost); the outfile that blocked them unblocks them
 * once its temporary is renamed or removed, and a signal that arrived in
 * between is delivered then.  So Ctrl-C or a CI timeout during a write
 * ends the command with every output whole or absent and no temporary
 * left; only SIGKILL can leave one.  Outfiles opened together must be
 * released in reverse order (outfile_commit_all and outfile_discard_all
 * do), so the first, which holds the signals, goes last. */
#ifndef EMU_OUTFILE_H
#define EMU_OUTFILE_H

#include <signal.h>
#include <stddef.h>
#include <stdio.h>

#include "emu/status.h"

typedef struct {
    char *name;   /* the path as given, for messages */
    char *target; /* what the rename replaces: name, or a link's target */
    char *tmp;    /* the temporary while staged, else NULL */
    FILE *f;      /* open between outfile_open and outfile_close */
    int existed;  /* the target existed before (a rollback keeps it) */
    int holds;    /* this outfile blocked the signals; `saved` restores */
    sigset_t saved;
} outfile;

/* Refuses a path that cannot be an output (see above) without leaving
 * anything behind: empty, a directory, a device, FIFO or socket, a
 * dangling link, a missing or unwritable directory, a name too long. */
tpu_status outfile_check(const char *path, tpu_error *err);

/* Checks path and opens a temporary beside its target: write to o->f. */
tpu_status outfile_open(outfile *o, const char *path, tpu_error *err);
/* Flushes and closes o->f; the temporary stays staged.  On an I/O error
 * (disk full...) the temporary is removed and the error returned. */
tpu_status outfile_close(outfile *o, tpu_error *err);
/* Renames the staged temporary over the target. */
tpu_status outfile_commit(outfile *o, tpu_error *err);
/* Closes and removes the temporary, frees o; safe on a zeroed outfile
 * and after a commit (then it only frees). */
void outfile_discard(outfile *o);

/* Discards n outfiles, the last opened first (see Interruptions). */
void outfile_discard_all(outfile *os, int n);

/* Renames n staged outputs into place.  When rename k fails, outputs
 * 0..k-1 that did not exist before are removed again and every remaining
 * temporary is discarded (a replaced file cannot be restored, but rename
 * within one directory only fails on a vanished directory or a full
 * inode table).  Every outfile is discarded on return. */
tpu_status outfile_commit_all(outfile *os, int n, tpu_error *err);

/* Open, write len bytes, close and commit: one output on its own. */
tpu_status outfile_write(const char *path, const void *data, size_t len,
                         tpu_error *err);

/* 1 when a and b name the same file: the same inode when both exist
 * (links and hard links included), else the same normalised path (its
 * directory resolved with realpath). */
int outfile_same(const char *a, const char *b);

#endif
