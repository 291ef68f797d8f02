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


def fp16_model(seed=0):
    """A float16 conv (3x3, pads 1) + relu + dense, and its float32 twin: the same weights,
    widened, for the reference."""
    from onnx import helper

    from tessera.frontend.testing import make_model

    rng = np.random.default_rng(seed)
    weights = {
        "w": (rng.standard_normal((16, 8, 3, 3)) * 0.2).astype(np.float16),
        "d": (rng.standard_normal((16 * 6 * 6, 12)) * 0.05).astype(np.float16),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Flatten", ["r"], ["f"]),
        helper.make_node("MatMul", ["f", "d"], ["y"]),
    ]
    x = rng.standard_normal((1, 8, 6, 6)).astype(np.float16)
    models = {}
    for dt in (np.float16, np.float32):
        cast = {k: v.astype(dt) for k, v in weights.items()}
        models[dt] = make_model(nodes, {"x": ((1, 8, 6, 6), dt)}, ["c", "y"], cast)
    return models, x


def missing_tools(target: str) -> list[str]:
    """The cross compiler and emulator of `target` that are not installed here."""
    from tessera.cross.toolchain import toolchain_for
    from tessera.target import Target

    toolchain = toolchain_for(Target(target))
    tools = (f"{toolchain.name}-gcc", toolchain.qemu)
    return [tool for tool in tools if shutil.which(tool) is None]


def check_under_qemu(model, feeds, target_name, folder, rtol=1e-4, reference=None):
    """Build an ONNX model for one of ARM_TARGETS, export it into `folder`, run it under QEMU
    and compare with ONNX Runtime (or `reference(model, feeds)`) relative to each output's
    scale; the library's path."""
    import tessera
    from tessera.cross.qemu import run_under_qemu
    from tessera.frontend import from_onnx
    from tessera.frontend.testing import run_ort

    target, cpu = ARM_TARGETS[target_name]
    expected = (reference or run_ort)(model, feeds)
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


# -- kernels against a naive build (bench/arm.py, tests/cross/test_arm_kernels.py) ----------------


def conv_case(ic, oc, size, kernel, stride=1, groups=1, seed=0):
    """A one-Conv ONNX model (pads kernel // 2) and the same conv as te tensors (x, w, y)."""
    from onnx import helper

    from tessera import te
    from tessera.frontend.testing import make_model
    from tessera.topi.nn.conv import conv

    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((oc, ic // groups, kernel, kernel)) * 0.1).astype(np.float32)
    pads = [kernel // 2] * 4
    node = helper.make_node(
        "Conv", ["x", "w"], ["y"], pads=pads, strides=[stride] * 2, group=groups
    )
    model = make_model([node], {"x": ((1, ic, size, size), np.float32)}, ["y"], {"w": w})
    x = te.placeholder((1, ic, size, size), name="x")
    wt = te.placeholder(w.shape, name="w")
    return model, [x, wt, conv(x, wt, (stride, stride), pads, (1, 1), groups)]


def matmul_case(m, k, n, constant_b=True, batch=0, seed=0):
    """A one-MatMul ONNX model, (batch,) m x k @ k x n with B a weight (constant_b) or a second
    input, and the same product as te tensors (a, b, y)."""
    from onnx import helper

    from tessera import te
    from tessera.frontend.testing import make_model
    from tessera.topi.nn.dense import matmul

    rng = np.random.default_rng(seed)
    lead = (batch,) if batch else ()
    inputs = {"a": ((*lead, m, k), np.float32)}
    weights = {}
    if constant_b:
        weights["b"] = (rng.standard_normal((k, n)) * 0.1).astype(np.float32)
    else:
        inputs["b"] = ((*lead, k, n), np.float32)
    model = make_model([helper.make_node("MatMul", ["a", "b"], ["y"])], inputs, ["y"], weights)
    a = te.placeholder((*lead, m, k), name="a")
    b = te.placeholder((*lead, k, n), name="b")
    return model, [a, b, matmul(a, b)]


def int8_matmul_case(m, k, n, seed=0):
    """A one-MatMulInteger ONNX model, uint8 m x k @ a constant int8 k x n -> int32, and the
    same product as te tensors (a, b, y)."""
    from onnx import helper

    from tessera import te
    from tessera.frontend.testing import make_model

    rng = np.random.default_rng(seed)
    weight = rng.integers(-128, 128, (k, n)).astype(np.int8)
    node = helper.make_node("MatMulInteger", ["a", "b"], ["y"])
    model = make_model([node], {"a": ((m, k), np.uint8)}, ["y"], {"b": weight})
    a = te.placeholder((m, k), dtype="uint8", name="a")
    b = te.placeholder((k, n), dtype="int8", name="b")
    r = te.reduce_axis((0, k), name="r")

    def product(i, j):
        return te.sum(a[i, r].astype("int32") * b[r, j].astype("int32"), axis=r)

    return model, [a, b, te.compute((m, n), product, name="y")]


def naive_and_tessera_counts(case, target_name, folder) -> tuple[int, int]:
    """Instructions under QEMU of one op: (the naive build: the op's compute with no schedule,
    the loop nest as written, for the same target by the same LLVM; tessera's kernel of the
    one-op model, built with the strategies' defaults, counted alone: without the layout
    transforms of the model's input and output)."""
    target, cpu = ARM_TARGETS[target_name]
    return (
        naive_kernel_count(case, target, cpu, folder / f"naive-{target_name}.so"),
        tessera_kernel_count(case, target, cpu, folder / f"tessera-{target_name}.so"),
    )


def naive_kernel_count(case, target: str, cpu: str, path) -> int:
    """Instructions under QEMU of the naive build of a case's op (naive_and_tessera_counts),
    built for `target` into the library `path`, run on QEMU's `cpu`."""
    import tessera
    from tessera import te
    from tessera.cross.qemu import count_kernel_instructions

    _, tensors = case
    naive = tessera.build(te.create_schedule(tensors[-1].op), tensors, target=target, name="naive")
    return count_kernel_instructions(naive.export_library(path), "naive", cpu=cpu)


def tessera_kernel_count(case, target: str, cpu: str, path) -> int:
    """Instructions under QEMU of tessera's kernel of a one-op case (naive_and_tessera_counts),
    built for `target` into the library `path`, run on QEMU's `cpu`."""
    import tessera
    from tessera.cross.qemu import count_kernel_instructions, read_metadata
    from tessera.frontend import from_onnx

    model, _ = case
    mod, params = from_onnx(model)
    lib = tessera.build(mod, target=target, params=params)
    path = lib.export_library(path)
    kernels = [f.name for f in read_metadata(path, cpu)[0] if "layout_transform" not in f.name]
    if len(kernels) != 1:
        raise ValueError(f"expected the op's one kernel besides layout transforms, got {kernels}")
    return count_kernel_instructions(path, kernels[0], cpu=cpu)
