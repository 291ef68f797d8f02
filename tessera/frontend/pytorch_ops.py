"""ATen converters for element-wise math, activations, comparisons, reductions and tensor
creation (full, arange, ...). Argument names are those of the ATen schemas.

Type promotion follows torch: the result dtype is the node's (`b.out_dtype`), so a converter
casts its operands to it; comparisons cast to the operands' common dtype instead.
"""

from __future__ import annotations

import numpy as np

from tessera.frontend.pytorch_registry import NodeError, aten_op
from tessera.graph.ir import Value

_UNARY = {
    "abs": "abs",
    "acos": "acos",
    "acosh": "acosh",
    "asin": "asin",
    "asinh": "asinh",
    "atan": "atan",
    "atanh": "atanh",
    "ceil": "ceil",
    "cos": "cos",
    "cosh": "cosh",
    "erf": "erf",
    "exp": "exp",
    "floor": "floor",
    "log": "log",
    "neg": "negative",
    "reciprocal": "reciprocal",
    "relu": "nn.relu",
    "round": "round",
    "rsqrt": "rsqrt",
    "sigmoid": "sigmoid",
    "sign": "sign",
    "sin": "sin",
    "sinh": "sinh",
    "sqrt": "sqrt",
    "tan": "tan",
    "tanh": "tanh",
    "isnan": "isnan",
    "isinf": "isinf",
}


def _unary(op):
    def convert(b, self):
        x = self
        if op not in ("abs", "negative", "sign", "isnan", "isinf", "nn.relu", "floor", "ceil"):
            x = b.cast(x, b.out_dtype)  # exp(int) is float in torch
        return b.call(op, x)

    return convert


for _name, _op in _UNARY.items():
    aten_op(f"aten.{_name}.default")(_unary(_op))


@aten_op("aten.log1p.default")
def log1p(b, self):
    x = b.cast(self, b.out_dtype)
    return b.call("log", b.call("add", x, b.scalar(1, b.out_dtype)))


def _log_base(base):
    def convert(b, self):
        x = b.call("log", b.cast(self, b.out_dtype))
        return b.call("multiply", x, b.scalar(1.0 / np.log(base), b.out_dtype))

    return convert


aten_op("aten.log2.default")(_log_base(2.0))
aten_op("aten.log10.default")(_log_base(10.0))


@aten_op("aten.trunc.default")
def trunc(b, self):
    if not b.out_dtype.startswith("float"):
        return self
    return b.call("multiply", b.call("sign", self), b.call("floor", b.call("abs", self)))


@aten_op("aten.expm1.default")
def expm1(b, self):
    x = b.cast(self, b.out_dtype)
    return b.call("subtract", b.call("exp", x), b.scalar(1, b.out_dtype))


@aten_op("aten.logical_not.default", "aten.bitwise_not.default")
def logical_not(b, self):
    if self.type.dtype.numpy_name == "bool":
        return b.call("logical_not", self)
    return b.call("bitwise_not", self)


@aten_op("aten.gelu.default")
def gelu(b, self, approximate="none"):
    return b.call("nn.gelu", self, approximate=approximate)


@aten_op("aten.leaky_relu.default")
def leaky_relu(b, self, negative_slope=0.01):
    return b.call("nn.leaky_relu", self, alpha=float(negative_slope))


@aten_op("aten.elu.default")
def elu(b, self, alpha=1, scale=1, input_scale=1):
    x = self if input_scale == 1 else b.call("multiply", self, b.scalar(input_scale, b.out_dtype))
    y = b.call("nn.elu", x, alpha=float(alpha))
    return y if scale == 1 else b.call("multiply", y, b.scalar(scale, b.out_dtype))


@aten_op("aten.hardtanh.default")
def hardtanh(b, self, min_val=-1, max_val=1):
    return b.call("clip", self, a_min=float(min_val), a_max=float(max_val))


@aten_op("aten.clamp.default", "aten.clamp_min.default", "aten.clamp_max.default")
def clamp(b, self, min=None, max=None):
    x = b.cast(self, b.out_dtype)
    bounds = {k: v for k, v in (("a_min", min), ("a_max", max)) if v is not None}
    return b.call("clip", x, **bounds)


@aten_op("aten.clamp.Tensor")
def clamp_tensor(b, self, min=None, max=None):
    x = b.cast(self, b.out_dtype)
    if min is not None:
        x = b.call("maximum", x, b.cast(min, b.out_dtype))
    if max is not None:
        x = b.call("minimum", x, b.cast(max, b.out_dtype))
    return x


# -- binary arithmetic ------------------------------------------------------------------------


def _operands(b, a, c, dtype):
    """Both operands as Values of `dtype` (a Python scalar becomes a 0-d constant)."""
    return b.tensor(a, dtype), b.tensor(c, dtype)


def _scaled(b, x, alpha):
    return x if alpha == 1 else b.call("multiply", x, b.scalar(alpha, b.out_dtype))


@aten_op("aten.add.Tensor", "aten.add.Scalar")
def add(b, self, other, alpha=1):
    x, y = _operands(b, self, other, b.out_dtype)
    return b.call("add", x, _scaled(b, y, alpha))


@aten_op("aten.sub.Tensor", "aten.sub.Scalar")
def sub(b, self, other, alpha=1):
    x, y = _operands(b, self, other, b.out_dtype)
    return b.call("subtract", x, _scaled(b, y, alpha))


@aten_op("aten.rsub.Scalar", "aten.rsub.Tensor")
def rsub(b, self, other, alpha=1):
    x, y = _operands(b, self, other, b.out_dtype)
    return b.call("subtract", y, _scaled(b, x, alpha))


@aten_op("aten.mul.Tensor", "aten.mul.Scalar")
def mul(b, self, other):
    if b.out_dtype == "bool":
        return b.call("logical_and", *_operands(b, self, other, "bool"))
    return b.call("multiply", *_operands(b, self, other, b.out_dtype))


@aten_op("aten.div.Tensor", "aten.div.Scalar")
def div(b, self, other):
    return b.call("divide", *_operands(b, self, other, b.out_dtype))


@aten_op("aten.div.Tensor_mode", "aten.div.Scalar_mode")
def div_mode(b, self, other, rounding_mode=None):
    if rounding_mode is None:
        return div(b, self, other)
    x, y = _operands(b, self, other, b.out_dtype)
    if b.out_dtype.startswith(("int", "uint")):
        if rounding_mode == "trunc":
            return b.call("divide", x, y)  # integer division truncates, as C does
        q = b.call("divide", b.cast(x, "float64"), b.cast(y, "float64"))
        return b.cast(b.call("floor", q), b.out_dtype)
    q = b.call("divide", x, y)
    if rounding_mode == "floor":
        return b.call("floor", q)
    sign = b.call("sign", q)
    return b.call("multiply", sign, b.call("floor", b.call("abs", q)))


@aten_op("aten.remainder.Tensor", "aten.remainder.Scalar")
def remainder(b, self, other):
    return b.call("mod", *_operands(b, self, other, b.out_dtype), fmod=0)


@aten_op("aten.fmod.Tensor", "aten.fmod.Scalar")
def fmod(b, self, other):
    return b.call("mod", *_operands(b, self, other, b.out_dtype), fmod=1)


@aten_op("aten.pow.Tensor_Scalar", "aten.pow.Tensor_Tensor", "aten.pow.Scalar")
def pow_(b, self, exponent):
    if not isinstance(exponent, Value) and exponent == 2:
        x = b.tensor(self, b.out_dtype)
        return b.call("multiply", x, x)
    if not isinstance(exponent, Value) and exponent == 0.5:
        return b.call("sqrt", b.tensor(self, b.out_dtype))
    return b.call("power", *_operands(b, self, exponent, b.out_dtype))


def _elementwise(op):
    def convert(b, self, other):
        return b.call(op, *_operands(b, self, other, b.out_dtype))

    return convert


aten_op("aten.maximum.default")(_elementwise("maximum"))
aten_op("aten.minimum.default")(_elementwise("minimum"))


@aten_op("aten.where.self", "aten.where.ScalarSelf", "aten.where.ScalarOther", "aten.where.Scalar")
def where(b, condition, self, other):
    x, y = _operands(b, self, other, b.out_dtype)
    return b.call("where", b.cast(condition, "bool"), x, y)


# -- comparisons and logic --------------------------------------------------------------------

_COMPARE = {"eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal",
            "gt": "greater", "ge": "greater_equal"}  # fmt: skip


def _common_dtype(self, other) -> str:
    """torch's promotion for a comparison: a Python scalar only lifts an int tensor to float."""
    x = self.type.dtype.numpy_name
    if not isinstance(other, Value):
        is_float = isinstance(other, float) and not np.issubdtype(np.dtype(x), np.floating)
        return "float32" if is_float else x
    return np.result_type(np.dtype(x), np.dtype(other.type.dtype.numpy_name)).name


def _compare(op):
    def convert(b, self, other):
        dtype = _common_dtype(self, other)
        return b.call(op, *_operands(b, self, other, dtype))

    return convert


for _name, _op in _COMPARE.items():
    aten_op(f"aten.{_name}.Tensor", f"aten.{_name}.Scalar")(_compare(_op))


def _logical(op):
    def convert(b, self, other):
        return b.call(op, b.cast(self, "bool"), b.tensor(other, "bool"))

    return convert


def _bitwise(name):
    """On bool tensors the logical op; on integers the bitwise one."""

    def convert(b, self, other):
        if b.out_dtype == "bool":
            return _logical(f"logical_{name}")(b, self, other)
        return b.call(f"bitwise_{name}", *_operands(b, self, other, b.out_dtype))

    return convert


for _name in ("and", "or", "xor"):
    aten_op(f"aten.logical_{_name}.default")(_logical(f"logical_{_name}"))
    aten_op(f"aten.bitwise_{_name}.Tensor", f"aten.bitwise_{_name}.Scalar")(_bitwise(_name))


# -- reductions -------------------------------------------------------------------------------


def _axes(x: Value, dim) -> tuple[int, ...] | None:
    if dim is None or (isinstance(dim, (tuple, list)) and len(dim) == 0):
        return None
    dims = dim if isinstance(dim, (tuple, list)) else (dim,)
    return tuple(sorted(int(d) % max(x.type.ndim, 1) for d in dims))


def _reduce(op):
    def convert(b, self, dim=None, keepdim=False, dtype=None):
        x = b.cast(self, b.out_dtype) if op in ("sum", "mean", "prod") else self
        axes = _axes(x, dim)
        if op == "mean" and keepdim and x.type.ndim == 4 and axes == (2, 3):
            return b.call("nn.global_avg_pool2d", x)  # the pooling kernel is the faster one
        return b.call(op, x, axis=axes, keepdims=bool(keepdim))

    return convert


aten_op("aten.mean.dim", "aten.mean.default")(_reduce("mean"))
aten_op("aten.sum.dim_IntList", "aten.sum.default")(_reduce("sum"))
aten_op("aten.prod.dim_int", "aten.prod.default")(_reduce("prod"))
aten_op("aten.amax.default", "aten.max.default")(_reduce("max"))
aten_op("aten.amin.default", "aten.min.default")(_reduce("min"))


@aten_op("aten.any.dim", "aten.any.dims", "aten.any.default")
def any_(b, self, dim=None, keepdim=False):
    x = b.cast(b.cast(self, "bool"), "int32")
    return b.cast(b.call("max", x, axis=_axes(x, dim), keepdims=bool(keepdim)), "bool")


@aten_op("aten.all.dim", "aten.all.dims", "aten.all.default")
def all_(b, self, dim=None, keepdim=False):
    x = b.cast(b.cast(self, "bool"), "int32")
    return b.cast(b.call("min", x, axis=_axes(x, dim), keepdims=bool(keepdim)), "bool")


def _arg_reduce(op, arg):
    def with_values(b, self, dim, keepdim=False):
        values = b.call(op, self, axis=(dim % self.type.ndim,), keepdims=bool(keepdim))
        return values, b.call(arg, self, axis=dim, keepdims=bool(keepdim))

    def index_only(b, self, dim=None, keepdim=False):
        if dim is None:  # the index into the flattened tensor
            return b.reshape(b.call(arg, b.reshape(self, (self.type.size,)), axis=0), b.out_shape)
        return b.call(arg, self, axis=dim, keepdims=bool(keepdim))

    return with_values, index_only


for _op, _arg in (("max", "argmax"), ("min", "argmin")):
    _with_values, _index_only = _arg_reduce(_op, _arg)
    aten_op(f"aten.{_op}.dim")(_with_values)
    aten_op(f"aten.{_arg}.default")(_index_only)


@aten_op("aten.var.correction", "aten.var.dim")
def var(b, self, dim=None, correction=None, keepdim=False, unbiased=True):
    axes = _axes(self, dim) or tuple(range(self.type.ndim))
    n = int(np.prod([self.type.shape[a] for a in axes]))
    ddof = (1 if unbiased else 0) if correction is None else correction
    mean = b.call("mean", self, axis=axes, keepdims=True)
    d = b.call("subtract", self, mean)
    total = b.call("sum", b.call("multiply", d, d), axis=axes, keepdims=bool(keepdim))
    return b.call("divide", total, b.scalar(max(n - ddof, 0), b.out_dtype))


@aten_op("aten.cumsum.default")
def cumsum(b, self, dim, dtype=None):
    return b.call("cumsum", b.cast(self, b.out_dtype), axis=dim)


# -- creation ---------------------------------------------------------------------------------


def _filled(b, value):
    """A constant of the node's shape and dtype: creation ops compute nothing at run time."""
    if isinstance(value, Value):
        raise NodeError("a fill value computed at run time is not supported")
    return b.const(np.full(b.out_shape, value, dtype=b.out_dtype))


@aten_op("aten.full.default", "aten.full_like.default")
def full(b, fill_value, **_):
    return _filled(b, fill_value)


@aten_op("aten.scalar_tensor.default")
def scalar_tensor(b, s, **_):
    return _filled(b, s)


@aten_op("aten.fill.Scalar")
def fill(b, self, value):
    return _filled(b, value)


@aten_op("aten.zeros.default", "aten.zeros_like.default", "aten.empty_like.default",
         "aten.empty.memory_format", "aten.new_zeros.default",
         "aten.empty_strided.default")  # fmt: skip
def zeros(b, **_):
    return _filled(b, 0)


@aten_op("aten.ones.default", "aten.ones_like.default", "aten.new_ones.default")
def ones(b, **_):
    return _filled(b, 1)


@aten_op("aten.arange.start_step", "aten.arange.default", "aten.arange.start")
def arange(b, start=0, end=None, step=1, **_):
    if end is None:
        start, end = 0, start
    return b.const(np.arange(start, end, step).astype(b.out_dtype))


@aten_op("aten.linalg_vector_norm.default")
def vector_norm(b, self, ord=2, dim=None, keepdim=False, dtype=None):
    x = b.cast(self, b.out_dtype)
    axes = _axes(x, dim)
    if ord == 2:
        total = b.call("sum", b.call("multiply", x, x), axis=axes, keepdims=bool(keepdim))
        return b.call("sqrt", total)
    if ord == 1:
        return b.call("sum", b.call("abs", x), axis=axes, keepdims=bool(keepdim))
    if ord == float("inf"):
        return b.call("max", b.call("abs", x), axis=axes, keepdims=bool(keepdim))
    raise NodeError(f"the {ord}-norm is not supported (1, 2 and inf are)")


@aten_op("aten.topk.default")
def topk(b, self, k, dim=-1, largest=True, sorted=True):
    return b.call("topk", self, k=int(k), axis=dim, largest=bool(largest), sorted=bool(sorted))


@aten_op("aten.sort.default", "aten.sort.stable")
def sort(b, self, dim=-1, descending=False, stable=None):
    """A full sort is a top-k of the whole axis (stable: ties keep their order)."""
    n = self.type.shape[dim]
    return b.call("topk", self, k=n, axis=dim, largest=bool(descending), sorted=True)
