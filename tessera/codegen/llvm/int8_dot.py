"""`dot_u8i8(acc, a, b)` in LLVM IR: per int32 lane, acc + the dot product of the four uint8
bytes of a with the four int8 bytes of b (Note [int8 dot]).

    lanes 16, avx512vnni            vpdpbusd zmm        (llvm.x86.avx512.vpdpbusd.512)
    (other widths are padded to, or split into, 16 or 8 lanes)
    lanes 8,  avxvnni or vnni+vl    vpdpbusd ymm        (llvm.x86.avx512.vpdpbusd.256)
    lanes 16, avx512bw              2 x vpmaddwd zmm    (exact 16-bit products, see below)
    lanes 8,  avx2                  2 x vpmaddwd ymm
    dot_u8i8_bounded without VNNI   vpmaddubsw + vpmaddwd(1) (Note [bounded pairs])
    lanes 4,  i8mm (AArch64)        usdot v.4s          (llvm.aarch64.neon.usdot: u8 x s8)
    lanes 4,  dotprod (AArch64)     2 x sdot v.4s       (a - 128 as int8, see below)
    fixed-length SVE wider than 128 bits (Note [fixed-length SVE]): the SVE forms of these,
    usdot z.s or 2 x sdot z.s, on whole SVE registers (other widths split or padded)
    otherwise                       shifts, multiplies and adds on int32 lanes

`mmla_u8i8(acc, a, b)` (tir.op.mmla_u8i8, not lane-wise: per 4 lanes a 2x8 by 8x2 product):
    i8mm (AArch64)                  usmmla v.4s per 4 lanes (llvm.aarch64.neon.usmmla)
    otherwise                       two dot_u8i8 steps on the rows and columns each lane takes

The target's features decide (`Target.features`, read from LLVM for the host: never assumed).

Note [int8 dot]
vpmaddubsw (u8 x s8 -> s16, adjacent pairs summed) saturates: 255 * 127 * 2 > 32767, so the
classic vpmaddubsw + vpmaddwd(1) sequence is not exact for full-range weights. Without VNNI we
instead split each int32 lane into its even and odd bytes as 16-bit lanes (uint8 zero-extended,
int8 sign-extended by shifts) and use two vpmaddwd (s16 x s16 -> s32, pairs summed), which never
saturates: the result equals vpdpbusd's bit for bit, at one more multiply per four bytes.
AArch64's sdot (FEAT_DotProd, without I8MM's usdot) multiplies int8 by int8: with a' = a - 128
(the uint8 bytes with their top bit flipped, as int8), a . b = a' . b + 128 * sum(b) =
sdot(a', b) - sdot(-128, b), exact in int32.

Note [bounded pairs]
vpmaddubsw sums the products of adjacent bytes (0 and 1, 2 and 3 of each int32 lane) into a
saturating int16: |a0 b0 + a1 b1| <= 255 (|b0| + |b1|), so where |b0| + |b1| <= 128 the sum is
at most 32640 and never saturates, and vpmaddubsw + vpmaddwd(ones) is exact: dot_u8i8's value
bit for bit, with no byte unpacking of b (three shifts per weight vector on pairs) and one add
fewer. ddddocr_old's int8 products: 2.2-4.4 ms -> 1.5-2.4 ms a class. The bound is a promise
about the weights that only the caller can make: `dot_u8i8_bounded` is the same operation
with it, emitted so on x86 without VNNI (VNNI's vpdpbusd and every other target compute
dot_u8i8 as they would). Who promises: qnn.dense(bounded=True), set at build time where the
weights are constants that keep the bound (topi/qnn.py, `split_bounded`: a weight whose pairs
break it in a few rows keeps the bound in a main part and puts the rest in a small residual
product over those rows).
"""

from __future__ import annotations

from llvmlite import ir

from tessera.codegen.llvm import types as T
from tessera.tir import expr as E


def _is_zero(e) -> bool:
    if isinstance(e, E.Broadcast):
        e = e.value
    return isinstance(e, E.FloatImm | E.IntImm) and e.value == 0


DOT_OPS = ("dot_u8i8", "dot_u8i8_bounded")


def fused_accumulate(em, e, ops=DOT_OPS, emit=None):
    """`x + dot_u8i8(0, a, b)` (how a te.sum of dots lowers) as dot_u8i8(x, a, b): vpdpbusd
    accumulates in place, and LLVM does not fold the add into it. None if e is not that.
    `ops`, `emit`: other accumulating dot intrinsics and their emitter (bf16_dot.py's)."""
    for acc, call in ((e.a, e.b), (e.b, e.a)):
        if isinstance(call, E.Call) and call.op in ops and _is_zero(call.args[0]):
            lanes = e.dtype.lanes
            vals = [em.broadcast(em.expr(v), lanes) for v in (acc, call.args[1], call.args[2])]
            if emit is not None:
                return emit(em, *vals, lanes)
            return emit_dot(em, *vals, lanes, bounded=call.op == "dot_u8i8_bounded")
    return None


def emit_dot_call(em, e, emit=None) -> ir.Value:
    lanes = e.dtype.lanes
    acc, a, b = (em.broadcast(em.expr(v), lanes) for v in e.args)
    if emit is not None:
        return emit(em, acc, a, b, lanes)
    return emit_dot(em, acc, a, b, lanes, bounded=e.op == "dot_u8i8_bounded")


def _features(em) -> frozenset:
    target = em.ctx.target
    try:
        return target.features if target is not None else frozenset()
    except (AttributeError, ValueError):  # a target without CPU features (not x86)
        return frozenset()


def _native_width(feats) -> int:
    """Lanes of the widest int32 vector the dot instructions take on this target (0: none)."""
    if "avx512vnni" in feats or "avx512bw" in feats:
        return 16
    if "avxvnni" in feats or "avx2" in feats:
        return 8
    if "i8mm" in feats or "dotprod" in feats:
        return 4
    return 0


def emit_dot(em, acc, a, b, lanes: int, bounded: bool = False) -> ir.Value:
    """Vectors of other widths (a 28-wide row is 16 + 12 lanes) are padded to, or split into,
    the native width, so that a tail of a row still runs on vpdpbusd. bounded: b's byte pairs
    keep Note [bounded pairs]."""
    feats = _features(em)
    sve = _sve_lanes(em, feats)
    if sve and lanes > 1:
        if lanes == sve:
            return _sve_dot(em, feats, acc, a, b, lanes)
        return _split(em, acc, a, b, lanes, sve, lambda *v: _sve_dot(em, feats, *v, sve))
    width = _native_width(feats)
    if lanes in (8, 16, width) or width == 0 or lanes == 1:
        return _emit_native(em, feats, acc, a, b, lanes, bounded)
    step = width if lanes > 8 or width < 16 else 8
    return _split(em, acc, a, b, lanes, step,
                  lambda *v: _emit_native(em, feats, *v, step, bounded))  # fmt: skip


def _split(em, acc, a, b, lanes, step, native):
    """native(acc, a, b) on pieces of `step` lanes (the last one padded), put back together."""
    pieces = []
    for start in range(0, lanes, step):
        n = min(step, lanes - start)
        parts = [_lanes_of(em, v, start, n, step) for v in (acc, a, b)]
        pieces.append((native(*parts), n))
    return _concat(em, pieces, lanes)


def _lanes_of(em, v, start, n, width):
    """Lanes start .. start+n of v as a vector of `width` lanes (the rest undefined)."""
    src = v.type.count
    mask = [start + k if k < n else src for k in range(width)]  # src: a lane of the undef
    undef = ir.Constant(v.type, ir.Undefined)
    return em.b.shuffle_vector(v, undef, ir.Constant(ir.VectorType(T.I32, width), mask))


def _concat(em, pieces, lanes):
    """The first n lanes of each piece, one after the other, as one vector of `lanes`."""
    ty = ir.VectorType(T.I32, lanes)
    out, offset = None, 0
    for vec, n in pieces:
        undef_lane = vec.type.count  # lane 0 of the undefined second operand
        mask = [i - offset if offset <= i < offset + n else undef_lane for i in range(lanes)]
        undef = ir.Constant(vec.type, ir.Undefined)
        placed = em.b.shuffle_vector(vec, undef, ir.Constant(ty, mask))
        if out is not None:
            keep = [i if i < offset else lanes + i for i in range(lanes)]
            placed = em.b.shuffle_vector(out, placed, ir.Constant(ty, keep))
        out, offset = placed, offset + n
    return out


def _emit_native(em, feats, acc, a, b, lanes, bounded=False):
    vnni512 = "avx512vnni" in feats
    if lanes == 16 and vnni512:
        return _call(em, "llvm.x86.avx512.vpdpbusd.512", lanes, [acc, a, b])
    if lanes == 8 and ("avxvnni" in feats or (vnni512 and "avx512vl" in feats)):
        return _call(em, "llvm.x86.avx512.vpdpbusd.256", lanes, [acc, a, b])
    if lanes == 16 and "avx512bw" in feats and bounded:
        return _madd_bytes(em, "llvm.x86.avx512.pmaddubs.w.512", "llvm.x86.avx512.pmaddw.d.512",
                           acc, a, b, lanes)  # fmt: skip
    if lanes == 8 and "avx2" in feats and bounded:
        return _madd_bytes(em, "llvm.x86.avx2.pmadd.ub.sw", "llvm.x86.avx2.pmadd.wd",
                           acc, a, b, lanes)  # fmt: skip
    if lanes == 16 and "avx512bw" in feats:
        return _madd_pairs(em, "llvm.x86.avx512.pmaddw.d.512", acc, a, b, lanes)
    if lanes == 8 and "avx2" in feats:
        return _madd_pairs(em, "llvm.x86.avx2.pmadd.wd", acc, a, b, lanes)
    if lanes == 4 and "i8mm" in feats:
        return _usdot(em, acc, a, b)
    if lanes == 4 and "dotprod" in feats:
        return _sdot_pair(em, acc, a, b)
    return _generic(em, acc, a, b, lanes)


def emit_mmla_call(em, e) -> ir.Value:
    lanes = e.dtype.lanes
    acc, a, b = (em.broadcast(em.expr(v), lanes) for v in e.args)
    return emit_mmla(em, acc, a, b, lanes)


def emit_mmla(em, acc, a, b, lanes: int) -> ir.Value:
    """mmla_u8i8 on vectors of whole 4-lane segments: one usmmla per segment with FEAT_I8MM,
    else per lane acc + a_row_word0 . b_row_word0 + a_row_word1 . b_row_word1 (dot_u8i8's
    instructions on the operands' words shuffled to the lanes that take them)."""
    if lanes % 4:
        raise ValueError(f"mmla_u8i8 takes whole 4-lane segments, got {lanes} lanes (the "
                         "compute that uses it must be vectorized over them)")  # fmt: skip
    feats = _features(em)
    if "i8mm" in feats:
        sve = _sve_lanes(em, feats)
        if sve and lanes % sve == 0:  # SVE usmmla: every 128-bit segment at once
            return _split(em, acc, a, b, lanes, sve, lambda *v: _sve_mmla(em, *v, sve))
        return _split(em, acc, a, b, lanes, 4, lambda *v: _usmmla(em, *v))

    def pick(v, word, of_row):  # lane 2i + j takes row i's (a) or row j's (b) word
        mask = [s + 2 * ((q // 2) if of_row else (q % 2)) + word for s in range(0, lanes, 4)
                for q in range(4)]  # fmt: skip
        return em.b.shuffle_vector(v, v, ir.Constant(ir.VectorType(T.I32, lanes), mask))

    first = emit_dot(em, acc, pick(a, 0, True), pick(b, 0, False), lanes)
    return emit_dot(em, first, pick(a, 1, True), pick(b, 1, False), lanes)


def _usmmla(em, acc, a, b):
    """AArch64 USMMLA (FEAT_I8MM): acc (2x2 int32) + a (2x8 uint8) times b (2x8 int8)
    transposed."""
    bytes16 = ir.VectorType(T.I8, 16)
    ty = _vec(T.I32, 4)
    fn = em.ctx.declare("llvm.aarch64.neon.usmmla.v4i32.v16i8", ty, [ty, bytes16, bytes16])
    return em.b.call(fn, [acc, em.b.bitcast(a, bytes16), em.b.bitcast(b, bytes16)])


def _usdot(em, acc, a, b):
    """AArch64 USDOT (FEAT_I8MM): per int32 lane, acc + four uint8 x int8 products: exactly
    dot_u8i8, in one instruction."""
    bytes16 = ir.VectorType(T.I8, 16)
    ty = _vec(T.I32, 4)
    fn = em.ctx.declare("llvm.aarch64.neon.usdot.v4i32.v16i8", ty, [ty, bytes16, bytes16])
    return em.b.call(fn, [acc, em.b.bitcast(a, bytes16), em.b.bitcast(b, bytes16)])


def _sdot_pair(em, acc, a, b):
    """AArch64 SDOT (FEAT_DotProd): acc + sdot(a ^ 0x80, b) - sdot(-128, b) (Note [int8 dot])."""
    bytes16 = ir.VectorType(T.I8, 16)
    ty = _vec(T.I32, 4)
    fn = em.ctx.declare("llvm.aarch64.neon.sdot.v4i32.v16i8", ty, [ty, bytes16, bytes16])
    flipped = em.b.bitcast(em.b.xor(a, _const(em, -0x7F7F7F80, T.I32, 4)), bytes16)
    b8 = em.b.bitcast(b, bytes16)
    minus128 = ir.Constant(bytes16, [-128] * 16)
    zero = _const(em, 0, T.I32, 4)
    return em.b.sub(em.b.call(fn, [acc, flipped, b8]), em.b.call(fn, [zero, minus128, b8]))


def _sve_lanes(em, feats) -> int:
    """int32 lanes of an SVE register when the target fixes an SVE length wider than NEON's
    and has SVE's dot instructions (0: use the NEON or x86 forms)."""
    target = em.ctx.target
    bits = getattr(target, "sve_vector_bits", None) if target is not None else None
    if not bits or bits <= 128 or not ({"i8mm", "dotprod"} & feats):
        return 0
    return bits // 32


class _Scalable(ir.Type):
    """An SVE register's type, <vscale x count x element> (llvmlite has no scalable vectors)."""

    def __init__(self, element, count):
        self.element, self.count = element, count

    def _to_string(self):
        return f"<vscale x {self.count} x {self.element}>"

    def __eq__(self, other):
        return isinstance(other, _Scalable) and str(self) == str(other)

    def __hash__(self):
        return hash(str(self))


def _to_scalable(em, v, ty):
    """A fixed vector as the scalable SVE type ty (llvm.vector.insert at 0)."""
    fn = em.ctx.declare(f"llvm.vector.insert.{_mangle(ty)}.{_mangle(v.type)}", ty,
                        [ty, v.type, T.I64])  # fmt: skip
    return em.b.call(fn, [ir.Constant(ty, ir.Undefined), v, ir.Constant(T.I64, 0)])


def _from_scalable(em, v, lanes):
    vec = ir.VectorType(T.I32, lanes)
    fn = em.ctx.declare(f"llvm.vector.extract.v{lanes}i32.nxv4i32", vec, [v.type, T.I64])
    return em.b.call(fn, [v, ir.Constant(T.I64, 0)])


def _sve_mmla(em, acc, a, b, lanes):
    """SVE USMMLA (FEAT_I8MM with SVE): usmmla per 128-bit segment of a whole SVE register."""
    words, bytes_ = _Scalable(T.I32, 4), _Scalable(T.I8, 16)
    fixed = ir.VectorType(T.I8, 4 * lanes)
    fn = em.ctx.declare("llvm.aarch64.sve.usmmla.nxv4i32", words, [words, bytes_, bytes_])
    x, y = (_to_scalable(em, em.b.bitcast(v, fixed), bytes_) for v in (a, b))
    return _from_scalable(em, em.b.call(fn, [_to_scalable(em, acc, words), x, y]), lanes)


def _sve_dot(em, feats, acc, a, b, lanes):
    """SVE USDOT (I8MM) or the SDOT pair of Note [int8 dot] on whole SVE registers: the fixed
    vectors go in (llvm.vector.insert) and come out (llvm.vector.extract), which LLVM folds
    away when the function's vscale_range fixes the length (codegen/llvm/build.py)."""
    words, bytes_ = _Scalable(T.I32, 4), _Scalable(T.I8, 16)
    fixed = ir.VectorType(T.I8, 4 * lanes)

    def scalable(v, ty):
        return _to_scalable(em, v, ty)

    def dot(name, acc_s, x, y):
        fn = em.ctx.declare(f"llvm.aarch64.sve.{name}.nxv4i32", words, [words, bytes_, bytes_])
        return em.b.call(fn, [acc_s, scalable(x, bytes_), scalable(y, bytes_)])

    b8 = em.b.bitcast(b, fixed)
    if "i8mm" in feats:
        out = dot("usdot", scalable(acc, words), em.b.bitcast(a, fixed), b8)
    else:
        flipped = em.b.bitcast(em.b.xor(a, _const(em, -0x7F7F7F80, T.I32, lanes)), fixed)
        minus128 = ir.Constant(fixed, [-128] * (4 * lanes))
        zero = scalable(_const(em, 0, T.I32, lanes), words)
        out = em.b.sub(
            dot("sdot", scalable(acc, words), flipped, b8), dot("sdot", zero, minus128, b8)
        )
    return _from_scalable(em, out, lanes)


def _mangle(ty) -> str:
    if isinstance(ty, _Scalable):
        return f"nxv{ty.count}{ty.element}"
    return f"v{ty.count}{ty.element}"


def _vec(ty, lanes):
    return ty if lanes == 1 else ir.VectorType(ty, lanes)


def _const(em, value, ty, lanes):
    return ir.Constant(_vec(ty, lanes), [value] * lanes if lanes > 1 else value)


def _call(em, name, lanes, args):
    ty = _vec(T.I32, lanes)
    fn = em.ctx.declare(name, ty, [ty] * len(args))
    return em.b.call(fn, args)


def _madd_pairs(em, name, acc, a, b, lanes):
    """acc + vpmaddwd(even bytes) + vpmaddwd(odd bytes) (Note [int8 dot])."""
    bld = em.b
    i16 = ir.VectorType(T.I16, 2 * lanes)
    byte_mask = _const(em, 0x00FF00FF, T.I32, lanes)
    a_even = bld.bitcast(bld.and_(a, byte_mask), i16)
    a_odd = bld.bitcast(bld.and_(bld.lshr(a, _const(em, 8, T.I32, lanes)), byte_mask), i16)
    eight = ir.Constant(i16, [8] * (2 * lanes))
    b_even = bld.ashr(bld.bitcast(bld.shl(b, _const(em, 8, T.I32, lanes)), i16), eight)
    b_odd = bld.ashr(bld.bitcast(b, i16), eight)
    fn = em.ctx.declare(name, _vec(T.I32, lanes), [i16, i16])
    even = bld.call(fn, [a_even, b_even])
    odd = bld.call(fn, [a_odd, b_odd])
    return bld.add(acc, bld.add(even, odd))


def _madd_bytes(em, bytes_name, words_name, acc, a, b, lanes):
    """acc + vpmaddwd(vpmaddubsw(a, b), 1): exact only for bounded pairs of b (Note [bounded
    pairs])."""
    bld = em.b
    i8, i16 = ir.VectorType(T.I8, 4 * lanes), ir.VectorType(T.I16, 2 * lanes)
    pairs = bld.call(em.ctx.declare(bytes_name, i16, [i8, i8]),
                     [bld.bitcast(a, i8), bld.bitcast(b, i8)])  # fmt: skip
    words = em.ctx.declare(words_name, _vec(T.I32, lanes), [i16, i16])
    return bld.add(acc, bld.call(words, [pairs, ir.Constant(i16, [1] * (2 * lanes))]))


def _generic(em, acc, a, b, lanes):
    """Four byte products per lane with shifts: uint8 bytes of a, sign-extended bytes of b."""
    bld = em.b
    out = acc
    for j in range(4):
        aj = bld.and_(bld.lshr(a, _const(em, 8 * j, T.I32, lanes)), _const(em, 255, T.I32, lanes))
        bj = bld.ashr(
            bld.shl(b, _const(em, 24 - 8 * j, T.I32, lanes)), _const(em, 24, T.I32, lanes)
        )
        out = bld.add(out, bld.mul(aj, bj))
    return out
