"""Benchmark: models through the PyTorch frontend, compiled by tessera, next to torch eager in
the same process, batch 1, float32, random weights.

    .venv/bin/python bench/pytorch.py [--models resnet50,vit_b_16] [--threads 2] [--repeat 20]
                                      [--torch-threads N] [--small]

Models: the torch.nn versions of torchvision's ResNet-50, MobileNetV3-Large, EfficientNet-B0,
ViT-B/16, DeepLabV3 (ResNet-50 backbone), the ResNet-50 + FPN detection backbone, and a
BERT-base encoder (128 tokens), from `tessera.frontend.pytorch_testing`; `--small` runs the
tiny versions the tests use (a smoke run). For each model: the conversion + compile time, the
latency of each engine (medians and min-max of timed runs taken in turns,
`tessera.cli.bench.measure_in_blocks`, so both see the same machine load), the ratio
tessera / torch (below 1: tessera is faster) and the agreement max |tessera - torch| / max
|torch| over the outputs.

Threads: `tessera.runtime.set_num_threads(n)` and `torch.set_num_threads(n)` (or
`--torch-threads`: on a loaded machine torch's OpenMP team stalls when one of its threads is
descheduled — a 3x3 conv measured 3 ms on 1 thread and 250 ms on 2 at a load of 18 on 2 cores —
so its 1-thread time is the fairer reference there). torch runs in eval mode under
`torch.inference_mode()`. A benchmark, not a test: the machine is shared and
noisy, nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import tessera  # noqa: E402
from tessera.cli.bench import measure_in_blocks  # noqa: E402
from tessera.frontend import pytorch_testing as T  # noqa: E402
from tessera.runtime import GraphModule, cpu, set_num_threads  # noqa: E402


def _image(size):
    return (torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(0)),)


def _tokens(length, vocab):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (1, length), generator=g)
    return ids, torch.ones(1, length, dtype=torch.int64)


FULL = {
    "resnet50": lambda: (T.resnet50(), _image(224)),
    "mobilenet_v3_large": lambda: (T.mobilenet_v3_large(), _image(224)),
    "efficientnet_b0": lambda: (T.efficientnet_b0(), _image(224)),
    "vit_b_16": lambda: (T.vit_b_16(), _image(224)),
    "deeplabv3": lambda: (T.deeplabv3(), _image(224)),
    "resnet_fpn": lambda: (T.resnet_fpn(), _image(224)),
    "bert_base": lambda: (T.bert_encoder(), _tokens(128, 30522)),
}
SMALL = {
    "resnet50": lambda: (T.resnet50(8, (1, 1, 1, 1), 10), _image(32)),
    "mobilenet_v3_large": lambda: (T.mobilenet_v3_large(0.25, num_classes=10), _image(32)),
    "efficientnet_b0": lambda: (T.efficientnet_b0(0.25, 0.34, num_classes=10), _image(32)),
    "vit_b_16": lambda: (T.vit_b_16(32, 8, 2, 2, 16, 32, 10), _image(32)),
    "deeplabv3": lambda: (T.deeplabv3(8, (1, 1, 1, 1), 5, (2, 4, 6), 16), _image(32)),
    "resnet_fpn": lambda: (T.resnet_fpn(8, (1, 1, 1, 1), 16), _image(64)),
    "bert_base": lambda: (T.bert_encoder(100, 32, 2, 4, 64), _tokens(7, 100)),
}


def compile_model(model, inputs):
    mod, params = tessera.frontend.from_pytorch(model, inputs)
    with tessera.transform.PassContext(opt_level=3):
        lib = tessera.build(mod, target="llvm", params=params)
    m = GraphModule(lib["default"](cpu(0)))
    for p, x in zip(mod["main"].params, inputs, strict=False):
        m.set_input(p.name, x.numpy())
    return m


def bench_model(name, build, repeat):
    model, inputs = build()
    model = model.eval()
    start = time.perf_counter()
    m = compile_model(model, inputs)
    compile_s = time.perf_counter() - start

    def run_torch():
        with torch.inference_mode():
            return model(*inputs)

    expected = [e.numpy() for e in T.flatten_outputs(run_torch())]
    m.run()
    got = [m.get_output(i).numpy() for i in range(m.get_num_outputs())]
    error = max(
        float(np.abs(g - e).max() / max(np.abs(e).max(), 1e-30))
        for g, e in zip(got, expected, strict=True)
    )
    times, _ = measure_in_blocks({"tessera": m.run, "torch": run_torch}, repeat, 2, None)
    med = {k: float(np.median(v)) * 1e3 for k, v in times.items()}
    spread = {k: (float(v.min()) * 1e3, float(v.max()) * 1e3) for k, v in times.items()}
    return compile_s, med, spread, error


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(FULL))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--torch-threads", type=int, default=None, help="default: --threads")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--small", action="store_true", help="the tiny test-size models")
    args = parser.parse_args(argv)
    set_num_threads(args.threads)
    torch_threads = args.torch_threads or args.threads
    torch.set_num_threads(torch_threads)
    suite = SMALL if args.small else FULL
    print(f"threads: tessera {args.threads}, torch {torch_threads}; repeat {args.repeat}; "
          f"torch {torch.__version__}")  # fmt: skip
    header = (
        "| model | compile s | tessera ms (min-max) | torch ms (min-max) | ratio | max rel err |"
    )
    print(header)
    print("|---|---|---|---|---|---|")
    for name in args.models.split(","):
        if name not in suite:
            print(f"| {name} | unknown model (choose from {', '.join(suite)}) |")
            continue
        try:
            compile_s, med, spread, err = bench_model(name, suite[name], args.repeat)
        except Exception as e:  # a failing model gets its error in its row; the suite goes on
            print(f"| {name} | error: {type(e).__name__}: {str(e)[:200]} |")
            continue
        cells = [f"{med[k]:.2f} ({spread[k][0]:.2f}-{spread[k][1]:.2f})" for k in med]
        ratio = med["tessera"] / med["torch"]
        print(f"| {name} | {compile_s:.1f} | {cells[0]} | {cells[1]} | {ratio:.2f} | {err:.1e} |",
              flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
