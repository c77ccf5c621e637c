/* The chip data: published peaks come out of the parameters, and --set
 * accepts every listed key and refuses bad ones. */
#include <math.h>
#include <string.h>

#include "emu/params.h"
#include "test/harness.h"

void th_suite_params(th_ctx *t)
{
    tpu_params p2, p3;
    tpu_params_default(&p2, 2);
    tpu_params_default(&p3, 3);

    th_case(t, "peak bf16 FLOP/s per chip matches the Cloud TPU docs");
    TH_CHECKF(t, fabs(2 * tpu_core_peak_flops(&p3) / 1e12 - 123.2) < 0.5,
              "v3 chip peak %g", 2 * tpu_core_peak_flops(&p3) / 1e12);
    TH_CHECKF(t, fabs(2 * tpu_core_peak_flops(&p2) / 1e12 - 45.9) < 0.5,
              "v2 chip peak %g", 2 * tpu_core_peak_flops(&p2) / 1e12);

    th_case(t, "HBM peak per core is half the chip's published bandwidth");
    TH_CHECK(t, fabs(hbm_peak_bps(&p3.hbm) / 1e9 - 450) < 1e-6);
    TH_CHECK(t, fabs(hbm_peak_bps(&p2.hbm) / 1e9 - 350) < 1e-6);

    th_case(t, "every slice of docs/SPEC.md is known, with 2 cores per chip");
    const char *names[] = {"v2-8",   "v2-32",   "v2-128", "v2-256", "v2-512",
                           "v3-8",   "v3-32",   "v3-64",  "v3-128", "v3-256",
                           "v3-512", "v3-1024", "v3-2048"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const tpu_system *s = tpu_system_find(names[i]);
        if (!TH_CHECKF(t, s != NULL, "%s unknown", names[i]))
            continue;
        TH_CHECKF(t, s->dim_x * s->dim_y * 2 == s->cores, "%s torus", s->name);
    }
    TH_CHECK(t, tpu_system_find("v4-8") == NULL);
    TH_CHECK(t, tpu_system_find("v3-2048")->full_pod == 1);

    th_case(t, "--set round-trips every key and refuses bad values");
    for (size_t i = 0; tpu_param_key(i); i++) {
        const char *k = tpu_param_key(i)->key;
        double v;
        tpu_error e = {0};
        TH_CHECKF(t, tpu_params_get(&p3, k, &v, &e) == TPU_OK, "get %s", k);
    }
    tpu_params q = p3;
    tpu_error e = {0};
    TH_CHECK(t, tpu_params_set(&q, "hbm.bandwidth_gbs", "1200", &e) == TPU_OK);
    TH_CHECK(t, fabs(hbm_peak_bps(&q.hbm) / 1e9 - 1200) < 1e-6);
    TH_CHECK(t, tpu_params_set(&q, "mxu.rows", "256", &e) == TPU_OK);
    TH_CHECK(t, q.mxu.rows == 256);
    TH_CHECK(t, tpu_params_set(&q, "mxu.rows", "2.5", &e) == TPU_ERR_INPUT);
    TH_CHECK(t, tpu_params_set(&q, "mxu.rows", "0", &e) == TPU_ERR_INPUT);
    TH_CHECK(t, tpu_params_set(&q, "nope", "1", &e) == TPU_ERR_INPUT);
    TH_CHECK(t, strstr(e.msg, "nope") != NULL);
    TH_CHECK(t, tpu_params_set(&q, "clock_hz", "abc", &e) == TPU_ERR_INPUT);
    TH_CHECK(t, tpu_params_set(&q, "clock_hz", "nan", &e) == TPU_ERR_INPUT);
}
