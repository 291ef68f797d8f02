"""Benchmark: the model suite of issue 4, each model compiled by tessera and run next to ONNX
Runtime in the same process, batch 1, float32.

    .venv/bin/python bench/models.py [--models resnet50,bert_base] [--threads 2] [--repeat 20]
                                     [--markdown docs/perf_table.md]

Models: ResNet-50, DenseNet-121, Inception-v2, SqueezeNet (the onnx package's light models with
random weights, `tessera.models.light_model`), MobileNetV2 and a BERT-base encoder (built by
`model_zoo.py`). For each model:

- compile time, cold: a fresh process with a fresh, empty `TESSERA_CACHE_DIR` (model import and
  `tessera.build`; Python imports and the runtime library are ready before the clock starts;
  the worker, its compile pool and compilers stop with the suite: Ctrl-C, SIGTERM, SIGKILL,
  bench/process_group.py);
  cached: a second fresh process with the same cache dir (only when tessera has a compile cache,
  `tessera.codegen.cache_stats`);
- latency: after warm-up the two runtimes take turns of `--block` runs, each turn once the other's
  threads have gone idle (`tessera.cli.bench.measure_in_blocks`, Note [fair turns]: ORT's threads
  spin ~30 ms of CPU after a run, which took tessera's second core when runs alternated one by
  one), so a change of machine load hits both alike and each is timed as it runs alone; medians
  and min-max, and the ratio of the medians;
- agreement: max |tessera - ORT| / max |ORT| over the outputs.

Threads: `tessera.runtime.set_num_threads(n)`; ORT `intra_op_num_threads=n`,
`inter_op_num_threads=1`, its default graph optimizations. A model that fails to compile or run
gets its error in its row and the suite goes on. This is a benchmark, not a test: the machine is
shared and noisy, nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import model_zoo  # noqa: E402
from fma_peak import measure_fma_peak  # noqa: E402
from process_group import die_with_parent, run_in_group, stop_on_signals  # noqa: E402

from tessera.cli.bench import BLOCK_RUNS, measure_in_blocks  # noqa: E402

OPT_LEVEL = 3  # the tessera command's default
WORKER_FLAG = "--compile-worker"


# -- the suite ---------------------------------------------------------------------------------


def _light(name: str):
    def build() -> onnx.ModelProto:
        from tessera.models import light_model

        return light_model(name)

    return build


def _image_feeds(model: onnx.ModelProto, seed: int) -> dict[str, np.ndarray]:
    from tessera.models import random_inputs

    return random_inputs(model, seed)


@dataclass(frozen=True)
class Case:
    """One model of the suite: how to build it and its inputs."""

    name: str
    build: object  # () -> onnx.ModelProto
    feeds: object = _image_feeds  # (model, seed) -> {name: array}


SUITE = {
    c.name: c
    for c in [
        Case("resnet50", _light("resnet50")),
        Case("densenet121", _light("densenet121")),
        Case("inception_v2", _light("inception_v2")),
        Case("squeezenet", _light("squeezenet")),
        Case("mobilenet_v2", model_zoo.mobilenet_v2),
        Case("bert_base", model_zoo.bert_encoder, model_zoo.bert_inputs),
    ]
}


def model_flops(model: onnx.ModelProto) -> int:
    """Multiply-add flops (2 per MAC) of the Conv, Gemm and MatMul nodes, from inferred shapes."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    # Old models list their weights as graph inputs too, some without a shape, which hides the
    # initializer's shape from the inference: keep only the true inputs.
    inits = {i.name for i in copy.graph.initializer}
    inputs = [v for v in copy.graph.input if v.name not in inits]
    del copy.graph.input[:]
    copy.graph.input.extend(inputs)
    copy.ir_version = max(copy.ir_version, 4)
    g = onnx.shape_inference.infer_shapes(copy).graph
    shapes = {
        v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
        for v in [*g.input, *g.value_info, *g.output]
    }
    shapes.update({i.name: list(i.dims) for i in g.initializer})
    total = 0
    for n in g.node:
        out = shapes.get(n.output[0])
        if not out or n.op_type not in ("Conv", "Gemm", "MatMul"):
            continue
        w = shapes.get(n.input[1], [])
        if n.op_type == "Conv":
            k = int(np.prod(w[1:]))  # Cin / group * kh * kw
        elif n.op_type == "Gemm":
            trans_b = any(a.name == "transB" and a.i for a in n.attribute)
            k = w[1] if trans_b else w[0]
        else:
            k = w[-2] if len(w) > 1 else w[0]
        total += 2 * int(np.prod(out)) * k
    return total


# -- compile (in a fresh process) --------------------------------------------------------------


def compile_model(model: onnx.ModelProto, target: str = "llvm"):
    """from_onnx + tessera.build at the command's opt level: the compiled model."""
    import tessera
    from tessera.frontend import from_onnx
    from tessera.transform import PassContext

    mod, params = from_onnx(model)
    with PassContext(opt_level=OPT_LEVEL):
        return tessera.build(mod, target=target, params=params)


def cache_stats() -> dict | None:
    """The compile cache's counters, or None where tessera has no compile cache yet."""
    try:
        from tessera.codegen import cache_stats as stats  # type: ignore[attr-defined]
    except ImportError:
        return None
    value = stats()
    return dict(value) if isinstance(value, dict) else {"stats": str(value)}


def compiler_fingerprint() -> str | None:
    """The compile cache's hash of the compiler's sources (None without a cache): when it differs
    between the cold and the cached compile, sources changed in between and every key with them."""
    try:
        from tessera.codegen.cache import compiler_fingerprint as fingerprint
    except ImportError:
        return None
    return fingerprint("llvm")


def compile_worker(path: str, target: str, parent: int) -> None:
    """Run in a fresh process: compile the model at `path`, print one JSON line with the
    seconds (or the error) and the cache counters. It ends, with the pool and compilers it
    starts, when the process `parent` (the suite) dies (Note [worker process groups])."""
    die_with_parent(parent)
    from tessera.runtime import native

    native.load()  # the runtime library is built once per cache dir: not the model's cost
    model = onnx.load(path)
    start = time.perf_counter()
    try:
        compile_model(model, target)
    except Exception as e:  # reported in the model's row
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
        return
    seconds = time.perf_counter() - start
    out = {"seconds": seconds, "cache": cache_stats(), "compiler": compiler_fingerprint()}
    print(json.dumps(out, default=str))


def timed_compile(path: Path, cache_dir: Path, timeout: float, target: str = "llvm") -> dict:
    """Compile in a fresh process with TESSERA_CACHE_DIR=cache_dir: {seconds, cache} or {error}."""
    env = dict(os.environ, TESSERA_CACHE_DIR=str(cache_dir))
    cmd = [sys.executable, os.path.abspath(__file__), WORKER_FLAG, str(path), target]
    try:  # the worker and all it starts are killed when this returns, raises or times out
        proc = run_in_group([*cmd, str(os.getpid())], env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"compile took longer than {timeout:.0f} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"error": f"compile process failed: {failure_summary(proc.stderr, proc.returncode)}"}
    return json.loads(lines[-1])


def failure_summary(stderr: str, code: int) -> str:
    """The telling lines of a failed process: its last Python exception and the first C
    compiler error (a traceback ends with context lines, a compiler with carets)."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    exceptions = [ln for ln in lines if re.match(r"^[\w.]*(Error|Exception)\b", ln)]
    compiler = [ln for ln in lines if " error: " in ln or ln.startswith("error:")]
    parts = exceptions[-1:] + compiler[:1]
    return " / ".join(parts) or (lines[-1] if lines else f"exit status {code}")


# -- measure -----------------------------------------------------------------------------------


@dataclass
class Result:
    name: str
    gflop: float = 0.0
    tessera_s: list[float] = field(default_factory=list)
    ort_s: list[float] = field(default_factory=list)
    cold_s: float | None = None
    cached_s: float | None = None
    cache: dict | None = None
    rel_err: float | None = None
    waits: dict[str, list[float]] = field(default_factory=dict)  # seconds before each turn
    notes: list[str] = field(default_factory=list)

    @property
    def ratio(self) -> float | None:
        if not self.tessera_s or not self.ort_s:
            return None
        return float(np.median(self.tessera_s) / np.median(self.ort_s))


def ort_session(model: onnx.ModelProto, threads: int):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3  # its warnings about unused initializers are noise here
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def relative_error(got: list[np.ndarray], expected: list[np.ndarray]) -> float:
    """max |got - expected| / max |expected| over all outputs (inf where shapes differ)."""
    worst = 0.0
    for g, e in zip(got, expected, strict=True):
        if g.shape != e.shape:
            return math.inf
        diff = float(np.abs(g.astype(np.float64) - e.astype(np.float64)).max(initial=0))
        worst = max(worst, diff / (float(np.abs(e).max(initial=0)) or 1.0))
    return worst


def run_case(case: Case, args, workdir: Path) -> Result:
    """Build, compile (cold, cached), then alternate tessera and ORT; errors land in the notes."""
    result = Result(case.name)
    model = case.build()
    feeds = case.feeds(model, 0)
    result.gflop = model_flops(model) / 1e9
    path = (args.save_models or workdir) / f"{case.name}.onnx"
    cache_dir = workdir / f"cache-{case.name}"
    onnx.save(model, path)
    cold = timed_compile(path, cache_dir, args.compile_timeout, args.target)
    if "error" in cold:
        result.notes.append(cold["error"])
        return result
    result.cold_s = cold["seconds"]
    if cold.get("cache") is not None:
        cached = timed_compile(path, cache_dir, args.compile_timeout, args.target)
        result.cached_s, result.cache = cached.get("seconds"), cached.get("cache")
        if "error" in cached:
            result.notes.append("cached " + cached["error"])
        elif cached.get("compiler") != cold.get("compiler"):
            result.notes.append("tessera's sources changed between the two compiles: cache missed")
    os.environ["TESSERA_CACHE_DIR"] = str(cache_dir)
    try:
        measure(result, model, feeds, args)
    except Exception as e:  # a model that compiled in the worker but fails here
        result.notes.append(f"{type(e).__name__}: {e}")
    if not args.save_models:
        path.unlink()
    gc.collect()  # the compiled model and the ORT session go before the next model loads
    return result


def measure(result: Result, model: onnx.ModelProto, feeds: dict, args) -> None:
    from tessera.runtime import GraphModule, cpu

    module = GraphModule(compile_model(model, args.target)["default"](cpu(0)))
    module.set_input(**feeds)
    runners = {"tessera": module.run}
    try:
        session = ort_session(model, args.threads)
        runners["ort"] = lambda: session.run(None, feeds)
    except Exception as e:  # ORT rejects some models tessera takes: run tessera alone
        session = None
        result.notes.append(f"ONNX Runtime failed: {e}")
    times, waits = measure_in_blocks(
        runners, args.repeat, args.warmup, args.max_seconds, getattr(args, "block", BLOCK_RUNS)
    )
    result.tessera_s, result.ort_s = list(times["tessera"]), list(times.get("ort", []))
    result.waits = {name: list(w) for name, w in waits.items()}
    if session is not None:
        got = [module.get_output(k).numpy() for k in range(module.get_num_outputs())]
        result.rel_err = relative_error(got, session.run(None, feeds))


# -- report ------------------------------------------------------------------------------------


def _ms(times: list[float]) -> str:
    if not times:
        return "—"
    t = np.array(times) * 1e3
    digits = 1 if np.median(t) >= 10 else 2
    return f"{np.median(t):.{digits}f} ({t.min():.{digits}f}–{t.max():.{digits}f})"


def _num(value: float | None, fmt: str) -> str:
    return "—" if value is None else format(value, fmt)


def _cell(text: str, limit: int = 160) -> str:
    text = " ".join(text.split()).replace("|", "\\|")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _cached(r: Result) -> str:
    """Seconds, and the kernels taken from the cache out of all kernels the compile needed."""
    text = _num(r.cached_s, ".1f")
    hits, misses = (r.cache or {}).get("hits"), (r.cache or {}).get("misses")
    if r.cached_s is not None and isinstance(hits, int) and isinstance(misses, int):
        text += f" ({hits}/{hits + misses} hits)"
    return text


def table_rows(results: list[Result]) -> list[str]:
    head = (
        "| model | GFLOP | tessera ms, median (min–max) | ORT ms, median (min–max) "
        "| tessera/ORT | tessera GFLOP/s | compile cold s | compile cached s (kernels) "
        "| max rel err | notes |"
    )
    rows = [head, "|---|" + "---:|" * 8 + "---|"]
    for r in results:
        rate = r.gflop / float(np.median(r.tessera_s)) if r.tessera_s else None
        rows.append(
            f"| {r.name} | {r.gflop:.2f} | {_ms(r.tessera_s)} | {_ms(r.ort_s)} "
            f"| {_num(r.ratio, '.2f')} | {_num(rate, '.1f')} | {_num(r.cold_s, '.1f')} "
            f"| {_cached(r)} | {_num(r.rel_err, '.1e')} "
            f"| {_cell('; '.join(r.notes))} |"
        )
    return rows


def geometric_mean(values: list[float]) -> float | None:
    return float(np.exp(np.mean(np.log(values)))) if values else None


def criteria(results: list[Result]) -> list[str]:
    """Issue 4's bars, each with the measured value (a report, not an assertion)."""
    ratios = {r.name: r.ratio for r in results if r.ratio is not None}
    by_name = {r.name: r for r in results}
    lines = []

    def check(label: str, value: float | None, limit: float, unit: str = "") -> None:
        if value is None:
            lines.append(f"- {label}: not measured")
        else:
            verdict = "met" if value <= limit else "not met"
            lines.append(f"- {label}: {value:.2f}{unit} (bar: at most {limit}{unit}) — {verdict}")

    check("geometric mean of tessera/ORT", geometric_mean(list(ratios.values())), 1.0)
    check("ResNet-50 tessera/ORT", ratios.get("resnet50"), 0.9)
    if ratios:
        worst = max(ratios, key=ratios.get)
        check(f"worst model tessera/ORT ({worst})", ratios[worst], 1.3)
    resnet = by_name.get("resnet50")
    check("ResNet-50 cold compile", resnet and resnet.cold_s, 60, " s")
    check("ResNet-50 cached compile", resnet and resnet.cached_s, 10, " s")
    errs = [r.rel_err for r in results if r.rel_err is not None]
    if errs:
        lines.append(f"- largest max relative error vs ORT: {max(errs):.1e} (bar: ~1e-4)")
    return lines


def machine_lines(args, peaks: dict[int, float], results: list[Result] = ()) -> list[str]:
    import onnxruntime

    from tessera.target import Target

    cpu = "unknown CPU"
    if os.path.exists("/proc/cpuinfo"):
        names = [ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if "model name" in ln]
        cpu = names[0] if names else cpu
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
        cwd=os.path.dirname(os.path.abspath(__file__)),
    ).stdout.strip() or "unknown"  # fmt: skip
    peak = ", ".join(f"{v:.0f} GFLOP/s on {t} thread(s)" for t, v in sorted(peaks.items()))
    return [
        f"- machine: {cpu}, {cores} cores available, "
        f"{Target('llvm').vector_width_bits}-bit vectors; measured float32 FMA peak: {peak}",
        f"- tessera {commit}, onnxruntime {onnxruntime.__version__}, "
        f"{time.strftime('%Y-%m-%d %H:%M')}",
        f"- target {args.target!r} ({Target(args.target).vector_width_bits}-bit vectors); "
        f"{args.threads} thread(s) each, batch 1, float32; "
        f"{args.warmup} warm-up runs, then up "
        f"to {args.repeat} runs each in turns of {getattr(args, 'block', BLOCK_RUNS)} "
        "after the other's threads went idle "
        f"(at most ~{args.max_seconds:.0f} s per model); {_waits_line(results)}",
    ]


def _waits_line(results: list[Result]) -> str:
    """The median wait before each runtime's turns: how long the other's threads kept running."""
    waits: dict[str, list[float]] = {}
    for r in results:
        for name, w in r.waits.items():
            waits.setdefault(name, []).extend(w)
    parts = [f"before {n}'s turns {np.median(w) * 1e3:.0f} ms" for n, w in waits.items() if w]
    return "median wait " + ", ".join(parts) if parts else "no turns"


def load_line(loads: tuple[float, float]) -> str:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (
        f"- 1-minute load average {loads[0]:.1f} at the start, {loads[1]:.1f} at the end "
        f"(above {cores}, other work competed for the cores: expect noise)"
    )


def report(
    results: list[Result], args, peaks: dict[int, float], command: str, loads=None, bars=None
) -> str:
    ratios = [r.ratio for r in results if r.ratio is not None]
    gm = geometric_mean(ratios)
    machine = machine_lines(args, peaks, results) + ([load_line(loads)] if loads else [])
    lines = [f"`{command}`", "", *machine, "", *table_rows(results), ""]
    lines.append(
        f"Geometric mean of tessera/ORT over {len(ratios)} model(s): {_num(gm, '.2f')}"
        if ratios
        else "No model ran on both runtimes."
    )
    return "\n".join([*lines, "", *(bars or criteria)(results), ""])


# -- command line ------------------------------------------------------------------------------


def parse_args(argv, suite=None, description=None):
    suite = SUITE if suite is None else suite
    p = argparse.ArgumentParser(description=description or __doc__.split("\n\n")[0])
    p.add_argument(
        "--models", default=",".join(suite), help="comma-separated, from: " + ", ".join(suite)
    )
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--target", default="llvm", help='e.g. "llvm -mcpu=haswell" (AVX2 code)')
    p.add_argument("--repeat", type=int, default=20, help="alternating runs per runtime (at most)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--max-seconds", type=float, default=60.0, help="measuring budget per model")
    p.add_argument("--block", type=int, default=BLOCK_RUNS, help="timed runs per turn")
    p.add_argument("--compile-timeout", type=float, default=900.0, help="seconds per compile")
    p.add_argument("--markdown", type=Path, help="also write the report to this file")
    p.add_argument("--save-models", type=Path, help="keep each model as DIR/<model>.onnx")
    args = p.parse_args(argv)
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in args.models if m not in suite]
    if unknown:
        p.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(suite)}")
    if args.threads < 1 or args.repeat < 1 or args.warmup < 0 or args.block < 1:
        p.error("--threads, --repeat and --block must be >= 1, --warmup >= 0")
    try:
        from tessera.target import Target

        Target(args.target)
    except (ValueError, TypeError) as e:
        p.error(f"--target: {e}")
    if args.save_models:
        args.save_models.mkdir(parents=True, exist_ok=True)
    return args


def main(argv=None, suite=None, bars=None, script=None, description=None) -> int:
    """The suite's command line; `bench/zoo.py` calls it with its own suite, bars and name."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == [WORKER_FLAG]:
        compile_worker(argv[1], argv[2], int(argv[3]))
        return 0
    stop_on_signals()  # SIGTERM/SIGHUP unwind: the compile worker's group is killed
    suite = SUITE if suite is None else suite
    args = parse_args(argv, suite, description)
    from tessera.runtime import set_num_threads

    load_start = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    # The peak first, while this process loads nothing else.
    peaks = {t: measure_fma_peak(t) for t in sorted({1, args.threads})}
    set_num_threads(args.threads)
    results = []
    with tempfile.TemporaryDirectory(prefix="tessera-bench-") as tmp:
        for name in args.models:
            print(f"{name} ...", file=sys.stderr, flush=True)
            results.append(run_case(suite[name], args, Path(tmp)))
            r = results[-1]
            print(f"  {_ms(r.tessera_s)} ms vs ORT {_ms(r.ort_s)} ms {'; '.join(r.notes)}",
                  file=sys.stderr, flush=True)  # fmt: skip
    command = f".venv/bin/python bench/{script or 'models.py'} " + shlex.join(argv)
    loads = None if load_start is None else (load_start, os.getloadavg()[0])
    text = report(results, args, peaks, command, loads, bars)
    print(text)
    if args.markdown:
        args.markdown.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
