"""Software prefetch of weights in the x86 conv schedule (Note [weight prefetch] in
topi/x86/conv2d.py): the rule over sizes, the prefetches in the kernel, results unchanged."""

import numpy as np
import pytest

import tessera
from tessera import te
from tessera.topi.testing import build_cases, check_ops
from tessera.topi.x86.asm import fma_loops, loop_summary
from tessera.topi.x86.conv2d import (
    ConvTile,
    _prefetch_pays,
    conv2d_nchwc,
    prefetch_max_reuse,
)
from tessera.topi.x86.cpu import target_cache_sizes
from tessera.topi.x86.layout import transform_array

RNG = np.random.default_rng(0)
HOST = tessera.Target("llvm")
HASWELL = tessera.Target("llvm -mcpu=haswell")
AVX512 = tessera.Target("llvm -mcpu=skylake-avx512")
MIB = 1 << 20


def _conv(n, c, hw, o, k, stride=1, pad=0, block=16):
    x = te.placeholder((n, c // block, *hw, block), name="x")
    w = te.placeholder((o // block, c // block, k, k, block, block), name="w")
    y = conv2d_nchwc(x, w, (stride, stride), (pad,) * 4, (1, 1))
    return y, w


@pytest.mark.parametrize(
    "conv, tile, l2, pays",
    [
        ((1, 512, (7, 7), 2048, 1), ConvTile(7, 2), MIB, True),  # 4 MiB, chunks of 64 KiB
        ((1, 512, (7, 7), 2048, 1), ConvTile(7, 2), 8 * MIB, False),  # the weights fit in L2
        ((1, 512, (14, 14), 512, 3, 2, 1), ConvTile(7, 2), MIB, False),  # chunks of 576 KiB
        ((1, 512, (14, 14), 512, 3, 2, 1), ConvTile(7, 2), 4 * MIB, True),
        ((1, 1024, (14, 14), 512, 1), ConvTile(7, 2), MIB, False),  # 196 outputs per weight
        ((2, 512, (7, 7), 2048, 1), ConvTile(7, 2), MIB, False),  # batch 2: 98
    ],
)
def test_the_rule_over_sizes(conv, tile, l2, pays):
    y, _ = _conv(*conv)
    acc = y  # the rule reads the conv's reduction: the accumulator stage has the same op body
    assert _prefetch_pays(y, acc, tile, AVX512, l2) is pays
    assert prefetch_max_reuse(AVX512) >= 49  # 7x7 outputs (stage 4 of ResNet-50) are covered


def test_the_reuse_bound_is_the_targets_balance():
    """Note [machine balance]: a 32-byte AVX2 vector arrives from memory in half the FMAs of a
    64-byte one, so 49 outputs per weight make memory a smaller share: no prefetch there."""
    assert prefetch_max_reuse(AVX512) == 64 and prefetch_max_reuse(HASWELL) == 32
    y, _ = _conv(1, 512, (7, 7), 2048, 1)
    assert _prefetch_pays(y, y, ConvTile(7, 2), AVX512, MIB)
    assert not _prefetch_pays(y, y, ConvTile(7, 2), HASWELL, MIB)


def test_depthwise_convs_never_prefetch():
    x = te.placeholder((1, 4, 7, 7, 16), name="x")
    w = te.placeholder((4, 1, 3, 3, 1, 16), name="w")
    y = conv2d_nchwc(x, w, (1, 1), (1, 1, 1, 1), (1, 1), groups=64)
    assert not _prefetch_pays(y, y, ConvTile(7, 1), AVX512, 1)


def _case(n, c, hw, o, k, stride=1, pad=0, block=16):
    x = RNG.standard_normal((n, c, *hw), dtype=np.float32)
    wt = RNG.standard_normal((o, c, k, k), dtype=np.float32)
    xb = transform_array(x, "NCHW", f"NCHW{block}c")
    wb = transform_array(wt, "OIHW", f"OIHW{block}i{block}o")
    attrs = dict(strides=(stride, stride), padding=(pad,) * 4, dilation=(1, 1), groups=1)
    return ("nn.conv2d_nchwc", [xb, wb], attrs)


def _weights_bytes(case) -> int:
    return case[1][1].nbytes


# weights of 1.1 to 4 MiB (more than L2 where these tests run), chunks of at most 144 KiB;
# 28-50 outputs per weight (AVX2 prefetches up to 32, AVX-512 up to 64)
CASES = [
    (1, 512, (7, 7), 2048, 1),  # stage 4 of ResNet-50
    (1, 512, (5, 7), 1024, 1),  # odd spatial sizes
    (2, 64, (9, 9), 512, 3, 2, 1),  # batch 2, strided, padded 3x3: 5x5 outputs
    (1, 512, (4, 7), 1024, 1),  # 28 outputs: prefetched on AVX2 too
]


def _outputs(case) -> int:
    """Outputs per weight: batch x output rows x output columns."""
    (x, _), attrs = case[1], case[2]
    n, _, h, w, _ = x.shape
    stride, pad = attrs["strides"][0], attrs["padding"][0]
    k = case[1][1].shape[2]
    return n * ((h + 2 * pad - k) // stride + 1) * ((w + 2 * pad - k) // stride + 1)


@pytest.mark.parametrize("target", [HOST, HASWELL], ids=["host", "haswell"])
def test_prefetching_convs_match_reference(target):
    block = max(8, target.vector_lanes("float32"))
    cases = [_case(*c, block=block) for c in CASES]
    l2 = target_cache_sizes(target)[2]
    mod, funcs = build_cases(cases, target, schedule_target="x86")
    for case, (name, f) in zip(cases, funcs.items(), strict=True):
        ocb = case[1][1].shape[0]
        if 4 * 4 * _weights_bytes(case) // ocb <= l2:  # chunks of <= 4 blocks in a quarter of L2
            few = _outputs(case) <= prefetch_max_reuse(target)
            assert ("prefetch" in str(f)) == (_weights_bytes(case) > l2 and few), name
    check_ops(cases, target, rtol=1e-4, atol=1e-4, schedule_target="x86")


def test_prefetches_sit_among_the_fmas_without_spills():
    case = _case(*CASES[0], block=max(8, HOST.vector_lanes("float32")))  # the host's block
    if _weights_bytes(case) <= target_cache_sizes(HOST)[2]:
        pytest.skip("this CPU's L2 holds the weights: no prefetch")
    target = HOST
    if _outputs(case) > prefetch_max_reuse(HOST):
        # AVX2's balance (Note [machine balance]) prefetches for at most 32 outputs, not these
        # 49: the same CPU with slower memory described (-dram-bytes-per-cycle) does
        target = tessera.Target("llvm -dram-bytes-per-cycle=2")
        assert _outputs(case) <= prefetch_max_reuse(target)
    mod, _ = build_cases([case], target, schedule_target="x86")
    loops = fma_loops(mod.get_source("asm"))
    if not loops:
        pytest.skip("no x86 FMA loops on this host")
    assert any(any(x.startswith("prefetch") for x in body) for body in loops)
    # the prefetch addresses take registers: %rbp serves as one (no frame pointer), so count
    # spills as accesses relative to %rsp and stores
    assert all(loop_summary(body)["stores"] == 0 for body in loops)
    assert not any("(%rsp)" in x for body in loops for x in body)
