"""The tuning records database: one JSON line per measurement, keyed by (task, target).

    db = Database("tune.db")
    db.append(Record.of(task, target, config, seconds=2.1e-4))      # written and flushed at once
    db.best(task, target)                                            # the fastest valid config
    with apply_history_best("tune.db"):                              # builds use the best records
        lib = tessera.build(mod, target="llvm", params=params)

A record holds the task (its strategy key and workload, as plain JSON, so that a record is read
back into the very Task that `extract_tasks` gives), the target fingerprint, the config, and the
measured seconds or the error that failed it (and the features of its lowered loops, which train
the cost model of later runs, of any model). The file is only ever appended to, one line per
record and flushed (and fsynced) as it is written: a tuning run killed at any point loses no
finished measurement, and a half-written last line (the kill came mid-write) is skipped on
reading. A rerun reads the file and does not measure a (task, target, config) twice.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from tessera.logging import get_logger
from tessera.topi import strategy
from tessera.topi.strategy import Config, Task, Workload

log = get_logger(__name__)


def target_fingerprint(target) -> str:
    """What a record's target is keyed by: the target string and the CPU it compiles for (so
    that `llvm` tuned on one machine is not taken for `llvm` on another)."""
    from tessera.target import Target

    target = target if isinstance(target, Target) else Target(str(target))
    cpu = target.llvm_cpu if target.kind_info.cpu else ""
    return f"{target} cpu={cpu} vector_bits={target.vector_width_bits}"


def _tuples(v):
    """JSON lists back into the tuples a Workload holds."""
    return tuple(_tuples(x) for x in v) if isinstance(v, list) else v


def task_to_json(task: Task) -> dict:
    wl = task.workload
    return {
        "key": task.key,
        "op": wl.op,
        "inputs": wl.inputs,
        "attrs": wl.attrs,
        "output": wl.output,
        "constant": wl.constant,
    }


def task_from_json(d: dict) -> Task:
    wl = Workload(
        d["op"],
        _tuples(d["inputs"]),
        _tuples(d["attrs"]),
        _tuples(d.get("constant", [])),
        _tuples(d["output"]),
    )
    return Task(wl, d["key"])


@dataclass(frozen=True)
class Record:
    """One measurement: `seconds` (median) when it ran and matched the default's output, else
    `error` (why it failed: "crash", "timeout", "wrong", or the exception). `unit` says what
    `seconds` holds: "seconds", or "instructions" (tessera.micro.tune: counted on an emulated
    board, which models no time); the records of one (task, target) share a unit."""

    task: Task
    target: str  # the target fingerprint
    config: Config
    seconds: float | None = None
    error: str | None = None
    timestamp: float = 0.0
    features: tuple | None = None  # of the lowered loop program (features.py), when known
    again: bool = False  # a config measured again to confirm a winner (tuner._confirm)
    baseline: bool = False  # the task's default config, measured as the tuner's baseline
    unit: str = "seconds"  # "instructions": counts on an emulated board (micro/tune.py)
    # a verdict of the in-model confirmation (in_model.py, Note [in-model records]): `config`
    # is what the task keeps (its default, marked `baseline`, when the winner lost in the
    # model), `seconds` the time of all its calls in one run of the model with it
    in_model: bool = False

    @staticmethod
    def of(
        task,
        target,
        config,
        seconds=None,
        error=None,
        features=None,
        again=False,
        baseline=False,
        unit="seconds",
        in_model=False,
    ) -> Record:
        if features is not None:
            features = tuple(round(float(v), 4) for v in features)
        fp = target_fingerprint(target)
        return Record(
            task, fp, config, seconds, error, time.time(), features, again, baseline, unit, in_model
        )

    @property
    def ok(self) -> bool:
        return self.error is None and self.seconds is not None

    def to_json(self) -> str:
        d = {
            "task": task_to_json(self.task),
            "digest": self.task.digest(),
            "target": self.target,
            "config": dict(self.config.as_attr()),
            "seconds": self.seconds,
            "error": self.error,
            "timestamp": self.timestamp,
            "unit": self.unit,
        }
        if self.features is not None:
            d["features"] = list(self.features)
        if self.again:
            d["again"] = True
        if self.baseline:
            d["baseline"] = True
        if self.in_model:
            d["in_model"] = True
        return json.dumps(d, sort_keys=True)

    @staticmethod
    def from_json(line: str) -> Record:
        d = json.loads(line)
        config = dict(d["config"])
        config = Config(config.pop("impl"), {k: _tuples(v) for k, v in config.items()})
        task = task_from_json(d["task"])
        features = tuple(d["features"]) if d.get("features") else None
        return Record(
            task,
            d["target"],
            config,
            d["seconds"],
            d["error"],
            d["timestamp"],
            features,
            bool(d.get("again", False)),
            bool(d.get("baseline", False)),
            d.get("unit", "seconds"),
            bool(d.get("in_model", False)),
        )


class Database:
    """A JSON-lines file of records, read once on opening and appended to as records come.
    `records` are the measurements; `verdicts` the in-model confirmation's records (Note
    [in-model records]), kept apart: their times are of a task's calls in a model run, not
    of a kernel alone, and no search or cost model reads them."""

    def __init__(self, path):
        self.path = Path(path)
        self.records: list[Record] = []
        self.verdicts: list[Record] = []
        self.skipped_lines = 0
        if self.path.exists():
            for line in self.path.read_text().splitlines():
                if not line.strip():
                    continue
                try:
                    self._add(Record.from_json(line))
                except (ValueError, KeyError, TypeError):
                    # a line cut short by a killed run, or written by a newer tessera
                    self.skipped_lines += 1
            if self.skipped_lines:
                log.warning("%s: skipped %d unreadable lines", self.path, self.skipped_lines)

    def append(self, record: Record) -> None:
        """Write `record` as one line, flushed and synced before returning."""
        self._add(record)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as f:
            # a killed writer may have left a partial line: start ours on a line of its own
            if f.tell() > 0 and not self._ends_with_newline():
                f.write("\n")
            f.write(record.to_json() + "\n")
            f.flush()
            os.fsync(f.fileno())

    def _add(self, record: Record) -> None:
        (self.verdicts if record.in_model else self.records).append(record)

    def verdict(self, task: Task, target) -> Record | None:
        """The latest in-model verdict of `task` on `target` (Note [in-model records])."""
        fp = target_fingerprint(target)
        found = [r for r in self.verdicts if r.target == fp and r.task == task]
        return found[-1] if found else None

    def _ends_with_newline(self) -> bool:
        with open(self.path, "rb") as f:
            f.seek(-1, os.SEEK_END)
            return f.read(1) == b"\n"

    def of(self, task: Task, target) -> list[Record]:
        """The records of `task` on `target`, oldest first."""
        fp = target_fingerprint(target)
        return [r for r in self.records if r.target == fp and r.task == task]

    def measured(self, task: Task, target) -> dict[Config, Record]:
        """Each config of `task` measured on `target` (passed or failed), with its record."""
        return {r.config: r for r in self.of(task, target)}

    def best(self, task: Task, target) -> Record | None:
        """The fastest passing config of `task` on `target`, or None, by Note [confirmed
        records]: among the configs confirmed by the tuner's re-measure in turns when any
        is, else among all (each by its fastest passing record)."""
        return best_of(self.of(task, target))

    def best_configs(self, target) -> dict[Task, Config]:
        """{task: its best config} for every task whose best passing record on `target` beat
        its default, except that a task with an in-model verdict for `target` gets the config
        its latest verdict kept, if its winner beat the default inside the model (Note
        [in-model records]). A task whose default was best gets no config: a build then
        takes the default rule at each of its calls, with the layout context of that call,
        which a config recorded from one context would override at the others."""
        fp = target_fingerprint(target)
        groups: dict[Task, list[Record]] = {}
        for r in self.records:
            if r.target == fp:
                groups.setdefault(r.task, []).append(r)
        verdicts = {r.task: r for r in self.verdicts if r.target == fp}  # the latest of each
        best = {t: best_of(recs) for t, recs in groups.items() if t not in verdicts}
        configs = {t: r.config for t, r in verdicts.items() if r.ok and not r.baseline}
        for t, r in best.items():  # tasks no in-model check judged (Note [in-model records])
            if r is not None and not _is_baseline(r, target):
                configs[t] = r.config
        return configs


# Note [confirmed records]
# ~~~~~~~~~~~~~~~~~~~~~~~~
# A search measures each candidate once, on a shared machine whose load changes by the
# second: a candidate can win by the noise of one run. So the tuner measures its winner and
# the default again, in turns (tuner._confirm), and records the medians marked `again`. The
# database judges by those:
#   - a config is judged by its latest `again` record when it has one (a later confirmation
#     supersedes an earlier one), else by its fastest passing record;
#   - once any config of a (task, target) has a passing `again` record, only the configs
#     that have one compete: a single-run record never beats a confirmed one, however fast
#     it was (it was never compared in turns with the confirmed configs, and the default is
#     among them: a winner that did not beat the default when measured again loses to it);
#   - a task with no confirmed record (tuned before confirmation existed, or a search that
#     kept its default and so confirmed nothing) is judged by its fastest passing records.
# A rerun's confirmation measures the earlier confirmed best in the same turns as the new
# winner and the default (tuner._confirm), so that confirmed records of different runs
# (different loads) are not compared with each other for the latest answer. Exact
# measures (instruction counts, micro/tune.py) are never measured again: the rule is then
# simply the fastest record.


# Note [in-model records]
# ~~~~~~~~~~~~~~~~~~~~~~~
# A winner confirmed alone (Note [confirmed records]) can still lose inside the model, where
# its weights are cold, other kernels run between its calls and a config's layout changes its
# neighbours' (docs/performance.md, issue 11: ShuffleNet's confirmed winners made the model
# 8% slower). So tuning a model ends with the in-model confirmation (in_model.py), which
# writes one verdict per winner it examined: a record marked `in_model`, whose config is the
# one the task keeps (the winner, or its default marked `baseline` where the winner did not
# beat it in the model or was dropped by the whole-model check) and whose seconds are the
# time of the task's calls in one model run. The database keeps verdicts apart from the
# measurements (`Database.verdicts`): the search, the cost model and `best` never see them.
# `best_configs` (what apply_history_best and `tessera.build` with a database use) reads them:
# a task with a verdict gets a config only where its latest verdict kept a winner; a task
# without one (a task whose default stayed best, so no verdict was needed; another model's
# task in a shared database tuned before this stage or stopped before it; kernel tuning) is
# read by its measurements as before. A rerun resumes
# the search from the measurements and writes new verdicts at its end, which supersede the old.


def best_of(records: list[Record]) -> Record | None:
    """The record of the best config among `records` (of one task and target, in the order
    written), by Note [confirmed records]; None when none passed."""
    judged = [r for r in _judged(records).values() if r.ok]
    confirmed = [r for r in judged if r.again]
    pool = confirmed or judged
    return min(pool, key=lambda r: r.seconds) if pool else None


def _is_baseline(r: Record, target) -> bool:
    """The task's default, as the tuner measured it (or, in a database written before records
    said so, its default without a layout context)."""
    if r.baseline:
        return True
    try:
        return r.config == r.task.default(target)
    except Exception:  # the op or its strategy changed since: not a default of today's
        return False


def _judged(records: list[Record]) -> dict:
    """{(task, config): the record it is judged by} (records in the order they were written)."""
    out: dict = {}
    for r in records:
        key = (r.task, r.config)
        cur = out.get(key)
        if cur is None or r.again:
            out[key] = r
        elif not cur.again and r.ok and (not cur.ok or r.seconds < cur.seconds):
            out[key] = r
    return out


class _ConfigScope:
    """Gives `self.configs` to the builds inside (`use_configs`) and lists the tasks they ask
    for: `_enter()` in `__enter__`, `_exit(exc)` in `__exit__` returns those tasks in order."""

    configs: dict

    def _enter(self):
        self._scope = strategy.use_configs(self.configs)
        self._recorder = strategy.record_tasks()
        self._scope.__enter__()
        self._seen = self._recorder.__enter__()
        return self

    def _exit(self, exc) -> list[Task]:
        self._recorder.__exit__(*exc)
        self._scope.__exit__(*exc)
        return list(dict.fromkeys(self._seen))


class apply_history_best(_ConfigScope):
    """`with apply_history_best("tune.db"):` builds inside take each task's best record for
    their target, and the default config for tasks without one (logged at INFO when the block
    ends: which tasks the database covered, which fell back to their defaults).

    The target is the one the build is for: the database is read when the block is entered,
    for every target it holds a record of, and `use_configs` is given the configs of the
    target `target` (default: the host "llvm")."""

    def __init__(self, path, target="llvm"):
        from tessera.target import Target

        self.path = Path(path)
        self.target = target if isinstance(target, Target) else Target(str(target))
        self.configs: dict[Task, Config] = {}
        self.kept: set[Task] = set()
        self.used: list[Task] = []
        self.fallback: list[Task] = []

    def __enter__(self):
        db = Database(self.path) if self.path.exists() else None
        if db is None:
            log.warning(
                "tuning database %s does not exist: every task takes its default", self.path
            )
        self.configs = db.best_configs(self.target) if db is not None else {}
        # tasks whose tuning kept the default: covered by the database, given no config
        fp = target_fingerprint(self.target)
        self.kept = {r.task for r in (db.records if db else []) if r.target == fp and r.ok}
        self.kept -= set(self.configs)
        # configs not valid for today's spaces (a knob changed since tuning) are dropped
        current = {t: current_config(t, c, self.target) for t, c in self.configs.items()}
        self.configs = {t: c for t, c in current.items() if c is not None}
        return self._enter()

    def __exit__(self, *exc):
        seen = self._exit(exc)
        self.used = [t for t in seen if t in self.configs or t in self.kept]
        self.fallback = [t for t in seen if t not in self.used]
        if seen:
            log.info("%d of %d tasks tuned (database %s)", len(self.used), len(seen), self.path)
        for t in seen:
            if t in self.kept:
                log.info("%s: tuning kept its default config", t)
        for t in self.fallback:
            log.info("no tuning record for %s: it takes its default config", t)


def _valid(task: Task, config: Config, target) -> bool:
    try:
        # loads the target's strategies, which a fresh process has not yet (Task.strategy reads)
        if strategy.find_strategy(task.workload.op, target) is None:
            return False
        return task.valid(config, target)
    except Exception:  # the op or its strategy is gone
        return False


# Note [added knobs]
# ~~~~~~~~~~~~~~~~~~
# A knob added to a space after a record was written (the conv's threading split) would make
# every older record of that implementation invalid, and a user's tuning database silently
# stop applying. A new knob's default rule is, by convention, the behaviour before the knob
# existed, so a record that lacks knobs takes them from the task's default config when that
# default is the same implementation; a knob added with a default that changed the behaviour
# (a grouped conv's `shared_window`, Note [shared windows] in topi/x86/conv2d.py) says what
# the behaviour before it was (`Knob.before`), and a record that lacks it takes that value:
# the kernel it measured. A record whose knobs changed in any other way (a value no longer a
# candidate, a knob gone, another implementation's default) is still dropped.


def current_config(task: Task, config: Config, target) -> Config | None:
    """`config` as today's config spaces read it (Note [added knobs]), or None."""
    if _valid(task, config, target):
        return config
    try:
        default = task.default(target)
    except Exception:  # the op or its strategy is gone
        return None
    missing = {k: v for k, v in default.items() if k != "impl" and k not in config}
    if default.impl != config.impl or not missing or set(config) - set(default):
        return None
    space = task.implementations(target).get(config.impl)
    for knob in space.knobs if space is not None else ():
        if knob.name in missing and knob.before != ():
            missing[knob.name] = knob.before
    knobs = dict(config.knobs(), **missing)
    upgraded = Config(config.impl, knobs)
    return upgraded if _valid(task, upgraded, target) else None
