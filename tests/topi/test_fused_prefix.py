"""Note [fused prefix] (topi/generic.py): an element-wise stage's parallel loop fuses its leading
axes only until they hold PARALLEL_ITERATIONS iterations; the axes after them run as serial
loops (affine addresses, a concatenate's test outside the inner loops). Numerics against numpy
on blocked and plain shapes, with vector tails and prefixes that stop inside the axes."""

import numpy as np
import pytest

import tessera
from tessera import te
from tessera.tir.stmt import For, ForKind
from tessera.tir.stmt_functor import collect
from tessera.topi import generic, transform

RNG = np.random.default_rng(7)
TARGET = tessera.target.Target("llvm")


def _build(outs, args):
    s = generic.schedule_injective(outs, TARGET)
    return tessera.build(s, args, TARGET, name="k"), tessera.lower(s, args, name="k")


def _loops(mod) -> list[For]:
    (func,) = [f for _, f in mod]
    return collect(func.body, lambda n: isinstance(n, For))


def _run(kernel, arrays, out_shape):
    nd = tessera.runtime.ndarray
    args = [nd.array(a) for a in arrays] + [nd.empty(list(out_shape), "float32")]
    kernel["k"](*args)
    return args[-1].numpy()


def _shape(t) -> tuple:
    return tuple(int(d.value) for d in t.shape)


def test_blocked_stage_keeps_inner_axes_serial():
    """[1, 16, 55, 55, 8] (NCHW8c): the parallel loop is (n, c, h) = 880 iterations, not every
    vector (48400); w runs as a serial loop inside it."""
    shape = (1, 16, 55, 55, 8)
    x = te.placeholder(shape, name="x")
    y = te.compute(shape, lambda *i: te.max(x(*i) * 2.0 + 1.0, 0.0), name="y")
    kernel, mod = _build([y], [x, y])
    loops = _loops(mod)
    parallel = [f for f in loops if f.kind == ForKind.PARALLEL]
    assert [int(f.extent.value) for f in parallel] == [16 * 55]
    assert generic.PARALLEL_ITERATIONS <= 16 * 55
    assert any(f.kind == ForKind.SERIAL and int(f.extent.value) == 55 for f in loops)
    a = RNG.standard_normal(shape).astype("float32")
    np.testing.assert_allclose(_run(kernel, [a], shape), np.maximum(a * 2 + 1, 0), rtol=1e-6)


def test_small_stage_fuses_every_outer_axis():
    """Fewer iterations than PARALLEL_ITERATIONS in all outer axes: one fused loop, as before."""
    shape = (2, 3, 5, 16)
    x = te.placeholder(shape, name="x")
    y = te.compute(shape, lambda *i: x(*i) + 1.0, name="y")
    _, mod = _build([y], [x, y])
    assert not any(f.kind == ForKind.PARALLEL for f in _loops(mod))  # too little work
    big = (4, 8, 7, 64)  # 224 outer iterations: below the threshold, fused whole
    x = te.placeholder(big, name="x")
    y = te.compute(big, lambda *i: x(*i) + 1.0, name="y")
    _, mod = _build([y], [x, y])
    parallel = [f for f in _loops(mod) if f.kind == ForKind.PARALLEL]
    assert [int(f.extent.value) for f in parallel] == [4 * 8 * 7]


@pytest.mark.parametrize(
    "shapes, axis",
    [
        ([(1, 8, 55, 55, 8), (1, 8, 55, 55, 8)], 1),  # a fire module's join, NCHW8c
        ([(1, 32, 28, 28, 8), (1, 4, 28, 28, 8)], 1),  # a dense block's growth
        ([(1, 3, 7, 5, 8), (1, 2, 7, 5, 8), (1, 1, 7, 5, 8)], 1),  # odd block counts
        ([(2, 5, 30, 13), (2, 4, 30, 13)], 1),  # plain NCHW, a width with a vector tail
        ([(3, 100, 7), (3, 100, 9)], 2),  # the prefix stops before the joined axis
        ([(300, 3), (300, 5)], 1),  # the joined axis is the vector one
        ([(1, 2, 130, 11, 8), (1, 3, 130, 11, 8)], 1),  # the prefix ends at h
    ],
)
def test_concatenate_matches_numpy(shapes, axis):
    xs = [te.placeholder(s, name=f"x{k}") for k, s in enumerate(shapes)]
    y = transform.concatenate(xs, axis)
    kernel, _ = _build([y], [*xs, y])
    arrays = [RNG.standard_normal(s).astype("float32") for s in shapes]
    np.testing.assert_array_equal(_run(kernel, arrays, _shape(y)), np.concatenate(arrays, axis))


@pytest.mark.parametrize(
    "shape, parallel, serial",
    [
        ((1, 2, 80, 79), 1 * 2 * 80 * 2, 40),  # 160 rows: the width in 2 chunks of 40 (a tail)
        ((1, 1, 1, 1000), 250, 4),  # no rows: 256 chunks asked, 250 of 4 vectors
        ((2, 3, 10, 64), 60 * 5, 13),  # 60 rows: 5 chunks of 13 (a tail)
    ],
)
def test_one_vector_rows_are_cut_into_chunks(shape, parallel, serial):
    """Note [one-vector rows]: where the rows before a one-vector body's width hold fewer than
    PARALLEL_ITERATIONS iterations, the width joins the parallel loop in chunks that run their
    vectors in a serial loop; numerics with a guarded last chunk. The body is one vector of
    the target (8 float32 lanes with AVX2, 16 with AVX-512)."""
    shape = (*shape, TARGET.vector_lanes("float32"))
    x = te.placeholder(shape, name="x")
    y = te.compute(shape, lambda *i: te.max(x(*i) * 2.0 + 1.0, 0.0), name="y")
    kernel, mod = _build([y], [x, y])
    loops = _loops(mod)
    assert [int(f.extent.value) for f in loops if f.kind == ForKind.PARALLEL] == [parallel]
    # the chunk's loop: `serial` vectors, the last chunk's bound min(rest, serial) on a tail
    (chunk,) = [f for f in loops if f.kind == ForKind.SERIAL]
    bound = chunk.extent.value if hasattr(chunk.extent, "value") else chunk.extent.b.value
    assert bound == serial
    a = RNG.standard_normal(shape).astype("float32")
    np.testing.assert_allclose(_run(kernel, [a], shape), np.maximum(a * 2 + 1, 0), rtol=1e-6)


def test_blocked_split_matches_numpy():
    """A split of [1, 4, 80, 80, 8] along its blocks (Note [blocked split] in
    transform/alter_layout.py): both parts in chunked rows, each equal to its slice."""
    shape = (1, 4, 80, 79, 8)
    x = te.placeholder(shape, name="x")
    parts = transform.split(x, 1, [1, 3])
    kernel, _ = _build(list(parts), [x, *parts])
    a = RNG.standard_normal(shape).astype("float32")
    nd = tessera.runtime.ndarray
    outs = [nd.empty(list(_shape(p)), "float32") for p in parts]
    kernel["k"](nd.array(a), *outs)
    np.testing.assert_array_equal(outs[0].numpy(), a[:, :1])
    np.testing.assert_array_equal(outs[1].numpy(), a[:, 1:])
