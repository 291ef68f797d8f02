"""Fold a ReLU or clip that only feeds qnn.quantize into the quantize's saturation range.

    before:  %6 = clip(%5, a_min=0.0, a_max=6.0)
             %7 = qnn.quantize(%6, scale=0.05, zero_point=0, dtype="uint8")
    after:   %7 = qnn.quantize(%5, scale=0.05, zero_point=0, dtype="uint8", out_min=0, out_max=120)

Note [clamps folded into quantize]
qnn.quantize is q(x) = saturate(round_half_even(x * float32(1 / scale)) + zero_point), and every
step is monotone non-decreasing in x (a float32 product by a positive constant, rounding, adding
an integer, saturating), so q(clip(x, a, b)) = clamp(q(x), q(a), q(b)) for every x that is not
NaN: the clip becomes the integer range [q(a), q(b)] of the quantize itself (nn.relu is clip(x,
0, inf)). In an int8 epilogue that removes the float clamps of ReLU6 (the NaN-propagating
min/max, five instructions a bound on x86) from every requantized output: the ReLU/ReLU6
"fused into the requantize". The bounds are cast to the clip's float32 first, as its kernel
does. A clip with other users (a function output, a float op) stays.
"""

from __future__ import annotations

import numpy as np

from tessera.graph.ir import Call, Function
from tessera.transform.graph_pass import graph_pass, rebuild, uses


def _bounds(call: Call) -> tuple[float | None, float | None] | None:
    """The (low, high) of a float32 clip or ReLU; None: not one."""
    if str(call.outputs[0].type.dtype) != "float32" or len(call.inputs) != 1:
        return None
    if call.op.name == "nn.relu":
        return 0.0, None
    if call.op.name == "clip":
        lo, hi = call.attrs.get("a_min"), call.attrs.get("a_max")
        if any(b is not None and np.isnan(b) for b in (lo, hi)):
            return None  # every output NaN
        if lo is not None and hi is not None and lo > hi:
            return None  # every output a_max: no range of the quantize's
        return lo, hi
    return None


def _quantized(bound, attrs, dtype: str) -> int:
    from tessera.topi.qnn import reciprocal

    scale, zp = attrs.get("scale", 1.0), attrs.get("zero_point", 0)
    q = np.round(np.float32(bound) * reciprocal(scale)) + np.float32(zp)
    info = np.iinfo(dtype)
    return int(np.clip(q, info.min, info.max))


@graph_pass(opt_level=1)
def fold_qnn_clamp(func: Function) -> Function:
    users = uses(func)
    outputs = {id(v) for v in func.outputs}
    clamps = {}  # id(clip output) -> (clip input, bounds)
    for call in func.body:
        b = _bounds(call)
        out = call.outputs[0] if len(call.outputs) == 1 else None
        if b is None or out is None or id(out) in outputs:
            continue
        found = users.get(id(out), [])
        if found and all(u.op.name == "qnn.quantize" for u in found):
            clamps[id(out)] = (call.inputs[0], b)
    if not clamps:
        return func
    body = []
    for call in func.body:
        if call.outputs and id(call.outputs[0]) in clamps:
            continue  # its users quantize its input instead
        if call.op.name == "qnn.quantize" and id(call.inputs[0]) in clamps:
            x, (a, b) = clamps[id(call.inputs[0])]
            attrs = dict(call.attrs)
            dtype = attrs.get("dtype", "uint8")
            for key, bound, pick in (("out_min", a, max), ("out_max", b, min)):
                if bound is not None:
                    q = _quantized(bound, attrs, dtype)
                    attrs[key] = q if attrs.get(key) is None else pick(q, attrs[key])
            call = Call(call.op, (x,), attrs, call.outputs, call.span)
        body.append(call)
    return rebuild(func, body, {})
