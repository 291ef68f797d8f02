"""ONNX converters for DFT (opsets 17 and 20) and STFT, as matmuls with constant matrices.

A DFT along one axis is linear in the real and imaginary parts of its input, so with the
length known it is one real matrix: numpy's FFT applied to every basis signal builds it, and
the graph multiplies the signal (moved to the last axes) by it. That covers dft_length (zero
padding or truncation), inverse (1/n), onesided (rfft) and inverse onesided (irfft) exactly as
ONNX's reference computes them. STFT gathers the frames, applies the window, then does the
same. One matrix costs O(n^2) per signal; a length above RADIX takes the fast path instead
(Note [four-step FFT], Note [Bluestein]), any dft_length (the signal zero-padded or truncated
first) and the inverse onesided transform (the Hermitian spectrum completed first) included.

Note [four-step FFT]: for n = n1 * n2, with t = n2*t1 + t2 and k = k1 + n1*k2,
X[k] = sum_t2 w_n2^(t2 k2) * (w_n^(t2 k1) * sum_t1 x[n2 t1 + t2] w_n1^(t1 k1)): a DFT of
length n1 (one matrix of (2 n1)^2 on the real and imaginary parts) for each t2, a twiddle
multiply, then a DFT of length n2 for each k1, recursively, and a transpose that puts k1 + n1 k2
in order. n1 is the largest divisor of n up to RADIX, so any length factors (mixed radix);
a prime factor above RADIX takes Bluestein's algorithm (Note [Bluestein]). Work
O(n (n1 + n2 + ...)) per signal, O(n log n). The first stage takes real signals as they are.

Note [Bluestein]: with the chirp c[j] = exp(-i pi j^2 / n) (conjugated for the inverse),
t k = (t^2 + k^2 - (k - t)^2) / 2 turns X[k] = sum_t x[t] w_n^(t k) into
X[k] = c[k] sum_t (x[t] c[t]) conj(c[k - t]): a convolution, done as a cyclic one of length
m >= 2n - 1 whose prime factors are all at most RADIX, by two FFTs of length m (the
four-step FFT) and a product with the constant FFT of conj(c) (computed here in numpy).
O(m log m) with m < 4n, for a prime n where one matrix was O(n^2).
"""

from __future__ import annotations

import numpy as np
from onnx import helper

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


def _smooth_length(n: int) -> int:
    """The least m >= n whose prime factors are all at most RADIX."""
    m = n
    while True:
        k = m
        for d in range(2, RADIX + 1):
            while k % d == 0:
                k //= d
        if k == 1:
            return m
        m += 1


def _times(b, y, z: np.ndarray, dtype: str):
    """y [..., 2] (real and imaginary parts) times the complex constant z, broadcast."""
    re = np.stack([z.real, z.real], axis=-1).astype(dtype)
    im = np.stack([-z.imag, z.imag], axis=-1).astype(dtype)
    swapped = b.call("gather", y, b.const(np.array([1, 0], np.int64)), axis=y.type.ndim - 1)
    return b.call(
        "add", b.call("multiply", y, b.const(re)), b.call("multiply", swapped, b.const(im))
    )


def _bluestein(b, x, n: int, inverse: bool, dtype: str):
    """DFT of x [..., n, comps] along axis -2 as a convolution (Note [Bluestein])."""
    *rest, _, comps = b.shape_of(x)
    m = _smooth_length(2 * n - 1)
    j = np.arange(n)
    chirp = np.exp((1j if inverse else -1j) * np.pi * ((j * j) % (2 * n)) / n)
    kernel = np.zeros(m, complex)
    kernel[:n] = np.conj(chirp)
    kernel[m - n + 1 :] = np.conj(chirp[1:][::-1])
    if comps == 1:
        x = b.call("pad", x, pad_width=(0,) * (len(rest) + 2) + (0,) * (len(rest) + 1) + (1,))
    y = _times(b, x, chirp, dtype)
    y = b.call("pad", y, pad_width=(0,) * (len(rest) + 2) + (0,) * len(rest) + (m - n, 0))
    y = _complex_dft(b, y, m, False, dtype)
    y = _times(b, y, np.fft.fft(kernel), dtype)
    y = _complex_dft(b, y, m, True, dtype)  # the cyclic convolution (ifft scales by 1/m)
    end = (*rest, n, 2)
    y = b.call("slice", y, begin=(0,) * len(end), end=end, strides=(1,) * len(end))
    return _times(b, y, chirp / n if inverse else chirp, dtype)


def _complex_dft(b, x, n: int, inverse: bool, dtype: str):
    """DFT along the axis before last of x [..., n, comps], comps 1 (real) or 2: [..., n, 2]
    (Note [four-step FFT]); inverse scales by 1/n."""
    *rest, _, comps = b.shape_of(x)
    n1 = _radix(n)
    if n1 == 1 and n > RADIX:
        return _bluestein(b, x, n, inverse, dtype)
    if n1 in (1, n):  # one matrix: a short length
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
    y = _times(b, y, np.exp(1j * angle), dtype)
    # a DFT of length n2 along t2 for each k1, then k = k1 + n1 k2 in order
    y = b.call("transpose", y, axes=(*range(lead), lead + 1, lead, lead + 2))  # [.., k1, t2, 2]
    y = _complex_dft(b, y, n2, inverse, dtype)  # [..., k1, k2, 2]
    y = b.call("transpose", y, axes=(*range(lead), lead + 1, lead, lead + 2))
    return b.reshape(y, (*rest, n, 2))


def _fit(b, x, length: int):
    """x [..., m, comps] zero-padded or truncated to [..., length, comps]."""
    *rest, m, comps = b.shape_of(x)
    if m > length:
        end = (*rest, length, comps)
        return b.call("slice", x, begin=(0,) * len(end), end=end, strides=(1,) * len(end))
    if m < length:
        zeros = (0,) * (len(rest) + 2)
        return b.call("pad", x, pad_width=zeros + (0,) * len(rest) + (length - m, 0))
    return x


def _hermitian(b, x, n: int, dtype: str):
    """The n bins of a real signal's spectrum from its first n // 2 + 1 (x [..., h, comps]):
    bin k >= h is the conjugate of bin n - k."""
    half = n // 2 + 1
    x = _fit(b, x, half)
    rest = b.shape_of(x)[:-2]
    if b.shape_of(x)[-1] == 1:
        x = b.call("pad", x, pad_width=(0,) * (len(rest) + 2) + (0,) * (len(rest) + 1) + (1,))
    k = np.arange(n)
    x = b.call("gather", x, b.const(np.where(k < half, k, n - k).astype(np.int64)), axis=len(rest))
    sign = np.stack([np.ones(n), np.where(k < half, 1.0, -1.0)], axis=-1).astype(dtype)
    return b.call("multiply", x, b.const(sign))


def _fast(b, x, n, axis, inverse, onesided):
    """The DFT by the four-step FFT (Note [four-step FFT]) for lengths above RADIX: the signal
    padded or truncated to dft_length first, the inverse onesided transform from its completed
    spectrum; None for short lengths (one matrix)."""
    shape = b.shape_of(x)
    ndim = len(shape)
    axis = axis % ndim
    if n <= RADIX:
        return None
    dtype = x.type.dtype.numpy_name
    perm = [a for a in range(ndim - 1) if a != axis] + [axis, ndim - 1]
    xt = x if perm == list(range(ndim)) else b.call("transpose", x, axes=tuple(perm))
    rest = b.shape_of(xt)[:-2]
    if inverse and onesided:
        y = _complex_dft(b, _hermitian(b, xt, n, dtype), n, True, dtype)
        end = (*rest, n, 1)  # the real part
    else:
        y = _complex_dft(b, _fit(b, xt, n), n, bool(inverse), dtype)
        end = (*rest, n // 2 + 1 if onesided else n, 2)
    if tuple(end) != tuple(b.shape_of(y)):
        y = b.call("slice", y, begin=(0,) * len(end), end=end, strides=(1,) * len(end))
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


@onnx_op("MelWeightMatrix", since=17)
def mel_weight_matrix(b, num_mel_bins, dft_length, sample_rate, lower_edge_hertz,
                      upper_edge_hertz, *, output_datatype=1):  # fmt: skip
    """The (dft_length // 2 + 1, num_mel_bins) triangular filter bank, a constant (its inputs
    size it): mel = 2595 log10(1 + hz / 700), num_mel_bins + 2 points spread over the mel
    range as the ONNX reference spreads them, each filter rising from point i to i + 1 and
    falling to i + 2 over the spectrogram bins the points floor to."""
    bins, length, rate = (int(np.asarray(b.known(v, what)).reshape(-1)[0]) for v, what in (
        (num_mel_bins, "num_mel_bins"), (dft_length, "dft_length"),
        (sample_rate, "sample_rate")))  # fmt: skip
    low, high = (float(np.asarray(b.known(v, what)).reshape(-1)[0]) for v, what in (
        (lower_edge_hertz, "lower_edge_hertz"),
        (upper_edge_hertz, "upper_edge_hertz")))  # fmt: skip
    if bins < 1 or length < 1 or rate < 1 or not 0 <= low <= high:
        raise NodeError(f"MelWeightMatrix needs bins, length, rate >= 1 and 0 <= low <= high, "
                        f"got {bins}, {length}, {rate}, {low}, {high}")  # fmt: skip
    mel_low, mel_high = (2595 * np.log1p(f / 700) / np.log(10) for f in (low, high))
    points = np.arange(bins + 2) * ((mel_high - mel_low) / (bins + 2)) + mel_low
    hz = 700 * np.expm1(points / 2595 * np.log(10))
    edges = (((length + 1) * hz) // rate).astype(np.int64)
    out = np.zeros((length // 2 + 1, bins))
    for i in range(bins):
        left, center, right = edges[i : i + 3]
        if center == left:
            out[center, i] = 1
        else:
            j = np.arange(left, center + 1)
            out[j, i] = (j - left) / (center - left)
        if right > center:
            j = np.arange(center, right)
            out[j, i] = (right - j) / (right - center)
    return b.const(out.astype(helper.tensor_dtype_to_np_dtype(output_datatype)))
