"""Symbolic dims: one build for every size against a build specialized to each size and ONNX
Runtime, in turns, as ratios.

    .venv/bin/python bench/dynamic.py [--threads 1] [--repeat 50] [--models mlp,encoder,ocr]
                                      [--profile 5]

For each model of tessera.models_dynamic (an MLP over a dynamic batch, a BERT-style encoder layer
over batch and sequence, a CRNN-style recognizer over the width, a conv detector over the
batch, a bidirectional LSTM over sequence and batch, `--models lstm`), the dynamic build is
compiled once; at each of its sizes (five; three for the LSTM) a build specialized to that
size (shape_dict with the sizes) is compiled, the three agree with each other, then the dynamic
build, the specialized build and ORT run the same inputs in turns (`measure_in_blocks`). The
table gives medians, dynamic / specialized (the issue's bar: at most 1.2) and dynamic / ORT,
and the load (`uptime`) before and after; then the compile time of each model's dynamic build
and the median of its specialized builds, the compile cache off (the cost of the symbolic
kernels' size buckets and clamped tails). A measurement, not a test: nothing asserts a time.

`--profile R` adds, per size, the kernels of the two builds side by side (`GraphModule.profile`,
R rounds in turns, medians; calls matched by their source nodes) and marks each kernel more
than 1.2x slower in the dynamic build.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _cases():
    """(name, model, shape_dict of the dynamic build, [(size label, {input: array})])."""
    from tessera.models_dynamic import detector, encoder_layer, lstm_layer, mlp, ocr_recognizer

    rng = np.random.default_rng(0)

    def normal(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    yield "mlp", mlp(), None, [(f"batch {n}", {"x": normal(n, 64)}) for n in (1, 4, 16, 64, 256)]
    encoder = []
    for b, s in ((1, 16), (1, 64), (2, 128), (4, 32), (8, 128)):
        mask = (rng.random((b, s)) > 0.1).astype(np.float32)
        encoder.append((f"batch {b}, seq {s}", {"x": normal(b, s, 64), "mask": mask}))
    yield "encoder", encoder_layer(), None, encoder
    widths = (64, 128, 256, 512, 1024)
    ocr = [(f"width {w}", {"image": normal(1, 1, 32, w)}) for w in widths]
    yield "ocr", ocr_recognizer(), {"image": (1, 1, 32, ("width", 8, 2048))}, ocr
    yield (
        "detector",
        detector(),
        None,
        [(f"batch {n}", {"images": normal(n, 3, 64, 64)}) for n in (1, 2, 4, 8, 16)],
    )
    # the specialized build unrolls the steps; the dynamic one runs nn.recurrence
    lstm = [(f"seq {s}, batch 4", {"x": normal(s, 4, 64)}) for s in (4, 16, 64)]
    yield "lstm", lstm_layer(), None, lstm


def _profile(dynamic, special, rounds: int) -> None:
    """Per kernel call (matched by source nodes): median us of each build, in turns."""
    times: dict[tuple, dict[str, list]] = {}
    kernels: dict[tuple, str] = {}
    for _ in range(rounds):
        for label, module in (("dynamic", dynamic), ("special", special)):
            for call in module.profile(20):
                key = tuple(call.nodes) or (call.kernel,)
                kernels.setdefault(key, call.kernel)
                times.setdefault(key, {"dynamic": [], "special": []})[label].append(call.seconds)
    for key, both in times.items():
        d, s = (float(np.median(both[k])) * 1e6 if both[k] else 0.0 for k in both)
        flag = "  > 1.2x" if s and d > 1.2 * s else ""
        print(f"    {kernels[key][:56]:56s} {d:9.2f} {s:9.2f} us  {d / s if s else 0:5.2f}{flag}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--models", default="mlp,encoder,ocr,detector")
    ap.add_argument("--profile", type=int, default=0, help="rounds of a per-kernel profile")
    args = ap.parse_args(argv)
    os.environ.setdefault("TESSERA_NUM_THREADS", str(args.threads))
    import onnxruntime as ort

    import tessera
    from tessera.cli.bench import measure_in_blocks
    from tessera.frontend import from_onnx
    from tessera.runtime import GraphModule
    from tessera.transform.pass_context import PassContext

    def build(model, shapes):
        mod, params = from_onnx(model, shapes)
        with PassContext(config={"codegen.cache": False}):  # compile times without the cache
            lib = tessera.build(mod, target="llvm", params=params)
        return GraphModule(lib["default"]())

    wanted = set(args.models.split(","))
    print(f"load before: {os.getloadavg()}")
    print("| model | size | dynamic ms | specialized ms | ORT ms | dyn / spec | dyn / ORT |")
    print("|---|---|---|---|---|---|---|")
    compiles = []
    for name, model, shapes, sizes in _cases():
        if name not in wanted:
            continue
        start = time.perf_counter()
        dynamic = build(model, shapes)
        compile_dynamic, compile_special = time.perf_counter() - start, []
        so = ort.SessionOptions()
        so.intra_op_num_threads = args.threads
        sess = ort.InferenceSession(model.SerializeToString(), so)
        for label, feeds in sizes:
            start = time.perf_counter()
            special = build(model, {k: v.shape for k, v in feeds.items()})
            compile_special.append(time.perf_counter() - start)
            want = sess.run(None, feeds)
            for got in (dynamic.run_with(feeds), special.run_with(feeds)):
                for a, w in zip(got, want, strict=True):
                    np.testing.assert_allclose(a, w, rtol=1e-3, atol=1e-4)
            dynamic.set_input(**feeds)
            special.set_input(**feeds)
            times, _ = measure_in_blocks(
                {
                    "dynamic": dynamic.run,
                    "special": special.run,
                    "ort": lambda s=sess, f=feeds: s.run(None, f),
                },
                args.repeat,
                warmup=3,
                duration=None,
            )
            d, s, o = (float(np.median(times[k])) * 1e3 for k in ("dynamic", "special", "ort"))
            print(f"| {name} | {label} | {d:.4f} | {s:.4f} | {o:.4f} | {d / s:.2f} | {d / o:.2f} |")
            if args.profile:
                _profile(dynamic, special, args.profile)
            sys.stdout.flush()
        compiles.append(
            f"compile {name}: dynamic {compile_dynamic:.1f} s, specialized "
            f"{float(np.median(compile_special)):.1f} s (median of {len(compile_special)})"
        )
    print("\n".join(compiles))
    print(f"load after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
