"""topi/exact_math.py (Note [portable float32 math]): float32 log, cos and sin of a fraction of
a turn that give the same bits on llvm and c, within about 1 ulp of float64."""

import numpy as np
import pytest

import tessera
from tessera import te
from tessera.topi import exact_math

N = 1 << 16


def _run(make, arg: np.ndarray, outputs: int, target: str) -> list[np.ndarray]:
    x = te.placeholder(arg.shape, str(arg.dtype), name="x")
    out = te.compute(arg.shape, lambda i: make(x[i]), name="out")
    outs = list(out) if outputs > 1 else [out]
    s = te.create_schedule([o.op for o in outs])
    f = tessera.build(s, [x, *outs], target=target, name="f")
    nds = [tessera.nd.array(np.zeros(arg.shape, np.float32)) for _ in outs]
    f(tessera.nd.array(arg), *nds)
    return [a.numpy() for a in nds]


def _ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    return np.abs(got.astype(np.float64) - want) / np.spacing(np.abs(want).astype(np.float32))


def _uniforms() -> np.ndarray:
    """Floats over (0, 1] as the normal generator makes them, and the edges."""
    w = np.random.default_rng(0).integers(0, 2**32, N, dtype=np.uint64).astype(np.uint32)
    u = (w.astype(np.float32).astype(np.float64) * 2.0**-32 + 2.0**-33).astype(np.float32)
    u[:6] = [2.0**-33, 2.0**-126, 0.5, np.float32(np.sqrt(0.5)), 1.0 - 2.0**-24, 1.0]
    return u


@pytest.mark.parametrize("target", ["llvm", "c"])
def test_log_is_within_one_ulp(target):
    u = _uniforms()
    (got,) = _run(exact_math.log_f32, u, 1, target)
    want = np.log(u.astype(np.float64))
    assert got[5] == 0.0  # log 1, exactly
    assert _ulps(got, want)[u != 1.0].max() <= 1.0


def test_cos_sin_of_turns_are_within_two_ulp_of_one_and_exact_at_the_quarters():
    k = (np.random.default_rng(1).integers(0, 2**24, N)).astype(np.uint32)
    quarters = np.array([0, 1 << 22, 2 << 22, 3 << 22], np.uint32)
    k[: quarters.size] = quarters
    cos, sin = _run(lambda v: exact_math.cos_sin_turns(v, 24), k, 2, "llvm")
    angle = 2 * np.pi * k.astype(np.float64) * 2.0**-24
    assert np.abs(cos - np.cos(angle)).max() <= 2 * 2.0**-24  # a few ulp of the values near 1
    assert np.abs(sin - np.sin(angle)).max() <= 2 * 2.0**-24
    np.testing.assert_array_equal(cos[:4], [1, 0, -1, 0])
    np.testing.assert_array_equal(sin[:4], [0, 1, 0, -1])


def test_llvm_and_c_compute_the_same_bits():
    u, k = _uniforms(), np.arange(N, dtype=np.uint32) * np.uint32(255)  # every octant
    a = _run(exact_math.log_f32, u, 1, "llvm") + _run(
        lambda v: exact_math.cos_sin_turns(v, 24), k, 2, "llvm"
    )
    b = _run(exact_math.log_f32, u, 1, "c") + _run(
        lambda v: exact_math.cos_sin_turns(v, 24), k, 2, "c"
    )
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x.view(np.uint32), y.view(np.uint32))


def test_turns_out_of_range_are_refused():
    with pytest.raises(ValueError, match="3 to 24 bits"):
        exact_math.cos_sin_turns(te.const(0, "uint32"), 25)
