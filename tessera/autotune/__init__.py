"""Auto-tuning: the tasks of a model, their config spaces, measurement, search and records.

    tasks = tessera.autotune.extract_tasks(mod, params, target="llvm")
    for task in tasks:
        print(task, task.default(target), len(list(task.configs(target))))
    results = tessera.autotune.tune(mod, params, "llvm", db="tune.db", budget=600)
    with tessera.autotune.apply_history_best("tune.db"):
        lib = tessera.build(mod, target="llvm", params=params)
    result = tessera.autotune.tune_kernel([C], [A, B, C], budget=300)   # a te.compute, no schedule
    tessera.autotune.report("tune.db", "tune.html")      # best-so-far curves and the final table

A task is a kernel workload (an op call's op, input types and attributes) for a strategy key
(tessera.topi.strategy.Task); a config is a small frozen mapping of its knobs
(tessera.topi.strategy.Config); a tuning record is (task, target fingerprint, config, seconds
or error), one JSON line in the database (records.py). See docs/tuning.md.
"""

from tessera.autotune.auto_schedule import AutoSpace
from tessera.autotune.kernel_tuner import KernelTuneResult, tune_kernel
from tessera.autotune.measure import Measurer, MeasureResult
from tessera.autotune.records import Database, Record, apply_history_best, target_fingerprint
from tessera.autotune.report import report
from tessera.autotune.tasks import extract_tasks
from tessera.autotune.tuner import TaskResult, task_counts, tune, tune_tasks
from tessera.topi.strategy import Config, ConfigSpace, Knob, Task, Workload

__all__ = [
    "AutoSpace",
    "KernelTuneResult",
    "Config",
    "ConfigSpace",
    "Database",
    "Knob",
    "MeasureResult",
    "Measurer",
    "Record",
    "Task",
    "TaskResult",
    "Workload",
    "apply_history_best",
    "extract_tasks",
    "report",
    "target_fingerprint",
    "task_counts",
    "tune",
    "tune_kernel",
    "tune_tasks",
]
