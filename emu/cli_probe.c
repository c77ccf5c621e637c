#include <stdio.h>
#include <string.h>

#include "emu/cli.h"

static const char usage[] =
    "usage: tpuemu probe hbm --gen v2|v3 --bytes N [--stride S --chunk C]\n"
    "       tpuemu probe allreduce --system NAME --bytes N [--group CORES]\n"
    "       tpuemu probe permute --system NAME --bytes N\n"
    "Prints one JSON object: the modelled time of that transfer, like a\n"
    "bandwidth microbenchmark on real hardware.\n";

int cli_probe(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 ||
        strcmp(argv[1], "-h") == 0) {
        fputs(usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "hbm") == 0)
        return cli_probe_hbm(argc - 1, argv + 1);
    if (strcmp(argv[1], "allreduce") == 0 || strcmp(argv[1], "permute") == 0)
        return cli_probe_ici(argc - 1, argv + 1);
    return cli_error(2, "probe: unknown probe '%s' (hbm, allreduce, permute)",
                     argv[1]);
}
