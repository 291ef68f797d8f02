"""Inline math for float32 vectors: exp, log, tanh (Cephes' polynomials, about 1-2 ulp).

LLVM has no vector exp of its own: `llvm.exp.v16f32` becomes 16 calls of `expf`. These
functions stay in vector registers instead. Special values follow C: exp(+-inf) = inf / 0,
log(0) = -inf, log(x < 0) = NaN, NaN in -> NaN out. (sigmoid is 1 / (1 + exp(-x)) on top of exp.)
erf is a rational function of x on [-4, 4] (+-1 outside, where float32 erf rounds to +-1), the
one of Eigen and XLA: about 2e-7 absolute error; NaN in -> NaN out.
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


def _pow2(b, n, dt):
    """2**n for integer vectors n in [-126, 127], as float bits."""
    i32 = DType("int", 32, dt.lanes)
    return b.bitcast(b.shl(b.add(n, _c(127, i32)), _c(23, i32)), T.llvm_type(dt))


def vexp(em, x, dt):
    from tessera.codegen.llvm.intrinsics import llvm_intrinsic

    b = em.b
    i32 = DType("int", 32, dt.lanes)
    xc = b.select(b.fcmp_ordered(">", x, _c(89.0, dt)), _c(89.0, dt), x)
    xc = b.select(b.fcmp_ordered("<", xc, _c(-104.0, dt)), _c(-104.0, dt), xc)
    t = b.fadd(b.fmul(xc, _c(1.44269504088896341, dt)), _c(0.5, dt))
    fn = llvm_intrinsic(em, "llvm.floor", [t], dt)
    r = b.fsub(b.fsub(xc, b.fmul(fn, _c(0.693359375, dt))), b.fmul(fn, _c(-2.12194440e-4, dt)))
    coeffs = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2)
    p = _poly(b, r, (*coeffs, 1.6666665459e-1, 5.0000001201e-1), dt)
    p = b.fadd(b.fadd(b.fmul(p, b.fmul(r, r)), r), _c(1.0, dt))
    n = b.fptosi(fn, T.llvm_type(i32))
    n1 = b.ashr(n, _c(1, i32))  # 2**n in two steps, so that n in [-150, 128] stays in range
    result = b.fmul(b.fmul(p, _pow2(b, n1, dt)), _pow2(b, b.sub(n, n1), dt))
    return b.select(b.fcmp_unordered("uno", x, x), x, result)


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
    near_zero = b.fadd(b.fmul(b.fmul(p, z), x), x)
    e = vexp(em, b.fmul(ax, _c(2.0, dt)), dt)
    far = b.fsub(_c(1.0, dt), b.fdiv(_c(2.0, dt), b.fadd(e, _c(1.0, dt))))
    far = llvm_intrinsic(em, "llvm.copysign", [far, x], dt)
    return b.select(b.fcmp_ordered("<", ax, _c(0.625, dt)), near_zero, far)


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


VECTOR_FUNCTIONS = {"exp": vexp, "log": vlog, "tanh": vtanh, "erf": verf}
