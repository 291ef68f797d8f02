"""export_library for another architecture: the cross compiler links the kernels (user kernels
and compiled models alike) with the runtime's C built in."""

import subprocess

import pytest

import tessera
from tessera import te
from tessera.cross import toolchain_of_library
from tessera.cross.testing import missing_tools

TARGET = "llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a76"


def test_user_kernels_export_for_aarch64_with_the_runtime_inside(tmp_path):
    if missing_tools(TARGET):
        pytest.skip(f"not installed: {missing_tools(TARGET)} (scripts/setup.d/45-arm.sh)")
    A = te.placeholder((1024,), name="A")
    B = te.compute((1024,), lambda i: A[i] * 2.0, name="B")
    s = te.create_schedule(B.op)
    outer, _ = s[B].split(B.op.axis[0], factor=64)
    s[B].parallel(outer)  # the kernel calls the runtime's tessera_parallel_for
    mod = tessera.build(s, [A, B], target=TARGET, name="double")
    path = mod.export_library(tmp_path / "double.so")
    assert toolchain_of_library(path).name == "aarch64-linux-gnu"
    symbols = subprocess.run(
        ["aarch64-linux-gnu-nm", "-D", "--defined-only", str(path)], capture_output=True, text=True
    ).stdout.split()
    assert {"double", "tessera_parallel_for", "tessera_metadata"} <= set(symbols)
