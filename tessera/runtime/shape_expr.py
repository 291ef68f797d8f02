"""Symbolic shapes at run time: a dynamic executor plan's dims bound from the inputs' shapes,
its shapes evaluated, and its arena laid out for those sizes (Note [dynamic plan]).

    dyn = DynamicPlan(plan)
    values = dyn.bind({"x": (3, 64)})         # {"batch": 3}, or a ValueError naming the dim
    layout = dyn.layout(values)               # Layout: the table, the arena's size, output shapes

Note [dynamic plan]
A model compiled with symbolic dims (Note [symbolic dims] in graph/dims.py) has a plan whose
input and output shapes hold dims that are ints, names of dim variables, or expressions
[op, a, b] (op in + - * // % min max) over them, and a "dynamic" section:

    "dynamic": {"dims": [{"name", "min", "max"}],            # max None: unbounded
                "values": [{"nbytes": expr, "start": i, "end": j}],   # the arena's values
                "workspaces": [offset, ...],                  # Note [workspaces]
                "workspace_nbytes": int}

Each call binds the dims from the inputs' shapes (each within its bounds, one value per name),
then lays out the arena for those sizes: a table of int64 at its start (the dims' values, then
each value's byte offset, then each workspace's), then the values placed greedy by size (Note
[greedy by size] in transform/plan_memory.py: the largest first, each at the lowest offset
where it meets no value alive at the same time), then the region the calls' workspaces share.
A call's argument ["dyn", t] is `arena + table[t]`; a var ["dyn", t] is `table[t]`; so the
native entry reads everything that depends on the sizes from the arena. The executor grows the
arena when a size needs more and keeps it while it fits.

This module imports nothing from the compiler.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ALIGNMENT = 64
_OPS = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "//": lambda a, b: a // b if b else 0,
    "%": lambda a, b: a % b if b else 0,
    "min": min,
    "max": max,
}


def evaluate(expr, values: dict[str, int]) -> int:
    """An int, a dim's name or [op, a, b] evaluated with the dims' `values`."""
    if isinstance(expr, bool):
        raise ValueError(f"not a shape expression: {expr!r}")
    if isinstance(expr, int):
        return expr
    if isinstance(expr, str):
        if expr not in values:
            raise ValueError(f"the shape expression names the unknown dim {expr!r}")
        return int(values[expr])
    if isinstance(expr, list) and len(expr) == 3 and expr[0] in _OPS:
        return int(_OPS[expr[0]](evaluate(expr[1], values), evaluate(expr[2], values)))
    raise ValueError(f"not a shape expression: {expr!r}")


def is_expr(expr) -> bool:
    """Whether `expr` is a well-formed shape expression (for plan checks)."""
    if isinstance(expr, bool):
        return False
    if isinstance(expr, int | str):
        return True
    return (
        isinstance(expr, list)
        and len(expr) == 3
        and expr[0] in _OPS
        and is_expr(expr[1])
        and is_expr(expr[2])
    )


def show_shape(shape) -> str:
    return "(" + ", ".join(_show(d) for d in shape) + ")"


def _show(e) -> str:
    if isinstance(e, list):
        op, a, b = e
        return (
            f"{op}({_show(a)}, {_show(b)})"
            if op in ("min", "max")
            else f"({_show(a)}{op}{_show(b)})"
        )
    return str(e)


def _align(n: int) -> int:
    return -(-n // ALIGNMENT) * ALIGNMENT


def first_fit(sizes: list[int], lifetimes: list[tuple[int, int]]) -> list[int]:
    """Offsets (64-byte aligned) of values of these byte sizes and (first, last) call indices:
    greedy by size, first fit (Note [greedy by size] in transform/plan_memory.py)."""
    order = sorted(range(len(sizes)), key=lambda k: (-sizes[k], lifetimes[k][0], k))
    placed: list[tuple[int, int, int, int]] = []  # (offset, end, start, last)
    offsets = [0] * len(sizes)
    for k in order:
        start, last = lifetimes[k]
        busy = sorted((o, e) for o, e, s, l in placed if s <= last and start <= l)
        offset = 0
        for begin, end in busy:
            if offset + sizes[k] <= begin:
                break
            offset = max(offset, _align(end))
        offsets[k] = offset
        placed.append((offset, offset + sizes[k], start, last))
    return offsets


@dataclass(frozen=True)
class Layout:
    """The arena of one binding: its table (int64), its size, and the outputs' shapes."""

    table: np.ndarray
    arena_nbytes: int
    output_shapes: tuple[tuple[int, ...], ...]
    input_shapes: tuple[tuple[int, ...], ...]


class DynamicPlan:
    """The symbolic part of an executor plan (Note [dynamic plan])."""

    def __init__(self, plan: dict):
        dyn = plan["dynamic"]
        self.dims = [(d["name"], int(d["min"]), d["max"]) for d in dyn["dims"]]
        self.bounds = {name: (lo, hi) for name, lo, hi in self.dims}
        self.inputs = [(i["name"], list(i["shape"])) for i in plan["inputs"]]
        self.outputs = [list(o["shape"]) for o in plan["outputs"]]
        self.values = [(v["nbytes"], int(v["start"]), int(v["end"])) for v in dyn["values"]]
        self.workspaces = [int(w) for w in dyn["workspaces"]]
        self.workspace_nbytes = int(dyn["workspace_nbytes"])
        self.table_slots = len(self.dims) + len(self.values) + len(self.workspaces)
        self._cache: dict[tuple, Layout] = {}

    def check_input(self, name: str, shape: tuple) -> None:
        """A ValueError when `shape` cannot be input `name`'s: its rank, a static dim, or a
        symbolic dim out of its bounds."""
        spec = dict(self.inputs)[name]
        if len(shape) != len(spec):
            raise ValueError(
                f"input {name!r}: expected a shape {show_shape(spec)} ({len(spec)} dims), "
                f"got {tuple(shape)}"
            )
        for i, (d, n) in enumerate(zip(spec, shape, strict=True)):
            if isinstance(d, int) and d != n:
                raise ValueError(
                    f"input {name!r}: expected a shape {show_shape(spec)}, got {tuple(shape)} "
                    f"(dim {i} must be {d})"
                )
            if isinstance(d, str):
                lo, hi = self.bounds[d]
                if n < lo or (hi is not None and n > hi):
                    raise ValueError(
                        f"input {name!r}: dim {i} ({d!r}) = {n} is out of its bounds "
                        f"[{lo}, {'unbounded' if hi is None else hi}] (the model was compiled "
                        f"for {d} in that range)"
                    )

    def bind(self, shapes: dict[str, tuple]) -> dict[str, int]:
        """The dims' values from the inputs' shapes, or a ValueError naming the dim."""
        values: dict[str, int] = {}
        given: dict[str, str] = {}
        for name, spec in self.inputs:
            shape = tuple(shapes[name])
            self.check_input(name, shape)
            for i, (d, n) in enumerate(zip(spec, shape, strict=True)):
                if not isinstance(d, str):
                    continue
                if d in values and values[d] != n:
                    raise ValueError(
                        f"input {name!r}: dim {i} ({d!r}) = {n}, but {given[d]} gave "
                        f"{d} = {values[d]}"
                    )
                values.setdefault(d, n)
                given.setdefault(d, f"input {name!r}")
        missing = [d for d, _, _ in self.dims if d not in values]
        if missing:
            raise ValueError(f"no input's shape gives the dim(s) {', '.join(missing)}")
        for name, spec in self.inputs:  # dims that are expressions of the others
            for i, (d, n) in enumerate(zip(spec, shapes[name], strict=True)):
                if isinstance(d, list) and evaluate(d, values) != n:
                    raise ValueError(
                        f"input {name!r}: dim {i} must be {_show(d)} = {evaluate(d, values)} "
                        f"with {values}, got {n}"
                    )
        return values

    def layout(self, values: dict[str, int]) -> Layout:
        """The arena's table and size, and the outputs' shapes, for these dims (cached)."""
        key = tuple(values[d] for d, _, _ in self.dims)
        found = self._cache.get(key)
        if found is not None:
            return found
        sizes = [_align(max(evaluate(nb, values), 1)) for nb, _, _ in self.values]
        base = _align(8 * max(self.table_slots, 1))
        offsets = [base + o for o in first_fit(sizes, [(s, e) for _, s, e in self.values])]
        end = max([o + n for o, n in zip(offsets, sizes, strict=True)] + [base])
        end = _align(end)
        work = [end + rel for rel in self.workspaces]
        end += self.workspace_nbytes
        table = np.array([*key, *offsets, *work] or [0], dtype=np.int64)
        layout = Layout(
            table,
            end,
            tuple(tuple(evaluate(d, values) for d in s) for s in self.outputs),
            tuple(tuple(evaluate(d, values) for d in s) for _, s in self.inputs),
        )
        if len(self._cache) >= 64:  # sizes seen recently; a long tail is recomputed
            self._cache.pop(next(iter(self._cache)))
        self._cache[key] = layout
        return layout
