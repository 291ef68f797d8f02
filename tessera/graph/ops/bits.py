"""`bitcast`: reinterpret each element's bits as another dtype of the same width (ONNX BitCast).

    %y = bitcast(%x, dtype="int32")      # f32[4] -> i32[4], the same bytes

bool and 8-bit integers share a width (a bool is the byte 0 or 1).
"""

from __future__ import annotations

import numpy as np

from tessera.graph.ir import TensorType
from tessera.graph.op import OpKind, register_op
from tessera.graph.ops.common import type_error
from tessera.ir.dtype import DType
from tessera.topi import elemwise as topi_elemwise

bitcast = register_op("bitcast", kind=OpKind.ELEMWISE)


def _bits(dtype: DType) -> int:
    return 8 if dtype.is_bool else dtype.bits


@bitcast.type_rule
def _(x: TensorType, dtype) -> TensorType:
    out = DType.parse(dtype)
    if _bits(out) != _bits(x.dtype):
        raise type_error("bitcast", f"{x} and {out} differ in bit width")
    return x.with_dtype(out)


@bitcast.reference
def _(x, dtype):
    out = np.dtype(DType.parse(dtype).numpy_name)
    return np.ascontiguousarray(x).view(out).reshape(x.shape)


@bitcast.compute
def _(x, dtype):
    from tessera import te

    out = DType.parse(dtype)
    if out == x.dtype:
        return te.compute(x.shape, lambda *i: x(*i), name="bitcast", tag="elemwise")
    if out.is_bool or x.dtype.is_bool:  # bool bytes are 0 or 1: a value cast keeps them
        return topi_elemwise.cast(x, out)
    return te.compute(x.shape, lambda *i: te.reinterpret(x(*i), out), name="bitcast",
                      tag="elemwise")  # fmt: skip
