"""Model builders for the benchmark suite: MobileNetV2 and a BERT-base encoder, written with
`onnx.helper` the way PyTorch's exporter writes them, with reproducible random weights.

    model = mobilenet_v2()                          # 224x224, width 1.0, 1000 classes, seed 0
    model = mobilenet_v2(width=0.25, resolution=32) # a small test config
    model = bert_encoder()                          # 12 layers, hidden 768, 12 heads, seq 128
    feeds = bert_inputs(model, seed=0)              # input_ids, token_type_ids, attention_mask

Weights are drawn from `numpy.random.default_rng(seed)` in node order, so a builder called twice
with the same arguments gives the same model byte for byte. Names follow the PyTorch modules
(torchvision's `features.3.conv.1.0.weight`, Hugging Face's `encoder.layer.0.attention...`), so a
profile reads like the source model. Both models use opset 17 (LayerNormalization).
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8  # what ONNX Runtime and the PyTorch exporter of the day write

# (expansion t, output channels c, repeats n, first stride s): torchvision's MobileNetV2 table.
MOBILENET_V2_BLOCKS = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


class GraphWriter:
    """Collects nodes and initializers; every node gets a unique name and output.

    With `weights` (name -> array, e.g. a pretrained checkpoint), every weight that `normal`
    would draw is taken from it instead, and a missing or misshapen one is an error: a
    pretrained model never gets a random weight by accident."""

    def __init__(self, seed: int, weights: dict[str, np.ndarray] | None = None):
        self.rng = np.random.default_rng(seed)
        self.weights = weights
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []

    def const(self, name: str, array) -> str:
        self.initializers.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def scalar(self, name: str, value: float) -> str:
        return self.const(name, np.array(value, np.float32))

    def normal(self, name: str, shape, std: float, mean: float = 0.0) -> str:
        if self.weights is not None:
            if name not in self.weights:
                raise KeyError(f"GraphWriter: no weight {name!r} among the given weights")
            w = np.asarray(self.weights[name], np.float32)
            if w.shape != tuple(shape):
                raise ValueError(f"GraphWriter: weight {name!r} is {w.shape}, expected {shape}")
            return self.const(name, w)
        w = mean + std * self.rng.standard_normal(shape)
        return self.const(name, w.astype(np.float32))

    def node(self, op: str, inputs: list[str], name: str, **attrs) -> str:
        out = f"{name}_output_0"
        self.nodes.append(helper.make_node(op, inputs, [out], name=name, **attrs))
        return out

    def model(self, name: str, inputs, outputs) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.initializers)
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="tessera-bench"
        )
        model.ir_version = IR_VERSION
        return model


# -- MobileNetV2 -------------------------------------------------------------------------------


def make_divisible(value: float, divisor: int = 8) -> int:
    """torchvision's rounding of scaled channel counts: to a multiple of `divisor`, never more
    than 10% below `value`."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


def _conv_bn(
    g: GraphWriter, x: str, prefix: str, cin: int, cout: int, k: int, stride: int, groups: int
) -> str:
    """Conv (no bias) + BatchNormalization; He-scaled weights, batch-norm statistics random
    (variances positive) so that folding them is tested with real numbers."""
    w = g.normal(
        f"{prefix}.0.weight", (cout, cin // groups, k, k), math.sqrt(2 / (cin // groups * k * k))
    )
    pad = (k - 1) // 2
    y = g.node(
        "Conv", [x, w], f"{prefix}/Conv", kernel_shape=[k, k], strides=[stride, stride],
        pads=[pad] * 4, group=groups, dilations=[1, 1],
    )  # fmt: skip
    bn = f"{prefix}.1"
    stats = [
        g.normal(f"{bn}.weight", (cout,), 0.1, mean=1.0),
        g.normal(f"{bn}.bias", (cout,), 0.1),
        g.normal(f"{bn}.running_mean", (cout,), 0.1),
        g.const(
            f"{bn}.running_var", (0.5 + 0.5 * np.abs(g.rng.standard_normal(cout))).astype("f4")
        ),
    ]
    return g.node("BatchNormalization", [y, *stats], f"{prefix}/BatchNormalization", epsilon=1e-5)


def _relu6(g: GraphWriter, x: str, prefix: str) -> str:
    # PyTorch (opset >= 11) writes ReLU6 as Clip with min/max as constant inputs.
    lo = g.scalar(f"{prefix}/Clip.min", 0.0)
    hi = g.scalar(f"{prefix}/Clip.max", 6.0)
    return g.node("Clip", [x, lo, hi], f"{prefix}/Clip")


def _inverted_residual(
    g: GraphWriter, x: str, prefix: str, cin: int, cout: int, stride: int, t: int
) -> str:
    hidden = int(round(cin * t))
    y, i = x, 0
    if t != 1:  # 1x1 expansion
        name = f"{prefix}.conv.0"
        y, i = _relu6(g, _conv_bn(g, y, name, cin, hidden, 1, 1, 1), name), 1
    y = _conv_bn(g, y, f"{prefix}.conv.{i}", hidden, hidden, 3, stride, hidden)  # depthwise
    y = _relu6(g, y, f"{prefix}.conv.{i}")
    y = _conv_bn(g, y, f"{prefix}.conv.{i + 1}", hidden, cout, 1, 1, 1)  # linear bottleneck
    if stride == 1 and cin == cout:
        y = g.node("Add", [x, y], f"{prefix}/Add")
    return y


def mobilenet_v2(
    width: float = 1.0,
    resolution: int = 224,
    num_classes: int = 1000,
    batch: int = 1,
    seed: int = 0,
) -> onnx.ModelProto:
    """MobileNetV2 (Sandler et al. 2018, torchvision's layout): input "input" (batch, 3, r, r),
    output "output" (batch, num_classes) logits. `width` scales every channel count."""
    if not width > 0:
        raise ValueError(f"mobilenet_v2: width must be > 0, got {width}")
    for label, v in (("resolution", resolution), ("num_classes", num_classes), ("batch", batch)):
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"mobilenet_v2: {label} must be a positive int, got {v!r}")
    g = GraphWriter(seed)
    cin = make_divisible(32 * width)
    x = _relu6(g, _conv_bn(g, "input", "features.0", 3, cin, 3, 2, 1), "features.0")
    index = 1
    for t, c, n, s in MOBILENET_V2_BLOCKS:
        cout = make_divisible(c * width)
        for r in range(n):
            x = _inverted_residual(g, x, f"features.{index}", cin, cout, s if r == 0 else 1, t)
            cin, index = cout, index + 1
    last = make_divisible(1280 * max(1.0, width))
    x = _relu6(g, _conv_bn(g, x, f"features.{index}", cin, last, 1, 1, 1), f"features.{index}")
    x = g.node("GlobalAveragePool", [x], "GlobalAveragePool")
    x = g.node("Flatten", [x], "Flatten", axis=1)
    w = g.normal("classifier.1.weight", (num_classes, last), math.sqrt(1 / last))
    b = g.normal("classifier.1.bias", (num_classes,), 0.01)
    g.nodes.append(
        helper.make_node("Gemm", [x, w, b], ["output"], name="classifier.1/Gemm", transB=1)
    )
    inp = helper.make_tensor_value_info(
        "input", TensorProto.FLOAT, [batch, 3, resolution, resolution]
    )
    out = helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, num_classes])
    label = f"mobilenet_v2 (width {width}, {resolution}x{resolution}, seed {seed})"
    return g.model(label, [inp], [out])


# -- BERT encoder ------------------------------------------------------------------------------

BERT_STD = 0.02  # BERT's initializer range
MASK_VALUE = -10000.0  # added to the scores of masked keys (Hugging Face's extended mask)


def _linear(g: GraphWriter, x: str, prefix: str, cin: int, cout: int) -> str:
    # A Linear on a 3-D input exports as MatMul with the transposed weight, then Add of the bias.
    w = g.normal(f"{prefix}.weight.T", (cin, cout), BERT_STD)
    y = g.node("MatMul", [x, w], f"{prefix}/MatMul")
    return g.node("Add", [y, g.normal(f"{prefix}.bias", (cout,), BERT_STD)], f"{prefix}/Add")


def _layer_norm(g: GraphWriter, x: str, prefix: str, hidden: int) -> str:
    gamma = g.normal(f"{prefix}.weight", (hidden,), 0.1, mean=1.0)
    beta = g.normal(f"{prefix}.bias", (hidden,), 0.1)
    return g.node(
        "LayerNormalization",
        [x, gamma, beta],
        f"{prefix}/LayerNormalization",
        axis=-1,
        epsilon=1e-12,
    )


def _split_heads(g: GraphWriter, x: str, prefix: str, shape: str, perm: list[int]) -> str:
    x = g.node("Reshape", [x, shape], f"{prefix}/Reshape")
    return g.node("Transpose", [x], f"{prefix}/Transpose", perm=perm)


def _gelu(g: GraphWriter, x: str, prefix: str) -> str:
    """x * 0.5 * (1 + erf(x / sqrt(2))), node for node as PyTorch's exporter writes GELU."""
    y = g.node("Div", [x, g.scalar(f"{prefix}/Div.b", math.sqrt(2))], f"{prefix}/Div")
    y = g.node("Erf", [y], f"{prefix}/Erf")
    y = g.node("Add", [y, g.scalar(f"{prefix}/Add.b", 1.0)], f"{prefix}/Add")
    y = g.node("Mul", [x, y], f"{prefix}/Mul")
    return g.node("Mul", [y, g.scalar(f"{prefix}/Mul_1.b", 0.5)], f"{prefix}/Mul_1")


def _attention(g, x, mask, prefix, batch, seq, hidden, n_heads) -> str:
    d = hidden // n_heads
    heads_shape = g.const(f"{prefix}/heads_shape", np.array([batch, seq, n_heads, d], np.int64))
    # (batch, heads, seq, d) for queries and values; keys go straight to (batch, heads, d, seq).
    heads = []
    for name, perm in (("query", [0, 2, 1, 3]), ("key", [0, 2, 3, 1]), ("value", [0, 2, 1, 3])):
        y = _linear(g, x, f"{prefix}.self.{name}", hidden, hidden)
        heads.append(_split_heads(g, y, f"{prefix}.self.{name}", heads_shape, perm))
    q, k, v = heads
    s = g.node("MatMul", [q, k], f"{prefix}.self/MatMul")
    s = g.node("Div", [s, g.scalar(f"{prefix}.self/Div.b", math.sqrt(d))], f"{prefix}.self/Div")
    s = g.node("Add", [s, mask], f"{prefix}.self/Add")
    p = g.node("Softmax", [s], f"{prefix}.self/Softmax", axis=-1)
    ctx = g.node("MatMul", [p, v], f"{prefix}.self/MatMul_1")
    ctx = g.node("Transpose", [ctx], f"{prefix}.self/Transpose", perm=[0, 2, 1, 3])
    flat = g.const(f"{prefix}/hidden_shape", np.array([batch, seq, hidden], np.int64))
    ctx = g.node("Reshape", [ctx, flat], f"{prefix}.self/Reshape")
    y = _linear(g, ctx, f"{prefix}.output.dense", hidden, hidden)
    y = g.node("Add", [y, x], f"{prefix}.output/Add")
    return _layer_norm(g, y, f"{prefix}.output.LayerNorm", hidden)


def _bert_layer(g, x, mask, prefix, batch, seq, hidden, heads, intermediate) -> str:
    x = _attention(g, x, mask, f"{prefix}.attention", batch, seq, hidden, heads)
    y = _linear(g, x, f"{prefix}.intermediate.dense", hidden, intermediate)
    y = _gelu(g, y, f"{prefix}.intermediate.intermediate_act_fn")
    y = _linear(g, y, f"{prefix}.output.dense", intermediate, hidden)
    y = g.node("Add", [y, x], f"{prefix}.output/Add")
    return _layer_norm(g, y, f"{prefix}.output.LayerNorm", hidden)


def _embeddings(
    g: GraphWriter, seq: int, hidden: int, vocab: int, max_position: int, type_vocab: int
) -> str:
    words = g.normal("embeddings.word_embeddings.weight", (vocab, hidden), BERT_STD)
    positions = g.normal("embeddings.position_embeddings.weight", (max_position, hidden), BERT_STD)
    types = g.normal("embeddings.token_type_embeddings.weight", (type_vocab, hidden), BERT_STD)
    # The exporter folds `position_ids[:, :seq]` (a registered buffer) into a constant.
    pos_ids = g.const("embeddings.position_ids", np.arange(seq, dtype=np.int64)[None])
    e = g.node("Gather", [words, "input_ids"], "embeddings.word_embeddings/Gather")
    t = g.node("Gather", [types, "token_type_ids"], "embeddings.token_type_embeddings/Gather")
    e = g.node("Add", [e, t], "embeddings/Add")
    p = g.node("Gather", [positions, pos_ids], "embeddings.position_embeddings/Gather")
    e = g.node("Add", [e, p], "embeddings/Add_1")
    return _layer_norm(g, e, "embeddings.LayerNorm", hidden)


def _extended_mask(g: GraphWriter) -> str:
    """(1 - float(mask[:, None, None, :])) * -10000: 0 where attended, -10000 where masked."""
    axes = g.const("mask/axes", np.array([1, 2], np.int64))
    m = g.node("Unsqueeze", ["attention_mask", axes], "mask/Unsqueeze")
    m = g.node("Cast", [m], "mask/Cast", to=TensorProto.FLOAT)
    m = g.node("Sub", [g.scalar("mask/Sub.a", 1.0), m], "mask/Sub")
    return g.node("Mul", [m, g.scalar("mask/Mul.b", MASK_VALUE)], "mask/Mul")


def bert_encoder(
    layers: int = 12, hidden: int = 768, heads: int = 12, intermediate: int | None = None,
    seq: int = 128, batch: int = 1, vocab: int = 30522, max_position: int = 512,
    type_vocab: int = 2, seed: int = 0, weights: dict[str, np.ndarray] | None = None,
) -> onnx.ModelProto:  # fmt: skip
    """A BERT encoder (Hugging Face's BertModel without the pooler): int64 inputs "input_ids",
    "token_type_ids", "attention_mask" (batch, seq); output "last_hidden_state"
    (batch, seq, hidden). `intermediate` defaults to 4 * hidden. `weights`: a Hugging Face
    checkpoint's tensors by name (linear weights transposed, named `<module>.weight.T`) to use
    instead of random ones (`fetch_zoo.py` loads all-MiniLM-L6-v2 this way)."""
    intermediate = 4 * hidden if intermediate is None else intermediate
    sizes = dict(
        layers=layers, hidden=hidden, heads=heads, intermediate=intermediate, seq=seq,
        batch=batch, vocab=vocab, max_position=max_position, type_vocab=type_vocab,
    )  # fmt: skip
    for label, v in sizes.items():
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"bert_encoder: {label} must be a positive int, got {v!r}")
    if hidden % heads:
        raise ValueError(f"bert_encoder: hidden ({hidden}) must be a multiple of heads ({heads})")
    if seq > max_position:
        raise ValueError(f"bert_encoder: seq ({seq}) exceeds max_position ({max_position})")
    g = GraphWriter(seed, weights)
    x = _embeddings(g, seq, hidden, vocab, max_position, type_vocab)
    mask = _extended_mask(g)
    for i in range(layers):
        x = _bert_layer(g, x, mask, f"encoder.layer.{i}", batch, seq, hidden, heads, intermediate)
    g.nodes[-1].output[0] = "last_hidden_state"
    ids = [
        helper.make_tensor_value_info(n, TensorProto.INT64, [batch, seq])
        for n in ("input_ids", "token_type_ids", "attention_mask")
    ]
    out = helper.make_tensor_value_info(
        "last_hidden_state", TensorProto.FLOAT, [batch, seq, hidden]
    )
    label = (
        f"bert encoder ({layers} layers, hidden {hidden}, {heads} heads, seq {seq}, seed {seed})"
    )
    return g.model(label, ids, [out])


def bert_inputs(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Feeds for `bert_encoder(...)`: random token ids over the whole vocabulary, two segments
    (types 0 then 1), and a mask that pads the last quarter of each sequence."""
    inits = {i.name: i for i in model.graph.initializer}
    vocab = inits["embeddings.word_embeddings.weight"].dims[0]
    batch, seq = (d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim)
    rng = np.random.default_rng(seed)
    types = np.zeros((batch, seq), np.int64)
    types[:, seq // 2 :] = 1
    mask = np.ones((batch, seq), np.int64)
    mask[:, seq - seq // 4 :] = 0
    return {
        "input_ids": rng.integers(0, vocab, (batch, seq)).astype(np.int64),
        "token_type_ids": types,
        "attention_mask": mask,
    }


def count_parameters(model: onnx.ModelProto) -> int:
    """Trainable weights, counted as PyTorch counts them: float initializers named after a
    module (node constants have a "/" in their name; batch-norm running statistics are buffers)."""
    return sum(
        int(np.prod(i.dims))
        for i in model.graph.initializer
        if i.data_type == TensorProto.FLOAT and "/" not in i.name and ".running_" not in i.name
    )


__all__ = [
    "bert_encoder",
    "bert_inputs",
    "count_parameters",
    "make_divisible",
    "mobilenet_v2",
]
