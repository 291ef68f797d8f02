"""ONNX converters for element-wise math, activations, comparisons, casts and reductions."""

from __future__ import annotations

import numpy as np
from onnx import helper

from tessera.frontend.onnx_registry import NodeError, onnx_op
from tessera.graph.ir import parse_dtype
from tessera.ir.small_types import E8M0, E8M0_ROUND_MODES

_UNARY = {
    "Abs": "abs",
    "Acos": "acos",
    "Acosh": "acosh",
    "Asin": "asin",
    "Asinh": "asinh",
    "Atan": "atan",
    "Atanh": "atanh",
    "Ceil": "ceil",
    "Cos": "cos",
    "Cosh": "cosh",
    "Erf": "erf",
    "Exp": "exp",
    "Floor": "floor",
    "Log": "log",
    "Neg": "negative",
    "Not": "logical_not",
    "Reciprocal": "reciprocal",
    "Round": "round",
    "Sigmoid": "sigmoid",
    "Sign": "sign",
    "Sin": "sin",
    "Sinh": "sinh",
    "Sqrt": "sqrt",
    "Tan": "tan",
    "Tanh": "tanh",
    "IsNaN": "isnan",
    "BitwiseNot": "bitwise_not",
    "Relu": "nn.relu",
    "Softplus": "nn.softplus",
    "Softsign": "nn.softsign",
    "HardSwish": "nn.hardswish",
    "Mish": "nn.mish",
}

_BINARY = {
    "Add": "add",
    "Sub": "subtract",
    "Mul": "multiply",
    "Div": "divide",
    "Pow": "power",
    "Equal": "equal",
    "Less": "less",
    "Greater": "greater",
    "LessOrEqual": "less_equal",
    "GreaterOrEqual": "greater_equal",
    "And": "logical_and",
    "Or": "logical_or",
    "Xor": "logical_xor",
    "BitwiseAnd": "bitwise_and",
    "BitwiseOr": "bitwise_or",
    "BitwiseXor": "bitwise_xor",
}


def _unary(op):
    return lambda b, X: b.call(op, X)


def _binary(op):
    return lambda b, A, B: b.call(op, A, B)


for _onnx, _op in _UNARY.items():
    onnx_op(_onnx)(_unary(_op))
for _onnx, _op in _BINARY.items():
    onnx_op(_onnx)(_binary(_op))


@onnx_op("Identity")
def identity(b, input):
    return input


@onnx_op("Mod")
def mod(b, A, B, *, fmod=0):
    return b.call("mod", A, B, fmod=fmod)


@onnx_op("BitShift")
def bit_shift(b, X, Y, *, direction):
    return b.call("bit_shift", X, Y, direction=direction)


@onnx_op("IsInf")
def is_inf(b, X, *, detect_negative=1, detect_positive=1):
    if detect_negative and detect_positive:
        return b.call("isinf", X)
    zero = b.scalar(0, X)
    side = b.call("less" if detect_negative else "greater", X, zero)
    if not detect_negative and not detect_positive:
        return b.call("logical_and", side, b.call("logical_not", side))
    return b.call("logical_and", b.call("isinf", X), side)


def _variadic(op):
    def convert(b, *data_0):
        if not data_0:
            raise NodeError("needs at least one input")
        out = data_0[0]
        for x in data_0[1:]:
            out = b.call(op, out, x)
        return out

    return convert


onnx_op("Sum")(_variadic("add"))
onnx_op("Max")(_variadic("maximum"))
onnx_op("Min")(_variadic("minimum"))


@onnx_op("Mean")
def mean(b, *data_0):
    total = _variadic("add")(b, *data_0)
    return b.call("divide", total, b.scalar(len(data_0), total))


# -- activations with attributes --------------------------------------------------------------


@onnx_op("LeakyRelu")
def leaky_relu(b, X, *, alpha=0.01):
    return b.call("nn.leaky_relu", X, alpha=alpha)


@onnx_op("Elu")
def elu(b, X, *, alpha=1.0):
    return b.call("nn.elu", X, alpha=alpha)


@onnx_op("Celu")
def celu(b, X, *, alpha=1.0):
    return b.call("nn.celu", X, alpha=alpha)


@onnx_op("Selu")
def selu(b, X, *, alpha=1.67326319217681884765625, gamma=1.05070102214813232421875):
    return b.call("nn.selu", X, alpha=alpha, gamma=gamma)


@onnx_op("ThresholdedRelu")
def thresholded_relu(b, X, *, alpha=1.0):
    return b.call("nn.thresholded_relu", X, alpha=alpha)


@onnx_op("HardSigmoid")
def hard_sigmoid(b, X, *, alpha=0.2, beta=0.5):
    return b.call("nn.hardsigmoid", X, alpha=alpha, beta=beta)


@onnx_op("Gelu", since=20)
def gelu(b, X, *, approximate="none"):
    return b.call("nn.gelu", X, approximate=approximate)


@onnx_op("Shrink")
def shrink(b, input, *, bias=0.0, lambd=0.5):
    return b.call("nn.shrink", input, bias=bias, lambd=lambd)


@onnx_op("PRelu")
def prelu(b, X, slope):
    return b.call("nn.prelu", X, slope)


# -- cast, clip, where ------------------------------------------------------------------------


def _onnx_dtype(to: int):
    try:
        return parse_dtype(helper.tensor_dtype_to_np_dtype(to))
    except (KeyError, ValueError, TypeError):
        raise NodeError(f"cast to ONNX type {to} is not supported") from None


def _cast(b, input, dtype, saturate, round_mode="up"):
    if input.type.dtype == dtype:
        return input
    if dtype.code == E8M0:  # the only type round_mode applies to
        if round_mode not in E8M0_ROUND_MODES:
            raise NodeError(f"round_mode must be one of {E8M0_ROUND_MODES}, got {round_mode!r}")
        return b.call("cast", input, dtype=dtype, saturate=bool(saturate), round_mode=round_mode)
    if input.type.dtype.is_storage_only or dtype.is_storage_only:  # float8, int4, ...
        return b.call("cast", input, dtype=dtype, saturate=bool(saturate))
    return b.call("cast", input, dtype=dtype)


@onnx_op("Cast")
def cast(b, input, *, to, saturate=1, round_mode="up"):
    return _cast(b, input, _onnx_dtype(to), saturate, round_mode)


@onnx_op("CastLike", since=15)
def cast_like(b, input, target_type, *, saturate=1, round_mode="up"):
    return _cast(b, input, target_type.type.dtype, saturate, round_mode)


@onnx_op("Clip")
def clip_6(b, input, *, max=3.4028234663852886e38, min=-3.4028234663852886e38):
    return b.call("clip", input, a_min=min, a_max=max)


@onnx_op("Clip", since=11)
def clip_11(b, input, min=None, max=None):
    bounds = {}
    for key, v in (("a_min", min), ("a_max", max)):
        if v is not None and v.type.ndim == 0 and hasattr(v, "array"):
            bounds[key] = v.array.item()
    out = b.call("clip", input, **bounds)
    # Bounds computed at run time become maximum/minimum.
    if min is not None and "a_min" not in bounds:
        out = b.call("maximum", out, min)
    if max is not None and "a_max" not in bounds:
        out = b.call("minimum", out, max)
    return out


@onnx_op("Where", since=9)
def where(b, condition, X, Y):
    return b.call("where", condition, X, Y)


# -- softmax family ---------------------------------------------------------------------------


def _coerced_2d(b, op, x, axis):
    """Before opset 13, softmax-like ops flatten to 2-D at `axis` and work on the rows."""
    shape = b.shape_of(x)
    axis = axis % max(len(shape), 1)
    rows = int(np.prod(shape[:axis], dtype=np.int64))
    flat = b.reshape(x, (rows, int(np.prod(shape[axis:], dtype=np.int64))))
    return b.reshape(op(flat, 1), shape)


def _softmax_like(name):
    def old(b, input, *, axis=1):
        return _coerced_2d(b, lambda x, a: b.call(name, x, axis=a), input, axis)

    def new(b, input, *, axis=-1):
        return b.call(name, input, axis=axis)

    return old, new


for _onnx, _op in (("Softmax", "nn.softmax"), ("LogSoftmax", "nn.log_softmax")):
    _old, _new = _softmax_like(_op)
    onnx_op(_onnx)(_old)
    onnx_op(_onnx, since=13)(_new)


def _hardmax(b, x, axis):
    index = b.call("argmax", x, axis=axis, keepdims=True)
    n = x.type.shape[axis]
    shape = [1] * x.type.ndim
    shape[axis] = n
    iota = b.const(np.arange(n, dtype=np.int64).reshape(shape))
    return b.call("cast", b.call("equal", iota, index), dtype=x.type.dtype)


@onnx_op("Hardmax")
def hardmax_1(b, input, *, axis=1):
    return _coerced_2d(b, lambda x, a: _hardmax(b, x, a), input, axis)


@onnx_op("Hardmax", since=13)
def hardmax_13(b, input, *, axis=-1):
    return _hardmax(b, input, axis % input.type.ndim)


# -- reductions -------------------------------------------------------------------------------


def _reduce(b, op, data, axes, keepdims, noop_with_empty_axes=0):
    if axes is None or len(axes) == 0:
        if noop_with_empty_axes:
            return data
        axes = None
    else:
        axes = tuple(int(a) for a in axes)
    return b.call(op, data, axis=axes, keepdims=bool(keepdims))


def _reduce_composite(kind):
    """ReduceL1/L2/LogSum/LogSumExp/SumSquare in terms of sum and max."""

    def run(b, data, axes, keepdims, noop=0):
        if kind == "l1":
            return _reduce(b, "sum", b.call("abs", data), axes, keepdims, noop)
        if kind == "sumsquare":
            return _reduce(b, "sum", b.call("multiply", data, data), axes, keepdims, noop)
        if kind == "l2":
            sq = _reduce(b, "sum", b.call("multiply", data, data), axes, keepdims, noop)
            return b.call("sqrt", sq)
        if kind == "logsum":
            return b.call("log", _reduce(b, "sum", data, axes, keepdims, noop))
        top = _reduce(b, "max", data, axes, True, noop)
        top = b.call("where", b.call("isinf", top), b.scalar(0, top), top)
        total = _reduce(
            b, "sum", b.call("exp", b.call("subtract", data, top)), axes, keepdims, noop
        )
        top_kept = top if keepdims else b.reshape(top, _reduce_shape(data, axes))
        return b.call("add", b.call("log", total), top_kept)

    return run


def _reduce_shape(data, axes):
    nd = data.type.ndim
    axes = range(nd) if axes is None or len(axes) == 0 else [int(a) % nd for a in axes]
    return tuple(d for i, d in enumerate(data.type.shape) if i not in set(axes))


_REDUCE = {
    "ReduceSum": ("sum", 13),
    "ReduceMean": ("mean", 18),
    "ReduceMax": ("max", 18),
    "ReduceMin": ("min", 18),
    "ReduceProd": ("prod", 18),
    "ReduceL1": ("l1", 18),
    "ReduceL2": ("l2", 18),
    "ReduceLogSum": ("logsum", 18),
    "ReduceLogSumExp": ("logsumexp", 18),
    "ReduceSumSquare": ("sumsquare", 18),
}


def _reduce_converters(kind):
    def apply(b, data, axes, keepdims, noop=0):
        if kind in ("sum", "mean", "max", "min", "prod"):
            return _reduce(b, kind, data, axes, keepdims, noop)
        return _reduce_composite(kind)(b, data, axes, keepdims, noop)

    def with_attr(b, data, *, axes=None, keepdims=1):
        return apply(b, data, axes, keepdims)

    def with_input(b, data, axes=None, *, keepdims=1, noop_with_empty_axes=0):
        axes = None if axes is None else b.known(axes, "axes").tolist()
        return apply(b, data, axes, keepdims, noop_with_empty_axes)

    return with_attr, with_input


for _onnx, (_kind, _since) in _REDUCE.items():
    _attr, _input = _reduce_converters(_kind)
    onnx_op(_onnx)(_attr)
    onnx_op(_onnx, since=_since)(_input)


@onnx_op("ArgMax")
def arg_max(b, data, *, axis=0, keepdims=1, select_last_index=0):
    return b.call(
        "argmax",
        data,
        axis=axis,
        keepdims=bool(keepdims),
        select_last_index=bool(select_last_index),
    )


@onnx_op("ArgMin")
def arg_min(b, data, *, axis=0, keepdims=1, select_last_index=0):
    return b.call(
        "argmin",
        data,
        axis=axis,
        keepdims=bool(keepdims),
        select_last_index=bool(select_last_index),
    )


@onnx_op("CumSum", since=11)
def cum_sum(b, x, axis, *, exclusive=0, reverse=0):
    axis = int(b.known(axis, "axis").item())
    return b.call("cumsum", x, axis=axis, exclusive=bool(exclusive), reverse=bool(reverse))


@onnx_op("CumProd", since=26)
def cum_prod(b, x, axis, *, exclusive=0, reverse=0):
    axis = int(b.known(axis, "axis").item())
    return b.call("cumprod", x, axis=axis, exclusive=bool(exclusive), reverse=bool(reverse))


@onnx_op("TopK")
def top_k_1(b, X, *, axis=-1, k):
    return b.call("topk", X, k=k, axis=axis)


@onnx_op("TopK", since=10)
def top_k_10(b, X, K, *, axis=-1, largest=1, sorted=1):
    k = int(b.known(K, "K").reshape(-1)[0])
    return b.call("topk", X, k=k, axis=axis, largest=bool(largest), sorted=bool(sorted))


@onnx_op("Einsum", since=12)
def einsum(b, *Inputs, equation):
    return b.call("einsum", *Inputs, equation=equation)
