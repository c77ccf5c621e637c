/* xla.remat (firmware/mem.c, mem_choose_remat): a training step that does
 * not fit recomputes activations whose inputs are kept anyway, so it
 * fits at the cost of one vector pass each; the values do not change. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "test/harness.h"

void th_suite_remat(th_ctx *t)
{
    tpu_error e = {0};
    const char *unet = "traces/reference/unet3d-128-v3-8.json";

    /* With batchnorm's normalise unfused (xla.bn_apply_fused=0) the
     * normalised activations are stored too: the 3D UNet then needs 20.1
     * GiB and recomputes some 4 GiB, enough to weigh on the step.  Fused
     * (the default) it needs 16.7 GiB and recomputes 1 GiB (next case). */
    th_case(t, "3D UNet 128^3 on v3-8, batchnorm unfused: does not fit "
               "without recomputation, fits with it, and pays vector time "
               "for it");
    {
        const char *k[2] = {"xla.bn_apply_fused", "xla.remat"};
        const char *off[2] = {"0", "0"};
        emu_result a, b;
        tpu_status ra = th_sim_trace(unet, k, off, 2, 0, &a, NULL, &e);
        TH_CHECKF(t, ra == TPU_ERR_NOFIT && strstr(e.msg, "20.1 GiB"),
                  "status %d: %s", ra, e.msg);
        if (ra == TPU_ERR_NOFIT || ra == TPU_OK)
            emu_result_free(&a);
        if (TH_CHECKF(t,
                      th_sim_trace(unet, k, off, 1, 0, &b, NULL, &e) == 0,
                      "%s", e.msg)) {
            TH_CHECK(t, b.fits && b.hbm_needed_bytes <= b.hbm_capacity_bytes);
            TH_CHECKF(t, b.hbm_remat_bytes > 3e9 && b.hbm_remat_bytes < 8e9,
                      "recomputed %.3g bytes", b.hbm_remat_bytes);
            /* timed anyway without recomputation, for the difference */
            const char *k2[3] = {"xla.bn_apply_fused", "xla.remat",
                                 "hbm.capacity_gib"};
            const char *v2[3] = {"0", "0", "64"};
            emu_result c;
            if (TH_CHECKF(t,
                          th_sim_trace(unet, k2, v2, 3, 0, &c, NULL, &e) == 0,
                          "%s", e.msg)) {
                double dv = b.per_core[0].breakdown_s[CAT_VECTOR] -
                            c.per_core[0].breakdown_s[CAT_VECTOR];
                TH_CHECKF(t,
                          dv > 0 && b.step_time_s > c.step_time_s &&
                              b.step_time_s < 1.05 * c.step_time_s,
                          "vector +%.4f s, step %.4f vs %.4f", dv,
                          b.step_time_s, c.step_time_s);
                emu_result_free(&c);
            }
            emu_result_free(&b);
        }
    }

    th_case(t, "3D UNet 128^3 on v3-8 as the default model has it: 16.7 "
               "GiB without recomputation, fits recomputing 1 GiB");
    {
        const char *k[1] = {"xla.remat"}, *off[1] = {"0"};
        emu_result a, b;
        tpu_status ra = th_sim_trace(unet, k, off, 1, 0, &a, NULL, &e);
        TH_CHECKF(t, ra == TPU_ERR_NOFIT && strstr(e.msg, "16.7 GiB"),
                  "status %d: %s", ra, e.msg);
        if (ra == TPU_ERR_NOFIT || ra == TPU_OK)
            emu_result_free(&a);
        if (TH_CHECKF(t,
                      th_sim_trace(unet, NULL, NULL, 0, 0, &b, NULL, &e) == 0,
                      "%s", e.msg)) {
            TH_CHECK(t, b.fits && b.hbm_needed_bytes <= b.hbm_capacity_bytes);
            TH_CHECKF(t, b.hbm_remat_bytes > 0.6e9 && b.hbm_remat_bytes < 3e9,
                      "recomputed %.3g bytes", b.hbm_remat_bytes);
            emu_result_free(&b);
        }
    }

    th_case(t, "recomputation changes timing, never values (functional, "
               "batchnorm unfused)");
    {
        const char *path = "traces/small/tiny2d.json";
        /* with batchnorm's normalise unfused tiny2d needs 1.20 MiB per
         * core; 1.13 MiB forces recomputing its batchnorm + relu output.
         * Fused (the default) it needs 1.08 MiB and keeps nothing that
         * could be recomputed. */
        const char *k[2] = {"xla.bn_apply_fused", "hbm.capacity_gib"};
        const char *v[2] = {"0", "0.0011"};
        emu_result a, b;
        if (TH_CHECKF(t,
                      th_sim_trace(path, k, v, 1, 1, &a, NULL, &e) == 0,
                      "%s", e.msg)) {
            if (TH_CHECKF(t, th_sim_trace(path, k, v, 2, 1, &b, NULL, &e) == 0,
                          "%s", e.msg)) {
                TH_CHECKF(t, b.hbm_remat_bytes > 0, "nothing recomputed");
                TH_CHECK(t, b.output_checksum == a.output_checksum);
                TH_CHECK(t, b.loss == a.loss && b.n_grads == a.n_grads &&
                                memcmp(a.grads, b.grads,
                                       sizeof(float) * (size_t)a.n_grads) == 0);
                TH_CHECK(t, b.step_time_s > a.step_time_s);
                emu_result_free(&b);
            }
            emu_result_free(&a);
        }
    }

    /* unfused batchnorm, where both steps recompute (see above) */
    th_case(t, "run says how much it recomputed in plain units (MiB below "
               "1 GiB, GiB above: 4.25 GiB, not 4.35e+03 MiB; batchnorm "
               "unfused)");
    {
        static th_cmd_result c;
        th_run(&c,
               "%s run traces/small/tiny2d.json --set "
               "hbm.capacity_gib=0.0011 --set xla.bn_apply_fused=0",
               th_bin());
        const char *l = strstr(c.out, "fits by recomputing ");
        double v = 0;
        char unit[8] = "", after[4] = "";
        int n =
            l ? sscanf(l, "fits by recomputing %lf %7s %3s", &v, unit, after)
              : 0;
        TH_CHECKF(t,
                  c.status == 0 && n == 3 && strcmp(unit, "MiB") == 0 &&
                      strcmp(after, "of") == 0 && v > 0 && v < 1024 &&
                      !strstr(l, "e+"),
                  "status %d: %s%s", c.status, c.out, c.err);
        th_run(&c, "%s run traces/reference/unet3d-128-v3-8.json --set "
                   "xla.bn_apply_fused=0", th_bin());
        l = strstr(c.out, "fits by recomputing ");
        n = l ? sscanf(l, "fits by recomputing %lf %7s %3s", &v, unit, after)
              : 0;
        TH_CHECKF(t,
                  c.status == 0 && n == 3 && strcmp(unit, "GiB") == 0 &&
                      v > 1 && v < 16 && !strstr(l, "e+"),
                  "status %d: %s%s", c.status, c.out, c.err);
    }

    th_case(t, "a step that cannot fit even so says how much was recomputed");
    {
        emu_result r;
        tpu_status rc = th_sim_trace("traces/retinanet-2560-v3-8.json", NULL,
                                     NULL, 0, 0, &r, NULL, &e);
        TH_CHECKF(t, rc == TPU_ERR_NOFIT && strstr(e.msg, "after recomputing"),
                  "status %d: %s", rc, e.msg);
        if (rc == TPU_ERR_NOFIT)
            emu_result_free(&r);
    }
}
