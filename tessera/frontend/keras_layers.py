"""Keras converters for activations, Dense, convolutions, pooling, normalization, merging and
reshaping layers. Config keys and defaults are Keras 3's (Keras 2 spellings where they differ).

Spatial layers take channels-last values and return channels-last values; inside they run
tessera's NCHW ops with OIHW weights (Keras kernels are (*kernel, in, out), transposed when
converting and folded).
"""

from __future__ import annotations

import numpy as np

from tessera.frontend.conv_transpose import conv_transpose as emit_conv_transpose
from tessera.frontend.keras_registry import LayerError, keras_layer

# -- activations ------------------------------------------------------------------------------

_SIMPLE = {
    "relu": "nn.relu", "sigmoid": "sigmoid", "tanh": "tanh", "softplus": "nn.softplus",
    "softsign": "nn.softsign", "selu": "nn.selu", "elu": "nn.elu", "exponential": "exp",
    "mish": "nn.mish", "hard_silu": "nn.hardswish", "hard_swish": "nn.hardswish",
}  # fmt: skip


def _activation_name(spec) -> str:
    if spec is None:
        return "linear"
    if isinstance(spec, dict):  # a serialized function
        spec = spec.get("config", spec.get("class_name"))
        if isinstance(spec, dict):
            spec = spec.get("name", "")
    return str(spec)


def activation(b, spec, x):
    """Apply a Keras activation given by name (or serialized) to x."""
    name = _activation_name(spec)
    if name == "linear":
        return x
    if name in _SIMPLE:
        return b.call(_SIMPLE[name], x)
    if name in ("silu", "swish"):
        return b.call("multiply", x, b.call("sigmoid", x))
    if name == "gelu":
        return b.call("nn.gelu", x, approximate="none")
    if name == "relu6":
        return b.call("clip", x, a_min=0.0, a_max=6.0)
    if name == "hard_sigmoid":  # Keras 3: relu6(x + 3) / 6
        return b.call("nn.hardsigmoid", x, alpha=1.0 / 6.0, beta=0.5)
    if name == "leaky_relu":
        return b.call("nn.leaky_relu", x, alpha=0.2)
    if name == "softmax":
        return b.call("nn.softmax", x, axis=-1)
    if name == "log_softmax":
        return b.call("nn.log_softmax", x, axis=-1)
    raise LayerError(f"activation {name!r} is not supported")


def _layout_free(b, x, fn):
    """Apply an element-wise `fn` where x's data is in NCHW (if x is a transposed view) so the
    layout changes around it cancel."""
    source = b.transpose_source(x)
    if source is None:
        return fn(x)
    src, axes = source
    return b.transpose(fn(src), axes)


@keras_layer("Activation")
def activation_layer(b, config, x, **_):
    name = _activation_name(config.get("activation"))
    if name in ("softmax", "log_softmax"):
        return activation(b, name, x)
    return _layout_free(b, x, lambda v: activation(b, name, v))


@keras_layer("ReLU")
def relu(b, config, x, **_):
    max_value = config.get("max_value")
    slope = float(config.get("negative_slope", 0.0) or 0.0)
    threshold = float(config.get("threshold", 0.0) or 0.0)

    def apply(v):
        if threshold:
            below = b.call("less", v, b.scalar(threshold, v))
            shifted = b.call("multiply", b.call("subtract", v, b.scalar(threshold, v)),
                             b.scalar(slope, v))  # fmt: skip
            y = b.call("where", below, shifted, v)
        elif slope:
            y = b.call("nn.leaky_relu", v, alpha=slope)
        elif max_value is not None:  # ReLU6 and friends: one clip
            return b.call("clip", v, a_min=0.0, a_max=float(max_value))
        else:
            y = b.call("nn.relu", v)
        return y if max_value is None else b.call("minimum", y, b.scalar(max_value, v))

    return _layout_free(b, x, apply)


@keras_layer("LeakyReLU")
def leaky_relu(b, config, x, **_):
    slope = config.get("negative_slope", config.get("alpha", 0.3))
    return _layout_free(b, x, lambda v: b.call("nn.leaky_relu", v, alpha=float(slope)))


@keras_layer("ELU")
def elu(b, config, x, **_):
    return _layout_free(b, x, lambda v: b.call("nn.elu", v, alpha=float(config.get("alpha", 1.0))))


@keras_layer("Softmax")
def softmax(b, config, x, mask=None, **_):
    if mask is not None:
        raise LayerError("a softmax mask is not supported")
    axis = config.get("axis", -1)
    if isinstance(axis, list):
        if len(axis) != 1:
            raise LayerError(f"softmax over several axes {axis} is not supported")
        axis = axis[0]
    return b.call("nn.softmax", x, axis=int(axis))


@keras_layer("PReLU")
def prelu(b, config, x, **_):
    (alpha,) = b.weights(1)
    shape = (1,) + tuple(alpha.type.shape)  # shared axes are stored as size-1 dims
    return b.call("nn.prelu", x, b.reshape(alpha, shape))


@keras_layer("Dropout", "SpatialDropout1D", "SpatialDropout2D", "GaussianNoise",
             "GaussianDropout", "AlphaDropout", "Identity", "ActivityRegularization")  # fmt: skip
def identity(b, config, x, *rest, **_):
    return x


@keras_layer("Rescaling")
def rescaling(b, config, x, **_):
    scale, offset = config.get("scale", 1.0), config.get("offset", 0.0)
    y = b.call("multiply", x, b.const(np.asarray(scale, dtype=x.type.dtype.numpy_name)))
    if np.any(np.asarray(offset) != 0):
        y = b.call("add", y, b.const(np.asarray(offset, dtype=x.type.dtype.numpy_name)))
    return y


# -- Dense ------------------------------------------------------------------------------------


def dense(b, x, kernel, bias=None):
    """x @ kernel (+ bias) over the last axis of x, as nn.dense with the folded kernel.T."""
    lead, k = x.type.shape[:-1], x.type.shape[-1]
    units = kernel.type.shape[-1]
    flat = b.reshape(x, (int(np.prod(lead)), k))
    y = b.call("nn.dense", flat, b.call("transpose", kernel, axes=(1, 0)))
    if bias is not None:
        y = b.call("add", y, bias)
    return b.reshape(y, (*lead, units))


@keras_layer("Dense")
def dense_layer(b, config, x, **_):
    use_bias = config.get("use_bias", True)
    weights = b.weights(2 if use_bias else 1)
    y = dense(b, x, weights[0], weights[1] if use_bias else None)
    return activation(b, config.get("activation"), y)


# -- convolutions -----------------------------------------------------------------------------


def _tuple(v, nd):
    return tuple(v) if isinstance(v, (list, tuple)) else (v,) * nd


def _same_pads(in_shape, kernel, strides, dilation):
    """TensorFlow's SAME: the output is ceil(in / stride); the extra pad goes at the end."""
    nd = len(kernel)
    pads = [0] * (2 * nd)
    for i in range(nd):
        out = -(-in_shape[i] // strides[i])
        total = max(0, (out - 1) * strides[i] + (kernel[i] - 1) * dilation[i] + 1 - in_shape[i])
        pads[i], pads[i + nd] = total // 2, total - total // 2
    return tuple(pads)


def _padding(config, x_cf, kernel, strides, dilation):
    nd = len(kernel)
    mode = config.get("padding", "valid")
    if mode == "valid":
        return (0,) * (2 * nd)
    if mode == "same":
        return _same_pads(x_cf.type.shape[2:], kernel, strides, dilation)
    if mode == "causal" and nd == 1:
        return ((kernel[0] - 1) * dilation[0], 0)
    raise LayerError(f"padding {mode!r} is not supported")


def _check_channels_last(config):
    if config.get("data_format", "channels_last") != "channels_last":
        raise LayerError("data_format='channels_first' is not supported")


def _conv(b, x_cf, w_oihw, config, groups=1, strides=None, dilation=None, padding=None):
    nd = w_oihw.type.ndim - 2
    kernel = w_oihw.type.shape[2:]
    strides = strides or _tuple(config.get("strides", 1), nd)
    dilation = dilation or _tuple(config.get("dilation_rate", 1), nd)
    pads = padding if padding is not None else _padding(config, x_cf, kernel, strides, dilation)
    return b.call(f"nn.conv{nd}d", x_cf, w_oihw, strides=strides, padding=pads,
                  dilation=dilation, groups=groups)  # fmt: skip


def _finish_conv(b, config, y_cf, bias):
    if bias is not None:
        y_cf = b.call("add", y_cf, b.reshape(bias, bias.type.shape + (1,) * (y_cf.type.ndim - 2)))
    y_cf = activation(b, config.get("activation"), y_cf)
    return b.to_channels_last(y_cf)


def _oihw(b, kernel):
    """(*k, in, out) -> (out, in, *k)."""
    nd = kernel.type.ndim - 2
    return b.call("transpose", kernel, axes=(nd + 1, nd, *range(nd)))


@keras_layer("Conv1D", "Conv2D", "Conv3D")
def conv(b, config, x, **_):
    _check_channels_last(config)
    use_bias = config.get("use_bias", True)
    weights = b.weights(2 if use_bias else 1)
    y = _conv(b, b.to_channels_first(x), _oihw(b, weights[0]), config,
              groups=int(config.get("groups", 1)))  # fmt: skip
    return _finish_conv(b, config, y, weights[1] if use_bias else None)


def _depthwise_oihw(b, kernel):
    """(*k, in, multiplier) -> (in * multiplier, 1, *k): output channel c * multiplier + m."""
    nd = kernel.type.ndim - 2
    cin, mult = kernel.type.shape[-2:]
    w = b.call("transpose", kernel, axes=(nd, nd + 1, *range(nd)))
    return b.reshape(w, (cin * mult, 1, *kernel.type.shape[:nd]))


@keras_layer("DepthwiseConv1D", "DepthwiseConv2D")
def depthwise_conv(b, config, x, **_):
    _check_channels_last(config)
    use_bias = config.get("use_bias", True)
    weights = b.weights(2 if use_bias else 1)
    x_cf = b.to_channels_first(x)
    y = _conv(b, x_cf, _depthwise_oihw(b, weights[0]), config, groups=x_cf.type.shape[1])
    return _finish_conv(b, config, y, weights[1] if use_bias else None)


@keras_layer("SeparableConv1D", "SeparableConv2D")
def separable_conv(b, config, x, **_):
    _check_channels_last(config)
    use_bias = config.get("use_bias", True)
    weights = b.weights(3 if use_bias else 2)
    x_cf = b.to_channels_first(x)
    y = _conv(b, x_cf, _depthwise_oihw(b, weights[0]), config, groups=x_cf.type.shape[1])
    nd = y.type.ndim - 2
    y = _conv(b, y, _oihw(b, weights[1]), config, strides=(1,) * nd, dilation=(1,) * nd,
              padding=(0,) * (2 * nd))  # fmt: skip
    return _finish_conv(b, config, y, weights[2] if use_bias else None)


def _transpose_pads(config, in_shape, kernel, strides, dilation):
    """Keras's output length of a transposed convolution (`deconv_output_length`), as the
    begin/end pads and output padding of tessera's conv_transpose (ONNX semantics)."""
    nd = len(kernel)
    mode = config.get("padding", "valid")
    output_padding = config.get("output_padding")
    output_padding = _tuple(output_padding, nd) if output_padding is not None else None
    begin, end, extra = [], [], []
    for i in range(nd):
        k = (kernel[i] - 1) * dilation[i] + 1
        full = (in_shape[i] - 1) * strides[i] + k  # the output with no padding
        if output_padding is None:
            out = in_shape[i] * strides[i] if mode == "same" else full + max(strides[i] - k, 0)
        else:
            pad = k // 2 if mode == "same" else 0
            out = full - 2 * pad + output_padding[i]
        total = full - out
        if total >= 0:
            begin.append(total // 2)
            end.append(total - total // 2)
            extra.append(0)
        else:  # the output reaches past the last window: extend with output padding
            begin.append(0)
            end.append(0)
            extra.append(-total)
    return tuple(begin + end), tuple(extra)


@keras_layer("Conv1DTranspose", "Conv2DTranspose", "Conv3DTranspose")
def conv_transpose(b, config, x, **_):
    _check_channels_last(config)
    use_bias = config.get("use_bias", True)
    weights = b.weights(2 if use_bias else 1)
    kernel = weights[0]  # (*k, out, in) -> (in, out, *k)
    nd = kernel.type.ndim - 2
    w = b.call("transpose", kernel, axes=(nd + 1, nd, *range(nd)))
    x_cf = b.to_channels_first(x)
    strides = _tuple(config.get("strides", 1), nd)
    dilation = _tuple(config.get("dilation_rate", 1), nd)
    pads, extra = _transpose_pads(config, x_cf.type.shape[2:], kernel.type.shape[:nd], strides,
                                  dilation)  # fmt: skip
    y = emit_conv_transpose(b, x_cf, w, strides=strides, padding=pads, dilation=dilation,
                            groups=1, output_padding=extra)  # fmt: skip
    return _finish_conv(b, config, y, weights[1] if use_bias else None)


# -- pooling ----------------------------------------------------------------------------------


def _pool(kind, nd):
    def convert(b, config, x, **_):
        _check_channels_last(config)
        size = _tuple(config.get("pool_size", 2), nd)
        strides = _tuple(config.get("strides") or size, nd)
        x_cf = b.to_channels_first(x)
        pads = _padding(config, x_cf, size, strides, (1,) * nd)
        y = b.call(f"nn.{kind}_pool{nd}d", x_cf, pool_size=size, strides=strides, padding=pads,
                   dilation=(1,) * nd, ceil_mode=False, count_include_pad=False)  # fmt: skip
        return b.to_channels_last(y)

    return convert


def _global_pool(kind, nd):
    def convert(b, config, x, **_):
        _check_channels_last(config)
        x_cf = b.to_channels_first(x)
        y = b.call(f"nn.global_{kind}_pool{nd}d", x_cf)
        if config.get("keepdims", False):
            return b.to_channels_last(y)
        return b.reshape(y, y.type.shape[:2])

    return convert


for _nd in (1, 2, 3):
    for _kind, _name in (("max", "MaxPooling"), ("avg", "AveragePooling")):
        keras_layer(f"{_name}{_nd}D")(_pool(_kind, _nd))
    keras_layer(f"GlobalMaxPooling{_nd}D")(_global_pool("max", _nd))
    keras_layer(f"GlobalAveragePooling{_nd}D")(_global_pool("avg", _nd))


# -- normalization ----------------------------------------------------------------------------


def _axes(config, ndim, default=-1):
    axis = config.get("axis", default)
    axis = axis if isinstance(axis, (list, tuple)) else [axis]
    return sorted(int(a) % ndim for a in axis)


@keras_layer("BatchNormalization")
def batch_norm(b, config, x, mask=None, training=None, **_):
    (axis,) = _axes(config, x.type.ndim)
    scale, center = config.get("scale", True), config.get("center", True)
    weights = list(b.weights(2 + scale + center))
    dtype = x.type.dtype.numpy_name
    c = x.type.shape[axis]
    gamma = weights.pop(0) if scale else b.const(np.ones(c, dtype))
    beta = weights.pop(0) if center else b.const(np.zeros(c, dtype))
    mean, var = weights[:2]
    eps = float(config.get("epsilon", 1e-3))
    source = b.transpose_source(x)
    if source is not None:  # x is a view of NCHW data: normalize that data along the same axis
        src, axes = source
        y = b.call("nn.batch_norm", src, gamma, beta, mean, var, epsilon=eps, axis=axes[axis])
        return b.transpose(y, axes)
    return b.call("nn.batch_norm", x, gamma, beta, mean, var, epsilon=eps, axis=axis)


@keras_layer("LayerNormalization")
def layer_norm(b, config, x, **_):
    axes = _axes(config, x.type.ndim)
    if axes != list(range(axes[0], x.type.ndim)):
        raise LayerError(f"normalizing over axes {axes} (not the trailing ones) is not supported")
    if config.get("rms_scaling", False):
        raise LayerError("rms_scaling=True is not supported")
    scale, center = config.get("scale", True), config.get("center", True)
    weights = list(b.weights(scale + center))
    shape = x.type.shape[axes[0] :]
    dtype = x.type.dtype.numpy_name
    gamma = b.reshape(weights.pop(0), shape) if scale else b.const(np.ones(shape, dtype))
    beta = b.reshape(weights.pop(0), shape) if center else b.const(np.zeros(shape, dtype))
    eps = float(config.get("epsilon", 1e-3))
    return b.call("nn.layer_norm", x, gamma, beta, axis=axes[0], epsilon=eps)


# -- merging ----------------------------------------------------------------------------------


def _merge(op):
    def convert(b, config, inputs, **_):
        if not isinstance(inputs, list) or len(inputs) < 2:
            raise LayerError("needs a list of at least two inputs")
        # Views of NCHW data with the same transpose merge in NCHW (the transposes cancel).
        sources = [b.transpose_source(v) for v in inputs]
        same = all(s is not None and s[1] == sources[0][1] for s in sources)
        values = [s[0] for s in sources] if same else inputs
        out = values[0]
        for v in values[1:]:
            out = b.call("add" if op == "average" else op, out, v)
        if op == "average":
            out = b.call("divide", out, b.scalar(len(values), out))
        return b.transpose(out, sources[0][1]) if same else out

    return convert


for _cls, _op in (("Add", "add"), ("Multiply", "multiply"), ("Maximum", "maximum"),
                  ("Minimum", "minimum"), ("Average", "average")):  # fmt: skip
    keras_layer(_cls)(_merge(_op))


@keras_layer("Subtract")
def subtract(b, config, inputs, **_):
    if not isinstance(inputs, list) or len(inputs) != 2:
        raise LayerError("needs exactly two inputs")
    return b.call("subtract", inputs[0], inputs[1])


@keras_layer("Concatenate")
def concatenate(b, config, inputs, **_):
    axis = int(config.get("axis", -1)) % inputs[0].type.ndim
    return b.call("concatenate", *inputs, axis=axis)


# -- reshaping --------------------------------------------------------------------------------


@keras_layer("Reshape")
def reshape(b, config, x, **_):
    target = [int(d) for d in config["target_shape"]]
    if -1 in target:
        known = int(np.prod([d for d in target if d != -1]))
        target[target.index(-1)] = int(np.prod(x.type.shape[1:])) // max(known, 1)
    return b.reshape(x, (x.type.shape[0], *target))


@keras_layer("Flatten")
def flatten(b, config, x, **_):
    _check_channels_last(config)
    return b.reshape(x, (x.type.shape[0], int(np.prod(x.type.shape[1:]))))


@keras_layer("Permute")
def permute(b, config, x, **_):
    return b.transpose(x, (0, *[int(d) for d in config["dims"]]))


@keras_layer("RepeatVector")
def repeat_vector(b, config, x, **_):
    n = int(config["n"])
    return b.call("expand", b.reshape(x, (x.type.shape[0], 1, x.type.shape[1])),
                  shape=(x.type.shape[0], n, x.type.shape[1]))  # fmt: skip


def _pairs(value, nd):
    """Keras padding/cropping specs: an int, a pair per axis, or one (begin, end) per axis."""
    if isinstance(value, int):
        return [(value, value)] * nd
    value = list(value)
    if all(isinstance(v, int) for v in value) and len(value) == nd and nd > 1:
        return [(v, v) for v in value]
    if nd == 1 and len(value) == 2 and all(isinstance(v, int) for v in value):
        return [tuple(value)]
    return [tuple(v) if isinstance(v, (list, tuple)) else (v, v) for v in value]


def _zero_padding(nd):
    def convert(b, config, x, **_):
        _check_channels_last(config)
        pairs = _pairs(config.get("padding", 1), nd)
        n = x.type.ndim
        width = [0] * (2 * n)
        for i, (lo, hi) in enumerate(pairs):
            width[1 + i], width[1 + i + n] = lo, hi
        return b.call("pad", x, pad_width=tuple(width), mode="constant", value=0.0)

    return convert


def _cropping(nd):
    def convert(b, config, x, **_):
        _check_channels_last(config)
        pairs = _pairs(config.get("cropping", 1), nd)
        begin, end = [0] * x.type.ndim, list(x.type.shape)
        for i, (lo, hi) in enumerate(pairs):
            begin[1 + i], end[1 + i] = lo, x.type.shape[1 + i] - hi
        return b.call("slice", x, begin=tuple(begin), end=tuple(end),
                      strides=(1,) * x.type.ndim)  # fmt: skip

    return convert


for _nd in (1, 2, 3):
    keras_layer(f"ZeroPadding{_nd}D")(_zero_padding(_nd))
    keras_layer(f"Cropping{_nd}D")(_cropping(_nd))


@keras_layer("UpSampling2D")
def upsampling2d(b, config, x, **_):
    _check_channels_last(config)
    sh, sw = _tuple(config.get("size", 2), 2)
    mode = config.get("interpolation", "nearest")
    if mode not in ("nearest", "bilinear"):
        raise LayerError(f"interpolation {mode!r} is not supported")
    n, h, w, c = x.type.shape
    coord = "asymmetric" if mode == "nearest" else "half_pixel"
    return b.call("image.resize", x, size=(n, h * sh, w * sw, c), scales=(1.0, sh, sw, 1.0),
                  mode="nearest" if mode == "nearest" else "linear",
                  coordinate_transformation_mode=coord, nearest_mode="floor")  # fmt: skip


@keras_layer("UpSampling1D")
def upsampling1d(b, config, x, **_):
    n, steps, c = x.type.shape
    size = int(config.get("size", 2))
    y = b.call("expand", b.reshape(x, (n, steps, 1, c)), shape=(n, steps, size, c))
    return b.reshape(y, (n, steps * size, c))
