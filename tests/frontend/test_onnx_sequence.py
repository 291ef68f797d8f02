"""ONNX sequences resolved when converting: sequence ops, a sequence input and a sequence output
(one tensor per element), SequenceMap; against ONNX Runtime."""

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper

import tessera
from tessera.frontend import onnx_backend
from tessera.frontend.onnx import convert_onnx

ort = pytest.importorskip("onnxruntime")


def _seq_info(name, shape=None):
    return helper.make_tensor_sequence_value_info(name, TP.FLOAT, shape)


def test_split_insert_at_concat_match_onnxruntime():
    nodes = [
        helper.make_node("SplitToSequence", ["x"], ["s"], axis=1, keepdims=1),
        helper.make_node("SequenceInsert", ["s", "y"], ["s2"]),
        helper.make_node("SequenceErase", ["s2", "zero"], ["s3"]),
        helper.make_node("SequenceAt", ["s3", "one"], ["second"]),
        helper.make_node("SequenceLength", ["s3"], ["n"]),
        helper.make_node("ConcatFromSequence", ["s3"], ["cat"], axis=0, new_axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "seq",
        [
            helper.make_tensor_value_info("x", TP.FLOAT, [2, 3]),
            helper.make_tensor_value_info("y", TP.FLOAT, [2, 1]),
        ],
        [
            helper.make_tensor_value_info("cat", TP.FLOAT, None),
            helper.make_tensor_value_info("second", TP.FLOAT, None),
            helper.make_tensor_value_info("n", TP.INT64, None),
        ],
        [
            helper.make_tensor("zero", TP.INT64, [], [0]),
            helper.make_tensor("one", TP.INT64, [], [1]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    rng = np.random.default_rng(0)
    feeds = {
        "x": rng.standard_normal((2, 3)).astype(np.float32),
        "y": rng.standard_normal((2, 1)).astype(np.float32),
    }
    mod, params, layout = convert_onnx(model)
    assert layout == [None, None, None]  # tensors only: the sequence was resolved
    m = tessera.runtime.GraphModule(tessera.build(mod, target="llvm", params=params)["default"]())
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    for got, ref in zip(m(**feeds), want, strict=True):
        np.testing.assert_array_equal(got, ref)


def test_sequence_input_and_output_through_sequence_map():
    body = helper.make_graph(
        [helper.make_node("Add", ["a", "t"], ["o"]), helper.make_node("Shape", ["a"], ["sh"])],
        "body",
        [
            helper.make_tensor_value_info("a", TP.FLOAT, None),
            helper.make_tensor_value_info("t", TP.FLOAT, [1]),
        ],
        [
            helper.make_tensor_value_info("o", TP.FLOAT, None),
            helper.make_tensor_value_info("sh", TP.INT64, None),
        ],
    )
    graph = helper.make_graph(
        [helper.make_node("SequenceMap", ["xs", "t"], ["ys", "shapes"], body=body)],
        "map",
        [_seq_info("xs"), helper.make_tensor_value_info("t", TP.FLOAT, [1])],
        [_seq_info("ys"), helper.make_tensor_sequence_value_info("shapes", TP.INT64, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal(s).astype(np.float32) for s in [(2, 3), (4,), (1, 1, 2)]]
    t = np.array([0.5], np.float32)
    got = onnx_backend.prepare(model).run({"xs": xs, "t": t})
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"xs": xs, "t": t})
    for g, w in zip(got, want, strict=True):
        assert isinstance(g, list) and len(g) == len(w) == 3
        for a, r in zip(g, w, strict=True):
            np.testing.assert_array_equal(a, r)


def test_a_sequence_input_needs_a_list_of_shapes():
    graph = helper.make_graph(
        [helper.make_node("SequenceLength", ["xs"], ["n"])],
        "len",
        [_seq_info("xs")],
        [helper.make_tensor_value_info("n", TP.INT64, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ValueError, match="is a sequence: give a list of shapes"):
        convert_onnx(model)
