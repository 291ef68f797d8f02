"""numpy reference implementations of the nn ops (the testing oracle; constant folding).

Convolutions loop over kernel offsets and do one batched matmul each, so they run at BLAS
speed: a ResNet-50 forward pass takes seconds, not minutes.
"""

from __future__ import annotations

import itertools

import numpy as np

from tessera.graph.ops.tensor import _erf


def _window(xp, offsets, dilation, strides, out):
    """The strided view of padded data xp (N, C, ...) seen by kernel offset `offsets`."""
    sl = tuple(
        slice(k * d, k * d + s * (o - 1) + 1, s)
        for k, d, s, o in zip(offsets, dilation, strides, out, strict=True)
    )
    return xp[(slice(None), slice(None), *sl)]


def _pad_spatial(x, padding, value=0.0):
    nd = x.ndim - 2
    pads = [(0, 0), (0, 0)] + [(padding[i], padding[i + nd]) for i in range(nd)]
    return np.pad(x, pads, constant_values=value)


def conv(x, w, strides, padding, dilation, groups=1):
    nd = x.ndim - 2
    n, g = x.shape[0], groups
    o, cg, kernel = w.shape[0], w.shape[1], w.shape[2:]
    xp = _pad_spatial(x, padding)
    out = [
        (xp.shape[2 + i] - dilation[i] * (kernel[i] - 1) - 1) // strides[i] + 1 for i in range(nd)
    ]
    acc = np.zeros(
        (n, g, o // g, int(np.prod(out))), dtype=np.float64 if x.dtype == np.float64 else np.float32
    )
    wg = w.reshape(g, o // g, cg, *kernel)
    for offsets in itertools.product(*(range(k) for k in kernel)):
        patch = _window(xp, offsets, dilation, strides, out).reshape(n, g, cg, -1)
        acc += np.matmul(wg[(..., *offsets)][None], patch)
    return acc.reshape(n, o, *out).astype(x.dtype)


def conv_transpose(x, w, strides, padding, dilation, groups=1, output_padding=None):
    nd = x.ndim - 2
    n, c, g = x.shape[0], x.shape[1], groups
    og, kernel, inp = w.shape[1], w.shape[2:], x.shape[2:]
    output_padding = output_padding or (0,) * nd
    full = [
        strides[i] * (inp[i] - 1) + (kernel[i] - 1) * dilation[i] + 1 + output_padding[i]
        for i in range(nd)
    ]
    acc = np.zeros((n, g, og, *full), dtype=np.float32 if x.dtype != np.float64 else np.float64)
    xg = x.reshape(n, g, c // g, -1)
    wg = w.reshape(g, c // g, og, *kernel)
    for offsets in itertools.product(*(range(k) for k in kernel)):
        contrib = np.matmul(wg[(..., *offsets)].transpose(0, 2, 1)[None], xg)
        sl = tuple(
            slice(k * d, k * d + s * (m - 1) + 1, s)
            for k, d, s, m in zip(offsets, dilation, strides, inp, strict=True)
        )
        acc[(slice(None), slice(None), slice(None), *sl)] += contrib.reshape(n, g, og, *inp)
    crop = tuple(slice(padding[i], full[i] - padding[i + nd]) for i in range(nd))
    return acc.reshape(n, g * og, *full)[(slice(None), slice(None), *crop)].astype(x.dtype)


def _pool_setup(x, pool_size, strides, padding, dilation, ceil_mode):
    from tessera.graph.ops.nn import pool_output_size

    nd = x.ndim - 2
    dilation = dilation or (1,) * nd
    out = [
        pool_output_size(
            x.shape[2 + i],
            pool_size[i],
            strides[i],
            padding[i],
            padding[i + nd],
            dilation[i],
            ceil_mode,
        )
        for i in range(nd)
    ]
    # ceil_mode windows may run past the end pad: pad further so every window is in bounds.
    extra = [
        max(
            0,
            (out[i] - 1) * strides[i]
            + (pool_size[i] - 1) * dilation[i]
            + 1
            - (x.shape[2 + i] + padding[i] + padding[i + nd]),
        )
        for i in range(nd)
    ]
    return nd, dilation, out, extra


def max_pool(x, pool_size, strides, padding, dilation=None, ceil_mode=0, count_include_pad=0):
    nd, dilation, out, extra = _pool_setup(x, pool_size, strides, padding, dilation, ceil_mode)
    if min(out) == 0:  # no window fits: an empty output
        return np.empty((*x.shape[:2], *out), x.dtype)
    low = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    pads = list(padding[:nd]) + [padding[nd + i] + extra[i] for i in range(nd)]
    xp = _pad_spatial(x, pads, low)
    result = None
    for offsets in itertools.product(*(range(k) for k in pool_size)):
        win = _window(xp, offsets, dilation, strides, out)
        result = win.copy() if result is None else np.maximum(result, win)
    return result


def avg_pool(x, pool_size, strides, padding, dilation=None, ceil_mode=0, count_include_pad=0):
    nd, dilation, out, extra = _pool_setup(x, pool_size, strides, padding, dilation, ceil_mode)
    if min(out) == 0:  # no window fits: an empty output
        return np.empty((*x.shape[:2], *out), x.dtype)
    pads = list(padding[:nd]) + [padding[nd + i] + extra[i] for i in range(nd)]
    xp = _pad_spatial(x.astype(np.float64), pads)
    # Count what each window covers: the data, or with count_include_pad the explicit pads too
    # (never the extra ceil_mode overhang).
    ones = np.ones((1, 1, *x.shape[2:]))
    if count_include_pad:
        ones = _pad_spatial(ones, padding, 1.0)
        mask = _pad_spatial(ones, [0] * nd + extra)
    else:
        mask = _pad_spatial(ones, pads)
    total, count = 0.0, 0.0
    for offsets in itertools.product(*(range(k) for k in pool_size)):
        total = total + _window(xp, offsets, dilation, strides, out)
        count = count + _window(mask, offsets, dilation, strides, out)
    return (total / np.maximum(count, 1)).astype(x.dtype)


def global_avg_pool(x):
    return x.mean(axis=tuple(range(2, x.ndim)), keepdims=True, dtype=np.float64).astype(x.dtype)


def global_max_pool(x):
    return x.max(axis=tuple(range(2, x.ndim)), keepdims=True)


def _channel(p, ndim, axis=1):
    shape = [1] * ndim
    shape[axis] = -1
    return p.reshape(shape)


def batch_norm(x, gamma, beta, mean, var, epsilon=1e-5, axis=1):
    axis = axis % x.ndim
    scale = gamma / np.sqrt(var.astype(np.float64) + epsilon)
    y = (x - _channel(mean, x.ndim, axis)) * _channel(scale, x.ndim, axis)
    return (y + _channel(beta, x.ndim, axis)).astype(x.dtype)


def instance_norm(x, gamma, beta, epsilon=1e-5):
    axes = tuple(range(2, x.ndim))
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=axes, keepdims=True)
    var = x64.var(axis=axes, keepdims=True)
    y = (x64 - mean) / np.sqrt(var + epsilon)
    return (y * _channel(gamma, x.ndim) + _channel(beta, x.ndim)).astype(x.dtype)


def layer_norm(x, gamma, beta, axis=-1, epsilon=1e-5):
    axes = tuple(range(axis % x.ndim, x.ndim))
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=axes, keepdims=True)
    var = ((x64 - mean) ** 2).mean(axis=axes, keepdims=True)
    return ((x64 - mean) / np.sqrt(var + epsilon) * gamma + beta).astype(x.dtype)


def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)


def log_softmax(x, axis=-1):
    shifted = x - x.max(axis=axis, keepdims=True)
    return (shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))).astype(x.dtype)


def lrn(x, size, alpha=1e-4, beta=0.75, bias=1.0):
    """ONNX LRN: square_sum over channels [c - floor((size-1)/2), c + ceil((size-1)/2)]."""
    c = x.shape[1]
    sq = x.astype(np.float64) ** 2
    lo, hi = (size - 1) // 2, -(-(size - 1) // 2)
    padded = np.pad(sq, [(0, 0), (lo, hi)] + [(0, 0)] * (x.ndim - 2))
    total = sum(padded[:, i : i + c] for i in range(size))
    return (x / (bias + alpha / size * total) ** beta).astype(x.dtype)


def _f(fn):
    """Evaluate in float64 and return the input dtype."""

    def run(x, **attrs):
        with np.errstate(over="ignore"):
            return np.asarray(fn(x.astype(np.float64), **attrs)).astype(x.dtype)

    return run


def _gelu(x, approximate="none"):
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + _erf(x / np.sqrt(2)))


ACTIVATIONS = {
    "relu": _f(lambda x: np.maximum(x, 0)),
    "leaky_relu": _f(lambda x, alpha=0.01: np.where(x < 0, alpha * x, x)),
    "elu": _f(lambda x, alpha=1.0: np.where(x < 0, alpha * (np.exp(x) - 1), x)),
    "celu": _f(lambda x, alpha=1.0: np.maximum(x, 0) + np.minimum(0, alpha * np.expm1(x / alpha))),
    "selu": _f(
        lambda x, alpha=1.67326319217681884765625, gamma=1.05070102214813232421875: (
            gamma * np.where(x <= 0, alpha * (np.exp(x) - 1), x)
        )
    ),
    "thresholded_relu": _f(lambda x, alpha=1.0: np.where(x > alpha, x, 0)),
    "gelu": _f(_gelu),
    "hardsigmoid": _f(lambda x, alpha=0.2, beta=0.5: np.clip(alpha * x + beta, 0, 1)),
    "hardswish": _f(lambda x: x * np.clip(x / 6 + 0.5, 0, 1)),
    "softplus": _f(lambda x: np.logaddexp(0, x)),
    "softsign": _f(lambda x: x / (1 + np.abs(x))),
    "mish": _f(lambda x: x * np.tanh(np.logaddexp(0, x))),
    "shrink": _f(
        lambda x, bias=0.0, lambd=0.5: np.where(
            x < -lambd, x + bias, np.where(x > lambd, x - bias, 0)
        )
    ),
}
