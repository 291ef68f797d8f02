"""Instruction counts under QEMU (the TCG plugin insn_count.c): exact and repeatable, and they
see what the code generator did: the armv7 build with NEON executes far fewer instructions than
the same model built without it (measured: 52 k vs 121 k for this model)."""

import pytest

import tessera
from tessera.cross import count_instructions
from tessera.cross.testing import conv_dense_model, missing_tools
from tessera.frontend import from_onnx

ARMV7 = "llvm -mtriple=armv7a-linux-gnueabihf"


def test_neon_executes_fewer_instructions_than_scalar_code(tmp_path):
    if missing_tools(ARMV7):
        pytest.skip(f"not installed: {missing_tools(ARMV7)} (scripts/setup.d/45-arm.sh)")
    model, feeds = conv_dense_model()
    mod, params = from_onnx(model)
    counts = {}
    for attr in ("+neon", "-neon"):
        lib = tessera.build(mod, target=f"{ARMV7} -mattr={attr}", params=params)
        path = lib.export_library(tmp_path / f"model{attr}.so")
        counts[attr] = count_instructions(path, feeds, cpu="cortex-a15")
        assert count_instructions(path, feeds, cpu="cortex-a15") == counts[attr]  # repeatable
    assert 0 < counts["+neon"] * 1.5 < counts["-neon"], counts
