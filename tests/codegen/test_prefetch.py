"""The prefetch intrinsic: a hint both code generators emit (llvm.prefetch, __builtin_prefetch
under __GNUC__) and the interpreter skips; results never change."""

import numpy as np
import pytest

from tessera import tir
from tessera.codegen.c import build_c, emit_c
from tessera.codegen.llvm import build_llvm
from tessera.target import Target
from tessera.tir import BufferStore, Evaluate, For, ForKind, PrimFunc, Var, decl_buffer, seq
from tessera.tir.interpreter import interpret

N = 256


def _func(locality=3, rw=0, dtype="float32"):
    """C[i] = A[i] * 2 with a prefetch of A 16 elements ahead (clamped into A)."""
    A, C = decl_buffer((N,), dtype, "A"), decl_buffer((N,), dtype, "C")
    i = Var("i")
    ahead = tir.prefetch(A[tir.min(i + 16, N - 1)], rw, locality)
    body = seq(Evaluate(ahead), BufferStore(C, A[i] * tir.const(2, dtype), (i,)))
    return PrimFunc(f"pf{locality}{rw}", (A, C), For(i, 0, N, ForKind.SERIAL, body))


def test_builds_a_call_of_a_buffer_element():
    A = decl_buffer((N,), "float32", "A")
    call = tir.prefetch(A[3], 1, 2)
    assert call.op == "prefetch" and [a.value for a in call.args[1:]] == [1, 2]
    with pytest.raises(TypeError, match="buffer element"):
        tir.prefetch(Var("p"))
    with pytest.raises(ValueError, match="locality"):
        tir.prefetch(A[0], 0, 4)
    with pytest.raises(ValueError, match="rw"):
        tir.prefetch(A[0], 2)


def test_prints_parses_and_verifies():
    f = _func(locality=1)
    assert "evaluate(prefetch(A[min(i + 16, 255)], 0, 1, dtype=int32))" in str(f)
    assert str(tir.parse_prim_func(str(f))) == str(f)
    tir.verify(f)


@pytest.mark.parametrize("dtype", ["float32", "int8", "float16"])
def test_results_unchanged_on_every_backend(dtype):
    f = _func(dtype=dtype)
    a = (np.arange(N) % 50).astype(dtype)
    want = a * np.array(2, dtype)
    for build in (build_llvm, build_c):
        c = np.zeros(N, dtype)
        build([f])[f.name](a, c)
        np.testing.assert_array_equal(c, want, err_msg=build.__name__)
    c = np.zeros(N, dtype)
    interpret(f, a, c)
    np.testing.assert_array_equal(c, want)


def test_llvm_emits_the_hint_with_its_locality():
    funcs = [_func(locality=k, rw=rw) for k in range(4) for rw in (0, 1)]
    mod = build_llvm(funcs)
    ll = mod.get_source("ll")
    assert "@llvm.prefetch.p0(" in ll
    for k in range(4):
        assert f"i32 0, i32 {k}, i32 1)" in ll and f"i32 1, i32 {k}, i32 1)" in ll
    if Target("llvm").llvm_triple.startswith("x86_64"):
        asm = mod.get_source("asm")
        for insn in ("prefetchnta", "prefetcht2", "prefetcht1", "prefetcht0"):
            assert insn in asm, insn


def test_c_emits_the_builtin_for_gnu_compilers_only():
    src = emit_c([_func(locality=2)])
    lines = [line.strip() for line in src.splitlines()]
    k = lines.index("__builtin_prefetch(&A[tessera_min_i32(i + 16, 255)], 0, 2);")
    assert lines[k - 1] == "#if defined(__GNUC__)" and lines[k + 1] == "#endif"
