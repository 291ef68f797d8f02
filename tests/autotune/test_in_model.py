"""The in-model confirmation (tessera/autotune/in_model.py): a winner measured faster alone but
slower in the model is not kept; the whole-model check drops winners, the smallest in-model
gain first, until the tuned model is faster, or keeps none; the verdicts are records marked
`in_model`, which decide what a build with the database takes and survive a reopening.
Scripted timings (no timing is asserted: the machine is shared), real builds and profiles."""

import dataclasses

import numpy as np

import tessera
from tessera import autotune
from tessera.autotune import Database, apply_history_best
from tessera.autotune.in_model import confirm_in_model, judge, random_inputs
from tessera.autotune.tasks import task_spans
from tessera.frontend.testing import run_ort
from tessera.runtime import GraphModule, cpu

HOST = tessera.Target("llvm")


class WinsAlone:
    """Stands in for the measurement worker: every task's default takes 1.0 s, every other
    config 0.5 s, every time (a winner that stays a winner when measured again)."""

    def measure(self, task, config, target, reference=None, model_context=None):
        from tessera.autotune.measure import MeasureResult

        if config == task.default(target):
            return MeasureResult(1.0, outputs=[np.zeros(1)] if reference is None else None)
        return MeasureResult(0.5)


def _tuned(tiny, tmp_path):
    """(mod, params, tasks by op, results, db): each task of the tiny model with a winner."""
    _, mod, params, _ = tiny
    tasks = autotune.extract_tasks(mod, params, HOST)
    db = Database(tmp_path / "tune.db")
    results = autotune.tune_tasks(tasks, HOST, db, 60, measurer=WinsAlone(), max_trials=1)
    assert all(r.best != r.default for r in results)
    return mod, params, {t.workload.op: t for t in tasks}, results, db


def scripted_profile(slower: dict):
    """A `profile` for confirm_in_model: the real rows of the build, each taking 1 ms, those of
    the tasks in `slower` ({task spans: factor}) that factor of it in the tuned build."""

    def profile(label, module, repeat):
        rows = module.profile(1)
        out = []
        for row in rows:
            factor = 1.0
            for spans, f in slower.items():
                if label == "tuned" and spans.intersection(row.nodes):
                    factor = f
            out.append(dataclasses.replace(row, seconds=1e-3 * factor))
        return out

    return profile


def test_task_spans_name_the_profile_rows_of_each_task(tiny):
    _, mod, params, _ = tiny
    spans = task_spans(mod, params, HOST)
    tasks = autotune.extract_tasks(mod, params, HOST)
    assert set(spans) == set(tasks)
    m = GraphModule(tessera.build(mod, target=HOST, params=params)["default"](cpu(0)))
    m.set_input(**random_inputs(m))
    rows = m.profile(1)
    for task in tasks:
        named = [row for row in rows if spans[task].intersection(row.nodes)]
        assert named, task
    conv = next(t for t in tasks if t.workload.op == "nn.conv2d")
    dense = next(t for t in tasks if t.workload.op == "nn.dense")
    assert spans[conv].isdisjoint(spans[dense])


def test_the_margin_is_the_noise_of_the_turns():
    # a steady gain of 10 on 100: kept; the same median gain amid a spread of 40: not
    assert judge([100] * 5, [90] * 5)[2]
    gain, margin, kept = judge([100] * 5, [50, 130, 90, 60, 120])
    assert gain == 10 and margin > gain and not kept
    # slower in the model: never kept, however steady
    assert not judge([100] * 5, [101] * 5)[2]
    # a gain below min_gain of the task's time is not worth a changed kernel
    assert not judge([100] * 5, [99.5] * 5, min_gain=0.01)[2]


def test_a_winner_alone_that_loses_in_the_model_is_not_kept(tiny, tmp_path):
    model, mod, params, feeds = tiny
    mod, params, tasks, results, db = _tuned(tiny, tmp_path)
    conv, dense = tasks["nn.conv2d"], tasks["nn.dense"]
    spans = task_spans(mod, params, HOST)
    winners = {r.task: r.best for r in results}
    # the conv's winner is twice as slow in the model, the dense's 20% faster
    profile = scripted_profile({frozenset(spans[conv]): 2.0, frozenset(spans[dense]): 0.8})
    report = confirm_in_model(
        mod, params, HOST, results, db, profile=profile, whole=lambda u, t, kept, b: (1.0, 0.9)
    )
    verdicts = {v.task: v for v in report.verdicts}
    assert not verdicts[conv].kept and verdicts[dense].kept
    assert verdicts[conv].tuned_seconds > verdicts[conv].untuned_seconds
    assert report.kept == {dense: winners[dense]} and report.dropped == []
    by_task = {r.task: r for r in results}
    assert by_task[conv].best == by_task[conv].default
    assert by_task[conv].rejected == winners[conv]
    assert by_task[dense].best == winners[dense] and by_task[dense].in_model is not None

    # the verdicts are records marked in_model, kept apart from the measurements; a reopened
    # database (a resumed run, a build) reads them: only the winner confirmed in the model
    back = Database(db.path)
    assert [r.task for r in back.verdicts] == [v.task for v in report.verdicts]
    assert all(r.in_model for r in back.verdicts) and not any(r.in_model for r in back.records)
    assert back.verdict(conv, HOST).baseline and back.verdict(conv, HOST).config == (
        by_task[conv].default
    )
    # alone, the conv's winner is still the fastest record: the verdict overrides it
    assert back.best(conv, HOST).config == winners[conv]
    assert back.best_configs(HOST) == {dense: winners[dense]}
    # a task no verdict judged (another model's in a shared database) is read by its
    # measurements: verdicts decide only the tasks they name
    back.verdicts = [v for v in back.verdicts if v.task != dense]
    assert back.best_configs(HOST) == {dense: winners[dense]}
    back.verdicts = [v for v in back.verdicts if v.task != conv]
    assert back.best_configs(HOST) == {conv: winners[conv], dense: winners[dense]}
    back = Database(db.path)
    with apply_history_best(db.path, HOST) as scope:
        lib = tessera.build(mod, target=HOST, params=params)
    assert dense in scope.used and conv in scope.used  # the conv: its default, as tuned
    m = GraphModule(lib["default"](cpu(0)))
    m.set_input(**feeds)
    m.run()
    np.testing.assert_allclose(
        m.get_output(0).numpy(), run_ort(model, feeds)[0], rtol=1e-4, atol=1e-5
    )


def test_the_whole_model_check_drops_the_smallest_gain_first_then_keeps_none(tiny, tmp_path):
    mod, params, tasks, results, db = _tuned(tiny, tmp_path)
    conv, dense = tasks["nn.conv2d"], tasks["nn.dense"]
    spans = task_spans(mod, params, HOST)
    winners = {r.task: r.best for r in results}
    # both win in their calls, the dense by less; the model is faster only without the dense's
    profile = scripted_profile({frozenset(spans[conv]): 0.5, frozenset(spans[dense]): 0.9})
    seen = []

    def whole(untuned, tuned, kept, blocks):
        seen.append(set(kept))
        return (1.0, 1.1) if dense in kept else (1.0, 0.9)

    report = confirm_in_model(mod, params, HOST, results, db, profile=profile, whole=whole)
    assert seen == [{conv, dense}, {conv}]
    assert report.dropped == [dense] and report.kept == {conv: winners[conv]}
    assert Database(db.path).best_configs(HOST) == {conv: winners[conv]}
    assert "1 dropped" in report.summary()

    # never faster: after max_drops, no winner is kept; the database gives the defaults
    mod, params, tasks, results, db = _tuned(tiny, tmp_path / "again")
    report = confirm_in_model(
        mod,
        params,
        HOST,
        results,
        db,
        profile=profile,
        whole=lambda u, t, k, b: (1.0, 1.0),
        max_drops=1,
    )
    assert report.kept == {} and set(report.dropped) == {conv, dense}
    assert all(r.best == r.default for r in results)
    assert Database(db.path).best_configs(HOST) == {}


def test_tune_ends_with_the_in_model_confirmation(tiny, tmp_path):
    """Real measurements and timings: which winners survive is the machine's to say; that
    the stage ran, what it recorded and that the build agrees with ORT are the test's."""
    model, mod, params, feeds = tiny
    path = tmp_path / "tune.db"
    results = autotune.tune(mod, params, HOST, db=path, budget=60, max_trials=2, timeout=120)
    report = results.in_model
    assert report is not None and report.seconds >= 0
    db = Database(path)
    winners = [r for r in results if r.rejected is not None or r.best != r.default]
    assert len(report.verdicts) == len(winners) == len(db.verdicts)
    if not winners:
        assert report.skipped == "no winner to confirm"
    assert db.best_configs(HOST) == report.kept
    assert all(r.best == report.kept.get(r.task, r.default) for r in results)
    with apply_history_best(path, HOST):
        lib = tessera.build(mod, target=HOST, params=params)
    m = GraphModule(lib["default"](cpu(0)))
    m.set_input(**feeds)
    m.run()
    np.testing.assert_allclose(
        m.get_output(0).numpy(), run_ort(model, feeds)[0], rtol=1e-4, atol=1e-5
    )


def test_a_failing_confirmation_writes_no_verdict_and_loses_no_measurement(
    tiny, tmp_path, monkeypatch
):
    from tessera.autotune import in_model

    def broken(*args, **kwargs):
        raise RuntimeError("a model with control flow")

    monkeypatch.setattr(in_model, "confirm_in_model", broken)
    _, mod, params, _ = tiny
    path = tmp_path / "tune.db"
    results = autotune.tune(mod, params, HOST, db=path, budget=30, max_trials=1, timeout=120)
    assert results.in_model.skipped.startswith("failed: RuntimeError")
    db = Database(path)
    assert db.verdicts == [] and len(db.records) >= len(results)
