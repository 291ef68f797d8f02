"""Ops of microcontroller targets, registered when the "micro" strategies load:

    %y = qnn.requantize_fixed(%acc, %mult, %shift, zero_point=zp, dtype="int8")
    %acc = qnn.conv2d_mve(%x, %wm, %comp, ...)  and  qnn.dense_mve(%x, %wm, %comp, units=N)

qnn.requantize with its float32 scale as an int32 multiplier and a right shift (Note
[fixed-point requantize] in topi/micro/requantize.py), emitted by the graph pass
transform/fixed_point_requantize.py where the micro strategy of qnn.requantize says "fixed".
The MVE convs and dense layers (topi/micro/mve.py) take the weight in the layout of Note [MVE
layouts] and its compensation constant (transform/pack_qnn_weights.py packs both).
"""

from __future__ import annotations

import numpy as np

from tessera.graph.ir import TensorType
from tessera.graph.op import OpKind, get_op, register_op
from tessera.graph.ops.common import broadcast_shapes, type_error
from tessera.topi import qnn as topi_qnn
from tessera.topi.micro import mve
from tessera.topi.micro import requantize as fixed

requantize_fixed = register_op("qnn.requantize_fixed", kind=OpKind.BROADCAST)


@requantize_fixed.type_rule
def _(acc: TensorType, mult: TensorType, shift: TensorType, zero_point=0, dtype="int8"):
    if str(acc.dtype) != "int32" or str(mult.dtype) != "int32" or str(shift.dtype) != "int32":
        raise type_error("qnn.requantize_fixed", f"expects int32 operands, {acc} {mult} {shift}")
    if dtype not in ("uint8", "int8"):
        raise type_error("qnn.requantize_fixed", f"dtype must be uint8 or int8, got {dtype}")
    if (
        mult.shape != shift.shape
        or broadcast_shapes("qnn.requantize_fixed", acc.shape, mult.shape) != acc.shape
    ):
        raise type_error("qnn.requantize_fixed", f"{mult} and {shift} must broadcast to {acc}")
    return TensorType(acc.shape, dtype)


@requantize_fixed.reference
def _(acc, mult, shift, zero_point=0, dtype="int8"):
    return fixed.reference(acc, mult, shift, zero_point, dtype)


@requantize_fixed.compute
def _(acc, mult, shift, *, zero_point=0, dtype="int8"):
    return fixed.requantize_fixed(acc, mult, shift, zero_point=zero_point, dtype=dtype)


get_op("qnn.add").rules["compute:micro"] = fixed.qlinear_add_micro  # Note [fixed-point add]


# -- MVE (Helium) int8 kernels: topi/micro/mve.py, emitted by transform/pack_qnn_weights.py -----
# where the micro strategy of qnn.conv2d or qnn.dense says "mve" (cores with MVE: the M55)

conv2d_mve = register_op("qnn.conv2d_mve", kind=OpKind.OUT_ELEMWISE_FUSABLE)


@conv2d_mve.type_rule
def _(x: TensorType, wm: TensorType, comp: TensorType, strides, padding, dilation, groups,
      pad_value, kernel, config=None):  # fmt: skip
    if str(x.dtype) not in ("uint8", "int8") or x.ndim != 4:
        raise type_error("qnn.conv2d_mve", f"data must be NCHW uint8 or int8, got {x}")
    if str(wm.dtype) != "int8" or wm.ndim != 4 or str(comp.dtype) != "int32":
        raise type_error("qnn.conv2d_mve", f"expects int8 (O, KH, T, RP) and int32 (O,), got "
                         f"{wm} {comp}")  # fmt: skip
    oc = wm.shape[0]
    if comp.shape != (oc,) or x.shape[1] % groups or oc % groups or wm.shape[1] != kernel[0]:
        raise type_error("qnn.conv2d_mve", f"{x}, {wm} and {comp} disagree (groups {groups})")
    out = [
        topi_qnn.conv_out_size(x.shape[2 + i], kernel[i], strides[i], padding[i],
                               padding[i + 2], dilation[i])  # fmt: skip
        for i in range(2)
    ]
    if min(out) < 1:
        raise type_error("qnn.conv2d_mve", f"kernel {kernel} is larger than padded input {x}")
    return TensorType((x.shape[0], oc, *out), "int32")


@conv2d_mve.reference
def _(x, wm, comp, strides, padding, dilation, groups, pad_value, kernel, config=None):
    w = mve.unpack_conv(wm, x.shape[1], groups, dilation[1], kernel)
    attrs = dict(strides=strides, padding=padding, dilation=dilation, groups=groups,
                 pad_value=pad_value)  # fmt: skip
    return get_op("qnn.conv2d").evaluate([x, topi_qnn.pack_conv_weight(w)], attrs)[0]


@conv2d_mve.compute
def _(x, wm, comp, *, strides, padding, dilation, groups, pad_value, kernel, config=None):
    return mve.qnn_conv2d_mve(x, wm, comp, strides=strides, padding=padding, dilation=dilation,
                              groups=groups, pad_value=pad_value, kernel=kernel)  # fmt: skip


dense_mve = register_op("qnn.dense_mve", kind=OpKind.OUT_ELEMWISE_FUSABLE)


@dense_mve.type_rule
def _(x: TensorType, wm: TensorType, comp: TensorType, units, config=None):
    if str(x.dtype) not in ("uint8", "int8") or x.ndim < 1:
        raise type_error("qnn.dense_mve", f"data must be uint8 or int8, got {x}")
    if str(wm.dtype) != "int8" or wm.shape != (units, -(-x.shape[-1] // 16) * 16):
        raise type_error("qnn.dense_mve", f"weight {wm} does not fit {x} ({units} units)")
    if str(comp.dtype) != "int32" or comp.shape != (units,):
        raise type_error("qnn.dense_mve", f"compensation {comp} is not int32 ({units},)")
    return TensorType((*x.shape[:-1], units), "int32")


@dense_mve.reference
def _(x, wm, comp, units, config=None):
    w = wm[:, : x.shape[-1]].astype(np.int64)
    xu = x.astype(np.int64) + (128 if x.dtype == np.int8 else 0)
    return (xu @ w.T).astype(np.int32)


@dense_mve.compute
def _(x, wm, comp, *, units, config=None):
    return mve.qnn_dense_mve(x, wm, comp, units)


conv2d_mve.schedule("micro")(mve.schedule_qnn_conv2d_mve)
dense_mve.schedule("micro")(mve.schedule_qnn_dense_mve)


def _sum_pool2d_micro(x, *, pool_size, strides, padding, dilation, zero_point=0):
    """qnn.sum_pool2d on a micro target: Note [MVE pool] where its strategy chose "mve"."""
    from tessera.topi.strategy import compute_config

    config = compute_config()
    if config is not None and config.impl == "mve":
        return mve.sum_pool2d_mve(x, pool_size, strides, padding, dilation, zero_point)
    return topi_qnn.sum_pool2d(x, pool_size, strides, padding, dilation, zero_point)


def _schedule_sum_pool2d_micro(outs, target=None, config=None):
    from tessera.topi.generic import traverse
    from tessera.topi.nn import schedule as nn_schedule

    tags = []
    traverse(list(outs), lambda op: tags.append(op.tag))
    if mve.POOL_TAG in tags:
        return mve.schedule_sum_pool2d_mve(outs, target)
    return nn_schedule.schedule_pool(outs, target)


get_op("qnn.sum_pool2d").rules["compute:micro"] = _sum_pool2d_micro
get_op("qnn.sum_pool2d").schedule("micro")(_schedule_sum_pool2d_micro)
