/* A tiny test harness in the spirit of Redis' testhelp.h.
 *
 * A suite is a function `void th_suite_NAME(th_ctx *t)` in test/test_*.c;
 * scripts/gen_registry.sh finds it, so adding a suite is adding a file.
 * Inside a suite, each test case is a block opened with th_case(): the
 * runner counts cases, not individual checks, and prints one line each.
 *
 *   void th_suite_bf16(th_ctx *t) {
 *       th_case(t, "ties round to even");
 *       TH_CHECK(t, bf16_from_f32(x) == 0x3f80);
 *   }
 *
 * Run all:  build/test_runner          Run one:  build/test_runner bf16
 * The last line of a run is "N passed, N failed".
 */
#ifndef TH_HARNESS_H
#define TH_HARNESS_H

#include <stddef.h>
#include <stdint.h>

#include "emu/sim.h"
#include "firmware/isa.h"

typedef struct th_ctx th_ctx;
typedef struct {
    const char *name;
    void (*fn)(th_ctx *t);
} th_suite;

/* Opens a new test case; the previous one is closed and counted. */
void th_case(th_ctx *t, const char *name);
/* Records a failed check in the open case (with file:line and a message). */
int th_check(th_ctx *t, int ok, const char *expr, const char *file, int line);
void th_failf(th_ctx *t, const char *file, int line, const char *fmt, ...);
/* True when running under the ASan build: suites may shrink long loops. */
int th_asan(void);

#define TH_CHECK(t, cond) th_check((t), !!(cond), #cond, __FILE__, __LINE__)
#define TH_FAIL(t, ...) th_failf((t), __FILE__, __LINE__, __VA_ARGS__)
/* Checks a condition and, when false, prints a formatted explanation. */
#define TH_CHECKF(t, cond, ...) \
    ((cond) ? 1 : (th_failf((t), __FILE__, __LINE__, __VA_ARGS__), 0))

/* Runs a shell command, captures its exit status and (truncated) stdout and
 * stderr.  `$TPUEMU` in the environment names the binary under test; the
 * helper th_bin() returns it ("./tpuemu" by default). */
typedef struct {
    int status;      /* exit status, or -1 when killed by a signal */
    char out[65536]; /* stdout, NUL-terminated, truncated */
    char err[8192];  /* stderr, NUL-terminated, truncated */
} th_cmd_result;
const char *th_bin(void);
/* th_bin() as an absolute path, for commands run from another directory
 * ("" if the working directory cannot be read). */
const char *th_bin_abs(void);
int th_run(th_cmd_result *r, const char *fmt, ...);
/* 1 when python3 with numpy (the functional reference's, which make deps
 * installs) can be run; r holds the probe's result. */
int th_have_numpy(th_cmd_result *r);
/* Reads a PNG as 8-bit RGB rows (*rgb owned by the caller, NULL on
 * failure).  1 on success. */
int th_png_rgb(const char *path, int *w, int *h, unsigned char **rgb);
/* `tpuemu view ARGS --screenshot TMP/NAME` with no display in the
 * environment (SDL's offscreen driver): its pixels as th_png_rgb gives
 * them, or NULL after a failed check. */
unsigned char *th_view_shot(th_ctx *t, const char *args, const char *name,
                            int *w, int *h);
/* Pixels that differ between RGB images a and b of width w, in rows
 * y0..y1-1 and columns x0..x1-1. */
long th_rgb_diff(const unsigned char *a, const unsigned char *b, int w, int x0,
                 int y0, int x1, int y1);
/* 1 when text s, drawn by emu/font.c at scale 1 in colour col with its
 * top left at (x, y), is exactly what the w x h RGB image holds there
 * (every glyph pixel col, every other pixel not). */
int th_text_at(const unsigned char *rgb, int w, int h, int x, int y,
               const char *s, uint32_t col);
/* A whole file, NUL-terminated (owned by the caller; its length without
 * the NUL in *len when len is not NULL); NULL when it cannot be read. */
char *th_slurp(const char *path, size_t *len);
/* Writes text to path (a test's input file); silent on failure: the
 * command that reads it then fails and says so. */
void th_put(const char *path, const char *text);
/* Processes still running whose parent is the runner: after each suite
 * the runner fails the suite when there are any (the runner is a child
 * subreaper, so a background process its shell left behind is its child
 * too).  Their count; each described as "pid N: COMMAND; " in
 * desc[cap].  Exited ones are reaped first. */
int th_children(char *desc, size_t cap);
/* Kills (SIGKILL) and reaps every child th_children finds. */
void th_children_kill(void);

/* A scratch directory unique to this run (created on first use). */
const char *th_tmpdir(void);
/* th_tmpdir() as an absolute path, for commands run from another
 * directory. */
const char *th_tmpdir_abs(void);

/* A hand-built result for the report, check and chart tests, so each test
 * knows exactly what the file must say: `cores` cores two per chip,
 * cores_per_replica cores per replica (core i: replica i / cpr, shard
 * i % cpr), training, fitting; even cores' breakdown cat_even, odd cores'
 * cat_odd (NULL: cat_even); step times from th_result_retime.  Free it
 * with emu_result_free. */
void th_result_make(emu_result *r, const char *trace, const char *system,
                    int cores, int cores_per_replica, int64_t global_batch,
                    const double *cat_even, const double *cat_odd);
/* Every core's step time the sum of its breakdown; the result's the
 * slowest core's (after a test changed a breakdown). */
void th_result_retime(emu_result *r);
/* Replaces r's overrides with n key/value pairs. */
void th_result_overrides(emu_result *r, int n, const char *const kv[][2]);
/* Writes r as a report to th_tmpdir()/name (its path in path[cap]). */
void th_result_save(th_ctx *t, const emu_result *r, const char *name,
                    char *path, size_t cap);

/* Writes th_tmpdir()/name: a v3-8 report of 8 cores spending 1 ms each in
 * the MXU, with n --set overrides kv and the --freeze list freeze (NULL:
 * none). */
void th_result_whatif(th_ctx *t, const char *name, char *path, size_t cap,
                      const char *const kv[][2], int n, const char *freeze);

/* 1 when no byte sequence in s is one a terminal would act on: C0 (but a
 * newline), DEL, C1, U+2028/9 and the bidi controls. */
int th_terminal_safe(const char *s);

/* s is what run prints on stderr after a step that does not fit (exit 3)
 * and after its own lines: only the notes of its search for what would fit
 * (emu/cli/advise_search.c: `tpuemu: note: fits on ...` lines, `no split of
 * ...` when none fits, `N of M candidates not tried ...` when its time ran
 * out).  Returns how many `fits on` lines s holds, or -1 when some line of
 * s is none of these or is not ended by a newline. */
int th_fit_notes(const char *s);

/* A sweep file's text in buf[cap]: name "sw", the base trace as given,
 * then rest (its other members, "grid" among them). */
void th_sweep_text(char *buf, size_t cap, const char *trace,
                   const char *rest);
/* Writes dir/name.json, a sweep file over traces/small/tiny2d.json (by
 * absolute path) with rest as its other members; its path in path[cap]. */
void th_put_sweep(char *path, size_t cap, const char *dir, const char *name,
                  const char *rest);

/* A synthetic timeline (test/test_chart_synth.c) for the chart, Chrome
 * trace and viewer tests: per core, `layers` MXU + vector spans, an
 * all-reduce and idle up to the slowest core; identical = 0 makes cores
 * differ. */
void tsynth_result(emu_result *r, int cores, int dim_x, int dim_y,
                   int layers, int identical);

/* Loads the trace at path and simulates it with n `--set` overrides
 * (keys[i]=vals[i]) and, when functional, its values; when prog is not
 * NULL, also lowers core 0's program into it (fw_program_free it).  The
 * sim_run status; *r to emu_result_free on success. */
int th_sim_trace(const char *path, const char *const *keys,
                 const char *const *vals, int n, int functional, emu_result *r,
                 fw_program *prog, tpu_error *e);

#endif
