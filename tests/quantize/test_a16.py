"""16-bit activations on the int8 kernels (Note [16-bit activations by splitting] in
tessera/topi/qnn.py, Note [16-bit activations] in tessera/quantize/__init__.py): the two passes
over the bytes of a 16-bit code give the 16-bit product bit for bit (convs with pads, strides,
groups, depthwise; dense; K long enough that 256 times a pass leaves int32) on llvm (host),
`llvm -mcpu=haswell` and `c`; the whole pass with a16 layers, its budget mode, its report."""

import sys
from pathlib import Path

import numpy as np
import pytest

import tessera
from tessera.frontend import from_onnx
from tessera.graph.builder import GraphBuilder
from tessera.graph.op import get_op
from tessera.quantize import QConfig, quantize, sqnr_db
from tessera.quantize.rewrite import find_layers, rewrite
from tessera.quantize.sensitivity import choose_levels, keep_float_for
from tessera.runtime import GraphModule, cpu
from tessera.target import Target
from tessera.topi import qnn
from tessera.transform import PassContext, infer_types

sys.path.insert(0, str(Path(__file__).parent))
from test_quantize import ALL, cnn, run  # noqa: E402

R = np.random.default_rng(41)
TARGETS = ["llvm", "llvm -mcpu=haswell", "c"]


def _target(name):
    t = Target(name)
    if t.kind == "llvm" and not t.is_host:
        pytest.skip(f"this CPU cannot run {name}")
    return t


def _code16(x, scale, zero_point):
    """The uint16 code as an int64 array: saturate(round(x * float32(1 / scale)) + zp)."""
    q = np.round(x.astype(np.float32) * (np.float32(1) / np.float32(scale)))
    return np.clip(q.astype(np.int64) + zero_point, 0, 65535)


def _conv_int64(x, w, stride, pad, groups):
    """sum (x) * w over each window of NCHW int64 data padded with zeros, groups; int64."""
    n, c, h, wd = x.shape
    o, cg, k, _ = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - k) // stride + 1, (wd + 2 * pad - k) // stride + 1
    y = np.zeros((n, o, oh, ow), np.int64)
    per = o // groups
    for oc in range(o):
        g = oc // per
        for ky in range(k):
            for kx in range(k):
                win = xp[:, g * cg : (g + 1) * cg, ky : ky + stride * oh : stride,
                         kx : kx + stride * ow : stride]  # fmt: skip
                y[:, oc] += np.einsum("nchw,c->nhw", win, w[oc, :, ky, kx].astype(np.int64))
    return y


def _build_run(func, target, x):
    with PassContext(opt_level=3):
        lib = tessera.build(infer_types(func), target=_target(target))
    m = GraphModule(lib["default"](cpu(0)))
    m.set_input("x", x)
    m.run()
    return [m.get_output(k).numpy() for k in range(m.get_num_outputs())]


def _two_passes(kind, x, w8, scale, zero_point, target, **attrs):
    """The high and low passes of qnn.quantize_byte + qnn.conv2d / qnn.dense, built for target,
    combined in int64 as 256 * (hi - z_hi) + (lo - z_lo) products."""
    b = GraphBuilder()
    xv = b.param("x", x.shape, "float32")
    z_hi, z_lo = divmod(zero_point, 256)
    outs = []
    for byte, zp in ((1, z_hi), (0, z_lo)):
        part = b.call("qnn.quantize_byte", xv, scale=scale, zero_point=zero_point, byte=byte)
        if kind == "conv2d":
            w = b.const(qnn.pack_conv_weight(w8))
            outs.append(b.call("qnn.conv2d", part, w, **attrs, pad_value=zp))
        else:
            w = b.const(qnn.pack_dense_weight(w8))
            outs.append(b.call("qnn.dense", part, w, units=w8.shape[0]))
    hi, lo = _build_run(b.finish(outs), target, x)
    sums = w8.astype(np.int64).reshape(w8.shape[0], -1).sum(axis=1)
    sums = sums.reshape((-1, 1, 1) if kind == "conv2d" else (-1,))
    return 256 * (hi.astype(np.int64) - z_hi * sums) + (lo.astype(np.int64) - z_lo * sums)


CONVS = [  # (c, h, oc, k, stride, pad, groups)
    (8, 9, 16, 3, 1, 1, 1),  # 3x3, padded: the pad value is z's byte in each pass
    (6, 10, 8, 3, 2, 1, 1),  # strided, channels not a multiple of 4
    (16, 7, 24, 1, 1, 0, 1),  # 1x1
    (16, 6, 32, 3, 1, 1, 2),  # grouped
    (12, 7, 12, 3, 2, 1, 12),  # depthwise, strided
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", CONVS)
def test_conv_split_is_the_16_bit_product(target, case):
    c, h, oc, k, stride, pad, groups = case
    x = R.standard_normal((1, c, h, h)).astype(np.float32) * 2
    w8 = R.integers(-127, 128, (oc, c // groups, k, k)).astype(np.int8)
    scale, zp = 4.0 / 65535, 40000  # the grid [-6.1, 1.9]: both ends saturate
    attrs = dict(strides=(stride, stride), padding=(pad,) * 4, dilation=(1, 1), groups=groups)
    got = _two_passes("conv2d", x, w8, scale, zp, target, **attrs)
    want = _conv_int64(_code16(x, scale, zp) - zp, w8, stride, pad, groups)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("k", [37, 4096])
def test_dense_split_is_the_16_bit_product_past_int32(target, k):
    """K = 4096 with codes near 65535 and weights near 127: the 16-bit sum (~3e10) and 256 times
    the high pass leave int32; the passes themselves do not."""
    x = (R.random((2, k)) * 0.2 + 0.8).astype(np.float32)
    w8 = R.integers(100, 128, (20, k)).astype(np.int8)
    scale, zp = 1.0 / 65535, 3
    got = _two_passes("dense", x, w8, scale, zp, target)
    want = (_code16(x, scale, zp) - zp) @ w8.T.astype(np.int64)
    np.testing.assert_array_equal(got, want)
    if k == 4096:
        assert np.abs(want).max() > 2**31


def test_quantize_byte_reference_rounds_and_saturates():
    x = np.array([-1.0, 0.0, 0.49, 0.5, 1.5, 2.5, 255.5, 65534.6, 7e4], np.float32)
    op = get_op("qnn.quantize_byte")
    hi, lo = (op.evaluate([x], dict(scale=1.0, zero_point=1, byte=b))[0] for b in (1, 0))
    code = 256 * hi.astype(np.int64) + lo
    np.testing.assert_array_equal(code, [0, 1, 1, 1, 3, 3, 257, 65535, 65535])
    with pytest.raises(Exception, match="byte 0 or 1"):
        op.infer_type([tessera.graph.ir.TensorType((3,), "float32")], dict(byte=2))


def samples(n, seed=7):
    rng = np.random.default_rng(seed)
    return [{"x": rng.random((1, 3, 12, 12), dtype=np.float32)} for _ in range(n)]


@pytest.fixture(scope="module")
def model():
    mod, params = from_onnx(cnn())
    feed = samples(1)[0]
    return mod, params, feed, run(mod, params, feed)


NAMES = ("conv1,bn1", "conv2", "conv3", "fc")


def test_a16_layers_improve_the_output_and_print(model):
    mod, params, feed, want = model
    feeds = samples(8)
    eight = quantize(mod, params, feeds, QConfig(keep_float_below_db=0, **ALL))
    wide = quantize(mod, params, feeds, QConfig(keep_float_below_db=0, activation_bits16=NAMES,
                                                **ALL))  # fmt: skip
    assert all(r.a16 and r.quantized for r in wide.report) and not any(r.a16 for r in eight.report)
    ops = [c.op.name for c in wide.mod["main"].body]
    # every layer on the int8 kernels, in two passes; no float conv or dense left
    assert ops.count("qnn.conv2d") == 6 and ops.count("qnn.dense") == 2
    assert ops.count("qnn.quantize_byte") == 8 and "nn.conv2d" not in ops
    text = str(wide.mod)
    assert "byte=1" in text and "byte=0" in text
    assert "a16" in str(wide)
    db8, db16 = (sqnr_db(want, run(r.mod, {}, feed)) for r in (eight, wide))
    assert db16 > db8 + 10, (db8, db16)


def test_16_bit_weights_split_too(model):
    """weight_bits16 and activation_bits16: each layer a16 over two int8 weights, three passes
    on the int8 kernels; the built module gives the numpy reference of the integer
    arithmetic, and more SQNR than a16 alone, whose error here is mostly the int8 weights'."""
    from tessera.quantize import _layer_int8_output

    mod, params, feed, want = model
    feeds = samples(8)
    wide = quantize(mod, params, feeds, QConfig(keep_float_below_db=0, activation_bits16=NAMES,
                                                **ALL))  # fmt: skip
    both = quantize(mod, params, feeds, QConfig(keep_float_below_db=0, weight_bits16=NAMES,
                                                activation_bits16=NAMES, **ALL))  # fmt: skip
    assert all(r.w16 and r.a16 and r.method == "a16w16" for r in both.report), str(both)
    assert "a16w16" in str(both)
    ops = [c.op.name for c in both.mod["main"].body]
    assert ops.count("qnn.conv2d") == 9 and ops.count("qnn.dense") == 3
    db16, db_w16 = (sqnr_db(want, run(r.mod, {}, feed)) for r in (wide, both))
    assert db_w16 > db16 + 6, (db16, db_w16)
    # one layer alone, built, against the int64 reference of its three passes
    b = GraphBuilder()
    x = R.random((1, 16, 12, 12), dtype=np.float32) * 3
    xv = b.param("x", x.shape, "float32")
    w = (R.standard_normal((8, 16, 3, 3)) * 0.1).astype(np.float32)
    y = b.call("nn.conv2d", xv, b.const(w), strides=(2, 2), padding=(1, 1, 1, 1),
               dilation=(1, 1), groups=1)  # fmt: skip
    func = infer_types(b.finish([y]))
    layer = find_layers(func, ("nn.conv2d",), ())[0]
    act = (4.0 / 65535, 1234, "uint16")
    new = rewrite(func, [layer], {id(layer.data): act}, wide={layer.index: act},
                  split={layer.index})  # fmt: skip
    assert [c.op.name for c in new.body].count("qnn.conv2d") == 3
    (got,) = _build_run(new, "llvm", x)
    ref = _layer_int8_output(layer, x, act, split=True)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    assert (
        sqnr_db(_layer_int8_output(layer, x, act), ref)
        < sqnr_db(get_op("nn.conv2d").evaluate([x, w], dict(layer.call.attrs.items()))[0], ref) - 20
    )


def test_nothing_changes_with_the_option_off(model):
    """budget_mode="a16" without a budget and with no layer kept float by a rule, and the
    defaults: the same module, no 16-bit code."""
    mod, params, _, _ = model
    feeds = samples(4)
    a = quantize(mod, params, feeds, QConfig(keep_float_below_db=0, **ALL))
    b = quantize(mod, params, feeds, QConfig(keep_float_below_db=0, budget_mode="a16", **ALL))
    assert str(a.mod) == str(b.mod) and "quantize_byte" not in str(a.mod)


def test_budget_a16_upgrades_before_keeping_float(model):
    mod, params, feed, want = model
    feeds = samples(8)
    cfg = QConfig(budget_mode="a16", target_sqnr_db=62, keep_float_below_db=0)
    result = quantize(mod, params, feeds, cfg)
    rows = {r.name: r for r in result.report}
    # every layer int8 (none float): the first conv reads the model input, a16 in this mode
    # (float by the default rule), and the costliest of the others (the classifier) is a16
    assert all(r.quantized for r in result.report), str(result)
    assert rows["conv1,bn1"].a16 and rows["fc"].a16 and not rows["conv2"].a16, str(result)
    assert rows["fc"].method == "a16" and "/u8" in rows["conv2"].method, str(result)
    # the probe predicts each layer's cost as a16, below its 8-bit one (by less than the grids'
    # 48 dB where the int8 weights' rounding, the same in both, dominates)
    assert all(r.output16_db > r.output_db for r in result.report), str(result)
    assert rows["fc"].output16_db > rows["fc"].output_db + 10, str(result)
    assert result.measured_db >= 62 and sqnr_db(want, run(result.mod, {}, feed)) > 60
    with pytest.raises(ValueError, match="budget_mode"):
        quantize(mod, params, feeds, QConfig(budget_mode="int4"))


def test_choose_levels_upgrades_the_costliest_first():
    noise = np.array([4.0, 1.0, 0.5])
    noise16 = noise / 256**2 * 4  # a16: 48 dB less, here with a floor of the weights'
    levels = [noise, noise16]
    keep, level = choose_levels(levels, 1000.0, 25.0, [0, 1, 2], upgrade=True)
    assert keep == [] and level == {0: 1, 1: 0, 2: 0}
    keep, level = choose_levels(levels, 1000.0, 80.0, [0, 1, 2], upgrade=True)
    assert set(keep) | set(level) == {0, 1, 2} and keep  # a16 everywhere is short of 80 dB
    # a third level (16-bit weights too: 3 passes) is taken where it removes the most per pass
    w16 = np.array([1e-6, np.nan, np.nan])
    keep, level = choose_levels([noise, noise16, w16], 1000.0, 70.0, [0, 1, 2], upgrade=True)
    assert keep == [] and level == {0: 2, 1: 1, 2: 1}
    # without upgrade, the same choice as the float budget
    assert choose_levels(levels, 1000.0, 25.0, [0, 1, 2])[0] == keep_float_for(
        noise, 1000.0, 25.0, [0, 1, 2])  # fmt: skip
