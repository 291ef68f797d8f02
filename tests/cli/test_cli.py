"""The `tessera` command, run for real in a subprocess: compile -> run -> compare with ONNX
Runtime, show, ops, bench, and the errors a user can make (exit code and message)."""

import json
import os
import re
import subprocess

import numpy as np
import onnx
import pytest
from onnx import helper

from tessera.frontend.testing import make_model, run_ort

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _ok(result):
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result


def test_console_script_is_installed():
    script = os.path.join(ROOT, ".venv", "bin", "tessera")
    if not os.path.exists(script):
        pytest.skip("no .venv/bin/tessera (tessera is not installed in a venv here)")
    result = _ok(subprocess.run([script, "--help"], capture_output=True, text=True, timeout=60))
    for command in ("compile", "run", "bench", "show", "ops"):
        assert command in result.stdout


def test_compile_run_matches_onnxruntime(cli, tmp_path, cnn_path, cnn_model):
    so, inputs, outputs = tmp_path / "cnn.so", tmp_path / "in.npz", tmp_path / "out.npz"
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.savez(inputs, x=x)
    result = _ok(cli("compile", cnn_path, "-o", so))
    for word in ("fused kernels", "weights", "arena", "compile time", "cache hits"):
        assert word in result.stdout
    assert so.exists()
    _ok(cli("run", so, "--inputs", inputs, "--outputs", outputs))
    got = np.load(outputs)["y"]
    expected = run_ort(cnn_model(), {"x": x})[0]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6)


def test_c_target_and_input_shape(cli, tmp_path, dynamic_cnn_path):
    so, outputs = tmp_path / "cnn_c.so", tmp_path / "out.npz"
    args = ("--target", "c", "--input-shape", "x:2x3x8x8", "-o", so)
    _ok(cli("compile", dynamic_cnn_path, *args))
    _ok(cli("run", so, "--outputs", outputs))
    y = np.load(outputs)["y"]
    assert y.shape == (2, 10)
    np.testing.assert_allclose(y.sum(axis=1), 1.0, rtol=1e-5)  # softmax rows


def test_run_profile_names_onnx_nodes(cli, tmp_path, cnn_path):
    so, prof = tmp_path / "cnn.so", tmp_path / "prof.json"
    _ok(cli("compile", cnn_path, "-o", so))
    result = _ok(cli("run", so, "--profile", "--profile-json", prof, "--repeat", "3"))
    assert "per-kernel profile" in result.stdout
    for node in ("conv1", "relu1", "pool1", "fc", "softmax"):
        assert re.search(rf"\b{node}\b", result.stdout), node
    shares = [float(s) for s in re.findall(r"(\d+\.\d)%\W+\d+\.\d%", result.stdout)]
    assert len(shares) == 5 and abs(sum(shares) - 100) < 0.6  # the conv reads x as it is
    data = json.loads(prof.read_text())
    assert [k["index"] for k in data["kernels"]] == list(range(5))
    assert data["kernels"][0]["nodes"] == ["conv1", "relu1"]
    assert all(k["seconds"] > 0 for k in data["kernels"])


def test_show_onnx_model(cli, cnn_path):
    result = _ok(cli("show", cnn_path, "--kernels", "--ir", "fuse_ops"))
    out = result.stdout
    for text in ("inputs", "1x3x8x8", "outputs", "Conv", "Gemm", "graph after each stage"):
        assert text in out
    for stage in ("import", "infer_types", "simplify_inference", "fuse_ops"):
        assert stage in out
    assert "fused_nn_conv2d_nchwc_add_nn_relu" in out  # alter_layout (llvm)
    assert "after fuse_ops" in out and "def main(" in out  # the graph text after the stage


def test_show_artifact(cli, cnn_so):
    out = _ok(cli("show", cnn_so)).stdout
    assert "kernel calls" in out and "fused_nn_dense_packed_add" in out and "conv1, relu1" in out


def test_ops_table(cli):
    out = _ok(cli("ops")).stdout
    match = re.search(r"(\d+) of (\d+) ONNX ops supported", out)
    assert match and 0 < int(match.group(1)) <= int(match.group(2))
    assert re.search(r"Conv\s.*yes", out)
    missing = _ok(cli("ops", "--missing", "--markdown")).stdout
    assert "| Conv |" not in missing and "| op | supported |" in missing


def test_bench_against_onnxruntime(cli, cnn_path):
    result = _ok(cli("bench", cnn_path, "--repeat", "5", "--threads", "1", "--warmup", "1"))
    out = result.stdout
    for text in (
        "p50 (ms)",
        "p90 (ms)",
        "p99 (ms)",
        "throughput",
        "onnxruntime",
        "tessera/onnxruntime",
    ):
        assert text in out
    diff = float(re.search(r"max abs diff ([\d.e+-]+)", out).group(1))
    assert diff < 1e-5


def test_verbose_logs_and_quiet(cli, tmp_path, cnn_path):
    so = tmp_path / "m.so"
    verbose = _ok(cli("-v", "compile", cnn_path, "-o", so))
    assert "INFO tessera" in verbose.stderr
    quiet = _ok(cli("compile", cnn_path, "-o", so, "-q"))
    assert quiet.stdout.strip() == str(so) and quiet.stderr == ""


# ---------------------------------------------------------------- errors


def _fails(result, code, *words):
    assert result.returncode == code, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    for w in words:
        assert w in result.stderr, f"{w!r} not in:\n{result.stderr}"
    assert "Traceback" not in result.stderr
    return result


def test_missing_file(cli):
    _fails(cli("compile", "no/such/model.onnx"), 2, "no/such/model.onnx", "does not exist")
    _fails(cli("run", "missing.so"), 2, "missing.so")


def test_not_an_onnx_file(cli, tmp_path):
    bad = tmp_path / "notes.onnx"
    bad.write_text("this is a text file, not a model\n" * 20)
    _fails(cli("compile", bad), 1, "notes.onnx", "is not an ONNX model")
    _fails(cli("show", bad), 1, "is not an ONNX model")
    _fails(cli("run", bad), 1, "cannot load", "notes.onnx")


def test_unsupported_op(cli, tmp_path):
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="ok"),
        helper.make_node("FooBar", ["a"], ["y"], name="custom_op_1"),
    ]
    path = tmp_path / "custom.onnx"
    onnx.save(make_model(nodes, {"x": ((2, 2), "float32")}, ["y"]), str(path))
    _fails(cli("compile", path), 1, "custom_op_1: FooBar", "unsupported")
    result = _fails(cli("show", path), 1, "custom_op_1: FooBar")
    assert re.search(r"FooBar\s.*no", result.stdout)  # the histogram marks it


def test_bad_input_shape(cli, cnn_path):
    _fails(cli("compile", cnn_path, "--input-shape", "x:1xthree"), 2, "--input-shape", "1xthree")
    _fails(cli("compile", cnn_path, "--input-shape", "1x3x8x8"), 2, "NAME:DIMS")
    _fails(cli("compile", cnn_path, "--input-shape", "data:1x3x8x8"), 1, "'data'", "not an input")


def test_dynamic_batch_compiles_once_and_runs_given_inputs(cli, tmp_path, dynamic_cnn_path):
    so, inputs, outputs = tmp_path / "dyn.so", tmp_path / "in.npz", tmp_path / "out.npz"
    _ok(cli("compile", dynamic_cnn_path, "-o", so, "-q"))  # N stays symbolic (docs/dynamic.md)
    _fails(cli("run", so), 1, "'x'", "symbolic", "--inputs")
    for n in (1, 3):
        np.savez(inputs, x=np.zeros((n, 3, 8, 8), np.float32))
        _ok(cli("run", so, "--inputs", inputs, "--outputs", outputs))
        assert np.load(outputs)["y"].shape == (n, 10)


def test_inputs_with_wrong_shapes(cli, tmp_path, cnn_so):
    so, inputs = cnn_so, tmp_path / "in.npz"  # the run only reads the library
    np.savez(inputs, x=np.zeros((1, 3, 9, 9), np.float32))
    _fails(cli("run", so, "--inputs", inputs), 1, "input 'x'", "(1, 3, 8, 8)", "(1, 3, 9, 9)")
    np.savez(inputs, y=np.zeros((1, 3, 8, 8), np.float32))
    _fails(cli("run", so, "--inputs", inputs), 1, "'y' is not an input")


def test_usage_errors_exit_2(cli):
    _fails(cli("compile", "--opt-level", "7"), 2, "--opt-level")
    _fails(cli("frobnicate"), 2, "No such command")


def test_verbose_error_shows_traceback(cli, tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00\xff" * 10)
    result = cli("compile", bad, "-v")
    assert result.returncode == 1 and "Traceback" in result.stderr


class _Inputs:
    """What read_inputs asks of a GraphModule."""

    def get_input_info(self):
        return {"x": (2, 3)}, {"x": "float32"}


def test_inputs_file_that_is_not_an_npz(tmp_path):
    from tessera.cli.build import read_inputs
    from tessera.cli.common import ModelError

    np.save(tmp_path / "x.npy", np.ones((2, 3), np.float32))
    with pytest.raises(ModelError, match=r"x\.npy is not an \.npz archive"):
        read_inputs(str(tmp_path / "x.npy"), _Inputs())
    np.savez(tmp_path / "in.npz", np.ones((2, 3), np.float32))  # by position: arr_0
    feeds = read_inputs(str(tmp_path / "in.npz"), _Inputs())
    np.testing.assert_array_equal(feeds["x"], np.ones((2, 3), np.float32))
