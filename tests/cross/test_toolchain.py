"""The cross toolchain table: which row serves a target, the errors for what is missing, and
LLVM triples in the arch-vendor-os-env form (the armv7 hard-float ABI depends on it)."""

import numpy as np
import pytest
from onnx import helper

import tessera
from tessera.cross import TOOLCHAINS, ToolchainMissing, is_foreign, toolchain_for
from tessera.cross import toolchain as toolchain_module
from tessera.frontend import from_onnx
from tessera.frontend.testing import make_model
from tessera.target import Target


def test_the_host_needs_no_cross_toolchain():
    assert toolchain_for(Target("llvm")) is None
    assert not is_foreign(Target("llvm -mcpu=skylake-avx512"))  # same architecture


@pytest.mark.parametrize(
    "target, name, qemu",
    [
        ("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a76", "aarch64-linux-gnu", "qemu-aarch64"),
        ("llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-v1", "aarch64-linux-gnu", "qemu-aarch64"),
        ("llvm -mtriple=armv7a-linux-gnueabihf -mattr=+neon", "arm-linux-gnueabihf", "qemu-arm"),
    ],
)
def test_arm_targets_have_their_toolchain(target, name, qemu):
    toolchain = toolchain_for(Target(target))
    assert (toolchain.name, toolchain.qemu) == (name, qemu)
    assert toolchain in TOOLCHAINS


def test_an_architecture_without_a_row_is_named():
    with pytest.raises(ValueError, match="no cross toolchain for architecture 'riscv64'"):
        toolchain_for(Target("llvm -mtriple=riscv64-linux-gnu"))


def test_triples_get_a_vendor_for_llvm():
    assert Target("llvm -mtriple=armv7a-linux-gnueabihf").llvm_triple == (
        "armv7a-unknown-linux-gnueabihf"
    )
    assert Target("llvm -mtriple=aarch64-linux-gnu").llvm_triple == "aarch64-unknown-linux-gnu"
    assert Target("llvm -mtriple=aarch64-apple-darwin").llvm_triple == "aarch64-apple-darwin"
    assert str(Target("llvm -mtriple=aarch64-linux-gnu")) == "llvm -mtriple=aarch64-linux-gnu"


def test_armv7_floats_pass_in_vfp_registers():
    # a float argument of a libm call: in s0 under the hard-float ABI, in r0 under soft-float
    from tessera import te

    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: te.exp(A[i]), name="B")
    s = te.create_schedule(B.op)
    mod = tessera.build(s, [A, B], target="llvm -mtriple=armv7a-linux-gnueabihf -mattr=+neon")
    assert ".eabi_attribute\t28, 1" in mod.get_source("asm")  # Tag_ABI_VFP_args: VFP registers


def test_a_missing_cross_compiler_names_the_debian_package(monkeypatch, tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["y"])]
    model = make_model(nodes, {"x": ((1, 4), np.float32)}, ["y"])
    mod, params = from_onnx(model)
    lib = tessera.build(mod, target="llvm -mtriple=aarch64-linux-gnu", params=params)
    assert "aarch64" in lib.get_source("ll")  # building needs no cross compiler
    monkeypatch.setattr(toolchain_module.shutil, "which", lambda name: None)
    with pytest.raises(ToolchainMissing, match="apt-get install gcc-aarch64-linux-gnu"):
        lib.export_library(tmp_path / "model.so")


def test_a_missing_emulator_names_qemu_user(monkeypatch):
    toolchain = toolchain_for(Target("llvm -mtriple=armv7a-linux-gnueabihf"))
    monkeypatch.setattr(toolchain_module.shutil, "which", lambda name: None)
    with pytest.raises(ToolchainMissing, match="needs qemu-arm.*apt-get install qemu-user"):
        toolchain.emulator()
