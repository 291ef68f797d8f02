"""Run-time random generators (Note [run-time random numbers]) against ONNX Runtime and numpy,
in turns, as ratios.

    .venv/bin/python bench/random_ops.py [--size 1048576] [--rounds 7] [--dynamic]

RandomUniform and RandomNormal of `size` float32 samples, each compiled once: tessera's
`GraphModule.run`, ONNX Runtime (one thread) and numpy's `Generator` run in alternating rounds
(A, B, C, A, B, C, ...) of 20 calls each; the table gives medians, the ratios (above 1:
tessera faster) and the load (`uptime`) of the run. With `--dynamic`: RandomUniformLike and
RandomNormalLike of an input f32[4, n] and f32[n, 1024], one build over a symbolic n against
builds specialized to each size, in turns (dynamic / specialized). This is a measurement, not
a test.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _seconds(fn, calls: int = 20) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def _contenders(op: str, size: int) -> dict:
    import onnxruntime as ort
    from onnx import helper

    import tessera
    from tessera.frontend import from_onnx
    from tessera.frontend.testing import make_model

    model = make_model([helper.make_node(op, [], ["y"], shape=[size], seed=1.0)], {}, ["y"])
    mod, params = from_onnx(model)
    lib = tessera.build(mod, target="llvm", params=params)
    module = tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), opts,
                                   providers=["CPUExecutionProvider"])  # fmt: skip
    rng = np.random.default_rng(0)
    draw = rng.random if op == "RandomUniform" else rng.standard_normal
    return {
        "tessera": module.run,
        "ORT": lambda: session.run(None, {}),
        "numpy": lambda: draw(size, np.float32),
    }


def _like(op: str, shape_dict: dict, dims=(4, "n")):
    from onnx import helper

    import tessera
    from tessera.frontend import from_onnx
    from tessera.frontend.testing import make_model

    node = helper.make_node(op, ["x"], ["y"], seed=1.0)
    model = make_model([node], {"x": (dims, "float32")}, ["y"])
    mod, params = from_onnx(model, shape_dict=shape_dict)
    lib = tessera.build(mod, target="llvm", params=params)
    return tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))


def _dynamic(samples: int, rounds: int) -> None:
    """Like forms over a symbolic dim (the last, x: [4, n], or the first, x: [n, 1024]) against
    builds specialized to each size, in turns."""
    layouts = (((4, "n"), [16, 1000, samples // 4]), (("n", 1024), [1, 16, samples // 1024]))
    for op in ("RandomUniformLike", "RandomNormalLike"):
        for dims, sizes in layouts:
            bound = tuple(("n", 1, max(sizes)) if d == "n" else d for d in dims)
            dynamic = _like(op, {"x": bound}, dims)
            ratios = []
            for n in sizes:
                shape = tuple(n if d == "n" else d for d in dims)
                x = np.zeros(shape, np.float32)
                static = _like(op, {"x": shape}, dims)
                fns = {"dynamic": lambda m=dynamic, x=x: m.run(x=x),
                       "specialized": lambda m=static, x=x: m.run(x=x)}  # fmt: skip
                times = {name: [] for name in fns}
                for fn in fns.values():
                    fn()
                for _ in range(rounds):
                    for name, fn in fns.items():
                        times[name].append(_seconds(fn))
                med = {name: float(np.median(t)) for name, t in times.items()}
                ratios.append(f"n={n}: {med['dynamic'] * 1e3:.3f} / "
                              f"{med['specialized'] * 1e3:.3f} ms = "
                              f"{med['dynamic'] / med['specialized']:.2f}")  # fmt: skip
            print(f"{op} {list(dims)} dynamic / specialized: " + "; ".join(ratios))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=1 << 20)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--dynamic", action="store_true", help="Like forms over a symbolic dim")
    args = parser.parse_args()
    print(f"load: {os.getloadavg()[0]:.1f} (1 min), {os.cpu_count()} cpus")
    if args.dynamic:
        _dynamic(args.size, args.rounds)
        return
    for op in ("RandomUniform", "RandomNormal"):
        fns = _contenders(op, args.size)
        for fn in fns.values():
            fn()  # warm-up
        times = {name: [] for name in fns}
        for _ in range(args.rounds):
            for name, fn in fns.items():
                times[name].append(_seconds(fn))
        med = {name: float(np.median(t)) for name, t in times.items()}
        print(f"{op} ({args.size} float32): " + ", ".join(
            f"{name} {t * 1e3:.2f} ms" for name, t in med.items()
        ) + f"; ORT / tessera {med['ORT'] / med['tessera']:.2f}x, "
            f"numpy / tessera {med['numpy'] / med['tessera']:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
