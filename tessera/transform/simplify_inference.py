"""Simplify a graph for inference: fold batch-norms into weights, drop identity ops.

    before:  %1 = nn.conv2d(%x, %w, ...); %2 = nn.batch_norm(%1, %g, %b, %m, %v, epsilon=1e-5)
    after:   %1 = nn.conv2d(%x, %w', ...); %2 = add(%1, %bias)       (%w', %bias: new constants)

`nn.batch_norm(x, gamma, beta, mean, var)` with constant parameters is `x * s + t` per channel,
s = gamma / sqrt(var + eps), t = beta - mean * s. When x comes from a conv (axis 1) or dense /
matmul (last axis) with a constant weight, used by the batch-norm alone, s goes into the
weight's output channels and t into one bias add (merged with a constant bias add between the
two, if any). Otherwise it becomes `multiply(x, s)` + `add(_, t)` with s, t as constants. With
non-constant parameters it stays. Scales are computed in float64, stored in the weight's dtype.

Removed as identities (their output is their input): `copy` (and `identity`, `nn.dropout` if
registered), reshape/expand to the same type, transpose by the identity permutation, cast to
the same dtype, `multiply(x, 1)`, `divide(x, 1)`, `add(x, 0)`, `subtract(x, 0)` with a constant
1 or 0 that does not change x's type by broadcasting.

Spans (Note [spans] in `tessera.graph.ir`): the scaled conv answers for the conv and the
batch-norm, the bias add for the batch-norm (and the constant bias add merged into it), a
standalone multiply + add for the batch-norm. A removed identity computes nothing: its name goes.
"""

from __future__ import annotations

import numpy as np

from tessera.graph.ir import Call, Constant, Function, Value, merge_spans
from tessera.graph.op import get_op
from tessera.transform.graph_pass import graph_pass, rebuild, remap_call, uses

IDENTITY_OPS = ("copy", "identity", "nn.dropout")
_CONVS = ("nn.conv1d", "nn.conv2d", "nn.conv3d")


def _all_equal(v: Value, value) -> bool:
    return isinstance(v, Constant) and bool(np.all(v.array == value))


def _identity_input(call: Call) -> Value | None:
    """The input that `call` returns unchanged, or None."""
    if len(call.outputs) != 1 or not call.inputs:
        return None
    name, out, x = call.op.name, call.outputs[0], call.inputs[0]
    if name in IDENTITY_OPS or name in ("reshape", "expand", "cast"):
        return x if x.type == out.type else None
    if name == "transpose":
        axes = [a % max(x.type.ndim, 1) for a in call.attrs["axes"]]
        return x if axes == list(range(x.type.ndim)) else None
    if name in ("multiply", "divide", "add", "subtract") and len(call.inputs) == 2:
        a, b = call.inputs
        unit = 1 if name in ("multiply", "divide") else 0
        if a.type == out.type and _all_equal(b, unit):
            return a
        if name in ("multiply", "add") and b.type == out.type and _all_equal(a, unit):
            return b
    return None


def _scale_shift(bn: Call):
    """(s, t) in float64 for a batch-norm with constant parameters, else None."""
    x, *params = bn.inputs
    if not all(isinstance(p, Constant) for p in params):
        return None
    gamma, beta, mean, var = (p.array.astype(np.float64) for p in params)
    s = gamma / np.sqrt(var + bn.attrs.get("epsilon", 1e-5))
    return s, beta - mean * s


def _channel_shape(c: int, axis: int, ndim: int) -> tuple[int, ...]:
    return (c,) + (1,) * (ndim - 1 - axis)


class _Rewriter:
    def __init__(self, func: Function):
        self.func = func
        self.uses = uses(func)
        self.outputs = {id(v) for v in func.outputs}
        self.producer = {id(v): c for c in func.body for v in c.outputs}
        self.dropped: set[int] = set()
        self.replace: dict[int, list[Call]] = {}

    def only_use(self, v: Value, call: Call) -> bool:
        return id(v) not in self.outputs and [id(c) for c in self.uses.get(id(v), ())] == [id(call)]

    def plan(self, bn: Call) -> None:
        st = _scale_shift(bn)
        if st is None:
            return
        x, out = bn.inputs[0], bn.outputs[0]
        axis = bn.attrs.get("axis", 1) % x.type.ndim
        s, t = st
        t_alone, bias_add, anchor = t, None, self.producer.get(id(x))
        if anchor is not None and anchor.op.name == "add" and self.only_use(x, bn):
            const = next((v for v in anchor.inputs if isinstance(v, Constant)), None)
            other = next((v for v in anchor.inputs if v is not const), None)
            if const is not None and other is not None and other.type == x.type:
                # a symbolic dim (graph/dims.py) is 1 in the constant: broadcast over it as 1
                shape = tuple(d if isinstance(d, int) else 1 for d in x.type.shape)
                bias = np.broadcast_to(const.array, shape)
                per_channel = np.moveaxis(bias, axis, 0).reshape(len(s), -1)
                if np.all(per_channel == per_channel[:, :1]):
                    t = t + per_channel[:, 0].astype(np.float64) * s
                    bias_add, x = anchor, other
                    anchor = self.producer.get(id(other))
        folded = self._fold_into(anchor, x, bn if bias_add is None else bias_add, axis, s, bn.span)
        if folded is None:
            self.replace[id(bn)] = self._standalone(bn, s, t_alone, axis)
            return
        self.dropped.update(id(c) for c in (anchor, bias_add) if c is not None)
        shape = _channel_shape(len(s), axis, out.type.ndim)
        data = t.reshape(shape).astype(out.type.dtype.numpy_name)
        bias = Constant(f"{out.name}_bias", out.type.with_shape(shape), data)
        span = merge_spans(bias_add.span if bias_add else (), bn.span)
        add = Call(get_op("add"), (folded.outputs[0], bias), {}, (out,), span)
        self.replace[id(bn)] = [folded, add]

    def _fold_into(self, anchor, x, user, axis, s, span) -> Call | None:
        """`anchor` with its weight scaled by s per output channel, or None."""
        if anchor is None or not self.only_use(x, user) or len(anchor.inputs) != 2:
            return None
        data, w = anchor.inputs
        name, ndim = anchor.op.name, x.type.ndim
        if not isinstance(w, Constant):
            return None
        if name in _CONVS and axis == 1:
            scaled = w.array * s.reshape((-1,) + (1,) * (w.type.ndim - 1))
        elif name == "nn.dense" and axis == ndim - 1:
            scaled = w.array * s[:, None]
        elif name == "matmul" and axis == ndim - 1 and w.type.ndim == 2:
            scaled = w.array * s[None, :]
        else:
            return None
        new_w = Constant(f"{w.name}_folded", w.type, scaled.astype(w.array.dtype))
        out = Value(x.name, x.type)
        return Call(anchor.op, (data, new_w), anchor.attrs, (out,), merge_spans(anchor.span, span))

    def _standalone(self, bn: Call, s, t, axis) -> list[Call]:
        x, out = bn.inputs[0], bn.outputs[0]
        shape = _channel_shape(len(s), axis, x.type.ndim)
        dtype = x.type.dtype.numpy_name
        scale = Constant(
            f"{out.name}_scale", x.type.with_shape(shape), s.reshape(shape).astype(dtype)
        )
        shift = Constant(
            f"{out.name}_shift", x.type.with_shape(shape), t.reshape(shape).astype(dtype)
        )
        scaled = Value(f"{out.name}_scaled", x.type)
        return [
            Call(get_op("multiply"), (x, scale), {}, (scaled,), bn.span),
            Call(get_op("add"), (scaled, shift), {}, (out,), bn.span),
        ]


def _new_constants(calls: list[Call], known: set[int]) -> list[Constant]:
    out = []
    for call in calls:
        for v in call.inputs:
            if isinstance(v, Constant) and id(v) not in known:
                known.add(id(v))
                out.append(v)
    return out


@graph_pass(opt_level=0)
def simplify_inference(func: Function) -> Function:
    r = _Rewriter(func)
    for call in func.body:
        if call.op.name == "nn.batch_norm":
            r.plan(call)
    mapping: dict[int, Value] = {}
    body, constants = [], list(func.constants)
    known = {id(c) for c in constants}
    for call in func.body:
        if id(call) in r.dropped:
            continue
        new = [remap_call(c, mapping) for c in r.replace.get(id(call), [call])]
        for c in new:
            x = _identity_input(c)
            if x is not None:
                mapping[id(c.outputs[0])] = x
            else:
                body.append(c)
        constants += _new_constants(new, known)
    # Drop the constants this pass left unused (old weights); others are dead code's business.
    before = _used(func.body, func.outputs, {})
    after = _used(body, func.outputs, mapping)
    unused_before = {id(c) for c in func.constants} - before
    constants = [c for c in constants if id(c) in after or id(c) in unused_before]
    return rebuild(func, body, mapping, constants)


def _used(body, outputs, mapping) -> set[int]:
    return {id(v) for c in body for v in c.inputs} | {id(mapping.get(id(v), v)) for v in outputs}
