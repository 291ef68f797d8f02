"""The canonical form of integer linear expressions: sum(coeff * term) + const.

A term is any expression that is not an Add, Sub, constant or multiplication by a constant
(a Var, a FloorDiv, a load...). Like terms are collected, so

    (i*16 + j) - i*16   ->  j            x*4 + x*2    ->  x*6
    (n + 15) - 15       ->  n            (x + 1) * 4  ->  x*4 + 4

`build` writes a form back as an expression with its terms in order of first appearance, the
positive ones first, then the subtracted ones, then the constant: `i*16 + j - k*2 + 3`. It also
folds the split/fuse identity `floordiv(x, c)*c + floormod(x, c) -> x` (Note [fuse identity]).
This algebra is a ring, so it is only applied to integer scalars (never to floats).
"""

from __future__ import annotations

from tessera.ir.dtype import DType
from tessera.tir import expr as E


class Linear:
    """A mutable sum(coeff * term) + const over one integer dtype."""

    __slots__ = ("terms", "const", "dtype")

    def __init__(self, dtype: DType, terms: dict | None = None, const: int = 0):
        self.dtype = dtype
        self.terms: dict[E.Expr, int] = terms if terms is not None else {}
        self.const = const

    def add_term(self, term: E.Expr, coeff: int) -> None:
        if coeff:
            new = self.terms.get(term, 0) + coeff
            if new:
                self.terms[term] = new
            else:
                del self.terms[term]

    def add(self, other: Linear, scale: int = 1) -> Linear:
        for t, c in other.terms.items():
            self.add_term(t, c * scale)
        self.const += other.const * scale
        return self

    def scaled(self, k: int) -> Linear:
        return Linear(
            self.dtype, {t: c * k for t, c in self.terms.items()} if k else {}, self.const * k
        )

    def copy(self) -> Linear:
        return Linear(self.dtype, dict(self.terms), self.const)

    @property
    def is_const(self) -> bool:
        return not self.terms


def is_linear_dtype(dt: DType) -> bool:
    return dt.is_integer and dt.lanes == 1


def linearize(e: E.Expr) -> Linear:
    """The linear form of e (which should have an integer scalar dtype)."""
    out = Linear(e.dtype)
    _collect(e, 1, out)
    return out


def _collect(e: E.Expr, scale: int, out: Linear) -> None:
    if isinstance(e, E.IntImm):
        out.const += scale * e.value
    elif isinstance(e, E.Add):
        _collect(e.a, scale, out)
        _collect(e.b, scale, out)
    elif isinstance(e, E.Sub):
        _collect(e.a, scale, out)
        _collect(e.b, -scale, out)
    elif isinstance(e, E.Mul) and isinstance(e.b, E.IntImm):
        _collect(e.a, scale * e.b.value, out)
    elif isinstance(e, E.Mul) and isinstance(e.a, E.IntImm):
        _collect(e.b, scale * e.a.value, out)
    elif isinstance(e, E.Mul):
        coeff, term = _monomial(e)
        if term is None:
            out.const += scale * coeff
        else:
            out.add_term(term, scale * coeff)
    else:
        out.add_term(e, scale)


# Note [monomials]
# A product of symbolic factors is one term of the linear form, so its factors' order and the
# place of its constants must not matter: `batch*4*seq_` (a fused loop's extent) and
# `seq_*(batch*4)` (a guard rewritten by a symbolic divisor) are the same term 4*(batch*seq_).
# The factors are flattened, the constants multiplied into the coefficient and the rest sorted
# by their text; then a guard of a loop fused over (batch, 4, seq_) is proved by its extent.


def _monomial(e: E.Mul) -> tuple[int, E.Expr | None]:
    """(coefficient, the product of the other factors in a canonical order; None: none)."""
    coeff, factors, todo = 1, [], [e]
    while todo:
        f = todo.pop()
        if isinstance(f, E.Mul):
            todo += [f.a, f.b]
        elif isinstance(f, E.IntImm):
            coeff *= f.value
        else:
            factors.append(f)
    if not factors:
        return coeff, None
    factors.sort(key=str)
    term = factors[0]
    for f in factors[1:]:
        term = E.Mul(term, f)
    return coeff, term


# Note [fuse identity]
# Splitting a loop writes i as floordiv(f, c)*c + floormod(f, c), and fusing two loops writes them
# back; both leave the identity floordiv(x, c)*c + floormod(x, c) == x (for any x, c != 0) in
# index expressions. Recognising it on the linear form (coefficients k*c and k) catches it in any
# order and with any other terms around it.


def fold_fuse_identity(lin: Linear) -> bool:
    """Replace k*c*floordiv(x, c) + k*floormod(x, c) by k*x (also k*(floordiv(x, n)*n) with a
    symbolic n). True when something changed."""
    pairs = {}  # the floormod term -> its floordiv partner
    for term, k in lin.terms.items():
        if isinstance(term, E.FloorMod) and isinstance(term.b, E.IntImm) and term.b.value != 0:
            div = E.FloorDiv(term.a, term.b)
            if lin.terms.get(div) == k * term.b.value:
                pairs[term] = div
        elif isinstance(term, E.FloorMod):  # a symbolic divisor: floordiv(x, n)*n + ...
            for div in (
                E.Mul(E.FloorDiv(term.a, term.b), term.b),
                E.Mul(term.b, E.FloorDiv(term.a, term.b)),
            ):
                if lin.terms.get(div) == k:
                    pairs[term] = div
    if not pairs:
        return False
    # rebuild in order, x taking the place of its floormod term
    old, lin.terms = lin.terms, {}
    dropped = set(pairs.values())
    for term, k in old.items():
        if term in pairs:
            lin.add(linearize(term.a), k)
        elif term not in dropped:
            lin.add_term(term, k)
    return True


def expand_floordiv(lin: Linear) -> bool:
    """Replace k*floordiv(x, c) (c > 0 dividing k) by (k/c)*x - (k/c)*floormod(x, c), so that
    a bound sees floordiv(n, 6)*6 <= n (Note [symbolic tails] in topi/symbolic.py: the main
    part of a split of n ends at floordiv(n, 6)*6). True when something changed."""
    found = [
        (t, k)
        for t, k in lin.terms.items()
        if isinstance(t, E.FloorDiv) and isinstance(t.b, E.IntImm) and t.b.value > 0
        and k % t.b.value == 0
    ]  # fmt: skip
    for t, k in found:
        q = k // t.b.value
        lin.add_term(t, -k)
        lin.add(linearize(t.a), q)
        lin.add_term(E.FloorMod(t.a, t.b), -q)
    return bool(found)


def _times(term: E.Expr, coeff: int, dt: DType) -> E.Expr:
    return term if coeff == 1 else E.Mul(term, E.IntImm(coeff, dt))


def build(lin: Linear) -> E.Expr:
    """Write the form back as an expression (see the module docstring for the order)."""
    dt = lin.dtype
    pos = [(t, c) for t, c in lin.terms.items() if c > 0]
    neg = [(t, -c) for t, c in lin.terms.items() if c < 0]
    const = lin.const
    if pos:
        out = _times(*pos[0], dt)
        for t, c in pos[1:]:
            out = E.Add(out, _times(t, c, dt))
    elif neg and const == 0:
        t, c = neg.pop(0)
        out = E.Mul(t, E.IntImm(-c, dt))
    else:
        out = E.IntImm(const, dt)
        const = 0
    for t, c in neg:
        out = E.Sub(out, _times(t, c, dt))
    if const > 0:
        out = E.Add(out, E.IntImm(const, dt))
    elif const < 0:
        out = E.Sub(out, E.IntImm(-const, dt))
    return out
