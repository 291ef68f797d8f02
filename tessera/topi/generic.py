"""Generic schedules that every target can use: inline the injective parts, then parallelize
and vectorize the outputs. Target-specific schedules (`topi/x86`, later `topi/cuda`) refine these.

    outs = [relu(add(conv, bias))]
    s = schedule_injective(outs, target)   # inlines add/relu, fuses the output's outer axes
                                           # into one parallel loop, vectorizes the innermost

Tensors tagged "injective" / "elemwise" / "broadcast" (the `tag` of `te.compute`) are inlined
into their consumers by `inline_injective`; an anchor op's schedule calls it first.
"""

from __future__ import annotations

import functools

from tessera import te
from tessera.ir.dtype import DType
from tessera.ir.node import Visitor
from tessera.te.bound import inline_bodies
from tessera.tir.expr import Add, FloorMod, IntImm, Sub, Var
from tessera.tir.stmt_functor import uses_var
from tessera.topi.symbolic import representative

INLINE_TAGS = ("elemwise", "broadcast", "injective")

# An innermost extent at least this long is split into vector lanes.
_MIN_PARALLEL_WORK = 1 << 12


def is_injective(tensor: te.Tensor) -> bool:
    op = tensor.op
    return isinstance(op, te.ComputeOp) and not op.is_reduction and op.tag in INLINE_TAGS


def traverse(outs, visit) -> None:
    """Call visit(op) on each compute op reachable from outs, consumers before producers."""
    seen: set[int] = set()

    def walk(op):
        if id(op) in seen or not isinstance(op, te.ComputeOp):
            return
        seen.add(id(op))
        visit(op)
        for t in op.input_tensors:
            walk(t.op)

    for t in outs:
        walk(t.op)


def inline_injective(s: te.Schedule, outs) -> None:
    """compute_inline every injective stage that is not an output."""
    out_ops = {id(t.op) for t in outs}

    def visit(op):
        if id(op) not in out_ops and is_injective(op.output(0)):
            s[op].compute_inline()

    traverse(outs, visit)


def const_extent(iv) -> int | None:
    ext = iv.dom.extent if iv.dom is not None else None
    return ext.value if isinstance(ext, IntImm) else None


def vector_lanes(target, dtype) -> int:
    """How many elements of dtype one vector register of the target holds (1 if unknown)."""
    bits = getattr(target, "vector_width_bits", 128) if target is not None else 128
    return max(1, bits // max(8, DType.parse(dtype).bits))


def schedule_elementwise_stage(s: te.Schedule, tensor: te.Tensor, target) -> None:
    """Parallelize the outer axes and vectorize the innermost axis of a data-parallel stage."""
    stage = s[tensor]
    axes = list(stage.op.axis)
    if not axes:
        return
    lanes = vector_lanes(target, tensor.dtype)
    if const_extent(axes[-1]) == 1 and any(const_extent(iv) != 1 for iv in axes):
        axes = _units_first(stage, axes)  # Note [unit innermost axes]
    inner = axes[-1]
    inner_extent = const_extent(inner)
    # the loads of the stage's body with inlined producers substituted, computed once and only
    # where a rule below gets that far
    loads = functools.cache(lambda: _producer_loads(inline_bodies(s)[stage]))
    blocked = _blocked_read(stage, lanes, loads)
    known = None
    plain = _plain_read(stage, lanes, loads) if blocked is None else None
    # a symbolic innermost extent (an image's width) is split too: partition_loop peels its
    # tail off an unguarded main loop (Note [symbolic tails] in topi/symbolic.py)
    if blocked is not None:  # Note [blocked reads]
        channel, block = blocked
        channel_outer, channel_inner = stage.split(channel, factor=block)
        _, vec = stage.split(inner, factor=lanes)
        outer_axes = [channel_outer if iv is channel else iv for iv in axes[:-1]]
        known = {id(channel_outer): const_extent(channel) // block}
        outer_axes.append(stage.leaf_iter_vars[len(axes)])  # the vector loop's outer part
        stage.reorder(*outer_axes, channel_inner, vec)
        stage.unroll(channel_inner)
        stage.vectorize(vec)
    elif plain is not None:  # Note [blocked reads]: the other direction
        position_outer, position_inner = stage.split(plain, factor=lanes)
        known = {id(position_outer): -(-const_extent(plain) // lanes)}
        vec = inner
        if inner_extent != lanes:  # Note [transposed tiles]: lanes x lanes tiles
            inner_outer, vec = stage.split(inner, factor=lanes)
            known[id(inner_outer)] = -(-inner_extent // lanes)
        outer_axes = [iv for iv in stage.leaf_iter_vars if iv not in (position_inner, vec)]
        stage.reorder(*outer_axes, position_inner, vec)
        stage.unroll(position_inner)
        stage.vectorize(vec)
    elif lanes > 1 and (inner_extent is None or inner_extent >= lanes):
        _, vec = stage.split(inner, factor=lanes)
        stage.vectorize(vec)
        outer_axes = axes[:-1] + [stage.leaf_iter_vars[len(axes) - 1]]
    else:
        outer_axes = axes
    total = 1
    for iv in axes:
        total *= const_extent(iv) or 1 << 20
    if total >= _MIN_PARALLEL_WORK and len(outer_axes) > 1:
        par = _parallel_axes(outer_axes[:-1], known)
        if blocked is None and plain is None and inner_extent == lanes:
            par = _chunked_row(stage, par, outer_axes[-2])  # Note [one-vector rows]
        fused = stage.fuse(*par) if len(par) > 1 else par[0]
        stage.parallel(fused)
    elif total >= _MIN_PARALLEL_WORK and outer_axes:
        stage.parallel(outer_axes[0])


# Note [unit innermost axes]
# An output whose innermost axis has extent 1 (Transpose(perm=[0, 3, 1, 2]) of [31, 109, 1, 4]
# writes [31, 4, 109, 1]) had nothing to vectorize: every element a scalar loop iteration with
# its index arithmetic, 2.2-2.6x ONNX Runtime. The unit axes move to the front of the loop nest
# (their loops run once wherever they are), so the innermost axis of extent > 1 (the 109) runs
# in vectors: here loads 4 apart, one span load and a shuffle (Note [strided loads] in
# codegen/llvm/emitter.py).


def _units_first(stage, axes: list) -> list:
    """`axes` with those of extent 1 first, the stage reordered so (Note [unit innermost
    axes])."""
    units = [iv for iv in axes if const_extent(iv) == 1]
    order = units + [iv for iv in axes if const_extent(iv) != 1]
    stage.reorder(*order)
    return order


# Note [blocked reads]: a stage that reads a blocked tensor in a plain layout (the
# layout_transform NCHW8c -> NCHW inlined into an element-wise chain: an int8 conv's epilogue,
# a float model's split or concatenate at the edge of its blocked convs) loads, per vector of
# the innermost axis (W),
# lanes one block apart. Its channel axis is split by the block and the block's channels
# unrolled inside the vector loop, so one straight-line sequence reads whole tiles of
# lanes x block elements, which the LLVM code generator loads as contiguous vectors and
# transposes in registers (Note [transposed loads] in codegen/llvm/transpose.py). The rule:
# a load whose last index is `(channel + offset) % block` (the offset a constant: a split's or
# a concatenate's channels; block its last extent, a power of two up to
# MAX_TILE_BLOCK), whose next-to-last index is the stage's innermost axis and no other index
# holds that axis; the channel extent a multiple of the block (no guarded channels, which
# would split the sequence into branches) and the innermost at least a vector long. The
# other direction, a plain tensor written as NCHW[lanes]c (`_plain_read`), unrolls a vector's
# width of positions inside the channel vector instead (Note [square tiles]).
MAX_TILE_BLOCK = 16
#
# Note [transposed tiles]
# The same rule holds for any transpose whose input's innermost index is an output axis other
# than the innermost (the plain read above with an innermost output axis longer than a
# vector: Transpose(perm=[3, 0, 1, 2]) of a [24, 10, 118, 26] tensor): the innermost axis is
# split by the vector too, and a tile of lanes x lanes runs inside both splits, the position
# axis unrolled. Before, each output vector gathered lanes elements a row apart: 3-9x ONNX
# Runtime in bench/op_sweep.py; tiled, 0.8x. Extents that the vector does not divide leave
# guarded tiles at the edges.


def _blocked_read(stage, lanes: int, loads):
    """(channel axis, block) of a blocked tensor the stage reads in a plain layout (Note
    [blocked reads]), else None."""
    axes = list(stage.op.axis)
    if lanes < 2 or lanes & (lanes - 1) or len(axes) < 2 or stage.op.is_reduction:
        return None
    inner = axes[-1]
    if (const_extent(inner) or 0) < lanes:
        return None
    by_var = {id(iv.var): iv for iv in axes[:-1]}
    for load in loads():
        idx = load.indices
        last = idx[-1] if len(idx) >= 2 else None
        if not (isinstance(last, FloorMod) and isinstance(last.b, IntImm)):
            continue
        channel, block = by_var.get(id(_offset_var(last.a))), last.b.value
        if channel is None or block < 2 or block & (block - 1) or block > MAX_TILE_BLOCK:
            continue
        shape = load.producer.shape
        if const_extent(channel) is None or const_extent(channel) % block:
            continue
        if not (isinstance(shape[-1], IntImm) and shape[-1].value == block):
            continue
        if idx[-2] is not inner.var or any(uses_var(ix, inner.var) for ix in idx[:-2]):
            continue
        return channel, block
    return None


def _offset_var(e):
    """The variable of `v`, `v + c` or `v - c` (c a constant: a channel offset of a split or
    a concatenate), else None."""
    if isinstance(e, (Add, Sub)) and isinstance(e.b, IntImm):
        e = e.a
    return e if isinstance(e, Var) else None


def _plain_read(stage, lanes: int, loads):
    """The position axis of a plain tensor the stage writes in a blocked layout (Note
    [blocked reads]: NCHW -> NCHW{lanes}c), or transposes (Note [transposed tiles]), else
    None: a load whose last index is an output axis other than the innermost, whose innermost
    axis (the block's channel; at least a vector long) is in another index."""
    axes = list(stage.op.axis)
    if lanes < 2 or lanes & (lanes - 1) or lanes > MAX_TILE_BLOCK or len(axes) < 2:
        return None
    inner = axes[-1]
    if (const_extent(inner) or 0) < lanes or stage.op.is_reduction:
        return None
    by_var = {id(iv.var): iv for iv in axes[:-1]}
    for load in loads():
        idx = load.indices
        position = by_var.get(id(idx[-1])) if len(idx) >= 2 else None
        if position is None or (const_extent(position) or 0) < lanes:
            continue
        if any(uses_var(ix, position.var) for ix in idx[:-1]):
            continue
        if any(uses_var(ix, inner.var) for ix in idx[:-1]):
            return position
    return None


def _producer_loads(exprs) -> list:
    found = []

    class _Loads(Visitor):
        def visit_ProducerLoad(self, node):
            found.append(node)
            self.generic_visit(node)

    for e in exprs:
        _Loads().visit(e)
    return found


# Note [symbolic fuse]
# The outer axes of an element-wise stage are fused into one parallel loop, whose index is cut
# back into the axes by a division per axis: by a constant that is a multiply and a shift, by a
# symbolic extent a hardware division (~25 cycles) per iteration. Heads split off a
# (batch, seq, 64) tensor as (batch, 4, seq, 16) fused over (batch, 4, seq) paid two divisions
# by seq for 16 copied floats: 3-6x a kernel specialized to the sizes. So the fused prefix
# stops before a symbolic axis once it holds PARALLEL_ITERATIONS iterations (at the
# representative sizes, topi/symbolic.py): the axes after it run as serial loops inside.
#
# Note [fused prefix]
# The same holds for constant axes (Note [symbolic fuse]): a floordiv and floormod by a constant
# are each a multiply, shifts and a sign fix-up, ~10 scalar instructions per axis. In a blocked
# layout the innermost axis is one vector (NCHW8c on AVX2: 8 floats), so fusing every outer
# axis paid ~30 scalar instructions of index per vector: a ReLU over [1, 16, 55, 55, 8] ran at
# 4 GB/s, a two-way concatenate (its if_then_else tested per vector as well) at 6-11 GB/s, on
# Zen 3, 5-10x a loop nest over the same axes (the addresses affine in the loop variables, the
# concatenate's test invariant in the inner loops). So the prefix stops before any axis once
# it holds PARALLEL_ITERATIONS iterations, enough chunks to balance the threads of any pool.
PARALLEL_ITERATIONS = 256


# Note [one-vector rows]
# In a blocked layout the innermost axis is one vector (NCHW8c on AVX2), so the loop around it,
# the width, runs one vector an iteration. Where the axes before it hold fewer than
# PARALLEL_ITERATIONS iterations (few channel blocks at a small height: half of a YOLO C2f
# block's [1, 32, 80, 80] is 2 blocks x 80 rows), Note [fused prefix] fused the width into the
# parallel loop too, and every vector paid the index arithmetic of three axes: a split of
# [1, 4, 80, 80, 8] ran at 13 GB/s on Zen 3. Now the width is cut into as many chunks as the
# prefix lacks; the chunks join the parallel loop and each runs its vectors in a serial loop
# with affine addresses (the split above, 4.4x faster; a chunk past a width that the count does
# not divide is guarded once a vector, a compare).


def _chunked_row(stage, par: list, row) -> list:
    """`par` with `row` (the loop around a one-vector body) cut into the chunks the prefix
    before it lacks (Note [one-vector rows]) where `par` fused it whole."""
    extent = const_extent(row)
    if not par or par[-1] is not row or extent is None:
        return par
    before = 1
    for iv in par[:-1]:
        before *= const_extent(iv) or PARALLEL_ITERATIONS
    chunks = -(-PARALLEL_ITERATIONS // before)
    if len(par) == 1 or chunks <= 1 or chunks >= extent:
        return par
    outer, _ = stage.split(row, factor=-(-extent // chunks))
    return [*par[:-1], outer]


def _parallel_axes(axes: list, known: dict | None = None) -> list:
    """The leading axes of `axes` fused into the parallel loop: until they hold
    PARALLEL_ITERATIONS iterations (Notes [symbolic fuse] and [fused prefix]). `known` gives
    the extents of split axes by id (they have no domain of their own)."""
    out, work = [], 1
    for iv in axes:
        if out and work >= PARALLEL_ITERATIONS:
            break
        out.append(iv)
        extent = (known or {}).get(id(iv), const_extent(iv))
        work *= extent if extent is not None else representative(iv.dom.extent)
    return out


def schedule_injective(outs, target=None) -> te.Schedule:
    """Default schedule for a group of injective ops (and the fallback for any group)."""
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    s = te.create_schedule([t.op for t in outs])
    inline_injective(s, outs)
    for t in outs:
        schedule_elementwise_stage(s, t, target)
    return s


def _rfactor_schedule(outs, target) -> te.Schedule | None:
    """A CPU reduction group whose one output is its reduction with few output elements (a
    tensor's min, max or sum) scheduled by the auto-scheduler's rfactor sketch at its default
    config (Note [rfactor sketch] in autotune/auto_schedule.py): partials in vector registers,
    parallel over parts of the reduction; None for every other group."""
    if target is None or not target.kind_info.cpu or len({id(t.op) for t in outs}) != 1:
        return None
    if not outs[0].op.is_reduction:  # e.g. a scalar computed without reducing
        return None
    from tessera.autotune.auto_schedule import AutoSpace

    try:
        space = AutoSpace(outs, [], target)
    except ValueError:  # a group the auto-scheduler takes no sketch of
        return None
    if space.kind != "rfactor":
        return None
    return space.apply(space.default())[0]


def schedule_reduce(outs, target=None) -> te.Schedule:
    """Default schedule for a reduction group: inline injective producers, parallelize the
    data-parallel axes of the reduction and of the outputs."""
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    factored = _rfactor_schedule(outs, target)
    if factored is not None:
        return factored
    s = te.create_schedule([t.op for t in outs])
    inline_injective(s, outs)
    out_ops = {id(t.op) for t in outs}

    def visit(op):
        if op.is_reduction or id(op) in out_ops:
            axes = list(s[op].op.axis)
            total = 1
            for iv in axes:
                total *= const_extent(iv) or 1 << 20
            if axes and total >= 64:
                first = s[op].fuse(*axes) if len(axes) > 1 else axes[0]
                s[op].parallel(first)

    traverse(outs, visit)
    return s
