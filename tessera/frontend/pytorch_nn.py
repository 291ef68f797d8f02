"""ATen converters for convolution, pooling, matrix products, normalizations, softmax and
upsampling. Argument names are those of the ATen schemas.

torch and tessera share the NCHW layout and OIHW weights, so a convolution maps one to one;
torch's symmetric `padding` becomes tessera's begin-then-end pads.
"""

from __future__ import annotations

import math

import numpy as np

from tessera.frontend.conv_transpose import conv_transpose as emit_conv_transpose
from tessera.frontend.pytorch_registry import NodeError, aten_op


def _bias(b, y, bias):
    if bias is None:
        return y
    return b.call("add", y, b.reshape(bias, (bias.type.shape[0],) + (1,) * (y.type.ndim - 2)))


@aten_op("aten.convolution.default")
def convolution(b, input, weight, bias, stride, padding, dilation, transposed, output_padding,
                groups):  # fmt: skip
    nd = weight.type.ndim - 2
    if nd not in (1, 2, 3):
        raise NodeError(f"{nd}-D convolution is not supported")
    attrs = dict(
        strides=tuple(stride) * (nd // len(stride)),
        padding=tuple(padding) * (2 * nd // len(padding)),
        dilation=tuple(dilation) * (nd // len(dilation)),
        groups=int(groups),
    )
    if transposed:
        y = emit_conv_transpose(b, input, weight, output_padding=tuple(output_padding), **attrs)
    else:
        y = b.call(f"nn.conv{nd}d", input, weight, **attrs)
    return _bias(b, y, bias)


@aten_op("aten._native_batch_norm_legit_no_training.default")
def batch_norm(b, input, weight, bias, running_mean, running_var, momentum, eps):
    c = input.type.shape[1]
    dtype = input.type.dtype.numpy_name
    weight = weight if weight is not None else b.const(np.ones(c, dtype))
    bias = bias if bias is not None else b.const(np.zeros(c, dtype))
    y = b.call("nn.batch_norm", input, weight, bias, running_mean, running_var,
               epsilon=float(eps), axis=1)  # fmt: skip
    return y, None, None


def _batch_statistics(b, input, weight, bias, eps):
    """Normalize with the statistics of this batch (what torch does in training mode, and for
    InstanceNorm, which it runs as a batch norm over a reshaped input)."""
    axes = tuple(i for i in range(input.type.ndim) if i != 1)
    mean = b.call("mean", input, axis=axes, keepdims=True)
    centered = b.call("subtract", input, mean)
    var = b.call("mean", b.call("multiply", centered, centered), axis=axes, keepdims=True)
    dtype = input.type.dtype.numpy_name
    y = b.call("multiply", centered, b.call("rsqrt", b.call("add", var, b.scalar(eps, dtype))))
    channel = (input.type.shape[1],) + (1,) * (input.type.ndim - 2)
    if weight is not None:
        y = b.call("multiply", y, b.reshape(weight, channel))
    if bias is not None:
        y = b.call("add", y, b.reshape(bias, channel))
    return y


@aten_op("aten._native_batch_norm_legit.no_stats")
def batch_norm_no_stats(b, input, weight, bias, training, momentum, eps):
    return _batch_statistics(b, input, weight, bias, float(eps)), None, None


@aten_op(
    "aten._native_batch_norm_legit.default", "aten._native_batch_norm_legit_functional.default"
)
def batch_norm_batch_stats(b, input, weight, bias, running_mean, running_var, training, momentum,
                           eps):  # fmt: skip
    if not training:
        y = batch_norm(b, input, weight, bias, running_mean, running_var, momentum, eps)[0]
    else:  # the running statistics' update is a buffer mutation, which inference drops
        y = _batch_statistics(b, input, weight, bias, float(eps))
    return y, None, None, None, None


@aten_op("aten.native_layer_norm.default")
def layer_norm(b, input, normalized_shape, weight, bias, eps):
    shape = tuple(int(d) for d in normalized_shape)
    dtype = input.type.dtype.numpy_name
    weight = weight if weight is not None else b.const(np.ones(shape, dtype))
    bias = bias if bias is not None else b.const(np.zeros(shape, dtype))
    y = b.call("nn.layer_norm", input, weight, bias, axis=-len(shape), epsilon=float(eps))
    return y, None, None


@aten_op("aten.native_group_norm.default")
def group_norm(b, input, weight, bias, N, C, HxW, group, eps):
    """Normalize each group of channels over its channels and positions, then scale/shift."""
    shape = input.type.shape
    x = b.reshape(input, (shape[0], group, int(np.prod(shape[1:])) // group))
    mean = b.call("mean", x, axis=(2,), keepdims=True)
    centered = b.call("subtract", x, mean)
    var = b.call("mean", b.call("multiply", centered, centered), axis=(2,), keepdims=True)
    dtype = input.type.dtype.numpy_name
    inv = b.call("rsqrt", b.call("add", var, b.scalar(eps, dtype)))
    y = b.reshape(b.call("multiply", centered, inv), shape)
    channel = (shape[1],) + (1,) * (len(shape) - 2)
    if weight is not None:
        y = b.call("multiply", y, b.reshape(weight, channel))
    if bias is not None:
        y = b.call("add", y, b.reshape(bias, channel))
    return y, None, None


# -- matrix products --------------------------------------------------------------------------


def _mm(b, a, m):
    """a @ m for 2-D operands; nn.dense when m is W.t() (the weight of a Linear)."""
    source = b.transposed.get(id(m))
    if source is not None:
        return b.call("nn.dense", a, source)
    return b.call("matmul", a, m)


@aten_op("aten.mm.default")
def mm(b, self, mat2):
    return _mm(b, self, mat2)


@aten_op("aten.addmm.default")
def addmm(b, self, mat1, mat2, beta=1, alpha=1):
    y = _mm(b, mat1, mat2)
    if alpha != 1:
        y = b.call("multiply", y, b.scalar(alpha, b.out_dtype))
    if beta == 0:
        return y
    c = self if beta == 1 else b.call("multiply", self, b.scalar(beta, b.out_dtype))
    return b.call("add", y, c)


@aten_op("aten.bmm.default")
def bmm(b, self, mat2):
    return b.call("nn.batch_matmul", self, mat2)


@aten_op("aten.matmul.default")
def matmul(b, self, other):
    return b.call("matmul", self, other)


@aten_op("aten.linear.default")
def linear(b, input, weight, bias=None):
    x = input
    lead = x.type.shape[:-1]
    if x.type.ndim != 2:
        x = b.reshape(x, (int(np.prod(lead)), x.type.shape[-1]))
    y = b.call("nn.dense", x, weight)
    if bias is not None:
        y = b.call("add", y, bias)
    return b.reshape(y, (*lead, weight.type.shape[0]))


# -- softmax ----------------------------------------------------------------------------------


@aten_op("aten._softmax.default")
def softmax(b, self, dim, half_to_float=False):
    return b.call("nn.softmax", self, axis=dim)


@aten_op("aten._log_softmax.default")
def log_softmax(b, self, dim, half_to_float=False):
    return b.call("nn.log_softmax", self, axis=dim)


# -- pooling ----------------------------------------------------------------------------------


def _pool_attrs(nd, kernel_size, stride, padding, dilation=None):
    kernel = tuple(kernel_size) * (nd // len(kernel_size))
    stride = tuple(stride or kernel) * (nd // len(stride or kernel))
    padding = tuple(padding) * (2 * nd // len(padding))
    dilation = tuple(dilation or (1,)) * (nd // len(dilation or (1,)))
    return dict(pool_size=kernel, strides=stride, padding=padding, dilation=dilation)


def _max_pool(nd):
    def convert(b, self, kernel_size, stride=(), padding=(0,), dilation=(1,), ceil_mode=False):
        attrs = _pool_attrs(nd, kernel_size, stride, padding, dilation)
        return b.call(f"nn.max_pool{nd}d", self, ceil_mode=bool(ceil_mode), **attrs), None

    return convert


def _avg_pool(nd):
    def convert(b, self, kernel_size, stride=(), padding=(0,), ceil_mode=False,
                count_include_pad=True, divisor_override=None):  # fmt: skip
        if divisor_override is not None:
            raise NodeError("divisor_override is not supported")
        attrs = _pool_attrs(nd, kernel_size, stride, padding)
        return b.call(f"nn.avg_pool{nd}d", self, ceil_mode=bool(ceil_mode),
                      count_include_pad=bool(count_include_pad), **attrs)  # fmt: skip

    return convert


for _nd in (1, 2, 3):
    aten_op(f"aten.max_pool{_nd}d_with_indices.default")(_max_pool(_nd))
    aten_op(f"aten.avg_pool{_nd}d.default")(_avg_pool(_nd))


@aten_op("aten.max_pool2d.default", "aten.max_pool1d.default")
def max_pool(b, self, kernel_size, stride=(), padding=(0,), dilation=(1,), ceil_mode=False):
    return _max_pool(self.type.ndim - 2)(b, self, kernel_size, stride, padding, dilation,
                                         ceil_mode)[0]  # fmt: skip


def _adaptive(kind):
    def convert(b, self, output_size):
        nd = len(output_size)
        spatial = self.type.shape[-nd:]
        out = tuple(int(o) for o in output_size)
        if all(o == 1 for o in out) and self.type.ndim == nd + 2:
            return b.call(f"nn.global_{kind}_pool{nd}d", self)
        if all(i % o == 0 for i, o in zip(spatial, out, strict=True)) and self.type.ndim == nd + 2:
            k = tuple(i // o for i, o in zip(spatial, out, strict=True))
            return b.call(f"nn.{kind}_pool{nd}d", self, pool_size=k, strides=k,
                          padding=(0,) * (2 * nd), dilation=(1,) * nd)  # fmt: skip
        return _adaptive_bins(b, kind, self, out)

    return convert


def _adaptive_bins(b, kind, x, out):
    """Uneven bins: output i of an axis of n covers [floor(i n / o), ceil((i + 1) n / o))."""
    nd = len(out)
    for k, o in enumerate(out):
        axis = x.type.ndim - nd + k
        n = x.type.shape[axis]
        parts = []
        for i in range(o):
            start, end = (i * n) // o, math.ceil((i + 1) * n / o)
            begin, stop = [0] * x.type.ndim, list(x.type.shape)
            begin[axis], stop[axis] = start, end
            piece = b.call("slice", x, begin=tuple(begin), end=tuple(stop),
                           strides=(1,) * x.type.ndim)  # fmt: skip
            op = "mean" if kind == "avg" else "max"
            parts.append(b.call(op, piece, axis=(axis,), keepdims=True))
        x = parts[0] if o == 1 else b.call("concatenate", *parts, axis=axis)
    return x


aten_op("aten._adaptive_avg_pool2d.default", "aten.adaptive_avg_pool2d.default",
        "aten._adaptive_avg_pool1d.default", "aten.adaptive_avg_pool1d.default",
        "aten._adaptive_avg_pool3d.default", "aten.adaptive_avg_pool3d.default")(
    _adaptive("avg"))  # fmt: skip


@aten_op("aten.adaptive_max_pool2d.default", "aten.adaptive_max_pool1d.default")
def adaptive_max_pool(b, self, output_size):
    return _adaptive("max")(b, self, output_size), None


# -- upsampling -------------------------------------------------------------------------------


def _upsample(b, x, output_size, scale_factors, mode, align_corners=False):
    nd = x.type.ndim - 2
    spatial = x.type.shape[2:]
    if output_size is not None:
        size = tuple(int(s) for s in output_size)
        scales = tuple(o / i for o, i in zip(size, spatial, strict=True))
    else:
        scales = tuple(float(s) for s in scale_factors) * (nd // len(scale_factors))
        size = tuple(int(math.floor(i * s)) for i, s in zip(spatial, scales, strict=True))
    if mode == "nearest":
        coord, nearest = "asymmetric", "floor"
    else:
        coord, nearest = ("align_corners" if align_corners else "pytorch_half_pixel"), "floor"
    return b.call("image.resize", x, size=x.type.shape[:2] + size, scales=(1.0, 1.0) + scales,
                  mode=mode, coordinate_transformation_mode=coord,
                  nearest_mode=nearest)  # fmt: skip


def _scales(*scales):
    return None if all(s is None for s in scales) else tuple(scales)


@aten_op("aten.upsample_nearest2d.vec", "aten.upsample_nearest1d.vec",
         "aten.upsample_nearest3d.vec")  # fmt: skip
def upsample_nearest_vec(b, input, output_size, scale_factors):
    return _upsample(b, input, output_size, scale_factors, "nearest")


@aten_op("aten.upsample_nearest2d.default")
def upsample_nearest2d(b, self, output_size, scales_h=None, scales_w=None):
    return _upsample(b, self, output_size, None, "nearest")


@aten_op("aten.upsample_bilinear2d.vec", "aten.upsample_linear1d.vec")
def upsample_bilinear_vec(b, input, output_size, align_corners, scale_factors):
    return _upsample(b, input, output_size, scale_factors, "linear", align_corners)


@aten_op("aten.upsample_bilinear2d.default")
def upsample_bilinear2d(b, self, output_size, align_corners, scales_h=None, scales_w=None):
    return _upsample(b, self, output_size, None, "linear", align_corners)


_GRID_MODES = {0: "linear", 1: "nearest", 2: "cubic"}
_GRID_PADDING = {0: "zeros", 1: "border", 2: "reflection"}


@aten_op("aten.grid_sampler_2d.default")
def grid_sampler_2d(b, input, grid, interpolation_mode, padding_mode, align_corners):
    """ONNX's GridSample was modeled on torch's: the same modes, coordinates and padding."""
    return b.call("image.grid_sample", input, grid, mode=_GRID_MODES[interpolation_mode],
                  padding_mode=_GRID_PADDING[padding_mode],
                  align_corners=int(align_corners))  # fmt: skip
