"""TFLite resource variables (streaming models keep state between invocations in them):
VAR_HANDLE, READ_VARIABLE, ASSIGN_VARIABLE and CALL_ONCE.

A graph function has no state, so each variable that the model reads becomes an input of the
function, `<name>`, and its value after the invocation an extra output, `<name>_next`, after
the model's own outputs. `tflite.initial_state(model)` gives the first values (from the
CALL_ONCE init subgraph; zeros where it assigns none). A streaming caller feeds each
`<name>_next` back as `<name>` for the next frame, which is what the interpreter does inside.
The initial values are not in `params`: a compiled module binds its params as weights, and the
state must stay an input that changes every frame.
"""

from __future__ import annotations

import numpy as np

from tessera.frontend.tflite import Context, _clean, tflite_op
from tessera.frontend.tflite_reader import Operator


def _key(op: Operator) -> str:
    def text(v):
        return v.decode(errors="replace") if isinstance(v, bytes) else str(v or "")

    container, shared = text(op.options.get("Container")), text(op.options.get("SharedName"))
    return f"{container}/{shared}" if container else shared


def _state(ctx: Context) -> dict:
    if not hasattr(ctx, "variables"):
        ctx.variables = {}  # key -> {"initial": array | None, "param": Value, "value": Value}
        ctx.resources = {}  # resource tensor index (main graph) -> key
    return ctx.variables


@tflite_op("CALL_ONCE")
def call_once(ctx: Context, op: Operator):
    """Run the init subgraph at conversion: it may only assign constants to variables."""
    variables = _state(ctx)
    index = op.options.get("InitSubgraphIndex", 0)
    subgraphs = ctx.model.subgraphs
    if not 0 < index < len(subgraphs):
        raise ValueError(f"init subgraph {index} does not exist")
    g = subgraphs[index]
    handles = {}
    for inner in g.operators:
        if inner.name == "VAR_HANDLE":
            handles[inner.outputs[0]] = _key(inner)
        elif inner.name == "ASSIGN_VARIABLE":
            value = g.tensors[inner.inputs[1]]
            if value.data is None:
                raise ValueError("the init subgraph assigns a value that is not a constant")
            variables.setdefault(handles[inner.inputs[0]], {})["initial"] = np.array(value.data)
        else:
            raise ValueError(f"the init subgraph uses {inner.name}; only variable assignments "
                             "of constants are supported")  # fmt: skip


@tflite_op("VAR_HANDLE")
def var_handle(ctx: Context, op: Operator):
    _state(ctx)
    ctx.resources[op.outputs[0]] = _key(op)
    ctx.env[op.outputs[0]] = {}  # a handle has no value


def _variable(ctx: Context, resource: int) -> tuple[str, dict]:
    _state(ctx)
    if resource not in ctx.resources:
        raise ValueError(f"tensor {resource} is not a variable handle")
    key = ctx.resources[resource]
    return key, ctx.variables.setdefault(key, {})


@tflite_op("READ_VARIABLE")
def read_variable(ctx: Context, op: Operator):
    key, var = _variable(ctx, op.inputs[0])
    if "value" not in var:
        t = ctx.tensor(op.outputs[0])
        initial = var.get("initial")
        if initial is None:
            initial = np.zeros(t.shape, t.dtype)
        initial = np.asarray(initial, t.dtype).reshape(t.shape)
        var["param"] = ctx.param(_clean(key) or f"variable{len(ctx.variables)}", t.shape, t.dtype)
        var["initial"] = initial
        var["value"] = var["param"]
    ctx.env[op.outputs[0]] = {("nhwc", False): var["value"]}


@tflite_op("ASSIGN_VARIABLE")
def assign_variable(ctx: Context, op: Operator):
    _, var = _variable(ctx, op.inputs[0])
    value = ctx.get(op.inputs[1], real=False)
    if "param" in var and value.type != var["param"].type:
        raise ValueError(f"assigns {value.type} to a variable of {var['param'].type}")
    var["value"] = value


def state_outputs(ctx: Context):
    """(outputs, their names, the initial values of the state inputs by name)."""
    outputs, names, initial = [], [], {}
    for var in getattr(ctx, "variables", {}).values():
        if "param" in var:
            outputs.append(var["value"])
            names.append(var["param"].name + "_next")
            initial[var["param"].name] = var["initial"]
    return outputs, names, initial
