"""Shared by the micro tests: a small CNN (conv, depthwise conv, pooling, dense, softmax) built
with onnx.helper, compiled once per CPU for target "c -device=micro"."""

from __future__ import annotations

import functools

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera

INPUT_SHAPE = (1, 2, 8, 8)


def small_cnn() -> onnx.ModelProto:
    rng = np.random.default_rng(0)

    def init(name, shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.5, name)

    inits = [
        init("w1", (4, 2, 3, 3)),
        init("b1", (4,)),
        init("w2", (4, 1, 3, 3)),
        init("b2", (4,)),
        init("w3", (3, 4)),
        init("b3", (3,)),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="dw", group=4, pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["p"], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "w3", "b3"], ["g"], name="fc", transB=1),
        helper.make_node("Softmax", ["g"], ["y"], name="softmax", axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "small_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(INPUT_SHAPE))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


@functools.cache
def compiled(mcpu: str = "cortex-m4"):
    """The small CNN compiled for `mcpu` (a MicroModelFactory), built once per test run."""
    mod, params = tessera.frontend.from_onnx(small_cnn(), {"x": INPUT_SHAPE})
    target = f"c -device=micro -mcpu={mcpu}"
    return tessera.build(mod, target=target, params=params)


def sample_input(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(INPUT_SHAPE).astype(np.float32)


def host_output(lib, x: np.ndarray) -> np.ndarray:
    from tessera.runtime import GraphModule, cpu

    m = GraphModule(lib["default"](cpu(0)))
    m.set_input("x", x)
    m.run()
    return m.get_output(0).numpy().copy()


@pytest.fixture(scope="module")
def lib():
    return compiled("cortex-m4")


# the helpers as fixtures (tests cannot import conftest under --import-mode=importlib)
@pytest.fixture(name="compiled")
def compiled_fixture():
    return compiled


@pytest.fixture(name="sample_input")
def sample_input_fixture():
    return sample_input


@pytest.fixture(name="host_output")
def host_output_fixture():
    return host_output


@pytest.fixture(name="small_cnn")
def small_cnn_fixture():
    return small_cnn
