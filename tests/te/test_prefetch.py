"""s[C].prefetch(tensor, axis, offset): where the prefetches land, what they cover, that results
do not change, and that the step is data (text, JSON, replay)."""

import numpy as np
import pytest

import tessera
from tessera import te, tir
from tessera.ir.node import Visitor
from tessera.te.prefetch import MAX_PREFETCH_LINES


def _matmul(M=64, N=48, K=128):
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def _blocked(A, B, C, kf=16):
    s = te.create_schedule(C.op)
    i, j = s[C].op.axis
    ko, ki = s[C].split(s[C].op.reduce_axis[0], factor=kf)
    s[C].reorder(i, ko, j, ki)
    return s, i, ko


def _calls_in(stmt) -> list:
    found = []

    class _V(Visitor):
        def visit_Call(self, node):
            if node.op == "prefetch":
                found.append(str(node))
            self.generic_visit(node)

    _V().visit(stmt)
    return found


def _prefetches_in(loop) -> list:
    """The prefetch calls at the top of `loop`'s body (before anything else), as text."""
    body = loop.body.seq if isinstance(loop.body, tir.SeqStmt) else (loop.body,)
    out = []
    for stmt in body:
        found = _calls_in(stmt)
        if not found:
            break
        out += found
    return out


def _loop(func, name):
    found = []

    class _V(Visitor):
        def visit_For(self, node):
            if node.loop_var.name == name:
                found.append(node)
            self.generic_visit(node)

    _V().visit(func.body)
    assert len(found) == 1, name
    return found[0]


def test_prefetch_of_the_next_k_block_at_the_top_of_its_loop():
    A, B, C = _matmul()
    s, i, ko = _blocked(A, B, C)
    s[C].prefetch(A, ko, 1)
    f = te.lower(s, [A, B, C])
    # a row of A: 16 floats of the next k block, one line; moved into A for the last block
    assert _prefetches_in(_loop(f, "k.outer")) == [
        "prefetch(A[i, min(k.outer*16 + 16, 112)], 0, 3, dtype=int32)"
    ]
    assert _prefetches_in(_loop(f, "i")) == []  # nowhere else
    assert str(f).count("prefetch") == 1


def test_region_of_whole_rows_is_one_run_of_lines():
    A, B, C = _matmul()
    s, i, ko = _blocked(A, B, C)
    s[C].prefetch(B, ko, 2, locality=1)
    f = te.lower(s, [A, B, C])
    # B[k block + 32 .. +48, all 48 columns]: 16 whole rows are contiguous, 768 floats, 48 lines
    line_loop = _loop(f, "B.pf_line")
    assert line_loop.extent.value == 16 * 48 // 16
    text = str(line_loop)
    assert "min(k.outer*16 + 32, 112)" in text and ", 0, 1, dtype=int32)" in text


def test_partial_rows_get_a_loop_per_row_and_one_line_per_run():
    # C[i, j] tiles of 8 x 16 read A[i tile, all k]: whole rows, and B[all k, j tile]: runs
    # of 16 floats (one line) in 128 rows
    A, B, C = _matmul(M=64, N=64, K=128)
    s = te.create_schedule(C.op)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 16)
    s[C].prefetch(B, jo, 1)
    f = te.lower(s, [A, B, C])
    row_loop = _loop(f, "B.pf0")
    assert row_loop.extent.value == 128
    assert isinstance(row_loop.body, tir.Evaluate)  # one line per row: no loop over lines
    assert "B[B.pf0, min(j.outer*16 + 16, 48)]" in str(row_loop)


def test_negative_offsets_stay_inside_the_tensor():
    A, B, C = _matmul()
    s, i, ko = _blocked(A, B, C)
    s[C].prefetch(A, ko, -1)
    f = te.lower(s, [A, B, C])
    assert _prefetches_in(_loop(f, "k.outer")) == [
        "prefetch(A[i, max(k.outer*16 - 16, 0)], 0, 3, dtype=int32)"
    ]


@pytest.mark.parametrize("shape", [(5, 48, 128), (7, 7, 7), (1, 1, 1), (9, 17, 65)])
def test_results_unchanged(shape, run, rng):
    M, N, K = shape
    A, B, C = _matmul(M, N, K)
    s, i, ko = _blocked(A, B, C, kf=min(16, K))
    s[C].prefetch(A, ko, 1)
    s[C].prefetch(B, ko, 1, locality=0)
    s[C].prefetch(B, i, 1)
    a = rng.standard_normal((M, K)).astype("f4")
    b = rng.standard_normal((K, N)).astype("f4")
    want = a @ b
    f = te.lower(s, [A, B, C])
    np.testing.assert_allclose(run(f, a, b, np.zeros((M, N), "f4"))[2], want, rtol=1e-4, atol=1e-4)
    for target in ("llvm", "c"):
        lib = tessera.build(s, [A, B, C], target=target, name="mm")
        c = np.zeros((M, N), "f4")
        lib(a, b, c)
        np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4, err_msg=target)


def test_prefetch_compiles_to_prefetch_instructions():
    A, B, C = _matmul()
    s, i, ko = _blocked(A, B, C)
    s[C].prefetch(A, ko, 1)
    s[C].prefetch(B, ko, 1, locality=2)
    lib = tessera.build(s, [A, B, C], target="llvm", name="mm")
    asm = lib.get_source("asm")
    if tessera.Target("llvm").llvm_triple.startswith(("x86_64", "i686")):
        assert "prefetcht0" in asm and "prefetcht1" in asm
    assert "__builtin_prefetch(&A[" in tessera.build(s, [A, B, C], target="c").get_source()


def test_prefetch_of_a_stage_computed_at_a_tile():
    # the micro-kernel shape of topi/x86: accumulators at a tile, the k loop inside
    A, B, C = _matmul(M=32, N=32, K=64)
    s = te.create_schedule(C.op)
    CC = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 16)
    tile = s[C].fuse(io, jo)
    s[C].parallel(tile)
    s[CC].compute_at(s[C], tile)
    ci, cj = s[CC].op.axis
    (ck,) = s[CC].op.reduce_axis
    s[CC].reorder(ck, ci, cj)
    s[CC].vectorize(cj)
    s[CC].prefetch(B, ci, 0)  # B's row k: the line this tile reads (the region of offset 0)
    s[C].prefetch(B, tile, 1)  # the next tile's B: 64 rows of one line
    f = te.lower(s, [A, B, C])
    assert "B[k, floormod(i.outer.j.outer.fused, 2)*16]" in str(_loop(f, "i"))
    assert _loop(f, "B.pf0").extent.value == 64
    a = np.arange(32 * 64, dtype="f4").reshape(32, 64) % 7
    b = np.arange(64 * 32, dtype="f4").reshape(64, 32) % 5
    lib = tessera.build(s, [A, B, C], target="llvm", name="mm")
    c = np.zeros((32, 32), "f4")
    lib(a, b, c)
    np.testing.assert_allclose(c, a @ b)


def test_prefetch_through_an_inlined_stage():
    A, B, C0 = _matmul(M=16, N=16, K=32)
    Bt = te.compute((32, 16), lambda k, j: B[k, j] * 2.0, name="Bt")
    k = te.reduce_axis((0, 32), name="k")
    C = te.compute((16, 16), lambda i, j: te.sum(A[i, k] * Bt[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    s[Bt].compute_inline()
    s[C].prefetch(B, s[C].op.axis[0], 1)
    f = te.lower(s, [A, B, C])
    assert "prefetch(B[" in str(f)


# -- steps -----------------------------------------------------------------------------------


def test_step_text_json_and_replay():
    A, B, C = _matmul()
    s, i, ko = _blocked(A, B, C)
    s[C].prefetch(A, ko, 1)
    s[C].prefetch(B, ko, 2, locality=1)
    assert [str(x) for x in s.steps[-2:]] == [
        "prefetch(C, A, k.outer, offset=1, locality=3)",
        "prefetch(C, B, k.outer, offset=2, locality=1)",
    ]
    steps = te.steps_from_json(s.steps_json())
    assert steps == s.steps
    assert isinstance(steps[-1], te.Prefetch)
    A2, B2, C2 = _matmul()
    s2 = te.create_schedule(C2.op).replay(steps)
    assert str(te.lower(s2, [A2, B2, C2])) == str(te.lower(s, [A, B, C]))


# -- errors ----------------------------------------------------------------------------------


def test_errors_name_the_problem():
    A, B, C = _matmul()
    D = te.placeholder((4,), name="D")
    s, i, ko = _blocked(A, B, C)
    with pytest.raises(ValueError, match="does not read D"):
        s[C].prefetch(D, ko, 1)
    with pytest.raises(TypeError, match="needs a te.Tensor"):
        s[C].prefetch("A", ko, 1)
    with pytest.raises(TypeError, match="offset must be an int"):
        s[C].prefetch(A, ko, 1.5)
    with pytest.raises(ValueError, match="locality must be 0 to 3"):
        s[C].prefetch(A, ko, 1, locality=4)
    with pytest.raises(ValueError, match="is not an iteration variable"):
        s[C].prefetch(A, te.reduce_axis((0, 4), name="r"), 1)
    with pytest.raises(ValueError, match="placeholder"):
        s[A].prefetch(A, ko, 1)


def test_the_loop_must_still_exist_and_not_be_vectorized():
    A, B, C = _matmul()
    s, i, ko = _blocked(A, B, C)
    s[C].prefetch(A, ko, 1)
    s[C].split(ko, factor=2)
    with pytest.raises(ValueError, match="split or fused since"):
        te.lower(s, [A, B, C])
    s, i, ko = _blocked(A, B, C)
    j = s[C].op.axis[1]
    s[C].prefetch(B, j, 1)
    s[C].vectorize(j)
    with pytest.raises(ValueError, match="vectorized loop"):
        te.lower(s, [A, B, C])


def test_too_large_a_region_is_refused():
    n = 512
    A = te.placeholder((n, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n,), lambda i: te.sum(A[k, i], axis=k), name="C")
    s = te.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=256)
    s[C].prefetch(A, io, 1)  # 512 rows x 256 floats: 16 lines a row
    with pytest.raises(ValueError, match=f"at most {MAX_PREFETCH_LINES}"):
        te.lower(s, [A, C])
