"""The run counter of a model with random ops: its hidden input and the counter behind it.

    counter = RunCounter();  n = counter.take()          # 0, then 1, 2, ... (thread-safe)
    slot = counter_slot(specs)                           # where the plan's counter input is

Note [random call counter]
A model with random ops (RandomNormal, Bernoulli, training Dropout, ...) has one more input,
the last, named RUN_COUNTER_INPUT: an int64 scalar that the frontend adds and the random
kernels read as two of their Philox counter words (Note [run-time random numbers] in
topi/philox.py). The user never sees it (GraphModule lists and takes the other inputs): each
run writes the next value of its executor's RunCounter into it, so every run draws fresh
values, and run k of a module draws what run k of any module of the same build draws, on
every target. A GraphModule's executors (one per thread, Note [threads] in
runtime/graph_module.py) share one counter, so two threads never draw the same values; a
new GraphModule (or GPUGraphModule, which keeps a counter the same way) starts again at
run 0. It is an input rather than state inside the native entry so that the entry stays a
pure function of its arguments (the same plan, entry and checks for models with and without
random ops). Control flow passes it on: an If branch or Loop body whose random ops draw
takes its caller's stream as a last parameter, STREAM_PARAM, a loop body folded with its
iteration number (Note [random streams] in topi/philox.py).
"""

from __future__ import annotations

import threading

RUN_COUNTER_INPUT = "tessera.run_call"
# the last parameter of an If branch or Loop body whose random ops draw: the caller's stream
# (Note [random streams] in topi/philox.py)
STREAM_PARAM = "tessera.stream"


class RunCounter:
    """The next run index of a module's executors (Note [random call counter])."""

    def __init__(self, start: int = 0):
        self._next, self._lock = int(start), threading.Lock()

    def take(self) -> int:
        with self._lock:
            n, self._next = self._next, self._next + 1
        return n


def counter_slot(specs: list) -> int:
    """The slot of the run counter input (the last), or len(specs) when there is none."""
    names = [name for name, _, _ in specs]
    if RUN_COUNTER_INPUT not in names:
        return len(specs)
    slot = names.index(RUN_COUNTER_INPUT)
    if slot != len(specs) - 1 or specs[slot][1:] != ("int64", ()):
        raise ValueError(
            f"the plan's input {RUN_COUNTER_INPUT!r} must be its last, an int64 scalar "
            "(Note [random call counter])"
        )
    return slot
