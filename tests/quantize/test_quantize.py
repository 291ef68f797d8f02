"""tessera.quantize: calibration ranges, the rewrite (before/after text), the per-layer report
and keep-float rule, skip lists, and whole models (uint8 and int8 activations) whose int8 output
stays close to the float one (SQNR); the CLI's --quantize int8 --calibrate."""

import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera.frontend import from_onnx
from tessera.quantize import QConfig, quantize, sqnr_db
from tessera.quantize.calibrate import Observer, activation_params, choose_range
from tessera.runtime import GraphModule, cpu, load_module
from tessera.transform import PassContext

R = np.random.default_rng(29)
# conv1 reads the model input: quantized here too; no accuracy budget keeps a layer float
ALL = {"keep_float_inputs": False, "target_sqnr_db": None}
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cnn():
    """conv-bn-relu, a residual conv block, global pool, flatten, gemm: a small ResNet (the
    same weights at every call)."""
    rng = np.random.default_rng(31)

    def t(name, *shape, s=1.0, offset=0.0):
        a = (rng.standard_normal(shape) * s + offset).astype(np.float32)
        return numpy_helper.from_array(a, name)

    inits = [
        t("w1", 16, 3, 3, 3, s=0.3), t("g", 16, s=0.1, offset=1), t("bt", 16, s=0.1),
        t("mu", 16, s=0.1), t("var", 16, s=0.1, offset=1), t("w2", 16, 16, 3, 3, s=0.1),
        t("b2", 16, s=0.1), t("w3", 16, 16, 1, 1, s=0.2), t("fc", 10, 16, s=0.3), t("fb", 10),
    ]  # fmt: skip
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        n("BatchNormalization", ["c1", "g", "bt", "mu", "var"], ["n1"], name="bn1"),
        n("Relu", ["n1"], ["r1"]),
        n("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
        n("Relu", ["c2"], ["r2"]),
        n("Conv", ["r2", "w3"], ["c3"], name="conv3"),
        n("Add", ["c3", "r1"], ["a"]),
        n("Relu", ["a"], ["r3"]),
        n("GlobalAveragePool", ["r3"], ["gp"]),
        n("Flatten", ["gp"], ["f"]),
        n("Gemm", ["f", "fc", "fb"], ["y"], transB=1, name="fc"),
    ]
    graph = helper.make_graph(
        nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 12, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def samples(n, rng=None):
    """n feeds of cnn()'s input, from `rng` (default: this module's R, whose state depends on
    the tests run before)."""
    rng = R if rng is None else rng
    return [{"x": rng.random((1, 3, 12, 12), dtype=np.float32)} for _ in range(n)]


def run(mod, params, feed):
    with PassContext(opt_level=3):
        lib = tessera.build(mod, target="llvm", params=params)
    m = GraphModule(lib["default"](cpu(0)))
    m.set_input("x", feed["x"])
    m.run()
    return m.get_output(0).numpy()


@pytest.fixture(scope="module")
def model():
    mod, params = from_onnx(cnn())
    feed = samples(1)[0]
    return mod, params, feed, run(mod, params, feed)


@pytest.mark.parametrize("method,dtype", [("minmax", "uint8"), ("entropy", "int8")])
def test_quantized_model_stays_close_to_float(model, method, dtype):
    mod, params, feed, want = model
    cfg = QConfig(calibrate=method, activation_dtype=dtype, keep_float_below_db=0, **ALL)
    result = quantize(mod, params, samples(8), cfg)
    ops = [c.op.name for c in result.mod["main"].body]
    assert ops.count("qnn.conv2d") == 3 and "qnn.dense" in ops and "nn.conv2d" not in ops
    assert [r.name for r in result.report] == ["conv1,bn1", "conv2", "conv3", "fc"]
    # KL clips the tails: a layer's own SQNR drops where the end result does not
    assert all(r.sqnr_db > (20 if method == "minmax" else 12) for r in result.report), str(result)
    assert sqnr_db(want, run(result.mod, {}, feed)) >= 25


def test_rewrite_prints_explicit_quantize_and_dequantize(model):
    mod, params, _, _ = model
    text = str(quantize(mod, params, samples(2), QConfig(keep_float_below_db=0, **ALL)).mod)
    for piece in ("qnn.quantize(", "qnn.conv2d(", "qnn.dequantize(", "qnn.dense(", "pad_value="):
        assert piece in text
    assert "nn.conv2d(" not in text.replace("qnn.conv2d(", "")


def test_skip_and_keep_float(model):
    mod, params, _, _ = model
    cfg = QConfig(skip=("conv2",), keep_float_below_db=0, **ALL)
    result = quantize(mod, params, samples(2), cfg)
    ops = [c.op.name for c in result.mod["main"].body]
    assert ops.count("qnn.conv2d") == 2 and ops.count("nn.conv2d") == 1
    result = quantize(mod, params, samples(2), QConfig(keep_float_below_db=1000))
    assert not any(r.quantized for r in result.report)
    assert "qnn" not in str(result.mod)
    assert "kept float" in str(result)


def test_calibration_ranges():
    obs = Observer()
    x = np.concatenate([R.random(100000), [50.0]])  # one outlier far past the rest
    obs.update_range(x)
    obs.update_hist(x)
    assert choose_range(obs, "minmax") == (0.0, 50.0)
    lo, hi = choose_range(obs, "percentile", 99.9)
    assert lo == 0.0 and 0.9 < hi < 1.1
    lo, hi = choose_range(obs, "entropy")  # no fewer bins than levels: 255 of 2048 here
    assert lo == 0.0 and 1.0 <= hi <= 50 * 255 / 2048 + 1e-6
    with pytest.raises(ValueError, match="unknown calibration"):
        choose_range(obs, "median")


def test_activation_params():
    assert activation_params(0.0, 2.55, "uint8") == (pytest.approx(0.01), 0)
    scale, zp = activation_params(-1.0, 3.0, "uint8")
    assert scale == pytest.approx(4 / 255) and zp == 64
    assert activation_params(-2.0, 1.27, "int8") == (pytest.approx(2 / 127), 0)
    assert activation_params(0.0, 0.0, "uint8") == (1.0, 0)


def test_cli_quantize_int8(tmp_path, model):
    _, _, feed, want = model
    onnx.save(cnn(), tmp_path / "m.onnx")
    np.savez(tmp_path / "cal.npz", x=np.concatenate([s["x"] for s in samples(4)]))
    out = tmp_path / "m.so"
    cal = str(tmp_path / "cal.npz")
    cmd = [sys.executable, "-m", "tessera.cli", "compile", str(tmp_path / "m.onnx")]
    cmd += ["--quantize", "int8", "--calibrate", cal, "-o", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "quantized" in proc.stderr
    m = GraphModule(load_module(str(out))["default"](cpu(0)))
    m.set_input("x", feed["x"])
    m.run()
    assert sqnr_db(want, m.get_output(0).numpy()) >= 25


def test_max_pool_runs_on_quantized_values():
    """conv -> relu -> max-pool -> conv: the pool moves after the second conv's quantize
    (exact: quantize is monotone), so it runs on uint8."""
    rng = np.random.default_rng(37)
    w1 = numpy_helper.from_array((rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32), "w1")
    w2 = numpy_helper.from_array((rng.standard_normal((8, 8, 3, 3)) * 0.2).astype(np.float32), "w2")
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        n("Relu", ["c1"], ["r1"]),
        n("MaxPool", ["r1"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        n("Conv", ["p", "w2"], ["y"], pads=[1, 1, 1, 1]),
    ]
    graph = helper.make_graph(
        nodes, "pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 12, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 6, 6])], [w1, w2],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    mod, params = from_onnx(model)
    result = quantize(mod, params, samples(4), QConfig(keep_float_below_db=0, **ALL))
    (pool,) = [c for c in result.mod["main"].body if c.op.name == "nn.max_pool2d"]
    assert str(pool.inputs[0].type.dtype) == "uint8"
    feed = samples(1)[0]
    want = run(mod, params, feed)
    assert sqnr_db(want, run(result.mod, {}, feed)) >= 25


@pytest.mark.parametrize("share", [True, False])
def test_residual_reads_the_int8_copy_when_shared(model, share):
    """The skip of the residual add (r1, quantized for conv2) is read as dequantize(quantize
    (r1)) when shared, as the float r1 otherwise."""
    mod, params, feed, want = model
    result = quantize(mod, params, samples(4), QConfig(keep_float_below_db=0, share=share, **ALL))
    body = result.mod["main"].body
    producer = {id(v): c for c in body for v in c.outputs}
    adds = [c for c in body if c.op.name == "add" and c.inputs[0].type.ndim == 4]
    skip_ops = {producer[id(v)].op.name for c in adds for v in c.inputs if id(v) in producer}
    assert ("qnn.dequantize" in skip_ops) and (("nn.relu" in skip_ops) != share)
    assert sqnr_db(want, run(result.mod, {}, feed)) >= 25


def test_int8_conv_knobs_reach_the_build(model):
    """Random valid configs of every task of the quantized model (the int8 convs' "rows" knobs
    nw and oc_block among them, given to build through `configs=`) give the default build's
    output: the integer kernels are exact whatever their register tile."""
    import random

    from tessera import autotune
    from tessera.topi.strategy import Config

    mod, params, feed, _ = model
    qmod = quantize(mod, params, samples(2), QConfig(keep_float_below_db=0, **ALL)).mod
    target = tessera.Target("llvm")

    sources = []

    def output(configs):
        with PassContext(opt_level=3):
            lib = tessera.build(qmod, target=target, params={}, configs=configs)
        sources.append(lib.get_source())
        m = GraphModule(lib["default"](cpu(0)))
        m.set_input("x", feed["x"])
        m.run()
        return m.get_output(0).numpy()

    with PassContext(opt_level=3):
        tasks = autotune.extract_tasks(qmod, {}, target)
    convs = [t for t in tasks if t.workload.op == "qnn.conv2d"]
    assert convs and all("rows" in t.implementations(target) for t in convs)
    want = output({})
    rng = random.Random(3)
    for _ in range(2):
        configs = {t: t.sample(target, rng) for t in tasks}
        for t in convs:  # the rows kernel, a tile other than the default
            space = t.implementations(target)["rows"]
            default = t.strategy.default(t.workload, target, {"rewrite": False}).knobs()
            others = [v for v in space.enumerate() if v != default]
            configs[t] = Config("rows", rng.choice(others))
        np.testing.assert_allclose(output(configs), want, rtol=1e-5, atol=1e-6)
    # only the int8 convs' tiles given: exact, and other kernels than the default's
    only = {t: configs[t] for t in convs}
    np.testing.assert_array_equal(output(only), want)
    assert sources[-1] != sources[0]
