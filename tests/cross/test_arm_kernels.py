"""The ARM kernels under QEMU: matrix products with the ARM register tile (topi/arm) match ONNX
Runtime on every ARM target, with row and column tails; one kernel's instructions counted alone
(count_kernel_instructions); the NEON conv and dense kernels execute >= 4x fewer instructions
than a naive build of the same op (bench/arm.py prints the table for larger shapes)."""

import re

import numpy as np
import pytest
from onnx import helper, numpy_helper

import tessera
from tessera import autotune, te
from tessera.cross import count_instructions, count_kernel_instructions, run_under_qemu
from tessera.cross.testing import (
    ARM_TARGETS,
    check_under_qemu,
    conv_case,
    fp16_model,
    int8_matmul_case,
    matmul_case,
    missing_tools,
    naive_and_tessera_counts,
    tessera_kernel_count,
)
from tessera.frontend import from_onnx
from tessera.frontend.testing import make_model, run_int8_reference, run_ort
from tessera.topi.strategy import Config


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


@pytest.mark.parametrize(
    "ic, oc, size, kernel, stride",
    [(8, 16, 13, 3, 2), (8, 12, 22, 3, 2), (8, 12, 11, 1, 1)],  # ow 7, 11 (a row tail), 11
)
def test_armv7_direct_convs_match_ort_under_qemu(ic, oc, size, kernel, stride, tmp_path):
    """Note [armv7 conv tile]'s defaults (one weight stream, the input padded once), with
    and without row tails, give ONNX Runtime's answers on the emulated core."""
    require_toolchain("armv7-neon")
    model, _ = conv_case(ic, oc, size, kernel, stride=stride)
    x = np.random.default_rng(1).standard_normal((1, ic, size, size)).astype(np.float32)
    check_under_qemu(model, {"x": x}, "armv7-neon", tmp_path)


NEON_CASES = {
    "conv3x3s2": lambda: conv_case(16, 32, 14, 3, stride=2),
    "conv1x1": lambda: conv_case(32, 32, 14, 1),
    "depthwise": lambda: conv_case(32, 32, 14, 3, groups=32),
    "dense": lambda: matmul_case(16, 128, 128),
}


# aarch64's depthwise kernel is not in the list: LLVM vectorizes the naive depthwise loop along
# the rows (with SVE on the SVE target), and a 128-bit kernel needs at least one fmla per 4 of
# its multiply-adds, already more than a quarter of the naive count (docs/arm.md)
@pytest.mark.parametrize(
    "target_name, case",
    [
        ("aarch64-neon", "conv3x3s2"),
        ("aarch64-neon", "conv1x1"),
        ("aarch64-neon", "dense"),
        ("armv7-neon", "conv3x3s2"),
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


def int8_model(seed=0):
    """QLinearConv (3x3, per-channel int8 weights, uint8 data) then MatMulInteger: both on the
    dot_u8i8 kernels; full-range operands (a u8 x s8 product that saturated 16 bits, or swapped
    signedness, would not match ORT bit for bit)."""
    rng = np.random.default_rng(seed)
    oc = 16
    inits = {
        "xs": np.float32(0.02),
        "xz": np.array(3, np.uint8),
        "w": rng.integers(-128, 128, (oc, 8, 3, 3)).astype(np.int8),
        "ws": (rng.random(oc) * 0.01 + 0.001).astype(np.float32),
        "wz": np.zeros(oc, np.int8),
        "ys": np.float32(0.05),
        "yz": np.array(120, np.uint8),
        "shape": np.array([1, -1], np.int64),
        "b": rng.integers(-128, 128, (oc * 36, 10)).astype(np.int8),
        "az": np.array(120, np.uint8),
    }
    nodes = [
        helper.make_node(
            "QLinearConv",
            ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"],
            ["c"],
            pads=[1, 1, 1, 1],
            strides=[2, 2],
        ),
        helper.make_node("Reshape", ["c", "shape"], ["f"]),
        helper.make_node("MatMulInteger", ["f", "b", "az"], ["y"]),
    ]
    model = make_model(nodes, {"x": ((1, 8, 12, 12), np.uint8)}, ["c", "y"], inits, opset=13)
    return model, {"x": rng.integers(0, 256, (1, 8, 12, 12)).astype(np.uint8)}


@pytest.mark.parametrize("target_name", list(ARM_TARGETS))
def test_int8_matches_ort_bit_for_bit_under_qemu(target_name, tmp_path):
    require_toolchain(target_name)
    model, feeds = int8_model()
    check_under_qemu(model, feeds, target_name, tmp_path, rtol=0, reference=run_int8_reference)


AARCH64 = "llvm -mtriple=aarch64-linux-gnu"
# the CPU options -> the dot intrinsic their int8 kernels use
INT8_CPUS = {
    "-mcpu=neoverse-v1": "sve.usdot",  # I8MM, 256-bit SVE
    "-mcpu=neoverse-v1 -mattr=-i8mm": "sve.sdot",  # DotProd, 256-bit SVE
    "-mcpu=neoverse-v1 -msve-vector-bits=128": "neon.usdot",  # SVE no wider than NEON
    "-mcpu=neoverse-n1": "neon.sdot",
    "-mcpu=cortex-a72": None,
}
DOTS = ("sve.usdot", "sve.sdot", "neon.usdot", "neon.sdot")


@pytest.mark.parametrize("cpu", list(INT8_CPUS))
def test_int8_dot_instructions_match_ort(cpu, tmp_path):
    """dot_u8i8 on AArch64 (codegen/llvm/int8_dot.py): usdot with FEAT_I8MM (neoverse-v1), a
    pair of sdot with FEAT_DotProd (neoverse-n1), in their SVE forms on whole 256-bit SVE
    registers where the length is fixed, else shifts, multiplies and adds; each bit for bit
    with ORT (run on QEMU's max CPU, which has them all)."""
    require_toolchain("aarch64-neon")
    model, feeds = int8_model()
    mod, params = tessera.frontend.from_onnx(model)
    lib = tessera.build(mod, target=f"{AARCH64} {cpu}", params=params)
    ll = lib.get_source("ll")
    for name in DOTS:
        assert (f"aarch64.{name}." in ll) == (name == INT8_CPUS[cpu]), name
    got = run_under_qemu(lib.export_library(tmp_path / "int8.so"), feeds, cpu="max")
    for g, e in zip(got, run_int8_reference(model, feeds), strict=True):
        np.testing.assert_array_equal(g, e)


def test_int8_dot_instructions_execute_fewer_instructions(tmp_path):
    require_toolchain("aarch64-neon")
    model, feeds = int8_model()
    mod, params = tessera.frontend.from_onnx(model)
    counts = {}
    for cpu, name in INT8_CPUS.items():
        lib = tessera.build(mod, target=f"{AARCH64} {cpu}", params=params)
        counts[name] = count_instructions(lib.export_library(tmp_path / f"{name}.so"), feeds)
    # (on the I8MM cores the MatMulInteger runs usmmla: Note [i8mm matrix step])
    assert counts["neon.usdot"] < counts["neon.sdot"] < counts[None] / 1.5, counts
    assert counts["sve.usdot"] < counts["sve.sdot"] < counts["neon.sdot"], counts


@pytest.mark.parametrize("cpu", ["cortex-a76", "neoverse-v1"])
def test_fp16_arithmetic_where_the_core_has_it(cpu, tmp_path):
    """A float16 model on cores with FEAT_FP16 (Target.features "fullfp16") computes in half
    precision, `fmla` on 8 (NEON) or 16 (256-bit SVE) halves (Note [half sums] in
    topi/nn/dense.py), and matches the float32 model of the same weights within float16's
    rounding; without FEAT_FP16 (-mattr=-fullfp16) the products are summed in float32. Their
    instruction counts are bench/arm.py --fp16's to report, not this test's to compare."""
    require_toolchain("aarch64-neon")
    models, x = fp16_model()
    expected = run_ort(models[np.float32], {"x": x.astype(np.float32)})
    mod, params = tessera.frontend.from_onnx(models[np.float16])
    for name, extra in (("fp16", ""), ("widened", " -mattr=-fullfp16")):
        target = f"{AARCH64} -mcpu={cpu}{extra}"
        assert ("fullfp16" in tessera.Target(target).features) == (name == "fp16")
        lib = tessera.build(mod, target=target, params=params)
        asm = lib.get_source("asm")
        half_fma = r"\b(fmla\s+v\d+\.8h|fml[as]\s+z\d+\.h|fmad\s+z\d+\.h)"
        assert bool(re.search(half_fma, asm)) == (name == "fp16"), name
        path = lib.export_library(tmp_path / f"{name}.so")
        got = run_under_qemu(path, {"x": x}, cpu="max")
        for g, e in zip(got, expected, strict=True):
            assert g.dtype == np.float16
            scale = float(np.abs(e).max())
            # products rounded to half, sums of up to 576 of them in half: a few ulp of the scale
            np.testing.assert_allclose(g.astype(np.float32), e, rtol=0, atol=8e-3 * scale)


def test_sve_int8_dense_reads_whole_panels(tmp_path):
    """Note [arm int8 panel]: on 256-bit SVE an int8 dense tile keeps its vectors in one weight
    panel (else each vector was 8 scalar loads): bit for bit with ORT, and fewer instructions
    than the NEON build of the same core (-mattr=-sve)."""
    require_toolchain("aarch64-sve")
    case = int8_matmul_case(16, 96, 64)
    model, _ = case
    a = np.random.default_rng(1).integers(0, 256, (16, 96)).astype(np.uint8)
    w = next(numpy_helper.to_array(t) for t in model.graph.initializer)
    # without I8MM: the dot kernel on panels (the sdot pair), not usmmla (test_i8mm_* below)
    core = ARM_TARGETS["aarch64-sve"][0] + " -mattr=-i8mm"
    mod, params = from_onnx(model)
    lib = tessera.build(mod, target=core, params=params)
    assert "usmmla" not in lib.get_source("ll")
    (got,) = run_under_qemu(lib.export_library(tmp_path / "sve.so"), {"a": a}, cpu="max")
    np.testing.assert_array_equal(got, a.astype(np.int64) @ w.astype(np.int64))
    neon = tessera_kernel_count(case, core + ",-sve", "max", tmp_path / "neon.so")
    sve = tessera_kernel_count(case, core, "max", tmp_path / "sve.so")
    assert sve < neon, (sve, neon)


def depthwise_model(channels, size, stride, seed=0):
    """A depthwise 3x3 conv (pads 1) + bias + relu."""
    rng = np.random.default_rng(seed)
    weights = {
        "w": (rng.standard_normal((channels, 1, 3, 3)) * 0.3).astype(np.float32),
        "b": rng.standard_normal(channels).astype(np.float32),
    }
    nodes = [
        helper.make_node(
            "Conv", ["x", "w", "b"], ["c"], pads=[1] * 4, strides=[stride] * 2, group=channels
        ),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    model = make_model(nodes, {"x": ((1, channels, size, size), np.float32)}, ["y"], weights)
    return model, {"x": rng.standard_normal((1, channels, size, size)).astype(np.float32)}


@pytest.mark.parametrize("target_name", ["aarch64-neon", "aarch64-sve"])
def test_depthwise_tap_order(target_name, tmp_path):
    """Note [depthwise tap order]: at stride 2 on AArch64 a 14-wide tile takes each column's
    taps in turn (the default config says so, stride 1 not), matches ORT, and on NEON executes
    fewer instructions than the window order (the knob off)."""
    require_toolchain(target_name)
    target = tessera.Target(ARM_TARGETS[target_name][0])
    for stride, inner in ((1, False), (2, True)):
        mod, params = from_onnx(depthwise_model(16, 14 * stride, stride)[0])
        (task,) = autotune.extract_tasks(mod, params, target)
        assert task.default(target)["taps_inner"] is inner, stride
    model, feeds = depthwise_model(16, 28, 2)
    check_under_qemu(model, feeds, target_name, tmp_path)
    mod, params = from_onnx(model)
    (task,) = autotune.extract_tasks(mod, params, target)
    counts = {}
    for inner in (True, False):
        config = Config("depthwise_nchwc", {**task.default(target), "taps_inner": inner})
        lib = tessera.build(mod, target=target, params=params, configs={task: config})
        path = lib.export_library(tmp_path / f"taps-{inner}.so")
        counts[inner] = count_instructions(path, feeds, cpu=ARM_TARGETS[target_name][1])
        got = run_under_qemu(path, feeds, cpu=ARM_TARGETS[target_name][1])
        np.testing.assert_allclose(got[0], run_ort(model, feeds)[0], rtol=1e-5, atol=1e-5)
    if target_name == "aarch64-neon":
        assert counts[True] < counts[False], counts


# -- int8 dense on FEAT_I8MM's usmmla (topi/arm/int8_mmla.py, Note [i8mm matrix step]) -----------
I8MM_CPUS = ["-mcpu=neoverse-n2", "-mcpu=neoverse-v1", "-mcpu=cortex-a76 -mattr=+i8mm"]


def matmul_integer_model(m, k, n, dtype, seed=0):
    """MatMulInteger of m x k data (uint8 or int8, with a zero point) by a constant int8 k x n
    weight, and the numpy integer product it means."""
    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype)
    w = rng.integers(-128, 128, (k, n)).astype(np.int8)
    zero = np.array(info.min + 77, dtype)
    a = rng.integers(info.min, info.max + 1, (m, k)).astype(dtype)
    node = helper.make_node("MatMulInteger", ["a", "b", "az"], ["y"])
    model = make_model([node], {"a": ((m, k), dtype)}, ["y"], {"b": w, "az": zero})
    expected = (a.astype(np.int64) - int(zero)) @ w.astype(np.int64)
    return model, {"a": a}, expected.astype(np.int32)


@pytest.mark.parametrize("cpu", I8MM_CPUS)
@pytest.mark.parametrize("m, k, n, dtype", [(7, 33, 50, np.uint8), (1, 20, 3, np.int8),
                                            (16, 96, 64, np.int8)])  # fmt: skip
def test_i8mm_dense_matches_numpy_under_qemu(cpu, m, k, n, dtype, tmp_path):
    """qnn.dense on usmmla where the core has I8MM: row and column tails (odd rows, a column
    pair and k bytes past the ends), uint8 and int8 data, the data's zero point compensated in
    the epilogue; exact against numpy's integer product."""
    require_toolchain("aarch64-neon")
    model, feeds, expected = matmul_integer_model(m, k, n, dtype)
    mod, params = from_onnx(model)
    lib = tessera.build(mod, target=f"{AARCH64} {cpu}", params=params)
    form = "sve" if "neoverse-v1" in cpu else "neon"  # 256-bit SVE: whole registers
    assert f"aarch64.{form}.usmmla" in lib.get_source("ll")
    (got,) = run_under_qemu(lib.export_library(tmp_path / "mmla.so"), feeds, cpu="max")
    np.testing.assert_array_equal(got, expected)


def qlinear_model(seed=0):
    """A quantized MLP: QLinearMatMul (requantized to uint8), then QLinearMatMul with int8 out."""
    rng = np.random.default_rng(seed)
    inits = {
        "xs": np.float32(0.02), "xz": np.array(7, np.uint8),
        "w1": rng.integers(-128, 128, (72, 40)).astype(np.int8),
        "w1s": np.float32(0.004), "w1z": np.array(0, np.int8),
        "hs": np.float32(0.3), "hz": np.array(100, np.uint8),
        "w2": rng.integers(-128, 128, (40, 10)).astype(np.int8),
        "w2s": np.float32(0.003), "w2z": np.array(0, np.int8),
        "ys": np.float32(0.5), "yz": np.array(-3, np.int8),
    }  # fmt: skip
    nodes = [
        helper.make_node("QLinearMatMul", ["x", "xs", "xz", "w1", "w1s", "w1z", "hs", "hz"], ["h"]),
        helper.make_node("QLinearMatMul", ["h", "hs", "hz", "w2", "w2s", "w2z", "ys", "yz"], ["y"]),
    ]
    model = make_model(nodes, {"x": ((5, 72), np.uint8)}, ["h", "y"], inits, opset=13)
    return model, {"x": rng.integers(0, 256, (5, 72)).astype(np.uint8)}


@pytest.mark.parametrize("core", ["neoverse-n2", "neoverse-v1"])
def test_i8mm_quantized_model_matches_the_dot_build_under_qemu(core, tmp_path):
    """A quantized model end to end (requantize, zero points) on usmmla gives bit for bit the
    outputs of the same core's build without I8MM (-mattr=-i8mm: the sdot kernels), and
    executes fewer instructions."""
    require_toolchain("aarch64-neon")
    model, feeds = qlinear_model()
    mod, params = from_onnx(model)
    outs, counts = {}, {}
    for name, extra in (("mmla", ""), ("sdot", " -mattr=-i8mm")):
        lib = tessera.build(mod, target=f"{AARCH64} -mcpu={core}{extra}", params=params)
        assert ("usmmla" in lib.get_source("ll")) == (name == "mmla")
        path = lib.export_library(tmp_path / f"{name}.so")
        outs[name] = run_under_qemu(path, feeds, cpu="max")
        counts[name] = count_instructions(path, feeds)
    for a, b in zip(outs["mmla"], outs["sdot"], strict=True):
        np.testing.assert_array_equal(a, b)
    assert len(np.unique(outs["mmla"][1])) > 5  # not saturated to a constant
    assert counts["mmla"] < counts["sdot"], counts


def fp16_convs_model(dtype, seed=0):
    """1x1 conv, depthwise 3x3 stride 2, 3x3 conv to 12 channels (padded to a whole block),
    relu, global pool: the blocked conv kernels of Note [half blocks], in `dtype`."""
    rng = np.random.default_rng(seed)
    weights = {
        "w1": rng.standard_normal((24, 8, 1, 1)) * 0.3,
        "b1": rng.standard_normal(24) * 0.1,
        "wd": rng.standard_normal((24, 1, 3, 3)) * 0.3,
        "w3": rng.standard_normal((12, 24, 3, 3)) * 0.1,
    }
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "wd"], ["cd"], pads=[1] * 4, strides=[2, 2], group=24),
        helper.make_node("Conv", ["cd", "w3"], ["c3"], pads=[1] * 4),
        helper.make_node("Relu", ["c3"], ["y"]),
    ]
    weights = {k: v.astype(dtype) for k, v in weights.items()}
    return make_model(nodes, {"x": ((1, 8, 14, 14), dtype)}, ["y"], weights)


@pytest.mark.parametrize("cpu", ["cortex-a76", "neoverse-v1"])
def test_fp16_convs_take_the_blocked_kernels(cpu, tmp_path):
    """Note [half blocks]: with FEAT_FP16 the float16 convs run the blocked kernels on half
    lanes (NCHW8c on NEON, NCHW16c on 256-bit SVE), match the float32 model within half's
    rounding, and execute fewer instructions than the float32 build; without FEAT_FP16 they
    keep the NCHW schedules."""
    require_toolchain("aarch64-neon")
    x = np.random.default_rng(1).standard_normal((1, 8, 14, 14)).astype(np.float16)
    model32 = fp16_convs_model(np.float32)
    expected = run_ort(model32, {"x": x.astype(np.float32)})
    lanes = {"cortex-a76": 8, "neoverse-v1": 16}[cpu]
    counts = {}
    for name, extra in (("fp16", ""), ("widened", " -mattr=-fullfp16")):
        mod, params = from_onnx(fp16_convs_model(np.float16))
        lib = tessera.build(mod, target=f"{AARCH64} -mcpu={cpu}{extra}", params=params)
        ll = lib.get_source("ll")
        assert ("conv2d_nchwc" in ll) == (name == "fp16"), name
        if name == "fp16":
            assert f"<{lanes} x half>" in ll
        path = lib.export_library(tmp_path / f"{name}.so")
        (got,) = run_under_qemu(path, {"x": x}, cpu="max")
        scale = float(np.abs(expected[0]).max())
        np.testing.assert_allclose(got.astype(np.float32), expected[0], rtol=0, atol=8e-3 * scale)
        counts[name] = count_instructions(path, {"x": x}, cpu="max")
    mod32, params32 = from_onnx(model32)
    lib32 = tessera.build(mod32, target=f"{AARCH64} -mcpu={cpu}", params=params32)
    path = lib32.export_library(tmp_path / "fp32.so")
    counts["fp32"] = count_instructions(path, {"x": x.astype(np.float32)}, cpu="max")
    assert counts["fp16"] < counts["fp32"] < counts["widened"], counts
