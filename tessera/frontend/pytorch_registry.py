"""The ATen converter registry and the context a converter works in (no torch import here).

    @aten_op("aten.leaky_relu.default")
    def leaky_relu(b, self, negative_slope=0.01):
        return b.call("nn.leaky_relu", self, alpha=negative_slope)

A converter is registered under an overload's name ("aten.add.Tensor") or its packet's name
("aten.add", for every overload). It is called with the node's arguments bound to the names of
the ATen schema (defaults filled in), tensors as graph Values, lists as tuples, scalars as
Python numbers. It returns a Value, or a tuple for an op with several outputs (None for an
output tessera does not compute, such as batch-norm's saved statistics).
"""

from __future__ import annotations

import numpy as np

from tessera.graph.builder import GraphBuilder
from tessera.graph.ir import Constant, Value

_CONVERTERS: dict[str, object] = {}


def aten_op(*names: str):
    """Register a converter for ATen overloads or packets named like "aten.add.Tensor"."""

    def register(fn):
        for name in names:
            _CONVERTERS[name] = fn
        return fn

    return register


def find_converter(overload_name: str):
    """The converter of "aten.add.Tensor": its own, else its packet's ("aten.add"), else None."""
    if overload_name in _CONVERTERS:
        return _CONVERTERS[overload_name]
    packet = overload_name.rsplit(".", 1)[0]
    return _CONVERTERS.get(packet)


class NodeError(ValueError):
    """A problem with one node's arguments (the frontend adds the node and its source line)."""


class TorchContext(GraphBuilder):
    """A GraphBuilder plus what ATen converters need: the node's result type as torch computed
    it (`out_shape`, `out_dtype`: ops whose result shape is spelled with -1 or implicit
    broadcasting take it from there), and the transposes seen (so `x @ W.t()` becomes dense)."""

    def __init__(self):
        super().__init__(fold=True)
        self.out_shape: tuple[int, ...] = ()
        self.out_dtype: str = "float32"
        self.transposed: dict[int, Value] = {}  # id(permute(W, [1, 0])) -> W

    def scalar(self, value, dtype) -> Constant:
        return self.const(np.asarray(value, dtype=dtype))

    def reshape(self, x: Value, shape) -> Value:
        shape = tuple(int(d) for d in shape)
        return x if shape == x.type.shape else self.call("reshape", x, newshape=shape)

    def cast(self, x: Value, dtype: str) -> Value:
        return x if x.type.dtype.numpy_name == dtype else self.call("cast", x, dtype=dtype)

    def tensor(self, x, dtype: str | None = None) -> Value:
        """A Value for a tensor argument or a Python scalar (a 0-d constant of `dtype`)."""
        if isinstance(x, Value):
            return x if dtype is None else self.cast(x, dtype)
        return self.scalar(x, dtype or self.out_dtype)

    def known(self, v: Value, what: str) -> np.ndarray:
        if not isinstance(v, Constant):
            raise NodeError(f"{what} must be known when converting (data-dependent values are "
                            "not supported)")  # fmt: skip
        return v.array
