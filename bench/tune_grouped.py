"""Benchmark (issue 11): what the tuner gains on a model's grouped convs alone. The `--top`
grouped-conv tasks of a zoo model by default time x calls, each tuned by `tessera.autotune`
(`tune_tasks`, `--budget` seconds each), then each task's best config against its default
measured in turns (`autotune.Measurer`, the task in its in-model layout), and the model built
with the tuned configs against its defaults and the defaults again (A/A), in turns.

    .venv/bin/python bench/tune_grouped.py [--model shufflenet] [--top 4] [--budget 60]
        [--rounds 5] [--threads 2] [--db /tmp/grouped_tasks.db] [--in-model 40]

A benchmark, not a test: nothing asserts a time; read the ratios and the load it prints.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="shufflenet")
    p.add_argument("--top", type=int, default=4)
    p.add_argument("--budget", type=float, default=60.0, help="seconds of tuning per task")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--db", default="/tmp/grouped_tasks.db")
    p.add_argument("--in-model", type=float, default=40.0, help="seconds of the model in turns")
    args = p.parse_args(argv)
    os.environ["TESSERA_NUM_THREADS"] = str(args.threads)  # the measurement worker's

    from headroom import _median, in_model, model_tasks
    from zoo import SUITE

    import tessera
    from tessera import autotune
    from tessera.autotune.measure import Measurer
    from tessera.autotune.tuner import Builder
    from tessera.transform import PassContext

    target = tessera.Target("llvm")
    model, mod, params, tasks, contexts, counts = model_tasks(args.model, target)
    grouped = [
        t for t in tasks
        if t.workload.op == "nn.conv2d" and 1 < t.workload.attr("groups", 1)
        and t.workload.inputs[1][0][1] > 1  # not depthwise
    ]  # fmt: skip
    print(f"{args.model}: {len(grouped)} grouped tasks; load {os.getloadavg()[0]:.1f}", flush=True)
    with Measurer(timeout=60) as measurer, PassContext(opt_level=3):

        def measure(task, config, reference=None):
            return measurer.measure(task, config, target, reference, model_context=contexts[task])

        ranked = []
        for task in grouped:
            default = task.default(target, contexts.get(task))
            res = measure(task, default)
            ranked.append((res.seconds * (counts[task] or 1), task, default, res))
        ranked.sort(key=lambda r: -r[0])
        top = ranked[: args.top]
        db, builder = autotune.Database(args.db), Builder(2, 0)
        try:
            results = autotune.tune_tasks(
                [t for _, t, _, _ in top], target, db, args.budget * len(top), counts=counts,
                measurer=measurer, builder=builder, contexts=contexts,
            )  # fmt: skip
        finally:
            builder.close()
        bests = {r.task: r.best for r in results if r.best is not None and r.best != r.default}
        total = {"default": 0.0, "tuned": 0.0}
        for _, task, default, reference in top:
            best = bests.get(task, default)
            times: dict = {default: [], best: []}
            for _ in range(args.rounds):
                for config in times:
                    res = measure(task, config, reference.outputs)
                    times[config].append(res.seconds if res.ok else float("inf"))
            med = {c: _median(v) for c, v in times.items()}
            calls = counts[task] or 1
            total["default"] += med[default] * calls
            total["tuned"] += med[best] * calls
            changed = {k: v for k, v in best.knobs().items() if default.knobs().get(k) != v}
            trials = next(r.trials for r in results if r.task is task)
            print(
                f"{task} x{calls}: default {med[default] * 1e6:.1f} us, tuned "
                f"{med[best] * 1e6:.1f} us ({med[best] / med[default]:.3f}) {changed}; "
                f"{trials} trials",
                flush=True,
            )
    default_ms, tuned_ms = total["default"] * 1e3, total["tuned"] * 1e3
    load = os.getloadavg()[0]
    print(f"the {len(top)} tasks, calls weighted: default {default_ms:.3f} ms, tuned", end=" ")
    print(f"{tuned_ms:.3f} ms ({tuned_ms / default_ms:.3f}); load {load:.1f}")
    if bests and args.in_model > 0:  # the model with the tuned tasks, in turns
        in_model(SUITE[args.model], model, mod, params, target, bests, args.in_model)
    return 0


if __name__ == "__main__":
    sys.exit(main())
