/* PLACEHOLDER until its owner lands it: tpuemu check is not built yet. */
#include "emu/cli.h"

int cli_check(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_error(2, "check: not implemented yet");
}
