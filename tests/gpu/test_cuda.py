"""CUDA: CUDA C compiled by NVRTC (no GPU needed) and, where a GPU is present, run."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera import te


def _scaled_add(n=1000):
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] + B[i] * 2.0, name="C")
    return A, B, C


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_matmul_compiles_to_a_cubin_and_ptx(nvrtc, matmul_schedule, arch):
    s, args = matmul_schedule(128, 128, 128, tile=16)
    f = tessera.build(s, args, target=f"cuda -arch={arch}")
    src = f.get_source()
    assert 'extern "C" __global__ void __launch_bounds__(256) default_function_kernel0(' in src
    assert src.count("__syncthreads();") == 2 and "__shared__" in src
    assert f.code["cubin"][:4] == b"\x7fELF" and f.code["arch"] == arch
    assert f".target {arch}" in f.code["ptx"] and "bar.sync" in f.code["ptx"]


def test_16_bit_and_math_compile(nvrtc, bind):
    A = te.placeholder((256,), "float16", name="A")
    B = te.compute((256,), lambda i: te.exp(A[i]).astype("bfloat16"), name="B")
    s = te.create_schedule(B.op)
    bind(s, B, B.op.axis[0], 128)
    f = tessera.build(s, [A, B], target="cuda -arch=sm_90")
    assert "tessera_f16_to_f32" in f.get_source() and f.code["cubin"][:4] == b"\x7fELF"


def test_nvrtc_errors_carry_the_log(nvrtc):
    from tessera.codegen.cuda import NVRTCError, compile_cuda

    with pytest.raises(NVRTCError, match="undefined"):
        compile_cuda('extern "C" __global__ void k() { undefined_thing(); }', "sm_80")


def test_running_without_a_gpu_says_so(nvrtc, bind, tmp_path):
    from tessera.runtime.cuda_device import CUDAUnavailable
    from tessera.runtime.gpu_module import device_api

    try:
        device_api(tessera.cuda(0))
    except CUDAUnavailable:
        pass
    else:
        pytest.skip("this machine has a CUDA GPU")
    A, B, C = _scaled_add()
    s = te.create_schedule(C.op)
    bind(s, C, C.op.axis[0], 128)
    tessera.build(s, [A, B, C], target="cuda").export_library(tmp_path / "add.tsgpu")
    lib = tessera.runtime.load_module(tmp_path / "add.tsgpu")  # loading needs no GPU
    x = np.zeros(1000, np.float32)
    with pytest.raises(CUDAUnavailable, match=r"cuda\(0\): no CUDA driver or GPU"):
        lib(x, x, x)


@pytest.mark.cuda
def test_elementwise_runs_on_the_gpu(cuda_dev, bind):
    A, B, C = _scaled_add()
    s = te.create_schedule(C.op)
    bind(s, C, C.op.axis[0], 128)
    f = tessera.build(s, [A, B, C], target="cuda")
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(1000, dtype=np.float32), rng.standard_normal(1000, dtype=np.float32)
    da, db = tessera.nd.array(a, device=cuda_dev), tessera.nd.array(b, device=cuda_dev)
    dc = tessera.nd.empty((1000,), "float32", cuda_dev)
    f(da, db, dc)
    np.testing.assert_allclose(dc.numpy(), a + 2 * b, rtol=1e-6)


@pytest.mark.cuda
def test_shared_matmul_runs_on_the_gpu(cuda_dev, matmul_schedule):
    s, args = matmul_schedule(128, 64, 96, tile=16)
    f = tessera.build(s, args, target="cuda -arch=sm_80")
    rng = np.random.default_rng(1)
    a = rng.standard_normal((128, 96), dtype=np.float32)
    b = rng.standard_normal((96, 64), dtype=np.float32)
    c = np.zeros((128, 64), np.float32)
    f(a, b, c, device=cuda_dev)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("threads, shuffles", [(32, True), (16, True), (128, False)])
def test_cross_thread_reduction_uses_warp_shuffles(nvrtc, threads, shuffles):
    A = te.placeholder((64, 1000), name="A")
    r = te.reduce_axis((0, 1000), name="k")
    total = te.compute((64,), lambda i: te.sum(A[i, r], axis=r), name="total")
    s = te.create_schedule(total.op)
    _, ki = s[total].split(r, factor=threads)
    if threads == 16:  # two rows per warp: rows on threadIdx.y
        ro, ri = s[total].split(total.op.axis[0], factor=2)
        s[total].bind(ro, te.thread_axis("blockIdx.x"))
        s[total].bind(ri, te.thread_axis("threadIdx.y"))
    else:
        s[total].bind(total.op.axis[0], te.thread_axis("blockIdx.x"))
    s[total].bind(ki, te.thread_axis("threadIdx.x"))
    f = tessera.build(s, [A, total], target="cuda -arch=sm_80")
    src = f.get_source()
    assert ("__shfl_down_sync" in src) == shuffles
    assert ("__syncthreads();" in src) != shuffles  # else a tree in shared memory
    assert f.code["cubin"][:4] == b"\x7fELF"
