"""Sorting networks in te: top-k along an axis as a bitonic network over element positions.

    values, indices = topi.sort.bitonic_topk(x, k=5, axis=-1, largest=True)

Note [bitonic top-k]: a te.compute gathers, it cannot move data, so each stage of the network
is a gather over int32 positions along the axis: stage t holds, for every slot, the position
of the element that sits there after t compare-exchange steps; comparing two slots loads the
two elements of x they name. The axis is padded to P = 2^p slots (padding slots name positions
>= n, worse than any element). With K = 2^ceil(log2 k):

1. sort every block of K slots best first: the bitonic sort's log2(K)(log2(K) + 1)/2 stages;
2. while more than one block is left, merge block pairs keeping the best K: slot t of the
   merged block takes the better of A[t] and B[K - 1 - t] (a bitonic sequence holding the K
   best of A and B), then log2(K) bitonic merge stages sort it. Each round halves the slots.

Work: P log2(K)^2 / 2 compares for step 1 and under 2 P (1 + log2 K) for step 2, O(n log^2 k);
a full sort (k near n) is O(n log^2 n). "Better" is a total order, so the result is exact and
stable: the larger value (the smaller for largest=False), NaN after every number, ties by the
lower position, as numpy's stable argsort and ONNX's TopK order them.
"""

from __future__ import annotations

from tessera import te

TAG = "sort"


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def beats(vp, vq, p, q, largest: bool, is_float: bool):
    """Element p (value vp) comes before element q in top-k order: the larger value (smaller
    for largest=False), NaN after every number, ties by the lower position. A total order."""
    strict = vp > vq if largest else vp < vq
    earlier = te.logical_or(strict, te.logical_and(vp == vq, p < q))
    if not is_float:
        return earlier
    nan_p, nan_q = te.isnan(vp), te.isnan(vq)
    return te.select(nan_p, te.logical_and(nan_q, p < q), te.logical_or(nan_q, earlier))


def sorted_positions(shape, axis: int, n: int, better, keep: int | None = None) -> te.Tensor:
    """int32 positions [0, n) along `axis` ordered by `better(i, p, q)` (position p before q,
    a strict total order; i: the output index, for the other axes), for every index of the
    other axes of `shape`: the first `keep` of them (all n when None), Note [bitonic top-k]."""

    def along(i, pos):
        return [pos if a == axis else v for a, v in enumerate(i)]

    def beat(i, p, q):  # padding slots (positions >= n) lose to every position
        return te.logical_and(p < n, te.logical_or(q >= n, better(i, p, q)))

    def shaped(slots: int):
        return tuple(te.const(slots, "int32") if a == axis else d for a, d in enumerate(shape))

    def compare_exchange(prev, slots: int, stride: int, block: int | None, name: str):
        """Slots i and i ^ stride exchanged into order: the better first in blocks where
        (i & block) == 0 (every block when `block` is None), else the worse first."""

        def body(*i):
            slot = i[axis]
            partner = te.bitwise_xor(slot, te.const(stride, "int32"))
            lo, hi = te.min(slot, partner), te.max(slot, partner)
            p, q = prev(*along(i, lo)), prev(*along(i, hi))
            first_wins = beat(i, p, q)
            if block is not None:
                up = te.bitwise_and(slot, te.const(block, "int32")) == te.const(0, "int32")
                first_wins = first_wins == up
            first, second = te.select(first_wins, p, q), te.select(first_wins, q, p)
            return te.select(slot == lo, first, second)

        return te.compute(shaped(slots), body, name=name, tag=TAG)

    slots = _pow2_at_least(max(n, 1))
    kk = min(_pow2_at_least(max(keep if keep is not None else n, 1)), slots)
    pos = te.compute(shaped(slots), lambda *i: i[axis], name="sort_slots", tag=TAG)
    size = 2
    while size <= kk:  # 1. sort blocks of kk slots, best first
        stride = size // 2
        while stride >= 1:
            block = None if size == kk else size
            pos = compare_exchange(pos, slots, stride, block, f"sort_{size}_{stride}")
            stride //= 2
        size *= 2
    while slots > kk:  # 2. merge block pairs, keeping the best kk of each pair

        def halve(*i, prev=pos):
            t = i[axis]
            blk, off = te.floordiv(t, kk), te.floormod(t, kk)
            p = prev(*along(i, blk * (2 * kk) + off))
            q = prev(*along(i, blk * (2 * kk) + kk + (kk - 1 - off)))
            return te.select(beat(i, p, q), p, q)

        slots //= 2
        pos = te.compute(shaped(slots), halve, name=f"sort_merge_{slots}", tag=TAG)
        stride = kk // 2
        while stride >= 1:
            pos = compare_exchange(pos, slots, stride, None, f"sort_merge_{slots}_{stride}")
            stride //= 2
    return pos


def bitonic_topk(x: te.Tensor, k: int, axis: int, largest: bool = True):
    """(values, int64 indices) of the k best elements along `axis`, best first (Note
    [bitonic top-k]); `axis` must be non-negative and static."""
    n = int(x.shape[axis].value)

    def value(i, pos):
        return x(*[te.min(pos, n - 1) if a == axis else v for a, v in enumerate(i)])

    def better(i, p, q):
        return beats(value(i, p), value(i, q), p, q, largest, x.dtype.is_float)

    pos = sorted_positions(x.shape, axis, n, better, keep=k)
    out_shape = tuple(te.const(k, "int32") if a == axis else d for a, d in enumerate(x.shape))
    values = te.compute(out_shape, lambda *i: value(i, pos(*i)), name="topk_values", tag=TAG)
    indices = te.compute(
        out_shape, lambda *i: te.cast(pos(*i), "int64"), name="topk_indices", tag=TAG
    )
    return values, indices


def bitonic_work(n: int, k: int) -> int:
    """Compare-exchanges of bitonic_topk along an axis of n for k (Note [bitonic top-k])."""
    slots = _pow2_at_least(max(n, 1))
    kk = min(_pow2_at_least(max(k, 1)), slots)
    steps = kk.bit_length() - 1
    work = slots * steps * (steps + 1) // 2
    while slots > kk:
        slots //= 2
        work += slots * (1 + steps)
    return work


# Note [unique]: te gathers and reduces, it has no sort with carried state, so unique is
# written with pairwise reductions over the n slices along the axis (m elements each):
# diff[p, q] = the first element where slices p and q differ (m: equal), O(n^2 m); then
# first[p] = the lowest slice equal to p, a slice is kept when first[p] == p, its output
# slot is the number of kept slices before it in sorted (lexicographic) or first-occurrence
# order, and each output row gathers its slice: O(n^2) more. Quadratic in n, so meant for the
# small tensors Unique sees in models (vocabularies, labels), not for millions of elements.


def unique(x: te.Tensor, axis: int | None, sort: bool):
    """(y, indices, inverse_indices, counts, count) of numpy.unique(x, axis=axis) with
    return_index/inverse/counts, at capacity: y has n slices along `axis` (n: the slices of x
    there, or x's size when axis is None, y then flat), of which the first `count` are the
    unique ones (sorted, or in order of first occurrence when not `sort`); the rest are 0,
    and indices/counts past `count` are 0. Note [unique]."""
    shape = [int(getattr(d, "value", d)) for d in x.shape]
    if axis is None:
        n, rest = np_prod(shape), []
    else:
        n, rest = shape[axis], shape[:axis] + shape[axis + 1 :]
    m = np_prod(rest)

    def elem(p, k):
        """Element k of slice p."""
        if axis is None:
            idx, flat = [], p
            for d in reversed(shape):
                idx.append(te.floormod(flat, d))
                flat = te.floordiv(flat, d)
            return x(*reversed(idx)) if shape else x()
        idx, flat = [], k
        for d in reversed(rest):
            idx.append(te.floormod(flat, d))
            flat = te.floordiv(flat, d)
        idx = list(reversed(idx))
        return x(*idx[:axis], p, *idx[axis:])

    i64 = "int64"
    k = te.reduce_axis((0, m), name="k")
    diff = te.compute(
        (n, n),
        lambda p, q: te.min(te.select(elem(p, k.var) != elem(q, k.var), k.var, m), axis=k),
        name="unique_diff",
        tag=TAG,
    )

    def before(p, q):
        """Slice p sorts before slice q (they differ, and p is less where they first do)."""
        d = diff(p, q)
        dd = te.min(d, m - 1)
        return te.logical_and(d < m, elem(p, dd) < elem(q, dd))

    q = te.reduce_axis((0, n), name="q")
    first = te.compute(
        (n,), lambda p: te.min(te.select(diff(p, q.var) == m, q.var, n), axis=q),
        name="unique_first", tag=TAG,
    )  # fmt: skip
    r = te.reduce_axis((0, n), name="r")
    one, zero = te.const(1, "int32"), te.const(0, "int32")

    def slot_of(p):
        kept = first(r.var) == r.var
        earlier = before(r.var, p) if sort else r.var < p
        return te.sum(te.select(te.logical_and(kept, earlier), one, zero), axis=r)

    slot = te.compute((n,), slot_of, name="unique_slot", tag=TAG)
    s = te.reduce_axis((0, n), name="s")
    source = te.compute(
        (n,),
        lambda t: te.min(
            te.select(te.logical_and(first(s.var) == s.var, slot(s.var) == t), s.var, n), axis=s
        ),
        name="unique_source",
        tag=TAG,
    )
    c = te.reduce_axis((0, n), name="c")
    counts = te.compute(
        (n,),
        lambda t: te.sum(
            te.select(te.logical_and(source(t) < n, first(c.var) == source(t)),
                      te.const(1, i64), te.const(0, i64)), axis=c),  # fmt: skip
        name="unique_counts",
        tag=TAG,
    )
    indices = te.compute(
        (n,), lambda t: te.cast(te.select(source(t) < n, source(t), 0), i64),
        name="unique_indices", tag=TAG,
    )  # fmt: skip
    inverse = te.compute(
        (n,), lambda p: te.cast(slot(first(p)), i64), name="unique_inverse", tag=TAG
    )
    u = te.reduce_axis((0, n), name="u")
    count = te.compute(
        (),
        lambda: te.sum(te.select(first(u.var) == u.var, te.const(1, i64), te.const(0, i64)),
                       axis=u),  # fmt: skip
        name="unique_count",
        tag=TAG,
    )
    zero_x = te.const(0, x.dtype)
    if axis is None:
        y = te.compute(
            (n,), lambda t: te.select(source(t) < n, elem(te.min(source(t), n - 1), 0), zero_x),
            name="unique_values", tag=TAG,
        )  # fmt: skip
    else:

        def value(*i):
            t = i[axis]
            kk, stride = 0, 1
            others = i[:axis] + i[axis + 1 :]
            for j in range(len(rest) - 1, -1, -1):
                kk = kk + others[j] * stride
                stride *= rest[j]
            return te.select(source(t) < n, elem(te.min(source(t), n - 1), kk), zero_x)

        y = te.compute(tuple(x.shape), value, name="unique_values", tag=TAG)
    return y, indices, inverse, counts, count


def np_prod(dims) -> int:
    out = 1
    for d in dims:
        out *= int(d)
    return out
