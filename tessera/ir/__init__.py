"""What every IR shares: dtypes, the node base, visitors, structural equality, IRModule."""

from tessera.ir.dtype import DType, dtype
from tessera.ir.module import IRModule
from tessera.ir.node import Mutator, Node, Visitor, post_order
from tessera.ir.structural_equal import assert_structural_equal, structural_equal

__all__ = [
    "DType",
    "IRModule",
    "Mutator",
    "Node",
    "Visitor",
    "assert_structural_equal",
    "dtype",
    "post_order",
    "structural_equal",
]
