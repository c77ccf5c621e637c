/* PLACEHOLDER until its owner lands it: tpuemu sweep is not built yet. */
#include "emu/cli.h"

int cli_sweep(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_error(2, "sweep: not implemented yet");
}
