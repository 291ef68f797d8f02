"""Benchmark: compiled artifacts of one zoo model and ONNX Runtime, whole runs in turns.

    TESSERA_CACHE_DIR=/tmp/a .venv/bin/tessera compile model.onnx -o after.so
    .venv/bin/python bench/artifact_turns.py yolov8n_320 before.so after.so [--threads 1]
                                             [--seconds 40]

(before.so compiled the same way by the tree before a change, e.g. `git archive` of it on
PYTHONPATH, with a cache directory of its own.)

One process loads every artifact and an ORT session on the model's zoo inputs (`zoo.SUITE`:
a light model's or a built one's seeded random inputs, a pretrained one's `fetch_zoo.feeds`;
the .onnx to compile: `tessera.models.light_model(name)` saved, or the fetched file), prints
each artifact's max difference from ORT over ORT's output range, then runs them in turns of 3
runs each for `--seconds`, the order rotated every turn (ORT's spinning threads slow whatever
runs right after it), and prints medians, minima and each median over ORT's. The artifacts
see the same load, so their ratios compare where the separate processes of
`bench/before_after.py` can drift apart. A benchmark, not a test.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from kernel_sums import artifacts_parser  # noqa: E402


def main(argv=None) -> int:
    ap = artifacts_parser(__doc__, "a zoo model (bench/zoo.py: light, built or pretrained)")
    ap.add_argument("--seconds", type=float, default=40.0)
    args = ap.parse_args(argv)

    import onnxruntime as ort
    from zoo import SUITE

    import tessera
    from tessera.cli.build import load_artifact

    case = SUITE[args.model]
    model = case.build()
    feed = case.feeds(model, 0)
    tessera.runtime.set_num_threads(args.threads)
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = args.threads, 1
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    want = session.run(None, feed)[0]
    span = float(np.max(want) - np.min(want)) or 1.0
    runners = []
    for artifact in args.artifacts:
        _, module = load_artifact(artifact, None)
        module.set_input(**feed)
        module.run()
        diff = np.max(np.abs(module.get_output(0).numpy() - want)) / span
        print(f"{artifact}: max |tessera - ORT| / ORT's range {diff:.2e}")
        runners.append(module.run)
    runners.append(lambda: session.run(None, feed))
    labels = [*args.artifacts, "onnxruntime"]
    times: list[list[float]] = [[] for _ in runners]
    end, turn = time.time() + args.seconds, 0
    while time.time() < end:
        turn += 1
        for k in [(turn + j) % len(runners) for j in range(len(runners))]:
            for _ in range(3):
                t0 = time.perf_counter()
                runners[k]()
                times[k].append(time.perf_counter() - t0)
    medians = [float(np.median(t)) * 1e3 for t in times]
    print(f"{args.model}: {args.threads} thread(s), {len(times[0])} runs each, "
          f"load {os.getloadavg()[0]:.1f}")  # fmt: skip
    for label, t, median in zip(labels, times, medians, strict=True):
        print(f"  {label:40s} median {median:8.3f} ms  min {min(t) * 1e3:8.3f} ms  "
              f"median/ORT {median / medians[-1]:.3f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
