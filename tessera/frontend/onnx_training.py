"""ONNX converters for ops that are formulas of existing ops: SwiGLU, the optimizer steps of
the `ai.onnx.preview.training` domain (Adagrad, Adam, Momentum: one update of weights from
gradients, as inference-time graphs can hold them), the `ai.onnx.ml` Binarizer and
ArrayFeatureExtractor, and TfIdfVectorizer over integer tokens.

    Adagrad(R, T, X..., G..., H...)  ->  X' = X - R / (1 + T * decay) * G' / (sqrt(H') + eps)
"""

from __future__ import annotations

import numpy as np

from tessera.frontend.onnx_compose import swish
from tessera.frontend.onnx_registry import NodeError, onnx_op

TRAINING = "ai.onnx.preview.training"
ML = "ai.onnx.ml"


@onnx_op("SwiGLU", since=28)
def swiglu(b, A, B, *, alpha=1.0):
    """Y = Swish_alpha(A) * B (A and B of one shape)."""
    if A.type.shape != B.type.shape:
        raise NodeError(f"A {A.type} and B {B.type} must have one shape")
    return b.call("multiply", swish(b, A, alpha=alpha), B)


def _groups(inputs, k: int, op: str):
    n, rest = divmod(len(inputs), k)
    if rest or n == 0:
        raise NodeError(f"{op} takes R, T and {k} groups of tensors, got {len(inputs) + 2} inputs")
    return [inputs[i * n : (i + 1) * n] for i in range(k)]


def _f(b, value, like):
    return b.scalar(value, like)


def _t_as(b, T, like):
    """The step count T as a scalar of like's dtype."""
    return b.call("cast", b.reshape(T, ()), dtype=like.type.dtype)


def _regularized(b, x, g, coefficient):
    return g if coefficient == 0 else b.call("add", b.call("multiply", _f(b, coefficient, x), x), g)


@onnx_op("Adagrad", domain=TRAINING)
def adagrad(b, R, T, *inputs, decay_factor=0.0, epsilon=1e-6, norm_coefficient=0.0):
    xs, gs, hs = _groups(inputs, 3, "Adagrad")
    r = b.reshape(R, ())
    decay = b.call("multiply", _t_as(b, T, r), _f(b, decay_factor, r))
    rate = b.call("divide", r, b.call("add", _f(b, 1.0, r), decay))
    new_x, new_h = [], []
    for x, g, h in zip(xs, gs, hs, strict=True):
        g = _regularized(b, x, g, norm_coefficient)
        h2 = b.call("add", h, b.call("multiply", g, g))
        root = b.call("add", b.call("sqrt", h2), _f(b, epsilon, h2))
        scaled = b.call("multiply", b.call("cast", rate, dtype=g.type.dtype), g)
        step = b.call("divide", scaled, root)
        new_x.append(b.call("subtract", x, step))
        new_h.append(h2)
    return (*new_x, *new_h)


@onnx_op("Adam", domain=TRAINING)
def adam(b, R, T, *inputs, alpha=0.9, beta=0.999, epsilon=1e-6, norm_coefficient=0.0,
         norm_coefficient_post=0.0):  # fmt: skip
    xs, gs, vs, hs = _groups(inputs, 4, "Adam")
    r = b.reshape(R, ())
    t = _t_as(b, T, r)
    # bias correction when T > 0: r * sqrt(1 - beta^T) / (1 - alpha^T)
    corr = b.call(
        "divide",
        b.call("sqrt", b.call("subtract", _f(b, 1.0, r), b.call("power", _f(b, beta, r), t))),
        b.call("subtract", _f(b, 1.0, r), b.call("power", _f(b, alpha, r), t)),
    )
    positive = b.call("greater", b.reshape(T, ()), b.scalar(0, b.reshape(T, ())))
    rate = b.call("where", positive, b.call("multiply", r, corr), r)
    outs = ([], [], [])
    for x, g, v, h in zip(xs, gs, vs, hs, strict=True):
        g = _regularized(b, x, g, norm_coefficient)
        v2 = b.call("add", b.call("multiply", _f(b, alpha, v), v),
                    b.call("multiply", _f(b, 1 - alpha, g), g))  # fmt: skip
        gg = b.call("multiply", g, g)
        h2 = b.call("add", b.call("multiply", _f(b, beta, h), h),
                    b.call("multiply", _f(b, 1 - beta, gg), gg))  # fmt: skip
        root = b.call("add", b.call("sqrt", h2), _f(b, epsilon, h2))
        step = b.call("multiply", b.call("cast", rate, dtype=x.type.dtype),
                      b.call("divide", v2, root))  # fmt: skip
        x2 = b.call("subtract", x, step)
        if norm_coefficient_post:
            x2 = b.call("multiply", _f(b, 1 - norm_coefficient_post, x2), x2)
        for out, value in zip(outs, (x2, v2, h2), strict=True):
            out.append(value)
    return (*outs[0], *outs[1], *outs[2])


@onnx_op("Momentum", domain=TRAINING)
def momentum(b, R, T, *inputs, alpha, beta, mode, norm_coefficient):
    if mode not in ("standard", "nesterov"):
        raise NodeError(f"mode must be 'standard' or 'nesterov', got {mode!r}")
    xs, gs, vs = _groups(inputs, 3, "Momentum")
    r = b.reshape(R, ())
    positive = b.call("greater", b.reshape(T, ()), b.scalar(0, b.reshape(T, ())))
    beta_t = b.call("where", positive, _f(b, beta, r), _f(b, 1.0, r))
    new_x, new_v = [], []
    for x, g, v in zip(xs, gs, vs, strict=True):
        g = _regularized(b, x, g, norm_coefficient)
        v2 = b.call("add", b.call("multiply", _f(b, alpha, v), v),
                    b.call("multiply", b.call("cast", beta_t, dtype=g.type.dtype), g))  # fmt: skip
        direction = v2
        if mode == "nesterov":
            direction = b.call("add", g, b.call("multiply", _f(b, alpha, v2), v2))
        rate = b.call("cast", r, dtype=x.type.dtype)
        new_x.append(b.call("subtract", x, b.call("multiply", rate, direction)))
        new_v.append(v2)
    return (*new_x, *new_v)


@onnx_op("Binarizer", domain=ML)
def binarizer(b, X, *, threshold=0.0):
    """1 where X > threshold, else 0, in X's dtype."""
    return b.call("cast", b.call("greater", X, b.scalar(threshold, X)), dtype=X.type.dtype)


@onnx_op("ArrayFeatureExtractor", domain=ML)
def array_feature_extractor(b, X, Y):
    """X[..., Y]: the columns Y of the last axis (a 1-D X gives a row of them)."""
    idx = b.reshape(Y, (-1,)) if Y.type.ndim != 1 else Y
    if X.type.ndim == 1:
        return b.reshape(b.call("gather", X, idx, axis=0), (1, b.shape_of(idx)[0]))
    return b.call("gather", X, idx, axis=X.type.ndim - 1)


@onnx_op("TfIdfVectorizer", since=9)
def tfidf_vectorizer(b, X, *, max_gram_length, min_gram_length, max_skip_count, mode,
                     ngram_counts, ngram_indexes, pool_int64s=None, pool_strings=None,
                     weights=None):  # fmt: skip
    """Counts of the pool's n-grams in each row of X (skips of 0..max_skip_count between the
    items of an n-gram; a 1-gram counted once), weighted as `mode` says. For each n and skip:
    one comparison of the row's shifted slices with every pool n-gram at once, AND-ed, summed
    over positions; a constant one-hot matrix places each n-gram's count at its index."""
    if pool_strings is not None or pool_int64s is None:
        raise NodeError("string pools are not supported (tessera compiles numbers)")
    if mode not in ("TF", "IDF", "TFIDF"):
        raise NodeError(f"mode must be TF, IDF or TFIDF, got {mode!r}")
    pool = np.asarray(pool_int64s, np.int64)
    starts = [*ngram_counts, pool.size]
    width = int(max(ngram_indexes)) + 1
    rows = X if X.type.ndim == 2 else b.reshape(X, (1, *b.shape_of(X)))
    length = b.shape_of(rows)[1]
    x = b.call("cast", rows, dtype="int64")
    total, first = None, 0
    for n in range(1, max_gram_length + 1):
        grams = pool[starts[n - 1] : starts[n]].reshape(-1, n)
        index = list(ngram_indexes[first : first + len(grams)])
        first += len(grams)
        if n < min_gram_length or not len(grams):
            continue
        place = np.zeros((len(grams), width), np.float32)
        place[np.arange(len(grams)), index] = 1
        for skip in range(max_skip_count + 1 if n > 1 else 1):
            span = (n - 1) * (skip + 1)
            if span >= length:
                break
            match = None
            for j in range(n):
                start = j * (skip + 1)
                end = (b.shape_of(x)[0], length - span + start)
                part = b.call("slice", x, begin=(0, start), end=end, strides=(1, 1))
                hit = b.call("equal", b.reshape(part, (*b.shape_of(part), 1)),
                             b.const(grams[:, j].reshape(1, 1, -1)))  # fmt: skip
                match = hit if match is None else b.call("logical_and", match, hit)
            counts = b.call(
                "sum", b.call("cast", match, dtype="float32"), axis=(1,), keepdims=False
            )
            placed = b.call("matmul", counts, b.const(place))
            total = placed if total is None else b.call("add", total, placed)
    if total is None:
        total = b.const(np.zeros((b.shape_of(x)[0], width), np.float32))
    w = np.ones(width, np.float32)
    if weights is not None:  # one per pool n-gram: it weighs that n-gram's output
        w[np.asarray(ngram_indexes, np.int64)] = np.asarray(weights, np.float32)
    if mode == "IDF":
        seen = b.call("cast", b.call("greater", total, b.scalar(0, total)), dtype="float32")
        total = b.call("multiply", seen, b.const(w))
    elif mode == "TFIDF":
        total = b.call("multiply", total, b.const(w))
    return total if X.type.ndim == 2 else b.reshape(total, (width,))


@onnx_op("Col2Im", since=18)
def col2im(b, input, image_shape, block_shape, *, dilations=None, pads=None, strides=None):
    """Sum the columns of `input` [N, C * prod(block), L] back into images [N, C, *image]: a
    scatter-add of every (block offset, column) to its pixel, the positions known constants."""
    image = [int(d) for d in np.asarray(b.known(image_shape, "image_shape")).reshape(-1)]
    block = [int(d) for d in np.asarray(b.known(block_shape, "block_shape")).reshape(-1)]
    nd = len(image)
    dil = list(dilations or [1] * nd)
    stride = list(strides or [1] * nd)
    pad = list(pads or [0] * 2 * nd)
    n, ck, length = b.shape_of(input)
    k = int(np.prod(block))
    if len(block) != nd or ck % k:
        raise NodeError(f"block_shape {block} does not fit image_shape {image} and {ck} channels")
    padded = [image[d] + pad[d] + pad[d + nd] for d in range(nd)]
    counts = [(padded[d] - dil[d] * (block[d] - 1) - 1) // stride[d] + 1 for d in range(nd)]
    if int(np.prod(counts)) != length:
        raise NodeError(f"{length} columns, the shapes give {int(np.prod(counts))}")
    offsets = np.stack(np.meshgrid(*[np.arange(s) * g for s, g in zip(block, dil, strict=True)],
                                   indexing="ij"), -1).reshape(k, 1, nd)  # fmt: skip
    starts = np.stack(np.meshgrid(*[np.arange(c) * s for c, s in zip(counts, stride, strict=True)],
                                  indexing="ij"), -1).reshape(1, length, nd)  # fmt: skip
    c = ck // k
    cols = b.call("transpose", b.reshape(input, (n, c, k, length)), axes=(2, 3, 0, 1))
    zeros = b.const(np.zeros((*padded, n, c), input.type.dtype.numpy_name))
    placed = b.call("scatter_nd", zeros, b.const((offsets + starts).astype(np.int64)), cols,
                    reduction="add")  # fmt: skip
    out = b.call("transpose", placed, axes=(nd, nd + 1, *range(nd)))
    begin = (0, 0, *pad[:nd])
    end = (n, c, *(pad[d] + image[d] for d in range(nd)))
    if begin == (0,) * (nd + 2) and end == (n, c, *padded):
        return out
    return b.call("slice", out, begin=begin, end=end, strides=(1,) * (nd + 2))


@onnx_op("Det", since=11)
def det(b, X):
    """The determinant of each [n, n] matrix of X [*, n, n]: Gaussian elimination with partial
    pivoting, unrolled over the n columns (the row swaps gathered by the pivots' indices)."""
    shape = b.shape_of(X)
    if len(shape) < 2 or shape[-1] != shape[-2]:
        raise NodeError(f"X must hold square matrices, got {X.type}")
    n, batch = shape[-1], int(np.prod(shape[:-2], dtype=np.int64))
    a = b.reshape(X, (batch, n, n))
    rows = b.const(np.arange(n, dtype=np.int64).reshape(1, n))
    spread = b.const(np.zeros((1, 1, n), np.int64))
    sign, pivots = b.const(np.ones((batch,), X.type.dtype.numpy_name)), []

    def take(begin, end):
        return b.call("slice", a, begin=begin, end=end, strides=(1, 1, 1))

    for k in range(n):
        column = b.reshape(take((0, k, k), (batch, n, k + 1)), (batch, n - k))
        best = b.call("argmax", b.call("abs", column), axis=1, keepdims=True)
        r = b.call("add", best, b.const(np.int64(k)))  # [batch, 1]
        at_k = b.call("equal", rows, b.const(np.int64(k)))
        perm = b.call(
            "where", at_k, r, b.call("where", b.call("equal", rows, r), b.const(np.int64(k)), rows)
        )
        index = b.call("add", b.reshape(perm, (batch, n, 1)), spread)
        a = b.call("gather_elements", a, index, axis=1)
        swapped = b.call("not_equal", b.reshape(r, (batch,)), b.const(np.int64(k)))
        sign = b.call("where", swapped, b.call("negative", sign), sign)
        pivot = b.reshape(take((0, k, k), (batch, k + 1, k + 1)), (batch,))
        pivots.append(pivot)
        if k == n - 1:
            break
        zero = b.call("equal", pivot, b.scalar(0, pivot))
        safe = b.call("where", zero, b.scalar(1, pivot), pivot)
        below = b.reshape(take((0, k + 1, k), (batch, n, k + 1)), (batch, n - k - 1))
        factors = b.call("divide", below, b.reshape(safe, (batch, 1)))
        row_k = take((0, k, 0), (batch, k + 1, n))
        update = b.call("multiply", b.reshape(factors, (batch, n - k - 1, 1)), row_k)
        rest = b.call("subtract", take((0, k + 1, 0), (batch, n, n)), update)
        a = b.call("concatenate", take((0, 0, 0), (batch, k + 1, n)), rest, axis=1)
    out = sign
    for p in pivots:
        out = b.call("multiply", out, p)
    return b.reshape(out, shape[:-2])
