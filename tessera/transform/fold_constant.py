"""Evaluate calls whose inputs are all constants, with the ops' numpy references.

    before:  %c = constant([1.0, 2.0]) : f32[2];
             %1 = exp(%c) : f32[2]; %2 = add(%x, %1) : f32[2]
    after:   %1 = constant([2.7182817, 7.389056]) : f32[2];
             %2 = add(%x, %1) : f32[2]

Not folded: calls with side effects, ops without a reference, calls whose evaluation fails (the
error then shows at run time, where it belongs), and results larger than
`PassContext.config["fold_constant.max_bytes"]` (default 64 MiB).

See Note [inflating folds]: a cheap broadcast (an `expand` of a scalar to a large shape, a
`tile`, ...) whose result is bigger than its inputs is not turned into a constant when a
non-constant call or an output would use it: that would only inflate the weights, and the kernel
that uses it recomputes it for free. It is still folded away when only folded calls use it.
"""

from __future__ import annotations

import numpy as np

from tessera.graph.ir import Call, Constant, Function, Value
from tessera.graph.op import OpKind
from tessera.transform.graph_pass import graph_pass, rebuild, remap_call
from tessera.transform.pass_context import PassContext

DEFAULT_MAX_BYTES = 64 << 20
# Note [inflating folds]: a fold is inflating when its op only moves or repeats data
# (kind <= INJECTIVE) and its result is larger than its inputs together and than this floor.
INFLATE_MIN_BYTES = 4096

_EVAL_ERRORS = (
    ArithmeticError,
    IndexError,
    NotImplementedError,
    TypeError,
    ValueError,
)


def _max_bytes() -> int:
    return int(PassContext.current().config.get("fold_constant.max_bytes", DEFAULT_MAX_BYTES))


def _evaluate(call: Call, env: dict[int, np.ndarray], max_bytes: int):
    """The call's results, or None when it must not or cannot be folded."""
    if call.op.has_side_effects or "reference" not in call.op.rules:
        return None
    if not all(id(v) in env for v in call.inputs):
        return None
    if any(not v.type.is_static for v in call.outputs):
        return None
    nbytes = sum(v.type.size * v.type.dtype.itemsize for v in call.outputs)
    if nbytes > max_bytes:
        return None
    try:
        with np.errstate(all="ignore"):
            results = call.op.evaluate([env[id(v)] for v in call.inputs], call.attrs)
    except _EVAL_ERRORS:
        return None
    for v, r in zip(call.outputs, results, strict=True):
        if r.shape != v.type.shape or str(r.dtype) != v.type.dtype.numpy_name:
            raise TypeError(
                f"{call.op.name}: its reference gave {r.dtype}{list(r.shape)} for %{v.name}, "
                f"typed {v.type}"
            )
    return results


def _inflating(call: Call, env: dict[int, np.ndarray]) -> bool:
    if call.op.kind > OpKind.INJECTIVE:
        return False
    out = sum(env[id(v)].nbytes for v in call.outputs)
    return out > INFLATE_MIN_BYTES and out > sum(env[id(v)].nbytes for v in call.inputs)


def _needed_values(func: Function, folded: set[int], env) -> tuple[set[int], set[int]]:
    """(values that must exist after folding, folded calls that are kept as calls), found
    consumers first so that a kept inflating call makes its own inputs needed."""
    needed = {id(v) for v in func.outputs}
    for call in func.body:
        if id(call) not in folded:
            needed.update(id(v) for v in call.inputs)
    kept = set()
    for call in reversed(func.body):
        if id(call) in folded and any(id(v) in needed for v in call.outputs):
            if _inflating(call, env):
                kept.add(id(call))
                needed.update(id(v) for v in call.inputs)
    return needed, kept


@graph_pass(opt_level=2)  # as in TVM
def fold_constant(func: Function) -> Function:
    env = {id(c): c.array for c in func.constants}
    max_bytes, folded = _max_bytes(), set()
    for call in func.body:
        results = _evaluate(call, env, max_bytes)
        if results is not None:
            folded.add(id(call))
            env.update((id(v), r) for v, r in zip(call.outputs, results, strict=True))
    if not folded:
        return func
    needed, kept = _needed_values(func, folded, env)
    mapping: dict[int, Value] = {}
    constants = list(func.constants)
    body = []
    for call in func.body:
        if id(call) in folded and id(call) not in kept:
            for v in call.outputs:
                if id(v) in needed:
                    mapping[id(v)] = Constant(v.name, v.type, env[id(v)])
                    constants.append(mapping[id(v)])
            continue
        body.append(remap_call(call, mapping))
    # Constants that only folded calls used go too: they were inputs of this pass's work.
    used = {id(v) for call in body for v in call.inputs} | {
        id(mapping.get(id(v), v)) for v in func.outputs
    }
    constants = [c for c in constants if id(c) in used]
    return rebuild(func, body, mapping, constants)
