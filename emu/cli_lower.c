/* PLACEHOLDER until its owner lands it: tpuemu lower is not built yet. */
#include "emu/cli.h"

int cli_lower(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_error(2, "lower: not implemented yet");
}
