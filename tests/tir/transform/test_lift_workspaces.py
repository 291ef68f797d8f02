"""lift_workspaces: top-level heap allocations of constant size become trailing params."""

import numpy as np

import tessera
from tessera import te, tir
from tessera.codegen.common import function_info
from tessera.tir.transform.lift_workspaces import lift_workspaces, workspace_params

S = tir.ForKind.SERIAL


def test_lifts_top_level_global_allocations_only():
    A = tir.decl_buffer((8,), "float32", "A")
    W = tir.decl_buffer((8,), "float32", "W")  # global, top level: lifted
    L = tir.decl_buffer((4,), "float32", "L", scope="local")  # stack: stays
    I = tir.decl_buffer((4,), "float32", "I")  # inside a loop: stays
    i, j = tir.Var("i"), tir.Var("j")
    inner = tir.For(j, 0, 2, S, tir.Allocate(I, tir.BufferStore(I, tir.const(1.0), (0,))))
    body = tir.Allocate(
        W,
        tir.seq(
            tir.For(i, 0, 8, S, tir.BufferStore(W, A[i], (i,))),
            tir.Allocate(L, tir.BufferStore(L, W[0], (0,))),
            inner,
        ),
    )
    f = tir.PrimFunc("f", (A,), body)
    g = lift_workspaces(f)
    assert g.params == (A, W) and workspace_params(g) == (W,)
    allocs = tir.stmt_functor.collect(g.body, lambda n: isinstance(n, tir.Allocate))
    assert [a.buffer.name for a in allocs] == ["L", "I"]
    assert lift_workspaces(tir.PrimFunc("h", (A,), inner)).params == (A,)  # nothing to lift


def test_lifted_kernel_runs_with_a_caller_workspace():
    # a two-stage kernel whose intermediate is a heap buffer: lifted, the caller passes it
    n = 64
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((n,), lambda i: B[n - 1 - i] + 1.0, name="C")
    s = te.create_schedule(C.op)
    f = tessera.driver.optimize(te.lower(s, [A, C], name="k"))
    g = lift_workspaces(f)
    (ws,) = workspace_params(g)
    info = function_info(g)
    assert [p.workspace for p in info.params] == [False, False, True]
    mod = tessera.build(g, target="llvm")
    a = np.arange(n, dtype=np.float32)
    c, scratch = np.empty(n, np.float32), np.empty(n, np.float32)
    mod["k"](a, c, scratch)
    np.testing.assert_allclose(c, a[::-1] * 2 + 1)
