"""The C code generator: hand-built PrimFuncs compiled with the system C compiler, run against
numpy. Each test batches its functions into one build (a compile takes a few tenths of a second).
"""

from __future__ import annotations

import math
import shutil
import subprocess

import numpy as np
import pytest

from tessera import tir
from tessera.codegen.c import CCompileError, build_c, compile_c, emit_c
from tessera.runtime.module import Module
from tessera.tir import (
    Allocate,
    BufferStore,
    For,
    ForKind,
    IfThenElse,
    LetStmt,
    PrimFunc,
    Ramp,
    Var,
    decl_buffer,
    seq,
)

SERIAL, PARALLEL = ForKind.SERIAL, ForKind.PARALLEL
INTS = ["int8", "int16", "int32", "int64"]
FLOATS = ["float32", "float64"]
RNG = np.random.default_rng(0)


def elementwise(name, fn, dtype, out_dtype=None, nargs=2):
    """Y[i] = fn(X0[i], X1[i], ...) for i < n."""
    n, i = Var("n"), Var("i")
    xs = [decl_buffer((n,), dtype, f"X{k}") for k in range(nargs)]
    y = decl_buffer((n,), out_dtype or dtype, "Y")
    body = For(i, 0, n, SERIAL, BufferStore(y, fn(*[x[i] for x in xs]), (i,)))
    return PrimFunc(name, (*xs, y), body)


def run(mod, name, *inputs, out_dtype, out_shape=None):
    out = np.zeros(out_shape or inputs[0].shape, out_dtype)
    mod[name](*inputs, out)
    return out


# -- arithmetic ----------------------------------------------------------------------------

BINARY = {
    "add": (lambda a, b: a + b, lambda a, b: a + b),
    "sub": (lambda a, b: a - b, lambda a, b: a - b),
    "mul": (lambda a, b: a * b, lambda a, b: a * b),
    "truncdiv": (tir.truncdiv, lambda a, b: np.sign(a) * np.sign(b) * (np.abs(a) // np.abs(b))),
    "truncmod": (tir.truncmod, np.fmod),
    "floordiv": (tir.floordiv, np.floor_divide),
    "floormod": (tir.floormod, np.mod),
    "min": (tir.min, np.minimum),
    "max": (tir.max, np.maximum),
}


def test_integer_binary_ops_match_numpy_for_negative_operands():
    funcs = [
        elementwise(f"{op}_{dt}", fn, dt)
        for dt in INTS + ["uint8", "uint32"]
        for op, (fn, _) in BINARY.items()
    ]
    mod = build_c(funcs)
    for dt in INTS + ["uint8", "uint32"]:
        lo = 0 if dt.startswith("u") else -100
        a = RNG.integers(lo, 100, 257).astype(dt)
        b = RNG.integers(1, 10, 257).astype(dt)
        if lo < 0:
            b = (b * RNG.choice([-1, 1], 257)).astype(dt)
        for op, (_, ref) in BINARY.items():
            with np.errstate(over="ignore"):
                want = ref(a, b).astype(dt)  # add/mul wrap in int8, like numpy
            got = run(mod, f"{op}_{dt}", a, b, out_dtype=dt)
            np.testing.assert_array_equal(got, want, err_msg=f"{op} {dt}")


def test_float_binary_ops_match_numpy():
    ops = {**BINARY, "div": (lambda a, b: a / b, np.divide)}
    del ops["truncdiv"]
    funcs = [
        elementwise(f"{op}_{dt}", fn, dt)
        for dt in ("float32", "float64")
        for op, (fn, _) in ops.items()
    ]
    mod = build_c(funcs)
    for dt in ("float32", "float64"):
        a = (RNG.standard_normal(100) * 10).astype(dt)
        b = (RNG.standard_normal(100) * 3).astype(dt)
        a[:4], b[:4] = [7.5, -7.5, 7.5, -0.0], [2.5, 2.5, -2.5, 3.0]  # exact multiples, signed zero
        for op, (_, ref) in ops.items():
            got = run(mod, f"{op}_{dt}", a, b, out_dtype=dt)
            np.testing.assert_allclose(got, ref(a, b), rtol=1e-6, err_msg=f"{op} {dt}")
            np.testing.assert_array_equal(np.signbit(got[:4]), np.signbit(ref(a, b)[:4]))


def test_float_min_max_propagate_nan_like_numpy():
    funcs = [
        elementwise(f"{op}_{dt}", fn, dt)
        for dt in ("float32", "float64")
        for op, fn in (("min", tir.min), ("max", tir.max))
    ]
    mod = build_c(funcs)
    for dt in ("float32", "float64"):
        a = np.array([np.nan, 1, np.nan, 2, -np.inf], dt)
        b = np.array([1, np.nan, np.nan, 3, np.inf], dt)
        for op, ref in (("min", np.minimum), ("max", np.maximum)):
            np.testing.assert_array_equal(run(mod, f"{op}_{dt}", a, b, out_dtype=dt), ref(a, b))


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
        safe_b = np.where(b == 0, 1, b)
        trunc_q = np.where(b == 0, 0, np.sign(a) * np.sign(safe_b) * (np.abs(a) // np.abs(safe_b)))
        trunc_q = trunc_q.astype(a.dtype)
        trunc_r = np.where(b == 0, 0, a - b * trunc_q).astype(a.dtype)  # like np.fmod
    return {"floordiv": floor_q, "floormod": floor_r, "div": trunc_q, "mod": trunc_r}


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8", "uint32"])
def test_integer_division_by_zero_does_not_trap(dtype):
    # x86 idiv traps (SIGFPE kills the process) on x / 0 and INT_MIN / -1: they follow numpy
    ops = {"floordiv": tir.floordiv, "floormod": tir.floormod}
    ops |= {"div": tir.truncdiv, "mod": tir.truncmod}
    mod = build_c([elementwise(f"{op}_{dtype}", fn, dtype) for op, fn in ops.items()])
    a, b = _division_by_zero_operands(dtype)
    for op, want in _division_by_zero_reference(a, b).items():
        got = run(mod, f"{op}_{dtype}", a, b, out_dtype=dtype)
        np.testing.assert_array_equal(got, want, err_msg=op)


def test_comparisons_logic_and_select():
    def cmp_all(a, b):
        big = tir.Select((a < b) | (a >= b + 5), a, b)
        return tir.Select(tir.logical_not(a == b) & (a != 3) & (a <= 7) & (b > -2), big, a * 0 - 1)

    mod = build_c([elementwise("logic", cmp_all, "int32")])
    a, b = RNG.integers(-10, 10, 300).astype("int32"), RNG.integers(-10, 10, 300).astype("int32")
    big = np.where((a < b) | (a >= b + 5), a, b)
    want = np.where((a != b) & (a != 3) & (a <= 7) & (b > -2), big, -1)
    np.testing.assert_array_equal(run(mod, "logic", a, b, out_dtype="int32"), want)


# -- intrinsics ----------------------------------------------------------------------------

_erf = np.vectorize(math.erf)
# name -> (numpy reference, input range)
FLOAT_INTRINSICS = {
    "exp": (np.exp, (-5, 5)),
    "exp2": (np.exp2, (-5, 5)),
    "log": (np.log, (0.1, 10)),
    "log2": (np.log2, (0.1, 10)),
    "log10": (np.log10, (0.1, 10)),
    "sqrt": (np.sqrt, (0, 10)),
    "rsqrt": (lambda x: 1 / np.sqrt(x), (0.1, 10)),
    "sin": (np.sin, (-4, 4)),
    "cos": (np.cos, (-4, 4)),
    "tan": (np.tan, (-1, 1)),
    "asin": (np.arcsin, (-1, 1)),
    "acos": (np.arccos, (-1, 1)),
    "atan": (np.arctan, (-4, 4)),
    "sinh": (np.sinh, (-3, 3)),
    "cosh": (np.cosh, (-3, 3)),
    "tanh": (np.tanh, (-3, 3)),
    "asinh": (np.arcsinh, (-3, 3)),
    "acosh": (np.arccosh, (1, 5)),
    "atanh": (np.arctanh, (-0.9, 0.9)),
    "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), (-8, 8)),
    "erf": (lambda x: _erf(x.astype("float64")).astype(x.dtype), (-3, 3)),
    "floor": (np.floor, (-5, 5)),
    "ceil": (np.ceil, (-5, 5)),
    "round": (np.round, (-5, 5)),
    "trunc": (np.trunc, (-5, 5)),
    "abs": (np.abs, (-5, 5)),
}
FLOAT_BINARY_INTRINSICS = {"pow": np.power, "atan2": np.arctan2, "fmod": np.fmod}
INT_INTRINSICS = {
    "bitwise_and": (tir.bitwise_and, np.bitwise_and),
    "bitwise_or": (tir.bitwise_or, np.bitwise_or),
    "bitwise_xor": (tir.bitwise_xor, np.bitwise_xor),
    "shift_left": (tir.shift_left, np.left_shift),
    "shift_right": (tir.shift_right, np.right_shift),
}


def _float_input(dt, lo, hi, size=64):
    x = RNG.uniform(lo, hi, size).astype(dt)
    x[:6] = np.clip(np.array([0.5, 1.5, 2.5, -0.5, -2.5, 1.0]), lo, hi)  # halfway cases for round
    return x


def test_every_float_intrinsic_matches_numpy():
    funcs = []
    for dt in ("float32", "float64"):
        for name in FLOAT_INTRINSICS:
            funcs.append(elementwise(f"{name}_{dt}", getattr(tir, name), dt, nargs=1))
        for name in FLOAT_BINARY_INTRINSICS:
            funcs.append(elementwise(f"{name}_{dt}", getattr(tir, name), dt))
        funcs.append(elementwise(f"fma_{dt}", tir.fma, dt, nargs=3))
        funcs.append(elementwise(f"isnan_{dt}", tir.isnan, dt, "bool", nargs=1))
        funcs.append(elementwise(f"isinf_{dt}", tir.isinf, dt, "bool", nargs=1))
    mod = build_c(funcs)
    for dt in ("float32", "float64"):
        rtol = 2e-6 if dt == "float32" else 1e-13
        for name, (ref, (lo, hi)) in FLOAT_INTRINSICS.items():
            x = _float_input(dt, lo, hi)
            got = run(mod, f"{name}_{dt}", x, out_dtype=dt)
            np.testing.assert_allclose(got, ref(x), rtol=rtol, atol=1e-7, err_msg=f"{name} {dt}")
        for name, ref in FLOAT_BINARY_INTRINSICS.items():
            a, b = _float_input(dt, 0.5, 3), _float_input(dt, -2, 2)
            got = run(mod, f"{name}_{dt}", a, b, out_dtype=dt)
            np.testing.assert_allclose(got, ref(a, b), rtol=rtol, err_msg=f"{name} {dt}")
        a, b, c = (_float_input(dt, -2, 2) for _ in range(3))
        got = run(mod, f"fma_{dt}", a, b, c, out_dtype=dt)
        np.testing.assert_allclose(got, a * b + c, rtol=rtol, atol=1e-6)
        x = np.array([1.0, np.nan, np.inf, -np.inf, 0.0], dt)
        np.testing.assert_array_equal(run(mod, f"isnan_{dt}", x, out_dtype="bool"), np.isnan(x))
        np.testing.assert_array_equal(run(mod, f"isinf_{dt}", x, out_dtype="bool"), np.isinf(x))


def test_sigmoid_at_the_edges_of_float_range():
    # 1 / (1 + exp(-x)) overflows exp below x = -87.3 (float32) and gave 0 there, not the
    # subnormal value; the helper computes on exp(-|x|) <= 1.
    mod = build_c([elementwise(f"sigmoid_{dt}", tir.sigmoid, dt, nargs=1) for dt in FLOATS])
    for dt in FLOATS:
        x = np.array([-800, -200, -100, -95, -88, -87, -20, -0.0, 0, 1e-3, 20, 100, 800], dt)
        x = np.concatenate([x, np.array([np.inf, -np.inf, np.nan], dt)])
        with np.errstate(over="ignore"):
            want = (1 / (1 + np.exp(-x.astype("float64")))).astype(dt)
        got = run(mod, f"sigmoid_{dt}", x, out_dtype=dt)
        np.testing.assert_allclose(got, want, rtol=4 * np.finfo(dt).eps, atol=0, err_msg=dt)
        if dt == "float32":
            assert (got[2:5] > 0).all()  # -100, -95, -88: subnormal, not 0


def test_integer_intrinsics_match_numpy():
    funcs = []
    for dt in INTS:
        funcs += [
            elementwise(f"{n}_{dt}", lambda a, b, fn=fn: fn(a, b & 3), dt)
            for n, (fn, _) in INT_INTRINSICS.items()
        ]
        funcs.append(elementwise(f"bitwise_not_{dt}", tir.bitwise_not, dt, nargs=1))
        funcs.append(elementwise(f"popcount_{dt}", tir.popcount, dt, nargs=1))
        funcs.append(elementwise(f"abs_{dt}", tir.abs, dt, nargs=1))
    mod = build_c(funcs)
    for dt in INTS:
        a = RNG.integers(-100, 100, 100).astype(dt)
        b = RNG.integers(0, 50, 100).astype(dt)
        for name, (_, ref) in INT_INTRINSICS.items():
            got = run(mod, f"{name}_{dt}", a, b, out_dtype=dt)
            want = ref(a, b & 3).astype(dt)  # the kernels compute fn(a, b & 3)
            np.testing.assert_array_equal(got, want, err_msg=f"{name} {dt}")
        np.testing.assert_array_equal(run(mod, f"bitwise_not_{dt}", a, out_dtype=dt), ~a)
        bits = np.array(
            [bin(int(v) & ((1 << np.dtype(dt).itemsize * 8) - 1)).count("1") for v in a]
        )
        np.testing.assert_array_equal(run(mod, f"popcount_{dt}", a, out_dtype=dt), bits)
        np.testing.assert_array_equal(run(mod, f"abs_{dt}", a, out_dtype=dt), np.abs(a))


def test_reinterpret_and_likely():
    funcs = [
        elementwise("f32_bits", lambda x: tir.reinterpret(x, "int32"), "float32", "int32", nargs=1),
        elementwise(
            "bits_f64", lambda x: tir.reinterpret(x, "float64"), "int64", "float64", nargs=1
        ),
        elementwise(
            "f16_bits", lambda x: tir.reinterpret(x, "uint16"), "float16", "uint16", nargs=1
        ),
        elementwise(
            "bits_f16", lambda x: tir.reinterpret(x, "float16"), "int16", "float16", nargs=1
        ),
        elementwise("likely", lambda a, b: tir.Select(tir.likely(a < b), a, b), "int32"),
    ]
    mod = build_c(funcs)
    x = RNG.standard_normal(50).astype("float32")
    np.testing.assert_array_equal(run(mod, "f32_bits", x, out_dtype="int32"), x.view("int32"))
    i = RNG.integers(-(2**62), 2**62, 50)
    np.testing.assert_array_equal(run(mod, "bits_f64", i, out_dtype="float64").view("int64"), i)
    h = RNG.standard_normal(50).astype("float16")
    np.testing.assert_array_equal(run(mod, "f16_bits", h, out_dtype="uint16"), h.view("uint16"))
    np.testing.assert_array_equal(run(mod, "bits_f16", h.view("int16"), out_dtype="float16"), h)
    a, b = RNG.integers(-9, 9, 50).astype("int32"), RNG.integers(-9, 9, 50).astype("int32")
    np.testing.assert_array_equal(run(mod, "likely", a, b, out_dtype="int32"), np.minimum(a, b))


def test_every_intrinsic_is_covered_by_these_tests():
    tested = set(FLOAT_INTRINSICS) | set(FLOAT_BINARY_INTRINSICS) | set(INT_INTRINSICS)
    tested |= {"fma", "isnan", "isinf", "bitwise_not", "popcount", "reinterpret", "likely"}
    tested |= {"if_then_else"}  # test_if_then_else_guards_an_out_of_bounds_load
    tested |= {"prefetch"}  # tests/codegen/test_prefetch.py
    tested |= {"dot_u8i8", "dot_u8i8_bounded"}  # tests/codegen/test_int8_dot.py
    tested |= {"dot16_s8"}  # tests/micro/test_mve.py (MVE's VMLADAVA on the M55)
    tested |= {"dot_bf16"}  # tests/quantize/test_bf16.py
    tested |= {"mmla_u8i8"}  # tests/topi/test_arm_mmla.py, tests/cross (LLVM, AArch64 i8mm only)
    assert set(tir.INTRINSICS) <= tested, set(tir.INTRINSICS) - tested


# -- casts and 16-bit floats ---------------------------------------------------------------

CASTS = [
    ("float32", "int32"),
    ("int32", "float32"),
    ("float64", "float32"),
    ("int64", "float64"),
    ("int32", "int8"),
    ("uint8", "int32"),
    ("float32", "bool"),
    ("bool", "int32"),
    ("float32", "float16"),
    ("float16", "float32"),
    ("float64", "float16"),
    ("int32", "float16"),
    ("float32", "bfloat16"),
    ("bfloat16", "float32"),
    ("float64", "bfloat16"),
    ("float16", "bfloat16"),
]


def _cast_inputs(dt):
    if dt == "bool":
        return np.array([True, False, True, True])
    if dt in ("bfloat16",):
        return _to_bf16(RNG.standard_normal(64) * 100)
    if np.dtype(dt).kind == "f":
        x = (RNG.standard_normal(256) * 300).astype(dt)
        special = [
            0.0,
            -0.0,
            65504.0,
            65519.0,
            65520.0,
            1e6,
            -1e6,
            6e-8,
            3e-8,
            1e-6,
            0.5,
            np.inf,
            -np.inf,
        ]
        with np.errstate(over="ignore"):
            x[: len(special)] = np.array(special).astype(dt)
        return x
    info = np.iinfo(dt)
    return RNG.integers(max(info.min, -5000), min(info.max, 5000), 256).astype(dt)


def _to_bf16(x) -> np.ndarray:
    """float32 -> bfloat16 bits (uint16), round to nearest even; NaN stays NaN."""
    bits = np.asarray(x, "float32").view("uint32").astype("uint64")
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("uint16")
    return np.where(np.isnan(np.asarray(x, "float32")), np.uint16(0x7FC0), rounded)


def _from_bf16(bits) -> np.ndarray:
    return (bits.astype("uint32") << 16).view("float32")


def _cast_reference(x, src, dst):
    if src == "bfloat16":
        x = _from_bf16(x)
    if dst == "bfloat16":
        if src == "float64":  # round once, from the exact value: through a library that knows
            ml_dtypes = pytest.importorskip("ml_dtypes")
            return x.astype(ml_dtypes.bfloat16).view("uint16")
        return _to_bf16(x.astype("float32"))
    with np.errstate(invalid="ignore", over="ignore"):
        return x.astype(dst)


def _cast_funcs():
    return [
        elementwise(f"cast_{s}_{d}", lambda x, d=d: x.astype(d), s, d, nargs=1) for s, d in CASTS
    ]


def _check_casts(mod):
    for src, dst in CASTS:
        x = _cast_inputs(src)
        if src == "float32" and dst in ("int32", "bool"):
            x = x[np.isfinite(x)]
        want = _cast_reference(x, src, dst)
        got = run(mod, f"cast_{src}_{dst}", x, out_dtype=np.asarray(want).dtype)
        np.testing.assert_array_equal(got, want, err_msg=f"{src} -> {dst}")


def test_casts_match_numpy_bit_for_bit():
    _check_casts(build_c(_cast_funcs()))


def test_casts_without_compiler_float16_use_the_bit_helpers():
    funcs = _cast_funcs()
    source = emit_c(funcs).replace("defined(__FLT16_MAX__)", "0")
    assert "TESSERA_NO_FLOAT16" in source
    library = compile_c(source, name="no_float16")
    from tessera.codegen.common import function_info

    mod = Module.from_library(str(library), [function_info(f) for f in funcs], {"c": source})
    _check_casts(mod)
    # every finite float16 and the float32 values halfway between them round like numpy
    halves = np.arange(0, 2**16, dtype="uint32").astype("uint16").view("float16")
    halves = halves[np.isfinite(halves)]
    x = np.concatenate([halves.astype("float32"), (halves[:-1].astype("float32") + halves[1:]) / 2])
    got = run(mod, "cast_float32_float16", x, out_dtype="float16")
    np.testing.assert_array_equal(got.view("uint16"), x.astype("float16").view("uint16"))
    back = run(mod, "cast_float16_float32", halves, out_dtype="float32")
    np.testing.assert_array_equal(back, halves.astype("float32"))


def test_float16_arithmetic_rounds_each_operation_like_numpy():
    def f(a, b):
        return a * b + a / b - tir.sqrt(tir.abs(a))

    funcs = [elementwise(f"f16_{k}", f, "float16") for k in range(1)]
    funcs.append(elementwise("bf16_mul_add", lambda a, b: a * b + a, "bfloat16"))
    mod = build_c(funcs)
    a = (RNG.standard_normal(500) * 20).astype("float16")
    b = (RNG.standard_normal(500) * 20).astype("float16")
    want = a * b + a / b - np.sqrt(np.abs(a))
    np.testing.assert_array_equal(run(mod, "f16_0", a, b, out_dtype="float16"), want)
    x, y = _to_bf16(RNG.standard_normal(100)), _to_bf16(RNG.standard_normal(100))
    prod = _to_bf16(_from_bf16(x) * _from_bf16(y))
    want = _to_bf16(_from_bf16(prod) + _from_bf16(x))
    np.testing.assert_array_equal(run(mod, "bf16_mul_add", x, y, out_dtype="uint16"), want)


# -- vectors -------------------------------------------------------------------------------


def test_vector_loads_and_stores_contiguous_strided_and_gathered():
    n, i = Var("n"), Var("i")
    A, B = decl_buffer((n,), "float32", "A"), decl_buffer((n,), "float32", "B")
    Ix = decl_buffer((n,), "int32", "Ix")
    C = decl_buffer((n,), "float32", "C")
    s = Var("s", "float32")
    lanes = 4
    contiguous = Ramp(i * lanes, 1, lanes)
    # C[4i:4i+4] = A[4i:4i+4] * s + B[gathered at Ix[4i:4i+4]]
    body1 = For(
        i,
        0,
        n // lanes,
        SERIAL,
        BufferStore(C, A[contiguous] * tir.Broadcast(s, lanes) + B[Ix[contiguous]], (contiguous,)),
    )
    # strided: even elements of A scattered to the odd slots of C (first half of the array)
    strided_load, strided_store = Ramp(i * 8, 2, lanes), Ramp(i * 8 + 1, 2, lanes)
    body2 = For(i, 0, n // 8, SERIAL, BufferStore(C, A[strided_load] + 1.0, (strided_store,)))
    f1 = PrimFunc("vec_gather", (A, B, Ix, C, s), body1)
    f2 = PrimFunc("vec_strided", (A, C), body2)
    mod = build_c([f1, f2])
    a, b = RNG.standard_normal(64).astype("float32"), RNG.standard_normal(64).astype("float32")
    ix = RNG.integers(0, 64, 64).astype("int32")
    c = np.zeros(64, "float32")
    mod["vec_gather"](a, b, ix, c, 1.5)
    np.testing.assert_allclose(c, a * np.float32(1.5) + b[ix], rtol=1e-6)
    c = np.zeros(64, "float32")
    mod["vec_strided"](a, c)
    want = np.zeros(64, "float32")
    want[1::2] = a[0::2] + 1
    np.testing.assert_array_equal(c, want)


def test_vector_let_select_and_an_overlapping_store():
    n, i = Var("n"), Var("i")
    A = decl_buffer((n,), "float32", "A")
    C = decl_buffer((n,), "float32", "C")
    x = Var("x", "float32x8")
    ramp = Ramp(i * 8, 1, 8)
    zero = tir.Broadcast(tir.const(0.0), 8)
    relu = LetStmt(x, A[ramp] * 2.0, BufferStore(C, tir.Select(x > zero, x, zero), (ramp,)))
    f1 = PrimFunc("vec_relu", (A, C), For(i, 0, n // 8, SERIAL, relu))
    # A[1:9] = A[0:8]: every lane must read before any lane writes
    shift = BufferStore(A, A[Ramp(0, 1, 8)], (Ramp(1, 1, 8),))
    f2 = PrimFunc("vec_shift", (A,), shift)
    mod = build_c([f1, f2])
    a = RNG.standard_normal(32).astype("float32")
    c = np.zeros(32, "float32")
    mod["vec_relu"](a, c)
    np.testing.assert_array_equal(c, np.maximum(a * 2, 0))
    want = a.copy()
    want[1:9] = a[0:8]
    mod["vec_shift"](a)
    np.testing.assert_array_equal(a, want)


def test_if_then_else_guards_an_out_of_bounds_load():
    n, i = Var("n"), Var("i")
    A, C = decl_buffer((n,), "float32", "A"), decl_buffer((n,), "float32", "C")
    far = i.astype("int64") - (1 << 40)  # a terabyte before A: reading it would crash
    guarded = tir.if_then_else(i < n - 1, A[i + 1], A[far])
    body = For(i, 0, n, SERIAL, IfThenElse(i < n - 1, BufferStore(C, guarded, (i,))))
    lanes = Ramp(i * 4, 1, 4)
    vec = tir.if_then_else(
        lanes < tir.Broadcast(n - 2, 4),
        tir.Broadcast(tir.const(1.0), 4),
        tir.Broadcast(tir.const(2.0), 4),
    )
    body2 = For(i, 0, n // 4, SERIAL, BufferStore(C, vec, (lanes,)))
    mod = build_c([PrimFunc("shift_left", (A, C), body), PrimFunc("vec_ite", (A, C), body2)])
    a, c = RNG.standard_normal(17).astype("float32"), np.zeros(17, "float32")
    mod["shift_left"](a, c)
    np.testing.assert_array_equal(c[:-1], a[1:])
    c = np.zeros(16, "float32")
    mod["vec_ite"](a[:16], c)
    np.testing.assert_array_equal(c, np.where(np.arange(16) < 14, 1.0, 2.0))


# -- memory, shapes, scalars ---------------------------------------------------------------


def _two_stage(name, scope, size):
    """T = A * 2 in an allocated buffer, then C = T + 1."""
    n, i = Var("n"), Var("i")
    A, C = decl_buffer((n,), "float32", "A"), decl_buffer((n,), "float32", "C")
    T = decl_buffer((size if size is not None else n,), "float32", "T", scope=scope)
    stage1 = For(i, 0, n, SERIAL, BufferStore(T, A[i] * 2.0, (i,)))
    j = Var("i")  # the same name: the generated code must still tell them apart
    stage2 = For(j, 0, n, SERIAL, BufferStore(C, T[j] + 1.0, (j,)))
    return PrimFunc(name, (A, C), Allocate(T, seq(stage1, stage2)))


def test_local_and_global_allocations():
    funcs = [
        _two_stage("on_stack", "local", 64),
        _two_stage("big_local", "local", 1 << 20),  # too big for a stack: goes to the heap
        _two_stage("on_heap", "global", None),  # symbolic size
    ]
    source = emit_c(funcs)
    assert "TESSERA_ALIGNED(64) float T[64];" in source
    assert "float* restrict T = (float*)tessera_alloc(4194304);" in source
    assert "tessera_alloc((int64_t)n * 4)" in source
    assert source.count("tessera_free(T);") == 2
    mod = build_c(funcs)
    a = RNG.standard_normal(64).astype("float32")
    for name in ("on_stack", "big_local", "on_heap"):
        c = np.zeros(64, "float32")
        mod[name](a, c)
        np.testing.assert_array_equal(c, a * 2 + 1, err_msg=name)


def test_symbolic_shapes_and_scalar_parameters():
    m, n, i, j = Var("m"), Var("n"), Var("i"), Var("j")
    alpha, k = Var("alpha", "float32"), Var("k", "int64")
    A = decl_buffer((m * n,), "float32", "A")
    B = decl_buffer((m * n,), "float32", "B")
    store = BufferStore(B, A[i * n + j] * alpha + k.astype("float32"), (i * n + j,))
    body = For(i, 0, m, SERIAL, For(j, 0, n, SERIAL, store))
    func = PrimFunc("scale", (A, B, alpha, k), body, attrs=(("param_shapes", ((m, n), (m, n))),))
    mod = build_c([func])
    for shape in ((3, 5), (1, 7)):
        a = RNG.standard_normal(shape).astype("float32")
        b = np.zeros(shape, "float32")
        mod["scale"](a, b, 0.5, 3)
        np.testing.assert_allclose(b, a * np.float32(0.5) + 3, rtol=1e-6)


# -- parallel loops and reductions ---------------------------------------------------------


def _row_sum(name, outer_kind, inner_kind):
    """S[i] = sum_j A[i, j] (init store + update), rows split over the outer loop."""
    m, n = Var("m"), Var("n")
    A, S = decl_buffer((m * n,), "float32", "A"), decl_buffer((m,), "float32", "S")
    i, j = Var("i.outer"), Var("j")
    update = BufferStore(S, S[i] + A[i * n + j], (i,))
    body = seq(BufferStore(S, tir.const(0.0), (i,)), For(j, 0, n, inner_kind, update))
    attrs = (("param_shapes", ((m, n), (m,))),)
    return PrimFunc(name, (A, S), For(i, 0, m, outer_kind, body), attrs=attrs)


def _nested_parallel():
    """C[i, j] = A[i, j] * (i + 1) + shift, both loops parallel, the inner one starting at 1."""
    m, n = Var("m"), Var("n")
    A, C = decl_buffer((m * n,), "float32", "A"), decl_buffer((m * n,), "float32", "C")
    shift = Var("shift", "float32")
    i, j = Var("i"), Var("j")
    value = A[i * n + j] * (i + 1).astype("float32") + shift
    inner = For(j, 1, n - 2, PARALLEL, BufferStore(C, value, (i * n + j,)))
    attrs = (("param_shapes", ((m, n), (m, n))),)
    return PrimFunc("nested", (A, C, shift), For(i, 0, m, PARALLEL, inner), attrs=attrs)


def test_parallel_loops_and_reductions():
    funcs = [_row_sum("row_sum", PARALLEL, SERIAL), _row_sum("row_sum_serial", SERIAL, SERIAL)]
    funcs.append(_nested_parallel())
    source = emit_c(funcs)
    assert "static int32_t row_sum_par_0(int64_t begin, int64_t end, void* closure)" in source
    assert "for (int32_t i_outer = (int32_t)begin; i_outer < (int32_t)end; ++i_outer)" in source
    assert "tessera_parallel_for(m, row_sum_par_0, &i_outer_closure)" in source
    assert "static int32_t nested_par_1(" in source
    assert "for (int32_t j = (int32_t)begin + 1; j < (int32_t)end + 1; ++j)" in source
    mod = build_c(funcs)
    a = RNG.standard_normal((37, 19)).astype("float32")
    for name in ("row_sum", "row_sum_serial"):
        s = np.zeros(37, "float32")
        mod[name](a, s)
        np.testing.assert_allclose(s, a.sum(axis=1), rtol=1e-5, atol=1e-5)
    c = np.zeros_like(a)
    mod["nested"](a, c, 0.25)
    want = np.zeros_like(a)
    want[:, 1:-1] = a[:, 1:-1] * np.arange(1, 38, dtype="float32")[:, None] + np.float32(0.25)
    np.testing.assert_array_equal(c, want)


def test_parallel_loop_with_a_local_buffer_and_a_vector_let_outside():
    n, i, k = Var("n"), Var("i"), Var("k")
    A, C = decl_buffer((n * 4,), "float32", "A"), decl_buffer((n * 4,), "float32", "C")
    T = decl_buffer((4,), "float32", "T", scope="local")
    w = Var("w", "float32x4")
    ramp = Ramp(i * 4, 1, 4)
    inner = Allocate(
        T,
        seq(
            BufferStore(T, A[ramp] + w, (Ramp(0, 1, 4),)),
            For(k, 0, 4, SERIAL, BufferStore(C, T[k] * 2.0, (i * 4 + k,))),
        ),
    )
    weights = Ramp(tir.const(1.0), tir.const(1.0), 4)  # [1, 2, 3, 4]
    body = LetStmt(w, weights, For(i, 0, n, PARALLEL, inner))
    attrs = (("param_shapes", ((n, 4), (n, 4))),)
    mod = build_c([PrimFunc("par_local", (A, C), body, attrs=attrs)])
    a = RNG.standard_normal((10, 4)).astype("float32")
    c = np.zeros((10, 4), "float32")
    mod["par_local"](a, c)
    np.testing.assert_array_equal(c, (a + np.arange(1, 5, dtype="float32")) * 2)


# -- the text ------------------------------------------------------------------------------


def test_generated_code_compiles_without_warnings():
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler")
    funcs = [_row_sum("row_sum", PARALLEL, SERIAL), _nested_parallel(), *_cast_funcs()]
    funcs += [_two_stage("on_stack", "local", 64), _two_stage("on_heap", "global", None)]
    funcs += [elementwise(f"{op}_int8", fn, "int8") for op, (fn, _) in BINARY.items()]
    funcs += [elementwise(f"{op}_f32", fn, "float32") for op, (fn, _) in BINARY.items()]
    funcs += [
        elementwise(f"{name}_f16", getattr(tir, name), "float16", nargs=1)
        for name in FLOAT_INTRINSICS
    ]
    source = emit_c(funcs)
    for extra in ([], ["-DTESSERA_NO_FLOAT16"]):
        cmd = [
            cc,
            "-std=c99",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-fsyntax-only",
            *extra,
            "-x",
            "c",
            "-",
        ]
        proc = subprocess.run(cmd, input=source, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr


def test_generated_code_reads_well():
    i_outer, i_inner = Var("i.outer"), Var("i.inner")
    A, B, C = (decl_buffer((1024,), "float32", name) for name in "ABC")
    idx = i_outer * 16 + i_inner
    store = BufferStore(C, A[idx] + B[idx], (idx,))
    loops = For(i_outer, 0, 64, SERIAL, For(i_inner, 0, 16, SERIAL, store))
    source = emit_c([PrimFunc("myadd", (A, B, C), loops)])
    body = source[source.index("/* myadd(") :]
    assert body == (
        "/* myadd(A: float32[1024], B: float32[1024], C: float32[1024]) */\n"
        "int32_t myadd(void** buffers, int64_t* vars) {\n"
        "  float* restrict A = (float*)buffers[0];\n"
        "  float* restrict B = (float*)buffers[1];\n"
        "  float* restrict C = (float*)buffers[2];\n"
        "  for (int32_t i_outer = 0; i_outer < 64; ++i_outer) {\n"
        "    for (int32_t i_inner = 0; i_inner < 16; ++i_inner) {\n"
        "      C[i_outer * 16 + i_inner] = A[i_outer * 16 + i_inner] + B[i_outer * 16 + i_inner];\n"
        "    }\n"
        "  }\n"
        "  return 0;\n"
        "}\n"
    )
    assert "tessera_floordiv" not in source  # no helpers that the code does not use
    mod = build_c([PrimFunc("myadd", (A, B, C), loops)], "c")
    assert mod.get_source("c") == source


def test_floor_division_of_loop_variables_is_plain_c_division():
    n, i = Var("n"), Var("i")
    A = decl_buffer((n,), "int32", "A")
    body = For(i, 0, n, SERIAL, BufferStore(A, i // 4 + i % 4 + (i - 8) // 4, (i,)))
    source = emit_c([PrimFunc("divs", (A,), body)])
    assert "A[i] = i / 4 + i % 4 + tessera_floordiv_i32(i - 8, 4);" in source
    a = np.zeros(20, "int32")
    build_c([PrimFunc("divs", (A,), body)])["divs"](a)
    i_ = np.arange(20)
    np.testing.assert_array_equal(a, i_ // 4 + i_ % 4 + (i_ - 8) // 4)


def test_names_are_sanitized_and_unique():
    n = Var("n")
    A = decl_buffer((n,), "float32", "float")  # a C keyword as a buffer name
    i1, i2, i3 = Var("i"), Var("i"), Var("2x")
    body = seq(
        For(i1, 0, n, SERIAL, BufferStore(A, A[i1] + 1.0, (i1,))),
        For(i2, 0, n, SERIAL, For(i3, 0, 1, SERIAL, BufferStore(A, A[i2] * 2.0, (i2 + i3,)))),
    )
    func = PrimFunc("names", (A,), body)
    source = emit_c([func])
    assert "float* restrict float_1 = (float*)buffers[0];" in source or "v_float" in source
    assert "for (int32_t i_1 = 0; i_1 < n; ++i_1)" in source
    assert "for (int32_t v2x = 0; v2x < 1; ++v2x)" in source
    a = np.ones(8, "float32")
    build_c([func])["names"](a)
    np.testing.assert_array_equal(a, np.full(8, 4.0, "float32"))


# -- errors --------------------------------------------------------------------------------


def test_clear_errors():
    n, i = Var("n"), Var("i")
    A2 = decl_buffer((n, n), "float32", "A2")
    unflattened = PrimFunc("f", (A2,), BufferStore(A2, tir.const(0.0), (i, i)))
    with pytest.raises(ValueError, match="flatten_storage"):
        emit_c([unflattened])
    A = decl_buffer((n,), "float32", "A")
    gpu = For(i, 0, n, ForKind.THREAD_BINDING, BufferStore(A, tir.const(0.0), (i,)), "threadIdx.x")
    with pytest.raises(ValueError, match="GPU"):
        emit_c([PrimFunc("g", (A,), gpu)])
    with pytest.raises(ValueError, match="C function name"):
        emit_c([PrimFunc("my-add", (A,), BufferStore(A, tir.const(0.0), (0,)))])
    stray = decl_buffer((4,), "float32", "stray")
    with pytest.raises(ValueError, match="stray"):
        emit_c([PrimFunc("h", (A,), BufferStore(stray, tir.const(0.0), (0,)))])
    with pytest.raises(CCompileError, match=r"(?s)\.c.*error"):
        compile_c("int broken(void) { return x; }\n", name="broken")


def test_lets_in_expressions_and_statements():
    n, i = Var("n"), Var("i")
    A, C = decl_buffer((n,), "float32", "A"), decl_buffer((n,), "float32", "C")
    t, u, unused = Var("t", "float32"), Var("u", "float32"), Var("unused")
    # C[i] = (let t = A[i] * 2 in t * t) + (i < n - 1 ? (let u = A[i + 1] in u + 1) : 0)
    squared = tir.Let(t, A[i] * 2.0, t * t)
    guarded = tir.if_then_else(i < n - 1, tir.Let(u, A[i + 1], u + 1.0), tir.const(0.0))
    store = LetStmt(unused, i * 7, BufferStore(C, squared + guarded, (i,)))
    func = PrimFunc("lets", (A, C), For(i, 0, n, SERIAL, store))
    source = emit_c([func])
    assert "float t = A[i] * 2.0f;" in source  # hoisted into a declaration
    assert "A[i + 1] + 1.0f" in source  # inlined: declaring it early would read past the end
    assert "unused" not in source
    a, c = RNG.standard_normal(9).astype("float32"), np.zeros(9, "float32")
    build_c([func])["lets"](a, c)
    np.testing.assert_allclose(c, (a * 2) ** 2 + np.append(a[1:] + 1, 0), rtol=1e-6)


def test_float16_intrinsics_and_bool_buffers():
    funcs = [
        elementwise(f"{name}_f16", getattr(tir, name), "float16", nargs=1)
        for name in ("exp", "sqrt", "tanh", "floor", "round", "abs")
    ]
    n, i, flag = Var("n"), Var("i"), Var("flag", "bool")
    M = decl_buffer((n,), "bool", "M")
    X, Y = decl_buffer((n,), "int32", "X"), decl_buffer((n,), "int32", "Y")
    pick = tir.Select(M[i] & flag, X[i], 0 - X[i])
    funcs.append(
        PrimFunc("masked", (M, X, Y, flag), For(i, 0, n, SERIAL, BufferStore(Y, pick, (i,))))
    )
    mod = build_c(funcs)
    x = _float_input("float16", 0, 4, 200)
    refs = {
        "exp": np.exp,
        "sqrt": np.sqrt,
        "tanh": np.tanh,
        "floor": np.floor,
        "round": np.round,
        "abs": np.abs,
    }
    for name, ref in refs.items():
        got = run(mod, f"{name}_f16", x, out_dtype="float16")
        np.testing.assert_allclose(got, ref(x), rtol=1e-3, err_msg=name)  # within one float16 ulp
    m, xs = RNG.integers(0, 2, 50).astype(bool), RNG.integers(-9, 9, 50).astype("int32")
    for flag_value in (True, False):
        y = np.zeros(50, "int32")
        mod["masked"](m, xs, y, flag_value)
        np.testing.assert_array_equal(y, np.where(m & flag_value, xs, -xs))


def test_export_library_and_load_module(tmp_path):
    from tessera.runtime import load_module

    funcs = [
        _row_sum("row_sum", PARALLEL, SERIAL),
        elementwise("add_f16", lambda a, b: a + b, "float16"),
    ]
    path = build_c(funcs).export_library(tmp_path / "kernels.so")
    mod = load_module(path)
    a = RNG.standard_normal((5, 3)).astype("float32")
    s = np.zeros(5, "float32")
    mod["row_sum"](a, s)
    np.testing.assert_allclose(s, a.sum(axis=1), rtol=1e-5)
    h = RNG.standard_normal(10).astype("float16")
    np.testing.assert_array_equal(run(mod, "add_f16", h, h, out_dtype="float16"), h + h)


def test_compile_flags_follow_the_target():
    from tessera.codegen.c import compile_flags
    from tessera.target import Target

    host = compile_flags(Target("c"))
    assert host[:3] == ["-O3", "-std=c99", "-fPIC"] and "-march=native" in host
    assert "-march=native" in compile_flags(None)
    cross = compile_flags(Target("c -mtriple=aarch64-linux-gnu -mcpu=cortex-a72"))
    assert "-mcpu=cortex-a72" in cross and "-march=native" not in cross
    assert "-mno-avx512f" in compile_flags("c -mattr=-avx512f")


def test_unrolled_copies_declare_their_lets_and_buffers_again():
    A = decl_buffer((8,), "float32", "A")
    t, k = Var("t", "float32"), Var("k")
    T = decl_buffer((2,), "float32", "T", scope="local")

    def copy(offset):  # what unroll_loop makes: the same Let var and Allocate in every copy
        body = seq(
            BufferStore(T, A[offset] * 2.0, (0,)),
            For(k, 0, 1, SERIAL, BufferStore(A, T[0] + t, (offset + k,))),
        )
        return LetStmt(t, tir.const(1.0), Allocate(T, body))

    func = PrimFunc("unrolled", (A,), seq(copy(0), copy(1), copy(2)))
    source = emit_c([func])
    assert "float t_1 = 1.0f;" in source and "float T_2[2];" in source
    a = np.arange(8, dtype="float32")
    build_c([func])["unrolled"](a)
    np.testing.assert_array_equal(a, [1, 3, 5, 3, 4, 5, 6, 7])
