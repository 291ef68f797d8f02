"""Compute identical calls once and keep one copy of identical constants.

    before:  %a = exp(%x); %b = exp(%x); %c = add(%a, %b)
    after:   %a = exp(%x); %c = add(%a, %a)

Two calls are identical when they have the same op, the same input values (after earlier
merges) and equal attributes; two constants when they have the same dtype, shape and bytes.
Calls with side effects are never merged. Parameters are never merged (they are distinct inputs).
The call kept answers for the source nodes of the calls merged into it (the union of spans).
"""

from __future__ import annotations

from dataclasses import replace

from tessera.graph.ir import Call, Function, Value, merge_spans
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
    body: list[Call] = []
    seen: dict[tuple, int] = {}  # key -> index in body of the first such call
    for call in func.body:
        call = remap_call(call, mapping)
        if call.op.has_side_effects:
            body.append(call)
            continue
        key = (call.op, tuple(id(v) for v in call.inputs), call.attrs)
        k = seen.setdefault(key, len(body))
        if k == len(body):
            body.append(call)
            continue
        first = body[k]
        mapping.update((id(a), b) for a, b in zip(call.outputs, first.outputs, strict=True))
        span = merge_spans(first.span, call.span)
        if span != first.span:
            body[k] = replace(first, span=span)
    return rebuild(func, body, mapping, constants)
