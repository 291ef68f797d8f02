"""Iteration and reduction nodes of the loop-level IR: `Range`, `IterVar`, `CommReducer` and
`Reduce`. te builds them (an axis is an IterVar over a Range; `te.sum` makes a Reduce);
`te.lower` lowers them away, so no code generator sees them. `tir.expr` re-exports them.

    k = IterVar(Range(0, 16), Var("k"), IterVarType.REDUCE)
    Reduce(sum_combiner, (A[i, k],), (k,), condition=true)   # sum over k of A[i, k]
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from tessera.ir.dtype import DType
from tessera.ir.node import Node
from tessera.tir.expr import Expr, Var, _hash, _same, convert


@dataclass(frozen=True, eq=False)
class Range(Node):
    """The half-open interval [min, min + extent)."""

    min: Expr
    extent: Expr

    @staticmethod
    def from_min_extent(min_value, extent) -> Range:
        return Range(convert(min_value), convert(extent))

    def __eq__(self, other):
        return isinstance(other, Range) and _same(self, other)

    def __hash__(self):
        return _hash(self)


class IterVarType(enum.Enum):
    DATA_PAR = "data_par"
    REDUCE = "reduce"
    THREAD = "thread"
    OPAQUE = "opaque"


@dataclass(frozen=True, eq=False)
class IterVar(Node):
    """An iteration variable: a Var with its domain, its kind and (for threads) a thread tag."""

    dom: Range | None
    var: Var
    iter_type: IterVarType = IterVarType.DATA_PAR
    thread_tag: str = ""
    is_leaf = True

    def __str__(self) -> str:
        return f"IterVar({self.var.name}, {self.dom}, {self.iter_type.value})"

    __repr__ = __str__

    # In expressions an IterVar stands for its var (`k > 0`, `i * 4 + j`), as in TVM.
    # `==` stays identity: IterVars are dict keys.
    def as_expr(self) -> Var:
        return self.var

    def __add__(self, o):
        return self.var + o

    def __radd__(self, o):
        return o + self.var

    def __sub__(self, o):
        return self.var - o

    def __rsub__(self, o):
        return o - self.var

    def __mul__(self, o):
        return self.var * o

    def __rmul__(self, o):
        return o * self.var

    def __floordiv__(self, o):
        return self.var // o

    def __mod__(self, o):
        return self.var % o

    def __lt__(self, o):
        return self.var < o

    def __le__(self, o):
        return self.var <= o

    def __gt__(self, o):
        return self.var > o

    def __ge__(self, o):
        return self.var >= o


@dataclass(frozen=True, eq=False)
class CommReducer(Node):
    """A commutative reducer: combine(lhs, rhs) -> result, with an identity element.

    For `sum`: lhs=(x,), rhs=(y,), result=(x + y,), identity=(0,).
    """

    lhs: tuple[Var, ...]
    rhs: tuple[Var, ...]
    result: tuple[Expr, ...]
    identity_element: tuple[Expr, ...]

    def __eq__(self, other):
        return isinstance(other, CommReducer) and _same(self, other)

    def __hash__(self):
        return _hash(self)

    def __call__(self, a: tuple[Expr, ...], b: tuple[Expr, ...]) -> tuple[Expr, ...]:
        """The combined values of a and b, with the lhs/rhs variables substituted."""
        from tessera.tir.stmt_functor import substitute

        vmap = dict(zip(self.lhs, a, strict=True)) | dict(zip(self.rhs, b, strict=True))
        return tuple(substitute(r, vmap) for r in self.result)


@dataclass(frozen=True, eq=False)
class Reduce(Expr):
    """The reduction of `source` over `axis` with `combiner` (value `value_index` of a tuple)."""

    combiner: CommReducer
    source: tuple[Expr, ...]
    axis: tuple[IterVar, ...]
    condition: Expr
    value_index: int = 0
    init: tuple[Expr, ...] = ()

    @property
    def dtype(self) -> DType:
        return self.source[self.value_index].dtype
