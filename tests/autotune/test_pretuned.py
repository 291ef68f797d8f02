"""Configs shipped pre-tuned per machine kind (tessera/autotune/pretuned.py): the kind key, a
build that takes a shipped config by default and says so, the precedence explicit configs >
user database > shipped > defaults, the switch that turns them off (PassContext and CLI), and
a record of another kind never used."""

import json
import logging

import numpy as np
import pytest
from click.testing import CliRunner

import tessera
from tessera import autotune
from tessera.autotune import Database, Record, pretuned
from tessera.autotune.pretuned import machine_kind, shipped_configs, write_shipped
from tessera.frontend.testing import run_ort
from tessera.runtime import GraphModule, cpu
from tessera.target import _host_cpu
from tessera.transform import PassContext

HOST = tessera.Target("llvm")
KIND = machine_kind(HOST)

needs_kind = pytest.mark.skipif(KIND is None, reason="this host's CPU has no machine kind")


def run(lib, feeds):
    m = GraphModule(lib["default"](cpu(0)))
    m.set_input(**feeds)
    m.run()
    return m.get_output(0).numpy()


def other_config(task):
    default = task.default(HOST)
    return next(c for c in task.configs(HOST) if c != default and c.impl == default.impl)


@pytest.fixture
def shipped(tmp_path, monkeypatch):
    """The package's folder of shipped files, moved to an empty temporary one."""
    monkeypatch.setattr(pretuned, "PRETUNED_DIR", tmp_path / "pretuned")
    return tmp_path / "pretuned"


def test_isa_level_of_named_cpus():
    assert pretuned.isa_level(tessera.Target("llvm -mcpu=haswell")) == "x86_64-avx2-fma2"
    assert pretuned.isa_level(tessera.Target("llvm -mcpu=skylake-avx512")) == "x86_64-avx512-fma2"
    assert pretuned.isa_level(tessera.Target("llvm -mcpu=core2")) == "x86_64-sse"
    arm = tessera.Target("llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1")
    assert pretuned.isa_level(arm) == "aarch64-neon-dotprod"


def test_machine_kind_buckets_caches_and_threads(monkeypatch):
    if KIND is None:
        pytest.skip("this host's CPU has no machine kind")
    from tessera.topi.x86 import cpu as x86cpu

    def with_caches(l1, l2):
        monkeypatch.setattr(x86cpu, "cache_sizes", lambda: {1: l1, 2: l2})
        return machine_kind(HOST)

    zen = with_caches(32 << 10, 512 << 10)
    assert "-L1_32K-L2_512K-" in zen
    assert with_caches(40 << 10, 600 << 10) == zen  # one bucket: 32K..64K, 512K..1M
    assert with_caches(48 << 10, 1280 << 10) != zen  # Ice Lake's L2: another kind
    assert with_caches(32 << 10, 256 << 10) != zen  # Haswell's L2
    four = tessera.Target("llvm -num-cores=4")
    assert machine_kind(four) != machine_kind(tessera.Target("llvm -num-cores=2"))
    assert machine_kind(four) == machine_kind(tessera.Target("llvm -num-cores=7"))


def test_other_cpus_have_no_kind_and_the_host_cpu_has_the_hosts():
    host_cpu = _host_cpu()[0]
    for name in ("haswell", "skylake-avx512", "znver3", "core2"):
        kind = machine_kind(tessera.Target(f"llvm -mcpu={name}"))
        assert kind == (KIND if name == host_cpu else None)
    assert machine_kind(tessera.Target("llvm -mtriple=aarch64-linux-gnu")) is None
    assert machine_kind(tessera.Target("c -device=micro -mcpu=cortex-m4")) is None


def conv_task(mod, params):
    tasks = autotune.extract_tasks(mod, params, HOST)
    return next(t for t in tasks if t.workload.op == "nn.conv2d")


@needs_kind
def test_build_takes_the_shipped_config_and_logs_it(tiny, shipped, caplog):
    model, mod, params, feeds = tiny
    conv = conv_task(mod, params)
    tuned = other_config(conv)
    write_shipped(pretuned.shipped_path(KIND), KIND, [Record.of(conv, HOST, tuned, seconds=1e-6)])
    assert shipped_configs(HOST) == {conv: tuned}

    wanted = tessera.build(mod, target=HOST, params=params, configs={conv: tuned})
    with PassContext(config={"tuning.pretuned": False}):
        plain = tessera.build(mod, target=HOST, params=params)
    caplog.set_level(logging.INFO, logger="tessera")
    lib = tessera.build(mod, target=HOST, params=params)  # by default
    assert lib.get_source() == wanted.get_source() != plain.get_source()
    assert f"1 of 2 tasks took a shipped config ({KIND})" in caplog.text
    assert f"{conv}: shipped config {tuned}" in caplog.text
    np.testing.assert_allclose(run(lib, feeds), run_ort(model, feeds)[0], rtol=1e-4, atol=1e-5)


@needs_kind
def test_precedence_explicit_then_database_then_shipped(tiny, shipped, tmp_path):
    _, mod, params, _ = tiny
    conv = conv_task(mod, params)
    configs = [c for c in conv.configs(HOST) if c != conv.default(HOST)]
    ship, mine, given = configs[:3]
    write_shipped(pretuned.shipped_path(KIND), KIND, [Record.of(conv, HOST, ship, seconds=1e-6)])
    db = Database(tmp_path / "tune.db")
    db.append(Record.of(conv, HOST, mine, seconds=1e-6))

    def source(configs=None, **config):
        with PassContext(config=config):
            return tessera.build(mod, target=HOST, params=params, configs=configs).get_source()

    def built_with(config):
        return source({conv: config}, **{"tuning.pretuned": False})

    assert source() == built_with(ship)
    assert source(**{"tuning.database": str(db.path)}) == built_with(mine)
    explicit = {"strategy.configs": {conv: given}, "tuning.database": str(db.path)}
    assert source(**explicit) == built_with(given)
    # a database whose tuning kept the default covers the task: the shipped config stays out
    kept = Database(tmp_path / "kept.db")
    kept.append(Record.of(conv, HOST, conv.default(HOST), seconds=1e-6, baseline=True))
    plain = source(**{"tuning.pretuned": False})
    assert source(**{"tuning.database": str(kept.path)}) == plain


@needs_kind
def test_a_record_of_another_kind_is_never_used(tiny, shipped):
    _, mod, params, _ = tiny
    conv = conv_task(mod, params)
    path = pretuned.shipped_path(KIND)
    write_shipped(
        path,
        "x86_64-avx512-fma2-v512-L1_32K-L2_1M-c2",
        [Record.of(conv, HOST, other_config(conv), seconds=1e-6)],
    )
    path.rename(pretuned.shipped_path(KIND))  # even in this kind's file
    assert shipped_configs(HOST) == {}
    line = json.loads(path.read_text())
    line["target"] = KIND
    path.write_text(json.dumps(line) + "\n")
    assert shipped_configs(HOST) == {conv: other_config(conv)}
    # a target of another CPU reads no file at all
    assert shipped_configs(tessera.Target("llvm -mcpu=skylake-avx512")) == {}


@needs_kind
def test_cli_no_pretuned(tiny, shipped, tmp_path, caplog):
    from tessera.cli import cli

    model, mod, params, _ = tiny
    conv = conv_task(mod, params)
    record = Record.of(conv, HOST, other_config(conv), seconds=1e-6)
    write_shipped(pretuned.shipped_path(KIND), KIND, [record])
    path = tmp_path / "tiny.onnx"
    path.write_bytes(model.SerializeToString())
    logs = {}
    for flags in ([], ["--no-pretuned"]):
        caplog.clear()
        caplog.set_level(logging.INFO, logger="tessera")
        artifact = tmp_path / f"tiny{len(flags)}.so"
        result = CliRunner().invoke(cli, ["compile", str(path), "-o", str(artifact), *flags])
        assert result.exit_code == 0, result.output
        logs[len(flags)] = caplog.text
    assert "took a shipped config" in logs[0] and "took a shipped config" not in logs[1]
