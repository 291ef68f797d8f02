"""Benchmark: x86 kernels with index arithmetic nsw (the default) against wrapping, in turns.

    TESSERA_NUM_THREADS=1 .venv/bin/python bench/index_nsw.py [--repeat 15]

Note [index arithmetic nsw] (codegen/llvm/emitter.py) changes the code of every kernel; this
builds a few one-op models twice on the host, once as they are and once with nsw switched off
(FunctionEmitter.NSW_INT32_EXTENT = -1, each build in a cache folder of its own), checks that
both give the same outputs, and times the op's kernel of each in turns (the runtime's profile,
layout transforms left out). It prints the best time of each and wrapping / nsw (1.0: no
change) with the machine's load before and after: on a shared machine only the ratio of
turns taken in one run means anything.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

import tessera  # noqa: E402
from tessera.codegen.llvm.emitter import FunctionEmitter  # noqa: E402
from tessera.cross.testing import conv_case, matmul_case  # noqa: E402
from tessera.frontend import from_onnx  # noqa: E402

CASES = {
    "depthwise 3x3 96 56x56": lambda: conv_case(96, 96, 56, 3, groups=96),
    "conv 3x3 s2 64->128 28x28": lambda: conv_case(64, 128, 28, 3, stride=2),
    "conv 1x1 64->256 28x28": lambda: conv_case(64, 256, 28, 1),
    "dense 16x768 @ 768x768": lambda: matmul_case(16, 768, 768),
}


def build(case, nsw_extent: int):
    FunctionEmitter.NSW_INT32_EXTENT = nsw_extent
    os.environ["TESSERA_CACHE_DIR"] = tempfile.mkdtemp(prefix="tessera-bench-nsw-")
    model, _ = case()
    mod, params = from_onnx(model)
    lib = tessera.build(mod, target="llvm", params=params)
    m = tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))
    x = model.graph.input[0]
    shape = [d.dim_value for d in x.type.tensor_type.shape.dim]
    m.set_input(x.name, np.random.default_rng(1).standard_normal(shape).astype("f4"))
    m.run()
    return m


def kernel_seconds(m) -> float:
    rows = [r for r in m.profile(repeat=10) if "layout_transform" not in r.kernel]
    if len(rows) != 1:
        raise ValueError(f"expected one kernel besides layout transforms: {rows}")
    return rows[0].seconds


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=15, help="turns per kernel")
    args = ap.parse_args(argv)
    default = FunctionEmitter.NSW_INT32_EXTENT
    print("load:", os.getloadavg())
    print("| kernel | nsw (us) | wrapping (us) | wrapping / nsw |")
    print("|---|---:|---:|---:|")
    for name, case in CASES.items():
        nsw, wrapping = build(case, default), build(case, -1)
        np.testing.assert_array_equal(nsw.get_output(0).numpy(), wrapping.get_output(0).numpy())
        a, b = [], []
        for _ in range(args.repeat):
            a.append(kernel_seconds(nsw))
            b.append(kernel_seconds(wrapping))
        print(f"| {name} | {min(a) * 1e6:.1f} | {min(b) * 1e6:.1f} | {min(b) / min(a):.3f} |")
    FunctionEmitter.NSW_INT32_EXTENT = default
    print("load:", os.getloadavg())
    return 0


if __name__ == "__main__":
    sys.exit(main())
