"""ONNX converters for ops that compose from other graph ops: the newer normalizations
(RMS, Lp, group, mean-variance), LpPool, GlobalLpPool, Swish, RotaryEmbedding, CenterCropPad,
Compress and the window generators. Semantics follow onnx.reference.
"""

from __future__ import annotations

import numpy as np
from onnx import helper

from tessera.frontend.onnx_nn import _pool
from tessera.frontend.onnx_registry import NodeError, onnx_op
from tessera.graph.ir import parse_dtype

# -- normalizations ---------------------------------------------------------------------------


def _stash(b, x, stash_type):
    """Normalize in float32 (stash_type 1) when x is a narrower float."""
    if stash_type == 1 and x.type.dtype.is_float and x.type.dtype.bits < 32:
        return b.call("cast", x, dtype="float32")
    return x


def _back(b, y, like):
    return y if y.type.dtype == like.type.dtype else b.call("cast", y, dtype=like.type.dtype)


@onnx_op("RMSNormalization", since=23)
def rms_normalization(b, X, scale, *, axis=-1, epsilon=1e-5, stash_type=1):
    x = _stash(b, X, stash_type)
    axes = tuple(range(axis % X.type.ndim, X.type.ndim))
    ms = b.call("mean", b.call("multiply", x, x), axis=axes, keepdims=True)
    y = b.call("multiply", x, b.call("rsqrt", b.call("add", ms, b.scalar(epsilon, ms))))
    return b.call("multiply", _back(b, y, X), scale)


@onnx_op("LpNormalization")
def lp_normalization(b, input, *, axis=-1, p=2):
    if p not in (1, 2):
        raise NodeError(f"p must be 1 or 2, got {p}")
    if p == 1:
        norm = b.call("sum", b.call("abs", input), axis=(axis,), keepdims=True)
    else:
        norm = b.call("sum", b.call("multiply", input, input), axis=(axis,), keepdims=True)
        norm = b.call("sqrt", norm)
    # a zero norm gives 0 (as the reference's where), not NaN
    zero = b.scalar(0, norm)
    is_zero = b.call("equal", norm, zero)
    safe = b.call("where", is_zero, b.scalar(1, norm), norm)
    return b.call("where", is_zero, zero, b.call("divide", input, safe))


@onnx_op("MeanVarianceNormalization", since=9)
def mean_variance_normalization(b, X, *, axes=(0, 2, 3)):
    axes = tuple(int(a) for a in axes)
    mean = b.call("mean", X, axis=axes, keepdims=True)
    centered = b.call("subtract", X, mean)
    var = b.call("mean", b.call("multiply", centered, centered), axis=axes, keepdims=True)
    std = b.call("sqrt", var)
    return b.call("divide", centered, b.call("add", std, b.scalar(1e-9, std)))


def _group_norm(b, X, scale, bias, num_groups, epsilon, stash_type, per_channel):
    shape = b.shape_of(X)
    n, c = shape[0], shape[1]
    if c % num_groups:
        raise NodeError(f"{c} channels do not split into {num_groups} groups")
    x = _stash(b, X, stash_type)
    grouped = b.reshape(x, (n, num_groups, int(np.prod(shape[1:])) // num_groups))
    mean = b.call("mean", grouped, axis=(2,), keepdims=True)
    centered = b.call("subtract", grouped, mean)
    var = b.call("mean", b.call("multiply", centered, centered), axis=(2,), keepdims=True)
    y = b.call("multiply", centered, b.call("rsqrt", b.call("add", var, b.scalar(epsilon, var))))
    y = _back(b, b.reshape(y, shape), X)
    rest = (1,) * (len(shape) - 2)
    if per_channel:
        s, t = b.reshape(scale, (1, c, *rest)), b.reshape(bias, (1, c, *rest))
    else:  # opset 18: one scale and bias per group
        reps = c // num_groups
        s = b.reshape(b.call("expand", b.reshape(scale, (num_groups, 1)), shape=(num_groups, reps)),
                      (1, c, *rest))  # fmt: skip
        t = b.reshape(b.call("expand", b.reshape(bias, (num_groups, 1)), shape=(num_groups, reps)),
                      (1, c, *rest))  # fmt: skip
    return b.call("add", b.call("multiply", y, s), t)


@onnx_op("GroupNormalization", since=18)
def group_normalization_18(b, X, scale, bias, *, epsilon=1e-5, num_groups):
    return _group_norm(b, X, scale, bias, num_groups, epsilon, 0, per_channel=False)


@onnx_op("GroupNormalization", since=21)
def group_normalization_21(b, X, scale, bias, *, epsilon=1e-5, num_groups, stash_type=1):
    return _group_norm(b, X, scale, bias, num_groups, epsilon, stash_type, per_channel=True)


# -- pooling and activations ------------------------------------------------------------------


@onnx_op("LpPool")
def lp_pool(b, X, *, auto_pad="NOTSET", ceil_mode=0, dilations=None, kernel_shape, p=2,
            pads=None, strides=None):  # fmt: skip
    powered = b.call("power", b.call("abs", X), b.scalar(p, X))
    avg = _pool("avg", b, powered, auto_pad, ceil_mode, dilations, kernel_shape, pads, strides, 1)
    total = b.call("multiply", avg, b.scalar(int(np.prod(kernel_shape)), avg))
    return b.call("power", total, b.scalar(1.0 / p, total))


@onnx_op("GlobalLpPool")
def global_lp_pool(b, X, *, p=2):
    """(sum over the spatial axes of |X|^p)^(1/p), keeping the axes (as ONNX Runtime)."""
    if X.type.ndim < 3:
        raise NodeError(f"X must be (N, C, *spatial), got rank {X.type.ndim}")
    powered = b.call("abs", X) if p == 1 else b.call("power", b.call("abs", X), b.scalar(p, X))
    total = b.call("sum", powered, axis=tuple(range(2, X.type.ndim)), keepdims=True)
    return total if p == 1 else b.call("power", total, b.scalar(1.0 / p, total))


@onnx_op("Swish", since=24)
def swish(b, X, *, alpha=1.0):
    scaled = X if alpha == 1.0 else b.call("multiply", X, b.scalar(alpha, X))
    return b.call("multiply", X, b.call("sigmoid", scaled))


@onnx_op("CausalConvWithState", since=27)
def causal_conv_with_state(b, input, weight, bias=None, past_state=None, *, activation="none"):
    n, c, _ = b.shape_of(input)
    k = b.shape_of(weight)[2]
    if past_state is None:
        past_state = b.const(np.zeros((n, c, k - 1), input.type.dtype.numpy_name))
    padded = b.call("concatenate", past_state, input, axis=2) if k > 1 else input
    dtype = input.type.dtype
    wide = dtype.is_float and dtype.bits == 16 or dtype.code == "bfloat"
    # 16-bit floats: the convolution and its bias in float32, rounded once (as the reference)
    x, w = (
        (b.call("cast", v, dtype="float32") for v in (padded, weight)) if wide else (padded, weight)
    )
    y = b.call("nn.conv1d", x, w, strides=(1,), padding=(0, 0), dilation=(1,), groups=c)
    if bias is not None:
        y = b.call("add", y, b.reshape(b.call("cast", bias, dtype="float32") if wide else bias,
                                       (c, 1)))  # fmt: skip
    if wide:
        y = b.call("cast", y, dtype=dtype)
    if activation in ("silu", "swish"):  # in float32 at least, as the reference
        f = _stash(b, y, 1)
        y = _back(b, b.call("multiply", f, b.call("sigmoid", f)), y)
    elif activation not in ("none", None):
        raise NodeError(f"unknown activation {activation!r}")
    total = b.shape_of(padded)[2]
    state = b.call("slice", padded, begin=(0, 0, total - (k - 1)), end=(n, c, total),
                   strides=(1, 1, 1))  # fmt: skip
    return y, state


# -- RotaryEmbedding --------------------------------------------------------------------------


@onnx_op("RotaryEmbedding", since=23)
def rotary_embedding(b, X, cos_cache, sin_cache, position_ids=None, *, interleaved=0,
                     num_heads=0, rotary_embedding_dim=0):  # fmt: skip
    shape = b.shape_of(X)
    if len(shape) == 4:
        x = b.call("transpose", X, axes=(0, 2, 1, 3))  # (batch, seq, heads, head)
    elif num_heads:
        x = b.reshape(X, (shape[0], shape[1], num_heads, shape[2] // num_heads))
    else:
        raise NodeError("a 3-D input needs num_heads")
    n, s, h, d = b.shape_of(x)
    rot = rotary_embedding_dim or d
    if position_ids is not None:
        cos_cache = b.call("gather", cos_cache, position_ids, axis=0)
        sin_cache = b.call("gather", sin_cache, position_ids, axis=0)
    cos = b.reshape(cos_cache, (*b.shape_of(cos_cache)[:-1], 1, rot // 2))
    sin = b.reshape(sin_cache, (*b.shape_of(sin_cache)[:-1], 1, rot // 2))
    if len(b.shape_of(cos_cache)) == 2:  # (seq, rot/2) without position ids
        cos, sin = b.reshape(cos, (1, s, 1, rot // 2)), b.reshape(sin, (1, s, 1, rot // 2))
    x_rot = x if rot == d else b.call("slice", x, begin=(0, 0, 0, 0), end=(n, s, h, rot),
                                      strides=(1, 1, 1, 1))  # fmt: skip
    if interleaved:
        pairs = b.reshape(x_rot, (n, s, h, rot // 2, 2))
        x1, x2 = (b.reshape(t, (n, s, h, rot // 2))
                  for t in b.call("split", pairs, axis=4, sections=(1, 1)))  # fmt: skip
    else:
        x1, x2 = b.call("split", x_rot, axis=3, sections=(rot // 2, rot // 2))
    real = b.call("subtract", b.call("multiply", cos, x1), b.call("multiply", sin, x2))
    imag = b.call("add", b.call("multiply", sin, x1), b.call("multiply", cos, x2))
    if interleaved:
        pair = (n, s, h, rot // 2, 1)
        y = b.call("concatenate", b.reshape(real, pair), b.reshape(imag, pair), axis=4)
        y = b.reshape(y, (n, s, h, rot))
    else:
        y = b.call("concatenate", real, imag, axis=3)
    if rot != d:
        rest = b.call("slice", x, begin=(0, 0, 0, rot), end=(n, s, h, d), strides=(1, 1, 1, 1))
        y = b.call("concatenate", y, rest, axis=3)
    if len(shape) == 4:
        return b.call("transpose", y, axes=(0, 2, 1, 3))
    return b.reshape(y, shape)


# -- data movement with known shapes ----------------------------------------------------------


@onnx_op("CenterCropPad", since=18)
def center_crop_pad(b, input_data, shape, *, axes=None):
    in_shape = b.shape_of(input_data)
    nd = len(in_shape)
    axes = [a % nd for a in (axes if axes is not None else range(nd))]
    sizes = [int(v) for v in b.known(shape, "shape")]
    begin, end = [0] * nd, list(in_shape)
    pads = [0] * (2 * nd)
    for a, size in zip(axes, sizes, strict=True):
        dim = in_shape[a]
        if size < dim:  # crop: the extra odd element comes off the end
            begin[a] = (dim - size) // 2
            end[a] = begin[a] + size
        elif size > dim:
            pads[a] = (size - dim) // 2
            pads[a + nd] = size - dim - pads[a]
    y = input_data
    if begin != [0] * nd or end != list(in_shape):
        y = b.call("slice", y, begin=tuple(begin), end=tuple(end), strides=(1,) * nd)
    if any(pads):
        y = b.call("pad", y, pad_width=tuple(pads), mode="constant", value=0.0)
    return y


@onnx_op("Compress", since=9)
def compress(b, input, condition, *, axis=None):
    keep = np.nonzero(np.asarray(b.known(condition, "condition")).reshape(-1))[0]
    x = input if axis is not None else b.reshape(input, (int(input.type.size),))
    axis = 0 if axis is None else axis % x.type.ndim
    keep = keep[keep < b.shape_of(x)[axis]]  # a longer condition is cut to the axis
    return b.call("gather", x, b.const(keep.astype(np.int64)), axis=axis)


# -- window generators (their size is known, so the window is a constant) ----------------------


def _window(kind):
    def convert(b, size, *, output_datatype=1, periodic=1):
        n = int(b.known(size, "size").reshape(-1)[0])
        dtype = helper.tensor_dtype_to_np_dtype(output_datatype)
        parse_dtype(dtype)  # an unsupported output type is an error here
        k = np.arange(n, dtype=np.float64)
        denom = n if periodic else n - 1
        phase = 2 * np.pi * k / max(denom, 1)
        if kind == "hann":
            w = 0.5 - 0.5 * np.cos(phase)
        elif kind == "hamming":
            w = 25 / 46 - (1 - 25 / 46) * np.cos(phase)
        else:
            w = 0.42 - 0.5 * np.cos(phase) + 0.08 * np.cos(2 * phase)
        return b.const(w.astype(dtype))

    return convert


onnx_op("HannWindow", since=17)(_window("hann"))
onnx_op("HammingWindow", since=17)(_window("hamming"))
onnx_op("BlackmanWindow", since=17)(_window("blackman"))
