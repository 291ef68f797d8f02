"""The tir passes, one per file; each is a pure function PrimFunc -> PrimFunc.

The order the driver runs them in is `driver.TIR_PASSES` (see docs/architecture.md).
"""

from tessera.tir.transform.flatten_storage import flatten_storage
from tessera.tir.transform.lift_workspaces import lift_workspaces
from tessera.tir.transform.partition_loop import partition_loop
from tessera.tir.transform.remove_no_op import remove_no_op
from tessera.tir.transform.simplify import simplify
from tessera.tir.transform.unroll_loop import unroll_loop
from tessera.tir.transform.vectorize_loop import vectorize_loop

__all__ = [
    "flatten_storage",
    "lift_workspaces",
    "partition_loop",
    "remove_no_op",
    "simplify",
    "unroll_loop",
    "vectorize_loop",
]
