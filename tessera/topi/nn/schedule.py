"""Generic schedules of the nn anchor ops: conv, dense/matmul, pooling, softmax and the norms.

    outs = [relu(add(conv(pad(x), w), bias))]        # a fused group, conv is the anchor
    s = schedule_conv(outs, target)
    # relu/add are inlined into the output stage, whose (n, c_out) loops are fused and run in
    # parallel; conv is computed per (n, c_out) plane inside that loop, with its reduction
    # loops outside the vectorized innermost output axis; the padded input is computed once.

Note [anchor placement]: when the anchor is not an output (an element-wise epilogue follows it),
the output stage owns the parallel loop and the anchor is `compute_at` that loop, so each thread
computes the anchor's block and applies the epilogue while the block is in cache. When the
group's outputs do not share the anchor's shape, the anchor stays at root.
Target-specific schedules (issue 4: `topi/x86`) replace these with blocked layouts.
"""

from __future__ import annotations

import math

from tessera import te
from tessera.topi import generic
from tessera.topi.generic import const_extent, inline_injective, traverse, vector_lanes
from tessera.topi.nn.conv import PAD_TAG
from tessera.topi.nn.dense import PACK_TAG
from tessera.topi.rules import RuleKnob


def find_stages(outs, predicate) -> list[te.Tensor]:
    """Output 0 of every compute op reachable from outs for which predicate(op) holds."""
    found = []
    traverse(outs, lambda op: found.append(op.output(0)) if predicate(op) else None)
    return found


def _find_anchor(outs, tag_prefixes) -> te.Tensor:
    found = find_stages(outs, lambda op: op.tag.startswith(tuple(tag_prefixes)))
    if not found:
        raise ValueError(f"no stage tagged {' or '.join(tag_prefixes)} among {list(outs)}")
    return found[0]


def _same_shape(a: te.Tensor, b: te.Tensor) -> bool:
    return len(a.shape) == len(b.shape) and all(
        const_extent_of(x) == const_extent_of(y) for x, y in zip(a.shape, b.shape, strict=True)
    )


def const_extent_of(dim):
    return getattr(dim, "value", None)


def _split_vector(stage, iv, lanes):
    """Split iv into (outer, inner) with a vectorizable inner of `lanes`, or None."""
    extent = const_extent(iv)
    if lanes > 1 and extent is not None and extent >= lanes:
        return stage.split(iv, factor=lanes)
    return None


def _parallel_outer(stage, axes):
    if not axes:
        return None
    fused = stage.fuse(*axes) if len(axes) > 1 else axes[0]
    stage.parallel(fused)
    return fused


# Note [short kept axes]
# A reduction over a middle axis whose kept inner axes are shorter than a vector (softmax over
# axis 2 of [30, 7, 27, 3]: per (a, b) three running (max, sum) pairs over 27 steps) ran each
# kept element's whole reduction loop after the other's: one dependency chain at a time, each
# step waiting on the last one's max and sum (and its exp), ~36 cycles an element on Zen 3.
# With the reduce loops outside and the kept axes (at most a vector's worth of elements)
# unrolled inside, each step updates all of them: independent chains that overlap, and the
# accumulators, a few scalars at constant offsets, stay in registers where the buffer is local.


def _short_kept(inner: list, lanes: int) -> bool:
    """Whether the kept inner axes are all constant and hold at most `lanes` elements, but not
    zero axes (Note [short kept axes])."""
    extents = [const_extent(iv) for iv in inner]
    return bool(inner) and None not in extents and math.prod(extents) <= lanes


def schedule_reduction_loops(stage, n_outer: int, lanes: int):
    """Loop order of a reduction stage: [outer data axes], inner data axes, the reduction axes,
    then the vector lanes of the last data axis (so each reduction step updates a vector of
    outputs and no reduction loop is vectorized). Returns the outer data loops."""
    axes = list(stage.op.axis)
    reduce_axes = list(stage.op.reduce_axis)
    outer, inner = axes[:n_outer], axes[n_outer:]
    split = _split_vector(stage, inner[-1], lanes) if inner else None
    if split is not None:
        stage.reorder(*outer, *inner[:-1], split[0], *reduce_axes, split[1])
        stage.vectorize(split[1])
    elif lanes > 1 and reduce_axes and _short_kept(inner, lanes):  # Note [short kept axes]
        stage.reorder(*outer, *reduce_axes, *inner)
        for iv in inner:
            stage.unroll(iv)
    elif lanes == 1 and inner and reduce_axes:
        block = _scalar_block(const_extent(inner[-1]))
        if block > 1:
            # scalar code (a Cortex-M): a few outputs per reduction step, kept in registers
            # and unrolled, so each weight loaded serves `block` of them
            io, ii = stage.split(inner[-1], factor=block)
            stage.reorder(*outer, *inner[:-1], io, *reduce_axes, ii)
            stage.unroll(ii)
    return outer


# Scalar code (no vector registers: a Cortex-M) keeps up to half of the 16 general registers of
# ARM and x86-64 as accumulators; the rest hold the weight, the input and the pointers. A rule
# knob (Note [rule knobs] in topi/rules.py).
SCALAR_ACCUMULATORS = RuleKnob(
    "scalar.accumulators", (2, 4, 6, 8, 12), 8,
    "the most accumulators of scalar code's register block (of 16 general registers)",
)  # fmt: skip
# A register block of GEMM_ROWS rows of A (one broadcast each per step of k) by the most column
# vectors (a power of two, at most MAX_COLUMN_VECTORS) whose accumulators, B row and broadcast fit
# the vector registers: 4 x 4 with 32 registers (AVX-512, AArch64), 4 x 2 with 16 (AVX2). Not a
# knob: this is the fallback ("generic") implementation; the CPU strategies' blocked and packed
# ones search their register tiles (topi/x86/strategy.py).
GEMM_ROWS = 4
MAX_COLUMN_VECTORS = 4


def _scalar_block(extent) -> int:
    """The largest divisor of `extent` up to SCALAR_ACCUMULATORS (no tail loop), 1 when
    unknown."""
    if extent is None:
        return 1
    most = min(extent, SCALAR_ACCUMULATORS.value())
    return max(d for d in range(1, most + 1) if extent % d == 0)


def _column_vectors(target) -> int:
    """The register block's column vectors: GEMM_ROWS x cv accumulators, cv vectors of a B row
    and one broadcast within the target's vector registers."""
    registers = getattr(target, "vector_registers", 16) if target is not None else 16
    cv = MAX_COLUMN_VECTORS
    while cv > 1 and GEMM_ROWS * cv + cv + 1 > registers:
        cv //= 2
    return cv


def schedule_anchor(s, anchor, outs, target, n_outer: int) -> None:
    """Schedule a reduction anchor and the group's outputs (see Note [anchor placement])."""
    lanes = vector_lanes(target, anchor.dtype)
    out_ops = {id(t.op) for t in outs}
    if id(anchor.op) in out_ops:
        _parallel_outer(s[anchor], schedule_reduction_loops(s[anchor], n_outer, lanes))
        for t in outs:
            if t.op is not anchor.op:
                generic.schedule_elementwise_stage(s, t, target)
        return
    if len(outs) == 1 and _same_shape(outs[0], anchor):
        out = s[outs[0]]
        axes = list(out.op.axis)
        outer = axes[:n_outer]
        split = _split_vector(out, axes[-1], lanes) if len(axes) > n_outer else None
        if split is not None:
            out.vectorize(split[1])
        fused = _parallel_outer(out, outer)
        if fused is not None:
            s[anchor].compute_at(out, fused)
        schedule_reduction_loops(s[anchor], n_outer, lanes)
        return
    _parallel_outer(s[anchor], schedule_reduction_loops(s[anchor], n_outer, lanes))
    for t in outs:
        generic.schedule_elementwise_stage(s, t, target)


def _new_schedule(outs):
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    s = te.create_schedule([t.op for t in outs])
    inline_injective(s, outs)
    return outs, s


def schedule_conv(outs, target=None) -> te.Schedule:
    """Convolutions (and transposed ones): parallel over (n, c_out), the padded input computed
    once at root (in parallel; per channel plane for a depthwise conv on a scalar target), the
    innermost output axis vectorized."""
    outs, s = _new_schedule(outs)
    conv = _find_anchor(outs, ["conv"])
    pads = [
        t for t in conv.op.input_tensors if isinstance(t.op, te.ComputeOp) and t.op.tag == PAD_TAG
    ]
    per_plane = [t for t in pads if _pad_per_plane(conv, t, target)]
    for t in pads:
        if t not in per_plane:
            generic.schedule_elementwise_stage(s, t, target)
    schedule_anchor(s, conv, outs, target, n_outer=2)
    for t in per_plane:  # inside the conv's channel loop (one iteration where it is attached)
        s[t].compute_at(s[conv], conv.op.axis[1])
    return s


def _pad_per_plane(conv: te.Tensor, padded: te.Tensor, target) -> bool:
    """A depthwise conv (one input channel per output channel) on a scalar target pads one
    channel's plane inside the (n, c) loop, where it is read: the same copies as padding the
    whole input first, in a buffer of one plane (a Cortex-M's RAM) instead of all of them."""
    rc = conv.op.reduce_axis[0] if conv.op.reduce_axis else None
    channels = const_extent_of(padded.shape[1])
    single = rc is not None and const_extent(rc) == 1 and channels is not None and channels > 1
    return single and vector_lanes(target, conv.dtype) == 1


def _gemm_loops(stage, lanes: int, data_only: bool = False, target=None) -> list:
    """Tile a matrix product's loops: [batch, row blocks, column blocks] (returned, to run in
    parallel), then k, then a register block of rows x column vectors (unrolled, vectorized)."""
    axes = list(stage.op.axis)
    k = [] if data_only else list(stage.op.reduce_axis)
    extent = const_extent(axes[-1]) if axes else None
    if extent is None or extent < lanes or lanes == 1:
        return axes
    col_vectors = max(1, min(_column_vectors(target), extent // lanes))
    jo, ji = stage.split(axes[-1], factor=lanes * col_vectors)
    jv, jl = stage.split(ji, factor=lanes)
    if len(axes) >= 2:
        io, ii = stage.split(axes[-2], factor=min(GEMM_ROWS, const_extent(axes[-2]) or 1))
        outer, block = [*axes[:-2], io, jo], [ii, jv, jl]
    else:
        outer, block = [jo], [jv, jl]
    stage.reorder(*outer, *k, *block)
    if not data_only:
        for iv in block[:-1]:
            stage.unroll(iv)
    stage.vectorize(jl)
    return outer


def schedule_dense(outs, target=None) -> te.Schedule:
    """dense/matmul/batch_matmul: blocks of rows x columns in parallel, the k loop inside, a
    register block of GEMM_ROWS rows x 1-4 column vectors innermost (`_column_vectors`). A
    transposed weight is packed once per call when there are enough rows to pay for it and
    vectors read it (else read strided)."""
    outs, s = _new_schedule(outs)
    anchor = _find_anchor(outs, ["dense", "matmul", "batch_matmul"])
    lanes = vector_lanes(target, anchor.dtype)
    rows = 1
    for d in anchor.shape[:-1]:
        rows *= const_extent_of(d) or 1
    for t in anchor.op.input_tensors:
        if isinstance(t.op, te.ComputeOp) and t.op.tag == PACK_TAG:
            if rows >= lanes > 1:  # scalar code (lanes 1: a Cortex-M) gains nothing from it
                generic.schedule_elementwise_stage(s, t, target)
            else:
                s[t].compute_inline()
    out_ops = {id(t.op) for t in outs}
    if id(anchor.op) in out_ops or len(outs) != 1 or not _same_shape(outs[0], anchor):
        _parallel_outer(s[anchor], _gemm_loops(s[anchor], lanes, target=target))
        for t in outs:
            if t.op is not anchor.op:
                generic.schedule_elementwise_stage(s, t, target)
        return s
    loops = _gemm_loops(s[outs[0]], lanes, data_only=True, target=target)
    fused = _parallel_outer(s[outs[0]], loops)
    if fused is not None:
        s[anchor].compute_at(s[outs[0]], fused)
    _gemm_loops(s[anchor], lanes, target=target)
    return s


def schedule_pool(outs, target=None, copy_pad: bool = False) -> te.Schedule:
    """Pools: parallel over (n, c), the window loops inside the vectorized innermost axis. The
    padded copy of the input (Note [pool pad]) is inlined back (bounds tests in the windows),
    or with `copy_pad` computed first, in parallel."""
    outs, s = _new_schedule(outs)
    anchor = _find_anchor(outs, ["pool"])
    for t in anchor.op.input_tensors:
        if isinstance(t.op, te.ComputeOp) and t.op.tag == PAD_TAG:
            if copy_pad:
                generic.schedule_elementwise_stage(s, t, target)
            else:
                s[t].compute_inline()
    schedule_anchor(s, anchor, outs, target, n_outer=2)
    return s


def schedule_lrn(outs, target=None) -> te.Schedule:
    """LRN: parallel over the rows of every axis but the last, the square sum computed per row
    inside that loop, its window loop outside the vectorized last axis."""
    outs, s = _new_schedule(outs)
    anchor = _find_anchor(outs, ["lrn"])
    schedule_anchor(s, anchor, outs, target, n_outer=anchor.ndim - 1)
    return s


def schedule_row_reduce(outs, target=None, n_outer: int | None = None) -> te.Schedule:
    """softmax / log_softmax / layer_norm / instance_norm: one output computed from reductions over
    trailing (softmax: one) axes. The first n_outer output axes run in parallel; every reduction
    stage is computed inside that loop, for its row only (n_outer defaults to the attr
    "n_outer" of the output stage's op, as the computes record it)."""
    outs, s = _new_schedule(outs)
    out = outs[0]
    if n_outer is None:
        anchor = find_stages(outs, lambda op: "n_outer" in op.attrs)
        n_outer = anchor[0].op.attrs["n_outer"] if anchor else 0
    reductions = find_stages(outs, lambda op: op.is_reduction)
    lanes = vector_lanes(target, out.dtype)
    for t in outs:
        if t is out and out.ndim > n_outer and n_outer > 0 and len(outs) == 1:
            continue
        generic.schedule_elementwise_stage(s, t, target)
    if not (out.ndim > n_outer > 0 and len(outs) == 1):
        for r in reductions:
            schedule_reduction_loops(s[r], 0, lanes)
        return s
    stage = s[out]
    axes = list(stage.op.axis)
    split = _split_vector(stage, axes[-1], lanes)
    if split is not None:
        stage.vectorize(split[1])
    fused = _parallel_outer(stage, axes[:n_outer])
    placed = [stage]
    for r in reductions:  # consumers first: a partial row reduction goes into its row's combine
        parent = next((p for p in placed if s._consumes(p, s[r])), stage)
        s[r].compute_at(parent, fused if parent is stage else parent.op.axis[n_outer - 1])
        schedule_reduction_loops(s[r], n_outer, lanes)
        placed.append(s[r])
    return s
