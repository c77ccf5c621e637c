/* cli — the command-line front end.  One file per command (emu/cli/NAME.c),
 * each exporting `int cli_NAME(int argc, char **argv)` where argv[0] is
 * the command's name; the return value is the exit status (docs/SPEC.md). */
#ifndef EMU_CLI_H
#define EMU_CLI_H

#include <stddef.h>
#include <stdint.h>

#include <stdio.h>

#include "emu/graph.h"
#include "emu/result.h"
#include "emu/sim.h"
#include "emu/status.h"

int cli_run(int argc, char **argv);
int cli_mxu(int argc, char **argv);
int cli_lower(int argc, char **argv);
int cli_view(int argc, char **argv);
int cli_check(int argc, char **argv);
int cli_validate(int argc, char **argv);
int cli_probe(int argc, char **argv);
int cli_probe_hbm(int argc, char **argv);
int cli_probe_ici(int argc, char **argv);   /* allreduce, permute */
int cli_sweep(int argc, char **argv);
int cli_import(int argc, char **argv);
int cli_summary(int argc, char **argv);
int cli_advise(int argc, char **argv);

/* Prints "tpuemu: error: <msg>" on stderr (one line); returns code. */
int cli_error(int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Prints e's message the same way and returns its code. */
int cli_fail(const tpu_error *e);
/* Text as it may appear in a one-line message: control bytes as \xNN, at
 * most cap-1 bytes, "..." when cut (cli_error writes its message so). */
void cli_shown(char *buf, size_t cap, const char *text);

/* Parses a whole decimal integer in [lo, hi] given to option opt; on
 * failure prints a clear error and returns 2 (usage), else 0. */
int cli_int(const char *opt, const char *s, int64_t lo, int64_t hi,
            int64_t *out);
int cli_double(const char *opt, const char *s, double lo, double hi,
               double *out);
/* 1 when s is a plain decimal number (digits, sign, point, exponent:
 * what cli_double accepts before its range check), its value in *out
 * (+-HUGE_VAL when too large for a double); 0 otherwise.  Prints nothing. */
int cli_number(const char *s, double *out);
/* Byte counts x and y as GiB, with digits enough that different figures
 * (what is needed, what the core has) never print the same. */
void cli_fmt_gib2(char *a, char *b, size_t cap, double x, double y);
/* v as the shortest %g text that reads back as exactly v. */
void cli_fmt_num(char *buf, size_t cap, double v);
/* The index of the core with the longest step time in r (the first of
 * equals; 0 when r has no cores): the one a table's figures are for. */
int cli_slowest_core(const emu_result *r);
/* doc as indented JSON text ending in a newline (free it); NULL when out
 * of memory. */
struct cJSON;
char *cli_json_text(const struct cJSON *doc);
/* Prints text (UTF-8) left-aligned in a column `cells` terminal columns
 * wide: a terminal table padded by bytes would shift at every "ü", and
 * one padded by characters at every "雪" (two columns in a terminal). */
void cli_put_cell(const char *text, int cells);
/* Terminal columns of text: 2 for East Asian wide and fullwidth
 * characters, 0 for combining marks and zero-width ones, 1 otherwise. */
int cli_text_cols(const char *text);
/* text cut to at most `cols` terminal columns (never inside a character),
 * ending in `more` (e.g. "..") when cut; into dst of cap >= 1 bytes. */
void cli_fit_cols(char *dst, size_t cap, const char *text, int cols,
                  const char *more);
/* The same cut in the middle, keeping the end: layer names often differ
 * only there ("..._conv_a", "..._conv_b"). */
void cli_fit_cols_mid(char *dst, size_t cap, const char *text, int cols);
/* Option rule for every command: an option that takes a value is given
 * as "--name VALUE" or "--name=VALUE" (emu/cli/main.c splits the second
 * form before any command parses), at most once (--set,
 * which adds one override each time, is the one exception); a second
 * one is an error (exit 2) naming both, never a silent override.
 *
 * The value after option argv[*i], advancing *i; prints an error and
 * returns NULL when it is missing or the option was given before. */
const char *cli_value(int argc, char **argv, int *i);
/* Matches option `name` at argv[*i], as "--name VALUE" or "--name=VALUE":
 * 1 with *val set, 0 when argv[*i] is another option, -1 (error printed)
 * when the value is missing or the option was given before. */
int cli_take(int argc, char **argv, int *i, const char *name,
             const char **val);
/* Refuses (exit 2, error printed) two --set values of one key among
 * sets[0..n) ("KEY=VALUE" each): the second would silently win.  0 when
 * every key is given once. */
int cli_sets_once(const char *const *sets, int n);
/* Two --freeze lists freeze the same layers when they hold the same
 * entries: order and repeats do not matter ("c1,bn" is "bn,c1").  `check`
 * notes a difference with it, `sweep` refuses a repeated grid.freeze entry
 * with it. */
int cli_freeze_same(const char *a, const char *b);
/* True when argv has -h or --help. */
int cli_wants_help(int argc, char **argv);

/* The what-if options of every command that simulates a trace (run,
 * lower, view; emu/cli/whatif.c): --system NAME, --batch N, --set
 * KEY=VALUE (repeatable), --freeze LIST, --optimizer NAME and --partition
 * N,H,W,C, under the option rule above.
 * Parse with cli_whatif_take in the command's loop, then cli_whatif_check
 * once, then cli_whatif_apply on the loaded graph. */
#define CLI_WHATIF_MAX_SETS 64
typedef struct {
    const char *system;        /* NULL: the trace's */
    int64_t batch;             /* 0: the trace's */
    const char *freeze;        /* NULL: the trace's trainable flags */
    int optimizer;             /* --optimizer: graph_optimizer, -1: the
                                  trace's */
    const char *partition;     /* --partition as given, NULL: the trace's */
    int pdims_n, pdims[GRAPH_MAX_PDIMS];
    int n_sets;
    const char *keys[CLI_WHATIF_MAX_SETS], *vals[CLI_WHATIF_MAX_SETS];
    const char *sets[CLI_WHATIF_MAX_SETS]; /* "KEY=VALUE" as given */
    char buf[CLI_WHATIF_MAX_SETS][256];
    const char *first;         /* the first what-if option given, or NULL */
} cli_whatif;

void cli_whatif_init(cli_whatif *w);
/* A --partition value "1,4,2,1" into dims (*n factors, 2 to
 * GRAPH_MAX_PDIMS, each 1 to 4096): 0, or -1 with the error printed. */
int cli_partition_parse(const char *v, int dims[GRAPH_MAX_PDIMS], int *n);
/* Takes the what-if option at argv[*i] (advancing *i past its value): 1
 * when it was one, 0 when argv[*i] is something else, -1 (error printed:
 * exit 2) when its value is missing or bad or it was given twice. */
int cli_whatif_take(cli_whatif *w, int argc, char **argv, int *i);
/* After parsing: refuses a --set key given twice and an unknown key
 * (listing the known ones).  0, or 2 with the error printed. */
int cli_whatif_check(const cli_whatif *w);
/* Applies --freeze, --optimizer and --partition to g (graph_freeze;
 * `path` names the trace) and puts --system, --batch and --set into o.
 * 0, or the exit status with the error printed. */
int cli_whatif_apply(const cli_whatif *w, graph *g, const char *path,
                     sim_opts *o);
/* The options' lines for a command's --help, the --set key table
 * included (tpu_param_key). */
void cli_whatif_usage(FILE *f);

#define TPUEMU_VERSION "0.1.0"

#endif
