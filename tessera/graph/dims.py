"""Symbolic dims of graph types: the model's dim variables, their bounds, simplification, and
the plain-data form of a shape expression that an executor plan carries.

    batch = dim_var("batch", 1, 16)         # one tir.Var per dynamic dim name of a model
    TensorType((batch, 64), "float32")      # f32[batch, 64]
    simplify_dim(batch * 4 // 4)            # batch
    dim_to_json(batch * 64 + 1)             # ["+", ["*", "batch", 64], 1]

Note [symbolic dims]
A dynamic dim of a model (an ONNX dim_param) is a `tir.Var` (int32, like te's size vars), one per
distinct name, so equal names share a var. A dim of a graph type is an int or an integer
expression over these vars (PrimExpr), simplified with `tessera.arith` knowing that each var lies
in its bounds (>= 0 always); an expression that simplifies to a constant is that int. The
bounds (`dim_bounds`) are kept here, keyed by the var (weakly: a var lives as long as the types
that use it); `dim_var` sets them. Kernels take the vars through the calling convention (their
`vars`), and the executor plan carries every shape as `dim_to_json` data, evaluated by the
runtime (runtime/shape_expr.py) when the inputs' shapes bind the vars.
"""

from __future__ import annotations

import weakref

from tessera import tir
from tessera.tir.expr import Expr, IntImm, Var

_BOUNDS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def dim_var(name: str, lo: int = 1, hi: int | None = None) -> Var:
    """A new dim variable `name` with bounds lo <= value <= hi (hi None: unbounded)."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"a dynamic dim's name must be an identifier, got {name!r}")
    lo = int(lo)
    if lo < 0 or (hi is not None and int(hi) < lo):
        raise ValueError(f"dim {name!r}: bounds [{lo}, {hi}] are not 0 <= min <= max")
    v = Var(name, "int32")
    _BOUNDS[v] = (lo, None if hi is None else int(hi))
    return v


def dim_bounds(v: Var) -> tuple[int, int | None]:
    """(min, max or None) of a dim variable; a var made elsewhere is >= 0, unbounded."""
    return _BOUNDS.get(v, (0, None))


# Note [representative sizes]: a graph pass that asks an op's strategy for a layout (pack_weights,
# alter_layout) asks it for the call at representative sizes: each symbolic dim at its upper
# bound when it has one, else at UNBOUNDED_SIZE (a size where whole tiles dominate the work, as
# for big static shapes; not a measured optimum). The layout it answers (packed panels, channel
# blocks) depends on the static dims only; the kernel takes every size.
UNBOUNDED_SIZE = 1 << 10


def representative(d) -> int:
    """A dim at its representative size (Note [representative sizes])."""
    if isinstance(d, int):
        return d
    values = {}
    for v in dim_vars([d]):
        hi = dim_bounds(v)[1]
        size = hi if hi is not None else max(UNBOUNDED_SIZE, dim_bounds(v)[0])
        values[v] = tir.const(size, v.dtype)
    from tessera.tir.stmt_functor import substitute

    out = simplify_dim(substitute(d, values))
    return out if isinstance(out, int) else UNBOUNDED_SIZE


def is_symbolic(d) -> bool:
    return isinstance(d, Expr)


def dim_vars(shapes) -> list[Var]:
    """The dim variables in `shapes` (an iterable of shapes or dims), in order of first use."""
    found: dict[int, Var] = {}

    def visit(e):
        if isinstance(e, Var):
            found.setdefault(id(e), e)
        elif isinstance(e, Expr):
            for f in getattr(e, "__dataclass_fields__", {}):
                visit(getattr(e, f))
        elif isinstance(e, tuple | list):
            for x in e:
                visit(x)

    visit(list(shapes))
    return list(found.values())


def simplify_dim(e):
    """An integer dim expression simplified under its vars' bounds: an int when constant."""
    if isinstance(e, IntImm):
        return int(e.value)
    if not isinstance(e, Expr):
        return int(e)
    if not e.dtype.is_int:
        raise TypeError(f"a dim must be an integer expression, got {e} of {e.dtype}")
    from tessera.arith import Analyzer

    an = Analyzer()
    for v in dim_vars([e]):
        lo, hi = dim_bounds(v)
        an.bind(v, (lo, (hi if hi is not None else 1 << 30) + 1))
    out = _canonical(an.simplify(e))
    return int(out.value) if isinstance(out, IntImm) else out


# A dim made of +, - and * is a polynomial: {monomial (sorted atoms): coefficient}, whose atoms
# are the vars and any other subexpression (a floordiv that does not divide exactly, a min),
# keyed by their text (var names are unique in a model). Its canonical form (monomials in order)
# makes batch*seq and seq*batch the same dim, and an exact division (w // 2 * 64 // (w // 2))
# a polynomial again.


def _poly(e, atoms: dict) -> dict | None:
    if isinstance(e, IntImm):
        return {(): int(e.value)} if e.value else {}
    if isinstance(e, tir.Add | tir.Sub | tir.Mul):
        a, b = _poly(e.a, atoms), _poly(e.b, atoms)
        if a is None or b is None:
            return None
        if isinstance(e, tir.Mul):
            out: dict = {}
            for ma, ca in a.items():
                for mb, cb in b.items():
                    m = tuple(sorted(ma + mb))
                    out[m] = out.get(m, 0) + ca * cb
        else:
            out = dict(a)
            sign = 1 if isinstance(e, tir.Add) else -1
            for m, c in b.items():
                out[m] = out.get(m, 0) + sign * c
        return {m: c for m, c in out.items() if c}
    if isinstance(e, tir.FloorDiv):
        q = _exact_division(_poly(e.a, atoms), _poly(e.b, atoms))
        if q is not None:
            return q
    if not e.dtype.is_int:
        return None
    key = (str(e), type(e).__name__)
    atoms.setdefault(key, e)
    return {(key,): 1}


def _exact_division(a: dict | None, b: dict | None) -> dict | None:
    """a / b when b is one monomial that divides every monomial of a, else None."""
    if a is None or b is None or len(b) != 1:
        return None
    ((mb, cb),) = b.items()
    q = {}
    for m, c in a.items():
        rest = list(m)
        for x in mb:
            if x not in rest:
                return None
            rest.remove(x)
        if c % cb:
            return None
        q[tuple(rest)] = c // cb
    return q


def _from_poly(p: dict, atoms: dict) -> Expr:
    out = None
    for m in sorted(p, key=lambda m: (-len(m), m)):
        c = p[m] if out is None else abs(p[m])  # a later negative term is subtracted
        term = tir.const(c, "int32") if not m or c not in (1, -1) else None
        for key in m:
            term = atoms[key] if term is None else term * atoms[key]
        if m and c == -1:
            term = tir.const(0, "int32") - term
        out = term if out is None else (out + term if p[m] > 0 else out - term)
    return tir.const(0, "int32") if out is None else out


def _canonical(e):
    atoms: dict = {}
    p = _poly(e, atoms)
    return e if p is None else _from_poly(p, atoms)


def lower_bound(e) -> int | float:
    """The smallest value a dim takes over its vars' bounds (an int's own value; -inf when
    unknown): type rules check a size that must not be negative with it."""
    if isinstance(e, int):
        return e
    from tessera.arith import Analyzer

    an = Analyzer()
    for v in dim_vars([e]):
        lo, hi = dim_bounds(v)
        an.bind(v, (lo, (hi if hi is not None else 1 << 30) + 1))
    return an.const_int_bound(e)[0]


def same_dim(a, b) -> bool:
    """Whether two dims are provably equal (ints, or expressions equal after simplifying)."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    d = simplify_dim(_expr(a) - _expr(b))
    return isinstance(d, int) and d == 0


def _expr(d) -> Expr:
    return d if isinstance(d, Expr) else tir.const(int(d), "int32")


def num_elements(shape):
    """The product of the dims: an int, or a simplified expression."""
    out = 1
    for d in shape:
        out = out * d
    return simplify_dim(out) if isinstance(out, Expr) else int(out)


_JSON_OPS = {
    tir.Add: "+",
    tir.Sub: "-",
    tir.Mul: "*",
    tir.FloorDiv: "//",
    tir.FloorMod: "%",
    tir.Min: "min",
    tir.Max: "max",
}


def show_dim(d) -> str:
    """A dim as the user wrote its names: `batch`, `batch*seq`, `floordiv(width, 2)`."""
    if isinstance(d, int | str):
        return str(d)
    if isinstance(d, IntImm):
        return str(d.value)
    if isinstance(d, Var):
        return d.name
    try:
        e = dim_to_json(d)
    except ValueError:
        return str(d)
    return _show_json(e)


def _show_json(e, parent: str = "") -> str:
    if not isinstance(e, list):
        return str(e)
    op, a, b = e
    if op in ("min", "max", "//", "%"):
        name = {"//": "floordiv", "%": "floormod"}.get(op, op)
        return f"{name}({_show_json(a)}, {_show_json(b)})"
    if op == "*":
        return f"{_show_json(a, '*')}*{_show_json(b, '*')}"
    text = f"{_show_json(a, '+')}{op}{_show_json(b, op)}"
    return f"({text})" if parent in ("*", "-") else text


def dim_to_json(d):
    """A dim as plain data: an int, a var's name, or [op, a, b] (op in + - * // % min max)."""
    if isinstance(d, int):
        return d
    if isinstance(d, IntImm):
        return int(d.value)
    if isinstance(d, Var):
        return d.name
    if isinstance(d, tir.Cast) and d.dtype.is_int:
        return dim_to_json(d.value)
    op = _JSON_OPS.get(type(d))
    if op is None:
        raise ValueError(f"the shape expression {d} cannot be evaluated by the executor")
    return [op, dim_to_json(d.a), dim_to_json(d.b)]


def representative_call(call):
    """`call` with its symbolic values at representative sizes (Note [representative sizes]):
    what a pass gives a strategy to ask for a layout. Constants and static values stay."""
    from dataclasses import replace

    from tessera.graph.ir import Value

    def at_size(v):
        if v.type.is_static:
            return v
        shape = tuple(representative(d) for d in v.type.shape)
        return Value(v.name, v.type.with_shape(shape))

    inputs = tuple(at_size(v) for v in call.inputs)
    outputs = tuple(at_size(v) for v in call.outputs)
    if all(a is b for a, b in zip((*inputs, *outputs), (*call.inputs, *call.outputs), strict=True)):
        return call
    return replace(call, inputs=inputs, outputs=outputs)


def lowers_symbolic(call, target) -> bool:
    """Whether `call`, whose dims are symbolic, lowers for `target` (its op's compute and
    schedule rules take symbolic extents): a graph pass asks before it rewrites a symbolic call
    into a form (packed weights, channel blocks) whose kernel may need static shapes. The call
    is lowered alone, without codegen; the answer is kept per op, attributes and types."""
    from tessera.graph.ir import Constant, Function

    params = tuple(v for v in call.inputs if not isinstance(v, Constant))
    consts = tuple(dict.fromkeys(v for v in call.inputs if isinstance(v, Constant)))
    key = (
        call.op.name,
        str(call.attrs),
        tuple(str(v.type) for v in call.inputs),
        tuple(v.type.dtype for v in consts),
        str(target),
    )
    if key not in _LOWERS:
        from tessera.graph_build.lower_group import lower_group

        probe = Function("probe", params, (call,), call.outputs, consts)
        try:
            lower_group(probe, target)
            _LOWERS[key] = True
        except Exception:  # noqa: BLE001 -- any failure means: keep the call as it is
            _LOWERS[key] = False
    return _LOWERS[key]


_LOWERS: dict = {}
