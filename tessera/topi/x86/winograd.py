"""Winograd convolution F(m x m, 3 x 3) in the blocked layout NCHW[x]c, and its x86 schedule.

    at, g, bt = winograd_matrices(m)                  # Cook-Toom, float64
    u = transform_weight_np(w, m, nr)                 # OIHW (K, C, 3, 3) -> (a, a, K/nr, C, nr)
    y = conv2d_winograd_nchwc(x, u, padding, m, channels=K, out_block=16, rows=6)
    s = schedule_conv2d_winograd_nchwc([relu(add(y, bias))], target)

A stride-1 3x3 convolution computes each m x m tile of outputs from an a x a tile of inputs
(a = m + 2) with a*a multiplies per input/output channel pair where the direct method needs
9*m*m: Y = At [ (G g Gt) * (Bt d B) ] A per channel pair, summed over input channels. The sum
over input channels of the element-wise products is, for each of the a*a positions, a matrix
product (tiles x C) @ (C x K): the kernel is three stages, each one parallel loop:

1. input transform: V[e1, e2, t, c] = (Bt d_t,c B)[e1, e2], d the a x a input tile t (zero
   padded), vectorized over the channels of a block;
2. a*a matrix products M[e1, e2] = V[e1, e2] @ U[e1, e2], on the register-blocked micro-kernel
   of `dense.py` (U: the weights transformed and packed in panels at compile time);
3. output transform: Y tile = At M A, the group's epilogue (bias, relu, residual add) applied
   as each output vector is written.

See Note [winograd rule] for when a conv takes this path (`plan_winograd`). Numerics: the
input and output transforms have small integer coefficients (exact for m = 2); the weight
transform (G holds 1/6, 1/24 for m = 4) is computed in float64 and rounded once. A conv's
output differs from the direct one by ~1e-6 (m = 2) to ~1e-5 (m = 4) of its range; ResNet-50's
outputs by 7e-7 relative to ONNX Runtime.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import numpy as np

from tessera import te
from tessera.topi import generic
from tessera.topi.generic import inline_injective
from tessera.topi.nn.conv import _dims, _ints, _static
from tessera.topi.rules import RuleKnob
from tessera.topi.strategy import Config, record_config
from tessera.topi.symbolic import representative_shape
from tessera.topi.x86.conv2d import PAD_TAG, pad_nchwc
from tessera.topi.x86.cpu import memory_cost
from tessera.topi.x86.dense import (
    blocking_for_panel,
    choose_blocking,
    find_tagged,
    schedule_micro_kernel,
    tile_output,
)

WINOGRAD_TAG = "conv2d_winograd_nchwc"
_TRANSFORM_TAG = "winograd_transform"
_GEMM_TAG = "winograd_gemm"
_POINTS = [Fraction(0), Fraction(1), Fraction(-1), Fraction(2), Fraction(-2), Fraction(1, 2)]
TILES = (2, 4)  # output tile sizes m this module supports (a = m + 2 <= 6 points)


# -- the transforms ------------------------------------------------------------------------------


def winograd_matrices(m: int, r: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(At (m x a), G (a x r), Bt (a x a)) of F(m, r) by Cook-Toom on the points 0, 1, -1, 2,
    -2, 1/2 (the first a - 1) and infinity; y = At [(G g) * (Bt d)] is the correlation of d
    (a inputs) with g (r taps). Exact rationals, returned as float64."""
    a = m + r - 1
    if not 2 <= a <= len(_POINTS) + 1 or m < 1:
        raise ValueError(
            f"winograd: F({m}, {r}) needs {a} points; supported a <= {len(_POINTS) + 1}"
        )
    pts = _POINTS[: a - 1]
    at = [[p**i for p in pts] + [Fraction(int(i == m - 1))] for i in range(m)]
    g = []
    for j, p in enumerate(pts):
        f = Fraction(1)
        for k, q in enumerate(pts):
            if k != j:
                f *= p - q
        g.append([p**k / f for k in range(r)])
    g.append([Fraction(int(k == r - 1)) for k in range(r)])
    bt = _solve_bt(at, g, m, r, a)
    return tuple(np.array([[float(v) for v in row] for row in mat]) for mat in (at, g, bt))


def _solve_bt(at, g, m, r, a) -> list[list[Fraction]]:
    """Bt such that sum_j At[i][j] G[j][k] Bt[j][l] = [l == i + k] for all i, k, l: for each
    row j the polynomial identity gives a square system in exact rationals."""
    # unknowns Bt[j][l] for all j, l; equations (i, k, l). Gaussian elimination over Fractions.
    rows, rhs = [], []
    for i in range(m):
        for k in range(r):
            for col in range(a):
                coeff = [Fraction(0)] * (a * a)
                for j in range(a):
                    coeff[j * a + col] = at[i][j] * g[j][k]
                rows.append(coeff)
                rhs.append(Fraction(int(col == i + k)))
    solution = _solve_exact(rows, rhs, a * a)
    return [solution[j * a : (j + 1) * a] for j in range(a)]


def _solve_exact(rows, rhs, n) -> list[Fraction]:
    aug = [row[:] + [b] for row, b in zip(rows, rhs, strict=True)]
    pivots, r = [], 0
    for col in range(n):
        pivot = next((i for i in range(r, len(aug)) if aug[i][col] != 0), None)
        if pivot is None:
            continue
        aug[r], aug[pivot] = aug[pivot], aug[r]
        inv = 1 / aug[r][col]
        aug[r] = [v * inv for v in aug[r]]
        for i in range(len(aug)):
            if i != r and aug[i][col] != 0:
                f = aug[i][col]
                aug[i] = [x - f * y for x, y in zip(aug[i], aug[r], strict=True)]
        pivots.append(col)
        r += 1
    if any(row[-1] != 0 for row in aug[r:]) or len(pivots) != n:
        raise ArithmeticError("winograd: the Cook-Toom system has no unique solution")
    return [aug[i][-1] for i in range(n)]


def transform_weight_np(w: np.ndarray, m: int, nr: int) -> np.ndarray:
    """OIHW 3x3 weights (K, C, 3, 3) -> U = G g Gt packed (a, a, ceil(K / nr), C, nr), the
    output channels past K zero; computed in float64, returned in w's dtype."""
    if w.ndim != 4 or w.shape[2:] != (3, 3):
        raise ValueError(f"winograd: expects OIHW 3x3 weights, got {w.shape}")
    _, gm, _ = winograd_matrices(m)
    k, c = w.shape[:2]
    u = np.einsum("ar,kcrs,bs->abck", gm, w.astype(np.float64), gm)  # (a, a, C, K)
    panels = -(-k // nr)
    u = np.pad(u, [(0, 0), (0, 0), (0, 0), (0, panels * nr - k)])
    a = m + 2
    u = u.reshape(a, a, c, panels, nr).transpose(0, 1, 3, 2, 4)
    return np.ascontiguousarray(u.astype(w.dtype))


def winograd_shape(x_shape, u_shape, padding, m: int, channels: int, out_block: int):
    """The output shape (N, K / ob, OH, OW, ob) of a blocked winograd conv; ValueError when the
    shapes and attributes disagree."""
    if len(x_shape) != 5 or len(u_shape) != 5:
        raise ValueError(f"expects blocked data (rank 5) and packed weights (rank 5), got "
                         f"{tuple(x_shape)} and {tuple(u_shape)}")  # fmt: skip
    n, icb, h, w, ib = x_shape
    a1, a2, panels, c, nr = u_shape
    if m not in TILES or a1 != a2 or a1 != m + 2:
        raise ValueError(f"tile {m} (supported {TILES}) and weights {tuple(u_shape)} disagree")
    if c != icb * ib:
        raise ValueError(f"weights for {c} input channels, data has {icb * ib}")
    if out_block < 1 or channels % out_block or not (panels - 1) * nr < channels <= panels * nr:
        raise ValueError(f"{channels} output channels in blocks of {out_block} do not fit "
                         f"weight panels {panels} x {nr}")  # fmt: skip
    oh, ow = h + padding[0] + padding[2] - 2, w + padding[1] + padding[3] - 2
    if any(isinstance(o, int) and o < 1 for o in (oh, ow)):  # symbolic: the type rule checks
        raise ValueError(f"3x3 kernel larger than the padded input {tuple(x_shape)}")
    return (n, channels // out_block, oh, ow, out_block)


# -- the rule -------------------------------------------------------------------------------------

# Note [winograd rule]
# A stride-1, undilated, ungrouped 3x3 conv of float32 takes F(m x m, 3 x 3) for the m (2 or 4)
# of least estimated cost when that is below 0.8 of the direct conv's; the estimate counts vector
# instructions per input x output channel pair (divided by C*K/lanes):
#   direct:    OH*OW*9 FMAs, or 9 weight vectors streamed from memory, whichever is more;
#   winograd:  a*a matrix products of T tiles (T rounded up to the micro-kernel's rows: a product
#              with fewer rows still streams its weight panels whole), or a*a weight vectors
#              from memory (the transformed weights are a*a/9 times larger), whichever is more;
#              plus the two transforms, ~8 vector ops per element of V (a*a*T*C) and of
#              M (a*a*T*K).
# A weight vector from memory is counted as `memory_cost(target)` FMAs, the target's balance of
# compute and bandwidth (Note [machine balance] in cpu.py: 16 with AVX-512, 64 bytes per 16
# FMAs), since the weights of a large model do not stay in cache between inferences. So small
# images with many channels (7x7, 512 channels: T = 4 tiles of 4x4) stay direct or take m = 2,
# large images with few channels take m = 4 (a 2.5x faster kernel on 56x56x64). In ResNet-50
# (2 threads, AVX-512) this rule measured 1-2% faster than counting 28 FMAs per vector (F(2x2)
# on 14x14x256, direct on 7x7x512).
# TRANSFORM_COST and MARGIN are no property of the target: the transforms take the same count
# of vector instructions per element on every vector width (costs are per vector, as the FMAs
# are; F(4x4)'s B^T d B is 7.3 adds and multiplies per element of V), and MARGIN is the share
# of the direct conv's estimate that Winograd must beat, for the error of an estimate that
# leaves the transforms' loads and stores out. Both are rule knobs (Note [rule knobs] in
# topi/rules.py: "winograd.transform_cost", "winograd.margin"); the choice they shape is
# searched too: the strategy's implementation (winograd or direct_nchwc) and its knob `tile`.
# `PassContext(config={"alter_layout.winograd": False})` turns the rewrite off.
TRANSFORM_COST = RuleKnob(
    "winograd.transform_cost", (4, 6, 8, 10, 12), 8,
    "vector instructions per element of V and of M (Note [winograd rule])",
)  # fmt: skip
MARGIN = RuleKnob(
    "winograd.margin", (0.6, 0.7, 0.8, 0.9, 1.0), 0.8,
    "the share of the direct conv's estimate Winograd must beat (Note [winograd rule])",
)  # fmt: skip


def winograd_cost(oh: int, ow: int, c: int, k: int, m: int, rows: int, memory: float) -> float:
    """The estimated cost of F(m x m, 3 x 3) per channel pair (Note [winograd rule]);
    `rows`: the micro-kernel's row count; `memory`: FMAs per weight vector read from memory."""
    a = m + 2
    tiles = -(-oh // m) * -(-ow // m)
    padded = -(-tiles // rows) * rows
    gemm = max(a * a * padded, a * a * memory)
    return gemm + TRANSFORM_COST.value() * a * a * tiles * (c + k) / (c * k)


def direct_cost(oh: int, ow: int, memory: float) -> float:
    return max(oh * ow * 9, 9 * memory)


def choose_winograd(oh: int, ow: int, c: int, k: int, rows: int, memory: float) -> int | None:
    """The output tile m of the cheapest winograd form of a 3x3 stride-1 conv with an OH x OW
    output, C inputs and K outputs, or None when the direct conv is estimated as fast;
    `memory`: the target's `memory_cost` (Note [machine balance] in cpu.py)."""
    costs = {m: winograd_cost(oh, ow, c, k, m, rows, memory) for m in TILES}
    m = min(costs, key=costs.get)
    return m if costs[m] < MARGIN.value() * direct_cost(oh, ow, memory) else None


def plan_winograd(target, oh: int, ow: int, c: int, k: int) -> tuple[int, int, int] | None:
    """(m, nr, mr): the tile (Note [winograd rule]), the weight panel width and the rows of the
    matrix products' micro-kernel for this target, or None (direct conv)."""
    blk = _panel_blocking(target, k, c)
    m = choose_winograd(oh, ow, c, k, blk.mr, memory_cost(target))
    if m is None:
        return None
    return m, blk.nr, product_rows(-(-oh // m) * -(-ow // m), blk.mr, blk.nv)


def _panel_blocking(target, k: int, c: int):
    """The products' blocking: of the widest panels (nv vectors) and narrower ones, the least
    cost per useful FMA, (mr + nv) / (mr * nv) loads per FMA times the share of K padding
    (96 outputs: 3 panels of 32, not 2 of 64 with 32 zero columns)."""
    widest = choose_blocking(target, 1 << 12, k, c)
    best, best_cost = widest, float("inf")
    nv = widest.nv
    while nv >= 1:
        blk = choose_blocking(target, 1 << 12, k, c, nv=nv)
        padded = -(-k // blk.nr) * blk.nr
        cost = (blk.mr + nv) / (blk.mr * nv) * padded / k
        if cost < best_cost - 1e-9:
            best, best_cost = blk, cost
        nv //= 2
    return best


def product_rows(tiles: int, most: int, nv: int) -> int:
    """The micro-kernel rows mr (at most `most`) for products of `tiles` rows: the fewest
    padded rows per FMA-per-load, ceil(tiles / mr) * mr * (mr + nv) / (mr * nv) (16 tiles with
    2 vectors: 2 x 8 rows, not 2 x 14 with 12 wasted)."""
    best, best_cost = most, float("inf")
    for mr in range(most, max(1, most // 2) - 1, -1):
        cost = -(-tiles // mr) * mr * (mr + nv) / (mr * nv)
        if cost < best_cost - 1e-9:
            best, best_cost = mr, cost
    return best


# -- the compute ---------------------------------------------------------------------------------


def _combine(coeffs, terms):
    """sum(c * x) over the nonzero coefficients, with no multiply for +-1."""
    acc = None
    for c, x in zip(coeffs, terms, strict=True):
        c = float(c)
        if c == 0:
            continue
        if acc is None:
            acc = x if c == 1 else x * c
        elif c == 1:
            acc = acc + x
        elif c == -1:
            acc = acc - x
        else:
            acc = acc + x * c
    return acc


def _pick(index, options):
    """options[index] for a symbolic index: a chain of selects that folds to one option once
    the index is a constant (the schedule unrolls it)."""
    expr = options[-1]
    for i in range(len(options) - 2, -1, -1):
        expr = te.select(index == i, options[i], expr)
    return expr


def _transform(mat, index, load):
    """(mat @ tile)[index] for a symbolic row index: load(p) gives the tile's rows."""
    return _pick(index, [_combine(row, [load(p) for p in range(len(row))]) for row in mat])


def _ceil_div(a, b: int):
    return -(-a // b) if isinstance(a, int) else te.floordiv(a + b - 1, b)


# Note [symbolic winograd]
# The batch and the sizes may be symbolic (graph/dims.py), as for the direct blocked conv: the
# tile counts are then expressions (ceil-divisions of the sizes), the products' rows are the tiles
# rounded up to the micro-kernel's rows as for static shapes (the last tile's loads clamped, so
# the rounded rows need no guard), and the input is padded past its end by the most a tile can
# reach (the end pad + m - 1; the pad is computed per tile, on the stack: nothing is stored for
# it). The tile m and the products' blocking are chosen at the representative sizes
# (topi/symbolic.py); the parallel loops and the tile tails are those of the static schedule
# (`tile_output`'s symbolic tails: an unguarded main part, the edge tile guarded).


def conv2d_winograd_nchwc(
    x: te.Tensor, u: te.Tensor, padding, m: int, channels: int, out_block: int, rows: int = 1
) -> te.Tensor:
    """A stride-1 3x3 convolution of blocked data x (N, C/ib, H, W, ib) with weights transformed
    by `transform_weight_np`; (N, channels / out_block, OH, OW, out_block). Tag WINOGRAD_TAG.
    `rows`: the matrix products get a multiple of this many rows (the micro-kernel's), the
    last tile repeated: products with a row tail would run guarded code in every tile (their
    row tiles share one parallel loop with the a*a products, so no pass can peel the tail)."""
    padding = _ints(padding, 4, "pads", WINOGRAD_TAG)
    _static(x.shape[1:2] + x.shape[4:], WINOGRAD_TAG)  # Note [symbolic winograd]
    x_shape, u_shape = _dims(x.shape), _static(u.shape, WINOGRAD_TAG)
    out_shape = winograd_shape(x_shape, u_shape, padding, m, channels, out_block)
    n, icb, h, w, ib = x_shape
    a, _, _, cin, nr = u_shape
    _, _, oh, ow, ob = out_shape
    th, tw = _ceil_div(oh, m), _ceil_div(ow, m)
    after = tuple(
        t * m + 2 - size - pad if isinstance(t, int) else pad_end + m - 1
        for t, size, pad, pad_end in (
            (th, h, padding[0], padding[2]),
            (tw, w, padding[1], padding[3]),
        )
    )
    xp = pad_nchwc(x, padding[:2], after)
    at, _, bt = winograd_matrices(m)
    per_image = th * tw
    tiles = n * per_image
    row_multiple = max(rows, 1)
    padded = _ceil_div(tiles, row_multiple) * row_multiple
    clamp = not isinstance(tiles, int) or padded > tiles

    def tile_load(t, c, p, q):
        if clamp:
            t = te.min(t, tiles - 1)
        ni, r = t // per_image, t % per_image
        return xp[ni, c // ib, (r // tw) * m + p, (r % tw) * m + q, c % ib]

    # Bt d B in two passes (rows, then columns), each a small stage: see the schedule
    row_pass = te.compute(
        (a, a, padded, cin),
        lambda e1, q, t, c: _transform(bt, e1, lambda p: tile_load(t, c, p, q)),
        name="winograd_rows",
        tag=_TRANSFORM_TAG,
    )

    def v_body(e1, e2, t, c):
        return _transform(bt, e2, lambda q: row_pass[e1, q, t, c])

    v = te.compute((a, a, padded, cin), v_body, name="winograd_v", tag=_TRANSFORM_TAG)
    rc = te.reduce_axis((0, cin), name="rc")
    kp = u_shape[2] * nr
    mm = te.compute(
        (a, a, padded, kp),
        lambda e1, e2, t, k: te.sum(v[e1, e2, t, rc] * u[e1, e2, k // nr, rc, k % nr], axis=rc),
        name="winograd_m",
        tag=_GEMM_TAG,
        attrs={"nr": nr, "rows": row_multiple},
    )

    out_rows = te.compute(
        (m, a, tiles, kp),
        lambda i, q, t, k: _transform(at, i, lambda p: mm[p, q, t, k]),
        name="winograd_out_rows",
        tag=_TRANSFORM_TAG,
    )

    def y_body(ni, kb, y, xx, ki):
        t = (ni * th + y // m) * tw + xx // m
        return _transform(at, xx % m, lambda q: out_rows[y % m, q, t, kb * ob + ki])

    return te.compute(
        out_shape, y_body, name="conv2d_winograd", tag=WINOGRAD_TAG, attrs={"tile": m}
    )


# -- the schedule --------------------------------------------------------------------------------


def schedule_conv2d_winograd_nchwc(outs, target=None, config=None) -> te.Schedule:
    """The x86 schedule of a fused group anchored on conv2d_winograd_nchwc (module docstring);
    `config` (the strategy's out_block and tile, already in the op's shape) is recorded."""
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    s = te.create_schedule([t.op for t in outs])
    inline_injective(s, outs)
    y = find_tagged(outs, WINOGRAD_TAG)
    m = int(y.op.attrs["tile"])
    out_rows = y.op.input_tensors[0]
    mm = out_rows.op.input_tensors[0]
    v, u = mm.op.input_tensors
    _schedule_input(s, v)
    _schedule_gemm(s, mm, u, target)
    out_ops = {id(t.op) for t in outs}
    if id(y.op) in out_ops:
        out = y
    elif len(outs) == 1 and [str(d) for d in outs[0].shape] == [str(d) for d in y.shape]:
        s[y].compute_inline()  # the epilogue reads the transform's expression
        out = outs[0]
    else:
        out = y
        for t in outs:
            if t.op is not y.op:
                generic.schedule_elementwise_stage(s, t, target)
    _schedule_output(s, out, out_rows, m)
    ob = int(y.shape[4].value)
    record_config(s, Config("winograd", {"out_block": ob, "tile": m}))
    return s


def _schedule_input(s, v: te.Tensor) -> None:
    """Per (tile, channel block), in parallel: the padded a x a input tile copied into a
    stack buffer, its rows transformed (unrolled, a x a vectors), then its columns."""
    rows = v.op.input_tensors[0]
    xp = rows.op.input_tensors[0]
    st = s[v]
    e1, e2, t, c = st.op.axis
    block = int(xp.shape[-1].value)
    co, ci = st.split(c, factor=block)
    st.reorder(t, co, e1, e2, ci)
    tile = st.fuse(t, co)
    st.parallel(tile)
    st.unroll(e1)
    st.unroll(e2)
    st.vectorize(ci)
    rt = _stack_pass(s, rows, st, tile)
    if isinstance(xp.op, te.ComputeOp) and xp.op.tag == PAD_TAG:
        p = s[xp]
        p.compute_at(s[rows], rt)
        p.set_scope("local")
        p.vectorize(p.op.axis[-1])


def _schedule_gemm(s, mm: te.Tensor, u: te.Tensor, target) -> None:
    _, _, rows, cols = representative_shape(mm.shape)
    nr = int(mm.op.attrs["nr"])
    depth = int(mm.op.reduce_axis[0].dom.extent.value)
    blk = blocking_for_panel(target, rows, cols, depth, nr)
    mr = int(mm.op.attrs.get("rows", 1))
    if 1 < mr <= blk.mr and rows % mr == 0:  # the rows the products were padded for
        blk = dataclasses.replace(blk, mr=mr)
    acc = s.cache_write(mm, "local")
    tile = tile_output(s, mm, blk, row_axes=2)
    s[acc].compute_at(s[mm], tile)
    schedule_micro_kernel(s, acc, blk)


def _schedule_output(s, out: te.Tensor, out_rows: te.Tensor, m: int) -> None:
    """Per m x m output tile and output vector, in parallel over (n, block, tile row): the
    rows of At M (unrolled, m x a vectors on the stack), then the columns, the epilogue."""
    st = s[out]
    n, kb, y, x, ki = st.op.axis
    yo, yi = st.split(y, factor=m)
    xo, xi = st.split(x, factor=m)
    st.reorder(n, kb, yo, xo, yi, xi, ki)
    st.parallel(st.fuse(n, kb, yo))
    st.unroll(yi)
    st.unroll(xi)
    st.vectorize(ki)
    _stack_pass(s, out_rows, st, xo)


def _stack_pass(s, t: te.Tensor, parent, loop):
    """A first (row) transform pass computed per iteration of `loop` of `parent`, on the stack:
    its a x a (or m x a) positions unrolled, its channels vectorized. Returns its tile axis
    (extent 1, outermost: where the input pass's pad copy goes)."""
    r = s[t]
    r.compute_at(parent, loop)
    r.set_scope("local")
    i, q, tile, c = r.op.axis
    r.reorder(tile, i, q, c)
    r.unroll(i)
    r.unroll(q)
    r.vectorize(c)
    return tile


def winograd_reference(x: np.ndarray, u: np.ndarray, padding, m: int, channels: int):
    """numpy: the NCHW output of the winograd conv of NCHW data x with packed weights u (the
    same algorithm in float64: the op's reference, independent of the te kernel)."""
    n, c, h, w = x.shape
    a, _, panels, _, nr = u.shape
    oh, ow = h + padding[0] + padding[2] - 2, w + padding[1] + padding[3] - 2
    th, tw = -(-oh // m), -(-ow // m)
    xp = np.zeros((n, c, th * m + 2, tw * m + 2))
    xp[:, :, padding[0] : padding[0] + h, padding[1] : padding[1] + w] = x
    at, _, bt = winograd_matrices(m)
    idx_h = (np.arange(th) * m)[:, None] + np.arange(a)  # the tiles: (n, c, th, tw, a, a)
    idx_w = (np.arange(tw) * m)[:, None] + np.arange(a)
    d = xp[:, :, idx_h[:, None, :, None], idx_w[None, :, None, :]]
    v = np.einsum("ip,ncyxpq,jq->ijnyxc", bt, d, bt)
    uu = u.astype(np.float64).transpose(0, 1, 3, 2, 4).reshape(a, a, c, panels * nr)
    mm = np.einsum("ijnyxc,ijck->ijnyxk", v, uu[..., :channels])
    y = np.einsum("pi,ijnyxk,qj->nkypxq", at, mm, at).reshape(n, channels, th * m, tw * m)
    return y[:, :, :oh, :ow].astype(x.dtype)
