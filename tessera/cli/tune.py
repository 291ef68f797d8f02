"""`tessera tune`: tune a model's kernels within a time budget, into a records database.

    tessera tune model.onnx --budget 10m --db tune.db
    tessera tune model.onnx --db tune.db --cluster tcp://host:8786 --report tune.html
    tessera compile model.onnx --db tune.db          # build with the best records

Shows a live line per measurement (task, trials, best time, estimated model gain, time left)
and ends with a table: each task's calls, default and tuned kernel time, speedup, trials and
failures. Rerunning with the same database resumes: measured configs are not measured again.
"""

from __future__ import annotations

import re
import time

import click

from tessera.cli.common import (
    DEFAULT_OPT_LEVEL,
    import_model,
    parse_input_shapes,
    read_model,
    stdout_console,
)
from tessera.cli.options import input_shape_option, opt_level_option, quiet, verbosity_options

_UNITS = {"s": 1, "m": 60, "h": 3600}


def parse_budget(text: str) -> float:
    """'10m' -> 600.0; '90s', '1h', '1m30s' and plain seconds ('45') too."""
    text = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    parts = re.findall(r"(\d+(?:\.\d+)?)([smh])", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise click.BadParameter(f"{text!r} is not a duration such as 10m, 90s or 1h30m")
    return sum(float(n) * _UNITS[u] for n, u in parts)


def _us(seconds) -> str:
    return "-" if seconds is None else f"{seconds * 1e6:,.1f}"


def model_gain(results) -> float | None:
    """Estimated model speedup from the tuned kernels: sum(calls x default) / sum(calls x best)."""
    done = [r for r in results if r.default_seconds and r.best_seconds]
    if not done:
        return None
    before = sum(r.count * r.default_seconds for r in done)
    return before / sum(r.count * r.best_seconds for r in done)


class _Display:
    """The live progress: a bar over the budget, the current task and the best so far."""

    def __init__(self, budget: float, progress):
        self.start = time.monotonic()
        self.budget = budget
        self.progress = progress
        self.bar = progress.add_task("tuning", total=budget) if progress else None
        self.results: dict = {}
        self.measurements = 0

    def __call__(self, result, record) -> None:
        self.results[result.task] = result
        self.measurements += record is not None
        if self.progress is None:
            return
        elapsed = time.monotonic() - self.start
        gain = model_gain(self.results.values())
        name = str(result.task)
        name = name if len(name) <= 60 else name[:57] + "..."
        if record is not None and record.in_model:  # the last stage: a verdict per winner
            verdict = "kept" if not record.baseline else "default kept"
            what = f"in-model check ({elapsed:.0f}s in): {name}  {verdict}"
        else:
            what = f"{name}  trials {result.trials}  best {_us(result.best_seconds)} us"
        self.progress.update(
            self.bar,
            completed=min(elapsed, self.budget),
            description=(
                f"{what}  model x{gain or 1:.2f}  left {max(0, self.budget - elapsed):.0f}s"
            ),
        )


def print_table(results, console) -> None:
    from rich.table import Table

    table = Table(title="tuned kernels (times of the kernel alone, microseconds)")
    columns = ("task", "calls", "default", "tuned", "speedup", "in model", "trials", "failed")
    for col in (*columns, "config"):
        table.add_column(col, justify="left" if col in ("task", "config") else "right")
    for r in results:
        speedup = f"x{r.speedup:.2f}" if r.speedup else "-"
        config = "default" if r.best == r.default else str(r.best)
        if r.rejected is not None:
            config = f"default (lost in the model: {r.rejected})"
        # the task's calls per model run, default -> winner (the in-model confirmation's)
        in_model = "-" if r.in_model is None else " -> ".join(_us(t) for t in r.in_model)
        table.add_row(
            str(r.task),
            str(r.count),
            _us(r.default_seconds),
            _us(r.best_seconds),
            speedup,
            in_model,
            str(r.trials),
            str(r.failed),
            config,
        )
    console.print(table)
    gain = model_gain(results)
    if gain is not None:
        console.print(f"estimated model speedup from tuned kernels: x{gain:.2f}")
    report = getattr(results, "in_model", None)
    if report is not None:
        console.print(report.summary())


@click.command()
@click.argument("model", type=click.Path(exists=True, dir_okay=False))
@click.option("--budget", default="10m", show_default=True, help="Time to spend, e.g. 90s, 10m.")
@click.option(
    "--db",
    "db",
    default="tune.db",
    show_default=True,
    type=click.Path(dir_okay=False),
    help="Tuning records: appended as measurements arrive; a rerun resumes from them.",
)
@click.option("--target", default="llvm", show_default=True, help="Target string.")
@input_shape_option
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=60.0,
    show_default=True,
    help="Seconds one candidate may take to build and run before it counts as hung.",
)
@click.option(
    "--trials", type=click.IntRange(min=1), default=None, help="At most this many per task."
)
@click.option(
    "--seed", type=int, default=0, show_default=True, help="Seed of the search's random choices."
)
@click.option(
    "--workers",
    type=click.IntRange(min=0),
    default=None,
    help="Processes building candidates in parallel (default 2, or fewer cores; 0: none).",
)
@click.option(
    "--cluster",
    default=None,
    metavar="ADDRESS",
    help="Measure on a Dask cluster, e.g. tcp://host:8786 (default: a local worker process).",
)
@click.option(
    "--report",
    "report_path",
    default=None,
    type=click.Path(dir_okay=False),
    help="Write an HTML report (best-so-far curves per task, the final table) to this file.",
)
@click.option(
    "--in-model/--no-in-model",
    default=True,
    show_default=True,
    help="End by confirming the winners inside the whole model (a tenth of the budget); "
    "without it every measured winner is kept.",
)
@opt_level_option(DEFAULT_OPT_LEVEL)
@verbosity_options
def tune(
    model,
    budget,
    db,
    target,
    input_shape,
    timeout,
    trials,
    seed,
    workers,
    cluster,
    report_path,
    in_model,
    opt_level,
):
    """Tune MODEL's kernels within BUDGET; every measurement goes to the database DB.

    The default config of every task is measured first and kept unless a candidate beats it.
    Build with the records: `PassContext(config={"tuning.database": DB})` or
    `tessera.autotune.apply_history_best(DB)`.
    """
    import functools

    from tessera.autotune import tune as tune_model
    from tessera.transform import PassContext

    run_tune = functools.partial(tune_model, workers=workers, cluster=cluster, in_model=in_model)

    seconds = parse_budget(budget)
    onnx_model, _ = read_model(model)
    mod, params = import_model(onnx_model, parse_input_shapes(input_shape))
    console = stdout_console()
    # the graph passes decide which tasks there are: tune under the opt level compile uses
    with PassContext(opt_level=opt_level):
        results = _run(run_tune, mod, params, target, db, seconds, timeout, trials, seed, console)
    print_table(results, console)
    console.print(f"records: {db}")
    if report_path:
        from tessera.autotune import report

        report(db, report_path, counts={r.task: r.count for r in results})
        console.print(f"report: {report_path}")


def _run(run_tune, mod, params, target, db, seconds, timeout, trials, seed, console):
    from rich.progress import BarColumn, Progress, TextColumn

    if quiet():
        results = run_tune(mod, params, target, db, seconds, timeout, trials, seed)
    else:
        columns = (TextColumn("{task.description}"), BarColumn())
        with Progress(*columns, console=console, transient=True) as progress:
            display = _Display(seconds, progress)
            results = run_tune(mod, params, target, db, seconds, timeout, trials, seed, display)
    return results
