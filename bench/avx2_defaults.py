"""Benchmark: the AVX2 defaults that follow the target's machine balance, against the decisions
they replaced, on code for `llvm -mcpu=haswell` (this machine runs AVX2 code).

    .venv/bin/python bench/avx2_defaults.py [--models resnet50,mobilenet_v2,bert_layer]
                                            [--threads 1] [--seconds 20] [--kernels]

Until the balance was derived from the target (Note [machine balance] in topi/x86/cpu.py), every
target took AVX-512's: 16 FMAs per weight vector from memory (and a prefetch limit of 64 reuses),
and every row reduction split in 16 partials. The decisions of that time are today's rules on a
target described with that balance (`-dram-bytes-per-cycle=4` on AVX2: 2 x 32 / 4 = 16) and a
split of 16. For each model: the tasks whose default differs from that (printed), then the
model built with today's defaults ("now") and with the old decisions given as `configs=`
("before"; and "balance": only the decisions of the balance), run in turns (one run each, then
the next variant), the median of each variant's process CPU time per run (at 1 thread, the run's own
work: the time a loaded machine makes it wait for a core is not counted; the wall time is
printed too) and its ratio to "now". `--kernels`: each changed task alone instead (its one-op
graph with today's default and with the old decision, caches flushed before every run, as a
model's weights arrive from DRAM). A benchmark, not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

TARGET = "llvm -mcpu=haswell"
OLD_BALANCE = " -dram-bytes-per-cycle=4"  # 16 FMAs per weight vector on AVX2, as before
OLD_SPLIT = 16  # ROW_LANES: every build's row split before it followed the target's vectors


def models() -> dict:
    import model_zoo

    import tessera

    return {
        "resnet50": (lambda: tessera.models.light_model("resnet50"), None),
        "mobilenet_v2": (model_zoo.mobilenet_v2, None),
        "bert_layer": (lambda: model_zoo.bert_encoder(layers=1, seq=32), model_zoo.bert_inputs),
    }


def load(name: str):
    """(graph module, params, feeds) of a model of `models()`."""
    from tessera.frontend import from_onnx
    from tessera.models import random_inputs

    make, feeds_of = models()[name]
    model = make()
    feeds = (feeds_of or random_inputs)(model, 0)
    mod, params = from_onnx(model, {k: v.shape for k, v in feeds.items()})
    return mod, params, feeds


def old_decisions(mod, params, target) -> tuple[dict, dict, dict]:
    """({task: config} of the old balance's decisions, the same with the old row split too,
    {task: today's default}) for the tasks whose default differs."""
    from tessera import autotune
    from tessera.transform import PassContext

    old_target = type(target)(str(target) + OLD_BALANCE)
    balance, split, today = {}, {}, {}
    with PassContext(opt_level=3):
        contexts = {}
        for task in autotune.extract_tasks(mod, params, target, contexts=contexts):
            now = today[task] = task.default(target, contexts.get(task))
            old = task.default(old_target, contexts.get(task))
            if old != now:
                balance[task] = old
            if "split" in now and now["split"] != OLD_SPLIT:
                candidate = type(now)(now.impl, dict(now.knobs(), split=OLD_SPLIT))
                if task.valid(candidate, target):
                    split[task] = candidate
            for name, configs in (("balance", balance), ("split", split)):
                if task in configs:
                    print(f"  {name}: {task}\n    now {now}\n    old {configs[task]}")
    before = {**balance, **split}
    return balance, before, {t: today[t] for t in before}


FLUSH = None


def _flush() -> None:
    """Evict the caches (a model's weights come from DRAM: Note [weight prefetch])."""
    global FLUSH
    if FLUSH is None:
        FLUSH = np.ones(16 << 20, dtype=np.float32)  # 64 MiB, beyond any L3 here
    FLUSH += 1.0


def run_kernels(names: list[str], seconds: float) -> None:
    """Each changed task alone (its one-op graph, autotune.measure.kernel_graph), today's
    default against the old decision, in turns, caches flushed before each run, process CPU
    time (1 thread)."""
    import tessera
    from tessera.autotune.measure import kernel_graph

    tessera.runtime.set_num_threads(1)
    target = tessera.Target(TARGET)
    for name in names:
        mod, params, _ = load(name)
        print(f"{name} kernels ({TARGET}, 1 thread, cold caches):")
        _, before, today = old_decisions(mod, params, target)
        for task in before:
            func, weights, inputs = kernel_graph(task)
            runners = {}
            for variant, config in (("now", today[task]), ("before", before[task])):
                lib = tessera.build(func, target=target, params=weights, configs={task: config})
                m = tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))
                m.set_input(**inputs)
                m.run()
                runners[variant] = m
            cpu = {v: [] for v in runners}
            deadline = time.time() + seconds
            while time.time() < deadline or len(cpu["now"]) < 20:
                for variant, m in runners.items():
                    _flush()
                    c = time.process_time()
                    m.run()
                    cpu[variant].append(time.process_time() - c)
            now, old = (statistics.median(cpu[v]) for v in ("now", "before"))
            print(
                f"  {task}\n    now {today[task]}: {now * 1e6:9.1f} us   before "
                f"{before[task]}: {old * 1e6:9.1f} us   before/now {old / now:.3f}  "
                f"runs {len(cpu['now'])}  load {os.getloadavg()[0]:.1f}",
                flush=True,
            )


def run(names: list[str], threads: int, seconds: float) -> None:
    import tessera

    tessera.runtime.set_num_threads(threads)
    target = tessera.Target(TARGET)
    for name in names:
        mod, params, feeds = load(name)
        print(f"{name} ({TARGET}, {threads} thread(s)):")
        balance, before, _ = old_decisions(mod, params, target)
        variants = {"now": {}, "before": before}
        if balance and balance != before:
            variants["balance"] = balance
        if not before:
            print("  no decision differs")
            continue
        runners, outputs = {}, {}
        for variant, configs in variants.items():
            lib = tessera.build(mod, target=target, params=params, configs=configs)
            m = tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))
            for k, v in feeds.items():
                m.set_input(k, v)
            m.run()
            outputs[variant] = m.get_output(0).numpy()
            runners[variant] = m
        for variant, out in outputs.items():
            err = np.abs(out - outputs["now"]).max() / (np.abs(outputs["now"]).max() + 1e-30)
            if err > 1e-3:
                raise SystemExit(f"{name}: {variant} differs from now by {err:.2e}")
        # in turns: one run of each variant, then the next turn. On a loaded machine a run's
        # wall time is mostly waiting for a core; at 1 thread the process's CPU time is the
        # run's own work (what it waited for is not counted), so that is the number compared
        cpu = {v: [] for v in runners}
        wall = {v: [] for v in runners}
        deadline = time.time() + seconds
        while time.time() < deadline or len(cpu["now"]) < 10:
            for variant, m in runners.items():
                c, w = time.process_time(), time.perf_counter()
                m.run()
                cpu[variant].append(time.process_time() - c)
                wall[variant].append(time.perf_counter() - w)
        base = statistics.median(cpu["now"])
        for variant in runners:
            med = statistics.median(cpu[variant])
            print(
                f"  {variant:8s} cpu median {med * 1e3:8.2f} ms"
                f" (min {min(cpu[variant]) * 1e3:8.2f})"
                f"  wall median {statistics.median(wall[variant]) * 1e3:8.2f} ms"
                f"  runs {len(cpu[variant]):4d}  / now {med / base:.3f}"
            )
        print(f"  load {os.getloadavg()[0]:.1f}", flush=True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="resnet50,mobilenet_v2,bert_layer")
    parser.add_argument("--threads", default="1")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--kernels", action="store_true", help="each changed kernel alone")
    args = parser.parse_args(argv)
    if args.kernels:
        run_kernels(args.models.split(","), args.seconds)
        return
    for threads in (int(t) for t in args.threads.split(",")):
        run(args.models.split(","), threads, args.seconds)


if __name__ == "__main__":
    main()
