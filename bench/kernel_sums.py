"""Benchmark: a model's time in kernels, compiled artifacts side by side and ORT's profile.

    .venv/bin/tessera compile model.onnx -o after.so        # (and before.so from another tree)
    .venv/bin/python bench/kernel_sums.py model.onnx before.so after.so [--threads 1] [--runs 100]

Each artifact's kernel calls are timed natively (`GraphModule.profile`, one run at a time, the
artifacts in turns), ORT's nodes by its profiler (`int8.ort_node_medians`, two sessions) on
the same random inputs and thread count. Prints, per artifact and for ORT, the sum over calls
(nodes) of each call's median and of its minimum over the runs, and each artifact's sums over
ORT's: on a loaded machine the minima are the steadier measure of what the kernels cost (a
preempted call is one slow sample, not a shift of the median). Framework overheads between
calls are not counted on either side. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from int8 import ort_node_medians  # noqa: E402


def artifacts_parser(doc: str, model_help: str) -> argparse.ArgumentParser:
    """The arguments of a benchmark of compiled artifacts: a model, its artifacts, --threads."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("model", help=model_help)
    ap.add_argument("artifacts", nargs="+", help="tessera artifacts (.so) of the model")
    ap.add_argument("--threads", type=int, default=1)
    return ap


def random_feed(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Seeded inputs for a model's graph inputs (static shapes), each in its own dtype (BERT's
    token ids are int64): standard normal floats, small non-negative integers."""
    from tessera.models import random_inputs

    return random_inputs(model, 0)


def loaded_modules(paths: list[str], feed: dict) -> list:
    """The artifacts loaded, their inputs set and run once (warm)."""
    from tessera.cli.build import load_artifact

    modules = []
    for path in paths:
        _, module = load_artifact(path, None)
        module.set_input(**feed)
        module.run()
        modules.append(module)
    return modules


def main(argv=None) -> int:
    ap = artifacts_parser(__doc__, "the .onnx model (static input shapes)")
    ap.add_argument("--runs", type=int, default=100)
    args = ap.parse_args(argv)

    import tessera

    tessera.runtime.set_num_threads(args.threads)
    feed = random_feed(onnx.load(args.model))
    modules = loaded_modules(args.artifacts, feed)
    samples = [[] for _ in modules]
    for _ in range(args.runs):
        for k, module in enumerate(modules):
            samples[k].append([p.seconds for p in module.profile(repeat=1)])
    ort_min = sum(ort_node_medians(args.model, args.threads, feed, args.runs, np.min).values())
    ort_med = sum(ort_node_medians(args.model, args.threads, feed, args.runs).values())
    print(f"ORT: {ort_min * 1e3:.3f} ms (minima), {ort_med * 1e3:.3f} ms (medians)")
    for path, s in zip(args.artifacts, samples, strict=True):
        s = np.array(s)
        lo, med = s.min(axis=0).sum(), np.median(s, axis=0).sum()
        print(
            f"{path}: {lo * 1e3:.3f} ms (minima, {lo / ort_min:.2f}x ORT), "
            f"{med * 1e3:.3f} ms (medians, {med / ort_med:.2f}x ORT)"
        )
    print(f"threads {args.threads}, runs {args.runs}, load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
