"""The rewrite of tessera.quantize: float convs and dense/matmuls with constant weights become
int8 ops between explicit quantize and dequantize calls.

    before:  %y = nn.conv2d(%x, %w, strides=.., padding=.., ...) : f32[1, 64, 56, 56]
    after:   %xq = qnn.quantize(%x, scale=0.0213, zero_point=0, dtype="uint8")
             %acc = qnn.conv2d(%xq, %w4, ..., pad_value=0)          # %w4: int8 words
             %acc2 = subtract(%acc, %comp)                          # zero-point compensation
             %y = qnn.dequantize(%acc2, %scale)                     # sx * sw per channel

Weights are int8, symmetric, one scale per output channel (max |w| / 127). What follows a layer
(bias, ReLU, the next layer's quantize) is float and element-wise, so fuse_ops puts it in the
int8 kernel's epilogue: the kernel reads uint8 and writes uint8 (an implicit requantize) or,
where a float value is needed (residual sums), float32. A value feeding several layers is
quantized once; a max-pool between a layer and its quantize runs on the integers (Note
[quantize before max-pool]).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tessera.graph.ir import Call, Constant, Function, Value
from tessera.graph.op import get_op
from tessera.quantize.gptq import gptq_round
from tessera.topi import qnn as topi_qnn


@dataclass
class Layer:
    """One quantizable call: its index in the body, its data input and constant weight."""

    index: int
    call: Call
    name: str
    kind: str  # "conv2d" | "dense" | "matmul"
    # E[x^2] per input channel of the data, set by tessera.quantize: Note [weight scales]
    importance: np.ndarray | None = field(default=None, repr=False)
    # E[x x^T] of the inputs of each weight row (groups, K, K), set by tessera.quantize when
    # weight_rounding="gptq": Note [GPTQ rounding] in gptq.py
    hessian: np.ndarray | None = field(default=None, repr=False)
    damp: float = 0.01
    gptq_order: str = "natural"  # Note [GPTQ column order] in gptq.py
    _qweight: tuple | None = field(default=None, repr=False)

    @property
    def data(self) -> Value:
        return self.call.inputs[0]

    @property
    def weight(self) -> np.ndarray:
        """The weight with output channels first: (O, I, KH, KW) or (N, K)."""
        w = self.call.inputs[1].array
        return w.T if self.kind == "matmul" else w

    def quantized_weight(self) -> tuple[np.ndarray, np.ndarray]:
        """(int8 weight, float32 scale per output channel) as the rewrite emits them (computed
        once: set `importance` before the first call)."""
        if self._qweight is None:
            self._qweight = self._quantize_weight()
        return self._qweight

    @property
    def groups(self) -> int:
        return self.call.attrs.get("groups", 1) if self.kind == "conv2d" else 1

    @property
    def role(self) -> str:
        """The role: "depthwise", "grouped", "pointwise" (1x1), "conv" (larger kernels) or "dense"
        (dense, matmul): what QConfig.keep_float_roles names (Note [mixed precision])."""
        if self.kind != "conv2d":
            return "dense"
        if self.groups > 1:
            return "depthwise" if self.weight.shape[1] == 1 else "grouped"
        return "pointwise" if self.weight.shape[2:] == (1, 1) else "conv"

    def weight_parts(self, split: bool = False) -> list[tuple[np.ndarray, np.ndarray]]:
        """[(int8 weight, scale per output channel)]: quantized_weight(), and with `split` a
        second int8 weight of what the first leaves, w - w_q * s, on its own per-row scale
        (Note [16-bit weights by splitting])."""
        parts = [self.quantized_weight()]
        if split:
            wq, sw = parts[0]
            rest = self.weight - wq.astype(np.float32) * sw.reshape((-1,) + (1,) * (wq.ndim - 1))
            parts.append(quantize_weight(rest.astype(np.float32)))
        return parts

    def _quantize_weight(self):
        w = self.weight
        if self.importance is None:
            q, scale = quantize_weight(w)
        else:
            q, scale = quantize_weight(w, _element_importance(w, self.importance, self.groups))
        if self.hessian is not None:
            q = gptq_round(w, scale, self.hessian, self.groups, self.damp,
                           order=self.gptq_order)  # fmt: skip
        return q, scale


def layer_name(call: Call) -> str:
    return ",".join(call.span) or call.outputs[0].name


def find_layers(func: Function, ops, skip) -> list[Layer]:
    """The calls that can be quantized: ops in `ops`, a constant float32 weight, not skipped
    (by source node name or output value name)."""
    kinds = {"nn.conv2d": "conv2d", "nn.dense": "dense", "matmul": "matmul"}
    layers = []
    for k, call in enumerate(func.body):
        kind = kinds.get(call.op.name)
        if kind is None or call.op.name not in ops or len(call.inputs) != 2:
            continue
        w = call.inputs[1]
        if not isinstance(w, Constant) or str(w.type.dtype) != "float32":
            continue
        if str(call.inputs[0].type.dtype) != "float32":
            continue
        if kind == "matmul" and (w.type.ndim != 2 or call.inputs[0].type.ndim < 2):
            continue
        name = layer_name(call)
        if name in skip or call.outputs[0].name in skip or set(call.span) & set(skip):
            continue
        layers.append(Layer(k, call, name, kind))
    return layers


# Note [weight scales]
# A row's scale max |w| / 127 puts its largest weight on the grid's end; when a few weights
# stand far out, a smaller scale (the outliers clipped to +-127) rounds all the others more
# finely. The error that matters is the layer's output error, sum_k (w - w_q)[o, k] x_k, whose
# expected square is, for inputs uncorrelated across k, sum_k (w - w_q)^2 E[x_k^2]: each
# candidate scale alpha * max |w| / 127 (alpha in SCALE_GRID) is scored by that sum, with E[x^2]
# per input channel over the calibration feeds, and each row keeps its best. alpha = 1 is
# among the candidates, so no row does worse on this score than max-|w| scaling. As Nagel et
# al.'s and AdaRound's analyses, it weighs the weights by what they multiply. The layer's mean
# E[x^2] is added to every input's: a ReLU channel that stays at zero on the calibration feeds
# (a fifth to a half of the late ones in EfficientNet-Lite0) can fire on another input, and
# weighed by zero its weights were clipped at will (the score ties at every alpha); on views
# outside the calibration set that cost depthwise convs 10-25 dB.

SCALE_GRID = np.linspace(1.0, 0.5, 51)  # from 1 down: a tie keeps the larger scale


def _element_importance(w: np.ndarray, importance: np.ndarray, groups: int) -> np.ndarray:
    """E[x^2] of the input each element of w (O, I/groups, ...) multiplies, w's shape."""
    imp = np.asarray(importance, np.float64).reshape(-1)
    if w.ndim == 2:
        return np.broadcast_to(imp.reshape(1, -1), w.shape)
    o_count, per_group = w.shape[:2]
    channel = conv_input_channels(o_count, per_group, groups)
    return np.broadcast_to(imp[channel].reshape(o_count, per_group, *(1,) * (w.ndim - 2)),
                           w.shape)  # fmt: skip


def conv_input_channels(o_count: int, per_group: int, groups: int) -> np.ndarray:
    """(O, I/groups) int array: the input channel that weight element [o, i] multiplies."""
    group = np.arange(o_count) // (o_count // groups)
    return group[:, None] * per_group + np.arange(per_group)[None, :]


def quantize_weight(w: np.ndarray, importance: np.ndarray | None = None):
    """(int8 weight, float32 scale per output channel): symmetric; the scale is max |w| / 127,
    or with `importance` (w's shape: E[x^2] of what each weight multiplies) the one of
    SCALE_GRID * max |w| / 127 that minimizes the weighted squared error (Note [weight
    scales])."""
    rows = w.reshape(w.shape[0], -1).astype(np.float64)
    absmax = np.abs(rows).max(axis=1)
    scale = np.where(absmax > 0, absmax / 127.0, 1.0)
    if importance is not None:
        h = np.asarray(importance, np.float64).reshape(rows.shape)
        h = h + h.mean()  # an input quiet on the feeds still counts: Note [weight scales]
        best = np.full(len(rows), np.inf)
        chosen = scale.copy()
        for alpha in SCALE_GRID:
            s = (scale * alpha)[:, None]
            err = (h * (rows - np.clip(np.round(rows / s), -127, 127) * s) ** 2).sum(axis=1)
            better = err < best
            best, chosen = np.where(better, err, best), np.where(better, s[:, 0], chosen)
        scale = np.where(absmax > 0, chosen, 1.0)
    scale = scale.astype(np.float32)
    shape = (-1,) + (1,) * (w.ndim - 1)
    q = np.clip(np.round(w / scale.reshape(shape)), -127, 127).astype(np.int8)
    return q, scale


class _Emitter:
    """Appends calls to a new body, with types from the op rules."""

    def __init__(self, func: Function):
        self.body: list[Call] = []
        self.constants = list(func.constants)
        self.count = 0

    def fresh(self, hint: str) -> str:
        self.count += 1
        return f"{hint}_q{self.count}"

    def const(self, array, hint: str) -> Constant:
        c = Constant.of(self.fresh(hint), np.ascontiguousarray(array))
        self.constants.append(c)
        return c

    def call(self, op: str, inputs, span, hint: str, **attrs) -> Value:
        o = get_op(op)
        (t,) = o.infer_type([v.type for v in inputs], attrs)
        out = Value(self.fresh(hint), t)
        self.body.append(Call(o, tuple(inputs), attrs, (out,), span))
        return out


def _product(em: _Emitter, layer: Layer, xq: Value, w: Constant, pad_value: int, hint: str):
    """The layer's integer product of the uint8/int8 data xq and its packed int8 weight w."""
    if layer.kind == "conv2d":
        attrs = dict(layer.call.attrs.items())
        return em.call("qnn.conv2d", (xq, w), layer.call.span, hint, **attrs, pad_value=pad_value)
    return em.call("qnn.dense", (xq, w), layer.call.span, hint, units=layer.weight.shape[0])


def _compensated(em: _Emitter, acc: Value, comp: np.ndarray, span, hint: str) -> Value:
    """acc - comp (int32 constant per output channel), or acc where comp is all zero."""
    if not comp.any():
        return acc
    return em.call("subtract", (acc, em.const(comp.astype(np.int32), hint + "_comp")), span, hint)


# Note [16-bit weights by splitting]
# Where a layer's int8 weights, not its activation grid, limit it (EfficientNet-Lite0's stem
# and first depthwise conv: as a16 they cost the output 36.3 and 31.6 dB alone, as int8 28.6 and
# 31.1), the weight is split like the activation: w = s1 w1 + s2 w2 + e with w1 the int8
# weight (GPTQ-rounded), w2 = round((w - s1 w1) / s2) its residual on a per-row scale s2 =
# max |w - s1 w1| / 127 (about s1 / 254), so e is ~48 dB below int8's rounding. The layer is
# then the sum of its products with w1 and with w2, each on the int8 kernels, each dequantized
# by its own scale and added in float32: "w16" with an 8-bit activation (two passes), "a16w16"
# with a 16-bit code (three: w1 times both bytes, w2 times the high byte only). The product
# of w2 and the low byte is left out: it is the weight's int8 rounding (|s2 w2| <= s1 / 2)
# times the code's low byte (below 256 steps of the 16-bit grid), some 40 dB under the
# int8 weight's own error times the part of the activation a 16-bit grid adds, and its mean
# is removed by bias correction, measured with the same three passes.


def _quantized_layer(em: _Emitter, layer: Layer, xq, act, out: Value, correction=None,
                     split: bool = False) -> Call:  # fmt: skip
    """Emit layer's int8 product and dequantize; the last call defines `out`. `correction`
    (float, per output channel) is added to the output, folded into the integer compensation
    (Note [bias correction]). With a uint16 act, xq is the (high, low) bytes of the code and the
    product runs in two passes (Note [16-bit activations by splitting] in topi/qnn.py); with
    `split`, over two int8 weights (Note [16-bit weights by splitting])."""
    (sx, zx, dtype) = act
    span, hint = layer.call.span, out.name
    shape = (-1, 1, 1) if layer.kind == "conv2d" else (-1,)
    terms = []
    for part, (wq, sw) in enumerate(layer.weight_parts(split)):
        # the residual weight times the high byte only (Note [16-bit weights by splitting])
        terms += _weight_pass(em, layer, xq, act, wq, sw, hint)[: 1 if part else None]
    scale = (np.float32(sx) * layer.quantized_weight()[1]).astype(np.float32).reshape(shape)
    if dtype != "uint16" and not split:
        (acc, comp, _) = terms[0]
        if correction is not None:
            steps = np.round(np.asarray(correction, np.float64).reshape(comp.shape) / scale)
            comp = comp - np.clip(steps, -(2**30), 2**30).astype(np.int64)
        acc = _compensated(em, acc, comp, span, hint)
        return Call(get_op("qnn.dequantize"), (acc, em.const(scale, hint + "_scale")), {},
                    (out,), span)  # fmt: skip
    # 256 * a high pass leaves int32 for long K: the passes are combined in float32
    total = None
    for acc, comp, s in terms:
        part = _compensated(em, acc, comp, span, hint)
        part = em.call("qnn.dequantize", (part, em.const(s, hint + "_scale")), span, hint)
        if total is None and correction is not None:
            fix = np.asarray(correction, np.float32).reshape(shape)
            part = em.call("add", (part, em.const(fix, hint + "_fix")), span, hint)
        total = part if total is None else em.call("add", (part, total), span, hint)
    last = em.body.pop()
    return Call(last.op, last.inputs, last.attrs, (out,), span)


def _weight_pass(em: _Emitter, layer: Layer, xq, act, wq, sw, hint: str) -> list[tuple]:
    """The integer products of one int8 weight (wq, scale per row sw) with the data xq, each as
    (acc, compensation, float32 scale): one for uint8/int8 data, two for a uint16 code's (high,
    low) bytes, the high one's scale 256 times the low one's."""
    (sx, zx, dtype) = act
    conv = layer.kind == "conv2d"
    packed = topi_qnn.pack_conv_weight(wq) if conv else topi_qnn.pack_dense_weight(wq)
    w = em.const(packed, hint + "_w")
    shape = (-1, 1, 1) if conv else (-1,)
    sums = wq.astype(np.int64).reshape(wq.shape[0], -1).sum(axis=1).reshape(shape)
    scale = (np.float32(sx) * sw).astype(np.float32).reshape(shape)
    if dtype != "uint16":
        zx_u = zx + (128 if dtype == "int8" else 0)
        return [(_product(em, layer, xq, w, zx_u, hint), zx_u * sums, scale)]
    (hi, lo), (z_hi, z_lo) = xq, divmod(zx, 256)
    return [(_product(em, layer, hi, w, z_hi, hint), z_hi * sums, np.float32(256) * scale),
            (_product(em, layer, lo, w, z_lo, hint), z_lo * sums, scale)]  # fmt: skip


# Note [quantize before max-pool]: quantize is monotone, so quantize(max_pool(x)) equals
# max_pool(quantize(x)) (a padded position is the lowest value on both sides). Quantizing first
# lets the pool run on uint8 and the quantize fuse into the producer's epilogue; done when the
# pool's output feeds only quantized layers.


def _pooled_source(func: Function, v: Value, layers: list[Layer]):
    """The max-pool call producing v, when every use of v is a quantized layer's data input."""
    producer = next((c for c in func.body if v in c.outputs), None)
    if producer is None or producer.op.name != "nn.max_pool2d" or v in func.outputs:
        return None
    uses = sum(1 for c in func.body for x in c.inputs if x is v)
    return producer if uses == sum(1 for layer in layers if layer.data is v) else None


def _quantize_value(em, func, layers, v: Value, act, span):
    """v quantized by act: its uint8/int8 value, or for uint16 the (high, low) bytes of its
    code (Note [16-bit activations by splitting] in topi/qnn.py)."""
    sx, zx, dtype = act
    if dtype == "uint16":
        return tuple(em.call("qnn.quantize_byte", (v,), span, f"{v.name}_{part}", scale=sx,
                             zero_point=zx, byte=byte)
                     for part, byte in (("hi", 1), ("lo", 0)))  # fmt: skip
    pool = _pooled_source(func, v, layers)
    source = pool.inputs[0] if pool is not None else v
    q = em.call("qnn.quantize", (source,), span, source.name, scale=sx, zero_point=zx,
                dtype=dtype)  # fmt: skip
    if pool is None:
        return q
    return em.call(pool.op.name, (q,), pool.span, v.name, **dict(pool.attrs.items()))


# Note [shared quantized values]: a value that a layer quantizes and that other ops also read
# (the skip of a residual block) is read by those ops, after the quantize, as the dequantized
# int8 copy: the producer then writes only the int8 tensor, and the residual stream is int8
# between kernels (as in ORT's QDQ models), at the cost of its rounding. `share=False` keeps
# the float value for them.


def _remap(call: Call, fake: dict) -> Call:
    inputs = tuple(fake.get(id(v), v) for v in call.inputs)
    if all(a is b for a, b in zip(inputs, call.inputs, strict=True)):
        return call
    return Call(call.op, inputs, call.attrs, call.outputs, call.span)


def rewrite(func: Function, layers: list[Layer], act_params: dict, share: bool = True,
            corrections: dict | None = None, wide: dict | None = None,
            split=()):  # fmt: skip
    """`func` with `layers` quantized; act_params: {id(data value): (scale, zp, dtype)};
    share: other readers of a quantized value read its int8 copy (Note [shared quantized
    values]); corrections: {layer index: float per output channel} added to its output; wide:
    {layer index: (scale, zp, "uint16")}, the layers whose data is a 16-bit code, computed in
    two passes (Note [16-bit activations by splitting] in topi/qnn.py); split: the indices of
    the layers whose weight is split too (Note [16-bit weights by splitting])."""
    from tessera.transform import eliminate_dead_code

    em = _Emitter(func)
    by_index = {layer.index: layer for layer in layers}
    quantized: dict[tuple[int, tuple], Value] = {}  # (id(x), params) -> its quantize
    fake: dict[int, Value] = {}  # id(x) -> dequantize(its quantize), for other readers
    for k, call in enumerate(func.body):
        layer = by_index.get(k)
        if layer is None:
            em.body.append(_remap(call, fake))
            continue
        act = (wide or {}).get(layer.index) or act_params[id(layer.data)]
        key = (id(layer.data), act)
        if key not in quantized:
            xq = _quantize_value(em, func, layers, layer.data, act, call.span)
            quantized[key] = xq
            eight = act[2] != "uint16"  # a 16-bit code's other readers read the float value
            if share and eight and id(layer.data) not in fake and layer.data not in func.outputs:
                scale = em.const(np.float32(act[0]), layer.data.name + "_s")
                fake[id(layer.data)] = em.call("qnn.dequantize", (xq, scale), call.span,
                                               layer.data.name, zero_point=act[1])  # fmt: skip
        fix = (corrections or {}).get(layer.index)
        em.body.append(_quantized_layer(em, layer, quantized[key], act, call.outputs[0], fix,
                                        layer.index in split))  # fmt: skip
    used = {id(v) for c in em.body for v in c.inputs} | {id(v) for v in func.outputs}
    constants = tuple(c for c in em.constants if id(c) in used)
    # a max-pool moved after its quantize leaves the float one unused
    return eliminate_dead_code(Function(func.name, func.params, tuple(em.body), func.outputs,
                                        constants))  # fmt: skip
