"""The nn.* element-wise activations and nn.prelu vs their numpy references."""

import numpy as np
import pytest

from tessera.graph.op import get_op
from tessera.topi.testing import check_ops

RNG = np.random.default_rng(4)

# values around every kink and threshold, large values (overflow of naive formulas), tiny ones
SPECIAL = np.array(
    [-100, -30, -6, -3, -1, -0.6, -0.5, -0.2, -1e-4, 0, 1e-4, 0.2, 0.5, 0.6, 1, 3, 6, 30, 100],
    "float32",
)

ACTIVATIONS = [
    ("relu", {}),
    ("leaky_relu", {}),
    ("leaky_relu", {"alpha": 0.2}),
    ("elu", {}),
    ("elu", {"alpha": 0.5}),
    ("celu", {"alpha": 2.0}),
    ("selu", {}),
    ("thresholded_relu", {"alpha": 0.5}),
    ("gelu", {}),
    ("gelu", {"approximate": "tanh"}),
    ("hardsigmoid", {}),
    ("hardsigmoid", {"alpha": 0.5, "beta": 0.3}),
    ("hardswish", {}),
    ("softplus", {}),
    ("softsign", {}),
    ("mish", {}),
    ("shrink", {}),
    ("shrink", {"bias": 0.1, "lambd": 0.3}),
]


def test_every_activation_has_a_compute_rule():
    from tessera.graph.ops import nn_ref

    for name in nn_ref.ACTIVATIONS:
        assert "compute" in get_op(f"nn.{name}").rules, name


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_activations_match_reference(dtype):
    x = np.concatenate([SPECIAL, RNG.standard_normal(45).astype("float32") * 4]).astype(dtype)
    x = x.reshape(4, 16)
    cases = [(f"nn.{name}", [x], attrs) for name, attrs in ACTIVATIONS]
    check_ops(cases, target="llvm", rtol=2e-5 if dtype == "float32" else 1e-10, atol=1e-6)


def test_activations_match_reference_c():
    x = np.concatenate([SPECIAL, RNG.standard_normal(13).astype("float32")]).reshape(2, 16)
    names = ["gelu", "softplus", "mish", "selu", "hardswish"]
    check_ops([(f"nn.{n}", [x], {}) for n in names], target="c", rtol=2e-5, atol=1e-6)


def test_prelu_broadcasts_the_slope():
    x = RNG.standard_normal((2, 3, 4, 5)).astype("float32")
    cases = [
        ("nn.prelu", [x, RNG.standard_normal((3, 1, 1)).astype("float32")], {}),
        ("nn.prelu", [x, RNG.standard_normal((5,)).astype("float32")], {}),
        ("nn.prelu", [x, RNG.standard_normal((1,)).astype("float32")], {}),
        ("nn.prelu", [x, RNG.standard_normal((2, 3, 4, 5)).astype("float32")], {}),
    ]
    check_ops(cases, target="llvm")
    check_ops(cases[:1], target="c")


def test_gelu_rejects_an_unknown_approximation():
    from tessera import te
    from tessera.topi import nn as topi_nn

    with pytest.raises(ValueError, match="approximate"):
        topi_nn.ACTIVATIONS["gelu"](te.placeholder((4,)), approximate="fast")
