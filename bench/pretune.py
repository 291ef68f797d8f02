"""Regenerate the configs shipped pre-tuned for this machine's kind (tessera/autotune/pretuned/).

    .venv/bin/python bench/pretune.py [--models shufflenet,mobilenet_v2] [--budget 180]
                                      [--threads 2] [--rounds 3] [--db-dir pretune-dbs]

Per model (bench/zoo.py's): `tessera.autotune.tune` within the budget (records in
DB_DIR/<model>.db; a rerun resumes; `--budget 0` judges the records already there). Then
every task whose tuned config beat its default is measured again *in the model*: the whole
model built with that one config against the model built with the defaults, and the default
build against a second default build (A/A), in turns (`measure_in_blocks`), for `--rounds`
rounds (a round's time of a build: the median of its runs; `--stat min`: the fastest). A
config is kept only when its median in-model ratio (config / default) is below 1 - the
largest A/A deviation of its rounds, and below 1 - `--margin`. The survivors are written to
pretuned/<kind>.jsonl (`machine_kind` of the target, Note [machine kind] in
tessera/autotune/pretuned.py), each with its measurements, and a README.md beside it says the
date, the CPU, the command, the load and the ratios. Last, each model built with the shipped
file against without it (PassContext "tuning.pretuned"), in turns: the whole-model check.
Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from models import ort_session, relative_error  # noqa: E402
from tune import parse_models  # noqa: E402
from zoo import SUITE  # noqa: E402

from tessera.cli.bench import measure_in_blocks  # noqa: E402

OPT_LEVEL = 3


def build(mod, params, target, configs=None, pretuned=False):
    import tessera
    from tessera.runtime import GraphModule, cpu
    from tessera.transform import PassContext

    with PassContext(opt_level=OPT_LEVEL, config={"tuning.pretuned": pretuned}):
        lib = tessera.build(mod, target=target, params=params, configs=configs)
    return GraphModule(lib["default"](cpu(0)))


STATS = {"median": np.median, "min": np.min}


def in_turns(modules: dict, feeds, args) -> list[dict]:
    """Per round, {name: seconds} of each module measured in turns: the median of its runs
    (`--stat min`: the fastest, what a loaded machine's interruptions leave alone). The
    order of the turns rotates from round to round."""
    runners = {}
    for name, m in modules.items():
        m.set_input(**feeds)
        runners[name] = m.run
    out, names = [], list(runners)
    for i in range(args.rounds):
        # each round starts with another build: a place in the turns that is slower (the
        # first after the other's threads parked) is not always the same build's
        order = names[i % len(names) :] + names[: i % len(names)]
        turns = {name: runners[name] for name in order}
        times, _ = measure_in_blocks(turns, args.repeat, 2, args.max_seconds)
        out.append({k: float(STATS[args.stat](v)) for k, v in times.items()})
    return out


def judge(rounds: list[dict], a: str, b: str, aa: str) -> tuple[float, float]:
    """(median of the rounds' a/b ratios, the largest |A/A - 1| of the rounds: aa/b)."""
    ratio = float(np.median([r[a] / r[b] for r in rounds]))
    noise = max(abs(r[aa] / r[b] - 1) for r in rounds)
    return ratio, noise


def candidates(name, args):
    """Tune `name`; [(task, best record)] of the tasks whose tuned config beat the default."""
    from tessera import autotune
    from tessera.autotune.records import Database
    from tessera.frontend import from_onnx
    from tessera.target import Target
    from tessera.transform import PassContext

    case = SUITE[name]
    model = case.build()
    mod, params = from_onnx(model)
    db_path = args.db_dir / f"{name}.db"
    with PassContext(opt_level=OPT_LEVEL, config={"tuning.pretuned": False}):
        if args.budget > 0:
            autotune.tune(
                mod, params, args.target, db_path, args.budget, args.timeout, workers=args.workers
            )
        counts = autotune.task_counts(mod, params, Target(args.target))  # --budget 0: the db's
    db = Database(db_path)
    best = db.best_configs(args.target)
    out = [(t, db.best(t, args.target), n) for t, n in counts.most_common() if t in best]
    return model, case, mod, params, out


def main(argv=None) -> int:
    from tessera.autotune import pretuned
    from tessera.autotune.pretuned import machine_kind, shipped_path, write_shipped
    from tessera.runtime import set_num_threads
    from tessera.target import Target

    args = parse_args(sys.argv[1:] if argv is None else argv)
    os.environ["TESSERA_NUM_THREADS"] = str(args.threads)
    set_num_threads(args.threads)
    target = Target(args.target)
    kind = machine_kind(target)
    if kind is None:
        sys.exit(f"pretune: target {args.target!r} has no machine kind here (Note [machine kind])")
    kept, extra, lines, models = [], [], [], {}
    for name in args.models:
        model, case, mod, params, cands = candidates(name, args)
        feeds = case.feeds(model, 0)
        models[name] = (model, mod, params, feeds)
        print(f"{name}: {len(cands)} candidates", file=sys.stderr, flush=True)
        for task, record, count in cands:
            if task in {r.task for r in kept}:
                continue  # kept from an earlier model
            modules = {
                "default": build(mod, params, target),
                "config": build(mod, params, target, {task: record.config}),
                "default again": build(mod, params, target),
            }
            rounds = in_turns(modules, feeds, args)
            ratio, noise = judge(rounds, "config", "default", "default again")
            keep = ratio < 1 - max(noise, args.margin)
            line = (
                f"{name} {task} x{count} {record.config}: in-model {ratio:.3f} "
                f"(A/A noise {noise:.3f}, alone {record.seconds * 1e3:.3f} ms) "
                f"{'kept' if keep else 'dropped'}"
            )
            print(line, file=sys.stderr, flush=True)
            lines.append(line)
            if keep:
                kept.append(record)
                extra.append({"model": name, "in_model_ratio": round(ratio, 4), "aa": noise})
    if args.out is not None:  # the whole-model check below reads the file written here
        pretuned.PRETUNED_DIR = args.out
    path = shipped_path(kind)
    write_shipped(path, kind, kept, extra)
    checks = []
    for name, (model, mod, params, feeds) in models.items():
        modules = {
            "without": build(mod, params, target),
            "shipped": build(mod, params, target, pretuned=True),
            "without again": build(mod, params, target),
        }
        rounds = in_turns(modules, feeds, args)
        ratio, noise = judge(rounds, "shipped", "without", "without again")
        m = modules["shipped"]

        ort = ort_session(model, args.threads).run(None, feeds)
        err = relative_error([m.get_output(k).numpy() for k in range(m.get_num_outputs())], ort)
        ms = float(np.median([r["without"] for r in rounds])) * 1e3
        checks.append(
            f"{name}: shipped/without {ratio:.3f} (A/A noise {noise:.3f}, without {ms:.2f} ms), "
            f"rel err vs ORT {err:.1e}"
        )
        print(checks[-1], file=sys.stderr, flush=True)
    write_readme(path.parent / "README.md", kind, args, lines, checks)
    return 0


def write_readme(path: Path, kind: str, args, lines, checks) -> None:
    cpu = next(
        (ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if "model name" in ln),
        platform.processor(),
    )
    load = os.getloadavg()[0]
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    head = [
        "# Shipped pre-tuned configs",
        "",
        'Written by `bench/pretune.py` (docs/tuning.md, "Shipped configs"); one file per',
        "machine kind (Note [machine kind] in tessera/autotune/pretuned.py).",
        "",
    ]
    text = [
        f"## {kind}",
        "",
        f"- {stamp}, {cpu}, {args.threads} threads, load average {load:.1f} at the end",
        f"- command: `.venv/bin/python bench/pretune.py {' '.join(args.argv)}`",
        f"- kept: in-model ratio (config/default: the {args.stat} of a round's runs, the median "
        f"of {args.rounds} rounds) below 1 - max(A/A noise, {args.margin}); A/A noise: the "
        "largest |A/A - 1| of the rounds",
        "",
        "Candidates (the tuner's winners, measured again in the whole model):",
        "",
        *[f"- {line}" for line in lines],
        "",
        "Whole-model check (built with the shipped file against without, in turns):",
        "",
        *[f"- {c}" for c in checks],
        "",
    ]
    # the other kinds' sections stay (each kind's "## " section, and what follows it up to the
    # next kind's, is its own)
    others = [(k, body) for k, body in readme_sections(path) if k != kind]
    sections = sorted([*others, (kind, "\n".join(text))])
    path.write_text(
        "\n".join(head) + "\n" + "\n".join(body.rstrip("\n") + "\n" for _, body in sections)
    )


def readme_sections(path: Path) -> list[tuple[str, str]]:
    """(machine kind, its text from its "## <kind>" heading on) of each kind in the README:
    a kind's section runs until the next heading that names a kind (a file's stem)."""
    if not path.exists():
        return []
    kinds = {p.stem for p in path.parent.glob("*.jsonl")}
    sections: list[tuple[str, list[str]]] = []
    for line in path.read_text().splitlines():
        name = line[3:].strip() if line.startswith("## ") else None
        if name in kinds:
            sections.append((name, [line]))
        elif sections:
            sections[-1][1].append(line)
    return [(k, "\n".join(body) + "\n") for k, body in sections]


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="shufflenet,mobilenet_v2", help="from: " + ", ".join(SUITE))
    p.add_argument("--budget", type=float, default=180.0, help="tuning seconds per model")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per candidate")
    p.add_argument("--workers", type=int, default=2, help="build processes (0: none)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--target", default="llvm")
    p.add_argument("--rounds", type=int, default=3, help="in-turn rounds per candidate")
    p.add_argument("--repeat", type=int, default=20, help="timed runs per build per round")
    p.add_argument("--max-seconds", type=float, default=20.0, help="per round")
    p.add_argument("--stat", choices=sorted(STATS), default="median", help="of a round's runs")
    p.add_argument("--margin", type=float, default=0.01, help="least gain kept (fraction)")
    p.add_argument("--db-dir", type=Path, default=Path("pretune-dbs"))
    p.add_argument("--out", type=Path, help="folder of the shipped file (default: the package's)")
    args = parse_models(p, argv)
    args.argv = list(argv)
    return args


if __name__ == "__main__":
    sys.exit(main())
