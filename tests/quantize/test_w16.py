"""The w16 level (Note [precision levels] in tessera/quantize/sensitivity.py): an 8-bit
activation and the weight split into two int8 weights (Note [16-bit weights by splitting] in
rewrite.py), two passes on the int8 kernels. Each pass is the integer product of the uint8 code
with one int8 weight, bit for bit (convs with pads, strides, groups, depthwise; dense) on llvm
(host), `llvm -mcpu=haswell` and `c`; the whole pass with w16 layers; the budget's choice among
int8, a16, w16 and a16w16."""

import sys
from pathlib import Path

import numpy as np
import pytest

from tessera.graph.builder import GraphBuilder
from tessera.quantize import QConfig, _layer_int8_output, quantize, sqnr_db
from tessera.quantize.rewrite import find_layers, rewrite
from tessera.quantize.sensitivity import LEVELS, PASSES, choose_levels
from tessera.topi import qnn
from tessera.transform import infer_types

sys.path.insert(0, str(Path(__file__).parent))
from test_a16 import (  # noqa: E402
    CONVS,
    NAMES,
    TARGETS,
    _build_run,
    _conv_int64,
    model,  # noqa: F401 (a fixture)
    samples,
)
from test_quantize import ALL, run  # noqa: E402

R = np.random.default_rng(43)
SCALE, ZP = 4.0 / 255, 96  # the grid [-1.5, 2.5]: both ends saturate on the data below


def _one_layer(kind, x, w, **attrs):
    """A graph of one float conv2d / dense of x with the constant w, and its Layer."""
    b = GraphBuilder()
    xv = b.param("x", x.shape, "float32")
    if kind == "conv2d":
        y = b.call("nn.conv2d", xv, b.const(w), **attrs)
    else:
        y = b.call("nn.dense", xv, b.const(w))
    func = infer_types(b.finish([y]))
    return func, find_layers(func, ("nn.conv2d", "nn.dense"), ())[0]


def _passes(kind, x, parts, target, **attrs):
    """qnn.quantize (uint8, SCALE, ZP) then one qnn.conv2d / qnn.dense per int8 weight of
    `parts`, built for target: the int32 accumulators."""
    b = GraphBuilder()
    xq = b.call("qnn.quantize", b.param("x", x.shape, "float32"), scale=SCALE, zero_point=ZP,
                dtype="uint8")  # fmt: skip
    outs = []
    for wq, _ in parts:
        if kind == "conv2d":
            w = b.const(qnn.pack_conv_weight(wq))
            outs.append(b.call("qnn.conv2d", xq, w, **attrs, pad_value=ZP))
        else:
            outs.append(b.call("qnn.dense", xq, b.const(qnn.pack_dense_weight(wq)),
                               units=wq.shape[0]))  # fmt: skip
    return _build_run(b.finish(outs), target, x)


def _code8(x):
    q = np.round(x.astype(np.float32) * (np.float32(1) / np.float32(SCALE)))
    return np.clip(q.astype(np.int64) + ZP, 0, 255)


def _check_split(kind, x, w, target, **attrs):
    func, layer = _one_layer(kind, x, w, **attrs)
    parts = layer.weight_parts(True)
    assert len(parts) == 2 and all(p.dtype == np.int8 for p, _ in parts)
    sums = [wq.astype(np.int64).reshape(wq.shape[0], -1).sum(axis=1) for wq, _ in parts]
    shape = (-1, 1, 1) if kind == "conv2d" else (-1,)
    for got, (wq, _), s in zip(_passes(kind, x, parts, target, **attrs), parts, sums,
                               strict=True):  # fmt: skip
        # the kernel's accumulator: sum code * w over the window, pads at the zero point
        got = got.astype(np.int64) - ZP * s.reshape(shape)
        if kind == "conv2d":
            st, pad, g = attrs["strides"][0], attrs["padding"][0], attrs["groups"]
            want = _conv_int64(_code8(x) - ZP, wq, st, pad, g)
        else:
            want = (_code8(x) - ZP) @ wq.T.astype(np.int64)
        np.testing.assert_array_equal(got, want)
    # the rewrite's w16 layer: the two passes dequantized and added, as the numpy reference
    act = (SCALE, ZP, "uint8")
    new = rewrite(func, [layer], {id(layer.data): act}, split={layer.index})
    ops = [c.op.name for c in new.body]
    assert ops.count(f"qnn.{kind}") == 2 and "qnn.quantize_byte" not in ops
    (out,) = _build_run(new, target, x)
    ref = _layer_int8_output(layer, x, act, split=True)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    return layer, ref


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", CONVS)
def test_conv_w16_passes_are_the_integer_products(target, case):
    c, h, oc, k, stride, pad, groups = case
    x = R.standard_normal((1, c, h, h)).astype(np.float32)
    w = (R.standard_normal((oc, c // groups, k, k)) * 0.2).astype(np.float32)
    attrs = dict(strides=(stride, stride), padding=(pad,) * 4, dilation=(1, 1), groups=groups)
    _check_split("conv2d", x, w, target, **attrs)


@pytest.mark.parametrize("target", TARGETS)
def test_dense_w16_passes_are_the_integer_products(target):
    x = R.standard_normal((2, 37)).astype(np.float32)
    w = (R.standard_normal((20, 37)) * 0.2).astype(np.float32)
    layer, ref = _check_split("dense", x, w, target)
    # w16 removes the weight's rounding: against the float product of the same 8-bit input,
    # far closer than int8's single weight
    act = (SCALE, ZP, "uint8")
    xq = (_code8(x) - ZP).astype(np.float32) * np.float32(SCALE)
    exact = xq @ w.T
    assert sqnr_db(exact, ref) > sqnr_db(exact, _layer_int8_output(layer, x, act)) + 30


def test_w16_layers_in_the_pass(model):  # noqa: F811 (the fixture)
    """weight_bits16 alone: every layer w16 (8-bit activation, two weights: two passes), no
    16-bit code; each layer nearer its float output than as int8."""
    mod, params, feed, want = model
    feeds = samples(8)
    eight = quantize(mod, params, feeds, QConfig(keep_float_below_db=0, **ALL))
    w16 = quantize(mod, params, feeds, QConfig(keep_float_below_db=0, weight_bits16=NAMES,
                                               **ALL))  # fmt: skip
    assert all(r.w16 and not r.a16 and r.level == "w16" and r.method == "w16"
               for r in w16.report), str(w16)  # fmt: skip
    assert " w16" in str(w16)
    ops = [c.op.name for c in w16.mod["main"].body]
    assert ops.count("qnn.conv2d") == 6 and ops.count("qnn.dense") == 2
    assert "qnn.quantize_byte" not in ops
    # each layer's own error loses the weight's rounding (its 8-bit grid stays: on this model
    # the grid dominates, so the output gains little)
    assert all(a.sqnr_db > b.sqnr_db for a, b in zip(w16.report, eight.report, strict=True)), (
        str(eight), str(w16))  # fmt: skip
    db8, db_w16 = (sqnr_db(want, run(r.mod, {}, feed)) for r in (eight, w16))
    assert db_w16 > db8 - 1, (db8, db_w16)


def test_budget_measures_and_may_choose_w16(model):  # noqa: F811 (the fixture)
    """budget_mode="a16" measures each layer alone at every level; the levels it chooses cost
    what their names say; the target is met."""
    mod, params, feed, want = model
    cfg = QConfig(budget_mode="a16", target_sqnr_db=62, keep_float_below_db=0)
    result = quantize(mod, params, samples(8), cfg)
    rows = [r for r in result.report if r.name != "conv1,bn1"]  # the input layer starts a16
    assert all(np.isfinite([r.output16_db, r.output_w16_db, r.output_a16w16_db]).all()
               for r in rows), str(result)  # fmt: skip
    # a split weight removes the weight's rounding: its cost alone is below int8's
    assert all(r.output_w16_db > r.output_db for r in rows), str(result)
    assert all(r.quantized for r in result.report) and result.measured_db >= 62, str(result)
    assert sqnr_db(want, run(result.mod, {}, feed)) > 60


def test_choose_levels_weighs_w16_against_a16():
    assert LEVELS == ("int8", "a16", "a16w16", "w16") and PASSES == (1, 2, 3, 2)
    noise = np.array([4.0, 4.0])
    a16 = np.array([3.0, 1.0])  # layer 0: the weights limit it; layer 1: the activation grid
    a16w16 = np.array([1e-6, 1e-6])
    w16 = np.array([1.0, 3.0])
    levels = [noise, a16, a16w16, w16]
    keep, level = choose_levels(levels, 1000.0, 25.0, [0, 1], upgrade=True)
    assert keep == [] and level == {0: 3, 1: 1}  # each the 2-pass level that removes most
    # a w16 layer reads the 8-bit code: a shared value's noise still counts for it
    groups = [(2.5, [0])]
    keep, level = choose_levels(levels, 1000.0, 23.5, [0, 1], groups, upgrade=True)
    assert keep == [] and level == {0: 1, 1: 1}, level  # a16 drops the group's noise too
    # from w16 or a16 only a16w16 is higher (3 passes); a16 -> w16 is no move
    keep, level = choose_levels(levels, 1000.0, 60.0, [0, 1], start={0: 3, 1: 1},
                                upgrade=True)  # fmt: skip
    assert keep == [] and level == {0: 2, 1: 2}
    keep, level = choose_levels(levels[:2], 1000.0, 40.0, [0, 1], start={0: 1, 1: 1},
                                upgrade=True)  # fmt: skip
    assert sorted(keep) == [0, 1]  # no level above a16 available: kept float


def test_cli_budget_mode(tmp_path, model):  # noqa: F811 (the fixture)
    """`tessera compile --quantize int8 --calibrate data.npz --target-sqnr T --budget-mode a16`:
    no layer float, the levels and passes said, the artifact near fp32; a bad mode refused."""
    import subprocess

    import onnx
    from test_quantize import ROOT, cnn

    from tessera.runtime import GraphModule, load_module

    _, _, feed, want = model
    onnx.save(cnn(), tmp_path / "m.onnx")
    np.savez(tmp_path / "cal.npz", x=np.concatenate([s["x"] for s in samples(8)]))
    cmd = [sys.executable, "-m", "tessera.cli", "compile", str(tmp_path / "m.onnx"), "-o",
           str(tmp_path / "m.so"), "--quantize", "int8", "--calibrate", str(tmp_path / "cal.npz"),
           "--target-sqnr", "62"]  # fmt: skip
    proc = subprocess.run(cmd + ["--budget-mode", "a16"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "quantized 4 of 4 layers to int8 (0 kept float)" in proc.stderr, proc.stderr
    assert "0 float, " in proc.stderr and " passes (" in proc.stderr, proc.stderr
    assert "(target 62)" in proc.stderr
    m = GraphModule(load_module(str(tmp_path / "m.so"))["default"]())
    m.set_input("x", feed["x"])
    m.run()
    assert sqnr_db(want, m.get_output(0).numpy()) > 60
    bad = subprocess.run(cmd + ["--budget-mode", "int4"], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert bad.returncode != 0 and "--budget-mode" in bad.stderr, bad.stderr
