"""Fixtures of the GPU tests: devices (skipping, with the reason, where there is none) and te
schedules in the GPU style."""

from __future__ import annotations

import pytest

from tessera import te
from tessera.testing.devices import cuda_missing, nvrtc_missing, opencl_missing  # noqa: F401


@pytest.fixture
def cl_dev():
    """tessera.opencl(0), or a skip saying why there is none."""
    if opencl_missing():
        pytest.skip(opencl_missing())
    import tessera

    return tessera.opencl(0)


@pytest.fixture
def cuda_dev():
    """tessera.cuda(0), or a skip saying why there is none (CI has no GPU)."""
    if cuda_missing():
        pytest.skip(cuda_missing())
    import tessera

    return tessera.cuda(0)


@pytest.fixture
def nvrtc():
    if nvrtc_missing():
        pytest.skip(nvrtc_missing())


@pytest.fixture
def matmul_schedule():
    return shared_matmul


@pytest.fixture
def bind():
    return bind_1d


def bind_1d(s, stage, axis, threads: int):
    """Split `axis` by `threads` and bind the parts to blockIdx.x / threadIdx.x."""
    bx, tx = s[stage].split(axis, factor=threads)
    s[stage].bind(bx, te.thread_axis("blockIdx.x"))
    s[stage].bind(tx, te.thread_axis("threadIdx.x"))
    return bx, tx


def shared_matmul(M: int, N: int, K: int, tile: int = 16, dtype: str = "float32"):
    """C = A @ B with tile x tile blocks, A and B tiles in shared memory, C in a register."""
    A = te.placeholder((M, K), dtype, name="A")
    B = te.placeholder((K, N), dtype, name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    AS, BS = s.cache_read(A, "shared", [C]), s.cache_read(B, "shared", [C])
    CL = s.cache_write(C, "local")
    i, j = s[C].op.axis
    io, ii = s[C].split(i, factor=tile)
    jo, ji = s[C].split(j, factor=tile)
    s[C].reorder(io, jo, ii, ji)
    for iv, tag in ((io, "blockIdx.y"), (jo, "blockIdx.x"), (ii, "threadIdx.y")):
        s[C].bind(iv, te.thread_axis(tag))
    s[C].bind(ji, te.thread_axis("threadIdx.x"))
    s[CL].compute_at(s[C], ji)
    ko, ki = s[CL].split(s[CL].op.reduce_axis[0], factor=tile)
    s[CL].reorder(ko, ki, *s[CL].op.axis)
    for cache in (AS, BS):
        s[cache].compute_at(s[CL], ko)
        ty, tx = s[cache].split(s[cache].fuse(*s[cache].op.axis), factor=tile)
        s[cache].bind(ty, te.thread_axis("threadIdx.y"))
        s[cache].bind(tx, te.thread_axis("threadIdx.x"))
    return s, [A, B, C]
