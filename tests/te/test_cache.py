"""cache_read / cache_write, and the classic blocked GEMM schedule built on them."""

import numpy as np
import pytest

from tessera import te, tir
from tessera.tir.stmt_functor import collect


def _matmul(M, N, K):
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def test_cache_read_rewrites_readers(rng, run):
    A = te.placeholder((6, 5), name="A")
    B = te.compute((6, 5), lambda i, j: A[i, j] + 1.0, name="B")
    s = te.create_schedule(B.op)
    AA = s.cache_read(A, "local", [B])
    assert AA.name == "A.local" and [st.name for st in s.stages] == ["A", "A.local", "B"]
    assert s[B].op.input_tensors == (AA,) and B.op.input_tensors == (A,)
    xo, xi = s[B].split(B.op.axis[0], nparts=4)
    s[AA].compute_at(s[B], xo)
    f = te.lower(s, [A, B])
    (alloc,) = collect(f.body, lambda x: isinstance(x, tir.Allocate))
    assert alloc.buffer.scope == "local" and [d.value for d in alloc.buffer.shape] == [2, 5]
    a = rng.standard_normal((6, 5), dtype=np.float32)
    _, b = run(f, a, np.zeros((6, 5), np.float32))
    np.testing.assert_allclose(b, a + 1)


def test_cache_write_moves_the_reduction(rng, run):
    A, B, C = _matmul(8, 8, 4)
    s = te.create_schedule(C.op)
    CC = s.cache_write(C, "local")
    assert CC.name == "C.local" and s[CC].op.reduce_axis and not s[C].op.reduce_axis
    assert [iv.var.name for iv in s[CC].op.axis] == ["i", "j"]
    assert s[C].op.axis == C.op.axis  # the user's axes still name C's loops
    f = te.lower(s, [A, B, C])
    a = rng.standard_normal((8, 4), dtype=np.float32)
    b = rng.standard_normal((4, 8), dtype=np.float32)
    *_, c = run(f, a, b, np.zeros((8, 8), np.float32))
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-6)


def test_cache_errors():
    A, B, C = _matmul(4, 4, 4)
    s = te.create_schedule(C.op)
    with pytest.raises(ValueError, match="unknown storage scope"):
        s.cache_read(A, "texture", [C])
    with pytest.raises(ValueError, match="placeholder"):
        s.cache_write(A, "local")
    s[C].split(C.op.axis[0], factor=2)
    with pytest.raises(ValueError, match="must come before"):
        s.cache_write(C, "local")
    D = te.compute((4,), lambda i: A[i, 0], name="D")
    s2 = te.create_schedule([C.op, D.op])
    with pytest.raises(ValueError, match="D does not read B"):
        s2.cache_read(B, "local", [D])


def gemm_schedule(M, N, K, bn):
    """The classic TVM CPU GEMM tutorial schedule: blocking, packed B, cache_write."""
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    packedB = te.compute((N // bn, K, bn), lambda x, y, z: B[y, x * bn + z], name="packedB")
    C = te.compute(
        (M, N), lambda x, y: te.sum(A[x, k] * packedB[y // bn, k, y % bn], axis=k), name="C"
    )
    s = te.create_schedule(C.op)
    CC = s.cache_write(C, "local")
    xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], bn, bn)
    s[CC].compute_at(s[C], yo)
    xc, yc = s[CC].op.axis
    (kc,) = s[CC].op.reduce_axis
    ko, ki = s[CC].split(kc, factor=4)
    s[CC].reorder(ko, xc, ki, yc)
    s[CC].unroll(ki)
    s[CC].vectorize(yc)
    s[C].parallel(xo)
    x, y, z = s[packedB].op.axis
    s[packedB].vectorize(z)
    s[packedB].parallel(x)
    return s, [A, B, C]


def test_gemm_structure(loops):
    s, args = gemm_schedule(1024, 1024, 1024, 32)
    f = te.lower(s, args, name="mmult")
    assert loops(f) == [
        ("x", 32, "parallel", 0),
        ("y", 1024, "serial", 1),
        ("z", 32, "vectorized", 2),
        ("x.outer", 32, "parallel", 0),
        ("y.outer", 32, "serial", 1),
        ("x.init", 32, "serial", 2),
        ("y.init", 32, "vectorized", 3),
        ("k.outer", 256, "serial", 2),
        ("x", 32, "serial", 3),
        ("k.inner", 4, "unrolled", 4),
        ("y", 32, "vectorized", 5),
        ("x.inner", 32, "serial", 2),
        ("y.inner", 32, "serial", 3),
    ]
    allocs = collect(f.body, lambda x: isinstance(x, tir.Allocate))
    shapes = {a.buffer.name: ([d.value for d in a.buffer.shape], a.buffer.scope) for a in allocs}
    assert shapes == {"packedB": ([32, 1024, 32], "global"), "C.local": ([32, 32], "local")}
    assert not collect(f.body, lambda x: isinstance(x, tir.IfThenElse))


def test_gemm_numbers(rng, run):
    M, N, K, bn = 32, 32, 8, 16
    s, args = gemm_schedule(M, N, K, bn)
    f = te.lower(s, args, name="mmult")
    a = rng.standard_normal((M, K), dtype=np.float32)
    b = rng.standard_normal((K, N), dtype=np.float32)
    *_, c = run(f, a, b, np.zeros((M, N), np.float32))
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
