"""Tuning on the emulated core: the knobs of each task measured by the instructions the whole
model executes on the board (QEMU's count, exact and repeatable: one run per candidate).

    result = tune_on_board(mod, params, "c -device=micro -mcpu=cortex-m4", board="mps2-an386")
    lib = tessera.build(mod, target=..., params=params, configs=result.configs)

Coordinate descent over the tasks in build order: each task's candidates (its configs with the
default's implementation, the default first; at most `max_trials`, the rest sampled) are built
with every other task at its best so far and run once on the board. A candidate whose outputs
differ from the default's is rejected (a tile changes the order of integer sums, never their
value). Implementations that change the numerics (qnn.requantize's "fixed" and "float") are
not tuned: they are a choice of results, not of speed. The measure is instructions, not time:
QEMU does not model cycles (docs/micro.md).

With `database=` (a path or an autotune Database) every measurement is appended as a tuning
record with unit "instructions" (a rejected candidate as error "wrong"). A task's records are
the whole model's count with the other tasks fixed (at their best when the task's turn came),
its default included, so they compare among themselves; `apply_history_best(path, target)`
then builds with each task's fewest:

    tune_on_board(mod, params, target, board="mps2-an386", database="micro.db")
    with tessera.autotune.apply_history_best("micro.db", target):
        lib = tessera.build(mod, target=target, params=params)
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field

import numpy as np

from tessera.micro.session import Session


@dataclass
class TuneResult:
    configs: dict  # {Task: Config}: the best config of every tuned task
    default_instructions: int
    best_instructions: int
    trials: list = field(default_factory=list)  # (task, config, instructions or None)


def _inputs(mod, params, seed: int) -> list[np.ndarray]:
    """Seeded values for the model's inputs (the main function's params that are not weights)."""
    rng = np.random.default_rng(seed)
    arrays = []
    for p in mod["main"].params:
        if p.name in (params or {}):
            continue
        dtype = np.dtype(str(p.type.dtype))
        shape = tuple(p.type.shape)
        if np.issubdtype(dtype, np.integer):
            info = np.iinfo(dtype)
            arrays.append(rng.integers(info.min, int(info.max) + 1, shape).astype(dtype))
        else:
            arrays.append(rng.standard_normal(shape).astype(dtype))
    return arrays


def _measure(mod, params, target, configs, board, inputs) -> tuple[int, list[np.ndarray]]:
    import tessera

    lib = tessera.build(mod, target=target, params=params, configs=configs)
    with Session(lib, board=board) as s:
        for k, x in enumerate(inputs):
            s.set_input(k, x)
        counts = s.run()
        outputs = [s.get_output(k) for k in range(len(lib.plan["outputs"]))]
    return int(sum(counts)), outputs


def _candidates(task, target, max_trials: int, rng: random.Random) -> list:
    default = task.default(target)
    same = [c for c in task.configs(target) if c.impl == default.impl and c != default]
    if len(same) > max_trials - 1:
        same = rng.sample(same, max_trials - 1)
    return [default, *same]


def tune_on_board(mod, params, target, board: str = "mps2-an386", max_trials: int = 16,
                  seed: int = 0, database=None) -> TuneResult:  # fmt: skip
    """The configs with the fewest instructions on `board` (module docstring); each
    measurement also goes to `database` when one is given."""
    from tessera import autotune
    from tessera.autotune.records import Database, Record
    from tessera.target import Target

    target = Target(target) if isinstance(target, str) else target
    db = Database(database) if isinstance(database, (str, os.PathLike)) else database

    def record(task, config, count):
        if db is not None:
            error = None if count is not None else "wrong"
            db.append(Record.of(task, target, config, count, error, unit="instructions"))

    rng = random.Random(seed)
    inputs = _inputs(mod, params, seed)
    tasks = [t for t in autotune.extract_tasks(mod, params, target)
             if len(_candidates(t, target, 2, rng)) > 1]  # fmt: skip
    best: dict = {}
    base, expected = _measure(mod, params, target, {}, board, inputs)
    result = TuneResult({}, base, base)
    for task in tasks:
        default, *others = _candidates(task, target, max_trials, rng)
        record(task, default, result.best_instructions)  # the others at their best so far
        for config in others:
            trial = {**best, task: config}
            count, outputs = _measure(mod, params, target, trial, board, inputs)
            same = all(np.array_equal(a, b) for a, b in zip(outputs, expected, strict=True))
            result.trials.append((task, config, count if same else None))
            record(task, config, count if same else None)
            if same and count < result.best_instructions:
                best[task] = config
                result.best_instructions = count
    result.configs = best
    return result
