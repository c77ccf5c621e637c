/* PLACEHOLDER until its owner lands it: tpuemu run is not built yet. */
#include "emu/cli.h"

int cli_run(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_error(2, "run: not implemented yet");
}
