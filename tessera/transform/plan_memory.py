"""Static memory planning: place every intermediate value of a function in one arena.

    plan = plan_memory(fuse_ops(mod))      # a MemoryPlan, returned (the IR is unchanged)
    plan.offset(value), plan.arena_bytes, plan.naive_bytes

    %1 = fused_a(%x)   %1: [0, 4096)       lifetime: calls 0..1
    %2 = fused_b(%1)   %2: [4096, 8192)    overlaps %1 (it is made while %1 is read)
    %3 = fused_c(%2)   %3: [0, 4096)       %1 is dead by now: its bytes are reused
    return %3          (function output: allocated by the caller, not planned)

Intermediates are the outputs of calls that are not function outputs (function outputs are
handed out by the caller; params and constants live elsewhere). A value lives from the call
that defines it to its last use, both included, so a call's outputs never share bytes with its
inputs. Algorithm (Note [greedy by size]): values are placed largest first (ties: earlier
first); each takes the lowest 64-byte-aligned offset where it does not touch a value already
placed whose lifetime overlaps its own (first fit over the free intervals). This is the
"greedy by size" planner of TensorFlow Lite; it is not optimal (the problem is NP-hard), and
`peak_live_bytes` (a lower bound for any plan) shows how far off it is. In-place reuse of a
dying input by an element-wise group is not done. The plan is returned, not attached to the
IR: it describes one function as it is, so any later rewrite of it calls for a new plan.

With `views=True` (the executor plan's), a call that only reshapes (Note [view calls]) gets no
bytes and no call of its own: its output is a view of its source's bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from tessera.graph.ir import Constant, Function, Value
from tessera.ir.module import IRModule

ALIGNMENT = 64


@dataclass(frozen=True)
class Allocation:
    value: Value
    offset: int
    nbytes: int
    start: int  # index of the call that defines the value
    end: int  # index of its last use (start when unused)


@dataclass(frozen=True)
class MemoryPlan:
    allocations: tuple[Allocation, ...]  # in definition order
    arena_bytes: int  # size of the one arena
    naive_bytes: int  # sum of the aligned sizes: the arena if nothing were reused
    peak_live_bytes: int  # max bytes live at one step: a lower bound for any plan
    alignment: int = ALIGNMENT
    # Note [view calls]: (view, source) pairs, in body order: the view's bytes are its source's
    views: tuple[tuple[Value, Value], ...] = ()
    # sources that live in a function output's buffer: (source, index of that output)
    in_outputs: tuple[tuple[Value, int], ...] = ()

    def allocation(self, value: Value) -> Allocation:
        for a in self.allocations:
            if a.value is value:
                return a
        raise KeyError(f"%{value.name} is not an intermediate of the planned function")

    def offset(self, value: Value) -> int:
        return self.allocation(value).offset

    def __str__(self) -> str:
        rows = [
            f"  %{a.value.name}: [{a.offset}, {a.offset + a.nbytes})  calls {a.start}..{a.end}"
            for a in self.allocations
        ]
        head = (
            f"memory plan: arena {self.arena_bytes} bytes (no reuse: {self.naive_bytes}, "
            f"peak live: {self.peak_live_bytes})"
        )
        return "\n".join([head, *rows])


def _align(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


# Note [view calls]
# A group that only reshapes (`reshape` ops alone, one input and one output of the same dtype:
# a row-major reshape keeps every byte where it is) copies its input for nothing. Planned with
# views, its output is a view of its source's bytes (the source of a view of a view is the
# first one's): the source lives until the last use of any of its views, and the call is not
# made. A view that is a function output hands its buffer to its source (the source's call
# writes the output directly: ddddocr_old's [32, 8210] projection reshaped to [32, 1, 8210],
# a 1 MiB copy), unless the source is a function output itself (it has a buffer already) or an
# input or weight (the output then reads it, as a repeated output does). Kernels take pointers:
# the executor checks each argument against its kernel's shape through a reshaped view of the
# storage (runtime/graph_executor.py). Nothing writes in place, so sharing bytes is safe.


def view_source(call) -> Value | None:
    """The input whose bytes a call's output can share (Note [view calls]), or None."""
    group = call.attrs.get("func") if call.op.name == "fused" else None
    if not isinstance(group, Function) or len(call.inputs) != 1 or len(call.outputs) != 1:
        return None
    if not group.body or any(c.op.name != "reshape" for c in group.body):
        return None
    (src,), (out,) = call.inputs, call.outputs
    if src.type.dtype != out.type.dtype or not (src.type.is_static and out.type.is_static):
        return None
    return src


def find_views(func: Function) -> tuple[dict[int, Value], dict[int, int]]:
    """({id(view): source}, {id(source): index of the output whose buffer it takes})."""
    outputs = {id(v): k for k, v in reversed(list(enumerate(func.outputs)))}
    params = {id(p) for p in func.params}
    source: dict[int, Value] = {}
    in_outputs: dict[int, int] = {}
    for call in func.body:
        src = view_source(call)
        if src is None:
            continue
        src = source.get(id(src), src)
        (out,) = call.outputs
        k = outputs.get(id(out))
        if k is not None and not isinstance(src, Constant) and id(src) not in params:
            if id(src) in outputs or id(src) in in_outputs:  # it has an output's buffer
                continue
            in_outputs[id(src)] = k
        source[id(out)] = src
    return source, in_outputs


def _lifetimes(func: Function, alignment: int, views: bool = False) -> list[Allocation]:
    outputs = {id(v) for v in func.outputs}
    source, in_outputs = find_views(func) if views else ({}, {})
    last_use: dict[int, int] = {}
    for i, call in enumerate(func.body):
        for v in call.inputs:
            v = source.get(id(v), v)
            last_use[id(v)] = i
    out = []
    for i, call in enumerate(func.body):
        for v in call.outputs:
            if id(v) in outputs or id(v) in source or id(v) in in_outputs:
                continue
            if not v.type.is_static:
                raise ValueError(f"plan_memory: %{v.name} has a symbolic shape {v.type}")
            nbytes = _align(max(v.type.size * v.type.dtype.itemsize, 1), alignment)
            out.append(Allocation(v, 0, nbytes, i, last_use.get(id(v), i)))
    return out


def _first_fit(size: int, busy: list[tuple[int, int]], alignment: int) -> int:
    offset = 0
    for begin, end in sorted(busy):
        if offset + size <= begin:
            break
        offset = max(offset, _align(end, alignment))
    return offset


def plan_memory(ir, alignment: int = ALIGNMENT, views: bool = False) -> MemoryPlan:
    """Plan the intermediates of a graph Function (or of an IRModule's "main"); `views`: calls
    that only reshape share their source's bytes (Note [view calls])."""
    func = ir["main"] if isinstance(ir, IRModule) else ir
    if not isinstance(func, Function):
        raise TypeError(f"plan_memory takes a graph Function or an IRModule, got {ir!r}")
    if alignment < 1 or alignment & (alignment - 1):
        raise ValueError(f"plan_memory: alignment must be a power of two, got {alignment}")
    values = _lifetimes(func, alignment, views)
    order = sorted(range(len(values)), key=lambda k: (-values[k].nbytes, values[k].start, k))
    placed: list[Allocation] = []
    final: dict[int, Allocation] = {}
    for k in order:
        a = values[k]
        busy = [
            (p.offset, p.offset + p.nbytes) for p in placed if p.start <= a.end and a.start <= p.end
        ]
        a = Allocation(a.value, _first_fit(a.nbytes, busy, alignment), a.nbytes, a.start, a.end)
        placed.append(a)
        final[k] = a
    allocations = tuple(final[k] for k in range(len(values)))
    live = [0] * len(func.body)
    for a in allocations:
        for step in range(a.start, a.end + 1):
            live[step] += a.nbytes
    return MemoryPlan(
        allocations,
        arena_bytes=max((a.offset + a.nbytes for a in allocations), default=0),
        naive_bytes=sum(a.nbytes for a in allocations),
        peak_live_bytes=max(live, default=0),
        alignment=alignment,
        **_view_fields(func) if views else {},
    )


def _view_fields(func: Function) -> dict:
    source, in_outputs = find_views(func)
    body = [c.outputs[0] for c in func.body if id(c.outputs[0]) in source] if source else []
    by_id = {id(v): v for c in func.body for v in (*c.inputs, *c.outputs)}
    return {
        "views": tuple((v, source[id(v)]) for v in body),
        "in_outputs": tuple((by_id[i], k) for i, k in in_outputs.items()),
    }
