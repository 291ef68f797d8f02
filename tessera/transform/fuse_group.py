"""Build the `fused` calls of a fused function from a grouping of its calls, and list them.

    build_groups(func, [0, 2, 2])    # call 0 alone, calls 1 and 2 in the group of call 2
    fused_groups(fused_func)         # [Function fused_exp, Function fused_add_nn_relu]

A group's primitive function takes the group's inputs as parameters `%p0, %p1, ...` (in order of
first use; constants of one element stay inside as constants) and returns the values that calls
outside the group or the function's outputs use. Its name joins its members' op names. The
`fused` call's span is the union of its members' spans in order; the members keep theirs.
"""

from __future__ import annotations

import heapq

from tessera.graph.ir import Call, Constant, Function, Value, merge_spans
from tessera.graph.op import get_op
from tessera.ir.module import IRModule

MAX_NAME_LENGTH = 80


def _group_order(func: Function, members: dict[int, list[int]], owner: dict[int, int]):
    """Groups in a topological order (ties: the group whose first call comes first)."""
    deps = {g: set() for g in members}
    for g, calls in members.items():
        for i in calls:
            for v in func.body[i].inputs:
                if id(v) in owner and owner[id(v)] != g:
                    deps[g].add(owner[id(v)])
    users = {g: [] for g in members}
    for g, ds in deps.items():
        for d in ds:
            users[d].append(g)
    ready = [(members[g][0], g) for g, ds in deps.items() if not ds]
    heapq.heapify(ready)
    order = []
    while ready:
        _, g = heapq.heappop(ready)
        order.append(g)
        for u in users[g]:
            deps[u].discard(g)
            if not deps[u]:
                heapq.heappush(ready, (members[u][0], u))
    if len(order) != len(members):
        raise ValueError(f"{func.name}: the fusion groups form a cycle (a fusion bug)")
    return order


def _group_name(calls: list[Call], taken: set[str]) -> str:
    name = "fused_" + "_".join(c.op.name.replace(".", "_") for c in calls)
    if len(name) > MAX_NAME_LENGTH:
        name = name[: MAX_NAME_LENGTH - 8].rstrip("_") + f"_{len(calls)}ops"
    unique, k = name, 0
    while unique in taken:
        k += 1
        unique = f"{name}_{k}"
    taken.add(unique)
    return unique


def _make_group(calls: list[Call], exported: set[int], name: str) -> Call:
    """The `fused` call computing `calls` (in order); `exported`: ids of values used outside."""
    inner: dict[int, Value] = {}
    inputs, params, constants = [], [], []
    for call in calls:
        for v in call.inputs:
            if id(v) in inner:
                continue
            if isinstance(v, Constant) and v.type.is_static and v.type.size == 1:
                inner[id(v)] = Constant(v.name, v.type, v.data)
                constants.append(inner[id(v)])
            else:
                inner[id(v)] = Value(f"p{len(params)}", v.type)
                inputs.append(v)
                params.append(inner[id(v)])
        for v in call.outputs:
            inner[id(v)] = Value(v.name, v.type)
    outputs = [v for c in calls for v in c.outputs if id(v) in exported]
    if not outputs:  # a dead group: keep what its last call computes, so it stays well formed
        outputs = list(calls[-1].outputs)
    body = tuple(
        Call(
            c.op,
            tuple(inner[id(v)] for v in c.inputs),
            c.attrs,
            tuple(inner[id(v)] for v in c.outputs),
            c.span,
        )
        for c in calls
    )
    prim = Function(
        name, tuple(params), body, tuple(inner[id(v)] for v in outputs), tuple(constants)
    )
    span = merge_spans(*(c.span for c in calls))
    return Call(get_op("fused"), tuple(inputs), {"func": prim}, tuple(outputs), span)


def build_groups(func: Function, group_of: list[int]) -> Function:
    """`func` as `fused` calls, one per group; `group_of[i]` names the group of call i."""
    members: dict[int, list[int]] = {}
    for i, g in enumerate(group_of):
        members.setdefault(g, []).append(i)
    owner = {id(v): group_of[i] for i, c in enumerate(func.body) for v in c.outputs}
    exported = {id(v) for v in func.outputs}
    for i, call in enumerate(func.body):
        exported.update(
            id(v) for v in call.inputs if id(v) in owner and owner[id(v)] != group_of[i]
        )
    for call in func.body:  # a run-time row count leaves with the rows it counts (Op.row_counts)
        for i, j in call.op.row_counts.items():
            if id(call.outputs[i]) in exported:
                exported.add(id(call.outputs[j]))
    body, taken = [], set()
    for g in _group_order(func, members, owner):
        calls = [func.body[i] for i in members[g]]
        if len(calls) == 1 and calls[0].op is get_op("fused"):
            body.append(calls[0])  # fused before: not wrapped again
            continue
        body.append(_make_group(calls, exported, _group_name(calls, taken)))
    used = {id(v) for c in body for v in c.inputs} | {id(v) for v in func.outputs}
    constants = tuple(c for c in func.constants if id(c) in used)
    return Function(func.name, func.params, tuple(body), func.outputs, constants)


def fused_groups(ir) -> list[Function]:
    """The primitive functions of the `fused` calls of a function (or of an IRModule's "main"),
    in the order the function calls them."""
    func = ir["main"] if isinstance(ir, IRModule) else ir
    fused = get_op("fused")
    return [c.attrs["func"] for c in func.body if c.op is fused]
