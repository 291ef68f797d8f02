"""The machine's measured peak of float32 fused multiply-adds, for context next to kernel timings.

A JIT-compiled loop of independent vector FMA chains at the widest vector width the host
supports: as many chains as the vector registers hold with two to spare (12 with 16 registers,
16 with AVX-512's 32; at least the 8 that FMA latency times throughput asks of every current x86
core). With one chain more than the registers hold, the loop spills and shuffles registers every
iteration and reads ~30% under the peak (16 chains on a 16-register AVX2 core did). Each run
starts all threads together behind a barrier, each pinned to its own CPU where the OS allows,
and lasts about `seconds`; the result is the best of `runs` (a shared machine only ever makes a
run slower, so the best one is the closest to the hardware). Run alone:
`python bench/fma_peak.py [threads]`.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
import threading
import time

import llvmlite.binding as llvm

MAX_CHAINS = 16


def _chains(registers: int) -> int:
    """Independent chains for a register file: one register holds the operand, one is spare."""
    return min(MAX_CHAINS, registers - 2)


def _ir(lanes: int, chains: int) -> str:
    vec = f"<{lanes} x float>"
    lines = [
        f"declare {vec} @llvm.fma.v{lanes}f32({vec}, {vec}, {vec})",
        "define float @fma_loop(i64 %n, float %seed) {",
        "entry:",
        f"  %s0 = insertelement {vec} undef, float %seed, i32 0",
        f"  %s = shufflevector {vec} %s0, {vec} undef, <{lanes} x i32> zeroinitializer",
        "  br label %loop",
        "loop:",
        "  %i = phi i64 [0, %entry], [%i1, %loop]",
    ]
    for c in range(chains):
        lines.append(f"  %a{c} = phi {vec} [%s, %entry], [%b{c}, %loop]")
    for c in range(chains):
        lines.append(f"  %b{c} = call {vec} @llvm.fma.v{lanes}f32({vec} %a{c}, {vec} %s, {vec} %s)")
    lines += [
        "  %i1 = add i64 %i, 1",
        "  %done = icmp eq i64 %i1, %n",
        "  br i1 %done, label %exit, label %loop",
        "exit:",
    ]
    acc = "%b0"
    for c in range(1, chains):
        lines.append(f"  %r{c} = fadd {vec} {acc}, %b{c}")
        acc = f"%r{c}"
    lines += [f"  %out = extractelement {vec} {acc}, i32 0", "  ret float %out", "}"]
    return "\n".join(lines)


@functools.cache
def _compile():
    """(engine, fn, flops per iteration): the engine must stay alive while fn is called, so it is
    cached too."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    features = llvm.get_host_cpu_features()
    lanes = 16 if features.get("avx512f") else 8 if features.get("avx") else 4
    chains = _chains(32 if features.get("avx512f") else 16)
    target = llvm.Target.from_default_triple()
    tm = target.create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=features.flatten(), opt=3
    )
    mod = llvm.parse_assembly(_ir(lanes, chains))
    mod.verify()
    engine = llvm.create_mcjit_compiler(mod, tm)
    engine.finalize_object()
    fn = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_int64, ctypes.c_float)(
        engine.get_function_address("fma_loop")
    )
    return engine, fn, chains * lanes * 2


def _pin_this_thread(cpu: int | None) -> None:
    # On Linux, pid 0 names the calling thread, so each worker pins only itself.
    if cpu is not None and hasattr(os, "sched_setaffinity"):
        try:
            os.sched_setaffinity(0, {cpu})
        except OSError:  # a container may forbid it: run unpinned
            pass


def _run_together(fn, iters: int, threads: int) -> float:
    """Seconds from the first thread's start to the last thread's end, all started at once."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    barrier = threading.Barrier(threads)
    spans: list[tuple[float, float]] = [(0.0, 0.0)] * threads

    def work(t: int) -> None:
        _pin_this_thread(cpus[t % len(cpus)] if cpus else None)
        barrier.wait()
        start = time.perf_counter()
        fn(iters, 0.5)  # ctypes releases the GIL for the call
        spans[t] = (start, time.perf_counter())

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return max(end for _, end in spans) - min(start for start, _ in spans)


def measure_fma_peak(threads: int = 1, runs: int = 5, seconds: float = 0.1) -> float:
    """GFLOP/s of float32 FMAs (2 flops each) on `threads` threads: the best of `runs` runs of
    about `seconds` each."""
    if threads < 1 or runs < 1:
        raise ValueError(f"measure_fma_peak: threads and runs must be >= 1, got {threads}, {runs}")
    _, fn, flops_per_iter = _compile()
    probe = 100_000
    iters = max(probe, int(probe * seconds / _run_together(fn, probe, 1)))
    best = 0.0
    for _ in range(runs):
        elapsed = _run_together(fn, iters, threads)
        best = max(best, threads * iters * flops_per_iter / elapsed / 1e9)
    return best


def warn_if_above_peak(name: str, gflops: float, peak: float) -> str | None:
    """A warning line when a kernel measured faster than the measured peak (which is then
    too low: the machine was busy while the peak was measured), else None."""
    if gflops <= peak:
        return None
    return (
        f"warning: {name} measured {gflops:.1f} GFLOP/s, above the measured FMA peak of "
        f"{peak:.1f}: the peak run was disturbed by other load; rerun on a quieter machine"
    )


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    print(f"measured float32 FMA peak on {n} thread(s): {measure_fma_peak(n):.1f} GFLOP/s")
