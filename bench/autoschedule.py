"""Benchmark of issue 11's auto-scheduler: plain `te.compute`s with no schedule, tuned by
`tessera.autotune.tune_kernel`, measured next to their references in turns in one run.

    .venv/bin/python bench/autoschedule.py [--kernels matmul,blur] [--budget 300] [--threads 2]
                                           [--size 1024] [--image 4096] [--history FILE]

- matmul: C = A @ B, float32, size^3, written as one `te.compute` with `te.sum`; reference:
  numpy's matmul (OpenBLAS) with the same thread count. Bar: >= 0.9x numpy.
- blur: Halide's 3x3 blur (two stages) on an image^2 float32 image; reference: the hand
  schedule of docs/tutorial-te.md (tiles of 32 x 256, vectorized by 8, blur_x per tile,
  parallel rows of tiles). Bar: >= the hand schedule (tuned time <= hand time).

Per kernel: the naive schedule (no primitive) is timed once inside the tuner (its outputs are
the reference every candidate is checked against), cut off after `--naive-timeout` seconds (a
quarter of the budget by default: the report then says "naive > N s" and the default config's
outputs are the reference); the tuned, the rule default and the
reference are then timed in turns (the order flipping every round, `bench/sgemm.py`'s
`alternate`), medians reported as ratios. The machine's load (`os.getloadavg`) is printed
before and after. Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from sgemm import alternate, blas_info, set_blas_threads  # noqa: E402

import tessera  # noqa: E402
from tessera import te  # noqa: E402
from tessera.autotune import tune_kernel  # noqa: E402
from tessera.autotune.auto_schedule import AutoSpace  # noqa: E402


def matmul(n: int):
    k = te.reduce_axis((0, n), name="k")
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return [C], [A, B, C]


def blur(n: int):
    inp = te.placeholder((n + 2, n + 2), name="inp")
    bx = te.compute(
        (n + 2, n), lambda y, x: (inp[y, x] + inp[y, x + 1] + inp[y, x + 2]) / 3.0, name="blur_x"
    )
    by = te.compute(
        (n, n), lambda y, x: (bx[y, x] + bx[y + 1, x] + bx[y + 2, x]) / 3.0, name="blur_y"
    )
    return [by], [inp, by]


def blur_hand_schedule(n: int):
    """docs/tutorial-te.md's schedule, line for line."""
    (by,), (inp, _) = blur(n)
    bx = by.op.input_tensors[0]
    s = te.create_schedule(by.op)
    y, x = by.op.axis
    yo, xo, yi, xi = s[by].tile(y, x, 32, 256)
    _, xv = s[by].split(xi, factor=8)
    s[by].vectorize(xv)
    s[by].parallel(yo)
    s[bx].compute_at(s[by], xo)
    _, bxv = s[bx].split(bx.op.axis[1], factor=8)
    s[bx].vectorize(bxv)
    return s, [inp, by]


def _arrays(args, rng):
    out = []
    for a in args:
        shape = tuple(int(s.value) for s in a.shape)
        out.append(rng.standard_normal(shape).astype("float32"))
    return out


def _load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def run(name: str, args) -> list[str]:
    size = args.size if name == "matmul" else args.image
    outputs, targs = matmul(size) if name == "matmul" else blur(size)
    lines = [f"{name} {size}: {_load()} before tuning"]
    start = time.perf_counter()
    result = tune_kernel(
        outputs,
        targs,
        args.target,
        budget=args.budget,
        history=args.history,
        seed=args.seed,
        naive_timeout=args.naive_timeout,
    )
    tune_s = time.perf_counter() - start
    lines.append(
        f"  tuned for {tune_s:.0f} s: {result.trials} trials ({result.failed} failed); best "
        f"{result.config}"
    )
    space = AutoSpace(outputs, targs, args.target)
    default_s, default_args = space.apply(space.default())
    built = {
        "tuned": tessera.build(result.schedule, result.args, target=args.target, name="k"),
        "default": tessera.build(default_s, default_args, target=args.target, name="k"),
    }
    rng = np.random.default_rng(0)
    arrays = _arrays(targs, rng)
    nd = [tessera.nd.array(a) for a in arrays]
    fns = {k: (lambda f=f: f(*nd)) for k, f in built.items()}
    if name == "matmul":
        a, b = arrays[0], arrays[1]
        out = np.empty_like(arrays[2])
        fns["numpy"] = lambda: np.matmul(a, b, out=out)
        reference, bar = "numpy", 0.9
        fns["tuned"]()
        np.testing.assert_allclose(nd[2].numpy(), a @ b, rtol=1e-3, atol=1e-2)
    else:
        hand_s, hand_args = blur_hand_schedule(size)
        hand = tessera.build(hand_s, hand_args, target=args.target, name="k")
        fns["hand"] = lambda: hand(*nd)
        reference, bar = "hand", 1.0
        fns["tuned"]()
        img = arrays[0]
        bx = (img[:, :-2] + img[:, 1:-1] + img[:, 2:]) / 3.0
        want = (bx[:-2] + bx[1:-1] + bx[2:]) / 3.0
        np.testing.assert_allclose(nd[1].numpy(), want, rtol=1e-4, atol=1e-5)
    samples = alternate(fns, args.repeat, args.gap)
    med = {k: float(np.median(v)) for k, v in samples.items()}
    speed = med[reference] / med["tuned"]  # > 1: the tuned kernel is faster
    lines += [
        f"  medians of {args.repeat} alternating samples; {_load()} after",
        *_naive_lines(result, med["tuned"]),
        *(f"  {k:8s} {v * 1e3:10.2f} ms" for k, v in med.items()),
        f"  tuned speed / {reference}: {speed:.3f} (bar >= {bar}): "
        f"{'met' if speed >= bar else 'NOT met'}",
    ]
    if name == "matmul":
        lines.append(f"  numpy: {blas_info()}")
    return [ln for ln in lines if ln]


def _naive_lines(result, tuned_s: float) -> list[str]:
    """The naive schedule's time and the tuned kernel's speed over it; for a naive run cut off
    at its cap, a lower bound on both ("> N s", "> N x")."""
    naive = result.naive_seconds
    if naive:
        return [
            f"  naive    {naive * 1e3:10.2f} ms (timed once in the tuner)",
            f"  tuned speed / naive: {naive / tuned_s:.1f}x",
        ]
    cap_s = result.naive_cap_s
    if cap_s is None:
        return [f"  naive -: {result.naive_note} (candidates checked against the default)"]
    return [
        f"  naive    > {cap_s:g} s: cut off at the cap (--naive-timeout); candidates checked "
        "against the default config's outputs",
        f"  tuned speed / naive: > {cap_s / tuned_s:.3g}x",
    ]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kernels", default="matmul,blur")
    p.add_argument("--budget", type=float, default=300.0, help="tuning seconds per kernel")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--size", type=int, default=1024, help="matmul M = N = K")
    p.add_argument("--image", type=int, default=4096, help="blur output rows = columns")
    p.add_argument("--target", default="llvm")
    p.add_argument("--repeat", type=int, default=15)
    p.add_argument("--gap", type=float, default=0.3, help="idle seconds between turns")
    p.add_argument("--history", help="JSON-lines file of measurements (resume, transfer)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--naive-timeout", type=float, help="cap on the naive run (budget / 4)")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    # the measurement worker reads the thread count from the environment it inherits
    os.environ["TESSERA_NUM_THREADS"] = str(args.threads)
    tessera.runtime.set_num_threads(args.threads)
    set_blas_threads(args.threads)
    print(f"auto-schedule: budget {args.budget:.0f} s per kernel, {args.threads} threads")
    for name in args.kernels.split(","):
        print("\n".join(run(name.strip(), args)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
