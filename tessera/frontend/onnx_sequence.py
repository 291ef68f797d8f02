"""ONNX sequences and optionals, resolved when converting: a sequence is a tuple of graph values
whose length is known (`Seq`), an optional is a value or None. Every op on them is a choice
among values (SequenceAt with a known position, SequenceInsert, ...) or ordinary tensor ops
(SplitToSequence is a split, ConcatFromSequence a concatenate), so a compiled model holds
tensors only. A sequence input of the model is one input per element (named "x.0", "x.1",
...; from_onnx's shape_dict gives it a list of shapes) and a sequence output likewise.

    SequenceConstruct(a, b) -> Seq((a, b));  SequenceAt(s, 1) -> b;  SequenceLength(s) -> 2
    SequenceMap(s; body) -> body converted once per element
"""

from __future__ import annotations

import numpy as np

from tessera.frontend.onnx_registry import NodeError, onnx_op
from tessera.graph.ir import Value


class Seq(tuple):
    """A sequence of graph values (its length known when converting)."""


def _seq(s, what: str = "input_sequence") -> Seq:
    if not isinstance(s, Seq):
        raise NodeError(f"{what} must be a sequence")
    return s


def _position(b, s: Seq, position, default: int, insert: bool = False) -> int:
    """A known position in `s` (negative counts from the end); `insert` allows len(s)."""
    if position is None:
        return default
    p = int(np.asarray(b.known(position, "position")).reshape(-1)[0])
    top = len(s) + 1 if insert else len(s)
    if not -len(s) <= p < top:
        raise NodeError(f"position {p} is out of range for a sequence of {len(s)}")
    return p + len(s) if p < 0 else p


@onnx_op("SequenceConstruct", since=11)
def sequence_construct(b, *inputs):
    return Seq(inputs)


@onnx_op("SequenceEmpty", since=11)
def sequence_empty(b, *, dtype=None):
    return Seq()


@onnx_op("SequenceAt", since=11)
def sequence_at(b, input_sequence, position):
    s = _seq(input_sequence)
    return s[_position(b, s, position, 0)]


@onnx_op("SequenceInsert", since=11)
def sequence_insert(b, input_sequence, tensor, position=None):
    s = _seq(input_sequence)
    p = _position(b, s, position, len(s), insert=True)
    return Seq((*s[:p], tensor, *s[p:]))


@onnx_op("SequenceErase", since=11)
def sequence_erase(b, input_sequence, position=None):
    s = _seq(input_sequence)
    p = _position(b, s, position, len(s) - 1)
    return Seq((*s[:p], *s[p + 1 :]))


@onnx_op("SequenceLength", since=11)
def sequence_length(b, input_sequence):
    return b.const(np.int64(len(_seq(input_sequence))))


@onnx_op("SplitToSequence", since=11)
def split_to_sequence(b, input, split=None, *, axis=0, keepdims=1):
    shape = b.shape_of(input)
    axis %= len(shape)
    if split is None:
        parts = b.call("split", input, axis=axis, sections=(1,) * shape[axis])
        parts = parts if isinstance(parts, tuple) else (parts,)
        if not keepdims:
            parts = tuple(b.reshape(p, shape[:axis] + shape[axis + 1 :]) for p in parts)
        return Seq(parts)
    sizes = np.asarray(b.known(split, "split")).reshape(-1)
    if sizes.size == 1 and np.asarray(split.array).ndim == 0:  # one size: equal chunks
        size = int(sizes[0])
        whole, rest = divmod(shape[axis], size)
        sizes = [size] * whole + ([rest] if rest else [])
    sizes = tuple(int(s) for s in sizes)
    if sum(sizes) != shape[axis]:
        raise NodeError(f"split sizes {list(sizes)} do not add up to {shape[axis]}")
    parts = b.call("split", input, axis=axis, sections=sizes)
    return Seq(parts if isinstance(parts, tuple) else (parts,))


@onnx_op("ConcatFromSequence", since=11)
def concat_from_sequence(b, input_sequence, *, axis, new_axis=0):
    s = _seq(input_sequence)
    if not s:
        raise NodeError("cannot concatenate an empty sequence")
    if new_axis:
        shape = b.shape_of(s[0])
        axis %= len(shape) + 1
        s = [b.reshape(v, (*shape[:axis], 1, *shape[axis:])) for v in s]
    else:
        axis %= s[0].type.ndim
    return s[0] if len(s) == 1 else b.call("concatenate", *s, axis=axis)


@onnx_op("SequenceMap", since=17)
def sequence_map(b, input_sequence, *additional_inputs, body):
    """The body once per element: sequence inputs give their element, tensors themselves."""
    inputs = [input_sequence, *additional_inputs]
    n = len(_seq(input_sequence))
    for x in inputs:
        if isinstance(x, Seq) and len(x) != n:
            raise NodeError(f"the input sequences have different lengths ({len(x)} and {n})")
    names = [vi.name for vi in body.input]
    results = []
    for i in range(n):
        bindings = {
            nm: x[i] if isinstance(x, Seq) else x for nm, x in zip(names, inputs, strict=True)
        }
        results.append(b.convert_subgraph(body, bindings, step=i))
    return tuple(Seq(r[k] for r in results) for k in range(len(body.output)))


@onnx_op("Optional", since=15)
def optional(b, input=None, *, type=None):
    return input


@onnx_op("OptionalHasElement", since=15)
def optional_has_element(b, input=None):
    return b.const(np.bool_(input is not None))


@onnx_op("OptionalGetElement", since=15)
def optional_get_element(b, input):
    if input is None:
        raise NodeError("the optional input is empty")
    return input


def is_value_or_seq(v) -> bool:
    return isinstance(v, Value) or (isinstance(v, Seq) and all(isinstance(x, Value) for x in v))
