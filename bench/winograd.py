"""Benchmark: each stride-1 3x3 convolution of a model as a direct conv and as the Winograd
kernel the rule picks (topi/x86/winograd.py, Note [winograd rule]), alternated run by run in
one process, medians in ms.

    .venv/bin/python bench/winograd.py [--model resnet50] [--threads 2] [--runs 60]

Kernels are built alone (op by op, as `tessera.topi.testing.build_cases` builds them), with
warm caches: inside a model the transformed weights, a*a/9 times larger than the 3x3 ones, come
from DRAM (`bench/conv2d.py --cold`). Shapes come from the model, not from a table. A benchmark,
not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from conv2d import model_convs  # noqa: E402

import tessera  # noqa: E402
from tessera.topi.testing import build_cases  # noqa: E402
from tessera.topi.x86.layout import transform_array  # noqa: E402
from tessera.topi.x86.strategy import channel_block, output_block  # noqa: E402
from tessera.topi.x86.winograd import plan_winograd, transform_weight_np  # noqa: E402


def cases(x_shape, w_shape, attrs, target):
    """(direct case, winograd case, tile m) of a conv, blocked as alter_layout blocks it; None
    when the rule keeps it direct."""
    lanes = target.vector_lanes("float32")
    n, c, h, w = x_shape
    k = w_shape[0]
    ib, (ob, _) = channel_block(c, lanes), output_block(k, lanes)
    pad = tuple(attrs["padding"])
    oh, ow = h + pad[0] + pad[2] - 2, w + pad[1] + pad[3] - 2
    plan = plan_winograd(target, oh, ow, c, k)
    if plan is None or k % ob:
        return None
    m, nr, rows = plan
    rng = np.random.default_rng(0)
    x = transform_array(rng.standard_normal(x_shape, dtype=np.float32), "NCHW", f"NCHW{ib}c")
    wt = rng.standard_normal(w_shape, dtype=np.float32)
    direct = (
        "nn.conv2d_nchwc",
        [x, transform_array(wt, "OIHW", f"OIHW{ib}i{ob}o")],
        dict(strides=(1, 1), padding=pad, dilation=(1, 1), groups=1),
    )
    wino = (
        "nn.conv2d_winograd_nchwc",
        [x, transform_weight_np(wt, m, nr)],
        dict(padding=pad, tile=m, channels=k, out_block=ob, rows=rows),
    )
    return direct, wino, m, (n, k // ob, oh, ow, ob)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet50", help="a light model's name or an .onnx file")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=60, help="runs of each kernel, alternated")
    ap.add_argument("--target", default="llvm")
    args = ap.parse_args(argv)
    tessera.runtime.set_num_threads(args.threads)
    target = tessera.Target(args.target)
    print(f"{args.model}: stride-1 3x3 convs, target {target}, {args.threads} thread(s)\n")
    print("| x | w | count | direct ms | Winograd ms | tile | speed-up |")
    print("|---|---|---:|---:|---:|---|---:|")
    for x_shape, w_shape, attrs, count in model_convs(args.model):
        a = dict(attrs)
        if tuple(w_shape[2:]) != (3, 3) or tuple(a["strides"]) != (1, 1):
            continue
        if tuple(a["dilation"]) != (1, 1) or a.get("groups", 1) != 1:
            continue
        found = cases(x_shape, w_shape, a, target)
        if found is None:
            print(f"| {list(x_shape)} | {list(w_shape)} | {count} | | | direct (the rule) | |")
            continue
        direct, wino, m, out_shape = found
        mod, _ = build_cases([direct, wino], target=target, schedule_target="x86")
        out = np.empty(out_shape, np.float32)
        times: list[list[float]] = [[], []]
        for k, case in enumerate((direct, wino)):
            for _ in range(5):  # warm-up
                mod[f"case{k}"](*case[1], out)
        for i in range(args.runs):
            for k in (0, 1) if i % 2 else (1, 0):
                t0 = time.perf_counter()
                mod[f"case{k}"](*(direct, wino)[k][1], out)
                times[k].append(time.perf_counter() - t0)
        d, w = (float(np.median(t)) * 1e3 for t in times)
        print(
            f"| {list(x_shape)} | {list(w_shape)} | {count} | {d:.3f} | {w:.3f} | F({m}x{m}) "
            f"| {d / w:.1f}x |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
