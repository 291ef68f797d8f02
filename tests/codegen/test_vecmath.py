"""The inline vector math of the LLVM code generator (codegen/llvm/vecmath.py): max ulp error
over dense sweeps of float32 against float64 references, the special values, and the code it
compiles to (no libm calls, no division in exp, one division in sigmoid) on AVX2 and AVX-512."""

import numpy as np
import pytest

from tessera import tir
from tessera.codegen.llvm import build_llvm
from tessera.target import Target
from tessera.tir import BufferStore, For, ForKind, IntImm, PrimFunc, Ramp, Var, decl_buffer

N = 1 << 18  # elements per call of a sweep kernel
FUNCS = {"exp": tir.exp, "sigmoid": tir.sigmoid, "tanh": tir.tanh}


def _kernel(name, fn, lanes):
    a, c = decl_buffer((N,), "float32", "A"), decl_buffer((N,), "float32", "C")
    i = Var("i")
    idx = Ramp(i * lanes, IntImm(1), lanes) if lanes > 1 else i
    body = For(i, 0, N // lanes, ForKind.SERIAL, BufferStore(c, fn(a[idx]), (idx,)))
    return PrimFunc(f"v_{name}", (a, c), body)


@pytest.fixture(scope="module")
def avx2():
    target = Target("llvm -mcpu=haswell")
    if not target.is_host:
        pytest.skip("this CPU cannot run AVX2 code")
    return build_llvm([_kernel(k, f, 8) for k, f in FUNCS.items()], target)


def _apply(mod, name, x):
    xs = np.concatenate([x, np.zeros(-len(x) % N, "float32")])
    got = np.empty_like(xs)
    for k in range(0, len(xs), N):
        mod[f"v_{name}"](xs[k : k + N], out := np.empty(N, "float32"))
        got[k : k + N] = out
    return got[: len(x)]


def _reference(name, x):
    x64 = x.astype(np.float64)
    with np.errstate(over="ignore"):
        if name == "exp":
            return np.exp(x64)
        if name == "sigmoid":
            return 1 / (1 + np.exp(-x64))
        return np.tanh(x64)


def _ulp_error(got, want):
    """|got - want| in units of the float32 spacing at want (subnormals: the smallest spacing)."""
    w32 = want.astype(np.float32)
    spacing = np.spacing(np.maximum(np.abs(w32), np.float32(np.finfo(np.float32).tiny)))
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(got.astype(np.float64) - want) / spacing.astype(np.float64)
    same = (got == w32) | (np.isnan(got) & np.isnan(w32))  # inf == inf
    return np.where(same, 0.0, err)


def _sweep(lo, hi, stride):
    """Every `stride`-th float32 between lo and hi (by bit pattern, through 0) and the ends."""
    f = np.array([lo, hi], np.float32)
    ints = f.view(np.int32).astype(np.int64)
    # map floats to a monotonic integer line: negatives mirror below 0
    key = np.where(ints < 0, -(ints & 0x7FFFFFFF), ints)
    keys = np.arange(key[0], key[1] + 1, stride, dtype=np.int64)
    keys = np.concatenate([keys, key[1:]]) if keys[-1] != key[1] else keys
    bits = np.where(keys < 0, (-keys) | 0x80000000, keys).astype(np.uint32)
    return bits.view(np.float32)


# (function, domain, max ulp): exp over its whole finite, non-zero range (subnormal results
# below -87.3), sigmoid and tanh past where they round to 0 / +-1
SWEEPS = [
    ("exp", (-104.0, 88.72), 1.0),
    ("sigmoid", (-104.0, 20.0), 2.5),
    ("tanh", (-10.0, 10.0), 1.5),
]


@pytest.mark.parametrize("name,domain,bound", SWEEPS)
def test_max_ulp_error_over_a_dense_sweep(avx2, name, domain, bound):
    x = _sweep(*domain, stride=997)  # ~4 million floats, every binade of the domain
    got = _apply(avx2, name, x)
    err = _ulp_error(got, _reference(name, x))
    worst = int(np.argmax(err))
    assert err[worst] <= bound, f"{name}({x[worst]!r}) = {got[worst]!r}: {err[worst]:.2f} ulp"


def test_subnormal_results_round_once(avx2):
    x = np.linspace(-103.9, -87.4, 4096, dtype=np.float32)  # exp(x) and sigmoid(x) subnormal
    for name in ("exp", "sigmoid"):
        got = _apply(avx2, name, x)
        want = _reference(name, x).astype(np.float32)  # the float32 rounding of the true value
        assert np.all(np.abs(got.view(np.int32) - want.view(np.int32)) <= 1), name
        assert np.all(got[x > -103.2] > 0), name  # not flushed to zero


SPECIAL = np.array(
    [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 1e-30, -1e-30, 89.0, 88.72283,
     88.72284, 88.8, 1e30, -87.33655, -103.97, -103.98, -104.0, -104.5, -1e30, 0.5, -0.5,
     0.625, -0.625, 0.6249999, 44.0, -44.0, 9.0, -9.0],
    np.float32,
)  # fmt: skip


def test_special_values(avx2):
    with np.errstate(all="ignore"):
        x64 = SPECIAL.astype(np.float64)
        refs = {
            "exp": np.exp(x64),
            "sigmoid": np.where(x64 >= 0, 1 / (1 + np.exp(-x64)), np.exp(x64) / (1 + np.exp(x64))),
            "tanh": np.tanh(x64),
        }
    x = np.resize(SPECIAL, N)
    for name, want in refs.items():
        got = _apply(avx2, name, x)[: len(SPECIAL)]
        with np.errstate(all="ignore"):
            want = want.astype(np.float32)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=name)
        assert np.all(_ulp_error(got, want.astype(np.float64)) <= 2), (name, SPECIAL, got)
        real = ~np.isnan(want)
        np.testing.assert_array_equal(np.signbit(got[real]), np.signbit(want[real]), err_msg=name)


@pytest.mark.parametrize("mcpu,reg", [("haswell", "ymm"), ("skylake-avx512", "zmm")])
def test_compiles_to_vector_code_without_libm(mcpu, reg):
    lanes = 8 if reg == "ymm" else 16
    funcs = [_kernel(k, f, lanes) for k, f in FUNCS.items()]
    asm = build_llvm(funcs, Target(f"llvm -mcpu={mcpu}")).get_source("asm")
    bodies = {k: asm[asm.index(f"v_{k}:") :] for k in FUNCS}
    for name, body in bodies.items():
        body = body[: body.index(".Lfunc_end")]
        assert "call" not in body, f"{name} calls a function on {mcpu}"
        assert f"%{reg}" in body, f"{name} is not vectorized at full width on {mcpu}"
        divs = body.count("vdivps")
        assert divs == {"exp": 0, "sigmoid": 1, "tanh": 1}[name], (name, mcpu, divs)
        assert "vroundps" not in body and "vcvttps2dq" not in body, name  # magic-number rounding


def test_sweep_covers_the_domain():
    x = _sweep(-2.0, 3.0, stride=1 << 20)
    assert x[0] == -2.0 and x[-1] == 3.0 and np.all(np.diff(x) > 0)
    assert np.min(np.abs(x)) < 1e-30  # it passes through zero's neighbourhood
    assert x[1] - x[0] == 2.0**-23 * (1 << 20)  # just above -2 the spacing is 2**-23


@pytest.mark.parametrize("name", ["sigmoid", "tanh"])
def test_scalar_tails_match_their_vectors_without_a_call(avx2, name):
    """Note [scalar tails]: a float32 scalar sigmoid or tanh (a row's tail past its vectors) is
    the vector code on one lane: bit-identical to the vector's lanes, no call."""
    mod = build_llvm([_kernel(f"s_{name}", FUNCS[name], 1)], Target("llvm -mcpu=haswell"))
    body = mod.get_source("asm")
    body = body[body.index(f"v_s_{name}:") :]
    assert "call" not in body[: body.index(".Lfunc_end")], f"scalar {name} calls a function"
    x = np.concatenate([_sweep(-104.0, 20.0, stride=7919), SPECIAL])
    got = _apply(mod, f"s_{name}", x)
    want = _apply(avx2, name, x)
    np.testing.assert_array_equal(got.view(np.int32), want.view(np.int32))
