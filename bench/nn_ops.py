"""Benchmark: single non-conv, non-matmul kernels of issue 10 next to ONNX Runtime, in turns.

    .venv/bin/python bench/nn_ops.py [--cases convT_ppocr_a,lrn_alexnet] [--threads 2]
                                     [--repeat 20]

Each case is a one-node ONNX model at a shape taken from a zoo model (PP-OCR det's upsampling
head, AlexNet's LRN, ...). Runners, measured in turns (`tessera.cli.bench.measure_in_blocks`):
`tessera` (the default build), `ort` (ONNX Runtime at the same threads) and, where a case has
one, `before` (the same node built the way it ran before this change: the transposed conv with
its weight fed at run time keeps the direct `nn.conv2d_transpose` kernel). Prints medians and
the ratios to ORT, and the load average. `--cpu-time`: each run's process CPU time at 1
thread instead of wall time (steadier on a loaded machine). This is a benchmark, not a test:
nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from unittest import mock

import numpy as np
import onnx
from onnx import helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from models import compile_model  # noqa: E402

import tessera  # noqa: E402
from tessera.cli.bench import measure_in_blocks  # noqa: E402
from tessera.frontend.testing import make_model  # noqa: E402
from tessera.runtime import GraphModule, cpu  # noqa: E402


@dataclass
class Case:
    name: str
    node: dict  # op_type and attributes
    inputs: dict  # name -> shape (run-time inputs)
    weights: dict = field(default_factory=dict)  # name -> shape (constants)
    before_feeds_weights: bool = False  # `before`: the weights as run-time inputs


N = helper.make_node
CASES = [
    # PP-OCR det (480x640): the two 2x2 stride-2 upsampling convs of its DB head
    Case(
        "convT_ppocr_a",
        dict(op_type="ConvTranspose", strides=[2, 2]),
        {"x": (1, 24, 120, 160)},
        {"w": (24, 24, 2, 2)},
        True,
    ),
    Case(
        "convT_ppocr_b",
        dict(op_type="ConvTranspose", strides=[2, 2]),
        {"x": (1, 24, 240, 320)},
        {"w": (24, 1, 2, 2)},
        True,
    ),
    # a decoder's 3x3 stride-2 conv with output padding, and a DCGAN-style 4x4 stride 2
    Case(
        "convT_k3s2",
        dict(op_type="ConvTranspose", strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]),
        {"x": (1, 64, 56, 56)},
        {"w": (64, 32, 3, 3)},
        True,
    ),
    Case(
        "convT_k4s2",
        dict(op_type="ConvTranspose", strides=[2, 2], pads=[1, 1, 1, 1]),
        {"x": (1, 128, 32, 32)},
        {"w": (128, 64, 4, 4)},
        True,
    ),
    # AlexNet's two LRNs, GoogLeNet's first
    Case(
        "lrn_alexnet_1",
        dict(op_type="LRN", size=5, alpha=1e-4, beta=0.75, bias=1.0),
        {"x": (1, 96, 55, 55)},
    ),
    Case(
        "lrn_alexnet_2",
        dict(op_type="LRN", size=5, alpha=1e-4, beta=0.75, bias=1.0),
        {"x": (1, 256, 27, 27)},
    ),
    Case(
        "lrn_googlenet",
        dict(op_type="LRN", size=5, alpha=1e-4, beta=0.75, bias=1.0),
        {"x": (1, 64, 56, 56)},
    ),
    # softmax over short rows (attention of a small transformer) and one long row
    Case("softmax_short", dict(op_type="Softmax", axis=-1), {"x": (12, 64, 64)}),
    Case("softmax_long", dict(op_type="Softmax", axis=-1), {"x": (4, 32768)}),
    # yolov8n_320's neck: nearest 2x upsampling and a concat
    Case(
        "resize_yolo",
        dict(op_type="Resize", mode="nearest"),
        {"x": (1, 128, 10, 10)},
        {"roi": (0,), "scales": (4,)},
    ),
]


def _model(case: Case, weights_as_inputs: bool):
    """The case's ONNX model and its feeds; the data do not depend on `weights_as_inputs`."""
    rng = np.random.default_rng(0)
    data = {k: rng.standard_normal(s).astype("float32") for k, s in case.inputs.items()}
    weights = {k: (rng.standard_normal(s) * 0.1).astype("float32") for k, s in case.weights.items()}
    if case.node["op_type"] == "Resize":
        weights = {"roi": np.zeros(0, "float32"), "scales": np.array([1, 1, 2, 2], "float32")}
    attrs = {k: v for k, v in case.node.items() if k != "op_type"}
    node = N(case.node["op_type"], list(data) + list(weights), ["y"], **attrs)
    feeds = dict(data) | (weights if weights_as_inputs else {})
    consts = {} if weights_as_inputs else weights
    model = make_model([node], {k: (v.shape, "float32") for k, v in feeds.items()}, ["y"], consts)
    return model, feeds


def _tessera_runner(model, feeds):
    lib = compile_model(model)
    m = GraphModule(lib["default"](cpu(0)))
    for k, v in feeds.items():
        m.set_input(k, v)
    m.run()
    return m.run, m.get_output(0).numpy()


def _ort_runner(model, feeds, threads):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    out = sess.run(None, feeds)[0]
    return (lambda: sess.run(None, feeds)), out


def run_case(case: Case, threads: int, repeat: int) -> str:
    model, feeds = _model(case, False)
    runners, outputs = {}, {}
    runners["tessera"], outputs["tessera"] = _tessera_runner(model, feeds)
    if case.before_feeds_weights:
        before, bfeeds = _model(case, True)
        runners["before"], outputs["before"] = _tessera_runner(before, bfeeds)
    runners["ort"], outputs["ort"] = _ort_runner(model, feeds, threads)
    return _report(case.name, runners, outputs, repeat)


CPU_TIME = False  # --cpu-time: see cpu_times


def cpu_times(runners: dict, repeat: int) -> dict:
    """The process CPU seconds of each run, in turns of one (at 1 thread: on a machine whose
    cores other work shares, the CPU time a run used moves less than its wall time)."""
    times = {k: [] for k in runners}
    for _ in range(repeat):
        for k, fn in runners.items():
            fn()
            start = time.process_time()
            fn()
            times[k].append(time.process_time() - start)
    return times


def _report(name, runners, outputs, repeat) -> str:
    """Medians in turns, ratios to ORT, and the error relative to ORT's output range."""
    ort_range = float(np.ptp(outputs["ort"])) or 1.0
    errs = {k: float(np.abs(v - outputs["ort"]).max()) / ort_range for k, v in outputs.items()}
    if CPU_TIME:
        times = cpu_times(runners, repeat)
    else:
        times, _ = measure_in_blocks(runners, repeat, warmup=2, duration=None)
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    cells = [f"{k} {med[k]:.3f} ms ({med[k] / med['ort']:.2f}x ORT, err {errs[k]:.1e})"
             for k in runners if k != "ort"]  # fmt: skip
    return f"| {name} | ORT {med['ort']:.3f} ms | " + " | ".join(cells) + " |"


def _direct_conv_transpose(b, x, w, **attrs):
    nd = x.type.ndim - 2
    return b.call(f"nn.conv{nd}d_transpose", x, w, **attrs)


def run_model(name: str, threads: int, repeat: int) -> str:
    """A zoo model: `tessera`, `before` (its transposed convs on the direct kernel), ORT."""
    import fetch_zoo

    from tessera.frontend import onnx_nn

    source = next(s for s in fetch_zoo.SOURCES if s.name == name)
    model = onnx.load(fetch_zoo.fetch(source, fetch_zoo.cache_dir()))
    feeds = fetch_zoo.feeds(source, model, 0)
    runners, outputs = {}, {}
    runners["tessera"], outputs["tessera"] = _tessera_runner(model, feeds)
    with mock.patch.object(onnx_nn, "emit_conv_transpose", _direct_conv_transpose):
        runners["before"], outputs["before"] = _tessera_runner(model, feeds)
    runners["ort"], outputs["ort"] = _ort_runner(model, feeds, threads)
    return _report(name, runners, outputs, repeat)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default=None, help="comma-separated case names (default: all)")
    p.add_argument("--model", default=None, help="a zoo model (bench/fetch_zoo.py) instead")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--cpu-time", action="store_true", help="CPU time per run at 1 thread")
    args = p.parse_args(argv)
    global CPU_TIME
    CPU_TIME = args.cpu_time
    args.threads = 1 if args.cpu_time else args.threads
    tessera.runtime.set_num_threads(args.threads)
    chosen = set(args.cases.split(",")) if args.cases else None
    print(f"load before: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}; threads {args.threads}")
    if args.model:
        print(run_model(args.model, args.threads, args.repeat), flush=True)
        chosen = set()
    for case in CASES:
        if chosen is None or case.name in chosen:
            print(run_case(case, args.threads, args.repeat), flush=True)
    print(f"load after: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
