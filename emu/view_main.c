/* PLACEHOLDER until the viewer lands. */
#include <SDL.h>

#include "emu/cli.h"

int cli_view(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_error(2, "view: not implemented yet");
}
