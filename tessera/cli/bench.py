"""`tessera bench`: compile a model and measure its latency, next to ONNX Runtime in the same run.

    tessera bench                                  # the built-in ResNet-50 vs ONNX Runtime
    tessera bench model.onnx --threads 2 --repeat 50

The two runtimes take turns (Note [fair turns]), so a change of machine load or clock hits both
alike, and each is timed as it runs alone; each gets the same inputs and the same number of
threads. Reported: latency percentiles p50/p90/p99, mean, throughput, the ratio tessera/ORT,
how long each turn waited for the other's threads to go idle, and how far the outputs agree.

Note [fair turns]
A runtime's thread pool keeps working after a run returns: ONNX Runtime's intra-op threads spin
(its default `session.intra_op.allow_spinning=1`) for ~30 ms of CPU, tessera's for at most
0.2 ms. Runs that alternate one by one time each engine next to the other's spinning threads:
on 2 cores tessera's worker found its core taken and tessera ran at its 1-thread speed (issue
4: MobileNetV2 2.3 ms alone, 4.7 ms alternating; `bench/alternation.py` measures it). So the
engines take turns of a few runs each, and a turn starts only once every other thread of the
process has been idle for two scheduler ticks, read from /proc/self/task/*/schedstat (measured,
not a guessed sleep: a spin lasts longer on a loaded machine). The first run of a turn wakes the
engine's parked threads and is not timed: the timed runs are back to back, as a user's loop.
"""

from __future__ import annotations

import os
import threading
import time

import click
import numpy as np

from tessera.cli.build import compile_model, pretuned_option, print_summary, set_inputs
from tessera.cli.common import DEFAULT_OPT_LEVEL, ModelError, stdout_console
from tessera.cli.options import (
    input_shape_option,
    opt_level_option,
    quiet,
    target_option,
    threads_option,
    verbosity_options,
)

PERCENTILES = (50, 90, 99)
# Note [fair turns]: a turn starts once every other thread of the process has been idle for
# QUIET_STEPS steps of QUIET_STEP_S (at most QUIET_LIMIT_S), then runs BLOCK_RUNS times.
QUIET_STEP_S = 0.004  # a scheduler tick at HZ=250: a starved spinner still shows in two steps
QUIET_STEPS = 2
QUIET_LIMIT_S = 1.0  # a thread that never parks (another library's) must not hang the bench
QUIET_FALLBACK_S = 0.1  # no /proc: longer than ORT's spin on a quiet machine (~35 ms measured)
BLOCK_RUNS = 5


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


def thread_run_ns() -> dict[int, int] | None:
    """Run time (ns) of each thread of this process but the calling one, from
    /proc/self/task/*/schedstat; None where there is no such file (not Linux)."""
    me = threading.get_native_id()
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return None
    out = {}
    for tid in tids:
        if int(tid) == me:
            continue
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                out[int(tid)] = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # the thread ended meanwhile
    if not out and len(tids) > 1 and not os.path.exists(f"/proc/self/task/{tids[0]}/schedstat"):
        return None  # a kernel without schedstat: unknown, not quiet
    return out


def wait_until_quiet(step: float = QUIET_STEP_S, limit: float = QUIET_LIMIT_S) -> float:
    """Sleep until no other thread of this process has run for QUIET_STEPS steps of `step`
    seconds (a thread counts as running if it ran a tenth of a step), at most `limit` seconds;
    returns the seconds waited. An engine's pool keeps spinning after a run (ONNX Runtime's
    intra-op threads spin ~30 ms of CPU by default): timed next to that, the other engine finds
    a core taken. Without /proc it sleeps QUIET_FALLBACK_S."""
    start = time.perf_counter()
    before = thread_run_ns()
    if before is None:
        time.sleep(min(QUIET_FALLBACK_S, limit))
        return time.perf_counter() - start
    quiet_steps = 0
    while quiet_steps < QUIET_STEPS and time.perf_counter() - start < limit:
        time.sleep(step)
        now = thread_run_ns() or {}
        busiest = max((ns - before.get(tid, 0) for tid, ns in now.items()), default=0)
        quiet_steps = quiet_steps + 1 if busiest < step * 1e8 else 0  # a tenth of the step, ns
        before = now
    return time.perf_counter() - start


def measure_in_blocks(
    runners: dict,
    repeat: int | None,
    warmup: int,
    duration: float | None,
    block: int = BLOCK_RUNS,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Measure each runner as it runs alone, in turns (Note [fair turns]). Each turn: wait until
    the other runner's threads are quiet (`wait_until_quiet`), one untimed run, then up to
    `block` timed runs back to back. Turns go round until each runner has `repeat` timed runs,
    or `duration` seconds have passed and each has at least 3 (None: no such limit). Returns
    the seconds of each timed run and of each wait before a turn, by runner name."""
    if block < 1:
        raise ValueError(f"measure_in_blocks: block must be >= 1, got {block}")
    if repeat is None and duration is None:
        raise ValueError("measure_in_blocks: give repeat or duration")
    for fn in runners.values():
        wait_until_quiet()
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {name: [] for name in runners}
    waits: dict[str, list[float]] = {name: [] for name in runners}
    start = time.perf_counter()
    while True:
        for name, fn in runners.items():
            left = block if repeat is None else min(block, repeat - len(times[name]))
            waits[name].append(wait_until_quiet())
            fn()  # wakes the runner's parked threads: the cold start is not its speed alone
            for _ in range(left):
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
        n = min(len(t) for t in times.values())
        if repeat is not None and n >= repeat:
            break
        if duration is not None and n >= 3 and time.perf_counter() - start > duration:
            break
    as_arrays = lambda d: {k: np.array(v) for k, v in d.items()}  # noqa: E731
    return as_arrays(times), as_arrays(waits)


def _waits(waits: dict[str, np.ndarray]) -> str:
    parts = [
        f"before {name}, median {np.median(w) * 1e3:.0f} ms (max {w.max() * 1e3:.0f})"
        for name, w in waits.items()
        if len(w)
    ]
    return "; ".join(parts)


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
    stdout_console().print(title, highlight=False, soft_wrap=True)  # one line, not wrapped
    table = Table()
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
@click.option(
    "--warmup",
    type=click.IntRange(min=0),
    default=2,
    show_default=True,
    help="Untimed runs of each engine first.",
)
@click.option("--duration", type=float, default=10.0, show_default=True, help="Seconds to measure.")
@click.option(
    "--block",
    type=click.IntRange(min=1),
    default=BLOCK_RUNS,
    show_default=True,
    help="Timed runs per turn (each turn waits for the other engine's threads to go idle).",
)
@target_option
@input_shape_option
@opt_level_option(DEFAULT_OPT_LEVEL)
@click.option(
    "--db", type=click.Path(exists=True, dir_okay=False), help="Tuning records (tessera tune)."
)
@pretuned_option
@verbosity_options
def bench(
    model,
    compare,
    threads,
    repeat,
    warmup,
    duration,
    block,
    target,
    input_shape,
    opt_level,
    db,
    no_pretuned,
):
    """Compile MODEL (default: the built-in ResNet-50) and measure its latency, side by side
    with ONNX Runtime."""
    from tessera.models import random_array
    from tessera.runtime import GraphModule, cpu, num_threads, set_num_threads

    threads = threads or num_threads()
    set_num_threads(threads)
    lib, onnx_model, summary = compile_model(
        model, None, target, input_shape, opt_level, None, db, pretuned=not no_pretuned
    )
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
    times, waits = measure_in_blocks(runners, repeat, warmup, None if repeat else duration, block)
    n = len(times["tessera"])
    title = (
        f"latency, batch as given, {threads} thread(s), {n} runs each after {warmup} warm-up, "
        f"in turns of {block}"
    )
    _print_table({name: _stats(t) for name, t in times.items()}, title)
    if len(runners) > 1:
        click.echo(
            "waited for the other engine's threads to go idle before each turn: " + _waits(waits)
        )
    if session is not None:
        got = [module.get_output(k).numpy() for k in range(module.get_num_outputs())]
        click.echo("outputs vs ONNX Runtime: " + _agreement(got, session.run(None, feeds)))
