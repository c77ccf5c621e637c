/* PLACEHOLDER until its owner lands it: tpuemu validate is not built yet. */
#include "emu/cli.h"

int cli_validate(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_error(2, "validate: not implemented yet");
}
