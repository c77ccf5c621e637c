#!/usr/bin/python3
"""fx_reference.py -- numpy reference for `tpuemu run --functional`.

    fx_reference.py TRACE.json OUT.npy --seed S [--system SYS] [--batch G]
                    [--step N] [--mode infer|train] [--layerwise TPUEMU]
    fx_reference.py TRACE.json --seed S --write-ref REF.npy   (the reference itself)
    fx_reference.py --self-test [TRACE.json ...]

Recomputes, in float64 with numpy and independently of the emulator's code
(and of test/fxref.c), the output of the last non-loss layer of TRACE for the
whole global batch in the global layout [global_batch, spatial..., channels],
from the inputs and weights that emu/fx/fxdata.h defines (its counter-based
generator is re-implemented here with uint64 arithmetic), then compares it with
OUT.npy (the emulator's output: `tpuemu run TRACE --functional --seed S
--output-npy OUT.npy`, float32).  Prints the max absolute and relative error,
the largest fraction of the error bound used and the share of elements whose
bound is at least |ref|.  Exit status:
  0 passed: every element within the bound, and the bound informative;
  1 failed: an element outside the bound (or, with --layerwise, outside a
    layer's local bound);
  2 bad arguments or input;
  3 inconclusive: every element is within the bound, but the bound is at
    least |ref| (or not finite) on at least half the elements
    (LOOSE_SHARE; the measurements it was chosen from are beside it), so
    it cannot tell this output from another: on deep graphs (dozens of
    layers) the worst-case bound grows to the output's size or overflows,
    and a wrong seed's output "passed".  Use --layerwise there.

The error bound is a first-order running error analysis carried through the
graph alongside the values: for each stored tensor a bound E >= |emu - ref|
elementwise, assuming the emulator's arithmetic is what docs/FUNCTIONAL.md
says (bf16 operands for bf16 matrix layers, fp32 products and accumulation in
any order, each layer's output rounded to its dtype).  Per op, with
u16 = 2^-8 (bf16's unit roundoff, round to nearest even) and u32 = 2^-24:
  - storing to bf16 (or f32): rounding is monotone, so the emulator's stored
    value lies in [rnd(z - E), rnd(z + E)] (z the reference's value before
    rounding): E' = max |rnd(z +- E) - rnd(z)|.  That is 0 where no rounding
    boundary lies within E of z (both store the same number, the common case)
    and one ulp where one does: the rounding "flip" that two correct
    computations in different summation orders may differ by.
  - matrix layers (conv, conv_transpose, dense), K = taps x cin terms (a
    grouped conv, "groups": G, K = taps x cin / G: each output sums only its
    group's channels, and the expanded filter's zeros add +0 to a sum that is
    never -0, which changes no value, in any of the lowering's candidates):
    E' = sum_k |w_k| E_k + (K + 2) u32 sum_k |x_k w_k|  (Higham's gamma_K for
    an fp32 sum in any order, plus the product rounding of f32 layers; an
    f32 layer's products are bf16_3x on the MXU, adding 2^-14 sum_k |x_k w_k|; bf16
    products are exact in fp32).  Weights are identical on both sides.
  - relu: interval [relu(x - E), relu(x + E)] (0 where x + E < 0); concat,
    flatten, upsample, maxpool: E' = E (maxpool: the max of E over the window;
    all are 1-Lipschitz in the max norm).
  - add of n: sum of E + n u32 sum |x|; avgpool / global_avgpool over n:
    mean E + (n + 1) u32 mean |x|; sigmoid: its interval (at most E / 4) + 4 u32 |y|;
    dropout: E / (1 - rate) + u32 |y|.
  - activation (docs/TRACE.md's formulas, fp32 on the emulator): the input
    interval through the function, evaluated at both ends and at every
    turning point inside it (relu's kinks at 0 and max_value, gelu's and
    swish's minima), so exact for piecewise monotone functions; plus the
    fp32 evaluation: 2 u32 |y| for a product with fp32(alpha), LIB = 8 u32
    (4 ulps) relative per libm call (expf, erff, tanhf), u32 per other
    operation, and nothing where the emulator computes exactly (relu
    without alpha, relu6, the clips).  softmax: y_c (E_c + sum_j y_j E_j)
    (first order) + y_c (2 LIB + u32 (|x_c - m| + max_j |x_j - m| + C + 1)).
    prelu's slopes are a fresh layer's, zeros (Keras's alpha_initializer).
  - elementwise, the operands broadcast (per channel [C] or [1,1,C], per
    position [H,W,1]) and combined in input order: add of n: sum E +
    (n - 1) u32 sum |x|, average that / n + u32 |y|; subtract E0 + E1 +
    u32 |y|; multiply sum_k E_k prod_{j != k} |x_j| + (n - 1) u32 |y|;
    maximum and minimum exact, their interval [ext(x - E), ext(x + E)].
  - batchnorm in inference: y = x r with r = 1/sqrt(1 + eps) (the moving
    statistics of a fresh layer, mean 0 and variance 1): E' = E r + 4 u32 |y|.
  - batchnorm with "scale": false or "center": false (no gamma, no beta) computes
    with gamma 1 and beta 0, which a fresh layer's gamma and beta are too: the
    same values and bound (the emulator's y = xhat * 1 + 0 is xhat exactly).
  - batchnorm in training over N values: the mean's error Em = mean E + (N+1) u32 mean|x|,
    the variance's dv = 2 mean(|x - m| (E + Em)) + (N + 3) u32 mean(x^2)
    (covers the one-pass formula's cancellation too), and
    E' = (E + Em) r + |x - m| r^3 dv / 2 + 4 u32 |y| with r = 1/sqrt(var + eps).
First-order: products of two error terms are dropped (they are ~2^-16 of the
kept ones at these sizes).  It is a worst-case bound, not scaled by any fudge
factor: it never fails a correct emulator, and it is tight for shallow graphs
(most outputs must match exactly), but it loosens by about sum |w| per matrix
layer once flips are possible everywhere, so on deep graphs (cifar-small) it
only catches gross errors; there the C reference and the bit-identity across
partitionings are the sharp checks.

--layerwise TPUEMU: the sharper check for deep graphs.  It runs `TPUEMU run
TRACE --functional --seed S --output-layer NAME` (with --system/--batch) for
every stored tensor, then recomputes each layer from the emulator's OWN stored
inputs (which carry no error bound then: they are the values the emulator
read) and checks the emulator's output for that layer within the same
first-order bound, one layer deep (interval rounding at the store, gamma_K
for the fp32 sums): the bound does not compound, so it stays a fraction of
an ulp-level flip instead of growing with depth.  It is as sound as the
end-to-end bound (the same per-op analysis with the input error set to 0,
which it is: the inputs are the emulator's exact values), so a correct
emulator cannot fail it, and an error anywhere shows at the first layer it
enters (the layer is named).  The last layer's emulator output is OUT.npy
itself, so OUT.npy must come from the same trace, seed, --system and --batch
(and, in training, step 0).  Every input tensor must match exactly.  Layers
the emulator does not compute (a branch no loss reads, in training) keep the
reference's value and end-to-end bound.  A layer whose local bound is
>= |ref| on at least LOOSE_SHARE of its elements makes the result 3 (a
65536-term dense, whose gamma_K is ~|ref|, in chunks.json).  Measured: 0 on
every right-seed output of traces/functional/ but chunks, and on unsplit deep
nets written for the purpose (UNet, HRNet and DeepLab inference, DeepLab
training; up to 224 stored tensors), largest local bound used 1.000 (one flip of one ulp, what the
bound allows); 1 on every wrong-seed output tried.  Cost: one emulator run per layer (deep-chain 2 s, deeplab
133 layers 35 s on 2 cores).
"""

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

G = 0x9E3779B97F4A7C15
M1 = 0xBF58476D1CE4E5B9
M2 = 0x94D049BB133111EB
MASK = (1 << 64) - 1
TAG_LABEL, TAG_TEMPLATE, TAG_INPUT, TAG_WEIGHT, TAG_DROPOUT = 1, 1000, 2000, 100000, 200000
U16 = 2.0 ** -8
U32 = 2.0 ** -24
# An f32 matrix layer multiplies on the MXU as bf16_3x (docs/FUNCTIONAL.md):
# a = ah + al + ra with ah = bf16(a), al = bf16(a - ah), |ra| <= 2^-16 |a|,
# and the al*bl product dropped: |ab - (ah bh + ah bl + al bh)| <=
# (2^-16 + 2^-16 + 2^-16 + 2^-16 + ...) |a||b| < 2^-14 |a||b|.
X3 = 2.0 ** -14
BN_EPS = 1e-3


class BadInput(Exception):
    pass


# ---- fxdata.h's generator --------------------------------------------------

def fx_hash(seed, tag, idx):
    """splitmix64's finalizer over seed*G + tag*M1 + idx*M2 + G (mod 2^64)."""
    idx = np.asarray(idx, dtype=np.uint64)
    base = np.uint64(((seed * G) + (tag * M1) + G) & MASK)
    with np.errstate(over="ignore"):
        z = base + idx * np.uint64(M2)
        z ^= z >> np.uint64(30)
        z *= np.uint64(M1)
        z ^= z >> np.uint64(27)
        z *= np.uint64(M2)
        z ^= z >> np.uint64(31)
    return z


def fx_u(seed, tag, idx):
    return (fx_hash(seed, tag, idx) >> np.uint64(40)).astype(np.float64) * 2.0 ** -24


def fx_v(seed, tag, idx):
    return 2.0 * fx_u(seed, tag, idx) - 1.0


def fx_class(seed, step, gb, ncls):
    ncls = max(ncls, 1)
    y = np.floor(fx_u(seed, TAG_LABEL, step * gb + np.arange(gb)) * ncls).astype(np.int64)
    return np.minimum(y, ncls - 1)


def to_bf16(x):
    """float64 -> float32 -> bf16 (round to nearest even), as float64."""
    f = np.asarray(x, dtype=np.float64).astype(np.float32)
    b = f.view(np.uint32).astype(np.uint64)
    b = (b + np.uint64(0x7FFF) + ((b >> np.uint64(16)) & np.uint64(1))) & np.uint64(0xFFFF0000)
    return b.astype(np.uint32).view(np.float32).astype(np.float64)


def to_f32(x):
    return np.asarray(x, dtype=np.float64).astype(np.float32).astype(np.float64)


def store(z, ez, rnd):
    """Rounds to a layer's dtype.  The emulator's value before rounding lies
    in [z - ez, z + ez]; rounding is monotone, so its stored value lies in
    [rnd(z - ez), rnd(z + ez)]: the new bound is exact interval arithmetic,
    0 where no rounding boundary falls inside the interval (then both sides
    store the same number), one ulp or so where one does."""
    y = rnd(z)
    with np.errstate(over="ignore", invalid="ignore"):
        ez = ez + 2.0 ** -50 * np.abs(z)    # numpy's own double rounding of z
        e = np.maximum(np.abs(rnd(z + ez) - y), np.abs(rnd(z - ez) - y))
    # A bound past float32's range rounds to inf (deep graphs: the bound
    # grows by about sum |w| per matrix layer); it stays inf, never NaN
    # (inf times a zero weight), so such elements count as uninformative.
    return y, np.where(np.isnan(e), np.inf, e)


# ---- the trace: layers and shapes (TensorFlow padding rules) ----------------

def dims(v, n, default):
    if v is None:
        return [default] * n
    if isinstance(v, int):
        return [v] * n
    if not isinstance(v, list) or len(v) != n:
        raise BadInput("expected %d numbers, found %r" % (n, v))
    return list(v)


def load_trace(path):
    try:
        with open(path) as f:
            t = json.load(f)
        gr = t["graph"]
        layers = []
        for i in gr["inputs"]:
            shape = list(i["shape"])
            layers.append({"name": i["name"], "op": "input", "in": [],
                           "dtype": i.get("dtype", "bf16"),
                           "sp": shape[:-1], "c": shape[-1]})
        n_inputs = len(layers)
        index = {L["name"]: k for k, L in enumerate(layers)}
        for d in gr["layers"]:
            ins = d["in"] if isinstance(d["in"], list) else [d["in"]]
            L = dict(d)
            L["in"] = [index[n] for n in ins]
            L.setdefault("dtype", "bf16")
            for k in ("scale", "center"):
                if not isinstance(L.get(k, True), bool):
                    raise BadInput("%s: %r: expected true or false" % (k, L[k]))
            infer_shape(layers, L)
            index[L["name"]] = len(layers)
            layers.append(L)
        return t, layers, n_inputs
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise BadInput("%s: %s" % (path, e))


def infer_shape(layers, L):
    src = layers[L["in"][0]]
    sp, c = list(src["sp"]), src["c"]
    n = len(sp)
    op = L["op"]
    if op in ("conv", "maxpool", "avgpool"):
        pool = op != "conv"
        k = dims(L.get("window") if pool else L.get("kernel"), n, 1)
        s = dims(L.get("strides"), n, None) if pool else dims(L.get("strides"), n, 1)
        if pool and L.get("strides") is None:
            s = list(k)
        dil = [1] * n if pool else dims(L.get("dilation"), n, 1)
        same = L.get("padding", "valid" if pool else "same") == "same"
        out, plo = [], []
        for d in range(n):
            span = (k[d] - 1) * dil[d] + 1
            if same:
                o = -(-sp[d] // s[d])
                tot = max((o - 1) * s[d] + span - sp[d], 0)
                out.append(o)
                plo.append(tot // 2)
            else:
                out.append(-(-(sp[d] - span + 1) // s[d]))
                plo.append(0)
        L.update(k=k, s=s, dil=dil, plo=plo)
        sp = out
        if not pool:
            c = L["filters"]
    elif op == "conv_transpose":
        k = dims(L.get("kernel"), n, 1)
        s = dims(L.get("strides"), n, 1)
        same = L.get("padding", "same") == "same"
        out, plo = [], []
        for d in range(n):
            if same:
                out.append(sp[d] * s[d])
                plo.append(k[d] - 1 - max(k[d] - s[d], 0) // 2)
            else:
                out.append((sp[d] - 1) * s[d] + max(k[d], s[d]))
                plo.append(k[d] - 1)
        L.update(k=k, s=s, dil=[1] * n, plo=plo)
        sp, c = out, L["filters"]
    elif op == "dense":
        c = L["units"]
    elif op == "flatten":
        c, sp = int(np.prod(sp)) * c, []
    elif op == "global_avgpool":
        sp = []
    elif op == "concat":
        c = sum(layers[j]["c"] for j in L["in"])
    elif op == "upsample":
        f = dims(L.get("factor"), n, 1)
        L["f"] = f
        sp = [a * b for a, b in zip(sp, f)]
    elif op == "loss":
        sp, c = [], 1
    elif op == "activation":
        act_params(L)
    elif op == "elementwise":
        sp, c = elementwise_shape(layers, L)
    elif op not in ("batchnorm", "relu", "sigmoid", "add", "dropout"):
        raise BadInput("unknown op %r" % op)
    L["sp"], L["c"] = sp, c


ACT_KINDS = ("relu", "relu6", "leaky_relu", "elu", "gelu", "swish", "hard_sigmoid", "tanh",
             "softmax", "prelu")
EW_KINDS = ("multiply", "subtract", "maximum", "minimum", "average", "add")


def act_params(L):
    """activation's kind and parameters, with docs/TRACE.md's defaults:
    alpha 0 (relu's negative slope), 0.3 (leaky_relu), 1 (elu); relu's
    max_value none."""
    kind = L.get("kind")
    if kind not in ACT_KINDS:
        raise BadInput("activation %r: kind %r" % (L["name"], kind))
    has_alpha = kind in ("relu", "leaky_relu", "elu")
    if ("alpha" in L and not has_alpha) or ("max_value" in L and kind != "relu"):
        raise BadInput("activation %r: %s takes no %s" % (L["name"], kind,
                                                          "alpha" if "alpha" in L else "max_value"))
    L["alpha_"] = float(L.get("alpha", {"leaky_relu": 0.3, "elu": 1.0}.get(kind, 0.0)))
    L["max_value_"] = float(L["max_value"]) if "max_value" in L else None


def elementwise_shape(layers, L):
    """The largest operand's shape (the first of equals); every other operand
    has it, or is one value per example and channel ([C] or [1,1,C]), or one
    per position (the output's spatial extent, C = 1)."""
    if L.get("kind") not in EW_KINDS:
        raise BadInput("elementwise %r: kind %r" % (L["name"], L.get("kind")))
    ops = [layers[j] for j in L["in"]]
    if not 2 <= len(ops) <= 16 or (L["kind"] == "subtract" and len(ops) != 2):
        raise BadInput("elementwise %r: %d operands" % (L["name"], len(ops)))
    size = [int(np.prod(M["sp"])) * M["c"] for M in ops]
    big = ops[size.index(max(size))]
    sp, c = list(big["sp"]), big["c"]
    for M in ops:
        if ew_broadcast(M, sp, c) is None:
            raise BadInput("elementwise %r: operand %r %s does not broadcast to %s"
                           % (L["name"], M["name"], M["sp"] + [M["c"]], sp + [c]))
    return sp, c


def ew_broadcast(M, sp, c):
    """How operand M meets an output [sp..., c]: "same", "channel",
    "position", or None (refused)."""
    if list(M["sp"]) == sp and M["c"] == c:
        return "same"
    if M["c"] == 1 and sp and list(M["sp"]) == sp:
        return "position"
    if M["c"] == c and sp and all(d == 1 for d in M["sp"]):
        return "channel"
    return None


# ---- activations: the value, where it may turn, what fp32 evaluation adds ----

# A libm call (expf, erff, tanhf) is taken to be within 4 ulps (glibc's
# tables give 1, 1 and 2); one fp32 ulp is at most 2^-23 |y| = 2 u32 |y|.
LIB = 8 * U32


def _erf(x):
    return np.frompyfunc(math.erf, 1, 1)(x).astype(np.float64)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _newton(f, df, x):
    for _ in range(60):
        x -= f(x) / df(x)
    return x


# The minima of gelu and swish, where the interval evaluation must look
# (f' = 0): gelu' = Phi(x) + x phi(x), swish' = s (1 + x (1 - s)).
_PHI = lambda x: 0.5 * (1 + math.erf(x / math.sqrt(2)))      # noqa: E731
_phi = lambda x: math.exp(-x * x / 2) / math.sqrt(2 * math.pi)  # noqa: E731
_sg = lambda x: 1 / (1 + math.exp(-x))                         # noqa: E731
GELU_MIN = _newton(lambda x: _PHI(x) + x * _phi(x), lambda x: 2 * _phi(x) - x * x * _phi(x), -0.75)
SWISH_MIN = _newton(lambda x: _sg(x) * (1 + x * (1 - _sg(x))),
                    lambda x: _sg(x) * (1 - _sg(x)) * (2 + x * (1 - 2 * _sg(x))), -1.28)


def interval_err(f, x, E, turns):
    """max |f(x') - f(x)| over |x' - x| <= E, for f monotone between the
    points `turns` (its kinks and extrema): f at both ends and at every
    turning point inside gives the range exactly."""
    y = f(x)
    lo, hi = x - E, x + E
    pts = [lo, hi] + [np.clip(t, lo, hi) for t in turns]
    vs = [f(p) for p in pts]
    return np.maximum(np.maximum.reduce(vs) - y, y - np.minimum.reduce(vs))


def act_forward(L, x, E, slopes):
    """activation per docs/TRACE.md: the value, and its bound (the input's
    error through the function, plus the fp32 evaluation's own).  slopes:
    prelu's, one per channel."""
    kind, a, mv = L["kind"], L["alpha_"], L["max_value_"]
    u = U32
    neg = (x - E) < 0           # the negative branch may be taken
    if kind == "softmax":
        m = x.max(axis=-1, keepdims=True)
        ex = np.exp(x - m)
        y = ex / ex.sum(axis=-1, keepdims=True)
        # d y_c = y_c (d x_c - sum_j y_j d x_j) (first order); fp32: x - m
        # (u |x - m| through exp), expf, the sum of C terms, the divide
        ein = y * (E + (y * E).sum(axis=-1, keepdims=True))
        arg = u * np.abs(x - m)
        rel = arg + LIB + arg.max(axis=-1, keepdims=True) + LIB + x.shape[-1] * u + u
        return y, ein + rel * y
    if kind == "relu":
        # Keras's relu(x, alpha, max_value): clip(x, 0, max_value) + alpha
        # min(x, 0); the negative part is not clipped
        def f(v):
            return np.clip(v, 0.0, mv if mv is not None else np.inf) + a * np.minimum(v, 0.0)
        turns = [0.0] + ([mv] if mv is not None else [])
        y = f(x)
        # alpha rounded to fp32 and its product; the clip's fp32 max_value
        ev = np.where(neg, 2 * u * np.abs(a * np.minimum(x, 0.0)), 0.0)
        if mv is not None:
            ev = ev + np.where(x + E >= mv, abs(mv - float(np.float32(mv))), 0.0)
        return y, interval_err(f, x, E, turns) + ev
    if kind == "relu6":
        def f(v):
            return np.clip(v, 0.0, 6.0)
        return f(x), interval_err(f, x, E, [0.0, 6.0])
    if kind in ("leaky_relu", "prelu"):
        s = a if kind == "leaky_relu" else slopes

        def f(v):
            return np.where(v > 0, v, s * v)
        y = f(x)
        return y, interval_err(f, x, E, [0.0]) + np.where(neg, 2 * u * np.abs(s * x), 0.0)
    if kind == "elu":
        def f(v):
            return np.where(v > 0, v, a * np.expm1(np.minimum(v, 0.0)))
        y = f(x)
        # alpha (fp32) * (expf(v) - 1): expf's error, the subtraction, the product
        ex = np.exp(np.minimum(x, 0.0))
        ev = np.where(neg, abs(a) * (LIB * ex + u * np.abs(ex - 1)) + 2 * u * np.abs(y), 0.0)
        return y, interval_err(f, x, E, [0.0]) + ev
    if kind == "gelu":
        def f(v):
            return 0.5 * v * (1.0 + _erf(v / math.sqrt(2.0)))
        y = f(x)
        # erff's argument v * fp32(1/sqrt2) off by 2 u |v| / sqrt2, times
        # erf' = sqrt(2/pi) e^(-v^2/2); erff; 1 + erf; the product with 0.5 v
        er = _erf(x / math.sqrt(2.0))
        darg = 2 * u * np.abs(x) * math.sqrt(2 / math.pi) * np.exp(-0.5 * x * x)
        ev = 0.5 * np.abs(x) * (darg + LIB * np.abs(er) + u * np.abs(1 + er)) + u * np.abs(y)
        return y, interval_err(f, x, E, [GELU_MIN]) + ev
    if kind == "swish":
        def f(v):
            return v * _sigmoid(v)
        y = f(x)
        # expf(-v), 1 + e, the divide, the product: (LIB + 3 u) relative
        return y, interval_err(f, x, E, [SWISH_MIN]) + (LIB + 3 * u) * np.abs(y)
    if kind == "hard_sigmoid":
        def f(v):
            return np.clip(0.2 * v + 0.5, 0.0, 1.0)
        y = f(x)
        # fp32(0.2) and its product, the sum: before the (exact) clip
        t = 0.2 * x + 0.5
        et = 2 * u * 0.2 * np.abs(x) + u * np.abs(t)
        inside = (t + 0.2 * E + et > 0) & (t - 0.2 * E - et < 1)
        return y, interval_err(f, x, E, [-2.5, 2.5]) + np.where(inside, et, 0.0)
    # tanh
    y = np.tanh(x)
    return y, interval_err(np.tanh, x, E, []) + LIB * np.abs(y)


def ew_forward(kind, xs, Es):
    """elementwise per docs/TRACE.md, the operands already broadcast to the
    output (numpy's rules), combined in input order in fp32: the value and
    its bound."""
    n, u = len(xs), U32
    ax = [np.abs(v) for v in xs]
    if kind in ("add", "average"):
        z = sum(xs)
        ez = sum(Es) + (n - 1) * u * sum(ax)      # n - 1 fp32 additions
        if kind == "average":
            z = z / n
            ez = ez / n + u * np.abs(z)
    elif kind == "subtract":
        z = xs[0] - xs[1]
        ez = Es[0] + Es[1] + u * np.abs(z)
    elif kind == "multiply":
        z = xs[0]
        for v in xs[1:]:
            z = z * v
        ez = (n - 1) * u * np.abs(z)
        for k in range(n):
            p = Es[k]
            for j in range(n):
                if j != k:
                    p = p * ax[j]
            ez = ez + p
    else:   # maximum, minimum: exact; an interval in the inputs
        red = np.maximum if kind == "maximum" else np.minimum
        z = red.reduce(np.broadcast_arrays(*xs))
        lo = red.reduce(np.broadcast_arrays(*[v - e for v, e in zip(xs, Es)]))
        hi = red.reduce(np.broadcast_arrays(*[v + e for v, e in zip(xs, Es)]))
        ez = np.maximum(hi - z, z - lo)
    return z, np.broadcast_to(ez, np.shape(z)).copy()


# ---- forward with error bounds ----------------------------------------------

def window_slices(x, fill, k, s, dil, plo, out):
    """Yields, per tap (row-major over the kernel), x at o*s - plo + t*dil
    for every output position o, `fill` outside the input: [B, out..., C]."""
    n = len(k)
    pads = [(0, 0)]
    for d in range(n):
        need = (out[d] - 1) * s[d] + (k[d] - 1) * dil[d] + 1
        pads.append((plo[d], max(need - plo[d] - x.shape[1 + d], 0)))
    pads.append((0, 0))
    xp = np.pad(x, pads, constant_values=fill)
    for t in np.ndindex(*k):
        idx = [slice(None)]
        for d in range(n):
            a = t[d] * dil[d]
            idx.append(slice(a, a + (out[d] - 1) * s[d] + 1, s[d]))
        idx.append(slice(None))
        yield xp[tuple(idx)]


def stuff(x, s):
    """conv_transpose's input dilated by the strides: xd[j*s] = x[j]."""
    shape = [x.shape[0]] + [(n - 1) * f + 1 for n, f in zip(x.shape[1:-1], s)] + [x.shape[-1]]
    xd = np.zeros(shape)
    xd[(slice(None),) + tuple(slice(None, None, f) for f in s) + (slice(None),)] = x
    return xd


class Ref:
    def __init__(self, trace, layers, n_inputs, seed, step, gb, replicas, train):
        self.t, self.layers, self.n_inputs = trace, layers, n_inputs
        self.seed, self.step, self.gb, self.replicas, self.train = seed, step, gb, replicas, train
        self.ncls = 1
        for L in layers:
            if L["op"] == "loss":
                self.ncls = layers[L["in"][0]]["c"]
                break

    def weights(self, i, taps, cin, cout):
        L = self.layers[i]
        owner = i
        if "share_weights" in L:
            owner = next(k for k, M in enumerate(self.layers) if M["name"] == L["share_weights"])
            while "share_weights" in self.layers[owner]:
                nm = self.layers[owner]["share_weights"]
                owner = next(k for k, M in enumerate(self.layers) if M["name"] == nm)
        lim = math.sqrt(6.0 / (taps * cin + taps * cout))
        w = (fx_v(self.seed, TAG_WEIGHT + owner, np.arange(taps * cin * cout)) * lim)
        w = w.astype(np.float32).astype(np.float64)
        if L["dtype"] == "bf16":
            w = to_bf16(w)
        return w.reshape(taps, cin, cout)

    def slopes(self, c):
        """prelu's slopes as a fresh layer holds them: Keras's
        alpha_initializer, zeros (docs/FUNCTIONAL.md), as batchnorm's gamma
        1 and beta 0 are a fresh layer's."""
        return np.zeros(c)

    def input(self, n):
        L = self.layers[n]
        E = int(np.prod(L["sp"])) * L["c"]
        b = np.arange(self.gb)[:, None]
        e = np.arange(E)[None, :]
        y = fx_class(self.seed, self.step, self.gb, self.ncls)[:, None]
        tv = fx_v(self.seed, TAG_TEMPLATE + n, y * E + e)
        xv = fx_v(self.seed, TAG_INPUT + n, (self.step * self.gb + b) * E + e)
        x = 0.5 * tv + 0.5 * xv
        x = to_bf16(x) if L["dtype"] == "bf16" else to_f32(x)
        return x.reshape([self.gb] + L["sp"] + [L["c"]])

    def matrix(self, i, x, E, src_bf16):
        L = self.layers[i]
        if L["dtype"] == "bf16" and not src_bf16:
            x, E = store(x, E, to_bf16)
        cin, cout = x.shape[-1], L["c"]
        if L["op"] == "dense":
            w = self.weights(i, 1, cin, cout)[0]
            return x @ w, E @ np.abs(w) + (cin + 2) * U32 * (np.abs(x) @ np.abs(w)) \
                + X3 * (L["dtype"] != "bf16") * (np.abs(x) @ np.abs(w))
        taps = int(np.prod(L["k"]))
        # groups (conv only): output channel f reads the input channels of
        # its group f // (cout // G) through Keras's kernel [taps, cin/G,
        # cout]; expanded here to a block-diagonal [taps, cin, cout] whose
        # zeros add nothing (exactly, in float64), so the sums below are the
        # groups' own and the bound's K is taps x cin / G
        G = int(L.get("groups", 1)) if L["op"] == "conv" else 1
        cig, cog = cin // G, cout // G
        wg = self.weights(i, taps, cig, cout)
        w = np.zeros((taps, cin, cout))
        for g in range(G):
            w[:, g * cig:(g + 1) * cig, g * cog:(g + 1) * cog] = \
                wg[:, :, g * cog:(g + 1) * cog]
        if L["op"] == "conv_transpose":
            x, E = stuff(x, L["s"]), stuff(E, L["s"])
            s = [1] * len(L["k"])
        else:
            s = L["s"]
        out = L["sp"]
        z = np.zeros([x.shape[0]] + out + [cout])
        ez = np.zeros_like(z)
        sa = np.zeros_like(z)
        aw = np.abs(w)
        for t, (xs, es) in enumerate(zip(window_slices(x, 0.0, L["k"], s, L["dil"], L["plo"], out),
                                         window_slices(E, 0.0, L["k"], s, L["dil"], L["plo"], out))):
            z += xs @ w[t]
            ez += es @ aw[t]
            sa += np.abs(xs) @ aw[t]
        return z, ez + ((taps * cig + 2) * U32 + X3 * (L["dtype"] != "bf16")) * sa

    def run(self, given=None):
        """The reference of every layer and its bound.  With `given` (a
        function of the layer index returning the emulator's stored tensor
        or None), each layer is also checked locally: computed from the
        emulator's own stored inputs (bound 0 on them), compared with the
        emulator's output for it, and the emulator's tensor is what later
        layers read; the checks land in self.local."""
        with np.errstate(over="ignore", invalid="ignore"):
            return self._run(given)

    def _run(self, given):
        vals, errs = [], []
        self.local = []
        for i, L in enumerate(self.layers):
            op = L["op"]
            if op == "loss":
                vals.append(None)
                errs.append(None)
                continue
            if op == "input":
                y = self.input(i)
                vals.append(y)
                errs.append(np.zeros_like(y))
                self.take(given, i, vals, errs)
                continue
            x, E = vals[L["in"][0]], errs[L["in"][0]]
            src_bf16 = self.layers[L["in"][0]]["dtype"] == "bf16"
            if op in ("conv", "conv_transpose", "dense"):
                z, ez = self.matrix(i, x, E, src_bf16)
            elif op == "relu":
                # monotone: the emulator's value lies in [relu(x-E), relu(x+E)]
                z = np.maximum(x, 0.0)
                ez = np.maximum(np.maximum(x + E, 0.0) - z, z - np.maximum(x - E, 0.0))
            elif op == "sigmoid":
                # monotone and 1/4-Lipschitz; + the fp32 exp and divide
                z = 1.0 / (1.0 + np.exp(-x))
                ez = np.minimum(E / 4, np.maximum(1.0 / (1.0 + np.exp(-(x + E))) - z,
                                                  z - 1.0 / (1.0 + np.exp(-(x - E))))) \
                    + 4 * U32 * np.abs(z)
            elif op == "flatten":
                z, ez = x.reshape(self.gb, -1), E.reshape(self.gb, -1)
            elif op == "global_avgpool":
                ax = tuple(range(1, x.ndim - 1))
                n = int(np.prod(x.shape[1:-1]))
                z = x.mean(axis=ax)
                ez = E.mean(axis=ax) + (n + 1) * U32 * np.abs(x).mean(axis=ax)
            elif op == "add":
                xs = [vals[j] for j in L["in"]]
                z = sum(xs)
                ez = sum(errs[j] for j in L["in"]) + len(xs) * U32 * sum(np.abs(a) for a in xs)
            elif op == "concat":
                z = np.concatenate([vals[j] for j in L["in"]], axis=-1)
                ez = np.concatenate([errs[j] for j in L["in"]], axis=-1)
            elif op == "upsample":
                z, ez = x, E
                for d, f in enumerate(L["f"]):
                    z, ez = np.repeat(z, f, axis=1 + d), np.repeat(ez, f, axis=1 + d)
            elif op == "maxpool":
                args = (L["k"], L["s"], L["dil"], L["plo"], L["sp"])
                z = np.maximum.reduce(list(window_slices(x, -np.inf, *args)))
                ez = np.maximum.reduce(list(window_slices(E, 0.0, *args)))
            elif op == "avgpool":
                args = (L["k"], L["s"], L["dil"], L["plo"], L["sp"])
                cnt = sum(window_slices(np.ones_like(x), 0.0, *args))
                z = sum(window_slices(x, 0.0, *args)) / cnt
                sa = sum(window_slices(np.abs(x), 0.0, *args)) / cnt
                ez = sum(window_slices(E, 0.0, *args)) / cnt + (cnt + 1) * U32 * sa
            elif op == "dropout":
                if self.train:
                    n = int(np.prod(x.shape[1:]))
                    idx = (self.step * self.gb + np.arange(self.gb)[:, None]) * n + np.arange(n)[None, :]
                    keep = (fx_u(self.seed, TAG_DROPOUT + i, idx) >= L["rate"]).reshape(x.shape)
                    sc = 1.0 / (1.0 - L["rate"])
                    z = np.where(keep, x * sc, 0.0)
                    ez = np.where(keep, E * sc + U32 * np.abs(z), 0.0)
                else:
                    z, ez = x, E
            elif op == "batchnorm":
                z, ez = self.batchnorm(x, E)
            elif op == "activation":
                z, ez = act_forward(L, x, E, self.slopes(L["c"]))
            elif op == "elementwise":
                xs, es = [], []
                for j in L["in"]:
                    M = self.layers[j]
                    # a per-channel operand ([C] or [1,1,C]) as [B, 1.., C];
                    # a per-position one [B, sp.., 1] broadcasts as it is
                    shp = [self.gb] + ([1] * len(L["sp"]) + [L["c"]]
                                       if ew_broadcast(M, L["sp"], L["c"]) == "channel"
                                       else list(vals[j].shape[1:]))
                    xs.append(vals[j].reshape(shp))
                    es.append(errs[j].reshape(shp))
                z, ez = ew_forward(L["kind"], xs, es)
            else:
                raise BadInput("op %r has no forward value" % op)
            y, ey = store(z, ez, to_bf16 if L["dtype"] == "bf16" else to_f32)
            vals.append(y)
            errs.append(ey)
            self.take(given, i, vals, errs)
        last = max(k for k, L in enumerate(self.layers) if L["op"] != "loss")
        return vals[last], errs[last], vals

    def take(self, given, i, vals, errs):
        if given is None:
            return
        t = given(i)
        if t is None:
            return      # not available: later layers read the reference and its bound
        t = np.asarray(t, dtype=np.float64)
        if t.shape != vals[i].shape:
            self.local.append((i, None, "shape %s, the reference %s"
                               % (list(t.shape), list(vals[i].shape))))
            return
        self.local.append((i, judge(t, vals[i], errs[i]), None))
        vals[i], errs[i] = t, np.zeros_like(t)

    def batchnorm(self, x, E):
        if not self.train:
            # Inference normalises with the moving statistics, a fresh
            # Keras layer's (mean 0, variance 1): y = x / sqrt(1 + eps)
            # (gamma 1, beta 0).  The emulator rounds r to fp32 (u32) and
            # the product (u32): 4 u32 |y| covers both.
            r = 1.0 / math.sqrt(1.0 + BN_EPS)
            y = x * r
            return y, E * r + 4 * U32 * np.abs(y)
        if self.replicas < 1 or self.gb % self.replicas:
            raise BadInput("batch %d does not divide into %d replicas" % (self.gb, self.replicas))
        per = self.gb // self.replicas
        c = x.shape[-1]
        xr = x.reshape(self.replicas, -1, c)     # per replica: (per x positions, C)
        er = E.reshape(self.replicas, -1, c)
        n = xr.shape[1]
        m = xr.mean(axis=1, keepdims=True)
        var = ((xr - m) ** 2).mean(axis=1, keepdims=True)
        r = 1.0 / np.sqrt(var + BN_EPS)
        y = (xr - m) * r
        em = er.mean(axis=1, keepdims=True) + (n + 1) * U32 * np.abs(xr).mean(axis=1, keepdims=True)
        dv = 2 * (np.abs(xr - m) * (er + em)).mean(axis=1, keepdims=True) + \
            (n + 3) * U32 * (xr ** 2).mean(axis=1, keepdims=True)
        ey = (er + em) * r + np.abs(xr - m) * r ** 3 * dv / 2 + 4 * U32 * np.abs(y)
        return y.reshape(x.shape), ey.reshape(x.shape)


def system_cores(name):
    try:
        return int(name.split("-", 1)[1])
    except (IndexError, ValueError):
        raise BadInput("system %r: expected a slice name such as v3-8" % name)


def make_ref(trace_path, seed, system=None, batch=None, step=0, mode=None):
    t, layers, n_inputs = load_trace(trace_path)
    run = t["run"]
    gb = batch if batch is not None else run["global_batch"]
    cores = system_cores(system or t["system"])
    cpr = run.get("num_cores_per_replica", 1)
    if cores % cpr or gb % (cores // cpr):
        raise BadInput("%s: batch %d does not divide into %d replicas" % (trace_path, gb, cores // cpr))
    train = (mode or run["mode"]) == "train"
    return Ref(t, layers, n_inputs, seed, step, gb, cores // cpr, train)


# When is the bound informative?  An element whose bound is at least |ref|
# (or not finite) accepts 0 and any value of ref's sign up to 2 |ref|: it
# cannot tell the reference's value from an unrelated one.  When that holds
# on at least LOOSE_SHARE of the elements, a pass says nothing and the
# script exits 3 (inconclusive) instead of 0.  Elements whose bound is 0
# (the output must match exactly) are informative whatever |ref| is.
# Chosen from measurements (seed 1 against the emulator's seed-1 and
# seed-2 outputs, every trace in traces/functional/ and small UNet, HRNet,
# DeepLab and V-Net nets written for the purpose, infer and train, every
# split): the share of elements with bound >= |ref| is
# 0-0.04 on conv2d, conv3d, deconv, dense-heads, pool-up-concat, resadd,
# tiny-train, train-ops, views-dtype, 0.225 on frozen-stem, 0.509 on
# cifar-nobn (there the wrong seed still fails on 200 of 320 elements),
# and 1.000 on every trace whose wrong-seed output passed: chunks,
# cifar-small and all 4 x 2 x 9 of those nets (bounds 1e0 to 1e31 x |ref|,
# inf on deeplab train).  Nothing lies between 0.51 and 1.0; the line is
# drawn at one half ("most elements cannot fail"), on the cautious side,
# so cifar-nobn is inconclusive too.
LOOSE_SHARE = 0.5


def judge(emu, ref, bound):
    """Elementwise: |emu - ref|, outside the bound (NaN counts), loose."""
    emu = np.asarray(emu, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        d = np.abs(emu - ref)
        bad = ~(d <= bound)
        loose = ~((bound < np.abs(ref)) | (bound == 0))
        used = np.where(bound > 0, d / np.where(bound > 0, bound, 1), np.where(d > 0, np.inf, 0))
        used = np.where(np.isinf(bound) & np.isfinite(d), 0, used)
    return {"d": d, "bad": bad, "loose": loose, "used": used, "emu": emu, "ref": ref,
            "bound": bound, "share": float(loose.mean()) if loose.size else 0.0}


def compare(emu, ref, bound, label=""):
    """Prints the errors; True when every element is within its bound."""
    j = judge(emu, ref, bound)
    d, bad = j["d"], j["bad"]
    rel = d / np.maximum(np.abs(ref), 1e-30)
    finite = np.isfinite(bound)
    print("%smax abs error %.3e, max rel error %.3e, max bound used %.3f, "
          "exact %d of %d, outside the bound %d; the bound is >= |ref| on %.1f%% "
          "of elements%s"
          % (label, np.nanmax(d) if d.size else 0, np.nanmax(rel) if d.size else 0,
             np.nanmax(j["used"]) if d.size else 0, int((d == 0).sum()), d.size, int(bad.sum()),
             100 * j["share"], "" if finite.all() else
             " (not finite on %.1f%%)" % (100 * (~finite).mean())))
    if bad.any():
        k = int(np.flatnonzero(bad.ravel())[0])
        at = np.unravel_index(k, ref.shape)
        print("%sfirst outside: at %s emu %.9g ref %.9g bound %.3g"
              % (label, list(map(int, at)), j["emu"].ravel()[k], ref.ravel()[k], bound.ravel()[k]))
    return not bad.any()


def loose_share(ref, bound):
    return judge(ref, ref, bound)["share"]


def inconclusive_msg(share, what="the error bound"):
    return ("inconclusive: %s is at least |reference| (or not finite) on %.0f%% of "
            "elements (limit %.0f%%): the bound cannot tell this output from another "
            "(an all-zero output would pass on those elements); a pass proves nothing here"
            % (what, 100 * share, 100 * LOOSE_SHARE))


# ---- self-test: numpy against the C reference (test/fxref.c) ----------------

C_DRIVER = r"""
#include <stdio.h>
#include <stdlib.h>
#include "test/fxref.h"
int main(int argc, char **argv)
{
    graph g; tpu_error err; double *o = NULL; int64_t n = 0; FILE *f;
    if (argc != 4) return 2;
    if (graph_load(&g, argv[1], &err)) { fprintf(stderr, "%s\n", err.msg); return 2; }
    if (fxref_forward(&g, strtoull(argv[2], NULL, 10), 0, g.global_batch, g.train,
                      &o, &n, &err)) { fprintf(stderr, "%s\n", err.msg); return 2; }
    f = fopen(argv[3], "wb");
    if (!f || fwrite(o, sizeof *o, (size_t)n, f) != (size_t)n) return 2;
    fclose(f); free(o); graph_free(&g);
    return 0;
}
"""


def self_test(root, traces):
    tmp = tempfile.mkdtemp(prefix="fxref-")
    ok = True
    try:
        lib = os.path.join(root, "build", "libtpuemu.a")
        if not os.path.exists(lib):
            print("self-test: %s missing (run make first)" % lib)
            return 2
        drv = os.path.join(tmp, "drv.c")
        with open(drv, "w") as f:
            f.write(C_DRIVER + '#include "test/fxref.c"\n')
        libs = subprocess.run(["pkg-config", "--libs", "libcjson", "libpng"],
                              capture_output=True, text=True).stdout.split()
        cflags = subprocess.run(["pkg-config", "--cflags", "libcjson", "libpng"],
                                capture_output=True, text=True).stdout.split()
        exe = os.path.join(tmp, "drv")
        r = subprocess.run(["cc", "-std=c11", "-O2", "-I", root] + cflags +
                           [drv, lib, "-o", exe] + libs + ["-lm"], capture_output=True, text=True)
        if r.returncode:
            print(r.stderr)
            return 2
        # The generator against fxdata.c's published constants: hash(0,0,0)
        # is splitmix64's finalizer of G, whose first output is well known.
        h = int(fx_hash(0, 0, 0))
        if h != 0xE220A8397B1DCDAF:
            print("self-test: fx_hash(0,0,0) = %016x, expected e220a8397b1dcdaf" % h)
            ok = False
        for tr in traces:
            name = os.path.basename(tr)
            for seed in (1, 2):
                raw = os.path.join(tmp, "c.bin")
                r = subprocess.run([exe, tr, str(seed), raw], capture_output=True, text=True)
                if r.returncode:
                    print("self-test: %s: C reference failed: %s" % (name, r.stderr.strip()))
                    ok = False
                    continue
                ref = make_ref(tr, seed)
                y, e, _ = ref.run()
                c = np.fromfile(raw, dtype=np.float64)
                if c.size != y.size:
                    print("self-test: %s: C gives %d values, numpy %d" % (name, c.size, y.size))
                    ok = False
                    continue
                c = c.reshape(y.shape)
                # C vs numpy (both double): equal but for summation order,
                # which can flip a bf16 rounding, so the same bound applies.
                ok &= compare(c, y, e, "self-test %s seed %d C vs numpy: " % (name, seed))
                # Through a .npy as the emulator writes it (float32).
                npy = os.path.join(tmp, "emu.npy")
                np.save(npy, c.astype(np.float32))
                emu = np.load(npy)
                ok &= emu.shape == y.shape and compare(emu, y, e, "self-test %s seed %d npy: " % (name, seed))
                # The check must be able to fail: one wrong element (a dropped
                # term of the sum, well above the bound) is caught.
                k = int(np.argmax(np.abs(y.ravel())))
                bad = emu.astype(np.float64).ravel().copy()
                bad[k] += 16 * e.ravel()[k] + 1e-3 * abs(y.ravel()[k]) + 1e-6
                if compare(bad.reshape(y.shape), y, e, "self-test %s perturbed (must fail): " % name):
                    print("self-test: %s: a perturbed element passed" % name)
                    ok = False
                bound_rel = np.max(e / np.maximum(np.abs(y), 1e-30))
                print("self-test %s: bound relative to |ref|: max %.3g, median %.3g"
                      % (name, bound_rel, float(np.median(e / np.maximum(np.abs(y), 1e-30)))))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("self-test: %s" % ("ok" if ok else "FAILED"))
    return 0 if ok else 1


def emulator_layers(tpuemu, trace, layers, seed, system, batch, tmp, last, out):
    """Runs `tpuemu run TRACE --functional --output-layer NAME` for every
    stored tensor (in parallel) and returns given(i) for Ref.run: the
    emulator's tensor of layer i (the last layer's is OUT.npy itself), or
    None where the emulator gives none (a branch no loss reads in training
    is not computed)."""
    import concurrent.futures
    todo = [k for k, L in enumerate(layers) if L["op"] != "loss" and k != last]
    paths, errors = {}, {}

    def one(k):
        path = os.path.join(tmp, "L%d.npy" % k)
        cmd = [tpuemu, "run", trace, "--functional", "--seed", str(seed), "--quiet",
               "--output-layer", layers[k]["name"], "--output-npy", path]
        if system:
            cmd += ["--system", system]
        if batch is not None:
            cmd += ["--batch", str(batch)]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True)
        except OSError as ex:
            raise BadInput("%s: %s" % (tpuemu, ex))
        if r.returncode:
            errors[k] = (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1]
        else:
            paths[k] = path

    with concurrent.futures.ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as ex:
        list(ex.map(one, todo))
    if errors and not paths:
        raise BadInput("%s gave no layer: %s" % (tpuemu, next(iter(errors.values()))))

    def given(k):
        if k == last:
            return out
        if k not in paths:
            return None
        return np.load(paths[k], allow_pickle=False)
    return given, errors


def layerwise(ref, trace, a, out, tmp):
    """The layer-by-layer check (--layerwise); returns the exit status."""
    layers = ref.layers
    last = max(k for k, L in enumerate(layers) if L["op"] != "loss")
    given, errors = emulator_layers(a.layerwise, trace, layers, a.seed, a.system, a.batch,
                                    tmp, last, out)
    ref.run(given)
    bad, loose, worst_used, worst_share = [], [], 0.0, 0.0
    for k, j, why in ref.local:
        name = layers[k]["name"]
        if j is None:
            bad.append("%s: %s" % (name, why))
            continue
        nb = int(j["bad"].sum())
        if nb:
            f = int(np.flatnonzero(j["bad"].ravel())[0])
            at = list(map(int, np.unravel_index(f, j["ref"].shape)))
            bad.append("%s (%s): %d of %d outside its local bound, first at %s: emu %.9g ref %.9g "
                       "bound %.3g" % (name, layers[k]["op"], nb, j["d"].size, at,
                                       j["emu"].ravel()[f], j["ref"].ravel()[f],
                                       j["bound"].ravel()[f]))
        if j["share"] >= LOOSE_SHARE:
            loose.append("%s (%.0f%%)" % (name, 100 * j["share"]))
        if j["d"].size:
            worst_used = max(worst_used, float(np.nanmax(j["used"])))
        worst_share = max(worst_share, j["share"])
    print("layerwise: %d stored tensors checked, each from the emulator's own inputs; max local "
          "bound used %.3f; the local bound is >= |ref| on at most %.1f%% of a layer's elements"
          % (len(ref.local), worst_used, 100 * worst_share))
    for k in sorted(errors):
        print("layerwise: %s not checked (the emulator gives no value: %s)"
              % (layers[k]["name"], errors[k]))
    if bad:
        print("layerwise: FAILED at %s" % bad[0])
        for b in bad[1:4]:
            print("layerwise: also %s" % b)
        return 1
    if loose:
        print("layerwise: " + inconclusive_msg(worst_share, "the local bound of " + ", ".join(loose)))
        return 3
    return 0


def main(argv):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace", nargs="?")
    p.add_argument("out", nargs="?", help="the emulator's output (.npy, float32)")
    p.add_argument("--seed", type=int)
    p.add_argument("--system")
    p.add_argument("--batch", type=int)
    p.add_argument("--step", type=int, default=0)
    p.add_argument("--mode", choices=["infer", "train"], help="default: the trace's")
    p.add_argument("--write-ref", metavar="REF.npy", help="write the reference (float32) and exit")
    p.add_argument("--layerwise", metavar="TPUEMU",
                   help="also check every stored tensor against the reference computed from "
                        "the emulator's own inputs (runs TPUEMU run --functional "
                        "--output-layer per layer with --seed/--system/--batch)")
    p.add_argument("--self-test", action="store_true",
                   help="compare with test/fxref.c on traces/functional/ (or the traces given)")
    try:
        a = p.parse_args(argv)
    except SystemExit as e:
        return 0 if e.code == 0 else 2
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        if a.self_test:
            traces = [t for t in (a.trace, a.out) if t] or sorted(
                os.path.join(root, "traces", "functional", f)
                for f in os.listdir(os.path.join(root, "traces", "functional"))
                if f.endswith(".json"))
            return self_test(root, traces)
        if a.trace is None or a.seed is None or a.seed < 0 or (a.out is None and not a.write_ref):
            print("fx_reference.py: error: need TRACE.json OUT.npy --seed S (S >= 0)", file=sys.stderr)
            return 2
        if a.batch is not None and a.batch < 1:
            raise BadInput("--batch %d" % a.batch)
        ref = make_ref(a.trace, a.seed, a.system, a.batch, a.step, a.mode)
        y, e, _ = ref.run()
        if a.write_ref:
            tmp = a.write_ref + ".tmp.npy"
            np.save(tmp, y.astype(np.float32))
            os.replace(tmp, a.write_ref)
            return 0
        try:
            emu = np.load(a.out, allow_pickle=False)
        except (OSError, ValueError) as ex:
            raise BadInput("%s: %s" % (a.out, ex))
        if emu.shape != y.shape:
            print("fx_reference.py: %s has shape %s, the reference %s"
                  % (a.out, list(emu.shape), list(y.shape)))
            return 1
        print("bound: first-order bf16/fp32 running error analysis (see --help)")
        if not compare(emu, y, e):
            return 1
        share = loose_share(y, e)
        if a.layerwise:
            if a.step or (a.mode and a.mode != ("train" if ref.t["run"]["mode"] == "train"
                                                  else "infer")):
                raise BadInput("--layerwise runs the emulator on the trace as it is: "
                               "no --step or --mode")
            tmp = tempfile.mkdtemp(prefix="fxref-lw-")
            try:
                return layerwise(ref, a.trace, a, emu, tmp)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        if share >= LOOSE_SHARE:
            print(inconclusive_msg(share) + "; try --layerwise TPUEMU")
            return 3
        return 0
    except BadInput as ex:
        print("fx_reference.py: error: %s" % ex, file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
