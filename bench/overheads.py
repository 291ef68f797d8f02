"""Benchmark: fixed costs that a compile or a run pays many times, each next to the bar it was
written against (these were timing assertions in the unit tests; timings live here now).

    .venv/bin/python bench/overheads.py

- simplifying a 50-node index expression (the kind bound inference and lowering build for a
  fused, split loop nest): bar 10 ms per call;
- calling a compiled kernel from Python with NDArrays (a 16-element vector add): bar 20 us;
- the graph executor's own cost per kernel call (a plan of 401 calls of that vector add): bar
  50 us;
- exporting a model with 32 MiB of weights (assembled with .incbin, not a C literal): bar 20 s.

Medians over repeats; nothing here asserts. The machine may be shared: rerun when a figure is
close to its bar.
"""

from __future__ import annotations

import statistics
import tempfile
import time
import timeit
from pathlib import Path

import numpy as np

import tessera
from tessera import te
from tessera.arith import Analyzer
from tessera.graph import parse
from tessera.runtime import GraphExecutorFactory, GraphModule
from tessera.tir import Range, Var, floordiv, floormod
from tessera.tir import max as tmax
from tessera.tir import min as tmin


def simplify_seconds(repeats: int = 20) -> float:
    i, j, k = Var("i"), Var("j"), Var("k")
    an = Analyzer()
    for v in (i, j, k):
        an.bind(v, Range.from_min_extent(0, 16))
    e = floordiv((i * 16 + j) * 16 + k, 256) * 256 + floormod((i * 16 + j) * 16 + k, 256)
    e = e + floordiv(floormod(i * 64 + j * 4 + floordiv(k, 4), 64), 4) - tmin(i, 15) * 3
    e = e + tmax(j * 2 - j, k) + floordiv(k + 16, 16)
    an.simplify(e)  # warm up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        an.simplify(e)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def vadd(n: int = 16):
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda x: A[x] + B[x], name="C")
    return tessera.build(te.create_schedule(C.op), [A, B, C], target="llvm", name="vadd")


def call_seconds(number: int = 2000) -> float:
    n = 16
    f = vadd(n)
    a = tessera.nd.array(np.ones(n, "float32"))
    c = tessera.nd.empty((n,), "float32")
    return min(timeit.repeat(lambda: f(a, a, c), number=number, repeat=5)) / number


def executor_call_seconds(calls: int = 400) -> float:
    """Per kernel call of a hand-written plan: `calls` vector adds ping-ponging two arena slots."""
    n = 16
    f32 = {"dtype": "float32", "shape": [n]}
    plan = {
        "version": 1,
        "inputs": [{"name": "x", **f32}],
        "outputs": [{"name": "y", **f32, "storage": ["output", 0]}],
        "params": [],
        "params_nbytes": 0,
        "arena_nbytes": 128,
        "calls": [
            {"kernel": "vadd", "args": [["input", 0], ["arena", 64 * (k % 2)],
                                        ["arena", 64 * (1 - k % 2)]], "vars": []}
            for k in range(calls)
        ] + [{"kernel": "vadd", "args": [["input", 0], ["input", 0], ["output", 0]], "vars": []}],
    }  # fmt: skip
    m = GraphModule(GraphExecutorFactory(vadd(n), plan, np.zeros(0, np.uint8)).create())
    m.set_input("x", np.ones(n, np.float32))
    return min(timeit.repeat(m.run, number=20, repeat=5)) / 20 / (calls + 1)


def export_seconds() -> float:
    """Exporting x[1, 2048] @ w[2048, 4096] with w (32 MiB) as a weight."""
    w = np.random.default_rng(0).standard_normal((2048, 4096), dtype=np.float32)
    func = parse(
        "def main(%x: f32[1, 2048], %w: f32[2048, 4096]) {"
        " %1 = matmul(%x, %w) : f32[1, 4096]; return %1 }"
    )
    lib = tessera.build(func, target="llvm", params={"w": w})
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        lib.export_library(Path(tmp) / "big.so")
        return time.perf_counter() - start


def main() -> None:
    s = simplify_seconds()
    print(f"simplify, 50-node index: {s * 1e3:.2f} ms per call (bar 10 ms)")
    c = call_seconds()
    print(f"kernel call from Python: {c * 1e6:.1f} us per call (bar 20 us)")
    e = executor_call_seconds()
    print(f"graph executor, per kernel call: {e * 1e6:.2f} us (bar 50 us)")
    x = export_seconds()
    print(f"export with 32 MiB of weights: {x:.1f} s (bar 20 s)")


if __name__ == "__main__":
    main()
