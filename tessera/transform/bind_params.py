"""Bind parameters to known arrays: they become constants, so later passes can fold them.

    before:  def main(%x: f32[1, 4], %w: f32[2, 4]) { %1 = nn.dense(%x, %w); return %1 }
    after:   def main(%x: f32[1, 4]) { %w = constant(...) : f32[2, 4]; %1 = nn.dense(%x, %w);
             return %1 }                                       (bind_params(mod, {"w": w}))

This is how the weights that `from_onnx` returns in `params` reach `fold_constant`,
`simplify_inference` (batch-norm into conv weights) and friends. A name that is not a parameter,
or an array of the wrong shape or dtype, is a ValueError naming the parameter.
"""

from __future__ import annotations

import numpy as np

from tessera.graph.ir import Constant, Function, Value
from tessera.ir.module import IRModule
from tessera.transform.graph_pass import rebuild, remap_call


def _bind_function(func: Function, params: dict) -> Function:
    names = {p.name for p in func.params}
    unknown = sorted(set(params) - names)
    if unknown:
        raise ValueError(
            f"bind_params: {func.name} has no parameter {unknown[0]!r} "
            f"(parameters: {', '.join(p.name for p in func.params)})"
        )
    mapping: dict[int, Value] = {}
    for p in func.params:
        if p.name not in params:
            continue
        array = np.asarray(params[p.name])
        if array.shape != p.type.shape or str(array.dtype) != p.type.dtype.numpy_name:
            raise ValueError(
                f"bind_params: parameter {p.name!r} is {p.type}, got an array of "
                f"{array.dtype}{list(array.shape)}"
            )
        mapping[id(p)] = Constant(p.name, p.type, array)
    if not mapping:
        return func
    bound = rebuild(
        func,
        [remap_call(c, mapping) for c in func.body],
        mapping,
        [*func.constants, *mapping.values()],
    )
    kept = tuple(p for p in func.params if id(p) not in mapping)
    return Function(bound.name, kept, bound.body, bound.outputs, bound.constants)


def bind_params(ir, params: dict):
    """`ir` (an IRModule: its "main"; or a Function) with `params` bound as constants."""
    if isinstance(ir, Function):
        return _bind_function(ir, params)
    if not isinstance(ir, IRModule):
        raise TypeError(f"bind_params takes a graph Function or an IRModule, got {ir!r}")
    if not params:
        return ir
    return IRModule({**ir.functions, "main": _bind_function(ir["main"], params)})
