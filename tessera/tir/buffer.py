"""Buffers: named, typed, row-major regions of memory that loads and stores address.

A Buffer is an identity (like a Var): two buffers named "A" are different buffers. Buffers are
compact and row-major; `shape` may hold symbolic variables (`n`), which a kernel receives at call
time. After storage flattening every buffer a kernel touches is one-dimensional.

    A = decl_buffer((n, 4), "float32", "A")
    A[i, j]            # BufferLoad(A, (i, j))
"""

from __future__ import annotations

from dataclasses import dataclass

from tessera.ir.dtype import DType
from tessera.ir.node import Node
from tessera.tir.expr import BufferLoad, Expr, convert


@dataclass(frozen=True, eq=False)
class Buffer(Node):
    name: str
    shape: tuple[Expr, ...]
    dtype: DType
    scope: str = "global"  # "global" (heap / argument), "local" (stack or registers), "shared"
    is_leaf = True

    def __post_init__(self):
        object.__setattr__(self, "dtype", DType.parse(self.dtype))
        object.__setattr__(self, "shape", tuple(convert(s) for s in self.shape))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, indices) -> BufferLoad:
        if not isinstance(indices, tuple):
            indices = (indices,)
        return BufferLoad(self, tuple(convert(i) for i in indices))

    def num_elements(self) -> Expr:
        n = convert(1)
        for s in self.shape:
            n = n * s
        return n

    def __str__(self) -> str:
        dims = ", ".join(str(s) for s in self.shape)
        return f"Buffer({self.name}, {self.dtype}, [{dims}])"

    __repr__ = __str__


def decl_buffer(shape, dtype="float32", name="buffer", scope="global") -> Buffer:
    if not isinstance(shape, (tuple, list)):
        shape = (shape,)
    return Buffer(name, tuple(convert(s) for s in shape), DType.parse(dtype), scope)
