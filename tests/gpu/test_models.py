"""Whole models on GPU targets: OpenCL (pocl in CI) against ONNX Runtime, CUDA through NVRTC.

The default suite runs small models; the full-size ResNet-50, MobileNetV2 and BERT-base are
`slow` (minutes on pocl's CPU): `scripts/test.sh -m slow tests/gpu`.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

import tessera
from tessera.frontend import from_onnx
from tessera.frontend.testing import run_ort

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


zoo = _load("gpu_bench_model_zoo", ROOT / "bench" / "model_zoo.py")
graph_models = _load("gpu_test_build_graph", ROOT / "tests" / "test_build_graph.py").MODELS


def _image(model, seed=0):
    inp = model.graph.input[0]
    shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
    return {inp.name: np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}


def _build(model, target):
    mod, params = from_onnx(model)
    return tessera.build(mod, target=target, params=params)


def _check_opencl(model, feeds, dev, rel=1e-4):
    lib = _build(model, "opencl")
    m = lib["default"](dev)
    m.set_input(**feeds)
    m.run()
    expected = run_ort(model, feeds)
    assert m.get_num_outputs() == len(expected)
    for k, e in enumerate(expected):
        got = m.get_output(k).numpy()
        assert got.shape == e.shape and got.dtype == e.dtype
        np.testing.assert_allclose(got, e, rtol=0, atol=rel * max(np.abs(e).max(), 1e-3))
    return lib


def _small_mobilenet():
    model = zoo.mobilenet_v2(0.35, 33, num_classes=10, batch=2)
    return model, _image(model)


def _small_bert():
    model = zoo.bert_encoder(layers=2, hidden=32, heads=4, seq=8, vocab=50, max_position=16)
    return model, zoo.bert_inputs(model, seed=1)


SMALL = {
    **{name: build for name, build in graph_models.items()},
    "mobilenet_v2_small": _small_mobilenet,
    "bert_small": _small_bert,
}
# in the default suite (a few seconds each on pocl); the others are slow (up to 30 s)
QUICK = ("conv_bias_relu", "residual_block", "transformer_block")


@pytest.mark.parametrize(
    "name", [n if n in QUICK else pytest.param(n, marks=pytest.mark.slow) for n in SMALL]
)
def test_small_model_on_opencl_matches_onnxruntime(cl_dev, name):
    model, feeds = SMALL[name]()
    _check_opencl(model, feeds, cl_dev)


def test_compiled_model_exports_and_loads(cl_dev, tmp_path):
    model, feeds = graph_models["residual_block"]()
    lib = _build(model, "opencl")
    lib.export_library(tmp_path / "model.tsgpu")
    loaded = tessera.runtime.load_module(tmp_path / "model.tsgpu")
    assert loaded.num_kernels == lib.num_kernels
    outs = []
    for factory in (lib, loaded):
        m = factory["default"](cl_dev)
        m.run(**feeds)
        outs.append(m.get_output(0).numpy())
    np.testing.assert_array_equal(outs[0], outs[1])
    weights = loaded.get_params()
    assert weights and all(isinstance(w, np.ndarray) for w in weights.values())


def test_weights_are_uploaded_once_and_intermediates_share_one_arena(cl_dev):
    model, feeds = graph_models["small_cnn"]()
    lib = _build(model, "opencl")
    m = lib["default"](cl_dev)
    assert [p.device for p in m.params] == [cl_dev] * len(lib.plan["params"])
    slots = [a for call in lib.plan["calls"] for a in call["args"] if a[0] == "arena"]
    assert slots and all(offset % 256 == 0 for _, offset in slots)
    m.run(**feeds)
    first = m.get_output(0).numpy()
    m.run(**feeds)  # the same buffers again
    np.testing.assert_array_equal(m.get_output(0).numpy(), first)


def test_model_input_errors_name_the_input(cl_dev):
    model, feeds = graph_models["conv_bias_relu"]()
    m = _build(model, "opencl")["default"](cl_dev)
    name = next(iter(feeds))
    with pytest.raises(ValueError, match=f"input '{name}': expected shape"):
        m.set_input(name, np.zeros((1, 2), np.float32))
    with pytest.raises(KeyError, match="no input 'nope'"):
        m.set_input("nope", feeds[name])


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_small_model_compiles_for_cuda(nvrtc, arch):
    for name in ("residual_block",):
        model, _ = graph_models[name]()
        lib = _build(model, f"cuda -arch={arch}")
        assert lib.module.code["cubin"][:4] == b"\x7fELF"
        assert lib.module.source.count("__global__ void") == lib.num_kernels


def test_cuda_model_on_a_machine_without_a_gpu_says_so(nvrtc, tmp_path):
    from tessera.runtime.cuda_device import CUDAUnavailable
    from tessera.runtime.gpu_module import device_api

    try:
        device_api(tessera.cuda(0))
    except CUDAUnavailable:
        pass
    else:
        pytest.skip("this machine has a CUDA GPU")
    model, _ = graph_models["conv_bias_relu"]()
    _build(model, "cuda").export_library(tmp_path / "m.tsgpu")
    lib = tessera.runtime.load_module(tmp_path / "m.tsgpu")
    with pytest.raises(CUDAUnavailable, match="no CUDA driver or GPU"):
        lib["default"](tessera.cuda(0))


# -- full-size models (slow) ---------------------------------------------------------------------


def _full(name):
    if name == "resnet50":
        from tessera.models import light_model

        model = light_model("resnet50")
        return model, _image(model)
    if name == "mobilenet_v2":
        model = zoo.mobilenet_v2(1.0, 224, batch=1)
        return model, _image(model)
    model = zoo.bert_encoder(batch=1, seq=128)  # BERT-base
    return model, zoo.bert_inputs(model)


FULL = ["resnet50", "mobilenet_v2", "bert_base"]


@pytest.mark.slow
@pytest.mark.parametrize("name", FULL)
def test_full_model_on_opencl_matches_onnxruntime(cl_dev, name):
    model, feeds = _full(name)
    _check_opencl(model, feeds, cl_dev)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", FULL)
def test_full_model_compiles_for_cuda(nvrtc, name, arch):
    model, _ = _full(name)
    lib = _build(model, f"cuda -arch={arch}")
    assert lib.module.code["cubin"][:4] == b"\x7fELF" and lib.module.code["arch"] == arch
    assert lib.module.source.count("__global__ void") == lib.num_kernels
