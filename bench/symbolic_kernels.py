"""Benchmark: kernels built once with a symbolic dim against kernels specialized to each size.

    .venv/bin/python bench/symbolic_kernels.py [--cases dense,softmax] [--sizes 1,13,64,197,384]
                                               [--threads 1] [--rounds 15] [--min-ms 5]

Each case is one op's compute and its x86 schedule (the graph op's schedule rule for the
host's keys, with its default config), built twice: once with the dim `n` a `te.var` (one
kernel for every size; its tiles chosen by the rules at the representative size, topi/symbolic
.py) and once per size with `n` that int. At each size both kernels run in turns (`--rounds`
rounds; each round runs each kernel back to back for about `--min-ms` ms, the order
alternating), after checking that both give numpy's answer. Prints, per case and size, the
specialized kernel's median time and the median over rounds of symbolic / specialized, and the
load average before and after. The bar of issue 13: within 1.2x. This is a benchmark, not a
test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import inspect
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tessera  # noqa: E402
from tessera import te  # noqa: E402
from tessera.graph.op import get_op  # noqa: E402
from tessera.ir.module import IRModule  # noqa: E402
from tessera.runtime import native  # noqa: E402
from tessera.target import load_strategies  # noqa: E402
from tessera.topi import generic  # noqa: E402

F32 = "float32"


def _case(op, shapes, attrs=None, ref=None):
    """shapes: a function of n giving the input shapes; ref: numpy reference (else op's)."""
    return {"op": op, "shapes": shapes, "attrs": attrs or {}, "ref": ref}


# BERT-base-like widths (768 hidden, 12 heads of 64, 3072 intermediate) with n = batch * seq
# rows, attention over seq = n; an OCR-like conv over a width n, a detector's over a batch n.
# The packed dense cases take panels of 64 columns (an AVX-512 target's; elsewhere the
# kernels read them as vectors that divide 64).
CASES = {
    "add_gelu": _case("add", lambda n: [(n, 768), (768,)]),
    "reduce_sum": _case("sum", lambda n: [(n, 768)], {"axis": 1, "keepdims": False}),
    "softmax_rows": _case("nn.softmax", lambda n: [(n, 128)], {"axis": -1}),
    "softmax_seq": _case("nn.softmax", lambda n: [(12, n, n)], {"axis": -1}),
    "layer_norm": _case(
        "nn.layer_norm", lambda n: [(n, 768), (768,), (768,)], {"axis": -1, "epsilon": 1e-5}
    ),
    "dense": _case("nn.dense", lambda n: [(n, 768), (768, 768)]),
    "dense_packed": _case(  # constant weights packed in panels (BERT's dense layers)
        "nn.dense_packed", lambda n: [(n, 768), (12, 768, 64)], {"units": 768}
    ),
    "dense_ffn": _case("nn.dense_packed", lambda n: [(n, 768), (48, 768, 64)], {"units": 3072}),
    "attn_qk": _case(
        "nn.batch_matmul", lambda n: [(12, n, 64), (12, n, 64)], {"transpose_b": True}
    ),
    "attn_pv": _case(
        "nn.batch_matmul", lambda n: [(12, n, n), (12, n, 64)], {"transpose_b": False}
    ),  # fmt: skip
    "conv_ocr": _case(
        "nn.conv2d_nchwc",
        lambda n: [(1, 4, 8, n, 16), (4, 4, 3, 3, 16, 16)],
        {"strides": (1, 1), "padding": (1, 1, 1, 1), "dilation": (1, 1), "groups": 1},
    ),
    "conv_batch": _case(
        "nn.conv2d_nchwc",
        lambda n: [(n, 4, 14, 14, 16), (4, 4, 3, 3, 16, 16)],
        {"strides": (1, 1), "padding": (1, 1, 1, 1), "dilation": (1, 1), "groups": 1},
    ),
    "transpose": _case("transpose", lambda n: [(n, 12, 64)], {"axes": [1, 0, 2]}),
    "max_pool": _case(
        "nn.max_pool2d",
        lambda n: [(1, 32, 16, n)],
        {"pool_size": (2, 2), "strides": (2, 2), "padding": (0, 0, 0, 0), "dilation": (1, 1)},
    ),
}


def schedule_for(op, outs, target):
    keys = target.kind_info.keys(target)
    load_strategies(keys)
    for key in keys:
        rule = op.rules.get(f"schedule:{key}")
        if rule is not None:
            if "config" in inspect.signature(rule).parameters:
                return rule(list(outs), target, config=None)
            return rule(list(outs), target)
    return generic.schedule_injective(list(outs), target)


def build(case, n, target):
    op = get_op(case["op"])
    args = [te.placeholder(s, F32, name=f"in{k}") for k, s in enumerate(case["shapes"](n))]
    outs = op.rules["compute"](*args, **case["attrs"])
    outs = tuple(outs) if isinstance(outs, (tuple, list)) else (outs,)
    with target:
        s = schedule_for(op, outs, target)
    func = te.lower(s, [*args, *outs], name="kernel")
    return tessera.build(IRModule({"kernel": func}), target=target)["kernel"]


def timed(fn, args, min_ms: float, clock) -> float:
    buffers, values = fn.pack_arguments(args)
    cfunc = fn._cfunc
    runs, elapsed = 1, 0.0
    while True:
        t0 = clock()
        for _ in range(runs):
            cfunc(buffers, values)
        elapsed = clock() - t0
        if elapsed * 1e3 >= min_ms:
            return elapsed / runs
        runs *= 2


def run_case(name, case, sizes, target, rounds, min_ms, rng, clock):
    sym = build(case, te.var("n"), target)
    op = get_op(case["op"])
    rows = []
    for n in sizes:
        inputs = [rng.standard_normal(s).astype(F32) for s in case["shapes"](n)]
        expected = op.evaluate(inputs, case["attrs"])
        outs = {k: [np.empty(e.shape, e.dtype) for e in expected] for k in ("sym", "static")}
        static = build(case, n, target)
        for key, fn in (("sym", sym), ("static", static)):
            fn(*inputs, *outs[key])
            for o, e in zip(outs[key], expected, strict=True):
                np.testing.assert_allclose(o, e, rtol=1e-3, atol=1e-3, err_msg=f"{name} n={n}")
        ratios, base = [], []
        for r in range(rounds):
            order = [("sym", sym), ("static", static)][:: 1 if r % 2 else -1]
            t = {k: timed(fn, [*inputs, *outs[k]], min_ms, clock) for k, fn in order}
            ratios.append(t["sym"] / t["static"])
            base.append(t["static"])
        rows.append((n, statistics.median(base), statistics.median(ratios)))
        print(f"{name:14s} n={n:<5d} specialized {statistics.median(base) * 1e3:9.4f} ms  "
              f"symbolic/specialized {statistics.median(ratios):5.2f}", flush=True)  # fmt: skip
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--sizes", default="1,13,64,197,384")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--min-ms", type=float, default=5.0)
    args = p.parse_args(argv)
    native.set_num_threads(args.threads)
    # at 1 thread the kernel runs on this thread: its CPU time is steadier than the wall time
    # on a shared machine (preemption does not count); with more threads, wall time
    clock = time.thread_time if args.threads == 1 else time.perf_counter
    target = tessera.Target("llvm")
    sizes = [int(s) for s in args.sizes.split(",")]
    what = "thread CPU time" if args.threads == 1 else "wall time"
    print(f"load before: {os.getloadavg()}  threads {args.threads} ({what})  target {target}")
    rng = np.random.default_rng(0)
    summary = {}
    for name in args.cases.split(","):
        rows = run_case(name, CASES[name], sizes, target, args.rounds, args.min_ms, rng, clock)
        summary[name] = rows
    print(f"load after: {os.getloadavg()}")
    print("\n| case | " + " | ".join(f"n={n}" for n in sizes) + " |")
    print("|---|" + "---|" * len(sizes))
    for name, rows in summary.items():
        print(f"| {name} | " + " | ".join(f"{r:.2f}" for _, _, r in rows) + " |")


if __name__ == "__main__":
    main()
