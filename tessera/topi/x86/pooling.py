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
from tessera.topi.generic import inline_injective
from tessera.topi.nn.conv import _ints, _static
from tessera.topi.nn.pooling import _acc_dtype, _window_count, pool_output_size

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
    if min(out) < 1:
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
    shape = _static(x.shape, POOL_TAG)
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
        fill = te.const(0, acc)

    def value(n, c, sp, k):
        pos = [sp[i] * strides[i] - padding[i] + rk[i].var * dilation[i] for i in range(2)]
        conds = []
        for i in range(2):
            if padding[i]:
                conds.append(pos[i] >= 0)
            if (out[2 + i] - 1) * strides[i] - padding[i] + (pool_size[i] - 1) * dilation[
                i
            ] >= size[i]:
                conds.append(pos[i] < size[i])
        return te.if_then_else(te.all(*conds), te.cast(x(n, c, *pos, k), acc), fill)

    reducer = te.max if kind == "max" else te.sum
    red = te.compute(
        out,
        lambda n, c, i, j, k: reducer(value(n, c, (i, j), k), axis=rk),
        name=f"{kind}_pool_nchwc",
        tag=POOL_TAG,
    )
    if kind == "max":
        return red

    def average(n, c, i, j, k):
        count = _window_count(i, *args[0], count_include_pad)
        count = count * _window_count(j, *args[1], count_include_pad)
        return te.cast(red(n, c, i, j, k) / te.cast(te.max(count, 1), acc), x.dtype)

    return te.compute(out, average, name="avg_pool_nchwc", tag="elemwise")


def global_pool_nchwc(x: te.Tensor, kind: str) -> te.Tensor:
    """Max or average over H and W of a (N, C/b, H, W, b) tensor: (N, C/b, 1, 1, b)."""
    if kind not in ("max", "avg"):
        raise ValueError(f"global_pool_nchwc: kind must be 'max' or 'avg', got {kind!r}")
    n, cb, h, w, b = _static(x.shape, POOL_TAG)
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


def schedule_pool_nchwc(outs, target=None) -> te.Schedule:
    """Parallel over (n, channel blocks, output rows); the window loops outside the vector of the
    channel block; an element-wise epilogue (the average's division, a relu) computed per row
    right after the pool."""
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
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
    if single and _static(outs[0].shape, POOL_TAG) == _static(pools[0].shape, POOL_TAG):
        row = _parallel_rows(s, outs[0])
        s[pools[0]].compute_at(s[outs[0]], row)
        _window_loops(s, pools[0])
        return s
    for pool in pools:
        _window_loops(s, pool, row=_parallel_rows(s, pool))
    for t in outs:
        if id(t.op) not in {id(p.op) for p in pools}:
            _parallel_rows(s, t)
    return s


def _parallel_rows(s, t: te.Tensor):
    st = s[t]
    n, c, h, _, k = st.op.axis
    row = st.fuse(n, c, h)
    st.parallel(row)
    st.vectorize(k)
    return row


def _window_loops(s, pool: te.Tensor, row=None) -> None:
    st = s[pool]
    n, c, h, w, k = st.op.axis
    outer = [row] if row is not None else [n, c, h]
    st.reorder(*outer, w, *st.op.reduce_axis, k)
    st.vectorize(k)
