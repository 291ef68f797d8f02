"""Scatter, ScatterElements, ScatterND, TensorScatter, ReverseSequence and MaxUnpool against ONNX
Runtime (through the graph interpreter) and compiled with LLVM."""

import numpy as np
import pytest
from onnx import helper

import tessera
from tessera.frontend import from_onnx
from tessera.frontend.testing import check_node, make_model, run_ort

R = np.random.default_rng(3)


def compiled_matches_ort(model, feeds, rtol=1e-5, atol=1e-6):
    mod, params = from_onnx(model)
    lib = tessera.build(mod, target="llvm", params=params)
    m = tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))
    for name, value in feeds.items():
        m.set_input(name, value)
    m.run()
    for k, e in enumerate(run_ort(model, feeds)):
        np.testing.assert_allclose(m.get_output(k).numpy(), e, rtol=rtol, atol=atol)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_elements(reduction):
    data = R.standard_normal((3, 4)).astype(np.float32)
    idx = np.array([[1, -1, 0], [2, 3, 1]], np.int64)  # distinct per row: ORT's "none" contract
    upd = R.standard_normal((2, 3)).astype(np.float32)
    check_node("ScatterElements", {"d": data, "i": idx, "u": upd},
               {"axis": 1, "reduction": reduction}, opset=18)  # fmt: skip


@pytest.mark.parametrize("reduction", ["none", "add", "max"])
def test_scatter_nd(reduction):
    data = R.standard_normal((4, 3, 2)).astype(np.float32)
    idx = np.array([[[0, 1]], [[-1, 2]], [[1, 0]]], np.int64)
    upd = R.standard_normal((3, 1, 2)).astype(np.float32)
    check_node("ScatterND", {"d": data, "i": idx, "u": upd}, {"reduction": reduction}, opset=18)


def test_scatter_legacy_and_compiled():
    data = np.zeros((3, 3), np.float32)
    idx = np.array([[1, 0, 2], [0, 2, 1]], np.int64)
    upd = np.arange(6, dtype=np.float32).reshape(2, 3)
    check_node("Scatter", {"d": data, "i": idx, "u": upd}, {"axis": 0}, opset=10)
    node = helper.make_node("ScatterND", ["d", "i", "u"], ["y"], reduction="add")
    feeds = {"d": R.standard_normal((5, 4)).astype(np.float32),
             "i": np.array([[4], [0], [4]], np.int64),
             "u": R.standard_normal((3, 4)).astype(np.float32)}  # fmt: skip
    compiled_matches_ort(make_model([node], feeds, ["y"], opset=18), feeds)


@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_tensor_scatter_compiled(mode):
    past = R.standard_normal((2, 3, 6, 4)).astype(np.float32)
    update = R.standard_normal((2, 3, 3, 4)).astype(np.float32)
    feeds = {"past": past, "update": update, "w": np.array([1, 5], np.int64)}
    node = helper.make_node("TensorScatter", list(feeds), ["y"], mode=mode)
    model = make_model([node], feeds, ["y"], opset=24)
    if mode == "linear":
        feeds["w"] = np.array([1, 3], np.int64)  # linear writes must fit
    expected = past.copy()
    for b, w in enumerate(feeds["w"]):
        for s in range(3):
            expected[b, :, (w + s) % 6] = update[b, :, s]
    mod, params = from_onnx(model)
    lib = tessera.build(mod, target="llvm", params=params)
    m = tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))
    for name, value in feeds.items():
        m.set_input(name, value)
    m.run()
    np.testing.assert_array_equal(m.get_output(0).numpy(), expected)


@pytest.mark.parametrize("batch_axis,time_axis", [(1, 0), (0, 1)])
def test_reverse_sequence(batch_axis, time_axis):
    x = R.standard_normal((4, 4, 2)).astype(np.float32)
    lens = np.array([4, 1, 3, 2], np.int64)
    attrs = {"batch_axis": batch_axis, "time_axis": time_axis}
    check_node("ReverseSequence", {"x": x, "lens": lens}, attrs, opset=10)


def test_max_pool_indices_then_unpool_compiled():
    x = R.standard_normal((2, 3, 4, 6)).astype(np.float32)
    pool = helper.make_node("MaxPool", ["x"], ["p", "i"], kernel_shape=[2, 2], strides=[2, 2])
    unpool = helper.make_node("MaxUnpool", ["p", "i"], ["y"], kernel_shape=[2, 2], strides=[2, 2])
    feeds = {"x": x}
    compiled_matches_ort(make_model([pool, unpool], feeds, ["y", "i"], opset=12), feeds)


def test_unsupported_arguments_are_clear_errors():
    node = helper.make_node("ScatterElements", ["d", "i", "u"], ["y"], reduction="avg")
    feeds = {"d": np.zeros((2, 2), np.float32), "i": np.zeros((2, 2), np.int64),
             "u": np.zeros((2, 2), np.float32)}  # fmt: skip
    with pytest.raises(ValueError, match="unknown reduction 'avg'"):
        from_onnx(make_model([node], feeds, ["y"], opset=18))
