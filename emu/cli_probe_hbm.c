/* PLACEHOLDER until its owner lands it: tpuemu probe_hbm is not built yet. */
#include "emu/cli.h"

int cli_probe_hbm(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_error(2, "probe_hbm: not implemented yet");
}
