/* tpuemu — command dispatch.  Each command lives in emu/cli_NAME.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/cli.h"

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

/* The option rule (emu/cli.h): "--name=VALUE" means "--name VALUE" for
 * every command, so each command matches option names exactly.  The
 * first '=' splits: "--set=hbm.bandwidth_gbs=900" is --set with
 * "hbm.bandwidth_gbs=900".  NULL when out of memory; *names collects the
 * strings made here, for free_args. */
static char **split_eq(int argc, char **argv, char ***names)
{
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
        if (i > 0 && a[0] == '-' && a[1] == '-' && eq && eq > a + 2) {
            size_t len = (size_t)(eq - a);
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

int main(int argc, char **argv)
{
    if (argc < 2)
        return cli_error(2, "no command given (usage: tpuemu COMMAND "
                            "[ARGS...]; see tpuemu --help)");
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("tpuemu %s\n", TPUEMU_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(argv[1], commands[i].name) == 0) {
            char **names = NULL;
            char **args = split_eq(argc - 1, argv + 1, &names);
            if (!args)
                return cli_error(4, "out of host memory");
            int rc = commands[i].fn(count_args(args), args);
            free_args(args, names);
            return rc;
        }
    return cli_error(2, "unknown command '%s' (try tpuemu --help)", argv[1]);
}
