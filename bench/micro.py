"""Benchmark: the MLPerf Tiny models (tessera/micro/mlperf_tiny.py) compiled for a Cortex-M and
run on an emulated board under QEMU, checked against the host build and ONNX Runtime.

    .venv/bin/python bench/micro.py [--board mps2-an386] [--models kws_ds_cnn,ic_resnet8]
                                    [--dtype int8|float32] [--json out.json] [--mattr=-mve]

For each model: build for the board's CPU (target "c -device=micro"), run the host build (the
same C sources compiled by this machine's compiler), the exported sources built here as a
library (HostBuild), and the firmware on the board through tessera.micro.Session; report the
instructions executed on the board (QEMU's plugin: exact, not a time), flash (weights + code)
and RAM (arena + inputs/outputs + stack). int8 (the default, MLPerf Tiny's setting): each model
quantized by mlperf_tiny.quantize_int8 (int8 input and output, as MLPerf Tiny's int8 models
take them); it matches when the board's outputs equal the host build's exactly, and the column
`ORT steps` is the largest difference from ONNX Runtime in units of the output's quantization
step. float32: a model matches when the board's outputs
equal the host build's within rtol 1e-5 (the two libms' expf may differ in the last bit).
The last line is the summary: `micro: K/N models match the host build, ...`. `--mattr=-mve`
builds for the board's CPU without its MVE kernels (the M55's DSP kernels, for comparison).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import onnx

import tessera
from tessera.micro import Session, boards, mlperf_tiny
from tessera.micro.host import HostBuild
from tessera.runtime import GraphModule, cpu

RTOL, ATOL = 1e-5, 1e-6


def _ort(model, x):
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"input": x})[0]


def sample_input(model, shape) -> np.ndarray:
    """A seeded input: int8 values for an int8 model, standard normal floats otherwise."""
    rng = np.random.default_rng(1)
    if model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.INT8:
        return rng.integers(-128, 128, shape).astype(np.int8)
    return rng.standard_normal(shape).astype(np.float32)


def output_step(model) -> float | None:
    """The quantization step of a quantized model's output: 1 for an int8 output, else the
    scale of the DequantizeLinear that gives it."""
    from onnx import numpy_helper

    if model.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.INT8:
        return 1.0
    out = model.graph.output[0].name
    inits = {i.name: i for i in model.graph.initializer}
    for node in model.graph.node:
        if out in node.output and node.op_type == "DequantizeLinear":
            return float(numpy_helper.to_array(inits[node.input[1]]).reshape(-1)[0])
    return None


def _max_diff(a, b) -> float:
    return float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max())


def _match(a, b, int8: bool) -> bool:
    return bool(np.array_equal(a, b) if int8 else np.allclose(a, b, rtol=RTOL, atol=ATOL))


def bench_model(name: str, board: str, dtype: str = "int8", mattr: str = "") -> dict:
    int8 = dtype == "int8"
    model = mlperf_tiny.MODELS[name]()
    if int8:
        model = mlperf_tiny.quantize_int8(model)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = sample_input(model, shape)
    mcpu = boards.get_board(board).mcpu
    start = time.perf_counter()
    mod, params = tessera.frontend.from_onnx(model, {"input": tuple(shape)})
    target = f"c -device=micro -mcpu={mcpu}" + (f" -mattr={mattr}" if mattr else "")
    lib = tessera.build(mod, target=target, params=params)
    compile_s = time.perf_counter() - start
    m = GraphModule(lib["default"](cpu(0)))
    m.set_input("input", x)
    m.run()
    host = m.get_output(0).numpy().copy()
    exported = HostBuild(lib.c_sources(), lib.plan).invoke([x])[0]
    with Session(lib, board=board) as s:
        s.set_input("input", x)
        counts = s.run()
        device = s.get_output(0)
    reference = _ort(model, x)
    step = output_step(model) if int8 else None
    report = lib.memory_report()
    layers = sorted(
        zip(counts, (c["kernel"] for c in lib.plan["calls"]), strict=True), reverse=True
    )
    return {
        "model": name,
        "board": board,
        "compile_s": round(compile_s, 2),
        "dtype": dtype,
        "matches_host": _match(device, host, int8),
        "max_abs_diff_host": float(np.abs(device.astype(np.float64) - host).max()),
        "exported_matches_host": _match(exported, host, int8),
        "max_abs_diff_ort": None if reference is None else _max_diff(device, reference),
        "ort_steps": None
        if reference is None or step is None
        else _max_diff(device, reference) / step,
        "instructions": int(sum(counts)),
        "top_calls": [{"kernel": k, "instructions": int(n)} for n, k in layers[:3]],
        "flash_bytes": report["flash_bytes"],
        "ram_bytes": report["ram_bytes"],
    }


def _kib(n: int) -> str:
    return f"{n / 1024:.0f}K"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--board", default="mps2-an386", choices=sorted(boards.BOARDS))
    parser.add_argument("--models", default=",".join(mlperf_tiny.MODELS))
    parser.add_argument("--dtype", default="int8", choices=("int8", "float32"))
    parser.add_argument("--json", help="write the results to this file")
    parser.add_argument("--mattr", default="", help="CPU features off or on: -mve")
    args = parser.parse_args()
    names = [n for n in args.models.split(",") if n]
    results = []
    header = f"{'model':16} {'insns':>12} {'flash':>8} {'(code)':>7} {'RAM':>8} {'(arena)':>8}"
    print(header + "  host  exported  max|dev-host|  max|dev-ort|  ORT steps  compile")
    for name in names:
        r = bench_model(name, args.board, args.dtype, args.mattr)
        results.append(r)
        flash, ram = r["flash_bytes"], r["ram_bytes"]
        ort = "-" if r["max_abs_diff_ort"] is None else f"{r['max_abs_diff_ort']:.1e}"
        steps = "-" if r["ort_steps"] is None else f"{r['ort_steps']:.2f}"
        print(
            f"{name:16} {r['instructions']:12,d} {_kib(flash['total']):>8} "
            f"{_kib(flash['code']):>7} {_kib(ram['total']):>8} {_kib(ram['arena']):>8}  "
            f"{'yes' if r['matches_host'] else 'NO':4}  "
            f"{'yes' if r['exported_matches_host'] else 'NO':8}  "
            f"{r['max_abs_diff_host']:12.1e}  {ort:>12}  {steps:>9}  {r['compile_s']:6.1f} s",
            flush=True,
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    good = sum(r["matches_host"] for r in results)
    board = boards.get_board(args.board)
    sizes = ", ".join(
        f"{r['model']} {r['instructions'] / 1e6:.1f}M insns "
        f"RAM {_kib(r['ram_bytes']['total'])} flash {_kib(r['flash_bytes']['total'])}"
        for r in results
    )
    print(
        f"micro: {good}/{len(results)} models match the host build, {args.dtype} on {board.name} "
        f"({board.description}{', -mattr=' + args.mattr if args.mattr else ''}); {sizes}"
    )


if __name__ == "__main__":
    main()
