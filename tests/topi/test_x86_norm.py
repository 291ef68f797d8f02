"""x86 layer_norm over the last axis (topi/x86/norm.py) vs numpy: lane-split float64 moments,
a float32 normalize pass, rows in parallel; robust to a large mean; AVX2 and SSE targets too."""

import numpy as np
import pytest

import tessera
from tessera import te
from tessera.target import Target
from tessera.tir.stmt_functor import collect
from tessera.topi import nn as topi_nn
from tessera.topi.testing import check_ops
from tessera.topi.x86.norm import schedule_layer_norm

RNG = np.random.default_rng(11)


def randn(*shape, dtype="float32", scale=1.0, shift=0.0):
    return (RNG.standard_normal(shape) * scale + shift).astype(dtype)


def ln_case(shape, param_shape=None, **attrs):
    p = param_shape or shape[-1:]
    return ("nn.layer_norm", [randn(*shape, scale=2.0, shift=0.5), randn(*p), randn(*p)], attrs)


def test_matches_numpy_on_many_shapes():
    cases = [
        ln_case((1, 128, 768)),  # BERT-base
        ln_case((7, 100)),  # a tail of n % 16
        ln_case((3, 5)),  # rows shorter than the lane split
        ln_case((2, 3, 16)),
        ln_case((1, 33), epsilon=1e-3),
        ln_case((4, 48), param_shape=(1,)),  # scalar-like gamma / beta broadcast
        ln_case((6,)),  # one row: no row loop
    ]
    check_ops(cases, target="llvm", schedule_target="x86")


def test_large_mean_and_outliers_stay_accurate():
    x = randn(4, 300, shift=1000.0)  # E[x^2] - E[x]^2 in float32 would cancel
    y = randn(3, 64)
    y[:, 0] = 200.0  # the row's first element (the shift) an outlier
    g, b = randn(300), randn(300)
    cases = [("nn.layer_norm", [x, g, b], {}), ("nn.layer_norm", [y, g[:64], b[:64]], {})]
    check_ops(cases, target="llvm", schedule_target="x86")


def test_constant_rows_give_beta():
    x = np.full((3, 40), 2.5, "float32")
    g, b = randn(40), randn(40)
    check_ops([("nn.layer_norm", [x, g, b], {})], target="llvm", schedule_target="x86")


def test_float64_rows_and_two_normalized_axes():
    cases = [
        ("nn.layer_norm", [randn(3, 19, dtype="float64"), randn(19), randn(19)], {}),
        ln_case((2, 3, 5, 16), param_shape=(5, 16), axis=2),  # over two axes: generic schedule
    ]
    cases[0][1][1:] = [a.astype("float64") for a in cases[0][1][1:]]
    check_ops(cases, target="llvm", schedule_target="x86")


@pytest.mark.parametrize("mcpu", ["haswell", "x86-64"])
def test_narrower_vectors(mcpu):
    target = Target(f"llvm -mcpu={mcpu}")
    if mcpu == "haswell" and "avx2" not in Target("llvm").features:
        pytest.skip("the host cannot run AVX2 code")
    check_ops([ln_case((9, 77)), ln_case((2, 256))], target=target, schedule_target="x86")


def test_rows_in_parallel_and_row_stages_on_the_stack():
    x = te.placeholder((16, 96), name="x")
    g, b = te.placeholder((96,), name="g"), te.placeholder((96,), name="b")
    y = topi_nn.layer_norm(x, g, b)
    func = te.lower(schedule_layer_norm([y], Target("llvm")), [x, g, b, y])
    loops = collect(func.body, lambda n: isinstance(n, tessera.tir.For))
    assert [lp.kind.value for lp in loops].count("parallel") == 1
    allocs = collect(func.body, lambda n: isinstance(n, tessera.tir.Allocate))
    assert {a.buffer.scope for a in allocs} == {"local"}
    partial = [a.buffer for a in allocs if a.buffer.name.startswith("layer_norm_moments_partial")]
    assert [int(buf.shape[-1].value) for buf in partial] == [16, 16]
