"""export_library of a micro model: C sources, one header, weights, arena, memory report; the
sources build with the host compiler (-Wall -Werror) and compute what the host build does."""

from __future__ import annotations

import json
import tarfile

import numpy as np
import pytest

from tessera.micro import project
from tessera.micro.host import HostBuild


def test_folder_has_sources_header_weights_and_report(lib, tmp_path):
    out = lib.export_library(tmp_path / "kws")
    names = {p.name for p in out.iterdir()}
    assert {
        "tessera_model.h",
        "tessera_model.c",
        "tessera_weights.c",
        "memory_report.json",
    } <= names
    kernels = {n for n in names if n.startswith("tessera_kernel_")}
    assert len(kernels) == lib.num_kernels
    header = (out / "tessera_model.h").read_text()
    assert f"#define TESSERA_MODEL_ARENA_BYTES {lib.plan['arena_nbytes']}" in header
    assert "int32_t tessera_model_invoke(const float* x, float* y);" in header
    model_c = (out / "tessera_model.c").read_text()
    assert "uint8_t tessera_model_arena[TESSERA_MODEL_ARENA_BYTES];" in model_c
    assert "malloc" not in model_c
    assert "const uint8_t tessera_model_weights[" in (out / "tessera_weights.c").read_text()


def test_tarball_holds_the_same_files(lib, tmp_path):
    path = lib.export_library(tmp_path / "kws.tar")
    with tarfile.open(path) as tar:
        names = set(tar.getnames())
    assert names == set(lib.sources())


def test_memory_report_adds_up(lib):
    report = lib.memory_report()
    weights = sum(int(np.prod(p["shape"])) * 4 for p in lib.plan["params"])
    assert weights <= report["flash_bytes"]["weights"] < weights + 16 * len(lib.plan["params"])
    assert report["ram_bytes"]["arena"] == lib.plan["arena_nbytes"]
    assert [layer["kernel"] for layer in report["layers"]] == [
        c["kernel"] for c in lib.plan["calls"]
    ]
    assert sum(layer["weights_bytes"] for layer in report["layers"]) == weights
    assert json.loads(project.report_text(report)) == report


def test_sources_build_on_the_host_and_match(lib, sample_input, host_output):
    x = sample_input(3)
    build = HostBuild(lib.c_sources(), lib.plan)
    expected = host_output(lib, x)
    np.testing.assert_allclose(build.run([x])[0], expected, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(build.invoke([x])[0], expected, rtol=1e-6, atol=1e-7)


def _mapped(path) -> bool:
    with open("/proc/self/maps") as f:
        return any(line.rstrip().endswith(str(path)) for line in f)


def test_host_build_closes_its_library(lib, sample_input):
    x = sample_input(4)
    build = HostBuild(lib.c_sources(), lib.plan)
    expected = build.invoke([x])[0]
    assert _mapped(build.path)
    build.close()
    assert not _mapped(build.path)
    with pytest.raises(RuntimeError, match="closed"):
        build.run([x])
    build.close()  # idempotent

    with HostBuild(lib.c_sources(), lib.plan) as build:
        np.testing.assert_array_equal(build.run([x])[0], expected)
    assert not _mapped(build.path)

    build = HostBuild(lib.c_sources(), lib.plan)
    build.run([x])
    path = build.path
    del build  # collected by reference count: no cycle keeps the library alive
    assert not _mapped(path)


def test_c_names_are_identifiers():
    assert project.c_names(["input:0", "input.0", "1x", "int", "tessera_x"]) == [
        "input_0",
        "input_0_1",
        "t_1x",
        "t_int",
        "t_tessera_x",
    ]


def test_outputs_that_are_inputs_or_repeats_are_copied():
    import tessera
    from tessera.graph import parse

    func = parse("def main(%x: f32[4]) { %1 = exp(%x) : f32[4]; return %1, %x, %1 }")
    lib = tessera.build(func, target="c -device=micro -mcpu=cortex-m4")
    x = np.arange(4, dtype=np.float32)
    y, same, again = HostBuild(lib.c_sources(), lib.plan).invoke([x])
    np.testing.assert_allclose(y, np.exp(x), rtol=1e-6)
    np.testing.assert_array_equal(same, x)
    np.testing.assert_array_equal(again, y)
