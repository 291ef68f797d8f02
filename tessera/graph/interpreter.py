"""Run graph functions on numpy arrays with the ops' reference implementations.

    outs = run_function(func, {"x": x}, params)      # a list of numpy arrays

This is the oracle the compiled code is compared with. Every call's result is checked against
the types in the IR, so running a model also tests the type rules.
"""

from __future__ import annotations

import numpy as np

from tessera.graph.ir import Constant, Function, TensorType
from tessera.ir.module import IRModule


def _check_input(name: str, t: TensorType, array, bound: dict) -> np.ndarray:
    array = np.asarray(array)
    if str(array.dtype) != t.dtype.numpy_name:
        raise TypeError(f"input {name!r} must have dtype {t.dtype}, got {array.dtype}")
    ok = array.ndim == t.ndim
    for d, n in zip(t.shape, array.shape, strict=False):
        if isinstance(d, str):
            ok = ok and bound.setdefault(d, n) == n
        else:
            ok = ok and d == n
    if not ok:
        raise ValueError(f"input {name!r} must have shape {list(t.shape)}, got {list(array.shape)}")
    return array


def _bind_inputs(func: Function, inputs, params) -> dict[int, np.ndarray]:
    if not isinstance(inputs, dict):
        inputs = list(inputs)
        if len(inputs) > len(func.params):
            raise ValueError(f"{func.name} takes {len(func.params)} inputs, got {len(inputs)}")
        inputs = {p.name: a for p, a in zip(func.params, inputs, strict=False)}
    given = {**(params or {}), **inputs}
    names = {p.name for p in func.params}
    unknown = sorted(set(inputs) - names)
    if unknown:
        raise ValueError(f"{func.name} has no input named {unknown[0]!r} (inputs: {sorted(names)})")
    env, bound = {}, {}
    for p in func.params:
        if p.name not in given:
            raise ValueError(f"missing input {p.name!r} of {func.name}")
        env[id(p)] = _check_input(p.name, p.type, given[p.name], bound)
    for c in func.constants:
        env[id(c)] = c.array
    return env


def run_function(func: Function, inputs, params: dict | None = None) -> list[np.ndarray]:
    """Evaluate `func`. `inputs`: a dict by parameter name, or a list in parameter order;
    `params` supplies the remaining parameters (the weights) by name."""
    env = _bind_inputs(func, inputs, params)
    for call in func.body:
        results = call.op.evaluate([env[id(v)] for v in call.inputs], call.attrs)
        if len(results) != len(call.outputs):
            raise TypeError(f"{call.op.name} gave {len(results)} results for {len(call.outputs)}")
        for v, r in zip(call.outputs, results, strict=True):
            if r.dtype.name != v.type.dtype.numpy_name or (
                v.type.is_static and r.shape != v.type.shape
            ):
                raise TypeError(
                    f"{call.op.name}: its reference gave {r.dtype}{list(r.shape)} for %{v.name}, "
                    f"typed {v.type}"
                )
            env[id(v)] = r
    out = []
    for v in func.outputs:
        out.append(v.array if isinstance(v, Constant) else env[id(v)])
    return out


def run_module(mod: IRModule, inputs, params: dict | None = None, name: str = "main"):
    """Evaluate function `name` of a graph IRModule (see run_function)."""
    return run_function(mod[name], inputs, params)
