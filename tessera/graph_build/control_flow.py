"""The executor plan of a model with control flow: a plan per graph function, run natively.

    plan, blob, kernels = make_control_plan(fused_main, fuse, cpu_kernels(target, optimize))

A `control.if` or `control.loop` call (graph/ops/control.py) holds graph functions (branches, a
loop body). Each goes through the graph passes as a model's "main" does (`fused_function`),
then all functions' kernels are compiled together (identical groups share one kernel; the
groups of function k > 0 are named `f{k}_...`, so names never clash). The plan is the main
function's plan plus "functions": one plan per sub-function, whose "input" j / "output" j are
its own parameters and outputs (the control call binds them) and whose "arena" offsets are
relative to the arena region the control call hands it. See Note [control calls] for the call
format; codegen/aot.py turns it into native branches and loops on CPUs, runtime/gpu_graph.py
runs them from the host on GPUs (whose kernels `compile_kernels` makes instead).

Note [control calls]
    {"control": "if", "args": [cond, input...], "outputs": [out...],
     "functions": [then, else], "region": offset, "nodes": [...]}
    {"control": "loop", "args": [trip count, cond, carried..., outer...], "outputs":
     [final carried..., scan..., steps], "functions": [body], "num_carried": n,
     "region": offset, "scratch": [step, cond, next cond, next carried...],
     "nbytes": [carried bytes...], "slice_nbytes": [scan slice bytes...], "capacity": rows,
     "nodes": [...]}
    {"control": "fail", "args": [], "outputs": [out...], "functions": [], "message": text,
     "region": offset, "nodes": [...]}      # a branch ruled out at the compiled shapes
`region` is an arena offset past the planned values (shared with kernel workspaces: both live
for one call): the loop's scratch slots, then the sub-function's own arena. A loop keeps its
carried values in its final outputs' storage (copied in from the initial values, then from the
body's next values after each step: a body never reads what it writes) and writes step t of
scan output j at row t of it. Its steps count goes to its last output; a scan output of a loop
that may stop early that is a model output carries "rows": the storage of that count, and the
executor returns that many rows.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace

from tessera.graph.ir import Call, Constant, Function, Value, source_nodes
from tessera.graph.op import get_op
from tessera.graph_build.compile import compile_groups
from tessera.graph_build.executor_plan import _spec, _workspaces, pack_params, row_counts
from tessera.ir.module import IRModule
from tessera.runtime.graph_executor import PLAN_VERSION, nbytes_of
from tessera.runtime.ndarray import ALIGNMENT
from tessera.transform.fuse_group import build_groups
from tessera.transform.plan_memory import plan_memory

CONTROL_OPS = ("control.if", "control.loop", "control.fail")
BRANCH_ATTRS = {
    "control.if": ("then_branch", "else_branch"),
    "control.loop": ("body",),
    "control.fail": (),
}


def _align(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


def has_control_flow(func: Function) -> bool:
    return any(_control_call(c) is not None for c in func.body)


def _control_call(call: Call) -> Call | None:
    """The control op call of `call` (itself, or the only member of its fused group)."""
    if call.op.name in CONTROL_OPS:
        return call
    group = call.attrs.get("func") if call.op.name == "fused" else None
    if isinstance(group, Function) and len(group.body) == 1:
        inner = group.body[0]
        if inner.op.name in CONTROL_OPS:
            return inner
    return None


def _unwrap(call: Call) -> Call:
    """A fused group of one control call: that call, on the group call's values."""
    inner = _control_call(call)
    if inner is call:
        return call
    group = call.attrs["func"]
    bound = {id(p): v for p, v in zip(group.params, call.inputs, strict=True)}
    outer = {id(o): v for o, v in zip(group.outputs, call.outputs, strict=True)}
    inputs = tuple(bound.get(id(v), v) for v in inner.inputs)
    outputs = tuple(outer.get(id(v), v) for v in inner.outputs)
    return Call(inner.op, inputs, inner.attrs, outputs, call.span or inner.span)


def _own_outputs(func: Function) -> Function:
    """A sub-function whose every output is computed into its own buffer: outputs that are
    parameters, constants or repeats get a copy (the caller binds outputs to its storage)."""
    copy, body, outputs, seen = get_op("copy"), list(func.body), [], set()
    params = {id(p) for p in func.params}
    for v in func.outputs:
        if id(v) in params or isinstance(v, Constant) or id(v) in seen:
            out = Value(f"{v.name}_out", v.type)
            body.append(Call(copy, (v,), {}, (out,)))
            v = out
        seen.add(id(v))
        outputs.append(v)
    if len(body) == len(func.body):
        return func
    func = replace(func, body=tuple(body), outputs=tuple(outputs))
    return build_groups(func, list(range(len(body))))


class _Functions:
    """Every graph function of a model, fused, in plan order (0: main)."""

    def __init__(self, main: Function, fuse):
        self.fuse = fuse  # Function -> its fused form (the graph passes of `fused_function`)
        self.funcs: list[Function] = []
        self.add(main, fused=True)

    def add(self, func: Function, fused: bool = False) -> int:
        index = len(self.funcs)
        self.funcs.append(None)
        if not fused:
            func = _own_outputs(self.fuse(func))
        body = []
        for call in func.body:
            call = _unwrap(call) if _control_call(call) is not None else call
            if call.op.name in CONTROL_OPS:
                subs = [self.add(call.attrs[a]) for a in BRANCH_ATTRS[call.op.name]]
                call = replace(call, attrs={**call.attrs, "functions": tuple(subs)})
            elif index:
                call = _prefixed(call, f"f{index}_")
            body.append(call)
        self.funcs[index] = replace(func, body=tuple(body))
        return index


def _prefixed(call: Call, prefix: str) -> Call:
    group = call.attrs["func"]
    return replace(call, attrs={**call.attrs, "func": replace(group, name=prefix + group.name)})


def cpu_kernels(target, optimize):
    """The CPU's `compile_kernels` for make_control_plan: (compiled kernels, the kernel name of
    each call, each kernel's workspace sizes)."""

    def compile_kernels(func: Function):
        kernels, names = compile_groups(func, target, optimize)
        return kernels, names, _workspaces(kernels)

    return compile_kernels


def make_control_plan(main: Function, fuse, compile_kernels, alignment: int = ALIGNMENT):
    """(plan, weights blob, kernels) of a fused main function with control calls; `fuse` runs
    the graph passes on a sub-function (driver.fused_function), `compile_kernels(function)`
    gives (the target's kernels, the kernel name of each call, {kernel name: workspace
    sizes}) for a function of every sub-function's kernel calls (`cpu_kernels`, or the GPU's in
    codegen/gpu_graph.py). Arena slots are `alignment`-byte aligned."""
    funcs = _Functions(main, fuse).funcs
    kernel_calls = [c for f in funcs for c in f.body if c.op.name not in CONTROL_OPS]
    combined = Function("model", (), tuple(kernel_calls), ())
    kernels, names, scratch = compile_kernels(combined) if kernel_calls else ([], [], {})
    kernel_of = {id(c): n for c, n in zip(kernel_calls, names, strict=True)}
    # a weight that several functions read (a decoder's embedding in main and in the loop body)
    # is stored once: constants are keyed by their type and bytes
    unique: dict[tuple, int] = {}
    weights: list[Constant] = []
    param_of: dict[int, int] = {}
    for f in funcs:
        for v in [v for c in f.body for v in c.inputs] + list(f.outputs):
            if isinstance(v, Constant) and id(v) not in param_of:
                key = (str(v.type), hashlib.sha256(v.data.array.tobytes()).digest())
                if key not in unique:
                    unique[key] = len(weights)
                    weights.append(v)
                param_of[id(v)] = unique[key]
    entries, blob = pack_params(weights)
    plans: list[dict] = [{} for _ in funcs]
    for k in reversed(range(len(funcs))):  # a sub-function comes after its caller
        sizes = [p.get("arena_nbytes", 0) for p in plans]
        plans[k] = _function_plan(funcs[k], k == 0, kernel_of, param_of, scratch, sizes, alignment)
    plan = plans[0]
    plan.update(
        version=PLAN_VERSION,
        params=entries,
        params_nbytes=int(blob.nbytes),
        functions=plans[1:],
    )
    return plan, blob, kernels


def _function_plan(
    func: Function, is_main, kernel_of, param_of, scratch, sub_arenas, alignment
) -> dict:
    memory = plan_memory(IRModule({"main": func}), alignment=alignment)
    where: dict[int, list] = {id(p): ["input", k] for k, p in enumerate(func.params)}
    for v in [v for c in func.body for v in c.inputs] + list(func.outputs):
        if isinstance(v, Constant):
            where[id(v)] = ["param", param_of[id(v)]]
    for k, v in enumerate(func.outputs):
        where.setdefault(id(v), ["output", k])
    counts = _step_counts(func)
    end = _align(memory.arena_bytes, alignment)
    for count in counts.values():  # Note [control calls]: kept for the whole run
        where[id(count)] = ["arena", end]
        end += alignment
    for a in memory.allocations:
        where.setdefault(id(a.value), ["arena", a.offset])
    region, arena_bytes = end, end
    calls = []
    for call in func.body:
        for v in (*call.inputs, *call.outputs):
            if id(v) not in where:
                raise ValueError(f"executor plan: %{v.name} has no storage (a planning bug)")
        if call.op.name in CONTROL_OPS:
            entry, size = _control_entry(call, where, region, alignment)
            size += max([sub_arenas[k] for k in entry["functions"]], default=0)
            calls.append(entry)
            arena_bytes = max(arena_bytes, region + size)
            continue
        kernel = kernel_of[id(call)]
        args = [where[id(v)] for v in (*call.inputs, *call.outputs)]
        offset = region
        for nbytes in scratch.get(kernel, ()):
            args.append(["arena", offset])
            offset += _align(nbytes, alignment)
        arena_bytes = max(arena_bytes, offset)
        calls.append({"kernel": kernel, "args": args, "vars": [], "nodes": source_nodes(call)})
    outputs = []
    for v in func.outputs:
        out = {**_spec(v.name, v), "storage": where[id(v)]}
        if id(v) in counts:
            out["rows"] = where[id(counts[id(v)])]
        outputs.append(out)
    if not is_main and counts:
        raise ValueError(
            f"{func.name}: a Loop that may stop early returns its scan outputs from inside a "
            "subgraph; tessera supports that only for the model's outputs"
        )
    return {
        "inputs": [_spec(p.name, p) for p in func.params],
        "outputs": outputs,
        "arena_nbytes": int(arena_bytes),
        "calls": calls,
    }


def _step_counts(func: Function) -> dict[int, Value]:
    """id(output) -> the steps count of the loop that made it: the function's outputs that
    are scan outputs of a loop that may stop early."""
    outputs = {id(v) for v in func.outputs}
    counts = {}
    for call in func.body:
        if call.op.name != "control.loop" or call.attrs["exact"]:
            continue
        n = call.attrs["num_carried"]
        for v in call.outputs[n:-1]:
            if id(v) in outputs:
                counts[id(v)] = call.outputs[-1]
    return {**counts, **row_counts(func)}  # and the ops' own (Note [run-time rows])


def _control_entry(call: Call, where: dict, region: int, alignment: int) -> tuple[dict, int]:
    """The plan entry of a control call (Note [control calls]) and the bytes of its region."""
    entry = {
        "control": call.op.name.split(".")[1],
        "args": [where[id(v)] for v in call.inputs],
        "outputs": [where[id(v)] for v in call.outputs],
        "functions": list(call.attrs["functions"]),
        "nodes": source_nodes(call),
    }
    if call.op.name != "control.loop":
        entry["region"] = region
        if call.op.name == "control.fail":  # a branch ruled out at these shapes: it fails
            entry["message"] = call.attrs["message"]
        return entry, 0  # the sub-function's arena starts at the region
    n = call.attrs["num_carried"]
    carried = call.outputs[:n]
    scans = call.outputs[n:-1]
    slots, offset = [], region
    for nbytes in [8, 1, 1] + [nbytes_of(str(v.type.dtype), v.type.shape) for v in carried]:
        slots.append(offset)
        offset += _align(max(nbytes, 1), alignment)
    entry.update(
        num_carried=n,
        scratch=slots,
        nbytes=[nbytes_of(str(v.type.dtype), v.type.shape) for v in carried],
        slice_nbytes=[nbytes_of(str(v.type.dtype), v.type.shape[1:]) for v in scans],
        capacity=int(call.attrs["capacity"]),
        region=offset,
    )
    return entry, offset - region
