"""Pooling in the blocked layout NCHW[x]c: max and average (ONNX semantics: dilation, asymmetric
padding, ceil_mode, count_include_pad) and the global pools, with their x86 schedule.

    y = pool_nchwc(x, "max", pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1))
    y = global_pool_nchwc(x, "avg")                        # (N, C/b, 1, 1, b)
    s = schedule_pool_nchwc([y], target)

The same computes as `tessera.topi.nn.pooling` with the spatial axes at 2 and 3 and the channel
block innermost, so every window step is one vector operation over the block.
"""

from __future__ import annotations

from tessera import te
from tessera.arith import Analyzer
from tessera.topi.generic import inline_injective
from tessera.topi.nn.conv import _dims, _ints, _static
from tessera.topi.nn.pooling import _acc_dtype, _window_count, pool_output_size
from tessera.topi.rules import RuleKnob
from tessera.topi.symbolic import (
    dispatch_by_size,
    representative,
    representative_shape,
    shape_vars,
)
from tessera.topi.x86.conv2d import PAD_TAG, pad_nchwc
from tessera.topi.x86.cpu import stack_share

POOL_TAG = "pool_nchwc"


def pool_nchwc_shape(x_shape, pool_size, strides, padding, dilation=None, ceil_mode=0):
    n, cb, h, w, b = x_shape
    dilation = dilation or (1, 1)
    out = [
        pool_output_size(
            size, pool_size[i], strides[i], padding[i], padding[2 + i], dilation[i], ceil_mode
        )
        for i, size in enumerate((h, w))
    ]
    if any(isinstance(o, int) and o < 1 for o in out):  # symbolic: the type rule checks
        raise ValueError(f"pool window {tuple(pool_size)} is larger than the padded input")
    return (n, cb, out[0], out[1], b)


def pool_nchwc(
    x, kind, pool_size, strides, padding, dilation=None, ceil_mode=0, count_include_pad=0
) -> te.Tensor:
    """Max ("max") or average ("avg") pooling of a (N, C/b, H, W, b) tensor."""
    if kind not in ("max", "avg"):
        raise ValueError(f"pool_nchwc: kind must be 'max' or 'avg', got {kind!r}")
    pool_size = _ints(pool_size, 2, "pool sizes", POOL_TAG)
    strides = _ints(strides, 2, "strides", POOL_TAG)
    dilation = _ints(dilation or (1, 1), 2, "dilations", POOL_TAG)
    padding = _ints(padding, 4, "pads", POOL_TAG)
    shape = _blocked_dims(x)
    out = pool_nchwc_shape(shape, pool_size, strides, padding, dilation, ceil_mode)
    size = shape[2:4]
    args = [
        (size[i], pool_size[i], strides[i], padding[i], padding[2 + i], dilation[i])
        for i in range(2)
    ]
    rk = [te.reduce_axis((0, pool_size[i]), name=f"r{'hw'[i]}") for i in range(2)]
    acc = x.dtype if kind == "max" else _acc_dtype(x.dtype)
    if kind == "max":
        fill = te.const(float("-inf"), x.dtype) if x.dtype.is_float else te.min_value(x.dtype)
    else:
        fill = te.const(0, x.dtype)
    # pad just as far as the windows reach (ceil_mode may reach past the pads, or not use them)
    before = padding[:2]
    reach = [(out[2 + i] - 1) * strides[i] + (pool_size[i] - 1) * dilation[i] + 1 for i in (0, 1)]
    after = [
        _pad_after(reach[i], before[i], size[i], padding[2 + i], strides[i], ceil_mode)
        for i in (0, 1)
    ]
    xp = pad_nchwc(x, before, after, fill) if any(before) or any(after) else x

    def value(n, c, sp, k):
        pos = [sp[i] * strides[i] + rk[i].var * dilation[i] for i in range(2)]
        return te.cast(xp(n, c, *pos, k), acc)

    reducer = te.max if kind == "max" else te.sum
    red = te.compute(
        out,
        lambda n, c, i, j, k: reducer(value(n, c, (i, j), k), axis=rk),
        name=f"{kind}_pool_nchwc",
        tag=POOL_TAG,
        attrs={"window_h": (pool_size[0] - 1) * dilation[0] + 1, "kind": kind},
    )
    if kind == "max":
        return red

    def average(n, c, i, j, k):
        count = _window_count(i, *args[0], count_include_pad)
        count = count * _window_count(j, *args[1], count_include_pad)
        return te.cast(red(n, c, i, j, k) / te.cast(te.max(count, 1), acc), x.dtype)

    return te.compute(out, average, name="avg_pool_nchwc", tag="elemwise")


def _blocked_dims(x: te.Tensor) -> tuple:
    """(N, C/b, H, W, b): the channel blocks and the block static; the batch and the sizes
    ints or symbolic expressions (topi/symbolic.py)."""
    _static(x.shape[1:2] + x.shape[4:], POOL_TAG)
    return _dims(x.shape)


def _pad_after(reach, before: int, size, pad_end: int, stride: int, ceil_mode) -> int:
    """How far the windows read past the end of an axis: exact over a static size; over a
    symbolic one the end pad, plus up to stride - 1 that ceil_mode's last window may reach."""
    if isinstance(size, int):
        return max(0, reach - before - size)
    return pad_end + (stride - 1 if ceil_mode else 0)


def global_pool_nchwc(x: te.Tensor, kind: str) -> te.Tensor:
    """Max or average over H and W of a (N, C/b, H, W, b) tensor: (N, C/b, 1, 1, b)."""
    if kind not in ("max", "avg"):
        raise ValueError(f"global_pool_nchwc: kind must be 'max' or 'avg', got {kind!r}")
    n, cb, h, w, b = _blocked_dims(x)
    rh, rw = te.reduce_axis((0, h), name="rh"), te.reduce_axis((0, w), name="rw")
    if kind == "max":
        return te.compute(
            (n, cb, 1, 1, b),
            lambda i, c, _h, _w, k: te.max(x[i, c, rh, rw, k], axis=[rh, rw]),
            name="global_max_pool_nchwc",
            tag=POOL_TAG,
        )
    acc = _acc_dtype(x.dtype)
    total = te.compute(
        (n, cb, 1, 1, b),
        lambda i, c, _h, _w, k: te.sum(te.cast(x[i, c, rh, rw, k], acc), axis=[rh, rw]),
        name="global_avg_pool_nchwc_sum",
        tag=POOL_TAG,
    )
    return te.compute(
        total.shape,
        lambda *i: te.cast(total(*i) / float(h * w), x.dtype),
        name="global_avg_pool_nchwc",
        tag="elemwise",
    )


def schedule_pool_nchwc(outs, target=None, config=None) -> te.Schedule:
    """Parallel over (n, channel blocks, output rows); the window loops outside the vector of the
    channel block; an element-wise epilogue (the average's division, a relu) computed per row
    right after the pool. `config`: the x86 pool strategy's knobs (column_group, pad_rows);
    None: the rules of Note [pool rows], per size bucket over a symbolic dim (Note [pool
    buckets])."""
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    if config is not None:
        return _schedule_pool(outs, target, config)[0]
    variables = shape_vars(*(t.shape for t in outs))
    return dispatch_by_size(variables, lambda: _schedule_pool(outs, target, None))


# Note [pool buckets]
# The column group (`_column_group`) is chosen from the output width; over a symbolic width at
# its representative size (8 columns). An image 8-24 wide pools to rows of 2-12 columns, which
# an 8-column group leaves wholly or mostly to its guarded tail, whose guarded
# read-modify-writes LLVM makes masked loads and stores (vmaskmovps, microcoded on Zen 3): the
# recognizer's pools at width 8 ran 2.0-2.4 us against 0.1-0.2 specialized. So a pool with one
# symbolic var is scheduled per size bucket like the matrix products (Note [size buckets] in
# topi/symbolic.py): the buckets whose column groups agree merge, so a few copies at most.


def _schedule_pool(outs, target, config):
    """(the schedule of schedule_pool_nchwc, its column groups: the key of a size bucket)."""
    s = te.create_schedule([t.op for t in outs])
    inline_injective(s, outs)
    pools = []

    def visit(op):
        if op.tag == POOL_TAG and op.output(0) not in pools:
            pools.append(op.output(0))
        for t in op.input_tensors:
            if isinstance(t.op, te.ComputeOp):
                visit(t.op)

    for t in outs:
        visit(t.op)
    out_ops = {id(t.op) for t in outs}
    single = len(outs) == 1 and len(pools) == 1 and id(pools[0].op) not in out_ops
    if single and _same_shape(outs[0], pools[0]):
        row = _parallel_rows(s, outs[0])
        s[pools[0]].compute_at(s[outs[0]], row)
        if _row_bytes(pools[0]) <= stack_share(target, ROW_STACK_SHARE):
            s[pools[0]].set_scope("local")
        key = (_window_loops(s, pools[0], config=config),)
        _schedule_pad(s, pools[0], s[pools[0]].op.axis[2], config, target)  # in the output's row
        return s, key
    key = []
    for pool in pools:
        row = _parallel_rows(s, pool)
        key.append(_window_loops(s, pool, row=row, config=config))
        _schedule_pad(s, pool, row, config, target)
    for t in outs:
        if id(t.op) not in {id(p.op) for p in pools}:
            _parallel_rows(s, t)
    return s, tuple(key)


# Note [pool rows]
# An average pool with padding reads its input through a padded copy (zeros) so that its window
# loops carry no bounds tests: each output row pads just the input rows its windows read
# (window_h rows, the padded width, one channel block) into a stack buffer right before its
# reduction, as convs pad per tile (Note [padding per tile]). Measured on AVX-512 (3x3 windows,
# 14-112 wide maps), that halves a stride-1 average pool, while max pools run 20-40% faster
# reading the input through the bounds tests (the pad inlined, its -inf never stored), as do
# rows too wide for the stack. Either way the window loops run over a group of output columns
# whose sums stay in registers, interleaved (one column alone is a latency-bound chain; the
# group size: `_column_group`).
# A row buffer's cap: 1 / ROW_STACK_SHARE of the target's thread stack (`stack_share` in
# cpu.py: 128 KiB of the default 8 MiB). Windows of more than MAX_UNROLLED_WINDOW elements
# (global pools: the window is the map) are looped, not unrolled (code size; a rule knob, Note
# [rule knobs] in topi/rules.py).
ROW_STACK_SHARE = 64
MAX_UNROLLED_WINDOW = RuleKnob(
    "pool.max_unrolled_window", (4, 9, 16, 25, 49), 16,
    "the most window elements a pool unrolls (larger windows, global pools: a loop)",
)  # fmt: skip
COLUMN_GROUP = 8  # accumulators: at most a quarter of 32 registers, half of 16


def _same_shape(a: te.Tensor, b: te.Tensor) -> bool:
    """Equal shapes; symbolic dims equal when the analyzer proves it (a graph's floordiv(w, 2)
    is the pool's floordiv(w - 2, 2) + 1)."""
    an = Analyzer()
    return len(a.shape) == len(b.shape) and all(
        an.can_prove_equal(x, y) for x, y in zip(a.shape, b.shape, strict=True)
    )


def _extent(iv) -> int:
    """A loop's extent; a symbolic one at its representative size (topi/symbolic.py)."""
    return representative(iv.dom.extent)


def _row_bytes(t: te.Tensor, rows: int = 1) -> int:
    shape = representative_shape(t.shape)
    return rows * shape[3] * shape[4] * t.dtype.bits // 8


def pad_rows_rule(kind: str, row_bytes: int, target=None) -> bool:
    """Note [pool rows]: an average pool pads its rows on the stack (the target's, else the
    current target's) when they fit."""
    return kind == "avg" and row_bytes <= stack_share(target, ROW_STACK_SHARE)


def _schedule_pad(s, pool: te.Tensor, row, config=None, target=None) -> None:
    """See Note [pool rows]: the pad of `pool`'s input at its loop `row` (one output row)."""
    for t in pool.op.input_tensors:
        if not (isinstance(t.op, te.ComputeOp) and t.op.tag == PAD_TAG):
            continue
        if config is not None:
            pad_rows = bool(config["pad_rows"])
        else:
            pad_rows = pad_rows_rule(
                pool.op.attrs["kind"], _row_bytes(t, pool.op.attrs["window_h"]), target
            )
        if pad_rows:
            s[t].compute_at(s[pool], row)
            s[t].set_scope("local")
            s[t].vectorize(s[t].op.axis[-1])
        else:
            s[t].compute_inline()


def _parallel_rows(s, t: te.Tensor):
    st = s[t]
    n, c, h, _, k = st.op.axis
    row = st.fuse(n, c, h)
    st.parallel(row)
    st.vectorize(k)
    return row


def _column_group(width: int) -> int:
    """Columns per group: the largest divisor of the row up to COLUMN_GROUP when it keeps at
    least half as many chains in flight, else as few evenly sized groups as cover the row
    (13 -> 7 + 6, the shorter last group peeled off): a row of prime width would otherwise run
    one latency-bound column at a time (27 -> 13 columns of 16 channels: 25 -> 13 us). Measured
    on AVX-512: 5 columns in flight run as fast as 8, and an exact 5 beats 8 with a tail."""
    divisor = max(d for d in range(1, COLUMN_GROUP + 1) if width % d == 0)
    if 2 * divisor >= COLUMN_GROUP or divisor == width:
        return divisor
    groups = -(-width // COLUMN_GROUP)
    return -(-width // groups)


def _window_loops(s, pool: te.Tensor, row=None, config=None) -> int:
    """Window loops inside a group of `u` output columns whose sums stay in registers and run
    interleaved: one column's max/sum is a chain of dependent operations, latency-bound alone.
    Returns u (0: a global pool's loops)."""
    st = s[pool]
    n, c, h, w, k = st.op.axis
    outer = [row] if row is not None else [n, c, h]
    rh, rw = st.op.reduce_axis
    if _extent(rh) * _extent(rw) > MAX_UNROLLED_WINDOW.value():  # global pools: the whole map
        st.reorder(*outer, w, rh, rw, k)
        st.vectorize(k)
        return 0
    u = config["column_group"] if config is not None else _column_group(_extent(w))
    wo, wi = st.split(w, factor=u)
    st.reorder(*outer, wo, rh, rw, wi, k)
    st.unroll(rh)
    st.unroll(rw)
    st.unroll(wi)
    st.vectorize(k)
    return u


# Note [pool pad]
# A pool in NC[D]HW (one not after a blocked conv: Note [block rule] in transform/alter_layout.py)
# runs its vector loop over the output's columns; with padding (or a ceil_mode overhang) each
# window element's bounds test differs per lane, and the loop ran scalar: a 6x6 max pool with
# pads 1 at 4-6x ONNX Runtime in bench/op_sweep.py. On a CPU with vectors the windows read the
# padded copy that topi.nn.pool builds, computed first in parallel (a copy of the input: one
# pass, against the window's kernel_h * kernel_w reads of each element).


def schedule_pool_nchw(outs, target=None) -> te.Schedule:
    """Note [pool pad]: topi.nn's pool schedule, the padded copy computed where the target has
    vectors (inlined, as the scalar targets have it, where it has none)."""
    from tessera.topi.nn.schedule import schedule_pool

    lanes = target.vector_lanes(outs[0].dtype) if target is not None else 1
    return schedule_pool(outs, target, copy_pad=lanes > 1)
