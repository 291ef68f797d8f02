"""The graph build path: fused groups -> kernels, and the executor plan that runs them.

`tessera.driver.build` spells out the order (bind params, graph passes, lower the groups,
codegen, plan); this package holds the steps that are specific to graphs:

    lower_group.py     a fused group -> te (compute rules) -> schedule -> tir.PrimFunc
    executor_plan.py   kernel calls, argument storage, weights blob (runtime/graph_executor.py)
"""

from tessera.graph_build.executor_plan import make_executor_plan, pack_params
from tessera.graph_build.lower_group import (
    Kernels,
    LoweringError,
    MissingComputeError,
    check_compute_rules,
    distinct_groups,
    group_key,
    lower_group,
    lower_groups,
    schedule_keys,
)

__all__ = [
    "Kernels",
    "LoweringError",
    "MissingComputeError",
    "check_compute_rules",
    "distinct_groups",
    "group_key",
    "lower_group",
    "lower_groups",
    "make_executor_plan",
    "pack_params",
    "schedule_keys",
]
