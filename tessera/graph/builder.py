"""GraphBuilder: build a graph function call by call, with types inferred and constants folded.

    b = GraphBuilder()
    x = b.param("x", (2, 3), "float32")
    y = b.call("nn.relu", b.call("add", x, b.const(np.ones((3,), "float32"))))
    f = b.finish([y])

A call whose inputs are all constants is evaluated at once with the op's numpy reference and
becomes a constant (`fold=True`): this is how the ONNX frontend folds shape computations.
Every call made gets the builder's current `span` (the source node names; the ONNX frontend sets
it to the node it converts).
"""

from __future__ import annotations

import numpy as np

from tessera.graph.ir import (
    Call,
    Constant,
    Function,
    ShapeConstant,
    TensorType,
    Value,
    parse_dtype,
)
from tessera.graph.op import Op, get_op
from tessera.tir.expr import Expr


class GraphBuilder:
    def __init__(self, fold: bool = True):
        self.fold = fold
        self.params: list[Value] = []
        self.body: list[Call] = []
        self.constants: list[Constant] = []
        self.name_hint = "v"
        self.span: tuple[str, ...] = ()  # the source node names of the calls made now
        self._used: dict[str, int] = {}

    def fresh_name(self, hint: str | None = None) -> str:
        hint = hint or self.name_hint
        k = self._used.get(hint, 0)
        self._used[hint] = k + 1
        return hint if k == 0 else f"{hint}_{k}"

    def param(self, name: str, shape, dtype) -> Value:
        v = Value(name, TensorType(tuple(shape), dtype))
        self._used.setdefault(name, 1)
        self.params.append(v)
        return v

    def const(self, array, name: str | None = None, dtype=None) -> Constant:
        array = np.asarray(array, dtype=dtype)
        c = Constant.of(self.fresh_name(name or self.name_hint), array)
        self.constants.append(c)
        return c

    def call(self, op: Op | str, *inputs: Value, **attrs) -> Value | tuple[Value, ...]:
        """Add `op(*inputs, **attrs)`; returns its output (a tuple for several outputs)."""
        op = get_op(op) if isinstance(op, str) else op
        for v in inputs:
            if not isinstance(v, Value):
                raise TypeError(f"{op.name}: inputs must be graph Values, got {type(v).__name__}")
        types = op.infer_type([v.type for v in inputs], attrs)
        foldable = all(isinstance(v, Constant) for v in inputs) and not op.has_side_effects
        foldable = foldable and all(t.is_static for t in types)  # a constant has a size
        if any(isinstance(v, ShapeConstant) for v in inputs):
            if not (self.fold and foldable):
                raise ValueError(
                    f"{op.name} reads a shape with symbolic dims as run-time data; such a shape "
                    "is supported where it folds into what takes a shape (Reshape, Expand): "
                    "give the dims sizes in shape_dict"
                )
            outs = tuple(self._folded_shape(op, inputs, attrs, types))
        elif self.fold and foldable:
            arrays = op.evaluate([v.array for v in inputs], attrs)
            outs = tuple(self._folded(op, a, t) for a, t in zip(arrays, types, strict=True))
        else:
            outs = tuple(Value(self.fresh_name(), t) for t in types)
            self.body.append(Call(op, tuple(inputs), attrs, outs, self.span))
        return outs[0] if len(outs) == 1 else outs

    def _folded_shape(self, op: Op, inputs, attrs, types) -> list[Constant]:
        """A call over shape constants with symbolic dims, folded by its numpy reference on
        object arrays (ints and dim expressions); an integer cast keeps the dims."""
        from tessera.graph.dims import simplify_dim

        if op.name == "cast":
            if np.dtype(types[0].dtype.numpy_name).kind not in "iu":
                raise ValueError(f"cast of a shape with symbolic dims to {types[0].dtype}")
            arrays = [inputs[0].array]
        else:
            arrays = op.evaluate([v.array for v in inputs], attrs)
        outs = []
        for a, t in zip(arrays, types, strict=True):
            a = np.asarray(a, dtype=object)
            if a.shape != t.shape:
                raise TypeError(f"{op.name}: reference gave {list(a.shape)}, type rule says {t}")
            flat = [simplify_dim(x) if isinstance(x, Expr) else x for x in a.reshape(-1)]
            a = np.array(flat + [None], dtype=object)[:-1].reshape(a.shape)
            if all(not isinstance(x, Expr) for x in flat):
                outs.append(self.const(a.astype(t.dtype.numpy_name)))
                continue
            c = ShapeConstant(self.fresh_name(), t, a)
            self.constants.append(c)
            outs.append(c)
        return outs

    def _folded(self, op: Op, array: np.ndarray, t: TensorType) -> Constant:
        array = np.asarray(array)
        # bfloat16 values are ml_dtypes' bfloat16 (not their uint16 storage)
        if array.shape != t.shape or parse_dtype(array.dtype) != t.dtype:
            raise TypeError(
                f"{op.name}: reference gave {array.dtype}{list(array.shape)}, type rule says {t}"
            )
        return self.const(array)

    def finish(self, outputs, name: str = "main", names: dict[int, str] | None = None) -> Function:
        """The function returning `outputs`. `names` maps id(value) to a preferred name."""
        used = {id(v) for call in self.body for v in call.inputs} | {id(v) for v in outputs}
        constants = [c for c in self.constants if id(c) in used]
        return rename_values(
            Function(name, tuple(self.params), tuple(self.body), tuple(outputs), tuple(constants)),
            names or {},
        )


def rename_values(func: Function, names: dict[int, str]) -> Function:
    """Give every value a unique name, preferring `names[id(value)]`; parameters keep theirs."""
    taken = {p.name for p in func.params}
    mapping: dict[int, Value] = {id(p): p for p in func.params}

    def renamed(v: Value) -> Value:
        base = names.get(id(v), v.name)
        name, k = base, 0
        while name in taken:
            k += 1
            name = f"{base}_{k}"
        taken.add(name)
        if name == v.name:
            new = v
        elif isinstance(v, Constant):
            new = Constant(name, v.type, v.data)
        else:
            new = Value(name, v.type)
        mapping[id(v)] = new
        return new

    # Preferred names first, so a generated name never takes a name the caller asked for.
    preferred = [v for v in _defined(func) if id(v) in names]
    for v in preferred:
        renamed(v)
    for v in _defined(func):
        if id(v) not in mapping:
            renamed(v)
    constants = tuple(mapping[id(c)] for c in func.constants)
    body = tuple(
        Call(
            c.op,
            tuple(mapping.get(id(v), v) for v in c.inputs),
            c.attrs,
            tuple(mapping[id(v)] for v in c.outputs),
            c.span,
        )
        for c in func.body
    )
    outputs = tuple(mapping.get(id(v), v) for v in func.outputs)
    return Function(func.name, func.params, body, outputs, constants)


def _defined(func: Function):
    yield from func.constants
    for call in func.body:
        yield from call.outputs
