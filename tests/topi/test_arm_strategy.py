"""The ARM strategies (topi/arm/strategy.py): selected for ARM triples only, the register tile
of Note [arm register tile] within the register file, defaults inside their config spaces, and
the x86 targets' strategies and defaults untouched. Runs without cross tools (nothing is
executed: QEMU runs are in tests/cross/test_arm_kernels.py)."""

import numpy as np
import pytest
from onnx import helper

import tessera
from tessera import autotune
from tessera.frontend import from_onnx
from tessera.frontend.testing import make_model
from tessera.topi.arm.strategy import arm_blocking, arm_tile
from tessera.topi.strategy import find_strategy
from tessera.topi.x86.dense import choose_blocking, fit_blocking

AARCH64 = tessera.Target("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a76")
ARMV7 = tessera.Target("llvm -mtriple=armv7a-linux-gnueabihf -mattr=+neon")
X86 = tessera.Target("llvm -mtriple=x86_64-linux-gnu -mcpu=skylake-avx512")


def matmul_model(m, k, n, constant_b=True):
    rng = np.random.default_rng(0)
    weights = {"b": rng.standard_normal((k, n)).astype(np.float32)} if constant_b else {}
    inputs = {"a": ((m, k), np.float32)}
    if not constant_b:
        inputs["b"] = ((k, n), np.float32)
    return make_model([helper.make_node("MatMul", ["a", "b"], ["y"])], inputs, ["y"], weights)


@pytest.mark.parametrize("op", ["nn.dense", "matmul", "nn.batch_matmul"])
def test_arm_targets_take_the_arm_strategy_and_x86_the_cpu_one(op):
    assert find_strategy(op, AARCH64).key == "arm"
    assert find_strategy(op, ARMV7).key == "arm"
    assert find_strategy(op, X86).key == "cpu"
    assert find_strategy("nn.conv2d", AARCH64).key == "arm"
    assert find_strategy("nn.conv2d", X86).key == "cpu"


@pytest.mark.parametrize("target, registers", [(AARCH64, 32), (ARMV7, 16)])
@pytest.mark.parametrize("m", [1, 2, 3, 5, 7, 16, 64, 100, 1024])
def test_tile_fits_the_register_file(target, registers, m):
    mr, nv = arm_tile(registers, 4, m, 1024)
    assert 1 <= mr <= m and nv in (1, 2, 4)
    assert mr * nv + nv + mr <= registers  # accumulators, B vectors, one A element per row


def test_tile_rule_values():
    # aarch64: 4x4 (the x86 rule's 6x4 needs 34 registers on ARM); armv7: 2x4
    assert arm_tile(32, 4, 16, 256) == (4, 4)
    assert arm_tile(16, 4, 16, 256) == (2, 4)
    assert arm_tile(32, 4, 1, 1000) == (1, 4)
    assert arm_tile(32, 4, 16, 4) == (8, 1)  # no panel wider than the matrix
    assert arm_tile(32, 4, 16, 256, nv=2)[1] == 2  # a packed panel fixes nv
    assert choose_blocking(AARCH64, 16, 256, 256).mr == 6  # the x86 rule, for comparison


@pytest.mark.parametrize("target", [AARCH64, ARMV7])
@pytest.mark.parametrize("constant_b", [True, False])
def test_defaults_are_the_rule_and_inside_the_space(target, constant_b):
    mod, params = from_onnx(matmul_model(16, 256, 256, constant_b))
    (task,) = autotune.extract_tasks(mod, params, target)
    assert str(task).startswith("arm:")
    config = task.default(target)
    assert task.valid(config, target)
    blk = arm_blocking(target, 16, 256, 256)
    assert (config["mr"], config["nv"], config["kc"]) == (blk.mr, blk.nv, blk.kc)


def test_x86_defaults_unchanged():
    mod, params = from_onnx(matmul_model(16, 256, 256, constant_b=False))
    (task,) = autotune.extract_tasks(mod, params, X86)
    assert str(task).startswith("cpu:")
    blk = fit_blocking(X86, 16, 256, 256)  # the cpu strategy's rule (Note [tile waste])
    config = task.default(X86)
    assert (config["mr"], config["nv"], config["kc"]) == (blk.mr, blk.nv, blk.kc)


def conv_model(ic, oc, size, stride, kernel=3):
    w = (np.random.default_rng(0).standard_normal((oc, ic, kernel, kernel)) * 0.1).astype("f4")
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[kernel // 2] * 4, strides=[stride] * 2)
    return make_model([node], {"x": ((1, ic, size, size), np.float32)}, ["y"], {"w": w})


@pytest.mark.parametrize(
    "ic, oc, size, stride, ow_block", [(64, 128, 28, 2, 7), (32, 64, 56, 2, 7)]
)
def test_armv7_direct_conv_defaults(ic, oc, size, stride, ow_block):
    """Note [armv7 conv tile]: one weight stream, the input padded once, no prefetch (the
    schedule's own defaults, for a kernel built without a config, are counted under QEMU in
    tests/cross/test_arm_kernels.py)."""
    mod, params = from_onnx(conv_model(ic, oc, size, stride))
    (task,) = autotune.extract_tasks(mod, params, ARMV7)
    config = task.default(ARMV7)
    assert str(task).startswith("arm:") and task.valid(config, ARMV7)
    want = {"oc_vectors": 1, "ow_block": ow_block, "pad_per_tile": False, "prefetch": False}
    assert config.impl == "direct_nchwc" and {k: config[k] for k in want} == want


def test_aarch64_conv_defaults_are_the_cpu_rule():
    from tessera.topi.strategy import Task

    mod, params = from_onnx(conv_model(64, 128, 28, 2))
    (task,) = autotune.extract_tasks(mod, params, AARCH64)
    assert task.default(AARCH64) == Task(task.workload, "cpu").default(AARCH64)
    assert task.default(AARCH64)["oc_vectors"] > 1  # the cpu tile rule, not armv7's


@pytest.mark.parametrize(
    "target, bits, lanes",
    [
        ("-mcpu=neoverse-v1", 256, 8),  # the core's own SVE length
        ("-mcpu=neoverse-v1 -msve-vector-bits=128", 128, 4),
        ("-mcpu=neoverse-v1 -mattr=-sve", None, 4),  # NEON
        ("-mcpu=neoverse-v2", 128, 4),
        ("-mattr=+sve -msve-vector-bits=512", 512, 16),
        ("-mattr=+sve", None, 4),  # an SVE core of unknown length: NEON-wide, no fixed length
        ("-mcpu=cortex-a76", None, 4),
    ],
)
def test_sve_vector_length_sizes_the_blocks(target, bits, lanes):
    """Note [fixed-length SVE]: the SVE length is the target's vector width, so the blocks
    (here a dense tile's vectors and a conv's channel block) are as wide."""
    t = tessera.Target(f"llvm -mtriple=aarch64-linux-gnu {target}")
    assert t.sve_vector_bits == bits and t.vector_lanes("float32") == lanes
    assert tessera.Target(str(t)) == t
    assert arm_blocking(t, 16, 256, 256).lanes == lanes
    mod, params = from_onnx(conv_model(64, 128, 28, 2))
    (task,) = autotune.extract_tasks(mod, params, t)
    config = task.default(t)
    assert config.impl == "direct_nchwc" and config["out_block"] == lanes  # NCHW[lanes]c


def test_sve_length_option_is_checked():
    with pytest.raises(ValueError, match="-msve-vector-bits must be 128, 256"):
        tessera.Target("llvm -mtriple=aarch64-linux-gnu -mattr=+sve -msve-vector-bits=96")
    with pytest.raises(ValueError, match="needs an integer"):
        tessera.Target("llvm -mtriple=aarch64-linux-gnu -msve-vector-bits=wide")


@pytest.mark.parametrize(
    "options, blocked, lanes",
    [("-mcpu=cortex-a76", True, 8), ("-mcpu=neoverse-v1", True, 16),
     ("-mcpu=cortex-a76 -mattr=-fullfp16", False, 0), ("-mcpu=cortex-a72", False, 0)],
)  # fmt: skip
def test_float16_convs_are_blocked_on_half_lanes_where_the_core_has_fp16(options, blocked, lanes):
    """Note [half blocks]: with FEAT_FP16 a float16 conv takes the blocked kernel (a layout of
    8 channels, tiles of vectors of the half lanes); without it, NCHW as before."""
    from tessera.topi.x86.strategy import blocked_dtypes

    target = tessera.Target(f"llvm -mtriple=aarch64-linux-gnu {options}")
    assert ("float16" in blocked_dtypes(target)) == blocked
    rng = np.random.default_rng(0)
    w = rng.standard_normal((32, 16, 3, 3)).astype(np.float16)
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1] * 4, strides=[2, 2])
    model = make_model([node], {"x": ((1, 16, 14, 14), np.float16)}, ["y"], {"w": w})
    mod, params = from_onnx(model)
    ll = tessera.build(mod, target=target, params=params).get_source("ll")
    assert ("conv2d_nchwc" in ll) == blocked
    if blocked:
        assert f"<{lanes} x half>" in ll  # blocks of 8 (NEON) or 16 (256-bit SVE) channels


def test_x86_float16_convs_keep_nchw():
    target = tessera.Target("llvm -mcpu=sapphirerapids")
    rng = np.random.default_rng(0)
    w = rng.standard_normal((24, 16, 3, 3)).astype(np.float16)
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1] * 4)
    model = make_model([node], {"x": ((1, 16, 14, 14), np.float16)}, ["y"], {"w": w})
    mod, params = from_onnx(model)
    lib = tessera.build(mod, target=target, params=params)
    assert "conv2d_nchwc" not in lib.get_source("ll")
    assert "layout_transform" not in lib.get_source("ll")
