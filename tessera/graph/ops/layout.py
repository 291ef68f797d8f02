"""`layout_transform`: a tensor from one layout to another (NCHW <-> NCHW16c, ...).

    %1 = layout_transform(%x, src_layout="NCHW", dst_layout="NCHW16c") : f32[1, 4, 56, 56, 16]

The `alter_layout` pass (tessera/transform/alter_layout.py) writes it around the blocked forms
of convolutions and pools; those ops belong to the targets whose strategies choose them
(`tessera/topi/x86/ops.py`: `nn.conv2d_nchwc`, `nn.conv2d_winograd_nchwc`, the NCHW[x]c pools).
A blocked tensor (N, C/b, H, W, b) holds channel c at [:, c // b, :, :, c % b].
"""

from __future__ import annotations

from tessera.graph.ir import TensorType
from tessera.graph.op import OpKind, register_op
from tessera.graph.ops.common import type_error
from tessera.topi import layout as topi_layout

layout_transform = register_op("layout_transform", kind=OpKind.INJECTIVE)


@layout_transform.type_rule
def _(x: TensorType, src_layout, dst_layout) -> TensorType:
    try:
        return x.with_shape(topi_layout.transform_shape(x.shape, src_layout, dst_layout))
    except ValueError as err:
        raise type_error("layout_transform", f"{x}: {err}") from None


@layout_transform.reference
def _(x, src_layout, dst_layout):
    return topi_layout.transform_array(x, src_layout, dst_layout)


@layout_transform.compute
def _(x, *, src_layout, dst_layout):
    return topi_layout.layout_transform(x, src_layout, dst_layout)


# `channel_shuffle`: ShuffleNet's Reshape(N, g, C/g, H, W) - Transpose(0, 2, 1, 3, 4) - Reshape
# as one op, on NCHW or blocked NCHW[x]c data (the block is the 5-d shape's last dim):
# alter_layout writes it where the shuffled value is blocked, so it stays blocked.
#     %2 = channel_shuffle(%1, groups=4) : f32[1, 17, 14, 14, 16]

channel_shuffle = register_op("channel_shuffle", kind=OpKind.INJECTIVE)


@channel_shuffle.type_rule
def _(x: TensorType, groups) -> TensorType:
    if x.ndim not in (4, 5) or not x.is_static:
        raise type_error("channel_shuffle", f"expects static NCHW or NCHW[x]c data, got {x}")
    channels = x.shape[1] * (x.shape[4] if x.ndim == 5 else 1)
    if groups < 1 or channels % groups:
        raise type_error(
            "channel_shuffle", f"{channels} channels do not split into {groups} groups"
        )
    return x


@channel_shuffle.reference
def _(x, groups):
    layout = "NCHW" if x.ndim == 4 else f"NCHW{x.shape[4]}c"
    plain = topi_layout.transform_array(x, layout, "NCHW")
    n, c, h, w = plain.shape
    shuffled = plain.reshape(n, groups, c // groups, h, w).transpose(0, 2, 1, 3, 4)
    return topi_layout.transform_array(shuffled.reshape(n, c, h, w), "NCHW", layout)


@channel_shuffle.compute
def _(x, *, groups):
    return topi_layout.channel_shuffle(x, groups)


channel_shuffle.schedule("generic")(topi_layout.schedule_channel_shuffle)
