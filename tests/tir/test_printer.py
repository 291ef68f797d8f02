import pytest

from tessera import tir
from tessera.tir import (
    Allocate,
    AttrStmt,
    BufferStore,
    Evaluate,
    For,
    ForKind,
    IfThenElse,
    LetStmt,
    PrimFunc,
    Var,
    decl_buffer,
)


def test_myadd_reads_like_tvm_lower():
    n = Var("n")
    a, b, c = (decl_buffer((n,), "float32", name) for name in "ABC")
    io, ii = Var("i.outer"), Var("i.inner")
    idx = io * 16 + ii
    guarded = IfThenElse(tir.likely(idx < n), BufferStore(c, a[idx] + b[idx], (idx,)))
    inner = For(ii, 0, 16, ForKind.SERIAL, guarded)
    f = PrimFunc("myadd", (a, b, c), For(io, 0, tir.floordiv(n + 15, 16), ForKind.SERIAL, inner))
    assert str(f) == (
        "primfn myadd(A: Buffer(float32, [n]), B: Buffer(float32, [n]), "
        "C: Buffer(float32, [n])) {\n"
        "  for (i.outer: int32, 0, floordiv(n + 15, 16)) {\n"
        "    for (i.inner: int32, 0, 16) {\n"
        "      if (likely(i.outer*16 + i.inner < n)) {\n"
        "        C[i.outer*16 + i.inner] = A[i.outer*16 + i.inner] + B[i.outer*16 + i.inner]\n"
        "      }\n"
        "    }\n"
        "  }\n"
        "}"
    )


x, y, z = Var("x"), Var("y"), Var("z")
f32 = Var("f", "float32")
b = Var("b", "bool")


@pytest.mark.parametrize(
    "expr, text",
    [
        ((x + y) * z, "(x + y)*z"),
        (x + y * z, "x + y*z"),
        (x - (y - z), "x - (y - z)"),
        (x - y - z, "x - y - z"),
        (x * (y * z), "x*(y*z)"),
        (x // 4 + x % 4, "floordiv(x, 4) + floormod(x, 4)"),
        (tir.truncdiv(x, 4) - tir.truncmod(x, 4), "truncdiv(x, 4) - truncmod(x, 4)"),
        (f32 / (f32 + 1.0), "f / (f + 1.0f)"),
        (tir.min(x, y) + tir.max(x, 2), "min(x, y) + max(x, 2)"),
        (tir.Or(x < y, tir.And(b, y >= z)), "x < y || b && y >= z"),
        (tir.And(tir.Or(b, b), tir.Not(x == y)), "(b || b) && !(x == y)"),
        (tir.EQ(x < y, b), "(x < y) == b"),
        (tir.Not(b), "!b"),
        (tir.select(b, x, y), "select(b, x, y)"),
        (tir.Cast("float32", x) * 2.0, "float32(x)*2.0f"),
        (tir.exp(f32), "exp(f)"),
        (tir.Let(z, x + 1, z * z) + 1, "(let z: int32 = x + 1 in z*z) + 1"),
        (tir.Ramp(x, tir.const(2), 4), "Ramp(x, 2, 4)"),
        (tir.Broadcast(f32, 8), "Broadcast(f, 8)"),
        (tir.reinterpret(f32, "int32"), "reinterpret(f, dtype=int32)"),
        (tir.isnan(f32), "isnan(f)"),
        (tir.StringImm('a "b"'), '"a \\"b\\""'),
    ],
)
def test_expressions_print_with_minimal_parentheses(expr, text):
    assert str(expr) == text


@pytest.mark.parametrize(
    "value, dtype, text",
    [
        (3, "int32", "3"),
        (-3, "int32", "-3"),
        (3, "int64", "3i64"),
        (7, "uint8", "7u8"),
        (-2, "int8", "-2i8"),
        (1, "bool", "true"),
        (0, "bool", "false"),
        (1.5, "float32", "1.5f"),
        (1.5, "float64", "1.5f64"),
        (2.0, "float16", "2.0f16"),
        (0.5, "bfloat16", "0.5bf16"),
        (1e-07, "float32", "1e-07f"),
        (float("inf"), "float32", "float32(inf)"),
        (float("-inf"), "float64", "float64(-inf)"),
        (float("nan"), "float16", "float16(nan)"),
    ],
)
def test_constants_carry_their_dtype(value, dtype, text):
    assert str(tir.const(value, dtype)) == text


def test_statements():
    a = decl_buffer((16, 16), "float32", "A")
    local = decl_buffer((16, 16), "float32", "C.local", scope="local")
    i, j, t = Var("i"), Var("j"), Var("t", "int64")
    store = BufferStore(local, a[i, j], (i, j))
    body = For(
        j, 0, 16, ForKind.VECTORIZED, store, annotations=(("pragma_auto_unroll_max_step", 16),)
    )
    body = For(i, 0, 16, ForKind.THREAD_BINDING, body, thread_tag="threadIdx.x")
    body = AttrStmt("pragma_parallel_launch_point", 1, Allocate(local, body))
    body = LetStmt(
        t,
        tir.const(4, "int64"),
        tir.seq(body, IfThenElse(t > 2, Evaluate(tir.const(0)), Evaluate(tir.const(1)))),
    )
    assert str(body) == (
        "let t: int64 = 4i64 {\n"
        "  attr pragma_parallel_launch_point = 1 {\n"
        "    allocate C.local: float32[16, 16] scope local {\n"
        '      thread_binding (i: int32, 0, 16) "threadIdx.x" {\n'
        "        vectorized (j: int32, 0, 16) annotate(pragma_auto_unroll_max_step=16) {\n"
        "          C.local[i, j] = A[i, j]\n"
        "        }\n"
        "      }\n"
        "    }\n"
        "  }\n"
        "  if (t > 2i64) {\n"
        "    evaluate(0)\n"
        "  } else {\n"
        "    evaluate(1)\n"
        "  }\n"
        "}"
    )


def test_parallel_and_unrolled_loops_and_scalar_params():
    n = Var("n", "int64")
    a = decl_buffer((n,), "float32", "A")
    s = Var("s", "float32")
    i, j = Var("i", "int64"), Var("j", "int64")
    inner = For(
        j,
        tir.const(0, "int64"),
        tir.const(4, "int64"),
        ForKind.UNROLLED,
        BufferStore(a, s, (i * 4 + j,)),
    )
    f = PrimFunc("f", (a, s), For(i, tir.const(0, "int64"), n // 4, ForKind.PARALLEL, inner))
    lines = str(f).splitlines()
    assert lines[0] == "primfn f(A: Buffer(float32, [n: int64]), s: float32) {"
    assert lines[1] == "  parallel (i: int64, 0i64, floordiv(n, 4i64)) {"
    assert lines[2] == "    unrolled (j: int64, 0i64, 4i64) {"


def test_same_names_are_made_unique():
    i1, i2 = Var("i"), Var("i")
    assert str(i1 + i2) == "i + i_1"
    a1, a2 = decl_buffer((4,), "float32", "A"), decl_buffer((4,), "float32", "A")
    assert str(a1[i1] + a2[i1]) == "A[i] + A_1[i]"
    assert str(Var("if") + Var("int8") + Var("")) == "if_ + int8_ + v"


def test_reduce_prints_readably():
    k = tir.IterVar(tir.Range(tir.const(0), tir.const(16)), Var("k"), tir.IterVarType.REDUCE)
    a = decl_buffer((16,), "float32", "A")
    lhs, rhs = Var("x", "float32"), Var("y", "float32")
    sum_ = tir.CommReducer((lhs,), (rhs,), (lhs + rhs,), (tir.const(0.0),))
    r = tir.Reduce(sum_, (a[k.var],), (k,), tir.const(True))
    assert str(r) == "reduce(sum, A[k], axis=[k: int32 in [0, 16) reduce])"
    odd = tir.CommReducer((lhs,), (rhs,), (lhs * 2.0 + rhs,), (tir.const(0.0),))
    assert "comm_reducer((x), (y): (x*2.0f + y), identity=[0.0f])" in str(
        tir.Reduce(odd, (a[k.var],), (k,), b)
    )
    assert str(tir.Range(x, tir.const(4))) == "[x, x + 4)"
