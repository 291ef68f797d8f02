"""Counter-based random numbers as te integer arithmetic: Philox4x32-10, uniform and normal.

    y = topi.philox.random(call, (4, 5), "float32", "normal", 0.0, 1.0, seed=7)

Note [run-time random numbers]
    Samples come from Philox4x32-10 blocks (Salmon et al., "Parallel random numbers: as easy
    as 1, 2, 3", SC 2011): a bijection of a 128-bit counter under a 64-bit key, ten rounds of
    32x32->64-bit multiplies and xors, so every block is computed on its own (no state, no
    sequential dependence: the loop vectorizes and parallelizes like any element-wise op).
      counter = (block index low, block index high, call low, call high)
      key     = (seed low, seed high)                    # the op's 64-bit `seed` attribute
    `call` is the int64 scalar input: the run index the executor writes before each run
    (Note [random call counter] in runtime/run_counter.py), so each run draws fresh values
    and the same (seed, call) draws the same values on every target. Block j gives samples
    j * per .. j * per + per - 1 of the flattened output (`samples_per_block`, one stage),
    which the next stage lays out in the output's shape:
      uniform float16/float32: per = 4, u = (w >> 8) * 2^-24 in [0, 1) for each word w, in
        float32 (exact); double: per = 2, u = 53 bits of (w0, w1) or (w2, w3) * 2^-53
      normal float16/float32: per = 4, Box-Muller on two points, (w0, w1) and (w2, w3):
        r = sqrt(-2 ln u1), both r cos(2 pi u2) and r sin(2 pi u2), with u1 = fl(w0 2^-32 +
        2^-33) in (0, 1] (never log 0; |z| <= 6.7) and u2 = (w1 >> 8) 2^-24, in float32 with
        exact_math's log_f32 and cos_sin_turns: the same IEEE operations on every target, so
        the same bits (te.log and te.cos are a vector polynomial on llvm and libm on C, and
        differ in the last bit: Note [portable float32 math]); within a few ulp of the float64
        transform of the same u1, u2. normal double: per = 2, u1 in (0, 1] from the 53 bits of
        (w0, w1), u2 from (w2, w3), te.log/cos/sin in double.
    The result is fma(b - a, u, a) (uniform, a = low, b = high) or fma(b, z, a) (normal,
    a = mean, b = scale): one rounding, the same on targets that fuse a * b + c and on those
    that do not. Using every word of a block made uniform draws about 5x faster than one
    block per sample. `philox_numpy` and `random_numpy` compute the same in numpy (the
    reference).

Note [random streams]
    The (call high, call low) counter words above hold the *stream*: the run index at the top
    level of a model, and inside a loop body, where every iteration must draw fresh values,
    the stream folded with the iteration number (JAX's `fold_in`):
      fold_in(stream, i) = words 0, 1 of Philox4x32-10 of (i low, i high, stream low,
                           stream high) under FOLD_KEY, as one int64
    Philox is a bijection of its 128-bit counter, so two different (stream, i) pairs give the
    same folded stream only by a 64-bit collision of a random-looking function (odds about
    n^2 / 2^65 over n draws); nested loops fold again, so run k, iteration i of the outer
    loop, iteration j of the inner draws fold_in(fold_in(k, i), j). It is computed once per
    body run (graph op `random_fold_in`), not per block; a branch of an `If` reads its
    caller's stream as it is (one branch runs per call). Run k, iteration i draws the same
    values in every module of the same build, on every target.
"""

from __future__ import annotations

import numpy as np

from tessera import te
from tessera.tir.expr import Expr
from tessera.topi import exact_math, symbolic

ROUNDS = 10
MULTIPLIERS = (0xD2511F53, 0xCD9E8D57)
KEY_STEPS = (0x9E3779B9, 0xBB67AE85)  # the golden ratio and sqrt(3) - 1, as 32-bit fractions
DISTRIBUTIONS = ("uniform", "normal")
FOLD_KEY = (0x243F6A88, 0x85A308D3)  # pi's fraction: a key no seed is chosen to match


def _u32(value):
    return te.const(value, "uint32")


def _mulhilo(a: int, b):
    """(high, low) 32-bit words of the 64-bit product a * b."""
    p = te.cast(b, "uint64") * te.const(a, "uint64")
    return te.cast(p >> te.const(32, "uint64"), "uint32"), te.cast(p, "uint32")


def philox(counter, key) -> tuple:
    """Philox4x32-10 of four uint32 counter words under two uint32 key words (te exprs)."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for r in range(ROUNDS):
        if r:
            k0 = k0 + _u32(KEY_STEPS[0])
            k1 = k1 + _u32(KEY_STEPS[1])
        hi0, lo0 = _mulhilo(MULTIPLIERS[0], c0)
        hi1, lo1 = _mulhilo(MULTIPLIERS[1], c2)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return c0, c1, c2, c3


def seed_words(seed: int) -> tuple[int, int]:
    seed &= (1 << 64) - 1
    return seed & 0xFFFFFFFF, seed >> 32


def _split(n, dtype: str) -> tuple:
    """The (low, high) uint32 words of the int64 expr `n`."""
    return te.cast(n, "uint32"), te.cast(n >> te.const(32, dtype), "uint32")


def fold_in(stream: te.Tensor, data: te.Tensor) -> te.Tensor:
    """The stream of iteration `data` inside stream `stream` (int64 scalars; Note [random
    streams])."""

    def folded():
        counter = (*_split(data(), "int64"), *_split(stream(), "int64"))
        w0, w1 = philox(counter, (_u32(FOLD_KEY[0]), _u32(FOLD_KEY[1])))[:2]
        wide = te.cast(w0, "uint64") + (te.cast(w1, "uint64") << te.const(32, "uint64"))
        return te.cast(wide, "int64")

    return te.compute((), folded, name="random_fold_in")


def _unit(words, dtype: str, open_low: bool):
    """A uniform float in [0, 1) ((0, 1] with `open_low`) from the uint32 `words`."""
    if dtype == "float64":
        hi = te.cast(words[0] >> _u32(5), "float64")  # 27 bits
        lo = te.cast(words[1] >> _u32(6), "float64")  # 26 bits
        bits, scale = hi * te.const(2.0**26, "float64") + lo, 2.0**-53
    else:
        bits, scale = te.cast(words[0] >> _u32(8), "float32"), 2.0**-24
        dtype = "float32"
    if open_low:
        bits = bits + te.const(1.0, dtype)
    return bits * te.const(scale, dtype)


def _wide(dtype: str, distribution: str) -> str:
    """The type a sample is computed in (Note [run-time random numbers])."""
    return "float64" if dtype == "float64" else "float32"


def samples_per_block(dtype: str, distribution: str) -> int:
    """How many samples one Philox block (four uint32 words) gives."""
    return 4 if _wide(dtype, distribution) == "float32" else 2


def _samples(words, wide: str, distribution: str) -> list:
    """The samples of one block with a = 0, b = 1, in `wide`."""
    if distribution == "normal" and wide == "float32":  # Box-Muller on two points
        return [z for pair in (words[:2], words[2:]) for z in _box_muller_f32(*pair)]
    if distribution == "normal":  # Box-Muller: both coordinates of one point
        u1 = _unit(words[:2], wide, open_low=True)
        u2 = _unit(words[2:], wide, open_low=False)
        radius = te.sqrt(te.const(-2.0, wide) * te.log(u1))
        angle = te.const(2.0 * np.pi, wide) * u2
        return [radius * te.cos(angle), radius * te.sin(angle)]
    if wide == "float64":
        return [_unit(words[:2], wide, False), _unit(words[2:], wide, False)]
    return [_unit(words[k : k + 1], wide, False) for k in range(4)]


def _box_muller_f32(w_radius, w_angle) -> list:
    """Both coordinates of the Box-Muller point of two uint32 words, in float32, the same bits
    on every target (Note [run-time random numbers])."""
    f32 = "float32"
    b = exact_math.Bindings()  # each value once (not a copy per use)
    w_radius = b(w_radius, "w_radius")
    u1 = b(te.fma(te.cast(w_radius, f32), te.const(2.0**-32, f32), te.const(2.0**-33, f32)), "u1")
    radius = b(te.sqrt(te.const(-2.0, f32) * exact_math.log_f32(u1)), "radius")
    cos, sin = exact_math.cos_sin_turns(b(w_angle, "w_angle") >> _u32(8), 24)
    return [b.wrap(radius * cos), b.wrap(radius * sin)]


def random(call: te.Tensor, shape, dtype: str, distribution: str, a: float, b: float,
           seed: int) -> te.Tensor:  # fmt: skip
    """Samples of `distribution` of `shape` and `dtype` for run `call` (an int64 scalar
    tensor) under `seed` (Note [run-time random numbers]): one stage computes the blocks,
    `samples_per_block` samples each, the next lays them out in `shape`."""
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"unknown distribution {distribution!r} ({', '.join(DISTRIBUTIONS)})")
    shape = tuple(d if isinstance(d, Expr) else int(d) for d in shape)
    total = symbolic.product(shape)  # an int, or an expr over symbolic dims
    per = samples_per_block(dtype, distribution)
    k0, k1 = seed_words(seed)
    wide = _wide(dtype, distribution)
    # a symbolic size is only known at run time: index in int64 then
    index = "int32" if isinstance(total, int) and total < 2**31 else "int64"
    # one rounding on every target: an explicit fma is never split, a*b + c may be fused
    scale, offset = te.const(b - a if distribution == "uniform" else b, wide), te.const(a, wide)

    def block(j):
        n = call() if call.ndim == 0 else call(0)
        counter = (*_split(te.cast(j, "int64"), "int64"), *_split(n, "int64"))
        values = []
        for z in _samples(philox(counter, (_u32(k0), _u32(k1))), wide, distribution):
            value = te.fma(scale, z, offset)
            values.append(te.cast(value, dtype))
        return tuple(values)

    count = max(1, -(-total // per)) if isinstance(total, int) else (total + (per - 1)) // per
    blocks = te.compute((count,), block, name="random_blocks")
    strides = [symbolic.product(shape[k + 1 :]) for k in range(len(shape))]

    def sample(j, k):
        value = blocks[per - 1](j)
        for m in range(per - 2, -1, -1):
            value = te.select(k == te.const(m, index), blocks[m](j), value)
        return value

    def flat_of(idx):
        flat = te.const(0, index)
        for i, stride in zip(idx, strides, strict=True):
            flat = flat + te.cast(i, index) * te.cast(stride, index)
        return flat

    last = shape[-1] if shape else 1
    if isinstance(total, int) or (isinstance(last, int) and last % per == 0):
        # every row starts at a multiple of `per`: the simplifier folds the division into the
        # output's loops

        def element(*idx):
            flat = flat_of(idx)
            return sample(flat // te.const(per, index), flat % te.const(per, index))

        return te.compute(shape, element, name="random", tag="injective")

    # A symbolic last dim: a row's start in the flat order has no known alignment to `per`,
    # and the output's vector loads from the blocks would be gathers; so the samples are
    # first laid out flat, in a loop whose index is the flat one (a shift and a mask), and
    # the output reads that contiguously (1.9x -> 1.5x a static build's time at 1M samples).
    def in_order(f):
        f = te.cast(f, index)
        return sample(f >> te.const(per.bit_length() - 1, index), f & te.const(per - 1, index))

    ordered = te.compute((total,), in_order, name="random_flat")
    return te.compute(shape, lambda *idx: ordered(flat_of(idx)), name="random", tag="injective")


# -- the numpy reference ----------------------------------------------------------------------


def philox_numpy(counter, key) -> tuple:
    """`philox` on numpy uint32 arrays (broadcast): the reference."""
    c0, c1, c2, c3 = (np.asarray(c, np.uint64) for c in counter)
    k0, k1 = (np.uint64(k) for k in key)
    mask = np.uint64(0xFFFFFFFF)
    for r in range(ROUNDS):
        if r:
            k0 = (k0 + np.uint64(KEY_STEPS[0])) & mask
            k1 = (k1 + np.uint64(KEY_STEPS[1])) & mask
        p0, p1 = c0 * np.uint64(MULTIPLIERS[0]), c2 * np.uint64(MULTIPLIERS[1])
        hi0, hi1 = p0 >> np.uint64(32), p1 >> np.uint64(32)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, p1 & mask, hi0 ^ c3 ^ k1, p0 & mask
    return tuple(w.astype(np.uint32) for w in (c0, c1, c2, c3))


def fold_in_numpy(stream: int, data: int) -> int:
    """`fold_in` on Python ints: the reference."""
    stream, data = int(stream) & (2**64 - 1), int(data) & (2**64 - 1)
    counter = (data & 0xFFFFFFFF, data >> 32, stream & 0xFFFFFFFF, stream >> 32)
    w0, w1 = (int(w) for w in philox_numpy(counter, FOLD_KEY)[:2])
    return int(np.uint64(w0 | w1 << 32).view(np.int64))


def _unit_numpy(words, wide, open_low):
    if wide == np.float64:
        bits = (words[0] >> 5).astype(np.float64) * 2.0**26 + (words[1] >> 6).astype(np.float64)
        scale = 2.0**-53
    else:
        bits, scale = (words[0] >> 8).astype(np.float32), np.float32(2.0**-24)
    return (bits + wide(1.0) if open_low else bits) * wide(scale)


def _box_muller_numpy(w_radius, w_angle) -> tuple:
    """`_box_muller_f32`'s point, the same u1 and u2, transformed in float64 (not rounded)."""
    u1 = (w_radius.astype(np.float32).astype(np.float64) * 2.0**-32 + 2.0**-33).astype(np.float32)
    radius = np.sqrt(-2.0 * np.log(u1.astype(np.float64)))
    angle = 2.0 * np.pi * (w_angle >> np.uint32(8)).astype(np.float64) * 2.0**-24
    return radius * np.cos(angle), radius * np.sin(angle)


def random_numpy(call: int, shape, dtype, distribution: str, a: float, b: float, seed: int):
    """`random` in numpy: the same values up to rounding: float32 normals within a few ulp (the
    kernel's float32 log, cos and sin against float64 here); double normals up to libm's log,
    cos and sin; double uniforms up to a + (b - a) u rounded twice (numpy has no fma)."""
    shape = tuple(int(d) for d in shape)
    total = int(np.prod(shape))
    per = samples_per_block(str(np.dtype(dtype)), distribution)
    j = np.arange(max(1, -(-total // per)), dtype=np.uint64)
    call = int(call) & ((1 << 64) - 1)
    counter = (j & np.uint64(0xFFFFFFFF), j >> np.uint64(32), call & 0xFFFFFFFF, call >> 32)
    words = philox_numpy(counter, seed_words(seed))
    wide = np.dtype(_wide(str(np.dtype(dtype)), distribution)).type
    if distribution == "normal" and wide == np.float32:
        pairs = [_box_muller_numpy(*words[k : k + 2]) for k in (0, 2)]
        z, scale = np.stack([c for pair in pairs for c in pair], -1), wide(b)
    elif distribution == "normal":
        u1, u2 = _unit_numpy(words[:2], wide, True), _unit_numpy(words[2:], wide, False)
        radius, angle = np.sqrt(wide(-2.0) * np.log(u1)), wide(2.0 * np.pi) * u2
        z, scale = np.stack([radius * np.cos(angle), radius * np.sin(angle)], -1), wide(b)
    elif wide == np.float64:
        z = np.stack([_unit_numpy(words[:2], wide, False), _unit_numpy(words[2:], wide, False)], -1)
        scale = wide(b - a)
    else:
        z, scale = (
            np.stack([_unit_numpy(words[k : k + 1], wide, False) for k in range(4)], -1),
            wide(b - a),
        )
    z = z.reshape(-1)[:total]
    if distribution == "normal" and wide == np.float32:  # z in float64: round once, at the end
        value = (np.float64(a) + np.float64(scale) * z).astype(np.float32)
    elif wide == np.float32:  # the kernel's fma: the float32 product is exact in float64
        value = (np.float64(scale) * z.astype(np.float64) + np.float64(wide(a))).astype(wide)
    else:  # numpy has no fma: this rounds twice where the kernel rounds once
        value = wide(a) + scale * z
    if np.dtype(dtype) == np.float16:
        value = value.astype(np.float32)
    return value.astype(dtype).reshape(shape)
