"""`tessera compile --target opencl|cuda`, `run` and `show` on the GPU artifact (the README's
seed flow from the command line). OpenCL runs on pocl; CUDA compiles through NVRTC and, without
a GPU, `run` says what is missing."""

import numpy as np
import pytest

from tessera.frontend.testing import run_ort
from tessera.testing.devices import nvrtc_missing, opencl_missing


def _ok(result):
    assert result.returncode == 0, result.stderr
    return result


def test_opencl_compile_show_run_matches_onnxruntime(cli, tmp_path, cnn_path, cnn_model):
    if opencl_missing():
        pytest.skip(opencl_missing())
    art, inputs, outputs = tmp_path / "cnn.tsgpu", tmp_path / "in.npz", tmp_path / "out.npz"
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.savez(inputs, x=x)
    result = _ok(cli("compile", cnn_path, "--target", "opencl", "-o", art))
    assert "opencl" in result.stdout and "cnn.tsgpu" in result.stdout
    shown = _ok(cli("show", art))
    assert "kernel calls" in shown.stdout and "softmax" in shown.stdout
    _ok(cli("run", art, "--inputs", inputs, "--outputs", outputs))
    expected = run_ort(cnn_model(), {"x": x})[0]
    np.testing.assert_allclose(np.load(outputs)["y"], expected, rtol=1e-4, atol=1e-6)
    refused = cli("run", art, "--profile")
    assert refused.returncode != 0 and "--profile times CPU kernel calls" in refused.stderr


def test_cuda_compile_and_run_without_a_gpu_says_so(cli, tmp_path, cnn_path):
    if nvrtc_missing():
        pytest.skip(nvrtc_missing())
    from tessera.runtime.cuda_device import CUDAUnavailable, device_api

    art = tmp_path / "cnn.tsgpu"
    _ok(cli("compile", cnn_path, "--target", "cuda -arch=sm_80", "-o", art))
    _ok(cli("show", art))
    try:
        device_api(0)
    except CUDAUnavailable:
        result = cli("run", art)
        assert result.returncode != 0
        assert "cannot run" in result.stderr and "no CUDA driver or GPU" in result.stderr
    else:
        _ok(cli("run", art))
