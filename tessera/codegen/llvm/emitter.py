"""Emit one LLVM function body from tir: every expression and statement node.

A `FunctionEmitter` fills one `ir.Function` whose buffer pointers and scalar variables are
already bound (`bind_buffer`, `bind_var`); `ModuleContext` holds what functions of one LLVM
module share (declarations, unique names, the target). Intrinsic calls are in `intrinsics.py`,
the outlining of parallel loops in `parallel.py`.

Semantics (the contract in docs/architecture.md): `//` and `%` floor, `Div`/`Mod` truncate
(integers by 0 give 0: Note [integer division by zero]); float comparisons are ordered (`!=` is
unordered: NaN != NaN); Min/Max are `a < b ? a : b`, on floats NaN when either operand is NaN
(numpy's minimum/maximum); bfloat16 and float16 arithmetic is computed in float32 and rounded
back; a float `a * b + c` may be contracted into one fused multiply-add.
"""

from __future__ import annotations

import math

from llvmlite import ir

from tessera.codegen.llvm import types as T
from tessera.codegen.llvm.transpose import TileReads
from tessera.ir.dtype import DType, float32, int64
from tessera.tir import expr as E
from tessera.tir import stmt as S
from tessera.tir.buffer import Buffer

_INT_CMP = {"EQ": "==", "NE": "!=", "LT": "<", "LE": "<=", "GT": ">", "GE": ">="}


class ModuleContext:
    """What the functions of one LLVM module share."""

    def __init__(self, module: ir.Module, target, fast_math: bool = False):
        self.module = module
        self.target = target
        # "contract" lets LLVM fuse a*b + c into one FMA (clang's -ffp-contract=fast, TVM's
        # default): one rounding instead of two, and twice the throughput of a matmul loop.
        self.fastmath = ("fast",) if fast_math else ("contract",)
        self._names: dict[str, int] = {}

    def unique_name(self, base: str) -> str:
        n = self._names.get(base, 0)
        self._names[base] = n + 1
        return base if n == 0 else f"{base}_{n}"

    def declare(self, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
        fn = self.module.globals.get(name)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(ret, args), name=name)
        return fn


def known_divisor(e) -> int:
    """A number that provably divides integer expression e (0 when e is the constant 0)."""
    if isinstance(e, E.IntImm):
        return abs(e.value)
    if isinstance(e, (E.Add, E.Sub)):
        return math.gcd(known_divisor(e.a), known_divisor(e.b))
    if isinstance(e, E.Mul):
        return known_divisor(e.a) * known_divisor(e.b)
    if isinstance(e, E.Cast) and e.dtype.is_integer and e.value.dtype.is_integer:
        return known_divisor(e.value)
    return 1


def _alignment(index, itemsize: int, base_align: int) -> int:
    """Bytes of alignment of &buf[index] for a buffer whose start is aligned to base_align."""
    d = known_divisor(index)
    if d == 0:
        return base_align
    return max(1, min(base_align, itemsize * (d & -d)))


class FunctionEmitter:
    """Emits tir into one LLVM function; statements append to `self.b`'s current block."""

    def __init__(self, ctx: ModuleContext, fn: ir.Function, name: str):
        self.ctx = ctx
        self.fn = fn
        self.name = name  # the PrimFunc's name, for error messages and outlined functions
        entry = fn.append_basic_block("entry")
        self.alloca_builder = ir.IRBuilder(entry)  # allocas stay at the top of the entry block
        self.b = ir.IRBuilder(fn.append_basic_block("body"))
        self.vars: dict[int, ir.Value] = {}
        self.buffers: dict[int, ir.Value] = {}
        self.buffer_align: dict[int, int] = {}  # bytes the start of each buffer is aligned to
        self._nsw = False  # emitting the index of a buffer access: Note [index arithmetic nsw]
        self.tiles = TileReads()  # Note [transposed loads]

    def finish(self, ret=None):
        """Close the function: jump from the allocas to the body, return 0 at the end."""
        self.alloca_builder.branch(self.fn.blocks[1])
        if not self.b.block.is_terminated:
            self.b.ret(ret if ret is not None else ir.Constant(T.I32, 0))

    def bind_var(self, var: E.Var, value: ir.Value):
        self.vars[id(var)] = value

    def bind_buffer(self, buf: Buffer, ptr: ir.Value, align: int):
        self.buffers[id(buf)] = ptr
        self.buffer_align[id(buf)] = align

    def _align_of(self, buf: Buffer, index) -> int:
        if buf.dtype.lanes != 1:
            return buf.dtype.element.itemsize
        return _alignment(index, buf.dtype.itemsize, self.buffer_align[id(buf)])

    def buffer_ptr(self, buf: Buffer) -> ir.Value:
        try:
            return self.buffers[id(buf)]
        except KeyError:
            raise ValueError(
                f"{self.name}: buffer {buf.name} is used but is neither a parameter nor allocated"
            ) from None

    # -- helpers ---------------------------------------------------------------------------------

    def alloca(self, ty: ir.Type, align: int = 64, name: str = "") -> ir.Value:
        slot = self.alloca_builder.alloca(ty, name=name)
        slot.align = align
        return slot

    def check_rc(self, rc: ir.Value):
        """Return rc from this function when it is not 0 (an error from a callee)."""
        fail = self.fn.append_basic_block("fail")
        ok = self.fn.append_basic_block("ok")
        self.b.cbranch(self.b.icmp_signed("!=", rc, ir.Constant(rc.type, 0)), fail, ok)
        self.b.position_at_end(fail)
        self.b.ret(rc)
        self.b.position_at_end(ok)

    def broadcast(self, v: ir.Value, lanes: int) -> ir.Value:
        if lanes == 1 or isinstance(v.type, ir.VectorType):
            return v
        vec_ty = ir.VectorType(v.type, lanes)
        one = self.b.insert_element(ir.Constant(vec_ty, ir.Undefined), v, ir.Constant(T.I32, 0))
        mask = ir.Constant(ir.VectorType(T.I32, lanes), [0] * lanes)
        return self.b.shuffle_vector(one, ir.Constant(vec_ty, ir.Undefined), mask)

    def to_i64(self, v: ir.Value, dt: DType) -> ir.Value:
        return T.cast(self.b, v, dt, int64.with_lanes(dt.lanes))

    def _operands(self, e):
        a, b = self.expr(e.a), self.expr(e.b)
        lanes = max(e.a.dtype.lanes, e.b.dtype.lanes)
        return self.broadcast(a, lanes), self.broadcast(b, lanes)

    # -- expressions -----------------------------------------------------------------------------

    def expr(self, e) -> ir.Value:
        method = getattr(self, f"e_{type(e).__name__}", None)
        if method is None:
            raise TypeError(f"{self.name}: the LLVM code generator cannot emit {type(e).__name__}")
        return method(e)

    def e_IntImm(self, e):
        return T.constant(e.value, e.dtype)

    def e_FloatImm(self, e):
        return T.constant(e.value, e.dtype)

    def e_Var(self, e):
        try:
            return self.vars[id(e)]
        except KeyError:
            raise ValueError(f"{self.name}: variable {e.name} is used but not defined") from None

    def _arith(self, e, int_op, uint_op, float_op):
        dt = e.dtype
        a, b = self._operands(e)
        if dt.is_float:
            if T.is_f16like(dt):
                a, b = T.to_f32(self.b, a, dt), T.to_f32(self.b, b, dt)
            r = float_op(a, b, flags=self.ctx.fastmath)
            return T.from_f32(self.b, r, dt) if T.is_f16like(dt) else r
        if dt.is_int and self._nsw:
            return int_op(a, b, flags=("nsw",))
        return (int_op if dt.is_int else uint_op)(a, b)

    def e_Add(self, e):
        if e.dtype.element.code == "int":  # acc + dot_u8i8(0, a, b) -> one vpdpbusd
            from tessera.codegen.llvm.int8_dot import emit_mmla, fused_accumulate

            fused = fused_accumulate(self, e)
            if fused is None:  # acc + mmla_u8i8(0, a, b) -> one usmmla
                fused = fused_accumulate(self, e, ("mmla_u8i8",), emit_mmla)
            if fused is not None:
                return fused
        if e.dtype.element.code == "float":  # acc + dot_bf16(0, a, b) -> one vdpbf16ps
            from tessera.codegen.llvm.bf16_dot import fused_accumulate as fused_bf16

            fused = fused_bf16(self, e)
            if fused is not None:
                return fused
        return self._arith(e, self.b.add, self.b.add, self.b.fadd)

    def e_Sub(self, e):
        return self._arith(e, self.b.sub, self.b.sub, self.b.fsub)

    def e_Mul(self, e):
        return self._arith(e, self.b.mul, self.b.mul, self.b.fmul)

    # Note [integer division by zero]
    # x / 0, x % 0 (and INT_MIN / -1) trap on x86: the process dies of SIGFPE. Integer division
    # and modulo follow numpy instead: by 0 they give 0, and INT_MIN / -1 wraps to INT_MIN. A
    # constant divisor other than 0 and -1 (all of index arithmetic) needs no guard.

    def _int_div_mod(self, e):
        """(a, divisor to divide by, is b zero, is b -1 or None): b made safe to divide by."""
        dt = e.dtype
        a, b = self._operands(e)
        divisor = e.b.value if isinstance(e.b, E.Broadcast) else e.b
        if isinstance(divisor, E.IntImm) and divisor.value not in (0, -1):
            return a, b, None, None
        is_zero = self.b.icmp_unsigned("==", b, T.constant(0, dt))
        is_minus_one = self.b.icmp_signed("==", b, T.constant(-1, dt)) if dt.is_int else None
        unsafe = is_zero if is_minus_one is None else self.b.or_(is_zero, is_minus_one)
        return a, self.b.select(unsafe, T.constant(1, dt), b), is_zero, is_minus_one

    def _int_quotient(self, e, trunc_quotient):
        """The quotient of integer Div / FloorDiv with b = 0 and b = -1 handled (see the Note)."""
        a, b, is_zero, is_minus_one = self._int_div_mod(e)
        q = trunc_quotient(a, b)
        if is_minus_one is not None:
            q = self.b.select(is_minus_one, self.b.neg(a), q)  # wraps: -INT_MIN is INT_MIN
        if is_zero is not None:
            q = self.b.select(is_zero, T.constant(0, e.dtype), q)
        return q

    def e_Div(self, e):
        if e.dtype.is_float:
            return self._arith(e, self.b.sdiv, self.b.udiv, self.b.fdiv)
        return self._int_quotient(e, self.b.sdiv if e.dtype.is_int else self.b.udiv)

    def e_Mod(self, e):
        if e.dtype.is_float:
            return self._arith(e, self.b.srem, self.b.urem, self.b.frem)
        a, b, _, _ = self._int_div_mod(e)  # a % 1 is 0: right for b = 0 and b = -1
        return (self.b.srem if e.dtype.is_int else self.b.urem)(a, b)

    def _floor_adjust(self, r, b, dt):
        """(q, r) of truncating division turned into floor division's: adjust where the
        remainder is nonzero and its sign differs from the divisor's."""
        zero = T.constant(0, dt)
        nonzero = self.b.icmp_signed("!=", r, zero)
        signs_differ = self.b.icmp_signed("<", self.b.xor(r, b), zero)
        return self.b.and_(nonzero, signs_differ)

    def e_FloorDiv(self, e):
        if not e.dtype.is_int:
            return self._floor_float(e, want_mod=False) if e.dtype.is_float else self.e_Div(e)

        def floor_quotient(a, b):
            q, r = self.b.sdiv(a, b), self.b.srem(a, b)
            return self.b.sub(q, self.b.zext(self._floor_adjust(r, b, e.dtype), q.type))

        return self._int_quotient(e, floor_quotient)

    def e_FloorMod(self, e):
        if not e.dtype.is_int:
            return self._floor_float(e, want_mod=True) if e.dtype.is_float else self.e_Mod(e)
        a, b, _, _ = self._int_div_mod(e)
        r = self.b.srem(a, b)
        adjust = self._floor_adjust(r, b, e.dtype)
        return self.b.add(r, self.b.select(adjust, b, T.constant(0, e.dtype)))

    def _floor_float(self, e, want_mod: bool):
        from tessera.codegen.llvm.intrinsics import llvm_intrinsic

        dt = e.dtype
        wide = float32.with_lanes(dt.lanes) if T.is_f16like(dt) else dt
        a, b = self._operands(e)
        a, b = T.to_f32(self.b, a, dt), T.to_f32(self.b, b, dt)
        q = llvm_intrinsic(self, "llvm.floor", [self.b.fdiv(a, b)], wide)
        r = self.b.fsub(a, self.b.fmul(q, b)) if want_mod else q
        return T.from_f32(self.b, r, dt)

    def _min_max(self, e, op):
        dt = e.dtype
        a, b = self._operands(e)
        if dt.is_float:
            a, b = T.to_f32(self.b, a, dt), T.to_f32(self.b, b, dt)
            # `a op b or a is NaN`: NaN in either operand propagates (numpy's minimum/maximum)
            take_a = self.b.or_(self.b.fcmp_ordered(op, a, b), self.b.fcmp_unordered("uno", a, a))
            r = self.b.select(take_a, a, b)
            return T.from_f32(self.b, r, dt)
        cmp = self.b.icmp_signed if dt.is_int else self.b.icmp_unsigned
        return self.b.select(cmp(op, a, b), a, b)

    def e_Min(self, e):
        return self._min_max(e, "<")

    def e_Max(self, e):
        return self._min_max(e, ">")

    def _compare(self, e):
        dt = e.a.dtype.with_lanes(max(e.a.dtype.lanes, e.b.dtype.lanes))
        op = _INT_CMP[type(e).__name__]
        a, b = self._operands(e)
        if dt.is_float:
            a, b = T.to_f32(self.b, a, dt), T.to_f32(self.b, b, dt)
            if op == "!=":
                return self.b.fcmp_unordered(op, a, b)
            return self.b.fcmp_ordered(op, a, b)
        return (self.b.icmp_signed if dt.is_int else self.b.icmp_unsigned)(op, a, b)

    e_EQ = e_NE = e_LT = e_LE = e_GT = e_GE = _compare

    def e_And(self, e):
        return self.b.and_(*self._operands(e))

    def e_Or(self, e):
        return self.b.or_(*self._operands(e))

    def e_Not(self, e):
        return self.b.not_(self.expr(e.a))

    def e_Select(self, e):
        lanes = e.dtype.lanes
        cond = self.expr(e.condition)
        t = self.broadcast(self.expr(e.true_value), lanes)
        f = self.broadcast(self.expr(e.false_value), lanes)
        return self.b.select(cond, t, f)

    def e_Cast(self, e):
        src = e.value.dtype
        v = self.expr(e.value)
        if src.lanes == 1 and e.dtype.lanes > 1:
            return self.broadcast(T.cast(self.b, v, src, e.dtype.element), e.dtype.lanes)
        return T.cast(self.b, v, src, e.dtype)

    def e_Let(self, e):
        old = self.vars.get(id(e.var))
        self.bind_var(e.var, self.expr(e.value))
        result = self.expr(e.body)
        if old is None:
            del self.vars[id(e.var)]
        else:
            self.vars[id(e.var)] = old
        return result

    def e_Call(self, e):
        from tessera.codegen.llvm.intrinsics import emit_call

        return emit_call(self, e)

    def e_Ramp(self, e):
        base = self.broadcast(self.expr(e.base), e.lanes)
        el = e.base.dtype
        if isinstance(e.stride, E.IntImm):
            steps = ir.Constant(
                base.type, [T.constant(k * e.stride.value, el) for k in range(e.lanes)]
            )
            return self.b.add(base, steps, flags=self._index_flags(el))
        lane_ids = ir.Constant(base.type, [T.constant(k, el) for k in range(e.lanes)])
        stride = self.broadcast(self.expr(e.stride), e.lanes)
        flags = self._index_flags(el)
        return self.b.add(base, self.b.mul(stride, lane_ids, flags=flags), flags=flags)

    def e_Broadcast(self, e):
        return self.broadcast(self.expr(e.value), e.lanes)

    def e_StringImm(self, e):
        raise TypeError(f"{self.name}: string constants ({e.value!r}) cannot be compiled")

    # -- memory ---------------------------------------------------------------------------------

    # Note [index arithmetic nsw]
    # The adds, subtracts and multiplies of a buffer access's index are emitted `nsw` (no signed
    # wrap) when they provably cannot wrap: the index is int64 (no buffer has 2^62 elements), or
    # it is int32 and the buffer's extent is a constant of at most 2^30 elements. flatten_storage
    # makes an index int64 when its buffer may hold 2^31 elements or more; an int32 row-major
    # offset sum(i_k * stride_k) with every i_k in range stays below the extent at every partial
    # sum, and the out-of-range indices of guarded accesses (padding) exceed it by a few rows,
    # far less than the 2^30 of headroom. Without `nsw`, LLVM must sign-extend each int32 index
    # to 64 bits on its own (it cannot widen `(i + 1) * W` to `i * W + W`), which on a machine
    # without memory operands (ARM) costs 3-4 instructions per guarded load. A buffer of symbolic
    # extent has int64 offsets (flatten_storage), so `nsw`; all arithmetic outside an index wraps
    # (integer tensors wrap as numpy's do), a loaded value inside an index (a gather) excepted:
    # its access is out of bounds if the sum wraps.
    NSW_INT32_EXTENT = 1 << 30

    def _index_flags(self, dt: DType) -> tuple:
        return ("nsw",) if self._nsw and dt.element.is_int else ()

    def _index_value(self, buf: Buffer, index) -> ir.Value:
        """The LLVM value of `index` into `buf`, its arithmetic nsw where Note [index arithmetic
        nsw] allows."""
        old = self._nsw
        extent = buf.shape[0] if len(buf.shape) == 1 else None
        self._nsw = index.dtype.element.bits >= 64 or (
            isinstance(extent, E.IntImm) and 0 <= extent.value <= self.NSW_INT32_EXTENT
        )
        try:
            return self.expr(index)
        finally:
            self._nsw = old

    def _index(self, buf: Buffer, indices) -> E.Expr:
        if len(indices) != 1:
            raise ValueError(
                f"{self.name}: buffer {buf.name} is indexed with {len(indices)} indices; code "
                "generation needs flattened (1-D) buffers (run the tir passes first)"
            )
        return indices[0]

    def _element_ptr(self, buf: Buffer, index_value: ir.Value, index_dtype: DType):
        ptr = self.buffer_ptr(buf)
        return self.b.gep(ptr, [self.to_i64(index_value, index_dtype)], inbounds=True)

    def _contiguous(self, index) -> bool:
        return isinstance(index, E.Ramp) and E.is_const_int(index.stride, 1)

    def e_BufferLoad(self, e):
        buf, index = e.buffer, self._index(e.buffer, e.indices)
        el = buf.dtype
        if index.dtype.lanes == 1:
            p = self._element_ptr(buf, self._index_value(buf, index), index.dtype)
            v = self.b.load(p, align=self._align_of(buf, index))
            return self._from_storage(v, el)
        if buf.dtype.lanes != 1:
            raise ValueError(f"{self.name}: vector index into vector-typed buffer {buf.name}")
        lanes = index.dtype.lanes
        if self._contiguous(index):
            p = self._element_ptr(buf, self._index_value(buf, index.base), index.base.dtype)
            vec_ty = T.storage_type(el.with_lanes(lanes))
            p = self.b.bitcast(p, vec_ty.as_pointer())
            v = self.b.load(p, align=self._align_of(buf, index.base))
            return self._from_storage(v, el.with_lanes(lanes))
        column = self.tiles.load(self, buf, index)
        if column is not None:
            return column
        stride = _small_stride(index)
        if stride and not el.is_bool:
            return self._strided(buf, index, lanes, stride)
        clamped = _clamped_ramp(index)
        if clamped is not None and not el.is_bool:
            return self._clamped(buf, index, lanes, *clamped)
        return self._gather(buf, index, lanes)

    def _clamped(self, buf, index, lanes: int, start, inside):
        """Note [clamped loads]: one vector load at `start` where the lanes are `inside` their
        clamp, else the lanes one by one."""
        vec_ty = T.llvm_type(buf.dtype.with_lanes(lanes))
        with self.b.if_else(self.expr(inside)) as (then, otherwise):
            with then:
                p = self._element_ptr(buf, self._index_value(buf, start), start.dtype)
                p = self.b.bitcast(p, T.storage_type(buf.dtype.with_lanes(lanes)).as_pointer())
                fast = self.b.load(p, align=self._align_of(buf, start))
                fast_end = self.b.block
            with otherwise:
                slow = self._gather(buf, index, lanes)
                slow_end = self.b.block
        phi = self.b.phi(vec_ty)
        phi.add_incoming(fast, fast_end)
        phi.add_incoming(slow, slow_end)
        return phi

    def _strided(self, buf, index, lanes: int, stride: int):
        """Lanes `stride` apart (Note [strided loads]): one load of the span from the first to
        the last lane, then every stride-th element of it."""
        span = (lanes - 1) * stride + 1
        p = self._element_ptr(buf, self._index_value(buf, index.base), index.base.dtype)
        p = self.b.bitcast(p, T.storage_type(buf.dtype.with_lanes(span)).as_pointer())
        wide = self.b.load(p, align=self._align_of(buf, index.base))
        mask = ir.Constant(ir.VectorType(T.I32, lanes), [k * stride for k in range(lanes)])
        return self.b.shuffle_vector(wide, ir.Constant(wide.type, ir.Undefined), mask)

    def _gather(self, buf, index, lanes):
        """A load of scattered elements, one lane at a time (LLVM forms gathers where they pay);
        the index's broadcast terms go into the base pointer (Note [gather base])."""
        el = buf.dtype
        ptr = self.buffer_ptr(buf)
        terms = _add_terms(index)
        scalar = [t.value for t in terms if isinstance(t, E.Broadcast)]
        vector = [t for t in terms if not isinstance(t, E.Broadcast)]
        split = bool(scalar and vector)  # (base + offset may lie outside the buffer: no inbounds)
        if split:
            offset = _sum(scalar)
            ptr = self.b.gep(ptr, [self.to_i64(self._index_value(buf, offset), offset.dtype)])
            index = _sum(vector)
        idx = self._index_value(buf, index)
        out = ir.Constant(T.llvm_type(el.with_lanes(lanes)), ir.Undefined)
        for k in range(lanes):
            lane = self.b.extract_element(idx, ir.Constant(T.I32, k))
            p = self.b.gep(ptr, [self.to_i64(lane, index.dtype.element)], inbounds=not split)
            v = self._from_storage(self.b.load(p), el)
            out = self.b.insert_element(out, v, ir.Constant(T.I32, k))
        return out

    def _from_storage(self, v, dt: DType):
        return self.b.trunc(v, T.llvm_type(dt)) if dt.is_bool else v

    def _to_storage(self, v, dt: DType):
        return self.b.zext(v, T.storage_type(dt)) if dt.is_bool else v

    def s_BufferStore(self, s):
        buf, index = s.buffer, self._index(s.buffer, s.indices)
        el = buf.dtype
        lanes = index.dtype.lanes
        value = self.broadcast(self.expr(s.value), lanes * el.lanes)
        value = self._to_storage(value, el.with_lanes(lanes * el.lanes))
        self.tiles.forget(buf)
        if lanes == 1:
            p = self._element_ptr(buf, self._index_value(buf, index), index.dtype)
            self.b.store(value, p, align=self._align_of(buf, index))
        elif self._contiguous(index) and el.lanes == 1:
            p = self._element_ptr(buf, self._index_value(buf, index.base), index.base.dtype)
            p = self.b.bitcast(p, value.type.as_pointer())
            self.b.store(value, p, align=self._align_of(buf, index.base))
        else:
            idx = self._index_value(buf, index)
            for k in range(lanes):
                lane_idx = self.b.extract_element(idx, ir.Constant(T.I32, k))
                lane_val = self.b.extract_element(value, ir.Constant(T.I32, k))
                self.b.store(lane_val, self._element_ptr(buf, lane_idx, index.dtype.element))

    # -- statements ------------------------------------------------------------------------------

    def stmt(self, s):
        method = getattr(self, f"s_{type(s).__name__}", None)
        if method is None:
            raise TypeError(f"{self.name}: the LLVM code generator cannot emit {type(s).__name__}")
        if isinstance(s, _STRAIGHT):
            method(s)
            return
        saved = self.tiles.enter(None)  # a loop or a branch: its blocks read tiles afresh
        method(s)
        self.tiles.leave(saved)

    def s_SeqStmt(self, s):
        saved = self.tiles.enter(s.seq)
        for item in s.seq:
            self.stmt(item)
        self.tiles.leave(saved)

    def s_Evaluate(self, s):
        if not isinstance(s.value, (E.IntImm, E.FloatImm)):
            self.expr(s.value)
            self.tiles.forget()  # a call may write any buffer

    def s_AttrStmt(self, s):
        self.stmt(s.body)

    def s_LetStmt(self, s):
        self.bind_var(s.var, self.expr(s.value))
        self.stmt(s.body)

    def s_IfThenElse(self, s):
        cond = self.expr(s.condition)
        then_bb = self.fn.append_basic_block("if_then")
        end_bb = self.fn.append_basic_block("if_end")
        else_bb = self.fn.append_basic_block("if_else") if s.else_case is not None else end_bb
        self.b.cbranch(cond, then_bb, else_bb)
        self.b.position_at_end(then_bb)
        self.stmt(s.then_case)
        self.b.branch(end_bb)
        if s.else_case is not None:
            self.b.position_at_end(else_bb)
            self.stmt(s.else_case)
            self.b.branch(end_bb)
        self.b.position_at_end(end_bb)

    def serial_loop(self, lo: ir.Value, hi: ir.Value, body):
        """for (i = lo; i < hi; ++i) body(i), in the shape LLVM's loop passes recognize."""
        pre = self.b.block
        header = self.fn.append_basic_block("for_begin")
        body_bb = self.fn.append_basic_block("for_body")
        end = self.fn.append_basic_block("for_end")
        self.b.branch(header)
        self.b.position_at_end(header)
        i = self.b.phi(lo.type, name="i")
        i.add_incoming(lo, pre)
        self.b.cbranch(self.b.icmp_signed("<", i, hi), body_bb, end)
        self.b.position_at_end(body_bb)
        body(i)
        i.add_incoming(self.b.add(i, ir.Constant(lo.type, 1), flags=("nsw",)), self.b.block)
        self.b.branch(header)
        self.b.position_at_end(end)

    def s_For(self, s):
        if s.kind == S.ForKind.THREAD_BINDING:
            raise ValueError(
                f"{self.name}: loop {s.loop_var.name} is bound to "
                f"{s.thread_tag or 'a GPU thread'}, which a CPU target cannot run"
            )
        if s.kind == S.ForKind.PARALLEL:
            from tessera.codegen.llvm.parallel import emit_parallel_for

            emit_parallel_for(self, s)
            return
        lo = self.expr(s.min)
        hi = self.b.add(lo, self.expr(s.extent))

        def body(i):
            self.bind_var(s.loop_var, i)
            self.stmt(s.body)

        self.serial_loop(lo, hi, body)

    def s_Allocate(self, s):
        self.allocate(s.buffer, lambda: self.stmt(s.body))

    def allocate(self, buf, emit_body):
        """Bind `buf` to new storage (a local constant size: the stack; else the runtime's
        heap, freed after) around `emit_body()`."""
        size = buf.num_elements()
        el_ty = T.storage_type(buf.dtype)
        if buf.scope == "local" and isinstance(size, E.IntImm):
            slot = self.alloca(ir.ArrayType(el_ty, max(size.value, 1)), name=buf.name)
            self.bind_buffer(buf, self.b.bitcast(slot, el_ty.as_pointer()), 64)
            emit_body()
            return
        alloc = self.ctx.declare("tessera_alloc", T.I8.as_pointer(), [T.I64])
        free = self.ctx.declare("tessera_free", ir.VoidType(), [T.I8.as_pointer()])
        nbytes = self.b.mul(
            self.to_i64(self.expr(size), size.dtype), ir.Constant(T.I64, buf.dtype.itemsize)
        )
        raw = self.b.call(alloc, [nbytes])
        failed = self.b.icmp_unsigned("==", raw, ir.Constant(raw.type, None))
        self.check_rc(self.b.select(failed, ir.Constant(T.I32, -1), ir.Constant(T.I32, 0)))
        self.bind_buffer(buf, self.b.bitcast(raw, el_ty.as_pointer()), 64)
        emit_body()
        self.b.call(free, [raw])


# statements that run in the sequence around them (no blocks of their own): Note [transposed loads]
_STRAIGHT = (S.SeqStmt, S.LetStmt, S.AttrStmt, S.BufferStore, S.Evaluate)


# Note [strided loads]: a vector load whose lanes are 2 to MAX_LOAD_STRIDE elements apart (a
# stride-2 conv or pool reading every other column) was one scalar load per lane (LLVM made a
# gather of it). It is one load of the elements from the first lane to the last, all inside
# the buffer because both ends are, and a shuffle. Strides up to 8 take it: a layout transform
# out of blocks of 8 channels (NCHW8c -> NCHW, an AVX2 int8 conv's product read back by a float
# epilogue) reads lanes 8 apart, which as scalar loads cost each vector eight index extractions
# and inserts (ddddocr_old's eleven such epilogues 2.20 -> 1.69 ms on AVX2, 1 thread); the
# neighbours the span loads are the other channels of the block, which the next vectors read
# from L1. Wider strides would load mostly unused data. Where one straight-line sequence reads
# every column of such a tile, the columns come from contiguous loads and a register transpose
# instead (Note [transposed loads] in transpose.py); this path is for the loads left over.
MAX_LOAD_STRIDE = 8


# Note [gather base]
# A vector load of scattered lanes becomes one scalar load per lane, each at the base pointer
# plus its lane of the index vector. Where the index is a sum with broadcast terms (the loop
# positions: a blocked channel shuffle reads x[src_block(k) * plane + pos + src_lane(k)] for
# lanes k), those terms move into the base pointer, so the vector left is invariant in the
# inner loops and LLVM hoists its lanes' extraction out of them: each lane is a load at a
# register offset, not an extract, a sign extension and an add per position. The sum is the
# same; only the order of its terms changes.


def _add_terms(e) -> list:
    """The terms of a tree of Adds."""
    return _add_terms(e.a) + _add_terms(e.b) if isinstance(e, E.Add) else [e]


def _sum(terms: list):
    out = terms[0]
    for t in terms[1:]:
        out = E.Add(out, t)
    return out


# Note [clamped loads]
# `pad` reads its source at indices clamped into the data (Note [loads in bounds] in
# tir/transform/vectorize_loop.py), so a vectorized pad loads x[row + max(ramp - left, 0)]
# (and min(..., width - 1)): lanes that are not consecutive where the ramp crosses an edge, one
# scalar load per lane. Away from the edges (every vector but one or two of a row) the clamp
# changes no lane: there the index is `row + ramp`, one vector load. The choice is made per
# vector at run time (the ramp's first and last lanes against the bounds), the gather kept for
# the vectors at the edges.


def _clamped_ramp(index):
    """(start, inside) when `index` is broadcast terms plus one unit-stride Ramp clamped by
    max / min with broadcast bounds: the scalar index of its first lane when no lane is
    clamped, and the condition that none is (Note [clamped loads]); else None."""
    terms = _add_terms(index)
    vector = [t for t in terms if not isinstance(t, E.Broadcast)]
    if len(vector) != 1:
        return None
    e, conds = vector[0], []
    while isinstance(e, E.Max | E.Min) and isinstance(e.b, E.Broadcast):
        conds.append((type(e), e.b.value))
        e = e.a
    if not conds or not (isinstance(e, E.Ramp) and E.is_const_int(e.stride, 1)):
        return None
    last = e.base + (e.lanes - 1)
    inside = None
    for kind, bound in conds:
        c = E.GE(e.base, bound) if kind is E.Max else E.LE(last, bound)
        inside = c if inside is None else E.And(inside, c)
    start = e.base
    for t in terms:
        if isinstance(t, E.Broadcast):
            start = start + t.value
    return start, inside


def _small_stride(index) -> int:
    """The lane stride of a Ramp index when it is a constant from 2 to MAX_LOAD_STRIDE, else 0."""
    if not (isinstance(index, E.Ramp) and isinstance(index.stride, E.IntImm)):
        return 0
    return index.stride.value if 2 <= index.stride.value <= MAX_LOAD_STRIDE else 0


def define_kernel(ctx, fn_name, func_name, buffers, aligns, variables, extra_types, emit_body):
    """An internal function `i32 fn_name(T* noalias %buf..., %var..., extra...)` whose body
    `emit_body(emitter, extra_args)` fills. Buffer pointers are separate parameters marked
    noalias (buffers never overlap): alias analysis, and so vectorization, depends on it."""
    ptr_types = [T.storage_type(b.dtype).as_pointer() for b in buffers]
    var_types = [T.llvm_type(v.dtype) for v in variables]
    fn = ir.Function(
        ctx.module, ir.FunctionType(T.I32, ptr_types + var_types + extra_types), fn_name
    )
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    em = FunctionEmitter(ctx, fn, func_name)
    args = list(fn.args)
    for buf, align, arg in zip(buffers, aligns, args, strict=False):
        arg.add_attribute("noalias")
        arg.attributes.align = align
        arg.name = buf.name
        em.bind_buffer(buf, arg, align)
    for var, arg in zip(variables, args[len(buffers) :], strict=False):
        arg.name = var.name
        em.bind_var(var, arg)
    emit_body(em, args[len(buffers) + len(variables) :])
    em.finish()
    return fn
