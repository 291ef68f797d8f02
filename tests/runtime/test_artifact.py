"""Artifact integrity (runtime/artifact.py): an exported model's trailer is checked before any
dlopen, so a truncated, damaged, foreign, unsigned or wrongly signed file, or one built for CPU
features this machine lacks, is one clear error; nothing in a refused file runs."""

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from onnx import helper

from tessera.runtime import GraphModule, artifact, cc, load_module
from tessera.runtime.artifact import ArtifactError


@pytest.fixture(scope="module")
def model_so(tmp_path_factory):
    """A small compiled model (a matmul with weights and a relu), exported once."""
    import tessera
    from tessera.frontend import from_onnx
    from tessera.frontend.testing import make_model

    w = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])]
    mod, params = from_onnx(make_model(nodes, {"x": ((2, 8), "float32")}, ["y"], {"w": w}))
    path = tmp_path_factory.mktemp("artifact") / "model.so"
    tessera.build(mod, target="llvm", params=params).export_library(path)
    return path, w


def _run(path, w, **load):
    m = GraphModule(load_module(path, **load)["default"]())
    x = np.arange(16, dtype=np.float32).reshape(2, 8) / 10
    m.run(x=x)
    np.testing.assert_allclose(m.get_output(0).numpy(), np.maximum(x @ w, 0), rtol=1e-5)


def _variant(model_so, tmp_path, edit) -> str:
    data = bytearray(model_so[0].read_bytes())
    path = tmp_path / "variant.so"
    path.write_bytes(bytes(edit(data)))
    return str(path)


def test_a_sealed_artifact_loads_and_runs(model_so):
    header = artifact.read_header(model_so[0])
    assert header["tessera"] and header["target"]["triple"] and len(header["sha256"]) == 64
    _run(*model_so)


@pytest.mark.parametrize("fraction", [0.5, 0.9, 0.999])
def test_a_truncated_artifact_is_refused_before_dlopen(model_so, tmp_path, fraction):
    path = _variant(model_so, tmp_path, lambda d: d[: int(len(d) * fraction)])
    with pytest.raises(ArtifactError, match="truncated|damaged"):
        load_module(path)


@pytest.mark.parametrize("seed", range(4))
def test_flipped_bytes_are_found_by_the_checksum(model_so, tmp_path, seed):
    rng = np.random.default_rng(seed)

    def flip(d):
        for k in rng.integers(0, len(d), 16):
            d[k] ^= 1 + int(rng.integers(0, 255))
        return d

    with pytest.raises(ArtifactError, match="damaged|not a tessera artifact|truncated"):
        load_module(_variant(model_so, tmp_path, flip))


def test_one_flipped_byte_in_the_code_or_the_header(model_so, tmp_path):
    size = len(model_so[0].read_bytes())

    def at(k):
        def flip(d):
            d[k] ^= 0x40
            return d

        return flip

    with pytest.raises(ArtifactError, match="checksum of its code, plan and weights"):
        load_module(_variant(model_so, tmp_path, at(size // 3)))
    with pytest.raises(ArtifactError, match="header does not match its checksum"):
        load_module(_variant(model_so, tmp_path, at(size - 60)))


def test_a_library_with_a_constructor_runs_nothing_when_refused(tmp_path):
    marker = tmp_path / "ran"
    source = tmp_path / "evil.c"
    source.write_text(
        textwrap.dedent(f"""
        #include <stdio.h>
        __attribute__((constructor)) static void hello(void) {{
            FILE* f = fopen("{marker}", "w"); if (f) fclose(f);
        }}
        """)
    )
    lib = cc.compile_shared(tmp_path / "evil.so", sources=[source])
    with pytest.raises(ArtifactError, match="without a tessera trailer"):
        load_module(lib)
    assert not marker.exists()


def test_signed_artifacts(model_so, tmp_path):
    path, w = model_so
    signed = load_module(path).export_library(tmp_path / "signed.so", key=b"k1")
    _run(signed, w, key=b"k1")
    _run(signed, w)  # without a key, a signed artifact loads as any other
    with pytest.raises(ArtifactError, match="signature does not match the key"):
        load_module(signed, key="another key")
    with pytest.raises(ArtifactError, match="is not signed, and a key was given"):
        load_module(path, key=b"k1")


def test_a_recomputed_checksum_does_not_pass_a_signature(model_so, tmp_path):
    path, _ = model_so
    signed = load_module(path).export_library(tmp_path / "signed.so", key=b"k1")
    header = artifact.read_header(signed)
    data = bytearray(signed.read_bytes()[: header["payload_nbytes"]])
    data[len(data) // 2] ^= 1  # an edit by someone without the key, checksum recomputed
    forged = tmp_path / "forged.so"
    bare = tmp_path / "bare.so"
    bare.write_bytes(bytes(data))
    artifact.seal(bare, forged, target=header["target"], key=b"guess")
    with pytest.raises(ArtifactError, match="signature does not match"):
        load_module(forged, key=b"k1")


def test_missing_cpu_features_are_named(model_so, monkeypatch):
    header = artifact.read_header(model_so[0])
    needed = [f for f in header["target"]["features"] if f in artifact._CPUINFO_NAME]
    assert needed, "the host target names no checked feature"
    lacking = artifact._CPUINFO_NAME[needed[-1]]
    host = artifact.host_cpu_flags() - {lacking}
    monkeypatch.setattr(artifact, "host_cpu_flags", lambda: host)
    with pytest.raises(ArtifactError, match=f"needs the CPU feature\\(s\\) {needed[-1]}"):
        load_module(model_so[0])


def test_another_architecture_is_refused(model_so, tmp_path):
    header = artifact.read_header(model_so[0])
    bare = tmp_path / "bare.so"
    bare.write_bytes(model_so[0].read_bytes()[: header["payload_nbytes"]])
    other = {**header["target"], "triple": "riscv64-unknown-linux-gnu"}
    foreign = artifact.seal(bare, tmp_path / "foreign.so", target=other)
    with pytest.raises(ArtifactError, match="was built for riscv64"):
        load_module(foreign)


def test_another_format_version_is_refused(model_so, tmp_path):
    header = artifact.read_header(model_so[0])
    data = model_so[0].read_bytes()[: header["payload_nbytes"]]
    text = json.dumps({**header, "version": 99}).encode()
    tail = artifact._TAIL.pack(__import__("hashlib").sha256(text).digest(), len(text), b"")
    tail = tail[:-16] + artifact.MAGIC
    path = tmp_path / "future.so"
    path.write_bytes(data + text + tail)
    with pytest.raises(ArtifactError, match="artifact format 99.*compile the model again"):
        load_module(path)


def test_a_file_damaged_while_loaded_does_not_crash_the_reader(model_so, tmp_path):
    # the module runs its private copy: truncating the file it came from changes nothing
    path = tmp_path / "live.so"
    path.write_bytes(model_so[0].read_bytes())
    code = f"""
import numpy as np, os
from tessera.runtime import GraphModule, load_module
m = GraphModule(load_module({str(path)!r})["default"]())
os.truncate({str(path)!r}, 100)
m.run(x=np.ones((2, 8), np.float32))
print("ok", float(m.get_output(0).numpy().sum()) >= 0)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0 and "ok True" in proc.stdout, proc.stderr


def test_the_runtime_knows_the_tessera_version():
    import tessera

    assert artifact.TESSERA_VERSION == tessera.__version__
