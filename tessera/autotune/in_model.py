"""The in-model confirmation: a tuning's winners kept only where they beat the defaults in the
model, and the tuned model never slower than the untuned one.

    report = confirm_in_model(mod, params, target, results, db)   # InModelReport
    report.kept, report.dropped, report.untuned_seconds, report.tuned_seconds

The tuner's winners beat their defaults measured alone (measure.py, in turns: tuner._confirm);
inside the model a kernel runs with other kernels between its calls, on weights gone cold and
in the layouts its neighbours leave, and a winner alone can lose there (Note [in-model
confirmation]). So the model is built twice, with the defaults and with every winner, and
profiled in turns (`GraphModule.profile`: per-call times in context); each task's time is the
sum of the calls that compute its source nodes (`task_spans`), and a winner is kept only where
its task's calls are faster with it by more than the noise of those turns. Then the whole model
with the kept winners is timed in turns with the untuned build, and winners are dropped, the
smallest in-model gain first, until it is faster (at most `max_drops`, then none is kept). The
verdicts go to the database (Note [in-model records] in records.py), where they decide what a
build with the database takes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from tessera.autotune.measure import random_array
from tessera.autotune.records import Database, Record
from tessera.logging import get_logger

log = get_logger(__name__)


# Note [in-model confirmation]
# ShuffleNet's quiet 600 s tuning (docs/performance.md, issue 11) kept ten winners, each
# confirmed faster than its default alone in turns, that saved 1.00 ms measured alone; the
# tuned model was 8% slower than the untuned one. Profiled in the model in turns (the same
# database, load 4.5), one winner explained it: the grouped 1x1 conv on [1, 272, 14, 14]
# (oc_vectors 2, ow_block 3 against the default's 1 and 7) took 4.06 ms per run over its
# calls against 2.66 ms with the default, though alone it measured 115 against 175 us; hot
# alone it was slower (152 against 112 us), flushed alone faster (202 against 223 us): no
# measurement of the kernel alone predicts it. Only the model does, which is why the last
# stage of tuning a model measures there:
#   - per task, in turns: `rounds` x (profile of the untuned build, profile of the tuned
#     one), `repeat` runs each; a task's time in a round is the sum of the rows (calls) whose
#     source nodes meet its spans; d = untuned - tuned per round; the winner is kept when the
#     median of d exceeds the noise margin, 2 x 1.4826 x MAD(d) / sqrt(rounds) (twice the
#     standard error of the median, from the spread of the turns themselves), and at least
#     `min_gain` of the task's untuned time (a gain below that is not worth a changed kernel);
#   - whole model: the kept winners' build against the untuned one, `blocks` blocks of runs
#     each in turns (medians of block means); not faster, the kept winner with the smallest
#     in-model gain is dropped and the check repeated, at most `max_drops` times, then none
#     is kept. A task whose calls no profile row names (a span lost in a rewrite) cannot be
#     confirmed and keeps its default.
# Its cost is the builds of the model (two, and one per whole-model check that dropped a
# winner; kernels built before come from the compile cache) and a few seconds of runs: on
# ShuffleNet about 30 s on the loaded 2-core host, 5% of a 600 s budget. tune() sets aside
# `in_model_share` of the budget for it and reports what it took.


@dataclass
class TaskVerdict:
    """One winner judged in the model: its task's time per model run (all its calls) with the
    default and with the winner (medians over the rounds), the median gain and noise margin."""

    task: object
    config: object
    untuned_seconds: float
    tuned_seconds: float
    gain: float
    margin: float
    kept: bool
    why: str = ""


@dataclass
class InModelReport:
    """What the in-model confirmation did: `verdicts` per winner, the whole-model checks
    ((winners kept, untuned seconds, tuned seconds) each), the configs finally `kept`, the
    winners `dropped` by the whole-model check, and the stage's wall `seconds`."""

    verdicts: list = field(default_factory=list)
    checks: list = field(default_factory=list)
    kept: dict = field(default_factory=dict)
    dropped: list = field(default_factory=list)
    seconds: float = 0.0
    skipped: str | None = None  # why the stage did not run, when it did not

    @property
    def untuned_seconds(self) -> float | None:
        return self.checks[-1][1] if self.checks else None

    @property
    def tuned_seconds(self) -> float | None:
        return self.checks[-1][2] if self.checks else None

    def summary(self) -> str:
        if self.skipped:
            return f"in-model confirmation skipped: {self.skipped}"
        n = len(self.verdicts)
        line = f"in-model confirmation: {len(self.kept)} of {n} winners kept"
        if self.dropped:
            line += f" ({len(self.dropped)} dropped by the whole-model check)"
        if self.checks:
            _, u, t = self.checks[-1]
            line += f"; model untuned {u * 1e3:.3f} ms, tuned {t * 1e3:.3f} ms"
        return line + f"; took {self.seconds:.1f} s"


def random_inputs(module, seed: int = 0) -> dict | None:
    """Random inputs of every input of a GraphModule, or None when a dim is not a number."""
    shapes, dtypes = module.get_input_info()
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in shapes.items():
        if not all(isinstance(d, int) for d in shape):
            return None
        out[name] = random_array(rng, tuple(shape), str(dtypes[name]))
    return out


def _module(mod, params, target, configs: dict, inputs: dict):
    import tessera
    from tessera.runtime import GraphModule, cpu

    lib = tessera.build(mod, target=target, params=params, configs=configs)
    m = GraphModule(lib["default"](cpu(0)))
    m.set_input(**inputs)
    return m


def task_time(profile, spans: set) -> float:
    """Seconds of the profile rows (CallProfile) that compute any of the nodes `spans`."""
    return float(sum(row.seconds for row in profile if spans.intersection(row.nodes)))


def judge(
    untuned: list[float], tuned: list[float], min_gain: float = 0.01
) -> tuple[float, float, bool]:
    """(median gain, noise margin, kept) of a task's per-round times in turns (Note [in-model
    confirmation])."""
    d = np.asarray(untuned) - np.asarray(tuned)
    gain = float(np.median(d))
    mad = float(np.median(np.abs(d - gain)))
    margin = max(2 * 1.4826 * mad / np.sqrt(len(d)), min_gain * float(np.median(untuned)))
    return gain, margin, gain > margin


def profile_calls(label: str, module, repeat: int) -> list:
    """The per-call profile of `module` (the "untuned" or the "tuned" build, `label`)."""
    return module.profile(repeat)


def whole_model(a, b, kept: dict, blocks: int = 7, number: int = 5) -> tuple[float, float]:
    """(seconds of a run of GraphModule a, of b, the build with the winners `kept`): medians of
    `blocks` block means of `number` runs, the two in turns."""
    ta, tb = [], []
    a.run(), b.run()
    for _ in range(blocks):
        ta.append(a.benchmark(number=number, repeat=1).median)
        tb.append(b.benchmark(number=number, repeat=1).median)
    return float(np.median(ta)), float(np.median(tb))


def confirm_in_model(
    mod,
    params,
    target,
    results: list,
    db: Database | None = None,
    rounds: int = 5,
    repeat: int = 10,
    blocks: int = 7,
    max_drops: int = 3,
    min_gain: float = 0.01,
    progress=None,
    profile=profile_calls,
    whole=whole_model,
) -> InModelReport:
    """Judge the winners of `results` (tuner.TaskResult) inside the model (Note [in-model
    confirmation]); write a verdict per winner to `db`; a winner not kept is taken back
    from its result (best = the default, `rejected` = the winner), and `in_model` = (untuned,
    tuned) seconds of its calls per model run is set on each judged result.
    `progress(result, record)` is called with each verdict. `profile(label, module, repeat)`
    and `whole(untuned, tuned, kept, blocks)` time the builds (profile_calls, whole_model:
    tests give scripted ones)."""
    from tessera.autotune.tasks import task_spans

    start = time.monotonic()
    report = InModelReport()
    by_task = {r.task: r for r in results}
    winners = {r.task: r.best for r in results if r.best is not None and r.best != r.default}
    if not winners:
        report.skipped = "no winner to confirm"
        return report
    spans = task_spans(mod, params, target)
    untuned = _module(mod, params, target, {}, {})  # inputs set below, once their shapes known
    inputs = random_inputs(untuned)
    if inputs is None:
        report.skipped = "the model's inputs have symbolic dims"
        log.warning("in-model confirmation skipped: %s", report.skipped)
        return report
    untuned.set_input(**inputs)
    tuned = _module(mod, params, target, winners, inputs)
    times = {t: ([], []) for t in winners}
    for _ in range(rounds):
        pu, pt = profile("untuned", untuned, repeat), profile("tuned", tuned, repeat)
        for t, (u, k) in times.items():
            u.append(task_time(pu, spans.get(t, set())))
            k.append(task_time(pt, spans.get(t, set())))
    for t, (u, k) in times.items():
        if not any(u):
            v = TaskVerdict(t, winners[t], 0.0, 0.0, 0.0, 0.0, False, "no profile row names it")
        else:
            gain, margin, kept = judge(u, k, min_gain)
            why = "" if kept else "not faster in the model beyond the noise"
            v = TaskVerdict(
                t, winners[t], float(np.median(u)), float(np.median(k)), gain, margin, kept, why
            )
        report.verdicts.append(v)
    kept = {v.task: v.config for v in report.verdicts if v.kept}
    gains = {v.task: v.gain for v in report.verdicts}
    while kept:
        model = tuned if kept == winners else _module(mod, params, target, kept, inputs)
        u, k = whole(untuned, model, kept, blocks)
        report.checks.append((len(kept), u, k))
        if k < u:
            break
        worst = min(kept, key=lambda t: gains[t])
        if len(report.dropped) >= max_drops:
            log.info("in-model check: the tuned model is still not faster: no winner is kept")
            report.dropped += list(kept)
            kept = {}
            break
        log.info("in-model check: the tuned model is not faster: %s's winner dropped", worst)
        report.dropped.append(worst)
        del kept[worst]
    report.kept = kept
    for v in report.verdicts:
        r = by_task[v.task]
        r.in_model = (v.untuned_seconds, v.tuned_seconds)
        keep = v.task in kept
        config = v.config if keep else r.default
        seconds = (v.tuned_seconds if keep else v.untuned_seconds) or None
        error = None if seconds else v.why
        record = Record.of(v.task, target, config, seconds, error, baseline=not keep, in_model=True)
        if db is not None:
            db.append(record)
        if not keep:
            r.rejected = r.best
            r.best, r.best_seconds = r.default, r.default_seconds
        if progress:
            progress(r, record)
    report.seconds = time.monotonic() - start
    log.info("%s", report.summary())
    return report
