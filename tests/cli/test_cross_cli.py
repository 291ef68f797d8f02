"""`tessera compile --target` with a full target string: an aarch64 artifact from the command
line runs under QEMU and matches ONNX Runtime; a bad target string is a usage error."""

import numpy as np
import pytest

from tessera.cross import run_under_qemu
from tessera.cross.testing import missing_tools
from tessera.frontend.testing import run_ort

TARGET = "llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a76"


def test_compile_for_aarch64_from_the_command_line(cli, tmp_path, cnn_path, cnn_model):
    if missing_tools(TARGET):
        pytest.skip(f"not installed: {missing_tools(TARGET)} (scripts/setup.d/45-arm.sh)")
    so = tmp_path / "cnn-aarch64.so"
    result = cli("compile", cnn_path, "--target", TARGET, "-o", so)
    assert result.returncode == 0, result.stderr
    assert "aarch64" in result.stdout  # the summary names the target
    x = np.random.default_rng(3).standard_normal((1, 3, 8, 8)).astype(np.float32)
    (got,) = run_under_qemu(so, {"x": x}, cpu="cortex-a76")
    np.testing.assert_allclose(got, run_ort(cnn_model(), {"x": x})[0], rtol=1e-4, atol=1e-6)


def test_a_bad_target_string_is_a_usage_error(cli, cnn_path):
    result = cli("compile", cnn_path, "--target", "llvm -mcpu=cortex-z99")
    assert result.returncode == 2
    assert "unknown -mcpu=cortex-z99" in result.stderr
