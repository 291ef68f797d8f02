"""Benchmark: two fixed costs that a compile or a run pays many times, each next to the bar it
was written against (these were timing assertions in the unit tests; timings live here now).

    .venv/bin/python bench/overheads.py

- simplifying a 50-node index expression (the kind bound inference and lowering build for a
  fused, split loop nest): bar 10 ms per call;
- calling a compiled kernel from Python with NDArrays (a 16-element vector add): bar 20 us.

Medians over repeats; nothing here asserts. The machine may be shared: rerun when a figure is
close to its bar.
"""

from __future__ import annotations

import statistics
import time
import timeit

import numpy as np

import tessera
from tessera import te
from tessera.arith import Analyzer
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


def call_seconds(number: int = 2000) -> float:
    n = 16
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda x: A[x] + B[x], name="C")
    f = tessera.build(te.create_schedule(C.op), [A, B, C], target="llvm", name="vadd")
    a = tessera.nd.array(np.ones(n, "float32"))
    c = tessera.nd.empty((n,), "float32")
    return min(timeit.repeat(lambda: f(a, a, c), number=number, repeat=5)) / number


def main() -> None:
    s = simplify_seconds()
    print(f"simplify, 50-node index: {s * 1e3:.2f} ms per call (bar 10 ms)")
    c = call_seconds()
    print(f"kernel call from Python: {c * 1e6:.1f} us per call (bar 20 us)")


if __name__ == "__main__":
    main()
