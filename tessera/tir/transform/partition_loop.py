"""Partition loops: peel the iterations where a `likely` guard may fail off the main loop.

    before:  for (io, 0, floordiv(n + 15, 16)) {
               for (ii, 0, 16) { if (likely(io*16 + ii < n)) { B[io*16 + ii] = A[io*16 + ii] } } }
    after:   for (io, 0, floordiv(n, 16)) {                              // main: no guard
               for (ii, 0, 16) { B[io*16 + ii] = A[io*16 + ii] } }
             for (io_1, floordiv(n, 16), floordiv(n + 15, 16) - floordiv(n, 16)) {   // tail
               for (ii_1, 0, 16) { if (likely(io_1*16 + ii_1 < n)) { ... } } }

For a loop `v`, every `IfThenElse(likely(c))` in its body is examined; each conjunct of c that is
affine in v (`a*v + rest < bound`, any of < <= > >=) and whose other variables are loop vars
inside v (ranging over their loops) or fixed outside v gives the interval of v where it holds for
every inner iteration. The intersection of those intervals is the main part: there the proven
conjuncts are dropped (the guard goes when none is left); the iterations before and after keep
the guard, with fresh loop and let variables. Loops are examined outermost first; then the loops
inside each part are examined for the guards left (a 2-D split peels its rows, then its columns;
in a one-iteration tail such as the last 8 of 40 columns tiled by 16, the inner guard `j < 8`
becomes constant and splits the inner loop into constant extents). Inside a peeled part, and
for a VECTORIZED or UNROLLED loop, a loop is only partitioned into constant extents; a
THREAD_BINDING loop never is, except that a SERIAL loop whose guards bound its var exactly is
cut to its main part, symbolic extent and all (Note [exact serial tails]). Symbolic shape
variables are assumed non-negative.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tessera.arith import Analyzer
from tessera.ir.node import Mutator
from tessera.ir.structural_equal import structural_equal
from tessera.tir.expr import GE, GT, LE, LT, And, Call, Expr, IntImm, Min, Range, Var
from tessera.tir.function import PrimFunc
from tessera.tir.op import likely
from tessera.tir.op import max as tmax
from tessera.tir.op import min as tmin
from tessera.tir.stmt import Allocate, AttrStmt, For, ForKind, IfThenElse, LetStmt, SeqStmt, seq
from tessera.tir.stmt_functor import free_vars, substitute
from tessera.tir.transform._util import copy_fresh

_INT32_MAX = (1 << 31) - 1


def partition_loop(func: PrimFunc) -> PrimFunc:
    """Split the loops of `func` around their likely guards (see the module docstring)."""
    return func.with_body(_Partition(shape_analyzer(func)).visit(func.body))


def shape_analyzer(func: PrimFunc) -> Analyzer:
    """An Analyzer that knows each symbolic shape variable of `func` is >= 0."""
    an = Analyzer()
    params = {id(p) for p in func.params}
    for v in func.scalar_vars():
        if id(v) not in params and v.dtype.is_integer:
            an.bind(v, Range.from_min_extent(0, _INT32_MAX))
    return an


@dataclass
class _Guard:
    stmt: IfThenElse
    conjuncts: list[Expr]
    usable: list[bool]  # False: the conjunct uses a let var or a loop var bounded by v
    domains: dict  # the loops between v and the guard: Var -> Range
    proven: list[bool]  # the conjuncts that hold in the main part


class _Partition(Mutator):
    def __init__(self, analyzer: Analyzer):
        self.an = analyzer
        # Inside a peeled part, split only into constant extents: a symbolic split of a tail
        # adds code (its last part never runs the guarded body) for little gain.
        self.constant_only = False

    def visit_For(self, node: For):
        pieces = None
        if node.kind is not ForKind.THREAD_BINDING:
            pieces = self._partition(node)
        if pieces is None:
            self.an.bind(node.loop_var, Range(node.min, node.extent))
            body = self.visit(node.body)
            self.an.unbind(node.loop_var)
            return node if body is node.body else replace(node, body=body)
        return pieces

    def _partition(self, loop: For):
        v = loop.loop_var
        guards = _collect_guards(loop.body, v)
        lo, hi = None, None
        exact = bool(guards)  # Note [exact serial tails]
        for g in guards:
            for k, c in enumerate(g.conjuncts):
                interval = _true_interval(self.an, c, v, g.domains) if g.usable[k] else None
                if interval is None:
                    exact = False
                    continue
                exact = exact and _exact(self.an, c, v, g.domains)
                g.proven[k] = True
                if interval[0] is not None:
                    lo = interval[0] if lo is None else tmax(lo, interval[0])
                if interval[1] is not None:
                    hi = interval[1] if hi is None else tmin(hi, interval[1])
        if not any(any(g.proven) for g in guards):
            return None
        return self._split(loop, guards, lo, hi, exact and _only_guarded(loop.body, guards))

    def _split(self, loop: For, guards, lo, hi, exact: bool = False):
        an, begin = self.an, loop.min
        end = an.simplify(loop.min + loop.extent)
        main_lo = begin if lo is None else an.simplify(tmin(tmax(lo, begin), end))
        main_hi = end if hi is None else an.simplify(tmax(tmin(hi, end), main_lo))
        extents = [an.simplify(e) for e in (main_lo - begin, main_hi - main_lo, end - main_hi)]
        if an.can_prove(extents[1] <= 0):
            return None  # the guards never hold for a whole inner iteration: nothing to gain
        symbolic = not all(isinstance(e, IntImm) for e in extents)
        tight = exact and symbolic and loop.kind is ForKind.SERIAL  # Note [exact serial tails]
        if (self.constant_only and not tight) or loop.kind in (
            ForKind.VECTORIZED,
            ForKind.UNROLLED,
        ):
            if symbolic:
                return None  # symbolic extents could not be vectorized or unrolled anyway
        main_body = _DropProven(guards).visit(loop.body)
        an.bind(loop.loop_var, Range(main_lo, extents[1]))
        main_body = self.visit(main_body)
        an.unbind(loop.loop_var)
        main = replace(loop, min=main_lo, extent=extents[1], body=main_body)
        if tight:  # the iterations outside the main part run no statement
            return main
        pre = self._peeled(loop, begin, extents[0])
        post = self._peeled(loop, main_hi, extents[2])
        return seq(pre, main, post)

    def _peeled(self, loop: For, start, extent):
        if _is_zero(extent) or (isinstance(extent, IntImm) and extent.value < 0):
            return None
        var = Var(loop.loop_var.name, loop.loop_var.dtype)
        body = copy_fresh(loop.body, {loop.loop_var: var})
        # A one-iteration tail binds its var to a value, so the guards of the loops inside
        # become constant and those loops can be split into constant extents (and vectorized).
        one = isinstance(extent, IntImm) and extent.value == 1
        self.an.bind(var, start if one else Range(start, extent))
        saved, self.constant_only = self.constant_only, True
        body = self.visit(body)
        self.an.unbind(var)
        self.constant_only = saved
        return replace(loop, loop_var=var, min=start, extent=extent, body=body)


# Note [exact serial tails]
# A tail peeled off a split of a symbolic extent keeps its guards: the K tail of a matrix
# product over a symbolic K (attention's p @ v, K = seq) is `for (ki, 0, 256) { if
# (likely(ko*256 + ki < seq)) acc += ... }`, and with seq below 256 every step of the product
# ran there, a compare and branch per multiply-add (4.6x a specialized kernel at seq 16).
# When every statement of a SERIAL loop's body sits under guards all of whose conjuncts bound
# the loop var alone (coefficient +-1, nothing else of the loops inside), the guards hold
# exactly on the main part and fail everywhere else: where the split has symbolic extents, the
# loop becomes its main part, with a symbolic extent (`max(min(seq - ko*256, 256), 0)`), and
# no guard, also inside a peeled part (a static split keeps its constant-extent parts).


def _exact(an: Analyzer, cond, v: Var, doms: dict) -> bool:
    """Whether `cond`, affine in v with coefficient +-1, depends on no var of doms: it then
    holds exactly on its interval (`_true_interval`), not only there."""
    if _uses_any(cond, {id(x) for x in doms}):
        return False
    a, b = cond.a, cond.b
    e = an.simplify(a - b)
    rest = an.simplify(substitute(e, {v: IntImm(0, v.dtype)}))
    coef = an.simplify(substitute(e, {v: IntImm(1, v.dtype)}) - rest)
    return isinstance(coef, IntImm) and abs(coef.value) == 1


def _only_guarded(body, guards) -> bool:
    """Whether every statement of body is inside one of `guards` without an else branch
    (loops, lets and allocations around them aside)."""
    ids = {id(g.stmt) for g in guards if g.stmt.else_case is None}

    def inside(s) -> bool:
        if id(s) in ids:
            return True
        if isinstance(s, SeqStmt):
            return all(inside(x) for x in s.seq)
        if isinstance(s, For | LetStmt | Allocate | AttrStmt):
            return inside(s.body)
        return False

    return inside(body)


def _is_zero(e) -> bool:
    return isinstance(e, IntImm) and e.value == 0


def _collect_guards(body, v: Var) -> list[_Guard]:
    """The likely-guarded IfThenElses of body, with the ranges of the loops around each."""
    out: list[_Guard] = []

    def walk(s, doms: dict, blocked: set):
        if isinstance(s, SeqStmt):
            for x in s.seq:
                walk(x, doms, blocked)
        elif isinstance(s, For):
            outside = blocked | {id(v)}
            ok = not (_uses_any(s.min, outside) or _uses_any(s.extent, outside))
            inner = {**doms, s.loop_var: Range(s.min, s.extent)} if ok else doms
            walk(s.body, inner, blocked if ok else blocked | {id(s.loop_var)})
        elif isinstance(s, LetStmt):
            walk(s.body, doms, blocked | {id(s.var)})
        elif isinstance(s, Allocate | AttrStmt):
            walk(s.body, doms, blocked)
        elif isinstance(s, IfThenElse):
            cond = s.condition
            if isinstance(cond, Call) and cond.op == "likely":
                parts = _conjuncts(cond.args[0])
                usable = [not _uses_any(c, blocked) for c in parts]
                out.append(_Guard(s, parts, usable, doms, [False] * len(parts)))
            walk(s.then_case, doms, blocked)
            if s.else_case is not None:
                walk(s.else_case, doms, blocked)

    walk(body, {}, set())
    return out


def _uses_any(e, ids: set) -> bool:
    return bool(ids) and any(id(x) in ids for x in free_vars(e))


def _conjuncts(c) -> list:
    if isinstance(c, And):
        return _conjuncts(c.a) + _conjuncts(c.b)
    return [c]


def _true_interval(an: Analyzer, cond, v: Var, doms: dict):
    """(lo, hi): cond holds for every value of the vars in doms when lo <= v < hi (None: open)."""
    if not isinstance(cond, LT | LE | GT | GE) or not cond.a.dtype.is_integer:
        return None
    if not any(x is v for x in free_vars(cond)):
        return None
    a, b = cond.a, cond.b
    # as e < 0
    e = {LT: a - b, LE: a - b - 1, GT: b - a, GE: b - a - 1}[type(cond)]
    rest = an.simplify(substitute(e, {v: IntImm(0, v.dtype)}))
    coef = an.simplify(substitute(e, {v: IntImm(1, v.dtype)}) - rest)
    if not isinstance(coef, IntImm) or coef.value == 0:
        return None
    linear = an.simplify(e - (coef * v + rest))
    if not _is_zero(linear) or any(x is v for x in free_vars(rest)):
        return None
    top = an.int_set(rest, doms).max_value
    if top is None:
        return None
    c = coef.value
    if c > 0:  # c*v + top < 0  <=>  v < ceil(-top / c)
        return None, an.simplify((c - 1 - top) // c)
    return an.simplify(top // -c + 1), None  # top < -c*v  <=>  v > top / -c


class _DropProven(Mutator):
    """Remove the conjuncts proven for the main part from their guards."""

    def __init__(self, guards):
        self.guards = {id(g.stmt): g for g in guards}

    def visit_IfThenElse(self, node: IfThenElse):
        then_case = self.visit(node.then_case)
        else_case = None if node.else_case is None else self.visit(node.else_case)
        g = self.guards.get(id(node))
        if g is None or not any(g.proven):
            if then_case is node.then_case and else_case is node.else_case:
                return node
            return IfThenElse(node.condition, then_case, else_case)
        left = [c for c, p in zip(g.conjuncts, g.proven, strict=True) if not p]
        held = [c for c, p in zip(g.conjuncts, g.proven, strict=True) if p]
        then_case = _DropClamps(held).visit(then_case)
        if not left:
            return then_case
        cond = left[0]
        for c in left[1:]:
            cond = And(cond, c)
        return IfThenElse(likely(cond), then_case, else_case)


class _DropClamps(Mutator):
    """Note [clamps under a guard]: a register tile computed whole over a symbolic extent
    clamps its reads (`min(k, n - 1)`, Note [clamped tails] in te/lower.py) under the guard
    `k < n`; where partition_loop proves the guard, the clamp is the index itself, so it
    goes with the guard (a min per load in the K loop of attention's p @ v otherwise)."""

    def __init__(self, conds):
        self.bounds = [(c.a, c.b) for c in conds if isinstance(c, LT) and c.a.dtype.is_integer]
        self.an = Analyzer()

    def visit_Min(self, node: Min):
        node = self.generic_visit(node)
        for a, b in self.bounds:
            for x, y in ((node.a, node.b), (node.b, node.a)):
                if structural_equal(x, a, map_free_vars=False) and self.an.can_prove(y == b - 1):
                    return x
        return node
