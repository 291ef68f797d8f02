"""Recognise QDQ models (as `onnxruntime.quantization.quantize_static` writes them) and run their
quantized ops as integer ops: each `DequantizeLinear -> op -> QuantizeLinear` group becomes the
op's QLinear form before conversion, as ORT's own QDQ transformers do.

    before:  xf = DQ(xq, xs, xz); wf = DQ(wq, ws, wz); bf = DQ(bq, bs, 0)
             y = Conv(xf, wf, bf); [y = Relu(y)]; yq = Q(y, ys, yz)
    after:   yq = QLinearConv(xq, xs, xz, wq, ws, wz, ys, yz, B) [; yq = Max(yq, yz)]

Conv and MatMul (constant weight), Add (and a two-input Sum), Mul, (Global)AveragePool, Sigmoid,
LeakyRelu and Concat take their QLinear forms (com.microsoft for the element-wise ones); a ReLU
between Conv or Add and the Q is max(y, zero point) on the integers; MaxPool and the shape ops
(Reshape, Flatten, Transpose, Squeeze, Unsqueeze) whose input and output share a scale and zero
point run on the integers directly (Q(op(DQ(x))) = op(x) then). A DQ or Q left over (model
inputs and outputs, ops without an integer form) stays as it is. Dynamic models (quantize_dynamic:
DynamicQuantizeLinear + MatMulInteger / ConvInteger) need no rewriting.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import onnx
from onnx import helper, numpy_helper

MS = "com.microsoft"
_CONTRIB = {"Add": "QLinearAdd", "Sum": "QLinearAdd", "Mul": "QLinearMul", "GlobalAveragePool":
            "QLinearGlobalAveragePool", "AveragePool": "QLinearAveragePool",
            "Sigmoid": "QLinearSigmoid", "LeakyRelu": "QLinearLeakyRelu"}  # fmt: skip
_SAME_SCALE = {"MaxPool", "Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze"}


class _Graph:
    def __init__(self, graph):
        self.graph = graph
        self.producer = {o: n for n in graph.node for o in n.output}
        self.consumers = defaultdict(list)
        for n in graph.node:
            for i in n.input:
                self.consumers[i].append(n)
        self.outputs = {o.name for o in graph.output}
        self.inits = {t.name: t for t in graph.initializer}

    def dq(self, name):
        node = self.producer.get(name)
        return node if node is not None and node.op_type == "DequantizeLinear" else None

    def only_q(self, name):
        """The single QuantizeLinear reading `name` (and nothing else reads it), or None."""
        users = self.consumers.get(name, [])
        if name in self.outputs or len(users) != 1 or users[0].op_type != "QuantizeLinear":
            return None
        return users[0]

    def array(self, name):
        t = self.inits.get(name)
        return None if t is None else numpy_helper.to_array(t)

    def same_params(self, dq, q) -> bool:
        a = [self.array(n) for n in (*dq.input[1:3], *q.input[1:3])]  # (scale, zp) twice
        if len(a) != 4 or any(v is None for v in a):
            return False
        return all(np.array_equal(x, y) for x, y in zip(a[:2], a[2:], strict=True))


def _qparams(node):
    ins = list(node.input[1:3])
    return ins + [""] * (2 - len(ins))


def _attr(node, name, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _output_q(g, node):
    """(Q node, relu node or None) after `node`'s output."""
    q = g.only_q(node.output[0])
    if q is not None:
        return q, None
    users = g.consumers.get(node.output[0], [])
    if len(users) == 1 and users[0].op_type == "Relu" and node.output[0] not in g.outputs:
        q = g.only_q(users[0].output[0])
        return (q, users[0]) if q is not None else (None, None)
    return None, None


def _int_bias(g, node, dqx, dqw, new_inits):
    """Conv's bias as int32 at scale xs * ws (QLinearConv's B), or None when not constant."""
    if len(node.input) < 3 or not node.input[2]:
        return ""
    dqb = g.dq(node.input[2])
    if dqb is not None:
        bq, bs = g.array(dqb.input[0]), g.array(dqb.input[1])
        bz = g.array(dqb.input[2]) if len(dqb.input) > 2 and dqb.input[2] else 0
        if bq is None or bs is None:
            return None
        bias = (bq.astype(np.float64) - bz) * bs.astype(np.float64)
    else:
        bias = g.array(node.input[2])
        if bias is None:
            return None
    xs, ws = g.array(dqx.input[1]), g.array(dqw.input[1])
    scale = (np.float32(xs) * ws.astype(np.float32)).astype(np.float64)
    name = node.output[0] + "_bias_int32"  # output names are unique, node names may be empty
    new_inits.append(numpy_helper.from_array(np.round(bias / scale).astype(np.int32), name))
    return name


def _fuse_product(g, node, new_inits):
    """Conv / MatMul with DQ inputs and a constant DQ weight -> QLinearConv / QLinearMatMul."""
    dqx, dqw = g.dq(node.input[0]), g.dq(node.input[1])
    if dqx is None or dqw is None or g.array(dqw.input[0]) is None:
        return None
    if node.op_type == "Conv" and np.size(g.array(dqw.input[1])) > 1 and _attr(dqw, "axis", 1):
        return None  # per-channel weight scales must be along the output channels
    q, relu = _output_q(g, node)
    if q is None:
        return None
    ins = [dqx.input[0], *_qparams(dqx), dqw.input[0], *_qparams(dqw), *_qparams(q)]
    if node.op_type == "Conv":
        bias = _int_bias(g, node, dqx, dqw, new_inits)
        if bias is None:
            return None
        new = helper.make_node("QLinearConv", ins + ([bias] if bias else []), [], node.name)
        new.attribute.extend(node.attribute)
    else:
        new = helper.make_node("QLinearMatMul", ins, [], node.name)
    return new, q, relu


def _fuse_contrib(g, node):
    ins = [g.dq(i) for i in node.input]
    if not ins or any(d is None for d in ins) or (node.op_type == "Sum" and len(ins) != 2):
        return None
    q, relu = _output_q(g, node)
    if q is None or (relu is not None and node.op_type not in ("Add", "Sum")):
        return None
    if node.op_type == "Concat":
        args = [*_qparams(q)] + [x for d in ins for x in (d.input[0], *_qparams(d))]
        new = helper.make_node("QLinearConcat", args, [], node.name, domain=MS)
    else:
        args = [x for d in ins for x in (d.input[0], *_qparams(d))] + _qparams(q)
        new = helper.make_node(_CONTRIB[node.op_type], args, [], node.name, domain=MS)
    new.attribute.extend(node.attribute)
    return new, q, relu


def _fuse_same_scale(g, node):
    dq = g.dq(node.input[0])
    q = g.only_q(node.output[0])
    if dq is None or q is None or not g.same_params(dq, q):
        return None
    new = helper.make_node(node.op_type, [dq.input[0], *node.input[1:]], [], node.name)
    new.attribute.extend(node.attribute)
    return new, q, None


def fuse_qdq(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with its DQ -> op -> Q groups as integer ops (the same model if none)."""
    if not any(n.op_type == "DequantizeLinear" for n in model.graph.node):
        return model
    g = _Graph(model.graph)
    new_inits, replaced, nodes = [], {}, []
    for node in model.graph.node:
        fused = None
        if node.op_type in ("Conv", "MatMul"):
            fused = _fuse_product(g, node, new_inits)
        elif node.op_type in _CONTRIB or node.op_type == "Concat":
            fused = _fuse_contrib(g, node)
        elif node.op_type in _SAME_SCALE:
            fused = _fuse_same_scale(g, node)
        if fused is None:
            continue
        new, q, relu = fused
        if relu is None:
            new.output.append(q.output[0])
            replaced[id(node)] = [new]
        else:  # ReLU in the integer domain: max(y, y_zero_point)
            new.output.append(q.output[0] + "_pre_relu")
            zp = q.input[2] if len(q.input) > 2 and q.input[2] else None
            if zp is None:
                zp = node.output[0] + "_relu_zero"
                new_inits.append(numpy_helper.from_array(np.array(0, np.uint8), zp))
            relu_q = helper.make_node("Max", [new.output[0], zp], [q.output[0]], relu.name)
            replaced[id(node)] = [new, relu_q]
            replaced[id(relu)] = []
        replaced[id(q)] = []
    if not replaced:
        return model
    for node in model.graph.node:
        nodes.extend(replaced.get(id(node), [node]))
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    out.graph.initializer.extend(new_inits)
    if not any(o.domain == MS for o in out.opset_import):
        out.opset_import.append(helper.make_opsetid(MS, 1))
    return out
