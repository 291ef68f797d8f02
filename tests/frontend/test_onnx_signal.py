"""DFT (opsets 17 and 20: axes, dft_length, inverse, onesided) and STFT against numpy's FFT,
compiled."""

import numpy as np
import pytest
from onnx import helper

import tessera
from tessera.frontend import from_onnx
from tessera.frontend.testing import make_model, run_ort

R = np.random.default_rng(17)


def _run(model, feeds):
    mod, params = from_onnx(model)
    lib = tessera.build(mod, target="llvm", params=params)
    m = tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))
    for k, v in feeds.items():
        m.set_input(k, v)
    m.run()
    return m.get_output(0).numpy()


def _as_pairs(z):
    return np.stack([z.real, z.imag], axis=-1)


@pytest.mark.parametrize("inverse,onesided,n", [(0, 0, None), (0, 1, 12), (1, 0, 6), (1, 1, None)])
def test_dft_20_along_axis_1(inverse, onesided, n):
    x = R.standard_normal((2, 8, 3, 2)).astype(np.float32)
    z = x[..., 0] + 1j * x[..., 1]
    inputs = ["x", "n" if n else "", "axis"]
    inits = {"axis": np.array(1, np.int64)}
    if n:
        inits["n"] = np.array(n, np.int64)
    node = helper.make_node("DFT", inputs, ["y"], inverse=inverse, onesided=onesided)
    got = _run(make_model([node], {"x": x}, ["y"], inits, opset=20), {"x": x})
    if not inverse:
        expected = _as_pairs(np.fft.fft(z, n=n, axis=1))
        expected = expected[:, : (n or 8) // 2 + 1] if onesided else expected
    elif onesided:
        expected = np.fft.irfft(z, n=n or 14, axis=1)[..., None]
    else:
        expected = _as_pairs(np.fft.ifft(z, n=n, axis=1))
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_dft_17_real_input_attribute_axis():
    x = R.standard_normal((3, 10, 1)).astype(np.float32)
    node = helper.make_node("DFT", ["x"], ["y"], axis=1, onesided=1)
    got = _run(make_model([node], {"x": x}, ["y"], opset=17), {"x": x})
    np.testing.assert_allclose(got, _as_pairs(np.fft.rfft(x[..., 0], axis=1)), rtol=1e-4,
                               atol=1e-5)  # fmt: skip


def test_stft_with_window():
    x = R.standard_normal((2, 64, 1)).astype(np.float32)
    window = np.hanning(16).astype(np.float32)
    inits = {"step": np.array(8, np.int64), "window": window}
    node = helper.make_node("STFT", ["x", "step", "window"], ["y"])
    got = _run(make_model([node], {"x": x}, ["y"], inits, opset=17), {"x": x})
    frames = np.stack([x[:, s : s + 16, 0] * window for s in range(0, 64 - 16 + 1, 8)], axis=1)
    np.testing.assert_allclose(got, _as_pairs(np.fft.rfft(frames, axis=-1)), rtol=1e-4,
                               atol=1e-4)  # fmt: skip


def test_last_axis_is_refused():
    node = helper.make_node("DFT", ["x"], ["y"], axis=2)
    with pytest.raises(ValueError, match="must not be the last axis"):
        from_onnx(make_model([node], {"x": np.zeros((1, 4, 2), np.float32)}, ["y"], opset=17))


def _dft_model(x, axis, inverse=0, onesided=0):
    node = helper.make_node("DFT", ["x", "", "axis"], ["y"], inverse=inverse, onesided=onesided)
    return make_model([node], {"x": x}, ["y"], {"axis": np.array(axis, np.int64)}, opset=20)


def _matrix_elements(model) -> int:
    """Elements of the constant matrices the converted graph multiplies by."""
    _, params = from_onnx(model)
    return sum(int(np.prod(v.shape)) for v in params.values() if v.ndim == 2)


@pytest.mark.parametrize(
    "n,comps,inverse,onesided",
    [
        (1024, 2, 0, 0),
        (1024, 1, 0, 1),
        (360, 2, 1, 0),
        (37, 2, 0, 0),  # a prime: Bluestein's convolution of length 75
        pytest.param(97, 1, 1, 0, marks=pytest.mark.slow),
        pytest.param(1009 * 2, 1, 0, 1, marks=pytest.mark.slow),
        pytest.param(4096, 1, 0, 1, marks=pytest.mark.slow),
    ],  # fmt: skip
)
def test_long_dfts_take_the_fft_and_match_numpy(n, comps, inverse, onesided):
    # O(n log n): matrices of at most (2 * RADIX)^2 per stage, where one dense matrix of
    # (comps * n) x (2 * n) held 2-8 million elements for these lengths
    x = R.standard_normal((2, n, comps)).astype(np.float32)
    model = _dft_model(x, 1, inverse, onesided)
    assert _matrix_elements(model) <= 6 * 64 * 64
    z = x[..., 0] + (1j * x[..., 1] if comps == 2 else 0)
    out = np.fft.ifft(z, axis=1) if inverse else np.fft.fft(z, axis=1)
    expected = _as_pairs(out[:, : n // 2 + 1] if onesided else out)
    got = _run(model, {"x": x})
    scale = np.abs(expected).max()
    np.testing.assert_allclose(got, expected, atol=2e-6 * scale * np.log2(n), rtol=0)


@pytest.mark.parametrize(
    "length,comps,n,inverse,onesided",
    [(100, 2, 64, 0, 0),   # truncated to dft_length
     (40, 1, 48, 0, 1),    # zero-padded to dft_length
     pytest.param(40, 1, 101, 0, 1, marks=pytest.mark.slow),  # ... a prime dft_length
     (33, 2, None, 1, 1),  # inverse onesided: 64 real samples from 33 bins
     (20, 2, 50, 1, 1)],   # inverse onesided with the spectrum zero-padded
)  # fmt: skip
def test_dft_length_and_inverse_onesided_take_the_fft(length, comps, n, inverse, onesided):
    x = R.standard_normal((2, length, comps)).astype(np.float32)
    inits = {"axis": np.array(1, np.int64)} | ({"n": np.array(n, np.int64)} if n else {})
    node = helper.make_node("DFT", ["x", "n" if n else "", "axis"], ["y"], inverse=inverse,
                            onesided=onesided)  # fmt: skip
    model = make_model([node], {"x": x}, ["y"], inits, opset=20)
    size = n or 2 * (length - 1)
    assert _matrix_elements(model) < (2 * size) ** 2 / 2  # not one dense matrix
    z = x[..., 0] + (1j * x[..., 1] if comps == 2 else 0)
    if inverse:
        expected = np.fft.irfft(z, n=size, axis=1)[..., None]
    else:
        expected = np.fft.fft(z, n=size, axis=1)
        expected = _as_pairs(expected[:, : size // 2 + 1] if onesided else expected)
    got = _run(model, {"x": x})
    np.testing.assert_allclose(got, expected, atol=1e-5 * np.abs(expected).max(), rtol=0)


@pytest.mark.parametrize("bins,length,rate,low,high", [(8, 16, 8192, 0.0, 4096.0),
                                                       (5, 63, 16000, 100.0, 3000.0)])  # fmt: skip
def test_mel_weight_matrix_matches_ort(bins, length, rate, low, high):
    inits = {"n": np.array(bins, np.int64), "l": np.array(length, np.int64),
             "r": np.array(rate, np.int64), "lo": np.array(low, np.float32),
             "hi": np.array(high, np.float32)}  # fmt: skip
    node = helper.make_node("MelWeightMatrix", ["n", "l", "r", "lo", "hi"], ["y"])
    model = make_model([node], {}, ["y"], inits, opset=17)
    from tessera.frontend import onnx_backend

    got = onnx_backend.prepare(model).run({})[0]
    np.testing.assert_allclose(got, run_ort(model, {})[0], rtol=1e-6, atol=1e-7)
