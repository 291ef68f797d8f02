"""Runtime arrays of the small storage types: ml_dtypes arrays in and out, raw uint8 bytes in,
kernels called with either, and a graph module's inputs and outputs of these types."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from tessera.runtime import nd
from tessera.runtime.ndarray import SMALL

NAMES = sorted(SMALL)


@pytest.mark.parametrize("name", NAMES)
def test_round_trip_keeps_the_bytes(name):
    t = np.dtype(getattr(ml_dtypes, name))
    width = 8 if name.startswith("float8") else 4 if "4" in name else 2
    x = (np.arange(40) % (1 << width)).astype(np.uint8).view(t).reshape(5, 8)
    a = nd.array(x)
    assert a.dtype == name and a.shape == (5, 8) and a.nbytes == 40 and a.data_ptr % 64 == 0
    out = a.numpy()
    assert out.dtype == t
    np.testing.assert_array_equal(out.view(np.uint8), x.view(np.uint8))
    raw = nd.array(x.view(np.uint8), dtype=name)  # uint8: the bytes as they are
    np.testing.assert_array_equal(raw.numpy().view(np.uint8), x.view(np.uint8))


def test_values_convert_through_ml_dtypes():
    a = nd.array(np.array([0.5, 1000.0, -3.0], np.float32), dtype="float8_e5m2")
    np.testing.assert_array_equal(a.numpy().astype(np.float32), [0.5, 1024.0, -3.0])
    b = nd.empty((3,), "int4").copyfrom(np.array([1, -8, 9]))
    np.testing.assert_array_equal(b.numpy().astype(np.int32), [1, -8, -7])  # wraps


def test_bfloat16_takes_ml_dtypes_arrays():
    x = np.array([1.5, -2.25, 3.0e38], ml_dtypes.bfloat16)
    a = nd.array(x)
    assert a.dtype == "bfloat16"
    np.testing.assert_array_equal(a.numpy(), x.astype(np.float32))


def test_kernels_take_ml_dtypes_and_uint8_arrays():
    import tessera
    from tessera import te

    A = te.placeholder((6,), name="A", dtype="float8_e4m3fn")
    B = te.compute((6,), lambda i: A[5 - i], name="B")  # a copy: bytes move unchanged
    f = tessera.build(te.create_schedule(B.op), [A, B], target="llvm")
    x = np.arange(6, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn)
    y = np.zeros(6, ml_dtypes.float8_e4m3fn)
    f(x, y)
    np.testing.assert_array_equal(y.view(np.uint8), [5, 4, 3, 2, 1, 0])
    z = np.zeros(6, np.uint8)
    f(x.view(np.uint8), z)
    np.testing.assert_array_equal(z, [5, 4, 3, 2, 1, 0])
    with pytest.raises(ValueError, match="expected float8_e4m3fn, got float8_e5m2"):
        f(x.view(ml_dtypes.float8_e5m2), y)
