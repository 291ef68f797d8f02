"""Timing kernels: `Module.time_evaluator` and the result it returns (TVM's shape).

    timer = mod.time_evaluator("myadd", cpu(0), number=10, repeat=3)
    result = timer(a, b, c)          # result.mean, .median, .std, .min, .max, .results (seconds)

Each of the `repeat` measurements runs the kernel `number` times back to back and records the
mean time of one run. Arguments are checked once, before timing, so the numbers are the kernel's
own time plus one native call (well under a microsecond).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class ProfileResult:
    """Seconds per run: one entry in `results` per repeat."""

    results: tuple[float, ...]

    @property
    def mean(self) -> float:
        return statistics.fmean(self.results)

    @property
    def median(self) -> float:
        return statistics.median(self.results)

    @property
    def std(self) -> float:
        return statistics.pstdev(self.results)

    @property
    def min(self) -> float:
        return min(self.results)

    @property
    def max(self) -> float:
        return max(self.results)

    def __str__(self) -> str:
        ms = [x * 1e3 for x in (self.mean, self.median, self.max, self.min, self.std)]
        return (
            "Execution time summary:\n"
            " mean (ms)   median (ms)    max (ms)     min (ms)     std (ms)\n"
            + "  ".join(f"{x:10.4f}" for x in ms)
        )


def _check_counts(number, repeat, min_repeat_ms):
    for name, value, low in (
        ("number", number, 1),
        ("repeat", repeat, 1),
        ("min_repeat_ms", min_repeat_ms, 0),
    ):
        if isinstance(value, bool) or not isinstance(value, int | float) or value < low:
            raise ValueError(f"time_evaluator: {name} must be a number >= {low}, got {value!r}")


def make_timer(packed, number: int = 10, repeat: int = 1, min_repeat_ms: float = 0):
    """A function that runs `packed` on its arguments and returns a ProfileResult.

    When a measurement of `number` runs takes less than `min_repeat_ms`, `number` grows (as in
    TVM) until it does not; the grown number is kept for the following repeats.
    """
    _check_counts(number, repeat, min_repeat_ms)
    number, repeat = int(number), int(repeat)

    def evaluate(*args) -> ProfileResult:
        buffers, values = packed.pack_arguments(args)
        cfunc, name = packed._cfunc, packed.name
        rc = cfunc(buffers, values)  # warm-up: caches, thread pool, page faults
        if rc != 0:
            raise RuntimeError(f"{name} failed: the kernel returned error code {rc}")
        runs, results = number, []
        for _ in range(repeat):
            while True:
                start = time.perf_counter()
                for _ in range(runs):
                    cfunc(buffers, values)
                elapsed = time.perf_counter() - start
                if elapsed * 1e3 >= min_repeat_ms or runs >= 1 << 30:
                    break
                scale = min_repeat_ms / max(elapsed * 1e3, 1e-6)
                runs = max(runs + 1, min(int(runs * scale * 1.2), runs * 100))
            results.append(elapsed / runs)
        return ProfileResult(tuple(results))

    return evaluate
