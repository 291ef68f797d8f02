"""`dot_bf16(acc, a, b)` in LLVM IR: per float32 lane, acc + the products of the two bfloat16
halves of the int32 words a and b (Note [bf16 dot]).

    lanes 16, avx512bf16            vdpbf16ps zmm     (llvm.x86.avx512bf16.dpbf16ps.512)
    lanes 8,  avx512bf16 + vl       vdpbf16ps ymm     (llvm.x86.avx512bf16.dpbf16ps.256)
    otherwise                       each half widened to float32 (a shift or a mask), two
                                    multiply-adds: the same numbers, several instructions

The target's features decide (`Target.features`, read from LLVM for the host: never assumed).

Note [bf16 dot]
vdpbf16ps computes acc + a_hi * b_hi, rounds to float32, then + a_lo * b_lo, rounds again
(round to nearest even; denormal inputs and results flushed to zero). The product of two
bfloat16 (8-bit significands) is exact in float32, so each step is one rounding, like an FMA:
the emulation (high halves first, then low) gives the same float32 except where a denormal is
involved, which the instruction flushes and the emulation keeps. A te.sum of dots lowers to
`acc + dot_bf16(0, a, b)`; fused_accumulate makes it dot_bf16(acc, a, b), as vdpbf16ps
accumulates: one rounding fewer per step than the expression as written (the interpreter and
the C target keep the two apart), so they may differ in the last bit.
"""

from __future__ import annotations

from llvmlite import ir

from tessera.codegen.llvm import int8_dot
from tessera.codegen.llvm import types as T
from tessera.codegen.llvm.int8_dot import _concat, _features, _lanes_of


class _BFloat(ir.types.Type):
    """LLVM's `bfloat` (llvmlite's IR builder has no such type): the intrinsic's operands."""

    null = "0.0"

    def _to_string(self) -> str:
        return "bfloat"

    def __eq__(self, other) -> bool:
        return isinstance(other, _BFloat)

    def __hash__(self) -> int:
        return hash("bfloat")


def fused_accumulate(em, e):
    """`x + dot_bf16(0, a, b)` (how a te.sum of dots lowers) as dot_bf16(x, a, b): vdpbf16ps
    accumulates in place. None if e is not that."""
    return int8_dot.fused_accumulate(em, e, ("dot_bf16",), emit_dot)


def emit_dot_call(em, e) -> ir.Value:
    return int8_dot.emit_dot_call(em, e, emit_dot)


def native_lanes(feats) -> tuple[int, ...]:
    """The vector widths vdpbf16ps takes on a target with these features (() : none)."""
    if "avx512bf16" not in feats:
        return ()
    return (16, 8) if "avx512vl" in feats else (16,)


def emit_dot(em, acc, a, b, lanes: int) -> ir.Value:
    """Vectors of other widths (a 7-column tile, 16 + 12 lanes) are padded to, or split into,
    native widths, so that a tail still runs on vdpbf16ps."""
    native = native_lanes(_features(em))
    if lanes in native:
        return _native(em, acc, a, b, lanes)
    if not native or lanes == 1:
        return _emulated(em, acc, a, b, lanes)
    pieces, start = [], 0
    while start < lanes:
        n = min(16, lanes - start)
        width = 8 if n <= 8 and 8 in native else 16
        parts = [_lanes_of(em, v, start, n, width) for v in (acc, a, b)]
        pieces.append((_native(em, *parts, width), n))
        start += n
    return _concat(em, pieces, lanes)


def _native(em, acc, a, b, lanes):
    bf = ir.VectorType(_BFloat(), 2 * lanes)
    ty = ir.VectorType(T.F32, lanes)
    fn = em.ctx.declare(f"llvm.x86.avx512bf16.dpbf16ps.{32 * lanes}", ty, [ty, bf, bf])
    return em.b.call(fn, [acc, em.b.bitcast(a, bf), em.b.bitcast(b, bf)])


def _emulated(em, acc, a, b, lanes):
    """acc + hi(a) hi(b), then + lo(a) lo(b) (Note [bf16 dot])."""
    bld = em.b
    i32 = T.I32 if lanes == 1 else ir.VectorType(T.I32, lanes)
    f32 = T.F32 if lanes == 1 else ir.VectorType(T.F32, lanes)

    def const(v):
        return ir.Constant(i32, v if lanes == 1 else [v] * lanes)

    def hi(w):
        return bld.bitcast(bld.and_(w, const(-65536)), f32)

    def lo(w):
        return bld.bitcast(bld.shl(w, const(16)), f32)

    out = bld.fadd(acc, bld.fmul(hi(a), hi(b)))
    return bld.fadd(out, bld.fmul(lo(a), lo(b)))
