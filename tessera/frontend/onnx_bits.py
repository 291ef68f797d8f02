"""ONNX converter for BitCast (opset 26): the `bitcast` graph op."""

from __future__ import annotations

from onnx import helper

from tessera.frontend.onnx_registry import NodeError, onnx_op


@onnx_op("BitCast", since=26)
def bitcast(b, input, *, to):
    try:
        dtype = helper.tensor_dtype_to_np_dtype(to)
    except (KeyError, ValueError, TypeError):
        raise NodeError(f"to={to} is not a tensor element type") from None
    return b.call("bitcast", input, dtype=str(dtype))
