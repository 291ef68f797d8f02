"""Module: calling kernels (argument checks), sources, time_evaluator, from_addresses."""

import ctypes

import numpy as np
import pytest

from tessera.runtime import Module, cpu, cuda, native, nd
from tessera.runtime.function_info import FunctionInfo, ParamInfo, VarInfo


@pytest.fixture(scope="module")
def mod(module_lib_path, module_infos):
    return Module.from_library(module_lib_path, module_infos, {"c": "/* module_kernels.c */"})


def f32(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


def test_call_with_ndarrays_and_numpy(mod):
    a, b = f32(1024), f32(1024, seed=1)
    c = nd.empty((1024,), "float32")
    mod["myadd"](nd.array(a), nd.array(b), c)
    np.testing.assert_array_equal(c.numpy(), a + b)
    out = np.zeros(77, "float32")  # a numpy output is written in place
    mod.get_function("myadd")(a[:77], b[:77], out)
    np.testing.assert_array_equal(out, a[:77] + b[:77])


def test_scalar_params_int_and_float(mod):
    x = f32(5, 4)
    y = np.empty_like(x)
    mod["scale"](x, 0.5, 3, y)
    np.testing.assert_allclose(y, 0.5 * x + 3, rtol=1e-6)
    mod["scale"](x, np.float32(-2), np.int64(-1), y)
    np.testing.assert_allclose(y, -2 * x - 1, rtol=1e-6)


def test_entry_function_and_names(mod):
    assert mod.entry_name == "myadd"
    assert mod.function_names == ["myadd", "scale", "always_fails", "par_double", "bf16_copy"]
    a = f32(8)
    c = np.zeros(8, "float32")
    mod(a, a, c)
    np.testing.assert_array_equal(c, 2 * a)
    assert "scale" in mod and "nope" not in mod
    with pytest.raises(KeyError, match="no function 'nope'.*myadd, scale"):
        mod["nope"]


def test_wrong_count(mod):
    a = nd.array(np.zeros(8, "float32"))
    with pytest.raises(ValueError, match=r"myadd expects 3 arguments \(A, B, C\), got 2"):
        mod["myadd"](a, a)


def test_wrong_dtype_is_never_converted(mod):
    a = nd.array(np.zeros(8, "float32"))
    with pytest.raises(ValueError, match="argument 'B' of myadd: expected float32, got float64"):
        mod["myadd"](a, nd.array(np.zeros(8, "float64")), a)
    with pytest.raises(ValueError, match="argument 'C' of myadd: expected float32, got int32"):
        mod["myadd"](a, a, np.zeros(8, "int32"))


def test_wrong_shape_names_the_bound_dims(mod):
    a = np.zeros(1024, "float32")
    with pytest.raises(
        ValueError, match=r"argument 'C' of myadd: expected shape \(n=1024,\), got \(1000,\)"
    ):
        mod["myadd"](a, a, np.zeros(1000, "float32"))
    with pytest.raises(
        ValueError, match=r"argument 'A' of myadd: expected shape \(n,\), got \(2, 512\)"
    ):
        mod["myadd"](a.reshape(2, 512), a, a)
    x = np.zeros((5, 4), "float32")
    with pytest.raises(
        ValueError, match=r"argument 'X' of scale: expected shape \(n, 4\), got \(5, 3\)"
    ):
        mod["scale"](np.zeros((5, 3), "float32"), 1.0, 1, x)
    with pytest.raises(
        ValueError, match=r"argument 'Y' of scale: expected shape \(n=5, 4\), got \(6, 4\)"
    ):
        mod["scale"](x, 1.0, 1, np.zeros((6, 4), "float32"))
    with pytest.raises(
        ValueError, match=r"argument 'X' of always_fails: expected shape \(3,\), got \(4,\)"
    ):
        mod["always_fails"](np.zeros(4, "int32"))


def test_non_contiguous_and_misaligned_numpy(mod):
    a = np.zeros(16, "float32")
    with pytest.raises(ValueError, match="argument 'B' of myadd: the array is not C-contiguous"):
        mod["myadd"](a[:8], a[1::2], a[:8].copy())
    raw = np.zeros(4 * 8 + 1, np.uint8)
    misaligned = raw[1:].view("float32")
    assert not misaligned.flags.aligned
    with pytest.raises(ValueError, match="argument 'A' of myadd: the array data is not aligned"):
        mod["myadd"](misaligned, np.zeros(8, "float32"), np.zeros(8, "float32"))


def test_wrong_kinds_of_arguments(mod):
    x = np.zeros((2, 4), "float32")
    with pytest.raises(
        TypeError, match="argument 'X' of scale: expected an NDArray or a numpy array, got list"
    ):
        mod["scale"]([[0.0] * 4] * 2, 1.0, 1, x)
    with pytest.raises(ValueError, match="argument 'k' of scale: expected an int"):
        mod["scale"](x, 1.0, 1.5, x)  # also a ValueError: one except clause catches all
    with pytest.raises(ValueError, match="argument 'alpha' of scale: expected a number"):
        mod["scale"](x, "1", 1, x)
    with pytest.raises(
        ValueError, match="argument 'k' of scale: 4294967296 is out of range for int32"
    ):
        mod["scale"](x, 1.0, 1 << 32, x)


def test_nonzero_return_raises(mod):
    with pytest.raises(
        RuntimeError, match="always_fails failed: the kernel returned error code 42"
    ):
        mod["always_fails"](np.zeros(3, "int32"))


def test_parallel_kernel(mod):
    native.set_num_threads(3)
    a = f32(10001)
    b = nd.empty((10001,), "float32")
    mod["par_double"](a, b)
    np.testing.assert_array_equal(b.numpy(), 2 * a)


def test_bfloat16_params(mod):
    a = nd.array(np.linspace(-2, 2, 8), dtype="bfloat16")
    b = nd.empty((8,), "bfloat16")
    mod["bf16_copy"](a, b)
    np.testing.assert_array_equal(b.numpy(), a.numpy())
    raw = np.zeros(8, np.uint16)  # numpy stores bfloat16 as uint16 bits
    mod["bf16_copy"](a, raw)
    np.testing.assert_array_equal(raw, a._array)
    with pytest.raises(ValueError, match="expected bfloat16, got float32"):
        mod["bf16_copy"](a, nd.empty((8,), "float32"))


def test_unbindable_var_is_reported(module_lib_path):
    info = FunctionInfo(
        "myadd", [ParamInfo("A", "buffer", "float32", ["n + 1"])] * 3, [VarInfo("n", "int32")]
    )
    m = Module.from_library(module_lib_path, [info], {})
    a = np.zeros(4, "float32")
    with pytest.raises(ValueError, match="do not determine the value of 'n'"):
        m(a, a, a)


def test_get_source(mod):
    assert mod.get_source("c").startswith("/*")
    assert mod.get_source() == mod.get_source("c")
    with pytest.raises(ValueError, match="no 'asm' source; available formats: 'c'"):
        mod.get_source("asm")


def test_time_evaluator(mod):
    a = f32(4096)
    c = np.zeros_like(a)
    result = mod.time_evaluator("myadd", cpu(0), number=5, repeat=3)(a, a, c)
    np.testing.assert_array_equal(c, 2 * a)
    assert len(result.results) == 3
    assert 0 < result.min <= result.median <= result.max < 0.01
    assert result.min <= result.mean <= result.max and result.std >= 0
    assert "mean (ms)" in str(result)
    slow = mod.time_evaluator("myadd", cpu(0), number=1, repeat=1, min_repeat_ms=20)(a, a, c)
    assert slow.results[0] < 0.01  # number grew until a repeat took 20 ms
    with pytest.raises(ValueError, match="argument 'C' of myadd"):
        mod.time_evaluator("myadd", cpu(0))(a, a, np.zeros(3, "float32"))
    with pytest.raises(ValueError, match="cpu Device"):
        mod.time_evaluator("myadd", cuda(0))
    with pytest.raises(ValueError, match="repeat must be"):
        mod.time_evaluator("myadd", cpu(0), repeat=0)


def test_from_addresses(module_lib_path, module_infos):
    lib = ctypes.CDLL(str(module_lib_path))
    address = ctypes.cast(lib.myadd, ctypes.c_void_p).value
    made = []
    m = Module.from_addresses(
        {"myadd": address},
        module_infos[:1],
        {"ll": "; ir", "asm": lambda: made.append(1) or "asm"},
        keepalive=lib,
    )
    a = f32(10)
    c = np.zeros_like(a)
    m(a, a, c)
    np.testing.assert_array_equal(c, 2 * a)
    assert m.get_source() == "; ir"
    assert m.get_source("asm") == "asm" and m.get_source("asm") == "asm" and made == [1]
    with pytest.raises(ValueError, match="no address for function 'scale'"):
        Module.from_addresses({"myadd": address}, module_infos[:2], {})
