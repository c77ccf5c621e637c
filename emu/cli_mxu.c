/* PLACEHOLDER until its owner lands it: tpuemu mxu is not built yet. */
#include "emu/cli.h"

int cli_mxu(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_error(2, "mxu: not implemented yet");
}
