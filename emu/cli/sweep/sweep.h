/* The pieces of `tpuemu sweep` (the files of emu/cli/sweep/), shared among
 * them (and, for the variant traces, with `tpuemu advise`); the command's
 * entry point is cli_sweep (emu/cli/cli.h).
 *
 *   sweep.c            the command: options, the output directory, the
 *                      order of the steps
 *   file.c             the sweep file: JSON, top-level shape, the axes
 *   cli.c              the command-line form (--trace, --system, ...):
 *                      the sweep file it stands for, parsed as a file is
 *   grid.c             the grid: "partition_dims": "all", the
 *                      partitionings' traces, every grid point checked as
 *                      `run` checks it
 *   run.c              command lines, running them N at a time, reading
 *                      back their reports
 *   csv.c              results.csv
 *   chart.c            step_time.png
 *   rank.c             the fastest-first table
 *
 * A grid is the Cartesian product of its axes (partition_dims, system,
 * batch, freeze, then the --set keys in file order), the last axis
 * varying fastest; run i is the i-th point in that order. */
#ifndef EMU_CLI_SWEEP_H
#define EMU_CLI_SWEEP_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "emu/graph.h"
#include "emu/result.h"

/* Axes in all: partition_dims, system, batch and one per --set key. */
#define SWEEP_MAX_AXES 16
#define SWEEP_MAX_VALUES 1024
/* Runs in one grid (the product of the axis lengths): a sweep is a study
 * of a few dimensions, and each run is a process with its own report;
 * a larger grid is more likely a typo than a plan, and is refused before
 * anything starts. */
#define SWEEP_MAX_RUNS 4096
#define SWEEP_FILE_MAX (16L << 20)
#define SWEEP_MAX_SERIES 12
#define SWEEP_MAX_ARGS (16 + 2 * SWEEP_MAX_AXES)
/* How many splits "all" does not run on one system and batch it names
 * one by one before it counts the rest. */
#define SWEEP_ALL_SHOW_DROPPED 8
/* "partition_dims": "all" splits into at most this many cores per
 * replica: the 2-16 of spatial partitioning's published runs. */
#define SWEEP_ALL_MAX_CPR 16
/* Same bound as `run --batch` and a trace's global_batch, so that a sweep
 * never starts a run that `run` would refuse. */
#define SWEEP_MAX_BATCH ((double)GRAPH_DIM_MAX)
/* Output paths are "OUT/..." with OUT cut at this many bytes. */
#define SWEEP_OUT_MAX 900

#if defined(__GNUC__)
#define SWEEP_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define SWEEP_PRINTF(f, a)
#endif

typedef enum { AX_PD, AX_SYSTEM, AX_BATCH, AX_SET, AX_FREEZE } sweep_kind;

typedef struct {
    char label[96];   /* CSV and chart text: "1x4x2x1", "v3-64", "450" */
    char arg[96];     /* the command-line value */
    double x;         /* numeric position on the chart */
    cJSON *pd;        /* AX_PD: the full input_partition_dims value (owned) */
    int cpr;          /* AX_PD: cores per replica */
    char trace[2048]; /* AX_PD: the variant trace's path */
    char batch[32];   /* AX_SYSTEM with scale_batch: its --batch value */
} sweep_val;

typedef struct {
    sweep_kind kind;
    char name[64];    /* CSV column: partition_dims, system, batch, KEY */
    char jpath[96];   /* where it is in the sweep file: grid.set.KEY */
    int n;
    sweep_val *v;
} sweep_axis;

/* How the parser's errors name where they are (sweep_bad).  A sweep
 * file's name the file and a JSON path, "SWEEP.json: grid.system[1]:
 * unknown system ..." (no namer); the command-line form
 * (cli.c) names the option and value that stand for the path
 * instead, "--system v3-65: unknown system ...". */
typedef struct sweep_namer sweep_namer;
struct sweep_namer {
    /* The message `what` about JSON path jpath (NULL: the sweep as a
     * whole) into buf. */
    void (*say)(const sweep_namer *n, const char *jpath, const char *what,
                char *buf, size_t cap);
    const void *ctx; /* the form's own (a sweep_cli) */
    /* How a message about "partition_dims": "all" starts, and what it
     * advises when a system and batch leave no split. */
    const char *all, *advice;
};

typedef struct {
    const char *path; /* the sweep file, for messages */
    const sweep_namer *namer; /* NULL: a file's messages */
    char name[128];
    char trace[2048]; /* resolved base trace path (absolute once the output
                         directory is checked: commands run from anywhere) */
    char x[64];       /* x axis name ("" = first with > 1 value) */
    int scale_batch;  /* the global batch scales with the slice's cores */
    int naxes;
    sweep_axis ax[SWEEP_MAX_AXES];
    cJSON *base;      /* the base trace's JSON, for variants */
    graph g;          /* the base trace as the library reads it */
    int have_g;
    /* "partition_dims": "all" over several systems or batches keeps every
     * split valid on some of them: pd_valid[split * pd_ncombo + pair]
     * says whether `run` accepts the split (the partition_dims axis's
     * value) on a system x batch pair of the grid (batch fastest).  NULL
     * when every split is valid on every pair.  A grid point whose split
     * is not valid on its pair is not run (sweep_skipped). */
    unsigned char *pd_valid;
    int pd_ncombo;
    long long nskipped; /* grid points not run */
    int no_range;       /* --no-range: passed on to every run */
} sweep;

/* sweep_run.status of a grid point that is not run: its split is not
 * valid on its system and batch (sweep.pd_valid). */
#define SWEEP_SKIPPED (-4)

/* What one run came to. */
typedef struct {
    int status;        /* exit status, -1 signal, -2 not run, -3 unknown
                          (--gather: no report it could read),
                          SWEEP_SKIPPED */
    int sig;           /* the signal that ended it (status -1) */
    int have;          /* report read */
    emu_result r;
} sweep_run;

/* What the runs came to, for the summary line and the exit status. */
typedef struct {
    int nofit, failed;
    long long skipped;     /* grid points not run (sweep_skipped) */
    int first_fail;        /* exit status of the first failed run, or 0 */
    long long fail_run;    /* that run, or -1 */
    char fail_why[600];    /* what happened to it */
    long long finished;    /* runs that ended before a stop signal */
} sweep_tally;

/* The handlers of the stop signals (SIGINT, SIGTERM, SIGHUP) before
 * sweep_catch_signals, to put back. */
typedef struct {
    struct sigaction old[3];
    int installed[3];
} sweep_sigs;

/* The argv of one run (pointers into the sweep, the buffers here and the
 * binary's path). */
typedef struct {
    char *argv[SWEEP_MAX_ARGS];
    char setbuf[SWEEP_MAX_AXES][192];
    char report[1100];
    int argc;
} sweep_cmd;

/* ---- file.c: the sweep file and the axes ------------------------------ */

/* Reads, checks and expands the sweep file at path into s (sweep_free it
 * whatever the result): 0, or the exit status with one error printed. */
int sweep_parse(sweep *s, const char *path);
/* The same from a sweep's JSON text; name stands for the file (a
 * relative "trace" is relative to name's directory) and namer, when not
 * NULL, words the errors. */
int sweep_parse_text(sweep *s, const char *name, const sweep_namer *namer,
                     const char *text, size_t len);
void sweep_free(sweep *s);
/* Prints the error fmt about JSON path jpath (NULL: the sweep as a
 * whole) as the sweep words it (s->namer, or "SWEEP.json: jpath: what");
 * returns code.  Every error of the parser goes through here. */
int sweep_fail(const sweep *s, int code, const char *jpath,
               const char *fmt, ...) SWEEP_PRINTF(4, 5);
/* The same with exit status 2. */
int sweep_bad(const sweep *s, const char *jpath, const char *fmt, ...)
    SWEEP_PRINTF(3, 4);
int sweep_has_ctrl(const char *str);
/* Shortest of %.15g/%.16g/%.17g that reads back exactly: "450", "0.1". */
void sweep_num_text(char *buf, size_t cap, double v);
long long sweep_count_runs(const sweep *s);
/* Whether grid point i is not run (its split is not valid on its system
 * and batch: sweep.pd_valid). */
int sweep_skipped(const sweep *s, long long i);
/* Axis value indices of run i into idx[naxes]: last axis fastest. */
void sweep_run_index(const sweep *s, long long i, int *idx);
/* The axis of kind k, or -1. */
int sweep_axis_of(const sweep *s, sweep_kind k);
/* The value of run i on axis a (a >= 0). */
const sweep_val *sweep_val_of(const sweep *s, int a, const int *idx);
/* The global batch a run on system `sys` gets when no batch axis sets it:
 * the base trace's, or with scale_batch the base trace's examples per
 * core times the slice's cores.  0 when that is not a whole number. */
int64_t sweep_batch_for(const sweep *s, const char *sys);
/* 0, or (exit 2, error printed about jp) when scale_batch leaves no whole
 * batch on system sys. */
int sweep_scaled_ok(const sweep *s, const char *jp, const char *sys);
/* "OUT/rest" into buf (OUT cut at SWEEP_OUT_MAX bytes). */
void sweep_out_path(char *buf, size_t cap, const char *out, const char *rest);

/* Values and messages the batch and system axes share with "all"
 * (grid.c checks them before choosing splits). */
int sweep_batch_ok(const cJSON *e);
extern const char sweep_bad_batch_msg[];
extern const char sweep_bad_system_msg[];

/* ---- cli.c: the command-line form -------------------------------------- */

/* --set options the command-line form holds (the grid takes at most
 * SWEEP_MAX_AXES axes, and says so itself). */
#define SWEEP_CLI_MAX_SETS 64

/* `tpuemu sweep --trace TRACE.json [--system A,B] [--batch 8,16]
 * [--set KEY=V1,V2 ...] [--freeze LIST] [--partition N,H,W,C]`: the
 * sweep file
 * {"format": "tpuemu-sweep/1", "name": STEM, "trace": TRACE,
 *  "grid": {"partition_dims": "all", "system": [A, B], "batch": [8, 16],
 *           "freeze": [LIST], "set": {KEY: [V1, V2]}}}; with --partition,
 * "partition_dims": [[N, H, W, C]]. */
typedef struct {
    const char *trace, *system, *batch, *freeze; /* NULL: not given */
    const char *partition; /* --partition: the one split, not "all" */
    int nsets;
    const char *sets[SWEEP_CLI_MAX_SETS]; /* "KEY=V1,V2" as given */
    const char *first;  /* the first of these options given, or NULL */
} sweep_cli;

/* Takes --trace, --system, --batch, --freeze or --set at argv[*i]
 * (advancing *i past its value): 1 taken, 0 another argument, -1 error
 * printed (exit 2). */
int sweep_cli_take(sweep_cli *c, int argc, char **argv, int *i);
/* Builds the sweep c stands for as a sweep file's text and parses it with
 * sweep_parse_text (sweep_free s whatever the result); an error the file
 * would give at a JSON path names the option instead ("--system v3-65:
 * unknown system ...").  0, or the exit status with the error printed. */
int sweep_cli_parse(sweep *s, const sweep_cli *c);
/* OUT/sweep.json: the same sweep as a file, its trace by s->trace
 * (absolute by then), to re-run, edit or --gather. */
void sweep_cli_file(const char *out, char *buf, size_t cap);
int sweep_cli_write(const sweep *s, const sweep_cli *c, const char *out);

/* ---- grid.c: partitionings and grid points ---------------------------- */

/* "partition_dims": "all" as the list of splits it stands for (*out,
 * cJSON_Delete it). */
int sweep_expand_all(sweep *s, const cJSON *grid, cJSON **out);
/* The full input_partition_dims for simple dims d of rank `rank` (the
 * first input's split), each other input keeping the base trace's
 * choice; NULL with a message in why when out of memory. */
cJSON *sweep_pd_from_simple(const sweep *s, const cJSON *d, int rank,
                            char *why, size_t cap);
/* The same from a trace's JSON and its graph (`tpuemu advise` builds its
 * variants with it). */
cJSON *sweep_pd_for(const cJSON *base, const graph *g, const cJSON *d,
                    int rank, char *why, size_t cap);
/* The trace base with the run section of a partitioning: full_pd as
 * input_partition_dims over cpr cores per replica, no reference (the
 * published figure belongs to the base partitioning only).  NULL when
 * out of memory. */
cJSON *sweep_variant_doc(const cJSON *base, const cJSON *full_pd, int cpr);
/* Every --set value accepted, alone and with the other keys of its grid
 * point, as `run --set` accepts them. */
int sweep_check_sets(const sweep *s);
/* Every (partitioning, system, batch) of the grid accepted as `run`
 * accepts it. */
int sweep_check_points(const sweep *s);
/* Where partitioning v's trace goes: OUT/traces/STEM-pdLABEL.json. */
void sweep_variant_path(const sweep *s, const sweep_val *v, const char *out,
                        char *buf, size_t cap);
/* Sets every partitioning's trace path in the axis (--gather: the traces
 * the printed commands read). */
void sweep_variant_paths(sweep *s, const char *out);
/* Writes every partitioning's trace (and sets its path in the axis). */
int sweep_write_variants(sweep *s, const char *out);

/* ---- run.c: the runs -------------------------------------------------- */

/* From here until sweep_release_signals, a stop signal (SIGINT, SIGTERM,
 * SIGHUP; one ignored at start stays ignored) is only recorded:
 * sweep_run_all passes it on to the runs under way and stops starting
 * new ones; the command then dies of it (sweep_die). */
void sweep_catch_signals(sweep_sigs *g);
void sweep_release_signals(sweep_sigs *g);
/* The first stop signal recorded, 0 when none. */
int sweep_caught(void);
/* "SIGTERM", ... */
const char *sweep_sig_name(int sig);
/* Ends the process by sig's default action (exit status 128 + sig in a
 * shell), stdout flushed. */
void sweep_die(int sig);

void sweep_build_cmd(const sweep *s, const char *bin, const char *out,
                     long long i, sweep_cmd *c);
/* The commands one line each to stdout (print_only) or OUT/commands.txt. */
int sweep_write_commands(const sweep *s, const char *bin, const char *out,
                         int print_only);
/* Runs every command, `jobs` at a time, then reads their reports back
 * into res[nruns] and counts what they came to in *t.  After a stop
 * signal (sweep_caught), only the runs under way are waited for and
 * nothing is read back.  0, or 4 (out of memory, error printed). */
int sweep_run_all(const sweep *s, const char *bin, const char *out,
                  long long jobs, sweep_run *res, sweep_tally *t);

/* --gather: reads every run's report from OUT/reports into res[nruns] as
 * sweep_run_all would have (exit 0, or 3 for a report that does not
 * fit); a missing or unreadable report, or one that another command
 * wrote (trace, system, batch, split, --set or --freeze differ), is a
 * run with status -3, named on stderr with its command line (the first
 * SWEEP_GATHER_SHOW), and counted in t as a failure of exit status 2.
 * 0, or 4 (out of memory, error printed). */
int sweep_read_reports(const sweep *s, const char *bin, const char *out,
                       sweep_run *res, sweep_tally *t);

/* ---- csv.c, chart.c, rank.c ------------------------------------------- */

int sweep_write_csv(const sweep *s, const char *out, long long nruns,
                    const sweep_run *res);
int sweep_chart(const sweep *s, const char *out, long long nruns,
                const sweep_run *res);
int sweep_print_ranking(const sweep *s, long long nruns,
                        const sweep_run *res);

#endif
