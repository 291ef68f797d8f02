"""Philox4x32-10 in te integer arithmetic (topi/philox.py) against the known-answer vectors
of Random123 (the generator's reference implementation), on llvm and c, and its numpy twin."""

import numpy as np
import pytest

import tessera
from tessera import te
from tessera.topi import philox

# (counter, key) -> output, from Random123's kat_vectors for philox4x32_10
KNOWN = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]  # fmt: skip


def test_numpy_reference_gives_the_known_answers():
    for counter, key, want in KNOWN:
        got = philox.philox_numpy([np.uint32(c) for c in counter], key)
        assert [int(w) for w in got] == list(want)


@pytest.mark.parametrize("target", ["llvm", "c"])
def test_te_philox_gives_the_known_answers(target):
    ctr = te.placeholder((len(KNOWN), 4), name="ctr", dtype="uint32")
    key = te.placeholder((len(KNOWN), 2), name="key", dtype="uint32")
    words = te.compute(
        (len(KNOWN),),
        lambda i: philox.philox(tuple(ctr[i, k] for k in range(4)), (key[i, 0], key[i, 1])),
        name="words",
    )
    s = te.create_schedule(words[0].op)
    f = tessera.build(s, [ctr, key, *words], target=target, name="philox_kat")
    outs = [tessera.nd.array(np.zeros(len(KNOWN), np.uint32)) for _ in range(4)]
    f(
        tessera.nd.array(np.array([c for c, _, _ in KNOWN], np.uint32)),
        tessera.nd.array(np.array([k for _, k, _ in KNOWN], np.uint32)),
        *outs,
    )
    got = np.stack([o.numpy() for o in outs], axis=1)
    np.testing.assert_array_equal(got, np.array([w for _, _, w in KNOWN], np.uint32))


@pytest.mark.parametrize("distribution", ["uniform", "normal"])
def test_random_kernel_matches_its_numpy_twin(distribution):
    shape = (3, 7)  # 21 samples: the last block is part-used (4 or 2 samples a block)
    call = te.placeholder((), name="call", dtype="int64")
    y = philox.random(call, shape, "float32", distribution, -1.0, 3.0, seed=2**40 + 3)
    s = te.create_schedule(y.op)
    f = tessera.build(s, [call, y], target="llvm", name="random")
    out = tessera.nd.array(np.zeros(shape, np.float32))
    f(tessera.nd.array(np.array(2**33 + 1, np.int64)), out)  # a call index past 32 bits
    want = philox.random_numpy(2**33 + 1, shape, "float32", distribution, -1.0, 3.0, 2**40 + 3)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-6, atol=1e-6)


def test_fold_in_numpy_is_philox_of_the_iteration_and_stream():
    # counter (i low, i high, stream low, stream high) under FOLD_KEY: words 0, 1 as int64
    stream, i = 2**40 + 5, 2**33 + 7
    words = philox.philox_numpy((7, 2, 5, 256), philox.FOLD_KEY)
    want = np.uint64(int(words[0]) | int(words[1]) << 32).view(np.int64)
    assert philox.fold_in_numpy(stream, i) == int(want)
    folded = {philox.fold_in_numpy(k, j) for k in range(8) for j in range(8)}
    assert len(folded) == 64  # distinct per (run, iteration)


@pytest.mark.parametrize("target", ["llvm", "c"])
def test_fold_in_kernel_matches_its_numpy_twin(target):
    stream = te.placeholder((), name="stream", dtype="int64")
    data = te.placeholder((), name="data", dtype="int64")
    y = philox.fold_in(stream, data)
    f = tessera.build(te.create_schedule(y.op), [stream, data, y], target=target, name="fold")
    for s, i in ((0, 0), (3, 1), (-1, 2**40 + 9), (2**62 + 11, -5)):  # high words and signs
        out = tessera.nd.array(np.zeros((), np.int64))
        f(tessera.nd.array(np.array(s, np.int64)), tessera.nd.array(np.array(i, np.int64)), out)
        assert int(out.numpy()) == philox.fold_in_numpy(s, i), (s, i)


def _draw(target: str, shape, dtype: str = "float32", seed: int = 9) -> np.ndarray:
    call = te.placeholder((), name="call", dtype="int64")
    y = philox.random(call, shape, dtype, "normal", 0.0, 1.0, seed=seed)
    s = te.create_schedule(y.op)
    f = tessera.build(s, [call, y], target=target, name="normal")
    out = tessera.nd.array(np.zeros(shape, dtype))
    f(tessera.nd.array(np.array(5, np.int64)), out)
    return out.numpy()


def test_float32_normals_are_the_float64_transform_within_a_few_ulp():
    """Box-Muller in float32 (exact_math's log, cos and sin) against the float64 transform of
    the same uniforms: within 3 ulp of the point's radius, for 2^18 samples."""
    shape = (1 << 16, 4)  # the four samples of a block on a row: two points
    got = _draw("llvm", shape).astype(np.float64)
    blocks = np.arange(shape[0], dtype=np.uint64)
    words = philox.philox_numpy((blocks, blocks * 0, 5, 0), philox.seed_words(9))
    pairs = [philox._box_muller_numpy(*words[k : k + 2]) for k in (0, 2)]
    want = np.stack([c for pair in pairs for c in pair], -1)
    radius = np.hypot(want[:, 0::2], want[:, 1::2]).repeat(2, axis=1)
    ulps = np.abs(got - want) / np.spacing(radius.astype(np.float32))
    assert ulps.max() <= 3.0, ulps.max()
    assert np.abs(want).max() > 4.0  # into the tail (u1 down to 2^-33: |z| <= 6.8)


def test_llvm_and_c_draw_the_same_float32_normal_bits():
    shape = (1 << 14, 3)  # 12288 points; the last block part-used by each row's layout
    a, b = _draw("llvm", shape), _draw("c", shape)
    np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))
