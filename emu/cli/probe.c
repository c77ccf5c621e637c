#include <stdio.h>
#include <string.h>

#include "emu/cli/cli.h"

static const char usage[] =
    "usage: tpuemu probe hbm --gen v2|v3 --bytes N [--stride S --chunk C]\n"
    "                        [--write] [--set hbm.KEY=VALUE ...]\n"
    "       tpuemu probe allreduce --system NAME --bytes N [--group CORES]\n"
    "                              [--set ici.KEY=VALUE ...]\n"
    "       tpuemu probe permute --system NAME --bytes N [--set ici.KEY=VALUE ...]\n"
    "(tpuemu probe SUBCOMMAND --help for each one's options)\n"
    "Prints one JSON object: the modelled time of that transfer, like a\n"
    "bandwidth microbenchmark on real hardware.\n"
    "exit status: 0 done, 2 bad input or usage, 3 does not fit the\n"
    "hardware, 4 out of host memory\n";

int cli_probe(int argc, char **argv)
{
    if (argc < 2)
        return cli_error(2, "probe: no probe given (usage: tpuemu probe "
                            "hbm|allreduce|permute ...; see tpuemu probe "
                            "--help)");
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(usage, stdout);
        return 0;
    }
    if (strcmp(argv[1], "hbm") == 0)
        return cli_probe_hbm(argc - 1, argv + 1);
    if (strcmp(argv[1], "allreduce") == 0 || strcmp(argv[1], "permute") == 0)
        return cli_probe_ici(argc - 1, argv + 1);
    return cli_error(2, "probe: unknown probe '%s' (hbm, allreduce, permute)",
                     argv[1]);
}
