"""The exported sources build with arm-none-eabi-gcc -Wall -Wextra -Werror for every Cortex-M,
and the memory report gains code and stack sizes from that build."""

from __future__ import annotations

import shutil

import pytest

from tessera.micro import boards, toolchain

pytestmark = pytest.mark.skipif(
    shutil.which("arm-none-eabi-gcc") is None,
    reason="arm-none-eabi-gcc is not installed (scripts/setup.d/40-micro.sh installs it)",
)


@pytest.mark.parametrize("mcpu", ["cortex-m0", "cortex-m3", "cortex-m33", "cortex-m55"])
def test_sources_build_for_each_cpu(lib, mcpu):
    # the portable sources of one model build for every core (weights and kernels alike)
    measured = toolchain.measure(lib.c_sources(), mcpu)
    assert measured["objects"]["tessera_weights"]["rodata"] >= lib.plan["params_nbytes"] // 2
    assert all(o["code"] > 0 for n, o in measured["objects"].items() if "kernel" in n)


def test_report_has_code_and_stack(lib):
    report = lib.memory_report()
    assert report["code_bytes"] > 0
    assert report["flash_bytes"]["total"] == report["code_bytes"] + report["flash_bytes"]["weights"]
    assert report["ram_bytes"]["stack"] > 0
    assert all(layer["code_bytes"] > 0 for layer in report["layers"])


def test_a_warning_fails_the_build():
    files = {"bad.c": "int f(void) { int unused; return 0; }\n"}
    with pytest.raises(toolchain.ToolchainError, match="unused variable"):
        toolchain.measure(files, "cortex-m4")


def test_linker_script_places_weights_per_board():
    assert 'REGION_ALIAS("WEIGHTS", CODE)' in boards.BOARDS["mps2-an386"].linker_script()
    script = boards.BOARDS["mps3-an547"].linker_script()
    assert "WEIGHTS (r) : ORIGIN = 0x70000000" in script


def test_a_model_larger_than_the_board_is_a_clear_error(lib):
    small = boards.Board(
        "mps2-an386", "cortex-m4", "16 KiB of RAM", (0, 1 << 20), (0x20000000, 16384)
    )
    with pytest.raises(toolchain.ToolchainError, match="does not fit the board's RAM"):
        boards.build_firmware(lib.c_sources(), small)


def test_report_without_the_toolchain_says_so(lib, monkeypatch):
    monkeypatch.setattr(toolchain, "available", lambda: False)
    report = lib.memory_report()
    assert report["code_bytes"] is None and "arm-none-eabi-gcc" in report["note"]
    assert report["ram_bytes"]["arena"] == lib.plan["arena_nbytes"]
