"""What the frontends share: turning a model's weights, held as named constants while
converting (so that converters fold transposes and reshapes of them), back into parameters.

    func, params = constants_to_params(func, weight_ids)   # weights and big constants -> params
"""

from __future__ import annotations

import numpy as np

from tessera.graph.builder import rename_values
from tessera.graph.ir import Call, Function, Value

PARAM_MIN_ELEMENTS = 64


def constants_to_params(func: Function, weight_ids: set[int]):
    """Constants whose id is in `weight_ids`, and any constant larger than PARAM_MIN_ELEMENTS,
    become parameters after the inputs (keeping their names); returns (function, params)."""
    keep, params, mapping = [], {}, {}
    for c in func.constants:
        if id(c) in weight_ids or c.array.size > PARAM_MIN_ELEMENTS:
            mapping[id(c)] = Value(c.name, c.type)
            params[c.name] = np.array(c.array)
        else:
            keep.append(c)
    return rename_values(with_params(func, mapping, keep), {}), params


def with_params(func: Function, mapping: dict, keep) -> Function:
    """`func` with each constant in `mapping` (id -> its new parameter Value) read as that
    parameter (appended after the inputs), and `keep` as its constants."""
    body = tuple(
        Call(
            call.op,
            tuple(mapping.get(id(v), v) for v in call.inputs),
            call.attrs,
            call.outputs,
            call.span,
        )
        for call in func.body
    )
    outputs = tuple(mapping.get(id(v), v) for v in func.outputs)
    new_params = tuple(func.params) + tuple(mapping.values())
    return Function(func.name, new_params, body, outputs, tuple(keep))
