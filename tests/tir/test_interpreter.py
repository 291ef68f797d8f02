import math

import numpy as np
import pytest

from tessera import tir
from tessera.tir.interpreter import InterpreterError, interpret, random_arguments

S = tir.ForKind.SERIAL


def _run_expr(expr_fn, a, out_dtype=None):
    """Store expr_fn(A[i]) into B[i] for every element of `a` and return B."""
    n = a.shape[0]
    A = tir.decl_buffer((n,), str(a.dtype), "A")
    B = tir.decl_buffer((n,), out_dtype or str(a.dtype), "B")
    i = tir.Var("i")
    f = tir.PrimFunc("f", (A, B), tir.For(i, 0, n, S, tir.BufferStore(B, expr_fn(A[i]), (i,))))
    b = np.zeros(n, B.dtype.numpy_name)
    interpret(f, a, b)
    return b


def test_integer_division_semantics():
    a = np.array([7, -7, 7, -7], "int32")
    d = np.array([2, 2, -2, -2], "int32")
    A = tir.decl_buffer((4,), "int32", "A")
    D = tir.decl_buffer((4,), "int32", "D")
    outs = [tir.decl_buffer((4,), "int32", name) for name in ("q", "r", "fq", "fr")]
    i = tir.Var("i")
    x, y = A[i], D[i]
    values = (tir.truncdiv(x, y), tir.truncmod(x, y), x // y, x % y)
    body = tir.seq(*(tir.BufferStore(o, v, (i,)) for o, v in zip(outs, values, strict=True)))
    f = tir.PrimFunc("f", (A, D, *outs), tir.For(i, 0, 4, S, body))
    res = [np.zeros(4, "int32") for _ in outs]
    interpret(f, a, d, *res)
    np.testing.assert_array_equal(res[0], [3, -3, -3, 3])
    np.testing.assert_array_equal(res[1], [1, -1, 1, -1])
    np.testing.assert_array_equal(res[2], a // d)
    np.testing.assert_array_equal(res[3], a % d)


def test_integer_division_by_zero_gives_zero_like_the_code_generators():
    a = np.array([7, -7, -(2**31), 5], "int32")
    d = np.array([0, 0, -1, -1], "int32")
    A = tir.decl_buffer((4,), "int32", "A")
    D = tir.decl_buffer((4,), "int32", "D")
    outs = [tir.decl_buffer((4,), "int32", name) for name in ("q", "r", "fq", "fr")]
    i = tir.Var("i")
    x, y = A[i], D[i]
    values = (tir.truncdiv(x, y), tir.truncmod(x, y), x // y, x % y)
    body = tir.seq(*(tir.BufferStore(o, v, (i,)) for o, v in zip(outs, values, strict=True)))
    f = tir.PrimFunc("f", (A, D, *outs), tir.For(i, 0, 4, S, body))
    res = [np.zeros(4, "int32") for _ in outs]
    interpret(f, a, d, *res)
    for quotient in (res[0], res[2]):
        np.testing.assert_array_equal(quotient, [0, 0, -(2**31), -5])
    for remainder in (res[1], res[3]):
        np.testing.assert_array_equal(remainder, [0, 0, 0, 0])


def test_int32_wraps_and_casts():
    a = np.array([2**31 - 1, 5], "int32")
    np.testing.assert_array_equal(_run_expr(lambda x: x + 1, a), [-(2**31), 6])
    f = np.array([1.7, -2.5], "float32")
    np.testing.assert_array_equal(_run_expr(lambda x: x.astype("int32"), f, "int32"), [1, -2])


@pytest.mark.parametrize("name", ["exp", "log", "sqrt", "tanh", "sigmoid", "erf", "floor", "round"])
def test_float_intrinsics_match_numpy(name):
    a = np.abs(np.random.default_rng(0).standard_normal(8)).astype("float32") + 0.1
    special = {
        "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
        "erf": lambda v: np.array([math.erf(t) for t in v]),
    }
    ref = special[name] if name in special else getattr(np, name)
    got = _run_expr(lambda x: getattr(tir, name)(x), a)
    np.testing.assert_allclose(got, ref(a.astype("float64")).astype("float32"), rtol=1e-6)


def test_vector_ramp_broadcast_and_masked_if_then_else():
    A = tir.decl_buffer((6,), "float32", "A")
    B = tir.decl_buffer((8,), "float32", "B")
    r = tir.Ramp(tir.const(0), tir.const(1), 8)
    guarded = tir.if_then_else(
        r < tir.Broadcast(tir.const(6), 8), A[r], tir.Broadcast(tir.const(-1.0), 8)
    )
    f = tir.PrimFunc("f", (A, B), tir.BufferStore(B, guarded, (r,)))
    a, b = np.arange(6, dtype="float32"), np.zeros(8, "float32")
    interpret(f, a, b)  # lanes 6 and 7 would load out of bounds: they are not taken
    np.testing.assert_array_equal(b, [0, 1, 2, 3, 4, 5, -1, -1])


def test_out_of_bounds_names_the_buffer():
    A = tir.decl_buffer((4,), "float32", "A")
    i = tir.Var("i")
    f = tir.PrimFunc("f", (A,), tir.For(i, 0, 5, S, tir.BufferStore(A, tir.const(0.0), (i,))))
    with pytest.raises(IndexError, match="A"):
        interpret(f, np.zeros(4, "float32"))
    g = tir.PrimFunc("g", (A,), tir.BufferStore(A, A[i - 1], (0,)))
    with pytest.raises(InterpreterError, match="i"):
        interpret(g, np.zeros(4, "float32"))


def test_argument_checks():
    n = tir.Var("n")
    A = tir.decl_buffer((n, 2), "float32", "A")
    B = tir.decl_buffer((n, 2), "float32", "B")
    f = tir.PrimFunc("f", (A, B), tir.Evaluate(tir.const(0)))
    with pytest.raises(ValueError, match="B"):
        interpret(f, np.zeros((3, 2), "float32"), np.zeros((4, 2), "float32"))
    with pytest.raises(TypeError, match="dtype"):
        interpret(f, np.zeros((3, 2), "float64"), np.zeros((3, 2), "float32"))
    with pytest.raises(TypeError, match="arguments"):
        interpret(f, np.zeros((3, 2), "float32"))
    with pytest.raises(ValueError, match="n"):
        random_arguments(f)


def test_allocate_let_select_and_every_loop_kind():
    A = tir.decl_buffer((4,), "float32", "A")
    T = tir.decl_buffer((4,), "float32", "T", scope="local")
    i, j, t = tir.Var("i"), tir.Var("j"), tir.Var("t", "float32")
    fill = tir.For(i, 0, 4, tir.ForKind.PARALLEL, tir.BufferStore(T, A[i] * 2.0, (i,)))
    use = tir.For(
        j,
        0,
        4,
        tir.ForKind.UNROLLED,
        tir.LetStmt(t, T[j], tir.BufferStore(A, tir.Select(t > 2.0, t, -t), (j,))),
    )
    f = tir.PrimFunc("f", (A,), tir.Allocate(T, tir.seq(fill, use)))
    a = np.array([0.5, 1.5, -3.0, 2.0], "float32")
    interpret(f, a)
    np.testing.assert_array_equal(a, [-1.0, 3.0, 6.0, 4.0])


def test_uninitialized_allocation_reads_nan():
    A = tir.decl_buffer((1,), "float32", "A")
    T = tir.decl_buffer((1,), "float32", "T")
    f = tir.PrimFunc("f", (A,), tir.Allocate(T, tir.BufferStore(A, T[0], (0,))))
    a = np.zeros(1, "float32")
    interpret(f, a)
    assert np.isnan(a[0])


def test_bfloat16_rounds_to_nearest_even():
    A = tir.decl_buffer((2,), "bfloat16", "A")
    f = tir.PrimFunc(
        "f", (A,), tir.BufferStore(A, tir.Cast("bfloat16", tir.const(1.00390625, "float32")), (0,))
    )
    a = np.zeros(2, "uint16")
    interpret(f, a)
    assert a[0] == 0x3F80  # 1 + 2^-8 is a tie between 1.0 and 1 + 2^-7: even wins


def test_reinterpret_and_bitwise():
    a = np.array([1.0, -2.0], "float32")
    got = _run_expr(lambda x: tir.reinterpret(x, "int32"), a, "int32")
    np.testing.assert_array_equal(got, a.view("int32"))
    ints = np.array([12, -7], "int32")
    np.testing.assert_array_equal(
        _run_expr(lambda x: (x & 6) ^ (x >> 1), ints), (ints & 6) ^ (ints >> 1)
    )
