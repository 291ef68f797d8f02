"""Fixtures of the CLI tests: small ONNX models on disk and a runner of the real command."""

import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import helper

from tessera.frontend.testing import make_model

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def tessera(*args, cwd=None, timeout=300, env=None):
    """Run `python -m tessera.cli ARGS` in a subprocess; returns the CompletedProcess."""
    full_env = {**os.environ, "COLUMNS": "200", **(env or {})}
    full_env.pop("TESSERA_LOG_LEVEL", None)
    return subprocess.run(
        [sys.executable, "-m", "tessera.cli", *map(str, args)],
        cwd=cwd or ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
    )


def small_cnn(batch=1, dynamic=False):
    """conv(+bias) -> relu -> maxpool -> flatten -> gemm -> softmax, random weights."""
    rng = np.random.default_rng(7)
    inits = {
        "w": (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32),
        "b": rng.standard_normal(8).astype(np.float32),
        "fc_w": (rng.standard_normal((10, 8 * 4 * 4)) * 0.1).astype(np.float32),
        "fc_b": rng.standard_normal(10).astype(np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu1"),
        helper.make_node(
            "MaxPool", ["r"], ["p"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]
        ),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["g"], name="fc", transB=1),
        helper.make_node("Softmax", ["g"], ["y"], name="softmax", axis=1),
    ]
    shape = ("N", 3, 8, 8) if dynamic else (batch, 3, 8, 8)
    return make_model(nodes, {"x": (shape, "float32")}, ["y"], inits, opset=13)


@pytest.fixture
def cli():
    """The runner of the real command: cli("compile", path, "-o", out)."""
    return tessera


@pytest.fixture
def cnn_model():
    return small_cnn


@pytest.fixture
def cnn_path(tmp_path):
    path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), str(path))
    return path


@pytest.fixture(scope="session")
def cnn_so(tmp_path_factory):
    """small_cnn compiled once by `tessera compile -q` (tests that change the file copy it)."""
    folder = tmp_path_factory.mktemp("cnn_so")
    model, so = folder / "cnn.onnx", folder / "cnn.so"
    onnx.save(small_cnn(), str(model))
    result = tessera("compile", model, "-o", so, "-q")
    assert result.returncode == 0, result.stderr
    return so


@pytest.fixture
def dynamic_cnn_path(tmp_path):
    path = tmp_path / "cnn_dynamic.onnx"
    onnx.save(small_cnn(dynamic=True), str(path))
    return path
