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
