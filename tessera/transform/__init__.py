"""Pass infrastructure (PassContext, instruments, Sequential) and the graph passes."""

from tessera.transform.alter_layout import alter_layout
from tessera.transform.bind_params import bind_params
from tessera.transform.eliminate_common_subexpr import eliminate_common_subexpr
from tessera.transform.eliminate_dead_code import eliminate_dead_code
from tessera.transform.fold_constant import fold_constant
from tessera.transform.fuse_ops import fuse_ops, fused_groups
from tessera.transform.graph_pass import graph_pass
from tessera.transform.infer_types import infer_types
from tessera.transform.pass_context import (
    PassContext,
    PassInstrument,
    PassTiming,
    PrintIR,
    run_passes,
)
from tessera.transform.plan_memory import Allocation, MemoryPlan, plan_memory
from tessera.transform.sequential import Sequential
from tessera.transform.simplify_inference import simplify_inference

__all__ = [
    "Allocation",
    "MemoryPlan",
    "PassContext",
    "PassInstrument",
    "PassTiming",
    "PrintIR",
    "Sequential",
    "alter_layout",
    "bind_params",
    "eliminate_common_subexpr",
    "eliminate_dead_code",
    "fold_constant",
    "fuse_ops",
    "fused_groups",
    "graph_pass",
    "infer_types",
    "plan_memory",
    "run_passes",
    "simplify_inference",
]
