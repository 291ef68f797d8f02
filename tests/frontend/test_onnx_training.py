"""SwiGLU, the preview.training optimizer steps and two ai.onnx.ml ops: compiled, against the
ONNX reference implementation (onnx.reference), which ONNX Runtime lacks for the optimizers."""

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper
from onnx.reference import ReferenceEvaluator

import tessera
from tessera.frontend import from_onnx
from tessera.runtime import GraphModule

TRAIN = "ai.onnx.preview.training"


def _run_both(node, feeds, opsets):
    inputs = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
        for n, a in feeds.items()
    ]
    outputs = [helper.make_tensor_value_info(o, TP.UNDEFINED, None) for o in node.output]
    graph = helper.make_graph([node], "g", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    model.ir_version = 10
    mod, params = from_onnx(model)
    m = GraphModule(tessera.build(mod, target="llvm", params=params)["default"]())
    return m(**feeds), ReferenceEvaluator(model).run(None, feeds)


def _state(rng, n=2):
    return [rng.standard_normal(3).astype(np.float32) for _ in range(n)]


@pytest.mark.parametrize("t", [0, 3])
def test_adam_adagrad_momentum_match_the_onnx_reference(t):
    rng = np.random.default_rng(0)
    common = {"R": np.array(0.1, np.float32), "T": np.array(t, np.int64)}
    x, g, v, h = _state(rng, 4)
    h = np.abs(h)
    cases = [
        ("Adam", ["x", "g", "v", "h"], ["x2", "v2", "h2"], dict(norm_coefficient=0.01)),
        ("Adagrad", ["x", "g", "h"], ["x2", "h2"], dict(decay_factor=0.1, norm_coefficient=0.01)),
        ("Momentum", ["x", "g", "v"], ["x2", "v2"],
         dict(alpha=0.9, beta=0.5, mode="nesterov", norm_coefficient=0.01)),
    ]  # fmt: skip
    values = {"x": x, "g": g, "v": v, "h": h}
    for op, ins, outs, attrs in cases:
        node = helper.make_node(op, ["R", "T", *ins], outs, domain=TRAIN, **attrs)
        feeds = {**common, **{n: values[n] for n in ins}}
        got, want = _run_both(node, feeds, [("", 17), (TRAIN, 1)])
        for a, w in zip(got, want, strict=True):
            np.testing.assert_allclose(a, w, rtol=1e-5, atol=1e-6)


def test_swiglu_binarizer_and_feature_extractor_match_the_onnx_reference():
    rng = np.random.default_rng(1)
    a, bb = (rng.standard_normal((2, 5)).astype(np.float32) for _ in range(2))
    got, want = _run_both(
        helper.make_node("SwiGLU", ["a", "b"], ["y"], alpha=1.5), {"a": a, "b": bb}, [("", 28)]
    )
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
    ml = [("", 17), ("ai.onnx.ml", 3)]
    node = helper.make_node("Binarizer", ["a"], ["y"], domain="ai.onnx.ml", threshold=0.2)
    got, want = _run_both(node, {"a": a}, ml)
    np.testing.assert_array_equal(got[0], want[0])
    node = helper.make_node("ArrayFeatureExtractor", ["a", "i"], ["y"], domain="ai.onnx.ml")
    got, want = _run_both(node, {"a": a, "i": np.array([4, 0, 2], np.int64)}, ml)
    np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
def test_tfidf_vectorizer_matches_onnxruntime(mode):
    ort = pytest.importorskip("onnxruntime")
    node = helper.make_node(
        "TfIdfVectorizer", ["x"], ["y"], mode=mode, min_gram_length=1, max_gram_length=3,
        max_skip_count=2, ngram_counts=[0, 3, 7], ngram_indexes=[4, 0, 1, 2, 3, 5, 6],
        pool_int64s=[2, 3, 5, 2, 3, 5, 4, 2, 5, 3], weights=[0.5, 1, 2, 1.5, 3, 0.25, 4],
    )  # fmt: skip
    x = np.random.default_rng(3).integers(0, 7, (3, 12)).astype(np.int32)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TP.INT32, x.shape)],
        [helper.make_tensor_value_info("y", TP.FLOAT, None)],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    mod, params = from_onnx(model)
    m = GraphModule(tessera.build(mod, target="llvm", params=params)["default"]())
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_allclose(m(x=x)[0], want, rtol=1e-6)
    assert want.any()


def test_batch_norm_training_mode_matches_the_onnx_reference():
    rng = np.random.default_rng(4)
    feeds = {
        "x": rng.standard_normal((2, 3, 4, 5)).astype(np.float32),
        "s": rng.random(3).astype(np.float32) + 0.5,
        "b": rng.standard_normal(3).astype(np.float32),
        "m": rng.standard_normal(3).astype(np.float32),
        "v": rng.random(3).astype(np.float32) + 0.5,
    }
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"],
                            training_mode=1, momentum=0.8, epsilon=1e-3)  # fmt: skip
    got, want = _run_both(node, feeds, [("", 15)])
    for a, w in zip(got, want, strict=True):
        np.testing.assert_allclose(a, w, rtol=1e-4, atol=1e-5)


def test_col2im_matches_onnxruntime():
    ort = pytest.importorskip("onnxruntime")
    x = np.random.default_rng(5).standard_normal((2, 2 * 6, 6)).astype(np.float32)
    node = helper.make_node("Col2Im", ["x", "img", "blk"], ["y"], dilations=[1, 2],
                            pads=[1, 0, 0, 1], strides=[2, 1])  # fmt: skip
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TP.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TP.FLOAT, None)],
        [helper.make_tensor("img", TP.INT64, [2], [6, 5]),
         helper.make_tensor("blk", TP.INT64, [2], [2, 3])],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    mod, params = from_onnx(model)
    m = GraphModule(tessera.build(mod, target="llvm", params=params)["default"]())
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_allclose(m(x=x)[0], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", [(1, 1), (4, 4), (2, 3, 5, 5)])
def test_det_matches_numpy_with_pivoting_and_singular_matrices(shape):
    rng = np.random.default_rng(6)
    x = rng.standard_normal(shape).astype(np.float32)
    if len(shape) == 4:
        x[0, 0, 1] = x[0, 0, 0]  # a singular matrix
        x[1, 2, :, 0] = 0.0  # a zero first column: the pivot search must swap
        x[1, 1, 0, 0] = 0.0
    graph = helper.make_graph(
        [helper.make_node("Det", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TP.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TP.FLOAT, None)],
    )  # fmt: skip
    mod, params = from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    m = GraphModule(tessera.build(mod, target="llvm", params=params)["default"]())
    np.testing.assert_allclose(m(x=x)[0], np.linalg.det(x.astype(np.float64)), rtol=1e-4, atol=1e-5)


def test_flex_attention_with_gqa_and_modifiers_matches_the_onnx_reference():
    rng = np.random.default_rng(7)
    feeds = {
        "q": rng.standard_normal((1, 4, 3, 8)).astype(np.float32),
        "k": rng.standard_normal((1, 2, 5, 8)).astype(np.float32),
        "v": rng.standard_normal((1, 2, 5, 6)).astype(np.float32),
    }
    four = [helper.make_tensor_value_info(n, TP.FLOAT, None) for n in ("s", "t")]
    two = helper.make_tensor("c", TP.FLOAT, [], [2.0])
    score_mod = helper.make_graph(
        [helper.make_node("Constant", [], ["c"], value=two),
         helper.make_node("Div", ["s", "c"], ["d"]), helper.make_node("Tanh", ["d"], ["t"])],
        "cap", [four[0]], [four[1]],
    )  # fmt: skip
    prob_mod = helper.make_graph(
        [helper.make_node("Sqrt", ["s"], ["t"])], "root", [four[0]], [four[1]]
    )
    node = helper.make_node("FlexAttention", ["q", "k", "v"], ["y"], domain="ai.onnx.preview",
                            score_mod=score_mod, prob_mod=prob_mod, scale=0.3)  # fmt: skip
    got, want = _run_both(node, feeds, [("", 26), ("ai.onnx.preview", 1)])
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
