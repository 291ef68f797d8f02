"""Small models with dynamic (symbolic) dims, built with onnx.helper: tests and bench/dynamic.py
compile each once and run it at many sizes (docs/dynamic.md).

mlp()                  # x: [batch, 64] -> [batch, 10]
encoder_layer()        # a BERT-style encoder layer: x [batch, seq, hidden], mask [batch, seq]
ocr_recognizer()       # a CRNN-style line recognizer: [1, 1, 32, width] -> [width/4, 1, classes]
detector()             # a small conv detector: [batch, 3, 64, 64] -> boxes/scores per cell
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
