"""softmax / log_softmax, batch_norm, layer_norm, instance_norm and lrn vs numpy."""

import numpy as np
import pytest

import tessera
from tessera import te
from tessera.topi import nn as topi_nn
from tessera.topi.testing import check_ops

RNG = np.random.default_rng(3)


def randn(*shape, dtype="float32", scale=1.0, shift=0.0):
    return (RNG.standard_normal(shape) * scale + shift).astype(dtype)


def softmax_cases(name):
    x = randn(2, 3, 5, 17, scale=4)
    return [
        (name, [x], {}),
        (name, [x], {"axis": 1}),
        (name, [x], {"axis": 0}),
        (name, [x], {"axis": -2}),
        (name, [randn(4, 40, scale=30)], {}),  # large logits: needs the max subtracted
        (name, [randn(7)], {"axis": 0}),
        (name, [randn(3, 9, dtype="float64")], {"axis": -1}),
    ]


@pytest.mark.parametrize("name", ["nn.softmax", "nn.log_softmax"])
def test_softmax_matches_reference(name):
    check_ops(softmax_cases(name), target="llvm")


def test_softmax_handles_masked_rows():
    x = randn(3, 10)
    x[0, :4] = -np.inf  # a mask at the start of the row
    x[1, 5] = -np.inf
    check_ops([("nn.softmax", [x], {}), ("nn.log_softmax", [x[1:]], {})])


def norm_cases():
    x4 = randn(2, 3, 5, 16, scale=3, shift=2)
    c = lambda *s: randn(*s)  # noqa: E731
    return [
        ("nn.batch_norm", [x4, c(3), c(3), c(3), np.abs(c(3)) + 0.5], {}),
        (
            "nn.batch_norm",
            [x4, c(16), c(16), c(16), np.abs(c(16)) + 0.5],
            dict(axis=-1, epsilon=1e-3),
        ),
        ("nn.layer_norm", [x4, c(16), c(16)], {}),
        ("nn.layer_norm", [x4, c(5, 16), c(16)], {"axis": 2, "epsilon": 1e-3}),
        ("nn.layer_norm", [x4, c(1), c(3, 5, 16)], {"axis": 1}),
        ("nn.layer_norm", [x4, c(16), c(16)], {"axis": 0}),
        # a large mean relative to the spread: E[x^2] - E[x]^2 would cancel here
        ("nn.layer_norm", [randn(4, 64, shift=1000.0), c(64), c(64)], {}),
        ("nn.instance_norm", [x4, c(3), c(3)], {}),
        ("nn.instance_norm", [randn(2, 4, 30), c(4), c(4)], {"epsilon": 1e-2}),
        ("nn.instance_norm", [randn(1, 2, 3, 4, 5), c(2), c(2)], {}),
        ("nn.lrn", [x4], {"size": 3}),
        ("nn.lrn", [randn(1, 6, 4, 5)], dict(size=4, alpha=1e-2, beta=0.5, bias=2.0)),
        ("nn.lrn", [randn(2, 5, 7)], dict(size=5)),
        ("nn.lrn", [randn(1, 3, 2, 3, 19)], dict(size=7, beta=1.3)),  # size > channels, 3-D
    ]


def test_norms_match_reference_llvm():
    check_ops(norm_cases(), target="llvm")


def test_norms_and_softmax_match_reference_c():
    cases = norm_cases()
    check_ops([cases[0], cases[3], cases[7], cases[11], softmax_cases("nn.softmax")[1]], "c")


def test_layer_norm_schedule_computes_moments_per_row():
    x = te.placeholder((8, 64), name="x")
    g, b = te.placeholder((64,), name="g"), te.placeholder((64,), name="b")
    y = topi_nn.layer_norm(x, g, b)
    s = topi_nn.schedule_row_reduce([y], tessera.Target("llvm"))
    text = str(tessera.lower(s, [x, g, b, y]))
    assert "parallel" in text
    # the moments of one row live inside the parallel loop: a buffer of 1 element, not 8
    moments = s.stage_by_name("layer_norm_moments")
    assert moments.attach_stage is s[y]


@pytest.mark.filterwarnings("ignore:invalid value encountered")  # the reference's inf - inf
@pytest.mark.parametrize("name", ["nn.softmax", "nn.log_softmax"])
def test_softmax_of_a_slice_holding_inf_is_nan_on_every_axis(name):
    # exp(x - max) is exp(inf - inf) = NaN where max is +inf: numpy and ONNX Runtime give NaN
    # for the whole slice, on the last axis and on any other
    x = randn(2, 4, 5)
    x[0, 1, 2] = np.inf  # slice (0, :, 2) along axis 1, slice (0, 1, :) along axis 2
    x[1, 3, 0] = -np.inf  # -inf alone is an ordinary masked entry
    check_ops([(name, [x], {"axis": 1}), (name, [x], {"axis": 0}), (name, [x], {"axis": -1})])


def test_lrn_runs_in_parallel_rows_of_float32_vectors():
    # the square sum per row inside the parallel row loop, float32 vectors (float64 sums made
    # exp and log a libm call per element: 4.7x slower on AlexNet's first LRN)
    import tessera
    from tessera import te
    from tessera.tir.stmt_functor import collect
    from tessera.topi import nn as topi_nn

    x = te.placeholder((1, 8, 5, 40), name="x")
    target = tessera.Target("llvm -mcpu=haswell")
    with target:
        y = topi_nn.lrn(x, 5)
        func = tessera.driver.optimize(te.lower(topi_nn.schedule_lrn([y], target), [x, y]), target)
    loops = collect(func.body, lambda n: isinstance(n, tessera.tir.For))
    assert [lp.kind.value for lp in loops].count("parallel") == 1
    text = str(func)
    assert "float64" not in text and "pow(" not in text
    assert "exp(log(lrn_square_sum[Ramp(" in text  # vector exp and log
