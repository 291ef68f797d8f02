"""Scatter te operators: scatter_elements and scatter_nd (ONNX reductions none/add/mul/max/min).

    y = topi.scatter.scatter_elements(data, indices, updates, axis=1, reduction="add")
    y = topi.scatter.scatter_nd(data, indices, updates, reduction="none")

A te.compute reads, it cannot write somewhere else, so a scatter is turned around (Note
[scatter as gather]): output position p reduces over every update position u whose index
names p. That costs O(outputs * updates along the scattered axes) work: kept where it is the
least work (few updates); many updates are sorted by target instead (Note [scatter by
sorting]: O(m log^2 m + n log m), for ScatterElements along an axis and for ScatterND).

Note [scatter as gather]: for reduction "none" the last update naming p wins (ONNX's reference
applies updates in order), so a first stage finds the largest matching update position (-1:
none) and a second stage picks that update or keeps data[p]. The other reductions fold the
matching updates into data[p] with the reduction's combiner in one stage. Indices may be
negative (counted from the end); an index still out of range matches no position.
"""

from __future__ import annotations

from tessera import te
from tessera.tir.expr import Expr
from tessera.topi.reduce import _prod
from tessera.topi.sort import bitonic_work, sorted_positions

SCATTER = "scatter"
REDUCTIONS = ("none", "add", "mul", "max", "min")


def _wrapped(v: Expr, dim) -> Expr:
    """An index counted from the end when negative, as int32 (may still be out of range)."""
    dim = te.const(int(dim.value) if hasattr(dim, "value") else int(dim), v.dtype)
    v = te.select(v < te.const(0, v.dtype), v + dim, v)
    return te.cast(v, "int32")


def _fold(reduction: str, data_value: Expr, value: Expr, axes, match: Expr) -> Expr:
    """data[p] combined with every matching update (reduction add/mul/max/min): the
    reduction starts from data[p]."""
    reducer = {"add": te.sum, "mul": _prod, "max": te.max, "min": te.min}[reduction]
    return reducer(value, axis=axes, where=match, init=data_value)


def _check(reduction: str, data: te.Tensor) -> None:
    if reduction not in REDUCTIONS:
        raise ValueError(f"unknown scatter reduction {reduction!r} (one of {REDUCTIONS})")
    if data.dtype.is_bool and reduction != "none":
        raise ValueError(f"scatter reduction {reduction!r} is not defined for bool tensors")


def scatter_elements(data, indices, updates, axis: int = 0, reduction: str = "none"):
    """ONNX ScatterElements: out[j with axis replaced by indices[j]] (reduction)= updates[j].
    Along long axes the updates are sorted by target (Note [scatter by sorting]); short ones
    gather (Note [scatter as gather]), whichever does less work."""
    _check(reduction, data)
    axis = axis % data.ndim
    n, m = int(data.shape[axis].value), int(indices.shape[axis].value)
    # a network stage costs about four steps of the gather's reduction (as for topk)
    if 4 * sorted_work(n, m) >= n * m:
        return _scatter_elements_gather(data, indices, updates, axis, reduction)
    return _scatter_elements_sorted(data, indices, updates, axis, reduction)


def sorted_work(n: int, m: int) -> int:
    """Steps of _scatter_elements_sorted per row: sort, search, scan (Note [scatter by
    sorting])."""
    log_m = max(1, (m - 1).bit_length())
    return bitonic_work(m, m) + n * (log_m + 1) + m * log_m


def _scatter_elements_gather(data, indices, updates, axis: int, reduction: str):
    """Each output position reduces over the updates along the axis (Note [scatter as
    gather]): O(n m) along it, the least work for short axes."""
    k = te.reduce_axis((0, indices.shape[axis]), name="k")

    def source(i, kv):
        """The update position (clamped into the indices' shape) and whether it is inside."""
        pos, inside = [], te.const(True)
        for d, (v, n) in enumerate(zip(i, indices.shape, strict=True)):
            if d == axis:
                pos.append(kv)
            elif int(n.value) < int(data.shape[d].value):
                inside = te.logical_and(inside, v < n)
                pos.append(te.min(v, n - 1))
            else:
                pos.append(v)
        return pos, inside

    def match(i, kv):
        pos, inside = source(i, kv)
        named = _wrapped(indices(*pos), data.shape[axis]) == i[axis]
        return te.logical_and(inside, named), pos

    if reduction != "none":

        def body(*i):
            cond, pos = match(i, k.var)
            return _fold(reduction, data(*i), updates(*pos), k, cond)

        return te.compute(data.shape, body, name="scatter_elements", tag=SCATTER)

    def last_body(*i):
        cond, _ = match(i, k.var)
        return te.max(k.var, axis=k, where=cond, init=te.const(-1, "int32"))

    last = te.compute(data.shape, last_body, name="scatter_last", tag=SCATTER)

    def pick(*i):
        j = last(*i)
        pos, _ = source(i, te.max(j, te.const(0, "int32")))
        return te.if_then_else(j >= 0, updates(*pos), data(*i))

    return te.compute(data.shape, pick, name="scatter_elements", tag=SCATTER)


def _scatter_elements_sorted(data, indices, updates, axis: int, reduction: str):
    """Note [scatter by sorting]."""
    n, m = int(data.shape[axis].value), int(indices.shape[axis].value)

    def along(i, pos):
        return [pos if d == axis else v for d, v in enumerate(i)]

    def key(r, p):
        """The target of update p of row r; n (after every target) when out of range."""
        t = _wrapped(indices(*along(r, te.min(p, m - 1))), data.shape[axis])
        ok = te.logical_and(t >= 0, t < n)
        return te.select(te.logical_and(ok, p < m), t, te.const(n, "int32"))

    def before(r, p, q):  # by target, then by position: a target's last update ends its run
        kp, kq = key(r, p), key(r, q)
        return te.logical_or(kp < kq, te.logical_and(kp == kq, p < q))

    order = sorted_positions(indices.shape, axis, m, before)
    slots = int(order.shape[axis].value)

    def sorted_key(r, slot):
        return key(r, order(*along(r, slot)))

    def row(i):
        """The indices' row of output i (other axes clamped) and whether it is inside."""
        r, inside = [], te.const(True)
        for d, (v, size) in enumerate(zip(i, indices.shape, strict=True)):
            if d != axis and int(size.value) < int(data.shape[d].value):
                inside = te.logical_and(inside, v < size)
                v = te.min(v, size - 1)
            r.append(v)
        return r, inside

    # count[i] = slots whose target <= i[axis]: a binary search, one bit per stage
    count = te.compute(
        data.shape, lambda *i: te.const(0, "int32"), name="scatter_count", tag=SCATTER
    )
    bit = slots
    while bit >= 1:

        def step(*i, prev=count, bit=bit):
            r, _ = row(i)
            c = prev(*i)
            probe = te.min(c + bit - 1, slots - 1)
            take = te.logical_and(c + bit <= slots, sorted_key(r, probe) <= i[axis])
            return te.select(take, c + bit, c)

        count = te.compute(data.shape, step, name=f"scatter_search_{bit}", tag=SCATTER)
        bit //= 2
    values = None
    if reduction != "none":  # each target's updates folded in order: a segmented scan
        values = te.compute(
            order.shape,
            lambda *r: updates(*along(r, te.min(order(*r), m - 1))),
            name="scatter_runs",
            tag=SCATTER,
        )
        combine = {"add": lambda a, b: a + b, "mul": lambda a, b: a * b,
                   "max": te.max, "min": te.min}[reduction]  # fmt: skip
        d = 1
        while d < slots:

            def scan(*r, prev=values, d=d):
                s = r[axis]
                back = te.max(s - d, 0)
                same = te.logical_and(s >= d, sorted_key(r, back) == sorted_key(r, s))
                return te.select(same, combine(prev(*along(r, back)), prev(*r)), prev(*r))

            values = te.compute(order.shape, scan, name=f"scatter_runs_{d}", tag=SCATTER)
            d *= 2

    def pick(*i):
        r, inside = row(i)
        last = te.max(count(*i) - 1, 0)
        hit = te.logical_and(te.logical_and(inside, count(*i) > 0), sorted_key(r, last) == i[axis])
        if values is None:
            update = updates(*along(r, te.min(order(*along(r, last)), m - 1)))
        else:
            update = combine(data(*i), values(*along(r, last)))
        return te.select(hit, update, data(*i))

    return te.compute(data.shape, pick, name="scatter_elements", tag=SCATTER)


# Note [scatter by sorting]: along the scattered axis the m updates of each row are sorted by
# (target, position) with the bitonic network of topi/sort.py (O(m log^2 m)); output position
# t then finds, by a binary search of log2(m) + 1 gather stages (O(n log m)), how many updates
# target t or less: the last of them is t's last update when its target is t ("none": it wins,
# as ONNX applies updates in order). For add/mul/max/min a segmented log-step scan over the
# sorted updates (O(m log m)) folds each target's run in order, and data[t] is combined with
# the run's total. Out-of-range targets sort after all and match nothing.


def scatter_nd(data, indices, updates, reduction: str = "none"):
    """ONNX ScatterND: indices[u] (the last axis, q long) names data[indices[u], ...]; the
    update updates[u, ...] is written (or reduced) there. Many updates are sorted by target
    (Note [scatter by sorting]); few gather (Note [scatter as gather]), whichever does less
    work."""
    _check(reduction, data)
    q = int(indices.shape[-1].value)
    positions = _static_prod(data.shape[:q])
    rest = _static_prod(data.shape[q:])
    count = _static_prod(indices.shape[:-1])
    if 4 * scatter_nd_sorted_work(positions, rest, count) >= positions * rest * count:
        return _scatter_nd_gather(data, indices, updates, reduction)
    return _scatter_nd_sorted(data, indices, updates, reduction)


def _static_prod(dims) -> int:
    out = 1
    for d in dims:
        out *= int(d.value) if hasattr(d, "value") else int(d)
    return out


def scatter_nd_sorted_work(positions: int, rest: int, count: int) -> int:
    """Steps of _scatter_nd_sorted: sort the count targets once, search per position, scan
    and pick per element."""
    log_m = max(1, (count - 1).bit_length())
    return bitonic_work(count, count) + positions * (log_m + 1) + rest * (count * log_m + positions)


def _scatter_nd_sorted(data, indices, updates, reduction: str):
    """Note [scatter by sorting], with one key per update: the linear position of its
    target among data's first q axes (the slice after them goes along)."""
    q = int(indices.shape[-1].value)
    batch = [int(d.value) for d in indices.shape[:-1]]
    m = _static_prod(batch)
    n = _static_prod(data.shape[:q])
    tail = list(data.shape[q:])

    def unravel(p):
        """The batch index of update p (p in [0, m), int32)."""
        pos = []
        for size in reversed(batch):
            pos.append(te.floormod(p, size))
            p = te.floordiv(p, size)
        return list(reversed(pos))

    def linear(idx):
        out = te.const(0, "int32")
        for v, size in zip(idx, data.shape[:q], strict=True):
            out = out * te.const(int(size.value), "int32") + v
        return out

    def key(p):
        """The target of update p; n (after every target) when out of range or p >= m."""
        u = unravel(te.min(p, m - 1))
        ok, target = p < m, []
        for k in range(q):
            t = _wrapped(indices(*u, te.const(k, "int32")), data.shape[k])
            ok = te.logical_and(ok, te.logical_and(t >= 0, t < int(data.shape[k].value)))
            target.append(t)
        return te.select(ok, linear(target), te.const(n, "int32"))

    def before(_, p, r):  # by target, then by position: a target's last update ends its run
        kp, kr = key(p), key(r)
        return te.logical_or(kp < kr, te.logical_and(kp == kr, p < r))

    order = sorted_positions((te.const(m, "int32"),), 0, m, before)
    slots = int(order.shape[0].value)

    def sorted_key(slot):
        return key(order(slot))

    # found[t] = slots whose target <= t: a binary search, one bit per stage
    found = te.compute((n,), lambda t: te.const(0, "int32"), name="scatter_count", tag=SCATTER)
    bit = slots
    while bit >= 1:

        def step(*i, prev=found, bit=bit):
            (t,) = i
            c = prev(t)
            probe = te.min(c + bit - 1, slots - 1)
            take = te.logical_and(c + bit <= slots, sorted_key(probe) <= t)
            return te.select(take, c + bit, c)

        found = te.compute((n,), step, name=f"scatter_search_{bit}", tag=SCATTER)
        bit //= 2

    def update_of(slot, *r):
        return updates(*unravel(te.min(order(slot), m - 1)), *r)

    values = None
    if reduction != "none":  # each target's updates folded in order: a segmented scan
        values = te.compute((slots, *tail), update_of, name="scatter_runs", tag=SCATTER)
        combine = {"add": lambda a, b: a + b, "mul": lambda a, b: a * b,
                   "max": te.max, "min": te.min}[reduction]  # fmt: skip
        d = 1
        while d < slots:

            def scan(s, *r, prev=values, d=d):
                back = te.max(s - d, 0)
                same = te.logical_and(s >= d, sorted_key(back) == sorted_key(s))
                return te.select(same, combine(prev(back, *r), prev(s, *r)), prev(s, *r))

            values = te.compute((slots, *tail), scan, name=f"scatter_runs_{d}", tag=SCATTER)
            d *= 2

    def pick(*i):
        t = linear(i[:q])
        last = te.max(found(t) - 1, 0)
        hit = te.logical_and(found(t) > 0, sorted_key(last) == t)
        if values is None:
            update = update_of(last, *i[q:])
        else:
            update = combine(data(*i), values(last, *i[q:]))
        return te.select(hit, update, data(*i))

    return te.compute(data.shape, pick, name="scatter_nd", tag=SCATTER)


def _scatter_nd_gather(data, indices, updates, reduction: str):
    """Each output position reduces over every update (Note [scatter as gather]):
    O(positions x updates), the least work for few updates."""
    q = int(indices.shape[-1].value)
    batch = indices.shape[:-1]
    axes = [te.reduce_axis((0, n), name=f"u{d}") for d, n in enumerate(batch)]
    u = [a.var for a in axes]

    def match(i, u):
        cond = te.const(True)
        for k in range(q):
            idx = indices(*u, te.const(k, "int32"))
            cond = te.logical_and(cond, _wrapped(idx, data.shape[k]) == i[k])
        return cond

    if reduction != "none":

        def body(*i):
            return _fold(reduction, data(*i), updates(*u, *i[q:]), axes, match(i, u))

        return te.compute(data.shape, body, name="scatter_nd", tag=SCATTER)

    def linear(u):
        out = te.const(0, "int32")
        for v, n in zip(u, batch, strict=True):
            out = out * n + v
        return out

    def last_body(*i):
        return te.max(linear(u), axis=axes, where=match(i, u), init=te.const(-1, "int32"))

    last = te.compute(data.shape, last_body, name="scatter_last", tag=SCATTER)

    def pick(*i):
        j = te.max(last(*i), te.const(0, "int32"))
        pos = []
        for n in reversed(batch):
            pos.append(te.floormod(j, n))
            j = te.floordiv(j, n)
        value = updates(*reversed(pos), *i[q:])
        return te.if_then_else(last(*i) >= 0, value, data(*i))

    return te.compute(data.shape, pick, name="scatter_nd", tag=SCATTER)
