"""The executor plan of a fused function: its kernel calls and where every argument lives.

    plan, blob = make_executor_plan(fused_func, kernel_of_call, plan_memory(fused_func, views=True),
                                    kernels)

Each argument is a model input, a weight (a constant of the function, stored once in `blob`,
64-byte aligned), an arena slot (its offset in the `MemoryPlan`) or a model output. Each call
also records the source (ONNX) node names it computes (`source_nodes`), for profiles. The format
is defined by the runtime (Note [executor plan] in tessera/runtime/graph_executor.py): JSON
data plus one byte blob, so an exported library carries it without the compiler.

Note [workspaces]: a kernel's scratch buffers (`lift_workspaces`) are trailing arguments that
live for one call, so every call's workspaces share one region of the arena past the planned
values, as large as the largest call needs.

Note [run-time rows]: an op whose output's row count depends on the data (`Op.row_counts`:
NonMaxSuppression's selected boxes, Unique's values) writes a buffer of the largest count its
shapes allow and an int64 count. A model output of such an op carries "rows": the storage of
its count, which keeps an arena slot of its own past the planned values (it must survive the
run), and the executor returns that many rows. A value with run-time rows that feeds another
op is refused by the frontend.
"""

from __future__ import annotations

import numpy as np

from tessera.graph.dims import dim_bounds, dim_to_json, dim_vars, num_elements
from tessera.graph.ir import Constant, Function, Value, source_nodes
from tessera.runtime.graph_executor import PLAN_VERSION, nbytes_of
from tessera.runtime.ndarray import ALIGNMENT, STORAGE
from tessera.transform.plan_memory import MemoryPlan


def _spec(name: str, v: Value) -> dict:
    if not v.type.is_static:
        raise ValueError(f"%{v.name} has a symbolic shape {v.type}: bind it before building")
    return {"name": name, "dtype": str(v.type.dtype), "shape": list(v.type.shape)}


def _weights(func: Function) -> list[Constant]:
    """The constants the calls or the outputs use, in order of first use (each once)."""
    seen: dict[int, Constant] = {}
    for v in [v for c in func.body for v in c.inputs] + list(func.outputs):
        if isinstance(v, Constant) and id(v) not in seen:
            seen[id(v)] = v
    return list(seen.values())


def pack_params(weights: list[Constant]) -> tuple[list[dict], np.ndarray]:
    """(plan entries, blob): each weight's bytes at a 64-byte aligned offset of one blob."""
    entries, offset, taken = [], 0, set()
    for c in weights:
        name, k = c.name, 0
        while name in taken:  # get_params() is keyed by name
            k += 1
            name = f"{c.name}_{k}"
        taken.add(name)
        entry = _spec(name, c)
        entry["offset"] = offset
        entries.append(entry)
        offset += -(-c.array.nbytes // ALIGNMENT) * ALIGNMENT
    raw = np.zeros(offset + ALIGNMENT, dtype=np.uint8)
    start = (-raw.ctypes.data) % ALIGNMENT
    blob = raw[start : start + offset]
    for c, entry in zip(weights, entries, strict=True):
        data = np.ascontiguousarray(c.array)
        if data.dtype.kind == "V":  # ml_dtypes (float8, int4, ...): the bytes, not the values
            data = data.view(STORAGE[entry["dtype"]])
        data = np.ascontiguousarray(data, dtype=STORAGE[entry["dtype"]]).reshape(-1)
        blob[entry["offset"] : entry["offset"] + data.nbytes] = data.view(np.uint8)
    return entries, blob


def _workspaces(kernels) -> dict[str, list[int]]:
    """kernel name -> the byte size of each of its workspace params (Note [workspaces])."""
    sizes = {}
    for k in kernels or ():
        params = [p for p in k.info.params if p.kind == "buffer" and p.workspace]
        sizes[k.name] = [nbytes_of(p.dtype, p.shape) for p in params]
    return sizes


def row_counts(func: Function) -> dict[int, Value]:
    """id(output) -> the int64 count of its rows, for the function's outputs whose rows a run
    decides (Note [run-time rows]); looks into fused groups."""
    return {k: count for k, (count, _) in _counted(func).items()}


def row_axes(func: Function) -> dict[int, int]:
    """id(output) -> the axis along which row_counts counts its rows."""
    return {k: axis for k, (_, axis) in _counted(func).items()}


def _counted(func: Function) -> dict[int, tuple[Value, int]]:
    outputs = {id(v) for v in func.outputs}
    counts: dict[int, tuple[Value, int]] = {}
    for call in func.body:
        group = call.attrs.get("func") if call.op.name == "fused" else None
        inner = group.body if isinstance(group, Function) else (call,)
        outer = {}
        if group is not None:
            outer = dict(zip((id(v) for v in group.outputs), call.outputs, strict=True))
        for c in inner:
            for i, j in c.op.row_counts.items():
                out, count = (outer.get(id(c.outputs[k]), c.outputs[k]) for k in (i, j))
                if id(out) not in outputs:
                    continue
                if group is not None and id(c.outputs[j]) not in outer:
                    raise ValueError(f"executor plan: the row count of %{out.name} is not kept")
                counts[id(out)] = (count, c.op.row_axis(c.attrs, i))
    return counts


def _io_storage(func: Function, spec) -> tuple[list[dict], np.ndarray, dict[int, list], list]:
    """(param entries, params blob, where each input, weight and output is stored, the outputs'
    plan entries made with `spec`) of a fused function."""
    weights = _weights(func)
    param_entries, blob = pack_params(weights)
    where: dict[int, list] = {}
    for k, p in enumerate(func.params):
        where[id(p)] = ["input", k]
    for k, c in enumerate(weights):
        where[id(c)] = ["param", k]
    outputs = []
    for k, v in enumerate(func.outputs):
        where.setdefault(id(v), ["output", k])  # a repeated output refers to its first
        outputs.append({**spec(v.name, v), "storage": where[id(v)]})
    return param_entries, blob, where, outputs


def make_executor_plan(
    func: Function, kernel_of_call: list[str], memory: MemoryPlan, kernels=None
) -> tuple[dict, np.ndarray]:
    """(plan, params blob) of a fused function whose i-th call runs kernel_of_call[i];
    `kernels` (CompiledKernels) tell the workspaces each kernel takes (Note [workspaces])."""
    param_entries, blob, where, outputs = _io_storage(func, _spec)
    counts = row_counts(func)
    base = -(-memory.arena_bytes // ALIGNMENT) * ALIGNMENT
    for count in counts.values():  # Note [run-time rows]: kept for the whole run
        if id(count) not in where:
            where[id(count)] = ["arena", base]
            base += ALIGNMENT
    axes = row_axes(func)
    for k, v in enumerate(func.outputs):
        if id(v) in counts:
            outputs[k]["rows"] = where[id(counts[id(v)])]
            if axes[id(v)]:
                outputs[k]["rows_axis"] = axes[id(v)]
    for src, k in memory.in_outputs:  # Note [view calls]: the source writes the output
        where[id(src)] = ["output", k]
    for a in memory.allocations:
        where.setdefault(id(a.value), ["arena", a.offset])
    views = {id(view) for view, _ in memory.views}
    for view, src in memory.views:
        where[id(view)] = where[id(src)]
    for k, v in enumerate(func.outputs):
        outputs[k]["storage"] = where[id(v)]
    scratch = _workspaces(kernels)
    arena_bytes = max(memory.arena_bytes, base)
    calls = []
    for call, kernel in zip(func.body, kernel_of_call, strict=True):
        if len(call.outputs) == 1 and id(call.outputs[0]) in views:
            continue  # a view: no call (Note [view calls] in transform/plan_memory.py)
        for v in (*call.inputs, *call.outputs):
            if id(v) not in where:
                raise ValueError(f"executor plan: %{v.name} has no storage (a planning bug)")
        args = [where[id(v)] for v in (*call.inputs, *call.outputs)]
        offset = base
        for nbytes in scratch.get(kernel, ()):
            args.append(["arena", offset])
            offset += -(-nbytes // ALIGNMENT) * ALIGNMENT
        arena_bytes = max(arena_bytes, offset)
        calls.append({"kernel": kernel, "args": args, "vars": [], "nodes": source_nodes(call)})
    plan = {
        "version": PLAN_VERSION,
        "inputs": [_spec(p.name, p) for p in func.params],
        "outputs": outputs,
        "params": param_entries,
        "params_nbytes": int(blob.nbytes),
        "arena_nbytes": int(arena_bytes),
        "calls": calls,
    }
    return plan, blob


# -- plans with symbolic dims (Note [dynamic plan] in runtime/shape_expr.py) ----------------------


def is_dynamic(func: Function) -> bool:
    """Whether a value of `func` has a symbolic dim."""
    values = [*func.params, *(v for c in func.body for v in c.outputs), *func.outputs]
    return any(not v.type.is_static for v in values)


def _dyn_spec(name: str, v: Value) -> dict:
    shape = [dim_to_json(d) for d in v.type.shape]
    return {"name": name, "dtype": str(v.type.dtype), "shape": shape}


def _nbytes_expr(v: Value):
    return dim_to_json(num_elements((*v.type.shape, v.type.dtype.itemsize)))


def make_dynamic_plan(
    func: Function, kernel_of_call: list[str], kernels
) -> tuple[dict, np.ndarray]:
    """(plan, params blob) of a fused function with symbolic dims: its arena is laid out per
    call from the inputs' shapes (Note [dynamic plan] in runtime/shape_expr.py)."""
    dims = dim_vars([p.type.shape for p in func.params])
    names = [v.name for v in dims]
    if len(set(names)) != len(names):
        raise ValueError(f"the model's dynamic dims have repeated names: {names}")
    inner = dim_vars([v.type.shape for c in func.body for v in (*c.inputs, *c.outputs)])
    for v in inner:
        if all(v is not d for d in dims):
            raise ValueError(
                f"the dim {v.name!r} is in the model's shapes but in no input's: its size "
                "cannot be known when the model runs"
            )
    param_entries, blob, where, outputs = _io_storage(func, _dyn_spec)
    last_use: dict[int, int] = {}
    for i, call in enumerate(func.body):
        for v in call.inputs:
            last_use[id(v)] = i
    values = []
    for i, call in enumerate(func.body):
        for v in call.outputs:
            if id(v) not in where:
                where[id(v)] = ["dyn", len(dims) + len(values)]
                end = last_use.get(id(v), i)
                values.append({"nbytes": _nbytes_expr(v), "start": i, "end": end})
    scratch = _workspaces(kernels)
    rel_offsets: dict[int, int] = {}  # a workspace's offset in the shared region -> its slot
    infos = {k.name: k.info for k in kernels or ()}
    calls, region = [], 0
    slot_of_dim = {v.name: k for k, v in enumerate(dims)}
    for call, kernel in zip(func.body, kernel_of_call, strict=True):
        args = [where[id(v)] for v in (*call.inputs, *call.outputs)]
        offset = 0
        for nbytes in scratch.get(kernel, ()):
            rel_offsets.setdefault(offset, len(rel_offsets))
            args.append(["dyn", -1 - rel_offsets[offset]])  # resolved below
            offset += -(-nbytes // ALIGNMENT) * ALIGNMENT
        region = max(region, offset)
        kvars = []
        for var in infos[kernel].vars if kernel in infos else ():
            if var.name not in slot_of_dim:
                raise ValueError(
                    f"kernel {kernel} takes the var {var.name!r}, which is no dim of the model"
                )
            kvars.append(["dyn", slot_of_dim[var.name]])
        shapes = [[dim_to_json(d) for d in v.type.shape] for v in (*call.inputs, *call.outputs)]
        calls.append(
            {
                "kernel": kernel,
                "args": args,
                "vars": kvars,
                "shapes": shapes,  # of the values (not the workspaces), for the runtime's checks
                "nodes": source_nodes(call),
            }
        )
    first_ws = len(dims) + len(values)
    for call in calls:
        call["args"] = [
            ["dyn", first_ws - 1 - a[1]] if a[0] == "dyn" and a[1] < 0 else a for a in call["args"]
        ]
    dyn_dims = []
    for v in dims:
        lo, hi = dim_bounds(v)
        dyn_dims.append({"name": v.name, "min": lo, "max": hi})
    plan = {
        "version": PLAN_VERSION,
        "inputs": [_dyn_spec(p.name, p) for p in func.params],
        "outputs": outputs,
        "params": param_entries,
        "params_nbytes": int(blob.nbytes),
        "arena_nbytes": 0,  # laid out per call
        "calls": calls,
        "dynamic": {
            "dims": dyn_dims,
            "values": values,
            "workspaces": sorted(rel_offsets, key=rel_offsets.get),
            "workspace_nbytes": region,
        },
    }
    return plan, blob
