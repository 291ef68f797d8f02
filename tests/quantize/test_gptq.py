"""Accuracy methods of tessera.quantize: GPTQ weight rounding (Note [GPTQ rounding] in
tessera/quantize/gptq.py) and the per-tensor range choice on held-out feeds (Note [range per
tensor] in tessera/quantize/__init__.py), against numpy references."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tessera.frontend import from_onnx
from tessera.graph.op import get_op
from tessera.quantize import QConfig, quantize, sqnr_db
from tessera.quantize.gptq import HessianAccumulator, conv_patches, gptq_round, output_error
from tessera.quantize.rewrite import quantize_weight

from .test_calib import conv, run


def correlated(rng, n, k, latent=4, noise=0.05):
    """n samples of k inputs that mostly move together (a few latent factors)."""
    return rng.standard_normal((n, latent)) @ rng.standard_normal((latent, k)) + noise * (
        rng.standard_normal((n, k))
    )


def test_conv_patches_match_the_conv():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 6, 9, 10)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 2)).astype(np.float32)
    attrs = dict(strides=(2, 1), padding=(1, 0, 2, 1), dilation=(1, 2), groups=2)
    ref = get_op("nn.conv2d").evaluate([x, w], attrs)[0]  # (2, 4, OH, OW)
    p = conv_patches(x, attrs, (3, 2), 2)  # (P, G, K)
    out = np.einsum("pgk,grk->pgr", p, w.reshape(2, 2, -1)).reshape(2, *ref.shape[2:], 4)
    np.testing.assert_allclose(out.transpose(0, 3, 1, 2), ref, rtol=1e-4, atol=1e-4)


def test_gptq_reduces_the_output_error_on_correlated_inputs():
    rng = np.random.default_rng(1)
    x = correlated(rng, 4000, 48)
    w = rng.standard_normal((16, 48))
    acc = HessianAccumulator("dense", {}, w.shape)
    acc.add(x[:2000])  # the Hessian from one half, the error measured on the other
    near, scale = quantize_weight(w.astype(np.float32))
    q = gptq_round(w, scale, acc.hessian())
    assert q.dtype == np.int8 and np.abs(q.astype(int)).max() <= 127
    test = x[2000:]
    err = {name: np.mean((test @ (w - wq * scale[:, None]).T) ** 2)
           for name, wq in (("nearest", near), ("gptq", q))}  # fmt: skip
    assert err["gptq"] < err["nearest"] / 4, err
    h = acc.hessian()
    assert output_error(w, q * scale[:, None], h) < output_error(w, near * scale[:, None], h)


def test_gptq_is_nearest_rounding_when_inputs_are_uncorrelated():
    rng = np.random.default_rng(2)
    w = rng.standard_normal((8, 12))
    h = np.diag(rng.random(12) + 0.5)[None]  # a diagonal Hessian spreads no error
    near, scale = quantize_weight(w.astype(np.float32))
    np.testing.assert_array_equal(gptq_round(w, scale, h), near)


def test_gptq_depthwise_runs_one_hessian_per_channel():
    rng = np.random.default_rng(3)
    c = 6
    attrs = dict(strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=c)
    # smooth images: neighbouring pixels correlate, as in a real feature map
    base = rng.standard_normal((4, c, 12, 12))
    x = (base + np.roll(base, 1, 2) + np.roll(base, 1, 3) + np.roll(base, (1, 1), (2, 3))) / 2
    w = rng.standard_normal((c, 1, 3, 3))
    acc = HessianAccumulator("conv2d", attrs, w.shape)
    acc.add(x[:2])
    h = acc.hessian()
    assert h.shape == (c, 9, 9)
    near, scale = quantize_weight(w.astype(np.float32))
    q = gptq_round(w, scale, h, groups=c)
    op = get_op("nn.conv2d")
    test = x[2:].astype(np.float32)
    ref = op.evaluate([test, w.astype(np.float32)], attrs)[0]
    err = {name: np.mean((ref - op.evaluate([test, (wq * scale[:, None, None, None])
                                             .astype(np.float32)], attrs)[0]) ** 2)
           for name, wq in (("nearest", near), ("gptq", q))}  # fmt: skip
    assert err["gptq"] < err["nearest"] * 0.8, err


def test_gptq_end_to_end_raises_the_sqnr():
    rng = np.random.default_rng(4)
    # each row has one large weight: the others are a step or two of its scale, where
    # rounding to nearest loses most and correlated inputs let GPTQ compensate
    w = (rng.standard_normal((4, 8, 3, 3)) * 0.02).astype(np.float32)
    w[:, 0, 1, 1] = 1.0

    mix = rng.standard_normal((8, 2))  # eight input channels made of two latent ones

    def feed():
        x = np.einsum("cl,nlhw->nchw", mix, rng.standard_normal((1, 2, 10, 10)))
        return {"x": (x + 0.05 * rng.standard_normal(x.shape)).astype(np.float32)}

    feeds = [feed() for _ in range(8)]
    test = feeds.pop()["x"]
    mod, params = conv(w)
    want = run(mod, test, params)
    db = {}
    for rounding in ("nearest", "gptq"):
        cfg = QConfig(weight_rounding=rounding, keep_float_below_db=0, target_sqnr_db=None,
                      keep_float_inputs=False, weight_search=False,
                      bias_correction=False)  # fmt: skip
        result = quantize(mod, params, feeds, cfg)
        assert [c.op.name for c in result.mod["main"].body].count("qnn.conv2d") == 1
        db[rounding] = sqnr_db(want, run(result.mod, test))
    assert db["gptq"] > db["nearest"] + 3, db


def test_auto_range_chooses_by_held_out_error():
    """One calibration feed has a far outlier: min-max spends the grid on it, every clipping
    method does better, and auto (the choice on held-out feeds) must not pick min-max."""
    rng = np.random.default_rng(6)
    w = rng.standard_normal((4, 8, 3, 3)).astype(np.float32)
    feeds = [{"x": rng.laplace(size=(1, 8, 10, 10)).astype(np.float32)} for _ in range(9)]
    feeds[0]["x"][0, 3, 4, 4] = 300.0
    test = rng.laplace(size=(1, 8, 10, 10)).astype(np.float32)
    mod, params = conv(w)
    want = run(mod, test, params)
    db, chosen = {}, {}
    for method in ("minmax", "auto"):
        cfg = QConfig(
            calibrate=method,
            keep_float_below_db=0,
            target_sqnr_db=None,
            keep_float_inputs=False,
            bias_correction=False,
        )  # the outlier feed would skew the mean
        result = quantize(mod, params, feeds, cfg)
        chosen[method] = result.report[0].method
        db[method] = sqnr_db(want, run(result.mod, test))
    assert chosen["minmax"] == "minmax/u8"
    assert chosen["auto"].split("/")[0] in ("percentile", "mse", "entropy"), chosen
    assert db["auto"] > db["minmax"] + 6, db
    assert "range" in str(result)


@pytest.mark.parametrize("offset", [0.0, 2.5])
def test_auto_activation_dtype(offset):
    """activation_dtype="auto" tries int8 symmetric only for signed data; for data mostly
    positive (offset) uint8's range fits better and is chosen; the graph runs either way."""
    rng = np.random.default_rng(7)
    w = rng.standard_normal((4, 8, 3, 3)).astype(np.float32)
    feeds = [{"x": (rng.standard_normal((1, 8, 10, 10)) + offset).astype(np.float32)}
             for _ in range(6)]  # fmt: skip
    test = (rng.standard_normal((1, 8, 10, 10)) + offset).astype(np.float32)
    mod, params = conv(w)
    cfg = QConfig(
        activation_dtype="auto", keep_float_below_db=0, target_sqnr_db=None, keep_float_inputs=False
    )
    result = quantize(mod, params, feeds, cfg)
    (r,) = result.report
    assert r.method in ("minmax/u8", "minmax/s8")
    if offset:
        assert r.method == "minmax/u8"
    if r.method.endswith("s8"):
        assert r.zero_point == 0
    assert sqnr_db(run(mod, test, params), run(result.mod, test)) > 30


def test_bad_choices_are_refused():
    mod, params = conv(np.ones((4, 8, 3, 3), np.float32))
    feed = [{"x": np.ones((1, 8, 10, 10), np.float32)}]
    with pytest.raises(ValueError, match="weight_rounding"):
        quantize(mod, params, feed, QConfig(weight_rounding="adaround"))
    with pytest.raises(ValueError, match="activation_dtype"):
        quantize(mod, params, feed, QConfig(activation_dtype="int4"))


def depthwise_then_pointwise():
    rng = np.random.default_rng(8)
    dw = numpy_helper.from_array(rng.standard_normal((8, 1, 3, 3)).astype(np.float32), "dw")
    pw = numpy_helper.from_array(rng.standard_normal((4, 8, 1, 1)).astype(np.float32), "pw")
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]),
         helper.make_node("Conv", ["r", "dw"], ["a"], pads=[1, 1, 1, 1], group=8, name="dw"),
         helper.make_node("Conv", ["a", "pw"], ["y"], name="pw")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 10, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 10, 10])],
        [dw, pw],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return from_onnx(model)


@pytest.mark.parametrize(
    "roles, kept",
    [((), set()), (("depthwise",), {"dw"}), (("last",), {"pw"}), (("pointwise",), {"pw"})],
)
def test_keep_float_roles(roles, kept):
    mod, params = depthwise_then_pointwise()
    rng = np.random.default_rng(9)
    feeds = [{"x": rng.standard_normal((1, 8, 10, 10)).astype(np.float32)} for _ in range(3)]
    cfg = QConfig(keep_float_roles=roles, keep_float_below_db=0, target_sqnr_db=None)
    result = quantize(mod, params, feeds, cfg)
    assert {r.name for r in result.report if not r.quantized} == kept
    ops = [c.op.name for c in result.mod["main"].body]
    assert ops.count("qnn.conv2d") == 2 - len(kept) and ops.count("nn.conv2d") == len(kept)
    x = feeds[0]["x"]
    assert sqnr_db(run(mod, x, params), run(result.mod, x)) > 30


def test_gptq_act_order_is_the_permuted_problem():
    """order="act" (Note [GPTQ column order]) rounds the columns by descending diag(H): the same
    as natural order on the columns sorted that way, put back; invariant to how the columns
    come; per group of a grouped conv."""
    rng = np.random.default_rng(7)
    x = correlated(rng, 3000, 24) * np.linspace(0.2, 3.0, 24)  # unequal input energies
    w = rng.standard_normal((2 * 6, 12))  # two groups of 6 rows, 12 columns each
    h = np.stack([x[:, :12].T @ x[:, :12] / 3000, x[:, 12:].T @ x[:, 12:] / 3000])
    _, scale = quantize_weight(w.astype(np.float32))
    got = gptq_round(w, scale, h, groups=2, order="act")
    rows = w.reshape(2, 6, 12)
    for g in range(2):
        perm = np.argsort(-np.diag(h[g]), kind="stable")
        want = gptq_round(rows[g][:, perm], scale[6 * g : 6 * g + 6], h[g][perm][:, perm][None])
        np.testing.assert_array_equal(got.reshape(2, 6, 12)[g][:, perm], want)
        shuffle = rng.permutation(12)  # any column order gives the same rounding
        again = gptq_round(rows[g][:, shuffle], scale[6 * g : 6 * g + 6],
                           h[g][shuffle][:, shuffle][None], order="act")  # fmt: skip
        np.testing.assert_array_equal(again, got.reshape(2, 6, 12)[g][:, shuffle])
    assert not np.array_equal(got, gptq_round(w, scale, h, groups=2))  # a different rounding
    with pytest.raises(ValueError, match="order"):
        gptq_round(w, scale, h, groups=2, order="random")
