"""Control flow ops: a branch or a loop over graph functions, decided by values at run time.

    %y = control.if(%cond, %a, then_branch=fn(%a) {...}, else_branch=fn(%a) {...})
    %h, %ys, %n = control.loop(%max_trips, %cond, %h0, %a, body=fn(%i, %c, %h, %a) {
        ...; return %c2, %h2, %y }, num_carried=1, capacity=16, exact=False)

`control.if`: inputs are the condition (a bool scalar) and the values both branches read; each
branch is a function of those values with the same output types (the call's outputs).

`control.loop` (ONNX Loop): inputs are the trip count (int64 scalar; INT64_MAX when the model
gives none), the first condition (bool scalar), the `num_carried` loop-carried values, then the
outer values the body reads. The body takes (iteration number, condition, carried..., outer...)
and returns (next condition, next carried..., one slice of each scan output). While the count
is below the trip count and the condition holds, the body runs. Outputs: the final carried
values, each scan output stacked on a new axis 0 with room for `capacity` steps, and the number
of steps run (int64 scalar). With `exact`, the loop is known to run `capacity` steps; otherwise
rows past the step count are unspecified (only the rows below it are the model's output).
Both run natively in a compiled model (graph_build/control_flow.py, codegen/aot.py).
"""

from __future__ import annotations

import numpy as np

from tessera.graph.interpreter import run_function
from tessera.graph.ir import Function, TensorType
from tessera.graph.op import OpKind, register_op, type_error

if_ = register_op("control.if", kind=OpKind.OPAQUE)
loop = register_op("control.loop", kind=OpKind.OPAQUE)

BOOL_SCALAR = TensorType((), "bool")
INT64_SCALAR = TensorType((), "int64")


def _check_params(op: str, func, inputs, what: str) -> None:
    if not isinstance(func, Function):
        raise type_error(op, f"attribute {what} must be a graph Function, got {func!r}")
    params = tuple(p.type for p in func.params)
    if tuple(inputs) != params:
        shown = ", ".join(map(str, inputs))
        want = ", ".join(map(str, params))
        raise type_error(op, f"{what} {func.name} takes ({want}), got ({shown})")


@if_.type_rule
def _(cond: TensorType, *inputs: TensorType, then_branch, else_branch):
    if cond != BOOL_SCALAR:
        raise type_error("control.if", f"the condition must be a bool scalar, got {cond}")
    _check_params("control.if", then_branch, inputs, "then_branch")
    _check_params("control.if", else_branch, inputs, "else_branch")
    then_types = tuple(v.type for v in then_branch.outputs)
    else_types = tuple(v.type for v in else_branch.outputs)
    if then_types != else_types:
        raise type_error(
            "control.if",
            f"the branches return different types: ({', '.join(map(str, then_types))}) and "
            f"({', '.join(map(str, else_types))})",
        )
    return then_types


@if_.reference
def _(cond, *inputs, then_branch, else_branch):
    branch = then_branch if bool(cond) else else_branch
    return tuple(run_function(branch, list(inputs)))


def _loop_types(inputs, body: Function, num_carried: int, capacity: int):
    """(carried types, scan slice types) of a loop call, checked against its body."""
    if len(inputs) < 2 + num_carried:
        raise type_error("control.loop", f"needs 2 + {num_carried} inputs, got {len(inputs)}")
    if inputs[0] != INT64_SCALAR or inputs[1] != BOOL_SCALAR:
        raise type_error(
            "control.loop",
            f"the trip count and condition are int64 and bool scalars, got {inputs[0]}, "
            f"{inputs[1]}",
        )
    _check_params("control.loop", body, (INT64_SCALAR, BOOL_SCALAR, *inputs[2:]), "body")
    outs = [v.type for v in body.outputs]
    carried = tuple(inputs[2 : 2 + num_carried])
    if len(outs) < 1 + num_carried or outs[0] != BOOL_SCALAR:
        raise type_error("control.loop", "the body returns (condition, carried..., scans...)")
    if tuple(outs[1 : 1 + num_carried]) != carried:
        got = ", ".join(map(str, outs[1 : 1 + num_carried]))
        raise type_error(
            "control.loop",
            f"the body returns carried values of types ({got}), it takes "
            f"({', '.join(map(str, carried))}): a carried value keeps its type",
        )
    scans = tuple(outs[1 + num_carried :])
    if scans and capacity < 0:
        raise type_error("control.loop", f"capacity must be >= 0, got {capacity}")
    return carried, scans


@loop.type_rule
def _(*inputs: TensorType, body, num_carried: int, capacity: int, exact: bool):
    carried, scans = _loop_types(inputs, body, num_carried, capacity)
    stacked = tuple(TensorType((capacity, *t.shape), t.dtype) for t in scans)
    return (*carried, *stacked, INT64_SCALAR)


@loop.reference
def _(trips, cond, *inputs, body, num_carried: int, capacity: int, exact: bool):
    carried, outer = list(inputs[:num_carried]), list(inputs[num_carried:])
    scan_types = [v.type for v in body.outputs[1 + num_carried :]]
    scans = [np.zeros((capacity, *t.shape), t.dtype.numpy_name) for t in scan_types]
    step, go = 0, bool(cond)
    while step < int(trips) and go:
        if scans and step >= capacity:
            raise ValueError(f"control.loop: more than {capacity} steps with scan outputs")
        outs = run_function(body, [np.int64(step), np.bool_(go), *carried, *outer])
        go, carried = bool(outs[0]), outs[1 : 1 + num_carried]
        for s, y in zip(scans, outs[1 + num_carried :], strict=True):
            s[step] = y
        step += 1
    return (*carried, *scans, np.asarray(step, np.int64))


fail = register_op("control.fail", kind=OpKind.OPAQUE, has_side_effects=True)


@fail.type_rule
def _(*inputs: TensorType, message: str, types):
    """A branch that cannot run at the compiled shapes: it fails with `message` when taken;
    `types` ((shape, dtype), ...) are the outputs it stands for."""
    return tuple(TensorType(tuple(shape), dtype) for shape, dtype in types)


@fail.reference
def _(*inputs, message: str, types):
    raise RuntimeError(message)
