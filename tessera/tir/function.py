"""PrimFunc: a kernel — its parameters (buffers and scalars), its body, its attributes.

The calling convention every code generator follows (the runtime relies on it):

    int32_t <name>(void** buffers, int64_t* vars)

`buffers[k]` is the data pointer of the k-th Buffer parameter, in parameter order.
`vars[j]` is the value of the j-th entry of `PrimFunc.scalar_vars()`: first the scalar (Var)
parameters in order, then the symbolic shape variables of the buffer parameters that are not
parameters themselves, in order of first appearance. Integer vars arrive as int64 and are
narrowed to their dtype; float vars arrive as the bits of a float64. Return 0 on success.

After `flatten_storage` the buffer params are one-dimensional; their original shapes stay in the
attr "param_shapes" (one tuple of dims per buffer param), which `param_shape` reads.
"""

from __future__ import annotations

from dataclasses import dataclass

from tessera.ir.node import Node, post_order
from tessera.tir.buffer import Buffer
from tessera.tir.expr import Var
from tessera.tir.stmt import Stmt


@dataclass(frozen=True)
class PrimFunc(Node):
    name: str
    params: tuple[Buffer | Var, ...]
    body: Stmt
    attrs: tuple[tuple[str, object], ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "params", tuple(self.params))
        object.__setattr__(self, "attrs", tuple(self.attrs))

    @property
    def buffer_params(self) -> tuple[Buffer, ...]:
        return tuple(p for p in self.params if isinstance(p, Buffer))

    def scalar_vars(self) -> tuple[Var, ...]:
        """The order of the `vars` array of the calling convention (see module docstring)."""
        order: list[Var] = [p for p in self.params if isinstance(p, Var)]
        seen = {id(v) for v in order}

        def note(node):
            if isinstance(node, Var) and id(node) not in seen:
                seen.add(id(node))
                order.append(node)

        for buf in self.buffer_params:
            for dim in self.param_shape(buf):
                post_order(dim, note)
        return tuple(order)

    def param_shape(self, buf: Buffer) -> tuple:
        """The shape the caller sees for buffer param `buf` (its shape before flattening)."""
        shapes = self.attr("param_shapes")
        if shapes is None:
            return buf.shape
        for b, shape in zip(self.buffer_params, shapes, strict=True):
            if b is buf:
                return shape
        raise KeyError(f"{buf.name} is not a buffer parameter of {self.name}")

    def attr(self, key: str, default=None):
        for k, v in self.attrs:
            if k == key:
                return v
        return default

    def with_body(self, body: Stmt) -> PrimFunc:
        from dataclasses import replace

        return self if body is self.body else replace(self, body=body)
