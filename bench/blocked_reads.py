"""Benchmark: blocked tensors read in a plain layout, the three ways, in turns.

    .venv/bin/python bench/blocked_reads.py [--threads 1] [--seconds 20]

Kernels of NCHW[b]c -> NCHW reads (a bare layout_transform, an int8 conv's int32 product
dequantized into SiLU, and a float SiLU) and of NCHW -> NCHW8c, built three ways on this
CPU: `strided` (the schedule rules off, `generic.MAX_TILE_BLOCK = 0`: one strided load or
gather per vector, Note [strided loads]),
`swap` (tiles transposed by bit exchanges only, `transpose.INTERLEAVE_BITS = 0`) and `tiles`
(the defaults: Note [blocked reads], Note [transposed loads], Note [interleaved first stage]).
Each case's three kernels run in turns for its share of `--seconds`, order rotated; prints
medians and each over `strided`. Outputs are checked equal. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

import tessera
from tessera import te
from tessera.codegen.llvm import transpose
from tessera.ir.module import IRModule
from tessera.topi import generic
from tessera.topi.layout import layout_transform

WAYS = {"strided": dict(block=0, bits=128), "swap": dict(block=16, bits=0), "tiles": {}}


def _kernel(shape, dtype, body):
    x = te.placeholder(shape, dtype, name="x")
    if body is None:  # the other direction: NCHW -> NCHW8c
        return x, layout_transform(x, "NCHW", "NCHW8c")
    y = layout_transform(x, f"NCHW{shape[-1]}c", "NCHW")
    z = te.compute(y.shape, lambda *i: body(y(*i)), name="out", tag="injective")
    return x, z


def _silu(v):
    f = v.astype("float32") * 0.01
    return f * te.sigmoid(f)


CASES = [  # name, blocked shape, dtype, body
    ("layout_transform f32 8c", (1, 12, 32, 128, 8), "float32", lambda v: v),
    ("layout_transform f32 16c", (1, 6, 32, 128, 16), "float32", lambda v: v),
    ("int32 product -> SiLU 8c", (1, 12, 16, 64, 8), "int32", _silu),
    ("float SiLU 8c", (1, 12, 32, 128, 8), "float32", _silu),
    ("NCHW -> NCHW8c f32", (1, 96, 32, 128), "float32", None),
]


def _build(way: str, shape, dtype, body, target):
    saved = generic.MAX_TILE_BLOCK, transpose.INTERLEAVE_BITS
    knobs = WAYS[way]
    generic.MAX_TILE_BLOCK = knobs.get("block", saved[0])
    transpose.INTERLEAVE_BITS = knobs.get("bits", saved[1])
    try:
        x, z = _kernel(shape, dtype, body)
        s = generic.schedule_injective([z], target)
        func = te.lower(s, [x, z], name="k")
        with tessera.transform.PassContext(config={"codegen.cache": False}):  # knobs differ
            mod = tessera.build(IRModule({"k": func}), target=target)
    finally:
        generic.MAX_TILE_BLOCK, transpose.INTERLEAVE_BITS = saved
    return mod["k"], tuple(int(d.value) for d in z.shape), z.dtype


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=20.0)
    args = ap.parse_args(argv)
    tessera.runtime.set_num_threads(args.threads)
    target = tessera.Target("llvm")
    rng = np.random.default_rng(0)
    for name, shape, dtype, body in CASES:
        kernels = {w: _build(w, shape, dtype, body, target) for w in WAYS}
        x = (rng.standard_normal(shape) * 100).astype(dtype)
        outs = {w: np.empty(k[1], k[2]) for w, k in kernels.items()}
        times = {w: [] for w in WAYS}
        order = list(WAYS)
        end = time.perf_counter() + args.seconds / len(CASES)
        while time.perf_counter() < end:
            for w in order:
                t0 = time.perf_counter()
                kernels[w][0](x, outs[w])
                times[w].append(time.perf_counter() - t0)
            order = order[1:] + order[:1]
        for w in WAYS:
            np.testing.assert_array_equal(outs[w], outs["strided"])
        base = np.median(times["strided"])
        cells = ", ".join(
            f"{w} {np.median(t) * 1e6:.0f} us ({np.median(t) / base:.2f})" for w, t in times.items()
        )
        print(f"{name} {shape}: {cells}; {len(times['strided'])} runs each")
    print(f"threads {args.threads}, load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
