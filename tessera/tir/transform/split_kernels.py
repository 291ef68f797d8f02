"""Split a GPU function into device kernels: one per root loop nest, thread loops -> thread ids.

    before:  def f(A: f32[1024], B: f32[1024]) {
               for (i.outer, 0, 16) thread_binding "blockIdx.x" {
                 for (i.inner, 0, 64) thread_binding "threadIdx.x" {
                   B[i.outer * 64 + i.inner] = A[i.outer * 64 + i.inner] * 2 } } }
    after:   kernels = [def f_kernel0(A, B)  attrs: launch=(("blockIdx.x", 16), ("threadIdx.x", 64))
               { B[blockIdx.x * 64 + threadIdx.x] = A[blockIdx.x * 64 + threadIdx.x] * 2 }]
             plan = GPUHostPlan(params=(A, B), temps=(), launches=(("f_kernel0", (A, B)),))

A thread loop is not a loop: each of its iterations is one thread, so its variable becomes the
thread index of its tag (one Var per tag per kernel, named like the tag; the code generators
print it as the builtin). The launch extent of a tag is the largest extent bound to it in the
kernel; a loop bound with a smaller extent runs under `if (threadIdx.x < extent)`. Root
allocations of global scope (intermediates between kernels) become `temps` the host allocates
in device memory, passed to the kernels that use them as trailing buffer parameters.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tessera.arith import simplify
from tessera.ir.node import Mutator
from tessera.tir.buffer import Buffer
from tessera.tir.expr import IntImm, Var
from tessera.tir.function import PrimFunc
from tessera.tir.op import likely
from tessera.tir.stmt import Allocate, For, ForKind, IfThenElse, SeqStmt, Stmt
from tessera.tir.stmt_functor import collect, free_vars, substitute

THREAD_TAGS = (
    "blockIdx.x",
    "blockIdx.y",
    "blockIdx.z",
    "threadIdx.x",
    "threadIdx.y",
    "threadIdx.z",
)
LAUNCH_ATTR = "launch"  # ((tag, extent), ...) of a device kernel, in THREAD_TAGS order


class GPUSplitError(ValueError):
    """A function that cannot run as GPU kernels (the message says which stage and why)."""


@dataclass(frozen=True)
class GPUHostPlan:
    """What the host does for one function: allocate `temps`, then launch each kernel in order
    with the given buffers/vars (`launches`: (kernel name, args))."""

    name: str
    params: tuple
    temps: tuple[Buffer, ...]
    launches: tuple[tuple[str, tuple], ...]


def split_kernels(func: PrimFunc) -> tuple[list[PrimFunc], GPUHostPlan]:
    """The device kernels of `func` and the host plan that runs them (module docstring)."""
    temps, body = _peel_root_allocations(func.body)
    nests = list(body.seq) if isinstance(body, SeqStmt) else [body]
    kernels, launches = [], []
    for k, nest in enumerate(nests):
        if _is_no_op(nest):
            continue
        kernel = _make_kernel(func, f"{func.name}_kernel{k}", nest, temps)
        kernels.append(kernel)
        launches.append((kernel.name, kernel.params))
    plan = GPUHostPlan(func.name, func.params, tuple(temps), tuple(launches))
    return kernels, plan


def _peel_root_allocations(body: Stmt) -> tuple[list[Buffer], Stmt]:
    temps = []
    while isinstance(body, Allocate):
        if body.buffer.scope != "global":
            raise GPUSplitError(
                f"{body.buffer.name} ({body.buffer.scope}) is allocated outside every kernel: "
                "a shared or local buffer lives inside a kernel; compute_at it inside the "
                "loops bound to blockIdx"
            )
        temps.append(body.buffer)
        body = body.body
    return temps, body


def _is_no_op(stmt: Stmt) -> bool:
    from tessera.tir.stmt import Evaluate

    return isinstance(stmt, Evaluate) and isinstance(stmt.value, IntImm)


def _first_loop(stmt: Stmt) -> For | None:
    return stmt if isinstance(stmt, For) else None


def _is_scalar_nest(nest: Stmt) -> bool:
    """A nest computing one element (a stage without data-parallel axes: a loop's condition, a
    count, a whole-tensor reduction's result): no loop at its root and none bound to a thread
    inside. It runs as a kernel of one thread."""
    if isinstance(nest, For):
        return False
    return not collect(nest, lambda n: isinstance(n, For) and n.kind == ForKind.THREAD_BINDING)


def _make_kernel(func: PrimFunc, name: str, nest: Stmt, temps: list[Buffer]) -> PrimFunc:
    loop = _first_loop(nest)
    if _is_scalar_nest(nest):
        pass  # launched as one thread: no thread axis to bind
    elif loop is None or loop.kind != ForKind.THREAD_BINDING:
        what = loop.loop_var.name if loop is not None else type(nest).__name__
        raise GPUSplitError(
            f"{func.name}: the root loop nest starting at {what} is not bound to a GPU thread "
            "axis; on a GPU target every stage computed at root binds its outer loops "
            '(s[X].bind(xo, te.thread_axis("blockIdx.x")), ...)'
        )
    launch = _launch_extents(func.name, nest)
    thread_vars = {tag: Var(tag, "int32") for tag in launch}
    body = _BindThreads(thread_vars, launch).visit(nest)
    used = {id(b) for b in collect(body, lambda n: isinstance(n, Buffer))}
    free = {id(v) for v in free_vars(body)}
    params = tuple(
        p
        for p in list(func.params) + temps
        if (isinstance(p, Buffer) and id(p) in used) or (isinstance(p, Var) and id(p) in free)
    )
    attrs = (
        (LAUNCH_ATTR, tuple((t, launch[t]) for t in THREAD_TAGS if t in launch)),
        ("thread_vars", tuple(thread_vars[t] for t in THREAD_TAGS if t in launch)),
    )
    return PrimFunc(name, params, body, attrs)


def _launch_extents(fname: str, nest: Stmt) -> dict[str, int]:
    launch: dict[str, int] = {}
    bound = collect(nest, lambda n: isinstance(n, For) and n.kind == ForKind.THREAD_BINDING)
    for loop in bound:
        if loop.thread_tag not in THREAD_TAGS:
            raise GPUSplitError(
                f"{fname}: loop {loop.loop_var.name} is bound to {loop.thread_tag!r}; the thread "
                f"axes are {', '.join(THREAD_TAGS)}"
            )
        extent = simplify(loop.extent)
        if not isinstance(extent, IntImm):
            raise GPUSplitError(
                f"{fname}: loop {loop.loop_var.name} bound to {loop.thread_tag} has the "
                f"symbolic extent {loop.extent}; a launch needs constant extents"
            )
        launch[loop.thread_tag] = max(launch.get(loop.thread_tag, 1), extent.value)
    return launch


class _BindThreads(Mutator):
    """Thread loops -> their thread index (guarded where the loop is shorter than the launch)."""

    def __init__(self, thread_vars: dict[str, Var], launch: dict[str, int]):
        self.thread_vars, self.launch = thread_vars, launch

    def visit_For(self, node: For):
        body = self.visit(node.body)
        if node.kind != ForKind.THREAD_BINDING:
            return node if body is node.body else replace(node, body=body)
        tid = self.thread_vars[node.thread_tag]
        body = substitute(body, {node.loop_var: tid})
        if simplify(node.extent).value < self.launch[node.thread_tag]:
            body = IfThenElse(likely(tid < node.extent), body)
        return body
