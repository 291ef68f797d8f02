"""The i8mm int8 dense (topi/arm/int8_mmla.py, Note [i8mm matrix step]) without an emulator: the
mmla_u8i8 step's meaning (interpreter, and the host's LLVM build, which emits it as two dot
steps), the column-pair weight packing, the kernel against numpy's integer product with row,
column and k tails, the usmmla instruction in the aarch64 code where the target has i8mm, and
the "arm" strategy of qnn.dense choosing it only there. QEMU runs: tests/cross/test_arm_kernels.py.
"""

import re

import numpy as np
import pytest
from onnx import helper

import tessera
from tessera import te, tir
from tessera.frontend.testing import make_model
from tessera.graph.op import get_op
from tessera.tir import op as tir_op
from tessera.topi.arm import int8_mmla

AARCH64 = "llvm -mtriple=aarch64-linux-gnu"


def mmla_numpy(acc, a, b):
    """usmmla per 4 lanes, from its definition: lane 2i + j = acc + row i of a . row j of b."""
    a8 = a.view(np.uint8).reshape(-1, 2, 8).astype(np.int64)
    b8 = b.view(np.int8).reshape(-1, 2, 8).astype(np.int64)
    prod = np.einsum("sik,sjk->sij", a8, b8).reshape(-1)
    return (acc.astype(np.int64) + prod).astype(np.int32)


def words(rng, n):
    return rng.integers(-(2**31), 2**31, n, dtype=np.int64).astype(np.int32)


def test_interpreter_step_is_the_matrix_product():
    from tessera.tir.interpreter import _mmla_u8i8

    rng = np.random.default_rng(0)
    acc, a, b = words(rng, 8), words(rng, 8), words(rng, 8)
    np.testing.assert_array_equal(_mmla_u8i8(acc, a, b), mmla_numpy(acc, a, b))


def test_the_step_on_the_host_is_the_matrix_product():
    """Vectorized over 8 lanes (two 4-lane blocks) and built for this machine (no i8mm: two
    dot_u8i8 steps on shuffled words)."""
    n = 32
    a, b, c = (te.placeholder((n,), "int32", name=v) for v in "abc")
    out = te.compute((n,), lambda i: tir_op.mmla_u8i8(c[i], a[i], b[i]), name="out")
    s = te.create_schedule(out.op)
    _, inner = s[out].split(out.op.axis[0], factor=8)
    s[out].vectorize(inner)
    f = tessera.build(s, [c, a, b, out], target="llvm", name="mmla")
    rng = np.random.default_rng(1)
    cv, av, bv = words(rng, n), words(rng, n), words(rng, n)
    got = np.zeros(n, np.int32)
    f(cv, av, bv, got)
    np.testing.assert_array_equal(got, mmla_numpy(cv, av, bv))


def test_the_step_refuses_lanes_that_are_not_whole_blocks():
    n = 6
    a, b = (te.placeholder((n,), "int32", name=v) for v in "ab")
    out = te.compute((n,), lambda i: tir_op.mmla_u8i8(0, a[i], b[i]), name="out")
    s = te.create_schedule(out.op)
    with pytest.raises(Exception, match="whole 4-lane segments"):
        tessera.build(s, [a, b, out], target="llvm", name="mmla")
    with pytest.raises(TypeError, match="int32"):
        tir_op.mmla_u8i8(0, tir.const(1.0, "float32"), a[0])


@pytest.mark.parametrize("n, k, pairs", [(13, 21, 4), (8, 16, 1), (3, 40, 2)])
def test_weight_packing_round_trips(n, k, pairs):
    w = np.random.default_rng(0).integers(-128, 128, (n, k)).astype(np.int8)
    wm = int8_mmla.pack_mmla_weight(w, pairs)
    assert wm.shape == (-(-n // (2 * pairs)), -(-k // 8), 4 * pairs)
    np.testing.assert_array_equal(int8_mmla.unpack_mmla_weight(wm, n, k), w)
    # lane 4c + 2j + word of panel p, step q: word (2q + word) of column 2 (p pairs + c) + j
    p, q, c, j, word = 0, 1, 0, 1, 1
    expected = w[2 * (p * pairs + c) + j, 8 * q + 4 * word : 8 * q + 4 * word + 4]
    got = wm[p, q, 4 * c + 2 * j + word : 4 * c + 2 * j + word + 1].view(np.int8)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("lead, k, n", [((5,), 21, 13), ((2, 8), 64, 32), ((1,), 40, 7)])
def test_kernel_matches_numpy_on_the_host(lead, k, n, dtype):
    rng = np.random.default_rng(0)
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max + 1, (*lead, k)).astype(dtype)
    w = rng.integers(-128, 128, (n, k)).astype(np.int8)
    wm = int8_mmla.pack_mmla_weight(w, 4)
    xt = te.placeholder(x.shape, dtype, name="x")
    wt = te.placeholder(wm.shape, "int32", name="wm")
    out = int8_mmla.qnn_dense_mmla(xt, wt, n)
    target = tessera.Target("llvm")
    with target:
        s = int8_mmla.schedule_qnn_dense_mmla([out], target)
        f = tessera.build(s, [xt, wt, out], target=target, name="qdense_mmla")
    got = np.zeros((*lead, n), np.int32)
    f(x, wm, got)
    xu = x.astype(np.int64) + (128 if dtype == "int8" else 0)
    np.testing.assert_array_equal(got, (xu @ w.T.astype(np.int64)).astype(np.int32))
    ref = get_op("qnn.dense_mmla").evaluate([x, wm], {"units": n})[0]
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("core, form", [("neoverse-n2", "v"), ("neoverse-v1", "z")])
def test_aarch64_with_i8mm_emits_usmmla(core, form):
    """NEON's usmmla on 128-bit cores (neoverse-n2's SVE is as wide), SVE's on whole 256-bit
    registers (neoverse-v1: two 2x2 blocks per instruction, the data's row pair repeated)."""
    target = tessera.Target(f"{AARCH64} -mcpu={core}")
    lanes = int8_mmla.mmla_lanes(target)
    assert lanes == {"v": 4, "z": 8}[form]
    wm = int8_mmla.pack_mmla_weight(np.zeros((64, 96), np.int8), 4)
    xt = te.placeholder((16, 96), "uint8", name="x")
    wt = te.placeholder(wm.shape, "int32", name="wm")
    out = int8_mmla.qnn_dense_mmla(xt, wt, 64, lanes)
    with target:
        s = int8_mmla.schedule_qnn_dense_mmla([out], target)
        asm = tessera.build(s, [xt, wt, out], target=target, name="k").get_source("asm")
    # the register tile: 16 usmmla per step of 8 k bytes, all of one form, no dot steps
    assert len(re.findall(rf"usmmla\s+{form}\d", asm)) == 16, asm.count("usmmla")
    assert asm.count("usmmla") == 16
    assert "usdot" not in asm and "sdot" not in asm


@pytest.mark.parametrize(
    "options, impl",
    [
        ("-mcpu=neoverse-v1", "mmla"),
        ("-mcpu=neoverse-n2", "mmla"),
        ("-mcpu=cortex-a76 -mattr=+i8mm", "mmla"),
        ("-mcpu=neoverse-v1 -mattr=-i8mm", "panels"),
        ("-mcpu=cortex-a76", "panels"),
        ("-mcpu=neoverse-n1", "panels"),
    ],
)
def test_strategy_takes_mmla_where_the_target_has_i8mm(options, impl):
    target = tessera.Target(f"{AARCH64} {options}")
    rng = np.random.default_rng(0)
    w = rng.integers(-128, 128, (96, 64)).astype(np.int8)
    model = make_model([helper.make_node("MatMulInteger", ["a", "b"], ["y"])],
                       {"a": ((16, 96), np.uint8)}, ["y"], {"b": w})  # fmt: skip
    mod, params = tessera.frontend.from_onnx(model)
    ll = tessera.build(mod, target=target, params=params).get_source("ll")
    assert ("usmmla" in ll) == (impl == "mmla")


def test_x86_targets_have_no_qnn_dense_strategy():
    from tessera.topi.strategy import find_strategy

    assert find_strategy("qnn.dense", tessera.Target("llvm -mcpu=skylake-avx512")) is None
    assert find_strategy("qnn.dense", tessera.Target(f"{AARCH64} -mcpu=neoverse-v1")).key == "arm"
