"""Flatten storage: every multi-dimensional buffer becomes a 1-D buffer, indexed row-major.

    before:  def f(A: float32[n, 64], B: float32[n, 64]) {
               B[i, j] = A[i, j] * 2;  allocate T: float32[4, 8] { T[a, b] = ... }
    after:   def f(A: float32[n * 64], B: float32[n * 64])  attrs: param_shapes=((n, 64), (n, 64)) {
               B[i * 64 + j] = A[i * 64 + j] * 2;  allocate T: float32[32] { T[a * 8 + b] = ... }

Each buffer (parameters, Allocates, and any other buffer the body touches) is replaced by a new
1-D Buffer with the same name, dtype and scope and shape `(prod(shape),)`, and its indices by
the row-major offset `i*stride0 + j*stride1 + ...` (simplified: the index of a fused axis,
`floordiv(f, 10)*10 + floormod(f, 10)`, becomes `f`); a buffer that is already 1-D is kept.
Offsets are int64 when they may not fit int32 (a dim is int64 or symbolic, or there are 2^31
or more elements), so `A[i, j]` of a 70000 x 70000 buffer reads past the first 2^31 elements.
The 1-D buffers replace the parameters in `params` (same names, dtypes and order). The shapes
the caller passes stay in the PrimFunc attr `("param_shapes", (shape0, shape1, ...))`, one tuple
of dims per buffer parameter in order, which `PrimFunc.param_shape`, `PrimFunc.scalar_vars` and
`codegen.common.function_info` read. Running the pass twice is harmless: a function that already
has "param_shapes" keeps them.
"""

from __future__ import annotations

from dataclasses import replace

from tessera.arith import simplify
from tessera.ir.dtype import int64
from tessera.ir.node import Mutator
from tessera.ir.structural_equal import structural_equal
from tessera.tir.buffer import Buffer
from tessera.tir.expr import BufferLoad, Expr, FloorDiv, FloorMod, IntImm, convert
from tessera.tir.function import PrimFunc
from tessera.tir.stmt import Allocate, BufferStore


def flatten_storage(func: PrimFunc) -> PrimFunc:
    """Make every buffer of `func` one-dimensional (see the module docstring)."""
    flattener = _Flatten()
    body = flattener.visit(func.body)
    params = tuple(flattener.flat(p) if isinstance(p, Buffer) else p for p in func.params)
    if body is func.body and all(a is b for a, b in zip(params, func.params, strict=True)):
        return func
    attrs = func.attrs
    if func.attr("param_shapes") is None:
        shapes = tuple(tuple(b.shape) for b in func.buffer_params)
        attrs = (*attrs, ("param_shapes", shapes))
    return replace(func, params=params, body=body, attrs=attrs)


def flat_index(shape: tuple[Expr, ...], indices: tuple[Expr, ...], merge: bool = True) -> Expr:
    """The row-major offset of `indices` in a compact buffer of `shape`: i * s0 + j * s1 + ...
    `merge`: fused index pairs merged first (Note [fused index merge])."""
    if len(shape) != len(indices):
        raise ValueError(f"{len(indices)} indices for a buffer of {len(shape)} dims")
    if not indices:
        return convert(0)
    if merge:
        shape, indices = _merge_fused(tuple(shape), tuple(indices))
    if _needs_int64(shape):
        shape, indices = _widen(shape), _widen(indices)
    strides: list[Expr] = [convert(1)]
    for dim in reversed(shape[1:]):
        strides.insert(0, dim if _is_one(strides[0]) else dim * strides[0])
    offset = None
    for idx, stride in zip(indices, strides, strict=True):
        term = idx if _is_one(stride) else idx * stride
        offset = term if offset is None else offset + term
    return offset


# Note [fused index merge]
# A loop fused over axes (a, b) indexes them as (floordiv(f, B), floormod(f, B)); the row-major
# offset floordiv(f, B)*B*S + floormod(f, B)*S is f*S. The simplifier sees that for a constant B
# but not for a symbolic one (an attention row loop fused over (batch, heads, seq) divided the
# row index by seq twice per row), and not through the int64 casts of a symbolic buffer's
# offset. So before the offset is built, two neighbouring indices (floordiv(x, d), floormod(x,
# d)) over dims (D, d) merge into the index x over the dim D*d, repeatedly (a fused index of
# three axes merges twice). The identity floordiv(x, d)*d + floormod(x, d) == x is exact for
# every x and d != 0, and x is an index the kernel computes anyway, so nothing can overflow that
# did not before.
# Except for an accumulation in memory (a store whose value reads the same buffer at the same
# indices: the blocked max pools' `out = max(out, x)`): once LLVM proves the load and the
# store addresses equal, the X86 backend folds store(select(c, x, load p), p) into a masked
# store (vmaskmovps), microcoded and ~7x slower on AMD Zen 3: a pool over a symbolic width
# with merged indices ran 4.5 against 0.6 us. Such a statement keeps its indices as written.


def fused_groups(shape, indices) -> list[tuple[Expr, list]]:
    """Note [fused index merge]: the indices as groups (x, dims): x indexes the row-major
    product of `dims`, neighbours (floordiv(x, d), floormod(x, d)) over (D, d) merged into x
    over (D, d); an index that merges with nothing is a group of its own dim."""
    groups = [(ix, [dim]) for ix, dim in zip(indices, shape, strict=True)]
    k = len(groups) - 2
    while k >= 0:
        (outer, dims), (inner, inner_dims) = groups[k], groups[k + 1]
        if (
            len(inner_dims) == 1
            and isinstance(outer, FloorDiv)
            and isinstance(inner, FloorMod)
            and structural_equal(outer.a, inner.a, map_free_vars=False)
            and structural_equal(outer.b, inner.b, map_free_vars=False)
            and structural_equal(inner.b, inner_dims[0], map_free_vars=False)
        ):
            groups[k : k + 2] = [(outer.a, dims + inner_dims)]
            k = min(k, len(groups) - 2)  # the merged index may merge with the next one in
            continue
        k -= 1
    return groups


def _merge_fused(shape: tuple, indices: tuple) -> tuple[tuple, tuple]:
    """Note [fused index merge]: the indices and dims with each fused group merged."""
    groups = fused_groups(shape, indices)
    return tuple(_product(d) if len(d) > 1 else d[0] for _, d in groups), tuple(
        x for x, _ in groups
    )


def _needs_int64(shape) -> bool:
    """Whether offsets into a buffer of `shape` may not fit int32: a symbolic dim may make the
    buffer as large as it likes (and int64 offsets are `nsw`, Note [index arithmetic nsw])."""
    size = 1
    for dim in shape:
        if dim.dtype.bits > 32 or not isinstance(dim, IntImm):
            return True
        size *= dim.value
    return size >= 2**31


def _widen(exprs) -> tuple[Expr, ...]:
    return tuple(
        IntImm(e.value, int64)
        if isinstance(e, IntImm)
        else e.astype(int64.with_lanes(e.dtype.lanes))
        for e in exprs
    )


def _product(dims) -> Expr:
    if _needs_int64(dims):
        dims = _widen(dims)
    out = convert(1)
    for d in dims:
        out = d if _is_one(out) else out * d
    return out


def _is_one(e) -> bool:
    return isinstance(e, IntImm) and e.value == 1


def _reads_at(value: Expr, buf: Buffer, indices) -> bool:
    """Whether `value` loads `buf` at exactly `indices` (an accumulation in memory)."""
    from tessera.tir.stmt_functor import collect

    def same(load) -> bool:
        return (
            isinstance(load, BufferLoad)
            and load.buffer is buf
            and all(_same(a, b) for a, b in zip(load.indices, indices, strict=True))
        )

    return bool(collect(value, same))


def _same(a, b) -> bool:
    return structural_equal(a, b, map_free_vars=False)


class _Flatten(Mutator):
    def __init__(self):
        self.buffers: dict[int, Buffer] = {}
        self.accumulated: Buffer | None = None  # a store's buffer that its value reads

    def flat(self, buf: Buffer) -> Buffer:
        if buf.ndim == 1:
            return buf
        new = self.buffers.get(id(buf))
        if new is None:
            new = Buffer(buf.name, (_product(buf.shape),), buf.dtype, buf.scope)
            self.buffers[id(buf)] = new
        return new

    def _indices(self, buf: Buffer, indices):
        if buf.ndim == 1:
            return indices
        if buf is self.accumulated:  # Note [fused index merge]: an accumulation in memory
            return (simplify(flat_index(buf.shape, indices, merge=False)),)
        # fused axes give floordiv(f, 10)*10 + floormod(f, 10): simplified, that is f again
        return (simplify(flat_index(buf.shape, indices)),)

    def visit_BufferLoad(self, node: BufferLoad):
        indices = tuple(self.visit(i) for i in node.indices)
        buf = self.flat(node.buffer)
        if buf is node.buffer and all(a is b for a, b in zip(indices, node.indices, strict=True)):
            return node
        return BufferLoad(buf, self._indices(node.buffer, indices))

    def visit_BufferStore(self, node: BufferStore):
        outer, self.accumulated = self.accumulated, None
        if _reads_at(node.value, node.buffer, node.indices):
            self.accumulated = node.buffer
        try:
            value = self.visit(node.value)
            indices = tuple(self.visit(i) for i in node.indices)
            buf = self.flat(node.buffer)
            unchanged = value is node.value and buf is node.buffer
            if unchanged and all(a is b for a, b in zip(indices, node.indices, strict=True)):
                return node
            return BufferStore(buf, value, self._indices(node.buffer, indices))
        finally:
            self.accumulated = outer

    def visit_Allocate(self, node: Allocate):
        body = self.visit(node.body)
        buf = self.flat(node.buffer)
        if body is node.body and buf is node.buffer:
            return node
        return Allocate(buf, body)
