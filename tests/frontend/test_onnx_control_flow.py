"""Control flow decided at run time: If on an input's value and a Loop whose trip count depends
on data (greedy decoding), compiled once, run natively, exported and loaded; against ORT."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper

import tessera
from tessera.frontend import from_onnx
from tessera.models_control import (
    branch_on_input,
    branch_ruled_out_by_shapes,
    check_greedy_decoding,
    counting_loop,
    counting_loop_feeds,
    greedy_decoder,
)
from tessera.runtime import GraphModule, load_module

ort = pytest.importorskip("onnxruntime")


def _compile(model, target="llvm", opt_level=3):
    mod, params = from_onnx(model)
    with tessera.transform.PassContext(opt_level=opt_level):
        return tessera.build(mod, target=target, params=params)


@pytest.mark.parametrize("target", ["llvm", "c"])
def test_if_on_an_input_value_matches_onnxruntime(target):
    model = branch_on_input()
    lib = _compile(model, target)
    assert any("control" in c for c in lib.plan["calls"])  # not folded: decided at run time
    m = GraphModule(lib["default"]())
    sess = ort.InferenceSession(model.SerializeToString())
    rng = np.random.default_rng(0)
    for flag in (1.5, -2.0, 0.0, 3.0):
        x = rng.standard_normal((2, 3)).astype(np.float32)
        feeds = {"x": x, "flag": np.array(flag, np.float32)}
        np.testing.assert_allclose(m(**feeds)[0], sess.run(None, feeds)[0], rtol=1e-6)


def test_greedy_decoding_loop_matches_onnxruntime(tmp_path):
    model = greedy_decoder()
    onnx.checker.check_model(model, full_check=True)
    lib = _compile(model)
    names = [p["name"] for p in lib.plan["params"]]
    assert "E" in names and "E_1" not in names  # the embedding main and body read: stored once
    path = lib.export_library(tmp_path / "decoder.so")
    rng = np.random.default_rng(1)
    lengths = set()
    for m in (GraphModule(lib["default"]()), GraphModule(load_module(path)["default"]())):
        sources = [rng.integers(0, 16, 5).astype(np.int64) for _ in range(6)]
        lengths |= check_greedy_decoding(lambda src, m=m: m(src=src), model, sources)
    assert len(lengths) > 1  # the trip count depends on the data


@pytest.mark.parametrize("with_cond", [True, False])
def test_loop_with_run_time_trip_count_and_condition(with_cond):
    model = counting_loop(with_cond)
    m = GraphModule(_compile(model)["default"]())
    sess = ort.InferenceSession(model.SerializeToString())
    for feeds in counting_loop_feeds():
        np.testing.assert_allclose(m(**feeds)[0], sess.run(None, feeds)[0], rtol=1e-5)


def test_scan_output_of_an_early_stopping_loop_is_refused_inside_the_graph():
    model = greedy_decoder()
    g = model.graph
    g.node.append(helper.make_node("Neg", ["tokens"], ["neg"]))
    del g.output[:]
    g.output.append(helper.make_tensor_value_info("neg", TP.INT64, None))
    with pytest.raises(ValueError, match="may stop early.*only as a graph output"):
        from_onnx(model)


def test_if_branches_of_different_shapes_are_refused_clearly():
    out = lambda n: helper.make_tensor_value_info(n, TP.FLOAT, None)  # noqa: E731
    then_g = helper.make_graph([helper.make_node("Identity", ["x"], ["a"])], "t", [], [out("a")])
    axes = helper.make_tensor("axes", TP.INT64, [1], [0])
    else_g = helper.make_graph(
        [helper.make_node("Constant", [], ["ax"], value=axes),
         helper.make_node("ReduceSum", ["x", "ax"], ["b"], keepdims=0)],
        "e", [], [out("b")],
    )  # fmt: skip
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
        "m",
        [
            helper.make_tensor_value_info("c", TP.BOOL, []),
            helper.make_tensor_value_info("x", TP.FLOAT, [4]),
        ],
        [out("y")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ValueError, match="one static type per output of an If"):
        from_onnx(model)


def test_a_branch_the_shapes_rule_out_fails_clearly_only_when_taken():
    m = GraphModule(_compile(branch_ruled_out_by_shapes())["default"]())
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(m(c=np.array(True), x=x)[0], x + 1)
    with pytest.raises(RuntimeError, match="else branch of If .* cannot run at the compiled"):
        m(c=np.array(False), x=x)


SILERO = "/root/.cache/tessera-zoo/models/silero_vad.onnx"


@pytest.mark.slow
@pytest.mark.skipif(not __import__("os").path.exists(SILERO), reason="silero_vad not fetched")
def test_silero_vad_branching_on_the_sample_rate_matches_onnxruntime():
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # ORT's optimizer
    sess = ort.InferenceSession(SILERO, so)  # rejects the 8 kHz branch's shapes at 512 samples
    mod, params = from_onnx(onnx.load(SILERO), {"input": (1, 512), "state": (2, 1, 128), "sr": ()})
    m = GraphModule(tessera.build(mod, target="llvm", params=params)["default"]())
    rng = np.random.default_rng(0)
    state = np.zeros((2, 1, 128), np.float32)
    for _ in range(3):
        feeds = {
            "input": (rng.standard_normal((1, 512)) * 0.1).astype(np.float32),
            "state": state,
            "sr": np.array(16000, np.int64),
        }
        got, want = m(**feeds), sess.run(None, feeds)
        for a, w in zip(got, want, strict=True):
            np.testing.assert_allclose(a, w, rtol=1e-3, atol=1e-4)
        state = want[1]
