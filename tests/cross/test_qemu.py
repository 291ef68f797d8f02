"""Models cross-built for aarch64 (NEON, SVE) and armv7, exported with the cross toolchains and
run under QEMU user mode by the C runner: they match ONNX Runtime on this machine. The full-size
models (ResNet-50, MobileNetV2, a BERT layer) are in test_qemu_models.py, marked slow."""

import re

import numpy as np
import pytest
from bench_modules import load_bench
from onnx import helper

import tessera
from tessera.cross import count_instructions, read_plan, run_under_qemu, toolchain_of_library
from tessera.cross.testing import ARM_TARGETS, check_under_qemu, conv_dense_model, missing_tools
from tessera.frontend import from_onnx
from tessera.frontend.testing import make_model, run_ort


def require_toolchain(target_name: str) -> None:
    missing = missing_tools(ARM_TARGETS[target_name][0])
    if missing:
        pytest.skip(
            f"not installed: {', '.join(missing)} (scripts/setup.d/45-arm.sh installs them)"
        )


def load_zoo():
    return load_bench("model_zoo")


@pytest.mark.parametrize("target_name", list(ARM_TARGETS))
def test_conv_dense_model_matches_ort_under_qemu(target_name, tmp_path):
    require_toolchain(target_name)
    model, feeds = conv_dense_model()
    path = check_under_qemu(model, feeds, target_name, tmp_path)
    toolchain = toolchain_of_library(path)
    assert toolchain.name == ("arm-linux-gnueabihf" if "armv7" in target_name else toolchain.name)
    assert toolchain.qemu == ("qemu-arm" if "armv7" in target_name else "qemu-aarch64")


# one target in the default suite (time), all three in the slow one
@pytest.mark.parametrize(
    "target_name",
    [
        name if name == "aarch64-sve" else pytest.param(name, marks=pytest.mark.slow)
        for name in ARM_TARGETS
    ],
)
def test_small_mobilenet_v2_matches_ort_under_qemu(target_name, tmp_path):
    require_toolchain(target_name)
    zoo = load_zoo()
    model = zoo.mobilenet_v2(width=0.25, resolution=32, num_classes=10)
    x = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)
    check_under_qemu(model, {"input": x}, target_name, tmp_path)


def test_the_library_holds_its_plan_and_rejects_wrong_inputs(tmp_path):
    require_toolchain("aarch64-neon")
    target, cpu = ARM_TARGETS["aarch64-neon"]
    model, feeds = conv_dense_model()
    mod, params = from_onnx(model)
    lib = tessera.build(mod, target=target, params=params)
    path = lib.export_library(tmp_path / "model.so")
    assert read_plan(path, cpu) == lib.plan  # the runner reads it from the file alone
    with pytest.raises(ValueError, match=r"input 'x' has shape \(1, 3, 8, 8\)"):
        run_under_qemu(path, {"x": np.zeros((1, 3, 8, 8), np.float32)}, cpu=cpu)
    with pytest.raises(ValueError, match=r"missing \['x'\]"):
        run_under_qemu(path, {"z": feeds["x"]}, cpu=cpu)
    with pytest.raises(RuntimeError, match="cannot run"):
        lib["default"](tessera.cpu(0))  # aarch64 code does not run on this machine


def test_host_library_is_not_taken_for_a_cross_one(tmp_path):
    model, feeds = conv_dense_model()
    mod, params = from_onnx(model)
    path = tessera.build(mod, target="llvm", params=params).export_library(tmp_path / "host.so")
    with pytest.raises(ValueError, match="no cross toolchain runs"):
        run_under_qemu(path, feeds)


def test_the_sve_build_runs_sve_instructions(tmp_path):
    # neoverse-v1's code is built for its 256-bit SVE (Note [fixed-length SVE]): whole SVE
    # registers, predicated by ptrue. The library asks for that length when loaded (QEMU's max
    # CPU starts at 512 bits), and refuses, by name, a CPU without SVE or with shorter vectors.
    require_toolchain("aarch64-sve")
    model, feeds = conv_dense_model()
    mod, params = from_onnx(model)
    lib = tessera.build(mod, target=ARM_TARGETS["aarch64-sve"][0], params=params)
    asm = lib.get_source("asm")
    assert re.search(r"\bfml[as]\s+z\d+\.s", asm) or re.search(r"\bfmad\s+z\d+\.s", asm)
    assert "vscale_range(2,2)" in lib.get_source("ll")
    path = lib.export_library(tmp_path / "sve.so")
    expected = run_ort(model, feeds)
    for cpu in ("max", "max,sve-default-vector-length=32"):
        for got, want in zip(run_under_qemu(path, feeds, cpu=cpu), expected, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    with pytest.raises(RuntimeError, match="built for 256-bit SVE vectors, this CPU has no SVE"):
        run_under_qemu(path, feeds, cpu="cortex-a76")
    with pytest.raises(RuntimeError, match="this CPU runs 128-bit ones"):
        run_under_qemu(path, feeds, cpu="max,sve128=on")


def test_sve_vector_length_is_a_target_option(tmp_path):
    # -msve-vector-bits=128: SVE no wider than NEON, so the 128-bit kernels, for any SVE core
    require_toolchain("aarch64-sve")
    model, feeds = conv_dense_model()
    mod, params = from_onnx(model)
    target = ARM_TARGETS["aarch64-sve"][0] + " -msve-vector-bits=128"
    assert tessera.Target(target).vector_lanes("float32") == 4
    lib = tessera.build(mod, target=target, params=params)
    path = lib.export_library(tmp_path / "sve128.so")
    got = run_under_qemu(path, feeds, cpu="max,sve128=on")
    for g, want in zip(got, run_ort(model, feeds), strict=True):
        np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="-msve-vector-bits must be 128, 256"):
        tessera.Target(target.replace("=128", "=192"))


def test_sve_build_executes_fewer_instructions_than_neon(tmp_path):
    # the same core (neoverse-v1) with SVE off (-mattr=-sve: NEON kernels) and on (256 bits)
    require_toolchain("aarch64-sve")
    model, feeds = conv_dense_model()
    mod, params = from_onnx(model)
    counts = {}
    for name, extra in (("neon", " -mattr=-sve"), ("sve", "")):
        lib = tessera.build(mod, target=ARM_TARGETS["aarch64-sve"][0] + extra, params=params)
        counts[name] = count_instructions(lib.export_library(tmp_path / f"{name}.so"), feeds)
    assert counts["sve"] < counts["neon"], counts


def test_outputs_stored_in_an_input_a_weight_or_an_earlier_output(tmp_path):
    require_toolchain("armv7-neon")
    w = np.arange(4, dtype=np.float32).reshape(1, 4)
    nodes = [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Identity", ["w"], ["v"])]
    model = make_model(nodes, {"x": ((1, 4), np.float32)}, ["y", "x", "v", "y"], {"w": w})
    mod, params = from_onnx(model)
    plan = tessera.build(mod, target="llvm", params=params).plan
    kinds = [kind for kind, _ in (out["storage"] for out in plan["outputs"])]
    assert kinds == ["output", "input", "param", "output"]  # every way the runner saves one
    x = np.array([[-1, 2, -3, 4]], np.float32)
    check_under_qemu(model, {"x": x}, "armv7-neon", tmp_path)
