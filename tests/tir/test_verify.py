import pytest

from tessera import tir
from tessera.tir import (
    Allocate,
    BufferStore,
    Evaluate,
    For,
    ForKind,
    IfThenElse,
    LetStmt,
    PrimFunc,
    Var,
    decl_buffer,
    parse_prim_func,
    verify,
)
from tessera.tir.verify import VerifyError

n = Var("n")
A = decl_buffer((n,), "float32", "A")
B = decl_buffer((n, 4), "int32", "B")
i, j = Var("i"), Var("j")


def func(body, params=(A, B)):
    return PrimFunc("f", params, body)


def loop(body, var=i, extent=None):
    return For(var, 0, n if extent is None else extent, ForKind.SERIAL, body)


def problems(f) -> list[str]:
    with pytest.raises(VerifyError) as info:
        verify(f)
    assert isinstance(info.value, ValueError)
    return info.value.problems


def test_well_formed_functions_pass():
    tmp = decl_buffer((8,), "float32", "tmp", scope="local")
    v = Var("v", "float32x8")
    ramp = tir.Ramp(tir.const(0), tir.const(1), 8)
    body = loop(
        Allocate(
            tmp,
            LetStmt(
                v,
                tir.Broadcast(A[i], 8),
                tir.seq(
                    BufferStore(tmp, v * tir.Broadcast(tir.const(2.0), 8), (ramp,)),
                    IfThenElse(tir.likely(i < n - 1), BufferStore(A, tmp[tir.const(3)], (i,))),
                    For(
                        j,
                        0,
                        4,
                        ForKind.PARALLEL,
                        BufferStore(B, tir.Cast("int32", A[i]) + j, (i, j)),
                    ),
                ),
            ),
        )
    )
    assert verify(func(body)) is None
    text = """
    primfn g(A: Buffer(float32, [m]), s: float32) {
      thread_binding (t: int32, 0, m) "threadIdx.x" {
        A[t] = select(A[t] > 0.0f, A[t], s) / (let q: float32 = s in q*q)
      }
    }"""
    assert verify(parse_prim_func(text)) is None


def test_binary_operands_must_share_a_dtype():
    bad = tir.Add(A[i], tir.Cast("float64", A[i]))
    [p] = problems(func(loop(BufferStore(A, tir.Cast("float32", bad), (i,)))))
    assert "operands of Add differ in dtype (float32 and float64)" in p


def test_conditions_must_be_bool():
    ps = problems(func(loop(IfThenElse(i, Evaluate(tir.const(0))))))
    assert ps == ["the condition of if is int32, not bool: i"]
    ps = problems(func(loop(BufferStore(A, tir.Select(i, A[i], A[i]), (i,)))))
    assert "the condition of select is int32" in ps[0]
    ps = problems(func(loop(BufferStore(B, tir.And(i, i), (i, tir.const(0))))))
    assert "And needs bool operands, got int32" in ps[0]


def test_vector_lanes_must_agree():
    vec = tir.Ramp(i, tir.const(1), 4)
    ps = problems(func(loop(BufferStore(A, A[vec], (i,)))))  # a float32x4 value into one element
    assert ps == ["store to 'A' (float32) of a float32x4 value: A[i] = A[Ramp(i, 1, 4)]"]
    ps = problems(func(loop(Evaluate(tir.Broadcast(tir.Ramp(i, tir.const(1), 4), 2)))))
    assert "Broadcast of a vector (int32x4)" in ps[0]
    ps = problems(func(loop(Evaluate(tir.Ramp(vec, tir.const(1), 4)))))
    assert "Ramp base and stride must be scalars" in ps[0]
    ps = problems(func(loop(Evaluate(tir.Cast("float32x8", vec)))))
    assert "cast changes the lane count (int32x4 to float32x8)" in ps[0]
    cond = tir.Broadcast(i < 2, 2)
    ps = problems(func(loop(Evaluate(tir.Select(cond, vec, vec)))))
    assert "the condition of select has 2 lanes, its values 4" in ps[0]


def test_every_var_used_is_bound():
    k = Var("k")
    ps = problems(func(loop(BufferStore(A, A[i + k], (i,)))))
    assert ps == ["variable 'k' is used but not bound here"]
    after_loop = tir.seq(loop(Evaluate(i)), Evaluate(i))  # i is out of scope after its loop
    assert problems(func(after_loop)) == ["variable 'i' is used but not bound here"]
    ok = func(LetStmt(k, n * 2, loop(BufferStore(A, A[i], (i,)), extent=k)))
    assert verify(ok) is None


def test_a_var_is_bound_once():
    ps = problems(func(tir.seq(loop(Evaluate(i)), loop(Evaluate(i)))))
    assert ps == ["variable 'i' is bound more than once (again by for i)"]
    ps = problems(func(loop(Evaluate(n), var=n, extent=tir.const(4))))
    assert ps == ["variable 'n' is bound more than once (again by for n)"]


def test_every_buffer_used_is_a_param_or_allocated():
    c = decl_buffer((4,), "float32", "C", scope="local")
    ps = problems(func(loop(BufferStore(A, c[tir.const(0)], (i,)))))
    assert ps == ["buffer 'C' is used but is neither a parameter nor allocated"]
    outside = tir.seq(
        Allocate(c, Evaluate(tir.const(0))), BufferStore(c, tir.const(1.0), (tir.const(0),))
    )
    assert "buffer 'C' is used but is neither" in problems(func(outside))[0]
    twice = Allocate(c, Allocate(c, Evaluate(tir.const(0))))
    assert problems(func(twice)) == ["buffer 'C' is allocated again (or is also a parameter)"]


def test_index_count_matches_ndim():
    ps = problems(func(loop(BufferStore(B, B[i], (i, tir.const(0))))))
    assert ps == ["load of 'B' has 1 indices for 2 dims"]
    ps = problems(func(loop(BufferStore(A, A[i], (i, i)))))
    assert ps == ["store of 'A' has 2 indices for 1 dims"]


def test_store_value_matches_buffer_dtype():
    ps = problems(func(loop(BufferStore(A, tir.Cast("float64", A[i]), (i,)))))
    assert ps == ["store to 'A' (float32) of a float64 value: A[i] = float64(A[i])"]


def test_loop_bounds_are_integers_and_threads_named():
    ps = problems(func(For(i, 0, tir.const(2.0), ForKind.SERIAL, Evaluate(i))))
    assert ps == ["loop 'i' has a float32 extent, not an integer"]
    ps = problems(func(For(i, 0, n, ForKind.THREAD_BINDING, Evaluate(i))))
    assert ps == ["thread_binding loop 'i' names no thread (thread_tag is empty)"]


def test_intrinsic_arity_and_leftover_reduce():
    ps = problems(func(loop(Evaluate(tir.Call("float32", "exp", (A[i], A[i]))))))
    assert ps == ["exp takes 1 arguments, got 2"]
    k = tir.IterVar(tir.Range(tir.const(0), tir.const(4)), Var("k"), tir.IterVarType.REDUCE)
    x, y = Var("x", "float32"), Var("y", "float32")
    sum_ = tir.CommReducer((x,), (y,), (x + y,), (tir.const(0.0),))
    red = tir.Reduce(sum_, (A[k.var],), (k,), tir.const(True))
    assert (
        "a Reduce is left in the function"
        in problems(func(BufferStore(A, red, (tir.const(0),))))[0]
    )


def test_every_problem_is_listed_at_once():
    k = Var("k")
    body = loop(
        tir.seq(
            BufferStore(A, A[k] + A[k], (i, i)),  # unbound k (once), 2 indices
            IfThenElse(i, Evaluate(tir.const(0))),
        )
    )
    with pytest.raises(VerifyError) as info:
        verify(func(body))
    assert len(info.value.problems) == 3
    message = str(info.value)
    assert message.startswith("PrimFunc 'f' is malformed (3 problems):")
    assert "store of 'A' has 2 indices" in message and "'k' is used but not bound" in message
    assert "condition of if is int32" in message


def test_verify_rejects_what_is_not_a_primfunc():
    with pytest.raises(TypeError, match="expects a tir.PrimFunc"):
        verify(Evaluate(tir.const(0)))
