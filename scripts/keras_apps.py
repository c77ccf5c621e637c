#!/usr/bin/env python3
"""Writes the Keras 2 architecture JSON (what `model.to_json()` gives) of
Keras applications, for the import tests, without TensorFlow.

Each builder follows the application's code in keras/applications/ (Keras
2.x: vgg16.py, resnet.py) layer by layer, with the same names, so the
parameter totals can be checked against the ones Keras publishes
(https://keras.io/api/applications/): VGG16 138,357,544, ResNet50
25,636,712, MobileNetV2 3,538,984 (mobilenet_v2.py), MobileNet 4,253,864
(mobilenet.py, Keras 2.8's top: Reshape to [1,1,1024] before the
classifier), EfficientNetB0 5,330,571 (efficientnet.py: Rescaling and
Normalization at the input, squeeze-excite with Reshape, swish), DenseNet121
8,062,504 (densenet.py).  ops_block is no
application: one small model with every activation and merge class the
importer maps beyond those (its total counted by hand in
test/test_import.c).  unet3d_cf and cnn2d_cf are channels_first models (a
3D U-Net for CT volumes, a 2D classifier with Flatten and Dense), each with
a channels_last twin (_cl) that must import to the same trace.

    python3 scripts/keras_apps.py OUTDIR      # writes OUTDIR/vgg16.json, ...

The outputs are committed under test/keras/; run this again after
changing a builder and review the diff.
"""
import json
import os
import sys


class Functional:
    """A tf.keras 2 Functional config being built."""

    def __init__(self, name):
        self.name = name
        self.layers = []
        self.inputs = []

    def _add(self, cls, name, config, inbound):
        config = dict(config)
        config["name"] = name
        config.setdefault("trainable", True)
        config.setdefault("dtype", "float32")
        nodes = [] if inbound is None else [
            [[src, 0, 0, {}] for src in inbound]]
        self.layers.append({"class_name": cls, "config": config,
                            "name": name, "inbound_nodes": nodes})
        return name

    def input(self, name, shape):
        self.inputs.append(name)
        return self._add("InputLayer", name, {
            "batch_input_shape": [None] + list(shape), "sparse": False,
            "ragged": False}, None)

    def conv(self, x, name, filters, k, strides=1, padding="valid",
             activation="linear", use_bias=True):
        return self._add("Conv2D", name, {
            "filters": filters, "kernel_size": [k, k],
            "strides": [strides, strides], "padding": padding,
            "data_format": "channels_last", "dilation_rate": [1, 1],
            "groups": 1, "activation": activation, "use_bias": use_bias,
            "kernel_initializer": {"class_name": "GlorotUniform",
                                   "config": {"seed": None}},
            "bias_initializer": {"class_name": "Zeros", "config": {}},
            "kernel_regularizer": None, "bias_regularizer": None,
            "activity_regularizer": None, "kernel_constraint": None,
            "bias_constraint": None}, [x])

    def bn(self, x, name):
        return self._add("BatchNormalization", name, {
            "axis": [3], "momentum": 0.99, "epsilon": 1.001e-5,
            "center": True, "scale": True}, [x])

    def act(self, x, name, a):
        return self._add("Activation", name, {"activation": a}, [x])

    def pad(self, x, name, p):
        return self._add("ZeroPadding2D", name, {
            "padding": [[p, p], [p, p]], "data_format": "channels_last"},
            [x])

    def maxpool(self, x, name, k, s):
        return self._add("MaxPooling2D", name, {
            "pool_size": [k, k], "padding": "valid", "strides": [s, s],
            "data_format": "channels_last"}, [x])

    def gap(self, x, name):
        return self._add("GlobalAveragePooling2D", name, {
            "data_format": "channels_last", "keepdims": False}, [x])

    def flatten(self, x, name):
        return self._add("Flatten", name, {"data_format": "channels_last"},
                         [x])

    def dense(self, x, name, units, activation="linear"):
        return self._add("Dense", name, {
            "units": units, "activation": activation, "use_bias": True},
            [x])

    def add(self, xs, name):
        return self._add("Add", name, {}, xs)

    def layer(self, cls, x, name, **config):
        return self._add(cls, name, config, x if isinstance(x, list) else [x])

    def dwconv(self, x, name, k, strides=1, padding="valid",
               use_bias=True):
        return self._add("DepthwiseConv2D", name, {
            "kernel_size": [k, k], "strides": [strides, strides],
            "padding": padding, "data_format": "channels_last",
            "dilation_rate": [1, 1], "depth_multiplier": 1,
            "activation": "linear", "use_bias": use_bias}, [x])

    def model(self, outputs):
        return {"class_name": "Functional",
                "config": {"name": self.name, "layers": self.layers,
                           "input_layers": [[n, 0, 0] for n in self.inputs],
                           "output_layers": [[n, 0, 0] for n in outputs]},
                "keras_version": "2.12.0", "backend": "tensorflow"}


def vgg16():
    """keras/applications/vgg16.py, include_top=True."""
    m = Functional("vgg16")
    x = m.input("input_1", [224, 224, 3])
    for b, (filters, n) in enumerate([(64, 2), (128, 2), (256, 3),
                                      (512, 3), (512, 3)], 1):
        for i in range(1, n + 1):
            x = m.conv(x, "block%d_conv%d" % (b, i), filters, 3,
                       padding="same", activation="relu")
        x = m.maxpool(x, "block%d_pool" % b, 2, 2)
    x = m.flatten(x, "flatten")
    x = m.dense(x, "fc1", 4096, "relu")
    x = m.dense(x, "fc2", 4096, "relu")
    x = m.dense(x, "predictions", 1000, "softmax")
    return m.model([x])


def resnet50():
    """keras/applications/resnet.py: ResNet50 (block1, stack1),
    include_top=True.  Its ZeroPadding2D layers have no trace op yet:
    import it with --allow-identity ZeroPadding2D (the parameters do not
    change; the spatial extents do)."""
    m = Functional("resnet50")

    def block1(x, filters, stride=1, conv_shortcut=True, name=None):
        if conv_shortcut:
            sc = m.conv(x, name + "_0_conv", 4 * filters, 1, strides=stride)
            sc = m.bn(sc, name + "_0_bn")
        else:
            sc = x
        x = m.conv(x, name + "_1_conv", filters, 1, strides=stride)
        x = m.bn(x, name + "_1_bn")
        x = m.act(x, name + "_1_relu", "relu")
        x = m.conv(x, name + "_2_conv", filters, 3, padding="same")
        x = m.bn(x, name + "_2_bn")
        x = m.act(x, name + "_2_relu", "relu")
        x = m.conv(x, name + "_3_conv", 4 * filters, 1)
        x = m.bn(x, name + "_3_bn")
        x = m.add([sc, x], name + "_add")
        return m.act(x, name + "_out", "relu")

    def stack1(x, filters, blocks, stride1=2, name=None):
        x = block1(x, filters, stride=stride1, name=name + "_block1")
        for i in range(2, blocks + 1):
            x = block1(x, filters, conv_shortcut=False,
                       name=name + "_block" + str(i))
        return x

    x = m.input("input_1", [224, 224, 3])
    x = m.pad(x, "conv1_pad", 3)
    x = m.conv(x, "conv1_conv", 64, 7, strides=2)
    x = m.bn(x, "conv1_bn")
    x = m.act(x, "conv1_relu", "relu")
    x = m.pad(x, "pool1_pad", 1)
    x = m.maxpool(x, "pool1_pool", 3, 2)
    x = stack1(x, 64, 3, stride1=1, name="conv2")
    x = stack1(x, 128, 4, name="conv3")
    x = stack1(x, 256, 6, name="conv4")
    x = stack1(x, 512, 3, name="conv5")
    x = m.gap(x, "avg_pool")
    x = m.dense(x, "predictions", 1000, "softmax")
    return m.model([x])


def mobilenet_v2():
    """keras/applications/mobilenet_v2.py, alpha 1.0, 224x224, top."""
    m = Functional("mobilenetv2_1.00_224")

    def divisible(v, d=8):
        n = max(d, int(v + d / 2) // d * d)
        return n + d if n < 0.9 * v else n

    def relu6(x, name):
        return m.layer("ReLU", x, name, max_value=6.0, negative_slope=0.0,
                       threshold=0.0)

    def bn(x, name):
        return m._add("BatchNormalization", name, {
            "axis": [3], "momentum": 0.999, "epsilon": 1e-3, "center": True,
            "scale": True}, [x])

    def block(x, cin, expansion, stride, filters, bid):
        pw = divisible(filters)
        prefix = "block_%d_" % bid
        inp = x
        if bid:
            x = m.conv(x, prefix + "expand", expansion * cin, 1,
                       padding="same", use_bias=False)
            x = bn(x, prefix + "expand_BN")
            x = relu6(x, prefix + "expand_relu")
        else:
            prefix = "expanded_conv_"
        if stride == 2:
            x = m.layer("ZeroPadding2D", x, prefix + "pad",
                        padding=[[0, 1], [0, 1]],
                        data_format="channels_last")
        x = m.dwconv(x, prefix + "depthwise", 3, stride,
                     "same" if stride == 1 else "valid", use_bias=False)
        x = bn(x, prefix + "depthwise_BN")
        x = relu6(x, prefix + "depthwise_relu")
        x = m.conv(x, prefix + "project", pw, 1, padding="same",
                   use_bias=False)
        x = bn(x, prefix + "project_BN")
        if cin == pw and stride == 1:
            return m.add([inp, x], prefix + "add"), pw
        return x, pw

    x = m.input("input_1", [224, 224, 3])
    first = divisible(32)
    x = m.conv(x, "Conv1", first, 3, 2, "same", use_bias=False)
    x = bn(x, "bn_Conv1")
    x = relu6(x, "Conv1_relu")
    c = first
    spec = [(16, 1, 1, 1), (24, 2, 6, 2), (32, 3, 6, 2), (64, 4, 6, 2),
            (96, 3, 6, 1), (160, 3, 6, 2), (320, 1, 6, 1)]
    bid = 0
    for f, n, t, s in spec:
        for i in range(n):
            x, c = block(x, c, t if bid else 1, s if i == 0 else 1, f, bid)
            bid += 1
    x = m.conv(x, "Conv_1", 1280, 1, use_bias=False)
    x = bn(x, "Conv_1_bn")
    x = relu6(x, "out_relu")
    x = m.gap(x, "global_average_pooling2d")
    x = m.dense(x, "predictions", 1000, "softmax")
    return m.model([x])


def mobilenet():
    """keras/applications/mobilenet.py, alpha 1.0, depth multiplier 1."""
    m = Functional("mobilenet_1.00_224")

    def bn(x, name):
        return m._add("BatchNormalization", name, {
            "axis": -1, "momentum": 0.99, "epsilon": 1e-3, "center": True,
            "scale": True}, [x])

    def relu6(x, name):
        return m.layer("ReLU", x, name, max_value=6.0, negative_slope=0.0,
                       threshold=0.0)

    def dw_block(x, filters, strides, bid):
        if strides == 2:
            x = m.layer("ZeroPadding2D", x, "conv_pad_%d" % bid,
                        padding=[[0, 1], [0, 1]],
                        data_format="channels_last")
        x = m.dwconv(x, "conv_dw_%d" % bid, 3, strides,
                     "same" if strides == 1 else "valid", use_bias=False)
        x = bn(x, "conv_dw_%d_bn" % bid)
        x = relu6(x, "conv_dw_%d_relu" % bid)
        x = m.conv(x, "conv_pw_%d" % bid, filters, 1, padding="same",
                   use_bias=False)
        x = bn(x, "conv_pw_%d_bn" % bid)
        return relu6(x, "conv_pw_%d_relu" % bid)

    x = m.input("input_1", [224, 224, 3])
    x = m.layer("ZeroPadding2D", x, "conv1_pad", padding=[[0, 1], [0, 1]],
                data_format="channels_last")
    x = m.conv(x, "conv1", 32, 3, 2, "valid", use_bias=False)
    x = bn(x, "conv1_bn")
    x = relu6(x, "conv1_relu")
    spec = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)] + \
        [(512, 1)] * 5 + [(1024, 2), (1024, 1)]
    for i, (f, s) in enumerate(spec):
        x = dw_block(x, f, s, i + 1)
    x = m.gap(x, "global_average_pooling2d")
    x = m.layer("Reshape", x, "reshape_1", target_shape=[1, 1, 1024])
    x = m.layer("Dropout", x, "dropout", rate=1e-3, noise_shape=None,
                seed=None)
    x = m.conv(x, "conv_preds", 1000, 1, padding="same")
    x = m.layer("Reshape", x, "reshape_2", target_shape=[1000])
    x = m.act(x, "predictions", "softmax")
    return m.model([x])


def efficientnet_b0():
    """keras/applications/efficientnet.py, B0 (width and depth 1.0)."""
    m = Functional("efficientnetb0")
    blocks = [(3, 1, 32, 16, 1, 1), (3, 2, 16, 24, 6, 2),
              (5, 2, 24, 40, 6, 2), (3, 3, 40, 80, 6, 2),
              (5, 3, 80, 112, 6, 1), (5, 4, 112, 192, 6, 2),
              (3, 1, 192, 320, 6, 1)]

    def bn(x, name):
        return m._add("BatchNormalization", name, {
            "axis": 3, "momentum": 0.99, "epsilon": 1e-3, "center": True,
            "scale": True}, [x])

    def pad_for(k):  # imagenet_utils.correct_pad on an even input
        return [[k // 2 - 1, k // 2], [k // 2 - 1, k // 2]]

    def block(x, name, fin, fout, k, s, e, drop):
        inp = x
        f = fin * e
        if e != 1:
            x = m.conv(x, name + "expand_conv", f, 1, padding="same",
                       use_bias=False)
            x = bn(x, name + "expand_bn")
            x = m.act(x, name + "expand_activation", "swish")
        if s == 2:
            x = m.layer("ZeroPadding2D", x, name + "dwconv_pad",
                        padding=pad_for(k), data_format="channels_last")
        x = m.dwconv(x, name + "dwconv", k, s, "same" if s == 1 else "valid",
                     use_bias=False)
        x = bn(x, name + "bn")
        x = m.act(x, name + "activation", "swish")
        se = m.layer("GlobalAveragePooling2D", x, name + "se_squeeze",
                     data_format="channels_last", keepdims=False)
        se = m.layer("Reshape", se, name + "se_reshape",
                     target_shape=[1, 1, f])
        se = m.conv(se, name + "se_reduce", max(1, int(fin * 0.25)), 1,
                    padding="same", activation="swish")
        se = m.conv(se, name + "se_expand", f, 1, padding="same",
                    activation="sigmoid")
        x = m.layer("Multiply", [x, se], name + "se_excite")
        x = m.conv(x, name + "project_conv", fout, 1, padding="same",
                   use_bias=False)
        x = bn(x, name + "project_bn")
        if s == 1 and fin == fout:
            if drop > 0:
                x = m.layer("Dropout", x, name + "drop", rate=drop,
                            noise_shape=[None, 1, 1, 1], seed=None)
            x = m.add([x, inp], name + "add")
        return x

    x = m.input("input_1", [224, 224, 3])
    x = m.layer("Rescaling", x, "rescaling", scale=1 / 255.0, offset=0.0)
    x = m.layer("Normalization", x, "normalization", axis=-1, mean=None,
                variance=None, invert=False)
    x = m.layer("ZeroPadding2D", x, "stem_conv_pad", padding=pad_for(3),
                data_format="channels_last")
    x = m.conv(x, "stem_conv", 32, 3, 2, "valid", use_bias=False)
    x = bn(x, "stem_bn")
    x = m.act(x, "stem_activation", "swish")
    total = sum(b[1] for b in blocks)
    b = 0
    for i, (k, r, fin, fout, e, s) in enumerate(blocks):
        for j in range(r):
            x = block(x, "block%d%s_" % (i + 1, chr(j + 97)),
                      fin if j == 0 else fout, fout, k, s if j == 0 else 1,
                      e, 0.2 * b / total)
            b += 1
    x = m.conv(x, "top_conv", 1280, 1, padding="same", use_bias=False)
    x = bn(x, "top_bn")
    x = m.act(x, "top_activation", "swish")
    x = m.gap(x, "avg_pool")
    x = m.layer("Dropout", x, "top_dropout", rate=0.2, noise_shape=None,
                seed=None)
    x = m.dense(x, "predictions", 1000, "softmax")
    return m.model([x])


def densenet121():
    """keras/applications/densenet.py, blocks [6, 12, 24, 16]."""
    m = Functional("densenet121")
    npad = [0]

    def bn(x, name):
        return m._add("BatchNormalization", name, {
            "axis": 3, "momentum": 0.99, "epsilon": 1.001e-5,
            "center": True, "scale": True}, [x])

    def zpad(x, p):
        name = "zero_padding2d" + ("_%d" % npad[0] if npad[0] else "")
        npad[0] += 1
        return m.layer("ZeroPadding2D", x, name, padding=[[p, p], [p, p]],
                       data_format="channels_last")

    def conv_block(x, c, name):
        x1 = bn(x, name + "_0_bn")
        x1 = m.act(x1, name + "_0_relu", "relu")
        x1 = m.conv(x1, name + "_1_conv", 128, 1, use_bias=False)
        x1 = bn(x1, name + "_1_bn")
        x1 = m.act(x1, name + "_1_relu", "relu")
        x1 = m.conv(x1, name + "_2_conv", 32, 3, padding="same",
                    use_bias=False)
        return m.layer("Concatenate", [x, x1], name + "_concat",
                       axis=3), c + 32

    def transition(x, c, name):
        x = bn(x, name + "_bn")
        x = m.act(x, name + "_relu", "relu")
        x = m.conv(x, name + "_conv", c // 2, 1, use_bias=False)
        x = m.layer("AveragePooling2D", x, name + "_pool", pool_size=[2, 2],
                    strides=[2, 2], padding="valid",
                    data_format="channels_last")
        return x, c // 2

    x = m.input("input_1", [224, 224, 3])
    x = zpad(x, 3)
    x = m.conv(x, "conv1/conv", 64, 7, 2, use_bias=False)
    x = bn(x, "conv1/bn")
    x = m.act(x, "conv1/relu", "relu")
    x = zpad(x, 1)
    x = m.maxpool(x, "pool1", 3, 2)
    c = 64
    for i, n in enumerate([6, 12, 24, 16]):
        for j in range(n):
            x, c = conv_block(x, c, "conv%d_block%d" % (i + 2, j + 1))
        if i < 3:
            x, c = transition(x, c, "pool%d" % (i + 2))
    x = bn(x, "bn")
    x = m.act(x, "relu", "relu")
    x = m.gap(x, "avg_pool")
    x = m.dense(x, "predictions", 1000, "softmax")
    return m.model([x])


def ops_block():
    """Every activation and merge class mapped to the trace's activation
    and elementwise ops, with squeeze-excite's broadcast multiply."""
    m = Functional("ops_block")
    x = m.input("x", [16, 16, 8])
    x = m.layer("Rescaling", x, "rescale", scale=1 / 255.0, offset=0.0)
    c1 = m.conv(x, "c1", 16, 3, padding="same", activation="gelu")
    p = m.layer("PReLU", c1, "prelu", shared_axes=[1, 2])
    g = m.gap(p, "se_pool")
    g = m.dense(g, "se_reduce", 4, "relu")
    g = m.dense(g, "se_expand", 16, "hard_sigmoid")
    se = m.layer("Multiply", [p, g], "se_mul")
    r6 = m.layer("ReLU", se, "relu6", max_value=6.0)
    lk = m.layer("LeakyReLU", se, "leaky", alpha=0.1)
    el = m.layer("ELU", se, "elu", alpha=1.0)
    sub = m.layer("Subtract", [r6, lk], "sub")
    mx = m.layer("Maximum", [sub, el], "max")
    av = m.layer("Average", [mx, se], "avg")
    a = m.act(av, "swish", "swish")
    a = m.act(a, "tanh", "tanh")
    a = m.conv(a, "c2", 10, 1, activation="silu")
    a = m.gap(a, "pool")
    a = m.dense(a, "predictions", 10, "softmax")
    return m.model([a])


def unet3d(cf):
    """A 3D U-Net for CT volumes as the widely used Keras code bases write
    it (keras.backend.set_image_data_format("channels_first"), Input((1,
    128, 128, 128))): conv-batchnorm-relu pairs, MaxPooling3D, one level up
    by UpSampling3D and one by Conv3DTranspose, Concatenate on the
    channels, a 1x1x1 sigmoid head.  cf=False writes its channels_last
    twin, which must import to the same trace."""
    fmt = "channels_first" if cf else "channels_last"
    m = Functional("unet3d")
    x = m.input("volume", [1, 128, 128, 128] if cf else [128, 128, 128, 1])

    def block(x, name, filters):
        x = m.layer("Conv3D", x, name + "_conv", filters=filters,
                    kernel_size=[3, 3, 3], strides=[1, 1, 1], padding="same",
                    data_format=fmt, dilation_rate=[1, 1, 1], groups=1,
                    activation="linear", use_bias=False)
        x = m.layer("BatchNormalization", x, name + "_bn",
                    axis=[1] if cf else [4], momentum=0.99, epsilon=0.001,
                    center=True, scale=True)
        return m.act(x, name + "_relu", "relu")

    def pool(x, name):
        return m.layer("MaxPooling3D", x, name, pool_size=[2, 2, 2],
                       padding="valid", strides=[2, 2, 2], data_format=fmt)

    def cat(xs, name):
        return m.layer("Concatenate", xs, name, axis=1 if cf else -1)

    e1 = block(block(x, "enc1a", 8), "enc1b", 16)
    e2 = block(block(pool(e1, "pool1"), "enc2a", 16), "enc2b", 32)
    b = block(block(pool(e2, "pool2"), "bot_a", 32), "bot_b", 64)
    u2 = m.layer("UpSampling3D", b, "up2", size=[2, 2, 2], data_format=fmt)
    d2 = block(block(cat([u2, e2], "cat2"), "dec2a", 32), "dec2b", 32)
    u1 = m.layer("Conv3DTranspose", d2, "up1", filters=32,
                 kernel_size=[2, 2, 2], strides=[2, 2, 2], padding="valid",
                 data_format=fmt, dilation_rate=[1, 1, 1],
                 output_padding=None, activation="linear", use_bias=True)
    d1 = block(block(cat([u1, e1], "cat1"), "dec1a", 16), "dec1b", 16)
    out = m.layer("Conv3D", d1, "mask", filters=1, kernel_size=[1, 1, 1],
                  strides=[1, 1, 1], padding="valid", data_format=fmt,
                  dilation_rate=[1, 1, 1], groups=1, activation="sigmoid",
                  use_bias=True)
    return m.model([out])


def cnn2d(cf):
    """A 2D classifier as a model ported from PyTorch is written
    (channels_first): conv, batchnorm on axis 1, pooling, ZeroPadding2D,
    squeeze-excite whose gate is reshaped to (C, 1, 1), Flatten and Dense.
    cf=False writes its channels_last twin."""
    fmt = "channels_first" if cf else "channels_last"
    m = Functional("cnn2d")
    x = m.input("image", [3, 32, 32] if cf else [32, 32, 3])

    def conv(x, name, filters, padding):
        return m.layer("Conv2D", x, name, filters=filters, kernel_size=[3, 3],
                       strides=[1, 1], padding=padding, data_format=fmt,
                       dilation_rate=[1, 1], groups=1, activation="relu",
                       use_bias=True)

    x = conv(x, "conv1", 16, "same")
    x = m.layer("BatchNormalization", x, "bn1", axis=[1] if cf else [3],
                momentum=0.99, epsilon=0.001, center=True, scale=True)
    x = m.layer("MaxPooling2D", x, "pool1", pool_size=[2, 2],
                padding="valid", strides=[2, 2], data_format=fmt)
    x = m.layer("ZeroPadding2D", x, "pad", padding=[[1, 1], [1, 1]],
                data_format=fmt)
    x = conv(x, "conv2", 32, "valid")
    g = m.layer("GlobalAveragePooling2D", x, "se_pool", data_format=fmt,
                keepdims=False)
    g = m.dense(g, "se_reduce", 8, "relu")
    g = m.dense(g, "se_expand", 32, "sigmoid")
    g = m.layer("Reshape", g, "se_reshape",
                target_shape=[32, 1, 1] if cf else [1, 1, 32])
    x = m.layer("Multiply", [x, g], "se_mul")
    x = m.layer("AveragePooling2D", x, "pool2", pool_size=[2, 2],
                padding="valid", strides=[2, 2], data_format=fmt)
    x = m.layer("Flatten", x, "flatten", data_format=fmt)
    x = m.dense(x, "fc1", 64, "relu")
    x = m.layer("Dropout", x, "drop", rate=0.5, noise_shape=None, seed=None)
    x = m.dense(x, "predictions", 10, "softmax")
    return m.model([x])


APPS = {"vgg16": vgg16, "resnet50": resnet50, "mobilenetv2": mobilenet_v2,
        "mobilenet": mobilenet, "efficientnetb0": efficientnet_b0,
        "densenet121": densenet121, "ops_block": ops_block,
        "unet3d_cf": lambda: unet3d(True), "unet3d_cl": lambda: unet3d(False),
        "cnn2d_cf": lambda: cnn2d(True), "cnn2d_cl": lambda: cnn2d(False)}


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: keras_apps.py OUTDIR")
    for name, build in APPS.items():
        path = os.path.join(sys.argv[1], name + ".json")
        with open(path, "w") as f:
            json.dump(build(), f, indent=1)
            f.write("\n")
        print("wrote", path)


if __name__ == "__main__":
    main()
