/* tpuemu mxu: one matrix product on one MXU (docs/SPEC.md, docs/MXU.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/cli/cli.h"
#include "emu/params.h"
#include "mxu/mxu.h"

/* Caps that keep one run to about a minute and a few GiB on a laptop. */
#define MXU_CLI_MAX_DIM (1 << 20)
#define MXU_CLI_MAX_BYTES (2.0 * 1024 * 1024 * 1024)
/* 2^38, fast model: the value loop runs ~9e9 multiply-adds/s on the build
 * machine, so an accepted shape takes at most ~30 s (2^40 took minutes). */
#define MXU_CLI_MAX_MACS 274877906944.0      /* 2^38, fast model */
#define MXU_CLI_MAX_PE_UPDATES 68719476736.0 /* 2^36, PE model */
#define MXU_CLI_MAX_SETS 16

static const char usage[] =
    "usage: tpuemu mxu --m M --k K --n N [--model pe|fast] [--gen v2|v3]\n"
    "                  [--seed S] [--set mxu.rows=R --set mxu.cols=C]\n"
    "\n"
    "Runs C[M,N] = A[M,K] x B[K,N] on one MXU (weight-stationary systolic\n"
    "array, 128x128 on v2 and v3) and prints one JSON object:\n"
    "  {\"m\":M,\"k\":K,\"n\":N,\"model\":\"pe\",\"gen\":\"v3\",\"cycles\":C,"
    "\"checksum\":\"...\"}\n"
    "cycles: from the first weight shifted in to the last result popped.\n"
    "checksum: FNV-1a 64 over the fp32 bit patterns of C, row-major.\n"
    "\n"
    "  --m, --k, --n   sizes, 1 .. 1048576 each\n"
    "  --model         pe: every processing element, every cycle;\n"
    "                  fast: closed-form timing, plain loop for values\n"
    "                  (same cycles and bits).  Default fast.\n"
    "  --gen           chip generation for the array size.  Default v3.\n"
    "  --seed          A then B, row-major, from splitmix64(seed) mapped to\n"
    "                  [-1,1) and rounded to bf16.  Default 0.\n"
    "  --set KEY=VAL   the array's size: mxu.rows=R, mxu.cols=C.  Other\n"
    "                  chip keys (clock_hz, mxus_per_core, ...) cannot change\n"
    "                  one product's cycles on one MXU and are refused.\n"
    "\n"
    "Limits: A, B and C together at most 2 GiB; fast model at most 2^38\n"
    "multiply-adds (M x K x N, about 30 s on the build machine); PE model\n"
    "at most 2^36 PE updates (cycles x rows x cols, about 35 s).  Beyond\n"
    "them the command exits 2.\n"
    "\n"
    "exit status: 0 done, 2 bad input or usage, 4 out of host memory\n";


int cli_mxu(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        fputs(usage, stdout);
        return 0;
    }
    const char *sm = NULL, *sk = NULL, *sn = NULL, *smodel = "fast",
               *sgen = "v3", *sseed = "0";
    const char *sets[MXU_CLI_MAX_SETS];
    int nsets = 0;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int r;
        if ((r = cli_take(argc, argv, &i, "--m", &v)) != 0)
            sm = v;
        else if ((r = cli_take(argc, argv, &i, "--k", &v)) != 0)
            sk = v;
        else if ((r = cli_take(argc, argv, &i, "--n", &v)) != 0)
            sn = v;
        else if ((r = cli_take(argc, argv, &i, "--model", &v)) != 0)
            smodel = v;
        else if ((r = cli_take(argc, argv, &i, "--gen", &v)) != 0)
            sgen = v;
        else if ((r = cli_take(argc, argv, &i, "--seed", &v)) != 0)
            sseed = v;
        else if ((r = cli_take(argc, argv, &i, "--set", &v)) != 0) {
            if (v && nsets == MXU_CLI_MAX_SETS)
                return cli_error(2, "mxu: at most %d --set options",
                                 MXU_CLI_MAX_SETS);
            if (v)
                sets[nsets++] = v;
        } else
            return cli_error(2, "mxu: unknown option '%s' (see tpuemu mxu "
                             "--help)", argv[i]);
        if (r < 0)
            return 2;
    }
    if (!sm || !sk || !sn)
        return cli_error(2, "mxu: --m, --k and --n are required (missing %s)",
                         !sm ? "--m" : !sk ? "--k" : "--n");
    int64_t m, k, n, seed;
    if (cli_int("--m", sm, 1, MXU_CLI_MAX_DIM, &m) ||
        cli_int("--k", sk, 1, MXU_CLI_MAX_DIM, &k) ||
        cli_int("--n", sn, 1, MXU_CLI_MAX_DIM, &n) ||
        cli_int("--seed", sseed, 0, INT64_MAX, &seed))
        return 2;
    int pe;
    if (strcmp(smodel, "pe") == 0)
        pe = 1;
    else if (strcmp(smodel, "fast") == 0)
        pe = 0;
    else
        return cli_error(2, "--model: expected pe or fast, got '%s'", smodel);
    int gen;
    if (strcmp(sgen, "v2") == 0 || strcmp(sgen, "2") == 0)
        gen = 2;
    else if (strcmp(sgen, "v3") == 0 || strcmp(sgen, "3") == 0)
        gen = 3;
    else
        return cli_error(2, "--gen: expected v2 or v3, got '%s'", sgen);

    tpu_params hw;
    tpu_params_default(&hw, gen);
    if (cli_sets_once(sets, nsets))
        return 2;
    for (int i = 0; i < nsets; i++) {
        char key[128];
        const char *eq = strchr(sets[i], '=');
        size_t len = eq ? (size_t)(eq - sets[i]) : 0;
        if (!eq || len == 0 || len >= sizeof key)
            return cli_error(2, "--set: expected KEY=VALUE, got '%s'",
                             sets[i]);
        memcpy(key, sets[i], len);
        key[len] = '\0';
        /* The command prints one product's cycles on one array: only its
         * size changes them.  Another known key (the clock, the MXUs per
         * core, the engine's issue overhead) would be accepted and change
         * nothing, a what-if that silently is not one, so it is refused
         * as probe hbm and probe allreduce refuse theirs. */
        if (strcmp(key, "mxu.rows") != 0 && strcmp(key, "mxu.cols") != 0)
            return cli_error(2, "mxu: --set %s: %s (it prints one product's "
                                "cycles on one MXU; it takes mxu.rows and "
                                "mxu.cols)",
                             key, tpu_param_find(key)
                                      ? "has no effect on this command"
                                      : "unknown parameter");
        tpu_error e;
        if (tpu_params_set(&hw, key, eq + 1, &e) != TPU_OK)
            return cli_fail(&e);
    }
    const mxu_params *mp = &hw.mxu;

    double bytes = 2.0 * ((double)m * (double)k + (double)k * (double)n) +
                   4.0 * (double)m * (double)n;
    if (bytes > MXU_CLI_MAX_BYTES)
        return cli_error(2, "mxu: A, B and C need %.2f GiB of host memory; "
                         "the limit is 2 GiB", bytes / (1024.0 * 1024 * 1024));
    double macs = (double)m * (double)k * (double)n;
    if (macs > MXU_CLI_MAX_MACS)
        return cli_error(2, "mxu: %.0f multiply-adds (M x K x N) exceed the "
                         "limit of 2^38 (%.0f)", macs, MXU_CLI_MAX_MACS);
    if (pe) {
        double upd = (double)mxu_fast_cycles(mp, m, k, n) *
                     (double)mp->rows * (double)mp->cols;
        if (upd > MXU_CLI_MAX_PE_UPDATES)
            return cli_error(2, "mxu: the PE model would need %.0f PE "
                             "updates, over its limit of 2^36 (%.0f); use "
                             "--model fast", upd, MXU_CLI_MAX_PE_UPDATES);
    }

    bf16 *a = malloc((size_t)(m * k) * sizeof *a);
    bf16 *b = malloc((size_t)(k * n) * sizeof *b);
    float *c = malloc((size_t)(m * n) * sizeof *c);
    if (!a || !b || !c) {
        free(a);
        free(b);
        free(c);
        return cli_error(4, "mxu: out of host memory");
    }
    uint64_t st = (uint64_t)seed;
    bf16_random_fill(a, (size_t)(m * k), &st);
    bf16_random_fill(b, (size_t)(k * n), &st);
    uint64_t cycles = 0;
    int rc = 0;
    if (pe) {
        tpu_error e;
        if (mxu_pe_matmul(mp, a, b, c, m, k, n, &cycles, &e) != TPU_OK)
            rc = cli_fail(&e);
    } else {
        mxu_fast_matmul(mp, a, b, c, m, k, n, &cycles);
    }
    if (rc == 0)
        printf("{\"m\":%lld,\"k\":%lld,\"n\":%lld,\"model\":\"%s\","
               "\"gen\":\"v%d\",\"cycles\":%llu,\"checksum\":\"%016llx\"}\n",
               (long long)m, (long long)k, (long long)n, pe ? "pe" : "fast",
               gen, (unsigned long long)cycles,
               (unsigned long long)mxu_checksum(c, (size_t)(m * n)));
    free(a);
    free(b);
    free(c);
    return rc;
}
