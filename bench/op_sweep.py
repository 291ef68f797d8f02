"""Benchmark: a cliff sweep over op classes at seeded random shapes, next to ONNX Runtime, in turns.

    .venv/bin/python bench/op_sweep.py [--classes matmul,pool,...] [--count 20] [--seed 0]
                                       [--threads 1] [--repeat 15] [--only-flagged FILE]

Each case is a one-node (or two-node: MatMul+Add, Greater+Where) ONNX model built with
onnx.helper at opset 20, compiled by tessera's default build (bench/models.py's
`compile_model`) and run next to ONNX Runtime at the same thread count, in turns
(`tessera.cli.bench.measure_in_blocks`, through bench/nn_ops.py's runners). Per case it prints
the shape, the medians, tessera/ORT and flags: `SLOW` where tessera/ORT > 1.1, `ERR` where the
max abs difference from ORT over ORT's output range is above 1e-4 (`FAIL` where tessera
cannot build the case at all). Per class: the geomean and the worst case.

How shapes are drawn (a `numpy.random.default_rng(seed + class index)` per class, so adding a
class does not move the others' shapes): sizes are log-uniform in the ranges real models use,
and the discrete choices (kernels, axes, perms, modes, broadcast patterns) uniform:

- matmul: M in {1, 2, 4, 8, 16, 32, 40, 64, 128, 256}, K log-uniform 32..4096, N log-uniform
  32..32768 (redrawn until M*K*N <= 2.5e8); one of 2-D MatMul with a constant B, 2-D MatMul with
  a fed B, Gemm with transB=1 and a bias, MatMul+Add (bias), batched [b, M, K] x [b, K, N]
  (b 2..16, fed B: attention) and [b, M, K] x [K, N] (constant B: a transformer's projection).
- pool: [1, C, H, W], C log-uniform 8..512, H = W log-uniform 7..112; MaxPool/AveragePool with
  kernel 2..7, stride 1..3, pads 0..kernel/2, ceil_mode 0/1 (count_include_pad 0/1 for average),
  or GlobalAveragePool/GlobalMaxPool.
- resize: [1, C, H, W] (C 8..256, H, W 5..80); nearest or linear; scales 2 (or 2 and 4), or
  output sizes drawn 1.1x..3.3x (not integer multiples); half_pixel or asymmetric coordinates.
- norm: Softmax, LogSoftmax, LayerNormalization (with scale and bias) over rank 2..4 inputs,
  the axis last or not (LayerNormalization: its axis to the end), rows short (4..64) or long
  (500..32768), the total at most 2M elements.
- reduce: ReduceMean/Sum/Max/L2 of rank 2..4 inputs (dims 2..256, at most 2M elements) over a
  random non-empty subset of axes, keepdims 0/1.
- eltwise: Add/Mul/Div/Where of [N, C, H, W] (N 1..2, C 8..256, H, W 7..112) with a [C, 1, 1], a
  [1, W], a scalar or a same-shape operand, constant or fed; Where's condition is Greater(x, 0).
- act: Sigmoid, Tanh, Erf, Gelu (none/tanh), HardSwish, LeakyRelu, Clip on rank 2..4 inputs of
  4k..2M elements.
- transpose: [d0..d3] each 1..128 (<= 2M elements), one of the 24 rank-4 perms.
- data: Concat (2..4 inputs, any axis), Split (2..4 parts, any axis), Slice (start, end, step
  1..3 on one or two axes), Pad (constant/reflect/edge, 0..3 each side of H and W), Gather
  (axis 0 of an embedding table, or an inner axis).
- cast: float32 -> float16/int32/int64/uint8, int64/int32/uint8 -> float32, rank 2..4.
- conv, convT: conv2d 1x1/3x3/5x5/7x7, strides 1..2, groups (1, depthwise, 2..8), dilations,
  odd channel counts; ConvTranspose 2x2/3x3/4x4 stride 2 with pads. Reported, not fixed here.

`--only-flagged FILE` reruns only the cases a previous run (its stdout, saved to FILE) flagged,
at the given thread count. This is a benchmark, not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time

import numpy as np
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from nn_ops import _ort_runner, _tessera_runner  # noqa: E402

import tessera  # noqa: E402
from tessera.cli.bench import measure_in_blocks  # noqa: E402
from tessera.frontend.testing import make_model  # noqa: E402

OPSET = 20
SLOW = 1.1
ERR = 1e-4
N = helper.make_node


def _logu(rng, lo, hi) -> int:
    """An integer log-uniform in [lo, hi]."""
    return int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))


def _f32(rng, shape, scale=1.0):
    return np.asarray(rng.standard_normal(shape) * scale, dtype="float32")


class Case:
    """One model: its nodes, the run-time inputs (arrays) and the constants."""

    def __init__(self, label, nodes, feeds, consts=None):
        self.label, self.nodes = label, nodes
        self.feeds = {k: np.asarray(v) for k, v in feeds.items()}
        self.consts = {k: np.asarray(v) for k, v in (consts or {}).items()}

    def model(self):
        ins = {k: v for k, v in self.feeds.items()}
        return make_model(self.nodes, ins, ["y"], self.consts, opset=OPSET)


def _shape(s) -> str:
    return "x".join(map(str, s))


# ---------------------------------------------------------------- classes


def gen_matmul(rng):
    m = int(rng.choice([1, 2, 4, 8, 16, 32, 40, 64, 128, 256]))
    while True:
        k, n = _logu(rng, 32, 4096), _logu(rng, 32, 32768)
        if m * k * n <= 2.5e8:
            break
    kind = rng.choice(["const_b", "fed_b", "gemm_tb", "matmul_add", "batched_fed", "batched_const"])
    a = _f32(rng, (m, k))
    if kind == "const_b":
        return Case(f"MatMul {m}x{k} @ const {k}x{n}", [N("MatMul", ["a", "b"], ["y"])],
                    {"a": a}, {"b": _f32(rng, (k, n), 0.05)})  # fmt: skip
    if kind == "fed_b":
        return Case(f"MatMul {m}x{k} @ fed {k}x{n}", [N("MatMul", ["a", "b"], ["y"])],
                    {"a": a, "b": _f32(rng, (k, n), 0.05)})  # fmt: skip
    if kind == "gemm_tb":
        return Case(f"Gemm {m}x{k} @ const ({n}x{k})^T + bias",
                    [N("Gemm", ["a", "b", "c"], ["y"], transB=1)], {"a": a},
                    {"b": _f32(rng, (n, k), 0.05), "c": _f32(rng, (n,))})  # fmt: skip
    if kind == "matmul_add":
        return Case(f"MatMul+Add {m}x{k} @ const {k}x{n} + bias",
                    [N("MatMul", ["a", "b"], ["t"]), N("Add", ["t", "c"], ["y"])], {"a": a},
                    {"b": _f32(rng, (k, n), 0.05), "c": _f32(rng, (n,))})  # fmt: skip
    b = int(rng.integers(2, 17))
    while m * k * n * b > 2.5e8:
        k, n = max(16, k // 2), max(16, n // 2)
    a = _f32(rng, (b, m, k))
    if kind == "batched_fed":
        return Case(f"MatMul {b}x{m}x{k} @ fed {b}x{k}x{n}", [N("MatMul", ["a", "w"], ["y"])],
                    {"a": a, "w": _f32(rng, (b, k, n), 0.05)})  # fmt: skip
    return Case(f"MatMul {b}x{m}x{k} @ const {k}x{n}", [N("MatMul", ["a", "w"], ["y"])],
                {"a": a}, {"w": _f32(rng, (k, n), 0.05)})  # fmt: skip


def gen_pool(rng):
    c, h = _logu(rng, 8, 512), _logu(rng, 7, 112)
    while c * h * h > 2e6:
        c = max(8, c // 2)
    x = _f32(rng, (1, c, h, h))
    kind = rng.choice(["MaxPool", "AveragePool", "MaxPool", "AveragePool", "Global"])
    if kind == "Global":
        op = str(rng.choice(["GlobalAveragePool", "GlobalMaxPool"]))
        return Case(f"{op} {_shape(x.shape)}", [N(op, ["x"], ["y"])], {"x": x})
    k = int(rng.integers(2, min(7, h) + 1))
    s = int(rng.integers(1, 4))
    p = int(rng.integers(0, k // 2 + 1))
    ceil = int(rng.integers(0, 2))
    attrs = dict(kernel_shape=[k, k], strides=[s, s], pads=[p] * 4, ceil_mode=ceil)
    if kind == "AveragePool":
        attrs["count_include_pad"] = int(rng.integers(0, 2))
    extra = ",cip" if attrs.get("count_include_pad") else ""
    return Case(f"{kind} {_shape(x.shape)} k{k} s{s} p{p}{',ceil' if ceil else ''}{extra}",
                [N(kind, ["x"], ["y"], **attrs)], {"x": x})  # fmt: skip


def gen_resize(rng):
    c, h, w = _logu(rng, 8, 256), _logu(rng, 5, 80), _logu(rng, 5, 80)
    while c * h * w > 5e5:
        c = max(8, c // 2)
    x = _f32(rng, (1, c, h, w))
    mode = str(rng.choice(["nearest", "linear"]))
    coord = str(rng.choice(["half_pixel", "asymmetric"]))
    attrs = dict(mode=mode, coordinate_transformation_mode=coord)
    if mode == "nearest":
        attrs["nearest_mode"] = "floor" if coord == "asymmetric" else "round_prefer_floor"
    roi = np.zeros(0, "float32")
    if rng.random() < 0.5:
        f = float(rng.choice([2.0, 2.0, 4.0]))
        scales = np.array([1, 1, f, f], "float32")
        return Case(f"Resize {mode}/{coord} {_shape(x.shape)} x{f:g}",
                    [N("Resize", ["x", "roi", "scales"], ["y"], **attrs)], {"x": x},
                    {"roi": roi, "scales": scales})  # fmt: skip
    oh, ow = int(h * rng.uniform(1.1, 3.3)), int(w * rng.uniform(1.1, 3.3))
    sizes = np.array([1, c, oh, ow], "int64")
    return Case(f"Resize {mode}/{coord} {_shape(x.shape)} -> {oh}x{ow}",
                [N("Resize", ["x", "roi", "", "sizes"], ["y"], **attrs)], {"x": x},
                {"roi": roi, "sizes": sizes})  # fmt: skip


def gen_norm(rng):
    op = str(rng.choice(["Softmax", "LogSoftmax", "LayerNormalization"]))
    rank = int(rng.integers(2, 5))
    long_row = rng.random() < 0.5
    row = _logu(rng, 500, 32768) if long_row else _logu(rng, 4, 64)
    axis = rank - 1 if rng.random() < 0.5 else int(rng.integers(1, rank - 1 if rank > 2 else 2))
    shape = [_logu(rng, 2, 64) for _ in range(rank)]
    shape[axis] = row
    while math.prod(shape) > 2e6:
        i = max((j for j in range(rank) if j != axis), key=lambda j: shape[j])
        shape[i] = max(1, shape[i] // 2)
    x = _f32(rng, shape, 2.0)
    axis_label = f"axis {axis}{' (last)' if axis == rank - 1 else ''}"
    if op == "LayerNormalization":
        norm = shape[axis:]
        return Case(f"{op} {_shape(shape)} {axis_label}",
                    [N(op, ["x", "g", "b"], ["y"], axis=axis, epsilon=1e-5)], {"x": x},
                    {"g": _f32(rng, norm), "b": _f32(rng, norm)})  # fmt: skip
    return Case(f"{op} {_shape(shape)} {axis_label}", [N(op, ["x"], ["y"], axis=axis)], {"x": x})


def gen_reduce(rng):
    op = str(rng.choice(["ReduceMean", "ReduceSum", "ReduceMax", "ReduceL2"]))
    rank = int(rng.integers(2, 5))
    shape = [_logu(rng, 2, 256) for _ in range(rank)]
    while math.prod(shape) > 2e6:
        i = int(np.argmax(shape))
        shape[i] //= 2
    nax = int(rng.integers(1, rank + 1))
    axes = sorted(int(a) for a in rng.choice(rank, nax, replace=False))
    keep = int(rng.integers(0, 2))
    x = _f32(rng, shape)
    return Case(f"{op} {_shape(shape)} axes {axes} keep {keep}",
                [N(op, ["x", "axes"], ["y"], keepdims=keep)], {"x": x},
                {"axes": np.array(axes, "int64")})  # fmt: skip


def gen_eltwise(rng):
    op = str(rng.choice(["Add", "Mul", "Div", "Where"]))
    n, c, h = int(rng.integers(1, 3)), _logu(rng, 8, 256), _logu(rng, 7, 112)
    w = h if rng.random() < 0.7 else _logu(rng, 7, 112)
    while n * c * h * w > 2e6:
        c = max(8, c // 2)
    x = _f32(rng, (n, c, h, w))
    pattern = str(rng.choice(["C11", "1W", "scalar", "same"]))
    oshape = {"C11": (c, 1, 1), "1W": (1, w), "scalar": (), "same": (n, c, h, w)}[pattern]
    other = _f32(rng, oshape)
    if op == "Div":
        other = np.abs(other) + 0.5
    fed = rng.random() < 0.4
    feeds, consts = {"x": x}, {}
    (feeds if fed else consts)["o"] = other
    label = f"{op} {_shape(x.shape)} with {'fed' if fed else 'const'} [{_shape(oshape)}]"
    if op == "Where":
        consts["zero"] = np.zeros((), "float32")
        nodes = [N("Greater", ["x", "zero"], ["cond"]), N("Where", ["cond", "x", "o"], ["y"])]
        return Case(label, nodes, feeds, consts)
    return Case(label, [N(op, ["x", "o"], ["y"])], feeds, consts)


def gen_act(rng):
    op = str(rng.choice(["Sigmoid", "Tanh", "Erf", "Gelu", "HardSwish", "LeakyRelu", "Clip"]))
    rank = int(rng.integers(2, 5))
    total = _logu(rng, 4096, 2_000_000)
    shape = [1] * rank
    shape[-1] = _logu(rng, 7, 4096)
    rest = max(1, total // shape[-1])
    for i in range(rank - 1):
        shape[i] = max(1, int(round(rest ** (1 / (rank - 1)))))
    x = _f32(rng, shape, 2.0)
    attrs, ins, consts = {}, ["x"], {}
    if op == "Gelu":
        attrs["approximate"] = str(rng.choice(["none", "tanh"]))
    if op == "LeakyRelu":
        attrs["alpha"] = 0.1
    if op == "Clip":
        consts = {"lo": np.array(-1.0, "float32"), "hi": np.array(6.0, "float32")}
        ins = ["x", "lo", "hi"]
    label = f"{op}{'/' + attrs['approximate'] if op == 'Gelu' else ''} {_shape(shape)}"
    return Case(label, [N(op, ins, ["y"], **attrs)], {"x": x}, consts)


def gen_transpose(rng):
    shape = [_logu(rng, 1, 128) for _ in range(4)]
    while math.prod(shape) > 2e6:
        i = int(np.argmax(shape))
        shape[i] //= 2
    perm = [int(p) for p in rng.permutation(4)]
    return Case(f"Transpose {_shape(shape)} perm {perm}",
                [N("Transpose", ["x"], ["y"], perm=perm)], {"x": _f32(rng, shape)})  # fmt: skip


def gen_data(rng):
    op = str(rng.choice(["Concat", "Split", "Slice", "Pad", "Gather"]))
    shape = [1, _logu(rng, 8, 256), _logu(rng, 7, 80), _logu(rng, 7, 80)]
    while math.prod(shape) > 1e6:
        shape[1] = max(8, shape[1] // 2)
    x = _f32(rng, shape)
    if op == "Concat":
        axis = int(rng.integers(1, 4))
        parts = int(rng.integers(2, 5))
        feeds = {}
        for i in range(parts):
            s = list(shape)
            s[axis] = _logu(rng, 1, shape[axis])
            feeds[f"x{i}"] = _f32(rng, s)
        shapes = ", ".join(_shape(v.shape) for v in feeds.values())
        return Case(f"Concat axis {axis} [{shapes}]",
                    [N("Concat", list(feeds), ["y"], axis=axis)], feeds)  # fmt: skip
    if op == "Split":
        axis = int(rng.integers(1, 4))
        parts = int(rng.integers(2, 5))
        while shape[axis] < parts:
            shape[axis] *= 2
        x = _f32(rng, shape)
        cuts = sorted(int(c) for c in rng.choice(np.arange(1, shape[axis]), parts - 1, False))
        sizes = np.diff([0, *cuts, shape[axis]]).astype("int64")
        outs = ["y"] + [f"y{i}" for i in range(1, parts)]
        # the sweep times the whole node; its first output is checked, the rest are outputs too
        case = Case(f"Split {_shape(shape)} axis {axis} {[int(v) for v in sizes]}",
                    [N("Split", ["x", "sizes"], outs, axis=axis)], {"x": x},
                    {"sizes": sizes})  # fmt: skip
        return case
    if op == "Slice":
        naxes = int(rng.integers(1, 3))
        axes = sorted(int(a) for a in rng.choice([1, 2, 3], naxes, replace=False))
        starts, ends, steps = [], [], []
        for a in axes:
            lo = int(rng.integers(0, shape[a] // 2 + 1))
            hi = int(rng.integers(lo + 1, shape[a] + 1))
            starts.append(lo)
            ends.append(hi)
            steps.append(int(rng.integers(1, 4)))
        consts = {k: np.array(v, "int64") for k, v in
                  dict(s=starts, e=ends, a=axes, t=steps).items()}  # fmt: skip
        return Case(f"Slice {_shape(shape)} axes {axes} {starts}:{ends}:{steps}",
                    [N("Slice", ["x", "s", "e", "a", "t"], ["y"])], {"x": x}, consts)  # fmt: skip
    if op == "Pad":
        mode = str(rng.choice(["constant", "reflect", "edge"]))
        p = [int(v) for v in rng.integers(0, 4, 4)]
        pads = np.array([0, 0, p[0], p[1], 0, 0, p[2], p[3]], "int64")
        return Case(f"Pad {mode} {_shape(shape)} {[int(v) for v in pads]}",
                    [N("Pad", ["x", "pads"], ["y"], mode=mode)], {"x": x},
                    {"pads": pads})  # fmt: skip
    if rng.random() < 0.5:
        vocab, dim = _logu(rng, 1000, 50000), int(rng.choice([64, 128, 256, 384, 512, 768]))
        while vocab * dim > 8e6:
            vocab //= 2
        seq = _logu(rng, 4, 512)
        table = _f32(rng, (vocab, dim))
        idx = rng.integers(0, vocab, (1, seq)).astype("int64")
        return Case(f"Gather embedding {vocab}x{dim}[1x{seq}]",
                    [N("Gather", ["t", "i"], ["y"], axis=0)], {"i": idx}, {"t": table})  # fmt: skip
    axis = int(rng.integers(1, 4))
    count = _logu(rng, 1, shape[axis])
    idx = rng.integers(0, shape[axis], (count,)).astype("int64")
    return Case(f"Gather {_shape(shape)} axis {axis} [{count}]",
                [N("Gather", ["x", "i"], ["y"], axis=axis)], {"x": x}, {"i": idx})  # fmt: skip


_CAST = {
    "float16": TensorProto.FLOAT16, "int32": TensorProto.INT32, "int64": TensorProto.INT64,
    "uint8": TensorProto.UINT8, "float32": TensorProto.FLOAT,
}  # fmt: skip


def gen_cast(rng):
    src, dst = [
        ("float32", "float16"), ("float32", "int32"), ("float32", "int64"), ("float32", "uint8"),
        ("int64", "float32"), ("int32", "float32"), ("uint8", "float32"),
    ][int(rng.integers(0, 7))]  # fmt: skip
    rank = int(rng.integers(2, 5))
    total = _logu(rng, 4096, 2_000_000)
    shape = [max(1, int(round(total ** (1 / rank)))) for _ in range(rank)]
    if src == "float32":
        x = (rng.random(shape) * 200).astype("float32")
    else:
        x = rng.integers(0, 200, shape).astype(src)
    return Case(f"Cast {src}->{dst} {_shape(shape)}",
                [N("Cast", ["x"], ["y"], to=_CAST[dst])], {"x": x})  # fmt: skip


def gen_conv(rng):
    k = int(rng.choice([1, 3, 3, 5, 7]))
    cin, h = _logu(rng, 3, 512), _logu(rng, 7, 112)
    cout = _logu(rng, 8, 512)
    if rng.random() < 0.4:
        cin += int(rng.integers(0, 2)) * 2 + 1  # odd counts
    kind = str(rng.choice(["dense", "dense", "depthwise", "grouped"]))
    g = 1
    if kind == "depthwise":
        g = cin
        cout = cin * int(rng.choice([1, 1, 2]))
    elif kind == "grouped":
        g = int(rng.choice([2, 3, 4, 8]))
        cin, cout = max(g, cin // g * g), max(g, cout // g * g)
    s = int(rng.choice([1, 1, 2]))
    d = int(rng.choice([1, 1, 1, 2])) if k > 1 else 1
    while cin * cout * h * h * k * k / g / s / s > 2e8:
        h = max(7, h // 2) if h > 7 else h
        if h == 7:
            break
    x = _f32(rng, (1, cin, h, h))
    wt = _f32(rng, (cout, cin // g, k, k), 0.1)
    p = d * (k // 2)
    attrs = dict(kernel_shape=[k, k], strides=[s, s], pads=[p] * 4, dilations=[d, d], group=g)
    return Case(f"Conv {_shape(x.shape)} -> {cout} k{k} s{s} d{d} g{g}",
                [N("Conv", ["x", "w", "b"], ["y"], **attrs)], {"x": x},
                {"w": wt, "b": _f32(rng, (cout,))})  # fmt: skip


def gen_convt(rng):
    k = int(rng.choice([2, 3, 4]))
    cin, cout, h = _logu(rng, 8, 256), _logu(rng, 4, 256), _logu(rng, 7, 80)
    while cin * cout * h * h * k * k > 2e8:
        h //= 2
    p = (k - 1) // 2 if k > 2 else 0
    op_ = [1, 1] if k == 3 else [0, 0]
    x = _f32(rng, (1, cin, h, h))
    attrs = dict(strides=[2, 2], pads=[p] * 4, output_padding=op_)
    return Case(f"ConvTranspose {_shape(x.shape)} -> {cout} k{k} s2 p{p}",
                [N("ConvTranspose", ["x", "w"], ["y"], **attrs)], {"x": x},
                {"w": _f32(rng, (cin, cout, k, k), 0.1)})  # fmt: skip


CLASSES = {
    "matmul": gen_matmul, "pool": gen_pool, "resize": gen_resize, "norm": gen_norm,
    "reduce": gen_reduce, "eltwise": gen_eltwise, "act": gen_act, "transpose": gen_transpose,
    "data": gen_data, "cast": gen_cast, "conv": gen_conv, "convT": gen_convt,
}  # fmt: skip


def cases(name: str, seed: int, count: int) -> list[Case]:
    """The class's `count` cases at `seed` (its own generator: see the docstring)."""
    rng = np.random.default_rng([seed, list(CLASSES).index(name)])
    return [CLASSES[name](rng) for _ in range(count)]


# ---------------------------------------------------------------- measuring


def _error(ours, ref) -> float:
    """Max abs difference over the reference's output range (integers: exact differences; a
    constant output, e.g. one element: over its magnitude)."""
    ours, ref = np.asarray(ours), np.asarray(ref)
    if ours.shape != ref.shape:
        return float("inf")
    if ours.dtype.kind in "iub" or ref.dtype.kind in "iub":
        return float(np.abs(ours.astype("int64") - ref.astype("int64")).max(initial=0))
    ref = ref.astype("float64")
    rng_ = (float(np.ptp(ref)) or float(np.abs(ref).max())) if ref.size else 1.0
    return float(np.abs(ours.astype("float64") - ref).max(initial=0)) / (rng_ or 1.0)


def run_case(case: Case, threads: int, repeat: int) -> dict:
    """Build, check and time one case; a dict of its results (`ratio` None where it failed)."""
    model = case.model()
    row = dict(label=case.label, ratio=None, err=None, tessera=None, ort=None, note="")
    try:
        ort_run, ort_out = _ort_runner(model, case.feeds, threads)
    except Exception as e:  # noqa: BLE001 - ORT refuses a model: report it, go on
        row["note"] = f"ORT: {type(e).__name__}: {str(e).splitlines()[0][:80]}"
        return row
    try:
        ours_run, ours_out = _tessera_runner(model, case.feeds)
    except Exception as e:  # noqa: BLE001 - a case tessera cannot build is a finding
        row["note"] = f"FAIL {type(e).__name__}: {str(e).splitlines()[0][:100]}"
        return row
    row["err"] = _error(ours_out, ort_out)
    times, _ = measure_in_blocks({"tessera": ours_run, "ort": ort_run}, repeat, warmup=1,
                                 duration=None)  # fmt: skip
    row["tessera"] = statistics.median(times["tessera"]) * 1e3
    row["ort"] = statistics.median(times["ort"]) * 1e3
    row["ratio"] = row["tessera"] / row["ort"]
    return row


def flags(row) -> str:
    out = []
    if row["ratio"] is not None and row["ratio"] > SLOW:
        out.append("SLOW")
    if row["err"] is not None and row["err"] > ERR:
        out.append(f"ERR {row['err']:.1e}")
    if row["note"]:
        out.append(row["note"])
    return " ".join(out)


def _line(cls, i, row) -> str:
    if row["ratio"] is None:
        return f"| {cls}#{i} | {row['label']} | - | - | - | {flags(row)} |"
    return (f"| {cls}#{i} | {row['label']} | {row['tessera']:.3f} | {row['ort']:.3f} | "
            f"{row['ratio']:.2f} | {flags(row)} |")  # fmt: skip


def _flagged_ids(path: str) -> set[str]:
    """The `class#i` ids that a saved run flagged."""
    ids = set()
    for line in open(path):
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 6 and "#" in cells[1] and cells[6]:
            ids.add(cells[1])
    return ids


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--classes", default=None, help=f"comma-separated, of {','.join(CLASSES)}")
    p.add_argument("--count", type=int, default=20, help="random shapes per class")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeat", type=int, default=15, help="timed runs of each engine per case")
    p.add_argument("--only-flagged", default=None, help="a saved run's output: rerun its flags")
    p.add_argument("--cases", default=None, help="comma-separated ids (class#i) to run")
    args = p.parse_args(argv)
    tessera.runtime.set_num_threads(args.threads)
    names = args.classes.split(",") if args.classes else list(CLASSES)
    unknown = [n for n in names if n not in CLASSES]
    if unknown:
        p.error(f"unknown classes {unknown}; known: {list(CLASSES)}")
    only = _flagged_ids(args.only_flagged) if args.only_flagged else None
    if args.cases:
        only = (only or set()) | set(args.cases.split(","))
    load = os.getloadavg()
    print(f"op_sweep: seed {args.seed}, count {args.count}, threads {args.threads}, "
          f"repeat {args.repeat}; load before {load[0]:.2f} {load[1]:.2f}")  # fmt: skip
    print("| case | shape | tessera ms | ORT ms | tessera/ORT | flags |")
    print("|---|---|---|---|---|---|")
    summary = []
    start = time.perf_counter()
    for cls in names:
        rows = []
        for i, case in enumerate(cases(cls, args.seed, args.count)):
            if only is not None and f"{cls}#{i}" not in only:
                continue
            row = run_case(case, args.threads, args.repeat)
            rows.append((i, row))
            print(_line(cls, i, row), flush=True)
        timed = [(i, r) for i, r in rows if r["ratio"] is not None]
        if timed:
            geo = math.exp(statistics.fmean(math.log(r["ratio"]) for _, r in timed))
            wi, worst = max(timed, key=lambda t: t[1]["ratio"])
            nflag = sum(1 for _, r in rows if flags(r))
            summary.append(f"| {cls} | {len(rows)} | {geo:.2f} | {worst['ratio']:.2f} "
                           f"({cls}#{wi}: {worst['label']}) | {nflag} |")  # fmt: skip
    print("\n| class | cases | geomean tessera/ORT | worst | flagged |")
    print("|---|---|---|---|---|")
    print("\n".join(summary))
    load = os.getloadavg()
    print(f"load after {load[0]:.2f} {load[1]:.2f}; {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
