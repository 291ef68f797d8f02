"""Loaded kernel libraries are closed when nothing uses them (Note [library handles] in
tessera/runtime/module.py): a process that loads many models does not keep every one mapped."""

import gc

import numpy as np
import pytest
from onnx import helper

import tessera
from tessera.frontend import from_onnx
from tessera.frontend.testing import make_model
from tessera.runtime import GraphModule, cpu, load_module
from tessera.runtime.module import open_libraries

W = np.linspace(-1, 1, 16, dtype=np.float32).reshape(4, 4)


def _maps() -> int:
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A tiny model with a weight, y = relu(x + w), exported once (the C codegen)."""
    model = make_model(
        [helper.make_node("Add", ["x", "w"], ["s"]), helper.make_node("Relu", ["s"], ["y"])],
        {"x": ((4, 4), "float32")},
        ["y"],
        {"w": W},
    )
    mod, params = from_onnx(model)
    path = tmp_path_factory.mktemp("handles") / "model.so"
    tessera.build(mod, target="c", params=params).export_library(path)
    return path


def _variant(exported, folder, k: int) -> tuple:
    """The model signed with a key of its own: other bytes, so a library file of its own."""
    path, key = folder / f"model{k}.so", f"key {k}"
    load_module(exported).export_library(path, key=key)  # a loaded model is resealed, not linked
    return path, key


def _run(path, key) -> np.ndarray:
    m = GraphModule(load_module(path, key=key)["default"](cpu(0)))
    x = np.full((4, 4), 0.25, np.float32)
    m.set_input("x", x)
    m.run()
    return m.get_output(0).numpy()


def test_loading_many_models_does_not_keep_every_library_mapped(exported, tmp_path):
    variants = [_variant(exported, tmp_path, k) for k in range(24)]
    gc.collect()
    libraries, maps = open_libraries(), _maps()
    for path, key in variants:
        np.testing.assert_allclose(_run(path, key), np.maximum(0.25 + W, 0), rtol=1e-6)
        gc.collect()
    # each library left open keeps ~5 mappings: 24 of them would add ~120
    assert open_libraries() == libraries
    assert _maps() - maps < 24


def test_a_weight_viewed_in_place_keeps_its_library_open(exported, tmp_path):
    path, key = _variant(exported, tmp_path, 99)
    gc.collect()
    libraries = open_libraries()
    factory = load_module(path, key=key)
    weights = list(factory.get_params().values())  # read-only views of the library's data
    del factory
    gc.collect()
    assert open_libraries() == libraries + 1
    assert any(np.array_equal(w.reshape(W.shape), W) for w in weights if w.size == W.size)
    del weights
    gc.collect()
    assert open_libraries() == libraries
