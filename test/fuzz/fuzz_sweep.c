/* libFuzzer entry for the sweep-file parser (users hand `tpuemu sweep`
 * their own SWEEP.json): `make fuzz-sweep FUZZ_SECONDS=600`.
 *
 * Each input is a sweep file's text, parsed by sweep_parse_text as
 * `tpuemu sweep FILE --print-commands` parses it: the top level, the grid's
 * shape, the base trace, every axis, "partition_dims": "all"
 * (sweep_expand_all), the --set values (sweep_check_sets) and every grid
 * point (sweep_check_points); nothing is written and nothing runs.  An
 * accepted sweep then has every run's command line built, as
 * --print-commands prints them.
 *
 * The base trace: the sweep file stands at FUZZ_DIR/SWEEP.json, so a
 * relative "trace" is read from FUZZ_DIR, where the harness writes a few
 * small traces once (atomically: parallel jobs share the directory) before
 * the first input.  The seeds (test/fuzz/corpus-sweep) name them:
 *   t.json     traces/small/tiny2d.json (2D, v3-8, one core per replica)
 *   t3.json    traces/small/tiny3d-p4.json (3D, 4 cores per replica)
 *   t3b.json   the same at global batch 2 (scale_batch to v3-2 leaves
 *              half an example)
 *   f.json     test/fuzz/corpus/frozen-stem.json (frozen layers, 2 cpr)
 *   two.json   two 2D inputs, no input_partition_dims
 *   twon.json  two 2D inputs, the second replicated ([[1,1,1,1],null,null])
 *   mix.json   a 2D and a 1D-shaped input (another rank)
 *   bad.json   a trace the reader refuses
 * The small traces are read from the working directory (the repository
 * root, where make runs the fuzzer).
 *
 * Beyond "no crash, no leak, no UB, no hang" (ASan/UBSan/LSan, -timeout)
 * it enforces the contract (docs/CHECK.md): the result is 0, 2 (bad
 * input) or 4 (out of memory); a refusal is exactly one stderr line
 * "tpuemu: error: FUZZ_DIR/SWEEP.json: JSON.PATH: what" (or a whole-file
 * "empty file"/"not valid JSON" message with no path), an accepted sweep
 * prints none; and an accepted sweep's axes are within the documented
 * limits.  stderr is captured around each call (and sanitizer reports are
 * sent to the real stderr), which also keeps the fuzzer quiet. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sanitizer/common_interface_defs.h>

#include "emu/cli/sweep/sweep.h"

#define FUZZ_DIR "/tmp/tpuemu-fuzz-sweep"
#define FUZZ_NAME FUZZ_DIR "/SWEEP.json"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int real_err = -1; /* the process's stderr */
static int cap_fd = -1;   /* what the parser prints, one input's worth */

static void die(const char *what)
{
    fprintf(stderr, "fuzz_sweep: %s: %s\n", what, strerror(errno));
    exit(1);
}

/* path written whole or not at all (another job may be reading it). */
static void put_file(const char *name, const char *text, size_t len)
{
    char path[256], tmp[300];
    snprintf(path, sizeof path, "%s/%s", FUZZ_DIR, name);
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f || fwrite(text, 1, len, f) != len || fclose(f) != 0)
        die(tmp);
    if (rename(tmp, path) != 0)
        die(path);
}

static void copy_file(const char *name, const char *from)
{
    FILE *f = fopen(from, "rb");
    if (!f)
        die(from);
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    put_file(name, buf, n);
}

/* FUZZ_DIR/name with its "global_batch": 4 made 2. */
static void put_global_batch_2(const char *name)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", FUZZ_DIR, name);
    FILE *f = fopen(path, "rb");
    if (!f)
        die(path);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strstr(buf, "\"global_batch\": 4");
    if (!p) {
        errno = EINVAL;
        die(path);
    }
    p[strlen("\"global_batch\": ")] = '2';
    put_file(name, buf, n);
}

/* Two 2D inputs (test/test_sweep_inputs.c's graph, smaller); pd is the run
 * section's extra text. */
static void two_input(const char *name, const char *shape2, const char *run)
{
    char buf[4096];
    int n = snprintf(
        buf, sizeof buf,
        "{\"format\": \"tpuemu-trace/1\", \"name\": \"two\", \"system\": "
        "\"v3-8\", \"run\": {\"mode\": \"train\", \"global_batch\": 8%s}, "
        "\"graph\": {\"inputs\": [{\"name\": \"rgb\", \"shape\": [12, 10, "
        "3]}, {\"name\": \"aux\", \"shape\": %s}], \"layers\": ["
        "{\"name\": \"a1\", \"op\": \"conv\", \"in\": \"rgb\", \"filters\": "
        "4, \"kernel\": [3, 3]}, "
        "{\"name\": \"g1\", \"op\": \"global_avgpool\", \"in\": \"a1\"}, "
        "{\"name\": \"f2\", \"op\": \"flatten\", \"in\": \"aux\"}, "
        "{\"name\": \"d2\", \"op\": \"dense\", \"in\": \"f2\", \"units\": 4}, "
        "{\"name\": \"s\", \"op\": \"add\", \"in\": [\"g1\", \"d2\"]}, "
        "{\"name\": \"loss\", \"op\": \"loss\", \"in\": \"s\", \"kind\": "
        "\"softmax_xent\"}]}}\n",
        run, shape2);
    put_file(name, buf, (size_t)n);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    if (mkdir(FUZZ_DIR, 0777) != 0 && errno != EEXIST)
        die(FUZZ_DIR);
    copy_file("t.json", "traces/small/tiny2d.json");
    copy_file("t3.json", "traces/small/tiny3d-p4.json");
    copy_file("t3b.json", "traces/small/tiny3d-p4.json");
    put_global_batch_2("t3b.json");
    copy_file("f.json", "test/fuzz/corpus/frozen-stem.json");
    two_input("two.json", "[12, 10, 2]", "");
    two_input("twon.json", "[12, 10, 2]",
              ", \"num_cores_per_replica\": 1, \"input_partition_dims\": "
              "[[1, 1, 1, 1], null, null]");
    two_input("mix.json", "[7, 5]", "");
    const char bad[] = "{\"format\": \"tpuemu-trace/1\", \"name\": \"bad\", "
                       "\"system\": \"v3-8\", \"run\": {\"mode\": \"train\", "
                       "\"global_batch\": 8}, \"graph\": {\"inputs\": [], "
                       "\"layers\": []}}\n";
    put_file("bad.json", bad, sizeof bad - 1);

    FILE *cap = tmpfile();
    real_err = dup(2);
    if (!cap || real_err < 0)
        die("stderr capture");
    cap_fd = dup(fileno(cap));
    fclose(cap);
    if (cap_fd < 0)
        die("stderr capture");
    __sanitizer_set_report_fd((void *)(intptr_t)real_err);
    return 0;
}

/* The parser's stderr, NUL-terminated, into buf. */
static size_t captured(char *buf, size_t cap)
{
    off_t end = lseek(cap_fd, 0, SEEK_CUR);
    size_t n = end > 0 ? (size_t)end : 0;
    if (n >= cap)
        n = cap - 1;
    ssize_t got = pread(cap_fd, buf, n, 0);
    n = got > 0 ? (size_t)got : 0;
    buf[n] = 0;
    return n;
}

static int starts(const char *s, const char *p)
{
    return strncmp(s, p, strlen(p)) == 0;
}

/* One "tpuemu: error: FUZZ_NAME: ..." line naming a JSON path, or a
 * whole-file message; sweep: note lines ("all" drops a split) around it. */
static void check_refusal(int rc, const char *err)
{
    static const char pre[] = "tpuemu: error: " FUZZ_NAME ": ";
    int nerr = 0;
    for (const char *l = err; *l;) {
        const char *nl = strchr(l, '\n');
        if (!nl)
            abort(); /* a line without its end */
        if (starts(l, "tpuemu: error: ")) {
            nerr++;
            if (rc == 2) {
                if (!starts(l, pre))
                    abort(); /* does not name the sweep file */
                const char *what = l + sizeof pre - 1;
                const char *sep = strstr(what, ": ");
                if (!starts(what, "empty file") &&
                    !starts(what, "not valid JSON") &&
                    (!sep || sep == what || sep > nl))
                    abort(); /* no JSON path */
            }
        } else if (!starts(l, "sweep: note: ")) {
            abort(); /* something else printed */
        }
        l = nl + 1;
    }
    if (nerr != 1)
        abort();
}

static void check_accepted(const sweep *s, const char *err)
{
    if (strstr(err, "tpuemu: error: "))
        abort(); /* accepted, yet an error printed */
    if (s->naxes < 1 || s->naxes > SWEEP_MAX_AXES)
        abort();
    long long runs = sweep_count_runs(s);
    if (runs < 1 || runs > SWEEP_MAX_RUNS)
        abort();
    for (int a = 0; a < s->naxes; a++) {
        const sweep_axis *ax = &s->ax[a];
        if (ax->n < 1 || !ax->v || !ax->name[0])
            abort();
        for (int i = 0; i < ax->n; i++) {
            const sweep_val *v = &ax->v[i];
            if (!v->label[0] || !v->arg[0] || sweep_has_ctrl(v->arg))
                abort();
            if (ax->kind == AX_PD && (!v->pd || v->cpr < 1))
                abort();
        }
    }
    sweep *w = (sweep *)s;
    sweep_variant_paths(w, "/nonexistent/out");
    sweep_cmd *c = malloc(sizeof *c);
    if (!c)
        return;
    for (long long i = 0; i < runs; i++) {
        sweep_build_cmd(s, "/bin/tpuemu", "/nonexistent/out", i, c);
        if (c->argc < 4 || c->argc >= SWEEP_MAX_ARGS || c->argv[c->argc])
            abort();
    }
    free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char err[1 << 16];
    sweep s;
    if (ftruncate(cap_fd, 0) != 0 || lseek(cap_fd, 0, SEEK_SET) != 0)
        abort();
    fflush(stderr);
    dup2(cap_fd, 2);
    int rc = sweep_parse_text(&s, FUZZ_NAME, NULL, (const char *)data, size);
    fflush(stderr);
    dup2(real_err, 2);
    captured(err, sizeof err);
    if (rc == 0)
        check_accepted(&s, err);
    else if (rc == 2 || rc == 4)
        check_refusal(rc, err);
    else
        abort();
    sweep_free(&s);
    return 0;
}
