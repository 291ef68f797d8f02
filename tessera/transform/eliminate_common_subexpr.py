"""Compute identical calls once and keep one copy of identical constants.

    before:  %a = exp(%x); %b = exp(%x); %c = add(%a, %b)
    after:   %a = exp(%x); %c = add(%a, %a)

Two calls are identical when they have the same op, the same input values (after earlier
merges) and equal attributes; two constants when they have the same dtype, shape and bytes.
Calls with side effects are never merged. Parameters are never merged (they are distinct inputs).
"""

from __future__ import annotations

from tessera.graph.ir import Call, Function, Value
from tessera.transform.graph_pass import graph_pass, rebuild, remap_call


@graph_pass(opt_level=3)  # as in TVM
def eliminate_common_subexpr(func: Function) -> Function:
    mapping: dict[int, Value] = {}
    constants, by_data = [], {}
    for c in func.constants:
        first = by_data.setdefault(c.data, c)  # TensorData: equal by dtype, shape and bytes
        if first is c:
            constants.append(c)
        else:
            mapping[id(c)] = first
    body, seen = [], {}
    for call in func.body:
        call = remap_call(call, mapping)
        if call.op.has_side_effects:
            body.append(call)
            continue
        key = (call.op, tuple(id(v) for v in call.inputs), call.attrs)
        first: Call | None = seen.setdefault(key, call)
        if first is call:
            body.append(call)
        else:
            mapping.update((id(a), b) for a, b in zip(call.outputs, first.outputs, strict=True))
    return rebuild(func, body, mapping, constants)
