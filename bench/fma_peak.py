"""The machine's measured peak of float32 fused multiply-adds, for context next to kernel timings.

A JIT-compiled loop of 2 x 8 independent vector FMA chains (enough to cover FMA latency on every
current x86 core) at the widest vector width the host supports, run on N threads at once
(ctypes releases the GIL during the call). Run alone: `python bench/fma_peak.py [threads]`.
"""

from __future__ import annotations

import ctypes
import sys
import threading
import time

import llvmlite.binding as llvm

CHAINS = 16
ITERS = 2_000_000


def _ir(lanes: int) -> str:
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
    for c in range(CHAINS):
        lines.append(f"  %a{c} = phi {vec} [%s, %entry], [%b{c}, %loop]")
    for c in range(CHAINS):
        lines.append(f"  %b{c} = call {vec} @llvm.fma.v{lanes}f32({vec} %a{c}, {vec} %s, {vec} %s)")
    lines += [
        "  %i1 = add i64 %i, 1",
        "  %done = icmp eq i64 %i1, %n",
        "  br i1 %done, label %exit, label %loop",
        "exit:",
    ]
    acc = "%b0"
    for c in range(1, CHAINS):
        lines.append(f"  %r{c} = fadd {vec} {acc}, %b{c}")
        acc = f"%r{c}"
    lines += [f"  %out = extractelement {vec} {acc}, i32 0", "  ret float %out", "}"]
    return "\n".join(lines)


def _compile():
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    features = llvm.get_host_cpu_features()
    lanes = 16 if features.get("avx512f") else 8 if features.get("avx") else 4
    target = llvm.Target.from_default_triple()
    tm = target.create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=features.flatten(), opt=3
    )
    mod = llvm.parse_assembly(_ir(lanes))
    mod.verify()
    engine = llvm.create_mcjit_compiler(mod, tm)
    engine.finalize_object()
    fn = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_int64, ctypes.c_float)(
        engine.get_function_address("fma_loop")
    )
    return engine, fn, lanes


def measure_fma_peak(threads: int = 1) -> float:
    """GFLOP/s of float32 FMAs (2 flops each) on `threads` threads, best of 3."""
    engine, fn, lanes = _compile()
    fn(1000, 1.0)
    best = 0.0
    for _ in range(3):
        workers = [threading.Thread(target=fn, args=(ITERS, 0.5)) for _ in range(threads)]
        start = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        seconds = time.perf_counter() - start
        best = max(best, threads * ITERS * CHAINS * lanes * 2 / seconds / 1e9)
    del engine
    return best


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    print(f"measured float32 FMA peak on {n} thread(s): {measure_fma_peak(n):.1f} GFLOP/s")
