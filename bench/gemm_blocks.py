"""Benchmark: tessera's float32 GEMMs (BERT-base's matmul shapes and a few large ones) next to
numpy (OpenBLAS) and ONNX Runtime, in turns, with the machine's FMA peak; optionally the same
kernels with knobs set (issue 11: the GEMM cache-blocking knobs of topi/x86/dense.py).

    .venv/bin/python bench/gemm_blocks.py [--cases bert_qkv,bert_ffn1,...] [--threads 2]
        [--repeat 15] [--knobs '{"kc_scope": "block", "kc": 256}' (or a list)] [--no-ort]
        [--single-calls]

Per case (each an ONNX model of one MatMul; a constant weight is an initializer, so tessera
packs it: the "packed" implementation; attention's products have two inputs: "blocked"): the
medians of the runners' times (`sgemm.alternate`: A, B, A, B, ... with `--gap` seconds before
each turn, so that OpenBLAS's spinning workers are idle), their GFLOP/s and share of the
measured FMA peak (`fma_peak.measure_fma_peak`, same threads), the ratios to tessera's default
("again": a second build of the default, measured as one more runner: the A/A spread of the
run), and each runner's fastest sample and its ratio to the default's fastest ("min ... x";
"p10": the same for the 10th percentiles): on a loaded machine the low quantiles are the
steadier comparison (a preempted sample is slow, never fast), as in `kernel_sums.py`.
`--single-calls`: samples of one call each, `--repeat` rounds in turns with no gap (many short
samples; OpenBLAS's spinning workers then cost numpy's neighbours). `--knobs`: a JSON dict (or
a list of them) of knob values applied over each GEMM task's default config (valid ones only;
the config used is printed), run as "knobs1", "knobs2", ... next to the default. The load
(`os.getloadavg`) is printed
before and after. A benchmark, not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from fma_peak import measure_fma_peak  # noqa: E402
from models import ort_session  # noqa: E402
from sgemm import alternate  # noqa: E402
from wide_matmul import _batch_matmul, _feeds, _matmul_const  # noqa: E402

# name -> (model builder, flops)
CASES = {
    "bert_qkv": (lambda: _matmul_const(128, 768, 768), 2 * 128 * 768 * 768),
    "bert_ffn1": (lambda: _matmul_const(128, 768, 3072), 2 * 128 * 768 * 3072),
    "bert_ffn2": (lambda: _matmul_const(128, 3072, 768), 2 * 128 * 3072 * 768),
    "bert_qk": (
        lambda: _batch_matmul((1, 12, 128, 64), (1, 12, 64, 128)),
        2 * 12 * 128 * 128 * 64,
    ),
    "bert_av": (
        lambda: _batch_matmul((1, 12, 128, 128), (1, 12, 128, 64)),
        2 * 12 * 128 * 128 * 64,
    ),
    "sq1024": (lambda: _matmul_const(1024, 1024, 1024), 2 * 1024**3),
    "wide4096": (lambda: _matmul_const(512, 4096, 1024), 2 * 512 * 4096 * 1024),
    # issue 10's wide MatMul (an OCR model's character projection), and the same with N a
    # multiple of the panel width (whole panels; rows of C start on cache lines)
    "ocr": (lambda: _matmul_const(40, 120, 18710), 2 * 40 * 120 * 18710),
    "ocr_whole": (lambda: _matmul_const(40, 120, 18720), 2 * 40 * 120 * 18720),
}


def _numpy_runner(model, feeds):
    from onnx import numpy_helper

    consts = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    node = next(n for n in model.graph.node if n.op_type == "MatMul")
    a, b = (consts.get(n, feeds.get(n)) for n in node.input)
    out = np.empty(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1]),
                   dtype=np.float32)  # fmt: skip
    return lambda: np.matmul(a, b, out=out)


def with_knobs(tasks, target, knobs: dict) -> dict:
    """{task: its default config with `knobs` set} for the GEMM tasks where that is valid."""
    from tessera.topi.strategy import Config

    configs = {}
    for task in tasks:
        default = task.default(target)
        if "kc" not in default:
            continue
        config = Config(default.impl, {**default.knobs(), **knobs})
        if task.valid(config, target):
            configs[task] = config
    return configs


def build(model, target, knobs: dict | None):
    import tessera
    from tessera import autotune
    from tessera.frontend import from_onnx
    from tessera.transform import PassContext

    mod, params = from_onnx(model)
    configs = None
    if knobs is not None:
        with PassContext(opt_level=3):
            tasks = autotune.extract_tasks(mod, params, target)
        configs = with_knobs(tasks, target, knobs)
        print("   ", "; ".join(f"{c}" for c in configs.values()) or "no valid config", knobs)
    with PassContext(opt_level=3):
        return tessera.build(mod, target=target, params=params, configs=configs)


def single_call_turns(fns: dict, rounds: int) -> dict[str, list[float]]:
    """Seconds of single calls, one call of each runner per round in turns (the order flipping
    every round), no gap: many short samples, whose low quantiles hold steady under load."""
    for fn in fns.values():  # warm up: caches, page faults, thread pools
        fn()
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for r in range(rounds):
        for k in list(fns)[:: 1 if r % 2 == 0 else -1]:
            start = time.perf_counter()
            fns[k]()
            samples[k].append(time.perf_counter() - start)
    return samples


def run_case(name: str, args, peak: float) -> None:
    import tessera
    from tessera.runtime import GraphModule, cpu

    target = tessera.Target("llvm")
    make, flops = CASES[name]
    model = make()
    feeds = _feeds(model)
    runners, modules = {}, {}
    variants = {"tessera": None, "again": None}  # the default twice: the A/A spread
    if args.knobs:
        knobs = json.loads(args.knobs)
        for i, k in enumerate(knobs if isinstance(knobs, list) else [knobs]):
            variants[f"knobs{i + 1}"] = k
    for label, knobs in variants.items():
        m = GraphModule(build(model, target, knobs)["default"](cpu(0)))
        m.set_input(**feeds)
        modules[label] = m
        runners[label] = m.run
    runners["numpy"] = _numpy_runner(model, feeds)
    if not args.no_ort:
        session = ort_session(model, args.threads)
        runners["ort"] = lambda: session.run(None, feeds)
    if args.single_calls:
        times = single_call_turns(runners, args.repeat)
    else:
        times = alternate(runners, args.repeat, args.gap)
    expected = runners["numpy"]()
    for label, m in modules.items():
        got = m.get_output(0).numpy()
        err = float(np.abs(got - expected).max() / np.abs(expected).max())
        if err > 1e-4:
            print(f"    {label}: WRONG, relative error {err:.1e}")
    base, base_min = float(np.median(times["tessera"])), min(times["tessera"])
    base_p10 = float(np.percentile(times["tessera"], 10))
    parts = []
    for label, t in times.items():
        t, lo, p10 = float(np.median(t)), min(t), float(np.percentile(t, 10))
        gf = flops / t / 1e9
        parts.append(
            f"{label} {t * 1e3:7.3f} ms {gf:6.1f} GF/s {100 * gf / peak:4.0f}% x{t / base:5.2f}"
            f" (min {lo * 1e3:.3f} x{lo / base_min:4.2f}, p10 x{p10 / base_p10:4.2f})"
        )
    print(f"{name:9s} " + " | ".join(parts), flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--knobs", default=None, help="JSON dict of knob values over defaults")
    parser.add_argument("--no-ort", action="store_true")
    parser.add_argument("--gap", type=float, default=0.15, help="seconds between turns")
    parser.add_argument(
        "--single-calls", action="store_true",
        help="samples of one call each, --repeat rounds, no gap (single_call_turns)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    from tessera.runtime import set_num_threads

    set_num_threads(args.threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    print(f"load before: {os.getloadavg()}")
    peak = measure_fma_peak(args.threads)
    print(
        f"FMA peak at {args.threads} thread(s): {peak:.0f} GFLOP/s; ratios x: to tessera's default"
    )
    for name in args.cases.split(","):
        run_case(name, args, peak)
    print(f"load after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
