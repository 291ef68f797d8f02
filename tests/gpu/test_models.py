"""Whole models on GPU targets: OpenCL (pocl in CI) against ONNX Runtime, CUDA through NVRTC.

The default suite runs small models; the full-size ResNet-50, MobileNetV2 and BERT-base are
`slow` (minutes on pocl's CPU): `scripts/test.sh -m slow tests/gpu`.
"""

from __future__ import annotations

import numpy as np
import pytest
from bench_modules import load_bench
from onnx import helper

import tessera
from tessera.frontend import from_onnx
from tessera.frontend.testing import make_model, run_ort

zoo = load_bench("model_zoo", "gpu_bench_model_zoo")
R = np.random.default_rng(3)
N = helper.make_node


def f32(*shape, scale=1.0):
    return (R.standard_normal(shape) * scale).astype(np.float32)


def _bn(prefix: str, c: int) -> dict:
    return {
        f"{prefix}_s": f32(c, scale=0.1) + 1,
        f"{prefix}_b": f32(c, scale=0.1),
        f"{prefix}_m": f32(c, scale=0.1),
        f"{prefix}_v": np.abs(f32(c)) + 0.5,
    }


def conv_bias_relu():
    nodes = [N("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1]), N("Relu", ["y"], ["out"])]
    feeds = {"x": f32(1, 3, 10, 10)}
    return make_model(nodes, feeds, ["out"], {"w": f32(8, 3, 3, 3), "b": f32(8)}), feeds


def residual_block():
    bn = [f"bn{k}_{p}" for k in (1, 2) for p in "sbmv"]
    nodes = [
        N("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        N("BatchNormalization", ["c1", *bn[:4]], ["n1"]),
        N("Relu", ["n1"], ["r1"]),
        N("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        N("BatchNormalization", ["c2", *bn[4:]], ["n2"]),
        N("Add", ["n2", "x"], ["a"]),
        N("Relu", ["a"], ["out"]),
    ]
    inits = {"w1": f32(8, 8, 3, 3, scale=0.2), "w2": f32(8, 8, 3, 3, scale=0.2)}
    inits |= _bn("bn1", 8) | _bn("bn2", 8)
    feeds = {"x": f32(1, 8, 8, 8)}
    return make_model(nodes, feeds, ["out"], inits), feeds


def small_cnn():
    nodes = [
        N("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
        N("Relu", ["c1"], ["r1"]),
        N("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        N("Conv", ["p1", "w2"], ["c2"], group=4, pads=[1, 1, 1, 1]),
        N("Relu", ["c2"], ["r2"]),
        N("GlobalAveragePool", ["r2"], ["g"]),
        N("Flatten", ["g"], ["f"]),
        N("Gemm", ["f", "wf", "bf"], ["out"], transB=1),
    ]
    inits = {"w1": f32(16, 3, 3, 3), "b1": f32(16), "w2": f32(16, 4, 3, 3)}
    inits |= {"wf": f32(10, 16), "bf": f32(10)}
    feeds = {"x": f32(2, 3, 20, 20)}
    return make_model(nodes, feeds, ["out"], inits), feeds


def transformer_block(seq=5, hidden=16, vocab=11):
    """Embedding gather, layer norm, one attention head (softmax), a GELU MLP, residuals."""
    nodes = [
        N("Gather", ["emb", "ids"], ["h"]),
        N("LayerNormalization", ["h", "g", "beta"], ["h0"], axis=-1),
        N("MatMul", ["h0", "wq"], ["q"]),
        N("MatMul", ["h0", "wk"], ["k"]),
        N("MatMul", ["h0", "wv"], ["v"]),
        N("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        N("MatMul", ["q", "kt"], ["s"]),
        N("Div", ["s", "scale"], ["s2"]),
        N("Softmax", ["s2"], ["p"], axis=-1),
        N("MatMul", ["p", "v"], ["o"]),
        N("Add", ["h0", "o"], ["h2"]),
        N("MatMul", ["h2", "w1"], ["m0"]),
        N("Div", ["m0", "sqrt2"], ["g0"]),
        N("Erf", ["g0"], ["g1"]),
        N("Add", ["g1", "one"], ["g2"]),
        N("Mul", ["m0", "g2"], ["g3"]),
        N("Mul", ["g3", "half"], ["g4"]),
        N("MatMul", ["g4", "w2"], ["m1"]),
        N("Add", ["h2", "m1"], ["out"]),
    ]
    inits = {"emb": f32(vocab, hidden), "g": f32(hidden) + 1, "beta": f32(hidden)}
    inits |= {n: f32(hidden, hidden, scale=0.3) for n in ("wq", "wk", "wv")}
    inits |= {"w1": f32(hidden, 4 * hidden, scale=0.3), "w2": f32(4 * hidden, hidden, scale=0.3)}
    inits |= {n: np.array(v, np.float32) for n, v in (("scale", 4), ("sqrt2", 2**0.5))}
    inits |= {"one": np.array(1, np.float32), "half": np.array(0.5, np.float32)}
    feeds = {"ids": R.integers(0, vocab, (2, seq)).astype(np.int64)}
    return make_model(nodes, feeds, ["out", "p"], inits), feeds


graph_models = {
    "conv_bias_relu": conv_bias_relu,
    "small_cnn": small_cnn,
    "residual_block": residual_block,
    "transformer_block": transformer_block,
}


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


def test_random_ops_draw_what_the_cpu_draws_run_for_run(cl_dev):
    """The run counter (Note [random call counter]) on the GPU module: hidden, advanced per
    run, and the same Philox values as llvm's for the same run index."""
    nodes = [helper.make_node("RandomUniform", [], ["u"], shape=[7, 9], seed=3.0),
             helper.make_node("Bernoulli", ["p"], ["b"], seed=4.0)]  # fmt: skip
    p = np.linspace(0, 1, 50, dtype=np.float32)
    model = make_model(nodes, {"p": p}, ["u", "b"], opset=15)
    gpu = _build(model, "opencl")["default"](cl_dev)
    cpu = tessera.runtime.GraphModule(_build(model, "llvm")["default"](tessera.cpu(0)))
    assert gpu.get_input_info() == ({"p": (50,)}, {"p": "float32"})
    runs = []
    for _ in range(2):
        gpu.run(p=p)
        want = cpu(p)
        for k, expected in enumerate(want):
            np.testing.assert_array_equal(gpu.get_output(k).numpy(), expected)
        runs.append(want[0])
    assert not np.array_equal(runs[0], runs[1])
