"""com.microsoft ops compiled by tessera against ONNX Runtime: the quantized ones bit for bit
(or within one quantization step where ORT's float function may differ in the last bit), the
float ones within float tolerance."""

import numpy as np
import pytest
from onnx import helper

import tessera
from tessera.frontend import from_onnx
from tessera.frontend.testing import make_model, ort_u8s8_is_exact, run_ort
from tessera.runtime import GraphModule, cpu
from tessera.transform import PassContext

pytest.importorskip("onnxruntime")
R = np.random.default_rng(5)
MS = "com.microsoft"


def ms_model(nodes, inputs, outputs, inits):
    model = make_model(nodes, inputs, outputs, inits, opset=13)
    model.opset_import.append(helper.make_opsetid(MS, 1))
    return model


def node(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, domain=MS, **attrs)


def compare(model, feeds, exact=True, steps=0, rtol=1e-5, atol=1e-5, target="llvm"):
    mod, params = from_onnx(model)
    with PassContext(opt_level=3):
        lib = tessera.build(mod, target=target, params=params)
    m = GraphModule(lib["default"](cpu(0)))
    for k, v in feeds.items():
        m.set_input(k, v)
    m.run()
    want = run_ort(model, feeds)
    for i, e in enumerate(want):
        g = m.get_output(i).numpy()
        assert g.dtype == e.dtype and g.shape == e.shape, (g.dtype, e.dtype, g.shape, e.shape)
        if e.dtype.kind in "iu":
            diff = np.abs(g.astype(np.int64) - e.astype(np.int64))
            assert diff.max(initial=0) <= steps, (diff.max(), (diff > 0).mean())
        else:
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)


def u8(*shape):
    return R.integers(0, 256, shape).astype(np.uint8)


def qparams(prefix, scale, zp, dtype=np.uint8):
    return {f"{prefix}s": np.float32(scale), f"{prefix}z": np.array(zp, dtype)}


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
def test_qlinear_binary(op):
    a, b = u8(2, 8, 5), u8(8, 5)
    inits = {**qparams("a", 0.05, 120), **qparams("b", 0.02, 3), **qparams("c", 0.07, 128)}
    n = node(op, ["a", "as", "az", "b", "bs", "bz", "cs", "cz"], ["y"])
    compare(ms_model([n], {"a": a, "b": b}, ["y"], inits), {"a": a, "b": b}, steps=1)


@pytest.mark.parametrize("op,attrs", [("QLinearSigmoid", {}), ("QLinearLeakyRelu", {"alpha": 0.1})])
def test_qlinear_lookup(op, attrs):
    x = np.arange(256, dtype=np.uint8).reshape(4, 64)
    inits = {
        **qparams("x", 0.05, 128),
        **qparams("y", 1 / 255 if "Sig" in op else 0.03, 0 if "Sig" in op else 100),
    }
    n = node(op, ["x", "xs", "xz", "ys", "yz"], ["y"], **attrs)
    compare(ms_model([n], {"x": x}, ["y"], inits), {"x": x}, steps=1)


def test_qlinear_concat_requantizes_inputs():
    a, b = u8(1, 3, 4, 4), u8(1, 5, 4, 4)
    inits = {**qparams("y", 0.05, 128), **qparams("a", 0.05, 128), **qparams("b", 0.11, 7)}
    n = node("QLinearConcat", ["ys", "yz", "a", "as", "az", "b", "bs", "bz"], ["y"], axis=1)
    compare(ms_model([n], {"a": a, "b": b}, ["y"], inits), {"a": a, "b": b}, steps=1)


def test_qlinear_global_average_pool():
    x = u8(2, 6, 7, 7)
    inits = {**qparams("x", 0.05, 100), **qparams("y", 0.03, 90)}
    n = node("QLinearGlobalAveragePool", ["x", "xs", "xz", "ys", "yz"], ["y"], channels_last=0)
    compare(ms_model([n], {"x": x}, ["y"], inits), {"x": x}, steps=1)


# int8 weights: full range where ORT's uint8 x int8 products are exact; elsewhere (x86 without
# VNNI) ORT adds them in pairs that saturate 16 bits unless |w| <= 64 (its "reduce_range")
W8 = 128 if ort_u8s8_is_exact() else 64


def test_dynamic_quantize_matmul():
    a = R.standard_normal((3, 40)).astype(np.float32)
    inits = {
        "w": R.integers(-W8, W8, (40, 24)).astype(np.int8),
        "ws": (R.random(24) * 0.01).astype(np.float32),
        "bias": R.standard_normal(24).astype(np.float32),
    }
    n = node("DynamicQuantizeMatMul", ["a", "w", "ws", "", "bias"], ["y"])
    compare(ms_model([n], {"a": a}, ["y"], inits), {"a": a}, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize(
    "direction", ["forward", pytest.param("bidirectional", marks=pytest.mark.slow)]
)
def test_dynamic_quantize_lstm(direction):
    seq, batch, inp, hid = 4, 2, 10, 8
    nd = 2 if direction == "bidirectional" else 1
    x = R.standard_normal((seq, batch, inp)).astype(np.float32)
    inits = {
        "W": R.integers(-W8, W8, (nd, inp, 4 * hid)).astype(np.int8),
        "R": R.integers(-W8, W8, (nd, hid, 4 * hid)).astype(np.int8),
        "B": (R.standard_normal((nd, 8 * hid)) * 0.1).astype(np.float32),
        "ws": (R.random(nd) * 0.01 + 0.002).astype(np.float32),
        "wz": np.zeros(nd, np.int8),
        "rs": (R.random((nd, 4 * hid)) * 0.01 + 0.002).astype(np.float32),
        "rz": np.zeros((nd, 4 * hid), np.int8),
    }
    ins = ["x", "W", "R", "B", "", "", "", "", "ws", "wz", "rs", "rz"]
    n = node("DynamicQuantizeLSTM", ins, ["y", "yh", "yc"], hidden_size=hid, direction=direction)
    compare(ms_model([n], {"x": x}, ["y", "yh", "yc"], inits), {"x": x}, atol=2e-4, rtol=1e-3)


def test_fused_conv_and_matmul():
    x = R.standard_normal((1, 4, 6, 6)).astype(np.float32)
    inits = {
        "w": R.standard_normal((8, 4, 3, 3)).astype(np.float32),
        "b": R.standard_normal(8).astype(np.float32),
        "m": R.standard_normal((6, 5)).astype(np.float32),
    }
    nodes = [
        node(
            "FusedConv",
            ["x", "w", "b"],
            ["c"],
            activation="LeakyRelu",
            activation_params=[0.2],
            pads=[1, 1, 1, 1],
        ),
        node("FusedMatMul", ["c", "m"], ["y"], alpha=0.5),
    ]
    compare(ms_model(nodes, {"x": x}, ["y"], inits), {"x": x}, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op", ["Gelu", "FastGelu", "BiasGelu", "QuickGelu"])
def test_gelus(op):
    x = R.standard_normal((2, 3, 16)).astype(np.float32) * 3
    bias = R.standard_normal(16).astype(np.float32)
    ins = ["x", "bias"] if op in ("FastGelu", "BiasGelu") else ["x"]
    compare(
        ms_model([node(op, ins, ["y"])], {"x": x}, ["y"], {"bias": bias}),
        {"x": x},
        rtol=1e-4,
        atol=1e-4,
    )


def test_skip_layer_norm():
    x, skip = (R.standard_normal((2, 5, 16)).astype(np.float32) for _ in range(2))
    inits = {
        "g": R.standard_normal(16).astype(np.float32),
        "bt": R.standard_normal(16).astype(np.float32),
        "bias": R.standard_normal(16).astype(np.float32),
    }
    n = node(
        "SkipLayerNormalization",
        ["x", "skip", "g", "bt", "bias"],
        ["y", "", "", "sum"],
        epsilon=1e-5,
    )
    feeds = {"x": x, "skip": skip}
    compare(ms_model([n], feeds, ["y", "sum"], inits), feeds, rtol=1e-4, atol=1e-4)


def test_embed_layer_norm():
    batch, seq, hidden = 2, 6, 16
    ids = R.integers(0, 30, (batch, seq)).astype(np.int32)
    seg = R.integers(0, 2, (batch, seq)).astype(np.int32)
    mask = np.array([[1] * 6, [1] * 4 + [0] * 2], np.int32)
    inits = {
        "we": R.standard_normal((30, hidden)).astype(np.float32),
        "pe": R.standard_normal((seq, hidden)).astype(np.float32),
        "se": R.standard_normal((2, hidden)).astype(np.float32),
        "g": R.standard_normal(hidden).astype(np.float32),
        "bt": R.standard_normal(hidden).astype(np.float32),
    }
    n = node(
        "EmbedLayerNormalization",
        ["ids", "seg", "we", "pe", "se", "g", "bt", "mask"],
        ["y", "mi"],
        epsilon=1e-5,
    )
    feeds = {"ids": ids, "seg": seg, "mask": mask}
    compare(ms_model([n], feeds, ["y", "mi"], inits), feeds, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mask_kind", ["none", "lengths", "raw", "causal"])
def test_attention(mask_kind):
    batch, seq, hidden, heads = 2, 5, 16, 4
    x = R.standard_normal((batch, seq, hidden)).astype(np.float32)
    inits = {
        "w": (R.standard_normal((hidden, 3 * hidden)) * 0.3).astype(np.float32),
        "b": R.standard_normal(3 * hidden).astype(np.float32),
    }
    feeds, ins, attrs = {"x": x}, ["x", "w", "b"], {"num_heads": heads}
    if mask_kind == "lengths":
        feeds["m"] = np.array([5, 3], np.int32)
        ins.append("m")
    elif mask_kind == "raw":
        feeds["m"] = np.array([[1, 1, 0, 1, 1], [1, 1, 1, 0, 0]], np.int32)
        ins.append("m")
    elif mask_kind == "causal":
        attrs["unidirectional"] = 1
    n = node("Attention", ins, ["y"], **attrs)
    compare(ms_model([n], feeds, ["y"], inits), feeds, rtol=1e-4, atol=1e-4)
