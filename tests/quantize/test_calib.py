"""Calibration accuracy: the MSE-optimal activation range, and bias correction (Note [bias
correction] in tessera/quantize/__init__.py) folded into the integer compensation."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera.frontend import from_onnx
from tessera.quantize import QConfig, quantize, sqnr_db
from tessera.quantize.calibrate import Observer, activation_params, choose_range
from tessera.runtime import GraphModule, cpu
from tessera.transform import PassContext


def fake_quantize(x, lo, hi, dtype):
    scale, zp = activation_params(lo, hi, dtype)
    lo_q, hi_q = (0, 255) if dtype == "uint8" else (-127, 127)
    q = np.clip(np.round(x / scale) + zp, lo_q, hi_q)
    return (q - zp) * scale


def observed(x):
    obs = Observer()
    obs.update_range(x)
    obs.update_hist(x)
    return obs


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("tail", ["laplace", "relu_outlier"])
def test_mse_range_minimizes_the_error(dtype, tail):
    rng = np.random.default_rng(3)
    if tail == "laplace":  # signed, heavy tails
        x = rng.laplace(size=200_000)
    else:  # a ReLU output with a few far outliers
        x = np.maximum(rng.standard_normal(200_000), 0)
        x[:20] = 40.0
    obs = observed(x)
    err = {m: np.mean((x - fake_quantize(x, *choose_range(obs, m), dtype)) ** 2)
           for m in ("minmax", "percentile", "entropy", "mse")}  # fmt: skip
    assert err["mse"] <= min(err.values()) * 1.001, err
    # against a brute-force search over symmetric thresholds on the data itself
    absmax = np.abs(x).max()
    lo0, hi0 = min(x.min(), 0.0), max(x.max(), 0.0)
    best = min(np.mean((x - fake_quantize(x, max(lo0, -t), min(hi0, t), dtype)) ** 2)
               for t in np.linspace(absmax / 64, absmax, 400))  # fmt: skip
    assert err["mse"] <= best * 1.05


def test_mse_range_of_a_gaussian():
    x = np.random.default_rng(4).standard_normal(400_000)
    lo, hi = choose_range(observed(x), "mse", dtype="int8")
    assert 3.3 < hi < 4.5 and lo == -hi  # 8-bit MSE-optimal clip of N(0, 1): about 4 sigma


def biased_conv():
    """One conv whose int8 weights all round the same way: each weight is 1.56 steps of its
    channel's scale (max |w| / 127), rounded to 2, so every output is off by a positive sum."""
    w = np.full((4, 8, 3, 3), 1.56 / 127, np.float32)
    w[:, 0, 0, 0] = 1.0
    w[1] *= -1
    return conv(w)


def conv(w, shape=(1, 8, 10, 10)):
    """One 3x3 conv (padding 1) of the weight `w` over an input of `shape`."""
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], name="conv")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [shape[0], w.shape[0],
                                                                *shape[2:]])],
        [numpy_helper.from_array(w, "w")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return from_onnx(model)


def run(mod, x, params=None):
    with PassContext(opt_level=3):
        lib = tessera.build(mod, target="llvm", params=params)
    m = GraphModule(lib["default"](cpu(0)))
    m.set_input("x", x)
    m.run()
    return m.get_output(0).numpy()


def test_bias_correction_removes_the_mean_error():
    mod, params = biased_conv()
    rng = np.random.default_rng(5)
    feeds = [{"x": (0.5 + rng.random((1, 8, 10, 10))).astype(np.float32)} for _ in range(4)]
    x = (0.5 + rng.random((1, 8, 10, 10))).astype(np.float32)
    want = run(mod, x, params)
    mean_err, db = {}, {}
    for fix in (False, True):
        # rounding to nearest (GPTQ would spread the rounding and remove part of the offset)
        cfg = QConfig(bias_correction=fix, keep_float_below_db=0, target_sqnr_db=None,
                      keep_float_inputs=False, weight_rounding="nearest")  # fmt: skip
        result = quantize(mod, params, feeds, cfg)
        got = run(result.mod, x)
        mean_err[fix] = np.abs((want - got).mean(axis=(0, 2, 3))).max()
        db[fix] = sqnr_db(want, got)
        ops = [c.op.name for c in result.mod["main"].body]
        assert ops.count("qnn.conv2d") == 1 and "nn.conv2d" not in ops
        # uint8 data from zero: the only compensation is the correction, folded into it
        assert ("subtract" in ops) == fix
    assert mean_err[True] < mean_err[False] / 10, mean_err
    assert db[True] > db[False] + 6, db


def test_bias_correction_report_and_samples():
    mod, params = biased_conv()
    rng = np.random.default_rng(6)
    feeds = [{"x": (0.5 + rng.random((1, 8, 10, 10))).astype(np.float32)} for _ in range(3)]
    on = quantize(
        mod,
        params,
        feeds,
        QConfig(
            correction_samples=2,
            keep_float_below_db=0,
            target_sqnr_db=None,
            keep_float_inputs=False,
            weight_rounding="nearest",
        ),  # fmt: skip
    )
    off = quantize(
        mod,
        params,
        feeds,
        QConfig(
            bias_correction=False,
            keep_float_below_db=0,
            target_sqnr_db=None,
            keep_float_inputs=False,
            weight_rounding="nearest",
        ),  # fmt: skip
    )
    # the report's per-layer SQNR is of the corrected layer
    assert on.report[0].sqnr_db > off.report[0].sqnr_db + 3


def test_mse_calibration_end_to_end():
    mod, params = conv(np.random.default_rng(8).standard_normal((4, 8, 3, 3)).astype("float32"))
    rng = np.random.default_rng(7)
    feeds = [{"x": rng.standard_normal((1, 8, 10, 10)).astype(np.float32)} for _ in range(4)]
    x = rng.standard_normal((1, 8, 10, 10)).astype(np.float32)
    result = quantize(
        mod,
        params,
        feeds,
        QConfig(
            calibrate="mse", keep_float_below_db=0, target_sqnr_db=None, keep_float_inputs=False
        ),
    )
    assert sqnr_db(run(mod, x, params), run(result.mod, x)) > 30


def test_layers_reading_a_model_input_stay_float_by_default():
    mod, params = conv(np.random.default_rng(9).standard_normal((4, 8, 3, 3)).astype("float32"))
    feeds = [{"x": np.random.default_rng(10).random((1, 8, 10, 10), dtype=np.float32)}]
    result = quantize(mod, params, feeds, QConfig(keep_float_below_db=0, target_sqnr_db=None))
    assert [r.quantized for r in result.report] == [False] and "qnn" not in str(result.mod)


def test_a_layer_behind_an_explicit_pad_of_the_input_stays_float():
    w = np.random.default_rng(11).standard_normal((4, 8, 3, 3)).astype(np.float32)
    pads = np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)
    graph = helper.make_graph(
        [helper.make_node("Pad", ["x", "pads"], ["p"]),
         helper.make_node("Conv", ["p", "w"], ["c"], name="stem"),
         helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("Conv", ["r", "w2"], ["y"], name="next")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 10, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(pads, "pads"),
         numpy_helper.from_array(w[:, :4], "w2")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    mod, params = from_onnx(model)
    feeds = [{"x": np.random.default_rng(12).random((1, 8, 10, 10), dtype=np.float32)}]
    result = quantize(mod, params, feeds, QConfig(keep_float_below_db=0, target_sqnr_db=None))
    assert [(r.name, r.quantized) for r in result.report] == [("stem", False), ("next", True)]
