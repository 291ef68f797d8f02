"""The compiler's table of contents: from a model or a schedule to a runtime module.

    tessera.lower(s, [A, B, C], name="myadd")   # te schedule -> IRModule of the lowered PrimFunc
    tessera.build(s, [A, B, C], target="llvm")  # ... -> runtime.Module (callable kernels)
    tessera.build(mod, target="llvm", params=params)   # a graph IRModule -> a compiled model
                                                       # (runtime.GraphExecutorFactory)

Every step is a named function; `PassContext` (opt level, disabled passes, instruments that print
or time the IR after each pass) applies to the graph passes in `GRAPH_PASSES` and to the tir
passes in `TIR_PASSES`.
"""

from __future__ import annotations

import functools

from tessera import te, tir
from tessera.codegen import aot
from tessera.graph.ir import Call, Function, Value
from tessera.graph.op import get_op
from tessera.graph.verify import verify_function
from tessera.graph_build import make_executor_plan
from tessera.graph_build.compile import compile_groups
from tessera.graph_build.control_flow import cpu_kernels, has_control_flow, make_control_plan
from tessera.graph_build.executor_plan import is_dynamic, make_dynamic_plan
from tessera.ir.module import IRModule
from tessera.quantize.bf16 import to_bf16, to_bf16_convs
from tessera.runtime.graph_executor import GraphExecutorFactory
from tessera.target import Target
from tessera.tir import transform as tt
from tessera.tir.verify import verify
from tessera.topi.rules import use_rules
from tessera.topi.strategy import use_configs
from tessera.transform import (
    Sequential,
    alter_layout,
    bind_params,
    eliminate_common_subexpr,
    eliminate_dead_code,
    fold_constant,
    fuse_ops,
    infer_types,
    plan_memory,
    simplify_inference,
)
from tessera.transform.check_limits import check_arena, check_limits
from tessera.transform.fixed_point_requantize import fixed_point_requantize
from tessera.transform.fold_qnn_clamp import fold_qnn_clamp
from tessera.transform.fuse_group import build_groups
from tessera.transform.pack_qnn_weights import pack_qnn_weights
from tessera.transform.pack_weights import pack_weights
from tessera.transform.pass_context import PassContext, run_passes

# The graph passes, each with the lowest opt level that runs it: at 0 every op is compiled as
# it stands, one kernel each; at 1 the graph is simplified and folded; at 2 ops fuse into groups;
# at 3 common subexpressions are merged (as in TVM).
GRAPH_PASSES = [
    (infer_types, 0),
    (simplify_inference, 1),
    (to_bf16, 1),  # config "precision": "bf16": constant-weight dense/matmul as bf16.dense
    (pack_weights, 1),  # llvm targets: constant dense/matmul weights in the kernels' panels
    (fold_constant, 1),
    (fixed_point_requantize, 1),  # micro targets: the requantize in integers
    (fold_qnn_clamp, 1),  # a ReLU/clip feeding only qnn.quantize: its saturation range
    (alter_layout, 2),  # llvm targets: convs (int8 too) in NCHW[x]c, weights re-packed
    (pack_qnn_weights, 1),  # int8 convs left in NCHW: weights as their kernel reads them
    (to_bf16_convs, 2),  # config "precision": "bf16": blocked convs as bf16.conv2d_nchwc
    (eliminate_common_subexpr, 3),
    (eliminate_dead_code, 1),
    (fuse_ops, 2),
]

# The tir passes between te.lower and code generation, in order (docs/architecture.md).
TIR_PASSES = [
    tt.simplify,
    tt.partition_loop,
    tt.flatten_storage,
    tt.vectorize_loop,
    tt.unroll_loop,
    tt.simplify,
    tt.remove_no_op,
]


def _verified(func: tir.PrimFunc) -> tir.PrimFunc:
    verify(func)
    return func


def optimize(func: tir.PrimFunc, target: Target | None = None) -> tir.PrimFunc:
    """Run the tir passes of `target`'s kind (its target table row; TIR_PASSES when no target
    is given) under the current PassContext, and verify the result."""
    passes = TIR_PASSES if target is None else target.kind_info.resolve("tir_passes")
    func = run_passes(passes, func, PassContext.current())
    return _verified(func)


def lower(sch, args=None, name: str = "main", simple_mode: bool = False) -> IRModule:
    """Lower a te schedule (or a PrimFunc) to the PrimFunc that code generation takes.

    Returns an IRModule holding the function under `name`; `print()` it to read the loops.
    `simple_mode` is accepted for compatibility with TVM programs; the text is the same.
    """
    if isinstance(sch, tir.PrimFunc):
        func = sch
    elif isinstance(sch, te.Schedule):
        if args is None:
            raise ValueError("lower(schedule, args): the list of argument tensors is required")
        func = te.lower(sch, args, name=name)
    else:
        raise TypeError(f"lower expects a te.Schedule or a tir.PrimFunc, got {type(sch).__name__}")
    func = optimize(func)
    return IRModule({func.name: func})


def _codegen(funcs: list[tir.PrimFunc], target: Target):
    """The target table's `build` entry for the target's kind: PrimFuncs -> runtime.Module."""
    return target.kind_info.resolve("build")(funcs, target)


def resolve_target(target, target_host=None) -> Target:
    """`target` as a Target with its host code target: `target_host` is honoured for targets
    whose kernels run on a device (the host launches them) and refused for CPU targets, whose
    host code is the target itself (a different CPU for it would be silently ignored)."""
    target = Target(target) if not isinstance(target, Target) else target
    if target_host is None:
        return target
    host = Target(target_host) if not isinstance(target_host, Target) else target_host
    if target.kind_info.cpu:
        if host != target and host != target.host:
            raise ValueError(
                f"target_host={str(host)!r}: a {target.kind!r} target's host code is the "
                f"target itself ({str(target)!r}); name the CPU in the target instead"
            )
        return target
    if not host.kind_info.cpu:
        raise ValueError(f"target_host={str(host)!r} must be a CPU target (llvm or c)")
    return Target(target, host=host)


def optimize_graph(mod: IRModule) -> IRModule:
    """Run GRAPH_PASSES under the current PassContext (its opt level picks which)."""
    return Sequential(GRAPH_PASSES, name="graph_passes")(mod)


def group_each_call(func: Function) -> Function:
    """Below opt level 2 nothing fused: every call becomes a group (a kernel) of its own."""
    fused = [c.op.name == "fused" for c in func.body]
    if all(fused):
        return func
    if any(fused):
        raise ValueError(f"{func.name}: some calls are fused groups and some are not")
    return build_groups(func, list(range(len(func.body))))


def copy_outputs(func: Function) -> Function:
    """A function without calls (each output is an input or a constant, as in an ONNX Identity
    or Shape model) gets one copy per output, so that it has kernels to link."""
    if func.body:
        return func
    copy, body, outputs = get_op("copy"), [], []
    for v in func.outputs:
        out = Value(f"{v.name}_out", v.type)
        body.append(Call(copy, (v,), {}, (out,)))
        outputs.append(out)
    func = Function(func.name, func.params, tuple(body), tuple(outputs), func.constants)
    return build_groups(func, list(range(len(body))))


def fused_function(mod: IRModule, target: Target, params: dict | None = None) -> Function:
    """The graph passes for `target` (under the current PassContext and configs): "main" with
    its weights bound, optimized, every call in a fused group (what `build_graph` lowers)."""
    verify_function(mod["main"], types=False)  # an output never defined would have no storage
    mod = bind_params(mod, params or {})  # weights become constants that passes can fold
    for p in mod["main"].params:  # symbolic dims bind at run time; an unbound name cannot
        if any(isinstance(d, str) for d in p.type.shape):
            raise ValueError(
                f"build: input %{p.name} has a symbolic shape {p.type}: bind its dims first "
                "(from_onnx(model, shape_dict={name: shape}))"
            )
    check_limits(mod)  # before any pass folds a constant of terabytes
    with target:  # alter_layout and pack_weights read Target.current()
        mod = optimize_graph(mod)
    return copy_outputs(group_each_call(check_limits(mod)["main"]))


def context_rules() -> use_rules:
    """The rule knobs that PassContext config "strategy.rules" sets (Note [rule knobs])."""
    return use_rules(PassContext.current().config.get("strategy.rules"))


def build_graph(
    mod: IRModule, target: Target, params: dict | None = None, configs: dict | None = None
) -> GraphExecutorFactory:
    """Compile a graph IRModule's "main" (weights in `params`) into a compiled model;
    `configs`: {autotune Task: Config} for the tasks whose default config is not wanted;
    without them, PassContext config "strategy.configs" (the same mapping), "tuning.database"
    (a path: each task's best record, for the tasks the mapping does not name) and the configs
    shipped for this machine kind (tessera/autotune/pretuned.py; for the tasks neither covers;
    "tuning.pretuned": False turns them off). PassContext
    config "strategy.rules" ({rule knob: value}) sets the default rules' own knobs (Note
    [rule knobs] in topi/rules.py)."""
    if configs is None:
        config = PassContext.current().config
        configs, database = config.get("strategy.configs"), config.get("tuning.database")
        from tessera.autotune.pretuned import apply_pretuned
        from tessera.autotune.records import apply_history_best

        # explicit configs > the user's database > shipped configs (pretuned.py) > defaults
        enabled = config.get("tuning.pretuned", True)
        with apply_pretuned(target, enabled, database, configs):  # the outermost scope
            if database is None:
                return build_graph(mod, target, params, configs or {})
            with apply_history_best(database, target):  # the inner scope, `configs`, wins
                return build_graph(mod, target, params, configs or {})
    # graph passes and lowering ask the strategies
    with use_configs(configs, target), context_rules():
        func = fused_function(mod, target, params)
        if has_control_flow(func) and is_dynamic(func):
            raise ValueError(
                "build: a model with both symbolic dims and control flow decided at run time "
                "is not supported yet: give its dims sizes (from_onnx(model, shape_dict=...))"
            )
        if has_control_flow(func):  # branches and loop bodies: plans of their own
            fuse = lambda f: fused_function(IRModule({"main": f}), target)  # noqa: E731
            compile_kernels = cpu_kernels(target, functools.partial(optimize, target=target))
            plan, weights, kernels = make_control_plan(func, fuse, compile_kernels)
        else:
            # per distinct group, unless the compile cache has it: compute rules, schedule,
            # te.lower, the target's tir passes, codegen to an object
            kernels, kernel_of_call = compile_groups(
                func, target, functools.partial(optimize, target=target)
            )
            if is_dynamic(func):  # symbolic dims: the arena is laid out per call
                plan, weights = make_dynamic_plan(func, kernel_of_call, kernels)
            else:
                memory = plan_memory(func, views=True)  # Note [view calls]
                plan, weights = make_executor_plan(func, kernel_of_call, memory, kernels)
    check_arena(plan["arena_nbytes"])
    lib, entry = aot.link(kernels, plan, target)  # the kernels and the entry that runs the plan
    if getattr(target, "device", None) == "micro":  # + C sources for a board (docs/micro.md)
        from tessera.micro.model import MicroModelFactory

        return MicroModelFactory(lib, plan, weights, entry, kernels=kernels, target=target)
    return GraphExecutorFactory(lib, plan, weights, entry=entry)


def _is_graph_module(inputs) -> bool:
    if isinstance(inputs, Function):
        return True
    return isinstance(inputs, IRModule) and isinstance(inputs.functions.get("main"), Function)


def build(
    inputs,
    args=None,
    target="llvm",
    name: str = "default_function",
    target_host=None,
    params=None,
    configs=None,
):
    """Compile a graph IRModule (with its `params`) into a compiled model, or a te schedule, a
    PrimFunc or an IRModule of PrimFuncs into a runtime.Module. `configs`: for a graph module,
    {task: config} from `tessera.autotune.extract_tasks` (other tasks take their defaults)."""
    target = resolve_target(target, target_host)
    if _is_graph_module(inputs):
        mod = IRModule({"main": inputs}) if isinstance(inputs, Function) else inputs
        if target.kind_info.build_graph is not None:  # a kind with its own graph build (GPUs)
            # its lowering asks the strategies too
            with use_configs(configs, target), context_rules():
                return target.kind_info.resolve("build_graph")(mod, target, params)
        return build_graph(mod, target, params, configs)
    if params is not None:
        raise TypeError("build: params are the weights of a graph module; this is a kernel")
    if configs is not None:
        raise TypeError("build: configs are for the tasks of a graph module; this is a kernel")
    if target.kind_info.build_kernels is not None:  # a kind with its own lowering (GPUs)
        return target.kind_info.resolve("build_kernels")(inputs, args, target, name)
    if isinstance(inputs, te.Schedule):
        if args is None:
            raise ValueError("build(schedule, args): the list of argument tensors is required")
        inputs = te.lower(inputs, args, name=name)
    if isinstance(inputs, tir.PrimFunc):
        mod = IRModule({inputs.name: optimize(inputs, target)})
    elif isinstance(inputs, IRModule):
        mod = IRModule({n: optimize(f, target) for n, f in inputs})
    else:
        raise TypeError(
            "build expects a graph IRModule, a te.Schedule, a tir.PrimFunc or an IRModule of "
            f"PrimFuncs, got {type(inputs).__name__}"
        )
    return _codegen([f for _, f in mod], target)
