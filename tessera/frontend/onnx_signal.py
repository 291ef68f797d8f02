"""ONNX converters for DFT (opsets 17 and 20) and STFT, as matmuls with constant matrices.

A DFT along one axis is linear in the real and imaginary parts of its input, so with the
length known it is one real matrix: numpy's FFT applied to every basis signal builds it, and
the graph multiplies the signal (moved to the last axes) by it. That covers dft_length (zero
padding or truncation), inverse (1/n), onesided (rfft) and inverse onesided (irfft) exactly as
ONNX's reference computes them. STFT gathers the frames, applies the window, then does the
same. One matrix costs O(n^2) per signal; a length with a divisor in [2, RADIX] takes the
fast path instead (Note [four-step FFT]).

Note [four-step FFT]: for n = n1 * n2, with t = n2*t1 + t2 and k = k1 + n1*k2,
X[k] = sum_t2 w_n2^(t2 k2) * (w_n^(t2 k1) * sum_t1 x[n2 t1 + t2] w_n1^(t1 k1)): a DFT of
length n1 (one matrix of (2 n1)^2 on the real and imaginary parts) for each t2, a twiddle
multiply, then a DFT of length n2 for each k1, recursively, and a transpose that puts k1 + n1 k2
in order. n1 is the largest divisor of n up to RADIX, so any length factors (mixed radix);
a prime factor above RADIX takes one matrix of its size. Work O(n (n1 + n2 + ...)) per signal,
O(n log n) for lengths with small factors. The first stage takes real signals as they are.
"""

from __future__ import annotations

import numpy as np

from tessera.frontend.onnx_registry import NodeError, onnx_op


def _transform(z: np.ndarray, n: int, inverse: bool, onesided: bool) -> np.ndarray:
    """ONNX's DFT of complex signals z[..., length] along the last axis: [..., bins, 2]."""
    if not inverse:
        out = np.fft.fft(z, n=n, axis=-1)
        out = out[..., : n // 2 + 1] if onesided else out
    elif onesided:
        return np.fft.irfft(z, n=n, axis=-1)[..., None]
    else:
        out = np.fft.ifft(z, n=n, axis=-1)
    return np.stack([out.real, out.imag], axis=-1)


def _dft_matrix(length: int, comps: int, n: int, inverse: bool, onesided: bool) -> np.ndarray:
    """M with signal.reshape(-1, length * comps) @ M = DFT.reshape(-1, bins * out_comps)."""
    basis = np.eye(length * comps).reshape(length * comps, length, comps)
    z = basis[..., 0] + (1j * basis[..., 1] if comps == 2 else 0)
    out = _transform(z, n, inverse, onesided)
    return out.reshape(length * comps, -1)


RADIX = 32  # the largest DFT done as one matrix inside the fast path (Note [four-step FFT])


def _radix(n: int) -> int:
    """The largest divisor of n in [2, RADIX] (n itself when n <= RADIX), or 1 (prime n)."""
    if n <= RADIX:
        return n
    return next((d for d in range(RADIX, 1, -1) if n % d == 0), 1)


def _complex_dft(b, x, n: int, inverse: bool, dtype: str):
    """DFT along the axis before last of x [..., n, comps], comps 1 (real) or 2: [..., n, 2]
    (Note [four-step FFT]); inverse scales by 1/n."""
    *rest, _, comps = b.shape_of(x)
    n1 = _radix(n)
    if n1 in (1, n):  # one matrix: a short or a prime length
        matrix = _dft_matrix(n, comps, n, inverse, False).astype(dtype)
        y = b.call("matmul", b.reshape(x, (*rest, n * comps)), b.const(matrix))
        return b.reshape(y, (*rest, n, 2))
    n2 = n // n1
    lead = len(rest)
    # x[n2 t1 + t2] as [..., t2, t1, comps]: a DFT of length n1 along t1 for each t2
    x = b.reshape(x, (*rest, n1, n2, comps))
    x = b.call("transpose", x, axes=(*range(lead), lead + 1, lead, lead + 2))
    matrix = _dft_matrix(n1, comps, n1, inverse, False).astype(dtype)
    y = b.call("matmul", b.reshape(x, (*rest, n2, n1 * comps)), b.const(matrix))
    y = b.reshape(y, (*rest, n2, n1, 2))  # [..., t2, k1, re/im]
    # times w_n^(t2 k1) (conjugated for the inverse): y * (c, c) + swap(y) * (-s, s)
    angle = (-2 if not inverse else 2) * np.pi * np.outer(np.arange(n2), np.arange(n1)) / n
    cos = np.stack([np.cos(angle), np.cos(angle)], axis=-1).astype(dtype)
    sin = np.stack([-np.sin(angle), np.sin(angle)], axis=-1).astype(dtype)
    swapped = b.call("gather", y, b.const(np.array([1, 0], np.int64)), axis=lead + 2)
    y = b.call(
        "add", b.call("multiply", y, b.const(cos)), b.call("multiply", swapped, b.const(sin))
    )
    # a DFT of length n2 along t2 for each k1, then k = k1 + n1 k2 in order
    y = b.call("transpose", y, axes=(*range(lead), lead + 1, lead, lead + 2))  # [.., k1, t2, 2]
    y = _complex_dft(b, y, n2, inverse, dtype)  # [..., k1, k2, 2]
    y = b.call("transpose", y, axes=(*range(lead), lead + 1, lead, lead + 2))
    return b.reshape(y, (*rest, n, 2))


def _fast(b, x, n, axis, inverse, onesided):
    """The DFT by the four-step FFT where it applies: the signal's own length (no dft_length
    padding or truncation), not the inverse of a onesided transform, a length with a divisor in
    [2, RADIX] above RADIX; else None."""
    shape = b.shape_of(x)
    ndim = len(shape)
    axis = axis % ndim
    if shape[axis] != n or (inverse and onesided) or n <= RADIX or _radix(n) == 1:
        return None
    perm = [a for a in range(ndim - 1) if a != axis] + [axis, ndim - 1]
    xt = x if perm == list(range(ndim)) else b.call("transpose", x, axes=tuple(perm))
    y = _complex_dft(b, xt, n, bool(inverse), x.type.dtype.numpy_name)
    if onesided:
        rest = b.shape_of(y)[:-2]
        begin, end = (0,) * (len(rest) + 2), (*rest, n // 2 + 1, 2)
        y = b.call("slice", y, begin=begin, end=end, strides=(1,) * len(end))
    inv = [perm.index(a) for a in range(ndim)]
    return y if perm == list(range(ndim)) else b.call("transpose", y, axes=tuple(inv))


def _dft(b, x, n, axis, inverse, onesided):
    shape = b.shape_of(x)
    ndim = len(shape)
    axis = axis % ndim
    if axis == ndim - 1:
        raise NodeError("axis must not be the last axis (it holds the real and imaginary parts)")
    if shape[-1] not in (1, 2):
        raise NodeError(f"the last axis must have 1 or 2 components, got {shape[-1]}")
    length, comps = shape[axis], shape[-1]
    n = length if n is None else n
    if n is None or n < 1:
        raise NodeError(f"dft_length {n} must be positive")
    fast = _fast(b, x, n, axis, inverse, onesided)
    if fast is not None:
        return fast
    perm = [a for a in range(ndim - 1) if a != axis] + [axis, ndim - 1]
    xt = x if perm == list(range(ndim)) else b.call("transpose", x, axes=tuple(perm))
    rest = [shape[a] for a in perm[:-2]]
    matrix = _dft_matrix(length, comps, n, bool(inverse), bool(onesided))
    y = b.call("matmul", b.reshape(xt, (int(np.prod(rest)), length * comps)),
               b.const(matrix.astype(x.type.dtype.numpy_name)))  # fmt: skip
    out_comps = 1 if inverse and onesided else 2
    y = b.reshape(y, (*rest, matrix.shape[1] // out_comps, out_comps))
    inv = [perm.index(a) for a in range(ndim)]
    return y if perm == list(range(ndim)) else b.call("transpose", y, axes=tuple(inv))


def _length(b, dft_length, x, axis, inverse, onesided):
    if dft_length is not None:
        return int(b.known(dft_length, "dft_length").item())
    size = b.shape_of(x)[axis % x.type.ndim]
    return 2 * (size - 1) if inverse and onesided else size


@onnx_op("DFT", since=17)
def dft_17(b, input, dft_length=None, *, axis=1, inverse=0, onesided=0):
    n = _length(b, dft_length, input, axis, inverse, onesided)
    return _dft(b, input, n, axis, inverse, onesided)


@onnx_op("DFT", since=20)
def dft_20(b, input, dft_length=None, axis=None, *, inverse=0, onesided=0):
    axis = -2 if axis is None else int(b.known(axis, "axis").item())
    n = _length(b, dft_length, input, axis, inverse, onesided)
    return _dft(b, input, n, axis, inverse, onesided)


@onnx_op("STFT", since=17)
def stft(b, signal, frame_step, window=None, frame_length=None, *, onesided=1):
    """[batch, frames, bins, 2]: the DFT of each windowed frame."""
    batch, length, comps = b.shape_of(signal)
    step = int(b.known(frame_step, "frame_step").item())
    if frame_length is not None:
        size = int(b.known(frame_length, "frame_length").item())
    elif window is not None:
        size = b.shape_of(window)[0]
    else:
        raise NodeError("needs a window or a frame_length")
    frames = 1 + (length - size) // step
    if frames < 1 or step < 1:
        raise NodeError(f"frame_length {size} and frame_step {step} do not fit {length} samples")
    starts = np.arange(frames)[:, None] * step + np.arange(size)[None, :]
    x = b.call("gather", signal, b.const(starts.astype(np.int64)), axis=1)
    if window is not None:
        x = b.call("multiply", x, b.reshape(window, (size, 1)))
    return _dft(b, x, size, 2, False, onesided)
