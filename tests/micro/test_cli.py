"""`tessera compile --target micro --board B`: a board project with the memory report."""

from __future__ import annotations

import json
import subprocess
import sys

import onnx


def test_compile_target_micro_writes_sources(tmp_path, small_cnn):
    model = tmp_path / "small.onnx"
    onnx.save(small_cnn(), str(model))
    out = tmp_path / "small_m7"
    cmd = [sys.executable, "-m", "tessera.cli", "compile", str(model), "--target", "micro"]
    cmd += ["--board", "mps2-an500", "-o", str(out)]  # its CPU: a Cortex-M7
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "micro memory" in result.stdout
    report = json.loads((out / "memory_report.json").read_text())
    assert report["target"] == "c -mcpu=cortex-m7 -device=micro"
    assert (out / "tessera_model.h").exists() and (out / "tessera_weights.c").exists()
    assert "mps2-an500" in (out / "Makefile").read_text()
