"""Target("c -device=micro -mcpu=cortex-m*"): parsing, what it tells schedules and codegen."""

from __future__ import annotations

import pytest

from tessera.target import Target


@pytest.mark.parametrize(
    "mcpu, triple, lanes",
    [
        ("cortex-m0", "thumbv6m-none-eabi", 1),
        ("cortex-m3", "thumbv7m-none-eabi", 1),
        ("cortex-m4", "thumbv7em-none-eabihf", 1),
        ("cortex-m7", "thumbv7em-none-eabihf", 1),
        ("cortex-m33", "thumbv8m.main-none-eabihf", 1),
        ("cortex-m55", "thumbv8.1m.main-none-eabihf", 1),  # scalar C until MVE kernels exist
    ],
)
def test_micro_target_per_cpu(mcpu, triple, lanes):
    t = Target(f"c -device=micro -mcpu={mcpu}")
    assert t.device == "micro"
    assert t.llvm_triple == triple
    assert t.vector_lanes("float32") == lanes
    assert not t.is_host  # its code runs on a board (the host build runs portable C)
    assert Target(str(t)) == t


def test_dsp_and_mve_features():
    assert "dsp" in Target("c -device=micro -mcpu=cortex-m4").features
    assert "dsp" not in Target("c -device=micro -mcpu=cortex-m3").features
    assert "mve" in Target("c -device=micro -mcpu=cortex-m55").features


def test_unknown_device_and_cpu_are_clear_errors():
    with pytest.raises(ValueError, match="unknown -device=phone; known: micro"):
        Target("c -device=phone")
    with pytest.raises(ValueError, match="unknown -mcpu=cortex-m99"):
        Target("c -device=micro -mcpu=cortex-m99")


def test_host_build_flags_are_portable():
    from tessera.codegen.c import compile_flags

    flags = compile_flags(Target("c -device=micro -mcpu=cortex-m4"))
    assert not any(f.startswith(("-mcpu", "-march")) for f in flags)
