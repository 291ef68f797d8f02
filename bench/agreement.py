"""Numerical agreement with a float64 truth (issue 10, part 4): who is off, tessera or ORT?

    .venv/bin/python bench/agreement.py [--models ppocr_det,yolov8n_320] [--seed 0]

A float32 model's two float32 runs (tessera and ONNX Runtime) differ by the error of both; this
script measures each against the truth: the same model with every float32 tensor (inputs,
weights, constants, value types) made float64 and run by tessera's interpreter (the numpy
references of the ops). Per model it prints the largest error relative to the truth's output
range of tessera (compiled, default options), of ORT (all graph optimizations, and none), and
of tessera's float32 interpreter, and the tessera-ORT difference that `bench/zoo.py` reports.
Models: the pretrained ones of `bench/fetch_zoo.py` whose ops all have float64 references.
This is a measurement, not a test.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fetch_zoo  # noqa: E402
from models import compile_model  # noqa: E402

from tessera.frontend import from_onnx  # noqa: E402
from tessera.graph import run_function  # noqa: E402
from tessera.runtime import GraphModule, cpu  # noqa: E402


def float64_model(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with its float32 tensors, constants and value types in float64."""
    out = onnx.ModelProto()
    out.CopyFrom(model)

    def widen(t):
        if t.data_type == TensorProto.FLOAT:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float64), t.name))

    for t in out.graph.initializer:
        widen(t)
    for node in out.graph.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.TENSOR:
                widen(a.t)
            if node.op_type == "Cast" and a.name == "to" and a.i == TensorProto.FLOAT:
                a.i = TensorProto.DOUBLE
    for v in [*out.graph.input, *out.graph.output, *out.graph.value_info]:
        if v.type.tensor_type.elem_type == TensorProto.FLOAT:
            v.type.tensor_type.elem_type = TensorProto.DOUBLE
    return out


def _ort(model, feeds, optimized: bool):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    if not optimized:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _compiled(model, feeds):
    m = GraphModule(compile_model(model)["default"](cpu(0)))
    for k, v in feeds.items():
        m.set_input(k, v)
    m.run()
    return [m.get_output(i).numpy() for i in range(m.get_num_outputs())]


def _error(got, truth) -> float:
    """The largest error over the outputs, relative to each float output's range."""
    worst = 0.0
    for g, t in zip(got, truth, strict=True):
        if np.issubdtype(t.dtype, np.floating):
            scale = float(np.ptp(t)) or 1.0
            worst = max(worst, float(np.abs(g.astype(np.float64) - t).max()) / scale)
    return worst


def measure(name: str, seed: int) -> str:
    source = next(s for s in fetch_zoo.SOURCES if s.name == name)
    model = onnx.load(fetch_zoo.fetch(source, fetch_zoo.cache_dir()))
    feeds = fetch_zoo.feeds(source, model, seed)
    try:
        mod64, params64 = from_onnx(float64_model(model))
        feeds64 = {
            k: v.astype(np.float64) if v.dtype == np.float32 else v for k, v in feeds.items()
        }
        truth = run_function(mod64["main"], feeds64, params64)
    except Exception as err:  # an op without a float64 reference: no truth for this model
        return f"| {name} | no float64 truth: {type(err).__name__}: {str(err)[:80]} |"
    mod, params = from_onnx(model)
    runs = {
        "tessera": _compiled(model, feeds),
        "ORT": _ort(model, feeds, True),
        "ORT unoptimized": _ort(model, feeds, False),
        "tessera interpreter": run_function(mod["main"], feeds, params),
    }
    cells = [f"{_error(v, truth):.1e}" for v in runs.values()]
    cells.append(f"{_error(runs['tessera'], [r.astype(np.float64) for r in runs['ORT']]):.1e}")
    return f"| {name} | " + " | ".join(cells) + " |"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(s.name for s in fetch_zoo.SOURCES))
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    print("error / output range against the float64 truth")
    print("| model | tessera | ORT | ORT unoptimized | tessera interpreter | tessera vs ORT |")
    print("|---|---|---|---|---|---|")
    for name in args.models.split(","):
        print(measure(name, args.seed), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
