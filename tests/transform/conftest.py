"""Shared by the graph-pass tests: random inputs for a function, and a numerics check that a
pass kept a function's outputs (the graph interpreter runs both on the same inputs)."""

import numpy as np
import pytest

from tessera.graph import run_function


def random_inputs(func, seed=0):
    rng = np.random.default_rng(seed)
    out = {}
    for p in func.params:
        dtype = np.dtype(p.type.dtype.numpy_name)
        if dtype.kind == "f":
            out[p.name] = rng.standard_normal(p.type.shape).astype(dtype)
        elif dtype.kind == "b":
            out[p.name] = rng.random(p.type.shape) < 0.5
        else:
            out[p.name] = rng.integers(-5, 6, p.type.shape).astype(dtype)
    return out


def check_same(before, after, rtol=1e-5, atol=1e-6, seeds=(0, 1)):
    """`after` computes what `before` does (same parameters, by name)."""
    assert [p.name for p in before.params] == [p.name for p in after.params]
    for seed in seeds:
        inputs = random_inputs(before, seed)
        want = run_function(before, inputs)
        got = run_function(after, inputs)
        assert len(want) == len(got)
        for w, g in zip(want, got, strict=True):
            assert w.dtype == g.dtype and w.shape == g.shape
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


@pytest.fixture
def same_outputs():
    return check_same
