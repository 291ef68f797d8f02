"""Compile a whole model for a GPU target: graph passes, one GPU function per fused group, one
source compiled once, the executor plan with a device arena.

    lib = build_graph_gpu(mod, Target("opencl"), params)    # runtime.gpu_graph.GPUGraphFactory

The graph passes and the fused groups are the CPU build's (driver.build_graph; the layout and
weight-packing passes act on llvm targets only, so a GPU model keeps NCHW). Each distinct group
is computed by its ops' compute rules, scheduled by `topi.gpu.schedule_group` (the anchor op's
GPU schedule, with its GPU strategy's config: given to the build, else the default), lowered
and split into kernels (codegen/gpu.py). Intermediates are placed by
`plan_memory` at offsets aligned to ARENA_ALIGNMENT, so that each slot can be a view of one
device allocation (OpenCL sub-buffers need their device's base alignment; CUDA's allocations
are 256-byte aligned).
"""

from __future__ import annotations

from tessera import te
from tessera.codegen.gpu import compile_source, dialect_of, host_plan_json, lower_gpu
from tessera.codegen.gpu_c import emit_kernels
from tessera.graph_build import make_executor_plan
from tessera.graph_build.control_flow import has_control_flow, make_control_plan
from tessera.graph_build.lower_group import (
    LoweringError,
    _anchor,
    _compute_group,
    distinct_groups,
    group_config,
)
from tessera.ir.module import IRModule
from tessera.target import Target
from tessera.topi.gpu import schedule_group
from tessera.transform import plan_memory

ARENA_ALIGNMENT = 256


def lower_group_gpu(group, target: Target):
    """(device kernels, host plan as data) of one fused group on a GPU target."""
    anchor = _anchor(group).op.name
    try:
        with target:  # as lower_group: rules that read the current target see this one
            placeholders, outs = _compute_group(group, target)
            config = group_config(group, target)  # the GPU strategy's, for ops that have one
            s = schedule_group(_anchor(group).op, outs, target, config)
            func = te.lower(s, [*placeholders, *outs], name=group.name)
        kernels, plan = lower_gpu(func, target)
    except LoweringError:
        raise
    except Exception as err:
        raise LoweringError(
            f"{group.name}: GPU scheduling or lowering failed ({anchor} anchors the group): "
            f"{type(err).__name__}: {err}"
        ) from err
    shapes = [tuple(p.shape) for p in (*placeholders, *outs)]
    return kernels, host_plan_json(plan, shapes, kernels)


def build_graph_gpu(mod: IRModule, target: Target, params: dict | None = None):
    """A compiled model (GPUGraphFactory) of a graph module's "main" for `target`."""
    from tessera.driver import copy_outputs, group_each_call, optimize_graph
    from tessera.runtime.gpu_graph import GPUGraphFactory
    from tessera.runtime.gpu_module import GPUModule
    from tessera.transform import bind_params

    mod = bind_params(mod, params or {})
    for p in mod["main"].params:
        if not p.type.is_static:
            raise ValueError(
                f"build: input %{p.name} has a symbolic shape {p.type}: bind its dims first "
                "(from_onnx(model, shape_dict={name: shape}))"
            )
    with target:
        mod = optimize_graph(mod)
    func = copy_outputs(group_each_call(mod["main"]))
    if has_control_flow(func):  # branches and loop bodies: plans of their own, run by the host
        plan, blob, (kernels, plans) = _control_plan(func, target)
    else:
        groups, kernel_of_call = distinct_groups(func)
        kernels, plans = _lower_groups(groups, target)
        memory = plan_memory(func, alignment=ARENA_ALIGNMENT)
        plan, blob = make_executor_plan(func, kernel_of_call, memory)
    source = emit_kernels(kernels, dialect_of(target))
    module = GPUModule(target.kind, compile_source(source, target), plans, source)
    return GPUGraphFactory(module, plan, blob)


def _lower_groups(groups, target: Target) -> tuple[list, list[dict]]:
    """(the device kernels, a host plan per group) of distinct fused groups."""
    kernels, plans = [], []
    for group in groups:
        ks, plan = lower_group_gpu(group, target)
        kernels += ks
        plans.append(plan)
    return kernels, plans


def _control_plan(func, target: Target):
    """(executor plan, weights blob, (device kernels, host plans)) of a model with control
    calls: graph_build/control_flow.py's plan, its kernels lowered for the GPU."""
    from tessera.driver import copy_outputs, group_each_call, optimize_graph

    def fuse(f):  # a branch or loop body through the graph passes, as main went
        with target:
            return copy_outputs(group_each_call(optimize_graph(IRModule({"main": f}))["main"]))

    def compile_kernels(combined):
        groups, names = distinct_groups(combined)
        return _lower_groups(groups, target), names, {}  # GPU temporaries are the module's

    return make_control_plan(func, fuse, compile_kernels, alignment=ARENA_ALIGNMENT)
