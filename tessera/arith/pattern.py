"""Patterns written in the expression language, a matcher, and rewrite rules.

A pattern is an ordinary tir expression with holes: `Wild("x")` matches any expression (the
same one wherever "x" repeats), `WildConst("c1")` matches an integer constant, and a constant in a
pattern matches a constant of that value (of the operand's dtype). A `Rule` pairs a pattern with
a replacement — an expression with the same wilds, a constant, or a function of the matched
values (called with them as keyword arguments; a parameter named `analyzer` receives the
analyzer) — and an optional side condition written the same way.

    x, c1, c2 = Wild("x"), WildConst("c1"), WildConst("c2")
    Rule(floordiv(floordiv(x, c1), c2), lambda x, c1, c2: floordiv(x, c1.value * c2.value),
         when=lambda c1, c2: c1.value > 0 and c2.value > 0)
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass

from tessera.ir.dtype import DType, int32
from tessera.ir.node import Node, field_names
from tessera.tir import expr as E


@dataclass(frozen=True, eq=False)
class Wild(E.Expr):
    """A hole in a pattern that matches any expression."""

    name: str
    dtype: DType = int32
    is_leaf = True

    def __post_init__(self):
        object.__setattr__(self, "dtype", DType.parse(self.dtype))


class WildConst(Wild):
    """A hole that matches an integer constant (bound to the IntImm)."""


def match(pattern, e, binds: dict) -> bool:
    """Match e against pattern, extending binds (name -> Expr). False leaves binds unspecified."""
    if isinstance(pattern, Wild):
        if isinstance(pattern, WildConst) and not isinstance(e, E.IntImm):
            return False
        seen = binds.get(pattern.name)
        if seen is not None:
            return seen.same_as(e)
        binds[pattern.name] = e
        return True
    if isinstance(pattern, E.IntImm):
        return isinstance(e, E.IntImm) and e.value == pattern.value
    if type(pattern) is not type(e):
        return False
    if isinstance(pattern, Node) and pattern.is_leaf:
        return pattern is e
    for name in field_names(type(pattern)):
        p, v = getattr(pattern, name), getattr(e, name)
        if isinstance(p, Node):
            if not match(p, v, binds):
                return False
        elif isinstance(p, tuple):
            if not isinstance(v, tuple) or len(p) != len(v):
                return False
            if not all(match(a, b, binds) for a, b in zip(p, v, strict=True)):
                return False
        elif p != v:
            return False
    return True


def instantiate(template, binds: dict) -> E.Expr:
    """The template with each wild replaced by its binding (constants take the operands' dtype)."""
    if isinstance(template, Wild):
        return binds[template.name]
    if isinstance(template, E.BinaryOp | E.CmpOp):
        # _binary promotes the template's int32 constants to the bound operands' dtype
        return E._binary(
            type(template), instantiate(template.a, binds), instantiate(template.b, binds)
        )
    if not isinstance(template, Node) or template.is_leaf or isinstance(template, E.IntImm):
        return template
    changed = {n: instantiate(getattr(template, n), binds) for n in field_names(type(template))}
    return type(template)(**changed)


def _params(fn) -> tuple[str, ...] | None:
    if not callable(fn) or isinstance(fn, E.Expr):
        return None
    return tuple(inspect.signature(fn).parameters)


@dataclass(frozen=True, eq=False)
class Rule:
    pattern: E.Expr
    replacement: object  # Expr template | int | bool | Callable[..., Expr]
    when: Callable | None = None

    def __post_init__(self):
        object.__setattr__(self, "_repl_params", _params(self.replacement))
        object.__setattr__(self, "_when_params", _params(self.when))

    def apply(self, e: E.Expr, analyzer) -> E.Expr | None:
        """The rewritten expression, or None when the rule does not apply to e."""
        binds: dict = {}
        if not match(self.pattern, e, binds):
            return None
        if self.when is not None and not self.when(**_args(self._when_params, binds, analyzer)):
            return None
        if self._repl_params is not None:
            out = self.replacement(**_args(self._repl_params, binds, analyzer))
        else:
            out = instantiate(self.replacement, binds)
        if out is None:
            return None
        return _typed(out, e.dtype)


def _args(names, binds, analyzer) -> dict:
    return {n: (analyzer if n == "analyzer" else binds[n]) for n in names}


def _typed(out, dtype: DType) -> E.Expr:
    if isinstance(out, bool | int):
        return E.const(out, dtype)
    if isinstance(out, E.IntImm) and out.dtype != dtype:
        return E.const(out.value, dtype)
    return out


def rule_table(rules: list[Rule]) -> dict[type, list[Rule]]:
    """Index rules by the node type at the root of their pattern."""
    table: dict[type, list[Rule]] = {}
    for r in rules:
        table.setdefault(type(r.pattern), []).append(r)
    return table


def rewrite(table: dict[type, list[Rule]], e: E.Expr, analyzer) -> E.Expr | None:
    """The result of the first rule of the table that applies to e, or None."""
    for rule in table.get(type(e), ()):
        out = rule.apply(e, analyzer)
        if out is not None:
            return out
    return None
