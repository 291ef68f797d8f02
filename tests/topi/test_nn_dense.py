"""nn.dense, matmul (numpy broadcasting, 1-D operands) and nn.batch_matmul vs numpy."""

import numpy as np
import pytest

import tessera
from tessera import te
from tessera.graph.op import get_op
from tessera.topi import nn as topi_nn
from tessera.topi.testing import check_ops

RNG = np.random.default_rng(2)


def randn(*shape, dtype="float32"):
    if dtype.startswith("int"):
        return RNG.integers(-20, 20, shape).astype(dtype)
    return RNG.standard_normal(shape).astype(dtype)


DENSE = [
    ("nn.dense", [randn(5, 20), randn(17, 20)], {}),
    ("nn.dense", [randn(1, 64), randn(40, 64)], {}),
    ("nn.dense", [randn(2, 3, 7), randn(3, 7)], {}),  # leading batch dims
    ("nn.dense", [randn(9), randn(4, 9)], {}),  # 1-D data
    ("nn.dense", [randn(3, 5, dtype="float64"), randn(6, 5, dtype="float64")], {}),
    ("nn.dense", [randn(4, 6, dtype="int32"), randn(16, 6, dtype="int32")], {}),
]

MATMUL = [
    ("matmul", [randn(4, 6), randn(6, 33)], {}),
    ("matmul", [randn(6), randn(6, 5)], {}),  # 1-D lhs
    ("matmul", [randn(3, 6), randn(6)], {}),  # 1-D rhs
    ("matmul", [randn(6), randn(6)], {}),  # dot product: rank-0 result
    ("matmul", [randn(2, 1, 3, 4), randn(5, 4, 2)], {}),  # broadcast batch dims
    ("matmul", [randn(3, 4), randn(2, 4, 9)], {}),
    ("matmul", [randn(2, 3, 4), randn(4)], {}),
    ("matmul", [randn(7), randn(3, 7, 2)], {}),
]

BATCH_MATMUL = [
    ("nn.batch_matmul", [randn(2, 3, 4), randn(2, 4, 5)], {}),
    ("nn.batch_matmul", [randn(2, 3, 4), randn(1, 5, 4)], {"transpose_b": True}),
    ("nn.batch_matmul", [randn(1, 4, 3), randn(3, 4, 20)], {"transpose_a": True}),
    ("nn.batch_matmul", [randn(2, 4, 3), randn(2, 5, 4)], dict(transpose_a=True, transpose_b=True)),
]


@pytest.mark.parametrize("cases", [DENSE, MATMUL, BATCH_MATMUL], ids=["dense", "matmul", "bmm"])
def test_matches_reference_llvm(cases):
    check_ops(cases, target="llvm")


def test_matches_reference_c():
    check_ops([DENSE[0], DENSE[3], MATMUL[4], BATCH_MATMUL[1]], target="c")


def test_dense_schedule_vectorizes_columns_and_keeps_k_serial():
    x, w = te.placeholder((8, 64), name="x"), te.placeholder((32, 64), name="w")
    y = topi_nn.dense(x, w)
    target = tessera.Target("llvm -mattr=+avx2")
    s = topi_nn.schedule_dense([y], target)
    stage = s[y]
    kinds = {iv.var.name: attr.kind.value for iv, attr in stage.iter_var_attrs.items()}
    assert "vectorized" in kinds.values() and "parallel" in kinds.values()
    leaves = [iv.var.name for iv in stage.leaf_iter_vars]
    assert leaves.index("k") < len(leaves) - 1  # k is not the innermost (vector) loop
    assert kinds.get("k", "serial") == "serial"


@pytest.mark.parametrize("target", ["llvm", "c"])
def test_dense_with_bias_gelu_epilogue(target):
    x, w = te.placeholder((3, 24), name="x"), te.placeholder((20, 24), name="w")
    b = te.placeholder((20,), name="b")
    y = get_op("nn.dense").rules["compute"](x, w)
    biased = te.compute(y.shape, lambda i, j: y[i, j] + b[j], name="bias", tag="broadcast")
    out = get_op("nn.gelu").rules["compute"](biased)
    s = get_op("nn.dense").rules["schedule:generic"]([out], tessera.Target(target))
    f = tessera.build(s, [x, w, b, out], target=target, name="dense_gelu")
    xs, ws, bs = randn(3, 24), randn(20, 24), randn(20)
    got = np.zeros((3, 20), "float32")
    f(xs, ws, bs, got)
    expected = get_op("nn.gelu").evaluate([xs @ ws.T + bs], {})[0]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
