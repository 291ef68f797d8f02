"""ONNX-ML TreeEnsemble (ai.onnx.ml opset 5): every tree walked at once, one level a step.

The trees are attributes, so they become constant tables indexed by node: feature, split,
mode, membership set, missing-tracks-true, and the true/false successors, a successor coded as
a node id (>= 0) or a leaf -(leaf + 1). The state is one code per (row, tree), starting at the
roots; each of the `depth` steps (the deepest tree's) gathers the node's table entries, reads
the row's feature (gather_elements) and moves to a successor, leaves staying put. The leaves
then give (weight, target), aggregated per target (sum, average, min or max) and
post-transformed (none, softmax, logistic).
"""

from __future__ import annotations

import numpy as np

from tessera.frontend.onnx_registry import NodeError, onnx_op, value_dtype

ML = "ai.onnx.ml"
LEQ, LT, GTE, GT, EQ, NEQ, MEMBER = range(7)
_COMPARE = {LEQ: "less_equal", LT: "less", GTE: "greater_equal", GT: "greater", EQ: "equal",
            NEQ: "not_equal"}  # fmt: skip


def _array(v):
    return np.asarray(v).reshape(-1)


def _tables(roots, modes, true_ids, true_leafs, false_ids, false_leafs, membership):
    """(start codes per tree, true codes, false codes, membership sets (nodes, S) NaN-padded,
    depth): a successor is a node id or -(leaf + 1)."""
    code_t = np.where(true_leafs != 0, -(true_ids + 1), true_ids)
    code_f = np.where(false_leafs != 0, -(false_ids + 1), false_ids)
    starts = []
    for r in roots:  # a root that is a leaf on both sides, to one leaf, is that leaf
        leaf = true_leafs[r] and false_leafs[r] and true_ids[r] == false_ids[r]
        starts.append(-(true_ids[r] + 1) if leaf else r)
    sets: list[list[float]] = [[] for _ in modes]
    values = iter(_array(membership) if membership is not None else ())
    for i, m in enumerate(modes):
        if m == MEMBER:  # each member node takes the values up to the next NaN
            for v in values:
                if np.isnan(v):
                    break
                sets[i].append(float(v))
    width = max([len(s) for s in sets] + [1])
    table = np.full((len(modes), width), np.nan)
    for i, s in enumerate(sets):
        table[i, : len(s)] = s
    depth, level, seen = 0, [c for c in starts if c >= 0], set()
    while level:
        if depth > len(modes):
            raise NodeError("the trees have a cycle")
        depth += 1
        seen.update(level)
        level = [c for n in level for c in (code_t[n], code_f[n]) if c >= 0]
    return np.array(starts, np.int64), code_t, code_f, table, depth


@onnx_op("TreeEnsemble", since=5, domain=ML)
def tree_ensemble(b, X, *, aggregate_function=1, leaf_targetids, leaf_weights,
                  membership_values=None, n_targets=None, nodes_falseleafs,
                  nodes_falsenodeids, nodes_featureids, nodes_hitrates=None,
                  nodes_missing_value_tracks_true=None, nodes_modes, nodes_splits,
                  nodes_trueleafs, nodes_truenodeids, post_transform=0, tree_roots):  # fmt: skip
    if X.type.ndim != 2 or not X.type.dtype.is_float:
        raise NodeError(f"X must be a float matrix (rows, features), got {X.type}")
    if aggregate_function not in (0, 1, 2, 3):
        raise NodeError(f"unknown aggregate_function {aggregate_function}")
    if post_transform not in (0, 1, 2):
        raise NodeError(f"post_transform {post_transform} is not supported (0 none, 1 softmax, "
                        "2 logistic)")  # fmt: skip
    modes = _array(nodes_modes).astype(np.int64)
    if np.any((modes < 0) | (modes > MEMBER)):
        raise NodeError(f"unknown node modes {sorted(set(modes.tolist()))}")
    ints = [_array(v).astype(np.int64) for v in (
        tree_roots, nodes_truenodeids, nodes_trueleafs, nodes_falsenodeids, nodes_falseleafs)]
    roots, true_ids, true_leafs, false_ids, false_leafs = ints
    targets = _array(leaf_targetids).astype(np.int64)
    n_targets = int(n_targets) if n_targets is not None else int(targets.max()) + 1
    starts, code_t, code_f, sets, depth = _tables(roots, modes, true_ids, true_leafs,
                                                  false_ids, false_leafs, membership_values)
    dtype = value_dtype(X.type.dtype)
    rows, trees = b.shape_of(X)[0], len(starts)
    tables = {
        "feature": _array(nodes_featureids).astype(np.int64),
        "split": _array(nodes_splits).astype(dtype),
        "mode": modes,
        "true": code_t,
        "false": code_f,
        "missing": (_array(nodes_missing_value_tracks_true).astype(bool)
                    if nodes_missing_value_tracks_true is not None
                    else np.zeros(len(modes), bool)),  # fmt: skip
    }
    const = {k: b.const(v) for k, v in tables.items()}
    member = b.const(sets.astype(dtype))
    cur = b.const(np.broadcast_to(starts, (rows, trees)).copy())
    zero = b.const(np.zeros((), np.int64))
    for _ in range(depth):
        node = b.call("maximum", cur, zero)  # a leaf's lookups are ignored
        at = {k: b.call("gather", v, node, axis=0) for k, v in const.items()}
        value = b.call("gather_elements", X, at["feature"], axis=1)
        go = b.call("logical_and", b.call("isnan", value), at["missing"])
        for m in sorted(set(modes.tolist())):
            if m == MEMBER:
                table = b.call("gather", member, node, axis=0)  # (rows, trees, S)
                hit = b.call("equal", b.reshape(value, (rows, trees, 1)), table)
                hit = b.call("max", b.call("cast", hit, dtype="int32"), axis=(2,), keepdims=False)
                hit = b.call("greater", hit, b.const(np.zeros((), np.int32)))
            else:
                hit = b.call(_COMPARE[m], value, at["split"])
            is_m = b.call("equal", at["mode"], b.const(np.array(m, np.int64)))
            go = b.call("logical_or", go, b.call("logical_and", is_m, hit))
        step = b.call("where", go, at["true"], at["false"])
        cur = b.call("where", b.call("less", cur, zero), cur, step)
    leaf = b.call("subtract", b.call("negative", cur), b.const(np.ones((), np.int64)))
    weight = b.call("gather", b.const(_array(leaf_weights).astype(dtype)), leaf, axis=0)
    target = b.call("gather", b.const(targets), leaf, axis=0)
    hot = b.call("equal", b.reshape(target, (rows, trees, 1)),
                 b.const(np.arange(n_targets, dtype=np.int64)))  # fmt: skip
    w3 = b.reshape(weight, (rows, trees, 1))
    if aggregate_function in (0, 1):  # average, sum
        y = b.call("sum", b.call("where", hot, w3, b.scalar(0, w3)), axis=(1,), keepdims=False)
        if aggregate_function == 0:
            y = b.call("divide", y, b.scalar(trees, y))
    else:  # min, max: targets no leaf reaches keep the other extreme (the reference's fill)
        big = float(np.finfo(dtype).max)
        fill, reduce = (big, "min") if aggregate_function == 2 else (-big, "max")
        y = b.call(reduce, b.call("where", hot, w3, b.scalar(fill, w3)), axis=(1,),
                   keepdims=False)  # fmt: skip
    if post_transform == 1:
        y = b.call("nn.softmax", y, axis=-1)
    elif post_transform == 2:
        y = b.call("sigmoid", y)
    return y
