"""GPU lowering: thread binding, shared regions, kernel splitting, barriers, verify_gpu."""

from __future__ import annotations

import pytest

import tessera
from tessera import te, tir
from tessera.codegen.gpu import lower_gpu
from tessera.tir.stmt import Allocate, For, ForKind, IfThenElse
from tessera.tir.stmt_functor import collect
from tessera.tir.transform.insert_barriers import is_barrier
from tessera.tir.transform.split_kernels import GPUSplitError, split_kernels
from tessera.tir.verify_gpu import GPUVerifyError, verify_gpu

OPENCL = tessera.Target("opencl")


def _add(n=1024):
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    return A, B


def _shape(buf):
    return tuple(d.value for d in buf.shape)


def test_bind_records_a_step_and_lowers_to_thread_binding_loops(bind):
    A, B = _add()
    s = te.create_schedule(B.op)
    bind(s, B, B.op.axis[0], 64)
    assert "bind(B, i.outer, blockIdx.x)" in str(s) or any(
        type(st).__name__ == "Bind" for st in s.steps
    )
    func = te.lower(s, [A, B])
    loops = collect(func.body, lambda n: isinstance(n, For))
    assert [(lp.thread_tag, lp.extent.value) for lp in reversed(loops)] == [
        ("blockIdx.x", 16),
        ("threadIdx.x", 64),
    ]
    assert all(lp.kind == ForKind.THREAD_BINDING for lp in loops)


def test_bind_replays_from_the_recorded_steps(bind):
    A, B = _add()
    s = te.create_schedule(B.op)
    bind(s, B, B.op.axis[0], 64)
    s2 = te.create_schedule(B.op)
    for step in s.steps:
        step.apply(s2)
    assert str(te.lower(s2, [A, B])) == str(te.lower(s, [A, B]))


def test_split_kernels_makes_thread_indices_and_launch_extents(bind):
    A, B = _add()
    s = te.create_schedule(B.op)
    bind(s, B, B.op.axis[0], 64)
    kernels, plan = lower_gpu(te.lower(s, [A, B], name="double"), OPENCL)
    (k,) = kernels
    assert k.name == "double_kernel0"
    assert dict(k.attr("launch")) == {"blockIdx.x": 16, "threadIdx.x": 64}
    assert [v.name for v in k.attr("thread_vars")] == ["blockIdx.x", "threadIdx.x"]
    assert not collect(k.body, lambda n: isinstance(n, For))  # no loop is left
    assert plan.launches == (("double_kernel0", k.params),)


def test_each_root_stage_is_a_kernel_and_intermediates_are_temps(bind):
    A = te.placeholder((256,), name="A")
    B = te.compute((256,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((256,), lambda i: B[255 - i] * 2.0, name="C")  # reads across blocks
    s = te.create_schedule(C.op)
    bind(s, B, B.op.axis[0], 64)
    bind(s, C, C.op.axis[0], 32)
    kernels, plan = split_kernels(tir.transform.flatten_storage(te.lower(s, [A, C], name="f")))
    assert [k.name for k in kernels] == ["f_kernel0", "f_kernel1"]
    assert [t.name for t in plan.temps] == ["B"]
    assert [p.name for p in kernels[0].params] == ["A", "B"]
    assert [p.name for p in kernels[1].params] == ["C", "B"]
    assert dict(kernels[1].attr("launch")) == {"blockIdx.x": 8, "threadIdx.x": 32}


def test_shorter_thread_loops_are_guarded():
    A = te.placeholder((64, 8), name="A")
    B = te.compute((64, 8), lambda i, j: A[i, j] + 1.0, name="B")
    C = te.compute((64, 8), lambda i, j: B[i, j] * 2.0, name="C")
    s = te.create_schedule(C.op)
    s[C].bind(C.op.axis[0], te.thread_axis("blockIdx.x"))
    s[C].bind(C.op.axis[1], te.thread_axis("threadIdx.x"))
    s[B].compute_at(s[C], C.op.axis[0])
    s[B].set_scope("shared")
    _, ji = s[B].split(s[B].op.axis[1], factor=4)
    s[B].bind(ji, te.thread_axis("threadIdx.x"))  # 4 of the 8 threads
    (k,), _ = lower_gpu(te.lower(s, [A, C]), OPENCL)
    guards = collect(k.body, lambda n: isinstance(n, IfThenElse))
    assert len(guards) == 1 and "threadIdx.x < 4" in str(guards[0].condition)


def test_shared_cache_region_spans_the_block_local_one_the_thread(matmul_schedule):
    s, args = matmul_schedule(64, 64, 64, tile=16)
    func = te.lower(s, args)
    allocs = {
        a.buffer.name: a.buffer for a in collect(func.body, lambda n: isinstance(n, Allocate))
    }
    assert _shape(allocs["A.shared"]) == (16, 16)  # all 16 rows of the block's threads
    assert _shape(allocs["B.shared"]) == (16, 16)
    assert _shape(allocs["C.local"]) == (1, 1)  # one element per thread
    assert allocs["A.shared"].scope == "shared" and allocs["C.local"].scope == "local"


def test_barriers_around_the_shared_tiles(matmul_schedule):
    s, args = matmul_schedule(64, 64, 64, tile=16)
    (k,), _ = lower_gpu(te.lower(s, args), OPENCL)
    (ko,) = [
        lp for lp in collect(k.body, lambda n: isinstance(n, For)) if lp.loop_var.name == "k.outer"
    ]
    seq = ko.body
    while not isinstance(seq, tir.SeqStmt):
        seq = seq.body
    kinds = [
        "barrier" if is_barrier(c) else "fill" if collect(c, _stores_shared) else "compute"
        for c in seq.seq
    ]
    # the previous iteration's reads end before the fill; the fill ends before the reads
    assert kinds == ["barrier", "fill", "fill", "barrier", "compute"]


def _stores_shared(n):
    return isinstance(n, tir.BufferStore) and n.buffer.scope == "shared"


def test_no_barrier_without_shared_memory(bind):
    A, B = _add()
    s = te.create_schedule(B.op)
    bind(s, B, B.op.axis[0], 64)
    (k,), _ = lower_gpu(te.lower(s, [A, B]), OPENCL)
    assert not collect(k.body, lambda n: isinstance(n, tir.Evaluate) and is_barrier(n))


def test_unbound_root_stage_is_an_error():
    A, B = _add()
    s = te.create_schedule(B.op)
    with pytest.raises(GPUSplitError, match="not bound to a GPU thread axis"):
        tessera.build(s, [A, B], target="opencl")


def test_too_many_threads_per_block(bind):
    A, B = _add(4096)
    s = te.create_schedule(B.op)
    bind(s, B, B.op.axis[0], 2048)
    with pytest.raises(GPUVerifyError, match="2048 threads per block"):
        lower_gpu(te.lower(s, [A, B]), OPENCL)
    with pytest.raises(GPUVerifyError, match="threadIdx.x extent 2048"):
        lower_gpu(te.lower(s, [A, B]), OPENCL)


def test_target_max_num_threads_is_the_limit(bind):
    A, B = _add()
    s = te.create_schedule(B.op)
    bind(s, B, B.op.axis[0], 256)
    lower_gpu(te.lower(s, [A, B]), OPENCL)
    with pytest.raises(GPUVerifyError, match="over the device limit 128"):
        lower_gpu(te.lower(s, [A, B]), tessera.Target("opencl -max-num-threads=128"))


def test_shared_memory_over_the_limit(matmul_schedule):
    s, args = matmul_schedule(256, 256, 256, tile=16)
    kernels, _ = lower_gpu(te.lower(s, args), OPENCL)
    verify_gpu(kernels[0], max_shared_memory_bytes=2048)  # two 16x16 float tiles: 2 KiB
    with pytest.raises(GPUVerifyError, match="shared memory 2048 bytes"):
        verify_gpu(kernels[0], max_shared_memory_bytes=2047)


def test_parallel_loop_inside_a_kernel_is_an_error():
    A = te.placeholder((64, 8), name="A")
    B = te.compute((64, 8), lambda i, j: A[i, j] + 1.0, name="B")
    s = te.create_schedule(B.op)
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    s[B].parallel(B.op.axis[1])
    with pytest.raises(GPUVerifyError, match="j is parallel inside a kernel"):
        lower_gpu(te.lower(s, [A, B]), OPENCL)


def test_heap_intermediate_inside_a_kernel_is_an_error():
    A = te.placeholder((64, 8), name="A")
    B = te.compute((64, 8), lambda i, j: A[i, j] + 1.0, name="B")
    C = te.compute((64, 8), lambda i, j: B[i, j] * 2.0, name="C")
    s = te.create_schedule(C.op)
    s[C].bind(C.op.axis[0], te.thread_axis("blockIdx.x"))
    s[B].compute_at(s[C], C.op.axis[0])
    with pytest.raises(GPUVerifyError, match='B is allocated on the heap.*scope "local"'):
        lower_gpu(te.lower(s, [A, C]), OPENCL)


def test_barrier_under_a_thread_condition_is_an_error():
    A = te.placeholder((64, 16), name="A")
    B = te.compute((64, 16), lambda i, j: A[i, j] + 1.0, name="B")
    k = te.reduce_axis((0, 16), name="k")
    C = te.compute((64, 4), lambda i, j: te.sum(B[i, k] * 1.0, axis=k), name="C")
    s = te.create_schedule(C.op)
    s[C].bind(C.op.axis[0], te.thread_axis("blockIdx.x"))
    s[C].bind(C.op.axis[1], te.thread_axis("threadIdx.x"))  # 4 threads compute ...
    ko, _ = s[C].split(C.op.reduce_axis[0], factor=8)
    s[B].compute_at(s[C], ko)
    s[B].set_scope("shared")
    s[B].bind(s[B].op.axis[1], te.thread_axis("threadIdx.x"))  # ... 8 fetch: 4 skip barriers
    with pytest.raises(GPUVerifyError, match="barrier is under a condition on threadIdx"):
        lower_gpu(te.lower(s, [A, C]), OPENCL)


def test_reduction_loops_bind_to_threadidx_only():
    A = te.placeholder((8, 64), name="A")
    k = te.reduce_axis((0, 64), name="k")
    B = te.compute((8,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    with pytest.raises(ValueError, match="only be bound to a threadIdx axis"):
        s[B].bind(k, te.thread_axis("blockIdx.x"))


def test_cross_thread_reduction_lowers_to_an_allreduce_attribute():
    A = te.placeholder((8, 64), name="A")
    k = te.reduce_axis((0, 64), name="k")
    B = te.compute((8,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    s[B].bind(k, te.thread_axis("threadIdx.x"))
    func = te.lower(s, [A, B])
    (attr,) = collect(func.body, lambda n: isinstance(n, tir.AttrStmt))
    assert attr.key == "thread_allreduce" and attr.value[3].value == 64
    (k0,), _ = lower_gpu(func, OPENCL)
    assert not collect(k0.body, lambda n: isinstance(n, tir.AttrStmt))
    barriers = collect(k0.body, lambda n: isinstance(n, tir.Evaluate) and is_barrier(n))
    assert len(barriers) == 2 + 6  # around the first store, then one per halving (64 -> 1)
