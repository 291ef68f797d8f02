"""The tasks of a model: the distinct workloads whose strategies have knobs.

    tasks = extract_tasks(mod, params, "llvm")   # [Task, ...] in the order the build asks

Runs the graph passes as `build` does (same PassContext) and lists every task a strategy is
asked for on the way: by graph passes (alter_layout's convs, pack_weights' dense/matmul) and by
lowering (the anchors of fused groups that no pass rewrote: matmul, batch_matmul, ...). Nothing
is lowered or compiled, so this takes the time of the graph passes.
"""

from __future__ import annotations

from tessera.target import Target
from tessera.topi import strategy
from tessera.topi.strategy import Task


def extract_tasks(
    mod, params: dict | None = None, target="llvm", target_host=None, contexts=None
) -> list[Task]:
    """The unique tasks of a graph module for `target`, in the order the build meets them.
    `contexts`: a dict to fill with {task: the context the build first asks it with}, the
    layout alter_layout gives the op in the model (its input block, padded channels, ...),
    on which a task's default config depends (`task.default(target, contexts[task])`)."""
    from tessera.driver import context_rules, fused_function, resolve_target
    from tessera.graph.ir import Function
    from tessera.graph_build.lower_group import distinct_groups, group_config
    from tessera.ir.module import IRModule

    target = resolve_target(target if isinstance(target, Target) else Target(target), target_host)
    if isinstance(mod, Function):
        mod = IRModule({"main": mod})
    with strategy.record_tasks() as seen, context_rules():
        func = fused_function(mod, target, params)
        groups, _ = distinct_groups(func)
        for group in groups:
            group_config(group, target)
    if contexts is not None:
        contexts.update(seen.contexts)
    return list(dict.fromkeys(seen))


# Note [task spans]
# The in-model confirmation (in_model.py) times each task's calls inside the model, from the
# executor's per-call profile, whose rows name the source (ONNX) nodes they compute (Note
# [spans] in graph/ir.py). A task does not know the calls that ask for it, and the strategy
# registry records the tasks only (`record_tasks`); so `task_spans` runs the graph passes as
# `extract_tasks` does with `Task.of` wrapped for the time of the run, the one place every
# call asking for its task goes through, and gathers the spans of the calls that ask for each.
# The passes keep spans through rewrites (merge_spans), so a profile row computing a call
# of the task names at least one of those nodes.


def task_spans(mod, params: dict | None = None, target="llvm", configs=None) -> dict:
    """{task: the source node names of the model's calls that ask for it} (Note [task
    spans]), the graph passes run with `configs` ({task: config}, the defaults for the rest)."""
    from tessera.driver import context_rules, fused_function, resolve_target
    from tessera.graph.ir import Function
    from tessera.graph_build.lower_group import distinct_groups, group_config
    from tessera.ir.module import IRModule

    target = resolve_target(target if isinstance(target, Target) else Target(target), None)
    if isinstance(mod, Function):
        mod = IRModule({"main": mod})
    spans: dict[Task, set[str]] = {}
    plain = Task.__dict__["of"]

    def of(call, target):
        task = plain.__func__(call, target)
        if task is not None:
            spans.setdefault(task, set()).update(getattr(call, "span", ()))
        return task

    Task.of = staticmethod(of)
    try:
        with strategy.use_configs(configs or {}, target), context_rules():
            func = fused_function(mod, target, params)
            groups, _ = distinct_groups(func)
            for group in groups:
                group_config(group, target)
    finally:
        Task.of = plain
    return spans
