/* tpuemu summary: Keras's model.summary() totals for traces and model
 * files (test/keras/), per-layer rows, and refusals. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test/harness.h"

void th_suite_summary(th_ctx *t)
{
    th_cmd_result r;

    th_case(t, "VGG16 from its Keras JSON: Keras's total");
    th_run(&r, "%s summary test/keras/vgg16.json", th_bin());
    TH_CHECKF(t, r.status == 0, "%s", r.err);
    TH_CHECK(t, strstr(r.out, "Total params: 138,357,544\n"));
    TH_CHECK(t, strstr(r.out, "block1_conv1 (conv)"));
    TH_CHECK(t, strstr(r.out, "[224, 224, 64]"));
    TH_CHECK(t, strstr(r.out, "fc1 (dense)") && strstr(r.out, "102,764,544"));
    TH_CHECK(t, strstr(r.out, "Multiply-adds per example (forward): 15.47 G"));

    th_case(t, "ResNet50: trainable and non-trainable as Keras splits them");
    th_run(&r, "%s summary test/keras/resnet50.json --allow-identity ZeroPadding2D",
           th_bin());
    TH_CHECKF(t, r.status == 0, "%s", r.err);
    TH_CHECK(t, strstr(r.out, "Total params: 25,636,712\n"));
    TH_CHECK(t, strstr(r.out, "Trainable params: 25,583,592\n"));
    TH_CHECK(t, strstr(r.out, "Non-trainable params: 53,120\n"));

    th_case(t, "a trace: batchnorm's moving statistics count, as in Keras");
    th_run(&r, "%s summary traces/small/tiny2d.json", th_bin());
    TH_CHECKF(t, r.status == 0, "%s", r.err);
    TH_CHECK(t, strstr(r.out, "Total params: 3,914\n"));
    TH_CHECK(t, strstr(r.out, "Non-trainable params: 32\n"));
    TH_CHECK(t, strstr(r.out, "bn1 (batchnorm)"));
    TH_CHECK(t, strstr(r.out, "Kept for the backward pass per example: "));

    th_case(t, "a frozen nested backbone and a shared layer");
    th_run(&r, "%s summary test/keras/nested.json", th_bin());
    TH_CHECK(t, r.status == 0 && strstr(r.out, "Trainable params: 45\n") &&
                    strstr(r.out, "Non-trainable params: 256\n"));
    th_run(&r, "%s summary test/keras/shared.json", th_bin());
    TH_CHECK(t, r.status == 0 && strstr(r.out, "Total params: 481\n") &&
                    strstr(r.out, "tower@1 (conv, shared)"));

    th_case(t, "infer mode shows no kept bytes");
    th_run(&r, "%s summary test/keras/seq_cnn.json --mode infer", th_bin());
    TH_CHECK(t, r.status == 0 && strstr(r.out, "infer") &&
                    !strstr(r.out, "Kept for the backward"));

    th_case(t, "refusals: import options on a trace, a bad model, no file");
    th_run(&r, "%s summary traces/small/tiny2d.json --input 8x8x3", th_bin());
    TH_CHECK(t, r.status == 2 && strstr(r.err, "is a trace"));
    th_run(&r, "%s summary test/keras/bad_unmapped.json", th_bin());
    TH_CHECK(t, r.status == 2 && strstr(r.err, "bad_unmapped.json: config.layers[1]"));
    th_run(&r, "%s summary", th_bin());
    TH_CHECK(t, r.status == 2);
    th_run(&r, "%s summary test/keras/nope.json", th_bin());
    TH_CHECK(t, r.status == 2 && strstr(r.err, "nope.json"));
}
