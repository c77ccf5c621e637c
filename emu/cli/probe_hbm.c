/* tpuemu probe hbm: the modelled time of one HBM transfer on one core,
 * like a bandwidth microbenchmark on real hardware (docs/HBM.md). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "emu/cli/cli.h"
#include "emu/params.h"
#include "hbm/hbm.h"

#define PROBE_HBM_MAX_SETS 16

static const char usage[] =
    "usage: tpuemu probe hbm --gen v2|v3 --bytes N [--stride S --chunk C]\n"
    "                        [--write] [--set hbm.KEY=VALUE ...]\n"
    "\n"
    "Times one transfer of N bytes on one core's HBM2, starting idle at\n"
    "address 0, and prints one JSON object:\n"
    "  {\"gen\":\"v3\",\"bytes\":N,\"seconds\":T,\"gbps\":G}\n"
    "(with \"stride\" and \"chunk\" when given).  gbps = N / T / 1e9.\n"
    "\n"
    "  --gen       chip generation.  Default v3.\n"
    "  --bytes     bytes moved, > 0 (with --chunk: a multiple of it).\n"
    "  --stride S --chunk C\n"
    "              N / C chunks of C bytes whose starts are S bytes apart\n"
    "              (S >= C); without them one contiguous block.\n"
    "  --write     a write instead of a read (same timing model).\n"
    "  --set       override an HBM parameter, e.g. hbm.t_rfc_ns=0 (hbm.*\n"
    "              keys only: no other key affects this probe, exit 2).\n"
    "\n"
    "A strided block never takes longer than the contiguous span from its\n"
    "first byte to its last (docs/HBM.md).\n"
    "\n"
    "exit status: 0 done, 2 bad input or usage, 3 the block does not fit\n"
    "the core's HBM, 4 out of host memory\n";


int cli_probe_hbm(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        fputs(usage, stdout);
        return 0;
    }
    const char *sgen = "v3", *sbytes = NULL, *sstride = NULL, *schunk = NULL;
    const char *sets[PROBE_HBM_MAX_SETS];
    int nsets = 0, is_write = 0;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int r;
        if ((r = cli_take(argc, argv, &i, "--gen", &v)) != 0)
            sgen = v;
        else if ((r = cli_take(argc, argv, &i, "--bytes", &v)) != 0)
            sbytes = v;
        else if ((r = cli_take(argc, argv, &i, "--stride", &v)) != 0)
            sstride = v;
        else if ((r = cli_take(argc, argv, &i, "--chunk", &v)) != 0)
            schunk = v;
        else if ((r = cli_take(argc, argv, &i, "--set", &v)) != 0) {
            if (r > 0 && nsets == PROBE_HBM_MAX_SETS)
                return cli_error(2, "probe hbm: at most %d --set options",
                                 PROBE_HBM_MAX_SETS);
            if (r > 0)
                sets[nsets++] = v;
        } else if (strcmp(argv[i], "--write") == 0) {
            is_write = 1;
            r = 1;
        } else
            return cli_error(2, "probe hbm: unknown option '%s' (see "
                                "tpuemu probe hbm --help)", argv[i]);
        if (r < 0)
            return 2;
    }
    int gen;
    if (strcmp(sgen, "v2") == 0)
        gen = 2;
    else if (strcmp(sgen, "v3") == 0)
        gen = 3;
    else
        return cli_error(2, "probe hbm: --gen: expected v2 or v3, got '%s'",
                         sgen);
    if (!sbytes)
        return cli_error(2, "probe hbm: --bytes N is required");
    if ((sstride == NULL) != (schunk == NULL))
        return cli_error(2, "probe hbm: --stride and --chunk go together");
    int64_t bytes, stride = 0, chunk = 0;
    if (cli_int("--bytes", sbytes, 1, INT64_MAX / 2, &bytes))
        return 2;
    if (schunk) {
        if (cli_int("--chunk", schunk, 1, INT64_MAX / 2, &chunk) ||
            cli_int("--stride", sstride, 1, INT64_MAX / 2, &stride))
            return 2;
        if (stride < chunk)
            return cli_error(2, "probe hbm: --stride %" PRId64
                                " is smaller than --chunk %" PRId64,
                             stride, chunk);
        if (bytes % chunk)
            return cli_error(2, "probe hbm: --bytes %" PRId64
                                " is not a multiple of --chunk %" PRId64,
                             bytes, chunk);
    }

    tpu_params p;
    tpu_params_default(&p, gen);
    tpu_error err = {TPU_OK, ""};
    if (cli_sets_once(sets, nsets))
        return 2;
    for (int i = 0; i < nsets; i++) {
        char key[128];
        const char *eq = strchr(sets[i], '=');
        if (!eq || eq == sets[i] || (size_t)(eq - sets[i]) >= sizeof key)
            return cli_error(2, "probe hbm: --set %s: expected KEY=VALUE",
                             sets[i]);
        memcpy(key, sets[i], (size_t)(eq - sets[i]));
        key[eq - sets[i]] = '\0';
        /* Only the HBM model is timed: another key would change nothing. */
        if (strncmp(key, "hbm.", 4) != 0)
            return cli_error(2, "probe hbm: --set %s: has no effect on this "
                                "probe (it takes hbm.* keys)",
                             key);
        if (tpu_params_set(&p, key, eq + 1, &err) != TPU_OK)
            return cli_fail(&err);
    }
    /* the rules between keys, with messages naming every key involved,
     * as run gives them */
    if (tpu_params_check(&p, &err) != TPU_OK)
        return cli_fail(&err);

    hbm_xfer x = {0, (uint64_t)bytes, 1, (uint64_t)bytes, is_write};
    if (chunk) {
        x.chunk_bytes = (uint64_t)chunk;
        x.nchunks = (uint64_t)(bytes / chunk);
        x.stride = (uint64_t)stride;
    }
    double span = (double)(x.nchunks - 1) * (double)x.stride +
                  (double)x.chunk_bytes;
    if (span > p.hbm.capacity_bytes)
        return cli_error(3, "probe hbm: the block spans %.0f bytes, a v%d "
                            "core has %.0f bytes of HBM",
                         span, gen, p.hbm.capacity_bytes);

    hbm *h = hbm_new(&p.hbm);
    if (!h)
        return cli_error(4, "probe hbm: out of memory");
    double t = hbm_access(h, 0.0, &x);
    hbm_free(h);
    printf("{\"gen\":\"v%d\",\"bytes\":%" PRId64, gen, bytes);
    if (chunk)
        printf(",\"stride\":%" PRId64 ",\"chunk\":%" PRId64, stride, chunk);
    printf(",\"seconds\":%.9g,\"gbps\":%.6g}\n", t, (double)bytes / t / 1e9);
    return 0;
}
