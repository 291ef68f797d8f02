"""float32 log, and cos and sin of a fraction of a turn, as te arithmetic: the same IEEE
operations on every target, so every target computes the same bits (Note [portable float32
math]).

    y = exact_math.log_f32(u)                  # u > 0, a normal float32 (not 0, inf or nan)
    c, s = exact_math.cos_sin_turns(k, 24)     # cos and sin of 2 pi k / 2^24, k a uint32 < 2^24

Note [portable float32 math]
te.log, te.cos and te.sin of a float32 are a vector polynomial of our own on llvm and the C
library's logf, cosf and sinf on the C target: they differ in the last bit here and there. A
kernel whose results must be the same bits on every target (the random generators, Note
[run-time random numbers] in philox.py) computes them here instead, from operations IEEE 754
rounds exactly (+, -, *, fma, sqrt, int <-> float conversions, bit reinterpretation) and
nothing else; and every product that is then added is an explicit fma, since llvm may fuse
a * b + c (the `contract` flag) where C99 does not (GCC's -std=c99 means -ffp-contract=off).
  log: u = m 2^e with m in [sqrt(1/2), sqrt(2)) from the float's bits, log(1 + x) for
    x = m - 1 (exact) by Cephes' logf polynomial (S. Moshier), e ln 2 added in two parts;
    within about 1 ulp.
  cos, sin of 2 pi k / 2^bits: the angle is reduced exactly in integers, to an octant and a
    fraction g in [0, 1] of an eighth of a turn (mirrored in odd octants), phi = g pi/4 in
    [0, pi/4]; Cephes' sinf and cosf polynomials there; the octant's symmetries (swaps and
    signs, exact) give the angle's cos and sin. Within about 1 ulp of the true angle's, with
    no range-reduction error at all (the turn fraction is exact).
"""

from __future__ import annotations

import math

from tessera import te
from tessera.tir.expr import Let, Var

F32 = "float32"

# Cephes logf: log(1 + x) = x - x^2 / 2 + x^3 P(x) for x in [sqrt(1/2) - 1, sqrt(2) - 1)
LOG_P = (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1,
         -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1)  # fmt: skip
LN2_HI, LN2_LO = 0.693359375, -2.12194440e-4  # ln 2 = HI + LO; e * HI is exact
SQRT_HALF = 0.70710678118654752440
# Cephes sinf and cosf on [-pi/4, pi/4] (z = x^2): x + x z S(z), 1 - z / 2 + z^2 C(z)
SIN_S = (-1.9515295891e-4, 8.3321608736e-3, -1.6666654611e-1)
COS_C = (2.443315711809948e-5, -1.388731625493765e-3, 4.166664568298827e-2)


class Bindings:
    """Values bound once to names (tir Lets) and used many times: a value used twice in a plain
    expression is a tree that copies it, and these formulas use theirs many times over (the
    copies multiply, stage after stage, up to megabytes of IR).

        b = Bindings(); x = b(expr, "x"); y = b.wrap(x * x + x)   # let x = expr in x*x + x

    Each `wrap` binds fresh variables (a Var is bound once in a function: two outputs that
    share bindings, as a cos and a sin, get a copy each).
    """

    def __init__(self):
        self.bound: list[tuple[Var, object]] = []

    def __call__(self, value, name: str) -> Var:
        var = Var(name, value.dtype)
        self.bound.append((var, value))
        return var

    def wrap(self, body):
        from tessera.tir.transform._util import copy_fresh

        for var, value in reversed(self.bound):
            body = Let(var, value, body)
        return copy_fresh(body)


def _c(value: float):
    return te.const(value, F32)


def _horner(coefficients, x):
    """c0 x^(n-1) + ... + c(n-1) with one fma a step."""
    acc = _c(coefficients[0])
    for c in coefficients[1:]:
        acc = te.fma(acc, x, _c(c))
    return acc


def log_f32(u):
    """The natural log of the float32 `u` (> 0 and normal), within about 1 ulp, the same bits
    on every target (Note [portable float32 math])."""
    b = Bindings()
    bits = b(te.reinterpret(u, "uint32"), "bits")
    e = te.cast(bits >> te.const(23, "uint32"), "int32") - te.const(126, "int32")
    mantissa = (bits & te.const(0x007FFFFF, "uint32")) | te.const(0x3F000000, "uint32")
    m = b(te.reinterpret(mantissa, F32), "m")  # u = m 2^e, m in [1/2, 1)
    small = b(m < _c(SQRT_HALF), "small")
    ef = b(te.cast(te.select(small, e - te.const(1, "int32"), e), F32), "e")
    x = b(te.select(small, m + m, m) - _c(1.0), "x")  # exact (Sterbenz): |x| < sqrt(2) - 1
    z = b(x * x, "z")
    y = (_horner(LOG_P, x) * x) * z
    y = te.fma(ef, _c(LN2_LO), y)
    y = te.fma(z, _c(-0.5), y)
    return b.wrap(te.fma(ef, _c(LN2_HI), x + y))


def _sin_cos_octant(phi, b: Bindings):
    """(sin phi, cos phi) for phi in [0, pi/4] (a bound name)."""
    z = b(phi * phi, "z")
    sin = te.fma(phi * z, _horner(SIN_S, z), phi)
    cos = te.fma(z * z, _horner(COS_C, z), te.fma(z, _c(-0.5), _c(1.0)))
    return sin, cos


def cos_sin_turns(k, bits: int):
    """(cos, sin) of the angle 2 pi k / 2^bits, k a uint32 below 2^bits (3 <= bits <= 24),
    within about 1 ulp, the same bits on every target (Note [portable float32 math])."""
    if not 3 <= bits <= 24:
        raise ValueError(f"cos_sin_turns takes 3 to 24 bits of a turn, got {bits}")
    u32 = "uint32"
    b = Bindings()
    k = b(k, "k")
    frac = bits - 3  # bits of the fraction of an octant
    octant = b(k >> te.const(frac, u32), "octant")
    rest = k & te.const((1 << frac) - 1, u32)
    odd = b((octant & te.const(1, u32)) == te.const(1, u32), "odd")
    # in an odd octant the angle is (octant + 1) eighths minus (1 - fraction) of an eighth
    rest = te.select(odd, te.const(1 << frac, u32) - b(rest, "rest"), rest)
    g = te.cast(rest, F32) * _c(2.0**-frac)  # exact: at most 2^21, a power-of-two scale
    sin, cos = _sin_cos_octant(b(g * _c(math.pi / 4), "phi"), b)
    cos = b(cos, "cos")
    sin = b(te.select(odd, _c(-1.0), _c(1.0)) * sin, "sin")  # times -1 or 1: exact
    # the angle is q quarter turns plus (or, odd, minus) phi: rotate (cos, sin) by q quarters
    quarter = b(((octant + te.const(1, u32)) >> te.const(1, u32)) & te.const(3, u32), "quarter")
    swap = b((quarter & te.const(1, u32)) == te.const(1, u32), "swap")
    negate_cos = te.logical_or(quarter == te.const(1, u32), quarter == te.const(2, u32))
    negate_sin = quarter >= te.const(2, u32)
    cx = te.select(negate_cos, _c(-1.0), _c(1.0)) * te.select(swap, sin, cos)
    sx = te.select(negate_sin, _c(-1.0), _c(1.0)) * te.select(swap, cos, sin)
    return b.wrap(cx), b.wrap(sx)
