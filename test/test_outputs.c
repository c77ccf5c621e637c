/* Output files (emu/outfile.h and every writer through it, then the CLI):
 * devices, FIFOs and directories are refused and left alone, a symbolic
 * link's target is replaced and the link kept, a 255-byte name works, an
 * output naming the input or another output is refused, several outputs
 * are all-or-nothing, and every failure is one `tpuemu: error:` line with
 * exit status 2.  Also the small CLI consistency fixes of the same tester
 * report: no-argument commands, --batch's limit, --set's number syntax and
 * its exact range bounds.
 *
 * Only FIFOs, directories and sockets made here are used as "special"
 * targets: a regression must not be able to replace /dev/null. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <signal.h>
#include <math.h>

#include "emu/out/chart.h"
#include "emu/out/chrome_trace.h"
#include "emu/out/npy.h"
#include "emu/out/outfile.h"
#include "emu/report.h"
#include "test/harness.h"
#include "emu/rfile.h"

static char dir[512];

static void path_in(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "%s/%s", dir, name);
}

static int is_fifo(const char *p)
{
    struct stat st;
    return lstat(p, &st) == 0 && S_ISFIFO(st.st_mode);
}

static int is_reg(const char *p)
{
    struct stat st;
    return lstat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static int exists(const char *p)
{
    struct stat st;
    return lstat(p, &st) == 0;
}

/* Files in d whose name starts with ".tpuemu." (left-over temporaries). */
static int temps_in(const char *d)
{
    DIR *h = opendir(d);
    int n = 0;
    if (!h)
        return -1;
    struct dirent *e;
    while ((e = readdir(h)))
        if (strncmp(e->d_name, ".tpuemu.", 8) == 0)
            n++;
    closedir(h);
    return n;
}

static long read_file(const char *p, char *buf, size_t cap)
{
    FILE *f = fopen(p, "rb");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = 0;
    fclose(f);
    return (long)n;
}

static void write_file(const char *p, const char *text)
{
    FILE *f = fopen(p, "wb");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static int lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* Exactly one stderr line, and it is an error line. */
static int one_error_line(const th_cmd_result *c)
{
    return lines(c->err) == 1 && strncmp(c->err, "tpuemu: error: ", 15) == 0;
}

/* Exit 3's stderr: the error line, then only the notes of what would fit;
 * the count of `fits on` lines, or -1 when it is not of that shape. */
static int error_then_fit_notes(const th_cmd_result *c)
{
    const char *nl = strchr(c->err, '\n');
    if (strncmp(c->err, "tpuemu: error: ", 15) != 0 || !nl)
        return -1;
    return th_fit_notes(nl + 1);
}

static void small_result(emu_result *r)
{
    memset(r, 0, sizeof *r);
    snprintf(r->trace, sizeof r->trace, "t");
    snprintf(r->system, sizeof r->system, "v3-8");
    r->gen = 3;
    r->chips = 1;
    r->cores = 2;
    r->global_batch = 2;
    r->cores_per_replica = 1;
    r->replicas = 2;
    r->fits = 1;
    r->per_core = calloc(2, sizeof *r->per_core);
    for (int i = 0; r->per_core && i < 2; i++) {
        r->per_core[i].core = i;
        r->per_core[i].breakdown_s[CAT_MXU] = 0.001;
        r->per_core[i].step_time_s = 0.001;
    }
    r->step_time_s = 0.001;
}

static void unit_cases(th_ctx *t)
{
    char p[1024], q[1024], buf[4096];
    tpu_error err = {0};

    th_case(t, "outfile: a new file is written whole, 0644, no temporary left");
    path_in(p, sizeof p, "new.txt");
    TH_CHECKF(t, outfile_write(p, "hello\n", 6, &err) == TPU_OK, "%s",
              err.msg);
    TH_CHECK(t, read_file(p, buf, sizeof buf) == 6 &&
                    strcmp(buf, "hello\n") == 0);
    struct stat st;
    TH_CHECK(t, stat(p, &st) == 0 && (st.st_mode & 0777) == 0644);
    TH_CHECK(t, temps_in(dir) == 0);

    th_case(t, "outfile: a replaced file keeps its permission bits");
    chmod(p, 0600);
    TH_CHECKF(t, outfile_write(p, "again\n", 6, &err) == TPU_OK, "%s",
              err.msg);
    TH_CHECK(t, stat(p, &st) == 0 && (st.st_mode & 0777) == 0600);
    TH_CHECK(t, read_file(p, buf, sizeof buf) == 6 &&
                    strcmp(buf, "again\n") == 0);

    th_case(t, "outfile: a FIFO is refused (exit 2) and stays a FIFO");
    path_in(p, sizeof p, "fifo");
    unlink(p);
    TH_CHECK(t, mkfifo(p, 0644) == 0);
    err.msg[0] = 0;
    TH_CHECK(t, outfile_write(p, "x", 1, &err) == TPU_ERR_INPUT);
    TH_CHECKF(t, strstr(err.msg, "not a regular file") != NULL, "%s",
              err.msg);
    TH_CHECK(t, is_fifo(p));
    TH_CHECK(t, outfile_check(p, &err) == TPU_ERR_INPUT && is_fifo(p));
    TH_CHECK(t, temps_in(dir) == 0);

    th_case(t, "outfile: a socket is refused and stays a socket");
    path_in(p, sizeof p, "sock");
    unlink(p);
    int sfd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    int bound = sfd >= 0 && strlen(p) < sizeof sa.sun_path;
    if (bound) {
        memcpy(sa.sun_path, p, strlen(p) + 1);
        bound = bind(sfd, (struct sockaddr *)&sa, sizeof sa) == 0;
    }
    if (bound) {
        TH_CHECK(t, outfile_write(p, "x", 1, &err) == TPU_ERR_INPUT);
        TH_CHECK(t, lstat(p, &st) == 0 && S_ISSOCK(st.st_mode));
    }
    if (sfd >= 0)
        close(sfd);
    unlink(p);

    th_case(t, "outfile: the null device is refused by the check");
    /* outfile_check never renames, so even a regression cannot replace
     * the device here. */
    TH_CHECK(t, outfile_check("/dev/null", &err) == TPU_ERR_INPUT);
    TH_CHECK(t, stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode));

    th_case(t, "outfile: directories, a trailing slash, a missing "
               "directory and an empty path are refused");
    path_in(p, sizeof p, "adir");
    mkdir(p, 0755);
    TH_CHECK(t, outfile_write(p, "x", 1, &err) == TPU_ERR_INPUT);
    TH_CHECKF(t, strstr(err.msg, "is a directory") != NULL, "%s", err.msg);
    path_in(p, sizeof p, "adir/");
    TH_CHECK(t, outfile_write(p, "x", 1, &err) == TPU_ERR_INPUT);
    path_in(p, sizeof p, "nodir/x.json");
    TH_CHECK(t, outfile_write(p, "x", 1, &err) == TPU_ERR_INPUT);
    TH_CHECK(t, outfile_write("", "x", 1, &err) == TPU_ERR_INPUT);
    path_in(p, sizeof p, "new.txt/x.json"); /* a file as a directory */
    TH_CHECK(t, outfile_write(p, "x", 1, &err) == TPU_ERR_INPUT);
    path_in(p, sizeof p, "adir");
    TH_CHECK(t, temps_in(dir) == 0 && temps_in(p) == 0);

    th_case(t, "outfile: a symbolic link's target is replaced, the link "
               "kept; a dangling link is refused");
    path_in(p, sizeof p, "target.txt");
    path_in(q, sizeof q, "link.txt");
    write_file(p, "old");
    unlink(q);
    TH_CHECK(t, symlink("target.txt", q) == 0);
    TH_CHECKF(t, outfile_write(q, "new", 3, &err) == TPU_OK, "%s", err.msg);
    TH_CHECK(t, lstat(q, &st) == 0 && S_ISLNK(st.st_mode));
    TH_CHECK(t, read_file(p, buf, sizeof buf) == 3 && strcmp(buf, "new") == 0);
    path_in(q, sizeof q, "dangling.txt");
    unlink(q);
    TH_CHECK(t, symlink("nowhere/x.txt", q) == 0);
    TH_CHECK(t, outfile_write(q, "x", 1, &err) == TPU_ERR_INPUT);
    TH_CHECK(t, lstat(q, &st) == 0 && S_ISLNK(st.st_mode));

    th_case(t, "outfile: a 255-byte file name works (short temporary)");
    char name[256];
    memset(name, 'a', 255);
    name[255] = 0;
    path_in(p, sizeof p, name);
    TH_CHECKF(t, outfile_write(p, "x", 1, &err) == TPU_OK, "%s", err.msg);
    TH_CHECK(t, is_reg(p));
    unlink(p);

    th_case(t, "outfile_same: paths, ./ forms, links, missing files");
    path_in(p, sizeof p, "target.txt");
    path_in(q, sizeof q, "link.txt");
    TH_CHECK(t, outfile_same(p, q));
    snprintf(q, sizeof q, "%s/./adir/../target.txt", dir);
    TH_CHECK(t, outfile_same(p, q));
    path_in(q, sizeof q, "hard.txt");
    unlink(q);
    if (link(p, q) == 0)
        TH_CHECK(t, outfile_same(p, q));
    path_in(q, sizeof q, "new.txt");
    TH_CHECK(t, !outfile_same(p, q));
    path_in(p, sizeof p, "missing.txt");
    snprintf(q, sizeof q, "%s/adir/../missing.txt", dir);
    TH_CHECK(t, outfile_same(p, q));
    path_in(q, sizeof q, "missing2.txt");
    TH_CHECK(t, !outfile_same(p, q));

    th_case(t, "outfile: staged outputs appear only on commit; discard "
               "leaves nothing");
    outfile os[2];
    path_in(p, sizeof p, "s1.txt");
    path_in(q, sizeof q, "s2.txt");
    unlink(p);
    unlink(q);
    TH_CHECK(t, outfile_open(&os[0], p, &err) == TPU_OK);
    TH_CHECK(t, outfile_open(&os[1], q, &err) == TPU_OK);
    fputs("one", os[0].f);
    fputs("two", os[1].f);
    TH_CHECK(t, !exists(p) && !exists(q) && temps_in(dir) == 2);
    outfile_discard(&os[0]);
    outfile_discard(&os[1]);
    TH_CHECK(t, !exists(p) && !exists(q) && temps_in(dir) == 0);
    TH_CHECK(t, outfile_open(&os[0], p, &err) == TPU_OK);
    TH_CHECK(t, outfile_open(&os[1], q, &err) == TPU_OK);
    fputs("one", os[0].f);
    fputs("two", os[1].f);
    TH_CHECK(t, outfile_commit_all(os, 2, &err) == TPU_OK);
    TH_CHECK(t, read_file(p, buf, sizeof buf) == 3 && strcmp(buf, "one") == 0);
    TH_CHECK(t, read_file(q, buf, sizeof buf) == 3 && strcmp(buf, "two") == 0);
    TH_CHECK(t, temps_in(dir) == 0);

    th_case(t, "outfile: a failed commit takes back the new outputs");
    char sub[900], moved[900];
    path_in(sub, sizeof sub, "vanish");
    path_in(moved, sizeof moved, "vanished");
    mkdir(sub, 0755);
    path_in(p, sizeof p, "first.txt");
    snprintf(q, sizeof q, "%s/second.txt", sub);
    unlink(p);
    TH_CHECK(t, outfile_open(&os[0], p, &err) == TPU_OK);
    TH_CHECK(t, outfile_open(&os[1], q, &err) == TPU_OK);
    fputs("one", os[0].f);
    fputs("two", os[1].f);
    /* The second output's directory goes away before the commit: its
     * rename fails, and the first (new) output must not stay behind. */
    TH_CHECK(t, rename(sub, moved) == 0);
    TH_CHECK(t, outfile_commit_all(os, 2, &err) == TPU_ERR_INPUT);
    TH_CHECK(t, !exists(p) && temps_in(dir) == 0);

    th_case(t, "every writer (report, chrome trace, PNG, npy) refuses a "
               "FIFO through the one implementation");
    emu_result r;
    small_result(&r);
    path_in(p, sizeof p, "fifo");
    TH_CHECK(t, report_write(&r, p, &err) == TPU_ERR_INPUT && is_fifo(p));
    TH_CHECK(t, chrome_trace_write(&r, p, &err) == TPU_ERR_INPUT &&
                    is_fifo(p));
    TH_CHECK(t, chart_breakdown_png(&r, p, &err) == TPU_ERR_INPUT &&
                    is_fifo(p));
    double xs[2] = {0, 1}, ys[2] = {1, 2};
    chart_series s = {"s", xs, ys, 2};
    TH_CHECK(t, chart_lines_png(p, "t", "x", "y", &s, 1, &err) ==
                    TPU_ERR_INPUT && is_fifo(p));
    float v[2] = {1, 2};
    int64_t shape[1] = {2};
    TH_CHECK(t, npy_write_f32(p, v, 1, shape, &err) == TPU_ERR_INPUT &&
                    is_fifo(p));
    TH_CHECK(t, tpu_write_atomic(p, "x", 1, &err) == TPU_ERR_INPUT &&
                    is_fifo(p));
    path_in(q, sizeof q, "ok.png");
    TH_CHECKF(t, chart_breakdown_png(&r, q, &err) == TPU_OK, "%s", err.msg);
    TH_CHECK(t, read_file(q, buf, sizeof buf) > 8 &&
                    memcmp(buf, "\x89PNG", 4) == 0);
    emu_result_free(&r);
    TH_CHECK(t, temps_in(dir) == 0);
}

static void cli_cases(th_ctx *t)
{
    th_cmd_result *c = malloc(sizeof *c);
    if (!c)
        return;
    const char *bin = th_bin();
    char trace[1024], buf[8192], before[8192];
    path_in(trace, sizeof trace, "trace.json");
    snprintf(buf, sizeof buf, "cp traces/small/tiny2d.json '%s'", trace);
    TH_CHECK(t, system(buf) == 0);
    long tlen = read_file(trace, before, sizeof before);

    th_case(t, "run --report/--png/--chrome-trace FIFO: exit 2, one line, "
               "FIFO kept");
    static const char *flags[] = {"--report", "--png", "--chrome-trace"};
    for (int i = 0; i < 3; i++) {
        th_run(c, "%s run '%s' --quiet %s '%s/fifo'", bin, trace, flags[i],
               dir);
        TH_CHECKF(t, c->status == 2 && one_error_line(c),
                  "%s: status %d, stderr %s", flags[i], c->status, c->err);
        TH_CHECK(t, strstr(c->err, "cannot create") != NULL);
    }
    char p[1024];
    path_in(p, sizeof p, "fifo");
    TH_CHECK(t, is_fifo(p));

    th_case(t, "run: an output naming the input trace is refused, the "
               "trace untouched");
    static const char *all[] = {"--report", "--png", "--chrome-trace"};
    for (int i = 0; i < 3; i++) {
        th_run(c, "%s run '%s' --quiet %s '%s/./trace.json'", bin, trace,
               all[i], dir);
        TH_CHECKF(t, c->status == 2 && one_error_line(c) &&
                         strstr(c->err, "input trace"),
                  "%s: status %d, stderr %s", all[i], c->status, c->err);
    }
    th_run(c, "%s run '%s' --quiet --functional --output-npy '%s'", bin,
           trace, trace);
    TH_CHECK(t, c->status == 2 && one_error_line(c));
    TH_CHECK(t, read_file(trace, buf, sizeof buf) == tlen &&
                    memcmp(buf, before, (size_t)tlen) == 0);

    /* A run that failed to protect the trace must not make later cases
     * pass on a broken input. */
    snprintf(buf, sizeof buf, "cp traces/small/tiny2d.json '%s'", trace);
    TH_CHECK(t, system(buf) == 0);

    th_case(t, "run: two outputs naming one file are refused up front");
    th_run(c, "%s run '%s' --quiet --report '%s/same.json' "
              "--chrome-trace '%s/adir/../same.json'",
           bin, trace, dir, dir);
    TH_CHECKF(t, c->status == 2 && one_error_line(c) &&
                     strstr(c->err, "same file"),
              "status %d, stderr %s", c->status, c->err);
    path_in(p, sizeof p, "same.json");
    TH_CHECK(t, !exists(p));

    th_case(t, "run: a later bad output leaves no earlier output behind");
    th_run(c, "%s run '%s' --quiet --report '%s/r.json' --chrome-trace "
              "'%s/t.json' --png '%s/adir'",
           bin, trace, dir, dir, dir);
    TH_CHECKF(t, c->status == 2 && one_error_line(c) &&
                     strstr(c->err, "adir: cannot create: is a directory"),
              "status %d, %s", c->status, c->err);
    TH_CHECK(t, c->out[0] == 0); /* refused before the simulation */
    char r1[1024], t1[1024], p1[1024];
    path_in(r1, sizeof r1, "r.json");
    path_in(t1, sizeof t1, "t.json");
    path_in(p1, sizeof p1, "p.png");
    TH_CHECK(t, !exists(r1) && !exists(t1) && temps_in(dir) == 0);
    th_run(c, "%s run '%s' --quiet --report '%s' --chrome-trace '%s' "
              "--png '%s/nodir/p.png'",
           bin, trace, r1, t1, dir);
    TH_CHECK(t, c->status == 2 && !exists(r1) && !exists(t1));

    th_case(t, "run: good outputs are all written, no temporary left");
    th_run(c, "%s run '%s' --quiet --report '%s' --chrome-trace '%s' "
              "--png '%s'",
           bin, trace, r1, t1, p1);
    TH_CHECKF(t, c->status == 0 && c->err[0] == 0, "status %d, %s",
              c->status, c->err);
    TH_CHECK(t, is_reg(r1) && is_reg(t1) && is_reg(p1));
    TH_CHECK(t, read_file(r1, buf, sizeof buf) > 0 &&
                    strstr(buf, "tpuemu-report/1"));
    TH_CHECK(t, temps_in(dir) == 0);

    th_case(t, "run: an output with a newline in its name is still one "
               "error line");
    th_run(c, "%s run '%s' --quiet --report '%s/nodir/a\nb.json'", bin,
           trace, dir);
    TH_CHECKF(t, c->status == 2 && one_error_line(c), "status %d, %s",
              c->status, c->err);

    th_case(t, "run that does not fit: a good --report is written "
               "(exit 3, one error line, then the splits that fit); a bad "
               "one is refused up front (exit 2, one line)");
    char nf[1024];
    path_in(nf, sizeof nf, "nofit.json");
    th_run(c, "%s run '%s' --quiet --set hbm.capacity_gib=0.0009765625 "
              "--report '%s'",
           bin, trace, nf);
    /* 2 examples on one 1 MiB core: a split over 2 cores fits on v3-32 */
    TH_CHECKF(t, c->status == 3 && error_then_fit_notes(c) >= 1,
              "status %d, %s", c->status, c->err);
    TH_CHECK(t, read_file(nf, buf, sizeof buf) > 0 &&
                    strstr(buf, "\"fits\": false"));
    th_run(c, "%s run '%s' --quiet --set hbm.capacity_gib=0.0009765625 "
              "--report '%s/nodir/x.json'",
           bin, trace, dir);
    TH_CHECKF(t, c->status == 2 && one_error_line(c), "status %d, %s",
              c->status, c->err);

    th_case(t, "validate: empty --dir and a bad --report are one error "
               "line, exit 2");
    char ed[1024];
    path_in(ed, sizeof ed, "emptydir");
    mkdir(ed, 0755);
    th_run(c, "%s validate --dir '%s'", bin, ed);
    TH_CHECKF(t, c->status == 2 && one_error_line(c), "status %d, %s",
              c->status, c->err);
    th_run(c, "%s validate --dir '%s' --report '%s/fifo'", bin, dir, dir);
    TH_CHECKF(t, c->status == 2 && one_error_line(c) && c->out[0] == 0,
              "status %d, %s", c->status, c->err);
    th_run(c, "%s validate --dir '%s' --report '%s'", bin, dir, trace);
    TH_CHECKF(t, c->status == 2 && one_error_line(c) && c->out[0] == 0 &&
                     strstr(c->err, "input trace"),
              "status %d, %s", c->status, c->err);
    TH_CHECK(t, read_file(trace, buf, sizeof buf) == tlen &&
                    memcmp(buf, before, (size_t)tlen) == 0);

    th_case(t, "no-argument commands print one error line, exit 2");
    static const char *cmds[] = {"", "run", "lower", "probe"};
    for (int i = 0; i < 4; i++) {
        th_run(c, "%s %s", bin, cmds[i]);
        TH_CHECKF(t, c->status == 2 && one_error_line(c) &&
                         strstr(c->err, "--help"),
                  "'%s': status %d, %s", cmds[i], c->status, c->err);
    }

    th_case(t, "--batch beyond the trace limit is bad usage (exit 2)");
    static const char *batches[] = {"1048577", "1048584", "1099511627776"};
    for (int i = 0; i < 3; i++) {
        th_run(c, "%s run '%s' --quiet --batch %s", bin, trace, batches[i]);
        TH_CHECKF(t, c->status == 2 && one_error_line(c), "%s: %d %s",
                  batches[i], c->status, c->err);
        th_run(c, "%s lower '%s' --batch %s", bin, trace, batches[i]);
        TH_CHECKF(t, c->status == 2 && one_error_line(c), "lower %s: %d %s",
                  batches[i], c->status, c->err);
    }

    th_case(t, "--set takes plain decimal numbers only; bounds printed "
               "exactly");
    static const char *bad[] = {"mxu.rows=0x10", "'mxu.rows= 16'",
                                "mxu.rows=inf", "mxu.rows=nan",
                                "hbm.bandwidth_gbs=0X1p10"};
    for (int i = 0; i < 5; i++) {
        th_run(c, "%s run '%s' --quiet --set %s", bin, trace, bad[i]);
        TH_CHECKF(t, c->status == 2 && one_error_line(c) &&
                         strstr(c->err, "expected a decimal number"),
                  "%s: %d %s", bad[i], c->status, c->err);
    }
    th_run(c, "%s run '%s' --quiet --set mxu.rows=1.6e1", bin, trace);
    TH_CHECKF(t, c->status == 0, "1.6e1: %d %s", c->status, c->err);
    th_run(c, "%s run '%s' --quiet --set hbm.capacity_gib=0.000976562", bin,
           trace);
    TH_CHECKF(t, c->status == 2 && strstr(c->err, "[0.0009765625,"),
              "%d %s", c->status, c->err);
    th_run(c, "%s run '%s' --quiet --lr 0x1", bin, trace);
    TH_CHECK(t, c->status == 2 && one_error_line(c));

    th_case(t, "help texts list every exit status");
    static const char *helps[] = {"run", "lower", "probe", "mxu",
                                  "validate"};
    for (int i = 0; i < 5; i++) {
        th_run(c, "%s %s --help", bin, helps[i]);
        TH_CHECKF(t, c->status == 0 && strstr(c->out, "4 out of host memory"),
                  "%s --help", helps[i]);
    }
    th_run(c, "%s run --help", bin);
    TH_CHECK(t, strstr(c->out, "3 does not fit"));
    free(c);
}

#define TINY "traces/small/tiny2d.json"

static void stdout_cases(th_ctx *t)
{
    th_cmd_result *c = malloc(sizeof *c);
    if (!c)
        return;
    th_case(t, "stdout on a full disk: exit 2, standard output named");
    th_run(c, "%s mxu --m 8 --k 8 --n 8 > /dev/full", th_bin());
    TH_CHECKF(t, c->status == 2, "status %d, stderr %s", c->status, c->err);
    TH_CHECKF(t, strstr(c->err, "standard output: No space left") != NULL,
              "stderr: %s", c->err);

    th_case(t, "stdout closed: exit 2; a failed command keeps its status");
    th_run(c, "%s lower %s >&-", th_bin(), TINY);
    TH_CHECKF(t, c->status == 2 && strstr(c->err, "standard output"),
              "status %d, stderr %s", c->status, c->err);
    th_run(c, "%s lower traces/retinanet-2560-v3-8.json > /dev/full",
           th_bin());
    TH_CHECKF(t, c->status == 3, "does not fit: status %d, stderr %s",
              c->status, c->err);

    th_case(t, "stdout fine: exit 0, no message");
    th_run(c, "%s mxu --m 8 --k 8 --n 8 > /dev/null", th_bin());
    TH_CHECKF(t, c->status == 0 && c->err[0] == 0, "status %d, stderr %s",
              c->status, c->err);
    free(c);
}

/* What the handler saw when the held SIGTERM arrived. */
static volatile sig_atomic_t got_term, outs_whole;
static char sig_a[512], sig_b[512];

static void on_term(int sig)
{
    (void)sig;
    got_term++;
    outs_whole = access(sig_a, F_OK) == 0 && access(sig_b, F_OK) == 0;
}

/* Entries of sig_dir whose names start with ".tpuemu." (temporaries). */
static int temporaries(const char *sig_dir)
{
    DIR *dp = opendir(sig_dir);
    int n = 0;
    if (!dp)
        return -1;
    for (struct dirent *e; (e = readdir(dp)) != NULL;)
        if (strncmp(e->d_name, ".tpuemu.", 8) == 0)
            n++;
    closedir(dp);
    return n;
}

static void signal_cases(th_ctx *t)
{
    char sig_dir[256];
    snprintf(sig_dir, sizeof sig_dir, "%s/outputs-sig", th_tmpdir());
    char cmd[600];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", sig_dir);
    if (system(cmd) != 0)
        return;
    snprintf(sig_a, sizeof sig_a, "%s/a.txt", sig_dir);
    snprintf(sig_b, sizeof sig_b, "%s/b.txt", sig_dir);
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, &old);

    th_case(t, "SIGTERM during a write is held until every output is in place");
    got_term = outs_whole = 0;
    outfile os[2];
    tpu_error err = {0};
    int ok = outfile_open(&os[0], sig_a, &err) == TPU_OK &&
             outfile_open(&os[1], sig_b, &err) == TPU_OK;
    TH_CHECKF(t, ok, "open: %s", err.msg);
    if (ok) {
        fputs("a\n", os[0].f);
        raise(SIGTERM);
        fputs("b\n", os[1].f);
        TH_CHECKF(t, got_term == 0, "delivered while temporaries exist");
        TH_CHECKF(t, temporaries(sig_dir) == 2, "%d temporaries staged",
                  temporaries(sig_dir));
        TH_CHECK(t, outfile_commit_all(os, 2, &err) == TPU_OK);
        TH_CHECKF(t, got_term == 1 && outs_whole,
                  "delivered %d times, outputs whole %d", (int)got_term,
                  (int)outs_whole);
        TH_CHECKF(t, temporaries(sig_dir) == 0, "%d temporaries left",
                  temporaries(sig_dir));
    }

    th_case(t, "SIGTERM during a failed write: delivered after the discard");
    got_term = 0;
    remove(sig_a);
    remove(sig_b);
    ok = outfile_open(&os[0], sig_a, &err) == TPU_OK &&
         outfile_open(&os[1], sig_b, &err) == TPU_OK;
    if (TH_CHECKF(t, ok, "open: %s", err.msg)) {
        raise(SIGTERM);
        TH_CHECK(t, got_term == 0);
        outfile_discard_all(os, 2);
        TH_CHECKF(t, got_term == 1, "delivered %d times", (int)got_term);
        TH_CHECKF(t, temporaries(sig_dir) == 0 && access(sig_a, F_OK) != 0,
                  "%d temporaries left", temporaries(sig_dir));
    }

    th_case(t, "a refused output path holds nothing");
    got_term = 0;
    snprintf(cmd, sizeof cmd, "%s/no/such/dir/x", sig_dir);
    TH_CHECK(t, outfile_open(&os[0], cmd, &err) != TPU_OK);
    raise(SIGTERM);
    TH_CHECKF(t, got_term == 1, "delivered %d times", (int)got_term);
    sigaction(SIGTERM, &old, NULL);
}

static void outfile_cases(th_ctx *t)
{
    th_cmd_result *c = malloc(sizeof *c);
    if (!c)
        return;
    th_case(t, "--report /dev/stdout into a pipe: refused, saying it is a "
               "pipe and what to do");
    th_run(c, "%s run traces/small/tiny2d.json --report /dev/stdout --quiet "
              "2>&1 | cat",
           th_bin());
    TH_CHECKF(t, strstr(c->out, "/dev/stdout: cannot create: is a pipe "
                                "(standard output into a pipe?)") &&
                     strstr(c->out, "give a file path") &&
                     !strstr(c->out, "does not resolve"),
              "out: %s", c->out);
    free(c);

    th_case(t, "outfile: a pipe by its /proc/self/fd link (a process "
               "substitution) is named as one");
    int fds[2];
    if (pipe(fds) == 0) {
        char p[64];
        tpu_error err = {0};
        snprintf(p, sizeof p, "/proc/self/fd/%d", fds[1]);
        TH_CHECK(t, outfile_check(p, &err) == TPU_ERR_INPUT);
        TH_CHECKF(t, strstr(err.msg, "is a pipe (a process substitution") &&
                         strstr(err.msg, "renamed"),
                  "%s", err.msg);
        close(fds[0]);
        close(fds[1]);
    }

    th_case(t, "rfile: a socket behind a /proc/self/fd link (stdin from a "
               "socket) is named as one, not 'No such device or address'");
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0) {
        char p[64], *text = NULL;
        size_t len = 0;
        tpu_error err = {0};
        snprintf(p, sizeof p, "/proc/self/fd/%d", sv[0]);
        TH_CHECK(t, rfile_read(p, 1 << 20, 0.1, &text, &len, &err) ==
                        TPU_ERR_INPUT);
        TH_CHECKF(t, strstr(err.msg, "a socket, not a file") &&
                         !strstr(err.msg, "No such device"),
                  "%s", err.msg);
        free(text);
        close(sv[0]);
        close(sv[1]);
    }
}

/* '-' is standard input as a trace; as an output it is refused, not
 * created as a file named '-'. */
static void dash_cases(th_ctx *t)
{
    static th_cmd_result c;
    th_case(t, "'-' reads the trace from standard input; as an output it is "
               "refused and no file named '-' appears");
    th_run(&c, "%s run - < traces/small/tiny2d.json | tail -1", th_bin());
    TH_CHECKF(t, c.status == 0 && strstr(c.out, "step time"), "%d %s%s",
              c.status, c.out, c.err);
    th_run(&c, "cp traces/small/tiny2d.json %s/p4.json && cd %s && %s run "
               "p4.json --report - --quiet; s=$?; test ! -e ./- && exit $s",
           th_tmpdir(), th_tmpdir(), th_bin_abs());
    TH_CHECKF(t, c.status == 2 && strstr(c.err, "'-' (standard output) is "
                                                "not an output"),
              "%d %s", c.status, c.err);
}

void th_suite_outputs(th_ctx *t)
{
    snprintf(dir, sizeof dir, "%s/outputs", th_tmpdir());
    mkdir(dir, 0755);
    unit_cases(t);
    cli_cases(t);
    stdout_cases(t);
    signal_cases(t);
    outfile_cases(t);
    dash_cases(t);
}
