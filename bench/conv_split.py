"""The conv threading split (Note [conv threading split]) of every conv task of a model: each
task's default config with its `parallel` knob set to each split, measured alone in its
in-model layout (`autotune.Measurer`, Note [in-model layout]), the splits in turns.

    .venv/bin/python bench/conv_split.py [--model shufflenet] [--rounds 3] [--threads 2]

Prints per task the median of each split, then the model's calls weighted: every conv with
"rows" (the default), with "chunks", with "none", and each with its fastest split. Not a test:
nothing here asserts a time; on a shared machine single kernels vary by several percent.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SPLITS = ("rows", "chunks", "none")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="shufflenet")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    # the measurement worker reads the thread count from the environment it inherits
    os.environ["TESSERA_NUM_THREADS"] = str(args.threads)

    from zoo import SUITE

    import tessera
    from tessera import autotune
    from tessera.autotune.measure import Measurer
    from tessera.autotune.tuner import task_counts
    from tessera.frontend import from_onnx
    from tessera.topi.strategy import Config
    from tessera.transform import PassContext

    target = tessera.Target("llvm")
    mod, params = from_onnx(SUITE[args.model].build())
    contexts: dict = {}
    with PassContext(opt_level=3):
        tasks = autotune.extract_tasks(mod, params, target, contexts=contexts)
        counts = task_counts(mod, params, target)
    print(f"{args.model}: load average {os.getloadavg()[0]:.1f}", flush=True)
    totals = dict.fromkeys((*SPLITS, "best"), 0.0)
    with Measurer(timeout=60) as measurer, PassContext(opt_level=3):
        for task in tasks:
            context = contexts.get(task)
            default = task.default(target, context)
            if task.workload.op != "nn.conv2d" or "parallel" not in default:
                continue
            knobs = default.knobs()
            configs = {s: Config(default.impl, {**knobs, "parallel": s}) for s in SPLITS}
            reference = measurer.measure(task, default, target, None, model_context=context)
            times: dict = {s: [] for s in SPLITS}
            for _ in range(args.rounds):
                for s, config in configs.items():
                    res = measurer.measure(
                        task, config, target, reference.outputs, model_context=context
                    )
                    times[s].append(res.seconds if res.ok else float("inf"))
            med = {s: sorted(v)[len(v) // 2] for s, v in times.items()}
            calls = counts[task] or 1
            for s in SPLITS:
                totals[s] += med[s] * calls
            totals["best"] += min(med.values()) * calls
            shape = f"{task.workload.shape(0)} w{task.workload.shape(1)} x{calls}"
            print(
                f"{default.impl:16s} {shape}: "
                + " ".join(f"{s} {med[s] * 1e6:8.1f} us" for s in SPLITS),
                flush=True,
            )
    print(
        "calls weighted, ms: "
        + ", ".join(f"{k} {v * 1e3:.3f}" for k, v in totals.items())
        + f"; best / rows {totals['best'] / totals['rows']:.3f}; "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
