"""A tiny reference evaluator for integer/bool tir expressions, shared by the arith tests.

Semantics: FloorDiv/FloorMod are Python's // and %; Div/Mod truncate toward zero (C).
"""

import math

import pytest

from tessera.tir import expr as E


def _trunc_div(a, b):
    return (
        math.trunc(a / b)
        if abs(a) < 2**52
        else (abs(a) // abs(b)) * (1 if (a >= 0) == (b >= 0) else -1)
    )


_BIN = {
    E.Add: lambda a, b: a + b,
    E.Sub: lambda a, b: a - b,
    E.Mul: lambda a, b: a * b,
    E.FloorDiv: lambda a, b: a // b,
    E.FloorMod: lambda a, b: a % b,
    E.Div: _trunc_div,
    E.Mod: lambda a, b: a - b * _trunc_div(a, b),
    E.Min: min,
    E.Max: max,
    E.LT: lambda a, b: a < b,
    E.LE: lambda a, b: a <= b,
    E.GT: lambda a, b: a > b,
    E.GE: lambda a, b: a >= b,
    E.EQ: lambda a, b: a == b,
    E.NE: lambda a, b: a != b,
    E.And: lambda a, b: bool(a) and bool(b),
    E.Or: lambda a, b: bool(a) or bool(b),
}


def evaluate(e, env):
    """The value of e with each Var replaced by env[var] (ints and bools)."""
    if isinstance(e, E.IntImm):
        return bool(e.value) if e.dtype.is_bool else e.value
    if isinstance(e, E.Var):
        return env[e]
    fn = _BIN.get(type(e))
    if fn is not None:
        out = fn(evaluate(e.a, env), evaluate(e.b, env))
        return bool(out) if isinstance(out, bool) else out
    if isinstance(e, E.Not):
        return not evaluate(e.a, env)
    if isinstance(e, E.Select):
        c = evaluate(e.condition, env)
        return evaluate(e.true_value if c else e.false_value, env)
    if isinstance(e, E.Call) and e.op == "if_then_else":
        c = evaluate(e.args[0], env)
        return evaluate(e.args[1] if c else e.args[2], env)
    if isinstance(e, E.Cast):
        return evaluate(e.value, env)
    raise NotImplementedError(type(e).__name__)


@pytest.fixture
def evaluate_fn():
    return evaluate
