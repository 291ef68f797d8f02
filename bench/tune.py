"""Benchmark of issue 11: each model tuned within a budget, then untuned, tuned and ONNX Runtime
measured in turns in the same process, batch 1, float32.

    .venv/bin/python bench/tune.py [--models resnet50,mobilenet_v2] [--budget 600] [--threads 2]
                                   [--target "llvm -mcpu=haswell"] [--db-dir tune-dbs]
                                   [--markdown docs/tune_table.md]

Models: any of bench/zoo.py's (`--models`); by default issue 11's suite: ResNet-50, MobileNetV2,
ShuffleNet, BERT-base and three real pretrained models (bench/fetch_zoo.py, fetched once).
Per model: `tessera.autotune.tune` under opt level 3 (the tessera command's), its records in
DB_DIR/<model>.db (a rerun resumes them, so `--budget 0` measures an earlier tuning again); the
untuned build (defaults) and the tuned build (the database via PassContext config
"tuning.database") are then timed with ONNX Runtime in turns
(`tessera.cli.bench.measure_in_blocks`: each as it runs alone, a change of load hits all three).
Reported: tuning wall time, candidates (configs besides the defaults) measured per minute,
median latencies, tuned/untuned and tuned/ORT, agreement of the
tuned build with ORT, the issue's bars (tuned never slower than untuned; geometric mean
tuned/untuned <= 0.85, <= 0.75 for the AVX2 target), an A/A ratio (a second untuned build
timed in the same turns against the first: how far this run's noise alone moves a ratio), and
where the gains come from (the tasks whose config changed, with the time of their calls in
the model by the in-model confirmation, and what that stage kept and took).
Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from models import geometric_mean, ort_session, relative_error  # noqa: E402
from zoo import SUITE  # noqa: E402  (the light models, MobileNetV2, BERT-base, pretrained ones)

from tessera.cli.bench import BLOCK_RUNS, measure_in_blocks  # noqa: E402

OPT_LEVEL = 3
DEFAULT = (
    "resnet50",
    "mobilenet_v2",
    "shufflenet",
    "bert_base",
    "ppocr_rec",
    "mtcnn_onet",
    "magika",
)


@dataclass
class Row:
    name: str
    tune_s: float | None = None
    tasks: int = 0
    trials: int = 0
    failed: int = 0
    candidates: int = 0  # configs other than the defaults measured by this run
    times: dict = field(default_factory=dict)  # runner -> seconds per timed run
    rel_err: float | None = None
    notes: list = field(default_factory=list)
    gains: list = field(default_factory=list)  # (ms saved per run, line) of the tasks kept
    in_model: str = ""  # what the in-model confirmation did (InModelReport.summary)
    in_model_s: float = 0.0  # its wall time, part of tune_s

    def median(self, runner: str) -> float | None:
        t = self.times.get(runner)
        return float(np.median(t)) if t is not None and len(t) else None

    def ratio(self, a: str, b: str) -> float | None:
        x, y = self.median(a), self.median(b)
        return x / y if x and y else None


def build(mod, params, target, db=None):
    import tessera
    from tessera.transform import PassContext

    # untuned: the defaults alone; tuned: the database, then the shipped configs (docs/tuning.md)
    config = {"tuning.database": str(db)} if db else {"tuning.pretuned": False}
    with PassContext(opt_level=OPT_LEVEL, config=config):
        return tessera.build(mod, target=target, params=params)


def run_model(name: str, args) -> Row:
    from tessera import autotune
    from tessera.frontend import from_onnx
    from tessera.runtime import GraphModule, cpu
    from tessera.transform import PassContext

    row = Row(name)
    case = SUITE[name]
    model = case.build()
    feeds = case.feeds(model, 0)
    mod, params = from_onnx(model)
    db = args.db_dir / f"{name}.db"
    start, began = time.perf_counter(), time.time()
    with PassContext(opt_level=OPT_LEVEL):
        results = autotune.tune(
            mod, params, args.target, db, args.budget, args.timeout, workers=args.workers
        )
    row.tune_s = time.perf_counter() - start
    row.tasks = len(results)
    row.trials = sum(r.trials for r in results)
    row.failed = sum(r.failed for r in results)
    row.candidates = sum(
        1
        for rec in autotune.Database(db).records
        if rec.timestamp >= began and not rec.baseline and not rec.again
    )
    row.gains = task_gains(results)
    if results.in_model is not None:
        row.in_model = results.in_model.summary()
        row.in_model_s = results.in_model.seconds
    libs = {
        "untuned": build(mod, params, args.target),
        "tuned": build(mod, params, args.target, db),
    }
    if libs["tuned"].get_source() == libs["untuned"].get_source():
        # no config kept: tuned/untuned is then one more A/A ratio, the noise of these turns
        row.notes.append("tuned build = untuned build (same code: no config kept)")
    modules = {
        **{k: GraphModule(lib["default"](cpu(0))) for k, lib in libs.items()},
        # the same untuned build again: its ratio to the first is this run's noise (A/A)
        "untuned again": GraphModule(build(mod, params, args.target)["default"](cpu(0))),
    }
    runners = {}
    for runner, m in modules.items():
        m.set_input(**feeds)
        runners[runner] = m.run
    session = ort_session(model, args.threads)
    runners["ort"] = lambda: session.run(None, feeds)
    block, repeat = turn_sizes(runners["untuned"], args.repeat)
    times, _ = measure_in_blocks(runners, repeat, 3, args.max_seconds, block=block)
    row.times = {k: list(v) for k, v in times.items()}
    tuned = modules["tuned"]
    got = [tuned.get_output(k).numpy() for k in range(tuned.get_num_outputs())]
    row.rel_err = relative_error(got, session.run(None, feeds))
    return row


# a turn's timed runs fill at least this many seconds: a model of 0.4 ms in turns of 5 runs,
# each after a wait for quiet threads, measures mostly each turn's cold start (mtcnn_onet read
# 1.17-1.21 tuned/untuned that way, 0.945 in turns of 50 runs)
TURN_SECONDS = 0.05


def turn_sizes(run, repeat: int) -> tuple[int, int]:
    """(timed runs per turn, timed runs in all) for a model whose one run is `run`: turns of
    BLOCK_RUNS, or as many runs as fill TURN_SECONDS; at least `repeat` runs and 10 turns."""
    run()  # warm
    t0 = time.perf_counter()
    run()
    once = time.perf_counter() - t0
    block = max(BLOCK_RUNS, int(TURN_SECONDS / max(once, 1e-6)))
    return block, max(repeat, 10 * block)


def task_gains(results) -> list:
    """(ms saved per run of the model, a line saying what changed) of each task whose tuned
    config beat its default as measured again in turns and kept its winner in the model (its
    calls' time in the model, the in-model confirmation's, when it ran), the largest first."""
    gains = []
    for r in results:
        if r.best is None or r.best == r.default or not r.default_seconds:
            continue
        saved = (r.default_seconds - r.best_seconds) * r.count * 1e3
        changed = {k: v for k, v in r.best.items() if r.default.get(k) != v}
        line = (
            f"{r.task} x{r.count}: {r.default_seconds * 1e3:.3f} -> {r.best_seconds * 1e3:.3f} ms"
            f" ({r.default.impl} -> {changed})"
        )
        if r.in_model:
            saved = (r.in_model[0] - r.in_model[1]) * 1e3
            line += f"; in the model {r.in_model[0] * 1e3:.3f} -> {r.in_model[1] * 1e3:.3f} ms"
        gains.append((saved, line))
    return sorted(gains, key=lambda g: -g[0])


def _ms(s: float | None) -> str:
    return "-" if s is None else f"{s * 1e3:.2f}"


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def report(rows: list[Row], args) -> str:
    lines = [
        f"tessera tune: budget {args.budget:.0f} s per model, {args.threads} threads, "
        f"target {args.target!r}",
        "",
        "| model | tune (s) | tasks | trials (failed) | candidates/min | untuned ms | tuned ms "
        "| ORT ms | tuned/untuned | A/A | tuned/ORT | rel err | notes |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.name} | {r.tune_s or 0:.0f} | {r.tasks} | {r.trials} ({r.failed}) "
            f"| {60 * r.candidates / r.tune_s if r.tune_s else 0:.1f} "
            f"| {_ms(r.median('untuned'))} | {_ms(r.median('tuned'))} | {_ms(r.median('ort'))} "
            f"| {_x(r.ratio('tuned', 'untuned'))} | {_x(r.ratio('untuned again', 'untuned'))} "
            f"| {_x(r.ratio('tuned', 'ort'))} "
            f"| {r.rel_err if r.rel_err is None else f'{r.rel_err:.1e}'} | {'; '.join(r.notes)} |"
        )
    ratios = [r.ratio("tuned", "untuned") for r in rows if r.ratio("tuned", "untuned")]
    gm = geometric_mean(ratios)
    aa = [r.ratio("untuned again", "untuned") for r in rows if r.ratio("untuned again", "untuned")]
    avx2 = "haswell" in args.target
    bar = 0.75 if avx2 else 0.85
    lines += [
        "",
        f"- tuned never slower than untuned: {'yes' if all(x <= 1.0 for x in ratios) else 'NO'}"
        f" (worst {max(ratios) if ratios else float('nan'):.3f})",
        f"- geometric mean tuned/untuned: {_x(gm)} (bar <= {bar}); A/A (the untuned build "
        f"against itself, the noise of these turns): {_x(geometric_mean(aa))}",
        "",
        "Where the gains come from (tasks whose config beat the default when measured again "
        "and in the model, ms saved per run in the model, the largest three per model):",
    ]
    for r in rows:
        total = sum(g for g, _ in r.gains)
        lines.append(f"- {r.name}: {len(r.gains)} tasks changed, {total:.2f} ms per run")
        if r.in_model:
            lines.append(f"  - {r.in_model} ({r.in_model_s / (r.tune_s or 1):.0%} of tuning)")
        lines += [f"  - {saved:.2f} ms: {line}" for saved, line in r.gains[:3]]
    return "\n".join(lines)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(DEFAULT), help="from: " + ", ".join(SUITE))
    p.add_argument("--workers", type=int, default=2, help="build processes (0: none)")
    p.add_argument("--budget", type=float, default=600.0, help="tuning seconds per model")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per candidate")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--target", default="llvm")
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--max-seconds", type=float, default=60.0, help="measuring budget per model")
    p.add_argument("--db-dir", type=Path, default=Path("tune-dbs"))
    p.add_argument("--markdown", type=Path)
    return parse_models(p, argv)


def parse_models(p: argparse.ArgumentParser, argv):
    """The arguments, `--models` split into names of bench/zoo.py and checked, `--db-dir` made."""
    args = p.parse_args(argv)
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in args.models if m not in SUITE]
    if unknown:
        p.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(SUITE)}")
    args.db_dir.mkdir(parents=True, exist_ok=True)
    return args


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    # the measurement workers read the thread count from the environment they inherit
    os.environ["TESSERA_NUM_THREADS"] = str(args.threads)
    from tessera.runtime import set_num_threads

    set_num_threads(args.threads)
    rows = []
    for name in args.models:
        try:
            rows.append(run_model(name, args))
        except Exception as e:  # one model's failure is its row's note; the suite goes on
            rows.append(Row(name, notes=[f"{type(e).__name__}: {e}"]))
        print(f"{name}: done", file=sys.stderr, flush=True)
        gc.collect()
    text = report(rows, args)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
