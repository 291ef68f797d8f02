"""Target parsing, printing and what a target says about its CPU."""

import llvmlite.binding as llvm
import pytest

from tessera.target import Target


@pytest.mark.parametrize(
    "text",
    [
        "llvm",
        "llvm -mcpu=skylake-avx512 -num-cores=2",
        "llvm -mtriple=aarch64-linux-gnu",
        "llvm -mattr=+avx2,+fma",
        "llvm -mtriple=x86_64-linux-gnu -mcpu=haswell -mattr=-fma -num-cores=8",
        "c",
        "c -mcpu=cortex-a72 -mtriple=aarch64-linux-gnu",
        "cuda",
        "cuda -arch=sm_80",
    ],
)
def test_str_round_trips(text):
    t = Target(text)
    assert Target(str(t)) == t
    assert Target(t.to_dict()) == t
    assert hash(Target(str(t))) == hash(t)


def test_options_are_parsed():
    t = Target("llvm -mcpu=skylake-avx512 -num-cores=2")
    assert (t.kind, t.mcpu, t.mtriple, t.num_cores) == ("llvm", "skylake-avx512", None, 2)
    assert str(t) == "llvm -mcpu=skylake-avx512 -num-cores=2"
    assert Target("llvm -mattr=avx2,+fma").mattr == ("+avx2", "+fma")
    assert Target("llvm -num-cores=3 -mcpu=haswell") == Target("llvm -mcpu=haswell -num-cores=3")
    assert Target("llvm") != Target("c")
    assert Target({"kind": "llvm", "mcpu": "haswell", "num_cores": 4}).num_cores == 4


@pytest.mark.parametrize(
    "text, match",
    [
        ("tpu", "unknown target kind 'tpu'"),
        ("", "empty target"),
        ("llvm -mcpux=haswell", "unknown option -mcpux"),
        ("llvm -num-cores=two", "integer"),
        ("llvm -num-cores=0", ">= 1"),
        ("llvm mcpu=haswell", "-key=value"),
        ("llvm -mcpu=skylake-avx521", "unknown -mcpu=skylake-avx521"),
        ("cuda -mcpu=haswell", "unknown option -mcpu for target 'cuda'"),
        ("llvm -mattr=", "needs features"),
    ],
)
def test_errors_name_the_problem(text, match):
    with pytest.raises(ValueError, match=match):
        Target(text)


def test_type_error_for_other_values():
    with pytest.raises(TypeError):
        Target(42)


def test_named_cpu_features_and_vector_widths():
    skx = Target("llvm -mcpu=skylake-avx512")
    assert {"avx2", "fma", "avx512f"} <= skx.features and "amx-tile" not in skx.features
    assert skx.vector_width_bits == 512
    assert skx.vector_lanes("float32") == 16 and skx.vector_lanes("int8") == 64
    hsw = Target("llvm -mcpu=haswell")
    assert hsw.vector_width_bits == 256 and "avx512f" not in hsw.features
    assert hsw.vector_lanes("float64x4") == 4
    assert Target("llvm -mcpu=haswell -mattr=-avx2,-avx").vector_width_bits == 128
    assert "avx512vnni" in Target("llvm -mcpu=cascadelake").features
    assert {"amx-tile", "amx-int8", "amx-bf16"} <= Target("llvm -mcpu=sapphirerapids").features
    arm = Target("llvm -mtriple=aarch64-linux-gnu")
    assert "neon" in arm.features and arm.vector_width_bits == 128 and not arm.is_host


def test_host_target_is_detected_at_run_time():
    host_features = {k for k, on in llvm.get_host_cpu_features().items() if on}
    t = Target("llvm")
    assert t.is_host
    assert t.features >= host_features & {"avx2", "fma", "avx512f", "neon"}
    assert ("avx512f" in t.features) == ("avx512f" in host_features)  # never assumed
    assert ("amx-tile" in t.features) == ("amx-tile" in host_features)
    assert Target.host().mcpu == llvm.get_host_cpu_name()
    assert Target.host().is_host
    assert t.num_cores >= 1
    assert Target("cuda").host == Target("llvm") and not Target("cuda").is_host
    assert Target("cuda", host="llvm -mcpu=haswell").host == Target("llvm -mcpu=haswell")


def test_a_cpu_this_machine_lacks_is_not_host():
    host = {k for k, on in llvm.get_host_cpu_features().items() if on}
    t = Target("llvm -mcpu=sapphirerapids")
    assert t.is_host == (t.features <= host)
    assert Target("llvm -mcpu=x86-64").is_host == (llvm.get_process_triple().startswith("x86_64"))


# -- the target table ------------------------------------------------------------------------------


def test_avx512_targets_turn_off_llvms_256_bit_preference():
    """Note [512-bit vectors]: LLVM's own vectorizers use the width tessera's kernels use; a
    target that asks for LLVM's preference keeps it, and still runs where the ISA does."""
    x86 = "-mtriple=x86_64-linux-gnu"
    assert Target(f"llvm {x86} -mcpu=skylake-avx512").llvm_features == "-prefer-256-bit"
    assert "prefer-256-bit" not in Target(f"llvm {x86} -mcpu=haswell").llvm_features
    kept = Target(f"llvm {x86} -mcpu=skylake-avx512 -mattr=+prefer-256-bit")
    assert kept.llvm_features == "+prefer-256-bit" and kept.vector_width_bits == 512
    host = Target("llvm -mattr=+prefer-256-bit")
    assert host.is_host == Target("llvm").is_host
    assert "-prefer-256-bit" not in host.llvm_features.split(",")


def test_every_kind_has_a_row_and_the_rows_name_importable_code():
    from tessera.target import TARGET_KINDS

    for kind, row in TARGET_KINDS.items():
        assert row.name == kind
        for entry in ("build", "compile_kernel", "link", "toolchain", "fingerprint", "tir_passes"):
            if getattr(row, entry) is not None:
                assert row.resolve(entry) is not None, (kind, entry)


def test_strategy_keys_come_from_the_row():
    assert Target("llvm -mtriple=x86_64-linux-gnu").kind_info.keys(
        Target("llvm -mtriple=x86_64-linux-gnu")
    ) == ("x86", "cpu", "generic")
    arm = Target("llvm -mtriple=aarch64-linux-gnu")
    assert arm.kind_info.keys(arm) == ("arm", "cpu", "generic")
    cuda = Target("cuda")
    assert cuda.kind_info.keys(cuda) == ("cuda", "generic")
    assert not cuda.kind_info.cpu and cuda.features == frozenset()


def test_a_missing_step_is_a_clear_error():
    with pytest.raises(ValueError, match="'cuda' has no build step yet"):
        Target("cuda").kind_info.resolve("build")


def test_a_new_kind_is_a_new_row():
    from tessera.target import TARGET_KINDS, TargetKind, register_target_kind

    try:
        register_target_kind(TargetKind("mycpu", options=("mcpu",), layout_strategies=False))
        t = Target("mycpu -mcpu=haswell")
        assert str(t) == "mycpu -mcpu=haswell" and t.kind_info.keys(t) == ("generic",)
        with pytest.raises(ValueError, match="unknown option -arch"):
            Target("mycpu -arch=sm_80")
    finally:
        TARGET_KINDS.pop("mycpu", None)
    with pytest.raises(ValueError, match="unknown target kind 'mycpu'"):
        Target("mycpu")


def test_target_host_is_honoured_for_device_kinds_and_refused_for_cpus():
    from tessera.driver import resolve_target

    assert resolve_target("llvm", "llvm") == Target("llvm")
    with pytest.raises(ValueError, match="name the CPU in the target"):
        resolve_target("llvm", "llvm -mcpu=haswell")
    cuda = resolve_target("cuda", "llvm -mcpu=haswell")
    assert cuda.host == Target("llvm -mcpu=haswell")
    with pytest.raises(ValueError, match="must be a CPU target"):
        resolve_target("cuda", "cuda")
