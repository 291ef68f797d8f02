"""tir's dot_u8i8 (vpdpbusd semantics) in every code generator: LLVM on VNNI, AVX-512BW, AVX2
and generic x86-64, C, and the tir interpreter; vectors of native and odd widths; the extreme
bytes where vpmaddubsw would saturate (255 * -128 + 255 * -128 < -32768) stay exact."""

import numpy as np
import pytest

import tessera
from tessera import te
from tessera.target import Target
from tessera.tir import op

R = np.random.default_rng(23)
TARGETS = ["llvm -mcpu=cascadelake", "llvm -mcpu=skylake-avx512", "llvm -mcpu=haswell",
           "llvm -mcpu=x86-64", "c"]  # fmt: skip


def _kernel(m, k4, n, bounded=False):
    A = te.placeholder((m, k4), "int32", name="A")
    B = te.placeholder((n, k4), "int32", name="B")
    k = te.reduce_axis((0, k4), name="k")
    C = te.compute(
        (m, n), lambda i, j: te.sum(op.dot_u8i8(0, A[i, k], B[j, k], bounded), axis=k), name="C"
    )
    s = te.create_schedule(C.op)
    s[C].reorder(C.op.axis[0], k, C.op.axis[1])
    s[C].vectorize(C.op.axis[1])
    return s, [A, B, C]


def _reference(a8, b8):
    return (a8.astype(np.int64) @ b8.astype(np.int64).T).astype(np.int32)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("n", [7, 12, 16, 44])
def test_dot_matches_integer_products(target, n):
    t = Target(target)
    if t.kind == "llvm" and not t.is_host:
        pytest.skip(f"this CPU cannot run {target}")
    a8 = R.integers(0, 256, (3, 32), dtype=np.uint8)
    b8 = R.integers(-128, 128, (n, 32), dtype=np.int8)
    a8[0], b8[0] = 255, -128  # the worst case of a saturating 16-bit pair sum
    s, args = _kernel(3, 8, n)
    f = tessera.build(s, args, target=t)
    c = np.zeros((3, n), np.int32)
    f(a8.view(np.int32), b8.view(np.int32), c)
    np.testing.assert_array_equal(c, _reference(a8, b8))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("n", [7, 16])
def test_bounded_dot_matches_integer_products(target, n):
    """dot_u8i8_bounded (Note [bounded pairs]) on b whose pairs keep |b0| + |b1| <= 128, many
    exactly 128, against a = 255: vpmaddubsw's largest pair sums, exact."""
    t = Target(target)
    if t.kind == "llvm" and not t.is_host:
        pytest.skip(f"this CPU cannot run {target}")
    a8 = R.integers(0, 256, (3, 32), dtype=np.uint8)
    first = R.integers(-128, 128, (n, 16))
    room = 128 - np.abs(first)
    b8 = np.zeros((n, 32), np.int64)
    b8[:, 0::2], b8[:, 1::2] = first, np.clip(np.sign(first) * room, -128, 127)  # at the bound
    b8[1, 1::2] = np.clip(R.integers(-room[1], room[1] + 1), -128, 127)  # inside it
    b8 = b8.astype(np.int8)
    a8[0] = 255
    s, args = _kernel(3, 8, n, bounded=True)
    f = tessera.build(s, args, target=t)
    c = np.zeros((3, n), np.int32)
    f(a8.view(np.int32), b8.view(np.int32), c)
    np.testing.assert_array_equal(c, _reference(a8, b8))
    from tessera.tir.interpreter import interpret

    c2 = np.zeros((3, n), np.int32)
    interpret(tessera.lower(*_kernel(3, 8, n, bounded=True))["main"], a8.view(np.int32),
              b8.view(np.int32), c2)  # fmt: skip
    np.testing.assert_array_equal(c2, c)


def test_interpreter_agrees():
    from tessera.tir.interpreter import interpret

    a8 = R.integers(0, 256, (2, 8), dtype=np.uint8)
    b8 = R.integers(-128, 128, (5, 8), dtype=np.int8)
    s, args = _kernel(2, 2, 5)
    func = tessera.lower(s, args)["main"]
    c = np.zeros((2, 5), np.int32)
    interpret(func, a8.view(np.int32), b8.view(np.int32), c)
    np.testing.assert_array_equal(c, _reference(a8, b8))


def test_operands_must_be_int32():
    with pytest.raises(TypeError, match="int32"):
        op.dot_u8i8(0, te.placeholder((1,), "uint8")[0], 0)


@pytest.mark.parametrize("target,vex", [("llvm -mcpu=alderlake", True),
                                        ("llvm -mcpu=sapphirerapids", None)])  # fmt: skip
def test_avx_vnni_targets_emit_vpdpbusd(target, vex):
    """Compiled only (this CPU may lack AVX-VNNI): 8 lanes on AVX-VNNI take the VEX form."""
    s, args = _kernel(2, 4, 8)
    f = tessera.build(s, args, target=target)
    lines = [ln.split() for ln in f.get_source("asm").splitlines() if "vpdpbusd" in ln]
    assert lines and (vex is None or all(ln[0] == "{vex}" for ln in lines))
