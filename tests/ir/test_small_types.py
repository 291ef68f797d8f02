"""The small storage types: DType properties, and the Python encoder/decoder of
tessera.ir.small_types against ml_dtypes (ONNX's numpy side) bit for bit."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from tessera.ir.dtype import STORAGE_ONLY, DType
from tessera.ir.small_types import FLOAT_FORMATS, INT_FORMATS, decode, encode
from tessera.tir.expr import IntImm, const


@pytest.mark.parametrize("name", STORAGE_ONLY)
def test_dtype_is_a_one_byte_storage_type(name):
    dt = DType.parse(name)
    assert str(dt) == name and dt.bits == 8 and dt.itemsize == 1
    assert dt.is_storage_only and not dt.is_float and not dt.is_integer
    assert DType.parse(f"{name}x16") == dt.with_lanes(16)
    assert dt.dtype == np.dtype(getattr(ml_dtypes, name))
    assert DType.parse(np.dtype(getattr(ml_dtypes, name))) == dt


def test_int_ranges_and_value_bits():
    assert (DType.parse("int4").min_value(), DType.parse("int4").max_value()) == (-8, 7)
    assert (DType.parse("uint2").min_value(), DType.parse("uint2").max_value()) == (0, 3)
    assert DType.parse("float4_e2m1fn").value_bits == 4
    assert DType.parse("float8_e5m2").value_bits == 8


@pytest.mark.parametrize("name", list(FLOAT_FORMATS))
def test_decode_matches_ml_dtypes(name):
    width = FLOAT_FORMATS[name].width
    bits = np.arange(1 << width, dtype=np.uint8)
    want = bits.view(getattr(ml_dtypes, name)).astype(np.float64)
    got = np.array([decode(b, name) for b in bits])
    np.testing.assert_array_equal(got, want)  # NaNs at the same places
    number = ~np.isnan(want)
    assert np.array_equal(np.signbit(got[number]), np.signbit(want[number]))  # -0 too


@pytest.mark.parametrize("saturate", [True, False])
@pytest.mark.parametrize("name", list(FLOAT_FORMATS))
def test_encode_matches_onnx_rules(name, saturate):
    """ONNX: saturate clips to the largest finite, then rounds to nearest even (onnx.reference:
    np.clip then ml_dtypes' astype); without it ml_dtypes' astype."""
    t = getattr(ml_dtypes, name)
    finite = np.array([decode(b, name) for b in range(1 << FLOAT_FORMATS[name].width)])
    finite = np.unique(finite[np.isfinite(finite)])
    mids = (finite[1:] + finite[:-1]) / 2
    x = np.concatenate([finite, mids, np.nextafter(mids, 0), [np.nan, -np.nan, np.inf, -np.inf]])
    x = np.concatenate([x, [1e-7, -1e-7, 1e-40, 1e6, -1e6, finite.max() * 1.04]]).astype(np.float32)
    ref = x
    if saturate and FLOAT_FORMATS[name].nan is not None:
        top = float(ml_dtypes.finfo(t).max)
        ref = np.clip(x, -top, top)
    want = ref.astype(t).view(np.uint8)
    got = np.array([encode(float(v), name, saturate) for v in x], np.uint8)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", list(INT_FORMATS))
def test_ints_wrap_like_ml_dtypes(name):
    """Ints wrap; floats truncate, and one out of the type's range is 0, as ml_dtypes 0.7."""
    t = getattr(ml_dtypes, name)
    ints = np.arange(-40, 40)
    floats = np.linspace(-20.5, 20.5, 83)
    assert [encode(int(v), name) for v in ints] == ints.astype(t).view(np.uint8).tolist()
    assert [encode(float(v), name) for v in floats] == floats.astype(t).view(np.uint8).tolist()
    assert [decode(b, name) for b in range(256)] == [
        int(v) for v in np.arange(256, dtype=np.uint8).view(t).astype(np.int32)
    ]


def test_spec_table_special_values():
    """The ONNX Cast tables, row by row."""
    assert encode(-0.0, "float8_e4m3fn") == 0x80 and encode(-0.0, "float8_e4m3fnuz") == 0
    assert encode(math.inf, "float8_e5m2") == 0x7B  # FLT_MAX (57344)
    assert encode(math.inf, "float8_e5m2", saturate=False) == 0x7C  # Inf
    assert encode(-math.inf, "float8_e4m3fn", saturate=False) == 0xFF  # -NaN
    assert encode(1e9, "float8_e5m2fnuz", saturate=False) == 0x80  # NaN
    assert encode(-math.nan, "float8_e4m3fnuz") == 0x80
    assert encode(100.0, "float4_e2m1fn", saturate=False) == 0x7  # no inf: saturates
    assert decode(0x7E, "float8_e4m3fn") == 448.0


def test_constants_of_storage_types_hold_their_byte():
    c = const(448.0, "float8_e4m3fn")
    assert isinstance(c, IntImm) and c.value == 0x7E
    assert const(-1, "int4").value == 0xF
