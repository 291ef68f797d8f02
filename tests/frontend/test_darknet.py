"""The Darknet frontend against an independent numpy forward pass written from Darknet's C
(forward_convolutional_layer with normalize_cpu, forward_maxpool_layer, reorg_cpu, upsample_cpu,
forward_yolo_layer, forward_region_layer), on the shipped YOLO cfgs with random weights written
in the Darknet format. Small inputs here; the full 416x416 sizes run under `-m slow`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tessera
from tessera.frontend import darknet_cfg
from tessera.frontend.darknet import detection_heads, from_darknet
from tessera.graph import run_function

CFGS = Path(tessera.frontend.__file__).parent / "darknet_cfgs"


# -- the reference: Darknet's forward pass in numpy ------------------------------------------


def _read_floats(path):
    data = Path(path).read_bytes()
    major, minor = np.frombuffer(data, "<i4", 2)
    start = 20 if major * 10 + minor >= 2 else 16
    return np.frombuffer(data, "<f4", offset=start)


def _conv(x, w, stride, pad, groups):
    """Direct convolution by im2col, one group at a time (x: c,h,w; w: n,c/g,k,k)."""
    c, h, wd = x.shape
    n, cg, k, _ = w.shape
    xp = np.pad(x, ((0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - k) // stride + 1, (wd + 2 * pad - k) // stride + 1
    out = np.empty((n, oh, ow), np.float64)
    ng = n // groups
    for g in range(groups):
        cols = np.empty((cg, k, k, oh, ow))
        for dy in range(k):
            for dx in range(k):
                cols[:, dy, dx] = xp[g * cg : (g + 1) * cg, dy : dy + stride * oh : stride,
                                     dx : dx + stride * ow : stride]  # fmt: skip
        wg = w[g * ng : (g + 1) * ng].reshape(ng, -1)
        out[g * ng : (g + 1) * ng] = (wg @ cols.reshape(cg * k * k, -1)).reshape(ng, oh, ow)
    return out


def _activate(x, name):
    if name == "leaky":
        return np.where(x > 0, x, 0.1 * x)
    if name == "logistic":
        return 1 / (1 + np.exp(-x))
    if name == "mish":
        return x * np.tanh(np.log1p(np.exp(x)))
    if name == "relu":
        return np.maximum(x, 0)
    if name == "swish":
        return x / (1 + np.exp(-x))
    if name == "tanh":
        return np.tanh(x)
    assert name == "linear", name
    return x


def _maxpool(x, size, stride, padding):
    c, h, w = x.shape
    oh, ow = (h + padding - size) // stride + 1, (w + padding - size) // stride + 1
    out = np.full((c, oh, ow), -np.inf)
    off = -(padding // 2)  # darknet: w_offset = -pad/2
    for i in range(oh):
        for j in range(ow):
            for n in range(size):
                for m in range(size):
                    y, xx = off + i * stride + n, off + j * stride + m
                    if 0 <= y < h and 0 <= xx < w:
                        out[:, i, j] = np.maximum(out[:, i, j], x[:, y, xx])
    return out


def _reorg(x, stride):
    """reorg_cpu(input, w, h, c, batch, stride, forward=0, output), loop for loop."""
    c, h, w = x.shape
    flat_in, out = x.ravel(), np.empty(x.size)
    out_c = c // (stride * stride)
    for k in range(c):
        for j in range(h):
            for i in range(w):
                in_index = i + w * (j + h * k)
                c2, offset = k % out_c, k // out_c
                w2, h2 = i * stride + offset % stride, j * stride + offset // stride
                out[in_index] = flat_in[w2 + w * stride * (h2 + h * stride * c2)]
    return out.reshape(c * stride * stride, h // stride, w // stride)


def darknet_forward(net, weights_path, image):
    """Outputs of the yolo/region layers (or the last layer) for one image (c, h, w)."""
    floats, pos = _read_floats(weights_path), 0

    def take(n):
        nonlocal pos
        pos += n
        return floats[pos - n : pos].astype(np.float64)

    x, outs, detections = image.astype(np.float64), [], []
    for layer in net.layers:
        o = layer.options
        if layer.kind == "convolutional":
            n, k = int(o["filters"]), int(o.get("size", 1))
            stride, groups = int(o.get("stride", 1)), int(o.get("groups", 1))
            pad = k // 2 if int(o.get("pad", 0)) else int(o.get("padding", 0))
            biases = take(n)
            bn = int(o.get("batch_normalize", 0))
            if bn:
                scales, mean, var = take(n), take(n), take(n)
            w = take(n * x.shape[0] // groups * k * k).reshape(n, -1, k, k)
            y = _conv(x, w, stride, pad, groups)
            if bn:  # normalize_cpu, scale_bias
                y = (y - mean[:, None, None]) / (np.sqrt(var[:, None, None]) + 0.000001)
                y = y * scales[:, None, None]
            x = _activate(y + biases[:, None, None], o.get("activation", "logistic"))
        elif layer.kind == "connected":  # load_connected_weights: biases, weights, then BN
            n = int(o["output"])
            biases = take(n)
            y = take(n * x.size).reshape(n, -1) @ x.ravel()
            if int(o.get("batch_normalize", 0)):
                scales, mean, var = take(n), take(n), take(n)
                y = (y - mean) / (np.sqrt(var) + 0.000001) * scales
            x = _activate(y + biases, o.get("activation", "logistic")).reshape(n, 1, 1)
        elif layer.kind == "softmax":
            v = x.ravel() / float(o.get("temperature", 1))
            e = np.exp(v - v.max())
            x = (e / e.sum()).reshape(-1, 1, 1)
        elif layer.kind == "maxpool":
            stride = int(o.get("stride", 1))
            size = int(o.get("size", stride))
            x = _maxpool(x, size, stride, int(o.get("padding", size - 1)))
        elif layer.kind == "avgpool":
            x = x.mean(axis=(1, 2), keepdims=True)
        elif layer.kind == "route":
            refs = [int(r) for r in o["layers"].split(",")]
            parts = [outs[len(outs) + r if r < 0 else r] for r in refs]
            groups, gid = int(o.get("groups", 1)), int(o.get("group_id", 0))
            parts = [p[gid * (p.shape[0] // groups) : (gid + 1) * (p.shape[0] // groups)]
                     for p in parts]  # fmt: skip
            x = np.concatenate(parts, axis=0)
        elif layer.kind == "shortcut":
            ref = int(o["from"])
            x = _activate(x + outs[len(outs) + ref if ref < 0 else ref], o.get("activation"))
        elif layer.kind == "upsample":
            s = int(o.get("stride", 2))
            x = x.repeat(s, axis=1).repeat(s, axis=2) * float(o.get("scale", 1))
        elif layer.kind == "reorg":
            x = _reorg(x, int(o.get("stride", 2)))
        elif layer.kind == "yolo":
            classes, scale = int(o["classes"]), float(o.get("scale_x_y", 1))
            y = x.copy().reshape(-1, 5 + classes, *x.shape[1:])
            y[:, 0:2] = _activate(y[:, 0:2], "logistic") * scale - 0.5 * (scale - 1)
            y[:, 4:] = _activate(y[:, 4:], "logistic")
            x = y.reshape(x.shape)
            detections.append(x)
        elif layer.kind == "region":
            classes, coords = int(o["classes"]), int(o.get("coords", 4))
            y = x.copy().reshape(-1, coords + 1 + classes, *x.shape[1:])
            y[:, 0:2] = _activate(y[:, 0:2], "logistic")
            y[:, coords] = _activate(y[:, coords], "logistic")
            cls = y[:, coords + 1 :]
            if int(o.get("softmax", 0)):
                e = np.exp(cls - cls.max(axis=1, keepdims=True))
                y[:, coords + 1 :] = e / e.sum(axis=1, keepdims=True)
            else:
                y[:, coords + 1 :] = _activate(cls, "logistic")
            x = y.reshape(x.shape)
            detections.append(x)
        outs.append(x)
    assert pos == floats.size, "the reference consumed a different number of weights"
    return detections or [outs[-1]]


# -- helpers ----------------------------------------------------------------------------------


def write_random_weights(cfg, path, size, seed=0):
    net = darknet_cfg.read_cfg(cfg) if isinstance(cfg, Path) else darknet_cfg.parse_cfg(cfg)
    plan = darknet_cfg.plan_layers(net, (net.input_shape[0], size, size))
    darknet_cfg.write_weights(path, plan, darknet_cfg.random_weights(plan, seed))
    return net


def check_against_reference(cfg, tmp_path, size, seed=0, rtol=1e-4):
    weights = tmp_path / "model.weights"
    net = write_random_weights(cfg, weights, size, seed)
    mod, params = from_darknet(cfg, weights, input_size=size)
    image = np.random.default_rng(seed + 1).uniform(0, 1, (1, net.input_shape[0], size, size))
    image = image.astype(np.float32)
    got = run_function(mod["main"], {"data": image}, params)
    expected = darknet_forward(net, weights, image[0])
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert g.shape == (1, *e.shape)
        scale = np.abs(e).max()
        np.testing.assert_allclose(g[0], e, rtol=rtol, atol=rtol * scale)
    return mod, params, image, expected


# -- tests ------------------------------------------------------------------------------------


def test_yolov3_tiny_matches_reference(tmp_path):
    mod, _, _, expected = check_against_reference(CFGS / "yolov3-tiny.cfg", tmp_path, 64)
    assert [e.shape for e in expected] == [(255, 2, 2), (255, 4, 4)]


def test_yolov4_tiny_matches_reference(tmp_path):
    check_against_reference(CFGS / "yolov4-tiny.cfg", tmp_path, 64)


def test_yolov3_matches_reference(tmp_path):
    _, _, _, expected = check_against_reference(CFGS / "yolov3.cfg", tmp_path, 32)
    assert [e.shape for e in expected] == [(255, 1, 1), (255, 2, 2), (255, 4, 4)]


SMALL_YOLOV2 = """
[net]
width=32
height=32
channels=3

[convolutional]
batch_normalize=1
filters=8
size=3
stride=1
pad=1
activation=mish

[maxpool]
size=2
stride=2

[convolutional]
filters=16
size=3
stride=2
pad=1
groups=2
activation=relu

[reorg]
stride=2

[route]
layers=-1

[convolutional]
filters=32
size=1
stride=1
padding=0
activation=swish

[shortcut]
from=-1
activation=tanh

[upsample]
stride=2
scale=0.5

[convolutional]
size=1
stride=1
pad=1
filters={filters}
activation=linear

[region]
anchors=1.08,1.19, 3.42,4.41
classes=3
num=2
coords=4
softmax={softmax}
"""


@pytest.mark.parametrize("softmax", [0, 1])
def test_region_reorg_and_other_layers_match_reference(tmp_path, softmax):
    cfg = SMALL_YOLOV2.format(filters=2 * (4 + 1 + 3), softmax=softmax)
    check_against_reference(cfg, tmp_path, 32)
    heads = detection_heads(cfg)
    assert heads[0].kind == "region" and heads[0].grid == (8, 8)
    assert heads[0].anchors[1] == pytest.approx((3.42 / 8, 4.41 / 8))


CLASSIFIER = """
[net]
width=16
height=16
channels=3

[convolutional]
batch_normalize=1
filters=8
size=3
stride=2
pad=1
activation=leaky

[connected]
batch_normalize=1
output=12
activation=relu

[avgpool]

[dropout]
probability=0.5

[connected]
output=5
activation=linear

[softmax]
groups=1
temperature=2
"""


def test_classifier_layers_match_reference(tmp_path):
    mod, _, _, expected = check_against_reference(CLASSIFIER, tmp_path, 16)
    assert expected[0].shape == (5, 1, 1)
    assert expected[0].sum() == pytest.approx(1.0)


def test_yolov3_tiny_compiled_matches_interpreter(tmp_path):
    mod, params, image, expected = check_against_reference(CFGS / "yolov3-tiny.cfg", tmp_path, 32)
    lib = tessera.build(mod, target="llvm", params=params)
    m = tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))
    m.set_input("data", image)
    m.run()
    for i, e in enumerate(expected):
        np.testing.assert_allclose(m.get_output(i).numpy()[0], e, rtol=1e-4, atol=1e-4)


def test_detection_heads_of_yolov3():
    heads = detection_heads(CFGS / "yolov3.cfg")
    assert [h.grid for h in heads] == [(13, 13), (26, 26), (52, 52)]
    assert heads[0].anchors[0] == pytest.approx((116 / 416, 90 / 416))
    assert heads[2].classes == 80


@pytest.mark.slow
@pytest.mark.parametrize("name", ["yolov3-tiny", "yolov4-tiny", "yolov3"])
def test_full_size_matches_reference(tmp_path, name):
    check_against_reference(CFGS / f"{name}.cfg", tmp_path, 416)


@pytest.mark.slow
def test_full_size_yolov3_tiny_compiled(tmp_path):
    mod, params, image, expected = check_against_reference(CFGS / "yolov3-tiny.cfg", tmp_path, 416)
    lib = tessera.build(mod, target="llvm", params=params)
    m = tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))
    m.set_input("data", image)
    m.run()
    for i, e in enumerate(expected):
        np.testing.assert_allclose(m.get_output(i).numpy()[0], e, rtol=1e-4, atol=1e-4)
