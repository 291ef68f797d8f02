"""A tiny model for the tuner's tests: a 3x3 conv, a relu, a global pool and a dense."""

import numpy as np
import pytest
from onnx import helper

from tessera.frontend import from_onnx
from tessera.frontend.testing import make_model


def tiny_model():
    r = np.random.default_rng(0)
    w1 = (r.standard_normal((8, 4, 3, 3)) / 6).astype(np.float32)
    w2 = (r.standard_normal((5, 8)) / 3).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "w2"], ["y"], transB=1),
    ]
    return make_model(nodes, {"x": ((1, 4, 8, 8), "float32")}, ["y"], {"w1": w1, "w2": w2})


@pytest.fixture
def tiny():
    """(onnx model, graph module, params, feeds)"""
    model = tiny_model()
    mod, params = from_onnx(model)
    feeds = {"x": np.random.default_rng(1).standard_normal((1, 4, 8, 8)).astype(np.float32)}
    return model, mod, params, feeds
