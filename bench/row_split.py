"""Benchmark: the row split of layer_norm and softmax (Note [lane split] in topi/nn/softmax.py)
as builds take it now (the rule over the target's vectors) against a given split, with ONNX
Runtime in the same run, in turns.

    .venv/bin/python bench/row_split.py [--rows 32,128] [--width 768] [--split 16] [--threads 2]

Until lowering made the group's target current, every build split rows into 16 partials
(ROW_LANES); `--split 16` is that. For each op and row count: median microseconds of the
rule's split, the given split and ORT, and the ratios. The machine is shared: timings are
noisy; the turns (each once the others' threads are quiet, `measure_in_blocks`) make a change
of load hit the three alike. Nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import onnxruntime as ort
from onnx import helper

import tessera
from tessera import autotune
from tessera.cli.bench import measure_in_blocks
from tessera.frontend import from_onnx
from tessera.frontend.testing import make_model
from tessera.runtime import GraphModule, cpu, set_num_threads
from tessera.topi.strategy import Config


def _model(op: str, rows: int, width: int):
    rng = np.random.default_rng(0)
    if op == "layer_norm":
        node = helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1)
        weights = {"g": rng.standard_normal(width).astype(np.float32)}
        weights["b"] = rng.standard_normal(width).astype(np.float32)
    else:
        node = helper.make_node("Softmax", ["x"], ["y"], axis=-1)
        weights = {}
    return make_model([node], {"x": ((1, rows, width), "float32")}, ["y"], weights)


def _repeated(run, reps: int):
    def many():
        for _ in range(reps):
            run()

    return many


def measure(op: str, rows: int, width: int, split: int, threads: int, turns: int, reps: int):
    model = _model(op, rows, width)
    mod, params = from_onnx(model)
    target = tessera.Target("llvm")
    (task,) = [t for t in autotune.extract_tasks(mod, params, target) if t.key == "x86"]
    rule = task.default(target)
    given = Config("rows", dict(rule.knobs(), split=split))
    x = np.random.default_rng(1).standard_normal((1, rows, width)).astype(np.float32)
    runs = {}
    for label, config in (("rule", rule), ("given", given)):
        lib = tessera.build(mod, target=target, params=params, configs={task: config})
        m = GraphModule(lib["default"](cpu(0)))
        m.set_input("x", x)
        runs[label] = m.run
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    runs["ort"] = lambda: sess.run(None, {"x": x})
    # turns of runs, each once the others' threads are quiet (Note [fair turns])
    runners = {k: _repeated(run, reps) for k, run in runs.items()}
    times, _ = measure_in_blocks(runners, repeat=turns, warmup=1, duration=None)
    med = {k: float(np.median(v)) / reps * 1e6 for k, v in times.items()}
    return rule["split"], med


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", default="32,128")
    p.add_argument("--width", type=int, default=768)
    p.add_argument("--split", type=int, default=16, help="the split to compare the rule with")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--turns", type=int, default=30, help="timed runs of --reps each")
    p.add_argument("--reps", type=int, default=50, help="runs per turn")
    args = p.parse_args()
    set_num_threads(args.threads)
    print(f"load {os.getloadavg()[0]:.1f}, {args.threads} threads, width {args.width}")
    k = args.split
    print(f"op          rows  rule split  rule us  split-{k} us  ORT us  rule/split-{k}  rule/ORT")
    for op in ("layer_norm", "softmax"):
        for rows in (int(r) for r in args.rows.split(",")):
            split, med = measure(op, rows, args.width, args.split, args.threads, args.turns,
                                 args.reps)  # fmt: skip
            print(
                f"{op:<10} {rows:>5} {split:>11} {med['rule']:>8.1f} {med['given']:>12.1f} "
                f"{med['ort']:>7.1f} {med['rule'] / med['given']:>14.3f} "
                f"{med['rule'] / med['ort']:>9.3f}"
            )
    print(f"load {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
