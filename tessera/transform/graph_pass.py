"""What the graph passes share: the `graph_pass` decorator and small helpers on functions.

    @graph_pass(opt_level=1)
    def eliminate_dead_code(func: Function) -> Function: ...

    eliminate_dead_code(func)   # a Function -> a Function
    eliminate_dead_code(mod)    # an IRModule -> an IRModule (every graph function; others kept)

A pass returns the very same object when it changed nothing, so `new is old` tells a caller that
it did nothing. `opt_level` is the lowest `PassContext.opt_level` at which `Sequential` runs it.
A pass keeps the calls' spans (source node names): see Note [spans] in `tessera.graph.ir`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from tessera.graph.ir import Call, Constant, Function, Value
from tessera.ir.module import IRModule


def graph_pass(opt_level: int = 0) -> Callable:
    """Make `fn: Function -> Function` a pass on Functions and IRModules alike."""

    def wrap(fn):
        @functools.wraps(fn)
        def run(ir, *args, **kwargs):
            if isinstance(ir, Function):
                return fn(ir, *args, **kwargs)
            if not isinstance(ir, IRModule):
                raise TypeError(f"{fn.__name__} takes a graph Function or an IRModule, got {ir!r}")
            new = {
                name: fn(f, *args, **kwargs) if isinstance(f, Function) else f
                for name, f in ir.functions.items()
            }
            if all(new[name] is f for name, f in ir.functions.items()):
                return ir
            return IRModule(new)

        run.opt_level = opt_level
        return run

    return wrap


def uses(func: Function) -> dict[int, list[Call]]:
    """id(value) -> the calls that use it (a call using a value twice is listed twice)."""
    out: dict[int, list[Call]] = {}
    for call in func.body:
        for v in call.inputs:
            out.setdefault(id(v), []).append(call)
    return out


def remap_call(call: Call, mapping: dict[int, Value]) -> Call:
    """`call` with its inputs replaced through `mapping` (the same call if none changes)."""
    inputs = tuple(mapping.get(id(v), v) for v in call.inputs)
    if all(a is b for a, b in zip(inputs, call.inputs, strict=True)):
        return call
    return Call(call.op, inputs, call.attrs, call.outputs, call.span)


def rebuild(
    func: Function,
    body,
    mapping: dict[int, Value],
    constants=None,
) -> Function:
    """`func` with a new body and constants, its outputs replaced through `mapping`; the same
    function when nothing changed."""
    body = tuple(body)
    constants = func.constants if constants is None else tuple(constants)
    outputs = tuple(mapping.get(id(v), v) for v in func.outputs)
    same = (
        len(body) == len(func.body)
        and all(a is b for a, b in zip(body, func.body, strict=True))
        and len(constants) == len(func.constants)
        and all(a is b for a, b in zip(constants, func.constants, strict=True))
        and all(a is b for a, b in zip(outputs, func.outputs, strict=True))
    )
    if same:
        return func
    return Function(func.name, func.params, body, outputs, constants)


def resolve(mapping: dict[int, Value], v: Value) -> Value:
    """Follow `mapping` to the end (a replaced value may itself have been replaced)."""
    while id(v) in mapping and mapping[id(v)] is not v:
        v = mapping[id(v)]
    return v


def is_constant(v: Value) -> bool:
    return isinstance(v, Constant)
