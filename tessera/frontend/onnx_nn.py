"""ONNX converters for convolution, pooling, Gemm/MatMul, normalization, LRN, Dropout, Resize."""

from __future__ import annotations

import numpy as np

from tessera.frontend.conv_transpose import conv_transpose as emit_conv_transpose
from tessera.frontend.onnx_random import training_dropout
from tessera.frontend.onnx_registry import NodeError, onnx_op, value_dtype


def _same_pads(in_dim, kernel, stride, dilation, auto_pad, signed):
    """(head, tail) pads of SAME_UPPER / SAME_LOWER on one axis.

    The ONNX reference clamps the total pad at 0. ONNX Runtime does not: where the stride exceeds
    the kernel the total is negative and its Conv crops the input instead. The split of a negative
    total below is what ORT's CPU Conv computes (found by experiment against onnxruntime 1.32; it
    refuses dilation with auto_pad SAME, and its pools refuse negative pads). `signed` asks for it.
    """
    out = -(-in_dim // stride)
    total = (out - 1) * stride + (kernel - 1) * dilation + 1 - in_dim
    if total < 0 and signed:
        shift = 1 if auto_pad == "SAME_UPPER" else 2
        head = -((-(total + shift)) // 2) if total + shift < 0 else (total + shift) // 2
        return head, total - head
    total = max(0, total)
    small, big = total // 2, total - total // 2
    return (small, big) if auto_pad == "SAME_UPPER" else (big, small)


def _spatial(b, X, W_or_kernel, auto_pad, dilations, pads, strides, transpose=False,
             signed=False):  # fmt: skip
    """Explicit per-axis strides, dilations and ONNX-order pads, resolving auto_pad.

    With `signed`, SAME pads may come back negative (as ORT's Conv computes them, see
    `_same_pads`); `_crop` turns those into a slice of the input."""
    in_shape = b.shape_of(X, symbolic=True)[2:]
    kernel = tuple(W_or_kernel)
    nd = len(kernel)
    if len(in_shape) != nd:
        raise NodeError(f"input X is {X.type}: a {nd}-D window takes a {nd + 2}-D input")
    strides = tuple(strides or (1,) * nd)
    dilations = tuple(dilations or (1,) * nd)
    pads = list(pads or (0,) * (2 * nd))
    if len(strides) != nd or len(dilations) != nd or len(pads) != 2 * nd:
        raise NodeError(
            f"strides {strides}, dilations {dilations} or pads {pads} do not fit {nd}-D"
        )
    if auto_pad in ("SAME_UPPER", "SAME_LOWER") and not transpose:
        # ORT refuses dilation with SAME; there the reference's clamped pads stay
        signed = signed and all(d == 1 for d in dilations)
        for i in range(nd):
            size = in_shape[i]
            if not isinstance(size, int):  # a symbolic dim: its pads are static at stride 1
                if strides[i] != 1:
                    raise NodeError(
                        f"auto_pad {auto_pad} with stride {strides[i]} over the symbolic dim "
                        f"{size} of {X.type}: its pads depend on the size; give it in shape_dict"
                    )
                size = 1
            pads[i], pads[i + nd] = _same_pads(
                size, kernel[i], strides[i], dilations[i], auto_pad, signed
            )
    elif auto_pad == "VALID":
        pads = [0] * (2 * nd)
    elif auto_pad not in ("NOTSET", "SAME_UPPER", "SAME_LOWER", ""):
        raise NodeError(f"unknown auto_pad {auto_pad!r}")
    return strides, dilations, tuple(pads)


def _crop(b, X, pads):
    """X with its spatial axes cropped where `pads` are negative, and the pads clamped at 0."""
    nd = len(pads) // 2
    if min(pads) >= 0:
        return X, pads
    shape = b.shape_of(X)
    begin = [0, 0] + [max(0, -p) for p in pads[:nd]]
    end = list(shape[:2]) + [shape[2 + i] + min(0, pads[nd + i]) for i in range(nd)]
    X = b.call("slice", X, begin=tuple(begin), end=tuple(end), strides=(1,) * len(shape))
    return X, tuple(max(0, p) for p in pads)


def _bias(b, y, B):
    if B is None:
        return y
    shape = (-1,) + (1,) * (y.type.ndim - 2)
    return b.call("add", y, b.reshape(B, (B.type.shape[0], *shape[1:])))


@onnx_op("Conv")
def conv(b, X, W, B=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
         pads=None, strides=None):  # fmt: skip
    kernel = kernel_shape or b.shape_of(W)[2:]
    strides, dilations, pads = _spatial(b, X, kernel, auto_pad, dilations, pads, strides,
                                        signed=True)  # fmt: skip
    nd = len(kernel)
    if nd not in (1, 2, 3):
        raise NodeError(f"{nd}-D convolution is not supported")
    X, pads = _crop(b, X, pads)
    y = b.call(f"nn.conv{nd}d", X, W, strides=strides, padding=pads, dilation=dilations,
               groups=group)  # fmt: skip
    return _bias(b, y, B)


@onnx_op("ConvTranspose")
def conv_transpose(b, X, W, B=None, *, auto_pad="NOTSET", dilations=None, group=1,
                   kernel_shape=None, output_padding=None, output_shape=None, pads=None,
                   strides=None):  # fmt: skip
    kernel = tuple(kernel_shape or b.shape_of(W)[2:])
    nd = len(kernel)
    strides, dilations, pads = _spatial(b, X, kernel, auto_pad, dilations, pads, strides, True)
    output_padding = tuple(output_padding or (0,) * nd)
    in_shape = b.shape_of(X)[2:]
    if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        if output_shape is None:
            target = [in_shape[i] * strides[i] for i in range(nd)]
        else:
            target = list(output_shape)[-nd:]
        pads, output_padding = [0] * (2 * nd), list(output_padding)
        for i in range(nd):
            full = strides[i] * (in_shape[i] - 1) + output_padding[i]
            total = full + (kernel[i] - 1) * dilations[i] + 1 - target[i]
            if total < 0:  # past the last window: zeros at the end (ONNX's reference)
                output_padding[i] -= total
                continue
            half = total // 2
            upper = auto_pad == "SAME_UPPER"
            pads[i], pads[i + nd] = (half, total - half) if upper else (total - half, half)
    y = emit_conv_transpose(b, X, W, strides=strides, padding=tuple(pads), dilation=dilations,
                            groups=group, output_padding=tuple(output_padding))  # fmt: skip
    return _bias(b, y, B)


def _pool(kind, b, X, auto_pad, ceil_mode, dilations, kernel_shape, pads, strides, count=0):
    strides, dilations, pads = _spatial(b, X, kernel_shape, auto_pad, dilations, pads, strides)
    nd = len(kernel_shape)
    if nd not in (1, 2, 3):
        raise NodeError(f"{nd}-D pooling is not supported")
    return b.call(f"nn.{kind}_pool{nd}d", X, pool_size=tuple(kernel_shape), strides=strides,
                  padding=pads, dilation=dilations, ceil_mode=bool(ceil_mode),
                  count_include_pad=bool(count))  # fmt: skip


@onnx_op("MaxPool")
def max_pool(b, X, *, auto_pad="NOTSET", ceil_mode=0, dilations=None, kernel_shape, pads=None,
             storage_order=0, strides=None):  # fmt: skip
    y = _pool("max", b, X, auto_pad, ceil_mode, dilations, kernel_shape, pads, strides)
    if b.num_outputs < 2:
        return y
    strides, dilations, pads = _spatial(b, X, kernel_shape, auto_pad, dilations, pads, strides)
    indices = b.call("nn.max_pool_indices", X, pool_size=tuple(kernel_shape), strides=strides,
                     padding=pads, dilation=dilations, ceil_mode=int(ceil_mode),
                     storage_order=int(storage_order))  # fmt: skip
    return y, indices


@onnx_op("AveragePool")
def average_pool(b, X, *, auto_pad="NOTSET", ceil_mode=0, count_include_pad=0, dilations=None,
                 kernel_shape, pads=None, strides=None):  # fmt: skip
    return _pool("avg", b, X, auto_pad, ceil_mode, dilations, kernel_shape, pads, strides,
                 count_include_pad)  # fmt: skip


@onnx_op("GlobalAveragePool")
def global_average_pool(b, X):
    return b.call(f"nn.global_avg_pool{X.type.ndim - 2}d", X)


@onnx_op("GlobalMaxPool")
def global_max_pool(b, X):
    return b.call(f"nn.global_max_pool{X.type.ndim - 2}d", X)


@onnx_op("Gemm")
def gemm(b, A, B, C=None, *, alpha=1.0, beta=1.0, transA=0, transB=0):
    """Y = alpha * A' @ B' + beta * C."""
    a = b.call("transpose", A, axes=(1, 0)) if transA else A
    if transB:
        y = b.call("nn.dense", a, B)
    else:
        y = b.call("matmul", a, B)
    if alpha != 1.0:
        y = b.call("multiply", y, b.scalar(alpha, y))
    if C is None or beta == 0.0:
        return y
    return b.call("add", y, C if beta == 1.0 else b.call("multiply", C, b.scalar(beta, C)))


@onnx_op("MatMul")
def matmul(b, A, B):
    return b.call("matmul", A, B)


@onnx_op("BatchNormalization")
def batch_norm(b, X, scale, B, input_mean, input_var, *, epsilon=1e-5, momentum=0.9,
               spatial=1, is_test=1, training_mode=0):  # fmt: skip
    if training_mode:
        return _batch_norm_training(b, X, scale, B, input_mean, input_var, epsilon, momentum)
    return b.call("nn.batch_norm", X, scale, B, input_mean, input_var, epsilon=epsilon, axis=1)


def _batch_norm_training(b, X, scale, B, input_mean, input_var, epsilon, momentum):
    """Normalized by the batch's statistics (over every axis but 1); the running mean and
    variance move toward them by (1 - momentum)."""
    axes = tuple(a for a in range(X.type.ndim) if a != 1)
    mean = b.call("mean", X, axis=axes, keepdims=True)
    centered = b.call("subtract", X, mean)
    var = b.call("mean", b.call("multiply", centered, centered), axis=axes, keepdims=True)
    channels = (1, b.shape_of(X)[1]) + (1,) * (X.type.ndim - 2)
    inv = b.call("rsqrt", b.call("add", var, b.scalar(epsilon, var)))
    y = b.call("multiply", centered, b.call("multiply", inv, b.reshape(scale, channels)))
    y = b.call("add", y, b.reshape(B, channels))
    if b.num_outputs == 1:
        return y
    c = b.shape_of(X)[1:2]

    def running(old, batch):
        kept = b.call("multiply", old, b.scalar(momentum, old))
        moved = b.call("multiply", b.reshape(batch, c), b.scalar(1 - momentum, old))
        return b.call("add", kept, moved)

    return y, running(input_mean, mean), running(input_var, var)


@onnx_op("InstanceNormalization")
def instance_norm(b, input, scale, B, *, epsilon=1e-5):
    return b.call("nn.instance_norm", input, scale, B, epsilon=epsilon)


@onnx_op("LayerNormalization", since=17)
def layer_norm(b, X, Scale, B=None, *, axis=-1, epsilon=1e-5, stash_type=1):
    if B is None:
        B = b.const(np.zeros(Scale.type.shape, Scale.type.dtype.numpy_name))
    y = b.call("nn.layer_norm", X, Scale, B, axis=axis, epsilon=epsilon)
    if b.num_outputs == 1:
        return y
    return (y, *_layer_norm_stats(b, X, axis, epsilon, stash_type))


def _layer_norm_stats(b, X, axis, epsilon, stash_type):
    """LayerNormalization's optional outputs: Mean and InvStdDev over the normalized axes
    (kept as 1s), in the stash type."""
    x = X
    if stash_type == 1 and X.type.dtype.numpy_name != "float32":
        x = b.call("cast", X, dtype="float32")
    axes = tuple(range(axis % X.type.ndim, X.type.ndim))
    mean = b.call("mean", x, axis=axes, keepdims=True)
    centered = b.call("subtract", x, mean)
    var = b.call("mean", b.call("multiply", centered, centered), axis=axes, keepdims=True)
    inv = b.call("rsqrt", b.call("add", var, b.scalar(epsilon, var)))
    return mean, inv


@onnx_op("LRN")
def lrn(b, X, *, alpha=0.0001, beta=0.75, bias=1.0, size):
    return b.call("nn.lrn", X, size=size, alpha=alpha, beta=beta, bias=bias)


@onnx_op("Dropout")
def dropout(b, data, ratio=None, training_mode=None, *, seed=None, is_test=0):
    training = training_mode is not None and b.known(training_mode, "training_mode").item()
    drop = 0.5 if ratio is None or not training else float(b.known(ratio, "ratio").item())
    if training and drop != 0.0:
        output, mask = training_dropout(b, data, drop, seed)
        return output if b.num_outputs < 2 else (output, mask)
    if b.num_outputs < 2:
        return data
    return data, b.const(np.ones(data.type.shape, dtype=bool))


# -- Resize / Upsample ------------------------------------------------------------------------


def _resize(b, X, scales, sizes, roi, **attrs):
    shape = b.shape_of(X)
    if sizes is None:
        sizes = [int(np.floor(d * s)) for d, s in zip(shape, scales, strict=True)]
    else:
        scales = [s / d if d else 1.0 for s, d in zip(sizes, shape, strict=True)]
    return b.call("image.resize", X, size=tuple(int(s) for s in sizes),
                  scales=tuple(float(s) for s in scales), roi=roi, **attrs)  # fmt: skip


def _antialias_taps(ratio: float, scale: float, mode: str, a: float) -> np.ndarray:
    """The filter taps at offset `ratio` of an antialiased linear (triangle) or cubic filter,
    stretched by 1/scale when downsampling, normalized to sum 1 (the ONNX Resize rules)."""
    scale = min(scale, 1.0)
    if mode == "linear":
        start = int(np.floor(-1 / scale) + 1)
        args = (np.arange(start, 2 - start) - ratio) * scale
        taps = np.clip(1 - np.abs(args), 0, 1)
    else:
        start = int(np.floor(-2 / scale) + 1)
        x = np.abs((np.arange(start, 2 - start) - ratio) * scale)
        near = (a + 2) * x**3 - (a + 3) * x**2 + 1
        far = a * x**3 - 5 * a * x**2 + 8 * a * x - 4 * a
        taps = np.where(x <= 1, near, np.where(x < 2, far, 0.0))
    return taps / taps.sum()


def _antialias_matrix(in_len, out_len, scale, mode, coord, a, exclude_outside) -> np.ndarray:
    """(out_len, in_len) weights of an antialiased 1-D resize: output o is the taps around its
    source coordinate, the window of taps nearest to it (ties to the lower index), edge
    indices clamped (or, exclude_outside, dropped and the rest renormalized)."""
    from tessera.topi.image import static_coords

    x = np.asarray(static_coords(out_len, in_len, scale, coord, None), np.float64)
    base = np.floor(x)
    ratios = np.where(x == base, 1.0, x - base)
    taps = np.stack([_antialias_taps(float(r), scale, mode, a) for r in ratios])
    n = taps.shape[1]
    pad = -(-n // 2)
    p = np.floor(x + pad)
    frac = x + pad - p
    if n % 2 == 0:
        offset = np.where(frac == 0, -(n // 2), -(n // 2) + 1)
    else:
        offset = np.where(frac <= 0.5, -((n - 1) // 2), -((n - 1) // 2) + 1)
    idx = (p + offset).astype(np.int64)[:, None] + np.arange(n)[None, :] - pad
    if exclude_outside:
        taps = np.where((idx < 0) | (idx >= in_len), 0.0, taps)
        total = taps.sum(axis=1, keepdims=True)
        taps = taps / np.where(total == 0, 1.0, total)
    w = np.zeros((out_len, in_len))
    np.add.at(w, (np.repeat(np.arange(out_len), n), np.clip(idx, 0, in_len - 1).reshape(-1)),
              taps.reshape(-1))  # fmt: skip
    return w


def _antialiased(b, X, scales, sizes, mode, coord, a, exclude_outside):
    """Resize with antialias=1: separable, one matrix product per resized axis (the weights
    are constants: the shapes and scales are)."""
    shape = b.shape_of(X)
    if sizes is None:
        sizes = [int(np.floor(d * s)) for d, s in zip(shape, scales, strict=True)]
    else:
        scales = [s / d if d else 1.0 for s, d in zip(sizes, shape, strict=True)]
    if not X.type.dtype.is_float:
        raise NodeError(f"antialias=1 needs a float input, got {X.type}")
    nd, y = len(shape), X
    for axis in range(nd):
        if sizes[axis] == shape[axis] and scales[axis] == 1.0:
            continue
        w = _antialias_matrix(shape[axis], sizes[axis], scales[axis], mode, coord, a,
                              exclude_outside)  # fmt: skip
        perm = [d for d in range(nd) if d != axis] + [axis]
        back = list(np.argsort(perm))
        moved = y if axis == nd - 1 else b.call("transpose", y, axes=tuple(perm))
        wt = b.const(np.ascontiguousarray(w.T).astype(value_dtype(X.type.dtype)))
        y = b.call("matmul", moved, wt)
        if axis != nd - 1:
            y = b.call("transpose", y, axes=tuple(int(d) for d in back))
    return y


def _legacy(b, X, scales, mode):
    """Upsample (7, 9) and Resize-10: asymmetric coordinates; nearest floors when upsampling."""
    scales = [float(s) for s in scales]
    if mode not in ("nearest", "linear", "bilinear"):
        raise NodeError(f"unknown mode {mode!r}")
    nearest = "floor" if min(scales) >= 1 else "ceil"
    return _resize(b, X, scales, None, None, mode="linear" if mode == "bilinear" else mode,
                   coordinate_transformation_mode="asymmetric", nearest_mode=nearest)  # fmt: skip


@onnx_op("Upsample", since=7)
def upsample_7(b, X, *, mode="nearest", scales):
    return _legacy(b, X, scales, mode)


@onnx_op("Upsample", since=9)
def upsample_9(b, X, scales, *, mode="nearest"):
    return _legacy(b, X, b.known(scales, "scales").tolist(), mode)


@onnx_op("Resize", since=10)
def resize_10(b, X, scales, *, mode="nearest"):
    return _legacy(b, X, b.known(scales, "scales").tolist(), mode)


@onnx_op("Resize", since=11)
def resize_11(b, X, roi=None, scales=None, sizes=None, *, antialias=0, axes=None,
              coordinate_transformation_mode="half_pixel", cubic_coeff_a=-0.75, exclude_outside=0,
              extrapolation_value=0.0, keep_aspect_ratio_policy="stretch", mode="nearest",
              nearest_mode="round_prefer_floor"):  # fmt: skip
    if antialias and mode not in ("linear", "cubic"):
        raise NodeError(f"antialias=1 applies to the linear and cubic modes, not {mode!r}")
    if antialias and coordinate_transformation_mode == "tf_crop_and_resize":
        raise NodeError("antialias=1 with tf_crop_and_resize is not supported")
    nd = X.type.ndim
    axes = [a % nd for a in (axes or range(nd))]
    roi_v = b.known_or(roi, None, "roi")
    scales_v = b.known_or(scales, None, "scales")
    sizes_v = b.known_or(sizes, None, "sizes")
    if scales_v is not None and scales_v.size == 0:
        scales_v = None
    if sizes_v is not None and sizes_v.size == 0:
        sizes_v = None
    shape = b.shape_of(X)
    full_scales = [1.0] * nd
    full_sizes = None
    if sizes_v is not None:
        full_sizes = list(shape)
        sizes_v = _keep_aspect(shape, axes, sizes_v.tolist(), keep_aspect_ratio_policy)
        for a, s in zip(axes, sizes_v, strict=True):
            full_sizes[a] = s
    elif scales_v is not None:
        for a, s in zip(axes, scales_v.tolist(), strict=True):
            full_scales[a] = float(s)
    else:
        raise NodeError("needs scales or sizes")
    full_roi = None
    if roi_v is not None and roi_v.size and coordinate_transformation_mode == "tf_crop_and_resize":
        full_roi = [0.0] * nd + [1.0] * nd
        r = roi_v.tolist()
        for j, a in enumerate(axes):
            full_roi[a], full_roi[a + nd] = r[j], r[j + len(axes)]
        full_roi = tuple(full_roi)
    if antialias:
        return _antialiased(b, X, full_scales, full_sizes, mode, coordinate_transformation_mode,
                            cubic_coeff_a, exclude_outside)  # fmt: skip
    return _resize(b, X, full_scales, full_sizes, full_roi, mode=mode,
                   coordinate_transformation_mode=coordinate_transformation_mode,
                   nearest_mode=nearest_mode, cubic_coeff_a=cubic_coeff_a,
                   exclude_outside=exclude_outside,
                   extrapolation_value=extrapolation_value)  # fmt: skip


def _keep_aspect(shape, axes, sizes, policy):
    if policy == "stretch":
        return [int(s) for s in sizes]
    ratios = [s / shape[a] for a, s in zip(axes, sizes, strict=True)]
    scale = min(ratios) if policy == "not_larger" else max(ratios)
    return [int(np.floor(shape[a] * scale + 0.5)) for a in axes]
