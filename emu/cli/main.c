/* tpuemu — command dispatch.  Each command lives in emu/cli/NAME.c. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/cli/cli.h"

typedef struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"run", cli_run, "simulate one training or inference step of a trace"},
    {"mxu", cli_mxu, "one matrix product on one MXU (PE or fast model)"},
    {"lower", cli_lower, "print one core's firmware program"},
    {"view", cli_view, "open the SDL viewer (or --screenshot OUT.png)"},
    {"check", cli_check, "compare two reports: exit 1 on a regression"},
    {"validate", cli_validate, "predicted vs published step times"},
    {"probe", cli_probe, "microbenchmarks: probe hbm|allreduce|permute"},
    {"sweep", cli_sweep, "run a grid of configurations, gather CSV + chart"},
    {"import", cli_import, "a Keras model file (.json, .keras) as a trace"},
    {"summary", cli_summary, "a trace's layers: shapes, parameters, MACs"},
    {"advise", cli_advise, "which slice and split: every one searched, ranked"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: tpuemu COMMAND [ARGS...]\n\n"
               "tpuemu %s: a TPU v2/v3 pod emulator for spatially "
               "partitioned CNN training.\n\ncommands:\n",
            TPUEMU_VERSION);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-9s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n'tpuemu COMMAND --help' describes one command.\n"
               "exit status: 0 done, 1 check failed, 2 bad input or usage "
               "(an output path\nthat cannot be written included), 3 does "
               "not fit the hardware, 4 out of\nhost memory or another "
               "failure of the machine tpuemu runs on\n");
}

static void free_args(char **args, char **names)
{
    for (int i = 0; names && names[i]; i++)
        free(names[i]);
    free(names);
    free(args);
}

/* Every option of every command that takes a value, and every one that
 * does not (keep in step with the commands' parsers and --help). */
static const char *const valued[] = {
    "--baseline", "--batch", "--bin", "--bytes", "--chrome-trace",
    "--chunk", "--core", "--dir", "--frames", "--freeze", "--gen", "--group",
    "--host-mem-gib", "--jobs", "--k", "--loss-png", "--lr", "--m",
    "--model", "--mxu-model", "--n", "--out", "--output-layer",
    "--output-npy", "--png", "--report", "--screenshot", "--script",
    "--seed", "--set", "--size", "--steps", "--stride", "--system",
    "--tolerance", NULL};
static const char *const flags[] = {
    "--demo", "--demo-2048", "--functional", "--gather", "--help", "--no-dedup",
    "--print-commands", "--quiet", "--version", "--write", NULL};

/* "-j2" is "-j 2", as make and GNU parallel spell it. */
static int glued_jobs(const char *a)
{
    return a[0] == '-' && a[1] == 'j' && isdigit((unsigned char)a[2]);
}

static int listed(const char *const *list, const char *a, size_t len)
{
    for (; *list; list++)
        if (strlen(*list) == len && strncmp(*list, a, len) == 0)
            return 1;
    return 0;
}

/* The option rule (emu/cli/cli.h): "--name=VALUE" means "--name VALUE" for
 * every option that takes a value, so each command matches option names
 * exactly.  The first '=' splits: "--set=hbm.bandwidth_gbs=900" is --set
 * with "hbm.bandwidth_gbs=900".  "--quiet=1" is an error (*bad names it);
 * an unknown "--x=y" is left whole for the command to refuse.  NULL when
 * out of memory or *bad; *names collects the strings made here, for
 * free_args. */
static char **split_eq(int argc, char **argv, char ***names, const char **bad)
{
    *bad = NULL;
    char **out = calloc((size_t)argc * 2 + 1, sizeof *out);
    *names = calloc((size_t)argc + 1, sizeof **names);
    if (!out || !*names) {
        free(out);
        free(*names);
        return NULL;
    }
    int n = 0, k = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a) : 0;
        if (i > 0 && a[0] == '-' && a[1] == '-' && eq && listed(flags, a, len)) {
            *bad = a;
            free_args(out, *names);
            *names = NULL;
            return NULL;
        }
        if (i > 0 && glued_jobs(a)) {
            out[n++] = (char *)"-j";
            out[n++] = (char *)(a + 2);
            continue;
        }
        if (i > 0 && a[0] == '-' && a[1] == '-' && eq && listed(valued, a, len)) {
            char *name = malloc(len + 1);
            if (!name) {
                free_args(out, *names);
                *names = NULL;
                return NULL;
            }
            memcpy(name, a, len);
            name[len] = 0;
            (*names)[k++] = name;
            out[n++] = name;
            out[n++] = (char *)(eq + 1);
        } else {
            out[n++] = argv[i];
        }
    }
    out[n] = NULL;
    return out;
}

static int count_args(char **v)
{
    int n = 0;
    while (v[n])
        n++;
    return n;
}

/* Standard output is the data a script keeps (mxu and probe JSON, lower's
 * listing, the sweep's command lines for a scheduler): a write there that
 * failed (a full disk, a closed pipe end) must not end in success.  A
 * command that already failed keeps its own status. */
static int finish(int rc)
{
    errno = 0;
    if (fflush(stdout) == 0 && !ferror(stdout))
        return rc;
    int e = errno;
    cli_error(2, "standard output: %s", e ? strerror(e) : "write failed");
    return rc ? rc : 2;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return cli_error(2, "no command given (usage: tpuemu COMMAND "
                            "[ARGS...]; see tpuemu --help)");
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return finish(0);
    }
    if (strcmp(argv[1], "--version") == 0) {
        if (argc > 2)
            return cli_error(2, "--version takes nothing after it, got '%s'",
                             argv[2]);
        printf("tpuemu %s\n", TPUEMU_VERSION);
        return finish(0);
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(argv[1], commands[i].name) == 0) {
            char **names = NULL;
            const char *bad = NULL;
            char **args = split_eq(argc - 1, argv + 1, &names, &bad);
            if (bad)
                return cli_error(2, "%s: %.*s takes no value (see tpuemu %s "
                                    "--help)",
                                 bad, (int)(strchr(bad, '=') - bad), bad,
                                 commands[i].name);
            if (!args)
                return cli_error(4, "out of host memory");
            int rc = commands[i].fn(count_args(args), args);
            free_args(args, names);
            return finish(rc);
        }
    return cli_error(2, "unknown command '%s' (try tpuemu --help)", argv[1]);
}
