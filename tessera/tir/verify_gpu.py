"""Checks that a device kernel (from split_kernels) can run on a GPU; errors name the problem.

    verify_gpu(kernel, max_threads_per_block=1024, max_shared_memory_bytes=48 * 1024)

- every loop left is serial, unrolled or vectorized (thread loops became thread indices; a
  "parallel" loop has no meaning inside a kernel);
- the launch is within bounds: threads per block, each block and grid dimension;
- the shared buffers together fit the device's shared memory; every shared or local buffer has
  a constant size (they are declared, not allocated);
- no heap (global) allocation inside a kernel;
- no barrier or warp shuffle under a condition on a thread index (every thread of the block
  must reach a barrier; every lane of the warp must take part in a shuffle).
"""

from __future__ import annotations

from tessera.ir.node import Visitor
from tessera.tir.expr import Call, IntImm
from tessera.tir.function import PrimFunc
from tessera.tir.stmt import Allocate, For, ForKind, IfThenElse
from tessera.tir.stmt_functor import collect
from tessera.tir.transform.insert_barriers import is_barrier
from tessera.tir.transform.split_kernels import LAUNCH_ATTR

_WARP_OPS = ("shfl", "shfl_down")
MAX_BLOCK_DIM = {"threadIdx.x": 1024, "threadIdx.y": 1024, "threadIdx.z": 64}
MAX_GRID_DIM = {"blockIdx.x": 2**31 - 1, "blockIdx.y": 65535, "blockIdx.z": 65535}


class GPUVerifyError(ValueError):
    """A device kernel that a GPU cannot run (the message says why)."""


def verify_gpu(
    kernel: PrimFunc,
    max_threads_per_block: int = 1024,
    max_shared_memory_bytes: int = 48 * 1024,
) -> None:
    """Raise GPUVerifyError listing every problem of `kernel` (module docstring)."""
    problems = _launch_problems(kernel, max_threads_per_block)
    problems += _loop_problems(kernel)
    problems += _memory_problems(kernel, max_shared_memory_bytes)
    problems += _barrier_problems(kernel)
    if problems:
        raise GPUVerifyError(f"kernel {kernel.name}: " + "; ".join(problems))


def _launch_problems(kernel: PrimFunc, max_threads: int) -> list[str]:
    launch = dict(kernel.attr(LAUNCH_ATTR, ()))
    problems = []
    threads = 1
    for tag, extent in launch.items():
        limit = MAX_BLOCK_DIM.get(tag) or MAX_GRID_DIM[tag]
        if extent > limit:
            problems.append(f"{tag} extent {extent} is over the limit {limit}")
        if tag.startswith("threadIdx"):
            threads *= extent
    if threads > max_threads:
        problems.append(f"{threads} threads per block, over the device limit {max_threads}")
    return problems


def _loop_problems(kernel: PrimFunc) -> list[str]:
    allowed = (ForKind.SERIAL, ForKind.UNROLLED, ForKind.VECTORIZED)
    loops = collect(kernel.body, lambda n: isinstance(n, For) and n.kind not in allowed)
    return [
        f"loop {lp.loop_var.name} is {lp.kind.value} inside a kernel (bind it to a thread axis "
        "or leave it serial)"
        for lp in loops
    ]


def _memory_problems(kernel: PrimFunc, max_shared: int) -> list[str]:
    problems, shared_bytes = [], 0
    for alloc in collect(kernel.body, lambda n: isinstance(n, Allocate)):
        buf = alloc.buffer
        if buf.scope == "global":
            problems.append(
                f"{buf.name} is allocated on the heap inside the kernel; give it scope "
                '"local" (per thread) or "shared" (per block): s[X].set_scope("local")'
            )
            continue
        size = 1
        for dim in buf.shape:
            if not isinstance(dim, IntImm):
                problems.append(f"{buf.scope} buffer {buf.name} has the symbolic size {dim}")
                size = 0
                break
            size *= dim.value
        if buf.scope == "shared":
            shared_bytes += size * buf.dtype.bits // 8 * buf.dtype.lanes
    if shared_bytes > max_shared:
        problems.append(f"shared memory {shared_bytes} bytes is over the device limit {max_shared}")
    return problems


def _barrier_problems(kernel: PrimFunc) -> list[str]:
    thread_ids = {id(v) for v in kernel.attr("thread_vars", ()) if v.name.startswith("threadIdx")}
    problems: list[str] = []

    class _Find(Visitor):
        def __init__(self):
            self.divergent = 0

        def visit_IfThenElse(self, node: IfThenElse):
            uses = collect(node.condition, lambda n: id(n) in thread_ids)
            self.divergent += bool(uses)
            self.generic_visit(node)
            self.divergent -= bool(uses)

        def visit_Evaluate(self, node):
            if is_barrier(node) and self.divergent:
                problems.append(
                    "a barrier is under a condition on threadIdx (a loop bound to a thread "
                    "axis with an extent smaller than the launch's): bind the same extents"
                )

        def visit_BufferStore(self, node):
            shuffles = collect(node.value, lambda n: isinstance(n, Call) and n.op in _WARP_OPS)
            if shuffles and self.divergent:
                problems.append(
                    "a warp shuffle is under a condition on threadIdx: all the warp's threads "
                    "must take part (bind the same extents)"
                )

    _Find().visit(kernel.body)
    return problems[:1]
