"""Element-wise and broadcasting ops: unary math, binary arithmetic, comparisons, logic,
`where`, `cast`, `clip`. Binary ops broadcast like numpy; their inputs share one dtype
(`power` excepted, as in ONNX). Comparisons return bool.
"""

from __future__ import annotations

import math

import numpy as np

from tessera.graph.ir import TensorType, parse_dtype
from tessera.graph.op import OpKind, register_op
from tessera.graph.ops.common import broadcast_shapes, require_float, same_dtype, type_error
from tessera.ir.dtype import bool_
from tessera.topi import broadcast as topi_broadcast
from tessera.topi import cast_small as topi_cast_small
from tessera.topi import elemwise as topi_elemwise

# -- unary ------------------------------------------------------------------------------------


def _erf(x):
    # Abramowitz & Stegun 7.1.26 is only 1.5e-7 accurate; math.erf is exact, vectorized here.
    return np.vectorize(math.erf, otypes=[np.float64])(x.astype(np.float64)).astype(x.dtype)


def _keep(fn):
    """Apply a numpy function and keep the input dtype (numpy may widen)."""
    return lambda x: np.asarray(fn(x)).astype(x.dtype, copy=False)


_FLOAT_UNARY = {
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x),
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "tanh": np.tanh,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
    "erf": _erf,
    "floor": np.floor,
    "ceil": np.ceil,
    "round": np.round,  # half to even, as ONNX Round
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "reciprocal": lambda x: 1 / x,
}
_ANY_UNARY = {
    "negative": np.negative,
    "abs": np.abs,
    "sign": np.sign,
    "copy": np.copy,
}


def _register_unary(name, fn, float_only):
    op = register_op(name, kind=OpKind.ELEMWISE)

    @op.type_rule
    def _(x: TensorType) -> TensorType:
        if float_only:
            require_float(name, x)
        return x

    op.reference(_keep(fn))

    @op.compute
    def _(x):
        return topi_elemwise.unary(name, x)

    return op


for _name, _fn in _FLOAT_UNARY.items():
    _register_unary(_name, _fn, True)
for _name, _fn in _ANY_UNARY.items():
    _register_unary(_name, _fn, False)


def _register_predicate(name, fn, float_only=False, bool_only=False):
    op = register_op(name, kind=OpKind.ELEMWISE)

    @op.type_rule
    def _(x: TensorType) -> TensorType:
        if float_only:
            require_float(name, x)
        if bool_only and not x.dtype.is_bool:
            raise type_error(name, f"expects a bool tensor, got {x}")
        return x.with_dtype(bool_)

    op.reference(lambda x: np.asarray(fn(x), dtype=bool))

    @op.compute
    def _(x):
        return topi_elemwise.unary(name, x)


_register_predicate("isnan", np.isnan, float_only=True)
_register_predicate("isinf", np.isinf, float_only=True)
_register_predicate("logical_not", np.logical_not, bool_only=True)

bitwise_not = register_op("bitwise_not", kind=OpKind.ELEMWISE)


@bitwise_not.type_rule
def _(x: TensorType) -> TensorType:
    if not x.dtype.is_integer:
        raise type_error("bitwise_not", f"expects an integer tensor, got {x}")
    return x


bitwise_not.reference(np.invert)


@bitwise_not.compute
def _(x):
    return topi_elemwise.unary("bitwise_not", x)


# -- binary -----------------------------------------------------------------------------------


def _int_divide(a, b):
    # ONNX Div on integers truncates toward zero (C semantics); numpy's // floors.
    with np.errstate(divide="ignore", invalid="ignore"):
        q = a // b
        return np.where((a % b != 0) & ((a < 0) != (b < 0)), q + 1, q).astype(a.dtype)


def _divide(a, b):
    if a.dtype.kind in "iu":
        return _int_divide(a, b)
    return np.divide(a, b)


def _mod(a, b, fmod=0):
    return np.fmod(a, b) if fmod else np.mod(a, b)


_ARITH = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "divide": _divide,
    "maximum": np.maximum,
    "minimum": np.minimum,
}
_COMPARE = {
    "equal": np.equal,
    "not_equal": np.not_equal,
    "less": np.less,
    "less_equal": np.less_equal,
    "greater": np.greater,
    "greater_equal": np.greater_equal,
}
_LOGIC = {"logical_and": np.logical_and, "logical_or": np.logical_or, "logical_xor": np.logical_xor}
_BITWISE = {
    "bitwise_and": np.bitwise_and,
    "bitwise_or": np.bitwise_or,
    "bitwise_xor": np.bitwise_xor,
}


def _register_binary(name, fn, result="same", check=None):
    op = register_op(name, kind=OpKind.BROADCAST)

    @op.type_rule
    def _(a: TensorType, b: TensorType) -> TensorType:
        dtype = same_dtype(name, a, b)
        if check is not None:
            check(name, a)
        shape = broadcast_shapes(name, a.shape, b.shape)
        return TensorType(shape, bool_ if result == "bool" else dtype)

    @op.reference
    def _(a, b):
        with np.errstate(all="ignore"):
            out = np.asarray(fn(a, b))
        return out.astype(bool if result == "bool" else a.dtype, copy=False)

    @op.compute
    def _(a, b):
        return topi_broadcast.binary(name, a, b)

    return op


def _check_bool(name, t):
    if not t.dtype.is_bool:
        raise type_error(name, f"expects bool tensors, got {t}")


def _check_int(name, t):
    if not (t.dtype.is_integer or t.dtype.is_bool):
        raise type_error(name, f"expects integer tensors, got {t}")


for _name, _fn in _ARITH.items():
    _register_binary(_name, _fn)
for _name, _fn in _COMPARE.items():
    _register_binary(_name, _fn, result="bool")
for _name, _fn in _LOGIC.items():
    _register_binary(_name, _fn, result="bool", check=_check_bool)
for _name, _fn in _BITWISE.items():
    _register_binary(_name, _fn, check=_check_int)

mod = register_op("mod", kind=OpKind.BROADCAST)


@mod.type_rule
def _(a: TensorType, b: TensorType, fmod: int = 0) -> TensorType:
    return TensorType(broadcast_shapes("mod", a.shape, b.shape), same_dtype("mod", a, b))


@mod.reference
def _(a, b, fmod=0):
    with np.errstate(all="ignore"):
        return _mod(a, b, fmod).astype(a.dtype)


@mod.compute
def _(a, b, fmod=0):
    return topi_broadcast.broadcast_compute(
        lambda x, y: topi_broadcast.mod(x, y, bool(fmod)), [a, b], "mod"
    )


power = register_op("power", kind=OpKind.BROADCAST)


@power.type_rule
def _(a: TensorType, b: TensorType) -> TensorType:
    return TensorType(broadcast_shapes("power", a.shape, b.shape), a.dtype)


@power.reference
def _(a, b):
    with np.errstate(all="ignore"):
        if a.dtype.kind in "iu":  # as topi.broadcast.power: clipped to int64, then wrapped
            p = np.power(a.astype(np.float64), b.astype(np.float64))
            edge = topi_broadcast.INT64_EDGE
            return np.clip(p, -edge, edge).astype(np.int64).astype(a.dtype)
        return np.power(a, b.astype(a.dtype)).astype(a.dtype)


@power.compute
def _(a, b):
    return topi_broadcast.binary("power", a, b)


bit_shift = register_op("bit_shift", kind=OpKind.BROADCAST)


@bit_shift.type_rule
def _(a: TensorType, b: TensorType, direction: str) -> TensorType:
    if direction not in ("LEFT", "RIGHT"):
        raise type_error("bit_shift", f"direction must be LEFT or RIGHT, got {direction!r}")
    if not a.dtype.is_integer or a.dtype.is_bool:
        raise type_error("bit_shift", f"expects integer tensors, got {a}")
    return TensorType(
        broadcast_shapes("bit_shift", a.shape, b.shape), same_dtype("bit_shift", a, b)
    )


@bit_shift.reference
def _(a, b, direction):
    a, b = np.broadcast_arrays(a, b)
    too_far = (b < 0) | (b >= a.dtype.itemsize * 8)
    safe = np.where(too_far, 0, b).astype(a.dtype)
    if direction == "LEFT":  # on the unsigned view: signed left shifts wrap
        unsigned = np.dtype(f"u{a.dtype.itemsize}")
        shifted = np.left_shift(a.view(unsigned), safe.view(unsigned)).view(a.dtype)
        return np.where(too_far, 0, shifted).astype(a.dtype)
    outside = np.where(a < 0, -1, 0) if a.dtype.kind == "i" else 0
    return np.where(too_far, outside, np.right_shift(a, safe)).astype(a.dtype)


@bit_shift.compute
def _(a, b, direction):
    return topi_broadcast.broadcast_compute(
        lambda x, y: topi_broadcast.bit_shift(x, y, direction), [a, b], "bit_shift"
    )


# -- where, cast, clip ------------------------------------------------------------------------

where = register_op("where", kind=OpKind.BROADCAST)


@where.type_rule
def _(cond: TensorType, a: TensorType, b: TensorType) -> TensorType:
    if not cond.dtype.is_bool:
        raise type_error("where", f"condition must be bool, got {cond}")
    dtype = same_dtype("where", a, b)
    return TensorType(broadcast_shapes("where", cond.shape, a.shape, b.shape), dtype)


@where.reference
def _(cond, a, b):
    return np.where(cond, a, b)


@where.compute
def _(cond, a, b):
    return topi_broadcast.where(cond, a, b)


cast = register_op("cast", kind=OpKind.ELEMWISE)


# saturate: float8 targets clamp overflow to their largest finite value (ONNX Cast's attribute);
# round_mode: how float8_e8m0fnu rounds ("up", "down", "nearest": small_types.E8M0)
@cast.type_rule
def _(x: TensorType, dtype, saturate=True, round_mode="up") -> TensorType:
    return x.with_dtype(parse_dtype(dtype))


def _is_small(dtype) -> bool:
    return parse_dtype(dtype).is_storage_only


@cast.reference
def _(x, dtype, saturate=True, round_mode="up"):
    if _is_small(dtype) or x.dtype.kind == "V" and x.dtype.name != "bfloat16":
        return topi_cast_small.reference(x, parse_dtype(dtype), saturate, round_mode)
    target = parse_dtype(dtype)
    # bfloat16 values are ml_dtypes' bfloat16 (round to nearest even), not their uint16 bits
    if target.code == "bfloat":
        import ml_dtypes

        target = np.dtype(ml_dtypes.bfloat16)
    else:
        target = np.dtype(target.numpy_name)
    if x.dtype.kind in "fV" and target.kind in "iu":
        with np.errstate(invalid="ignore"):
            return np.trunc(x).astype(target)
    return x.astype(target)


@cast.compute
def _(x, dtype, saturate=True, round_mode="up"):
    if _is_small(dtype) or x.dtype.is_storage_only:
        return topi_cast_small.cast(x, parse_dtype(dtype), bool(saturate), round_mode)
    return topi_elemwise.cast(x, parse_dtype(dtype))


clip = register_op("clip", kind=OpKind.ELEMWISE)


@clip.type_rule
def _(x: TensorType, a_min=None, a_max=None) -> TensorType:
    return x


@clip.reference
def _(x, a_min=None, a_max=None):
    out = x
    if a_min is not None:
        out = np.maximum(out, np.asarray(a_min).astype(x.dtype))
    if a_max is not None:
        out = np.minimum(out, np.asarray(a_max).astype(x.dtype))
    return out.astype(x.dtype)


@clip.compute
def _(x, a_min=None, a_max=None):
    return topi_elemwise.clip(x, a_min, a_max)
