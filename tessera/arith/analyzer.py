"""The Analyzer: what is known about variables, and every integer analysis under that knowledge.

Bind a variable to its range (or to a value); then simplify, prove, bound and take sets of
expressions that use it. One Analyzer is cheap; passes make one per function or per loop nest.

    an = Analyzer()
    an.bind(i, Range(0, 16))                   # 0 <= i < 16
    an.bind(j, (0, 4))                         # 0 <= j < 4: a pair is half-open, like range()
    an.simplify(floordiv(i*4 + j, 4))          # i
    an.can_prove(i*4 + j < 64)                 # True
    an.int_set(i*4 + j)                        # [i*4, i*4 + 3]  (only dom_map vars are relaxed)
"""

from __future__ import annotations

from tessera.arith import bound as B
from tessera.arith.int_set import IntSet, eval_set, to_int_set
from tessera.arith.modular import modular_set
from tessera.arith.simplify import Simplifier
from tessera.tir import expr as E


class Analyzer:
    def __init__(self):
        self._ranges: dict[E.Var, IntSet] = {}  # inclusive [min, max]
        self._values: dict[E.Var, E.Expr] = {}
        self._bound_cache: dict = {}
        # Note [analyzer memo]: simplify's results and the symbolic bounds, per busy state
        self._memo: tuple[dict, dict] = ({}, {})
        self._symbolic_memo: dict = {}
        self._in_progress: set[int] = set()
        self._symbolic_busy = False  # see Note [symbolic ranges] in simplify.py

    def copy(self) -> Analyzer:
        out = Analyzer()
        out._ranges = dict(self._ranges)
        out._values = dict(self._values)
        out._symbolic_busy = self._symbolic_busy
        return out

    def bind(self, var: E.Var, value) -> None:
        """Record what var is: a Range [min, min + extent), an (lo, hi) pair meaning [lo, hi),
        an IntSet (inclusive ends), or an Expr / int that var equals. A new binding replaces
        the old one."""
        if not isinstance(var, E.Var):
            raise TypeError(f"Analyzer.bind needs a tir.Var, got {type(var).__name__}")
        self._forget()
        self._ranges.pop(var, None)
        self._values.pop(var, None)
        try:
            self._bind(var, value)
        finally:
            self._forget()  # what was derived while the var was unbound (its end's simplify)

    def _bind(self, var: E.Var, value) -> None:
        if isinstance(value, E.Range):
            self._ranges[var] = IntSet.from_range(value)
        elif isinstance(value, IntSet):
            self._ranges[var] = value
        elif isinstance(value, tuple):
            if len(value) != 2:
                raise ValueError(f"bind({var.name}, {value!r}): a pair (lo, hi) is expected")
            lo, hi = (E.convert(v, var.dtype) for v in value)
            self._ranges[var] = IntSet(lo, self.simplify(hi - 1))
        elif isinstance(value, E.Expr | int):
            self._values[var] = E.convert(value, var.dtype)
        else:
            raise TypeError(
                f"bind({var.name}, ...): expected a Range, (lo, hi), IntSet or Expr, "
                f"got {type(value).__name__}"
            )

    def unbind(self, var: E.Var) -> None:
        """Forget what was bound for var (e.g. when leaving its loop)."""
        self._forget()
        self._ranges.pop(var, None)
        self._values.pop(var, None)

    # Note [analyzer memo]
    # What the analyzer derives depends only on what is bound, so it is kept until the next
    # bind or unbind: the bounds (`_bound_cache`), the simplified form of each expression (the
    # Simplifier's memo, one per value of `_symbolic_busy`: a bound taken inside a symbolic
    # bound is weaker, Note [symbolic ranges]) and the symbolic bounds of linear forms. The
    # lowering and the tir passes simplify and prove the same index, guard and clamp
    # expressions over and over under one set of loop ranges (a padded window's guards per tap
    # of an unrolled tile): the symbolic bounds of the dynamic recognizer had taken half of its
    # compile time. The results are those the analyzer computes anew; only repeats are saved.

    def _forget(self) -> None:
        self._bound_cache.clear()
        self._memo[0].clear()
        self._memo[1].clear()
        self._symbolic_memo.clear()

    def _var_bound(self, v: E.Var) -> B.Bound:
        if id(v) in self._in_progress:  # a range that mentions its own variable
            return B.dtype_bound(v.dtype)
        self._in_progress.add(id(v))
        try:
            if v in self._values:
                return B.const_int_bound(self._values[v], self)
            s = self._ranges.get(v)
            if s is None:
                return B.dtype_bound(v.dtype)
            lo = B.const_int_bound(s.min_value, self)[0] if s.min_value is not None else -B.INF
            hi = B.const_int_bound(s.max_value, self)[1] if s.max_value is not None else B.INF
            return B.intersect((lo, hi), B.dtype_bound(v.dtype))
        finally:
            self._in_progress.discard(id(v))

    def simplify(self, e) -> E.Expr:
        """An equivalent, simpler expression under what is bound."""
        return Simplifier(self).visit(E.convert(e))

    def can_prove(self, cond) -> bool:
        """True only when cond (a bool expression) holds for every value of the bound vars."""
        cond = self.simplify(cond)
        if isinstance(cond, E.IntImm):
            return bool(cond.value)
        return B.const_int_bound(cond, self) == (1, 1)

    def can_prove_equal(self, a, b) -> bool:
        a, b = E._promote(a, b)
        diff = self.simplify(a - b)
        return isinstance(diff, E.IntImm) and diff.value == 0

    def const_int_bound(self, e) -> tuple[int | float, int | float]:
        """Inclusive (lo, hi) of an integer expression; -inf / inf where unknown."""
        lo, hi = B.const_int_bound(E.convert(e), self)
        return (int(lo) if lo != -B.INF else lo, int(hi) if hi != B.INF else hi)

    def int_set(self, e, dom_map: dict | None = None, *, relax_bound_vars: bool = False) -> IntSet:
        """The interval of values e takes when each var of dom_map (-> IntSet | Range | a pair
        (lo, hi) meaning [lo, hi)) ranges over its set. Other vars are symbols; with
        relax_bound_vars, vars with a range bound in this analyzer range over it too."""
        dom = {}
        for var, s in (dom_map or {}).items():
            if not isinstance(var, E.Var):
                raise TypeError(f"int_set: dom_map keys must be tir.Var, got {type(var).__name__}")
            dom[var] = to_int_set(s)
        return eval_set(E.convert(e), dom, self, relax_bound_vars)

    def modular_set(self, e) -> tuple[int, int]:
        """(coeff, base) with e == coeff*k + base for some integer k (coeff 0: e is base)."""
        return modular_set(E.convert(e), self)


def simplify(e, bounds: dict | None = None) -> E.Expr:
    """Simplify e with an Analyzer where each var of `bounds` is bound (see Analyzer.bind)."""
    an = Analyzer()
    for var, value in (bounds or {}).items():
        an.bind(var, value)
    return an.simplify(e)
