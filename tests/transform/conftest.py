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


# Random DAGs of ops of every fusion kind, on f32[4, 6] values (reductions keep dims).
_UNARY = ["exp", "nn.relu", "sigmoid", "negative", "tanh"]
_BINARY = ["add", "multiply", "subtract", "maximum"]


def random_dag(seed: int, num_calls: int = 12):
    """A random graph function over one parameter %x: f32[4, 6], as text."""
    rng = np.random.default_rng(seed)
    values, lines = ["x"], []
    for k in range(num_calls):
        pick = lambda: values[int(rng.integers(max(0, len(values) - 5), len(values)))]  # noqa: E731
        r = rng.random()
        name = f"v{k}"
        if r < 0.35:
            lines.append(f"%{name} = {rng.choice(_UNARY)}(%{pick()})")
        elif r < 0.7:
            lines.append(f"%{name} = {rng.choice(_BINARY)}(%{pick()}, %{pick()})")
        elif r < 0.8:
            lines.append(f"%{name} = sum(%{pick()}, axis=[1], keepdims=true)")
        elif r < 0.9:
            lines.append(f"%{name} = reverse(%{pick()}, axis=[0])")
        else:
            lines.append(f"%{name} = nn.softmax(%{pick()}, axis=1)")
        values.append(name)
    outs = sorted({values[-1], values[int(rng.integers(1, len(values)))]})
    body = ";\n  ".join(lines)
    return f"def main(%x: f32[4, 6]) {{\n  {body};\n  return {', '.join('%' + o for o in outs)}\n}}"


@pytest.fixture
def make_random_dag():
    return random_dag
