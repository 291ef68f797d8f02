"""The int8 kernels (qnn.conv2d, qnn.dense + requantize epilogue) against the numpy references
of the integer arithmetic, on every ISA level they support: VNNI (vpdpbusd), AVX-512BW and AVX2
(the exact vpmaddwd pairs), a generic x86-64 (shifts and multiplies), and the C target."""

import numpy as np
import pytest

import tessera
from tessera import te
from tessera.graph.op import get_op
from tessera.target import Target
from tessera.topi import qnn
from tessera.topi.x86 import int8_conv2d, int8_dense

R = np.random.default_rng(17)
ISAS = {  # target -> instruction its asm must show (None: not checked)
    "llvm -mcpu=cascadelake": "vpdpbusd",
    "llvm -mcpu=skylake-avx512": "vpmaddwd",
    "llvm -mcpu=haswell": "vpmaddwd",
    "llvm -mcpu=x86-64": None,
    "c": None,
}


def _target(name):
    t = Target(name)
    if t.kind == "llvm" and not t.is_host:
        pytest.skip(f"this CPU cannot run {name} (its code is still built by the asm tests)")
    return t


def _data(shape, dtype):
    lo, hi = (0, 256) if dtype == "uint8" else (-128, 128)
    return R.integers(lo, hi, shape).astype(dtype)


CONVS = [  # (c, h, w, oc, k, stride, pad, groups)
    (8, 9, 9, 16, 3, 1, 1, 1),  # 3x3
    (16, 7, 7, 24, 1, 1, 0, 1),  # 1x1 on a 7-wide row (padded vectors)
    (6, 10, 10, 8, 3, 2, 1, 1),  # strided 3x3, channels not a multiple of 4
    (12, 8, 8, 8, 1, 2, 0, 1),  # strided 1x1 (sampled while packing)
    (16, 6, 28, 32, 3, 1, 1, 2),  # grouped, 28-wide rows (16 + 12 lanes)
    (12, 7, 7, 12, 3, 1, 1, 12),  # depthwise
    (8, 11, 20, 8, 3, 2, 1, 8),  # depthwise, strided, a row of 10
    (5, 9, 23, 5, 5, 1, 2, 5),  # depthwise 5x5: two tap words per kernel row, the second partial
]


SLOW = pytest.mark.slow
# every shape on VNNI; on the other ISA levels the 28-wide grouped conv (16 + 12 lanes) and the
# strided depthwise conv by default, the 7-wide 1x1 under -m slow
CONV_RUNS = [("llvm -mcpu=cascadelake", c) for c in CONVS] + [
    pytest.param(t, c, marks=[SLOW] if c is CONVS[1] else [])
    for t in list(ISAS)[1:]
    for c in (CONVS[1], CONVS[4], CONVS[6], CONVS[7])
]


@pytest.mark.parametrize("target,case", CONV_RUNS)
def test_conv2d_requantize_matches_integer_reference(target, case):
    t = _target(target)
    c, h, w, oc, k, stride, pad, groups = case
    xdt = "int8" if groups > 1 else "uint8"
    x8 = _data((1, c, h, w), xdt)
    w4 = qnn.pack_conv_weight(_data((oc, c // groups, k, k), "int8"))
    attrs = dict(strides=(stride, stride), padding=(pad,) * 4, dilation=(1, 1), groups=groups,
                 pad_value=7)  # fmt: skip
    X = te.placeholder(x8.shape, xdt, name="x")
    W = te.placeholder(w4.shape, "int32", name="w")
    S = te.placeholder((oc, 1, 1), "float32", name="s")
    Y = qnn.requantize(qnn.qnn_conv2d(X, W, **attrs), S, zero_point=3, dtype="uint8")
    f = tessera.build(int8_conv2d.schedule_qnn_conv2d([Y], t), [X, W, S, Y], target=t)
    scale = (R.random((oc, 1, 1)) * 2e-3).astype(np.float32)
    y = np.zeros([int(d.value) for d in Y.shape], np.uint8)
    f(x8, w4, scale, y)
    acc = get_op("qnn.conv2d").evaluate([x8, w4], attrs)[0]
    want = get_op("qnn.requantize").evaluate([acc, scale], dict(zero_point=3, dtype="uint8"))[0]
    np.testing.assert_array_equal(y, want)
    if ISAS[target] is not None:  # depthwise too: words of 4 taps (Note [depthwise tap words])
        assert ISAS[target] in f.get_source("asm")


@pytest.mark.parametrize("target", ["llvm -mcpu=cascadelake", "llvm -mcpu=haswell", "c"])
@pytest.mark.parametrize(
    "kernel,stride,dilation", [((3, 3), (1, 2), (2, 1)), ((1, 6), (2, 1), (1, 2))]
)
def test_depthwise_tap_words_dilated_and_strided(target, kernel, stride, dilation):
    """Depthwise tap words (Note [depthwise tap words]) under dilation and unequal strides, a
    1x6 kernel (a full and a half word per row), int8 data and uneven pads: int32 sums exact."""
    t = _target(target)
    c, h, w = 6, 12, 19
    x8 = _data((1, c, h, w), "int8")
    w4 = qnn.pack_conv_weight(_data((c, 1, *kernel), "int8"))
    attrs = dict(strides=stride, padding=(1, 2, 0, 3), dilation=dilation, groups=c,
                 pad_value=200)  # fmt: skip
    X = te.placeholder(x8.shape, "int8", name="x")
    W = te.placeholder(w4.shape, "int32", name="w")
    Y = qnn.qnn_conv2d(X, W, **attrs)
    f = tessera.build(int8_conv2d.schedule_qnn_conv2d([Y], t), [X, W, Y], target=t)
    y = np.zeros([int(d.value) for d in Y.shape], np.int32)
    f(x8, w4, y)
    np.testing.assert_array_equal(y, get_op("qnn.conv2d").evaluate([x8, w4], attrs)[0])


@pytest.mark.parametrize("target", list(ISAS))
@pytest.mark.parametrize(
    "m,k,n,xdt",
    # the last: tiles of several panels with row and column tails (a BERT-like shape, smaller)
    [(1, 64, 48, "uint8"), (5, 37, 20, "int8"), (2, 9, 3, "uint8"), (37, 70, 96, "uint8")],
)
def test_dense_matches_integer_reference(target, m, k, n, xdt):
    t = _target(target)
    x8 = _data((m, k), xdt)
    wp = qnn.pack_dense_weight(_data((n, k), "int8"))
    X = te.placeholder(x8.shape, xdt, name="x")
    W = te.placeholder(wp.shape, "int32", name="w")
    Y = qnn.qnn_dense(X, W, n)
    f = tessera.build(int8_dense.schedule_qnn_dense([Y], t), [X, W, Y], target=t)
    y = np.zeros((m, n), np.int32)
    f(x8, wp, y)
    np.testing.assert_array_equal(y, get_op("qnn.dense").evaluate([x8, wp], {"units": n})[0])
    if ISAS[target] is not None:
        assert ISAS[target] in f.get_source("asm")


def test_requantize_rounds_half_to_even_and_saturates():
    """Every rounding and saturation case of the MLAS requantize: ties to even both ways,
    clamping before rounding at both ends of uint8 and int8, a zero point shifting the range."""
    acc = np.array([1, 3, 5, -1, -3, -5, 510, 511, 512, -512, 100000, -100000], np.int32)
    scale = np.float32(0.5)
    for dtype, zp in (("uint8", 0), ("uint8", 128), ("int8", 0), ("int8", -10)):
        A = te.placeholder(acc.shape, "int32", name="a")
        S = te.placeholder((), "float32", name="s")
        Y = qnn.requantize(A, S, zero_point=zp, dtype=dtype)
        s = te.create_schedule(Y.op)
        f = tessera.build(s, [A, S, Y], target="llvm")
        y = np.zeros(acc.shape, dtype)
        f(acc, np.array(scale), y)
        info = np.iinfo(dtype)
        # numpy: round half to even of acc * scale, then the zero point, saturated
        want = np.clip(np.round(acc.astype(np.float64) * 0.5) + zp, info.min, info.max)
        np.testing.assert_array_equal(y, want.astype(dtype))


@pytest.mark.parametrize("target", list(ISAS))
@pytest.mark.parametrize(
    "shape_a,shape_b,adt,bdt",
    [
        ((2, 5, 13), (2, 13, 20), "uint8", "int8"),
        pytest.param((3, 4, 16), (1, 16, 33), "int8", "uint8", marks=SLOW),
    ],
)
def test_batch_matmul_matches_integer_reference(target, shape_a, shape_b, adt, bdt):
    t = _target(target)
    a, b = _data(shape_a, adt), _data(shape_b, bdt)
    A = te.placeholder(a.shape, adt, name="a")
    B = te.placeholder(b.shape, bdt, name="b")
    Y = qnn.qnn_batch_matmul(A, B)
    f = tessera.build(int8_dense.schedule_qnn_batch_matmul([Y], t), [A, B, Y], target=t)
    y = np.zeros([int(d.value) for d in Y.shape], np.int32)
    f(a, b, y)
    np.testing.assert_array_equal(y, get_op("qnn.batch_matmul").evaluate([a, b], {})[0])
    if ISAS[target] is not None:
        assert ISAS[target] in f.get_source("asm")


@pytest.mark.parametrize("dtype,zp", [("uint8", 0), ("uint8", 100), ("int8", 0), ("int8", -7)])
def test_quantize_ties_and_saturation_match_the_reference(dtype, zp):
    """qnn.quantize compiled against its reference: ties at a power-of-two scale (exact
    products) round to even, values past the range saturate, NaN-free extremes clamp."""
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 1e9, -1e9, 300.0, -300.0, 127.5], np.float32)
    x = x * np.float32(0.25)
    X = te.placeholder(x.shape, "float32", name="x")
    Y = qnn.quantize(X, scale=0.25, zero_point=zp, dtype=dtype)
    f = tessera.build(te.create_schedule(Y.op), [X, Y], target="llvm")
    y = np.zeros(x.shape, dtype)
    f(x, y)
    want = get_op("qnn.quantize").evaluate([x], dict(scale=0.25, zero_point=zp, dtype=dtype))[0]
    np.testing.assert_array_equal(y, want)
    info = np.iinfo(dtype)
    np.testing.assert_array_equal(
        want, np.clip(np.round(x / 0.25) + zp, info.min, info.max).astype(dtype)
    )


PACKED_CONVS = [  # (c, h, w, oc, k, stride, pad)
    (16, 7, 7, 32, 3, 1, 1),  # 7-wide rows: the rule's case
    (6, 10, 10, 20, 3, 2, 1),  # strided, channels not a multiple of 4, oc not of the block
    (12, 8, 8, 16, 1, 2, 0),  # strided 1x1 (sampled while packing)
    (8, 5, 13, 8, 1, 1, 0),  # a row of 13 in two tiles
]


def _block(t) -> int:
    return max(1, min(16, t.vector_lanes("int32"))) if t.kind == "llvm" else 4


def _packed_conv(t, case, xdt, config=None, two_outputs=False):
    from tessera.topi.strategy import Config

    c, h, w, oc, k, stride, pad = case
    x8 = _data((1, c, h, w), xdt)
    w8 = _data((oc, c, k, k), "int8")
    wb = qnn.pack_conv_weight_blocked(w8, _block(t))
    attrs = dict(strides=(stride, stride), padding=(pad,) * 4, dilation=(1, 1), pad_value=5)
    X = te.placeholder(x8.shape, xdt, name="x")
    W = te.placeholder(wb.shape, "int32", name="w")
    S = te.placeholder((oc, 1, 1), "float32", name="s")
    acc = qnn.qnn_conv2d_packed(X, W, channels=oc, **attrs)
    Y = qnn.requantize(acc, S, zero_point=3, dtype="uint8")
    outs = [Y, acc] if two_outputs else [Y]
    cfg = Config("channels", config) if config else None
    s = int8_conv2d.schedule_qnn_conv2d_packed(outs, t, config=cfg)
    f = tessera.build(s, [X, W, S, *outs], target=t)
    scale = (R.random((oc, 1, 1)) * 2e-3).astype(np.float32)
    ys = [np.zeros([int(d.value) for d in o.shape], o.dtype) for o in outs]
    f(x8, wb, scale, *ys)
    want = get_op("qnn.conv2d").evaluate([x8, qnn.pack_conv_weight(w8)], attrs)[0]
    q = get_op("qnn.requantize").evaluate([want, scale], dict(zero_point=3, dtype="uint8"))[0]
    np.testing.assert_array_equal(ys[0], q)
    if two_outputs:
        np.testing.assert_array_equal(ys[1], want)
    # the op's own reference agrees with qnn.conv2d's
    ref = get_op("qnn.conv2d_packed").evaluate([x8, wb], dict(attrs, channels=oc))[0]
    np.testing.assert_array_equal(ref, want)
    return f


PACKED_RUNS = [("llvm -mcpu=cascadelake", c) for c in PACKED_CONVS] + [
    (t, PACKED_CONVS[1]) for t in list(ISAS)[1:]
]


@pytest.mark.parametrize("target,case", PACKED_RUNS)
def test_conv2d_packed_matches_integer_reference(target, case):
    """qnn.conv2d with output channels in vectors ("channels", Note [int8 conv rule]): the
    requantized output bit-exact with the integer reference on every ISA level."""
    t = _target(target)
    f = _packed_conv(t, case, "uint8")
    if ISAS[target] is not None:
        assert ISAS[target] in f.get_source("asm")


@pytest.mark.parametrize(
    "config,two_outputs",
    [({"ow_block": 3, "oc_vectors": 1}, False), ({"ow_block": 7, "oc_vectors": 2}, True)],
)
def test_conv2d_packed_configs_and_a_second_output(config, two_outputs):
    """Other register tiles (a row tail), int8 data, and the int32 product as a second output
    (the product then computed at root, the epilogue reading it back)."""
    t = _target("llvm -mcpu=cascadelake")
    _packed_conv(t, PACKED_CONVS[0], "int8", config, two_outputs)


def test_pack_conv_weight_blocked_round_trips():
    w = _data((20, 6, 3, 3), "int8")
    wb = qnn.pack_conv_weight_blocked(w, 16)
    assert wb.shape == (2, 2, 3, 3, 16)
    np.testing.assert_array_equal(qnn.unpack_conv_weight_blocked(wb, 20, 6), w)
    assert not wb[1, :, :, :, 4:].any()  # output channels past 20: zero weights


@pytest.mark.parametrize("case", [CONVS[0], CONVS[4]])
def test_conv2d_rows_knobs_match_integer_reference(case):
    """The "rows" kernel's knobs nw and oc_block (row tiles with tails, channel tiles not
    dividing the outputs) keep it bit-exact; the strategy's default is its rule."""
    from tessera.topi.strategy import Config, Task, Workload
    from tessera.topi.x86 import int8_strategy  # noqa: F401  (registers the strategy)

    t = _target("llvm -mcpu=cascadelake")
    c, h, w, oc, k, stride, pad, groups = case
    xdt = "int8" if groups > 1 else "uint8"
    x8 = _data((1, c, h, w), xdt)
    w4 = qnn.pack_conv_weight(_data((oc, c // groups, k, k), "int8"))
    attrs = dict(strides=(stride, stride), padding=(pad,) * 4, dilation=(1, 1), groups=groups,
                 pad_value=7)  # fmt: skip
    X = te.placeholder(x8.shape, xdt, name="x")
    W = te.placeholder(w4.shape, "int32", name="w")
    Y = qnn.qnn_conv2d(X, W, **attrs)
    out = [int(d.value) for d in Y.shape]
    wl = Workload("qnn.conv2d", ((x8.shape, xdt), (w4.shape, "int32")),
                  tuple(sorted(attrs.items())), (False, True), tuple(out))  # fmt: skip
    task = Task(wl, "cpu")
    space = task.implementations(t)["rows"]
    lanes, nw, ocb = int8_conv2d.conv_blocking(t, oc, out[3])
    assert space.valid({"nw": nw, "oc_block": ocb})
    assert (space.knobs[0].default, space.knobs[1].default) == (nw, ocb)
    want = get_op("qnn.conv2d").evaluate([x8, w4], attrs)[0]
    picks = {(v["nw"], v["oc_block"]) for v in space.enumerate()}
    for nw, ocb in sorted(picks)[:: max(1, len(picks) // 3)] + [max(picks)]:
        cfg = Config("rows", nw=nw, oc_block=ocb)
        s = int8_conv2d.schedule_qnn_conv2d([Y], t, config=cfg)
        f = tessera.build(s, [X, W, Y], target=t)
        y = np.zeros(out, np.int32)
        f(x8, w4, y)
        np.testing.assert_array_equal(y, want, err_msg=str(cfg))


# -- between blocked int8 activations (qnn.conv2d_nchwc) ------------------------------------------

NCHWC_CONVS = [  # (c, h, w, oc, k, stride, pad, in_block, data dtype)
    (16, 9, 9, 32, 3, 1, 1, 16, "uint8"),  # 3x3, padded
    (32, 7, 7, 16, 1, 1, 0, 16, "uint8"),  # 1x1 on a 7-wide row
    (8, 10, 10, 16, 3, 2, 1, 8, "int8"),  # strided 3x3 (phases), blocks of 8, int8 data
    (12, 8, 8, 16, 1, 2, 0, 4, "uint8"),  # strided 1x1 (sampled while packing), blocks of 4
    (6, 9, 9, 16, 3, 1, 1, None, "uint8"),  # NCHW data in (6 channels: a partial word)
    (16, 7, 7, 16, 1, 1, 0, None, "uint8"),  # NCHW data in, 1x1 (packed per call)
]


def _blocked(x: np.ndarray, block: int | None) -> np.ndarray:
    if block is None:
        return x
    n, c, h, w = x.shape
    return np.ascontiguousarray(x.reshape(n, c // block, block, h, w).transpose(0, 1, 3, 4, 2))


@pytest.mark.parametrize("target", list(ISAS))
@pytest.mark.parametrize("case", NCHWC_CONVS)
def test_conv2d_nchwc_matches_integer_reference(target, case):
    """Blocked int8 data in, the requantized output in the product's blocks (the epilogue's
    per-channel scale blocked too): bit-exact with qnn.conv2d's reference on plain NCHW."""
    t = _target(target)
    c, h, w, oc, k, stride, pad, in_block, xdt = case
    block = _block(t)
    x8 = _data((1, c, h, w), xdt)
    w8 = _data((oc, c, k, k), "int8")
    wb = qnn.pack_conv_weight_blocked(w8, block)
    attrs = dict(strides=(stride, stride), padding=(pad,) * 4, dilation=(1, 1), pad_value=9)
    shape = (1, c, h, w) if in_block is None else (1, c // in_block, h, w, in_block)
    X = te.placeholder(shape, xdt, name="x")
    W = te.placeholder(wb.shape, "int32", name="w")
    S = te.placeholder((1, oc // block, 1, 1, block), "float32", name="s")
    Y = qnn.requantize(qnn.qnn_conv2d_nchwc(X, W, **attrs), S, zero_point=3, dtype="uint8")
    f = tessera.build(int8_conv2d.schedule_qnn_conv2d_packed([Y], t), [X, W, S, Y], target=t)
    scale = (R.random((oc, 1, 1)) * 2e-3).astype(np.float32)
    y = np.zeros([int(d.value) for d in Y.shape], np.uint8)
    f(_blocked(x8, in_block), wb, _blocked(scale[None], block), y)
    acc = get_op("qnn.conv2d").evaluate([x8, qnn.pack_conv_weight(w8)], attrs)[0]
    want = get_op("qnn.requantize").evaluate([acc, scale], dict(zero_point=3, dtype="uint8"))[0]
    np.testing.assert_array_equal(y, _blocked(want, block))
    ref = get_op("qnn.conv2d_nchwc").evaluate([_blocked(x8, in_block), wb], attrs)[0]
    np.testing.assert_array_equal(ref, _blocked(acc, block))  # the op's own reference agrees
    if ISAS[target] is not None:
        assert ISAS[target] in f.get_source("asm")


@pytest.mark.parametrize("target", ["llvm -mcpu=cascadelake", "llvm -mcpu=haswell", "c"])
@pytest.mark.parametrize("case", [CONVS[0], CONVS[4], CONVS[5], CONVS[6]])
def test_nchw_kernels_read_blocked_data(target, case):
    """The NCHW kernels (rows, depthwise tap words) read blocked data as it is (a conv left in
    NCHW inside a blocked int8 region: no layout transform before it), with the NCHW integers."""
    t = _target(target)
    c, h, w, oc, k, stride, pad, groups = case
    block = 4 if c % 8 else 8
    x8 = _data((1, c, h, w), "uint8")
    w4 = qnn.pack_conv_weight(_data((oc, c // groups, k, k), "int8"))
    attrs = dict(strides=(stride, stride), padding=(pad,) * 4, dilation=(1, 1), groups=groups,
                 pad_value=7)  # fmt: skip
    X = te.placeholder((1, c // block, h, w, block), "uint8", name="x")
    W = te.placeholder(w4.shape, "int32", name="w")
    Y = qnn.qnn_conv2d(X, W, **attrs)
    f = tessera.build(int8_conv2d.schedule_qnn_conv2d([Y], t), [X, W, Y], target=t)
    y = np.zeros([int(d.value) for d in Y.shape], np.int32)
    f(_blocked(x8, block), w4, y)
    want = get_op("qnn.conv2d").evaluate([x8, w4], attrs)[0]
    np.testing.assert_array_equal(y, want)
    got = get_op("qnn.conv2d").evaluate([_blocked(x8, block), w4], attrs)[0]
    np.testing.assert_array_equal(got, want)  # the reference takes blocked data too


AVX512_DOTS = [("llvm -mcpu=cascadelake", "vpdpbusd"), ("llvm -mcpu=skylake-avx512", "vpmaddwd")]


@pytest.mark.parametrize("target,instruction", AVX512_DOTS)
def test_conv2d_nchwc_asm_on_avx512_targets(target, instruction):
    """Built (not run: this CPU may lack them) for the AVX-512 levels: blocks of 16 lanes in
    and out, the data words broadcast into the ISA's dot product."""
    t = Target(target)
    X = te.placeholder((1, 2, 7, 7, 16), "uint8", name="x")
    W = te.placeholder((2, 8, 3, 3, 16), "int32", name="w")
    attrs = dict(strides=(1, 1), padding=(1,) * 4, dilation=(1, 1), pad_value=0)
    Y = qnn.qnn_conv2d_nchwc(X, W, **attrs)
    f = tessera.build(int8_conv2d.schedule_qnn_conv2d_packed([Y], t), [X, W, Y], target=t)
    assert instruction in f.get_source("asm")


@pytest.mark.parametrize("target", ["llvm -mcpu=haswell", "c"])
def test_conv2d_nchwc_product_as_a_second_output(target):
    """The blocked int32 product both an output of its group and read by its epilogue (a
    dynamically quantized model's ConvInteger whose product two nodes read): the product is
    tiled once, the epilogue reads it back; it once failed to schedule (the product's stage
    fused again as an element-wise output)."""
    t = _target(target)
    # a product big enough for element-wise stages to go parallel (fuse their outer axes)
    c, h, w, oc, k, stride, pad, in_block, xdt = 16, 16, 16, 32, 3, 1, 1, 16, "uint8"
    block = _block(t)
    x8 = _data((1, c, h, w), xdt)
    w8 = _data((oc, c, k, k), "int8")
    wb = qnn.pack_conv_weight_blocked(w8, block)
    attrs = dict(strides=(stride, stride), padding=(pad,) * 4, dilation=(1, 1), pad_value=9)
    X = te.placeholder((1, c // in_block, h, w, in_block), xdt, name="x")
    W = te.placeholder(wb.shape, "int32", name="w")
    S = te.placeholder((1, oc // block, 1, 1, block), "float32", name="s")
    acc = qnn.qnn_conv2d_nchwc(X, W, **attrs)
    Y = qnn.requantize(acc, S, zero_point=3, dtype="uint8")
    f = tessera.build(int8_conv2d.schedule_qnn_conv2d_packed([Y, acc], t), [X, W, S, Y, acc],
                      target=t)  # fmt: skip
    scale = (R.random((oc, 1, 1)) * 2e-3).astype(np.float32)
    y = np.zeros([int(d.value) for d in Y.shape], np.uint8)
    got = np.zeros([int(d.value) for d in acc.shape], np.int32)
    f(_blocked(x8, in_block), wb, _blocked(scale[None], block), y, got)
    want = get_op("qnn.conv2d").evaluate([x8, qnn.pack_conv_weight(w8)], attrs)[0]
    q = get_op("qnn.requantize").evaluate([want, scale], dict(zero_point=3, dtype="uint8"))[0]
    np.testing.assert_array_equal(got, _blocked(want, block))
    np.testing.assert_array_equal(y, _blocked(q, block))


@pytest.mark.parametrize("case", [(48, 4, 16, 64, 3, 1, 1), (64, 4, 12, 32, 1, 1, 0)])
def test_conv2d_packed_tile_fits_the_registers_of_vpmaddwd_pairs(case):
    """On AVX2 without VNNI each operand of dot_u8i8 takes two registers (Note [int8 pair
    registers]): the channels conv's default tile leaves room for them, so its reduction loop
    keeps every accumulator in a register (the 4 x 2 tile of the FMA rule spilled six)."""
    from tessera.topi.x86.asm import fma_loops, loop_summary

    t = Target("llvm -mcpu=haswell")
    c, h, w, oc, k, stride, pad = case
    X = te.placeholder((1, c, h, w), "uint8", name="x")
    W = te.placeholder(qnn.pack_conv_weight_blocked(np.zeros((oc, c, k, k), np.int8), 8).shape,
                       "int32", name="w")  # fmt: skip
    attrs = dict(strides=(stride, stride), padding=(pad,) * 4, dilation=(1, 1), pad_value=5)
    Y = qnn.qnn_conv2d_packed(X, W, channels=oc, **attrs)
    f = tessera.build(int8_conv2d.schedule_qnn_conv2d_packed([Y], t), [X, W, Y], target=t)
    loops = fma_loops(f.get_source("asm"), "vpmaddwd")
    assert loops
    assert all(loop_summary(body)["stack"] == 0 for body in loops), [loop_summary(b) for b in loops]


# -- depthwise convs as the float conv (Note [float depthwise]) ------------------------------------


def _depthwise_workload(c, k, xdt="uint8", h=9):
    from tessera.topi.strategy import Workload

    attrs = dict(strides=(1, 1), padding=(k // 2,) * 4, dilation=(1, 1), groups=c, pad_value=3)
    out = (1, c, h, h)
    w4 = (c, 1, k, k)
    return Workload("qnn.conv2d", (((1, c, h, h), xdt), (w4, "int32")),
                    tuple(sorted(attrs.items())), (False, True), out)  # fmt: skip


@pytest.mark.parametrize("target", ["llvm -mcpu=cascadelake", "llvm -mcpu=haswell"])
def test_depthwise_default_is_float_between_blocked_activations(target):
    """The depthwise default is "float" where alter_layout asks ("blocked"), on VNNI and AVX2
    alike; the tap words elsewhere (NCHW, or the switch off); kernels past FLOAT_EXACT_TAPS
    taps (float sums no longer exact) keep the tap words; its plan is the float conv with the
    int8 weights as floats."""
    from tessera.topi.strategy import Task
    from tessera.topi.x86 import int8_strategy

    t = Target(target)
    task = Task(_depthwise_workload(16, 3), "cpu")
    assert "float" in task.implementations(t)
    assert task.default(t, {"blocked": True}).impl == "float"
    assert task.default(t, {}).impl == "rows"
    assert task.default(t, {"blocked": True, "float_depthwise": False}).impl == "rows"
    big = 17  # 289 taps > FLOAT_EXACT_TAPS
    assert big * big > int8_strategy.FLOAT_EXACT_TAPS >= 15 * 15
    wide = Task(_depthwise_workload(8, big, h=20), "cpu")
    assert "float" not in wide.implementations(t)
    assert wide.default(t, {"blocked": True}).impl == "rows"
    w8 = _data((16, 1, 3, 3), "int8")
    impl = task.strategy.get("float")
    plan = impl.layout(task.workload, task.default(t, {"blocked": True}), {"blocked": True}, t,
                       qnn.pack_conv_weight(w8))  # fmt: skip
    assert plan["op"] == "nn.conv2d" and plan["pad_value"] == 3
    np.testing.assert_array_equal(plan["weight"], w8.astype(np.float32))
    assert impl.layout(task.workload, task.default(t, {}), {}, t, qnn.pack_conv_weight(w8)) is None


@pytest.mark.parametrize("k,stride,dilation", [(5, 2, 1), (3, 1, 2)])
def test_float_depthwise_built_matches_the_integers(k, stride, dilation):
    """A depthwise int8 conv between blocked int8 convs, built with the float path and with the
    tap words: the same integers as the reference of the integer graph (5x5 strided, dilated;
    int8 data padded with its zero point)."""
    from tessera.graph import parse, run_function
    from tessera.ir.module import IRModule

    c = 16
    conv = f"strides=[{stride}, {stride}], padding={[k // 2 * dilation] * 4}"
    consts = {
        "w1": qnn.pack_conv_weight(_data((c, 8, 1, 1), "int8")),
        "wd": qnn.pack_conv_weight(_data((c, 1, k, k), "int8")),
        "s": np.full((c, 1, 1), 2e-3, "f4"),
    }
    one = "strides=[1, 1], padding=[0, 0, 0, 0], dilation=[1, 1]"
    func = parse(
        f"""def main(%x: u8[1, 8, 11, 11]) {{
          %w1 = constant(...) : i32[{c}, 2, 1, 1]; %wd = constant(...) : i32[{c}, 1, {k}, {k}];
          %s = constant(...) : f32[{c}, 1, 1];
          %1 = qnn.conv2d(%x, %w1, {one}, groups=1, pad_value=0);
          %2 = qnn.dequantize(%1, %s); %3 = clip(%2, a_min=-3.0, a_max=3.0);
          %4 = qnn.quantize(%3, scale=0.03, zero_point=5, dtype="int8");
          %5 = qnn.conv2d(%4, %wd, {conv}, dilation=[{dilation}, {dilation}], groups={c},
                          pad_value=133);
          %6 = qnn.dequantize(%5, %s); %7 = nn.relu(%6);
          %8 = qnn.quantize(%7, scale=0.05, zero_point=0, dtype="uint8"); return %8 }}""",
        constants=consts,
    )
    x = _data((1, 8, 11, 11), "uint8")
    (want,) = run_function(func, {"x": x})
    for switch in (True, False):
        config = {"alter_layout.int8_float_depthwise": switch}
        with tessera.transform.PassContext(opt_level=3, config=config):
            lib = tessera.build(IRModule({"main": func}), target="llvm", params={})
        assert ("fused_nn_conv2d_nchwc" in lib.get_source()) == switch
        m = tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))
        m.set_input("x", x)
        m.run()
        np.testing.assert_array_equal(m.get_output(0).numpy(), want, err_msg=str(switch))


@pytest.mark.parametrize(
    "target,register",
    [("llvm -mcpu=cascadelake", "zmm"), ("llvm -mcpu=skylake-avx512", "zmm"),
     ("llvm -mcpu=haswell", "ymm"), ("c", None)],
)  # fmt: skip
def test_float_depthwise_per_isa_level(target, register):
    """Built for each ISA level (not run where this CPU lacks it): the depthwise int8 conv is
    the float conv's blocked kernel, FMAs on the level's vectors, its requantize clamp without
    the unordered compares of NaN-propagating min/max (Note [quantize clamp]); the C target
    (no blocked layouts) keeps the integer kernel, run against the integer graph."""
    from tessera.graph import parse, run_function
    from tessera.ir.module import IRModule

    c = 32
    consts = {
        "w1": qnn.pack_conv_weight(_data((c, 16, 1, 1), "int8")),
        "wd": qnn.pack_conv_weight(_data((c, 1, 3, 3), "int8")),
        "s": np.full((c, 1, 1), 1e-3, "f4"),
    }
    one = "strides=[1, 1], padding=[0, 0, 0, 0], dilation=[1, 1]"
    three = "strides=[1, 1], padding=[1, 1, 1, 1], dilation=[1, 1]"
    q = 'scale=0.05, zero_point=0, dtype="uint8"'
    func = parse(
        f"""def main(%x: u8[1, 16, 8, 8]) {{
          %w1 = constant(...) : i32[{c}, 4, 1, 1]; %wd = constant(...) : i32[{c}, 1, 3, 3];
          %s = constant(...) : f32[{c}, 1, 1];
          %1 = qnn.conv2d(%x, %w1, {one}, groups=1, pad_value=0);
          %2 = qnn.dequantize(%1, %s); %3 = qnn.quantize(%2, {q});
          %4 = qnn.conv2d(%3, %wd, {three}, groups={c}, pad_value=0);
          %5 = qnn.dequantize(%4, %s); %6 = clip(%5, a_min=0.0, a_max=6.0);
          %7 = qnn.quantize(%6, {q}); return %7 }}""",
        constants=consts,
    )
    with tessera.transform.PassContext(opt_level=3):
        lib = tessera.build(IRModule({"main": func}), target=target, params={})
    if register is None:
        assert "fused_nn_conv2d_nchwc" not in lib.get_source()
        x = _data((1, 16, 8, 8), "uint8")
        m = tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))
        m.set_input("x", x)
        m.run()
        np.testing.assert_array_equal(m.get_output(0).numpy(), run_function(func, {"x": x})[0])
        return
    asm = lib.get_source("asm")
    start = asm.index("fused_nn_conv2d_nchwc")
    body = asm[start : asm.index(".Lfunc_end", start)]
    assert "vfmadd" in body and f"%{register}" in body and "vcmpunordps" not in body


# -- bounded pairs (Note [bounded pairs]): vpmaddubsw where |w0| + |w1| <= 128 ----------------

EDGE_PAIRS = [(-128, 0), (0, -128), (64, 64), (-64, -64), (127, 1), (-1, -127), (100, 28)]


def _bounded_weight(n, k):
    """(n, k) int8 whose byte pairs sum to at most 128 in size, many exactly 128 (the edge)."""
    w = np.zeros((n, k + k % 2), np.int64)
    first = R.integers(-128, 129, (n, w.shape[1] // 2))
    first = np.clip(first, -128, 127)
    room = 128 - np.abs(first)
    w[:, 0::2] = first
    w[:, 1::2] = np.clip(R.integers(-room, room + 1), -128, 127)
    edges = np.array(EDGE_PAIRS)[R.integers(0, len(EDGE_PAIRS), w.shape[1] // 2)]
    w[0, 0::2], w[0, 1::2] = edges[:, 0], edges[:, 1]  # a whole row of edge pairs
    return w[:, :k].astype(np.int8)


def _bounded_dense(t, x8, w8, bounded=True):
    m, n = x8.shape[0], w8.shape[0]
    wp = qnn.pack_dense_weight(w8)
    X = te.placeholder(x8.shape, str(x8.dtype), name="x")
    W = te.placeholder(wp.shape, "int32", name="w")
    Y = qnn.qnn_dense(X, W, n, bounded=bounded)
    f = tessera.build(int8_dense.schedule_qnn_dense([Y], t), [X, W, Y], target=t)
    y = np.zeros((m, n), np.int32)
    f(x8, wp, y)
    return y, f


def _reference(x8, w8):
    xu = x8.astype(np.int64) + (128 if x8.dtype == np.int8 else 0)
    return (xu @ w8.astype(np.int64).T).astype(np.int32)


@pytest.mark.parametrize("target", ["llvm -mcpu=haswell", "llvm -mcpu=x86-64", "c"])
@pytest.mark.parametrize(
    "m,k,n,xdt", [(1, 64, 48, "uint8"), (5, 37, 20, "int8"), (6, 70, 40, "uint8")]
)
def test_bounded_dense_matches_integer_reference_at_the_edge(target, m, k, n, xdt):
    """Weights whose pairs sum to exactly 128 in size, data at 255 (x_u; int8 127) in the first
    row: the largest pair sums vpmaddubsw must hold, 255 * 128 = 32640, exact."""
    t = _target(target)
    w8 = _bounded_weight(n, k)
    assert qnn.pairs_bounded(w8)
    x8 = _data((m, k), xdt)
    x8[0] = 255 if xdt == "uint8" else 127
    y, f = _bounded_dense(t, x8, w8)
    np.testing.assert_array_equal(y, _reference(x8, w8))
    if target == "llvm -mcpu=haswell":
        assert "vpmaddubsw" in f.get_source("asm")


def test_bounded_dense_saturates_past_the_bound():
    """Pairs of 129 (65 + 64) with data 255 sum to 32895 > 32767: vpmaddubsw saturates, so
    pairs_bounded refuses them, and a (wrong) promise of the bound shows in the result. That
    is why only weights that keep the bound are promised."""
    t = _target("llvm -mcpu=haswell")
    w8 = np.tile(np.array([65, 64], np.int8), (16, 8))  # (16, 16)
    assert not qnn.pairs_bounded(w8)
    assert qnn.pairs_bounded(w8 - np.tile(np.array([0, 1], np.int8), 8))  # 65 + 63 = 128
    x8 = np.full((2, 16), 255, np.uint8)
    exact, _ = _bounded_dense(t, x8, w8, bounded=False)
    np.testing.assert_array_equal(exact, _reference(x8, w8))
    promised, _ = _bounded_dense(t, x8, w8, bounded=True)
    assert (promised < exact).all()  # 8 pairs of 32767 where 32895 belonged


@pytest.mark.parametrize(
    "target,instruction,absent",
    [("llvm -mcpu=skylake-avx512", "vpmaddubsw", None), ("llvm -mcpu=cascadelake", "vpdpbusd",
     "vpmaddubsw"), ("llvm -mcpu=haswell", "vpmaddubsw", None)],
)  # fmt: skip
def test_bounded_dense_asm_per_isa_level(target, instruction, absent):
    """Built (not run: this CPU may lack AVX-512): vpmaddubsw zmm/ymm without VNNI; VNNI's
    vpdpbusd is exact on any weight and stays."""
    t = Target(target)
    X = te.placeholder((4, 64), "uint8", name="x")
    W = te.placeholder((3, 16, 16), "int32", name="w")
    Y = qnn.qnn_dense(X, W, 48, bounded=True)
    asm = tessera.build(int8_dense.schedule_qnn_dense([Y], t), [X, W, Y], target=t).get_source(
        "asm"
    )
    assert instruction in asm and (absent is None or absent not in asm)
    unbounded = qnn.qnn_dense(X, W, 48)
    asm = tessera.build(int8_dense.schedule_qnn_dense([unbounded], t), [X, W, unbounded],
                        target=t).get_source("asm")  # fmt: skip
    assert "vpmaddubsw" not in asm


def test_split_bounded_keeps_the_product_and_the_bound():
    """main + residual = w; main's pairs bounded; the residual lives in the odd K indices of
    the pairs past the bound; too many such indices: None."""
    w = _bounded_weight(24, 37)
    w[3, 4], w[3, 5] = 100, -100  # 200: past the bound at k = 5
    w[7, 20], w[7, 21] = -128, 1  # 129
    w[9, 36] = 127  # the last value, alone in its pair (K odd): bounded
    main, rows, residual = qnn.split_bounded(w)
    assert qnn.pairs_bounded(main) and list(rows) == [5, 21]
    full = main.astype(np.int64)
    full[:, rows] += residual
    np.testing.assert_array_equal(full, w)
    x = _data((3, 37), "uint8").astype(np.int64)
    parts = x @ main.T.astype(np.int64) + x[:, rows] @ residual.T
    np.testing.assert_array_equal(x @ w.T.astype(np.int64), parts)
    assert qnn.split_bounded(_data((8, 64), "int8"), most_rows=1 / 8) is None
