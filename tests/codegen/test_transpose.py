"""Blocked tensors read in a plain layout (Note [blocked reads], Note [transposed loads]): the
transpose network, the schedule rule, numerics of NCHW[b]c -> NCHW element-wise chains for
every block, dtype and tail against numpy on haswell, x86-64 and C, and the code per ISA."""

import re

import numpy as np
import pytest

import tessera
from tessera import te, tir
from tessera.codegen.llvm import build_llvm
from tessera.codegen.llvm.transpose import TileReads, transpose_stages
from tessera.ir.module import IRModule
from tessera.tir import (
    BufferStore,
    For,
    ForKind,
    IfThenElse,
    IntImm,
    PrimFunc,
    Ramp,
    SeqStmt,
    Var,
    decl_buffer,
)
from tessera.topi import generic
from tessera.topi.layout import layout_transform, transform_array

RNG = np.random.default_rng(0)
HASWELL = "llvm -mcpu=haswell"


@pytest.mark.parametrize("stride", [2, 4, 8, 16])
@pytest.mark.parametrize("lanes", [2, 4, 8, 16, 32])
@pytest.mark.parametrize("group", [1, 4, 16])
def test_transpose_stages_turn_rows_into_columns(stride, lanes, group):
    stages, final = transpose_stages(stride, lanes, group)
    vectors = [list(range(v * lanes, (v + 1) * lanes)) for v in range(stride)]
    for stage in stages:
        vectors = [[(vectors[a] + vectors[b])[m] for m in mask] for a, b, mask in stage]
    columns = [vectors[v] if m is None else [vectors[v][i] for i in m] for v, m in final]
    assert columns == [[k * stride + r for k in range(lanes)] for r in range(stride)]
    # one stage per bit of the smaller side; square tiles need no lane fix-up at the end
    assert len(stages) == min(stride, lanes).bit_length() - 1
    if stride == lanes:
        assert all(m is None for _, m in final)


def _epilogue(shape, block, dtype, channels=None, silu=True):
    """te: x (NCHW{block}c, `shape`) -> NCHW (sliced to `channels`), then x * sigmoid(x)."""
    x = te.placeholder(shape, dtype, name="x")
    y = layout_transform(x, f"NCHW{block}c", "NCHW")
    if channels is not None:
        n, _, h, w = y.shape
        y = te.compute((n, channels, h, w), lambda *i: y(*i), name="slice", tag="injective")
    if not silu:
        return x, y
    out_dtype = "float32"

    def f(*i):
        v = y(*i).astype(out_dtype)
        return v * te.sigmoid(v)

    return x, te.compute(y.shape, f, name="silu", tag="injective")


def _build(target, cases):
    funcs = {}
    for k, (x, z) in enumerate(cases):
        s = generic.schedule_injective([z], tessera.Target(target))
        funcs[f"case{k}"] = te.lower(s, [x, z], name=f"case{k}")
    return tessera.build(IRModule(funcs), target=target), funcs


def _reference(xa, block, channels, silu):
    y = transform_array(xa, f"NCHW{block}c", "NCHW")[:, :channels]
    if not silu:
        return y
    y = y.astype("float64")
    return y / (1 + np.exp(-y))


CASES = [  # (N, C / block, H, W, block), dtype, channels after a slice, silu
    ((1, 3, 5, 37, 8), "float32", None, True),  # W: 4 vectors and a tail of 5
    ((2, 2, 3, 16, 8), "int32", None, True),  # the int8 conv's product, batch 2
    ((1, 2, 3, 19, 16), "float32", None, False),  # the float convs' block on AVX-512
    ((1, 3, 2, 9, 4), "float32", None, True),
    ((1, 2, 3, 40, 2), "float32", None, False),
    ((1, 2, 2, 70, 8), "int8", None, False),  # 32 lanes of int8 on AVX2
    ((1, 3, 3, 24, 8), "float32", 21, True),  # channels not a multiple of the block
    ((1, 1, 1, 5, 8), "float32", None, True),  # shorter than a vector
]


@pytest.mark.parametrize("target", [HASWELL, "llvm -mcpu=x86-64", "c"])
def test_blocked_to_plain_chains_match_numpy(target):
    cases, inputs = [], []
    for shape, dtype, channels, silu in CASES:
        block = shape[-1]
        cases.append(_epilogue(shape, block, dtype, channels, silu))
        if dtype.startswith("int"):
            xa = RNG.integers(-100, 100, shape).astype(dtype)
        else:
            xa = RNG.standard_normal(shape).astype(dtype)
        inputs.append(xa)
    mod, _ = _build(target, cases)
    for k, ((_, z), xa, (shape, _, channels, silu)) in enumerate(
        zip(cases, inputs, CASES, strict=True)
    ):
        out = np.empty(tuple(int(d.value) for d in z.shape), z.dtype)
        mod[f"case{k}"](xa, out)
        want = _reference(xa, shape[-1], channels, silu)
        if silu:
            np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
        else:
            np.testing.assert_array_equal(out, want)


def test_schedule_unrolls_the_block_inside_the_vector_loop():
    x, z = _epilogue((1, 3, 5, 37, 8), 8, "float32")
    s = generic.schedule_injective([z], tessera.Target(HASWELL))
    text = str(te.lower(s, [x, z], name="k"))
    assert re.search(r"unrolled \(i1.inner: int32, 0, 8\)", text)
    # channels not a multiple of the block: guarded channels would split the sequence
    x, z = _epilogue((1, 3, 3, 24, 8), 8, "float32", channels=21)
    s = generic.schedule_injective([z], tessera.Target(HASWELL))
    assert "unrolled" not in str(te.lower(s, [x, z], name="k"))


def _main_loop_counts(target, shape, dtype="float32", silu=False):
    mod, _ = _build(target, [_epilogue(shape, shape[-1], dtype, silu=silu)])
    asm = mod.get_source("asm")
    return {m: len(re.findall(rf"\b{m}", asm)) for m in ("vinsertps", "vpinsrd", "vperm2")}, asm


def test_haswell_reads_8x8_tiles_as_loads_and_shuffles():
    """The tile loads and the unpck/shufps/vperm2f128 network, no per-lane inserts (before:
    one vinsertps per lane of every vector)."""
    counts, asm = _main_loop_counts(HASWELL, (1, 4, 4, 64, 8))
    assert counts["vinsertps"] == 0 and counts["vperm2"] > 0, counts
    counts, _ = _main_loop_counts(HASWELL, (1, 4, 4, 64, 8), "int32", silu=True)
    assert counts["vpinsrd"] == 0 and counts["vinsertps"] == 0, counts


def test_avx512_reads_16x16_tiles_compile_only():
    counts, asm = _main_loop_counts("llvm -mcpu=skylake-avx512", (1, 2, 4, 64, 16))
    assert counts["vinsertps"] == 0, counts
    assert re.search(r"\bvpermt2ps|\bvshuff|\bvunpck", asm)


def test_a_tile_read_in_part_keeps_the_strided_load():
    """One column of eight read (a stride-8 sampling, not a transform): no tile, no transpose."""
    x = te.placeholder((4, 64, 8), "float32", name="x")
    z = te.compute((4, 64), lambda i, j: x[i, j, 3] * 2.0, name="col", tag="injective")
    s = generic.schedule_injective([z], tessera.Target(HASWELL))
    mod = tessera.build(IRModule({"k": te.lower(s, [x, z], name="k")}), target=HASWELL)
    xa = RNG.standard_normal((4, 64, 8)).astype("float32")
    out = np.empty((4, 64), "float32")
    mod["k"](xa, out)
    np.testing.assert_array_equal(out, xa[:, :, 3] * 2)
    assert "vperm2" not in mod.get_source("asm")


def _tile_sequence(guard_column=None):
    """Statements storing the 8 columns of a tile x[i*64 + r + 8k] (k < 8) each to its row of
    c; column `guard_column`'s store inside a branch."""
    x = decl_buffer((64 * 4,), "float32", "x")
    c = decl_buffer((64 * 4,), "float32", "c")
    i = Var("i", "int32")
    stores = []
    for r in range(8):
        load = tir.BufferLoad(x, (Ramp(i * 64 + r, IntImm(8), 8),))
        store = BufferStore(c, load, (Ramp(i * 64 + r * 8, IntImm(1), 8),))
        stores.append(IfThenElse(i < 2, store) if r == guard_column else store)
    return x, c, i, SeqStmt(stores)


def test_tiles_are_read_whole_only_outside_branches():
    tiles = TileReads()
    *_, seq = _tile_sequence()
    tiles.enter(seq.seq)
    assert len(tiles.whole) == 1
    tiles = TileReads()
    *_, seq = _tile_sequence(guard_column=3)
    tiles.enter(seq.seq)
    assert not tiles.whole


def test_tile_sequence_in_a_loop_matches_numpy():
    x, c, i, seq = _tile_sequence()
    mod = build_llvm([PrimFunc("tile", [x, c], For(i, 0, 4, ForKind.SERIAL, seq))])
    xa = RNG.standard_normal(256).astype("float32")
    out = np.empty(256, "float32")
    mod["tile"](xa, out)
    want = xa.reshape(4, 8, 8).transpose(0, 2, 1).reshape(256)
    np.testing.assert_array_equal(out, want)
    assert "<57 x float>" not in mod.get_source("ll")  # no span load of Note [strided loads]


PLAIN_CASES = [  # NCHW shape, block, dtype
    ((1, 24, 5, 37), 8, "float32"),  # positions: 4 tiles and a tail of 5 per row
    ((2, 16, 3, 16), 8, "int32"),
    ((1, 32, 3, 19), 16, "float32"),  # a block of two vectors on AVX2 (no tile), one on AVX-512
    ((1, 8, 2, 9), 4, "float32"),
    ((1, 16, 2, 70), 8, "uint8"),  # 32 lanes of uint8: the block is not a vector, no tile
    ((1, 8, 1, 3), 8, "float32"),  # fewer positions than a tile
]


@pytest.mark.parametrize("target", [HASWELL, "llvm -mcpu=x86-64", "c"])
def test_plain_to_blocked_transforms_match_numpy(target):
    cases, inputs = [], []
    for shape, block, dtype in PLAIN_CASES:
        x = te.placeholder(shape, dtype, name="x")
        cases.append((x, layout_transform(x, "NCHW", f"NCHW{block}c")))
        inputs.append((RNG.standard_normal(shape) * 50).astype(dtype))
    mod, _ = _build(target, cases)
    for k, ((_, z), xa, (_, block, _)) in enumerate(zip(cases, inputs, PLAIN_CASES, strict=True)):
        out = np.empty(tuple(int(d.value) for d in z.shape), z.dtype)
        mod[f"case{k}"](xa, out)
        np.testing.assert_array_equal(out, transform_array(xa, "NCHW", f"NCHW{block}c"))


def test_haswell_writes_blocks_from_square_tiles():
    """NCHW -> NCHW8c: the positions unrolled inside the channel vector, rows of 8 positions
    loaded and transposed (vunpck, vperm2f128), no per-lane inserts (before: 8 a vector)."""
    x = te.placeholder((1, 16, 4, 64), "float32", name="x")
    z = layout_transform(x, "NCHW", "NCHW8c")
    s = generic.schedule_injective([z], tessera.Target(HASWELL))
    assert re.search(r"unrolled \(i3.inner: int32, 0, 8\)", str(te.lower(s, [x, z], name="k")))
    mod, _ = _build(HASWELL, [(x, z)])
    asm = mod.get_source("asm")
    assert not re.search(r"\bvinsertps", asm) and re.search(r"\bvperm2f128", asm)


@pytest.mark.parametrize("offset", [16, 4])
def test_split_of_a_blocked_tensor_reads_tiles(offset):
    """A channel split after NCHW8c -> NCHW reads x[.., (c + offset) % 8]: tiled too; an offset
    that is not a multiple of the block straddles two blocks (values still exact)."""
    x = te.placeholder((1, 4, 3, 40, 8), "float32", name="x")
    y = layout_transform(x, "NCHW8c", "NCHW")
    z = te.compute(
        (1, 16, 3, 40), lambda n, c, h, w: y[n, c + offset, h, w], name="split", tag="injective"
    )
    z = te.compute(z.shape, lambda *i: z(*i), name="out", tag="injective")
    mod, funcs = _build(HASWELL, [(x, z)])
    assert "unrolled" in str(funcs["case0"])
    xa = RNG.standard_normal((1, 4, 3, 40, 8)).astype("float32")
    out = np.empty((1, 16, 3, 40), "float32")
    mod["case0"](xa, out)
    want = transform_array(xa, "NCHW8c", "NCHW")[:, offset : offset + 16]
    np.testing.assert_array_equal(out, want)
    if offset % 8 == 0:
        assert not re.search(r"\bvinsertps", mod.get_source("asm"))


@pytest.mark.parametrize("src, dst", [("NCHW4c", "NCHW"), ("NCHW", "NCHW4c")])
def test_aarch64_tiles_are_neon_zips_compile_only(src, dst):
    """NEON (4 float lanes): 4 x 4 tiles by zip1/zip2, no per-lane `ld1 {v.s}[k]` (before: 3
    of them a vector)."""
    shape = (1, 2, 4, 64, 4) if src != "NCHW" else (1, 8, 4, 64)
    x = te.placeholder(shape, "float32", name="x")
    mod, _ = _build(
        "llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a76", [(x, layout_transform(x, src, dst))]
    )
    asm = mod.get_source("asm")
    assert re.search(r"\bzip1\b", asm) and not re.search(r"ld1\s*\{ v\d+\.s \}\[", asm)


# Note [transposed tiles]: a transpose whose innermost output axis is read with a stride (the
# input's innermost index another output axis) runs in lanes x lanes tiles, any extents


def _transpose_module(target, shapes_perms):
    from tessera.topi import transform as topi_transform

    funcs, arrays = {}, []
    for k, (shape, perm) in enumerate(shapes_perms):
        x = te.placeholder(shape, "float32", name="x")
        y = topi_transform.transpose(x, perm)
        s = generic.schedule_injective([y], tessera.Target(target))
        funcs[f"case{k}"] = te.lower(s, [x, y], name=f"case{k}")
        arrays.append(RNG.standard_normal(shape).astype("float32"))
    return tessera.build(IRModule(funcs), target=target), funcs, arrays


@pytest.mark.parametrize("target", [HASWELL, "llvm -mcpu=x86-64"])
def test_strided_transposes_match_numpy(target):
    import itertools

    # every rank-4 perm that moves the innermost axis, odd extents (tails of both tile sides)
    perms = [p for p in itertools.permutations(range(4)) if p[-1] != 3]
    cases = [((3, 5, 19, 13), p) for p in perms] + [((24, 10, 118, 26), (3, 0, 1, 2))]
    cases.append(((2, 16, 8, 8), (0, 2, 3, 1)))
    _check_transposes(target, cases)


def _check_transposes(target, cases):
    """Build the (shape, perm) transposes in one module; each equals numpy's exactly."""
    mod, _, arrays = _transpose_module(target, cases)
    for k, ((shape, perm), xa) in enumerate(zip(cases, arrays, strict=True)):
        out = np.empty(np.transpose(xa, perm).shape, "float32")
        mod[f"case{k}"](xa, out)
        np.testing.assert_array_equal(out, np.transpose(xa, perm), err_msg=f"{shape} {perm}")


def _loop_kinds(shape, perm):
    """(kind, extent) of the constant loops of the haswell kernel of one transpose."""
    _, funcs, _ = _transpose_module(HASWELL, [(shape, perm)])
    loops = tir.stmt_functor.collect(funcs["case0"].body, lambda n: isinstance(n, For))
    return {(lp.kind, lp.extent.value) for lp in loops if isinstance(lp.extent, IntImm)}


def test_strided_transpose_runs_in_unrolled_tiles():
    kinds = _loop_kinds((24, 10, 118, 26), (3, 0, 1, 2))
    assert (ForKind.UNROLLED, 8) in kinds and (ForKind.VECTORIZED, 8) in kinds


# Note [unit innermost axes] (topi/generic.py): an output whose innermost axis has extent 1
UNIT_INNER = [
    ((31, 109, 1, 4), (0, 3, 1, 2)),  # the sweep's case: [31, 4, 109, 1], loads 4 apart
    ((3, 1, 21, 1), (0, 3, 2, 1)),  # two unit axes, a tail
    ((5, 13, 1), (1, 0, 2)),  # under a vector: stays scalar, still right
    ((1, 1, 1, 1), (3, 2, 1, 0)),  # all unit
    ((2, 9, 1, 1), (2, 0, 1, 3)),  # a unit axis first and last
]


@pytest.mark.parametrize("target", [HASWELL, "llvm -mcpu=x86-64"])
def test_unit_innermost_transposes_match_numpy(target):
    _check_transposes(target, UNIT_INNER)


def test_unit_innermost_axis_leaves_the_next_one_vectorized():
    assert (ForKind.VECTORIZED, 8) in _loop_kinds(*UNIT_INNER[0])  # the 109 in vectors of 8
