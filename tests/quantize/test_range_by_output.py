"""Ranges chosen by the model output's error (Note [range by the output] in
tessera/quantize/__init__.py) and the clipping grid ("clipR" methods): the probe's score against
a numpy reference of the conv, and the choice against builds of each candidate."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tessera.frontend import from_onnx
from tessera.quantize import QConfig, _OutputScorer, _prepare, quantize
from tessera.quantize.calibrate import Observer, activation_params, choose_range
from tessera.quantize.rewrite import find_layers

from .test_quantize import run


def one_conv():
    rng = np.random.default_rng(41)
    w = numpy_helper.from_array(rng.standard_normal((6, 4, 3, 3)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], strides=[2, 1])],
        "one", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 9, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 5, 8])], [w],
    )  # fmt: skip
    return from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))


def feeds(n, seed=5):
    """Laplace data with rare far outliers: clipping trades them against rounding."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        x = rng.laplace(size=(1, 4, 9, 8)).astype(np.float32)
        x.flat[rng.integers(0, x.size, 2)] = 30.0
        out.append({"x": x})
    return out


def numpy_conv(x, w):
    """NCHW conv, padding 1, strides (2, 1), by explicit sums over the taps."""
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    o, _, kh, kw = w.shape
    oh, ow = (xp.shape[2] - kh) // 2 + 1, xp.shape[3] - kw + 1
    y = np.zeros((x.shape[0], o, oh, ow))
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, :, i : i + 2 * oh : 2, j : j + ow]
            y += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j].astype(np.float64))
    return y


def test_clip_methods_scale_the_min_max_range():
    obs = Observer()
    obs.update_range(np.array([-2.0, 5.0]))
    assert choose_range(obs, "clip0.5") == (-1.0, 2.5)
    assert choose_range(obs, "clip1") == choose_range(obs, "minmax")
    for bad in ("clip0", "clip1.5", "clipx"):
        with pytest.raises(ValueError, match="clipR"):
            choose_range(obs, bad)


def test_score_is_the_output_error_energy():
    mod, params = one_conv()
    func = _prepare(mod, params)["main"]
    (layer,) = find_layers(func, ("nn.conv2d",), ())
    held = feeds(2)
    scorer = _OutputScorer(func, [layer], held, QConfig(), "llvm")
    wq, sw = layer.quantized_weight()
    wd = wq.astype(np.float64) * sw.astype(np.float64).reshape(-1, 1, 1, 1)
    for lo, hi, dtype in ((-30.0, 30.0, "uint8"), (-4.0, 6.0, "uint8"), (-5.0, 5.0, "int8")):
        sx, zx = activation_params(lo, hi, dtype)
        want = 0.0
        for f in held:
            x = f["x"]
            q_lo, q_hi = (0, 255) if dtype == "uint8" else (-128, 127)
            xd = (np.clip(np.round(x / np.float32(sx)) + zx, q_lo, q_hi) - zx) * np.float32(sx)
            err = numpy_conv(xd, wd) - numpy_conv(x, layer.weight)
            err -= err.mean(axis=(0, 2, 3), keepdims=True)  # bias correction's part
            want += float(np.sum(err**2))
        got = scorer.score([layer], [f["x"] for f in held], (sx, zx, dtype))
        assert got == pytest.approx(want, rel=1e-3)


def test_output_choice_is_the_best_build():
    """Each candidate alone, built and run on the held-out feeds; choose_by="output" among them
    all picks the build with the least output error."""
    mod, params = one_conv()
    calib = feeds(8)  # "auto" holds out the last 2
    held = calib[6:]
    want = [run(mod, params, f) for f in held]
    methods = ("clip1", "clip0.6", "clip0.3", "clip0.1")
    base = dict(keep_float_inputs=False, target_sqnr_db=None, keep_float_below_db=0)

    def error(result):
        return sum(float(np.sum((w - run(result.mod, {}, f)) ** 2))
                   for w, f in zip(want, held, strict=True))  # fmt: skip

    errors = {m: error(quantize(mod, params, calib, QConfig(candidates=(m,), holdout=2, **base)))
              for m in methods}  # fmt: skip
    config = QConfig(candidates=methods, holdout=2, choose_by="output", **base)
    result = quantize(mod, params, calib, config)
    (row,) = result.report
    assert row.method == f"{min(errors, key=errors.get)}/u8", (row.method, errors)
    assert len(set(np.round(list(errors.values()), 3))) == len(methods)  # a real choice
    with pytest.raises(ValueError, match="choose_by"):
        quantize(mod, params, calib, QConfig(choose_by="nope"))
