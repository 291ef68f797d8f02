"""The intrinsic calls of tir (`tir.op.INTRINSICS`) in LLVM IR.

Where LLVM has an intrinsic it is used (`llvm.exp.f32`, `llvm.fma.v8f32`, `llvm.ctpop.i32`, ...);
other math functions call libm (`tanhf`, `erff`, ...), one call per lane for vectors. Float32
vectors of exp, log, tanh, sigmoid and erf use the inline polynomials of `vecmath.py`, which
the loop over lanes would make ~10x slower; so do float32 scalars of sigmoid and tanh (Note
[scalar tails] there). float16/bfloat16 operands are computed in float32.

`if_then_else` on scalars branches (only the taken side is evaluated, so a guarded out-of-bounds
load is safe); on vectors it is a select (the vectorizer leaves no loads in its branches).
`prefetch(A[i], rw, locality)` is `llvm.prefetch` of &A[i] (a statement: its value is void).
"""

from __future__ import annotations

from llvmlite import ir

from tessera.codegen.llvm import types as T
from tessera.ir.dtype import DType, float32
from tessera.tir import expr as E

# tir name -> LLVM intrinsic (float operands)
_LLVM_FLOAT = {
    "exp": "llvm.exp",
    "exp2": "llvm.exp2",
    "log": "llvm.log",
    "log2": "llvm.log2",
    "log10": "llvm.log10",
    "sqrt": "llvm.sqrt",
    "sin": "llvm.sin",
    "cos": "llvm.cos",
    "floor": "llvm.floor",
    "ceil": "llvm.ceil",
    "trunc": "llvm.trunc",
    "round": "llvm.roundeven",
    "pow": "llvm.pow",
    "fma": "llvm.fma",
}
# tir name -> libm function (the float32 one has an "f" suffix)
LIBM_NAMES = _LIBM = {
    "tan",
    "asin",
    "acos",
    "atan",
    "sinh",
    "cosh",
    "tanh",
    "asinh",
    "acosh",
    "atanh",
    "erf",
    "atan2",
}


def _suffix(ty: ir.Type) -> str:
    if isinstance(ty, ir.VectorType):
        return f"v{ty.count}{_suffix(ty.element)}"
    if isinstance(ty, ir.IntType):
        return f"i{ty.width}"
    return {ir.HalfType: "f16", ir.FloatType: "f32", ir.DoubleType: "f64"}[type(ty)]


def llvm_intrinsic(em, name: str, args: list, dt: DType) -> ir.Value:
    """Call the overloaded LLVM intrinsic `name` on args of dtype dt (the result's too)."""
    ty = T.llvm_type(dt)
    fn = em.ctx.declare(f"{name}.{_suffix(ty)}", ty, [a.type for a in args])
    return em.b.call(fn, args)


def _libm(em, name: str, args: list, dt: DType) -> ir.Value:
    """A libm call per lane: sinf(x) for float32, sin(x) for float64."""
    scalar = dt.element
    fname = name + ("f" if scalar.bits == 32 else "")
    ty = T.llvm_type(scalar)
    fn = em.ctx.declare(fname, ty, [ty] * len(args))
    if dt.lanes == 1:
        return em.b.call(fn, args)
    out = ir.Constant(T.llvm_type(dt), ir.Undefined)
    for k in range(dt.lanes):
        lane = ir.Constant(T.I32, k)
        r = em.b.call(fn, [em.b.extract_element(a, lane) for a in args])
        out = em.b.insert_element(out, r, lane)
    return out


def _float_math(em, op: str, args: list, dt: DType) -> ir.Value:
    """A float intrinsic on values of float32/float64 dtype dt."""
    from tessera.codegen.llvm import vecmath

    b = em.b
    if dt.element == float32 and op in vecmath.VECTOR_FUNCTIONS:
        if dt.lanes > 1 or op in vecmath.SCALAR_TOO:  # Note [scalar tails]
            return vecmath.VECTOR_FUNCTIONS[op](em, args[0], dt)
    if op in _LLVM_FLOAT:
        return llvm_intrinsic(em, _LLVM_FLOAT[op], args, dt)
    if op in _LIBM:
        return _libm(em, op, args, dt)
    one = T.constant(1.0, dt)
    if op == "rsqrt":
        return b.fdiv(one, llvm_intrinsic(em, "llvm.sqrt", args, dt))
    if op == "sigmoid":  # float64 (float32: vecmath.vsigmoid)
        e = _float_math(em, "exp", [b.fneg(args[0])], dt)
        return b.fdiv(one, b.fadd(one, e))
    if op == "fmod":
        return b.frem(args[0], args[1])
    if op == "abs":
        return llvm_intrinsic(em, "llvm.fabs", args, dt)
    raise ValueError(f"{em.name}: unknown float intrinsic {op!r}")


def _int_call(em, e, args: list) -> ir.Value:
    b, dt, op = em.b, e.dtype, e.op
    if op == "bitwise_and":
        return b.and_(*args)
    if op == "bitwise_or":
        return b.or_(*args)
    if op == "bitwise_xor":
        return b.xor(*args)
    if op == "bitwise_not":
        return b.not_(args[0])
    if op == "shift_left":
        return b.shl(*args)
    if op == "shift_right":
        return b.ashr(*args) if dt.is_int else b.lshr(*args)
    if op == "popcount":
        return llvm_intrinsic(em, "llvm.ctpop", args, dt)
    if op == "abs":
        x = args[0]
        neg = b.icmp_signed("<", x, T.constant(0, dt))
        return b.select(neg, b.neg(x), x)
    raise ValueError(f"{em.name}: intrinsic {op!r} is not defined on {dt}")


def _if_then_else(em, e) -> ir.Value:
    cond, t, f = e.args
    lanes = e.dtype.lanes
    if lanes > 1 or cond.dtype.lanes > 1:
        c = em.expr(cond)
        return em.b.select(c, em.broadcast(em.expr(t), lanes), em.broadcast(em.expr(f), lanes))
    b = em.b
    c = em.expr(cond)
    then_bb = em.fn.append_basic_block("ite_then")
    else_bb = em.fn.append_basic_block("ite_else")
    end_bb = em.fn.append_basic_block("ite_end")
    b.cbranch(c, then_bb, else_bb)
    b.position_at_end(then_bb)
    tv = em.expr(t)
    then_end = b.block
    b.branch(end_bb)
    b.position_at_end(else_bb)
    fv = em.expr(f)
    else_end = b.block
    b.branch(end_bb)
    b.position_at_end(end_bb)
    phi = b.phi(tv.type)
    phi.add_incoming(tv, then_end)
    phi.add_incoming(fv, else_end)
    return phi


def _reinterpret(em, e) -> ir.Value:
    (x,) = e.args
    src, dst = x.dtype, e.dtype
    if src.bits * src.lanes != dst.bits * dst.lanes:
        raise ValueError(f"{em.name}: cannot reinterpret {src} as {dst}: sizes differ")
    v = em.expr(x)
    ty = T.llvm_type(dst)
    return v if v.type == ty else em.b.bitcast(v, ty)


def _prefetch(em, e) -> ir.Value:
    """llvm.prefetch of the address of a buffer element (lane 0 of a vector index); the hint
    never faults, and the element is not loaded."""
    element, rw, locality = e.args
    index = em._index(element.buffer, element.indices)
    if isinstance(index, E.Ramp):
        index = index.base
    elif index.dtype.lanes > 1:
        raise ValueError(f"{em.name}: prefetch needs a scalar or contiguous index, got {index}")
    ptr = em._element_ptr(element.buffer, em.expr(index), index.dtype)
    fn = em.ctx.declare("llvm.prefetch.p0", ir.VoidType(), [ptr.type, T.I32, T.I32, T.I32])
    consts = [ir.Constant(T.I32, int(v.value)) for v in (rw, locality)]
    return em.b.call(fn, [ptr, *consts, ir.Constant(T.I32, 1)])  # 1: the data cache


def emit_call(em, e) -> ir.Value:
    """The LLVM value of tir Call e."""
    op = e.op
    if op == "prefetch":
        return _prefetch(em, e)
    if op == "if_then_else":
        return _if_then_else(em, e)
    if op == "likely":
        return em.expr(e.args[0])
    if op == "reinterpret":
        return _reinterpret(em, e)
    if op in ("dot_u8i8", "dot_u8i8_bounded"):
        from tessera.codegen.llvm.int8_dot import emit_dot_call

        return emit_dot_call(em, e)
    if op == "mmla_u8i8":
        from tessera.codegen.llvm.int8_dot import emit_mmla_call

        return emit_mmla_call(em, e)
    if op == "dot_bf16":
        from tessera.codegen.llvm.bf16_dot import emit_dot_call as emit_bf16_dot

        return emit_bf16_dot(em, e)
    if op in ("isnan", "isinf"):
        (x,) = e.args
        v = T.to_f32(em.b, em.expr(x), x.dtype)
        wide = float32.with_lanes(x.dtype.lanes) if T.is_f16like(x.dtype) else x.dtype
        if op == "isnan":
            return em.b.fcmp_unordered("uno", v, v)
        mag = llvm_intrinsic(em, "llvm.fabs", [v], wide)
        return em.b.fcmp_ordered("==", mag, T.constant(float("inf"), wide))
    lanes = e.dtype.lanes
    args = [em.broadcast(em.expr(a), lanes) for a in e.args]
    dt = e.dtype
    if not dt.is_float:
        return _int_call(em, e, args)
    if T.is_f16like(dt):
        wide = float32.with_lanes(lanes)
        args = [T.to_f32(em.b, a, dt) for a in args]
        return T.from_f32(em.b, _float_math(em, op, args, wide), dt)
    return _float_math(em, op, args, dt)
