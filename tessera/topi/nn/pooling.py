"""Pooling in NCHW layout (1, 2 or 3 spatial dims): max and average, with dilation, asymmetric
padding, ceil_mode and count_include_pad (ONNX semantics), and the global pools.

    y = pool(x, "max", pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1), ceil_mode=1)
    y = global_pool(x, "avg")                     # (N, C, 1, 1)

A pool is a reduction over the window (tag "pool"); positions outside the data are skipped by an
`if_then_else` in the body, so no padded copy of the data is made. An average divides in a second,
element-wise stage by the closed-form count of the window positions that count.
"""

from __future__ import annotations

from tessera import te
from tessera.ir.dtype import DType
from tessera.topi.nn.conv import _batch_and_sizes, _dims, _ints, pad
from tessera.topi.symbolic import product


def pool_output_size(size, kernel, stride, pad_begin, pad_end, dilation, ceil_mode) -> int:
    """ONNX/PyTorch output size; with ceil_mode the last window must start in the data or the
    begin pad (the same rule as the type rule of nn.*_pool)."""
    span = size + pad_begin + pad_end - ((kernel - 1) * dilation + 1)
    if not isinstance(size, int):  # a symbolic size: the same rule as an expression
        if not ceil_mode:
            return te.floordiv(span, stride) + 1
        out = te.floordiv(span + stride - 1, stride)
        # [out * stride >= size + pad_begin] in min/max, which an executor plan evaluates
        late = te.min(te.max(out * stride - size - pad_begin + 1, 0), 1)
        return out + 1 - late
    out = (-(-span // stride) if ceil_mode else span // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + pad_begin:
        out -= 1
    return out


def _acc_dtype(dtype: DType) -> DType:
    return (
        DType.parse("float64") if dtype.is_integer or dtype.bits == 64 else DType.parse("float32")
    )


def _window_count(o, size, kernel, stride, pad_begin, pad_end, dilation, include_pad):
    """How many of the window's positions o*stride - pad_begin + k*dilation lie in [lo, hi)."""
    lo, hi = (-pad_begin, size + pad_end) if include_pad else (0, size)
    start = o * stride - pad_begin
    k_min = te.max((lo - start + dilation - 1) // dilation, 0)
    k_max = te.min((hi - 1 - start) // dilation, kernel - 1)
    return te.max(k_max - k_min + 1, 0)


def pool(
    x: te.Tensor,
    kind: str,
    pool_size,
    strides,
    padding,
    dilation=None,
    ceil_mode=0,
    count_include_pad=0,
) -> te.Tensor:
    """Max ("max") or average ("avg") pooling over the spatial axes of NC... data."""
    if kind not in ("max", "avg"):
        raise ValueError(f"pool: kind must be 'max' or 'avg', got {kind!r}")
    nd = x.ndim - 2
    op = f"{kind}_pool{nd}d"
    pool_size = _ints(pool_size, nd, "pool sizes", op)
    strides = _ints(strides, nd, "strides", op)
    dilation = _ints(dilation or (1,) * nd, nd, "dilations", op)
    padding = _ints(padding, 2 * nd, "pads", op)
    n, c, *size = _batch_and_sizes(x.shape, op)  # symbolic dims: topi/symbolic.py
    args = [
        (size[i], pool_size[i], strides[i], padding[i], padding[nd + i], dilation[i])
        for i in range(nd)
    ]
    out = [pool_output_size(*a, ceil_mode) for a in args]
    rk = [te.reduce_axis((0, pool_size[i]), name=f"r{'dhw'[3 - nd + i]}") for i in range(nd)]
    acc = x.dtype if kind == "max" else _acc_dtype(x.dtype)
    if kind == "max":
        fill = te.const(float("-inf"), x.dtype) if x.dtype.is_float else te.min_value(x.dtype)
    else:
        fill = te.const(0, acc)

    lasts = [
        (out[i] - 1) * strides[i] - padding[i] + (pool_size[i] - 1) * dilation[i] for i in range(nd)
    ]
    static = all(isinstance(v, int) for v in (*size, *lasts))
    if static and x.dtype.is_float and any(padding[i] or lasts[i] >= size[i] for i in range(nd)):
        # Note [pool pad]: the windows read a padded copy (the fill past every edge, the ceil
        # overhang included), so their loops carry no bounds tests; schedules inline it back
        # (PAD_TAG) where the tests are cheaper than the copy
        after = [max(padding[nd + i], lasts[i] + 1 - size[i]) for i in range(nd)]
        xp = pad(x, padding[:nd], after, float(fill.value), name=f"{kind}_pool_pad")

        def value(b, ch, sp):
            pos = [sp[i] * strides[i] + rk[i].var * dilation[i] for i in range(nd)]
            return te.cast(xp(b, ch, *pos), acc)

    else:

        def value(b, ch, sp):
            pos = [sp[i] * strides[i] - padding[i] + rk[i].var * dilation[i] for i in range(nd)]
            conds = []
            for i in range(nd):
                if padding[i]:
                    conds.append(pos[i] >= 0)
                last = lasts[i]
                if not isinstance(size[i], int) or not isinstance(last, int) or last >= size[i]:
                    conds.append(pos[i] < size[i])
            return te.if_then_else(te.all(*conds), te.cast(x(b, ch, *pos), acc), fill)

    reducer = te.max if kind == "max" else te.sum
    red = te.compute(
        (n, c, *out),
        lambda b, ch, *sp: reducer(value(b, ch, sp), axis=rk),
        name=f"{kind}_pool",
        tag="pool",
    )
    if kind == "max":
        return red

    def average(b, ch, *sp):
        count = 1
        for i in range(nd):
            count = count * _window_count(sp[i], *args[i], count_include_pad)
        return te.cast(red(b, ch, *sp) / te.cast(te.max(count, 1), acc), x.dtype)

    return te.compute(red.shape, average, name="avg_pool", tag="elemwise")


def global_pool(x: te.Tensor, kind: str) -> te.Tensor:
    """Max or average over all spatial axes: (N, C, ...) -> (N, C, 1, ...)."""
    if kind not in ("max", "avg"):
        raise ValueError(f"global_pool: kind must be 'max' or 'avg', got {kind!r}")
    nd = x.ndim - 2
    n, c, *size = _dims(x.shape)
    rk = [te.reduce_axis((0, size[i]), name=f"r{'dhw'[3 - nd + i]}") for i in range(nd)]
    if kind == "max":
        return te.compute(
            (n, c, *(1,) * nd),
            lambda b, ch, *_: te.max(x(b, ch, *rk), axis=rk),
            name="global_max_pool",
            tag="pool",
        )
    acc = _acc_dtype(x.dtype)
    total = te.compute(
        (n, c, *(1,) * nd),
        lambda b, ch, *_: te.sum(te.cast(x(b, ch, *rk), acc), axis=rk),
        name="global_avg_pool_sum",
        tag="pool",
    )
    count = product(size)
    count = float(count) if isinstance(count, int) else te.cast(count, acc)
    return te.compute(
        total.shape,
        lambda *i: te.cast(total(*i) / count, x.dtype),
        name="global_avg_pool",
        tag="elemwise",
    )
