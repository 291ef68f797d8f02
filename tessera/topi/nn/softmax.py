"""softmax and log_softmax over any axis, numerically stable (the row maximum is subtracted).

    y = softmax(x, axis=-1)
    # last axis:  m = max_j x[.., j];  e = exp(x - m);  s = sum_j e[.., j];  y = e * (1 / s)
    # other axes: (m, s) = online_max_sum_j x[.., j, ..];  y = exp(x - m) / s

Note [lane split]: over the last axis each row reduction (the max, the sum) is two stages: a
partial over (rows, split) whose lane l reduces x[.., l + split * k] over k (tag
"row_partial": a schedule vectorizes l, so the partials live in vector registers and each step
is one vector op), then the row (tag "row_combine") reduces the split partials and the
n % split tail elements. `row_split` gives the split: the knob `split` of the group's config
(x86 strategy "rows"), by default the rule `default_split`: one vector for short rows (the
combine reduces every lane, serially, once per row), up to ROW_ACCUMULATORS vectors for long
rows (independent accumulators: one chain of vector adds waits on each add's latency).
Lowering computes a group with its target current (`lower_group`), so the rule takes that
target's vectors for the dtype (16 float32 lanes with AVX-512, 8 with AVX2); the strategy's
default is the same rule. Only where no CPU target is current (a GPU group, a compute outside
any build) does the split count ROW_LANES partials (16).
Measured (bench/nn_ops.py, AVX-512): 4 x 32768 rows 15% faster at 64 lanes than 16, 12 x 64
x 64 rows 2x slower at 64 lanes than 16. softmax keeps exp(x - m) in a row stage
`softmax_exp` (attrs["row_stage"]) that the row sum and the output both read: one exp per
element when a schedule computes it once per row (topi/x86/softmax.py); the generic schedule
inlines it (tag "elemwise"), so it stays correct anywhere. The maximum's identity is the lowest
finite value, not -inf, so rows holding -inf (masks) work. Every reduction records
attrs["n_outer"], the leading axes a schedule can run in parallel.

Note [online softmax]: over another axis, the row's maximum and its sum of exp(x - max) come
from one tuple reduction (tag "softmax"): combining (m1, s1) with (m2, s2) rescales the smaller
side's sum by exp(-|m1 - m2|). One pass, and the output (tag "elemwise") reads a single stage.
"""

from __future__ import annotations

import numpy as np

from tessera import te
from tessera.target import Target
from tessera.topi.rules import RuleKnob
from tessera.topi.strategy import compute_config


def _normalize_axis(axis: int, ndim: int, op: str) -> int:
    if not -ndim <= axis < max(ndim, 1):
        raise ValueError(f"{op}: axis {axis} is out of range for a tensor of rank {ndim}")
    return axis % ndim


def _combine(a, b):
    (m1, s1), (m2, s2) = a, b
    e = te.exp(te.min(m1 - m2, m2 - m1))  # exp(-|m1 - m2|), written so that it is one exp
    return te.max(m1, m2), te.select(m1 >= m2, s1 + s2 * e, s1 * e + s2)


def _lowest_finite(dtype):
    # DType.min_value is -inf for floats; -inf - -inf would make the rescaling NaN
    if str(dtype) == "bfloat16":  # numpy's finfo does not know ml_dtypes' bfloat16
        import ml_dtypes

        return te.const(float(ml_dtypes.finfo(ml_dtypes.bfloat16).min), dtype)
    return te.const(float(np.finfo(str(dtype)).min), dtype)


_max_sum = te.comm_reducer(
    _combine, lambda tm, ts: (_lowest_finite(tm), te.const(0, ts)), name="max_sum"
)


def row_max_sum(x: te.Tensor, axis: int, tag: str):
    """(max over axis, sum over axis of exp(x - max)), shaped like x without `axis`."""
    shape = [d for k, d in enumerate(x.shape) if k != axis]
    k = te.reduce_axis((0, x.shape[axis]), name="k")

    def f(*i):
        v = x(*i[:axis], k, *i[axis:])
        # An element's own term is exp(v - v): 1, except NaN for +inf, where the two-pass
        # formula's exp(inf - inf) makes the whole slice NaN (numpy, ONNX Runtime). Taking 1
        # there gave -inf and 0 instead.
        own = te.select(v == te.const(float("inf"), x.dtype), te.const(float("nan"), x.dtype),
                        te.const(1, x.dtype))  # fmt: skip
        return _max_sum((v, own), axis=k)

    return te.compute(shape, f, name=f"{tag}_max_sum", tag=tag, attrs={"n_outer": axis})


# The rule's parameters are rule knobs (Note [rule knobs] in topi/rules.py); the split it
# chooses is knob `split` of the x86 "rows" implementation.
ROW_ACCUMULATORS = RuleKnob(
    "rows.accumulators", (1, 2, 4, 8), 4, "vectors in flight for long rows (Note [lane split])"
)
ROW_LANES = 16  # partials of a row where no CPU target is current (GPU groups, no build)
LONG_ROW_STEPS = RuleKnob(
    "rows.long_row_steps", (8, 16, 32, 64), 32,
    "vector steps per accumulator below which another accumulator does not pay",
)  # fmt: skip


def row_accumulators(n: int, lanes: int) -> int:
    """The rule for the vectors of `lanes` a row of n elements is reduced in (Note [lane
    split]): one, and one more per LONG_ROW_STEPS vector steps, up to ROW_ACCUMULATORS."""
    return max(1, min(ROW_ACCUMULATORS.value(), n // (lanes * LONG_ROW_STEPS.value())))


def default_split(n, lanes: int) -> int:
    """The rule's split of a row of n elements into vectors of `lanes` (Note [lane split]);
    a symbolic n (an expression or a graph dim's text) gets one vector (Note [symbolic row
    split])."""
    if not isinstance(n, int):
        return lanes
    return lanes * row_accumulators(n, lanes)


# Note [symbolic row split]
# Over a symbolic row length (attention's softmax over seq) the split is one vector, whatever
# the representative size: the combine reduces split + n % split elements serially per row,
# so a split chosen for a long row (2 or 4 vectors at the representative 1024) costs every
# short row that many serial steps: softmax over (12, n, n) ran 2.7-3.8x slower than a kernel
# specialized to n = 1-16. One vector gives up at most the accumulators' gain on long rows
# (15% at 32768, Note [lane split]), which attention's rows do not reach.


def row_split(n, dtype) -> int:
    """The lanes a row reduction of n elements (an int, or a symbolic length) is split into
    (Note [lane split]): the group's config (knob `split` of the x86 "rows" strategy), else
    `default_split` over the vectors of the current target (lowering makes the group's target
    current; ROW_LANES where no CPU target is)."""
    config = compute_config()
    if config is not None and "split" in config:
        return config["split"]
    target = Target.current()
    cpu = target is not None and target.kind_info.cpu
    return default_split(n, target.vector_lanes(dtype) if cpu else ROW_LANES)


def lane_split_reduce(value, lead, n: int, reducer, name: str, split: int):
    """row[*r] = reducer over j in [0, n) of value(*r, j), as a partial over (lead, split)
    lanes then a combine of the lanes and the tail (Note [lane split]; `row_split` gives the
    rule's split); shaped `lead`. A value that is a tuple (a tuple reducer) gives a tuple of
    rows."""
    # a symbolic n (topi/symbolic.py): steps and tail are expressions, the tail form always
    static = isinstance(n, int)
    split = max(1, min(split, n)) if static else max(1, split)
    steps, tail = (n // split, n % split) if static else (te.floordiv(n, split), None)
    attrs = {"n_outer": len(lead), "split": split}
    k = te.reduce_axis((0, steps), name="k")
    part = te.compute(
        (*lead, split),
        lambda *i: reducer(value(*i[:-1], k * split + i[-1]), axis=k),
        name=f"{name}_partial",
        tag="row_partial",
        attrs=attrs,
    )
    parts = part if isinstance(part, tuple) else (part,)
    if tail is None:
        return _symbolic_combine(value, lead, n, reducer, name, split, parts, attrs)
    j = te.reduce_axis((0, split + tail), name="j")

    def combine(*r):
        if tail == 0:
            lanes = tuple(p(*r, j) for p in parts)
            return reducer(lanes if len(parts) > 1 else lanes[0], axis=j)
        # both indices stay in bounds for every j: a select may load both sides
        lanes = tuple(p(*r, te.min(j, split - 1)) for p in parts)
        rest = value(*r, te.max(j - split, 0) + steps * split)
        rest = rest if isinstance(rest, tuple) else (rest,)
        picked = tuple(te.select(j < split, a, b) for a, b in zip(lanes, rest, strict=True))
        return reducer(picked if len(parts) > 1 else picked[0], axis=j)

    return te.compute(lead, combine, name=name, tag="row_combine", attrs=attrs)


# Note [symbolic combine]
# Over a static row the combine is one reduction over the split lanes and the n % split tail
# (a select picks which). Over a symbolic row that loop has a symbolic extent, so every row
# ran split + n % split serial steps, each with a select and a dependent combine (2x the
# specialized kernel's time for 16-element rows). So it is two stages: the lanes reduced over
# their constant extent (`<name>_lanes`: a loop the code generator unrolls into a tree), then
# the tail reduced onto them (the row, with the lanes as its `init`): no select, and the tail's
# loop is empty when the split divides n.


def _symbolic_combine(value, lead, n, reducer, name: str, split: int, parts, attrs):
    """The row of `lane_split_reduce` over a symbolic n (Note [symbolic combine])."""
    j = te.reduce_axis((0, split), name="j")

    def lanes_of(*r):
        picked = tuple(p(*r, j) for p in parts)
        return reducer(picked if len(parts) > 1 else picked[0], axis=j)

    lanes = te.compute(lead, lanes_of, name=f"{name}_lanes", tag="row_lanes", attrs=attrs)
    lanes = lanes if isinstance(lanes, tuple) else (lanes,)
    steps = te.floordiv(n, split)
    t = te.reduce_axis((0, te.floormod(n, split)), name="t")

    def combine(*r):
        rest = value(*r, steps * split + t)
        init = tuple(lane(*r) for lane in lanes)
        if len(parts) > 1:
            return reducer(tuple(rest), axis=t, init=init)
        return reducer(rest[0] if isinstance(rest, tuple) else rest, axis=t, init=init[0])

    return te.compute(lead, combine, name=name, tag="row_combine", attrs=attrs)


def row_stage(shape, fcompute, name: str):
    """A stage a row's stages share (Note [lane split]): inlined by generic schedules."""
    return te.compute(shape, fcompute, name=name, tag="elemwise", attrs={"row_stage": True})


_row_max = te.comm_reducer(te.max, _lowest_finite, name="row_max")


def _softmax_last(x: te.Tensor, log: bool) -> te.Tensor:
    op = "log_softmax" if log else "softmax"
    lead, n = list(x.shape[:-1]), row_length(x.shape[-1])
    split = row_split(n, x.dtype)
    row_max = lane_split_reduce(lambda *i: x(*i), lead, n, _row_max, f"{op}_max", split)
    if log:  # the output needs no exp: the sum computes its own
        exp = lambda *i: te.exp(x(*i) - row_max(*i[:-1]))  # noqa: E731
        total = lane_split_reduce(exp, lead, n, te.sum, f"{op}_sum", split)
        shift = row_stage(lead, lambda *r: row_max(*r) + te.log(total(*r)), f"{op}_shift")
        return te.compute(x.shape, lambda *i: x(*i) - shift(*i[:-1]), name=op, tag="elemwise")
    e = row_stage(x.shape, lambda *i: te.exp(x(*i) - row_max(*i[:-1])), f"{op}_exp")
    total = lane_split_reduce(lambda *i: e(*i), lead, n, te.sum, f"{op}_sum", split)
    inv = row_stage(lead, lambda *r: te.const(1, x.dtype) / total(*r), f"{op}_inv")
    return te.compute(x.shape, lambda *i: e(*i) * inv(*i[:-1]), name=op, tag="elemwise")


def row_length(dim):
    """A row's length: an int when static, else its expression (topi/symbolic.py)."""
    return int(dim.value) if hasattr(dim, "value") else dim


def _is_static_last(x: te.Tensor, axis: int) -> bool:
    """Over the last axis: the lane-split row form (also with symbolic dims: their rules take
    the representative size, topi/symbolic.py)."""
    return axis == x.ndim - 1


def softmax(x: te.Tensor, axis: int = -1) -> te.Tensor:
    axis = _normalize_axis(axis, x.ndim, "softmax")
    if _is_static_last(x, axis):
        return _softmax_last(x, log=False)
    row_max, row_sum = row_max_sum(x, axis, "softmax")

    def f(*i):
        rest = (*i[:axis], *i[axis + 1 :])
        return te.exp(x(*i) - row_max(*rest)) / row_sum(*rest)

    return te.compute(x.shape, f, name="softmax", tag="elemwise")


def log_softmax(x: te.Tensor, axis: int = -1) -> te.Tensor:
    axis = _normalize_axis(axis, x.ndim, "log_softmax")
    if _is_static_last(x, axis):
        return _softmax_last(x, log=True)
    row_max, row_sum = row_max_sum(x, axis, "log_softmax")

    def f(*i):
        rest = (*i[:axis], *i[axis + 1 :])
        return x(*i) - row_max(*rest) - te.log(row_sum(*rest))

    return te.compute(x.shape, f, name="log_softmax", tag="elemwise")
