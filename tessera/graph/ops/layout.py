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
