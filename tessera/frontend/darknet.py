"""Darknet frontend: a `.cfg` and its `.weights` -> a graph IRModule (NCHW) and its params.

    mod, params = from_darknet("yolov3-tiny.cfg", "yolov3-tiny.weights")
    heads = detection_heads("yolov3-tiny.cfg")   # what each output of a YOLO model holds

The function's input is "data", float32 (batch, channels, height, width) from [net] (or
`input_size`). Its outputs are the outputs of the `[yolo]` and `[region]` layers in order, as
Darknet leaves them after its forward pass (logistic on x, y, objectness and the class scores
of yolo layers; softmax on the classes of region layers), or the last layer's output when the
network has neither. Batch norm is folded into the convolution weights at conversion (Darknet
normalizes with (x - mean) / (sqrt(var) + 1e-6), not the usual sqrt(var + eps)). Each call's
span is the layer's name, "layer<i>:<type>".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tessera.frontend.darknet_cfg import (
    DarknetNet,
    LayerPlan,
    UnsupportedLayerError,
    parse_cfg,
    plan_layers,
    read_cfg,
    read_weights,
)
from tessera.graph.builder import GraphBuilder
from tessera.graph.ir import Function, Value
from tessera.ir.module import IRModule

BN_EPSILON = 1e-6  # Darknet adds it to the standard deviation


@dataclass(frozen=True)
class DetectionHead:
    """A `[yolo]` or `[region]` output: anchors as fractions of the input image (w, h)."""

    kind: str
    layer: int
    classes: int
    anchors: tuple[tuple[float, float], ...]
    grid: tuple[int, int]  # (height, width)
    coords: int = 4


def _load_net(cfg) -> DarknetNet:
    if isinstance(cfg, DarknetNet):
        return cfg
    if isinstance(cfg, str) and "\n" in cfg and "[" in cfg:
        return parse_cfg(cfg)
    return read_cfg(cfg)


def _input_shape(net: DarknetNet, input_size) -> tuple[int, int, int]:
    c, h, w = net.input_shape
    if input_size is not None:
        h, w = (input_size, input_size) if isinstance(input_size, int) else input_size
    return c, int(h), int(w)


def detection_heads(cfg, input_size=None) -> list[DetectionHead]:
    """The detection outputs of a cfg (path, text or DarknetNet), in output order."""
    net = _load_net(cfg)
    c, h, w = _input_shape(net, input_size)
    heads = []
    for p in plan_layers(net, (c, h, w)):
        layer = p.layer
        if layer.kind not in ("yolo", "region"):
            continue
        classes = layer.int("classes", 20)
        pairs = layer.floats("anchors") if "anchors" in layer.options else []
        pairs = list(zip(pairs[0::2], pairs[1::2], strict=True))
        gh, gw = p.out_shape[1:]
        if layer.kind == "yolo":
            mask = layer.ints("mask", range(layer.int("num", len(pairs))))
            if max(mask, default=-1) >= len(pairs):
                raise ValueError(f"[yolo] at line {layer.line}: mask {mask} has no anchors")
            anchors = tuple((pairs[m][0] / w, pairs[m][1] / h) for m in mask)
        else:  # region anchors are in grid cells
            anchors = tuple((aw / gw, ah / gh) for aw, ah in pairs[: layer.int("num", 1)])
        heads.append(
            DetectionHead(layer.kind, p.index, classes, anchors, (gh, gw), layer.int("coords", 4))
        )
    return heads


class _Converter:
    def __init__(self, b: GraphBuilder, weights: list[dict[str, np.ndarray]]):
        self.b = b
        self.weights = weights
        self.params: dict[str, np.ndarray] = {}

    def weight(self, name: str, array: np.ndarray) -> Value:
        self.params[name] = array
        return self.b.param(name, array.shape, "float32")

    def activation(self, x: Value, name: str) -> Value:
        b = self.b
        if name == "linear":
            return x
        if name == "leaky":
            return b.call("nn.leaky_relu", x, alpha=0.1)
        if name == "logistic":
            return b.call("sigmoid", x)
        if name == "swish":
            return b.call("multiply", x, b.call("sigmoid", x))
        if name in ("relu", "mish", "tanh"):
            return b.call("tanh" if name == "tanh" else f"nn.{name}", x)
        raise ValueError(f"activation {name!r} is not supported")  # check_supported rules out

    def convolutional(self, p: LayerPlan, x: Value) -> Value:
        layer, arrays = p.layer, self.weights[p.index]
        n, c = p.out_shape[0], p.in_shape[0]
        size, stride, groups = layer.int("size", 1), layer.int("stride", 1), layer.int("groups", 1)
        pad = size // 2 if layer.int("pad", 0) else layer.int("padding", 0)
        w = arrays["weights"].reshape(n, c // groups, size, size)
        bias = arrays["biases"]
        if "scales" in arrays:
            # fold (x - mean) / (sqrt(var) + eps) * scale + bias into the conv
            k = arrays["scales"] / (np.sqrt(arrays["rolling_variance"]) + BN_EPSILON)
            w = w * k.reshape(n, 1, 1, 1)
            bias = bias - arrays["rolling_mean"] * k
        wv = self.weight(f"layer{p.index}_weight", w.astype(np.float32))
        bv = self.weight(f"layer{p.index}_bias", bias.astype(np.float32).reshape(n, 1, 1))
        y = self.b.call("nn.conv2d", x, wv, strides=(stride, stride), padding=(pad,) * 4,
                        dilation=(1, 1), groups=groups)  # fmt: skip
        y = self.b.call("add", y, bv)
        return self.activation(y, layer.str("activation", "logistic"))

    def connected(self, p: LayerPlan, x: Value) -> Value:
        arrays, n = self.weights[p.index], p.out_shape[0]
        w = arrays["weights"].reshape(n, -1)
        bias = arrays["biases"]
        if "scales" in arrays:  # the same folding as a convolution's
            k = arrays["scales"] / (np.sqrt(arrays["rolling_variance"]) + BN_EPSILON)
            w = w * k[:, None]
            bias = bias - arrays["rolling_mean"] * k
        batch = x.type.shape[0]
        wv = self.weight(f"layer{p.index}_weight", w.astype(np.float32))
        bv = self.weight(f"layer{p.index}_bias", bias.astype(np.float32))
        flat = self.b.call("reshape", x, newshape=(batch, w.shape[1]))  # C, H, W order
        y = self.b.call("add", self.b.call("nn.dense", flat, wv), bv)
        y = self.activation(y, p.layer.str("activation", "logistic"))
        return self.b.call("reshape", y, newshape=(batch, n, 1, 1))

    def softmax(self, p: LayerPlan, x: Value) -> Value:
        batch, size = x.type.shape[0], p.out_shape[0]
        y = self.b.call("reshape", x, newshape=(batch, size))
        temperature = p.layer.float("temperature", 1.0)
        if temperature != 1.0:
            y = self.b.call("divide", y, self.b.const(np.float32(temperature)))
        y = self.b.call("nn.softmax", y, axis=1)
        return self.b.call("reshape", y, newshape=(batch, size, 1, 1))

    def maxpool(self, p: LayerPlan, x: Value) -> Value:
        layer = p.layer
        stride = layer.int("stride", 1)
        size = layer.int("size", stride)
        padding = layer.int("padding", size - 1)
        # Darknet starts the window at -padding/2 and pads with -inf on both sides
        pads = (padding // 2, padding // 2, padding - padding // 2, padding - padding // 2)
        return self.b.call("nn.max_pool2d", x, pool_size=(size, size), strides=(stride, stride),
                           padding=pads)  # fmt: skip

    def route(self, p: LayerPlan, xs: list[Value]) -> Value:
        groups, group_id = p.layer.int("groups", 1), p.layer.int("group_id", 0)
        parts = []
        for x in xs:
            if groups > 1:
                n, c, h, w = x.type.shape
                part = c // groups
                begin, end = (0, group_id * part, 0, 0), (n, (group_id + 1) * part, h, w)
                x = self.b.call("slice", x, begin=begin, end=end, strides=(1, 1, 1, 1))
            parts.append(x)
        return parts[0] if len(parts) == 1 else self.b.call("concatenate", *parts, axis=1)

    def upsample(self, p: LayerPlan, x: Value) -> Value:
        s = p.layer.int("stride", 2)
        n, c, h, w = x.type.shape
        y = self.b.call("image.resize", x, size=(n, c, h * s, w * s), scales=(1.0, 1.0, s, s),
                        mode="nearest", coordinate_transformation_mode="asymmetric",
                        nearest_mode="floor")  # fmt: skip
        scale = p.layer.float("scale", 1.0)
        return y if scale == 1.0 else self.b.call("multiply", y, self.b.const(np.float32(scale)))

    def reorg(self, p: LayerPlan, x: Value) -> Value:
        # Darknet's reorg_cpu (forward=0) reads its (c, h, w) input buffer as X of shape
        # (c/s^2, h*s, w*s) and writes out[b, (dy*s + dx)*c/s^2 + k, j, i] = X[b, k, j*s + dy,
        # i*s + dx] into a (c, h, w) buffer that the next layer reads as (c*s^2, h/s, w/s).
        # It is not space_to_depth; TVM's vision.reorg computes the same.
        s = p.layer.int("stride", 2)
        n, c, h, w = x.type.shape
        b = self.b
        y = b.call("reshape", x, newshape=(n, c // (s * s), h, s, w, s))
        y = b.call("transpose", y, axes=(0, 3, 5, 1, 2, 4))
        return b.call("reshape", y, newshape=(n, *p.out_shape))

    def yolo(self, p: LayerPlan, x: Value) -> Value:
        layer, c = p.layer, p.in_shape[0]
        classes = layer.int("classes", 20)
        per = 5 + classes
        scale = layer.float("scale_x_y", 1.0)
        logistic = np.ones((c // per, per), bool)
        logistic[:, 2:4] = False
        mul = np.ones((c // per, per), np.float32)
        add = np.zeros((c // per, per), np.float32)
        mul[:, 0:2], add[:, 0:2] = scale, -0.5 * (scale - 1)
        return self._select(x, logistic, mul, add)

    def region(self, p: LayerPlan, x: Value) -> Value:
        layer, (c, h, w) = p.layer, p.in_shape
        n, coords, classes = layer.int("num", 1), layer.int("coords", 4), layer.int("classes", 20)
        per = coords + 1 + classes
        logistic = np.zeros((n, per), bool)
        logistic[:, 0:2] = True
        logistic[:, coords] = True
        softmax = layer.int("softmax", 0) and classes > 0
        if not softmax:
            logistic[:, coords + 1 :] = True
        y = self._select(x, logistic, np.ones((n, per), np.float32), np.zeros((n, per), np.float32))
        if not softmax:
            return y
        b, batch = self.b, x.type.shape[0]
        y = b.call("reshape", y, newshape=(batch, n, per, h, w))
        head, cls = b.call("split", y, axis=2, sections=(coords + 1, classes))
        y = b.call("concatenate", head, b.call("nn.softmax", cls, axis=2), axis=2)
        return b.call("reshape", y, newshape=(batch, c, h, w))

    def _select(self, x, logistic, mul, add):
        """where(logistic, sigmoid(x) * mul + add, x), per channel."""
        b, c = self.b, x.type.shape[1]
        s = b.call("sigmoid", x)
        if not np.all(mul[logistic] == 1) or np.any(add[logistic] != 0):
            s = b.call("multiply", s, b.const(mul.reshape(c, 1, 1)))
            s = b.call("add", s, b.const(add.reshape(c, 1, 1)))
        return b.call("where", b.const(logistic.reshape(c, 1, 1)), s, x)


def from_darknet(cfg, weights, input_size=None, batch: int = 1):
    """Convert a Darknet network to (IRModule with function "main", params).

    `cfg`: a path to a `.cfg` file (or its text); `weights`: a path to the `.weights` file (or
    its bytes). `input_size`: (height, width) or one int, instead of [net]'s width and height.
    """
    net = _load_net(cfg)
    shape = _input_shape(net, input_size)
    plan = plan_layers(net, shape)
    arrays = read_weights(weights, plan)
    b = GraphBuilder()
    conv = _Converter(b, arrays)
    x = b.param("data", (batch, *shape), "float32")
    outs: list[Value] = []
    detections: list[Value] = []
    for p in plan:
        kind = p.layer.kind
        b.span = (f"layer{p.index}:{kind}",)
        b.name_hint = f"layer{p.index}"
        ins = [x if j < 0 else outs[j] for j in p.inputs]
        if kind == "convolutional":
            y = conv.convolutional(p, ins[0])
        elif kind == "maxpool":
            y = conv.maxpool(p, ins[0])
        elif kind == "avgpool":
            y = b.call("nn.global_avg_pool2d", ins[0])
        elif kind == "route":
            y = conv.route(p, ins)
        elif kind == "shortcut":
            y = conv.activation(b.call("add", ins[0], ins[1]), p.layer.str("activation", "linear"))
        elif kind == "upsample":
            y = conv.upsample(p, ins[0])
        elif kind == "reorg":
            y = conv.reorg(p, ins[0])
        elif kind in ("yolo", "region"):
            y = getattr(conv, kind)(p, ins[0])
            detections.append(y)
        elif kind in ("connected", "softmax"):
            y = getattr(conv, kind)(p, ins[0])
        elif kind == "dropout":
            y = ins[0]  # identity at inference
        else:  # plan_layers has reported it already
            raise UnsupportedLayerError([(p.index, kind, "this layer type is not supported")])
        outs.append(y)
    results = detections or [outs[-1]]
    names = {id(v): f"output{i}" for i, v in enumerate(results)}
    func: Function = b.finish(results, names=names)
    func.verify()
    return IRModule({"main": func}), conv.params


__all__ = ["DetectionHead", "UnsupportedLayerError", "detection_heads", "from_darknet"]
