"""The compile cache (codegen/cache.py, graph_build/compile.py): a recompiled model takes every
kernel from the cache with the same results (llvm and c, also in a new process); corrupted
entries are rebuilt; the cache can be switched off, and an unwritable one is skipped; keys
change with what decides the code and only with that."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

import tessera
from tessera.codegen import cache, cache_stats, reset_cache_stats
from tessera.frontend import from_onnx
from tessera.frontend.testing import make_model, run_ort
from tessera.graph_build import distinct_groups
from tessera.graph_build.compile import group_digest, kernel_key
from tessera.runtime import GraphModule, cpu
from tessera.target import Target
from tessera.transform import PassContext

REPO = Path(__file__).resolve().parents[2]
R = np.random.default_rng(5)
N = helper.make_node


def f32(*shape, scale=1.0):
    return (R.standard_normal(shape) * scale).astype(np.float32)


def model(pads=1):
    inits = {"w": f32(4, 3, 3, 3, scale=0.3), "b": f32(4), "wd": f32(4, 6, scale=0.3)}
    nodes = [
        N("Conv", ["x", "w", "b"], ["c"], pads=[pads] * 4, name="conv"),
        N("Relu", ["c"], ["r"], name="relu"),
        N("GlobalAveragePool", ["r"], ["g"], name="gap"),
        N("Flatten", ["g"], ["f"], name="flat"),
        N("MatMul", ["f", "wd"], ["y"], name="fc"),
    ]
    return make_model(nodes, {"x": ((1, 3, 7, 7), "float32")}, ["y"], inits)


FEEDS = {"x": f32(1, 3, 7, 7)}


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path / "cache"))
    reset_cache_stats()
    return tmp_path / "cache"


def build(onnx_model, target="llvm", opt_level=3, **config):
    mod, params = from_onnx(onnx_model)
    with PassContext(opt_level=opt_level, config=config):
        return tessera.build(mod, target=target, params=params)


def run(lib):
    m = GraphModule(lib["default"](cpu(0)))
    m.run(**FEEDS)
    return m.get_output(0).numpy().copy()


def entries(cache_dir: Path) -> list[Path]:
    return sorted((cache_dir / "kernels").rglob("*.tk")) if cache_dir.exists() else []


@pytest.mark.parametrize("target", ["llvm", "c"])
def test_a_recompiled_model_takes_its_kernels_from_the_cache(target, cache_dir):
    m = model()
    first = build(m, target)
    n = first.num_kernels
    assert cache_stats() == {"hits": 0, "misses": n}
    assert len(entries(cache_dir)) == n
    assert not [p for p in (cache_dir / "kernels").rglob("*") if p.name.endswith(".tmp")]
    reset_cache_stats()
    second = build(m, target)
    assert cache_stats() == {"hits": n, "misses": 0}
    expected = run_ort(m, FEEDS)[0]
    np.testing.assert_allclose(run(first), expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(run(second), run(first))
    fmt = "ll" if target == "llvm" else "c"
    assert second.get_source(fmt) == first.get_source(fmt)
    if target == "llvm":
        assert "fused" in second.get_source("asm")  # assembly from the cached IR


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b[:-10],  # truncated
        lambda b: b[:-1] + bytes([b[-1] ^ 0xFF]),  # a flipped byte
        lambda b: b"garbage",
        lambda b: b"",
        lambda b: cache.MAGIC + b"{not json\n" + b[200:],
    ],
)
def test_a_corrupted_entry_is_rebuilt(damage, cache_dir):
    m = model()
    build(m)
    victim = entries(cache_dir)[0]
    good = victim.read_bytes()
    victim.write_bytes(damage(good))
    reset_cache_stats()
    lib = build(m)
    assert cache_stats()["misses"] == 1
    assert victim.read_bytes() == good  # rewritten whole
    np.testing.assert_allclose(run(lib), run_ort(m, FEEDS)[0], rtol=1e-4, atol=1e-5)


def test_the_cache_can_be_switched_off(cache_dir):
    lib = build(model(), **{"codegen.cache": False})
    assert cache_stats() == {"hits": 0, "misses": lib.num_kernels}
    assert entries(cache_dir) == []
    build(model())
    reset_cache_stats()
    build(model(), **{"codegen.cache": False})
    assert cache_stats()["hits"] == 0


def test_an_unwritable_cache_only_costs_the_compile(cache_dir):
    cache_dir.mkdir(parents=True)
    (cache_dir / "kernels").write_text("a file where the folder should be")
    m = model()
    lib = build(m)
    np.testing.assert_allclose(run(lib), run_ort(m, FEEDS)[0], rtol=1e-4, atol=1e-5)
    reset_cache_stats()
    build(m)
    assert cache_stats()["hits"] == 0


CHILD = """
import sys
from onnx import load
import tessera
from tessera.codegen import cache, cache_stats
from tessera.frontend import from_onnx
mod, params = from_onnx(load(sys.argv[1]))
lib = tessera.build(mod, target="llvm", params=params)
print(cache.compiler_fingerprint("llvm"), cache_stats()["hits"], lib.num_kernels)
"""


def test_a_new_process_hits_the_cache(tmp_path, cache_dir):
    import onnx

    path = tmp_path / "m.onnx"
    onnx.save(model(), path)
    env = {**os.environ, "PYTHONPATH": str(REPO), "TESSERA_CACHE_DIR": str(cache_dir)}
    outs = []
    for _ in range(2):
        proc = subprocess.run(
            [sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, env=env
        )
        assert proc.returncode == 0, proc.stderr
        outs.append(proc.stdout.split())
    (fp1, hits1, n), (fp2, hits2, _) = outs
    assert hits1 == "0"
    if fp1 == fp2:  # (the compiler's sources did not change between the two runs)
        assert hits2 == n


# -- keys ----------------------------------------------------------------------------------------


def _groups(onnx_model, opt_level=3):
    from tessera.driver import group_each_call, optimize_graph
    from tessera.transform import bind_params

    mod, params = from_onnx(onnx_model)
    with PassContext(opt_level=opt_level), Target("llvm"):
        func = group_each_call(optimize_graph(bind_params(mod, params))["main"])
    return distinct_groups(func)[0]


def test_keys_follow_what_decides_the_code():
    groups = _groups(model())
    conv = groups[0]
    key = kernel_key(conv, conv.name, Target("llvm"))
    assert key == kernel_key(conv, conv.name, Target("llvm"))
    assert len(key) == 64
    others = {
        kernel_key(conv, conv.name + "_2", Target("llvm")),
        kernel_key(conv, conv.name, Target("llvm -mcpu=haswell")),
        kernel_key(conv, conv.name, Target("llvm -mcpu=skylake-avx512")),
        kernel_key(conv, conv.name, Target("llvm -num-cores=3")),
        kernel_key(conv, conv.name, Target("c")),
    }
    with PassContext(opt_level=1):  # (the default context has opt level 2)
        others.add(kernel_key(conv, conv.name, Target("llvm")))
    with PassContext(config={"tir.some_knob": 4}):
        others.add(kernel_key(conv, conv.name, Target("llvm")))
    assert key not in others and len(others) == 7
    # the cache switch itself is not part of the key
    with PassContext(opt_level=3, config={"codegen.cache": True}):
        opt3 = kernel_key(conv, conv.name, Target("llvm"))
    with PassContext(opt_level=3):
        assert opt3 == kernel_key(conv, conv.name, Target("llvm"))


def test_group_digests_are_structural():
    a = _groups(model())
    b = _groups(model())  # new values, new names, the same structure
    assert [group_digest(g) for g in a] == [group_digest(g) for g in b]
    assert len({group_digest(g) for g in a}) == len(a)
    padded = _groups(model(pads=0))
    assert group_digest(padded[0]) != group_digest(a[0])  # conv attrs and shapes differ


def test_key_data_is_typed_and_plain():
    assert len({cache.cache_key(v) for v in (1, 1.0, True, "1", (1,), [1], b"1", None)}) == 7
    assert cache.cache_key({"a": 1, "b": 2}) == cache.cache_key({"b": 2, "a": 1})
    assert cache.cache_key(("ab", "c")) != cache.cache_key(("a", "bc"))
    with pytest.raises(cache.Unkeyable):
        cache.cache_key(object())


def test_cache_stats_is_the_cli_api():
    assert tessera.codegen.cache_stats is cache_stats
    assert set(cache_stats()) == {"hits", "misses"}


def test_kernels_compiled_in_parallel_equal_those_compiled_here(cache_dir):
    m = model()
    serial = build(m, **{"codegen.cache": False, "codegen.jobs": 1})
    parallel = build(m, **{"codegen.cache": False, "codegen.jobs": 3})
    assert parallel.get_source("ll") == serial.get_source("ll")
    np.testing.assert_array_equal(run(parallel), run(serial))
    reset_cache_stats()
    build(m, **{"codegen.jobs": 2})  # misses compiled by workers are kept in the cache
    assert len(entries(cache_dir)) == serial.num_kernels
    with pytest.raises(ValueError, match="codegen.jobs"):
        build(m, **{"codegen.cache": False, "codegen.jobs": 0})


def test_an_entry_edited_with_its_checksum_recomputed_is_rebuilt(cache_dir):
    # someone who can write the cache changes an entry's code and fixes up a sha256: without
    # the cache's secret the entry is refused before its code reaches the JIT
    import hashlib
    import json

    m = model()
    build(m)
    victim = entries(cache_dir)[0]
    good = victim.read_bytes()
    end = good.index(b"\n", len(cache.MAGIC))
    header = json.loads(good[len(cache.MAGIC) : end])
    payload = bytearray(good[end + 1 :])
    payload[: header["object_nbytes"] // 2] = bytes(header["object_nbytes"] // 2)  # zeroed code
    header["sha256"] = hashlib.sha256(payload).hexdigest()
    victim.write_bytes(cache.MAGIC + json.dumps(header).encode() + b"\n" + bytes(payload))
    reset_cache_stats()
    lib = build(m)
    assert cache_stats()["misses"] == 1
    np.testing.assert_allclose(run(lib), run_ort(m, FEEDS)[0], rtol=1e-4, atol=1e-5)


def test_the_cache_is_created_private(cache_dir):
    build(model())
    assert cache_dir.stat().st_mode & 0o777 == 0o700
    assert (cache_dir / "secret").stat().st_mode & 0o077 == 0


def test_a_cache_others_can_write_is_refused_with_a_warning(cache_dir, caplog):
    cache_dir.mkdir(parents=True)
    cache_dir.chmod(0o777)
    planted = cache_dir / "kernels"
    planted.mkdir()
    m = model()
    with caplog.at_level("WARNING"):
        lib = build(m)
    assert "is writable by others" in caplog.text and str(cache_dir) in caplog.text
    assert entries(cache_dir) == []  # nothing read from it, nothing written to it
    np.testing.assert_allclose(run(lib), run_ort(m, FEEDS)[0], rtol=1e-4, atol=1e-5)
