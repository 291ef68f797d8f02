"""The graph IR: typed SSA values, op calls, constants and functions.

A `Function` is a flat list of `Call`s in topological order (like a jaxpr or a Relax dataflow
block). Every `Value` is defined once: as a parameter, a constant, or an output of one call.

    def main(%x: f32[1, 8], %w: f32[4, 8]) {
      %1 = nn.dense(%x, %w) : f32[1, 4];
      %2 = nn.relu(%1) : f32[1, 4];
      return %2
    }

Values and constants compare by identity (two values named `%1` differ); everything else is
structural. Constants hold numpy arrays (read-only, wrapped in `TensorData` so that `==` and
`hash` are structural).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from tessera.ir.dtype import DType
from tessera.ir.node import Node
from tessera.tir.expr import Expr

# Short dtype spellings used in the text form: f32[1, 3]
_SHORT = {
    "float16": "f16",
    "float32": "f32",
    "float64": "f64",
    "bfloat16": "bf16",
    "int8": "i8",
    "int16": "i16",
    "int32": "i32",
    "int64": "i64",
    "uint8": "u8",
    "uint16": "u16",
    "uint32": "u32",
    "uint64": "u64",
    "bool": "bool",
}
_LONG = {v: k for k, v in _SHORT.items()}


def _dim(d):
    """A dim as TensorType holds it: an int, a str, or a simplified symbolic expression (an
    expression that simplifies to a constant becomes that int)."""
    if isinstance(d, str):
        return d
    if isinstance(d, Expr):
        from tessera.graph.dims import simplify_dim

        return simplify_dim(d)
    return int(d)


def short_dtype(dtype: DType) -> str:
    return _SHORT.get(str(dtype), str(dtype))


def parse_dtype(text) -> DType:
    """Read 'f32', 'float32', numpy dtypes and DTypes."""
    if isinstance(text, str) and text in _LONG:
        text = _LONG[text]
    return DType.parse(text)


@dataclass(frozen=True)
class TensorType(Node):
    """A tensor's shape and element type. A dim is an int, a symbolic dim (a `tir` integer
    expression over the model's dim variables, `dims.dim_var`: Note [symbolic dims] in
    graph/dims.py), or a str name while still unbound."""

    shape: tuple[int | str | object, ...]
    dtype: DType

    def __post_init__(self):
        shape = tuple(_dim(d) for d in self.shape)
        for d in shape:
            if isinstance(d, int) and d < 0:
                raise ValueError(f"negative dimension in shape {shape}")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", parse_dtype(self.dtype))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        return all(isinstance(d, int) for d in self.shape)

    @property
    def size(self) -> int:
        """Number of elements (static shapes only)."""
        if not self.is_static:
            raise ValueError(f"type {self} has symbolic dims")
        return int(np.prod(self.shape, dtype=np.int64))

    def with_shape(self, shape) -> TensorType:
        return TensorType(tuple(shape), self.dtype)

    def with_dtype(self, dtype) -> TensorType:
        return TensorType(self.shape, parse_dtype(dtype))

    def __str__(self) -> str:
        from tessera.graph.dims import show_dim

        return f"{short_dtype(self.dtype)}[{', '.join(show_dim(d) for d in self.shape)}]"


@dataclass(frozen=True, eq=False)
class Value(Node):
    """An SSA value: a name (for printing) and a type. It equals only itself."""

    name: str
    type: TensorType
    is_leaf = True

    def __str__(self) -> str:
        return f"%{self.name}: {self.type}"


class TensorData:
    """A read-only numpy array with structural `==` and `hash`: equal dtype, shape and bytes,
    except that a NaN equals any NaN."""

    __slots__ = ("array", "_hash")

    def __init__(self, array):
        array = np.array(array, copy=True)
        array.flags.writeable = False
        self.array = array
        self._hash = None

    def __eq__(self, other):
        if not isinstance(other, TensorData):
            return NotImplemented
        a, b = self.array, other.array
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        return self is other or _canonical_bytes(a) == _canonical_bytes(b)

    def __hash__(self):
        if self._hash is None:
            self._hash = hash(
                (self.array.dtype.str, self.array.shape, _canonical_bytes(self.array))
            )
        return self._hash

    def __repr__(self) -> str:
        return f"TensorData({self.array!r})"


def _canonical_bytes(a: np.ndarray) -> bytes:
    """The bytes that decide equality: every NaN is the same NaN (whatever its sign or payload);
    -0.0 and 0.0 differ (1 / x tells them apart, so no pass may merge them)."""
    if a.dtype.kind in "fc":
        nan = np.isnan(a)
        if nan.any():
            a = np.where(nan, a.dtype.type(np.nan), a)
    return a.tobytes()


@dataclass(frozen=True, eq=False)
class Constant(Value):
    """A value whose contents are known: held in `Function.constants`."""

    data: TensorData = field(default=None)

    def __post_init__(self):
        if not isinstance(self.data, TensorData):
            object.__setattr__(self, "data", TensorData(self.data))
        arr = self.data.array
        if tuple(arr.shape) != tuple(self.type.shape):
            raise ValueError(f"constant %{self.name}: data shape {arr.shape} != type {self.type}")

    @staticmethod
    def of(name: str, array) -> Constant:
        array = np.asarray(array)
        return Constant(name, TensorType(array.shape, parse_dtype(array.dtype)), TensorData(array))

    @property
    def array(self) -> np.ndarray:
        return self.data.array


@dataclass(frozen=True, eq=False)
class ShapeConstant(Constant):
    """An int64 constant some of whose elements are symbolic dims (its array holds ints and
    `tir` expressions): the `Shape` of a tensor with symbolic dims while the ONNX frontend
    converts, folded through the shape arithmetic (Gather, Concat, Mul, ...) into what reads
    it as a shape (Reshape, Expand). It never reaches a kernel: a call that would read it at
    run time is refused (GraphBuilder.call)."""

    def __post_init__(self):
        object.__setattr__(self, "data", TensorData(np.asarray(self.data, dtype=object)))
        if tuple(self.data.array.shape) != tuple(self.type.shape):
            raise ValueError(f"constant %{self.name}: data shape != type {self.type}")


class Attrs(Mapping):
    """A frozen, ordered mapping of attribute names to plain values (ints, floats, strs,
    bools, None, DTypes and tuples of those). Lists are stored as tuples."""

    __slots__ = ("_items", "_hash")

    def __init__(self, items=()):
        if isinstance(items, Mapping):
            items = items.items()
        self._items = tuple(sorted((str(k), _freeze(v)) for k, v in items))
        self._hash = None

    def __getitem__(self, key):
        for k, v in self._items:
            if k == key:
                return v
        raise KeyError(key)

    def __iter__(self):
        return (k for k, _ in self._items)

    def __len__(self):
        return len(self._items)

    def __eq__(self, other):
        if isinstance(other, Attrs):
            return _attr_key(self._items) == _attr_key(other._items)
        return NotImplemented

    def __hash__(self):
        if self._hash is None:
            self._hash = hash(_attr_key(self._items))
        return self._hash

    def __repr__(self) -> str:
        return f"Attrs({dict(self._items)!r})"


def _freeze(v):
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, np.ndarray):
        return _freeze(v.tolist())
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, (bool, int, float, str, DType, Function)) or v is None:
        return v  # a Function: the body of a `fused` call (tessera.transform.fuse_ops)
    if isinstance(v, Expr) and v.dtype.is_int:
        return _dim(v)  # a symbolic dim in a shape attribute (reshape's newshape, ...)
    raise TypeError(f"attribute value {v!r} of type {type(v).__name__} is not supported")


def _attr_key(v):
    # 1 == 1.0 == True in Python; attributes keep their kind, so compare (type, value).
    if isinstance(v, tuple):
        return tuple(_attr_key(x) for x in v)
    if isinstance(v, float) and v != v:
        return ("float", "nan")
    if isinstance(v, Expr):
        return ("dim", v)  # == is structural (variables by identity)
    return (type(v).__name__, v)


@dataclass(frozen=True)
class Call(Node):
    """outputs = op(*inputs, **attrs). `op` is a registered `tessera.graph.op.Op`.

    `span` names the source nodes the call came from (ONNX node names), for profiles and
    messages. See Note [spans]: it is metadata, so `==`, `hash` and `structural_equal` ignore it.
    """

    op: object
    inputs: tuple[Value, ...]
    attrs: Attrs
    outputs: tuple[Value, ...]
    span: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self):
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        if not isinstance(self.attrs, Attrs):
            object.__setattr__(self, "attrs", Attrs(self.attrs))
        span = (self.span,) if isinstance(self.span, str) else tuple(self.span)
        for name in span:
            if not isinstance(name, str):
                raise TypeError(f"a call's span holds source node names (str), got {name!r}")
        object.__setattr__(self, "span", span)


# Note [spans]
# A call's span is the ordered list of source (ONNX) node names whose work it does. The frontend
# gives each call made while converting node N the span (N,). A pass that replaces calls by others
# gives the new calls the union of the spans of the calls they replace (`merge_spans`): a folded
# batch-norm's conv keeps the conv's and the batch-norm's names, a CSE survivor those of the
# calls merged into it, a `fused` call those of its members in order. Calls a pass removes
# without replacement (folded to constants, identities) take their names with them: they cost
# nothing at run time, so no kernel has to answer for them.


def merge_spans(*spans: tuple[str, ...]) -> tuple[str, ...]:
    """The union of spans, in order of first appearance."""
    return tuple(dict.fromkeys(name for span in spans for name in span))


def source_nodes(call: Call) -> list[str]:
    """The source node names `call` came from. A `fused` call without a span of its own
    answers for the calls of its group's function."""
    if call.span or "func" not in call.attrs or not isinstance(call.attrs["func"], Function):
        return list(call.span)
    return list(merge_spans(*(source_nodes(c) for c in call.attrs["func"].body)))


@dataclass(frozen=True)
class Function(Node):
    """A graph function: parameters, constants, a topologically ordered body, outputs."""

    name: str
    params: tuple[Value, ...]
    body: tuple[Call, ...]
    outputs: tuple[Value, ...]
    constants: tuple[Constant, ...] = ()

    def __post_init__(self):
        for f in ("params", "body", "outputs", "constants"):
            object.__setattr__(self, f, tuple(getattr(self, f)))

    def param(self, name: str) -> Value:
        for p in self.params:
            if p.name == name:
                return p
        names = ", ".join(p.name for p in self.params)
        raise KeyError(f"function {self.name} has no parameter {name!r} (parameters: {names})")

    def verify(self) -> None:
        """Check SSA form: every value is defined once, before its uses, with the declared type."""
        from tessera.graph.verify import verify_function

        verify_function(self)
