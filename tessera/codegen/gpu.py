"""The GPU half of the compiler, spelled out: a te schedule (or PrimFunc) -> device kernels ->
OpenCL C or CUDA C -> a runtime GPUModule.

    s = te.create_schedule(C.op)
    bx, tx = s[C].split(C.op.axis[0], factor=64)
    s[C].bind(bx, te.thread_axis("blockIdx.x")); s[C].bind(tx, te.thread_axis("threadIdx.x"))
    f = tessera.build(s, [A, B, C], target="opencl")     # or "cuda -arch=sm_80"
    f(a, b, c)                                           # arrays on tessera.opencl(0), or numpy

Order (each step a pure function): te.lower -> GPU_TIR_PASSES (flatten) ->
split_kernels (one kernel per root loop nest, thread loops -> thread indices) ->
lower_thread_allreduce (cross-thread reductions: shuffles or a shared tree) -> per kernel
KERNEL_PASSES (simplify, barriers, vectors) -> verify_gpu (launch bounds, shared memory) ->
emit the dialect's source. The host side is plain data (`host_plan_json`): the runtime runs it
with nothing from the compiler.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tessera import te, tir
from tessera.codegen.gpu_c import CUDA, OPENCL, emit_kernels
from tessera.ir.module import IRModule
from tessera.target import Target
from tessera.tir import transform as tt
from tessera.tir.buffer import Buffer
from tessera.tir.expr import IntImm
from tessera.tir.transform.insert_barriers import insert_barriers
from tessera.tir.transform.lower_thread_allreduce import lower_thread_allreduce
from tessera.tir.transform.split_kernels import LAUNCH_ATTR, GPUHostPlan, split_kernels
from tessera.tir.verify_gpu import verify_gpu
from tessera.topi.gpu.schedule import MAX_SHARED_BYTES
from tessera.topi.gpu.schedule import max_threads as device_max_threads
from tessera.transform.pass_context import PassContext, run_passes

# Nothing that drops loops runs before split_kernels: `simplify` removes a loop of extent 1, and
# a thread loop of extent 1 still says that the stage runs in a kernel of its own.
GPU_TIR_PASSES = [tt.flatten_storage]
KERNEL_PASSES = [tt.simplify, insert_barriers, tt.vectorize_loop, tt.simplify, tt.remove_no_op]
# Device limits checked at compile time: topi/gpu/schedule.py (the strategies keep to them).


def lower_gpu(func: tir.PrimFunc, target: Target) -> tuple[list[tir.PrimFunc], GPUHostPlan]:
    """Device kernels of `func` and its host plan, verified for `target`."""
    ctx = PassContext.current()
    func = run_passes(GPU_TIR_PASSES, func, ctx)
    kernels, plan = split_kernels(func)
    max_threads = device_max_threads(target)
    out = []
    for k in kernels:
        k = lower_thread_allreduce(k, warp_shuffle=backend_of(target).warp_shuffle)
        k = run_passes(KERNEL_PASSES, k, ctx)
        verify_gpu(k, max_threads, MAX_SHARED_BYTES)
        out.append(k)
    return out, plan


def host_plan_json(plan: GPUHostPlan, param_shapes, kernels: list[tir.PrimFunc]) -> dict:
    """The plan as plain data for the runtime: params, temps, launches with grid and block."""
    by_name = {k.name: k for k in kernels}
    params, temps = list(plan.params), list(plan.temps)
    for p in params:
        if not isinstance(p, Buffer):
            raise ValueError(
                f"{plan.name}: scalar parameter {p.name}: GPU kernels take tensors of static "
                "shapes only (bind the shape first)"
            )
    out = {"name": plan.name, "params": [], "temps": [], "launches": []}
    for buf, shape in zip(params, param_shapes, strict=True):
        out["params"].append(
            {"name": buf.name, "shape": [_static(d, buf) for d in shape], "dtype": str(buf.dtype)}
        )
    for t in temps:
        count = 1
        for d in t.shape:
            count *= _static(d, t)
        out["temps"].append({"name": t.name, "nbytes": count * t.dtype.itemsize})
    for kname, args in plan.launches:
        launch = dict(by_name[kname].attr(LAUNCH_ATTR, ()))
        refs = []
        for a in args:
            if any(a is p for p in params):
                refs.append(["param", next(i for i, p in enumerate(params) if p is a)])
            else:
                refs.append(["temp", next(i for i, t in enumerate(temps) if t is a)])
        grid = [launch.get(f"blockIdx.{d}", 1) for d in "xyz"]
        block = [launch.get(f"threadIdx.{d}", 1) for d in "xyz"]
        out["launches"].append({"kernel": kname, "args": refs, "grid": grid, "block": block})
    return out


def _static(dim, buf) -> int:
    if not isinstance(dim, IntImm):
        raise ValueError(f"buffer {buf.name} has the symbolic dim {dim}: GPU shapes are static")
    return dim.value


@dataclass(frozen=True)
class GPUBackend:
    """What differs between GPU kinds after the shared lowering: the C dialect, whether
    cross-thread reductions may use warp shuffles, and how source becomes device code. A GPU
    kind's row of the target table names its backend (`TargetKind.gpu_backend`)."""

    dialect: object
    warp_shuffle: bool
    compile: Callable[[str, Target], dict]


def _compile_opencl(source: str, target: Target) -> dict:
    return {"opencl": source}  # OpenCL C as text: the driver builds it when the module loads


def _compile_cuda(source: str, target: Target) -> dict:
    from tessera.codegen.cuda import compile_cuda

    return compile_cuda(source, target.arch or "sm_80")  # a cubin for -arch, PTX as fallback


OPENCL_BACKEND = GPUBackend(OPENCL, warp_shuffle=False, compile=_compile_opencl)
CUDA_BACKEND = GPUBackend(CUDA, warp_shuffle=True, compile=_compile_cuda)


def backend_of(target: Target) -> GPUBackend:
    return target.kind_info.resolve("gpu_backend")


def dialect_of(target: Target):
    return backend_of(target).dialect


def compile_source(source: str, target: Target) -> dict:
    """The device code a GPUModule carries (the target's GPU backend decides its form)."""
    return backend_of(target).compile(source, target)


def _to_funcs(inputs, args, name: str) -> list[tir.PrimFunc]:
    if isinstance(inputs, te.Schedule):
        if args is None:
            raise ValueError("build(schedule, args): the list of argument tensors is required")
        return [te.lower(inputs, args, name=name)]
    if isinstance(inputs, tir.PrimFunc):
        return [inputs]
    if isinstance(inputs, IRModule):
        return [f for _, f in inputs]
    raise TypeError(
        "a GPU build takes a te.Schedule, a tir.PrimFunc or an IRModule of PrimFuncs, got "
        f"{type(inputs).__name__}"
    )


def build_gpu(inputs, args, target: Target, name: str = "default_function"):
    """Lower, generate and compile for a GPU target; a runtime GPUModule (module docstring)."""
    from tessera.runtime.gpu_module import GPUModule

    kernels, plans = [], []
    for func in _to_funcs(inputs, args, name):
        shapes = [func.param_shape(b) for b in func.buffer_params]
        ks, plan = lower_gpu(func, target)
        kernels += ks
        plans.append(host_plan_json(plan, shapes, ks))
    source = emit_kernels(kernels, dialect_of(target))
    return GPUModule(target.kind, compile_source(source, target), plans, source)
