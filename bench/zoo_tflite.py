"""Benchmark: the zoo's TFLite part — the float models inside the mediapipe wheel (face, hand and
pose landmarks, palm and pose detection, selfie segmentation) compiled by tessera, next to the
TFLite interpreter they were made for (ai-edge-litert, XNNPACK, the same thread count), in turns.

    .venv/bin/python bench/zoo_tflite.py [--models hand_landmark_full,selfie_segmentation]
        [--threads 2] [--repeat 30] [--markdown F]

The wheel is installed by scripts/setup.d/22-tflite.sh (without its dependencies: only its
model files are read). The ONNX zoo (`bench/zoo.py`) compares with ONNX Runtime; these models
have no ONNX form, so their reference is the TFLite interpreter (`selfie_segmentation` uses
MediaPipe's custom Convolution2DTransposeBias, which the interpreter's XNNPACK delegate runs; a
model the interpreter cannot run is timed alone, its note says why). Medians of the timed runs;
agreement is the largest difference over the largest magnitude of each output (random inputs:
the segmentation mask is near zero, so its relative figure is of tiny values). This is a
benchmark, not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from models import geometric_mean  # noqa: E402

from tessera.cli.bench import measure_in_blocks  # noqa: E402

MODELS = {  # name -> path inside mediapipe/modules
    "face_landmark": "face_landmark/face_landmark",
    "hand_landmark_full": "hand_landmark/hand_landmark_full",
    "hand_landmark_lite": "hand_landmark/hand_landmark_lite",
    "palm_detection_full": "palm_detection/palm_detection_full",
    "pose_detection": "pose_detection/pose_detection",
    "pose_landmark_full": "pose_landmark/pose_landmark_full",
    "iris_landmark": "iris_landmark/iris_landmark",
    "selfie_segmentation": "selfie_segmentation/selfie_segmentation",
}


def model_bytes(name: str) -> bytes:
    dist = importlib.metadata.distribution("mediapipe")
    return dist.locate_file(f"mediapipe/modules/{MODELS[name]}.tflite").read_bytes()


def interpreter(buffer: bytes, threads: int):
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_content=buffer, num_threads=threads)
    it.allocate_tensors()
    return it


def run_one(name: str, args) -> dict:
    import tessera
    from tessera.frontend import from_tflite
    from tessera.runtime import GraphModule

    row = {"name": name}
    buffer = model_bytes(name)
    mod, params = from_tflite(buffer)
    shape = mod["main"].params[0].type.shape
    x = np.random.default_rng(0).uniform(0, 1, shape).astype(np.float32)
    start = time.perf_counter()
    lib = tessera.build(mod, target="llvm", params=params)
    row["compile_s"] = time.perf_counter() - start
    m = GraphModule(lib["default"](tessera.cpu(0)))
    m.set_input(0, x)
    runners = {"tessera": m.run}
    it = None
    try:
        it = interpreter(buffer, args.threads)
        index = it.get_input_details()[0]["index"]
        it.set_tensor(index, x)
        runners["tflite"] = it.invoke
    except Exception as e:  # a custom op the interpreter lacks
        row["note"] = f"TFLite interpreter: {str(e).splitlines()[0][:100]}"
    times, _ = measure_in_blocks(runners, args.repeat, 3, args.max_seconds)
    row["tessera_ms"] = statistics.median(times["tessera"]) * 1e3
    if it is not None:
        row["tflite_ms"] = statistics.median(times["tflite"]) * 1e3
        m.run()
        it.invoke()
        expected = [it.get_tensor(d["index"]) for d in it.get_output_details()]
        got = [m.get_output(k).numpy() for k in range(m.get_num_outputs())]
        row["rel_err"] = max(
            float(np.abs(g - e).max()) / (float(np.abs(e).max()) or 1.0)
            for g, e in zip(got, expected, strict=True)
        )
    return row


def table(rows: list[dict]) -> list[str]:
    lines = [
        "| model | tessera ms | TFLite ms | tessera/TFLite | compile s | max rel err | note |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        ratio = r["tessera_ms"] / r["tflite_ms"] if "tflite_ms" in r else None
        cells = [
            r["name"],
            f"{r['tessera_ms']:.2f}",
            f"{r['tflite_ms']:.2f}" if "tflite_ms" in r else "-",
            f"{ratio:.2f}" if ratio else "-",
            f"{r['compile_s']:.1f}",
            f"{r['rel_err']:.1e}" if "rel_err" in r else "-",
            r.get("note", ""),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    ratios = [r["tessera_ms"] / r["tflite_ms"] for r in rows if "tflite_ms" in r]
    if ratios:
        lines.append("")
        lines.append(
            f"geomean tessera/TFLite {geometric_mean(ratios):.2f} over {len(ratios)} models; "
            f"worst {max(ratios):.2f}"
        )
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--max-seconds", type=float, default=20.0)
    parser.add_argument("--markdown", help="also write the table to this file")
    args = parser.parse_args(argv)
    from tessera.runtime import set_num_threads

    set_num_threads(args.threads)
    try:
        importlib.metadata.distribution("mediapipe")
    except importlib.metadata.PackageNotFoundError:
        print("the mediapipe wheel is not installed: scripts/setup.d/22-tflite.sh", file=sys.stderr)
        return 1
    rows = []
    for name in args.models.split(","):
        if name not in MODELS:
            parser.error(f"unknown model {name!r} (models: {', '.join(MODELS)})")
        row = run_one(name, args)
        rows.append(row)
        tflite = f"{row['tflite_ms']:.2f} ms" if "tflite_ms" in row else "-"
        load = os.getloadavg()[0]
        print(f"{name}: tessera {row['tessera_ms']:.2f} ms, TFLite {tflite} (load {load:.1f})",
              flush=True)  # fmt: skip
    lines = table(rows)
    print("\n".join(lines))
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
