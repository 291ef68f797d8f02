"""Control flow decided at run time on a GPU (OpenCL through pocl): the host runs the plan's
If and Loop calls (runtime/gpu_graph.py), the kernels run on the device; against ONNX Runtime,
and exported and loaded."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera.frontend import from_onnx
from tessera.frontend.testing import run_ort
from tessera.models_control import (
    branch_on_input,
    branch_ruled_out_by_shapes,
    check_greedy_decoding,
    counting_loop,
    counting_loop_feeds,
    greedy_decoder,
)
from tessera.runtime import load_module


def _module(model, dev, target="opencl"):
    mod, params = from_onnx(model)
    lib = tessera.build(mod, target=target, params=params)
    assert any("control" in c for c in lib.plan["calls"])  # decided at run time, not folded
    return lib, lib["default"](dev)


def _run(m, feeds) -> list[np.ndarray]:
    m.run(**feeds)
    return [m.get_output(k).numpy() for k in range(m.get_num_outputs())]


def test_if_on_an_input_value_matches_onnxruntime(cl_dev):
    model = branch_on_input()
    _, m = _module(model, cl_dev)
    rng = np.random.default_rng(0)
    for flag in (1.5, -2.0, 0.0, 3.0):
        x = rng.standard_normal((2, 3)).astype(np.float32)
        feeds = {"x": x, "flag": np.array(flag, np.float32)}
        np.testing.assert_allclose(_run(m, feeds)[0], run_ort(model, feeds)[0], rtol=1e-6)


def test_greedy_decoding_loop_matches_onnxruntime_and_exports(cl_dev, tmp_path):
    """A Loop whose trip count depends on the data, with a scan output of counted rows."""
    model = greedy_decoder()
    lib, m = _module(model, cl_dev)
    loaded = load_module(lib.export_library(tmp_path / "decoder.tsgpu"))["default"](cl_dev)
    rng = np.random.default_rng(1)
    lengths = set()
    for module in (m, loaded):
        sources = [rng.integers(0, 16, 5).astype(np.int64) for _ in range(5)]
        run = lambda src, module=module: _run(module, {"src": src})  # noqa: E731
        lengths |= check_greedy_decoding(run, model, sources)
    assert len(lengths) > 1  # the trip count depends on the data


@pytest.mark.parametrize("with_cond", [True, False])
def test_loop_with_run_time_trip_count_and_condition(cl_dev, with_cond):
    model = counting_loop(with_cond)
    _, m = _module(model, cl_dev)
    for feeds in counting_loop_feeds():
        np.testing.assert_allclose(_run(m, feeds)[0], run_ort(model, feeds)[0], rtol=1e-5)


def test_a_branch_the_shapes_rule_out_fails_clearly_only_when_taken(cl_dev):
    _, m = _module(branch_ruled_out_by_shapes(), cl_dev)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(_run(m, {"c": np.array(True), "x": x})[0], x + 1)
    with pytest.raises(RuntimeError, match="else branch of If .* cannot run at the compiled"):
        _run(m, {"c": np.array(False), "x": x})


@pytest.mark.parametrize("arch", ["sm_90"])
def test_control_flow_models_compile_for_cuda(nvrtc, arch):
    for model in (branch_on_input(), greedy_decoder()):
        mod, params = from_onnx(model)
        lib = tessera.build(mod, target=f"cuda -arch={arch}", params=params)
        assert lib.plan["functions"] and lib.module.kind == "cuda"
