"""tessera.quantize's cross-layer equalization (equalize.py): which values form channel classes,
that the equalized float function equals the original, that each quantized value's channels
then span one range, and that it raises int8 accuracy where channel ranges differ; the SQNR
report and QConfig's fields."""

import dataclasses
import math

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera.frontend import from_onnx
from tessera.quantize import (
    QConfig,
    _equalized,
    _prepare,
    calibrate,
    equalize,
    quantize,
    sqnr_db,
)
from tessera.runtime import GraphModule, cpu
from tessera.transform import PassContext


def uneven_net():
    """conv-bias (linear), zero Pad, depthwise conv-ReLU6, a 1x1 conv into a residual add,
    max-pool, a 3x3 conv-ReLU, global pool, gemm; the first conv's output channels span 1/100
    to 1 of its widest, and the depthwise conv reads each with a weight in inverse proportion
    (as after a folded batch-norm)."""
    rng = np.random.default_rng(7)

    def t(name, *shape, s=1.0):
        return numpy_helper.from_array((rng.standard_normal(shape) * s).astype(np.float32), name)

    spread = (10.0 ** rng.uniform(-2, 0, 8)).astype(np.float32)
    w1 = rng.standard_normal((8, 4, 1, 1)).astype(np.float32) * spread.reshape(-1, 1, 1, 1) * 3
    wd = rng.standard_normal((8, 1, 3, 3)).astype(np.float32) / spread.reshape(-1, 1, 1, 1)
    wd *= rng.uniform(0.01, 0.05, (8, 1, 1, 1)).astype(np.float32)  # ReLU6 ranges 0-4
    inits = [
        numpy_helper.from_array(w1, "w1"), t("b1", 8, s=0.01), numpy_helper.from_array(wd, "wd"),
        t("bd", 8),
        t("w3", 6, 8, 1, 1, s=0.5), t("b3", 6), t("w4", 6, 6, 1, 1, s=0.5), t("b4", 6),
        t("w5", 8, 6, 3, 3, s=0.3), t("b5", 8), t("fc", 5, 8), t("fb", 5),
        numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "pads"),
        numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
        numpy_helper.from_array(np.array(6.0, np.float32), "hi"),
    ]  # fmt: skip
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w1", "b1"], ["c1"], name="conv1"),
        n("Pad", ["c1", "pads"], ["p1"]),
        n("Conv", ["p1", "wd", "bd"], ["cd"], group=8, name="dw"),
        n("Clip", ["cd", "lo", "hi"], ["rd"]),
        n("Conv", ["rd", "w3", "b3"], ["c3"], name="project"),
        n("Conv", ["c3", "w4", "b4"], ["c4"], name="conv4"),
        n("Add", ["c3", "c4"], ["a"]),
        n("MaxPool", ["a"], ["mp"], kernel_shape=[2, 2], strides=[2, 2]),
        n("Conv", ["mp", "w5", "b5"], ["c5"], pads=[1, 1, 1, 1], name="conv5"),
        n("Relu", ["c5"], ["r5"]),
        n("GlobalAveragePool", ["r5"], ["gp"]),
        n("Flatten", ["gp"], ["f"]),
        n("Gemm", ["f", "fc", "fb"], ["y"], transB=1, name="fc"),
    ]
    graph = helper.make_graph(
        nodes, "uneven", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 10, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])], inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def feeds(n, seed=0):
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((1, 4, 10, 10)).astype(np.float32)} for _ in range(n)]


def run(mod, feed, params=None):
    with PassContext(opt_level=3):
        lib = tessera.build(mod, target="llvm", params=params or {})
    m = GraphModule(lib["default"](cpu(0)))
    m.set_input("x", feed["x"])
    m.run()
    return m.get_output(0).numpy()


@pytest.fixture(scope="module")
def net():
    mod, params = from_onnx(uneven_net())
    return _prepare(mod, params)


def _names(func, cls):
    return sorted(",".join(func.body[k].span) for k in cls.readers)


def test_channel_classes(net):
    func = net["main"]
    classes = equalize.channel_classes(func)
    # conv1's padded output (read by dw), dw's ReLU6 output (read by project), the residual
    # stream (project + conv4 into the add and the max-pool; read by conv4 and conv5); conv5's
    # output goes to the global pool, so it is no class
    assert sorted(_names(func, c)[0] for c in classes) == ["conv4", "dw", "project"]
    stream = next(c for c in classes if "conv4" in _names(func, c))
    assert _names(func, stream) == ["conv4", "conv5"] and len(stream.producers) == 2
    assert [_names(func, c)[0] for c in classes if c.rectified] == ["project"]


def test_equalized_function_equals_the_original(net):
    func = net["main"]
    calib = feeds(4)
    eq, count = _equalized(func, calib, QConfig(equalize_rectified=True), "llvm")
    assert count == 3
    assert eq is not func
    text = str(eq)
    assert "minimum(" in text and "clip(" not in text  # ReLU6 as a per-channel minimum
    before = {c.name: c.array for c in func.constants}
    changed = [c for c in eq.constants if c.name not in before]
    assert len(changed) >= 8  # five conv weights, biases, the clip's bounds
    for feed in feeds(3, seed=1):
        want = run(net, feed)
        got = run(tessera.ir.module.IRModule({"main": eq}), feed)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_equalized_channels_span_one_range(net):
    func = net["main"]
    calib = feeds(4)
    floor, power = 1 / 64, 1.0
    eq, count = _equalized(func, calib, QConfig(equalize_floor=floor, equalize_power=power), "llvm")
    assert count == 2  # the ReLU6 output is left alone (Note [sparse channels])
    for cls in equalize.channel_classes(func):
        if cls.rectified:
            continue
        values = cls.quantized(func)  # the equalized function defines the same values
        before = calibrate.channel_absmax(calibrate.compile_probe(func, values, "llvm"), calib)
        after = calibrate.channel_absmax(calibrate.compile_probe(eq, values, "llvm"), calib)
        top = np.max(before, axis=0)  # the class's scale: the max over its values
        s = np.maximum((top / top.max()) ** power, floor)
        for r0, r1 in zip(before, after, strict=True):
            np.testing.assert_allclose(r1, r0 / s, rtol=1e-4, atol=1e-6)
        if len(values) == 1:  # every channel above the floor reaches the widest one's range
            wide = top >= floor * top.max()
            assert wide.sum() < len(top) or floor * top.max() <= top.min()
            np.testing.assert_allclose(after[0][wide], top.max(), rtol=1e-4)


def test_channel_scales():
    s = equalize.channel_scales(np.array([4.0, 2.0, 0.0, 0.01]), 1 / 64)
    np.testing.assert_allclose(s, [1.0, 0.5, 1 / 64, 1 / 64])
    s = equalize.channel_scales(np.array([4.0, 1.0, 0.0]), 1 / 64, power=0.5)
    np.testing.assert_allclose(s, [1.0, 0.5, 1 / 64])
    assert np.all(equalize.channel_scales(np.zeros(3), 0.1) == 1)


def test_equalization_raises_int8_accuracy(net):
    mod, params = from_onnx(uneven_net())
    calib, check = feeds(8), feeds(4, seed=2)
    db = {}
    for on in (False, True):
        cfg = QConfig(
            equalize=on, keep_float_inputs=False, keep_float_below_db=0, target_sqnr_db=None
        )
        result = quantize(mod, params, calib, cfg)
        assert all(r.quantized for r in result.report)
        noise = [sqnr_db(run(mod, f, params), run(result.mod, f)) for f in check]
        db[on] = float(np.mean(noise))
    # conv1's channels differ 100x: one uint8 scale leaves the narrow ones a few levels
    assert db[True] > db[False] + 3, db


def test_sqnr_report():
    x = np.linspace(-1, 1, 1000).astype(np.float32)
    assert sqnr_db(x, x) == math.inf
    noise = np.where(np.arange(1000) % 2, 0.01, -0.01).astype(np.float32)
    want = 10 * math.log10(np.sum(x.astype(np.float64) ** 2) / (1000 * 0.01**2))
    assert sqnr_db(x, x + noise) == pytest.approx(want, abs=1e-3)
    mod, params = from_onnx(uneven_net())
    result = quantize(mod, params, feeds(4), QConfig())
    text = str(result)
    assert "equalized 2 channel classes" in text
    assert [r.name for r in result.report] == ["conv1", "dw", "project", "conv4", "conv5", "fc"]
    assert not result.report[0].quantized  # reads the model input (keep_float_inputs)
    for r in result.report:
        assert r.sqnr_db > 15 and f"{r.sqnr_db:>8.1f}" in text


def test_qconfig_round_trips():
    cfg = QConfig(calibrate="mse", equalize=False, equalize_floor=0.1, equalize_power=1.0,
                  equalize_rectified=True, weight_search=False, skip=("a", "b"))  # fmt: skip
    assert QConfig(**dataclasses.asdict(cfg)) == cfg
    assert dataclasses.replace(cfg, equalize=True).equalize and cfg.equalize is False
    d = QConfig()
    assert d.equalize and not d.equalize_rectified and d.weight_search
    assert (d.equalize_floor, d.equalize_power, d.equalize_rectified_floor) == (1 / 64, 0.5, 0.25)


def test_rectified_classes_keep_their_floor(net):
    # a ReLU6 output equalized (equalize_rectified) gets scales of at least its own floor, so
    # a channel quiet on the calibration feeds keeps headroom (Note [sparse channels]); the
    # linear classes keep theirs
    func = net["main"]
    calib = feeds(4)
    cfg = QConfig(equalize_rectified=True, equalize_power=1.0, equalize_rectified_floor=0.5)
    eq, count = _equalized(func, calib, cfg, "llvm")
    assert count == 3
    (cls,) = [c for c in equalize.channel_classes(func) if c.rectified]
    values = cls.quantized(func)
    before = calibrate.channel_absmax(calibrate.compile_probe(func, values, "llvm"), calib)[0]
    after = calibrate.channel_absmax(calibrate.compile_probe(eq, values, "llvm"), calib)[0]
    s = np.maximum(before / before.max(), 0.5)
    assert s.min() == 0.5 and s.max() == 1.0  # the floor binds on some channel, not on all
    np.testing.assert_allclose(after, before / s, rtol=1e-4, atol=1e-6)
    for feed in feeds(2, seed=1):
        want = run(net, feed)
        got = run(tessera.ir.module.IRModule({"main": eq}), feed)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
