/* tpuemu sweep — a grid of configurations as independent `tpuemu run`
 * processes, so that a grid can also run beyond one machine.
 *
 * A sweep file names a base trace and a grid:
 *
 *   {"format": "tpuemu-sweep/1", "name": "retinanet-partitioning",
 *    "trace": "../reference/retinanet-2560-v3-64.json",
 *    "grid": {"partition_dims": [[1,1,1,1], [1,2,1,1], [1,4,2,1]],
 *             "system": ["v3-64"], "batch": [64],
 *             "set": {"hbm.bandwidth_gbs": [900, 450]}},
 *    "x": "partition_dims"}
 *
 * The trace path is relative to the sweep file.  Runs are the Cartesian
 * product of the axes in the order partition_dims, system, batch, freeze
 * (--freeze lists), then the --set keys in file order, the last axis
 * varying fastest; run i writes OUT/reports/NNNN.json and
 * OUT/logs/NNNN.log.  Partitionings need a modified trace
 * (run.input_partition_dims, num_cores_per_replica = the product): each
 * is written once to OUT/traces/STEM-pdAxBxCxD.json.
 *
 * Every run is one deterministic process, so the same grid runs under GNU
 * parallel, make -j or a Slurm array from --print-commands (one command
 * line per run, in run order).  Without it, the runs execute here, N at a
 * time (fork/exec of this very binary, /proc/self/exe), and the reports
 * are gathered into OUT/results.csv and OUT/step_time.png.  A run that
 * does not fit the hardware (exit 3) is a row with fits=0, not a failure.
 *
 * Everything that can be checked in this process is checked before the
 * output directory is created or any run starts: the sweep file (no
 * duplicate or unknown keys), the base trace (graph_load), every --set
 * key and value (tpu_params_set, as `run --set` does), and every grid
 * point's system, batch and partitioning (graph_check_run, as `run`
 * does), and that no file the sweep or its commands write is one of its
 * inputs (check_clobber).  A bad sweep is one `tpuemu: error: SWEEP.json:
 * json.path: ...` line and exit 2, leaving nothing behind.
 *
 * This file is the command and the order of its steps; emu/cli/sweep/sweep.h
 * lists the files that do each. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "emu/cli/cli.h"
#include "emu/cli/sweep/sweep.h"
#include "emu/out/outfile.h"

static const char usage_text[] =
    "usage: tpuemu sweep SWEEP.json [--jobs|-j N] [--print-commands] [--out DIR]\n"
    "                    [--bin TPUEMU] [--no-range]\n"
    "       tpuemu sweep SWEEP.json --gather [--out DIR] [--bin TPUEMU]\n"
    "       tpuemu sweep --trace TRACE.json [--system NAME[,NAME...]]\n"
    "                    [--batch N[,N...]] [--set KEY=V[,V...] ...]\n"
    "                    [--freeze LIST] [--partition N,H,W,C]\n"
    "                    [--jobs|-j N] [--print-commands]\n"
    "                    [--out DIR] [--bin TPUEMU] [--gather] [--no-range]\n"
    "\n"
    "Expands the grid of SWEEP.json (partition_dims x system x batch x\n"
    "freeze x --set values) into independent `tpuemu run` processes and\n"
    "runs them N at a time (default: every online CPU).  Writes into DIR\n"
    "(default sweep-NAME): traces/ (one trace per partitioning),\n"
    "reports/NNNN.json, logs/NNNN.log, commands.txt, results.csv (one row\n"
    "per run: swept values, exit, fits, step time, the slowest core's\n"
    "categories, HBM needed, global batch) and step_time.png (step time\n"
    "against the x axis of the sweep file).  An output that is one of the\n"
    "inputs (sweep file, base trace, --bin) is refused before anything is\n"
    "written.\n"
    "\n"
    "The sweep file, the base trace and every grid point are checked before\n"
    "anything is written or run (at most 16 axes and 4096 runs).\n"
    "--print-commands writes the traces and prints one command line per run\n"
    "instead of running them (for GNU parallel, make -j, a Slurm array),\n"
    "every path in it absolute.\n"
    "--gather, after the printed commands ran elsewhere, runs nothing: it\n"
    "reads DIR/reports and writes results.csv, the chart and the ranking as\n"
    "the sweep would have; a missing or unreadable report (or one another\n"
    "command wrote) is a failed run, named on stderr with its command line.\n"
    "--bin runs another tpuemu build (default: this one).\n"
    "--no-range is passed on to every run: no step range over the\n"
    "unconfirmed assumptions (15-30 more steps a run), so no\n"
    "\"not distinguishable\" marks in the ranking.\n"
    "The ranking lists the runs that fit fastest first, then by examples\n"
    "per second per chip; where the reports carry step ranges, a run whose\n"
    "range overlaps the winner's is marked \"not distinguishable\", with\n"
    "the --set that would put it first.\n"
    "SIGINT, SIGTERM or SIGHUP to the sweep stops the runs under way (the\n"
    "signal is passed on), writes no results.csv or chart, and the sweep\n"
    "dies of the same signal (exit status 128+N in a shell).\n"
    "\n"
    "--trace TRACE.json, without a sweep file: every split of the trace's\n"
    "first input over 1 to 16 cores per replica, each on the systems and\n"
    "batches given that it runs on (the sweep file's \"partition_dims\":\n"
    "\"all\"; a note on stderr names what each system does not run), on the\n"
    "trace's system or each of --system, at its batch or each of --batch,\n"
    "for each value of each --set key (one --set per key), with --freeze\n"
    "LIST; --partition N,H,W,C runs that one split instead of every one\n"
    "(\"partition_dims\": [[N, H, W, C]]).  It is the sweep file written\n"
    "to DIR/sweep.json (default DIR: sweep-STEM, STEM the trace's file\n"
    "name) and runs as that file would,\n"
    "checks and results alike; re-run, edit or --gather that file (one\n"
    "already there is replaced).  TRACE must be a regular file (it is read\n"
    "once per split).  An error names the option: `--system v3-65:\n"
    "unknown system ...`.\n"
    "\n"
    "exit status: 0 every run finished (a run that does not fit counts as\n"
    "finished, fits=0), 2 bad sweep file, option or --bin, an output\n"
    "directory that cannot be written, or (--gather) a run without a\n"
    "readable report, otherwise the exit status of the first failed run\n"
    "(its log is named).\n";

/* The command line. */
typedef struct {
    const char *file, *out, *bin; /* NULL: not given */
    sweep_cli cli;                /* the command-line form (--trace) */
    int print_only, gather;
    int no_range;                 /* --no-range: passed on to the runs */
    int64_t jobs;                 /* 0: not given */
    const char *jobs_as, *jobs_was; /* how --jobs was given, for a repeat */
} sweep_opts;

/* -j and --jobs are one option: given twice in any spelling is refused,
 * as every repeated option is (emu/cli/cli.h). */
static int take_jobs(sweep_opts *o, int argc, char **argv, int *i)
{
    if (o->jobs_as) {
        char q[80];
        cli_shown(q, sizeof q, o->jobs_was);
        return cli_error(2, "%s: given twice ('%s %s' before; -j and --jobs "
                            "are the same option); it takes one value",
                         argv[*i], o->jobs_as, q);
    }
    o->jobs_as = argv[*i];
    const char *v = cli_value(argc, argv, i);
    if (!v || cli_int("--jobs", v, 1, 4096, &o->jobs))
        return 2;
    o->jobs_was = v;
    return 0;
}

/* Option argv[*i] (advancing *i past its value); 0, or 2 with the error
 * printed. */
static int take_option(sweep_opts *o, int argc, char **argv, int *i)
{
    const char *a = argv[*i];
    if (strcmp(a, "--jobs") == 0 || strcmp(a, "-j") == 0)
        return take_jobs(o, argc, argv, i);
    if (strcmp(a, "--out") == 0)
        return (o->out = cli_value(argc, argv, i)) ? 0 : 2;
    if (strcmp(a, "--bin") == 0)
        return (o->bin = cli_value(argc, argv, i)) ? 0 : 2;
    if (strcmp(a, "--print-commands") == 0) {
        o->print_only = 1;
        return 0;
    }
    if (strcmp(a, "--gather") == 0) {
        o->gather = 1;
        return 0;
    }
    if (strcmp(a, "--no-range") == 0) {
        o->no_range = 1;
        return 0;
    }
    int took = sweep_cli_take(&o->cli, argc, argv, i);
    if (took)
        return took < 0 ? 2 : 0;
    if (a[0] == '-' && a[1]) {
        char q[80];
        cli_shown(q, sizeof q, a);
        return cli_error(2, "sweep: unknown option '%s' (see tpuemu sweep "
                            "--help)",
                         q);
    }
    if (o->file)
        return cli_error(2, "sweep: one sweep file expected");
    o->file = a;
    return 0;
}

/* A sweep file, or --trace and the options that build one: not both. */
static int check_form(const sweep_opts *o)
{
    const sweep_cli *c = &o->cli;
    char q[300];
    cli_shown(q, sizeof q, o->file ? o->file : "");
    if (o->file && c->trace)
        return cli_error(2, "sweep: --trace builds a sweep from the command "
                            "line, and %s is a sweep file (it names its own "
                            "trace): give one or the other",
                         q);
    if (o->file && c->first)
        return cli_error(2, "sweep: %s: a sweep file sets its grid itself "
                            "(%s); %s is for the --trace form",
                         c->first, q, c->first);
    if (!o->file && !c->trace && c->first)
        return cli_error(2, "sweep: %s needs --trace TRACE.json (the trace "
                            "whose splits to sweep)",
                         c->first);
    if (!o->file && !c->trace)
        return cli_error(2, "sweep: usage: tpuemu sweep SWEEP.json [--jobs N] "
                            "[--print-commands] [--out DIR] [--bin TPUEMU], "
                            "or tpuemu sweep --trace TRACE.json [--system "
                            "NAME,...] [--batch N,...] [--set KEY=V,...]");
    return 0;
}

static int parse_options(sweep_opts *o, int argc, char **argv)
{
    memset(o, 0, sizeof *o);
    for (int i = 1; i < argc; i++) {
        int rc = take_option(o, argc, argv, &i);
        if (rc)
            return rc;
    }
    int rc = check_form(o);
    if (rc)
        return rc;
    if (o->file && sweep_has_ctrl(o->file))
        return cli_error(2, "sweep: the sweep file's name has control "
                            "characters");
    if (o->gather && o->print_only)
        return cli_error(2, "sweep: --gather reads the reports the printed "
                            "commands wrote; it takes no --print-commands");
    if (o->gather && o->jobs_as)
        return cli_error(2, "sweep: %s: --gather runs nothing", o->jobs_as);
    if (o->jobs == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        o->jobs = n > 0 ? n : 1;
    }
    if (o->out && (!o->out[0] || strlen(o->out) > SWEEP_OUT_MAX ||
                   sweep_has_ctrl(o->out)))
        return cli_error(2, "sweep: --out: unusable directory name (empty, "
                            "too long or control characters)");
    return 0;
}

/* --bin must be a program this process can start: a missing or
 * non-executable one would otherwise fail every run, one log at a time. */
static int check_bin(const char *bin)
{
    char q[300];
    cli_shown(q, sizeof q, bin);
    struct stat st;
    if (!bin[0] || sweep_has_ctrl(bin) || strlen(bin) >= 1000)
        return cli_error(2, "sweep: --bin %s: unusable path", q);
    if (stat(bin, &st) != 0)
        return cli_error(2, "sweep: --bin %s: %s", q, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return cli_error(2, "sweep: --bin %s: not a regular file", q);
    if (access(bin, X_OK) != 0)
        return cli_error(2, "sweep: --bin %s: not executable", q);
    return 0;
}

/* The program the runs execute: --bin, else this very binary. */
static int find_bin(const char *given, char *bin, size_t cap)
{
    if (given) {
        if (check_bin(given))
            return 2;
        snprintf(bin, cap, "%s", given);
        return 0;
    }
    ssize_t n = readlink("/proc/self/exe", bin, cap - 1);
    if (n <= 0)
        return cli_error(4, "sweep: cannot find this binary "
                            "(/proc/self/exe); use --bin");
    bin[n] = 0;
    return 0;
}

/* The output directory itself: an existing directory, or a new one in an
 * existing directory (as every output path: a missing directory is bad
 * usage, exit 2, not created). */
static int check_out_dir(const char *out)
{
    struct stat st;
    if (stat(out, &st) == 0) {
        if (!S_ISDIR(st.st_mode))
            return cli_error(2, "sweep --out %s: exists and is not a "
                                "directory", out);
        return 0;
    }
    char parent[1024];
    snprintf(parent, sizeof parent, "%s", out);
    char *slash = strrchr(parent, '/');
    while (slash && slash > parent && slash[1] == 0) {
        *slash = 0; /* "dir/" names dir */
        slash = strrchr(parent, '/');
    }
    if (slash)
        *(slash == parent ? slash + 1 : slash) = 0;
    else
        snprintf(parent, sizeof parent, ".");
    if (stat(parent, &st) != 0 || !S_ISDIR(st.st_mode))
        return cli_error(2, "sweep --out %s: %s is not an existing directory",
                         out, parent);
    return 0;
}

/* path made absolute against the working directory (a leading "./"
 * dropped), in place; 0, or the exit status with the error printed. */
static int make_absolute(char *path, size_t cap, const char *what)
{
    char cwd[PATH_MAX] = ""; /* stays empty for an absolute path */
    if (path[0] != '/' && !getcwd(cwd, sizeof cwd))
        return cli_error(4, "sweep: cannot read the working directory (%s), "
                            "needed to make %s absolute",
                         strerror(errno), what);
    const char *rel = path;
    while (cwd[0] && rel[0] == '.' && rel[1] == '/') {
        rel += 2;
        while (*rel == '/')
            rel++;
    }
    char abs_p[PATH_MAX + 2200];
    int w = cwd[0] ? snprintf(abs_p, sizeof abs_p, "%s/%s", cwd, rel)
                   : snprintf(abs_p, sizeof abs_p, "%s", path);
    if (w < 0 || (size_t)w >= cap || (size_t)w >= sizeof abs_p)
        return cli_error(2, "sweep: %s: the absolute path is too long", what);
    /* "DIR/" names DIR: no "DIR//reports/0000.json" in the commands */
    while (w > 1 && abs_p[w - 1] == '/')
        abs_p[--w] = 0;
    memcpy(path, abs_p, (size_t)w + 1);
    return 0;
}

/* The k-th file the sweep (or its commands) writes in out, k from 0:
 * commands.txt, results.csv, step_time.png, the reports, the logs, the
 * partitionings' traces, then with `file` (the --trace form) sweep.json.
 * 0 past the last. */
static int output_file(const sweep *s, const char *out, long long nruns,
                       int file, long long k, char *p, size_t cap)
{
    static const char *const fixed[] = {"commands.txt", "results.csv",
                                         "step_time.png"};
    char name[64];
    if (k < 3) {
        sweep_out_path(p, cap, out, fixed[k]);
        return 1;
    }
    k -= 3;
    if (k < 2 * nruns) {
        snprintf(name, sizeof name, k < nruns ? "reports/%04lld.json"
                                              : "logs/%04lld.log",
                 k < nruns ? k : k - nruns);
        sweep_out_path(p, cap, out, name);
        return 1;
    }
    int apd = sweep_axis_of(s, AX_PD);
    int nvar = apd < 0 ? 0 : s->ax[apd].n;
    k -= 2 * nruns;
    if (k < nvar) {
        sweep_variant_path(s, &s->ax[apd].v[k], out, p, cap);
        return 1;
    }
    if (!file || k > nvar)
        return 0;
    sweep_cli_file(out, p, cap);
    return 1;
}

/* Every file the sweep (or, with --print-commands, its commands) writes
 * in out: refused, before anything is written, when it is one of the
 * sweep's own inputs (the sweep file, the base trace, the program the runs
 * execute; the --trace form has no sweep file but writes one, `file`).  outfile_same compares inodes, so a symlink, a hard link or a
 * "./" spelling of the same file is caught too: otherwise the sweep file
 * named DIR/commands.txt or a base trace at DIR/reports/0000.json is
 * silently replaced while the runs still read it. */
static int check_clobber(const sweep *s, const char *out, const char *bin,
                         long long nruns, int cli, int file)
{
    const struct {
        const char *path, *what;
    } in[] = {{s->path, "the sweep file"},
              {s->trace, "the base trace"},
              {bin, "the program the runs execute (--bin)"}};
    char p[2200];
    for (long long k = 0; output_file(s, out, nruns, file, k, p, sizeof p);
         k++)
        for (size_t i = cli ? 1 : 0; i < sizeof in / sizeof in[0]; i++) {
            if (!outfile_same(p, in[i].path))
                continue;
            char q[1000];
            cli_shown(q, sizeof q, p);
            return cli_error(2, "sweep --out: %s is %s; refusing to "
                                "overwrite it (give the sweep another --out "
                                "directory)",
                             q, in[i].what);
        }
    return 0;
}

/* dir and its missing parents; on a failure, the directory that could
 * not be made in failed[cap] (errno set). */
static int mkdir_p(const char *dir, char *failed, size_t cap)
{
    char tmp[1024];
    snprintf(failed, cap, "%s", dir);
    if (snprintf(tmp, sizeof tmp, "%s", dir) >= (int)sizeof tmp) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST) {
                snprintf(failed, cap, "%s", tmp);
                return -1;
            }
            *p = '/';
        }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
        return -1;
    return 0;
}

/* OUT/traces, OUT/reports and OUT/logs.  A directory that cannot be made
 * (a read-only file system, no permission, a full disk) is an output path
 * that cannot be written: bad usage, exit 2, as for run --report; only
 * running out of memory is the machine's failure. */
static int make_dirs(const char *out)
{
    static const char *const dirs[] = {"traces", "reports", "logs"};
    for (size_t d = 0; d < sizeof dirs / sizeof dirs[0]; d++) {
        char sub[1100], failed[1100];
        sweep_out_path(sub, sizeof sub, out, dirs[d]);
        if (mkdir_p(sub, failed, sizeof failed) != 0) {
            int e = errno;
            return cli_error(e == ENOMEM ? 4 : 2, "%s: cannot create: %s",
                             failed, strerror(e));
        }
    }
    return 0;
}

/* The output directory (--out, else sweep-NAME), checked, and every path
 * the runs get (the directory, the base trace, the binary) absolute:
 * --print-commands lines run from anywhere.  No output may be one of the
 * inputs. */
static int settle_paths(sweep *s, const sweep_opts *o, char *out,
                        size_t out_cap, char *bin, size_t bin_cap)
{
    if (o->out)
        snprintf(out, out_cap, "%s", o->out);
    else
        snprintf(out, out_cap, "sweep-%s", s->name);
    int rc = check_out_dir(out);
    if (!rc)
        rc = make_absolute(out, SWEEP_OUT_MAX + 1, "--out");
    if (!rc)
        rc = make_absolute(s->trace, sizeof s->trace, "the base trace");
    if (!rc)
        rc = make_absolute(bin, bin_cap, "--bin");
    if (!rc)
        rc = check_clobber(s, out, bin, sweep_count_runs(s), !o->file,
                           !o->file && !o->gather);
    return rc;
}

/* results.csv and the chart of an earlier sweep into the same directory
 * must not stand for this one if it stops before gathering or draws no
 * chart (no run fits or succeeds). */
static void remove_stale(const char *out)
{
    char p[1100];
    sweep_out_path(p, sizeof p, out, "results.csv");
    unlink(p);
    sweep_out_path(p, sizeof p, out, "step_time.png");
    unlink(p);
}

/* A stop signal came (sweep_caught) and the runs under way have ended:
 * no results.csv or chart stands for a sweep that did not finish (those
 * of a finished gather stay), and the command dies of the signal. */
static void die_stopped(const char *out, const sweep_tally *t,
                        long long nruns, int gather, int complete, int sig)
{
    const char *name = sweep_sig_name(sig);
    char q[1000];
    cli_shown(q, sizeof q, out);
    if (complete)
        cli_error(128 + sig, "sweep: %s after results.csv and the chart were "
                             "written", name);
    else if (gather)
        cli_error(128 + sig, "sweep --gather: %s: results.csv and the chart "
                             "not written", name);
    else
        cli_error(128 + sig, "sweep: %s: %lld of %lld runs had finished "
                             "(their reports are in %s/reports); results.csv "
                             "and the chart not written",
                  name, t->finished, nruns, q);
    if (!complete)
        remove_stale(out);
    sweep_die(sig);
}

/* The summary line, and the exit status of the first failure (its log,
 * or with --gather the reports that are missing). */
static int summarize(const char *out, long long nruns, const sweep_tally *t,
                     int gather, int rc)
{
    long long ran = nruns - t->skipped;
    printf("%lld runs: %lld done, %d do not fit, %d %s", ran,
           ran - t->nofit - t->failed, t->nofit, t->failed,
           gather ? "without a readable report" : "failed");
    if (t->skipped)
        printf("; %lld grid points not run (the split is not valid on "
               "that system and batch)", t->skipped);
    printf("\n");
    fflush(stdout);
    if (rc || t->fail_run < 0)
        return rc;
    if (gather)
        return cli_error(t->first_fail, "sweep --gather: %d of %lld runs "
                                        "have no readable report (the first, "
                                        "run %04lld: %s): run their commands "
                                        "(above) and gather again",
                         t->failed, ran, t->fail_run, t->fail_why);
    char q[1000];
    cli_shown(q, sizeof q, out);
    return cli_error(t->first_fail, "sweep: run %04lld %s: see "
                                    "%s/logs/%04lld.log",
                     t->fail_run, t->fail_why, q, t->fail_run);
}

/* Runs the grid (or with --gather only reads its reports) and gathers
 * the results: CSV, chart, ranking, the summary line, and the first
 * failed run's exit status and log.  A stop signal from the start of the
 * runs until the chart is in place ends it all (die_stopped). */
static int run_and_gather(const sweep *s, const char *bin, const char *out,
                          long long jobs, int gather)
{
    long long nruns = sweep_count_runs(s);
    sweep_run *res = calloc((size_t)nruns, sizeof *res);
    if (!res)
        return cli_error(4, "out of memory");
    sweep_tally t;
    sweep_sigs sg;
    sweep_catch_signals(&sg);
    int rc = gather ? sweep_read_reports(s, bin, out, res, &t)
                    : sweep_run_all(s, bin, out, jobs, res, &t);
    int ran = rc == 0;
    /* outfile holds a signal while a temporary exists: one that came
     * during a write is seen here, the file whole */
    if (!rc && !sweep_caught())
        rc = sweep_write_csv(s, out, nruns, res);
    if (!rc && !sweep_caught())
        rc = sweep_chart(s, out, nruns, res);
    int complete = !rc && !sweep_caught();
    sweep_release_signals(&sg);
    int sig = sweep_caught();
    if (!rc && !sig)
        rc = sweep_print_ranking(s, nruns, res);
    for (long long i = 0; i < nruns; i++)
        emu_result_free(&res[i].r);
    free(res);
    if (sig)
        die_stopped(out, &t, nruns, gather, complete, sig);
    return ran ? summarize(out, nruns, &t, gather, rc) : rc;
}

/* --gather: the directory the printed commands wrote into. */
static int check_gather_dir(const char *out)
{
    char p[1100];
    struct stat st;
    sweep_out_path(p, sizeof p, out, "reports");
    if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode)) {
        char q[1000];
        cli_shown(q, sizeof q, p);
        return cli_error(2, "sweep --gather: %s: %s (run the commands of "
                            "--print-commands with the same --out first)",
                         q, stat(p, &st) != 0 ? strerror(errno)
                                              : "not a directory");
    }
    return 0;
}

/* Everything after the options: the sweep checked (the file, or the one
 * --trace and its options stand for), the output directory prepared
 * (with --trace, the sweep written there as DIR/sweep.json), then the
 * commands printed or run, or (--gather) their reports read. */
static int sweep_main(sweep *s, const sweep_opts *o, char *bin,
                      size_t bin_cap)
{
    char out[1024];
    int rc = o->file ? sweep_parse(s, o->file) : sweep_cli_parse(s, &o->cli);
    s->no_range = o->no_range;
    if (!rc)
        rc = settle_paths(s, o, out, sizeof out, bin, bin_cap);
    if (!rc && o->gather)
        rc = check_gather_dir(out);
    if (!rc && o->gather) {
        sweep_variant_paths(s, out); /* the commands name them */
        remove_stale(out);
        return run_and_gather(s, bin, out, o->jobs, 1);
    }
    /* Only now, with everything checked, does anything get written. */
    if (!rc)
        rc = make_dirs(out);
    if (!rc)
        rc = sweep_write_variants(s, out);
    if (!rc && !o->file)
        rc = sweep_cli_write(s, &o->cli, out);
    if (!rc)
        rc = sweep_write_commands(s, bin, out, o->print_only);
    if (rc || o->print_only)
        return rc;
    if (!o->file) {
        char p[1100], q[1200];
        sweep_cli_file(out, p, sizeof p);
        cli_shown(q, sizeof q, p);
        printf("sweep file: %s (the same sweep: re-run, edit or --gather "
               "it)\n", q);
    }
    remove_stale(out);
    return run_and_gather(s, bin, out, o->jobs, 0);
}

int cli_sweep(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        fputs(usage_text, stdout);
        return 0;
    }
    sweep_opts o;
    char bin[1024];
    int rc = parse_options(&o, argc, argv);
    if (!rc)
        rc = find_bin(o.bin, bin, sizeof bin);
    if (rc)
        return rc;
    sweep s;
    rc = sweep_main(&s, &o, bin, sizeof bin);
    sweep_free(&s);
    return rc;
}
