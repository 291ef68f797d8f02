"""The LLVM code generator against numpy: hand-built flat PrimFuncs (as the tir passes leave
them), compiled with build_llvm and run in process."""

import math

import numpy as np
import pytest

from tessera import tir
from tessera.codegen.llvm import build_llvm
from tessera.codegen.llvm.emitter import FunctionEmitter, ModuleContext
from tessera.target import Target
from tessera.tir import (
    Allocate,
    Broadcast,
    BufferStore,
    Cast,
    For,
    ForKind,
    IntImm,
    PrimFunc,
    Ramp,
    Var,
    decl_buffer,
    seq,
)

SERIAL, PARALLEL = ForKind.SERIAL, ForKind.PARALLEL
RNG = np.random.default_rng(0)


def ewise_func(name, in_dtypes, out_dtype, fn, n=64, lanes=1):
    """C[i] = fn(A0[i], A1[i], ...) for i < n, `lanes` elements at a time."""
    ins = [decl_buffer((n,), dt, f"A{k}") for k, dt in enumerate(in_dtypes)]
    out = decl_buffer((n,), out_dtype, "C")
    i = Var("i")
    idx = i if lanes == 1 else Ramp(i * lanes, IntImm(1), lanes)
    body = For(i, 0, n // lanes, SERIAL, BufferStore(out, fn(*[b[idx] for b in ins]), (idx,)))
    return PrimFunc(name, (*ins, out), body)


def run(mod, name, inputs, out_dtype, n=None):
    n = n or len(inputs[0])
    out = np.zeros(n, dtype=np.dtype(tir.DType.parse(out_dtype).numpy_name))
    mod[name](*inputs, out)
    return out


# -- arithmetic ----------------------------------------------------------------------------------


def _trunc_div(a, b):
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -q, q).astype(a.dtype)


INT_OPS = {
    "add": (lambda a, b: a + b, lambda a, b: a + b),
    "sub": (lambda a, b: a - b, lambda a, b: a - b),
    "mul": (lambda a, b: a * b, lambda a, b: a * b),
    "div": (tir.truncdiv, _trunc_div),
    "mod": (tir.truncmod, lambda a, b: (a - b * _trunc_div(a, b)).astype(a.dtype)),
    "floordiv": (tir.floordiv, lambda a, b: a // b),
    "floormod": (tir.floormod, lambda a, b: a % b),
    "min": (tir.min, np.minimum),
    "max": (tir.max, np.maximum),
}


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8", "uint32"])
@pytest.mark.parametrize("lanes", [1, 8])
def test_integer_binary_ops_with_negative_operands(dtype, lanes):
    funcs = [
        ewise_func(op, [dtype, dtype], dtype, fn, lanes=lanes) for op, (fn, _) in INT_OPS.items()
    ]
    mod = build_llvm(funcs)
    info = np.iinfo(dtype)
    lo, hi = max(info.min // 2, -100), min(info.max // 2, 100)
    a = RNG.integers(lo, hi, 64).astype(dtype)
    b = RNG.integers(lo, hi, 64).astype(dtype)
    b[b == 0] = 3
    if info.min < 0:
        a[:4], b[:4] = [-7, 7, -7, 7], [2, -2, -2, 2]  # every sign combination
    with np.errstate(over="ignore"):
        for op, (_, ref) in INT_OPS.items():
            np.testing.assert_array_equal(run(mod, op, [a, b], dtype), ref(a, b), err_msg=op)


FLOAT_OPS = {
    "add": (lambda a, b: a + b, np.add),
    "sub": (lambda a, b: a - b, np.subtract),
    "mul": (lambda a, b: a * b, np.multiply),
    "div": (lambda a, b: a / b, np.divide),
    "floordiv": (tir.floordiv, lambda a, b: np.floor(a / b)),
    "floormod": (tir.floormod, lambda a, b: a - np.floor(a / b) * b),
    "min": (tir.min, np.minimum),
    "max": (tir.max, np.maximum),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("lanes", [1, 8])
def test_float_binary_ops(dtype, lanes):
    funcs = [
        ewise_func(op, [dtype] * 2, dtype, fn, lanes=lanes) for op, (fn, _) in FLOAT_OPS.items()
    ]
    mod = build_llvm(funcs)
    a = RNG.uniform(-10, 10, 64).astype(dtype)
    b = RNG.uniform(0.5, 3, 64).astype(dtype) * np.where(RNG.random(64) < 0.5, -1, 1).astype(dtype)
    for op, (_, ref) in FLOAT_OPS.items():
        np.testing.assert_allclose(run(mod, op, [a, b], dtype), ref(a, b), rtol=1e-6, err_msg=op)


CMP_OPS = {
    "lt": (lambda a, b: a < b, np.less),
    "le": (lambda a, b: a <= b, np.less_equal),
    "gt": (lambda a, b: a > b, np.greater),
    "ge": (lambda a, b: a >= b, np.greater_equal),
    "eq": (lambda a, b: tir.EQ(a, b), np.equal),
    "ne": (lambda a, b: tir.NE(a, b), np.not_equal),
    "and": (lambda a, b: tir.logical_and(a < 0, b < 0), lambda a, b: (a < 0) & (b < 0)),
    "or": (lambda a, b: tir.logical_or(a < 0, b < 0), lambda a, b: (a < 0) | (b < 0)),
    "not": (lambda a, b: tir.logical_not(a < b), lambda a, b: ~(a < b)),
    "select": (lambda a, b: tir.Select(a < b, b, a) > 0, lambda a, b: np.where(a < b, b, a) > 0),
}


@pytest.mark.parametrize("dtype", ["int8", "uint16", "int64", "float32", "float64"])
@pytest.mark.parametrize("lanes", [1, 8])
def test_comparisons_and_logic_store_bools(dtype, lanes):
    funcs = [
        ewise_func(op, [dtype] * 2, "bool", fn, lanes=lanes) for op, (fn, _) in CMP_OPS.items()
    ]
    mod = build_llvm(funcs)
    a = RNG.integers(0 if "u" in dtype else -5, 5, 64).astype(dtype)
    b = RNG.integers(0 if "u" in dtype else -5, 5, 64).astype(dtype)
    if dtype.startswith("float"):
        a[0] = b[1] = np.nan  # ordered comparisons are false on NaN, != is true
    for op, (_, ref) in CMP_OPS.items():
        with np.errstate(invalid="ignore"):
            np.testing.assert_array_equal(run(mod, op, [a, b], "bool"), ref(a, b), err_msg=op)


# -- intrinsics ----------------------------------------------------------------------------------

erf_np = np.vectorize(math.erf)
UNARY = {  # name: (tir op, numpy reference, domain)
    "exp": (tir.exp, np.exp, (-80, 80)),
    "exp2": (tir.exp2, np.exp2, (-100, 100)),
    "log": (tir.log, np.log, (1e-3, 1e4)),
    "log2": (tir.log2, np.log2, (1e-3, 1e4)),
    "log10": (tir.log10, np.log10, (1e-3, 1e4)),
    "sqrt": (tir.sqrt, np.sqrt, (0, 100)),
    "rsqrt": (tir.rsqrt, lambda x: 1 / np.sqrt(x), (1e-2, 100)),
    "sin": (tir.sin, np.sin, (-3, 3)),
    "cos": (tir.cos, np.cos, (-3, 3)),
    "tan": (tir.tan, np.tan, (-1.2, 1.2)),
    "asin": (tir.asin, np.arcsin, (-0.99, 0.99)),
    "acos": (tir.acos, np.arccos, (-0.99, 0.99)),
    "atan": (tir.atan, np.arctan, (-10, 10)),
    "sinh": (tir.sinh, np.sinh, (-5, 5)),
    "cosh": (tir.cosh, np.cosh, (-5, 5)),
    "tanh": (tir.tanh, np.tanh, (-10, 10)),
    "asinh": (tir.asinh, np.arcsinh, (-10, 10)),
    "acosh": (tir.acosh, np.arccosh, (1.01, 10)),
    "atanh": (tir.atanh, np.arctanh, (-0.99, 0.99)),
    "sigmoid": (tir.sigmoid, lambda x: 1 / (1 + np.exp(-x)), (-30, 30)),
    "erf": (tir.erf, erf_np, (-4, 4)),
    "floor": (tir.floor, np.floor, (-10, 10)),
    "ceil": (tir.ceil, np.ceil, (-10, 10)),
    "round": (tir.round, np.round, (-10, 10)),
    "trunc": (tir.trunc, np.trunc, (-10, 10)),
    "abs": (tir.abs, np.abs, (-10, 10)),
}
BINARY = {
    "pow": (tir.pow, np.power, (0.1, 10), (-3, 3)),
    "atan2": (tir.atan2, np.arctan2, (-5, 5), (-5, 5)),
    "fmod": (tir.fmod, np.fmod, (-10, 10), (0.5, 3)),
}


def _sample(domain, dtype, n=64):
    x = RNG.uniform(*domain, n)
    x[:4] = [domain[0], domain[1], (domain[0] + domain[1]) / 2, np.round(domain[1] / 2) + 0.5]
    return x.astype(dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("lanes", [1, 16])
def test_float_intrinsics(dtype, lanes):
    funcs = [
        ewise_func(f"f_{k}", [dtype], dtype, op, lanes=lanes) for k, (op, _, _) in UNARY.items()
    ]
    funcs += [
        ewise_func(f"f_{k}", [dtype] * 2, dtype, op, lanes=lanes) for k, (op, *_) in BINARY.items()
    ]
    funcs.append(ewise_func("f_fma", [dtype] * 3, dtype, tir.fma, lanes=lanes))
    mod = build_llvm(funcs)
    rtol = 2e-6 if dtype == "float32" else 1e-13
    for name, (_, ref, domain) in UNARY.items():
        x = _sample(domain, dtype)
        want = ref(x.astype("float64")).astype(dtype)
        got = run(mod, f"f_{name}", [x], dtype)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-30, err_msg=name)
    for name, (_, ref, da, db) in BINARY.items():
        x, y = _sample(da, dtype), _sample(db, dtype)
        want = ref(x.astype("float64"), y.astype("float64")).astype(dtype)
        got = run(mod, f"f_{name}", [x, y], dtype)
        np.testing.assert_allclose(got, want, rtol=rtol, err_msg=name)
    a, b, c = (_sample((-3, 3), dtype) for _ in range(3))
    np.testing.assert_allclose(run(mod, "f_fma", [a, b, c], dtype), a * b + c, rtol=rtol, atol=1e-6)


@pytest.mark.parametrize("lanes", [1, 16])
def test_vector_math_keeps_special_values(lanes):
    funcs = [
        ewise_func(f"v_{k}", ["float32"], "float32", UNARY[k][0], n=16, lanes=lanes)
        for k in ("exp", "log", "tanh", "sigmoid", "erf")
    ]
    funcs += [
        ewise_func(f"v_{k}", ["float32"], "bool", op, n=16, lanes=lanes)
        for k, op in (("isnan", tir.isnan), ("isinf", tir.isinf))
    ]
    mod = build_llvm(funcs)
    x = np.array(
        [
            np.nan,
            np.inf,
            -np.inf,
            0.0,
            -0.0,
            1e-30,
            -1e-30,
            89.0,
            -104.0,
            1e-45,
            88.7,
            -87.0,
            3.0,
            -3.0,
            20.0,
            -20.0,
        ],
        "float32",
    )
    with np.errstate(all="ignore"):
        x64 = x.astype("float64")
        refs = {
            "exp": np.exp(x64),
            "log": np.log(x64),
            "tanh": np.tanh(x64),
            "sigmoid": 1 / (1 + np.exp(-x64)),
            "erf": np.array([math.erf(v) if not np.isnan(v) else np.nan for v in x64]),
        }
    for name, want in refs.items():
        np.testing.assert_allclose(
            run(mod, f"v_{name}", [x], "float32"),
            want.astype("float32"),
            rtol=4e-6,
            atol=1e-37,
            err_msg=name,
        )
    np.testing.assert_array_equal(run(mod, "v_isnan", [x], "bool"), np.isnan(x))
    np.testing.assert_array_equal(run(mod, "v_isinf", [x], "bool"), np.isinf(x))


INT_INTRINSICS = {
    "and": (lambda a, b: a & b, np.bitwise_and),
    "or": (lambda a, b: a | b, np.bitwise_or),
    "xor": (lambda a, b: a ^ b, np.bitwise_xor),
    "not": (lambda a, b: ~a, lambda a, b: ~a),
    "shl": (lambda a, b: a << (b & 3), lambda a, b: a << (b & 3)),
    "shr": (lambda a, b: a >> (b & 3), lambda a, b: a >> (b & 3)),
    "popcount": (
        lambda a, b: tir.popcount(a),
        lambda a, b: np.array([bin(int(v) & 0xFFFFFFFF).count("1") for v in a], a.dtype),
    ),
    "abs": (lambda a, b: tir.abs(a), np.abs),
}


@pytest.mark.parametrize("dtype", ["int32", "uint32", "int8"])
@pytest.mark.parametrize("lanes", [1, 8])
def test_integer_intrinsics(dtype, lanes):
    funcs = [
        ewise_func(k, [dtype] * 2, dtype, op, lanes=lanes) for k, (op, _) in INT_INTRINSICS.items()
    ]
    mod = build_llvm(funcs)
    info = np.iinfo(dtype)
    a = RNG.integers(max(info.min, -1000) + 1, min(info.max, 1000), 64).astype(dtype)
    b = RNG.integers(0, 100, 64).astype(dtype)
    for name, (_, ref) in INT_INTRINSICS.items():
        if name == "popcount" and dtype == "int8":
            continue
        np.testing.assert_array_equal(run(mod, name, [a, b], dtype), ref(a, b), err_msg=name)


# -- casts ---------------------------------------------------------------------------------------

CAST_DTYPES = ["int8", "uint8", "int32", "uint32", "int64", "float16", "float32", "float64", "bool"]


@pytest.mark.parametrize("lanes", [1, 8])
def test_casts_between_all_types(lanes):
    pairs = [(s, d) for s in CAST_DTYPES for d in CAST_DTYPES if s != d]
    funcs = [
        ewise_func(
            f"{s}_to_{d}",
            [s],
            d,
            lambda a, d=d: Cast(tir.DType.parse(d).with_lanes(lanes), a),
            lanes=lanes,
        )
        for s, d in pairs
    ]
    mod = build_llvm(funcs)
    base = np.array(list(range(-20, 100)) * 2, dtype="float64")[:64]  # fits every type
    for s, d in pairs:
        x = base.astype(s) if not s.startswith("uint") else np.abs(base).astype(s)
        if s.startswith("float"):
            x = (x + np.float64(0.25)).astype(s)  # fractions truncate toward zero
        if d.startswith("uint") and s != "bool":
            x = np.abs(x).astype(s)
        want = x.astype(d)
        np.testing.assert_array_equal(run(mod, f"{s}_to_{d}", [x], d), want, err_msg=f"{s}->{d}")


def _to_bf16(x: np.ndarray) -> np.ndarray:
    bits = x.astype("float32").view("uint32").astype("uint64")
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("uint16")
    return np.where(np.isnan(x), ((bits >> 16) | 0x40).astype("uint16"), rounded)


def _from_bf16(b: np.ndarray) -> np.ndarray:
    return (b.astype("uint32") << 16).view("float32")


def test_bfloat16_and_float16_round_trips_and_arithmetic():
    funcs = [
        ewise_func("f32_to_bf16", ["float32"], "bfloat16", lambda a: Cast("bfloat16", a)),
        ewise_func("bf16_to_f32", ["bfloat16"], "float32", lambda a: Cast("float32", a)),
        ewise_func("bf16_to_i32", ["bfloat16"], "int32", lambda a: Cast("int32", a)),
        ewise_func("bf16_mul", ["bfloat16"] * 2, "bfloat16", lambda a, b: a * b + a, lanes=8),
        ewise_func("f16_add", ["float16"] * 2, "float16", lambda a, b: a + b, lanes=8),
        ewise_func("f64_to_f16", ["float64"], "float16", lambda a: Cast("float16", a)),
        ewise_func("f16_exp", ["float16"], "float16", tir.exp, lanes=8),
    ]
    mod = build_llvm(funcs)
    x = RNG.standard_normal(64).astype("float32") * 100
    x[:4] = [np.nan, np.inf, -0.0, 1.00390625]  # the last one is a tie: rounds to even
    bf = run(mod, "f32_to_bf16", [x], "bfloat16")
    np.testing.assert_array_equal(bf, _to_bf16(x))
    np.testing.assert_array_equal(run(mod, "bf16_to_f32", [bf], "float32"), _from_bf16(bf))
    fin = _to_bf16(np.where(np.isfinite(x), x, 1.0))
    np.testing.assert_array_equal(
        run(mod, "bf16_to_i32", [fin], "int32"), _from_bf16(fin).astype("int32")
    )
    a, b = _to_bf16(RNG.standard_normal(64)), _to_bf16(RNG.standard_normal(64))
    want = _to_bf16(_from_bf16(_to_bf16(_from_bf16(a) * _from_bf16(b))) + _from_bf16(a))
    np.testing.assert_array_equal(run(mod, "bf16_mul", [a, b], "bfloat16"), want)
    h1, h2 = RNG.standard_normal(64).astype("float16"), RNG.standard_normal(64).astype("float16")
    np.testing.assert_array_equal(run(mod, "f16_add", [h1, h2], "float16"), h1 + h2)
    d = RNG.standard_normal(64) * 1000
    np.testing.assert_array_equal(
        run(mod, "f64_to_f16", [d], "float16"), d.astype("float32").astype("float16")
    )
    np.testing.assert_allclose(run(mod, "f16_exp", [h1], "float16"), np.exp(h1), rtol=1e-3)


# -- memory --------------------------------------------------------------------------------------


def test_vector_loads_and_stores_contiguous_and_strided():
    n = 64
    A, C, D = (
        decl_buffer((2 * n,), "float32", "A"),
        decl_buffer((n,), "float32", "C"),
        decl_buffer((4 * n,), "float32", "D"),
    )
    i = Var("i")
    contiguous = Ramp(i * 8, IntImm(1), 8)
    body = seq(
        # C[8i : 8i+8] = A[16i : 16i+16 : 2] (a gather); D[32i : 32i+32 : 4] = same (a scatter)
        BufferStore(C, A[Ramp(i * 16, IntImm(2), 8)] + 1.0, (contiguous,)),
        BufferStore(D, C[contiguous] * 2.0, (Ramp(i * 32, IntImm(4), 8),)),
    )
    mod = build_llvm([PrimFunc("strided", (A, C, D), For(i, 0, n // 8, SERIAL, body))])
    a = RNG.standard_normal(2 * n).astype("float32")
    c, d = np.zeros(n, "float32"), np.zeros(4 * n, "float32")
    mod["strided"](a, c, d)
    np.testing.assert_allclose(c, a[::2] + 1)
    np.testing.assert_allclose(d[::4], (a[::2] + 1) * 2)
    assert not d.reshape(-1, 4)[:, 1:].any()
    assert "<8 x float>" in mod.get_source("ll")


def test_gather_moves_broadcast_terms_into_its_base():
    """Note [gather base]: A[8i + 8 + (-1, -2, ..., -8)] (lanes reversed within a block; the
    vector term alone points before the block, base + broadcast terms one past it at the end)
    reads the same elements as when the sum is taken lane by lane."""
    n = 64
    A, C = decl_buffer((n,), "float32", "A"), decl_buffer((n,), "float32", "C")
    i = Var("i")
    index = Broadcast(i * 8, 8) + Broadcast(IntImm(8), 8) + Ramp(IntImm(-1), IntImm(-1), 8)
    body = BufferStore(C, A[index], (Ramp(i * 8, IntImm(1), 8),))
    mod = build_llvm([PrimFunc("reverse", (A, C), For(i, 0, n // 8, SERIAL, body))])
    a = RNG.standard_normal(n).astype("float32")
    c = np.zeros(n, "float32")
    mod["reverse"](a, c)
    np.testing.assert_array_equal(c, a.reshape(-1, 8)[:, ::-1].reshape(-1))


def test_if_then_else_does_not_evaluate_the_branch_not_taken():
    n = Var("n")
    A, B = decl_buffer((n,), "float32", "A"), decl_buffer((n,), "float32", "B")
    i = Var("i")
    far = A[i + IntImm(1 << 40, "int64")]  # would fault if it were loaded
    value = tir.if_then_else(tir.likely(i < n), A[i] * 2.0, far)
    mod = build_llvm(
        [PrimFunc("guarded", (A, B), For(i, 0, n, SERIAL, BufferStore(B, value, (i,))))]
    )
    a = RNG.standard_normal(37).astype("float32")
    b = np.zeros(37, "float32")
    mod["guarded"](a, b)
    np.testing.assert_allclose(b, a * 2)


@pytest.mark.parametrize("scope", ["local", "global"])
def test_allocate(scope):
    n = Var("n")
    A, B = decl_buffer((n * 16,), "float32", "A"), decl_buffer((n * 16,), "float32", "B")
    T = decl_buffer((16,) if scope == "local" else (n * 16,), "float32", "T", scope=scope)
    i, j = Var("i"), Var("j")
    off = 0 if scope == "global" else i * 16
    fill = For(
        j,
        0,
        16,
        SERIAL,
        BufferStore(T, A[i * 16 + j] * 2.0, (off if scope == "local" else i * 16 + j,)),
    )
    use = For(
        j,
        0,
        16,
        SERIAL,
        BufferStore(B, T[off if scope == "local" else i * 16 + j] + 1.0, (i * 16 + j,)),
    )
    if scope == "local":
        body = For(i, 0, n, SERIAL, Allocate(T, seq(fill, use)))
        # the local buffer is indexed by j alone
        body = For(
            i,
            0,
            n,
            SERIAL,
            Allocate(
                T,
                seq(
                    For(j, 0, 16, SERIAL, BufferStore(T, A[i * 16 + j] * 2.0, (j,))),
                    For(j, 0, 16, SERIAL, BufferStore(B, T[j] + 1.0, (i * 16 + j,))),
                ),
            ),
        )
    else:
        body = Allocate(T, seq(For(i, 0, n, SERIAL, fill), For(i, 0, n, SERIAL, use)))
    mod = build_llvm([PrimFunc("alloc", (A, B, n), body)])
    a = RNG.standard_normal(16 * 5).astype("float32")
    b = np.zeros_like(a)
    mod["alloc"](a, b, 5)
    np.testing.assert_allclose(b, a * 2 + 1)


def test_symbolic_shapes_and_scalar_params():
    n, alpha, k = Var("n"), Var("alpha", "float32"), Var("k", "int64")
    A, B = decl_buffer((n,), "float32", "A"), decl_buffer((n,), "float32", "B")
    i = Var("i")
    value = A[i] * alpha + Cast("float32", k)
    mod = build_llvm(
        [PrimFunc("scale", (A, B, alpha, k), For(i, 0, n, SERIAL, BufferStore(B, value, (i,))))]
    )
    for size in (1, 7, 100):
        a = RNG.standard_normal(size).astype("float32")
        b = np.zeros_like(a)
        mod["scale"](a, b, 2.5, -3)
        np.testing.assert_allclose(b, a * 2.5 - 3, rtol=1e-6, atol=1e-6)  # may be an fma


def _row_sum_func(outer_kind, inner_kind):
    """B[r] = sum_c A[r, c] for a (rows, cols) A, flattened; the reduction in a local buffer."""
    rows, cols = Var("rows"), Var("cols")
    A, B = decl_buffer((rows * cols,), "float32", "A"), decl_buffer((rows,), "float32", "B")
    acc = decl_buffer((1,), "float32", "acc", scope="local")
    r, rr, c = Var("r"), Var("rr"), Var("c")
    row = r * 4 + rr
    reduce = Allocate(
        acc,
        seq(
            BufferStore(acc, tir.const(0.0), (0,)),
            For(c, 0, cols, SERIAL, BufferStore(acc, acc[0] + A[row * cols + c], (0,))),
            BufferStore(B, acc[0], (row,)),
        ),
    )
    body = For(r, 0, tir.floordiv(rows, 4), outer_kind, For(rr, 0, 4, inner_kind, reduce))
    return PrimFunc(f"rowsum_{outer_kind.value}_{inner_kind.value}", (A, B, rows, cols), body)


@pytest.mark.parametrize("kinds", [(SERIAL, SERIAL), (PARALLEL, SERIAL), (PARALLEL, PARALLEL)])
def test_reduction_and_parallel_loops(kinds):
    func = _row_sum_func(*kinds)
    mod = build_llvm([func])
    a = RNG.standard_normal((64, 33)).astype("float32")
    b = np.zeros(64, "float32")
    mod[func.name](a.ravel(), b, 64, 33)
    np.testing.assert_allclose(b, a.sum(axis=1), rtol=1e-5, atol=1e-5)
    if PARALLEL in kinds:
        assert "tessera_parallel_for" in mod.get_source("ll")


def test_parallel_body_allocates_and_uses_scalar_params():
    n, beta = Var("n"), Var("beta", "float64")
    A, B = decl_buffer((n * 8,), "float64", "A"), decl_buffer((n * 8,), "float64", "B")
    T = decl_buffer((8,), "float64", "T", scope="global")
    i, j = Var("i"), Var("j")
    body = For(
        i,
        1,
        n - 2,
        PARALLEL,
        Allocate(
            T,
            seq(
                For(j, 0, 8, SERIAL, BufferStore(T, A[i * 8 + j] + beta, (j,))),
                For(j, 0, 8, SERIAL, BufferStore(B, T[7 - j], (i * 8 + j,))),
            ),
        ),
    )
    mod = build_llvm([PrimFunc("rev", (A, B, n, beta), body)])
    a = RNG.standard_normal(80)
    b = np.zeros(80)
    mod["rev"](a, b, 10, 0.5)
    want = (a.reshape(10, 8)[:, ::-1] + 0.5).ravel()
    np.testing.assert_allclose(b[8:-8], want[8:-8])
    assert not b[:8].any() and not b[-8:].any()


# -- targets, sources, errors --------------------------------------------------------------------


def test_cross_compile_for_aarch64_gives_sources_and_object_but_does_not_run():
    f = ewise_func("vadd", ["float32"] * 2, "float32", lambda a, b: a + b, lanes=4)
    mod = build_llvm([f], Target("llvm -mtriple=aarch64-linux-gnu"))
    asm = mod.get_source("asm")
    assert "fadd\tv" in asm and "ret" in asm  # NEON vector add
    assert "aarch64" in mod.get_source("ll")
    with pytest.raises(RuntimeError, match="aarch64"):
        mod["vadd"](np.zeros(64, "float32"), np.zeros(64, "float32"), np.zeros(64, "float32"))


def test_sources_and_export_library(tmp_path):
    from tessera.runtime import load_module

    f = ewise_func("vmul", ["float32"] * 2, "float32", lambda a, b: a * b, lanes=8)
    mod = build_llvm([f])
    assert "define" in mod.get_source("ll") and "vmul" in mod.get_source("asm")
    lib = load_module(mod.export_library(tmp_path / "vmul.so"))
    a, b = RNG.standard_normal(64).astype("float32"), RNG.standard_normal(64).astype("float32")
    np.testing.assert_allclose(run(lib, "vmul", [a, b], "float32"), a * b)


def test_host_build_uses_the_widest_vectors_of_this_cpu():
    f = ewise_func("axpy", ["float32"] * 2, "float32", lambda a, b: a * 3.0 + b)
    asm = build_llvm([f]).get_source("asm")
    width = Target("llvm").vector_width_bits
    assert {512: "zmm", 256: "ymm", 128: "xmm"}.get(width, "") in asm or width == 128


@pytest.mark.skipif("fma" not in Target("llvm").features, reason="host has no FMA")
def test_multiply_add_is_contracted_into_fma():
    f = ewise_func("muladd", ["float32"] * 3, "float32", lambda a, b, c: a * b + c, lanes=8)
    mod = build_llvm([f])
    assert "vfmadd" in mod.get_source("asm")
    a, b, c = np.random.default_rng(1).standard_normal((3, 64)).astype("float32")
    exact = a.astype("float64") * b + c  # one rounding: an fma is at least as close as a*b+c
    got = run(mod, "muladd", [a, b, c], "float32")
    assert np.all(np.abs(got - exact) <= np.abs((a * b + c) - exact) + 1e-12)


def test_clear_errors():
    A = decl_buffer((4, 4), "float32", "A")
    i = Var("i")
    with pytest.raises(ValueError, match="flattened"):
        build_llvm([PrimFunc("two_d", (A,), BufferStore(A, tir.const(1.0), (i, i)))])
    B = decl_buffer((4,), "float32", "B")
    with pytest.raises(ValueError, match="variable m"):
        build_llvm([PrimFunc("free", (B,), BufferStore(B, tir.const(1.0), (Var("m"),)))])
    with pytest.raises(ValueError, match="cannot be named 'tanhf'"):
        build_llvm([PrimFunc("tanhf", (B,), BufferStore(B, tir.const(1.0), (0,)))])
    with pytest.raises(ValueError, match="llvm target"):
        build_llvm([PrimFunc("c", (B,), BufferStore(B, tir.const(1.0), (0,)))], "c")


@pytest.mark.parametrize("lanes", [1, 4])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_float_min_max_propagate_nan_like_numpy(dtype, lanes):
    funcs = [
        ewise_func("min", [dtype, dtype], dtype, tir.min, n=8, lanes=lanes),
        ewise_func("max", [dtype, dtype], dtype, tir.max, n=8, lanes=lanes),
    ]
    mod = build_llvm(funcs)
    a = np.array([np.nan, 1, np.nan, 2, -np.inf, 0, 5, -5], dtype)
    b = np.array([1, np.nan, np.nan, 3, np.inf, np.nan, 4, -4], dtype)
    np.testing.assert_array_equal(run(mod, "min", [a, b], dtype), np.minimum(a, b))
    np.testing.assert_array_equal(run(mod, "max", [a, b], dtype), np.maximum(a, b))


def test_a_read_only_array_is_refused_where_the_kernel_writes():
    mod = build_llvm([ewise_func("double", ["float32"], "float32", lambda a: a * 2.0, n=8)])
    a = np.arange(8, dtype="float32")
    a.setflags(write=False)  # inputs may be read-only
    out = np.zeros(8, "float32")
    mod["double"](a, out)
    np.testing.assert_array_equal(out, a * 2)
    out.setflags(write=False)
    with pytest.raises(ValueError, match="argument 'C' of double: the kernel writes it"):
        mod["double"](a, out)
    assert [p.written for p in mod["double"].info.params] == [False, True]


def _division_by_zero_operands(dtype):
    info = np.iinfo(dtype)
    a = np.array([7, -7, info.min, info.min, 0, info.max, 5, -5], dtype=np.int64)
    b = np.array([0, 0, -1, 0, 0, -1, -1, 2], dtype=np.int64)
    if info.min == 0:  # unsigned: no -1, no negative a
        a, b = np.abs(a) % (info.max + 1), np.where(b < 0, 3, b)
    return a.astype(dtype), b.astype(dtype)


def _division_by_zero_reference(a, b):
    """numpy's answers (by 0: 0; INT_MIN // -1 wraps), and truncating division's."""
    with np.errstate(divide="ignore", over="ignore"):
        floor_q, floor_r = np.floor_divide(a, b), np.mod(a, b)
        trunc_q = np.where(b == 0, 0, _trunc_div(a, np.where(b == 0, 1, b))).astype(a.dtype)
        trunc_r = np.where(b == 0, 0, a - b * trunc_q).astype(a.dtype)  # like np.fmod
    return {"floordiv": floor_q, "floormod": floor_r, "div": trunc_q, "mod": trunc_r}


@pytest.mark.parametrize("lanes", [1, 4])
@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8", "uint32"])
def test_integer_division_by_zero_does_not_trap(dtype, lanes):
    # x86 idiv traps (SIGFPE kills the process) on x / 0 and INT_MIN / -1: they follow numpy
    ops = {"floordiv": tir.floordiv, "floormod": tir.floormod}
    ops |= {"div": tir.truncdiv, "mod": tir.truncmod}
    funcs = [ewise_func(op, [dtype, dtype], dtype, fn, n=8, lanes=lanes) for op, fn in ops.items()]
    mod = build_llvm(funcs)
    a, b = _division_by_zero_operands(dtype)
    for op, want in _division_by_zero_reference(a, b).items():
        np.testing.assert_array_equal(run(mod, op, [a, b], dtype), want, err_msg=op)


# -- index arithmetic: Note [index arithmetic nsw] -----------------------------------------------


def _shifted_rows(rows):
    """B[i, j] = A[i - 1, j] * 2 (0 in row 0): a guarded read one row up, on 1-D buffers of
    rows x 7 elements (`rows` a constant or a Var)."""
    A = decl_buffer((rows * 7,), "float32", "A")
    B = decl_buffer((rows * 7,), "float32", "B")
    i, j = Var("i"), Var("j")
    value = tir.if_then_else(i >= 1, A[(i - 1) * 7 + j] * 2.0, tir.const(0.0, "float32"))
    body = For(i, 0, rows, SERIAL, For(j, 0, 7, SERIAL, BufferStore(B, value, (i * 7 + j,))))
    return PrimFunc("shifted", (A, B), body)


def _nsw_ir(func, monkeypatch, extent=1 << 30, rows=None) -> str:
    """The unoptimized LLVM IR lines of func's index arithmetic (add/sub/mul on i32/i64)."""
    from llvmlite import ir as llir

    monkeypatch.setattr(FunctionEmitter, "NSW_INT32_EXTENT", extent)
    module = llir.Module()
    fn = llir.Function(module, llir.FunctionType(llir.IntType(32), [llir.IntType(32)]), name="f")
    em = FunctionEmitter(ModuleContext(module, Target("llvm")), fn, "f")
    for buf in func.params:
        em.bind_buffer(buf, em.alloca(llir.FloatType()), 4)  # never run: any float pointer
    if rows is not None:
        em.bind_var(rows, em.fn.args[0])
    em.stmt(func.body)
    em.finish()
    return "\n".join(
        line
        for line in str(module).splitlines()
        if any(f" {op} " in line for op in ("add", "sub", "mul"))
    )


def test_index_arithmetic_is_nsw_for_constant_extents(monkeypatch):
    """A constant extent of at most 2^30 elements: the index adds and multiplies are nsw (the
    loop increments are nsw either way), and the code computes what wrapping arithmetic does."""
    func = _shifted_rows(IntImm(24))
    assert _nsw_ir(func, monkeypatch).count("nsw") > _nsw_ir(func, monkeypatch, -1).count("nsw")
    a = RNG.standard_normal(24 * 7).astype("float32")
    want = np.concatenate([np.zeros(7, "float32"), a[:-7] * 2])
    for extent in (-1, 1 << 30):  # -1: no buffer qualifies (wrapping arithmetic)
        monkeypatch.setattr(FunctionEmitter, "NSW_INT32_EXTENT", extent)
        b = np.zeros_like(a)
        build_llvm([func])["shifted"](a, b)
        np.testing.assert_array_equal(b, want)


def test_index_arithmetic_of_symbolic_extents_wraps(monkeypatch):
    """A buffer of symbolic extent may hold 2^31 elements or more: its int32 index arithmetic
    keeps wrapping (the same IR as with nsw switched off)."""
    rows = Var("rows")
    func = _shifted_rows(rows)
    assert _nsw_ir(func, monkeypatch, rows=rows) == _nsw_ir(func, monkeypatch, -1, rows=rows)


@pytest.mark.parametrize(
    "dtype,stride,lanes",
    [("uint8", 2, 16), ("int32", 3, 8), ("float32", 4, 5), ("int32", 8, 8), ("float32", 8, 3)],
)
def test_strided_vector_loads_read_every_stride_th_element(dtype, stride, lanes):
    """Note [strided loads]: one load of the span and a shuffle; the buffer ends at the last
    lane read, so a load past the span would show up to a sanitizer (and the values differ)."""
    rows = 3
    span = (lanes - 1) * stride + 1
    a = decl_buffer((rows * span,), dtype, "a")
    c = decl_buffer((rows * lanes,), dtype, "c")
    i = Var("i", "int32")
    load = tir.BufferLoad(a, (Ramp(i * span, IntImm(stride), lanes),))
    body = For(i, 0, rows, SERIAL, BufferStore(c, load, (Ramp(i * lanes, IntImm(1), lanes),)))
    mod = build_llvm([PrimFunc("strided", [a, c], body)])
    x = (RNG.integers(0, 100, rows * span)).astype(dtype)
    y = run(mod, "strided", [x], dtype, n=rows * lanes)
    np.testing.assert_array_equal(y.reshape(rows, lanes), x.reshape(rows, span)[:, ::stride])
    assert "shufflevector" in mod.get_source("ll")
