/* PLACEHOLDER until its owner lands it: tpuemu probe_ici is not built yet. */
#include "emu/cli.h"

int cli_probe_ici(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_error(2, "probe_ici: not implemented yet");
}
