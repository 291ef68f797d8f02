"""Ops of microcontroller targets, registered when the "micro" strategies load:

    %y = qnn.requantize_fixed(%acc, %mult, %shift, zero_point=zp, dtype="int8")

qnn.requantize with its float32 scale as an int32 multiplier and a right shift (Note
[fixed-point requantize] in topi/micro/requantize.py), emitted by the graph pass
transform/fixed_point_requantize.py where the micro strategy of qnn.requantize says "fixed".
"""

from __future__ import annotations

from tessera.graph.ir import TensorType
from tessera.graph.op import OpKind, get_op, register_op
from tessera.graph.ops.common import broadcast_shapes, type_error
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
