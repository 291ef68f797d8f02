"""Benchmark: matrix products with few rows and wide outputs (issue 10) and attention-shaped
batch_matmuls (issue 15's ViT), tessera next to ONNX Runtime in turns, with the time to stream
the weights once from memory measured in the same run.

    .venv/bin/python bench/wide_matmul.py [--threads 2] [--repeat 20] [--cases ocr,gemm,vit_qk]

Cases (each an ONNX model of one node; float32; constant weights are initializers):
    ocr     MatMul [40 x 120] x [120 x 18710]          (an OCR model's character projection)
    gemm    Gemm [32 x 1024] x [1024 x 8210]^T          (transB=1, with a bias)
    vocab   MatMul [1 x 768] x [768 x 30522]           (a language model's vocabulary, one token)
    vit_qk  MatMul [1,12,197,64] x [1,12,64,197]       (both operands inputs)
    vit_qkt MatMul [1,12,197,64] x Transpose([1,12,197,64])   (q @ k^T as exported)
    vit_av  MatMul [1,12,197,197] x [1,12,197,64]
    clip_qk MatMul [1,8,77,64] x [1,8,64,77]

Per case: medians of tessera and ORT (runs in turns, `tessera.cli.bench.measure_in_blocks`),
their ratio, GFLOP/s, and for the cases with a constant weight the weight's bytes over the
STREAM triad bandwidth (`stream.measure_bandwidth`, same thread count): "x stream" is tessera's
time over that, the bar of issue 10 is <= 1.5; "x roof" is tessera's time over the roofline
bound max(FLOP / FMA peak, weight bytes / bandwidth) (`fma_peak.measure_fma_peak`, same
threads): where the FLOPs take longer than the weights' stream, no kernel meets the stream bar.
The load (`os.getloadavg`) is printed before and after. A benchmark, not a test: it asserts
nothing about time.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from fma_peak import measure_fma_peak  # noqa: E402
from models import compile_model, ort_session, relative_error  # noqa: E402
from stream import measure_bandwidth  # noqa: E402

from tessera.cli.bench import measure_in_blocks  # noqa: E402


def _matmul_const(m: int, k: int, n: int, seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])
    node = helper.make_node("MatMul", ["x", "w"], ["y"])
    graph = helper.make_graph([node], "matmul", [x], [y], [numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _gemm_const(m: int, k: int, n: int, seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])
    node = helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")]
    graph = helper.make_graph([node], "gemm", [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _batch_matmul(a_shape, b_shape, transpose_b=False) -> onnx.ModelProto:
    """a @ b, or a @ b^T (b given as (..., N, K) and transposed by a Transpose node, as
    attention's q @ k^T is exported)."""
    out = [*a_shape[:-1], b_shape[-2 if transpose_b else -1]]
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, list(a_shape))
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, list(b_shape))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, out)
    nodes = [helper.make_node("MatMul", ["a", "bt" if transpose_b else "b"], ["y"])]
    if transpose_b:
        perm = [*range(len(b_shape) - 2), len(b_shape) - 1, len(b_shape) - 2]
        nodes.insert(0, helper.make_node("Transpose", ["b"], ["bt"], perm=perm))
    graph = helper.make_graph(nodes, "batch_matmul", [a, b], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


# name -> (model builder, flops, weight bytes or None)
CASES = {
    "ocr": (lambda: _matmul_const(40, 120, 18710), 2 * 40 * 120 * 18710, 120 * 18710 * 4),
    "gemm": (lambda: _gemm_const(32, 1024, 8210), 2 * 32 * 1024 * 8210, 1024 * 8210 * 4),
    "vocab": (lambda: _matmul_const(1, 768, 30522), 2 * 768 * 30522, 768 * 30522 * 4),
    "vit_qk": (
        lambda: _batch_matmul((1, 12, 197, 64), (1, 12, 64, 197)),
        2 * 12 * 197**2 * 64,
        None,
    ),
    "vit_qkt": (
        lambda: _batch_matmul((1, 12, 197, 64), (1, 12, 197, 64), transpose_b=True),
        2 * 12 * 197**2 * 64,
        None,
    ),
    "vit_av": (
        lambda: _batch_matmul((1, 12, 197, 197), (1, 12, 197, 64)),
        2 * 12 * 197**2 * 64,
        None,
    ),
    "clip_qk": (lambda: _batch_matmul((1, 8, 77, 64), (1, 8, 64, 77)), 2 * 8 * 77**2 * 64, None),
}


def _feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    feeds = {}
    for inp in model.graph.input:
        shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
        feeds[inp.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def run_case(name: str, args, bandwidth: float, peak: float) -> str:
    from tessera.runtime import GraphModule, cpu

    build, flops, weight_bytes = CASES[name]
    model = build()
    feeds = _feeds(model)
    module = GraphModule(compile_model(model)["default"](cpu(0)))
    module.set_input(**feeds)
    session = ort_session(model, args.threads)
    runners = {"tessera": module.run, "ort": lambda: session.run(None, feeds)}
    times, _ = measure_in_blocks(runners, args.repeat, 3, None)
    err = relative_error([module.get_output(0).numpy()], session.run(None, feeds))
    t, o = float(np.median(times["tessera"])), float(np.median(times["ort"]))
    line = (
        f"{name:8s} tessera {t * 1e3:8.3f} ms ({flops / t / 1e9:6.1f} GFLOP/s)  "
        f"ort {o * 1e3:8.3f} ms ({flops / o / 1e9:6.1f} GFLOP/s)  tessera/ort {t / o:5.2f}"
    )
    compute = flops / (peak * 1e9)
    if weight_bytes:
        stream = weight_bytes / (bandwidth * 1e9)
        line += f"  stream {stream * 1e3:6.3f} ms  x stream {t / stream:5.2f}"
        compute = max(compute, stream)
    line += f"  x roof {t / compute:5.2f}"
    return line + f"  rel err {err:.1e}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--cases", default=",".join(CASES))
    args = parser.parse_args(argv)
    from tessera.runtime import set_num_threads

    set_num_threads(args.threads)
    print(f"load before: {os.getloadavg()}")
    bandwidth = measure_bandwidth(args.threads, kernels=("triad",))["triad"]
    peak = measure_fma_peak(args.threads)
    print(
        f"STREAM triad at {args.threads} thread(s): {bandwidth:.1f} GB/s; "
        f"FMA peak {peak:.0f} GFLOP/s"
    )
    for name in args.cases.split(","):
        print(run_case(name, args, bandwidth, peak), flush=True)
    print(f"load after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
