"""The fuzzer's seed models and mutators: small ONNX models, and random edits of them.

    model = SEEDS["conv_relu_pool"]()
    mutated, what = mutate_model(model, rng)    # a copy; `what` says what was changed

A mutation changes one thing a user's model (or an attacker's) could get wrong: an attribute's
value or type, an input's shape or dtype, an edge of the graph (an input rewired, dropped,
duplicated or dangling), a node's op type, or the opset. Seeds are tiny, so that a mutant that
compiles runs in milliseconds.
"""

from __future__ import annotations

import copy

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

N = helper.make_node
F = TensorProto.FLOAT


def _w(rng, *shape):
    return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32))


def _model(nodes, inputs, outputs, inits=(), opset=17) -> onnx.ModelProto:
    ins = [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs]
    outs = [helper.make_empty_tensor_value_info(n) for n in outputs]
    graph = helper.make_graph(nodes, "seed", ins, outs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _named(t, name):
    t.name = name
    return t


def conv_relu_pool(rng):
    inits = [_named(_w(rng, 4, 3, 3, 3), "w"), _named(_w(rng, 4), "b")]
    nodes = [
        N("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], strides=[1, 1], name="conv"),
        N("Relu", ["c"], ["r"], name="relu"),
        N("MaxPool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
    ]
    return _model(nodes, [("x", F, [1, 3, 6, 6])], ["y"], inits)


def conv_same_avgpool(rng):
    inits = [_named(_w(rng, 2, 3, 3, 3), "w")]
    nodes = [
        N("Conv", ["x", "w"], ["c"], auto_pad="SAME_UPPER", strides=[2, 1], name="conv"),
        N("AveragePool", ["c"], ["y"], kernel_shape=[2, 2], pads=[0, 0, 1, 1], name="pool"),
    ]
    return _model(nodes, [("x", F, [1, 3, 5, 7])], ["y"], inits)


def gemm_softmax(rng):
    inits = [_named(_w(rng, 5, 6), "w"), _named(_w(rng, 5), "b")]
    nodes = [
        N("Gemm", ["x", "w", "b"], ["g"], transB=1, alpha=0.5, name="fc"),
        N("Softmax", ["g"], ["y"], axis=-1, name="softmax"),
    ]
    return _model(nodes, [("x", F, [3, 6])], ["y"], inits)


def matmul_broadcast(rng):
    nodes = [
        N("MatMul", ["a", "b"], ["m"], name="mm"),
        N("Add", ["m", "c"], ["s"], name="add"),
        N("Tanh", ["s"], ["y"], name="tanh"),
    ]
    inputs = [("a", F, [2, 3, 4]), ("b", F, [4, 5]), ("c", F, [5])]
    return _model(nodes, inputs, ["y"])


def reshape_transpose(rng):
    shape = numpy_helper.from_array(np.array([2, 3, 4], np.int64), "shape")
    nodes = [
        N("Reshape", ["x", "shape"], ["r"], name="reshape"),
        N("Transpose", ["r"], ["t"], perm=[2, 0, 1], name="transpose"),
        N("Sigmoid", ["t"], ["y"], name="sigmoid"),
    ]
    return _model(nodes, [("x", F, [6, 4])], ["y"], [shape])


def concat_slice(rng):
    starts = numpy_helper.from_array(np.array([1, 0], np.int64), "starts")
    ends = numpy_helper.from_array(np.array([4, 3], np.int64), "ends")
    axes = numpy_helper.from_array(np.array([0, 1], np.int64), "axes")
    nodes = [
        N("Concat", ["a", "b"], ["c"], axis=0, name="concat"),
        N("Slice", ["c", "starts", "ends", "axes"], ["s"], name="slice"),
        N("Mul", ["s", "s"], ["y"], name="square"),
    ]
    inputs = [("a", F, [2, 4]), ("b", F, [3, 4])]
    return _model(nodes, inputs, ["y"], [starts, ends, axes])


def batchnorm_reduce(rng):
    inits = [_named(_w(rng, 3), n) for n in ("scale", "bias", "mean")]
    var = numpy_helper.from_array(rng.uniform(0.5, 2, 3).astype(np.float32), "var")
    nodes = [
        N("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["b"], epsilon=1e-5),
        N("ReduceMean", ["b"], ["y"], axes=[2, 3], keepdims=1, name="mean"),
    ]
    return _model(nodes, [("x", F, [2, 3, 4, 4])], ["y"], [*inits, var], opset=13)


def gather_flatten(rng):
    table = _named(_w(rng, 7, 3), "table")
    nodes = [
        N("Gather", ["table", "idx"], ["g"], axis=0, name="gather"),
        N("Flatten", ["g"], ["y"], axis=1, name="flatten"),
    ]
    return _model(nodes, [("idx", TensorProto.INT64, [2, 3])], ["y"], [table])


def pad_clip(rng):
    pads = numpy_helper.from_array(np.array([0, 1, 2, 0], np.int64), "pads")
    lo = numpy_helper.from_array(np.array(-0.5, np.float32), "lo")
    hi = numpy_helper.from_array(np.array(0.5, np.float32), "hi")
    nodes = [
        N("Pad", ["x", "pads"], ["p"], mode="reflect", name="pad"),
        N("Clip", ["p", "lo", "hi"], ["y"], name="clip"),
    ]
    return _model(nodes, [("x", F, [3, 4])], ["y"], [pads, lo, hi])


def squeeze_unsqueeze(rng):
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    nodes = [
        N("Unsqueeze", ["x", "axes"], ["u"], name="unsqueeze"),
        N("Exp", ["u"], ["e"], name="exp"),
        N("Squeeze", ["e", "axes"], ["y"], name="squeeze"),
    ]
    return _model(nodes, [("x", F, [2, 5])], ["y"], [axes])


def layernorm_where(rng):
    inits = [_named(_w(rng, 6), "gamma"), _named(_w(rng, 6), "beta")]
    nodes = [
        N("LayerNormalization", ["x", "gamma", "beta"], ["n"], axis=-1, epsilon=1e-5),
        N("Greater", ["n", "x"], ["m"], name="greater"),
        N("Where", ["m", "n", "x"], ["y"], name="where"),
    ]
    return _model(nodes, [("x", F, [2, 6])], ["y"], inits)


def resize_sub(rng):
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    nodes = [
        N("Resize", ["x", "", "scales"], ["r"], mode="nearest", name="resize"),
        N("Sub", ["r", "r"], ["z"], name="sub"),
        N("Add", ["z", "r"], ["y"], name="add"),
    ]
    return _model(nodes, [("x", F, [1, 2, 3, 3])], ["y"], [scales])


def conv_transpose(rng):
    inits = [_named(_w(rng, 3, 2, 3, 3), "w")]
    nodes = [N("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], pads=[1, 1, 1, 1])]
    return _model(nodes, [("x", F, [1, 3, 4, 4])], ["y"], inits)


def cast_argmax(rng):
    nodes = [
        N("Cast", ["x"], ["c"], to=TensorProto.INT32, name="cast"),
        N("Cast", ["c"], ["f"], to=TensorProto.FLOAT, name="back"),
        N("ArgMax", ["f"], ["y"], axis=1, keepdims=0, name="argmax"),
    ]
    return _model(nodes, [("x", F, [3, 5])], ["y"])


SEEDS = {
    f.__name__: f
    for f in (
        conv_relu_pool,
        conv_same_avgpool,
        gemm_softmax,
        matmul_broadcast,
        reshape_transpose,
        concat_slice,
        batchnorm_reduce,
        gather_flatten,
        pad_clip,
        squeeze_unsqueeze,
        layernorm_where,
        resize_sub,
        conv_transpose,
        cast_argmax,
    )
}

# -- mutators ------------------------------------------------------------------------------------

_DTYPES = [
    TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.INT64,
    TensorProto.INT32, TensorProto.INT8, TensorProto.UINT8, TensorProto.BOOL, TensorProto.STRING,
    TensorProto.BFLOAT16, TensorProto.COMPLEX64,
]  # fmt: skip
_OPS = [
    "Relu", "Conv", "MaxPool", "Add", "MatMul", "Softmax", "Reshape", "Concat", "Gemm",
    "Transpose", "Slice", "Pad", "Gather", "Cast", "Identity", "NoSuchOp", "Resize",
]  # fmt: skip
_INTS = [-(2**40), -3, -2, -1, 0, 1, 2, 3, 5, 17, 2**31, 2**40]


def _random_value(rng, old):
    """A new value for an attribute: often of the same kind, sometimes of another."""
    choice = rng.integers(0, 10)
    if choice == 0:
        return float(rng.choice([0.5, -1.0, 1e30, float("nan")]))
    if choice == 1:
        return "SAME_UPPER" if rng.integers(0, 2) else "bogus"
    if choice == 2:
        return [float(v) for v in rng.integers(-1, 4, int(rng.integers(0, 5)))]
    if isinstance(old, list) and old:
        new = list(old)
        k = int(rng.integers(0, len(new) + 1))
        if k == len(new):
            return new[:-1] if rng.integers(0, 2) else new + [new[-1]]
        new[k] = int(rng.choice(_INTS)) if isinstance(new[k], int) else float(rng.normal())
        return new
    if isinstance(old, int):
        return int(rng.choice(_INTS))
    if isinstance(old, float):
        return float(rng.choice([0.0, -1.0, 1e-30, 1e30, float("inf")]))
    return [int(v) for v in rng.integers(-1, 4, int(rng.integers(1, 5)))]


def _mutate_attribute(model, rng) -> str:
    nodes = list(model.graph.node)
    node = nodes[rng.integers(0, len(nodes))]
    attrs = list(node.attribute)
    if not attrs or rng.integers(0, 5) == 0:
        name = str(rng.choice(["strides", "pads", "axis", "kernel_shape", "perm", "dilations"]))
        value = _random_value(rng, [1, 1])
        _set_attr(node, name, value)
        return f"{node.name or node.op_type}: set {name}={value!r}"
    attr = attrs[rng.integers(0, len(attrs))]
    if rng.integers(0, 8) == 0:
        node.attribute.remove(attr)
        return f"{node.name or node.op_type}: removed {attr.name}"
    value = _random_value(rng, helper.get_attribute_value(attr))
    _set_attr(node, attr.name, value)
    return f"{node.name or node.op_type}: {attr.name}={value!r}"


def _set_attr(node, name, value) -> None:
    for a in list(node.attribute):
        if a.name == name:
            node.attribute.remove(a)
    if isinstance(value, list) and not value:
        value = [0]
    node.attribute.append(helper.make_attribute(name, value))


def _mutate_shape(model, rng) -> str:
    inputs = list(model.graph.input)
    vi = inputs[rng.integers(0, len(inputs))]
    dims = vi.type.tensor_type.shape.dim
    choice = rng.integers(0, 6)
    if choice == 0 and len(dims):
        del dims[int(rng.integers(0, len(dims)))]
        return f"input {vi.name}: dropped a dim"
    if choice == 1:
        dims.add().dim_value = int(rng.integers(1, 4))
        return f"input {vi.name}: added a dim"
    if not len(dims):
        return f"input {vi.name}: no dims to change"
    d = dims[int(rng.integers(0, len(dims)))]
    value = int(rng.choice([0, 1, 2, 3, 4, 7, 9, -1, -5, 10**6, 10**12]))
    if choice == 2:
        d.dim_param = "n"
        return f"input {vi.name}: a dim became 'n'"
    d.dim_value = value
    return f"input {vi.name}: a dim became {value}"


def _mutate_dtype(model, rng) -> str:
    dtype = int(rng.choice(_DTYPES))
    name = TensorProto.DataType.Name(dtype)
    if rng.integers(0, 3) == 0 and model.graph.initializer:
        inits = list(model.graph.initializer)
        t = inits[rng.integers(0, len(inits))]
        if dtype == TensorProto.STRING:
            return "string initializer skipped"
        array = numpy_helper.to_array(t)
        np_type = helper.tensor_dtype_to_np_dtype(dtype)
        try:
            new = numpy_helper.from_array(array.astype(np_type), t.name)
        except (TypeError, ValueError):
            return "initializer cast skipped"
        t.CopyFrom(new)
        return f"initializer {t.name}: {name}"
    inputs = list(model.graph.input)
    vi = inputs[rng.integers(0, len(inputs))]
    vi.type.tensor_type.elem_type = dtype
    return f"input {vi.name}: {name}"


def _names(model) -> list[str]:
    names = [vi.name for vi in model.graph.input] + [t.name for t in model.graph.initializer]
    return names + [o for n in model.graph.node for o in n.output]


def _mutate_edge(model, rng) -> str:
    nodes = list(model.graph.node)
    node = nodes[rng.integers(0, len(nodes))]
    names = _names(model) + ["", "dangling"]
    choice = rng.integers(0, 5)
    if choice == 0 and len(node.input):
        k = int(rng.integers(0, len(node.input)))
        node.input[k] = str(rng.choice(names))
        return f"{node.name or node.op_type}: input {k} -> {node.input[k]!r}"
    if choice == 1 and len(node.input):
        del node.input[int(rng.integers(0, len(node.input)))]
        return f"{node.name or node.op_type}: dropped an input"
    if choice == 2:
        node.input.append(str(rng.choice(names)))
        return f"{node.name or node.op_type}: an extra input"
    if choice == 3 and len(node.input) > 1:
        node.input[0], node.input[1] = node.input[1], node.input[0]
        return f"{node.name or node.op_type}: swapped inputs 0 and 1"
    out = model.graph.output[0]
    out.name = str(rng.choice(names))
    return f"graph output -> {out.name!r}"


def _mutate_op(model, rng) -> str:
    nodes = list(model.graph.node)
    node = nodes[rng.integers(0, len(nodes))]
    node.op_type = str(rng.choice(_OPS))
    return f"{node.name or 'node'}: op type {node.op_type}"


def _mutate_opset(model, rng) -> str:
    version = int(rng.choice([1, 5, 7, 9, 11, 13, 15, 17, 18, 19, 21, 23, 99]))
    model.opset_import[0].version = version
    return f"opset {version}"


MUTATORS = {
    "attribute": (_mutate_attribute, 5),
    "shape": (_mutate_shape, 3),
    "dtype": (_mutate_dtype, 2),
    "edge": (_mutate_edge, 3),
    "op": (_mutate_op, 1),
    "opset": (_mutate_opset, 1),
}


def mutate_model(model: onnx.ModelProto, rng, edits: int = 1) -> tuple[onnx.ModelProto, str]:
    """A copy of `model` with `edits` random mutations; and a description of them."""
    model = copy.deepcopy(model)
    kinds = list(MUTATORS)
    weights = np.array([MUTATORS[k][1] for k in kinds], float)
    done = []
    for _ in range(edits):
        kind = str(rng.choice(kinds, p=weights / weights.sum()))
        done.append(f"{kind}: {MUTATORS[kind][0](model, rng)}")
    return model, "; ".join(done)


def mutate_bytes(data: bytes, rng) -> tuple[bytes, str]:
    """A damaged copy of an artifact's bytes: truncated, bytes flipped, a range zeroed or
    duplicated, garbage appended, or its trailer edited."""
    data = bytearray(data)
    choice = rng.integers(0, 6)
    if choice == 0:
        n = int(rng.integers(0, len(data)))
        return bytes(data[:n]), f"truncated to {n} of {len(data)} bytes"
    if choice == 1:
        k = int(rng.choice([1, 2, 16, 64]))
        for i in rng.integers(0, len(data), k):
            data[i] ^= int(rng.integers(1, 256))
        return bytes(data), f"{k} bytes flipped"
    if choice == 2:
        start = int(rng.integers(0, len(data)))
        end = min(len(data), start + int(rng.integers(1, 4096)))
        data[start:end] = bytes(end - start)
        return bytes(data), f"bytes {start}:{end} zeroed"
    if choice == 3:
        start = int(rng.integers(0, len(data)))
        chunk = data[start : start + int(rng.integers(1, 512))]
        return bytes(data[:start] + chunk + data[start:]), f"{len(chunk)} bytes duplicated"
    if choice == 4:
        return bytes(data) + bytes(rng.integers(0, 256, 64, dtype=np.uint8)), "garbage appended"
    k = len(data) - int(rng.integers(1, 200))
    data[k] ^= int(rng.integers(1, 256))
    return bytes(data), f"trailer byte {len(data) - k} from the end flipped"
