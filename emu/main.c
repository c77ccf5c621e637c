/* tpuemu — command dispatch.  Each command lives in emu/cli_NAME.c. */
#include <stdio.h>
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
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].fn(argc - 1, argv + 1);
    return cli_error(2, "unknown command '%s' (try tpuemu --help)", argv[1]);
}
