"""topi.cast_small: conversions to and from the small storage types, on llvm and c, against
the ONNX reference (onnx.reference's Cast, ml_dtypes underneath) on every special value."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

import tessera
from tessera import te
from tessera.ir.dtype import DType
from tessera.ir.small_types import FLOAT_FORMATS, INT_FORMATS, decode, encode, int_range
from tessera.topi import cast_small

SMALL_FLOATS = list(FLOAT_FORMATS)
SMALL_INTS = list(INT_FORMATS)
WIDE_FLOATS = ["float32", "float64", "float16", "bfloat16"]
TARGETS = ["llvm", "c"]


def _onnx_cast(x: np.ndarray, dtype: str, saturate: bool) -> np.ndarray:
    """What onnx.reference's Cast (opset 23) computes."""
    to = helper.np_dtype_to_tensor_dtype(np.dtype(DType.parse(dtype).dtype))
    src = helper.np_dtype_to_tensor_dtype(x.dtype)
    node = helper.make_node("Cast", ["x"], ["y"], to=to, saturate=int(saturate))
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", src, x.shape)],
        [helper.make_tensor_value_info("y", to, x.shape)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    return ReferenceEvaluator(model).run(None, {"x": x})[0]


def _special_values(name: str) -> np.ndarray:
    """0, -0, NaN, +-Inf, every finite value of the format, every halfway point between two
    of them and its neighbours, beyond the largest finite, tiny values."""
    finite = np.array([decode(b, name) for b in range(1 << FLOAT_FORMATS[name].width)])
    finite = np.unique(finite[np.isfinite(finite)])
    mids = (finite[1:] + finite[:-1]) / 2
    top = finite.max()
    extra = [0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, 1e-7, -1e-7, 1e-30, 1e6, -1e6]
    extra += [top * 1.01, top * 1.07, -top * 1.07, top * 1.5, top * 4]
    return np.concatenate([finite, mids, np.nextafter(mids, np.inf), np.nextafter(mids, 0), extra])


def _build(inputs, outputs, target):
    s = te.create_schedule([t.op for t in outputs])
    return tessera.build(s, [*inputs, *outputs], target=target)


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint8) if a.dtype.itemsize == 1 else a


def _same(got: np.ndarray, want: np.ndarray) -> bool:
    """Bitwise equal, except that any NaN equals any NaN (ONNX keeps no NaN payload)."""
    g, w = got.astype(np.float64), want.astype(np.float64)
    nan = np.isnan(g) & np.isnan(w)
    return bool(np.all((_bits(got) == _bits(want)) | nan))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", SMALL_FLOATS)
def test_floats_to_small_float_match_onnx(name, target):
    base = _special_values(name)
    n = base.size
    A = {src: te.placeholder((n,), name=f"A_{src}", dtype=src) for src in WIDE_FLOATS}
    outs = [cast_small.cast(A[s], name, sat) for s in WIDE_FLOATS for sat in (True, False)]
    f = _build(list(A.values()), outs, target)
    with np.errstate(over="ignore"):  # 1e6 and beyond the float8 range overflow float16
        xs = [base.astype(ml_dtypes.bfloat16 if s == "bfloat16" else s) for s in WIDE_FLOATS]
    ys = [np.zeros(n, DType.parse(name).dtype) for _ in outs]
    f(*xs, *ys)
    k = 0
    for src, x in zip(WIDE_FLOATS, xs, strict=True):
        for sat in (True, False):
            # ONNX's reference (ml_dtypes) rounds float64 to float32 first: compare where
            # that is exact, and everywhere with tessera's reference, which rounds once
            exact = x.astype(np.float32).astype(np.float64) == x.astype(np.float64)
            want = _onnx_cast(x, name, sat)
            assert _same(ys[k][exact], want[exact]), (src, sat)
            assert _same(ys[k], cast_small.reference(x, name, sat)), (src, sat)
            assert _same(ys[k], _python_encode(x, name, sat)), (src, sat)
            k += 1


def _python_encode(x: np.ndarray, name: str, saturate: bool) -> np.ndarray:
    bits = [encode(float(v), name, saturate) for v in x.astype(np.float64)]
    return np.array(bits, np.uint8).view(DType.parse(name).dtype)


def test_float64_rounds_once():
    # a hair below the tie between 416 and 448: 416; through float32 it would be the tie, 448
    x = np.array([np.nextafter(-432.0, 0.0), np.nextafter(432.0, 0.0)])
    A = te.placeholder((2,), name="A", dtype="float64")
    f = _build([A], [cast_small.cast(A, "float8_e4m3fn")], "llvm")
    y = np.zeros(2, ml_dtypes.float8_e4m3fn)
    f(x, y)
    np.testing.assert_array_equal(y.astype(np.float32), [-416, 416])
    np.testing.assert_array_equal(cast_small.reference(x, "float8_e4m3fn"), y)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", SMALL_FLOATS + SMALL_INTS)
def test_small_to_wide_is_exact(name, target):
    width = FLOAT_FORMATS[name].width if name in FLOAT_FORMATS else INT_FORMATS[name][0]
    x = np.arange(1 << width, dtype=np.uint8).view(DType.parse(name).dtype)
    dsts = ["float32", "float64", "float16", "int8", "int32", "bool"]
    if name in SMALL_INTS:
        dsts.append("uint8")
    A = te.placeholder((x.size,), name="A", dtype=name)
    f = _build([A], [cast_small.cast(A, d) for d in dsts], target)
    ys = [np.zeros(x.size, d) for d in dsts]
    f(x, *ys)
    values = x.astype(np.float64)
    for d, y in zip(dsts, ys, strict=True):
        defined = np.isfinite(values)  # NaN, Inf and values out of an int's range are undefined
        if np.dtype(d).kind in "iu":  # (numpy's own answer for them differs between CPUs)
            info = np.iinfo(d)
            defined &= (values >= info.min) & (values <= info.max)
        if np.dtype(d).kind == "f":
            np.testing.assert_array_equal(y.astype(np.float64), values, err_msg=d)
        else:
            want = _onnx_cast(x, d, True)
            np.testing.assert_array_equal(y[defined], want[defined], err_msg=d)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", SMALL_INTS)
def test_to_small_ints_truncates_and_wraps(name, target):
    n = 80
    ints = np.arange(-40, 40, dtype=np.int32)
    floats = np.linspace(-20.75, 20.75, n).astype(np.float32)
    A = te.placeholder((n,), name="A", dtype="int32")
    B = te.placeholder((n,), name="B", dtype="float32")
    f = _build([A, B], [cast_small.cast(A, name), cast_small.cast(B, name)], target)
    ys = [np.zeros(n, DType.parse(name).dtype) for _ in range(2)]
    f(ints, floats, *ys)
    np.testing.assert_array_equal(_bits(ys[0]), _bits(_onnx_cast(ints, name, True)))
    # floats truncate toward zero; one the type cannot hold becomes 0 (as ml_dtypes 0.7, the
    # ONNX reference's, converts; ONNX leaves it undefined, and older ml_dtypes wrapped)
    lo, hi = int_range(name)
    t = np.trunc(floats)
    want = np.where((t >= lo) & (t <= hi), t, 0).astype(np.int32)
    np.testing.assert_array_equal(_bits(ys[1]), _bits(_onnx_cast(want, name, True)))
    np.testing.assert_array_equal(_bits(ys[1]), _bits(cast_small.reference(floats, name)))


@pytest.mark.parametrize("target", TARGETS)
def test_small_to_small_goes_through_the_value(target):
    x = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn)
    A = te.placeholder((256,), name="A", dtype="float8_e4m3fn")
    outs = [cast_small.cast(A, d) for d in ("float8_e5m2", "float4_e2m1fn", "int4")]
    f = _build([A], outs, target)
    ys = [np.zeros(256, o.dtype.dtype) for o in outs]
    f(x, *ys)
    finite = np.isfinite(x.astype(np.float32))
    for o, y in zip(outs, ys, strict=True):
        want = cast_small.reference(x, o.dtype)
        assert _same(y[finite], want[finite]), o.dtype


def test_the_numpy_reference_is_onnx():
    x = _special_values("float8_e5m2").astype(np.float32)
    for sat in (True, False):
        got = cast_small.reference(x, "float8_e5m2", sat)
        assert _same(got, _onnx_cast(x, "float8_e5m2", sat))


def test_arithmetic_on_storage_types_is_refused():
    A = te.placeholder((4,), name="A", dtype="float8_e4m3fn")
    with pytest.raises(TypeError, match="float8_e4m3fn is a storage type"):
        te.compute((4,), lambda i: A[i] + A[i])


def test_a_plain_cast_is_refused_by_the_code_generators():
    A = te.placeholder((4,), name="A", dtype="float8_e4m3fn")
    B = te.compute((4,), lambda i: te.cast(A[i], "float32"), name="B")
    for target in TARGETS:
        with pytest.raises((TypeError, ValueError), match="cast_small"):
            _build([A], [B], target)


def test_onnx_version_has_the_types():
    assert onnx.TensorProto.FLOAT8E4M3FN and onnx.TensorProto.INT2
