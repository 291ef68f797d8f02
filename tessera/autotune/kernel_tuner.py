"""Tuning a plain tensor expression: `tune_kernel` searches the space `AutoSpace` generates.

    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    result = tessera.autotune.tune_kernel([C], [A, B, C], budget=300)
    f = tessera.build(result.schedule, result.args, target="llvm")
    result.naive_seconds, result.default_seconds, result.best_seconds

The loop, per round: candidates (mutations of the fastest configs so far, and random ones) are
lowered in a pool of build processes, which return the features of their loop programs
(features.py); the cost model (`GBTRanker`, refit on every measurement of this kernel and on
those of earlier kernels of the same sketch: transfer) ranks them; the best few are built in
parallel in the pool (each into a shared library) and measured one at a time in a measurement
worker (`Measurer`: a crash or a hang is a failed result, never the end of the run), so timings
are not disturbed by the builds of other candidates... beyond what the machine's other load
does. Every candidate's outputs are checked against the unscheduled computation's. The naive
schedule and the default config (the space's rules) are measured first; the result is never
slower than the default as measured. A naive run slower than `naive_timeout` (a quarter of the
budget by default) is cut off: `naive_note` says so, the default config's outputs are the
reference instead, and the search goes on.

`history` (a JSON-lines file) keeps every measurement with its features: a rerun on the same
computation resumes (no config measured twice), and any computation of the same sketch kind
starts with a model trained on all of them.
"""

from __future__ import annotations

import hashlib
import json
import math
import multiprocessing
import os
import random
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tessera.autotune.auto_schedule import AutoSpace, naive_schedule
from tessera.autotune.cost_model import GBTRanker, normalized_throughput
from tessera.autotune.measure import Measurer, MeasureResult
from tessera.logging import get_logger
from tessera.topi.strategy import Config

log = get_logger(__name__)

# the space the build processes work on: set before the pool forks, so they inherit it (a
# compute holds lambdas' results, not lambdas, but its variables compare by identity and must
# be the very objects of the parent's space)
_SPACE: AutoSpace | None = None


@dataclass
class KernelTuneResult:
    """The best schedule found, its config and times; `history`: (elapsed s, best s)."""

    schedule: object
    args: list
    config: Config | None
    best_seconds: float | None
    default_seconds: float | None
    naive_seconds: float | None
    naive_note: str | None = None  # why naive_seconds is None: cut off at the cap, or failed
    naive_cap_s: float | None = None  # the cap its run was cut off at (a lower bound on it)
    trials: int = 0
    failed: int = 0
    history: list = field(default_factory=list)

    @property
    def speedup_over_naive(self) -> float | None:
        if self.naive_seconds and self.best_seconds:
            return self.naive_seconds / self.best_seconds
        return None


def workload_key(space: AutoSpace) -> str:
    """A digest of the computation (stages, shapes, bodies) and the target."""
    parts = [str(space.target)]
    for op in space.ops:
        parts.append(f"{op.name}{[str(iv.dom.extent) for iv in op.axis]}{op.body}")
    for a in space.args:
        parts.append(f"{getattr(a, 'name', a)}{getattr(a, 'shape', '')}{getattr(a, 'dtype', '')}")
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


# -- the build processes ---------------------------------------------------------------------------


def _lower(config: Config):
    import tessera

    s, args = _SPACE.apply(config)
    return [f for _, f in tessera.lower(s, args, name="kernel")]


def _features_job(config: Config):
    from tessera.autotune.features import program_features

    try:
        return program_features(_lower(config)), None
    except Exception as e:  # a config whose schedule cannot be lowered: not a candidate
        return None, f"{type(e).__name__}: {str(e)[:300]}"


def _build_job(job):
    """Build `config` into the library `path`: (features, error)."""
    import tessera
    from tessera.autotune.features import program_features

    config, path = job
    try:
        funcs = _lower(config)
        s, args = _SPACE.apply(config)
        lib = tessera.build(s, args, target=_SPACE.target, name="kernel")
        lib.export_library(path)
        return program_features(funcs), None
    except Exception as e:
        return None, f"{type(e).__name__}: {str(e)[:300]}"


# -- the measurement worker -----------------------------------------------------------------------

_INPUTS: dict = {}


def run_library(path: str, inputs: str, outs: tuple, reference: str, check: bool, min_s: float):
    """In the measurement worker: load the library, run it on the saved inputs (`outs`: the
    positions of the outputs among them), check its outputs against the `reference` file or,
    without `check`, write them there; then time it (median of 5 runs of >= `min_s` each, or
    one run for a kernel slower than a second)."""
    import tessera
    from tessera.runtime import load_module

    if inputs not in _INPUTS:
        with np.load(inputs) as z:
            _INPUTS.clear()
            _INPUTS[inputs] = [z[f"arg{i}"] for i in range(len(z.files))]
    arrays = [tessera.nd.array(a) for a in _INPUTS[inputs]]
    f = load_module(path)["kernel"]
    start = time.perf_counter()
    f(*arrays)
    once = time.perf_counter() - start
    gots = [arrays[i].numpy() for i in outs]
    if check:
        with np.load(reference) as z:
            wants = [z[f"out{i}"] for i in range(len(outs))]
        for got, want in zip(gots, wants, strict=True):
            atol = 1e-4 * max(1.0, float(np.abs(want).max(initial=0)))
            if not np.allclose(got, want, rtol=1e-3, atol=atol):
                diff = float(np.max(np.abs(got.astype(np.float64) - want)))
                return MeasureResult(error=f"wrong: outputs differ from the naive's ({diff:g})")
    else:
        np.savez(reference, **{f"out{i}": g for i, g in enumerate(gots)})
    if once > 1.0:
        return MeasureResult(once)
    number = max(1, math.ceil(min_s / max(once, 1e-7)))
    samples = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(number):
            f(*arrays)
        samples.append((time.perf_counter() - start) / number)
    return MeasureResult(float(np.median(samples)))


# -- the search ------------------------------------------------------------------------------------


class _History:
    """The JSON-lines file of measurements: this computation's (to resume) and all others'
    of the same sketch kind (to train the cost model first)."""

    def __init__(self, path, key: str, kind: str):
        self.path = Path(path) if path else None
        self.key, self.kind = key, kind
        self.measured: dict[Config, float | None] = {}
        self.features: dict[Config, np.ndarray] = {}
        self.others_X: list[np.ndarray] = []
        self.others_y: list[float] = []
        if self.path and self.path.exists():
            groups: dict[str, list] = {}
            for line in self.path.read_text().splitlines():
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut short by a kill
                if rec.get("kind") != kind:
                    continue
                groups.setdefault(rec["key"], []).append(rec)
            for k, recs in groups.items():
                if k == key:
                    for r in recs:
                        c = Config.from_json(r["config"])
                        self.measured[c] = r["seconds"]
                        if r.get("features"):
                            self.features[c] = np.asarray(r["features"])
                else:
                    ok = [r for r in recs if r.get("features")]
                    y = normalized_throughput([r["seconds"] for r in ok])
                    self.others_X += [np.asarray(r["features"]) for r in ok]
                    self.others_y += list(y)

    def append(self, config: Config, seconds, features, error=None) -> None:
        self.measured[config] = seconds
        if features is not None:
            self.features[config] = features
        if self.path:
            rec = {
                "key": self.key,
                "kind": self.kind,
                "config": config.to_json(),
                "seconds": seconds,
                "error": error,
                "features": None if features is None else [round(float(v), 4) for v in features],
            }
            with open(self.path, "a") as f:
                f.write(json.dumps(rec) + "\n")
                f.flush()
                os.fsync(f.fileno())


def _mutate(space: AutoSpace, config: Config, rng: random.Random) -> Config | None:
    knob = rng.choice(space.space.knobs)
    values = config.knobs()
    values[knob.name] = rng.choice(knob.candidates)
    return Config(config.impl, values) if space.space.valid(values) else None


def _candidates(space, measured, rng, n: int) -> list[Config]:
    ok = sorted((s, repr(c), c) for c, s in measured.items() if s is not None)
    parents = [c for _, _, c in ok[:8]] or [space.default()]
    found: dict[Config, None] = {}
    for _ in range(20 * n):
        if rng.random() < 0.25:
            c = Config(space.default().impl, space.space.sample(rng))
        else:
            c = _mutate(space, rng.choice(parents), rng)
        if c is not None and c not in measured:
            found[c] = None
            if len(found) == n:
                break
    return list(found)


def tune_kernel(
    outputs,
    args,
    target="llvm",
    budget: float = 300.0,
    max_trials: int | None = None,
    workers: int | None = None,
    batch: int = 4,
    history=None,
    timeout: float = 60.0,
    seed: int = 0,
    progress=None,
    naive_timeout: float | None = None,
) -> KernelTuneResult:
    """Search the generated schedule space of `outputs` (a te tensor or list; `args` the
    kernel's arguments, inputs then outputs) for `budget` seconds of wall time. `workers`:
    build processes (default: 2, or fewer cores). `history`: a JSON-lines file of
    measurements to resume from and add to. `progress(result)` after every measurement.
    `timeout`: seconds a candidate may run; `naive_timeout`: the naive schedule (default: a
    quarter of `budget`; cut off, it is reported as such and the search goes on)."""
    global _SPACE
    from tessera.te.schedule import Schedule

    if isinstance(outputs, Schedule):
        outputs = [s.op.output(0) for s in outputs.stages if s.is_output]
    start = time.monotonic()
    space = AutoSpace(outputs, args, target)
    symbolic = [a.name for a in space.args if any(not hasattr(d, "value") for d in a.shape)]
    if symbolic:
        raise ValueError(
            f"tune_kernel measures concrete kernels: {', '.join(symbolic)} has a symbolic shape; "
            "tune a copy with the sizes you will run"
        )
    rng = random.Random(seed)
    workers = workers or max(1, min(2, os.cpu_count() or 1))
    hist = _History(history, workload_key(space), space.kind)
    result = KernelTuneResult(None, list(args), None, None, None, None)
    with tempfile.TemporaryDirectory(prefix="tessera-tune-kernel-") as tmp:
        _SPACE = space
        pool = multiprocessing.get_context("fork").Pool(workers)
        try:
            with Measurer(timeout=timeout) as measurer:
                session = _Session(space, Path(tmp), seed, pool, measurer)
                default = space.default()
                cap = budget / 4 if naive_timeout is None else naive_timeout
                _time_naive(session, result, cap, default)

                def run_batch(configs):
                    out = session.run(configs)
                    for c, (res, feats) in zip(configs, out, strict=True):
                        hist.append(c, res.seconds, feats, res.error)
                        result.trials += 1
                        result.failed += not res.ok
                        if res.ok and (result.best_seconds or math.inf) > res.seconds:
                            result.best_seconds, result.config = res.seconds, c
                        result.history.append((time.monotonic() - start, result.best_seconds))
                        if progress:
                            progress(result)

                # the default is measured again (today's load); so is the best of a resumed run
                resumed_best = min(
                    ((s, repr(c), c) for c, s in hist.measured.items() if s and c != default),
                    default=None,
                )
                run_batch([default] + ([resumed_best[2]] if resumed_best else []))
                result.default_seconds = hist.measured.get(default)
                _search(space, hist, rng, run_batch, start, budget, max_trials, batch, pool)
                _confirm(session, result, default)
        finally:
            pool.terminate()
            pool.join()
            _SPACE = None
    if result.config is not None:
        result.schedule, result.args = space.apply(result.config)
    else:  # nothing built: the naive schedule
        result.schedule = naive_schedule(space.outputs)
    return result


def _time_naive(session, result: KernelTuneResult, cap: float, default: Config) -> None:
    """The naive schedule's time into `result`, its outputs the reference; when it runs past
    `cap` seconds or fails, `result` says so and the default config's outputs are the reference."""
    result.naive_seconds, error = session.naive(cap)
    if result.naive_seconds is not None:
        return
    if error.startswith("timeout"):
        result.naive_cap_s, result.naive_note = cap, f"did not finish in {cap:g} s (the cap)"
    else:
        result.naive_note = f"failed ({error})"
    session.reference_from(default, result.naive_note)


class _Session:
    """The files of one tuning run (inputs, reference outputs, libraries) and the processes
    that build (the pool) and measure (the worker) candidates."""

    def __init__(self, space: AutoSpace, tmp: Path, seed: int, pool, measurer: Measurer):
        self.space, self.tmp, self.pool, self.measurer = space, tmp, pool, measurer
        self.inputs, self.reference = _save_inputs(space, tmp, seed)
        outs = space.outputs
        self.outs = tuple(i for i, a in enumerate(space.args) if any(a is t for t in outs))
        self.count = 0

    def naive(self, cap: float) -> tuple[float | None, str | None]:
        """(the naive schedule's time, None) with its outputs written as the reference; or
        (None, the measurement's error) when it failed or ran past `cap` seconds."""
        return _measure_naive(
            self.space, self.tmp, self.inputs, self.outs, self.reference, self.measurer, cap
        )

    def reference_from(self, config: Config, naive_note: str) -> None:
        """Write `config`'s outputs as the reference, for a naive run that gave none."""
        log.warning("auto-schedule: the naive schedule %s; candidates are checked against "
                    "the default config's outputs", naive_note)  # fmt: skip
        self.count += 1
        path = str(self.tmp / f"cand{self.count}.so")
        _, err = self.pool.apply(_build_job, ((config, path),))
        if err is None:
            args = (path, str(self.inputs), self.outs, str(self.reference), False, 0.05)
            res = self.measurer.call(run_library, args)
            err = res.error
        if err is not None:
            raise RuntimeError(
                f"tune_kernel: no reference outputs to check candidates against: the naive "
                f"schedule {naive_note}, and the default config failed ({err})"
            )

    def run(self, configs) -> list:
        """[(MeasureResult, features)]: `configs` built in parallel, then measured in turn."""
        jobs = []
        for c in configs:
            self.count += 1
            jobs.append((c, str(self.tmp / f"cand{self.count}.so")))
        out = []
        for (_, path), (feats, err) in zip(jobs, self.pool.map(_build_job, jobs), strict=True):
            if err is None:
                args = (path, str(self.inputs), self.outs, str(self.reference), True, 0.05)
                res = self.measurer.call(run_library, args)
                Path(path).unlink(missing_ok=True)
            else:
                res = MeasureResult(error=err)
            out.append((res, feats))
        return out


def _confirm(session: _Session, result: KernelTuneResult, default: Config, rounds=2) -> None:
    """The winner and the default measured again in turns: the winner is kept only if its
    fastest run still beats the default's (a win by the noise of a loaded machine is not)."""
    if result.config is None or result.config == default or result.default_seconds is None:
        return
    times = {default: [result.default_seconds], result.config: []}
    for _ in range(rounds):
        for config, (res, _) in zip(times, session.run(list(times)), strict=True):
            times[config].append(res.seconds if res.ok else math.inf)
    best, base = min(times[result.config]), min(times[default])
    if best < base:
        result.best_seconds, result.default_seconds = best, base
    else:
        log.info("auto-schedule: %s did not beat the default when measured again", result.config)
        result.config, result.best_seconds, result.default_seconds = default, base, base
    result.history.append((result.history[-1][0] if result.history else 0.0, result.best_seconds))


def _search(space, hist, rng, run_batch, start, budget, max_trials, batch, pool) -> None:
    model = GBTRanker()
    new = 0
    while time.monotonic() - start < budget and (max_trials is None or new < max_trials):
        ok = [c for c, s in hist.measured.items() if s is not None and c in hist.features]
        pool_size = 6 * batch
        cands = _candidates(space, hist.measured, rng, pool_size)
        if not cands:
            log.info("auto-schedule: no new config to try (%d measured)", len(hist.measured))
            return
        n = batch if max_trials is None else min(batch, max_trials - new)
        X_train = [hist.features[c] for c in ok] + hist.others_X
        if len(X_train) >= 4:
            y_own = list(normalized_throughput([hist.measured[c] for c in ok]))
            model.fit(np.stack(X_train), y_own + hist.others_y)
            feats = pool.map(_features_job, cands)
            scored = [(f, c) for (f, err), c in zip(feats, cands, strict=True) if err is None]
            if scored:
                pred = model.predict(np.stack([f for f, _ in scored]))
                order = np.argsort(-pred, kind="stable")
                ranked = [scored[i][1] for i in order]
                # all but one from the model's top; one at random, to keep exploring
                picks = ranked[: max(1, n - 1)]
                rest = [c for c in cands if c not in picks]
                if len(picks) < n and rest:
                    picks.append(rng.choice(rest))
                cands = picks
        run_batch(cands[:n])
        new += len(cands[:n])


def _random(rng, shape, dtype) -> np.ndarray:
    if str(dtype).startswith("float"):
        return (rng.standard_normal(shape) * 0.5).astype(str(dtype))
    return rng.integers(0, 4, shape).astype(str(dtype))


def _save_inputs(space: AutoSpace, tmp: Path, seed: int):
    """The kernel's arguments as arrays (random inputs, zero outputs) in an .npz; the path of
    the reference outputs (written by the naive run)."""
    rng = np.random.default_rng(seed)
    arrays = []
    outs = {id(t) for t in space.outputs}
    for a in space.args:
        shape = tuple(int(s.value if hasattr(s, "value") else s) for s in a.shape)
        if id(a) in outs:
            arrays.append(np.zeros(shape, str(a.dtype)))
        else:
            arrays.append(_random(rng, shape, a.dtype))
    path = tmp / "inputs.npz"
    np.savez(path, **{f"arg{i}": x for i, x in enumerate(arrays)})
    return path, tmp / "reference.npz"


def _measure_naive(space, tmp, inputs, outs, reference, measurer, cap) -> tuple:
    """Build and run the unscheduled computation: its outputs are the reference; its time is
    the naive time. It may take long: its timeout is `cap` seconds. (seconds, None), or
    (None, the error: "timeout: ..." past the cap) when it failed."""
    import tessera

    path = tmp / "naive.so"
    sch = naive_schedule(space.outputs)
    tessera.build(sch, space.args, target=space.target, name="kernel").export_library(path)
    timeout, measurer.timeout = measurer.timeout, cap
    try:
        args = (str(path), str(inputs), outs, str(reference), False, 0.05)
        res = measurer.call(run_library, args)
    finally:
        measurer.timeout = timeout
    return (res.seconds, None) if res.ok else (None, res.error)
