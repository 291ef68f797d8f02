"""Benchmark: the runtime's thread pool (tessera/runtime/native/tessera_rt.c) on a busy machine.

    .venv/bin/python bench/threadpool.py [--threads 2] [--model mobilenetv2|squeezenet|none]
        [--busy both|0|1|transient|all] [--compare REV ...] [--rounds 3] [--budget 120]

Measures, with and without a competing busy process pinned to one core (`transient`: busy 30 ms,
idle 70 ms, in turn, as another runtime's spinning pool threads between its runs):
- back-to-back parallel loops from C (no Python between them), a compute-bound body calibrated to
  ~10 us ("tiny"), ~100 us ("medium", a softmax-sized kernel) and ~1 ms ("large") of one thread's
  work, each loop followed by ~5 us of serial work (the executor between kernels);
- "wake": medium loops after 2 ms of sleep (the workers have blocked: the wake-up latency);
- a full model (bench/model_zoo.py / tessera.models, compiled through the compile cache): one
  inference per sample.
Each setting runs at 1 thread and at `--threads`; the report gives median and mean per loop in
microseconds (the mean shows the tail a preempted thread causes) and the speedup over 1 thread.

`--compare REV` measures the runtime library as it was at git revision REV next to the working
tree's: each round runs every variant in a fresh process, alternating, so all see the same load.
The competitor is a `while True` process pinned to CPU 0 that exits by itself at a deadline.
This is a benchmark, not a test: the machine is shared and noisy, nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

KERNEL_C = r"""
#include <stdint.h>
#include <time.h>
#include "tessera_rt.h"

struct job { int64_t work; double* out; };

static int32_t body(int64_t begin, int64_t end, void* closure) {
  struct job* j = closure;
  for (int64_t i = begin; i < end; i++) {
    double x = (double)i;
    for (int64_t k = 0; k < j->work; k++) x = x * 0.9999999 + 1e-7; /* a dependent chain */
    j->out[i] = x;
  }
  return 0;
}

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* One thread's time for the whole loop, no pool (the calibration). */
int64_t serial_ns(int64_t extent, int64_t work, double* out) {
  struct job j = {work, out};
  int64_t t0 = now_ns();
  body(0, extent, &j);
  return now_ns() - t0;
}

/* Up to `nloops` parallel loops, each preceded by `gap_ns` of serial spinning (gap_ns > 0) or
 * sleeping (gap_ns < 0); stops once `budget_ns` has passed. Stores each loop's time in loop_ns
 * and returns the number of loops run (negative: a loop failed). */
int64_t run_loops(int64_t nloops, int64_t extent, int64_t work, int64_t gap_ns, int64_t budget_ns,
                  int64_t* loop_ns, double* out) {
  struct job j = {work, out};
  int64_t start = now_ns();
  for (int64_t n = 0; n < nloops; n++) {
    if (gap_ns > 0) {
      int64_t until = now_ns() + gap_ns;
      while (now_ns() < until) {}
    } else if (gap_ns < 0) {
      struct timespec ts = {0, -gap_ns};
      nanosleep(&ts, NULL);
    }
    int64_t t0 = now_ns();
    if (tessera_parallel_for(extent, body, &j) != 0) return -1;
    loop_ns[n] = now_ns() - t0;
    if (loop_ns[n] + t0 - start > budget_ns) return n + 1;
  }
  return nloops;
}
"""

# name: (extent, one thread's work in us, gap in ns: > 0 spins serially, < 0 sleeps, loops)
LOOPS = {
    "tiny": (16, 10, 5_000, 4000),
    "medium": (64, 100, 5_000, 1000),
    "large": (256, 1000, 5_000, 150),
    "wake": (64, 100, -2_000_000, 150),
}

# Spins on one CPU until a deadline; with busy/idle ms, spins busy ms then sleeps idle ms in
# turn, as another runtime's pool threads do between its runs (ONNX Runtime's spin ~30 ms).
COMPETITOR = """
import os, sys, time
os.sched_setaffinity(0, {int(sys.argv[1])})
deadline = time.monotonic() + float(sys.argv[2])
busy, idle = (float(a) / 1e3 for a in sys.argv[3:5]) if len(sys.argv) > 4 else (1e9, 0)
while time.monotonic() < deadline:
    until = time.monotonic() + busy
    while time.monotonic() < min(until, deadline):
        pass
    time.sleep(idle)
"""
TRANSIENT_MS = ("30", "70")  # --busy transient: busy 30 ms, idle 70 ms


# -- one variant, one load setting: runs in a fresh process ------------------------------------


def point_runtime_at(source_dir: str | None) -> None:
    """Build and load the runtime library from `source_dir` (a revision's copy) instead."""
    from tessera.runtime import native

    if source_dir:
        native._SOURCE_DIR = Path(source_dir)
    native.load()


def build_kernels(workdir: Path) -> ctypes.CDLL:
    from tessera.runtime import cc, native

    src = workdir / "pool_bench.c"
    src.write_text(KERNEL_C)
    flags = ["-I", str(native.include_dir()), "-std=gnu11"]
    lib = ctypes.CDLL(str(cc.compile_shared(workdir / "pool_bench.so", sources=[src], flags=flags)))
    i64, p = ctypes.c_int64, ctypes.c_void_p
    lib.serial_ns.argtypes = [i64, i64, p]
    lib.serial_ns.restype = i64
    lib.run_loops.argtypes = [i64, i64, i64, i64, i64, p, p]
    lib.run_loops.restype = i64
    return lib


def calibrate(lib, out: np.ndarray) -> float:
    """Nanoseconds of one step of the body's chain (the fastest of a few runs)."""
    work = 20000
    best = min(lib.serial_ns(16, work, out.ctypes.data) for _ in range(20))
    return best / (16 * work)


def measure_loops(lib, threads: int, step_ns: float, budget_s: float) -> dict:
    from tessera.runtime import native

    native.set_num_threads(threads)
    out = np.zeros(1024)
    results = {}
    for name, (extent, us, gap, nloops) in LOOPS.items():
        work = max(1, int(us * 1000 / (extent * step_ns)))
        times = np.zeros(nloops, np.int64)
        lib.run_loops(20, extent, work, gap, int(1e9), times.ctypes.data, out.ctypes.data)
        cpu = time.process_time()
        done = lib.run_loops(nloops, extent, work, gap, int(budget_s * 1e9), times.ctypes.data,
                             out.ctypes.data)  # fmt: skip
        cpu = time.process_time() - cpu
        if done < 0:
            raise RuntimeError(f"{name}: a parallel loop failed")
        results[name] = (times[:done] / 1e3).tolist()
        # CPU time of the whole process per loop (the gap's serial work included): what spinning
        # workers cost; under fair-share scheduling it is taken from the caller's share.
        results[name + "_cpu"] = cpu * 1e6 / done
    return results


def measure_model(name: str, threads: int, budget_s: float) -> list[float]:
    from tessera.runtime import native

    module, feeds = compiled_model(name)
    native.set_num_threads(threads)
    for _ in range(3):
        module.run()
    times = []
    start = time.perf_counter()
    while len(times) < 200 and (len(times) < 5 or time.perf_counter() - start < budget_s):
        t0 = time.perf_counter()
        module.run()
        times.append((time.perf_counter() - t0) * 1e6)
    return times


_MODELS: dict = {}


def compiled_model(name: str):
    if name not in _MODELS:
        import model_zoo
        from models import compile_model

        import tessera.models
        from tessera.runtime import GraphModule, cpu

        if name == "mobilenetv2":
            model = model_zoo.mobilenet_v2()
        else:
            model = tessera.models.light_model(name)
        feeds = tessera.models.random_inputs(model)
        module = GraphModule(compile_model(model)["default"](cpu(0)))
        module.set_input(**feeds)
        _MODELS[name] = (module, feeds)
    return _MODELS[name]


def child(args) -> None:
    point_runtime_at(args.source_dir)
    with tempfile.TemporaryDirectory() as tmp:
        lib = build_kernels(Path(tmp))
        out = np.zeros(1024)
        step_ns = calibrate(lib, out)
        if args.model != "none":
            compiled_model(args.model)  # compile before the clock starts
        result = {"step_ns": step_ns}
        for threads in sorted({1, args.threads}):
            result[f"loops{threads}"] = measure_loops(lib, threads, step_ns, args.budget / 16)
            if args.model != "none":
                result[f"model{threads}"] = measure_model(args.model, threads, args.budget / 4)
    print("RESULT " + json.dumps(result))


# -- the driver: rounds of fresh processes, alternating variants -------------------------------


def export_revision(rev: str, workdir: Path) -> str:
    """The runtime's C sources at git revision `rev`, written to a directory of their own."""
    out = workdir / f"rt-{rev}"
    out.mkdir()
    for name in ("tessera_rt.c", "tessera_rt.h"):
        path = f"tessera/runtime/native/{name}"
        text = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{path}"], check=True,
                              capture_output=True, text=True).stdout  # fmt: skip
        (out / name).write_text(text)
    return str(out)


def run_child(args, source_dir: str | None, busy) -> dict:
    cmd = [sys.executable, __file__, "--child", "--threads", str(args.threads), "--model",
           args.model, "--budget", str(args.child_budget)]  # fmt: skip
    if source_dir:
        cmd += ["--source-dir", source_dir]
    competitor = None
    if busy:
        limit = str(args.child_budget * 3 + 300)  # exits by itself even if we die
        # its own session: with autogroup scheduling it competes like another user's process,
        # not inside our own share of the machine
        duty = list(TRANSIENT_MS) if busy == "transient" else []
        competitor = subprocess.Popen(
            [sys.executable, "-c", COMPETITOR, "0", limit, *duty], start_new_session=True
        )
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=args.child_budget * 3 + 240
        )
    finally:
        if competitor is not None:
            competitor.kill()
            competitor.wait()
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    raise RuntimeError(f"benchmark process failed:\n{proc.stdout}\n{proc.stderr}")


def summarize(samples: list[dict], key: str, name: str) -> tuple[float, float, float | None]:
    """Median over rounds of each round's (median, mean, CPU time) per loop."""
    per_round = [s[key][name] if name != "model" else s[key] for s in samples]
    medians = [statistics.median(t) for t in per_round]
    means = [statistics.fmean(t) for t in per_round]
    cpu = [s[key][name + "_cpu"] for s in samples if name != "model"]
    return (statistics.median(medians), statistics.median(means),
            statistics.median(cpu) if cpu else None)  # fmt: skip


def autogroup_note() -> str:
    try:
        on = Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() == "1"
    except OSError:
        return ""
    return (", autogroup scheduling on (a session's threads share one CPU share: under load,"
            " more threads get no more CPU)") if on else ""  # fmt: skip


def busy_label(busy) -> str:
    return busy if isinstance(busy, str) else str(int(busy))


def report(results: dict, args) -> None:
    names = list(LOOPS) + (["model"] if args.model != "none" else [])
    load = os.getloadavg()[0]
    print(
        f"threads {args.threads}, {args.rounds} rounds, load average {load:.1f}{autogroup_note()}"
    )
    n = args.threads
    print(f"| variant | busy | case | median 1t | median {n}t | mean 1t | mean {n}t "
          f"| speedup (mean) | CPU/loop 1t | CPU/loop {n}t |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (variant, busy), samples in results.items():
        for name in names:
            kind = "model" if name == "model" else "loops"
            med1, mean1, cpu1 = summarize(samples, f"{kind}1", name)
            medn, meann, cpun = summarize(samples, f"{kind}{n}", name)
            cpu = f"{cpu1:.1f} | {cpun:.1f}" if cpu1 is not None else "— | —"
            print(f"| {variant} | {busy_label(busy)} | {name} | {med1:.1f} | {medn:.1f} "
                  f"| {mean1:.1f} | {meann:.1f} | {mean1 / meann:.2f} | {cpu} |")  # fmt: skip
    print("(microseconds per loop or per inference; CPU: process CPU time per loop)")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--model", default="mobilenetv2", help="mobilenetv2, squeezenet, ..., or none")
    p.add_argument("--busy", choices=["both", "0", "1", "transient", "all"], default="both")
    p.add_argument(
        "--compare", nargs="*", default=[], metavar="REV", help="git revisions to compare"
    )
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--budget", type=float, default=240, help="seconds for the whole run, roughly")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--source-dir", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.child:
        child(args)
        return 0
    busy_settings = {
        "both": [False, True],
        "0": [False],
        "1": [True],
        "transient": ["transient"],
        "all": [False, True, "transient"],
    }[args.busy]
    runs = args.rounds * len(busy_settings) * (1 + len(args.compare))
    args.child_budget = max(2.0, args.budget / runs)
    with tempfile.TemporaryDirectory() as tmp:
        variants = {"worktree": None}
        variants.update({rev: export_revision(rev, Path(tmp)) for rev in args.compare})
        results: dict = {}
        for r in range(args.rounds):
            for busy in busy_settings:
                for variant, source_dir in variants.items():
                    print(f"round {r + 1}: {variant}, busy={busy_label(busy)}", file=sys.stderr)
                    sample = run_child(args, source_dir, busy)
                    results.setdefault((variant, busy), []).append(sample)
    report(results, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
