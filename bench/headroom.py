"""Where tuning can gain (issue 11): a model's tasks by time, and what configs of their spaces
save, each task measured alone in its in-model layout (`autotune.Measurer`, Note [in-model
layout]) with the candidates in turns.

    .venv/bin/python bench/headroom.py [--model shufflenet] [--threads 2] [--top 8]
        [--knob reduce_order] [--random 6] [--rounds 3] [--ops nn.conv2d,nn.dense]
        [--only "strides=[2, 2]"] [--in-model 60]

Per task (the `--top` tasks with the most default time times calls): the default config's
median, and the candidates': with `--knob K`, the default with K set to each of its candidates
(several, comma-separated: every combination; tasks without them are skipped); with
`--random N`, N random valid configs of the task's implementations (seeded). Prints each
task's best candidate and, at the end, the model's calls weighted: the tasks' default time,
the time with each task's best, and their ratio; with `--in-model S`, the model built with
each task's best against its defaults (and the defaults again, A/A), in turns for S seconds.
Not a test: nothing here asserts a time; on a shared machine single kernels vary by several
percent.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def model_tasks(name: str, target):
    """The suite model `name`'s (onnx model, graph module, params, tasks, calls per task,
    contexts: the layout each task is asked with in the model), at opt level 3."""
    from zoo import SUITE

    from tessera import autotune
    from tessera.autotune.tuner import task_counts
    from tessera.frontend import from_onnx
    from tessera.transform import PassContext

    model = SUITE[name].build()
    mod, params = from_onnx(model)
    contexts: dict = {}
    with PassContext(opt_level=3):
        tasks = autotune.extract_tasks(mod, params, target, contexts=contexts)
        counts = task_counts(mod, params, target)
    return model, mod, params, tasks, counts, contexts


def candidates(task, default, target, knob: str | None, n_random: int, seed: int) -> list:
    """The configs measured against `default`: its knobs `knob` (comma-separated) varied
    together, and random ones."""
    from tessera.topi.strategy import Config

    out = []
    names = [k for k in (knob.split(",") if knob else []) if k in default]
    if names:
        space = task.implementations(target)[default.impl]
        specs = [next(k for k in space.knobs if k.name == name) for name in names]
        for values in itertools.product(*(k.candidates for k in specs)):
            knobs = dict(zip(names, values, strict=True))
            config = Config(default.impl, {**default.knobs(), **knobs})
            if config != default and task.valid(config, target):
                out.append(config)
    rng = random.Random(seed)
    for _ in range(n_random):
        config = task.sample(target, rng)
        if config != default and config not in out:
            out.append(config)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="shufflenet")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--top", type=int, default=8, help="tasks, most time first")
    p.add_argument("--knob", help="vary this knob of the default config")
    p.add_argument("--random", type=int, default=0, help="random configs per task")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--ops", help="only tasks of these ops (comma-separated)")
    p.add_argument("--only", help="only tasks whose description contains this text")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--in-model",
        type=float,
        default=0.0,
        help="then time the model built with each task's best against its defaults, in turns, "
        "for this many seconds (0: not)",
    )
    args = p.parse_args(argv)
    # the measurement worker reads the thread count from the environment it inherits
    os.environ["TESSERA_NUM_THREADS"] = str(args.threads)

    from zoo import SUITE

    import tessera
    from tessera.autotune.measure import Measurer
    from tessera.transform import PassContext

    target = tessera.Target("llvm")
    model, mod, params, tasks, counts, contexts = model_tasks(args.model, target)
    ops = set(args.ops.split(",")) if args.ops else None
    print(f"{args.model}: {len(tasks)} tasks; load average {os.getloadavg()[0]:.1f}", flush=True)
    with Measurer(timeout=60) as measurer, PassContext(opt_level=3):

        def measure(task, config, reference=None):
            res = measurer.measure(
                task, config, target, reference, model_context=contexts.get(task)
            )
            return res

        # the default of every task once, to rank them by time x calls
        ranked = []
        for task in tasks:
            if ops is not None and task.workload.op not in ops:
                continue
            if args.only and args.only not in str(task):
                continue
            default = task.default(target, contexts.get(task))
            res = measure(task, default)
            if res.ok:
                ranked.append((res.seconds * (counts[task] or 1), task, default, res))
        ranked.sort(key=lambda r: -r[0])
        total_default = sum(r[0] for r in ranked)
        weighted = {"default": 0.0, "best": 0.0}
        bests = {}
        for _, task, default, reference in ranked[: args.top]:
            configs = [default, *candidates(task, default, target, args.knob, args.random,
                                            args.seed)]  # fmt: skip
            if len(configs) == 1:
                continue
            times: dict = {c: [] for c in configs}
            for _ in range(args.rounds):
                for config in configs:
                    res = measure(task, config, reference.outputs)
                    times[config].append(res.seconds if res.ok else float("inf"))
            med = {c: _median(v) for c, v in times.items()}
            best = min(med, key=med.get)
            if best != default:
                bests[task] = best
            calls = counts[task] or 1
            weighted["default"] += med[default] * calls
            weighted["best"] += med[best] * calls
            changed = {k: v for k, v in best.knobs().items() if default.knobs().get(k) != v}
            label = best.impl if best.impl != default.impl else ""
            print(
                f"{task} x{calls}\n    default {default.impl} {med[default] * 1e6:9.1f} us, "
                f"best {med[best] * 1e6:9.1f} us ({med[best] / med[default]:.3f}) "
                f"{label} {changed}; {len(configs) - 1} candidates",
                flush=True,
            )
    saved = weighted["default"] - weighted["best"]
    print(
        f"{args.model}: tasks' default time, calls weighted {total_default * 1e3:.3f} ms; "
        f"the {min(args.top, len(ranked))} measured {weighted['default'] * 1e3:.3f} ms, "
        f"with each one's best {weighted['best'] * 1e3:.3f} ms: saves {saved * 1e3:.3f} ms "
        f"({saved / total_default if total_default else 0:.3f} of the model's tasks); "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    if args.in_model > 0 and bests:
        in_model(SUITE[args.model], model, mod, params, target, bests, args.in_model)
    return 0


def in_model(case, model, mod, params, target, bests: dict, seconds: float) -> None:
    """The model built with `bests` against its defaults (and the defaults again: the A/A ratio,
    this run's noise), timed in turns (`measure_in_blocks`)."""
    import numpy as np

    import tessera
    from tessera.cli.bench import measure_in_blocks
    from tessera.runtime import GraphModule, cpu
    from tessera.transform import PassContext

    def module(configs):
        with PassContext(opt_level=3, config={"tuning.pretuned": False}):
            lib = tessera.build(mod, target=target, params=params, configs=configs)
        m = GraphModule(lib["default"](cpu(0)))
        m.set_input(**case.feeds(model, 0))
        return m

    modules = {"default": module(None), "best": module(bests), "default again": module(None)}
    times, _ = measure_in_blocks({k: m.run for k, m in modules.items()}, None, 3, seconds)
    med = {k: float(np.median(v)) for k, v in times.items()}
    print(
        f"in the model ({len(bests)} tasks with their best): "
        + ", ".join(f"{k} {v * 1e3:.3f} ms ({len(times[k])} runs)" for k, v in med.items())
        + f"; best / default {med['best'] / med['default']:.3f}, A/A "
        f"{med['default again'] / med['default']:.3f}; load average {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    sys.exit(main())
