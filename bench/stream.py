"""The machine's measured memory bandwidth, STREAM-style, with kernels that tessera compiles.

    .venv/bin/python bench/stream.py [threads]        # copy, scale, add, triad in GB/s

The four STREAM kernels (copy b = a, scale b = s * a, add c = a + b, triad a = b + s * c) over
float32 arrays of `MIB` MiB each, far beyond any cache; each written with `te.compute`, its
loop split in chunks that run in parallel on the runtime's threads, the inner loop vectorized.
Bytes counted as STREAM counts them (each array read or written once; the write-allocate read
is not counted). The result is the best of `repeat` timings: a shared machine only ever makes a
run slower. `bench/roofline.py` takes the triad's figure as the bandwidth bound; the triad per
core over the clock is the target's `-dram-bytes-per-cycle` (printed where /proc/cpuinfo gives
the clock).
"""

from __future__ import annotations

import sys

import numpy as np

MIB = 64  # per array: three arrays of 64 MiB are far beyond the L3 of current CPUs
CHUNK = 1 << 16  # elements per parallel chunk


def _kernel(name: str, n: int):
    """(built function, number of arrays) of one STREAM kernel over n floats."""
    import tessera
    from tessera import te

    a = te.placeholder((n,), name="a")
    b = te.placeholder((n,), name="b")
    s = te.const(3.0, "float32")
    if name == "copy":
        ins, out = [a], te.compute((n,), lambda i: a[i], name="out")
    elif name == "scale":
        ins, out = [a], te.compute((n,), lambda i: s * a[i], name="out")
    elif name == "add":
        ins, out = [a, b], te.compute((n,), lambda i: a[i] + b[i], name="out")
    elif name == "triad":
        ins, out = [a, b], te.compute((n,), lambda i: a[i] + s * b[i], name="out")
    else:
        raise ValueError(f"unknown STREAM kernel {name!r}")
    sch = te.create_schedule(out.op)
    outer, inner = sch[out].split(out.op.axis[0], factor=CHUNK)
    vo, vi = sch[out].split(inner, factor=16)
    sch[out].parallel(outer)
    sch[out].vectorize(vi)
    return tessera.build(sch, [*ins, out], target="llvm", name=name), len(ins) + 1


def measure_bandwidth(threads: int = 1, kernels=("copy", "scale", "add", "triad"), repeat=5):
    """{kernel: GB/s} on `threads` threads, best of `repeat` timings of a few runs each."""
    from tessera.runtime import cpu, get_num_threads, nd, set_num_threads

    n = MIB * (1 << 20) // 4
    n -= n % CHUNK
    before = get_num_threads()
    set_num_threads(threads)
    try:
        arrays = [nd.array(np.full(n, 1.0, np.float32)) for _ in range(3)]
        out = {}
        for name in kernels:
            fn, count = _kernel(name, n)
            timer = fn.time_evaluator(fn.entry_name, cpu(0), number=3, repeat=repeat)
            best = timer(*arrays[:count]).min
            out[name] = count * n * 4 / best / 1e9
        return out
    finally:
        set_num_threads(before)


def clock_ghz() -> float | None:
    """The first core's clock from /proc/cpuinfo ("cpu MHz"), or None where it is not there."""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("cpu MHz"):
                return float(line.split(":")[1]) / 1000
    except (OSError, ValueError):
        pass
    return None


def bytes_per_cycle(gb_per_s: float, threads: int, ghz: float) -> float:
    """A bandwidth as DRAM bytes per cycle per core: the target option -dram-bytes-per-cycle
    (Note [described machine] in tessera/target.py)."""
    return gb_per_s / threads / ghz


if __name__ == "__main__":
    t = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    rates = measure_bandwidth(t)
    print(f"{t} thread(s): " + ", ".join(f"{k} {v:.1f} GB/s" for k, v in rates.items()))
    ghz = clock_ghz()
    if ghz:
        per = bytes_per_cycle(rates["triad"], t, ghz)
        print(f"triad at {ghz:.2f} GHz: {per:.1f} bytes per cycle per core (-dram-bytes-per-cycle)")
