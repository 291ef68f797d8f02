"""ONNX converters for the random generators: RandomUniform/Normal and their Like forms,
Bernoulli, Multinomial, and training-mode Dropout.

All draw from the graph op `random` (Philox4x32-10, Note [run-time random numbers] in
topi/philox.py), which reads the model's run counter (Note [random call counter] in
runtime/run_counter.py): every run draws fresh values, and the same seed, build and run
index draw the same values on every target. The `seed` attribute (a float) keys the
generator by its 64 bits; a node without one gets a seed drawn from the OS's entropy once,
when the model is converted, so two conversions of the same model draw differently and a
compiled module keeps its draw. Each node has its own key. In a Loop body (or an unrolled
step) the run counter a node reads is the run index folded with the iteration number, so each
iteration draws fresh values (Note [random streams] in topi/philox.py); the shape may hold
symbolic dims (the Like forms follow their input's).

    Bernoulli(p)          = cast(uniform[0, 1) < p)
    Multinomial(logits)   = per draw, the class whose softmax CDF passes u (inverse CDF)
    Dropout(x, r, True)   = mask = uniform[0, 1) >= r;  y = x * mask / (1 - r)
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from tessera.frontend.onnx_registry import NodeError, onnx_op
from tessera.graph.ir import parse_dtype
from tessera.tir.expr import Expr

_SAMPLED = ("float16", "float32", "float64")


def _seed(seed) -> int:
    """The 64-bit key of a node: its `seed` attribute (an int, or a float's 64 bits), or one
    drawn once here."""
    if seed is None:
        return int(np.random.default_rng().integers(0, 2**63))
    if isinstance(seed, int | np.integer):
        return int(seed) & (2**64 - 1)
    return int(np.float64(seed).view(np.uint64))


def _float_dtype(onnx_type: int, what: str):
    dtype = parse_dtype(helper.tensor_dtype_to_np_dtype(onnx_type))
    if not dtype.is_float or dtype.is_storage_only:
        raise NodeError(f"{what} must be a float type, got {dtype}")
    return dtype


def _draw(b, shape, dtype, distribution: str, a: float, b_: float, seed) -> object:
    """`random` samples of `shape` in `dtype` (bfloat16: drawn in float32, then rounded); a dim
    may be symbolic (the Like forms' input's: Note [symbolic dims] in graph/dims.py)."""
    shape = tuple(d if isinstance(d, Expr) else int(d) for d in shape)
    name = str(dtype)
    drawn = name if name in _SAMPLED else "float32"
    y = b.call("random", b.run_counter(), shape=shape, dtype=drawn, distribution=distribution,
               a=float(a), b=float(b_), seed=_seed(seed))  # fmt: skip
    return y if drawn == name else b.call("cast", y, dtype=name)


@onnx_op("RandomUniform")
def random_uniform(b, *, dtype=TensorProto.FLOAT, high=1.0, low=0.0, seed=None, shape):
    return _draw(b, shape, _float_dtype(dtype, "dtype"), "uniform", low, high, seed)


@onnx_op("RandomNormal")
def random_normal(b, *, dtype=TensorProto.FLOAT, mean=0.0, scale=1.0, seed=None, shape):
    return _draw(b, shape, _float_dtype(dtype, "dtype"), "normal", mean, scale, seed)


def _like(b, input, dtype):
    out = input.type.dtype if dtype is None else _float_dtype(dtype, "dtype")
    if not out.is_float:
        raise NodeError(f"the input is {out}: give a float `dtype` for the samples")
    return b.shape_of(input, symbolic=True), out


@onnx_op("RandomUniformLike")
def random_uniform_like(b, input, *, dtype=None, high=1.0, low=0.0, seed=None):
    shape, out = _like(b, input, dtype)
    return _draw(b, shape, out, "uniform", low, high, seed)


@onnx_op("RandomNormalLike")
def random_normal_like(b, input, *, dtype=None, mean=0.0, scale=1.0, seed=None):
    shape, out = _like(b, input, dtype)
    return _draw(b, shape, out, "normal", mean, scale, seed)


def _unit_like(b, x, seed):
    """Uniform samples in [0, 1) of x's shape, in float64 for double x, else float32."""
    wide = "float64" if str(x.type.dtype) == "float64" else "float32"
    return _draw(b, b.shape_of(x, symbolic=True), parse_dtype(wide), "uniform", 0.0, 1.0, seed)


def _as(b, x, dtype):
    return x if x.type.dtype == dtype else b.call("cast", x, dtype=dtype)


@onnx_op("Bernoulli", since=15)
def bernoulli(b, input, *, dtype=None, seed=None):
    if not input.type.dtype.is_float:
        raise NodeError(f"the probabilities must be floats, got {input.type.dtype}")
    u = _unit_like(b, input, seed)
    hit = b.call("less", u, _as(b, input, u.type.dtype))
    return b.call("cast", hit, dtype=input.type.dtype if dtype is None else _dtype(dtype))


def _dtype(onnx_type: int):
    try:
        return parse_dtype(helper.tensor_dtype_to_np_dtype(onnx_type))
    except (KeyError, ValueError, TypeError):
        raise NodeError(f"ONNX type {onnx_type} is not supported") from None


@onnx_op("Multinomial", since=7)
def multinomial(b, input, *, dtype=TensorProto.INT32, sample_size=1, seed=None):
    """`sample_size` class indices per row of `input` (batch, classes) of unnormalized log
    probabilities: the first class whose cumulative exp(input - max) exceeds u * total."""
    out = _dtype(dtype)
    if str(out) not in ("int32", "int64"):
        raise NodeError(f"dtype must be int32 or int64, got {out}")
    if input.type.ndim != 2 or not input.type.dtype.is_float:
        raise NodeError(f"input must be float (batch_size, class_size), got {input.type}")
    batch, classes = b.shape_of(input, symbolic=True)
    if not isinstance(classes, int):
        raise NodeError(f"the number of classes must be static, got {input.type}")
    x = _as(b, input, parse_dtype("float64" if str(input.type.dtype) == "float64" else "float32"))
    peak = b.call("max", x, axis=(1,), keepdims=True)
    cdf = b.call("cumsum", b.call("exp", b.call("subtract", x, peak)), axis=1)
    total = b.call("slice", cdf, begin=(0, classes - 1), end=(batch, classes), strides=(1, 1))
    u = _draw(b, (batch, int(sample_size)), x.type.dtype, "uniform", 0.0, 1.0, seed)
    target = b.reshape(b.call("multiply", u, total), (batch, int(sample_size), 1))
    passed = b.call("less_equal", b.reshape(cdf, (batch, 1, classes)), target)
    count = b.call("sum", b.call("cast", passed, dtype=out), axis=(2,), keepdims=False)
    # u * total rounds up to total at worst: never past the last class
    return b.call("minimum", count, b.const(np.asarray(classes - 1, out.numpy_name)))


def training_dropout(b, data, ratio: float, seed):
    """Dropout in training mode with 0 < ratio < 1: (data * mask / (1 - ratio), mask)."""
    if not 0.0 < ratio < 1.0:
        raise NodeError(f"ratio must be in [0, 1) in training mode, got {ratio}")
    u = _unit_like(b, data, seed)
    mask = b.call("greater_equal", u, b.scalar(ratio, u))
    kept = b.call("multiply", data, b.call("cast", mask, dtype=data.type.dtype))
    return b.call("multiply", kept, b.scalar(1.0 / (1.0 - ratio), data)), mask
