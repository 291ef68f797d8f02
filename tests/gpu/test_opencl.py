"""GPU-style kernels run through OpenCL (pocl on the CPU in CI) and compared with numpy."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera import te


def _elementwise(n, dtype="float32"):
    A = te.placeholder((n,), dtype, name="A")
    B = te.placeholder((n,), dtype, name="B")
    C = te.compute((n,), lambda i: A[i] * B[i] + te.const(1.5, dtype), name="C")
    return A, B, C


@pytest.mark.parametrize("n", [1024, 1000])  # 1000: the last block is partly out of bounds
def test_elementwise_on_numpy_and_device_arrays(cl_dev, bind, n):
    A, B, C = _elementwise(n)
    s = te.create_schedule(C.op)
    bind(s, C, C.op.axis[0], 64)
    f = tessera.build(s, [A, B, C], target="opencl")
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    c = np.zeros(n, np.float32)
    f(a, b, c)  # numpy arrays: copied to the device and back
    np.testing.assert_allclose(c, a * b + 1.5, rtol=1e-5, atol=1e-6)
    da, db = tessera.nd.array(a, device=cl_dev), tessera.nd.array(b, device=cl_dev)
    dc = tessera.nd.empty((n,), "float32", cl_dev)
    f(da, db, dc)
    assert dc.device == cl_dev
    np.testing.assert_allclose(dc.numpy(), a * b + 1.5, rtol=1e-5, atol=1e-6)


def test_vectorized_loads_and_stores(cl_dev):
    A, B, C = _elementwise(4096)
    s = te.create_schedule(C.op)
    bx, r = s[C].split(C.op.axis[0], factor=256)
    tx, v = s[C].split(r, factor=4)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    s[C].vectorize(v)
    f = tessera.build(s, [A, B, C], target="opencl")
    assert "vload4(0, A + " in f.get_source() and "vstore4(" in f.get_source()
    a = np.arange(4096, dtype=np.float32) / 7
    b = np.full(4096, 3, np.float32)
    c = np.zeros(4096, np.float32)
    f(a, b, c)
    np.testing.assert_allclose(c, a * b + 1.5, rtol=1e-6)


@pytest.mark.parametrize("shape", [(64, 64, 64), (128, 32, 96)])
def test_matmul_with_shared_tiles_and_barriers(cl_dev, matmul_schedule, shape):
    M, N, K = shape
    s, args = matmul_schedule(M, N, K, tile=16)
    f = tessera.build(s, args, target="opencl")
    assert f.get_source().count("barrier(CLK_LOCAL_MEM_FENCE);") == 2
    assert "__local TESSERA_ALIGNED(16) float A_shared[256];" in f.get_source()
    rng = np.random.default_rng(1)
    a = rng.standard_normal((M, K), dtype=np.float32)
    b = rng.standard_normal((K, N), dtype=np.float32)
    c = np.zeros((M, N), np.float32)
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_two_kernels_through_a_device_temporary(cl_dev, bind):
    A = te.placeholder((256,), name="A")
    B = te.compute((256,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((256,), lambda i: B[255 - i] * 2.0, name="C")  # reads other blocks' B
    s = te.create_schedule(C.op)
    bind(s, B, B.op.axis[0], 64)
    bind(s, C, C.op.axis[0], 32)
    f = tessera.build(s, [A, C], target="opencl")
    a = np.arange(256, dtype=np.float32)
    c = np.zeros(256, np.float32)
    f(a, c)
    np.testing.assert_array_equal(c, (a[::-1] + 1) * 2)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16_bit_floats(cl_dev, bind, dtype):
    A, B, C = _elementwise(512, dtype)
    s = te.create_schedule(C.op)
    bind(s, C, C.op.axis[0], 128)
    f = tessera.build(s, [A, B, C], target="opencl")
    rng = np.random.default_rng(2)
    a = tessera.nd.array(rng.standard_normal(512).astype(np.float32), cl_dev, dtype)
    b = tessera.nd.array(rng.standard_normal(512).astype(np.float32), cl_dev, dtype)
    c = tessera.nd.empty((512,), dtype, cl_dev)
    f(a, b, c)
    if dtype == "float16":
        # each operation rounded to half (the device's), or the product and sum fused into one
        # rounding (a compiler may contract them: the CPU build does where the CPU computes in
        # half, AVX512-FP16); numpy computes float16 one rounding per operation
        x, y = a.numpy(), b.numpy()
        per_op = x * y + np.float16(1.5)
        fused = (x.astype(np.float64) * y + 1.5).astype(np.float16)
        got = c.numpy()
        assert np.all((got == per_op) | (got == fused))
        return
    # bfloat16 (no arithmetic in numpy): the CPU build of the same computation rounds the same
    # way, per operation (in float, rounded to bfloat16 after each)
    cpu = tessera.build(te.create_schedule(C.op), [A, B, C], target="llvm")
    ha, hb = tessera.nd.array(a.numpy(), dtype=dtype), tessera.nd.array(b.numpy(), dtype=dtype)
    hc = tessera.nd.empty((512,), dtype)
    cpu(ha, hb, hc)
    np.testing.assert_array_equal(c.numpy(), hc.numpy())


def test_reduction_and_math_functions(cl_dev):
    A = te.placeholder((32, 100), name="A")
    k = te.reduce_axis((0, 100), name="k")
    m = te.compute((32,), lambda i: te.max(A[i, k], axis=k), name="m")
    k2 = te.reduce_axis((0, 100), name="k2")
    e = te.compute((32,), lambda i: te.sum(te.exp(A[i, k2] - m[i]), axis=k2), name="e")
    s = te.create_schedule(e.op)
    for t in (m, e):
        s[t].bind(s[t].op.axis[0], te.thread_axis("threadIdx.x"))
    f = tessera.build(s, [A, e], target="opencl")
    a = np.random.default_rng(3).standard_normal((32, 100), dtype=np.float32)
    out = np.zeros(32, np.float32)
    f(a, out)
    want = np.exp(a - a.max(1, keepdims=True)).sum(1)
    np.testing.assert_allclose(out, want, rtol=1e-5)


def test_wrong_argument_shape_names_the_argument(cl_dev, bind):
    A, B, C = _elementwise(64)
    s = te.create_schedule(C.op)
    bind(s, C, C.op.axis[0], 64)
    f = tessera.build(s, [A, B, C], target="opencl")
    with pytest.raises(ValueError, match=r"argument B: expected float32\[64\], got float32\[32\]"):
        f(np.zeros(64, np.float32), np.zeros(32, np.float32), np.zeros(64, np.float32))


def test_export_and_load_the_device_code(cl_dev, bind, tmp_path):
    A, B, C = _elementwise(256)
    s = te.create_schedule(C.op)
    bind(s, C, C.op.axis[0], 64)
    tessera.build(s, [A, B, C], target="opencl", name="fma").export_library(tmp_path / "f.tsgpu")
    lib = tessera.runtime.load_module(tmp_path / "f.tsgpu")
    assert lib.function_names == ["fma"] and "__kernel void" in lib.get_source()
    a = np.ones(256, np.float32)
    c = np.zeros(256, np.float32)
    lib["fma"](a, a, c)
    np.testing.assert_array_equal(c, np.full(256, 2.5, np.float32))


def test_exported_device_code_is_sealed_and_signed(bind, tmp_path):
    # needs no device: the OpenCL source is built on the device when it first runs
    from tessera.runtime.artifact import ArtifactError, read_header

    A, B, C = _elementwise(256)
    s = te.create_schedule(C.op)
    bind(s, C, C.op.axis[0], 64)
    f = tessera.build(s, [A, B, C], target="opencl", name="fma")
    path = f.export_library(tmp_path / "f.tsgpu", key="k1")
    assert read_header(path)["target"] == {"target": "opencl", "device": "opencl"}
    assert tessera.runtime.load_module(path, key="k1").function_names == ["fma"]
    with pytest.raises(ArtifactError, match="signature does not match"):
        tessera.runtime.load_module(path, key="k2")
    data = bytearray(path.read_bytes())
    data[100] ^= 1
    (tmp_path / "flipped.tsgpu").write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="damaged"):
        tessera.runtime.load_module(tmp_path / "flipped.tsgpu")
    header_len = len(data) - read_header(path)["payload_nbytes"]
    (tmp_path / "bare.tsgpu").write_bytes(path.read_bytes()[:-header_len])  # an old, bare zip
    with pytest.raises(ArtifactError, match="zip archive without a tessera trailer"):
        tessera.runtime.load_module(tmp_path / "bare.tsgpu")


@pytest.mark.parametrize(
    "n, c, h, w, f, k, stride, pad",
    [
        (1, 17, 1, 3, 64, 1, 1, 0),  # channel slices and columns that do not divide the tiles
        (2, 32, 3, 3, 192, 1, 1, 0),
        (2, 3, 30, 30, 20, 7, 2, 3),  # a stem conv: 7x7, stride 2, one channel per slice
        (1, 8, 10, 10, 16, 3, 1, 1),
    ],
)
def test_conv2d_schedule_with_epilogue(cl_dev, n, c, h, w, f, k, stride, pad):
    from tessera.graph.ops import nn_ref
    from tessera.topi import nn as topi_nn
    from tessera.topi.gpu.conv2d import schedule_conv2d

    x = te.placeholder((n, c, h, w), name="x")
    wt = te.placeholder((f, c, k, k), name="w")
    y = topi_nn.conv(x, wt, (stride, stride), (pad,) * 4, (1, 1), 1)
    b = te.placeholder((1, f, 1, 1), name="b")
    z = te.compute(
        y.shape,
        lambda *i: te.max(y(*i) + b[0, i[1], 0, 0], te.const(0.0, "float32")),
        name="z",
        tag="elemwise",
    )
    fn = tessera.build(schedule_conv2d([z]), [x, wt, b, z], target="opencl")
    assert "barrier(CLK_LOCAL_MEM_FENCE);" in fn.get_source()
    rng = np.random.default_rng(4)
    data = rng.standard_normal((n, c, h, w), dtype=np.float32)
    weight = rng.standard_normal((f, c, k, k), dtype=np.float32)
    bias = rng.standard_normal((1, f, 1, 1), dtype=np.float32)
    out = np.zeros([int(d.value) for d in z.shape], np.float32)
    fn(data, weight, bias, out)
    ref = nn_ref.conv(data, weight, (stride, stride), (pad,) * 4, (1, 1)) + bias
    np.testing.assert_allclose(out, np.maximum(ref, 0), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("rows, k, threads", [(5, 1000, 64), (3, 100, 24), (4, 64, 64)])
def test_cross_thread_reduction(cl_dev, rows, k, threads):
    A = te.placeholder((rows, k), name="A")
    r = te.reduce_axis((0, k), name="k")
    m = te.compute((rows,), lambda i: te.max(A[i, r], axis=r), name="m")
    s = te.create_schedule(m.op)
    _, ki = s[m].split(r, factor=threads)
    s[m].bind(m.op.axis[0], te.thread_axis("blockIdx.x"))
    s[m].bind(ki, te.thread_axis("threadIdx.x"))
    f = tessera.build(s, [A, m], target="opencl")
    assert "__local" in f.get_source()  # the tree in local memory
    a = np.random.default_rng(5).standard_normal((rows, k), dtype=np.float32)
    out = np.zeros(rows, np.float32)
    f(a, out)
    np.testing.assert_array_equal(out, a.max(1))


def test_cross_thread_sum_over_two_thread_axes(cl_dev):
    """Rows on threadIdx.y, each reduced by the 32 threads of its threadIdx.x."""
    A = te.placeholder((8, 200), name="A")
    r = te.reduce_axis((0, 200), name="k")
    total = te.compute((8,), lambda i: te.sum(A[i, r], axis=r), name="total")
    s = te.create_schedule(total.op)
    _, ki = s[total].split(r, factor=32)
    s[total].bind(total.op.axis[0], te.thread_axis("threadIdx.y"))
    s[total].bind(ki, te.thread_axis("threadIdx.x"))
    f = tessera.build(s, [A, total], target="opencl")
    a = np.random.default_rng(6).standard_normal((8, 200), dtype=np.float32)
    out = np.zeros(8, np.float32)
    f(a, out)
    np.testing.assert_allclose(out, a.sum(1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("m, n, k", [(2, 10, 16), (100, 70, 30), (1, 1000, 64), (64, 64, 8)])
def test_tiled_dense_schedule(cl_dev, m, n, k):
    """(2, 10, 16): two k-slices and a ragged N, which pocl ran wrongly before Note [pocl
    barrier loops] in codegen/gpu_c.py."""
    from tessera.topi import nn as topi_nn
    from tessera.topi.gpu.dense import schedule_matmul

    x = te.placeholder((m, k), name="x")
    w = te.placeholder((n, k), name="w")
    y = topi_nn.dense(x, w)
    f = tessera.build(schedule_matmul([y]), [x, w, y], target="opencl")
    rng = np.random.default_rng(7)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((n, k), dtype=np.float32)
    out = np.zeros((m, n), np.float32)
    f(a, b, out)
    np.testing.assert_allclose(out, a @ b.T, rtol=1e-4, atol=1e-4)
