#!/usr/bin/env python3
"""Generates the tpuemu-trace/1 files in traces/ and traces/reference/.

The models follow the reference code they stand for (tensorflow/tpu
models/official/detection for RetinaNet, models/official/unet3d for 3D UNet,
models/official/resnet for ResNet-50, the seeds' Keras article for CIFAR-10);
traces/README.md says how each maps to its source and what is simplified.

Every layer's output shape is inferred here (TensorFlow's padding rules) and
checked: names unique and defined before use, add inputs of equal shape,
concat inputs of equal spatial extent, shared weights only between convs of
the same geometry.  The output is deterministic: same bytes on every run.

    python3 scripts/gen_traces.py            write every trace, print totals
    python3 scripts/gen_traces.py --check    exit 1 if a file on disk differs
    python3 scripts/gen_traces.py --table    print the totals as markdown
"""

import json
import os
import sys

FORMAT = "tpuemu-trace/1"
NAME_MAX = 63          # emu/graph.h GRAPH_NAME_MAX minus the terminator
MAX_IN = 8             # emu/graph.h GRAPH_MAX_IN
LINE_WIDTH = 150       # pretty printer: inline a value when it fits

SRC_LARGE_IMAGES = (
    "Cloud TPU guide 'Processing large images with Cloud TPU' (Dec 2019) and "
    "Google Cloud blog 'Train ML models on large images and 3D volumes with "
    "spatial partitioning on Cloud TPUs' (Oct 2019; "
    "cloud.google.com/tpu/docs/spatial-partitioning, "
    "cloud.google.com/blog/products/ai-machine-learning/"
    "train-ml-models-on-large-images-and-3d-volumes-with-spatial-partitioning-on-cloud-tpus)")

# MLPerf Training v0.6, Google's closed-division submission: every run's log,
# code and flags are public.  A step time is the median spacing of the log's
# consecutive `block_start` lines (one training loop each, first and last
# dropped) divided by the loop's steps.
SRC_MLPERF06 = ("MLPerf Training v0.6, Google submission "
                "(github.com/mlcommons/training_results_v0.6 at f312518, "
                "Google/results/%s/%s/result_0..4.txt; code and flags under "
                "Google/benchmarks/%s/implementations)")

# The MLPerf v0.6 ResNet-50 run on v3-2048 normalises batchnorm over groups
# of 8 cores (run_and_time.sh --distributed_group_size=8); the others over
# each core's own examples.
RESNET_BN_GROUP = {"v3-2048": 8}

# The 3D UNet's optimizer (tensorflow/tpu models/official/unet3d/
# unet_config.py: 'optimizer': 'adam').
UNET_OPTIMIZER = "adam"

# (slice, global batch, loop steps, step time s, runs' spread) of the six
# ResNet-50 v1.5 runs; every run_and_time.sh sets --enable_lars=True.
RESNET_MLPERF06 = (
    ("v3-32", 4096, 1252, 0.1311, None),
    ("v3-128", 16384, 313, 0.1309, None),
    ("v3-256", 32768, 157, 0.1358, "135.5-155.7 ms"),
    ("v3-512", 32768, 157, 0.0788, "78.7-92.4 ms"),
    ("v3-1024", 32768, 157, 0.0441, "42.4-45.4 ms"),
    ("v3-2048", 32768, 157, 0.0253, None),
)


class TraceError(Exception):
    pass


def _prod(xs):
    p = 1
    for x in xs:
        p *= x
    return p


def _same_out(n, s):
    return -(-n // s)


def _valid_out(n, k, s, d):
    eff = (k - 1) * d + 1
    if n < eff:
        raise TraceError("window %d larger than input %d" % (eff, n))
    return (n - eff) // s + 1


class Graph:
    """A layer list with shape inference, weight and MAC counting."""

    def __init__(self, nsp):
        self.nsp = nsp
        self.inputs = []
        self.layers = []
        self.shape = {}      # name -> (spatial tuple, channels)
        self.kind = {}       # name -> layer dict (inputs: None)
        self.weights = 0
        self.macs = 0
        self.place = None    # "core" written on every layer emitted

    # -- helpers ---------------------------------------------------------
    def _new_name(self, name):
        if not name or len(name) > NAME_MAX:
            raise TraceError("bad layer name %r" % name)
        if name in self.shape:
            raise TraceError("duplicate layer name %r" % name)

    def _get(self, name):
        if name not in self.shape:
            raise TraceError("%r used before it is defined" % name)
        return self.shape[name]

    def _vec(self, v, nsp):
        if isinstance(v, int):
            return [v] * nsp
        if len(v) != nsp:
            raise TraceError("expected %d numbers, got %r" % (nsp, v))
        return list(v)

    def _emit(self, layer, out):
        self._new_name(layer["name"])
        if self.place is not None:
            layer["core"] = self.place
        sp, c = out
        if c <= 0 or any(x <= 0 for x in sp):
            raise TraceError("%s: empty output %r" % (layer["name"], out))
        self.layers.append(layer)
        self.shape[layer["name"]] = (tuple(sp), c)
        self.kind[layer["name"]] = layer
        return layer["name"]

    # -- ops -------------------------------------------------------------
    def input(self, name, shape):
        self._new_name(name)
        sp, c = tuple(shape[:-1]), shape[-1]
        if len(sp) != self.nsp:
            raise TraceError("input %s: rank" % name)
        self.inputs.append({"name": name, "shape": list(shape)})
        self.shape[name] = (sp, c)
        self.kind[name] = None
        return name

    def conv(self, name, x, filters, kernel, strides=1, padding="same",
             dilation=1, use_bias=False, share=None, dtype=None, trainable=True,
             groups=1):
        sp, cin = self._get(x)
        if cin % groups or filters % groups:
            raise TraceError("%s: groups %d does not divide %d channels and %d filters"
                             % (name, groups, cin, filters))
        nsp = len(sp)
        k = self._vec(kernel, nsp)
        s = self._vec(strides, nsp)
        d = self._vec(dilation, nsp)
        if padding == "same":
            out = [_same_out(n, si) for n, si in zip(sp, s)]
        elif padding == "valid":
            out = [_valid_out(n, ki, si, di) for n, ki, si, di in zip(sp, k, s, d)]
        else:
            raise TraceError("%s: padding %r" % (name, padding))
        layer = {"name": name, "op": "conv", "in": x, "filters": filters, "kernel": k}
        if any(v != 1 for v in s):
            layer["strides"] = s
        if padding != "same":
            layer["padding"] = padding
        if any(v != 1 for v in d):
            layer["dilation"] = d
        if use_bias:
            layer["use_bias"] = True
        if groups != 1:
            layer["groups"] = groups
        if share is not None:
            src = self.kind.get(share)
            if src is None or src["op"] != "conv":
                raise TraceError("%s: share_weights %r is not a conv" % (name, share))
            if (src["filters"] != filters or src["kernel"] != k
                    or self.shape[src["in"]][1] != cin
                    or bool(src.get("use_bias")) != bool(use_bias)
                    or src.get("groups", 1) != groups):
                raise TraceError("%s: shares weights of %s with another geometry"
                                 % (name, share))
            layer["share_weights"] = share
        if not trainable:
            layer["trainable"] = False
        if dtype:
            layer["dtype"] = dtype
        self.macs += _prod(out) * _prod(k) * (cin // groups) * filters
        if share is None:
            self.weights += (_prod(k) * (cin // groups) * filters
                             + (filters if use_bias else 0))
        return self._emit(layer, (out, filters))

    def conv_t(self, name, x, filters, kernel, strides, padding="same", dtype=None,
               use_bias=False):
        sp, cin = self._get(x)
        nsp = len(sp)
        k = self._vec(kernel, nsp)
        s = self._vec(strides, nsp)
        if padding == "same":
            out = [n * si for n, si in zip(sp, s)]
        elif padding == "valid":
            out = [(n - 1) * si + max(ki, si) for n, ki, si in zip(sp, k, s)]
        else:
            raise TraceError("%s: padding %r" % (name, padding))
        layer = {"name": name, "op": "conv_transpose", "in": x, "filters": filters,
                 "kernel": k, "strides": s, "padding": padding}
        if use_bias:
            layer["use_bias"] = True
        if dtype:
            layer["dtype"] = dtype
        # Every input element meets every weight once (scatter form).
        self.macs += _prod(sp) * _prod(k) * cin * filters
        self.weights += _prod(k) * cin * filters + (filters if use_bias else 0)
        return self._emit(layer, (out, filters))

    def dense(self, name, x, units, use_bias=True, dtype=None, spatial=False):
        """spatial: Keras Dense on the channels of a spatial tensor (each
        position on its own, e.g. one row per ROI)."""
        sp, cin = self._get(x)
        if sp and not spatial:
            raise TraceError("%s: dense needs a flat input" % name)
        layer = {"name": name, "op": "dense", "in": x, "units": units}
        if not use_bias:
            layer["use_bias"] = False
        if dtype:
            layer["dtype"] = dtype
        self.macs += _prod(sp) * cin * units
        self.weights += cin * units + (units if use_bias else 0)
        return self._emit(layer, (sp, units))

    def _simple(self, name, op, x, dtype=None, **params):
        layer = {"name": name, "op": op, "in": x}
        layer.update(params)
        if dtype:
            layer["dtype"] = dtype
        return layer

    def bn(self, name, x, dtype=None, trainable=True, moving=False):
        sp, c = self._get(x)
        self.weights += 2 * c          # gamma and beta
        layer = self._simple(name, "batchnorm", x, dtype)
        if not trainable:
            layer["trainable"] = False
        if moving:
            layer["statistics"] = "moving"
        return self._emit(layer, (sp, c))

    def relu(self, name, x, dtype=None):
        return self._emit(self._simple(name, "relu", x, dtype), self._get(x))

    def dropout(self, name, x, rate, dtype=None):
        return self._emit(self._simple(name, "dropout", x, dtype, rate=rate),
                          self._get(x))

    def flatten(self, name, x, dtype=None, keep=0):
        """keep: the first `keep` spatial dims stay (one row per ROI)."""
        sp, c = self._get(x)
        if keep:
            out = (tuple(sp[:keep]) + (1,) * (len(sp) - keep), _prod(sp[keep:]) * c)
            return self._emit(self._simple(name, "flatten", x, dtype, keep=keep), out)
        return self._emit(self._simple(name, "flatten", x, dtype), ((), _prod(sp) * c))

    def gap(self, name, x, dtype=None):
        sp, c = self._get(x)
        if not sp:
            raise TraceError("%s: global_avgpool needs spatial input" % name)
        return self._emit(self._simple(name, "global_avgpool", x, dtype), ((), c))

    def pool(self, name, op, x, window, strides=None, padding="valid", dtype=None):
        sp, c = self._get(x)
        w = self._vec(window, len(sp))
        s = self._vec(strides, len(sp)) if strides is not None else list(w)
        if padding == "same":
            out = [_same_out(n, si) for n, si in zip(sp, s)]
        elif padding == "valid":
            out = [_valid_out(n, wi, si, 1) for n, wi, si in zip(sp, w, s)]
        else:
            raise TraceError("%s: padding %r" % (name, padding))
        params = {"window": w}
        if s != w:
            params["strides"] = s
        if padding != "valid":
            params["padding"] = padding
        return self._emit(self._simple(name, op, x, dtype, **params), (out, c))

    def maxpool(self, name, x, window, strides=None, padding="valid", dtype=None):
        return self.pool(name, "maxpool", x, window, strides, padding, dtype)

    def upsample(self, name, x, factor, dtype=None):
        sp, c = self._get(x)
        f = self._vec(factor, len(sp))
        return self._emit(self._simple(name, "upsample", x, dtype, factor=f),
                          ([n * fi for n, fi in zip(sp, f)], c))

    def add(self, name, xs, dtype=None):
        shapes = [self._get(x) for x in xs]
        if len(xs) < 2 or len(xs) > MAX_IN:
            raise TraceError("%s: add of %d tensors" % (name, len(xs)))
        if any(s != shapes[0] for s in shapes):
            raise TraceError("%s: add of unequal shapes %r" % (name, shapes))
        return self._emit(self._simple(name, "add", list(xs), dtype), shapes[0])

    def concat(self, name, xs, dtype=None):
        shapes = [self._get(x) for x in xs]
        if len(xs) < 2 or len(xs) > MAX_IN:
            raise TraceError("%s: concat of %d tensors" % (name, len(xs)))
        if any(s[0] != shapes[0][0] for s in shapes):
            raise TraceError("%s: concat of unequal extents %r" % (name, shapes))
        return self._emit(self._simple(name, "concat", list(xs), dtype),
                          (shapes[0][0], sum(s[1] for s in shapes)))

    def loss(self, name, xs, kind, dtype=None):
        if kind not in ("softmax_xent", "sigmoid_focal", "dice", "l2", "smooth_l1"):
            raise TraceError("%s: loss kind %r" % (name, kind))
        if isinstance(xs, str):
            self._get(xs)
            src = xs
        else:
            if len(xs) > MAX_IN:
                raise TraceError("%s: loss of %d tensors" % (name, len(xs)))
            for x in xs:
                self._get(x)
            src = list(xs)
        layer = {"name": name, "op": "loss", "in": src, "kind": kind}
        if dtype:
            layer["dtype"] = dtype
        return self._emit(layer, ((), 1))

    def roi_align(self, name, levels, rois, output, padded=False):
        shapes = [self._get(x) for x in levels]
        if any(len(sp) != 2 or c != shapes[0][1] for sp, c in shapes):
            raise TraceError("%s: roi_align levels %r" % (name, shapes))
        layer = {"name": name, "op": "roi_align", "in": list(levels), "rois": rois,
                 "output": list(output)}
        if padded:
            layer["levels"] = "padded"
        return self._emit(layer, ((rois,) + tuple(output), shapes[0][1]))

    def layer_count(self):
        return len(self.layers)


# -- models ---------------------------------------------------------------

RESNET50_STAGES = ((2, 64, 3, 1), (3, 128, 4, 2), (4, 256, 6, 2), (5, 512, 3, 2))


def resnet50_backbone(g, x, freeze_res2=False):
    """ResNet-50 v1.5 as tensorflow/tpu builds it (post-activation, BN after
    every conv, stride 2 in the 3x3 conv of a stage's first block, projection
    shortcut conv+BN on every stage's first block, convs without bias).
    Returns the outputs of stages 3, 4 and 5 (C3, C4, C5).

    freeze_res2: conv1, stage 2 and their batchnorms are not trained, as
    models/official/detection's base_config.py RESNET_FROZEN_VAR_PREFIX
    (resnet50/conv2d..conv2d_10 and batch_normalization..batch_normalization_10:
    the stem and res2's 10 convs) sets train.frozen_variable_prefix."""
    fr = not freeze_res2
    x = g.conv("conv1", x, 64, 7, strides=2, trainable=fr)
    x = g.bn("bn_conv1", x, trainable=fr)
    x = g.relu("conv1_relu", x)
    x = g.maxpool("pool1", x, 3, strides=2, padding="same")
    outs = {}
    for stage, mid, blocks, stride in RESNET50_STAGES:
        tr = not (freeze_res2 and stage == 2)
        for b in range(blocks):
            tag = "%d%s" % (stage, "abcdef"[b])
            s = stride if b == 0 else 1
            if b == 0:
                sc = g.conv("res%s_branch1" % tag, x, 4 * mid, 1, strides=s,
                            trainable=tr)
                sc = g.bn("bn%s_branch1" % tag, sc, trainable=tr)
            else:
                sc = x
            y = g.conv("res%s_branch2a" % tag, x, mid, 1, trainable=tr)
            y = g.bn("bn%s_branch2a" % tag, y, trainable=tr)
            y = g.relu("res%s_branch2a_relu" % tag, y)
            y = g.conv("res%s_branch2b" % tag, y, mid, 3, strides=s, trainable=tr)
            y = g.bn("bn%s_branch2b" % tag, y, trainable=tr)
            y = g.relu("res%s_branch2b_relu" % tag, y)
            y = g.conv("res%s_branch2c" % tag, y, 4 * mid, 1, trainable=tr)
            y = g.bn("bn%s_branch2c" % tag, y, trainable=tr)
            y = g.add("res%s" % tag, [y, sc])
            x = g.relu("res%s_relu" % tag, y)
        outs[stage] = x
    return outs


RETINANET_CLASSES = 90      # COCO ids as the TPU RetinaNet counts them
RETINANET_ANCHORS = 9       # 3 scales x 3 aspect ratios
FPN_DIMS = 256


def retinanet(size):
    """RetinaNet ResNet-50 + FPN P3-P7 (models/official/detection:
    resnet.py, fpn.py, heads.py RetinanetHead, retinanet losses)."""
    g = Graph(2)
    img = g.input("image", [size, size, 3])
    c = resnet50_backbone(g, img, freeze_res2=True)
    lat = {lvl: g.conv("fpn_l%d" % lvl, c[lvl], FPN_DIMS, 1, use_bias=True)
           for lvl in (3, 4, 5)}
    top = {5: lat[5]}
    for lvl in (4, 3):
        up = g.upsample("fpn_up%d" % (lvl + 1), top[lvl + 1], 2)
        top[lvl] = g.add("fpn_td%d" % lvl, [lat[lvl], up])
    feat = {}
    for lvl in (3, 4, 5):
        feat[lvl] = g.conv("fpn_post%d" % lvl, top[lvl], FPN_DIMS, 3, use_bias=True)
    # P6 from P5 (after its 3x3 post-hoc conv), P7 from relu(P6): fpn.py
    # "coarser FPN levels"; the older models/official/retinanet took C5.
    feat[6] = g.conv("fpn_p6", feat[5], FPN_DIMS, 3, strides=2, use_bias=True)
    p6r = g.relu("fpn_p6_relu", feat[6])
    feat[7] = g.conv("fpn_p7", p6r, FPN_DIMS, 3, strides=2, use_bias=True)
    p = {lvl: g.bn("p%d_bn" % lvl, feat[lvl]) for lvl in range(3, 8)}

    outs = {"class": [], "box": []}
    for lvl in range(3, 8):
        for head, n_out in (("class", RETINANET_CLASSES * RETINANET_ANCHORS),
                            ("box", 4 * RETINANET_ANCHORS)):
            x = p[lvl]
            for i in range(1, 5):
                share = None if lvl == 3 else "p3_%s_conv%d" % (head, i)
                x = g.conv("p%d_%s_conv%d" % (lvl, head, i), x, FPN_DIMS, 3,
                           use_bias=True, share=share)
                # Convs are shared across levels, batchnorm is per level.
                x = g.bn("p%d_%s_bn%d" % (lvl, head, i), x)
                x = g.relu("p%d_%s_relu%d" % (lvl, head, i), x)
            share = None if lvl == 3 else "p3_%s_out" % head
            outs[head].append(g.conv("p%d_%s_out" % (lvl, head), x, n_out, 3,
                                     use_bias=True, share=share))
    g.loss("class_loss", outs["class"], "sigmoid_focal", dtype="f32")
    g.loss("box_loss", outs["box"], "smooth_l1", dtype="f32")
    return g


def resnet50_classifier(size):
    g = Graph(2)
    img = g.input("image", [size, size, 3])
    c = resnet50_backbone(g, img)
    x = g.gap("pool5", c[5])
    x = g.dense("fc1000", x, 1000)
    g.loss("loss", x, "softmax_xent", dtype="f32")
    return g


MASKRCNN_CLASSES = 91     # COCO, background included (num_classes=91)
MASKRCNN_ANCHORS = 3      # one scale, 3 aspect ratios per location
MASKRCNN_BOX_ROIS = 512   # sampled ROIs per image (batch_size_per_im)
MASKRCNN_MASK_ROIS = 128  # the foreground ones, 512 x 0.25 (select_fg_for_masks)


def maskrcnn(placed, padded):
    """Mask R-CNN ResNet-50 + FPN P2-P6 as MLPerf Training v0.6's Google
    submission builds it (Google/benchmarks/maskrcnn/implementations/...:
    resnet.py, fpn.py, architecture.py, losses.py; traces/README.md).
    Input: the 832x1344 padded image after the host's space-to-depth,
    416x672x12.  Frozen batchnorm (moving statistics) everywhere; the stem
    and stage 2 do not train.  placed: the box head on core 2 and the mask
    head on core 1 of each replica (core_assignment_utils.py; only with
    num_cores_per_replica set).  padded: the ROIAlign's levels are padded to
    P2's extent and stacked (the v3-32/v3-128 code) instead of concatenated
    (v3-256)."""
    g = Graph(2)
    img = g.input("image", [416, 672, 12])
    x = g.conv("conv0_s2d", img, 64, 4, trainable=False)
    x = g.bn("bn_conv0", x, trainable=False, moving=True)
    x = g.relu("conv0_relu", x)
    x = g.maxpool("pool0", x, 3, strides=2, padding="same")
    c = {}
    for stage, mid, blocks, stride in RESNET50_STAGES:
        tr = stage != 2
        for b in range(blocks):
            tag = "%d%s" % (stage, "abcdef"[b])
            s = stride if b == 0 else 1
            if b == 0:
                sc = g.conv("res%s_branch1" % tag, x, 4 * mid, 1, strides=s,
                            trainable=tr)
                sc = g.bn("bn%s_branch1" % tag, sc, trainable=False, moving=True)
            else:
                sc = x
            y = g.conv("res%s_branch2a" % tag, x, mid, 1, trainable=tr)
            y = g.bn("bn%s_branch2a" % tag, y, trainable=False, moving=True)
            y = g.relu("res%s_branch2a_relu" % tag, y)
            y = g.conv("res%s_branch2b" % tag, y, mid, 3, strides=s, trainable=tr)
            y = g.bn("bn%s_branch2b" % tag, y, trainable=False, moving=True)
            y = g.relu("res%s_branch2b_relu" % tag, y)
            y = g.conv("res%s_branch2c" % tag, y, 4 * mid, 1, trainable=tr)
            y = g.bn("bn%s_branch2c" % tag, y, trainable=False, moving=True)
            y = g.add("res%s" % tag, [y, sc])
            x = g.relu("res%s_relu" % tag, y)
        c[stage] = x
    lat = {lvl: g.conv("fpn_l%d" % lvl, c[lvl], FPN_DIMS, 1, use_bias=True)
           for lvl in (2, 3, 4, 5)}
    top = {5: lat[5]}
    for lvl in (4, 3, 2):
        up = g.upsample("fpn_up%d" % (lvl + 1), top[lvl + 1], 2)
        top[lvl] = g.add("fpn_td%d" % lvl, [lat[lvl], up])
    p = {lvl: g.conv("fpn_post%d" % lvl, top[lvl], FPN_DIMS, 3, use_bias=True)
         for lvl in (2, 3, 4, 5)}
    p[6] = g.maxpool("fpn_p6", p[5], 1, strides=2)
    scores, boxes = [], []
    for lvl in range(2, 7):
        sh = None if lvl == 2 else "rpn_conv_p2"
        r = g.conv("rpn_conv_p%d" % lvl, p[lvl], FPN_DIMS, 3, use_bias=True,
                   share=sh)
        r = g.relu("rpn_relu_p%d" % lvl, r)
        scores.append(g.conv("rpn_score_p%d" % lvl, r, MASKRCNN_ANCHORS, 1,
                             use_bias=True,
                             share=None if lvl == 2 else "rpn_score_p2"))
        boxes.append(g.conv("rpn_box_p%d" % lvl, r, 4 * MASKRCNN_ANCHORS, 1,
                            use_bias=True,
                            share=None if lvl == 2 else "rpn_box_p2"))
    g.loss("rpn_score_loss", scores, "sigmoid_focal", dtype="f32")
    g.loss("rpn_box_loss", boxes, "smooth_l1", dtype="f32")
    levels = [p[lvl] for lvl in range(2, 7)]

    g.place = 2 if placed else None
    x = g.roi_align("box_roi_align", levels, MASKRCNN_BOX_ROIS, (7, 7), padded)
    x = g.flatten("box_flatten", x, keep=1)   # [rois, 1, 1, 7 x 7 x 256]
    x = g.dense("box_fc6", x, 1024, spatial=True)
    x = g.relu("box_fc6_relu", x)
    x = g.dense("box_fc7", x, 1024, spatial=True)
    x = g.relu("box_fc7_relu", x)
    cls = g.dense("box_class", x, MASKRCNN_CLASSES, spatial=True)
    box = g.dense("box_delta", x, 4 * MASKRCNN_CLASSES, spatial=True)
    g.loss("box_class_loss", cls, "softmax_xent", dtype="f32")
    g.loss("box_delta_loss", box, "smooth_l1", dtype="f32")

    g.place = 1 if placed else None
    x = g.roi_align("mask_roi_align", levels, MASKRCNN_MASK_ROIS, (14, 14), padded)
    for i in range(1, 5):
        x = g.conv("mask_conv%d" % i, x, FPN_DIMS, [1, 3, 3], use_bias=True)
        x = g.relu("mask_relu%d" % i, x)
    x = g.conv_t("mask_deconv", x, FPN_DIMS, [1, 2, 2], [1, 2, 2], padding="valid",
                 use_bias=True)
    x = g.relu("mask_deconv_relu", x)
    x = g.conv("mask_logits", x, MASKRCNN_CLASSES, 1, use_bias=True)
    g.loss("mask_loss", x, "sigmoid_focal", dtype="f32")
    g.place = None
    return g


# (slice, examples per replica, cores per replica, step time s, runs' spread)
# of the three Mask R-CNN runs: global batch 128, 924 steps a loop.
MASKRCNN_MLPERF06 = (
    ("v3-32", 4, 1, 0.4528, None),
    ("v3-128", 4, 4, 0.2446, "244.4-251.3 ms"),
    ("v3-256", 2, 4, 0.1485, "148.3-150.9 ms"),
)


# MobileNetV2 (Sandler et al., CVPR 2018, Table 2; Keras applications
# mobilenet_v2.py, alpha 1.0): t expansion, c channels, n repeats, s stride.
MOBILENET_V2_BLOCKS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                       (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


def mobilenet_v2(size):
    """MobileNetV2 1.0 as Keras builds it: a 3x3 stride-2 stem of 32, inverted
    residual blocks (1x1 expansion unless t = 1, 3x3 depthwise with the
    block's stride, linear 1x1 projection, a residual add where the stride
    is 1 and the channels match), a 1x1 head of 1280, global average pooling
    and a 1000-way classifier.  Convolutions have no bias (batchnorm
    follows).  ReLU6 is written as relu (the trace has no clipped relu: one
    vector operation per element either way); Keras's explicit zero padding
    before the stride-2 convolutions is 'same' padding (same output
    extents at 224)."""
    g = Graph(2)
    x = g.input("image", [size, size, 3])
    x = g.conv("Conv1", x, 32, [3, 3], strides=2)
    x = g.bn("bn_Conv1", x)
    x = g.relu("Conv1_relu", x)
    cin = 32
    b = 0
    for t, c, n, s in MOBILENET_V2_BLOCKS:
        for r in range(n):
            stride = s if r == 0 else 1
            p = "block_%d_" % b if b else "expanded_conv_"
            y = x
            if t != 1:
                y = g.conv(p + "expand", y, cin * t, [1, 1])
                y = g.bn(p + "expand_BN", y)
                y = g.relu(p + "expand_relu", y)
            ch = cin * t
            y = g.conv(p + "depthwise", y, ch, [3, 3], strides=stride, groups=ch)
            y = g.bn(p + "depthwise_BN", y)
            y = g.relu(p + "depthwise_relu", y)
            y = g.conv(p + "project", y, c, [1, 1])
            y = g.bn(p + "project_BN", y)
            if stride == 1 and cin == c:
                y = g.add(p + "add", [x, y])
            x = y
            cin = c
            b += 1
    x = g.conv("Conv_1", x, 1280, [1, 1])
    x = g.bn("Conv_1_bn", x)
    x = g.relu("out_relu", x)
    x = g.gap("global_average_pooling2d", x)
    x = g.dense("predictions", x, 1000)
    g.loss("loss", x, "softmax_xent", dtype="f32")
    return g


UNET_DEPTH = 4
UNET_BASE = 32
UNET_CLASSES = 3


SSD_LEVELS = ((3, 4), (4, 6), (5, 6), (6, 6), (7, 4), (8, 4))  # level, anchors
SSD_CLASSES = 81            # ssd_constants.NUM_CLASSES, "no class" included
SSD_EXTRA = ((4, 256, 512, 2, "same"), (5, 256, 512, 2, "same"),
             (6, 128, 256, 2, "same"), (7, 128, 256, 1, "valid"),
             (8, 128, 256, 1, "valid"))  # level, 1x1 filters, 3x3 filters, stride, padding


def ssd300(space_to_depth):
    """SSD with a ResNet-34 backbone at 300x300 as MLPerf Training v0.6's
    Google submission builds it (Google/benchmarks/ssd/implementations/
    tpu-v3-N-ssd/ssd: ssd_architecture.py, ssd_model.py, ssd_constants.py).
    space_to_depth: the host delivers the image as 150x150x12 and conv0 is
    the equivalent 4x4 stride-1 conv (hparam conv0_space_to_depth)."""
    g = Graph(2)
    if space_to_depth:
        img = g.input("image", [150, 150, 12])
        x = g.conv("conv0_s2d", img, 64, 4)
    else:
        img = g.input("image", [300, 300, 3])
        x = g.conv("conv0", img, 64, 7, strides=2)
    x = g.bn("bn_conv0", x)
    x = g.relu("conv0_relu", x)
    x = g.maxpool("pool0", x, 3, strides=2, padding="same")
    # block_group1..3 of resnet_v1_generator: [3, 4, 6] basic blocks; group 3
    # keeps stride 1 (38x38) and, as every group but the first, starts with a
    # projection shortcut.
    for grp, filters, blocks, stride in ((1, 64, 3, 1), (2, 128, 4, 2), (3, 256, 6, 1)):
        for b in range(blocks):
            tag = "g%d_b%d" % (grp, b)
            s = stride if b == 0 else 1
            if b == 0 and grp > 1:
                sc = g.conv(tag + "_proj", x, filters, 1, strides=s)
                sc = g.bn(tag + "_proj_bn", sc)
            else:
                sc = x
            y = g.conv(tag + "_conv1", x, filters, 3, strides=s)
            y = g.bn(tag + "_bn1", y)
            y = g.relu(tag + "_relu1", y)
            y = g.conv(tag + "_conv2", y, filters, 3)
            y = g.bn(tag + "_bn2", y)
            y = g.add(tag + "_add", [y, sc])
            x = g.relu(tag + "_relu", y)
    feats = {3: x}
    for lvl, f1, f3, stride, pad in SSD_EXTRA:
        y = g.conv("block%d_conv1x1" % (lvl + 3), feats[lvl - 1], f1, 1, use_bias=True)
        y = g.relu("block%d_relu1x1" % (lvl + 3), y)
        y = g.conv("block%d_conv3x3" % (lvl + 3), y, f3, 3, strides=stride,
                   padding=pad, use_bias=True)
        feats[lvl] = g.relu("block%d_relu3x3" % (lvl + 3), y)
    cls, box = [], []
    for lvl, anchors in SSD_LEVELS:
        cls.append(g.conv("class_%d" % lvl, feats[lvl], SSD_CLASSES * anchors, 3,
                          use_bias=True))
        box.append(g.conv("box_%d" % lvl, feats[lvl], 4 * anchors, 3, use_bias=True))
    g.loss("class_loss", cls, "softmax_xent", dtype="f32")
    g.loss("box_loss", box, "smooth_l1", dtype="f32")
    return g

# MLPerf Training v0.6, Google's SSD (run_and_time.sh of each slice): system,
# global batch, cores per replica (--input_partition_dims=1,4,1,1),
# distributed_group_size (run.batchnorm_group), conv0_space_to_depth,
# iterations_per_loop, step time (median over the 5 runs of the median
# block_start spacing per step, first block dropped; each block is a whole
# number of loops), spread over the runs.
SSD_MLPERF06 = (
    ("v3-32", 1024, 1, 2, False, 625, 0.10878, "107.2-109.9 ms"),
    ("v3-128", 1024, 1, 8, True, 625, 0.03292, None),
    ("v3-256", 1024, 1, 16, True, 625, 0.02316, None),
    ("v3-512", 2048, 1, 16, True, 313, 0.02266, None),
    ("v3-1024", 2048, 4, 8, True, 313, 0.01593, None),
    ("v3-2048", 2048, 4, 16, True, 313, 0.01286, "12.78-12.96 ms"),
)
# The row each is compared with at equal code: fewer examples per core, or
# the same examples per replica split over 4 cores.
SSD_BASELINE = {"v3-128": "v3-32", "v3-256": "v3-128", "v3-512": "v3-256",
                "v3-1024": "v3-128", "v3-2048": "v3-512"}


def unet3d(size):
    """3D UNet of models/official/unet3d/unet_model.py (unet3d_base) with the
    defaults of unet_config.py: depth 4, 32 base filters, batchnorm,
    deconvolution, 3 classes, 1 channel, channels_last."""
    g = Graph(3)
    x = g.input("image", [size, size, size, 1])

    def block(name, x, filters):
        # Conv3D keeps its default bias; batchnorm follows, then relu.
        x = g.conv(name + "_conv", x, filters, 3, use_bias=True)
        x = g.bn(name + "_bn", x)
        return g.relu(name + "_relu", x)

    skips = []
    for d in range(UNET_DEPTH):
        f = UNET_BASE * 2 ** d
        x = block("enc%d_a" % d, x, f)
        # The second conv of each level doubles the filters (unet3d_base).
        x = block("enc%d_b" % d, x, 2 * f)
        skips.append(x)
        if d < UNET_DEPTH - 1:
            x = g.maxpool("pool%d" % d, x, 2)
    for d in range(UNET_DEPTH - 2, -1, -1):
        # Conv3DTranspose keeps the channel count of its input (num_filters =
        # current_layer's channels), 2x2x2 stride 2, padding valid.
        ch = g.shape[x][1]
        up = g.conv_t("dec%d_up" % d, x, ch, 2, 2, padding="valid")
        x = g.concat("dec%d_concat" % d, [up, skips[d]])
        f = g.shape[skips[d]][1]
        x = block("dec%d_a" % d, x, f)
        x = block("dec%d_b" % d, x, f)
    x = g.conv("final_conv", x, UNET_CLASSES, 1, padding="valid", use_bias=True)
    # unet_config.py's default loss, and that of the configs/cloud/*_dice.yaml
    # files whose batch and partitioning match the published table.
    g.loss("loss", x, "dice", dtype="f32")
    return g


def cifar10_keras():
    """The seeds' Keras CIFAR-10 CNN (keras-cifar10-on-tpu-article.txt).  The
    Keras model is float32 throughout, so every layer is f32."""
    f = "f32"
    g = Graph(2)
    x = g.input("image", [32, 32, 3])
    x = g.bn("bn1", x, dtype=f)
    x = g.conv("conv1", x, 32, 3, use_bias=True, dtype=f)
    x = g.relu("conv1_relu", x, dtype=f)
    x = g.conv("conv2", x, 32, 3, use_bias=True, dtype=f)
    x = g.relu("conv2_relu", x, dtype=f)
    x = g.maxpool("pool1", x, 2, dtype=f)
    x = g.dropout("drop1", x, 0.25, dtype=f)
    x = g.bn("bn2", x, dtype=f)
    x = g.conv("conv3", x, 64, 3, use_bias=True, dtype=f)
    x = g.relu("conv3_relu", x, dtype=f)
    x = g.conv("conv4", x, 64, 3, padding="valid", use_bias=True, dtype=f)
    x = g.relu("conv4_relu", x, dtype=f)
    x = g.maxpool("pool2", x, 2, dtype=f)
    x = g.dropout("drop2", x, 0.25, dtype=f)
    x = g.flatten("flatten", x, dtype=f)
    x = g.dense("fc1", x, 512, dtype=f)
    x = g.relu("fc1_relu", x, dtype=f)
    x = g.dropout("drop3", x, 0.5, dtype=f)
    x = g.dense("fc2", x, 10, dtype=f)
    g.loss("loss", x, "softmax_xent", dtype=f)
    return g


# -- trace files ----------------------------------------------------------

def trace(name, graph, system, batch, cores_per_replica, pdims, reference=None,
          optimizer=None, bn_group=None, label_pdims=None):
    if _prod(pdims) != cores_per_replica:
        raise TraceError("%s: partition dims %r do not multiply to %d"
                         % (name, pdims, cores_per_replica))
    if len(pdims) != graph.nsp + 2:
        raise TraceError("%s: partition dims rank" % name)
    cores = int(system.split("-")[1])
    if cores % cores_per_replica or batch % (cores // cores_per_replica):
        raise TraceError("%s: batch %d does not divide over %d replicas"
                         % (name, batch, cores // cores_per_replica))
    t = {
        "format": FORMAT,
        "name": name,
        "system": system,
        "run": {
            "mode": "train",
            "global_batch": batch,
            "num_cores_per_replica": cores_per_replica,
            "input_partition_dims": [list(pdims),
                                     list(label_pdims) if label_pdims else None],
        },
    }
    if optimizer is not None:
        t["run"]["optimizer"] = optimizer
    if bn_group is not None:
        t["run"]["batchnorm_group"] = bn_group
    if reference is not None:
        t["reference"] = {"step_time_s": reference[0], "source": reference[1]}
        # family: the rows validate summarises together; baseline: the
        # trace this one is compared with at equal code.
        if len(reference) > 2:
            t["reference"]["family"] = reference[2]
        if len(reference) > 3 and reference[3]:
            t["reference"]["baseline"] = reference[3]
    t["graph"] = {"inputs": graph.inputs, "layers": graph.layers}
    return t


def all_traces():
    """(path, trace, graph) for every file this script owns."""
    r1280 = retinanet(1280)
    r2560 = retinanet(2560)
    u128 = unet3d(128)
    u256 = unet3d(256)
    rn50 = resnet50_classifier(224)
    cifar = cifar10_keras()
    mnv2 = mobilenet_v2(224)

    ref_r1280 = (0.910, SRC_LARGE_IMAGES + ": RetinaNet 1280x1280, v3-8, 8 cores, "
                 "global batch 64, step time 910 ms", "seed")
    ref_r2560 = (0.822, SRC_LARGE_IMAGES + ": RetinaNet 2560x2560, v3-64, 64 cores, "
                 "global batch 64, step time 822 ms (8 cores per replica, "
                 "[1,4,2,1] assumed: the code's default)", "seed",
                 "retinanet-r50-fpn-1280")
    ref_u128 = (3.428, SRC_LARGE_IMAGES + ": 3D UNet 128x128x128, v3-8, 8 cores, "
                "global batch 32, step time 3.428 s", "seed")
    ref_u256 = (3.02, SRC_LARGE_IMAGES + ": 3D UNet 256x256x256 (the guide misprints "
                "2560x2560; the blog gives 256^3 on 128 cores), v3-128, global batch "
                "32, step time 3.02 s, 16-way spatial partitioning", "seed",
                "unet3d-128")

    out = []
    t = trace("retinanet-r50-fpn-1280", r1280, "v3-8", 64, 1, [1, 1, 1, 1], ref_r1280)
    out.append(("traces/retinanet-1280-v3-8.json", t, r1280))
    out.append(("traces/reference/retinanet-1280-v3-8.json", t, r1280))
    out.append(("traces/reference/retinanet-2560-v3-64.json",
                trace("retinanet-r50-fpn-2560", r2560, "v3-64", 64, 8, [1, 4, 2, 1],
                      ref_r2560), r2560))
    out.append(("traces/reference/unet3d-128-v3-8.json",
                trace("unet3d-128", u128, "v3-8", 32, 1, [1, 1, 1, 1, 1], ref_u128,
                      UNET_OPTIMIZER),
                u128))
    out.append(("traces/reference/unet3d-256-v3-128.json",
                trace("unet3d-256", u256, "v3-128", 32, 16, [1, 16, 1, 1, 1], ref_u256,
                      UNET_OPTIMIZER, label_pdims=[1, 16, 1, 1, 1]),
                u256))
    prev = None
    for system, batch, loop, step, spread in RESNET_MLPERF06:
        cores = int(system.split("-")[1])
        src = (SRC_MLPERF06 % ("tpu-" + system, "resnet", "resnet")
               + ": ResNet-50 v1.5, 224x224, %s, global batch %d (%d per core), "
               "bf16, LARS; step time %.1f ms = median block_start spacing / %d "
               "steps%s" % (system, batch, batch // cores, step * 1e3, loop,
                            " (runs %s)" % spread if spread else ""))
        ref = (step, src, "resnet") + ((prev,) if prev else ())
        prev = "resnet50-v1.5-%s" % system
        out.append(("traces/reference/resnet50-%s.json" % system,
                    trace(prev, rn50, system, batch, 1, [1, 1, 1, 1], ref,
                          "lars", RESNET_BN_GROUP.get(system)), rn50))
    prev = None
    for system, per, cpr, step, spread in MASKRCNN_MLPERF06:
        m = maskrcnn(placed=cpr > 1, padded=system != "v3-256")
        name = "maskrcnn-r50-fpn-%s" % system
        src = (SRC_MLPERF06 % ("tpu-" + system, "mask", "mask")
               + ": Mask R-CNN R50-FPN, 832x1344 padded, %s, global batch 128 "
               "(%d per %s), bf16, momentum; %sstep time %.1f ms = median "
               "block_start spacing / 924 steps%s"
               % (system, per, "replica of %d cores" % cpr if cpr > 1 else "core",
                  "--input_partition_dims=1,4,1; " if cpr > 1 else "",
                  step * 1e3, " (runs %s)" % spread if spread else ""))
        pd = [1, 4, 1, 1] if cpr > 1 else [1, 1, 1, 1]
        out.append(("traces/reference/maskrcnn-%s.json" % system,
                    trace(name, m, system, 128, cpr, pd,
                          (step, src, "maskrcnn", prev)), m))
        prev = name
    for system, batch, cpr, bn, s2d, loop, step, spread in SSD_MLPERF06:
        g = ssd300(s2d)
        reps = int(system.split("-")[1]) // cpr
        src = (SRC_MLPERF06 % ("tpu-" + system, "ssd", "ssd")
               + ": SSD ResNet-34 300x300, %s, global batch %d (%d per %s), bf16, "
               "momentum, distributed_group_size=%d, conv0_space_to_depth=%s; %s"
               "step time %.2f ms = median block_start spacing / steps (blocks "
               "of whole %d-step loops)%s"
               % (system, batch, batch // reps,
                  "replica of %d cores" % cpr if cpr > 1 else "core", bn,
                  "true" if s2d else "false",
                  "--input_partition_dims=1,4,1,1; " if cpr > 1 else "",
                  step * 1e3, loop, " (runs %s)" % spread if spread else ""))
        base = SSD_BASELINE.get(system)
        ref = (step, src, "ssd") + (("ssd-resnet34-" + base,) if base else ())
        pd = [1, 4, 1, 1] if cpr > 1 else [1, 1, 1, 1]
        out.append(("traces/reference/ssd-%s.json" % system,
                    trace("ssd-resnet34-" + system, g, system, batch, cpr, pd, ref,
                          None, bn), g))
    # The seeds' memory boundary: 8 examples of 2560x2560 on one core do not
    # fit; the same 8 per replica fit again when split 4 or 8 ways.
    out.append(("traces/retinanet-2560-v3-8.json",
                trace("retinanet-r50-fpn-2560", r2560, "v3-8", 64, 1, [1, 1, 1, 1]),
                r2560))
    out.append(("traces/retinanet-2560-v3-8-p4.json",
                trace("retinanet-r50-fpn-2560-p4", r2560, "v3-8", 16, 4, [1, 2, 2, 1]),
                r2560))
    out.append(("traces/retinanet-2560-v3-8-p8.json",
                trace("retinanet-r50-fpn-2560-p8", r2560, "v3-8", 8, 8, [1, 4, 2, 1]),
                r2560))
    # RetinaNet at 640x640, 8 per core on v3-32: the setting of a public
    # TF2 implementation's training log (docs/VALIDATION.md, "Cross-checks
    # outside the set").
    r640 = retinanet(640)
    out.append(("traces/retinanet-640-v3-32.json",
                trace("retinanet-r50-fpn-640", r640, "v3-32", 256, 1, [1, 1, 1, 1]),
                r640))
    out.append(("traces/resnet50-224-v3-8.json",
                trace("resnet50-224", rn50, "v3-8", 1024, 1, [1, 1, 1, 1]), rn50))
    out.append(("traces/resnet50-224-v3-2048.json",
                trace("resnet50-224", rn50, "v3-2048", 65536, 1, [1, 1, 1, 1]), rn50))
    out.append(("traces/cifar10-keras-v2-8.json",
                trace("cifar10-keras", cifar, "v2-8", 1024, 1, [1, 1, 1, 1]), cifar))
    # tensorflow/tpu models/official/mobilenet trains with a global batch of
    # 1024 (its train_batch_size default) on a v2-8/v3-8 slice.
    out.append(("traces/mobilenet-v2-224-v3-8.json",
                trace("mobilenet-v2-224", mnv2, "v3-8", 1024, 1, [1, 1, 1, 1]), mnv2))
    return out


# -- output ---------------------------------------------------------------

def _fmt(v, indent, col=None):
    """v as JSON starting at column col (default indent); nested lines are
    indented by 2 more than the line that opens them."""
    col = indent if col is None else col
    flat = json.dumps(v, ensure_ascii=True, separators=(", ", ": "))
    if not isinstance(v, (dict, list)) or col + len(flat) <= LINE_WIDTH:
        return flat
    pad = " " * (indent + 2)
    if isinstance(v, dict):
        if not v:
            return "{}"
        items = []
        for k, x in v.items():
            key = json.dumps(k, ensure_ascii=True) + ": "
            items.append(pad + key + _fmt(x, indent + 2, indent + 2 + len(key)))
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    if not v:
        return "[]"
    items = [pad + _fmt(x, indent + 2) for x in v]
    return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"


def render(t):
    """Pretty JSON, 2-space indent; values that fit on a line stay inline
    (one layer per line), so the files read and diff well."""
    text = _fmt(t, 0) + "\n"
    if json.loads(text) != t:
        raise TraceError("pretty printer changed the value")
    return text


def check_refs(t):
    """Re-checks the written form: every `in` defined before use, each
    layer's keys only those of its op in docs/TRACE.md's op table."""
    allowed = {
        "conv": {"filters", "kernel", "strides", "padding", "dilation", "use_bias",
                 "share_weights", "trainable", "groups"},
        "conv_transpose": {"filters", "kernel", "strides", "padding", "trainable",
                           "use_bias"},
        "dense": {"units", "use_bias", "trainable"},
        "batchnorm": {"trainable", "statistics"},
        "roi_align": {"rois", "output", "levels"}, "relu": set(), "sigmoid": set(),
        "flatten": {"keep"},
        "global_avgpool": set(), "add": set(), "concat": set(),
        "maxpool": {"window", "strides", "padding"},
        "avgpool": {"window", "strides", "padding"},
        "upsample": {"factor"}, "dropout": {"rate"}, "loss": {"kind"},
    }
    seen = {i["name"] for i in t["graph"]["inputs"]}
    for layer in t["graph"]["layers"]:
        extra = (set(layer) - {"name", "op", "in", "dtype", "core"}
                 - allowed[layer["op"]])
        if extra:
            raise TraceError("%s: keys %r" % (layer["name"], sorted(extra)))
        ins = layer["in"] if isinstance(layer["in"], list) else [layer["in"]]
        for x in ins:
            if x not in seen:
                raise TraceError("%s: input %r not defined before" % (layer["name"], x))
        if "share_weights" in layer and layer["share_weights"] not in seen:
            raise TraceError("%s: share_weights not defined before" % layer["name"])
        seen.add(layer["name"])


def totals(g):
    return g.layer_count(), g.weights, g.macs / 1e9


def main(argv):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    mode = argv[1] if len(argv) > 1 else ""
    if mode not in ("", "--check", "--table"):
        sys.stderr.write("usage: gen_traces.py [--check | --table]\n")
        return 2
    try:
        items = all_traces()
        texts = []
        for path, t, g in items:
            check_refs(t)
            texts.append((path, render(t), t, g))
    except TraceError as e:
        sys.stderr.write("gen_traces: error: %s\n" % e)
        return 1

    if mode == "--table":
        print("| file | system | batch | cores/replica | partition | layers | weights | GMACs/example |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    bad = 0
    for path, text, t, g in texts:
        full = os.path.join(root, path)
        if mode == "--check":
            try:
                with open(full, encoding="utf-8") as f:
                    same = f.read() == text
            except OSError:
                same = False
            if not same:
                print("differs: %s" % path)
                bad += 1
            continue
        n, w, gm = totals(g)
        run = t["run"]
        if mode == "--table":
            print("| `%s` | %s | %d | %d | `%s` | %d | %s | %.2f |" % (
                path, t["system"], run["global_batch"], run["num_cores_per_replica"],
                json.dumps(run["input_partition_dims"][0], separators=(",", ":")),
                n, "{:,}".format(w), gm))
            continue
        os.makedirs(os.path.dirname(full), exist_ok=True)
        tmp = full + ".tmp"
        with open(tmp, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        os.replace(tmp, full)
        print("%-46s %4d layers %12s weights %9.3f GMACs/example" % (
            path, n, "{:,}".format(w), gm))
    if mode == "--check":
        print("%d of %d traces up to date" % (len(texts) - bad, len(texts)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
