"""The default GPU schedule of a fused group: inline what is element-wise, one thread per output
element of every stage that stays (reductions and outputs), reductions serial in the thread.

    outs = [relu(add(conv, bias))]
    s = schedule_default(outs, target)
    # conv: fused output axes split by 256 -> (blockIdx.x, threadIdx.x), k loops inside
    # add, relu: inlined into the output stage, bound the same way

A long reduction (over 32 or more elements) is shared by a block of threads instead, combined
across them (warp shuffles on CUDA, a tree in local memory on OpenCL). Every stage that is not
inlined becomes one kernel (tir split_kernels), so a group with two
reductions (softmax: max, then sum) runs as a chain of kernels through device temporaries.
This is correct for every op with a compute rule; the op-specific schedules of this package
(`dense.py`, ...) replace it where shared-memory tiling pays.
"""

from __future__ import annotations

from tessera import te
from tessera.topi.generic import const_extent, traverse
from tessera.topi.rules import RuleKnob

# Threads per block of the default schedule: 256, a multiple of the warp (32) and of pocl's
# vector width; a rule knob (Note [rule knobs] in topi/rules.py), within the device limits below.
THREADS = RuleKnob(
    "gpu.threads", (64, 128, 256, 512, 1024), 256,
    "threads per block of the default GPU schedule (one output element each)",
)  # fmt: skip
# Device limits (CUDA's for every architecture since sm_30; pocl's CPU device takes 4096
# threads per work-group, so the common bound is CUDA's): the strategies' constraints keep
# configs within them, codegen/gpu.py verifies every kernel against them.
MAX_THREADS_PER_BLOCK = 1024
MAX_SHARED_BYTES = 48 * 1024


# threads that share a long reduction, per GPU strategy key: a warp on CUDA (combined by warp
# shuffles: a fact of the hardware), a rule knob's 64 on OpenCL and elsewhere (a tree in local
# memory)
TREE_REDUCE_THREADS = RuleKnob(
    "gpu.tree_reduce_threads", (16, 32, 64, 128, 256), 64,
    "threads sharing one output of a long reduction, combined by a tree in local memory",
)  # fmt: skip
WARP_THREADS = {"cuda": 32}


def max_threads(target) -> int:
    """Threads per block the target allows: its `-max-num-threads`, else MAX_THREADS_PER_BLOCK."""
    if target is None:
        return MAX_THREADS_PER_BLOCK
    return int(target.to_dict().get("max_num_threads", MAX_THREADS_PER_BLOCK))


def inline_elementwise(s: te.Schedule, outs) -> None:
    """compute_inline every single-output stage without a reduction that is not an output: on
    a GPU recomputing a pad or a cast is cheaper than a kernel and a round trip to memory."""
    out_ops = {id(t.op) for t in outs}

    def visit(op):
        if id(op) not in out_ops and not op.is_reduction and op.num_outputs == 1:
            s[op].compute_inline()

    traverse(outs, visit)


def bind_flat(s: te.Schedule, op, threads: int | None = None) -> None:
    """Fuse the data-parallel axes of `op`, split by `threads` (None: THREADS), bind to
    blockIdx/threadIdx."""
    threads = THREADS.value() if threads is None else threads
    stage = s[op]
    axes = list(stage.op.axis)
    if not axes:  # a scalar (a loop's condition, a count): one thread (codegen/gpu.py)
        return
    total = 1
    for iv in axes:
        total *= const_extent(iv) or threads
    fused = stage.fuse(*axes) if len(axes) > 1 else axes[0]
    bx, tx = stage.split(fused, factor=min(threads, max(total, 1)))
    stage.bind(bx, te.thread_axis("blockIdx.x"))
    stage.bind(tx, te.thread_axis("threadIdx.x"))


def reduce_threads(op, target) -> int:
    """Threads that share one output of a reduction (0: one thread per output). CUDA: a warp,
    reduced by shuffles; OpenCL: 64, reduced by a tree in local memory. A reduction to a
    scalar (a whole tensor's sum, a loop's condition) is one block of up to that many."""
    if not op.is_reduction or len(op.body) != 1:
        return 0
    extent = 1
    for iv in op.reduce_axis:
        extent *= const_extent(iv) or 0
    keys = target.kind_info.keys(target) if target is not None else ()
    warp = next((WARP_THREADS[k] for k in keys if k in WARP_THREADS), None)
    warp = TREE_REDUCE_THREADS.value() if warp is None else warp
    if not op.axis:
        return max(1, min(warp, extent))
    return warp if extent >= warp else 0


def bind_cross_thread(s: te.Schedule, op, threads: int) -> None:
    """One block per output element: the reduction loops fused, split by `threads`, the inner
    part bound to threadIdx.x (a cross-thread reduction, te/lower.py)."""
    stage = s[op]
    axes, raxes = list(stage.op.axis), list(stage.op.reduce_axis)
    red = stage.fuse(*raxes) if len(raxes) > 1 else raxes[0]
    _, inner = stage.split(red, factor=threads)
    if axes:  # else a scalar: one block
        rows = stage.fuse(*axes) if len(axes) > 1 else axes[0]
        stage.bind(rows, te.thread_axis("blockIdx.x"))
    stage.bind(inner, te.thread_axis("threadIdx.x"))


def schedule_default(outs, target=None) -> te.Schedule:
    """One thread per output element of each stage that is not inlined (module docstring); a
    long reduction (softmax's row max and sum, layer norm's mean, a global pool) takes a block
    of threads per output instead."""
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    s = te.create_schedule([t.op for t in outs])
    inline_elementwise(s, outs)

    def visit(op):
        if s[op].attach_type.value == "inline":
            return
        threads = reduce_threads(op, target)
        if threads:
            bind_cross_thread(s, op, threads)
        else:
            bind_flat(s, op)

    traverse(outs, visit)
    return s
