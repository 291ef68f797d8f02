"""Kernels with symbolic extents: the representative size the static rules are applied to.

    n = te.var("n")
    x = te.placeholder((n, 768)); y = topi_nn.dense(x, w)       # computes take PrimExpr dims
    with symbolic.sizes(n=128):                                 # the size the tiles are chosen for
        s = schedule_matmul([y], target)                        # knobs: the rules at n = 128
    f = te.lower(s, [x, w, y])                                  # n is a kernel var: any n runs

A schedule rule (and a strategy's knob defaults) choose tiles, vector widths and the parallel
loop from sizes. Where a dim is symbolic they apply the same rule to a *representative* size:
the one given for its variable by `sizes(...)` (a caller that knows the bucket a kernel serves
passes it: a size, or a (lo, hi) bound whose upper end is taken), else `UNKNOWN_SIZE`. The
kernel itself stays correct for every size: the tiles' tails are guarded and partition_loop
peels the guards off the main loops (Note [symbolic tails]).

A dim is an int, a tir expression (te shapes: `Var`, `n * 12`) or a str (graph types: "n",
"batch*seq"); all three are understood here, so graph workloads and te shapes share one rule.

Note [unknown size]: without a hint a symbolic dim is taken as large: a size where whole tiles
dominate the work, so the rule picks the tile it picks for big static shapes and the tail is a
small share. UNKNOWN_SIZE is the default of that assumption (a knob of the caller: pass
`sizes()`), chosen as a power of two that every register tile of the rules divides evenly
into many tiles, not a measured optimum.

Note [symbolic tails]: a split of a symbolic extent has a guarded tail (`likely(io*f + ii <
n)`). partition_loop splits the outer loop at floordiv(n, f): the main part runs unguarded and
the tail keeps its guard; a vectorized loop is never split at a symbolic point, so the split
loop that carries the guard must be the serial/parallel one outside it.
"""

from __future__ import annotations

import ast
import math
import operator

from tessera.tir.expr import IntImm, Var
from tessera.topi.rules import RuleKnob

UNKNOWN_SIZE = 1 << 10  # Note [unknown size]

_SCOPES: list[dict] = []


class sizes:
    """`with sizes(n=128, w=(32, 2048)):` representative sizes of symbolic dims by name (an int,
    or a (lo, hi) bound: its upper end) for the rules run inside (schedules, strategy knobs)."""

    def __init__(self, values: dict | None = None, **kwargs):
        merged = dict(values or {}, **kwargs)
        self.values = {str(k): _size_of(k, v) for k, v in merged.items()}

    def __enter__(self):
        _SCOPES.append(self.values)
        return self

    def __exit__(self, *exc):
        _SCOPES.pop()


def _size_of(name, v) -> int:
    if isinstance(v, (tuple, list)):
        if len(v) != 2 or not all(isinstance(x, int) for x in v) or not 0 <= v[0] <= v[1]:
            raise ValueError(f"size of {name!r}: a (lo, hi) bound needs 0 <= lo <= hi, got {v}")
        v = v[1]
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise ValueError(f"size of {name!r} must be a positive int or a (lo, hi) bound, got {v!r}")
    return v


def hint(name: str) -> int:
    """The representative size of the symbolic dim `name` (Note [unknown size])."""
    for scope in reversed(_SCOPES):
        if name in scope:
            return scope[name]
    return UNKNOWN_SIZE


def is_static(dim) -> bool:
    return isinstance(dim, int) or isinstance(dim, IntImm)


def all_static(shape) -> bool:
    return all(is_static(d) for d in shape)


def representative(dim) -> int:
    """The int a rule takes for `dim`: itself when static, else its value at the hints."""
    if isinstance(dim, bool):
        raise TypeError(f"not a dim: {dim!r}")
    if isinstance(dim, int):
        return dim
    if isinstance(dim, IntImm):
        return int(dim.value)
    if isinstance(dim, str):
        return max(1, _eval_str(dim))
    return max(1, _eval_expr(dim))


def representative_shape(shape) -> list[int]:
    return [representative(d) for d in shape]


def static_or_none(dim) -> int | None:
    """The dim's value when it is static, else None."""
    if isinstance(dim, int):
        return dim
    return int(dim.value) if isinstance(dim, IntImm) else None


def _eval_expr(e) -> int:
    from tessera.arith import Analyzer
    from tessera.tir.stmt_functor import free_vars, substitute

    values = {v: IntImm(hint(v.name), v.dtype) for v in free_vars(e) if isinstance(v, Var)}
    out = Analyzer().simplify(substitute(e, values))
    if not isinstance(out, IntImm):
        raise ValueError(f"cannot evaluate the symbolic extent {e} at its representative sizes")
    return int(out.value)


_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}  # fmt: skip


def _eval_str(text: str) -> int:
    """A graph dim name ("n") or an arithmetic expression of names ("batch*seq", "w//4+1")."""
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        return hint(text)

    def ev(node) -> int:
        if isinstance(node, ast.Name):
            return hint(node.id)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return _BINOPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        raise ValueError(f"unsupported symbolic dim {text!r}")

    try:
        return ev(tree)
    except ValueError:
        return hint(text)


def product(dims):
    """The product of dims (ints or tir expressions), an int when all are static."""
    if all(isinstance(d, int) for d in dims):
        return math.prod(dims)
    out = None
    for d in dims:
        if static_or_none(d) == 1:
            continue
        out = d if out is None else out * d
    return IntImm(1, "int32") if out is None else out


# Note [size buckets]
# One tile for every size wastes most of the work where the size is far below the one the tile
# was chosen for (a 1-row product in a 6-row register block, 64 columns for 13). So a schedule
# with one symbolic variable is also built at the sizes 1, BUCKET_RATIO, BUCKET_RATIO^2, ...
# below its representative size, each bucket [r, next r) scheduled by the rules at its lower
# end r (a tile never larger than any size it serves); buckets whose schedule the rules make
# the same (equal `key`) merge, and te.lower dispatches among them at run time (te's Note
# [size dispatch]). Each bucket is one more copy of the kernel's code (compile time): ratio 4
# halved the copies but left a 4-row tile for 13 rows (2.8x the specialized kernel's time).
# A rule knob (Note [rule knobs] in topi/rules.py).
BUCKET_RATIO = RuleKnob(
    "symbolic.bucket_ratio", (2, 3, 4), 2,
    "the ratio of successive size buckets of a kernel with a symbolic dim (Note [size buckets])",
)  # fmt: skip


def dispatch_by_size(shape_vars, build, top=None, size=None):
    """A te.SizeDispatch of `build()`'s schedules over size buckets of the one var in
    `shape_vars` (Note [size buckets]), or build()'s schedule alone (no var, several vars, or
    one bucket). `build()` -> (schedule, key): the schedule by the rules at the current sizes
    and what identifies it (its knobs); `top()`: the same for the top bucket (a config's
    tile), else build(). `size`: the product of several vars that alone sizes the tiles (a
    dense's rows, batch * seq), bucketed in their place (Note [product buckets])."""
    from tessera.te.schedule import SizeDispatch

    default, key = (top or build)()
    if len(shape_vars) != 1 and size is None:
        return default
    if not shape_vars:
        return default
    v = shape_vars[0]
    rest = {u.name: 1 for u in shape_vars[1:]}
    top = hint(v.name) if size is None else min(representative(size), UNKNOWN_SIZE)
    regions = [(top, default, key)]  # (lower end, schedule, key), from the top down
    reps, ratio = [], BUCKET_RATIO.value()
    rep = 1
    while rep < top:
        reps.append(rep)
        rep *= ratio
    for rep in reversed(reps):
        with sizes({v.name: rep, **rest}):
            s, k = build()
        if k == regions[-1][2]:
            regions[-1] = (rep, regions[-1][1], k)
        else:
            regions.append((rep, s, k))
    regions.reverse()
    if len(regions) == 1:
        return default
    cases = [(regions[i + 1][0], regions[i][1]) for i in range(len(regions) - 1)]
    return SizeDispatch(v if size is None else size, cases, regions[-1][1])


# Note [product buckets]
# A dense over (batch, seq, 64) has batch * seq rows: two vars, one size. Its buckets are
# those of the product: bucket r is scheduled with the first var at r and the others at 1 (so
# the rules see r rows), and the kernel dispatches on batch * seq at run time. The buckets
# stop at UNKNOWN_SIZE (two unbounded vars would represent a million rows); above it the
# top schedule runs. 16 rows of an encoder at batch 1 ran a 6-row tile three times (1.25x the
# kernel specialized to 16 rows) before.


def shape_vars(*shapes) -> list:
    """The distinct symbolic variables of te shapes, in order of appearance."""
    from tessera.tir.stmt_functor import free_vars

    out, seen = [], set()
    for shape in shapes:
        for d in shape:
            for v in free_vars(d) if not isinstance(d, int) else ():
                if id(v) not in seen:
                    seen.add(id(v))
                    out.append(v)
    return out
