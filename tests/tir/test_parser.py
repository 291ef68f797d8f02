import random

import pytest

from tessera import tir
from tessera.ir import assert_structural_equal, structural_equal
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
    SeqStmt,
    Var,
    decl_buffer,
    parse_expr,
    parse_prim_func,
    parse_stmt,
)
from tessera.tir.parser import ParseError


def round_trip(f: PrimFunc) -> PrimFunc:
    text = str(f)
    g = parse_prim_func(text)
    assert_structural_equal(g, f)
    assert str(g) == text  # printing is a fixed point
    return g


# -- hand-built functions covering every node and dtype ------------------------------------------


def func_vector_add():
    n = Var("n")
    a, b, c = (decl_buffer((n,), "float32", name) for name in "ABC")
    i = Var("i")
    body = For(
        i,
        0,
        n // 8,
        ForKind.SERIAL,
        BufferStore(
            c,
            a[tir.Ramp(i * 8, tir.const(1), 8)] + b[tir.Ramp(i * 8, tir.const(1), 8)],
            (tir.Ramp(i * 8, tir.const(1), 8),),
        ),
    )
    return PrimFunc("vadd", (a, b, c), body)


def func_all_loop_kinds():
    a = decl_buffer((4, 8, 16, 32), "float16", "A")
    i, j, k, t = Var("i"), Var("j"), Var("k"), Var("t")
    store = BufferStore(a, tir.const(1.5, "float16"), (i, j, k, t))
    body = For(t, 0, 32, ForKind.THREAD_BINDING, store, thread_tag="threadIdx.x")
    body = For(k, 0, 16, ForKind.VECTORIZED, body)
    body = For(
        j,
        0,
        8,
        ForKind.UNROLLED,
        body,
        annotations=(("pragma_auto_unroll_max_step", 16), ("pragma_unroll_explicit", True)),
    )
    body = For(i, 0, 4, ForKind.PARALLEL, body)
    return PrimFunc("kinds", (a,), body)


def func_dtypes():
    bufs = {
        dt: decl_buffer((16,), dt, f"B_{dt}")
        for dt in (
            "float16",
            "bfloat16",
            "float64",
            "int8",
            "uint8",
            "int16",
            "uint32",
            "int64",
            "uint64",
            "bool",
        )
    }
    i = Var("i")
    stores = [
        BufferStore(bufs["float16"], bufs["float16"][i] * tir.const(0.25, "float16"), (i,)),
        BufferStore(bufs["bfloat16"], tir.Cast("bfloat16", bufs["float16"][i]), (i,)),
        BufferStore(bufs["float64"], bufs["float64"][i] / tir.const(3.0, "float64"), (i,)),
        BufferStore(bufs["int8"], tir.truncdiv(bufs["int8"][i], tir.const(-3, "int8")), (i,)),
        BufferStore(bufs["uint8"], tir.truncmod(bufs["uint8"][i], tir.const(7, "uint8")), (i,)),
        BufferStore(bufs["int16"], tir.max(bufs["int16"][i], tir.const(-1, "int16")), (i,)),
        BufferStore(
            bufs["uint32"], tir.min(bufs["uint32"][i], tir.const(4000000000, "uint32")), (i,)
        ),
        BufferStore(bufs["int64"], tir.floordiv(tir.Cast("int64", i), tir.const(2, "int64")), (i,)),
        BufferStore(
            bufs["uint64"], tir.floormod(bufs["uint64"][i], tir.const(2**64 - 1, "uint64")), (i,)
        ),
        BufferStore(
            bufs["bool"], tir.Not(tir.And(bufs["bool"][i], tir.Or(i < 3, tir.const(False)))), (i,)
        ),
    ]
    body = For(i, 0, 16, ForKind.SERIAL, SeqStmt(tuple(stores)))
    return PrimFunc("dtypes", tuple(bufs.values()), body)


def func_statements():
    n, m = Var("n", "int64"), Var("m")
    alpha = Var("alpha", "float32")
    a = decl_buffer((n, 4), "float32", "A")
    b = decl_buffer((m * 2,), "float32x4", "B", scope="shared")
    i, x, y = Var("i", "int64"), Var("x"), Var("y", "float32")
    tmp = decl_buffer((4, 4), "float32", "A.local", scope="local")  # a name that has a dot
    inner = SeqStmt(
        (
            BufferStore(tmp, tir.Let(y, alpha * 2.0, y + y), (x, 0)),
            IfThenElse(
                tir.likely(x < 2),
                BufferStore(tmp, tir.exp(tmp[x, 1]), (x, 1)),
                IfThenElse(
                    x == 3,
                    Evaluate(tir.Call("int32", "tessera.trace", (x, tir.StringImm('say "hi"\n')))),
                ),
            ),
            IfThenElse(
                x != 1, Evaluate(tir.const(0)), BufferStore(a, tmp[x, 1], (tir.Cast("int64", x), 2))
            ),
        )
    )
    body = LetStmt(x, tir.Cast("int32", i) % 4, inner)
    body = Allocate(tmp, body)
    body = AttrStmt("pragma_import_llvm", "define void @f()", body)
    body = For(i, tir.const(0, "int64"), n, ForKind.SERIAL, body)
    body = AttrStmt(
        "compute_scope",
        tir.StringImm("main_compute"),
        SeqStmt((body, AttrStmt("thread_extent", tir.const(16), Evaluate(tir.const(1))))),
    )
    attrs = (
        ("global_symbol", "statements"),
        ("param_shapes", ((n, tir.const(4)), (m * 2,))),
        ("tuning", [1, 2.5, None, -3]),
    )
    return PrimFunc("statements", (a, alpha, b, m), body, attrs)


def func_intrinsics():
    a = decl_buffer((8,), "float32", "A")
    c = decl_buffer((8,), "int32", "C")
    f = decl_buffer((8,), "bool", "F")
    i = Var("i")
    x = a[i]
    stores = SeqStmt(
        (
            BufferStore(a, tir.sigmoid(x) + tir.pow(x, 2.0) * tir.fma(x, x, x), (i,)),
            BufferStore(
                a, tir.select(x > 0.0, x, 0.0) + tir.if_then_else(i < 7, a[i + 1], 0.0), (i,)
            ),
            BufferStore(f, tir.isnan(x) | tir.isinf(x), (i,)),
            BufferStore(c, tir.reinterpret(x, "int32") & 255 | (i << 2) ^ ~i, (i,)),
            BufferStore(
                c, tir.Call("int32", "max", (i, i)), (i,)
            ),  # an op name that is a builtin spelling
            BufferStore(c, tir.Call("int32", "my op", ()), (i,)),
            BufferStore(
                a,
                tir.const(float("inf"))
                + tir.const(float("-inf"))
                + tir.const(float("nan"), "float64").astype("float32"),
                (i,),
            ),
            BufferStore(a, tir.const(1e-30) * tir.const(-0.0) - tir.const(1e20) * -3.5, (i,)),
        )
    )
    return PrimFunc("intrinsics", (a, c, f), For(i, 0, 8, ForKind.SERIAL, stores))


def func_vectors():
    a = decl_buffer((64,), "float32", "A")
    b = decl_buffer((64,), "int8", "B")
    i = Var("i")
    v = Var("v", "float32x8")
    ramp = tir.Ramp(i * 8, tir.const(1), 8)
    body = LetStmt(
        v,
        a[ramp] * tir.Broadcast(tir.const(2.0), 8),
        SeqStmt(
            (
                BufferStore(
                    a,
                    tir.Select(tir.Broadcast(i > 2, 8), v, a[tir.Ramp(i, tir.const(8), 8)]),
                    (ramp,),
                ),
                BufferStore(b, tir.Cast("int8x8", v), (ramp,)),
                BufferStore(
                    a,
                    tir.Cast("float32x8", b[ramp] < tir.Broadcast(tir.const(3, "int8"), 8)),
                    (ramp,),
                ),
            )
        ),
    )
    return PrimFunc("vectors", (a, b), For(i, 0, 8, ForKind.SERIAL, body))


def func_name_clashes():
    i1, i2 = Var("i"), Var("i")
    odd = Var("i_1")  # collides with the name given to the second "i"
    kw = Var("for")
    a1, a2 = decl_buffer((4,), "float32", "A"), decl_buffer((4,), "float32", "A")
    weird = decl_buffer((4,), "float32", "my buffer!")
    dt = Var("float32")  # a var named like a dtype
    body = SeqStmt(
        (
            For(i1, 0, 4, ForKind.SERIAL, BufferStore(a1, a2[i1], (i1,))),
            For(
                i2,
                0,
                4,
                ForKind.SERIAL,
                For(odd, 0, 1, ForKind.SERIAL, BufferStore(a2, a1[i2 + odd], (i2,))),
            ),
            For(
                kw,
                0,
                4,
                ForKind.SERIAL,
                LetStmt(dt, kw, BufferStore(weird, tir.Cast("float32", dt), (kw,))),
            ),
        )
    )
    return PrimFunc("name clash", (a1, a2, weird), body)


def func_seq_shapes():
    a = decl_buffer((), "float32", "A")  # zero-dim buffer
    i = Var("i")
    store = BufferStore(a, a[()] + 1.0, ())
    body = SeqStmt(
        (
            For(i, 0, 2, ForKind.SERIAL, SeqStmt((store,))),  # one-element sequence
            SeqStmt((store, store)),  # nested sequence
            SeqStmt(()),
            IfThenElse(tir.const(True), SeqStmt((store, Evaluate(tir.const(0)))), SeqStmt(())),
        )
    )
    return PrimFunc("seqs", (a,), body)


def func_scalar_param_after_buffer():
    a = decl_buffer((Var("n"), Var("k", "int64")), "float32", "A")
    n = a.shape[0]
    b = decl_buffer((n + 1,), "float32", "B")
    i = Var("i")
    body = For(i, 0, n, ForKind.SERIAL, BufferStore(b, a[i, tir.const(0, "int64")], (i,)))
    return PrimFunc("late_scalar", (a, b, n), body)


def func_precedence():
    a = decl_buffer((4,), "int32", "A")
    x, y, z, t, u = Var("x"), Var("y"), Var("z"), Var("t"), Var("u")
    exprs = [
        (x + y) * z,
        x - (y - z),
        x - y - z,
        x * (y * z),
        x + (y + z),
        tir.IntImm(-3) * x - tir.IntImm(-2),
        tir.Let(t, x + 1, t * t) + 1,
        tir.Select(tir.Let(u, x, u < 2), x, y),
    ]
    conds = [
        tir.Or(x < y, tir.And(y < z, z < x)),
        tir.And(tir.Or(x < y, y < z), tir.Not(tir.EQ(x < y, y < z))),
        tir.Not(tir.Not(x == y)),
    ]
    stores = [BufferStore(a, e, (tir.const(k),)) for k, e in enumerate(exprs)]
    stores += [BufferStore(a, tir.Select(c, x, y), (tir.const(0),)) for c in conds]
    body = For(
        x,
        0,
        2,
        ForKind.SERIAL,
        For(y, 1, 2, ForKind.SERIAL, For(z, 2, 2, ForKind.SERIAL, SeqStmt(tuple(stores)))),
    )
    return PrimFunc("precedence", (a,), body)


def func_attr_values():
    k = Var("k", "int64")  # a non-int32 shape var that first appears inside an expression
    a = decl_buffer((k * 2, k), "float32", "A")
    flag, ptr = Var("flag", "bool"), Var("ptr", "handle")
    attrs = (
        ("param_shapes", ((k * 2, k),)),
        ("one", (1,)),
        ("empty", ()),
        ("neg", -2.5),
        ("inf", float("-inf")),
        ("buffer", a),
        ("int_imm", tir.const(7)),
        ("string_imm", tir.StringImm("s")),
        ("expr", (k + 1) * 2),
        ("nested", [("a", 1, True), None]),
    )
    body = IfThenElse(flag, Evaluate(tir.Call("int32", "foo", ())), SeqStmt(()))
    return PrimFunc("attrs", (a, flag, ptr), body, attrs)


BUILDERS = [
    func_attr_values,
    func_vector_add,
    func_all_loop_kinds,
    func_dtypes,
    func_statements,
    func_intrinsics,
    func_vectors,
    func_name_clashes,
    func_seq_shapes,
    func_scalar_param_after_buffer,
    func_precedence,
]


@pytest.mark.parametrize("build", BUILDERS, ids=lambda b: b.__name__)
def test_round_trip(build):
    round_trip(build())


def test_round_trip_is_not_vacuous():
    f = func_precedence()
    g = parse_prim_func(str(f).replace("x - (y - z)", "x - y - z", 1))
    assert not structural_equal(f, g)
    assert not structural_equal(
        func_dtypes(), parse_prim_func(str(func_dtypes()).replace("3i8", "3i16", 1))
    )


def test_name_clashes_get_unique_names():
    text = str(func_name_clashes())
    assert "for (i: int32" in text and "for (i_1: int32" in text and "for (i_1_1: int32" in text
    assert "A_1: Buffer" in text and "my_buffer_: Buffer" in text and "for_" in text
    assert 'primfn "name clash"(' in text


# -- random expressions: precedence and literals ---------------------------------------------------


def random_expr(rng: random.Random, vs, depth: int):
    if depth <= 0 or rng.random() < 0.2:
        choice = rng.random()
        if choice < 0.5:
            return rng.choice(vs)
        return tir.IntImm(rng.randint(-20, 20))
    a, b = random_expr(rng, vs, depth - 1), random_expr(rng, vs, depth - 1)
    kind = rng.choice(
        ["Add", "Sub", "Mul", "Div", "Mod", "FloorDiv", "FloorMod", "Min", "Max", "select", "let"]
    )
    if kind == "select":  # fresh operands: a Let must not appear twice
        c, d = random_expr(rng, vs, depth - 2), random_expr(rng, vs, depth - 2)
        cond = rng.choice([tir.LT, tir.GE, tir.EQ, tir.NE])(c, d)
        if rng.random() < 0.5:
            e = random_expr(rng, vs, depth - 2)
            cond = rng.choice([tir.And, tir.Or])(cond, tir.Not(tir.LE(rng.choice(vs), e)))
        return tir.Select(cond, a, b)
    if kind == "let":
        v = Var("t")
        return tir.Let(v, a, v * b)
    return getattr(tir, kind)(a, b)


def test_random_expressions_round_trip():
    rng = random.Random(0)
    x, y = Var("x"), Var("y")
    for _ in range(300):
        e = random_expr(rng, [x, y], 5)
        got = parse_expr(str(e), {"x": x, "y": y})
        assert structural_equal(got, e), str(e)
        assert str(got) == str(e)


# -- parse_expr / parse_stmt with a scope ----------------------------------------------------------


def test_parse_expr_uses_the_scope():
    i = Var("i")
    a = decl_buffer((16,), "float32", "A")
    e = parse_expr("A[i*4 + 1] * 2.0f", {"i": i, "A": a})
    assert e.same_as(a[i * 4 + 1] * 2.0)
    assert parse_expr("floordiv(i, 2) + truncmod(i, 3)", {"i": i}).same_as(
        i // 2 + tir.truncmod(i, 3)
    )
    assert parse_expr("5i64").same_as(tir.const(5, "int64"))
    assert parse_expr("-2.5f16").same_as(tir.const(-2.5, "float16"))
    assert parse_expr("1.5").same_as(tir.const(1.5))  # unsuffixed float is float32
    assert parse_expr("true && !false").same_as(tir.And(tir.const(True), tir.Not(tir.const(False))))


def test_parse_stmt_reads_a_sequence():
    a = decl_buffer((4,), "float32", "A")
    s = parse_stmt(
        """
        // comments are allowed
        for (i: int32, 0, 4) {
          A[i] = 0.0f
        }
        evaluate(0)
        """,
        {"A": a},
    )
    assert isinstance(s, SeqStmt) and len(s.seq) == 2
    i = s.seq[0].loop_var
    expected = SeqStmt(
        (For(i, 0, 4, ForKind.SERIAL, BufferStore(a, tir.const(0.0), (i,))), Evaluate(tir.const(0)))
    )
    assert_structural_equal(s, expected)


def test_hand_written_function():
    f = parse_prim_func(
        """
        primfn scale(A: Buffer(float32, [n, 4]), s: float32) {
          parallel (i: int32, 0, n) {
            for (j: int32, 0, 4) {
              A[i, j] = A[i, j] * s
            }
          }
        }
        """
    )
    assert f.name == "scale" and [p.name for p in f.params] == ["A", "s"]
    a, s = f.params
    assert a.shape[0].name == "n" and a.shape[0].dtype == tir.DType.parse("int32")
    assert f.body.kind is ForKind.PARALLEL
    assert f.body.extent is a.shape[0]  # the same Var, not a copy


# -- errors ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, where, message",
    [
        ("primfn f(A: Buffer(float32, [4])) {\n  A[0] = B[0]\n}", "2:10", "unknown name 'B'"),
        (
            "primfn f(A: Buffer(float32, [4])) {\n  for (i: int32, 0, 4 {\n  }\n}",
            "2:23",
            r"expected '\)' but found '\{'",
        ),
        (
            "primfn f(A: Buffer(float32, [4])) {\n  A[0] = 1.0q\n}",
            "2:10",
            "unknown literal suffix 'q'",
        ),
        ("primfn f(A: Buffer(flot32, [4])) {\n}", "1:20", "expected a dtype"),
        (
            "primfn f(A: Buffer(float32, [4])) {\n  A[0] = 1.0f\n",
            "3:1",
            "expected '}' but found end of input",
        ),
        ("primfn f(A: Buffer(float32, [4])) {\n  A = 1\n}", "2:3", "expected a statement"),
        (
            "primfn f(A: Buffer(int32, [4])) {\n  A[0] = 1 < 2 < 3\n}",
            "2:16",
            "comparisons do not chain",
        ),
        ("primfn f(A: Buffer(int32, [4]), A: int32) {\n}", "1:33", "listed twice"),
        (
            "primfn f(A: Buffer(int32, [4])) {\n  A[0] = select(1, 2)\n}",
            "2:10",
            "select takes 3 arguments",
        ),
        ("primfn f(A: Buffer(int32, [4])) {\n  A[0] = A + 1\n}", "2:10", "is a buffer"),
        (
            "primfn f(A: Buffer(int32, [4])) {\n  A[0] = 1 $ 2\n}",
            "2:12",
            r"unexpected character '\$'",
        ),
    ],
)
def test_parse_errors_say_where_and_what(text, where, message):
    with pytest.raises(ParseError, match=message) as info:
        parse_prim_func(text)
    err = info.value
    assert isinstance(err, ValueError)
    assert f"{err.line}:{err.col}" == where
    assert str(err).startswith(where)


def test_parse_error_points_at_the_column():
    with pytest.raises(ParseError) as info:
        parse_expr("i + ", {"i": Var("i")})
    assert "expected an expression but found end of input" in str(info.value)
    assert str(info.value).splitlines()[-1] == "  " + " " * 4 + "^"


def test_round_trip_keeps_a_function_well_formed():
    for build in BUILDERS:
        f = build()
        if build not in (func_name_clashes, func_attr_values):
            tir.verify(f)
            tir.verify(parse_prim_func(str(f)))


def test_attribute_values_keep_their_python_types():
    g = round_trip(func_attr_values())
    attrs = dict(g.attrs)
    assert attrs["one"] == (1,) and type(attrs["one"][0]) is int
    assert attrs["neg"] == -2.5 and attrs["inf"] == float("-inf")
    assert attrs["buffer"] is g.params[0]
    assert isinstance(attrs["int_imm"], tir.IntImm) and isinstance(
        attrs["string_imm"], tir.StringImm
    )
    assert attrs["nested"] == [("a", 1, True), None]
