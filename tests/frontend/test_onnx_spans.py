"""The ONNX frontend names every call after the node it converts (`Call.span`)."""

import numpy as np
from onnx import helper

from tessera.frontend import from_onnx
from tessera.frontend.testing import make_model
from tessera.graph import parse
from tessera.graph.ir import source_nodes
from tessera.ir import assert_structural_equal

R = np.random.default_rng(0)


def _model():
    inits = {
        "w": R.standard_normal((4, 3, 3, 3)).astype("f4"),
        "b": R.standard_normal(4).astype("f4"),
        "shape": np.array([1, -1], "int64"),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),  # unnamed: named after its output
        helper.make_node("Shape", ["r"], ["s"], name="shape_of"),  # folds away: no call
        helper.make_node("Reshape", ["r", "shape"], ["f"], name="flatten"),
        helper.make_node("Softmax", ["f"], ["y"], name="head/softmax", axis=1),
    ]
    return make_model(nodes, {"x": ((1, 3, 6, 6), "float32")}, ["y"], inits)


def test_every_call_names_its_onnx_node():
    mod, params = from_onnx(_model())
    f = mod["main"]
    spans = [(c.op.name, c.span) for c in f.body]
    assert spans == [
        ("nn.conv2d", ("conv1",)),
        ("add", ("conv1",)),  # the conv's bias is part of the Conv node
        ("nn.relu", ("r",)),
        ("reshape", ("flatten",)),
        ("nn.softmax", ("head/softmax",)),
    ]
    assert [source_nodes(c) for c in f.body][-1] == ["head/softmax"]
    assert set(params) == {"w"}  # initializers became parameters; spans survived that


def test_spans_survive_the_text_form():
    mod, _ = from_onnx(_model())
    f = mod["main"]
    text = str(f)
    assert '@"head/softmax"' in text and '@"conv1"' in text
    g = parse(text, {c.name: c.array for c in f.constants})
    assert_structural_equal(g, f)
    assert [c.span for c in g.body] == [c.span for c in f.body]
