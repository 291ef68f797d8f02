"""The tir passes, one per file; each is a pure function PrimFunc -> PrimFunc.

The order the driver runs them in is `driver.TIR_PASSES` (see docs/architecture.md).
"""

from tessera.tir.transform.flatten_storage import flatten_storage
from tessera.tir.transform.unroll_loop import unroll_loop

__all__ = [
    "flatten_storage",
    "unroll_loop",
]
