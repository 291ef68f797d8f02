"""Tensors and the operations that produce them: placeholders and computes.

A `Tensor` is output `value_index` of an `Operation`. Indexing a tensor builds a `ProducerLoad`
(a te-level expression that `te.lower` turns into a `tir.BufferLoad`):

    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2, name="B")    # B.op.axis == (IterVar(i, [0, n)),)
    k = te.reduce_axis((0, n), name="k")

Operations and tensors are identities (like `tir.Var`): two computes with the same body differ.
A ComputeOp's body is a tuple (one expr per output); a reduction is the top-level expr.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field

from tessera.ir.dtype import DType, int32
from tessera.ir.node import Visitor
from tessera.tir.expr import (
    Expr,
    IntImm,
    IterVar,
    IterVarType,
    Range,
    Reduce,
    Var,
    convert,
)

# ---------------------------------------------------------------------------------------------
# expressions


@dataclass(frozen=True, eq=False)
class ProducerLoad(Expr):
    """tensor[indices] inside a compute body; lowered to a BufferLoad (never reaches tir)."""

    producer: Tensor
    indices: tuple[Expr, ...]

    def __post_init__(self):
        object.__setattr__(self, "indices", tuple(convert(i) for i in self.indices))

    @property
    def dtype(self) -> DType:
        return self.producer.dtype


# ---------------------------------------------------------------------------------------------
# tensors


def _index_list(indices) -> tuple[Expr, ...]:
    if not isinstance(indices, tuple):
        indices = (indices,)
    out = []
    for ix in indices:
        if isinstance(ix, IterVar):
            ix = ix.var
        if isinstance(ix, slice):
            raise TypeError("te tensors cannot be sliced with ':'; index every dimension")
        out.append(convert(ix))
    return tuple(out)


class _Indexable:
    def _load(self, indices: tuple[Expr, ...]):
        raise NotImplementedError

    def __getitem__(self, indices):
        return self._load(_index_list(indices))

    def __call__(self, *indices):
        return self._load(_index_list(tuple(indices)))

    # arithmetic on rank-0 tensors (TVM allows `C = te.compute((), ...); D = C + 1`)
    def __add__(self, o):
        return self.as_expr() + o

    def __radd__(self, o):
        return o + self.as_expr()

    def __sub__(self, o):
        return self.as_expr() - o

    def __rsub__(self, o):
        return o - self.as_expr()

    def __mul__(self, o):
        return self.as_expr() * o

    def __rmul__(self, o):
        return o * self.as_expr()

    def __truediv__(self, o):
        return self.as_expr() / o


@dataclass(frozen=True, eq=False)
class Tensor(_Indexable):
    """Output `value_index` of `op`, of the given shape and dtype."""

    op: Operation
    value_index: int
    shape: tuple[Expr, ...]
    dtype: DType

    @property
    def name(self) -> str:
        if self.op.num_outputs == 1:
            return self.op.name
        return f"{self.op.name}.v{self.value_index}"

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def _load(self, indices):
        if len(indices) > self.ndim:
            raise ValueError(
                f"tensor {self.name} has {self.ndim} dimensions, indexed with {len(indices)}"
            )
        if len(indices) < self.ndim:
            return TensorSlice(self, indices)
        return ProducerLoad(self, indices)

    def as_expr(self) -> Expr:
        """A rank-0 tensor used as a value."""
        if self.ndim != 0:
            raise TypeError(f"tensor {self.name} of rank {self.ndim} used as a scalar; index it")
        return ProducerLoad(self, ())

    def __repr__(self) -> str:
        dims = ", ".join(str(s) for s in self.shape) + ("," if len(self.shape) == 1 else "")
        return f"Tensor({self.name}, ({dims}), {self.dtype})"

    __str__ = __repr__


@dataclass(frozen=True, eq=False)
class TensorSlice(_Indexable):
    """A partly indexed tensor: `A[i]` of a 2-D `A`, completed by `A[i][j]`."""

    tensor: Tensor
    indices: tuple[Expr, ...]

    def _load(self, indices):
        return self.tensor._load(self.indices + indices)

    def as_expr(self) -> Expr:
        """A partly indexed tensor is not a value: say so, not "cannot make a constant"."""
        t = self.tensor
        raise TypeError(
            f"tensor {t.name} has {t.ndim} dimensions, indexed with {len(self.indices)}; "
            "index every dimension"
        )


# ---------------------------------------------------------------------------------------------
# operations


@dataclass(frozen=True, eq=False)
class Operation:
    """Base of operations. Outputs are created once, so `op.output(0) is op.output(0)`."""

    name: str

    @property
    def num_outputs(self) -> int:
        return len(self._outputs)

    def output(self, index: int) -> Tensor:
        if not 0 <= index < self.num_outputs:
            raise IndexError(f"{self.name} has {self.num_outputs} outputs, asked for {index}")
        return self._outputs[index]

    @property
    def input_tensors(self) -> tuple[Tensor, ...]:
        return ()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name})"


@dataclass(frozen=True, eq=False, repr=False)
class PlaceholderOp(Operation):
    shape: tuple[Expr, ...] = ()
    dtype: DType = DType("float", 32)

    def __post_init__(self):
        object.__setattr__(self, "_outputs", (Tensor(self, 0, self.shape, self.dtype),))


@dataclass(frozen=True, eq=False, repr=False)
class ComputeOp(Operation):
    """out[axis] = body; `reduce_axis` lists the axes of a top-level reduction."""

    tag: str = ""
    attrs: dict = field(default_factory=dict)
    axis: tuple[IterVar, ...] = ()
    reduce_axis: tuple[IterVar, ...] = ()
    body: tuple[Expr, ...] = ()

    def __post_init__(self):
        shape = tuple(iv.dom.extent for iv in self.axis)
        outs = tuple(Tensor(self, i, shape, b.dtype) for i, b in enumerate(self.body))
        object.__setattr__(self, "_outputs", outs)

    @property
    def input_tensors(self) -> tuple[Tensor, ...]:
        return input_tensors(self.body)

    @property
    def is_reduction(self) -> bool:
        return isinstance(self.body[0], Reduce)


def input_tensors(exprs) -> tuple[Tensor, ...]:
    """The tensors read by `exprs`, in order of first use."""
    found: dict[int, Tensor] = {}

    class _Reads(Visitor):
        def visit_ProducerLoad(self, node):
            found.setdefault(id(node.producer), node.producer)
            self.generic_visit(node)

    v = _Reads()
    for e in exprs:
        v.visit(e)
    return tuple(found.values())


# ---------------------------------------------------------------------------------------------
# constructors


def _shape(shape) -> tuple[Expr, ...]:
    if not isinstance(shape, (tuple, list)):
        shape = (shape,)
    out = []
    for s in shape:
        s = convert(s)
        if not s.dtype.is_integer:
            raise TypeError(f"shape dimensions must be integers, got {s} of type {s.dtype}")
        if isinstance(s, IntImm) and s.value < 0:
            raise ValueError(f"shape dimensions must not be negative, got {s.value}")
        out.append(s)
    return tuple(out)


def var(name: str = "tindex", dtype="int32") -> Var:
    """A scalar variable (a symbolic size or a scalar kernel parameter)."""
    return Var(name, DType.parse(dtype))


def size_var(name: str = "size", dtype="int32") -> Var:
    """A variable that stands for a size (non-negative); same as `var` here."""
    return Var(name, DType.parse(dtype))


def placeholder(shape, dtype="float32", name: str = "placeholder") -> Tensor:
    """An input tensor."""
    return PlaceholderOp(name, _shape(shape), DType.parse(dtype)).output(0)


def _make_range(dom) -> Range:
    if isinstance(dom, Range):
        return dom
    if isinstance(dom, (tuple, list)) and len(dom) == 2:
        lo, hi = convert(dom[0]), convert(dom[1])
        if isinstance(lo, IntImm) and isinstance(hi, IntImm) and hi.value < lo.value:
            raise ValueError(f"an axis domain (min, max) needs min <= max, got {dom!r}")
        return Range(lo, hi - lo)
    if dom is not None and not isinstance(dom, (tuple, list)):
        return Range(convert(0), convert(dom))
    raise ValueError(f"an axis domain is (min, max) or a Range, got {dom!r}")


def reduce_axis(dom, name: str = "rv") -> IterVar:
    """A reduction axis over [min, max): `te.reduce_axis((0, K), name="k")`."""
    return IterVar(_make_range(dom), Var(name, int32), IterVarType.REDUCE)


def thread_axis(dom=None, tag: str = "", name: str = "") -> IterVar:
    """A GPU thread axis: `te.thread_axis("threadIdx.x")` (or with a domain first)."""
    if isinstance(dom, str):
        tag, dom = dom, None
    if not tag:
        raise ValueError("thread_axis needs a tag such as 'threadIdx.x' or 'blockIdx.x'")
    rng = None if dom is None else _make_range(dom)
    return IterVar(rng, Var(name or tag, int32), IterVarType.THREAD, tag)


def _axis_names(fcompute, ndim: int) -> list[str]:
    try:
        params = list(inspect.signature(fcompute).parameters.values())
    except (TypeError, ValueError):
        params = []
    if any(p.kind == p.VAR_POSITIONAL for p in params) or len(params) != ndim:
        if params and not any(p.kind == p.VAR_POSITIONAL for p in params):
            raise ValueError(
                f"the compute function takes {len(params)} arguments, the shape has {ndim} dims"
            )
        return [f"i{k}" for k in range(ndim)]
    return [p.name for p in params]


def _check_reduce_at_top(name: str, body: tuple[Expr, ...]) -> None:
    class _Find(Visitor):
        def visit_Reduce(self, node):
            raise ValueError(
                f"compute {name}: a reduction (te.sum/max/min) must be the whole body, "
                "not part of a larger expression; make it a separate compute"
            )

    for e in body:
        inner = e.source + (e.condition,) if isinstance(e, Reduce) else (e,)
        for x in inner:
            _Find().visit(x)


def compute(shape, fcompute, name: str = "compute", tag: str = "", attrs=None):
    """A tensor whose element at `axis` is fcompute(*axis); a tuple result gives several."""
    shape = _shape(shape)
    names = _axis_names(fcompute, len(shape))
    axis = tuple(
        IterVar(Range(convert(0), s), Var(nm, s.dtype), IterVarType.DATA_PAR)
        for nm, s in zip(names, shape, strict=True)
    )
    result = fcompute(*[iv.var for iv in axis])
    multi = isinstance(result, (tuple, list))
    body = tuple(convert(r) for r in (result if multi else (result,)))
    if not body:
        raise ValueError(f"compute {name}: the function returned no values")
    _check_reduce_at_top(name, body)
    reduces = [b for b in body if isinstance(b, Reduce)]
    if reduces and len(reduces) != len(body):
        raise ValueError(f"compute {name}: either every output is a reduction or none is")
    if reduces and any(not _same_reduction(reduces[0], r) for r in reduces[1:]):
        raise ValueError(f"compute {name}: the outputs must come from one tuple reduction")
    red_axis = reduces[0].axis if reduces else ()
    op = ComputeOp(name, tag, dict(attrs or {}), axis, tuple(red_axis), body)
    outs = tuple(op.output(i) for i in range(op.num_outputs))
    return outs if multi else outs[0]


def _same_reduction(a: Reduce, b: Reduce) -> bool:
    return (
        a.combiner is b.combiner
        and len(a.axis) == len(b.axis)
        and all(x is y for x, y in zip(a.axis, b.axis, strict=True))
    )
