"""Control flow run natively (If, Loop) against ONNX Runtime, in turns, as ratios.

    .venv/bin/python bench/control_flow.py [--threads 1] [--repeat 200]

Models: `branch_on_input` (an If on an input's value: the cost of a branch), `greedy_decoder`
(a Loop that decodes to EOS: per-step cost with the step count decided by the data) and, when
fetched (bench/fetch_zoo.py), `silero_vad` (a real model whose If picks the 16 kHz path). Each is
compiled once; tessera and ORT run the same inputs in turns (`measure_in_blocks`); the table
gives medians and tessera / ORT (below 1: tessera faster), and the load (`uptime`) of the run.
This is a measurement, not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SILERO = Path.home() / ".cache" / "tessera-zoo" / "models" / "silero_vad.onnx"


def _cases():
    from tessera.models_control import branch_on_input, greedy_decoder

    rng = np.random.default_rng(0)
    yield (
        "branch_on_input",
        branch_on_input(),
        None,
        {
            "x": rng.standard_normal((2, 3)).astype(np.float32),
            "flag": np.array(1.0, np.float32),
        },
    )
    yield (
        "greedy_decoder",
        greedy_decoder(vocab=64, hidden=64, max_len=32),
        None,
        {
            "src": rng.integers(0, 64, 5).astype(np.int64),
        },
    )
    if SILERO.exists():
        yield (
            "silero_vad",
            str(SILERO),
            {"input": (1, 512), "state": (2, 1, 128), "sr": ()},
            {
                "input": (rng.standard_normal((1, 512)) * 0.1).astype(np.float32),
                "state": np.zeros((2, 1, 128), np.float32),
                "sr": np.array(16000, np.int64),
            },
        )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=200)
    args = ap.parse_args(argv)
    os.environ.setdefault("TESSERA_NUM_THREADS", str(args.threads))
    import onnx
    import onnxruntime as ort

    import tessera
    from tessera.cli.bench import measure_in_blocks
    from tessera.frontend import from_onnx
    from tessera.runtime import GraphModule

    print(f"load before: {os.getloadavg()}")
    print("| model | steps | tessera ms | ORT ms | tessera / ORT |")
    print("|---|---|---|---|---|")
    for name, model, shapes, feeds in _cases():
        proto = onnx.load(model) if isinstance(model, str) else model
        mod, params = from_onnx(proto, shapes)
        m = GraphModule(tessera.build(mod, target="llvm", params=params)["default"]())
        so = ort.SessionOptions()
        so.intra_op_num_threads = args.threads
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # silero's If
        sess = ort.InferenceSession(proto.SerializeToString(), so)
        m.set_input(**feeds)
        got, want = m.run_with(feeds), sess.run(None, feeds)
        for a, w in zip(got, want, strict=True):
            np.testing.assert_allclose(a, w, rtol=1e-3, atol=1e-4)
        steps = len(got[0]) if name == "greedy_decoder" else "-"
        times, _ = measure_in_blocks(
            {"tessera": m.run, "ort": lambda s=sess, f=feeds: s.run(None, f)},
            args.repeat,
            warmup=5,
            duration=None,
        )
        t, o = (float(np.median(times[k])) * 1e3 for k in ("tessera", "ort"))
        print(f"| {name} | {steps} | {t:.4f} | {o:.4f} | {t / o:.2f} |")
    print(f"load after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
