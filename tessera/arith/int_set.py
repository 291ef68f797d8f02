"""Symbolic integer intervals and the set of values an expression takes over variable domains.

An `IntSet` is a closed interval [min_value, max_value] of tir expressions; None stands for
-inf / +inf. `eval_set` (used by `Analyzer.int_set`, i.e. bound inference) finds a sound interval
holding every value of an expression when each variable of `dom_map` ranges over its set; other
variables are symbols. Monotone operators map endpoints to endpoints; when unsure the answer is
wider (down to the constant bounds, or everything), never wrong.

    eval_set(i*16 + j, {i: Range(0, 4), j: Range(0, 16)})   ->  [0, 63]
    eval_set(y + dy, {dy: IntSet.interval(0, 2)})            ->  [y, y + 2]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tessera.tir import expr as E


def _fresh_analyzer(analyzer):
    if analyzer is not None:
        return analyzer
    from tessera.arith.analyzer import Analyzer

    return Analyzer()


@dataclass(frozen=True)
class IntSet:
    """The closed interval [min_value, max_value]; a None end is unbounded."""

    min_value: E.Expr | None
    max_value: E.Expr | None

    @staticmethod
    def single_point(e) -> IntSet:
        e = E.convert(e)
        return IntSet(e, e)

    @staticmethod
    def from_range(r: E.Range) -> IntSet:
        """[min, min + extent - 1] of the half-open range [min, min + extent)."""
        if not isinstance(r, E.Range):
            raise TypeError(f"IntSet.from_range needs a tir.Range, got {type(r).__name__}")
        hi = (
            r.min
            if isinstance(r.extent, E.IntImm) and r.extent.value == 1
            else r.min + r.extent - 1
        )
        return IntSet(r.min, hi)

    @staticmethod
    def interval(lo, hi) -> IntSet:
        return IntSet(None if lo is None else E.convert(lo), None if hi is None else E.convert(hi))

    @staticmethod
    def everything() -> IntSet:
        return IntSet(None, None)

    def is_everything(self) -> bool:
        return self.min_value is None and self.max_value is None

    def is_single_point(self) -> bool:
        return (
            self.min_value is not None
            and self.max_value is not None
            and self.min_value.same_as(self.max_value)
        )

    def union(self, other: IntSet, analyzer=None) -> IntSet:
        an = _fresh_analyzer(analyzer)
        lo = _combine(E.Min, self.min_value, other.min_value, an)
        hi = _combine(E.Max, self.max_value, other.max_value, an)
        return IntSet(lo, hi)

    def intersect(self, other: IntSet, analyzer=None) -> IntSet:
        an = _fresh_analyzer(analyzer)
        lo = _pick(E.Max, self.min_value, other.min_value, an)
        hi = _pick(E.Min, self.max_value, other.max_value, an)
        return IntSet(lo, hi)

    def to_range(self, analyzer=None) -> E.Range:
        """The half-open Range [min, max + 1): extent = max - min + 1, simplified."""
        if self.min_value is None or self.max_value is None:
            raise ValueError(f"cannot make a Range of the unbounded set {self}")
        an = _fresh_analyzer(analyzer)
        return E.Range(self.min_value, an.simplify(self.max_value - self.min_value + 1))

    def __str__(self) -> str:
        lo = "-inf" if self.min_value is None else str(self.min_value)
        hi = "+inf" if self.max_value is None else str(self.max_value)
        return f"[{lo}, {hi}]"


def _combine(cls, a, b, an):
    """min/max of two ends for a union: an unbounded end wins."""
    if a is None or b is None:
        return None
    return an.simplify(cls(*E._promote(a, b)))


def _pick(cls, a, b, an):
    """min/max of two ends for an intersection: a bounded end wins."""
    if a is None:
        return b
    if b is None:
        return a
    return an.simplify(cls(*E._promote(a, b)))


def to_int_set(value) -> IntSet:
    """An IntSet from an IntSet, a Range, a pair (lo, hi) meaning [lo, hi) like range() and
    Analyzer.bind, or a single value."""
    if isinstance(value, IntSet):
        return value
    if isinstance(value, E.Range):
        return IntSet.from_range(value)
    if isinstance(value, tuple) and len(value) == 2:
        lo, hi = E.convert(value[0]), E.convert(value[1])
        return IntSet(lo, hi - 1)
    if isinstance(value, E.Expr | int):
        return IntSet.single_point(value)
    raise TypeError(f"cannot make an IntSet of {value!r} (expected IntSet, Range or (lo, hi))")


def eval_set(e: E.Expr, dom_map: dict, analyzer, relax_bound_vars: bool = False) -> IntSet:
    """The interval of values e takes as each var of dom_map (Var -> IntSet) ranges over its set."""
    inner = analyzer.copy()
    for var, s in dom_map.items():
        inner.bind(var, s)
    e = inner.simplify(e)
    out = _SetEval(dom_map, inner, analyzer if relax_bound_vars else None).visit(e)
    lo = None if out.min_value is None else analyzer.simplify(out.min_value)
    hi = None if out.max_value is None else analyzer.simplify(out.max_value)
    return IntSet(lo, hi)


def _add(a, b):
    return None if a is None or b is None else a + b


def _neg_end(a):
    return None if a is None else E.IntImm(0, a.dtype) - a


class _SetEval:
    """Interval evaluation. Ends are Exprs or None; dom vars never appear in an end."""

    def __init__(self, dom_map: dict, analyzer, relax_from=None):
        self.dom = dom_map
        self.an = analyzer  # has the dom vars bound: used for signs and constant fallbacks
        self.relax_from = relax_from

    def visit(self, e: E.Expr) -> IntSet:
        fn = getattr(self, f"visit_{type(e).__name__}", None)
        if fn is None or (e.dtype.is_float):
            return self.opaque(e)
        return fn(e)

    def opaque(self, e: E.Expr) -> IntSet:
        """e unchanged when no dom var occurs in it, else what its constant bounds say."""
        from tessera.tir.stmt_functor import free_vars

        if not any(v in self.dom for v in free_vars(e)) and not self._relaxes(e):
            return IntSet.single_point(e)
        return self.const_set(e)

    def _relaxes(self, e) -> bool:
        if self.relax_from is None:
            return False
        from tessera.tir.stmt_functor import free_vars

        return any(v in self.relax_from._ranges for v in free_vars(e))

    def const_set(self, e: E.Expr) -> IntSet:
        lo, hi = self.an.const_int_bound(e)
        return IntSet(
            None if math.isinf(lo) else E.IntImm(int(lo), e.dtype),
            None if math.isinf(hi) else E.IntImm(int(hi), e.dtype),
        )

    def visit_IntImm(self, e):
        return IntSet.single_point(e)

    def visit_Var(self, v):
        if v in self.dom:
            return self.dom[v]
        if self.relax_from is not None and v in self.relax_from._ranges:
            return self.relax_from._ranges[v]
        return IntSet.single_point(v)

    def visit_Add(self, e):
        a, b = self.visit(e.a), self.visit(e.b)
        return IntSet(_add(a.min_value, b.min_value), _add(a.max_value, b.max_value))

    def visit_Sub(self, e):
        a, b = self.visit(e.a), self.visit(e.b)
        return IntSet(
            _add(a.min_value, _neg_end(b.max_value)), _add(a.max_value, _neg_end(b.min_value))
        )

    def _sign(self, e) -> int:
        """1 if e >= 0 always, -1 if e <= 0 always, else 0."""
        lo, hi = self.an.const_int_bound(e)
        return 1 if lo >= 0 else -1 if hi <= 0 else 0

    def visit_Mul(self, e):
        a, b = self.visit(e.a), self.visit(e.b)
        if a.is_single_point() and b.is_single_point():
            return IntSet.single_point(a.min_value * b.min_value)
        if a.is_single_point():
            a, b = b, a
        if b.is_single_point():
            k = b.min_value
            sign = self._sign(k)
            if sign > 0:
                return IntSet(_scale(a.min_value, k), _scale(a.max_value, k))
            if sign < 0:
                return IntSet(_scale(a.max_value, k), _scale(a.min_value, k))
        return self.const_set(e)

    def _divide(self, e, op):
        a, b = self.visit(e.a), self.visit(e.b)
        if a.is_single_point() and b.is_single_point():
            return IntSet.single_point(op(a.min_value, b.min_value))
        if b.is_single_point():
            k = b.min_value
            lo, hi = self.an.const_int_bound(k)
            # floor and truncating division are monotone in the numerator for a fixed divisor
            if lo > 0:
                return IntSet(_apply(op, a.min_value, k), _apply(op, a.max_value, k))
            if hi < 0:
                return IntSet(_apply(op, a.max_value, k), _apply(op, a.min_value, k))
        return self.const_set(e)

    def visit_FloorDiv(self, e):
        return self._divide(e, lambda x, y: E.FloorDiv(x, y))

    def visit_Div(self, e):
        return self._divide(e, lambda x, y: E.Div(x, y))

    def visit_FloorMod(self, e):
        a, b = self.visit(e.a), self.visit(e.b)
        if a.is_single_point() and b.is_single_point():
            return IntSet.single_point(E.FloorMod(a.min_value, b.min_value))
        if b.is_single_point() and self.an.const_int_bound(b.min_value)[0] > 0:
            k = b.min_value
            if a.min_value is not None and a.max_value is not None:
                periods = self.an.simplify(E.FloorDiv(a.max_value, k) - E.FloorDiv(a.min_value, k))
                if isinstance(periods, E.IntImm) and periods.value == 0:
                    return IntSet(E.FloorMod(a.min_value, k), E.FloorMod(a.max_value, k))
            const = self.const_set(e)  # may be tighter, e.g. x in [0, 5] mod 8 -> [0, 5]
            lo = E.IntImm(0, e.dtype) if const.min_value is None else const.min_value
            return IntSet(lo, k - 1 if const.max_value is None else const.max_value)
        return self.const_set(e)

    def visit_Mod(self, e):
        a = self.visit(e.a)
        if a.min_value is not None and self.an.can_prove(a.min_value >= 0):
            return self.visit_FloorMod(E.FloorMod(e.a, e.b))
        return self.const_set(e)

    def _min_max(self, e, cls):
        a, b = self.visit(e.a), self.visit(e.b)
        # min and max are monotone in both operands: apply them to each end
        lo = _end(cls, a.min_value, b.min_value, none_wins=cls is E.Min)
        hi = _end(cls, a.max_value, b.max_value, none_wins=cls is E.Max)
        return IntSet(lo, hi)

    def visit_Min(self, e):
        return self._min_max(e, E.Min)

    def visit_Max(self, e):
        return self._min_max(e, E.Max)

    def visit_Select(self, e):
        t, f = self.visit(e.true_value), self.visit(e.false_value)
        if t.is_single_point() and f.is_single_point() and not self._mentions_dom(e.condition):
            return IntSet.single_point(E.Select(e.condition, t.min_value, f.min_value))
        return t.union(f, self.an)

    def _mentions_dom(self, e) -> bool:
        from tessera.tir.stmt_functor import free_vars

        return any(v in self.dom for v in free_vars(e))

    def visit_Call(self, e):
        if e.op == "if_then_else":
            return self.visit_Select(E.Select(*e.args))
        return self.opaque(e)

    def visit_Cast(self, e):
        a = self.visit(e.value)
        if a.is_single_point():
            return IntSet.single_point(E.Cast(e.dtype, a.min_value))
        return self.const_set(e)

    def visit_Ramp(self, e):
        offsets = self.visit(E.Mul(e.stride, E.IntImm(e.lanes - 1, e.stride.dtype)))
        base = self.visit(e.base)
        zero = IntSet.single_point(E.IntImm(0, e.base.dtype))
        span = zero.union(offsets, self.an)
        return IntSet(_add(base.min_value, span.min_value), _add(base.max_value, span.max_value))

    def visit_Broadcast(self, e):
        return self.visit(e.value)

    def visit_Let(self, e):
        from tessera.tir.stmt_functor import substitute

        return self.visit(substitute(e.body, {e.var: e.value}))


def _scale(end, k):
    return None if end is None else end * k


def _apply(op, end, k):
    return None if end is None else op(end, k)


def _end(cls, a, b, none_wins: bool):
    if a is None or b is None:
        return None if none_wins else (b if a is None else a)
    return cls(a, b)
