"""Small models with dynamic (symbolic) dims, built with onnx.helper: tests and bench/dynamic.py
compile each once and run it at many sizes (docs/dynamic.md).

mlp()                  # x: [batch, 64] -> [batch, 10]
encoder_layer()        # a BERT-style encoder layer: x [batch, seq, hidden], mask [batch, seq]
ocr_recognizer()       # a CRNN-style line recognizer: [1, 1, 32, width] -> [width/4, 1, classes]
detector()             # a small conv detector: [batch, 3, 64, 64] -> boxes/scores per cell
lstm_layer()           # a bidirectional LSTM: x [seq, batch, 64] -> y [seq, 2, batch, 128], h, c
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto as TP
from onnx import helper, numpy_helper


def _init(name: str, array):
    return numpy_helper.from_array(np.asarray(array), name)


def _weight(rng, shape, fan_in=None) -> np.ndarray:
    fan_in = fan_in or shape[0]
    return (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)


def _model(nodes, name, inputs, outputs, inits, opset=17):
    graph = helper.make_graph(nodes, name, inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def mlp(features: int = 64, hidden: int = 128, classes: int = 10, seed: int = 0):
    """Gemm -> Relu -> MatMul + bias -> Softmax over a dynamic batch ("batch")."""
    rng = np.random.default_rng(seed)
    inits = [
        _init("w1", _weight(rng, (hidden, features), features)),
        _init("b1", _weight(rng, (hidden,), hidden)),
        _init("w2", _weight(rng, (hidden, classes))),
        _init("b2", _weight(rng, (classes,), classes)),
    ]
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h0"], transB=1),
        helper.make_node("Relu", ["h0"], ["h"]),
        helper.make_node("MatMul", ["h", "w2"], ["l0"]),
        helper.make_node("Add", ["l0", "b2"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["y"], axis=-1),
    ]
    x = helper.make_tensor_value_info("x", TP.FLOAT, ["batch", features])
    y = helper.make_tensor_value_info("y", TP.FLOAT, ["batch", classes])
    return _model(nodes, "mlp", [x], [y], inits)


def encoder_layer(hidden: int = 64, heads: int = 4, ffn: int = 128, seed: int = 0):
    """One post-norm BERT encoder layer over x [batch, seq, hidden] with an additive attention
    mask [batch, seq] (1 = attend): Q/K/V projections, heads split by Reshape (0, 0, heads, -1)
    and Transpose, scaled scores + (1 - mask) * -10000, Softmax, context, output projection,
    residual + LayerNormalization, a GELU (Erf) feed-forward, residual + LayerNormalization."""
    rng = np.random.default_rng(seed)
    dh = hidden // heads
    inits = [_init("scale", np.float32(1 / np.sqrt(dh)))]
    inits += [_init("one", np.float32(1)), _init("neg", np.float32(-10000))]
    inits += [_init("half", np.float32(0.5)), _init("rsqrt2", np.float32(1 / np.sqrt(2)))]
    inits += [_init("heads_shape", np.array([0, 0, heads, dh], np.int64))]
    inits += [_init("merge_shape", np.array([0, 0, hidden], np.int64))]
    inits += [_init("axes12", np.array([1, 2], np.int64))]
    for n in ("q", "k", "v", "o"):
        inits += [
            _init(f"w{n}", _weight(rng, (hidden, hidden))),
            _init(f"b{n}", _weight(rng, (hidden,), hidden)),
        ]
    inits += [_init("w_in", _weight(rng, (hidden, ffn))), _init("b_in", _weight(rng, (ffn,), ffn))]
    inits += [
        _init("w_out", _weight(rng, (ffn, hidden))),
        _init("b_out", _weight(rng, (hidden,), hidden)),
    ]
    for k in (1, 2):
        inits += [_init(f"g{k}", (1 + 0.1 * rng.standard_normal(hidden)).astype(np.float32))]
        inits += [_init(f"beta{k}", (0.1 * rng.standard_normal(hidden)).astype(np.float32))]
    node = helper.make_node
    nodes = []
    for n in ("q", "k", "v"):
        nodes += [
            node("MatMul", ["x", f"w{n}"], [f"{n}0"]),
            node("Add", [f"{n}0", f"b{n}"], [f"{n}1"]),
            node("Reshape", [f"{n}1", "heads_shape"], [f"{n}2"]),
        ]
    nodes += [
        node("Transpose", ["q2"], ["qh"], perm=[0, 2, 1, 3]),
        node("Transpose", ["k2"], ["kt"], perm=[0, 2, 3, 1]),
        node("Transpose", ["v2"], ["vh"], perm=[0, 2, 1, 3]),
        node("MatMul", ["qh", "kt"], ["s0"]),
        node("Mul", ["s0", "scale"], ["s1"]),
        node("Unsqueeze", ["mask", "axes12"], ["m0"]),
        node("Sub", ["one", "m0"], ["m1"]),
        node("Mul", ["m1", "neg"], ["m2"]),
        node("Add", ["s1", "m2"], ["s2"]),
        node("Softmax", ["s2"], ["p"], axis=-1),
        node("MatMul", ["p", "vh"], ["c0"]),
        node("Transpose", ["c0"], ["c1"], perm=[0, 2, 1, 3]),
        node("Reshape", ["c1", "merge_shape"], ["c2"]),
        node("MatMul", ["c2", "wo"], ["o0"]),
        node("Add", ["o0", "bo"], ["o1"]),
        node("Add", ["o1", "x"], ["r1"]),
        node("LayerNormalization", ["r1", "g1", "beta1"], ["n1"], axis=-1, epsilon=1e-5),
        node("MatMul", ["n1", "w_in"], ["f0"]),
        node("Add", ["f0", "b_in"], ["f1"]),
        node("Mul", ["f1", "rsqrt2"], ["f2"]),
        node("Erf", ["f2"], ["f3"]),
        node("Add", ["f3", "one"], ["f4"]),
        node("Mul", ["f1", "f4"], ["f5"]),
        node("Mul", ["f5", "half"], ["f6"]),
        node("MatMul", ["f6", "w_out"], ["f7"]),
        node("Add", ["f7", "b_out"], ["f8"]),
        node("Add", ["f8", "n1"], ["r2"]),
        node("LayerNormalization", ["r2", "g2", "beta2"], ["y"], axis=-1, epsilon=1e-5),
    ]
    x = helper.make_tensor_value_info("x", TP.FLOAT, ["batch", "seq", hidden])
    mask = helper.make_tensor_value_info("mask", TP.FLOAT, ["batch", "seq"])
    y = helper.make_tensor_value_info("y", TP.FLOAT, ["batch", "seq", hidden])
    return _model(nodes, "encoder_layer", [x, mask], [y], inits)


def _conv(rng, name, cin, cout, k, nodes, inits, x, y, stride=1, bn=False):
    """Conv (k x k, same padding, stride) [+ BatchNormalization] + Relu: x -> y."""
    inits += [_init(f"{name}_w", _weight(rng, (cout, cin, k, k), cin * k * k))]
    inits += [_init(f"{name}_b", _weight(rng, (cout,), cout))]
    pad = k // 2
    out = f"{name}_c"
    nodes.append(
        helper.make_node(
            "Conv",
            [x, f"{name}_w", f"{name}_b"],
            [out],
            kernel_shape=[k, k],
            pads=[pad] * 4,
            strides=[stride, stride],
        )
    )
    if bn:
        inits += [_init(f"{name}_g", (1 + 0.1 * rng.standard_normal(cout)).astype(np.float32))]
        inits += [_init(f"{name}_beta", (0.1 * rng.standard_normal(cout)).astype(np.float32))]
        inits += [_init(f"{name}_mean", (0.1 * rng.standard_normal(cout)).astype(np.float32))]
        inits += [_init(f"{name}_var", (1 + 0.1 * rng.random(cout)).astype(np.float32))]
        names = [f"{name}_{s}" for s in ("g", "beta", "mean", "var")]
        nodes.append(helper.make_node("BatchNormalization", [out, *names], [f"{name}_bn"]))
        out = f"{name}_bn"
    nodes.append(helper.make_node("Relu", [out], [y]))


def ocr_recognizer(height: int = 32, classes: int = 37, hidden: int = 64, seed: int = 0):
    """A CRNN-style text-line recognizer over a dynamic width ("width"): two conv + BN + relu +
    2x2 max-pool stages ([1, 32, height/4, width/4]), the columns as a sequence (Transpose,
    Reshape (0, 0, -1): [width/4, 1, 32 * height/4]), a projection, a 1-D conv over the sequence
    for context, the per-column class scores and their Softmax: [width/4, 1, classes]."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    _conv(rng, "c1", 1, 16, 3, nodes, inits, "image", "r1", bn=True)
    nodes.append(helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]))
    _conv(rng, "c2", 16, 32, 3, nodes, inits, "p1", "r2", bn=True)
    nodes.append(helper.make_node("MaxPool", ["r2"], ["p2"], kernel_shape=[2, 2], strides=[2, 2]))
    feat = 32 * (height // 4)
    inits += [_init("cols_shape", np.array([0, 0, -1], np.int64))]
    inits += [
        _init("w_proj", _weight(rng, (feat, hidden))),
        _init("b_proj", _weight(rng, (hidden,), hidden)),
    ]
    inits += [_init("ctx_w", _weight(rng, (hidden, hidden, 3), hidden * 3))]
    inits += [
        _init("w_cls", _weight(rng, (hidden, classes))),
        _init("b_cls", _weight(rng, (classes,), classes)),
    ]
    node = helper.make_node
    nodes += [
        node("Transpose", ["p2"], ["t"], perm=[3, 0, 1, 2]),  # [w/4, 1, 32, h/4]
        node("Reshape", ["t", "cols_shape"], ["cols"]),  # [w/4, 1, 32 * h/4]
        node("MatMul", ["cols", "w_proj"], ["e0"]),
        node("Add", ["e0", "b_proj"], ["e1"]),
        node("Relu", ["e1"], ["e"]),
        node("Transpose", ["e"], ["e_ncw"], perm=[1, 2, 0]),  # [1, hidden, w/4]
        node("Conv", ["e_ncw", "ctx_w"], ["ctx0"], kernel_shape=[3], pads=[1, 1]),
        node("Relu", ["ctx0"], ["ctx1"]),
        node("Transpose", ["ctx1"], ["ctx"], perm=[2, 0, 1]),  # [w/4, 1, hidden]
        node("Add", ["ctx", "e"], ["seq"]),
        node("MatMul", ["seq", "w_cls"], ["l0"]),
        node("Add", ["l0", "b_cls"], ["logits"]),
        node("Softmax", ["logits"], ["probs"], axis=-1),
    ]
    image = helper.make_tensor_value_info("image", TP.FLOAT, [1, 1, height, "width"])
    probs = helper.make_tensor_value_info("probs", TP.FLOAT, ["steps", 1, classes])
    return _model(nodes, "ocr_recognizer", [image], [probs], inits)


def detector(size: int = 64, classes: int = 4, seed: int = 0):
    """A small one-stage conv detector over a dynamic batch ("batch"): a strided conv stem, a
    residual block, a 2x2 max-pool, a 1x1 head of 4 box coordinates + 1 objectness + classes
    per cell, the cells as rows (Transpose, Reshape (0, -1, 5 + classes)), Split into boxes and
    scores, Sigmoid on the scores: boxes [batch, cells, 4], scores [batch, cells, 1 + classes]."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    _conv(rng, "stem", 3, 16, 3, nodes, inits, "images", "s1", stride=2, bn=True)
    _conv(rng, "b1", 16, 16, 3, nodes, inits, "s1", "b1r", bn=True)
    _conv(rng, "b2", 16, 16, 3, nodes, inits, "b1r", "b2r")
    nodes.append(helper.make_node("Add", ["b2r", "s1"], ["res"]))
    nodes.append(
        helper.make_node("MaxPool", ["res"], ["pool"], kernel_shape=[2, 2], strides=[2, 2])
    )
    _conv(rng, "neck", 16, 32, 3, nodes, inits, "pool", "neck_r")
    out = 5 + classes
    inits += [
        _init("head_w", _weight(rng, (out, 32, 1, 1), 32)),
        _init("head_b", _weight(rng, (out,), out)),
    ]
    inits += [_init("rows_shape", np.array([0, -1, out], np.int64))]
    inits += [_init("split", np.array([4, 1 + classes], np.int64))]
    node = helper.make_node
    nodes += [
        node("Conv", ["neck_r", "head_w", "head_b"], ["head"], kernel_shape=[1, 1]),
        node("Transpose", ["head"], ["cells"], perm=[0, 2, 3, 1]),
        node("Reshape", ["cells", "rows_shape"], ["rows"]),
        node("Split", ["rows", "split"], ["boxes", "raw_scores"], axis=2),
        node("Sigmoid", ["raw_scores"], ["scores"]),
    ]
    cells = (size // 4) ** 2
    images = helper.make_tensor_value_info("images", TP.FLOAT, ["batch", 3, size, size])
    boxes = helper.make_tensor_value_info("boxes", TP.FLOAT, ["batch", cells, 4])
    scores = helper.make_tensor_value_info("scores", TP.FLOAT, ["batch", cells, 1 + classes])
    return _model(nodes, "detector", [images], [boxes, scores], inits)


def lstm_layer(features: int = 64, hidden: int = 128, seed: int = 0):
    """A bidirectional LSTM over a symbolic sequence length and batch (x [seq, batch,
    features]): y [seq, 2, batch, hidden] and the final h and c."""
    rng = np.random.default_rng(seed)
    inits = [
        _init("W", _weight(rng, (2, 4 * hidden, features), features)),
        _init("R", _weight(rng, (2, 4 * hidden, hidden), hidden)),
        _init("B", _weight(rng, (2, 8 * hidden), hidden)),
    ]
    x = helper.make_tensor_value_info("x", TP.FLOAT, ["seq", "batch", features])
    outs = [helper.make_tensor_value_info(n, TP.FLOAT, None) for n in ("y", "h", "c")]
    node = helper.make_node("LSTM", ["x", "W", "R", "B"], ["y", "h", "c"],
                            hidden_size=hidden, direction="bidirectional")  # fmt: skip
    return _model([node], "lstm_layer", [x], outs, inits)
