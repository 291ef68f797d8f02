"""Benchmark: a change's effect on zoo models, as ratios to ONNX Runtime before and after.

    .venv/bin/python bench/before_after.py --before 9c5c0dc [--models shufflenet,magika]
                                           [--threads 1,2] [--seconds 25]

"before" is the tessera of a git revision (exported with `git archive` into a temporary
directory, its own compile cache), "after" the working tree. For each thread count, each side
runs in a fresh process (before, then after, back to back): per model, build (cached compiles
after the first run), then tessera and ORT in turns of 3 runs each for `--seconds`, and the
median of each engine's runs; the ratio tessera / ORT is what compares across the two sides
(both see the same load within a process). Models: `bench/zoo.py`'s suite. Prints one line
per (side, threads, model) with the medians, minima, the ratio and the load average. A
benchmark, not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def worker(models: list[str], threads: int, seconds: float) -> None:
    """In this process's tessera (PYTHONPATH picks the side): each model vs ORT, in turns."""
    sys.path.insert(0, str(Path.cwd() / "bench"))
    import onnxruntime as ort
    import zoo

    import tessera

    tessera.runtime.set_num_threads(threads)
    for name in models:
        case = zoo.SUITE[name]
        model = case.build()
        feeds = case.feeds(model, 0)
        mod, params = tessera.frontend.from_onnx(model, {k: v.shape for k, v in feeds.items()})
        lib = tessera.build(mod, target="llvm", params=params)
        m = tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))
        for k, v in feeds.items():
            m.set_input(k, v)
        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
        options.log_severity_level = 3
        session = ort.InferenceSession(model.SerializeToString(), options)
        m.run()
        session.run(None, feeds)
        ours, theirs = [], []
        deadline = time.time() + seconds
        while (time.time() < deadline or len(ours) < 10) and len(ours) < 60:
            for _ in range(3):
                t = time.perf_counter()
                m.run()
                ours.append(time.perf_counter() - t)
            for _ in range(3):
                t = time.perf_counter()
                session.run(None, feeds)
                theirs.append(time.perf_counter() - t)
        a, b = statistics.median(ours) * 1e3, statistics.median(theirs) * 1e3
        print(
            f"  {name}: tessera {a:.3f} ms (min {min(ours) * 1e3:.3f}), ORT {b:.3f} ms "
            f"(min {min(theirs) * 1e3:.3f}), ratio {a / b:.2f}, load {os.getloadavg()[0]:.1f}",
            flush=True,
        )


def run_side(label: str, tree: Path, cache: str, models: str, threads: int, seconds: float):
    print(f"{label}, {threads} thread(s):", flush=True)
    env = dict(os.environ, PYTHONPATH=str(tree), TESSERA_CACHE_DIR=cache)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--models", models]
    cmd += ["--threads", str(threads), "--seconds", str(seconds)]
    subprocess.run(cmd, cwd=tree, env=env, check=False)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", help="a git revision (required unless --worker)")
    p.add_argument("--models", default="shufflenet,silero_vad_16k,magika")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--seconds", type=float, default=25.0, help="measuring time per model")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(args.models.split(","), int(args.threads), args.seconds)
        return 0
    if not args.before:
        p.error("--before REV is required")
    with tempfile.TemporaryDirectory(prefix="tessera-before-") as tmp:
        tree = Path(tmp) / "tree"
        tree.mkdir()
        archive = subprocess.run(
            ["git", "archive", args.before], cwd=ROOT, capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        default_cache = str(Path.home() / ".cache" / "tessera")
        after_cache = os.environ.get("TESSERA_CACHE_DIR", default_cache)
        for threads in (int(t) for t in args.threads.split(",")):
            run_side(f"before ({args.before})", tree, f"{tmp}/cache", args.models, threads,
                     args.seconds)  # fmt: skip
            run_side("after (working tree)", ROOT, after_cache, args.models, threads, args.seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
