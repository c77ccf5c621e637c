/* tpuemu probe allreduce|permute: the modelled time of one collective on a
 * slice, printed as one JSON object, like nccl-tests on real hardware.
 *
 * allreduce --system NAME --bytes N [--group G]: every core contributes N
 *   bytes; with --group the slice splits into consecutive groups of G cores
 *   (a partition group, e.g. 8 cores per replica) that all-reduce at the
 *   same time, contending for links.  busbw = algbw x 2(n-1)/n, n = cores
 *   per group (the nccl-tests convention).
 * permute --system NAME --bytes N: a halo exchange along x: every even
 *   core sends N bytes to the even core of its +x neighbour chip, every
 *   odd core N bytes to the odd core of its -x neighbour, so each link
 *   direction carries one block (the two cores of a chip share links).
 *   Without wrap-around links the edge chips have no neighbour that way
 *   and send nothing.  busbw = algbw.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/cli/cli.h"
#include "emu/params.h"
#include "interconnect/ici.h"

static const char usage[] =
    "usage: tpuemu probe allreduce --system NAME --bytes N [--group CORES]\n"
    "                              [--set ici.KEY=VALUE ...]\n"
    "       tpuemu probe permute --system NAME --bytes N [--set ...]\n"
    "Prints {\"system\":..,\"bytes\":..,\"seconds\":..,\"algbw_gbps\":..,"
    "\"busbw_gbps\":..}.\n"
    "allreduce: every core reduces N bytes; --group splits the slice into\n"
    "  consecutive groups of CORES cores all-reducing at once.\n"
    "permute: even cores send N bytes to their +x neighbour, odd cores to\n"
    "  their -x neighbour (a halo exchange).\n"
    "--set takes the ici.* keys (tpuemu run --help lists them) and\n"
    "  hbm.capacity_gib; any other key has no effect on these probes and is\n"
    "  refused (exit 2).\n"
    "exit status: 0 done, 2 bad input or usage, 3 N is more than a core's\n"
    "HBM holds, 4 out of host memory\n";

int cli_probe_ici(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        fputs(usage, stdout);
        return 0;
    }
    int is_ar = strcmp(argv[0], "allreduce") == 0;
    const char *sysname = NULL;
    int64_t bytes = 0, group = 0;
    int have_bytes = 0;
    tpu_params p;
    const char *sets[64];
    int nsets = 0;
    for (int i = 1; i < argc; i++) {
        const char *v;
        int r;
        if ((r = cli_take(argc, argv, &i, "--system", &v)) != 0) {
            if (r < 0)
                return 2;
            sysname = v;
        } else if ((r = cli_take(argc, argv, &i, "--bytes", &v)) != 0) {
            if (r < 0 || cli_int("--bytes", v, 1, (int64_t)1 << 50, &bytes))
                return 2;
            have_bytes = 1;
        } else if (is_ar &&
                   (r = cli_take(argc, argv, &i, "--group", &v)) != 0) {
            if (r < 0 || cli_int("--group", v, 2, 1 << 20, &group))
                return 2;
        } else if ((r = cli_take(argc, argv, &i, "--set", &v)) != 0) {
            if (r < 0)
                return 2;
            if (nsets == 64)
                return cli_error(2, "--set: too many overrides");
            sets[nsets++] = v;
        } else {
            return cli_error(2, "probe %s: unknown option '%s' (see tpuemu "
                             "probe %s --help)", argv[0], argv[i], argv[0]);
        }
    }
    if (!sysname)
        return cli_error(2, "probe %s: --system NAME is required", argv[0]);
    const tpu_system *sys = tpu_system_find(sysname);
    if (!sys)
        return cli_error(2, "probe %s: unknown system '%s' (e.g. v2-8, v3-32, "
                         "v3-2048)", argv[0], sysname);
    if (!have_bytes)
        return cli_error(2, "probe %s: --bytes N is required", argv[0]);
    if (group == 0)
        group = sys->cores;
    if (group < 2 || group > sys->cores || sys->cores % group != 0)
        return cli_error(2, "probe allreduce: --group %lld must be at least 2 "
                         "and divide the %d cores of %s", (long long)group,
                         sys->cores, sys->name);
    tpu_params_default(&p, sys->gen);
    if (cli_sets_once(sets, nsets))
        return 2;
    for (int i = 0; i < nsets; i++) {
        char key[128];
        const char *eq = strchr(sets[i], '=');
        if (!eq || eq == sets[i] || (size_t)(eq - sets[i]) >= sizeof key)
            return cli_error(2, "--set: expected KEY=VALUE, got '%s'",
                             sets[i]);
        memcpy(key, sets[i], (size_t)(eq - sets[i]));
        key[eq - sets[i]] = '\0';
        /* The probe times the interconnect alone; the buffer's size is
         * checked against the HBM capacity.  Another key would be accepted
         * and change nothing, a what-if that silently is not one. */
        if (strncmp(key, "ici.", 4) != 0 &&
            strcmp(key, "hbm.capacity_gib") != 0)
            return cli_error(2, "probe %s: --set %s: has no effect on this "
                                "probe (it takes ici.* keys and "
                                "hbm.capacity_gib)",
                             argv[0], key);
        tpu_error e = {0};
        if (tpu_params_set(&p, key, eq + 1, &e) != TPU_OK)
            return cli_fail(&e);
    }
    /* Every core holds its N bytes in HBM (all-reduce in place; a permute
     * sends from and receives into HBM), as probe hbm refuses a block
     * larger than the core's HBM. */
    if ((double)bytes > p.hbm.capacity_bytes) {
        char need[32], has[32];
        cli_fmt_gib2(need, has, sizeof need, (double)bytes,
                     p.hbm.capacity_bytes);
        return cli_error(3, "probe %s: --bytes %lld: needs %s GiB of HBM "
                            "per core, v%d core has %s GiB",
                         argv[0], (long long)bytes, need, sys->gen, has);
    }
    ici *n = ici_new(&p.ici, sys->dim_x, sys->dim_y, sys->full_pod);
    /* the system and ici.* are validated: NULL is host memory */
    if (!n)
        return cli_error(4, "probe %s: out of host memory (interconnect)",
                         argv[0]);
    int nc = ici_num_cores(n);
    double seconds, busbw_factor;
    if (is_ar) {
        int *cores = malloc((size_t)nc * sizeof(int));
        if (!cores) {
            ici_free(n);
            return cli_error(4, "probe %s: out of host memory", argv[0]);
        }
        for (int i = 0; i < nc; i++)
            cores[i] = i;
        seconds = ici_allreduce_groups(n, cores, (int)group,
                                       nc / (int)group, (double)bytes, 0.0);
        free(cores);
        busbw_factor = 2.0 * (double)(group - 1) / (double)group;
    } else {
        int dx = ici_dim_x(n), nfl = 0;
        ici_flow *fl = malloc((size_t)nc * sizeof(ici_flow));
        if (!fl) {
            ici_free(n);
            return cli_error(4, "probe %s: out of host memory", argv[0]);
        }
        for (int c = 0; c < nc; c++) {
            int chip = c / 2, x = chip % dx, step = (c & 1) ? -1 : 1;
            int nx = x + step;
            if (nx < 0 || nx >= dx) {
                if (!ici_wraps(n, 0))
                    continue;
                nx = (nx + dx) % dx;
            }
            if (nx == x)
                continue;
            fl[nfl].src_core = 2 * (chip - x + nx) + (c & 1);
            fl[nfl].dst_core = fl[nfl].src_core;
            fl[nfl].src_core = c;
            fl[nfl].bytes = (double)bytes;
            nfl++;
        }
        seconds = ici_permute(n, fl, nfl, 0.0);
        free(fl);
        busbw_factor = 1.0;
    }
    ici_free(n);
    if (seconds < 0)
        return cli_error(4, "probe %s: out of host memory (interconnect)",
                         argv[0]);
    if (!(seconds > 0))
        return cli_error(2, "probe %s: %s has no link to exercise", argv[0],
                         sys->name);
    double algbw = (double)bytes / seconds / 1e9;
    printf("{\"system\":\"%s\",\"bytes\":%lld,", sys->name, (long long)bytes);
    if (is_ar)
        printf("\"group\":%lld,", (long long)group);
    printf("\"seconds\":%.9g,\"algbw_gbps\":%.6g,\"busbw_gbps\":%.6g}\n",
           seconds, algbw, algbw * busbw_factor);
    return 0;
}
