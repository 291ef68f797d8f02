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
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from fma_peak import measure_fma_peak, warn_if_above_peak  # noqa: E402

import tessera  # noqa: E402
from tessera import te  # noqa: E402

BLAS_ENV = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
CACHE_DIR = Path("/sys/devices/system/cpu/cpu0/cache")
DEFAULT_CACHES = {1: 32 * 1024, 2: 1024 * 1024}  # where sysfs is missing (or cross targets)


# -- block sizes from the target -------------------------------------------------------------


def cache_sizes(folder: Path = CACHE_DIR) -> dict[int, int]:
    """Bytes of the data (or unified) cache at each level, read from sysfs; defaults if absent."""
    sizes = dict(DEFAULT_CACHES)
    for index in sorted(folder.glob("index*")) if folder.is_dir() else []:
        try:
            kind = (index / "type").read_text().strip()
            level = int((index / "level").read_text())
            text = (index / "size").read_text().strip().upper()
        except (OSError, ValueError):
            continue
        match = re.fullmatch(r"(\d+)([KMG]?)", text)
        if kind in ("Data", "Unified") and match:
            sizes[level] = int(match[1]) << {"": 0, "K": 10, "M": 20, "G": 30}[match[2]]
    return sizes


def vector_registers(target: tessera.Target) -> int:
    """Architectural vector registers: 32 with AVX-512 and on AArch64, else 16."""
    if "avx512f" in target.features or target.llvm_triple.startswith(("aarch64", "arm64")):
        return 32
    return 16


@dataclass(frozen=True)
class Blocking:
    """The block sizes of `matmul_schedule`: an mr x (nv * lanes) register tile, k blocks of kc."""

    lanes: int  # float32 per vector register
    registers: int  # vector registers of the target
    mr: int  # rows of C in the micro-kernel (one broadcast of A each)
    nv: int  # vectors per row of the micro-kernel (nr = nv * lanes columns, one B panel)
    kc: int  # k block: a kc x nr slice of the B panel and mr x kc of A stay in L1
    l1: int
    l2: int

    @property
    def nr(self) -> int:
        return self.nv * self.lanes

    def describe(self, K: int) -> str:
        panel = K * self.nr * 4
        return (
            f"micro-kernel {self.mr}x{self.nr} ({self.mr} rows x {self.nv} vectors of "
            f"{self.lanes} lanes, {self.mr * self.nv} of {self.registers} vector registers hold "
            f"C), kc={self.kc} (L1 {self.l1 >> 10} KiB), B panel {K}x{self.nr} = "
            f"{panel >> 10} KiB (L2 {self.l2 >> 10} KiB)"
        )


def choose_blocking(target, M: int, N: int, K: int, caches: dict[int, int] | None = None):
    """Block sizes by rules from the target, never from a table of shapes.

    The micro-kernel holds mr x nv accumulators, nv vectors of a B row and one broadcast of A in
    registers (mr*nv + nv + 1 <= registers) and does mr*nv FMAs per mr + nv loads, so it takes
    the (mr, nv) with the most FMAs per load; nv is a power of two so panels divide the usual
    sizes. kc is the largest power of two whose B slice (kc x nr) and A slice (mr x kc) fit in L1.
    """
    target = target if isinstance(target, tessera.Target) else tessera.Target(target)
    if min(M, N, K) < 1:
        raise ValueError(f"matmul sizes must be positive, got M={M}, N={N}, K={K}")
    if caches is None:
        caches = cache_sizes() if target.is_host else dict(DEFAULT_CACHES)
    lanes, regs = target.vector_lanes("float32"), vector_registers(target)
    shapes = [((regs - nv - 1) // nv, nv) for nv in (1, 2, 4)]
    mr, nv = max(
        ((mr, nv) for mr, nv in shapes if mr >= 1), key=lambda p: (p[0] * p[1] / sum(p), p[1])
    )
    mr, nv = min(mr, M), min(nv, -(-N // lanes))  # no tile larger than the matrix
    l1 = caches.get(1, DEFAULT_CACHES[1])
    kc = 1 << max(3, int(math.log2(l1 // ((mr + nv * lanes) * 4))))
    return Blocking(lanes, regs, mr, nv, min(kc, K), l1, caches.get(2, DEFAULT_CACHES[2]))


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


def fma_loops(asm: str) -> list[list[str]]:
    """The instructions of each innermost loop that does FMAs, in x86 assembly (AT&T syntax)."""
    lines = [ln.split("#")[0].strip() for ln in asm.splitlines()]
    labels = {ln[:-1]: n for n, ln in enumerate(lines) if ln.endswith(":")}
    loops = []  # (first, last) line of each loop: a label and a jump back to it
    for n, ln in enumerate(lines):
        parts = ln.split()
        if len(parts) == 2 and parts[0].startswith("j") and labels.get(parts[1], n) < n:
            loops.append((labels[parts[1]], n))
    innermost = [
        (a, b) for a, b in loops if not any(a <= c < d <= b and (c, d) != (a, b) for c, d in loops)
    ]
    bodies = [[x for x in lines[a + 1 : b + 1] if x and not x.endswith(":")] for a, b in innermost]
    return [body for body in bodies if any("fmadd" in x for x in body)]


def loop_summary(body: list[str]) -> dict[str, int]:
    """FMAs, memory stores and stack accesses (spills) among a loop's instructions."""
    stores = [
        x for x in body if "," in x and "(" in x.rsplit(",", 1)[1] and not x.startswith("cmp")
    ]
    return {
        "fma": sum("fmadd" in x for x in body),
        "stores": len(stores),
        "stack": sum("(%rsp)" in x or "(%rbp)" in x for x in body),
    }


def describe_fma_loops(asm: str) -> str:
    loops = [loop_summary(body) for body in fma_loops(asm)]
    if not loops:
        return "no FMA loop found (not x86, or no FMA)"
    counts = " + ".join(str(x["fma"]) for x in loops)
    stores, stack = sum(x["stores"] for x in loops), sum(x["stack"] for x in loops)
    return (
        f"{len(loops)} innermost loops with {counts} FMAs, {stores} stores, {stack} stack accesses"
    )


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
