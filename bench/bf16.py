"""Benchmark: bf16 (PassContext config {"precision": "bf16"}) against fp32, tessera against
ONNX Runtime fp32, in one process, batch 1, runners in turns.

    .venv/bin/python bench/bf16.py [--model bert] [--threads 2] [--runs 10]
    .venv/bin/python bench/bf16.py --model resnet50

Three runners (medians in ms): tessera fp32, tessera bf16, ONNX Runtime fp32. Accuracy: the
SQNR of the bf16 output against the fp32 one, on the timed input. `--model`: `bert`
(bench/model_zoo.py's BERT-base encoder, seq 128), `mobilenet_v2`, an onnx light model name
(`resnet50`) or an .onnx path; random weights and seeded inputs (bench/int8.py's). What runs in
bf16: the dense/matmul layers with constant weights and the blocked convs (groups of 1, even
input channel blocks; tessera/quantize/bf16.py); a 3-channel stem, depthwise and Winograd convs
stay float32. Needs a CPU with AVX512_BF16 (else the build says
so). A benchmark, not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import tessera  # noqa: E402
from tessera.frontend import from_onnx  # noqa: E402
from tessera.quantize import sqnr_db  # noqa: E402
from tessera.runtime import GraphModule, cpu  # noqa: E402
from tessera.transform import PassContext  # noqa: E402


def _int8_bench():
    spec = importlib.util.spec_from_file_location("bench_int8", ROOT / "bench" / "int8.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def runner(mod, params, feed, config=None):
    with PassContext(opt_level=3, config=config):
        lib = tessera.build(mod, target="llvm", params=params)
    m = GraphModule(lib["default"](cpu(0)))
    for name, x in feed.items():
        m.set_input(name, x)

    def run():
        m.run()
        return m.get_output(0).numpy()

    return run


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="bert")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument(
        "--direct",
        action="store_true",
        help="also bf16 with Winograd off (every 3x3 conv direct, on vdpbf16ps)",
    )
    args = ap.parse_args(argv)
    os.environ["TESSERA_NUM_THREADS"] = str(args.threads)
    tessera.runtime.set_num_threads(args.threads)
    int8 = _int8_bench()
    model = int8.load(args.model)
    feed = int8.make_feeds(model, 1, np.random.default_rng(0))[0]
    mod, params = from_onnx(model)
    runners = {
        "tessera fp32": runner(mod, params, feed),
        "tessera bf16": runner(mod, params, feed, {"precision": "bf16"}),
        "ORT fp32": int8.ort_runner(model.SerializeToString(), args.threads, feed),
    }
    if args.direct:
        config = {"precision": "bf16", "alter_layout.winograd": False}
        runners["bf16 direct"] = runner(mod, params, feed, config)
    outs = {k: fn() for k, fn in runners.items()}
    load0 = os.getloadavg()[0]
    ms = int8.timed(runners, args.runs)
    print(f"\n{args.model}, batch 1, {args.threads} threads, median of {args.runs} runs in turns "
          f"(load {load0:.1f} -> {os.getloadavg()[0]:.1f})")  # fmt: skip
    for k, v in ms.items():
        print(f"  {k:<14} {v:9.2f} ms")
    for k in [k for k in ms if "bf16" in k]:
        print(f"  {k} speed-up: {ms['tessera fp32'] / ms[k]:.2f}x over tessera fp32, "
              f"{ms['ORT fp32'] / ms[k]:.2f}x over ORT fp32")  # fmt: skip
    ref = outs["tessera fp32"]
    if args.direct:
        print(f"  SQNR vs fp32: bf16 direct {sqnr_db(ref, outs['bf16 direct']):.1f} dB")
    print(f"  SQNR vs fp32: bf16 {sqnr_db(ref, outs['tessera bf16']):.1f} dB "
          f"(tessera fp32 vs ORT fp32 {sqnr_db(outs['ORT fp32'], ref):.1f} dB)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
