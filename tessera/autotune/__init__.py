"""Auto-tuning: the tasks of a model and their config spaces (the tuner itself comes later).

    tasks = tessera.autotune.extract_tasks(mod, params, target="llvm")
    for task in tasks:
        print(task, task.default(target), len(list(task.configs(target))))
    configs = {task: task.sample(target, random.Random(0)) for task in tasks}
    lib = tessera.build(mod, target="llvm", params=params, configs=configs)

A task is a kernel workload (an op call's op, input types and attributes) for a strategy key
(tessera.topi.strategy.Task); a config is a small frozen mapping of its knobs
(tessera.topi.strategy.Config). A tuning record will be (task, target fingerprint, config).
"""

from tessera.autotune.tasks import extract_tasks
from tessera.topi.strategy import Config, ConfigSpace, Knob, Task, Workload

__all__ = ["Config", "ConfigSpace", "Knob", "Task", "Workload", "extract_tasks"]
