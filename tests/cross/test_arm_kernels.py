"""The ARM kernels under QEMU: matrix products with the ARM register tile (topi/arm) match ONNX
Runtime on every ARM target, with row and column tails; one kernel's instructions counted alone
(count_kernel_instructions); the NEON conv and dense kernels execute >= 4x fewer instructions
than a naive build of the same op (bench/arm.py prints the table for larger shapes)."""

import numpy as np
import pytest
from onnx import helper

import tessera
from tessera import te
from tessera.cross import count_kernel_instructions
from tessera.cross.testing import (
    ARM_TARGETS,
    check_under_qemu,
    conv_case,
    matmul_case,
    missing_tools,
    naive_and_tessera_counts,
)
from tessera.frontend.testing import make_model


def require_toolchain(target_name: str) -> None:
    missing = missing_tools(ARM_TARGETS[target_name][0])
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)} (scripts/setup.d/45-arm.sh)")


def products_model(m, k, n, seed=0):
    """dense (Gemm with bias: packed weight), then a matmul of two runtime values (B read as it
    is), then a batched matmul: every kind of the ARM strategies' products, with tails."""
    rng = np.random.default_rng(seed)
    weights = {
        "w": (rng.standard_normal((n, k)) * 0.2).astype(np.float32),
        "c": rng.standard_normal(n).astype(np.float32),
    }
    nodes = [
        helper.make_node("Gemm", ["x", "w", "c"], ["g"], transB=1),
        helper.make_node("Relu", ["g"], ["r"]),
        helper.make_node("Transpose", ["r"], ["rt"], perm=[1, 0]),
        helper.make_node("MatMul", ["r", "rt"], ["s"]),
        helper.make_node("Reshape", ["s", "shape"], ["s3"]),
        helper.make_node("MatMul", ["s3", "s3"], ["y"]),
    ]
    weights["shape"] = np.array([1, m, m], np.int64)
    model = make_model(nodes, {"x": ((m, k), np.float32)}, ["g", "y"], weights)
    return model, {"x": rng.standard_normal((m, k)).astype(np.float32)}


@pytest.mark.parametrize("target_name", list(ARM_TARGETS))
@pytest.mark.parametrize("m, k, n", [(16, 40, 24), (7, 33, 50)])
def test_products_match_ort_under_qemu(target_name, m, k, n, tmp_path):
    require_toolchain(target_name)
    model, feeds = products_model(m, k, n)
    check_under_qemu(model, feeds, target_name, tmp_path)


def test_count_kernel_instructions_of_a_user_kernel(tmp_path):
    require_toolchain("aarch64-neon")
    target, cpu = ARM_TARGETS["aarch64-neon"]
    counts = {}

    def twice(a):
        return te.compute(a.shape, lambda i: a[i] * 2.0, name="b")

    for n in (256, 512):
        a = te.placeholder((n,), name="a")
        b = twice(a)
        lib = tessera.build(te.create_schedule(b.op), [a, b], target=target, name="twice")
        path = lib.export_library(tmp_path / f"twice{n}.so")
        counts[n] = count_kernel_instructions(path, cpu=cpu)
        assert count_kernel_instructions(path, "twice", cpu=cpu) == counts[n]  # repeatable
    assert 0 < counts[256] < counts[512] < 3 * counts[256], counts
    with pytest.raises(ValueError, match="no kernel 'other'"):
        count_kernel_instructions(tmp_path / "twice256.so", "other", cpu=cpu)


NEON_CASES = {
    "conv3x3s2": lambda: conv_case(16, 32, 14, 3, stride=2),
    "conv1x1": lambda: conv_case(32, 32, 14, 1),
    "depthwise": lambda: conv_case(32, 32, 14, 3, groups=32),
    "dense": lambda: matmul_case(16, 128, 128),
}


# aarch64's depthwise kernel is not in the list: LLVM vectorizes the naive depthwise loop along
# the rows about as well (0.9x, docs/arm.md), and armv7's stride-2 3x3 conv reaches 3.2-3.5x
@pytest.mark.parametrize(
    "target_name, case",
    [
        ("aarch64-neon", "conv3x3s2"),
        ("aarch64-neon", "conv1x1"),
        ("aarch64-neon", "dense"),
        ("armv7-neon", "conv1x1"),
        ("armv7-neon", "depthwise"),
        ("armv7-neon", "dense"),
    ],
)
def test_neon_kernels_execute_4x_fewer_instructions_than_naive(target_name, case, tmp_path):
    require_toolchain(target_name)
    naive, ours = naive_and_tessera_counts(NEON_CASES[case](), target_name, tmp_path)
    assert ours * 4 <= naive, (naive, ours)


def test_matmul_model_with_a_runtime_operand_builds_for_armv7():
    # the "arm" batch_matmul strategy's blocked kernel (no packing: B is an input)
    model = make_model(
        [helper.make_node("MatMul", ["a", "b"], ["y"])],
        {"a": ((3, 9, 20), np.float32), "b": ((3, 20, 11), np.float32)},
        ["y"],
    )
    mod, params = tessera.frontend.from_onnx(model)
    lib = tessera.build(mod, target=ARM_TARGETS["armv7-neon"][0], params=params)
    assert "arm" in lib.get_source("ll")
