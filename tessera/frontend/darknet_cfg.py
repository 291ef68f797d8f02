"""Darknet model files in pure Python: the `.cfg` text, the layer plan, the `.weights` binary.

    net = read_cfg("yolov3-tiny.cfg")        # DarknetNet: [net] options + one Layer per section
    plan = plan_layers(net, (3, 416, 416))   # each layer's output (c, h, w) and weight counts
    arrays = read_weights("yolov3-tiny.weights", plan)  # per layer: {"biases": ..., ...}

A `.cfg` is a list of `[section]`s of `key=value` lines (`#` and `;` start comments). The first
section is `[net]` (or `[network]`): the input size. A `.weights` file is a header (int32 major,
minor, revision, then `seen`: uint64 when major*10+minor >= 2, else int32) followed by float32
arrays, per convolutional layer in order: biases[n], then with batch_normalize scales[n],
rolling_mean[n], rolling_variance[n], then weights[n, c/groups, size, size].
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

# What `plan_layers` and the converter understand; anything else is reported as unsupported.
SUPPORTED_LAYERS = (
    "convolutional",
    "maxpool",
    "avgpool",
    "route",
    "shortcut",
    "upsample",
    "yolo",
    "region",
    "reorg",
    "dropout",
    "connected",
    "softmax",
)
ACTIVATIONS = ("leaky", "linear", "mish", "logistic", "relu", "swish", "tanh")
_CONV_UNSUPPORTED = {"binary": "0", "xnor": "0", "dilation": "1", "stride_x": None,
                     "stride_y": None, "antialiasing": "0", "deform": "0", "share_index": None,
                     "flipped": "0", "coordconv": "0", "sway": "0", "rotate": "0",
                     "stretch": "0", "stretch_sway": "0"}  # fmt: skip


class UnsupportedLayerError(ValueError):
    """The cfg uses layers or options tessera cannot convert; `layers` lists (index, type, why)."""

    def __init__(self, layers: list[tuple[int, str, str]]):
        self.layers = layers
        lines = [f"  layer {i} [{kind}]: {why}" for i, kind, why in layers]
        super().__init__(
            f"the cfg has {len(layers)} unsupported layer(s) or option(s):\n" + "\n".join(lines)
        )


@dataclass
class Layer:
    """One `[section]` of a cfg: its type, options (strings) and the line it starts on."""

    kind: str
    options: dict[str, str]
    line: int

    def _get(self, key, default, cast):
        if key not in self.options:
            if default is None:
                raise ValueError(f"[{self.kind}] at line {self.line} needs option {key!r}")
            return default
        try:
            return cast(self.options[key])
        except ValueError:
            raise ValueError(
                f"[{self.kind}] at line {self.line}: option {key}={self.options[key]!r} is not "
                f"a valid {cast.__name__}"
            ) from None

    def int(self, key: str, default=None) -> int:
        return self._get(key, default, int)

    def float(self, key: str, default=None) -> float:
        return self._get(key, default, float)

    def str(self, key: str, default=None) -> str:
        return self._get(key, default, str)

    def ints(self, key: str, default=None) -> list[int]:
        if key not in self.options and default is not None:
            return list(default)
        text = self.str(key)
        try:
            return [int(v) for v in text.split(",") if v.strip()]
        except ValueError:
            raise ValueError(
                f"[{self.kind}] at line {self.line}: option {key}={text!r} is not a list of ints"
            ) from None

    def floats(self, key: str) -> list[float]:
        text = self.str(key)
        try:
            return [float(v) for v in text.split(",") if v.strip()]
        except ValueError:
            raise ValueError(
                f"[{self.kind}] at line {self.line}: option {key}={text!r} is not a list of numbers"
            ) from None


@dataclass
class DarknetNet:
    net: Layer
    layers: list[Layer] = field(default_factory=list)

    @property
    def input_shape(self) -> tuple[int, int, int]:
        """(channels, height, width) from [net]."""
        return (
            self.net.int("channels", 3),
            self.net.int("height", 416),
            self.net.int("width", 416),
        )


def parse_cfg(text: str, source: str = "<cfg>") -> DarknetNet:
    """Parse the text of a `.cfg` file."""
    sections: list[Layer] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].split(";", 1)[0].strip()
        if not line:
            continue
        if line.startswith("["):
            if not line.endswith("]") or len(line) < 3:
                raise ValueError(f"{source}:{lineno}: malformed section header {raw.strip()!r}")
            sections.append(Layer(line[1:-1].strip().lower(), {}, lineno))
            continue
        if "=" not in line:
            raise ValueError(f"{source}:{lineno}: expected key=value, got {raw.strip()!r}")
        if not sections:
            raise ValueError(f"{source}:{lineno}: an option before the first [section]")
        key, value = line.split("=", 1)
        sections[-1].options[key.strip()] = value.strip()
    if not sections or sections[0].kind not in ("net", "network"):
        raise ValueError(f"{source}: a Darknet cfg starts with a [net] section")
    return DarknetNet(sections[0], sections[1:])


def read_cfg(path) -> DarknetNet:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise ValueError(f"cannot read Darknet cfg {str(path)!r}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{str(path)!r} is not a text file (a Darknet cfg is text)") from None
    return parse_cfg(text, str(path))


# -- the layer plan ---------------------------------------------------------------------------


@dataclass
class LayerPlan:
    """A layer with its input and output shapes (c, h, w) and the inputs it reads."""

    index: int
    layer: Layer
    in_shape: tuple[int, int, int]
    out_shape: tuple[int, int, int]
    inputs: tuple[int, ...]  # absolute indices of the layers read (-1: the network input)
    weight_counts: dict[str, int] = field(default_factory=dict)  # in file order


def _unsupported_options(layer: Layer) -> str | None:
    kind, opt = layer.kind, layer.options
    if kind not in SUPPORTED_LAYERS:
        return "this layer type is not supported"
    if kind in ("convolutional", "shortcut", "connected") and opt.get(
        "activation", "logistic"
    ) not in (ACTIVATIONS):
        return f"activation {opt['activation']!r} is not supported"
    if kind == "convolutional":
        # options that change what a convolution computes; each is refused, never ignored
        for key, default in _CONV_UNSUPPORTED.items():
            if opt.get(key, default) != default:
                return f"option {key}={opt[key]} is not supported"
    if kind == "reorg" and opt.get("reverse", "0") != "0":
        return "reverse reorg is not supported"
    if kind == "yolo" and opt.get("new_coords", "0") != "0":
        return "new_coords=1 is not supported"
    if kind == "softmax" and opt.get("groups", "1") != "1":
        return "a grouped softmax is not supported"
    if kind == "shortcut" and ("weights_type" in opt or "," in opt.get("from", "")):
        return "weighted or multi-input shortcuts are not supported"
    if kind == "upsample" and "stride" in opt and opt["stride"].strip().startswith("-"):
        return "a negative upsample stride (downsampling) is not supported"
    if kind == "maxpool" and ("stride_x" in opt or "stride_y" in opt or "maxpool_depth" in opt):
        return "stride_x/stride_y/maxpool_depth are not supported"
    return None


def check_supported(net: DarknetNet) -> None:
    """Raise UnsupportedLayerError listing every unsupported layer or option at once."""
    bad = []
    for i, layer in enumerate(net.layers):
        why = _unsupported_options(layer)
        if why:
            bad.append((i, layer.kind, f"{why} (line {layer.line})"))
    if bad:
        raise UnsupportedLayerError(bad)


def _resolve(i: int, ref: int, layer: Layer) -> int:
    j = i + ref if ref < 0 else ref
    if not 0 <= j < i:
        raise ValueError(
            f"layer {i} [{layer.kind}] at line {layer.line} refers to layer {ref}, which is not "
            "an earlier layer"
        )
    return j


def _conv_plan(layer, c, h, w):
    n, size, stride = layer.int("filters", 1), layer.int("size", 1), layer.int("stride", 1)
    groups = layer.int("groups", 1)
    pad = size // 2 if layer.int("pad", 0) else layer.int("padding", 0)
    if n < 1 or size < 1 or stride < 1 or groups < 1 or c % groups or n % groups:
        raise ValueError(
            f"[convolutional] at line {layer.line}: filters={n}, size={size}, stride={stride}, "
            f"groups={groups} do not fit {c} input channels"
        )
    oh, ow = (h + 2 * pad - size) // stride + 1, (w + 2 * pad - size) // stride + 1
    counts = {"biases": n}
    if layer.int("batch_normalize", 0):
        counts.update(scales=n, rolling_mean=n, rolling_variance=n)
    counts["weights"] = n * (c // groups) * size * size
    return (n, oh, ow), counts


def _layer_shape(i, layer, shapes, c, h, w):
    """(output shape, inputs, weight counts) of layer i whose input is (c, h, w)."""
    kind = layer.kind
    if kind == "convolutional":
        out, counts = _conv_plan(layer, c, h, w)
        return out, (i - 1,), counts
    if kind == "maxpool":
        stride = layer.int("stride", 1)
        size = layer.int("size", stride)
        padding = layer.int("padding", size - 1)
        return (
            (c, (h + padding - size) // stride + 1, (w + padding - size) // stride + 1),
            (i - 1,),
            {},
        )
    if kind == "avgpool":
        return (c, 1, 1), (i - 1,), {}
    if kind == "connected":  # weights after biases, then batch norm (not a conv's order)
        n = layer.int("output", 1)
        counts = {"biases": n, "weights": n * c * h * w}
        if layer.int("batch_normalize", 0):
            counts.update(scales=n, rolling_mean=n, rolling_variance=n)
        return (n, 1, 1), (i - 1,), counts
    if kind == "softmax":
        return (c * h * w, 1, 1), (i - 1,), {}
    if kind == "route":
        refs = [_resolve(i, r, layer) for r in layer.ints("layers")]
        groups, group_id = layer.int("groups", 1), layer.int("group_id", 0)
        hw = {shapes[j][1:] for j in refs}
        if len(hw) != 1 or not refs:
            raise ValueError(
                f"[route] at line {layer.line}: layers {refs} have different sizes "
                f"{[shapes[j] for j in refs]}"
            )
        total = sum(shapes[j][0] // groups for j in refs)
        if not 0 <= group_id < groups:
            raise ValueError(f"[route] at line {layer.line}: group_id {group_id} >= groups")
        return (total, *hw.pop()), tuple(refs), {}
    if kind == "shortcut":
        j = _resolve(i, layer.int("from"), layer)
        if shapes[j] != (c, h, w):
            raise ValueError(
                f"[shortcut] at line {layer.line}: adds layer {j} of shape {shapes[j]} to "
                f"{(c, h, w)}; only equal shapes are supported"
            )
        return (c, h, w), (i - 1, j), {}
    if kind == "upsample":
        s = layer.int("stride", 2)
        return (c, h * s, w * s), (i - 1,), {}
    if kind == "reorg":
        s = layer.int("stride", 2)
        if h % s or w % s:
            raise ValueError(f"[reorg] at line {layer.line}: {h}x{w} is not divisible by {s}")
        return (c * s * s, h // s, w // s), (i - 1,), {}
    if kind in ("yolo", "region"):
        _check_detection(layer, c)
    return (c, h, w), (i - 1,), {}  # yolo, region, dropout keep the shape


def _check_detection(layer: Layer, c: int) -> None:
    classes = layer.int("classes", 20)
    anchors = layer.floats("anchors") if "anchors" in layer.options else []
    if layer.kind == "yolo":
        n = len(layer.ints("mask")) if "mask" in layer.options else layer.int("num", 1)
        per = 5 + classes
    else:
        n, per = layer.int("num", 1), layer.int("coords", 4) + 1 + classes
    if c != n * per:
        raise ValueError(
            f"[{layer.kind}] at line {layer.line}: its input has {c} channels, but {n} anchors "
            f"of {classes} classes need {n * per}"
        )
    if len(anchors) % 2 or (layer.kind == "region" and len(anchors) < 2 * n):
        raise ValueError(f"[{layer.kind}] at line {layer.line}: anchors must be (w, h) pairs")


def plan_layers(net: DarknetNet, input_shape=None) -> list[LayerPlan]:
    """Shapes and weight counts of every layer for an input (c, h, w) (default: [net]'s)."""
    check_supported(net)
    c, h, w = input_shape or net.input_shape
    plans, shapes = [], []
    for i, layer in enumerate(net.layers):
        out, inputs, counts = _layer_shape(i, layer, shapes, c, h, w)
        if min(out) < 1:
            raise ValueError(
                f"layer {i} [{layer.kind}] at line {layer.line}: the input {(c, h, w)} is too "
                f"small (output {out})"
            )
        plans.append(LayerPlan(i, layer, (c, h, w), out, inputs, counts))
        shapes.append(out)
        c, h, w = out
    return plans


# -- weights ----------------------------------------------------------------------------------


def _header(data: bytes, source: str) -> int:
    """The byte offset where the float arrays start."""
    if len(data) < 16:
        raise ValueError(f"{source}: too short for a Darknet weights header ({len(data)} bytes)")
    major, minor, _revision = np.frombuffer(data, "<i4", 3)
    if not (0 <= major < 1000 and 0 <= minor < 1000):
        raise ValueError(f"{source}: not a Darknet weights file (header version {major}.{minor})")
    return 20 if major * 10 + minor >= 2 else 16


def read_weights(path_or_bytes, plan: list[LayerPlan]) -> list[dict[str, np.ndarray]]:
    """The weight arrays of every layer (an empty dict for layers without weights)."""
    if isinstance(path_or_bytes, (bytes, bytearray)):
        data, source = bytes(path_or_bytes), "<weights>"
    else:
        source = str(path_or_bytes)
        try:
            data = Path(path_or_bytes).read_bytes()
        except OSError as e:
            raise ValueError(f"cannot read Darknet weights {source!r}: {e.strerror or e}") from None
    offset = _header(data, source)
    if (len(data) - offset) % 4:
        raise ValueError(f"{source}: the data after the header is not a whole number of floats")
    floats = np.frombuffer(data, "<f4", offset=offset)
    need = sum(n for p in plan for n in p.weight_counts.values())
    if floats.size != need:
        raise ValueError(
            f"{source} holds {floats.size} weights after its header, but the cfg needs {need}: "
            "the cfg and the weights do not belong together"
        )
    out, pos = [], 0
    for p in plan:
        arrays = {}
        for name, n in p.weight_counts.items():
            arrays[name] = floats[pos : pos + n].astype(np.float32)
            pos += n
        out.append(arrays)
    return out


def write_weights(path, plan: list[LayerPlan], arrays: list[dict[str, np.ndarray]]) -> None:
    """Write per-layer arrays (as read_weights returns them) in the Darknet format (v0.2)."""
    parts = [np.array([0, 2, 0], "<i4").tobytes(), np.array([0], "<u8").tobytes()]
    for p, layer_arrays in zip(plan, arrays, strict=True):
        for name, n in p.weight_counts.items():
            a = np.asarray(layer_arrays[name], "<f4").ravel()
            if a.size != n:
                raise ValueError(f"layer {p.index}: {name} needs {n} values, got {a.size}")
            parts.append(a.tobytes())
    Path(path).write_bytes(b"".join(parts))


def random_weights(plan: list[LayerPlan], seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Reproducible weights that keep activations of order one through deep networks: He-scaled
    conv weights, batch-norm statistics near the identity."""
    rng = np.random.default_rng(seed)
    out = []
    for p in plan:
        arrays = {}
        if p.layer.kind in ("convolutional", "connected"):
            n = p.out_shape[0]
            fan_in = p.weight_counts["weights"] // n
            arrays["biases"] = rng.uniform(-0.1, 0.1, n)
            if "scales" in p.weight_counts:
                arrays["scales"] = rng.uniform(0.5, 1.0, n)
                arrays["rolling_mean"] = rng.uniform(-0.1, 0.1, n)
                arrays["rolling_variance"] = rng.uniform(0.5, 1.5, n)
            arrays["weights"] = rng.standard_normal(p.weight_counts["weights"]) * (
                1.0 / np.sqrt(fan_in)
            )
            arrays = {k: arrays[k] for k in p.weight_counts}  # the file's order
        out.append({k: np.asarray(v, np.float32) for k, v in arrays.items()})
    return out


__all__ = [
    "DarknetNet",
    "Layer",
    "LayerPlan",
    "UnsupportedLayerError",
    "check_supported",
    "parse_cfg",
    "plan_layers",
    "random_weights",
    "read_cfg",
    "read_weights",
    "write_weights",
]
