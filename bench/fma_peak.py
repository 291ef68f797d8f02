"""The machine's measured peak of float32 fused multiply-adds, for context next to kernel timings,
and of int8 multiply-adds (`--int8`).

A JIT-compiled loop of independent vector FMA chains at the widest vector width the host
supports: as many chains as the vector registers hold with two to spare (12 with 16 registers,
16 with AVX-512's 32; at least the 8 that FMA latency times throughput asks of every current x86
core). With one chain more than the registers hold, the loop spills and shuffles registers every
iteration and reads ~30% under the peak (16 chains on a 16-register AVX2 core did). Each run
starts all threads together behind a barrier, each pinned to its own CPU where the OS allows,
and lasts about `seconds`; the result is the best of `runs` (a shared machine only ever makes a
run slower, so the best one is the closest to the hardware). Run alone:
`python bench/fma_peak.py [threads] [--int8]`.

`--int8` (Note [int8 peak]) also measures the u8 x s8 multiply-adds of each instruction form
the host has, next to the float32 FMAs, as multiply-adds per second and their ratio: what an
int8 kernel can gain over a float32 one on this CPU at best.
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
    ]
    lines += _loop_head(chains, vec)
    for c in range(chains):
        lines.append(f"  %b{c} = call {vec} @llvm.fma.v{lanes}f32({vec} %a{c}, {vec} %s, {vec} %s)")
    return "\n".join(lines + _loop_exit(chains, vec, "fadd", "float"))


def _loop_head(chains: int, vec: str) -> list[str]:
    """Into the loop: its counter and one accumulator per chain, each starting at the seed %s."""
    lines = ["  br label %loop", "loop:", "  %i = phi i64 [0, %entry], [%i1, %loop]"]
    return lines + [f"  %a{c} = phi {vec} [%s, %entry], [%b{c}, %loop]" for c in range(chains)]


def _loop_exit(chains: int, vec: str, combine: str, scalar: str) -> list[str]:
    """The loop's latch and exit: the chains combined (so none is dead) and one lane returned."""
    lines = [
        "  %i1 = add i64 %i, 1",
        "  %done = icmp eq i64 %i1, %n",
        "  br i1 %done, label %exit, label %loop",
        "exit:",
    ]
    acc = "%b0"
    for c in range(1, chains):
        lines.append(f"  %r{c} = {combine} {vec} {acc}, %b{c}")
        acc = f"%r{c}"
    return [*lines, f"  %out = extractelement {vec} {acc}, i32 0", f"  ret {scalar} %out", "}"]


# Note [int8 peak]
# An int8 kernel's products run on one of three instruction forms, each an independent chain
# of accumulations here as the FMAs above (the input re-read from the accumulator so that
# nothing is loop-invariant):
# - "vnni": vpdpbusd (AVX512-VNNI, AVX-VNNI): 4 u8 x s8 products summed into each int32 lane
#   in one instruction, exact;
# - "pairs": vpmaddubsw (u8 x s8 pairs into a saturating int16, exact only where a weight's
#   pairs are bounded: Note [bounded pairs] in codegen/llvm/int8_dot.py), then vpmaddwd by ones
#   into int32 and an add: two multiplier instructions for a vector of bytes;
# - "words": vpmaddwd on bytes widened to int16 (exact), then an add: a vector of words.
# The measure is multiply-adds per second (a float32 FMA is one), so the ratio to the FMA
# line is what int8 can gain on this CPU at most, before epilogues and data movement.
INT8_FORMS = ("vnni", "pairs", "words")


def _int8_ir(form: str, bits: int, chains: int) -> tuple[str, int]:
    """(LLVM IR of `int8_loop`, multiply-adds per iteration) for one form at `bits`."""
    n32, n16, n8 = bits // 32, bits // 16, bits // 8
    v32, v16, v8 = f"<{n32} x i32>", f"<{n16} x i16>", f"<{n8} x i8>"
    wide = bits == 512
    maddubs = "llvm.x86.avx512.pmaddubs.w.512" if wide else "llvm.x86.avx2.pmadd.ub.sw"
    maddwd = "llvm.x86.avx512.pmaddw.d.512" if wide else "llvm.x86.avx2.pmadd.wd"
    dpbusd = f"llvm.x86.avx512.vpdpbusd.{bits}"
    madd_words = f"declare {v32} @{maddwd}({v16}, {v16})"
    decls = {
        "vnni": [f"declare {v32} @{dpbusd}({v32}, {v32}, {v32})"],
        "pairs": [f"declare {v16} @{maddubs}({v8}, {v8})", madd_words],
        "words": [madd_words],
    }[form]
    lines = [
        *decls,
        "define i32 @int8_loop(i64 %n, i32 %seed) {",
        "entry:",
        f"  %s0 = insertelement {v32} undef, i32 %seed, i32 0",
        f"  %s = shufflevector {v32} %s0, {v32} undef, <{n32} x i32> zeroinitializer",
        f"  %w8 = bitcast {v32} %s to {v8}",
        f"  %w16 = bitcast {v32} %s to {v16}",
        f"  %ones = bitcast {v32} <{', '.join(['i32 65537'] * n32)}> to {v16}",
    ]
    lines += _loop_head(chains, v32)
    for c in range(chains):
        if form == "vnni":
            lines.append(f"  %b{c} = call {v32} @{dpbusd}({v32} %a{c}, {v32} %a{c}, {v32} %s)")
            continue
        if form == "pairs":
            lines += [
                f"  %x{c} = bitcast {v32} %a{c} to {v8}",
                f"  %t{c} = call {v16} @{maddubs}({v8} %x{c}, {v8} %w8)",
                f"  %u{c} = call {v32} @{maddwd}({v16} %t{c}, {v16} %ones)",
            ]
        else:
            lines += [
                f"  %x{c} = bitcast {v32} %a{c} to {v16}",
                f"  %u{c} = call {v32} @{maddwd}({v16} %x{c}, {v16} %w16)",
            ]
        lines.append(f"  %b{c} = add {v32} %a{c}, %u{c}")
    lines += _loop_exit(chains, v32, "xor", "i32")
    return "\n".join(lines), chains * (n16 if form == "words" else n8)


def int8_forms() -> list[str]:
    """The int8 forms of Note [int8 peak] this host has."""
    features = llvm.get_host_cpu_features()
    vnni = features.get("avx512vnni") or features.get("avxvnni")
    return [f for f in INT8_FORMS if f != "vnni" or vnni]


def _jit(ir: str, name: str, restype):
    """(engine, fn(i64, restype)) for the host; the engine must stay alive while fn is called."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    features = llvm.get_host_cpu_features()
    target = llvm.Target.from_default_triple()
    tm = target.create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=features.flatten(), opt=3
    )
    mod = llvm.parse_assembly(ir)
    mod.verify()
    engine = llvm.create_mcjit_compiler(mod, tm)
    engine.finalize_object()
    fn = ctypes.CFUNCTYPE(restype, ctypes.c_int64, restype)(engine.get_function_address(name))
    return engine, fn


@functools.cache
def _compile(form: str = "fma"):
    """(engine, fn, operations per iteration): float32 flops for "fma", int8 multiply-adds for
    an int8 form (Note [int8 peak]). Cached with its engine, which must outlive fn's calls."""
    features = llvm.get_host_cpu_features()
    wide = bool(features.get("avx512f"))
    if form == "fma":
        lanes = 16 if wide else 8 if features.get("avx") else 4
        chains = _chains(32 if wide else 16)
        engine, fn = _jit(_ir(lanes, chains), "fma_loop", ctypes.c_float)
        return engine, fn, chains * lanes * 2
    if form not in int8_forms():
        raise ValueError(f"int8 form {form!r} is not available on this host: {int8_forms()}")
    bits = 512 if wide and (form == "vnni" or features.get("avx512bw")) else 256
    # two registers more than the FMA loop: the weight and the ones (or a temporary)
    chains = min(MAX_CHAINS, (32 if bits == 512 else 16) - 4)
    ir, macs = _int8_ir(form, bits, chains)
    engine, fn = _jit(ir, "int8_loop", ctypes.c_int32)
    return engine, fn, macs


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
        fn(iters, 1)  # ctypes releases the GIL for the call (1 converts to float or int)
        spans[t] = (start, time.perf_counter())

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return max(end for _, end in spans) - min(start for start, _ in spans)


def measure_fma_peak(threads: int = 1, runs: int = 5, seconds: float = 0.1,
                     form: str = "fma") -> float:  # fmt: skip
    """GFLOP/s of float32 FMAs (2 flops each) on `threads` threads: the best of `runs` runs of
    about `seconds` each. With an int8 `form` (Note [int8 peak]): G int8 multiply-adds/s."""
    if threads < 1 or runs < 1:
        raise ValueError(f"measure_fma_peak: threads and runs must be >= 1, got {threads}, {runs}")
    _, fn, flops_per_iter = _compile(form)
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
    args = [a for a in sys.argv[1:] if a != "--int8"]
    n = int(args[0]) if args else 1
    peak = measure_fma_peak(n)
    print(f"measured float32 FMA peak on {n} thread(s): {peak:.1f} GFLOP/s")
    if "--int8" in sys.argv[1:]:
        for form in int8_forms():
            macs = measure_fma_peak(n, form=form)
            print(f"int8 multiply-adds, {form:5s}: {macs:.1f} G/s = {macs / (peak / 2):.2f}x "
                  f"the float32 FMAs")  # fmt: skip
