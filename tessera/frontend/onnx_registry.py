"""The ONNX converter registry and the context a converter works in.

    @onnx_op("LeakyRelu")
    def leaky_relu(b, X, *, alpha=0.01):
        return b.call("nn.leaky_relu", X, alpha=alpha)

A converter takes the node's inputs positionally (None for a missing optional input) and its
attributes as keywords, named and defaulted exactly as the ONNX spec gives them. `since` picks
the version: a node of opset N uses the converter with the largest `since` <= N. Converters
return a Value or a tuple of Values (one per node output they define).
"""

from __future__ import annotations

import numpy as np

from tessera.graph.builder import GraphBuilder
from tessera.graph.ir import Constant, Value
from tessera.graph.op import get_op
from tessera.tir.expr import Expr
from tessera.transform.check_limits import check_tensor

# (domain, op_type) -> [(since, converter)], sorted by since
_CONVERTERS: dict[tuple[str, str], list[tuple[int, object]]] = {}


def onnx_op(op_type: str, since: int = 1, domain: str = ""):
    """Register a converter for ONNX `op_type` from opset `since` on."""

    def register(fn):
        entries = _CONVERTERS.setdefault((domain, op_type), [])
        entries.append((since, fn))
        entries.sort(key=lambda e: e[0])
        return fn

    return register


def find_converter(domain: str, op_type: str, opset: int):
    """The converter for a node of this opset, or None."""
    best = None
    for since, fn in _CONVERTERS.get((domain, op_type), ()):
        if since <= opset:
            best = fn
    return best


def supported_ops(domain: str = "") -> list[str]:
    return sorted(op for d, op in _CONVERTERS if d == domain)


class NodeError(ValueError):
    """A problem with one node's inputs or attributes (the frontend adds the node's name)."""


def value_dtype(dtype):
    """The numpy dtype that holds values of `dtype` (bfloat16: ml_dtypes' type, not its uint16
    storage, so that 0.35 stays 0.35)."""
    if dtype.code == "bfloat":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return dtype.dtype


def _is_param(b: GraphBuilder, v: Value) -> bool:
    return any(v is p for p in b.params)


class Stream:
    """A value made on first use: the stream a scope's random ops read (Note [random streams]
    in topi/philox.py), so a scope without random ops adds no input and no op."""

    def __init__(self, make):
        self._make, self._value = make, None

    def value(self) -> Value:
        if self._value is None:
            self._value = self._make()
        return self._value


class ConvertContext(GraphBuilder):
    """A GraphBuilder plus what converters need to know about the node being converted."""

    def __init__(self):
        super().__init__(fold=True)
        self.opset = 0
        self.num_outputs = 1
        self.node_name = ""
        self.env: dict = {}  # ONNX name -> value in the scope of the node being converted
        self.convert_subgraph = None  # (GraphProto, {input name: Value}) -> [Value], by from_onnx
        # (GraphProto, [(shape, dtype)], [outer name], name) -> Function, by from_onnx
        self.convert_function = None
        # id(value) -> why its rows past a run-time count are unspecified (a Loop's scan output
        # when the loop may stop early): such a value may only be a graph output
        self.partial_rows: dict[int, str] = {}
        # the run counter random ops read (Note [random streams] in topi/philox.py): made on
        # first use; a subgraph function or an unrolled step sets its own
        self.stream = Stream(self._model_counter)

    def _model_counter(self) -> Value:
        """The model's run counter input, added once, after the model's inputs."""
        from tessera.runtime.run_counter import RUN_COUNTER_INPUT

        found = [p for p in self.params if p.name == RUN_COUNTER_INPUT]
        return found[0] if found else self.param(RUN_COUNTER_INPUT, (), "int64")

    def run_counter(self) -> Value:
        """The int64 stream the random ops of this scope read: the model's run counter (Note
        [random call counter] in runtime/run_counter.py), or in a loop body or unrolled step
        that counter folded with the iteration (Note [random streams] in topi/philox.py)."""
        return self.stream.value()

    def step_stream(self, step) -> Stream:
        """The stream of iteration `step` (an int64 scalar Value or an int) of this scope."""
        parent = self.stream

        def folded():
            i = step if isinstance(step, Value) else self.const(np.int64(step))
            return self.call("random_fold_in", parent.value(), i)

        return Stream(folded)

    def param(self, name: str, shape, dtype) -> Value:
        v = super().param(name, shape, dtype)
        check_tensor(v.type, f"input {name!r}")
        return v

    def call(self, op, *inputs, **attrs):
        """GraphBuilder.call, after checking the size of what it makes: a constant would be
        folded at once with numpy (Note: check_limits)."""
        op = get_op(op) if isinstance(op, str) else op
        if all(isinstance(v, Value) for v in inputs):
            for t in op.infer_type([v.type for v in inputs], attrs):
                check_tensor(t, f"the output of {op.name}")
        return super().call(op, *inputs, **attrs)

    def known(self, v: Value | None, what: str) -> np.ndarray:
        """The value of an input that must be known when converting (a shape, axes, pads)."""
        if v is None:
            raise NodeError(f"input {what!r} is missing")
        if not isinstance(v, Constant):
            # Naming the graph input lets a caller bind it (from_onnx's input_values) and retry.
            source = f" (it is the graph input {v.name!r})" if _is_param(self, v) else ""
            raise NodeError(
                f"input {what!r} must be a constant (computable from shapes and initializers); "
                f"data-dependent shapes are not supported{source}"
            )
        return v.array

    def known_or(self, v: Value | None, default, what: str):
        return default if v is None else self.known(v, what)

    def shape_const(self, dims) -> Constant:
        """The int64 shape `dims` (ints and symbolic dims): a ShapeConstant, or a plain
        constant when every dim is an int."""
        from tessera.graph.ir import ShapeConstant, TensorType

        dims = np.asarray(dims, dtype=object)
        if all(isinstance(d, int | np.integer) for d in dims.reshape(-1)):
            return self.const(dims.astype(np.int64))
        c = ShapeConstant(self.fresh_name(), TensorType(dims.shape, "int64"), dims)
        self.constants.append(c)
        return c

    def scalar(self, value, like: Value) -> Constant:
        """A scalar constant of the dtype of `like`."""
        return self.const(np.asarray(value, dtype=value_dtype(like.type.dtype)))

    def reshape(self, x: Value, shape) -> Value:
        shape = tuple(d if isinstance(d, Expr) else int(d) for d in shape)
        return x if shape == x.type.shape else self.call("reshape", x, newshape=shape)

    def shape_of(self, x: Value, symbolic: bool = False) -> tuple:
        """x's shape; with `symbolic`, its dims may be symbolic (Note [symbolic dims] in
        graph/dims.py), which the converter then handles; else they must be static."""
        if not x.type.is_static and not symbolic:
            dims = ", ".join(str(d) for d in x.type.shape if not isinstance(d, int))
            raise NodeError(
                f"the shape of %{x.name} ({x.type}) has the symbolic dim(s) {dims}, which this "
                "op's conversion cannot take yet: give them sizes in shape_dict"
            )
        return x.type.shape
