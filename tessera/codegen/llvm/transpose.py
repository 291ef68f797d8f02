"""Strided vector loads that together read a whole tile, as contiguous loads and a register
transpose (Note [transposed loads]).

    transpose_stages(8, 8)    # the 2-input shuffles that turn 8 loaded rows into 8 columns
    TileReads.scan(stmts)     # the tiles a straight-line sequence of statements reads whole

The emitter (`emitter.py`) asks `TileReads` for each strided load; this module holds the
network of shuffles and the rule that picks the loads, nothing of LLVM's builder but the calls
the emitter hands it.
"""

from __future__ import annotations

from llvmlite import ir

from tessera.codegen.llvm import types as T
from tessera.ir.node import Visitor
from tessera.tir import expr as E

# Note [transposed loads]: an epilogue that reads a blocked tensor back in a plain layout
# (NCHW8c -> NCHW: an AVX2 int8 conv's int32 product read by its float epilogue, or a float
# model's layout_transform at the edge of its blocked convs) loads vectors whose lanes are
# `stride` (the block) elements apart: Note [strided loads] makes each one a span load and a
# shuffle, which x86 lowers to one scalar load and insert per lane (~15 uops a vector of 8).
# Where the schedule unrolls the block's channels inside the vector loop
# (topi/generic.py: Note [blocked reads]), one straight-line sequence reads all `stride`
# columns of a tile of `lanes` rows x `stride` columns: x[X + r + k*stride] for every r and k.
# That tile is `stride` contiguous vectors of `lanes` elements; loaded so and transposed in
# registers (log2 stages of two-input shuffles, each swapping one bit of the vector index with
# one bit of the lane index: unpck/shufps/vperm2f128 on x86), the eight columns of an 8 x 8
# tile cost 8 loads and 24 shuffles instead of 8 x 15 uops. The rule, general over dtypes,
# blocks and vector widths: stride and lanes powers of two, at most MAX_TILE_VECTORS vectors
# (the registers the transpose keeps live), every column of the tile read in one sequence
# (fewer would cost more than the strided loads they replace; and as the sequence has no
# branches, its loads read every element of the tile, which so lies in the buffer). The
# transposed columns are reused only in the basic block that loaded them, and dropped at a
# store to their buffer or any call.
MAX_TILE_VECTORS = 16


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def transpose_stages(stride: int, lanes: int, group: int = 1) -> tuple[list, list]:
    """The shuffles that turn `stride` vectors of `lanes` elements (a row-major [lanes x
    stride] tile) into its `stride` columns. Returns (stages, final): each stage a list, per
    output vector, of (first input, second input, mask) over the vectors before it; `final`
    per column r, (the vector of the last stage holding it, a one-input lane mask or None when
    its lanes are in order). `group`: the lanes an interleave instruction works within (Note
    [interleaved first stage])."""
    if not (_pow2(stride) and _pow2(lanes) and _pow2(group)):
        raise ValueError(f"a register transpose needs powers of two, got {stride} x {lanes}")
    vectors = [[v * lanes + q for q in range(lanes)] for v in range(stride)]
    if stride >= lanes:
        stages, vectors = _rows_first(vectors, stride, lanes, min(group, lanes))
    else:
        stages, vectors = _columns_first(vectors, stride, lanes)
    final = []
    for r in range(stride):
        want = [k * stride + r for k in range(lanes)]
        v = next(i for i, vec in enumerate(vectors) if sorted(vec) == want)
        mask = [vectors[v].index(e) for e in want]
        final.append((v, None if mask == list(range(lanes)) else mask))
    return stages, final


# Note [interleaved first stage]: x86's unpck{l,h}ps/pd/punpck* and NEON's zip1/zip2 interleave
# two vectors within each 128-bit group of lanes ([a0 b0 a1 b1 | a4 b4 a5 b5]): one instruction,
# where the plain exchange of lane bit 0 with a vector bit ([a0 b0 a2 b2 ...]) takes two on x86
# (a shuffle and a blend). A tile with at least as many columns as lanes starts with that
# interleave (it brings row bit 0 into lane bit 0 and moves the group's other lane bits up),
# then exchanges each remaining row bit into its lane bit (unpcklpd, vperm2f128, shuf_f32x4):
# the textbook 8 x 8 AVX transpose, 24 one-uop shuffles, derived for any size.
INTERLEAVE_BITS = 128


def _rows_first(vectors, stride: int, lanes: int, group: int):
    """Stages for stride >= lanes: every lane bit holds a column bit at first; bring row bit
    j into lane bit j, the first by an interleave within `group` lanes."""
    s, lbits = stride.bit_length() - 1, lanes.bit_length() - 1
    phys = list(range(s + lbits))  # phys[p]: the bit of the element number at physical bit p
    stages = []
    g = group.bit_length() - 1
    if g >= 2:
        vb = s - lbits  # row bit 0 (element bit s) is this vector bit
        stage, vectors = _zip_stage(vectors, vb, g - 1, lanes)
        stages.append(stage)
        old = list(phys)
        phys[0], phys[lbits + vb] = old[lbits + vb], old[g - 1]
        for a in range(1, g):
            phys[a] = old[a - 1]
    for j in range(lbits):
        p = phys.index(s + j)
        if p != j:  # p is a vector bit: lane bits below j hold their row bits already
            stage, vectors = _swap_stage(vectors, p - lbits, j, lanes)
            stages.append(stage)
            phys[j], phys[p] = phys[p], phys[j]
    return stages, vectors


def _columns_first(vectors, stride: int, lanes: int):
    """Stages for stride < lanes: bring column bit b into vector bit b."""
    s, lbits = stride.bit_length() - 1, lanes.bit_length() - 1
    # where[b]: the bit of the physical position (v * lanes + q) that holds bit b of the
    # element number; bits below lbits are lane bits, the rest vector bits
    where = list(range(s + lbits))
    stages = []
    for vb in range(s):
        phys = where[vb]
        want = lbits + vb
        if phys == want:
            continue
        holder = where.index(want)
        if phys >= lbits:  # both are vector bits: renumber the vectors, no instruction
            order = [_swap_bits(v, phys - lbits, vb) for v in range(stride)]
            vectors = [vectors[order[v]] for v in range(stride)]
        else:
            stage, vectors = _swap_stage(vectors, vb, phys, lanes)
            stages.append(stage)
        where[vb], where[holder] = want, phys
    return stages, vectors


def _zip_stage(vectors, vb: int, a: int, lanes: int):
    """Interleave each pair of vectors differing in vector bit vb within groups of 2**(a+1)
    lanes: the low halves of the groups into one vector, the high halves into the other."""
    width = 1 << (a + 1)

    def source(q, y):
        t = q & (width - 1)
        return (t & 1) * lanes + (q - t) + (y << a) + (t >> 1)

    return _pair_stage(vectors, vb, lanes, source)


def _swap_bits(n: int, a: int, b: int) -> int:
    if (n >> a & 1) == (n >> b & 1):
        return n
    return n ^ (1 << a) ^ (1 << b)


def _swap_stage(vectors, vb: int, lane_bit: int, lanes: int):
    """Exchange bit vb of the vector index with bit lane_bit of the lane index: each pair of
    vectors differing in vb gives two two-input shuffles."""

    def source(q, y):
        return (q >> lane_bit & 1) * lanes + (q & ~(1 << lane_bit) | y << lane_bit)

    return _pair_stage(vectors, vb, lanes, source)


def _pair_stage(vectors, vb: int, lanes: int, source):
    """Two-input shuffles of each pair of vectors differing in vector bit vb: output y of the
    pair takes in lane q element `source(q, y)` of the pair's concatenation."""
    stage, out = [None] * len(vectors), [None] * len(vectors)
    for v in range(len(vectors)):
        if v >> vb & 1:
            continue
        pair = (v, v | 1 << vb)
        for y in (0, 1):
            mask = [source(q, y) for q in range(lanes)]
            stage[pair[y]] = (pair[0], pair[1], mask)
            out[pair[y]] = [vectors[pair[m // lanes]][m % lanes] for m in mask]
    return stage, out


def _tile_of(index):
    """((key terms, constant start, row step, columns, lanes), column) of a strided Ramp load
    that may be a column of a tile, else None. The tile's first element is at the key terms
    plus the start; its `lanes` rows lie `row step` elements apart. A stride that is a small
    power of two is the block of a contiguous tile (rows of `stride` columns, row step
    `stride`: Note [transposed loads]); any other constant stride is the row step of a square
    tile of `lanes` columns (Note [square tiles])."""
    if not isinstance(index, E.Ramp) or not isinstance(index.stride, E.IntImm):
        return None
    stride, lanes = index.stride.value, index.lanes
    if stride < 2 or not _pow2(lanes) or lanes < 2:
        return None
    terms = _add_terms(index.base)
    const = sum(t.value for t in terms if isinstance(t, E.IntImm))
    rest = tuple(t for t in terms if not isinstance(t, E.IntImm))
    if _pow2(stride) and stride <= MAX_TILE_VECTORS:
        columns = stride
    elif lanes <= MAX_TILE_VECTORS:
        columns = lanes
    else:
        return None
    column = const % columns
    return (rest, const - column, stride, columns, lanes), column


# Note [square tiles]: the other direction, a plain tensor written in a blocked layout (NCHW ->
# NCHW8c: the input of a blocked conv after a split, a concat or a resize in NCHW), reads per
# output vector (the 8 channels of a block at one position) lanes one channel plane apart: a
# gather. The schedule unrolls the positions of a vector's width inside it (topi/generic.py:
# Note [blocked reads]), so one sequence reads columns r = 0..lanes-1 of x[X + r + k*plane]:
# a square tile of `lanes` rows (channels) `plane` apart, each row `lanes` contiguous
# positions. The same transpose makes it `lanes` loads of rows and the shuffles. Every element
# of a tile read whole is read by some load of the sequence, so the rows lie in the buffer.


def _add_terms(e) -> list:
    return _add_terms(e.a) + _add_terms(e.b) if isinstance(e, E.Add) else [e]


class TileReads:
    """The tiles one straight-line sequence reads whole, and their transposed columns once
    loaded (Note [transposed loads])."""

    def __init__(self):
        self.whole: set = set()  # keys of tiles whose every column some load reads
        self.loaded: dict = {}  # key -> (basic block, columns)

    def enter(self, stmts) -> set:
        """Before the straight-line statements `stmts` (a sequence: the tiles they read whole
        join those of the sequence around them; None: a loop's or branch's body, which starts
        afresh). Returns what `leave` restores."""
        saved = self.whole
        if stmts is None:
            self.whole = set()
            return saved
        columns: dict = {}
        for key, column in _strided_loads(stmts):
            columns.setdefault(key, set()).add(column)  # key[-2]: the tile's columns
        self.whole = saved | {key for key, cols in columns.items() if len(cols) == key[-2]}
        return saved

    def leave(self, saved: set) -> None:
        self.whole = saved

    def load(self, em, buf, index):
        """The column `index` reads, from the transposed tile (loading it on first use), or None
        when the load is not a column of a tile read whole."""
        tile = _tile_of(index)
        if tile is None or buf.dtype.is_bool or buf.dtype.lanes != 1:
            return None
        key = (id(buf), *tile[0])
        if key not in self.whole:
            return None
        got = self.loaded.get(key)
        if got is None or got[0] is not em.b.block:
            columns = self._transpose(em, buf, index.base.dtype, *tile[0])
            got = self.loaded[key] = (em.b.block, columns)
        return got[1][tile[1]]

    def forget(self, buf=None) -> None:
        """Drop the loaded tiles of `buf` (every tile when None): a store or a call between."""
        if buf is None:
            self.loaded.clear()
        else:
            self.loaded = {k: v for k, v in self.loaded.items() if k[0] != id(buf)}

    @staticmethod
    def _transpose(em, buf, dtype, rest, start, row_step, columns, lanes):
        first = E.IntImm(start, dtype)
        for t in rest:
            first = E.Add(t, first)
        vec_ty = T.storage_type(buf.dtype.with_lanes(lanes))
        step = row_step if columns == lanes else lanes  # square: a row a vector
        vectors = []
        for v in range(columns):
            at = E.Add(first, E.IntImm(v * step, dtype)) if v else first
            p = em._element_ptr(buf, em._index_value(buf, at), dtype)
            p = em.b.bitcast(p, vec_ty.as_pointer())
            vectors.append(em.b.load(p, align=em._align_of(buf, at)))
        group = max(1, INTERLEAVE_BITS // (8 * buf.dtype.itemsize))
        stages, final = transpose_stages(columns, lanes, group)
        for stage in stages:
            vectors = [
                em.b.shuffle_vector(vectors[a], vectors[b], ir.Constant(_mask_type(m), m))
                for a, b, m in stage
            ]
        undef = ir.Constant(vec_ty, ir.Undefined)
        return [
            vectors[v]
            if m is None
            else em.b.shuffle_vector(vectors[v], undef, ir.Constant(_mask_type(m), m))
            for v, m in final
        ]


def _mask_type(mask):
    return ir.VectorType(T.I32, len(mask))


class _StridedLoads(Visitor):
    """(tile key, column) of every strided load of straight-line statements: not inside loops
    or branches, whose blocks are not the sequence's."""

    def __init__(self):
        self.found = []

    def visit_BufferLoad(self, e):
        tile = _tile_of(e.indices[0]) if len(e.indices) == 1 else None
        if tile is not None:
            self.found.append(((id(e.buffer), *tile[0]), tile[1]))
        self.generic_visit(e)

    def visit_Call(self, e):
        if e.op == "if_then_else" and e.dtype.lanes == 1:  # branches: only its condition runs
            self.visit(e.args[0])
            return None
        return self.generic_visit(e)

    def visit_For(self, s):
        return None

    visit_IfThenElse = visit_Allocate = visit_For


def _strided_loads(stmts):
    v = _StridedLoads()
    for s in stmts:
        v.visit(s)
    return v.found
