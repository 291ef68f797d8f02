"""Devices and NDArray: alignment, dtypes, bfloat16 rounding, copies."""

import ml_dtypes  # noqa: F401  (registers the float8/int4 names with numpy, as the runtime does)
import numpy as np
import pytest

from tessera.runtime import NDArray, cpu, cuda, device, nd
from tessera.runtime.ndarray import STORAGE

ALL_DTYPES = list(STORAGE)


def test_devices():
    assert cpu(0) == device("llvm", 0) == device("c") == device("cpu", 0)
    assert cpu(1) != cpu(0)
    assert str(cpu(0)) == "cpu(0)" and str(cuda(1)) == "cuda(1)"
    assert device("cuda", 0) == cuda(0) and cuda(0) != cpu(0)
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        device("tpu")
    with pytest.raises(ValueError, match="index"):
        cpu(-1)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shape", [(), (0,), (1,), (7, 3), (2, 3, 5)])
def test_empty_is_aligned_contiguous_and_typed(dtype, shape):
    a = nd.empty(shape, dtype)
    assert a.data_ptr % 64 == 0
    assert a.shape == shape and a.dtype == dtype and a.device == cpu(0)
    assert a._array.flags.c_contiguous
    assert a._array.dtype == np.dtype(STORAGE[dtype])


@pytest.mark.parametrize("dtype", [d for d in ALL_DTYPES if d != "bfloat16"])
def test_round_trip_every_dtype(dtype):
    rng = np.random.default_rng(0)
    values = (rng.standard_normal((4, 5)) * 50).astype(dtype)
    a = nd.array(values)
    assert a.dtype == dtype and a.data_ptr % 64 == 0
    out = a.numpy()
    # the same bits (float8_e8m0fnu holds NaN, which is not equal to itself)
    assert out.dtype == values.dtype and out.tobytes() == values.tobytes()
    out[0, 0] = 1  # numpy() is a copy
    assert a.numpy().tobytes() == values.tobytes()
    kept = values.copy()
    values[0, 0] = 2  # and nd.array copied its source
    assert a.numpy().tobytes() == kept.tobytes()


def test_many_arrays_are_all_aligned():
    assert all(nd.empty((n,), "int8").data_ptr % 64 == 0 for n in range(1, 200))


def test_array_from_list_scalar_and_dtype():
    assert nd.array([1.5, 2.5]).dtype == "float64"  # as np.asarray makes it
    assert nd.array([1, 2], dtype="float32").numpy().dtype == np.float32
    assert nd.array(3.0, dtype="float16").shape == ()
    a = nd.array(np.arange(6, dtype="float32").reshape(2, 3), cpu(0))
    b = nd.array(a)  # from an NDArray: a copy
    assert b.dtype == "float32" and b.data_ptr != a.data_ptr
    np.testing.assert_array_equal(b.numpy(), a.numpy())
    np.testing.assert_array_equal(np.asarray(a), a.numpy())


def bf16(x):
    return nd.array(np.array(x, "float32"), dtype="bfloat16")


def test_bfloat16_rounds_to_nearest_even():
    one = 1.0
    ulp = 2.0**-7  # bfloat16 keeps 7 mantissa bits
    values = [one, one + ulp / 2, one + 3 * ulp / 2, one + ulp / 2 + 2.0**-20, -2.5, 3.4e38]
    expected = [one, one, one + 2 * ulp, one + ulp, -2.5, np.inf]
    out = bf16(values).numpy()
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, np.array(expected, "float32"))


def test_bfloat16_matches_a_reference_rounding():
    x = np.random.default_rng(1).standard_normal(10000).astype("float32") * 1e3
    out = bf16(x).numpy()
    # the nearest bfloat16: among truncation and truncation + 1 ulp, the closer (even on ties)
    lo = (x.view(np.uint32) & 0xFFFF0000).view(np.float32)
    hi = ((x.view(np.uint32) & 0xFFFF0000) + 0x10000).view(np.float32)
    d_lo, d_hi = np.abs(x - lo), np.abs(hi - x)
    lo_even = ((lo.view(np.uint32) >> 16) & 1) == 0
    ref = np.where((d_lo < d_hi) | ((d_lo == d_hi) & lo_even), lo, hi)
    np.testing.assert_array_equal(out, ref)


def test_bfloat16_nan_inf_and_raw_bits():
    out = bf16([np.nan, np.inf, -np.inf, -0.0]).numpy()
    assert np.isnan(out[0]) and out[1] == np.inf and out[2] == -np.inf
    assert np.signbit(out[3])
    raw = nd.array(np.array([0x3F80, 0xC000], np.uint16), dtype="bfloat16")  # bits as given
    np.testing.assert_array_equal(raw.numpy(), [1.0, -2.0])


def test_copyfrom_and_copyto():
    a = nd.empty((2, 3), "float32")
    a.copyfrom(np.arange(6).reshape(2, 3))  # converted like astype
    np.testing.assert_array_equal(a.numpy(), np.arange(6).reshape(2, 3))
    b = nd.empty((2, 3), "float32")
    a.copyto(b)
    np.testing.assert_array_equal(b.numpy(), a.numpy())
    c = a.copyto(cpu(0))
    assert isinstance(c, NDArray) and c.data_ptr != a.data_ptr
    h = nd.empty((2, 3), "bfloat16").copyfrom(a)
    np.testing.assert_array_equal(h.numpy(), a.numpy())
    with pytest.raises(
        ValueError, match=r"copyfrom: array shape is \(2, 3\), source shape is \(3, 2\)"
    ):
        a.copyfrom(np.zeros((3, 2), "float32"))


def test_clear_errors():
    with pytest.raises(ValueError, match="unsupported dtype 'complex64'"):
        nd.empty((2,), "complex64")
    with pytest.raises(ValueError, match="non-negative"):
        nd.empty((-1,), "float32")
    with pytest.raises(TypeError, match="cannot make a float32 array"):
        nd.array(np.array(["a"]), dtype="float32")
    with pytest.raises(NotImplementedError, match="cuda"):
        nd.empty((2,), "float32", cuda(0))
    with pytest.raises(TypeError, match="copyto"):
        nd.empty((2,)).copyto("cpu")


def test_repr_names_dtype_shape_and_device():
    text = repr(nd.array(np.zeros((2, 2), "int8")))
    assert "int8" in text and "[2, 2]" in text and "cpu(0)" in text
