"""Experiment: why tessera runs slower when its runs alternate with ONNX Runtime's (issue 4).

    .venv/bin/python bench/alternation.py [--models mobilenet_v2,squeezenet] [--threads 2]
        [--variants current,nobackoff,rev:REV] [--repeat 30] [--gaps 0,2,5,10,20]

Hypothesis under test: after each run ONNX Runtime's intra-op workers keep spinning on the other
core (its default `session.intra_op.allow_spinning=1`), tessera's first parallel loops find their
worker descheduled, and the pool's back-off (Note [backing off] in tessera_rt.c) then keeps tessera
on the caller alone for the rest of the inference.

Each variant of the runtime library runs in a fresh process (the library is loaded once per
process): `current` (the working tree's tessera_rt.c), `nobackoff` (the same, never backing
off), `rev:REV` (tessera_rt.c at git revision REV, e.g. rev:802b2aa~1, the pool that backed off
for a count of loops), and every variant counts, per inference, the loops it ran in parallel,
the held-up loops, the loops it ran on the caller alone because of the back-off, and the loops a
worker joined at all. The
`reset` schedule calls `tessera_set_num_threads` before each tessera run, which forgives the
back-off (the effect of a reset at each `tessera_model_run` entry). In each process, per model:

- spin: after one run of an engine (the other idle), the other threads' run time polled from
  /proc every 1 ms: until when one of them still ran (spun) and the CPU time they used;
- schedules (medians of `--repeat` runs, ms): each engine alone (back to back); alternating
  (tessera, ORT, ...); alternating with a sleep of G ms before each turn; ORT with spinning off
  (`session.intra_op.allow_spinning=0`, a diagnostic only) alternating.
- fair turns: `tessera.cli.bench.measure_in_blocks`, the method the benchmarks use now.
Finding (docs/performance.md, "How it's measured"): ORT's threads spin ~30 ms of CPU after each
run; when runs alternate, tessera's worker joins 1-2 of an inference's loops and tessera runs at
its 1-thread speed; no loop was held up and none backed off, so the back-off is not the cause.
This is an experiment, not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

SRC = ROOT / "tessera" / "runtime" / "native"
COUNTERS = "int64_t tessera_dbg_counts[4]; /* parallel, held-up, serial (backed-off), joined */\n"


# a statement of the source (old or new pool) -> a counter bump to insert before it
HOOKS = {
    "  pool.penalty = pool.penalty == 0": "  tessera_dbg_counts[1]++;\n",  # held up (old)
    "  pool.serial_until = end + ": "  tessera_dbg_counts[1]++;\n",  # held up (new)
    "    pool.serial_left--;": "    tessera_dbg_counts[2]++;\n",  # backed off (old)
    "  ensure_workers(nthreads - 1);": "  tessera_dbg_counts[0]++;\n",
    "  run_chunks();\n  if (atomic_fetch_sub(&pool.job, 1)": (
        "  __atomic_fetch_add(&tessera_dbg_counts[3], 1, __ATOMIC_RELAXED);\n"
    ),
}
VARIANT_CONSTANTS = {  # variant -> (old, new) lines of tessera_rt.c
    "nobackoff": [
        ("#define MAX_SERIAL_LOOPS 256", "#define MAX_SERIAL_LOOPS 0"),
        ("#define MIN_BACKOFF_NS 1000000", "#define MIN_BACKOFF_NS 0"),
        ("#define MAX_BACKOFF_NS 64000000", "#define MAX_BACKOFF_NS 0"),
    ],
}


def patched_source(variant: str, out: Path) -> Path:
    """The runtime's sources (the working tree's, or git revision REV for `rev:REV`) with the
    variant's constants and the counters; returns their directory."""
    if variant.startswith("rev:"):
        show = ["git", "-C", str(ROOT), "show"]
        path = "tessera/runtime/native/"
        text, header = (
            subprocess.run([*show, f"{variant[4:]}:{path}{n}"], check=True, capture_output=True,
                           text=True).stdout
            for n in ("tessera_rt.c", "tessera_rt.h")
        )  # fmt: skip
    elif variant in ("current", *VARIANT_CONSTANTS):
        text, header = (SRC / "tessera_rt.c").read_text(), (SRC / "tessera_rt.h").read_text()
        for old, new in VARIANT_CONSTANTS.get(variant, []):
            text = text.replace(old, new)
    else:
        raise ValueError(f"unknown variant {variant!r}")
    text = text.replace('#include "tessera_rt.h"\n', '#include "tessera_rt.h"\n' + COUNTERS, 1)
    for stmt, bump in HOOKS.items():
        text = text.replace(stmt, bump + stmt, 1)
    backed_off = "  if (backing_off()) {\n"  # the new pool's
    text = text.replace(backed_off, backed_off + "    tessera_dbg_counts[2]++;\n", 1)
    d = out / f"rt-{variant.replace(':', '-').replace('/', '-')}"
    d.mkdir(exist_ok=True)
    (d / "tessera_rt.c").write_text(text)
    (d / "tessera_rt.h").write_text(header)
    return d


# -- the child: one runtime variant ------------------------------------------------------------


def counters(lib):
    try:
        return (ctypes.c_int64 * 4).in_dll(lib, "tessera_dbg_counts")
    except ValueError:
        return None


def thread_ns() -> dict[int, int]:
    """Run time (ns) of each thread of this process, from /proc (schedstat)."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            out[int(tid)] = int(open(f"/proc/self/task/{tid}/schedstat").read().split()[0])
        except (OSError, ValueError):
            pass
    return out


def spin_profile(fn, reps: int, step_ms: float = 1.0, span_ms: float = 150.0):
    """After fn() returns, poll the other threads' run time every step_ms for span_ms: the
    median over reps of (when the last step with a thread running > half the step ended, ms;
    the CPU ms the other threads used)."""
    me = threading.get_native_id()
    ends, cpus = [], []
    for _ in range(reps):
        time.sleep(0.2)
        fn()
        t0 = time.perf_counter()
        prev = thread_ns()
        first = dict(prev)
        end = 0.0
        while time.perf_counter() - t0 < span_ms / 1e3:
            time.sleep(step_ms / 1e3)
            now = thread_ns()
            busy = max((now[t] - prev.get(t, 0) for t in now if t != me), default=0)
            if busy > step_ms * 1e6 / 2:
                end = (time.perf_counter() - t0) * 1e3
            prev = now
        ends.append(end)
        cpus.append(sum(prev[t] - first.get(t, 0) for t in prev if t != me) / 1e6)
    return statistics.median(ends), statistics.median(cpus), max(ends)


def schedule(runners: dict, order: list[str], repeat: int, gap_ms: float, count, lib, reset):
    """Run `order` (engine names) `repeat` times, sleeping gap_ms before each turn; reset: 'run'
    (forgive the back-off before each tessera run) or a thread count for tessera. Returns
    {engine: [ms]} and tessera's counters per run."""
    threads = lib.tessera_get_num_threads()
    if isinstance(reset, int) and not isinstance(reset, bool):
        lib.tessera_set_num_threads(reset)
    try:
        return _schedule(runners, order, repeat, gap_ms, count, lib, reset is True)
    finally:
        lib.tessera_set_num_threads(threads)


def _schedule(runners, order, repeat, gap_ms, count, lib, reset):
    times = {n: [] for n in set(order)}
    stats = []
    for _ in range(repeat):
        for name in order:
            if gap_ms:
                time.sleep(gap_ms / 1e3)
            if name == "tessera" and reset:
                lib.tessera_set_num_threads(lib.tessera_get_num_threads())
            before = list(count) if count is not None and name == "tessera" else None
            t0 = time.perf_counter()
            runners[name]()
            times[name].append((time.perf_counter() - t0) * 1e3)
            if before is not None:
                stats.append([a - b for a, b in zip(count, before, strict=True)])
    return times, stats


def child(args) -> None:
    import numpy as np
    import onnxruntime as ort
    from models import SUITE, compile_model, ort_session

    from tessera.cli.bench import measure_in_blocks
    from tessera.runtime import GraphModule, cpu, native

    native._SOURCE_DIR = Path(args.source_dir)
    lib = native.load()
    native.set_num_threads(args.threads)
    count = counters(lib)
    out = {}
    for name in args.models:
        case = SUITE[name]
        model = case.build()
        feeds = case.feeds(model, 0)
        module = GraphModule(compile_model(model)["default"](cpu(0)))
        module.set_input(**feeds)
        sess = ort_session(model, args.threads)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads, opts.inter_op_num_threads = args.threads, 1
        opts.log_severity_level = 3
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        quiet = ort.InferenceSession(
            model.SerializeToString(), opts, providers=["CPUExecutionProvider"]
        )
        runners = {
            "tessera": module.run,
            "ort": lambda s=sess, f=feeds: s.run(None, f),
            "ort_nospin": lambda s=quiet, f=feeds: s.run(None, f),
        }
        for fn in runners.values():
            for _ in range(5):
                fn()
        res = {"spin": {}, "sched": {}}
        for engine in runners:
            res["spin"][engine] = spin_profile(runners[engine], 9)
        plans = [
            ("tessera alone", ["tessera"], 0, False),
            ("tessera alone, 1 thread", ["tessera"], 0, 1),
            ("ort alone", ["ort"], 0, False),
            ("ort alone, gap 50 ms", ["ort"], 50, False),
            ("alternating", ["tessera", "ort"], 0, False),
            ("alternating, reset per run", ["tessera", "ort"], 0, True),
            ("alternating, ORT no spin", ["tessera", "ort_nospin"], 0, False),
        ] + [(f"alternating, gap {g} ms", ["tessera", "ort"], g, False) for g in args.gaps if g]
        for label, order, gap, reset in plans:
            times, stats = schedule(runners, order, args.repeat, gap, count, lib, reset)
            entry = {e: statistics.median(t) for e, t in times.items()}
            if stats:
                entry["counts"] = np.median(np.array(stats), axis=0).tolist()
            res["sched"][label] = entry
        times, _ = measure_in_blocks(
            {"tessera": runners["tessera"], "ort": runners["ort"]}, args.repeat, 0, None
        )
        res["sched"]["fair turns (measure_in_blocks)"] = {
            e: float(np.median(t)) * 1e3 for e, t in times.items()
        }
        out[name] = res
    print("RESULT " + json.dumps(out))


# -- the driver --------------------------------------------------------------------------------


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--models", default="mobilenet_v2,squeezenet")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--variants", default="current,nobackoff,rev:802b2aa~1")
    p.add_argument("--repeat", type=int, default=30)
    p.add_argument("--gaps", default="2,5,10,20")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--source-dir", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.models = [m for m in args.models.split(",") if m]
    args.gaps = [float(g) for g in str(args.gaps).split(",") if g]
    if args.child:
        child(args)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        for variant in args.variants.split(","):
            src = patched_source(variant, Path(tmp))
            cmd = [sys.executable, __file__, "--child", "--source-dir", str(src), "--models",
                   ",".join(args.models), "--threads", str(args.threads), "--repeat",
                   str(args.repeat), "--gaps", ",".join(map(str, args.gaps))]  # fmt: skip
            load0 = os.getloadavg()[0]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
            if not lines:
                print(f"{variant}: failed\n{proc.stderr[-3000:]}")
                continue
            data = json.loads(lines[-1][7:])
            print(f"\n## variant {variant} (load {load0:.1f} -> {os.getloadavg()[0]:.1f})")
            for model, res in data.items():
                print(f"\n### {model}\nafter one run, the other threads ran until (median, max ms)"
                      " and used (CPU ms):")  # fmt: skip
                for engine, (end, cpu, worst) in res["spin"].items():
                    print(f"  {engine:11s} until {end:.1f} (max {worst:.1f}), CPU {cpu:.2f}")
                print(
                    "| schedule | tessera ms | ORT ms | tessera loops: parallel, held up, "
                    "serial, joined by a worker |"
                )
                print("|---|---:|---:|---|")
                for label, e in res["sched"].items():
                    o = e.get("ort", e.get("ort_nospin"))
                    t = e.get("tessera")
                    c = e.get("counts")
                    print(f"| {label} | {'' if t is None else f'{t:.2f}'} | "
                          f"{'' if o is None else f'{o:.2f}'} | {c or ''} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
