#include "test/harness.h"

#include <dirent.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <png.h>

#include "emu/out/font.h"
#include "emu/report.h"
#include "firmware/lower.h"

extern const th_suite th_suites[];

struct th_ctx {
    const char *suite;
    const char *name; /* open case, or NULL */
    int case_failed;
    int passed, failed;
    int fail_msgs; /* failure lines printed in the open case */
};

static void close_case(th_ctx *t)
{
    if (!t->name)
        return;
    if (t->case_failed) {
        t->failed++;
        printf("FAIL %s: %s\n", t->suite, t->name);
    } else {
        t->passed++;
        printf("ok   %s: %s\n", t->suite, t->name);
    }
    fflush(stdout);
    t->name = NULL;
    t->case_failed = 0;
    t->fail_msgs = 0;
}

void th_case(th_ctx *t, const char *name)
{
    close_case(t);
    t->name = name;
}

static void note_failure(th_ctx *t)
{
    if (!t->name)
        t->name = "(unnamed)";
    t->case_failed = 1;
}

int th_check(th_ctx *t, int ok, const char *expr, const char *file, int line)
{
    if (ok)
        return 1;
    note_failure(t);
    if (t->fail_msgs++ < 10)
        printf("     %s:%d: check failed: %s\n", file, line, expr);
    return 0;
}

void th_failf(th_ctx *t, const char *file, int line, const char *fmt, ...)
{
    note_failure(t);
    if (t->fail_msgs++ >= 10)
        return;
    va_list ap;
    va_start(ap, fmt);
    printf("     %s:%d: ", file, line);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
}

int th_asan(void)
{
    const char *e = getenv("TPUEMU_ASAN");
    return e && *e && strcmp(e, "0") != 0;
}

const char *th_bin(void)
{
    const char *b = getenv("TPUEMU");
    return (b && *b) ? b : "./tpuemu";
}

const char *th_bin_abs(void)
{
    static char abs[4600];
    char cwd[4096];
    if (th_bin()[0] == '/')
        snprintf(abs, sizeof abs, "%s", th_bin());
    else if (getcwd(cwd, sizeof cwd))
        snprintf(abs, sizeof abs, "%s/%s", cwd, th_bin());
    else
        abs[0] = '\0';
    return abs;
}

const char *th_tmpdir(void)
{
    static char dir[256];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "build/test-tmp/%ld", (long)getpid());
        char cmd[320];
        snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
        if (system(cmd) != 0) {
            const char *tmp = getenv("TMPDIR");
            snprintf(dir, sizeof dir, "%s", tmp && *tmp ? tmp : "/tmp");
        }
    }
    return dir;
}

const char *th_tmpdir_abs(void)
{
    static char abs[4400];
    char cwd[4096];
    const char *tmp = th_tmpdir();
    if (tmp[0] == '/' || !getcwd(cwd, sizeof cwd))
        snprintf(abs, sizeof abs, "%s", tmp);
    else
        snprintf(abs, sizeof abs, "%s/%s", cwd, tmp);
    return abs;
}

static void slurp(const char *path, char *buf, size_t cap)
{
    buf[0] = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return;
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = 0;
    fclose(f);
}

int th_run(th_cmd_result *r, const char *fmt, ...)
{
    char cmd[4096], full[4800], outp[300], errp[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    snprintf(outp, sizeof outp, "%s/cmd.out", th_tmpdir());
    snprintf(errp, sizeof errp, "%s/cmd.err", th_tmpdir());
    snprintf(full, sizeof full, "(%s) >%s 2>%s", cmd, outp, errp);
    int st = system(full);
    if (st == -1)
        r->status = -1;
    else if (WIFEXITED(st))
        r->status = WEXITSTATUS(st);
    else
        r->status = -1;
    slurp(outp, r->out, sizeof r->out);
    slurp(errp, r->err, sizeof r->err);
    return r->status;
}

int th_have_numpy(th_cmd_result *r)
{
    th_run(r, "test -x /usr/bin/python3 && /usr/bin/python3 -c 'import numpy'");
    return r->status == 0;
}

/* The live children of this process, from /proc (each /proc/PID/stat is
 * "PID (COMM) STATE PPID ..."): their pids into pids[cap], their count. */
static int live_children(pid_t *pids, int cap)
{
    while (waitpid(-1, NULL, WNOHANG) > 0)
        ;
    DIR *dp = opendir("/proc");
    int n = 0;
    if (!dp)
        return 0;
    for (struct dirent *e; (e = readdir(dp)) != NULL;) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9')
            continue;
        char path[300], buf[512];
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t got = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[got] = 0;
        const char *rp = strrchr(buf, ')');
        char state = 0;
        long ppid = 0;
        if (rp && sscanf(rp + 1, " %c %ld", &state, &ppid) == 2 &&
            ppid == (long)getpid() && state != 'Z' && n < cap)
            pids[n++] = (pid_t)atol(e->d_name);
    }
    closedir(dp);
    return n;
}

int th_children(char *desc, size_t cap)
{
    pid_t pids[64];
    int n = live_children(pids, 64);
    size_t len = 0;
    if (cap)
        desc[0] = 0;
    for (int i = 0; i < n && len + 1 < cap; i++) {
        char path[64], cmd[256];
        snprintf(path, sizeof path, "/proc/%ld/cmdline", (long)pids[i]);
        FILE *f = fopen(path, "rb");
        size_t got = f ? fread(cmd, 1, sizeof cmd - 1, f) : 0;
        if (f)
            fclose(f);
        cmd[got] = 0;
        for (size_t k = 0; k + 1 < got; k++) /* argv's NULs as spaces */
            if (!cmd[k])
                cmd[k] = ' ';
        int w = snprintf(desc + len, cap - len, "pid %ld: %s; ",
                         (long)pids[i], cmd[0] ? cmd : "?");
        len += w > 0 ? (size_t)w : 0;
        if (len >= cap)
            len = cap - 1;
    }
    return n;
}

void th_children_kill(void)
{
    pid_t pids[64];
    int n = live_children(pids, 64);
    for (int i = 0; i < n; i++)
        kill(pids[i], SIGKILL);
    for (int i = 0; i < n; i++)
        waitpid(pids[i], NULL, 0);
}

/* After a suite: a child still running after two seconds fails it. */
static void check_children(th_ctx *t)
{
    char desc[2048];
    for (int i = 0; i < 20 && th_children(desc, sizeof desc); i++)
        nanosleep(&(struct timespec){0, 100000000L}, NULL);
    if (!th_children(desc, sizeof desc))
        return;
    t->failed++;
    printf("FAIL %s: leaves no process running\n", t->suite);
    printf("     still running: %s\n", desc);
    fflush(stdout);
    th_children_kill();
}

int main(int argc, char **argv)
{
    th_ctx t = {0};
    int ran = 0;
    /* Orphans of the suites' shells become the runner's children, so
     * check_children sees a background process a test left running. */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    for (const th_suite *s = th_suites; s->name; s++) {
        if (argc > 1) {
            int want = 0;
            for (int i = 1; i < argc; i++)
                if (strcmp(argv[i], s->name) == 0)
                    want = 1;
            if (!want)
                continue;
        }
        t.suite = s->name;
        s->fn(&t);
        close_case(&t);
        check_children(&t);
        ran++;
    }
    if (argc > 1 && ran == 0) {
        fprintf(stderr, "test_runner: no suite named");
        for (int i = 1; i < argc; i++)
            fprintf(stderr, " %s", argv[i]);
        fprintf(stderr, "; suites:");
        for (const th_suite *s = th_suites; s->name; s++)
            fprintf(stderr, " %s", s->name);
        fprintf(stderr, "\n");
        printf("0 passed, 1 failed\n");
        return 1;
    }
    printf("%d passed, %d failed\n", t.passed, t.failed);
    return t.failed ? 1 : 0;
}

long th_rgb_diff(const unsigned char *a, const unsigned char *b, int w, int x0,
                 int y0, int x1, int y1)
{
    long d = 0;
    for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++)
            d += memcmp(a + 3 * ((size_t)y * w + x),
                        b + 3 * ((size_t)y * w + x), 3) != 0;
    return d;
}

void th_put(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

char *th_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0)
            break;
        if (n + 1 == cap) {
            char *b = realloc(buf, cap * 2);
            if (!b) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = b;
            cap *= 2;
        }
    }
    if (buf && ferror(f)) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = 0;
        if (len)
            *len = n;
    }
    return buf;
}

int th_png_rgb(const char *path, int *w, int *h, unsigned char **rgb)
{
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    *rgb = NULL;
    if (!png_image_begin_read_from_file(&im, path))
        return 0;
    im.format = PNG_FORMAT_RGB;
    *w = (int)im.width;
    *h = (int)im.height;
    *rgb = malloc(PNG_IMAGE_SIZE(im));
    if (!*rgb || !png_image_finish_read(&im, NULL, *rgb, 0, NULL)) {
        free(*rgb);
        *rgb = NULL;
        png_image_free(&im);
        return 0;
    }
    return 1;
}

int th_sim_trace(const char *path, const char *const *keys,
                 const char *const *vals, int n, int functional, emu_result *r,
                 fw_program *prog, tpu_error *e)
{
    graph g;
    if (graph_load(&g, path, e))
        return TPU_ERR_INPUT;
    sim_opts o;
    sim_opts_default(&o);
    o.trace_path = path;
    o.n_sets = n;
    o.set_keys = keys;
    o.set_values = vals;
    o.functional = functional;
    tpu_status rc = sim_run(&g, &o, r, e);
    if (!rc && prog) {
        fw_memory mem;
        rc = sim_lower(&g, &o, 0, prog, &mem, e);
        if (rc)
            emu_result_free(r);
    }
    graph_free(&g);
    return rc;
}

void th_result_make(emu_result *r, const char *trace, const char *system,
                    int cores, int cores_per_replica, int64_t global_batch,
                    const double *cat_even, const double *cat_odd)
{
    memset(r, 0, sizeof *r);
    snprintf(r->trace, sizeof r->trace, "%s", trace);
    snprintf(r->system, sizeof r->system, "%s", system);
    r->gen = 3;
    r->chips = (cores + 1) / 2;
    r->cores = cores;
    r->global_batch = global_batch;
    r->cores_per_replica = cores_per_replica;
    r->replicas = cores / cores_per_replica;
    r->train = 1;
    r->fits = 1;
    r->per_core = calloc((size_t)cores, sizeof *r->per_core);
    if (!r->per_core)
        return;
    for (int i = 0; i < cores; i++) {
        emu_core_result *c = &r->per_core[i];
        const double *cat = (i % 2 && cat_odd) ? cat_odd : cat_even;
        c->core = i;
        c->chip = i / 2;
        c->replica = i / cores_per_replica;
        c->shard = i % cores_per_replica;
        for (int k = 0; k < CAT_COUNT; k++)
            c->breakdown_s[k] = cat[k];
    }
    th_result_retime(r);
}

void th_result_retime(emu_result *r)
{
    r->step_time_s = 0;
    for (int i = 0; i < r->cores; i++) {
        emu_core_result *c = &r->per_core[i];
        c->step_time_s = 0;
        for (int k = 0; k < CAT_COUNT; k++)
            c->step_time_s += c->breakdown_s[k];
        if (c->step_time_s > r->step_time_s)
            r->step_time_s = c->step_time_s;
    }
}

void th_result_overrides(emu_result *r, int n, const char *const kv[][2])
{
    free(r->overrides);
    r->n_overrides = n;
    r->overrides = n ? calloc((size_t)n, sizeof *r->overrides) : NULL;
    for (int i = 0; i < n && r->overrides; i++) {
        snprintf(r->overrides[i].key, sizeof r->overrides[i].key, "%s",
                 kv[i][0]);
        snprintf(r->overrides[i].value, sizeof r->overrides[i].value, "%s",
                 kv[i][1]);
    }
}

void th_result_save(th_ctx *t, const emu_result *r, const char *name,
                    char *path, size_t cap)
{
    tpu_error err = {0};
    snprintf(path, cap, "%s/%s", th_tmpdir(), name);
    TH_CHECKF(t, report_write(r, path, &err) == TPU_OK, "%s", err.msg);
}

int th_text_at(const unsigned char *rgb, int w, int h, int x, int y,
               const char *s, uint32_t col)
{
    int tw = font_text_width(s, 1);
    if (tw <= 0 || x < 0 || y < 0 || x + tw > w || y + FONT_H > h)
        return 0;
    unsigned char *m = calloc((size_t)tw * FONT_H * 3, 1);
    if (!m)
        return 0;
    font_draw_rgb(m, tw, FONT_H, 0, 0, s, 1, 0xFFFFFF);
    int ok = 1;
    for (int yy = 0; yy < FONT_H && ok; yy++)
        for (int xx = 0; xx < tw && ok; xx++) {
            const unsigned char *q = rgb + 3 * ((size_t)(y + yy) * w + x + xx);
            uint32_t px = (uint32_t)q[0] << 16 | (uint32_t)q[1] << 8 | q[2];
            ok = (m[3 * (yy * tw + xx)] != 0) == (px == col);
        }
    free(m);
    return ok;
}

unsigned char *th_view_shot(th_ctx *t, const char *args, const char *name,
                            int *w, int *h)
{
    char png[400];
    th_cmd_result *c = malloc(sizeof *c);
    unsigned char *rgb = NULL;
    if (!c)
        return NULL;
    snprintf(png, sizeof png, "%s/%s", th_tmpdir(), name);
    th_run(c,
           "env -u DISPLAY -u WAYLAND_DISPLAY -u SDL_VIDEODRIVER %s view %s "
           "--screenshot %s",
           th_bin(), args, png);
    if (TH_CHECKF(t, c->status == 0, "view %s: status %d: %s", args,
                  c->status, c->err) &&
        !th_png_rgb(png, w, h, &rgb))
        rgb = NULL;
    free(c);
    return rgb;
}

void th_result_whatif(th_ctx *t, const char *name, char *path, size_t cap,
                      const char *const kv[][2], int n, const char *freeze)
{
    emu_result r;
    const double cat[CAT_COUNT] = {[CAT_MXU] = 1e-3};
    th_result_make(&r, "flat", "v3-8", 8, 1, 8, cat, NULL);
    th_result_overrides(&r, n, kv);
    snprintf(r.freeze, sizeof r.freeze, "%s", freeze ? freeze : "");
    th_result_save(t, &r, name, path, cap);
    emu_result_free(&r);
}

int th_terminal_safe(const char *s)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; u[i]; i++) {
        if ((u[i] < 0x20 && u[i] != '\n') || u[i] == 0x7f)
            return 0;
        if (u[i] == 0xc2 && u[i + 1] >= 0x80 && u[i + 1] <= 0x9f)
            return 0;
        if (u[i] == 0xe2 && u[i + 1] == 0x80 && u[i + 2] >= 0xa8 &&
            u[i + 2] <= 0xae)
            return 0;
        if (u[i] == 0xe2 && u[i + 1] == 0x81 && u[i + 2] >= 0xa6 &&
            u[i + 2] <= 0xa9)
            return 0;
    }
    return 1;
}

int th_fit_notes(const char *s)
{
    static const char fits[] = "tpuemu: note: fits on ";
    static const char none[] = "tpuemu: note: no split of ";
    int n = 0;
    for (const char *ln = s; *ln;) {
        const char *nl = strchr(ln, '\n');
        if (!nl)
            return -1;
        int skipped = 0, total = 0, used = 0;
        if (strncmp(ln, fits, sizeof fits - 1) == 0 &&
            strstr(ln, " with input_partition_dims [") != NULL &&
            strstr(ln, " with input_partition_dims [") < nl)
            n++;
        else if (strncmp(ln, none, sizeof none - 1) != 0 &&
                 !(sscanf(ln, "tpuemu: note: %d of %d candidates not tried%n",
                          &skipped, &total, &used) == 2 &&
                   used > 0 && skipped > 0 && skipped <= total))
            return -1;
        ln = nl + 1;
    }
    return n;
}

void th_sweep_text(char *buf, size_t cap, const char *trace,
                   const char *rest)
{
    snprintf(buf, cap,
             "{\"format\": \"tpuemu-sweep/1\", \"name\": \"sw\", "
             "\"trace\": \"%s\", %s}\n",
             trace, rest);
}

void th_put_sweep(char *path, size_t cap, const char *dir, const char *name,
                  const char *rest)
{
    char text[2048], cwd[1024];
    if (!getcwd(cwd, sizeof cwd))
        snprintf(cwd, sizeof cwd, ".");
    snprintf(text, sizeof text,
             "{\"format\": \"tpuemu-sweep/1\", \"name\": \"%s\", "
             "\"trace\": \"%s/traces/small/tiny2d.json\", %s}\n",
             name, cwd, rest);
    snprintf(path, cap, "%s/%s.json", dir, name);
    th_put(path, text);
}
