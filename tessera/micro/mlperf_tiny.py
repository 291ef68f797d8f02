"""The four MLPerf Tiny v1.0 model architectures, built with onnx.helper (random weights):

    kws_ds_cnn()       keyword spotting: DS-CNN (small), input 1x1x49x10 MFCCs, 12 classes
    vww_mobilenet()    visual wake words: MobileNetV1 (width 0.25), input 1x3x96x96, 2 classes
    ic_resnet8()       image classification: ResNet-8, input 1x3x32x32 (CIFAR-10), 10 classes
    ad_autoencoder()   anomaly detection: FC autoencoder, input 1x640, 640 outputs

Layer shapes follow the reference models of github.com/mlcommons/tiny (batch norm folded into
the convolutions' bias, as a deployed model has it). Weights are drawn He-scaled from a seeded
generator, so activations keep a sane range through the depth and outputs are comparable.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class _Builder:
    """Appends nodes and initializers; names are made unique by a counter."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.count = [], [], 0

    def name(self, hint: str) -> str:
        self.count += 1
        return f"{hint}_{self.count}"

    def weight(self, shape, fan_in: int) -> str:
        w = self.rng.standard_normal(shape).astype(np.float32) * np.float32(np.sqrt(2.0 / fan_in))
        name = self.name("w")
        self.inits.append(numpy_helper.from_array(w, name))
        return name

    def bias(self, n: int) -> str:
        b = (self.rng.standard_normal(n) * 0.05).astype(np.float32)
        name = self.name("b")
        self.inits.append(numpy_helper.from_array(b, name))
        return name

    def node(self, op: str, inputs, **attrs) -> str:
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, list(inputs), [out], name=out, **attrs))
        return out

    def conv(self, x, cin, cout, kernel, stride=1, group=1, relu=True, pads=None) -> str:
        kh, kw = kernel if isinstance(kernel, tuple) else (kernel, kernel)
        if pads is None:  # "same" padding, extra row/column at the end (as TensorFlow)
            ph, pw = kh - 1, kw - 1
            pads = [ph // 2, pw // 2, ph - ph // 2, pw - pw // 2]
        w = self.weight((cout, cin // group, kh, kw), fan_in=cin // group * kh * kw)
        y = self.node(
            "Conv",
            [x, w, self.bias(cout)],
            kernel_shape=[kh, kw],
            strides=[stride, stride],
            pads=pads,
            group=group,
        )
        return self.node("Relu", [y]) if relu else y

    def dense(self, x, nin, nout, relu=True) -> str:
        y = self.node("Gemm", [x, self.weight((nout, nin), fan_in=nin), self.bias(nout)], transB=1)
        return self.node("Relu", [y]) if relu else y

    def model(self, name: str, x: str, in_shape, y: str, out_shape) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes,
            name,
            [helper.make_tensor_value_info(x, TensorProto.FLOAT, list(in_shape))],
            [helper.make_tensor_value_info(y, TensorProto.FLOAT, list(out_shape))],
            self.inits,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        model.ir_version = 8
        onnx.checker.check_model(model)
        return model


def kws_ds_cnn(seed: int = 0) -> onnx.ModelProto:
    """DS-CNN small: conv 10x4/2 (64), 4 x (depthwise 3x3 + pointwise 64), avg pool, dense 12."""
    b = _Builder(seed)
    x = b.conv("input", 1, 64, (10, 4), stride=2, pads=[4, 1, 5, 1])  # -> 64 x 25 x 5
    for _ in range(4):
        x = b.conv(x, 64, 64, 3, group=64)
        x = b.conv(x, 64, 64, 1)
    x = b.node("AveragePool", [x], kernel_shape=[25, 5])
    x = b.node("Flatten", [x])
    y = b.node("Softmax", [b.dense(x, 64, 12, relu=False)], axis=1)
    return b.model("kws_ds_cnn", "input", (1, 1, 49, 10), y, (1, 12))


# (output channels, stride) of MobileNetV1's depthwise-separable blocks at width 1.0
_MOBILENET_BLOCKS = [
    (64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2),
    (512, 1), (512, 1), (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1),
]  # fmt: skip


def vww_mobilenet(seed: int = 0, width: float = 0.25, size: int = 96) -> onnx.ModelProto:
    """MobileNetV1 (width 0.25, 96x96 input): conv 3x3/2, 13 depthwise-separable blocks,
    global average pool, dense 2."""
    b = _Builder(seed)
    cin = int(32 * width)
    x = b.conv("input", 3, cin, 3, stride=2)
    for cout, stride in _MOBILENET_BLOCKS:
        cout = int(cout * width)
        x = b.conv(x, cin, cin, 3, stride=stride, group=cin)
        x = b.conv(x, cin, cout, 1)
        cin = cout
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x])])
    y = b.node("Softmax", [b.dense(x, cin, 2, relu=False)], axis=1)
    return b.model("vww_mobilenet", "input", (1, 3, size, size), y, (1, 2))


def ic_resnet8(seed: int = 0) -> onnx.ModelProto:
    """ResNet-8 (CIFAR-10): conv 3x3 (16), three residual stacks (16, 32/2, 64/2), pool, dense."""
    b = _Builder(seed)
    x = b.conv("input", 3, 16, 3)
    cin = 16
    for cout, stride in ((16, 1), (32, 2), (64, 2)):
        y = b.conv(x, cin, cout, 3, stride=stride)
        y = b.conv(y, cout, cout, 3, relu=False)
        if stride != 1 or cin != cout:
            x = b.conv(x, cin, cout, 1, stride=stride, relu=False, pads=[0, 0, 0, 0])
        x = b.node("Relu", [b.node("Add", [x, y])])
        cin = cout
    x = b.node("Flatten", [b.node("AveragePool", [x], kernel_shape=[8, 8])])
    y = b.node("Softmax", [b.dense(x, 64, 10, relu=False)], axis=1)
    return b.model("ic_resnet8", "input", (1, 3, 32, 32), y, (1, 10))


def ad_autoencoder(seed: int = 0) -> onnx.ModelProto:
    """The FC autoencoder: 640 -> 4 x 128 -> 8 -> 4 x 128 -> 640, ReLU between."""
    b = _Builder(seed)
    x, n = "input", 640
    for width in (128, 128, 128, 128, 8, 128, 128, 128, 128):
        x, n = b.dense(x, n, width), width
    y = b.dense(x, n, 640, relu=False)
    return b.model("ad_autoencoder", "input", (1, 640), y, (1, 640))


MODELS = {
    "kws_ds_cnn": kws_ds_cnn,
    "vww_mobilenet": vww_mobilenet,
    "ic_resnet8": ic_resnet8,
    "ad_autoencoder": ad_autoencoder,
}


def _gemm_as_matmul(model: onnx.ModelProto) -> onnx.ModelProto:
    """Each Gemm (transB=1, alpha = beta = 1) as MatMul(x, W^T) + Add(b): the form that ONNX
    Runtime's quantizer turns into an int8 matmul (it leaves a Gemm's product in float)."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    inits = {i.name: i for i in model.graph.initializer}
    nodes = []
    for node in model.graph.node:
        if node.op_type != "Gemm":
            nodes.append(node)
            continue
        x, w, bias = node.input
        wt = numpy_helper.to_array(inits[w]).T.copy()
        inits[w].CopyFrom(numpy_helper.from_array(wt, w))
        product = f"{node.name}_matmul"
        nodes.append(helper.make_node("MatMul", [x, w], [product], name=product))
        nodes.append(helper.make_node("Add", [product, bias], list(node.output), name=node.name))
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model


def _int8_io(model: onnx.ModelProto) -> onnx.ModelProto:
    """The QDQ model with int8 input and output, as MLPerf Tiny's int8 models take them: the
    input's QuantizeLinear and the output's DequantizeLinear removed."""
    graph = model.graph
    x, y = graph.input[0].name, graph.output[0].name
    quant = next(n for n in graph.node if n.op_type == "QuantizeLinear" and n.input[0] == x)
    dequant = next(n for n in graph.node if n.op_type == "DequantizeLinear" and y in n.output)
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name == quant.output[0]:
                node.input[i] = x
        for i, name in enumerate(node.output):
            if name == dequant.input[0]:
                node.output[i] = y
    graph.node.remove(quant)
    graph.node.remove(dequant)
    graph.input[0].type.tensor_type.elem_type = TensorProto.INT8
    graph.output[0].type.tensor_type.elem_type = TensorProto.INT8
    onnx.checker.check_model(model)
    return model


def quantize_int8(
    model: onnx.ModelProto, samples: int = 8, seed: int = 5, int8_io: bool = True
) -> onnx.ModelProto:
    """`model` quantized as MLPerf Tiny deploys it: int8 activations (asymmetric, calibrated on
    `samples` seeded normal inputs), int8 weights per output channel (symmetric), int32 biases,
    in ONNX's QDQ form (DequantizeLinear -> op -> QuantizeLinear), by ONNX Runtime's quantizer
    (needs the onnxruntime package); `int8_io`: the model takes and returns int8 tensors (the
    input's quantize and the output's dequantize removed), else float32 ones. tessera's
    frontend turns each Conv / MatMul group into an int8 kernel (frontend/onnx_qdq.py);
    pooling, residual adds and softmax run between a dequantize and a quantize."""
    import tempfile
    from pathlib import Path

    try:
        from onnxruntime.quantization import (
            CalibrationDataReader,
            QuantFormat,
            QuantType,
            quantize_static,
        )
    except ImportError as err:
        raise ImportError("quantize_int8 needs onnxruntime (pip install onnxruntime)") from err

    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    rng = np.random.default_rng(seed)
    batches = [{"input": rng.standard_normal(shape).astype(np.float32)} for _ in range(samples)]

    class _Reader(CalibrationDataReader):
        def __init__(self):
            self.batches = iter(batches)

        def get_next(self):
            return next(self.batches, None)

    with tempfile.TemporaryDirectory(prefix="tessera-quant-") as tmp:
        src, dst = Path(tmp) / "float.onnx", Path(tmp) / "int8.onnx"
        onnx.save(_gemm_as_matmul(model), src)
        quantize_static(
            str(src),
            str(dst),
            _Reader(),
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            activation_type=QuantType.QInt8,
            weight_type=QuantType.QInt8,
        )
        quantized = onnx.load(dst)
    return _int8_io(quantized) if int8_io else quantized
