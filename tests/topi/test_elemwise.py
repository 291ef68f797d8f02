"""Element-wise and broadcasting ops (graph/ops/tensor.py) against their numpy references.

Cases are batched: each check_ops call builds one module of many kernels (one LLVM compile).
"""

import numpy as np
import pytest

from tessera import te
from tessera.graph.op import get_op
from tessera.topi import broadcast, elemwise
from tessera.topi.testing import check_ops

RNG = np.random.default_rng(0)

FLOAT_UNARY = {
    "exp": (-5, 5),
    "log": (0.01, 10),
    "sqrt": (0, 10),
    "rsqrt": (0.1, 10),
    "sin": (-7, 7),
    "cos": (-7, 7),
    "tan": (-1.5, 1.5),
    "asin": (-1, 1),
    "acos": (-1, 1),
    "atan": (-9, 9),
    "sinh": (-4, 4),
    "cosh": (-4, 4),
    "tanh": (-6, 6),
    "asinh": (-9, 9),
    "acosh": (1, 9),
    "atanh": (-0.99, 0.99),
    "erf": (-4, 4),
    "floor": (-9, 9),
    "ceil": (-9, 9),
    "sigmoid": (-12, 12),
    "reciprocal": (0.5, 9),
}


def uniform(shape, lo, hi, dtype="float32"):
    return RNG.uniform(lo, hi, size=shape).astype(dtype)


def ints(shape, lo, hi, dtype="int32"):
    return RNG.integers(lo, hi, size=shape).astype(dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_float_unary(dtype):
    cases = [
        (name, [uniform((3, 37), lo, hi, dtype)], {}) for name, (lo, hi) in FLOAT_UNARY.items()
    ]
    tol = 2e-6 if dtype == "float32" else 1e-12
    check_ops(cases, rtol=tol, atol=tol)


def test_round_is_half_to_even():
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.49999997, -3.7, 7.2], "float32")
    check_ops([("round", [x], {}), ("floor", [x], {}), ("ceil", [x], {})])


@pytest.mark.parametrize("target", ["llvm", "c"])
def test_any_dtype_unary(target):
    f = np.array([-2.0, -0.0, 0.0, 3.5, np.nan, -np.inf, np.inf, 1e-30], "float32")
    cases = [("isnan", [f], {}), ("isinf", [f], {}), ("sign", [f], {}), ("abs", [f], {})]
    for dtype in ("int8", "int32", "int64", "uint8", "uint32"):
        lo = 0 if dtype.startswith("u") else -100
        x = ints((5, 17), lo, 100, dtype)
        cases += [("abs", [x], {}), ("sign", [x], {}), ("negative", [x], {}), ("copy", [x], {})]
        cases.append(("bitwise_not", [x], {}))
    cases.append(("negative", [uniform((65,), -3, 3)], {}))
    cases.append(("logical_not", [RNG.random((4, 9)) < 0.5], {}))
    check_ops(cases, target=target)


def test_abs_of_int_min_wraps():
    x = np.array([-128, -127, 0, 127], "int8")
    check_ops([("abs", [x], {}), ("negative", [x], {})])


BROADCAST_SHAPES = [
    ((4, 5), (4, 5)),
    ((4, 5), (5,)),
    ((3, 1, 5), (4, 1)),
    ((1,), (2, 3, 17)),
    ((), (6,)),
    ((2, 1, 3, 1), (1, 4, 1, 33)),
]


@pytest.mark.parametrize("sa, sb", BROADCAST_SHAPES)
def test_float_binary_broadcasts(sa, sb):
    names = ["add", "subtract", "multiply", "divide", "maximum", "minimum"]
    names += ["equal", "not_equal", "less", "less_equal", "greater", "greater_equal"]
    a, b = uniform(sa, -3, 3), uniform(sb, -3, 3)
    b = np.where(np.abs(b) < 0.1, 0.5, b).astype("float32")
    cases = [(n, [a, b], {}) for n in names]
    cases.append(("equal", [a, a.copy()], {}) if sa == sb else ("equal", [b, b.copy()], {}))
    cases.append(("power", [np.abs(a) + 0.1, b], {}))
    cases.append(("mod", [a, b], {"fmod": 1}))
    cases.append(("where", [RNG.random(sa) < 0.5, a, b], {}))
    check_ops(cases)


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8", "uint16"])
def test_int_binary_with_zero_and_negative_divisors(dtype):
    info = np.iinfo(dtype)
    lo, hi = max(info.min, -50), min(info.max, 50)
    a, b = ints((7, 11), lo, hi, dtype), ints((11,), lo, hi, dtype)
    b[:3] = [0, 1, 0] if info.min == 0 else [0, -1, 1]
    a[0, :2] = [info.min, info.max]
    names = ["add", "subtract", "multiply", "divide", "maximum", "minimum", "less", "equal"]
    names += ["bitwise_and", "bitwise_or", "bitwise_xor"]
    cases = [(n, [a, b], {}) for n in names]
    cases += [("mod", [a, b], {"fmod": 0}), ("mod", [a, b], {"fmod": 1})]
    cases.append(("power", [a, ints((11,), 0, 3, dtype)], {}))
    check_ops(cases)


@pytest.mark.parametrize("target", ["llvm", "c"])
def test_int_division_corner_cases(target):
    a = np.array([-128, -128, 7, -7, 7, -7, 5, 0, 127], "int8")
    b = np.array([-1, 0, 2, 2, -2, -2, 0, 0, -1], "int8")
    cases = [("divide", [a, b], {}), ("mod", [a, b], {"fmod": 0}), ("mod", [a, b], {"fmod": 1})]
    check_ops(cases, target=target)


@pytest.mark.parametrize("target", ["llvm", "c"])
def test_bool_logic_and_bit_shift(target):
    p, q = RNG.random((3, 8)) < 0.5, RNG.random((8,)) < 0.5
    cases = [(n, [p, q], {}) for n in ("logical_and", "logical_or", "logical_xor")]
    cases += [(n, [p, q], {}) for n in ("add", "multiply", "maximum", "minimum", "bitwise_xor")]
    cases += [(n, [p, q], {}) for n in ("equal", "not_equal", "bitwise_and", "bitwise_or")]
    for dtype in ("uint8", "uint32", "uint64"):
        bits = np.dtype(dtype).itemsize * 8
        a = ints((3, 9), 0, 255, dtype)
        s = np.array([0, 1, 3, 7, bits - 1, bits, bits + 5, 2, 1], dtype)
        cases += [("bit_shift", [a, s], {"direction": d}) for d in ("LEFT", "RIGHT")]
    check_ops(cases, target=target)


@pytest.mark.parametrize("target", ["llvm", "c"])
def test_signed_bit_shift_and_float_mod(target):
    # ONNX BitShift on signed ints (arithmetic right shift, wrapping left shift, counts outside
    # [0, bits) give 0 or -1) and Mod with fmod=0 on floats (sign of the divisor, as numpy)
    a = np.array([-128, -7, -1, 0, 1, 7, 127, -64, 5], "int8")
    s = np.array([0, 1, 7, 8, 9, -1, 3, 2, -5], "int8")
    cases = [("bit_shift", [a, s], {"direction": d}) for d in ("LEFT", "RIGHT")]
    x = np.array([5.5, -5.5, 5.5, -5.5, 0.0, -0.0, 3.0, -3.0, 1e-3], "float32")
    y = np.array([2.0, 2.0, -2.0, -2.0, 3.0, 3.0, -3.0, 3.0, -7.0], "float32")
    cases.append(("mod", [x, y], {"fmod": 0}))
    check_ops(cases, target=target)


CAST_DTYPES = ["bool", "int8", "int32", "int64", "uint8", "float32", "float64"]


@pytest.mark.parametrize("src", CAST_DTYPES)
def test_cast_to_every_dtype(src):
    if src == "bool":
        x = RNG.random((4, 9)) < 0.5
    elif src.startswith("float"):
        # in range of every target (uint8 too); truncation toward zero on negatives
        x = np.array([0.0, 0.3, 0.5, 0.99, 1.0, 2.7, 100.9, 126.5, 3.0], src)
    else:
        x = ints((4, 9), 0, 120, src)
        x[0, 0] = 0
    cases = [("cast", [x], {"dtype": d}) for d in CAST_DTYPES]
    if src.startswith("float"):
        neg = np.array([-0.5, -1.7, -100.2, 0.25, -0.0], src)
        cases += [("cast", [neg], {"dtype": d}) for d in ("int8", "int32", "int64", "bool")]
    check_ops(cases)


def test_clip():
    x = uniform((5, 33), -10, 10)
    i = ints((5, 33), -10, 10, "int32")
    cases = [
        ("clip", [x], {"a_min": 0.0, "a_max": 6.0}),
        ("clip", [x], {"a_min": -1.5}),
        ("clip", [x], {"a_max": 2}),
        ("clip", [x], {}),
        ("clip", [i], {"a_min": -2.7, "a_max": 3.9}),
    ]
    check_ops(cases)
    check_ops(cases[:1] + cases[-1:], target="c")


def test_rank0_operands():
    a, b = np.array(2.5, "float32"), uniform((6,), -1, 1)
    cases = [("subtract", [a, b], {}), ("subtract", [b, a], {}), ("exp", [a], {})]
    cases.append(("sum", [b], {"axis": None}))  # a rank-0 result
    check_ops(cases)


def test_tags_mark_elementwise_ops_for_inlining():
    x = te.placeholder((4, 8), name="x")
    y = te.placeholder((8,), name="y")
    assert get_op("exp").rules["compute"](x).op.tag == "elemwise"
    assert get_op("cast").rules["compute"](x, dtype="int32").op.tag == "elemwise"
    assert get_op("add").rules["compute"](x, y).op.tag == "broadcast"
    assert get_op("mod").rules["compute"](x, y, fmod=1).op.tag == "broadcast"


def test_bad_names_and_shapes_are_value_errors():
    x = te.placeholder((4, 8), name="x")
    with pytest.raises(ValueError, match="unknown unary op 'expp'"):
        elemwise.unary("expp", x)
    with pytest.raises(ValueError, match="do not broadcast"):
        broadcast.binary("add", x, te.placeholder((3,), name="y"))
