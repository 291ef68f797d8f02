"""The expression simplifier: rule tables + the canonical linear form + bounds, to a fixpoint.

Children are simplified first; then the node is rewritten by, in order, constant folding, the rule
table of its type (`rules.py`), and for integer scalars the linear form (`canonical.py`) and the
bounds of the analyzer (`bound.py`). A rewritten node is simplified again, at most MAX_STEPS
times. Only integer and boolean algebra is rewritten; float expressions are constant-folded only.

    an.bind(i, Range(0, 16)); an.bind(j, Range(0, 16))
    Simplifier(an).visit(floordiv(i*16 + j, 16))      ->  i
    Simplifier(an).visit(i < 16)                      ->  True
"""

from __future__ import annotations

import math

import numpy as np

from tessera.arith import bound as B
from tessera.arith.canonical import Linear, build, expand_floordiv, fold_fuse_identity, linearize
from tessera.arith.pattern import rewrite, rule_table
from tessera.arith.rules import BOOL_RULES, INT_RULES, SELECT_RULES
from tessera.ir.dtype import DType
from tessera.ir.node import Mutator
from tessera.tir import expr as E

MAX_STEPS = 8
_SELECT_TABLE = rule_table(SELECT_RULES)


def _int_const(value: int, dt: DType) -> E.IntImm:
    return E.IntImm(value, dt)  # IntImm wraps the value into dt


def _float_const(value: float, dt: DType) -> E.Expr | None:
    if dt.code != "float":
        return None  # bfloat16: no numpy type to round through
    return E.FloatImm(float(np.array(value, dtype=str(dt))), dt)


_INT_FOLD = {
    E.Add: lambda a, b: a + b,
    E.Sub: lambda a, b: a - b,
    E.Mul: lambda a, b: a * b,
    E.FloorDiv: lambda a, b: a // b if b else None,
    E.FloorMod: lambda a, b: a % b if b else None,
    E.Div: lambda a, b: B.truncdiv_int(a, b) if b else None,
    E.Mod: lambda a, b: B.truncmod_int(a, b) if b else None,
    E.Min: min,
    E.Max: max,
}
_FLOAT_FOLD = {
    E.Add: lambda a, b: a + b,
    E.Sub: lambda a, b: a - b,
    E.Mul: lambda a, b: a * b,
    E.Div: lambda a, b: a / b if b else None,
    # NaN in either operand gives NaN, as in the generated code (Python's min/max do not)
    E.Min: lambda a, b: a if a < b or a != a else b,
    E.Max: lambda a, b: a if a > b or a != a else b,
}
# nodes whose value may be pinned by the bounds of their operands alone
_FOLD_BY_BOUND = {E.Var, E.FloorDiv, E.FloorMod, E.Div, E.Mod, E.Min, E.Max, E.Select, E.Cast}

_CMP_FOLD = {
    E.LT: lambda a, b: a < b,
    E.LE: lambda a, b: a <= b,
    E.GT: lambda a, b: a > b,
    E.GE: lambda a, b: a >= b,
    E.EQ: lambda a, b: a == b,
    E.NE: lambda a, b: a != b,
}


def fold_constants(e: E.Expr) -> E.Expr | None:
    """The value of an operator applied to constants, or None."""
    a, b = getattr(e, "a", None), getattr(e, "b", None)
    if isinstance(a, E.IntImm) and isinstance(b, E.IntImm):
        if isinstance(e, E.CmpOp):
            return E.const(_CMP_FOLD[type(e)](a.value, b.value), e.dtype)
        if isinstance(e, E.And | E.Or):
            v = (a.value and b.value) if isinstance(e, E.And) else (a.value or b.value)
            return E.const(bool(v), e.dtype)
        fn = _INT_FOLD.get(type(e))
        v = fn(a.value, b.value) if fn else None
        return None if v is None else _int_const(v, e.dtype)
    if isinstance(a, E.FloatImm) and isinstance(b, E.FloatImm):
        if isinstance(e, E.CmpOp):
            return E.const(_CMP_FOLD[type(e)](a.value, b.value), e.dtype)
        fn = _FLOAT_FOLD.get(type(e))
        v = fn(a.value, b.value) if fn else None
        return None if v is None else _float_const(v, e.dtype)
    if isinstance(e, E.Not) and isinstance(a, E.IntImm):
        return E.const(not a.value, e.dtype)
    return None


def linear_bound(lin: Linear, analyzer) -> B.Bound:
    out: B.Bound = (lin.const, lin.const)
    for term, coeff in lin.terms.items():
        out = B.add(out, B.mul(B.const_int_bound(term, analyzer), (coeff, coeff)))
    return out


def _is_signed_scalar(dt: DType) -> bool:
    return dt.is_int and dt.lanes == 1


class Simplifier(Mutator):
    """Simplify expressions under an analyzer's variable ranges (one instance per call)."""

    def __init__(self, analyzer):
        self.analyzer = analyzer
        # shared by the calls while nothing is bound anew (Note [analyzer memo] in analyzer.py)
        self.memo: dict = analyzer._memo[1 if analyzer._symbolic_busy else 0]

    def visit(self, node):
        if not isinstance(node, E.Expr):
            return super().visit(node)
        if isinstance(node, E.IntImm | E.FloatImm | E.StringImm):
            return node
        hit = self.memo.get(node)
        if hit is not None:
            return hit
        out = node
        for _ in range(MAX_STEPS):
            new = self._local(super().visit(out))
            if new is out:
                break
            out = new
        self.memo[node] = out
        self.memo[out] = out
        return out

    def visit_Var(self, v: E.Var):
        value = self.analyzer._values.get(v)
        return v if value is None else self.visit(value)

    # -- one rewrite of a node whose children are simplified -----------------------------------

    def _local(self, e: E.Expr) -> E.Expr:
        folded = fold_constants(e)
        if folded is not None:
            return folded
        fn = getattr(self, f"_local_{type(e).__name__}", None)
        out = fn(e) if fn is not None else None
        if out is None and type(e) in _FOLD_BY_BOUND and _is_signed_scalar(e.dtype):
            lo, hi = B.const_int_bound(e, self.analyzer)
            out = E.IntImm(int(lo), e.dtype) if lo == hi else None
        return e if out is None or out.same_as(e) else out

    def _int_rules(self, e: E.Expr) -> E.Expr | None:
        return rewrite(INT_RULES, e, self.analyzer)

    def _linear(self, e: E.Expr) -> E.Expr | None:
        lin = linearize(e)
        fold_fuse_identity(lin)
        return build(lin)

    def _arith(self, e: E.BinaryOp) -> E.Expr | None:
        dt = e.dtype
        if dt.lanes > 1:
            return _vector_arith(e)
        if not _is_signed_scalar(dt):
            return None  # unsigned wraps around: constant folding only
        out = self._int_rules(e)
        return out if out is not None else self._linear(e)

    _local_Add = _local_Sub = _local_Mul = _arith

    def _local_Div(self, e: E.Div) -> E.Expr | None:
        return self._trunc(e, E.FloorDiv)

    def _local_Mod(self, e: E.Mod) -> E.Expr | None:
        return self._trunc(e, E.FloorMod)

    def _trunc(self, e, floor_cls) -> E.Expr | None:
        if not _is_signed_scalar(e.dtype) or not isinstance(e.b, E.IntImm):
            return None
        # truncation and floor agree on a non-negative numerator and a positive divisor
        if e.b.value > 0 and B.const_int_bound(e.a, self.analyzer)[0] >= 0:
            return floor_cls(e.a, e.b)
        if e.b.value == 1:
            return e.a if floor_cls is E.FloorDiv else E.IntImm(0, e.dtype)
        return None

    def _local_FloorDiv(self, e: E.FloorDiv) -> E.Expr | None:
        if e.dtype.lanes > 1:
            out = _vector_arith(e)
            return out if out is not None else self._ramp_division(e)
        if not _is_signed_scalar(e.dtype):
            return None
        out = self._int_rules(e)
        return out if out is not None else self._split_division(e)

    _local_FloorMod = _local_FloorDiv

    def _ramp_division(self, e) -> E.Expr | None:
        """Note [ramp division]: floordiv/floormod(Ramp(b, s, L), Broadcast(c)) whose lanes stay
        in one period of c for every b: Broadcast(floordiv(b, c)) / Ramp(floormod(b, c), s, L).
        b's modular set (coeff, base) puts b mod c at base mod g + a multiple of g, g =
        gcd(coeff, c), so at most c - g + base mod g; the last lane adds s*(L - 1)."""
        a, b = e.a, e.b
        if not (isinstance(a, E.Ramp) and isinstance(b, E.Broadcast)):
            return None
        c, stride = b.value, a.stride
        if not (isinstance(c, E.IntImm) and c.value > 0 and isinstance(stride, E.IntImm)):
            return None
        if stride.value < 0 or not _is_signed_scalar(a.base.dtype):
            return None
        coeff, base = self.analyzer.modular_set(a.base)
        g = math.gcd(coeff, c.value)  # coeff 0 (a constant base): g = c
        if base % g + stride.value * (a.lanes - 1) >= g:
            return None
        if isinstance(e, E.FloorDiv):
            return E.Broadcast(E.FloorDiv(a.base, c), a.lanes)
        return E.Ramp(E.FloorMod(a.base, c), stride, a.lanes)

    def _split_division(self, e) -> E.Expr | None:
        """floordiv/floormod(c*q + r, c): take the multiples of c out; decide r by its bound."""
        if not isinstance(e.b, E.IntImm) or e.b.value <= 0:
            return None
        c, dt = e.b.value, e.dtype
        lin = linearize(e.a)
        whole, rest = Linear(dt), Linear(dt, const=lin.const)
        for term, coeff in lin.terms.items():
            if coeff % c == 0:
                whole.add_term(term, coeff // c)
            else:
                rest.add_term(term, coeff)
        if rest.const % c == 0 and rest.terms:
            whole.const, rest.const = rest.const // c, 0
        lo, hi = linear_bound(rest, self.analyzer)
        same_period = not math.isinf(lo) and not math.isinf(hi) and lo // c == hi // c
        if isinstance(e, E.FloorDiv):
            if same_period:
                return build(whole.add(Linear(dt, const=int(lo) // c)))
            if not whole.terms and not whole.const:
                return None
            whole.add_term(E.FloorDiv(build(rest), e.b), 1)
            return build(whole)
        if same_period:
            return build(rest.add(Linear(dt, const=-(int(lo) // c) * c)))
        return E.FloorMod(build(rest), e.b) if whole.terms or whole.const else None

    def _min_max(self, e) -> E.Expr | None:
        if e.dtype.lanes > 1:
            out = _vector_arith(e)
            return out if out is not None else self._ramp_min_max(e)
        if not _is_signed_scalar(e.dtype):
            return None
        out = self._int_rules(e)
        if out is not None:
            return out
        lo, hi = self._diff_bound(e.a, e.b)
        a_first = hi <= 0 if isinstance(e, E.Min) else lo >= 0
        b_first = lo >= 0 if isinstance(e, E.Min) else hi <= 0
        return e.a if a_first else e.b if b_first else None

    _local_Min = _local_Max = _min_max

    def _ramp_min_max(self, e) -> E.Expr | None:
        """min(Ramp, Broadcast(x)) is the ramp where every lane is <= x (a clamped vector index
        in the main part of a split: Note [clamped tails] in te/lower.py); max alike."""
        a, b = e.a, e.b
        if not (isinstance(a, E.Ramp) and isinstance(b, E.Broadcast)):
            return None
        if not _is_signed_scalar(a.base.dtype) or not isinstance(a.stride, E.IntImm):
            return None
        last = a.base + a.stride * (a.lanes - 1)
        lo, hi = (a.base, last) if a.stride.value >= 0 else (last, a.base)
        if isinstance(e, E.Min) and self.analyzer.can_prove(hi <= b.value):
            return a
        if isinstance(e, E.Max) and self.analyzer.can_prove(lo >= b.value):
            return a
        return None

    def _diff(self, a, b) -> Linear:
        lin = linearize(a).add(linearize(b), -1)
        fold_fuse_identity(lin)
        return lin

    def _diff_bound(self, a, b) -> B.Bound:
        return self._sign_bound(self._diff(a, b))

    def _sign_bound(self, lin: Linear) -> B.Bound:
        """Bounds of lin, tight enough to tell its sign where we can (Note [symbolic ranges])."""
        d = linear_bound(lin, self.analyzer)
        if d[0] == d[1] or not d[0] <= 0 <= d[1]:
            return d
        expanded = lin.copy()
        if expand_floordiv(expanded):
            d = B.intersect(d, linear_bound(expanded, self.analyzer))
            if d[0] == d[1] or not d[0] <= 0 <= d[1]:
                return d
        sym = self._symbolic_bound(lin)
        return d if sym is None else B.intersect(d, sym)

    # Note [symbolic ranges]
    # With i in [0, n - 1] and n in [1, 64], interval arithmetic on constants cannot show
    # i - n < 0. Relaxing i over its symbolic range first gives [-n, -1], whose constant upper
    # bound is -1. This runs only when the constant bound cannot decide, only one level deep
    # (the analyzer is marked busy meanwhile), and only for vars with a non-constant range.

    def _symbolic_bound(self, lin: Linear) -> B.Bound | None:
        from tessera.arith.int_set import eval_set
        from tessera.tir.stmt_functor import free_vars

        an = self.analyzer
        if an._symbolic_busy or not an._ranges:
            return None
        e = build(lin)
        dom = {}
        for v in free_vars(e):
            s = an._ranges.get(v)
            if s is not None and not _is_const_set(s):
                dom[v] = s
        if not dom:
            return None
        hit = an._symbolic_memo.get(e)  # Note [analyzer memo] in analyzer.py
        if hit is not None:
            return hit
        an._symbolic_busy = True
        try:
            s = eval_set(e, dom, an)
        finally:
            an._symbolic_busy = False
        lo = -B.INF if s.min_value is None else _expanded_bound(s.min_value, an)[0]
        hi = B.INF if s.max_value is None else _expanded_bound(s.max_value, an)[1]
        an._symbolic_memo[e] = (lo, hi)
        return (lo, hi)

    def _compare(self, e: E.CmpOp) -> E.Expr | None:
        odt = e.a.dtype
        if odt.lanes > 1:
            return _vector_arith(e)
        if odt.is_bool:
            return rewrite(BOOL_RULES, e, self.analyzer)
        if not _is_signed_scalar(odt):
            return None
        out = self._int_rules(e)
        if out is not None:
            return out
        out = self._symbolic_divisor(e)
        if out is not None:
            return out
        return self._decide_or_normalize(e)

    def _symbolic_divisor(self, e: E.CmpOp) -> E.Expr | None:
        """By a divisor d the analyzer proves positive (a symbolic dim: te's Note [shape vars
        are positive]): floordiv(x, d) < z <=> x < d*z, z <= floordiv(x, d) <=> d*z <= x
        (z < floordiv(x, d) <=> d*(z + 1) <= x), floormod(x, d) < d. A fused loop over
        (12, n) then proves floordiv(f, n) < 12."""
        a, b = e.a, e.b
        if isinstance(e, E.LT) and isinstance(a, E.FloorDiv | E.FloorMod):
            d = a.b
            if isinstance(a, E.FloorMod):
                if isinstance(d, E.IntImm) or not self._divisor_positive(d):
                    return None
                return E.const(True, e.dtype) if d.same_as(b) else None
            if not self._positive_divisor(d, b):
                return None
            return E.LT(a.a, d * b)
        if isinstance(e, E.LE | E.LT) and isinstance(b, E.FloorDiv):
            d = b.b
            if isinstance(d, E.IntImm) or not self._divisor_positive(d):
                return None
            return E.LE(d * (a if isinstance(e, E.LE) else a + 1), b.a)
        return None

    def _positive_divisor(self, d, bound) -> bool:
        """Whether `floordiv(x, d) < bound` may become `x < d*bound`: d is a symbolic divisor
        proved positive, or a positive constant under a symbolic bound (the rules take a
        constant one): floordiv(floordiv(f, seq), 4) < batch, the guard of a loop fused over
        (batch, 4, seq), is f < seq*4*batch, which the loop's extent proves."""
        if isinstance(d, E.IntImm):
            return d.value > 0 and not isinstance(bound, E.IntImm)
        return self._divisor_positive(d)

    def _divisor_positive(self, d) -> bool:
        """Note [divisor not zero]: a symbolic divisor proved >= 0 is > 0 wherever the division
        is defined. The tir passes know shape vars only as >= 0 (a dim of 0 empties the loops
        over it), so a guard floordiv(r, seq) < batch of a tile fused over (batch, seq) was kept
        (a division per row per tile), although every place it runs has seq >= 1: the rewrite
        x < seq*batch agrees with the division wherever the division does not trap."""
        return self.analyzer.can_prove(d >= 0)

    _local_LT = _local_LE = _local_GT = _local_GE = _local_EQ = _local_NE = _compare

    def _decide_or_normalize(self, e: E.CmpOp) -> E.Expr:
        lin = self._diff(e.a, e.b)  # e is `lin OP 0`
        d = self._sign_bound(lin)
        verdict = _decide(type(e), d)
        if verdict is None and isinstance(e, E.EQ | E.NE) and _never_zero(lin):
            verdict = isinstance(e, E.NE)
        if verdict is not None:
            return E.const(verdict, e.dtype)
        dt = lin.dtype
        pos = Linear(dt, {t: c for t, c in lin.terms.items() if c > 0})
        neg = Linear(dt, {t: -c for t, c in lin.terms.items() if c < 0})
        if not neg.terms:
            return type(e)(build(pos), E.IntImm(-lin.const, dt))
        if not pos.terms:
            return type(e)(E.IntImm(lin.const, dt), build(neg))
        neg.const = -lin.const
        return type(e)(build(pos), build(neg))

    def _logic(self, e) -> E.Expr | None:
        return rewrite(BOOL_RULES, e, self.analyzer)

    _local_And = _local_Or = _local_Not = _logic

    def _local_Select(self, e: E.Select) -> E.Expr | None:
        if isinstance(e.condition, E.IntImm):
            return e.true_value if e.condition.value else e.false_value
        return rewrite(_SELECT_TABLE, e, self.analyzer)

    def _local_Call(self, e: E.Call) -> E.Expr | None:
        if e.op == "if_then_else" and isinstance(e.args[0], E.IntImm):
            return e.args[1] if e.args[0].value else e.args[2]
        if e.op == "if_then_else" and e.args[1].same_as(e.args[2]):
            return e.args[1]
        if e.op == "likely" and isinstance(e.args[0], E.IntImm):
            return e.args[0]
        return None

    def _local_Cast(self, e: E.Cast) -> E.Expr | None:
        v, dt = e.value, e.dtype
        if v.dtype == dt:
            return v
        if dt.lanes > 1:
            # a widened index ramp stays a ramp (one contiguous vector access, not a gather):
            # the clamp of a symbolic tail's index, once the main part drops it
            el = dt.with_lanes(1)
            if isinstance(v, E.Ramp) and el.is_int and v.dtype.is_int and el.bits >= v.dtype.bits:
                return E.Ramp(E.Cast(el, v.base), E.Cast(el, v.stride), v.lanes)
            if isinstance(v, E.Broadcast):
                return E.Broadcast(E.Cast(el, v.value), v.lanes)
            return None
        if isinstance(v, E.IntImm | E.FloatImm):
            if dt.is_float:
                return _float_const(float(v.value), dt)
            if dt.is_bool:
                return E.const(bool(v.value), dt)
            if dt.is_integer and math.isfinite(v.value):
                return _int_const(math.trunc(v.value), dt)
        return None

    def _local_Ramp(self, e: E.Ramp) -> E.Expr | None:
        if isinstance(e.stride, E.IntImm) and e.stride.value == 0:
            return E.Broadcast(e.base, e.lanes)
        return None

    def _local_Let(self, e: E.Let) -> E.Expr | None:
        from tessera.tir.stmt_functor import substitute, uses_var

        if not uses_var(e.body, e.var):
            return e.body
        if isinstance(e.value, E.IntImm | E.FloatImm | E.Var):
            return substitute(e.body, {e.var: e.value})
        return None


def _decide(cls, d: B.Bound) -> bool | None:
    """The truth of `v OP 0` for every v in d, or None when it depends on v."""
    lo, hi = d
    table = {
        E.LT: (hi < 0, lo >= 0),
        E.LE: (hi <= 0, lo > 0),
        E.GT: (lo > 0, hi <= 0),
        E.GE: (lo >= 0, hi < 0),
        E.EQ: (lo == hi == 0, lo > 0 or hi < 0),
        E.NE: (lo > 0 or hi < 0, lo == hi == 0),
    }
    yes, no = table[cls]
    return True if yes else False if no else None


def _expanded_bound(e: E.Expr, an) -> B.Bound:
    """e's constant bounds, also after floordiv(x, c)*c becomes x - floormod(x, c) (the
    symbolic end of a split's main part, floordiv(n, 6)*6 - 1 - n, is then below 0)."""
    d = B.const_int_bound(e, an)
    if d[0] == d[1] or not (e.dtype.is_integer and e.dtype.lanes == 1):
        return d
    lin = linearize(e)
    if not expand_floordiv(lin):
        return d
    return B.intersect(d, B.const_int_bound(build(lin), an))


def _is_const_set(s) -> bool:
    return isinstance(s.min_value, E.IntImm) and isinstance(s.max_value, E.IntImm)


def _never_zero(lin: Linear) -> bool:
    """sum(c_i * t_i) + k is never 0 when gcd(c_i) does not divide k."""
    g = 0
    for c in lin.terms.values():
        g = math.gcd(g, c)
    return g > 1 and lin.const % g != 0


def _vector_arith(e) -> E.Expr | None:
    """Broadcast op Broadcast -> Broadcast; Ramp +- Broadcast and Ramp * Broadcast -> Ramp."""
    a, b = e.a, e.b
    cls = type(e)
    if isinstance(a, E.Broadcast) and isinstance(b, E.Broadcast) and a.lanes == b.lanes:
        return E.Broadcast(cls(a.value, b.value), a.lanes)
    if cls in (E.Add, E.Sub) and isinstance(a, E.Ramp) and isinstance(b, E.Broadcast):
        return E.Ramp(cls(a.base, b.value), a.stride, a.lanes)
    if cls is E.Add and isinstance(a, E.Broadcast) and isinstance(b, E.Ramp):
        return E.Ramp(E.Add(a.value, b.base), b.stride, b.lanes)
    if cls in (E.Add, E.Sub) and isinstance(a, E.Ramp) and isinstance(b, E.Ramp):
        return E.Ramp(cls(a.base, b.base), cls(a.stride, b.stride), a.lanes)
    if cls is E.Mul and isinstance(a, E.Ramp) and isinstance(b, E.Broadcast):
        return E.Ramp(E.Mul(a.base, b.value), E.Mul(a.stride, b.value), a.lanes)
    return None
