"""`tessera bench`: compile a model and measure its latency, next to ONNX Runtime in the same run.

    tessera bench                                  # the built-in ResNet-50 vs ONNX Runtime
    tessera bench model.onnx --threads 2 --repeat 50

After warm-up the two runtimes run alternately (tessera, ORT, tessera, ORT, ...), so a change
of machine load or clock hits both alike; each gets the same inputs and the same number of
threads. Reported: latency percentiles p50/p90/p99, mean, throughput, the ratio tessera/ORT,
and how far the outputs agree.
"""

from __future__ import annotations

import time

import click
import numpy as np

from tessera.cli.build import compile_model, print_summary, set_inputs
from tessera.cli.common import DEFAULT_OPT_LEVEL, ModelError, stdout_console
from tessera.cli.options import input_shape_option, quiet, threads_option, verbosity_options

PERCENTILES = (50, 90, 99)


def _ort_session(onnx_model, threads: int):
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3  # its warnings about unused initializers are noise here
    try:
        return ort.InferenceSession(
            onnx_model.SerializeToString(), opts, providers=["CPUExecutionProvider"]
        )
    except Exception as e:  # ORT rejects some models tessera takes: bench tessera alone
        click.echo(f"warning: ONNX Runtime cannot load the model ({e}); not compared", err=True)
        return None


def _measure(runners: dict, repeat: int, warmup: int, duration: float) -> dict[str, np.ndarray]:
    """Alternate the runners; `repeat` runs each (or as many as fit in `duration` seconds, at
    least 3, when repeat is None). Returns the seconds of each run by runner name."""
    for _ in range(warmup):
        for fn in runners.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in runners}
    start = time.perf_counter()
    while True:
        for name, fn in runners.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
        n = len(next(iter(times.values())))
        if repeat is not None:
            if n >= repeat:
                break
        elif n >= 3 and time.perf_counter() - start > duration:
            break
    return {name: np.array(t) for name, t in times.items()}


def _stats(t: np.ndarray) -> dict[str, float]:
    out = {f"p{p}": float(np.percentile(t, p)) for p in PERCENTILES}
    out["mean"] = float(t.mean())
    out["throughput"] = 1.0 / float(t.mean())
    return out


def _agreement(got: list[np.ndarray], expected: list[np.ndarray]) -> str:
    worst_abs = worst_rel = 0.0
    for g, e in zip(got, expected, strict=True):
        if g.shape != e.shape:
            return f"shapes differ: {g.shape} vs {e.shape}"
        diff = np.abs(g.astype(np.float64) - e.astype(np.float64))
        worst_abs = max(worst_abs, float(diff.max(initial=0)))
        scale = float(np.abs(e).max(initial=0)) or 1.0
        worst_rel = max(worst_rel, float(diff.max(initial=0)) / scale)
    return f"max abs diff {worst_abs:.3g}, relative to max |ORT| {worst_rel:.3g}"


def _print_table(results: dict[str, dict], title: str) -> None:
    from rich.table import Table

    names = list(results)
    table = Table(title=title, title_justify="left")
    table.add_column("")
    for name in names:
        table.add_column(name, justify="right")
    if len(names) == 2:
        table.add_column(f"{names[0]}/{names[1]}", justify="right")
    for key in [f"p{p}" for p in PERCENTILES] + ["mean", "throughput"]:
        label = "throughput (inf/s)" if key == "throughput" else f"{key} (ms)"
        scale = 1.0 if key == "throughput" else 1e3
        row = [label] + [f"{results[n][key] * scale:.2f}" for n in names]
        if len(names) == 2:
            a, b = results[names[0]][key], results[names[1]][key]
            row.append(f"{a / b:.2f}" if b else "-")
        table.add_row(*row)
    stdout_console().print(table)


@click.command()
@click.argument("model", required=False, type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--compare",
    type=click.Choice(["auto", "onnxruntime", "none"]),
    default="auto",
    show_default=True,
    help="Run ONNX Runtime side by side (auto: when it is installed).",
)
@threads_option
@click.option("--repeat", type=click.IntRange(min=1), help="Measured runs (default: ~10 s).")
@click.option("--warmup", type=click.IntRange(min=0), default=2, show_default=True)
@click.option("--duration", type=float, default=10.0, show_default=True, help="Seconds to measure.")
@click.option("--target", type=click.Choice(["llvm", "c"]), default="llvm", show_default=True)
@input_shape_option
@click.option(
    "--opt-level", type=click.IntRange(0, 3), default=DEFAULT_OPT_LEVEL, show_default=True
)
@verbosity_options
def bench(model, compare, threads, repeat, warmup, duration, target, input_shape, opt_level):
    """Compile MODEL (default: the built-in ResNet-50) and measure its latency, side by side
    with ONNX Runtime."""
    from tessera.models import random_array
    from tessera.runtime import GraphModule, cpu, num_threads, set_num_threads

    threads = threads or num_threads()
    set_num_threads(threads)
    lib, onnx_model, summary = compile_model(model, None, target, input_shape, opt_level, None)
    if not quiet():
        print_summary(summary)
    module = GraphModule(lib["default"](cpu(0)))
    shapes, dtypes = module.get_input_info()
    rng = np.random.default_rng(0)
    feeds = {n: random_array(shapes[n], dtypes[n], rng) for n in shapes}
    set_inputs(module, feeds)
    runners = {"tessera": module.run}
    session = None
    if compare != "none":
        session = _ort_session(onnx_model, threads)
        if session is None and compare == "onnxruntime":
            raise ModelError("--compare onnxruntime: onnxruntime is not installed or failed")
    if session is not None:
        runners["onnxruntime"] = lambda: session.run(None, feeds)
    times = _measure(runners, repeat, warmup, duration)
    n = len(times["tessera"])
    title = f"latency, batch as given, {threads} thread(s), {n} runs each after {warmup} warm-up"
    _print_table({name: _stats(t) for name, t in times.items()}, title)
    if session is not None:
        got = [module.get_output(k).numpy() for k in range(module.get_num_outputs())]
        click.echo("outputs vs ONNX Runtime: " + _agreement(got, session.run(None, feeds)))
