"""The user's handle on a compiled model: `GraphModule` wraps a `GraphExecutor`
(graph_executor.py) with inputs by name, a per-thread executor (Note [threads]), runs that
Ctrl-C can interrupt (Note [interrupting a run]), benchmarks and per-call profiles.

This module imports nothing from the compiler: a loaded artifact runs with numpy alone.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import numpy as np

from tessera.runtime.graph_executor import GraphExecutor
from tessera.runtime.ndarray import NDArray
from tessera.runtime.profiling import ProfileResult


class GraphModule:
    """The user's handle on a compiled model (TVM's graph_executor.GraphModule).

    Note [threads]
    A GraphModule may be shared by threads: each thread that uses it gets an executor of its own
    (inputs, outputs and arena; the kernels and weights are shared), made on its first call, so
    `set_input`; `run`; `get_output` in one thread never sees another thread's values. The
    first thread to use it takes the executor it was made with. `run_with(inputs)` (or
    `m(x=...)`) sets, runs and returns copies of the outputs in one call. What a thread cannot
    do is set an input in one thread and run in another: each thread sets its own inputs.
    """

    def __init__(self, executor: GraphExecutor):
        if not isinstance(executor, GraphExecutor):
            raise TypeError(
                "GraphModule expects lib['default'](dev) of a compiled model, "
                f"got {type(executor).__name__}"
            )
        self._factory, self._device = executor.factory, executor.device
        self._specs = executor.user_specs
        self._counter = executor.counter  # shared by the threads' executors
        self._lock = threading.Lock()
        self._spare: GraphExecutor | None = executor  # for the first thread that uses it
        self._local = threading.local()

    def _state(self) -> _ThreadState:
        state = getattr(self._local, "state", None)
        if state is None:
            with self._lock:
                executor, self._spare = self._spare, None
            if executor is None:
                executor = GraphExecutor(self._factory, self._device, self._counter)
            state = self._local.state = _ThreadState(executor, {n for n, _, _ in self._specs})
        return state

    @property
    def _ex(self) -> GraphExecutor:
        """This thread's executor."""
        return self._state().executor

    # -- inputs ----------------------------------------------------------------------------

    def _input_slot(self, key) -> int:
        names = ", ".join(name for name, _, _ in self._specs) or "none"
        if isinstance(key, str):
            if key not in self._ex.input_index:
                raise ValueError(f"the model has no input {key!r} (inputs: {names})")
            return self._ex.input_index[key]
        if isinstance(key, int | np.integer) and not isinstance(key, bool):
            if not 0 <= key < len(self._specs):
                raise ValueError(f"input index {key} out of range (inputs: {names})")
            return int(key)
        raise TypeError(f"an input is named by a str or an int, got {type(key).__name__}")

    def set_input(self, key=None, value=None, **inputs) -> None:
        """Copy `value` (numpy array or NDArray) into input `key` (name or index); or several
        inputs as keywords. Shape and dtype must match exactly."""
        if key is not None:
            inputs = {key: value, **inputs}
        state = self._state()
        for k, v in inputs.items():
            slot = self._input_slot(k)
            name, dtype, shape = self._specs[slot]
            got_dtype, got_shape = _dtype_and_shape(v, name)
            dynamic = state.executor.dynamic
            if dynamic is not None:  # any shape its dims' bounds allow
                if got_dtype != dtype:
                    raise ValueError(f"input {name!r}: expected {dtype}, got {got_dtype}")
                dynamic.check_input(name, got_shape)
                state.executor.set_dynamic_input(slot, v)
                state.unset.discard(name)
                continue
            if got_dtype != dtype or got_shape != shape:
                raise ValueError(
                    f"input {name!r}: expected {dtype} of shape {shape}, "
                    f"got {got_dtype} of shape {got_shape}"
                )
            state.executor.inputs[slot].copyfrom(v)
            state.unset.discard(name)

    def get_input(self, key) -> NDArray:
        """The input's own array in this thread (writing into it sets the input)."""
        slot = self._input_slot(key)
        state = self._state()
        state.unset.discard(self._specs[slot][0])
        return state.executor.inputs[slot]

    def get_num_inputs(self) -> int:
        return len(self._specs)

    def get_input_info(self) -> tuple[dict[str, tuple], dict[str, str]]:
        """(shapes by input name, dtypes by input name), as TVM returns them."""
        shapes = {name: shape for name, _, shape in self._specs}
        dtypes = {name: dtype for name, dtype, _ in self._specs}
        return shapes, dtypes

    # -- running and outputs ---------------------------------------------------------------

    def run(self, **inputs) -> None:
        """Run the model on this thread's inputs (set them first, or give them as keywords).
        From the main thread, Ctrl-C interrupts a long run (Note [interrupting a run])."""
        if inputs:
            self.set_input(**inputs)
        state = self._state()
        if state.unset:
            missing = ", ".join(repr(n) for n in sorted(state.unset))
            raise ValueError(f"run: input {missing} not set (use set_input)")
        _run_interruptibly(self, state)

    def run_with(self, inputs: dict | None = None, **more) -> list[np.ndarray]:
        """Set `inputs` ({name: array}), run, and return copies of the outputs: one call that
        is safe from many threads at once (Note [threads])."""
        self.run(**{**(inputs or {}), **more})
        executor = self._state().executor
        return [executor.output(k).numpy().copy() for k in range(len(executor.outputs))]

    def __call__(self, *args, **inputs) -> list[np.ndarray]:
        """`m(x)` or `m(x=x, mask=m)`: run_with the inputs, positional ones in model order."""
        if len(args) > len(self._specs):
            raise TypeError(f"the model takes {len(self._specs)} inputs, got {len(args)}")
        for (name, _, _), value in zip(self._specs, args, strict=False):
            if name in inputs:
                raise TypeError(f"input {name!r} given both by position and by name")
            inputs[name] = value
        return self.run_with(inputs)

    def get_num_outputs(self) -> int:
        return len(self._factory.plan["outputs"])

    def get_output(self, index: int, out: NDArray | None = None) -> NDArray:
        """Output `index` of this thread's last run: the executor's own array (the next run
        overwrites it), or a copy into `out` when given."""
        executor = self._ex
        if executor.dynamic is not None and executor._bound is None:
            raise ValueError(
                "get_output: run the model first (with symbolic dims, the outputs take the "
                "shapes of a run)"
            )
        count = len(self._factory.plan["outputs"])
        if not isinstance(index, int | np.integer) or not 0 <= index < count:
            what = f"{count} output" + ("" if count == 1 else "s")
            raise ValueError(f"output index {index!r} out of range (the model has {what})")
        array = executor.output(int(index))
        return out.copyfrom(array) if out is not None else array

    def benchmark(self, dev=None, number: int = 10, repeat: int = 3, min_repeat_ms: float = 0):
        """Time `run()`: `repeat` measurements of the mean of `number` runs (ProfileResult)."""
        if number < 1 or repeat < 1:
            raise ValueError(f"benchmark: number and repeat must be >= 1, got {number}, {repeat}")
        self.run()  # warm-up, and the check that every input is set
        executor = self._ex
        results = []
        for _ in range(repeat):
            runs = number
            while True:
                start = time.perf_counter()
                for _ in range(runs):
                    executor.run()
                elapsed = time.perf_counter() - start
                if elapsed * 1e3 >= min_repeat_ms or runs >= 1 << 24:
                    break
                runs *= 2
            results.append(elapsed / runs)
        return ProfileResult(tuple(results))

    @property
    def num_calls(self) -> int:
        """How many kernel calls one run makes."""
        return len(self._factory.plan["calls"])

    def profile(self, repeat: int = 10) -> list[CallProfile]:
        """Time every kernel call natively over `repeat` runs (after a warm-up run): one row per
        call of the plan, in plan order, with its kernel, source node names, mean seconds and
        share of the total time in kernels."""
        if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
            raise ValueError(f"profile: repeat must be an int >= 1, got {repeat!r}")
        self.run()  # warm-up (caches, thread pool, weight pages) and the inputs check
        executor = self._ex
        total = np.zeros(len(executor.calls))
        for _ in range(repeat):
            total += executor.time_calls()
        means = total / repeat
        whole = float(means.sum()) or 1.0
        return [
            CallProfile(k, call[3], list(executor.nodes[k]), float(t), float(t) / whole)
            for k, (call, t) in enumerate(zip(executor.calls, means, strict=True))
        ]


@dataclass
class _ThreadState:
    """One thread's executor, the inputs it has not set yet, and how long its last run took."""

    executor: GraphExecutor
    unset: set
    last_seconds: float = float("inf")  # the first run is watched (Note [interrupting a run])


# Note [interrupting a run]
# A run is one native call; Python delivers Ctrl-C (SIGINT) only between bytecodes of the main
# thread, so a run of minutes would hold Ctrl-C for minutes. So when the main thread starts a
# run that may be long (its first, or one after a run of at least WATCH_SECONDS), the native
# call runs in a helper thread while the main thread waits on it in steps, where Ctrl-C lands:
# run() then raises KeyboardInterrupt at once. The interrupted call runs on to its end in the
# helper thread (native code cannot be stopped safely), writing into this thread's executor,
# which is dropped: the next run makes a fresh one. Short runs are called directly (a thread
# handoff would cost more than they take), and Ctrl-C waits for them, briefly.
WATCH_SECONDS = 0.05


def _run_interruptibly(module: GraphModule, state: _ThreadState) -> None:
    executor = state.executor
    if threading.current_thread() is not threading.main_thread() or (
        state.last_seconds < WATCH_SECONDS
    ):
        start = time.perf_counter()
        executor.run()
        state.last_seconds = time.perf_counter() - start
        return
    done, failure = threading.Event(), []

    def work():
        try:
            executor.run()
        except BaseException as err:  # noqa: BLE001 -- handed to the waiting thread
            failure.append(err)
        finally:
            done.set()

    start = time.perf_counter()
    threading.Thread(target=work, name="tessera-run", daemon=True).start()
    try:
        while not done.wait(0.1):
            pass
    except KeyboardInterrupt:
        module._local.state = None  # its executor is still being written: a fresh one next
        raise
    state.last_seconds = time.perf_counter() - start
    if failure:
        raise failure[0]


@dataclass(frozen=True)
class CallProfile:
    """One kernel call of a profile (`GraphModule.profile`)."""

    index: int  # position in the executor plan
    kernel: str
    nodes: list[str]  # source (ONNX) node names
    seconds: float  # mean time per run
    share: float  # of the time of all calls


def _dtype_and_shape(value, name: str) -> tuple[str, tuple]:
    if isinstance(value, NDArray):
        return value.dtype, tuple(value.shape)
    if isinstance(value, np.ndarray):
        return value.dtype.name, tuple(value.shape)
    raise TypeError(
        f"input {name!r}: a value is a numpy array or an NDArray, got {type(value).__name__}"
    )
