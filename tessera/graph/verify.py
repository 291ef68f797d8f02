"""Check a graph function: SSA form, topological order, and types that match the type rules."""

from __future__ import annotations

from tessera.graph.ir import Call, Constant, Function


class VerifyError(ValueError):
    pass


def verify_function(func: Function, types: bool = True) -> None:
    """Raise VerifyError naming the first problem found; `types=False` checks only that every
    value is defined once, before its uses (a function whose types a pass has yet to infer)."""
    defined: set[int] = set()

    def define(v, where):
        if id(v) in defined:
            raise VerifyError(f"{func.name}: %{v.name} is defined twice ({where})")
        defined.add(id(v))

    for p in func.params:
        if isinstance(p, Constant):
            raise VerifyError(f"{func.name}: parameter %{p.name} is a constant")
        define(p, "parameter")
    for c in func.constants:
        if not isinstance(c, Constant):
            raise VerifyError(f"{func.name}: %{c.name} in the constants table is not a Constant")
        define(c, "constant")
    for call in func.body:
        _verify_call(func, call, defined, types)
        for v in call.outputs:
            define(v, f"output of {call.op.name}")
    for v in func.outputs:
        if id(v) not in defined:
            raise VerifyError(f"{func.name}: output %{v.name} is never defined")


def _verify_call(func: Function, call: Call, defined: set[int], types: bool) -> None:
    for v in call.inputs:
        if id(v) not in defined:
            raise VerifyError(
                f"{func.name}: %{v.name} is used by {call.op.name} before it is defined"
            )
    if not types:
        return
    try:
        types = call.op.infer_type([v.type for v in call.inputs], call.attrs)
    except (TypeError, ValueError) as e:
        raise VerifyError(f"{func.name}: {e}") from None
    declared = tuple(v.type for v in call.outputs)
    if tuple(types) != declared:
        got = ", ".join(map(str, declared))
        want = ", ".join(map(str, types))
        raise VerifyError(
            f"{func.name}: {call.op.name} outputs are typed {got}, its rule gives {want}"
        )
