"""Helpers shared by the op definitions: broadcasting, dtype checks, attribute checks."""

from __future__ import annotations

from tessera.graph.ir import TensorType
from tessera.graph.op import normalize_axis, type_error

__all__ = ["broadcast_shapes", "same_dtype", "normalize_axis", "type_error", "normalize_axes"]


def broadcast_shapes(op: str, *shapes) -> tuple:
    """numpy broadcasting of static (int) or symbolic (str) dims."""
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(ndim):
        dims = [s[len(s) - ndim + i] for s in shapes if len(s) - ndim + i >= 0]
        dim = 1
        for d in dims:
            if d == 1 or d == dim:
                continue
            if dim == 1:
                dim = d
            else:
                shown = " and ".join(str(list(s)) for s in shapes)
                raise type_error(op, f"shapes {shown} do not broadcast")
        out.append(dim)
    return tuple(out)


def same_dtype(op: str, *types: TensorType):
    dtypes = {t.dtype for t in types}
    if len(dtypes) > 1:
        shown = ", ".join(str(t) for t in types)
        raise type_error(op, f"inputs must share one dtype, got {shown}")
    return types[0].dtype


def normalize_axes(op: str, axes, ndim: int) -> tuple[int, ...]:
    out = tuple(normalize_axis(op, a, ndim) for a in axes)
    if len(set(out)) != len(out):
        raise type_error(op, f"repeated axis in {list(axes)}")
    return out


def require_float(op: str, t: TensorType):
    if not t.dtype.is_float:
        raise type_error(op, f"expects a floating-point tensor, got {t}")


def require_rank(op: str, t: TensorType, ranks, what: str = "input"):
    if t.ndim not in ranks:
        raise type_error(op, f"{what} must have rank {' or '.join(map(str, ranks))}, got {t}")
