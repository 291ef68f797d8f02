"""Each GPU strategy (topi/gpu) on one ONNX op, compiled for OpenCL (pocl in CI), against ONNX
Runtime: the tiled matmuls, conv2d as an implicit GEMM, and the default schedule's element-wise,
pooling, reduction (cross-thread, and to a scalar), softmax, layer-norm and resize paths."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import tessera
from tessera.frontend import from_onnx
from tessera.frontend.testing import make_model, run_ort

R = np.random.default_rng(11)
N = helper.make_node


def f32(*shape):
    return R.standard_normal(shape).astype(np.float32)


def _case_conv():
    feeds = {"x": f32(2, 5, 13, 11)}
    node = N("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1], strides=[2, 1])
    return [node, N("Relu", ["y"], ["z"])], feeds, ["z"], {"w": f32(20, 5, 3, 3), "b": f32(20)}


def _case_depthwise():
    feeds = {"x": f32(1, 8, 9, 9)}
    node = N("Conv", ["x", "w"], ["y"], group=8, pads=[1, 1, 1, 1])
    return [node], feeds, ["y"], {"w": f32(8, 1, 3, 3)}


def _case_gemm():
    return (
        [N("Gemm", ["x", "w", "b"], ["y"], transB=1)],
        {"x": f32(3, 70)},
        ["y"],
        {
            "w": f32(33, 70),
            "b": f32(33),
        },
    )


def _case_matmul():
    return (
        [N("MatMul", ["a", "b"], ["y"])],
        {"a": f32(2, 3, 20, 40), "b": f32(2, 3, 40, 65)},
        ["y"],
        None,
    )


def _case_matmul_weight():
    return (
        [N("MatMul", ["a", "w"], ["y"]), N("Tanh", ["y"], ["z"])],
        {"a": f32(1, 9, 64)},
        ["z"],
        {"w": f32(64, 96)},
    )


def _case_pool():
    feeds = {"x": f32(1, 4, 12, 12)}
    nodes = [
        N("MaxPool", ["x"], ["m"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        N("AveragePool", ["m"], ["a"], kernel_shape=[2, 2], strides=[2, 2]),
        N("GlobalAveragePool", ["x"], ["g"]),
    ]
    return nodes, feeds, ["a", "g"], None


def _case_reduce():
    feeds = {"x": f32(3, 50, 40)}
    nodes = [
        N("ReduceMean", ["x"], ["mean"], axes=[1, 2], keepdims=1),
        N("ReduceMax", ["x"], ["mx"], axes=[2], keepdims=0),
    ]
    return nodes, feeds, ["mean", "mx"], None


def _case_scalar():
    """Reductions to a scalar (one block), and scalar arithmetic on them (one thread)."""
    feeds = {"x": f32(37, 50), "v": f32(3)}
    nodes = [
        N("ReduceSum", ["x"], ["total"], keepdims=0),
        N("ReduceMax", ["v"], ["vmax"], keepdims=0),
        N("Mul", ["total", "vmax"], ["prod"]),
        N("Less", ["prod", "total"], ["less"]),
    ]
    return nodes, feeds, ["prod", "less"], None


def _case_softmax():
    return [N("Softmax", ["x"], ["y"], axis=-1)], {"x": f32(4, 7, 300)}, ["y"], None


def _case_layer_norm():
    feeds = {"x": f32(2, 6, 96)}
    node = N("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1, epsilon=1e-5)
    return [node], feeds, ["y"], {"g": f32(96), "b": f32(96)}


def _case_resize():
    feeds = {"x": f32(1, 3, 5, 7)}
    node = N("Resize", ["x", "", "scales"], ["y"], mode="linear")
    return [node], feeds, ["y"], {"scales": np.array([1, 1, 2, 1.5], np.float32)}


def _case_elementwise():
    feeds = {"x": f32(2, 3, 17), "y": f32(3, 1)}
    nodes = [
        N("Add", ["x", "y"], ["a"]),
        N("Sigmoid", ["a"], ["s"]),
        N("Mul", ["s", "x"], ["m"]),
        N("Erf", ["m"], ["e"]),
        N("Where", ["c", "e", "x"], ["w"]),
    ]
    return nodes, feeds, ["w"], {"c": R.random((1, 3, 17)) > 0.5}


CASES = {
    "conv2d_relu": _case_conv,
    "depthwise_conv2d": _case_depthwise,
    "dense": _case_gemm,
    "batch_matmul": _case_matmul,
    "matmul_weight_tanh": _case_matmul_weight,
    "pooling": _case_pool,
    "reductions": _case_reduce,
    "scalars": _case_scalar,
    "softmax": _case_softmax,
    "layer_norm": _case_layer_norm,
    "resize": _case_resize,
    "elementwise": _case_elementwise,
}


@pytest.mark.parametrize("name", list(CASES))
def test_op_on_opencl_matches_onnxruntime(cl_dev, name):
    nodes, feeds, outputs, inits = CASES[name]()
    model = make_model(nodes, feeds, outputs, inits)
    mod, params = from_onnx(model)
    lib = tessera.build(mod, target="opencl", params=params)
    m = lib["default"](cl_dev)
    m.run(**feeds)
    for k, want in enumerate(run_ort(model, feeds)):
        got = m.get_output(k).numpy()
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
