"""What the tuner gains on a model's GEMM tasks (issue 11), with the GEMM cache-block knobs
(Note [cache blocks] in topi/x86/dense.py: `kc_scope`, `mc`, `nc`) and without them (the space
held to kc_scope "tile", today's loop nest), each task tuned alone in its in-model layout.

    .venv/bin/python bench/tune_gemm.py [--model bert_base] [--budget 240] [--threads 2]
        [--spaces with,without] [--ops nn.dense,matmul,nn.batch_matmul] [--top 5]

Per space: `autotune.tune_tasks` over the `--top` GEMM tasks by default time x calls, with
`--budget` seconds in all (split by the tuner's scheduler, Note [scheduling the budget]); each
task's confirmed default and best medians (the tuner's `_confirm`: both measured again in
turns), the best's changed knobs, how many block-scope configs were measured and the best of
them over the default (single runs), and the calls-weighted time of the tasks with their bests
over their defaults. The records go to a temporary database. The load is printed before and
after. A benchmark, not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

BLOCK_KNOBS = ("kc_scope", "mc", "nc")


def without_block_knobs():
    """Hold the x86 GEMM spaces to kc_scope "tile" (mc = nc = 0): the space before the knobs."""
    from tessera.topi.strategy import ConfigSpace
    from tessera.topi.x86 import strategy

    gemm_space = strategy._gemm_space

    def held(*args, **kwargs):
        space = gemm_space(*args, **kwargs)
        tile = [lambda v: v["kc_scope"] == "tile"]
        return ConfigSpace(space.knobs, [*space.constraints, *tile])

    strategy._gemm_space = held
    return gemm_space


def _block_trials(db, r, target) -> str:
    """How many block-scope configs the search measured, and the best one's (single-run) time
    over the default's baseline record."""
    records = [x for x in db.of(r.task, target) if x.ok and not x.again]
    base = [x.seconds for x in records if x.baseline]
    block = [x.seconds for x in records if x.config.get("kc_scope") == "block"]
    if not block or not base:
        return f"{len(block)} block configs"
    return f"{len(block)} block configs, the best {min(block) / min(base):.2f} of the default"


def run_space(label, tasks, counts, contexts, target, args) -> None:
    from tessera.autotune.measure import Measurer
    from tessera.autotune.records import Database
    from tessera.autotune.tuner import tune_tasks

    with tempfile.TemporaryDirectory() as tmp, Measurer(timeout=60) as measurer:
        db = Database(os.path.join(tmp, "tune.db"))
        results = tune_tasks(
            tasks, target, db, args.budget, counts, measurer, contexts=contexts, seed=args.seed
        )
        blocks = {r.task: _block_trials(db, r, target) for r in results}
    default_sum = best_sum = 0.0
    for r in results:
        if not r.default_seconds:
            continue
        best = r.best_seconds if r.best is not None and r.best_seconds else r.default_seconds
        default_sum += r.default_seconds * r.count
        best_sum += best * r.count
        changed = {}
        if r.best is not None:
            changed = {k: v for k, v in r.best.knobs().items() if r.default.knobs().get(k) != v}
        print(
            f"  [{label}] {r.task} x{r.count}: default {r.default_seconds * 1e3:.3f} ms, "
            f"best {best * 1e3:.3f} ms ({best / r.default_seconds:.2f}), {r.trials} trials, "
            f"{r.failed} failed; {changed or 'the default'}; {blocks[r.task]}",
            flush=True,
        )
    if default_sum:
        print(
            f"[{label}] calls-weighted: {default_sum * 1e3:.2f} -> {best_sum * 1e3:.2f} ms "
            f"({best_sum / default_sum:.3f}); load {os.getloadavg()[0]:.1f}",
            flush=True,
        )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="bert_base")
    p.add_argument("--budget", type=float, default=240.0, help="tuning seconds per space")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--spaces", default="with,without")
    p.add_argument("--ops", default="nn.dense,matmul,nn.batch_matmul")
    p.add_argument("--top", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    os.environ["TESSERA_NUM_THREADS"] = str(args.threads)  # the measurement worker's

    from headroom import model_tasks

    import tessera
    from tessera.autotune.measure import Measurer
    from tessera.transform import PassContext

    target = tessera.Target("llvm")
    *_, tasks, contexts, counts = model_tasks(args.model, target)
    ops = set(args.ops.split(","))
    gemms = [t for t in tasks if t.workload.op in ops and "kc" in t.default(target)]
    print(f"{args.model}: {len(gemms)} GEMM tasks; load {os.getloadavg()}", flush=True)
    with Measurer(timeout=60) as measurer, PassContext(opt_level=3):  # rank by time x calls
        timed = []
        for t in gemms:
            res = measurer.measure(t, t.default(target, contexts.get(t)), target,
                                   model_context=contexts.get(t))  # fmt: skip
            if res.ok:
                timed.append((res.seconds * max(1, counts[t]), t))
    top = [t for _, t in sorted(timed, key=lambda x: -x[0])[: args.top]]
    for label in args.spaces.split(","):
        original = without_block_knobs() if label == "without" else None
        try:
            with PassContext(opt_level=3):
                run_space(label, top, counts, contexts, target, args)
        finally:
            if original is not None:
                from tessera.topi.x86 import strategy

                strategy._gemm_space = original
    print(f"load after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
