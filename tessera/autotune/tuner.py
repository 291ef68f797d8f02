"""The tuner: a model's tasks, a time budget split by where time goes, an evolutionary search.

    results = tessera.autotune.tune(mod, params, "llvm", db="tune.db", budget=600)
    with PassContext(config={"tuning.database": "tune.db"}):
        lib = tessera.build(mod, target="llvm", params=params)

For every task the default config is measured first: its time is the baseline, its outputs the
reference every candidate must match, and it stays the answer unless a candidate beats it (so
tuned is never slower than the default, as measured). The rest of the budget is split over the
tasks in proportion to their share of the model's time (default time x how many calls run it),
in rounds that skip a task whose share would not pay for one batch (Note [scheduling the
budget]), and each task's share is spent by `EvolutionarySearch`: the default's neighbours and
random configs first, then mutations of the fastest so far, ranked by a cost model fit to the
measurements; a winner is confirmed against the default, in turns, after the last round.
Every measurement is appended to the database as it arrives; configs the database already
holds for the task and target are not measured again (a rerun resumes).
"""

from __future__ import annotations

import itertools
import math
import os
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from tessera.autotune.cost_model import GBTRanker, KnobRidge, normalized_throughput
from tessera.autotune.measure import Builder, Measurer, MeasureResult
from tessera.autotune.records import Database, Record
from tessera.logging import get_logger
from tessera.topi import strategy
from tessera.topi.strategy import Config, Task

log = get_logger(__name__)


def task_counts(mod, params, target) -> Counter:
    """How many calls of the model run each task: graph passes ask once per call they rewrite
    (convs, dense with constant weights), lowering once per fused group it schedules; a call
    asked in both phases counts once."""
    from tessera.driver import fused_function
    from tessera.graph_build.lower_group import distinct_groups, group_config
    from tessera.ir.module import IRModule

    if not isinstance(mod, IRModule):
        mod = IRModule({"main": mod})
    with strategy.record_tasks() as passes:
        func = fused_function(mod, target, params)
    with strategy.record_tasks() as lowering:
        distinct_groups(func)  # checks every call is in a group, as a build does
        for call in func.body:
            group_config(call.attrs["func"], target)
    a, b = Counter(passes), Counter(lowering)
    return Counter({t: max(a[t], b[t]) for t in a.keys() | b.keys()})


@dataclass
class TaskResult:
    """What tuning found for one task."""

    task: Task
    count: int  # calls of the model that run it
    default: Config
    default_seconds: float | None = None
    best: Config | None = None
    best_seconds: float | None = None
    trials: int = 0  # measured in this run
    failed: int = 0
    history: list = field(default_factory=list)  # (trial, best seconds so far)
    # the context the model asks the task with: the layout it is measured in (Note
    # [in-model layout] in measure.py)
    context: dict = field(default_factory=dict)
    # set by the in-model confirmation (in_model.py): (untuned, tuned) seconds of the task's
    # calls per model run, and the winner it took back when that lost in the model
    in_model: tuple | None = None
    rejected: Config | None = None

    @property
    def speedup(self) -> float | None:
        if self.default_seconds and self.best_seconds:
            return self.default_seconds / self.best_seconds
        return None


# Note [lowered once]
# Ranking candidates by the cost model needs the features of their lowered loops, and a
# lowering in the build pool costs about what a measurement does (tens of milliseconds of
# lowering, more on a loaded machine, against a kernel timed in milliseconds): the search
# lowered a dozen or more candidates for every two it measured. The candidates of one task
# recur from batch to batch (the neighbours of the same fastest config, mutations of the same
# parents), so `EvolutionarySearch.known` keeps the features of every config lowered (None
# where the lowering failed), a ranking lowers only the candidates it has not seen, and the
# build of a batch whose features are known compiles without lowering them again.


# Note [neighbours first]
# The default of a task is a hand rule that is already good (docs/tuning.md, "Where the defaults
# come from"), and a model's budget gives most tasks a handful of trials. Random configs of a
# space of thousands rarely beat such a default in a handful; a config one knob away from it
# (another threading split, tile width, prefetch) often does, where that one decision of the
# rule is wrong for this machine or this layout. So until `population` configs are measured,
# a batch alternates the default's neighbours (the fastest config's, once a candidate beat
# it), ranked by the cost model (trained on the other tasks of the op, transfer) with random
# configs, which keep the search from seeing only the default's corner of the space.


class EvolutionarySearch:
    """Proposes configs of one task, a batch at a time: while fewer than `population` have
    been measured, one-knob neighbours of the fastest config so far in turns with random ones
    (Note [neighbours first]); then, one time in five, a random config (to leave a local
    optimum), the rest the candidates a cost model ranks first among `batch` fresh mutations
    (one knob changed) of the `population` fastest. The model is `GBTRanker` on the features of
    the candidates' lowered loops (`features`: a function of a list of configs, the build pool's)
    when there is data to train it (this task's measurements, and `transfer`: (features,
    normalized throughput) of other tasks of the same op), else `KnobRidge` on knob values.
    Measured configs are never proposed again."""

    def __init__(
        self,
        task: Task,
        target,
        rng: random.Random,
        population: int = 8,
        batch=16,
        features=None,
        transfer=(),
    ):
        self.task = task
        self.target = target
        self.rng = rng
        self.population = population
        self.batch = batch
        self.spaces = task.implementations(target)
        self.model = KnobRidge(task, target)
        self.features = features
        # features of the configs lowered so far (measured or only ranked), None where the
        # lowering failed: a config is lowered once (Note [lowered once])
        self.known: dict[Config, np.ndarray | None] = {}
        self.transfer = list(transfer)
        self.gbt = GBTRanker()
        self.lowered = 0  # configs this search had the build pool lower for their features
        self.batches = 0  # batches proposed and measured

    def propose(self, measured: dict[Config, float | None], tries: int = 200) -> Config | None:
        batch = self.propose_batch(measured, 1, tries)
        return batch[0] if batch else None

    def propose_batch(self, measured, n: int, tries: int = 200) -> list[Config]:
        ok = sorted((s, i, c) for i, (c, s) in enumerate(measured.items()) if s is not None)
        if len(ok) < self.population:
            return self._first(measured, ok, tries, n)
        picks = self._fresh(measured, tries, 1) if self.rng.random() < 0.2 else []
        parents = [c for _, _, c in ok[: self.population]]
        candidates: set[Config] = set()
        for _ in range(tries):
            config = self.mutate(self.rng.choice(parents))
            if config is not None and config not in measured and config not in picks:
                candidates.add(config)
                if len(candidates) == self.batch:
                    break
        if not candidates:  # the neighbourhood is measured: look further
            return picks or self._fresh(measured, tries, n)
        # sorted first: set order varies between runs, the ranking must not
        ranked = self.rank(sorted(candidates, key=repr), ok)
        return (picks + ranked)[:n]

    def rank(self, candidates: list[Config], ok) -> list[Config]:
        own = [(self.known[c], s) for s, _, c in ok if self.known.get(c) is not None]
        if self.features is not None and len(own) + len(self.transfer) >= 4:
            y = list(normalized_throughput([s for _, s in own]))
            X = [f for f, _ in own] + [f for f, _ in self.transfer]
            self.gbt.fit(np.stack(X), y + [t for _, t in self.transfer])
            new = [c for c in candidates if c not in self.known]
            if new:
                for c, (f, _) in zip(new, self.features(new), strict=True):
                    self.known[c] = f
                self.lowered += len(new)
            scored = [(c, self.known[c]) for c in candidates if self.known[c] is not None]
            if scored:
                pred = self.gbt.predict(np.stack([f for _, f in scored]))
                order = np.argsort(-pred, kind="stable")
                return [scored[i][0] for i in order]
        self.model.fit([c for _, _, c in ok], [s for s, _, _ in ok])
        return self.model.rank(candidates)

    def _first(self, measured, ok, tries, n: int) -> list[Config]:
        """Before the population is measured (Note [neighbours first]): the neighbours of the
        fastest config so far (the default, at first) the model ranks first, in turns with
        random configs."""
        near = self._neighbours(ok[0][2], measured) if ok else []
        if near:
            near = self.rank(near, ok)
        fresh = self._fresh(measured, tries, n)
        # a random config can be one of the neighbours, even the one it is paired with: each
        # config once (a batch measures what it lists, and a repeat would be recorded twice)
        out = [c for pair in itertools.zip_longest(near, fresh) for c in pair if c is not None]
        return list(dict.fromkeys(out))[:n]

    def _neighbours(self, config: Config, measured) -> list[Config]:
        """Up to `batch` unmeasured valid configs that differ from `config` in one knob."""
        space = self.spaces.get(config.impl)
        if space is None:
            return []
        found = []
        for knob in space.knobs:
            for value in knob.candidates:
                values = config.knobs()
                values[knob.name] = value
                other = Config(config.impl, values)
                if other != config and other not in measured and space.valid(values):
                    found.append(other)
        self.rng.shuffle(found)
        return sorted(found[: self.batch], key=repr)

    def _fresh(self, measured, tries, n: int) -> list[Config]:
        found: list[Config] = []
        for _ in range(tries):
            config = self.task.sample(self.target, self.rng)
            if config not in measured and config not in found:
                found.append(config)
                if len(found) == n:
                    return found
        # random draws miss the last configs of a space nearly measured (2 of 72 left: 200
        # draws miss one ~6% of the time) and the search would end early: walk the space
        for config in self.task.configs(self.target):
            if config not in measured and config not in found:
                found.append(config)
                if len(found) == n:
                    break
        return found

    def mutate(self, config: Config) -> Config | None:
        space = self.spaces.get(config.impl)
        if space is None or not space.knobs:
            return None
        knob = self.rng.choice(space.knobs)
        values = config.knobs()
        values[knob.name] = self.rng.choice(knob.candidates)
        return Config(config.impl, values) if space.valid(values) else None


def transfer_data(db: Database, task: Task, target) -> list:
    """(features, normalized throughput) of the measurements of the other tasks of the same op
    on `target` in `db`: what the cost model knows before this task's first measurement."""
    from tessera.autotune.records import target_fingerprint

    fp = target_fingerprint(target)
    groups: dict[Task, list[Record]] = {}
    for r in db.records:
        if r.target == fp and r.task != task and r.task.workload.op == task.workload.op:
            if r.features is not None and r.ok:
                groups.setdefault(r.task, []).append(r)
    out = []
    for recs in groups.values():
        y = normalized_throughput([r.seconds for r in recs])
        out += [(np.asarray(r.features), float(t)) for r, t in zip(recs, y, strict=True)]
    return out


def _weights(results: list[TaskResult]) -> dict[Task, float]:
    """Each task's share of the model's time: default seconds x calls (tasks whose default
    failed are not searched)."""
    return {r.task: r.count * r.default_seconds for r in results if r.default_seconds}


def tune_tasks(
    tasks: list[Task],
    target,
    db: Database,
    budget: float,
    counts: Counter | None = None,
    measurer: Measurer | None = None,
    max_trials: int | None = None,
    seed: int = 0,
    progress: Callable[[TaskResult, Record | None], None] | None = None,
    builder: Builder | None = None,
    contexts: dict | None = None,
) -> list[TaskResult]:
    """Tune `tasks` on `target` within `budget` seconds (wall time, defaults included), writing
    every measurement to `db`. `max_trials`: at most this many new configs per task (besides the
    default). `progress(result, record)` is called after every measurement. `builder`: the pool
    that lowers (features) and compiles candidates in parallel, a batch of its size at a time;
    without one, candidates are built by the measurement worker one at a time and ranked by
    their knob values. `contexts`: {task: the context the model asks it with} (extract_tasks),
    so that the default measured is the model's default for that task."""
    start = time.monotonic()
    counts = counts or Counter()
    own = measurer is None
    measurer = measurer or Measurer()
    try:
        contexts = contexts or {}
        results = [
            TaskResult(
                t, max(1, counts[t]), t.default(target, contexts.get(t)), context=contexts.get(t)
            )
            for t in tasks
        ]
        references, features = {}, [None] * len(results)
        if builder is not None:  # compiled in parallel: the worker's builds are cache hits
            built = builder.build_each([(r.task, r.default, r.context) for r in results], target)
            features = [f for f, _ in built]
        for r, feats in zip(results, features, strict=True):
            # the defaults: baseline, reference outputs, the answer to beat
            references[r.task] = _measure_default(r, target, db, measurer, progress, feats)
        weights = _weights(results)
        rng = random.Random(seed)

        def search(r, deadline, state):
            ref = references[r.task]
            args = (deadline, max_trials, rng, progress, builder, state)
            return _search(r, target, db, measurer, ref, *args)

        _schedule(results, weights, budget, start, search)
        for r in results:
            if r.task in weights:
                _confirm(r, target, db, measurer, references[r.task], progress)
        return results
    finally:
        if own:
            measurer.close()


# Note [scheduling the budget]
# A task's expected gain is its share of the model's time (the default's time x its calls, the
# weight) times what a search finds, which nobody knows in advance; the weight is what is
# known. So the time left is split by weight, the heaviest task first, each taking its share of
# what is left (time a small space did not need goes to the tasks after it). A batch (one
# candidate per build process, built, then measured) is the unit a search spends: a task whose
# share would not pay for one batch (by the mean batch time of this run so far) is not
# searched in that round, and the shares are taken among the tasks that can use them, so its
# time goes to those by their weights (not to the lightest task left, which a share of "all
# that is left" would hand it): a model's many small kernels (pools, a softmax, a 1% conv)
# each used to get a batch that cost more than their share and could save a few
# microseconds, while its heavy convs waited. Rounds repeat while time is left and some
# task's search is not done (its space measured, or its `max_trials` reached), so that time a
# finished search gave back is spent again by weight rather than left unused. Each task keeps
# its search (the cost model's features, its batch count) from round to round, and is
# confirmed once, at the end (tuner._confirm).


@dataclass
class _SearchState:
    """One task's search, kept from round to round of the scheduler."""

    search: EvolutionarySearch
    measured: dict
    new: int = 0  # candidates measured in this run
    done: bool = False  # nothing left to propose, or max_trials reached


class _BatchClock:
    """The mean wall time of a batch so far this run (None before the first)."""

    def __init__(self):
        self.total, self.count = 0.0, 0

    def add(self, seconds: float) -> None:
        self.total += seconds
        self.count += 1

    @property
    def mean(self) -> float | None:
        return self.total / self.count if self.count else None


def _schedule(results, weights, budget, start, search) -> None:
    """Spend what is left of `budget` (since `start`) on the tasks of `weights` in rounds
    (Note [scheduling the budget]); `search(r, deadline, state)` searches r's task until the
    deadline from its `state` (None the first time) and returns the state."""
    states: dict = {}
    clock = _BatchClock()
    by_weight = sorted((r for r in results if r.task in weights), key=lambda r: -weights[r.task])
    while True:
        queue = [r for r in by_weight if not (r.task in states and states[r.task].done)]
        if not queue or time.monotonic() - start >= budget:
            return
        while queue:
            left = budget - (time.monotonic() - start)
            if left <= 0:
                return
            if clock.mean is not None:
                queue = _affordable(queue, weights, left, clock.mean)
            r = queue.pop(0)
            share = left * weights[r.task] / sum(weights[t.task] for t in [r, *queue])
            batches = states[r.task].search.batches if r.task in states else 0
            began = time.monotonic()
            states[r.task] = search(r, began + share, states.get(r.task))
            made = states[r.task].search.batches - batches
            if made:
                clock.add((time.monotonic() - began) / made)


def _affordable(queue: list, weights, left: float, batch: float) -> list:
    """The tasks of `queue` (heaviest first) whose share of `left` pays for a `batch`, the
    shares taken among those kept (the heaviest is always kept)."""
    while len(queue) > 1:
        total = sum(weights[r.task] for r in queue)
        keep = [r for r in queue if left * weights[r.task] / total >= batch] or queue[:1]
        if len(keep) == len(queue):
            break
        queue = keep
    return queue


def _measure(measurer, r: TaskResult, config: Config, target, reference=None) -> MeasureResult:
    """`config` of r's task measured in the layout the model gives the task (r.context)."""
    return measurer.measure(r.task, config, target, reference, model_context=r.context)


def _measure_each(measurer, r: TaskResult, configs, target, reference):
    """(index, result) of each of `configs`: at once and as they arrive on a cluster
    (ClusterMeasurer.measure_each), else one after the other."""
    if hasattr(measurer, "measure_each"):
        yield from measurer.measure_each(r.task, configs, target, reference, r.context)
        return
    for i, config in enumerate(configs):
        yield i, _measure(measurer, r, config, target, reference)


def _measure_default(r: TaskResult, target, db, measurer, progress, features=None) -> list | None:
    """Measure the default (always: its outputs are the reference); record it once (with the
    `features` of its loops, when the build pool lowered it)."""
    res = _measure(measurer, r, r.default, target)
    known = db.measured(r.task, target).get(r.default)
    record = None
    if known is None:
        record = Record.of(
            r.task, target, r.default, res.seconds, res.error, features, baseline=True
        )
        db.append(record)
        r.trials += 1
    if not res.ok:
        log.warning("default config of %s failed (%s): the task is not tuned", r.task, res.error)
        r.failed += 1
        return None
    # the baseline is this run's time, and so is the best's when the database holds one, so
    # that both are compared on today's machine load
    r.default_seconds = r.best_seconds = res.seconds
    r.best = r.default
    best = db.best(r.task, target)
    if best is not None and best.config != r.default:
        again = _measure(measurer, r, best.config, target, res.outputs)
        if again.ok and again.seconds < r.best_seconds:
            r.best, r.best_seconds = best.config, again.seconds
    r.history.append((r.trials, r.best_seconds))
    if progress:
        progress(r, record)
    return res.outputs


def _confirm(r: TaskResult, target, db, measurer, reference, progress, rounds: int = 3) -> None:
    """Measure the default, the best candidate and the database's earlier confirmed best (a
    previous run's, when it is another config) again, in turns, `rounds` times each, and keep
    the fastest by the median of its runs (a failed run counts as slowest): a candidate that
    won by the noise of a loaded machine must not make the model slower, and confirmed
    records of runs at different loads are not compared with each other. The new records
    (those medians, marked `again`) are the latest of these configs, which the database
    judges them by (Note [confirmed records] in records.py)."""
    if r.best is None or r.default_seconds is None:
        return
    configs = [r.default, r.best]
    prior = db.best(r.task, target)
    if prior is not None and prior.again:
        configs.append(prior.config)
    configs = list(dict.fromkeys(configs))
    if len(configs) == 1:
        return
    times: dict[Config, list[float]] = {c: [] for c in configs}
    for _ in range(rounds):
        for config in configs:
            ref = None if config == r.default else reference
            res = _measure(measurer, r, config, target, ref)
            times[config].append(res.seconds if res.ok else float("inf"))
    median = {config: sorted(ts)[len(ts) // 2] for config, ts in times.items()}
    for config, t in median.items():
        ok = t != float("inf")
        error = None if ok else "failed when measured again"
        base = config == r.default
        record = Record.of(
            r.task, target, config, t if ok else None, error, again=True, baseline=base
        )
        db.append(record)
    # the default first: a tie keeps it
    winner = min(configs, key=lambda c: median[c])
    if r.best != winner:
        log.info("%s: %s did not beat %s when measured again", r.task, r.best, winner)
    r.default_seconds = median[r.default]
    r.best, r.best_seconds = winner, median[winner]
    r.history.append((r.trials, r.best_seconds))
    if progress:
        progress(r, None)


def _search(
    r, target, db, measurer, reference, deadline, max_trials, rng, progress, builder, state
) -> _SearchState:
    """Search r's task until `deadline` (or `max_trials` candidates in this run), from `state`
    when an earlier round of the scheduler began it; returns the state."""
    if state is None:
        state = _search_state(r, target, db, rng, builder)
    search, measured = state.search, state.measured
    local = getattr(measurer, "builds_locally", True)
    width = max(builder.workers if builder is not None else 1, getattr(measurer, "width", 1))
    while not state.done and time.monotonic() < deadline:
        if max_trials is not None and state.new >= max_trials:
            state.done = True
            break
        n = width if max_trials is None else min(width, max_trials - state.new)
        configs = search.propose_batch(measured, n)
        if not configs:
            log.info("%s: no new config to try (%d measured)", r.task, len(measured))
            state.done = True
            break
        search.batches += 1
        n = len(configs)
        # lowered again only where the ranking has not lowered them (Note [lowered once])
        if builder is None:
            built = [(None,) * 2] * n
        elif local:
            built = builder.build(r.task, configs, target, r.context, known=search.known)
        else:  # a cluster's workers build: here only the features for the cost model
            built = builder.features(r.task, configs, target, r.context, known=search.known)
        for i, res in _measure_each(measurer, r, configs, target, reference):
            # the measurement worker builds again: a hit in the compile cache the build pool
            # filled; a config the pool could not build fails there too, and is recorded
            config, feats = configs[i], built[i][0]
            record = Record.of(r.task, target, config, res.seconds, res.error, feats)
            db.append(record)
            measured[config] = res.seconds
            if feats is not None:
                search.known[config] = feats
            state.new += 1
            r.trials += 1
            if not res.ok:
                r.failed += 1
                log.info("%s: %s failed: %s", r.task, config, res.error)
            elif res.seconds < r.best_seconds:
                r.best, r.best_seconds = config, res.seconds
            r.history.append((r.trials, r.best_seconds))
            if progress:
                progress(r, record)
    if max_trials is not None and state.new >= max_trials:
        state.done = True
    return state


def _search_state(r, target, db, rng, builder) -> _SearchState:
    measured = {c: rec.seconds for c, rec in db.measured(r.task, target).items()}
    features = None
    if builder is not None:
        features = lambda cs: builder.features(r.task, cs, target, r.context)  # noqa: E731
    search = EvolutionarySearch(
        r.task,
        target,
        rng,
        features=features,
        transfer=transfer_data(db, r.task, target) if builder is not None else (),
    )
    for rec in db.of(r.task, target):
        if rec.features is not None:
            search.known[rec.config] = np.asarray(rec.features)
    return _SearchState(search, measured)


class TuneResults(list):
    """tune()'s answer: the TaskResult of every task, and `in_model`, the InModelReport of the
    in-model confirmation (None when it was turned off)."""

    in_model = None


def tune(
    mod,
    params=None,
    target="llvm",
    db="tune.db",
    budget: float = 600.0,
    timeout: float = 60.0,
    max_trials: int | None = None,
    seed: int = 0,
    progress=None,
    workers: int | None = None,
    cluster=None,
    in_model: bool = True,
    in_model_share: float = 0.1,
    flush="l2",
) -> TuneResults:
    """Tune every task of a graph module for `target` within `budget` seconds; the records go
    to the database file `db` (created, or resumed). `workers`: build processes (default 2, or
    fewer cores; 0: none, the measurement worker builds each candidate). `cluster`: measure on
    a Dask cluster (a scheduler address such as "tcp://host:8786", a distributed.Client or a
    cluster object; cluster.py) instead of a local worker process. `in_model`: end with the
    in-model confirmation (in_model.py), for which `in_model_share` of the budget is set
    aside; its verdicts decide what a build with the database takes (Note [in-model records]
    in records.py). `flush`: "l2" (default), "all" or False: which caches are emptied
    before each timed run of a kernel (Note [cold caches] in measure.py)."""
    from tessera.autotune.tasks import extract_tasks
    from tessera.driver import resolve_target
    from tessera.target import Target

    target = resolve_target(target if isinstance(target, Target) else Target(target), None)
    contexts: dict = {}
    tasks = extract_tasks(mod, params, target, contexts=contexts)
    counts = task_counts(mod, params, target)
    log.info("tuning %d tasks for %s within %.0f s", len(tasks), target, budget)
    database = db if isinstance(db, Database) else Database(db)
    if workers is None:
        workers = max(1, min(2, os.cpu_count() or 1))
    builder = Builder(workers, seed) if workers else None
    if cluster is not None:
        from tessera.autotune.cluster import ClusterMeasurer

        measurer = ClusterMeasurer(cluster, timeout=timeout, seed=seed)
    else:
        measurer = Measurer(timeout=timeout, seed=seed, flush=flush)
    search_budget = budget * (1 - in_model_share) if in_model else budget
    with measurer:
        try:
            results = tune_tasks(
                tasks,
                target,
                database,
                search_budget,
                counts,
                measurer,
                max_trials,
                seed,
                progress,
                builder,
                contexts,
            )
        finally:
            if builder is not None:
                builder.close()
    results = TuneResults(results)
    if in_model:
        from tessera.autotune.in_model import InModelReport, confirm_in_model

        try:
            results.in_model = confirm_in_model(
                mod, params, target, results, database, progress=progress
            )
        except Exception as e:  # the measurements are in the database: not lost with it
            why = f"failed: {type(e).__name__}: {str(e)[:300]}"
            log.warning("in-model confirmation %s; no verdict written", why)
            results.in_model = InModelReport(skipped=why)
    return results


def geomean(values) -> float:
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")
