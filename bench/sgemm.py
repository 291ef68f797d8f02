"""Benchmark: a 1024x1024x1024 float32 matmul written and scheduled in tessera's TE, next to numpy.

    .venv/bin/python bench/sgemm.py [--size 1024] [--threads 2] [--target llvm]

Prints GFLOP/s of tessera and of numpy (OpenBLAS) measured in the same run, their ratio, and the
machine's measured FMA peak (a tessera-built kernel of independent vector FMAs) for reference.
This is a benchmark, not a test: the machine is shared and noisy, so nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tessera  # noqa: E402
from tessera import te  # noqa: E402
from fma_peak import measure_fma_peak  # noqa: E402


def matmul_schedule(M: int, N: int, K: int, lanes: int):
    """C = A @ B with B packed into panels and a register-blocked micro-kernel.

    The micro-kernel keeps an (mr x nr) tile of C in vector registers (`cache_write` to "local",
    fully unrolled) and streams one row of a packed B panel and one column of A per step of k.
    """
    mr, nr = 4, 4 * lanes  # 16 accumulators of `lanes` floats
    kc = 256  # k block: a panel slice of kc x nr floats stays in L1
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    packed_b = te.compute(
        (N // nr, K, nr), lambda bn, k, j: B[k, bn * nr + j], name="packed_b"
    )
    k = te.reduce_axis((0, K), name="k")
    C = te.compute(
        (M, N),
        lambda i, j: te.sum(A[i, k] * packed_b[j // nr, k, j % nr], axis=k),
        name="C",
    )
    s = te.create_schedule(C.op)
    CC = s.cache_write(C, "local")
    i, j = s[C].op.axis
    io, jo, ii, ji = s[C].tile(i, j, mr, nr)
    s[C].reorder(jo, io, ii, ji)
    fused = s[C].fuse(jo, io)
    s[C].parallel(fused)
    _, jv = s[C].split(ji, factor=lanes)
    s[C].vectorize(jv)
    s[CC].compute_at(s[C], fused)
    ci, cj = s[CC].op.axis
    (ck,) = s[CC].op.reduce_axis
    ko, ki = s[CC].split(ck, factor=kc)
    cjo, cjv = s[CC].split(cj, factor=lanes)
    s[CC].reorder(ko, ki, ci, cjo, cjv)
    s[CC].unroll(ci)
    s[CC].unroll(cjo)
    s[CC].vectorize(cjv)
    bn, _, bj = s[packed_b].op.axis
    s[packed_b].vectorize(bj)
    s[packed_b].parallel(bn)
    return s, [A, B, C]


def gflops(M, N, K, seconds):
    return 2.0 * M * N * K / seconds / 1e9


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--repeat", type=int, default=10)
    args = ap.parse_args(argv)
    M = N = K = args.size
    tessera.runtime.set_num_threads(args.threads)
    target = tessera.Target(args.target)
    lanes = max(target.vector_width_bits // 32, 4)

    start = time.perf_counter()
    s, tensors = matmul_schedule(M, N, K, lanes)
    f = tessera.build(s, tensors, target=target, name="sgemm")
    compile_s = time.perf_counter() - start

    rng = np.random.default_rng(0)
    a = rng.standard_normal((M, K), dtype=np.float32)
    b = rng.standard_normal((K, N), dtype=np.float32)
    c = tessera.nd.empty((M, N), "float32")
    f(tessera.nd.array(a), tessera.nd.array(b), c)
    expected = a @ b
    err = np.max(np.abs(c.numpy() - expected)) / np.max(np.abs(expected))

    timer = f.time_evaluator(f.entry_name, tessera.cpu(0), number=3, repeat=args.repeat)
    ta, tb = tessera.nd.array(a), tessera.nd.array(b)
    t_tessera, t_numpy = [], []
    for _ in range(args.repeat):  # alternate, so both see the same machine load
        t_tessera.append(timer(ta, tb, c).median)
        start = time.perf_counter()
        for _ in range(3):
            np.matmul(a, b)
        t_numpy.append((time.perf_counter() - start) / 3)
    t_t, t_n = float(np.median(t_tessera)), float(np.median(t_numpy))
    peak = measure_fma_peak(args.threads)

    print(f"sgemm {M}x{N}x{K} float32, {args.threads} threads, target {target}")
    print(f"  compile time       {compile_s:8.2f} s   (max rel. error vs numpy {err:.1e})")
    print(f"  tessera            {gflops(M, N, K, t_t):8.1f} GFLOP/s  ({t_t * 1e3:.2f} ms)")
    print(f"  numpy (OpenBLAS)   {gflops(M, N, K, t_n):8.1f} GFLOP/s  ({t_n * 1e3:.2f} ms)")
    print(f"  tessera / numpy    {t_n / t_t:8.2f}  (GFLOP/s ratio)")
    print(f"  measured FMA peak  {peak:8.1f} GFLOP/s")


if __name__ == "__main__":
    main()
