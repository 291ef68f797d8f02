"""Lower "thread_allreduce" attributes (te/lower.py, Note [cross-thread reduction]) of a device
kernel: combine one register per thread over a threadIdx axis, leaving the result in every
thread's register.

    before:  attr "thread_allreduce" (sum, X.acc, threadIdx.x, 64) { 0 }
    after (warp_shuffle, extent <= 32, on threadIdx.x):
             X.acc[0] = X.acc[0] + shfl_down(X.acc[0], 16, 32); ... ; ... shfl_down(.., 1, 32)
             X.acc[0] = shfl(X.acc[0], 0, 32)                  # lane 0 has it: broadcast
    after (otherwise: a tree in shared memory, one row of T slots per thread group):
             barrier; red[g * T + tid] = X.acc[0]; barrier
             if (tid < 32 && tid + 32 < T) red[g*T + tid] = red[g*T + tid] + red[g*T + tid + 32]
             barrier; ... (halving) ...; X.acc[0] = red[g * T]

`g` numbers the threads' other threadIdx coordinates (rows reduced side by side). Warp shuffles
(`__shfl_down_sync`, CUDA) need the T threads of a group to be consecutive lanes of full warps:
the axis is threadIdx.x, T is a power of two up to 32, and the block a multiple of 32 threads.
"""

from __future__ import annotations

from tessera.ir.node import Mutator
from tessera.tir.buffer import Buffer
from tessera.tir.expr import Call, IntImm
from tessera.tir.function import PrimFunc
from tessera.tir.stmt import Allocate, AttrStmt, BufferStore, IfThenElse, seq
from tessera.tir.transform.insert_barriers import barrier
from tessera.tir.transform.split_kernels import LAUNCH_ATTR

WARP = 32


def lower_thread_allreduce(kernel: PrimFunc, warp_shuffle: bool = False) -> PrimFunc:
    launch = dict(kernel.attr(LAUNCH_ATTR, ()))
    tvars = {v.name: v for v in kernel.attr("thread_vars", ())}
    return kernel.with_body(_Lower(launch, tvars, warp_shuffle).visit(kernel.body))


class _Lower(Mutator):
    def __init__(self, launch: dict, tvars: dict, warp_shuffle: bool):
        self.launch, self.tvars, self.warp_shuffle = launch, tvars, warp_shuffle
        self.count = 0

    def visit_AttrStmt(self, node: AttrStmt):
        if node.key != "thread_allreduce":
            return self.generic_visit(node)
        combiner, acc, tid, extent = node.value
        tag, T = tid.name, extent.value
        if self.launch.get(tag) != T:
            raise ValueError(
                f"a reduction over {tag} runs on {T} threads but the kernel launches "
                f"{self.launch.get(tag)}: bind the same extent everywhere in the kernel"
            )
        threads = 1
        for t, e in self.launch.items():
            threads *= e if t.startswith("threadIdx") else 1
        if self.warp_shuffle and tag == "threadIdx.x" and T <= WARP and T & (T - 1) == 0:
            if threads % WARP == 0:
                return self.shuffles(combiner, acc, T)
        return self.tree(combiner, acc, tid, T)

    def shuffles(self, combiner, acc: Buffer, T: int):
        zero, dt = IntImm(0), acc.dtype
        stmts, offset = [], T // 2
        while offset:
            other = Call(dt, "shfl_down", (acc[zero], IntImm(offset), IntImm(T)))
            stmts.append(BufferStore(acc, combiner((acc[zero],), (other,))[0], (zero,)))
            offset //= 2
        stmts.append(BufferStore(acc, Call(dt, "shfl", (acc[zero], zero, IntImm(T))), (zero,)))
        return seq(*stmts)

    def tree(self, combiner, acc: Buffer, tid, T: int):
        others = [t for t in ("threadIdx.x", "threadIdx.y", "threadIdx.z") if t in self.launch]
        others = [t for t in others if t != tid.name]
        group, groups = IntImm(0), 1
        for t in others:
            group = group * self.launch[t] + self.tvars[t] if groups > 1 else self.tvars[t]
            groups *= self.launch[t]
        self.count += 1
        red = Buffer(f"{acc.name}.red{self.count}", (IntImm(groups * T),), acc.dtype, "shared")
        base = group * T
        slot = base + tid
        zero = IntImm(0)
        stmts = [barrier(), BufferStore(red, acc[zero], (slot,)), barrier()]
        half = 1
        while half < T:
            half *= 2
        half //= 2
        while half:
            combined = combiner((red[slot],), (red[slot + half],))[0]
            cond = (tid < half) if 2 * half <= T else (tid < half) & (tid + half < T)
            stmts += [IfThenElse(cond, BufferStore(red, combined, (slot,))), barrier()]
            half //= 2
        stmts.append(BufferStore(acc, red[base], (zero,)))
        return Allocate(red, seq(*stmts))
