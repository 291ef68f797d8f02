"""Convolutions in NCHW layout (1, 2 or 3 spatial dims), with groups, dilation and asymmetric
padding, and the transposed convolution.

    y = conv(x, w, strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=1)
    # x: (N, C, H, W), w: (O, C / groups, KH, KW) -> y: (N, O, OH, OW), tag "conv2d_nchw"

Both are one reduction `te.compute` over a zero-padded input stage (name "pad", tag "pad"; it is
omitted when there is nothing to pad), so a schedule can compute the padding once, per image,
or inline it. `padding` lists the begin pads of every spatial axis, then the end pads (ONNX).
"""

from __future__ import annotations

from tessera import te
from tessera.topi.nn.dense import _accumulated, _wide

PAD_TAG = "pad"


def _ints(values, n: int, what: str, op: str) -> tuple[int, ...]:
    values = tuple(int(v) for v in values)
    if len(values) != n:
        raise ValueError(f"{op}: needs {n} {what}, got {values}")
    return values


def _dims(dims) -> tuple:
    """Each dim as an int where it is static, else its expression (a symbolic batch or
    spatial size, topi/symbolic.py)."""
    return tuple(int(d.value) if hasattr(d, "value") else d for d in dims)


def _static(dims, what: str) -> tuple[int, ...]:
    try:
        return tuple(int(d.value) for d in dims)
    except AttributeError:
        raise ValueError(f"{what}: symbolic shapes are not supported, got {dims}") from None


def _batch_and_sizes(dims, what: str) -> tuple:
    """NC... dims: the channels static, the batch and the sizes ints or symbolic (graph/dims.py)."""
    _static(dims[1:2], what)
    return _dims(dims)


def pad(x: te.Tensor, before, after, value=0.0, name: str = "pad") -> te.Tensor:
    """x zero-padded (or `value`-padded) on its spatial axes (2, 3, ...)."""
    nd = len(before)
    shape = list(x.shape[:2]) + [x.shape[2 + i] + before[i] + after[i] for i in range(nd)]

    def f(n, c, *sp):
        idx = [sp[i] - before[i] for i in range(nd)]
        inside = te.all(*[idx[i] >= 0 for i in range(nd) if before[i]])
        inside = te.all(inside, *[idx[i] < x.shape[2 + i] for i in range(nd) if after[i]])
        return te.if_then_else(inside, x(n, c, *idx), te.const(value, x.dtype))

    return te.compute(shape, f, name=name, tag=PAD_TAG)


def conv(x: te.Tensor, w: te.Tensor, strides, padding, dilation, groups: int = 1) -> te.Tensor:
    """N-d convolution (cross-correlation, as in ONNX) of NC... data with OI... weights."""
    nd = x.ndim - 2
    op = f"conv{nd}d"
    strides = _ints(strides, nd, "strides", op)
    dilation = _ints(dilation, nd, "dilations", op)
    padding = _ints(padding, 2 * nd, "pads", op)
    n, c, *size = _batch_and_sizes(x.shape, op)  # batch and spatial sizes may be symbolic
    o, cg, *kernel = _static(w.shape, op)
    if groups < 1 or c != cg * groups or o % groups:
        raise ValueError(f"{op}: channels of data {x.shape} and weight {w.shape} disagree")
    out = [
        (size[i] + padding[i] + padding[nd + i] - dilation[i] * (kernel[i] - 1) - 1) // strides[i]
        + 1
        for i in range(nd)
    ]
    xp = pad(x, padding[:nd], padding[nd:]) if any(padding) else x
    rc = te.reduce_axis((0, cg), name="rc")
    rk = [te.reduce_axis((0, kernel[i]), name=f"r{'dhw'[3 - nd + i]}") for i in range(nd)]
    og = o // groups

    def f(b, co, *sp):
        ci = rc.var if groups == 1 else co // og * cg + rc.var
        pos = [sp[i] * strides[i] + rk[i].var * dilation[i] for i in range(nd)]
        return te.sum(_wide(xp(b, ci, *pos)) * _wide(w(co, rc, *rk)), axis=[rc, *rk])

    # 16-bit floats accumulate in float32, rounded once (as dense does)
    return _accumulated(te.compute((n, o, *out), f, name="conv", tag=f"conv{nd}d_nchw"), x.dtype)


def _dilate_pad(x: te.Tensor, strides, offsets, full) -> te.Tensor:
    """xd[j] = x[(j + offset) / stride] where that is an integer position of x, else 0."""
    nd = len(strides)

    def f(n, c, *sp):
        src, conds = [], []
        for i in range(nd):
            j = sp[i] + offsets[i]
            if strides[i] > 1:
                conds.append(j % strides[i] == 0)
            src.append(j // strides[i] if strides[i] > 1 else j)
            if offsets[i] < 0:
                conds.append(j >= 0)
            conds.append(src[i] < x.shape[2 + i])
        return te.if_then_else(te.all(*conds), x(n, c, *src), te.const(0, x.dtype))

    return te.compute((*x.shape[:2], *full), f, name="pad", tag=PAD_TAG)


def conv_transpose(
    x: te.Tensor, w: te.Tensor, strides, padding, dilation, groups: int = 1, output_padding=None
) -> te.Tensor:
    """The gradient of conv with respect to its data: x (N, C, ...), w (C, O / groups, ...).

    Computed as a direct convolution of the stride-dilated, padded data with the flipped kernel.
    """
    nd = x.ndim - 2
    op = f"conv{nd}d_transpose"
    strides = _ints(strides, nd, "strides", op)
    dilation = _ints(dilation, nd, "dilations", op)
    padding = _ints(padding, 2 * nd, "pads", op)
    output_padding = _ints(output_padding or (0,) * nd, nd, "output paddings", op)
    n, c, *size = _static(x.shape, op)
    _, og, *kernel = _static(w.shape, op)
    if groups < 1 or c != w.shape[0].value or c % groups:
        raise ValueError(f"{op}: channels of data {x.shape} and weight {w.shape} disagree")
    cg = c // groups
    span = [dilation[i] * (kernel[i] - 1) for i in range(nd)]
    out = [
        strides[i] * (size[i] - 1) + output_padding[i] + span[i] + 1 - padding[i] - padding[nd + i]
        for i in range(nd)
    ]
    # output position y reads the full (uncropped) position y + pad_begin - span + k * dilation
    offsets = [padding[i] - span[i] for i in range(nd)]
    xd = _dilate_pad(x, strides, offsets, [out[i] + span[i] for i in range(nd)])
    rc = te.reduce_axis((0, cg), name="rc")
    rk = [te.reduce_axis((0, kernel[i]), name=f"r{'dhw'[3 - nd + i]}") for i in range(nd)]

    def f(b, co, *sp):
        ci = rc.var if groups == 1 else co // og * cg + rc.var
        pos = [sp[i] + rk[i].var * dilation[i] for i in range(nd)]
        flipped = [kernel[i] - 1 - rk[i].var for i in range(nd)]
        return te.sum(_wide(xd(b, ci, *pos)) * _wide(w(ci, co % og, *flipped)), axis=[rc, *rk])

    out = te.compute(
        (n, og * groups, *out), f, name="conv_transpose", tag=f"conv{nd}d_transpose_nchw"
    )
    return _accumulated(out, x.dtype)
