"""Measuring a config: a task's kernel alone, built and timed in a worker process.

    with Measurer(timeout=30) as m:
        ref = m.measure(task, task.default(target), target)           # MeasureResult
        res = m.measure(task, config, target, reference=ref.outputs)   # checked against ref

The kernel of a task is built as a one-op graph of its workload (`kernel_graph`: the task's op,
its input types and attributes, the inputs that were weights in the model bound as random
constants so that graph passes re-pack them as they do in the model) with the config given for
the task, run on random inputs (seeded: every config sees the same inputs) and timed with the
executor's benchmark loop (median over repeats). Layout transforms the graph passes insert
around the kernel are part of the one-op graph and of its time.

Every build and run happens in a worker process (a fresh interpreter, no inherited state): a
config whose build or kernel crashes the process, or runs past `timeout`, costs the worker,
which is replaced, and is returned as a failed result; it never reaches the tuning process. A
config whose outputs differ from the reference (the default config's) fails as "wrong".
"""

from __future__ import annotations

import functools
import pickle
import select
import struct
import subprocess
import sys
import time
from dataclasses import dataclass

import numpy as np

from tessera.topi.layout import transform_array
from tessera.topi.strategy import Config, Task


@dataclass
class MeasureResult:
    """`seconds`: the median time of one run; `error` when it failed ("timeout", "crash: ...",
    "wrong: ...", or the exception); `outputs`: the kernel's outputs (kept for the default,
    whose outputs are the reference)."""

    seconds: float | None = None
    error: str | None = None
    outputs: list | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


# Note [in-model layout]
# A task's time must be what its config costs inside the model, or a measured gain does not
# carry over. In the model, alter_layout hands a conv (or a pool) its input in the blocked
# layout the op before it left (NCHW{in_block}c, channels padded to "in_channels"), re-packs
# its weight at compile time for the config (blocked, or Winograd-transformed), and leaves its
# output blocked for the op after it. A one-op graph of the plain workload is another kernel:
# a lone pool is not blocked at all (its knobs would change nothing), and a lone conv pays a
# transform of its input and one of its output that the model does not. So the measurement
# graph is rewritten as in the model (`alter_layout_from`): input 0 in the layout the task's
# context (the one its model asked it with, `extract_tasks(contexts=)`) says, the weights
# constants the rewrite packs for the config, the output left blocked, as the op after it reads
# it (another block: a conv after it reads that block as it is). A config whose output is in
# NCHW where the default's is blocked (an NCHW conv amid blocked ones) pays the transform back
# to the default's block, which the op after it would pay in the model. Outputs are compared
# with the reference in NCHW. Tasks that no layout pass asked (dense: pack_weights packs its
# weight in the build, as in the model; softmax) are measured as their plain graph.


def kernel_graph(task: Task, seed: int = 0, target=None, context: dict | None = None):
    """(graph Function, params, inputs, output layouts): the task's workload as a graph of one
    call, random weights for the inputs that were constants in the model, random inputs for the
    rest. With `target` and the `context` the model asked the task with, the graph is the
    kernel in its in-model layout (Note [in-model layout]; build it inside `use_configs` of the
    config measured: the rewrite packs the weights for it); an output layout is (block, NCHW
    shape) where the output stays blocked, else None."""
    from tessera.graph.builder import GraphBuilder
    from tessera.topi import strategy

    rng = np.random.default_rng(seed)
    wl = task.workload
    in_model = _in_model(task, target, context)
    b = GraphBuilder(fold=False)
    values, params, inputs = [], {}, {}
    for i, (shape, dtype) in enumerate(wl.inputs):
        array = random_array(rng, shape, dtype)
        name = f"in{i}"
        is_weight = i < len(wl.constant) and wl.constant[i]
        if is_weight and in_model is not None:
            values.append(b.const(array, name))  # the rewrite packs it, as in the model
            continue
        values.append(b.param(name, shape, dtype))
        (params if is_weight else inputs)[name] = array
    out = b.call(wl.op, *values, **dict(wl.attrs))
    outs = list(out) if isinstance(out, tuple) else [out]
    func = b.finish(outs)
    if in_model is None:
        return func, params, inputs, [None] * len(outs)
    from tessera.transform.alter_layout import alter_layout_from

    blocked = {} if in_model == () else {"in0": in_model}
    winograd = context.get("winograd", True)
    with target:
        # the ops after it read the layout the model's default config leaves: a config that
        # leaves another pays the transform to it (an NCHW conv amid blocked ones)
        with strategy.use_configs({task: task.default(target, context)}):
            _, default = alter_layout_from(func, target, blocked, winograd)
        out_blocks = [1 if layout is None else layout[0] for layout in default]
        func, layouts = alter_layout_from(func, target, blocked, winograd, out_blocks)
    if blocked:
        block, channels = in_model
        x = inputs["in0"]
        x = np.pad(x, [(0, 0), (0, channels - x.shape[1]), (0, 0), (0, 0)])
        inputs["in0"] = transform_array(x, "NCHW", f"NCHW{block}c")
    return func, params, inputs, layouts


def _in_model(task: Task, target, context) -> tuple | None:
    """How the model feeds the task (Note [in-model layout]): None, as its plain graph (no
    layout pass asked it); (), rewritten with a plain input; (block, channels), rewritten with
    its input blocked."""
    if target is None or not context or "in_block" not in context:
        return None
    if not target.kind_info.layout_strategies:
        return None
    (shape, dtype), *_ = task.workload.inputs
    block = context.get("in_block")
    if not block or block == 1 or len(shape) != 4 or not all(isinstance(d, int) for d in shape):
        return ()
    channels = context.get("in_channels") or shape[1]
    if channels % block:
        return ()
    return block, channels


def plain_output(array: np.ndarray, layout) -> np.ndarray:
    """An output of a measurement graph in NCHW, its channel padding sliced off (`layout`:
    (block, NCHW shape), or None where it is plain already)."""
    if layout is None:
        return array
    block, shape = layout
    plain = transform_array(array, f"NCHW{block}c", "NCHW") if array.ndim == 5 else array
    return np.ascontiguousarray(plain[:, : shape[1]]).reshape(shape)


def random_array(rng, shape, dtype) -> np.ndarray:
    """Random values of `dtype` (numpy Generator `rng`): floats scaled to stay near 1 in a
    reduction, small integers, booleans."""
    if dtype.startswith("float"):
        # scaled so that reductions stay near 1 and a tolerance check means something
        return (rng.standard_normal(shape) * 0.5).astype(dtype)
    if dtype == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    return rng.integers(0, 4, shape).astype(dtype)


def run_config(
    task: Task,
    config: Config,
    target: str,
    reference: list | None = None,
    seed: int = 0,
    context: tuple = (2, ()),
    model_context: dict | None = None,
    number: int = 5,
    repeat: int = 5,
    flush: str | bool = "l2",
) -> MeasureResult:
    """Build and time `config` of `task` here (the worker calls this). With `reference`, the
    outputs must match it; without, they are returned (this is the default, the reference).
    `context`: (opt level, disabled passes) of the tuning process's PassContext, under which the
    graph passes run as they do for the model (they decide which kernel a task becomes).
    `model_context`: the context the model asks the task with, whose layout the kernel is
    measured in (Note [in-model layout]). `flush` ("l2", "all"): the median of 2 x `repeat`
    runs, each timed alone after a write of a buffer larger than those caches and of the
    inputs (Note [cold caches]); False: the median of `repeat` means of `number` runs back to
    back, caches hot."""
    import tessera
    from tessera.runtime import GraphModule, cpu
    from tessera.topi import strategy
    from tessera.transform import PassContext

    # a fresh worker has not loaded the target's strategies, which Task.strategy reads
    strategy.find_strategy(task.workload.op, tessera.Target(target))
    opt_level, disabled = context
    with PassContext(opt_level=opt_level, disabled_pass=disabled), strategy.record_tasks() as seen:
        func, params, inputs, layouts = _graph(task, config, target, seed, model_context)
        lib = tessera.build(func, target=target, params=params, configs={task: config})
    if task not in seen:
        # the one-op graph is not the kernel the model asked for: its time would say nothing
        return MeasureResult(error=f"the one-op graph of {task} does not ask for that task")
    m = GraphModule(lib["default"](cpu(0)))
    m.set_input(**inputs)
    m.run()
    outputs = [plain_output(m.get_output(i).numpy(), layout) for i, layout in enumerate(layouts)]
    if reference is not None:
        for got, want in zip(outputs, reference, strict=True):
            # atol scales with the output: a long float32 reduction summed in another order
            # (another tiling, Winograd) differs by rounding, not by a bug
            atol = 1e-4 * max(1.0, float(np.abs(want).max(initial=0)))
            if got.shape != want.shape or not np.allclose(got, want, rtol=1e-3, atol=atol):
                diff = (
                    np.max(np.abs(got.astype(np.float64) - want))
                    if got.shape == want.shape
                    else None
                )
                return MeasureResult(
                    error=f"wrong: outputs differ from the default's (max |diff| {diff})"
                )
    if flush:
        seconds = cold_time(m, 2 * repeat, inputs, flush)
    else:
        seconds = m.benchmark(number=number, repeat=repeat).median
    return MeasureResult(seconds, outputs=None if reference is not None else outputs)


# Note [cold caches]
# In the model a kernel's input was just written by the kernel before it, and its weights were
# last touched a whole run ago, with the other kernels' data between: they are out of this
# core's L1 and L2, though a small model's weights (ShuffleNet's 5 MB) stay in the shared L3.
# Timed back to back, a kernel finds everything in L1/L2 instead. So by default (`flush="l2"`)
# each timed run starts after a write of a buffer twice the size of the host's L1 and L2
# (`cache_sizes`, sysfs; ~0.1 ms), then a write of the kernel's inputs (as the kernel before it
# leaves them); its time is the median of those runs. `flush="all"` writes twice all the
# caches (L3 included, ~6 ms a run on the 2-core Zen 3: weights then come from memory, as for a
# model larger than the L3); `flush=False` times hot, the executor's benchmark loop. Measured
# on ShuffleNet's four disputed winners against the model's own verdict (docs/performance.md,
# issue 11): hot and "l2" ranked two of three clear cases as the model did, "all" none of
# them and twice the model's per-call times; "l2" came closest to those times (the grouped
# 272-channel 1x1 conv: 193 us, 177 in the model, 112-189 hot). No kernel alone ranked them
# all as the model did: the in-model confirmation (in_model.py) is what guarantees the model.

FLUSH_LEVELS = ("l2", "all")
_FLUSH: dict = {}


def flush_caches(level: str = "l2") -> None:
    """Write a buffer of twice the host's L1 + L2 ("l2") or of all its caches ("all") (Note
    [cold caches])."""
    if level not in FLUSH_LEVELS:
        raise ValueError(f"flush: one of {', '.join(FLUSH_LEVELS)} or False, got {level!r}")
    if level not in _FLUSH:
        from tessera.topi.x86.cpu import cache_sizes

        caches = cache_sizes()
        size = sum(v for k, v in caches.items() if level == "all" or k <= 2)
        _FLUSH[level] = np.zeros(min(max(2 * size, 1 << 16), 1 << 28) // 8)
    buf = _FLUSH[level]
    buf.fill(buf[0] + 1.0)


def cold_time(m, runs: int, inputs: dict | None = None, level: str = "l2") -> float:
    """The median seconds of `runs` runs of GraphModule `m`, each after `flush_caches(level)`
    and a write of `inputs` (name: array) into it (Note [cold caches])."""
    m.run()  # warm-up: code, thread pool, pages
    times = []
    for _ in range(max(1, runs)):
        flush_caches(level)
        if inputs:
            m.set_input(**inputs)
        start = time.perf_counter()
        m.run()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def _graph(task: Task, config: Config, target: str, seed: int, model_context):
    """kernel_graph for `config` (the rewrite of Note [in-model layout] asks for its layout)."""
    import tessera
    from tessera.topi import strategy

    with strategy.use_configs({task: config}):
        return kernel_graph(task, seed, tessera.Target(target), model_context)


def _lowered(task: Task, config: Config, target, func, params) -> list:
    """The PrimFuncs (after the tir passes) the one-op graph's groups lower to with `config`."""
    import tessera
    from tessera.driver import fused_function, optimize
    from tessera.graph_build.lower_group import distinct_groups, lower_group
    from tessera.ir.module import IRModule
    from tessera.topi import strategy

    target = tessera.Target(target)
    with strategy.use_configs({task: config}, target):
        fused = fused_function(IRModule({"main": func}), target, params)
        groups, _ = distinct_groups(fused)
        return [optimize(lower_group(g, target), target) for g in groups]


def prepare_config(
    task: Task,
    config: Config,
    target: str,
    seed: int = 0,
    context: tuple = (2, ()),
    build=True,
    model_context: dict | None = None,
    features=True,
):
    """In a build process: (features of the lowered loops, error). With `build`, the kernel is
    also compiled, which leaves it in the compile cache, where the measurement worker's build
    of the same config finds it (so builds run in parallel, measurements one at a time).
    Without `features` (the search lowered this config before: Note [lowered once] in
    tuner.py) it is only compiled, and the features returned are None."""
    import tessera
    from tessera.autotune.features import program_features
    from tessera.graph_build.compile import JOBS_KEY
    from tessera.topi import strategy
    from tessera.transform import PassContext

    try:
        strategy.find_strategy(task.workload.op, tessera.Target(target))
        opt_level, disabled = context
        with PassContext(opt_level=opt_level, disabled_pass=disabled, config={JOBS_KEY: 1}):
            func, params, _, _ = _graph(task, config, target, seed, model_context)
            if features:
                features = program_features(_lowered(task, config, target, func, params))
            else:
                features = None
            if build:
                tessera.build(func, target=target, params=params, configs={task: config})
        return features, None
    except Exception as e:  # the measurement worker meets (and records) the same failure
        return None, f"{type(e).__name__}: {str(e)[:300]}"


class Builder:
    """A pool of `workers` build processes (forked) that lower and compile configs in
    parallel: `features(...)` lowers only, `build(...)` compiles too (into the compile cache).
    A build process that dies (a crashing compiler) is replaced; its configs get no features
    and are left to the measurement worker, which records the crash."""

    def __init__(self, workers: int = 2, seed: int = 0):
        self.workers = max(1, workers)
        self.seed = seed
        self._pool = None

    def __enter__(self) -> Builder:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def _map(self, task, configs, target, build: bool, model_context=None, known=None) -> list:
        """[(features, error)] of each config: the features `known` holds ({config: features})
        as they are, the others lowered (Note [lowered once] in tuner.py)."""
        known = known or {}
        jobs = [(task, c, model_context) for c in configs]
        lower = [known.get(c) is None for c in configs]
        if not build and not any(lower):
            return [(known[c], None) for c in configs]
        out = self._run(jobs, target, build, lower)
        return [
            (known[c], e) if known.get(c) is not None else (f, e)
            for c, (f, e) in zip(configs, out, strict=True)
        ]

    def _run(self, jobs, target, build: bool, lower=True) -> list:
        """Run `jobs` in the pool; `lower`: whether to lower each for its features (one bool
        for all, or one per job)."""
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor
        from concurrent.futures.process import BrokenProcessPool

        from tessera.transform import PassContext

        ctx = PassContext.current()
        context = (ctx.opt_level, tuple(sorted(ctx.disabled_pass)))
        if self._pool is None:
            fork = multiprocessing.get_context("fork")
            self._pool = ProcessPoolExecutor(self.workers, mp_context=fork)
        lower = lower if isinstance(lower, list) else [lower] * len(jobs)
        args = [
            (t, c, str(target), self.seed, context, build, mc, low)
            for (t, c, mc), low in zip(jobs, lower, strict=True)
        ]
        try:
            return list(self._pool.map(_prepare, args))
        except BrokenProcessPool:
            self._pool = None
            return [(None, None)] * len(jobs)

    def features(self, task: Task, configs: list, target, model_context=None, known=None) -> list:
        """[(features | None, error | None)] of each config, lowered (not compiled), in the
        layout `model_context` gives (Note [in-model layout]); those `known` holds are not
        lowered again."""
        return self._map(task, configs, target, False, model_context, known)

    def build(self, task: Task, configs: list, target, model_context=None, known=None) -> list:
        """[(features | None, error | None)] of each config, compiled into the compile cache;
        the configs whose features `known` ({config: features}) holds are compiled only, and
        given those features back (Note [lowered once] in tuner.py)."""
        return self._map(task, configs, target, True, model_context, known)

    def build_each(self, jobs: list, target) -> list:
        """Compile (task, config, model_context) jobs of any tasks, in parallel (the tuner's
        defaults, before the worker measures them one at a time)."""
        return self._run(jobs, target, True)


def _prepare(args):
    return prepare_config(*args)


def _send(f, obj) -> None:
    data = pickle.dumps(obj)
    f.write(struct.pack("<Q", len(data)) + data)
    f.flush()


def _recv(f):
    head = f.read(8)
    if len(head) < 8:
        raise EOFError("the other side closed the pipe")
    (n,) = struct.unpack("<Q", head)
    data = f.read(n)
    if len(data) < n:
        raise EOFError("the other side closed the pipe mid-message")
    return pickle.loads(data)


class Measurer:
    """Measures configs in a worker process (`python -m tessera.autotune.worker`), one at a
    time, replacing the worker when a config crashes it or runs past `timeout` seconds. `run`:
    what the worker calls with (task, config, target, reference, seed, context, model_context):
    `run_config`,
    or a picklable wrapper of it (tessera.autotune.testing). `flush`: "l2" (run_config's
    default), "all" or False (hot), Note [cold caches]; `run` must take `flush` when it is not
    the default.

    A subprocess rather than multiprocessing: a spawned multiprocessing child re-imports the
    caller's main script, which a user's script without a `__main__` guard does not survive."""

    def __init__(self, timeout: float = 60.0, run=run_config, seed: int = 0, flush="l2"):
        if flush and flush not in FLUSH_LEVELS:
            raise ValueError(f"flush: one of {', '.join(FLUSH_LEVELS)} or False, got {flush!r}")
        self.timeout = timeout
        self.run = run if flush == "l2" else functools.partial(run, flush=flush)
        self.seed = seed
        self._proc: subprocess.Popen | None = None
        self.restarts = 0

    def __enter__(self) -> Measurer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _start(self) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "tessera.autotune.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait(10)
            self._proc.stdin.close()
            self._proc.stdout.close()
            self._proc = None
            self.restarts += 1

    def close(self) -> None:
        if self._proc is not None:
            try:
                _send(self._proc.stdin, None)
                self._proc.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
                self._proc.wait(10)
            self._proc.stdin.close()
            self._proc.stdout.close()
            self._proc = None

    def _call(self, fn, args, timeout: float | None):
        """Send a job; its result, or raise TimeoutError / EOFError (the worker died)."""
        _send(self._proc.stdin, (fn, args))
        ready, _, _ = select.select([self._proc.stdout], [], [], timeout)
        if not ready:
            raise TimeoutError
        return _recv(self._proc.stdout)

    def warm_up(self) -> None:
        """Start the worker and wait for its imports (so that they do not count in a timeout)."""
        if self._proc is None:
            self._start()
            self._call(ping, (), None)

    def call(self, fn, args) -> MeasureResult:
        """Run `fn(*args)` (picklable, returning a MeasureResult) in the worker; a crash or a
        timeout is a failed result."""
        self.warm_up()
        try:
            return self._call(fn, args, self.timeout)
        except TimeoutError:
            self._kill()
            return MeasureResult(error=f"timeout: no result in {self.timeout:g} s")
        except (EOFError, OSError):
            code = self._proc.wait(10)
            self._kill()
            return MeasureResult(error=f"crash: the worker died (exit code {code})")

    def measure(
        self, task: Task, config: Config, target, reference=None, model_context=None
    ) -> MeasureResult:
        """Build and time `config` in the worker, in the layout the model gives the task
        (`model_context`, Note [in-model layout]); a crash or a timeout is a failed result."""
        from tessera.transform import PassContext

        self.warm_up()
        ctx = PassContext.current()
        context = (ctx.opt_level, tuple(sorted(ctx.disabled_pass)))
        args = (task, config, str(target), reference, self.seed, context)
        return self.call(self.run, (*args, model_context))


def ping() -> bool:
    import tessera  # noqa: F401  (the imports a measurement needs, done before any timeout)

    return True
