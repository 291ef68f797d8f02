"""Faults to inject into measurement, for tests of the tuner's robustness.

    run = Faulty(crash={config_a}, hang={config_b}, wrong={config_c})
    tune_tasks(..., measurer=Measurer(timeout=20, run=run))

`Faulty` is what a `Measurer`'s worker calls instead of `run_config`: it is a picklable object
(the worker is a spawned process, so a monkeypatch in the tuning process would not reach it)
that kills the worker (crash), sleeps forever (hang) or perturbs the outputs (wrong) for the
configs named, and measures every other config for real.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from tessera.autotune.measure import run_config


@dataclass(frozen=True)
class Faulty:
    crash: frozenset = field(default_factory=frozenset)
    hang: frozenset = field(default_factory=frozenset)
    wrong: frozenset = field(default_factory=frozenset)

    def __call__(
        self, task, config, target, reference=None, seed=0, context=(2, ()), model_context=None
    ):
        if config in self.crash:
            os.abort()  # as a segfaulting kernel would: the process is gone, no exception
        if config in self.hang:
            while True:
                time.sleep(60)
        if config in self.wrong and reference is not None:
            bad = [r + 1.0 for r in reference]
            return run_config(task, config, target, bad, seed, context, model_context)
        return run_config(task, config, target, reference, seed, context, model_context)
