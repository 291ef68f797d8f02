"""x86 dense / matmul: weights packed into panels, a register-blocked micro-kernel, fused epilogues.

    blk = choose_blocking(target, M, N, K)          # mr x nr register tile, kc, from rules
    wp = pack_weight_np(w, blk.nr, transposed=True)  # (ceil(N / nr), K, nr), zero-padded past N
    y = dense_packed(x, wp_tensor, units=N)          # x (..., K) -> (..., N)
    s = schedule_dense_packed([gelu(y + bias)], target)

The kernel computes C = A @ B with B in panels of nr columns (each K x nr, contiguous), so the
micro-kernel streams a panel with aligned vector loads and broadcasts one element of A per row
and step of k into mr x nv vector accumulators that stay in registers for the whole k loop.
Tiles run in parallel, panel-major (a thread reuses its panel from L2 across row tiles). The
group's element-wise epilogue (bias, GELU, residual add) is applied to each tile right after its
k loop, while the tile is in cache. Row and column tails are guarded, and the guards are peeled
off a guard-free main part by partition_loop (Note [tails]).

Note [row view]: x's leading axes are rows of one matrix (M = their product). The reduction is
computed on a 2-D (M, N) view and the output stage reads it back with the leading index raveled,
so fusing the output's leading loops gives the row loop that is tiled by mr.

Note [tails]: when the rows (M) or columns (N) do not divide into mr x nr tiles, the partial
tiles' guards (`ro*mr + ri < M`, `no*nr + ni < N`) must stay affine in one loop var each, or
partition_loop cannot peel them and every tile keeps per-element guards in its register block
(LLVM then spills the accumulators: 20x slower, e.g. [40 x 120] x [120 x 18710]). So the tile
loops are not fused into one parallel loop then; the parallel loop is the first of the batch
(fused), the column panels or the row tiles that has `parallel_tasks(target)` iterations (four
per core: cpu.py; else the largest), and the others run inside it, each peeled into its whole
tiles and its tail.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from tessera import te
from tessera.ir.dtype import DType
from tessera.target import Target
from tessera.topi.generic import inline_injective, traverse
from tessera.topi.rules import RuleKnob
from tessera.topi.strategy import Config, record_config
from tessera.topi.symbolic import (
    all_static,
    dispatch_by_size,
    product,
    representative,
    representative_shape,
    shape_vars,
    static_or_none,
)
from tessera.topi.transform import ravel, unravel_rows
from tessera.topi.x86.cpu import (
    DEFAULT_CACHES,
    parallel_tasks,
    stack_share,
    target_cache_sizes,
    vector_registers,
)

PACKED_TAG = "dense_packed"
# Note [tile waste]'s rule knobs (Note [rule knobs] in topi/rules.py)
TILE_INTENSITY = RuleKnob(
    "dense.tile_intensity", (0.6, 0.7, 0.8, 0.9), 0.8,
    "a tile that wastes less keeps this share of the best FMAs per load (Note [tile waste])",
)  # fmt: skip
TILE_GAIN = RuleKnob(
    "dense.tile_gain", (0.0, 0.05, 0.1, 0.2), 0.1,
    "... and replaces the densest tile only when its useful share is this much higher",
)  # fmt: skip
LARGE_MATRIX = RuleKnob(
    "dense.panel_rows", (256, 512, 1024, 2048, 4096), 1024,
    "packed weight panels are as wide as for M = K = this (a large matrix: the widest tile)",
)  # fmt: skip


@dataclass(frozen=True)
class Blocking:
    """The block sizes of the micro-kernel: an mr x (nv * lanes) register tile, k blocks of kc."""

    lanes: int  # float32 per vector register
    registers: int  # vector registers of the target
    mr: int  # rows of C in the micro-kernel (one broadcast of A each)
    nv: int  # vectors per row of the micro-kernel (nr = nv * lanes columns, one B panel)
    kc: int  # k block: a kc x nr slice of the B panel and mr x kc of A stay in L1
    l1: int
    l2: int
    parallel: str | None = None  # with partial tiles: "batch", "cols" or "rows" (Note [tails])
    tasks: int | None = None  # iterations that balance the threads (cpu.parallel_tasks)
    unroll_k: int = 1  # steps of k unrolled around the register block (Note [k unrolling])
    # Note [cache blocks]: "tile" (k blocks inside each tile: today's) or "block" (k blocks
    # around the tiles of a block of mc row tiles x nc panels; 0: all of them)
    kc_scope: str = "tile"
    mc: int = 0
    nc: int = 0

    @property
    def nr(self) -> int:
        return self.nv * self.lanes

    def describe(self, K: int) -> str:
        panel = K * self.nr * 4
        return (
            f"micro-kernel {self.mr}x{self.nr} ({self.mr} rows x {self.nv} vectors of "
            f"{self.lanes} lanes, {self.mr * self.nv} of {self.registers} vector registers hold "
            f"C), kc={self.kc} (L1 {self.l1 >> 10} KiB), B panel {K}x{self.nr} = "
            f"{panel >> 10} KiB (L2 {self.l2 >> 10} KiB)"
        )


def _lanes(target, dtype="float32") -> int:
    return max(1, target.vector_lanes(dtype)) if target is not None else 4


def choose_blocking(target, M: int, N: int, K: int, caches=None, nv: int | None = None,
                    dtype: str = "float32"):  # fmt: skip
    """Block sizes by rules from the target, never from a table of shapes.

    The micro-kernel holds mr x nv accumulators, nv vectors of a B row and one broadcast of A in
    registers (mr*nv + nv + 1 <= registers) and does mr*nv FMAs per mr + nv loads, so it takes
    the (mr, nv) with the most FMAs per load; nv is a power of two so panels divide the usual
    sizes (`nv` given: the panel width is fixed, e.g. by packed weights). kc is the largest power
    of two whose B slice (kc x nr) and A slice (mr x kc) fit in L1.
    """
    if min(M, N, K) < 1:
        raise ValueError(f"matmul sizes must be positive, got M={M}, N={N}, K={K}")
    target = Target(target) if isinstance(target, str) else target
    if caches is None:
        caches = target_cache_sizes(target) if target is not None else dict(DEFAULT_CACHES)
    lanes, regs = _lanes(target, dtype), vector_registers(target)
    if nv is None:
        shapes = [((regs - v - 1) // v, v) for v in (1, 2, 4)]
        mr, nv = max(
            ((mr, v) for mr, v in shapes if mr >= 1), key=lambda p: (p[0] * p[1] / sum(p), p[1])
        )
        nv = min(nv, -(-N // lanes))  # no tile wider than the matrix
    mr = max(1, min((regs - nv - 1) // nv, M))
    l1 = caches.get(1, DEFAULT_CACHES[1])
    kc = _k_block(l1, mr, nv, lanes, K)
    l2 = caches.get(2, DEFAULT_CACHES[2])
    return Blocking(lanes, regs, mr, nv, kc, l1, l2, tasks=parallel_tasks(target))


def _k_block(l1: int, mr: int, nv: int, lanes: int, K: int) -> int:
    """The largest power of two whose B slice (kc x nr) and A slice (mr x kc) fit in L1."""
    kc = 1 << max(3, int(math.log2(max(8, l1 // ((mr + nv * lanes) * 4)))))
    return min(kc, K)


def fit_blocking(target, M: int, N: int, K: int, nv: int | None = None) -> Blocking:
    """Note [tile waste]: choose_blocking's register tile rechosen for the tiles' waste.

    A partial tile costs a whole one (its rows and vectors run, their results are dropped), so
    with M = 197 or N = 77 the most FMAs per load is not the fastest tile. Each (mr, nv) that
    fits the registers is rated by the useful share of its FMA slots: mr*nv FMAs per k step
    against mr + nv loads (whichever takes longer), times M*N over the rows and columns its
    tiles cover. Left out: tiles with under TILE_INTENSITY of the best FMAs per load (few
    accumulators hide FMA latency badly), tiles that make fewer tiles than parallel_tasks (or
    than choose_blocking's tile makes) to share among threads, and tiles with more vectors than
    rows (the B row's registers and LLVM's loads of the next k step make it spill: 3 x 7 did
    on AVX-512). Among the rest the highest rate (in percent) wins, then the most FMAs per
    load; it replaces choose_blocking's tile only when its rate is TILE_GAIN higher (a few
    percent of waste is not worth a smaller register block). `nv` given: the panel width is
    fixed (packed weights).
    """
    base = choose_blocking(target, M, N, K, nv=nv)
    lanes, regs = base.lanes, base.registers
    widths = [nv] if nv is not None else range(1, min(regs - 2, -(-N // lanes)) + 1)
    tiles = [(mr, v) for v in widths for mr in range(1, min((regs - v - 1) // v, M) + 1)]
    if not tiles:
        return base

    def intensity(tile):
        return tile[0] * tile[1] / (tile[0] + tile[1])

    def rate(tile):
        mr, v = tile
        covered = -(-M // mr) * mr * -(-N // (v * lanes)) * v * lanes
        return mr * v * M * N / covered / max(mr * v, mr + v)

    def count(tile):
        return -(-M // tile[0]) * -(-N // (tile[1] * lanes))

    best, intensity_share = max(intensity(t) for t in tiles), TILE_INTENSITY.value()
    enough = min(base.tasks, count((base.mr, base.nv)))
    tiles = [
        t
        for t in tiles
        if intensity(t) >= intensity_share * best and count(t) >= enough and t[0] >= min(t[1], M)
    ]
    if not tiles:
        return base
    mr, v = max(tiles, key=lambda t: (round(100 * rate(t)), intensity(t)))
    if rate((mr, v)) < (1 + TILE_GAIN.value()) * rate((base.mr, base.nv)):
        return base
    return dataclasses.replace(base, mr=mr, nv=v, kc=_k_block(base.l1, mr, v, lanes, K))


def panel_width(target, N: int) -> int:
    """Columns per packed weight panel (nr) for a weight of N output columns: the tile of a
    large matrix (LARGE_MATRIX rows and depth)."""
    large = LARGE_MATRIX.value()
    return choose_blocking(target, large, N, large).nr


# -- packed weights ------------------------------------------------------------------------------


def pack_weight_np(w: np.ndarray, nr: int, transposed: bool) -> np.ndarray:
    """w (K, N), or (N, K) when `transposed` (a dense weight), as (ceil(N / nr), K, nr) panels."""
    if w.ndim != 2 or nr < 1:
        raise ValueError(f"pack_weight: expects a 2-D weight and nr >= 1, got {w.shape}, nr={nr}")
    kn = w.T if transposed else w
    K, N = kn.shape
    panels = -(-N // nr)
    padded = np.zeros((K, panels * nr), dtype=w.dtype)
    padded[:, :N] = kn
    return np.ascontiguousarray(padded.reshape(K, panels, nr).transpose(1, 0, 2))


def _static(shape) -> list[int]:
    return [int(d.value) for d in shape]


def dense_packed(x: te.Tensor, wp: te.Tensor, units: int) -> te.Tensor:
    """x (..., K) @ the weight packed in wp (panels, K, nr) -> (..., units); see Note [row view]."""
    # leading dims may be symbolic (topi/symbolic.py): M is then their product's expression
    lead = [d if static_or_none(d) is None else static_or_none(d) for d in x.shape[:-1]]
    K = int(x.shape[-1].value)
    panels, kw, nr = _static(wp.shape)
    if kw != K or panels * nr < units or (panels - 1) * nr >= units:
        raise ValueError(f"dense_packed: data {x.shape}, packed weight {wp.shape}, units {units}")
    M = product(lead)

    k = te.reduce_axis((0, K), name="k")
    rows = te.compute(
        (M, units),
        lambda r, j: te.sum(x(*unravel_rows(r, lead), k) * wp[j // nr, k, j % nr], axis=k),
        name="dense",
        tag=PACKED_TAG,
        attrs={"nr": nr},
    )

    return te.compute(
        (*lead, units),
        lambda *i: rows(ravel(i[:-1], lead), i[-1]),
        name="dense_out",
        tag="injective",
    )


# -- the schedule --------------------------------------------------------------------------------


def find_tagged(outs, tag: str) -> te.Tensor:
    found = []
    traverse(outs, lambda op: found.append(op.output(0)) if op.tag == tag else None)
    if not found:
        raise ValueError(f"no stage tagged {tag!r} among {list(outs)}")
    return found[0]


def _extent(iv) -> int | None:
    return getattr(iv.dom.extent, "value", None)


def _output_axes(stage, row_axes: int):
    """`stage`'s loops as (batch, rows, col): its leading axes after `row_axes` outer batch
    axes are rows (extent-1 axes move out to the batch: see tile_output), the last is col."""
    axes = list(stage.op.axis)
    batch, rows, col = axes[:row_axes], axes[row_axes:-1], axes[-1]
    # axes of extent 1 stay outside the fused rows: a broadcasting epilogue indexes them with a
    # constant 0, which bound inference could not relate to the fused row index
    batch += [iv for iv in rows if _extent(iv) == 1]
    rows = [iv for iv in rows if _extent(iv) != 1]
    if len(rows) > 1:  # an extent-1 axis between two row axes ([9, 1, 33, 16]) moves out first
        stage.reorder(*batch, *rows, col)
    return batch, rows, col


def tile_output(s, out: te.Tensor, blk: Blocking, row_axes: int):
    """Tile `out`'s loops: its leading axes fused into rows (after `row_axes` outer batch axes,
    which stay outermost), mr x nr tiles, panel-major, all tiles in one parallel loop; the tile's
    nr columns vectorized. Returns the parallel loop (where the micro-kernel is computed)."""
    stage = s[out]
    batch, rows, col = _output_axes(stage, row_axes)
    # symbolic extents (Note [symbolic tails] in topi/symbolic.py): always tails; the rules
    # count tiles at the representative size
    n_rows = math.prod(representative(iv.dom.extent) for iv in rows) if rows else 1
    n_cols = representative(col.dom.extent)
    static = all(_extent(iv) is not None for iv in (*rows, col))
    if rows:
        row = stage.fuse(*rows) if len(rows) > 1 else rows[0]
        ro, no, ri, ni = stage.tile(row, col, blk.mr, blk.nr)
        stage.reorder(*batch, no, ro, ri, ni)
        tiles = [no, ro]
    else:
        no, ni = stage.split(col, factor=blk.nr)
        tiles = [no]
    if static and n_rows % blk.mr == 0 and n_cols % blk.nr == 0:
        outer = [*batch, *tiles]
        tile = stage.fuse(*outer) if len(outer) > 1 else outer[0]
        stage.parallel(tile)
    else:
        tile = _parallel_with_tails(stage, batch, tiles, n_rows, n_cols, blk)
    _vectorize_columns(stage, ni, blk)
    return tile


def _vectorize_columns(stage, cols, blk: Blocking) -> None:
    if blk.lanes > 1:
        _, lanes = stage.split(cols, factor=blk.lanes)
        stage.vectorize(lanes)


def tile_blocks(s, out: te.Tensor, blk: Blocking, row_axes: int):
    """Note [cache blocks]: `out`'s loops in blocks of mc row tiles x nc panels (blk.mc,
    blk.nc; 0: all), the blocks (with the batch) in one parallel loop, each block's columns
    vectorized. Returns the innermost block loop (where the block's accumulators are computed),
    or None when there is no loop outside a block (one block: computed at the root)."""
    stage = s[out]
    batch, rows, col = _output_axes(stage, row_axes)
    outer, inner = [], []
    if rows:
        row = stage.fuse(*rows) if len(rows) > 1 else rows[0]
        if blk.mc:
            rb, row = stage.split(row, factor=blk.mc * blk.mr)
            outer.append(rb)
        inner.append(row)
    if blk.nc:
        nb, col = stage.split(col, factor=blk.nc * blk.nr)
        outer.insert(0, nb)  # panel blocks outside row blocks: a thread keeps its panels
    stage.reorder(*batch, *outer, *inner, col)
    loops = [*batch, *outer]
    block = (stage.fuse(*loops) if len(loops) > 1 else loops[0]) if loops else None
    if block is not None:
        stage.parallel(block)
    _vectorize_columns(stage, col, blk)
    return block


def parallel_rule(n_batch: int, n_rows: int, n_cols: int, mr: int, nr: int, tasks: int) -> str:
    """Note [tails]: the loop that runs in parallel when the tiles have tails: the first of the
    batch, the column panels and the row tiles with `tasks` iterations (cpu.parallel_tasks),
    else the one with the most (n_batch 0: no batch loop; n_rows 0: no row loop)."""
    counts = {"batch": n_batch, "cols": -(-n_cols // nr), "rows": -(-n_rows // mr)}
    ready = [name for name, c in counts.items() if c >= tasks]
    return ready[0] if ready else max(counts, key=counts.get)


def _parallel_with_tails(stage, batch, tiles, n_rows: int, n_cols: int, blk: Blocking):
    """Note [tails]: the loops over tiles when rows or columns do not divide into whole tiles.
    No tile loop is fused with another, so that each tail guard stays affine in one loop var and
    partition_loop peels the partial tiles off a guard-free main part; the parallel loop is
    blk.parallel's (where this kernel has it), else parallel_rule's. Returns the innermost tile
    loop (where the micro-kernel goes)."""
    n_batch = math.prod(representative(iv.dom.extent) for iv in batch) if batch else 0
    if len(batch) > 1:
        batch = [stage.fuse(*batch)]
    n_rows = n_rows if len(tiles) > 1 else 0
    pick = blk.parallel
    if pick not in ("batch", "cols", "rows") or {"batch": n_batch, "rows": n_rows}.get(pick) == 0:
        pick = parallel_rule(n_batch, n_rows, n_cols, blk.mr, blk.nr, blk.tasks)
    no, ro = tiles[0], tiles[-1]
    if pick == "rows":
        stage.reorder(*batch, ro, no)
    stage.parallel({"batch": batch[0] if batch else None, "cols": no, "rows": ro}[pick])
    return no if pick == "rows" else ro


def schedule_micro_kernel(s, acc: te.Tensor, blk: Blocking) -> None:
    """The k loop of a (rows, cols) accumulator stage computed at a tile: k blocks of kc, then
    the mr x nv register block (unrolled) of vectors of `lanes` (vectorized). With kc_scope
    "block" (Note [cache blocks]) the stage is a block of tiles: the k blocks run around its
    tiles (panel-major), and each tile's register block runs over one k block."""
    stage = s[acc]
    *batch, ci, cj = stage.op.axis
    (ck,) = stage.op.reduce_axis
    ko, ki = stage.split(ck, factor=blk.kc)
    k_loops = [ko, ki]
    if blk.unroll_k > 1:  # Note [k unrolling]
        kio, kii = stage.split(ki, factor=blk.unroll_k)
        k_loops = [ko, kio, kii]
    tiles = []
    if blk.kc_scope == "block":
        cio, ci = stage.split(ci, factor=blk.mr)
        cjt, cj = stage.split(cj, factor=blk.nr)
        tiles = [cjt, cio]
        batch, k_loops = [*batch, k_loops[0]], k_loops[1:]
    if blk.lanes > 1:
        cjo, cjv = stage.split(cj, factor=blk.lanes)
        stage.reorder(*batch, *tiles, *k_loops, ci, cjo, cjv)
        stage.unroll(ci)
        stage.unroll(cjo)
        stage.vectorize(cjv)
    else:
        stage.reorder(*batch, *tiles, *k_loops, ci, cj)
        stage.unroll(ci)
        stage.unroll(cj)
    if blk.unroll_k > 1:
        stage.unroll(k_loops[-1])


# Note [k unrolling]
# The micro-kernel's k loop steps one k at a time: each step broadcasts mr elements of A, loads
# nv vectors of the B panel and issues mr x nv FMAs, then the loop's increment, compare and
# branch. Knob `unroll_k` (1, the default: today's loop; 2, 4, 8) splits the k block's loop
# and unrolls the inner steps: one increment and branch per `unroll_k` steps, and several
# steps' loads at constant offsets of one address, which LLVM may schedule under the previous
# step's FMAs; more code, and no change to the sums' order. A knob of the "blocked" and
# "packed" products whose k block it divides (a split that does not divide would guard every
# unrolled step). Measured alone on BERT-base's matmuls (docs/tuning.md, "Where tuning can
# gain"): 8-21% faster than the rolled loop at 2 threads on an AVX2 host under load, so the
# tuner has something to find; the default stays today's loop until a quiet model-level
# measurement says otherwise.


# Note [cache blocks]
# Knob `kc` splits each tile's k loop (kc_scope "tile", the default: today's loop nest): the
# tile's accumulators stay in registers over all of K, so the k block is no cache block: a
# tile streams its whole B panel (K x nr) and mr rows of A, and the next row tile streams the
# same panel again, from L1 only while K x nr fits there (BERT-base's 768 x 16 floats, 48 KiB,
# do not fit a 32 KiB L1). Knob `kc_scope` "block" makes it one (BLIS's loop nest): the output
# is cut into blocks of `mc` row tiles x `nc` panels (0: all the rows / panels; tile_blocks),
# the blocks (with the batch) are the parallel loop, and each block's accumulator stage runs
#     for k blocks of kc:  for panels of the block:  for row tiles of the block:
#         for k in the block: the mr x nv register block
# so a kc x nr slice of a panel stays in L1 across the block's row tiles and the block's A
# rows (mc*mr x kc) in L2 across its panels. The partial sums stay in the block's buffer
# across k blocks (mc*mr x nc*nr floats: on the stack, on the heap where they take over 1/16 of
# the thread stack, `stack_share`); within one k block LLVM keeps the tile's accumulators in
# registers (the tile's addresses do not change in the k loop: loaded before it, stored after
# it; tests/topi/test_gemm_cache_blocks.py reads the assembly). Tails: a block past the rows
# or columns is guarded as the tiles are; where an extent is symbolic the blocks must have a
# constant size (mc, nc > 0: the clamped tails of Note [clamped tails] in te/lower.py stay
# inside a buffer of the block's size, not one of the symbolic extent, which they overran).
# One block of all outputs (mc = nc = 0, no batch) has no parallel loop. The sums' order is
# the same (k ascending) in both scopes. Knobs of "blocked" and "packed"; mc and nc only with
# the block scope (else they would name the same loop nest); the default stays "tile"
# (measurements: docs/performance.md, "GEMM cache blocks").


def schedule_gemm(s, outs, anchor, blk: Blocking, target, row_axes: int = 0) -> te.Schedule:
    """Schedule a matrix-product anchor (a reduction whose last two axes are rows x cols) with
    the group's outputs: accumulators in registers at each tile of the output (fused epilogue),
    or, when the outputs are not shaped like the anchor's view, at the anchor's own tiles."""
    from tessera.topi import generic

    if blk.tasks is None:  # a blocking made without choose_blocking (int8's)
        blk = dataclasses.replace(blk, tasks=parallel_tasks(target))
    acc = s.cache_write(anchor, "local")
    if not all_static(anchor.shape):  # Note [clamped tails] in te/lower.py
        s[acc].clamp_tails()
    view = [t for t in outs if t.op is not anchor.op]
    tiling = tile_blocks if blk.kc_scope == "block" else tile_output  # Note [cache blocks]
    if tiling is tile_blocks and not all_static(anchor.shape) and not (blk.mc and blk.nc):
        raise ValueError(
            f"kc_scope 'block' of a product with symbolic extents {list(anchor.shape)} needs "
            f"blocks of a constant size, mc > 0 and nc > 0 (got mc={blk.mc}, nc={blk.nc})"
        )
    fused = len(outs) == 1 and view and _view_of(outs[0], anchor, row_axes)
    if fused:
        s[anchor].compute_inline()
    out = outs[0] if fused else anchor
    tile = tiling(s, out, blk, row_axes if fused else len(anchor.shape) - 2)
    if tile is not None:
        s[acc].compute_at(s[out], tile)
    if blk.kc_scope == "block" and _block_bytes(anchor, blk, tile) > stack_share(target, 16):
        s[acc].set_scope("global")  # Note [cache blocks]: a large block's sums on the heap
    for t in [] if fused else view:
        generic.schedule_elementwise_stage(s, t, target)
    schedule_micro_kernel(s, acc, blk)
    return s


def _block_bytes(anchor: te.Tensor, blk: Blocking, tile) -> int:
    """Bytes of the partial sums of one block of `anchor` (Note [cache blocks]): mc row tiles
    x nc panels (0: all), times the batch where the block is computed at the root (`tile`
    None), at the representative sizes of symbolic extents."""
    shape = [representative(d) for d in anchor.shape]
    rows, cols = shape[-2], shape[-1]
    rows = min(rows, blk.mc * blk.mr) if blk.mc else rows
    cols = min(cols, blk.nc * blk.nr) if blk.nc else cols
    batch = math.prod(shape[:-2]) if tile is None else 1
    return batch * rows * cols * DType.parse(str(anchor.dtype)).itemsize


def _view_of(out: te.Tensor, anchor: te.Tensor, row_axes: int) -> bool:
    """Does `out` have the anchor's rows x cols (a 2-D anchor: its leading axes raveled into the
    rows, see Note [row view]; else the very same shape)?"""
    o, a = list(out.shape), list(anchor.shape)
    if row_axes or len(a) != 2:
        return len(o) == len(a) and all(_same(x, y) for x, y in zip(o, a, strict=True))
    return len(o) >= 1 and _same(o[-1], a[-1]) and _same(product(o[:-1]), a[0])


def _same(a, b) -> bool:
    from tessera.arith import Analyzer

    return Analyzer().can_prove_equal(a, b)


def schedule_dense_packed(outs, target=None, config=None) -> te.Schedule:
    """A group anchored by dense_packed (see the module docstring); `config`: the x86
    strategy's knobs (mr, kc; nv is the packed panel's), None: the rules."""
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    anchor = find_tagged(outs, PACKED_TAG)
    if config is not None and not config.get("size_buckets", False):
        return _packed_and_key(outs, target, config)[0]  # one tile
    # symbolic rows: the rules' tiles per size bucket, a config's for the top one
    # (Note [size buckets] in topi/symbolic.py)
    rows = list(anchor.shape[:-1])
    return dispatch_by_size(
        shape_vars(anchor.shape),
        lambda: _packed_and_key(outs, target, None),
        None if config is None else lambda: _packed_and_key(outs, target, config),
        size=product(rows) if len(shape_vars(rows)) > 1 else None,
    )


def _packed_and_key(outs, target, config):
    s = te.create_schedule([t.op for t in outs])
    inline_injective(s, outs)
    anchor = find_tagged(outs, PACKED_TAG)
    M, N = representative_shape(anchor.shape)
    nr = int(anchor.op.attrs["nr"])
    K = int(anchor.op.reduce_axis[0].dom.extent.value)
    blk = with_parallel(
        with_config(blocking_for_panel(target, M, N, K, nr, fit=True), config), 0, M, N
    )
    record_config(s, Config("packed", knob_values(blk)))
    return schedule_gemm(s, outs, anchor, blk, target), knob_values(blk)


def with_parallel(blk: Blocking, n_batch: int, M: int, N: int) -> Blocking:
    """The blocking with parallel_rule's loop, where no config chose one."""
    if blk.parallel is not None:
        return blk
    pick = parallel_rule(n_batch, M, N, blk.mr, blk.nr, blk.tasks)
    return dataclasses.replace(blk, parallel=pick)


def knob_values(blk: Blocking) -> dict:
    """The strategy's knobs (topi/x86/strategy.py) as this blocking sets them."""
    return {
        "mr": blk.mr, "nv": blk.nv, "kc": blk.kc, "parallel": blk.parallel,
        "unroll_k": blk.unroll_k, "kc_scope": blk.kc_scope, "mc": blk.mc, "nc": blk.nc,
    }  # fmt: skip


def with_config(blk: Blocking, config) -> Blocking:
    """The blocking with the config's rows (mr), k block (kc) and parallel loop (when the
    config has one), when a config is given."""
    if config is None:
        return blk
    get = config.get
    return dataclasses.replace(
        blk, mr=config["mr"], kc=config["kc"], parallel=get("parallel"),
        unroll_k=get("unroll_k", 1), kc_scope=get("kc_scope", "tile"), mc=get("mc", 0),
        nc=get("nc", 0),
    )  # fmt: skip


def blocking_for_panel(target, M: int, N: int, K: int, nr: int, fit: bool = False) -> Blocking:
    """The blocking of a kernel whose weight panels are nr wide (packed for this target, or not:
    then vectors as wide as divide nr); `fit`: rows chosen for the tiles' waste (fit_blocking)."""
    lanes = _lanes(target)
    while nr % lanes:
        lanes //= 2
    choose = fit_blocking if fit and lanes == _lanes(target) else choose_blocking
    blk = choose(target, M, N, K, nv=nr // lanes)
    return dataclasses.replace(blk, lanes=lanes, nv=nr // lanes)
