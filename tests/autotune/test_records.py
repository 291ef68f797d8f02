"""The tuning records database: records read back into the tasks extract_tasks gives, a line
cut short by a killed run is skipped, the best record per (task, target), and builds that use
the best records (apply_history_best, PassContext "tuning.database") and say which tasks fell
back to their defaults."""

import json
import logging

import numpy as np

import tessera
from tessera import autotune
from tessera.autotune import Database, Record, apply_history_best
from tessera.frontend.testing import run_ort
from tessera.runtime import GraphModule, cpu
from tessera.topi import strategy
from tessera.transform import PassContext

HOST = tessera.Target("llvm")


def run(lib, feeds):
    m = GraphModule(lib["default"](cpu(0)))
    m.set_input(**feeds)
    m.run()
    return m.get_output(0).numpy()


def conv_and_dense(mod, params):
    tasks = autotune.extract_tasks(mod, params, HOST)
    conv = next(t for t in tasks if t.workload.op == "nn.conv2d")
    dense = next(t for t in tasks if t.workload.op == "nn.dense")
    return conv, dense


def other_config(task):
    default = task.default(HOST)
    return next(c for c in task.configs(HOST) if c != default and c.impl == default.impl)


def test_record_reads_back_into_the_same_task_and_config(tiny):
    _, mod, params, _ = tiny
    for task in autotune.extract_tasks(mod, params, HOST):
        config = other_config(task)
        back = Record.from_json(Record.of(task, HOST, config, seconds=1e-5).to_json())
        assert back.task == task and back.task.digest() == task.digest()
        assert back.config == config and back.seconds == 1e-5 and back.ok
        assert back.task.workload.constant == task.workload.constant


def test_best_per_task_and_target_and_a_cut_line_is_skipped(tiny, tmp_path):
    _, mod, params, _ = tiny
    conv, dense = conv_and_dense(mod, params)
    path = tmp_path / "tune.db"
    db = Database(path)
    a, b = conv.default(HOST), other_config(conv)
    db.append(Record.of(conv, HOST, a, seconds=2e-5))
    db.append(Record.of(conv, HOST, b, seconds=1e-5))
    db.append(Record.of(conv, HOST, other_config(conv), error="crash: exit code -6"))
    db.append(Record.of(dense, "llvm -mcpu=core2", dense.default(HOST), seconds=1e-9))
    with open(path, "a") as f:  # a run killed mid-write
        f.write(json.dumps({"task": {"op": "nn.conv2d"}})[:20])
    again = Database(path)
    assert again.skipped_lines == 1 and len(again.records) == 4
    assert again.best(conv, HOST).config == b
    assert again.best(dense, HOST) is None  # its record is for another target
    assert again.best_configs(HOST) == {conv: b}
    # the next append starts a line of its own: nothing finished is lost
    again.append(Record.of(dense, HOST, dense.default(HOST), seconds=3e-6))
    third = Database(path)
    assert len(third.records) == 5 and third.best(dense, HOST).seconds == 3e-6


def test_build_uses_best_records_and_logs_the_fallbacks(tiny, tmp_path, caplog):
    model, mod, params, feeds = tiny
    conv, dense = conv_and_dense(mod, params)
    tuned = other_config(conv)
    path = tmp_path / "tune.db"
    Database(path).append(Record.of(conv, HOST, tuned, seconds=1e-6))

    wanted = tessera.build(mod, target=HOST, params=params, configs={conv: tuned})
    plain = tessera.build(mod, target=HOST, params=params)
    caplog.set_level(logging.INFO, logger="tessera")
    with apply_history_best(path) as best:
        assert strategy.given_config(conv) == tuned
        assert strategy.given_config(dense) is None
        lib = tessera.build(mod, target=HOST, params=params)
    assert best.used == [conv] and best.fallback == [dense]
    assert lib.get_source() == wanted.get_source() != plain.get_source()
    assert f"no tuning record for {dense}" in caplog.text

    caplog.clear()
    with PassContext(config={"tuning.database": str(path)}):
        lib = tessera.build(mod, target=HOST, params=params)
    assert lib.get_source() == wanted.get_source()
    assert "1 of 2 tasks tuned" in caplog.text and f"no tuning record for {dense}" in caplog.text
    np.testing.assert_allclose(run(lib, feeds), run_ort(model, feeds)[0], rtol=1e-4, atol=1e-5)


def test_a_missing_database_builds_the_defaults(tiny, tmp_path):
    _, mod, params, _ = tiny
    plain = tessera.build(mod, target=HOST, params=params)
    with PassContext(config={"tuning.database": str(tmp_path / "none.db")}):
        lib = tessera.build(mod, target=HOST, params=params)
    assert lib.get_source() == plain.get_source()


def test_a_task_whose_default_won_gets_no_config(tiny, tmp_path):
    """The default's record (the tuner's baseline, here the default of some layout context) is
    the best: the build is given no config for the task, so each call keeps the default rule
    with its own layout context."""
    _, mod, params, _ = tiny
    conv, dense = conv_and_dense(mod, params)
    db = Database(tmp_path / "tune.db")
    others = [c for c in conv.configs(HOST) if c != conv.default(HOST)]
    db.append(Record.of(conv, HOST, others[0], seconds=2e-5))
    db.append(Record.of(conv, HOST, others[1], seconds=1e-5, baseline=True))
    db.append(Record.of(dense, HOST, other_config(dense), seconds=1e-6))
    again = Database(db.path)
    assert again.best(conv, HOST).baseline and again.best(conv, HOST).config == others[1]
    assert again.best_configs(HOST) == {dense: other_config(dense)}
    with apply_history_best(db.path) as applied:
        tessera.build(mod, target=HOST, params=params)
    assert conv in applied.kept and set(applied.used) == {conv, dense}
