"""Testing helpers for cross-built models: the ARM targets the tests cover, which tools are
missing here, and build + export + run under QEMU compared with ONNX Runtime.

    check_under_qemu(model, {"input": x}, "aarch64-sve", tmp_path)
"""

from __future__ import annotations

import shutil

import numpy as np

# name -> (target, QEMU cpu): NEON; SVE (QEMU's "max" aarch64 CPU has SVE); 32-bit ARM with NEON
ARM_TARGETS = {
    "aarch64-neon": ("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a76", "cortex-a76"),
    "aarch64-sve": ("llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-v1", "max"),
    "armv7-neon": ("llvm -mtriple=armv7a-linux-gnueabihf -mattr=+neon", "cortex-a15"),
}


def conv_dense_model(seed=0):
    """conv + bias + relu, max-pool, flatten, dense + bias, softmax (exp: a libm call, which
    catches a float ABI that differs from the board's C library)."""
    from onnx import helper

    from tessera.frontend.testing import make_model

    rng = np.random.default_rng(seed)
    weights = {
        "w": (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32),
        "b": rng.standard_normal(8).astype(np.float32),
        "d": (rng.standard_normal((8 * 6 * 6, 10)) * 0.1).astype(np.float32),
        "e": rng.standard_normal(10).astype(np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("MatMul", ["f", "d"], ["m"]),
        helper.make_node("Add", ["m", "e"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["y"], axis=-1),
    ]
    model = make_model(nodes, {"x": ((1, 3, 12, 12), np.float32)}, ["logits", "y"], weights)
    x = rng.standard_normal((1, 3, 12, 12)).astype(np.float32)
    return model, {"x": x}


def missing_tools(target: str) -> list[str]:
    """The cross compiler and emulator of `target` that are not installed here."""
    from tessera.cross.toolchain import toolchain_for
    from tessera.target import Target

    toolchain = toolchain_for(Target(target))
    tools = (f"{toolchain.name}-gcc", toolchain.qemu)
    return [tool for tool in tools if shutil.which(tool) is None]


def check_under_qemu(model, feeds, target_name, folder, rtol=1e-4):
    """Build an ONNX model for one of ARM_TARGETS, export it into `folder`, run it under QEMU
    and compare with ONNX Runtime relative to each output's scale; the library's path."""
    import tessera
    from tessera.cross.qemu import run_under_qemu
    from tessera.frontend import from_onnx
    from tessera.frontend.testing import run_ort

    target, cpu = ARM_TARGETS[target_name]
    expected = run_ort(model, feeds)
    mod, params = from_onnx(model)
    lib = tessera.build(mod, target=target, params=params)
    path = lib.export_library(folder / f"{target_name}.so")
    got = run_under_qemu(path, feeds, cpu=cpu, num_threads=2)
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert g.shape == e.shape and g.dtype == e.dtype, (g.shape, g.dtype, e.shape, e.dtype)
        scale = max(1.0, float(np.abs(e).max()))
        np.testing.assert_allclose(g, e, rtol=0, atol=rtol * scale)
    return path
