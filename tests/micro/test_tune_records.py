"""Tuning on the board writes the tuning database: records in instructions (marked so), read
back by apply_history_best, whose build runs the recorded configs."""

from __future__ import annotations

import numpy as np

import tessera
from tessera import autotune
from tessera.autotune.records import Database, Record
from tessera.topi.strategy import Config

from .test_int8 import M4, _build, _host, needs_qemu, qconv_model


def _conv_task(mod, params):
    return next(t for t in autotune.extract_tasks(mod, params, M4) if t.workload.op == "qnn.conv2d")


def test_instruction_records_round_trip_and_pick_the_fewest(tmp_path):
    model, x = qconv_model(8, 12, (1, 1))
    mod, params = tessera.frontend.from_onnx(model, {"x": x.shape})
    task = _conv_task(mod, params)
    default = task.default(tessera.Target(M4))
    other = next(c for c in task.configs(tessera.Target(M4)) if c.impl == default.impl
                 and c != default)  # fmt: skip
    db = Database(tmp_path / "micro.db")
    db.append(Record.of(task, M4, default, 5000, unit="instructions"))
    db.append(Record.of(task, M4, other, 4000, unit="instructions"))
    db.append(Record.of(task, M4, Config(default.impl, {"ocb": 1, "nw": 1}), None, "wrong",
                        unit="instructions"))  # fmt: skip
    back = Database(tmp_path / "micro.db")
    assert [r.unit for r in back.records] == ["instructions"] * 3
    assert back.best(task, M4).config == other and back.best(task, M4).seconds == 4000
    with autotune.apply_history_best(tmp_path / "micro.db", M4) as ctx:
        lib = _build(model, x)
    assert task in ctx.used
    np.testing.assert_array_equal(_host(lib, x), _host(_build(model, x), x))


def test_records_without_a_unit_read_as_seconds(tmp_path):
    model, x = qconv_model(8, 12, (1, 1))
    mod, params = tessera.frontend.from_onnx(model, {"x": x.shape})
    task = _conv_task(mod, params)
    line = Record.of(task, M4, task.default(tessera.Target(M4)), 1e-3).to_json()
    old = line.replace(', "unit": "seconds"', "")
    assert '"unit"' not in old and Record.from_json(old).unit == "seconds"


@needs_qemu
def test_tune_on_board_writes_the_database_that_the_build_uses(tmp_path):
    from tessera.micro.tune import tune_on_board

    model, x = qconv_model(4, 6, (3, 3), pads=(1, 1, 1, 1), hw=(5, 6))
    mod, params = tessera.frontend.from_onnx(model, {"x": x.shape})
    path = tmp_path / "micro.db"
    result = tune_on_board(mod, params, M4, board="mps2-an386", max_trials=2, database=path)
    records = Database(path).records
    task = _conv_task(mod, params)
    mine = [r for r in records if r.task == task]
    assert len(mine) == 2 and all(r.unit == "instructions" and r.ok for r in mine)
    assert mine[0].config == task.default(tessera.Target(M4))
    assert mine[0].seconds == result.default_instructions
    assert min(r.seconds for r in mine) == result.best_instructions
    with autotune.apply_history_best(path, M4) as ctx:
        lib = _build(model, x)
    # a task whose default won gets no config (best_configs): the build takes the default
    chosen = ctx.configs.get(task, mine[0].config)
    assert task in ctx.used and chosen == result.configs.get(task, mine[0].config)
    np.testing.assert_array_equal(_host(lib, x), _host(_build(model, x), x))
