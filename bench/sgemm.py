"""Benchmark: a float32 matmul (1024x1024x1024 by default) written and scheduled in tessera's TE,
measured next to numpy (OpenBLAS) in the same run.

    .venv/bin/python bench/sgemm.py [--size 1024] [--threads 2,1] [--target llvm] [--no-reexec]

Prints the compile time, GFLOP/s of tessera and of numpy per thread count (medians of runs that
alternate the two, so both see the same machine load), their ratio, and the machine's measured
FMA peak. OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE slow a current numpy down, so when they are set
the script re-runs itself without them (numpy's best configuration) unless `--no-reexec`.
This is a benchmark, not a test: the machine is shared and noisy, so nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import ctypes
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from fma_peak import measure_fma_peak, warn_if_above_peak  # noqa: E402

import tessera  # noqa: E402
from tessera import te  # noqa: E402
from tessera.topi.x86 import cpu  # noqa: E402
from tessera.topi.x86.asm import describe_fma_loops, fma_loops, loop_summary  # noqa: E402, F401
from tessera.topi.x86.dense import Blocking, choose_blocking  # noqa: E402, F401

BLAS_ENV = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


# -- block sizes from the target: the rules of tessera's x86 dense kernel (one copy) ------------

cache_sizes = cpu.cache_sizes
DEFAULT_CACHES = cpu.DEFAULT_CACHES
vector_registers = cpu.vector_registers


# -- the schedule ----------------------------------------------------------------------------


def matmul_schedule(M: int, N: int, K: int, blocking: Blocking):
    """C = A @ B with B packed into panels and a register-blocked micro-kernel.

    B is copied into panels of nr columns (K x nr, contiguous, zero-padded past N) so the
    micro-kernel streams them with aligned vector loads. C is computed in (mr x nr) tiles, in
    parallel over all tiles (panel-major, so each thread reuses a panel from L2); each tile's
    accumulators live in registers (`cache_write` to "local", fully unrolled and vectorized)
    while k runs in blocks of kc, broadcasting one element of A per row and step of k.
    Sizes that are not multiples of the blocks are guarded (tails peeled by partition_loop).
    """
    mr, nr, lanes, kc = blocking.mr, blocking.nr, blocking.lanes, blocking.kc
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    if N % nr == 0:
        packed_b = te.compute((N // nr, K, nr), lambda p, k, j: B[k, p * nr + j], name="packed_b")
    else:
        packed_b = te.compute(
            (-(-N // nr), K, nr),
            lambda p, k, j: te.if_then_else(
                p * nr + j < N, B[k, te.min(p * nr + j, N - 1)], te.const(0.0, "float32")
            ),
            name="packed_b",
        )
    k = te.reduce_axis((0, K), name="k")
    C = te.compute(
        (M, N), lambda i, j: te.sum(A[i, k] * packed_b[j // nr, k, j % nr], axis=k), name="C"
    )
    s = te.create_schedule(C.op)
    CC = s.cache_write(C, "local")
    i, j = s[C].op.axis
    io, jo, ii, ji = s[C].tile(i, j, mr, nr)
    s[C].reorder(jo, io, ii, ji)
    tile = s[C].fuse(jo, io)
    s[C].parallel(tile)
    _, jv = s[C].split(ji, factor=lanes)
    s[C].vectorize(jv)
    s[CC].compute_at(s[C], tile)
    ci, cj = s[CC].op.axis
    (ck,) = s[CC].op.reduce_axis
    ko, ki = s[CC].split(ck, factor=kc)
    cjo, cjv = s[CC].split(cj, factor=lanes)
    s[CC].reorder(ko, ki, ci, cjo, cjv)
    s[CC].unroll(ci)
    s[CC].unroll(cjo)
    s[CC].vectorize(cjv)
    p, _, pj = s[packed_b].op.axis
    s[packed_b].vectorize(pj)
    s[packed_b].parallel(p)
    return s, [A, B, C]


# -- numpy's BLAS ------------------------------------------------------------------------------


def _openblas():
    """The OpenBLAS library numpy loaded (ctypes), or None."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    paths = sorted({ln.split()[-1] for ln in maps.splitlines() if "openblas" in ln.lower()})
    return ctypes.CDLL(paths[0]) if paths and paths[0].startswith("/") else None


def _blas_symbol(lib, stem: str):
    for prefix in ("", "scipy_"):
        for suffix in ("", "64_", "_64"):
            fn = getattr(lib, f"{prefix}{stem}{suffix}", None) if lib is not None else None
            if fn is not None:
                return fn
    return None


def blas_info() -> str:
    """Which BLAS numpy uses and the OpenBLAS core type it chose at run time."""
    get_core = _blas_symbol(_openblas(), "openblas_get_corename")
    if get_core is not None:
        get_core.restype = ctypes.c_char_p
        get_config = _blas_symbol(_openblas(), "openblas_get_config")
        get_config.restype = ctypes.c_char_p
        return f"OpenBLAS {get_config().decode().split()[1]} core {get_core().decode()}"
    try:
        from threadpoolctl import threadpool_info  # optional

        blas = [p for p in threadpool_info() if p.get("user_api") == "blas"]
        if blas:
            return f"{blas[0]['internal_api']} {blas[0]['version']} core {blas[0]['architecture']}"
    except ImportError:
        pass
    config = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    return f"{config.get('name')} {config.get('version')} (core type unknown)"


def set_blas_threads(n: int) -> bool:
    fn = _blas_symbol(_openblas(), "openblas_set_num_threads")
    if fn is not None:
        fn(n)
    return fn is not None


# -- measuring ---------------------------------------------------------------------------------


def child_env(env) -> dict[str, str]:
    """`env` without the OpenBLAS variables that slow a current numpy down."""
    return {k: v for k, v in env.items() if k not in BLAS_ENV}


def rerun_without_blas_env(argv: list[str]) -> int | None:
    """Run this script again without BLAS_ENV; its exit code, or None to measure here instead."""
    found = [f"{k}={os.environ[k]}" for k in BLAS_ENV if k in os.environ]
    if not found:
        return None
    print(
        f"re-running without {' '.join(found)} for numpy's best configuration (--no-reexec "
        "keeps them)",
        flush=True,
    )
    cmd = [sys.executable, os.path.abspath(__file__), *argv, "--no-reexec"]
    code = subprocess.run(cmd, env=child_env(os.environ)).returncode
    if code < 0:  # an older OpenBLAS that needs them crashed: measure with them set
        print(f"the run without them died (signal {-code}); measuring with them set", flush=True)
        return None
    return code


def _seconds_per_call(fn, number: int) -> float:
    start = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - start) / number


def alternate(fns: dict, repeat: int, gap: float) -> dict[str, list[float]]:
    """Seconds per call of each function, `repeat` samples each, taken in turns (the order
    flipping every round) so all see the same machine load; a sample lasts >= ~20 ms.

    Each turn starts `gap` seconds after the last one ended, with one untimed call: OpenBLAS's
    workers spin for ~0.1 s after a call (2^28 cycles, OPENBLAS_THREAD_TIMEOUT), and a kernel
    timed inside that window loses a core to them (tessera's 2-thread time doubled).
    """
    for fn in fns.values():  # warm up: caches, page faults, thread pools
        fn()
    number = {k: max(1, math.ceil(0.02 / _seconds_per_call(fn, 1))) for k, fn in fns.items()}
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for r in range(repeat):
        for k in list(fns)[:: 1 if r % 2 == 0 else -1]:
            time.sleep(gap)
            fns[k]()
            samples[k].append(_seconds_per_call(fns[k], number[k]))
    return samples


def gflops(M, N, K, seconds):
    return 2.0 * M * N * K / seconds / 1e9


def _build(M, N, K, target):
    start = time.perf_counter()
    blocking = choose_blocking(target, M, N, K)
    s, tensors = matmul_schedule(M, N, K, blocking)
    f = tessera.build(s, tensors, target=target, name="sgemm")
    return f, blocking, time.perf_counter() - start


def _parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=1024, help="M = N = K")
    ap.add_argument("--threads", default="2,1", help="thread counts to measure, e.g. 2,1")
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--repeat", type=int, default=15, help="samples per kernel and thread count")
    ap.add_argument("--gap", type=float, default=0.3, help="idle seconds between turns")
    ap.add_argument("--peak-runs", type=int, default=5, help="FMA peak: best of this many runs")
    ap.add_argument("--no-reexec", action="store_true", help="keep OPENBLAS_* as they are")
    args = ap.parse_args(argv)
    args.threads = [int(t) for t in args.threads.split(",")]
    if args.size < 1 or args.repeat < 1 or min(args.threads) < 1 or args.gap < 0:
        ap.error("--size, --repeat and --threads must be positive, --gap not negative")
    return args


def _measure_row(f, a, b, args, threads: int) -> list[str]:
    M = N = K = args.size
    tessera.runtime.set_num_threads(threads)
    blas_threads = set_blas_threads(threads)
    ta, tb, tc = tessera.nd.array(a), tessera.nd.array(b), tessera.nd.empty((M, N), "float32")
    out = np.empty((M, N), np.float32)
    kernels = {"tessera": lambda: f(ta, tb, tc), "numpy": lambda: np.matmul(a, b, out=out)}
    samples = alternate(kernels, args.repeat, args.gap)
    t_t, t_n = (float(np.median(samples[k])) for k in ("tessera", "numpy"))
    g_t, g_n = gflops(M, N, K, t_t), gflops(M, N, K, t_n)
    peak = measure_fma_peak(threads, runs=args.peak_runs)
    print(
        f"  {threads:7d}  {g_t:8.1f} ({t_t * 1e3:7.2f} ms)  {g_n:8.1f} ({t_n * 1e3:7.2f} ms)"
        f"{'' if blas_threads else '*'}  {g_t / g_n:6.2f}  {peak:8.1f}  {g_t / peak:6.0%}",
        flush=True,
    )
    warnings = [warn_if_above_peak(k, g, peak) for k, g in (("tessera", g_t), ("numpy", g_n))]
    return [w for w in warnings if w]


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = _parse_args(argv)
    if not args.no_reexec:
        code = rerun_without_blas_env(argv)
        if code is not None:
            return code
    M = N = K = args.size
    target = tessera.Target(args.target)
    f, blocking, compile_s = _build(M, N, K, target)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((M, K), dtype=np.float32)
    b = rng.standard_normal((K, N), dtype=np.float32)
    c = tessera.nd.empty((M, N), "float32")
    f(tessera.nd.array(a), tessera.nd.array(b), c)
    expected = a @ b
    err = np.max(np.abs(c.numpy() - expected)) / np.max(np.abs(expected))
    env = " ".join(f"{k}={os.environ[k]}" for k in BLAS_ENV if k in os.environ) or "unset"

    print(f"sgemm {M}x{N}x{K} float32, target {target}")
    print(f"  schedule: {blocking.describe(K)}")
    print(f"  compile time {compile_s:.2f} s, max rel. error vs numpy {err:.1e}")
    if target.kind == "llvm":
        print(f"  k loops: {describe_fma_loops(f.get_source('asm'))}")
    print(f"  numpy: {blas_info()} (OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE: {env})")
    print(
        f"  medians of {args.repeat} alternating samples, {args.gap:g} s idle between turns; "
        f"FMA peak: best of {args.peak_runs}"
    )
    print("  threads  tessera GFLOP/s         numpy GFLOP/s          ratio  FMA peak  of peak")
    warnings = []
    for threads in args.threads:
        warnings += _measure_row(f, a, b, args, threads)
    for w in warnings:
        print(f"  {w}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
