"""Inline math for float32 vectors: exp, log, tanh, sigmoid, erf (Cephes' polynomials, 1-2 ulp).

LLVM has no vector exp of its own: `llvm.exp.v16f32` becomes 16 calls of `expf`. These
functions stay in vector registers instead. Special values follow C: exp(+-inf) = inf / 0,
log(0) = -inf, log(x < 0) = NaN, NaN in -> NaN out, tanh(-0) = -0. exp is ~20 instructions a
vector, with no floor, conversion or NaN select (Note [vector exp]); sigmoid and tanh use
exp(-|x|) <= 1, whose 2**n takes one shift, and one division each: sigmoid(x) is
(x >= 0 ? 1 : e) / (1 + e), within 1 ulp also where its results are subnormal (x < -87.3),
where 1 / (1 + exp(-x)) gave 0. Max errors over dense sweeps of float32
(tests/codegen/test_vecmath.py): exp 0.9 ulp, sigmoid 2.3, tanh 1.4. erf is a rational
function of x on [-4, 4] (+-1 outside, where float32 erf rounds to +-1), the one of Eigen and
XLA: about 2e-7 absolute error; NaN in -> NaN out.
"""

from __future__ import annotations

from tessera.codegen.llvm import types as T
from tessera.ir.dtype import DType


def _c(v, dt):
    return T.constant(v, dt)


def _poly(b, x, coeffs, dt):
    """coeffs[0] * x^(k-1) + ... + coeffs[-1], by Horner's rule (each step one FMA)."""
    acc = _c(coeffs[0], dt)
    for c in coeffs[1:]:
        acc = b.fadd(b.fmul(acc, x, flags=("contract",)), _c(c, dt), flags=("contract",))
    return acc


def _fma(b, x, y, z):
    """x * y + z, one FMA where the target has it (the "contract" flags let LLVM fuse)."""
    return b.fadd(b.fmul(x, y, flags=("contract",)), z, flags=("contract",))


# Note [vector exp]
# exp(x) = 2**n * exp(r), n = round(x / ln 2), r = x - n ln 2 in [-ln 2 / 2, ln 2 / 2]:
# - n by the "magic number": t = x log2(e) + (1.5 * 2**23 + bias) rounds x log2(e) to an integer
#   (the float's spacing there is 1) and leaves n + bias in t's low mantissa bits, with no
#   floor, no float -> int conversion and no poison for NaN (fptosi of NaN is poison in LLVM;
#   the bits of a NaN are just bits). n as a float is t - magic, exact.
# - r in two steps (Cody-Waite): ln 2 = 0.693359375 (9 bits: n * it is exact) - 2.12194440e-4.
# - exp(r) = 1 + r + r**2 P(r), Cephes' degree-5 P, all in Horner's rule: 7 FMAs.
# - 2**n: t's bits shifted left by 23 put n + bias in the exponent field, one shift, when
#   n + bias stays in [1, 254]. exp's clamp [-104, 89] (below -103.98 the result rounds to 0,
#   above 88.73 it is inf) gives n in [-150, 128]: 279 values, too many for one exponent, so
#   exp scales in two steps (2**(n >> 1) * 2**(n - (n >> 1))). sigmoid and tanh only need
#   exp(-|x|) <= 1, n in [-150, 0]: one shift, with bias 127 + 24 and the polynomial's
#   coefficients scaled by 2**-24 (exact), so that subnormal results still round once.
# - NaN: the clamps are selects on ordered compares, false for NaN, so a NaN passes them, makes
#   r and then the polynomial NaN, and NaN times any scale is NaN: no select for it at the end.
# Max error over every 37th float32 of [-104, 88.72] (exp, 0.87 ulp) and of [-104, 20] (sigmoid,
# 2.3 ulp: e's error, 1 + e's rounding and the division's), every 97th of [-10, 10] (tanh, 1.4);
# tests/codegen/test_vecmath.py sweeps every 997th.
_EXP_P = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1,
          5.0000001201e-1, 1.0, 1.0)  # fmt: skip
_MAGIC = 12582912.0  # 1.5 * 2**23


def _clamp(b, x, lo, hi, dt):
    """min(max(x, lo), hi) by ordered compares: a NaN passes through."""
    if hi is not None:
        x = b.select(b.fcmp_ordered(">", x, _c(hi, dt)), _c(hi, dt), x)
    if lo is not None:
        x = b.select(b.fcmp_ordered("<", x, _c(lo, dt)), _c(lo, dt), x)
    return x


def _exp_reduce(b, x, bias, dt):
    """(t, r): t's low mantissa bits hold n + bias, r = x - n ln 2 (Note [vector exp])."""
    magic = _c(_MAGIC + bias, dt)
    t = _fma(b, x, _c(1.44269504088896341, dt), magic)
    fn = b.fsub(t, magic)
    r = _fma(b, fn, _c(-0.693359375, dt), x)
    return t, _fma(b, fn, _c(2.12194440e-4, dt), r)


def _exp_poly(b, r, dt, scale=1.0):
    """scale * exp(r) for r in [-ln 2 / 2, ln 2 / 2] (scale a power of 2: exact)."""
    return _poly(b, r, [c * scale for c in _EXP_P], dt)


def _pow2(b, n, dt):
    """2**n for integer vectors n in [-126, 127], as float bits."""
    i32 = DType("int", 32, dt.lanes)
    return b.bitcast(b.shl(b.add(n, _c(127, i32)), _c(23, i32)), T.llvm_type(dt))


def _exponent(b, t, dt):
    """The float 2**(n + bias - 127) of t = x log2(e) + magic + bias: t's bits shifted left."""
    i32 = DType("int", 32, dt.lanes)
    return b.bitcast(b.shl(b.bitcast(t, T.llvm_type(i32)), _c(23, i32)), T.llvm_type(dt))


def vexp(em, x, dt):
    b = em.b
    i32 = DType("int", 32, dt.lanes)
    ity = T.llvm_type(i32)
    t, r = _exp_reduce(b, _clamp(b, x, -104.0, 89.0, dt), 0.0, dt)
    n = b.sub(b.bitcast(t, ity), b.bitcast(_c(_MAGIC, dt), ity))  # n in [-150, 128]
    n1 = b.ashr(n, _c(1, i32))  # 2**n in two steps, each exponent in range (Note [vector exp])
    n2 = b.sub(n, n1)
    return b.fmul(b.fmul(_exp_poly(b, r, dt), _pow2(b, n1, dt)), _pow2(b, n2, dt))


def _exp_neg(b, ax, dt, scale=1.0):
    """scale * exp(-ax) for ax >= 0 (or NaN), exp in (0, 1]: 2**n in one step (Note [vector
    exp]); scale a power of 2."""
    t, r = _exp_reduce(b, _clamp(b, b.fneg(ax), -104.0, None, dt), 127.0 + 24.0, dt)
    return b.fmul(_exp_poly(b, r, dt, scale * 2.0**-24), _exponent(b, t, dt))


def vsigmoid(em, x, dt):
    """1 / (1 + exp(-x)) as (x >= 0 ? 1 : e) / (1 + e) with e = exp(-|x|) <= 1: no overflow,
    one division, and exp(x) / (1 + exp(x)) keeps its subnormal results for x < -87.3."""
    from tessera.codegen.llvm.intrinsics import llvm_intrinsic

    b = em.b
    e = _exp_neg(b, llvm_intrinsic(em, "llvm.fabs", [x], dt), dt)
    num = b.select(b.fcmp_ordered(">=", x, _c(0.0, dt)), _c(1.0, dt), e)
    return b.fdiv(num, b.fadd(e, _c(1.0, dt)))


def vlog(em, x, dt):
    b = em.b
    i32 = DType("int", 32, dt.lanes)
    ity = T.llvm_type(i32)
    tiny = b.fcmp_ordered("<", x, _c(1.17549435e-38, dt))  # subnormals: scale up by 2**23 first
    xs = b.select(tiny, b.fmul(x, _c(8388608.0, dt)), x)
    bits = b.bitcast(xs, ity)
    e = b.sub(b.and_(b.lshr(bits, _c(23, i32)), _c(0xFF, i32)), _c(126, i32))
    e = b.sub(e, b.select(tiny, _c(23, i32), _c(0, i32)))
    m = b.bitcast(b.or_(b.and_(bits, _c(0x807FFFFF, i32)), _c(0x3F000000, i32)), xs.type)
    small = b.fcmp_ordered("<", m, _c(0.707106781186547524, dt))
    e = b.sub(e, b.zext(small, ity))
    m = b.fsub(b.select(small, b.fadd(m, m), m), _c(1.0, dt))
    ef = b.sitofp(e, xs.type)
    z = b.fmul(m, m)
    coeffs = (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1)
    coeffs += (1.4249322787e-1, -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1)
    p = _poly(b, m, (*coeffs, 3.3333331174e-1), dt)
    y = b.fmul(b.fmul(m, z), p)
    y = b.fadd(y, b.fmul(ef, _c(-2.12194440e-4, dt)))
    y = b.fsub(y, b.fmul(z, _c(0.5, dt)))
    result = b.fadd(b.fadd(m, y), b.fmul(ef, _c(0.693359375, dt)))
    result = b.select(b.fcmp_ordered("==", x, _c(float("inf"), dt)), x, result)
    result = b.select(b.fcmp_ordered("==", x, _c(0.0, dt)), _c(float("-inf"), dt), result)
    bad = b.fcmp_unordered("<", x, _c(0.0, dt))  # negative or NaN
    return b.select(bad, _c(float("nan"), dt), result)


def vtanh(em, x, dt):
    from tessera.codegen.llvm.intrinsics import llvm_intrinsic

    b = em.b
    ax = llvm_intrinsic(em, "llvm.fabs", [x], dt)
    z = b.fmul(x, x)
    coeffs = (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1)
    p = _poly(b, z, (*coeffs, -3.33332819422e-1), dt)
    near_zero = _fma(b, b.fmul(p, z), ax, ax)
    # tanh(|x|) = 1 - 2e / (1 + e), e = exp(-2|x|) <= 1 (2e straight from the polynomial)
    e2 = _exp_neg(b, b.fmul(ax, _c(2.0, dt)), dt, scale=2.0)
    far = b.fsub(_c(1.0, dt), b.fdiv(e2, _fma(b, e2, _c(0.5, dt), _c(1.0, dt))))
    t = b.select(b.fcmp_ordered("<", ax, _c(0.625, dt)), near_zero, far)
    return llvm_intrinsic(em, "llvm.copysign", [t, x], dt)  # tanh(-0) = -0


# erf(x) = x * P(x^2) / Q(x^2) on [-4, 4] (Eigen's generic_fast_erf_float, as in XLA)
_ERF_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06,
          -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03,
          -1.60960333262415e-02)  # fmt: skip
_ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
          -7.37332916720468e-03, -1.42647390514189e-02)  # fmt: skip


def verf(em, x, dt):
    b = em.b
    # ordered compares are false for NaN, so a NaN passes the clamps and comes out NaN
    xc = b.select(b.fcmp_ordered(">", x, _c(4.0, dt)), _c(4.0, dt), x)
    xc = b.select(b.fcmp_ordered("<", xc, _c(-4.0, dt)), _c(-4.0, dt), xc)
    x2 = b.fmul(xc, xc)
    p = b.fmul(xc, _poly(b, x2, _ERF_P, dt))
    return b.fdiv(p, _poly(b, x2, _ERF_Q, dt))


# Note [scalar tails]
# An element-wise loop over rows whose length the vector does not divide (Sigmoid over
# [85, 85, 81]: 10 vectors and 1 element a row) ran each row's last elements as scalars, and a
# scalar float32 sigmoid or tanh was a call of libm (expf inside 1 / (1 + e), tanhf): the
# call, its vzeroupper and the caller's saved registers cost ~40 cycles, as much as 4 vectors
# of the inline code, so one element in 81 took ~10% of the kernel. sigmoid and tanh of
# float32 scalars now take the same inline code as their vectors (on one lane): no call, and an
# element's result no longer depends on whether it fell in a vector or in a tail
# (bit-identical; tests/codegen/test_vecmath.py). exp was tried too: it halved the time of
# softmax over a middle axis with 3 kept elements (two scalar exps an element, no vectors),
# but made LogSoftmax over rows of 10 (one vector and a 2-element tail, a logf call per row)
# 1.35x slower, its 14 hoisted scalar constants reloaded around the call; so exp, log and erf
# keep libm for scalars.
SCALAR_TOO = frozenset({"sigmoid", "tanh"})

VECTOR_FUNCTIONS = {
    "exp": vexp, "log": vlog, "tanh": vtanh, "sigmoid": vsigmoid, "erf": verf,
}  # fmt: skip
