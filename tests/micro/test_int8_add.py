"""The int8 residual add (ORT's QLinearAdd, as the QDQ fusion writes it) on the micro target:
integers in fixed point (Note [fixed-point add] in topi/micro/requantize.py), the numpy model
of that arithmetic exactly, within one step of ONNX Runtime (equal where the ratios are powers
of two), and the same on the host build and on boards with and without DSP."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx import numpy_helper as nh

import tessera
from tessera.runtime import GraphModule, cpu
from tessera.topi.micro.requantize import add_fixed_form, add_fixed_reference

from .test_int8 import M4, needs_qemu

SHAPE = (1, 6, 5, 7)


def qlinear_add(scales, zps, dtype=np.int8, seed=0):
    """y = QLinearAdd(a, b) with scales (sa, sb, sc) and zero points (za, zb, zc); inputs."""
    rng = np.random.default_rng(seed)
    elem = TensorProto.INT8 if dtype == np.int8 else TensorProto.UINT8
    lo, hi = (-128, 128) if dtype == np.int8 else (0, 256)
    names = ["a", "sa", "za", "b", "sb", "zb", "sc", "zc"]
    inits = [nh.from_array(np.array(s, np.float32), n)
             for s, n in zip(scales, ("sa", "sb", "sc"), strict=True)]  # fmt: skip
    inits += [nh.from_array(np.array(z, dtype), n)
              for z, n in zip(zps, ("za", "zb", "zc"), strict=True)]  # fmt: skip
    node = helper.make_node("QLinearAdd", names, ["y"], domain="com.microsoft")
    graph = helper.make_graph(
        [node], "qadd",
        [helper.make_tensor_value_info(n, elem, list(SHAPE)) for n in ("a", "b")],
        [helper.make_tensor_value_info("y", elem, None)], inits,
    )  # fmt: skip
    opsets = [helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    a, b = (rng.integers(lo, hi, SHAPE).astype(dtype) for _ in range(2))
    return model, a, b


def _ort(model, a, b):
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"a": a, "b": b})[0]


def _build(model, target=M4):
    mod, params = tessera.frontend.from_onnx(model, {"a": SHAPE, "b": SHAPE})
    assert "qnn.add" in str(mod)
    return tessera.build(mod, target=target, params=params)


def _host(lib, a, b):
    m = GraphModule(lib["default"](cpu(0)))
    m.set_input("a", a)
    m.set_input("b", b)
    m.run()
    return m.get_output(0).numpy().copy()


# (scales, zero points): ResNet-like ratios, ties (powers of two), unsigned, large ratios
CASES = {
    "residual": ((0.031, 0.047, 0.052), (3, -7, -2), np.int8),
    "ties_powers_of_two": ((0.5, 0.25, 1.0), (0, 5, -1), np.int8),
    "uint8": ((0.02, 0.013, 0.03), (128, 120, 131), np.uint8),
    "ratios_above_one": ((0.9, 0.07, 0.05), (-4, 0, 10), np.int8),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_int8_add_is_fixed_point_on_micro(case):
    scales, zps, dtype = CASES[case]
    model, a, b = qlinear_add(scales, zps, dtype)
    y = _host(_build(model), a, b)
    ratios = [np.float32(np.float32(s) / np.float32(scales[2])) for s in scales[:2]]
    form = add_fixed_form(*ratios)
    np.testing.assert_array_equal(
        y, add_fixed_reference(a, b, zps[0], zps[1], form, zps[2], np.dtype(dtype).name)
    )
    expected = _ort(model, a, b).astype(np.int32)
    assert np.abs(y.astype(np.int32) - expected).max() <= 1
    if case == "ties_powers_of_two":  # exact ratios: ORT's half-to-even ties, bit for bit
        np.testing.assert_array_equal(y, expected)
    # other targets keep the float32 arithmetic of the separate ops qnn.add replaced
    va = (a.astype(np.int32) - zps[0]).astype(np.float32) * ratios[0]
    vb = (b.astype(np.int32) - zps[1]).astype(np.float32) * ratios[1]
    info = np.iinfo(dtype)
    want = np.clip(np.round((va + vb) + np.float32(zps[2])), info.min, info.max).astype(dtype)
    np.testing.assert_array_equal(_host(_build(model, "llvm"), a, b), want)


def test_add_fixed_form_bounds():
    ma, mb, s = add_fixed_form(0.5, 0.25)
    assert (ma, mb) == (2 ** (s - 1), 2 ** (s - 2)) and max(abs(ma), abs(mb)) <= 2**22
    assert add_fixed_form(3.0e6, 0.1) is None  # s below 1: the float form stays
    v = 255 * 2**22 * 2
    assert v < 2**31


@needs_qemu
@pytest.mark.parametrize("board", ["mps2-an386", "mps2-an385"], ids=["m4_dsp", "m3_no_dsp"])
def test_int8_add_on_boards_equals_the_host_build(board):
    from tessera.micro import Session, boards

    mcpu = boards.get_board(board).mcpu
    model, a, b = qlinear_add(*CASES["residual"])
    lib = _build(model, target=f"c -device=micro -mcpu={mcpu}")
    with Session(lib, board=board) as s:
        s.set_input("a", a)
        s.set_input("b", b)
        s.run()
        y = s.get_output(0)
    np.testing.assert_array_equal(y, _host(lib, a, b))
