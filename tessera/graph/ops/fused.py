"""The `fused` op: a call of a fused group's primitive function (made by `fuse_ops`).

    %3 = fused(%x, %w, func=fn fused_nn_dense_nn_relu(%p0: f32[1, 8], %p1: f32[4, 8]) {
      %0 = nn.dense(%p0, %p1) : f32[1, 4];
      %1 = nn.relu(%0) : f32[1, 4];
      return %1
    }) : f32[1, 4]

The call's inputs bind the function's parameters in order; its outputs are the function's.
"""

from __future__ import annotations

from tessera.graph.interpreter import run_function
from tessera.graph.ir import Function, TensorType
from tessera.graph.op import OpKind, register_op, type_error

fused = register_op("fused", kind=OpKind.OPAQUE)


@fused.type_rule
def _(*inputs: TensorType, func: Function) -> tuple[TensorType, ...]:
    if not isinstance(func, Function):
        raise type_error("fused", f"attribute func must be a graph Function, got {func!r}")
    params = tuple(p.type for p in func.params)
    if tuple(inputs) != params:
        shown = ", ".join(map(str, inputs))
        want = ", ".join(map(str, params))
        raise type_error("fused", f"{func.name} takes ({want}), got ({shown})")
    return tuple(v.type for v in func.outputs)


@fused.reference
def _(*inputs, func: Function):
    return tuple(run_function(func, list(inputs)))
