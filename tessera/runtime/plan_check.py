"""Checks of an executor plan read from an artifact (Note [executor plan] in graph_executor.py):
every key the runtime reads is there with the right type, so that a plan from another writer is
one ValueError naming what is wrong, never a bare KeyError or TypeError.

    check_plan(plan, "model.so")
"""

from __future__ import annotations

from tessera.runtime.ndarray import STORAGE
from tessera.runtime.shape_expr import is_expr

PLAN_VERSION = 1
ARG_KINDS = ("input", "param", "output", "arena", "dyn")  # dyn: Note [dynamic plan]


def _nbytes(dtype: str, shape) -> int:
    import numpy as np

    return int(np.prod(shape, dtype=np.int64)) * np.dtype(STORAGE[dtype]).itemsize


def check_plan(plan, where) -> None:
    """A ValueError naming what is missing or mistyped in an executor plan (Note [executor
    plan]), so that a malformed plan never surfaces as a bare KeyError or TypeError."""

    def need(ok: bool, what: str):
        if not ok:
            raise ValueError(f"{where!r}: the executor plan is malformed ({what})")

    need(isinstance(plan, dict), "not an object")
    need(plan.get("version") == PLAN_VERSION, f"version {plan.get('version')!r}")
    for key in ("params_nbytes", "arena_nbytes"):
        need(isinstance(plan.get(key), int) and plan[key] >= 0, f"{key} is not a size")
    for key in ("inputs", "outputs", "params", "calls"):
        need(isinstance(plan.get(key), list), f"{key} is not a list")
    dynamic = "dynamic" in plan
    if dynamic:
        _check_dynamic(plan, need)
    else:  # ["dyn", t] reads the table that only a dynamic plan's arena holds
        for call in plan.get("calls", ()) if isinstance(plan.get("calls"), list) else ():
            args = call.get("args", ()) if isinstance(call, dict) else ()
            ok = all(not (isinstance(a, list) and a[:1] == ["dyn"]) for a in args)
            need(ok, "a dyn argument in a plan without symbolic dims")
    for spec in plan["inputs"] + plan["outputs"] + plan["params"]:
        need(isinstance(spec, dict), "a tensor description is not an object")
        need(isinstance(spec.get("name"), str), "a tensor has no name")
        need(spec.get("dtype") in STORAGE, f"tensor {spec.get('name')!r} has no known dtype")
        shape = spec.get("shape")
        symbolic = dynamic and spec not in plan["params"]
        ok = isinstance(shape, list) and all(
            (isinstance(d, int) and not isinstance(d, bool) and d >= 0)
            or (symbolic and is_expr(d))
            for d in shape
        )
        need(ok, f"tensor {spec['name']!r} has no shape")
    for spec in plan["params"]:
        need(isinstance(spec.get("offset"), int) and spec["offset"] >= 0, "a weight's offset")
        end = spec["offset"] + _nbytes(spec["dtype"], spec["shape"])
        need(end <= plan["params_nbytes"], f"weight {spec['name']!r} lies past the weights")
    for out in plan["outputs"]:
        storage = out.get("storage")
        need(isinstance(storage, list) and len(storage) == 2, "an output has no storage")
    functions = plan.get("functions", [])
    need(isinstance(functions, list), "functions is not a list")
    for k, func in enumerate([plan, *functions]):
        need(isinstance(func, dict), f"function {k} is not an object")
        for key in ("inputs", "outputs", "calls"):
            need(isinstance(func.get(key), list), f"function {k}: {key} is not a list")
        need(isinstance(func.get("arena_nbytes"), int), f"function {k}: arena_nbytes")
        for call in func["calls"]:
            _check_call(call, len(functions), need)
    for out in plan["outputs"]:
        need("rows" not in out or _is_arg(out["rows"]), "an output's rows")
        axis = out.get("rows_axis", 0)
        need(isinstance(axis, int) and 0 <= axis < max(1, len(out["shape"])), "rows_axis")


def _check_call(call, num_functions: int, need) -> None:
    """A kernel call, or a control call (Note [control calls] in graph_build/control_flow.py)."""
    need(isinstance(call, dict), "a call is not an object")
    args = call.get("args")
    need(isinstance(args, list) and all(_is_arg(a) for a in args), "a call's arguments")
    if "control" not in call:
        need(isinstance(call.get("kernel"), str), "a call's kernel")
        need(all(isinstance(v, int) or _is_arg(v) for v in call.get("vars", ())), "a call's vars")
        return
    need(call["control"] in ("if", "loop", "fail"), f"control call {call['control']!r}")
    outs = call.get("outputs")
    need(isinstance(outs, list) and all(_is_arg(a) for a in outs), "a control call's outputs")
    funcs = call.get("functions")
    ok = isinstance(funcs, list) and all(
        isinstance(f, int) and 1 <= f <= num_functions for f in funcs
    )
    count = {"if": 2, "loop": 1, "fail": 0}[call["control"]]
    need(ok and len(funcs) == count, "a control call's functions")
    need(isinstance(call.get("region"), int) and call["region"] >= 0, "a control call's region")
    if call["control"] == "loop":
        for key in ("scratch", "nbytes", "slice_nbytes"):
            values = call.get(key)
            ok = isinstance(values, list) and all(isinstance(v, int) and v >= 0 for v in values)
            need(ok, f"a loop's {key}")
        need(isinstance(call.get("num_carried"), int), "a loop's num_carried")
        need(isinstance(call.get("capacity"), int), "a loop's capacity")


def _is_arg(arg) -> bool:
    return (
        isinstance(arg, list)
        and len(arg) == 2
        and arg[0] in ARG_KINDS
        and isinstance(arg[1], int)
        and not isinstance(arg[1], bool)
        and arg[1] >= 0
    )


def _check_dynamic(plan: dict, need) -> None:
    """The "dynamic" section of a plan with symbolic dims (Note [dynamic plan])."""
    dyn = plan["dynamic"]
    need(isinstance(dyn, dict), "dynamic is not an object")
    dims = dyn.get("dims")
    need(isinstance(dims, list), "dynamic: dims is not a list")
    for d in dims:
        ok = isinstance(d, dict) and isinstance(d.get("name"), str)
        ok = ok and isinstance(d.get("min"), int) and d["min"] >= 0
        ok = ok and (d.get("max") is None or (isinstance(d["max"], int) and d["max"] >= d["min"]))
        need(ok, "dynamic: a dim")
    values = dyn.get("values")
    need(isinstance(values, list), "dynamic: values is not a list")
    for v in values:
        ok = isinstance(v, dict) and is_expr(v.get("nbytes"))
        ok = ok and all(isinstance(v.get(k), int) and v[k] >= 0 for k in ("start", "end"))
        need(ok, "dynamic: a value")
    work = dyn.get("workspaces")
    ok = isinstance(work, list) and all(isinstance(w, int) and w >= 0 for w in work)
    need(ok and isinstance(dyn.get("workspace_nbytes"), int), "dynamic: workspaces")
    need("functions" not in plan, "dynamic: a plan with symbolic dims has no functions")
    slots = len(dims) + len(values) + len(work)
    for call in plan["calls"]:
        shapes = call.get("shapes", [])
        ok = isinstance(shapes, list) and all(
            isinstance(s, list) and all(is_expr(d) for d in s) for s in shapes
        )
        need(ok, "a call's shapes")
        for a in [*call.get("args", ()), *(v for v in call.get("vars", ()) if isinstance(v, list))]:
            need(not _is_arg(a) or a[0] != "dyn" or a[1] < slots, "a call's dyn slot")
