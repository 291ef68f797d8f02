"""The Keras layer-converter registry and the context a converter works in.

    @keras_layer("ReLU")
    def relu(b, config, x, **call_kwargs):
        return b.activation("relu", x)

A converter takes the layer's config (a dict, as saved) and the call's inputs as Values (a
list for merge layers), and returns a Value or a tuple of them. Weights come from
`b.weights(n)`: the layer's first n weights, in the order of Keras's `layer.weights`.

Values keep Keras's channels-last layout. `to_channels_first` / `to_channels_last` put a tensor
into tessera's NCHW for a spatial op and back; a transpose of a transpose that undoes it
returns the original value, so Conv2D -> BatchNormalization -> Conv2D runs without layout
changes in between (the unused transposes are dropped at the end).
"""

from __future__ import annotations

import numpy as np

from tessera.graph.builder import GraphBuilder
from tessera.graph.ir import Call, Constant, Function, Value

_CONVERTERS: dict[str, object] = {}


def keras_layer(*class_names: str):
    """Register a converter for Keras layer classes."""

    def register(fn):
        for name in class_names:
            _CONVERTERS[name] = fn
        return fn

    return register


def find_converter(class_name: str):
    return _CONVERTERS.get(class_name)


class LayerError(ValueError):
    """A problem with one layer's config or inputs (the frontend adds the layer's name)."""


class KerasContext(GraphBuilder):
    def __init__(self, weights: dict[str, list[np.ndarray]]):
        super().__init__(fold=True)
        self._weights = weights
        self.weight_ids: set[int] = set()
        self.layer_name = ""
        self._transposed: dict[int, tuple[Value, tuple[int, ...]]] = {}
        self._weight_cache: dict[str, list[Constant]] = {}

    # -- weights ------------------------------------------------------------------------------

    def weights(self, count: int | None = None) -> list[Constant]:
        """The current layer's weights as constants named "<layer>/<i>" (params at the end)."""
        name = self.layer_name
        if name not in self._weight_cache:
            arrays = self._weights.get(name, [])
            consts = [self.const(np.asarray(a), name=f"{name}/{i}") for i, a in enumerate(arrays)]
            self.weight_ids.update(id(c) for c in consts)
            self._weight_cache[name] = consts
        consts = self._weight_cache[name]
        if count is not None and len(consts) < count:
            raise LayerError(f"needs {count} weights, the file has {len(consts)} for it")
        return consts

    # -- helpers ------------------------------------------------------------------------------

    def scalar(self, value, like: Value) -> Constant:
        return self.const(np.asarray(value, dtype=like.type.dtype.numpy_name))

    def reshape(self, x: Value, shape) -> Value:
        shape = tuple(int(d) for d in shape)
        return x if shape == x.type.shape else self.call("reshape", x, newshape=shape)

    def transpose(self, x: Value, axes) -> Value:
        axes = tuple(int(a) for a in axes)
        if axes == tuple(range(len(axes))):
            return x
        if id(x) in self._transposed:
            source, first = self._transposed[id(x)]
            if tuple(first[a] for a in axes) == tuple(range(len(axes))):
                return source
        out = self.call("transpose", x, axes=axes)
        self._transposed[id(out)] = (x, axes)
        return out

    def transpose_source(self, x: Value):
        """(source, axes) when x was made as transpose(source, axes), else None."""
        return self._transposed.get(id(x))

    def to_channels_first(self, x: Value) -> Value:
        n = x.type.ndim
        return self.transpose(x, (0, n - 1, *range(1, n - 1)))

    def to_channels_last(self, x: Value) -> Value:
        n = x.type.ndim
        return self.transpose(x, (0, *range(2, n), 1))

    def eliminate_dead(self, func: Function) -> Function:
        """Drop the calls nothing uses (transposes that cancelled), keeping every object."""
        live, kept = {id(v) for v in func.outputs}, []
        for call in reversed(func.body):
            if any(id(v) in live for v in call.outputs):
                kept.append(call)
                live.update(id(v) for v in call.inputs)
        body: tuple[Call, ...] = tuple(reversed(kept))
        constants = tuple(c for c in func.constants if id(c) in live)
        return Function(func.name, func.params, body, func.outputs, constants)
